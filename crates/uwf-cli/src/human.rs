//! People in the loop: roles bound to a person (`human: true` in
//! config.yaml), the waiting state, `uwf thread answer`, `thread list
//! --waiting`, and the `notify` hook.
//!
//! A thread waits when the moderator's next role is bound to a person, or
//! when that role's workflow agent reported that its child thread waits.
//! Nothing is added to the chain: the wait is an entry of `waiting.yaml`
//! that counts only while the thread's head is the one it was recorded at
//! (see [`uwf_state::side`]), so an answer, a kill or any other move of the
//! head ends it without a second write, and a crash cannot leave a thread
//! waiting by mistake. `uwf thread step` and `run` print the wait and exit
//! with [`EXIT_WAITING`](crate::error::EXIT_WAITING).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use uwf_agent_kit::{AgentContext, AgentRun};
use uwf_cas::Hash;
use uwf_moderator::thread::{self, ThreadView};
use uwf_protocol::{StepOutput, WaitingListItem, WaitingRecord, WorkflowConfig};
use uwf_state::state::{now_ms, split_command_line};

use crate::engine::{self, Ctx};
use crate::error::CliError;

/// How long the `notify` command may run before it is left behind.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// The deepest chain of child waits followed (a guard against cycles).
const MAX_NESTING: usize = 64;

/// What a person is asked for `role`: the edge prompt of the moderator's
/// decision, else the role's system prompt.
fn prompt_of(view: &ThreadView, role: &str, edge: Option<&str>) -> String {
    match edge {
        Some(p) if !p.trim().is_empty() => p.to_string(),
        _ => view
            .workflow
            .roles
            .get(role)
            .map(|r| r.system_prompt.clone())
            .unwrap_or_default(),
    }
}

/// Records that thread `id` (loaded as `view`) waits for a person on
/// `role`, bound to the human alias `agent`; runs the `notify` hook when
/// the wait is new. Returns the wait as recorded (an earlier record of the
/// same wait keeps its `since`).
pub fn wait(
    ctx: &Ctx,
    id: &str,
    view: &ThreadView,
    role: &str,
    edge_prompt: Option<&str>,
    agent: &str,
    config: Option<&WorkflowConfig>,
) -> Result<WaitingRecord, CliError> {
    let record = WaitingRecord {
        head: view.head.to_string(),
        role: role.to_string(),
        prompt: prompt_of(view, role, edge_prompt),
        agent: agent.to_string(),
        since: now_ms(),
        child: None,
    };
    let new = ctx
        .state
        .mark_waiting(id, record.clone())
        .map_err(|e| engine::conflict_or(e, id))?;
    if new && let Some(command) = config.and_then(|c| c.notify.as_deref()) {
        notify(command, id, &view.workflow.name, &record);
    }
    Ok(ctx.state.waiting_of(id)?.unwrap_or(record))
}

/// After a workflow agent exited with the waiting status: the wait of its
/// child thread (an active thread started from `view`'s head that waits),
/// now also recorded for thread `id`. `None` if no such child waits (the
/// exit status then counts as an ordinary failure).
pub fn child_waits(
    ctx: &Ctx,
    id: &str,
    view: &ThreadView,
    role: &str,
    agent: &str,
) -> Result<Option<WaitingRecord>, CliError> {
    let head = view.head.to_string();
    let mut found = None;
    for (child, record) in ctx.state.waiting()? {
        if child == id {
            continue;
        }
        let Ok(child_head) = record.head.parse::<Hash>() else {
            continue;
        };
        if crate::nested::parent_of(ctx, child_head)?.as_deref() == Some(head.as_str()) {
            found = Some((child, record));
            break;
        }
    }
    let Some((child, inner)) = found else {
        return Ok(None);
    };
    let record = WaitingRecord {
        head,
        role: role.to_string(),
        prompt: inner.prompt,
        agent: agent.to_string(),
        since: now_ms(),
        child: Some(child),
    };
    ctx.state
        .mark_waiting(id, record.clone())
        .map_err(|e| engine::conflict_or(e, id))?;
    Ok(Some(ctx.state.waiting_of(id)?.unwrap_or(record)))
}

