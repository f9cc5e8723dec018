//! The conversation, and how it goes over the wire of each provider API.
//!
//! The loop keeps one provider-neutral conversation ([`Item`]s) and turns
//! it into a request body for the provider's API each turn:
//!
//! - **OpenAI chat completions** (`POST <baseUrl>/chat/completions`): a
//!   `system` message, `user` messages, `assistant` messages with
//!   `tool_calls: [{id, type: "function", function: {name, arguments}}]`
//!   (`arguments` JSON text), and one `{role: "tool", tool_call_id,
//!   content}` message per result; tools as `{type: "function", function:
//!   {name, description, parameters}}`.
//! - **Anthropic Messages** (`POST <baseUrl>/messages`): `system` as a
//!   top-level field, `max_tokens`, `assistant` messages of `text` and
//!   `tool_use {id, name, input}` blocks, and the results of one turn as
//!   `tool_result {tool_use_id, content, is_error}` blocks of the next
//!   `user` message; tools as `{name, description, input_schema}`.

use serde_json::{Value, json};
use uwf_protocol::ProviderApi;

/// One tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The provider's id of the call (`tool_call_id` / `tool_use_id`).
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments; `Err` holds arguments text that is not a JSON object.
    pub input: Result<Value, String>,
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The call's id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// What goes back to the model.
    pub content: String,
    /// Whether the tool failed.
    pub is_error: bool,
}

/// One entry of the conversation after the system prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A user message.
    User(String),
    /// A model turn: its text and tool calls.
    Assistant {
        /// The text.
        text: String,
        /// The calls.
        calls: Vec<Call>,
    },
    /// The results of the previous turn's calls, in their order.
    Results(Vec<ToolResult>),
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Its name.
    pub name: &'static str,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments (an object schema).
    pub parameters: Value,
}

/// What the model answered in one turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    /// Its text.
    pub text: String,
    /// Its tool calls, in order.
    pub calls: Vec<Call>,
    /// Prompt (input) tokens, when reported.
    pub input_tokens: Option<u64>,
    /// Completion (output) tokens, when reported.
    pub output_tokens: Option<u64>,
    /// Why it stopped (`finish_reason` / `stop_reason`).
    pub stop: Option<String>,
    /// The model that answered, when the response names it.
    pub model: Option<String>,
}

impl Reply {
    /// A reply of response `body`: its `usage` fields named by `usage`
    /// (input, output), its stop reason and its `model`.
    fn of(
        body: &Value,
        text: String,
        calls: Vec<Call>,
        usage: [&str; 2],
        stop: Option<&Value>,
    ) -> Self {
        let tokens = |k: &str| body.pointer(&format!("/usage/{k}")).and_then(Value::as_u64);
        let text_of = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        Reply {
            text,
            calls,
            input_tokens: tokens(usage[0]),
            output_tokens: tokens(usage[1]),
            stop: text_of(stop),
            model: text_of(body.get("model")),
        }
    }
}

/// The path of the API's endpoint under the base URL.
pub fn path(api: ProviderApi) -> &'static str {
    match api {
        ProviderApi::Openai => "chat/completions",
        ProviderApi::Anthropic => "messages",
    }
}

/// The request body of one turn.
pub fn body(
    api: ProviderApi,
    model: &str,
    max_tokens: u32,
    system: &str,
    items: &[Item],
    tools: &[ToolSpec],
) -> Value {
    match api {
        ProviderApi::Openai => openai_body(model, system, items, tools),
        ProviderApi::Anthropic => anthropic_body(model, max_tokens, system, items, tools),
    }
}

/// The model's reply in a response body of `api`.
pub fn parse(api: ProviderApi, body: &Value) -> Result<Reply, String> {
    match api {
        ProviderApi::Openai => parse_openai(body),
        ProviderApi::Anthropic => parse_anthropic(body),
    }
}

fn input_value(input: &Result<Value, String>) -> Value {
    match input {
        Ok(v) => v.clone(),
        Err(text) => Value::String(text.clone()),
    }
}

