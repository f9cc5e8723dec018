//! Checks of a workflow's graph against its roles' output schemas: the
//! statuses a status map routes on, and the variables edge prompts read.
//!
//! Both need the inline schemas, so they run in [`validate`](super::validate)
//! (not on a stored workflow, whose schemas are hashes).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use uwf_jsonata::ast::Kind;
use uwf_protocol::{ConditionDefinition, START, Transition};

use super::raw::{status_condition_name, status_expression};
use crate::template::{self, Segment};

/// The statuses a schema allows for `$status`: its `enum` or `const`, in the
/// schema itself or in every variant of a `oneOf`/`anyOf`. `None` when the
/// schema does not say (no `$status`, or a variant without it).
pub(crate) fn allowed_statuses(schema: &Value) -> Option<BTreeSet<String>> {
    if let Some(own) = schema
        .get("properties")
        .and_then(|p| p.get("$status"))
        .and_then(status_values)
    {
        return Some(own);
    }
    let variants = variants(schema)?;
    let mut all = BTreeSet::new();
    for v in variants {
        // A variant that is itself a choice (upstream's reserved `$SUSPEND`
        // wraps the schema in `anyOf`) is looked into.
        all.extend(allowed_statuses(v)?);
    }
    Some(all)
}

/// `const` or `enum` of a property schema, as strings.
fn status_values(prop: &Value) -> Option<BTreeSet<String>> {
    if let Some(c) = prop.get("const") {
        return c.as_str().map(|s| BTreeSet::from([s.to_string()]));
    }
    prop.get("enum")?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn variants(schema: &Value) -> Option<&Vec<Value>> {
    schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)
}

/// The properties an output may have after finishing with `status` (`None`:
/// any status): those of the schema and of the matching variants. `None`
/// when the schema does not list properties (anything may be there).
fn known_properties(schema: &Value, status: Option<&str>) -> Option<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let mut listed = false;
    let mut add = |s: &Value| {
        if let Some(p) = s.get("properties").and_then(Value::as_object) {
            listed = true;
            names.extend(p.keys().cloned());
        }
    };
    add(schema);
    let mut choices: Vec<&Value> = variants(schema).into_iter().flatten().collect();
    while let Some(v) = choices.pop() {
        choices.extend(variants(v).into_iter().flatten());
        let matches = match status {
            None => true,
            Some(s) => v
                .get("properties")
                .and_then(|p| p.get("$status"))
                .and_then(status_values)
                .is_none_or(|allowed| allowed.contains(s)),
        };
        if matches {
            add(v);
        }
    }
    listed.then_some(names)
}

/// The status a transition of `role` routes on, if it is one generated from
/// a status map.
fn routed_status<'c>(
    role: &str,
    t: &'c Transition,
    conditions: &BTreeMap<String, ConditionDefinition>,
) -> Option<&'c str> {
    let name = t.condition.as_deref()?;
    let status = name.strip_prefix(role)?.strip_prefix(".$status=")?;
    (status_condition_name(role, status) == name
        && conditions.get(name)?.expression() == status_expression(status))
    .then_some(status)
}

/// One finding of these checks: code, message, role, condition, whether it
/// is an error, and the prompt it is about.
pub(crate) struct SchemaFinding {
    pub code: &'static str,
    pub message: String,
    pub role: String,
    pub condition: Option<String>,
    pub error: bool,
    pub prompt: Option<String>,
}

/// The variables of the last output an upstream edge prompt (compiled by
/// [`crate::upstream_template`]) reads outside sections: the names given to
/// `$__uwfVar` (Liquid: true, an error when undeclared, as upstream's
/// strict rendering refused them) or `$__uwfGet` (mustache: false, a
/// warning, as upstream rendered them as nothing). uwf's own JSONata templates are not checked, so that every
/// workflow valid before stays valid without new findings.
fn prompt_variables(prompt: &str) -> Vec<(String, bool)> {
    let Ok(segments) = template::parse(prompt) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for seg in segments {
        let Segment::Expr(expr, _) = seg else {
            continue;
        };
        let Ok(parsed) = uwf_jsonata::Expression::parse(expr) else {
            continue;
        };
        parsed.ast().walk(&mut |n| {
            if let Kind::Call {
                procedure, args, ..
            } = &n.kind
                && let Kind::Variable(f) = &procedure.kind
                && (f == "__uwfVar" || f == "__uwfGet")
                && let Some(Kind::String(name)) = args.first().map(|a| &a.kind)
                && !out.iter().any(|(n, _)| n == name)
            {
                out.push((name.clone(), f == "__uwfVar"));
            }
        });
    }
    out
}

/// Variables upstream's engine provided besides the output's fields.
const ENGINE_VARIABLES: &[&str] = &["_body", "$body"];

