//! `uwf workflow replay`: the recorded threads of a store, each re-decided
//! under another workflow from the outputs that were recorded
//! ([`uwf_moderator::replay`]), and a summary of where they would have gone
//! another way. Nothing is written to the thread state and no agent runs;
//! threads are read exactly as a step reads them ([`thread::load`], which
//! may refresh the derived chain cache as every reader does).
//!
//! See docs/workflow.md, "Replaying recorded threads".

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use uwf_cas::{Cas, Hash};
use uwf_moderator::replay::{Outcome, OutputCheck, ThreadReplay, replay as replay_thread};
use uwf_moderator::thread::{self, ThreadView};
use uwf_protocol::{ThreadId, WorkflowPayload};

use crate::Engine;
use crate::error::EngineError;
use crate::step::{Status, status};

/// Which recorded threads to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These threads (active or archived); an unknown id is an error.
    Threads(Vec<ThreadId>),
    /// Every thread whose workflow has this name (any version of it).
    Workflow(String),
    /// Every thread of the store.
    All,
}

/// What to replay and against what.
pub struct Target<'a> {
    /// The workflow to replay under.
    pub workflow: &'a WorkflowPayload,
    /// Checks a recorded output against one of its output schemas.
    pub check: &'a OutputCheck<'a>,
}

/// One replayed thread.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadResult {
    /// The thread.
    pub thread: ThreadId,
    /// The workflow it ran (its Workflow node).
    pub workflow: Hash,
    /// `active`, or why it was archived (`done`, `killed`, `pruned`, …).
    pub state: String,
    /// Its head.
    pub head: Hash,
    /// What replaying it found.
    #[serde(flatten)]
    pub replay: ThreadReplay,
}

/// A selected thread that could not be read (missing or damaged nodes).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unreadable {
    /// The thread.
    pub thread: ThreadId,
    /// Its head, as the thread state says.
    pub head: Hash,
    /// Why it cannot be loaded.
    pub error: String,
}

/// How many threads diverge at the same place in the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EdgeCount {
    /// The role whose transitions decide (`$START` for the first step).
    pub from: String,
    /// What the threads did (`None`: their own workflow could not decide).
    pub old: Option<String>,
    /// What the workflow replayed decides (`None`: it cannot decide).
    pub new: Option<String>,
    /// How many threads diverge here.
    pub threads: usize,
    /// The first few of them, in id order.
    pub examples: Vec<ThreadId>,
}

/// How many examples an [`EdgeCount`] keeps.
pub const EXAMPLES: usize = 5;

/// The counts of a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Threads replayed (readable ones).
    pub threads: usize,
    /// Routed the same all the way.
    pub same: usize,
    /// Diverged somewhere.
    pub diverged: usize,
    /// A recorded output is refused by a changed schema.
    pub invalid: usize,
    /// Selected but unreadable.
    pub unreadable: usize,
    /// Threads with at least one edge prompt that would read differently.
    pub prompt_changed: usize,
    /// Where the diverging threads diverge, most threads first.
    pub edges: Vec<EdgeCount>,
}

/// Everything a replay found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replayed {
    /// The counts.
    pub summary: Summary,
    /// Every readable thread, in id order.
    pub threads: Vec<ThreadResult>,
    /// Every unreadable one.
    pub unreadable: Vec<Unreadable>,
}

/// A thread to replay: its id, head and state.
struct Candidate {
    thread: ThreadId,
    head: Hash,
    state: String,
    /// Its workflow, when the thread state records it (archived threads).
    workflow: Option<Hash>,
}

