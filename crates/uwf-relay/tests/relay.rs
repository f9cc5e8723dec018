//! The relay against the store contracts: a [`RelayStore`] and a
//! [`RelayState`] served by a [`Relay`] over the memory and filesystem
//! backends pass the same test bodies those backends pass, and the relay
//! itself keeps what it promises (a private socket, error kinds carried,
//! connections closed when it stops).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use uwf_state::prelude::*;

use uwf_cas::{MemStore, Node, Store, StoreErrorKind};
use uwf_relay::{Fallback, Relay, RelayClient, RelayState, RelayStore};
use uwf_state::{FsState, ThreadStore};

/// What keeps a relayed store alive: the relay and the root under it.
struct Served {
    _relay: Relay,
    _root: tempfile::TempDir,
}

/// A relay over a fresh memory store and a fresh filesystem state, and a
/// client of it; the fallback opens the same two.
fn served() -> (RelayStore, RelayState, Served) {
    let root = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let state: Arc<dyn ThreadStore> = Arc::new(FsState::new(root.path()));
    let relay = Relay::start_in(root.path(), Arc::clone(&store), Arc::clone(&state)).unwrap();
    let client = RelayClient::connect(relay.path()).unwrap();
    let fallback = Fallback::new(Box::new(move || {
        Ok((Arc::clone(&store), Arc::clone(&state)))
    }));
    (
        RelayStore::new(Arc::clone(&client), Arc::clone(&fallback)),
        RelayState::new(client, fallback),
        Served {
            _relay: relay,
            _root: root,
        },
    )
}

/// The CAS contract of `uwf-cas` through the relay.
mod cas_contract {
    uwf_cas::store_contract_tests!({
        let (store, _, guard) = super::served();
        (store, guard)
    });
}

/// The `ThreadStore` contract of `uwf-state` through the relay.
mod state_contract {
    uwf_state::thread_store_contract_tests!({
        let (_, state, guard) = super::served();
        (state, guard)
    });
}

/// A relay over a fresh memory store and filesystem state, with the root
/// it lives in.
fn bare_relay() -> (Relay, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let relay = Relay::start_in(
        root.path(),
        Arc::new(MemStore::new()),
        Arc::new(FsState::new(root.path())),
    )
    .unwrap();
    (relay, root)
}

fn node(n: u64) -> Node {
    Node {
        type_hash: uwf_cas::Hash::from_u64(1),
        payload: serde_json::json!({ "n": n }),
        timestamp: 1,
    }
}

#[test]
fn the_socket_is_private_and_gone_when_the_relay_stops() {
    let (relay, _root) = bare_relay();
    let dir = relay.path().parent().unwrap().to_path_buf();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
    let client = RelayClient::connect(relay.path()).unwrap();
    let store = RelayStore::new(
        client,
        Fallback::new(Box::new(|| Err("no fallback in this test".into()))),
    );
    let n = node(1);
    assert!(store.insert(n.hash(), &n).unwrap().1);
    drop(relay);
    assert!(!dir.exists());
    // The engine is gone: the agent's calls fail as unavailable (worth a
    // retry of the step), not as a missing node.
    let e = store.get(n.hash()).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
}

#[test]
fn the_stores_errors_keep_their_kind_and_a_forged_node_is_refused() {
    let (store, state, _served) = served();
    // A node sent under another node's name.
    let (a, b) = (node(1), node(2));
    let e = store.insert(b.hash(), &a).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Invalid, "{e}");
    assert!(!store.has(b.hash()).unwrap());
    // Calls the relay does not carry reach the store itself.
    assert!(store.insert(a.hash(), &a).unwrap().1);
    let listed: Vec<_> = store.hashes().collect::<Result<_, _>>().unwrap();
    assert_eq!(listed, vec![a.hash()]);
    assert_eq!(state.threads().unwrap().len(), 0);
    // The fallback that cannot open says so, as unavailable.
    let (relay, _root) = bare_relay();
    let client = RelayClient::connect(relay.path()).unwrap();
    let state = RelayState::new(
        client,
        Fallback::new(Box::new(|| Err("the store is down".into()))),
    );
    assert_eq!(
        state
            .thread_head(uwf_protocol::ThreadId::from_u128(7))
            .unwrap(),
        None
    );
    let e = state.threads().unwrap_err();
    assert_eq!(e.kind(), uwf_state::ErrorKind::Unavailable);
    assert!(e.to_string().contains("the store is down"), "{e}");
}

