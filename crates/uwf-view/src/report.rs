//! Everything the page shows of a thread, gathered from the CAS and the
//! state files: the thread, its path, each step's detail, child threads
//! (nested), what it waits for and its failed attempts.

use uwf_cas::{Cas, Hash, Store};
use uwf_moderator::thread::{self, ThreadView};
use uwf_protocol::{AttemptRecord, ThreadId, WaitingRecord};

use crate::ViewError;
use crate::detail::{self, DetailView};
use crate::trace::{Trace, trace};

/// How deep child threads are followed (a guard against cycles).
pub const MAX_DEPTH: usize = 8;

/// What the page needs from the state files (the heads,
/// `history.jsonl`, `waiting.yaml`, `attempts.yaml`); the CLI implements it.
pub trait ThreadState {
    /// The id of the thread standing at `node` or started from `start`.
    fn thread_id(&self, node: Hash, start: Hash) -> Option<ThreadId>;
    /// What thread `id` waits for now, if anything.
    fn waiting(&self, id: ThreadId) -> Option<WaitingRecord>;
    /// The failed attempts of thread `id`, newest first: (record hash, record).
    fn attempts(&self, id: ThreadId) -> Vec<(Hash, AttemptRecord)>;
    /// The head of thread `id` (active or archived).
    fn head(&self, id: ThreadId) -> Option<Hash>;
    /// Whether thread `id` is archived (done or killed).
    fn archived(&self, id: ThreadId) -> bool;
    /// The agent working on thread `id` now, if one is known to run.
    fn running(&self, id: ThreadId) -> Option<RunningNow> {
        let _ = id;
        None
    }
}

/// An agent at work on a thread when the report was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningNow {
    /// The role it works on.
    pub role: String,
    /// The agent (alias or command line).
    pub agent: String,
    /// The machine.
    pub host: String,
    /// When it started (ms since the Unix epoch).
    pub since: u64,
    /// The head the step started from.
    pub head: Hash,
}

/// A thread, ready to draw.
#[derive(Debug, Clone)]
pub struct ThreadReport {
    /// Its id, when the state files name it.
    pub id: Option<ThreadId>,
    /// The thread as loaded.
    pub view: ThreadView,
    /// Its path.
    pub trace: Trace,
    /// One entry per step of `view.steps`.
    pub steps: Vec<StepReport>,
    /// Whether the thread is archived (done or killed).
    pub archived: bool,
    /// What it waits for, if anything (valid only at its head).
    pub waiting: Option<WaitingRecord>,
    /// The agent at work on its next step, if one runs from its head.
    pub running: Option<RunningNow>,
    /// The waiting child thread, when the wait goes through one.
    pub waiting_child: Option<Box<ThreadReport>>,
    /// Failed attempts, newest first.
    pub attempts: Vec<(Hash, AttemptRecord)>,
    /// How deep in the call stack this report sits (0 at the top).
    pub depth: usize,
}

/// One step, ready to draw.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// The detail.
    pub detail: DetailView,
    /// The child thread that did the step's work, if any.
    pub child: Option<Box<ThreadReport>>,
    /// Why the child thread cannot be shown, if it cannot.
    pub child_error: Option<String>,
}

/// Gathers the report of the thread whose head is `head`.
pub fn collect<S: Store>(
    cas: &Cas<S>,
    state: &dyn ThreadState,
    id: Option<ThreadId>,
    head: Hash,
) -> Result<ThreadReport, ViewError> {
    let view = thread::load(cas, head)?;
    Ok(build(cas, state, id, view, 0))
}

fn build<S: Store>(
    cas: &Cas<S>,
    state: &dyn ThreadState,
    id: Option<ThreadId>,
    view: ThreadView,
    depth: usize,
) -> ThreadReport {
    let id = id.or_else(|| state.thread_id(view.head, view.start_hash));
    let trace = trace(&view);
    let steps = view
        .steps
        .iter()
        .map(|s| {
            let mut step = StepReport {
                detail: detail::read(cas, s.payload.record.detail),
                child: None,
                child_error: None,
            };
            if let Some(c) = s.payload.child_thread {
                match child(cas, state, c, depth) {
                    Ok(r) => step.child = Some(Box::new(r)),
                    Err(e) => step.child_error = Some(e),
                }
            }
            step
        })
        .collect();
    let (archived, waiting, running, attempts) = match id {
        Some(id) => {
            // A wait counts only while the head is the one it was recorded
            // at, and so does a running agent.
            let waiting = state.waiting(id).filter(|w| w.head == view.head);
            let running = state.running(id).filter(|r| r.head == view.head);
            (state.archived(id), waiting, running, state.attempts(id))
        }
        None => (false, None, None, Vec::new()),
    };
    let waiting_child = waiting
        .as_ref()
        .and_then(|w| w.child)
        .filter(|_| depth < MAX_DEPTH)
        .and_then(|c| {
            let head = state.head(c)?;
            let v = thread::load(cas, head).ok()?;
            Some(Box::new(build(cas, state, Some(c), v, depth + 1)))
        });
    ThreadReport {
        id,
        view,
        trace,
        steps,
        archived,
        waiting,
        running,
        waiting_child,
        attempts,
        depth,
    }
}

fn child<S: Store>(
    cas: &Cas<S>,
    state: &dyn ThreadState,
    terminal: Hash,
    depth: usize,
) -> Result<ThreadReport, String> {
    if depth + 1 > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} threads"));
    }
    let v = thread::load(cas, terminal).map_err(|e| e.to_string())?;
    Ok(build(cas, state, None, v, depth + 1))
}

/// State files that know nothing: no ids, waits or attempts (for tests and
/// for viewing a chain by its hash alone).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoState;

impl ThreadState for NoState {
    fn thread_id(&self, _: Hash, _: Hash) -> Option<ThreadId> {
        None
    }
    fn waiting(&self, _: ThreadId) -> Option<WaitingRecord> {
        None
    }
    fn attempts(&self, _: ThreadId) -> Vec<(Hash, AttemptRecord)> {
        Vec::new()
    }
    fn head(&self, _: ThreadId) -> Option<Hash> {
        None
    }
    fn archived(&self, _: ThreadId) -> bool {
        false
    }
}
