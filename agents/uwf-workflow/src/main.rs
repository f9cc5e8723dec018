//! `uwf-workflow <child-workflow> [options] <thread-id> <role>`: a uwf
//! agent that does a role's work by running a whole child thread of another
//! workflow (docs/nested-workflows.md: "workflow as agent", with a Merkle call stack).
//!
//! 1. Checks the call depth: the child would be at depth
//!    `max($UWF_CALL_DEPTH, parentState hops above this thread) + 1`, which
//!    must not exceed `--max-depth` / `$UWF_MAX_CALL_DEPTH` (default 8). A
//!    workflow calling itself is stopped here, before a child is started.
//! 2. Builds the child's task from the parent's ([`prompt`]).
//! 3. Starts the child thread — its StartNode gets `parentState` = the
//!    parent thread's head (its StartNode if no step ran yet) — and runs it
//!    to its end with the `uwf` binary (`uwf thread start --parent`, `uwf
//!    thread run`; [`child`]), with `$UWF_CALL_DEPTH` = the child's depth
//!    for its agents; or continues the child the parent waits for. The
//!    child's roles get their agents from `config.yaml`.
//! 4. Maps the child's final output onto the parent role's schema
//!    ([`mapping`]) and writes the parent's StepNode with `detail` and
//!    `childThread` = the child's terminal StepNode.
//!
//! Any failure leaves the parent thread unchanged: nothing is printed on
//! stdout and the exit status is 1 (2 for usage errors); a failed child
//! thread is kept for inspection and named in the report. See
//! docs/nested-workflows.md.

mod child;
mod error;
mod mapping;
mod prompt;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;
use uwf_agent_kit::{AgentContext, AgentRun, Invocation};
use uwf_cas::Hash;
use uwf_moderator::thread;
use uwf_state::state::FsState;
use uwf_util::supervise::CancelToken;

use crate::error::WorkflowAgentError;

/// The agent's name (the StepNode's `agent` when uwf does not say).
pub const NAME: &str = "uwf-workflow";

/// Environment variable holding the depth of the thread an agent runs in:
/// unset (0) at the top level; uwf-workflow sets it to the child's depth
/// for the child's `uwf`, whose agents inherit it.
pub const CALL_DEPTH_ENV: &str = "UWF_CALL_DEPTH";

/// Environment variable with the depth limit (when `--max-depth` is not given).
pub const MAX_DEPTH_ENV: &str = "UWF_MAX_CALL_DEPTH";

/// The depth limit when neither `--max-depth` nor [`MAX_DEPTH_ENV`] says.
pub const DEFAULT_MAX_DEPTH: usize = 8;

const ABOUT: &str = "\
A uwf agent that does a role's work by running a whole child thread of another
workflow to its end. Use it wherever an agent command goes: in config.yaml
(`agents: {develop: {command: uwf-workflow, args: [develop]}}` plus
`agentOverrides`), or `--agent \"uwf-workflow develop\"`.";

const AFTER_HELP: &str = "\
The child's StartNode links the parent's head (parentState) and the parent's
StepNode links the child's terminal StepNode (childThread and detail), so
`uwf thread stack`, `uwf cas walk` and `uwf cas gc` follow the call both ways.
The child's roles get their agents from config.yaml, as in a top-level run.

Environment:
  UWF_CALL_DEPTH        depth of the calling thread (set for the child by uwf-workflow)
  UWF_MAX_CALL_DEPTH    depth limit when --max-depth is not given [default: 8]
  UWF_BIN               the uwf binary that runs the child [default: uwf on PATH,
                        else the one beside uwf-workflow]
  UNCAGED_WORKFLOW_STORAGE_ROOT   the storage root (uwf passes it)

See docs/nested-workflows.md.";

/// The command line.
#[derive(Debug, Parser)]
#[command(name = NAME, version, about = ABOUT, after_help = AFTER_HELP)]
struct Args {
    /// The child workflow: a registered name, a Workflow hash, or a YAML file.
    child_workflow: String,
    /// The parent thread (uwf passes it).
    thread: String,
    /// The parent role (uwf passes it).
    role: String,
    /// Stop the child after this many steps (the parent step then fails).
    #[arg(long, value_name = "N", default_value_t = 100)]
    max_steps: usize,
    /// Deepest child allowed (top-level threads are depth 0) [default: $UWF_MAX_CALL_DEPTH, else 8].
    #[arg(long, value_name = "D")]
    max_depth: Option<usize>,
    /// Characters of the parent's earlier steps copied into the child's task.
    #[arg(long, value_name = "CHARS", default_value_t = prompt::DEFAULT_CONTEXT_QUOTA)]
    context_quota: usize,
}

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    uwf_agent_kit::install_report_handler();
    if argv.len() == 1 {
        // Not a protocol call (uwf always passes the thread and the role).
        let mut cmd = <Args as clap::CommandFactory>::command();
        eprintln!("{}", cmd.render_help());
        return ExitCode::SUCCESS;
    }
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            // Nothing sensible to do if the terminal is gone.
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(&args) {
        Err(e @ WorkflowAgentError::ChildWaiting { .. }) => {
            eprintln!("{:?}", miette::Report::new(e));
            ExitCode::from(error::EXIT_WAITING)
        }
        other => uwf_agent_kit::conclude(other.map_err(miette::Report::new)),
    }
}

