//! The evaluator's value type.

use std::rc::Rc;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::ast::{LambdaDef, TransformDef};
use crate::eval::Env;

/// Array flags: JSONata distinguishes result *sequences* from JSON arrays.
pub mod flags {
    /// The array is a sequence of results (singletons unwrap, nested sequences flatten).
    pub const SEQUENCE: u8 = 1;
    /// `[]` was used: a singleton sequence stays an array.
    pub const KEEP_SINGLETON: u8 = 2;
    /// Built by an array constructor: not flattened by path steps.
    pub const CONS: u8 = 4;
    /// The top-level input array wrapped into a one-item sequence.
    pub const OUTER_WRAPPER: u8 = 8;
    /// A tuple stream carrying parent (`%`) bindings: items are objects with `@`
    /// (the context) plus binding names.
    pub const TUPLE_STREAM: u8 = 16;
}

/// An object: insertion-ordered map.
pub type Object = IndexMap<String, Value, Hasher>;

/// The hasher of an [`Object`]'s member names: foldhash's, randomly
/// seeded (std's SipHash was most of what building the objects of a long
/// thread's document cost).
pub type Hasher = foldhash::quality::RandomState;

/// Objects with at most this many members are searched by comparing
/// names in order rather than by hashing the name: the objects a thread's
/// history is made of (a step's `role`, `agent`, `output`, …; an output's
/// few fields) are this small, and a search of the history looks a name up
/// in each of them (`steps[output.n = 2]`).
const SCAN_MEMBERS: usize = 8;

/// The member `name` of `object`: the same answer as
/// [`IndexMap::get`], found without hashing in a small object.
pub fn member<'a>(object: &'a Object, name: &str) -> Option<&'a Value> {
    if object.len() <= SCAN_MEMBERS {
        object
            .iter()
            .find_map(|(k, v)| (k.as_str() == name).then_some(v))
    } else {
        object.get(name)
    }
}

/// An empty [`Object`] with room for `n` members.
pub fn object_with_capacity(n: usize) -> Object {
    Object::with_capacity_and_hasher(n, Hasher::default())
}

/// A JSONata value.
#[derive(Clone, Debug, Default)]
pub enum Value {
    /// No value (`undefined`).
    #[default]
    Undefined,
    /// JSON `null`.
    Null,
    /// Boolean.
    Bool(bool),
    /// Number (always a finite double).
    Number(f64),
    /// String.
    String(Rc<str>),
    /// Array or sequence, with [`flags`] and nesting depth (build with [`Value::arr`]).
    Array(Rc<Vec<Value>>, u8, u32),
    /// Object with insertion order and nesting depth (build with [`Value::object`]).
    Object(Rc<Object>, u32),
    /// Function (lambda, builtin, partial application, regex, transform).
    Function(Rc<Func>),
}

/// A callable value.
pub enum Func {
    /// A user lambda with its closure.
    Lambda {
        /// The definition.
        def: Arc<LambdaDef>,
        /// The closure environment.
        env: Rc<Env>,
        /// The context value at definition time.
        input: Value,
    },
    /// A builtin by name.
    Builtin(&'static str),
    /// Partial application: `None` entries are the remaining parameters.
    Partial {
        /// The applied function.
        func: Value,
        /// Arguments, `None` for placeholders.
        args: Vec<Option<Value>>,
    },
    /// A regular expression.
    Regex(Rc<crate::functions::JsRegex>),
    /// A transform `|pattern|update,delete|`.
    Transform {
        /// The definition.
        def: Arc<TransformDef>,
        /// The closure environment.
        env: Rc<Env>,
    },
    /// Composition `f ~> g`.
    Chain(Value, Value),
    /// A pending tail call (internal; never escapes `apply`).
    Thunk(Value, Vec<Value>),
    /// The `next()` of a regex match object: continue matching `text` at `offset`.
    MatchNext(Rc<crate::functions::JsRegex>, Rc<str>, usize),
}

impl std::fmt::Debug for Func {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Func::Lambda { def, .. } => write!(f, "lambda({:?})", def.params),
            Func::Builtin(n) => write!(f, "${n}"),
            Func::Partial { .. } => write!(f, "partial"),
            Func::Regex(r) => write!(f, "/{}/", r.source),
            Func::Transform { .. } => write!(f, "transform"),
            Func::Chain(..) => write!(f, "chain"),
            Func::Thunk(..) => write!(f, "thunk"),
            Func::MatchNext(..) => write!(f, "next"),
        }
    }
}

impl Value {
    /// An array with flags; computes the nesting depth from the items.
    pub fn arr(items: Rc<Vec<Value>>, flags: u8) -> Value {
        let depth = 1 + items.iter().map(Value::depth).max().unwrap_or(0);
        Value::Array(items, flags, depth)
    }

    /// An object from a shared map; computes the nesting depth.
    pub fn obj_rc(o: Rc<Object>) -> Value {
        let depth = 1 + o.values().map(Value::depth).max().unwrap_or(0);
        Value::Object(o, depth)
    }

