//! Reading what hermes tells us: the session id on stderr, the transcript
//! from `hermes sessions export`, and the warning lines hermes prints on
//! stdout instead of an answer.
//!
//! Everything here is pure text processing, tested against output recorded
//! from hermes-agent 0.19.0 (`src/testdata/`).

use serde_json::Value;
use uwf_agent_kit::cli_agent::{ToolCall, ToolResult, Turn as StoredTurn};

/// The session id in hermes' stderr: the last line `session_id: <id>`.
///
/// `hermes chat --quiet` prints exactly `\n` + `session_id: <id>\n` on
/// stderr; the id is absent when hermes stops before creating its agent
/// (e.g. no provider configured).
pub fn session_id(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .rev()
        .map(|l| l.trim_end_matches('\r'))
        .filter_map(|l| l.strip_prefix("session_id: "))
        .find(|id| !id.is_empty() && !id.contains(char::is_whitespace))
}

/// A line of stdout with which hermes exits 0 without having answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sentinel {
    /// `⚠️  Reached maximum iterations (N). Requesting summary...`: the
    /// `--max-turns` budget ran out; hermes printed a summary instead.
    MaxTurns {
        /// The budget hermes reports, when the line names it.
        limit: Option<u32>,
    },
    /// `⚠️ No reply: the model returned empty content after retries …`.
    NoReply,
}

/// Finds a [`Sentinel`] line in hermes' stdout. Only the start of a line
/// counts, so an answer quoting the phrase mid-sentence is not mistaken for
/// one.
pub fn sentinel(stdout: &str) -> Option<Sentinel> {
    stdout.lines().find_map(|line| {
        let rest = line
            .trim_start()
            .strip_prefix('⚠')?
            .trim_start_matches('\u{fe0f}')
            .trim_start();
        if let Some(after) = rest.strip_prefix("Reached maximum iterations") {
            let limit = after
                .trim_start()
                .strip_prefix('(')
                .and_then(|s| s.split(')').next())
                .and_then(|n| n.trim().parse().ok());
            Some(Sentinel::MaxTurns { limit })
        } else if rest.starts_with("No reply") {
            Some(Sentinel::NoReply)
        } else {
            None
        }
    })
}

/// One exported session: the fields uwf-hermes uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The session id.
    pub id: String,
    /// The model hermes used, as the session records it.
    pub model: Option<String>,
    /// The conversation, in order (the export's `messages`).
    pub messages: Vec<Value>,
}

/// Why the output of `hermes sessions export` gave no session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// No line of the output is a JSON object (hermes prints
    /// `Session '<id>' not found.` and exits 0 for an unknown id).
    #[error("the export is not JSON: {first_line:?}")]
    NotJson {
        /// The first non-empty line, shortened.
        first_line: String,
    },
    /// JSON objects, but none for this session.
    #[error("the export holds no session {0}")]
    NoSuchSession(String),
    /// The session has no `messages` array.
    #[error("session {0} in the export has no `messages` array")]
    NoMessages(String),
}

/// Parses the JSONL of `hermes sessions export --session-id <id> -`: one
/// session object per line; takes the one whose `id` is `id`.
pub fn parse_export(stdout: &str, id: &str) -> Result<Session, ExportError> {
    let mut objects = stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter_map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        })
        .peekable();
    if objects.peek().is_none() {
        let first_line = stdout
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("(empty)");
        return Err(ExportError::NotJson {
            first_line: shorten(first_line, 200),
        });
    }
    let session = objects
        .find(|o| o.get("id").and_then(Value::as_str) == Some(id))
        .ok_or_else(|| ExportError::NoSuchSession(id.to_owned()))?;
    let Some(Value::Array(messages)) = session.get("messages") else {
        return Err(ExportError::NoMessages(id.to_owned()));
    };
    Ok(Session {
        id: id.to_owned(),
        model: session
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
        messages: messages.clone(),
    })
}

