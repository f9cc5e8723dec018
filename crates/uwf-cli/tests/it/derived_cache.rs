//! The derived caches (docs/state.md, "Derived data") can be deleted or
//! damaged at any time without changing what a step does: a thread stepped
//! while its cache entries are removed, truncated, bit-flipped or swapped
//! between steps ends exactly where an undisturbed thread ends.
//!
//! The test runs on both stores (`per_backend!`): on the filesystem the
//! entries are the files of `cas/cache/`, on PostgreSQL the rows of the
//! `uwf_cache` table, damaged the same ways with SQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Backend, Env, mock_bin};

per_backend!(damaged_or_deleted_caches_never_change_a_step);

const LOOP: &str = r#"name: loop
description: a counted loop, long enough for the chain cache
roles:
  work:
    description: works
    systemPrompt: "do the work"
    outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
conditions:
  enough: { description: forty steps, expression: "$count(steps) >= 40" }
graph:
  $START: [ { role: work, condition: null } ]
  work: [ { role: $END, condition: enough }, { role: work, condition: null } ]
"#;

/// The same loop with a condition that may read any step: each step loads
/// the whole chain (chain entries) where `LOOP`'s steps read the last step
/// and the chain's length (length entries).
const LOOP_ALL: &str = r#"name: loop
description: a counted loop that reads the whole history
roles:
  work:
    description: works
    systemPrompt: "do the work"
    outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
conditions:
  enough: { description: forty steps, expression: "$count(steps[role = 'work']) >= 40" }
graph:
  $START: [ { role: work, condition: null } ]
  work: [ { role: $END, condition: enough }, { role: work, condition: null } ]
"#;

const SCENARIO: &str =
    "roles:\n  work:\n    - output: { n: 1 }\n    - output: { n: 2 }\n    - output: { n: 3 }\n";

/// The store's derived cache entries, in key order: key → bytes. The
/// files of `cas/cache/` (named by their key) on the filesystem, the rows
/// of `uwf_cache` on PostgreSQL.
fn cache_entries(env: &Env) -> Vec<(String, Vec<u8>)> {
    if let Some(db) = &env.db {
        return db
            .client()
            .query("SELECT key, value FROM uwf_cache ORDER BY key", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    }
    let Ok(rd) = std::fs::read_dir(cache_dir(env)) else {
        return Vec::new();
    };
    let mut entries: Vec<(String, Vec<u8>)> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let key = p.file_name().unwrap().to_str().unwrap().to_string();
            (key, std::fs::read(&p).unwrap())
        })
        .collect();
    entries.sort();
    entries
}

fn cache_dir(env: &Env) -> std::path::PathBuf {
    env.root().join("cas").join("cache")
}

/// Replaces the bytes of the existing entry `key` behind uwf's back.
fn overwrite(env: &Env, key: &str, bytes: &[u8]) {
    if let Some(db) = &env.db {
        let n = db
            .client()
            .execute(
                "UPDATE uwf_cache SET value = $2 WHERE key = $1",
                &[&key, &bytes],
            )
            .unwrap();
        assert_eq!(n, 1, "no uwf_cache row {key}");
        return;
    }
    let path = cache_dir(env).join(key);
    assert!(path.is_file(), "no cache file {}", path.display());
    std::fs::write(path, bytes).unwrap();
}

/// Writes the entry `key` behind uwf's back, whether it exists or not.
fn put(env: &Env, key: &str, bytes: &[u8]) {
    if let Some(db) = &env.db {
        db.client()
            .execute(
                "INSERT INTO uwf_cache (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&key, &bytes],
            )
            .unwrap();
        return;
    }
    std::fs::write(cache_dir(env).join(key), bytes).unwrap();
}

/// Removes the entry `key` behind uwf's back.
fn remove(env: &Env, key: &str) {
    if let Some(db) = &env.db {
        let n = db
            .client()
            .execute("DELETE FROM uwf_cache WHERE key = $1", &[&key])
            .unwrap();
        assert_eq!(n, 1, "no uwf_cache row {key}");
        return;
    }
    std::fs::remove_file(cache_dir(env).join(key)).unwrap();
}

/// Removes every entry: the directory, or every row of the table.
fn clear(env: &Env) {
    if let Some(db) = &env.db {
        db.client().execute("DELETE FROM uwf_cache", &[]).unwrap();
        return;
    }
    std::fs::remove_dir_all(cache_dir(env)).ok();
}

