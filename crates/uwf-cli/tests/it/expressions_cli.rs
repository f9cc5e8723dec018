//! Conditions you can trust, through the real binary: the same answer in
//! every process, bad expressions refused at `workflow put` with a line and
//! column, `uwf eval`, and `thread next --explain`.
//!
//! Every test runs on both stores (`per_backend!`): the filesystem root
//! and PostgreSQL, where the threads a condition reads, `uwf eval
//! --thread` reads and `thread next --explain` explains are rows of the
//! database (checked: the heads are in `uwf_threads`, nothing in the root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Backend, Env, mock_agent};
use serde_json::{Value, json};

per_backend!(
    conditions_give_the_same_answer_in_every_process,
    functions_jsonata_rs_lacked_work_in_conditions,
    workflow_put_refuses_expressions_that_can_never_work,
    eval_against_json_a_thread_and_a_step,
    eval_failures_are_clear_and_print_nothing,
    next_explain_shows_every_condition,
);

/// A workflow whose `seed` step outputs an object; then `other` runs when
/// `condition` holds, else the thread ends. After the seed step the thread
/// stays active exactly when the condition holds.
fn seed_workflow(condition: &str) -> String {
    format!(
        r#"name: seed
description: one step, then a condition
roles:
  seed:
    description: outputs an object
    systemPrompt: Output the object.
    outputSchema: {{ type: object }}
  other:
    description: runs when the condition fails
    systemPrompt: x
    outputSchema: {{ type: object }}
conditions:
  check: {}
graph:
  $START: [{{ role: seed, condition: null }}]
  seed:
    - {{ role: other, condition: check }}
    - {{ role: $END, condition: null }}
  other: [{{ role: $END, condition: null }}]
"#,
        serde_json::to_string(condition).unwrap()
    )
}

/// Starts a `seed` thread and runs its one step; the mock writes the
/// output's members in an order that is not sorted. `condition` must
/// hold: the thread is checked to be still active in the store.
fn seeded(env: &Env, condition: &str) -> String {
    let wf = env.file("seed.yaml", &seed_workflow(condition));
    let scenario = env.file(
        "seed.mock.yaml",
        "roles:\n  seed:\n    - output: { dd: 4, bb: 2, aa: 1, cc: 3 }\n",
    );
    let start = env.json(&["thread", "start", wf.to_str().unwrap(), "-p", "go"]);
    let id = start["thread"].as_str().unwrap().to_string();
    let stepped = env.json(&["thread", "step", &id, "--agent", &mock_agent(&scenario)]);
    assert_in_store(env, &id, &stepped["head"]);
    id
}

/// Asserts that the store holds `id` as an active thread at `head`: its
/// head file, or on PostgreSQL its `uwf_threads` row, and then nothing
/// of the thread in the root (the database is the store).
fn assert_in_store(env: &Env, id: &str, head: &Value) {
    let heads = env.heads();
    assert_eq!(
        heads.get(id).map(|h| h.trim_end()),
        Some(head.as_str().unwrap()),
        "{id} at {head}: {heads:?}"
    );
    if env.db.is_some() {
        for dir in ["threads", "cas"] {
            assert!(!env.root().join(dir).exists(), "{dir}/ in the root");
        }
    }
}

/// The table of issue 8: each condition, in ten separate processes, holds.
fn conditions_give_the_same_answer_in_every_process(backend: Backend) {
    for condition in [
        "$keys(steps[-1].output)[0] = 'aa'",
        "steps[-1].output.*[0] = 1",
        r#"$string(steps[-1].output) = '{"aa":1,"bb":2,"cc":3,"dd":4}'"#,
        "$each(steps[-1].output, function($v, $k) { $k })[3] = 'dd'",
    ] {
        let Some(env) = Env::on(backend) else {
            return;
        };
        let id = seeded(&env, condition);
        for run in 0..10 {
            let next = env.json(&["thread", "next", &id]);
            assert_eq!(
                next,
                json!({"thread": id, "role": "other", "done": false}),
                "run {run} of {condition}"
            );
        }
    }
}

