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
