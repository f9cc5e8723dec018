//! Fault trials of issue 12, §3: `uwf worker` processes killed with
//! SIGKILL mid-step, again and again, while they step queued threads; then
//! every thread has reached `$END`, `uwf cas verify` is clean and every
//! chain has each step exactly once. One test body per trial, run on each
//! backend (a filesystem root, a PostgreSQL database of the real test
//! server started by `uwf-pg-testing`). No timing asserts: every wait is a
//! generous bound that only catches a hang.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Env, example, mock_bin};
use serde_json::Value;

/// A generous bound for the whole trial to finish (catches a hang only).
const BOUND: Duration = Duration::from_secs(240);

/// Where a trial's store lives.
enum Backend {
    /// The root is the store.
    Files,
    /// A fresh database of the test server, named by the root's
    /// `config.yaml` (`store:`), its password in the root's `.env`.
    Postgres,
}

/// A root on `backend`, with solve-issue registered; `None` when the
/// PostgreSQL server binaries are missing (skipped loudly).
fn store(backend: Backend) -> Option<(Env, Option<uwf_pg_testing::TestDb>)> {
    let env = Env::new();
    let db = match backend {
        Backend::Files => None,
        Backend::Postgres => {
            let db = uwf_pg_testing::fault_server()?.create_database();
            std::fs::create_dir_all(env.root()).unwrap();
            std::fs::write(
                env.root().join("config.yaml"),
                format!("store: \"{}\"\n", db.url_without_password),
            )
            .unwrap();
            std::fs::write(
                env.root().join(".env"),
                format!("UWF_STORE_PASSWORD={}\n", uwf_pg_testing::PASSWORD),
            )
            .unwrap();
            env.json(&["store", "init"]);
            Some(db)
        }
    };
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    Some((env, db))
}

/// A running `uwf worker` with its stderr in a file.
struct WorkerProc {
    child: Child,
    log: PathBuf,
}

