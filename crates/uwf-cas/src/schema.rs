//! The meta-schema, the supported subset of JSON Schema, and validators.

use std::sync::Arc;

use jsonschema::{Draft, Validator};
use serde_json::{Value, json};

use crate::error::{CasError, Violation};
use crate::{Hash, node};

/// Title of the meta-schema node.
pub const META_TITLE: &str = "Schema";

/// The JSON Schema dialect every schema node is interpreted in.
pub const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Keywords outside the subset that users are likely to try, with the reason.
const REJECTED: &[(&str, &str)] = &[
    (
        "$id",
        "schemas are identified by their hash; `$id` would give them a second identity",
    ),
    (
        "$anchor",
        "only JSON-Pointer `$ref`s within the same schema (`#/...`) are supported",
    ),
    (
        "$dynamicRef",
        "dynamic references are not supported; use `$ref` to `#/$defs/...`",
    ),
    (
        "$dynamicAnchor",
        "dynamic references are not supported; use `$ref` to `#/$defs/...`",
    ),
    (
        "$recursiveRef",
        "recursive references are not supported; use `$ref: \"#\"`",
    ),
    ("$vocabulary", "the dialect is fixed to JSON Schema 2020-12"),
    ("definitions", "use `$defs` (JSON Schema 2020-12)"),
    (
        "dependencies",
        "use `dependentRequired` (JSON Schema 2020-12)",
    ),
    (
        "dependentSchemas",
        "conditional subschemas are limited to `if`/`then`/`else`",
    ),
    ("unevaluatedProperties", "use `additionalProperties`"),
    ("unevaluatedItems", "use `items` with `prefixItems`"),
    (
        "contentEncoding",
        "content vocabularies are not supported; store binary data as its own node",
    ),
    ("contentMediaType", "content vocabularies are not supported"),
    ("contentSchema", "content vocabularies are not supported"),
    (
        "nullable",
        "not JSON Schema (OpenAPI 3.0); use `type: [\"string\", \"null\"]`",
    ),
];

/// The meta-schema: the supported subset of JSON Schema 2020-12, written in
/// that subset, so it validates itself. Its node is self-typed.
pub fn meta_schema() -> Value {
    let schema = json!({ "$ref": "#/$defs/schema" });
    let schema_array = json!({ "type": "array", "minItems": 1, "items": schema });
    let count = json!({ "type": "integer", "minimum": 0 });
    let number = json!({ "type": "number" });
    json!({
        "title": META_TITLE,
        "description": "A uwf type: the subset of JSON Schema 2020-12 that uwf stores and validates. References to other nodes are strings with format cas_ref.",
        "type": "object",
        "additionalProperties": false,
        "patternProperties": { "^x-": true },
        "properties": {
            "$schema": { "const": DIALECT },
            "$comment": { "type": "string" },
            "$defs": { "type": "object", "additionalProperties": schema },
            "$ref": { "type": "string", "pattern": "^#" },
            "title": { "type": "string" },
            "description": { "type": "string" },
            "default": true,
            "examples": { "type": "array" },
            "deprecated": { "type": "boolean" },
            "readOnly": { "type": "boolean" },
            "writeOnly": { "type": "boolean" },
            "type": {
                "anyOf": [
                    { "$ref": "#/$defs/typeName" },
                    { "type": "array", "minItems": 1, "uniqueItems": true, "items": { "$ref": "#/$defs/typeName" } }
                ]
            },
            "enum": { "type": "array" },
            "const": true,
            "properties": { "type": "object", "additionalProperties": schema },
            "patternProperties": {
                "type": "object",
                "propertyNames": { "format": "regex" },
                "additionalProperties": schema
            },
            "additionalProperties": schema,
            "propertyNames": schema,
            "required": { "$ref": "#/$defs/stringSet" },
            "dependentRequired": { "type": "object", "additionalProperties": { "$ref": "#/$defs/stringSet" } },
            "minProperties": count,
            "maxProperties": count,
            "items": schema,
            "prefixItems": schema_array,
            "contains": schema,
            "minContains": count,
            "maxContains": count,
            "minItems": count,
            "maxItems": count,
            "uniqueItems": { "type": "boolean" },
            "allOf": schema_array,
            "anyOf": schema_array,
            "oneOf": schema_array,
            "not": schema,
            "if": schema,
            "then": schema,
            "else": schema,
            "format": { "type": "string" },
            "pattern": { "type": "string", "format": "regex" },
            "minLength": count,
            "maxLength": count,
            "minimum": number,
            "maximum": number,
            "exclusiveMinimum": number,
            "exclusiveMaximum": number,
            "multipleOf": { "type": "number", "exclusiveMinimum": 0 }
        },
        "$defs": {
            "schema": { "anyOf": [{ "type": "boolean" }, { "$ref": "#" }] },
            "stringSet": { "type": "array", "uniqueItems": true, "items": { "type": "string" } },
            "typeName": { "enum": ["null", "boolean", "object", "array", "number", "string", "integer"] }
        }
    })
}

