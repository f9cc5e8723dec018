//! JSON Schemas of the nodes uwf writes.
//!
//! References to other nodes are strings with `format: cas_ref`; that is how
//! the CAS finds them (for `refs`, `walk`, `verify` and `gc`), so every new
//! link between nodes must be declared this way.

use serde_json::{Value, json};

/// Title of the Workflow schema.
pub const WORKFLOW_TITLE: &str = "Workflow";
/// Title of the StartNode schema.
pub const START_NODE_TITLE: &str = "StartNode";
/// Title of the StepNode schema.
pub const STEP_NODE_TITLE: &str = "StepNode";

fn cas_ref() -> Value {
    json!({ "type": "string", "format": "cas_ref" })
}

fn nullable_cas_ref() -> Value {
    json!({ "type": ["string", "null"], "format": "cas_ref" })
}

/// Schema of a Workflow node ([`WorkflowPayload`](crate::WorkflowPayload)).
pub fn workflow() -> Value {
    json!({
        "title": WORKFLOW_TITLE,
        "description": "A workflow: roles with output schemas, named JSONata conditions and a transition graph.",
        "type": "object",
        "required": ["name", "description", "roles", "graph"],
        "additionalProperties": false,
        "properties": {
            "name": { "type": "string", "minLength": 1 },
            "description": { "type": "string" },
            "roles": {
                "type": "object",
                "additionalProperties": { "$ref": "#/$defs/role" }
            },
            "conditions": {
                "type": "object",
                "additionalProperties": { "$ref": "#/$defs/condition" }
            },
            "graph": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "items": { "$ref": "#/$defs/transition" }
                }
            }
        },
        "$defs": {
            "role": {
                "type": "object",
                "required": ["description", "systemPrompt", "outputSchema"],
                "additionalProperties": false,
                "properties": {
                    "description": { "type": "string" },
                    "systemPrompt": { "type": "string" },
                    "outputSchema": cas_ref()
                }
            },
            "condition": {
                "anyOf": [
                    { "type": "string" },
                    {
                        "type": "object",
                        "required": ["description", "expression"],
                        "additionalProperties": false,
                        "properties": {
                            "description": { "type": "string" },
                            "expression": { "type": "string" }
                        }
                    }
                ]
            },
            "transition": {
                "type": "object",
                "required": ["role", "condition"],
                "additionalProperties": false,
                "properties": {
                    "role": { "type": "string", "minLength": 1 },
                    "condition": { "type": ["string", "null"] },
                    "prompt": { "type": "string" }
                }
            }
        }
    })
}

/// Schema of a StartNode ([`StartNodePayload`](crate::StartNodePayload)).
pub fn start_node() -> Value {
    json!({
        "title": START_NODE_TITLE,
        "description": "The root of a thread: which workflow runs, on what task.",
        "type": "object",
        "required": ["workflow", "prompt"],
        "additionalProperties": false,
        "properties": {
            "workflow": cas_ref(),
            "prompt": { "type": "string" },
            "parentState": nullable_cas_ref()
        }
    })
}

/// Schema of a StepNode ([`StepNodePayload`](crate::StepNodePayload)).
pub fn step_node() -> Value {
    json!({
        "title": STEP_NODE_TITLE,
        "description": "One executed role of a thread, linked to the previous step and the thread's start.",
        "type": "object",
        "required": ["start", "prev", "role", "output", "detail", "agent"],
        "additionalProperties": false,
        "properties": {
            "start": cas_ref(),
            "prev": nullable_cas_ref(),
            "role": { "type": "string", "minLength": 1 },
            "output": cas_ref(),
            "detail": cas_ref(),
            "agent": { "type": "string" },
            "childThread": nullable_cas_ref()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Hash, StartNodePayload, StepNodePayload, StepRecord, WorkflowPayload};

    /// Every required field of a schema must be a field the serde type always writes.
    fn required(schema: &Value) -> Vec<&str> {
        schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    }

    #[test]
    fn start_node_schema_matches_type() {
        let p = StartNodePayload {
            workflow: Hash::from_u64(0),
            prompt: "x".into(),
            parent_state: None,
        };
        let v = serde_json::to_value(&p).unwrap_or_default();
        for f in required(&start_node()) {
            assert!(v.get(f).is_some(), "missing {f}");
        }
        let props = start_node()["properties"].clone();
        let with_parent = serde_json::to_value(StartNodePayload {
            parent_state: Some(Hash::from_u64(1)),
            ..p
        })
        .unwrap_or_default();
        for k in with_parent
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            assert!(props.get(k).is_some(), "schema lacks {k}");
        }
    }

    #[test]
    fn step_node_schema_matches_type() {
        let p = StepNodePayload {
            start: Hash::from_u64(0),
            prev: None,
            record: StepRecord {
                role: "r".into(),
                output: Hash::from_u64(1),
                detail: Hash::from_u64(2),
                agent: "a".into(),
            },
            child_thread: Some(Hash::from_u64(3)),
        };
        let v = serde_json::to_value(&p).unwrap_or_default();
        assert_eq!(v["prev"], Value::Null, "prev is always written");
        for f in required(&step_node()) {
            assert!(v.get(f).is_some(), "missing {f}");
        }
        let props = step_node()["properties"].clone();
        for k in v.as_object().into_iter().flatten().map(|(k, _)| k) {
            assert!(props.get(k).is_some(), "schema lacks {k}");
        }
        let back: StepNodePayload = serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, p);
    }

    #[test]
    fn workflow_accepts_both_condition_spellings() {
        let yaml = r#"
name: demo
description: d
roles:
  a: { description: A, systemPrompt: s, outputSchema: "0000000000000" }
conditions:
  bare: "steps[-1].output.ok"
  described: { description: "ok?", expression: "steps[-1].output.ok" }
graph:
  $START: [{ role: a, condition: null }]
  a: [{ role: $END, condition: bare, prompt: "go" }]
"#;
        let w: WorkflowPayload = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.conditions["bare"].expression(), "steps[-1].output.ok");
        assert_eq!(w.conditions["described"].description(), Some("ok?"));
        assert_eq!(w.graph["a"][0].prompt.as_deref(), Some("go"));
        assert_eq!(w.graph["$START"][0].condition, None);
    }

    #[test]
    fn titles_are_set() {
        assert_eq!(workflow()["title"], WORKFLOW_TITLE);
        assert_eq!(start_node()["title"], START_NODE_TITLE);
        assert_eq!(step_node()["title"], STEP_NODE_TITLE);
    }
}
