//! Finding a thread from what a person types: a full id, a unique prefix
//! of one, or `@last` (the newest top-level thread).

use std::collections::BTreeSet;

use uwf_protocol::ThreadId;

use crate::engine::{self, Ctx};
use crate::error::CliError;

/// The name of the newest top-level thread.
pub const LAST: &str = "@last";

/// Every thread id the root knows, active or archived, sorted (ULIDs sort
/// by creation time, so the last is the newest).
pub fn all_ids(ctx: &Ctx) -> Result<BTreeSet<ThreadId>, CliError> {
    let mut ids: BTreeSet<ThreadId> = ctx.state().threads()?.into_keys().collect();
    ids.extend(ctx.state().history()?.into_iter().map(|e| e.thread));
    Ok(ids)
}

/// Resolves a thread argument to a canonical id: `@last`, a full id (which
/// need not exist: the command reports unknown threads as it always did),
/// or a prefix that exactly one known thread id starts with
/// (case-insensitive).
pub fn thread(ctx: &Ctx, arg: &str) -> Result<ThreadId, CliError> {
    if arg == LAST {
        return last(ctx);
    }
    if let Ok(id) = engine::thread_id(arg) {
        return Ok(id);
    }
    let prefix = arg.trim().to_ascii_uppercase();
    if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_alphanumeric()) {
        // Not a prefix of anything: the parser says what is wrong with it.
        return Ok(engine::thread_id(arg)?);
    }
    let matches: Vec<ThreadId> = all_ids(ctx)?
        .into_iter()
        .filter(|id| id.to_string().starts_with(&prefix))
        .collect();
    match matches.as_slice() {
        [] => Err(CliError::UnknownPrefix {
            prefix: arg.to_string(),
        }),
        [one] => Ok(*one),
        _ => Err(CliError::AmbiguousThread {
            prefix: arg.to_string(),
            count: matches.len(),
            matches: matches
                .iter()
                .rev()
                .take(5)
                .map(ToString::to_string)
                .collect(),
        }),
    }
}

/// Whether `arg` names a thread the root knows (`@last`, a full id or a
/// unique prefix); used where an argument may be a thread or a workflow.
pub fn known_thread(ctx: &Ctx, arg: &str) -> Option<ThreadId> {
    let id = thread(ctx, arg).ok()?;
    engine::status(ctx, id).ok().map(|_| id)
}

/// The newest thread that is not a child thread of another.
fn last(ctx: &Ctx) -> Result<ThreadId, CliError> {
    for id in all_ids(ctx)?.into_iter().rev() {
        let Ok(head) = engine::any_head(ctx, id) else {
            continue;
        };
        match crate::engine::nested::parent_of(ctx, head) {
            Ok(None) => return Ok(id),
            Ok(Some(_)) => {}
            Err(e) => tracing::debug!(thread = %id, error = %e, "skipped by @last"),
        }
    }
    Err(CliError::NoThreads)
}
