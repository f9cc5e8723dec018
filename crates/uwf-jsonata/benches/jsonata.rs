//! Parse and evaluate costs of typical workflow expressions (conditions,
//! status maps, prompt fragments) over a small thread-like document.
//! Run with `cargo bench -p uwf-jsonata`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use uwf_jsonata::{EvalOptions, Expression, Input};

fn main() {
    divan::main();
}

const EXPRESSIONS: &[&str] = &[
    "status = 'done' and $count(reviews[approved]) >= 2",
    "steps[role = 'developer'].output ~> $join(', ')",
    "{ 'open': $count(issues[state = 'open']), 'labels': $distinct(issues.labels) }",
    "issues^(>priority)[0..2].title",
    "$sum(issues.(priority * 2)) > 10 ? 'busy' : 'calm'",
];

fn document() -> Value {
    let issues: Vec<Value> = (0..50)
        .map(|i| {
            json!({
                "title": format!("issue {i}"),
                "state": if i % 3 == 0 { "closed" } else { "open" },
                "priority": i % 5,
                "labels": [format!("l{}", i % 7), "triage"],
            })
        })
        .collect();
    json!({
        "status": "done",
        "reviews": [{"approved": true}, {"approved": false}, {"approved": true}],
        "steps": [{"role": "developer", "output": "a"}, {"role": "tester", "output": "b"}],
        "issues": issues,
    })
}

#[divan::bench(args = EXPRESSIONS)]
fn parse(src: &str) -> Expression {
    Expression::parse(divan::black_box(src)).unwrap()
}

#[divan::bench(args = EXPRESSIONS)]
fn evaluate(bencher: divan::Bencher, src: &str) {
    let expr = Expression::parse(src).unwrap();
    let doc = document();
    let opts = EvalOptions::default();
    bencher.bench(|| expr.evaluate(Some(divan::black_box(&doc)), &opts).unwrap());
}

/// A condition that searches a long thread's whole history, as the
/// moderator evaluates it: over a document converted once (`Input`), here
/// of 10,000 steps (docs/performance.md, "History, when a workflow reads
/// only the last steps").
#[divan::bench(args = ["$count(steps[output.n = 2]) > 0", "$count(steps[role = 'writer'])"])]
fn search_history(bencher: divan::Bencher, src: &str) {
    let expr = Expression::parse(src).unwrap();
    let steps: Vec<Value> = (0..10_000)
        .map(|i| json!({"role": "work", "output": {"n": 1, "note": format!("round {i}")}}))
        .collect();
    let input = Input::new(Some(&json!({ "steps": steps }))).unwrap();
    let opts = EvalOptions::default();
    bencher.bench_local(|| {
        expr.evaluate_input(divan::black_box(&input), &opts)
            .unwrap()
    });
}
