//! Reading a thread from the CAS.
//!
//! A thread is a chain of StepNodes linked by `prev`, each also linking the
//! thread's StartNode, which names the Workflow node. [`load`] follows the
//! chain from its head back to the start, checks every link, and expands
//! each step's output, producing the [`ModeratorContext`] the moderator
//! evaluates.

use std::collections::HashSet;

use serde::de::DeserializeOwned;
use uwf_cas::{Cas, CasError, Hash, Node, Store};
use uwf_protocol::{
    ModeratorContext, StartNodePayload, StepContext, StepNodePayload, WorkflowPayload,
};

use crate::{Decision, ModeratorError};

/// Most steps a thread may have; a longer chain is treated as corrupt.
pub const MAX_STEPS: usize = 100_000;

/// A thread as read from the CAS.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadView {
    /// The node the thread was loaded from (a StepNode, or the StartNode
    /// before the first step).
    pub head: Hash,
    /// The StartNode.
    pub start_hash: Hash,
    /// The StartNode's payload.
    pub start: StartNodePayload,
    /// When the StartNode was first stored (ms since the Unix epoch).
    pub start_timestamp: u64,
    /// The Workflow node named by the start.
    pub workflow_hash: Hash,
    /// The workflow.
    pub workflow: WorkflowPayload,
    /// The steps, oldest first: all of them, or, from [`load_recent`], the
    /// last ones (then [`unloaded`](Self::unloaded) says how many came
    /// before).
    pub steps: Vec<LoadedStep>,
    /// How many steps before `steps[0]` were not loaded: `0` unless the
    /// view came from [`load_recent`].
    pub unloaded: usize,
}

/// One step of a [`ThreadView`].
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedStep {
    /// The StepNode.
    pub hash: Hash,
    /// Its payload.
    pub payload: StepNodePayload,
    /// The payload of its output node.
    pub output: serde_json::Value,
    /// When the StepNode was first stored (ms since the Unix epoch).
    pub timestamp: u64,
}

impl ThreadView {
    /// The thread linearised for the moderator: the start and every step
    /// with its output expanded, oldest first.
    pub fn context(&self) -> ModeratorContext {
        context_of(&self.start, &self.steps)
    }

    /// The newest step, if any.
    pub fn last_step(&self) -> Option<&LoadedStep> {
        self.steps.last()
    }

    /// How many steps the thread has (loaded or not).
    pub fn len(&self) -> usize {
        self.unloaded + self.steps.len()
    }

    /// Whether the thread has no step yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every step is loaded (not a view of the last ones only).
    pub fn is_whole(&self) -> bool {
        self.unloaded == 0
    }

    /// Forgets all but the last `n` steps, which makes the view one of the
    /// last steps ([`load_recent`]): what a long-lived process keeps of a
    /// thread whose decisions read only its last steps
    /// ([`steps_needed`](crate::steps_needed)). Whoever reads the view
    /// afterwards must need no more.
    pub fn keep_last(&mut self, n: usize) {
        if self.steps.len() <= n {
            return;
        }
        let drop = self.steps.len() - n;
        self.steps.drain(..drop);
        self.unloaded += drop;
    }

    /// What the moderator decides for this thread ([`evaluate`](crate::evaluate) over it).
    ///
    /// For a view of the last steps ([`load_recent`]), the decision is the
    /// one of the whole thread when the workflow's decisions read no
    /// further back than the steps loaded; otherwise
    /// [`ModeratorError::HistoryNotLoaded`].
    pub fn decide(&self) -> Result<Decision, ModeratorError> {
        self.enough_loaded()?;
        crate::eval::evaluate_steps(
            &self.workflow,
            &self.start,
            &self.steps,
            self.unloaded,
            false,
        )
    }

    /// What the moderator decides when this thread is resumed after
    /// reaching `$SUSPEND` ([`evaluate_resume`](crate::eval::evaluate_resume)).
    pub fn decide_resume(&self) -> Result<Decision, ModeratorError> {
        self.enough_loaded()?;
        crate::eval::evaluate_steps(
            &self.workflow,
            &self.start,
            &self.steps,
            self.unloaded,
            true,
        )
    }

