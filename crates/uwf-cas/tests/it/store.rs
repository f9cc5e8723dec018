//! Integration tests of the filesystem store (`FsStore`) behind `Cas`, on a
//! temporary directory: round trips, first-put-wins, corruption detection
//! and repair, the index, concurrent writers, validation errors and walks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use serde_json::{Value, json};
use tempfile::TempDir;
use uwf_cas::{
    Cas, CasError, FsStore, Hash, MemStore, Store, VerifyIssue, WalkEntry, node, schema,
};

fn open(dir: &TempDir) -> Cas {
    Cas::open(dir.path()).unwrap()
}

/// A small schema with a text, an optional number and an optional link.
fn note_schema() -> Value {
    json!({
        "title": "note",
        "type": "object",
        "required": ["text"],
        "additionalProperties": false,
        "properties": {
            "text": { "type": "string" },
            "n": { "type": "number" },
            "prev": { "type": ["string", "null"], "format": "cas_ref" },
            "nested": {
                "type": "object",
                "properties": { "k": { "type": "integer" } }
            }
        }
    })
}

fn note(cas: &Cas) -> Hash {
    cas.put_schema(note_schema()).unwrap().hash
}

/// Where `FsStore` keeps a node: `<root>/cas/objects/<2 chars>/<11 chars>.json`.
fn object_path(dir: &TempDir, hash: Hash) -> PathBuf {
    let name = hash.to_string();
    dir.path()
        .join("cas/objects")
        .join(&name[..2])
        .join(format!("{}.json", &name[2..]))
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn assert_corrupt(dir: &TempDir, cas: &Cas, hash: Hash) -> String {
    let path = object_path(dir, hash);
    let shown = path.display().to_string();
    match cas.get(hash) {
        Err(e @ CasError::Corrupt { .. }) => {
            let msg = e.to_string();
            assert_eq!(e.kind(), uwf_cas::StoreErrorKind::Corrupt);
            let CasError::Corrupt {
                hash: h,
                location: l,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(h, hash);
            assert_eq!(l, shown);
            assert!(msg.contains(&shown), "{msg}");
            let report = cas.verify().unwrap();
            assert!(
                report.issues.iter().any(|i| matches!(
                    i,
                    VerifyIssue::Corrupt { hash: h, location: l, .. } if *h == hash && *l == shown
                )),
                "verify missed {hash}: {report:?}"
            );
            msg
        }
        other => panic!("expected Corrupt for {hash}, got {other:?}"),
    }
}

#[test]
fn put_get_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let payload = json!({ "text": "héllo", "n": 2.5, "nested": { "k": -3 } });
    let s = cas.put(t, payload.clone()).unwrap();
    assert!(s.created);
    assert_eq!(s.hash, node::hash_typed(t, &payload));
    assert_eq!(s.node.type_hash, t);
    assert!(s.node.timestamp > 0);

    let got = cas.get(s.hash).unwrap();
    assert_eq!(got, s.node);
    assert_eq!(cas.try_get(s.hash).unwrap(), Some(s.node.clone()));
    assert!(cas.has(s.hash).unwrap());

    // The file lives at objects/<2>/<11>.json and holds the node as JSON.
    let name = s.hash.to_string();
    let path = dir
        .path()
        .join("cas/objects")
        .join(&name[..2])
        .join(format!("{}.json", &name[2..]));
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    let file: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(file["type"], json!(t.to_string()));
    assert_eq!(file["payload"], payload);
    assert_eq!(file["timestamp"], json!(s.node.timestamp));
    // And an index marker.
    assert!(
        dir.path()
            .join("cas/index")
            .join(t.to_string())
            .join(&name)
            .is_file()
    );
    assert_eq!(cas.list_by_type(t).unwrap(), vec![s.hash]);

    // A second handle sees the same node, and absent nodes are NotFound.
    let again = open(&dir);
    assert_eq!(again.get(s.hash).unwrap(), s.node);
    let absent = Hash::from_u64(s.hash.as_u64() ^ 1);
    assert!(matches!(again.get(absent), Err(CasError::NotFound(h)) if h == absent));
    assert_eq!(again.try_get(absent).unwrap(), None);
    assert!(!again.has(absent).unwrap());
    assert!(again.verify().unwrap().is_ok());
}

#[test]
fn second_put_keeps_the_first_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let first = cas.put(t, json!({ "text": "once" })).unwrap();
    // A node stored again from now on would get a later timestamp.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while uwf_cas::node::now_ms() <= first.node.timestamp {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock stands still"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let second = cas.put(t, json!({ "text": "once" })).unwrap();
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(second.hash, first.hash);
    assert_eq!(second.node.timestamp, first.node.timestamp);
    // Also through a separate handle, and for schemas.
    let other = open(&dir);
    let third = other.put(t, json!({ "text": "once" })).unwrap();
    assert!(!third.created);
    assert_eq!(third.node.timestamp, first.node.timestamp);
    assert!(!other.put_schema(note_schema()).unwrap().created);
}

