//! The PostgreSQL backend against a real server (started by
//! `uwf_pg_testing`; skipped loudly without the server binaries,
//! failing instead under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use uwf_pg_testing::{self as testing, TestDb};
use uwf_state::prelude::*;
use uwf_store_pg::PgStore;

/// A store on a fresh database, or `None` when skipped.
fn fresh() -> Option<(PgStore, TestDb)> {
    let db = testing::database()?;
    let store = PgStore::connect(&db.url, None).unwrap();
    Some((store, db))
}

/// The CAS contract of `uwf-cas`, the same test bodies the filesystem and
/// memory stores pass.
mod cas_contract {
    uwf_cas::store_contract_tests!({
        let Some(pair) = super::fresh() else { return };
        pair
    });
}

/// The `ThreadStore` contract of `uwf-state`, the same test bodies the
/// filesystem backend passes.
mod state_contract {
    uwf_state::thread_store_contract_tests!({
        let Some(pair) = super::fresh() else { return };
        pair
    });
}

/// The `RunQueue` contract of `uwf-state` (the run queue of `uwf
/// worker`), the same test bodies the filesystem backend passes.
mod run_queue_contract {
    uwf_state::run_queue_contract_tests!({
        let Some(pair) = super::fresh() else { return };
        pair
    });
}

use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::json;
use uwf_cas::{Cas, CasError, FsStore, Hash, Node, Store, StoreErrorKind};
use uwf_protocol::WorkflowLimits;
use uwf_state::slots::SlotError;
use uwf_state::{Collecting, ErrorKind, Heads, NodeGuard, StateError, ThreadStore};
use uwf_store_pg::{PgError, PgOptions};

/// A thread id for these tests.
const T1: uwf_protocol::ThreadId = uwf_protocol::ThreadId::from_u128(1);

/// Polls `cond` until it holds; panics after a minute (a hang, not a
/// timing assertion).
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn racing_inits_apply_each_migration_exactly_once() {
    let Some(db) = testing::database() else {
        return;
    };
    // `connect` only connects: the schema is still missing.
    let stores: Vec<PgStore> = (0..8)
        .map(|_| PgStore::connect(&db.url, None).unwrap())
        .collect();
    assert_eq!(stores[0].schema_version().unwrap(), 0);
    let barrier = Barrier::new(8);
    let reports: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = stores
            .iter()
            .map(|store| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    store.init()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let latest = uwf_store_pg::schema::latest_version();
    let mut applied = Vec::new();
    for r in reports {
        let r = r.unwrap_or_else(|e| panic!("a racing init failed: {e}"));
        assert_eq!(r.to, latest);
        applied.extend(r.applied);
    }
    applied.sort_unstable();
    let all: Vec<i32> = (1..=latest).collect();
    assert_eq!(applied, all, "every migration applied exactly once");
    let row = db
        .client()
        .query_one(
            "SELECT count(*), count(DISTINCT version), max(version) FROM uwf_schema_version",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), i64::from(latest));
    assert_eq!(row.get::<_, i64>(1), i64::from(latest));
    assert_eq!(row.get::<_, Option<i32>>(2), Some(latest));
    // Again: nothing to do.
    assert!(stores[3].init().unwrap().applied.is_empty());
    assert_eq!(stores[5].schema_version().unwrap(), latest);
}

#[test]
fn first_use_creates_the_schema_and_a_newer_schema_is_refused() {
    let Some(db) = testing::database() else {
        return;
    };
    let store = PgStore::connect(&db.url, None).unwrap();
    assert_eq!(store.thread_head(T1).unwrap(), None);
    assert_eq!(
        store.schema_version().unwrap(),
        uwf_store_pg::schema::latest_version()
    );
    db.client()
        .execute(
            "INSERT INTO uwf_schema_version (version, name) VALUES (99, 'future')",
            &[],
        )
        .unwrap();
    let newer = PgStore::connect(&db.url, None).unwrap();
    match newer.threads() {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Invalid);
            assert!(e.to_string().contains("schema version 99"), "{e}");
        }
        Ok(t) => panic!("a newer schema was used: {t:?}"),
    }
    assert!(matches!(
        newer.init(),
        Err(PgError::SchemaTooNew { found: 99, .. })
    ));
}

