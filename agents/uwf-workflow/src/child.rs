//! Running the child thread with `uwf`, the binary that runs the parent.
//!
//! Two commands, so that the child thread's id is known even when its run
//! fails: `uwf thread start <workflow> --parent <head> --prompt -` (the task
//! on stdin), then `uwf thread run --thread <id> --max-steps <n>` — the
//! engine's step cycle, in a process of its own, exactly as a person would
//! run the child (docs/nested-workflows.md, "How it works"). The child's
//! roles get their agents from `config.yaml`, like a top-level run, and
//! every agent of the child inherits [`CALL_DEPTH_ENV`] = the child's
//! depth. The child's stderr (its progress and its agents' lines) is passed
//! on to this agent's stderr, each line prefixed with [`NESTED_PREFIX`].
//!
//! Why a process and not the engine library: this agent then links neither
//! the engine nor any store backend, and the child opens the store with
//! every backend the `uwf` binary has registered — the same store its
//! parent runs on, whatever kind it is (docs/architecture.md, "The storage
//! seam").

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{Seek, Write};
use std::path::PathBuf;
use std::process::Command;

use serde::de::DeserializeOwned;
use serde_json::Value;
use uwf_agent_kit::AgentContext;
use uwf_cas::Hash;
use uwf_protocol::{StartOutput, StepOutput, ThreadId, WaitingRecord, agent_env};
use uwf_util::supervise::{self, CancelToken, Ending, Keep, Supervise, Supervised};

use crate::CALL_DEPTH_ENV;
use crate::error::{DEPTH_MARKER, EXIT_WAITING, WorkflowAgentError};

/// Environment variable naming the `uwf` binary to run the child with.
pub const UWF_BIN_ENV: &str = "UWF_BIN";

/// Lines of a child's stderr kept for the report.
const TAIL_LINES: usize = 12;

/// The most of a `uwf` command's stdout kept: its JSON answer.
const STDOUT_CAP: usize = 1 << 20;

/// Prefix of the child's stderr lines when they are passed on, so nested
/// progress reads as nested.
pub const NESTED_PREFIX: &str = "│ ";

/// How to run `uwf` for the child.
#[derive(Debug, Clone)]
pub struct Uwf {
    program: OsString,
    depth: usize,
    cancel: CancelToken,
}

impl Uwf {
    /// The `uwf` to run: `$UWF_BIN` if set and not empty, else `uwf` on
    /// `PATH` (uwf puts its own directory first there for its agents, so
    /// this is the binary running the parent), else `uwf` beside this
    /// executable. The child runs at `depth`; `cancel` stops whatever `uwf`
    /// command runs (this agent's SIGTERM).
    pub fn find(depth: usize, cancel: CancelToken) -> Result<Self, WorkflowAgentError> {
        let program = match std::env::var_os(UWF_BIN_ENV).filter(|p| !p.is_empty()) {
            Some(p) => p,
            None => supervise::find_program("uwf", None)
                .or_else(beside_this_executable)
                .ok_or(WorkflowAgentError::NoUwf)?
                .into_os_string(),
        };
        Ok(Self {
            program,
            depth,
            cancel,
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.program);
        c.args(args).env(CALL_DEPTH_ENV, self.depth.to_string());
        // The child `uwf` is an engine, not an agent: what uwf told this
        // agent about its own step (its relay, its label, its head, its
        // edge prompt) is not the child's to inherit.
        for var in [
            agent_env::RELAY,
            agent_env::AGENT,
            agent_env::HEAD,
            agent_env::EDGE_PROMPT,
        ] {
            c.env_remove(var);
        }
        c
    }

    /// Runs `uwf <args>` to its end (stdin: `stdin`, else nothing), passing
    /// its stderr on when `pass_on`; returns how it ended and the last
    /// lines of its stderr.
    fn exec(
        &self,
        args: &[&str],
        stdin: Option<std::fs::File>,
        pass_on: bool,
    ) -> Result<(Supervised, Vec<String>), WorkflowAgentError> {
        let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES + 1);
        let mut options = Supervise::new()
            .cancel(self.cancel.clone())
            .keep_stdout(Keep::UpTo(STDOUT_CAP))
            .keep_stderr(Keep::Nothing)
            .on_stderr(|line| {
                if pass_on {
                    eprintln!("{NESTED_PREFIX}{line}");
                }
                tail.push_back(line.to_owned());
                if tail.len() > TAIL_LINES {
                    tail.pop_front();
                }
            });
        if let Some(file) = stdin {
            options = options.stdin(file);
        }
        let done =
            supervise::run(self.command(args), options).map_err(|e| WorkflowAgentError::Spawn {
                program: self.program.to_string_lossy().into_owned(),
                source: e.into_io(),
            })?;
        Ok((done, tail.into()))
    }

