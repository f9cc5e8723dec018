//! The tools the model works with, all inside the working directory
//! ([`Sandbox`]) and under the role's [`AgentPolicy`].
//!
//! | tool | arguments | does |
//! |---|---|---|
//! | `read_file` | `path`, `start_line?`, `end_line?` | the file's lines, numbered |
//! | `write_file` | `path`, `content` | creates or replaces a file (and missing parent directories) |
//! | `edit_file` | `path`, `old_text`, `new_text` | replaces the one exact occurrence of `old_text` |
//! | `list_dir` | `path?` | the entries of a directory |
//! | `glob` | `pattern` | the files matching a glob such as `src/**/*.rs` |
//! | `grep` | `pattern`, `path?`, `glob?` | lines matching a regular expression |
//! | `run_command` | `argv` or `command`, `timeout_secs?` | runs a program (or `sh -c`) |
//! | `submit` | the role's output fields | hands in the deliverable (handled by the loop) |
//!
//! A read-only policy offers neither `write_file`, `edit_file` nor
//! `run_command`. Every result is cut to [`MAX_RESULT_CHARS`] with a note.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uwf_agent_kit::cli_agent::{Cli, CliError, RunOptions};
use uwf_state::policy::AgentPolicy;

use crate::sandbox::Sandbox;
use crate::wire::ToolSpec;

/// The longest tool result sent back to the model, in characters.
pub const MAX_RESULT_CHARS: usize = 16_000;

/// The most a command's stdout or stderr is kept in memory, in bytes.
const CAPTURE_BYTES: usize = 1 << 20;

/// Largest file `read_file`, `edit_file` and `grep` look at, in bytes.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// Most entries `list_dir`, `glob` and `grep` return.
const MAX_ENTRIES: usize = 500;

/// Most files `glob` and `grep` look at.
const MAX_WALK: usize = 20_000;

/// The name of the tool that hands in the deliverable.
pub const SUBMIT: &str = "submit";

/// What a tool call came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The text for the model (bounded).
    pub content: String,
    /// Whether the tool failed.
    pub is_error: bool,
}

impl Outcome {
    fn ok(text: impl Into<String>) -> Self {
        Self {
            content: bounded(&text.into()),
            is_error: false,
        }
    }

    /// A failed call: what went wrong, for the model to correct.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            content: bounded(&text.into()),
            is_error: true,
        }
    }
}

/// `text` cut to [`MAX_RESULT_CHARS`]: its head and its tail, with a note
/// saying how much was left out.
pub fn bounded(text: &str) -> String {
    let count = text.chars().count();
    if count <= MAX_RESULT_CHARS {
        return text.to_owned();
    }
    let keep = MAX_RESULT_CHARS / 2;
    let head_end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(count - keep)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n[… {} of {count} characters cut here; ask for less, e.g. a line range or a narrower pattern …]\n{}",
        &text[..head_end],
        count - 2 * keep,
        &text[tail_start..]
    )
}

/// The tools of a step.
#[derive(Debug)]
pub struct Tools {
    sandbox: Sandbox,
    policy: AgentPolicy,
    /// Environment variables commands never see (the secrets of `.env`,
    /// the provider's key).
    hidden_env: Vec<String>,
}

fn string_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("`{key}` must be a string, not {other}")),
        None => Err(format!("`{key}` is required")),
    }
}

fn opt_u64(args: &Value, key: &str) -> Result<Option<u64>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a whole number ≥ 0, not {v}")),
    }
}

fn read_text(path: &Path, shown: &str) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if meta.is_dir() {
        return Err(format!("{shown} is a directory; use list_dir"));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{shown} is {} bytes, more than the {MAX_FILE_BYTES} this tool reads",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{shown}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))
}

/// Every file under `dir` (not following symlinks into directories, not
/// descending into `.git`), at most [`MAX_WALK`]; the flag says whether
/// the walk was cut short.
fn walk(dir: &Path) -> (Vec<PathBuf>, bool) {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries.into_iter().rev() {
            let Ok(kind) = e.file_type() else { continue };
            let path = e.path();
            if kind.is_dir() {
                if e.file_name() != ".git" {
                    stack.push(path);
                }
            } else {
                out.push(path);
                if out.len() >= MAX_WALK {
                    return (out, true);
                }
            }
        }
    }
    out.sort();
    (out, false)
}