/// The object file of `hash` in a filesystem store (layout of docs/cas.md).
fn object_file(cas_dir: &std::path::Path, hash: Hash) -> std::path::PathBuf {
    let name = hash.to_string();
    cas_dir
        .join("objects")
        .join(&name[..2])
        .join(format!("{}.json", &name[2..]))
}

#[test]
fn nodes_have_the_same_hashes_and_bytes_as_in_the_filesystem_store() {
    let Some((pg, db)) = fresh() else { return };
    let dir = tempfile::tempdir().unwrap();
    let fs = FsStore::open(dir.path().join("cas")).unwrap();
    let payloads = [
        json!({ "z": 1, "a": [1.5, -0.0, 1e300, 12345678901234567890u64], "é": "ünïcødé ✓" }),
        json!({ "nested": { "b": null, "a": true }, "text": "line\nbreak \"quoted\" \u{1F600}" }),
        json!({ "prev": null, "n": -42 }),
        json!([]),
        json!("just a string"),
    ];
    let hashes = |store: &dyn Store| -> Vec<Hash> {
        let cas = Cas::new(store).unwrap();
        let t = cas
            .put_schema(json!({ "title": "any", "description": "anything at all" }))
            .unwrap()
            .hash;
        let mut out = vec![t];
        for p in &payloads {
            out.push(cas.put(t, p.clone()).unwrap().hash);
        }
        out
    };
    assert_eq!(
        hashes(&fs),
        hashes(&pg),
        "the same puts give the same hashes"
    );
    let listed = |s: &dyn Store| {
        let mut v: Vec<Hash> = s.hashes().map(Result::unwrap).collect();
        v.sort();
        v
    };
    assert_eq!(listed(&fs), listed(&pg));
    let mut raw = db.client();
    for h in listed(&fs) {
        let from_fs = fs.get(h).unwrap().unwrap();
        // The filesystem node itself, timestamp included, into PostgreSQL.
        pg.remove(h).unwrap();
        assert!(pg.insert(h, &from_fs).unwrap().1);
        let from_pg = pg.get(h).unwrap().unwrap();
        assert_eq!(from_pg, from_fs);
        assert_eq!(from_pg.hash(), h);
        // Byte for byte: the file is the node's JSON and a newline; the row
        // keeps the payload's JSON exactly as the file has it.
        let file = std::fs::read(object_file(&dir.path().join("cas"), h)).unwrap();
        let mut encoded = serde_json::to_vec(&from_pg).unwrap();
        encoded.push(b'\n');
        assert_eq!(encoded, file, "{h}");
        let row_payload: Vec<u8> = raw
            .query_one(
                "SELECT payload FROM uwf_nodes WHERE hash = $1",
                &[&h.to_string()],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            row_payload,
            serde_json::to_vec(&from_fs.payload).unwrap(),
            "{h}"
        );
    }
    assert!(Cas::new(&pg).unwrap().verify().unwrap().is_ok());
}

