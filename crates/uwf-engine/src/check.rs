//! The one acceptance check of a StepNode before a thread's head may move
//! to it (docs/agent-protocol.md, "What uwf checks", and the
//! child-thread rules of docs/nested-workflows.md). The engine runs it on what an agent
//! printed; agents built on the kit run it before they print, so a step
//! that uwf would refuse is never offered.

use std::fmt;

use uwf_cas::{Cas, Hash, Store};
use uwf_moderator::thread::{LoadedStep, ThreadView};
use uwf_protocol::StepNodePayload;

use crate::error::EngineError;

pub use uwf_moderator::child::{ChildProblem, check_child};

/// Why a StepNode cannot become the thread's next step. The agent (or the
/// person) produced something wrong; the store itself is fine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The printed hash names no node.
    NotInStore {
        /// The hash.
        step: Hash,
    },
    /// The node is not a StepNode.
    NotAStepNode {
        /// The hash.
        step: Hash,
        /// The title (or hash) of its type.
        found: String,
    },
    /// The node is a StepNode whose payload does not parse.
    Malformed {
        /// The StepNode.
        step: Hash,
        /// What is wrong.
        reason: String,
    },
    /// Its `prev` is not the thread's last step.
    WrongPrev {
        /// The StepNode.
        step: Hash,
        /// Its `prev`.
        found: Option<Hash>,
        /// The thread's last step (`None` before the first step).
        expected: Option<Hash>,
        /// The thread's head.
        head: Hash,
    },
    /// Its `start` is not the thread's StartNode.
    WrongStart {
        /// The StepNode.
        step: Hash,
        /// Its `start`.
        found: Hash,
        /// The thread's StartNode.
        expected: Hash,
    },
    /// It is for another role than the moderator chose.
    WrongRole {
        /// The StepNode.
        step: Hash,
        /// Its role.
        found: String,
        /// The role chosen.
        expected: String,
    },
    /// The role is not in the workflow (or its schema reference is bad).
    UnknownRole {
        /// The role.
        role: String,
    },
    /// Its output node is not in the store.
    OutputMissing {
        /// The StepNode.
        step: Hash,
        /// The output reference.
        output: Hash,
    },
    /// Its output node is not of the role's output schema.
    OutputWrongType {
        /// The StepNode.
        step: Hash,
        /// The output's type.
        found: Hash,
        /// The role's output schema.
        expected: Hash,
    },
    /// Its output does not validate against the role's schema.
    OutputInvalid {
        /// The StepNode.
        step: Hash,
        /// The validation error.
        reason: String,
    },
    /// Its detail node is not in the store.
    DetailMissing {
        /// The StepNode.
        step: Hash,
        /// The detail reference.
        detail: Hash,
    },
    /// Its `childThread` is not an ended child thread of this head.
    Child {
        /// The StepNode.
        step: Hash,
        /// The child reference.
        child: Hash,
        /// What is wrong with it.
        reason: ChildProblem,
    },
}

/// Shows an optional hash as the JSON it stands for (`null` when absent).
struct Null<'a>(&'a Option<Hash>);

impl fmt::Display for Null<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(h) => fmt::Display::fmt(h, f),
            None => f.write_str("null"),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::NotInStore { step } => {
                write!(f, "printed {step}, but no such node is in the store")
            }
            Rejection::NotAStepNode { step, found } => write!(
                f,
                "printed {step}, which is not a StepNode (its type is {found})"
            ),
            Rejection::Malformed { step, reason } => {
                write!(f, "StepNode {step} is malformed: {reason}")
            }
            Rejection::WrongPrev {
                step,
                found,
                expected,
                head,
            } => write!(
                f,
                "StepNode {step} has prev {}, expected {} (the thread's head is {head}{})",
                Null(found),
                Null(expected),
                if expected.is_none() {
                    ", its StartNode: the first step's prev is null"
                } else {
                    ""
                }
            ),
            Rejection::WrongStart {
                step,
                found,
                expected,
            } => write!(
                f,
                "StepNode {step} has start {found} but the thread's StartNode is {expected}"
            ),
            Rejection::WrongRole {
                step,
                found,
                expected,
            } => write!(
                f,
                "StepNode {step} is for role {found:?} but the moderator chose {expected:?}"
            ),
            Rejection::UnknownRole { role } => write!(f, "role {role:?} is not in the workflow"),
            Rejection::OutputMissing { step, output } => write!(
                f,
                "StepNode {step} points at output {output}, which is not in the store"
            ),
            Rejection::OutputWrongType {
                step,
                found,
                expected,
            } => write!(
                f,
                "the output of StepNode {step} is a node of type {found}, not of the role's output schema {expected}"
            ),
            Rejection::OutputInvalid { step, reason } => write!(
                f,
                "the output of StepNode {step} does not match the role's schema: {reason}"
            ),
            Rejection::DetailMissing { step, detail } => write!(
                f,
                "StepNode {step} points at detail {detail}, which is not in the store"
            ),
            Rejection::Child {
                step,
                child,
                reason,
            } => write!(f, "StepNode {step} has childThread {child}, {reason}"),
        }
    }
}

