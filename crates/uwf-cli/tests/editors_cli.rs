//! Editors and shells (issue 13 §5): the workflow JSON Schema, man pages,
//! completion of thread ids and workflow names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, example};
use serde_json::Value;

#[test]
fn workflow_schema_is_json_schema_and_needs_no_root() {
    let env = Env::new();
    let schema = env.json(&["workflow", "schema"]);
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(
        schema["required"],
        serde_json::json!(["name", "roles", "graph"])
    );
    assert!(schema["definitions"]["role"]["properties"]["meta"].is_object());
    assert!(!env.root().exists(), "printing the schema created the root");
    let yaml = env.text(&["--format", "yaml", "workflow", "schema"]);
    let back: Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(back, schema);
}

#[test]
fn man_pages_come_from_the_command_definitions() {
    let env = Env::new();
    let page = env.text(&["man"]);
    assert!(page.contains(".TH uwf 1"), "{page}");
    assert!(page.contains("completions"), "{page}");
    let dir = env.dir.path().join("man1");
    let v = env.json(&["man", "--dir", dir.to_str().unwrap()]);
    let pages: Vec<&str> = v["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for want in [
        "uwf.1",
        "uwf-thread-run.1",
        "uwf-workflow-schema.1",
        "uwf-man.1",
    ] {
        assert!(pages.contains(&want), "{want} not in {pages:?}");
    }
    let run = std::fs::read_to_string(dir.join("uwf-thread-run.1")).unwrap();
    assert!(run.contains("prompt\\-file"), "{run}");
}

/// Candidates `uwf` offers for the last word of `words` (fish's protocol:
/// one `value\thelp` per line).
fn complete(env: &Env, words: &[&str]) -> Vec<String> {
    let out = env
        .uwf()
        .env("UWF_COMPLETE", "fish")
        .current_dir(common::examples())
        .arg("--")
        .args(words)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect()
}

#[test]
fn thread_ids_and_workflow_names_complete() {
    let env = Env::new();
    env.json(&["workflow", "put", &example("triage.yaml")]);
    let id = env.json(&["thread", "start", "triage", "-p", "Dark mode resets"])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    let threads = complete(&env, &["uwf", "thread", "show", ""]);
    assert!(threads.contains(&id), "{threads:?}");
    assert!(threads.contains(&"@last".to_string()), "{threads:?}");
    let out = env
        .uwf()
        .env("UWF_COMPLETE", "fish")
        .args(["--", "uwf", "thread", "read", &id[..6]])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("{id}\tDark mode resets")), "{text}");
    let workflows = complete(&env, &["uwf", "thread", "run", "tri"]);
    assert!(workflows.contains(&"triage".to_string()), "{workflows:?}");
    assert!(
        workflows.contains(&"triage.yaml".to_string()),
        "{workflows:?}"
    );
    // The script the user installs calls uwf back.
    let script = env.text(&["completions", "bash"]);
    assert!(
        script.contains("UWF_COMPLETE=\"bash\"") || script.contains("UWF_COMPLETE=bash"),
        "{script}"
    );
}
