//! The derived caches (docs/state.md, "Derived data") can be deleted or
//! damaged at any time without changing what a step does: a thread stepped
//! while its cache entries are removed, truncated, bit-flipped or swapped
//! between steps ends exactly where an undisturbed thread ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{Env, mock_bin};

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

const SCENARIO: &str =
    "roles:\n  work:\n    - output: { n: 1 }\n    - output: { n: 2 }\n    - output: { n: 3 }\n";

fn cache_files(root: &Path) -> Vec<PathBuf> {
    let dir = root.join("cas").join("cache");
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Steps a fresh thread to its end, calling `disturb` before every step;
/// returns the thread's whole chain (as `thread steps` prints it) and the
/// number of steps.
fn run(disturb: &mut dyn FnMut(&Path, usize)) -> (String, usize) {
    let env = Env::new();
    let wf = env.file("loop.yaml", LOOP);
    let scenario = env.file("loop.mock.yaml", SCENARIO);
    // An alias, so both runs record the same agent label.
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "agents:\n  mock: {{ command: '{}', args: ['{}'] }}\ndefaultAgent: mock\n",
            mock_bin().display(),
            scenario.display()
        ),
    )
    .unwrap();
    let id = env.json(&["thread", "start", wf.to_str().unwrap(), "-p", "count"])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    let mut steps = 0;
    loop {
        disturb(&env.root(), steps);
        let out = env.json(&["thread", "step", &id]);
        if out["done"] == true {
            // The whole chain, read again without any cache.
            std::fs::remove_dir_all(env.root().join("cas").join("cache")).ok();
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
            return (chain.to_string(), steps);
        }
        steps += 1;
        assert!(steps < 100, "the thread did not end");
    }
}

#[test]
fn damaged_or_deleted_caches_never_change_a_step() {
    let (clean_head, clean_steps) = run(&mut |_, _| {});
    assert!(
        clean_steps > 30,
        "{clean_steps} steps are too few to use the cache"
    );

    let mut saw_cache = false;
    let (head, steps) = run(&mut |root, n| {
        let files = cache_files(root);
        saw_cache |= !files.is_empty();
        for (i, f) in files.iter().enumerate() {
            match (n + i) % 5 {
                // Deleted.
                0 => std::fs::remove_file(f).unwrap(),
                // Cut in half.
                1 => {
                    let bytes = std::fs::read(f).unwrap();
                    std::fs::write(f, &bytes[..bytes.len() / 2]).unwrap();
                }
                // One bit flipped in the body.
                2 => {
                    let mut bytes = std::fs::read(f).unwrap();
                    let at = bytes.len() - 10;
                    bytes[at] ^= 0x04;
                    std::fs::write(f, bytes).unwrap();
                }
                // Emptied.
                3 => std::fs::write(f, b"").unwrap(),
                // Left alone.
                _ => {}
            }
        }
        // Another thread's chain under this key: well formed, wrong chain.
        if files.len() >= 2 && n % 7 == 0 {
            std::fs::copy(&files[0], &files[1]).ok();
        }
    });
    assert!(saw_cache, "the steps never wrote a cache entry");
    assert_eq!(steps, clean_steps);
    assert_eq!(head, clean_head, "a damaged cache changed the chain");
}
