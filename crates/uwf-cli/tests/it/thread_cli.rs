//! `uwf thread …` end to end: the real `uwf` driving the real `uwf-mock`,
//! including misbehaving agents, concurrent steps and interrupted runs.
//! The tests in the `per_backend!` list run on both stores, the filesystem
//! and PostgreSQL; the others are about files of the filesystem store
//! (uwf 0.1.0's `threads.yaml`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Child, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Backend, Env, example, mock_agent, mock_bin, processes_matching, wait_no_process};
use serde_json::{Value, json};

per_backend!(
    start_by_name_by_hash_and_by_file,
    a_long_step_listens_for_its_kill_instead_of_polling,
    prompt_missing_or_empty_is_refused,
    show_list_next_and_steps_of_a_running_thread,
    read_within_a_quota_pages_back_with_before,
    fork_a_finished_thread_mid_way_and_step_the_fork,
    step_details_prints_the_detail_as_yaml,
    run_solve_issue_to_done,
    run_triage_to_done,
    run_draft_loop_to_done,
    run_stops_at_max_steps_and_continues_with_thread,
    finished_unknown_and_malformed_threads_are_errors,
    kill_archives_the_thread,
    list_all_adds_archived_threads_marked_done,
    a_thread_both_active_and_archived_is_active,
    no_config_and_no_agent_says_how_to_fix_it,
    config_default_agent_is_used_without_agent_flag,
    agent_gets_the_root_the_env_file_and_its_arguments,
    malformed_agent_command_lines_are_refused,
    agent_overrides_pick_the_agent_per_role,
    unknown_alias_in_config_is_an_error,
    a_corrupt_head_file_is_reported_and_never_rewritten,
    a_head_naming_a_missing_node_is_one_broken_thread_among_many,
    corrupt_config_yaml_is_reported_and_never_rewritten,
    corrupt_history_is_reported,
    moderator_evaluation_error_mid_thread,
    moderator_no_transition_matched_mid_thread,
    agent_not_found,
    agent_exiting_non_zero_shows_its_stderr,
    agent_hanging_past_the_timeout_is_stopped,
    timeout_kills_the_agents_whole_process_group,
    misbehaving_agents_get_distinct_clear_errors,
    wrong_prev_mid_thread_is_refused,
    two_concurrent_steps_of_one_thread_exactly_one_lands,
    concurrent_steps_of_different_threads_all_land,
    kill_while_a_step_runs_stops_it_and_keeps_the_thread_archived,
    killed_thread_run_leaves_a_sound_root_and_can_be_continued,
    killed_thread_run_early_or_late_leaves_a_sound_root,
    the_step_records_the_agent_as_uwf_named_it,
    interrupting_uwf_stops_the_agent_and_changes_nothing,
    what_uwf_creates_is_private_whatever_the_umask,
);

// ---------------------------------------------------------------- helpers

/// A scenario for `solve-issue` that approves on the second review:
/// planner, developer, reviewer (rejects), developer, reviewer = 5 steps.
/// `{delay}` is replaced by each entry's delay.
const SOLVE: &str = r#"roles:
  planner:
    - output: { plan: "the plan", steps: ["one", "two"] }
      delay: {delay}
      stderr: "planner at work"
  developer:
    - output: { filesChanged: ["a.rs"], summary: "first try" }
      delay: {delay}
    - output: { filesChanged: ["a.rs", "b.rs"], summary: "second try" }
      delay: {delay}
  reviewer:
    - output: { approved: false, comments: "add a test" }
      delay: {delay}
    - output: { approved: true, comments: "LGTM" }
      delay: {delay}
"#;

static SCENARIOS: AtomicUsize = AtomicUsize::new(0);

/// Writes a scenario file and returns the `--agent` value running uwf-mock on it.
fn agent(env: &Env, scenario: &str) -> String {
    let n = SCENARIOS.fetch_add(1, Ordering::Relaxed);
    mock_agent(&env.file(&format!("scenario-{n}.yaml"), scenario))
}

/// The `solve-issue` scenario with every step taking `delay` (e.g. "0ms").
fn solve_agent(env: &Env, delay: &str) -> String {
    agent(env, &SOLVE.replace("{delay}", delay))
}

/// `--agent` for one of the example scenarios.
fn example_agent(name: &str) -> String {
    mock_agent(&common::examples().join(name))
}

/// Starts a thread; returns its id.
fn start(env: &Env, workflow: &str) -> String {
    let v = env.json(&["thread", "start", workflow, "-p", "Fix the login bug"]);
    v["thread"].as_str().unwrap().to_string()
}

/// A store with solve-issue registered and a fresh thread on it; `None`
/// when PostgreSQL tests are skipped.
fn started(backend: Backend) -> Option<(Env, String)> {
    let env = Env::on(backend)?;
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    let id = start(&env, "solve-issue");
    Some((env, id))
}

/// `thread show`'s `{workflow, thread, head, done}` (it says more).
fn show_head(env: &Env, id: &str) -> Value {
    let v = env.json(&["thread", "show", id]);
    json!({"workflow": v["workflow"], "thread": v["thread"], "head": v["head"], "done": v["done"]})
}

/// `thread list` rows cut to `{thread, workflow, head, done}`.
fn list_heads(rows: &Value) -> Value {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|v| json!({"thread": v["thread"], "workflow": v["workflow"], "head": v["head"], "done": v["done"]}))
        .collect()
}