fn openai_body(model: &str, system: &str, items: &[Item], tools: &[ToolSpec]) -> Value {
    let mut messages = vec![json!({ "role": "system", "content": system })];
    for item in items {
        match item {
            Item::User(text) => messages.push(json!({ "role": "user", "content": text })),
            Item::Assistant { text, calls } => {
                let mut m = json!({ "role": "assistant", "content": text });
                if !calls.is_empty() {
                    m["tool_calls"] = calls
                        .iter()
                        .map(|c| {
                            let arguments = match &c.input {
                                Ok(v) => v.to_string(),
                                Err(text) => text.clone(),
                            };
                            json!({ "id": c.id, "type": "function",
                                    "function": { "name": c.name, "arguments": arguments } })
                        })
                        .collect();
                    if text.is_empty() {
                        m["content"] = Value::Null;
                    }
                }
                messages.push(m);
            }
            Item::Results(results) => {
                for r in results {
                    messages.push(
                        json!({ "role": "tool", "tool_call_id": r.id, "content": r.content }),
                    );
                }
            }
        }
    }
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({ "type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters } })
        })
        .collect();
    json!({ "model": model, "messages": messages, "tools": tools, "stream": false })
}

fn anthropic_body(
    model: &str,
    max_tokens: u32,
    system: &str,
    items: &[Item],
    tools: &[ToolSpec],
) -> Value {
    let mut messages = Vec::new();
    for item in items {
        match item {
            Item::User(text) => messages.push(json!({ "role": "user", "content": text })),
            Item::Assistant { text, calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                for c in calls {
                    // The API wants an object; arguments that were no JSON
                    // object are sent as what the model meant to give.
                    let input = match &c.input {
                        Ok(v @ Value::Object(_)) => v.clone(),
                        other => json!({ "_unparsed": input_value(other) }),
                    };
                    blocks.push(
                        json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": input }),
                    );
                }
                messages.push(json!({ "role": "assistant", "content": blocks }));
            }
            Item::Results(results) => {
                let blocks: Vec<Value> = results
                    .iter()
                    .map(|r| {
                        json!({ "type": "tool_result", "tool_use_id": r.id,
                                "content": r.content, "is_error": r.is_error })
                    })
                    .collect();
                messages.push(json!({ "role": "user", "content": blocks }));
            }
        }
    }
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
        .collect();
    json!({ "model": model, "max_tokens": max_tokens, "system": system,
            "messages": messages, "tools": tools })
}

fn excerpt(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

fn parse_openai(body: &Value) -> Result<Reply, String> {
    let choice = body
        .pointer("/choices/0")
        .ok_or_else(|| format!("no choices[0] in {}", excerpt(body)))?;
    let message = choice
        .get("message")
        .ok_or_else(|| format!("no choices[0].message in {}", excerpt(body)))?;
    let text = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut calls = Vec::new();
    for (i, tc) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let f = tc.get("function").unwrap_or(tc);
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("tool call {i} has no function name"))?;
        let input = match f.get("arguments") {
            Some(Value::String(s)) if s.trim().is_empty() => Ok(json!({})),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => Ok(v),
                _ => Err(s.clone()),
            },
            Some(v @ Value::Object(_)) => Ok(v.clone()),
            None | Some(Value::Null) => Ok(json!({})),
            Some(other) => Err(other.to_string()),
        };
        let id = tc
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map_or_else(|| format!("call_{i}"), str::to_owned);
        calls.push(Call {
            id,
            name: name.to_owned(),
            input,
        });
    }
    Ok(Reply::of(
        body,
        text,
        calls,
        ["prompt_tokens", "completion_tokens"],
        choice.get("finish_reason"),
    ))
}