/// The meta-schema's hash (it is self-typed).
pub fn meta_schema_hash() -> Hash {
    node::self_hash(&meta_schema())
}

/// Compiles `schema` with uwf's options: draft 2020-12, formats asserted,
/// unknown formats rejected, `cas_ref` registered, no remote references.
pub fn compile(schema: &Value) -> Result<Arc<Validator>, String> {
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .should_validate_formats(true)
        .should_ignore_unknown_formats(false)
        .with_format("cas_ref", Hash::is_cas_ref)
        .build(schema)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// Every way `instance` fails `validator`, as JSON-Pointer + message.
///
/// A message quotes the value at fault, which may be a whole document (an
/// answer, a payload read from a person's file): it shows the start of it
/// only ([`uwf_util::text::shorten_value`]).
pub fn violations(validator: &Validator, instance: &Value) -> Vec<Violation> {
    validator
        .iter_errors(instance)
        .map(|e| {
            let message = e.to_string();
            let value = e.instance().to_string();
            let short = uwf_util::text::shorten_value(&value);
            Violation {
                path: e.instance_path().to_string(),
                message: if short == value {
                    message
                } else {
                    message.replacen(&value, &short, 1)
                },
            }
        })
        .collect()
}

/// The `title` of a schema payload, if it has one.
pub fn title_of(schema: &Value) -> Option<&str> {
    schema.get("title").and_then(Value::as_str)
}

/// Checks that `schema` lies in the supported subset, beyond what the
/// meta-schema itself can say, and explains any rejection.
///
/// `meta` is the compiled meta-schema.
pub fn check_subset(meta: &Validator, schema: &Value) -> Result<(), CasError> {
    check_subset_compiled(meta, schema).map(|_| ())
}

/// [`check_subset`], returning the schema compiled by its last check.
pub(crate) fn check_subset_compiled(
    meta: &Validator,
    schema: &Value,
) -> Result<Arc<Validator>, CasError> {
    let reject = |reason: String| Err(CasError::UnsupportedSchema { reason });
    if !schema.is_object() {
        return reject(
            "a type must be a JSON object schema (booleans are only allowed as subschemas)".into(),
        );
    }
    // Named keywords first: their reasons beat a generic "unexpected property".
    if let Some((path, kw, why)) = find_rejected(schema, "") {
        let at = if path.is_empty() {
            "the root".to_string()
        } else {
            path
        };
        return reject(format!("`{kw}` at {at} is not supported: {why}"));
    }
    let problems = violations(meta, schema);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return reject(format!(
            "not in the supported subset of JSON Schema:\n  - {}",
            list.join("\n  - ")
        ));
    }
    check_refs(schema, schema, "")?;
    check_ref_cycles(schema)?;
    compile(schema).or_else(|e| reject(format!("does not compile: {e}")))
}

/// Walks every subschema position (keyword-aware, so property *names* such as
/// a property called `$id` are not mistaken for keywords).
fn for_each_subschema<'a>(schema: &'a Value, path: &str, f: &mut dyn FnMut(&'a Value, String)) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    for (kw, v) in obj {
        let p = format!("{path}/{}", escape(kw));
        match kw.as_str() {
            "properties" | "patternProperties" | "$defs" => {
                if let Some(m) = v.as_object() {
                    for (name, sub) in m {
                        f(sub, format!("{p}/{}", escape(name)));
                    }
                }
            }
            "prefixItems" | "allOf" | "anyOf" | "oneOf" => {
                if let Some(a) = v.as_array() {
                    for (i, sub) in a.iter().enumerate() {
                        f(sub, format!("{p}/{i}"));
                    }
                }
            }
            "additionalProperties"
            | "propertyNames"
            | "items"
            | "contains"
            | "not"
            | "if"
            | "then"
            | "else" => f(v, p),
            _ => {}
        }
    }
}

