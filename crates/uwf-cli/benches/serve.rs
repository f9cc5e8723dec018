//! How long `uwf serve` takes to answer the list of threads on a
//! filesystem store with many threads (docs/serve.md, "Many threads").
//!
//! ```sh
//! cargo build --release --locked -p uwf-cli
//! cargo bench --locked -p uwf-cli --bench serve             # 20,000 threads
//! UWF_BENCH_THREADS=2000 cargo bench --locked -p uwf-cli --bench serve
//! ```
//!
//! Environment:
//! - `UWF_BENCH_THREADS` (default 20000): threads in the store, a quarter
//!   of them archived (killed), each with its own task;
//! - `UWF_BENCH_SAMPLES` (default 20): requests timed per address;
//! - `UWF_BENCH_BIN` (default `target/release`): where `uwf` is;
//! - `UWF_BENCH_DIR`: keep the root there (and reuse it when it holds a
//!   store already, so another binary can be timed on the same store).
//!
//! The store is built with the libraries (`uwf_engine::start`,
//! `uwf_engine::kill`), untimed; then one `uwf serve` process answers
//! every request, each timed from sending it to the last byte of the
//! answer, over loopback. The first request of each address is printed
//! apart ("first": for the first address, the first request after `uwf
//! serve` started) and not counted. Printed: the median and 90th
//! percentile per address.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use uwf_engine::Engine;
use uwf_moderator::definition;

const WORKFLOW: &str = r#"name: listed
description: threads to list
roles:
  work:
    description: works
    systemPrompt: "do the work"
    outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
graph:
  $START: [ { role: work, condition: null } ]
  work: [ { role: $END, condition: null } ]
"#;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Builds a store of `n` threads at `root`: started in parallel, every
/// fourth one killed (archived).
fn prepare(root: &Path, n: usize) {
    let engine = Engine::open(root).unwrap();
    let def = definition::parse_yaml(WORKFLOW, "listed.yaml").unwrap();
    let registered = definition::register(engine.cas(), &def).unwrap();
    engine
        .state()
        .register_workflow("listed", registered.hash, &uwf_state::NodeGuard::vouched())
        .unwrap();
    let workers = 4;
    std::thread::scope(|s| {
        for w in 0..workers {
            s.spawn(move || {
                let engine = Engine::open(root).unwrap();
                for i in (w..n).step_by(workers) {
                    let task = format!("Task number {i}: fix the thing in module {}", i % 97);
                    let started = uwf_engine::start(&engine, registered.hash, &task, None).unwrap();
                    if i % 4 == 3 {
                        uwf_engine::kill(&engine, started.thread).unwrap();
                    }
                    if i % 5_000 == 0 && i > 0 {
                        eprintln!("  threads: {i}");
                    }
                }
            });
        }
    });
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn main() {
    let n: usize = env_or("UWF_BENCH_THREADS", 20_000);
    let samples: usize = env_or("UWF_BENCH_SAMPLES", 20);
    let bin = std::env::var_os("UWF_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    let uwf = bin.join("uwf");
    assert!(
        uwf.exists(),
        "{} is missing: cargo build --release -p uwf-cli",
        uwf.display()
    );
    let temp = tempfile::tempdir().unwrap();
    let root = std::env::var_os("UWF_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| temp.path().join("root"));
    if root.join("cas").exists() {
        eprintln!("reusing the store at {}", root.display());
    } else {
        eprintln!("preparing a store with {n} threads at {} …", root.display());
        let t = Instant::now();
        prepare(&root, n);
        eprintln!("  done in {:.1} s", t.elapsed().as_secs_f64());
    }
    let mut child = Command::new(&uwf)
        .args(["--root"])
        .arg(&root)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let hello: serde_json::Value = serde_json::from_str(&line).unwrap();
    let url = hello["url"].as_str().unwrap().to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into();
    println!(
        "uwf serve ({}), {n} threads, {samples} requests each",
        uwf.display()
    );
    println!(
        "{:<44} {:>10} {:>10} {:>10} {:>8}",
        "request", "first ms", "median ms", "p90 ms", "total"
    );
    for path in [
        "api/threads?limit=50",
        "api/threads?limit=50&offset=10000",
        "api/threads?limit=50&state=idle",
        "api/threads?limit=50&q=module%2042",
        "",
    ] {
        let mut times = Vec::with_capacity(samples);
        let mut total = serde_json::Value::Null;
        let mut first = Duration::ZERO;
        for i in 0..=samples {
            let t = Instant::now();
            let mut r = agent.get(&format!("{url}{path}")).call().unwrap();
            let body = r.body_mut().read_to_string().unwrap();
            let took = t.elapsed();
            if i == 0 {
                first = took;
                if path.starts_with("api/") {
                    total =
                        serde_json::from_str::<serde_json::Value>(&body).unwrap()["total"].clone();
                }
                continue;
            }
            times.push(took);
        }
        times.sort();
        println!(
            "GET /{path:<39} {:>10.1} {:>10.1} {:>10.1} {:>8}",
            first.as_secs_f64() * 1000.0,
            percentile(&times, 0.5),
            percentile(&times, 0.9),
            total
        );
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
}
