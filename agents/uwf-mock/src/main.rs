//! `uwf-mock <scenario.yaml> <thread-id> <role>`: a scripted uwf agent for
//! tests, demos and CI.
//!
//! The n-th run of a role in a thread (n = the role's previous steps in
//! the thread) gets the role's n-th scenario entry; past the end the last
//! entry repeats. See `uwf-mock --help` for the scenario format.

mod fault;
mod scenario;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use uwf_agent_kit::{Invocation, Reply, Runner};

use crate::scenario::{Effect, FailFirst, Scenario};

const ABOUT: &str = "\
A scripted uwf agent for tests, demos and CI. It answers each role from a
YAML scenario: the n-th run of a role in a thread (n = the role's previous
steps in the thread) gets the role's n-th entry, and past the end the last
entry repeats. Give the scenario as an absolute path: uwf may run the agent
from another directory.

  roles:
    planner:
      - output: { plan: \"…\", steps: [\"…\"] }   # structured output
        answer: \"raw text\"                       # optional: stored as the detail
    reviewer:
      - text: \"---\\napproved: false\\n---\\nbody\"  # frontmatter answer, extracted
        delay: 300ms                             # optional: sleep first
        stderr: \"reviewing…\"                     # optional: written to stderr
      - exit: 3                                  # exit 3, write nothing
      - fault: garbage                           # misbehave (see below)
    developer:
      - output: { done: true }
        failFirst: 2        # the first 2 attempts of this run exit 1 (failExit: N
                            # for another status, failDelay: 5s to sleep first);
                            # counted under <root>/.uwf-mock/, so retries see it

Faults: no-output (print nothing, exit 0), garbage (print a non-hash),
unknown-hash (print a hash not in the store), not-a-step (print the
StartNode's hash), wrong-prev | wrong-start | wrong-role (write a step with
that link wrong; the entry needs a valid `output` or `text`), invalid-output
(write a step whose output does not satisfy the role's schema).

Upstream uwf's scenario format is read too: `steps: [{role, output}]`, where
`output` is a frontmatter answer; each role gets its steps in order (as
`text` entries).";

fn main() -> ExitCode {
    Runner::new("uwf-mock")
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .args(&["scenario.yaml"])
        .run_with(respond)
}

fn respond(inv: &Invocation) -> Result<Reply, miette::Report> {
    let path = inv.args().first().map_or("", String::as_str);
    let scenario = Scenario::load(Path::new(path))?;
    let entries = scenario.entries(inv.role())?;
    let ctx = inv.load()?;
    // Which run of the role this is needs the thread's history; a role
    // scripted with one entry and no failFirst gets that entry every time,
    // so its history is never read (a step then costs the same on a thread
    // of any length).
    let run = match entries {
        [only] if only.fail_first.is_none() => 0,
        _ => ctx.runs_of_role()?,
    };
    let entry = scenario.entry(ctx.role(), run)?;
    if let Some(fail) = entry.fail_first
        && let Some(code) = scripted_failure(inv, run, fail)?
    {
        return Ok(Reply::Exit(code));
    }
    if let Some(delay) = entry.delay {
        std::thread::sleep(delay);
    }
    if let Some(text) = &entry.stderr {
        let newline = if text.ends_with('\n') { "" } else { "\n" };
        // Best effort: a closed stderr must not turn into a failure.
        let _ = write!(std::io::stderr(), "{text}{newline}");
    }
    match &entry.effect {
        Effect::Exit(code) => Ok(Reply::Exit(*code)),
        Effect::Step(answer) => {
            let run = answer
                .to_run()
                .ok_or_else(|| miette::miette!("scenario entry without an output"))?;
            Ok(Reply::Step(uwf_agent_kit::finish(&ctx, inv.name(), run)?))
        }
        Effect::Fault(fault, answer) => fault::apply(*fault, &ctx, inv.name(), answer.as_ref()),
    }
}

/// Counts this attempt of run `run` of the role in a file under the
/// storage root; while fewer than `fail.times` attempts failed, fails this
/// one too (after `fail.delay`): returns its exit status.
fn scripted_failure(
    inv: &Invocation,
    run: usize,
    fail: FailFirst,
) -> Result<Option<u8>, miette::Report> {
    // Private, like everything under the root (docs/state.md, "Secrets
    // and file modes").
    let dir = inv.root().join(".uwf-mock");
    uwf_util::private::create_dir_all(&dir)
        .map_err(|e| miette::miette!("cannot create {}: {e}", dir.display()))?;
    let safe: String = inv
        .role()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let path = dir.join(format!("{}-{safe}-{run}.failures", inv.thread()));
    let failed: u32 = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    if failed >= fail.times {
        return Ok(None);
    }
    uwf_util::private::open_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{}", failed + 1))
        .map_err(|e| miette::miette!("cannot write {}: {e}", path.display()))?;
    if let Some(delay) = fail.delay {
        std::thread::sleep(delay);
    }
    let _ = writeln!(
        std::io::stderr(),
        "uwf-mock: scripted failure {} of {} (exit {})",
        failed + 1,
        fail.times,
        fail.exit
    );
    Ok(Some(fail.exit))
}
