//! `uwf-llm <thread-id> <role>`: a single-call uwf agent.
//!
//! It sends the role's prompt (the kit's system prompt — deliverable format,
//! scope constraint, role prompt — and user prompt — task, edge prompt,
//! history) to the model configured for the role in `config.yaml`
//! (`roleModels[workflow][role]`, else `defaultModel`), stores an `llm-call`
//! detail node (model, token usage, duration, answer) and lets the kit
//! extract the output from the answer and write the StepNode. No tools, no
//! loop: for cheap roles (classify, summarise, review a diff given in the
//! task). See `docs/agents.md`.

mod detail;

use std::process::ExitCode;

use uwf_agent_kit::llm::{self, LlmClient, Message};
use uwf_agent_kit::{AgentContext, AgentRun, KitError, Reply, Runner};

/// The agent's name, written into each StepNode's `agent` field.
const NAME: &str = "uwf-llm";

const ABOUT: &str = "\
A single-call uwf agent: sends the role's prompt to the model configured for
the role and lets the kit extract the output from the answer.

The model alias is roleModels[<workflow>][<role>] in <root>/config.yaml, else
defaultModel; its provider gives the base URL and the name of the environment
variable holding the API key (usually set in <root>/.env). The detail node
(`llm-call`) records the model, token usage, duration and the answer.
UWF_LLM_TIMEOUT_SECS, UWF_LLM_MAX_ATTEMPTS and UWF_LLM_BACKOFF_MS tune the call.";

/// What can go wrong besides the kit's own errors.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
enum LlmAgentError {
    /// Config, model, key, endpoint or store errors, with the kit's help.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Kit(#[from] KitError),

    /// Storing the detail node failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),

    /// The model answered with nothing.
    #[error("model {model:?} (alias {alias:?}) returned an empty answer")]
    #[diagnostic(
        code(uwf_llm::empty_answer),
        help(
            "nothing was written to the thread; run the step again, or pick another model for the role (roleModels in config.yaml)"
        )
    )]
    EmptyAnswer {
        /// The provider's model name.
        model: String,
        /// The alias.
        alias: String,
    },
}

fn main() -> ExitCode {
    Runner::new(NAME)
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .run_with(|inv| {
            let ctx = inv.load()?;
            let run = call(&ctx)?;
            Ok(Reply::Step(uwf_agent_kit::finish(&ctx, inv.name(), run)?))
        })
}

/// The one model call of the step, and its detail node.
fn call(ctx: &AgentContext) -> Result<AgentRun, LlmAgentError> {
    let config = ctx.require_config()?;
    let alias = llm::resolve_model(config, None, &ctx.workflow().name, ctx.role())?;
    let client = LlmClient::from_config(config, &alias)?;
    tracing::debug!(
        alias,
        model = client.model(),
        role = ctx.role(),
        "calling the model"
    );
    let messages = [
        Message::system(ctx.system_prompt()),
        Message::user(ctx.user_prompt()?),
    ];
    let reply = client.chat(&messages, false)?;
    if reply.content.trim().is_empty() {
        return Err(LlmAgentError::EmptyAnswer {
            model: client.model().to_owned(),
            alias,
        });
    }
    let detail = detail::store_call(ctx.store(), client.model(), &reply)?;
    Ok(AgentRun::text(reply.content).with_detail(detail))
}
