//! Whole-process cost of `uwf cas verify` and `uwf cas gc` on a large
//! filesystem store.
//!
//! ```sh
//! cargo build --release --locked -p uwf-cli
//! cargo bench --locked -p uwf-engine --bench store                # about 200,000 nodes
//! UWF_BENCH_NODES=1000000 cargo bench --locked -p uwf-engine --bench store
//! UWF_BENCH_DIR=/tmp/store-bench cargo bench -p uwf-engine --bench store   # keep (and reuse) the store
//! ```
//!
//! The store (in `$UWF_BENCH_DIR` or a temporary directory) is written with
//! the libraries, untimed, to look like a store that has been used for a
//! while: about `UWF_BENCH_NODES` nodes (default 200,000) in threads of
//! `UWF_BENCH_STEPS` steps (default 20) of a writer/reviewer loop, each step
//! a StepNode, its output and its detail (three nodes); every hundredth
//! thread is active (its head in `threads/`), the others archived
//! (`history.jsonl`). Besides them, `UWF_BENCH_GARBAGE` per cent of the
//! nodes (default 5) are garbage: abandoned threads whose StartNode was
//! never registered, each with two steps, reachable from no root.
//!
//! Then, `UWF_BENCH_SAMPLES` rounds (default 3), each timing whole `uwf`
//! processes (from `$UWF_BENCH_BIN`, default the workspace's
//! `target/release`): `cas verify`, `cas gc --dry-run --grace 0s` (the
//! mark and the listing, nothing removed) and `cas gc --grace 0s`, which
//! sweeps the garbage; the garbage is stored again (untimed) before each
//! round's collection. The page cache is warm (the store was just written
//! or read). Prints the median and the slowest of each, nodes per second,
//! and the CPU the process used (user + system, from `getrusage`).
//! Figures: docs/performance.md, "Store at scale".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::{REVIEW_LOOP as WORKFLOW, Types, env_number, uwf_binary, write_thread};
use uwf_engine::Engine;
use uwf_moderator::definition;
use uwf_protocol::{HistoryEntry, ThreadId};
use uwf_state::NodeGuard;

/// Parallel writers while populating (untimed; the disk's fsyncs bound it).
const WRITERS: usize = 8;

