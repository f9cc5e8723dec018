//! Workflows as agents, end to end: the real `uwf` running `uwf-workflow`,
//! which runs child threads with the real `uwf`, whose roles are answered
//! by the real `uwf-mock` (examples/solve-issue-nested.yaml calling
//! examples/develop.yaml). Proves the links both ways (parent → child via
//! `childThread`, child → parent via `parentState`) with `thread stack`,
//! `cas walk`, `cas refs` and `cas gc`. Every test runs on both stores (`per_backend!`): on
//! PostgreSQL the child threads' `uwf-workflow` agent opens the same
//! database, as `UWF_STORE` reaches it through the environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{Backend, Env, example, examples, mock_agent, mock_bin, workflow_bin};
use serde_json::{Value, json};

per_backend!(
    nested_example_runs_to_done_with_links_both_ways,
    thread_stack_walks_from_a_child_step_to_the_top,
    cas_walk_refs_and_gc_follow_the_links,
    thread_read_shows_child_threads_as_collapsible_summaries,
    thread_list_top_level_leaves_child_threads_out,
    thread_start_and_run_take_a_parent,
    recursion_fails_at_the_default_depth_limit,
    the_depth_limit_is_configurable,
    a_failing_child_leaves_the_parent_unchanged_and_is_kept,
    uwf_refuses_a_child_thread_that_is_not_this_threads_child,
);

// ---------------------------------------------------------------- helpers

const TASK: &str = "Fix the login redirect loop";

/// The configuration (see [`Env::set_config`]) for the nested example: uwf-mock (with `scenario`)
/// answers every role by default, `uwf-workflow develop` is the parent's
/// developer. `extra` is appended (more aliases and overrides).
fn write_config(env: &Env, scenario: &Path, extra_agents: &str, extra_overrides: &str) {
    let config = format!(
        "agents:\n  mock: {{ command: {mock:?}, args: [{scenario:?}] }}\n  develop: {{ command: {wf:?}, args: [develop] }}\n{extra_agents}\
         defaultAgent: mock\nagentOverrides:\n  solve-issue-nested: {{ developer: develop }}\n{extra_overrides}",
        mock = mock_bin().display().to_string(),
        wf = workflow_bin().display().to_string(),
        scenario = scenario.display().to_string(),
    );
    env.set_config(&config);
}

/// A store on `backend` with `develop` registered and the nested
/// example's config; `None` when PostgreSQL tests are skipped.
fn nested_env(backend: Backend) -> Option<Env> {
    let env = Env::on(backend)?;
    env.json(&["workflow", "put", &example("develop.yaml")]);
    write_config(
        &env,
        &examples().join("solve-issue-nested.mock.yaml"),
        "",
        "",
    );
    Some(env)
}

/// Runs the nested example to its end; returns the store and the parent
/// id (`None` when PostgreSQL tests are skipped).
fn run_example(backend: Backend) -> Option<(Env, String)> {
    let env = nested_env(backend)?;
    let out = env.json(&[
        "thread",
        "run",
        &example("solve-issue-nested.yaml"),
        "-p",
        TASK,
    ]);
    assert_eq!(out["done"], true, "{out}");
    let id = s(&out["thread"]);
    Some((env, id))
}

fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_string()
}

fn node(env: &Env, hash: &str) -> Value {
    env.json(&["cas", "get", hash])["payload"].clone()
}

/// `thread steps` entries without the StartNode.
fn steps(env: &Env, id: &str) -> Vec<Value> {
    env.json(&["thread", "steps", id])["steps"]
        .as_array()
        .unwrap()[1..]
        .to_vec()
}

fn start_hash(env: &Env, id: &str) -> String {
    s(&env.json(&["thread", "steps", id])["steps"][0]["hash"])
}

fn walk(env: &Env, hash: &str) -> BTreeSet<String> {
    env.json(&["cas", "walk", hash])
        .as_array()
        .unwrap()
        .iter()
        .map(|n| s(&n["hash"]))
        .collect()
}

