//! What `thread read` shows of a step beyond its output: the last assistant
//! message of its detail (upstream's `### Content`).
//!
//! Agents that wrap an agent CLI store a detail whose `turns` are
//! `cas_ref`s to turn nodes (`{role, text}`, or `content` in some
//! transcripts); the newest turn of role `assistant` with text is the last
//! message. Other details (the kit's answer node `{text}`) are the answer
//! itself. A detail that only repeats the structured output (the kit's
//! record of an agent that gave no text) shows nothing.

use std::collections::HashMap;

use serde_json::Value;
use uwf_cas::{Cas, Hash};
use uwf_moderator::thread::ThreadView;

/// Text of a turn or answer payload: `text`, else `content` (a string, or
/// a list of blocks with `text`).
fn text_of(payload: &Value) -> Option<String> {
    let t = match payload.get("text").or_else(|| payload.get("content"))? {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    (!t.trim().is_empty()).then_some(t)
}

/// The last assistant message of the detail node `detail`, if any.
pub fn last_assistant_message<S: uwf_cas::Store>(cas: &Cas<S>, detail: Hash) -> Option<String> {
    let node = cas.try_get(detail).ok()??;
    match node.payload.get("turns") {
        Some(Value::Array(turns)) => turns.iter().rev().find_map(|t| {
            let h: Hash = t.as_str()?.parse().ok()?;
            let turn = cas.try_get(h).ok()??.payload;
            if turn.get("role").and_then(Value::as_str) == Some("assistant") {
                text_of(&turn)
            } else {
                None
            }
        }),
        _ => text_of(&node.payload),
    }
}

/// The content of each step of `view` that has one, by StepNode.
pub fn contents<S: uwf_cas::Store>(cas: &Cas<S>, view: &ThreadView) -> HashMap<Hash, String> {
    view.steps
        .iter()
        .filter_map(|s| {
            let text = last_assistant_message(cas, s.payload.record.detail)?;
            // The kit records a text-less structured output as its JSON.
            let repeats_output = serde_json::from_str::<Value>(&text).is_ok_and(|v| v == s.output);
            (!repeats_output).then_some((s.hash, text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_of_the_shapes_agents_write() {
        assert_eq!(text_of(&json!({"text": "hi"})), Some("hi".into()));
        assert_eq!(text_of(&json!({"content": "yo"})), Some("yo".into()));
        assert_eq!(
            text_of(
                &json!({"content": [{"type": "text", "text": "a"}, {"type": "tool_use"}, {"text": "b"}]})
            ),
            Some("a\nb".into())
        );
        assert_eq!(text_of(&json!({"text": "  "})), None);
        assert_eq!(text_of(&json!({"other": 1})), None);
    }
}
