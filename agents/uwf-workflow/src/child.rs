//! Running the child thread with the real `uwf`.
//!
//! Two commands, so the child thread's id is known even when its run fails:
//! `uwf --root <root> thread start <workflow> --parent <head> --prompt=<task>`,
//! then `uwf --root <root> thread run --thread <id> --max-steps <n>`. Both
//! get [`CALL_DEPTH_ENV`] = the child's depth, which every agent of the
//! child inherits. No `--agent` is passed: the child's roles get their
//! agents from `config.yaml`, exactly like a top-level run.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::de::DeserializeOwned;
use uwf_protocol::{StartOutput, StepOutput};

use crate::error::{DEPTH_MARKER, WorkflowAgentError};
use crate::{CALL_DEPTH_ENV, UWF_BIN_ENV};

/// Lines of a child's stderr kept for the report.
const TAIL_LINES: usize = 12;

/// Prefix of the child's stderr lines when they are passed on, so nested
/// progress reads as nested.
pub const NESTED_PREFIX: &str = "│ ";

/// How to run `uwf` for the child.
#[derive(Debug, Clone)]
pub struct Uwf {
    program: OsString,
    root: PathBuf,
    depth: usize,
}

impl Uwf {
    /// `$UWF_BIN` if set and not empty, else `uwf` from `PATH`; the child
    /// runs in `root` at `depth`.
    pub fn from_env(root: PathBuf, depth: usize) -> Self {
        let program = std::env::var_os(UWF_BIN_ENV)
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| OsString::from("uwf"));
        Self {
            program,
            root,
            depth,
        }
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.arg("--root")
            .arg(&self.root)
            .env(CALL_DEPTH_ENV, self.depth.to_string())
            .stdin(Stdio::null());
        c
    }

    fn spawn_error(&self, source: std::io::Error) -> WorkflowAgentError {
        WorkflowAgentError::Spawn {
            program: self.program.to_string_lossy().into_owned(),
            source,
        }
    }

    /// `uwf thread start <workflow> --parent <parent> --prompt=<prompt>`:
    /// the new child thread.
    pub fn start(
        &self,
        workflow: &str,
        parent: &str,
        prompt: &str,
    ) -> Result<StartOutput, WorkflowAgentError> {
        // `--prompt=…` in one word: a task starting with `-` stays a value.
        let out = self
            .command()
            .args(["thread", "start", workflow, "--parent", parent])
            .arg(format!("--prompt={prompt}"))
            .output()
            .map_err(|e| self.spawn_error(e))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let lines: Vec<&str> = stderr.lines().collect();
            return Err(WorkflowAgentError::ChildStart {
                workflow: workflow.to_owned(),
                cause: cause_of(&lines)
                    .unwrap_or_else(|| format!("uwf thread start {}", status_text(out.status))),
                tail: tail_text(&lines),
            });
        }
        parse_answer("thread start", &out.stdout)
    }

    /// `uwf thread run --thread <thread> --max-steps <n>`: runs the child
    /// to its end, passing its stderr on (each line prefixed with
    /// [`NESTED_PREFIX`]). Returns its final answer (`done: true`, `head` =
    /// the terminal StepNode).
    pub fn run(
        &self,
        thread: &str,
        workflow: &str,
        max_steps: usize,
    ) -> Result<StepOutput, WorkflowAgentError> {
        let mut child = self
            .command()
            .args(["thread", "run", "--thread", thread, "--max-steps"])
            .arg(max_steps.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.spawn_error(e))?;
        let stderr = child.stderr.take();
        let forward = std::thread::spawn(move || {
            let mut tail: VecDeque<String> = VecDeque::new();
            let Some(stderr) = stderr else {
                return tail;
            };
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("{NESTED_PREFIX}{line}");
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            tail
        });
        let mut stdout = Vec::new();
        if let Some(mut out) = child.stdout.take() {
            // A read error only loses the answer, which is reported below.
            let _ = out.read_to_end(&mut stdout);
        }
        let status = child.wait().map_err(|e| self.spawn_error(e))?;
        let tail: Vec<String> = forward.join().unwrap_or_default().into();
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        if status.code() == Some(i32::from(crate::error::EXIT_WAITING)) {
            return Err(WorkflowAgentError::ChildWaiting {
                thread: thread.to_owned(),
                workflow: workflow.to_owned(),
            });
        }
        if !status.success() {
            // Its stderr was passed on line by line already: the report
            // names the cause only, so nested failures do not repeat it all.
            return Err(WorkflowAgentError::ChildFailed {
                thread: thread.to_owned(),
                workflow: workflow.to_owned(),
                cause: cause_of(&lines)
                    .unwrap_or_else(|| format!("uwf thread run {}", status_text(status))),
                tail: String::new(),
            });
        }
        let answer: StepOutput = parse_answer("thread run", &stdout)?;
        if !answer.done {
            return Err(WorkflowAgentError::ChildFailed {
                thread: thread.to_owned(),
                workflow: workflow.to_owned(),
                cause: "uwf thread run succeeded but the thread is not done".to_owned(),
                tail: String::new(),
            });
        }
        Ok(answer)
    }
}

