//! One message of an agent's conversation, as uwf stores it: the turn
//! nodes under a transcript detail (docs/agents.md, "Transcripts").
//!
//! Every agent that records a conversation (`uwf-agent`, and the wrappers
//! of Claude Code, Codex and Hermes) writes [`Turn`]s, and `uwf thread
//! view`, `thread read` and `uwf serve` read them back as the same type:
//! a new wrapper maps its CLI's log onto these fields and needs nothing
//! else to be shown as a conversation.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// One message: a prompt, a model's answer (text, thinking, tool calls),
/// or tool results.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    /// Position in the conversation, from 0.
    pub index: usize,
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The message text (text blocks joined by blank lines).
    #[serde(default)]
    pub text: String,
    /// The model's thinking or reasoning summary, if recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// The model that wrote an assistant message, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tool calls made in this message.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Tool results this message carries.
    #[serde(default)]
    pub tool_results: Vec<ToolResult>,
    /// What an agent records beyond these (token counts, a duration, a
    /// stop reason), kept as it is.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The call's id, which its result names, when the tool log has one.
    #[serde(default)]
    pub id: Option<String>,
    /// The tool.
    pub name: String,
    /// Its input: JSON when the log gives JSON, else the text given.
    #[serde(default)]
    pub input: Value,
}

/// A tool's result.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The id of the call it answers.
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// The tool, when the log names it here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it returned, as text.
    #[serde(default)]
    pub content: String,
    /// Whether it failed.
    #[serde(default)]
    pub is_error: bool,
    /// What an agent records beyond these (a duration).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Turn {
    /// A turn of `role` saying `text`, with nothing else.
    pub fn new(role: impl Into<String>, text: impl Into<String>) -> Self {
        Turn {
            role: role.into(),
            text: text.into(),
            ..Turn::default()
        }
    }

    /// The turn as a node payload.
    pub fn to_payload(&self) -> Value {
        // A struct of strings, numbers and JSON values always serialises.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads a payload written as a [`Turn`]; `None` for another shape.
    pub fn from_payload(payload: &Value) -> Option<Self> {
        serde_json::from_value(payload.clone()).ok()
    }

    /// The JSON Schema of turn nodes titled `title` (an agent's own, e.g.
    /// `claude-turn`): the fields above, and `extra` as the agent's own
    /// `properties` (its token counts, say). Unknown fields are refused.
    pub fn schema(title: &str, description: &str, extra: Map<String, Value>) -> Value {
        let mut properties = json!({
            "index": { "type": "integer", "minimum": 0, "description": "Position in the conversation, from 0." },
            "role": { "type": "string", "description": "system, user, assistant or tool." },
            "text": { "type": "string", "description": "The text blocks, joined by blank lines." },
            "thinking": { "type": "string", "description": "The model's thinking or reasoning, if any." },
            "model": { "type": "string", "description": "The model that wrote an assistant message." },
            "toolCalls": {
                "type": "array",
                "description": "Tool calls: {id, name, input}.",
                "items": {
                    "type": "object",
                    "required": ["name", "input"],
                    "properties": {
                        "id": { "type": ["string", "null"] },
                        "name": { "type": "string" }
                    }
                }
            },
            "toolResults": {
                "type": "array",
                "description": "Tool results: {toolUseId, name, content, isError}.",
                "items": {
                    "type": "object",
                    "required": ["toolUseId", "content", "isError"],
                    "properties": {
                        "toolUseId": { "type": ["string", "null"] },
                        "name": { "type": "string" },
                        "content": { "type": "string" },
                        "isError": { "type": "boolean" }
                    }
                }
            }
        });
        if let Some(map) = properties.as_object_mut() {
            map.extend(extra);
        }
        json!({
            "title": title,
            "description": description,
            "type": "object",
            "required": ["index", "role", "text", "toolCalls", "toolResults"],
            "additionalProperties": false,
            "properties": properties
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_round_trips_with_what_an_agent_adds() {
        let mut turn = Turn::new("assistant", "Let me look.");
        turn.index = 3;
        turn.thinking = Some("hmm".into());
        turn.tool_calls.push(ToolCall {
            id: Some("t1".into()),
            name: "Bash".into(),
            input: json!({ "command": "ls" }),
        });
        turn.extra.insert("promptTokens".into(), json!(12));
        let payload = turn.to_payload();
        assert_eq!(
            payload,
            json!({
                "index": 3, "role": "assistant", "text": "Let me look.", "thinking": "hmm",
                "toolCalls": [{ "id": "t1", "name": "Bash", "input": { "command": "ls" } }],
                "toolResults": [], "promptTokens": 12
            })
        );
        assert_eq!(Turn::from_payload(&payload), Some(turn));
    }

    #[test]
    fn the_schema_takes_a_turn_and_refuses_unknown_fields() {
        let schema = Turn::schema("x-turn", "test", Map::new());
        assert_eq!(schema["title"], "x-turn");
        assert_eq!(schema["additionalProperties"], false);
        let props = schema["properties"].as_object().unwrap();
        for field in Turn::new("user", "hi")
            .to_payload()
            .as_object()
            .unwrap()
            .keys()
        {
            assert!(props.contains_key(field), "{field} is not in the schema");
        }
    }
}
