//! `uwf-claude [options] <thread-id> <role>`: a uwf agent that runs each
//! role with [Claude Code].
//!
//! For one step it
//!
//! 1. builds the role's prompt with the agent kit;
//! 2. runs `claude -p <prompt> --output-format stream-json --verbose
//!    --permission-mode acceptEdits --allowedTools <tools> [--model M]
//!    [--max-turns N] <args…>` non-interactively, in its own process group,
//!    with a timeout, printing its tool calls and results on stderr as they
//!    happen;
//! 3. reads the session transcript
//!    (`~/.claude/projects/<cwd>/<session id>.jsonl`) and stores one
//!    `claude-turn` node per message under a `claude-detail` node (session
//!    id, model, turns, cost, duration);
//! 4. hands the `result` text to the kit, which extracts the role's output
//!    (YAML frontmatter first, the LLM fallback otherwise) and writes the
//!    StepNode.
//!
//! `is_error`, a non-zero exit, a missing `claude` or a missing key are
//! reported on stderr with exit status 1, and nothing is written to the
//! thread. The API key is never logged nor stored. See `docs/agents.md`.
//!
//! [Claude Code]: https://www.npmjs.com/package/@anthropic-ai/claude-code

mod claude;
mod error;
mod transcript;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use uwf_agent_kit::cli_agent;
use uwf_agent_kit::{AgentContext, AgentRun};

use crate::claude::Settings;
use crate::error::ClaudeError;

/// The agent's name, written into each StepNode's `agent` field.
const NAME: &str = "uwf-claude";

/// Environment variable with extra `claude` arguments (split like a shell
/// command line), placed before those of `--claude-arg`.
const ENV_ARGS: &str = "UWF_CLAUDE_ARGS";

/// The tools allowed by default: reading, editing and running commands in
/// the working directory — what a coding role needs, headless and as root
/// (`--dangerously-skip-permissions` is refused as root).
const DEFAULT_TOOLS: &str = "Bash,Read,Edit,Write,Glob,Grep";

#[derive(Debug, Parser)]
#[command(
    name = NAME,
    version,
    about = "A uwf agent that runs each role with Claude Code (`claude -p`).",
    long_about = "A uwf agent that runs each role with Claude Code (@anthropic-ai/claude-code 2.1.328).

`uwf thread step` runs it as `uwf-claude [options] <thread-id> <role>`. It builds the role's
prompt, runs `claude -p <prompt> --output-format stream-json --verbose` in the working directory
(tool calls appear on stderr as they happen), stores the session transcript as claude-turn /
claude-detail nodes, extracts the role's output from the answer and prints the new StepNode's
hash. On failure nothing is written to the thread.",
    after_help = "Environment (read from the storage root's .env too):
  CLAUDE_BIN                     the claude executable (default: `claude` on PATH)
  ANTHROPIC_API_KEY              the key (or ANTHROPIC_AUTH_TOKEN, or a `claude login`); never logged or stored
  ANTHROPIC_BASE_URL             another Anthropic-compatible endpoint
  CLAUDE_CONFIG_DIR              Claude Code's directory (default ~/.claude), where transcripts are
  UWF_CLAUDE_MODEL, UWF_CLAUDE_PERMISSION_MODE, UWF_CLAUDE_ALLOWED_TOOLS, UWF_CLAUDE_MAX_TURNS,
  UWF_CLAUDE_TIMEOUT, UWF_CLAUDE_CWD, UWF_CLAUDE_PROVIDER   defaults for the options
  UWF_CLAUDE_ARGS                extra claude arguments, split like a shell command line
  UNCAGED_WORKFLOW_STORAGE_ROOT  the storage root (set by uwf; default ~/.uncaged/workflow)"
)]
struct Args {
    /// Model for the session (`claude --model`, e.g. `sonnet` or a full
    /// model name). Default: Claude Code's.
    #[arg(long, value_name = "MODEL", env = "UWF_CLAUDE_MODEL")]
    model: Option<String>,

