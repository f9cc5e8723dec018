//! The uwf agent framework.
//!
//! An agent is a command `uwf thread step` runs as
//! `<command> <args…> <thread-id> <role>`. It reads the thread from the
//! storage root, does the role's work, writes a StepNode to the CAS and
//! prints the StepNode's hash on stdout — one line, nothing else. It never
//! moves the thread's head: that is `uwf`'s job.
//!
//! This crate does all of that except the work itself, so an agent binary is
//! a few lines:
//!
//! ```no_run
//! use uwf_agent_kit::AgentRun;
//!
//! fn main() -> std::process::ExitCode {
//!     uwf_agent_kit::run("uwf-yes", |ctx| {
//!         // ctx: the workflow, the role and its schema, the user's prompt,
//!         // every previous step, the edge prompt, the store.
//!         Ok(AgentRun::text(format!(
//!             "---\napproved: true\ncomments: {:?}\n---\nLooks good.",
//!             ctx.start().prompt
//!         )))
//!     })
//! }
//! ```
//!
//! What the kit does with the [`AgentRun`]:
//!
//! 1. **Output.** A structured output ([`AgentRun::output`]) is used as is;
//!    otherwise the answer text goes through the [frontmatter fast
//!    path](extract): the fields of its YAML frontmatter that the role's
//!    outputSchema declares become the output. Layer 2 of the extract (an
//!    LLM fallback) comes in a later release; until then an answer without
//!    usable frontmatter is a [`KitError::Extraction`]. The output is stored
//!    as a node typed by the role's outputSchema, which validates it.
//! 2. **Detail.** The node given with [`AgentRun::with_detail`], or the
//!    answer text stored as an [`agent-answer`](answer_schema) node.
//! 3. **StepNode.** `{start, prev, role, output, detail, agent}` chained
//!    after the thread's last step.
//!
//! For LLM agents, [`AgentContext::system_prompt`] and
//! [`AgentContext::user_prompt`] assemble the prompts: the deliverable
//! format derived from the role's schema, the scope constraint and the
//! role's system prompt; the user's task, the previous steps and the edge
//! prompt (pieces in [`prompt`]).
//!
//! Entry points, from the highest level down: [`run`] (a whole `main`),
//! [`Runner`] (the same with a version, extra arguments, or full control of
//! stdout via [`Runner::run_with`]), [`execute`] (no process, for tests),
//! and the pieces [`AgentContext::load`], [`finish`] and [`write_step`].
//!
//! With the `testing` feature, `testing::Fixture` provides a throw-away
//! storage root with a small workflow and threads, for the tests of agents
//! and of `uwf` itself. With the `fancy` feature (for agent binaries),
//! errors are reported graphically.

mod agent_run;
mod cli;
mod context;
mod error;
#[cfg(test)]
mod execute_tests;
pub mod extract;
pub mod prompt;
mod step;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use agent_run::AgentRun;
pub use cli::{Invocation, Reply, Runner, execute, run};
pub use context::AgentContext;
pub use error::KitError;
pub use step::{
    ANSWER_TITLE, answer_schema, finish, output_payload, put_answer, put_detail, put_output,
    write_step,
};

/// The error an agent's closure returns. Any error converts into it with
/// `?`, and a closure that only returns `Ok(..)` needs no annotation.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
