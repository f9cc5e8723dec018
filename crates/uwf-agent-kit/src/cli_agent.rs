//! Wrapping an agent CLI (Hermes, Claude Code, Codex, Gemini CLI, aider, …)
//! as a uwf agent.
//!
//! Every such wrapper does the same things around two that are its own:
//!
//! | shared (this module)                                   | the wrapper's own            |
//! |--------------------------------------------------------|------------------------------|
//! | find the program (`<TOOL>_BIN` or `PATH`), explain a missing one | the command line     |
//! | pass the prompt as one argument (size, NUL bytes)      | reading the CLI's output     |
//! | run it non-interactively: stdin closed, its own process group, a timeout, SIGTERM/SIGINT forwarded to the group | reading its transcript |
//! | stream its stdout lines to a callback (live progress on stderr) |                     |
//! | extra arguments from an environment variable           |                              |
//! | store a transcript as a detail node pointing at turn nodes (`cas_ref`s) |             |
//! | root, `.env`, tracing, context, extraction, StepNode ([`step`]) |                     |
//!
//! A wrapper is then mostly:
//!
//! ```no_run
//! use uwf_agent_kit::cli_agent::{self, Cli, RunOptions};
//! use uwf_agent_kit::{AgentContext, AgentRun, BoxError};
//!
//! fn work(ctx: &AgentContext) -> Result<AgentRun, BoxError> {
//!     let cli = Cli::from_env("mytool", "MYTOOL_BIN", "mytool")
//!         .install_hint("npm install -g mytool");
//!     let full = ctx.prompt()?;
//!     let prompt = cli_agent::prompt_arg(cli.tool(), &full)?;
//!     let mut cmd = cli.command();
//!     cmd.args(["--print", prompt.as_ref()]);
//!     let out = cli.run(cmd, RunOptions::new().on_stdout_line(|line| {
//!         cli_agent::progress("mytool", line);
//!     }))?;
//!     if !out.status.success() {
//!         return Err(out.failed(cli.tool(), "see the output above").into());
//!     }
//!     Ok(AgentRun::text(out.stdout))
//! }
//! ```
//!
//! `docs/writing-agents.md` walks through a complete wrapper; `uwf-hermes`,
//! `uwf-claude` and `uwf-codex` are built on this module.

use std::borrow::Cow;
use std::ffi::OsString;
use std::io::{ErrorKind, Write};
use std::process::{Command, ExitStatus};
use std::sync::{Once, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value};
use uwf_cas::{Cas, CasError, Hash, Store};
use uwf_state::state::{FsState, SplitError, split_command_line};
use uwf_util::supervise::{self, CancelToken, Keep, Supervise};

pub use uwf_protocol::transcript::{ToolCall, ToolResult, Turn};

use crate::{AgentContext, AgentRun, Invocation};

/// Linux's limit for one command-line argument (`MAX_ARG_STRLEN`, 32
/// pages), including the terminating NUL.
pub const MAX_ARG_BYTES: usize = 32 * 4096;

/// How much of a CLI's output an error message quotes.
pub const QUOTE_CHARS: usize = 4000;

