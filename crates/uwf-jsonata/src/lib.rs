//! A deterministic JSONata 2.x evaluator.
//!
//! ```
//! use uwf_jsonata::{EvalOptions, Expression};
//! let e = Expression::parse("$sum(items.price)").unwrap();
//! let input = serde_json::json!({"items": [{"price": 2}, {"price": 3}]});
//! let out = e.evaluate(Some(&input), &EvalOptions::default()).unwrap();
//! assert_eq!(out, Some(serde_json::json!(5)));
//! ```
//!
//! Objects keep insertion order (so `$keys`, `$string`, `*` and `$each` are
//! deterministic), evaluation is bounded by [`Limits`] (depth, time, result
//! size), and errors carry JSONata's error codes and byte positions.
//!
//! # Conformance
//!
//! `tests/it/suite.rs` runs all 1,602 cases of the official JSONata test suite
//! (shipped in the `jsonata-rs` crate package, a dev-dependency); all pass
//! except those listed with a reason in `tests/exclusions.txt` (lone UTF-16
//! surrogates in string literals, which Rust strings cannot hold).
//! Differences worth knowing:
//!
//! - `$eval` is implemented (the suite tests it); the evaluated text sees the
//!   top-level bindings, not the caller's local variables. Embedders that
//!   must not evaluate strings as code should reject it statically (walk
//!   [`Expression::ast`] for a call of `$eval`).
//! - `$now`, `$millis`, `$random`, `$uuid`, `$shuffle` are nondeterministic.
//! - Functions in a JSON result ([`Value::to_json`]) become `""`, as `$string`
//!   renders them.
//! - Error positions are byte offsets of the offending token's start.
//! - `tests/it/differential.rs` compares evaluation with the reference
//!   implementation (jsonata-js 2.2.2) on generated expressions and data.
//!   Six divergences are deliberate: a `/` right after the `)` of an
//!   order-by (`x^(k) / 2`) divides here, while jsonata-js lexes it as the
//!   start of a regular expression and reports a syntax error (S0302); when
//!   several items of one array constructor fail, the first item's error is
//!   reported, while jsonata-js evaluates the items concurrently and reports
//!   whichever failure settles first; a group-by applied to a function
//!   call in a lambda body's tail position (`function($v){ $f($v){k: v} }`)
//!   is applied here, while jsonata-js drops it; in `[..., *, ...].b`
//!   (an array constructor holding `*` that starts a path) the step applies
//!   to the array's items, while jsonata-js applies it to the input and a
//!   stray `true`; `$power` is the platform's correctly rounded `pow`,
//!   which can be one unit in the last place away from V8's `Math.pow`
//!   (`$power(0.5, 2.5)`); and `$replace(s, 'l', nothing)` inserts nothing
//!   where jsonata-js inserts the text "undefined". Where jsonata-js crashes
//!   with an internal JavaScript error (e.g. `$split(s, nothing)`) or never
//!   answers, there is no reference answer; this crate returns a JSONata
//!   result (here `[]`). `$round` with a non-integer precision truncates the
//!   precision and a zero divisor gives a non-finite number (rendered as
//!   `null`, D1001 in later arithmetic), where jsonata-js computes `NaN` or
//!   `Infinity`, which are not JSON values; the differential test does not
//!   generate those.
//!
//! # Recursion and the native stack
//!
//! The parser and evaluator are recursive. Neither can overflow the native
//! stack on hostile input: each tracks how much stack it has used since it
//! started (the address of a local variable against the one at entry) and
//! fails with `U1001` beyond a budget — [`parser::MAX_PARSE_STACK`] for
//! parsing, [`Limits::max_stack`] for evaluation (1 MiB by default, so the
//! defaults are safe even on Rust's 2 MiB default thread stacks). Parse
//! nesting ([`parser::MAX_PARSE_DEPTH`], [`parser::MAX_TREE_DEPTH`]),
//! evaluation depth ([`Limits::max_depth`]), value nesting
//! ([`MAX_VALUE_DEPTH`], [`MAX_INPUT_DEPTH`]), wall-clock time and range
//! sizes are bounded too. Tail calls in lambda bodies run in constant stack.
//!
//! Measured (`cargo test`, dev profile, which builds this crate at
//! `opt-level = 1`, see the workspace `Cargo.toml`): one level of non-tail
//! user-function recursion (`$f := function($n){ $n = 0 ? 0 : 1 + $f($n - 1) }`)
//! costs about 4 KiB, so the default 1 MiB budget allows about 250 nested
//! calls (200 succeed, 300 fail with `U1001`; the official suite needs fewer),
//! while tail-recursive functions run to any depth within the time limit; one
//! parse nesting level costs up to ~5 KiB, so the 200-level parse limit fits
//! in 1 MiB. An unoptimised build uses roughly ten times more per level: the
//! budgets still stop it with `U1001` before the stack runs out, only sooner.
//! Callers that need deeper recursion should evaluate on a thread with a big
//! stack (the moderator uses 256 MiB) and raise `max_stack` and `max_depth`.

