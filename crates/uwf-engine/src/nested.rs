//! Workflows run as agents (docs/nested-workflows.md): the links between a parent thread
//! and the child threads that did some of its roles' work.
//!
//! The links are ordinary `cas_ref` fields — a child's StartNode has
//! `parentState` (the parent's head at the call), the parent's StepNode has
//! `childThread` (the child's terminal StepNode) — so the store's `refs`,
//! `walk` and `gc` follow them without any code here. This module only
//! reads them for humans: the call stack, `thread show`'s links, the child
//! summaries of `thread read`, and the check uwf makes before it applies a
//! step that claims a child thread.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use uwf_cas::Hash;
use uwf_moderator::thread::{self, ThreadView};
use uwf_protocol::{ChildThreadLink, StackFrame, ThreadId};

use crate::Engine as Ctx;
use crate::error::EngineError;

/// Thread ids by the nodes they start from and stand at, read from
/// the active threads and `history.jsonl`, to name the threads of a call stack.
///
/// Several threads can share a StartNode (forks): a head that is the node
/// asked about wins, then an active thread, then the newest archived one.
pub struct ThreadIndex {
    /// Start → ids in preference order (active by id, then archived newest first).
    by_start: HashMap<Hash, Vec<ThreadId>>,
    /// Head → id.
    by_head: HashMap<Hash, ThreadId>,
}

impl ThreadIndex {
    /// Reads both state files. Entries whose head cannot be read are left
    /// out (with a debug log): the index only names threads, it never fails
    /// a command because of an unrelated broken thread.
    pub fn load(ctx: &Ctx) -> Result<Self, EngineError> {
        let mut index = Self {
            by_start: HashMap::new(),
            by_head: HashMap::new(),
        };
        let active = ctx.state.threads()?;
        let mut seen: BTreeSet<ThreadId> = BTreeSet::new();
        for (&id, &head) in &active {
            seen.insert(id);
            index.add(ctx, id, head);
        }
        for e in ctx.state.history()?.into_iter().rev() {
            if seen.insert(e.thread) {
                index.add(ctx, e.thread, e.head);
            }
        }
        Ok(index)
    }

    fn add(&mut self, ctx: &Ctx, id: ThreadId, head: Hash) {
        match start_of(ctx, head) {
            Ok(start) => {
                self.by_head.entry(head).or_insert(id);
                self.by_start.entry(start).or_default().push(id);
            }
            Err(e) => tracing::debug!(thread = %id, error = %e, "thread index: unreadable head"),
        }
    }

    /// The thread standing at `node` if there is one, else the preferred
    /// thread started from `start`.
    pub fn thread_of(&self, node: Hash, start: Hash) -> Option<ThreadId> {
        self.by_head
            .get(&node)
            .filter(|id| {
                self.by_start
                    .get(&start)
                    .is_some_and(|ids| ids.contains(id))
            })
            .copied()
            .or_else(|| self.by_start.get(&start).and_then(|v| v.first().copied()))
    }
}

/// The StartNode of the thread `node` (a StartNode or StepNode) belongs to.
pub fn start_of(ctx: &Ctx, node: Hash) -> Result<Hash, EngineError> {
    let n = ctx.cas.get(node)?;
    if n.type_hash == ctx.cas.types().step_node {
        let start = n
            .payload
            .get("start")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return start
            .parse::<Hash>()
            .map_err(|e| EngineError::Cas(e.into()));
    }
    Ok(node)
}

/// The `parentState` of the thread `head` belongs to (`None` for a
/// top-level thread).
pub fn parent_of(ctx: &Ctx, head: Hash) -> Result<Option<Hash>, EngineError> {
    let start = ctx.cas.get(start_of(ctx, head)?)?;
    match start.payload.get("parentState").and_then(Value::as_str) {
        Some(p) => {
            Ok(Some(p.parse().map_err(|e| {
                EngineError::Cas(uwf_cas::CasError::from(e))
            })?))
        }
        None => Ok(None),
    }
}

/// `uwf thread stack`: the frames from `node` up to the top-level thread,
/// innermost first.
pub fn stack(ctx: &Ctx, node: Hash) -> Result<Vec<StackFrame>, EngineError> {
    let frames = thread::call_stack(&ctx.cas, node)?;
    let index = ThreadIndex::load(ctx)?;
    Ok(frames
        .into_iter()
        .map(|f| StackFrame {
            node: f.node,
            start: f.view.start_hash,
            workflow: f.view.workflow_hash,
            workflow_name: f.view.workflow.name.clone(),
            role: f.role,
            depth: f.depth,
            thread: index.thread_of(f.node, f.view.start_hash),
        })
        .collect())
}

/// A step of a parent thread that a child thread did, with the child
/// thread loaded when it can be.
pub struct ChildLink {
    /// What `thread show` prints of it.
    pub link: ChildThreadLink,
    /// The child thread, loaded from its terminal StepNode (`None` when it
    /// cannot be read; a warning is logged).
    pub view: Option<ThreadView>,
}

/// The steps of `view` whose role a child thread did, oldest first.
pub fn child_links(ctx: &Ctx, view: &ThreadView, index: &ThreadIndex) -> Vec<ChildLink> {
    let mut links = Vec::new();
    for s in &view.steps {
        let Some(child) = s.payload.child_thread else {
            continue;
        };
        let mut link = ChildThreadLink {
            step: s.hash,
            role: s.payload.record.role.clone(),
            child_thread: child,
            start: None,
            workflow_name: String::new(),
            steps: 0,
            thread: None,
        };
        let view = match thread::load(&ctx.cas, child) {
            Ok(cv) => {
                link.start = Some(cv.start_hash);
                link.workflow_name = cv.workflow.name.clone();
                link.steps = cv.steps.len();
                link.thread = index.thread_of(child, cv.start_hash);
                Some(cv)
            }
            Err(e) => {
                tracing::debug!(step = %s.hash, error = %e, "cannot load the child thread");
                None
            }
        };
        links.push(ChildLink { link, view });
    }
    links
}

/// Whether any step of `view` was done by a child thread.
pub fn has_children(view: &ThreadView) -> bool {
    view.steps.iter().any(|s| s.payload.child_thread.is_some())
}
