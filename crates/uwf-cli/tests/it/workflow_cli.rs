//! `uwf workflow …` end to end, against the real binary, on both stores
//! (`per_backend!`: the filesystem and PostgreSQL).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Backend, Env, example, hash_of, mock_agent};
use serde_json::{Value, json};

per_backend!(
    put_returns_name_and_hash_and_records_it_in_the_registry,
    put_of_a_changed_definition_moves_the_name,
    validate_a_good_file_reports_valid_and_writes_nothing,
    warnings_do_not_refuse_a_put,
    validate_a_bad_file_prints_the_report_and_exits_1,
    show_by_name_and_by_hash,
    list_registered_workflows,
    graph_as_mermaid_and_dot_matches_its_snapshots,
    graph_of_a_file_does_not_register_it,
    yaml_syntax_error_points_at_line_and_column,
    quote_left_open_mid_file_points_at_where_parsing_failed,
    missing_name_is_refused,
    missing_roles_is_refused,
    missing_graph_is_refused,
    wrong_types_are_refused,
    role_without_output_schema_is_refused,
    invalid_json_schema_is_refused_and_stores_nothing,
    jsonata_syntax_error_is_refused,
    unknown_condition_is_refused,
    unknown_target_is_refused,
    graph_without_start_is_refused,
    unreadable_file_is_an_error,
    errors_about_a_named_file_quote_at_most_the_line_at_fault,
    unknown_workflow_name_lists_the_registered_ones,
    a_hash_that_is_not_a_workflow_is_refused,
    corrupt_registry_is_reported_and_left_alone,
    replay_of_a_changed_condition_names_exactly_the_threads_and_steps_that_diverge,
    replay_of_a_stricter_schema_names_the_outputs_it_refuses,
    replay_selects_threads_by_id_and_refuses_unknown_ones,
    replay_and_diff_of_an_unreadable_file_are_errors,
    diff_names_the_structural_changes,
    replay_covers_active_threads_and_lists_unreadable_ones,
    suite_diff_says_better_when_the_scenario_improves,
    judges_of_every_kind_and_failing_ones_are_recorded,
    bad_suite_files_are_refused_and_write_nothing,
    the_example_suite_runs_offline,
    an_interrupted_suite_stops_its_run_and_stores_nothing,
    an_llm_judge_asks_the_configured_model,
    a_detached_suite_is_judged_once_its_threads_finish_on_a_worker,
    a_detached_suite_with_a_fixture_is_refused_and_writes_nothing,
    tokens_reported_by_the_agents_are_built_in_figures,
    suite_progress_is_a_bar_on_a_terminal_and_lines_otherwise
);

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

/// A store that already holds a registered workflow (so the store, the
/// lock file and the registry exist and "nothing changed" is meaningful);
/// `None` when PostgreSQL tests are skipped.
fn populated(backend: Backend) -> Option<Env> {
    let env = Env::on(backend)?;
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    Some(env)
}

/// `uwf workflow put` of `yaml` fails, prints nothing on stdout, and
/// changes no byte under the root; what it says on stderr is the snapshot
/// `name` (the same on both stores), and what `uwf thread start` of the
/// same file says is the snapshot `name_thread_start`. Returns stderr.
fn refused(backend: Backend, yaml: &str, name: &str) -> Option<String> {
    let env = populated(backend)?;
    let file = env.file("bad.yaml", yaml);
    let before = env.snapshot();
    let err = env.fails(&["workflow", "put", file.to_str().unwrap()]);
    insta::assert_snapshot!(name, env.redact(&err));
    assert_eq!(env.snapshot(), before, "a refused put changed the root");
    // Starting a thread on the same file is refused the same way.
    let err2 = env.fails(&["thread", "start", file.to_str().unwrap(), "-p", "x"]);
    insta::assert_snapshot!(format!("{name}_thread_start"), env.redact(&err2));
    assert_eq!(
        env.snapshot(),
        before,
        "a refused thread start changed the root"
    );
    Some(err)
}

