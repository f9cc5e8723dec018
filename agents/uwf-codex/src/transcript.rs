//! Reading Codex's session file
//! (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl`) and
//! storing it as `codex-turn` nodes under a `codex-detail` node.
//!
//! Pure text processing, tested against a rollout recorded from codex-cli
//! 0.169.0 (`src/testdata/`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use uwf_agent_kit::cli_agent::{self, ToolCall, ToolResult, TranscriptSchemas, Turn};
use uwf_cas::{Cas, CasError, Hash, Store};

/// Title of the schema of one transcript item.
pub const TURN_TITLE: &str = "codex-turn";
/// Title of the schema of a step's detail.
pub const DETAIL_TITLE: &str = "codex-detail";

/// Messages Codex adds itself (instructions, environment context): not
/// part of the conversation uwf shows.
const BOOKKEEPING_TAGS: [&str; 4] = [
    "<environment_context>",
    "<user_instructions>",
    "<skills_instructions>",
    "<permissions instructions>",
];

/// The rollout file of thread `id` under `codex_home/sessions` (searched
/// through the date directories, newest first).
pub fn find_rollout(codex_home: &Path, id: &str) -> Option<PathBuf> {
    let suffix = format!("-{id}.jsonl");
    let mut stack = vec![codex_home.join("sessions")];
    let mut found = Vec::new();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(&suffix))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found.pop()
}

/// The model of the rollout (its first `turn_context`).
pub fn model(lines: &[Map<String, Value>]) -> Option<String> {
    lines
        .iter()
        .filter(|l| l.get("type").and_then(Value::as_str) == Some("turn_context"))
        .find_map(|l| l.get("payload")?.get("model")?.as_str().map(str::to_owned))
}

