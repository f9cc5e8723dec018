//! The `llm-call` detail node: which model answered, how many tokens it
//! took, how long, and the answer.

use serde_json::{Value, json};
use uwf_agent_kit::llm::ChatReply;
use uwf_cas::{Cas, CasError, Hash, Store};

/// Title of the schema of the detail node.
pub const CALL_TITLE: &str = "llm-call";

/// Schema of an `llm-call` node.
pub fn call_schema() -> Value {
    let tokens = |what: &str| {
        json!({
            "type": ["integer", "null"],
            "minimum": 0,
            "description": format!("{what} as the server reported them; null when it reported no usage.")
        })
    };
    json!({
        "title": CALL_TITLE,
        "description": "One chat-completions call of uwf-llm.",
        "type": "object",
        "required": ["model", "promptTokens", "completionTokens", "totalTokens", "durationMs", "answer"],
        "additionalProperties": false,
        "properties": {
            "model": { "type": "string", "description": "The provider's model name." },
            "promptTokens": tokens("Tokens of the prompt,"),
            "completionTokens": tokens("Tokens of the answer,"),
            "totalTokens": tokens("All tokens,"),
            "durationMs": { "type": "integer", "minimum": 0, "description": "Time of the call, retries included, in milliseconds." },
            "answer": { "type": "string", "description": "The model's answer, as received." }
        }
    })
}

/// The payload of the `llm-call` node of `reply`.
pub fn call_payload(model: &str, reply: &ChatReply) -> Value {
    let usage = reply.usage;
    json!({
        "model": model,
        "promptTokens": usage.map(|u| u.prompt_tokens),
        "completionTokens": usage.map(|u| u.completion_tokens),
        "totalTokens": usage.map(|u| u.total_tokens),
        "durationMs": reply.duration_ms,
        "answer": reply.content,
    })
}

/// Stores the `llm-call` node of `reply` (registering the schema if needed).
pub fn store_call<S: Store>(
    cas: &Cas<S>,
    model: &str,
    reply: &ChatReply,
) -> Result<Hash, CasError> {
    let schema = cas.put_schema(call_schema())?.hash;
    Ok(cas.put(schema, call_payload(model, reply))?.hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uwf_agent_kit::llm::Usage;
    use uwf_cas::MemStore;

    #[test]
    fn with_and_without_usage() {
        let cas = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let mut reply = ChatReply {
            content: "---\nok: true\n---\n".into(),
            usage: Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
                total_tokens: 15,
            }),
            duration_ms: 42,
        };
        let h = store_call(&cas, "gpt-x", &reply).unwrap_or_else(|e| panic!("{e}"));
        let node = cas.get(h).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            node.payload,
            json!({"model": "gpt-x", "promptTokens": 10, "completionTokens": 5, "totalTokens": 15,
                   "durationMs": 42, "answer": "---\nok: true\n---\n"})
        );
        let schema = cas.schema(node.type_hash).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(schema["title"], CALL_TITLE);

        reply.usage = None;
        let h = store_call(&cas, "gpt-x", &reply).unwrap_or_else(|e| panic!("{e}"));
        let node = cas.get(h).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node.payload["promptTokens"], Value::Null);
        assert_eq!(node.payload["totalTokens"], Value::Null);
    }
}
