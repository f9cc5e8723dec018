//! The contract of the [`Store`] trait, as tests any backend can run.
//!
//! Each public function checks one behaviour against a **fresh, empty**
//! store and panics (with the reason) when the backend breaks the contract.
//! [`store_contract_tests!`](crate::store_contract_tests) turns them all into
//! `#[test]` functions for one backend; this crate runs them for
//! [`FsStore`](crate::FsStore) and [`MemStore`](crate::MemStore), and a new
//! backend (e.g. a database store in another crate) reuses them by enabling
//! the `testing` feature in its dev-dependencies:
//!
//! ```toml
//! [dev-dependencies]
//! uwf-cas = { workspace = true, features = ["testing"] }
//! ```
//!
//! ```ignore
//! mod contract {
//!     // An expression evaluated once per test: (store, guard). The guard
//!     // (a temporary directory, a database schema) lives until the test ends.
//!     uwf_cas::store_contract_tests!({
//!         let dir = tempfile::tempdir().unwrap();
//!         (uwf_cas::FsStore::open(dir.path().join("cas")).unwrap(), dir)
//!     });
//! }
//! ```
//!
//! What backend-specific tests must still cover: corruption detection of
//! the backend's own encoding, strays (entries that are not nodes) and their
//! removal, and crash safety.

use std::collections::BTreeSet;

use serde_json::json;

use crate::{Cas, CasError, Hash, Node, Result, Store, StoreErrorKind};

/// Runs every contract test of this module as a `#[test]` function.
///
/// `$make` is an expression evaluated anew in each test, giving a tuple
/// `(store, guard)`: a fresh, empty backend and anything that must stay
/// alive while it is used (use `()` if nothing). Invoke it inside a module
/// of its own, once per backend.
#[macro_export]
macro_rules! store_contract_tests {
    ($make:expr) => {
        $crate::store_contract_tests!(@each $make;
            absent_nodes_are_none,
            insert_then_get_round_trips,
            first_insert_wins,
            insert_many_answers_each_in_order,
            insert_many_of_distinct_nodes_answers_each_and_refreshes_the_present,
            storing_again_counts_as_fresh_for_collection,
            get_many_keeps_the_order_asked,
            has_many_keeps_the_order_asked,
            hashes_lists_every_node_once,
            by_type_lists_the_nodes_of_a_type,
            remove_deletes_the_node_and_its_index_entry,
            removing_while_listing_is_safe,
            reindex_keeps_every_node_listed,
            concurrent_inserts_agree,
            cache_round_trips,
            cache_rejects_bad_keys,
            cache_is_not_a_node,
            no_strays_in_a_sound_store,
            cas_works_over_the_store,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let (store, _guard) = $make;
                $crate::testing::$name(&store);
            }
        )*
    };
}

