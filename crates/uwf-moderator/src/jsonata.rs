//! A guarded wrapper around `jsonata-rs`.
//!
//! jsonata-rs 0.3.4 is an incomplete implementation and has sharp edges that
//! a moderator, which evaluates text written by workflow authors against data
//! written by agents, must not expose:
//!
//! * the parser **panics** on some inputs (the parent operator `%` is
//!   `unimplemented!`, some malformed lambdas hit `unreachable!`): every call
//!   runs under [`catch_unwind`];
//! * parser and evaluator are recursive and **overflow the stack** (an abort,
//!   not a panic) on deeply nested text — a few thousand levels in debug
//!   builds, on both the expression and the input, which jsonata-rs re-parses
//!   with its own parser. Expressions are limited to [`MAX_EXPRESSION_BYTES`],
//!   inputs to [`MAX_INPUT_DEPTH`] levels, and the work runs on a thread with
//!   a large stack ([`on_big_stack`]);
//! * runaway expressions are bounded by `evaluate_timeboxed` with
//!   [`MAX_EVAL_DEPTH`] and [`TIME_LIMIT_MS`];
//! * objects are hash maps, so their key order is arbitrary: results are
//!   converted to `serde_json` with sorted keys ([`to_json`]).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use bumpalo::Bump;
use jsonata_rs::{JsonAta, Value};

/// Longest accepted expression, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 4096;

/// Deepest accepted input (nesting of arrays and objects).
pub const MAX_INPUT_DEPTH: usize = 512;

/// Evaluation depth limit handed to jsonata-rs.
pub const MAX_EVAL_DEPTH: usize = 512;

/// Time limit of one evaluation, in milliseconds.
pub const TIME_LIMIT_MS: usize = 2000;

/// Most JSON values a result may convert to (guards `[1..10000000]`).
const MAX_RESULT_NODES: usize = 1_000_000;

/// Stack of the evaluation thread. Reserved, not committed, until used.
const STACK_BYTES: usize = 256 << 20;

/// Why an expression failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// It does not parse (or cannot be accepted at all).
    Syntax(String),
    /// It parsed but evaluating it failed.
    Runtime(String),
}

/// Runs `job` on a thread with a large stack and returns its result; panics
/// are propagated. Falls back to the current thread if none can be spawned.
pub(crate) fn on_big_stack<T: Send, F: FnOnce() -> T + Send>(job: F) -> T {
    let mut job = Some(job);
    let outcome = std::thread::scope(|scope| {
        let slot = &mut job;
        std::thread::Builder::new()
            .name("uwf-jsonata".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, move || slot.take().map(|f| f()))
            .ok()
            .map(|handle| handle.join())
    });
    match outcome {
        Some(Ok(Some(value))) => value,
        Some(Err(panic)) => resume_unwind(panic),
        // The thread could not be spawned: the job is still here.
        Some(Ok(None)) | None => match job.take() {
            Some(f) => f(),
            None => unreachable!("the evaluation job runs exactly once"),
        },
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = format!(
                "jsonata-rs crashed while {what} ({}); the expression probably uses a construct \
                 it does not support, such as the parent operator `%`",
                panic_message(p.as_ref())
            );
            Err(if what == "parsing" {
                Failure::Syntax(msg)
            } else {
                Failure::Runtime(msg)
            })
        }
    }
}

fn check_size(expr: &str) -> Result<(), Failure> {
    if expr.len() > MAX_EXPRESSION_BYTES {
        return Err(Failure::Syntax(format!(
            "the expression is {} bytes long; at most {MAX_EXPRESSION_BYTES} are accepted",
            expr.len()
        )));
    }
    if expr.trim().is_empty() {
        return Err(Failure::Syntax("the expression is empty".into()));
    }
    Ok(())
}

/// Checks that `expr` parses.
pub(crate) fn check_syntax(expr: &str) -> Result<(), Failure> {
    check_size(expr)?;
    guarded("parsing", || {
        let arena = Bump::new();
        JsonAta::new(expr, &arena)
            .map(|_| ())
            .map_err(|e| Failure::Syntax(e.to_string()))
    })
}

/// Nesting depth of a JSON value (a scalar is 0).
pub(crate) fn depth(v: &serde_json::Value) -> usize {
    // Iterative, so that measuring cannot overflow the stack either.
    let mut max = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            serde_json::Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            serde_json::Value::Object(o) => stack.extend(o.values().map(|c| (c, d + 1))),
            _ => {}
        }
    }
    max
}

