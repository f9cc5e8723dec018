//! `uwf thread answer`: a person's answer to a thread that waits for one
//! (see [`uwf_engine::human`] for the waits themselves). The answer becomes
//! a StepNode exactly as an agent's would (the agent kit writes it), and
//! the engine applies it with the same checks.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;

use uwf_agent_kit::{AgentContext, AgentRun};
use uwf_moderator::thread;
use uwf_protocol::{StepOutput, ThreadId};
use uwf_state::state::{now_ms, split_command_line};

use crate::engine::{self, Ctx};
use crate::error::CliError;

/// Where a person's answer comes from.
pub enum AnswerInput {
    /// `--output`: JSON text, a file, or `-`.
    Output(String),
    /// `--text`: a frontmatter answer in a file, or `-`.
    Text(String),
    /// `--edit`: `$VISUAL`/`$EDITOR` on a template.
    Edit,
    /// The output itself, already parsed (`uwf serve`'s answer action).
    Value(serde_json::Value),
}

/// `uwf thread answer`: writes the StepNode a person gives for the role
/// thread `id` waits on, and moves the head by compare-and-swap.
pub fn answer(
    ctx: &Ctx,
    id: ThreadId,
    role: Option<&str>,
    input: AnswerInput,
    name: Option<&str>,
) -> Result<StepOutput, CliError> {
    let head = engine::active_head(ctx, id)?;
    // Read as every other command reads the waits: a waiting table that
    // does not parse refuses the answer before anything is written.
    let recorded = ctx.state().waiting_of(id)?;
    let view = thread::load(ctx.cas(), head)?;
    let decision = view.decide()?;
    if decision.is_end() {
        return Err(CliError::NotWaiting {
            thread: id,
            reason: "its workflow is at its end; nothing is asked".into(),
        });
    }
    let next = decision.next.clone();
    if next == uwf_moderator::SUSPEND {
        return Err(CliError::NotWaiting {
            thread: id,
            reason: "it is suspended ($SUSPEND), not waiting for an answer: continue it with `uwf thread resume`".into(),
        });
    }
    if let Some(r) = role
        && r != next
    {
        return Err(CliError::NotWaiting {
            thread: id,
            reason: format!("it waits for role {next:?}, not {r:?}"),
        });
    }
    let config = ctx.state().config()?;
    let agent =
        ctx.state()
            .resolve_agent_with(config.as_ref(), None, &view.workflow.name, &next)?;
    if !agent.human {
        let reason = match recorded.and_then(|r| r.child) {
            Some(child) => format!(
                "role {next:?} is run by agent {}, whose child thread {child} waits; answer that thread",
                agent.label
            ),
            None => format!(
                "role {next:?} is run by agent {}, not by a person (`human: true` in config.yaml)",
                agent.label
            ),
        };
        return Err(CliError::NotWaiting { thread: id, reason });
    }
    let ctx_agent = AgentContext::load(&ctx.root, &id.to_string(), &next).map_err(|e| match e {
        // Archived since: by a kill, or by another answer that ended it
        // (a lost race, not a kill: docs/state.md, "Exit status").
        uwf_agent_kit::KitError::NotActive { .. } => {
            engine::settle(ctx, id, engine::EngineError::Killed { thread: id }).into()
        }
        other => CliError::kit(other),
    })?;
    if ctx_agent.head() != head {
        let moved = engine::EngineError::HeadMoved {
            thread: id,
            actual: ctx_agent.head(),
        };
        return Err(engine::settle(ctx, id, moved).into());
    }
    let run = match input {
        AnswerInput::Output(arg) => AgentRun::output(crate::input::read_json("--output", &arg)?),
        AnswerInput::Text(arg) => AgentRun::text(crate::input::read_text(&arg)?),
        AnswerInput::Edit => AgentRun::text(edit(&ctx_agent, id)?),
        AnswerInput::Value(v) => AgentRun::output(v),
    };
    // Read before the answer's nodes are stored (uwf_engine::keep).
    let epoch = ctx.state().gc_epoch()?;
    let output = uwf_agent_kit::put_output(&ctx_agent, &run).map_err(CliError::kit)?;
    let detail = uwf_agent_kit::put_detail(&ctx_agent, &run).map_err(CliError::kit)?;
    let label = person(name);
    let new = uwf_agent_kit::write_step(ctx_agent.store(), &ctx_agent, output, detail, &label)
        .map_err(CliError::kit)?;
    engine::apply_offered(ctx, id, head, &next, new, Some(epoch)).map_err(|e| match e {
        engine::EngineError::Rejected { thread, rejection } => CliError::AnswerRejected {
            thread,
            reason: rejection.to_string(),
        },
        other => other.into(),
    })
}

