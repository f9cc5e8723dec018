//! A store written by uwf 0.1.0 (tests/fixtures/store-0.1.0, see its
//! README) keeps working: today's `uwf` lists, shows and reads its threads,
//! verifies it, answers the waiting thread and runs every active thread to
//! its end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::{Env, examples, mock_agent};
use serde_json::Value;

const ACTIVE: &str = "01M85H61WDYS2METW4Y8QBVMRN";
const FRESH: &str = "01M85H620JB0T44G41A0APYJEP";
const WAITING: &str = "01M85H623JST2KSD3ZEXCY3B06";
const DONE: &str = "01M85H61T5WJCDQMBA34P7FD4K";
const KILLED: &str = "01M85H620QAZ9E866QNNY97P5V";
const NESTED: &str = "01M85H626Z4GMZ5MPQDA7MZ2TX";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn legacy() -> Env {
    let env = Env::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-0.1.0");
    copy_dir(&fixture, &env.root());
    env
}

fn ids(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn a_store_of_the_previous_release_reads_verifies_and_continues() {
    let env = legacy();
    let mut active = vec![ACTIVE.to_string(), FRESH.to_string(), WAITING.to_string()];
    active.sort();
    assert_eq!(ids(&env.json(&["thread", "list"])), active);
    let all = ids(&env.json(&["thread", "list", "--all"]));
    for id in [DONE, KILLED, NESTED] {
        assert!(all.contains(&id.to_string()), "{id} missing from {all:?}");
    }
    env.json(&["cas", "verify"]);

    let shown = env.json(&["thread", "show", ACTIVE]);
    assert_eq!(shown["done"], false);
    let steps = env.json(&["thread", "steps", ACTIVE]);
    // The StartNode, then the writer and the critic.
    assert_eq!(steps["steps"].as_array().unwrap().len(), 3, "{steps}");
    let done = env.json(&["thread", "show", DONE]);
    assert_eq!(done["done"], true);
    let nested = env.json(&["thread", "show", NESTED]);
    assert_eq!(
        nested["childThreads"].as_array().unwrap().len(),
        2,
        "{nested}"
    );
    let waiting = env.json(&["thread", "list", "--waiting"]);
    assert_eq!(ids(&waiting), vec![WAITING.to_string()]);
    let shown = env.json(&["thread", "show", WAITING]);
    assert_eq!(shown["attempts"].as_array().unwrap().len(), 2, "{shown}");

    // Continue every active thread to its end with today's binary.
    let draft = mock_agent(&examples().join("draft-loop.mock.yaml"));
    for id in [ACTIVE, FRESH] {
        let out = env.json(&["thread", "run", "--thread", id, "--agent", &draft]);
        assert_eq!(out["done"], true, "{id}: {out}");
    }
    env.json(&[
        "thread",
        "answer",
        WAITING,
        "--as",
        "test",
        "--output",
        r#"{"approved": true, "comments": "ok"}"#,
    ]);
    let release = mock_agent(&examples().join("approve-release.mock.yaml"));
    let out = env.json(&["thread", "run", "--thread", WAITING, "--agent", &release]);
    assert_eq!(out["done"], true, "{out}");

    assert!(env.json(&["thread", "list"]).as_array().unwrap().is_empty());
    env.json(&["cas", "verify"]);
}
