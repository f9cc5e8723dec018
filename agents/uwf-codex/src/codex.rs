//! Running the Codex CLI: the command line, the live progress from its
//! `--json` events, and the answer (the last agent message).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Map, Value};
use uwf_agent_kit::cli_agent::{self, Cli, RunOptions};

use crate::error::{CODEX_VERSION, CodexError};

/// Environment variable naming the codex executable.
pub const ENV_BIN: &str = "CODEX_BIN";

/// A provider of config.yaml, as Codex's `-c model_providers.<id>.…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    /// The provider id given to Codex (`uwf-<alias>`).
    pub id: String,
    /// Its base URL (the Responses API root, e.g. `…/v1`).
    pub base_url: String,
    /// The variable holding its key (Codex reads it itself).
    pub env_key: String,
}

/// What uwf-codex passes to `codex exec` besides the prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// `--model`.
    pub model: Option<String>,
    /// `--sandbox`.
    pub sandbox: String,
    /// Extra arguments, before the prompt.
    pub extra: Vec<String>,
    /// Working directory (`None`: the current one).
    pub cwd: Option<PathBuf>,
    /// Stop after this long.
    pub timeout: Option<Duration>,
    /// The provider to use instead of Codex's configured one.
    pub provider: Option<Provider>,
}

/// A TOML string (Codex parses `-c` values as TOML).
fn toml_string(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The arguments of `codex` for `prompt`.
pub fn arguments(settings: &Settings, prompt: &str) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "exec".into(),
        "--json".into(),
        "--skip-git-repo-check".into(),
        "--sandbox".into(),
        settings.sandbox.clone(),
        // An unattended step never updates the CLI under its own feet.
        "-c".into(),
        "check_for_update_on_startup=false".into(),
    ];
    if let Some(model) = &settings.model {
        args.push("--model".into());
        args.push(model.clone());
    }
    if let Some(p) = &settings.provider {
        let prefix = format!("model_providers.{}", p.id);
        for kv in [
            format!("model_provider={}", toml_string(&p.id)),
            format!("{prefix}.name={}", toml_string(&p.id)),
            format!("{prefix}.base_url={}", toml_string(&p.base_url)),
            format!("{prefix}.env_key={}", toml_string(&p.env_key)),
            format!("{prefix}.wire_api=\"responses\""),
        ] {
            args.push("-c".into());
            args.push(kv);
        }
    }
    args.extend(settings.extra.iter().cloned());
    // The prompt last, after `--`, so a prompt starting with `-` is no flag.
    args.push("--".into());
    args.push(prompt.into());
    args
}

/// What the `--json` events said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    /// The Codex thread id (`thread.started`).
    pub thread_id: Option<String>,
    /// The last agent message: the answer.
    pub answer: Option<String>,
    /// `turn.failed` / `error` messages.
    pub errors: Vec<String>,
    /// The usage of the last `turn.completed`.
    pub usage: Option<Value>,
    /// Whether a turn completed.
    pub completed: bool,
    /// Wall time, ms.
    pub duration_ms: u64,
}

impl Run {
    /// Takes in one line of `--json` output; returns what to show as
    /// progress, if anything.
    pub fn feed(&mut self, line: &str) -> Vec<String> {
        let Some(event) = cli_agent::json_lines(line).next() else {
            return Vec::new();
        };
        let str_at = |v: &Map<String, Value>, k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let kind = str_at(&event, "type");
        let item = event
            .get("item")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let item_type = str_at(&item, "type");
        match (kind.as_str(), item_type.as_str()) {
            ("thread.started", _) => {
                self.thread_id = event
                    .get("thread_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                vec![format!(
                    "codex thread {}",
                    self.thread_id.as_deref().unwrap_or("?")
                )]
            }
            ("item.started", "command_execution") => {
                vec![format!("exec: {}", str_at(&item, "command"))]
            }
            ("item.completed", "command_execution") => vec![format!(
                "  ↳ exit {}{}",
                item.get("exit_code")
                    .map_or_else(|| "?".to_owned(), Value::to_string),
                match str_at(&item, "aggregated_output").trim() {
                    "" => String::new(),
                    o => format!(": {}", cli_agent::shorten(o, 160)),
                }
            )],
            ("item.completed", "file_change") => {
                let paths: Vec<String> = item
                    .get("changes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get("path").and_then(Value::as_str).map(str::to_owned))
                    .collect();
                vec![format!("edit: {}", paths.join(", "))]
            }
            ("item.completed", "agent_message") => {
                let text = str_at(&item, "text");
                self.answer = Some(text.clone());
                vec![format!("says: {text}")]
            }
            ("item.completed", "error") => vec![format!("note: {}", str_at(&item, "message"))],
            ("turn.completed", _) => {
                self.completed = true;
                self.usage = event.get("usage").cloned();
                vec!["turn completed".to_owned()]
            }
            ("turn.failed", _) => {
                let message = event
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("turn failed")
                    .to_owned();
                self.errors.push(message.clone());
                vec![format!("turn failed: {message}")]
            }
            ("error", _) => {
                let message = str_at(&event, "message");
                self.errors.push(message.clone());
                vec![format!("error: {message}")]
            }
            _ => Vec::new(),
        }
    }

    /// The answer of a successful run. Errors for a failed turn, a
    /// non-zero exit, or no agent message.
    pub fn answer(&self, out: &cli_agent::Output) -> Result<String, CodexError> {
        let thread = self.thread_id.clone();
        if !out.status.success() || (!self.errors.is_empty() && !self.completed) {
            let message = if self.errors.is_empty() {
                out.quote()
            } else {
                self.errors.join("; ")
            };
            let status = if out.status.success() {
                "turn failed".to_owned()
            } else {
                out.status_text()
            };
            return Err(CodexError::Failed {
                status,
                message,
                thread,
            });
        }
        match &self.answer {
            Some(a) if !a.trim().is_empty() => Ok(a.clone()),
            _ => Err(CodexError::NoAnswer {
                output: out.quote(),
                thread,
            }),
        }
    }
}