/// What can go wrong running an agent CLI. Every variant leaves the thread
/// unchanged (the wrapper writes no StepNode).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum CliError {
    /// The executable does not exist.
    #[error("{tool} is not installed: cannot run {program:?} ({source_of})")]
    #[diagnostic(
        code(uwf::cli_agent::not_installed),
        help("{install}. Nothing was written to the thread.")
    )]
    NotInstalled {
        /// The tool's name (`claude`, `hermes`).
        tool: String,
        /// The program the wrapper tried to run.
        program: String,
        /// Where the name came from (`from CLAUDE_BIN`, `not found on PATH; …`).
        source_of: String,
        /// How to install it and point the wrapper at it.
        install: String,
    },

    /// The executable exists but could not be started.
    #[error("cannot run {tool} ({program:?})")]
    #[diagnostic(
        code(uwf::cli_agent::spawn),
        help("check that the program is an executable file")
    )]
    Spawn {
        /// The tool's name.
        tool: String,
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The prompt does not fit in one command-line argument.
    #[error(
        "the prompt is {bytes} bytes, more than the {limit} bytes one command-line argument may hold"
    )]
    #[diagnostic(
        code(uwf::cli_agent::prompt_too_long),
        help(
            "{tool} takes the prompt as one command-line argument, and Linux limits one argument to 128 KiB; shorten the task or lower the history quota (UWF_HISTORY_QUOTA, in characters). Nothing was written to the thread."
        )
    )]
    PromptTooLong {
        /// The tool's name.
        tool: String,
        /// Size of the prompt.
        bytes: usize,
        /// The limit.
        limit: usize,
    },

    /// The run took longer than its timeout; its process group was stopped.
    #[error("{tool} did not finish within {after}; it was stopped:\n{output}")]
    #[diagnostic(
        code(uwf::cli_agent::timed_out),
        help(
            "raise the wrapper's timeout, or make the role's task smaller. Nothing was written to the thread."
        )
    )]
    TimedOut {
        /// The tool's name.
        tool: String,
        /// The timeout, human-readable.
        after: String,
        /// The end of what it printed.
        output: String,
    },

    /// This process was asked to stop (SIGINT/SIGTERM) while the CLI ran;
    /// its process group was stopped.
    #[error("interrupted while {tool} was running; it was stopped")]
    #[diagnostic(
        code(uwf::cli_agent::interrupted),
        help("nothing was written to the thread")
    )]
    Interrupted {
        /// The tool's name.
        tool: String,
    },

    /// It exited with a non-zero status (or was killed).
    #[error("{tool} failed ({status}):\n{output}")]
    #[diagnostic(
        code(uwf::cli_agent::failed),
        help("{help} Nothing was written to the thread.")
    )]
    Failed {
        /// The tool's name.
        tool: String,
        /// `exit status N` or `killed by a signal`.
        status: String,
        /// The end of its stdout and stderr.
        output: String,
        /// What to check.
        help: String,
    },

    /// Reading its output or waiting for it failed.
    #[error("lost contact with {tool}")]
    #[diagnostic(code(uwf::cli_agent::io))]
    Io {
        /// The tool's name.
        tool: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The variable with extra arguments is not a valid command line.
    #[error("cannot split {var}")]
    #[diagnostic(
        code(uwf::cli_agent::bad_args),
        help("{var} is split like a shell command line (quotes and backslashes only)")
    )]
    BadArgs {
        /// The variable.
        var: String,
        /// Why.
        #[source]
        source: SplitError,
    },
}

/// An agent CLI: its name and the program that runs it.
#[derive(Debug, Clone)]
pub struct Cli {
    tool: String,
    program: OsString,
    bin_var: String,
    from_env: bool,
    install: String,
}

impl Cli {
    /// `$<bin_var>` if set and non-empty, else `default_program` (looked
    /// up on `PATH`). `tool` names it in messages.
    pub fn from_env(tool: &str, bin_var: &str, default_program: &str) -> Self {
        let (program, from_env) = match std::env::var_os(bin_var).filter(|v| !v.is_empty()) {
            Some(p) => (p, true),
            None => (default_program.into(), false),
        };
        Self {
            tool: tool.to_owned(),
            program,
            bin_var: bin_var.to_owned(),
            from_env,
            install: format!("install {tool}, then put it on PATH or set {bin_var}=/path/to/it"),
        }
    }

    /// A CLI run as `program` (for tests), as if `$<bin_var>` named it.
    pub fn with_program(mut self, program: impl Into<OsString>) -> Self {
        self.program = program.into();
        self.from_env = true;
        self
    }

    /// The help of [`CliError::NotInstalled`]: how to install the tool.
    pub fn install_hint(mut self, hint: impl Into<String>) -> Self {
        self.install = hint.into();
        self
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The program, for messages.
    pub fn program(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }

    /// A command for the program: stdin closed (never interactive),
    /// `NO_COLOR=1`. The working directory and the environment are
    /// inherited; add arguments and variables to it.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.env("NO_COLOR", "1")
            // The store relay is this agent's way into the store, not the
            // wrapped tool's (docs/postgres.md, "The store relay").
            .env_remove(uwf_protocol::agent_env::RELAY);
        cmd
    }

