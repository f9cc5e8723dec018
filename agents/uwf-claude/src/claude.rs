//! Running Claude Code: the command line, the live progress from its
//! `stream-json` output, and the final `result` event.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Map, Value};
use uwf_agent_kit::cli_agent::{self, Cli, RunOptions};

use crate::error::{CLAUDE_VERSION, ClaudeError};

/// Environment variable naming the claude executable.
pub const ENV_BIN: &str = "CLAUDE_BIN";

/// What uwf-claude passes to `claude -p` besides the prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// `--model`.
    pub model: Option<String>,
    /// `--permission-mode`.
    pub permission_mode: String,
    /// `--allowedTools` (empty: not passed).
    pub allowed_tools: Vec<String>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// Extra arguments, last.
    pub extra: Vec<String>,
    /// Working directory (`None`: the current one).
    pub cwd: Option<PathBuf>,
    /// Stop after this long.
    pub timeout: Option<Duration>,
    /// `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY` from a provider of
    /// config.yaml; `None`: inherited from the environment.
    pub endpoint: Option<(String, String)>,
}

/// The arguments of `claude` for `prompt`.
pub fn arguments(settings: &Settings, prompt: &str) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-p".into(),
        prompt.into(),
        "--output-format".into(),
        "stream-json".into(),
        "--verbose".into(),
        "--permission-mode".into(),
        settings.permission_mode.clone(),
    ];
    if !settings.allowed_tools.is_empty() {
        args.push("--allowedTools".into());
        args.push(settings.allowed_tools.join(","));
    }
    if let Some(model) = &settings.model {
        args.push("--model".into());
        args.push(model.clone());
    }
    if let Some(n) = settings.max_turns {
        args.push("--max-turns".into());
        args.push(n.to_string());
    }
    args.extend(settings.extra.iter().cloned());
    args
}

/// The final `result` event of a run, and what came before it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    /// The session id (from the `system`/`init` event or the result).
    pub session_id: Option<String>,
    /// The model (from the `system`/`init` event).
    pub model: Option<String>,
    /// The `result` event, if Claude Code printed one.
    pub result: Option<Map<String, Value>>,
    /// The `user` / `assistant` events (the transcript, should the
    /// session file be unreadable).
    pub messages: Vec<Map<String, Value>>,
    /// The wall time, ms.
    pub duration_ms: u64,
    /// Assistant messages seen so far (model turns), and the last one's id.
    turns: (u32, Option<String>),
}

