//! `uwf thread run --detach` and `uwf worker` end to end: real `uwf`
//! processes over one store, uwf-mock as the agent, workers killed with
//! SIGKILL and drained with SIGTERM, threads killed while a worker runs
//! them. No timing asserts: every wait is a generous bound. Every test runs
//! on both stores (`per_backend!`): the run queue is the files under `runs/`
//! on the filesystem and the rows of `uwf_runs` on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Backend, Env, example, mock_bin};
use serde_json::Value;

per_backend!(
    twenty_detached_threads_finish_on_two_workers_with_every_step_applied_once,
    a_worker_killed_mid_step_is_taken_over_after_its_lease_and_its_agent_is_stopped,
    a_paused_worker_that_wakes_after_its_lease_expired_lets_go_and_its_agent_is_stopped,
    sigterm_drains_the_thread_back_to_the_queue_and_another_worker_finishes_it,
    thread_kill_stops_the_agent_a_worker_runs,
    a_failed_run_is_recorded_and_can_be_queued_again,
    a_failed_run_and_the_worker_log_hold_no_secret,
    a_worker_claims_only_the_workflows_it_is_given,
    detach_refuses_a_thread_already_queued_or_finished,
    worker_rejects_bad_options,
);

/// A generous bound for anything to happen.
const BOUND: Duration = Duration::from_secs(120);

/// A store on `backend` with solve-issue registered; `None` when
/// PostgreSQL tests are skipped.
fn registered(backend: Backend) -> Option<Env> {
    let env = Env::on(backend)?;
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    Some(env)
}

fn scenario(env: &Env, name: &str, delay: &str) -> PathBuf {
    env.file(name, &common::solve_scenario(delay))
}

/// An agent that runs uwf-mock with every answer taking `delay`.
fn agent(env: &Env, delay: &str) -> String {
    let s = scenario(
        env,
        &format!("scenario-{}.yaml", delay.replace('.', "_")),
        delay,
    );
    format!("'{}' '{}'", mock_bin().display(), s.display())
}

/// An agent whose first run (of any thread) is slow (60 s) and writes its
/// pid to `first.pid`; every later run answers at once.
fn slow_first_agent(env: &Env) -> String {
    let slow = scenario(env, "slow.yaml", "60s");
    let fast = scenario(env, "fast.yaml", "0ms");
    let pid = env.dir.path().join("first.pid");
    let (mock, slow, fast, pid) = (
        mock_bin().display().to_string(),
        slow.display().to_string(),
        fast.display().to_string(),
        pid.display().to_string(),
    );
    let script = format!(
        r#"if mkdir "{pid}.lock" 2>/dev/null; then echo $$ > "{pid}"; exec "{mock}" "{slow}" "$@"; else exec "{mock}" "{fast}" "$@"; fi"#
    );
    assert!(!script.contains('\''));
    format!("sh -c '{script}' agent")
}

/// A running `uwf worker` with its stderr in a file.
struct WorkerProc {
    child: Child,
    log: PathBuf,
}