fn ok<T>(r: Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// A node of type `t` holding `n`, stored at `ts`.
fn node(t: u64, n: u64, ts: u64) -> (Hash, Node) {
    let node = Node {
        type_hash: Hash::from_u64(t),
        payload: json!({ "n": n }),
        timestamp: ts,
    };
    (node.hash(), node)
}

fn insert(store: &dyn Store, t: u64, n: u64) -> Hash {
    let (h, node) = node(t, n, 1_000 + n);
    ok(store.insert(h, &node), "insert");
    h
}

fn all(it: crate::HashIter<'_>, what: &str) -> Vec<Hash> {
    ok(it.collect::<Result<Vec<_>>>(), what)
}

fn set(it: crate::HashIter<'_>, what: &str) -> BTreeSet<Hash> {
    let v = all(it, what);
    let s: BTreeSet<Hash> = v.iter().copied().collect();
    assert_eq!(s.len(), v.len(), "{what} listed a hash twice");
    s
}

/// An absent node: `get` is `None`, `has` is false, `remove` is false.
pub fn absent_nodes_are_none(store: &dyn Store) {
    let (h, _) = node(1, 1, 1);
    assert_eq!(ok(store.get(h), "get"), None);
    assert!(!ok(store.has(h), "has"));
    assert!(!ok(store.remove(h), "remove"));
    assert!(all(store.hashes(), "hashes").is_empty());
    assert!(all(store.by_type(Hash::from_u64(1)), "by_type").is_empty());
}

/// A stored node reads back equal, timestamp included.
pub fn insert_then_get_round_trips(store: &dyn Store) {
    let (h, n) = node(1, 7, 1_234);
    let (stored, created) = ok(store.insert(h, &n), "insert");
    assert!(created, "a new node must be reported as created");
    assert_eq!(stored, n);
    assert_eq!(ok(store.get(h), "get"), Some(n));
    assert!(ok(store.has(h), "has"));
}

/// Inserting a present hash again keeps the first node and its timestamp.
pub fn first_insert_wins(store: &dyn Store) {
    let (h, first) = node(1, 7, 1_000);
    let (_, later) = node(1, 7, 2_000);
    ok(store.insert(h, &first), "insert");
    let (stored, created) = ok(store.insert(h, &later), "insert again");
    assert!(!created, "a second insert must not be reported as created");
    assert_eq!(stored.timestamp, 1_000);
    assert_eq!(ok(store.get(h), "get").map(|n| n.timestamp), Some(1_000));
}

/// [`Store::insert_many`] answers each node in order, as `insert` would:
/// new ones created, a present one (and a repeat within the batch) kept
/// with its first timestamp; all readable afterwards.
pub fn insert_many_answers_each_in_order(store: &dyn Store) {
    assert!(ok(store.insert_many(&[]), "insert_many of nothing").is_empty());
    let (present, first) = node(1, 7, 1_000);
    ok(store.insert(present, &first), "insert");
    let (a, na) = node(1, 8, 2_000);
    let (b, nb) = node(2, 9, 2_000);
    let (_, later) = node(1, 7, 3_000);
    let batch = [
        (a, na.clone()),
        (present, later),
        (b, nb.clone()),
        (a, na.clone()),
    ];
    let got = ok(store.insert_many(&batch), "insert_many");
    assert_eq!(got.len(), batch.len(), "one answer per node");
    assert_eq!(got[0], (na.clone(), true));
    assert_eq!(
        got[1],
        (first, false),
        "a present node keeps its first timestamp"
    );
    assert_eq!(got[2], (nb.clone(), true));
    assert_eq!(
        got[3],
        (na.clone(), false),
        "a repeat in the batch is present by then"
    );
    assert_eq!(ok(store.get(a), "get"), Some(na));
    assert_eq!(ok(store.get(b), "get"), Some(nb));
}

/// [`Store::insert_many`] of distinct nodes (what a step stores: a backend
/// may store them in one statement), new and present mixed: each answered
/// in order as `insert` would, a present one with its first timestamp and
/// counted as stored again for collection.
pub fn insert_many_of_distinct_nodes_answers_each_and_refreshes_the_present(store: &dyn Store) {
    let (present, first) = node(3, 7, 1_000);
    ok(store.insert(present, &first), "insert");
    let (a, na) = node(3, 8, 2_000);
    let (b, nb) = node(4, 9, 2_000);
    let (_, later) = node(3, 7, 5_000);
    let batch = [(a, na.clone()), (present, later), (b, nb.clone())];
    let got = ok(store.insert_many(&batch), "insert_many");
    assert_eq!(
        got,
        vec![(na.clone(), true), (first, false), (nb.clone(), true)]
    );
    assert_eq!(ok(store.get(a), "get"), Some(na));
    assert_eq!(ok(store.get(b), "get"), Some(nb));
    let stored = ok(store.last_stored(present), "last_stored");
    assert!(
        stored.is_some_and(|t| t >= 5_000),
        "storing it again counts as fresh: {stored:?}"
    );
}

/// Storing a present node again moves its [`Store::last_stored`] to now
/// (first timestamp kept), and [`Store::remove_if_stale`] removes only what
/// was last stored before its cutoff.
pub fn storing_again_counts_as_fresh_for_collection(store: &dyn Store) {
    let (h, old) = node(1, 9, 1_000);
    assert_eq!(ok(store.last_stored(h), "last_stored"), None);
    assert!(!ok(store.remove_if_stale(h, u64::MAX), "remove_if_stale"));
    ok(store.insert(h, &old), "insert");
    let first = ok(store.last_stored(h), "last_stored");
    assert!(first.is_some_and(|t| t >= 1_000), "{first:?}");
    let before = crate::node::now_ms();
    let (_, again) = node(1, 9, before);
    ok(store.insert(h, &again), "insert again");
    let Some(fresh) = ok(store.last_stored(h), "last_stored") else {
        panic!("a stored node has no last_stored")
    };
    // File-system clocks tick coarsely: allow a second.
    assert!(
        fresh + 1_000 >= before,
        "stored again at {before}, last_stored says {fresh}"
    );
    assert_eq!(ok(store.get(h), "get").map(|n| n.timestamp), Some(1_000));
    assert!(
        !ok(
            store.remove_if_stale(h, before.saturating_sub(1_000)),
            "remove_if_stale"
        ),
        "a node stored again after the cutoff was removed"
    );
    assert!(ok(store.has(h), "has"));
    assert!(ok(store.remove_if_stale(h, fresh + 1), "remove_if_stale"));
    assert!(!ok(store.has(h), "has"));
    assert_eq!(ok(store.last_stored(h), "last_stored"), None);
}

/// `get_many` answers in the order asked, `None` for absent nodes.
pub fn get_many_keeps_the_order_asked(store: &dyn Store) {
    let a = insert(store, 1, 1);
    let b = insert(store, 1, 2);
    let (absent, _) = node(1, 3, 0);
    let got = ok(store.get_many(&[b, absent, a, b]), "get_many");
    let hashes: Vec<Option<Hash>> = got.iter().map(|n| n.as_ref().map(Node::hash)).collect();
    assert_eq!(hashes, vec![Some(b), None, Some(a), Some(b)]);
}

/// `has_many` answers in the order asked, `false` for absent nodes.
pub fn has_many_keeps_the_order_asked(store: &dyn Store) {
    let a = insert(store, 1, 1);
    let b = insert(store, 1, 2);
    let (absent, _) = node(1, 3, 0);
    assert_eq!(
        ok(store.has_many(&[b, absent, a, b]), "has_many"),
        vec![true, false, true, true]
    );
    assert!(ok(store.has_many(&[]), "has_many").is_empty());
}

/// `hashes` lists every node exactly once, across pages (more than a
/// thousand nodes).
pub fn hashes_lists_every_node_once(store: &dyn Store) {
    let want: BTreeSet<Hash> = (0..1_100).map(|n| insert(store, 1 + n % 3, n)).collect();
    assert_eq!(set(store.hashes(), "hashes"), want);
}

/// `by_type` lists exactly the nodes of that type.
pub fn by_type_lists_the_nodes_of_a_type(store: &dyn Store) {
    let mut want = BTreeSet::new();
    for n in 0..600 {
        let h = insert(store, 1 + n % 2, n);
        if n % 2 == 1 {
            want.insert(h);
        }
    }
    assert_eq!(set(store.by_type(Hash::from_u64(2)), "by_type"), want);
    assert!(all(store.by_type(Hash::from_u64(9)), "by_type").is_empty());
}

/// `remove` deletes the node from `get`, `hashes` and `by_type`.
pub fn remove_deletes_the_node_and_its_index_entry(store: &dyn Store) {
    let a = insert(store, 1, 1);
    let b = insert(store, 1, 2);
    assert!(ok(store.remove(a), "remove"));
    assert!(!ok(store.remove(a), "remove again"));
    assert_eq!(ok(store.get(a), "get"), None);
    assert!(!ok(store.has(a), "has"));
    assert_eq!(set(store.hashes(), "hashes"), BTreeSet::from([b]));
    assert_eq!(
        set(store.by_type(Hash::from_u64(1)), "by_type"),
        BTreeSet::from([b])
    );
}

/// Removing each node while listing them neither fails nor misses any.
pub fn removing_while_listing_is_safe(store: &dyn Store) {
    let want: BTreeSet<Hash> = (0..700).map(|n| insert(store, 1, n)).collect();
    let mut seen = BTreeSet::new();
    for h in store.hashes() {
        let h = ok(h, "hashes");
        assert!(
            ok(store.remove(h), "remove"),
            "{h} listed but not removable"
        );
        seen.insert(h);
    }
    assert_eq!(seen, want);
    assert!(all(store.hashes(), "hashes").is_empty());
}

/// `reindex` counts every node and leaves the index complete.
pub fn reindex_keeps_every_node_listed(store: &dyn Store) {
    let want: BTreeSet<Hash> = (0..50).map(|n| insert(store, 1, n)).collect();
    let report = ok(store.reindex(), "reindex");
    assert_eq!(report.nodes, 50);
    assert_eq!(report.types, 1);
    assert!(report.unreadable.is_empty());
    assert_eq!(set(store.by_type(Hash::from_u64(1)), "by_type"), want);
}

/// Eight threads inserting one node with different timestamps all get the
/// same stored node back, and exactly one of them created it.
pub fn concurrent_inserts_agree(store: &dyn Store) {
    let results: Vec<(Node, bool)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8u64)
            .map(|i| {
                s.spawn(move || {
                    let (h, n) = node(1, 42, 1_000 + i);
                    ok(store.insert(h, &n), "concurrent insert")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(r) => r,
                Err(_) => panic!("an inserting thread panicked"),
            })
            .collect()
    });
    assert_eq!(results.iter().filter(|(_, created)| *created).count(), 1);
    let first = &results[0].0;
    assert!(results.iter().all(|(n, _)| n == first), "{results:?}");
    assert_eq!(ok(store.get(first.hash()), "get").as_ref(), Some(first));
}