    /// What this thread's workflow's decisions read of its steps
    /// ([`steps_needed`](crate::steps_needed)), worked out once per
    /// workflow in a process (a Workflow node never changes).
    pub fn steps_needed(&self) -> crate::StepsNeeded {
        crate::needs::steps_needed_of(self.workflow_hash, &self.workflow)
    }

    fn enough_loaded(&self) -> Result<(), ModeratorError> {
        if self.is_whole() {
            return Ok(());
        }
        match self.steps_needed() {
            crate::StepsNeeded::Last(n) if n <= self.steps.len() => Ok(()),
            _ => Err(ModeratorError::HistoryNotLoaded {
                workflow: self.workflow.name.clone(),
                loaded: self.steps.len(),
                len: self.len(),
            }),
        }
    }
}

/// The [`ModeratorContext`] of a start and its loaded steps.
pub(crate) fn context_of(start: &StartNodePayload, steps: &[LoadedStep]) -> ModeratorContext {
    ModeratorContext {
        start: start.clone(),
        steps: steps
            .iter()
            .map(|s| StepContext {
                role: s.payload.record.role.clone(),
                output: s.output.clone(),
                detail: s.payload.record.detail,
                agent: s.payload.record.agent.clone(),
            })
            .collect(),
    }
}

/// Why a thread cannot be loaded.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum ThreadError {
    /// A node of the thread is missing.
    #[error("{what} {hash} is not in the store")]
    #[diagnostic(code(uwf::thread::not_found))]
    NotFound {
        /// The missing node.
        hash: Hash,
        /// What it should have been ("thread head", "StartNode", "output of step …", …).
        what: String,
    },

    /// A node has another type than its place in the thread requires.
    #[error("node {hash} should be a {expected}, but it is a {found}")]
    #[diagnostic(
        code(uwf::thread::wrong_type),
        help(
            "a thread head is a StepNode (or the StartNode before the first step); check the hash"
        )
    )]
    WrongType {
        /// The node.
        hash: Hash,
        /// What was expected ("StartNode or StepNode", "Workflow", …).
        expected: &'static str,
        /// The title of its schema, or the schema's hash when untitled.
        found: String,
    },

    /// A step belongs to another thread than the head.
    #[error(
        "broken chain: step {step} belongs to start {found}, but the head's start is {expected}"
    )]
    #[diagnostic(
        code(uwf::thread::broken_chain),
        help("every StepNode of a thread links the same StartNode; this chain mixes two threads")
    )]
    BrokenChain {
        /// The offending StepNode.
        step: Hash,
        /// The head's StartNode.
        expected: Hash,
        /// The step's `start`.
        found: Hash,
    },

    /// Following `prev` came back to a step already seen.
    #[error("the chain of steps loops at {hash}")]
    #[diagnostic(code(uwf::thread::cycle))]
    Cycle {
        /// The step reached twice.
        hash: Hash,
    },

    /// The chain is longer than [`MAX_STEPS`].
    #[error("the thread at {head} has more than {limit} steps")]
    #[diagnostic(
        code(uwf::thread::too_long),
        help(
            "this is almost certainly a corrupt store or a runaway workflow; check its loop conditions"
        )
    )]
    TooLong {
        /// The head.
        head: Hash,
        /// [`MAX_STEPS`].
        limit: usize,
    },

    /// A node's payload does not have the shape its type promises.
    #[error("{kind} {hash} has an invalid payload: {message}")]
    #[diagnostic(code(uwf::thread::invalid_payload))]
    InvalidPayload {
        /// The node.
        hash: Hash,
        /// Its type ("StartNode", "StepNode").
        kind: &'static str,
        /// What is wrong.
        message: String,
    },

    /// The Workflow node cannot be read as a workflow.
    #[error("workflow {hash} is invalid: {message}")]
    #[diagnostic(code(uwf::thread::workflow_invalid))]
    WorkflowInvalid {
        /// The Workflow node.
        hash: Hash,
        /// What is wrong.
        message: String,
    },

    /// The store failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] CasError),
}

