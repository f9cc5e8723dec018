//! Running the child thread through the engine library, in this process.
//!
//! Two operations, so the child thread's id is known even when its run
//! fails: start it (its StartNode's `parentState` is the parent's head),
//! then run it to its end with [`uwf_engine::run`] — the same step cycle as
//! `uwf thread run`: the child's roles get their agents from `config.yaml`,
//! like a top-level run, and every agent of the child gets
//! [`CALL_DEPTH_ENV`] = the child's depth. The child's progress and its
//! agents' stderr are passed on to this agent's stderr, each line prefixed
//! with [`NESTED_PREFIX`].

use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use uwf_cas::Hash;
use uwf_engine::{CancelToken, Engine, EngineError, Progress, Ran, StepOptions};
use uwf_protocol::{StartOutput, StepOutput, ThreadId};

use crate::CALL_DEPTH_ENV;
use crate::error::{DEPTH_MARKER, WorkflowAgentError};

/// Lines of the child's progress kept for the report.
const TAIL_LINES: usize = 12;

/// Prefix of the child's stderr lines when they are passed on, so nested
/// progress reads as nested.
pub const NESTED_PREFIX: &str = "│ ";

/// The engine the child thread runs on.
pub struct Child {
    engine: Engine,
    cancel: CancelToken,
}

impl Child {
    /// The engine over the storage root `root`, for a child at `depth`.
    /// `cancel` stops the child's running step (this agent's SIGTERM).
    pub fn open(
        root: &Path,
        depth: usize,
        cancel: CancelToken,
    ) -> Result<Self, WorkflowAgentError> {
        let mut engine = Engine::open_resolved(uwf_agent_kit::backends(), None, root)
            .map_err(Box::new)?
            .with_agent_env(CALL_DEPTH_ENV, OsString::from(depth.to_string()));
        // Agents installed beside this binary (as uwf does for its own).
        if let Some(dir) = std::env::current_exe()
            .ok()
            .as_deref()
            .and_then(Path::parent)
        {
            engine = engine.with_agent_dir(dir);
        }
        Ok(Self { engine, cancel })
    }

    /// The thread state of the store.
    pub fn state(&self) -> &dyn uwf_state::ThreadStore {
        self.engine.state()
    }

    /// Starts the child thread of `workflow` (a registered name, a Workflow
    /// hash, or a workflow YAML file, registered on the way) with the task
    /// `prompt`, from the parent's head `parent`.
    pub fn start(
        &self,
        workflow: &str,
        parent: Hash,
        prompt: &str,
    ) -> Result<StartOutput, WorkflowAgentError> {
        let failed = |cause: String| WorkflowAgentError::ChildStart {
            workflow: workflow.to_owned(),
            cause,
            tail: String::new(),
        };
        let hash = self.resolve(workflow).map_err(failed)?;
        let started = uwf_engine::start(&self.engine, hash, prompt, Some(parent))
            .map_err(|e| failed(e.to_string()))?;
        Ok(StartOutput {
            workflow: hash,
            thread: started.thread,
        })
    }

    /// The Workflow node `arg` names.
    fn resolve(&self, arg: &str) -> Result<Hash, String> {
        let state = self.engine.state();
        if let Some(h) = state.registry().map_err(|e| e.to_string())?.get(arg) {
            return Ok(*h);
        }
        let path = Path::new(arg);
        if path.is_file() {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let def =
                uwf_moderator::definition::parse_yaml(&text, arg).map_err(|e| e.to_string())?;
            // Read before the nodes are stored (uwf_engine::keep).
            let epoch = state.gc_epoch().map_err(|e| e.to_string())?;
            let registered = uwf_moderator::definition::register(self.engine.cas(), &def)
                .map_err(|e| e.to_string())?;
            uwf_engine::keep::guarded(
                self.engine.cas(),
                Some(epoch),
                registered.hash,
                &[],
                |guard| state.register_workflow(&registered.payload.name, registered.hash, guard),
            )
            .map_err(|e| e.to_string())?;
            return Ok(registered.hash);
        }
        if let Ok(hash) = arg.parse::<Hash>() {
            let node = self.engine.cas().try_get(hash).map_err(|e| e.to_string())?;
            return match node {
                Some(n) if n.type_hash == self.engine.cas().types().workflow => Ok(hash),
                Some(_) => Err(format!("{hash} is not a Workflow node")),
                None => Err(format!("no node {hash} in the store")),
            };
        }
        Err(format!(
            "no workflow {arg:?} is registered, and it is not a file"
        ))
    }