fn put_returns_name_and_hash_and_records_it_in_the_registry(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let file = example("solve-issue.yaml");
    let v = env.json(&["workflow", "put", &file]);
    assert_eq!(v["name"], "solve-issue");
    let hash = hash_of(&v);
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");

    assert_eq!(
        env.registry(),
        [("solve-issue".to_string(), hash.clone())].into()
    );

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

fn put_of_a_changed_definition_moves_the_name(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
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

fn validate_a_good_file_reports_valid_and_writes_nothing(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let before = env.snapshot();
    let v = env.json(&["workflow", "validate", &example("solve-issue.yaml")]);
    assert_eq!(v["name"], "solve-issue");
    assert_eq!(v["valid"], true);
    assert_eq!(v["errors"], json!([]));
    assert_eq!(v["warnings"], json!([]));
    assert_eq!(env.snapshot(), before);
}

fn warnings_do_not_refuse_a_put(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
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

fn validate_a_bad_file_prints_the_report_and_exits_1(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
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

fn show_by_name_and_by_hash(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
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

fn list_registered_workflows(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
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

fn graph_as_mermaid_and_dot_matches_its_snapshots(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let file = example("solve-issue.yaml");
    let hash = env.json(&["workflow", "show", "solve-issue"])["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let before = env.snapshot();
    let mermaid = env.text(&["workflow", "graph", &file]);
    insta::assert_snapshot!("graph_mermaid", mermaid);
    assert_eq!(
        env.text(&["workflow", "graph", "solve-issue", "--format", "mermaid"]),
        mermaid
    );
    assert_eq!(env.text(&["workflow", "graph", &hash]), mermaid);
    let dot = env.text(&["workflow", "graph", &file, "--format", "dot"]);
    insta::assert_snapshot!("graph_dot", dot);
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

fn graph_of_a_file_does_not_register_it(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let file = env.file("tiny.yaml", TINY);
    let before = env.snapshot();
    let mermaid = env.text(&["workflow", "graph", file.to_str().unwrap()]);
    assert!(mermaid.contains("big"), "{mermaid}");
    assert_eq!(env.snapshot(), before);
}

// ------------------------------------------------------------ bad input

fn yaml_syntax_error_points_at_line_and_column(backend: Backend) {
    let yaml = "name: tiny\ndescription: d\nroles:\n  a: { description: a\ngraph: {}\n";
    let Some(err) = refused(backend, yaml, "yaml_syntax_error_points_at_line_and_column") else {
        return;
    };
    assert!(err.contains("here"), "the source is shown:\n{err}");
}

fn quote_left_open_mid_file_points_at_where_parsing_failed(backend: Backend) {
    // The string runs on to the next quote, three lines down.
    let yaml = tiny_with("systemPrompt: Do a.", "systemPrompt: \"Do a.");
    refused(
        backend,
        &yaml,
        "quote_left_open_mid_file_points_at_where_parsing_failed",
    );
}

fn missing_name_is_refused(backend: Backend) {
    refused(
        backend,
        &tiny_with("name: tiny\n", ""),
        "missing_name_is_refused",
    );
}

fn missing_roles_is_refused(backend: Backend) {
    let yaml = "name: tiny\ngraph:\n  $START: [{ role: $END, condition: null }]\n";
    refused(backend, yaml, "missing_roles_is_refused");
}

fn missing_graph_is_refused(backend: Backend) {
    let cut = TINY.find("graph:").unwrap();
    refused(backend, &TINY[..cut], "missing_graph_is_refused");
}

fn wrong_types_are_refused(backend: Backend) {
    refused(
        backend,
        &tiny_with("description: Does a", "description: [1, 2]"),
        "a_description_of_the_wrong_type",
    );
    let yaml = "name: tiny\nroles: 3\ngraph: {}\n";
    refused(backend, yaml, "roles_of_the_wrong_type");
}

fn role_without_output_schema_is_refused(backend: Backend) {
    let yaml = tiny_with(
        "    outputSchema: { type: object, properties: { x: { type: integer } }, required: [x] }\n",
        "",
    );
    refused(backend, &yaml, "role_without_output_schema_is_refused");
}

fn invalid_json_schema_is_refused_and_stores_nothing(backend: Backend) {
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
    refused(
        backend,
        &yaml,
        "invalid_json_schema_is_refused_and_stores_nothing",
    );
}

fn jsonata_syntax_error_is_refused(backend: Backend) {
    let yaml = tiny_with("steps[-1].output.x > 5", "steps[-1].output.((");
    refused(backend, &yaml, "jsonata_syntax_error_is_refused");
}

fn unknown_condition_is_refused(backend: Backend) {
    let yaml = tiny_with("condition: big", "condition: huge");
    refused(backend, &yaml, "unknown_condition_is_refused");
}

fn unknown_target_is_refused(backend: Backend) {
    let yaml = tiny_with("role: a, condition: big", "role: ghost, condition: big");
    refused(backend, &yaml, "unknown_target_is_refused");
}

fn graph_without_start_is_refused(backend: Backend) {
    let yaml = tiny_with("  $START:\n    - { role: a, condition: null }\n", "");
    refused(backend, &yaml, "graph_without_start_is_refused");
}

fn unreadable_file_is_an_error(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let before = env.snapshot();
    let missing = env.dir.path().join("missing.yaml");
    let err = env.fails(&["workflow", "put", missing.to_str().unwrap()]);
    insta::assert_snapshot!("unreadable_file_put", env.redact(&err));
    let err = env.fails(&["workflow", "validate", missing.to_str().unwrap()]);
    insta::assert_snapshot!("unreadable_file_validate", env.redact(&err));
    assert_eq!(env.snapshot(), before);
}

/// A file named on the command line may hold anything (`thread start
/// ../../etc/passwd`): an error about it shows at most the line at fault,
/// never the rest of the file, whichever command read it.
fn errors_about_a_named_file_quote_at_most_the_line_at_fault(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    // Not YAML mappings, not JSON: read as one scalar folded from every
    // line, which the parser quotes whole.
    let passwd = env.file(
        "passwd",
        "root:x:0:0:root:/root:/bin/bash\nsecond:x:1:1:SECRET-2:/usr/sbin\nthird:x:2:2:SECRET-3:/bin\n",
    );
    let passwd = passwd.to_str().unwrap();
    let note = r#"{"title":"note","type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#;
    let note = hash_of(&env.json(&["cas", "schema", "put", note]));
    // JSON whose value at fault spans lines 2 to 4.
    let payload = env.file(
        "payload.json",
        "{\"text\":\n  {\"first\": \"a value long enough to be cut\",\n   \"then\": \"SECRET-3 on the line after\"}\n}\n",
    );
    let payload = payload.to_str().unwrap();
    let before = env.snapshot();
    // Each report whole is a snapshot `named_file_<command>` (the line at
    // fault, quoted and cut; the file's path is `[DIR]/…`).
    for (name, args) in [
        ("thread_start", vec!["thread", "start", passwd, "-p", "x"]),
        ("thread_run", vec!["thread", "run", passwd, "-p", "x"]),
        ("workflow_put", vec!["workflow", "put", passwd]),
        ("workflow_validate", vec!["workflow", "validate", passwd]),
        ("workflow_graph", vec!["workflow", "graph", passwd]),
        ("store_init", vec!["store", "init", "--config", passwd]),
        ("eval", vec!["eval", "$", "--input", passwd]),
        ("cas_schema_put", vec!["cas", "schema", "put", passwd]),
        ("cas_put", vec!["cas", "put", &note, passwd]),
        ("cas_put_json", vec!["cas", "put", &note, payload]),
    ] {
        let err = env.fails(&args);
        insta::assert_snapshot!(format!("named_file_{name}"), env.redact(&err));
        for other in ["second:x", "SECRET-2", "SECRET-3"] {
            assert!(
                !err.contains(other),
                "{args:?} shows {other:?}:
{err}"
            );
        }
        assert_eq!(env.snapshot(), before, "{args:?} changed the store");
    }
    // The value serde quotes is cut where the line at fault ends.
    let err = env.fails(&["workflow", "validate", passwd]);
    assert!(
        err.contains(r#"invalid type: string "root:x:0:0:root:/root:/bin/bash…""#),
        "{err}"
    );
}

fn unknown_workflow_name_lists_the_registered_ones(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let before = env.snapshot();
    for (name, args) in [
        ("workflow_show", &["workflow", "show", "nope"][..]),
        ("workflow_graph", &["workflow", "graph", "nope"]),
        ("thread_start", &["thread", "start", "nope", "-p", "do it"]),
        ("workflow_show_hash", &["workflow", "show", "0000000000000"]),
    ] {
        // What is unknown, the workflows there are, how to add one.
        insta::assert_snapshot!(format!("unknown_workflow_{name}"), env.fails(args));
    }
    assert_eq!(env.snapshot(), before);
}

fn a_hash_that_is_not_a_workflow_is_refused(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
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
        let name = format!("not_a_workflow_{}_{}", args[0], args[1]);
        insta::assert_snapshot!(name, env.fails(args));
    }
    assert_eq!(env.snapshot(), before);
}

fn corrupt_registry_is_reported_and_left_alone(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let tiny = env.file("tiny.yaml", TINY);
    let solve = example("solve-issue.yaml");
    let (commands, expect): (Vec<Vec<&str>>, Vec<&str>) = match &env.db {
        None => {
            let registry = env.root().join("registry.yaml");
            std::fs::write(&registry, "solve-issue: 1TM6QWPENJAPY\nbroken: [1,\n").unwrap();
            (
                vec![
                    vec!["workflow", "list"],
                    vec!["workflow", "show", "solve-issue"],
                    vec!["workflow", "put", tiny.to_str().unwrap()],
                    vec!["thread", "start", tiny.to_str().unwrap(), "-p", "x"],
                ],
                vec!["registry.yaml", "line 3", "never overwrites"],
            )
        }
        Some(db) => {
            // Rows are damaged one at a time: every command that reads
            // this entry stops, naming it and its table.
            db.client()
                .execute(
                    "UPDATE uwf_registry SET hash = 'oops' WHERE name = 'solve-issue'",
                    &[],
                )
                .unwrap();
            (
                vec![
                    vec!["workflow", "list"],
                    vec!["workflow", "show", "solve-issue"],
                    vec!["workflow", "put", solve.as_str()],
                    vec!["thread", "start", "solve-issue", "-p", "x"],
                ],
                vec!["workflow \"solve-issue\" (table uwf_registry)", "\"oops\""],
            )
        }
    };
    let before = env.snapshot();
    for args in &commands {
        let err = env.fails(args);
        for e in &expect {
            assert!(err.contains(e), "{args:?}: {err}");
        }
    }
    assert_eq!(env.snapshot(), before, "a corrupt registry was touched");
}

/// A reviewer that approves the first implementation: 3 steps.
const APPROVES_AT_ONCE: &str = r#"roles:
  planner: [{ output: { plan: "p", steps: ["a"] } }]
  developer: [{ output: { filesChanged: ["a.rs"], summary: "done" } }]
  reviewer: [{ output: { approved: true, comments: "ok" } }]
"#;

/// A store with three finished threads of examples/solve-issue.yaml: two
/// whose reviewer rejects once (5 steps), one approved at once (3 steps).
/// Returns the ids: (rejected, rejected, approved).
fn replay_store(backend: Backend) -> Option<(Env, [String; 3])> {
    let env = populated(backend)?;
    let rejecting = mock_agent(&common::examples().join("solve-issue.mock.yaml"));
    let approving = mock_agent(&env.file("approves.yaml", APPROVES_AT_ONCE));
    let run = |agent: &str, task: &str| {
        let out = env.json(&[
            "-q",
            "thread",
            "run",
            &example("solve-issue.yaml"),
            "-p",
            task,
            "--agent",
            agent,
        ]);
        out["thread"].as_str().unwrap().to_string()
    };
    let a = run(&rejecting, "one");
    let b = run(&rejecting, "two");
    let c = run(&approving, "three");
    Some((env, [a, b, c]))
}

/// `uwf workflow replay FILE` succeeds: its JSON, its counts `keys` from
/// the summary, and its stderr.
fn replayed(env: &Env, file: &str, keys: &[&str]) -> (Value, Vec<u64>, String) {
    let out = env
        .uwf()
        .args(["workflow", "replay", file])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let counts = keys
        .iter()
        .map(|k| v["summary"][*k].as_u64().unwrap())
        .collect();
    (v, counts, String::from_utf8(out.stderr).unwrap())
}

/// examples/solve-issue.yaml with one piece of text replaced.
fn solve_issue_with(from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(example("solve-issue.yaml")).unwrap();
    assert!(text.contains(from), "{from:?} is not in solve-issue.yaml");
    text.replacen(from, to, 1)
}

fn replay_store_and_file(
    backend: Backend,
    from: &str,
    to: &str,
) -> Option<(Env, [String; 3], String)> {
    let (env, ids) = replay_store(backend)?;
    let file = env.file("new.yaml", &solve_issue_with(from, to));
    Some((env, ids, file.to_str().unwrap().to_string()))
}

fn replay_of_a_changed_condition_names_exactly_the_threads_and_steps_that_diverge(
    backend: Backend,
) {
    // A rejection sends the work back only after two developer rounds: the
    // rejected threads would have ended at their first review.
    let Some((env, [a, b, c], file)) = replay_store_and_file(
        backend,
        "steps[-1].output.approved = false",
        "steps[-1].output.approved = false and $count(steps[role = 'developer']) >= 2",
    ) else {
        return;
    };
    let before = env.state_snapshot();
    let (v, counts, err) = replayed(&env, &file, &["threads", "same", "diverged", "invalid"]);
    assert_eq!(counts, vec![3, 1, 2, 0], "{v:#}");
    let s = &v["summary"];
    assert_eq!(
        s["edges"],
        json!([{ "from": "reviewer", "old": "developer", "new": "$END", "threads": 2, "examples": [a, b] }])
    );
    let threads = v["threads"].as_array().unwrap();
    let diverged: Vec<(&str, u64)> = threads
        .iter()
        .map(|t| {
            (
                t["thread"].as_str().unwrap(),
                t["divergence"]["step"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(diverged, vec![(a.as_str(), 4), (b.as_str(), 4)]);
    assert!(!diverged.iter().any(|(t, _)| *t == c));
    let d = &threads[0]["divergence"];
    assert_eq!(d["old"]["transitions"][0]["value"], json!(true));
    assert_eq!(d["new"]["transitions"][0]["value"], json!(false));
    // `thread steps` lists the StartNode first: [3] is step 3, the review.
    assert_eq!(
        d["at"],
        env.json(&["thread", "steps", &a])["steps"][3]["hash"]
    );
    // The table for people names the threads and the edge.
    assert!(
        err.contains("3 thread(s): 1 same, 2 diverge, 0 invalid"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{a}  done        5  diverged    4  after reviewer: developer"
        )),
        "{err}"
    );
    // Nothing written; for CI, the divergence fails.
    assert_eq!(env.state_snapshot(), before);
    let fail = env
        .uwf()
        .args(["workflow", "replay", &file, "--fail-on-divergence", "-q"])
        .output()
        .unwrap();
    assert_eq!(fail.status.code(), Some(1));
    let again: Value = serde_json::from_slice(&fail.stdout).unwrap();
    assert_eq!(again["summary"], v["summary"]);
    assert!(String::from_utf8_lossy(&fail.stderr).contains("2 thread(s) diverge"));
    // The workflow as it is: every thread routes the same, and CI passes.
    let same = env.json(&[
        "workflow",
        "replay",
        &example("solve-issue.yaml"),
        "--fail-on-divergence",
    ]);
    assert_eq!(same["summary"]["same"], json!(3));
    assert_eq!(same["threads"], json!([]));
}

fn replay_of_a_stricter_schema_names_the_outputs_it_refuses(backend: Backend) {
    let Some((env, [a, b, c], file)) = replay_store_and_file(
        backend,
        "required: [approved, comments]",
        "required: [approved, comments, severity]",
    ) else {
        return;
    };
    let v = env.json(&["workflow", "replay", &file]);
    assert_eq!(v["summary"]["invalid"], json!(3), "{v:#}");
    let invalid: Vec<(&str, u64, &str)> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["thread"].as_str().unwrap(),
                t["invalid"]["step"].as_u64().unwrap(),
                t["invalid"]["role"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        invalid,
        vec![
            (a.as_str(), 3, "reviewer"),
            (b.as_str(), 3, "reviewer"),
            (c.as_str(), 3, "reviewer")
        ]
    );
    assert!(
        v["threads"][0]["invalid"]["reason"]
            .as_str()
            .unwrap()
            .contains("severity")
    );
    let fail = env
        .uwf()
        .args(["workflow", "replay", &file, "--fail-on-divergence"])
        .output()
        .unwrap();
    assert_eq!(fail.status.code(), Some(1));
}

fn replay_selects_threads_by_id_and_refuses_unknown_ones(backend: Backend) {
    let Some((env, [a, _, c], file)) = replay_store_and_file(
        backend,
        "steps[-1].output.approved = false",
        "steps[-1].output.approved = false and $count(steps) > 5",
    ) else {
        return;
    };
    let v = env.json(&[
        "workflow",
        "replay",
        &file,
        "--thread",
        &c,
        "--thread",
        &a[..10],
    ]);
    assert_eq!(v["summary"]["threads"], json!(2));
    assert_eq!(v["summary"]["diverged"], json!(1));
    assert_eq!(v["threads"][0]["thread"], json!(a));
    // Threads of another workflow name are not replayed by default.
    let other = env.file(
        "other.yaml",
        &solve_issue_with("name: \"solve-issue\"", "name: \"other\""),
    );
    let none = env.json(&["workflow", "replay", other.to_str().unwrap()]);
    assert_eq!(none["summary"]["threads"], json!(0));
    let named = env.json(&[
        "workflow",
        "replay",
        other.to_str().unwrap(),
        "--workflow",
        "solve-issue",
    ]);
    assert_eq!(named["summary"]["same"], json!(3));
    let all = env.json(&["workflow", "replay", &file, "--all", "--since", "1h"]);
    assert_eq!(all["summary"]["threads"], json!(3));
    let future = env.json(&[
        "workflow",
        "replay",
        &file,
        "--all",
        "--since",
        "2999-01-01",
    ]);
    assert_eq!(future["summary"]["threads"], json!(0));
    // An unknown thread: a clear error, nothing on stdout.
    let unknown = "01M8BK0F7F1BH0JN5AA32NK9V1";
    let out = env
        .uwf()
        .args(["workflow", "replay", &file, "--thread", unknown])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(unknown) && err.contains("thread list --all"),
        "{err}"
    );
    let err = env.fails(&["workflow", "replay", &file, "--since", "yesterday-ish"]);
    assert!(err.contains("neither a duration"), "{err}");
}

fn replay_and_diff_of_an_unreadable_file_are_errors(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let missing = env.dir.path().join("missing.yaml");
    let err = env.fails(&["workflow", "replay", missing.to_str().unwrap()]);
    assert!(err.contains("missing.yaml"), "{err}");
    let err = env.fails(&["workflow", "diff", "solve-issue", missing.to_str().unwrap()]);
    assert!(err.contains("missing.yaml"), "{err}");
    let bad = env.file(
        "bad.yaml",
        &tiny_with("big: \"steps[-1].output.x > 5\"", "big: \"steps[\""),
    );
    let err = env.fails(&["workflow", "replay", bad.to_str().unwrap()]);
    assert!(err.contains("bad.yaml"), "{err}");
    let err = env.fails(&["workflow", "diff", "no-such-workflow", "solve-issue"]);
    assert!(err.contains("no-such-workflow"), "{err}");
}

fn diff_names_the_structural_changes(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let new = env.file(
        "new.yaml",
        &solve_issue_with("required: [approved, comments]", "required: [approved]").replace(
            "Review the implementation.",
            "Review the implementation strictly.",
        ),
    );
    let before = env.state_snapshot();
    let out = env
        .uwf()
        .args(["workflow", "diff", "solve-issue", new.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["same"], json!(false));
    assert_eq!(v["changes"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(
        v["changes"][0]["text"],
        json!("role `reviewer`: instructions, output schema changed")
    );
    assert_eq!(
        v["changes"][0]["details"],
        json!(["`comments` no longer required"])
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("  - `comments` no longer required"), "{err}");
    // Every kind of change at once, as people read it (docs/workflow.md shows it).
    let v3 = solve_issue_with("required: [approved, comments]", "required: [approved]")
        .replace("Review the implementation.", "Review the implementation strictly.")
        .replace(
            "expression: \"steps[-1].output.approved = false\"",
            "expression: \"steps[-1].output.approved = false\"\n  tooManyRounds: \"$count(steps[role = 'developer']) >= 3\"",
        )
        .replace(
            "  reviewer:\n    - role: \"developer\"",
            "  reviewer:\n    - role: \"$END\"\n      condition: \"tooManyRounds\"\n    - role: \"developer\"",
        );
    let v3 = env.file("solve-issue.v3.yaml", &v3);
    let out = env
        .uwf()
        .args(["workflow", "diff", "solve-issue", v3.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!("workflow_diff", String::from_utf8(out.stderr).unwrap());
    let same = env.json(&[
        "workflow",
        "diff",
        "solve-issue",
        &example("solve-issue.yaml"),
    ]);
    assert_eq!(same["same"], json!(true));
    assert_eq!(env.state_snapshot(), before);
}

fn replay_covers_active_threads_and_lists_unreadable_ones(backend: Backend) {
    let Some((env, [a, b, c], file)) = replay_store_and_file(
        backend,
        "steps[-1].output.approved = false",
        "steps[-1].output.approved = false and $count(steps[role = 'developer']) >= 2",
    ) else {
        return;
    };
    // An active thread that has not stepped yet: its next role is the same.
    let started = env.json(&[
        "thread",
        "start",
        &example("solve-issue.yaml"),
        "-p",
        "later",
    ]);
    let active = started["thread"].as_str().unwrap().to_string();
    // An archived thread whose head is gone from the store.
    env.damage_history_head(&b, "0000000000000");
    let (v, counts, err) = replayed(&env, &file, &["threads", "same", "diverged", "unreadable"]);
    assert_eq!(counts, vec![3, 2, 1, 1], "{v:#}");
    assert_eq!(v["threads"][0]["thread"], json!(a));
    assert_eq!(v["unreadable"][0]["thread"], json!(b));
    assert!(
        v["unreadable"][0]["error"]
            .as_str()
            .unwrap()
            .contains("0000000000000")
    );
    assert!(err.contains(&format!("{b}  unreadable:")), "{err}");
    let only = env.json(&[
        "workflow", "replay", &file, "--thread", &active, "--thread", &c,
    ]);
    assert_eq!(only["summary"]["same"], json!(2));
}

// ---------------------------------------------------------------------------
// `uwf suite` (docs/eval.md)

/// A suite of examples/solve-issue.yaml with two cases, run by `agent`,
/// with `judges` (YAML list items) and `repetitions`.
fn suite_yaml(agent: &str, judges: &str, repetitions: u32) -> String {
    format!(
        r#"name: t
workflow: {workflow}
repetitions: {repetitions}
limits: {{ maxSteps: 10, timeout: 60s }}
agent: "{agent}"
cases:
  - {{ name: one, prompt: "first task", vars: {{ file: a.rs }} }}
  - {{ name: two, prompt: "second task" }}
judges:
{judges}"#,
        workflow = example("solve-issue.yaml"),
        agent = agent.replace('\\', "\\\\").replace('"', "\\\""),
    )
}

const APPROVED_AT_ONCE_JUDGE: &str = r#"  - kind: jsonata
    name: approved-at-once
    expression: "$count(steps[role='reviewer' and output.approved=false]) = 0"
"#;

/// The row of `judge` in a case of a report or a diff.
fn judge_row<'a>(case: &'a Value, judge: &str) -> &'a Value {
    case["judges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["judge"] == judge)
        .unwrap_or_else(|| panic!("no {judge} in {case}"))
}

/// `uwf suite run FILE`: its JSON (it must succeed).
fn suite_run(env: &Env, file: &std::path::Path) -> Value {
    env.json(&["-q", "suite", "run", file.to_str().unwrap()])
}

fn suite_diff_says_better_when_the_scenario_improves(backend: Backend) {
    let Some(env) = Env::on(backend) else { return };
    let rejecting = mock_agent(&common::examples().join("solve-issue.mock.yaml"));
    let approving = mock_agent(&env.file("approves.yaml", APPROVES_AT_ONCE));
    let before = env.file(
        "a.suite.yaml",
        &suite_yaml(&rejecting, APPROVED_AT_ONCE_JUDGE, 2),
    );
    let after = env.file(
        "b.suite.yaml",
        &suite_yaml(&approving, APPROVED_AT_ONCE_JUDGE, 2),
    );
    let a = suite_run(&env, &before);
    let b = suite_run(&env, &after);
    assert_eq!(
        (a["runs"].as_u64(), a["judgeErrors"].as_u64()),
        (Some(4), Some(0)),
        "{a}"
    );
    let mean =
        |v: &Value, case: usize, judge: &str| judge_row(&v["cases"][case], judge)["mean"].as_f64();
    assert_eq!(mean(&a, 0, "approved-at-once"), Some(0.0), "{a}");
    assert_eq!(mean(&b, 0, "approved-at-once"), Some(1.0), "{b}");
    assert_eq!(mean(&a, 0, "$steps"), Some(5.0), "{a}");
    assert_eq!(mean(&b, 1, "$steps"), Some(3.0), "{b}");

    // The stored run reads back as the same report.
    let (ra, rb) = (a["run"].as_str().unwrap(), b["run"].as_str().unwrap());
    let report = env.json(&["-q", "suite", "report", ra]);
    assert_eq!(report["cases"], a["cases"]);
    let node = env.json(&["cas", "get", ra]);
    assert_eq!(node["payload"]["runs"].as_array().map(Vec::len), Some(4));
    // Garbage collection keeps stored runs (and what they reference).
    let gc = env.json(&["cas", "gc", "--grace", "0s"]);
    let swept = gc["swept"].as_array().unwrap();
    assert!(!swept.iter().any(|h| h == ra || h == rb), "{gc}");
    assert_eq!(
        env.json(&["-q", "suite", "report", ra])["cases"],
        a["cases"]
    );

    let out = env.uwf().args(["suite", "diff", ra, rb]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    for case in d["cases"].as_array().unwrap() {
        let j = &case["judges"][0];
        assert_eq!(j["judge"], "approved-at-once");
        assert_eq!(j["change"], 1.0, "{d}");
        assert_eq!(j["verdict"], "better", "{d}");
        let steps = judge_row(case, "$steps");
        assert_eq!(
            (steps["change"].as_f64(), &steps["verdict"]),
            (Some(-2.0), &json!("none"))
        );
    }
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("approved-at-once") && text.contains("better"),
        "{text}"
    );
    // The same two runs give the same intervals (fixed seed), and the
    // reverse diff says worse.
    assert_eq!(env.json(&["-q", "suite", "diff", ra, rb]), d);
    let back = env.json(&["-q", "suite", "diff", rb, ra]);
    assert_eq!(back["cases"][0]["judges"][0]["verdict"], "worse", "{back}");
    // A run of one repetition per side gives no verdict.
    let once = suite_run(
        &env,
        &env.file(
            "c.suite.yaml",
            &suite_yaml(&approving, APPROVED_AT_ONCE_JUDGE, 1),
        ),
    );
    let d1 = env.json(&["-q", "suite", "diff", ra, once["run"].as_str().unwrap()]);
    assert_eq!(d1["cases"][0]["judges"][0]["verdict"], "unclear", "{d1}");
}

fn judges_of_every_kind_and_failing_ones_are_recorded(backend: Backend) {
    let Some(env) = Env::on(backend) else { return };
    // The developer fails its first attempt once per thread and is retried.
    env.set_config("retries:\n  default: { max: 2, backoff: 10ms }\n");
    let flaky = APPROVES_AT_ONCE.replace(
        r#"summary: "done" } }]"#,
        r#"summary: "done" }, failFirst: 1 }]"#,
    );
    assert_ne!(flaky, APPROVES_AT_ONCE);
    let approving = mock_agent(&env.file("approves.yaml", &flaky));
    let judges = r#"  - { kind: command, name: half, command: "sh -c 'echo \"{\\\"score\\\": 0.5, \\\"data\\\": {\\\"dir\\\": \\\"$1\\\", \\\"thread\\\": \\\"$2\\\"}}\"' judge" }
  - { kind: command, name: failing, command: "sh -c 'echo broken judge >&2; exit 3'" }
  - { kind: command, name: hanging, command: "sleep 30; true", timeout: 1s }
  - { kind: command, name: garbage, command: "echo not json; true" }
  - { kind: command, name: too-big, command: "echo '{\"score\": 7}'; true" }
  - { kind: jsonata, name: long, weight: 2, expression: "$count(steps) / 6" }
  - { kind: jsonata, name: not-a-score, expression: "start.task" }
  - { kind: jsonata, name: retried-once, expression: "metrics.failedAttempts = 1" }
  - { kind: command, name: vars, command: "sh judge-vars.sh" }
  - { kind: schema, name: own-schemas }
  - kind: schema
    name: strict
    schemas: { developer: { type: object, properties: { summary: { type: string, minLength: 10 } } } }
"#;
    // Beside the suite file, where command judges run.
    env.file(
        "judge-vars.sh",
        r#"printf '{"score": 1, "data": {"case": "%s", "vars": %s}}\n' "$UWF_SUITE_CASE" "$UWF_SUITE_VARS""#,
    );
    let file = env.file("j.suite.yaml", &suite_yaml(&approving, judges, 1));
    let begun = std::time::Instant::now();
    let out = env
        .uwf()
        .args(["suite", "run", file.to_str().unwrap()])
        .output()
        .unwrap();
    let elapsed = begun.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Two runs × one hanging judge of 1s each, not 30s.
    assert!(elapsed < std::time::Duration::from_secs(20), "{elapsed:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["runs"].as_u64(),
            v["runErrors"].as_u64(),
            v["judgeErrors"].as_u64()
        ),
        (Some(2), Some(0), Some(10)),
        "{v}"
    );
    let node = env.json(&["cas", "get", v["run"].as_str().unwrap()]);
    let run = &node["payload"]["runs"][0];
    assert_eq!(run["done"], true);
    let score = |name: &str| judge_row(run, name).clone();
    let thread = run["thread"].as_str().unwrap();
    assert_eq!(score("half")["score"], 0.5);
    assert_eq!(score("half")["data"]["thread"], thread);
    assert!(
        score("half")["data"]["dir"]
            .as_str()
            .unwrap()
            .contains("uwf-suite-")
    );
    let error = |name: &str| {
        score(name)["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {run}"))
            .to_string()
    };
    assert!(
        error("failing").contains("exited with status 3")
            && error("failing").contains("broken judge"),
        "{}",
        error("failing")
    );
    assert!(
        error("hanging").contains("did not finish within 1s"),
        "{}",
        error("hanging")
    );
    assert!(
        error("garbage").contains("printed no JSON") && error("garbage").contains("not json"),
        "{}",
        error("garbage")
    );
    assert!(
        error("too-big").contains("outside 0..1"),
        "{}",
        error("too-big")
    );
    assert!(
        error("not-a-score").contains("not a boolean or a number"),
        "{}",
        error("not-a-score")
    );
    assert_eq!(score("long")["score"], 0.5, "3 steps of 6");
    assert_eq!(run["failedAttempts"], 1, "{run}");
    assert_eq!(score("retried-once")["score"], 1.0);
    assert_eq!(
        score("vars")["data"],
        json!({ "case": "one", "vars": { "file": "a.rs" } })
    );
    assert_eq!(score("own-schemas")["score"], 1.0);
    // "done" is 4 characters: the developer's step (1 of 3) fails.
    let strict = score("strict");
    assert_eq!(strict["data"]["valid"], 2, "{strict}");
    assert_eq!(
        strict["data"]["failures"][0]["role"], "developer",
        "{strict}"
    );
    // total: (0.5 + 0×4 + 2×0.5 + 0 + 1 + 1 + 1 + 2/3) / 12 (failed judges count 0)
    let total = run["total"].as_f64().unwrap();
    assert!(
        (total - (0.5 + 1.0 + 1.0 + 1.0 + 1.0 + 2.0 / 3.0) / 12.0).abs() < 1e-9,
        "{total}"
    );
    // The run is kept: its thread is an ordinary finished thread.
    let shown = env.json(&["thread", "show", thread]);
    assert!(shown.to_string().contains(thread));
    assert!(
        err.contains("judge hanging: did not finish within 1s"),
        "{err}"
    );
}

fn bad_suite_files_are_refused_and_write_nothing(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let agent = mock_agent(&common::examples().join("solve-issue.mock.yaml"));
    let good = suite_yaml(&agent, APPROVED_AT_ONCE_JUDGE, 1);
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            good.replace("repetitions:", "repetitionz:"),
            vec!["unknown field `repetitionz`", "b.suite.yaml"],
        ),
        (
            good.replace(&example("solve-issue.yaml"), "no-such-workflow"),
            vec!["no workflow \"no-such-workflow\"", "solve-issue"],
        ),
        (
            good.replace(&example("solve-issue.yaml"), "missing/flow.yaml"),
            vec!["missing/flow.yaml"],
        ),
        (
            good.replace("= 0\"", "= (\""),
            vec!["approved-at-once", "does not parse"],
        ),
        (
            good.replace("name: two", "name: one"),
            vec!["\"one\"", "used twice"],
        ),
        (
            good.replace("timeout: 60s", "timeout: soon"),
            vec!["\"soon\" is not a duration"],
        ),
        (
            good.replace("vars: { file: a.rs }", "fixture: nowhere"),
            vec!["fixture nowhere is not a directory"],
        ),
        (
            good.replace("kind: jsonata", "kind: llama"),
            vec!["unknown variant `llama`"],
        ),
    ];
    let before = env.snapshot();
    for (yaml, expect) in &cases {
        let file = env.file("b.suite.yaml", yaml);
        let err = env.fails(&["suite", "run", file.to_str().unwrap()]);
        for e in expect {
            assert!(err.contains(e), "stderr lacks {e:?}:\n{err}");
        }
        assert_eq!(
            env.snapshot(),
            before,
            "a refused suite changed the store: {err}"
        );
    }
    let err = env.fails(&["suite", "run", "nowhere.suite.yaml"]);
    assert!(
        err.contains("cannot read the suite nowhere.suite.yaml"),
        "{err}"
    );
    // A hash that is not a suite run.
    let wf = env.json(&["workflow", "show", "solve-issue"]);
    let err = env.fails(&["suite", "report", wf["hash"].as_str().unwrap()]);
    assert!(err.contains("is not a suite run"), "{err}");
}

fn the_example_suite_runs_offline(backend: Backend) {
    let Some(env) = Env::on(backend) else { return };
    // Its agent is `uwf-mock`, found beside `uwf` as for any agent.
    common::mock_bin();
    let suite = common::examples().join("suites/solve-issue.suite.yaml");
    // The schema for editors needs no store.
    let schema = env.json(&["suite", "schema"]);
    assert_eq!(schema["title"], "uwf suite");
    assert_eq!(schema["required"], json!(["workflow", "cases"]));
    let v = suite_run(&env, &suite);
    assert_eq!(
        (
            v["runs"].as_u64(),
            v["runErrors"].as_u64(),
            v["judgeErrors"].as_u64()
        ),
        (Some(4), Some(0), Some(0)),
        "{v}"
    );
    let md = env
        .uwf()
        .args(["suite", "report", v["run"].as_str().unwrap(), "--markdown"])
        .output()
        .unwrap();
    let md = String::from_utf8(md.stdout).unwrap();
    // The reviewer of the redirect-loop scenario rejects once, the
    // readme-typo scenario's approves at once; one of five steps has a
    // review comment shorter than the suite's stricter reviewer schema.
    for row in [
        "| redirect-loop | approved-at-once | 2 | 0.000 |",
        "| readme-typo | approved-at-once | 2 | 1.000 |",
        "| redirect-loop | reviewer-explains | 2 | 0.800 |",
        "| redirect-loop | fixture-intact | 2 | 1.000 |",
        "| readme-typo | $steps | 2 | 3.000 |",
    ] {
        assert!(md.contains(row), "{row} is not in\n{md}");
    }
}

fn an_interrupted_suite_stops_its_run_and_stores_nothing(backend: Backend) {
    let Some(env) = Env::on(backend) else { return };
    // An agent that hangs, and leaves a mark while it does.
    let mark = env.dir.path().join("agent-started");
    let agent = format!("sh -c 'touch \"{}\"; sleep 60' agent", mark.display());
    let file = env.file(
        "i.suite.yaml",
        &suite_yaml(&agent, APPROVED_AT_ONCE_JUDGE, 1),
    );
    let child = env
        .command()
        .args(["suite", "run", file.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let begun = std::time::Instant::now();
    while !mark.exists() {
        assert!(
            begun.elapsed() < std::time::Duration::from_secs(30),
            "the agent never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    // Stopped well before the agent's 60 s, with nothing on stdout.
    assert!(
        begun.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        begun.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        err.contains("the suite was interrupted; no result was stored"),
        "{err}"
    );
    let schemas = env.json(&["cas", "schema", "list"]);
    assert!(!schemas.to_string().contains("SuiteRun"), "{schemas}");
}

fn an_llm_judge_asks_the_configured_model(backend: Backend) {
    use uwf_agent_kit::testing::MockLlm;
    let Some(env) = Env::on(backend) else { return };
    let mock = MockLlm::start().unwrap();
    env.set_config(&serde_yaml::to_string(&mock.config()).unwrap());
    // One answer per run, in order: a score, then prose (an error).
    mock.reply_json(json!({ "score": 0.75, "reason": "a plan, a fix, an approval" }));
    mock.reply_text("Looks fine to me!");
    let approving = mock_agent(&env.file("approves.yaml", APPROVES_AT_ONCE));
    let judges = r#"  - { kind: llm, name: rubric, rubric: "The reviewer explains the approval." }
"#;
    let file = env.file("l.suite.yaml", &suite_yaml(&approving, judges, 1));
    let v = suite_run(&env, &file);
    assert_eq!(v["judgeErrors"], 1, "{v}");
    let node = env.json(&["cas", "get", v["run"].as_str().unwrap()]);
    let first = &node["payload"]["runs"][0]["judges"][0];
    assert_eq!(first["score"], 0.75, "{first}");
    assert_eq!(first["data"]["reason"], "a plan, a fix, an approval");
    let second = &node["payload"]["runs"][1]["judges"][0];
    let e = second["error"].as_str().unwrap();
    assert!(
        e.contains("no JSON object") && e.contains("Looks fine"),
        "{e}"
    );
    // The question: JSON mode, the rubric and the thread's task and steps.
    let asked = mock.chat_requests();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].body["response_format"]["type"], "json_object");
    let text = asked[0].body["messages"].to_string();
    for part in [
        "The reviewer explains the approval.",
        "first task",
        "filesChanged",
    ] {
        assert!(text.contains(part), "{part} is not in {text}");
    }
    assert!(
        asked[1].body["messages"]
            .to_string()
            .contains("second task")
    );
}

// ---------------------------------------------------------------------------
// `uwf suite run --detach`, `suite wait`, `suite status`

/// A `uwf worker` in the background, killed when dropped.
struct Worker(std::process::Child);

impl Worker {
    fn start(env: &Env) -> Worker {
        let child = env
            .uwf_process()
            .args([
                "worker",
                "--lease",
                "5",
                "--poll-ms",
                "50",
                "--concurrency",
                "2",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Worker(child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `uwf args` and returns (exit code, stdout, stderr).
fn outcome(env: &Env, args: &[&str]) -> (Option<i32>, String, String) {
    let out = env.output(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn a_detached_suite_is_judged_once_its_threads_finish_on_a_worker(backend: Backend) {
    let Some(env) = Env::on(backend) else { return };
    let approving = mock_agent(&env.file("approves.yaml", APPROVES_AT_ONCE));
    // Beside the suite file, where command judges run: it sees the thread id.
    env.file(
        "thread-judge.sh",
        "printf '{\"score\": 1, \"data\": {\"thread\": \"%s\"}}' \"$2\"\n",
    );
    let judges = format!(
        "{APPROVED_AT_ONCE_JUDGE}  - {{ kind: command, name: sees-thread, command: \"sh thread-judge.sh\" }}\n"
    );
    // Case `two` runs an agent that fails: its worker gives the run up.
    let yaml = suite_yaml(&approving, &judges, 2).replace(
        "{ name: two, prompt: \"second task\" }",
        "{ name: two, prompt: \"second task\", agent: \"sh -c 'exit 3'\" }",
    );
    let file = env.file("d.suite.yaml", &yaml);
    let file = file.to_str().unwrap();

    let queued = env.json(&["-q", "suite", "run", file, "--detach"]);
    assert_eq!(queued["queued"], true, "{queued}");
    let run = queued["run"].as_str().unwrap().to_string();
    let threads = queued["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 4, "{queued}");
    assert_eq!(
        threads
            .iter()
            .map(|t| (
                t["case"].as_str().unwrap(),
                t["repetition"].as_u64().unwrap()
            ))
            .collect::<Vec<_>>(),
        [("one", 1), ("one", 2), ("two", 1), ("two", 2)]
    );
    // Ordinary queued threads.
    for t in threads {
        let shown = env.json(&["thread", "show", t["thread"].as_str().unwrap()]);
        assert_eq!(shown["run"]["state"], "queued", "{shown}");
    }

    // Before any worker: every thread queued, nothing to report, and a
    // bounded wait gives up without storing anything.
    let status = env.json(&["-q", "suite", "status", &run]);
    assert_eq!(
        (
            &status["state"],
            &status["counts"],
            &status["finished"],
            &status["judged"]
        ),
        (
            &json!("running"),
            &json!({ "queued": 4 }),
            &json!(0),
            &Value::Null
        ),
        "{status}"
    );
    let (code, out, err) = outcome(&env, &["suite", "report", &run]);
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(
        err.contains("4 of the 4 threads of the suite run") && err.contains("uwf suite wait"),
        "{err}"
    );
    let before = env.snapshot();
    let (code, out, err) = outcome(&env, &["suite", "wait", &run, "--timeout", "200ms"]);
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(err.contains("did not finish within 200ms"), "{err}");
    assert_eq!(
        env.snapshot(),
        before,
        "a wait that gave up wrote something"
    );

    let _worker = Worker::start(&env);
    let judged = env.json(&[
        "-q",
        "suite",
        "wait",
        &run,
        "--timeout",
        "120s",
        "--poll-ms",
        "50",
    ]);
    assert_eq!(judged["queued"], run.as_str(), "{judged}");
    assert_eq!(
        (judged["runs"].as_u64(), judged["runErrors"].as_u64()),
        (Some(4), Some(2)),
        "{judged}"
    );
    let result = judged["run"].as_str().unwrap().to_string();
    let node = env.json(&["cas", "get", &result]);
    let runs = node["payload"]["runs"].as_array().unwrap();
    for (r, t) in runs.iter().zip(threads) {
        assert_eq!(r["thread"], t["thread"], "{r}");
        // The command judge was given the run's thread.
        assert_eq!(r["judges"][1]["data"]["thread"], t["thread"], "{r}");
    }
    let one = &runs[0];
    assert_eq!(
        (one["done"].as_bool(), one["steps"].as_u64()),
        (Some(true), Some(3)),
        "{one}"
    );
    assert_eq!(one["judges"][0]["score"], 1.0, "{one}");
    assert!(one.get("error").is_none(), "{one}");
    let two = &runs[2];
    assert_eq!(two["done"], false, "{two}");
    assert!(
        two["error"]
            .as_str()
            .unwrap()
            .starts_with("the worker gave up"),
        "{two}"
    );
    // Judged once: waiting again, status and report all give that result.
    let again = env.json(&["-q", "suite", "wait", &run]);
    assert_eq!(again["run"], result.as_str());
    let status = env.json(&["-q", "suite", "status", &run]);
    assert_eq!(
        (&status["state"], &status["counts"], &status["judged"]),
        (
            &json!("judged"),
            &json!({ "done": 2, "failed": 2 }),
            &json!(result)
        ),
        "{status}"
    );
    assert_eq!(
        env.json(&["-q", "suite", "report", &run]),
        env.json(&["-q", "suite", "report", &result])
    );
    // The queued run is a gc root, and so is its result.
    env.json(&["cas", "gc"]);
    assert_eq!(
        env.json(&["-q", "suite", "status", &run])["judged"],
        result.as_str()
    );
    // Diff takes the queued run as its result.
    let d = env.json(&["-q", "suite", "diff", &run, &result]);
    assert_eq!(d["a"], result.as_str(), "{d}");
}

fn a_detached_suite_with_a_fixture_is_refused_and_writes_nothing(backend: Backend) {
    let Some(env) = populated(backend) else {
        return;
    };
    let agent = mock_agent(&common::examples().join("solve-issue.mock.yaml"));
    std::fs::create_dir_all(env.dir.path().join("fx")).unwrap();
    let yaml = suite_yaml(&agent, APPROVED_AT_ONCE_JUDGE, 1)
        .replace("vars: { file: a.rs }", "fixture: fx");
    let file = env.file("f.suite.yaml", &yaml);
    let before = env.snapshot();
    let err = env.fails(&["suite", "run", file.to_str().unwrap(), "--detach"]);
    assert!(
        err.contains("the case one has a fixture") && err.contains("without --detach"),
        "{err}"
    );
    assert_eq!(
        env.snapshot(),
        before,
        "a refused --detach changed the store"
    );
    // Not a run at all.
    let wf = env.json(&["workflow", "show", "solve-issue"]);
    for cmd in ["wait", "status"] {
        let err = env.fails(&["suite", cmd, wf["hash"].as_str().unwrap()]);
        assert!(err.contains("is not a suite run"), "{cmd}: {err}");
    }
}

fn tokens_reported_by_the_agents_are_built_in_figures(backend: Backend) {
    use uwf_agent_kit::testing::MockLlm;
    let Some(env) = Env::on(backend) else { return };
    let mock = MockLlm::start().unwrap();
    env.set_config(&serde_yaml::to_string(&mock.config()).unwrap());
    // uwf-llm asks the mock model once per step; the mock reports usage.
    for _ in 0..2 {
        mock.reply_text("---\nplan: p\nsteps: [a]\n---\n");
        mock.reply_text("---\nfilesChanged: [a.rs]\nsummary: done\n---\n");
        mock.reply_text("---\napproved: true\ncomments: ok\n---\n");
    }
    let agent = format!("'{}'", common::llm_bin().display());
    let judges = r#"  - { kind: jsonata, name: few-tokens, expression: "metrics.tokens < 100000" }
"#;
    let file = env.file("t.suite.yaml", &suite_yaml(&agent, judges, 1));
    let v = suite_run(&env, &file);
    let run = v["run"].as_str().unwrap();
    let node = env.json(&["cas", "get", run]);
    assert_eq!(
        (v["runErrors"].as_u64(), v["judgeErrors"].as_u64()),
        (Some(0), Some(0)),
        "{node}"
    );
    let mut sums = Vec::new();
    for r in node["payload"]["runs"].as_array().unwrap() {
        // The sum of the llm-call nodes of its steps, walked from the head.
        let mut sum = 0;
        let mut at = r["head"].as_str().map(str::to_string);
        while let Some(h) = at {
            let step = env.json(&["cas", "get", &h])["payload"].clone();
            let Some(detail) = step["detail"].as_str() else {
                break;
            };
            let call = env.json(&["cas", "get", detail])["payload"].clone();
            sum += call["totalTokens"].as_u64().unwrap();
            at = step["prev"].as_str().map(str::to_string);
        }
        assert!(sum > 0, "{r}");
        assert_eq!(r["tokens"].as_u64(), Some(sum), "{r}");
        // uwf-llm reports no cost.
        assert!(r.get("costUsd").is_none(), "{r}");
        assert_eq!(r["judges"][0]["score"], 1.0, "{r}");
        sums.push(sum);
    }
    // Summarised per case in the report (and in `suite run`'s cases).
    let report = env.json(&["-q", "suite", "report", run]);
    for (case, sum) in report["cases"].as_array().unwrap().iter().zip(&sums) {
        let tokens = judge_row(case, "$tokens");
        assert_eq!(
            (tokens["n"].as_u64(), tokens["mean"].as_f64()),
            (Some(1), Some(*sum as f64))
        );
        let cost = judge_row(case, "$costUsd");
        assert_eq!(
            (&cost["n"], &cost["errors"], &cost["mean"]),
            (&json!(0), &json!(0), &Value::Null)
        );
    }
    // A diff shows the change of a figure with no verdict.
    let d = env.json(&["-q", "suite", "diff", run, run]);
    let tokens = judge_row(&d["cases"][0], "$tokens");
    assert_eq!(
        (&tokens["change"], &tokens["verdict"]),
        (&json!(0.0), &json!("none")),
        "{tokens}"
    );
}

fn suite_progress_is_a_bar_on_a_terminal_and_lines_otherwise(backend: Backend) {
    let Some(env) = Env::on(backend) else { return };
    let approving = mock_agent(&env.file("approves.yaml", APPROVES_AT_ONCE));
    let file = env.file(
        "p.suite.yaml",
        &suite_yaml(&approving, APPROVED_AT_ONCE_JUDGE, 1),
    );
    let file = file.to_str().unwrap();
    // Not a terminal: one line per finished run, no bar; JSON on stdout.
    let (code, out, err) = outcome(&env, &["suite", "run", file]);
    assert_eq!(code, Some(0), "{err}");
    assert!(serde_json::from_str::<Value>(&out).is_ok(), "{out}");
    assert!(
        err.contains("[1/2] one #1: thread") && err.contains("[2/2] two #1"),
        "{err}"
    );
    assert!(!err.contains("runs ·"), "a bar without a terminal:\n{err}");
    // A terminal: the bar (runs done / total, failures, time), the
    // finished runs printed above it.
    #[cfg(unix)]
    {
        let mut cmd = env.command();
        cmd.args(["suite", "run", file]).env("TERM", "xterm");
        let options = rexpect::reader::Options::new()
            .timeout_ms(Some(60_000))
            .strip_ansi_escape_codes(true);
        let mut pty = rexpect::spawn_with_options(cmd, options).unwrap();
        // rexpect reads bytes as Latin-1: ASCII needles only.
        let seen = pty.exp_string("0/2 runs").unwrap();
        let failures = pty.exp_string("0 failed").unwrap();
        let running = pty.exp_string("running one #1").unwrap();
        let rest = pty.exp_string("[2/2] two #1").unwrap();
        let end = pty.exp_eof().unwrap();
        let screen = format!("{seen}{failures}{running}{rest}{end}");
        assert!(screen.contains("2/2 runs"), "{screen}");
        assert!(screen.contains("[1/2] one #1"), "{screen}");
        assert!(screen.contains("\"runErrors\""), "{screen}");
    }
}