fn find_rejected(schema: &Value, path: &str) -> Option<(String, &'static str, &'static str)> {
    if let Some(obj) = schema.as_object() {
        for (kw, why) in REJECTED {
            if obj.contains_key(*kw) {
                return Some((path.to_string(), kw, why));
            }
        }
    }
    let mut found = None;
    for_each_subschema(schema, path, &mut |sub, p| {
        if found.is_none() {
            found = find_rejected(sub, &p);
        }
    });
    found
}

fn check_refs(root: &Value, schema: &Value, path: &str) -> Result<(), CasError> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str)
        && resolve_pointer(root, r).is_none()
    {
        let at = if path.is_empty() { "the root" } else { path };
        return Err(CasError::UnsupportedSchema {
            reason: format!("`$ref: {r:?}` at {at} does not point anywhere in this schema"),
        });
    }
    let mut result = Ok(());
    for_each_subschema(schema, path, &mut |sub, p| {
        if result.is_ok() {
            result = check_refs(root, sub, &p);
        }
    });
    result
}

/// Rejects schemas in which following `$ref` and the in-place applicators
/// (`allOf`, `anyOf`, `oneOf`, `if`, `then`, `else`, `not`) can loop back to
/// the same subschema without descending into the data, e.g. `{"$ref": "#"}`:
/// such a type can never be decided, and reference discovery would not end.
fn check_ref_cycles(root: &Value) -> Result<(), CasError> {
    use std::collections::HashMap;
    // Every subschema position, by JSON Pointer.
    let mut nodes: HashMap<String, &Value> = HashMap::new();
    fn collect<'a>(v: &'a Value, path: String, nodes: &mut HashMap<String, &'a Value>) {
        for_each_subschema(v, &path, &mut |sub, p| collect(sub, p, nodes));
        nodes.insert(path, v);
    }
    collect(root, String::new(), &mut nodes);

    let edges = |path: &str, v: &Value| -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = v.get("$ref").and_then(Value::as_str)
            && let Some(ptr) = r.strip_prefix('#').and_then(percent_decode)
        {
            out.push(ptr);
        }
        for kw in ["allOf", "anyOf", "oneOf"] {
            if let Some(a) = v.get(kw).and_then(Value::as_array) {
                out.extend((0..a.len()).map(|i| format!("{path}/{kw}/{i}")));
            }
        }
        for kw in ["if", "then", "else", "not"] {
            if v.get(kw).is_some() {
                out.push(format!("{path}/{kw}"));
            }
        }
        out
    };

    // Iterative DFS with three colours; a grey successor closes a cycle.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Grey,
        Black,
    }
    let mut mark: HashMap<String, Mark> = HashMap::new();
    let mut starts: Vec<&String> = nodes.keys().collect();
    starts.sort();
    for start in starts {
        if mark.contains_key(start) {
            continue;
        }
        let mut stack: Vec<(String, Vec<String>)> = Vec::new();
        let first = nodes
            .get(start.as_str())
            .map(|v| edges(start, v))
            .unwrap_or_default();
        mark.insert(start.clone(), Mark::Grey);
        stack.push((start.clone(), first));
        while let Some((at, pending)) = stack.last_mut() {
            let Some(next) = pending.pop() else {
                mark.insert(at.clone(), Mark::Black);
                stack.pop();
                continue;
            };
            match mark.get(&next) {
                Some(Mark::Grey) => {
                    let at = if next.is_empty() {
                        "the root".to_string()
                    } else {
                        next
                    };
                    return Err(CasError::UnsupportedSchema {
                        reason: format!(
                            "the subschema at {at} refers back to itself through `$ref` without descending into the data, so it can never be decided"
                        ),
                    });
                }
                Some(Mark::Black) => {}
                None => {
                    let succ = nodes
                        .get(next.as_str())
                        .map(|v| edges(&next, v))
                        .unwrap_or_default();
                    mark.insert(next.clone(), Mark::Grey);
                    stack.push((next, succ));
                }
            }
        }
    }
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Resolves a same-document reference (`#` or `#/json/pointer`).
pub fn resolve_pointer<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    let decoded = percent_decode(pointer)?;
    if decoded.is_empty() {
        Some(root)
    } else {
        root.pointer(&decoded)
    }
}

fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Arc<Validator> {
        compile(&meta_schema()).unwrap_or_else(|e| panic!("meta-schema does not compile: {e}"))
    }

    #[test]
    fn meta_schema_describes_itself() {
        assert_eq!(violations(&meta(), &meta_schema()), vec![]);
        check_subset(&meta(), &meta_schema()).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn protocol_schemas_are_in_the_subset() {
        for s in [
            uwf_protocol::schemas::workflow(),
            uwf_protocol::schemas::start_node(),
            uwf_protocol::schemas::step_node(),
        ] {
            check_subset(&meta(), &s).unwrap_or_else(|e| panic!("{}: {e}", s["title"]));
        }
    }

    fn rejection(schema: Value) -> String {
        match check_subset(&meta(), &schema) {
            Err(CasError::UnsupportedSchema { reason }) => reason,
            other => panic!("expected a rejection for {schema}, got {other:?}"),
        }
    }

    #[test]
    fn rejects_outside_the_subset_with_reasons() {
        assert!(rejection(json!(true)).contains("JSON object"));
        assert!(rejection(json!({"$id": "x"})).contains("`$id` at the root"));
        let r = rejection(json!({"properties": {"a": {"definitions": {}}}}));
        assert!(r.contains("`definitions` at /properties/a"), "{r}");
        assert!(rejection(json!({"$ref": "http://example.com/s"})).contains("/$ref"));
        assert!(rejection(json!({"$ref": "#/$defs/missing"})).contains("does not point"));
        assert!(rejection(json!({"type": "strin"})).contains("/type"));
        assert!(rejection(json!({"requried": ["a"]})).contains("requried"));
        assert!(rejection(json!({"format": "casref"})).contains("compile"));
        assert!(rejection(json!({"pattern": "("})).contains("/pattern"));
        assert!(rejection(json!({"minLength": -1})).contains("/minLength"));
    }

    #[test]
    fn ref_cycles_that_consume_no_data_are_rejected() {
        assert!(rejection(json!({"$ref": "#"})).contains("refers back to itself"));
        let r = rejection(json!({"properties": {"a": {"$ref": "#/properties/a"}}}));
        assert!(r.contains("/properties/a"), "{r}");
        assert!(rejection(json!({"anyOf": [{"type": "null"}, {"$ref": "#"}]})).contains("itself"));
        let r = rejection(
            json!({"$defs": {"x": {"allOf": [{"$ref": "#/$defs/y"}]}, "y": {"not": {"$ref": "#/$defs/x"}}}}),
        );
        assert!(r.contains("itself"), "{r}");
        // Recursion through data is fine: a linked list.
        check_subset(&meta(), &json!({"type": "object", "properties": {"next": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}}}))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn property_names_are_not_keywords() {
        check_subset(
            &meta(),
            &json!({"properties": {"$id": {"type": "string"}, "definitions": true}}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn extensions_and_local_refs_are_allowed() {
        let s = json!({
            "x-ui": {"anything": 1},
            "type": "object",
            "properties": {"child": {"$ref": "#"}, "tag": {"$ref": "#/$defs/tag"}},
            "$defs": {"tag": {"type": "string", "format": "cas_ref"}}
        });
        check_subset(&meta(), &s).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn cas_ref_format_is_enforced() {
        let v = compile(&json!({"type": "string", "format": "cas_ref"}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(v.is_valid(&json!("4KNM2PXR3B1QW")));
        assert!(!v.is_valid(&json!("4knm2pxr3b1qw")));
        assert!(!v.is_valid(&json!("../etc/passwd")));
        assert!(!v.is_valid(&json!("GKNM2PXR3B1QW")));
    }

    #[test]
    fn pointers() {
        let root = json!({"$defs": {"a/b": {"x": 1}, "c%d": 2}});
        assert_eq!(resolve_pointer(&root, "#"), Some(&root));
        assert_eq!(resolve_pointer(&root, "#/$defs/a~1b/x"), Some(&json!(1)));
        assert_eq!(resolve_pointer(&root, "#/$defs/c%25d"), Some(&json!(2)));
        assert_eq!(resolve_pointer(&root, "other#"), None);
        assert_eq!(resolve_pointer(&root, "#/nope"), None);
    }
}