impl WorkerProc {
    fn start(env: &Env, name: &str, extra: &[&str]) -> WorkerProc {
        let log = env.dir.path().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = env
            .uwf_process()
            .args(["worker", "--lease", "2", "--poll-ms", "100"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap();
        WorkerProc { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// SIGTERM, then waits for the exit; returns its status code.
    fn drain(mut self) -> (Option<i32>, String) {
        self.signal("-TERM");
        let status = wait_exit(&mut self.child);
        (status, self.log())
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_exit(child: &mut Child) -> Option<i32> {
    let until = Instant::now() + BOUND;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        assert!(Instant::now() < until, "the worker did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_for(what: &str, ok: impl FnMut() -> bool) {
    common::wait_until(what, BOUND, ok);
}

fn show(env: &Env, id: &str) -> Value {
    env.json(&["thread", "show", id])
}

fn done(env: &Env, id: &str) -> bool {
    show(env, id)["done"] == true
}

/// Whether process `pid` still runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let after = &s[s.rfind(')').unwrap() + 1..];
            after.split_whitespace().next() != Some("Z")
        })
        .unwrap_or(false)
}

fn read_pid(path: &Path) -> u32 {
    let mut pid = None;
    wait_for("the slow agent to start", || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap()
}

/// The pid of the slow agent `worker` runs for thread `id`, once the
/// worker has also written its running marker: the agent's shell writes
/// its pid file right after the spawn, the worker its marker only when
/// the spawn returns, and a test that stops or kills the worker before
/// that tests a worker that never said its agent runs (on a loaded
/// machine the gap is long enough to hit).
fn running_agent(env: &Env, id: &str, worker: &WorkerProc) -> u32 {
    let agent_pid = read_pid(&env.dir.path().join("first.pid"));
    wait_for("the worker's running marker", || {
        show(env, id)["running"]["pid"] == worker.child.id()
    });
    agent_pid
}

/// The threads in the worker's run queue, sorted, as the store holds them:
/// the `runs/<thread>.json` files on the filesystem, the rows of `uwf_runs`
/// on PostgreSQL. Read straight from the store, not through `uwf`.
fn queued_runs(env: &Env) -> Vec<String> {
    if let Some(db) = &env.db {
        return db
            .client()
            .query("SELECT thread::text FROM uwf_runs ORDER BY thread", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
    }
    let mut out: Vec<String> = std::fs::read_dir(env.root().join("runs"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_suffix(".json")
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn queue_is_empty(env: &Env) -> bool {
    queued_runs(env).is_empty()
}

// ------------------------------------------------------------------ tests

fn twenty_detached_threads_finish_on_two_workers_with_every_step_applied_once(backend: Backend) {
    let Some(env) = registered(backend) else {
        return;
    };
    let agent = agent(&env, "0ms");
    let ids: Vec<String> = (0..20)
        .map(|i| common::detach(&env, &agent, &format!("task {i}")))
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(
        queued_runs(&env),
        sorted,
        "one queued run per detached thread"
    );
    if env.db.is_some() {
        // The queue is the database's alone: nothing of it in the root.
        assert!(!env.root().join("runs").exists());
    }
    let listed = env.json(&["thread", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 20);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["run"]["state"] == "queued" && r["state"] == "queued"),
        "{listed}"
    );

    let a = WorkerProc::start(&env, "a", &["--concurrency", "2"]);
    let b = WorkerProc::start(&env, "b", &["--concurrency", "2", "--log-format", "json"]);
    wait_for("every thread to finish", || {
        queue_is_empty(&env) && env.heads().is_empty()
    });
    let (code_a, log_a) = a.drain();
    let (code_b, log_b) = b.drain();
    assert_eq!((code_a, code_b), (Some(0), Some(0)), "{log_a}\n{log_b}");

    for id in &ids {
        assert!(done(&env, id), "{id} is not done");
        assert_eq!(env.roles(id), common::SOLVED_ONCE, "thread {id}");
    }
    // One `done` event per thread across both workers; every thread was
    // claimed at least once (more only if a lease was lost under load).
    let mut done_events = 0;
    for line in log_b.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["time"].is_string() && v["worker"].is_string(), "{line}");
        if v["event"] == "done" {
            done_events += 1;
            assert!(ids.iter().any(|id| v["thread"] == id.as_str()), "{line}");
        }
        if v["event"] == "landed" {
            assert!(v["role"].is_string() && v["detail"].is_string(), "{line}");
        }
        if v["event"] == "finished" {
            assert!(v["role"].is_string() && v["durationMs"].is_u64(), "{line}");
        }
    }
    done_events += log_a
        .lines()
        .filter(|l| l.contains(" done thread="))
        .count();
    assert_eq!(done_events, 20, "{log_a}\n{log_b}");
    let claims =
        log_a.matches(" claimed thread=").count() + log_b.matches("\"event\":\"claimed\"").count();
    assert!(claims >= 20, "{log_a}\n{log_b}");
}

fn a_worker_killed_mid_step_is_taken_over_after_its_lease_and_its_agent_is_stopped(
    backend: Backend,
) {
    let Some(env) = registered(backend) else {
        return;
    };
    let id = common::detach(&env, &slow_first_agent(&env), "crash me");
    let first = WorkerProc::start(&env, "first", &[]);
    let agent_pid = running_agent(&env, &id, &first);
    // The claim is visible while the agent runs.
    let shown = show(&env, &id);
    assert_eq!(shown["run"]["state"], "claimed", "{shown}");
    let worker = shown["run"]["worker"].as_str().unwrap().to_string();
    assert!(
        worker.contains(&format!("-{}-", first.child.id())),
        "{worker}"
    );
    let row = env.json(&["thread", "list"])[0].clone();
    assert_eq!(row["worker"], worker.as_str(), "{row}");

    first.signal("-KILL");
    let second = WorkerProc::start(&env, "second", &[]);
    wait_for("the thread to finish on the second worker", || {
        done(&env, &id)
    });
    assert!(!running(agent_pid), "the first worker's agent still runs");
    let (code, log) = second.drain();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("stopped agent process"), "{log}");
    assert!(log.contains("claim 2 of the run"), "{log}");
    assert_eq!(env.roles(&id), common::SOLVED_ONCE);
    assert!(queue_is_empty(&env));
}

fn a_paused_worker_that_wakes_after_its_lease_expired_lets_go_and_its_agent_is_stopped(
    backend: Backend,
) {
    let Some(env) = registered(backend) else {
        return;
    };
    let id = common::detach(&env, &slow_first_agent(&env), "pause me");
    let first = WorkerProc::start(&env, "first", &[]);
    let agent_pid = running_agent(&env, &id, &first);
    first.signal("-STOP");
    wait_for("the lease to run out", || {
        show(&env, &id)["run"]["state"] == "lease-expired"
    });
    // The second worker claims the thread but sees the first one's agent
    // still running on this host: it hands the run back instead of running
    // a second agent for the same head.
    let second = WorkerProc::start(&env, "second", &[]);
    wait_for("the second worker to defer", || {
        second
            .log()
            .contains("another process runs an agent of this thread")
    });
    assert!(running(agent_pid));
    assert_eq!(env.roles(&id), Vec::<String>::new());
    // The first worker wakes: its renewal is refused, it stops its agent
    // and lets go; then either worker claims the thread again and runs it
    // to its end.
    first.signal("-CONT");
    wait_for("the thread to finish", || done(&env, &id));
    assert!(!running(agent_pid));
    let (code, log) = first.drain();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("lease-lost"), "{log}");
    let (code, log) = second.drain();
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(env.roles(&id), common::SOLVED_ONCE);
}

fn sigterm_drains_the_thread_back_to_the_queue_and_another_worker_finishes_it(backend: Backend) {
    let Some(env) = registered(backend) else {
        return;
    };
    let id = common::detach(&env, &slow_first_agent(&env), "drain me");
    let head = show(&env, &id)["head"].clone();
    let first = WorkerProc::start(&env, "first", &["--grace", "1"]);
    let agent_pid = read_pid(&env.dir.path().join("first.pid"));
    let (code, log) = first.drain();
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("draining") && log.contains("handed-back"),
        "{log}"
    );
    assert!(!running(agent_pid), "the agent outlived the drain");
    let shown = show(&env, &id);
    assert_eq!(shown["head"], head, "a step landed: {shown}");
    assert_eq!(shown["run"]["state"], "queued", "{shown}");
    assert_eq!(shown["run"]["claims"], 1, "{shown}");
    assert_eq!(
        queued_runs(&env),
        std::slice::from_ref(&id),
        "the run went back to the queue"
    );

    let second = WorkerProc::start(&env, "second", &[]);
    wait_for("the thread to finish", || done(&env, &id));
    let (code, log) = second.drain();
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(env.roles(&id), common::SOLVED_ONCE);
}

fn thread_kill_stops_the_agent_a_worker_runs(backend: Backend) {
    let Some(env) = registered(backend) else {
        return;
    };
    let id = common::detach(&env, &slow_first_agent(&env), "kill me");
    let worker = WorkerProc::start(&env, "w", &[]);
    let agent_pid = read_pid(&env.dir.path().join("first.pid"));
    env.json(&["thread", "kill", &id]);
    wait_for("the agent to stop", || !running(agent_pid));
    wait_for("the worker to end the run", || {
        worker.log().contains(" killed thread=")
    });
    let shown = show(&env, &id);
    assert_eq!(shown["state"], "killed", "{shown}");
    assert!(shown.get("run").is_none(), "{shown}");
    assert!(env.roles(&id).is_empty());
    assert!(queue_is_empty(&env), "{:?}", queued_runs(&env));
    // The worker goes on with other work.
    let next = common::detach(&env, &agent(&env, "0ms"), "after the kill");
    wait_for("the next thread to finish", || done(&env, &next));
    let (code, log) = worker.drain();
    assert_eq!(code, Some(0), "{log}");
}

fn a_failed_run_is_recorded_and_can_be_queued_again(backend: Backend) {
    let Some(env) = registered(backend) else {
        return;
    };
    let id = common::detach(&env, "sh -c 'echo broken >&2; exit 7' agent", "fail me");
    let worker = WorkerProc::start(&env, "w", &[]);
    wait_for("the run to fail", || {
        show(&env, &id)["run"]["state"] == "failed"
    });
    let shown = show(&env, &id);
    let error = shown["run"]["error"].as_str().unwrap();
    assert!(error.contains("exited with status 7"), "{shown}");
    let row = env.json(&["thread", "list"])[0].clone();
    assert_eq!(row["run"]["state"], "failed", "{row}");
    assert_eq!(row["state"], "failed", "{row}");
    let (code, log) = worker.drain();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("run-failed"), "{log}");
    assert_eq!(
        queued_runs(&env),
        std::slice::from_ref(&id),
        "the failed run is kept"
    );

    // Queued again (continuing the thread, with a working agent).
    let v = env.json(&[
        "thread",
        "run",
        "--thread",
        &id,
        "--agent",
        &agent(&env, "0ms"),
        "--detach",
    ]);
    assert_eq!(v["run"]["state"], "queued", "{v}");
    let worker = WorkerProc::start(&env, "w2", &[]);
    wait_for("the thread to finish", || done(&env, &id));
    drop(worker);
    assert_eq!(env.roles(&id), common::SOLVED_ONCE);
}

/// Issue 25: what a worker records and logs of a run whose agent prints
/// its secrets (a key and the store's password, from `.env` or the
/// environment) holds none of them, nor does anything else the store or
/// the root keeps.
fn a_failed_run_and_the_worker_log_hold_no_secret(backend: Backend) {
    let Some(env) = registered(backend) else {
        return;
    };
    let key = "sk-ant-api03-worker-7f3e9c1d";
    let mut dotenv = format!("ANTHROPIC_API_KEY={key}\n");
    let password = match backend {
        Backend::Fs => {
            // A filesystem store needs none; `.env` may hold one anyway.
            dotenv.push_str("UWF_STORE_PASSWORD=fs-store-password-7734\n");
            "fs-store-password-7734"
        }
        Backend::Pg => uwf_pg_testing::PASSWORD,
    };
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(env.root().join(".env"), dotenv).unwrap();
    let id = common::detach(
        &env,
        r#"sh -c 'echo "401 for key $ANTHROPIC_API_KEY (store $UWF_STORE_PASSWORD)" >&2; echo "$ANTHROPIC_API_KEY"' agent"#,
        "leak",
    );
    let worker = WorkerProc::start(&env, "w", &[]);
    wait_for("the run to fail", || {
        show(&env, &id)["run"]["state"] == "failed"
    });
    let (code, log) = worker.drain();
    assert_eq!(code, Some(0), "{log}");
    let marker = "‹redacted:ANTHROPIC_API_KEY›";
    let shown = env.text(&["thread", "show", &id]);
    let thread_log = env.text(&["thread", "log", &id]);
    for (what, text) in [
        ("the run", &shown),
        ("the worker's log", &log),
        ("the thread's log", &thread_log),
    ] {
        for secret in [key, password] {
            assert!(!text.contains(secret), "{what} holds {secret:?}:\n{text}");
        }
        assert!(text.contains(marker), "{what}:\n{text}");
    }
    assert!(
        thread_log.contains("‹redacted:UWF_STORE_PASSWORD›"),
        "{thread_log}"
    );
    for secret in [key, password] {
        assert_eq!(
            env.places_holding(secret),
            Vec::<String>::new(),
            "{secret:?}"
        );
    }
}

fn a_worker_claims_only_the_workflows_it_is_given(backend: Backend) {
    let Some(env) = registered(backend) else {
        return;
    };
    let solve = common::detach(&env, &agent(&env, "0ms"), "solve it");
    let draft = env.json(&[
        "thread",
        "run",
        &example("draft-loop.yaml"),
        "-p",
        "draft it",
        "--agent",
        &format!(
            "'{}' '{}'",
            mock_bin().display(),
            example("draft-loop.mock.yaml")
        ),
        "--detach",
    ])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    let worker = WorkerProc::start(&env, "w", &["--workflow", "solve-issue"]);
    wait_for("the solve-issue thread to finish", || done(&env, &solve));
    let (code, log) = worker.drain();
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains(&draft), "{log}");
    assert_eq!(show(&env, &draft)["run"]["state"], "queued");

    let worker = WorkerProc::start(&env, "w2", &["--workflow", "draft-loop"]);
    wait_for("the draft-loop thread to finish", || done(&env, &draft));
    drop(worker);
}

fn detach_refuses_a_thread_already_queued_or_finished(backend: Backend) {
    let Some(env) = registered(backend) else {
        return;
    };
    let agent = agent(&env, "0ms");
    let id = common::detach(&env, &agent, "once");
    let before = env.snapshot();
    let err = env.fails(&["thread", "run", "--thread", &id, "--detach"]);
    assert!(err.contains("already queued"), "{err}");
    assert_eq!(env.snapshot(), before);
    env.json(&["thread", "kill", &id]);
    let err = env.fails(&["thread", "run", "--thread", &id, "--detach"]);
    assert!(err.contains("finished"), "{err}");
}

fn worker_rejects_bad_options(backend: Backend) {
    let Some(env) = registered(backend) else {
        return;
    };
    for args in [
        &["worker", "--concurrency", "0"][..],
        &["worker", "--lease", "0"],
        &["worker", "--log-format", "xml"],
    ] {
        let out = env.output(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
    }
}
