//! The structural change between two workflows, in words: roles added,
//! removed or changed (instructions, output schema), conditions, and the
//! transitions of each role. `uwf workflow diff` prints it; see
//! docs/workflow.md, "Replaying recorded threads".

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;
use uwf_protocol::{Hash, Transition, WorkflowPayload};

/// What kind of change an entry of a [`WorkflowDiff`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    /// Only in the new workflow.
    Added,
    /// Only in the old workflow.
    Removed,
    /// In both, different.
    Changed,
}

/// One change, with a sentence for people.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// What changed: `name`, `description`, `role`, `condition` or `edges`.
    pub subject: &'static str,
    /// The role, condition or source role (`$START`) it is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Added, removed or changed.
    pub kind: ChangeKind,
    /// The change in words.
    pub text: String,
    /// The details, one sentence each (the parts of a role's schema that
    /// changed, the transitions added or removed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

/// Every structural change from one workflow to another.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowDiff {
    /// Whether the two are the same workflow (no change at all).
    pub same: bool,
    /// The changes: the workflow's name and description, then roles,
    /// conditions and edges, each in name order.
    pub changes: Vec<Change>,
}

fn change(subject: &'static str, name: Option<&str>, kind: ChangeKind, text: String) -> Change {
    Change {
        subject,
        name: name.map(str::to_string),
        kind,
        text,
        details: Vec::new(),
    }
}

/// The changes from `old` to `new`. `schema_of` gives the JSON Schema of an
/// output-schema hash (from whichever store holds it), so that a changed
/// schema is described by what changed in it; `None` leaves it at "changed".
pub fn diff(
    old: &WorkflowPayload,
    new: &WorkflowPayload,
    schema_of: &dyn Fn(Hash) -> Option<Value>,
) -> WorkflowDiff {
    use ChangeKind::{Added, Changed, Removed};
    let mut changes = Vec::new();
    if old.name != new.name {
        changes.push(change(
            "name",
            None,
            Changed,
            format!("renamed from `{}` to `{}`", old.name, new.name),
        ));
    }
    if old.description != new.description {
        changes.push(change(
            "description",
            None,
            Changed,
            format!("description: {:?} → {:?}", old.description, new.description),
        ));
    }
    for name in keys(&old.roles, &new.roles) {
        match (old.roles.get(name), new.roles.get(name)) {
            (None, Some(_)) => changes.push(change(
                "role",
                Some(name),
                Added,
                format!("role `{name}` added"),
            )),
            (Some(_), None) => changes.push(change(
                "role",
                Some(name),
                Removed,
                format!("role `{name}` removed"),
            )),
            (Some(a), Some(b)) if a != b => {
                let mut parts = Vec::new();
                let mut details = Vec::new();
                if a.description != b.description {
                    parts.push("description");
                }
                if a.system_prompt != b.system_prompt {
                    parts.push("instructions");
                }
                if a.output_schema != b.output_schema {
                    parts.push("output schema");
                    details = match (schema_of(a.output_schema), schema_of(b.output_schema)) {
                        (Some(x), Some(y)) => schema_changes(&x, &y),
                        _ => Vec::new(),
                    };
                    if details.is_empty() {
                        details.push(format!(
                            "output schema {} → {}",
                            a.output_schema, b.output_schema
                        ));
                    }
                }
                let mut c = change(
                    "role",
                    Some(name),
                    Changed,
                    format!("role `{name}`: {} changed", parts.join(", ")),
                );
                c.details = details;
                changes.push(c);
            }
            _ => {}
        }
    }
    for name in keys(&old.conditions, &new.conditions) {
        match (old.conditions.get(name), new.conditions.get(name)) {
            (None, Some(b)) => changes.push(change(
                "condition",
                Some(name),
                Added,
                format!("condition `{name}` added: {}", b.expression()),
            )),
            (Some(a), None) => changes.push(change(
                "condition",
                Some(name),
                Removed,
                format!("condition `{name}` removed (was {})", a.expression()),
            )),
            (Some(a), Some(b)) if a.expression() != b.expression() => changes.push(change(
                "condition",
                Some(name),
                Changed,
                format!(
                    "condition `{name}`: {} → {}",
                    a.expression(),
                    b.expression()
                ),
            )),
            (Some(a), Some(b)) if a != b => changes.push(change(
                "condition",
                Some(name),
                Changed,
                format!("condition `{name}`: description changed"),
            )),
            _ => {}
        }
    }
    for from in keys(&old.graph, &new.graph) {
        let (a, b) = (old.graph.get(from), new.graph.get(from));
        if a == b {
            continue;
        }
        let kind = match (a, b) {
            (None, _) => Added,
            (_, None) => Removed,
            _ => Changed,
        };
        let (a, b) = (
            a.map_or(&[][..], Vec::as_slice),
            b.map_or(&[][..], Vec::as_slice),
        );
        let mut c = change(
            "edges",
            Some(from),
            kind,
            format!(
                "transitions of `{from}`: [{}] → [{}]",
                edges_text(a),
                edges_text(b)
            ),
        );
        c.details = edge_details(a, b);
        changes.push(c);
    }
    WorkflowDiff {
        same: changes.is_empty(),
        changes,
    }
}

