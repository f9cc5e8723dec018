//! Prompt assembly for LLM agents: the deliverable format derived from the
//! role's outputSchema, the scope constraint, and the thread as text.
//!
//! [`AgentContext::system_prompt`](crate::AgentContext::system_prompt) and
//! [`AgentContext::user_prompt`](crate::AgentContext::user_prompt) put these
//! together; agents that build prompts their own way can use the pieces.

use std::fmt::Write;

use serde_json::Value;
use uwf_protocol::StepContext;

use crate::extract::declared_properties;

/// The scope constraint placed between the format instruction and the
/// role's own system prompt.
pub const SCOPE_CONSTRAINT: &str = "Focus exclusively on YOUR role's deliverable. Do not perform actions outside your role's scope.";

/// Tells the agent to answer in frontmatter markdown with the fields of
/// `schema`, so the [fast path](crate::extract) can read its answer.
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
/// ```
pub fn output_format_instruction(schema: &Value) -> String {
    let mut out = String::from(
        "## Deliverable format\n\n\
         Answer in frontmatter markdown: a line `---`, then YAML with the fields below, \
         then a line `---`, then your answer in markdown.\n",
    );
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match declared_properties(schema) {
        Some(names) if !names.is_empty() => {
            out.push_str("\nFields:\n");
            let props = properties_of(schema);
            for name in &names {
                let prop = props.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                let need = if required.contains(&name.as_str()) {
                    "required"
                } else {
                    "optional"
                };
                let _ = write!(out, "- `{name}` ({}, {need})", describe_type(prop));
                if let Some(d) = prop.get("description").and_then(Value::as_str) {
                    let _ = write!(out, ": {d}");
                }
                out.push('\n');
            }
            out.push_str("\nExample:\n\n---\n");
            for name in &names {
                let _ = writeln!(out, "{name}: …");
            }
            out.push_str("---\n\n(your answer)\n");
        }
        _ => {
            out.push_str("\nThe YAML must be valid against this JSON Schema:\n\n```json\n");
            out.push_str(&serde_json::to_string_pretty(schema).unwrap_or_default());
            out.push_str("\n```\n");
        }
    }
    out
}

fn properties_of(schema: &Value) -> Option<&serde_json::Map<String, Value>> {
    let mut s = schema;
    for _ in 0..16 {
        if let Some(p) = s.get("properties").and_then(Value::as_object) {
            return Some(p);
        }
        s = s
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|p| schema.pointer(p))?;
    }
    None
}

fn describe_type(prop: &Value) -> String {
    if let Some(values) = prop.get("enum").and_then(Value::as_array) {
        let list: Vec<String> = values.iter().map(Value::to_string).collect();
        return format!("one of {}", list.join(", "));
    }
    if let Some(c) = prop.get("const") {
        return format!("exactly {c}");
    }
    let ty = match prop.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    };
    if ty == "array" {
        if let Some(items) = prop.get("items").filter(|i| i.is_object()) {
            return format!("list of {}", describe_type(items));
        }
        return "list".to_owned();
    }
    ty
}

/// The thread as markdown: the user's task, each previous step's role,
/// agent and output, and the edge prompt addressed to this role.
pub fn thread_text(task: &str, steps: &[StepContext], edge_prompt: Option<&str>) -> String {
    let mut out = format!("## Task\n\n{task}\n");
    if !steps.is_empty() {
        out.push_str("\n## Previous steps\n");
        for (i, s) in steps.iter().enumerate() {
            let output = serde_json::to_string_pretty(&s.output).unwrap_or_default();
            let _ = write!(
                out,
                "\n### {}. {} (by {})\n\n```json\n{output}\n```\n",
                i + 1,
                s.role,
                s.agent
            );
        }
    }
    if let Some(p) = edge_prompt.filter(|p| !p.trim().is_empty()) {
        let _ = write!(out, "\n## Instructions for this step\n\n{p}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn instruction_lists_fields_with_types() {
        let text = output_format_instruction(&json!({
            "type": "object",
            "required": ["plan", "steps"],
            "properties": {
                "plan": { "type": "string" },
                "steps": { "type": "array", "items": { "type": "string" } },
                "risk": { "enum": ["low", "high"] },
                "n": { "type": ["integer", "null"] }
            }
        }));
        assert!(text.contains("- `plan` (string, required)\n"), "{text}");
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
        assert!(text.contains("---\nplan: …\n"), "{text}");
    }

    #[test]
    fn instruction_without_properties_shows_the_schema() {
        let text = output_format_instruction(&json!({ "type": "object" }));
        assert!(text.contains("```json"), "{text}");
    }

    #[test]
    fn thread_text_has_task_steps_and_edge_prompt() {
        let steps = vec![StepContext {
            role: "planner".into(),
            output: json!({ "plan": "p" }),
            detail: "0000000000000".into(),
            agent: "uwf-mock".into(),
        }];
        let text = thread_text("Fix it", &steps, Some("Review the plan."));
        assert!(text.starts_with("## Task\n\nFix it\n"), "{text}");
        assert!(text.contains("### 1. planner (by uwf-mock)"), "{text}");
        assert!(text.contains("\"plan\": \"p\""), "{text}");
        assert!(
            text.ends_with("## Instructions for this step\n\nReview the plan.\n"),
            "{text}"
        );
        assert!(!thread_text("t", &[], None).contains("Previous"));
    }
}
