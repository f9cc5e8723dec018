//! Editors and shells (issue 13 §5): the workflow JSON Schema, man pages,
//! completion of thread ids and workflow names.
//!
//! The tests that touch the store run on both stores (`per_backend!`): on
//! PostgreSQL completion offers the threads and workflows of the database
//! `UWF_STORE` names, and printing the schema needs no database either.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Backend, Env, example};
use serde_json::Value;

per_backend!(
    workflow_schema_is_json_schema_and_needs_no_root,
    thread_ids_and_workflow_names_complete,
);

/// The names of the tables in the database of a PostgreSQL environment
/// (the schema's bookkeeping included); empty on the filesystem.
fn all_tables(env: &Env) -> Vec<String> {
    let Some(db) = &env.db else {
        return Vec::new();
    };
    db.client()
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn workflow_schema_is_json_schema_and_needs_no_root(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let schema = env.json(&["workflow", "schema"]);
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(
        schema["required"],
        serde_json::json!(["name", "roles", "graph"])
    );
    assert!(schema["definitions"]["role"]["properties"]["meta"].is_object());
    assert!(!env.root().exists(), "printing the schema created the root");
    // Nor does it open the database: not even the schema is created.
    assert_eq!(all_tables(&env), Vec::<String>::new());
    let yaml = env.text(&["--format", "yaml", "workflow", "schema"]);
    let back: Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(back, schema);
}

/// No store involved: the pages come from the command definitions.
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

fn thread_ids_and_workflow_names_complete(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    // No thread to offer yet, only `@last` (and the options), on a store
    // that holds nothing.
    let offered = complete(&env, &["uwf", "thread", "show", ""]);
    let values: Vec<&String> = offered.iter().filter(|c| !c.starts_with('-')).collect();
    assert_eq!(values, ["@last"], "{offered:?}");
    env.json(&["workflow", "put", &example("triage.yaml")]);
    let id = env.json(&["thread", "start", "triage", "-p", "Dark mode resets"])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    // The candidates come from the store: on PostgreSQL its tables, the
    // root holding no thread or registry file.
    assert!(env.heads().contains_key(&id), "{:?}", env.heads());
    assert!(
        env.registry().contains_key("triage"),
        "{:?}",
        env.registry()
    );
    if env.db.is_some() {
        for file in ["threads", "registry.yaml", "cas"] {
            assert!(!env.root().join(file).exists(), "{file} in the root");
        }
    }
    // Every command taking a thread offers the ids, `view` and `resume` too.
    for command in ["show", "view", "resume", "read"] {
        let threads = complete(&env, &["uwf", "thread", command, ""]);
        assert!(threads.contains(&id), "{command}: {threads:?}");
        assert!(
            threads.contains(&"@last".to_string()),
            "{command}: {threads:?}"
        );
    }
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
