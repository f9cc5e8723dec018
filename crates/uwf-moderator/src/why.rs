//! Why each step of a thread ran: the transition the moderator took to its
//! role, recomputed from the history. The moderator is a pure function of
//! the workflow and the steps before, so nothing needs to be recorded.

use serde::Serialize;
use serde_json::Value;
use uwf_protocol::{ModeratorContext, START, StepContext, WorkflowPayload};

use crate::eval::{evaluate, explain};

/// The transition that led to one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Why {
    /// The role before (or `$START`).
    pub from: String,
    /// The transition's number in `graph[from]`, counted from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transition: Option<usize>,
    /// The condition that held; absent for an unconditional transition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Its expression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// What it evaluated to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// For a status map: the `$status` key that routed (`_` for its fallback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The edge prompt handed to the step's agent, rendered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Set when the moderator, asked again, does not lead to this step's
    /// role (a thread written by hand, or a workflow whose conditions fail
    /// now): what it says instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
}

impl Why {
    /// One line for people: "planner → developer: transition #2, condition
    /// `notApproved` = true".
    pub fn summary(&self, role: &str) -> String {
        let mut s = format!("{} → {role}", self.from);
        if let Some(m) = &self.mismatch {
            s.push_str(&format!(": not explained ({m})"));
            return s;
        }
        if let Some(n) = self.transition {
            s.push_str(&format!(": transition #{n}"));
        }
        match (&self.status, &self.condition) {
            (Some(st), _) if st == "_" => s.push_str(", status map fallback `_`"),
            (Some(st), _) => s.push_str(&format!(", `$status` = {st:?}")),
            (None, Some(c)) => {
                let value = self
                    .value
                    .as_ref()
                    .map_or_else(|| "undefined".to_string(), Value::to_string);
                s.push_str(&format!(", condition `{c}` = {value}"));
            }
            (None, None) => s.push_str(", unconditional"),
        }
        s
    }
}

/// Why each step of the thread `ctx` ran, in step order: the moderator
/// asked at every earlier head, its decision and the value of the
/// condition that made it.
///
/// Each answer evaluates the moderator over the steps before it, so this
/// costs time quadratic in the thread's length: for long threads use
/// [`why_from`].
pub fn why_each(workflow: &WorkflowPayload, ctx: &ModeratorContext) -> Vec<Why> {
    why_from(workflow, ctx, 0)
}

/// [`why_each`] for the steps from index `from` on (the newest ones): the
/// `i`-th answer is about step `from + i`.
pub fn why_from(workflow: &WorkflowPayload, ctx: &ModeratorContext, from: usize) -> Vec<Why> {
    let from = from.min(ctx.steps.len());
    let mut prefix = ModeratorContext {
        start: ctx.start.clone(),
        steps: ctx.steps[..from].to_vec(),
    };
    let mut out = Vec::with_capacity(ctx.steps.len() - from);
    for step in &ctx.steps[from..] {
        out.push(why_next(workflow, &prefix, step));
        prefix.steps.push(step.clone());
    }
    out
}