/// Reads a thread from its head: a StepNode, or the StartNode of a thread
/// without steps.
///
/// The chain is walked back from the head only until a step whose loaded
/// chain is in the derived cache (`cas/cache/chain-<step>`, see docs/state.md); the cached part
/// is checked before it is used, and the chain now loaded is cached for the
/// next reader (best effort: a cache that cannot be written changes
/// nothing). [`load_uncached`] reads every node.
pub fn load<S: Store>(cas: &Cas<S>, head: Hash) -> Result<ThreadView, ThreadError> {
    load_with(cas, head, true)
}

/// [`load`] without the derived cache: every node of the chain is read and
/// checked.
pub fn load_uncached<S: Store>(cas: &Cas<S>, head: Hash) -> Result<ThreadView, ThreadError> {
    load_with(cas, head, false)
}

fn load_with<S: Store>(cas: &Cas<S>, head: Hash, cached: bool) -> Result<ThreadView, ThreadError> {
    let types = cas.types();
    let head_node = fetch(cas, head, || "thread head".into())?;

    let mut steps = Vec::new();
    let mut walked = 0usize;
    let (start_hash, start_node) = if head_node.type_hash == types.start_node {
        (head, head_node)
    } else if head_node.type_hash == types.step_node {
        let first: StepNodePayload = payload(head, "StepNode", &head_node)?;
        let start_hash = first.start;
        let mut seen = HashSet::new();
        let mut current = Some((head, head_node));
        let mut base: Vec<LoadedStep> = Vec::new();
        while let Some((hash, node)) = current.take() {
            if cached && let Some(prefix) = crate::view_cache::read(cas, hash, start_hash) {
                base = prefix;
                break;
            }
            walked += 1;
            let p = checked_step(cas, &mut seen, steps.len(), (hash, &node), head, start_hash)?;
            let (prev_node, output) = previous_and_output(cas, hash, &p)?;
            current = prev_node;
            steps.push(LoadedStep {
                hash,
                payload: p,
                output,
                timestamp: node.timestamp,
            });
        }
        steps.reverse();
        if !base.is_empty() {
            if base.len() + steps.len() > MAX_STEPS {
                return Err(ThreadError::TooLong {
                    head,
                    limit: MAX_STEPS,
                });
            }
            base.append(&mut steps);
            steps = base;
        }
        (start_hash, fetch(cas, start_hash, || "StartNode".into())?)
    } else {
        return Err(wrong_type(cas, head, "StartNode or StepNode", &head_node));
    };
    let (start, workflow) = start_and_workflow(cas, start_hash, start_node)?;
    let view = ThreadView {
        head,
        start_hash,
        start: start.payload,
        start_timestamp: start.timestamp,
        workflow_hash: workflow.hash,
        workflow: workflow.payload,
        steps,
        unloaded: 0,
    };
    // A new entry only after a walk of some length: the steps since the
    // last entry are a few node reads, cheaper than rewriting the whole
    // chain on every step.
    if cached && walked >= crate::view_cache::REWRITE_AFTER {
        crate::view_cache::write(cas, &view);
    }
    Ok(view)
}

