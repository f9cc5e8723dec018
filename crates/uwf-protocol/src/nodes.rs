use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Hash;

/// One role of a workflow, as stored in the Workflow node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoleDefinition {
    /// One line for humans and diagrams.
    pub description: String,
    /// The role's instructions, given to the agent as its system prompt.
    pub system_prompt: String,
    /// Hash of the JSON Schema node every output of this role must satisfy.
    pub output_schema: Hash,
}

/// A named condition: a JSONata expression over the [`ModeratorContext`].
///
/// A workflow writes a condition as a bare expression string or as
/// `{description, expression}` (docs/workflow.md, "Conditions"). Both are
/// accepted and kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConditionDefinition {
    /// A bare JSONata expression.
    Expression(String),
    /// An expression with a human description.
    Described {
        /// What the condition means, for humans and diagrams.
        description: String,
        /// The JSONata expression.
        expression: String,
    },
}

impl ConditionDefinition {
    /// The JSONata expression, whichever way the condition was written.
    pub fn expression(&self) -> &str {
        match self {
            Self::Expression(e) => e,
            Self::Described { expression, .. } => expression,
        }
    }

    /// The description, if one was written.
    pub fn description(&self) -> Option<&str> {
        match self {
            Self::Expression(_) => None,
            Self::Described { description, .. } => Some(description),
        }
    }
}

/// An edge of the workflow graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Transition {
    /// Target role, or [`END`](crate::END).
    pub role: String,
    /// Name of a condition in [`WorkflowPayload::conditions`]; `None` is the
    /// unconditional fallback.
    pub condition: Option<String>,
    /// Edge prompt template handed to the next agent (docs/workflow.md, "Edge prompts").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// Payload of a Workflow node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowPayload {
    /// Registry name, e.g. `solve-issue`.
    pub name: String,
    /// What the workflow is for.
    pub description: String,
    /// The roles, by name.
    pub roles: BTreeMap<String, RoleDefinition>,
    /// Named JSONata conditions used by the graph.
    #[serde(default)]
    pub conditions: BTreeMap<String, ConditionDefinition>,
    /// Outgoing transitions of each role and of [`START`](crate::START),
    /// evaluated in order: the first whose condition holds wins.
    pub graph: BTreeMap<String, Vec<Transition>>,
}

/// Payload of a StartNode: the root of a thread.
///
/// The thread id is deliberately absent: it belongs to the index, not to the
/// content, so identical starts share one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartNodePayload {
    /// The Workflow node this thread runs.
    pub workflow: Hash,
    /// The user's task.
    pub prompt: String,
    /// For a child thread (workflow used as an agent): the parent thread's
    /// head when the call happened. Omitted for top-level threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_state: Option<Hash>,
}

/// The data of one executed step, shared by [`StepNodePayload`] and, with
/// `output` expanded, by [`StepContext`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// The role that ran.
    pub role: String,
    /// Hash of the structured output node (valid against the role's schema).
    pub output: Hash,
    /// Hash of the execution detail (raw answer, transcript, or a child
    /// thread's terminal StepNode).
    pub detail: Hash,
    /// The agent command that produced the step.
    pub agent: String,
}

/// Payload of a StepNode: one executed role, linked to its predecessor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepNodePayload {
    /// The thread's StartNode (every step links it, for random access).
    pub start: Hash,
    /// The previous StepNode; `None` for the first step (never the StartNode).
    pub prev: Option<Hash>,
    /// Role, output, detail and agent.
    #[serde(flatten)]
    pub record: StepRecord,
    /// When the role was run by a child workflow: the child thread's terminal
    /// StepNode. Omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_thread: Option<Hash>,
}

/// A step as the moderator and agents see it: [`StepRecord`] with `output`
/// replaced by the output node's payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepContext {
    /// The role that ran.
    pub role: String,
    /// The output node's payload, expanded.
    pub output: serde_json::Value,
    /// Hash of the detail node.
    pub detail: Hash,
    /// The agent command that produced the step.
    pub agent: String,
}

/// The input of every JSONata condition: the thread linearised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModeratorContext {
    /// The thread's StartNode payload.
    pub start: StartNodePayload,
    /// Every executed step, oldest first.
    pub steps: Vec<StepContext>,
}