/// A step's nodes and its head's move in one transaction
/// (`Heads::swap_head_storing`): both happen, or the head stays and the
/// caller takes the general path.
#[test]
fn a_step_is_stored_with_its_head_or_the_head_stays() {
    use uwf_state::NodeRow;
    let Some((pg, db)) = fresh() else { return };
    let node = |n: u64, text: &str| Node {
        type_hash: Hash::from_u64(7),
        payload: json!({ "n": n, "text": text }),
        timestamp: 1_000 + n,
    };
    let row = |n: &Node, bytes: &'static [u8]| NodeRow {
        hash: n.hash(),
        type_hash: n.type_hash,
        payload: bytes,
        timestamp: n.timestamp,
    };
    let bytes = |n: &Node| -> &'static [u8] { serde_json::to_vec(&n.payload).unwrap().leak() };
    let start = node(0, "start");
    pg.insert(start.hash(), &start).unwrap();
    let ok = || Ok(());
    pg.insert_thread(T1, start.hash(), &NodeGuard::always(&ok))
        .unwrap();
    let epoch = pg.gc_epoch().unwrap();

    // Stored and moved; quotes, backslashes and non-ASCII survive the trip.
    let (a, b) = (node(1, "it's \\ \"é\" \u{0}"), node(2, "step"));
    let rows = [row(&a, bytes(&a)), row(&b, bytes(&b))];
    assert!(
        pg.swap_head_storing(
            T1,
            start.hash(),
            b.hash(),
            &rows,
            &NodeGuard::new(epoch, &ok)
        )
        .unwrap()
    );
    assert_eq!(pg.thread_head(T1).unwrap(), Some(b.hash()));
    let other = PgStore::connect(&db.url, None).unwrap();
    assert_eq!(other.get(a.hash()).unwrap(), Some(a.clone()));
    assert_eq!(other.get(b.hash()).unwrap(), Some(b.clone()));

    // Each of these leaves the head where it is and answers `false`.
    let c = node(3, "next");
    let c_rows = [row(&c, bytes(&c))];
    // Another head than the one expected.
    assert!(
        !pg.swap_head_storing(
            T1,
            start.hash(),
            c.hash(),
            &c_rows,
            &NodeGuard::new(epoch, &ok)
        )
        .unwrap()
    );
    // A guard that must run its check.
    assert!(
        !pg.swap_head_storing(T1, b.hash(), c.hash(), &c_rows, &NodeGuard::always(&ok))
            .unwrap()
    );
    // A node stored already with other bytes (damaged): the general path
    // repairs it.
    let mut raw = db.client();
    pg.insert(c.hash(), &c).unwrap();
    raw.execute(
        "UPDATE uwf_nodes SET payload = convert_to('{\"n\": 9}', 'UTF8') WHERE hash = $1",
        &[&c.hash().to_string()],
    )
    .unwrap();
    assert!(
        !pg.swap_head_storing(T1, b.hash(), c.hash(), &c_rows, &NodeGuard::new(epoch, &ok))
            .unwrap()
    );
    assert_eq!(pg.thread_head(T1).unwrap(), Some(b.hash()));
    // A collection since the epoch was read.
    pg.while_collecting(&mut || pg.begin_sweep().map(|_| ()))
        .unwrap();
    let d = node(4, "after");
    let d_rows = [row(&d, bytes(&d))];
    assert!(
        !pg.swap_head_storing(T1, b.hash(), d.hash(), &d_rows, &NodeGuard::new(epoch, &ok))
            .unwrap()
    );
    assert_eq!(pg.thread_head(T1).unwrap(), Some(b.hash()));
    // At the current epoch it moves.
    let now = pg.gc_epoch().unwrap();
    assert!(
        pg.swap_head_storing(T1, b.hash(), d.hash(), &d_rows, &NodeGuard::new(now, &ok))
            .unwrap()
    );
    assert_eq!(pg.thread_head(T1).unwrap(), Some(d.hash()));
}

#[test]
fn a_damaged_row_is_reported_corrupt_and_an_insert_repairs_it() {
    let Some((pg, db)) = fresh() else { return };
    let node = Node {
        type_hash: Hash::from_u64(7),
        payload: json!({ "n": 1 }),
        timestamp: 5,
    };
    let h = node.hash();
    pg.insert(h, &node).unwrap();
    let mut raw = db.client();
    raw.execute(
        "UPDATE uwf_nodes SET payload = convert_to('{\"n\": 2}', 'UTF8') WHERE hash = $1",
        &[&h.to_string()],
    )
    .unwrap();
    // The process that stored the node keeps it in memory (a node never
    // changes); another process reads the damaged row.
    assert_eq!(pg.get(h).unwrap(), Some(node.clone()));
    let pg = PgStore::connect(&db.url, None).unwrap();
    match pg.get(h) {
        Err(e @ CasError::Corrupt { .. }) => {
            assert_eq!(e.kind(), StoreErrorKind::Corrupt);
            assert!(e.to_string().contains("uwf_nodes"), "{e}");
        }
        other => panic!("a damaged row must be corrupt: {other:?}"),
    }
    assert!(pg.get_many(&[h]).is_err());
    assert_eq!(pg.reindex().unwrap().unreadable, vec![h]);
    raw.execute(
        "UPDATE uwf_nodes SET payload = convert_to('not json', 'UTF8') WHERE hash = $1",
        &[&h.to_string()],
    )
    .unwrap();
    let other = PgStore::connect(&db.url, None).unwrap();
    assert_eq!(other.get(h).unwrap_err().kind(), StoreErrorKind::Corrupt);
    let (stored, created) = pg.insert(h, &node).unwrap();
    assert!(created, "replacing a corrupt row counts as creating it");
    assert_eq!(stored, node);
    assert_eq!(pg.get(h).unwrap(), Some(node));
    // A row that is not named by a hash cannot exist: no strays.
    assert!(
        raw.execute(
            "INSERT INTO uwf_nodes VALUES ('../x', '0000000000000', '{}', 0)",
            &[]
        )
        .is_err()
    );
}