/// Steps a fresh thread on `backend` to its end, calling `disturb` before
/// every step; returns the thread's whole chain (as `thread steps` prints
/// it) and the number of steps. `None` when PostgreSQL tests are skipped.
fn run(
    backend: Backend,
    workflow: &str,
    disturb: &mut dyn FnMut(&Env, usize),
) -> Option<(String, usize)> {
    let env = Env::on(backend)?;
    let wf = env.file("loop.yaml", workflow);
    let scenario = env.file("loop.mock.yaml", SCENARIO);
    // An alias, so both runs record the same agent label.
    env.set_config(&format!(
        "agents:\n  mock: {{ command: '{}', args: ['{}'] }}\ndefaultAgent: mock\n",
        mock_bin().display(),
        scenario.display()
    ));
    let id = env.json(&["thread", "start", wf.to_str().unwrap(), "-p", "count"])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    let mut steps = 0;
    loop {
        disturb(&env, steps);
        let out = env.json(&["thread", "step", &id]);
        if out["done"] == true {
            if env.db.is_some() {
                // The cache is the database's, not the root's.
                assert!(!env.root().join("cas").exists());
            }
            // The whole chain, read again without any cache.
            clear(&env);
            let mut chain = env.json(&["thread", "steps", &id]);
            env.json(&["cas", "verify"]);
            // The thread id and the times differ from run to run; the
            // nodes (hashes, roles, outputs, links) must not.
            chain["thread"] = serde_json::Value::Null;
            for s in chain["steps"].as_array_mut().unwrap() {
                let s = s.as_object_mut().unwrap();
                s.remove("timestamp");
                s.remove("durationMs");
            }
            return Some((chain.to_string(), steps));
        }
        steps += 1;
        assert!(steps < 100, "the thread did not end");
    }
}

fn damaged_or_deleted_caches_never_change_a_step(backend: Backend) {
    for workflow in [LOOP, LOOP_ALL] {
        disturbed_steps_end_where_clean_ones_do(backend, workflow);
    }
}

fn disturbed_steps_end_where_clean_ones_do(backend: Backend, workflow: &str) {
    let Some((clean_head, clean_steps)) = run(backend, workflow, &mut |_, _| {}) else {
        return;
    };
    assert!(
        clean_steps > 30,
        "{clean_steps} steps are too few to use the cache"
    );

    // How often each disturbance hit an entry: deleted, cut in half,
    // bit-flipped, emptied, swapped.
    let mut done = [0usize; 5];
    // Every entry seen so far, as uwf wrote it.
    let mut seen: Vec<(String, Vec<u8>)> = Vec::new();
    let (head, steps) = run(backend, workflow, &mut |env, n| {
        let entries = cache_entries(env);
        for (i, (key, bytes)) in entries.iter().enumerate() {
            let kind = (n + i) % 5;
            match kind {
                // Deleted.
                0 => remove(env, key),
                // Cut in half.
                1 => overwrite(env, key, &bytes[..bytes.len() / 2]),
                // One bit flipped in the body (of an entry not emptied before).
                2 if bytes.len() > 10 => {
                    let mut bytes = bytes.clone();
                    let at = bytes.len() - 10;
                    bytes[at] ^= 0x04;
                    overwrite(env, key, &bytes);
                }
                // Emptied.
                3 => overwrite(env, key, b""),
                // Left alone.
                _ => continue,
            }
            done[kind] += 1;
        }
        // Swapped: another chain's entry under this key, well formed (its
        // checksum holds) but of a shorter chain that ends elsewhere. The
        // cache holds about one entry per thread, so the other entry is
        // one seen at an earlier step.
        if n % 7 == 0
            && let Some((key, _)) = entries.first()
            && let Some((_, other)) = seen.iter().rev().find(|(k, _)| k != key)
        {
            put(env, key, other);
            done[4] += 1;
        }
        seen.extend(entries);
    })
    .unwrap();
    assert!(
        done.iter().all(|&n| n > 0),
        "not every disturbance happened (deleted, cut, flipped, emptied, swapped): {done:?}"
    );
    assert_eq!(steps, clean_steps);
    assert_eq!(head, clean_head, "a damaged cache changed the chain");
}
