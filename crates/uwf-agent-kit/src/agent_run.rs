//! What an agent hands back to the kit.

use serde_json::Value;
use uwf_cas::Hash;

/// The result of an agent's work, turned into a StepNode by the kit.
///
/// Either an answer text the kit extracts the output from
/// ([`AgentRun::text`]), or an output already in the shape of the role's
/// schema ([`AgentRun::output`]). The detail node of the step is the node
/// given with [`with_detail`](AgentRun::with_detail) or, by default, the
/// answer text stored as an `agent-answer` node.
///
/// ```
/// use uwf_agent_kit::AgentRun;
/// use serde_json::json;
///
/// let from_text = AgentRun::text("---\napproved: true\ncomments: LGTM\n---\nLooks good.");
/// let structured = AgentRun::output(json!({ "approved": true, "comments": "LGTM" }))
///     .with_answer("Looks good.");
/// # let _ = (from_text, structured);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct AgentRun {
    pub(crate) output: Option<Value>,
    pub(crate) answer: Option<String>,
    pub(crate) detail: Option<Hash>,
    pub(crate) child_thread: Option<Hash>,
}

impl AgentRun {
    /// An answer in frontmatter markdown; the kit extracts the output from
    /// its frontmatter and stores the whole text as the detail.
    pub fn text(answer: impl Into<String>) -> Self {
        Self {
            output: None,
            answer: Some(answer.into()),
            detail: None,
            child_thread: None,
        }
    }

    /// A structured output, already in the shape of the role's
    /// outputSchema (the kit validates it). Without
    /// [`with_answer`](Self::with_answer) or
    /// [`with_detail`](Self::with_detail) the detail is the output's JSON text.
    pub fn output(output: Value) -> Self {
        Self {
            output: Some(output),
            answer: None,
            detail: None,
            child_thread: None,
        }
    }

    /// Uses a node the agent stored itself (a transcript, a child thread's
    /// terminal StepNode, …) as the step's detail. It must be in the store.
    pub fn with_detail(mut self, detail: Hash) -> Self {
        self.detail = Some(detail);
        self
    }

    /// Records that the role's work was done by a child thread (a workflow
    /// run as an agent, docs/nested-workflows.md): `terminal` is the child thread's last
    /// StepNode, written as the StepNode's `childThread` (a `cas_ref`, so
    /// `uwf cas walk`/`gc` reach the child thread from the parent). It must
    /// be a StepNode in the store ([`KitError::BadChildThread`](crate::KitError::BadChildThread)
    /// otherwise). Usually given together with
    /// [`with_detail`](Self::with_detail)`(terminal)`.
    pub fn with_child_thread(mut self, terminal: Hash) -> Self {
        self.child_thread = Some(terminal);
        self
    }

    /// Sets the raw answer text: stored as the detail (unless
    /// [`with_detail`](Self::with_detail) is given) and, for a run without a
    /// structured output, the text the output is extracted from (replacing
    /// the text given to [`text`](Self::text)).
    pub fn with_answer(mut self, answer: impl Into<String>) -> Self {
        self.answer = Some(answer.into());
        self
    }

    /// The structured output, if any.
    pub fn structured_output(&self) -> Option<&Value> {
        self.output.as_ref()
    }

    /// The answer text, if any.
    pub fn answer(&self) -> Option<&str> {
        self.answer.as_deref()
    }

    /// The detail node, if the agent gave one.
    pub fn detail(&self) -> Option<Hash> {
        self.detail
    }

    /// The child thread's terminal StepNode, if the work was done by one.
    pub fn child_thread(&self) -> Option<Hash> {
        self.child_thread
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builders() {
        let r = AgentRun::text("a");
        assert_eq!(r.answer(), Some("a"));
        assert_eq!(r.structured_output(), None);
        let r = AgentRun::output(json!({"x": 1}))
            .with_answer("raw")
            .with_detail(Hash::from_u64(7));
        assert_eq!(r.structured_output(), Some(&json!({"x": 1})));
        assert_eq!(r.answer(), Some("raw"));
        assert_eq!(r.detail(), Some(Hash::from_u64(7)));
        assert_eq!(r.child_thread(), None);
        let r = AgentRun::output(json!({})).with_child_thread(Hash::from_u64(8));
        assert_eq!(r.child_thread(), Some(Hash::from_u64(8)));
        assert_eq!(AgentRun::text("a").with_answer("b").answer(), Some("b"));
    }
}
