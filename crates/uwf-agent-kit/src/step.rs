//! Turning an [`AgentRun`] into nodes: output, detail, StepNode.

use serde_json::{Value, json};
use uwf_cas::{Cas, CasError, Hash, Store};
use uwf_protocol::{StepNodePayload, StepRecord};

use crate::error::violation_list;
use crate::{AgentContext, AgentRun, KitError, extract};

/// Environment variable through which `uwf` passes the agent's label (the
/// alias or command line it resolved); recorded as the StepNode's `agent`.
pub const AGENT_ENV: &str = "UWF_AGENT";

/// Title of the kit's schema for raw answers.
pub const ANSWER_TITLE: &str = "agent-answer";

/// The schema of the default detail node: an agent's raw answer,
/// `{ "text": "…" }`.
pub fn answer_schema() -> Value {
    json!({
        "title": ANSWER_TITLE,
        "description": "The raw answer of an agent, as it produced it.",
        "type": "object",
        "required": ["text"],
        "additionalProperties": false,
        "properties": {
            "text": { "type": "string" }
        }
    })
}

/// Stores `text` as an `agent-answer` node (registering the schema if
/// needed) and returns its hash.
pub fn put_answer<S: Store>(cas: &Cas<S>, text: &str) -> Result<Hash, KitError> {
    let schema = cas.put_schema(answer_schema())?.hash;
    Ok(cas.put(schema, json!({ "text": text }))?.hash)
}

/// Builds the output node's payload of `run` for the context's role: the
/// structured output if given (validated when stored), else the
/// [two-layer extract](crate::extract::extract) of the answer.
///
/// Returns the payload, not yet stored.
pub fn output_payload(ctx: &AgentContext, run: &AgentRun) -> Result<Value, KitError> {
    Ok(output_of(ctx, run)?.0)
}

/// The payload, and how it was extracted (`None` for a structured output).
fn output_of(
    ctx: &AgentContext,
    run: &AgentRun,
) -> Result<(Value, Option<extract::Extracted>), KitError> {
    if let Some(output) = &run.output {
        return Ok((output.clone(), None));
    }
    let answer = run.answer.as_deref().unwrap_or_default();
    let extracted = extract::extract(ctx, answer)?;
    Ok((extracted.output.clone(), Some(extracted)))
}

/// Stores the output node of `run` (typed by the role's outputSchema) and
/// returns its hash. See [`output_payload`].
pub fn put_output(ctx: &AgentContext, run: &AgentRun) -> Result<Hash, KitError> {
    let payload = output_payload(ctx, run)?;
    store_output(ctx, payload)
}

fn store_output(ctx: &AgentContext, payload: Value) -> Result<Hash, KitError> {
    match ctx.store().put(ctx.output_schema_hash(), payload) {
        Ok(stored) => Ok(stored.hash),
        Err(e) => Err(invalid_output(ctx, e)),
    }
}

/// Stores the detail of `run`: the agent's own detail node (which must
/// exist) or its answer text as an `agent-answer` node.
pub fn put_detail(ctx: &AgentContext, run: &AgentRun) -> Result<Hash, KitError> {
    match run.detail {
        Some(h) if ctx.store().has(h)? => Ok(h),
        Some(h) => Err(KitError::MissingDetail(h)),
        None => put_answer(ctx.store(), &answer_text(run)),
    }
}

