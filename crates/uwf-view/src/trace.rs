//! A thread's path through its workflow graph: for every step, the
//! transition that led to it, recomputed from the history (the moderator is
//! a pure function of the thread so far).

use std::collections::BTreeMap;

use uwf_moderator::diagram::Overlay;
use uwf_moderator::thread::ThreadView;
use uwf_moderator::{Decision, evaluate};
use uwf_protocol::{END, ModeratorContext, START};

/// Threads longer than this are traced from the graph alone (the first
/// transition to the role that ran), without evaluating every prefix.
pub const MAX_EVALUATED_STEPS: usize = 2_000;

/// One transition of the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The role it leaves (or `$START`).
    pub from: String,
    /// The role it enters (or `$END`).
    pub to: String,
    /// Its index in `graph[from]`, when known.
    pub index: Option<usize>,
    /// The condition that held (`None`: the unconditional fallback, or unknown).
    pub condition: Option<String>,
    /// The edge prompt given to `to`, rendered.
    pub prompt: Option<String>,
    /// How the hop was found: `true` when the moderator, evaluated over
    /// the thread up to this point, chose it; `false` when it was matched
    /// from the graph (the moderator chose otherwise or could not decide).
    pub decided: bool,
}

/// The path of a thread.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    /// The hop into each step, in step order.
    pub hops: Vec<Hop>,
    /// What the moderator decides after the last step: the hop to `$END`
    /// or to the next role (which has not run yet).
    pub next: Option<Hop>,
    /// Why the moderator cannot decide after the last step.
    pub error: Option<String>,
}

impl Trace {
    /// Whether the moderator says the thread is over.
    pub fn ended(&self) -> bool {
        self.next.as_ref().is_some_and(|h| h.to == END)
    }

    /// The overlay for the diagrams: each role's visit count and how often
    /// each transition was taken (the final hop to `$END` included).
    pub fn overlay(&self) -> Overlay {
        let mut visits: BTreeMap<String, usize> = BTreeMap::new();
        let mut taken: BTreeMap<(String, usize), usize> = BTreeMap::new();
        for h in &self.hops {
            *visits.entry(h.to.clone()).or_default() += 1;
        }
        let end = self.next.as_ref().filter(|h| h.to == END);
        for h in self.hops.iter().chain(end) {
            if let Some(i) = h.index {
                *taken.entry((h.from.clone(), i)).or_default() += 1;
            }
        }
        Overlay { visits, taken }
    }
}

fn hop(view: &ThreadView, from: &str, to: &str, decision: Option<&Decision>) -> Hop {
    if let Some(d) = decision.filter(|d| d.next == to) {
        return Hop {
            from: from.to_string(),
            to: to.to_string(),
            index: Some(d.index),
            condition: d.condition.clone(),
            prompt: d.prompt.clone(),
            decided: true,
        };
    }
    let found = view
        .workflow
        .graph
        .get(from)
        .and_then(|ts| ts.iter().enumerate().find(|(_, t)| t.role == to));
    Hop {
        from: from.to_string(),
        to: to.to_string(),
        index: found.map(|(i, _)| i),
        condition: found.and_then(|(_, t)| t.condition.clone()),
        prompt: None,
        decided: false,
    }
}

/// The path of `view`: the moderator evaluated over each prefix of the
/// thread (up to [`MAX_EVALUATED_STEPS`] steps).
pub fn trace(view: &ThreadView) -> Trace {
    let full = view.context();
    let evaluated = view.steps.len() <= MAX_EVALUATED_STEPS;
    let mut hops = Vec::with_capacity(view.steps.len());
    let mut from = START.to_string();
    for i in 0..view.steps.len() {
        let to = full.steps[i].role.clone();
        let decision = evaluated
            .then(|| {
                let ctx = ModeratorContext {
                    start: full.start.clone(),
                    steps: full.steps[..i].to_vec(),
                };
                evaluate(&view.workflow, &ctx).ok()
            })
            .flatten();
        hops.push(hop(view, &from, &to, decision.as_ref()));
        from = to;
    }
    let (next, error) = match evaluate(&view.workflow, &full) {
        Ok(d) => (Some(hop(view, &from, &d.next.clone(), Some(&d))), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Trace { hops, next, error }
}
