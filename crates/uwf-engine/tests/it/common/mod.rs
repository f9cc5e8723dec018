//! What the PostgreSQL tests of the engine share: the counting workflow,
//! an engine over a `PgStore`, the counting agent, and a walk of a chain.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use uwf_cas::{Cas, Hash};
use uwf_engine::{AgentCall, Engine};
use uwf_protocol::{StepNodePayload, StepRecord};
use uwf_store_pg::PgStore;

/// A workflow whose one role counts to three: three steps to `$END`.
pub const WORKFLOW: &str = r#"
name: count
description: counts to three
roles:
  counter:
    description: adds one
    systemPrompt: add one to the last number
    outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
conditions:
  three: { description: reached three, expression: "steps[-1].output.n >= 3" }
graph:
  $START: [ { role: counter, condition: null } ]
  counter: [ { role: $END, condition: three }, { role: counter, condition: null } ]
"#;

/// An engine over `store` (objects and state in the one database).
pub fn engine(store: &PgStore) -> Engine {
    let cas = Cas::with_store(Arc::new(store.clone())).unwrap();
    Engine::with_stores(cas, Arc::new(store.clone()), Vec::new())
}

/// Registers [`WORKFLOW`] through `engine`; its hash.
pub fn register(engine: &Engine) -> Hash {
    let definition = uwf_moderator::definition::parse_yaml(WORKFLOW, "count.yaml").unwrap();
    uwf_moderator::definition::register(engine.cas(), &definition)
        .unwrap()
        .hash
}

/// The counting agent: the next number as the role's output, and the
/// StepNode that links it.
pub fn count(engine: &Engine, call: &AgentCall<'_>) -> Result<Hash, String> {
    let cas = engine.cas();
    let last = call
        .view
        .steps
        .last()
        .and_then(|s| s.output["n"].as_i64())
        .unwrap_or(0);
    let schema = call.view.workflow.roles[call.role].output_schema;
    let output = cas
        .put_value(schema, &serde_json::json!({ "n": last + 1 }))
        .map_err(|e| e.to_string())?
        .hash;
    let step = StepNodePayload {
        start: call.view.start_hash,
        prev: call.view.steps.last().map(|s| s.hash),
        record: StepRecord {
            role: call.role.to_string(),
            output,
            detail: output,
            agent: "pg-test".to_string(),
        },
        child_thread: None,
    };
    Ok(cas
        .put_value(cas.types().step_node, &step)
        .map_err(|e| e.to_string())?
        .hash)
}

/// Walks the chain ending at `head` back to its StartNode: the numbers the
/// steps counted, oldest first, and the StartNode. Panics on a node that is
/// not a StepNode of the counting agent.
pub fn counted(cas: &Cas, head: Hash) -> (Vec<i64>, Hash) {
    let mut numbers = Vec::new();
    let mut at = head;
    loop {
        let node = cas.get(at).unwrap();
        assert_eq!(node.type_hash, cas.types().step_node, "{at} is no StepNode");
        let step: StepNodePayload = serde_json::from_value(node.payload).unwrap();
        assert_eq!(step.record.role, "counter");
        let output = cas.get(step.record.output).unwrap();
        numbers.push(output.payload["n"].as_i64().unwrap());
        assert!(numbers.len() <= 1000, "the chain loops at {at}");
        match step.prev {
            Some(prev) => at = prev,
            None => {
                numbers.reverse();
                return (numbers, step.start);
            }
        }
    }
}
