//! Misbehaving on purpose, so `uwf` can be tested against broken agents.

use miette::Diagnostic;
use serde_json::{Value, json};
use uwf_agent_kit::{AgentContext, KitError, Reply};
use uwf_cas::Hash;
use uwf_protocol::{StartNodePayload, StepNodePayload, StepRecord};

use crate::scenario::{Answer, Fault};

/// The reply line of the `garbage` fault.
pub const GARBAGE: &str = "hello, I am not a hash";

/// The permissive schema the `invalid-output` fault stores its output under.
pub fn any_schema() -> Value {
    json!({ "title": "mock-any" })
}

/// A fault that cannot be simulated for this workflow.
#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum FaultError {
    /// Every candidate satisfies the role's schema.
    #[error(
        "fault invalid-output: the outputSchema of role {role:?} accepts every value uwf-mock tries"
    )]
    #[diagnostic(
        code(uwf_mock::fault::permissive_schema),
        help("use invalid-output only with a role whose outputSchema constrains its output")
    )]
    PermissiveSchema {
        /// The role.
        role: String,
    },
}

/// Simulates `fault` for the context's role. `answer` is the entry's
/// answer: the valid output and detail of the `wrong-*` faults.
pub fn apply(
    fault: Fault,
    ctx: &AgentContext,
    agent: &str,
    answer: Option<&Answer>,
) -> Result<Reply, miette::Report> {
    let cas = ctx.store();
    let mut prev = ctx.prev();
    let mut start = ctx.start_hash();
    let mut role = ctx.role().to_owned();
    match fault {
        Fault::NoOutput => return Ok(Reply::Nothing),
        Fault::Garbage => return Ok(Reply::Raw(GARBAGE.to_owned())),
        Fault::UnknownHash => return Ok(Reply::Raw(unknown_hash(ctx)?.to_string())),
        Fault::NotAStep => return Ok(Reply::Raw(ctx.start_hash().to_string())),
        Fault::WrongPrev => {
            prev = Some(ctx.start_hash());
        }
        Fault::WrongStart => {
            let other = StartNodePayload {
                workflow: ctx.workflow_hash(),
                prompt: format!("{} (uwf-mock: wrong start)", ctx.start().prompt),
                parent_state: None,
            };
            start = cas.put_value(cas.types().start_node, &other)?.hash;
        }
        Fault::WrongRole => {
            role = ctx
                .workflow()
                .roles
                .keys()
                .find(|r| *r != ctx.role())
                .cloned()
                .unwrap_or_else(|| format!("{}-uwf-mock-wrong-role", ctx.role()));
        }
        Fault::InvalidOutput => {}
    }

    let (output, detail) = if fault == Fault::InvalidOutput {
        let schema = cas.put_schema(any_schema())?.hash;
        let payload = invalid_payload(ctx)?;
        let output = cas.put(schema, payload)?.hash;
        let text = answer.map(Answer::detail_text).unwrap_or_default();
        (output, uwf_agent_kit::put_answer(cas, text)?)
    } else {
        // `scenario` guarantees an output for the wrong-* faults.
        let run = answer.and_then(Answer::to_run).ok_or_else(|| {
            miette::miette!("fault {fault:?} needs an output (a scenario check is missing)")
        })?;
        (
            uwf_agent_kit::put_output(ctx, &run)?,
            uwf_agent_kit::put_detail(ctx, &run)?,
        )
    };
    let step = StepNodePayload {
        start,
        prev,
        record: StepRecord {
            role,
            output,
            detail,
            agent: agent.to_owned(),
        },
        child_thread: None,
    };
    Ok(Reply::Step(
        cas.put_value(cas.types().step_node, &step)?.hash,
    ))
}

/// A well-formed hash of no stored node.
fn unknown_hash(ctx: &AgentContext) -> Result<Hash, KitError> {
    let mut n: u64 = 0x00C0_FFEE_0BAD_F00D;
    loop {
        let h = Hash::from_u64(n);
        if !ctx.store().has(h)? {
            return Ok(h);
        }
        n = n.wrapping_add(1);
    }
}

/// A value the role's outputSchema rejects.
fn invalid_payload(ctx: &AgentContext) -> Result<Value, miette::Report> {
    let candidates = [
        json!({ "uwf-mock": "invalid-output" }),
        Value::Null,
        json!("invalid-output"),
        json!([]),
        json!(0),
        json!(false),
    ];
    for c in candidates {
        match ctx.store().validate(ctx.output_schema_hash(), &c) {
            Err(uwf_cas::CasError::Invalid { .. }) => return Ok(c),
            Err(e) => return Err(e.into()),
            Ok(()) => {}
        }
    }
    Err(FaultError::PermissiveSchema {
        role: ctx.role().to_owned(),
    }
    .into())
}
