//! The detail nodes of a hermes step: one `hermes-turn` node per message of
//! the session, a `hermes-detail` node pointing at them, or a
//! `hermes-raw-output` node when no transcript could be had.

use serde_json::{Map, Value, json};
use uwf_agent_kit::cli_agent::{self, TranscriptSchemas};
use uwf_cas::{Cas, CasError, Hash, Store};

use crate::transcript::{Session, turns};

/// Title of the schema of one transcript message.
pub const TURN_TITLE: &str = "hermes-turn";
/// Title of the schema of a step's detail (session id, model, turns).
pub const DETAIL_TITLE: &str = "hermes-detail";
/// Title of the schema of the fallback detail (hermes' stdout).
pub const RAW_TITLE: &str = "hermes-raw-output";

/// Schema of a `hermes-turn` node: the turn every agent writes
/// ([`cli_agent::Turn`]), mapped from the messages of `hermes sessions
/// export` ([`crate::transcript::Turn::stored`]).
pub fn turn_schema() -> Value {
    cli_agent::Turn::schema(
        TURN_TITLE,
        "One message of a hermes session: its text, reasoning, tool calls and tool results.",
        Map::new(),
    )
}

/// Schema of a `hermes-detail` node. `turns` are `cas_ref`s, so `uwf cas
/// refs`, `cas walk` and `cas gc` follow them to the turn nodes.
pub fn detail_schema() -> Value {
    json!({
        "title": DETAIL_TITLE,
        "description": "How uwf-hermes ran a step: the hermes session and its transcript.",
        "type": "object",
        "required": ["sessionId", "model", "duration", "turnCount", "turns"],
        "additionalProperties": false,
        "properties": {
            "sessionId": { "type": "string", "description": "The hermes session id (`hermes sessions export --session-id <id>`)." },
            "model": { "type": ["string", "null"], "description": "The model the session used." },
            "duration": { "type": "integer", "minimum": 0, "description": "Wall time of `hermes chat`, in milliseconds." },
            "turnCount": { "type": "integer", "minimum": 0, "description": "Number of turns." },
            "turns": {
                "type": "array",
                "items": { "type": "string", "format": "cas_ref" },
                "description": "The hermes-turn nodes, in order."
            }
        }
    })
}

/// Schema of a `hermes-raw-output` node: `{text}`, hermes' stdout.
pub fn raw_schema() -> Value {
    cli_agent::raw_schema(
        RAW_TITLE,
        "The answer hermes printed, stored when its session transcript could not be read.",
    )
}

/// Stores every message of `session` as a `hermes-turn` node, then the
/// `hermes-detail` node; returns the detail's hash.
pub fn store_session<S: Store>(
    cas: &Cas<S>,
    session: &Session,
    duration_ms: u64,
) -> Result<Hash, CasError> {
    let schemas = TranscriptSchemas {
        detail: detail_schema(),
        turn: turn_schema(),
    };
    let turns: Vec<cli_agent::Turn> = turns(&session.messages)
        .iter()
        .map(crate::transcript::Turn::stored)
        .collect();
    let mut detail = Map::new();
    detail.insert("sessionId".into(), session.id.clone().into());
    detail.insert(
        "model".into(),
        session.model.clone().map_or(Value::Null, Value::String),
    );
    detail.insert("duration".into(), duration_ms.into());
    cli_agent::store_transcript(cas, &schemas, detail, &turns)
}

/// Stores `text` as a `hermes-raw-output` node.
pub fn store_raw<S: Store>(cas: &Cas<S>, text: &str) -> Result<Hash, CasError> {
    cli_agent::store_raw(cas, &raw_schema(), text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uwf_cas::MemStore;

    fn cas() -> Cas<MemStore> {
        Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn session() -> Session {
        crate::transcript::parse_export(
            include_str!("testdata/export-tool-call.jsonl"),
            "20261122_074452_d67fb2",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn detail_points_at_turns() {
        let cas = cas();
        let h = store_session(&cas, &session(), 1234).unwrap_or_else(|e| panic!("{e}"));
        let node = cas.get(h).unwrap_or_else(|e| panic!("{e}"));
        let schema = cas.schema(node.type_hash).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(schema["title"], DETAIL_TITLE);
        assert_eq!(node.payload["sessionId"], "20261122_074452_d67fb2");
        assert_eq!(node.payload["model"], "mock-model");
        assert_eq!(node.payload["duration"], 1234);
        assert_eq!(node.payload["turnCount"], 4);

        // The refs of the detail are its turns, in order.
        let refs = cas.refs(h).unwrap_or_else(|e| panic!("{e}"));
        let turns: Vec<Hash> = refs.iter().map(|r| r.hash).collect();
        assert_eq!(turns.len(), 4);
        for (i, t) in turns.iter().enumerate() {
            let turn = cas.get(*t).unwrap_or_else(|e| panic!("{e}"));
            let schema = cas.schema(turn.type_hash).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(schema["title"], TURN_TITLE);
            assert_eq!(turn.payload["index"], i as u64);
        }
        let last = cas.get(turns[3]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(last.payload["role"], "assistant");
        assert!(
            last.payload["text"]
                .as_str()
                .unwrap_or_default()
                .starts_with("---\nplan: Fix it")
        );
        // Storing again is idempotent.
        assert_eq!(store_session(&cas, &session(), 1234).ok(), Some(h));
    }

    #[test]
    fn raw_output() {
        let cas = cas();
        let h = store_raw(&cas, "answer").unwrap_or_else(|e| panic!("{e}"));
        let node = cas.get(h).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node.payload, json!({ "text": "answer" }));
        let schema = cas.schema(node.type_hash).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(schema["title"], RAW_TITLE);
    }

    #[test]
    fn empty_session() {
        let cas = cas();
        let s = Session {
            id: "x".into(),
            model: None,
            messages: vec![],
        };
        let h = store_session(&cas, &s, 0).unwrap_or_else(|e| panic!("{e}"));
        let node = cas.get(h).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node.payload["turns"], json!([]));
        assert_eq!(node.payload["model"], Value::Null);
    }
}