/// Runs the `notify` hook: `<command> <args…> <thread> <role> <prompt>`,
/// with `UWF_THREAD`, `UWF_WORKFLOW`, `UWF_ROLE` and `UWF_PROMPT` set. Best
/// effort: a failure is a warning, never the step's failure. Its stdout
/// goes to uwf's stderr, so uwf's own stdout stays the step's JSON.
fn notify(command: &str, id: &str, workflow: &str, record: &WaitingRecord) {
    let mut words = match split_command_line(command) {
        Ok(w) if !w.is_empty() => w,
        Ok(_) => return,
        Err(e) => {
            tracing::warn!("config.yaml `notify` {command:?} cannot be split: {e}");
            return;
        }
    };
    let program = words.remove(0);
    let mut cmd = Command::new(&program);
    cmd.args(&words)
        .arg(id)
        .arg(&record.role)
        .arg(&record.prompt)
        .env("UWF_THREAD", id)
        .env("UWF_WORKFLOW", workflow)
        .env("UWF_ROLE", &record.role)
        .env("UWF_PROMPT", &record.prompt)
        .stdin(Stdio::null());
    match stderr_fd() {
        Some(err) => cmd.stdout(err),
        None => cmd.stdout(Stdio::null()),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("warning: the notify command {program:?} cannot be started: {e}");
            return;
        }
    };
    let until = Instant::now() + NOTIFY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return,
            Ok(Some(status)) => {
                eprintln!("warning: the notify command {program:?} failed ({status})");
                return;
            }
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                eprintln!(
                    "warning: the notify command {program:?} still runs after {}s; not waiting for it",
                    NOTIFY_TIMEOUT.as_secs()
                );
                return;
            }
            Err(e) => {
                eprintln!("warning: cannot wait for the notify command {program:?}: {e}");
                return;
            }
        }
    }
}

/// A duplicate of uwf's stderr, to give a child process as its stdout so
/// that uwf's own stdout carries only its answer.
fn stderr_fd() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    std::io::stderr().as_fd().try_clone_to_owned().ok()
}

/// Follows child waits from thread `id` to the thread a person answers.
pub fn innermost(ctx: &Ctx, id: &str, record: &WaitingRecord) -> Result<String, CliError> {
    let mut thread = id.to_string();
    let mut child = record.child.clone();
    for _ in 0..MAX_NESTING {
        let Some(c) = child else { break };
        thread = c;
        child = ctx.state.waiting_of(&thread)?.and_then(|r| r.child);
    }
    Ok(thread)
}

/// `uwf thread list --waiting`: every thread waiting now, with the thread
/// to answer and its call stack.
pub fn list(ctx: &Ctx) -> Result<Vec<WaitingListItem>, CliError> {
    let mut items = Vec::new();
    for (id, record) in ctx.state.waiting()? {
        let answer = innermost(ctx, &id, &record)?;
        let head: Hash = match ctx.state.thread_head(&answer)? {
            Some(h) => h
                .parse()
                .map_err(|e: uwf_cas::ParseHashError| CliError::CorruptState {
                    path: ctx.state.threads_path(),
                    reason: e.to_string(),
                })?,
            None => continue,
        };
        let view = thread::load(
            &ctx.cas,
            record
                .head
                .parse()
                .map_err(|e: uwf_cas::ParseHashError| CliError::CorruptState {
                    path: ctx.state.waiting_path(),
                    reason: e.to_string(),
                })?,
        )?;
        items.push(WaitingListItem {
            thread: id,
            workflow: view.workflow_hash.to_string(),
            waiting: record,
            answer,
            stack: crate::nested::stack(ctx, head)?,
        });
    }
    Ok(items)
}