fn status_text(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exited with status {c}"),
        None => "was killed by a signal".to_owned(),
    }
}

fn parse_answer<T: DeserializeOwned>(
    command: &'static str,
    stdout: &[u8],
) -> Result<T, WorkflowAgentError> {
    serde_json::from_slice(stdout).map_err(|e| WorkflowAgentError::ChildAnswer {
        command,
        printed: String::from_utf8_lossy(stdout).chars().take(200).collect(),
        reason: e.to_string(),
    })
}

/// Strips the decoration miette and [`NESTED_PREFIX`] put before a line.
fn undecorated(line: &str) -> &str {
    line.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '│' | '×' | '|'))
        .trim_end()
}

/// The innermost cause in a failed `uwf`'s stderr: a depth-limit report
/// from any depth wins (so runaway recursion is reported as such at the
/// top); otherwise the headline (`× …`) of uwf's own report.
pub fn cause_of(lines: &[&str]) -> Option<String> {
    if let Some(l) = lines.iter().rev().find(|l| l.contains(DEPTH_MARKER)) {
        let l = undecorated(l);
        // Keep the innermost report: drop the wrappers before the marker.
        let from = l.find(DEPTH_MARKER).unwrap_or(0);
        return Some(l[from..].to_owned());
    }
    lines
        .iter()
        .rev()
        .find(|l| l.trim_start().starts_with('×'))
        .map(|l| undecorated(l).to_owned())
}

/// The last lines of a child's stderr as a report section ("" when empty).
fn tail_text(lines: &[&str]) -> String {
    let start = lines.len().saturating_sub(TAIL_LINES);
    let kept: Vec<&str> = lines[start..]
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if kept.is_empty() {
        return String::new();
    }
    format!(
        "\n--- last lines of the child's stderr ---\n{}",
        kept.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_depth_report_wins_at_any_nesting() {
        let lines = [
            "step 1: worker (wf) started",
            "│ │   × child thread 01X (workflow r) failed: call depth limit reached: role \"worker\" …",
            "  × agent wf (role worker) exited with status 1",
        ];
        assert_eq!(
            cause_of(&lines).as_deref(),
            Some("call depth limit reached: role \"worker\" …")
        );
    }

    #[test]
    fn otherwise_the_headline_of_the_report() {
        let lines = [
            "step 1: coder (mock) started",
            "  × agent mock (role coder) exited with status 3",
            "  help: the thread is unchanged",
        ];
        assert_eq!(
            cause_of(&lines).as_deref(),
            Some("agent mock (role coder) exited with status 3")
        );
        assert_eq!(cause_of(&["plain"]), None);
        assert!(tail_text(&lines).contains("exited with status 3"));
        assert_eq!(tail_text(&[]), "");
    }
}