/// One message of the transcript, as stored in a `hermes-turn` node.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Position in the conversation, from 0.
    pub index: u64,
    /// `user`, `assistant`, `tool`, …
    pub role: String,
    /// The text; `""` when the message has none (e.g. a bare tool call).
    pub content: String,
    /// The tool calls of an assistant message (OpenAI shape, `arguments` a
    /// JSON string); `None` when there are none.
    pub tool_calls: Option<Vec<Value>>,
    /// The model's reasoning, when it gave any.
    pub reasoning: Option<String>,
    /// For a `tool` message: the call it answers.
    pub tool_call_id: Option<String>,
    /// For a `tool` message: the tool's name.
    pub tool_name: Option<String>,
}

impl Turn {
    /// The message as the turn every agent stores
    /// ([`cli_agent::Turn`](uwf_agent_kit::cli_agent::Turn)): `content` is
    /// the text, `reasoning` the thinking, each OpenAI tool call `{id,
    /// function: {name, arguments}}` a tool call whose input is the parsed
    /// arguments, and a `tool` message a tool result.
    pub fn stored(&self) -> StoredTurn {
        let mut turn = StoredTurn::new(self.role.clone(), self.content.clone());
        turn.index = usize::try_from(self.index).unwrap_or(usize::MAX);
        turn.thinking = self.reasoning.clone();
        turn.tool_calls =
            self.tool_calls
                .iter()
                .flatten()
                .filter_map(|c| {
                    let function = c.get("function")?;
                    let input = match function.get("arguments") {
                        Some(Value::String(text)) => serde_json::from_str(text)
                            .unwrap_or_else(|_| Value::String(text.clone())),
                        Some(other) => other.clone(),
                        None => Value::Null,
                    };
                    Some(ToolCall {
                        id: c.get("id").and_then(Value::as_str).map(str::to_owned),
                        name: function.get("name")?.as_str()?.to_owned(),
                        input,
                    })
                })
                .collect();
        if self.role == "tool" {
            turn.tool_results.push(ToolResult {
                tool_use_id: self.tool_call_id.clone(),
                name: self.tool_name.clone(),
                content: std::mem::take(&mut turn.text),
                ..ToolResult::default()
            });
        }
        turn
    }
}

/// The turns of a transcript, one per message, in order.
pub fn turns(messages: &[Value]) -> Vec<Turn> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| Turn {
            index: i as u64,
            role: text_field(m, "role").unwrap_or_else(|| "unknown".into()),
            content: match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                // Content parts (multimodal): keep them, as JSON text.
                Some(other) => other.to_string(),
            },
            tool_calls: tool_calls(m.get("tool_calls")),
            reasoning: text_field(m, "reasoning").or_else(|| text_field(m, "reasoning_content")),
            tool_call_id: text_field(m, "tool_call_id"),
            tool_name: text_field(m, "tool_name").or_else(|| text_field(m, "name")),
        })
        .collect()
}

/// A non-empty string field.
fn text_field(m: &Value, key: &str) -> Option<String> {
    m.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// `tool_calls` is an array in the export and a JSON text in `state.db`;
/// accept both. Empty means none.
fn tool_calls(v: Option<&Value>) -> Option<Vec<Value>> {
    let calls = match v? {
        Value::Array(a) => a.clone(),
        Value::String(s) => match serde_json::from_str(s) {
            Ok(Value::Array(a)) => a,
            _ => return None,
        },
        _ => return None,
    };
    (!calls.is_empty()).then_some(calls)
}

/// How a transcript that does not end in a final answer ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// Role of the last message (`None`: no messages at all).
    pub last_role: Option<String>,
    /// Its `finish_reason`, if any.
    pub finish_reason: Option<String>,
}

impl std::fmt::Display for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.last_role, &self.finish_reason) {
            (None, _) => f.write_str("the transcript has no messages"),
            (Some(role), Some(reason)) => write!(
                f,
                "the last message is a {role} message with finish_reason {reason:?}"
            ),
            (Some(role), None) => write!(
                f,
                "the last message is a {role} message without a finish_reason"
            ),
        }
    }
}

