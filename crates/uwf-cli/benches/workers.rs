//! Throughput of `uwf worker`: N queued threads of a 5-step workflow with a
//! trivial agent (`uwf-mock`, answering at once), stepped by K worker
//! processes against one store, for each K.
//!
//! ```sh
//! just bench-workers                                   # 1,000 threads; K = 1 2 4 8; filesystem store
//! UWF_BENCH_THREADS=200 UWF_BENCH_WORKERS="1 2" just bench-workers
//! UWF_BENCH_STORE=pg just bench-workers                # a throw-away PostgreSQL (uwf-pg-testing)
//! UWF_BENCH_STORE=postgres://me@db:5432/bench UWF_STORE_PASSWORD=… just bench-workers
//! ```
//!
//! Environment:
//! - `UWF_BENCH_THREADS` (default 1000): threads queued per configuration;
//! - `UWF_BENCH_WORKERS` (default `"1 2 4 8"`): the numbers of workers;
//! - `UWF_BENCH_CONCURRENCY` (default 1): `--concurrency` of each worker;
//! - `UWF_BENCH_STORE`: unset or `fs` for a fresh filesystem store per
//!   configuration; `pg` for a fresh database per configuration on a
//!   PostgreSQL server started by `uwf-pg-testing` (Unix socket, this
//!   machine); a `postgres://` URL for that database (the password in
//!   `UWF_STORE_PASSWORD`; the runs of each configuration are all done when
//!   it ends, so one database serves them all, its history growing);
//! - `UWF_BENCH_BIN` (default `target/release`): where `uwf` and `uwf-mock` are;
//! - `UWF_BENCH_DIR`: keep the roots and the workers' logs there.
//!
//! For each K, the threads are queued first (`uwf thread run --detach`, not
//! timed), then K workers start (`--log-format json`) and the wall time runs
//! from their start to the last `done` event in their logs. Figures:
//!
//! - **steps/s**: N × 5 / wall time;
//! - **claim latency**: per worker slot, the time from the slot being free
//!   (the worker's `worker-started`, or the slot's previous run ending:
//!   `done`, `run-failed`, `handed-back`, `killed`, `waiting`, `lease-lost`)
//!   to its next `claimed` event, both times from the worker's log. With
//!   `--concurrency 1` a worker is one slot; with more, the free instants of
//!   a worker are matched to its claims first come, first served. It is what
//!   a claim costs while the queue is never empty;
//! - **queue wait**: from a run's `queuedAt` (the store's clock, as
//!   `thread run --detach` printed it) to its first `claimed` event: with
//!   everything queued up front it is mostly the backlog, given for
//!   completeness;
//! - **uwf CPU**: CPU seconds of the workers and their agents (the children
//!   this process waited for) per wall second; **db CPU** (with
//!   `UWF_BENCH_STORE=pg` only): the same for the PostgreSQL server (its
//!   postmaster and the backends it reaped); **machine busy**: the share of
//!   all cores busy during the run (`/proc/stat`, other processes
//!   included).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const WORKFLOW: &str = r#"name: bench5
description: five steps, one role each
roles:
  s1: { description: one, systemPrompt: "1", outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] } }
  s2: { description: two, systemPrompt: "2", outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] } }
  s3: { description: three, systemPrompt: "3", outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] } }
  s4: { description: four, systemPrompt: "4", outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] } }
  s5: { description: five, systemPrompt: "5", outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] } }
graph:
  $START: [ { role: s1, condition: null } ]
  s1: [ { role: s2, condition: null } ]
  s2: [ { role: s3, condition: null } ]
  s3: [ { role: s4, condition: null } ]
  s4: [ { role: s5, condition: null } ]
  s5: [ { role: $END, condition: null } ]
"#;

const SCENARIO: &str = "roles:\n  s1: [ { output: { n: 1 } } ]\n  s2: [ { output: { n: 2 } } ]\n  s3: [ { output: { n: 3 } } ]\n  s4: [ { output: { n: 4 } } ]\n  s5: [ { output: { n: 5 } } ]\n";

const STEPS_PER_THREAD: usize = 5;

