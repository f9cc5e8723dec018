//! The record of a step: one `uwf-agent-turn` node per message (the
//! prompt, each model call, each tool result) under one `uwf-agent-detail`
//! node.
//!
//! The turns have the shape the other agents' transcripts have (`{index,
//! role, text, toolCalls: [{id, name, input}], toolResults: [{toolUseId,
//! content, isError}]}`, see `uwf_view::detail`), so `uwf thread view`,
//! `thread read` and `thread step-details` show them as a conversation;
//! a model call adds its model, token counts, cost and duration.

use serde_json::{Map, Value, json};
use uwf_agent_kit::cli_agent::{self, ToolCall, TranscriptSchemas, Turn};
use uwf_cas::{Cas, CasError, Hash, Store};

use crate::wire::{Call, Reply, ToolResult};

/// Title of the schema of one message.
pub const TURN_TITLE: &str = "uwf-agent-turn";
/// Title of the schema of a step's detail.
pub const DETAIL_TITLE: &str = "uwf-agent-detail";

/// Schema of a `uwf-agent-turn` node: the [`Turn`] every agent writes,
/// with what a model call adds (its model, token counts, cost, duration
/// and stop reason).
pub fn turn_schema() -> Value {
    let tokens = json!({ "type": ["integer", "null"], "minimum": 0 });
    let mut extra = Map::new();
    extra.insert("promptTokens".into(), tokens.clone());
    extra.insert("completionTokens".into(), tokens);
    extra.insert(
        "costUsd".into(),
        json!({ "type": ["number", "null"], "description": "The call's cost, for a model with a price." }),
    );
    extra.insert(
        "durationMs".into(),
        json!({ "type": "integer", "minimum": 0, "description": "Time of the model call, retries included." }),
    );
    extra.insert("stopReason".into(), json!({ "type": ["string", "null"] }));
    let mut schema = Turn::schema(
        TURN_TITLE,
        "One message of a uwf-agent step: the prompt, a model call (its text and tool calls) or a tool result.",
        extra,
    );
    schema["properties"]["role"] =
        json!({ "type": "string", "enum": ["system", "user", "assistant", "tool"] });
    schema
}

/// Schema of a `uwf-agent-detail` node. `turns` are `cas_ref`s.
pub fn detail_schema() -> Value {
    let count = json!({ "type": ["integer", "null"], "minimum": 0 });
    json!({
        "title": DETAIL_TITLE,
        "description": "How uwf-agent ran a step: the model, what it used and how it ended, and the conversation.",
        "type": "object",
        "required": ["model", "alias", "api", "ended", "modelCalls", "toolCalls", "promptTokens", "completionTokens", "totalTokens", "costUsd", "durationMs", "turnCount", "turns"],
        "additionalProperties": false,
        "properties": {
            "model": { "type": "string", "description": "The provider's model name." },
            "alias": { "type": "string", "description": "The model alias of config.yaml." },
            "api": { "type": "string", "enum": ["openai", "anthropic"] },
            "ended": { "type": "string", "enum": ["submit", "answer", "failed"], "description": "submit: the model handed in the output with the submit tool; answer: it answered in text (extracted by the kit); failed: the step failed (the error says why; nothing was written to the thread)." },
            "error": { "type": "string", "description": "Why a failed step failed." },
            "modelCalls": { "type": "integer", "minimum": 0 },
            "toolCalls": { "type": "integer", "minimum": 0 },
            "promptTokens": count,
            "completionTokens": count,
            "totalTokens": count,
            "costUsd": { "type": ["number", "null"], "description": "Null when the model has no price in config.yaml." },
            "durationMs": { "type": "integer", "minimum": 0 },
            "turnCount": { "type": "integer", "minimum": 0 },
            "turns": {
                "type": "array",
                "items": { "type": "string", "format": "cas_ref" },
                "description": "The uwf-agent-turn nodes, in order."
            }
        }
    })
}

/// The turns of a step, recorded as it goes.
#[derive(Debug, Default)]
pub struct Recorder {
    turns: Vec<Turn>,
}

