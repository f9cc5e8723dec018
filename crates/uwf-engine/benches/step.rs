//! Whole-process cost of one `uwf thread step`, against thread length and
//! against the number of other active threads, with the scripted agent
//! `uwf-mock`; plus that agent run alone; and the cost of a step inside
//! `uwf thread run` (one process stepping a thread again and again), against
//! the thread's length. Each configuration also gives the peak memory (max
//! resident set) of its `uwf` process.
//!
//! ```sh
//! just bench-step            # builds the release binaries, then runs this
//! UWF_BENCH_SAMPLES=30 just bench-step
//! UWF_BENCH_GROUPS=length,run just bench-step   # some groups only
//! UWF_BENCH_CONDITION='$count(steps[output.n = 2]) > 0' just bench-step
//! ```
//!
//! Groups (`UWF_BENCH_GROUPS`, comma-separated, default all): `length`
//! (`thread step` at each thread length), `active` (`thread step` against
//! the number of active threads, and the agent alone), `run` (`thread run
//! --max-steps K` from a fork at each thread length, K =
//! `UWF_BENCH_RUN_STEPS`, default 20; the time shown is per step).
//!
//! The binaries are taken from `$UWF_BENCH_BIN` (default: the workspace's
//! `target/release`). Stores are prepared with the libraries (that part is
//! not timed), in a temporary directory (`$UWF_BENCH_DIR` keeps them). Then
//! every configuration is sampled in turn, round after round, so that noise
//! of the machine spreads over all of them alike; the table gives the
//! median and the 90th percentile of the wall time of each whole process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uwf_cas::{Cas, Hash};
use uwf_engine::Engine;
use uwf_moderator::definition;
use uwf_protocol::{StepNodePayload, StepRecord};
use uwf_state::FsState;

/// The loop workflow; `{condition}` is its one condition's expression, as
/// a JSON string (which YAML reads as a double-quoted scalar).
const WORKFLOW: &str = r#"name: loop
description: endless loop for timing
roles:
  work:
    description: works
    systemPrompt: "do the work"
    outputSchema: { type: object, properties: { n: { type: integer }, note: { type: string } }, required: [n] }
conditions:
  enough: { description: very long, expression: {condition} }
graph:
  $START: [ { role: work, condition: null } ]
  work: [ { role: $END, condition: enough }, { role: work, condition: null } ]
"#;

/// The condition that ends the loop (never, in practice). It reads only
/// the number of steps, so a step loads the last steps and the chain's
/// length (`uwf_moderator::steps_needed`); `UWF_BENCH_CONDITION` replaces
/// it, e.g. with `$count(steps[output.n = 2]) > 0`, a condition that
/// searches the whole history and so loads the whole thread.
const CONDITION: &str = "$count(steps) >= 100000";

const SCENARIO: &str = "roles:\n  work:\n    - output: { n: 1, note: \"one more round\" }\n";

const LENGTHS: [usize; 4] = [10, 100, 1_000, 10_000];
const ACTIVE: [usize; 3] = [2, 2_000, 20_000];

struct Setup {
    bin: PathBuf,
    scenario: PathBuf,
}

impl Setup {
    fn mock_agent(&self) -> String {
        format!(
            "'{}' '{}'",
            self.bin.join("uwf-mock").display(),
            self.scenario.display()
        )
    }

    fn uwf(&self, root: &Path) -> Command {
        let mut c = Command::new(self.bin.join("uwf"));
        c.arg("--root")
            .arg(root)
            .env_remove("RUST_LOG")
            .env_remove("UNCAGED_WORKFLOW_STORAGE_ROOT")
            .env_remove("WORKFLOW_STORAGE_ROOT");
        c
    }
}

/// One sample: the wall time of the whole process, and its peak memory.
#[derive(Clone, Copy)]
struct Sample {
    time: Duration,
    /// Max resident set of the process (wait4's ru_maxrss), in KiB.
    rss_kib: u64,
}

