//! Reading Claude Code's session transcript
//! (`<config dir>/projects/<cwd, every non-alphanumeric character as '-'>/<session id>.jsonl`)
//! and storing it as `claude-turn` nodes under a `claude-detail` node.
//!
//! Pure text processing, tested against a transcript recorded from Claude
//! Code 2.1.328 (`src/testdata/`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use uwf_agent_kit::cli_agent::{self, ToolCall, ToolResult, TranscriptSchemas, Turn};
use uwf_cas::{Cas, CasError, Hash, Store};

/// Title of the schema of one transcript message.
pub const TURN_TITLE: &str = "claude-turn";
/// Title of the schema of a step's detail.
pub const DETAIL_TITLE: &str = "claude-detail";

/// The directory name Claude Code gives a working directory under
/// `projects/`: every character that is not an ASCII letter or digit
/// becomes `-` (`/tmp/a.b/work` → `-tmp-a-b-work`).
pub fn project_dir_name(cwd: &Path) -> String {
    cwd.to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The transcript file of session `id`: in the project directory of `cwd`
/// if it is there, else in any project directory (Claude Code may resolve
/// the working directory differently, e.g. through a symlink).
pub fn find_session_file(config_dir: &Path, cwd: &Path, id: &str) -> Option<PathBuf> {
    let projects = config_dir.join("projects");
    let file = format!("{id}.jsonl");
    let direct = projects.join(project_dir_name(cwd)).join(&file);
    if direct.is_file() {
        return Some(direct);
    }
    std::fs::read_dir(&projects)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join(&file))
        .find(|p| p.is_file())
}