fn text_of(content: Option<&Value>) -> String {
    content
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The conversation of a rollout: one turn per `response_item` — user and
/// assistant messages (developer instructions and Codex's own context
/// messages dropped), tool calls (`{id, name, input}`, the input parsed
/// when it is JSON) as assistant turns, tool outputs (`{toolUseId,
/// content, isError}`) as `tool` turns, reasoning summaries as
/// `thinking`. Every other line (`session_meta`, `event_msg`,
/// `turn_context`, …) is bookkeeping and dropped.
pub fn turns(lines: &[Map<String, Value>]) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::new();
    for line in lines {
        if line.get("type").and_then(Value::as_str) != Some("response_item") {
            continue;
        }
        let Some(p) = line.get("payload") else {
            continue;
        };
        let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
        match s("type") {
            "message" => {
                let role = s("role");
                let text = text_of(p.get("content"));
                if role == "developer"
                    || role == "system"
                    || BOOKKEEPING_TAGS
                        .iter()
                        .any(|t| text.trim_start().starts_with(t))
                {
                    continue;
                }
                out.push(Turn::new(role, text));
            }
            "function_call" | "custom_tool_call" | "local_shell_call" => {
                let raw = p
                    .get("arguments")
                    .or_else(|| p.get("input"))
                    .or_else(|| p.get("action"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let input = match &raw {
                    Value::String(text) => serde_json::from_str(text).unwrap_or(raw.clone()),
                    _ => raw,
                };
                let mut t = Turn::new("assistant", "");
                t.tool_calls.push(ToolCall {
                    id: Some(s("call_id").to_owned()),
                    name: s("name").to_owned(),
                    input,
                });
                out.push(t);
            }
            "function_call_output" | "custom_tool_call_output" => {
                let content = match p.get("output") {
                    Some(Value::String(o)) => o.clone(),
                    Some(Value::Object(o)) => o
                        .get("content")
                        .and_then(Value::as_str)
                        .map_or_else(|| Value::Object(o.clone()).to_string(), str::to_owned),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                let failed = p
                    .get("output")
                    .and_then(|o| o.get("success"))
                    .and_then(Value::as_bool)
                    == Some(false);
                let mut t = Turn::new("tool", "");
                t.tool_results.push(ToolResult {
                    tool_use_id: Some(s("call_id").to_owned()),
                    content,
                    is_error: failed,
                    ..ToolResult::default()
                });
                out.push(t);
            }
            "reasoning" => {
                let summary = text_of(p.get("summary"));
                if !summary.is_empty() {
                    let mut t = Turn::new("assistant", "");
                    t.thinking = Some(summary);
                    out.push(t);
                }
            }
            _ => {}
        }
    }
    for (i, t) in out.iter_mut().enumerate() {
        t.index = i;
    }
    out
}

/// Schema of a `codex-turn` node: the [`Turn`] every agent writes.
pub fn turn_schema() -> Value {
    Turn::schema(
        TURN_TITLE,
        "One item of a Codex session: a message, a tool call or a tool output.",
        Map::new(),
    )
}

/// Schema of a `codex-detail` node. `turns` are `cas_ref`s.
pub fn detail_schema() -> Value {
    json!({
        "title": DETAIL_TITLE,
        "description": "How uwf-codex ran a step: the Codex thread and its transcript.",
        "type": "object",
        "required": ["threadId", "model", "usage", "duration", "transcript", "turnCount", "turns"],
        "additionalProperties": false,
        "properties": {
            "threadId": { "type": "string", "description": "The Codex thread id (`codex resume <id>`)." },
            "model": { "type": ["string", "null"], "description": "The model the session used." },
            "usage": { "type": ["object", "null"], "description": "Token usage of the turn, as Codex reports it." },
            "duration": { "type": "integer", "minimum": 0, "description": "Wall time of `codex exec`, in milliseconds." },
            "transcript": { "type": "string", "enum": ["rollout", "none"], "description": "Where the turns come from: the session's rollout file, or nowhere (it could not be read)." },
            "turnCount": { "type": "integer", "minimum": 0 },
            "turns": {
                "type": "array",
                "items": { "type": "string", "format": "cas_ref" },
                "description": "The codex-turn nodes, in order."
            }
        }
    })
}

/// Stores `turns` as `codex-turn` nodes and the `codex-detail` node
/// (`fields`: threadId, model, usage, duration, transcript); returns the
/// detail's hash.
pub fn store<S: Store>(
    cas: &Cas<S>,
    fields: Map<String, Value>,
    turns: &[Turn],
) -> Result<Hash, CasError> {
    let schemas = TranscriptSchemas {
        detail: detail_schema(),
        turn: turn_schema(),
    };
    cli_agent::store_transcript(cas, &schemas, fields, turns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uwf_agent_kit::cli_agent::json_lines;
    use uwf_cas::MemStore;

    /// A rollout of codex-cli 0.169.0 against the mock: one exec_command
    /// call writing out.txt, then a frontmatter answer.
    const ROLLOUT: &str = include_str!("testdata/rollout-tool-call.jsonl");

    fn lines() -> Vec<Map<String, Value>> {
        json_lines(ROLLOUT).collect()
    }

    #[test]
    fn turns_of_a_recorded_rollout() {
        let t: Vec<Value> = turns(&lines()).iter().map(Turn::to_payload).collect();
        let roles: Vec<&str> = t.iter().map(|t| t["role"].as_str().unwrap_or("")).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
        assert_eq!(t[0]["text"], "say ok");
        let call = &t[1]["toolCalls"][0];
        assert_eq!(call["name"], "exec_command");
        assert_eq!(call["id"], "call_1");
        assert_eq!(call["input"]["cmd"], "echo hi > out.txt");
        assert_eq!(t[2]["toolResults"][0]["toolUseId"], "call_1");
        assert!(
            t[2]["toolResults"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .contains("Process exited with code 0")
        );
        assert_eq!(t[3]["text"], "---\nstatus: done\n---\n\nok");
        assert_eq!(model(&lines()).as_deref(), Some("mock-model"));
    }

    #[test]
    fn stored_detail_points_at_turns() {
        let cas = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let t = turns(&lines());
        let mut fields = Map::new();
        fields.insert("threadId".into(), "t".into());
        fields.insert("model".into(), "mock-model".into());
        fields.insert("usage".into(), json!({"input_tokens": 1}));
        fields.insert("duration".into(), 5.into());
        fields.insert("transcript".into(), "rollout".into());
        let h = store(&cas, fields, &t).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cas.refs(h).unwrap_or_else(|e| panic!("{e}")).len(), 4);
    }

    #[test]
    fn finds_the_newest_rollout() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let day = dir.path().join("sessions/2026/11/23");
        std::fs::create_dir_all(&day).unwrap_or_else(|e| panic!("{e}"));
        for name in [
            "rollout-a-x1.jsonl",
            "rollout-b-x1.jsonl",
            "rollout-c-x2.jsonl",
        ] {
            std::fs::write(day.join(name), "").unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(
            find_rollout(dir.path(), "x1"),
            Some(day.join("rollout-b-x1.jsonl"))
        );
        assert_eq!(find_rollout(dir.path(), "x3"), None);
    }

    #[test]
    fn odd_items() {
        let lines: Vec<Map<String, Value>> = [
            json!({"type": "response_item", "payload": {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]}}),
            json!({"type": "response_item", "payload": {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin Patch"}}),
            json!({"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c", "output": {"content": "failed", "success": false}}}),
            json!({"type": "response_item", "payload": {"type": "reasoning", "summary": []}}),
            json!({"type": "event_msg", "payload": {"type": "token_count"}}),
        ]
        .into_iter()
        .filter_map(|v| v.as_object().cloned())
        .collect();
        let t: Vec<Value> = turns(&lines).iter().map(Turn::to_payload).collect();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0]["thinking"], "think");
        assert_eq!(t[1]["toolCalls"][0]["input"], "*** Begin Patch");
        assert_eq!(t[2]["toolResults"][0]["isError"], true);
        assert_eq!(t[2]["toolResults"][0]["content"], "failed");
    }
}
