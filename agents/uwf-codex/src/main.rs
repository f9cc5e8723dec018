//! `uwf-codex [options] <thread-id> <role>`: a uwf agent that runs each
//! role with OpenAI's [Codex CLI].
//!
//! For one step it
//!
//! 1. builds the role's prompt with the agent kit;
//! 2. runs `codex exec --json --skip-git-repo-check --sandbox
//!    workspace-write [--model M] [-c model_provider=…] <args…> -- <prompt>`
//!    non-interactively, in its own process group, with a timeout, printing
//!    the commands Codex runs and their exit codes on stderr as they happen;
//! 3. reads the session's rollout file
//!    (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*-<thread id>.jsonl`) and
//!    stores one `codex-turn` node per item under a `codex-detail` node;
//! 4. hands the last agent message to the kit, which extracts the role's
//!    output (YAML frontmatter first, the LLM fallback otherwise) and writes
//!    the StepNode.
//!
//! A failed turn, a non-zero exit, a missing `codex` or a missing key are
//! reported on stderr with exit status 1, and nothing is written to the
//! thread. With `--provider`, the key stays in its environment variable
//! (Codex reads it itself): never on a command line, logged or stored. See
//! `docs/agents.md`.
//!
//! [Codex CLI]: https://www.npmjs.com/package/@openai/codex

mod codex;
mod error;
mod transcript;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::{Map, Value};
use uwf_agent_kit::cli_agent;
use uwf_agent_kit::{AgentContext, AgentRun};

use crate::codex::{Provider, Settings};
use crate::error::CodexError;

/// The agent's name, written into each StepNode's `agent` field.
const NAME: &str = "uwf-codex";

/// Environment variable with extra `codex exec` arguments (split like a
/// shell command line), placed before those of `--codex-arg`.
const ENV_ARGS: &str = "UWF_CODEX_ARGS";

#[derive(Debug, Parser)]
#[command(
    name = NAME,
    version,
    about = "A uwf agent that runs each role with the Codex CLI (`codex exec`).",
    long_about = "A uwf agent that runs each role with the Codex CLI (@openai/codex 0.169.0).

`uwf thread step` runs it as `uwf-codex [options] <thread-id> <role>`. It builds the role's
prompt, runs `codex exec --json --sandbox workspace-write` in the working directory (the
commands Codex runs appear on stderr as they happen), stores the session's rollout as
codex-turn / codex-detail nodes, extracts the role's output from the last agent message and
prints the new StepNode's hash. On failure nothing is written to the thread.",
    after_help = "Environment (read from the storage root's .env too):
  CODEX_BIN                      the codex executable (default: `codex` on PATH)
  OPENAI_API_KEY                 the key for Codex's default provider (or a `codex login`)
  CODEX_HOME                     Codex's directory (default ~/.codex), where rollouts are
  UWF_CODEX_MODEL, UWF_CODEX_SANDBOX, UWF_CODEX_TIMEOUT, UWF_CODEX_CWD, UWF_CODEX_PROVIDER
                                 defaults for the options
  UWF_CODEX_ARGS                 extra codex exec arguments, split like a shell command line
  UNCAGED_WORKFLOW_STORAGE_ROOT  the storage root (set by uwf; default ~/.uncaged/workflow)"
)]
struct Args {
    /// Model for the session (`codex exec --model`). Default: Codex's.
    #[arg(long, value_name = "MODEL", env = "UWF_CODEX_MODEL")]
    model: Option<String>,