#[test]
fn integral_floats_dedupe_and_are_stored_as_integers() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let float = cas
        .put(t, json!({ "text": "x", "n": 1.0, "nested": { "k": 7.0 } }))
        .unwrap();
    let int = cas
        .put(t, json!({ "text": "x", "n": 1, "nested": { "k": 7 } }))
        .unwrap();
    assert!(float.created);
    assert!(!int.created);
    assert_eq!(float.hash, int.hash);
    // `k` is an `integer`: 7.0 is accepted because it is stored as 7.
    let text = fs::read_to_string(object_path(&dir, float.hash)).unwrap();
    assert!(text.contains(r#""n":1"#) && !text.contains("1.0"), "{text}");
    assert!(text.contains(r#""k":7"#) && !text.contains("7.0"), "{text}");
    let got = cas.get(float.hash).unwrap();
    assert!(got.payload["n"].is_u64());
    // A non-integral float stays a float and is a different node.
    let frac = cas.put(t, json!({ "text": "x", "n": 1.5 })).unwrap();
    assert_ne!(frac.hash, float.hash);
    assert_eq!(cas.get(frac.hash).unwrap().payload["n"], json!(1.5));
}

#[test]
fn a_changed_byte_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let s = cas.put(t, json!({ "text": "hello" })).unwrap();
    let path = object_path(&dir, s.hash);
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replace("hello", "hellp")).unwrap();
    let msg = assert_corrupt(&dir, &cas, s.hash);
    assert!(msg.contains("content hashes to"), "{msg}");
}

#[test]
fn a_truncated_file_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let s = cas.put(t, json!({ "text": "hello" })).unwrap();
    let path = object_path(&dir, s.hash);
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let msg = assert_corrupt(&dir, &cas, s.hash);
    assert!(msg.contains("not a node"), "{msg}");
    // An empty file too.
    fs::write(&path, b"").unwrap();
    assert_corrupt(&dir, &cas, s.hash);
}

#[test]
fn a_renamed_file_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let a = cas.put(t, json!({ "text": "a" })).unwrap().hash;
    // Move the node file to the name of another (valid, absent) hash.
    let b = Hash::from_u64(a.as_u64().wrapping_add(0x0123_4567_89ab_cdef));
    let to = object_path(&dir, b);
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    fs::rename(object_path(&dir, a), &to).unwrap();
    let msg = assert_corrupt(&dir, &cas, b);
    assert!(msg.contains(&format!("content hashes to {a}")), "{msg}");
    assert!(matches!(cas.get(a), Err(CasError::NotFound(h)) if h == a));

    // Or onto another node's name, replacing it.
    let c = cas.put(t, json!({ "text": "c" })).unwrap().hash;
    fs::rename(&to, object_path(&dir, c)).unwrap();
    assert_corrupt(&dir, &cas, c);
}

#[test]
fn re_putting_a_corrupt_node_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let s = cas.put(t, json!({ "text": "fix me" })).unwrap();
    let path = object_path(&dir, s.hash);
    fs::write(&path, b"{\"type\": \"garbage").unwrap();
    assert_corrupt(&dir, &cas, s.hash);

    let again = cas.put(t, json!({ "text": "fix me" })).unwrap();
    assert_eq!(again.hash, s.hash);
    assert!(again.created, "a repair writes the node again");
    assert_eq!(
        cas.get(s.hash).unwrap().payload,
        json!({ "text": "fix me" })
    );
    assert!(cas.verify().unwrap().is_ok());
    // No temp file is left next to it.
    let siblings: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(siblings.len(), 1, "{siblings:?}");
}