impl WorkerProc {
    /// Worker number `n`; `store` (a URL, for `UWF_STORE`) overrides the
    /// root's store for it and its agents.
    fn start(env: &Env, n: usize, store: Option<&str>) -> WorkerProc {
        let log = env.dir.path().join(format!("worker-{n}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = env.uwf_process();
        if let Some(url) = store {
            cmd.env("UWF_STORE", url);
        }
        let child = cmd
            .args(["worker", "--lease", "2", "--poll-ms", "100"])
            .args(["--concurrency", "2", "--log-format", "json"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap();
        WorkerProc { child, log }
    }

    /// Whether its log holds `text`.
    fn says(&self, text: &str) -> bool {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .contains(text)
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Whether one of its agents runs now, as its log says (an agent
    /// `started` and not yet `finished` or failed).
    fn mid_step(&self) -> bool {
        let events = self.events();
        let count = |name: &str| events.iter().filter(|e| e["event"] == name).count();
        count("started") > count("finished") + count("attempt-failed")
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then waits for the exit; returns its status code.
    fn drain(mut self) -> Option<i32> {
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -TERM failed");
        let until = Instant::now() + BOUND;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < until, "the worker did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small xorshift generator: which worker to kill, how long to wait.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

fn active(env: &Env) -> usize {
    env.json(&["thread", "list"]).as_array().unwrap().len()
}

/// Checks the chain of `id`: done, the roles in order, every step once.
fn check_chain(env: &Env, id: &str) {
    let shown = env.json(&["thread", "show", id]);
    assert_eq!(shown["done"], true, "{id} is not done: {shown}");
    let v = env.json(&["thread", "steps", id]);
    let steps = v["steps"].as_array().unwrap();
    assert!(steps[0]["prompt"].is_string(), "{v}");
    let roles: Vec<&str> = steps[1..]
        .iter()
        .map(|s| s["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, common::SOLVED_ONCE, "thread {id}: {v}");
    let hashes: BTreeSet<&str> = steps.iter().map(|s| s["hash"].as_str().unwrap()).collect();
    assert_eq!(hashes.len(), steps.len(), "a node twice in {id}: {v}");
}

/// A trial under way: a root, the agent, the queued threads, the workers.
struct Trial {
    env: Env,
    db: Option<uwf_pg_testing::TestDb>,
    agent: String,
    ids: Vec<String>,
    workers: Vec<WorkerProc>,
    /// Logs of the workers already gone.
    gone: Vec<PathBuf>,
    started: usize,
    /// The store URL the workers use instead of the root's (a proxy).
    worker_store: Option<String>,
    rng: Rng,
    until: Instant,
}

impl Trial {
    /// A store on `backend` with `threads` solve-issue threads queued, each
    /// step of their agent taking 600 ms; `None` when skipped.
    fn new(name: &str, backend: Backend, threads: usize) -> Option<Trial> {
        let (env, db) = store(backend)?;
        let scenario = env.file("slow.yaml", &common::solve_scenario("600ms"));
        let agent = format!("'{}' '{}'", mock_bin().display(), scenario.display());
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        eprintln!("{name}: seed {seed}");
        let mut t = Trial {
            env,
            db,
            agent,
            ids: Vec::new(),
            workers: Vec::new(),
            gone: Vec::new(),
            started: 0,
            worker_store: None,
            rng: Rng(seed),
            until: Instant::now() + BOUND,
        };
        t.queue(threads);
        Some(t)
    }

    fn queue(&mut self, n: usize) {
        for _ in 0..n {
            let i = self.ids.len();
            let id = common::detach(&self.env, &self.agent, &format!("task {i}"));
            self.ids.push(id);
        }
    }

    fn start_worker(&mut self) {
        self.started += 1;
        let w = WorkerProc::start(&self.env, self.started, self.worker_store.as_deref());
        self.workers.push(w);
    }

    /// Sleeps 0.5–1 s: the faults come at random moments of the run (the
    /// behaviour under test), not when something has happened.
    fn pause(&mut self) {
        assert!(Instant::now() < self.until, "the trial ran past its bound");
        std::thread::sleep(Duration::from_millis(500 + self.rng.next(500)));
    }

    /// Lets the workers finish the queue, drains them and checks the
    /// outcome: every thread at `$END` with each step once, `cas verify`
    /// clean, no failed run. Returns the number of takeovers (claims of a
    /// run after its first).
    fn finish(mut self, name: &str) -> usize {
        while self.workers.len() < 2 {
            self.start_worker();
        }
        while active(&self.env) > 0 {
            assert!(
                Instant::now() < self.until,
                "threads still active at the bound"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        let workers = std::mem::take(&mut self.workers);
        let mut logs = std::mem::take(&mut self.gone);
        for w in workers {
            logs.push(w.log.clone());
            assert_eq!(w.drain(), Some(0));
        }
        for id in &self.ids {
            check_chain(&self.env, id);
        }
        let verify = self.env.json(&["cas", "verify"]);
        assert_eq!(verify["issues"], serde_json::json!([]), "{verify}");
        let mut again = 0;
        for log in &logs {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            assert!(!text.contains("\"event\":\"run-failed\""), "{text}");
            again += text
                .lines()
                .filter(|l| l.contains("\"event\":\"claimed\"") && !l.contains("claim 1 of"))
                .count();
        }
        eprintln!(
            "{name}: {} threads, {again} takeovers, {} workers started",
            self.ids.len(),
            self.started
        );
        drop(self.db.take());
        again
    }
}

/// 2–3 workers (two slots each) step solve-issue threads whose agent takes
/// 600 ms a step; every 0.5–1 s a random worker that is running an agent
/// is killed with SIGKILL (and another started), until 30 workers were
/// killed mid-step (more threads are queued while fewer than six are left,
/// so that there is always a step to interrupt); then the workers left
/// finish the queue.
fn kill_nine_trial(backend: Backend) {
    let Some(mut t) = Trial::new("kill -9 trial", backend, 12) else {
        return;
    };
    for _ in 0..3 {
        t.start_worker();
    }
    let mut kills = 0;
    while kills < 30 {
        t.pause();
        if active(&t.env) < 6 {
            t.queue(4);
        }
        let victim = t.rng.next(t.workers.len() as u64) as usize;
        if !t.workers[victim].mid_step() {
            continue;
        }
        let w = t.workers.swap_remove(victim);
        t.gone.push(w.log.clone());
        w.kill9();
        kills += 1;
        // Two or three workers go on.
        if t.workers.len() < 2 || t.rng.next(2) == 0 {
            t.start_worker();
        }
    }
    let again = t.finish("kill -9 trial");
    assert!(again >= 1, "no run was taken over after {kills} kills");
}

/// PostgreSQL trials run on the binary's fault server
/// (`uwf_pg_testing::fault_server`, not the one the other modules share) and
/// take turns: a restart of the server would disturb the others.
static PG_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pg_turn() -> std::sync::MutexGuard<'static, ()> {
    PG_TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn workers_killed_mid_step_30_times_lose_no_step_and_apply_none_twice_on_files() {
    kill_nine_trial(Backend::Files);
}

#[test]
fn workers_killed_mid_step_30_times_lose_no_step_and_apply_none_twice_on_postgres() {
    let _turn = pg_turn();
    kill_nine_trial(Backend::Postgres);
}

/// Three workers step 12 threads while the database is restarted three
/// times (a fast shutdown, down for a second, started again), each while
/// agents run; every thread still reaches `$END` with each step once.
#[test]
fn the_database_restarted_mid_run_loses_no_step_and_applies_none_twice() {
    let _turn = pg_turn();
    let Some(mut t) = Trial::new("restart trial", Backend::Postgres, 12) else {
        return;
    };
    let server = uwf_pg_testing::fault_server().unwrap();
    for _ in 0..3 {
        t.start_worker();
    }
    let mut restarts = 0;
    while restarts < 3 {
        t.pause();
        if !t.workers.iter().any(WorkerProc::mid_step) {
            continue;
        }
        server.shut_down();
        // Down for a while, with the workers retrying (the fault itself).
        std::thread::sleep(Duration::from_secs(1));
        server.start_again();
        restarts += 1;
        t.pause();
        t.pause();
    }
    t.finish("restart trial");
}

/// The workers reach the database through a proxy; the network is cut
/// three times for 3 s (longer than the 2 s lease: the workers fence
/// themselves and their claims run out), each while agents run, and healed
/// again; every thread still reaches `$END` with each step once.
#[test]
fn a_network_cut_between_workers_and_database_loses_no_step_and_applies_none_twice() {
    let _turn = pg_turn();
    let Some(mut t) = Trial::new("network cut trial", Backend::Postgres, 12) else {
        return;
    };
    let server = uwf_pg_testing::fault_server().unwrap();
    let (port, proxy) = server.proxy();
    t.worker_store = Some(t.db.as_ref().unwrap().url_through(port, false));
    for _ in 0..3 {
        t.start_worker();
    }
    let mut cuts = 0;
    while cuts < 3 {
        t.pause();
        if !t.workers.iter().any(WorkerProc::mid_step) {
            continue;
        }
        proxy.cut();
        // The cut must outlast the 2 s lease (the behaviour under test).
        std::thread::sleep(Duration::from_secs(3));
        proxy.heal();
        cuts += 1;
        t.pause();
        t.pause();
    }
    assert!(proxy.accepted() >= 3, "the workers did not use the proxy");
    let again = t.finish("network cut trial");
    // A cut longer than the lease takes every running claim away.
    assert!(again >= 1, "no run was taken over after {cuts} cuts");
}

/// A worker started while its database cannot be reached (the connection
/// cut) waits for it instead of exiting, serves the queue once the cut
/// heals, and drains with status 0; asked to stop while still waiting, it
/// exits 0 too.
#[test]
fn a_worker_started_while_the_database_is_unreachable_waits_for_it() {
    let _turn = pg_turn();
    let Some(mut t) = Trial::new("unreachable start trial", Backend::Postgres, 2) else {
        return;
    };
    let server = uwf_pg_testing::fault_server().unwrap();
    let (port, proxy) = server.proxy();
    t.worker_store = Some(t.db.as_ref().unwrap().url_through(port, false));
    proxy.cut();
    // One that is told to stop before it ever reaches the database.
    t.start_worker();
    let waiting_then_stopped = t.workers.pop().unwrap();
    t.start_worker();
    // Both try, fail and wait: their logs say so (nothing exits).
    let until = Instant::now() + BOUND;
    while !t.workers[0].says("cannot reach the store")
        || !waiting_then_stopped.says("cannot reach the store")
    {
        assert!(Instant::now() < until, "the workers never tried the store");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(waiting_then_stopped.drain(), Some(0));
    assert!(
        t.workers[0].child.try_wait().unwrap().is_none(),
        "the worker exited"
    );
    proxy.heal();
    t.finish("unreachable start trial");
}
