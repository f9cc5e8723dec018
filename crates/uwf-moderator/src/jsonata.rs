//! How the moderator evaluates JSONata: [`uwf_jsonata`] with the limits,
//! the key order and the stack a moderator needs.
//!
//! * **Key order.** Expressions see the members of every object in the
//!   context sorted by key (Unicode code point order, i.e. the bytes of the
//!   UTF-8 keys). Two outputs that differ only in member order are the same
//!   CAS node, so no other order could be a function of the thread; objects
//!   an expression builds keep the order it builds them in.
//! * **Bounds.** Expressions are at most [`MAX_EXPRESSION_BYTES`], inputs
//!   at most [`MAX_INPUT_DEPTH`] levels deep; an evaluation may recurse
//!   [`MAX_EVAL_DEPTH`] deep and run [`TIME_LIMIT_MS`], and a range (or
//!   `$pad`) may hold [`MAX_RESULT_ITEMS`] items. Every bound is an error
//!   naming the expression, never a hang, a panic or a stack overflow.
//! * **Stack.** Evaluation is recursive, so it runs on a thread with a large
//!   stack ([`on_big_stack`]).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::Duration;

use uwf_jsonata::{EvalOptions, Expression, Limits};

use crate::functions::{self, Host};

/// Longest accepted expression, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 4096;

/// Deepest accepted input (nesting of arrays and objects).
pub const MAX_INPUT_DEPTH: usize = 512;

/// Deepest recursion of one evaluation (nested calls, lambdas, paths).
pub const MAX_EVAL_DEPTH: usize = 512;

/// Time limit of one evaluation, in milliseconds.
pub const TIME_LIMIT_MS: usize = 2000;

/// Most items a range (`[1..100000000]`) or `$pad` may create; other growth
/// is bounded by the time limit.
pub const MAX_RESULT_ITEMS: usize = 1_000_000;

/// Stack of the evaluation thread. Reserved, not committed, until used.
const STACK_BYTES: usize = 256 << 20;

/// Why an expression failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// It does not parse (or cannot be accepted at all); the byte offset of
    /// the problem in the expression, when known.
    Syntax(String, Option<usize>),
    /// It parsed but evaluating it failed.
    Runtime(String),
}

impl Failure {
    pub(crate) fn message(&self) -> &str {
        match self {
            Failure::Syntax(m, _) | Failure::Runtime(m) => m,
        }
    }
}

/// Runs `job` on a large stack ([`STACK_BYTES`], reserved, committed only
/// as used) and returns its result; panics are propagated.
///
/// The stack is a fresh one on the calling thread (`stacker`), not another
/// thread: thread-local state such as the steps a decision converted
/// (`eval::KeptSteps`) outlives the evaluation for the thread's next
/// decision, and no thread is started per decision. Where so large a stack
/// cannot be reserved (a tight `ulimit -v`, strict overcommit), which
/// stacker would report with a panic, each evaluation runs on a thread of
/// its own as far as one can be started, else on the current stack (the
/// evaluator's own limits still stop deep recursion).
pub(crate) fn on_big_stack<T: Send, F: FnOnce() -> T + Send>(job: F) -> T {
    if big_stacks_reservable() {
        let mut job = Some(job);
        let mut out = None;
        // A panic here is the job's: stacker could reserve the stack.
        stacker::grow(STACK_BYTES, || out = job.take().map(|f| f()));
        match (out, job) {
            (Some(value), _) => value,
            (None, Some(f)) => f(),
            (None, None) => unreachable!("the evaluation job runs exactly once"),
        }
    } else {
        on_new_thread(job)
    }
}

/// Whether this process can reserve a [`STACK_BYTES`] stack, asked once by
/// starting a thread with one (glibc maps a thread's stack as stacker
/// maps its own; a refusal is an error here, not a panic).
fn big_stacks_reservable() -> bool {
    static RESERVABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RESERVABLE.get_or_init(|| {
        std::thread::Builder::new()
            .name("uwf-moderator-probe".into())
            .stack_size(STACK_BYTES)
            .spawn(|| ())
            .is_ok_and(|handle| handle.join().is_ok())
    })
}