    /// `codex exec --sandbox`: `workspace-write` lets it edit the working
    /// directory and run commands there; `read-only` for roles that only
    /// look; `danger-full-access` for none.
    #[arg(
        long,
        value_name = "MODE",
        env = "UWF_CODEX_SANDBOX",
        default_value = "workspace-write"
    )]
    sandbox: String,

    /// Stop Codex (and everything it started) after this long.
    #[arg(long, value_name = "DURATION", env = "UWF_CODEX_TIMEOUT", default_value = "30m",
          value_parser = humantime::parse_duration)]
    timeout: Duration,

    /// Run Codex in this directory (default: the current one, where `uwf`
    /// runs the step).
    #[arg(long, value_name = "DIR", env = "UWF_CODEX_CWD")]
    cwd: Option<PathBuf>,

    /// Use this provider of config.yaml (an OpenAI Responses API: its
    /// `baseUrl`, and the variable its `apiKeyEnv` names, which Codex
    /// reads) instead of Codex's own configuration.
    #[arg(long, value_name = "ALIAS", env = "UWF_CODEX_PROVIDER")]
    provider: Option<String>,

    /// An extra argument for `codex exec` (repeat for several, e.g.
    /// `--codex-arg --add-dir --codex-arg ../lib`).
    #[arg(long = "codex-arg", value_name = "ARG", allow_hyphen_values = true)]
    codex_args: Vec<String>,

    /// The thread to run a step of.
    thread: String,

    /// The role to run.
    role: String,
}

fn main() -> ExitCode {
    uwf_agent_kit::install_report_handler();
    let args = Args::parse();
    uwf_agent_kit::conclude(cli_agent::step(NAME, &args.thread, &args.role, |ctx| {
        step(ctx, &args)
    }))
}

/// The settings of the run: options, extra arguments, the provider.
fn settings(ctx: &AgentContext, args: &Args) -> Result<Settings, CodexError> {
    let provider = match &args.provider {
        None => None,
        Some(alias) => {
            // Codex reads the key from the variable itself; checked here so
            // a missing key fails before Codex runs.
            let e = cli_agent::endpoint(ctx, alias).map_err(|why| CodexError::Provider {
                provider: alias.clone(),
                why,
            })?;
            Some(Provider {
                id: format!("uwf-{alias}"),
                base_url: e.base_url,
                env_key: e.key_var,
            })
        }
    };
    Ok(Settings {
        model: args.model.clone().filter(|m| !m.is_empty()),
        sandbox: args.sandbox.clone(),
        extra: cli_agent::extra_args(ENV_ARGS, &args.codex_args)?,
        cwd: args.cwd.clone(),
        timeout: Some(args.timeout),
        provider,
    })
}

/// Runs Codex for the context's role and stores the detail nodes; returns
/// the run for the kit to extract and write.
fn step(ctx: &AgentContext, args: &Args) -> Result<AgentRun, CodexError> {
    let settings = settings(ctx, args)?;
    if !codex::has_credentials(&settings) {
        return Err(CodexError::MissingKey);
    }
    let cli = codex::cli();
    let (run, out) = codex::run(&cli, &settings, &ctx.prompt()?)?;
    let answer = run.answer(&out)?;
    let thread_id = run.thread_id.clone().unwrap_or_default();
    let rollout = match codex::codex_home() {
        Some(home) if !thread_id.is_empty() => transcript::find_rollout(&home, &thread_id),
        _ => None,
    };
    let lines: Option<Vec<Map<String, Value>>> =
        rollout
            .as_ref()
            .and_then(|f| match std::fs::read_to_string(f) {
                Ok(text) => Some(cli_agent::json_lines(&text).collect()),
                Err(e) => {
                    tracing::warn!(file = %f.display(), error = %e, "cannot read the rollout");
                    None
                }
            });
    let (turns, model, source) = match &lines {
        Some(lines) => (
            transcript::turns(lines),
            transcript::model(lines),
            "rollout",
        ),
        None => {
            tracing::warn!(thread = %thread_id, "no rollout file for the Codex thread; storing no turns");
            (Vec::new(), None, "none")
        }
    };
    let mut fields = Map::new();
    fields.insert("threadId".into(), thread_id.into());
    fields.insert(
        "model".into(),
        model
            .or_else(|| settings.model.clone())
            .map_or(Value::Null, Value::String),
    );
    fields.insert("usage".into(), run.usage.clone().unwrap_or(Value::Null));
    fields.insert("duration".into(), run.duration_ms.into());
    fields.insert("transcript".into(), source.into());
    let detail = transcript::store(ctx.store(), fields, &turns)?;
    tracing::debug!(%detail, turns = turns.len(), "transcript stored");
    Ok(AgentRun::text(answer).with_detail(detail))
}