/// Which store the configurations use.
enum Backend {
    Files,
    /// A fresh database per configuration on the uwf-pg-testing server.
    PgTesting,
    /// One given database (URL without its password).
    Url(String),
}

struct Bench {
    bin: PathBuf,
    dir: PathBuf,
    scenario: PathBuf,
    workflow: PathBuf,
    backend: Backend,
}

/// Where one configuration runs.
struct Target {
    root: PathBuf,
    /// `UWF_STORE` and `UWF_STORE_PASSWORD`, for a PostgreSQL store.
    store: Option<(String, String)>,
}

impl Target {
    fn uwf(&self, bin: &Path) -> Command {
        let mut c = Command::new(bin.join("uwf"));
        c.arg("--root")
            .arg(&self.root)
            .env_remove("RUST_LOG")
            .env_remove("UNCAGED_WORKFLOW_STORAGE_ROOT")
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("UWF_STORE")
            .env_remove("UWF_STORE_PASSWORD")
            .env("NO_COLOR", "1");
        if let Some((url, password)) = &self.store {
            c.env("UWF_STORE", url).env("UWF_STORE_PASSWORD", password);
        }
        c
    }
}

fn run_ok(mut cmd: Command) -> Vec<u8> {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}={s:?} is not valid"))
        })
        .unwrap_or(default)
}

/// Milliseconds since the epoch of an RFC 3339 time of a worker's log.
fn epoch_ms(time: &str) -> i64 {
    let t = humantime::parse_rfc3339_weak(time).unwrap_or_else(|e| panic!("{time}: {e}"));
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// CPU ticks of the children waited for (utime + stime of this process's
/// `cutime` + `cstime`).
fn children_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0;
    };
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 16 and 17 of proc(5), counted from 1; `after` starts at field 3.
    f.get(13).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
        + f.get(14).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

/// CPU ticks of process `pid` and of the children it reaped.
fn process_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0;
    };
    // utime, stime, cutime, cstime: fields 14–17 of proc(5).
    after
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|s| s.parse::<u64>().ok())
        .sum()
}