#[test]
fn verify_reports_strays_but_skips_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let s = cas.put(t, json!({ "text": "x" })).unwrap();
    let objects = dir.path().join("cas/objects");
    let prefix = object_path(&dir, s.hash).parent().unwrap().to_path_buf();
    let strays = [
        objects.join("README.txt"),
        objects.join("ABC"),
        prefix.join("not-a-hash.json"),
        prefix.join(format!("{}.txt", &s.hash.to_string()[2..])),
        // Lower case is not the canonical name.
        prefix.join(format!("{}.json", s.hash.to_string()[2..].to_lowercase())),
    ];
    fs::write(&strays[0], b"hi").unwrap();
    fs::create_dir(&strays[1]).unwrap();
    for p in &strays[2..] {
        fs::write(p, b"{}").unwrap();
    }
    // A writer's temporary file (in flight or left by a crash) is not a stray.
    fs::write(prefix.join(".uwf-abc123.tmp"), b"partial").unwrap();

    let report = cas.verify().unwrap();
    let found: BTreeSet<PathBuf> = report
        .issues
        .iter()
        .map(|i| match i {
            VerifyIssue::Stray { id, reason } => {
                assert!(!reason.is_empty());
                PathBuf::from(id)
            }
            other => panic!("unexpected issue {other:?}"),
        })
        .collect();
    assert_eq!(found, strays.iter().cloned().collect());
    // Strays are not nodes.
    assert_eq!(report.nodes, 6, "meta + 3 protocol schemas + note + node");
    assert_eq!(cas.store().hashes().count(), 6);
    // The backend removes what it reported, given the id, and nothing else.
    assert!(
        !cas.store()
            .remove_stray(&prefix.join(".uwf-abc123.tmp").display().to_string())
            .unwrap()
    );
    assert!(
        !cas.store()
            .remove_stray(&object_path(&dir, s.hash).display().to_string())
            .unwrap()
    );
    // Ids are not trusted as paths: nothing outside `objects/` goes.
    let outside = dir.path().join("outside.txt");
    fs::write(&outside, b"keep").unwrap();
    for id in [
        outside.display().to_string(),
        objects.join("../outside.txt").display().to_string(),
        prefix.join("../../outside.txt").display().to_string(),
        objects.join("..").display().to_string(),
        prefix.join("..").display().to_string(),
        objects.join("./ABC/..").display().to_string(),
        objects.display().to_string(),
        format!("{}/", prefix.display()),
        "outside.txt".to_string(),
    ] {
        assert!(!cas.store().remove_stray(&id).unwrap(), "{id}");
    }
    assert!(outside.exists() && objects.exists() && prefix.exists());
    for p in &strays {
        assert!(
            cas.store().remove_stray(&p.display().to_string()).unwrap(),
            "{p:?}"
        );
        assert!(!p.exists(), "{p:?}");
    }
    assert!(cas.verify().unwrap().is_ok());
    assert_eq!(cas.get(s.hash).unwrap().payload, json!({ "text": "x" }));
}

#[test]
fn cache_entries_live_under_cas_cache_and_heal_when_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let cache = dir.path().join("cas/cache");
    assert!(
        !cache.exists(),
        "the cache directory is created on first use"
    );
    cas.store().cache_put("ctx-A", b"derived").unwrap();
    assert_eq!(fs::read(cache.join("ctx-A")).unwrap(), b"derived");
    // Replaced atomically: no temporary file is left next to it.
    cas.store().cache_put("ctx-A", b"again").unwrap();
    assert_eq!(files(&cache), vec![cache.join("ctx-A")]);
    // Deleting the directory is always safe: the entry is just gone.
    fs::remove_dir_all(&cache).unwrap();
    assert_eq!(cas.store().cache_get("ctx-A").unwrap(), None);
    cas.store().cache_put("ctx-A", b"rebuilt").unwrap();
    assert_eq!(cas.store().cache_get("ctx-A").unwrap().unwrap(), b"rebuilt");
    // Cache files are neither nodes nor strays, and verify stays clean.
    let report = cas.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn io_errors_are_classified() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    // A cache directory that is a file: the write fails as an I/O error,
    // not as corruption, conflict or a retryable condition.
    fs::write(dir.path().join("cas/cache"), b"not a dir").unwrap();
    let e = cas.store().cache_put("k", b"v").unwrap_err();
    assert_eq!(e.kind(), uwf_cas::StoreErrorKind::Io, "{e}");
    assert!(!e.is_retryable());
    let e = cas.get(Hash::from_u64(5)).unwrap_err();
    assert_eq!(e.kind(), uwf_cas::StoreErrorKind::NotFound);
}

#[test]
fn verify_reports_dangling_references() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let first = cas.put(t, json!({ "text": "first" })).unwrap().hash;
    let linked = cas
        .put(t, json!({ "text": "ok", "prev": first.to_string() }))
        .unwrap()
        .hash;
    let missing = Hash::from_u64(42);
    let dangling = cas
        .put(
            t,
            json!({ "text": "dangling", "prev": missing.to_string() }),
        )
        .unwrap()
        .hash;
    assert_eq!(cas.refs(linked).unwrap()[0].hash, first);
    let report = cas.verify().unwrap();
    assert_eq!(
        report.issues,
        vec![VerifyIssue::Dangling {
            from: dangling,
            path: "/prev".into(),
            hash: missing,
        }]
    );
    // Deleting a referenced node makes another one dangle.
    assert!(cas.store().remove(first).unwrap());
    assert_eq!(cas.verify().unwrap().issues.len(), 2);
}