    fn spawn_error(&self, e: std::io::Error, prompt_bytes: usize) -> CliError {
        match e.kind() {
            ErrorKind::NotFound => CliError::NotInstalled {
                tool: self.tool.clone(),
                program: self.program(),
                source_of: if self.from_env {
                    format!("from {}", self.bin_var)
                } else {
                    format!("not found on PATH; {} is not set", self.bin_var)
                },
                install: self.install.clone(),
            },
            // E2BIG: the arguments and environment together are too big.
            _ if e.raw_os_error() == Some(7) => CliError::PromptTooLong {
                tool: self.tool.clone(),
                bytes: prompt_bytes,
                limit: MAX_ARG_BYTES - 1,
            },
            _ => CliError::Spawn {
                tool: self.tool.clone(),
                program: self.program(),
                source: e,
            },
        }
    }

    /// Runs `cmd` (from [`command`](Self::command)) to its end: stdin
    /// closed, in its own process group (so a timeout or an interrupt
    /// stops everything it started), stdout and stderr captured. Each
    /// stdout line goes to the [`RunOptions::on_stdout_line`] callback as
    /// it arrives; stderr is copied to this process's stderr when
    /// [`RunOptions::echo_stderr`] is set. SIGINT, SIGTERM and SIGHUP to
    /// this process stop the group ([`CliError::Interrupted`]).
    ///
    /// A non-zero exit is not an error here: look at
    /// [`Output::status`] (and [`Output::failed`]).
    pub fn run(&self, cmd: Command, options: RunOptions<'_>) -> Result<Output, CliError> {
        forward_interrupts();
        let prompt_bytes = cmd.get_args().map(|a| a.len()).max().unwrap_or(0);
        // Arguments only: the environment may hold API keys.
        tracing::debug!(program = %self.program(), args = ?cmd.get_args().collect::<Vec<_>>(), "running");
        let RunOptions {
            timeout,
            on_line,
            echo_stderr,
            capture_limit,
        } = options;
        let keep = capture_limit.map_or(Keep::All, Keep::UpTo);
        let mut supervise = Supervise::new()
            .timeout(timeout)
            .cancel(interrupt_token().clone())
            .keep_stdout(keep)
            .keep_stderr(keep);
        if let Some(on_line) = on_line {
            supervise = supervise.on_stdout(on_line);
        }
        if echo_stderr {
            supervise = supervise.on_stderr(|line| {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            });
        }
        let done = supervise::run(cmd, supervise).map_err(|e| match e {
            supervise::SuperviseError::Spawn(e) => self.spawn_error(e, prompt_bytes),
            supervise::SuperviseError::Wait(source) => CliError::Io {
                tool: self.tool.clone(),
                source,
            },
        })?;
        let output = Output {
            status: ExitStatus::default(),
            stdout: done.stdout,
            stderr: done.stderr,
            duration: done.elapsed,
        };
        match done.ending {
            supervise::Ending::Exited(status) => Ok(Output { status, ..output }),
            supervise::Ending::TimedOut(after) => Err(CliError::TimedOut {
                tool: self.tool.clone(),
                after: humantime::format_duration(after).to_string(),
                output: output.quote(),
            }),
            supervise::Ending::Interrupted | supervise::Ending::Stopped => {
                Err(CliError::Interrupted {
                    tool: self.tool.clone(),
                })
            }
        }
    }
}

/// Cancelled when this process gets SIGINT, SIGTERM or SIGHUP while a CLI
/// runs ([`forward_interrupts`]).
fn interrupt_token() -> &'static CancelToken {
    static TOKEN: OnceLock<CancelToken> = OnceLock::new();
    TOKEN.get_or_init(CancelToken::new)
}

/// Whether this process was asked to stop (SIGINT, SIGTERM, SIGHUP) since
/// a [`Cli::run`] installed the handler that forwards these signals to a
/// CLI's process group. From then on the signals no longer end the process
/// by themselves: an agent that goes on working between runs (a loop of
/// model calls and commands) checks this and stops.
pub fn interrupted() -> bool {
    interrupt_token().is_cancelled()
}