fn head(env: &Env, id: &str) -> String {
    env.json(&["thread", "show", id])["head"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `thread steps` entries (the StartNode first).
fn steps(env: &Env, id: &str) -> Vec<Value> {
    env.json(&["thread", "steps", id])["steps"]
        .as_array()
        .unwrap()
        .clone()
}

fn step(env: &Env, id: &str, agent: &str) -> Value {
    env.json(&["thread", "step", id, "--agent", agent])
}

/// Runs `thread step` expecting an agent failure: non-zero exit, nothing on
/// stdout, the head files, history.jsonl and registry.yaml byte-identical and the
/// head where it was. Returns stderr.
fn agent_fails(env: &Env, id: &str, agent: &str, extra: &[&str]) -> String {
    let before = env.state_snapshot();
    let old = head(env, id);
    let mut args = vec!["thread", "step", id, "--agent", agent];
    args.extend_from_slice(extra);
    let err = env.fails(&args);
    assert_eq!(env.state_snapshot(), before, "state files changed:\n{err}");
    assert_eq!(head(env, id), old, "the head moved:\n{err}");
    err
}

fn contains_all(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{p:?} not in:\n{text}");
    }
}

fn spawn(env: &Env, args: &[&str]) -> Child {
    env.uwf_process().args(args).spawn().unwrap()
}

fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The active threads (id → head) as their head files under `threads/` say.
fn threads_yaml(env: &Env) -> Value {
    env.heads()
        .into_iter()
        .map(|(id, head)| {
            assert!(
                head.ends_with('\n') && head.lines().count() == 1,
                "{head:?}"
            );
            (id, Value::String(head.trim_end().to_string()))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

// ---------------------------------------------------------------- start

fn start_by_name_by_hash_and_by_file(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let hash = env.json(&["workflow", "put", &example("solve-issue.yaml")])["hash"]
        .as_str()
        .unwrap()
        .to_string();

    for w in ["solve-issue", hash.as_str(), &hash.to_lowercase()] {
        let v = env.json(&["thread", "start", w, "-p", "Fix the login bug"]);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["workflow", "thread"]);
        assert_eq!(v["workflow"], hash);
        let id = v["thread"].as_str().unwrap();
        assert_eq!(id.len(), 26);
        // The head is a StartNode with the workflow and the prompt.
        let start = env.json(&["cas", "get", &head(&env, id)]);
        assert_eq!(
            start["payload"],
            json!({"workflow": hash, "prompt": "Fix the login bug"})
        );
        assert_eq!(threads_yaml(&env)[id], start["hash"]);
    }

    // A file is registered on the way.
    let v = env.json(&[
        "thread",
        "start",
        &example("triage.yaml"),
        "-p",
        "Dark mode resets",
    ]);
    assert_eq!(env.registry()["triage"], v["workflow"].as_str().unwrap());
    assert_eq!(env.json(&["thread", "list"]).as_array().unwrap().len(), 4);
}

fn prompt_missing_or_empty_is_refused(backend: Backend) {
    let Some((env, _)) = started(backend) else {
        return;
    };
    let before = env.snapshot();
    // Missing: clap's usage error.
    let out = env.output(&["thread", "start", "solve-issue"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    contains_all(&stderr(&out), &["--prompt"]);
    let out = env.output(&["thread", "run", "solve-issue"]);
    assert_eq!(out.status.code(), Some(2));
    contains_all(&stderr(&out), &["--prompt"]);
    // Empty or blank.
    for p in ["", "   ", "\n\t"] {
        let err = env.fails(&["thread", "start", "solve-issue", "-p", p]);
        contains_all(&err, &["the prompt is empty", "-p"]);
        let err = env.fails(&["thread", "run", "solve-issue", "-p", p, "--agent", "true"]);
        contains_all(&err, &["the prompt is empty"]);
        // Also for a file: not even registered.
        let err = env.fails(&["thread", "start", &example("triage.yaml"), "-p", p]);
        contains_all(&err, &["the prompt is empty"]);
    }
    assert_eq!(env.snapshot(), before);
}

// ---------------------------------------------------------------- inspect

fn show_list_next_and_steps_of_a_running_thread(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let start_hash = head(&env, &id);
    let wf = env.json(&["workflow", "show", "solve-issue"])["hash"].clone();

    assert_eq!(
        env.json(&["thread", "next", &id]),
        json!({"thread": id, "role": "planner", "done": false})
    );
    let agent = solve_agent(&env, "0ms");
    let v = step(&env, &id, &agent);
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["workflow", "thread", "head", "done"]);
    assert_eq!(v["done"], false);
    assert_eq!(v["workflow"], wf);
    let h1 = v["head"].as_str().unwrap().to_string();

    assert_eq!(
        show_head(&env, &id),
        json!({"workflow": wf, "thread": id, "head": h1, "done": false})
    );
    let list = env.json(&["thread", "list"]);
    assert_eq!(
        list_heads(&list),
        json!([{"thread": id, "workflow": wf, "head": h1, "done": false}])
    );
    assert_eq!(list[0]["name"], "solve-issue");
    assert_eq!(list[0]["task"], "Fix the login bug");
    assert_eq!(list[0]["state"], "idle");
    assert_eq!(
        env.json(&["thread", "next", &id]),
        json!({"thread": id, "role": "developer", "done": false})
    );

    let s = env.json(&["thread", "steps", &id]);
    assert_eq!(s["thread"], id);
    assert_eq!(s["workflow"], wf);
    let entries = s["steps"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["hash"], start_hash);
    assert_eq!(entries[0]["prompt"], "Fix the login bug");
    assert_eq!(entries[0]["workflow"], wf);
    assert_eq!(entries[1]["hash"], h1);
    assert_eq!(entries[1]["role"], "planner");
    assert_eq!(
        entries[1]["output"],
        json!({"plan": "the plan", "steps": ["one", "two"]})
    );
    // The agent as uwf named it (the --agent command line), per docs/agent-protocol.md.
    assert_eq!(entries[1]["agent"], agent.as_str());
    for k in ["detail", "timestamp"] {
        assert!(!entries[1][k].is_null(), "{k}: {}", entries[1]);
    }
    // The StepNode links back to the StartNode.
    let node = env.json(&["cas", "get", &h1]);
    assert_eq!(node["payload"]["prev"], Value::Null);
    assert_eq!(node["payload"]["start"], start_hash);
}

fn read_within_a_quota_pages_back_with_before(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let v = env.json(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "Fix the login bug",
        "--agent",
        &solve_agent(&env, "0ms"),
    ]);
    let id = v["thread"].as_str().unwrap();

    let full = env.text(&["thread", "read", id]);
    contains_all(
        &full,
        &[
            &format!("# Thread {id} · solve-issue"),
            "**Task:** Fix the login bug",
            "## Step 1 · planner",
            "## Step 5 · reviewer",
            "the plan",
        ],
    );
    assert!(!full.contains("earlier step(s) not shown"), "{full}");

    let small = env.text(&["thread", "read", id, "--quota", "100"]);
    contains_all(
        &small,
        &["4 earlier step(s) not shown", "## Step 5 · reviewer"],
    );
    assert!(!small.contains("## Step 4"), "{small}");
    // The hint is a command that works.
    let hint = small
        .lines()
        .find(|l| l.contains("earlier step(s) not shown"))
        .unwrap();
    let cmd = hint.split('`').nth(1).unwrap();
    let words: Vec<&str> = cmd.split_whitespace().collect();
    assert_eq!(&words[..3], ["uwf", "thread", "read"]);
    let mut args = words[1..].to_vec();
    args.extend(["--quota", "100"]);
    let earlier = env.text(&args);
    contains_all(
        &earlier,
        &["3 earlier step(s) not shown", "## Step 4 · developer"],
    );
    assert!(!earlier.contains("## Step 5"), "{earlier}");

    // --before a hash of no step of the thread is an error.
    let err = env.fails(&["thread", "read", id, "--before", "0000000000000"]);
    contains_all(&err, &["0000000000000", "not a StepNode"]);
}

fn fork_a_finished_thread_mid_way_and_step_the_fork(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let solve = solve_agent(&env, "0ms");
    let v = env.json(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "Fix the login bug",
        "--agent",
        &solve,
    ]);
    let id = v["thread"].as_str().unwrap().to_string();
    let original = steps(&env, &id);
    assert_eq!(original.len(), 6);
    let dev = original[2]["hash"].as_str().unwrap().to_string();
    assert_eq!(original[2]["role"], "developer");
    let history_before = env.history();
    assert_eq!(history_before.len(), 1);

    let f = env.json(&["thread", "fork", &dev]);
    let fork = f["thread"].as_str().unwrap().to_string();
    assert_ne!(fork, id);
    assert_eq!(f, json!({"thread": fork, "forkedFrom": {"step": dev}}));
    assert_eq!(
        show_head(&env, &fork),
        json!({"workflow": v["workflow"], "thread": fork, "head": dev, "done": false})
    );
    assert_eq!(env.json(&["thread", "next", &fork])["role"], "reviewer");

    // The fork is stepped on its own: its chain has one reviewer run fewer
    // than the original, so the reviewer rejects (entry 0) again.
    let s = step(&env, &fork, &solve);
    let node = env.json(&["cas", "get", s["head"].as_str().unwrap()]);
    assert_eq!(node["payload"]["prev"], dev);
    let out = env.json(&["cas", "get", node["payload"]["output"].as_str().unwrap()]);
    assert_eq!(out["payload"]["approved"], false);
    let done = env.json(&["thread", "run", "--thread", &fork, "--agent", &solve]);
    assert_eq!(done["done"], true);
    assert_eq!(
        env.roles(&fork),
        ["planner", "developer", "reviewer", "developer", "reviewer"]
    );
    // The original is untouched.
    assert_eq!(steps(&env, &id), original);
    assert!(env.history().starts_with(&history_before));

    // A fork of the last step is finished: its first step archives it
    // without running an agent.
    let last = original[5]["hash"].as_str().unwrap().to_string();
    let f3 = env.json(&["thread", "fork", &last]);
    let f3 = f3["thread"].as_str().unwrap();
    assert_eq!(
        env.json(&["thread", "next", f3]),
        json!({"thread": f3, "role": "$END", "done": true})
    );
    assert_eq!(
        env.json(&["thread", "step", f3]),
        json!({"workflow": v["workflow"], "thread": f3, "head": last, "done": true})
    );
    assert_eq!(env.json(&["thread", "show", f3])["done"], true);

    // Forking a StartNode works too; forking anything else does not.
    let f2 = env.json(&["thread", "fork", original[0]["hash"].as_str().unwrap()]);
    assert_eq!(
        env.json(&["thread", "next", f2["thread"].as_str().unwrap()])["role"],
        "planner"
    );
    let before = env.snapshot();
    let wf = v["workflow"].as_str().unwrap();
    let err = env.fails(&["thread", "fork", wf]);
    assert!(err.contains(wf), "{err}");
    let err = env.fails(&["thread", "fork", "0000000000000"]);
    assert!(err.contains("0000000000000"), "{err}");
    assert_eq!(env.snapshot(), before);
}

fn step_details_prints_the_detail_as_yaml(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let h = step(&env, &id, &solve_agent(&env, "0ms"))["head"]
        .as_str()
        .unwrap()
        .to_string();
    let detail = env.json(&["cas", "get", &h])["payload"]["detail"].clone();
    let text = env.text(&["thread", "step-details", &h]);
    assert!(
        serde_json::from_str::<Value>(&text).is_err(),
        "YAML, not JSON:\n{text}"
    );
    let y: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(y["step"], h);
    assert_eq!(y["detail"], detail);
    assert!(!y["content"].is_null(), "{text}");
    // JSON on request.
    let j = env.json(&["--format", "json", "thread", "step-details", &h]);
    assert_eq!(j, y);
    // A StartNode has no details.
    let start = steps(&env, &id)[0]["hash"].as_str().unwrap().to_string();
    let err = env.fails(&["thread", "step-details", &start]);
    contains_all(&err, &[&start, "not a StepNode"]);
}

// ---------------------------------------------------------------- run

/// Runs an example to the end with its scenario; returns (thread, stderr).
fn run_example(
    backend: Backend,
    workflow: &str,
    scenario: &str,
    expected: &[&str],
) -> Option<(Env, String, String)> {
    let env = Env::on(backend)?;
    let out = env.output(&[
        "thread",
        "run",
        &example(workflow),
        "-p",
        "A task",
        "--agent",
        &example_agent(scenario),
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["thread"].as_str().unwrap().to_string();
    assert_eq!(v["done"], true);
    assert_eq!(env.roles(&id), expected);
    assert_eq!(v["head"], steps(&env, &id).last().unwrap()["hash"]);
    // Progress: one line per step start and finish, then the summary.
    for (i, role) in expected.iter().enumerate() {
        contains_all(
            &err,
            &[
                &format!("step {}: {role} (", i + 1),
                &format!("step {}: {role} finished in ", i + 1),
            ],
        );
    }
    contains_all(
        &err,
        &[&format!(
            "thread {id} done after {} step(s)",
            expected.len()
        )],
    );
    // Archived as done.
    assert_eq!(threads_yaml(&env), json!({}));
    let h = env.history();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0]["thread"], id);
    assert_eq!(h[0]["head"], v["head"]);
    assert_eq!(h[0]["reason"], "done");
    assert_eq!(
        show_head(&env, &id),
        json!({"workflow": v["workflow"], "thread": id, "head": v["head"], "done": true})
    );
    Some((env, id, err))
}

fn run_solve_issue_to_done(backend: Backend) {
    let Some((_, _, err)) = run_example(
        backend,
        "solve-issue.yaml",
        "solve-issue.mock.yaml",
        &["planner", "developer", "reviewer", "developer", "reviewer"],
    ) else {
        return;
    };
    // The agent's stderr streams through.
    contains_all(&err, &["planner: reading the issue", "developer: editing"]);
}

fn run_triage_to_done(backend: Backend) {
    let Some((env, id, _)) = run_example(
        backend,
        "triage.yaml",
        "triage.mock.yaml",
        &["triager", "fixer", "responder"],
    ) else {
        return;
    };
    let s = steps(&env, &id);
    assert_eq!(s[2]["output"]["$status"], "wontfix");
    // The edge prompts, rendered from the last output, seen from forks.
    let fork = env.json(&["thread", "fork", s[1]["hash"].as_str().unwrap()]);
    let fork = fork["thread"].as_str().unwrap();
    assert_eq!(
        env.json(&["thread", "next", fork]),
        json!({"thread": fork, "role": "fixer", "done": false,
               "prompt": "Fix this bug in settings: Dark mode resets to light after every reload."})
    );
    let fork = env.json(&["thread", "fork", s[2]["hash"].as_str().unwrap()]);
    let next = env.json(&["thread", "next", fork["thread"].as_str().unwrap()]);
    assert_eq!(next["role"], "responder");
    assert!(
        next["prompt"]
            .as_str()
            .unwrap()
            .starts_with("Explain to the reporter why this will not be fixed: Dark mode"),
        "{next}"
    );
}

fn run_draft_loop_to_done(backend: Backend) {
    let Some((env, id, _)) = run_example(
        backend,
        "draft-loop.yaml",
        "draft-loop.mock.yaml",
        &["writer", "critic", "writer", "critic", "writer", "critic"],
    ) else {
        return;
    };
    assert_eq!(steps(&env, &id)[6]["output"]["score"], 7);
}

fn run_stops_at_max_steps_and_continues_with_thread(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let solve = solve_agent(&env, "0ms");
    let out = env.output(&[
        "thread",
        "run",
        "--thread",
        &id,
        "--agent",
        &solve,
        "--max-steps",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    // A failure: nothing on stdout (README), and how to continue.
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    contains_all(
        &stderr(&out),
        &["not done after 2 step(s)", &format!("uwf thread run {id}")],
    );
    assert_eq!(env.roles(&id), ["planner", "developer"]);
    let v = env.json(&["thread", "run", "--thread", &id, "--agent", &solve]);
    assert_eq!(v["done"], true);
    assert_eq!(env.roles(&id).len(), 5);
    // Run to the end again, a finished thread is there already: its final
    // state, as the run printed it, and nothing changes (no step runs).
    let before = env.snapshot();
    let again = env.json(&["thread", "run", "--thread", &id, "--agent", &solve]);
    assert_eq!(again, v);
    assert_eq!(env.json(&["thread", "run", &id, "--detach"]), v);
    assert_eq!(env.snapshot(), before);
    assert_eq!(env.roles(&id).len(), 5);
}

// ---------------------------------------------------------------- finished, unknown, killed

fn finished_unknown_and_malformed_threads_are_errors(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let solve = solve_agent(&env, "0ms");
    let v = env.json(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "x",
        "--agent",
        &solve,
    ]);
    let done = v["thread"].as_str().unwrap().to_string();
    let unknown = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    let before = env.snapshot();

    for cmd in ["step", "kill"] {
        let mut args = vec!["thread", cmd, done.as_str()];
        if cmd == "step" {
            args.extend(["--agent", solve.as_str()]);
        }
        let err = env.fails(&args);
        contains_all(&err, &[&done, "is finished (archived)", "uwf thread fork"]);
    }
    // Asked what comes next, a finished thread answers with the `$END` it
    // ended on (it is not stepped: nothing changes).
    let next = env.json(&["thread", "next", &done]);
    assert_eq!(
        next,
        serde_json::json!({"thread": done, "role": "$END", "done": true, "archived": "done"})
    );

    for cmd in ["step", "show", "next", "kill", "steps", "read"] {
        let all = ["thread", cmd, unknown, "--agent", solve.as_str()];
        let err = env.fails(&all[..if cmd == "step" { 5 } else { 3 }]);
        contains_all(
            &err,
            &[&format!("no thread {unknown}"), "thread list --all"],
        );
        for bad in [
            "not-a-thread",
            "01ARZ3NDEKTSV4RRFFQ69G5FA!",
            "../../etc/passwd",
        ] {
            let err = env.fails(&["thread", cmd, bad]);
            contains_all(&err, &["invalid thread id"]);
        }
    }
    assert_eq!(env.snapshot(), before);
}

fn kill_archives_the_thread(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let h = step(&env, &id, &solve_agent(&env, "0ms"))["head"].clone();
    assert_eq!(
        env.json(&["thread", "kill", &id]),
        json!({"thread": id, "archived": true})
    );
    assert_eq!(env.json(&["thread", "list"]), json!([]));
    let all = env.json(&["thread", "list", "--all"]);
    assert_eq!(all.as_array().unwrap().len(), 1);
    assert_eq!(all[0]["thread"], id);
    assert_eq!(all[0]["head"], h);
    assert_eq!(all[0]["done"], true);
    assert_eq!(env.json(&["thread", "show", &id])["done"], true);
    let hist = env.history();
    assert_eq!(hist.len(), 1);
    assert_eq!(hist[0]["reason"], "killed");
    // Steps and read still work on an archived thread.
    assert_eq!(env.roles(&id), ["planner"]);
    let before = env.snapshot();
    let err = env.fails(&["thread", "step", &id, "--agent", &solve_agent(&env, "0ms")]);
    contains_all(&err, &["is finished (archived)"]);
    let err = env.fails(&["thread", "kill", &id]);
    contains_all(&err, &["is finished"]);
    // (the scenario file above is outside the root)
    assert_eq!(env.snapshot(), before);
}

fn list_all_adds_archived_threads_marked_done(backend: Backend) {
    let Some((env, active)) = started(backend) else {
        return;
    };
    let solve = solve_agent(&env, "0ms");
    let v = env.json(&["thread", "run", "solve-issue", "-p", "x", "--agent", &solve]);
    let finished = v["thread"].as_str().unwrap();
    let list = env.json(&["thread", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["thread"], active);
    let all = env.json(&["thread", "list", "--all"]);
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2);
    let done = all.iter().find(|t| t["thread"] == finished).unwrap();
    assert_eq!(done["done"], true);
    assert_eq!(done["head"], v["head"]);
    let act = all.iter().find(|t| t["thread"] == active.as_str()).unwrap();
    assert_eq!(act["done"], false);
}

fn a_thread_both_active_and_archived_is_active(backend: Backend) {
    // What a crash between the two writes of an archive leaves behind.
    let Some((env, id)) = started(backend) else {
        return;
    };
    let solve = solve_agent(&env, "0ms");
    let h = step(&env, &id, &solve)["head"].clone();
    let wf = env.json(&["thread", "show", &id])["workflow"].clone();
    let entry =
        json!({"thread": id, "workflow": wf, "head": h, "completedAt": 1, "reason": "done"});
    match &env.db {
        None => std::fs::write(env.root().join("history.jsonl"), format!("{entry}\n")).unwrap(),
        Some(db) => {
            // The PostgreSQL store archives in one transaction; a history
            // row beside an active one is what a copy or a repair by hand
            // can leave.
            db.client()
                .execute(
                    "INSERT INTO uwf_history (thread, workflow, head, completed_at, reason) \
                     VALUES ($1, $2, $3, 1, 'done')",
                    &[&id, &wf.as_str().unwrap(), &h.as_str().unwrap()],
                )
                .unwrap();
        }
    }
    assert_eq!(env.history().len(), 1);
    assert_eq!(env.json(&["thread", "show", &id])["done"], false);
    let all = env.json(&["thread", "list", "--all"]);
    assert_eq!(
        list_heads(&all),
        json!([{"thread": id, "workflow": wf, "head": h, "done": false}])
    );
    assert_eq!(step(&env, &id, &solve)["done"], false);
    assert_eq!(env.roles(&id), ["planner", "developer"]);
}

// ---------------------------------------------------------------- agent resolution

fn no_config_and_no_agent_says_how_to_fix_it(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let before = env.snapshot();
    for args in [
        &["thread", "step", id.as_str()][..],
        &["thread", "run", "--thread", id.as_str()],
    ] {
        let err = env.fails(args);
        contains_all(
            &err,
            &[
                "no agent configured",
                "planner",
                "uwf setup",
                "uwf config show",
                "--agent",
            ],
        );
    }
    assert_eq!(env.snapshot(), before);
}

fn config_default_agent_is_used_without_agent_flag(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    // `uwf-mock` by name: found because uwf puts its own directory first on PATH.
    mock_bin();
    let scenario = common::examples().join("solve-issue.mock.yaml");
    env.set_config(&format!(
        "agents:\n  mock:\n    command: uwf-mock\n    args: ['{}']\ndefaultAgent: mock\n",
        scenario.display()
    ));
    // Not on the PATH uwf is started with.
    let out = env
        .uwf()
        .env("PATH", "/usr/bin:/bin")
        .args(["thread", "run", &example("solve-issue.yaml"), "-p", "x"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["done"], true);
    assert_eq!(env.roles(v["thread"].as_str().unwrap()).len(), 5);
}

fn agent_gets_the_root_the_env_file_and_its_arguments(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    // Secrets stay on the machine, in the root's `.env`, on every store.
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(env.root().join(".env"), "UWF_TEST_KEY=s3cret\n").unwrap();
    let agent = r#"sh -c 'echo "root=$UNCAGED_WORKFLOW_STORAGE_ROOT key=$UWF_TEST_KEY args=$*" >&2; echo "path=${PATH%%:*}" >&2; exit 4' agent"#;
    let before = env.state_snapshot();
    // The root comes from --root here, not from the environment.
    let root = env.root();
    let out = env
        .uwf()
        .env_remove("UNCAGED_WORKFLOW_STORAGE_ROOT")
        .env_remove("UWF_TEST_KEY")
        .args([
            "--root",
            root.to_str().unwrap(),
            "thread",
            "step",
            &id,
            "--agent",
            agent,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let uwf = assert_cmd::cargo::cargo_bin("uwf");
    contains_all(
        &stderr(&out),
        &[
            "exited with status 4",
            &format!("root={} key=s3cret args={id} planner", root.display()),
            &format!("path={}", uwf.parent().unwrap().display()),
        ],
    );
    assert_eq!(env.state_snapshot(), before);
}

fn malformed_agent_command_lines_are_refused(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let err = agent_fails(&env, &id, "", &[]);
    contains_all(&err, &["invalid agent command", "the command is empty"]);
    let err = agent_fails(&env, &id, "'unclosed", &[]);
    contains_all(&err, &["invalid agent command", "never closed"]);
}

fn agent_overrides_pick_the_agent_per_role(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    let default = env.file("default.yaml", &SOLVE.replace("{delay}", "0ms"));
    let special = env.file(
        "special.yaml",
        &SOLVE
            .replace("{delay}", "0ms")
            .replace("the plan", "the overridden plan"),
    );
    let mock = mock_bin();
    env.set_config(&format!(
            "agents:\n  normal: {{ command: '{m}', args: ['{d}'] }}\n  special: {{ command: '{m}', args: ['{s}'] }}\n\
             defaultAgent: normal\nagentOverrides:\n  solve-issue:\n    planner: special\n",
            m = mock.display(),
            d = default.display(),
            s = special.display()
        ),
    );
    let id = start(&env, "solve-issue");
    env.json(&["thread", "step", &id]);
    env.json(&["thread", "step", &id]);
    let s = steps(&env, &id);
    assert_eq!(s[1]["output"]["plan"], "the overridden plan");
    assert_eq!(s[2]["output"]["summary"], "first try");
    // --agent beats both.
    let other = env.file(
        "other.yaml",
        &SOLVE
            .replace("{delay}", "0ms")
            .replace("add a test", "from --agent"),
    );
    step(&env, &id, &mock_agent(&other));
    assert_eq!(steps(&env, &id)[3]["output"]["comments"], "from --agent");
}

fn unknown_alias_in_config_is_an_error(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    env.set_config("defaultAgent: ghost\n");
    let before = env.snapshot();
    let err = env.fails(&["thread", "step", &id]);
    contains_all(&err, &["\"ghost\"", &env.config_origin()]);
    assert_eq!(env.snapshot(), before);
}

// ---------------------------------------------------------------- corrupt state

fn a_corrupt_head_file_is_reported_and_never_rewritten(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let other = start(&env, "solve-issue");
    let solve = solve_agent(&env, "0ms");
    // Where the head is kept, as the errors must name it.
    let expect = match &env.db {
        None => {
            std::fs::write(env.root().join("threads").join(&id), b"\xff oops\n").unwrap();
            vec![format!("threads/{id}"), "never overwrites".to_string()]
        }
        Some(db) => {
            db.client()
                .execute(
                    "UPDATE uwf_threads SET head = 'oops' WHERE thread = $1",
                    &[&id],
                )
                .unwrap();
            vec![format!("head of thread {id} (table uwf_threads)")]
        }
    };
    let expect: Vec<&str> = expect.iter().map(String::as_str).collect();
    let before = env.snapshot();
    for args in [
        &["thread", "list"][..],
        &["thread", "show", id.as_str()],
        &["thread", "step", id.as_str(), "--agent", solve.as_str()],
        &["thread", "kill", id.as_str()],
    ] {
        let err = env.fails(args);
        contains_all(&err, &expect);
    }
    assert_eq!(env.snapshot(), before, "a corrupt head was touched");
    // Other threads are not affected by it.
    env.json(&["thread", "show", other.as_str()]);
    env.json(&["thread", "start", "solve-issue", "-p", "x"]);
}

/// A head that parses but names a node the store does not have (or one of
/// another type) breaks that thread only: `thread list` lists it as
/// broken, with a warning; `thread prune` passes it by; completion still
/// offers it; every other thread is listed, pruned and offered as before.
fn a_head_naming_a_missing_node_is_one_broken_thread_among_many(backend: Backend) {
    let Some((env, broken)) = started(backend) else {
        return;
    };
    let retyped = start(&env, "solve-issue");
    let idle = start(&env, "solve-issue");
    let solve = solve_agent(&env, "0ms");
    let finished = env.json(&["thread", "run", "solve-issue", "-p", "x", "--agent", &solve]);
    let finished = finished["thread"].as_str().unwrap().to_string();
    let workflow = env.registry()["solve-issue"].clone();
    env.damage_head(&broken, "0000000000000");
    env.damage_head(&retyped, &workflow);

    let out = env.output(&["thread", "list", "--all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    contains_all(
        &stderr,
        &[
            &format!("thread {broken} is broken: no node 0000000000000 in the store"),
            &format!("thread {retyped} is broken"),
            "uwf cas verify",
        ],
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["thread"].as_str().unwrap()).collect();
    // Active threads by id (the broken ones among them), then archived.
    let mut active = [broken.as_str(), retyped.as_str(), idle.as_str()];
    active.sort_unstable();
    assert_eq!(
        ids,
        [&active[..], &[finished.as_str()]].concat(),
        "{rows:#?}"
    );
    let row = |id: &str| rows.iter().find(|r| r["thread"] == id).unwrap();
    assert_eq!(
        row(&broken),
        &json!({
            "thread": broken, "name": null, "task": null, "age": null, "state": "broken",
            "workflow": null, "head": "0000000000000", "done": false,
            "error": "no node 0000000000000 in the store",
        })
    );
    assert_eq!(row(&retyped)["state"], "broken");
    assert!(
        row(&retyped)["error"].as_str().unwrap().contains(&workflow),
        "{}",
        row(&retyped)
    );
    assert_eq!(row(&idle)["state"], "idle");
    assert_eq!(row(&idle)["task"], "Fix the login bug");
    assert_eq!(row(&finished)["state"], "done");
    let top = env.json(&["thread", "list", "--top-level"]);
    assert_eq!(top.as_array().unwrap().len(), 3, "{top:#}");

    // Completion offers every thread, the broken ones marked.
    let out = env
        .uwf()
        .env("UWF_COMPLETE", "fish")
        .args(["--", "uwf", "thread", "show", ""])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let offered = String::from_utf8(out.stdout).unwrap();
    for id in [&broken, &retyped, &idle, &finished] {
        assert!(offered.contains(id.as_str()), "{id} not in {offered}");
    }
    assert!(offered.contains(&format!("{broken}\tbroken")), "{offered}");

    // Prune passes the broken threads by (nothing about them can be
    // told) and prunes the others.
    let out = env.output(&["thread", "prune", "--older-than", "0s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("thread {broken} is broken")),
        "{stderr}"
    );
    let pruned: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pruned: Vec<&str> = pruned
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["thread"].as_str().unwrap())
        .collect();
    assert_eq!(pruned, [idle.as_str()]);
    let heads = env.heads();
    assert!(
        heads.contains_key(&broken) && heads.contains_key(&retyped),
        "{heads:?}"
    );
    assert!(!heads.contains_key(&idle), "{heads:?}");
}

/// A store of uwf 0.1.0 (threads.yaml, no threads/) whose index is corrupt:
/// every command that needs it stops, and nothing is migrated or rewritten.
#[test]
fn corrupt_threads_yaml_is_reported_and_never_rewritten() {
    let (env, id) = started(Backend::Fs).unwrap();
    let solve = solve_agent(&env, "0ms");
    std::fs::remove_dir_all(env.root().join("threads")).unwrap();
    std::fs::write(
        env.root().join("threads.yaml"),
        format!("{id}: 0000000000000\n  oops: [\n"),
    )
    .unwrap();
    let before = env.snapshot();
    for args in [
        &["thread", "list"][..],
        &["thread", "show", id.as_str()],
        &["thread", "step", id.as_str(), "--agent", solve.as_str()],
        &["thread", "start", "solve-issue", "-p", "x"],
        &["thread", "start", &example("triage.yaml"), "-p", "x"],
        &["thread", "kill", id.as_str()],
    ] {
        let err = env.fails(args);
        contains_all(&err, &["threads.yaml", "line 2", "never overwrites"]);
    }
    assert_eq!(env.snapshot(), before, "a corrupt threads.yaml was touched");
}

/// A state lock that cannot be taken (`.state.lock` is a directory, which
/// only the filesystem store has) refuses every start before anything is
/// stored: no StartNode, no Workflow node of a file, no registration.
#[test]
fn a_start_refused_by_the_state_lock_stores_nothing() {
    let (env, _) = started(Backend::Fs).unwrap();
    let lock = env.root().join(".state.lock");
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    let before = env.snapshot();
    for args in [
        &["thread", "start", "solve-issue", "-p", "a new task"][..],
        &[
            "thread",
            "start",
            &example("triage.yaml"),
            "-p",
            "a new task",
        ],
        &[
            "thread",
            "run",
            &example("draft-loop.yaml"),
            "-p",
            "a new task",
        ],
    ] {
        let err = env.fails(args);
        contains_all(&err, &["cannot open lock file", ".state.lock"]);
        assert_eq!(env.snapshot(), before, "uwf {args:?} changed the store");
    }
}

fn corrupt_config_yaml_is_reported_and_never_rewritten(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    for (text, line) in [
        (
            "agents:\n  mock: { command: uwf-mock }\ndefaultAgent: mock\nbogus: : :\n",
            "line 4",
        ),
        (
            "agents:\n  mock: { command: uwf-mock }\ndefaultAgent: mock\nbogus: 1\n",
            "line 4",
        ),
    ] {
        env.set_config_unchecked(text);
        let before = env.snapshot();
        let err = env.fails(&["thread", "step", &id]);
        // A file is left for the user to fix; a shared row is replaced.
        let help = match env.db {
            None => "never overwrites",
            Some(_) => "uwf store init --config",
        };
        contains_all(&err, &[&env.config_origin(), line, help]);
        assert_eq!(
            env.snapshot(),
            before,
            "a corrupt configuration was touched"
        );
    }
}

fn corrupt_history_is_reported(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let Some(db) = &env.db else {
        std::fs::write(env.root().join("history.jsonl"), "{not json}\n").unwrap();
        let before = env.snapshot();
        let err = env.fails(&["thread", "list", "--all"]);
        contains_all(&err, &["history.jsonl", "line 1"]);
        // Appending to a file that does not parse would bury the damage.
        let err = env.fails(&["thread", "kill", &id]);
        contains_all(&err, &["history.jsonl", "line 1"]);
        assert_eq!(env.snapshot(), before);
        return;
    };
    // A row is damaged on its own: listing reports it, naming the table.
    let wf = env.json(&["thread", "show", &id])["workflow"].clone();
    db.client()
        .execute(
            "INSERT INTO uwf_history (thread, workflow, head, completed_at, reason) \
             VALUES ($1, $2, 'oops', 1, 'done')",
            &[&"01ARZ3NDEKTSV4RRFFQ69G5FAV", &wf.as_str().unwrap()],
        )
        .unwrap();
    let before = env.snapshot();
    let err = env.fails(&["thread", "list", "--all"]);
    contains_all(
        &err,
        &["head of a history entry (table uwf_history)", "\"oops\""],
    );
    assert_eq!(env.snapshot(), before);
}

// ---------------------------------------------------------------- moderator errors

const MODFAIL: &str = r#"name: modfail
description: A condition that breaks at run time
roles:
  a:
    description: Does a
    systemPrompt: Do a.
    outputSchema: { type: object, properties: { x: { type: integer } }, required: [x] }
conditions:
  typeError: { description: "adds a string to a number", expression: "steps[-1].output.x + 'a'" }
  never: "false"
graph:
  $START:
    - { role: a, condition: null }
  a:
    - { role: $END, condition: {cond} }
    - { role: a, condition: never }
"#;

/// A thread of `MODFAIL` (with `cond` as the first condition) after its
/// first step, and the failure of the second.
fn moderator_failure(backend: Backend, cond: &str, expect: &[&str]) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let wf = env.file("modfail.yaml", &MODFAIL.replace("{cond}", cond));
    let id = start(&env, wf.to_str().unwrap());
    let a = agent(&env, "roles:\n  a:\n    - output: { x: 1 }\n");
    // The step itself lands; the moderator trips over it afterwards.
    let v = step(&env, &id, &a);
    assert_eq!(v["done"], false);
    let before = env.snapshot();
    for args in [
        &["thread", "step", id.as_str(), "--agent", a.as_str()][..],
        &["thread", "next", id.as_str()],
        &[
            "thread",
            "run",
            "--thread",
            id.as_str(),
            "--agent",
            a.as_str(),
        ],
    ] {
        let err = env.fails(args);
        contains_all(&err, &["workflow `modfail`", "role `a`"]);
        contains_all(&err, expect);
    }
    assert_eq!(env.snapshot(), before);
    assert_eq!(env.roles(&id), ["a"]);
}

fn moderator_evaluation_error_mid_thread(backend: Backend) {
    moderator_failure(
        backend,
        "typeError",
        &["condition `typeError`", "T2002", "steps[-1].output.x + 'a'"],
    );
}

fn moderator_no_transition_matched_mid_thread(backend: Backend) {
    moderator_failure(backend, "never", &["no transition matched", "`never`"]);
}

// ---------------------------------------------------------------- agent failures

fn agent_not_found(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let err = agent_fails(&env, &id, "/nonexistent/uwf-agent-xyz --flag", &[]);
    contains_all(
        &err,
        &[
            "cannot start agent",
            "/nonexistent/uwf-agent-xyz",
            "--agent",
        ],
    );
    let err = agent_fails(&env, &id, "uwf-no-such-agent-xyz", &[]);
    contains_all(&err, &["cannot start agent", "uwf-no-such-agent-xyz"]);
    // Still steppable with a good agent.
    assert_eq!(step(&env, &id, &solve_agent(&env, "0ms"))["done"], false);
}

fn agent_exiting_non_zero_shows_its_stderr(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let bad = agent(
        &env,
        "roles:\n  planner:\n    - exit: 3\n      stderr: \"boom: the disk is on fire\"\n",
    );
    let err = agent_fails(&env, &id, &bad, &[]);
    contains_all(
        &err,
        &[
            "(role planner) exited with status 3",
            "boom: the disk is on fire",
            "the thread is unchanged",
        ],
    );
    // Streamed once as the agent wrote it, not repeated in the error.
    assert_eq!(err.matches("boom: the disk is on fire").count(), 1, "{err}");
    assert_eq!(step(&env, &id, &solve_agent(&env, "0ms"))["done"], false);
}

fn agent_hanging_past_the_timeout_is_stopped(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let slow = agent(
        &env,
        "roles:\n  planner:\n    - output: { plan: p, steps: [] }\n      delay: 30s\n      stderr: never printed\n",
    );
    let t = Instant::now();
    let err = agent_fails(&env, &id, &slow, &["--timeout", "500ms"]);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    contains_all(
        &err,
        &["(role planner) did not finish within 500ms and was stopped"],
    );
    assert!(
        wait_no_process(&id, Duration::from_secs(3)),
        "agent processes survived: {:?}",
        processes_matching(&id)
    );
    assert_eq!(step(&env, &id, &solve_agent(&env, "0ms"))["done"], false);
}

fn timeout_kills_the_agents_whole_process_group(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    // The agent starts a grandchild (whose command line names the thread)
    // and waits; both must be gone after the timeout.
    let script = r#"sh -c "sleep 30; :" grandchild "$1" & echo started >&2; sleep 30; :"#;
    let agent = format!("sh -c '{script}' agent");
    let t = Instant::now();
    let err = agent_fails(&env, &id, &agent, &["--timeout", "700ms"]);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    contains_all(&err, &["did not finish within 700ms", "started"]);
    assert!(
        wait_no_process(&id, Duration::from_secs(3)),
        "agent processes survived: {:?}",
        processes_matching(&id)
    );
}

fn misbehaving_agents_get_distinct_clear_errors(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let output = "      output: { plan: p, steps: [] }\n";
    for (fault, needs_output, expect) in [
        (
            "no-output",
            false,
            &["printed nothing on stdout (expected the new StepNode's hash)"][..],
        ),
        (
            "garbage",
            false,
            &["printed \"hello, I am not a hash\" on stdout, which is not a CAS hash"],
        ),
        ("unknown-hash", false, &["but no such node is in the store"]),
        (
            "not-a-step",
            false,
            &["which is not a StepNode (its type is StartNode)"],
        ),
        ("wrong-prev", true, &["has prev", "expected", "null"]),
        (
            "wrong-start",
            true,
            &["has start", "but the thread's StartNode is"],
        ),
        (
            "wrong-role",
            true,
            &["is for role \"developer\" but the moderator chose \"planner\""],
        ),
        (
            "invalid-output",
            false,
            &["the output of StepNode", "the role's"],
        ),
    ] {
        let scenario = format!(
            "roles:\n  planner:\n    - fault: {fault}\n      stderr: \"mock: {fault}\"\n{}",
            if needs_output { output } else { "" }
        );
        let err = agent_fails(&env, &id, &agent(&env, &scenario), &[]);
        contains_all(&err, &["(role planner)", "the thread is unchanged"]);
        contains_all(&err, &[&format!("mock: {fault}")]);
        contains_all(&err, expect);
    }
    // After all that, a good agent steps the thread.
    assert_eq!(step(&env, &id, &solve_agent(&env, "0ms"))["done"], false);
    assert_eq!(env.roles(&id), ["planner"]);
}

fn wrong_prev_mid_thread_is_refused(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    step(&env, &id, &solve_agent(&env, "0ms"));
    let scenario = "roles:\n  developer:\n    - fault: wrong-prev\n      output: { filesChanged: [], summary: s }\n";
    let err = agent_fails(&env, &id, &agent(&env, scenario), &[]);
    let h = head(&env, &id);
    let start = steps(&env, &id)[0]["hash"].as_str().unwrap().to_string();
    contains_all(&err, &[&format!("has prev {start}"), "expected", &h]);
}

// ---------------------------------------------------------------- concurrency

fn two_concurrent_steps_of_one_thread_exactly_one_lands(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let slow = solve_agent(&env, "800ms");
    let args = ["thread", "step", id.as_str(), "--agent", slow.as_str()];
    let a = spawn(&env, &args);
    let b = spawn(&env, &args);
    let outs = [finish(a), finish(b)];
    let ok: Vec<&Output> = outs.iter().filter(|o| o.status.success()).collect();
    let failed: Vec<&Output> = outs.iter().filter(|o| !o.status.success()).collect();
    assert_eq!(
        (ok.len(), failed.len()),
        (1, 1),
        "{:?}",
        outs.iter().map(stderr).collect::<Vec<_>>()
    );
    let won: Value = serde_json::from_slice(&ok[0].stdout).unwrap();
    let lost = stderr(failed[0]);
    assert!(failed[0].stdout.is_empty());
    contains_all(
        &lost,
        &[
            &format!("thread {id} moved to"),
            "this step was not applied",
        ],
    );
    assert_eq!(env.roles(&id), ["planner"]);
    assert_eq!(head(&env, &id), won["head"].as_str().unwrap());
}

fn concurrent_steps_of_different_threads_all_land(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    let ids: Vec<String> = (0..6).map(|_| start(&env, "solve-issue")).collect();
    let slow = solve_agent(&env, "500ms");
    let children: Vec<Child> = ids
        .iter()
        .map(|id| spawn(&env, &["thread", "step", id, "--agent", &slow]))
        .collect();
    for (id, child) in ids.iter().zip(children) {
        let out = finish(child);
        assert!(out.status.success(), "{id}: {}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["thread"], id.as_str());
    }
    let threads = threads_yaml(&env);
    assert_eq!(threads.as_object().unwrap().len(), 6);
    for id in &ids {
        assert_eq!(env.roles(id), ["planner"]);
        assert_eq!(threads[id.as_str()], head(&env, id).as_str());
    }
}

/// On PostgreSQL a step whose agent runs for a while stops reading its
/// head several times a second and listens for head notices: the database
/// sees almost no transactions while the agent works, and a kill still
/// stops it at once. (The filesystem store reads a local file instead.)
fn a_long_step_listens_for_its_kill_instead_of_polling(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let Some(db) = &env.db else {
        return;
    };
    let slow = solve_agent(&env, "60s");
    let child = spawn(&env, &["thread", "step", &id, "--agent", &slow]);
    let mut client = db.client();
    let listening = |client: &mut uwf_pg_testing::Client| -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN uwf_heads'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while listening(&mut client) == 0 {
        assert!(Instant::now() < deadline, "the step never listened");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Over a few seconds of the agent working, the step reads its head
    // (the one query it would poll with) hardly at all: reading it five
    // times a second would be fifteen reads. Counted as the scans of
    // `uwf_threads` in this test's database, which only the step reads:
    // the database's transaction count also moves with work that is not
    // the step's (it did, when other suites ran beside this one).
    let head_reads = |client: &mut uwf_pg_testing::Client| -> i64 {
        let _ = client.execute("SELECT pg_stat_clear_snapshot()", &[]);
        client
            .query_one(
                "SELECT (coalesce(idx_scan, 0) + coalesce(seq_scan, 0))::bigint \
                 FROM pg_stat_user_tables WHERE relname = 'uwf_threads'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    // The reads of the step's first seconds, before it listened, reach the
    // statistics up to a second after they happen (PostgreSQL flushes a
    // backend's counters at most once a second): wait until the count
    // holds still for a while before the window opens. A step that polled
    // on would never hold still, and fail here.
    let settle = Instant::now() + Duration::from_secs(30);
    let mut before = head_reads(&mut client);
    loop {
        std::thread::sleep(Duration::from_millis(1200));
        let now = head_reads(&mut client);
        if now == before {
            break;
        }
        assert!(
            Instant::now() < settle,
            "the step kept reading its head: {now} reads so far"
        );
        before = now;
    }
    // The window the reads are counted over (the behaviour under test).
    std::thread::sleep(Duration::from_secs(3));
    let during = head_reads(&mut client) - before;
    assert!(
        during < 3,
        "{during} reads of the head in 3 s while the agent worked"
    );
    let killed_at = Instant::now();
    env.json(&["thread", "kill", &id]);
    let out = finish(child);
    assert!(!out.status.success());
    contains_all(
        &stderr(&out),
        &[&format!("thread {id} was killed while the step ran")],
    );
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "the step went on for {:?} after the kill",
        killed_at.elapsed()
    );
}

fn kill_while_a_step_runs_stops_it_and_keeps_the_thread_archived(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let start_hash = head(&env, &id);
    let slow = solve_agent(&env, "3s");
    let started_at = Instant::now();
    let child = spawn(&env, &["thread", "step", &id, "--agent", &slow]);
    common::wait_until("the agent to start", Duration::from_secs(60), || {
        common::has_child(child.id())
    });
    assert_eq!(
        env.json(&["thread", "kill", &id]),
        json!({"thread": id, "archived": true})
    );
    let killed_at = Instant::now();
    let out = finish(child);
    let took = killed_at.elapsed();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    contains_all(
        &stderr(&out),
        &[
            &format!("thread {id} was killed while the step ran"),
            "not applied",
        ],
    );
    assert!(
        took < Duration::from_millis(1500) && started_at.elapsed() < Duration::from_millis(3000),
        "the step went on for {took:?} after the kill"
    );
    assert!(
        wait_no_process(&id, Duration::from_secs(3)),
        "agent survived: {:?}",
        processes_matching(&id)
    );
    // Archived once, with the old head; nothing active.
    assert_eq!(threads_yaml(&env), json!({}));
    let h = env.history();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["head"], start_hash);
    assert_eq!(h[0]["reason"], "killed");
    assert_eq!(
        show_head(&env, &id),
        json!({"workflow": h[0]["workflow"], "thread": id, "head": start_hash, "done": true})
    );
    assert_eq!(steps(&env, &id).len(), 1);
}

// ---------------------------------------------------------------- interrupted

/// SIGKILLs `uwf thread run` `after` it was spawned or, if
/// `must_have_started`, `after` its first agent started (the thread exists
/// then), then checks the root is sound and the thread can be continued to
/// the end.
fn interrupted_run(backend: Backend, after: Duration, must_have_started: bool) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let slow = solve_agent(&env, "300ms");
    let mut child = spawn(
        &env,
        &[
            "thread",
            "run",
            &example("solve-issue.yaml"),
            "-p",
            "x",
            "--agent",
            &slow,
        ],
    );
    if must_have_started {
        common::wait_until("the first agent to start", Duration::from_secs(60), || {
            common::has_child(child.id())
        });
    }
    // The moment of the fault is the test's parameter.
    std::thread::sleep(after);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The agent runs in its own process group and may outlive uwf; let it end.
    let scenario_dir = env.dir.path().to_str().unwrap().to_string();
    assert!(wait_no_process(&scenario_dir, Duration::from_secs(5)));

    // Every state file parses.
    let threads = threads_yaml(&env);
    if let Ok(bytes) = std::fs::read(env.root().join("registry.yaml")) {
        let registry: Value = serde_yaml::from_slice(&bytes).unwrap();
        assert!(registry["solve-issue"].is_string(), "{registry}");
    }
    let archived = env.history();
    // Every head exists.
    let mut ids = std::collections::BTreeSet::new();
    for (id, h) in threads.as_object().unwrap() {
        let has = env.json(&["cas", "has", h.as_str().unwrap()]);
        assert_eq!(has["exists"], true, "head of {id} is missing");
        ids.insert(id.clone());
    }
    let active = ids.clone();
    for e in &archived {
        let has = env.json(&["cas", "has", e["head"].as_str().unwrap()]);
        assert_eq!(has["exists"], true);
        ids.insert(e["thread"].as_str().unwrap().to_string());
    }
    if env.root().exists() {
        env.json(&["cas", "verify"]);
    }

    // The thread (if it got started) goes on to the end.
    assert!(ids.len() <= 1, "{threads} {archived:?}");
    if must_have_started {
        assert_eq!(
            ids.len(),
            1,
            "the run was killed before it started a thread"
        );
    }
    if let Some(id) = active.first() {
        let v = env.json(&["thread", "run", "--thread", id, "--agent", &slow]);
        assert_eq!(v["done"], true);
        assert_eq!(env.roles(id).len(), 5);
        env.json(&["cas", "verify"]);
    }
}

fn killed_thread_run_leaves_a_sound_root_and_can_be_continued(backend: Backend) {
    interrupted_run(backend, Duration::from_millis(700), true);
}

fn killed_thread_run_early_or_late_leaves_a_sound_root(backend: Backend) {
    interrupted_run(backend, Duration::from_millis(350), false);
    interrupted_run(backend, Duration::from_millis(1200), true);
}

fn the_step_records_the_agent_as_uwf_named_it(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let scenario = env.file(
        "label.yaml",
        "roles:\n  planner:\n    - output: { plan: p, steps: [] }\n",
    );
    let agent = mock_agent(&scenario);
    let out = env.json(&["thread", "step", &id, "--agent", &agent]);
    let step = env.json(&["cas", "get", out["head"].as_str().unwrap()]);
    assert_eq!(
        step["payload"]["agent"],
        agent.as_str(),
        "StepNode.agent is the command line as given"
    );
}

fn interrupting_uwf_stops_the_agent_and_changes_nothing(backend: Backend) {
    let Some((env, id)) = started(backend) else {
        return;
    };
    let before = env.state_snapshot();
    // The agent names the thread on its command line, so pgrep can find it.
    let script = r#"echo working >&2; sleep 30; :"#;
    let agent = format!("sh -c '{script}' agent");
    let child = env
        .uwf_process()
        .args(["thread", "step", &id, "--agent", &agent])
        .spawn()
        .unwrap();
    common::wait_until("the agent to start", Duration::from_secs(60), || {
        common::has_child(child.id())
    });
    let t = Instant::now();
    nix_kill(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?} to stop",
        t.elapsed()
    );
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted"), "{err}");
    assert!(
        wait_no_process(&id, Duration::from_secs(3)),
        "agent survived: {:?}",
        processes_matching(&id)
    );
    assert_eq!(before, env.state_snapshot());
}

fn nix_kill(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The permission bits of `path`.
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Issue 25: under umask 022 (which leaves new files readable by
/// everyone), every directory uwf creates is 0700 and every file 0600:
/// the root when uwf makes it, the store, the state files, logs, markers,
/// the run queue, slots, the page of `thread view`. A root the user made
/// and a file of theirs in it keep their modes (docs/state.md, "Secrets
/// and file modes").
fn what_uwf_creates_is_private_whatever_the_umask(backend: Backend) {
    use std::os::unix::fs::PermissionsExt;
    let Some(env) = Env::on(backend) else {
        return;
    };
    // The user's own root, open to the group and others, with their
    // configuration in it (on PostgreSQL the configuration is the store's).
    std::fs::create_dir(env.root()).unwrap();
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = "workflows:\n  solve-issue: { concurrency: 2 }\n";
    let mut theirs = vec![env.root()];
    let config_file = env.set_config(config);
    if backend == Backend::Fs {
        std::fs::set_permissions(&config_file, std::fs::Permissions::from_mode(0o644)).unwrap();
        theirs.push(config_file);
    }
    let uwf = |root: Option<&std::path::Path>, args: &[&str]| -> Output {
        let mut cmd = env.uwf_under_umask("022");
        if let Some(root) = root {
            cmd.arg("--root").arg(root);
        }
        cmd.args(args).output().unwrap()
    };
    let ok = |root: Option<&std::path::Path>, args: &[&str]| -> String {
        let out = uwf(root, args);
        assert!(
            out.status.success(),
            "uwf {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let scenario = env.file("solve.yaml", &common::solve_scenario("0ms"));
    let mock = mock_agent(&scenario);
    let workflow = example("solve-issue.yaml");
    // A whole run (store, heads, history, registry, logs, markers, slots),
    // a failed attempt, a queued run, a page.
    ok(
        None,
        &["thread", "run", &workflow, "-p", "one", "--agent", &mock],
    );
    let id = json_of(&ok(None, &["thread", "start", &workflow, "-p", "two"]))["thread"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !uwf(
            None,
            &["thread", "step", &id, "--agent", "sh -c 'exit 3' a"]
        )
        .status
        .success()
    );
    ok(
        None,
        &[
            "thread", "run", &workflow, "-p", "three", "--agent", &mock, "--detach",
        ],
    );
    let page = env.dir.path().join("page.html");
    ok(
        None,
        &["thread", "view", &id, "--html", page.to_str().unwrap()],
    );
    assert_eq!(mode_of(&page), 0o600, "the page of thread view");

    // A root uwf makes itself, with the directories above it.
    let fresh = env.dir.path().join("fresh");
    let fresh_root = fresh.join("nested").join("root");
    ok(
        Some(&fresh_root),
        &["thread", "run", &workflow, "-p", "four", "--agent", &mock],
    );

    for (top, theirs) in [(env.root(), theirs), (fresh.clone(), Vec::new())] {
        let mut seen = Vec::new();
        let mut stack = vec![top.clone()];
        while let Some(p) = stack.pop() {
            let meta = std::fs::metadata(&p).unwrap();
            if meta.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            }
            let name = p.strip_prefix(&top).unwrap().display().to_string();
            let expected = if theirs.contains(&p) {
                if meta.is_dir() { 0o755 } else { 0o644 }
            } else if meta.is_dir() {
                0o700
            } else {
                0o600
            };
            assert_eq!(mode_of(&p), expected, "{}: {:o}", p.display(), mode_of(&p));
            seen.push(name);
        }
        // What was looked at: the logs and markers on every store, the
        // rest on the filesystem's.
        let mut wanted = vec!["logs"];
        if backend == Backend::Fs {
            wanted.extend([
                "cas",
                "threads",
                "history.jsonl",
                "registry.yaml",
                ".state.lock",
            ]);
        }
        for want in wanted {
            assert!(
                seen.iter()
                    .any(|p| p == want || p.ends_with(&format!("/{want}"))),
                "{want} in {}: {seen:?}",
                top.display()
            );
        }
        if backend == Backend::Fs && top == env.root() {
            for want in ["runs", "slots", "attempts.yaml"] {
                assert!(seen.iter().any(|p| p == want), "{want}: {seen:?}");
            }
        }
    }
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}