/// The text of a tool result's `content`: a string, or text blocks.
fn block_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p.get("text").and_then(Value::as_str) {
                Some(t) => t.to_owned(),
                None => p.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// One message being assembled.
struct Assembling {
    id: Option<String>,
    role: String,
    text: Vec<String>,
    thinking: Vec<String>,
    tool_calls: Vec<ToolCall>,
    tool_results: Vec<ToolResult>,
    model: Option<String>,
}

impl Assembling {
    fn into_turn(self, index: usize) -> Turn {
        Turn {
            index,
            role: self.role,
            text: self.text.join("\n\n"),
            thinking: (!self.thinking.is_empty()).then(|| self.thinking.join("\n\n")),
            model: self.model,
            tool_calls: self.tool_calls,
            tool_results: self.tool_results,
            extra: Map::new(),
        }
    }
}

/// A string field of a content block.
fn field(block: &Value, key: &str) -> Option<String> {
    block.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The conversation in transcript (or `stream-json`) lines: one turn per
/// `user` / `assistant` message, with its text, thinking, tool calls
/// (`{id, name, input}`) and tool results (`{toolUseId, content,
/// isError}`). Bookkeeping lines (`attachment`, `api-request`,
/// `queue-operation`, `cost-state`, `system`, `result`, …) and meta
/// messages are dropped; the content blocks of one API message, which
/// Claude Code writes as several lines with the same message id, make one
/// turn.
pub fn turns(lines: impl IntoIterator<Item = Map<String, Value>>) -> Vec<Turn> {
    let mut out: Vec<Assembling> = Vec::new();
    for line in lines {
        let kind = line.get("type").and_then(Value::as_str).unwrap_or_default();
        if !matches!(kind, "user" | "assistant")
            || line.get("isMeta").and_then(Value::as_bool) == Some(true)
        {
            continue;
        }
        let Some(message) = line.get("message") else {
            continue;
        };
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or(kind)
            .to_owned();
        let id = message.get("id").and_then(Value::as_str).map(str::to_owned);
        let same = matches!(out.last(), Some(t) if t.role == role && id.is_some() && t.id == id);
        if !same {
            out.push(Assembling {
                id,
                role,
                text: Vec::new(),
                thinking: Vec::new(),
                tool_calls: Vec::new(),
                tool_results: Vec::new(),
                model: message
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            });
        }
        let Some(turn) = out.last_mut() else { continue };
        match message.get("content") {
            Some(Value::String(s)) => turn.text.push(s.clone()),
            Some(Value::Array(blocks)) => {
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => turn
                            .text
                            .push(b.get("text").and_then(Value::as_str).unwrap_or("").into()),
                        Some("thinking") => turn.thinking.push(
                            b.get("thinking")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .into(),
                        ),
                        Some("tool_use") => turn.tool_calls.push(ToolCall {
                            id: field(b, "id"),
                            name: field(b, "name").unwrap_or_default(),
                            input: b.get("input").cloned().unwrap_or(Value::Null),
                        }),
                        Some("tool_result") => turn.tool_results.push(ToolResult {
                            tool_use_id: field(b, "tool_use_id"),
                            content: block_text(b.get("content")),
                            is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                            ..ToolResult::default()
                        }),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(i, t)| t.into_turn(i))
        .collect()
}

/// Schema of a `claude-turn` node: the [`Turn`] every agent writes.
pub fn turn_schema() -> Value {
    Turn::schema(
        TURN_TITLE,
        "One message of a Claude Code session: its text, tool calls and tool results.",
        Map::new(),
    )
}

/// Schema of a `claude-detail` node. `turns` are `cas_ref`s.
pub fn detail_schema() -> Value {
    json!({
        "title": DETAIL_TITLE,
        "description": "How uwf-claude ran a step: the Claude Code session and its transcript.",
        "type": "object",
        "required": ["sessionId", "model", "numTurns", "costUsd", "duration", "durationApi", "transcript", "turnCount", "turns"],
        "additionalProperties": false,
        "properties": {
            "sessionId": { "type": "string", "description": "The Claude Code session id (`claude --resume <id>`)." },
            "model": { "type": ["string", "null"], "description": "The model the session used." },
            "numTurns": { "type": ["integer", "null"], "minimum": 0, "description": "Claude Code's count of agentic turns." },
            "costUsd": { "type": ["number", "null"], "description": "Claude Code's cost estimate, in US dollars." },
            "duration": { "type": "integer", "minimum": 0, "description": "Wall time of `claude -p`, in milliseconds." },
            "durationApi": { "type": ["integer", "null"], "minimum": 0, "description": "Time spent in API calls, in milliseconds." },
            "permissionDenials": { "type": "array", "description": "Tool calls Claude Code refused (not allowed by --allowedTools / the permission mode)." },
            "transcript": { "type": "string", "enum": ["session-file", "stream"], "description": "Where the turns come from: the session's .jsonl file, or (when it cannot be read) the stream-json output." },
            "turnCount": { "type": "integer", "minimum": 0 },
            "turns": {
                "type": "array",
                "items": { "type": "string", "format": "cas_ref" },
                "description": "The claude-turn nodes, in order."
            }
        }
    })
}

/// The detail fields of a step besides its turns.
#[derive(Debug, Clone, PartialEq)]
pub struct Detail {
    /// The session id.
    pub session_id: String,
    /// The model.
    pub model: Option<String>,
    /// Claude Code's `num_turns`.
    pub num_turns: Option<u64>,
    /// Claude Code's `total_cost_usd`.
    pub cost_usd: Option<f64>,
    /// Wall time, ms.
    pub duration_ms: u64,
    /// Claude Code's `duration_api_ms`.
    pub duration_api_ms: Option<u64>,
    /// Claude Code's `permission_denials`.
    pub permission_denials: Vec<Value>,
    /// `session-file` or `stream`.
    pub transcript: &'static str,
}

/// Stores `turns` as `claude-turn` nodes and the `claude-detail` node;
/// returns the detail's hash.
pub fn store<S: Store>(cas: &Cas<S>, detail: &Detail, turns: &[Turn]) -> Result<Hash, CasError> {
    let schemas = TranscriptSchemas {
        detail: detail_schema(),
        turn: turn_schema(),
    };
    let mut m = Map::new();
    m.insert("sessionId".into(), detail.session_id.clone().into());
    m.insert(
        "model".into(),
        detail.model.clone().map_or(Value::Null, Value::String),
    );
    m.insert("numTurns".into(), detail.num_turns.into());
    m.insert("costUsd".into(), detail.cost_usd.into());
    m.insert("duration".into(), detail.duration_ms.into());
    m.insert("durationApi".into(), detail.duration_api_ms.into());
    m.insert(
        "permissionDenials".into(),
        Value::Array(detail.permission_denials.clone()),
    );
    m.insert("transcript".into(), detail.transcript.into());
    cli_agent::store_transcript(cas, &schemas, m, turns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uwf_agent_kit::cli_agent::json_lines;
    use uwf_cas::MemStore;

    /// A session of Claude Code 2.1.328 against the mock: one Bash tool
    /// call writing out.txt, then a frontmatter answer.
    const SESSION: &str = include_str!("testdata/session-tool-call.jsonl");

    #[test]
    fn project_dirs() {
        assert_eq!(
            project_dir_name(Path::new("/tmp/cl.xpox/work")),
            "-tmp-cl-xpox-work"
        );
        assert_eq!(project_dir_name(Path::new("/a_b/c d")), "-a-b-c-d");
    }

    #[test]
    fn turns_of_a_recorded_session() {
        let t: Vec<Value> = turns(json_lines(SESSION))
            .iter()
            .map(Turn::to_payload)
            .collect();
        let roles: Vec<&str> = t.iter().map(|t| t["role"].as_str().unwrap_or("")).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
        assert_eq!(t[0]["text"], "do it");
        let call = &t[1]["toolCalls"][0];
        assert_eq!(call["name"], "Bash");
        assert_eq!(call["input"]["command"], "echo hi > out.txt");
        assert_eq!(t[1]["model"], "claude-opus-5-5");
        let result = &t[2]["toolResults"][0];
        assert_eq!(result["toolUseId"], "toolu_1");
        assert_eq!(result["isError"], false);
        assert_eq!(t[3]["text"], "---\nstatus: done\n---\n\nWrote it.");
        for (i, turn) in t.iter().enumerate() {
            assert_eq!(turn["index"], i);
        }
    }

    #[test]
    fn blocks_of_one_message_merge_and_odd_lines_are_skipped() {
        let lines = [
            json!({"type": "assistant", "message": {"id": "m1", "role": "assistant",
                "content": [{"type": "thinking", "thinking": "hmm"}]}}),
            json!({"type": "assistant", "message": {"id": "m1", "role": "assistant",
                "content": [{"type": "text", "text": "a"}]}}),
            json!({"type": "assistant", "message": {"id": "m1", "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "Read", "input": {"file_path": "x"}}]}}),
            json!({"type": "user", "isMeta": true, "message": {"role": "user", "content": "meta"}}),
            json!({"type": "attachment"}),
            json!({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "is_error": true,
                 "content": [{"type": "text", "text": "no such file"}]}]}}),
            json!({"type": "assistant"}),
        ];
        let t: Vec<Value> = turns(lines.into_iter().filter_map(|v| v.as_object().cloned()))
            .iter()
            .map(Turn::to_payload)
            .collect();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["thinking"], "hmm");
        assert_eq!(t[0]["text"], "a");
        assert_eq!(t[0]["toolCalls"][0]["name"], "Read");
        assert_eq!(t[1]["toolResults"][0]["content"], "no such file");
        assert_eq!(t[1]["toolResults"][0]["isError"], true);
    }

    #[test]
    fn stored_detail_points_at_turns() {
        let cas = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let t = turns(json_lines(SESSION));
        let detail = Detail {
            session_id: "s".into(),
            model: Some("claude-opus-5-5".into()),
            num_turns: Some(2),
            cost_usd: Some(0.1),
            duration_ms: 500,
            duration_api_ms: Some(57),
            permission_denials: vec![],
            transcript: "session-file",
        };
        let h = store(&cas, &detail, &t).unwrap_or_else(|e| panic!("{e}"));
        let node = cas.get(h).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node.payload["turnCount"], 4);
        assert_eq!(node.payload["costUsd"], 0.1);
        let refs = cas.refs(h).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(refs.len(), 4);
    }

    #[test]
    fn finds_the_file_in_another_project_dir() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let other = dir.path().join("projects/-elsewhere");
        std::fs::create_dir_all(&other).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(other.join("abc.jsonl"), "{}\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            find_session_file(dir.path(), Path::new("/work"), "abc"),
            Some(other.join("abc.jsonl"))
        );
        assert_eq!(find_session_file(dir.path(), Path::new("/work"), "x"), None);
    }
}