/// Replays the threads `selection` names (started at or after `since_ms`,
/// ms since the Unix epoch, when given) under `target`.
///
/// Threads are read in parallel on the machine's cores; the result does
/// not depend on how many.
pub fn replay(
    ctx: &Engine,
    target: &Target<'_>,
    selection: &Selection,
    since_ms: Option<u64>,
) -> Result<Replayed, EngineError> {
    let mut candidates = candidates(ctx, selection)?;
    if let Some(since) = since_ms {
        candidates.retain(|c| c.thread.as_ulid().timestamp_ms() >= since);
    }
    // Archived threads of another workflow are left out before loading.
    if let Selection::Workflow(name) = selection {
        let mut names: HashMap<Hash, Option<String>> = HashMap::new();
        candidates.retain(|c| {
            c.workflow.is_none_or(|w| {
                names
                    .entry(w)
                    .or_insert_with(|| workflow_name(&ctx.cas, w))
                    .as_deref()
                    .is_none_or(|n| n == name)
            })
        });
    }
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .clamp(1, 8)
        .min(candidates.len().max(1));
    let chunk = candidates.len().div_ceil(workers).max(1);
    let cas = &ctx.cas;
    let done: Vec<Vec<Result<Option<ThreadResult>, Unreadable>>> = std::thread::scope(|s| {
        let handles: Vec<_> = candidates
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|c| one(cas, c, target, selection))
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut threads = Vec::new();
    let mut unreadable = Vec::new();
    for r in done.into_iter().flatten() {
        match r {
            Ok(Some(t)) => threads.push(t),
            Ok(None) => {}
            Err(u) => unreadable.push(u),
        }
    }
    Ok(Replayed {
        summary: summarize(&threads, unreadable.len()),
        threads,
        unreadable,
    })
}

/// Replays one candidate; `Ok(None)` when it runs another workflow than
/// the one selected.
fn one(
    cas: &Cas,
    c: &Candidate,
    target: &Target<'_>,
    selection: &Selection,
) -> Result<Option<ThreadResult>, Unreadable> {
    let view: ThreadView = thread::load(cas, c.head).map_err(|e| {
        tracing::warn!("thread {} is broken: {e}; it is not replayed", c.thread);
        Unreadable {
            thread: c.thread,
            head: c.head,
            error: e.to_string(),
        }
    })?;
    if let Selection::Workflow(name) = selection
        && view.workflow.name != *name
    {
        return Ok(None);
    }
    Ok(Some(ThreadResult {
        thread: c.thread,
        workflow: view.workflow_hash,
        state: c.state.clone(),
        head: c.head,
        replay: replay_thread(&view, target.workflow, target.check),
    }))
}

fn workflow_name(cas: &Cas, workflow: Hash) -> Option<String> {
    let node = cas.try_get(workflow).ok()??;
    node.payload.get("name")?.as_str().map(str::to_string)
}

/// The threads of the selection, in id order (an active thread wins over
/// an archived record of the same id).
fn candidates(ctx: &Engine, selection: &Selection) -> Result<Vec<Candidate>, EngineError> {
    let mut out: BTreeMap<ThreadId, Candidate> = BTreeMap::new();
    match selection {
        Selection::Threads(ids) => {
            for &id in ids {
                let c = match status(ctx, id)? {
                    Status::Active { head } => Candidate {
                        thread: id,
                        head,
                        state: "active".into(),
                        workflow: None,
                    },
                    Status::Archived(e) => Candidate {
                        thread: id,
                        head: e.head,
                        state: e.reason.unwrap_or_else(|| "done".into()),
                        workflow: Some(e.workflow),
                    },
                };
                out.insert(id, c);
            }
        }
        Selection::Workflow(_) | Selection::All => {
            for e in ctx.state.history()? {
                out.insert(
                    e.thread,
                    Candidate {
                        thread: e.thread,
                        head: e.head,
                        state: e.reason.unwrap_or_else(|| "done".into()),
                        workflow: Some(e.workflow),
                    },
                );
            }
            for (id, head) in ctx.state.threads()? {
                out.insert(
                    id,
                    Candidate {
                        thread: id,
                        head,
                        state: "active".into(),
                        workflow: None,
                    },
                );
            }
        }
    }
    Ok(out.into_values().collect())
}

fn summarize(threads: &[ThreadResult], unreadable: usize) -> Summary {
    let count = |o: Outcome| threads.iter().filter(|t| t.replay.outcome == o).count();
    let mut edges: BTreeMap<(String, Option<String>, Option<String>), EdgeCount> = BTreeMap::new();
    for t in threads {
        let Some(d) = &t.replay.divergence else {
            continue;
        };
        let key = (d.from.clone(), d.old.role.clone(), d.new.role.clone());
        let e = edges.entry(key).or_insert_with(|| EdgeCount {
            from: d.from.clone(),
            old: d.old.role.clone(),
            new: d.new.role.clone(),
            threads: 0,
            examples: Vec::new(),
        });
        e.threads += 1;
        if e.examples.len() < EXAMPLES {
            e.examples.push(t.thread);
        }
    }
    let mut edges: Vec<EdgeCount> = edges.into_values().collect();
    // Stable: equal counts stay in (from, old, new) order.
    edges.sort_by_key(|e| std::cmp::Reverse(e.threads));
    Summary {
        threads: threads.len(),
        same: count(Outcome::Same),
        diverged: count(Outcome::Diverged),
        invalid: count(Outcome::Invalid),
        unreadable,
        prompt_changed: threads
            .iter()
            .filter(|t| !t.replay.prompts.is_empty())
            .count(),
        edges,
    }
}
