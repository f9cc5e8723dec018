//! Running the hermes CLI: `hermes chat` for the role's work and `hermes
//! sessions export` for its transcript.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::error::{HERMES_VERSION, HermesError};
use crate::transcript::{self, ExportError, Sentinel, Session};

/// Environment variable naming the hermes executable (default: `hermes` on
/// `PATH`).
pub const ENV_BIN: &str = "HERMES_BIN";

/// Linux's limit for one command-line argument (`MAX_ARG_STRLEN`, 32 pages),
/// including the terminating NUL.
pub const MAX_ARG_BYTES: usize = 32 * 4096;

/// How much of hermes' output an error message quotes.
const QUOTE_CHARS: usize = 4000;

/// The hermes executable.
#[derive(Debug, Clone)]
pub struct Hermes {
    program: OsString,
    from_env: bool,
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
    /// `hermes sessions export` did not start.
    #[error("cannot run `hermes sessions export`: {0}")]
    Spawn(#[source] std::io::Error),
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
    /// `$HERMES_BIN` if set and non-empty, else `hermes` (looked up on `PATH`).
    pub fn from_env() -> Self {
        match std::env::var_os(ENV_BIN).filter(|v| !v.is_empty()) {
            Some(program) => Self {
                program,
                from_env: true,
            },
            None => Self {
                program: "hermes".into(),
                from_env: false,
            },
        }
    }

    /// The program, for messages.
    pub fn program(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }

    /// A command for hermes with the environment every invocation gets:
    /// stdin closed, and no runtime `pip install` into hermes' venv.
    /// `HERMES_HOME` and the working directory are inherited.
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
            .env("NO_COLOR", "1");
        cmd
    }

    fn spawn_error(&self, e: std::io::Error) -> HermesError {
        match e.kind() {
            ErrorKind::NotFound => HermesError::NotInstalled {
                program: self.program(),
                source_of: if self.from_env {
                    "from HERMES_BIN"
                } else {
                    "not found on PATH; HERMES_BIN is not set"
                },
                version: HERMES_VERSION,
            },
            _ => HermesError::Spawn {
                program: self.program(),
                source: e,
            },
        }
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
        if prompt.len() >= MAX_ARG_BYTES {
            return Err(HermesError::PromptTooLong {
                bytes: prompt.len(),
                limit: MAX_ARG_BYTES - 1,
            });
        }
        // An argument cannot hold a NUL byte (a task may, from JSON `\u0000`).
        let prompt = if prompt.contains('\0') {
            tracing::warn!("removing NUL characters from the prompt");
            std::borrow::Cow::Owned(prompt.replace('\0', ""))
        } else {
            std::borrow::Cow::Borrowed(prompt)
        };
        let mut cmd = self.command();
        cmd.args(["chat", "-q", prompt.as_ref(), "--yolo"]);
        if let Some(n) = max_turns {
            cmd.arg("--max-turns").arg(n.to_string());
        }
        cmd.arg("--quiet").args(extra);
        tracing::debug!(
            program = %self.program(),
            prompt_bytes = prompt.len(),
            ?max_turns,
            ?extra,
            "running hermes chat"
        );
        let started = Instant::now();
        let out = cmd.output().map_err(|e| {
            if e.raw_os_error() == Some(7) {
                // E2BIG: the arguments and environment together are too big.
                HermesError::PromptTooLong {
                    bytes: prompt.len(),
                    limit: MAX_ARG_BYTES - 1,
                }
            } else {
                self.spawn_error(e)
            }
        })?;
        let duration = started.elapsed();
        check_chat(out, duration)
    }

    /// Reads the transcript of session `id` with `hermes sessions export
    /// --session-id <id> -`.
    pub fn export(&self, id: &str) -> Result<Session, ExportFailure> {
        let out = self
            .command()
            .args(["sessions", "export", "--session-id", id, "-"])
            .output()
            .map_err(ExportFailure::Spawn)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(ExportFailure::Failed {
                status: out.status.to_string(),
                output: transcript::shorten(
                    &format!("{}{}", stdout, String::from_utf8_lossy(&out.stderr)),
                    500,
                ),
            });
        }
        Ok(transcript::parse_export(&stdout, id)?)
    }
}

/// Classifies a finished `hermes chat`.
fn check_chat(out: Output, duration: Duration) -> Result<Chat, HermesError> {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let session = transcript::session_id(&stderr).map(str::to_owned);
    tracing::debug!(
        status = %out.status,
        session = session.as_deref().unwrap_or("-"),
        stdout_bytes = stdout.len(),
        ms = duration.as_millis() as u64,
        "hermes chat finished"
    );
    if !out.status.success() {
        let status = match out.status.code() {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".to_owned(),
        };
        let mut output = transcript::tail(stdout.trim(), QUOTE_CHARS);
        // stderr normally only holds the session id; show anything else.
        let extra: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("session_id: "))
            .collect();
        if !extra.is_empty() {
            output.push_str("\nstderr:\n");
            output.push_str(&transcript::tail(&extra.join("\n"), QUOTE_CHARS));
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
                output: transcript::tail(stdout.trim(), QUOTE_CHARS),
                session,
            });
        }
        Some(Sentinel::NoReply) => {
            return Err(HermesError::NoReply {
                output: transcript::tail(stdout.trim(), QUOTE_CHARS),
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

    fn out(code: i32, stdout: &str, stderr: &str) -> Output {
        Output {
            status: ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    fn check(code: i32, stdout: &str, stderr: &str) -> Result<Chat, HermesError> {
        check_chat(out(code, stdout, stderr), Duration::from_millis(5))
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
            stdout: vec![],
            stderr: vec![],
        };
        let e = check_chat(killed, Duration::ZERO)
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
        let h = Hermes {
            program: "/nonexistent/hermes".into(),
            from_env: true,
        };
        let e = h.chat("hi", Some(2), &[]).err();
        let text = e.as_ref().map(ToString::to_string).unwrap_or_default();
        assert!(
            matches!(e, Some(HermesError::NotInstalled { .. })),
            "{text}"
        );
        assert!(text.contains("HERMES_BIN"), "{text}");
    }

    #[test]
    fn nul_bytes_are_dropped_from_the_prompt() {
        // `true` ignores its arguments and exits 0 with no output.
        let h = Hermes {
            program: "true".into(),
            from_env: false,
        };
        let e = h.chat("a\0b", None, &[]).err();
        assert!(matches!(e, Some(HermesError::NoAnswer { .. })), "{e:?}");
    }

    #[test]
    fn prompt_too_long() {
        let h = Hermes::from_env();
        let big = "x".repeat(MAX_ARG_BYTES);
        assert!(matches!(
            h.chat(&big, None, &[]),
            Err(HermesError::PromptTooLong { .. })
        ));
    }
}
