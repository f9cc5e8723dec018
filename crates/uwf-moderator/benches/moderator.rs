//! The moderator's share of a step: choosing the next role of a thread with
//! 1,000 steps (`cargo bench -p uwf-moderator`).
//!
//! A step must not be slow because of its conditions: this measures
//! `evaluate` (context serialization, canonical key order, parsing and
//! evaluating the conditions) on a long thread, and one condition on its own.

#![allow(missing_docs)]

use divan::{Bencher, black_box};
use serde_json::json;
use uwf_moderator::{evaluate, evaluate_expression};
use uwf_protocol::{ModeratorContext, StartNodePayload, StepContext, WorkflowPayload};

fn main() {
    divan::main();
}

const STEPS: usize = 1000;

fn context(steps: usize) -> ModeratorContext {
    // Counted from the end, so that the last step is always the reviewer's.
    let roles = ["reviewer", "developer", "planner"];
    ModeratorContext {
        start: StartNodePayload {
            workflow: uwf_protocol::Hash::from_u64(0),
            prompt: "Fix the login redirect loop".into(),
            parent_state: None,
        },
        steps: (0..steps)
            .map(|i| {
                let role = roles[(steps - 1 - i) % 3];
                StepContext {
                    role: role.into(),
                    output: json!({
                        "summary": format!("step {i}: did the work of a {role}"),
                        "approved": i % 7 == 0,
                        "filesChanged": ["src/auth/middleware.rs", "src/auth/session.rs"],
                        "score": i % 10,
                        "comments": "Looks fine, but add a regression test for the redirect.",
                    }),
                    detail: uwf_protocol::Hash::from_u64(1),
                    agent: "uwf-mock".into(),
                }
            })
            .collect(),
    }
}

fn workflow() -> WorkflowPayload {
    serde_json::from_value(json!({
        "name": "solve-issue", "description": "",
        "roles": {
            "planner": { "description": "", "systemPrompt": "", "outputSchema": "0000000000000" },
            "developer": { "description": "", "systemPrompt": "", "outputSchema": "0000000000000" },
            "reviewer": { "description": "", "systemPrompt": "", "outputSchema": "0000000000000" }
        },
        "conditions": {
            "tooManyRounds": "$count(steps[role = 'developer']) >= 400",
            "lowScore": "$average(steps[role = 'reviewer'].output.score) < 2",
            "notApproved": "steps[-1].output.approved = false"
        },
        "graph": {
            "$START": [{ "role": "planner", "condition": null }],
            "planner": [{ "role": "developer", "condition": null }],
            "developer": [{ "role": "reviewer", "condition": null }],
            "reviewer": [
                { "role": "$END", "condition": "tooManyRounds" },
                { "role": "$END", "condition": "lowScore" },
                { "role": "developer", "condition": "notApproved", "prompt": "Address: {{comments}}" },
                { "role": "$END", "condition": null }
            ]
        }
    }))
    .unwrap_or_else(|e| panic!("bench workflow: {e}"))
}

/// Three conditions and an edge prompt over a 1,000-step thread whose last
/// step is a reviewer's: the decision a `thread step` makes.
#[divan::bench]
fn decide_over_1000_steps(bencher: Bencher) {
    let (w, ctx) = (workflow(), context(STEPS));
    // The bench measures the path it claims to: every condition is evaluated.
    let d = evaluate(&w, &ctx).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((d.next.as_str(), d.index), ("developer", 2));
    bencher.bench(|| evaluate(black_box(&w), black_box(&ctx)));
}

/// One typical condition on its own, the context already JSON.
#[divan::bench]
fn one_condition_over_1000_steps(bencher: Bencher) {
    let ctx = serde_json::to_value(context(STEPS)).unwrap_or_default();
    bencher.bench(|| {
        evaluate_expression(
            black_box("$count(steps[role = 'developer' and output.approved = false]) >= 3"),
            Some(black_box(&ctx)),
        )
    });
}

/// The fixed cost of one evaluation over the context (copying, sorting and
/// converting it), with an expression that does no work.
#[divan::bench]
fn trivial_expression_over_1000_steps(bencher: Bencher) {
    let ctx = serde_json::to_value(context(STEPS)).unwrap_or_default();
    bencher.bench(|| evaluate_expression(black_box("true"), Some(black_box(&ctx))));
}
