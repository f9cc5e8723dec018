//! Replaying a recorded thread under another workflow: at every step, what
//! the moderator of the other workflow would have decided from the outputs
//! that were recorded, and where that first differs from what happened.
//!
//! Nothing here runs an agent or writes anything. Each decision is the one
//! a real step makes ([`ThreadView::decide`](crate::thread::ThreadView::decide)
//! evaluates the same function over the same loaded steps), asked at every
//! earlier head of the thread instead of only the newest. See
//! docs/workflow.md, "Replaying recorded threads".

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;
use uwf_protocol::{Hash, START, WorkflowPayload};

use crate::SUSPEND;
use crate::eval::{
    Decision, ModeratorError, Prepared, TransitionReport, evaluate_prepared, explain_here,
};
use crate::thread::{ThreadView, context_of};

/// How one recorded thread fares under the other workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Every step, and the decision at the head, is what the other
    /// workflow decides too; every recorded output satisfies its schema.
    Same,
    /// At some step the other workflow decides another role (or cannot
    /// decide): see [`ThreadReplay::divergence`].
    Diverged,
    /// Up to some step the route is the same, but that step's recorded
    /// output does not satisfy the role's (changed) output schema: under
    /// the other workflow the step would have been refused. See
    /// [`ThreadReplay::invalid`].
    Invalid,
}

/// One side of a [`Divergence`]: what a workflow decides at that head.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Side {
    /// The role decided (`$END`, `$SUSPEND` included); `None` when the
    /// moderator fails there ([`error`](Self::error)).
    pub role: Option<String>,
    /// The transition taken, counted from 1 in `graph[from]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transition: Option<usize>,
    /// The condition of the transition taken; `None` for an unconditional one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Why the moderator cannot decide.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every transition of `from` with its condition's value
    /// ([`explain`](crate::explain)): what the condition values are on this side.
    pub transitions: Vec<TransitionReport>,
}

/// The first decision of a thread that the other workflow makes differently.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// The number of the step being decided, counted from 1: step `n + 1`
    /// of a thread of `n` steps is the decision at its head (`$END` for a
    /// finished thread, the next role for an active one).
    pub step: usize,
    /// The head the decision is made at: the previous step's StepNode, or
    /// the StartNode for step 1.
    pub at: Hash,
    /// The role whose transitions decide (`$START` for step 1).
    pub from: String,
    /// What the thread's own workflow decided (the recorded step's role).
    pub old: Side,
    /// What the other workflow decides.
    pub new: Side,
}

/// A recorded output that the other workflow's schema refuses.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvalidOutput {
    /// The step's number, counted from 1.
    pub step: usize,
    /// The StepNode.
    pub hash: Hash,
    /// Its role.
    pub role: String,
    /// The role's output schema in the other workflow.
    pub schema: Hash,
    /// What the validator says.
    pub reason: String,
}

/// A step whose edge prompt would read differently under the other workflow.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptChange {
    /// The step's number, counted from 1.
    pub step: usize,
    /// Its role.
    pub role: String,
    /// The prompt its agent was given (`None`: the edge had none).
    pub old: Option<String>,
    /// The prompt the other workflow would give (`None`: none).
    pub new: Option<String>,
}

/// What replaying one thread found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadReplay {
    /// The verdict.
    pub outcome: Outcome,
    /// How many steps the thread has.
    pub steps: usize,
    /// Where the route first differs ([`Outcome::Diverged`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub divergence: Option<Divergence>,
    /// The first output refused by a changed schema ([`Outcome::Invalid`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<InvalidOutput>,
    /// Steps, before any divergence, whose edge prompt would read
    /// differently (the last one may be the step that would run next at the
    /// head of an active thread).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<PromptChange>,
}

/// Checks a recorded output against an output schema of the other
/// workflow: `Err` says why it is refused. (The schemas live in a CAS the
/// caller holds; the moderator only sees their hashes.)
pub type OutputCheck<'a> = dyn Fn(Hash, &Value) -> Result<(), String> + Sync + 'a;

/// Replays `view` (a thread loaded with [`thread::load`](crate::thread::load))
/// under `new`: for each step, the decision `new` makes from the steps
/// before it, compared with the role that was recorded; then the decision
/// at the head, compared with the one the thread's own workflow makes.
///
/// A step that resumed a thread suspended at `$SUSPEND` is compared with
/// the decision from `$START` (what `uwf thread resume` asks), on both
/// sides. Up to the first difference, each recorded output whose role has
/// another output schema in `new` is checked with `check`, and steps whose
/// edge prompt renders differently are listed. The old workflow's
/// decisions are evaluated only where `new` changed the transitions
/// involved: elsewhere they are the same function of the same steps.
pub fn replay(view: &ThreadView, new: &WorkflowPayload, check: &OutputCheck<'_>) -> ThreadReplay {
    crate::jsonata::on_big_stack(|| replay_here(view, new, check))
}

