//! `uwf agent …`: the agent kit for agents in any language. `context`
//! prints what the kit gives a Rust agent before its work, `submit` does
//! what the kit does after it (extraction, detail, StepNode).

use serde_json::{Value, json};
use uwf_agent_kit::{AgentContext, AgentRun};
use uwf_cas::Hash;

use crate::cli::{AgentCommand, Format};
use crate::engine::Ctx;
use crate::error::CliError;
use crate::output;

/// What the StepNode records as `agent` when uwf did not say (`$UWF_AGENT`)
/// and `--as` is not given.
const FALLBACK_NAME: &str = "uwf-agent-submit";

/// Runs an `agent` subcommand.
pub fn run(ctx: &Ctx, cmd: AgentCommand, format: Option<Format>) -> Result<(), CliError> {
    match cmd {
        AgentCommand::Context {
            thread,
            role,
            quota,
        } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            let quota = quota.unwrap_or_else(uwf_agent_kit::prompt::history_quota_from_env);
            let agent = AgentContext::load(&ctx.root, &id.to_string(), &role)
                .map_err(CliError::kit)?
                .with_history_quota(quota);
            output::print(format, &context_json(&agent).map_err(CliError::kit)?)
        }
        AgentCommand::Submit {
            thread,
            role,
            output,
            text,
            detail,
            name,
        } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            let agent =
                AgentContext::load(&ctx.root, &id.to_string(), &role).map_err(CliError::kit)?;
            let mut run = match (output, text) {
                (Some(o), _) => AgentRun::output(crate::input::read_json("--output", &o)?),
                (None, Some(t)) => AgentRun::text(crate::input::read_text(&t)?),
                // clap requires one of them.
                (None, None) => return Err(crate::engine::EngineError::EmptyPrompt.into()),
            };
            if let Some(d) = detail {
                let hash = d.parse::<Hash>().map_err(CliError::from)?;
                run = run.with_detail(hash);
            }
            // What uwf named the agent, unless --as says otherwise.
            let label = name
                .or_else(|| std::env::var(crate::engine::AGENT_ENV).ok())
                .filter(|l| !l.trim().is_empty())
                .unwrap_or_else(|| FALLBACK_NAME.to_string());
            let output = uwf_agent_kit::put_output(&agent, &run).map_err(CliError::kit)?;
            let detail = uwf_agent_kit::put_detail(&agent, &run).map_err(CliError::kit)?;
            let step = uwf_agent_kit::write_step(agent.store(), &agent, output, detail, &label)
                .map_err(CliError::kit)?;
            match format {
                // The protocol's answer: the hash alone, as the agent's last line.
                None => output::print_text(&step.to_string()),
                Some(f) => output::print(Some(f), &json!({ "step": step })),
            }
        }
    }
}

/// The context as one JSON object: everything the kit's prompt is made of,
/// the assembled prompts, and the newest steps that fit in the quota.
fn context_json(a: &AgentContext) -> Result<Value, uwf_agent_kit::KitError> {
    let quota = a.history_quota();
    let all = a.steps()?;
    // The newest steps whose outputs fit in the quota, oldest first (the
    // newest always, even alone over the quota).
    let mut steps = Vec::new();
    let mut used = 0;
    for (i, (s, hash)) in all.iter().zip(a.step_hashes()?).enumerate().rev() {
        let size = s.output.to_string().chars().count();
        if !steps.is_empty() && used + size > quota {
            break;
        }
        used += size;
        steps.push(json!({
            "index": i + 1,
            "hash": hash,
            "role": s.role,
            "agent": s.agent,
            "output": s.output,
            "detail": s.detail,
        }));
    }
    steps.reverse();
    Ok(json!({
        "thread": a.thread_id().to_string(),
        "role": a.role(),
        "workflow": { "name": a.workflow().name, "hash": a.workflow_hash() },
        "task": a.start().prompt,
        "roleDescription": a.role_definition().description,
        "outputSchema": a.output_schema(),
        "outputSchemaHash": a.output_schema_hash(),
        "formatInstruction": a.format_instruction(),
        "edgePrompt": a.edge_prompt(),
        "systemPrompt": a.system_prompt(),
        "userPrompt": a.user_prompt()?,
        "prompt": a.prompt()?,
        "historyQuota": quota,
        "stepCount": all.len(),
        "steps": steps,
        "head": a.head(),
        "prev": a.prev(),
    }))
}
