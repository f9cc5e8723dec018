//! `uwf-agent <thread-id> <role>`: a built-in uwf agent that works with
//! tools, no external agent CLI needed.
//!
//! For one step it sends the role's prompt to the model configured for the
//! role (`roleModels[workflow][role]`, else `defaultModel`; the provider's
//! `api` says whether it speaks OpenAI chat completions or the Anthropic
//! Messages API) with a set of tools — read, write and edit files, list,
//! glob and grep, run commands, and `submit` — all confined to the working
//! directory ([`sandbox`]) under the role's `agentPolicy` from
//! `config.yaml` (read-only mode, allowed and denied commands, command
//! timeout, limits on turns, tokens, cost and wall time). It loops — model
//! call, tool calls, results fed back — until the model submits the role's
//! output (the `submit` tool, whose parameters are the role's
//! outputSchema) or answers in text (then the kit's extraction applies).
//! Every model call and tool result is stored as a `uwf-agent-turn` node
//! under a `uwf-agent-detail` node, with token usage and cost. See
//! `docs/agents.md`.

mod error;
mod run;
mod sandbox;
mod tools;
mod transcript;
mod wire;

use std::path::PathBuf;
use std::process::ExitCode;

use uwf_agent_kit::llm::{self, LlmClient};
use uwf_agent_kit::{AgentContext, AgentRun, Reply, Runner};

use crate::error::AgentError;
use crate::run::{DEFAULT_MAX_OUTPUT_TOKENS, Setup};
use crate::sandbox::Sandbox;
use crate::tools::Tools;

/// The agent's name, written into each StepNode's `agent` field.
const NAME: &str = "uwf-agent";

/// Environment variable: the working directory (default: the current one).
const CWD_ENV: &str = "UWF_AGENT_CWD";

/// Environment variable: `max_tokens` of each Anthropic request.
const MAX_OUTPUT_ENV: &str = "UWF_AGENT_MAX_OUTPUT_TOKENS";

const ABOUT: &str = "\
A built-in uwf agent that works with tools: a loop of model calls with tools
(read_file, write_file, edit_file, list_dir, glob, grep, run_command, submit)
confined to the working directory, until the model submits the role's output.

The model is roleModels[<workflow>][<role>] in <root>/config.yaml, else
defaultModel; its provider's `api` (openai, the default, or anthropic) picks
the wire format. What the role may do and spend is agentPolicy in config.yaml
(readOnly, allowCommands, denyCommands, commandTimeout, maxTurns, maxTokens,
maxCostUsd, maxWallTime). Every model call and tool result is stored as a
uwf-agent-turn node under a uwf-agent-detail node.

Environment: UWF_AGENT_CWD (the working directory; default the current one),
UWF_AGENT_MAX_OUTPUT_TOKENS (Anthropic max_tokens, default 8192),
UWF_LLM_TIMEOUT_SECS, UWF_LLM_MAX_ATTEMPTS and UWF_LLM_BACKOFF_MS (each call).";

fn main() -> ExitCode {
    Runner::new(NAME)
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .run_with(|inv| {
            let ctx = inv.load()?;
            let run = step(&ctx)?;
            Ok(Reply::Step(uwf_agent_kit::finish(&ctx, inv.name(), run)?))
        })
}

/// The names of the variables commands must not see: every entry of the
/// storage root's `.env` (uwf keeps secrets there), the model's key
/// variable, and the store's password variables.
fn hidden_env(ctx: &AgentContext, key_var: Option<&str>) -> Result<Vec<String>, AgentError> {
    let mut names: Vec<String> = uwf_state::FsState::new(ctx.root())
        .env_vars()?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.extend(key_var.map(str::to_owned));
    names.extend([
        "UWF_STORE_PASSWORD".to_owned(),
        "PGPASSWORD".to_owned(),
        // The store relay answers with the store's secrets.
        uwf_agent_kit::RELAY_ENV.to_owned(),
    ]);
    names.sort();
    names.dedup();
    Ok(names)
}

/// One step: the model, the policy, the tools, the loop.
fn step(ctx: &AgentContext) -> Result<AgentRun, AgentError> {
    let config = ctx.require_config()?;
    let workflow = ctx.workflow().name.clone();
    let alias = llm::resolve_model(config, None, &workflow, ctx.role())?;
    let client = LlmClient::from_config(config, &alias)?;
    let policy = uwf_state::policy::agent_policy(Some(config), &workflow, ctx.role())?;
    let model = config.models.get(&alias);
    let price = model.and_then(|m| m.price.as_ref()).map(|p| {
        (
            p.input.as_f64().unwrap_or(0.0),
            p.output.as_f64().unwrap_or(0.0),
        )
    });
    let key_var = model
        .and_then(|m| config.providers.get(&m.provider))
        .map(|p| p.api_key_env.as_str())
        .filter(|v| !v.is_empty());
    let dir = match std::env::var_os(CWD_ENV).filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => std::env::current_dir().map_err(|source| AgentError::WorkDir {
            dir: ".".into(),
            source,
        })?,
    };
    let sandbox = Sandbox::new(&dir).map_err(|source| AgentError::WorkDir {
        dir: dir.display().to_string(),
        source,
    })?;
    let max_output_tokens = std::env::var(MAX_OUTPUT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
    tracing::debug!(
        alias,
        model = client.model(),
        api = client.api().as_str(),
        role = ctx.role(),
        dir = %sandbox.root().display(),
        ?policy,
        "starting"
    );
    let tools = Tools::new(sandbox, policy.clone(), hidden_env(ctx, key_var)?);
    run::run(
        ctx,
        &Setup {
            client: &client,
            policy: &policy,
            tools: &tools,
            price,
            max_output_tokens,
        },
    )
}