fn replay_here(view: &ThreadView, new: &WorkflowPayload, check: &OutputCheck<'_>) -> ThreadReplay {
    let old = &view.workflow;
    let changed = changed_sources(old, new);
    // Each step converted for JSONata once, not once per decision after
    // it. If the whole thread cannot be converted (an output nested too
    // deep), each decision converts its own steps, as a step would, so
    // that the failure shows where a step meets it.
    let prepared = Prepared::new(&view.start, &view.steps).ok();
    let n = view.steps.len();
    let mut result = ThreadReplay {
        outcome: Outcome::Same,
        steps: n,
        divergence: None,
        invalid: None,
        prompts: Vec::new(),
    };
    for k in 0..=n {
        let from = if k == 0 {
            START
        } else {
            view.steps[k - 1].payload.record.role.as_str()
        };
        let recorded = view.steps.get(k).map(|s| s.payload.record.role.as_str());
        let new_decision = decide(new, view, k, recorded.is_some(), prepared.as_ref());
        // Where the transitions involved are unchanged, the old decision is
        // the new one (the same expressions over the same steps).
        let involved_changed = changed.contains(from)
            || new_decision
                .as_ref()
                .is_ok_and(|(_, resumed)| *resumed && changed.contains(START));
        let old_decision = if involved_changed || recorded.is_none() {
            Some(decide(old, view, k, recorded.is_some(), prepared.as_ref()))
        } else {
            None
        };
        let old_role: Option<String> = match (recorded, &old_decision) {
            (Some(r), _) => Some(r.to_string()),
            (None, Some(Ok((d, _)))) => Some(d.next.clone()),
            (None, _) => None,
        };
        let new_role = new_decision.as_ref().ok().map(|(d, _)| d.next.clone());
        let same = match (&old_role, &new_role) {
            (Some(o), Some(nw)) => o == nw,
            // Neither workflow can decide at the head: nothing differs.
            (None, None) => true,
            _ => false,
        };
        if !same {
            result.outcome = Outcome::Diverged;
            result.divergence = Some(Divergence {
                step: k + 1,
                at: if k == 0 {
                    view.start_hash
                } else {
                    view.steps[k - 1].hash
                },
                from: from.to_string(),
                old: side(old, view, k, old_role, old_decision),
                new: side(new, view, k, new_role, Some(new_decision)),
            });
            return result;
        }
        if let (Some(Ok((o, _))), Ok((nw, _))) = (&old_decision, &new_decision)
            && o.prompt != nw.prompt
            && !nw.is_end()
        {
            // At the head of an active thread: the step that would run next.
            result.prompts.push(PromptChange {
                step: k + 1,
                role: nw.next.clone(),
                old: o.prompt.clone(),
                new: nw.prompt.clone(),
            });
        }
        let Some(role) = recorded else { break };
        let step = &view.steps[k];
        let old_schema = old.roles.get(role).map(|r| r.output_schema);
        let Some(new_schema) = new.roles.get(role).map(|r| r.output_schema) else {
            continue;
        };
        if old_schema != Some(new_schema)
            && let Err(reason) = check(new_schema, &step.output)
        {
            result.outcome = Outcome::Invalid;
            result.invalid = Some(InvalidOutput {
                step: k + 1,
                hash: step.hash,
                role: role.to_string(),
                schema: new_schema,
                reason,
            });
            return result;
        }
    }
    result
}

/// The decision of `workflow` after the first `k` steps of `view`, and
/// whether it is a resume: when it is `$SUSPEND` and a step followed
/// (`resumed`), that step was run by `uwf thread resume`, which decides
/// from `$START` (the engine's `suspend::decide`).
fn decide(
    workflow: &WorkflowPayload,
    view: &ThreadView,
    k: usize,
    followed: bool,
    prepared: Option<&Prepared>,
) -> Result<(Decision, bool), ModeratorError> {
    let steps = &view.steps[..k];
    let d = evaluate_prepared(workflow, &view.start, steps, false, prepared)?;
    if followed && d.next == SUSPEND {
        let resumed = evaluate_prepared(workflow, &view.start, steps, true, prepared)?;
        return Ok((resumed, true));
    }
    Ok((d, false))
}

/// One side of a divergence, with every condition's value.
fn side(
    workflow: &WorkflowPayload,
    view: &ThreadView,
    k: usize,
    role: Option<String>,
    decision: Option<Result<(Decision, bool), ModeratorError>>,
) -> Side {
    let ctx = context_of(&view.start, &view.steps[..k]);
    let mut s = Side {
        role,
        transition: None,
        condition: None,
        error: None,
        transitions: explain_here(workflow, &ctx).transitions,
    };
    match decision {
        Some(Ok((d, _))) => {
            s.transition = Some(d.index + 1);
            s.condition = d.condition;
        }
        Some(Err(e)) => s.error = Some(e.to_string()),
        // Recorded, not re-decided: the taken transition is the explained one.
        None => {
            if let Some(t) = s.transitions.iter().find(|t| t.taken) {
                s.transition = Some(t.index + 1);
                s.condition = t.condition.clone();
            }
        }
    }
    s
}

/// The roles (and `$START`) whose decisions may differ between `old` and
/// `new`: their transitions differ, or a condition they use has another
/// expression.
fn changed_sources(old: &WorkflowPayload, new: &WorkflowPayload) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let sources: BTreeSet<&String> = old.graph.keys().chain(new.graph.keys()).collect();
    for from in sources {
        let (a, b) = (old.graph.get(from), new.graph.get(from));
        let differs = a != b
            || a.into_iter().flatten().any(|t| {
                t.condition.as_ref().is_some_and(|c| {
                    old.conditions.get(c).map(|d| d.expression())
                        != new.conditions.get(c).map(|d| d.expression())
                })
            });
        if differs {
            out.insert(from.clone());
        }
    }
    out
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