    /// Nesting depth: 0 for scalars and functions, 1 + the deepest member for
    /// arrays and objects.
    pub fn depth(&self) -> u32 {
        match self {
            Value::Array(_, _, d) | Value::Object(_, d) => *d,
            _ => 0,
        }
    }

    /// A plain array (not a sequence).
    pub fn array(items: Vec<Value>) -> Value {
        Value::arr(Rc::new(items), 0)
    }

    /// A sequence.
    pub fn seq(items: Vec<Value>) -> Value {
        Value::arr(Rc::new(items), flags::SEQUENCE)
    }

    /// A string value.
    pub fn str(s: &str) -> Value {
        Value::String(Rc::from(s))
    }

    /// An object value.
    pub fn object(o: Object) -> Value {
        Value::obj_rc(Rc::new(o))
    }

    /// `undefined`?
    pub fn is_undefined(&self) -> bool {
        matches!(self, Value::Undefined)
    }

    /// An array or sequence?
    pub fn is_array(&self) -> bool {
        matches!(self, Value::Array(..))
    }

    /// A sequence?
    pub fn is_sequence(&self) -> bool {
        matches!(self, Value::Array(_, f, _) if f & flags::SEQUENCE != 0)
    }

    /// A function?
    pub fn is_function(&self) -> bool {
        matches!(self, Value::Function(_))
    }

    /// Array flags (0 for non-arrays).
    pub fn flags(&self) -> u8 {
        match self {
            Value::Array(_, f, _) => *f,
            _ => 0,
        }
    }

    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// JSONata boolean casting (`$boolean`), with `undefined` as false.
    pub fn is_truthy(&self) -> bool {
        match self {
            Value::Undefined | Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => *n != 0.0,
            Value::String(s) => !s.is_empty(),
            Value::Array(items, _, _) => items.iter().any(|v| v.is_truthy()),
            Value::Object(o, _) => !o.is_empty(),
            Value::Function(_) => false,
        }
    }

    /// Converts JSON to a value (arrays are plain arrays).
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
            serde_json::Value::String(s) => Value::str(s),
            serde_json::Value::Array(a) => Value::array(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => Value::object(
                o.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// Converts to JSON; `None` for `undefined`. Undefined array items and object
    /// fields are dropped; functions become `""` (as `$string` renders them).
    pub fn to_json(&self) -> Option<serde_json::Value> {
        Some(match self {
            Value::Undefined => return None,
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => number_to_json(*n),
            Value::String(s) => serde_json::Value::String(s.to_string()),
            Value::Array(items, _, _) => {
                serde_json::Value::Array(items.iter().filter_map(|v| v.to_json()).collect())
            }
            Value::Object(o, _) => serde_json::Value::Object(
                o.iter()
                    .filter_map(|(k, v)| v.to_json().map(|j| (k.clone(), j)))
                    .collect(),
            ),
            Value::Function(_) => serde_json::Value::String(String::new()),
        })
    }

    /// The JSONata type name (`$type`).
    pub fn type_name(&self) -> Option<&'static str> {
        Some(match self {
            Value::Undefined => return None,
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(..) => "array",
            Value::Object(_, _) => "object",
            Value::Function(_) => "function",
        })
    }

    /// Deep equality (object key order ignored).
    pub fn deep_eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Undefined, Value::Undefined) | (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Number(a), Value::Number(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Array(a, _, _), Value::Array(b, _, _)) => {
                a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.deep_eq(y))
            }
            (Value::Object(a, _), Value::Object(b, _)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(k, v)| b.get(k).map(|w| v.deep_eq(w)).unwrap_or(false))
            }
            (Value::Function(a), Value::Function(b)) => Rc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The items of an array, or the value itself as a one-item slice view.
    pub fn members(&self) -> Vec<Value> {
        match self {
            Value::Undefined => Vec::new(),
            Value::Array(items, _, _) => items.as_ref().clone(),
            v => vec![v.clone()],
        }
    }
}

/// Converts a finite double to a JSON number, as an integer when it is one.
pub fn number_to_json(n: f64) -> serde_json::Value {
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        serde_json::Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`member`] answers as [`IndexMap::get`] does, for objects small
    /// enough to scan and larger ones, names present and absent.
    #[test]
    fn member_finds_what_get_finds() {
        for size in 0..=SCAN_MEMBERS + 3 {
            let mut object = object_with_capacity(size);
            for i in 0..size {
                object.insert(format!("k{i}"), Value::Number(i as f64));
            }
            for name in (0..=size + 1)
                .map(|i| format!("k{i}"))
                .chain(["".into(), "k".into()])
            {
                let found = member(&object, &name).map(|v| v.as_f64());
                assert_eq!(
                    found,
                    object.get(&name).map(|v| v.as_f64()),
                    "{size} {name}"
                );
            }
        }
    }
}