/// A configuration to sample: what runs, and the samples it gave.
struct Config {
    label: String,
    run: Box<dyn Fn() -> Sample>,
    /// Steps one sample runs: its time is divided by this.
    steps: u32,
    samples: Vec<Sample>,
}

/// The argument that makes this program the helper of [`measured`].
const RSS_OF: &str = "--rss-of";

/// The helper of [`measured`]: runs the command in `args` (stdout to
/// nothing, stderr passed on), then prints its wall time (ns) and peak
/// memory (KiB), and exits with its status. As the helper's only child,
/// getrusage's figure for its children is that process's own.
fn rss_helper(args: &[String]) -> ! {
    let t = Instant::now();
    let status = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("run");
    let time = t.elapsed();
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    println!("{} {}", time.as_nanos(), usage.max_rss());
    std::process::exit(status.code().unwrap_or(-1));
}

/// Runs `cmd` to its end through [`rss_helper`]; its wall time and peak
/// memory. `accept` says whether the exit status (with its stderr) is the
/// expected one.
fn measured(cmd: Command, accept: impl Fn(i32, &str) -> bool) -> Sample {
    let mut helper = Command::new(std::env::current_exe().unwrap());
    helper
        .arg(RSS_OF)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => helper.env(k, v),
            None => helper.env_remove(k),
        };
    }
    let out = helper.output().expect("run");
    let code = out.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        accept(code, &stderr),
        "{cmd:?} exited with {code}:\n{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut figures = stdout.split_whitespace().map(|f| f.parse::<u64>().unwrap());
    Sample {
        time: Duration::from_nanos(figures.next().unwrap()),
        rss_kib: figures.next().unwrap(),
    }
}

fn timed(cmd: Command) -> Sample {
    measured(cmd, |code, _| code == 0)
}

/// Registers the loop workflow in `root`; returns its hash.
fn register(engine: &Engine) -> Hash {
    let condition = std::env::var("UWF_BENCH_CONDITION").unwrap_or_else(|_| CONDITION.to_owned());
    let quoted = serde_json::to_string(&condition).expect("a string serialises");
    let yaml = WORKFLOW.replace("{condition}", &quoted);
    let def = definition::parse_yaml(&yaml, "loop.yaml").expect("parse");
    let registered = definition::register(engine.cas(), &def).expect("register");
    engine
        .state()
        .register_workflow("loop", registered.hash, &uwf_state::NodeGuard::vouched())
        .unwrap();
    registered.hash
}

/// Writes a chain of `len` steps after `start` and returns the step hashes.
fn chain(cas: &Cas, start: Hash, workflow_schema: Hash, len: usize) -> Vec<Hash> {
    let output = cas
        .put_value(
            workflow_schema,
            &serde_json::json!({ "n": 1, "note": "one more round" }),
        )
        .unwrap()
        .hash;
    // Any stored node does as a detail; the output itself is one.
    let detail = output;
    let mut out = Vec::with_capacity(len);
    let mut prev: Option<Hash> = None;
    for i in 0..len {
        let step = StepNodePayload {
            start,
            prev,
            record: StepRecord {
                role: "work".into(),
                output,
                detail,
                agent: "bench".into(),
            },
            child_thread: None,
        };
        let h = cas.put_value(cas.types().step_node, &step).unwrap().hash;
        out.push(h);
        prev = Some(h);
        if (i + 1) % 2_000 == 0 {
            eprintln!("  chain: {} steps", i + 1);
        }
    }
    out
}

fn output_schema(engine: &Engine, workflow: Hash) -> Hash {
    let node = engine.cas().get(workflow).unwrap();
    let schema = node.payload["roles"]["work"]["outputSchema"]
        .as_str()
        .unwrap()
        .to_string();
    schema.parse().unwrap()
}