/// Runs both checks.
/// `upstream`: the workflow is in upstream's forms for sure, so an
/// undeclared variable of a mustache prompt is an error, as upstream's
/// validator had it (its rule 4.1), although its renderer printed nothing;
/// else (status maps that only suggest mustache) a warning.
pub(crate) fn check(
    schemas: &BTreeMap<&str, &Value>,
    conditions: &BTreeMap<String, ConditionDefinition>,
    graph: &BTreeMap<String, Vec<Transition>>,
    upstream: bool,
) -> Vec<SchemaFinding> {
    let mut out = Vec::new();
    for (role, transitions) in graph {
        if role == START {
            continue;
        }
        let Some(schema) = schemas.get(role.as_str()) else {
            continue;
        };
        let allowed = allowed_statuses(schema);
        for (i, t) in transitions.iter().enumerate() {
            let status = routed_status(role, t, conditions);
            if let (Some(s), Some(allowed)) = (status, &allowed)
                && !allowed.contains(s)
            {
                out.push(SchemaFinding {
                    code: "unknown-status",
                    message: format!(
                        "the status map of `{role}` routes on $status \"{s}\", which the output schema of `{role}` never allows (allowed: {})",
                        allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    role: role.clone(),
                    condition: t.condition.clone(),
                    error: true,
                    prompt: None,
                });
            }
            let Some(prompt) = &t.prompt else { continue };
            let Some(known) = known_properties(schema, status) else {
                continue;
            };
            for (var, strict) in prompt_variables(prompt) {
                if known.contains(&var) || ENGINE_VARIABLES.contains(&var.as_str()) {
                    continue;
                }
                let after = status.map_or(String::new(), |s| format!(" with $status \"{s}\""));
                out.push(SchemaFinding {
                    code: "unknown-variable",
                    message: format!(
                        "`{role}` → `{}` (transition #{}): the edge prompt reads `{var}`, which the output schema of `{role}`{after} does not declare (declared: {})",
                        t.role,
                        i + 1,
                        known.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    role: role.clone(),
                    condition: t.condition.clone(),
                    error: strict || upstream,
                    prompt: Some(prompt.clone()),
                });
            }
        }
    }
    out
}

/// Upstream's rules for a role that can finish with several statuses (its
/// semantic validator, since 2026-05-25): its status map routes every
/// status its schema allows (`missing-status`) and has no `_`
/// (`fallback-status`), so that every way out is an explicit, checked
/// route. `$SUSPEND`, which every role of such a workflow may return, is
/// not a route of the map. Only for workflows in upstream's forms: uwf's own
/// status maps keep `_` as a fallback.
pub(crate) fn check_upstream_statuses(
    schemas: &BTreeMap<&str, &Value>,
    status_maps: &[(String, Vec<String>)],
) -> Vec<SchemaFinding> {
    let mut out = Vec::new();
    for (role, keys) in status_maps {
        let Some(allowed) = schemas.get(role.as_str()).and_then(|s| allowed_statuses(s)) else {
            continue;
        };
        let allowed: Vec<&String> = allowed.iter().filter(|s| *s != crate::SUSPEND).collect();
        if allowed.len() < 2 {
            continue;
        }
        let list = allowed
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let finding = |code, message| SchemaFinding {
            code,
            message,
            role: role.clone(),
            condition: None,
            error: true,
            prompt: None,
        };
        if keys.iter().any(|k| k == super::raw::FALLBACK_STATUS) {
            out.push(finding(
                "fallback-status",
                format!(
                    "`{role}` can finish with several statuses ({list}): its status map must route each of them, not use `_`"
                ),
            ));
        }
        let missing: Vec<&str> = allowed
            .iter()
            .filter(|s| !keys.contains(s))
            .map(|s| s.as_str())
            .collect();
        if !missing.is_empty() {
            out.push(finding(
                "missing-status",
                format!(
                    "the status map of `{role}` does not route $status {}, which the output schema of `{role}` allows (it allows {list})",
                    missing.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn statuses_from_enum_const_and_variants() {
        let set = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
        assert_eq!(
            allowed_statuses(&json!({"properties": {"$status": {"enum": ["a", "b"]}}})),
            set(&["a", "b"])
        );
        assert_eq!(
            allowed_statuses(&json!({"properties": {"$status": {"const": "done"}}})),
            set(&["done"])
        );
        assert_eq!(
            allowed_statuses(&json!({"oneOf": [
                {"properties": {"$status": {"const": "ready"}}},
                {"properties": {"$status": {"const": "continue"}}}
            ]})),
            set(&["continue", "ready"])
        );
        // A variant that does not say: anything may come.
        assert_eq!(
            allowed_statuses(&json!({"oneOf": [
                {"properties": {"$status": {"const": "ready"}}},
                {"properties": {"x": {}}}
            ]})),
            None
        );
        assert_eq!(allowed_statuses(&json!({"type": "object"})), None);
        assert_eq!(
            allowed_statuses(&json!({"properties": {"$status": {"type": "string"}}})),
            None
        );
    }

    #[test]
    fn properties_follow_the_status_variant() {
        let schema = json!({"oneOf": [
            {"properties": {"$status": {"const": "ready"}, "branch": {}}},
            {"properties": {"$status": {"const": "stuck"}, "reason": {}}}
        ]});
        let names = |s| known_properties(&schema, s).map(|n| n.into_iter().collect::<Vec<_>>());
        assert_eq!(
            names(Some("ready")),
            Some(vec!["$status".into(), "branch".into()])
        );
        assert_eq!(
            names(None),
            Some(vec!["$status".into(), "branch".into(), "reason".into()])
        );
        assert_eq!(known_properties(&json!({"type": "object"}), None), None);
    }

    #[test]
    fn variables_of_upstream_prompts_only() {
        assert!(prompt_variables("Fix {{comments}} in {{ files[0] }}").is_empty());
        let template = "Fix {{{comments}}} {{a.b}} {{#list}}{{inner}}{{/list}} {{comments}}";
        for strict in [true, false] {
            let compiled = crate::upstream_template::compile(template, strict)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                prompt_variables(&compiled),
                vec![
                    ("comments".to_string(), strict),
                    ("a".into(), strict),
                    ("list".into(), strict)
                ]
            );
        }
    }
}