#[test]
fn verify_reports_invalid_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    // Written behind Cas's back: bypasses validation.
    let store = FsStore::open(dir.path().join("cas")).unwrap();
    let bad = json!({ "txt": 1 });
    let h = node::hash_typed(t, &bad);
    store
        .insert(
            h,
            &uwf_cas::Node {
                type_hash: t,
                payload: bad,
                timestamp: 1,
            },
        )
        .unwrap();
    let untyped = json!({ "text": "no type" });
    let missing_type = Hash::from_u64(7);
    let u = node::hash_typed(missing_type, &untyped);
    store
        .insert(
            u,
            &uwf_cas::Node {
                type_hash: missing_type,
                payload: untyped,
                timestamp: 1,
            },
        )
        .unwrap();
    let report = cas.verify().unwrap();
    let invalid: BTreeSet<Hash> = report
        .issues
        .iter()
        .map(|i| match i {
            VerifyIssue::Invalid { hash, .. } => *hash,
            other => panic!("unexpected issue {other:?}"),
        })
        .collect();
    assert_eq!(invalid, BTreeSet::from([h, u]));
}

#[test]
fn reindex_restores_the_index_and_removes_stale_markers() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let nodes: BTreeSet<Hash> = (0..5)
        .map(|i| cas.put(t, json!({ "text": format!("n{i}") })).unwrap().hash)
        .collect();
    let schemas_before = cas.schemas().unwrap();
    assert_eq!(
        cas.list_by_type(t).unwrap(),
        nodes.iter().copied().collect::<Vec<_>>()
    );

    let index = dir.path().join("cas/index");
    fs::remove_dir_all(&index).unwrap();
    assert!(cas.list_by_type(t).unwrap().is_empty());
    assert!(cas.schemas().unwrap().is_empty());

    let total = 4 + 1 + nodes.len();
    let report = cas.reindex().unwrap();
    assert_eq!(report.nodes, total);
    assert_eq!(report.added, total);
    assert_eq!(report.removed, 0);
    assert_eq!(report.types, 2, "meta and note");
    assert!(report.unreadable.is_empty());
    assert_eq!(
        cas.list_by_type(t).unwrap(),
        nodes.iter().copied().collect::<Vec<_>>()
    );
    assert_eq!(cas.schemas().unwrap(), schemas_before);

    // Stale markers: one for a node that does not exist, one under the wrong type.
    let some = *nodes.iter().next().unwrap();
    let ghost = Hash::from_u64(99);
    let wrong_type = cas.types().workflow;
    fs::write(index.join(t.to_string()).join(ghost.to_string()), b"").unwrap();
    fs::create_dir_all(index.join(wrong_type.to_string())).unwrap();
    fs::write(
        index.join(wrong_type.to_string()).join(some.to_string()),
        b"",
    )
    .unwrap();
    assert!(cas.list_by_type(t).unwrap().contains(&ghost));
    assert_eq!(cas.list_by_type(wrong_type).unwrap(), vec![some]);

    let report = cas.reindex().unwrap();
    assert_eq!(report.added, 0);
    assert_eq!(report.removed, 2);
    assert_eq!(
        cas.list_by_type(t).unwrap(),
        nodes.iter().copied().collect::<Vec<_>>()
    );
    assert!(cas.list_by_type(wrong_type).unwrap().is_empty());

    // A corrupt node is reported as unreadable and keeps its marker.
    fs::write(object_path(&dir, some), b"oops").unwrap();
    let report = cas.reindex().unwrap();
    assert_eq!(report.unreadable, vec![some]);
    assert_eq!(report.removed, 0);
    assert!(cas.list_by_type(t).unwrap().contains(&some));
}

#[test]
fn a_lost_index_marker_is_healed_by_the_next_put() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);
    let s = cas.put(t, json!({ "text": "m" })).unwrap();
    fs::remove_file(
        dir.path()
            .join("cas/index")
            .join(t.to_string())
            .join(s.hash.to_string()),
    )
    .unwrap();
    assert!(cas.list_by_type(t).unwrap().is_empty());
    assert!(!cas.put(t, json!({ "text": "m" })).unwrap().created);
    assert_eq!(cas.list_by_type(t).unwrap(), vec![s.hash]);
}

