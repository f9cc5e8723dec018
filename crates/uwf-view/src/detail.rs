//! A step's detail node, read for people: a transcript as a conversation,
//! a raw answer as text, anything else as JSON.
//!
//! Transcripts are detail nodes whose `turns` are `cas_ref`s to turn nodes
//! (`uwf-agent`, `uwf-claude`, `uwf-codex`, `uwf-hermes`; see
//! `uwf_agent_kit::cli_agent::store_transcript`). A turn is the
//! [`uwf_protocol::transcript::Turn`] the agents write (uwf-agent, Claude
//! Code, Codex); hermes' OpenAI-style turns `{role, content, reasoning,
//! toolCalls: [{function: {name, arguments}}], toolName}` are mapped onto it
//! ([`stored_turn`]).

use serde_json::Value;
use uwf_cas::{Cas, Hash, Store};
use uwf_protocol::transcript;

/// Most turns read from one transcript.
pub const MAX_TURNS: usize = 500;

/// One tool call of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool.
    pub name: String,
    /// Its input: the shell command or path when there is one, else JSON.
    pub input: String,
}

/// One tool result of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The tool, when the transcript names it.
    pub name: Option<String>,
    /// What it returned.
    pub content: String,
    /// Whether it failed.
    pub is_error: bool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Turn {
    /// `user`, `assistant`, `tool`, `system`, …
    pub role: String,
    /// The message text.
    pub text: String,
    /// The model's thinking or reasoning, if recorded.
    pub thinking: Option<String>,
    /// Tool calls made in this turn.
    pub calls: Vec<ToolCall>,
    /// Tool results carried by this turn.
    pub results: Vec<ToolResult>,
}

/// What a detail node holds, shaped for reading.
#[derive(Debug, Clone, PartialEq)]
pub enum Detail {
    /// A conversation: the detail's other fields (model, session, …) as
    /// `meta`, and its turns.
    Transcript {
        /// Fields of the detail node other than the turns, as text.
        meta: Vec<(String, String)>,
        /// The turns, in order.
        turns: Vec<Turn>,
        /// Turns that could not be read (missing nodes) or were left out.
        missing: usize,
    },
    /// A text answer (`{text}`, or an LLM call's `answer` with its fields
    /// as `meta`).
    Text {
        /// Other fields, as text.
        meta: Vec<(String, String)>,
        /// The text.
        text: String,
    },
    /// The terminal StepNode of a child thread (shown as the child thread).
    ChildThread,
    /// Any other node: its payload.
    Json(Value),
    /// The node is not in the store.
    Missing,
}

/// A detail as read, with its schema's title (e.g. `claude-detail`).
#[derive(Debug, Clone, PartialEq)]
pub struct DetailView {
    /// The detail node.
    pub hash: Hash,
    /// The title of its type, when it has one.
    pub title: Option<String>,
    /// Its content.
    pub detail: Detail,
}

/// Reads the detail node `hash` of a step.
pub fn read<S: Store>(cas: &Cas<S>, hash: Hash) -> DetailView {
    let mut view = DetailView {
        hash,
        title: None,
        detail: Detail::Missing,
    };
    let Ok(Some(node)) = cas.try_get(hash) else {
        return view;
    };
    view.title = cas
        .schema(node.type_hash)
        .ok()
        .and_then(|s| uwf_cas::schema::title_of(&s).map(str::to_string));
    view.detail = if node.type_hash == cas.types().step_node {
        Detail::ChildThread
    } else {
        shape(cas, node.payload)
    };
    view
}

fn shape<S: Store>(cas: &Cas<S>, payload: Value) -> Detail {
    let Value::Object(map) = payload else {
        return Detail::Json(payload);
    };
    let meta = |skip: &[&str]| -> Vec<(String, String)> {
        map.iter()
            .filter(|(k, v)| !skip.contains(&k.as_str()) && !v.is_null())
            .map(|(k, v)| (k.clone(), scalar(v)))
            .collect()
    };
    if let Some(Value::Array(refs)) = map.get("turns") {
        let mut turns = Vec::new();
        let mut missing = refs.len().saturating_sub(MAX_TURNS);
        for r in refs.iter().take(MAX_TURNS) {
            let node = r
                .as_str()
                .and_then(|s| s.parse::<Hash>().ok())
                .and_then(|h| cas.try_get(h).ok().flatten());
            match node {
                Some(n) => turns.push(turn(&n.payload)),
                None => missing += 1,
            }
        }
        return Detail::Transcript {
            meta: meta(&["turns", "turnCount"]),
            turns,
            missing,
        };
    }
    for key in ["text", "answer"] {
        if let Some(Value::String(t)) = map.get(key) {
            return Detail::Text {
                meta: meta(&[key]),
                text: t.clone(),
            };
        }
    }
    Detail::Json(Value::Object(map))
}