fn call_of(c: &Call) -> ToolCall {
    let input = match &c.input {
        Ok(v) => v.clone(),
        Err(text) => Value::String(text.clone()),
    };
    ToolCall {
        id: Some(c.id.clone()),
        name: c.name.clone(),
        input,
    }
}

impl Recorder {
    fn push(&mut self, mut turn: Turn) {
        turn.index = self.turns.len();
        self.turns.push(turn);
    }

    /// A prompt message (`system` or `user`).
    pub fn message(&mut self, role: &str, text: &str) {
        self.push(Turn::new(role, text));
    }

    /// A model call.
    pub fn model_call(&mut self, reply: &Reply, model: &str, cost: Option<f64>, duration_ms: u64) {
        let mut t = Turn::new("assistant", reply.text.clone());
        t.tool_calls = reply.calls.iter().map(call_of).collect();
        t.model = Some(reply.model.as_deref().unwrap_or(model).to_owned());
        t.extra
            .insert("promptTokens".into(), reply.input_tokens.into());
        t.extra
            .insert("completionTokens".into(), reply.output_tokens.into());
        t.extra.insert("costUsd".into(), cost.into());
        t.extra.insert("durationMs".into(), duration_ms.into());
        t.extra
            .insert("stopReason".into(), reply.stop.clone().into());
        self.push(t);
    }

    /// A tool's result.
    pub fn tool_result(&mut self, r: &ToolResult, duration_ms: u64) {
        let mut t = Turn::new("tool", "");
        let mut result = cli_agent::ToolResult {
            tool_use_id: Some(r.id.clone()),
            name: Some(r.name.clone()),
            content: r.content.clone(),
            is_error: r.is_error,
            ..cli_agent::ToolResult::default()
        };
        result.extra.insert("durationMs".into(), duration_ms.into());
        t.tool_results.push(result);
        self.push(t);
    }

    /// Stores the turns and the detail (`fields` plus `turnCount` and
    /// `turns`); returns the detail's hash.
    pub fn store<S: Store>(
        &self,
        cas: &Cas<S>,
        fields: Map<String, Value>,
    ) -> Result<Hash, CasError> {
        let schemas = TranscriptSchemas {
            detail: detail_schema(),
            turn: turn_schema(),
        };
        cli_agent::store_transcript(cas, &schemas, fields, &self.turns)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use uwf_cas::MemStore;

    #[test]
    fn stored_turns_validate_and_read_as_a_conversation() {
        let cas = Cas::new(MemStore::new()).unwrap();
        let mut r = Recorder::default();
        r.message("system", "sys");
        r.message("user", "task");
        let reply = Reply {
            text: String::new(),
            calls: vec![Call {
                id: "c1".into(),
                name: "read_file".into(),
                input: Ok(json!({"path": "a"})),
            }],
            input_tokens: Some(10),
            output_tokens: None,
            stop: Some("tool_calls".into()),
            model: None,
        };
        r.model_call(&reply, "m", Some(0.5), 12);
        r.tool_result(
            &ToolResult {
                id: "c1".into(),
                name: "read_file".into(),
                content: "x".into(),
                is_error: false,
            },
            3,
        );
        let mut fields = Map::new();
        for (k, v) in [
            ("model", json!("m")),
            ("alias", json!("a")),
            ("api", json!("openai")),
            ("ended", json!("answer")),
            ("modelCalls", json!(1)),
            ("toolCalls", json!(1)),
            ("promptTokens", json!(10)),
            ("completionTokens", Value::Null),
            ("totalTokens", Value::Null),
            ("costUsd", json!(0.5)),
            ("durationMs", json!(20)),
        ] {
            fields.insert(k.into(), v);
        }
        let h = r.store(&cas, fields).unwrap();
        let node = cas.get(h).unwrap();
        assert_eq!(node.payload["turnCount"], 4);
        let refs = cas.refs(h).unwrap();
        let call = cas.get(refs[2].hash).unwrap().payload;
        assert_eq!(call["toolCalls"][0]["name"], "read_file");
        assert_eq!(call["model"], "m");
        let result = cas.get(refs[3].hash).unwrap().payload;
        assert_eq!(result["toolResults"][0]["toolUseId"], "c1");
        assert_eq!(result["index"], 3);
    }
}
