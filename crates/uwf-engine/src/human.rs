//! People in the loop: roles bound to a person (`human: true` in
//! config.yaml), the waiting state, the list of waits, and the `notify`
//! hook. (Writing a person's answer is the front end's: it builds the
//! StepNode as an agent would and applies it with [`crate::apply_offered`].)
//!
//! A thread waits when the moderator's next role is bound to a person, or
//! when that role's workflow agent reported that its child thread waits.
//! Nothing is added to the chain: the wait is an entry of `waiting.yaml`
//! that counts only while the thread's head is the one it was recorded at
//! (see [`uwf_state::side`]), so an answer, a kill or any other move of the
//! head ends it without a second write, and a crash cannot leave a thread
//! waiting by mistake. `uwf thread step` and `run` print the wait and exit
//! with [`EXIT_WAITING`].

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use uwf_moderator::thread::{self, ThreadView};
use uwf_protocol::{ThreadId, WaitingListItem, WaitingRecord, WorkflowConfig};
use uwf_state::state::{now_ms, split_command_line};

use crate::error::EngineError;
use crate::step as engine;
use crate::{Engine as Ctx, Progress};

/// Exit status of a process that stopped because its thread (or a child
/// thread it runs) waits for a person
/// ([`uwf_protocol::agent_env::EXIT_WAITING`]).
pub const EXIT_WAITING: u8 = uwf_protocol::agent_env::EXIT_WAITING;

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

/// What a thread waits for: the role, the edge prompt of the moderator's
/// decision, and the human alias the role is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The role.
    pub role: &'a str,
    /// The edge prompt, if the transition has one.
    pub edge_prompt: Option<&'a str>,
    /// The agent alias bound to a person.
    pub agent: &'a str,
}

/// Records that thread `id` (loaded as `view`) waits for a person as `ask`
/// says; runs the `notify` hook of `config` when the wait is new. Returns
/// the wait as recorded (an earlier record of the same wait keeps its
/// `since`).
pub fn wait(
    ctx: &Ctx,
    id: ThreadId,
    view: &ThreadView,
    ask: Ask<'_>,
    config: Option<&WorkflowConfig>,
    progress: &dyn Progress,
) -> Result<WaitingRecord, EngineError> {
    let record = WaitingRecord {
        head: view.head,
        role: ask.role.to_string(),
        prompt: prompt_of(view, ask.role, ask.edge_prompt),
        agent: ask.agent.to_string(),
        since: now_ms(),
        child: None,
    };
    let new = ctx
        .state
        .mark_waiting(id, record.clone())
        .map_err(|e| engine::conflict_or(e, id))?;
    if new && let Some(command) = config.and_then(|c| c.notify.as_deref()) {
        let origin = ctx.state.config_name();
        notify(command, &origin, id, &view.workflow.name, &record, progress);
    }
    Ok(ctx.state.waiting_of(id)?.unwrap_or(record))
}

/// After a workflow agent exited with the waiting status: the wait of its
/// child thread (an active thread started from `view`'s head that waits),
/// now also recorded for thread `id`. `None` if no such child waits (the
/// exit status then counts as an ordinary failure).
pub fn child_waits(
    ctx: &Ctx,
    id: ThreadId,
    view: &ThreadView,
    role: &str,
    agent: &str,
) -> Result<Option<WaitingRecord>, EngineError> {
    let head = view.head;
    let mut found = None;
    for (child, record) in ctx.state.waiting()? {
        if child == id {
            continue;
        }
        if crate::nested::parent_of(ctx, record.head)? == Some(head) {
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
fn notify(
    command: &str,
    origin: &str,
    id: ThreadId,
    workflow: &str,
    record: &WaitingRecord,
    progress: &dyn Progress,
) {
    let mut words = match split_command_line(command) {
        Ok(w) if !w.is_empty() => w,
        Ok(_) => return,
        Err(e) => {
            tracing::warn!("{origin} `notify` {command:?} cannot be split: {e}");
            return;
        }
    };
    let program = words.remove(0);
    let mut cmd = Command::new(&program);
    let id = id.to_string();
    cmd.args(&words)
        .arg(&id)
        .arg(&record.role)
        .arg(&record.prompt)
        .env("UWF_THREAD", &id)
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
            progress.warning(&format!(
                "the notify command {program:?} cannot be started: {e}"
            ));
            return;
        }
    };
    let until = Instant::now() + NOTIFY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return,
            Ok(Some(status)) => {
                progress.warning(&format!("the notify command {program:?} failed ({status})"));
                return;
            }
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                progress.warning(&format!(
                    "the notify command {program:?} still runs after {}s; not waiting for it",
                    NOTIFY_TIMEOUT.as_secs()
                ));
                return;
            }
            Err(e) => {
                progress.warning(&format!(
                    "cannot wait for the notify command {program:?}: {e}"
                ));
                return;
            }
        }
    }
}

/// A duplicate of uwf's stderr, to give a child process as its stdout so
/// that uwf's own stdout carries only its answer.
pub fn stderr_fd() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    std::io::stderr().as_fd().try_clone_to_owned().ok()
}

/// Follows child waits from thread `id` to the thread a person answers.
pub fn innermost(ctx: &Ctx, id: ThreadId, record: &WaitingRecord) -> Result<ThreadId, EngineError> {
    let mut thread = id;
    let mut child = record.child;
    for _ in 0..MAX_NESTING {
        let Some(c) = child else { break };
        thread = c;
        child = ctx.state.waiting_of(thread)?.and_then(|r| r.child);
    }
    Ok(thread)
}

/// `uwf thread list --waiting`: every thread waiting now, with the thread
/// to answer and its call stack.
pub fn list(ctx: &Ctx) -> Result<Vec<WaitingListItem>, EngineError> {
    let mut items = Vec::new();
    for (id, record) in ctx.state.waiting()? {
        let answer = innermost(ctx, id, &record)?;
        let Some(head) = ctx.state.thread_head(answer)? else {
            continue;
        };
        let item = thread::load(&ctx.cas, record.head)
            .map_err(EngineError::from)
            .and_then(|view| {
                Ok(WaitingListItem {
                    thread: id,
                    workflow: view.workflow_hash,
                    waiting: record,
                    answer,
                    stack: crate::nested::stack(ctx, head)?,
                })
            });
        match item {
            Ok(item) => items.push(item),
            // One thread that cannot be read does not hide the others.
            Err(e) if e.is_thread_damage() => {
                tracing::warn!("thread {id} is broken and left out: {e}");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(items)
}

/// The `waiting` part of `thread show`: the wait of thread `id` now.
pub fn show(ctx: &Ctx, id: ThreadId) -> Result<Option<Value>, EngineError> {
    Ok(match ctx.state.waiting_of(id)? {
        Some(record) => {
            let answer = innermost(ctx, id, &record)?;
            let mut v = serde_json::to_value(&record).map_err(|e| EngineError::CorruptState {
                what: format!("the wait of thread {id}").into(),
                reason: e.to_string(),
            })?;
            v["answer"] = Value::String(answer.to_string());
            Some(v)
        }
        None => None,
    })
}