/// Makes SIGINT/SIGTERM/SIGHUP to this process stop a running CLI (which
/// is in its own process group and would otherwise outlive us).
fn forward_interrupts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Fails only if a handler is already installed: then keep that one.
        let _ = ctrlc::set_handler(|| interrupt_token().cancel());
    });
}

/// A callback for each line of stdout.
type LineFn<'a> = Box<dyn FnMut(&str) + Send + 'a>;

/// How [`Cli::run`] runs a command.
#[derive(Default)]
#[must_use]
pub struct RunOptions<'a> {
    timeout: Option<Duration>,
    on_line: Option<LineFn<'a>>,
    echo_stderr: bool,
    capture_limit: Option<usize>,
}

impl std::fmt::Debug for RunOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("timeout", &self.timeout)
            .field("on_stdout_line", &self.on_line.is_some())
            .field("echo_stderr", &self.echo_stderr)
            .field("capture_limit", &self.capture_limit)
            .finish()
    }
}

impl<'a> RunOptions<'a> {
    /// No timeout, no callback, stderr captured only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the run (its whole process group) after `timeout`
    /// ([`CliError::TimedOut`]); `None` waits for ever.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Calls `f` with each line of stdout (without its line end) as it
    /// arrives, e.g. to print progress with [`progress`].
    pub fn on_stdout_line(mut self, f: impl FnMut(&str) + Send + 'a) -> Self {
        self.on_line = Some(Box::new(f));
        self
    }

    /// Keeps at most about `bytes` of each of stdout and stderr in the
    /// [`Output`] (whole lines; the lines after the limit are still read,
    /// passed to the stdout callback and counted, and a last line
    /// `[… N more bytes not kept]` says how much was left out), so a
    /// command that prints without end cannot exhaust memory.
    pub fn capture_limit(mut self, bytes: usize) -> Self {
        self.capture_limit = Some(bytes);
        self
    }

    /// Copies the CLI's stderr to this process's stderr as it arrives
    /// (`uwf` shows an agent's stderr live).
    pub fn echo_stderr(mut self, echo: bool) -> Self {
        self.echo_stderr = echo;
        self
    }
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct Output {
    /// How it exited.
    pub status: ExitStatus,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
    /// Wall time.
    pub duration: Duration,
}

impl Output {
    /// `exit status N` or `killed by a signal`.
    pub fn status_text(&self) -> String {
        match self.status.code() {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".to_owned(),
        }
    }

    /// Wall time in milliseconds.
    pub fn duration_ms(&self) -> u64 {
        u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX)
    }

    /// The end of stdout and stderr, for an error message.
    pub fn quote(&self) -> String {
        let mut text = tail(self.stdout.trim(), QUOTE_CHARS);
        if !self.stderr.trim().is_empty() {
            text.push_str("\nstderr:\n");
            text.push_str(&tail(self.stderr.trim(), QUOTE_CHARS));
        }
        if text.trim().is_empty() {
            "(it printed nothing)".to_owned()
        } else {
            text
        }
    }

    /// A [`CliError::Failed`] for this run, with `help` saying what to check.
    pub fn failed(&self, tool: &str, help: &str) -> CliError {
        CliError::Failed {
            tool: tool.to_owned(),
            status: self.status_text(),
            output: self.quote(),
            help: help.to_owned(),
        }
    }
}

/// The prompt as one command-line argument: refused when too long for
/// Linux ([`CliError::PromptTooLong`]), NUL characters (which an argument
/// cannot hold; a task may, from JSON `\u0000`) removed.
pub fn prompt_arg<'p>(tool: &str, prompt: &'p str) -> Result<Cow<'p, str>, CliError> {
    if prompt.len() >= MAX_ARG_BYTES {
        return Err(CliError::PromptTooLong {
            tool: tool.to_owned(),
            bytes: prompt.len(),
            limit: MAX_ARG_BYTES - 1,
        });
    }
    Ok(if prompt.contains('\0') {
        tracing::warn!("removing NUL characters from the prompt");
        Cow::Owned(prompt.replace('\0', ""))
    } else {
        Cow::Borrowed(prompt)
    })
}

