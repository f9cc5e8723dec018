//! `uwf-hermes [--max-turns N] [--hermes-arg ARG]... <thread-id> <role>`:
//! a uwf agent that runs each role with the [Hermes Agent] CLI.
//!
//! For one step it
//!
//! 1. builds the role's prompt with the agent kit (format instruction, scope,
//!    role prompt, task, history, edge prompt);
//! 2. runs `hermes chat -q <prompt> --yolo [--max-turns N] --quiet <args…>`
//!    non-interactively (stdin closed, the current directory, the user's
//!    `HERMES_HOME`, `HERMES_DISABLE_LAZY_INSTALLS=1`);
//! 3. takes the session id from hermes' stderr and reads the whole session
//!    with `hermes sessions export --session-id <id> -`;
//! 4. stores one `hermes-turn` node per message and a `hermes-detail` node
//!    pointing at them (or a `hermes-raw-output` node when no transcript can
//!    be had);
//! 5. hands the answer to the kit, which extracts the role's output (YAML
//!    frontmatter first, the LLM fallback otherwise) and writes the StepNode.
//!
//! Any failure — hermes missing, a non-zero exit, the turn budget used up, no
//! answer — is reported on stderr with exit status 1, and nothing is written
//! to the thread. See `docs/agents.md`.
//!
//! [Hermes Agent]: https://pypi.org/project/hermes-agent/

mod detail;
mod error;
mod hermes;
mod transcript;

use std::process::ExitCode;

use clap::Parser;
use uwf_agent_kit::AgentContext;
use uwf_agent_kit::AgentRun;
use uwf_agent_kit::cli_agent;

use crate::error::HermesError;
use crate::hermes::{Chat, Hermes};

/// The agent's name, written into each StepNode's `agent` field.
const NAME: &str = "uwf-hermes";

/// Environment variable with extra `hermes chat` arguments (split like a
/// shell command line), placed before those of `--hermes-arg`.
const ENV_ARGS: &str = "UWF_HERMES_ARGS";

#[derive(Debug, Parser)]
#[command(
    name = NAME,
    version,
    about = "A uwf agent that runs each role with the Hermes Agent CLI.",
    long_about = "A uwf agent that runs each role with the Hermes Agent CLI (hermes-agent 0.19.0).

`uwf thread step` runs it as `uwf-hermes [options] <thread-id> <role>`. It builds the role's
prompt, runs `hermes chat -q <prompt> --yolo --max-turns N --quiet` in the current directory,
stores the session transcript as hermes-turn / hermes-detail nodes, extracts the role's output
from the answer and prints the new StepNode's hash. On failure nothing is written to the thread.",
    after_help = "Environment:
  HERMES_BIN                     the hermes executable (default: `hermes` on PATH)
  HERMES_HOME                    hermes' state and config directory (default ~/.hermes)
  UWF_HERMES_MAX_TURNS           default for --max-turns
  UWF_HERMES_TIMEOUT             default for --timeout
  UWF_HERMES_ARGS                extra hermes arguments, split like a shell command line
  UNCAGED_WORKFLOW_STORAGE_ROOT  the storage root (set by uwf; default ~/.uncaged/workflow)
  RUST_LOG                       log filter for stderr (default: warn)"
)]
struct Args {
    /// Budget of model calls for the role (`hermes chat --max-turns`); a tool
    /// call followed by an answer needs 2. Default: hermes' own
    /// (`agent.max_turns` in its config, else 90).
    #[arg(long, value_name = "N", env = "UWF_HERMES_MAX_TURNS",
          value_parser = clap::value_parser!(u32).range(1..))]
    max_turns: Option<u32>,

    /// Stop hermes (and everything it started) when a step runs longer
    /// than this (e.g. `20m`). Default: no limit of its own (`uwf thread
    /// step --timeout` still applies).
    #[arg(long, value_name = "DURATION", env = "UWF_HERMES_TIMEOUT",
          value_parser = humantime::parse_duration)]
    timeout: Option<std::time::Duration>,

    /// An extra argument for `hermes chat`, after `--quiet` (repeat for
    /// several, e.g. `--hermes-arg -t --hermes-arg terminal,file`).
    #[arg(long = "hermes-arg", value_name = "ARG", allow_hyphen_values = true)]
    hermes_args: Vec<String>,

    /// The thread to run a step of.
    thread: String,

    /// The role to run.
    role: String,
}

fn main() -> ExitCode {
    uwf_agent_kit::install_report_handler();
    let args = Args::parse();
    uwf_agent_kit::conclude(cli_agent::step(NAME, &args.thread, &args.role, |ctx| {
        let extra = cli_agent::extra_args(ENV_ARGS, &args.hermes_args)?;
        let hermes = Hermes::from_env(args.timeout);
        step(ctx, &hermes, args.max_turns, &extra)
    }))
}

/// Runs hermes for the context's role and stores the detail nodes; returns
/// the run for the kit to extract and write.
fn step(
    ctx: &AgentContext,
    hermes: &Hermes,
    max_turns: Option<u32>,
    extra: &[String],
) -> Result<AgentRun, HermesError> {
    let prompt = ctx.prompt()?;
    let chat = hermes.chat(&prompt, max_turns, extra)?;
    let (answer, detail) = record(ctx, hermes, &chat)?;
    Ok(AgentRun::text(answer).with_detail(detail))
}

/// The answer and the detail node of a finished chat: the transcript when
/// hermes can export it, else hermes' stdout.
fn record(
    ctx: &AgentContext,
    hermes: &Hermes,
    chat: &Chat,
) -> Result<(String, uwf_cas::Hash), HermesError> {
    let duration_ms = u64::try_from(chat.duration.as_millis()).unwrap_or(u64::MAX);
    let stdout_answer = chat.stdout.trim_end_matches(['\n', '\r']).to_owned();
    let Some(id) = &chat.session_id else {
        tracing::warn!(
            "hermes printed no session id on stderr; storing its stdout as the detail (no transcript)"
        );
        let detail = detail::store_raw(ctx.store(), &chat.stdout)?;
        return Ok((stdout_answer, detail));
    };
    let session = match hermes.export(id) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                session = %id,
                error = %e,
                "cannot read the session transcript; storing hermes' stdout as the detail"
            );
            let detail = detail::store_raw(ctx.store(), &chat.stdout)?;
            return Ok((stdout_answer, detail));
        }
    };
    // hermes' own definition of success: the session ends with an
    // assistant message that stopped normally. Its content is the answer
    // (stdout minus the newline, without stray warning lines).
    let answer =
        transcript::final_answer(&session.messages).map_err(|why| HermesError::Unfinished {
            session: id.clone(),
            why,
        })?;
    let answer = if answer.trim().is_empty() {
        stdout_answer
    } else {
        answer
    };
    let detail = detail::store_session(ctx.store(), &session, duration_ms)?;
    tracing::debug!(session = %id, %detail, turns = session.messages.len(), "transcript stored");
    Ok((answer, detail))
}
