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
        SuiteCommand::Run { suite, repetitions } => {
            // Checked before the store is opened: a bad suite writes nothing.
            let loaded = Suite::load(&suite)?;
            let ctx = crate::open(global)?;
            let (workflow, _) = crate::cmd::workflow::resolve(&ctx, &loaded.workflow_arg(), true)?;
            let uwf = std::env::current_exe().map_err(|e| {
                CliError::Output(format!("cannot find the uwf binary to run the cases: {e}"))
            })?;
            let total = loaded.file.cases.len()
                * repetitions.unwrap_or(loaded.file.repetitions).max(1) as usize;
            let done = std::cell::Cell::new(0usize);
            let progress = |r: &RunRecord| {
                done.set(done.get() + 1);
                if !quiet {
                    eprintln!("[{}/{total}] {}", done.get(), run_line(r));
                }
            };
            let ask = llm_client(&ctx, &loaded)?;
            let opts = RunOptions {
                llm: ask.as_ref().map(|a| a as &suite::Ask<'_>),
                uwf,
                repetitions,
                progress: &progress,
                cancel: crate::engine::cancel_token().clone(),
            };
            let (hash, stored) = suite::run(&ctx, &loaded, workflow, &opts)?;
            let report = suite::report(&stored);
            let run_errors = stored.runs.iter().filter(|r| r.error.is_some()).count();
            let judge_errors: usize = stored
                .runs
                .iter()
                .map(|r| r.judges.iter().filter(|j| j.error.is_some()).count())
                .sum();
            output::print(
                format,
                &json!({
                    "run": hash,
                    "suite": stored.suite,
                    "workflow": stored.workflow,
                    "runs": stored.runs.len(),
                    "runErrors": run_errors,
                    "judgeErrors": judge_errors,
                    "cases": report.cases,
                }),
            )?;
            if !quiet {
                eprint!("{}", report_text(hash, &report));
            }
            Ok(())
        }
        SuiteCommand::Report { run, markdown } => {
            let ctx = crate::open(global)?;
            let hash = run.parse::<Hash>()?;
            let report = suite::report(&suite::load_run(ctx.cas(), hash)?);
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
            let a = run_a.parse::<Hash>()?;
            let b = run_b.parse::<Hash>()?;
            let d = suite::diff(
                &suite::load_run(ctx.cas(), a)?,
                &suite::load_run(ctx.cas(), b)?,
            );
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

/// The model client of `llm` judges (`None` when the suite has none): the
/// store's configuration as `uwf-llm` reads it, with the API keys of the
/// environment or, failing that, of the store's `.env`.
fn llm_client(
    ctx: &crate::engine::Ctx,
    s: &Suite,
) -> Result<Option<impl Fn(&LlmQuestion<'_>) -> Result<String, String>>, CliError> {
    if !s
        .file
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
    let mut line = format!(
        "{} #{}: thread {thread}, {}, {} step(s), {} ms; {}",
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