    /// `uwf thread show <thread>`, as JSON.
    fn show(&self, thread: ThreadId) -> Result<Value, WorkflowAgentError> {
        let id = thread.to_string();
        let args = ["thread", "show", id.as_str()];
        let (done, tail) = self.exec(&args, None, false)?;
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        match done.ending {
            Ending::Exited(s) if s.success() => parse_answer("thread show", &done.stdout),
            ending => Err(WorkflowAgentError::Uwf {
                command: format!("uwf thread show {id}"),
                cause: cause_of(&lines).unwrap_or_else(|| ending_text(&ending)),
            }),
        }
    }

    /// The child thread to continue instead of starting one: the parent
    /// thread waits (at this very head and role) for a child thread that
    /// waited for a person. Returns its id and, when it has ended since
    /// (the answer was its last step), its terminal StepNode.
    pub fn waiting_child(
        &self,
        ctx: &AgentContext,
    ) -> Result<Option<(ThreadId, Option<Hash>)>, WorkflowAgentError> {
        let parent = self.show(ctx.thread_id())?;
        let Some(waiting) = parent.get("waiting") else {
            return Ok(None);
        };
        let record: WaitingRecord =
            serde_json::from_value(waiting.clone()).map_err(|e| WorkflowAgentError::Answer {
                command: "thread show",
                printed: waiting.to_string().chars().take(200).collect(),
                reason: e.to_string(),
            })?;
        let Some(child) = record.child else {
            return Ok(None);
        };
        if record.head != ctx.head() || record.role != ctx.role() {
            return Ok(None);
        }
        let shown: ChildShown = parse_value("thread show", self.show(child)?)?;
        Ok(match (shown.done, shown.state.as_deref()) {
            (false, _) => Some((child, None)),
            (true, Some("done")) => Some((child, Some(shown.head))),
            // Killed (or archived for another reason): start afresh.
            (true, _) => None,
        })
    }

    /// `uwf thread start <workflow> --parent <parent> --prompt -`, the task
    /// `prompt` on stdin: the new child thread.
    pub fn start(
        &self,
        workflow: &str,
        parent: Hash,
        prompt: &str,
    ) -> Result<StartOutput, WorkflowAgentError> {
        let failed = |cause: String, tail: String| WorkflowAgentError::ChildStart {
            workflow: workflow.to_owned(),
            cause,
            tail,
        };
        // The task goes on stdin, not in an argument: it may be longer
        // than one argument may be (docs/nested-workflows.md, "The child's
        // task").
        let stdin = task_file(prompt).map_err(|e| failed(e.to_string(), String::new()))?;
        let parent = parent.to_string();
        let args = [
            "thread",
            "start",
            workflow,
            "--parent",
            parent.as_str(),
            "--prompt",
            "-",
        ];
        let (done, tail) = self.exec(&args, Some(stdin), false)?;
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        match done.ending {
            Ending::Exited(s) if s.success() => parse_answer("thread start", &done.stdout),
            ending => Err(failed(
                cause_of(&lines)
                    .unwrap_or_else(|| format!("uwf thread start {}", ending_text(&ending))),
                tail_text(&lines),
            )),
        }
    }