fn has(env: &Env, hash: &str) -> bool {
    env.json(&["cas", "has", hash])["exists"] == true
}

/// The ids of `thread list --all` (with `extra` flags).
fn listed(env: &Env, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["thread", "list", "--all"];
    args.extend_from_slice(extra);
    env.json(&args)
        .as_array()
        .unwrap()
        .iter()
        .map(|t| s(&t["thread"]))
        .collect()
}

/// What the store holds of archived threads, as it holds it: the bytes of
/// `history.jsonl` (`None` when missing) on the filesystem, the rows of
/// `uwf_history` (`None` when there is none) on PostgreSQL.
fn archived(env: &Env) -> Option<Vec<u8>> {
    if env.db.is_some() {
        return env
            .tables()
            .get("uwf_history")
            .map(|rows| rows.join("\n").into_bytes());
    }
    std::fs::read(env.root().join("history.jsonl")).ok()
}

/// Forgets every archived thread but `keep`: the other lines of
/// `history.jsonl`, or the other rows of `uwf_history`. Expects exactly one
/// record of `keep`.
fn keep_only_in_history(env: &Env, keep: &str) {
    let before = env.history();
    assert_eq!(
        before.iter().filter(|h| h["thread"] == keep).count(),
        1,
        "{before:?}"
    );
    if let Some(db) = &env.db {
        let gone = db
            .client()
            .execute("DELETE FROM uwf_history WHERE thread <> $1", &[&keep])
            .unwrap();
        assert_eq!(gone as usize, before.len() - 1);
    } else {
        let history = std::fs::read_to_string(env.root().join("history.jsonl")).unwrap();
        let kept: String = history
            .lines()
            .filter(|l| l.contains(keep))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(kept.lines().count(), 1, "{history}");
        std::fs::write(env.root().join("history.jsonl"), kept).unwrap();
    }
    let after = env.history();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["thread"], keep);
}

// ---------------------------------------------------------------- the example

