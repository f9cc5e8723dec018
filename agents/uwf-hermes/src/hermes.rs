//! Running the hermes CLI: `hermes chat` for the role's work and `hermes
//! sessions export` for its transcript.

use std::time::Duration;

use uwf_agent_kit::cli_agent::{self, Cli, Output, RunOptions};

use crate::error::{HERMES_VERSION, HermesError};
use crate::transcript::{self, ExportError, Sentinel, Session};

/// Environment variable naming the hermes executable (default: `hermes` on
/// `PATH`).
pub const ENV_BIN: &str = "HERMES_BIN";

/// How much of hermes' output an error message quotes.
const QUOTE_CHARS: usize = cli_agent::QUOTE_CHARS;

/// The hermes executable.
#[derive(Debug, Clone)]
pub struct Hermes {
    cli: Cli,
    timeout: Option<Duration>,
}

/// A successful `hermes chat` run (exit 0, no warning sentinel, non-empty
/// stdout).
#[derive(Debug, Clone)]
pub struct Chat {
    /// hermes' stdout: the final answer plus a newline.
    pub stdout: String,
    /// The session id from stderr, if hermes printed one.
    pub session_id: Option<String>,
    /// Wall time of the run.
    pub duration: Duration,
}

/// Why the transcript of a session could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ExportFailure {
    /// `hermes sessions export` did not start or did not finish.
    #[error("cannot run `hermes sessions export`: {0}")]
    Run(#[source] cli_agent::CliError),
    /// It exited non-zero.
    #[error("`hermes sessions export` failed ({status}): {output}")]
    Failed {
        /// The exit status.
        status: String,
        /// Its output, shortened.
        output: String,
    },
    /// Its output holds no usable session.
    #[error(transparent)]
    Parse(#[from] ExportError),
}

impl Hermes {
    /// `$HERMES_BIN` if set and non-empty, else `hermes` (looked up on
    /// `PATH`); `timeout` stops a `hermes chat` that runs longer.
    pub fn from_env(timeout: Option<Duration>) -> Self {
        let cli = Cli::from_env("hermes", ENV_BIN, "hermes").install_hint(format!(
            "install the Hermes Agent CLI, e.g. `python3 -m venv ~/.hermes-venv && ~/.hermes-venv/bin/pip install hermes-agent=={HERMES_VERSION}`, then put its `bin` on PATH or set HERMES_BIN=/path/to/hermes"
        ));
        Self { cli, timeout }
    }

    /// A command for hermes with the environment every invocation gets: no
    /// runtime `pip install` into hermes' venv (the kit closes stdin).
    /// `HERMES_HOME` and the working directory are inherited.
    fn command(&self) -> std::process::Command {
        let mut cmd = self.cli.command();
        cmd.env("HERMES_DISABLE_LAZY_INSTALLS", "1");
        cmd
    }

    /// Runs `hermes chat -q <prompt> --yolo [--max-turns N] --quiet <extra…>`
    /// and checks the outcome: exit status, warning sentinels, a non-empty
    /// answer.
    pub fn chat(
        &self,
        prompt: &str,
        max_turns: Option<u32>,
        extra: &[String],
    ) -> Result<Chat, HermesError> {
        let prompt = cli_agent::prompt_arg(self.cli.tool(), prompt)?;
        let mut cmd = self.command();
        cmd.args(["chat", "-q", prompt.as_ref(), "--yolo"]);
        if let Some(n) = max_turns {
            cmd.arg("--max-turns").arg(n.to_string());
        }
        cmd.arg("--quiet").args(extra);
        tracing::debug!(
            program = %self.cli.program(),
            prompt_bytes = prompt.len(),
            ?max_turns,
            ?extra,
            "running hermes chat"
        );
        let out = self.cli.run(cmd, RunOptions::new().timeout(self.timeout))?;
        check_chat(out)
    }

    /// Reads the transcript of session `id` with `hermes sessions export
    /// --session-id <id> -`.
    pub fn export(&self, id: &str) -> Result<Session, ExportFailure> {
        let mut cmd = self.command();
        cmd.args(["sessions", "export", "--session-id", id, "-"]);
        let out = self
            .cli
            .run(cmd, RunOptions::new().timeout(Some(EXPORT_TIMEOUT)))
            .map_err(ExportFailure::Run)?;
        if !out.status.success() {
            return Err(ExportFailure::Failed {
                status: out.status.to_string(),
                output: cli_agent::shorten(&format!("{}{}", out.stdout, out.stderr), 500),
            });
        }
        Ok(transcript::parse_export(&out.stdout, id)?)
    }
}

/// Longest a `hermes sessions export` may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(120);

/// Classifies a finished `hermes chat`.
fn check_chat(out: Output) -> Result<Chat, HermesError> {
    let duration = out.duration;
    let Output { stdout, stderr, .. } = out.clone();
    let session = transcript::session_id(&stderr).map(str::to_owned);
    tracing::debug!(
        status = %out.status,
        session = session.as_deref().unwrap_or("-"),
        stdout_bytes = stdout.len(),
        ms = out.duration_ms(),
        "hermes chat finished"
    );
    if !out.status.success() {
        let status = out.status_text();
        let mut output = cli_agent::tail(stdout.trim(), QUOTE_CHARS);
        // stderr normally only holds the session id; show anything else.
        let extra: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("session_id: "))
            .collect();
        if !extra.is_empty() {
            output.push_str("\nstderr:\n");
            output.push_str(&cli_agent::tail(&extra.join("\n"), QUOTE_CHARS));
        }
        if output.trim().is_empty() {
            output = "(hermes printed nothing)".to_owned();
        }
        return Err(HermesError::Failed {
            status,
            output,
            session,
        });
    }
    match transcript::sentinel(&stdout) {
        Some(Sentinel::MaxTurns { limit }) => {
            return Err(HermesError::MaxTurns {
                limit,
                output: cli_agent::tail(stdout.trim(), QUOTE_CHARS),
                session,
            });
        }
        Some(Sentinel::NoReply) => {
            return Err(HermesError::NoReply {
                output: cli_agent::tail(stdout.trim(), QUOTE_CHARS),
                session,
            });
        }
        None => {}
    }
    if stdout.trim().is_empty() {
        return Err(HermesError::NoAnswer { session });
    }
    Ok(Chat {
        stdout,
        session_id: session,
        duration,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    use uwf_agent_kit::cli_agent::{CliError, MAX_ARG_BYTES};

    fn out(code: i32, stdout: &str, stderr: &str) -> Output {
        Output {
            status: ExitStatus::from_raw(code << 8),
            stdout: stdout.to_owned(),
            stderr: stderr.to_owned(),
            duration: Duration::from_millis(5),
        }
    }

    fn check(code: i32, stdout: &str, stderr: &str) -> Result<Chat, HermesError> {
        check_chat(out(code, stdout, stderr))
    }

    fn hermes(program: &str) -> Hermes {
        let mut h = Hermes::from_env(None);
        h.cli = h.cli.with_program(program);
        h
    }

    const SID: &str = "\nsession_id: 20261122_063815_604466\n";

    #[test]
    fn success() {
        let chat =
            check(0, "---\nstatus: done\n---\n\nbody\n", SID).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(chat.session_id.as_deref(), Some("20261122_063815_604466"));
        assert_eq!(chat.stdout, "---\nstatus: done\n---\n\nbody\n");
    }

    #[test]
    fn non_zero_exit_quotes_stdout() {
        let e = check(1, "API call failed after 1 retries: HTTP 500: boom\n", SID)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("exit status 1"), "{e}");
        assert!(e.contains("HTTP 500: boom"), "{e}");
        assert!(e.contains("session 20261122_063815_604466"), "{e}");

        let e = check(1, "", "Traceback: oops\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("stderr:\nTraceback: oops"), "{e}");

        let killed = Output {
            status: ExitStatus::from_raw(15),
            stdout: String::new(),
            stderr: String::new(),
            duration: Duration::ZERO,
        };
        let e = check_chat(killed)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("killed by a signal"), "{e}");
        assert!(e.contains("(hermes printed nothing)"), "{e}");
    }

    #[test]
    fn sentinels_are_failures() {
        let e = check(
            0,
            "⚠️  Reached maximum iterations (3). Requesting summary...\nI did things.\n",
            SID,
        );
        assert!(
            matches!(
                &e,
                Err(HermesError::MaxTurns {
                    limit: Some(3),
                    session: Some(_),
                    ..
                })
            ),
            "{e:?}"
        );
        let e = check(
            0,
            "⚠️ No reply: the model returned empty content after retries.\n",
            SID,
        );
        assert!(matches!(e, Err(HermesError::NoReply { .. })), "{e:?}");
        let e = check(0, " \n", SID);
        assert!(matches!(e, Err(HermesError::NoAnswer { .. })), "{e:?}");
    }

    #[test]
    fn missing_program() {
        let h = hermes("/nonexistent/hermes");
        let e = h.chat("hi", Some(2), &[]).err();
        let text = e.as_ref().map(ToString::to_string).unwrap_or_default();
        assert!(
            matches!(e, Some(HermesError::Cli(CliError::NotInstalled { .. }))),
            "{text}"
        );
        assert!(text.contains("HERMES_BIN"), "{text}");
    }

    #[test]
    fn nul_bytes_are_dropped_from_the_prompt() {
        // `true` ignores its arguments and exits 0 with no output.
        let h = hermes("true");
        let e = h.chat("a\0b", None, &[]).err();
        assert!(matches!(e, Some(HermesError::NoAnswer { .. })), "{e:?}");
    }

    #[test]
    fn prompt_too_long() {
        let h = Hermes::from_env(None);
        let big = "x".repeat(MAX_ARG_BYTES);
        assert!(matches!(
            h.chat(&big, None, &[]),
            Err(HermesError::Cli(CliError::PromptTooLong { .. }))
        ));
    }
}