/// Adds `n` active threads (forks of `node`) to `state`, several at once.
fn add_threads(state: &Arc<FsState>, node: Hash, n: usize) {
    let workers = 8;
    std::thread::scope(|s| {
        for w in 0..workers {
            let state = Arc::clone(state);
            s.spawn(move || {
                for i in (w..n).step_by(workers) {
                    state
                        .insert_thread(
                            uwf_protocol::ThreadId::new(),
                            node,
                            &uwf_state::NodeGuard::vouched(),
                        )
                        .unwrap();
                    if i % 5_000 == 0 && i > 0 {
                        eprintln!("  threads: {i}");
                    }
                }
            });
        }
    });
}

fn median_p90(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p = |q: f64| ms(times[((times.len() - 1) as f64 * q).round() as usize]);
    (p(0.5), p(0.9))
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(RSS_OF) {
        rss_helper(&args[1..]);
    }
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let samples = env_number("UWF_BENCH_SAMPLES", 15);
    let run_steps = env_number("UWF_BENCH_RUN_STEPS", 20).max(1);
    let groups = std::env::var("UWF_BENCH_GROUPS").unwrap_or_else(|_| "length,active,run".into());
    let group = |g: &str| groups.split(',').any(|x| x.trim() == g);
    let bin = std::env::var_os("UWF_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    for b in ["uwf", "uwf-mock"] {
        assert!(
            bin.join(b).is_file(),
            "{} is missing: build it first (`cargo build --release -p uwf-cli -p uwf-mock`, or `just bench-step`)",
            bin.join(b).display()
        );
    }
    let keep = std::env::var_os("UWF_BENCH_DIR").map(PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let dir = keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("loop.mock.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let setup = Arc::new(Setup { bin, scenario });

    // One store for the thread lengths: a chain of the longest length, and a
    // thread at each length (a fork of the chain at that step).
    eprintln!(
        "preparing a chain of {} steps …",
        LENGTHS[LENGTHS.len() - 1]
    );
    let long_root = dir.join("lengths");
    let engine = Engine::open(&long_root).unwrap();
    let workflow = register(&engine);
    let schema = output_schema(&engine, workflow);
    let started = uwf_engine::start(&engine, workflow, "timing", None).unwrap();
    let steps = chain(
        engine.cas(),
        started.head,
        schema,
        LENGTHS[LENGTHS.len() - 1],
    );
    let mut configs: Vec<Config> = Vec::new();
    for len in LENGTHS.into_iter().filter(|_| group("length")) {
        let forked = uwf_engine::fork(&engine, steps[len - 1]).unwrap();
        let (s, root, id) = (
            Arc::clone(&setup),
            long_root.clone(),
            forked.thread.to_string(),
        );
        configs.push(Config {
            label: format!("step at thread length {len}"),
            run: Box::new(move || {
                let mut c = s.uwf(&root);
                c.args(["thread", "step", &id, "--agent", &s.mock_agent()]);
                timed(c)
            }),
            steps: 1,
            samples: Vec::new(),
        });
    }
    // `thread run`: one process runs `run_steps` steps, each sample from a
    // new fork at the length (untimed), so that the length stays the same.
    let engine = Arc::new(engine);
    for len in LENGTHS.into_iter().filter(|_| group("run")) {
        let (s, root, engine, node) = (
            Arc::clone(&setup),
            long_root.clone(),
            Arc::clone(&engine),
            steps[len - 1],
        );
        configs.push(Config {
            label: format!("thread run at thread length {len} (per step)"),
            run: Box::new(move || {
                let id = uwf_engine::fork(&engine, node).unwrap().thread.to_string();
                let mut c = s.uwf(&root);
                let k = run_steps.to_string();
                c.args(["thread", "run", &id, "--max-steps", &k]);
                c.args(["--agent", &s.mock_agent()]);
                // It stops at --max-steps, which is an error.
                measured(c, |code, err| {
                    code != 0 && err.contains("uwf::thread::max_steps")
                })
            }),
            steps: u32::try_from(run_steps).unwrap(),
            samples: Vec::new(),
        });
    }

    // One store per number of active threads, each with a thread of 10
    // steps to step.
    let mut alone = None;
    for n in ACTIVE.into_iter().filter(|_| group("active")) {
        eprintln!("preparing a store with {n} active threads …");
        let root = dir.join(format!("active-{n}"));
        let engine = Engine::open(&root).unwrap();
        let workflow = register(&engine);
        let schema = output_schema(&engine, workflow);
        let started = uwf_engine::start(&engine, workflow, "timing", None).unwrap();
        let steps = chain(engine.cas(), started.head, schema, 10);
        let forked = uwf_engine::fork(&engine, steps[9]).unwrap();
        let state = Arc::new(FsState::new(&root));
        // `started` and the fork are two; the rest are other threads.
        add_threads(&state, steps[9], n.saturating_sub(2));
        let (s, r, id) = (Arc::clone(&setup), root.clone(), forked.thread.to_string());
        configs.push(Config {
            label: format!("step with {n} active threads"),
            run: Box::new(move || {
                let mut c = s.uwf(&r);
                c.args(["thread", "step", &id, "--agent", &s.mock_agent()]);
                timed(c)
            }),
            steps: 1,
            samples: Vec::new(),
        });
        if alone.is_none() {
            let other = uwf_engine::fork(&engine, steps[9]).unwrap();
            alone = Some((root, other.thread.to_string()));
        }
    }
    // The agent alone, as uwf would start it, on a thread of 10 steps of
    // the smallest store. Before each run (untimed) uwf steps that thread,
    // so the agent's StepNode is always a new node, as in a real step.
    if let Some((root, id)) = alone {
        let s = Arc::clone(&setup);
        configs.push(Config {
            label: "uwf-mock alone (no uwf)".into(),
            run: Box::new(move || {
                let mut advance = s.uwf(&root);
                advance.args(["thread", "step", &id, "--agent", &s.mock_agent()]);
                timed(advance);
                let mut c = Command::new(s.bin.join("uwf-mock"));
                c.arg(&s.scenario)
                    .arg(&id)
                    .arg("work")
                    .env("UNCAGED_WORKFLOW_STORAGE_ROOT", &root)
                    .env("UWF_AGENT", s.mock_agent())
                    .env_remove("RUST_LOG");
                timed(c)
            }),
            steps: 1,
            samples: Vec::new(),
        });
    }

    // To time a uwf of before the per-thread head files (0.1.0), the stores
    // are given its layout: one threads.yaml.
    if std::env::var_os("UWF_BENCH_LEGACY_LAYOUT").is_some() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let root = entry.unwrap().path();
            let heads = root.join("threads");
            if !heads.is_dir() {
                continue;
            }
            let mut yaml = String::new();
            for (id, head) in FsState::new(&root).threads().unwrap() {
                yaml.push_str(&format!("{id}: {head}\n"));
            }
            std::fs::write(root.join("threads.yaml"), yaml).unwrap();
            std::fs::remove_dir_all(&heads).unwrap();
        }
    }

    // One untimed round warms the page cache and the derived caches.
    for c in &configs {
        (c.run)();
    }
    eprintln!("sampling {samples} rounds …");
    for _ in 0..samples {
        for c in &mut configs {
            let t = (c.run)();
            c.samples.push(t);
        }
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("\nwhole-process wall time, {samples} samples each, {cores} cores");
    println!("(thread run: {run_steps} steps a process, time per step)\n");
    println!("| configuration | median | p90 | peak RSS of uwf |");
    println!("|---|---|---|---|");
    for c in &mut configs {
        let mut times: Vec<Duration> = c.samples.iter().map(|s| s.time / c.steps).collect();
        let (median, p90) = median_p90(&mut times);
        let rss = c.samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        println!(
            "| {} | {median:.1} ms | {p90:.1} ms | {:.1} MiB |",
            c.label,
            rss as f64 / 1024.0
        );
    }
    if let Some(k) = keep {
        eprintln!("stores kept in {}", k.display());
    }
}