#[test]
fn configuration_lives_in_the_database_and_secrets_in_a_local_env_file() {
    let Some(db) = testing::database() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".env"),
        "API_KEY=abc123\n# comment\nOTHER='x y'\n",
    )
    .unwrap();
    let store = PgStore::connect(&db.url, Some(dir.path())).unwrap();
    assert_eq!(store.config().unwrap(), None);
    let yaml = "agents:\n  mock: { command: uwf-mock, args: [a.yaml] }\ndefaultAgent: mock\n";
    store.set_config(Some(yaml)).unwrap();
    assert_eq!(store.config_text().unwrap().as_deref(), Some(yaml));
    let config = store.config().unwrap().unwrap();
    assert_eq!(
        Some(config),
        uwf_state::parse_config("x".as_ref(), yaml).ok()
    );
    let agent = store.resolve_agent_with(store.config().unwrap().as_ref(), None, "w", "r");
    assert_eq!(agent.unwrap().command, "uwf-mock");
    // A configuration that does not parse is refused and the old one kept.
    match store.set_config(Some("agents: [unclosed")) {
        Err(e @ StateError::StoredConfig { .. }) => {
            let e = e.to_string();
            assert!(e.contains("uwf_config"), "{e}");
            assert!(e.contains("nothing was written"), "{e}");
        }
        other => panic!("a bad configuration was stored: {other:?}"),
    }
    assert_eq!(store.config_text().unwrap().as_deref(), Some(yaml));
    // A row written outside uwf that does not parse: the error names the
    // table, and its help says how to replace it (there is no file to fix).
    db.client()
        .execute("UPDATE uwf_config SET body = 'agents: [unclosed'", &[])
        .unwrap();
    match store.config() {
        Err(e @ StateError::StoredConfig { line: 1.., .. }) => {
            let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
            let help = help.unwrap_or_default();
            // The `uwf` command that does it is the CLI's hint
            // (uwf-cli's `library_errors_get_their_uwf_hint_from_the_cli`).
            assert!(help.contains("share it again"), "{help}");
            assert!(!help.contains("file;") && !help.contains("move"), "{help}");
            assert!(e.to_string().contains("(table uwf_config)"), "{e}");
        }
        other => panic!("a damaged configuration row was read: {other:?}"),
    }
    store.set_config(Some(yaml)).unwrap();
    store.set_config(Some("")).unwrap();
    assert_eq!(store.config().unwrap(), Some(Default::default()));
    store.set_config(None).unwrap();
    assert_eq!(store.config().unwrap(), None);
    let secrets = store.secrets().unwrap();
    assert_eq!(
        secrets,
        vec![
            ("API_KEY".to_string(), "abc123".to_string()),
            ("OTHER".to_string(), "x y".to_string())
        ]
    );
    let no_dir = PgStore::connect(&db.url, None).unwrap();
    assert!(no_dir.secrets().unwrap().is_empty());
    // Nothing of the secrets reached the database.
    let dump: String = db
        .client()
        .query_one(
            "SELECT string_agg(t::text, ' ') FROM (SELECT * FROM uwf_config) t",
            &[],
        )
        .unwrap()
        .get::<_, Option<String>>(0)
        .unwrap_or_default();
    assert!(!dump.contains("abc123"));
}