/// Reads what a step of a thread needs to decide: the whole thread
/// ([`load`]) if its workflow's decisions may read any step, else only its
/// last steps and how many there are ([`crate::steps_needed`]): a view with
/// [`ThreadView::unloaded`] steps before the ones loaded, whose decisions
/// are those of the whole thread. On a long thread that is a few node reads
/// instead of the whole chain and its conversion for the conditions.
///
/// The steps loaded are checked as [`load`] checks them, and so is every
/// StepNode walked past them to find the chain's length: in the derived
/// cache (a `len-<step>` or `chain-<step>` entry, docs/state.md), for the
/// newest step that has an entry, else by walking to the start. A walk of
/// 8 steps or more to find it records the length at the head for the next
/// steps (best effort).
pub fn load_recent<S: Store>(cas: &Cas<S>, head: Hash) -> Result<ThreadView, ThreadError> {
    let types = cas.types();
    let head_node = fetch(cas, head, || "thread head".into())?;
    if head_node.type_hash != types.step_node {
        // The StartNode (no steps to leave out), or the error `load` gives.
        return load(cas, head);
    }
    let first: StepNodePayload = payload(head, "StepNode", &head_node)?;
    let start_hash = first.start;
    let (start, workflow) = start_and_workflow(
        cas,
        start_hash,
        fetch(cas, start_hash, || "StartNode".into())?,
    )?;
    let wanted = match crate::needs::steps_needed_of(workflow.hash, &workflow.payload) {
        crate::StepsNeeded::Last(n) => n.max(1),
        crate::StepsNeeded::All => return load(cas, head),
    };

    // Newest first while walking.
    let mut tail: Vec<LoadedStep> = Vec::with_capacity(wanted);
    let mut seen = HashSet::new();
    // The steps walked, newest first (whose length entries a new one replaces).
    let mut path = Vec::new();
    let mut current = Some((head, head_node));
    let mut walked = 0usize;
    // The length, once a cache entry gave it: (steps, walked to the entry, its step).
    let mut counted: Option<(usize, usize, Hash)> = None;
    loop {
        let Some((hash, node)) = current.take() else {
            break;
        };
        if counted.is_none()
            && let Some(before) = crate::view_cache::read_len(cas, hash, start_hash)
        {
            counted = Some((walked + before, walked, hash));
        }
        if counted.is_some() && tail.len() >= wanted {
            break;
        }
        let p = checked_step(cas, &mut seen, walked, (hash, &node), head, start_hash)?;
        walked += 1;
        if counted.is_none() {
            path.push(hash);
        }
        if tail.len() < wanted {
            let (prev_node, output) = previous_and_output(cas, hash, &p)?;
            current = prev_node;
            tail.push(LoadedStep {
                hash,
                payload: p,
                output,
                timestamp: node.timestamp,
            });
        } else {
            current = match p.prev {
                Some(prev) => Some((
                    prev,
                    fetch(cas, prev, || format!("previous step of {hash}"))?,
                )),
                None => None,
            };
        }
    }
    // Without an entry, the walk went to the first step.
    let (len, to_count, counted_at) = match counted {
        Some((len, to_count, at)) => (len, to_count, Some(at)),
        None => (walked, walked, None),
    };
    if len < walked {
        // An entry counting fewer steps than were walked to it is wrong
        // (derived data, never the truth): read the thread whole.
        return load(cas, head);
    }
    if len > MAX_STEPS {
        return Err(ThreadError::TooLong {
            head,
            limit: MAX_STEPS,
        });
    }
    tail.reverse();
    if to_count >= crate::view_cache::REWRITE_AFTER {
        crate::view_cache::write_len(cas, head, start_hash, len, counted_at, &path);
    }
    Ok(ThreadView {
        head,
        start_hash,
        start: start.payload,
        start_timestamp: start.timestamp,
        workflow_hash: workflow.hash,
        workflow: workflow.payload,
        unloaded: len - tail.len(),
        steps: tail,
    })
}

/// The payload of StepNode `hash` (read as `node`) of the thread started at
/// `start`, checked as a step of a chain walked back from `head` after
/// `walked` steps (`seen`: the steps walked).
fn checked_step<S: Store>(
    cas: &Cas<S>,
    seen: &mut HashSet<Hash>,
    walked: usize,
    (hash, node): (Hash, &Node),
    head: Hash,
    start: Hash,
) -> Result<StepNodePayload, ThreadError> {
    if !seen.insert(hash) {
        return Err(ThreadError::Cycle { hash });
    }
    if walked >= MAX_STEPS {
        return Err(ThreadError::TooLong {
            head,
            limit: MAX_STEPS,
        });
    }
    if node.type_hash != cas.types().step_node {
        return Err(wrong_type(cas, hash, "StepNode", node));
    }
    let p: StepNodePayload = payload(hash, "StepNode", node)?;
    if p.start != start {
        return Err(ThreadError::BrokenChain {
            step: hash,
            expected: start,
            found: p.start,
        });
    }
    Ok(p)
}