/// `job` on a thread with a [`STACK_BYTES`] stack; on the current thread if
/// none can be started.
fn on_new_thread<T: Send, F: FnOnce() -> T + Send>(job: F) -> T {
    let mut job = Some(job);
    let outcome = std::thread::scope(|scope| {
        let slot = &mut job;
        std::thread::Builder::new()
            .name("uwf-moderator".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, move || slot.take().map(|f| f()))
            .ok()
            .map(|handle| handle.join())
    });
    match outcome {
        Some(Ok(Some(value))) => value,
        Some(Err(panic)) => resume_unwind(panic),
        // The thread could not be started: the job is still here.
        Some(Ok(None)) | None => match job.take() {
            Some(f) => f(),
            None => unreachable!("the evaluation job runs exactly once"),
        },
    }
}

/// The options of a condition's evaluation (and of `uwf eval`), with the
/// moderator's functions ([`crate::functions`]); built once per process.
pub(crate) fn options() -> &'static EvalOptions {
    static OPTIONS: std::sync::OnceLock<EvalOptions> = std::sync::OnceLock::new();
    OPTIONS.get_or_init(|| EvalOptions {
        definitions: functions::definitions(Host::Context),
        ..base_options()
    })
}

/// The options of an edge prompt's evaluation: the thread's `steps` are
/// bound for `$last`/`$first`.
pub(crate) fn prompt_options(steps: serde_json::Value) -> EvalOptions {
    EvalOptions {
        definitions: functions::definitions(Host::Prompt),
        bindings: [(functions::STEPS_BINDING.to_string(), steps)]
            .into_iter()
            .collect(),
        ..base_options()
    }
}

/// The limits of every moderator evaluation.
fn base_options() -> EvalOptions {
    EvalOptions {
        limits: Limits {
            max_depth: MAX_EVAL_DEPTH,
            time_limit: Some(Duration::from_millis(TIME_LIMIT_MS as u64)),
            max_result_items: MAX_RESULT_ITEMS,
            // A quarter of the evaluation thread's stack: recursion ends with
            // U1001 (or at MAX_EVAL_DEPTH) long before the stack runs out.
            max_stack: STACK_BYTES / 4,
        },
        ..EvalOptions::default()
    }
}

/// Runs evaluator code, turning a panic (a bug: the evaluator is meant never
/// to panic) into an error, so that a step fails cleanly instead.
fn guarded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Failure::Runtime(format!(
            "the JSONata evaluator crashed ({what}); this is a bug in uwf, please report it with the expression"
        )))
    })
}

/// `S0207: Unexpected end of expression`: the JSONata code first, as in
/// jsonata-js and its documentation, so that it can be looked up.
fn describe(e: &uwf_jsonata::Error) -> String {
    format!("{}: {}", e.code, e.message)
}

/// Parses `expr`, refusing empty and over-long text.
pub(crate) fn compile(expr: &str) -> Result<Expression, Failure> {
    if expr.len() > MAX_EXPRESSION_BYTES {
        return Err(Failure::Syntax(
            format!(
                "the expression is {} bytes long; at most {MAX_EXPRESSION_BYTES} are accepted",
                expr.len()
            ),
            None,
        ));
    }
    if expr.trim().is_empty() {
        return Err(Failure::Syntax("the expression is empty".into(), None));
    }
    guarded(|| Expression::parse(expr).map_err(|e| Failure::Syntax(describe(&e), e.position)))
}

/// Parses `expr` and refuses builtins whose result is not a function of the
/// thread ([`IMPURE_FUNCTIONS`](crate::definition::IMPURE_FUNCTIONS)).
pub(crate) fn compile_pure(expr: &str) -> Result<Expression, Failure> {
    let compiled = compile(expr)?;
    match crate::definition::expr_checks::impure(compiled.ast()) {
        Some(p) => Err(Failure::Syntax(p.message, p.offset)),
        None => Ok(compiled),
    }
}

/// Checks that `expr` parses.
#[cfg(test)]
pub(crate) fn check_syntax(expr: &str) -> Result<(), Failure> {
    compile(expr).map(|_| ())
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

/// Sorts the members of every object by key, iteratively.
pub(crate) fn canonical_order(v: &mut serde_json::Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Array(a) => stack.extend(a.iter_mut()),
            serde_json::Value::Object(o) => {
                o.sort_keys();
                stack.extend(o.values_mut());
            }
            _ => {}
        }
    }
}