pub mod ast;
mod error;
mod eval;
mod functions;
pub mod parser;
mod picture;
pub mod signature;
mod value;

use std::rc::Rc;

use indexmap::IndexMap;

pub use error::Error;
pub use value::{Func, Hasher, Object, Value, flags, object_with_capacity};

/// Deepest nesting of arrays and objects an evaluation may build (`U1001`
/// beyond). Keeps the recursive value walks (JSON conversion, equality,
/// `$string`, `**`, drop) within a small stack.
pub const MAX_VALUE_DEPTH: u32 = 1000;

/// Deepest input JSON accepted (`U1001` beyond); below [`MAX_VALUE_DEPTH`] so
/// that expressions can still wrap the input in a few levels of structure.
pub const MAX_INPUT_DEPTH: usize = 900;

/// Resource limits for one evaluation.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Maximum evaluation depth (nested sub-expression evaluations, including
    /// non-tail function calls); exceeding it is error `U1001`.
    pub max_depth: usize,
    /// Wall-clock limit; exceeding it is error `U1001`.
    pub time_limit: Option<std::time::Duration>,
    /// Largest sequence the range operator (and `$pad`) may allocate (`D2014`).
    pub max_result_items: usize,
    /// Native stack (bytes) the evaluation may use beyond the point where it
    /// started; exceeding it is error `U1001`. This bounds recursion whatever
    /// path it takes (lambdas, higher-order builtins, nested paths). The default
    /// fits Rust's 2 MiB default thread stack; raise it together with
    /// `max_depth` only when evaluating on a thread with a larger stack.
    pub max_stack: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 1000,
            time_limit: Some(std::time::Duration::from_secs(2)),
            max_result_items: 10_000_000,
            max_stack: 1024 * 1024,
        }
    }
}

/// Options for [`Expression::evaluate`].
#[derive(Debug, Clone, Default)]
pub struct EvalOptions {
    /// Variables bound before evaluation (names without `$`).
    pub bindings: IndexMap<String, serde_json::Value>,
    /// Expressions evaluated, in order, in the root environment before the
    /// main expression, each bound to its name (without `$`): typically a
    /// `function(…){…}` lambda, so that a host can offer its own functions
    /// written in JSONata. Each sees the input, [`bindings`](Self::bindings)
    /// and the definitions before it, and may call itself recursively.
    pub definitions: Vec<(String, Expression)>,
    /// Resource limits.
    pub limits: Limits,
}

/// A parsed JSONata expression.
#[derive(Debug, Clone)]
pub struct Expression {
    source: String,
    ast: ast::Node,
}

