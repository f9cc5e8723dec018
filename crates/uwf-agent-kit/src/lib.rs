//! The uwf agent framework: write a uwf agent in a few lines.
//!
//! An agent is a command `uwf thread step` runs as
//! `<command> <args…> <thread-id> <role>`. It reads the thread from the
//! storage root, does the role's work, writes a StepNode to the CAS and
//! prints the StepNode's hash on stdout — one line, nothing else. It never
//! moves the thread's head: that is `uwf`'s job. This crate does all of
//! that except the work itself. In the agent's `Cargo.toml`:
//!
//! ```toml
//! [dependencies]
//! uwf-agent-kit = { version = "0.1", features = ["fancy"] }
//!
//! [dev-dependencies]
//! uwf-agent-kit = { version = "0.1", features = ["fancy", "testing"] }
//! ```
//!
//! and its `main.rs`:
//!
//! ```rust
//! use uwf_agent_kit::{AgentContext, AgentRun};
//!
//! fn main() -> std::process::ExitCode {
//!     uwf_agent_kit::run("echo", |ctx: &AgentContext| {
//!         // format instruction + role prompt + task + history (within a quota) + edge prompt
//!         let prompt = ctx.prompt()?;
//!         let answer = format!("---\nstatus: done\n---\n\nRole {} saw {} steps.\n\n{prompt}",
//!                              ctx.role(), ctx.steps()?.len());
//!         Ok(AgentRun::text(answer))
//!     })
//! }
//! ```
//!
//! (Run without arguments, as here, an agent prints its help on stderr and
//! exits 0; `uwf` always passes the thread and the role.)
//!
//! The closure gets an [`AgentContext`]: the thread id, the workflow, the
//! role's definition and outputSchema, the start node (the user's task),
//! the previous steps with their outputs, the edge prompt, the format
//! instruction, the [prompt](AgentContext::prompt), the configuration, an
//! [LLM client](AgentContext::llm) and the store. It returns
//! `Result<AgentRun, BoxError>`: any error converts with `?` —
//! `std::io::Error`, `Box<dyn Error + Send + Sync>`, `anyhow::Error`,
//! `String`, … (to hand over a function returning `anyhow::Result<AgentRun>`,
//! write `|ctx| Ok(work(ctx)?)`).
//!
//! What the kit does with the [`AgentRun`]:
//!
//! 1. **Output.** A structured output ([`AgentRun::output`]) is used as is.
//!    An answer text ([`AgentRun::text`]) goes through the
//!    [two-layer extract](extract): the fields of its YAML frontmatter that
//!    the role's outputSchema declares, when they satisfy it (no LLM
//!    call); otherwise an LLM asked for JSON matching the schema (with one
//!    repair round). The output is stored as a node typed by the role's
//!    outputSchema, which validates it.
//! 2. **Detail.** The node given with [`AgentRun::with_detail`] (a
//!    transcript the agent stored itself), or the answer text stored as an
//!    [`agent-answer`](answer_schema) node.
//! 3. **StepNode.** `{start, prev, role, output, detail, agent}` chained
//!    after the thread's last step (plus `childThread` when the run was
//!    given one with [`AgentRun::with_child_thread`]: a workflow run as an
//!    agent); its hash is printed.
//!
//! Pieces for LLM agents: [`prompt`] (the prompt assembly, the format
//! instruction derived from the schema), [`llm`] (a client for
//! OpenAI-compatible and Anthropic providers configured from `config.yaml`,
//! with retries and timeouts; [`LlmClient::post_json`](llm::LlmClient::post_json)
//! for request bodies of an agent's own, such as tool calls),
//! [`extract`] (both extraction layers, callable directly).
//!
//! Wrapping an agent CLI (Claude Code, Codex, Hermes, Gemini CLI, …):
//! [`cli_agent`] runs it non-interactively in its own process group with a
//! timeout, streams its output for live progress and stores its transcript
//! as detail nodes.
//!
//! Entry points, from the highest level down: [`run`] (a whole `main`),
//! [`Runner`] (the same with a version, extra arguments, or full control of
//! stdout via [`Runner::run_with`]), [`execute`] (no process, for tests),
//! and the pieces [`AgentContext::load`], [`finish`] and [`write_step`].
//!
//! With the `testing` feature, `testing::Fixture` provides a throw-away
//! storage root with a small workflow and threads, and `testing::MockLlm` a
//! scripted OpenAI-compatible server on loopback (also as the
//! `uwf-mock-llm` binary). With the `fancy` feature (for agent binaries),
//! errors are reported graphically. The guide is
//! [docs/writing-agents.md](https://github.com/uncaged/uwf/blob/main/docs/writing-agents.md);
//! the raw protocol, for agents in other languages,
//! [docs/agent-protocol.md](https://github.com/uncaged/uwf/blob/main/docs/agent-protocol.md).

mod agent_run;
mod cli;
pub mod cli_agent;
mod context;
mod error;
#[cfg(test)]
mod execute_tests;
pub mod extract;
pub mod llm;
#[cfg(test)]
mod llm_tests;
pub mod prompt;
mod report;
mod step;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use agent_run::AgentRun;
pub use cli::{Invocation, Reply, Runner, conclude, execute, install_report_handler, run};
pub use context::{AgentContext, prompt_at};
pub use error::KitError;
pub use extract::{Extracted, Layer};
pub use report::{Reported, hint, report};
pub use step::{
    ANSWER_TITLE, answer_schema, finish, output_payload, put_answer, put_detail, put_output,
    write_step, write_step_with_child,
};
/// The environment variable naming the store relay an agent reaches its
/// store through (docs/postgres.md, "The store relay"): a tool an agent
/// runs for the model must not inherit it.
pub use uwf_protocol::agent_env::RELAY as RELAY_ENV;
/// The id types of the protocol, so an agent needs no direct dependency for them.
pub use uwf_protocol::{Hash, ThreadId};

/// The store backends [`AgentContext::load`] opens stores with: set once,
/// early, by a program that links more than the filesystem store.
static BACKENDS: std::sync::OnceLock<uwf_backend::Backends> = std::sync::OnceLock::new();

/// Makes [`AgentContext::load`] open stores with `backends` (the `uwf`
/// binary registers PostgreSQL here). Without it an agent opens the
/// filesystem store itself and reaches any other store through the relay
/// of the engine that runs it (docs/postgres.md, "The store relay"), so an
/// agent links no database client. Returns `false`, changing nothing, if
/// backends were set (or used) already.
pub fn use_backends(backends: uwf_backend::Backends) -> bool {
    BACKENDS.set(backends).is_ok()
}

/// The backends [`AgentContext::load`] uses ([`use_backends`]).
pub fn backends() -> &'static uwf_backend::Backends {
    BACKENDS.get_or_init(uwf_backend::Backends::new)
}

/// The error an agent's closure returns. Any error converts into it with
/// `?`, and a closure that only returns `Ok(..)` needs no annotation.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
