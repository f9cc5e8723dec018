//! Sharp edges and recovery (issue 13 §4): broken pipes, stdout on
//! failure, prompts from stdin and files, mistyped paths, error codes and
//! causes, thread-id prefixes and `@last`, resuming a failed run, pruning,
//! colour.
//!
//! Every test runs on both stores (`per_backend!`): what they name, resume
//! and prune is read from the filesystem root or, on PostgreSQL, from the
//! database (`uwf_threads`, `uwf_history`, `uwf_registry`), and the tests
//! check the store's own tables where a thread lives or was archived.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;

use common::{Backend, Env, example, mock_agent};

per_backend!(
    a_reader_that_goes_away_ends_the_command_quietly,
    the_task_comes_from_stdin_or_a_file,
    a_mistyped_path_is_no_such_file_not_a_workflow_name,
    thread_read_refuses_a_data_format_instead_of_printing_markdown,
    a_cause_is_printed_once_and_every_error_has_a_code,
    a_failed_run_names_its_thread_and_resumes_by_id,
    prefixes_and_last_name_threads,
    a_run_whose_agent_cannot_run_starts_no_thread,
    prune_archives_threads_that_never_took_a_step,
    colour_follows_the_flag_and_the_environment,
    typos_get_suggestions_and_expressions_a_caret,
);

fn start(env: &Env, prompt: &str) -> String {
    env.json(&[
        "thread",
        "start",
        &example("solve-issue.yaml"),
        "-p",
        prompt,
    ])["thread"]
        .as_str()
        .unwrap()
        .to_string()
}

fn solve(_env: &Env) -> String {
    mock_agent(&common::examples().join("solve-issue.mock.yaml"))
}

/// A command line that fails at once, as an agent.
fn failing(env: &Env) -> String {
    mock_agent(&env.file(
        "fail.yaml",
        "roles:\n  planner:\n    - exit: 3\n      stderr: \"planner broke\"\n",
    ))
}

/// Runs `uwf args…` with stdout a pipe whose reader is already gone.
fn into_closed_pipe(env: &Env, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    env.uwf_process()
        .args(args)
        .stdout(Stdio::from(writer))
        .output()
        .unwrap()
}

/// The store's archive entry of `id` (`history.jsonl`, or a row of
/// `uwf_history` on PostgreSQL), if it archived it.
fn archived(env: &Env, id: &str) -> Option<serde_json::Value> {
    env.history().into_iter().find(|h| h["thread"] == id)
}

/// The head the store holds for the active thread `id` (its head file, or
/// its row of `uwf_threads` on PostgreSQL), without the newline.
fn active_head(env: &Env, id: &str) -> Option<String> {
    env.heads().get(id).map(|h| h.trim_end().to_string())
}

fn has_code(stderr: &str) {
    assert!(stderr.contains("uwf::"), "no uwf:: code in:\n{stderr}");
}

// ---------------------------------------------------------------- broken pipes