#[test]
fn many_writers_agree() {
    const THREADS: usize = 8;
    const PUTS: usize = 200;
    const DISTINCT: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let root = Arc::new(dir.path().to_path_buf());
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (root, barrier) = (Arc::clone(&root), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                // Every thread bootstraps the fresh store and registers the
                // same schema at the same time.
                let cas = Cas::open(&root).unwrap();
                let ty = cas.put_schema(note_schema()).unwrap().hash;
                let mut seen = Vec::with_capacity(PUTS);
                for j in 0..PUTS {
                    let k = (j + t * 37) % DISTINCT;
                    // Half the threads write integral floats: same nodes.
                    let n = if t % 2 == 0 {
                        json!(k)
                    } else {
                        json!(k as f64)
                    };
                    let s = cas
                        .put(ty, json!({ "text": format!("item {}", k % 10), "n": n }))
                        .unwrap();
                    seen.push((s.hash, s.node.timestamp, s.created));
                }
                (ty, seen)
            })
        })
        .collect();
    /// (hash, timestamp, created) of every put of one thread.
    type Seen = Vec<(Hash, u64, bool)>;
    let results: Vec<(Hash, Seen)> = handles.into_iter().map(|h| h.join().unwrap()).collect();

    let ty = results[0].0;
    assert!(results.iter().all(|r| r.0 == ty));
    let mut timestamps: HashMap<Hash, BTreeSet<u64>> = HashMap::new();
    let mut creations: HashMap<Hash, usize> = HashMap::new();
    for (_, seen) in &results {
        for &(h, ts, created) in seen {
            timestamps.entry(h).or_default().insert(ts);
            *creations.entry(h).or_default() += usize::from(created);
        }
    }
    assert_eq!(timestamps.len(), DISTINCT);
    let cas = Cas::open(&root).unwrap();
    for (h, ts) in &timestamps {
        assert_eq!(ts.len(), 1, "{h} was seen with timestamps {ts:?}");
        assert_eq!(creations[h], 1, "{h} created {} times", creations[h]);
        let node = cas.get(*h).unwrap();
        assert_eq!(Some(&node.timestamp), ts.iter().next());
    }
    let report = cas.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.nodes, 4 + 1 + DISTINCT);
    assert_eq!(cas.list_by_type(ty).unwrap().len(), DISTINCT);
    assert_eq!(cas.schemas().unwrap().len(), 5);
    let leftovers: Vec<PathBuf> = files(&dir.path().join("cas"))
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(".uwf-") || name.ends_with(".tmp")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Writers storing one node while something removes its file again and
/// again (a collection with `--grace 0s` beside answers that store equal
/// outputs: `cas_cli`'s `gc_beside_running_work_never_leaves_a_broken_root`)
/// never fail: a file that vanishes between losing the race to create it
/// and reading the winner's is stored again.
#[test]
fn a_node_removed_while_writers_race_to_store_it_is_stored_again() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const WRITERS: usize = 3;
    const PUTS: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let ty = note(&cas);
    let payload = json!({ "text": "the same answer" });
    let hash = cas.put(ty, payload.clone()).unwrap().hash;
    let path = object_path(&dir, hash);
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(WRITERS + 1);
    std::thread::scope(|s| {
        let remover = s.spawn(|| {
            barrier.wait();
            let mut removed = 0usize;
            while !stop.load(Ordering::Relaxed) {
                removed += usize::from(fs::remove_file(&path).is_ok());
                std::thread::yield_now();
            }
            removed
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                s.spawn(|| {
                    let cas = open(&dir);
                    barrier.wait();
                    for _ in 0..PUTS {
                        let stored = cas.put(ty, payload.clone());
                        assert_eq!(stored.map(|s| s.hash).ok(), Some(hash));
                    }
                })
            })
            .collect();
        let outcome: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::Relaxed);
        let removed = remover.join().unwrap();
        assert!(removed > 0, "the race was not exercised");
        for o in outcome {
            o.unwrap();
        }
    });
    cas.put(ty, payload).unwrap();
    assert!(cas.verify().unwrap().is_ok());
}

#[test]
fn malformed_hashes_are_rejected_by_parsing() {
    for bad in [
        "",
        ".",
        "..",
        "../x",
        "../../etc/pas",
        "/etc/passwd",
        "AAAA/AAAAAAAA",
        "AAAA\\AAAAAAAA",
        "AAAAAAAAAAAA.",
        ".AAAAAAAAAAAA",
        "AAAAAAAAAAAA",
        "AAAAAAAAAAAAAA",
        "AAAAAAAAAAAU",
        "AAAAAAAAAAAAU",
        "GAAAAAAAAAAAA",
        "ZZZZZZZZZZZZZ",
        " AAAAAAAAAAAA",
        "AAAAAAAAAAAA\n",
        "AAAAAAAAAAAA\0",
        "ÀAAAAAAAAAAAA",
        "ééééééééééééé",
    ] {
        let err = bad.parse::<Hash>().expect_err(bad);
        // It converts into the store's error type for callers.
        assert!(matches!(CasError::from(err), CasError::BadHash(_)), "{bad}");
    }
    // Case and Crockford's aliases are accepted on input and canonicalized.
    let h: Hash = "2084bepvb057m".parse().unwrap();
    assert_eq!(h.to_string(), "2084BEPVB057M");
    let aliased: Hash = "o0ILl00000000".parse().unwrap();
    assert_eq!(aliased.to_string(), "0011100000000");
    assert!(!Hash::is_cas_ref("o0ILl00000000"));
    assert!(!Hash::is_cas_ref("2084bepvb057m"));
    assert!(Hash::is_cas_ref("2084BEPVB057M"));
}