/// Every error this crate makes, and the handles, formatted every way:
/// the password appears nowhere.
#[test]
fn the_password_never_appears_in_errors_or_descriptions() {
    let Some(server) = testing::server() else {
        return;
    };
    let db = server.create_database();
    let pw = testing::PASSWORD;
    let mut seen: Vec<String> = Vec::new();
    fn record(seen: &mut Vec<String>, e: &dyn std::error::Error, debug: String) {
        let mut text = format!("{e} | {debug}");
        let mut cause = e.source();
        while let Some(c) = cause {
            text.push_str(&format!(" | {c} | {c:?}"));
            cause = c.source();
        }
        seen.push(text);
    }

    // The handles.
    let store = PgStore::connect(&db.url, None).unwrap();
    seen.push(format!("{store:?} {} {}", store.describe(), store.url()));
    let with = PgStore::connect_with(
        &db.url_without_password,
        PgOptions {
            password: Some(pw.to_owned()),
            ..PgOptions::default()
        },
    )
    .unwrap();
    seen.push(format!(
        "{with:?} {} {:?}",
        with.describe(),
        PgOptions {
            password: Some(pw.to_owned()),
            ..PgOptions::default()
        }
    ));
    assert!(
        with.threads().unwrap().is_empty(),
        "the password option works"
    );

    // Url: a malformed URL holding the password.
    let bad = format!("postgres://uwf:{pw}@/db?host=/x&port=notaport");
    let e = PgStore::connect(&bad, None).unwrap_err();
    assert!(matches!(e, PgError::Url { .. }), "{e:?}");
    record(&mut seen, &e, format!("{e:?}"));

    // Connect: a wrong password (refused: not retryable), and no server at
    // all (unavailable: retryable). The wrong password is the secret then.
    let wrong = format!("{pw}-wrong");
    let e = PgStore::connect_with(
        &server.url(&db.name, false),
        PgOptions {
            password: Some(wrong.clone()),
            ..PgOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, PgError::Connect { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(
        e.to_string().contains("password authentication failed"),
        "{e}"
    );
    record(&mut seen, &e, format!("{e:?}"));
    let e = PgStore::connect(&server.url(&db.name, false), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    record(&mut seen, &e, format!("{e:?}"));
    let nowhere = tempfile::tempdir().unwrap();
    let e = PgStore::connect(
        &format!(
            "postgresql://uwf:{pw}@/db?host={}",
            nowhere.path().display()
        ),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, PgError::Connect { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
    record(&mut seen, &e, format!("{e:?}"));

    // Query: a table dropped under the store.
    let broken_db = server.create_database();
    let broken = PgStore::connect(&broken_db.url, None).unwrap();
    broken.init().unwrap();
    broken_db
        .client()
        .batch_execute("DROP TABLE uwf_registry")
        .unwrap();
    let e = broken.registry().unwrap_err();
    assert!(matches!(e, StateError::Backend { .. }), "{e:?}");
    record(&mut seen, &e, format!("{e:?}"));

    // Corrupt: a damaged node row, and a damaged waiting entry.
    let node = Node {
        type_hash: Hash::from_u64(7),
        payload: json!({ "n": 1 }),
        timestamp: 5,
    };
    store.insert(node.hash(), &node).unwrap();
    let mut raw = db.client();
    raw.execute("UPDATE uwf_nodes SET payload = 'x'", &[])
        .unwrap();
    // Read by a process that does not hold the node in memory already.
    let reader = PgStore::connect(&db.url, None).unwrap();
    let e = reader.get(node.hash()).unwrap_err();
    record(&mut seen, &e, format!("{e:?}"));
    store
        .insert_thread(T1, Hash::from_u64(1), &uwf_state::NodeGuard::vouched())
        .unwrap();
    raw.execute(
        "INSERT INTO uwf_waiting VALUES ($1, $2, 'not json')",
        &[&T1.to_string(), &Hash::from_u64(1).to_string()],
    )
    .unwrap();
    let e = store.waiting().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    record(&mut seen, &e, format!("{e:?}"));

    // SchemaTooNew.
    let future_db = server.create_database();
    let future = PgStore::connect(&future_db.url, None).unwrap();
    future.init().unwrap();
    future_db
        .client()
        .execute(
            "INSERT INTO uwf_schema_version (version, name) VALUES (99, 'future')",
            &[],
        )
        .unwrap();
    let e = future.init().unwrap_err();
    assert!(matches!(e, PgError::SchemaTooNew { .. }), "{e:?}");
    record(&mut seen, &e, format!("{e:?}"));
    let as_slot = SlotError::from(PgStore::connect(&bad, None).unwrap_err());
    record(&mut seen, &as_slot, format!("{as_slot:?}"));
    let as_cas = CasError::from(PgStore::connect(&bad, None).unwrap_err());
    record(&mut seen, &as_cas, format!("{as_cas:?}"));

    assert!(seen.len() >= 10);
    for text in &seen {
        assert!(!text.contains(pw), "the password shows in: {text}");
        assert!(!text.contains(&wrong), "a password shows in: {text}");
    }
}

fn limits_drop(n: u32) -> WorkflowLimits {
    WorkflowLimits::drop(n).unwrap()
}

/// Backends holding a session advisory lock in this database (slots and
/// queue tickets), with whether the lock is a ticket.
fn lock_holders(db: &TestDb) -> Vec<(i32, bool)> {
    db.client()
        .query(
            "SELECT pid, classid::bigint > 2147483647 FROM pg_locks \
             WHERE locktype = 'advisory' AND objsubid = 2 AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[test]
fn a_slot_is_freed_when_its_holders_connection_is_killed() {
    let Some((store, db)) = fresh() else { return };
    let hold = store
        .acquire_slot("wf", limits_drop(1), None, &mut |_| true)
        .unwrap();
    assert!(matches!(
        store.acquire_slot("wf", limits_drop(1), None, &mut |_| true),
        Err(SlotError::Full { .. })
    ));
    let holders = lock_holders(&db);
    assert_eq!(holders.len(), 1, "{holders:?}");
    let killed: bool = db
        .client()
        .query_one("SELECT pg_terminate_backend($1)", &[&holders[0].0])
        .unwrap()
        .get(0);
    assert!(killed);
    wait_until("the killed holder's lock is gone", || {
        lock_holders(&db).is_empty()
    });
    let again = store.acquire_slot("wf", limits_drop(1), None, &mut |_| true);
    assert!(again.is_ok(), "{:?}", again.err());
    // Dropping the dead hold neither fails nor frees the new holder's slot.
    drop(hold);
    assert!(matches!(
        store.acquire_slot("wf", limits_drop(1), None, &mut |_| true),
        Err(SlotError::Full { .. })
    ));
    drop(again);
}

#[test]
fn a_killed_waiter_leaves_no_ticket_that_blocks_the_queue() {
    let Some((store, db)) = fresh() else { return };
    let limits = WorkflowLimits::queue(1, 16).unwrap();
    let held = store
        .acquire_slot("wf", limits, None, &mut |_| true)
        .unwrap();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let store = &store;
        let waiter = s.spawn(move || {
            store.acquire_slot("wf", limits, Some(Duration::from_millis(10)), &mut |_| {
                let _ = tx.send(());
                true
            })
        });
        rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let ticket_holders: Vec<i32> = lock_holders(&db)
            .into_iter()
            .filter(|(_, ticket)| *ticket)
            .map(|(pid, _)| pid)
            .collect();
        assert_eq!(ticket_holders.len(), 1);
        db.client()
            .execute("SELECT pg_terminate_backend($1)", &[&ticket_holders[0]])
            .unwrap();
        match waiter.join().unwrap() {
            Err(e @ SlotError::Backend { .. }) => {
                assert!(
                    matches!(
                        e,
                        SlotError::Backend {
                            kind: ErrorKind::Unavailable,
                            ..
                        }
                    ),
                    "{e:?}"
                );
            }
            Err(e) => panic!("the killed waiter failed otherwise: {e}"),
            Ok(h) => panic!("the killed waiter got slot {}", h.index()),
        }
    });
    wait_until("the killed waiter's ticket lock is gone", || {
        lock_holders(&db).iter().all(|(_, ticket)| !ticket)
    });
    let tickets: i64 = db
        .client()
        .query_one("SELECT count(*) FROM uwf_slot_tickets", &[])
        .unwrap()
        .get(0);
    assert_eq!(tickets, 1, "the dead ticket is still there, but stale");
    drop(held);
    let next = store
        .acquire_slot("wf", limits, None, &mut |w| {
            panic!("waited behind a dead ticket: {w:?}")
        })
        .unwrap();
    let tickets: i64 = db
        .client()
        .query_one("SELECT count(*) FROM uwf_slot_tickets", &[])
        .unwrap()
        .get(0);
    assert_eq!(tickets, 0, "the stale ticket was removed");
    drop(next);
}

/// Slots are shared by separate stores (separate pools, as separate
/// machines would have).
#[test]
fn separate_stores_share_the_slots_of_a_workflow() {
    let Some(db) = testing::database() else {
        return;
    };
    let a = PgStore::connect(&db.url, None).unwrap();
    let b = PgStore::connect(&db.url, None).unwrap();
    let hold = a
        .acquire_slot("shared", limits_drop(1), None, &mut |_| true)
        .unwrap();
    assert!(matches!(
        b.acquire_slot("shared", limits_drop(1), None, &mut |_| true),
        Err(SlotError::Full { .. })
    ));
    drop(hold);
    let hold = b
        .acquire_slot("shared", limits_drop(1), None, &mut |_| true)
        .unwrap();
    assert_eq!(hold.index(), 0);
}

/// Connections cut under the pool (a server restart, an administrator)
/// cost a reconnect, not a failed call, once they have been idle a moment.
#[test]
fn pooled_connections_cut_by_the_server_are_replaced() {
    let Some((store, db)) = fresh() else { return };
    store
        .insert_thread(T1, Hash::from_u64(1), &uwf_state::NodeGuard::vouched())
        .unwrap();
    // Several pooled connections.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| store.threads().unwrap());
        }
    });
    let killed: i64 = db
        .client()
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(killed >= 1);
    // Idle past the check interval (the behaviour under test: a lower
    // bound, not a timing assertion).
    std::thread::sleep(uwf_store_pg::CHECK_IDLE_AFTER + Duration::from_millis(200));
    for _ in 0..6 {
        assert_eq!(store.thread_head(T1).unwrap(), Some(Hash::from_u64(1)));
    }
}

/// Without the server binaries a test says loudly that it was skipped and
/// passes; with `CI=true` it fails instead. (Runs one test of this module
/// in a child process pointed at a directory without the binaries.)
#[test]
fn missing_server_binaries_skip_loudly_or_fail_under_ci() {
    let empty = tempfile::tempdir().unwrap();
    let run = |ci: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "pg::state_contract::absent_threads_have_no_head",
            "--exact",
            "--test-threads=1",
        ])
        .env("UWF_PG_BINDIR", empty.path())
        .env_remove("CI");
        if let Some(v) = ci {
            cmd.env("CI", v);
        }
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, stderr) = run(None);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("SKIPPED: PostgreSQL server binaries not found"),
        "{stderr}"
    );
    let (ok, stderr) = run(Some("true"));
    assert!(!ok, "CI=true must fail without the server: {stderr}");
    assert!(stderr.contains("CI=true"), "{stderr}");
}

