//! Whole-process cost of `uwf workflow replay` over many recorded threads.
//!
//! ```sh
//! cargo build --release --locked -p uwf-cli
//! cargo bench --locked -p uwf-engine --bench replay
//! UWF_BENCH_THREADS=1000 UWF_BENCH_STEPS=20 cargo bench -p uwf-engine --bench replay
//! UWF_BENCH_STORE=postgresql cargo bench -p uwf-engine --bench replay
//! ```
//!
//! The store (the filesystem store, in `$UWF_BENCH_DIR` or a temporary
//! directory; with `UWF_BENCH_STORE=postgresql`, a fresh database of a
//! throw-away PostgreSQL server started from the server binaries as the
//! tests start it, see uwf-pg-testing; with `UWF_BENCH_STORE=<URL>`, that
//! database, written only while it holds no finished thread) is written
//! with the libraries, untimed: `UWF_BENCH_THREADS`
//! (default 10,000) finished threads of a writer/reviewer loop, each of
//! `UWF_BENCH_STEPS` steps (default 20; the reviewer rejects until the last
//! review), every output its own node. Then `uwf workflow replay` (from
//! `$UWF_BENCH_BIN`, default the workspace's `target/release`) is timed,
//! `UWF_BENCH_SAMPLES` times (default 3), under two changed workflows:
//!
//! * `equivalent`: the rejection condition rewritten to an equivalent
//!   expression: every thread routes the same, so every decision of every
//!   thread is made under both workflows (the most work a replay does);
//! * `diverging`: rejections send work back only twice: every thread
//!   diverges at step 6.
//!
//! The first sample on a new store also fills the derived chain cache (as
//! any reader of a thread does); the table gives the first and the median.
//! Figures and where the time goes: docs/performance.md, "Replaying
//! recorded threads".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::{REVIEW_LOOP as WORKFLOW, Types, env_number, uwf_binary, write_thread};
use uwf_engine::Engine;
use uwf_moderator::definition;
use uwf_protocol::{HistoryEntry, ThreadId};

/// Writes `threads` finished threads of `steps` steps each, in parallel.
fn populate(engine: &Engine, threads: usize, steps: usize) {
    let def = definition::parse_yaml(WORKFLOW, "review-loop.yaml").unwrap();
    let registered = definition::register(engine.cas(), &def).unwrap();
    let wf = registered.hash;
    engine
        .state()
        .register_workflow("review-loop", wf, &uwf_state::NodeGuard::vouched())
        .unwrap();
    let schema = |role: &str| registered.payload.roles[role].output_schema;
    let (writer, reviewer) = (schema("writer"), schema("reviewer"));
    let workers = 8;
    let entries: Vec<HistoryEntry> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn(move || {
                    let cas = engine.cas();
                    let mut out = Vec::new();
                    for t in (w..threads).step_by(workers) {
                        let ty = Types {
                            workflow: wf,
                            writer,
                            reviewer,
                            detail: None,
                        };
                        let head = write_thread(cas, ty, &format!("issue #{t}"), steps);
                        out.push(HistoryEntry {
                            thread: ThreadId::new(),
                            workflow: wf,
                            head,
                            completed_at: 0,
                            reason: Some("done".into()),
                        });
                        if t % 1000 == 0 {
                            eprintln!("  threads: {t}");
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    engine.state().import_history(&entries).unwrap();
}

fn main() {
    let threads = env_number("UWF_BENCH_THREADS", 10_000);
    let steps = env_number("UWF_BENCH_STEPS", 20).max(2);
    let samples = env_number("UWF_BENCH_SAMPLES", 3).max(1);
    let uwf = uwf_binary();
    let tmp = tempfile::tempdir().unwrap();
    let dir =
        std::env::var_os("UWF_BENCH_DIR").map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    // The store the replays read, and the environment that names it.
    let store = std::env::var("UWF_BENCH_STORE").ok();
    let (engine, store_env) = match store.as_deref() {
        None | Some("" | "files") => (Engine::open(&root).unwrap(), Vec::new()),
        Some(s) => {
            // The replays get the URL without its password, and the
            // password apart, as a user's shell would give them.
            let (url, env) = if s == "postgresql" {
                let db = uwf_pg_testing::database()
                    .expect("no PostgreSQL server binaries (see uwf-pg-testing)");
                // The database lives as long as the server, which this
                // process stops on exit.
                let env = vec![
                    ("UWF_STORE".to_string(), db.url_without_password.clone()),
                    (
                        "UWF_STORE_PASSWORD".to_string(),
                        uwf_pg_testing::PASSWORD.to_string(),
                    ),
                ];
                (db.url, env)
            } else {
                (
                    s.to_string(),
                    vec![("UWF_STORE".to_string(), s.to_string())],
                )
            };
            let backends = uwf_engine::backend::Backends::new().with(uwf_store_pg::PgBackend);
            let engine = uwf_engine::Engine::open_resolved(&backends, Some(&url), &root).unwrap();
            (engine, env)
        }
    };
    if engine.state().history().unwrap().is_empty() {
        eprintln!(
            "writing {threads} threads of {steps} steps into {}",
            engine.state().describe()
        );
        let t = Instant::now();
        populate(&engine, threads, steps);
        eprintln!("  written in {:.1} s", t.elapsed().as_secs_f64());
    }
    let variants = [
        (
            "equivalent",
            WORKFLOW.replace("approved = false", "approved != true"),
        ),
        (
            "diverging",
            WORKFLOW.replace(
                "steps[-1].output.approved = false",
                "steps[-1].output.approved = false and $count(steps[role = 'writer']) < 3",
            ),
        ),
    ];
    let store_name = if store_env.is_empty() {
        "files"
    } else {
        "postgresql"
    };
    println!("| store | workflow replayed | threads × steps | first run | median of {samples} |");
    println!("|---|---|---|---|---|");
    for (name, yaml) in variants {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let mut times = Vec::new();
        let mut summary = String::new();
        for _ in 0..samples {
            let t = Instant::now();
            let out = Command::new(&uwf)
                .args(["-q", "workflow", "replay"])
                .arg(&file)
                .env("UNCAGED_WORKFLOW_STORAGE_ROOT", &root)
                .env_remove("UWF_STORE")
                .env_remove("UWF_STORE_PASSWORD")
                .envs(store_env.iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap();
            times.push(t.elapsed());
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            summary = format!(
                "same {}, diverged {}",
                v["summary"]["same"], v["summary"]["diverged"]
            );
        }
        let first = times[0];
        times.sort();
        let median: Duration = times[times.len() / 2];
        eprintln!("  {name}: {summary}");
        println!(
            "| {store_name} | {name} | {threads} × {steps} | {:.2} s | {:.2} s |",
            first.as_secs_f64(),
            median.as_secs_f64()
        );
    }
}