/// The StepNode's `agent` for a person: `human:<name>`, the name from
/// `--as`, else `$USER`, else `$LOGNAME`, else `unknown`.
fn person(name: Option<&str>) -> String {
    let name = name
        .map(str::to_string)
        .filter(|n| !n.trim().is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .or_else(|| std::env::var("LOGNAME").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "unknown".to_string());
    format!("human:{name}")
}

/// The template `--edit` opens: an example frontmatter of the role's
/// outputSchema, then the task, the question and the format instruction
/// as an HTML comment (kept in the detail, ignored by the extraction).
fn template(ctx: &AgentContext) -> String {
    let example = uwf_agent_kit::prompt::example_frontmatter(ctx.output_schema())
        .unwrap_or_else(|| "---\n---\n".to_string());
    let question = ctx
        .edge_prompt()
        .map(str::to_string)
        .unwrap_or_else(|| ctx.role_definition().system_prompt.clone());
    let comment = format!(
        "Answer as role {role} of workflow {wf}: edit the fields between the --- lines above,\nthen write any notes below this comment. Save and quit to answer; quit without\nchanging the file to give up.\n\nTask: {task}\n\nQuestion: {question}\n\n{format}",
        role = ctx.role(),
        wf = ctx.workflow().name,
        task = ctx.start().prompt,
        format = ctx.format_instruction(),
    );
    format!("{example}\n<!--\n{}\n-->\n", comment.replace("--", "- -"))
}

/// Opens `$VISUAL` / `$EDITOR` (else `vi`) on the template and returns what
/// the person saved; an unchanged file means no answer.
fn edit(ctx: &AgentContext, id: ThreadId) -> Result<String, CliError> {
    let template = template(ctx);
    let path = temp_path(id, ctx.role());
    write_new(&path, &template)?;
    let result = run_editor(&path).and_then(|()| {
        std::fs::read_to_string(&path).map_err(|source| CliError::Read {
            path: path.clone(),
            source,
        })
    });
    let _ = std::fs::remove_file(&path);
    let text = result?;
    if text == template || text.trim().is_empty() {
        return Err(CliError::AnswerAbandoned { thread: id });
    }
    Ok(text)
}

fn temp_path(id: ThreadId, role: &str) -> PathBuf {
    let safe: String = role
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    std::env::temp_dir().join(format!(
        "uwf-answer-{id}-{safe}-{}-{}.md",
        std::process::id(),
        now_ms()
    ))
}

fn write_new(path: &Path, text: &str) -> Result<(), CliError> {
    use std::io::Write as _;
    // Private: the file is in the shared temporary directory.
    let mut f = uwf_util::private::open_options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| CliError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    f.write_all(text.as_bytes())
        .map_err(|source| CliError::Read {
            path: path.to_path_buf(),
            source,
        })
}

fn run_editor(path: &Path) -> Result<(), CliError> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_string());
    let mut words = split_command_line(&editor).map_err(|e| CliError::Editor {
        editor: editor.clone(),
        reason: e.to_string(),
    })?;
    if words.is_empty() {
        return Err(CliError::Editor {
            editor,
            reason: "the command is empty".into(),
        });
    }
    let program = words.remove(0);
    let mut cmd = Command::new(&program);
    cmd.args(&words).arg(path);
    // stdout carries only uwf's answer: an editor gets the terminal, or stderr.
    if !std::io::stdout().is_terminal()
        && let Some(err) = engine::human::stderr_fd()
    {
        cmd.stdout(err);
    }
    let status = cmd.status().map_err(|e| CliError::Editor {
        editor: editor.clone(),
        reason: e.to_string(),
    })?;
    if !status.success() {
        return Err(CliError::Editor {
            editor,
            reason: format!("it exited with {status}; nothing was answered"),
        });
    }
    Ok(())
}
