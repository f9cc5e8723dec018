//! `uwf workflow …` end to end, against the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, example, golden, hash_of};
use serde_json::{Value, json};

/// A small valid workflow; the bad inputs below are variations of it.
const TINY: &str = r#"name: tiny
description: A one-role loop
roles:
  a:
    description: Does a
    systemPrompt: Do a.
    outputSchema: { type: object, properties: { x: { type: integer } }, required: [x] }
conditions:
  big: "steps[-1].output.x > 5"
graph:
  $START:
    - { role: a, condition: null }
  a:
    - { role: a, condition: big }
    - { role: $END, condition: null }
"#;

/// `TINY` with one piece of text replaced (which must be there).
fn tiny_with(from: &str, to: &str) -> String {
    assert!(TINY.contains(from), "{from:?} is not in TINY");
    TINY.replacen(from, to, 1)
}

/// A root that already holds a registered workflow (so the store, the lock
/// file and registry.yaml exist and "nothing changed" is meaningful).
fn populated() -> Env {
    let env = Env::new();
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    env
}

/// `uwf workflow put` of `yaml` fails, says all of `expect` on stderr,
/// prints nothing on stdout, and changes no byte under the root. Returns
/// stderr.
fn refused(yaml: &str, expect: &[&str]) -> String {
    let env = populated();
    let file = env.file("bad.yaml", yaml);
    let before = env.snapshot();
    let err = env.fails(&["workflow", "put", file.to_str().unwrap()]);
    for e in expect {
        assert!(err.contains(e), "stderr lacks {e:?}:\n{err}");
    }
    assert_eq!(env.snapshot(), before, "a refused put changed the root");
    // Starting a thread on the same file is refused the same way.
    let err2 = env.fails(&["thread", "start", file.to_str().unwrap(), "-p", "x"]);
    assert!(err2.contains(expect[0]), "{err2}");
    assert_eq!(
        env.snapshot(),
        before,
        "a refused thread start changed the root"
    );
    err
}

#[test]
fn put_returns_name_and_hash_and_records_it_in_the_registry() {
    let env = Env::new();
    let file = example("solve-issue.yaml");
    let v = env.json(&["workflow", "put", &file]);
    assert_eq!(v["name"], "solve-issue");
    let hash = hash_of(&v);
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");

    let registry: Value =
        serde_yaml::from_slice(&std::fs::read(env.root().join("registry.yaml")).unwrap()).unwrap();
    assert_eq!(registry, json!({"solve-issue": hash}));

    // The roles' schemas are registered under `<workflow>.<role>`.
    let titles: Vec<Value> = env
        .json(&["cas", "schema", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].clone())
        .collect();
    for role in ["planner", "developer", "reviewer"] {
        assert!(
            titles.contains(&json!(format!("solve-issue.{role}"))),
            "{titles:?}"
        );
    }

    // Same file again: same hash, and nothing under the root changes.
    let before = env.snapshot();
    assert_eq!(env.json(&["workflow", "put", &file]), v);
    assert_eq!(env.snapshot(), before);
}

#[test]
fn put_of_a_changed_definition_moves_the_name() {
    let env = Env::new();
    let one = env.file("one.yaml", TINY);
    let two = env.file("two.yaml", &tiny_with("Does a", "Does a, better"));
    let h1 = hash_of(&env.json(&["workflow", "put", one.to_str().unwrap()]));
    let h2 = hash_of(&env.json(&["workflow", "put", two.to_str().unwrap()]));
    assert_ne!(h1, h2);
    assert_eq!(
        env.json(&["workflow", "list"]),
        json!([{"name": "tiny", "hash": h2}])
    );
    // The old version is still in the store, reachable by hash.
    assert_eq!(env.json(&["workflow", "show", &h1])["hash"], h1);
}