/// The final answer of a finished session: the content of its last message,
/// which must be an `assistant` message with `finish_reason: "stop"`
/// (hermes' own definition of success; max-turns exhaustion and empty
/// replies end with `finish_reason: null`, a failed call with the `user`
/// message).
pub fn final_answer(messages: &[Value]) -> Result<String, Unfinished> {
    let Some(last) = messages.last() else {
        return Err(Unfinished {
            last_role: None,
            finish_reason: None,
        });
    };
    let role = text_field(last, "role");
    let finish_reason = text_field(last, "finish_reason");
    if role.as_deref() == Some("assistant") && finish_reason.as_deref() == Some("stop") {
        Ok(last
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned())
    } else {
        Err(Unfinished {
            last_role: Some(role.unwrap_or_else(|| "unknown".into())),
            finish_reason,
        })
    }
}

pub use uwf_agent_kit::cli_agent::shorten;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A tool call with reasoning, then a frontmatter answer whose `<think>`
    /// block hermes moved into `reasoning` (hermes-agent 0.19.0).
    const TOOL_CALL: &str = include_str!("testdata/export-tool-call.jsonl");
    const TOOL_CALL_ID: &str = "20261122_074452_d67fb2";
    /// `--max-turns 1` exhausted: a synthetic user turn, then a summary
    /// without a finish_reason.
    const MAX_TURNS: &str = include_str!("testdata/export-max-turns.jsonl");
    const MAX_TURNS_ID: &str = "20261122_074508_8b64f0";

    fn session(text: &str, id: &str) -> Session {
        parse_export(text, id).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn session_id_from_quiet_stderr() {
        assert_eq!(
            session_id("\nsession_id: 20261122_063815_604466\n"),
            Some("20261122_063815_604466")
        );
        assert_eq!(
            session_id("session_id: old\r\nnoise\nsession_id: new\r\n"),
            Some("new")
        );
        assert_eq!(session_id(""), None);
        assert_eq!(session_id("session_id: \n"), None);
        assert_eq!(session_id("session_id: two words\n"), None);
        assert_eq!(session_id("  session_id: indented\n"), None);
        assert_eq!(session_id("Session: 2026 (not quiet mode)\n"), None);
    }

    #[test]
    fn sentinels() {
        assert_eq!(
            sentinel(
                "⚠️  Reached maximum iterations (1). Requesting summary...\n\
                 I reached the iteration limit and couldn't generate a summary.\n"
            ),
            Some(Sentinel::MaxTurns { limit: Some(1) })
        );
        assert_eq!(
            sentinel("⚠ Reached maximum iterations. Requesting summary"),
            Some(Sentinel::MaxTurns { limit: None })
        );
        assert_eq!(
            sentinel("⚠️ No reply: the model returned empty content after retries (3 attempts).\n"),
            Some(Sentinel::NoReply)
        );
        assert_eq!(sentinel("---\nstatus: done\n---\n\nbody\n"), None);
        assert_eq!(
            sentinel("The log said: ⚠️ No reply: but that is fine.\n"),
            None
        );
        assert_eq!(
            sentinel("  ⚠ tirith security scanner enabled but not available\r\n---\n"),
            None
        );
    }

    #[test]
    fn export_with_a_tool_call() {
        let s = session(TOOL_CALL, TOOL_CALL_ID);
        assert_eq!(s.model.as_deref(), Some("mock-model"));
        let t = turns(&s.messages);
        let roles: Vec<&str> = t.iter().map(|t| t.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
        assert_eq!(t[0].content, "Plan it");
        assert_eq!(t[0].tool_calls, None);

        assert_eq!(t[1].index, 1);
        assert_eq!(t[1].content, "Let me run it.");
        assert_eq!(t[1].reasoning.as_deref(), Some("I should run echo first."));
        let calls = t[1].tool_calls.as_deref().unwrap_or_default();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["function"]["name"], "terminal");
        assert_eq!(
            calls[0]["function"]["arguments"],
            "{\"command\": \"echo hi\"}"
        );

        assert_eq!(t[2].tool_call_id.as_deref(), Some("call_echo_1"));
        assert_eq!(t[2].tool_name.as_deref(), Some("terminal"));
        assert!(t[2].content.contains("\"exit_code\": 0"));

        assert_eq!(t[3].reasoning.as_deref(), Some("done now"));
        assert_eq!(
            final_answer(&s.messages).ok().as_deref(),
            Some("---\nplan: Fix it\nsteps:\n  - one\n  - two\n---\n\nThe plan.")
        );
    }

    #[test]
    fn stored_turns() {
        let s = session(TOOL_CALL, TOOL_CALL_ID);
        let t: Vec<Value> = turns(&s.messages)
            .iter()
            .map(|t| t.stored().to_payload())
            .collect();
        assert_eq!(
            t[0],
            json!({"index": 0, "role": "user", "text": "Plan it", "toolCalls": [], "toolResults": []})
        );
        let call = &t[1]["toolCalls"][0];
        assert_eq!(call["name"], "terminal");
        assert!(call["input"].is_object(), "{call}");
        let tool = &t[2];
        assert_eq!(tool["text"], "");
        assert_eq!(tool["toolResults"][0]["toolUseId"], "call_echo_1");
        assert_eq!(tool["toolResults"][0]["name"], "terminal");
        assert!(
            tool["toolResults"][0]["content"]
                .as_str()
                .is_some_and(|c| c.contains("\"exit_code\": 0"))
        );
        assert_eq!(t[3]["thinking"], "done now");
    }

    #[test]
    fn export_after_max_turns_is_unfinished() {
        let s = session(MAX_TURNS, MAX_TURNS_ID);
        let t = turns(&s.messages);
        assert_eq!(t.len(), 5);
        assert_eq!(t[3].role, "user");
        assert!(
            t[3].content
                .contains("maximum number of tool-calling iterations")
        );
        let err = final_answer(&s.messages).err();
        assert_eq!(
            err,
            Some(Unfinished {
                last_role: Some("assistant".into()),
                finish_reason: None
            })
        );
        assert!(
            err.map(|e| e.to_string())
                .unwrap_or_default()
                .contains("without a finish_reason")
        );
    }

    #[test]
    fn export_errors() {
        assert_eq!(
            parse_export("Session 'nope' not found.\n", "nope"),
            Err(ExportError::NotJson {
                first_line: "Session 'nope' not found.".into()
            })
        );
        assert!(matches!(
            parse_export("", "x"),
            Err(ExportError::NotJson { .. })
        ));
        assert_eq!(
            parse_export(TOOL_CALL, "other"),
            Err(ExportError::NoSuchSession("other".into()))
        );
        assert_eq!(
            parse_export("{\"id\": \"a\"}\n", "a"),
            Err(ExportError::NoMessages("a".into()))
        );
        // Several sessions (an export without --session-id): pick ours.
        let two = format!("{{\"id\": \"a\", \"messages\": []}}\n{TOOL_CALL}");
        assert_eq!(session(&two, TOOL_CALL_ID).messages.len(), 4);
    }

    #[test]
    fn odd_messages() {
        let msgs = vec![
            json!({"role": "assistant", "content": null, "tool_calls": "[{\"id\": \"c\"}]",
                   "reasoning": "", "reasoning_content": "thought"}),
            json!({"content": [{"type": "text", "text": "hi"}], "tool_calls": []}),
            json!({"role": "tool", "name": "terminal", "content": "ok"}),
        ];
        let t = turns(&msgs);
        assert_eq!(t[0].content, "");
        assert_eq!(t[0].tool_calls, Some(vec![json!({"id": "c"})]));
        assert_eq!(t[0].reasoning.as_deref(), Some("thought"));
        assert_eq!(t[1].role, "unknown");
        assert_eq!(t[1].content, r#"[{"type":"text","text":"hi"}]"#);
        assert_eq!(t[1].tool_calls, None);
        assert_eq!(t[2].tool_name.as_deref(), Some("terminal"));
        assert!(final_answer(&[]).is_err());
        assert!(final_answer(&msgs[2..]).is_err());
    }
}