impl Tools {
    /// The tools of a step in `sandbox` under `policy`; commands run
    /// without the variables `hidden_env`.
    pub fn new(sandbox: Sandbox, policy: AgentPolicy, hidden_env: Vec<String>) -> Self {
        Self {
            sandbox,
            policy,
            hidden_env,
        }
    }

    /// The tools offered to the model (without `submit`).
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = vec![
            ToolSpec {
                name: "read_file",
                description: "Read a UTF-8 text file of the working directory. Lines come numbered (`N\\tline`); give start_line/end_line (1-based, inclusive) to read part of a long file.".into(),
                parameters: json!({"type": "object", "required": ["path"], "additionalProperties": false, "properties": {
                    "path": {"type": "string", "description": "Path relative to the working directory."},
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1}}}),
            },
            ToolSpec {
                name: "list_dir",
                description: "List a directory of the working directory (default: its top). Directories end with `/`.".into(),
                parameters: json!({"type": "object", "additionalProperties": false, "properties": {
                    "path": {"type": "string", "description": "Directory relative to the working directory."}}}),
            },
            ToolSpec {
                name: "glob",
                description: "Find files of the working directory by a glob pattern, e.g. `**/*.rs` or `src/*.py`.".into(),
                parameters: json!({"type": "object", "required": ["pattern"], "additionalProperties": false, "properties": {
                    "pattern": {"type": "string"}}}),
            },
            ToolSpec {
                name: "grep",
                description: "Search files for a regular expression (Rust regex syntax); prints `path:line:text`. Optionally under `path` and only files matching `glob`.".into(),
                parameters: json!({"type": "object", "required": ["pattern"], "additionalProperties": false, "properties": {
                    "pattern": {"type": "string"},
                    "path": {"type": "string", "description": "A file or directory (default: the working directory)."},
                    "glob": {"type": "string", "description": "Only files whose path matches this glob, e.g. `**/*.py`."}}}),
            },
        ];
        if !self.policy.read_only {
            specs.extend([
                ToolSpec {
                    name: "write_file",
                    description: "Create or replace a file of the working directory with `content` (missing parent directories are created).".into(),
                    parameters: json!({"type": "object", "required": ["path", "content"], "additionalProperties": false, "properties": {
                        "path": {"type": "string"}, "content": {"type": "string"}}}),
                },
                ToolSpec {
                    name: "edit_file",
                    description: "Replace the one occurrence of `old_text` in a file by `new_text`. `old_text` must match exactly (whitespace included) and exactly once: add surrounding lines to make it unique.".into(),
                    parameters: json!({"type": "object", "required": ["path", "old_text", "new_text"], "additionalProperties": false, "properties": {
                        "path": {"type": "string"}, "old_text": {"type": "string"}, "new_text": {"type": "string"}}}),
                },
                ToolSpec {
                    name: "run_command",
                    description: format!(
                        "Run a command in the working directory: `argv` (program and arguments, no shell) or `command` (a line for `sh -c`). stdin is empty; it is stopped after timeout_secs (at most {}s). Prints the exit status, stdout and stderr.",
                        self.policy.command_timeout.as_secs()
                    ),
                    parameters: json!({"type": "object", "additionalProperties": false, "properties": {
                        "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        "command": {"type": "string"},
                        "timeout_secs": {"type": "integer", "minimum": 1}}}),
                },
            ]);
        }
        specs
    }

    /// Runs tool `name` with `args`; `deadline` bounds a command.
    /// `Err` only for what ends the step (an interrupt).
    pub fn call(
        &self,
        name: &str,
        args: &Value,
        deadline: Option<Instant>,
    ) -> Result<Outcome, CliError> {
        let writes = matches!(name, "write_file" | "edit_file" | "run_command");
        if writes && self.policy.read_only {
            return Ok(Outcome::error(format!(
                "{name} is not available: this role is read-only (agentPolicy readOnly)"
            )));
        }
        let result = match name {
            "read_file" => self.read_file(args),
            "write_file" => self.write_file(args),
            "edit_file" => self.edit_file(args),
            "list_dir" => self.list_dir(args),
            "glob" => self.glob(args),
            "grep" => self.grep(args),
            "run_command" => return self.run_command(args, deadline),
            other => Err(format!(
                "there is no tool {other:?}; the tools are {}, {SUBMIT}",
                self.specs()
                    .iter()
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        Ok(match result {
            Ok(text) => Outcome::ok(text),
            Err(text) => Outcome::error(text),
        })
    }

    fn read_file(&self, args: &Value) -> Result<String, String> {
        let path = string_arg(args, "path")?;
        let real = self.sandbox.existing(path).map_err(|e| e.to_string())?;
        let text = read_text(&real, path)?;
        let lines: Vec<&str> = text.lines().collect();
        let start = opt_u64(args, "start_line")?.unwrap_or(1).max(1);
        let end = opt_u64(args, "end_line")?.unwrap_or(lines.len() as u64);
        if lines.is_empty() {
            return Ok(format!("({path} is empty)"));
        }
        if start > lines.len() as u64 || end < start {
            return Err(format!(
                "lines {start}–{end} are not in {path}, which has {} lines",
                lines.len()
            ));
        }
        let end = end.min(lines.len() as u64);
        let width = end.to_string().len();
        let mut out = String::new();
        for n in start..=end {
            let line = lines[usize::try_from(n - 1).unwrap_or(usize::MAX)];
            out.push_str(&format!("{n:>width$}\t{line}\n"));
        }
        if end < lines.len() as u64 || start > 1 {
            out.push_str(&format!("(lines {start}–{end} of {})\n", lines.len()));
        }
        Ok(out)
    }

    fn write_file(&self, args: &Value) -> Result<String, String> {
        let path = string_arg(args, "path")?;
        let content = string_arg(args, "content")?;
        let target = self.sandbox.writable(path).map_err(|e| e.to_string())?;
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{path}: {e}"))?;
        }
        std::fs::write(&target, content).map_err(|e| format!("{path}: {e}"))?;
        Ok(format!(
            "wrote {} ({} bytes)",
            self.sandbox.shown(&target),
            content.len()
        ))
    }

    fn edit_file(&self, args: &Value) -> Result<String, String> {
        let path = string_arg(args, "path")?;
        let old = string_arg(args, "old_text")?;
        let new = string_arg(args, "new_text")?;
        if old.is_empty() {
            return Err("`old_text` is empty; to create a file use write_file".into());
        }
        let real = self.sandbox.existing(path).map_err(|e| e.to_string())?;
        let text = read_text(&real, path)?;
        let found = text.matches(old).count();
        match found {
            0 => Err(format!(
                "`old_text` was not found in {path}; read the file again and copy the text exactly, whitespace included"
            )),
            1 => {
                let edited = text.replacen(old, new, 1);
                std::fs::write(&real, edited).map_err(|e| format!("{path}: {e}"))?;
                let line = text[..text.find(old).unwrap_or(0)].matches('\n').count() + 1;
                Ok(format!(
                    "edited {} at line {line}",
                    self.sandbox.shown(&real)
                ))
            }
            n => Err(format!(
                "`old_text` occurs {n} times in {path}; include more surrounding lines so that it occurs once"
            )),
        }
    }

    fn list_dir(&self, args: &Value) -> Result<String, String> {
        let path = match args.get("path") {
            None | Some(Value::Null) => ".",
            Some(_) => string_arg(args, "path")?,
        };
        let real = self.sandbox.existing(path).map_err(|e| e.to_string())?;
        let entries = std::fs::read_dir(&real).map_err(|e| format!("{path}: {e}"))?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                match e.file_type() {
                    Ok(t) if t.is_dir() => format!("{name}/"),
                    _ => name,
                }
            })
            .collect();
        names.sort();
        let total = names.len();
        names.truncate(MAX_ENTRIES);
        let mut out = names.join("\n");
        if total > MAX_ENTRIES {
            out.push_str(&format!("\n(… {} more entries)", total - MAX_ENTRIES));
        }
        if total == 0 {
            out = format!("({path} is empty)");
        }
        Ok(out)
    }

    fn pattern(text: &str) -> Result<glob::Pattern, String> {
        glob::Pattern::new(text).map_err(|e| format!("bad glob pattern {text:?}: {e}"))
    }

    fn glob(&self, args: &Value) -> Result<String, String> {
        let text = string_arg(args, "pattern")?;
        let pattern = Self::pattern(text.trim_start_matches("./"))?;
        let options = glob::MatchOptions {
            require_literal_separator: true,
            ..glob::MatchOptions::new()
        };
        let (files, cut) = walk(self.sandbox.root());
        let mut hits: Vec<String> = files
            .iter()
            .map(|f| self.sandbox.shown(f))
            .filter(|f| pattern.matches_with(f, options))
            .collect();
        let total = hits.len();
        hits.truncate(MAX_ENTRIES);
        let mut out = if total == 0 {
            format!("no file matches {text:?}")
        } else {
            hits.join("\n")
        };
        if total > MAX_ENTRIES {
            out.push_str(&format!("\n(… {} more files)", total - MAX_ENTRIES));
        }
        if cut {
            out.push_str(&format!(
                "\n(only the first {MAX_WALK} files were looked at)"
            ));
        }
        Ok(out)
    }

    fn grep(&self, args: &Value) -> Result<String, String> {
        let text = string_arg(args, "pattern")?;
        let re = regex::Regex::new(text).map_err(|e| format!("bad regular expression: {e}"))?;
        let base = match args.get("path") {
            None | Some(Value::Null) => self.sandbox.root().to_path_buf(),
            Some(_) => self
                .sandbox
                .existing(string_arg(args, "path")?)
                .map_err(|e| e.to_string())?,
        };
        let filter = match args.get("glob") {
            None | Some(Value::Null) => None,
            Some(_) => Some(Self::pattern(string_arg(args, "glob")?)?),
        };
        let (files, cut) = if base.is_dir() {
            walk(&base)
        } else {
            (vec![base.clone()], false)
        };
        let mut hits = Vec::new();
        let mut more = 0usize;
        for f in &files {
            let shown = self.sandbox.shown(f);
            if filter.as_ref().is_some_and(|p| !p.matches(&shown)) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(f) else {
                continue;
            };
            if meta.len() > MAX_FILE_BYTES {
                continue;
            }
            let Ok(content) = std::fs::read_to_string(f) else {
                continue; // binary or unreadable
            };
            for (i, line) in content.lines().enumerate() {
                if re.is_match(line) {
                    if hits.len() < MAX_ENTRIES {
                        hits.push(format!("{shown}:{}:{line}", i + 1));
                    } else {
                        more += 1;
                    }
                }
            }
        }
        let mut out = if hits.is_empty() {
            format!("no line matches {text:?}")
        } else {
            hits.join("\n")
        };
        if more > 0 {
            out.push_str(&format!("\n(… {more} more matching lines)"));
        }
        if cut {
            out.push_str(&format!(
                "\n(only the first {MAX_WALK} files were searched)"
            ));
        }
        Ok(out)
    }

    /// The program `argv` or `command` starts, checked against the
    /// policy's lists: a shell line counts as `sh`.
    fn allowed(&self, program: &str) -> Result<(), String> {
        let base = Path::new(program)
            .file_name()
            .map_or_else(|| program.to_owned(), |n| n.to_string_lossy().into_owned());
        let listed = |list: &[String]| list.iter().any(|p| p == &base || p == program);
        if listed(&self.policy.deny_commands) {
            return Err(format!(
                "{base} is not allowed here (agentPolicy denyCommands: {})",
                self.policy.deny_commands.join(", ")
            ));
        }
        if let Some(allow) = &self.policy.allow_commands
            && !listed(allow)
        {
            return Err(format!(
                "{base} is not allowed here; the commands allowed are: {} (agentPolicy allowCommands)",
                if allow.is_empty() {
                    "none".to_owned()
                } else {
                    allow.join(", ")
                }
            ));
        }
        Ok(())
    }

    fn run_command(&self, args: &Value, deadline: Option<Instant>) -> Result<Outcome, CliError> {
        let mut shown = None;
        let argv: Vec<String> = match (args.get("argv"), args.get("command")) {
            (Some(Value::Array(items)), None | Some(Value::Null)) => {
                let words: Option<Vec<String>> = items
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect();
                match words {
                    Some(w) if !w.is_empty() && !w[0].is_empty() => w,
                    _ => {
                        return Ok(Outcome::error("`argv` must be a non-empty list of strings"));
                    }
                }
            }
            (None | Some(Value::Null), Some(Value::String(line))) if !line.trim().is_empty() => {
                shown = Some(line.clone());
                vec!["sh".into(), "-c".into(), line.clone()]
            }
            _ => {
                return Ok(Outcome::error(
                    "give either `argv` (a list of strings) or `command` (a shell line), not both",
                ));
            }
        };
        if let Err(e) = self.allowed(&argv[0]) {
            return Ok(Outcome::error(e));
        }
        let mut timeout = self.policy.command_timeout;
        if let Ok(Some(secs)) = opt_u64(args, "timeout_secs") {
            timeout = timeout.min(Duration::from_secs(secs.max(1)));
        }
        if let Some(d) = deadline {
            timeout = timeout.min(d.saturating_duration_since(Instant::now()));
        }
        let cli = Cli::from_env(&argv[0], "UWF_AGENT_UNUSED_BIN", &argv[0]);
        let mut cmd = cli.command();
        cmd.args(&argv[1..]).current_dir(self.sandbox.root());
        for var in &self.hidden_env {
            cmd.env_remove(var);
        }
        let options = RunOptions::new()
            .timeout(Some(timeout))
            .capture_limit(CAPTURE_BYTES);
        let shown = shown.unwrap_or_else(|| argv.join(" "));
        match cli.run(cmd, options) {
            Ok(out) => {
                let mut text = format!("{}: $ {shown}", out.status_text());
                if !out.stdout.is_empty() {
                    text.push_str(&format!("\n--- stdout ---\n{}", out.stdout));
                }
                if !out.stderr.is_empty() {
                    text.push_str(&format!("\n--- stderr ---\n{}", out.stderr));
                }
                Ok(Outcome {
                    content: bounded(&text),
                    is_error: !out.status.success(),
                })
            }
            Err(CliError::TimedOut { after, output, .. }) => Ok(Outcome::error(format!(
                "$ {shown}\nstopped after {after} (the command's timeout), with everything it started; its output:\n{output}"
            ))),
            Err(CliError::NotInstalled { .. }) => {
                Ok(Outcome::error(format!("no such program: {:?}", argv[0])))
            }
            Err(CliError::Spawn { source, .. }) => Ok(Outcome::error(format!(
                "cannot run {:?}: {source}",
                argv[0]
            ))),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tools(policy: AgentPolicy) -> (tempfile::TempDir, Tools) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\ntwo\n").unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/m.rs"), "fn main() {}\n").unwrap();
        let sb = Sandbox::new(dir.path()).unwrap();
        (
            dir,
            Tools::new(sb, policy, vec!["UWF_AGENT_TEST_SECRET".into()]),
        )
    }

    fn call(t: &Tools, name: &str, args: Value) -> Outcome {
        t.call(name, &args, None).unwrap()
    }

    #[test]
    fn read_ranges_and_edits() {
        let (dir, t) = tools(AgentPolicy::standard());
        let r = call(
            &t,
            "read_file",
            json!({"path": "a.txt", "start_line": 2, "end_line": 3}),
        );
        assert_eq!(r.content, "2\ttwo\n3\tthree\n(lines 2–3 of 4)\n");
        let r = call(&t, "read_file", json!({"path": "a.txt", "start_line": 9}));
        assert!(r.is_error && r.content.contains("has 4 lines"), "{r:?}");
        let r = call(
            &t,
            "edit_file",
            json!({"path": "a.txt", "old_text": "two", "new_text": "2"}),
        );
        assert!(r.is_error && r.content.contains("occurs 2 times"), "{r:?}");
        let r = call(
            &t,
            "edit_file",
            json!({"path": "a.txt", "old_text": "four", "new_text": "4"}),
        );
        assert!(r.is_error && r.content.contains("not found"), "{r:?}");
        let r = call(
            &t,
            "edit_file",
            json!({"path": "a.txt", "old_text": "three\ntwo", "new_text": "3\n2"}),
        );
        assert_eq!(r.content, "edited a.txt at line 3");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "one\ntwo\n3\n2\n"
        );
        let r = call(
            &t,
            "write_file",
            json!({"path": "new/b.txt", "content": "b"}),
        );
        assert!(!r.is_error, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("new/b.txt")).unwrap(),
            "b"
        );
        let r = call(
            &t,
            "write_file",
            json!({"path": "../b.txt", "content": "b"}),
        );
        assert!(
            r.is_error && r.content.contains("outside the working directory"),
            "{r:?}"
        );
        let r = call(&t, "read_file", json!({"file": "a.txt"}));
        assert!(
            r.is_error && r.content.contains("`path` is required"),
            "{r:?}"
        );
    }

    #[test]
    fn listing_and_searching() {
        let (_dir, t) = tools(AgentPolicy::standard());
        assert_eq!(call(&t, "list_dir", json!({})).content, "a.txt\nsrc/");
        assert_eq!(
            call(&t, "glob", json!({"pattern": "**/*.rs"})).content,
            "src/m.rs"
        );
        assert_eq!(
            call(&t, "glob", json!({"pattern": "*.rs"})).content,
            "no file matches \"*.rs\""
        );
        assert_eq!(
            call(&t, "grep", json!({"pattern": "^t.o$"})).content,
            "a.txt:2:two\na.txt:4:two"
        );
        assert_eq!(
            call(&t, "grep", json!({"pattern": "fn", "glob": "**/*.rs"})).content,
            "src/m.rs:1:fn main() {}"
        );
        assert!(call(&t, "grep", json!({"pattern": "("})).is_error);
        assert!(
            call(&t, "nope", json!({}))
                .content
                .contains("there is no tool")
        );
    }

    #[test]
    fn commands_policy_timeout_and_environment() {
        let mut policy = AgentPolicy::standard();
        policy.deny_commands = vec!["curl".into()];
        let (_dir, t) = tools(policy);
        let r = call(
            &t,
            "run_command",
            json!({"command": "echo out; echo err >&2; exit 3"}),
        );
        assert!(r.is_error);
        assert!(r.content.contains("exit status 3"), "{r:?}");
        assert!(r.content.contains("--- stdout ---\nout\n"), "{r:?}");
        assert!(r.content.contains("--- stderr ---\nerr\n"), "{r:?}");
        let r = call(&t, "run_command", json!({"argv": ["ls"]}));
        assert!(!r.is_error && r.content.contains("a.txt"), "{r:?}");
        let r = call(&t, "run_command", json!({"argv": ["/usr/bin/curl", "x"]}));
        assert!(
            r.is_error && r.content.contains("curl is not allowed"),
            "{r:?}"
        );
        let r = call(&t, "run_command", json!({"argv": ["uwf-no-such-program"]}));
        assert!(r.is_error && r.content.contains("no such program"), "{r:?}");
        let started = Instant::now();
        let r = call(
            &t,
            "run_command",
            json!({"command": "sleep 30", "timeout_secs": 1}),
        );
        assert!(
            r.is_error && r.content.contains("stopped after 1s"),
            "{r:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        let r = call(&t, "run_command", json!({"argv": ["a"], "command": "b"}));
        assert!(r.is_error && r.content.contains("not both"), "{r:?}");

        let mut policy = AgentPolicy::standard();
        policy.allow_commands = Some(vec!["ls".into()]);
        let (_dir, t) = tools(policy);
        assert!(!call(&t, "run_command", json!({"argv": ["ls"]})).is_error);
        let r = call(&t, "run_command", json!({"command": "ls"}));
        assert!(
            r.is_error && r.content.contains("sh is not allowed"),
            "{r:?}"
        );
    }

    #[test]
    fn read_only_offers_no_writes() {
        let mut policy = AgentPolicy::standard();
        policy.read_only = true;
        let (dir, t) = tools(policy);
        let names: Vec<&str> = t.specs().iter().map(|s| s.name).collect();
        assert_eq!(names, ["read_file", "list_dir", "glob", "grep"]);
        let r = call(&t, "write_file", json!({"path": "x", "content": "y"}));
        assert!(r.is_error && r.content.contains("read-only"), "{r:?}");
        assert!(!dir.path().join("x").exists());
        assert!(call(&t, "run_command", json!({"argv": ["ls"]})).is_error);
    }

    #[test]
    fn results_are_bounded_with_a_note() {
        let long = "x".repeat(MAX_RESULT_CHARS * 2);
        let b = bounded(&long);
        assert!(b.chars().count() < MAX_RESULT_CHARS + 200);
        assert!(
            b.contains(&format!(
                "{} of {} characters cut",
                MAX_RESULT_CHARS,
                MAX_RESULT_CHARS * 2
            )),
            "{}",
            &b[MAX_RESULT_CHARS / 2..MAX_RESULT_CHARS / 2 + 100]
        );
        assert_eq!(bounded("short"), "short");
    }
}