#[test]
fn validate_a_good_file_reports_valid_and_writes_nothing() {
    let env = populated();
    let before = env.snapshot();
    let v = env.json(&["workflow", "validate", &example("solve-issue.yaml")]);
    assert_eq!(v["name"], "solve-issue");
    assert_eq!(v["valid"], true);
    assert_eq!(v["errors"], json!([]));
    assert_eq!(v["warnings"], json!([]));
    assert_eq!(env.snapshot(), before);
}

#[test]
fn warnings_do_not_refuse_a_put() {
    let env = Env::new();
    // A transition after the unconditional one is dead.
    let yaml = tiny_with(
        "    - { role: $END, condition: null }\n",
        "    - { role: $END, condition: null }\n    - { role: a, condition: big }\n",
    );
    let file = env.file("dead.yaml", &yaml);
    let v = env.json(&["workflow", "validate", file.to_str().unwrap()]);
    assert_eq!(v["valid"], true);
    assert_eq!(v["warnings"][0]["code"], "dead-transition", "{v}");
    let out = env.output(&["workflow", "put", file.to_str().unwrap()]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning ") && err.contains("can never be taken"),
        "{err}"
    );
    // Placed in the file, with the line and a caret.
    assert!(
        err.contains("dead.yaml:14:29: [dead-transition]")
            && err.contains("    14 |     - { role: a, condition: big }"),
        "{err}"
    );
}

