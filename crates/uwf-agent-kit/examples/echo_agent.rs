//! A third-party agent, written exactly as the crate documentation shows:
//! it answers with a `status: done` frontmatter, then echoes its prompt.
//!
//! ```sh
//! cargo build -p uwf-agent-kit --example echo_agent
//! uwf thread step <thread-id> --agent "target/debug/examples/echo_agent"
//! ```
//!
//! `tests/it/third_party.rs` runs the same closure through `execute`.

use uwf_agent_kit::{AgentContext, AgentRun};

// Kept character for character as in the crate docs.
#[rustfmt::skip]
fn main() -> std::process::ExitCode {
    uwf_agent_kit::run("echo", |ctx: &AgentContext| {
        // format instruction + role prompt + task + history (within a quota) + edge prompt
        let prompt = ctx.prompt()?;
        let answer = format!("---\nstatus: done\n---\n\nRole {} saw {} steps.\n\n{prompt}",
                             ctx.role(), ctx.steps()?.len());
        Ok(AgentRun::text(answer))
    })
}
