use serde::{Deserialize, Serialize};

use crate::{CasRef, ThreadId};

/// `uwf thread start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartOutput {
    /// The Workflow node the thread runs.
    pub workflow: CasRef,
    /// The new thread's id.
    pub thread: ThreadId,
}

/// `uwf thread step` and `uwf thread show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepOutput {
    /// The Workflow node the thread runs.
    pub workflow: CasRef,
    /// The thread id.
    pub thread: ThreadId,
    /// The thread's head (a StepNode, or the StartNode before any step).
    pub head: CasRef,
    /// True once the moderator returned `$END` (the thread is archived).
    pub done: bool,
}

/// One row of `uwf thread list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadListItem {
    /// The thread id.
    pub thread: ThreadId,
    /// The Workflow node the thread runs.
    pub workflow: CasRef,
    /// The thread's head.
    pub head: CasRef,
    /// True for archived threads (only listed with `--all`).
    #[serde(default)]
    pub done: bool,
}

/// The StartNode entry of `uwf thread steps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartEntry {
    /// Hash of the StartNode.
    pub hash: CasRef,
    /// The Workflow node.
    pub workflow: CasRef,
    /// The user's task.
    pub prompt: String,
    /// When the StartNode was first stored (ms since the Unix epoch).
    pub timestamp: u64,
}

/// A StepNode entry of `uwf thread steps`, with the output expanded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEntry {
    /// Hash of the StepNode.
    pub hash: CasRef,
    /// The role that ran.
    pub role: String,
    /// The output node's payload.
    pub output: serde_json::Value,
    /// Hash of the detail node.
    pub detail: CasRef,
    /// The agent command that produced the step.
    pub agent: String,
    /// When the StepNode was first stored (ms since the Unix epoch).
    pub timestamp: u64,
}

/// An element of [`ThreadStepsOutput::steps`]: the start, then the steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ThreadStepsEntry {
    /// A step (tried first: it has the more specific shape).
    Step(StepEntry),
    /// The thread's start.
    Start(StartEntry),
}

/// `uwf thread steps`: the StartNode followed by every step, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadStepsOutput {
    /// The thread id.
    pub thread: ThreadId,
    /// The Workflow node.
    pub workflow: CasRef,
    /// `[start, step1, step2, …]`.
    pub steps: Vec<ThreadStepsEntry>,
}

/// Where a fork came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkedFrom {
    /// The node the new thread's head points at.
    pub step: CasRef,
}

/// `uwf thread fork`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadForkOutput {
    /// The new thread's id.
    pub thread: ThreadId,
    /// The node it was forked from.
    pub forked_from: ForkedFrom,
}