fn functions_jsonata_rs_lacked_work_in_conditions(backend: Backend) {
    for condition in [
        "$type(steps[-1].output.aa) = 'number'",
        "$average([steps[-1].output.aa, steps[-1].output.dd]) = 2.5",
        "$sift(steps[-1].output, function($v) { $v > 2 }) = {'cc': 3, 'dd': 4}",
        "$count($spread(steps[-1].output)) = 4",
        "$formatNumber(1234.5, '#,##0.00') = '1,234.50'",
        "$formatInteger(4, 'w') = 'four'",
        "$formatBase(255, 16) = 'ff'",
        "$parseInteger('twelve', 'w') = 12",
        "$decodeUrl($encodeUrl('a b')) = 'a b'",
        "steps[-1].output.aa.%.bb = 2",
    ] {
        let Some(env) = Env::on(backend) else {
            return;
        };
        let id = seeded(&env, condition);
        assert_eq!(
            env.json(&["thread", "next", &id])["role"],
            "other",
            "{condition}"
        );
    }
}

/// Bad expressions are refused at `put` (and `validate`), placed in the
/// file, and nothing is stored (no file, and on PostgreSQL no row).
fn workflow_put_refuses_expressions_that_can_never_work(backend: Backend) {
    for (condition, code, needle) in [
        ("steps[-1].output.x = ", "condition-syntax", "S0"),
        (
            "$cont(steps) > 1",
            "unknown-function",
            "did you mean `$count`",
        ),
        ("$count() > 1", "wrong-arity", "takes 1"),
        ("$count(steps[role = 'sed']) > 1", "unknown-role", "\"sed\""),
        ("$now() > '2020'", "impure-function", "$now"),
    ] {
        let Some(env) = Env::on(backend) else {
            return;
        };
        let text = seed_workflow(condition);
        let wf = env.file("seed.yaml", &text);
        env.json(&["workflow", "list"]);
        let before = env.snapshot();
        let err = env.fails(&["workflow", "put", wf.to_str().unwrap()]);
        // The condition is on line 13 of the file, after `  check: "`.
        let prefix = format!("{}:13:", wf.display());
        assert!(
            err.contains(&format!("[{code}]")) && err.contains(needle) && err.contains(&prefix),
            "{condition}: {err}"
        );
        assert_eq!(env.snapshot(), before, "{condition}: something was stored");

        let out = env
            .uwf()
            .args(["workflow", "validate", wf.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let finding = &report["errors"][0];
        assert_eq!(finding["code"], code, "{report}");
        assert_eq!(finding["line"], 13, "{report}");
        assert!(finding["column"].as_u64().unwrap() >= 11, "{report}");
    }
}

fn eval_against_json_a_thread_and_a_step(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    // Plain JSON, as an argument and on stdin.
    assert_eq!(
        env.json(&[
            "eval",
            "$sum(a) / $count(a)",
            "--input",
            r#"{"a": [1, 2, 6]}"#
        ]),
        json!(3)
    );
    let out = env
        .uwf()
        .args(["eval", "$average(a)", "--input", "-"])
        .write_stdin(r#"{"a": [1, 2]}"#)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!(1.5)
    );
    // No input at all; an expression may start with `-`.
    assert_eq!(env.json(&["eval", "[1..3]"]), json!([1, 2, 3]));
    assert_eq!(env.json(&["eval", "-2 * 3"]), json!(-6));

    // undefined: nothing on stdout, a note on stderr, success.
    let out = env
        .uwf()
        .args(["eval", "missing", "--input", "{}"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("undefined"));

    // A thread's context, keys sorted; and the context at a step.
    let id = seeded(&env, "true");
    assert_eq!(
        env.json(&["eval", "$keys(steps[-1].output)", "--thread", &id]),
        json!(["aa", "bb", "cc", "dd"])
    );
    let head = env.json(&["thread", "show", &id])["head"]
        .as_str()
        .unwrap()
        .to_string();
    let before = env.snapshot();
    assert_eq!(
        env.json(&["eval", "steps[-1].role & ':' & start.prompt", "--at", &head]),
        json!("seed:go")
    );
    assert_eq!(
        env.json(&["eval", "steps[-1].output.aa", "--thread", &id]),
        json!(1)
    );
    // Evaluating changes nothing: not the head, not a file, not a row.
    assert_eq!(env.json(&["thread", "show", &id])["head"], head);
    assert_eq!(env.snapshot(), before);
}

fn eval_failures_are_clear_and_print_nothing(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let err = env.fails(&["eval", "1 +", "--input", "{}"]);
    assert!(
        err.contains("not valid JSONata") && err.contains("S0"),
        "{err}"
    );
    let err = env.fails(&["eval", "'a' + 1"]);
    assert!(err.contains("T2001"), "{err}");
    let err = env.fails(&["eval", "x", "--input", "{oops"]);
    assert!(err.contains("JSON"), "{err}");
    let err = env.fails(&["eval", "x", "--thread", "01JD0000000000000000000000"]);
    assert!(err.contains("01JD0000000000000000000000"), "{err}");
    // Runaway recursion is stopped, not a crash.
    let err = env.fails(&["eval", "($f := function($x){ $f($x) + 1 }; $f(1))"]);
    assert!(err.contains("U1001"), "{err}");
}

fn next_explain_shows_every_condition(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let wf = env.file(
        "explain.yaml",
        r#"name: explain
description: three ways out of one role
roles:
  seed: { description: s, systemPrompt: s, outputSchema: { type: object } }
  other: { description: o, systemPrompt: o, outputSchema: { type: object } }
conditions:
  big: "steps[-1].output.aa > 5"
  small: "steps[-1].output.aa < 5"
graph:
  $START: [{ role: seed, condition: null }]
  seed:
    - { role: $END, condition: big }
    - { role: other, condition: small, prompt: "aa is {{aa}}" }
    - { role: $END, condition: null }
  other: [{ role: $END, condition: null }]
"#,
    );
    let scenario = env.file(
        "seed.mock.yaml",
        "roles:\n  seed:\n    - output: { aa: 1 }\n",
    );
    let id = env.json(&["thread", "start", wf.to_str().unwrap(), "-p", "go"])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    let stepped = env.json(&["thread", "step", &id, "--agent", &mock_agent(&scenario)]);
    assert_in_store(&env, &id, &stepped["head"]);
    let before = env.snapshot();
    let e = env.json(&["thread", "next", &id, "--explain"]);
    assert_eq!(e["role"], "other");
    assert_eq!(e["done"], false);
    assert_eq!(e["prompt"], "aa is 1");
    assert_eq!(e["from"], "seed");
    assert_eq!(
        e["transitions"],
        json!([
            {"index": 0, "transition": 1, "role": "$END", "condition": "big", "expression": "steps[-1].output.aa > 5",
             "value": false, "holds": false, "taken": false},
            {"index": 1, "transition": 2, "role": "other", "condition": "small", "expression": "steps[-1].output.aa < 5",
             "value": true, "holds": true, "taken": true},
            {"index": 2, "transition": 3, "role": "$END", "condition": null, "holds": true, "taken": false}
        ])
    );
    // The plain form is unchanged.
    assert_eq!(
        env.json(&["thread", "next", &id]),
        json!({"thread": id, "role": "other", "done": false, "prompt": "aa is 1"})
    );
    // Explaining is reading: the store is as it was.
    assert_eq!(env.snapshot(), before);
}

/// Where no 256 MiB stack can be reserved for evaluations (here a
/// `ulimit -v` of 250 MB), conditions are still evaluated, with their
/// limits, and nothing panics.
#[test]
fn expressions_evaluate_where_no_big_stack_can_be_reserved() {
    let uwf = assert_cmd::cargo::cargo_bin("uwf");
    let limited = |expr: &str| {
        std::process::Command::new("bash")
            .arg("-c")
            .arg("ulimit -v 250000 && exec \"$0\" eval \"$1\"")
            .arg(&uwf)
            .arg(expr)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap()
    };
    let out = limited("$sum([1..10])");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "55");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let out = limited("($f := function($x){ $f($x) + 1 }; $f(1))");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("U1001"), "{stderr}");
    assert!(out.stdout.is_empty());
}
