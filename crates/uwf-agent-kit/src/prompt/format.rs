//! The deliverable format instruction, derived from a role's outputSchema.
//!
//! The schema is walked, not pattern-matched: every declared property is
//! listed with its type, whether it is required, its enum/const values,
//! constraints and description; nested objects and arrays of objects list
//! their own fields, indented. Local `$ref`s (`#`, `#/$defs/…`) are
//! followed, `allOf` branches are merged, and `anyOf`/`oneOf` are described
//! as alternatives. The example frontmatter is generated from the same
//! walk, so it has exactly the schema's fields.

use std::borrow::Cow;
use std::fmt::Write;

use serde_json::{Map, Value};

/// How deep nested objects are listed and exemplified; deeper levels are
/// summarised by their type.
const MAX_DEPTH: usize = 4;

/// How many `$ref` hops are followed from one position (a cycle stops here).
const MAX_REF_HOPS: usize = 16;

/// Tells the agent to answer in frontmatter markdown with the fields of
/// `schema`, so the [fast path](crate::extract) can read its answer.
///
/// Lists the required and optional fields with their types, allowed values
/// and descriptions, then an example frontmatter built from the schema
/// (see [`example_frontmatter`]). A schema that declares no properties gets
/// the schema itself instead of a field list.
///
/// ```
/// use serde_json::json;
/// let schema = json!({
///     "type": "object",
///     "required": ["approved"],
///     "properties": {
///         "approved": { "type": "boolean", "description": "Is it good?" },
///         "comments": { "type": "string" }
///     }
/// });
/// let text = uwf_agent_kit::prompt::output_format_instruction(&schema);
/// assert!(text.contains("- `approved` (boolean, required): Is it good?"));
/// assert!(text.contains("- `comments` (string, optional)"));
/// assert!(text.contains("---\napproved: true\ncomments: <comments>\n---"));
/// ```
pub fn output_format_instruction(schema: &Value) -> String {
    let mut out = String::from(
        "## Deliverable format\n\n\
         Start your answer with YAML frontmatter: a line `---`, the fields below as YAML, \
         and a line `---`. Then write the rest of your answer in markdown.\n",
    );
    let root = view(schema, schema);
    let props = object_properties(&root);
    if props.is_empty() {
        if is_trivial(schema) {
            out.push_str(
                "\nThe output has no fixed fields: put what you want to report as YAML fields \
                 in the frontmatter (a mapping of names to values).\n",
            );
        } else {
            out.push_str(
                "\nThe frontmatter, read as data, must be valid against this JSON Schema:\n\n```json\n",
            );
            out.push_str(
                &serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string()),
            );
            out.push_str("\n```\n");
        }
        return out;
    }
    out.push_str("\nFields:\n");
    list_fields(&mut out, schema, &props, &required_of(&root), 0);
    if let Some(example) = example_frontmatter(schema) {
        out.push_str(
            "\nExample (replace the placeholders in <angle brackets> and pick the values \
             that are true for your work):\n\n",
        );
        out.push_str(&example);
        out.push_str("\n(the rest of your answer, in markdown)\n");
    }
    out
}

/// An example frontmatter block (`---\n<yaml>---\n`) for `schema`, built
/// from the schema itself: every declared property with a placeholder of
/// its type — the first `examples` entry, the `const`, the first `enum`
/// value or the `default` when the schema gives one; `<name>` for strings,
/// `true` for booleans, a value within `minimum`/`maximum` for numbers, one
/// item for arrays (or `minItems`), nested objects recursively.
///
/// `None` when the schema declares no properties.
///
/// ```
/// use serde_json::json;
/// let schema = json!({
///     "type": "object",
///     "properties": {
///         "status": { "enum": ["done", "blocked"] },
///         "files": { "type": "array", "items": { "type": "string" } }
///     }
/// });
/// assert_eq!(
///     uwf_agent_kit::prompt::example_frontmatter(&schema).as_deref(),
///     Some("---\nstatus: done\nfiles:\n- <files item>\n---\n")
/// );
/// ```
pub fn example_frontmatter(schema: &Value) -> Option<String> {
    let root = view(schema, schema);
    if object_properties(&root).is_empty() {
        return None;
    }
    let example = example_value(schema, schema, "value", 0);
    let yaml = serde_yaml::to_string(&example).ok()?;
    Some(format!("---\n{yaml}---\n"))
}