/// The step before StepNode `hash` (`p`), if any, and `hash`'s output.
fn previous_and_output<S: Store>(
    cas: &Cas<S>,
    hash: Hash,
    p: &StepNodePayload,
) -> Result<(Option<(Hash, Node)>, serde_json::Value), ThreadError> {
    let out_hash = p.record.output;
    // The previous step and this step's output in one read: one query
    // instead of two on a networked store (`get_many`); the same two
    // reads, in the same order, on the others.
    let (prev_node, output_node) = match p.prev {
        Some(prev) => {
            let mut both = cas.store().get_many(&[prev, out_hash])?.into_iter();
            let prev_node = both.next().flatten().ok_or_else(|| ThreadError::NotFound {
                hash: prev,
                what: format!("previous step of {hash}"),
            })?;
            (Some((prev, prev_node)), both.next().flatten())
        }
        None => (None, cas.try_get(out_hash)?),
    };
    let output = output_node
        .ok_or_else(|| ThreadError::NotFound {
            hash: out_hash,
            what: format!("output of step {hash}"),
        })?
        .payload;
    Ok((prev_node, output))
}

/// A payload read from the node of a thread, with what the node says of it.
struct Read<T> {
    hash: Hash,
    payload: T,
    timestamp: u64,
}

/// The StartNode (already fetched as `start_node`) and the Workflow it
/// names, each checked to be of its type.
fn start_and_workflow<S: Store>(
    cas: &Cas<S>,
    start_hash: Hash,
    start_node: Node,
) -> Result<(Read<StartNodePayload>, Read<WorkflowPayload>), ThreadError> {
    let types = cas.types();
    if start_node.type_hash != types.start_node {
        return Err(wrong_type(cas, start_hash, "StartNode", &start_node));
    }
    let start: StartNodePayload = payload(start_hash, "StartNode", &start_node)?;
    let workflow_hash = start.workflow;
    let wf_node = fetch(cas, workflow_hash, || "Workflow".into())?;
    if wf_node.type_hash != types.workflow {
        return Err(wrong_type(cas, workflow_hash, "Workflow", &wf_node));
    }
    let workflow: WorkflowPayload =
        serde_json::from_value(wf_node.payload).map_err(|e| ThreadError::WorkflowInvalid {
            hash: workflow_hash,
            message: e.to_string(),
        })?;
    Ok((
        Read {
            hash: start_hash,
            payload: start,
            timestamp: start_node.timestamp,
        },
        Read {
            hash: workflow_hash,
            payload: workflow,
            timestamp: wf_node.timestamp,
        },
    ))
}

/// A thread's head, its StartNode and its workflow, without its history:
/// what an agent that builds no prompt needs ([`load_head`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadHead {
    /// The node the thread was read from (a StepNode, or the StartNode
    /// before the first step).
    pub head: Hash,
    /// The head's payload when it is a StepNode; `None` at the StartNode.
    pub last_step: Option<StepNodePayload>,
    /// The StartNode.
    pub start_hash: Hash,
    /// The StartNode's payload.
    pub start: StartNodePayload,
    /// When the StartNode was first stored (ms since the Unix epoch).
    pub start_timestamp: u64,
    /// The Workflow node named by the start.
    pub workflow_hash: Hash,
    /// The workflow.
    pub workflow: WorkflowPayload,
}

/// Reads a thread's head, StartNode and workflow: three nodes however long
/// the thread is. The nodes are checked as [`load`] checks them, but the
/// chain between the head and the start is not walked (what
/// [`load`] is for): the head is trusted to be a step of the thread its
/// `start` names, as an engine that just loaded the thread knows it is.
pub fn load_head<S: Store>(cas: &Cas<S>, head: Hash) -> Result<ThreadHead, ThreadError> {
    let types = cas.types();
    let head_node = fetch(cas, head, || "thread head".into())?;
    let (last_step, start_hash, start_node) = if head_node.type_hash == types.start_node {
        (None, head, head_node)
    } else if head_node.type_hash == types.step_node {
        let step: StepNodePayload = payload(head, "StepNode", &head_node)?;
        let start_hash = step.start;
        let start_node = fetch(cas, start_hash, || "StartNode".into())?;
        (Some(step), start_hash, start_node)
    } else {
        return Err(wrong_type(cas, head, "StartNode or StepNode", &head_node));
    };
    let (start, workflow) = start_and_workflow(cas, start_hash, start_node)?;
    Ok(ThreadHead {
        head,
        last_step,
        start_hash: start.hash,
        start: start.payload,
        start_timestamp: start.timestamp,
        workflow_hash: workflow.hash,
        workflow: workflow.payload,
    })
}