fn nested_example_runs_to_done_with_links_both_ways(backend: Backend) {
    let Some((env, parent)) = run_example(backend) else {
        return;
    };
    let parent_steps = steps(&env, &parent);
    let roles: Vec<String> = parent_steps.iter().map(|st| s(&st["role"])).collect();
    assert_eq!(
        roles,
        ["planner", "developer", "reviewer", "developer", "reviewer"]
    );
    let show = env.json(&["thread", "show", &parent]);
    assert_eq!(show["done"], true);
    assert!(show.get("parent").is_none(), "{show}");
    let links = show["childThreads"].as_array().unwrap().clone();
    assert_eq!(links.len(), 2, "{show}");

    for (i, dev) in parent_steps
        .iter()
        .enumerate()
        .filter(|(_, st)| st["role"] == "developer")
    {
        let dev_hash = s(&dev["hash"]);
        let payload = node(&env, &dev_hash);
        // The parent StepNode: childThread = detail = the child's terminal step.
        let terminal = s(&payload["childThread"]);
        assert_eq!(payload["detail"], payload["childThread"]);
        assert_eq!(payload["agent"], "develop");
        // The output is the child's final output mapped onto the developer's
        // schema (additionalProperties: false): the tester's `passed` and
        // `failures` are gone, its filesChanged and summary kept.
        assert_eq!(
            dev["output"],
            json!({
                "filesChanged": ["src/auth/middleware.rs", "tests/login_redirect.rs"],
                "summary": "Treat an expired session as logged out; regression test added."
            })
        );

        // The child thread, by its link from `thread show`.
        let link = links
            .iter()
            .find(|l| l["step"] == dev_hash.as_str())
            .unwrap_or_else(|| panic!("no link for {dev_hash}: {links:?}"));
        assert_eq!(link["childThread"], terminal.as_str());
        assert_eq!(link["role"], "developer");
        assert_eq!(link["workflowName"], "develop");
        assert_eq!(link["steps"], 4);
        let child = s(&link["thread"]);
        let child_show = env.json(&["thread", "show", &child]);
        assert_eq!(child_show["done"], true);
        assert_eq!(child_show["head"], terminal.as_str());
        assert_eq!(child_show["parentThread"], parent.as_str());
        let child_roles: Vec<String> = steps(&env, &child)
            .iter()
            .map(|st| s(&st["role"]))
            .collect();
        assert_eq!(child_roles, ["coder", "tester", "coder", "tester"]);

        // child → parent: the child's StartNode.parentState is the parent's
        // head when the developer was called, i.e. the developer step's prev.
        let child_start = start_hash(&env, &child);
        assert_eq!(link["start"], child_start.as_str());
        let parent_head_at_call = s(&parent_steps[i - 1]["hash"]);
        assert_eq!(payload["prev"], parent_head_at_call.as_str());
        assert_eq!(
            node(&env, &child_start)["parentState"],
            parent_head_at_call.as_str()
        );
        assert_eq!(child_show["parent"], parent_head_at_call.as_str());
        let task = s(&node(&env, &child_start)["prompt"]);
        for part in [
            TASK,
            "## Delegated by the calling workflow",
            "role `developer` of workflow `solve-issue-nested`",
            "Implement the plan and make sure the tests pass.",
            "## The result the calling role must deliver",
            "- `filesChanged` (array, required)",
            "## Earlier steps of the calling thread (newest first)",
        ] {
            assert!(
                task.contains(part),
                "{part:?} not in the child's task:\n{task}"
            );
        }
    }
    // The children were archived where the parent was: the `uwf-workflow`
    // agent and the `uwf` it runs opened this very store (on PostgreSQL,
    // `UWF_STORE` reached them through the environment; nothing of the
    // threads went to the filesystem root).
    let archived: BTreeSet<String> = env.history().iter().map(|h| s(&h["thread"])).collect();
    let mut expected: BTreeSet<String> = links.iter().map(|l| s(&l["thread"])).collect();
    expected.insert(parent.clone());
    assert_eq!(archived, expected);
    if env.db.is_some() {
        for file in ["cas", "threads", "history.jsonl"] {
            assert!(!env.root().join(file).exists(), "{file} in the root");
        }
    }
    // The second call also sees the reviewer's comments (edge prompt).
    let second = s(&links[1]["thread"]);
    let task = s(&node(&env, &start_hash(&env, &second))["prompt"]);
    assert!(
        task.contains("Address the review: Please also cover an expired session"),
        "{task}"
    );
}

fn thread_stack_walks_from_a_child_step_to_the_top(backend: Backend) {
    let Some((env, parent)) = run_example(backend) else {
        return;
    };
    let link = env.json(&["thread", "show", &parent])["childThreads"][0].clone();
    let child = s(&link["thread"]);
    let child_steps = steps(&env, &child);
    let coder = s(&child_steps[0]["hash"]);
    let parent_state = s(&node(&env, &start_hash(&env, &child))["parentState"]);

    for from in [
        coder.clone(),
        s(&link["childThread"]),
        start_hash(&env, &child),
    ] {
        let frames = env.json(&["thread", "stack", &from]);
        let frames = frames.as_array().unwrap();
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert_eq!(frames[0]["node"], from.as_str());
        assert_eq!(frames[0]["start"], start_hash(&env, &child).as_str());
        assert_eq!(frames[0]["workflowName"], "develop");
        assert_eq!(frames[0]["role"], "developer");
        assert_eq!(frames[0]["depth"], 1);
        assert_eq!(frames[0]["thread"], child.as_str());
        assert_eq!(frames[1]["node"], parent_state.as_str());
        assert_eq!(frames[1]["start"], start_hash(&env, &parent).as_str());
        assert_eq!(frames[1]["workflowName"], "solve-issue-nested");
        assert_eq!(frames[1]["role"], Value::Null);
        assert_eq!(frames[1]["depth"], 0);
        assert_eq!(frames[1]["thread"], parent.as_str());
        assert_eq!(
            frames[1]["workflow"],
            env.json(&["thread", "show", &parent])["workflow"]
        );
    }
    // A top-level node is one frame.
    let top = env.json(&["thread", "stack", &parent_state]);
    assert_eq!(top.as_array().unwrap().len(), 1);
    assert_eq!(top[0]["depth"], 0);

    // Not a thread node: a clear error.
    let wf = s(&env.json(&["thread", "show", &parent])["workflow"]);
    let err = env.fails(&["thread", "stack", &wf]);
    assert!(err.contains("should be a StartNode or StepNode"), "{err}");
}