/// Runs `f(i)` for every `i` in `0..n` on [`WRITERS`] threads.
fn in_parallel<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| s.spawn(move || (w..n).step_by(WRITERS).map(f).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

fn types(engine: &Engine) -> Types {
    let cas = engine.cas();
    let def = definition::parse_yaml(WORKFLOW, "review-loop.yaml").unwrap();
    let registered = definition::register(cas, &def).unwrap();
    let detail = cas
        .put_schema(serde_json::json!({
            "title": "BenchDetail",
            "type": "object",
            "properties": { "answer": { "type": "string" }, "turns": { "type": "integer" }, "model": { "type": "string" } }
        }))
        .unwrap()
        .hash;
    let schema = |role: &str| registered.payload.roles[role].output_schema;
    Types {
        workflow: registered.hash,
        writer: schema("writer"),
        reviewer: schema("reviewer"),
        detail: Some(detail),
    }
}

/// Garbage: `threads` abandoned threads of two steps (seven nodes each)
/// that no root reaches. The same content every time, so it can be stored
/// again after a collection swept it.
fn write_garbage(engine: &Engine, ty: Types, threads: usize) {
    in_parallel(threads, |g| {
        write_thread(engine.cas(), ty, &format!("abandoned #{g}"), 2);
    });
}

fn populate(root: &Path, threads: usize, steps: usize, garbage: usize) {
    let engine = Engine::open(root).unwrap();
    let ty = types(&engine);
    engine
        .state()
        .register_workflow("review-loop", ty.workflow, &NodeGuard::vouched())
        .unwrap();
    let heads = in_parallel(threads, |t| {
        if t % 1000 == 0 {
            eprintln!("  threads: {t}");
        }
        (
            t,
            write_thread(engine.cas(), ty, &format!("issue #{t}"), steps),
        )
    });
    let mut archived = Vec::new();
    for (t, head) in heads {
        if t % 100 == 0 {
            engine
                .state()
                .insert_thread(ThreadId::new(), head, &NodeGuard::vouched())
                .unwrap();
        } else {
            archived.push(HistoryEntry {
                thread: ThreadId::new(),
                workflow: ty.workflow,
                head,
                completed_at: 0,
                reason: Some("done".into()),
            });
        }
    }
    engine.state().import_history(&archived).unwrap();
    write_garbage(&engine, ty, garbage);
}

/// One timed whole process: its wall time, its CPU (user + system) and its
/// stdout as JSON. `ok_status` is the exit status expected.
fn timed(uwf: &Path, root: &Path, args: &[&str]) -> (Duration, Duration, serde_json::Value) {
    let usage = || {
        let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
            .expect("getrusage");
        let tv = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
        };
        tv(u.user_time()) + tv(u.system_time())
    };
    let cpu = usage();
    let t = Instant::now();
    let out = Command::new(uwf)
        .arg("-q")
        .args(args)
        .env("UNCAGED_WORKFLOW_STORAGE_ROOT", root)
        .env_remove("UWF_STORE")
        .output()
        .unwrap();
    let wall = t.elapsed();
    let cpu = usage() - cpu;
    assert!(
        out.status.success(),
        "uwf {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (wall, cpu, serde_json::from_slice(&out.stdout).unwrap())
}

fn main() {
    let nodes = env_number("UWF_BENCH_NODES", 200_000);
    let steps = env_number("UWF_BENCH_STEPS", 20).max(2);
    let garbage_pct = env_number("UWF_BENCH_GARBAGE", 5).min(90);
    let samples = env_number("UWF_BENCH_SAMPLES", 3).max(1);
    // A thread is 3 nodes a step and its StartNode; garbage threads 7.
    let garbage = nodes * garbage_pct / 100 / 7;
    let threads = (nodes - garbage * 7) / (3 * steps + 1);
    let uwf = uwf_binary();
    let tmp = tempfile::tempdir().unwrap();
    let dir =
        std::env::var_os("UWF_BENCH_DIR").map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
    let root = dir.join(format!("root-{nodes}-{steps}-{garbage_pct}"));
    if !root.join("history.jsonl").is_file() {
        eprintln!(
            "writing {threads} threads of {steps} steps and {garbage} garbage threads into {}",
            root.display()
        );
        let t = Instant::now();
        populate(&root, threads, steps, garbage);
        eprintln!("  written in {:.1} s", t.elapsed().as_secs_f64());
    }
    let engine = Engine::open(&root).unwrap();
    let ty = types(&engine);
    // Per command: its samples (wall, CPU) and the nodes it counted.
    type Samples = Vec<(Duration, Duration)>;
    let mut rows: Vec<(&str, Samples, usize)> = vec![
        ("cas verify", Vec::new(), 0),
        ("cas gc --dry-run --grace 0s", Vec::new(), 0),
        ("cas gc --grace 0s", Vec::new(), 0),
    ];
    for round in 0..samples {
        // Every round collects the same garbage (stored again if swept).
        write_garbage(&engine, ty, garbage);
        let (wall, cpu, v) = timed(&uwf, &root, &["cas", "verify"]);
        assert_eq!(v["issues"], serde_json::json!([]), "{v}");
        let n = v["nodes"].as_u64().unwrap() as usize;
        rows[0].1.push((wall, cpu));
        rows[0].2 = n;
        for (i, args) in [
            &["cas", "gc", "--dry-run", "--grace", "0s"][..],
            &["cas", "gc", "--grace", "0s"][..],
        ]
        .into_iter()
        .enumerate()
        {
            let (wall, cpu, v) = timed(&uwf, &root, args);
            let swept = v["swept"].as_array().map_or(0, Vec::len);
            assert_eq!(swept, garbage * 7, "{}", v["nodes"]);
            rows[i + 1].1.push((wall, cpu));
            rows[i + 1].2 = v["nodes"].as_u64().unwrap() as usize;
        }
        eprintln!("  round {} of {samples} done", round + 1);
    }
    println!(
        "| command | nodes | median | slowest | nodes/s (median) | CPU (median) |\n|---|---|---|---|---|---|"
    );
    for (name, mut times, n) in rows {
        times.sort();
        let (wall, cpu) = times[times.len() / 2];
        let slowest = times[times.len() - 1].0;
        println!(
            "| `uwf {name}` | {n} | {:.2} s | {:.2} s | {:.0} | {:.2} s |",
            wall.as_secs_f64(),
            slowest.as_secs_f64(),
            n as f64 / wall.as_secs_f64(),
            cpu.as_secs_f64()
        );
    }
}