/// Cache entries round-trip, are replaced whole, and can be removed.
pub fn cache_round_trips(store: &dyn Store) {
    let key = "ctx-2084BEPVB057M.v1";
    assert_eq!(ok(store.cache_get(key), "cache_get"), None);
    ok(store.cache_put(key, b"first value"), "cache_put");
    assert_eq!(
        ok(store.cache_get(key), "cache_get").as_deref(),
        Some(&b"first value"[..])
    );
    ok(store.cache_put(key, b"2"), "cache_put again");
    assert_eq!(
        ok(store.cache_get(key), "cache_get").as_deref(),
        Some(&b"2"[..])
    );
    ok(store.cache_put("empty", b""), "cache_put empty");
    assert_eq!(
        ok(store.cache_get("empty"), "cache_get").as_deref(),
        Some(&b""[..])
    );
    assert!(ok(store.cache_remove(key), "cache_remove"));
    assert!(!ok(store.cache_remove(key), "cache_remove again"));
    assert_eq!(ok(store.cache_get(key), "cache_get"), None);
}

/// Keys outside the safe charset are refused as invalid by every cache call.
pub fn cache_rejects_bad_keys(store: &dyn Store) {
    let long = "k".repeat(crate::CACHE_KEY_MAX + 1);
    for key in [
        "", ".hidden", "..", "a/b", "../x", "a b", "é", "a\\b", &long,
    ] {
        let kinds = [
            store.cache_get(key).err().map(|e| e.kind()),
            store.cache_put(key, b"x").err().map(|e| e.kind()),
            store.cache_remove(key).err().map(|e| e.kind()),
        ];
        assert_eq!(kinds, [Some(StoreErrorKind::Invalid); 3], "key {key:?}");
    }
    ok(
        store.cache_put(&"k".repeat(crate::CACHE_KEY_MAX), b"x"),
        "longest key",
    );
}