/// An input prepared for evaluation: JSON text, checked for depth.
#[derive(Debug, Clone)]
pub(crate) struct Input(String);

impl Input {
    /// Serializes `value`, refusing inputs nested deeper than [`MAX_INPUT_DEPTH`].
    pub(crate) fn new(value: &serde_json::Value) -> Result<Self, Failure> {
        let d = depth(value);
        if d > MAX_INPUT_DEPTH {
            return Err(Failure::Runtime(format!(
                "the input is nested {d} levels deep; at most {MAX_INPUT_DEPTH} are supported"
            )));
        }
        serde_json::to_string(value)
            .map(Input)
            .map_err(|e| Failure::Runtime(format!("cannot serialize the input: {e}")))
    }
}

fn with_result<T>(
    expr: &str,
    input: &Input,
    f: impl for<'a> FnOnce(&'a Value<'a>) -> Result<T, Failure>,
) -> Result<T, Failure> {
    check_size(expr)?;
    let arena = Bump::new();
    let compiled = guarded("parsing", || {
        JsonAta::new(expr, &arena).map_err(|e| Failure::Syntax(e.to_string()))
    })?;
    guarded("evaluating", || {
        let value = compiled
            .evaluate_timeboxed(Some(&input.0), Some(MAX_EVAL_DEPTH), Some(TIME_LIMIT_MS))
            .map_err(|e| Failure::Runtime(e.to_string()))?;
        f(value)
    })
}

/// Evaluates `expr` and casts the result like JSONata's `$boolean`
/// (undefined, null, false, 0, "", empty array and empty object are false;
/// an array is true if any member is).
pub(crate) fn truthy(expr: &str, input: &Input) -> Result<bool, Failure> {
    // `Value::is_truthy` is the cast `$boolean` performs, minus `$boolean`'s
    // refusal of NaN and infinities (which jsonata-rs never produces from
    // JSON input or arithmetic: it raises D1001 instead).
    with_result(expr, input, |v| Ok(v.is_truthy()))
}

/// Evaluates `expr`; `None` is JSONata's `undefined`.
pub(crate) fn value(expr: &str, input: &Input) -> Result<Option<serde_json::Value>, Failure> {
    with_result(expr, input, |v| {
        let mut budget = MAX_RESULT_NODES;
        to_json(v, &mut budget).ok_or_else(|| {
            Failure::Runtime(format!(
                "the result has more than {MAX_RESULT_NODES} values; refusing to render it"
            ))
        })
    })
}

/// Converts a jsonata value to JSON the way `JSON.stringify` would: undefined
/// members are dropped, functions and regexes become `null`, non-finite
/// numbers become `null`, integral numbers are written without a fraction.
/// Object keys are sorted (jsonata-rs does not keep their order).
///
/// Returns `None` when more than `budget` values would be produced; the outer
/// `Option` of the `Some` result is `None` for a top-level `undefined`.
fn to_json<'a>(v: &'a Value<'a>, budget: &mut usize) -> Option<Option<serde_json::Value>> {
    use serde_json::Value as J;
    if *budget == 0 {
        return None;
    }
    *budget -= 1;
    Some(Some(match v {
        Value::Undefined => return Some(None),
        Value::Null
        | Value::Regex(_)
        | Value::Lambda { .. }
        | Value::NativeFn { .. }
        | Value::Transformer { .. } => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Number(n) => number(*n),
        Value::String(s) => J::String(s.to_string()),
        Value::Array(..) | Value::Range(..) => {
            let mut out = Vec::new();
            for m in v.members() {
                if let Some(j) = to_json(m, budget)? {
                    out.push(j);
                }
            }
            J::Array(out)
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
            let mut out = serde_json::Map::new();
            for (k, m) in entries {
                if let Some(j) = to_json(m, budget)? {
                    out.insert(k.to_string(), j);
                }
            }
            J::Object(out)
        }
    }))
}

