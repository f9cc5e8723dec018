//! Copying a whole store into another (`uwf store copy`): a filesystem
//! store into PostgreSQL and back, or between two of either.
//!
//! The copy is **resumable**: what the destination already holds is
//! skipped, so running it again after an interruption (or after the source
//! moved on) finishes the job. It is **verified**: every node is read back
//! from the destination (which checks its hash) before the thread state
//! that refers to it is written, and threads are written only once every
//! node of the source is there. It never **overwrites**: a destination
//! thread whose head is not an ancestor of the source's, a registry entry
//! or a configuration that differs, is reported as a conflict and left as
//! it is.
//!
//! Copy a store nobody writes to (stop the workers first); a copy of a
//! live store is consistent as of the moment its thread state was read,
//! and a later run brings the rest.

use std::collections::BTreeSet;

use serde::Serialize;
use uwf_cas::Hash;
use uwf_protocol::ThreadId;
use uwf_state::RunState;

use crate::{Engine, EngineError};

/// Nodes handled per batch (one round trip each way for a database).
const BATCH: usize = 256;

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyReport {
    /// Nodes in the source.
    pub nodes: u64,
    /// Nodes written to the destination (the others were there already).
    pub nodes_copied: u64,
    /// Active threads added to the destination.
    pub threads_added: u64,
    /// Active threads whose destination head moved forward to the source's.
    pub threads_advanced: u64,
    /// Active threads already at the source's head.
    pub threads_same: u64,
    /// History entries added.
    pub history_added: u64,
    /// Registry entries added.
    pub registry_added: u64,
    /// Whether the configuration was copied.
    pub config_copied: bool,
    /// Waits recorded.
    pub waiting_copied: u64,
    /// Failed-attempt records linked.
    pub attempts_copied: u64,
    /// Queued runs of `uwf worker` queued in the destination too.
    pub runs_queued: u64,
    /// What was not copied because the destination differs; empty when the
    /// destination now holds everything the source held.
    pub conflicts: Vec<String>,
}

/// Copies everything `from` holds into `to` (see the module docs);
/// `progress` gets a line now and then.
pub fn copy_store(
    from: &Engine,
    to: &Engine,
    progress: &mut dyn FnMut(&str),
) -> Result<CopyReport, EngineError> {
    let mut report = CopyReport::default();
    let (src, dst) = (from.state(), to.state());

    // The thread state first: the nodes it refers to are all stored before
    // it was read, so copying the nodes afterwards covers them.
    let threads = src.threads()?;
    let history = src.history()?;
    let registry = src.registry()?;
    let config = src.config_text()?;
    let waiting = src.waiting()?;
    let attempts = src.attempts()?;
    let runs = match from.run_queue() {
        Some(q) => q.runs()?,
        None => Vec::new(),
    };

    // Read before the nodes are copied: a collection in the destination
    // meanwhile makes each root below check its nodes (crate::keep).
    let epoch = Some(dst.gc_epoch()?);
    copy_nodes(from, to, &mut report, progress)?;

    for (name, hash) in &registry {
        match dst.registry()?.get(name) {
            None => {
                crate::keep::guarded(to.cas(), epoch, *hash, &[], |guard| {
                    dst.register_workflow(name, *hash, guard)
                })?;
                report.registry_added += 1;
            }
            Some(h) if h == hash => {}
            Some(h) => report.conflicts.push(format!(
                "workflow {name:?} is {h} in the destination, {hash} in the source: kept {h}"
            )),
        }
    }
    match (config, dst.config_text()?) {
        (Some(text), None) => {
            dst.set_config_text(Some(&text))?;
            report.config_copied = true;
        }
        (Some(a), Some(b)) if a != b => report
            .conflicts
            .push("the destination has another configuration: kept it".to_string()),
        _ => {}
    }

    let archived: BTreeSet<ThreadId> = dst.history()?.iter().map(|e| e.thread).collect();
    for (&thread, &head) in &threads {
        match dst.thread_head(thread)? {
            Some(h) if h == head => report.threads_same += 1,
            Some(h) if is_ancestor(to, h, head)? => {
                crate::keep::guarded(to.cas(), epoch, head, &[h], |guard| {
                    dst.swap_head(thread, h, head, guard)
                })?;
                report.threads_advanced += 1;
            }
            Some(h) => report.conflicts.push(format!(
                "thread {thread} is at {h} in the destination, which is not an ancestor of the source's {head}: kept {h}"
            )),
            None if archived.contains(&thread) => report.conflicts.push(format!(
                "thread {thread} is archived in the destination but active in the source: left archived"
            )),
            None => {
                crate::keep::guarded(to.cas(), epoch, head, &[], |guard| {
                    dst.insert_thread(thread, head, guard)
                })?;
                report.threads_added += 1;
            }
        }
    }
    // A thread the destination runs is not archived behind its back.
    let active = dst.threads()?;
    let mut history = history;
    let mut refused = BTreeSet::new();
    history.retain(|e| {
        let keep = !active.contains_key(&e.thread);
        if !keep {
            refused.insert(e.thread);
        }
        keep
    });
    for thread in refused {
        report.conflicts.push(format!(
            "thread {thread} is archived in the source but active in the destination: left active"
        ));
    }
    report.history_added = u64::try_from(dst.import_history(&history)?).unwrap_or(u64::MAX);

    for (thread, record) in waiting {
        if dst.waiting_of(thread)?.as_ref() == Some(&record) {
            continue;
        }
        // Only at the head it was recorded at: a conflicting thread is not.
        if dst.thread_head(thread)? == Some(record.head) && dst.mark_waiting(thread, record)? {
            report.waiting_copied += 1;
        }
    }
    for (thread, newest) in attempts {
        if !threads.contains_key(&thread) || dst.attempt_head(thread)? == Some(newest) {
            continue;
        }
        // The records themselves are nodes, copied above; this makes the
        // newest the thread's (it links the older ones).
        dst.record_attempt(thread, &mut |_| Ok(newest))?;
        report.attempts_copied += 1;
    }
    if let Some(queue) = to.run_queue() {
        for run in runs {
            if run.state != RunState::Queued || queue.run_of(run.thread)?.is_some() {
                continue;
            }
            match queue.enqueue(run.thread, &run.workflow, run.request) {
                Ok(_) => report.runs_queued += 1,
                Err(e) => report.conflicts.push(format!(
                    "the run of thread {} was not queued: {e}",
                    run.thread
                )),
            }
        }
    } else if runs.iter().any(|r| r.state == RunState::Queued) {
        report
            .conflicts
            .push("the destination has no run queue: queued runs were not copied".to_string());
    }
    Ok(report)
}