/// Cache entries are not nodes: they are not listed and are no strays.
pub fn cache_is_not_a_node(store: &dyn Store) {
    ok(store.cache_put("some-key", b"{}"), "cache_put");
    assert!(all(store.hashes(), "hashes").is_empty());
    assert!(ok(store.strays().collect::<Result<Vec<_>>>(), "strays").is_empty());
}

/// A store written only through the trait has no strays, and removing an
/// unknown stray does nothing.
pub fn no_strays_in_a_sound_store(store: &dyn Store) {
    insert(store, 1, 1);
    assert!(ok(store.strays().collect::<Result<Vec<_>>>(), "strays").is_empty());
    assert!(!ok(store.remove_stray("no-such-entry"), "remove_stray"));
}

/// [`Cas`] bootstraps over the store, validates, verifies and collects.
pub fn cas_works_over_the_store(store: &dyn Store) {
    let cas = ok(Cas::new(store), "Cas::new");
    let t = ok(
        cas.put_schema(json!({
            "type": "object",
            "properties": { "prev": { "type": ["string", "null"], "format": "cas_ref" } }
        })),
        "put_schema",
    )
    .hash;
    let a = ok(cas.put(t, json!({ "prev": null })), "put").hash;
    let b = ok(cas.put(t, json!({ "prev": a.to_string() })), "put").hash;
    assert!(matches!(
        cas.put(t, json!({ "prev": 1 })),
        Err(CasError::Invalid { .. })
    ));
    assert_eq!(ok(cas.get(b), "get").payload["prev"], a.to_string());
    assert_eq!(ok(cas.list_by_type(t), "list_by_type"), {
        let mut v = vec![a, b];
        v.sort();
        v
    });
    let report = ok(cas.verify(), "verify");
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        report.nodes, 7,
        "meta + 3 protocol schemas + 1 schema + 2 nodes"
    );
    let orphan = ok(cas.put(t, json!({ "x": 1 })), "put").hash;
    let gc = ok(cas.gc([b], crate::GcOptions::default()), "gc");
    assert_eq!(gc.swept, vec![orphan]);
    assert!(!ok(cas.has(orphan), "has"));
    assert!(ok(cas.has(a), "has"));
    match cas.get(orphan) {
        Err(e) => assert_eq!(e.kind(), StoreErrorKind::NotFound),
        Ok(n) => panic!("collected node still readable: {n:?}"),
    }
}

#[cfg(test)]
mod tests {
    mod mem {
        crate::store_contract_tests!((crate::MemStore::new(), ()));
    }

    mod fs {
        crate::store_contract_tests!({
            let dir = match tempfile::tempdir() {
                Ok(d) => d,
                Err(e) => panic!("tempdir: {e}"),
            };
            match crate::FsStore::open(dir.path().join("cas")) {
                Ok(s) => (s, dir),
                Err(e) => panic!("open: {e}"),
            }
        });
    }

    mod boxed_dyn {
        crate::store_contract_tests!((
            std::sync::Arc::new(crate::MemStore::new()) as std::sync::Arc<dyn crate::Store>,
            ()
        ));
    }
}
