//! `uwf suite run|report|diff`: the engine's [`uwf_engine::suite`] parsed
//! in and rendered out (JSON on stdout, a table for people on stderr).

use std::fmt::Write as _;

use serde_json::json;
use uwf_agent_kit::llm::{LlmClient, Message, resolve_model};
use uwf_cas::Hash;
use uwf_engine::suite::{self, Diff, LlmQuestion, Report, RunOptions, RunRecord, Stat, Suite};

use crate::cli::{Format, Global, SuiteCommand};
use crate::error::CliError;
use crate::output;

/// Runs a `suite` subcommand (not `schema`, which needs no store).
pub fn run(global: &Global, cmd: SuiteCommand, format: Option<Format>) -> Result<(), CliError> {
    let quiet = global.quiet;
    match cmd {
        SuiteCommand::Run {
            suite,
            repetitions,
            detach,
        } => {
            // Checked before the store is opened: a bad suite writes nothing.
            let loaded = Suite::load(&suite)?;
            let ctx = crate::open(global)?;
            if detach {
                return queue(&ctx, &loaded, repetitions, format, quiet);
            }
            let (workflow, _) = crate::cmd::workflow::resolve(&ctx, &loaded.workflow_arg(), true)?;
            let uwf = std::env::current_exe().map_err(|e| {
                CliError::Output(format!("cannot find the uwf binary to run the cases: {e}"))
            })?;
            let total = loaded.file.cases.len()
                * repetitions.unwrap_or(loaded.file.repetitions).max(1) as usize;
            let bar = Bar::new(total, quiet, "runs");
            let progress = |r: &RunRecord| bar.finished(r);
            let started =
                |c: &suite::CaseSpec, rep: u32| bar.running(&format!("{} #{rep}", c.name));
            let ask = llm_client(&ctx, &loaded.file)?;
            let opts = RunOptions {
                llm: ask.as_ref().map(|a| a as &suite::Ask<'_>),
                uwf,
                repetitions,
                progress: &progress,
                started: &started,
                cancel: crate::engine::cancel_token().clone(),
            };
            let outcome = suite::run(&ctx, &loaded, workflow, &opts);
            bar.clear();
            let (hash, stored) = outcome?;
            print_result(format, quiet, hash, &stored)
        }
        SuiteCommand::Wait {
            run,
            timeout,
            poll_ms,
        } => {
            let ctx = crate::open(global)?;
            let hash = run.parse::<Hash>()?;
            let (file, total) = match suite::load_any(ctx.cas(), hash)? {
                suite::Stored::Queued(q) => (Some(q.file), q.threads.len()),
                suite::Stored::Judged(r) => (None, r.runs.len()),
            };
            let ask = match &file {
                Some(f) => llm_client(&ctx, f)?,
                None => None,
            };
            let bar = Bar::new(total, quiet, "threads finished");
            let waiting = |states: &[suite::ThreadState]| bar.states(states);
            let progress = |r: &RunRecord| bar.judged(r);
            let started = |_: &suite::CaseSpec, _: u32| {};
            let opts = RunOptions {
                llm: ask.as_ref().map(|a| a as &suite::Ask<'_>),
                uwf: std::path::PathBuf::new(),
                repetitions: None,
                progress: &progress,
                started: &started,
                cancel: crate::engine::cancel_token().clone(),
            };
            let outcome = suite::wait(
                &ctx,
                hash,
                timeout,
                std::time::Duration::from_millis(poll_ms),
                &waiting,
                &opts,
            );
            bar.clear();
            let (judged, stored, _) = outcome?;
            print_result(format, quiet, judged, &stored)
        }
        SuiteCommand::Status { run } => {
            let ctx = crate::open(global)?;
            let hash = run.parse::<Hash>()?;
            let v = match suite::load_any(ctx.cas(), hash)? {
                suite::Stored::Judged(r) => json!({
                    "run": hash, "suite": r.suite, "state": "judged", "total": r.runs.len(),
                    "finished": r.runs.len(), "judged": hash, "threads": r.runs.iter().map(|x| json!({
                        "case": x.case, "repetition": x.repetition, "thread": x.thread,
                        "done": x.done,
                    })).collect::<Vec<_>>(),
                }),
                suite::Stored::Queued(q) => status_json(&ctx, hash, &q)?,
            };
            output::print(format, &v)?;
            if !quiet {
                eprintln!(
                    "suite run {hash}: {}, {} of {} thread(s) finished",
                    v["state"].as_str().unwrap_or_default(),
                    v["finished"],
                    v["total"]
                );
            }
            Ok(())
        }
        SuiteCommand::Report { run, markdown } => {
            let ctx = crate::open(global)?;
            let (hash, stored) = suite::load_judged(&ctx, run.parse::<Hash>()?)?;
            let report = suite::report(&stored);
            if markdown {
                return output::print_text(&report_markdown(hash, &report));
            }
            output::print(format, &report)?;
            if !quiet {
                eprint!("{}", report_text(hash, &report));
            }
            Ok(())
        }
        SuiteCommand::Diff { run_a, run_b } => {
            let ctx = crate::open(global)?;
            let (a, ra) = suite::load_judged(&ctx, run_a.parse::<Hash>()?)?;
            let (b, rb) = suite::load_judged(&ctx, run_b.parse::<Hash>()?)?;
            let d = suite::diff(&ra, &rb);
            output::print(
                format,
                &json!({ "a": a, "b": b, "cases": d.cases, "onlyA": d.only_a, "onlyB": d.only_b }),
            )?;
            if !quiet {
                eprint!("{}", diff_text(a, b, &d));
            }
            Ok(())
        }
        // Dispatched in main without a store.
        SuiteCommand::Schema => output::print(format, &suite::file_schema()),
    }
}

/// `suite run --detach`: the runs queued, the queued run stored.
fn queue(
    ctx: &crate::engine::Ctx,
    loaded: &Suite,
    repetitions: Option<u32>,
    format: Option<Format>,
    quiet: bool,
) -> Result<(), CliError> {
    // Refused before the workflow is registered: nothing is written.
    if let Some(c) = loaded.file.cases.iter().find(|c| c.fixture.is_some()) {
        return Err(suite::SuiteError::from(suite::QueueError::Fixture {
            case: c.name.clone(),
        })
        .into());
    }
    crate::cmd::worker::queue(ctx)?;
    let (workflow, payload) = crate::cmd::workflow::resolve(ctx, &loaded.workflow_arg(), true)?;
    let (hash, queued) = suite::detach(ctx, loaded, workflow, &payload.name, repetitions)?;
    output::print(
        format,
        &json!({
            "run": hash,
            "suite": queued.suite,
            "workflow": queued.workflow,
            "queued": true,
            "threads": queued.threads,
        }),
    )?;
    if !quiet {
        eprintln!(
            "suite {}: {} thread(s) queued for `uwf worker`s; `uwf suite wait {hash}` judges them once they are finished",
            queued.suite,
            queued.threads.len()
        );
    }
    Ok(())
}

/// `suite status` of a queued run.
fn status_json(
    ctx: &crate::engine::Ctx,
    hash: Hash,
    q: &suite::QueuedRun,
) -> Result<serde_json::Value, CliError> {
    let states = suite::thread_states(ctx, q)?;
    let judged = suite::judged(ctx.cas(), hash)?.map(|(h, _)| h);
    let finished = states.iter().filter(|s| s.finished()).count();
    let mut counts = serde_json::Map::new();
    let threads: Vec<serde_json::Value> = q
        .threads
        .iter()
        .zip(&states)
        .map(|(t, s)| {
            let mut v = json!({ "case": t.case, "repetition": t.repetition, "thread": t.thread });
            if let (Some(o), Ok(serde_json::Value::Object(state))) =
                (v.as_object_mut(), serde_json::to_value(s))
            {
                o.extend(state);
            }
            let name = v["state"].as_str().unwrap_or_default().to_string();
            let n = counts
                .get(&name)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            counts.insert(name, json!(n + 1));
            v
        })
        .collect();
    let state = if judged.is_some() {
        "judged"
    } else if finished == states.len() {
        "finished"
    } else {
        "running"
    };
    Ok(json!({
        "run": hash,
        "suite": q.suite,
        "workflow": q.workflow,
        "state": state,
        "total": states.len(),
        "finished": finished,
        "counts": counts,
        "judged": judged,
        "threads": threads,
    }))
}

/// stdout (and the table on stderr) of a judged run, from `suite run` and
/// `suite wait`.
fn print_result(
    format: Option<Format>,
    quiet: bool,
    hash: Hash,
    stored: &suite::SuiteRun,
) -> Result<(), CliError> {
    let report = suite::report(stored);
    let run_errors = stored.runs.iter().filter(|r| r.error.is_some()).count();
    let judge_errors: usize = stored
        .runs
        .iter()
        .map(|r| r.judges.iter().filter(|j| j.error.is_some()).count())
        .sum();
    let mut v = json!({
        "run": hash,
        "suite": stored.suite,
        "workflow": stored.workflow,
        "runs": stored.runs.len(),
        "runErrors": run_errors,
        "judgeErrors": judge_errors,
        "cases": report.cases,
    });
    if let Some(q) = stored.queued {
        v["queued"] = json!(q);
    }
    output::print(format, &v)?;
    if !quiet {
        eprint!("{}", report_text(hash, &report));
    }
    Ok(())
}

/// Progress of `suite run` and `suite wait` on stderr: on a terminal, a
/// bar (done / total, failures, elapsed) with each finished run printed
/// above it; otherwise one line per finished run, as before; nothing
/// with `--quiet`.
struct Bar {
    bar: Option<indicatif::ProgressBar>,
    quiet: bool,
    total: usize,
    done: std::cell::Cell<usize>,
    failed: std::cell::Cell<usize>,
}

impl Bar {
    fn new(total: usize, quiet: bool, unit: &str) -> Self {
        use std::io::IsTerminal;
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(&format!(
                    "{{spinner}} [{{bar:20}}] {{pos}}/{{len}} {unit} · {{prefix}} · {{elapsed}} · {{msg}}"
                ))
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_prefix("0 failed");
            bar.enable_steady_tick(std::time::Duration::from_millis(100));
            bar
        });
        Self {
            bar,
            quiet,
            total,
            done: std::cell::Cell::new(0),
            failed: std::cell::Cell::new(0),
        }
    }

    /// A line above the bar, or on stderr.
    fn line(&self, text: &str) {
        match &self.bar {
            Some(b) => b.println(text),
            None if !self.quiet => eprintln!("{text}"),
            None => {}
        }
    }

    fn running(&self, what: &str) {
        if let Some(b) = &self.bar {
            b.set_message(format!("running {what}"));
        }
    }

    /// A run of `suite run` ended.
    fn finished(&self, r: &RunRecord) {
        self.done.set(self.done.get() + 1);
        if failed(r) {
            self.failed.set(self.failed.get() + 1);
        }
        self.line(&format!(
            "[{}/{}] {}",
            self.done.get(),
            self.total,
            run_line(r)
        ));
        if let Some(b) = &self.bar {
            b.set_position(self.done.get() as u64);
            b.set_prefix(format!("{} failed", self.failed.get()));
        }
    }

    /// The threads of `suite wait` changed state.
    fn states(&self, states: &[suite::ThreadState]) {
        if let Some(b) = &self.bar {
            let finished = states.iter().filter(|s| s.finished()).count();
            let failed = states
                .iter()
                .filter(|s| s.finished() && **s != suite::ThreadState::Done)
                .count();
            let running = states
                .iter()
                .filter(|s| matches!(s, suite::ThreadState::Running { .. }))
                .count();
            b.set_position(finished as u64);
            b.set_prefix(format!("{failed} not done"));
            b.set_message(format!("{running} running"));
        }
    }

    /// A run of `suite wait` was judged.
    fn judged(&self, r: &RunRecord) {
        self.done.set(self.done.get() + 1);
        if let Some(b) = &self.bar {
            b.set_message("judging");
        }
        self.line(&format!(
            "[{}/{}] {}",
            self.done.get(),
            self.total,
            run_line(r)
        ));
    }

    fn clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A run that did not end cleanly or whose judges failed.
fn failed(r: &RunRecord) -> bool {
    r.error.is_some() || r.judges.iter().any(|j| j.error.is_some())
}

/// The model client of `llm` judges (`None` when the suite has none): the
/// store's configuration as `uwf-llm` reads it, with the API keys of the
/// environment or, failing that, of the store's `.env`.
fn llm_client(
    ctx: &crate::engine::Ctx,
    s: &suite::SuiteFile,
) -> Result<Option<impl Fn(&LlmQuestion<'_>) -> Result<String, String>>, CliError> {
    if !s
        .judges
        .iter()
        .any(|j| matches!(j, suite::JudgeSpec::Llm { .. }))
    {
        return Ok(None);
    }
    let config = ctx.state().config()?.unwrap_or_default();
    let secrets: std::collections::HashMap<String, String> =
        ctx.state().secrets()?.into_iter().collect();
    Ok(Some(move |q: &LlmQuestion<'_>| {
        let alias = match q.model {
            Some(m) => m.to_string(),
            None => resolve_model(&config, Some(JUDGE_SCENARIO), q.workflow, JUDGE_SCENARIO)
                .map_err(|e| e.to_string())?,
        };
        let client = LlmClient::from_config_with(&config, &alias, |var| {
            std::env::var(var)
                .ok()
                .or_else(|| secrets.get(var).cloned())
        })
        .map_err(|e| e.to_string())?;
        client
            .chat(
                &[
                    Message::system(q.system.clone()),
                    Message::user(q.user.clone()),
                ],
                true,
            )
            .map(|r| r.content)
            .map_err(|e| e.to_string())
    }))
}