fn cas_walk_refs_and_gc_follow_the_links(backend: Backend) {
    let Some((env, parent)) = run_example(backend) else {
        return;
    };
    let head = s(&env.json(&["thread", "show", &parent])["head"]);
    let reachable = walk(&env, &head);
    let links = env.json(&["thread", "show", &parent])["childThreads"].clone();
    let mut child_nodes = Vec::new();
    for link in links.as_array().unwrap() {
        let child = s(&link["thread"]);
        child_nodes.push(start_hash(&env, &child));
        for st in steps(&env, &child) {
            child_nodes.push(s(&st["hash"]));
            child_nodes.push(s(&node(&env, &s(&st["hash"]))["output"]));
            child_nodes.push(s(&st["detail"]));
        }
    }
    // parent → child: everything of both child threads is reachable from the
    // parent's head, through childThread.
    for n in &child_nodes {
        assert!(reachable.contains(n), "{n} not reachable from {head}");
    }
    // child → parent: the parent's start is reachable from a child step,
    // through parentState.
    let child = s(&links[0]["thread"]);
    let child_step = s(&steps(&env, &child)[0]["hash"]);
    assert!(walk(&env, &child_step).contains(&start_hash(&env, &parent)));

    // cas refs names both links.
    let dev = s(&links[0]["step"]);
    let refs = env.json(&["cas", "refs", &dev]);
    assert!(
        refs.as_array()
            .unwrap()
            .contains(&json!({"path": "/childThread", "hash": links[0]["childThread"]})),
        "{refs}"
    );
    let refs = env.json(&["cas", "refs", &start_hash(&env, &child)]);
    assert!(
        refs.as_array()
            .unwrap()
            .iter()
            .any(|r| r["path"] == "/parentState"),
        "{refs}"
    );

    // gc keeps the children: first as they are (archived in history.jsonl
    // or uwf_history)…
    env.json(&["cas", "gc", "--grace", "0s"]);
    assert!(child_nodes.iter().all(|n| has(&env, n)));
    // …and also once their own history records are gone: only the parent's
    // head reaches them now, through childThread.
    keep_only_in_history(&env, &parent);
    assert_eq!(listed(&env, &[]), std::slice::from_ref(&parent));
    let gc = env.json(&["cas", "gc", "--grace", "0s"]);
    for n in &child_nodes {
        assert!(has(&env, n), "gc swept {n}: {gc}");
    }
    assert_eq!(env.json(&["cas", "verify"])["issues"], json!([]));
    // Still walkable both ways, though the child is in no state file.
    let frames = env.json(&["thread", "stack", &child_step]);
    assert_eq!(frames.as_array().unwrap().len(), 2);
    assert!(frames[0].get("thread").is_none(), "{frames}");
    assert_eq!(frames[1]["thread"], parent.as_str());
}

fn thread_read_shows_child_threads_as_collapsible_summaries(backend: Backend) {
    let Some((env, parent)) = run_example(backend) else {
        return;
    };
    let links = env.json(&["thread", "show", &parent])["childThreads"].clone();
    let text = env.text(&["thread", "read", &parent]);
    for link in links.as_array().unwrap() {
        let child = s(&link["thread"]);
        for part in [
            format!("<details><summary>child thread {child} (4 steps, workflow develop)</summary>"),
            format!("Read it in full: `uwf thread read {child}`"),
            format!("Terminal step `{}`.", s(&link["childThread"])),
            "1. coder (mock)".to_string(),
            "4. tester (mock)".to_string(),
            "</details>".to_string(),
        ] {
            assert!(text.contains(&part), "{part:?} not in:\n{text}");
        }
        // The summary sits inside its parent step.
        let step_at = text.find(&s(&link["step"])).unwrap();
        let summary_at = text.find(&format!("child thread {child}")).unwrap();
        assert!(step_at < summary_at, "{text}");
        // The child reads as a child.
        let child_text = env.text(&["thread", "read", &child]);
        assert!(
            child_text.contains("> A child thread: started from"),
            "{child_text}"
        );
    }
    assert_eq!(text.matches("<details>").count(), 2);
}

