//! What running a short child under [`uwf_util::supervise::run`] costs,
//! against std's `Command::output` (which reads both pipes on the calling
//! thread and supervises nothing): the part of every agent step that is
//! the supervisor's (docs/performance.md, "Starting an agent").
//!
//! ```sh
//! cargo bench -p uwf-util --bench supervise
//! UWF_BENCH_RUNS=2000 UWF_BENCH_ROUNDS=6 cargo bench -p uwf-util --bench supervise
//! ```
//!
//! Each round runs `/bin/echo` `UWF_BENCH_RUNS` times (default 500) one
//! way, then as many times the other way (the order alternates from round
//! to round); the table gives the median over `UWF_BENCH_ROUNDS` rounds
//! (default 4) of the wall time and of the CPU time (this process and the
//! children it waited for, from `/proc/self/stat`) per run.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use uwf_util::supervise::{self, Supervise};

const PROGRAM: &str = "/bin/echo";

/// One way of running the program once.
type Way = fn() -> Result<(), String>;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// CPU seconds of this process and of its waited-for children, where the
/// system says (Linux).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..15)?
        .iter()
        .map(|f| f.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    // USER_HZ is 100 on every Linux uwf runs on.
    Some(ticks as f64 / 100.0)
}

fn command() -> Command {
    let mut cmd = Command::new(PROGRAM);
    cmd.arg("one line of output");
    cmd
}

fn supervised() -> Result<(), String> {
    supervise::run(command(), Supervise::new())
        .map(drop)
        .map_err(|e| e.to_string())
}

fn plain() -> Result<(), String> {
    let mut cmd = command();
    // What the supervisor sets too.
    cmd.stdin(Stdio::null()).process_group(0);
    cmd.output().map(drop).map_err(|e| e.to_string())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let runs = env_number("UWF_BENCH_RUNS", 500);
    let rounds = env_number("UWF_BENCH_ROUNDS", 4);
    let ways: [(&str, Way); 2] = [("supervise::run", supervised), ("Command::output", plain)];
    let mut wall = [Vec::new(), Vec::new()];
    let mut cpu = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for k in 0..2 {
            let i = (k + round) % 2;
            let (name, way) = ways[i];
            let (c0, t0) = (cpu_seconds(), Instant::now());
            for _ in 0..runs {
                if let Err(e) = way() {
                    eprintln!("{name} of {PROGRAM} failed: {e}");
                    std::process::exit(1);
                }
            }
            let per_run = |seconds: f64| seconds * 1e6 / runs as f64;
            wall[i].push(per_run(t0.elapsed().as_secs_f64()));
            if let (Some(c0), Some(c1)) = (c0, cpu_seconds()) {
                cpu[i].push(per_run(c1 - c0));
            }
        }
    }
    println!("{runs} runs of {PROGRAM} per round, {rounds} rounds, medians per run:");
    println!("{:<16} {:>10} {:>10}", "", "wall µs", "CPU µs");
    for i in 0..2 {
        let c = if cpu[i].is_empty() {
            "-".to_owned()
        } else {
            format!("{:.0}", median(&mut cpu[i]))
        };
        println!("{:<16} {:>10.0} {:>10}", ways[i].0, median(&mut wall[i]), c);
    }
}