/// A value as one piece of text: strings as they are, the rest as JSON.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn text_of(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        // Content blocks: their text parts.
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                other => other
                    .get("text")
                    .and_then(Value::as_str)
                    .map_or_else(|| other.to_string(), str::to_string),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.trim().is_empty()).then_some(s)
}

/// A turn node's payload as the [`transcript::Turn`] every agent writes.
/// A node in another shape — hermes' turns keep OpenAI's message shape
/// (`{role, content, reasoning, toolCalls: [{function: {name,
/// arguments}}], toolName}`), and older nodes may hold content blocks — is
/// mapped onto it field by field.
pub fn stored_turn(p: &Value) -> transcript::Turn {
    if p.get("text").is_some()
        && let Some(t) = transcript::Turn::from_payload(p)
    {
        return t;
    }
    let role = p
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    let text = text_of(p.get("text").or_else(|| p.get("content")));
    let thinking = non_empty(text_of(p.get("thinking").or_else(|| p.get("reasoning"))));
    let tool_calls = p
        .get("toolCalls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let (name, input) = call_parts(c)?;
            Some(transcript::ToolCall {
                id: c.get("id").and_then(Value::as_str).map(str::to_string),
                name: name.to_string(),
                input,
            })
        })
        .collect();
    let mut tool_results: Vec<transcript::ToolResult> = p
        .get("toolResults")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| transcript::ToolResult {
            tool_use_id: r
                .get("toolUseId")
                .and_then(Value::as_str)
                .map(str::to_string),
            name: r.get("name").and_then(Value::as_str).map(str::to_string),
            content: text_of(r.get("content")),
            is_error: r.get("isError").and_then(Value::as_bool).unwrap_or(false),
            ..transcript::ToolResult::default()
        })
        .collect();
    let mut text = text;
    // hermes: a tool result is a message of its own.
    if role == "tool" && tool_results.is_empty() {
        tool_results.push(transcript::ToolResult {
            tool_use_id: p
                .get("toolCallId")
                .and_then(Value::as_str)
                .map(str::to_string),
            name: p
                .get("toolName")
                .and_then(Value::as_str)
                .map(str::to_string),
            content: std::mem::take(&mut text),
            ..transcript::ToolResult::default()
        });
    }
    transcript::Turn {
        index: p
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or_default(),
        role,
        text,
        thinking,
        tool_calls,
        tool_results,
        ..transcript::Turn::default()
    }
}

/// A turn node's payload, shaped for reading ([`stored_turn`], then each
/// tool call's input as the one field a person wants to see).
pub fn turn(p: &Value) -> Turn {
    let t = stored_turn(p);
    Turn {
        role: t.role,
        text: t.text,
        thinking: t.thinking.and_then(non_empty),
        calls: t.tool_calls.iter().map(shown_call).collect(),
        results: t
            .tool_results
            .into_iter()
            .map(|r| ToolResult {
                name: r.name,
                content: r.content,
                is_error: r.is_error,
            })
            .collect(),
    }
}

/// A tool call's name and input, in either shape: `{name, input}` (Claude
/// Code, Codex) or OpenAI's `{function: {name, arguments}}` (hermes, whose
/// `arguments` is JSON text).
pub fn call_parts(c: &Value) -> Option<(&str, Value)> {
    match c.get("function") {
        Some(f) => {
            let input = match f.get("arguments") {
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                }
                Some(v) => v.clone(),
                None => Value::Null,
            };
            Some((f.get("name")?.as_str()?, input))
        }
        None => Some((
            c.get("name")?.as_str()?,
            c.get("input").cloned().unwrap_or(Value::Null),
        )),
    }
}

/// The one field of a tool's input a person wants to see, when it has
/// one: the command (a shell line, or `argv` words joined), the path, the
/// pattern or the URL.
pub fn main_input(input: &Value) -> Option<String> {
    [
        "command",
        "cmd",
        "argv",
        "file_path",
        "path",
        "pattern",
        "url",
    ]
    .iter()
    .find_map(|k| match input.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    })
}