// ----- the run queue: what only the PostgreSQL backend does --------------

/// The database clock, in ms since the Unix epoch.
fn db_now_ms(client: &mut postgres::Client) -> u64 {
    let ms: i64 = client
        .query_one("SELECT (extract(epoch FROM now()) * 1000)::bigint", &[])
        .unwrap()
        .get(0);
    u64::try_from(ms).unwrap()
}

#[test]
fn leases_are_set_on_the_database_clock() {
    use uwf_state::runs::{RunQueue, RunRequest};
    let Some((store, db)) = fresh() else { return };
    let mut client = db.client();
    store
        .insert_thread(T1, Hash::from_u64(1), &uwf_state::NodeGuard::vouched())
        .unwrap();
    store.enqueue(T1, "wf", RunRequest::default()).unwrap();
    let lease = Duration::from_secs(3600);
    let before = db_now_ms(&mut client);
    let claim = store.claim("w", &[], lease).unwrap().unwrap();
    let after = db_now_ms(&mut client);
    let start = claim.lease_until - 3_600_000;
    assert!(
        (before..=after).contains(&start),
        "lease from {start}, the database said {before}..{after}"
    );
    // What the row holds is what the claim says.
    let row = client
        .query_one(
            "SELECT lease_until, claim_id, worker, state FROM uwf_runs",
            &[],
        )
        .unwrap();
    assert_eq!(
        u64::try_from(row.get::<_, i64>(0)).unwrap(),
        claim.lease_until
    );
    assert_eq!(row.get::<_, String>(1), claim.claim_id);
    assert_eq!(row.get::<_, String>(2), "w");
    assert_eq!(row.get::<_, String>(3), "claimed");
}

