//! `uwf agent context` / `uwf agent submit`, and the Python agent of
//! docs/agent-protocol.md run by the real `uwf` (needs `python3`).
//!
//! The store tests run on both stores (`per_backend!`). On PostgreSQL the
//! agent in another language still works: the Python agent shells out to
//! `uwf agent context` / `uwf agent submit`, and that `uwf` opens the same
//! database (`UWF_STORE` and `UWF_STORE_PASSWORD` reach it through the
//! environment uwf gives its agents): its nodes are rows of `uwf_nodes`,
//! nothing lands under the root's `cas/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;

use common::{Backend, Env, example};
use serde_json::Value;

per_backend!(
    the_python_agent_of_the_docs_runs_a_workflow_to_its_end,
    context_gives_everything_and_submit_writes_a_step_uwf_accepts,
);

fn python_agent() -> PathBuf {
    common::examples().join("agents/python-agent.py")
}

fn start(env: &Env) -> String {
    env.json(&[
        "thread",
        "start",
        &example("solve-issue.yaml"),
        "-p",
        "Fix the login bug",
    ])["thread"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Asserts that the store holds the node `hash` where it keeps nodes: its
/// file under the root's `cas/objects` on the filesystem; on PostgreSQL a
/// row of `uwf_nodes`, and no `cas/` in the root at all (no command,
/// agents' included, wrote a node to the filesystem instead).
fn assert_stored(env: &Env, hash: &str) {
    let Some(db) = &env.db else {
        let path = env.object_path(hash);
        assert!(path.is_file(), "{hash}: no {}", path.display());
        return;
    };
    let rows: i64 = db
        .client()
        .query_one("SELECT count(*) FROM uwf_nodes WHERE hash = $1", &[&hash])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "{hash} is not a row of uwf_nodes");
    let cas = env.root().join("cas");
    assert!(!cas.exists(), "{} exists on PostgreSQL", cas.display());
}

fn the_python_agent_of_the_docs_runs_a_workflow_to_its_end(backend: Backend) {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output();
    assert!(
        python.is_ok_and(|o| o.status.success()),
        "this test needs python3 on PATH (CI installs it)"
    );
    let Some(env) = Env::on(backend) else {
        return;
    };
    let agent = format!("python3 {}", python_agent().display());
    let done = env.json(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "Fix the login bug",
        "--agent",
        &agent,
    ]);
    assert_eq!(done["done"], true);
    let steps = env.json(&["thread", "steps", done["thread"].as_str().unwrap()]);
    let steps = steps["steps"].as_array().unwrap();
    let roles: Vec<&str> = steps[1..]
        .iter()
        .map(|s| s["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["planner", "developer", "reviewer"]);
    assert_eq!(steps[1]["output"]["plan"], "Fix: Fix the login bug");
    // The reviewer answered in frontmatter markdown: extracted by the kit.
    assert_eq!(
        steps[3]["output"],
        serde_json::json!({"approved": true, "comments": "LGTM"})
    );
    // Recorded under the name uwf gave it ($UWF_AGENT).
    assert_eq!(steps[3]["agent"], agent.as_str());
    let detail = env.text(&["thread", "step-details", steps[3]["hash"].as_str().unwrap()]);
    assert!(detail.contains("Saw 2 steps."), "{detail}");
    // Every step the agent submitted (through its own `uwf`) is in this
    // store: on PostgreSQL, rows of this database, not files of the root.
    for step in steps {
        assert_stored(&env, step["hash"].as_str().unwrap());
    }
    // The finished thread is archived in the store's history
    // (`history.jsonl` or `uwf_history`), no longer active.
    let id = done["thread"].as_str().unwrap();
    assert!(
        env.history().iter().any(|h| h["thread"] == id),
        "{id} not archived: {:?}",
        env.history()
    );
    assert!(!env.heads().contains_key(id), "{:?}", env.heads());
    if env.db.is_some() {
        for file in ["threads", "history.jsonl"] {
            assert!(!env.root().join(file).exists(), "{file} in the root");
        }
    }
}

/// About files only (the docs and the example agent), no store: one test.
#[test]
fn the_docs_show_the_tested_agent() {
    let agent = std::fs::read_to_string(python_agent()).unwrap();
    let docs = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/agent-protocol.md"),
    )
    .unwrap();
    assert!(
        docs.contains(&format!("```python\n{agent}```")),
        "docs/agent-protocol.md must show examples/agents/python-agent.py verbatim"
    );
}

fn context_gives_everything_and_submit_writes_a_step_uwf_accepts(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = start(&env);
    let started = env.heads()[&id].clone();
    let ctx = env.json(&["agent", "context", &id[..20].to_lowercase(), "planner"]);
    assert_eq!(ctx["thread"], id.as_str());
    assert_eq!(ctx["role"], "planner");
    assert_eq!(ctx["workflow"]["name"], "solve-issue");
    assert_eq!(ctx["task"], "Fix the login bug");
    assert_eq!(
        ctx["outputSchema"]["required"],
        serde_json::json!(["plan", "steps"])
    );
    assert_eq!(ctx["stepCount"], 0);
    assert_eq!(ctx["prev"], Value::Null);
    let prompt = ctx["prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with(ctx["formatInstruction"].as_str().unwrap()),
        "{prompt}"
    );
    assert!(prompt.contains("Fix the login bug"), "{prompt}");
    assert_eq!(
        prompt,
        format!(
            "{}\n\n{}",
            ctx["systemPrompt"].as_str().unwrap(),
            ctx["userPrompt"].as_str().unwrap()
        )
    );

    // A bad output is refused (schema), nothing printed, nothing stored.
    let before = env.snapshot();
    let err = env.fails(&[
        "agent",
        "submit",
        &id,
        "planner",
        "--output",
        "{\"plan\": 1}",
    ]);
    assert!(err.contains("uwf::"), "{err}");
    assert_eq!(env.snapshot(), before);
    // A good one: a hash, which `thread step` of a shell agent accepts.
    let out = env.text(&[
        "agent",
        "submit",
        &id,
        "planner",
        "--output",
        "{\"plan\": \"p\", \"steps\": []}",
        "--as",
        "by-hand",
    ]);
    let hash = out.trim().to_string();
    assert_eq!(hash.len(), 13, "{out}");
    // Stored, but the thread's head has not moved: the step is the agent's
    // answer, which uwf checks and sets itself.
    assert_stored(&env, &hash);
    assert_eq!(env.heads()[&id], started);
    let echo = env.file("echo.sh", &format!("#!/bin/sh\necho {hash}\n"));
    let agent = format!("sh {}", echo.display());
    let v = env.json(&["thread", "step", &id, "--agent", &agent]);
    assert_eq!(v["head"], hash.as_str());
    assert_eq!(env.heads()[&id], format!("{hash}\n"));
    let steps = env.json(&["thread", "steps", &id]);
    assert_eq!(steps["steps"][1]["agent"], "by-hand");

    // The developer's context has the planner's step in its history.
    let ctx = env.json(&["agent", "context", &id, "developer", "--quota", "10000"]);
    assert_eq!(ctx["stepCount"], 1);
    assert_eq!(ctx["steps"][0]["output"]["plan"], "p");
    assert_eq!(ctx["prev"], hash.as_str());
    // A text answer from stdin, extracted from its frontmatter.
    let out = env
        .uwf()
        .args([
            "--format",
            "json",
            "agent",
            "submit",
            &id,
            "developer",
            "--text",
            "-",
        ])
        .write_stdin("---\nfilesChanged: [a.rs]\nsummary: s\n---\n\nNotes.\n")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_stored(&env, v["step"].as_str().unwrap());
    let step = env.json(&["cas", "get", v["step"].as_str().unwrap()]);
    let output = env.json(&["cas", "get", step["payload"]["output"].as_str().unwrap()]);
    assert_eq!(
        output["payload"],
        serde_json::json!({"filesChanged": ["a.rs"], "summary": "s"})
    );
    // An unknown role is an error with a code, and changes nothing.
    let before = env.snapshot();
    let err = env.fails(&["agent", "context", &id, "tester"]);
    assert!(err.contains("uwf::"), "{err}");
    assert_eq!(env.snapshot(), before);
}
