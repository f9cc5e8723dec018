//! What happened and what runs (issue 13 §1, §2): why each step ran, how
//! long it took, running markers (live and stale), `thread watch` and
//! `thread log -f`.
//!
//! Every test runs on both stores (`per_backend!`). On PostgreSQL the
//! threads live in the database while the running markers, agent logs and
//! step timings stay in the local root (`Engine::with_run_dir`: they are
//! about processes of this machine), so the tests check both: the marker
//! file under `running/` and the thread's row in `uwf_threads` or
//! `uwf_history`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{Backend, Env, example, mock_agent};
use serde_json::Value;

per_backend!(
    every_step_says_why_it_ran_and_how_long_it_took,
    thread_read_shows_the_edge_prompt_each_step_was_given,
    a_running_step_shows_in_show_and_list_until_it_ends,
    a_marker_of_a_dead_process_is_stale,
    watch_and_log_follow_a_thread_to_its_end,
    watch_reports_every_step_even_when_several_land_between_looks,
    watch_stops_when_its_reader_goes_away,
);

/// solve-issue: planner, developer, reviewer (rejects), developer, reviewer.
const SOLVE: &str = r#"roles:
  planner:
    - output: { plan: "the plan", steps: ["one"] }
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

fn solve(env: &Env, delay: &str) -> String {
    mock_agent(&env.file(
        &format!("solve-{delay}.yaml"),
        &SOLVE.replace("{delay}", delay),
    ))
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

/// Where the running marker of `id` is kept on both stores: the local root.
fn marker_path(env: &Env, id: &str) -> std::path::PathBuf {
    env.root().join("running").join(format!("{id}.json"))
}

/// Asserts that the store holds `id` as an active thread (`threads/<id>`,
/// or a row of `uwf_threads`) at the head `thread show` names, and has
/// not archived it.
fn assert_active(env: &Env, id: &str) {
    let show = env.json(&["thread", "show", id]);
    let head = show["head"].as_str().unwrap();
    assert_eq!(
        env.heads().get(id).map(String::as_str),
        Some(format!("{head}\n").as_str()),
        "{:?}",
        env.heads()
    );
    assert!(
        !env.history().iter().any(|h| h["thread"] == id),
        "{:?}",
        env.history()
    );
}

/// Asserts that the store archived `id` (`history.jsonl`, or a row of
/// `uwf_history`) with `reason` and holds it no longer as active.
fn assert_archived(env: &Env, id: &str, reason: &str) {
    let history = env.history();
    let entry = history
        .iter()
        .find(|h| h["thread"] == id)
        .unwrap_or_else(|| panic!("{id} not archived: {history:?}"));
    assert_eq!(entry["reason"], reason, "{entry}");
    assert!(!env.heads().contains_key(id), "{:?}", env.heads());
}

/// On PostgreSQL, asserts that the local root holds only what is kept
/// per machine (markers, logs, timings), none of the store's own data: no
/// head files, history, registry or nodes.
fn assert_store_is_the_database(env: &Env) {
    if env.db.is_none() {
        return;
    }
    for name in [
        "threads",
        "history.jsonl",
        "registry.yaml",
        "cas",
        "config.yaml",
    ] {
        assert!(
            !env.root().join(name).exists(),
            "{name} in the root of a PostgreSQL store"
        );
    }
    assert!(env.tables().contains_key("uwf_nodes"), "{:?}", env.tables());
}

/// Polls `thread show` until `pred` holds (a wait, not a timing assert).
fn show_until(env: &Env, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let v = env.json(&["thread", "show", id]);
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < until, "gave up waiting; last: {v:#}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn every_step_says_why_it_ran_and_how_long_it_took(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = start(&env);
    // A failed first attempt, then the run.
    let fail = mock_agent(&env.file("fail.yaml", "roles:\n  planner:\n    - exit: 3\n"));
    env.fails(&["thread", "step", &id, "--agent", &fail]);
    assert_active(&env, &id);
    // Still pending: listed as the next step's, at the end of the page.
    let read = env.text(&["thread", "read", &id]);
    assert!(
        read.contains("## Failed attempts of the next step"),
        "{read}"
    );
    assert!(read.contains("planner attempt 1"), "{read}");
    // Inside the quota, the section too.
    for quota in [300, 600] {
        let read = env.text(&["thread", "read", &id, "--quota", &quota.to_string()]);
        assert!(read.chars().count() <= quota, "{quota}: {read}");
    }
    env.json(&["thread", "run", &id, "--agent", &solve(&env, "0ms")]);
    assert_archived(&env, &id, "done");
    assert_store_is_the_database(&env);
    // The timings are this machine's, beside the markers, on both stores.
    let timings = env.root().join("logs").join(format!("{id}.jsonl"));
    assert_eq!(
        std::fs::read_to_string(&timings).unwrap().lines().count(),
        5,
        "{}",
        timings.display()
    );

    let steps = env.json(&["thread", "steps", &id]);
    let steps = steps["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 6);
    let planner = &steps[1];
    assert_eq!(planner["why"]["from"], "$START");
    assert_eq!(planner["why"]["transition"], 1);
    assert_eq!(planner["failedAttempts"][0]["exitStatus"], 3);
    assert!(planner["durationMs"].is_u64(), "{planner:#}");
    let again = &steps[4];
    assert_eq!(again["role"], "developer");
    assert_eq!(again["why"]["from"], "reviewer");
    assert_eq!(again["why"]["condition"], "notApproved");
    assert_eq!(again["why"]["value"], true);
    for s in &steps[1..] {
        assert!(s["why"]["text"].is_string(), "{s:#}");
        assert!(s["durationMs"].is_u64(), "{s:#}");
    }

    let read = env.text(&["thread", "read", &id]);
    assert!(
        read.contains(
            "**Why:** reviewer → developer: transition #1, condition `notApproved` = true"
        ),
        "{read}"
    );
    assert!(read.contains(" · took "), "{read}");

    let show = env.json(&["thread", "show", &id]);
    assert_eq!(show["state"], "done");
    assert_eq!(show["name"], "solve-issue");
    assert_eq!(show["lastStep"]["role"], "reviewer");
    assert_eq!(
        show["lastStep"]["why"]["text"],
        "developer → reviewer: transition #1, unconditional"
    );
}

fn thread_read_shows_the_edge_prompt_each_step_was_given(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let done = env.json(&[
        "thread",
        "run",
        &example("develop.yaml"),
        "-p",
        "Add a flag",
        "--agent",
        &mock_agent(&common::examples().join("develop.mock.yaml")),
    ]);
    let id = done["thread"].as_str().unwrap();
    assert_archived(&env, id, "done");
    assert_store_is_the_database(&env);
    let steps = env.json(&["thread", "steps", id]);
    let prompted: Vec<&Value> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["why"]["prompt"].is_string())
        .collect();
    assert!(!prompted.is_empty(), "{steps:#}");
    let read = env.text(&["thread", "read", id, "--quota", "100000"]);
    let first = prompted[0]["why"]["prompt"].as_str().unwrap();
    let first_line = first.lines().next().unwrap();
    assert!(
        read.contains(&format!("> **Edge prompt:** {first_line}")),
        "{read}"
    );
}

fn a_running_step_shows_in_show_and_list_until_it_ends(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = start(&env);
    // Writes to stderr at once, then works for a minute.
    let script = env.file("slow.sh", "echo \"planner at work\" >&2\nexec sleep 60\n");
    let slow = format!("sh {}", script.display());
    let child = env
        .uwf_process()
        .args(["thread", "step", &id, "--agent", &slow])
        .spawn()
        .unwrap();
    let show = show_until(&env, &id, |v| v["state"] == "running");
    let text = show["running"]["text"].as_str().unwrap();
    assert!(text.starts_with("running planner for "), "{text}");
    assert!(text.contains(" s on "), "{text}");
    assert_eq!(show["running"]["pid"], child.id());
    // The marker is a file of the local root on both stores; the thread
    // is the store's (on PostgreSQL a row of `uwf_threads`).
    let marker: Value =
        serde_json::from_slice(&std::fs::read(marker_path(&env, &id)).unwrap()).unwrap();
    assert_eq!(marker["pid"], child.id());
    assert_eq!(marker["thread"], id.as_str());
    assert_eq!(marker["role"], "planner");
    assert_active(&env, &id);
    assert_store_is_the_database(&env);
    let list = env.json(&["thread", "list"]);
    assert_eq!(list[0]["state"], "running");
    assert_eq!(list[0]["task"], "Fix the login bug");
    assert_eq!(list[0]["name"], "solve-issue");
    // The page says the role runs now, not that `thread step` would run it.
    let page = env.text(&["thread", "view", &id, "--html", "-"]);
    assert!(
        page.contains(r#"<span class="badge-next">running</span> <b>planner</b>"#),
        "{page}"
    );
    assert!(!page.contains("runs it."), "{page}");
    if let Some(db) = &env.db {
        from_another_root_on_the_same_database(&env, db, &id);
    }
    // A running thread is not pruned, however old.
    assert_eq!(
        env.json(&["thread", "prune", "--older-than", "0s"]),
        serde_json::json!([])
    );
    // The log has the agent's stderr while it runs.
    let until = Instant::now() + Duration::from_secs(60);
    while !env
        .text(&["thread", "log", &id])
        .contains("planner at work")
    {
        assert!(Instant::now() < until, "no stderr in the log");
        std::thread::sleep(Duration::from_millis(50));
    }
    env.json(&["thread", "kill", &id]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    let show = env.json(&["thread", "show", &id]);
    assert!(show.get("running").is_none(), "{show:#}");
    assert_eq!(show["state"], "killed");
    assert!(!marker_path(&env, &id).exists());
    if env.db.is_some() {
        let tables = env.tables();
        assert!(
            tables.get("uwf_running").is_none_or(Vec::is_empty),
            "{tables:?}"
        );
    }
    assert_archived(&env, &id, "killed");
}

/// On PostgreSQL the marker is in the database too: `uwf` on another root
/// (another machine) sees the running step, and where its log is.
fn from_another_root_on_the_same_database(env: &Env, db: &uwf_pg_testing::TestDb, id: &str) {
    let elsewhere = tempfile::tempdir().unwrap();
    let there = |args: &[&str]| {
        let out = env
            .uwf()
            .env("UNCAGED_WORKFLOW_STORAGE_ROOT", elsewhere.path())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        out
    };
    let json = |args: &[&str]| -> Value { serde_json::from_slice(&there(args).stdout).unwrap() };
    // The marker reaches the database once the agent has run a second.
    let until = Instant::now() + Duration::from_secs(60);
    let show = loop {
        let show = json(&["thread", "show", id]);
        if show["state"] == "running" {
            break show;
        }
        assert!(
            Instant::now() < until,
            "never running from elsewhere: {show:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        show["running"]["text"]
            .as_str()
            .unwrap()
            .starts_with("running planner for "),
        "{show:#}"
    );
    let page = String::from_utf8(there(&["thread", "view", id, "--html", "-"]).stdout).unwrap();
    assert!(page.contains(r#"<span class="badge-next">running</span>"#));
    // As another machine sees it: the marker names a host that is not this one.
    let mut client = db.client();
    let row = client
        .query_one("SELECT marker FROM uwf_running WHERE thread = $1", &[&id])
        .unwrap();
    let original: String = row.get(0);
    let mut marker: Value = serde_json::from_str(&original).unwrap();
    marker["host"] = "build-9".into();
    client
        .execute(
            "UPDATE uwf_running SET marker = $2 WHERE thread = $1",
            &[&id, &marker.to_string()],
        )
        .unwrap();
    let show = json(&["thread", "show", id]);
    assert_eq!(show["running"]["host"], "build-9", "{show:#}");
    let log = there(&["thread", "log", id]);
    let said = String::from_utf8_lossy(&log.stderr);
    assert!(
        said.contains("planner runs on build-9; its stderr is logged there"),
        "{said}"
    );
    client
        .execute(
            "UPDATE uwf_running SET marker = $2 WHERE thread = $1",
            &[&id, &original],
        )
        .unwrap();
}

fn a_marker_of_a_dead_process_is_stale(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = start(&env);
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    // The markers are local on both stores (on PostgreSQL too: the root
    // may not exist yet, as the database holds the thread).
    let dir = env.root().join("running");
    std::fs::create_dir_all(&dir).unwrap();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let marker = serde_json::json!({
        "thread": id, "role": "planner", "agent": "x", "pid": pid, "host": hostname,
        "startedAt": 1, "head": "0000000000000", "log": "/nonexistent"
    });
    std::fs::write(marker_path(&env, &id), marker.to_string()).unwrap();
    let before = env.state_snapshot();
    let show = env.json(&["thread", "show", &id]);
    assert_eq!(show["state"], "idle", "{show:#}");
    assert!(show.get("running").is_none(), "{show:#}");
    assert!(
        show["stale"]["text"].as_str().unwrap().contains("is gone"),
        "{show:#}"
    );
    // Reading a stale marker changes nothing of the store.
    assert_eq!(env.state_snapshot(), before);
    assert_active(&env, &id);
    assert_store_is_the_database(&env);
}

fn watch_and_log_follow_a_thread_to_its_end(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = start(&env);
    let watch = env
        .uwf_process()
        .args(["thread", "watch", &id])
        .spawn()
        .unwrap();
    let log = env
        .uwf_process()
        .args(["thread", "log", "-f", &id])
        .spawn()
        .unwrap();
    let run = env.json(&["thread", "run", &id, "--agent", &solve(&env, "1s")]);
    assert_eq!(run["done"], true);
    let watched = watch.wait_with_output().unwrap();
    assert!(watched.status.success(), "{watched:?}");
    let text = String::from_utf8(watched.stdout).unwrap();
    for part in [
        "planner started (",
        "step 1 planner landed",
        "step 4 developer landed",
        "condition `notApproved` = true",
        &format!("thread {id} done"),
    ] {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }
    let logged = log.wait_with_output().unwrap();
    assert!(logged.status.success(), "{logged:?}");
    let text = String::from_utf8(logged.stdout).unwrap();
    assert!(text.contains("planner at work"), "{text}");
    assert!(text.contains("── reviewer · "), "{text}");
    assert_archived(&env, &id, "done");
    assert_store_is_the_database(&env);
}

fn watch_reports_every_step_even_when_several_land_between_looks(backend: Backend) {
    use std::io::{BufRead, BufReader};
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = start(&env);
    let mut watch = env
        .uwf_process()
        .args(["thread", "watch", &id])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    // Its first look (the thread, no step yet) is printed before the run
    // starts; then agents that answer at once land steps faster than watch
    // looks, and each still gets its line, in order.
    let first = lines.next().unwrap().unwrap();
    assert!(
        first.contains(&format!("thread {id} · solve-issue")),
        "{first}"
    );
    let run = env.json(&["thread", "run", &id, "--agent", &solve(&env, "0s")]);
    assert_eq!(run["done"], true);
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(watch.wait().unwrap().success());
    let landed: Vec<&String> = rest.iter().filter(|l| l.contains(" landed (")).collect();
    let roles = ["planner", "developer", "reviewer", "developer", "reviewer"];
    assert_eq!(landed.len(), roles.len(), "{rest:#?}");
    for (n, (text, role)) in landed.iter().zip(roles).enumerate() {
        assert!(
            text.contains(&format!("step {} {role} landed", n + 1)),
            "{text}\n{rest:#?}"
        );
    }
    assert!(
        rest.last().unwrap().ends_with(&format!("thread {id} done")),
        "{rest:#?}"
    );
}

fn watch_stops_when_its_reader_goes_away(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = start(&env);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    // The thread never moves: only a reader that went away ends the watch.
    let out = env
        .uwf_process()
        .args(["thread", "watch", &id])
        .stdout(std::process::Stdio::from(writer))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_active(&env, &id);
}