/// Most frames [`call_stack`] follows; a longer `parentState` chain is
/// treated as corrupt.
pub const MAX_CALL_FRAMES: usize = 10_000;

/// One thread on a call stack (docs/nested-workflows.md): see [`call_stack`].
#[derive(Debug, Clone, PartialEq)]
pub struct CallFrame {
    /// This frame's position in its thread: the node [`call_stack`] was
    /// asked about for the innermost frame; for each outer frame, that
    /// thread's head when it called the frame below (the callee's
    /// `parentState`).
    pub node: Hash,
    /// The thread as loaded from [`node`](Self::node).
    pub view: ThreadView,
    /// The role of the calling thread whose work this thread does: what
    /// the caller's moderator picks at this thread's `parentState`. `None`
    /// for the top-level thread, and when the caller's moderator cannot
    /// decide or would end there.
    pub role: Option<String>,
    /// 0 for the top-level thread, then 1, 2, … down the stack.
    pub depth: usize,
}

/// The call stack of a thread node: from `node` (a StartNode or StepNode)
/// up through `parentState` links to the top-level thread, innermost
/// frame first.
///
/// Each frame is the thread loaded from its position (see
/// [`CallFrame::node`]); a top-level thread gives a single frame of depth
/// 0. Every node on the way must load as a thread ([`load`]); a chain of
/// more than [`MAX_CALL_FRAMES`] frames, or one that comes back to a
/// StartNode already seen, is an error.
pub fn call_stack<S: Store>(cas: &Cas<S>, node: Hash) -> Result<Vec<CallFrame>, ThreadError> {
    let mut frames: Vec<CallFrame> = Vec::new();
    let mut seen = HashSet::new();
    let mut current = node;
    loop {
        let view = load(cas, current)?;
        if !seen.insert(view.start_hash) {
            return Err(ThreadError::Cycle {
                hash: view.start_hash,
            });
        }
        if frames.len() >= MAX_CALL_FRAMES {
            return Err(ThreadError::TooLong {
                head: node,
                limit: MAX_CALL_FRAMES,
            });
        }
        let parent = view.start.parent_state;
        frames.push(CallFrame {
            node: current,
            view,
            role: None,
            depth: 0,
        });
        match parent {
            Some(p) => current = p,
            None => break,
        }
    }
    // The role of frame i is what the caller (frame i + 1) decides at its
    // position, which is frame i's parentState.
    for i in 0..frames.len().saturating_sub(1) {
        frames[i].role = match frames[i + 1].view.decide() {
            Ok(d) if !d.is_end() => Some(d.next),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(error = %e, "the caller's moderator cannot name the calling role");
                None
            }
        };
    }
    let total = frames.len();
    for (i, f) in frames.iter_mut().enumerate() {
        f.depth = total - 1 - i;
    }
    Ok(frames)
}

fn fetch<S: Store>(
    cas: &Cas<S>,
    hash: Hash,
    what: impl FnOnce() -> String,
) -> Result<Node, ThreadError> {
    cas.try_get(hash)?
        .ok_or_else(|| ThreadError::NotFound { hash, what: what() })
}

fn payload<T: DeserializeOwned>(
    hash: Hash,
    kind: &'static str,
    node: &Node,
) -> Result<T, ThreadError> {
    serde_json::from_value(node.payload.clone()).map_err(|e| ThreadError::InvalidPayload {
        hash,
        kind,
        message: e.to_string(),
    })
}

fn wrong_type<S: Store>(
    cas: &Cas<S>,
    hash: Hash,
    expected: &'static str,
    node: &Node,
) -> ThreadError {
    let found = cas
        .schema(node.type_hash)
        .ok()
        .and_then(|s| uwf_cas::schema::title_of(&s).map(str::to_string))
        .map_or_else(
            || format!("node of untitled type {}", node.type_hash),
            |t| format!("{t} (type {})", node.type_hash),
        );
    ThreadError::WrongType {
        hash,
        expected,
        found,
    }
}

#[cfg(test)]
#[path = "thread_tests.rs"]
mod tests;
