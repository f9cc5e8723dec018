//! From the child thread's final output to the parent role's output.
//!
//! 1. **As is.** If the child's final output (the output of its terminal
//!    StepNode) validates against the parent role's outputSchema, it is the
//!    parent's output, unchanged.
//! 2. **Extraction.** Otherwise the kit's two-layer extraction runs on a
//!    text rendering of it ([`render`]): a YAML frontmatter holding the
//!    final output's fields, then a body with the child's last answer (the
//!    terminal step's detail: the text of an `agent-answer` node, else the
//!    detail node as YAML). Layer 1 takes the frontmatter fields the parent
//!    schema declares — so a child whose last role outputs a superset of
//!    the parent's fields needs no LLM — and layer 2 asks the extraction
//!    model (`modelOverrides.extract`) when that is not enough.

use serde_json::Value;
use uwf_agent_kit::{AgentContext, extract};
use uwf_cas::Hash;
use uwf_moderator::thread::ThreadView;
use uwf_protocol::ThreadId;
use uwf_util::frontmatter;

use crate::error::WorkflowAgentError;

/// How the parent's output was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The child's final output validated as is.
    AsIs,
    /// The extraction's layer.
    Extracted(extract::Layer),
}

impl How {
    /// `as-is`, `frontmatter` or `llm`.
    pub fn as_str(self) -> &'static str {
        match self {
            How::AsIs => "as-is",
            How::Extracted(l) => l.as_str(),
        }
    }
}

/// Maps the final output of `child` (a thread with at least one step) onto
/// the context's role; see the module docs.
pub fn map_output(
    ctx: &AgentContext,
    child: &ThreadView,
    child_thread: ThreadId,
) -> Result<(Value, How), WorkflowAgentError> {
    let Some(last) = child.steps.last() else {
        return Err(WorkflowAgentError::ChildNoSteps {
            thread: child_thread,
            workflow: child.workflow.name.clone(),
        });
    };
    if extract::validate_in_store(ctx, &last.output)?.is_empty() {
        return Ok((last.output.clone(), How::AsIs));
    }
    let answer = last_answer(ctx, &last.payload.record.detail.to_string());
    let text = render(&last.output, &answer, child, child_thread);
    match extract::extract(ctx, &text) {
        Ok(e) => Ok((e.output, How::Extracted(e.layer))),
        Err(e) => Err(WorkflowAgentError::Mapping {
            thread: child_thread,
            child_role: last.payload.record.role.clone(),
            role: ctx.role().to_owned(),
            source: Box::new(e),
        }),
    }
}

/// The child's last answer: the `text` of the terminal step's detail node
/// when it has one (the kit's `agent-answer` nodes do), else the detail's
/// payload as YAML; empty when it cannot be read.
pub fn last_answer(ctx: &AgentContext, detail: &str) -> String {
    let Ok(hash) = detail.parse::<Hash>() else {
        return String::new();
    };
    match ctx.store().try_get(hash) {
        Ok(Some(node)) => match node.payload.get("text").and_then(Value::as_str) {
            Some(t) => t.to_owned(),
            None => serde_yaml::to_string(&node.payload).unwrap_or_default(),
        },
        _ => String::new(),
    }
}

/// The text the extraction reads: the final output as frontmatter (when it
/// is an object), then a line naming the child thread and its last role,
/// then the last answer.
pub fn render(output: &Value, answer: &str, child: &ThreadView, child_thread: ThreadId) -> String {
    let role = child
        .steps
        .last()
        .map(|s| s.payload.record.role.as_str())
        .unwrap_or_default();
    let mut body = format!(
        "Final result of child thread {child_thread} (workflow {}, last role {role}).\n",
        child.workflow.name
    );
    if !answer.trim().is_empty() {
        body.push('\n');
        body.push_str(answer.trim_end());
        body.push('\n');
    }
    let yaml = serde_yaml::to_value(output)
        .ok()
        .filter(|_| output.is_object());
    if let Some(yaml) = yaml {
        frontmatter::render(&yaml, &body)
    } else {
        let json = serde_json::to_string_pretty(output).unwrap_or_default();
        format!("{body}\nFinal output:\n\n```json\n{json}\n```\n")
    }
}