#[test]
fn a_hung_renewal_fails_instead_of_blocking() {
    use uwf_state::runs::{RunQueue, RunRequest};
    let Some((store, db)) = fresh() else { return };
    store
        .insert_thread(T1, Hash::from_u64(1), &uwf_state::NodeGuard::vouched())
        .unwrap();
    store.enqueue(T1, "wf", RunRequest::default()).unwrap();
    let lease = Duration::from_secs(3);
    let mut claim = store.claim("w", &[], lease).unwrap().unwrap();
    // Another session holds the row (as a stuck transaction would).
    let mut blocker = db.client();
    let mut tx = blocker.transaction().unwrap();
    tx.execute("SELECT 1 FROM uwf_runs FOR UPDATE", &[])
        .unwrap();
    match store.renew(&mut claim, lease) {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
            assert!(!matches!(e, StateError::LeaseLost { .. }), "{e}");
        }
        Ok(()) => panic!("a renewal got through a locked row"),
    }
    tx.rollback().unwrap();
    // Nothing was lost: the next renewal succeeds.
    store.renew(&mut claim, lease).unwrap();
}

#[test]
fn a_damaged_run_row_is_reported_corrupt() {
    use uwf_state::runs::{RunQueue, RunRequest};
    let Some((store, db)) = fresh() else { return };
    store
        .insert_thread(T1, Hash::from_u64(1), &uwf_state::NodeGuard::vouched())
        .unwrap();
    store.enqueue(T1, "wf", RunRequest::default()).unwrap();
    db.client()
        .execute("UPDATE uwf_runs SET request = '{not json'", &[])
        .unwrap();
    for err in [store.runs().err(), store.run_of(T1).err()] {
        match err {
            Some(e) => {
                assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
                assert!(e.to_string().contains("run of thread"), "{e}");
            }
            None => panic!("a damaged row was read"),
        }
    }
    // A claim that meets it fails once (the row stays claimed, its lease
    // runs out); it does not stop the claims of the other runs.
    let t2 = uwf_protocol::ThreadId::from_u128(2);
    store
        .insert_thread(t2, Hash::from_u64(2), &uwf_state::NodeGuard::vouched())
        .unwrap();
    store.enqueue(t2, "wf", RunRequest::default()).unwrap();
    let lease = Duration::from_secs(600);
    match store.claim("w", &[], lease) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}"),
        Ok(c) => panic!("claimed {c:?}"),
    }
    let next = store.claim("w", &[], lease).unwrap().unwrap();
    assert_eq!(next.thread(), t2);
}

