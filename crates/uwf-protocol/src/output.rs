use serde::{Deserialize, Serialize};

use crate::{Hash, ThreadId};

/// `uwf thread start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartOutput {
    /// The Workflow node the thread runs.
    pub workflow: Hash,
    /// The new thread's id.
    pub thread: ThreadId,
}

/// `uwf thread step` and `uwf thread show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepOutput {
    /// The Workflow node the thread runs.
    pub workflow: Hash,
    /// The thread id.
    pub thread: ThreadId,
    /// The thread's head (a StepNode, or the StartNode before any step).
    pub head: Hash,
    /// True once the moderator returned `$END` (the thread is archived).
    pub done: bool,
}

/// One row of `uwf thread list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadListItem {
    /// The thread id.
    pub thread: ThreadId,
    /// The Workflow node the thread runs.
    pub workflow: Hash,
    /// The thread's head.
    pub head: Hash,
    /// True for archived threads (only listed with `--all`).
    #[serde(default)]
    pub done: bool,
}

/// The StartNode entry of `uwf thread steps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartEntry {
    /// Hash of the StartNode.
    pub hash: Hash,
    /// The Workflow node.
    pub workflow: Hash,
    /// The user's task.
    pub prompt: String,
    /// When the StartNode was first stored (ms since the Unix epoch).
    pub timestamp: u64,
}

/// A StepNode entry of `uwf thread steps`, with the output expanded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEntry {
    /// Hash of the StepNode.
    pub hash: Hash,
    /// The role that ran.
    pub role: String,
    /// The output node's payload.
    pub output: serde_json::Value,
    /// Hash of the detail node.
    pub detail: Hash,
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
    pub workflow: Hash,
    /// `[start, step1, step2, …]`.
    pub steps: Vec<ThreadStepsEntry>,
}

/// Where a fork came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkedFrom {
    /// The node the new thread's head points at.
    pub step: Hash,
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

/// `uwf thread show`: the thread's head, and its links to other threads
/// when it has any (workflows run as agents, docs/nested-workflows.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadShowOutput {
    /// `{workflow, thread, head, done}`, as `uwf thread step` prints it.
    #[serde(flatten)]
    pub head: StepOutput,
    /// For a child thread: its StartNode's `parentState`, the parent
    /// thread's head when the child was started. Omitted for top-level
    /// threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Hash>,
    /// The id of the thread [`parent`](Self::parent) belongs to, when it is
    /// active or in `history.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread: Option<ThreadId>,
    /// The steps of this thread that were run by a child workflow, oldest
    /// first. Omitted when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_threads: Vec<ChildThreadLink>,
}

/// A step of a thread whose role was run by a child thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildThreadLink {
    /// The parent's StepNode holding the link.
    pub step: Hash,
    /// Its role.
    pub role: String,
    /// The StepNode's `childThread`: the child thread's terminal StepNode.
    pub child_thread: Hash,
    /// The child thread's StartNode (omitted when the child thread cannot
    /// be loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Hash>,
    /// The registry name of the child's workflow.
    pub workflow_name: String,
    /// How many steps the child thread ran.
    pub steps: usize,
    /// The child thread's id, when it is active or in `history.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadId>,
}

/// One frame of `uwf thread stack`: a thread on the call stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackFrame {
    /// This frame's position: the node asked about for the innermost
    /// frame; for the others, the head of that thread when it called the
    /// frame below (the callee's `parentState`).
    pub node: Hash,
    /// The thread's StartNode.
    pub start: Hash,
    /// The Workflow node the thread runs.
    pub workflow: Hash,
    /// The workflow's registry name.
    pub workflow_name: String,
    /// The role of the calling thread whose work this thread does (the role
    /// the caller's moderator chose at `parentState`); `null` for the
    /// top-level thread.
    pub role: Option<String>,
    /// 0 for the top-level thread, 1 for a child it called, and so on.
    pub depth: usize,
    /// The thread's id, when it is active or in `history.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadId>,
}
