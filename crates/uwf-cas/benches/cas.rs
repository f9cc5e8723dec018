//! Hot paths of the store: hashing, put, get (with its integrity check) and
//! reference discovery, on payloads shaped like a thread's StepNode.
//! Run with `cargo bench -p uwf-cas`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use uwf_cas::{Cas, FsStore, Hash, MemStore, node};

fn main() {
    divan::main();
}

fn step_payload(i: u64) -> Value {
    json!({
        "start": "4TNVW8KR2B3MA",
        "prev": "2MXBG6PN4A8JR",
        "role": "developer",
        "output": Hash::from_u64(i).to_string(),
        "detail": "7BQST3VW9F2MA",
        "agent": "uwf-hermes"
    })
}

#[divan::bench]
fn hash_step_node(b: divan::Bencher) {
    let t = Hash::from_u64(42);
    let p = step_payload(1);
    b.bench(|| node::hash_typed(t, divan::black_box(&p)));
}

#[divan::bench(args = [1_000, 100_000])]
fn hash_text_payload(b: divan::Bencher, len: usize) {
    let t = Hash::from_u64(42);
    let p = json!({ "text": "x".repeat(len) });
    b.bench(|| node::hash_typed(t, divan::black_box(&p)));
}

#[divan::bench]
fn put_new_step_node_fs(b: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::open(dir.path()).unwrap();
    let t = cas.types().step_node;
    let mut i = 0u64;
    b.bench_local(|| {
        i += 1;
        cas.put(t, step_payload(i)).unwrap()
    });
}

#[divan::bench]
fn put_existing_step_node_fs(b: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let cas = Cas::open(dir.path()).unwrap();
    let t = cas.types().step_node;
    cas.put(t, step_payload(7)).unwrap();
    b.bench_local(|| cas.put(t, step_payload(7)).unwrap());
}

#[divan::bench]
fn get_verified_fs(b: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path().join("cas")).unwrap();
    let cas = Cas::new(store).unwrap();
    let h = cas
        .put(cas.types().step_node, step_payload(9))
        .unwrap()
        .hash;
    b.bench_local(|| cas.get(h).unwrap());
}

#[divan::bench]
fn refs_of_step_node(b: divan::Bencher) {
    let cas = Cas::new(MemStore::new()).unwrap();
    let h = cas
        .put(cas.types().step_node, step_payload(3))
        .unwrap()
        .hash;
    let n = cas.get(h).unwrap();
    b.bench_local(|| cas.refs_of(divan::black_box(&n)).unwrap());
}

#[divan::bench]
fn open_store(b: divan::Bencher) {
    // What every uwf process pays at start: bootstrap checks of the built-in schemas.
    let dir = tempfile::tempdir().unwrap();
    Cas::open(dir.path()).unwrap();
    b.bench_local(|| Cas::open(dir.path()).unwrap());
}
