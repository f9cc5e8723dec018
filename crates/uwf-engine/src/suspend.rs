//! `$SUSPEND`: upstream uwf's way for a workflow to make a thread wait,
//! built on the waiting state of people in the loop ([`crate::human`]).
//!
//! A thread whose moderator decision is `$SUSPEND` (an edge to it, or a
//! role of an upstream-syntax workflow that finished with `$status:
//! "$SUSPEND"`) runs nothing: like a role bound to a person, the step
//! records a wait in the thread state (role `$SUSPEND`, agent
//! [`SUSPENDED_AGENT`]) that counts while the head stays where it is, and
//! returns it. A step with [`StepOptions::resume`](crate::StepOptions::resume)
//! (`uwf thread resume`) then runs the role chosen from `$START` against the
//! whole thread (a `$START: {new, resume}` map takes its `resume` route);
//! the chain records nothing about the wait.

use uwf_moderator::thread::ThreadView;
use uwf_moderator::{Decision, SUSPEND};
use uwf_protocol::{ThreadId, WaitingRecord};
use uwf_state::state::now_ms;

use crate::Engine;
use crate::error::EngineError;
use crate::step::conflict_or;

/// The `agent` of a suspended thread's wait record.
pub const SUSPENDED_AGENT: &str = "suspended";

/// The moderator's decision for a step: the ordinary one, or, to resume,
/// the decision from `$START` — refused when the thread is not suspended.
pub(crate) fn decide(
    id: ThreadId,
    view: &ThreadView,
    resume: bool,
) -> Result<Decision, EngineError> {
    let decision = view.decide()?;
    if !resume {
        return Ok(decision);
    }
    if decision.next != SUSPEND {
        return Err(EngineError::NotSuspended {
            thread: id,
            next: decision.next,
        });
    }
    Ok(view.decide_resume()?)
}

/// Whether a decision suspends the thread.
pub(crate) fn suspends(decision: &Decision) -> bool {
    decision.next == SUSPEND
}

/// Records that thread `id` is suspended at its head. The prompt shown is
/// the edge prompt, else the `reason` of the last output, else the role
/// that suspended it.
pub(crate) fn wait(
    ctx: &Engine,
    id: ThreadId,
    view: &ThreadView,
    decision: &Decision,
) -> Result<WaitingRecord, EngineError> {
    let reason = view
        .last_step()
        .and_then(|s| s.output.get("reason"))
        .and_then(|r| r.as_str())
        .map(str::to_string);
    let prompt = decision
        .prompt
        .clone()
        .filter(|p| !p.trim().is_empty())
        .or(reason)
        .unwrap_or_else(|| format!("`{}` suspended the thread", decision.from));
    let record = WaitingRecord {
        head: view.head,
        role: SUSPEND.to_string(),
        prompt,
        agent: SUSPENDED_AGENT.to_string(),
        since: now_ms(),
        child: None,
    };
    ctx.state
        .mark_waiting(id, record.clone())
        .map_err(|e| conflict_or(e, id))?;
    Ok(ctx.state.waiting_of(id)?.unwrap_or(record))
}