/// Copies every node `from` has and `to` lacks, reading each back from
/// `to` (which checks its hash).
fn copy_nodes(
    from: &Engine,
    to: &Engine,
    report: &mut CopyReport,
    progress: &mut dyn FnMut(&str),
) -> Result<(), EngineError> {
    let (src, dst) = (from.cas().store(), to.cas().store());
    let mut batch = Vec::with_capacity(BATCH);
    let flush = |batch: &mut Vec<Hash>, report: &mut CopyReport| -> Result<(), EngineError> {
        let present = dst.get_many(batch)?;
        let missing: Vec<Hash> = batch
            .iter()
            .zip(&present)
            .filter(|(_, p)| p.is_none())
            .map(|(h, _)| *h)
            .collect();
        if !missing.is_empty() {
            for (hash, node) in missing.iter().zip(src.get_many(&missing)?) {
                // Removed from the source since it was listed (gc): nothing
                // refers to it any more.
                let Some(node) = node else { continue };
                dst.insert(*hash, &node)?;
            }
            for (hash, back) in missing.iter().zip(dst.get_many(&missing)?) {
                if back.is_none() && src.has(*hash)? {
                    return Err(EngineError::CorruptState {
                        what: format!("node {hash} in the destination").into(),
                        reason: "it was written but cannot be read back".into(),
                    });
                }
            }
            report.nodes_copied += u64::try_from(missing.len()).unwrap_or(u64::MAX);
        }
        report.nodes += u64::try_from(batch.len()).unwrap_or(u64::MAX);
        batch.clear();
        Ok(())
    };
    for hash in src.hashes() {
        batch.push(hash?);
        if batch.len() == BATCH {
            flush(&mut batch, report)?;
            if report.nodes.is_multiple_of(BATCH as u64 * 40) {
                progress(&format!(
                    "{} nodes read, {} copied",
                    report.nodes, report.nodes_copied
                ));
            }
        }
    }
    flush(&mut batch, report)?;
    progress(&format!(
        "{} nodes read, {} copied",
        report.nodes, report.nodes_copied
    ));
    Ok(())
}

/// Whether `old` is `new` or a node of the chain that ends at `new` (read
/// from `engine`'s store).
fn is_ancestor(engine: &Engine, old: Hash, new: Hash) -> Result<bool, EngineError> {
    let view = uwf_moderator::thread::load(engine.cas(), new)?;
    Ok(view.start_hash == old || view.steps.iter().any(|s| s.hash == old))
}