/// Codex's home: `$CODEX_HOME`, else `~/.codex`.
pub fn codex_home() -> Option<PathBuf> {
    match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => dirs::home_dir().map(|h| h.join(".codex")),
    }
}

/// Whether Codex has credentials: a provider from config.yaml (its key
/// checked when it was resolved), a key in the environment, a login, or a
/// `config.toml` of its own (which may configure any provider).
pub fn has_credentials(settings: &Settings) -> bool {
    let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
    settings.provider.is_some()
        || set("OPENAI_API_KEY")
        || set("CODEX_API_KEY")
        || codex_home()
            .is_some_and(|h| h.join("auth.json").is_file() || h.join("config.toml").is_file())
}

/// The codex CLI.
pub fn cli() -> Cli {
    Cli::from_env("codex", ENV_BIN, "codex").install_hint(format!(
        "install the Codex CLI, e.g. `npm install -g @openai/codex@{CODEX_VERSION}`, then put `codex` on PATH or set CODEX_BIN=/path/to/codex"
    ))
}

/// The command for `prompt`.
pub fn command(cli: &Cli, settings: &Settings, prompt: &str) -> Command {
    let mut cmd = cli.command();
    cmd.args(arguments(settings, prompt));
    if let Some(dir) = &settings.cwd {
        cmd.current_dir(dir);
    }
    cmd
}

/// Runs Codex for `prompt`, printing progress on stderr as it goes.
/// Codex's stderr (warnings) is kept for error messages, not echoed.
pub fn run(
    cli: &Cli,
    settings: &Settings,
    prompt: &str,
) -> Result<(Run, cli_agent::Output), CodexError> {
    let prompt = cli_agent::prompt_arg(cli.tool(), prompt)?;
    let cmd = command(cli, settings, &prompt);
    let mut run = Run::default();
    let out = cli.run(
        cmd,
        RunOptions::new()
            .timeout(settings.timeout)
            .on_stdout_line(|line| {
                for shown in run.feed(line) {
                    cli_agent::progress("codex", &shown);
                }
            }),
    )?;
    run.duration_ms = out.duration_ms();
    Ok((run, out))
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

    /// `codex exec --json` output of codex-cli 0.169.0 against the mock.
    const EVENTS: &str = r#"{"type":"thread.started","thread_id":"t-1"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `mock-model` not found."}}
{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo hi > out.txt'","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo hi > out.txt'","aggregated_output":"","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"---\nstatus: done\n---\n\nok"}}
{"type":"turn.completed","usage":{"input_tokens":20150,"cached_input_tokens":0,"output_tokens":56}}"#;

    #[test]
    fn progress_and_answer_from_the_events() {
        let mut run = Run::default();
        let shown: Vec<String> = EVENTS.lines().flat_map(|l| run.feed(l)).collect();
        assert_eq!(
            shown,
            [
                "codex thread t-1",
                "note: Model metadata for `mock-model` not found.",
                "exec: /bin/bash -lc 'echo hi > out.txt'",
                "  ↳ exit 0",
                "says: ---\nstatus: done\n---\n\nok",
                "turn completed",
            ]
        );
        assert_eq!(
            run.usage.as_ref().map(|u| &u["output_tokens"]),
            Some(&Value::from(56))
        );
        assert_eq!(
            run.answer(&out(0)).ok().as_deref(),
            Some("---\nstatus: done\n---\n\nok")
        );
    }

    #[test]
    fn errors() {
        let mut run = Run::default();
        run.feed(r#"{"type":"thread.started","thread_id":"t"}"#);
        run.feed(r#"{"type":"error","message":"stream disconnected: 500 boom"}"#);
        run.feed(r#"{"type":"turn.failed","error":{"message":"exceeded retry limit"}}"#);
        let e = run
            .answer(&out(1))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("exit status 1"), "{e}");
        assert!(e.contains("500 boom; exceeded retry limit"), "{e}");
        assert!(e.contains("(codex thread t)"), "{e}");
        let e = run
            .answer(&out(0))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("turn failed"), "{e}");

        let run = Run::default();
        let e = run.answer(&out(0)).err();
        assert!(matches!(e, Some(CodexError::NoAnswer { .. })), "{e:?}");
        let e = run
            .answer(&out(2))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("boom"), "{e}");
    }

    #[test]
    fn command_line() {
        let s = Settings {
            model: Some("gpt-x".into()),
            sandbox: "workspace-write".into(),
            extra: vec!["--add-dir".into(), "/x".into()],
            provider: Some(Provider {
                id: "uwf-mock".into(),
                base_url: "http://127.0.0.1:9/v1".into(),
                env_key: "MOCK_KEY".into(),
            }),
            ..Settings::default()
        };
        assert_eq!(
            arguments(&s, "-P").join(" "),
            "exec --json --skip-git-repo-check --sandbox workspace-write -c check_for_update_on_startup=false \
             --model gpt-x -c model_provider=\"uwf-mock\" -c model_providers.uwf-mock.name=\"uwf-mock\" \
             -c model_providers.uwf-mock.base_url=\"http://127.0.0.1:9/v1\" \
             -c model_providers.uwf-mock.env_key=\"MOCK_KEY\" -c model_providers.uwf-mock.wire_api=\"responses\" \
             --add-dir /x -- -P"
        );
        assert_eq!(toml_string("a\"b\\c\n"), r#""a\"b\\c\n""#);
    }
}