impl Expression {
    /// Parses an expression; syntax errors have codes `S0xxx` and a byte position.
    pub fn parse(source: &str) -> Result<Expression, Error> {
        let ast = parser::parse(source)?;
        Ok(Expression {
            source: source.to_string(),
            ast,
        })
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The processed syntax tree.
    pub fn ast(&self) -> &ast::Node {
        &self.ast
    }

    /// Evaluates against `input` (`None` is JSONata's `undefined`); `Ok(None)` is an
    /// undefined result.
    pub fn evaluate(
        &self,
        input: Option<&serde_json::Value>,
        options: &EvalOptions,
    ) -> Result<Option<serde_json::Value>, Error> {
        Ok(self.evaluate_value(input, options)?.to_json())
    }

    /// Evaluates and returns the internal [`Value`] (functions, sequences kept).
    pub fn evaluate_value(
        &self,
        input: Option<&serde_json::Value>,
        options: &EvalOptions,
    ) -> Result<Value, Error> {
        self.evaluate_input(&Input::new(input)?, options)
    }

    /// Evaluates against an [`Input`] converted beforehand, so that several
    /// expressions over one document convert it once. Nothing of the
    /// evaluation outlives it but its result: the scopes it bound values in
    /// are emptied at the end (a lambda returned as the result keeps its
    /// code, not those bindings).
    pub fn evaluate_input(&self, input: &Input, options: &EvalOptions) -> Result<Value, Error> {
        let input = input.0.clone();
        let env = Rc::new(eval::Env::default());
        env.bind("$", input.clone());
        for (k, v) in &options.bindings {
            env.bind(k, Value::from_json(v));
        }
        let mut ev = eval::Evaluator::new(&options.limits);
        ev.set_root_env(env.clone());
        for (name, definition) in &options.definitions {
            let value = ev.eval(&definition.ast, &input, &env)?;
            env.bind(name, strip_sequence(value));
        }
        let result = ev.eval(&self.ast, &input, &env)?;
        Ok(strip_sequence(result))
    }
}

/// An input document converted to a [`Value`] once; evaluations share it
/// (values are immutable, so no evaluation can change it for the next).
#[derive(Debug, Clone, Default)]
pub struct Input(Value);

impl Input {
    /// Converts `json` (`None` is JSONata's `undefined`), refusing documents
    /// nested deeper than [`MAX_INPUT_DEPTH`] (`U1001`).
    pub fn new(json: Option<&serde_json::Value>) -> Result<Input, Error> {
        if let Some(j) = json
            && json_depth(j) > MAX_INPUT_DEPTH
        {
            return Err(Error::new(
                "U1001",
                format!("Input JSON is nested more than {MAX_INPUT_DEPTH} levels deep"),
            ));
        }
        let mut input = json.map(Value::from_json).unwrap_or_default();
        // A top-level array is the context of a path as a whole.
        if let Value::Array(items, _, _) = &input {
            input = Value::arr(
                Rc::new(vec![Value::arr(items.clone(), 0)]),
                flags::SEQUENCE | flags::OUTER_WRAPPER,
            );
        }
        Ok(Input(input))
    }
}

impl Input {
    /// An input from a value already converted (for callers that build the
    /// document themselves, e.g. from parts converted once); refuses
    /// documents nested deeper than [`MAX_INPUT_DEPTH`] (`U1001`), like
    /// [`Input::new`].
    pub fn from_value(value: Value) -> Result<Input, Error> {
        if value.depth() as usize > MAX_INPUT_DEPTH {
            return Err(Error::new(
                "U1001",
                format!("Input JSON is nested more than {MAX_INPUT_DEPTH} levels deep"),
            ));
        }
        let input = match &value {
            // A top-level array is the context of a path as a whole.
            Value::Array(items, _, _) => Value::arr(
                Rc::new(vec![Value::arr(items.clone(), 0)]),
                flags::SEQUENCE | flags::OUTER_WRAPPER,
            ),
            _ => value,
        };
        Ok(Input(input))
    }
}

/// Nesting depth of a JSON value, computed without recursion.
fn json_depth(v: &serde_json::Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            serde_json::Value::Array(a) => {
                max = max.max(d + 1);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            serde_json::Value::Object(o) => {
                max = max.max(d + 1);
                stack.extend(o.values().map(|x| (x, d + 1)));
            }
            _ => {}
        }
    }
    max
}