fn why_next(workflow: &WorkflowPayload, before: &ModeratorContext, step: &StepContext) -> Why {
    let from = before.steps.last().map_or(START, |s| s.role.as_str());
    let mut why = Why {
        from: from.to_string(),
        transition: None,
        condition: None,
        expression: None,
        value: None,
        status: None,
        prompt: None,
        mismatch: None,
    };
    let decision = match evaluate(workflow, before) {
        Ok(d) => d,
        Err(e) => {
            why.mismatch = Some(format!("the moderator fails here now: {e}"));
            return why;
        }
    };
    if decision.next != step.role {
        why.mismatch = Some(format!("the moderator now chooses {}", decision.next));
        return why;
    }
    why.transition = Some(decision.index + 1);
    why.prompt = decision.prompt;
    if let Some(c) = &decision.condition {
        let explained = explain(workflow, before);
        if let Some(t) = explained.transitions.get(decision.index) {
            why.expression = t.expression.clone();
            why.value = t.value.clone();
        }
        why.status = c
            .strip_prefix(&format!("{from}.$status="))
            .map(str::to_string);
        why.condition = Some(c.clone());
    } else {
        let status_map = workflow.graph.get(from).is_some_and(|ts| {
            ts.iter().any(|t| {
                t.condition
                    .as_deref()
                    .is_some_and(|c| c.starts_with(&format!("{from}.$status=")))
            })
        });
        if status_map {
            why.status = Some("_".into());
        }
    }
    why
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uwf_cas::{Cas, MemStore};
    use uwf_protocol::StartNodePayload;

    use super::*;
    use crate::definition::{parse_yaml, register};

    fn workflow(yaml: &str) -> WorkflowPayload {
        let cas = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let def = parse_yaml(yaml, "w.yaml").unwrap_or_else(|e| panic!("{e}"));
        register(&cas, &def)
            .unwrap_or_else(|e| panic!("{e}"))
            .payload
    }

    fn step(role: &str, output: Value) -> StepContext {
        StepContext {
            role: role.into(),
            output,
            detail: uwf_protocol::Hash::from_u64(0),
            agent: "a".into(),
        }
    }

    #[test]
    fn every_step_gets_its_transition_condition_and_value() {
        let w = workflow(
            r#"name: w
roles:
  dev: { systemPrompt: s, outputSchema: { type: object } }
  rev: { systemPrompt: s, outputSchema: { type: object } }
conditions:
  notApproved: "steps[-1].output.approved = false"
graph:
  $START: [{ role: dev }]
  dev: [{ role: rev }]
  rev:
    - { role: dev, condition: notApproved, prompt: "Fix: {{comments}}" }
    - { role: $END }
"#,
        );
        let ctx = ModeratorContext {
            start: StartNodePayload {
                workflow: uwf_protocol::Hash::from_u64(0),
                prompt: "task".into(),
                parent_state: None,
            },
            steps: vec![
                step("dev", json!({})),
                step("rev", json!({"approved": false, "comments": "tests"})),
                step("dev", json!({})),
                step("planner", json!({})),
            ],
        };
        let whys = why_each(&w, &ctx);
        assert_eq!(whys.len(), 4);
        assert_eq!(whys[0].from, START);
        assert_eq!(whys[0].transition, Some(1));
        assert_eq!(
            whys[0].summary("dev"),
            "$START → dev: transition #1, unconditional"
        );
        let third = &whys[2];
        assert_eq!(third.condition.as_deref(), Some("notApproved"));
        assert_eq!(third.value, Some(json!(true)));
        assert_eq!(third.prompt.as_deref(), Some("Fix: tests"));
        assert_eq!(
            third.summary("dev"),
            "rev → dev: transition #1, condition `notApproved` = true"
        );
        // A step the moderator would not have chosen is said to be so.
        assert_eq!(
            whys[3].mismatch.as_deref(),
            Some("the moderator now chooses rev")
        );
    }

    #[test]
    fn status_maps_name_their_key() {
        let w = workflow(
            r#"name: s
roles:
  a: { systemPrompt: s, outputSchema: { type: object } }
graph:
  $START: { _: a }
  a: { again: a, _: $END }
"#,
        );
        let ctx = ModeratorContext {
            start: StartNodePayload {
                workflow: uwf_protocol::Hash::from_u64(0),
                prompt: "t".into(),
                parent_state: None,
            },
            steps: vec![step("a", json!({"$status": "again"})), step("a", json!({}))],
        };
        let whys = why_each(&w, &ctx);
        assert_eq!(whys[0].status, None);
        assert_eq!(whys[1].status.as_deref(), Some("again"));
        assert_eq!(
            whys[1].summary("a"),
            "a → a: transition #1, `$status` = \"again\""
        );
    }
}
