//! Whether a StepNode's `childThread` may be recorded: the child-thread
//! rule of docs/nested-workflows.md, shared by the engine (which checks
//! what an agent printed) and by agents that run child threads (which check
//! before they print).

use std::fmt;

use uwf_cas::{Cas, Hash, Store};

use crate::thread;

/// What is wrong with a StepNode's `childThread`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildProblem {
    /// It does not load as a thread.
    Unusable(String),
    /// It is a StartNode, not the child's terminal StepNode.
    NotTerminal,
    /// The child was started from another state than this thread's head.
    WrongParent {
        /// The child's `parentState`.
        found: Option<Hash>,
        /// This thread's head.
        expected: Hash,
    },
    /// The child thread has not ended.
    NotEnded {
        /// Its next role.
        next: String,
    },
    /// The child's workflow cannot decide whether it has ended.
    Undecidable(String),
}

impl fmt::Display for ChildProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChildProblem::Unusable(e) => write!(f, "which is not a usable thread: {e}"),
            ChildProblem::NotTerminal => {
                f.write_str("which is a StartNode, not a child thread's terminal StepNode")
            }
            ChildProblem::WrongParent { found, expected } => write!(
                f,
                "whose thread was started from {} (its parentState), not from this thread's head {expected}",
                found.map_or_else(
                    || "nothing (it is a top-level thread)".to_owned(),
                    |h| h.to_string()
                )
            ),
            ChildProblem::NotEnded { next } => write!(
                f,
                "but that child thread has not ended (its next role would be {next:?})"
            ),
            ChildProblem::Undecidable(e) => {
                write!(f, "whose workflow cannot decide whether it has ended: {e}")
            }
        }
    }
}

/// Whether `child` is the terminal StepNode of an ended child thread that
/// was started from `head` (the calling thread's head): what a StepNode's
/// `childThread` must be.
/// Agents that run child threads check it before they write their step.
pub fn check_child<S: Store>(cas: &Cas<S>, head: Hash, child: Hash) -> Result<(), ChildProblem> {
    let cv = thread::load(cas, child).map_err(|e| ChildProblem::Unusable(e.to_string()))?;
    if cv.steps.last().map(|s| s.hash) != Some(child) {
        return Err(ChildProblem::NotTerminal);
    }
    if cv.start.parent_state != Some(head) {
        return Err(ChildProblem::WrongParent {
            found: cv.start.parent_state,
            expected: head,
        });
    }
    match cv.decide() {
        Ok(d) if d.is_end() => Ok(()),
        Ok(d) => Err(ChildProblem::NotEnded { next: d.next }),
        Err(e) => Err(ChildProblem::Undecidable(e.to_string())),
    }
}