/// The PostgreSQL server's postmaster, when the bench started it.
fn postmaster(backend: &Backend) -> Option<u32> {
    let Backend::PgTesting = backend else {
        return None;
    };
    let server = uwf_pg_testing::server()?;
    std::fs::read_to_string(server.data_dir().join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// (busy, total) jiffies of all cores.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The `q` quantile (nearest rank) of sorted `v`.
fn quantile(v: &[i64], q: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// What one configuration measured.
struct Row {
    workers: usize,
    wall: Duration,
    claims: usize,
    claim_ms: Vec<i64>,
    wait_ms: Vec<i64>,
    uwf_cpu: f64,
    db_cpu: Option<f64>,
    busy: f64,
}

impl Bench {
    fn target(&self, label: &str) -> Target {
        let root = self.dir.join(label);
        std::fs::create_dir_all(&root).unwrap();
        let store = match &self.backend {
            Backend::Files => None,
            Backend::PgTesting => {
                let db = uwf_pg_testing::database().expect("PostgreSQL server binaries");
                Some((db.url_without_password, uwf_pg_testing::PASSWORD.to_owned()))
            }
            Backend::Url(url) => Some((
                url.clone(),
                std::env::var("UWF_STORE_PASSWORD").unwrap_or_default(),
            )),
        };
        let t = Target { root, store };
        if t.store.is_some() {
            let mut init = t.uwf(&self.bin);
            init.args(["store", "init"]);
            run_ok(init);
        }
        let mut put = t.uwf(&self.bin);
        put.arg("workflow").arg("put").arg(&self.workflow);
        run_ok(put);
        t
    }

    /// Queues `n` threads (4 at a time); returns thread id → queuedAt.
    fn queue(&self, t: &Target, n: usize) -> BTreeMap<String, i64> {
        let agent = format!(
            "'{}' '{}'",
            self.bin.join("uwf-mock").display(),
            self.scenario.display()
        );
        let queued = Mutex::new(BTreeMap::new());
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if i >= n {
                            break;
                        }
                        let mut c = t.uwf(&self.bin);
                        c.args(["thread", "run", "bench5", "-p"])
                            .arg(format!("task {i}"))
                            .args(["--agent", &agent, "--detach"]);
                        let v: Value = serde_json::from_slice(&run_ok(c)).unwrap();
                        let id = v["thread"].as_str().unwrap().to_owned();
                        let at = v["run"]["queuedAt"].as_i64().unwrap();
                        queued.lock().unwrap().insert(id, at);
                        if (i + 1).is_multiple_of(250) {
                            eprintln!("  queued {}", i + 1);
                        }
                    }
                });
            }
        });
        queued.into_inner().unwrap()
    }

    fn run(&self, workers: usize, threads: usize, concurrency: usize) -> Row {
        let label = format!("k{workers}");
        eprintln!("{label}: preparing the store and queuing {threads} threads …");
        let t = self.target(&label);
        let queued = self.queue(&t, threads);
        assert_eq!(queued.len(), threads);

        let logs: Vec<PathBuf> = (0..workers)
            .map(|i| self.dir.join(format!("{label}-worker-{i}.log")))
            .collect();
        let cpu0 = children_ticks();
        let db = postmaster(&self.backend);
        let db0 = db.map(process_ticks);
        let busy0 = machine_ticks();
        let t0 = now_ms();
        let start = Instant::now();
        let mut children: Vec<Child> = logs
            .iter()
            .map(|log| {
                let mut c = t.uwf(&self.bin);
                c.args(["worker", "--log-format", "json", "--poll-ms", "50"])
                    .args(["--concurrency", &concurrency.to_string()])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(log).unwrap());
                c.spawn().expect("start uwf worker")
            })
            .collect();
        eprintln!("{label}: {workers} workers started");
        let limit = Duration::from_secs(env_or("UWF_BENCH_TIMEOUT_SECS", 3600));
        loop {
            std::thread::sleep(Duration::from_millis(250));
            let (mut done, mut failed) = (0, 0);
            for log in &logs {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                done += text.matches("\"event\":\"done\"").count();
                failed += text.matches("\"event\":\"run-failed\"").count();
            }
            assert_eq!(failed, 0, "a run failed: see {}", self.dir.display());
            if done >= threads {
                break;
            }
            for c in &mut children {
                if let Some(status) = c.try_wait().unwrap() {
                    panic!(
                        "a worker exited early ({status}): see {}",
                        self.dir.display()
                    );
                }
            }
            assert!(start.elapsed() < limit, "{label}: not done after {limit:?}");
        }
        for c in &children {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
        }
        for c in &mut children {
            let _ = c.wait();
        }
        let cpu = (children_ticks() - cpu0) as f64 / clock_ticks_per_second();
        let db_cpu = db.zip(db0).map(|(pid, t0)| {
            process_ticks(pid).saturating_sub(t0) as f64 / clock_ticks_per_second()
        });
        let busy1 = machine_ticks();

        // Every thread is over: none is active any more.
        let mut list = t.uwf(&self.bin);
        list.args(["thread", "list"]);
        let active: Value = serde_json::from_slice(&run_ok(list)).unwrap();
        assert_eq!(
            active.as_array().map(Vec::len),
            Some(0),
            "threads left active"
        );

        let mut claim_ms = Vec::new();
        let mut wait_ms = Vec::new();
        let mut claims = 0;
        let mut last_done = t0;
        let mut first_claim: BTreeMap<String, i64> = BTreeMap::new();
        for log in &logs {
            let mut free: VecDeque<i64> = VecDeque::new();
            for line in std::fs::read_to_string(log).unwrap().lines() {
                let Ok(v) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                let at = epoch_ms(v["time"].as_str().unwrap_or_default());
                match v["event"].as_str().unwrap_or_default() {
                    "worker-started" => free.extend(std::iter::repeat_n(at, concurrency)),
                    "claimed" => {
                        claims += 1;
                        if let Some(f) = free.pop_front() {
                            claim_ms.push(at - f);
                        }
                        let id = v["thread"].as_str().unwrap_or_default().to_owned();
                        first_claim.entry(id).or_insert(at);
                    }
                    e @ ("done" | "run-failed" | "handed-back" | "killed" | "waiting"
                    | "lease-lost") => {
                        free.push_back(at);
                        if e == "done" {
                            last_done = last_done.max(at);
                        }
                    }
                    _ => {}
                }
            }
        }
        for (id, at) in &queued {
            if let Some(c) = first_claim.get(id) {
                wait_ms.push(c - at);
            }
        }
        claim_ms.sort_unstable();
        wait_ms.sort_unstable();
        let wall = Duration::from_millis((last_done - t0).max(1) as u64);
        let busy = (busy1.0 - busy0.0) as f64 / (busy1.1 - busy0.1).max(1) as f64;
        Row {
            workers,
            wall,
            claims,
            claim_ms,
            wait_ms,
            uwf_cpu: cpu / wall.as_secs_f64(),
            db_cpu: db_cpu.map(|c| c / wall.as_secs_f64()),
            busy,
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let threads: usize = env_or("UWF_BENCH_THREADS", 1000);
    let concurrency: usize = env_or("UWF_BENCH_CONCURRENCY", 1);
    let workers: Vec<usize> = std::env::var("UWF_BENCH_WORKERS")
        .unwrap_or_else(|_| "1 2 4 8".into())
        .split_whitespace()
        .map(|s| s.parse().expect("UWF_BENCH_WORKERS: numbers"))
        .collect();
    let backend = match std::env::var("UWF_BENCH_STORE").ok().as_deref() {
        None | Some("" | "fs") => Backend::Files,
        Some("pg") => Backend::PgTesting,
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            Backend::Url(url.to_owned())
        }
        Some(other) => panic!("UWF_BENCH_STORE={other:?}: give fs, pg or a postgres:// URL"),
    };
    let bin = std::env::var_os("UWF_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    for b in ["uwf", "uwf-mock"] {
        assert!(
            bin.join(b).is_file(),
            "{} is missing: build it first (`cargo build --release -p uwf-cli -p uwf-mock`, or `just bench-workers`)",
            bin.join(b).display()
        );
    }
    let keep = std::env::var_os("UWF_BENCH_DIR").map(PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let dir = keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("bench5.mock.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let workflow = dir.join("bench5.yaml");
    std::fs::write(&workflow, WORKFLOW).unwrap();
    let store_label = match &backend {
        Backend::Files => "filesystem".to_owned(),
        Backend::PgTesting => "PostgreSQL (uwf-pg-testing, Unix socket)".to_owned(),
        Backend::Url(url) => format!("PostgreSQL ({url})"),
    };
    let bench = Bench {
        bin,
        dir,
        scenario,
        workflow,
        backend,
    };

    let rows: Vec<Row> = workers
        .iter()
        .map(|&k| bench.run(k, threads, concurrency))
        .collect();

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "\n{threads} threads × {STEPS_PER_THREAD} steps, {store_label} store, \
         --concurrency {concurrency} per worker, {cores} cores\n"
    );
    println!(
        "| workers | wall | steps/s | claim p50 | claim p99 | queue wait p50 | queue wait p99 | claims | uwf CPU | db CPU | machine busy |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let steps = (threads * STEPS_PER_THREAD) as f64;
        println!(
            "| {} | {:.1} s | {:.1} | {} ms | {} ms | {:.1} s | {:.1} s | {} | {:.2} cores | {} | {:.0} % |",
            r.workers,
            r.wall.as_secs_f64(),
            steps / r.wall.as_secs_f64(),
            quantile(&r.claim_ms, 0.5),
            quantile(&r.claim_ms, 0.99),
            quantile(&r.wait_ms, 0.5) as f64 / 1000.0,
            quantile(&r.wait_ms, 0.99) as f64 / 1000.0,
            r.claims,
            r.uwf_cpu,
            r.db_cpu.map_or("—".to_owned(), |c| format!("{c:.2} cores")),
            r.busy * 100.0,
        );
    }
    if let Some(k) = keep {
        eprintln!("roots and worker logs kept in {}", k.display());
    }
}