/// Extra arguments: `$<var>` split like a shell command line, then
/// `from_cli`.
pub fn extra_args(var: &str, from_cli: &[String]) -> Result<Vec<String>, CliError> {
    let mut extra = match std::env::var(var) {
        Ok(line) if !line.trim().is_empty() => {
            split_command_line(&line).map_err(|source| CliError::BadArgs {
                var: var.to_owned(),
                source,
            })?
        }
        _ => Vec::new(),
    };
    extra.extend(from_cli.iter().cloned());
    Ok(extra)
}

/// A provider of `config.yaml` for a wrapped CLI that takes its endpoint
/// from uwf's configuration (`--provider <alias>`).
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The provider's `baseUrl`, without a trailing `/`.
    pub base_url: String,
    /// The variable its `apiKeyEnv` names.
    pub key_var: String,
    /// That variable's value (never printed: `Debug` hides it).
    pub key: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("key_var", &self.key_var)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// The provider `alias` of the context's `config.yaml` with its key (read
/// from the environment, where uwf has loaded `.env`). `Err` says why not,
/// for the wrapper's own error: the provider is not defined, or its key
/// variable is unset or empty.
pub fn endpoint(ctx: &AgentContext, alias: &str) -> Result<Endpoint, String> {
    let provider = ctx
        .config()
        .and_then(|c| c.providers.get(alias))
        .ok_or_else(|| "config.yaml does not define it".to_owned())?;
    let key = std::env::var(&provider.api_key_env)
        .ok()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            format!(
                "its key variable {:?} is not set (in .env or the environment)",
                provider.api_key_env
            )
        })?;
    Ok(Endpoint {
        base_url: provider.base_url.trim_end_matches('/').to_owned(),
        key_var: provider.api_key_env.clone(),
        key,
    })
}

/// Prints one progress line, `[tool] message`, on stderr (at most one
/// line of 300 characters). `uwf` shows an agent's stderr as it runs.
pub fn progress(tool: &str, message: &str) {
    let one_line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let _ = writeln!(
        std::io::stderr().lock(),
        "[{tool}] {}",
        shorten(&one_line, 300)
    );
}

/// The JSON objects of a JSON-lines text, in order; other lines are
/// skipped (CLIs mix in warnings).
pub fn json_lines(text: &str) -> impl Iterator<Item = Map<String, Value>> + '_ {
    text.lines().filter_map(|l| {
        let l = l.trim();
        if !l.starts_with('{') {
            return None;
        }
        match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        }
    })
}

/// The schemas of a transcript: a detail node (its `turns` a `cas_ref`
/// array) and one node per turn. Both must accept what
/// [`store_transcript`] writes.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptSchemas {
    /// The detail's schema: the fields given to [`store_transcript`] plus
    /// `turnCount` (integer) and `turns` (array of `cas_ref` strings).
    pub detail: Value,
    /// A turn's schema.
    pub turn: Value,
}

/// Stores each of `turns` as a node of `schemas.turn`, then `detail` plus
/// `turnCount` and `turns` (the turn hashes, in order) as a node of
/// `schemas.detail`; returns the detail's hash. Because `turns` are
/// `cas_ref`s, `uwf cas refs`, `cas walk`, `cas gc` and `thread read` follow
/// them.
pub fn store_transcript<S: Store>(
    cas: &Cas<S>,
    schemas: &TranscriptSchemas,
    mut detail: Map<String, Value>,
    turns: &[Turn],
) -> Result<Hash, CasError> {
    let turn_type = cas.put_schema(schemas.turn.clone())?.hash;
    let detail_type = cas.put_schema(schemas.detail.clone())?.hash;
    let hashes = turns
        .iter()
        .map(|t| {
            Ok(Value::String(
                cas.put(turn_type, t.to_payload())?.hash.to_string(),
            ))
        })
        .collect::<Result<Vec<_>, CasError>>()?;
    detail.insert("turnCount".into(), hashes.len().into());
    detail.insert("turns".into(), Value::Array(hashes));
    Ok(cas.put(detail_type, Value::Object(detail))?.hash)
}