#[test]
fn a_relay_whose_socket_file_was_removed_still_stops() {
    let (relay, root) = bare_relay();
    // A temporary-directory cleaner, say.
    drop(root);
    drop(relay); // returns
}

#[test]
fn a_leftover_connection_does_not_keep_the_relay_serving() {
    let (relay, _root) = bare_relay();
    // A connection that never says anything (an agent's child holding it).
    let idle = std::os::unix::net::UnixStream::connect(relay.path()).unwrap();
    drop(relay); // returns: the idle connection is closed, not waited for
    use std::io::Read;
    let mut buf = [0u8; 1];
    assert_eq!((&idle).read(&mut buf).unwrap_or(0), 0);
}

#[test]
fn something_else_on_the_socket_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("s");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        use std::io::Write;
        let (mut s, _) = listener.accept().unwrap();
        let _ = s.write_all(b"\0\0\0\x02{}\0\0\0\0");
    });
    let e = RelayClient::connect(&path).unwrap_err();
    assert!(e.to_string().contains("does not answer as one"), "{e}");
    server.join().unwrap();
    let e = RelayClient::connect(&root.path().join("absent")).unwrap_err();
    assert!(e.to_string().contains("cannot connect"), "{e}");
}

#[test]
fn a_checking_relay_refuses_what_the_type_does_not_allow_and_the_agent_compiles_nothing() {
    use uwf_cas::{Cas, CasError};
    let root = tempfile::tempdir().unwrap();
    let engine = Cas::with_store(Arc::new(MemStore::new()) as Arc<dyn Store>).unwrap();
    let ty = engine
        .put_schema(serde_json::json!({
            "type": "object",
            "required": ["n"],
            "properties": { "n": { "type": "integer" } }
        }))
        .unwrap()
        .hash;
    let state: Arc<dyn ThreadStore> = Arc::new(FsState::new(root.path()));
    let relay = Relay::start_checking_in(root.path(), engine.clone(), Arc::clone(&state)).unwrap();
    let client = RelayClient::connect(relay.path()).unwrap();
    assert!(client.checks());
    let local = Arc::clone(engine.store());
    let fallback = Fallback::new(Box::new(move || {
        Ok((Arc::clone(&local), Arc::clone(&state)))
    }));
    let through: Arc<dyn Store> = Arc::new(RelayStore::new(Arc::clone(&client), fallback));
    assert!(through.checks_types());
    let agent = Cas::with_store(through).unwrap();

    // Refused by the engine, with every violation, and not stored.
    let bad = serde_json::json!({ "n": "one" });
    match agent.put(ty, bad.clone()) {
        Err(CasError::Invalid {
            type_hash,
            violations,
            ..
        }) => {
            assert_eq!(type_hash, ty);
            assert_eq!(violations.len(), 1, "{violations:?}");
            assert_eq!(violations[0].path, "/n");
        }
        other => panic!("expected the engine to refuse the node, got {other:?}"),
    }
    assert!(!engine.has(uwf_cas::node::hash_typed(ty, &bad)).unwrap());
    // A node of a type the store does not have is refused, naming it.
    let unknown = uwf_cas::Hash::from_u64(99);
    let e = agent.put(unknown, serde_json::json!({})).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains(&unknown.to_string()), "{e}");

    // Accepted and stored in the engine's store.
    let good = agent.put(ty, serde_json::json!({ "n": 1 })).unwrap();
    assert!(good.created);
    assert!(engine.has(good.hash).unwrap());
    // The agent's side compiled no schema: storing one it does not have
    // is checked by the engine too.
    assert_eq!(agent.compiled_schemas(), 0);
    let e = agent
        .put_schema(serde_json::json!({ "type": "object", "$dynamicRef": "#x" }))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Invalid, "{e}");
    assert_eq!(agent.compiled_schemas(), 0);

    // A relay that does not check says so, and the agent checks itself.
    let (plain, _root) = bare_relay();
    assert!(!RelayClient::connect(plain.path()).unwrap().checks());
}