/// The model scenario of `llm` judges (`modelOverrides.judge`).
const JUDGE_SCENARIO: &str = "judge";

/// One finished run, for the progress on stderr.
fn run_line(r: &RunRecord) -> String {
    let thread = r.thread.map_or_else(|| "-".to_string(), |t| t.to_string());
    let scores: Vec<String> = r
        .judges
        .iter()
        .map(|s| match s.score {
            Some(x) => format!("{}={x:.2}", s.judge),
            None => format!("{}=error", s.judge),
        })
        .collect();
    let mut usage = String::new();
    if let Some(t) = r.tokens {
        let _ = write!(usage, ", {t} tokens");
    }
    if let Some(c) = r.cost_usd {
        let _ = write!(usage, ", ${c:.4}");
    }
    let mut line = format!(
        "{} #{}: thread {thread}, {}, {} step(s), {} ms{usage}; {}",
        r.case,
        r.repetition,
        if r.done { "done" } else { "not done" },
        r.steps,
        r.duration_ms,
        scores.join(" ")
    );
    if let Some(e) = &r.error {
        let _ = write!(line, "\n  run error: {e}");
    }
    for s in &r.judges {
        if let Some(e) = &s.error {
            let _ = write!(line, "\n  judge {}: {e}", s.judge);
        }
    }
    line
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.3}"))
}