#[test]
fn running_markers_are_shared_and_only_their_own_is_removed() {
    let Some((store, _db)) = fresh() else {
        return;
    };
    let thread = uwf_protocol::ThreadId::new();
    assert!(store.shares_running());
    assert_eq!(store.running_marker(thread).unwrap(), None);
    store.put_running(thread, r#"{"step":1}"#).unwrap();
    // A later step's marker replaces it; removing the earlier one keeps it.
    store.put_running(thread, r#"{"step":2}"#).unwrap();
    store.clear_running(thread, r#"{"step":1}"#).unwrap();
    assert_eq!(
        store.running_marker(thread).unwrap().as_deref(),
        Some(r#"{"step":2}"#)
    );
    store.clear_running(thread, r#"{"step":2}"#).unwrap();
    assert_eq!(store.running_marker(thread).unwrap(), None);
    // One left behind (its `uwf` died) goes when the thread is archived.
    let head = Hash::from_u64(1);
    store
        .insert_thread(thread, head, &uwf_state::NodeGuard::vouched())
        .unwrap();
    store.put_running(thread, r#"{"step":3}"#).unwrap();
    store
        .archive(thread, Hash::from_u64(2), Some(head), "killed")
        .unwrap();
    assert_eq!(store.running_marker(thread).unwrap(), None);
}

#[test]
fn head_notices_mark_each_move_and_archive_of_a_thread() {
    use uwf_state::{NodeGuard, ThreadStore};
    let Some((store, db)) = fresh() else {
        return;
    };
    let thread = uwf_protocol::ThreadId::new();
    let other = uwf_protocol::ThreadId::new();
    let (a, b) = (
        uwf_protocol::fixtures::hash("A"),
        uwf_protocol::fixtures::hash("B"),
    );
    store
        .insert_thread(thread, a, &NodeGuard::vouched())
        .unwrap();
    store
        .insert_thread(other, a, &NodeGuard::vouched())
        .unwrap();
    let notices = store.head_notices().unwrap();
    wait_until("the listener listens", || notices.mark(thread).is_some());
    let first = notices.mark(thread).unwrap();
    // Moved by another process (another store on the same database).
    let writer = PgStore::connect(&db.url, None).unwrap();
    writer
        .swap_head(other, a, b, &NodeGuard::vouched())
        .unwrap();
    writer
        .swap_head(thread, a, b, &NodeGuard::vouched())
        .unwrap();
    wait_until("the move is announced", || {
        notices.mark(thread) != Some(first)
    });
    let moved = notices.mark(thread).unwrap();
    writer
        .archive(thread, uwf_protocol::fixtures::hash("W"), Some(b), "killed")
        .unwrap();
    wait_until("the archive is announced", || {
        notices.mark(thread) != Some(moved)
    });
}