/// Converts `v` to the evaluator's value with every object's members in
/// canonical (code point) order, in one pass; [`Failure::Runtime`] when it
/// is nested deeper than [`MAX_INPUT_DEPTH`] below `depth`.
pub(crate) fn sorted_value(
    v: &serde_json::Value,
    depth: usize,
) -> Result<uwf_jsonata::Value, Failure> {
    if depth > MAX_INPUT_DEPTH {
        return Err(Failure::Runtime(format!(
            "the input is nested more than {MAX_INPUT_DEPTH} levels deep"
        )));
    }
    Ok(match v {
        serde_json::Value::Array(a) => uwf_jsonata::Value::array(
            a.iter()
                .map(|x| sorted_value(x, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        serde_json::Value::Object(o) => {
            let mut members: Vec<(&String, &serde_json::Value)> = o.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let mut out = uwf_jsonata::object_with_capacity(members.len());
            for (k, x) in members {
                out.insert(k.clone(), sorted_value(x, depth + 1)?);
            }
            uwf_jsonata::Value::object(out)
        }
        scalar => uwf_jsonata::Value::from_json(scalar),
    })
}

/// An input prepared for evaluation: depth-checked, in canonical key order,
/// and converted once for all the expressions evaluated against it.
#[derive(Debug, Clone)]
pub(crate) struct Input(uwf_jsonata::Input);

impl Input {
    /// Prepares `value`, refusing inputs nested deeper than [`MAX_INPUT_DEPTH`].
    pub(crate) fn new(value: &serde_json::Value) -> Result<Self, Failure> {
        Self::owned(value.clone())
    }

    /// An input from a value [`sorted_value`] built (or composed of such).
    pub(crate) fn from_sorted(value: uwf_jsonata::Value) -> Result<Self, Failure> {
        uwf_jsonata::Input::from_value(value)
            .map(Input)
            .map_err(|e| Failure::Runtime(describe(&e)))
    }

    /// Like [`Input::new`], without copying.
    pub(crate) fn owned(mut value: serde_json::Value) -> Result<Self, Failure> {
        Self::checked(&value)?;
        canonical_order(&mut value);
        uwf_jsonata::Input::new(Some(&value))
            .map(Input)
            .map_err(|e| Failure::Runtime(describe(&e)))
    }

    /// Like [`Input::new`], the members of its objects left in the order
    /// `value` has them (a document given to `uwf eval --input`, not a
    /// thread).
    pub(crate) fn as_given(value: &serde_json::Value) -> Result<Self, Failure> {
        Self::checked(value)?;
        uwf_jsonata::Input::new(Some(value))
            .map(Input)
            .map_err(|e| Failure::Runtime(describe(&e)))
    }

    fn checked(value: &serde_json::Value) -> Result<(), Failure> {
        let d = depth(value);
        if d > MAX_INPUT_DEPTH {
            return Err(Failure::Runtime(format!(
                "the input is nested {d} levels deep; at most {MAX_INPUT_DEPTH} are supported"
            )));
        }
        Ok(())
    }
}

/// Evaluates a compiled expression and casts the result like JSONata's
/// `$boolean` (undefined, null, false, 0, "", empty array and empty object
/// are false; an array is true if any member is).
pub(crate) fn truthy_compiled(expr: &Expression, input: &Input) -> Result<bool, Failure> {
    evaluated(expr, input).map(|v| v.is_truthy())
}

/// Evaluates a compiled expression to the evaluator's own value, from which
/// both the boolean cast and the JSON result can be read.
pub(crate) fn evaluated(expr: &Expression, input: &Input) -> Result<uwf_jsonata::Value, Failure> {
    guarded(|| {
        expr.evaluate_input(&input.0, options())
            .map_err(|e| Failure::Runtime(describe(&e)))
    })
}

/// Parses and evaluates `expr` against `input`, cast to a boolean
/// ([`truthy_compiled`]).
#[cfg(test)]
pub(crate) fn truthy(expr: &str, input: &serde_json::Value) -> Result<bool, Failure> {
    truthy_compiled(&compile(expr)?, &Input::new(input)?)
}

/// Evaluates a compiled expression; `None` is JSONata's `undefined`.
pub(crate) fn value_compiled(
    expr: &Expression,
    input: Option<&Input>,
) -> Result<Option<serde_json::Value>, Failure> {
    value_with(expr, input, options())
}

/// Evaluates a compiled expression with `options`; `None` is JSONata's `undefined`.
pub(crate) fn value_with(
    expr: &Expression,
    input: Option<&Input>,
    options: &EvalOptions,
) -> Result<Option<serde_json::Value>, Failure> {
    guarded(|| {
        let undefined = uwf_jsonata::Input::default();
        expr.evaluate_input(input.map_or(&undefined, |i| &i.0), options)
            .map(|v| v.to_json())
            .map_err(|e| Failure::Runtime(describe(&e)))
    })
}

/// Parses and evaluates `expr` against `input`; `None` is JSONata's `undefined`.
#[cfg(test)]
pub(crate) fn value(
    expr: &str,
    input: &serde_json::Value,
) -> Result<Option<serde_json::Value>, Failure> {
    value_compiled(&compile(expr)?, Some(&Input::new(input)?))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A context for the test functions, which prepare it on their thread.
    fn input(v: serde_json::Value) -> serde_json::Value {
        v
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
            assert_eq!(on_big_stack(|| truthy(expr, &i)), Ok(want), "{expr}");
        }
    }

    #[test]
    fn the_parent_operator_works() {
        let i = input(json!({"a": {"b": 1, "c": 2}}));
        assert_eq!(on_big_stack(|| value("a.b.%.c", &i)), Ok(Some(json!(2))));
    }

    #[test]
    fn keys_are_seen_in_code_point_order() {
        let mut data = serde_json::Map::new();
        for k in ["dd", "bb", "é", "aa", "Z", "cc"] {
            data.insert(k.into(), json!(k.len()));
        }
        let i = input(json!({ "o": data }));
        for _ in 0..10 {
            assert_eq!(
                on_big_stack(|| value("$keys(o)", &i)),
                Ok(Some(json!(["Z", "aa", "bb", "cc", "dd", "é"])))
            );
            assert_eq!(
                on_big_stack(|| value("$string(o)", &i)),
                Ok(Some(json!(r#"{"Z":1,"aa":2,"bb":2,"cc":2,"dd":2,"é":2}"#)))
            );
        }
    }

    #[test]
    fn deep_expression_does_not_abort() {
        let deep = format!("{}1{}", "(".repeat(2000), ")".repeat(2000));
        let r = on_big_stack(|| truthy(&deep, &input(json!({}))));
        assert!(r.is_err() || r == Ok(true), "{r:?}");
        let long = "-".repeat(MAX_EXPRESSION_BYTES) + "1";
        assert!(matches!(check_syntax(&long), Err(Failure::Syntax(m, _)) if m.contains("bytes")));
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
        let r =
            on_big_stack(|| truthy("($f := function($x){$f($x) + 1}; $f(1))", &input(json!({}))));
        assert!(
            matches!(r, Err(Failure::Runtime(ref m)) if m.contains("U1001")),
            "{r:?}"
        );
    }

    #[test]
    fn runaway_loops_are_stopped() {
        // Tail recursion runs in constant stack: only the time limit stops it.
        let r = on_big_stack(|| truthy("($f := function($x){$f($x)}; $f(1))", &input(json!({}))));
        assert!(matches!(r, Err(Failure::Runtime(_))), "{r:?}");
    }

    #[test]
    fn huge_results_are_refused() {
        let i = input(json!({}));
        let r = on_big_stack(|| value("[1..100000000]", &i));
        assert!(matches!(r, Err(Failure::Runtime(_))), "{r:?}");
    }

    #[test]
    fn values_convert() {
        let i = input(json!({"b": 1, "a": [1.5, "x", null, true]}));
        assert_eq!(
            on_big_stack(|| value("$", &i)),
            Ok(Some(json!({"a": [1.5, "x", null, true], "b": 1})))
        );
        assert_eq!(on_big_stack(|| value("missing", &i)), Ok(None));
        assert_eq!(
            on_big_stack(|| value("[1..3]", &i)),
            Ok(Some(json!([1, 2, 3])))
        );
        assert_eq!(on_big_stack(|| value("1/4", &i)), Ok(Some(json!(0.25))));
    }

    #[test]
    fn empty_expression_is_a_syntax_error() {
        assert!(matches!(check_syntax("  "), Err(Failure::Syntax(..))));
    }
}