fn thread_list_top_level_leaves_child_threads_out(backend: Backend) {
    let Some((env, parent)) = run_example(backend) else {
        return;
    };
    let all = listed(&env, &[]);
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(
        listed(&env, &["--top-level"]),
        std::slice::from_ref(&parent)
    );

    // Active threads too: a top-level one and a child started by hand.
    let top = s(&env.json(&["thread", "start", "develop", "-p", "another"])["thread"]);
    let head = s(&env.json(&["thread", "show", &parent])["head"]);
    let child = s(&env.json(&[
        "thread", "start", "develop", "-p", "a child", "--parent", &head,
    ])["thread"]);
    let active = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["thread", "list"];
        args.extend_from_slice(extra);
        env.json(&args)
            .as_array()
            .unwrap()
            .iter()
            .map(|t| s(&t["thread"]))
            .collect()
    };
    let mut both = vec![top.clone(), child.clone()];
    both.sort();
    assert_eq!(active(&[]), both);
    assert_eq!(active(&["--top-level"]), [top]);
    assert_eq!(listed(&env, &["--top-level"]).len(), 2);
}

// ---------------------------------------------------------------- --parent

fn thread_start_and_run_take_a_parent(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.json(&["workflow", "put", &example("develop.yaml")]);
    let parent = s(&env.json(&["thread", "start", "develop", "-p", "parent"])["thread"]);
    let parent_start = start_hash(&env, &parent);

    let child = s(&env.json(&[
        "thread",
        "start",
        "develop",
        "-p",
        "child",
        "--parent",
        &parent_start.to_lowercase(),
    ])["thread"]);
    assert_eq!(
        node(&env, &start_hash(&env, &child))["parentState"],
        parent_start.as_str()
    );
    assert_eq!(
        env.json(&["thread", "show", &child])["parent"],
        parent_start.as_str()
    );

    // `thread run --parent` runs the child with config-less --agent.
    let agent = mock_agent(&examples().join("solve-issue-nested.mock.yaml"));
    let out = env.json(&[
        "thread",
        "run",
        "develop",
        "-p",
        "run child",
        "--parent",
        &parent_start,
        "--agent",
        &agent,
    ]);
    assert_eq!(out["done"], true);
    let ran = s(&out["thread"]);
    assert_eq!(
        node(&env, &start_hash(&env, &ran))["parentState"],
        parent_start.as_str()
    );
    let frames = env.json(&["thread", "stack", &s(&out["head"])]);
    assert_eq!(frames.as_array().unwrap().len(), 2);
    assert_eq!(
        frames[0]["role"], "coder",
        "the parent's next role at the call"
    );

    // Not a thread node, or not in the store: refused, nothing written.
    let wf = s(&env.json(&["thread", "show", &parent])["workflow"]);
    let before = env.snapshot();
    let err = env.fails(&["thread", "start", "develop", "-p", "x", "--parent", &wf]);
    assert!(
        err.contains(&format!("--parent {wf} is not a usable parent state")),
        "{err}"
    );
    assert!(err.contains("StartNode or StepNode"), "{err}");
    let err = env.fails(&[
        "thread",
        "start",
        "develop",
        "-p",
        "x",
        "--parent",
        "0000000000000",
    ]);
    assert!(err.contains("is not a usable parent state"), "{err}");
    let err = env.fails(&["thread", "start", "develop", "-p", "x", "--parent", "nope"]);
    assert!(!err.is_empty());
    assert_eq!(env.snapshot(), before);
    // --parent is for starting only.
    let err = env.fails(&[
        "thread",
        "run",
        "--thread",
        &parent,
        "--parent",
        &parent_start,
    ]);
    assert!(err.contains("cannot be used with"), "{err}");
}