    /// Runs the child thread to its end (at most `max_steps` steps).
    /// Returns its final answer (`done: true`, `head` = the terminal
    /// StepNode).
    pub fn run(
        &self,
        thread: ThreadId,
        workflow: &str,
        max_steps: usize,
    ) -> Result<StepOutput, WorkflowAgentError> {
        let progress = Arc::new(Nested::default());
        let sink: Arc<dyn Progress> = progress.clone();
        let opts = StepOptions {
            cancel: self.cancel.clone(),
            ..StepOptions::default()
        };
        let failed = |cause: String| WorkflowAgentError::ChildFailed {
            thread,
            workflow: workflow.to_owned(),
            cause,
            tail: String::new(),
        };
        match uwf_engine::run(&self.engine, thread, &opts, &sink, max_steps) {
            Ok(Ran::Done(out)) => Ok(out),
            Ok(Ran::Waiting(_)) => Err(WorkflowAgentError::ChildWaiting {
                thread,
                workflow: workflow.to_owned(),
            }),
            Ok(Ran::MaxSteps { steps, .. }) => Err(failed(format!(
                "not done after {steps} step(s) (--max-steps)"
            ))),
            Err(e) => Err(failed(cause_of_error(&e, &progress.tail()))),
        }
    }
}

/// The innermost cause of a failed child run: a depth-limit report from
/// any depth wins (so runaway recursion is reported as such at the top);
/// otherwise the engine's own message.
fn cause_of_error(e: &EngineError, tail: &[String]) -> String {
    let text = e.to_string();
    let lines: Vec<&str> = text
        .lines()
        .chain(tail.iter().map(String::as_str))
        .collect();
    depth_cause(&lines).unwrap_or_else(|| text.lines().next().unwrap_or_default().to_owned())
}

/// Strips the decoration miette and [`NESTED_PREFIX`] put before a line.
fn undecorated(line: &str) -> &str {
    line.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '│' | '×' | '|'))
        .trim_end()
}

/// The innermost depth-limit report among `lines`, if any.
pub fn depth_cause(lines: &[&str]) -> Option<String> {
    let l = lines.iter().rev().find(|l| l.contains(DEPTH_MARKER))?;
    let l = undecorated(l);
    // Keep the innermost report: drop the wrappers before the marker.
    let from = l.find(DEPTH_MARKER).unwrap_or(0);
    Some(l[from..].to_owned())
}

/// The child's progress on this agent's stderr, nested.
#[derive(Default)]
struct Nested {
    state: Mutex<NestedState>,
}

#[derive(Default)]
struct NestedState {
    step: usize,
    tail: Vec<String>,
}

impl Nested {
    fn line(&self, line: String) {
        eprintln!("{NESTED_PREFIX}{line}");
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.tail.push(line);
        if s.tail.len() > TAIL_LINES {
            s.tail.remove(0);
        }
    }

    fn tail(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .tail
            .clone()
    }

    fn next_step(&self) -> usize {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.step += 1;
        s.step
    }

    fn current_step(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .step
    }
}

impl Progress for Nested {
    fn started(&self, role: &str, agent: &str) {
        let n = self.next_step();
        self.line(format!("step {n}: {role} ({agent}) started"));
    }

    fn agent_line(&self, line: &str) {
        self.line(line.to_owned());
    }

    fn finished(&self, role: &str, elapsed: Duration) {
        let n = self.current_step();
        self.line(format!(
            "step {n}: {role} finished in {:.1}s",
            elapsed.as_secs_f64()
        ));
    }

    fn failed(&self, role: &str, elapsed: Duration, reason: &str) {
        let n = self.current_step();
        self.line(format!(
            "step {n}: {role} failed after {:.1}s: {reason}",
            elapsed.as_secs_f64()
        ));
    }

    fn waiting(&self, workflow: &str, ahead: usize) {
        self.line(format!(
            "waiting for a slot of workflow {workflow} ({ahead} ahead)"
        ));
    }

    fn retrying(&self, n: u32, max: u32, delay: Duration, role: &str, reason: &str) {
        self.line(format!(
            "retry {n}/{max} in {:.1}s: {role} {reason}",
            delay.as_secs_f64()
        ));
    }

    fn warning(&self, message: &str) {
        self.line(format!("warning: {message}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_depth_report_wins_at_any_nesting() {
        let lines = [
            "step 1: planner started",
            "│ │ × call depth limit reached: role \"dev\" of thread X would start …",
            "× child thread Y failed: agent exited with status 1",
        ];
        assert_eq!(
            depth_cause(&lines).as_deref(),
            Some("call depth limit reached: role \"dev\" of thread X would start …")
        );
        assert_eq!(depth_cause(&["× something else"]), None);
    }
}