fn stat_cells(s: &Stat) -> [String; 6] {
    [
        s.judge.clone(),
        format!(
            "{}{}",
            s.n,
            if s.errors > 0 {
                format!(" ({} failed)", s.errors)
            } else {
                String::new()
            }
        ),
        num(s.mean),
        num(s.min),
        num(s.max),
        num(s.spread),
    ]
}

/// The report for people.
fn report_text(hash: Hash, r: &Report) -> String {
    let mut out = format!("suite {} run {hash} (workflow {})\n", r.suite, r.workflow);
    for c in &r.cases {
        let _ = writeln!(out, "  {} ({} run(s))", c.case, c.runs);
        let _ = writeln!(
            out,
            "    {:<20} {:>12} {:>7} {:>7} {:>7} {:>7}",
            "judge", "n", "mean", "min", "max", "spread"
        );
        for s in &c.judges {
            let [j, n, mean, min, max, spread] = stat_cells(s);
            let _ = writeln!(
                out,
                "    {j:<20} {n:>12} {mean:>7} {min:>7} {max:>7} {spread:>7}"
            );
        }
    }
    out
}

/// `suite report --markdown`.
fn report_markdown(hash: Hash, r: &Report) -> String {
    let mut out = format!(
        "# Suite {} — run `{hash}`\n\nWorkflow `{}`.\n\n| case | judge | n | mean | min | max | spread |\n|---|---|---|---|---|---|---|\n",
        r.suite, r.workflow
    );
    for c in &r.cases {
        for s in &c.judges {
            let [j, n, mean, min, max, spread] = stat_cells(s);
            let _ = writeln!(
                out,
                "| {} | {} | {n} | {mean} | {min} | {max} | {spread} |",
                c.case.replace('|', "\\|"),
                j.replace('|', "\\|")
            );
        }
    }
    out
}

/// The diff for people.
fn diff_text(a: Hash, b: Hash, d: &Diff) -> String {
    let mut out = format!("suite diff {a} → {b} (90 % bootstrap interval of the change)\n");
    for c in &d.cases {
        let _ = writeln!(out, "  {}", c.case);
        for j in &c.judges {
            let verdict = serde_json::to_value(j.verdict)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    {:<20} {:>7} → {:<7} change {:>7} [{}, {}] {verdict}",
                j.judge,
                num(j.mean_a),
                num(j.mean_b),
                num(j.change),
                num(j.low),
                num(j.high)
            );
        }
    }
    for c in &d.only_a {
        let _ = writeln!(out, "  {c}: only in {a}");
    }
    for c in &d.only_b {
        let _ = writeln!(out, "  {c}: only in {b}");
    }
    out
}