/// The root of `schema` with `$ref`s followed and `allOf` merged: what the
/// extraction reads `properties` and friends from.
pub(crate) fn root_view(schema: &Value) -> Value {
    view(schema, schema).into_owned()
}

/// A schema that accepts any object: `true`, `{}`, `{"type": "object"}`
/// plus annotations only.
fn is_trivial(schema: &Value) -> bool {
    match schema {
        Value::Bool(true) => true,
        Value::Object(m) => m.iter().all(|(k, v)| {
            matches!(
                k.as_str(),
                "title" | "description" | "$schema" | "$comment" | "examples" | "default"
            ) || k.starts_with("x-")
                || (k == "type" && v == "object")
                || (k == "additionalProperties" && v == &Value::Bool(true))
        }),
        _ => false,
    }
}

/// The schema at `node` with local `$ref`s followed (the referring node's
/// own keywords win) and `allOf` branches merged in.
fn view<'a>(root: &'a Value, node: &'a Value) -> Cow<'a, Value> {
    let mut current: Cow<'a, Value> = Cow::Borrowed(node);
    for _ in 0..MAX_REF_HOPS {
        let Some(target) = current
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| resolve_ref(root, r))
        else {
            break;
        };
        let mut merged = target.as_object().cloned().unwrap_or_default();
        if let Some(own) = current.as_object() {
            for (k, v) in own {
                if k != "$ref" {
                    merged.insert(k.clone(), v.clone());
                }
            }
        }
        if !target.is_object() {
            merged.remove("$ref");
        }
        current = Cow::Owned(Value::Object(merged));
    }
    if let Some(branches) = current.get("allOf").and_then(Value::as_array).cloned() {
        let mut merged = current.as_object().cloned().unwrap_or_default();
        merged.remove("allOf");
        for b in &branches {
            let b = view(root, b);
            let Some(b) = b.as_object() else { continue };
            for (k, v) in b {
                match (k.as_str(), merged.get_mut(k)) {
                    ("properties", Some(Value::Object(mine))) => {
                        if let Value::Object(theirs) = v {
                            for (pk, pv) in theirs {
                                mine.entry(pk.clone()).or_insert_with(|| pv.clone());
                            }
                        }
                    }
                    ("required", Some(Value::Array(mine))) => {
                        for r in v.as_array().into_iter().flatten() {
                            if !mine.contains(r) {
                                mine.push(r.clone());
                            }
                        }
                    }
                    (_, Some(_)) => {}
                    (_, None) => {
                        merged.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        current = Cow::Owned(Value::Object(merged));
    }
    current
}

/// Resolves a local `$ref` (`#` or `#/<JSON Pointer>`, percent-decoded).
fn resolve_ref<'a>(root: &'a Value, r: &str) -> Option<&'a Value> {
    let pointer = r.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(&percent_decode(pointer))
}

fn percent_decode(s: &str) -> String {
    if !s.contains('%') {
        return s.to_owned();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(h) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(h, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The declared properties of an object schema (after `$ref`/`allOf`), in
/// schema order.
fn object_properties(node: &Value) -> Vec<(String, Value)> {
    node.get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn required_of(node: &Value) -> Vec<String> {
    node.get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn list_fields(
    out: &mut String,
    root: &Value,
    props: &[(String, Value)],
    required: &[String],
    depth: usize,
) {
    let indent = "  ".repeat(depth);
    for (name, raw) in props {
        let prop = view(root, raw);
        let need = if required.contains(name) {
            "required"
        } else {
            "optional"
        };
        let _ = write!(
            out,
            "{indent}- `{name}` ({}, {need})",
            describe(root, &prop, 0)
        );
        if let Some(d) = prop.get("description").and_then(Value::as_str) {
            let _ = write!(out, ": {}", one_line(d));
        }
        if let Some(d) = prop.get("default") {
            let _ = write!(out, " (default: {d})");
        }
        out.push('\n');
        if depth + 1 >= MAX_DEPTH {
            continue;
        }
        // Fields of a nested object, or of the objects in a list.
        let inner = if is_type(&prop, "array") {
            prop.get("items").map(|i| view(root, i))
        } else {
            Some(prop.clone())
        };
        if let Some(inner) = inner {
            let nested = object_properties(&inner);
            if !nested.is_empty() {
                list_fields(out, root, &nested, &required_of(&inner), depth + 1);
            }
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The declared types of a schema: `type` (string or array), else inferred
/// from the keywords present.
fn types_of(node: &Value) -> Vec<String> {
    match node.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ if node.get("properties").is_some() => vec!["object".into()],
        _ if node.get("items").is_some() || node.get("prefixItems").is_some() => {
            vec!["array".into()]
        }
        _ => Vec::new(),
    }
}

fn is_type(node: &Value, ty: &str) -> bool {
    types_of(node).iter().any(|t| t == ty)
}

/// A short human description of a schema's type: `string`, `list of
/// string`, `one of "a", "b"`, `integer or null`, `number, min 0, max 1`.
fn describe(root: &Value, node: &Value, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return "any".into();
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        let list: Vec<String> = values.iter().map(Value::to_string).collect();
        return format!("one of {}", list.join(", "));
    }
    if let Some(c) = node.get("const") {
        return format!("exactly {c}");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = node.get(key).and_then(Value::as_array) {
            let alts: Vec<String> = branches
                .iter()
                .map(|b| describe(root, &view(root, b), depth + 1))
                .collect();
            return alts.join(" or ");
        }
    }
    let types = types_of(node);
    let mut parts: Vec<String> = Vec::new();
    let names: Vec<String> = types
        .iter()
        .map(|t| match t.as_str() {
            "array" => match node.get("items") {
                Some(items) if items.is_object() => {
                    format!("list of {}", describe(root, &view(root, items), depth + 1))
                }
                _ => "list".to_owned(),
            },
            other => other.to_owned(),
        })
        .collect();
    parts.push(if names.is_empty() {
        "any".to_owned()
    } else {
        names.join(" or ")
    });
    let constraint = |key: &str, label: &str, parts: &mut Vec<String>| {
        if let Some(v) = node.get(key).filter(|v| !v.is_null()) {
            let v = match v {
                Value::String(s) => format!("`{s}`"),
                other => other.to_string(),
            };
            parts.push(format!("{label} {v}"));
        }
    };
    constraint("format", "format", &mut parts);
    constraint("minimum", "min", &mut parts);
    constraint("exclusiveMinimum", "greater than", &mut parts);
    constraint("maximum", "max", &mut parts);
    constraint("exclusiveMaximum", "less than", &mut parts);
    constraint("minLength", "at least", &mut parts);
    constraint("maxLength", "at most", &mut parts);
    constraint("pattern", "matching", &mut parts);
    constraint("minItems", "at least", &mut parts);
    constraint("maxItems", "at most", &mut parts);
    // "at least 3" reads badly without a unit; name it.
    for p in &mut parts {
        if p.starts_with("at least ") || p.starts_with("at most ") {
            let unit = if is_type(node, "array") {
                " items"
            } else {
                " characters"
            };
            p.push_str(unit);
        }
    }
    parts.join(", ")
}

/// An example value for `node` (see [`example_frontmatter`]). `hint` names
/// the value in string placeholders.
fn example_value(root: &Value, raw: &Value, hint: &str, depth: usize) -> Value {
    // `anyOf: [{"$ref": "#"}]` and the like would recurse forever.
    if depth > 4 * MAX_DEPTH {
        return Value::Null;
    }
    let node = view(root, raw);
    let node = node.as_ref();
    if let Some(first) = node
        .get("examples")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(c) = node.get("const") {
        return c.clone();
    }
    if let Some(first) = node
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(d) = node.get("default") {
        return d.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(first) = node
            .get(key)
            .and_then(Value::as_array)
            .and_then(|b| b.first())
        {
            return example_value(root, first, hint, depth + 1);
        }
    }
    let types = types_of(node);
    // The first non-null type: `["string", "null"]` shows a string.
    let ty = types
        .iter()
        .find(|t| t.as_str() != "null")
        .or_else(|| types.first())
        .map_or("string", String::as_str);
    match ty {
        "object" => {
            let mut out = Map::new();
            // Every field at the top and one level down; deeper, only the
            // required ones (which also ends recursive schemas).
            let required = required_of(node);
            if depth < MAX_DEPTH {
                for (name, prop) in object_properties(node) {
                    if depth >= 2 && !required.contains(&name) {
                        continue;
                    }
                    let v = example_value(root, &prop, &name, depth + 1);
                    out.insert(name, v);
                }
            }
            Value::Object(out)
        }
        "array" => {
            let item_hint = format!("{hint} item");
            let n = node
                .get("minItems")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .clamp(1, 3);
            let mut items = Vec::new();
            if let Some(prefix) = node.get("prefixItems").and_then(Value::as_array) {
                for p in prefix {
                    items.push(example_value(root, p, &item_hint, depth + 1));
                }
            }
            if depth < MAX_DEPTH
                && let Some(item) = node.get("items").filter(|i| i.is_object())
            {
                while (items.len() as u64) < n {
                    items.push(example_value(root, item, &item_hint, depth + 1));
                }
            } else if items.is_empty() && node.get("items") != Some(&Value::Bool(false)) {
                items.push(Value::String(format!("<{item_hint}>")));
            }
            Value::Array(items)
        }
        "boolean" => Value::Bool(true),
        "integer" => integer_example(node),
        "number" => number_example(node),
        "null" => Value::Null,
        _ => Value::String(string_example(node, hint)),
    }
}

fn num(node: &Value, key: &str) -> Option<f64> {
    node.get(key).and_then(Value::as_f64)
}

fn integer_example(node: &Value) -> Value {
    let v = num(node, "minimum")
        .map(f64::ceil)
        .or_else(|| num(node, "exclusiveMinimum").map(|m| m.floor() + 1.0))
        .or_else(|| num(node, "maximum").map(f64::floor))
        .or_else(|| num(node, "exclusiveMaximum").map(|m| m.ceil() - 1.0))
        .unwrap_or(1.0);
    // Bounded above, so the cast cannot wrap.
    Value::from(v.clamp(-1e15, 1e15) as i64)
}

fn number_example(node: &Value) -> Value {
    let low = num(node, "minimum").or_else(|| num(node, "exclusiveMinimum"));
    let high = num(node, "maximum").or_else(|| num(node, "exclusiveMaximum"));
    let v = match (low, high) {
        (Some(l), Some(h)) => l + (h - l) * 0.8,
        (Some(l), None) => l + 1.0,
        (None, Some(h)) => h - 1.0,
        (None, None) => 0.5,
    };
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

fn string_example(node: &Value, hint: &str) -> String {
    match node.get("format").and_then(Value::as_str) {
        Some("date") => "2025-01-31".into(),
        Some("date-time") => "2025-01-31T12:00:00Z".into(),
        Some("time") => "12:00:00Z".into(),
        Some("duration") => "PT1H".into(),
        Some("email") => "someone@example.com".into(),
        Some("hostname") => "example.com".into(),
        Some("ipv4") => "192.0.2.1".into(),
        Some("ipv6") => "2001:db8::1".into(),
        Some("uri" | "iri") => "https://example.com/".into(),
        Some("uri-reference" | "iri-reference") => "path/to/file".into(),
        Some("uuid") => "123e4567-e89b-12d3-a456-426614174000".into(),
        Some("cas_ref") => format!("<{hint}: a 13-character CAS hash>"),
        _ => format!("<{hint}>"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use uwf_cas::{Cas, MemStore};

    /// The example frontmatter of `schema` goes through the fast path and
    /// (when `valid`) satisfies the schema.
    fn example_round_trip(schema: &Value) -> Value {
        let example = example_frontmatter(schema).unwrap_or_else(|| panic!("no example"));
        let candidate = crate::extract::candidate(&format!("{example}\nbody"), schema)
            .unwrap_or_else(|e| panic!("{e}: {example}"));
        let cas = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let hash = cas
            .put_schema(schema.clone())
            .unwrap_or_else(|e| panic!("{e}"))
            .hash;
        if let Err(e) = cas.validate(hash, &candidate) {
            panic!("example does not validate: {e:?}\n{example}");
        }
        candidate
    }

    #[test]
    fn flat_schema_with_enum_types_and_descriptions() {
        let schema = json!({
            "type": "object",
            "required": ["plan", "steps"],
            "properties": {
                "plan": { "type": "string", "description": "The plan,\n  in one paragraph." },
                "steps": { "type": "array", "items": { "type": "string" } },
                "risk": { "enum": ["low", "high"] },
                "n": { "type": ["integer", "null"] },
                "kind": { "const": "plan" }
            }
        });
        let text = output_format_instruction(&schema);
        assert!(
            text.contains("- `plan` (string, required): The plan, in one paragraph.\n"),
            "{text}"
        );
        assert!(
            text.contains("- `steps` (list of string, required)\n"),
            "{text}"
        );
        assert!(
            text.contains("- `risk` (one of \"low\", \"high\", optional)\n"),
            "{text}"
        );
        assert!(
            text.contains("- `n` (integer or null, optional)\n"),
            "{text}"
        );
        assert!(
            text.contains("- `kind` (exactly \"plan\", optional)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "---\nplan: <plan>\nsteps:\n- <steps item>\nrisk: low\nn: 1\nkind: plan\n---\n"
            ),
            "{text}"
        );
        assert_eq!(
            example_round_trip(&schema),
            json!({ "plan": "<plan>", "steps": ["<steps item>"], "risk": "low", "n": 1, "kind": "plan" })
        );
    }

    #[test]
    fn status_enum_nested_object_and_string_array() {
        let schema = json!({
            "type": "object",
            "required": ["$status", "review"],
            "additionalProperties": false,
            "properties": {
                "$status": {
                    "type": "string",
                    "enum": ["done", "needs-work", "blocked"],
                    "description": "Outcome of the step"
                },
                "review": {
                    "type": "object",
                    "required": ["score"],
                    "properties": {
                        "score": { "type": "integer", "minimum": 1, "maximum": 5 },
                        "confidence": { "type": "number", "minimum": 0, "maximum": 1 },
                        "notes": { "type": "array", "items": { "type": "string" }, "minItems": 2 }
                    }
                },
                "files": {
                    "type": "array",
                    "description": "Files changed",
                    "items": { "type": "string", "format": "uri-reference" }
                }
            }
        });
        let text = output_format_instruction(&schema);
        assert!(
            text.contains(
                "- `$status` (one of \"done\", \"needs-work\", \"blocked\", required): Outcome of the step\n"
            ),
            "{text}"
        );
        assert!(text.contains("- `review` (object, required)\n"), "{text}");
        assert!(
            text.contains("  - `score` (integer, min 1, max 5, required)\n"),
            "{text}"
        );
        assert!(
            text.contains("  - `confidence` (number, min 0, max 1, optional)\n"),
            "{text}"
        );
        assert!(
            text.contains("  - `notes` (list of string, at least 2 items, optional)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "- `files` (list of string, format `uri-reference`, optional): Files changed\n"
            ),
            "{text}"
        );
        let out = example_round_trip(&schema);
        assert_eq!(out["$status"], "done");
        assert_eq!(out["review"]["score"], 1);
        assert_eq!(out["review"]["notes"].as_array().map(Vec::len), Some(2));
        assert_eq!(out["files"], json!(["path/to/file"]));
    }

    #[test]
    fn refs_to_defs_all_of_and_arrays_of_objects() {
        let schema = json!({
            "$defs": {
                "verdict": { "type": "string", "enum": ["approve", "reject"], "description": "The decision" },
                "comment": {
                    "type": "object",
                    "required": ["file", "line"],
                    "properties": {
                        "file": { "type": "string" },
                        "line": { "type": "integer", "exclusiveMinimum": 0 }
                    }
                },
                "base": {
                    "type": "object",
                    "required": ["verdict"],
                    "properties": { "verdict": { "$ref": "#/$defs/verdict" } }
                }
            },
            "allOf": [{ "$ref": "#/$defs/base" }],
            "type": "object",
            "properties": {
                "comments": { "type": "array", "items": { "$ref": "#/$defs/comment" } },
                "summary": { "anyOf": [{ "type": "string" }, { "type": "null" }] }
            }
        });
        let text = output_format_instruction(&schema);
        assert!(
            text.contains("- `verdict` (one of \"approve\", \"reject\", required): The decision\n"),
            "{text}"
        );
        assert!(
            text.contains("- `comments` (list of object, optional)\n  - `file` (string, required)\n  - `line` (integer, greater than 0, required)\n"),
            "{text}"
        );
        assert!(
            text.contains("- `summary` (string or null, optional)\n"),
            "{text}"
        );
        let out = example_round_trip(&schema);
        assert_eq!(
            out,
            json!({
                "comments": [{ "file": "<file>", "line": 1 }],
                "summary": "<summary>",
                "verdict": "approve"
            })
        );
    }

    #[test]
    fn root_ref_and_recursive_schema_terminate() {
        let schema = json!({
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": { "type": "string" },
                        "children": { "type": "array", "items": { "$ref": "#/$defs/node" } }
                    }
                }
            }
        });
        let text = output_format_instruction(&schema);
        assert!(text.contains("- `name` (string, required)\n"), "{text}");
        assert!(text.contains("  - `children`"), "nested once: {text}");
        example_round_trip(&schema);
        // A `$ref` cycle without content stops.
        let cyclic = json!({ "$ref": "#" });
        assert!(output_format_instruction(&cyclic).contains("Deliverable format"));
        // So does a property that is any of the whole schema.
        let any_of_self = json!({
            "type": "object",
            "properties": { "next": { "anyOf": [{ "$ref": "#" }, { "type": "null" }] } }
        });
        let text = output_format_instruction(&any_of_self);
        assert!(
            text.contains("- `next` (object or null, optional)"),
            "{text}"
        );
    }

    #[test]
    fn examples_and_defaults_are_used() {
        let schema = json!({
            "type": "object",
            "properties": {
                "title": { "type": "string", "examples": ["Fix login"] },
                "retries": { "type": "integer", "default": 3 },
                "when": { "type": "string", "format": "date" }
            }
        });
        let text = output_format_instruction(&schema);
        assert!(text.contains("(default: 3)"), "{text}");
        assert!(
            text.contains("title: Fix login\nretries: 3\nwhen: 2025-01-31\n"),
            "{text}"
        );
        example_round_trip(&schema);
    }

    #[test]
    fn schemas_without_properties() {
        for trivial in [json!({}), json!({ "type": "object" }), json!(true)] {
            let text = output_format_instruction(&trivial);
            assert!(text.contains("no fixed fields"), "{text}");
            assert_eq!(example_frontmatter(&trivial), None);
        }
        let text = output_format_instruction(&json!({ "type": "object", "minProperties": 2 }));
        assert!(text.contains("```json"), "{text}");
        assert!(text.contains("minProperties"), "{text}");
    }
}
