//! Layer 1 of the two-layer extract: the frontmatter fast path.
//!
//! An agent that follows the output format answers in frontmatter markdown;
//! the fields its YAML block shares with the role's outputSchema are the
//! output, at zero LLM cost. When that fails, layer 2 (an LLM asked to
//! extract JSON from the answer) would take over; it is configured in a
//! later release, so for now the failure is reported with its reason.

use serde_json::{Map, Value};
use uwf_util::frontmatter::{self, Frontmatter};

/// Why the fast path found no output candidate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoCandidate(pub String);

/// The output candidate of an answer: the fields of its frontmatter that
/// `schema` declares in its top-level `properties` (all fields when the
/// schema declares none), converted from YAML to JSON.
///
/// The candidate is not validated; store it with
/// [`Cas::put`](uwf_cas::Cas::put) or check it with
/// [`Cas::validate`](uwf_cas::Cas::validate).
///
/// ```
/// use serde_json::json;
/// let schema = json!({ "type": "object", "properties": { "approved": { "type": "boolean" } } });
/// let answer = "---\napproved: true\nmood: good\n---\nLGTM";
/// let out = uwf_agent_kit::extract::candidate(answer, &schema)?;
/// assert_eq!(out, json!({ "approved": true }));
/// # Ok::<(), uwf_agent_kit::extract::NoCandidate>(())
/// ```
pub fn candidate(answer: &str, schema: &Value) -> Result<Value, NoCandidate> {
    let doc = frontmatter::parse(answer);
    let mapping = match &doc.frontmatter {
        Frontmatter::Absent => {
            return Err(NoCandidate(
                "the answer has no frontmatter (it does not start with a `---` line)".into(),
            ));
        }
        Frontmatter::Empty => return Err(NoCandidate("the frontmatter is empty".into())),
        Frontmatter::Unterminated { .. } => {
            return Err(NoCandidate(
                "the frontmatter has no closing `---` line".into(),
            ));
        }
        Frontmatter::Malformed { error, .. } => {
            return Err(NoCandidate(format!(
                "the frontmatter is not valid YAML: {error}"
            )));
        }
        Frontmatter::Yaml(serde_yaml::Value::Mapping(m)) => m,
        Frontmatter::Yaml(other) => {
            return Err(NoCandidate(format!(
                "the frontmatter is {}, not a mapping of fields",
                yaml_kind(other)
            )));
        }
    };

    let wanted = declared_properties(schema);
    let mut out = Map::new();
    for (key, value) in mapping {
        let Some(key) = scalar_key(key) else {
            continue;
        };
        if wanted.as_ref().is_some_and(|w| !w.contains(&key)) {
            continue;
        }
        let json = serde_json::to_value(value).map_err(|e| {
            NoCandidate(format!(
                "frontmatter field {key:?} cannot be represented as JSON: {e}"
            ))
        })?;
        out.insert(key, json);
    }
    Ok(Value::Object(out))
}

/// The names a schema declares in `properties`, following a top-level local
/// `$ref` chain; `None` when it declares none.
pub fn declared_properties(schema: &Value) -> Option<Vec<String>> {
    let mut s = schema;
    // Bounded: a `$ref` cycle at the root would otherwise loop.
    for _ in 0..16 {
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            return Some(props.keys().cloned().collect());
        }
        let target = s
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|pointer| schema.pointer(pointer))?;
        s = target;
    }
    None
}

fn scalar_key(key: &serde_yaml::Value) -> Option<String> {
    match key {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn yaml_kind(v: &serde_yaml::Value) -> &'static str {
    match v {
        serde_yaml::Value::Null => "null",
        serde_yaml::Value::Bool(_) => "a boolean",
        serde_yaml::Value::Number(_) => "a number",
        serde_yaml::Value::String(_) => "a string",
        serde_yaml::Value::Sequence(_) => "a list",
        serde_yaml::Value::Mapping(_) => "a mapping",
        serde_yaml::Value::Tagged(_) => "a tagged value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "approved": { "type": "boolean" },
                "comments": { "type": "string" },
                "files": { "type": "array" }
            }
        })
    }

    fn reason(answer: &str) -> String {
        match candidate(answer, &schema()) {
            Err(NoCandidate(r)) => r,
            Ok(v) => panic!("expected no candidate, got {v}"),
        }
    }

    #[test]
    fn takes_declared_fields_only() {
        let answer = "---\napproved: false\ncomments: fix X\nfiles: [a, b]\nextra: 1\n---\nbody";
        assert_eq!(
            candidate(answer, &schema()).ok(),
            Some(json!({ "approved": false, "comments": "fix X", "files": ["a", "b"] }))
        );
    }

    #[test]
    fn schema_without_properties_takes_everything() {
        let answer = "---\na: 1\n2: two\n---\n";
        assert_eq!(
            candidate(answer, &json!({ "type": "object" })).ok(),
            Some(json!({ "a": 1, "2": "two" }))
        );
    }

    #[test]
    fn follows_root_ref() {
        let s = json!({
            "$ref": "#/$defs/out",
            "$defs": { "out": { "properties": { "x": {} } } }
        });
        assert_eq!(declared_properties(&s), Some(vec!["x".to_string()]));
        assert_eq!(declared_properties(&json!({ "$ref": "#" })), None);
        assert_eq!(declared_properties(&json!(true)), None);
    }

    #[test]
    fn missing_fields_are_left_to_validation() {
        assert_eq!(
            candidate("---\nother: 1\n---\n", &schema()).ok(),
            Some(json!({}))
        );
    }

    #[test]
    fn reasons() {
        assert!(reason("just text").contains("no frontmatter"));
        assert!(reason("---\n---\nbody").contains("empty"));
        assert!(reason("---\na: 1\nbody").contains("closing"));
        assert!(reason("---\na: [1\n---\n").contains("not valid YAML"));
        assert!(reason("---\n- a\n---\n").contains("a list"));
    }
}