/// Where a person's answer comes from.
pub enum AnswerInput {
    /// `--output`: JSON text, a file, or `-`.
    Output(String),
    /// `--text`: a frontmatter answer in a file, or `-`.
    Text(String),
    /// `--edit`: `$VISUAL`/`$EDITOR` on a template.
    Edit,
}

/// `uwf thread answer`: writes the StepNode a person gives for the role
/// thread `id` waits on, and moves the head by compare-and-swap.
pub fn answer(
    ctx: &Ctx,
    id: &str,
    role: Option<&str>,
    input: AnswerInput,
    name: Option<&str>,
) -> Result<StepOutput, CliError> {
    let head = engine::active_head(ctx, id)?;
    let view = thread::load(&ctx.cas, head)?;
    let decision = view.decide()?;
    if decision.is_end() {
        return Err(CliError::NotWaiting {
            thread: id.to_string(),
            reason: "its workflow is at its end; nothing is asked".into(),
        });
    }
    let next = decision.next.clone();
    if let Some(r) = role
        && r != next
    {
        return Err(CliError::NotWaiting {
            thread: id.to_string(),
            reason: format!("it waits for role {next:?}, not {r:?}"),
        });
    }
    let config = ctx.state.config()?;
    let agent = ctx
        .state
        .resolve_agent_with(config.as_ref(), None, &view.workflow.name, &next)?;
    if !agent.human {
        let reason = match ctx.state.waiting_of(id)?.and_then(|r| r.child) {
            Some(child) => format!(
                "role {next:?} is run by agent {}, whose child thread {child} waits; answer that thread",
                agent.label
            ),
            None => format!(
                "role {next:?} is run by agent {}, not by a person (`human: true` in config.yaml)",
                agent.label
            ),
        };
        return Err(CliError::NotWaiting {
            thread: id.to_string(),
            reason,
        });
    }
    let ctx_agent = AgentContext::load(&ctx.root, id, &next).map_err(CliError::kit)?;
    if ctx_agent.head() != head {
        return Err(CliError::HeadMoved {
            thread: id.to_string(),
            actual: ctx_agent.head().to_string(),
        });
    }
    let run = match input {
        AnswerInput::Output(arg) => AgentRun::output(crate::input::read_json("--output", &arg)?),
        AnswerInput::Text(arg) => AgentRun::text(crate::input::read_text(&arg)?),
        AnswerInput::Edit => AgentRun::text(edit(&ctx_agent, id)?),
    };
    let output = uwf_agent_kit::put_output(&ctx_agent, &run).map_err(CliError::kit)?;
    let detail = uwf_agent_kit::put_detail(&ctx_agent, &run).map_err(CliError::kit)?;
    let label = person(name);
    let new = uwf_agent_kit::write_step(ctx_agent.store(), &ctx_agent, output, detail, &label)
        .map_err(CliError::kit)?;
    let loaded =
        engine::check_step(ctx, &view, &next, new).map_err(|reason| CliError::AnswerRejected {
            thread: id.to_string(),
            reason,
        })?;
    engine::apply(ctx, id, view, &next, new, loaded)
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
fn edit(ctx: &AgentContext, id: &str) -> Result<String, CliError> {
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
        return Err(CliError::AnswerAbandoned {
            thread: id.to_string(),
        });
    }
    Ok(text)
}

fn temp_path(id: &str, role: &str) -> PathBuf {
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
    let mut f = std::fs::OpenOptions::new()
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
        && let Some(err) = stderr_fd()
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

/// The `waiting` part of `thread show`: the wait of thread `id` now.
pub fn show(ctx: &Ctx, id: &str) -> Result<Option<Value>, CliError> {
    Ok(match ctx.state.waiting_of(id)? {
        Some(record) => {
            let answer = innermost(ctx, id, &record)?;
            let mut v =
                serde_json::to_value(&record).map_err(|e| CliError::Output(e.to_string()))?;
            v["answer"] = Value::String(answer);
            Some(v)
        }
        None => None,
    })
}