#[test]
fn put_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = note(&cas);

    let unknown = Hash::from_u64(12345);
    assert!(matches!(
        cas.put(unknown, json!({})),
        Err(CasError::UnknownType(h)) if h == unknown
    ));

    let data = cas.put(t, json!({ "text": "not a schema" })).unwrap().hash;
    assert!(matches!(
        cas.put(data, json!({})),
        Err(CasError::NotASchema(h)) if h == data
    ));

    match cas.put(
        t,
        json!({ "text": 5, "prev": "not-a-hash", "nested": { "k": "x" }, "extra": true }),
    ) {
        Err(CasError::Invalid {
            type_hash,
            title,
            violations,
        }) => {
            assert_eq!(type_hash, t);
            assert_eq!(title, "note");
            let paths: BTreeSet<&str> = violations.iter().map(|v| v.path.as_str()).collect();
            for p in ["/text", "/prev", "/nested/k"] {
                assert!(paths.contains(p), "no violation at {p}: {violations:?}");
            }
            // The unexpected member is reported against the object holding it.
            assert!(paths.contains(""), "{violations:?}");
            assert!(violations.iter().all(|v| !v.message.is_empty()));
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    // Nothing was written for the failed puts.
    assert_eq!(cas.list_by_type(t).unwrap(), vec![data]);

    // Schemas outside the subset are rejected with a reason.
    match cas.put_schema(json!({ "type": "object", "nullable": true })) {
        Err(CasError::UnsupportedSchema { reason }) => assert!(reason.contains("nullable")),
        other => panic!("expected UnsupportedSchema, got {other:?}"),
    }
    // `put` with the meta-schema as type is `put_schema`.
    assert!(matches!(
        cas.put(cas.types().meta, json!({ "requried": ["a"] })),
        Err(CasError::UnsupportedSchema { .. })
    ));
}

#[test]
fn schemas_lists_the_built_in_schemas_with_titles() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let types = cas.types();
    let listed: BTreeMap<Hash, Option<String>> = cas
        .schemas()
        .unwrap()
        .into_iter()
        .map(|e| (e.hash, e.title))
        .collect();
    let want = BTreeMap::from([
        (types.meta, Some("Schema".to_string())),
        (types.workflow, Some("Workflow".to_string())),
        (types.start_node, Some("StartNode".to_string())),
        (types.step_node, Some("StepNode".to_string())),
    ]);
    assert_eq!(listed, want);
    assert_eq!(types.meta, schema::meta_schema_hash());
    // Sorted by hash, and a new schema joins the list.
    let untitled = cas.put_schema(json!({ "type": "string" })).unwrap().hash;
    let all = cas.schemas().unwrap();
    assert!(all.windows(2).all(|w| w[0].hash < w[1].hash));
    assert!(all.iter().any(|e| e.hash == untitled && e.title.is_none()));
    // Reopening writes nothing new.
    let before = files(&dir.path().join("cas")).len();
    let again = open(&dir);
    assert_eq!(again.types(), types);
    assert_eq!(files(&dir.path().join("cas")).len(), before);
}

#[test]
fn walk_is_breadth_first_and_reports_missing_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let types = cas.types();
    let role = cas
        .put_schema(json!({
            "title": "Greeting",
            "type": "object",
            "properties": { "text": { "type": "string" } }
        }))
        .unwrap()
        .hash;
    let workflow = cas
        .put(
            types.workflow,
            json!({
                "name": "hello",
                "description": "Greets once.",
                "roles": {
                    "greeter": {
                        "description": "says hello",
                        "systemPrompt": "Say hello.",
                        "outputSchema": role.to_string()
                    }
                },
                "graph": {
                    "$START": [{ "role": "greeter", "condition": null }],
                    "greeter": [{ "role": "$END", "condition": null }]
                }
            }),
        )
        .unwrap()
        .hash;
    let missing = Hash::from_u64(0xdead_beef);
    let start = cas
        .put(
            types.start_node,
            json!({
                "workflow": workflow.to_string(),
                "prompt": "Say hello.",
                "parentState": missing.to_string()
            }),
        )
        .unwrap()
        .hash;

    let entries = cas.walk(start).unwrap();
    let entry = |hash, type_hash, depth, missing| WalkEntry {
        hash,
        type_hash,
        depth,
        missing,
    };
    assert_eq!(entries.len(), 4, "{entries:?}");
    assert_eq!(entries[0], entry(start, Some(types.start_node), 0, false));
    // Depth 1, in any order: the workflow and the missing parent.
    let key = |e: &WalkEntry| (e.hash, e.type_hash, e.depth, e.missing);
    let depth1: BTreeSet<_> = entries[1..3].iter().map(key).collect();
    assert_eq!(
        depth1,
        BTreeSet::from([
            key(&entry(workflow, Some(types.workflow), 1, false)),
            key(&entry(missing, None, 1, true)),
        ])
    );
    assert_eq!(entries[3], entry(role, Some(types.meta), 2, false));
    assert!(entries.windows(2).all(|w| w[0].depth <= w[1].depth));

    // Refs do not include the type.
    let refs = cas.refs(start).unwrap();
    let targets: BTreeSet<Hash> = refs.iter().map(|r| r.hash).collect();
    assert_eq!(targets, BTreeSet::from([workflow, missing]));
    assert_eq!(
        cas.refs(workflow).unwrap()[0].path,
        "/roles/greeter/outputSchema"
    );
    assert!(cas.refs(role).unwrap().is_empty());

    // A walk from a leaf is just the leaf; from a missing root, an error.
    assert_eq!(
        cas.walk(role).unwrap(),
        vec![entry(role, Some(types.meta), 0, false)]
    );
    assert!(matches!(cas.walk(missing), Err(CasError::NotFound(h)) if h == missing));
    // verify sees the dangling parent.
    assert_eq!(
        cas.verify().unwrap().issues,
        vec![VerifyIssue::Dangling {
            from: start,
            path: "/parentState".into(),
            hash: missing,
        }]
    );
}

