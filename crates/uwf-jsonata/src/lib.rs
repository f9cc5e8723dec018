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
//! The evaluator is recursive. Parse depth is bounded by
//! [`parser::MAX_PARSE_DEPTH`] and evaluation depth by [`Limits::max_depth`];
//! the defaults fit the 8 MiB main-thread stack of a debug build. Callers
//! that raise `max_depth` should evaluate on a thread with a larger stack.

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
pub use value::{Func, Object, Value, flags};

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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 1000,
            time_limit: Some(std::time::Duration::from_secs(2)),
            max_result_items: 10_000_000,
        }
    }
}

/// Options for [`Expression::evaluate`].
#[derive(Debug, Clone, Default)]
pub struct EvalOptions {
    /// Variables bound before evaluation (names without `$`).
    pub bindings: IndexMap<String, serde_json::Value>,
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
        let mut input = input.map(Value::from_json).unwrap_or_default();
        if let Value::Array(items, _) = &input {
            input = Value::Array(
                Rc::new(vec![Value::Array(items.clone(), 0)]),
                flags::SEQUENCE | flags::OUTER_WRAPPER,
            );
        }
        let env = Rc::new(eval::Env::default());
        env.bind("$", input.clone());
        for (k, v) in &options.bindings {
            env.bind(k, Value::from_json(v));
        }
        let mut ev = eval::Evaluator::new(&options.limits);
        let result = ev.eval(&self.ast, &input, &env)?;
        Ok(strip_sequence(result))
    }
}

fn strip_sequence(v: Value) -> Value {
    match v {
        Value::Array(items, f) if f & flags::SEQUENCE != 0 => {
            if items.len() == 1 && f & flags::KEEP_SINGLETON == 0 {
                items[0].clone()
            } else if items.is_empty() {
                Value::Undefined
            } else {
                Value::Array(items, f & !flags::SEQUENCE)
            }
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