#[test]
fn validate_a_bad_file_prints_the_report_and_exits_1() {
    let env = Env::new();
    let yaml = tiny_with(
        "    - { role: a, condition: big }\n",
        "    - { role: ghost, condition: nope }\n",
    )
    .replace("\"steps[-1].output.x > 5\"", "\"steps[-1].output.((\"");
    let file = env.file("bad.yaml", &yaml);
    let out = env.output(&["workflow", "validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["valid"], false);
    let codes: Vec<&str> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    for code in ["unknown-target", "unknown-condition", "condition-syntax"] {
        assert!(codes.contains(&code), "{codes:?}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 error(s)"), "{err}");
}

#[test]
fn show_by_name_and_by_hash() {
    let env = Env::new();
    let hash = hash_of(&env.json(&["workflow", "put", &example("solve-issue.yaml")]));
    let by_name = env.json(&["workflow", "show", "solve-issue"]);
    let by_hash = env.json(&["workflow", "show", &hash.to_lowercase()]);
    assert_eq!(by_name, by_hash);
    let keys: Vec<&String> = by_name.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["hash", "name", "type", "payload", "timestamp"]);
    assert_eq!(by_name["hash"], hash);
    assert_eq!(by_name["name"], "solve-issue");
    assert!(by_name["timestamp"].as_u64().unwrap() > 1_600_000_000_000);
    // The type is the Workflow schema, and the payload matches `cas get`.
    let node = env.json(&["cas", "get", &hash]);
    assert_eq!(by_name["type"], node["type"]);
    assert_eq!(by_name["payload"], node["payload"]);
    let schema = env.json(&["cas", "schema", "get", by_name["type"].as_str().unwrap()]);
    assert_eq!(schema["title"], "Workflow");
    // Output schemas are stored as references.
    let planner = by_name["payload"]["roles"]["planner"]["outputSchema"]
        .as_str()
        .unwrap();
    assert_eq!(
        env.json(&["cas", "schema", "get", planner])["title"],
        "solve-issue.planner"
    );
    // YAML on request.
    let yaml = env.text(&["--format", "yaml", "workflow", "show", "solve-issue"]);
    let y: Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(y, by_name);
}

#[test]
fn list_registered_workflows() {
    let env = Env::new();
    assert_eq!(env.json(&["workflow", "list"]), json!([]));
    let a = hash_of(&env.json(&["workflow", "put", &example("solve-issue.yaml")]));
    let b = hash_of(&env.json(&["workflow", "put", &example("triage.yaml")]));
    let c = hash_of(&env.json(&["workflow", "put", &example("draft-loop.yaml")]));
    assert_eq!(
        env.json(&["workflow", "list"]),
        json!([
            {"name": "draft-loop", "hash": c},
            {"name": "solve-issue", "hash": a},
            {"name": "triage", "hash": b},
        ])
    );
}

#[test]
fn graph_as_mermaid_and_dot_matches_golden() {
    let env = populated();
    let file = example("solve-issue.yaml");
    let hash = env.json(&["workflow", "show", "solve-issue"])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let before = env.snapshot();
    let mermaid = env.text(&["workflow", "graph", &file]);
    golden("graph.mermaid", &mermaid);
    assert_eq!(
        env.text(&["workflow", "graph", "solve-issue", "--format", "mermaid"]),
        mermaid
    );
    assert_eq!(env.text(&["workflow", "graph", &hash]), mermaid);
    let dot = env.text(&["workflow", "graph", &file, "--format", "dot"]);
    golden("graph.dot", &dot);
    assert_eq!(
        env.text(&["workflow", "graph", "solve-issue", "--format", "dot"]),
        dot
    );
    // Edges carry the condition names.
    assert!(mermaid.contains("notApproved"), "{mermaid}");
    assert!(dot.contains("[label=\"notApproved\"]"), "{dot}");
    // Drawing a file does not register it.
    assert_eq!(env.snapshot(), before);
}

#[test]
fn graph_of_a_file_does_not_register_it() {
    let env = populated();
    let file = env.file("tiny.yaml", TINY);
    let before = env.snapshot();
    let mermaid = env.text(&["workflow", "graph", file.to_str().unwrap()]);
    assert!(mermaid.contains("big"), "{mermaid}");
    assert_eq!(env.snapshot(), before);
}

// ------------------------------------------------------------ bad input

#[test]
fn yaml_syntax_error_points_at_line_and_column() {
    let yaml = "name: tiny\ndescription: d\nroles:\n  a: { description: a\ngraph: {}\n";
    let err = refused(yaml, &["bad.yaml:5:6", "did not find expected"]);
    assert!(err.contains("here"), "the source is shown:\n{err}");
}

#[test]
fn quote_left_open_mid_file_points_at_where_parsing_failed() {
    // The string runs on to the next quote, three lines down.
    let yaml = tiny_with("systemPrompt: Do a.", "systemPrompt: \"Do a.");
    refused(
        &yaml,
        &[
            "bad.yaml:9:9",
            "did not find expected key",
            "line 5 column 5",
        ],
    );
}

#[test]
fn missing_name_is_refused() {
    refused(&tiny_with("name: tiny\n", ""), &["no `name`"]);
}

#[test]
fn missing_roles_is_refused() {
    let yaml = "name: tiny\ngraph:\n  $START: [{ role: $END, condition: null }]\n";
    refused(yaml, &["no `roles`"]);
}

#[test]
fn missing_graph_is_refused() {
    let cut = TINY.find("graph:").unwrap();
    refused(&TINY[..cut], &["no `graph`"]);
}

#[test]
fn wrong_types_are_refused() {
    refused(
        &tiny_with("description: Does a", "description: [1, 2]"),
        &[
            "bad.yaml:5:18",
            "roles.a.description: invalid type: sequence",
        ],
    );
    let yaml = "name: tiny\nroles: 3\ngraph: {}\n";
    refused(yaml, &["bad.yaml:2:8", "invalid type: integer"]);
}

#[test]
fn role_without_output_schema_is_refused() {
    let yaml = tiny_with(
        "    outputSchema: { type: object, properties: { x: { type: integer } }, required: [x] }\n",
        "",
    );
    refused(&yaml, &["roles.a", "no output schema"]);
}

#[test]
fn invalid_json_schema_is_refused_and_stores_nothing() {
    // Role `a` sorts first and has a good schema: it must not be stored
    // either when role `b`'s schema is refused.
    let yaml = tiny_with(
        "conditions:",
        "  b:\n    description: Does b\n    systemPrompt: Do b.\n    outputSchema: { type: 12 }\nconditions:",
    )
    .replace(
        "    - { role: $END, condition: null }\n",
        "    - { role: b, condition: null }\n  b:\n    - { role: $END, condition: null }\n",
    );
    refused(&yaml, &["output schema of role `b`", "/type", "12"]);
}

#[test]
fn jsonata_syntax_error_is_refused() {
    let yaml = tiny_with("steps[-1].output.x > 5", "steps[-1].output.((");
    refused(
        &yaml,
        &["condition `big` is not valid JSONata", "condition-syntax"],
    );
}

#[test]
fn unknown_condition_is_refused() {
    let yaml = tiny_with("condition: big", "condition: huge");
    refused(&yaml, &["unknown-condition", "`huge`", "not defined"]);
}

#[test]
fn unknown_target_is_refused() {
    let yaml = tiny_with("role: a, condition: big", "role: ghost, condition: big");
    refused(
        &yaml,
        &["unknown-target", "`ghost` is neither a role nor `$END`"],
    );
}

#[test]
fn graph_without_start_is_refused() {
    let yaml = tiny_with("  $START:\n    - { role: a, condition: null }\n", "");
    refused(&yaml, &["no `$START`"]);
}

#[test]
fn unreadable_file_is_an_error() {
    let env = populated();
    let before = env.snapshot();
    let missing = env.dir.path().join("missing.yaml");
    let err = env.fails(&["workflow", "put", missing.to_str().unwrap()]);
    assert!(err.contains("missing.yaml"), "{err}");
    let err = env.fails(&["workflow", "validate", missing.to_str().unwrap()]);
    assert!(err.contains("missing.yaml"), "{err}");
    assert_eq!(env.snapshot(), before);
}

#[test]
fn unknown_workflow_name_lists_the_registered_ones() {
    let env = populated();
    let before = env.snapshot();
    for args in [
        &["workflow", "show", "nope"][..],
        &["workflow", "graph", "nope"],
        &["thread", "start", "nope", "-p", "do it"],
        &["workflow", "show", "0000000000000"],
    ] {
        let err = env.fails(args);
        assert!(err.contains("no workflow"), "{args:?}: {err}");
        assert!(err.contains("registered: solve-issue"), "{args:?}: {err}");
        assert!(err.contains("uwf workflow put"), "{args:?}: {err}");
    }
    assert_eq!(env.snapshot(), before);
}

#[test]
fn a_hash_that_is_not_a_workflow_is_refused() {
    let env = populated();
    let show = env.json(&["workflow", "show", "solve-issue"]);
    // The planner's output schema: a node, but not a Workflow.
    let schema = show["payload"]["roles"]["planner"]["outputSchema"]
        .as_str()
        .unwrap()
        .to_string();
    let before = env.snapshot();
    for args in [
        &["workflow", "show", schema.as_str()][..],
        &["workflow", "graph", schema.as_str()],
        &["thread", "start", schema.as_str(), "-p", "do it"],
    ] {
        let err = env.fails(args);
        assert!(
            err.contains(&format!("{schema} is not a Workflow node")),
            "{args:?}: {err}"
        );
    }
    assert_eq!(env.snapshot(), before);
}

#[test]
fn corrupt_registry_is_reported_and_left_alone() {
    let env = populated();
    let registry = env.root().join("registry.yaml");
    std::fs::write(&registry, "solve-issue: 1TM6QWPENJAPY\nbroken: [1,\n").unwrap();
    let before = env.snapshot();
    let tiny = env.file("tiny.yaml", TINY);
    for args in [
        &["workflow", "list"][..],
        &["workflow", "show", "solve-issue"],
        &["workflow", "put", tiny.to_str().unwrap()],
        &["thread", "start", tiny.to_str().unwrap(), "-p", "x"],
    ] {
        let err = env.fails(args);
        assert!(err.contains("registry.yaml"), "{args:?}: {err}");
        assert!(err.contains("line 3"), "{args:?}: {err}");
        assert!(err.contains("never overwrites"), "{args:?}: {err}");
    }
    assert_eq!(env.snapshot(), before, "a corrupt registry was touched");
}