fn strip_sequence(v: Value) -> Value {
    match v {
        Value::Array(items, f, _) if f & flags::SEQUENCE != 0 => {
            Value::arr(items, f & !flags::SEQUENCE)
        }
        v => v,
    }
}

/// The signature of builtin `name` (without `$`), e.g. `"<n-:n>"` for `abs`.
pub fn builtin_signature(name: &str) -> Option<&'static str> {
    functions::BUILTINS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// Names of all builtin functions (without `$`).
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    functions::BUILTINS.iter().map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn run(src: &str, input: serde_json::Value) -> Result<Option<serde_json::Value>, Error> {
        Expression::parse(src)?.evaluate(Some(&input), &EvalOptions::default())
    }

    fn ok(src: &str, input: serde_json::Value) -> serde_json::Value {
        run(src, input).expect("evaluates").expect("defined")
    }

    fn code(src: &str, input: serde_json::Value) -> String {
        run(src, input).expect_err("fails").code
    }

    #[test]
    fn numbers_follow_javascript_doubles() {
        assert_eq!(ok("0.1 + 0.2", json!(null)), json!(0.30000000000000004));
        assert_eq!(ok("$string(0.1 + 0.2)", json!(null)), json!("0.3"));
        assert_eq!(ok("$string(1e21)", json!(null)), json!("1e21"));
        assert_eq!(ok("$round(2.5)", json!(null)), json!(2));
        assert_eq!(ok("$round(3.5)", json!(null)), json!(4));
        assert_eq!(ok("$round(1.005, 2)", json!(null)), json!(1));
        assert_eq!(code("1e300 * 1e300 + 1", json!(null)), "D1001");
    }

    #[test]
    fn sequences_and_paths() {
        let data = json!({"a": [{"b": 1}, {"b": [2, 3]}], "c": {"d": "x"}});
        assert_eq!(ok("a.b", data.clone()), json!([1, 2, 3]));
        assert_eq!(ok("a[0].b", data.clone()), json!(1));
        assert_eq!(ok("a[0].b[]", data.clone()), json!([1]));
        assert_eq!(ok("c.d", data.clone()), json!("x"));
        assert_eq!(run("c.nothing", data.clone()).unwrap(), None);
        assert_eq!(ok("**.d", data.clone()), json!("x"));
        assert_eq!(ok("$count(a)", data), json!(2));
    }

    #[test]
    fn comparisons_type_errors_and_undefined() {
        assert_eq!(code("1 < 'a'", json!(null)), "T2009");
        assert_eq!(code("{} < 1", json!(null)), "T2010");
        assert_eq!(run("nothing < 1", json!({})).unwrap(), None);
        assert_eq!(ok("'a' < 'b'", json!(null)), json!(true));
        let e = run("1 + 'a'", json!(null)).expect_err("fails");
        assert_eq!((e.code.as_str(), e.position), ("T2002", Some(2)));
    }

    #[test]
    fn boolean_operators_cast() {
        assert_eq!(ok("[] or 'x'", json!(null)), json!(true));
        assert_eq!(ok("nothing and true", json!({})), json!(false));
        assert_eq!(ok("nothing ?? 'd'", json!({})), json!("d"));
        assert_eq!(ok("'' ?: 'e'", json!({})), json!("e"));
        assert_eq!(ok("2 in [1, 2]", json!(null)), json!(true));
    }

    #[test]
    fn lambdas_closures_partials_and_chains() {
        assert_eq!(
            ok(
                "($add := function($a, $b) { $a + $b }; $inc := $add(?, 1); $inc(41))",
                json!(null)
            ),
            json!(42)
        );
        assert_eq!(
            ok("'abc' ~> $uppercase ~> $substring(1)", json!(null)),
            json!("BC")
        );
        assert_eq!(
            ok(
                "($f := $uppercase ~> $substring(?, 0, 1); $f('xyz'))",
                json!(null)
            ),
            json!("X")
        );
        assert_eq!(code("function($x)<n:n>{$x}('a')", json!(null)), "T0410");
    }

    #[test]
    fn deep_tail_recursion_does_not_hit_the_depth_limit() {
        let src = "($loop := function($n, $acc) { $n = 0 ? $acc : $loop($n - 1, $acc + 1) }; $loop(20000, 0))";
        assert_eq!(ok(src, json!(null)), json!(20000));
    }

    #[test]
    fn runaway_recursion_and_loops_are_bounded() {
        let src = "($f := function($n) { 1 + $f($n + 1) }; $f(0))";
        assert_eq!(code(src, json!(null)), "U1001");
        // recursion through a higher-order builtin is bounded by the stack budget
        let src = "($f := function($n) { $map([1], function($x) { $f($n) }) }; $f(1))";
        assert_eq!(code(src, json!(null)), "U1001");
        let src = "($f := function($n) { $n.a.($f($n)) }; $f({'a': 1}))";
        assert_eq!(code(src, json!(null)), "U1001");
        let opts = EvalOptions {
            limits: Limits {
                time_limit: Some(std::time::Duration::from_millis(50)),
                ..Limits::default()
            },
            ..EvalOptions::default()
        };
        let forever = Expression::parse("($f := function() { $f() }; $f())").unwrap();
        assert_eq!(forever.evaluate(None, &opts).unwrap_err().code, "U1001");
        assert_eq!(code("[1..20000000]", json!(null)), "D2014");
    }

    #[test]
    fn deeply_nested_input_is_handled() {
        let mut v = json!(1);
        for _ in 0..MAX_INPUT_DEPTH {
            v = json!({ "a": v });
        }
        assert_eq!(ok("$count(**)", v), json!(MAX_INPUT_DEPTH + 1));
    }

    #[test]
    fn value_nesting_is_bounded() {
        let src = "$reduce([1..100000], function($a, $v) { {'a': $a} }, 1)";
        assert_eq!(code(src, json!(null)), "U1001");
        let src = "$reduce([1..100000], function($a, $v) { $zip($a) }, [1])";
        assert_eq!(code(src, json!(null)), "U1001");
        let mut v = json!(1);
        for _ in 0..(MAX_INPUT_DEPTH + 1) {
            v = json!([v]);
        }
        assert_eq!(code("$", v), "U1001");
    }

    #[test]
    fn sort_is_stable_and_order_by_works() {
        let data =
            json!([{"k": 1, "v": "a"}, {"k": 0, "v": "b"}, {"k": 1, "v": "c"}, {"k": 0, "v": "d"}]);
        assert_eq!(ok("$^(k).v", data.clone()), json!(["b", "d", "a", "c"]));
        assert_eq!(
            ok("$sort($, function($l, $r) { $l.k > $r.k }).v", data.clone()),
            json!(["b", "d", "a", "c"])
        );
        assert_eq!(ok("$^(>k).v", data), json!(["a", "c", "b", "d"]));
    }

    #[test]
    fn group_by_keeps_first_seen_order() {
        let data = json!([{"t": "z", "n": 1}, {"t": "a", "n": 2}, {"t": "z", "n": 3}]);
        let out = ok("${t: $sum(n)}", data);
        assert_eq!(serde_json::to_string(&out).unwrap(), r#"{"z":4,"a":2}"#);
    }

    #[test]
    fn definitions_are_functions_of_the_host() {
        let def = |name: &str, src: &str| (name.to_string(), Expression::parse(src).unwrap());
        let opts = EvalOptions {
            bindings: [("base".to_string(), json!(10))].into_iter().collect(),
            definitions: vec![
                def("add", "function($n)<n:n>{ $n + $base }"),
                def("twice", "function($n){ $add($add($n)) }"),
                def("fact", "function($n){ $n <= 1 ? 1 : $n * $fact($n - 1) }"),
                def("root", "function(){ $$.x }"),
            ],
            ..EvalOptions::default()
        };
        let eval = |src: &str| {
            Expression::parse(src)
                .unwrap()
                .evaluate(Some(&json!({"x": 7})), &opts)
        };
        assert_eq!(eval("$add(1)").unwrap(), Some(json!(11)));
        assert_eq!(eval("$twice(1)").unwrap(), Some(json!(21)));
        assert_eq!(eval("$fact(5)").unwrap(), Some(json!(120)));
        assert_eq!(eval("[1].$root()").unwrap(), Some(json!(7)));
        assert_eq!(eval("$add('a')").unwrap_err().code, "T0410");
    }

    /// A lambda bound in its own scope (the host's definitions, `$f :=
    /// function…`) is a reference cycle; the evaluation must still let go
    /// of the input and of every scope when it ends, or a long-lived
    /// process keeps every document it evaluated.
    #[test]
    fn an_evaluation_keeps_nothing_of_its_input() {
        let def = |name: &str, src: &str| (name.to_string(), Expression::parse(src).unwrap());
        let opts = EvalOptions {
            definitions: vec![
                def("last", "function($r){ $$.steps[role = $r][-1].output }"),
                def("fact", "function($n){ $n <= 1 ? 1 : $n * $fact($n - 1) }"),
            ],
            ..EvalOptions::default()
        };
        let input = Input::new(Some(&json!({"steps": [{"role": "a", "output": 1}]}))).unwrap();
        let Value::Object(doc, _) = &input.0 else {
            panic!("an object")
        };
        let alone = Rc::strong_count(doc);
        for src in [
            "$last('a')",
            "$fact(4)",
            "($f := function($n){ $n = 0 ? $$ : $f($n - 1) }; $f(3).steps[0].output)",
            "($g := function(){ $ }; ($h := function(){ $g() }; $h()).steps ~> $count)",
            "$eval('($k := function(){ $$ }; $k().steps ~> $count)')",
            "[1, 2, 3].($x := function(){ $$ }; $x()) ~> $count",
            "$nope(",
            "$fact('x')",
            "function($x){ $x }",
        ] {
            let e = match Expression::parse(src) {
                Ok(e) => e,
                Err(_) => continue,
            };
            let result = e.evaluate_input(&input, &opts);
            drop(result);
            assert_eq!(Rc::strong_count(doc), alone, "{src} kept the input");
        }
    }

    #[test]
    fn bindings_and_context_variables() {
        let opts = EvalOptions {
            bindings: [("limit".to_string(), json!(3))].into_iter().collect(),
            ..EvalOptions::default()
        };
        let e = Expression::parse("$limit * 2").unwrap();
        assert_eq!(e.evaluate(None, &opts).unwrap(), Some(json!(6)));
        let data = json!({"xs": [10, 20, 30]});
        assert_eq!(ok("xs#$i[$i > 0]", data.clone()), json!([20, 30]));
        assert_eq!(ok("xs@$x.{'v': $x}", data).get(0), Some(&json!({"v": 10})));
    }

    #[test]
    fn evaluate_value_keeps_functions_and_casts() {
        let e = Expression::parse("function($x) { $x }").unwrap();
        let v = e.evaluate_value(None, &EvalOptions::default()).unwrap();
        assert!(v.is_function());
        assert!(!v.is_truthy());
        let e = Expression::parse("[0, '', 'x']").unwrap();
        assert!(
            e.evaluate_value(None, &EvalOptions::default())
                .unwrap()
                .is_truthy()
        );
    }

    #[test]
    fn expressions_can_move_to_evaluation_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Expression>();
        send_sync::<Error>();
        send_sync::<EvalOptions>();
    }

    #[test]
    fn errors_point_into_the_source() {
        let e = run("$substring(\"a\", \"b\")", json!(null)).expect_err("fails");
        assert_eq!((e.code.as_str(), e.position), ("T0410", Some(10)));
        let e = run("a.b.$uppercase(c)", json!({"a": {"b": {"c": 1}}})).expect_err("fails");
        assert_eq!(e.code, "T0410");
        assert_eq!(e.position, Some(14));
        let e = run("$unknown(1)", json!(null)).expect_err("fails");
        assert_eq!((e.code.as_str(), e.position), ("T1006", Some(8)));
    }

    #[test]
    fn builtin_table_is_consistent() {
        assert_eq!(builtin_signature("abs"), Some("<n-:n>"));
        assert_eq!(builtin_signature("nope"), None);
        for name in builtin_names() {
            let sig = builtin_signature(name).expect("signature");
            signature::Signature::parse(sig, 0).expect("signature parses");
        }
        assert!(builtin_names().any(|n| n == "formatNumber"));
    }

    #[test]
    fn user_matchers_that_misbehave_do_not_crash() {
        let src = "($m := function($s) { {'match': 'b', 'start': 3, 'end': 1, 'groups': [], 'next': function() { {'match': 'a', 'start': 0, 'end': 1, 'groups': []} }} }; [$replace('abcd', $m, 'X'), $split('abcd', $m), $match('abcd', $m).match])";
        assert!(run(src, json!(null)).is_ok());
        assert_eq!(code("$split('abc', $uppercase)", json!(null)), "T1010");
    }

    #[test]
    fn transforms_copy_and_modify() {
        let data = json!({"o": [{"p": 1, "q": 2}, {"p": 3}]});
        assert_eq!(
            ok("$ ~> |o|{'r': p * 10}, 'q'|", data.clone()),
            json!({"o": [{"p": 1, "r": 10}, {"p": 3, "r": 30}]})
        );
        assert_eq!(ok("o[0].q", data), json!(2));
    }

    /// Behaviours found by the differential test against jsonata-js 2.2.2.
    #[test]
    fn matches_the_reference_on_differential_findings() {
        let none = |src: &str, input: serde_json::Value| {
            assert_eq!(run(src, input).expect("evaluates"), None, "{src}")
        };
        // `-<number>` folds into the literal and keeps its predicates.
        assert_eq!(ok("-1[$ < 0]", json!(null)), json!(-1));
        none("-1.5[false]", json!(null));
        assert_eq!(ok("-1.5[-1.5] ~> $append(-5)", json!(null)), json!(-5));
        // A tail call's sequence result is a value for $map: not unwrapped.
        assert_eq!(
            ok(
                "$map([1], function($v){ $map([1], function($w){ $w }) })",
                json!(null)
            ),
            json!([1])
        );
        assert_eq!(
            ok(
                "$map([1], function($v){ $filter([1], function($w){ false }) })",
                json!(null)
            ),
            json!([])
        );
        // Order-by keys are evaluated and type-checked only when compared.
        assert_eq!(ok("[{'a': true}]^(a)", json!(null)), json!({"a": true}));
        assert_eq!(
            ok("[{'a': null}, {}]^(a)", json!(null)),
            json!([{"a": null}, {}])
        );
        assert_eq!(
            code("[{'a': 'x'}, {'a': 1}, {'a': true}]^(a)", json!(null)),
            "T2008"
        );
        assert_eq!(
            ok("[{'a': 1}, {'a': 2}]^(a, $error('x'))", json!(null)),
            json!([{"a": 1}, {"a": 2}])
        );
        // A computed predicate is evaluated even on a missing value.
        assert_eq!(code("nothing[$error('x')]", json!({})), "D3137");
        assert_eq!(code("nothing[true][$error('x')]", json!({})), "D3137");
        none("nothing[0][$error('x')]", json!({}));
        // A missing exponent is NaN.
        assert_eq!(code("$power(2, nothing)", json!({})), "D3061");
        assert_eq!(code("$power(1, nothing)", json!({})), "D3061");
        assert_eq!(ok("$substring('hello', -2.5, 2)", json!(null)), json!("l"));
        assert_eq!(
            ok("$substring('hello', 1.5, 2.5)", json!(null)),
            json!("ell")
        );
        assert_eq!(ok("$substring('hello', -1.5)", json!(null)), json!("o"));
        none("$power(nothing, 2)", json!({}));
        // $spread of a non-empty array is an array.
        assert_eq!(ok("$spread(['hello'])", json!(null)), json!(["hello"]));
        none("$spread([])", json!(null));
        // `*` flattening an array value gives a plain array.
        assert_eq!(ok("*", json!({"a": [1]})), json!([1]));
        assert_eq!(ok("*", json!({"a": []})), json!([]));
        assert_eq!(ok("*", json!({"b": 2})), json!(2));
        assert_eq!(ok("a.*", json!({"a": [[1]]})), json!(1));
        // Any number literal is an index predicate, whatever is applied to it.
        assert_eq!(ok("1[0.5[false]]", json!(null)), json!(1));
        // A $sort comparator's answer is read with JavaScript truthiness.
        assert_eq!(
            ok("$sort([1, 2, 3], function($l, $r){ [] })", json!(null)),
            json!([3, 2, 1])
        );
        // The right side of `??` and `?:` extends as far as it can.
        assert_eq!(ok("1 ?? 2 or true", json!(null)), json!(1));
        assert_eq!(ok("0 ?? 0 ~> $append(0)", json!(null)), json!(0));
        assert_eq!(ok("1 + nothing ?? 4", json!({})), json!(4));
        // $keys looks into nested arrays.
        assert_eq!(
            ok("$keys([[{'a': 1}, [{'b': 2}]], {'c': 3}])", json!(null)),
            json!(["a", "b", "c"])
        );
        // Membership compares objects by identity.
        assert_eq!(ok("{} in [{}]", json!(null)), json!(false));
        assert_eq!(ok("a in [a]", json!({"a": {"x": 1}})), json!(true));
        assert_eq!(ok("$string in [$string]", json!(null)), json!(true));
        // An array of indexes selects an item once per matching index.
        assert_eq!(ok("[5, 6][[0, 0, 1]]", json!(null)), json!([5, 5, 6]));
        // Missing values kept by a predicate stay sequence members.
        assert_eq!(code("-a.c[true]", json!({"a": [null, null]})), "D1002");
        assert_eq!(
            ok("$count(a.c[true])", json!({"a": [null, null]})),
            json!(2)
        );
        assert_eq!(code("$sum(a.c[true])", json!({"a": [null, null]})), "T0412");
        // Syntax errors found after the parse are reported in tree order.
        for (src, c) in [
            ("0.a +", "S0213"),
            ("x{a:0}{a: 0.a}", "S0210"),
            ("[0.a, 0{a: 0}{a: 0}]", "S0213"),
            ("0{a: 0.a}[0]", "S0213"),
            ("0{a:0}[0]", "S0209"),
            ("(1 +", "S0203"),
        ] {
            assert_eq!(code(src, json!(null)), c, "{src}");
        }
        // An indexed array item is the (plain) array itself.
        let data = json!({"b": [[], {"c": null}], "x": [[1, 2], [3]]});
        assert_eq!(ok("b[0] ~> $append(9)", data.clone()), json!([9]));
        assert_eq!(ok("x[1]", data.clone()), json!([3]));
        assert_eq!(ok("x[0][1]", data.clone()), json!(2));
        assert_eq!(code("-b[0]", data), "D1002");
        // Higher-order functions call with a null context; $keys and $each
        // of a non-object are empty sequences.
        assert_eq!(
            ok("$map([1], function($v){ $string() })", json!("s")),
            json!("null")
        );
        assert_eq!(
            ok("$map([1], function($v){ $keys(1) })", json!(null)),
            json!([])
        );
        assert_eq!(
            ok(
                "$map([1], function($v){ $each(nothing, $string) })",
                json!({})
            ),
            json!([])
        );
    }
}
