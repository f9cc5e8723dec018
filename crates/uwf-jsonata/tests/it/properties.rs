//! Property tests: the parser and evaluator never panic, and object key order
//! is deterministic (insertion order).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Map, Value as J, json};
use uwf_jsonata::{EvalOptions, Expression, Limits};

fn small_limits() -> EvalOptions {
    EvalOptions {
        limits: Limits {
            max_depth: 200,
            time_limit: Some(Duration::from_millis(200)),
            max_result_items: 10_000,
            ..Limits::default()
        },
        ..EvalOptions::default()
    }
}

fn arb_json() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        (-1000i64..1000).prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|n| json!(n)),
        "[a-c]{0,3}".prop_map(J::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Array),
            prop::collection::vec(("[a-c]{1,2}", inner), 0..4)
                .prop_map(|kv| J::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

const TOKENS: &[&str] = &[
    "a",
    "b",
    "c",
    "$",
    "$$",
    ".",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ":",
    ",",
    ";",
    "1",
    "0",
    "-1",
    "2.5",
    "\"a\"",
    "'b'",
    "+",
    "-",
    "*",
    "/",
    "%",
    "=",
    "!=",
    "<",
    ">=",
    "&",
    "and",
    "or",
    "in",
    "?",
    "??",
    "?:",
    "..",
    ":=",
    "$x",
    "$y",
    "~>",
    "#$i",
    "@$v",
    "^(",
    "**",
    "true",
    "null",
    "$sum(",
    "$keys(",
    "$string(",
    "$count(",
    "$map(",
    "$filter(",
    "$reduce(",
    "$sort(",
    "$each(",
    "$lookup(",
    "$spread(",
    "$merge(",
    "$substring(",
    "$match(",
    "$replace(",
    "$split(",
    "$join(",
    "$number(",
    "$round(",
    "$formatNumber(",
    "$formatInteger(",
    "$fromMillis(",
    "$type(",
    "$distinct(",
    "$zip(",
    "$append(",
    "$eval(",
    "function($x){",
    "function($x, $y){",
    "|",
    "/a/",
    "[]",
    "%",
    "$single(",
    "$sift(",
    "$pad(",
    "$error(",
];

fn arb_expr() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 1..12).prop_map(|t| t.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn parse_never_panics(s in "\\PC{0,40}") {
        let _ = Expression::parse(&s);
    }

    #[test]
    fn parse_token_soup_never_panics(s in arb_expr()) {
        let _ = Expression::parse(&s);
    }

    #[test]
    fn evaluation_never_panics(s in arb_expr(), input in arb_json()) {
        if let Ok(e) = Expression::parse(&s) {
            let _ = e.evaluate(Some(&input), &small_limits());
            let _ = e.evaluate(None, &small_limits());
        }
    }

    #[test]
    fn object_order_is_insertion_order(
        pairs in prop::collection::vec(("[a-z]{1,6}", -100i64..100), 1..8)
    ) {
        let obj: Map<String, J> = pairs.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let keys: Vec<J> = obj.keys().map(|k| json!(k)).collect();
        let values: Vec<J> = obj.values().cloned().collect();
        let input = J::Object(obj.clone());
        let opts = EvalOptions::default();
        let eval = |src: &str| Expression::parse(src).unwrap().evaluate(Some(&input), &opts).unwrap();
        for _ in 0..3 {
            prop_assert_eq!(eval("[$keys($)]"), Some(J::Array(keys.clone())));
            prop_assert_eq!(eval("[*]"), Some(J::Array(values.clone())));
            prop_assert_eq!(eval("[$each($, function($v, $k) { $k })]"), Some(J::Array(keys.clone())));
            prop_assert_eq!(
                eval("$string($)"),
                Some(J::String(serde_json::to_string(&input).unwrap()))
            );
        }
    }
}