#[test]
fn walk_visits_each_node_once_in_a_diamond() {
    let cas = Cas::new(MemStore::new()).unwrap();
    let t = cas
        .put_schema(json!({
            "type": "object",
            "properties": {
                "links": { "type": "array", "items": { "type": "string", "format": "cas_ref" } }
            }
        }))
        .unwrap()
        .hash;
    let leaf = cas.put(t, json!({ "links": [] })).unwrap().hash;
    let a = cas
        .put(t, json!({ "links": [leaf.to_string()] }))
        .unwrap()
        .hash;
    let b = cas
        .put(t, json!({ "links": [leaf.to_string(), a.to_string()] }))
        .unwrap()
        .hash;
    let top = cas
        .put(t, json!({ "links": [a.to_string(), b.to_string()] }))
        .unwrap()
        .hash;
    let got: Vec<(Hash, usize)> = cas
        .walk(top)
        .unwrap()
        .into_iter()
        .map(|e| (e.hash, e.depth))
        .collect();
    assert_eq!(got, vec![(top, 0), (a, 1), (b, 1), (leaf, 2)]);
}

/// Putting the meta-schema's own payload as a schema must name the
/// meta-schema node (it is self-typed), not create a second node that reads
/// back as corrupt.
#[test]
fn putting_the_meta_schema_names_the_meta_schema_node() {
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let meta = cas.types().meta;
    let s = cas.put_schema(schema::meta_schema()).unwrap();
    assert_eq!(s.hash, meta);
    assert!(!s.created);
    let s = cas.put(meta, schema::meta_schema()).unwrap();
    assert_eq!(s.hash, meta);
    assert!(cas.get(s.hash).unwrap().is_self_typed());
    assert!(cas.verify().unwrap().is_ok());

    let mem = Cas::new(MemStore::new()).unwrap();
    assert_eq!(mem.put_schema(schema::meta_schema()).unwrap().hash, meta);
}

/// Every schema that `put_schema` accepts must allow `refs` (and so `walk`)
/// on the nodes that `put` accepts for it.
#[test]
fn accepted_schemas_allow_refs_on_accepted_nodes() {
    let cas = Cas::new(MemStore::new()).unwrap();
    for (schema, payload) in [
        (json!({ "$ref": "#" }), json!({})),
        (
            json!({ "type": "object", "properties": { "a": { "$ref": "#/properties/a" } } }),
            json!({ "a": 1 }),
        ),
    ] {
        let Ok(t) = cas.put_schema(schema.clone()) else {
            continue; // rejecting the schema is a valid fix
        };
        let Ok(n) = cas.put(t.hash, payload) else {
            continue; // so is rejecting the payload
        };
        cas.refs(n.hash)
            .unwrap_or_else(|e| panic!("schema {schema} accepted, but refs fails: {e}"));
        cas.walk(n.hash)
            .unwrap_or_else(|e| panic!("schema {schema} accepted, but walk fails: {e}"));
    }
}