/// The outcome of a failed check: the step is wrong, or the store could not
/// be read (which is not the agent's fault and is never retried as one).
#[derive(Debug)]
pub enum CheckError {
    /// The step is wrong.
    Rejected(Rejection),
    /// Reading the store failed.
    Store(EngineError),
}

impl From<Rejection> for CheckError {
    fn from(r: Rejection) -> Self {
        CheckError::Rejected(r)
    }
}

fn store(e: impl Into<EngineError>) -> CheckError {
    CheckError::Store(e.into())
}

/// Checks the StepNode `new` offered as the next step of `view` for `role`.
/// On success returns the step as loaded, so a caller can extend its view of
/// the thread instead of reading the whole chain again.
pub fn check_step<S: Store>(
    cas: &Cas<S>,
    view: &ThreadView,
    role: &str,
    new: Hash,
) -> Result<LoadedStep, CheckError> {
    let types = cas.types();
    let node = cas
        .try_get(new)
        .map_err(store)?
        .ok_or(Rejection::NotInStore { step: new })?;
    if node.type_hash != types.step_node {
        let title = cas
            .schema(node.type_hash)
            .ok()
            .and_then(|s| uwf_cas::schema::title_of(&s).map(str::to_string));
        return Err(Rejection::NotAStepNode {
            step: new,
            found: title.unwrap_or_else(|| node.type_hash.to_string()),
        }
        .into());
    }
    let timestamp = node.timestamp;
    let step: StepNodePayload =
        serde_json::from_value(node.payload).map_err(|e| Rejection::Malformed {
            step: new,
            reason: e.to_string(),
        })?;
    let expected_prev = view.steps.last().map(|s| s.hash);
    if step.prev != expected_prev {
        return Err(Rejection::WrongPrev {
            step: new,
            found: step.prev,
            expected: expected_prev,
            head: view.head,
        }
        .into());
    }
    if step.start != view.start_hash {
        return Err(Rejection::WrongStart {
            step: new,
            found: step.start,
            expected: view.start_hash,
        }
        .into());
    }
    if step.record.role != role {
        return Err(Rejection::WrongRole {
            step: new,
            found: step.record.role.clone(),
            expected: role.to_string(),
        }
        .into());
    }
    let schema: Hash = view
        .workflow
        .roles
        .get(role)
        .map(|r| r.output_schema)
        .ok_or_else(|| Rejection::UnknownRole {
            role: role.to_string(),
        })?;
    let output = step.record.output;
    let output_node = cas
        .try_get(output)
        .map_err(store)?
        .ok_or(Rejection::OutputMissing { step: new, output })?;
    if output_node.type_hash != schema {
        return Err(Rejection::OutputWrongType {
            step: new,
            found: output_node.type_hash,
            expected: schema,
        }
        .into());
    }
    cas.validate(schema, &output_node.payload)
        .map_err(|e| Rejection::OutputInvalid {
            step: new,
            reason: e.to_string(),
        })?;
    let detail = step.record.detail;
    if !cas.has(detail).map_err(store)? {
        return Err(Rejection::DetailMissing { step: new, detail }.into());
    }
    check_child_thread(cas, view, new, &step)?;
    Ok(LoadedStep {
        hash: new,
        payload: step,
        output: output_node.payload,
        timestamp,
    })
}

/// Checks a StepNode's `childThread` (docs/nested-workflows.md, "The links"): when present, it
/// must be the terminal StepNode of a thread that loads, was started from
/// this thread's head (`parentState`), and has ended (its moderator says
/// `$END`).
pub fn check_child_thread<S: Store>(
    cas: &Cas<S>,
    view: &ThreadView,
    new: Hash,
    step: &StepNodePayload,
) -> Result<(), CheckError> {
    let Some(child) = step.child_thread else {
        return Ok(());
    };
    check_child(cas, view.head, child).map_err(|reason| {
        Rejection::Child {
            step: new,
            child,
            reason,
        }
        .into()
    })
}