fn keys<'a, V>(a: &'a BTreeMap<String, V>, b: &'a BTreeMap<String, V>) -> BTreeSet<&'a str> {
    a.keys().chain(b.keys()).map(String::as_str).collect()
}

fn edge_text(t: &Transition) -> String {
    match &t.condition {
        Some(c) => format!("{} if {c}", t.role),
        None => t.role.clone(),
    }
}

fn edges_text(ts: &[Transition]) -> String {
    ts.iter().map(edge_text).collect::<Vec<_>>().join(", ")
}

/// The transitions only in one list, the order, and the prompts.
fn edge_details(a: &[Transition], b: &[Transition]) -> Vec<String> {
    let key = |t: &Transition| (t.role.clone(), t.condition.clone());
    let ka: Vec<_> = a.iter().map(key).collect();
    let kb: Vec<_> = b.iter().map(key).collect();
    let mut out = Vec::new();
    for (i, t) in b.iter().enumerate() {
        if !ka.contains(&kb[i]) {
            out.push(format!("added #{}: → {}", i + 1, edge_text(t)));
        }
    }
    for (i, t) in a.iter().enumerate() {
        if !kb.contains(&ka[i]) {
            out.push(format!("removed #{}: → {}", i + 1, edge_text(t)));
        }
    }
    let common_a: Vec<_> = ka.iter().filter(|k| kb.contains(k)).collect();
    let common_b: Vec<_> = kb.iter().filter(|k| ka.contains(k)).collect();
    if common_a != common_b {
        out.push("the order of the transitions changed".into());
    }
    for t in b {
        if let Some(o) = a.iter().find(|o| key(o) == key(t))
            && o.prompt != t.prompt
        {
            out.push(format!(
                "prompt of → {}: {:?} → {:?}",
                edge_text(t),
                o.prompt.as_deref().unwrap_or(""),
                t.prompt.as_deref().unwrap_or("")
            ));
        }
    }
    out
}

/// What changed in an object schema: properties added or removed, their
/// types, and which are required. Other changes are summed up in one line.
fn schema_changes(a: &Value, b: &Value) -> Vec<String> {
    let props = |s: &Value| {
        s.get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let required = |s: &Value| -> BTreeSet<String> {
        s.get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (pa, pb) = (props(a), props(b));
    let (ra, rb) = (required(a), required(b));
    let mut out = Vec::new();
    let names: BTreeSet<&String> = pa.keys().chain(pb.keys()).collect();
    for p in names {
        match (pa.get(p), pb.get(p)) {
            (None, Some(_)) => out.push(format!("property `{p}` added")),
            (Some(_), None) => out.push(format!("property `{p}` removed")),
            (Some(x), Some(y)) if x != y => out.push(format!("property `{p}`: {x} → {y}")),
            _ => {}
        }
    }
    for r in rb.difference(&ra) {
        out.push(format!("`{r}` now required"));
    }
    for r in ra.difference(&rb) {
        out.push(format!("`{r}` no longer required"));
    }
    let rest = |s: &Value| {
        let mut s = s.clone();
        if let Some(o) = s.as_object_mut() {
            o.remove("properties");
            o.remove("required");
            o.remove("title");
        }
        s
    };
    if rest(a) != rest(b) {
        out.push("other keywords of the schema changed".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use uwf_cas::{Cas, MemStore};

    use super::*;
    use crate::definition::{parse_yaml, register};

    const A: &str = r#"
name: w
roles:
  dev: { systemPrompt: Do., outputSchema: { type: object, properties: { ok: { type: boolean } } } }
  rev: { systemPrompt: Review., outputSchema: { type: object } }
conditions:
  bad: "steps[-1].output.ok = false"
graph:
  $START: [{ role: dev }]
  dev: [{ role: rev }]
  rev: [{ role: dev, condition: bad }, { role: $END }]
"#;

    fn wf(cas: &Cas<MemStore>, yaml: &str) -> WorkflowPayload {
        let def = parse_yaml(yaml, "w.yaml").unwrap_or_else(|e| panic!("{e}"));
        register(cas, &def)
            .unwrap_or_else(|e| panic!("{e}"))
            .payload
    }

    #[test]
    fn names_each_structural_change_in_words() {
        let cas = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let a = wf(&cas, A);
        let b = wf(
            &cas,
            &A.replace("ok = false", "ok != true")
                .replace(
                    "ok: { type: boolean } }",
                    "ok: { type: boolean } }, required: [ok]",
                )
                .replace("Review.", "Review strictly.")
                .replace(
                    "[{ role: dev, condition: bad }, { role: $END }]",
                    "[{ role: $END, condition: bad }, { role: dev }]",
                ),
        );
        let schema_of = |h| cas.get(h).ok().map(|n| n.payload);
        let d = diff(&a, &b, &schema_of);
        let texts: Vec<&str> = d.changes.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "role `dev`: output schema changed",
                "role `rev`: instructions changed",
                "condition `bad`: steps[-1].output.ok = false → steps[-1].output.ok != true",
                "transitions of `rev`: [dev if bad, $END] → [$END if bad, dev]",
            ]
        );
        assert_eq!(d.changes[0].details, vec!["`ok` now required".to_string()]);
        assert!(!d.same);
        assert!(diff(&a, &a, &schema_of).same);
    }
}
