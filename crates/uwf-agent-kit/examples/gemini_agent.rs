//! A third-party wrapper of another agent CLI with the kit's `cli_agent`
//! module: Google's Gemini CLI in headless mode
//! (`gemini -p <prompt> --output-format json --yolo`), whose stdout is one
//! JSON object `{response, stats, error?}` (its documented headless
//! format; exit 1 on an API failure, 53 when the turn limit is reached).
//!
//! ```sh
//! cargo build -p uwf-agent-kit --example gemini_agent
//! UWF_GEMINI_MODEL=gemini-2.5-pro uwf thread step <thread-id> --agent target/debug/examples/gemini_agent
//! ```
//!
//! `tests/it/gemini_example.rs` runs it against a stand-in `gemini` script.
//! docs/writing-agents.md walks through it.

use std::time::Duration;

use serde_json::{Map, Value, json};
use uwf_agent_kit::cli_agent::{self, Cli, RunOptions, TranscriptSchemas, Turn};
use uwf_agent_kit::{AgentContext, AgentRun, BoxError, Runner};

/// The detail: the stats and the two turns of the exchange.
fn schemas() -> TranscriptSchemas {
    TranscriptSchemas {
        detail: json!({
            "title": "gemini-detail",
            "type": "object",
            "required": ["model", "stats", "duration", "turnCount", "turns"],
            "properties": {
                "model": { "type": ["string", "null"] },
                "stats": { "type": ["object", "null"] },
                "duration": { "type": "integer" },
                "turnCount": { "type": "integer" },
                "turns": { "type": "array", "items": { "type": "string", "format": "cas_ref" } }
            }
        }),
        // The turn every agent writes (`Turn`), under this agent's title.
        turn: Turn::schema(
            "gemini-turn",
            "One message of a Gemini CLI step.",
            Map::new(),
        ),
    }
}

/// One step: how to invoke Gemini, and how to read what it says.
fn work(ctx: &AgentContext, model: Option<&str>) -> Result<AgentRun, BoxError> {
    // 1. The program: $GEMINI_BIN, else `gemini` on PATH (a clear error if missing).
    let cli = Cli::from_env("gemini", "GEMINI_BIN", "gemini")
        .install_hint("install the Gemini CLI: `npm install -g @google/gemini-cli`");
    // 2. The command line: the kit's prompt as one argument.
    let prompt = ctx.prompt()?;
    let prompt = cli_agent::prompt_arg(cli.tool(), &prompt)?;
    let mut cmd = cli.command();
    cmd.args(["-p", prompt.as_ref(), "--output-format", "json", "--yolo"]);
    if let Some(m) = model {
        cmd.args(["--model", m]);
    }
    cmd.args(cli_agent::extra_args("UWF_GEMINI_ARGS", &[])?);
    // 3. Run it: own process group, a timeout, its stderr shown live.
    let options = RunOptions::new()
        .timeout(Some(Duration::from_secs(30 * 60)))
        .echo_stderr(true);
    let out = cli.run(cmd, options)?;
    // 4. Read the answer.
    let result: Map<String, Value> = cli_agent::json_lines(&out.stdout)
        .last()
        .unwrap_or_default();
    if !out.status.success() || result.contains_key("error") {
        let why = result
            .get("error")
            .map_or_else(|| out.quote(), Value::to_string);
        return Err(out.failed("gemini", &format!("Gemini said: {why}.")).into());
    }
    let answer = result
        .get("response")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if answer.trim().is_empty() {
        return Err("gemini printed no response".into());
    }
    cli_agent::progress("gemini", &format!("answered in {} ms", out.duration_ms()));
    // 5. The transcript as detail nodes: the prompt and the answer.
    let mut turns = [
        Turn::new("user", prompt.as_ref()),
        Turn::new("assistant", answer),
    ];
    turns[1].index = 1;
    let stats = result.get("stats").cloned().unwrap_or(Value::Null);
    let mut detail = Map::new();
    detail.insert("model".into(), model.map_or(Value::Null, Value::from));
    detail.insert("stats".into(), stats);
    detail.insert("duration".into(), out.duration_ms().into());
    let detail = cli_agent::store_transcript(ctx.store(), &schemas(), detail, &turns)?;
    // 6. The kit extracts the output (frontmatter first) and writes the StepNode.
    Ok(AgentRun::text(answer).with_detail(detail))
}

fn main() -> std::process::ExitCode {
    Runner::new("uwf-gemini")
        .about("Runs each role with the Gemini CLI (model: $UWF_GEMINI_MODEL, else Gemini's).")
        .run(|ctx| work(ctx, std::env::var("UWF_GEMINI_MODEL").ok().as_deref()))
}