#[test]
fn relayed_inserts_read_the_directory_and_store_through_the_checking_engine() {
    use uwf_cas::{Cas, CasError, FsStore};
    use uwf_relay::RelayedInserts;
    let root = tempfile::tempdir().unwrap();
    let engine = Cas::with_store(
        Arc::new(FsStore::open(root.path().join("cas")).unwrap()) as Arc<dyn Store>
    )
    .unwrap();
    let ty = engine
        .put_schema(serde_json::json!({ "type": "object", "required": ["n"] }))
        .unwrap()
        .hash;
    let state: Arc<dyn ThreadStore> = Arc::new(FsState::new(root.path()));
    let relay = Relay::start_checking_in(root.path(), engine.clone(), state).unwrap();
    // The agent's own view of the same directory.
    let local: Arc<dyn Store> = Arc::new(FsStore::open(root.path().join("cas")).unwrap());
    let client = RelayClient::connect(relay.path()).unwrap();
    let agent = Cas::with_store(
        Arc::new(RelayedInserts::new(Arc::clone(&local), client)) as Arc<dyn Store>
    )
    .unwrap();
    assert!(agent.store().checks_types());
    assert!(matches!(
        agent.put(ty, serde_json::json!({})),
        Err(CasError::Invalid { .. })
    ));
    let stored = agent.put(ty, serde_json::json!({ "n": 1 })).unwrap();
    // Written by the engine, read by the agent from the directory.
    assert_eq!(local.get(stored.hash).unwrap(), Some(stored.node.clone()));
    assert_eq!(agent.get(stored.hash).unwrap(), stored.node);
    assert_eq!(agent.compiled_schemas(), 0);
    // Once the engine's relay is gone, storing fails rather than writing
    // unchecked.
    drop(relay);
    let e = agent.put(ty, serde_json::json!({ "n": 2 })).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
}

#[test]
fn nodes_stored_together_go_in_one_request_and_one_refused_stores_none() {
    use uwf_cas::{Cas, CasError};
    let root = tempfile::tempdir().unwrap();
    let engine = Cas::with_store(Arc::new(MemStore::new()) as Arc<dyn Store>).unwrap();
    let ty = engine
        .put_schema(serde_json::json!({ "type": "object", "required": ["n"] }))
        .unwrap()
        .hash;
    let state: Arc<dyn ThreadStore> = Arc::new(FsState::new(root.path()));
    let relay = Relay::start_checking_in(root.path(), engine.clone(), Arc::clone(&state)).unwrap();
    let client = RelayClient::connect(relay.path()).unwrap();
    let local = Arc::clone(engine.store());
    let fallback = Fallback::new(Box::new(move || {
        Ok((Arc::clone(&local), Arc::clone(&state)))
    }));
    let agent =
        Cas::with_store(Arc::new(RelayStore::new(client, fallback)) as Arc<dyn Store>).unwrap();

    // One refused: none stored, and the refusal names the bad node's type.
    let good = agent.pending(ty, serde_json::json!({ "n": 1 })).unwrap();
    let bad = agent.pending(ty, serde_json::json!({ "m": 1 })).unwrap();
    let (good_hash, bad_hash) = (good.hash(), bad.hash());
    match agent.put_pending(vec![good.clone(), bad]) {
        Err(CasError::Invalid { type_hash, .. }) => assert_eq!(type_hash, ty),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!engine.has(good_hash).unwrap());
    assert!(!engine.has(bad_hash).unwrap());

    // All good: stored, each answered in order.
    let other = agent.pending(ty, serde_json::json!({ "n": 2 })).unwrap();
    let stored = agent.put_pending(vec![good, other.clone()]).unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0].hash, good_hash);
    assert_eq!(stored[1].hash, other.hash());
    assert!(stored.iter().all(|s| s.created));
    assert!(engine.has(good_hash).unwrap() && engine.has(other.hash()).unwrap());
}