fn parse_anthropic(body: &Value) -> Result<Reply, String> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no content blocks in {}", excerpt(body)))?;
    let mut text = Vec::new();
    let mut calls = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push(b.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("tool_use") => {
                let name = b
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("tool_use block {i} has no name"))?;
                let id = b
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("tool_use block {i} has no id"))?;
                let input = match b.get("input") {
                    Some(v @ Value::Object(_)) => Ok(v.clone()),
                    None | Some(Value::Null) => Ok(json!({})),
                    Some(other) => Err(other.to_string()),
                };
                calls.push(Call {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    input,
                });
            }
            _ => {}
        }
    }
    Ok(Reply::of(
        body,
        text.join(""),
        calls,
        ["input_tokens", "output_tokens"],
        body.get("stop_reason"),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn conversation() -> Vec<Item> {
        vec![
            Item::User("fix it".into()),
            Item::Assistant {
                text: String::new(),
                calls: vec![
                    Call {
                        id: "c1".into(),
                        name: "read_file".into(),
                        input: Ok(json!({"path": "a"})),
                    },
                    Call {
                        id: "c2".into(),
                        name: "grep".into(),
                        input: Err("{not json".into()),
                    },
                ],
            },
            Item::Results(vec![
                ToolResult {
                    id: "c1".into(),
                    name: "read_file".into(),
                    content: "1\ta".into(),
                    is_error: false,
                },
                ToolResult {
                    id: "c2".into(),
                    name: "grep".into(),
                    content: "bad arguments".into(),
                    is_error: true,
                },
            ]),
        ]
    }

    fn spec() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "read_file",
            description: "reads".into(),
            parameters: json!({"type": "object"}),
        }]
    }

    #[test]
    fn openai_request_shape() {
        let b = body(
            ProviderApi::Openai,
            "m",
            100,
            "sys",
            &conversation(),
            &spec(),
        );
        let m = b["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"path":"a"}"#
        );
        assert_eq!(m[2]["tool_calls"][1]["function"]["arguments"], "{not json");
        assert_eq!(m[3]["tool_call_id"], "c1");
        assert_eq!(m[4]["tool_call_id"], "c2");
        assert_eq!(b["tools"][0]["type"], "function");
        assert_eq!(b["tools"][0]["function"]["parameters"]["type"], "object");
        assert!(b.get("max_tokens").is_none());
    }

    #[test]
    fn anthropic_request_shape() {
        let b = body(
            ProviderApi::Anthropic,
            "m",
            100,
            "sys",
            &conversation(),
            &spec(),
        );
        assert_eq!(b["system"], "sys");
        assert_eq!(b["max_tokens"], 100);
        let m = b["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(m[1]["content"][0]["type"], "tool_use");
        assert_eq!(m[1]["content"][0]["input"], json!({"path": "a"}));
        assert_eq!(
            m[1]["content"][1]["input"],
            json!({"_unparsed": "{not json"})
        );
        assert_eq!(m[2]["content"][0]["type"], "tool_result");
        assert_eq!(m[2]["content"][0]["tool_use_id"], "c1");
        assert_eq!(m[2]["content"][1]["is_error"], true);
        assert_eq!(b["tools"][0]["input_schema"]["type"], "object");
    }

    #[test]
    fn parses_both_replies() {
        let r = parse(
            ProviderApi::Openai,
            &json!({"model": "x", "choices": [{"finish_reason": "tool_calls", "message": {"content": null,
                "tool_calls": [{"id": "a", "function": {"name": "t", "arguments": "{\"k\":1}"}},
                               {"function": {"name": "u", "arguments": "[1]"}}]}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
        )
        .unwrap();
        assert_eq!(r.calls[0].input, Ok(json!({"k": 1})));
        assert_eq!(r.calls[1].id, "call_1");
        assert_eq!(r.calls[1].input, Err("[1]".into()));
        assert_eq!((r.input_tokens, r.output_tokens), (Some(5), Some(2)));
        assert_eq!(r.stop.as_deref(), Some("tool_calls"));
        let r = parse(
            ProviderApi::Anthropic,
            &json!({"content": [{"type": "text", "text": "hi"},
                {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"a": 2}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 7, "output_tokens": 3}}),
        )
        .unwrap();
        assert_eq!(r.text, "hi");
        assert_eq!(r.calls[0].id, "toolu_1");
        assert_eq!(r.input_tokens, Some(7));
        assert!(parse(ProviderApi::Openai, &json!({"error": "x"})).is_err());
        assert!(parse(ProviderApi::Anthropic, &json!({"type": "error"})).is_err());
    }
}