impl Run {
    /// Takes in one line of `stream-json` output; returns what to show as
    /// progress, if anything.
    pub fn feed(&mut self, line: &str) -> Vec<String> {
        let Some(event) = cli_agent::json_lines(line).next() else {
            return Vec::new();
        };
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        let mut shown = Vec::new();
        match kind {
            "system" if event.get("subtype").and_then(Value::as_str) == Some("init") => {
                self.session_id = text(event.get("session_id"));
                self.model = text(event.get("model"));
                shown.push(format!(
                    "session {} · model {}",
                    self.session_id.as_deref().unwrap_or("?"),
                    self.model.as_deref().unwrap_or("?")
                ));
            }
            "assistant" | "user" => {
                let message = event.get("message");
                let id = message
                    .and_then(|m| m.get("id"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let prefix = if kind == "assistant" {
                    // One API message arrives as one event per content block.
                    if id.is_none() || id != self.turns.1 {
                        self.turns = (self.turns.0 + 1, id);
                    }
                    format!("turn {} · ", self.turns.0)
                } else {
                    String::new()
                };
                for block in message
                    .and_then(|m| m.get("content"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let t = block.get("text").and_then(Value::as_str).unwrap_or("");
                            if !t.trim().is_empty() {
                                shown.push(format!("{prefix}says: {t}"));
                            }
                        }
                        Some("tool_use") => shown.push(format!("{prefix}{}", tool_line(block))),
                        Some("tool_result") => {
                            let failed =
                                block.get("is_error").and_then(Value::as_bool) == Some(true);
                            let content = match block.get("content") {
                                Some(Value::String(s)) => s.clone(),
                                Some(other) => other.to_string(),
                                None => String::new(),
                            };
                            shown.push(format!(
                                "  ↳ {}{}",
                                if failed { "error: " } else { "" },
                                cli_agent::shorten(content.trim(), 160)
                            ));
                        }
                        _ => {}
                    }
                }
                self.messages.push(event);
            }
            "result" => {
                if self.session_id.is_none() {
                    self.session_id = text(event.get("session_id"));
                }
                shown.push(format!(
                    "finished: {} turn(s), {} ms{}",
                    event.get("num_turns").and_then(Value::as_u64).unwrap_or(0),
                    event
                        .get("duration_ms")
                        .and_then(Value::as_u64)
                        .unwrap_or(0),
                    if event.get("is_error").and_then(Value::as_bool) == Some(true) {
                        " (error)"
                    } else {
                        ""
                    }
                ));
                self.result = Some(event);
            }
            _ => {}
        }
        shown
    }

    /// The answer: the `result` text of a successful run. Errors for an
    /// `is_error` result, a non-zero exit, or no result at all.
    pub fn answer(&self, out: &cli_agent::Output) -> Result<String, ClaudeError> {
        let session = self.session_id.clone();
        let Some(result) = &self.result else {
            if !out.status.success() {
                return Err(ClaudeError::Failed {
                    status: out.status_text(),
                    message: out.quote(),
                    session,
                });
            }
            return Err(ClaudeError::NoAnswer {
                output: out.quote(),
                session,
            });
        };
        let text = result
            .get("result")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let is_error = result.get("is_error").and_then(Value::as_bool) == Some(true);
        if is_error || !out.status.success() {
            let subtype = result
                .get("subtype")
                .and_then(Value::as_str)
                .unwrap_or("error");
            let errors: Vec<String> = result
                .get("errors")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
                .collect();
            let message = [text.to_owned(), errors.join("; ")]
                .into_iter()
                .filter(|s| !s.trim().is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            let message = if message.is_empty() {
                out.quote()
            } else {
                message
            };
            return Err(ClaudeError::Failed {
                status: format!("{}, {subtype}", out.status_text()),
                message,
                session,
            });
        }
        if text.trim().is_empty() {
            return Err(ClaudeError::NoAnswer {
                output: out.quote(),
                session,
            });
        }
        Ok(text.to_owned())
    }
}

/// `Bash: echo hi`, `Edit: src/main.rs`, `Read: …`, or the input as JSON.
fn tool_line(block: &Value) -> String {
    let name = block.get("name").and_then(Value::as_str).unwrap_or("tool");
    let input = block.get("input").cloned().unwrap_or(Value::Null);
    let key = [
        "command",
        "file_path",
        "path",
        "pattern",
        "url",
        "description",
    ]
    .into_iter()
    .find_map(|k| input.get(k).and_then(Value::as_str));
    match key {
        Some(v) => format!("{name}: {v}"),
        None => format!("{name}: {input}"),
    }
}

/// Claude Code's configuration directory: `$CLAUDE_CONFIG_DIR`, else
/// `~/.claude`.
pub fn config_dir() -> Option<PathBuf> {
    match std::env::var_os("CLAUDE_CONFIG_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => dirs::home_dir().map(|h| h.join(".claude")),
    }
}

/// Whether Claude Code has credentials: a key or token in the environment
/// (or from a provider), a cloud provider switch, or a login.
pub fn has_credentials(settings: &Settings) -> bool {
    let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
    settings.endpoint.is_some()
        || [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX",
        ]
        .into_iter()
        .any(set)
        || config_dir().is_some_and(|d| d.join(".credentials.json").is_file())
}

/// The claude CLI.
pub fn cli() -> Cli {
    Cli::from_env("claude", ENV_BIN, "claude").install_hint(format!(
        "install Claude Code, e.g. `npm install -g @anthropic-ai/claude-code@{CLAUDE_VERSION}`, then put `claude` on PATH or set CLAUDE_BIN=/path/to/claude"
    ))
}

/// The command for `prompt`: arguments, working directory, environment
/// (no auto-update in an unattended step; the endpoint of `--provider`).
pub fn command(cli: &Cli, settings: &Settings, prompt: &str) -> Command {
    let mut cmd = cli.command();
    cmd.args(arguments(settings, prompt))
        .env("DISABLE_AUTOUPDATER", "1");
    if let Some(dir) = &settings.cwd {
        cmd.current_dir(dir);
    }
    if let Some((base_url, key)) = &settings.endpoint {
        cmd.env("ANTHROPIC_BASE_URL", base_url)
            .env("ANTHROPIC_API_KEY", key);
    }
    cmd
}

/// Runs Claude Code for `prompt`, printing progress on stderr as it goes.
pub fn run(
    cli: &Cli,
    settings: &Settings,
    prompt: &str,
) -> Result<(Run, cli_agent::Output), ClaudeError> {
    let prompt = cli_agent::prompt_arg(cli.tool(), prompt)?;
    let cmd = command(cli, settings, &prompt);
    let mut run = Run::default();
    let out = cli.run(
        cmd,
        RunOptions::new()
            .timeout(settings.timeout)
            .echo_stderr(true)
            .on_stdout_line(|line| {
                for shown in run.feed(line) {
                    cli_agent::progress("claude", &shown);
                }
            }),
    )?;
    run.duration_ms = out.duration_ms();
    Ok((run, out))
}

/// The working directory Claude Code ran in.
pub fn working_dir(settings: &Settings) -> Option<PathBuf> {
    match &settings.cwd {
        Some(d) => Some(d.clone()),
        None => std::env::current_dir().ok(),
    }
    .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
}

/// The base URL for `ANTHROPIC_BASE_URL` from a provider's `baseUrl`:
/// Claude Code appends `/v1/messages` itself, so a trailing `/v1` goes.
pub fn anthropic_base_url(base_url: &str) -> String {
    let trimmed = base_url.trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn out(code: i32) -> cli_agent::Output {
        cli_agent::Output {
            status: ExitStatus::from_raw(code << 8),
            stdout: String::new(),
            stderr: "boom\n".into(),
            duration: Duration::from_millis(3),
        }
    }

    const INIT: &str = r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s-1","model":"claude-x","tools":["Bash"]}"#;
    const TOOL: &str = r#"{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"echo hi > out.txt"}}]},"session_id":"s-1"}"#;
    const RESULT: &str = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"(Bash completed with no output)","is_error":false}]}}"#;
    const TEXT: &str = r#"{"type":"assistant","message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"All done."}]}}"#;
    const DONE: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"---\nstatus: done\n---\nok","num_turns":2,"duration_ms":175,"session_id":"s-1"}"#;

    #[test]
    fn progress_and_answer_from_the_stream() {
        let mut run = Run::default();
        let mut shown = Vec::new();
        for line in [INIT, TOOL, RESULT, "not json", TEXT, DONE] {
            shown.extend(run.feed(line));
        }
        assert_eq!(
            shown,
            [
                "session s-1 · model claude-x",
                "turn 1 · Bash: echo hi > out.txt",
                "  ↳ (Bash completed with no output)",
                "turn 2 · says: All done.",
                "finished: 2 turn(s), 175 ms",
            ]
        );
        assert_eq!(run.messages.len(), 3);
        assert_eq!(run.model.as_deref(), Some("claude-x"));
        assert_eq!(
            run.answer(&out(0)).ok().as_deref(),
            Some("---\nstatus: done\n---\nok")
        );
    }

    #[test]
    fn errors() {
        let mut run = Run::default();
        run.feed(r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 boom","session_id":"s"}"#);
        let e = run
            .answer(&out(1))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("exit status 1, success"), "{e}");
        assert!(e.contains("API Error: 500 boom"), "{e}");
        assert!(e.contains("(session s)"), "{e}");

        let mut run = Run::default();
        run.feed(r#"{"type":"result","subtype":"error_max_turns","is_error":true,"result":null,"errors":["Reached maximum number of turns (1)"]}"#);
        let e = run
            .answer(&out(1))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("error_max_turns"), "{e}");
        assert!(e.contains("Reached maximum number of turns (1)"), "{e}");

        let run = Run::default();
        let e = run
            .answer(&out(2))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("exit status 2"), "{e}");
        assert!(e.contains("boom"), "{e}");
        assert!(matches!(
            run.answer(&out(0)),
            Err(ClaudeError::NoAnswer { .. })
        ));

        let mut run = Run::default();
        run.feed(r#"{"type":"result","is_error":false,"result":"  "}"#);
        assert!(matches!(
            run.answer(&out(0)),
            Err(ClaudeError::NoAnswer { .. })
        ));
    }

    #[test]
    fn command_line() {
        let s = Settings {
            model: Some("sonnet".into()),
            permission_mode: "acceptEdits".into(),
            allowed_tools: vec!["Bash".into(), "Edit".into()],
            max_turns: Some(5),
            extra: vec!["--add-dir".into(), "/x".into()],
            ..Settings::default()
        };
        assert_eq!(
            arguments(&s, "P").join(" "),
            "-p P --output-format stream-json --verbose --permission-mode acceptEdits --allowedTools Bash,Edit --model sonnet --max-turns 5 --add-dir /x"
        );
    }

    #[test]
    fn base_urls() {
        assert_eq!(
            anthropic_base_url("https://api.anthropic.com/v1"),
            "https://api.anthropic.com"
        );
        assert_eq!(
            anthropic_base_url("http://127.0.0.1:9/v1/"),
            "http://127.0.0.1:9"
        );
        assert_eq!(
            anthropic_base_url("http://gw/anthropic"),
            "http://gw/anthropic"
        );
    }
}
