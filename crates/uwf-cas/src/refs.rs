//! Finding the references inside a payload by walking it alongside its schema.
//!
//! A string is a reference when a subschema that applies to its location
//! declares `format: cas_ref` and the string is a well-formed hash. Branches
//! of `anyOf`/`oneOf`/`allOf` and both `then` and `else` are all followed
//! (a union): the payload already passed validation, so only contrived
//! schemas could make a plain string look like a reference.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::Hash;
use crate::schema::resolve_pointer;

/// A reference found in a payload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Ref {
    /// JSON Pointer to the referencing string inside the payload.
    pub path: String,
    /// The referenced node.
    pub hash: Hash,
}

/// `$ref` hops allowed without descending into the payload; more means a
/// cycle such as `{"$ref": "#"}` at the root.
const MAX_HOPS: u32 = 64;

/// The `$ref` chain of a schema loops without consuming data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefCycle;

/// Collects the references of `payload` as typed by `schema`, in document
/// order, without duplicates.
pub fn collect(schema: &Value, payload: &Value) -> Result<Vec<Ref>, RefCycle> {
    let mut w = Walker {
        root: schema,
        regexes: HashMap::new(),
        out: Vec::new(),
        seen: HashSet::new(),
    };
    w.visit(schema, payload, &mut String::new(), 0)?;
    Ok(w.out)
}

struct Walker<'a> {
    root: &'a Value,
    regexes: HashMap<&'a str, Option<fancy_regex::Regex>>,
    out: Vec<Ref>,
    seen: HashSet<Ref>,
}

impl<'a> Walker<'a> {
    fn matches(&mut self, pattern: &'a str, key: &str) -> bool {
        let re = self
            .regexes
            .entry(pattern)
            .or_insert_with(|| fancy_regex::Regex::new(pattern).ok());
        re.as_ref()
            .is_some_and(|re| re.is_match(key).unwrap_or(false))
    }

    fn visit(
        &mut self,
        schema: &'a Value,
        inst: &Value,
        path: &mut String,
        hops: u32,
    ) -> Result<(), RefCycle> {
        let Some(s) = schema.as_object() else {
            return Ok(());
        };

        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            if hops >= MAX_HOPS {
                return Err(RefCycle);
            }
            if let Some(target) = resolve_pointer(self.root, r) {
                self.visit(target, inst, path, hops + 1)?;
            }
        }
        for kw in ["allOf", "anyOf", "oneOf"] {
            if let Some(branches) = s.get(kw).and_then(Value::as_array) {
                for b in branches {
                    self.visit(b, inst, path, hops + 1)?;
                }
            }
        }
        for kw in ["then", "else"] {
            if let Some(b) = s.get(kw) {
                self.visit(b, inst, path, hops + 1)?;
            }
        }

        match inst {
            Value::String(text) => {
                if s.get("format").and_then(Value::as_str) == Some("cas_ref")
                    && Hash::is_cas_ref(text)
                    && let Ok(hash) = text.parse::<Hash>()
                {
                    let r = Ref {
                        path: path.clone(),
                        hash,
                    };
                    if self.seen.insert(r.clone()) {
                        self.out.push(r);
                    }
                }
            }
            Value::Object(map) => {
                let props = s.get("properties").and_then(Value::as_object);
                let patterns = s.get("patternProperties").and_then(Value::as_object);
                let additional = s.get("additionalProperties");
                for (key, child) in map {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    let mut matched = false;
                    if let Some(sub) = props.and_then(|p| p.get(key)) {
                        matched = true;
                        self.visit(sub, child, path, 0)?;
                    }
                    if let Some(pats) = patterns {
                        for (pat, sub) in pats {
                            if self.matches(pat, key) {
                                matched = true;
                                self.visit(sub, child, path, 0)?;
                            }
                        }
                    }
                    if !matched && let Some(sub) = additional {
                        self.visit(sub, child, path, 0)?;
                    }
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                let prefix = s.get("prefixItems").and_then(Value::as_array);
                let rest = s.get("items");
                for (i, child) in items.iter().enumerate() {
                    let sub = match prefix.and_then(|p| p.get(i)) {
                        Some(p) => Some(p),
                        None => rest,
                    };
                    if let Some(sub) = sub {
                        let len = path.len();
                        path.push('/');
                        path.push_str(&i.to_string());
                        self.visit(sub, child, path, 0)?;
                        path.truncate(len);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const A: &str = "0000000000001";
    const B: &str = "0000000000002";
    const C: &str = "0000000000003";

    fn hashes(schema: Value, payload: Value) -> Vec<(String, String)> {
        collect(&schema, &payload)
            .unwrap_or_else(|_| panic!("cycle"))
            .into_iter()
            .map(|r| (r.path, r.hash.to_string()))
            .collect()
    }

    fn r() -> Value {
        json!({"type": "string", "format": "cas_ref"})
    }

    #[test]
    fn every_keyword_is_followed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "p": r(),
                "plain": {"type": "string"},
                "arr": {"type": "array", "prefixItems": [r(), {"type": "string"}], "items": r()},
                "map": {"type": "object", "additionalProperties": r()},
                "pat": {"type": "object", "patternProperties": {"^ref_": r()}},
                "any": {"anyOf": [{"type": "null"}, r()]},
                "one": {"oneOf": [r(), {"type": "integer"}]},
                "all": {"allOf": [r()]},
                "cond": {"if": {"type": "string"}, "then": r(), "else": {"type": "null"}},
                "local": {"$ref": "#/$defs/link"}
            },
            "$defs": {"link": r()}
        });
        let payload = json!({
            "p": A, "plain": B,
            "arr": [A, B, C],
            "map": {"x": B},
            "pat": {"ref_1": C, "other": A},
            "any": A, "one": B, "all": C, "cond": A, "local": B
        });
        let got = hashes(schema, payload);
        let want: Vec<(String, String)> = [
            ("/p", A),
            ("/arr/0", A),
            ("/arr/2", C),
            ("/map/x", B),
            ("/pat/ref_1", C),
            ("/any", A),
            ("/one", B),
            ("/all", C),
            ("/cond", A),
            ("/local", B),
        ]
        .iter()
        .map(|(p, h)| (p.to_string(), h.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn malformed_and_non_string_values_are_not_refs() {
        let s =
            json!({"type": "array", "items": {"type": ["string", "null"], "format": "cas_ref"}});
        assert_eq!(hashes(s, json!([null, "nope", "0000000000001"])).len(), 1);
    }

    #[test]
    fn recursive_schemas_terminate() {
        let s = json!({"type": "object", "properties": {"link": r(), "next": {"$ref": "#"}}});
        let p = json!({"link": A, "next": {"link": B, "next": {"link": C}}});
        assert_eq!(hashes(s, p).len(), 3);
        assert_eq!(collect(&json!({"$ref": "#"}), &json!({})), Err(RefCycle));
    }

    #[test]
    fn paths_are_escaped() {
        let s = json!({"additionalProperties": r()});
        assert_eq!(hashes(s, json!({"a/b~c": A}))[0].0, "/a~1b~0c");
    }
}