    /// `claude --permission-mode`: `acceptEdits` lets it edit files in the
    /// working directory without asking; `bypassPermissions` is refused
    /// when running as root.
    #[arg(
        long,
        value_name = "MODE",
        env = "UWF_CLAUDE_PERMISSION_MODE",
        default_value = "acceptEdits"
    )]
    permission_mode: String,

    /// Tools Claude Code may use without asking (`claude --allowedTools`),
    /// comma-separated; `""` passes none.
    #[arg(long, value_name = "TOOLS", env = "UWF_CLAUDE_ALLOWED_TOOLS", default_value = DEFAULT_TOOLS)]
    allowed_tools: String,

    /// Budget of agentic turns for the role (`claude --max-turns`).
    #[arg(long, value_name = "N", env = "UWF_CLAUDE_MAX_TURNS",
          value_parser = clap::value_parser!(u32).range(1..))]
    max_turns: Option<u32>,

    /// Stop Claude Code (and everything it started) after this long.
    #[arg(long, value_name = "DURATION", env = "UWF_CLAUDE_TIMEOUT", default_value = "30m",
          value_parser = humantime::parse_duration)]
    timeout: Duration,

    /// Run Claude Code in this directory (default: the current one, where
    /// `uwf` runs the step).
    #[arg(long, value_name = "DIR", env = "UWF_CLAUDE_CWD")]
    cwd: Option<PathBuf>,

    /// Take the endpoint from this provider of config.yaml: its `baseUrl`
    /// (without a trailing `/v1`) becomes ANTHROPIC_BASE_URL and the
    /// variable its `apiKeyEnv` names, ANTHROPIC_API_KEY.
    #[arg(long, value_name = "ALIAS", env = "UWF_CLAUDE_PROVIDER")]
    provider: Option<String>,

    /// An extra argument for `claude` (repeat for several, e.g.
    /// `--claude-arg --add-dir --claude-arg ../lib`).
    #[arg(long = "claude-arg", value_name = "ARG", allow_hyphen_values = true)]
    claude_args: Vec<String>,

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
fn settings(ctx: &AgentContext, args: &Args) -> Result<Settings, ClaudeError> {
    let endpoint = match &args.provider {
        None => None,
        Some(alias) => {
            let e = cli_agent::endpoint(ctx, alias).map_err(|why| ClaudeError::Provider {
                provider: alias.clone(),
                why,
            })?;
            Some((claude::anthropic_base_url(&e.base_url), e.key))
        }
    };
    Ok(Settings {
        model: args.model.clone().filter(|m| !m.is_empty()),
        permission_mode: args.permission_mode.clone(),
        allowed_tools: args
            .allowed_tools
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        max_turns: args.max_turns,
        extra: cli_agent::extra_args(ENV_ARGS, &args.claude_args)?,
        cwd: args.cwd.clone(),
        timeout: Some(args.timeout),
        endpoint,
    })
}

/// Runs Claude Code for the context's role and stores the detail nodes;
/// returns the run for the kit to extract and write.
fn step(ctx: &AgentContext, args: &Args) -> Result<AgentRun, ClaudeError> {
    let settings = settings(ctx, args)?;
    let cli = claude::cli();
    if !claude::has_credentials(&settings) {
        return Err(ClaudeError::MissingKey);
    }
    let (run, out) = claude::run(&cli, &settings, &ctx.prompt()?)?;
    let answer = run.answer(&out)?;
    let session_id = run.session_id.clone().unwrap_or_default();
    // The transcript file; the streamed messages when it cannot be read.
    let file = match (claude::config_dir(), claude::working_dir(&settings)) {
        (Some(config), Some(cwd)) if !session_id.is_empty() => {
            transcript::find_session_file(&config, &cwd, &session_id)
        }
        _ => None,
    };
    let from_file = file
        .as_ref()
        .and_then(|f| match std::fs::read_to_string(f) {
            Ok(text) => Some(transcript::turns(cli_agent::json_lines(&text))),
            Err(e) => {
                tracing::warn!(file = %f.display(), error = %e, "cannot read the transcript");
                None
            }
        });
    let (turns, source) = match from_file {
        Some(turns) if !turns.is_empty() => (turns, "session-file"),
        _ => {
            tracing::warn!(
                session = %session_id,
                "no transcript file for the session; storing the streamed messages"
            );
            (transcript::turns(run.messages.iter().cloned()), "stream")
        }
    };
    let result = run.result.clone().unwrap_or_default();
    let detail = transcript::Detail {
        session_id,
        model: run.model.clone(),
        num_turns: result.get("num_turns").and_then(serde_json::Value::as_u64),
        cost_usd: result
            .get("total_cost_usd")
            .and_then(serde_json::Value::as_f64),
        duration_ms: run.duration_ms,
        duration_api_ms: result
            .get("duration_api_ms")
            .and_then(serde_json::Value::as_u64),
        permission_denials: result
            .get("permission_denials")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default(),
        transcript: source,
    };
    let detail = transcript::store(ctx.store(), &detail, &turns)?;
    tracing::debug!(%detail, turns = turns.len(), source, "transcript stored");
    Ok(AgentRun::text(answer).with_detail(detail))
}