fn a_reader_that_goes_away_ends_the_command_quietly(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let out = into_closed_pipe(&env, &["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let one = start(&env, "one");
    assert!(active_head(&env, &one).is_some(), "{:?}", env.heads());
    let out = into_closed_pipe(&env, &["thread", "list"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------- prompts

fn the_task_comes_from_stdin_or_a_file(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let out = env
        .uwf()
        .args(["thread", "start", &example("solve-issue.yaml"), "-p", "-"])
        .write_stdin("Fix the login loop\nwhen the session expired\n")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["thread"]
        .as_str()
        .unwrap()
        .to_string();
    let steps = env.json(&["thread", "steps", &id]);
    assert_eq!(
        steps["steps"][0]["prompt"],
        "Fix the login loop\nwhen the session expired"
    );

    let file = env.file("task.md", "Write the docs\n");
    let v = env.json(&[
        "thread",
        "start",
        &example("solve-issue.yaml"),
        "--prompt-file",
        file.to_str().unwrap(),
    ]);
    let steps = env.json(&["thread", "steps", v["thread"].as_str().unwrap()]);
    assert_eq!(steps["steps"][0]["prompt"], "Write the docs");

    // Both at once is a usage error; an empty task is refused. Neither
    // writes anything to the store.
    let before = env.snapshot();
    assert_eq!(env.heads().len(), 2, "{:?}", env.heads());
    let out = env.output(&[
        "thread",
        "start",
        "w",
        "-p",
        "x",
        "--prompt-file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let empty = env.file("empty.md", "\n");
    let err = env.fails(&[
        "thread",
        "start",
        &example("solve-issue.yaml"),
        "--prompt-file",
        empty.to_str().unwrap(),
    ]);
    insta::assert_snapshot!("empty_prompt_file", env.redact(&err));
    assert_eq!(env.snapshot(), before);
}

// ---------------------------------------------------------------- paths and formats

fn a_mistyped_path_is_no_such_file_not_a_workflow_name(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let before = env.state_snapshot();
    for (name, arg) in [
        ("yml", "examples/solve-issue.yml"),
        ("yaml", "solve-issue.yaml"),
        ("json", "flow.json"),
    ] {
        let err = env.fails(&["thread", "run", arg, "-p", "x"]);
        insta::assert_snapshot!(format!("no_such_workflow_file_{name}"), err);
        assert!(!err.contains("no workflow"), "{err}");
    }
    // A plain name is still looked up as a registered workflow.
    let err = env.fails(&["thread", "run", "solve-issue", "-p", "x"]);
    insta::assert_snapshot!("no_such_registered_workflow", err);
    // None of them started a thread or registered anything (the store's
    // built-in schema nodes may be written on first use).
    assert_eq!(env.state_snapshot(), before);
    assert!(env.heads().is_empty() && env.registry().is_empty());
}

fn thread_read_refuses_a_data_format_instead_of_printing_markdown(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = start(&env, "task");
    for format in ["json", "yaml"] {
        let err = env.fails(&["--format", format, "thread", "read", &id]);
        let err = err.replace(&id, "[THREAD]");
        insta::assert_snapshot!(format!("thread_read_as_{format}"), err);
    }
    assert!(env.text(&["thread", "read", &id]).starts_with("# Thread "));
}

fn a_cause_is_printed_once_and_every_error_has_a_code(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let err = env.fails(&["workflow", "validate", "nonexist.yaml"]);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    has_code(&err);
    // Errors of the lower layers too: a malformed thread id, a bad hash.
    for args in [
        &["thread", "show", "not-an-id!"][..],
        &["cas", "get", "xyz"],
        &["thread", "show", "@last"],
        &["thread", "step", "01JD0000000000000000000000"],
    ] {
        let err = env.fails(args);
        has_code(&err);
    }
}

// ---------------------------------------------------------------- failed runs

fn a_failed_run_names_its_thread_and_resumes_by_id(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let out = env.output(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "Fix it",
        "--agent",
        &failing(&env),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let list = env.json(&["thread", "list"]);
    let id = list[0]["thread"].as_str().unwrap().to_string();
    assert!(err.contains(&format!("thread {id}: agent")), "{err}");
    assert!(err.contains(&format!("uwf thread run {id}")), "{err}");
    assert!(err.contains("uwf::agent::failed"), "{err}");
    // No `finished` for a step that failed; its stderr once.
    assert!(!err.contains("finished"), "{err}");
    assert!(err.contains("step 1: planner failed after"), "{err}");
    assert_eq!(err.matches("planner broke").count(), 1, "{err}");
    // The thread stays active in the store at its start, not archived.
    let show = env.json(&["thread", "show", &id]);
    assert_eq!(active_head(&env, &id).as_deref(), show["head"].as_str());
    assert!(archived(&env, &id).is_none(), "{:?}", env.history());

    // Resumed by id, by a prefix of it, by @last.
    let v = env.json(&["thread", "run", &id, "--agent", &solve(&env)]);
    assert_eq!(v["done"], true);
    assert_eq!(v["thread"], id.as_str());
    assert_eq!(archived(&env, &id).unwrap()["reason"], "done");
    assert!(active_head(&env, &id).is_none());
    // A task is not given to an existing thread.
    let other = start(&env, "second");
    let err = env.fails(&["thread", "run", &other, "-p", "again"]);
    assert!(err.contains("uwf::thread::prompt_on_resume"), "{err}");
    let v = env.json(&["thread", "run", "@last", "--agent", &solve(&env)]);
    assert_eq!(v["thread"], other.as_str());
    assert_eq!(archived(&env, &other).unwrap()["reason"], "done");
    assert!(env.heads().is_empty(), "{:?}", env.heads());
}

// ---------------------------------------------------------------- ids

fn a_run_whose_agent_cannot_run_starts_no_thread(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let before = env.state_snapshot();
    // Retried as people do: each attempt fails before any thread exists.
    for _ in 0..2 {
        let out = env.output(&[
            "thread",
            "run",
            &example("solve-issue.yaml"),
            "-p",
            "Fix it",
            "--agent",
            "uwf-no-such-agent --flag",
        ]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("uwf::agent::spawn"), "{err}");
        assert!(err.contains("uwf-no-such-agent"), "{err}");
        assert!(err.contains("no such program in PATH"), "{err}");
        assert!(!err.contains("the thread is"), "{err}");
    }
    // No agent configured at all (the test root has no defaultAgent).
    let err = env.fails(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "Fix it",
    ]);
    insta::assert_snapshot!("no_agent_configured", env.redact(&err));
    assert!(!err.contains("the thread is"), "{err}");
    assert!(env.heads().is_empty(), "{:?}", env.heads());
    assert_eq!(env.state_snapshot(), before);
    // `thread start` still starts a thread to run later, agent or not.
    let id = env.json(&[
        "thread",
        "start",
        &example("solve-issue.yaml"),
        "-p",
        "Later",
    ])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(env.heads().contains_key(&id));
    // And a run with a working agent starts and finishes as always.
    let v = env.json(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "Fix it",
        "--agent",
        &solve(&env),
    ]);
    assert_eq!(v["done"], true, "{v:#}");
}

fn prefixes_and_last_name_threads(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let first = start(&env, "first");
    let second = start(&env, "second");
    // The names are resolved against the threads the store holds.
    assert_eq!(
        env.heads().into_keys().collect::<Vec<_>>(),
        [first.clone(), second.clone()]
    );
    assert_eq!(
        env.json(&["thread", "show", "@last"])["thread"],
        second.as_str()
    );
    // The shortest prefix that tells them apart, typed in lower case.
    let n = (1..=26).find(|&n| first[..n] != second[..n]).unwrap();
    let short = first[..n].to_lowercase();
    assert_eq!(
        env.json(&["thread", "show", &short])["thread"],
        first.as_str()
    );
    assert_eq!(
        env.json(&["thread", "steps", &second[..n]])["thread"],
        second.as_str()
    );
    let err = env.fails(&["thread", "show", &first[..n - 1]]);
    assert!(err.contains("uwf::thread::ambiguous"), "{err}");
    assert!(err.contains(&second), "{err}");
    let err = env.fails(&["thread", "show", "ZZZ"]);
    assert!(err.contains("uwf::thread::unknown"), "{err}");
    // The page and the graph take the same names as every other command.
    for name in ["@last", &second[..n]] {
        let html = env.text(&["thread", "view", name, "--html", "-"]);
        assert!(html.contains(&second), "{name}: {html}");
        let graph = env.json(&["workflow", "graph", "--thread", name, "--format", "json"]);
        assert!(graph.is_object(), "{name}: {graph}");
    }
    let err = env.fails(&["thread", "view", &first[..n - 1]]);
    assert!(err.contains("uwf::thread::ambiguous"), "{err}");
}

// ---------------------------------------------------------------- prune

fn prune_archives_threads_that_never_took_a_step(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let idle = start(&env, "never stepped");
    let idle_head = active_head(&env, &idle).unwrap();
    let stepped = start(&env, "stepped");
    env.json(&["thread", "step", &stepped, "--agent", &solve(&env)]);
    // Young threads are kept by default.
    assert_eq!(env.json(&["thread", "prune"]), serde_json::json!([]));
    let before = env.snapshot();
    let dry = env.json(&["thread", "prune", "--older-than", "0s", "--dry-run"]);
    assert_eq!(env.snapshot(), before, "a dry run changed the store");
    assert_eq!(dry.as_array().unwrap().len(), 1);
    assert_eq!(dry[0]["thread"], idle.as_str());
    assert_eq!(env.json(&["thread", "list"]).as_array().unwrap().len(), 2);
    let pruned = env.json(&["thread", "prune", "--older-than", "0s"]);
    assert_eq!(pruned[0]["thread"], idle.as_str());
    assert_eq!(pruned[0]["prompt"], "never stepped");
    let list = env.json(&["thread", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["thread"], stepped.as_str());
    // Archived, not lost: in the store's history, out of its active threads.
    assert_eq!(env.json(&["thread", "show", &idle])["done"], true);
    let entry = archived(&env, &idle).unwrap();
    assert_eq!(entry["reason"], "pruned", "{entry}");
    assert_eq!(entry["head"], idle_head.as_str(), "{entry}");
    assert!(active_head(&env, &idle).is_none());
    assert!(active_head(&env, &stepped).is_some());
    assert!(archived(&env, &stepped).is_none());
}

// ---------------------------------------------------------------- colour

fn colour_follows_the_flag_and_the_environment(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let esc = |out: &std::process::Output| out.stderr.contains(&0x1b);
    let bad = ["thread", "show", "ZZZ"];
    // NO_COLOR (set by Env) and not a terminal: none.
    assert!(!esc(&env.output(&bad)));
    let mut args = vec!["--color", "always"];
    args.extend(bad);
    assert!(esc(&env.output(&args)));
    let out = env
        .uwf()
        .env_remove("NO_COLOR")
        .env("CLICOLOR_FORCE", "1")
        .args(bad)
        .output()
        .unwrap();
    assert!(esc(&out));
    let out = env
        .uwf()
        .env_remove("NO_COLOR")
        .env("CLICOLOR_FORCE", "1")
        .args(["--color", "never"])
        .args(bad)
        .output()
        .unwrap();
    assert!(!esc(&out));
}

// ---------------------------------------------------------------- did you mean, carets

fn typos_get_suggestions_and_expressions_a_caret(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    // The suggestion comes from the store's registry.
    assert!(
        env.registry().contains_key("solve-issue"),
        "{:?}",
        env.registry()
    );
    let err = env.fails(&["thread", "run", "solve-isue", "-p", "x"]);
    insta::assert_snapshot!("did_you_mean_a_workflow", err);
    let err = env.fails(&["eval", "1 + + 2"]);
    insta::assert_snapshot!("expression_with_a_caret", err);
    // The caret sits under the second `+`.
    let line = err.lines().find(|l| l.trim_end().ends_with('^')).unwrap();
    let expr = err.lines().find(|l| l.contains("expression: 1")).unwrap();
    assert_eq!(line.trim_end().len() - 1, expr.rfind('+').unwrap(), "{err}");
    let bad = env.file(
        "typo.yaml",
        "name: t\nroles:\n  a:\n    systemPromt: s\n    outputSchema: { type: object }\ngraph:\n  $START: [{ role: a }]\n  a: [{ role: $END }]\n",
    );
    let err = env.fails(&["workflow", "validate", bad.to_str().unwrap()]);
    insta::assert_snapshot!("did_you_mean_a_field", env.redact(&err));
}
