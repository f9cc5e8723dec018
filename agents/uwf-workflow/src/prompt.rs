//! The task of the child thread, built from the parent's task and context.
//!
//! The child's StartNode prompt is, in this order:
//!
//! 1. the parent thread's **task** (its StartNode prompt; cut to
//!    [`MAX_TASK_CHARS`] with a note if longer);
//! 2. **who delegates**: the parent role, its description, the parent
//!    workflow and thread, and the node the child was started from (its
//!    `parentState`) with the commands that read the parent's context;
//! 3. the parent role's **system prompt** (its instructions);
//! 4. the **edge prompt** of the graph edge that led to the parent role,
//!    if any;
//! 5. the **result the parent role must deliver**: the top-level fields of
//!    its outputSchema (name, type, required, description);
//! 6. the parent's **earlier steps**, newest first, as YAML, within the
//!    context quota (`--context-quota`, default [`DEFAULT_CONTEXT_QUOTA`]
//!    characters), with the `uwf thread read` command that pages back.
//!
//! Every agent of the child thread gets this whole text as its task (under
//! its own role prompt and the child thread's own history).

use std::fmt::Write as _;

use serde_json::Value;
use uwf_agent_kit::prompt::history_text;
use uwf_agent_kit::{AgentContext, KitError};

/// Default character quota of the parent's earlier steps in the child's task.
pub const DEFAULT_CONTEXT_QUOTA: usize = 6_000;

/// Longest parent task copied into the child's task, in characters (the
/// prompt goes through the command line of `uwf thread start`).
pub const MAX_TASK_CHARS: usize = 60_000;

/// Heading of the parent's earlier steps.
pub const HISTORY_HEADING: &str = "## Earlier steps of the calling thread (newest first)";

/// Builds the child thread's task for the context's role (see the module
/// docs). Errors: the calling thread's history cannot be read.
pub fn child_prompt(ctx: &AgentContext, context_quota: usize) -> Result<String, KitError> {
    let role = ctx.role();
    let def = ctx.role_definition();
    let thread = ctx.thread_id().to_string();
    let task = ctx.start().prompt.trim_end();
    let mut out = String::new();
    if task.chars().count() > MAX_TASK_CHARS {
        let cut: String = task.chars().take(MAX_TASK_CHARS).collect();
        let _ = write!(
            out,
            "{cut}\n\n… (the task was cut at {MAX_TASK_CHARS} characters; read it in full with `uwf thread read {thread}`)"
        );
    } else {
        out.push_str(task);
    }
    out.push_str("\n\n## Delegated by the calling workflow\n\n");
    let description = def.description.trim().trim_end_matches('.');
    let description = if description.is_empty() {
        String::new()
    } else {
        format!(": {description}")
    };
    let _ = writeln!(
        out,
        "This task is the work of role `{role}` of workflow `{}` (thread {thread}){description}. \
         This workflow runs to its end; its final result becomes that role's output.",
        ctx.workflow().name
    );
    let _ = writeln!(
        out,
        "\nThe calling thread stood at node `{}` when it called this workflow (this thread's \
         parentState): `uwf thread stack <node>` shows the call stack, `uwf thread read {thread}` \
         the calling thread.",
        ctx.head()
    );
    if !def.system_prompt.trim().is_empty() {
        let _ = write!(
            out,
            "\n## The calling role's instructions\n\n{}\n",
            def.system_prompt.trim_end()
        );
    }
    if let Some(edge) = ctx.edge_prompt().filter(|p| !p.trim().is_empty()) {
        let _ = write!(
            out,
            "\n## Instructions for this step\n\n{}\n",
            edge.trim_end()
        );
    }
    let _ = write!(
        out,
        "\n## The result the calling role must deliver\n\n{}",
        expected_fields(ctx.output_schema())
    );
    let history = history_text(&thread, ctx.steps()?, ctx.step_hashes()?, context_quota);
    out.push_str(&history.replacen("## Previous steps (newest first)", HISTORY_HEADING, 1));
    Ok(out)
}

/// One line per top-level field of `schema`: name, type, required or
/// optional, description.
pub fn expected_fields(schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "Any result: the role's outputSchema declares no fields.\n".to_owned();
    };
    if props.is_empty() {
        return "Any result: the role's outputSchema declares no fields.\n".to_owned();
    }
    let mut out = String::new();
    for (name, p) in props {
        let ty = match p.get("type") {
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | "),
            _ => "any".to_owned(),
        };
        let req = if required.contains(&name.as_str()) {
            "required"
        } else {
            "optional"
        };
        let desc = p
            .get("description")
            .and_then(Value::as_str)
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        let _ = writeln!(out, "- `{name}` ({ty}, {req}){desc}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_listed_with_type_and_requiredness() {
        let schema = json!({
            "type": "object",
            "required": ["summary"],
            "properties": {
                "summary": { "type": "string", "description": "What changed" },
                "files": { "type": ["array", "null"] },
                "x": {}
            }
        });
        let text = expected_fields(&schema);
        assert!(
            text.contains("- `summary` (string, required): What changed"),
            "{text}"
        );
        assert!(
            text.contains("- `files` (array | null, optional)"),
            "{text}"
        );
        assert!(text.contains("- `x` (any, optional)"), "{text}");
        assert!(expected_fields(&json!({"type": "object"})).contains("no fields"));
    }
}