/// Turns `run` into a StepNode of the context's role: output node, detail
/// node, then the StepNode chained after the thread's last step. Returns the
/// StepNode's hash. The thread's head is not touched.
pub fn finish(ctx: &AgentContext, agent: &str, run: AgentRun) -> Result<Hash, KitError> {
    let (payload, extracted) = output_of(ctx, &run)?;
    let cas = ctx.store();
    // The output, the answer and the StepNode are named before any is
    // stored, and stored together: one round trip to the engine's relay
    // and one transaction on a networked store (docs/performance.md,
    // "Starting an agent").
    let output = cas
        .pending(ctx.output_schema_hash(), payload)
        .map_err(|e| invalid_output(ctx, e))?;
    let (detail, answer) = match run.detail {
        Some(h) if cas.has(h)? => (h, None),
        Some(h) => return Err(KitError::MissingDetail(h)),
        None => {
            let schema = cas.put_schema(answer_schema())?.hash;
            let answer = cas.pending(schema, json!({ "text": answer_text(&run) }))?;
            (answer.hash(), Some(answer))
        }
    };
    if let Some(child) = run.child_thread {
        // The engine's own check, so a step it would refuse is never written.
        uwf_moderator::child::check_child(cas, ctx.head(), child).map_err(|problem| {
            KitError::BadChildThread {
                hash: child,
                reason: problem.to_string(),
            }
        })?;
    }
    // uwf tells its agents how it named them (the alias or command line the
    // user chose); a hand-run agent falls back to its own name.
    let label = std::env::var(AGENT_ENV)
        .ok()
        .filter(|l| !l.trim().is_empty());
    let payload = step_payload(
        ctx,
        output.hash(),
        detail,
        label.as_deref().unwrap_or(agent),
        run.child_thread,
    );
    let step = cas.pending_value(cas.types().step_node, &payload)?;
    let (output_hash, step_hash) = (output.hash(), step.hash());
    let mut batch = vec![output];
    batch.extend(answer);
    batch.push(step);
    cas.put_pending(batch).map_err(|e| invalid_output(ctx, e))?;
    let (layer, llm_calls) = match &extracted {
        Some(e) => (e.layer.as_str(), e.llm_calls),
        None => ("structured", 0),
    };
    tracing::info!(
        thread = %ctx.thread_id(),
        role = ctx.role(),
        step = %step_hash,
        output = %output_hash,
        %detail,
        layer,
        llm_calls,
        "step written"
    );
    Ok(step_hash)
}

/// The text of the default detail node of `run`: its answer, or, with a
/// structured output and no text at all, that output (what the agent
/// said; an empty answer would make every such detail one node).
fn answer_text(run: &AgentRun) -> String {
    match (&run.answer, &run.output) {
        (Some(answer), _) => answer.clone(),
        (None, Some(output)) => {
            serde_json::to_string_pretty(output).unwrap_or_else(|_| output.to_string())
        }
        (None, None) => String::new(),
    }
}

/// `e`, as the kit reports it when it is about the output node: the
/// output does not satisfy the role's schema.
fn invalid_output(ctx: &AgentContext, e: CasError) -> KitError {
    match e {
        CasError::Invalid {
            type_hash,
            violations,
            ..
        } if type_hash == ctx.output_schema_hash() => KitError::InvalidOutput {
            role: ctx.role().to_owned(),
            schema: ctx.output_schema_hash(),
            violations: violation_list(&violations),
        },
        other => other.into(),
    }
}

/// The StepNode of the context's thread and role.
fn step_payload(
    ctx: &AgentContext,
    output: Hash,
    detail: Hash,
    agent: &str,
    child_thread: Option<Hash>,
) -> StepNodePayload {
    StepNodePayload {
        start: ctx.start_hash(),
        prev: ctx.prev(),
        record: StepRecord {
            role: ctx.role().to_owned(),
            output,
            detail,
            agent: agent.to_owned(),
        },
        child_thread,
    }
}

/// Writes a StepNode `{start, prev, role, output, detail, agent}` for the
/// context's thread and role, with no check beyond the CAS's own schema
/// validation (the nodes `output` and `detail` point at are not verified).
pub fn write_step<S: Store>(
    cas: &Cas<S>,
    ctx: &AgentContext,
    output: Hash,
    detail: Hash,
    agent: &str,
) -> Result<Hash, KitError> {
    write_step_with_child(cas, ctx, output, detail, agent, None)
}

/// [`write_step`] with the StepNode's `childThread`: the terminal StepNode
/// of the child thread that did the role's work (docs/nested-workflows.md), or `None` for
/// an ordinary step (the field is then omitted). Not checked beyond the
/// CAS's schema validation either.
pub fn write_step_with_child<S: Store>(
    cas: &Cas<S>,
    ctx: &AgentContext,
    output: Hash,
    detail: Hash,
    agent: &str,
    child_thread: Option<Hash>,
) -> Result<Hash, KitError> {
    let payload = step_payload(ctx, output, detail, agent, child_thread);
    Ok(cas.put_value(cas.types().step_node, &payload)?.hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uwf_cas::MemStore;

    #[test]
    fn answer_schema_is_accepted_and_stable() {
        let cas = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let a = put_answer(&cas, "hello").unwrap_or_else(|e| panic!("{e}"));
        let b = put_answer(&cas, "hello").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a, b);
        let node = cas.get(a).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node.payload, json!({ "text": "hello" }));
        let schema = cas.schema(node.type_hash).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(schema["title"], ANSWER_TITLE);
    }
}