    /// `uwf thread run --thread <thread> --max-steps <n>`: runs the child
    /// to its end, passing its stderr on. Returns its final answer (`done:
    /// true`, `head` = the terminal StepNode).
    pub fn run(
        &self,
        thread: ThreadId,
        workflow: &str,
        max_steps: usize,
    ) -> Result<StepOutput, WorkflowAgentError> {
        let id = thread.to_string();
        let max = max_steps.to_string();
        let args = [
            "thread",
            "run",
            "--thread",
            id.as_str(),
            "--max-steps",
            max.as_str(),
        ];
        let (done, tail) = self.exec(&args, None, true)?;
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        let failed = |cause: String| WorkflowAgentError::ChildFailed {
            thread,
            workflow: workflow.to_owned(),
            cause,
            // Its stderr was passed on line by line already: the report
            // names the cause only, so nested failures do not repeat it all.
            tail: String::new(),
        };
        match done.ending {
            Ending::Exited(s) if s.success() => {
                let answer: StepOutput = parse_answer("thread run", &done.stdout)?;
                if answer.done {
                    Ok(answer)
                } else {
                    Err(failed(
                        "uwf thread run succeeded but the thread is not done".to_owned(),
                    ))
                }
            }
            Ending::Exited(s) if s.code() == Some(i32::from(EXIT_WAITING)) => {
                Err(WorkflowAgentError::ChildWaiting {
                    thread,
                    workflow: workflow.to_owned(),
                })
            }
            ending => {
                let cause = cause_of(&lines)
                    .unwrap_or_else(|| format!("uwf thread run {}", ending_text(&ending)));
                // uwf names the thread its report is about; this one's
                // report names it already.
                let ours = format!("thread {id}: ");
                Err(failed(
                    cause
                        .strip_prefix(&ours)
                        .map(str::to_owned)
                        .unwrap_or(cause),
                ))
            }
        }
    }
}

/// What `uwf thread show` says of a child thread that is read here.
#[derive(serde::Deserialize)]
struct ChildShown {
    head: Hash,
    done: bool,
    #[serde(default)]
    state: Option<String>,
}

/// `uwf` beside this executable (installed together, or built together
/// into one target directory).
fn beside_this_executable() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let candidate = exe
        .parent()?
        .join(format!("uwf{}", std::env::consts::EXE_SUFFIX));
    supervise::is_executable(&candidate).then_some(candidate)
}

/// An unnamed temporary file holding `text`, read from its start.
fn task_file(text: &str) -> std::io::Result<std::fs::File> {
    let mut file = tempfile::tempfile()?;
    file.write_all(text.as_bytes())?;
    file.rewind()?;
    Ok(file)
}

fn ending_text(ending: &Ending) -> String {
    match ending {
        Ending::Exited(s) => match s.code() {
            Some(c) => format!("exited with status {c}"),
            None => "was killed by a signal".to_owned(),
        },
        Ending::TimedOut(_) => "did not finish in time".to_owned(),
        Ending::Stopped | Ending::Interrupted => {
            "was stopped (uwf-workflow was interrupted)".to_owned()
        }
    }
}

fn parse_answer<T: DeserializeOwned>(
    command: &'static str,
    stdout: &str,
) -> Result<T, WorkflowAgentError> {
    serde_json::from_str(stdout).map_err(|e| WorkflowAgentError::Answer {
        command,
        printed: stdout.chars().take(200).collect(),
        reason: e.to_string(),
    })
}

fn parse_value<T: DeserializeOwned>(
    command: &'static str,
    value: Value,
) -> Result<T, WorkflowAgentError> {
    let printed: String = value.to_string().chars().take(200).collect();
    serde_json::from_value(value).map_err(|e| WorkflowAgentError::Answer {
        command,
        printed,
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
    let kept: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if kept.is_empty() {
        return String::new();
    }
    format!("\n--- last lines of uwf's stderr ---\n{}", kept.join("\n"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_depth_report_wins_at_any_nesting() {
        let lines = [
            "step 1: planner started",
            "│ │   × child thread Y (workflow r) failed: call depth limit reached: role \"dev\" of thread X would start …",
            "  × agent wf (role dev) exited with status 1",
        ];
        assert_eq!(
            cause_of(&lines).as_deref(),
            Some("call depth limit reached: role \"dev\" of thread X would start …")
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

    #[test]
    fn the_task_file_reads_from_its_start() {
        let mut f = task_file("a task — with ünïcode").unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut f, &mut s).unwrap();
        assert_eq!(s, "a task — with ünïcode");
    }
}