// ---------------------------------------------------------------- failures

const RECURSE: &str = r#"name: recurse
description: A workflow whose only role runs this very workflow again
roles:
  worker:
    description: Works by calling recurse
    systemPrompt: Do the work.
    outputSchema: { type: object, properties: { summary: { type: string } }, required: [summary] }
graph:
  $START: [{ role: worker, condition: null }]
  worker: [{ role: $END, condition: null }]
"#;

/// A store on `backend` where `recurse`'s worker is `uwf-workflow recurse
/// <extra…>`; `None` when PostgreSQL tests are skipped.
fn recurse_env(backend: Backend, extra_args: &str) -> Option<Env> {
    let env = Env::on(backend)?;
    let file = env.file("recurse.yaml", RECURSE);
    env.json(&["workflow", "put", file.to_str().unwrap()]);
    env.set_config(&format!(
        "agents:\n  self: {{ command: {:?}, args: [recurse{extra_args}] }}\ndefaultAgent: self\n",
        workflow_bin().display().to_string()
    ));
    Some(env)
}

/// Runs `recurse` to its failure; checks the top-level thread is unchanged
/// and returns stderr and the number of threads created.
fn recursion_fails(env: &Env, uwf_env: &[(&str, &str)]) -> (String, usize) {
    let mut cmd = env.uwf();
    cmd.args(["thread", "run", "recurse", "-p", "Go"]);
    for (k, v) in uwf_env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let top = env.json(&["thread", "list", "--top-level"]);
    let top = top.as_array().unwrap();
    assert_eq!(top.len(), 1, "{top:?}");
    let id = s(&top[0]["thread"]);
    // Unchanged: still active, its head still its StartNode.
    assert_eq!(top[0]["head"], start_hash(env, &id).as_str());
    assert_eq!(top[0]["done"], false);
    (err, listed(env, &[]).len())
}