/// gc keeps what the roots reach (and every schema), sweeps the rest, and
/// respects the grace period and dry runs.
/// A schema is never swept, even one whose type-index entry is not there
/// (yet): a writer stores the node first and its index entry after, and a
/// collection may list the index in between (seen in `cas_cli`'s
/// `gc_beside_running_work_never_leaves_a_broken_root`).
#[test]
fn gc_keeps_a_schema_missing_from_the_type_index() {
    use uwf_cas::GcOptions;
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let ty = note(&cas);
    let meta = cas.types().meta;
    let marker = dir
        .path()
        .join("cas/index")
        .join(meta.to_string())
        .join(ty.to_string());
    fs::remove_file(&marker).unwrap();
    // Stale at once: the node was stored before the collection started.
    std::thread::sleep(std::time::Duration::from_millis(2));
    let report = cas
        .gc(
            std::iter::empty(),
            GcOptions {
                dry_run: false,
                grace_ms: 0,
            },
        )
        .unwrap();
    assert!(!report.swept.contains(&ty), "{report:?}");
    assert!(cas.has(ty).unwrap());
    assert!(cas.put(ty, json!({"text": "still a type"})).is_ok());
}

#[test]
fn gc_marks_from_roots_and_sweeps_the_rest() {
    use uwf_cas::GcOptions;
    let dir = tempfile::tempdir().unwrap();
    let cas = open(&dir);
    let t = cas
        .put_schema(json!({"type": "object", "properties": {"next": {"type": ["string", "null"], "format": "cas_ref"}}}))
        .unwrap()
        .hash;
    let leaf = cas.put(t, json!({"next": null, "n": 1})).unwrap().hash;
    let root = cas.put(t, json!({"next": leaf.to_string()})).unwrap().hash;
    let orphan = cas.put(t, json!({"next": null, "n": 2})).unwrap().hash;
    let orphan_parent = cas
        .put(t, json!({"next": orphan.to_string()}))
        .unwrap()
        .hash;

    // Everything is younger than an hour: nothing goes.
    let r = cas
        .gc(
            [root],
            GcOptions {
                dry_run: false,
                grace_ms: 3_600_000,
            },
        )
        .unwrap();
    assert_eq!((r.swept.len(), r.recent), (0, 2));

    let dry = cas
        .gc(
            [root],
            GcOptions {
                dry_run: true,
                grace_ms: 0,
            },
        )
        .unwrap();
    let mut swept = dry.swept.clone();
    swept.sort();
    let mut want = vec![orphan, orphan_parent];
    want.sort();
    assert_eq!(swept, want);
    assert!(cas.has(orphan).unwrap(), "dry run removed something");

    let r = cas
        .gc(
            [root],
            GcOptions {
                dry_run: false,
                grace_ms: 0,
            },
        )
        .unwrap();
    assert_eq!(r.swept.len(), 2);
    assert!(!cas.has(orphan).unwrap() && !cas.has(orphan_parent).unwrap());
    assert!(cas.has(root).unwrap() && cas.has(leaf).unwrap() && cas.has(t).unwrap());
    // Every schema survives, even unused ones, and the store stays sound.
    assert_eq!(cas.schemas().unwrap().len(), 5);
    assert!(cas.verify().unwrap().is_ok());
    assert_eq!(
        cas.list_by_type(t).unwrap().len(),
        2,
        "index entries of swept nodes are gone"
    );
}

/// Copies a directory tree.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Every file under `dir` with its bytes, keyed by the path below `dir`.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files(dir)
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            (p.strip_prefix(dir).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

/// `tests/fixtures/store-0.1` is a storage root written by uwf 0.1 (before
/// the `Store` trait lost its paths): a `note` schema and two notes, made
/// with `uwf cas schema put` and `uwf cas put`.
#[test]
fn a_store_written_by_the_previous_release_still_works() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-0.1"),
        dir.path(),
    );
    let before = snapshot(dir.path());
    let cas = open(&dir);
    let t: Hash = "1X6AZ6Y9DJ5F3".parse().unwrap();
    let a: Hash = "6CBRGB2V6SAQ6".parse().unwrap();
    let b: Hash = "3XG03BECR3JHZ".parse().unwrap();

    let report = cas.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.nodes, 7);
    assert_eq!(cas.get(b).unwrap().payload["prev"], a.to_string());
    assert_eq!(cas.list_by_type(t).unwrap(), vec![b, a]);
    assert_eq!(cas.walk(b).unwrap().len(), 2);
    assert_eq!(cas.schemas().unwrap().len(), 5);
    let again = cas.put(t, json!({"text": "first", "prev": null})).unwrap();
    assert_eq!((again.hash, again.created), (a, false));
    // Opening, reading and re-putting wrote nothing.
    assert_eq!(snapshot(dir.path()), before);
    // Every node file is exactly what this version would write for that node.
    for h in cas.store().hashes() {
        let h = h.unwrap();
        let mut want = serde_json::to_vec(&cas.get(h).unwrap()).unwrap();
        want.push(b'\n');
        assert_eq!(fs::read(object_path(&dir, h)).unwrap(), want, "{h}");
    }
}