fn shown_call(c: &transcript::ToolCall) -> ToolCall {
    let shown = main_input(&c.input).unwrap_or_else(|| match &c.input {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    });
    ToolCall {
        name: c.name.clone(),
        input: shown,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uwf_cas::MemStore;

    use super::*;

    /// What a writer stores is what the reader gets back, field for field;
    /// hermes' OpenAI-style tool message becomes a tool result.
    #[test]
    fn the_writers_turn_is_the_readers_turn() {
        let mut written = transcript::Turn::new("assistant", "done");
        written.index = 2;
        written.tool_calls.push(transcript::ToolCall {
            id: Some("c1".into()),
            name: "Bash".into(),
            input: json!({"command": "make"}),
        });
        written.extra.insert("durationMs".into(), json!(5));
        assert_eq!(stored_turn(&written.to_payload()), written);
        let hermes = stored_turn(&json!({"index": 4, "role": "tool", "content": "ok",
            "toolCalls": null, "reasoning": null, "toolCallId": "call_1", "toolName": "terminal"}));
        assert_eq!(hermes.index, 4);
        assert_eq!(hermes.text, "");
        assert_eq!(
            hermes.tool_results[0].tool_use_id.as_deref(),
            Some("call_1")
        );
        assert_eq!(hermes.tool_results[0].name.as_deref(), Some("terminal"));
        assert_eq!(hermes.tool_results[0].content, "ok");
    }

    #[test]
    fn claude_and_codex_turns() {
        let t = turn(
            &json!({"index": 1, "role": "assistant", "text": "Let me look.",
            "thinking": "hmm", "toolCalls": [{"id": "t", "name": "Bash", "input": {"command": "ls -la"}}],
            "toolResults": []}),
        );
        assert_eq!(t.role, "assistant");
        assert_eq!(t.text, "Let me look.");
        assert_eq!(t.thinking.as_deref(), Some("hmm"));
        assert_eq!(
            t.calls,
            vec![ToolCall {
                name: "Bash".into(),
                input: "ls -la".into()
            }]
        );
        let r = turn(&json!({"role": "user", "text": "", "toolCalls": [],
            "toolResults": [{"toolUseId": "t", "content": [{"type": "text", "text": "no such file"}], "isError": true}]}));
        assert_eq!(r.results[0].content, "no such file");
        assert!(r.results[0].is_error);
    }

    #[test]
    fn argv_inputs_show_as_one_command_line() {
        let t = turn(&json!({"role": "assistant", "text": "",
            "toolCalls": [{"id": "c", "name": "run_command", "input": {"argv": ["sh", "test.sh"]}}]}));
        assert_eq!(t.calls[0].input, "sh test.sh");
        // uwf-agent: one result per `tool` turn, naming its tool.
        let r = turn(&json!({"role": "tool", "text": "", "toolCalls": [],
            "toolResults": [{"toolUseId": "c", "name": "run_command", "content": "ok", "isError": false}]}));
        assert_eq!(r.results[0].name.as_deref(), Some("run_command"));
        assert_eq!(r.results[0].content, "ok");
    }

    #[test]
    fn hermes_turns() {
        let t = turn(&json!({"index": 0, "role": "assistant", "content": "",
            "toolCalls": [{"id": "c", "function": {"name": "terminal", "arguments": "{\"command\": \"cargo test\"}"}}],
            "reasoning": null}));
        assert_eq!(t.calls[0].name, "terminal");
        assert_eq!(t.calls[0].input, "cargo test");
        assert_eq!(t.thinking, None);
        let r = turn(
            &json!({"index": 1, "role": "tool", "content": "ok", "toolCalls": null,
            "reasoning": null, "toolCallId": "c", "toolName": "terminal"}),
        );
        assert_eq!(r.results[0].name.as_deref(), Some("terminal"));
        assert_eq!(r.results[0].content, "ok");
    }

    #[test]
    fn details_by_shape() -> Result<(), Box<dyn std::error::Error>> {
        let cas = Cas::new(MemStore::new())?;
        let any = cas
            .put_schema(json!({"title": "t-turn", "type": "object"}))?
            .hash;
        let t0 = cas
            .put(any, json!({"role": "user", "text": "Plan it"}))?
            .hash;
        let detail_type = cas
            .put_schema(
                json!({"title": "t-detail", "type": "object", "properties": {
                "turns": {"type": "array", "items": {"type": "string", "format": "cas_ref"}}}}),
            )?
            .hash;
        let missing = Hash::from_u64(99).to_string();
        let d = cas
            .put(
                detail_type,
                json!({"model": "m", "turnCount": 2, "turns": [t0.to_string(), missing]}),
            )?
            .hash;
        let v = read(&cas, d);
        assert_eq!(v.title.as_deref(), Some("t-detail"));
        let Detail::Transcript {
            meta,
            turns,
            missing,
        } = v.detail
        else {
            panic!("not a transcript: {v:?}");
        };
        assert_eq!(meta, vec![("model".to_string(), "m".to_string())]);
        assert_eq!(turns.len(), 1);
        assert_eq!(missing, 1);

        let raw = cas.put(any, json!({"text": "the answer"}))?.hash;
        assert_eq!(
            read(&cas, raw).detail,
            Detail::Text {
                meta: vec![],
                text: "the answer".into()
            }
        );
        let other = cas.put(any, json!({"n": 1}))?.hash;
        assert_eq!(read(&cas, other).detail, Detail::Json(json!({"n": 1})));
        assert_eq!(read(&cas, Hash::from_u64(12345)).detail, Detail::Missing);
        Ok(())
    }
}