fn recursion_fails_at_the_default_depth_limit(backend: Backend) {
    let Some(env) = recurse_env(backend, "") else {
        return;
    };
    let (err, threads) = recursion_fails(&env, &[]);
    // The top-level thread and one child per allowed depth (1..=8); the
    // ninth child is never started.
    assert_eq!(threads, 9);
    for part in [
        "call depth limit reached",
        "would start a child thread of workflow \"recurse\" at depth 9, over the limit of 8",
        "recurse → recurse (as worker) ×9",
    ] {
        assert!(err.contains(part), "{part:?} not in:\n{err}");
    }
    // The last lines are the top-level report: a failed child, the cause kept.
    let last = err.lines().rev().take(12).collect::<Vec<_>>().join("\n");
    assert!(last.contains("call depth limit reached"), "{last}");
    // The deepest child is at depth 8: its stack has 9 frames.
    let deepest = env
        .json(&["thread", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|t| s(&t["head"]))
        .map(|h| env.json(&["thread", "stack", &h]).as_array().unwrap().len())
        .max()
        .unwrap();
    assert_eq!(deepest, 9);
}

fn the_depth_limit_is_configurable(backend: Backend) {
    // By option (in the agent's config args)…
    let Some(env) = recurse_env(backend, ", --max-depth, \"2\"") else {
        return;
    };
    let (err, threads) = recursion_fails(&env, &[]);
    assert_eq!(threads, 3);
    assert!(err.contains("at depth 3, over the limit of 2"), "{err}");
    // …or by environment; 0 allows no child at all.
    let env = recurse_env(backend, "").unwrap();
    let (err, threads) = recursion_fails(&env, &[("UWF_MAX_CALL_DEPTH", "0")]);
    assert_eq!(threads, 1);
    assert!(err.contains("at depth 1, over the limit of 0"), "{err}");
}

fn a_failing_child_leaves_the_parent_unchanged_and_is_kept(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.json(&["workflow", "put", &example("develop.yaml")]);
    let failing = env.file(
        "fail.yaml",
        "roles:\n  coder:\n    - exit: 3\n      stderr: \"coder: out of tokens\"\n",
    );
    write_config(
        &env,
        &examples().join("solve-issue-nested.mock.yaml"),
        &format!(
            "  broken: {{ command: {:?}, args: [{:?}] }}\n",
            mock_bin().display().to_string(),
            failing.display().to_string()
        ),
        "  develop: { coder: broken }\n",
    );
    // A task that starts with `-` (a markdown list, say) reaches the child.
    let parent = s(&env.json(&[
        "thread",
        "start",
        &example("solve-issue-nested.yaml"),
        &format!("--prompt=- {TASK}"),
    ])["thread"]);
    let planned = env.json(&["thread", "step", &parent]);
    let head = s(&planned["head"]);
    let history = archived(&env);

    let err = env.fails(&["thread", "step", &parent]);
    // Parent unchanged.
    assert_eq!(
        env.json(&["thread", "show", &parent])["head"],
        head.as_str()
    );
    assert_eq!(env.json(&["thread", "show", &parent])["done"], false);
    assert_eq!(archived(&env), history);
    // The child thread: kept, active, named in the report, inspectable.
    let all = listed(&env, &[]);
    let child = all.iter().find(|t| **t != parent).unwrap().clone();
    for part in [
        format!("child thread {child} (workflow develop) failed"),
        "exited with status 3".to_string(),
        format!("uwf thread read {child}"),
        "coder: out of tokens".to_string(),
    ] {
        assert!(err.contains(&part), "{part:?} not in:\n{err}");
    }
    let show = env.json(&["thread", "show", &child]);
    assert_eq!(show["done"], false);
    assert_eq!(show["parent"], head.as_str());
    assert_eq!(show["parentThread"], parent.as_str());
    assert_eq!(show["head"], start_hash(&env, &child).as_str());
    let text = env.text(&["thread", "read", &child]);
    assert!(text.contains("_No steps yet._"), "{text}");
    assert!(text.contains(&format!("**Task:** - {TASK}")), "{text}");
    assert_eq!(listed(&env, &["--top-level"]), [parent]);
}

fn uwf_refuses_a_child_thread_that_is_not_this_threads_child(backend: Backend) {
    // An agent that claims as its childThread a step of an unrelated
    // top-level thread: uwf's checks refuse it and the head stays.
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    let scenario = examples().join("solve-issue.mock.yaml");
    let agent = mock_agent(&scenario);
    let other = s(&env.json(&["thread", "start", "solve-issue", "-p", "other"])["thread"]);
    let stranger = s(&env.json(&["thread", "step", &other, "--agent", &agent])["head"]);

    let id = s(&env.json(&["thread", "start", "solve-issue", "-p", "mine"])["thread"]);
    let start = start_hash(&env, &id);
    let types = env.json(&["cas", "schema", "list"]);
    let step_type = types
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["title"] == "StepNode")
        .map(|t| s(&t["hash"]))
        .unwrap();
    let wf = env.json(&["workflow", "show", "solve-issue"]);
    let plan_schema = s(&wf["payload"]["roles"]["planner"]["outputSchema"]);
    let output = s(&env.json(&[
        "cas",
        "put",
        &plan_schema,
        r#"{"plan": "p", "steps": ["s"]}"#,
    ])["hash"]);
    let step = json!({
        "start": start, "prev": null, "role": "planner", "output": output,
        "detail": output, "agent": "liar", "childThread": stranger,
    });
    let forged = s(&env.json(&["cas", "put", &step_type, &step.to_string()])["hash"]);
    let err = env.fails(&[
        "thread",
        "step",
        &id,
        "--agent",
        &format!("sh -c 'echo {forged}' liar"),
    ]);
    assert!(
        err.contains(&format!(
            "has childThread {stranger}, whose thread was started from nothing"
        )),
        "{err}"
    );
    assert_eq!(env.json(&["thread", "show", &id])["head"], start.as_str());
}