/// The schema of a raw-output node `{text}` titled `title`: what a wrapper
/// stores when it cannot read the CLI's transcript.
pub fn raw_schema(title: &str, description: &str) -> Value {
    serde_json::json!({
        "title": title,
        "description": description,
        "type": "object",
        "required": ["text"],
        "additionalProperties": false,
        "properties": { "text": { "type": "string" } }
    })
}

/// Stores `text` as a node of `schema` (see [`raw_schema`]).
pub fn store_raw<S: Store>(cas: &Cas<S>, schema: &Value, text: &str) -> Result<Hash, CasError> {
    let raw_type = cas.put_schema(schema.clone())?.hash;
    Ok(cas.put(raw_type, serde_json::json!({ "text": text }))?.hash)
}

/// At most `max` characters of `s`, with `…` when cut.
pub fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

/// ` (session <id>)`, or nothing: the suffix an error message gives a CLI's
/// session, so that a failed run can be found in the CLI's own logs.
pub fn session_note(session: &Option<String>) -> String {
    session
        .as_deref()
        .map(|s| format!(" (session {s})"))
        .unwrap_or_default()
}

/// The last `max` characters of `s`, with `…` in front when cut (errors
/// are at the end of a CLI's output).
pub fn tail(s: &str, max: usize) -> String {
    let count = s.chars().count();
    if count <= max {
        return s.to_owned();
    }
    let start = s.char_indices().nth(count - max).map_or(0, |(i, _)| i);
    format!("…{}", &s[start..])
}

