//! Parse and evaluate costs of typical workflow expressions (conditions,
//! status maps, prompt fragments) over a small thread-like document.
//! Run with `cargo bench -p uwf-jsonata`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use uwf_jsonata::{EvalOptions, Expression};

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