/// A number from the environment: `None` when unset or empty.
fn env_number(var: &'static str) -> Result<Option<usize>, WorkflowAgentError> {
    match std::env::var(var) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| WorkflowAgentError::BadNumber { var, value: v }),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(WorkflowAgentError::BadNumber {
            var,
            value: v.to_string_lossy().into_owned(),
        }),
    }
}

fn run(args: &Args) -> Result<Hash, WorkflowAgentError> {
    let root = uwf_util::root::resolve_root(None)?;
    // Before tracing and the limits, so RUST_LOG and UWF_MAX_CALL_DEPTH in
    // `.env` apply.
    FsState::new(&root.path).load_env()?;
    uwf_util::trace::init_tracing(0, false);
    let inv = Invocation::new(
        NAME,
        root.path.clone(),
        args.thread.clone(),
        args.role.clone(),
        vec![args.child_workflow.clone()],
    );
    let ctx = inv.load()?;
    let limit = match args.max_depth {
        Some(d) => d,
        None => env_number(MAX_DEPTH_ENV)?.unwrap_or(DEFAULT_MAX_DEPTH),
    };
    let depth = check_depth(&ctx, &args.child_workflow, limit)?;

    let task = prompt::child_prompt(&ctx, args.context_quota)?;
    // SIGINT/SIGTERM (the parent engine stopping this agent) stop the
    // child's `uwf`, which stops its running agent's process group.
    let cancel = CancelToken::new();
    let token = cancel.clone();
    // Fails only if a handler is already installed: then keep that one.
    let _ = ctrlc::set_handler(move || token.cancel());
    let uwf = child::Uwf::find(depth, cancel)?;
    let parent = ctx.head();
    let (child, ended) = match uwf.waiting_child(&ctx)? {
        Some((child, ended)) => {
            tracing::info!(%child, parent = %parent, "continuing the child thread that waited");
            (child, ended)
        }
        None => {
            let started = uwf.start(&args.child_workflow, parent, &task)?;
            tracing::info!(
                child = %started.thread,
                workflow = %args.child_workflow,
                parent = %parent,
                depth,
                "child thread started"
            );
            (started.thread, None)
        }
    };
    let terminal: Hash = match ended {
        Some(head) => head,
        None => uwf.run(child, &args.child_workflow, args.max_steps)?.head,
    };
    let child_view = thread::load(ctx.store(), terminal)?;
    let (output, how) = mapping::map_output(&ctx, &child_view, child)?;
    tracing::info!(
        child = %child,
        %terminal,
        mapping = how.as_str(),
        "child thread done"
    );
    let run = AgentRun::output(output)
        .with_detail(terminal)
        .with_child_thread(terminal);
    Ok(uwf_agent_kit::finish(&ctx, inv.name(), run)?)
}

/// The child's depth, or [`WorkflowAgentError::DepthExceeded`] when it
/// would exceed `limit`.
fn check_depth(
    ctx: &AgentContext,
    child_workflow: &str,
    limit: usize,
) -> Result<usize, WorkflowAgentError> {
    let frames = thread::call_stack(ctx.store(), ctx.head())?;
    let from_env = env_number(CALL_DEPTH_ENV)?.unwrap_or(0);
    let here = from_env.max(frames.len().saturating_sub(1));
    let depth = here + 1;
    if depth <= limit {
        return Ok(depth);
    }
    let mut names: Vec<String> = frames
        .iter()
        .rev()
        .map(|f| match &f.role {
            Some(r) => format!("{} (as {r})", f.view.workflow.name),
            None => f.view.workflow.name.clone(),
        })
        .collect();
    names.push(format!("{child_workflow} (as {})", ctx.role()));
    Err(WorkflowAgentError::DepthExceeded {
        role: ctx.role().to_owned(),
        thread: ctx.thread_id(),
        workflow: child_workflow.to_owned(),
        depth,
        limit,
        stack: compact_stack(&names),
    })
}

/// `a → b → b → b` as `a → b ×3`.
fn compact_stack(names: &[String]) -> String {
    let mut parts: Vec<(String, usize)> = Vec::new();
    for n in names {
        match parts.last_mut() {
            Some((last, count)) if last == n => *count += 1,
            _ => parts.push((n.clone(), 1)),
        }
    }
    parts
        .into_iter()
        .map(|(n, c)| if c > 1 { format!("{n} ×{c}") } else { n })
        .collect::<Vec<_>>()
        .join(" → ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_frames_are_counted() {
        let names: Vec<String> = ["a", "b (as r)", "b (as r)", "b (as r)", "c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(compact_stack(&names), "a → b (as r) ×3 → c");
        assert_eq!(compact_stack(&[]), "");
    }
}