/// A whole step for a wrapper that parses its own arguments (e.g. with
/// clap): resolves the storage root, loads its `.env` (before tracing, so
/// a `RUST_LOG` there applies), starts tracing, loads the context of
/// `thread`/`role`, runs `work` and hands its [`AgentRun`] to
/// [`finish`](crate::finish) (extraction, detail, StepNode). Returns the
/// StepNode's hash; give the result to [`conclude`](crate::conclude).
pub fn step<E>(
    name: &str,
    thread: &str,
    role: &str,
    work: impl FnOnce(&AgentContext) -> Result<AgentRun, E>,
) -> Result<Hash, miette::Report>
where
    E: miette::Diagnostic + Send + Sync + 'static,
{
    let root = uwf_util::root::resolve_root(None)
        .map_err(|e| miette::Report::new(crate::KitError::from(e)))?;
    FsState::new(&root.path)
        .load_env()
        .map_err(|e| miette::Report::new(crate::KitError::from(e)))?;
    uwf_util::trace::init_tracing(0, false);
    let inv = Invocation::new(name, root.path, thread, role, Vec::new());
    let ctx = inv.load().map_err(miette::Report::new)?;
    let run = work(&ctx).map_err(miette::Report::new)?;
    crate::finish(&ctx, name, run).map_err(miette::Report::new)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;
    use uwf_cas::MemStore;

    fn sh(script: &str) -> (Cli, Command) {
        let cli = Cli::from_env("sh", "UWF_TEST_NO_SUCH_VAR", "sh");
        let mut cmd = cli.command();
        cmd.args(["-c", script]);
        (cli, cmd)
    }

    #[test]
    fn session_note_names_the_session_or_nothing() {
        assert_eq!(session_note(&Some("abc".into())), " (session abc)");
        assert_eq!(session_note(&None), "");
    }

    #[test]
    fn lines_arrive_in_order_and_output_is_kept() {
        let (cli, cmd) = sh("echo one; echo err >&2; printf 'two\\nthree'; exit 3");
        let mut lines = Vec::new();
        let out = cli
            .run(
                cmd,
                RunOptions::new().on_stdout_line(|l| lines.push(l.to_owned())),
            )
            .unwrap();
        assert_eq!(lines, ["one", "two", "three"]);
        assert_eq!(out.stdout, "one\ntwo\nthree");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.status_text(), "exit status 3");
        let e = out.failed("sh", "check it.").to_string();
        assert!(e.contains("sh failed (exit status 3)"), "{e}");
        assert!(e.contains("three\nstderr:\nerr"), "{e}");
    }

    #[test]
    fn capture_limit_keeps_the_first_lines_and_counts_the_rest() {
        let (cli, cmd) = sh("for i in 1 2 3 4 5; do echo line$i; done; echo e1 >&2");
        let out = cli.run(cmd, RunOptions::new().capture_limit(12)).unwrap();
        assert_eq!(out.stdout, "line1\nline2\n[… 18 more bytes not kept]\n");
        assert_eq!(out.stderr, "e1\n");
    }

    #[test]
    fn timeout_stops_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survivor");
        // A grandchild that would write the marker after the timeout.
        let script = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let (cli, cmd) = sh(&script);
        let e = cli
            .run(
                cmd,
                RunOptions::new().timeout(Some(Duration::from_millis(200))),
            )
            .err();
        assert!(matches!(e, Some(CliError::TimedOut { .. })), "{e:?}");
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists(), "the grandchild survived the timeout");
    }

    #[test]
    fn missing_program_says_where_it_came_from() {
        let cli = Cli::from_env("tool", "UWF_TEST_NO_SUCH_VAR", "uwf-no-such-program-x")
            .install_hint("npm install tool");
        let e = cli.run(cli.command(), RunOptions::new()).err().unwrap();
        let text = e.to_string();
        assert!(text.starts_with("tool is not installed"), "{text}");
        assert!(text.contains("UWF_TEST_NO_SUCH_VAR is not set"), "{text}");
        let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
        assert!(help.unwrap_or_default().contains("npm install tool"));
        let cli = cli.with_program("/nonexistent/tool");
        let text = cli
            .run(cli.command(), RunOptions::new())
            .err()
            .unwrap()
            .to_string();
        assert!(text.contains("from UWF_TEST_NO_SUCH_VAR"), "{text}");
    }

    #[test]
    fn prompt_args() {
        assert_eq!(prompt_arg("t", "a\0b").unwrap(), "ab");
        assert!(matches!(prompt_arg("t", "ok"), Ok(Cow::Borrowed("ok"))));
        let big = "x".repeat(MAX_ARG_BYTES);
        assert!(matches!(
            prompt_arg("t", &big),
            Err(CliError::PromptTooLong { .. })
        ));
    }

    #[test]
    fn json_lines_skip_noise() {
        let text = "warning: x\n{\"a\":1}\n[1]\n{bad\n  {\"b\":2}\n";
        let objs: Vec<_> = json_lines(text).collect();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1]["b"], 2);
    }

    #[test]
    fn transcripts_point_at_their_turns() {
        let cas = Cas::new(MemStore::new()).unwrap();
        let schemas = TranscriptSchemas {
            detail: json!({"title": "t-detail", "type": "object", "properties": {
                "turns": {"type": "array", "items": {"type": "string", "format": "cas_ref"}}}}),
            turn: json!({"title": "t-turn", "type": "object"}),
        };
        let mut detail = Map::new();
        detail.insert("sessionId".into(), "s1".into());
        let turns = [Turn::new("user", "hi"), Turn::new("assistant", "hello")];
        let h = store_transcript(&cas, &schemas, detail, &turns).unwrap();
        let node = cas.get(h).unwrap();
        assert_eq!(node.payload["turnCount"], 2);
        assert_eq!(node.payload["sessionId"], "s1");
        let refs: Vec<Hash> = cas.refs(h).unwrap().iter().map(|r| r.hash).collect();
        assert_eq!(refs.len(), 2);
        assert_eq!(cas.get(refs[1]).unwrap().payload, turns[1].to_payload());
        let raw = store_raw(&cas, &raw_schema("t-raw", "raw"), "x").unwrap();
        assert_eq!(cas.get(raw).unwrap().payload, json!({"text": "x"}));
    }

    #[test]
    fn shorten_and_tail() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("äbcdef", 3), "äbc…");
        assert_eq!(tail("abc", 5), "abc");
        assert_eq!(tail("abcdeä", 3), "…deä");
    }
}
