//! Plain programs as agents (`protocol: stdio`, docs/agent-protocol.md,
//! "Plain programs"), end to end: what the program is given (its configured
//! arguments, the step as JSON on stdin, `UWF_THREAD`/`UWF_WORKFLOW`/
//! `UWF_ROLE`), the steps uwf stores from its stdout, what it prints wrongly
//! failing the step with the thread unchanged, and secrets cut out of what
//! it prints before anything is stored or reported.
//!
//! Every test runs on both stores (`per_backend!`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Backend, Env};
use serde_json::Value;

per_backend!(
    a_plain_program_runs_every_step_and_uwf_stores_what_it_prints,
    what_a_plain_program_prints_wrongly_fails_the_step_and_changes_nothing,
    secrets_a_plain_program_prints_are_cut_out,
    a_program_whose_thread_is_killed_while_it_runs_is_not_retried,
);

/// A workflow whose one role loops until the thread has `limit` steps.
fn looping(limit: usize) -> String {
    format!(
        "name: counting
description: loops until the thread has {limit} steps
roles:
  work:
    description: counts
    systemPrompt: \"count once more\"
    outputSchema: {{ type: object, properties: {{ n: {{ type: integer }}, note: {{ type: string }} }}, required: [n], additionalProperties: false }}
conditions:
  enough: {{ description: enough steps, expression: \"$count(steps) >= {limit}\" }}
graph:
  $START: [ {{ role: work, condition: null }} ]
  work: [ {{ role: $END, condition: enough }}, {{ role: work, condition: null }} ]
"
    )
}

fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_string()
}

/// A program that keeps what it was given (stdin, arguments, environment)
/// in `$1` and answers the number of times it ran.
const RECORDER: &str = r#"#!/bin/sh
log=$1
shift
{ printf '{"args": %s, "thread": "%s", "workflow": "%s", "role": "%s", "stdin": ' "$#" "$UWF_THREAD" "$UWF_WORKFLOW" "$UWF_ROLE"
  cat | tr -d '\n'
  printf '}\n'
} >> "$log"
n=$(wc -l < "$log")
echo "program: run $n" >&2
printf '{"n": %s, "note": "run %s"}\n' "$n" "$n"
"#;

fn a_plain_program_runs_every_step_and_uwf_stores_what_it_prints(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let log = env.file("given.jsonl", "");
    let program = env.file("recorder.sh", RECORDER);
    let workflow = env.file("counting.yaml", &looping(3));
    env.set_config(&format!(
        "agents:\n  recorder: {{ command: sh, args: [{program:?}, {log:?}, extra], protocol: stdio }}\ndefaultAgent: recorder\n",
        program = program.display().to_string(),
        log = log.display().to_string(),
    ));
    let out = env.output(&[
        "thread",
        "run",
        workflow.to_str().unwrap(),
        "-p",
        "count to three",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("program: run 3"),
        "its stderr is shown: {stderr}"
    );
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["done"], true, "{done}");
    let id = s(&done["thread"]);

    let steps = env.json(&["thread", "steps", &id])["steps"].clone();
    let steps = steps.as_array().unwrap();
    assert_eq!(steps.len(), 4, "the start and three steps: {steps:?}");
    for (i, step) in steps[1..].iter().enumerate() {
        let n = i + 1;
        assert_eq!(step["role"], "work");
        assert_eq!(step["agent"], "recorder", "the alias is recorded: {step}");
        assert_eq!(
            step["output"],
            serde_json::json!({ "n": n, "note": format!("run {n}") }),
            "the output is what it printed: {step}"
        );
        // The output is the step's detail too.
        let node = env.json(&["cas", "get", &s(&step["hash"])]);
        assert_eq!(
            node["payload"]["detail"], node["payload"]["output"],
            "{node}"
        );
    }

    let given: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(given.len(), 3, "{given:?}");
    for (i, g) in given.iter().enumerate() {
        // Only the configured arguments: no thread id and role appended.
        assert_eq!(g["args"], 1, "{g}");
        assert_eq!(g["thread"], id.as_str());
        assert_eq!(g["workflow"], "counting");
        assert_eq!(g["role"], "work");
        let stdin = &g["stdin"];
        assert_eq!(stdin["thread"], id.as_str(), "{stdin}");
        assert_eq!(stdin["workflow"], "counting");
        assert_eq!(stdin["role"], "work");
        assert_eq!(stdin["prompt"], "count to three");
        assert_eq!(stdin["instructions"], "count once more");
        assert_eq!(stdin["edgePrompt"], Value::Null);
        // The head it runs at: the start, then each step in turn.
        assert_eq!(stdin["head"], steps[i]["hash"], "{stdin}");
        if i == 0 {
            assert_eq!(stdin["last"], Value::Null, "{stdin}");
        } else {
            assert_eq!(stdin["last"]["role"], "work");
            assert_eq!(stdin["last"]["output"], steps[i]["output"], "{stdin}");
        }
    }
    env.json(&["cas", "verify"]);
}

fn what_a_plain_program_prints_wrongly_fails_the_step_and_changes_nothing(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let workflow = env.file("counting.yaml", &looping(3));
    let alias = |name: &str, script: &str| {
        format!("  {name}: {{ command: sh, args: [\"-c\", {script:?}], protocol: stdio }}\n")
    };
    let config = [
        alias("silent", "true"),
        alias("chatty", "echo 'all done, n is 1'"),
        alias("wrong", r#"echo '{"n": "one"}'"#),
        // (The marker is made by the program, so it is in no configuration.)
        alias(
            "extra",
            r#"echo '{"n": 1, "mood": "'$(echo unmistakable)-7f3'"}'"#,
        ),
        alias("failing", r#"echo '{"n": 1}'; exit 3"#),
        // 4 tells uwf that an agent's child thread waits for a person; a
        // plain program has no child thread, so it is a failure like any.
        alias("four", r#"echo '{"n": 1}'; exit 4"#),
    ]
    .concat();
    env.set_config(&format!("agents:\n{config}"));
    let id =
        s(&env.json(&["thread", "start", workflow.to_str().unwrap(), "-p", "count"])["thread"]);
    let before = env.state_snapshot();
    let cases = [
        (
            "silent",
            "printed nothing on stdout (expected the role's output as JSON)",
        ),
        (
            "chatty",
            "printed \"all done, n is 1\" on stdout, which is not one JSON value",
        ),
        ("wrong", "printed an output that is not valid for role work"),
        ("extra", "printed an output that is not valid for role work"),
        ("failing", "exited with status 3"),
        ("four", "exited with status 4"),
    ];
    for (agent, reason) in cases {
        let stderr = env.fails(&["thread", "step", &id, "--agent", agent]);
        assert!(
            stderr.contains(&format!("agent {agent} (role work) {reason}")),
            "{agent}: {stderr}"
        );
        assert!(
            stderr.contains("the thread is unchanged"),
            "{agent}: {stderr}"
        );
    }
    // The one diagnostic in full: the schema's violations are listed.
    let stderr = env.fails(&["thread", "step", &id, "--agent", "wrong"]);
    insta::assert_snapshot!("invalid_output", env.scrub(&stderr));
    // No head moved, no history, and the refused output was not stored.
    assert_eq!(env.state_snapshot(), before);
    assert_eq!(env.roles(&id), Vec::<String>::new());
    assert_eq!(env.places_holding("unmistakable-7f3"), Vec::<String>::new());
}

const API_KEY: &str = "sk-or-v1-stdio-secret-29b7e1";

fn secrets_a_plain_program_prints_are_cut_out(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(
        env.root().join(".env"),
        format!("OPENROUTER_API_KEY={API_KEY}\n"),
    )
    .unwrap();
    let workflow = env.file("counting.yaml", &looping(1));
    // The program has the store's secrets in its environment, as agents
    // do, and prints one of them.
    env.set_config(
        "agents:\n  leaky: { command: sh, args: [\"-c\", \"printf '{\\\"n\\\": 1, \\\"note\\\": \\\"key %s\\\"}' \\\"$OPENROUTER_API_KEY\\\"\"], protocol: stdio }\n  garbled: { command: sh, args: [\"-c\", \"echo \\\"key $OPENROUTER_API_KEY\\\"\"], protocol: stdio }\n",
    );
    let id = s(&env.json(&["thread", "start", workflow.to_str().unwrap(), "-p", "leak"])["thread"]);
    let stderr = env.fails(&["thread", "step", &id, "--agent", "garbled"]);
    assert!(!stderr.contains(API_KEY), "{stderr}");
    assert!(
        stderr.contains("‹redacted:OPENROUTER_API_KEY›"),
        "the failure names the secret, not its value: {stderr}"
    );
    let out = env.output(&["thread", "step", &id, "--agent", "leaky"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steps = env.json(&["thread", "steps", &id]);
    assert_eq!(
        steps["steps"][1]["output"]["note"], "key ‹redacted:OPENROUTER_API_KEY›",
        "{steps}"
    );
    assert_eq!(env.places_holding(API_KEY), Vec::<String>::new());
}

/// Exit status of a step whose thread was killed (docs/state.md).
const EXIT_KILLED: i32 = 5;

fn a_program_whose_thread_is_killed_while_it_runs_is_not_retried(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let workflow = env.file("counting.yaml", &looping(1));
    let runs = env.file("runs.txt", "");
    // It kills its own thread, then answers something the role refuses
    // while exiting 0: the kill is what the step reports, and the retries
    // configured are not spent on a thread that is over.
    env.set_config(&format!(
        "agents:\n  killer: {{ command: sh, args: [\"-c\", {script:?}], protocol: stdio }}\n\
         retries:\n  default: {{ max: 3, backoff: 10ms }}\n",
        script = format!(
            "echo run >> {}; uwf thread kill \"$UWF_THREAD\" >/dev/null; echo '{{\"n\": \"late\"}}'",
            runs.display()
        ),
    ));
    let id = s(&env.json(&[
        "thread",
        "start",
        workflow.to_str().unwrap(),
        "-p",
        "kill me",
    ])["thread"]);
    let out = env.output(&["thread", "step", &id, "--agent", "killer"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_KILLED), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains(&format!("thread {id} was killed while the step ran")),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "run\n", "run once");
}