fn number(n: f64) -> serde_json::Value {
    // Integral values within the exactly representable range print without
    // a fraction, as in JavaScript.
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if n.fract() == 0.0 && n.abs() <= EXACT {
        return serde_json::Value::from(n as i64);
    }
    serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn input(v: serde_json::Value) -> Input {
        Input::new(&v).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn truthiness_follows_boolean_casting() {
        let i = input(json!({
            "t": true, "f": false, "zero": 0, "one": 1, "empty": "", "s": "x",
            "ea": [], "eo": {}, "o": {"a": 1}, "falsy": [0, false, ""], "mixed": [0, 1],
            "nested": [[0], [[false]]], "n": null, "single": [0]
        }));
        for (expr, want) in [
            ("t", true),
            ("f", false),
            ("zero", false),
            ("one", true),
            ("empty", false),
            ("s", true),
            ("ea", false),
            ("eo", false),
            ("o", true),
            ("falsy", false),
            ("mixed", true),
            ("nested", false),
            ("n", false),
            ("single", false),
            ("missing", false),
            ("-1", true),
            ("0.5", true),
            ("[1..3]", true),
            ("function($x){$x}", false),
        ] {
            assert_eq!(truthy(expr, &i), Ok(want), "{expr}");
        }
    }

    #[test]
    fn parent_operator_panic_is_caught() {
        let r = check_syntax("%.a");
        assert!(
            matches!(r, Err(Failure::Syntax(ref m)) if m.contains("crashed")),
            "{r:?}"
        );
        let r = truthy("%.a", &input(json!({})));
        assert!(matches!(r, Err(Failure::Syntax(_))), "{r:?}");
    }

    #[test]
    fn deep_expression_does_not_abort() {
        let deep = format!("{}1{}", "(".repeat(2000), ")".repeat(2000));
        let r = on_big_stack(|| truthy(&deep, &input(json!({}))));
        assert!(r.is_err());
        let long = "-".repeat(MAX_EXPRESSION_BYTES) + "1";
        assert!(matches!(check_syntax(&long), Err(Failure::Syntax(m)) if m.contains("bytes")));
    }

    /// The most deeply nesting expressions that pass the size limit must
    /// fail cleanly (or succeed), never abort on a stack overflow.
    #[test]
    fn worst_case_nesting_within_the_size_limit() {
        let n = MAX_EXPRESSION_BYTES;
        let shapes = [
            format!("{}1", "-".repeat(n - 1)),
            format!("{}1{}", "(".repeat(n / 2 - 1), ")".repeat(n / 2 - 1)),
            format!("{}1{}", "[".repeat(n / 2 - 1), "]".repeat(n / 2 - 1)),
            format!("1{}", "+1".repeat(n / 2 - 1)),
            format!("a{}", ".a".repeat(n / 2 - 1)),
            format!("{}1{}", "$not(".repeat(n / 6 - 1), ")".repeat(n / 6 - 1)),
            format!("{}1{}", "{\"a\":".repeat(n / 6 - 1), "}".repeat(n / 6 - 1)),
        ];
        let mut deep_input = json!(1);
        for _ in 0..MAX_INPUT_DEPTH {
            deep_input = json!({ "a": deep_input });
        }
        let deep_input = input(deep_input);
        for e in &shapes {
            assert!(e.len() <= n);
            let _ = on_big_stack(|| check_syntax(e));
            let _ = on_big_stack(|| truthy(e, &deep_input));
        }
    }

    #[test]
    fn deep_input_is_refused() {
        let mut v = json!(1);
        for _ in 0..=MAX_INPUT_DEPTH {
            v = json!([v]);
        }
        assert!(matches!(Input::new(&v), Err(Failure::Runtime(m)) if m.contains("nested")));
    }

    #[test]
    fn runaway_recursion_is_stopped() {
        let r = on_big_stack(|| truthy("($f := function($x){$f($x)}; $f(1))", &input(json!({}))));
        assert!(
            matches!(r, Err(Failure::Runtime(ref m)) if m.contains("U1001")),
            "{r:?}"
        );
    }

    #[test]
    fn values_convert_with_sorted_keys() {
        let i = input(json!({"b": 1, "a": [1.5, "x", null, true]}));
        assert_eq!(
            value("$", &i),
            Ok(Some(json!({"a": [1.5, "x", null, true], "b": 1})))
        );
        assert_eq!(value("missing", &i), Ok(None));
        assert_eq!(value("[1..3]", &i), Ok(Some(json!([1, 2, 3]))));
        assert_eq!(value("1/4", &i), Ok(Some(json!(0.25))));
        assert!(matches!(
            value("[1..2000000]", &i),
            Err(Failure::Runtime(m)) if m.contains("refusing")
        ));
    }

    #[test]
    fn empty_expression_is_a_syntax_error() {
        assert!(matches!(check_syntax("  "), Err(Failure::Syntax(_))));
    }
}
