//! A thread's story for people: why each step ran, how long it took, what
//! runs now (`thread show`, `list`, `steps`, `read`), and following a
//! thread live (`thread watch`, `thread log -f`).

use std::collections::HashMap;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::time::Duration;

use serde_json::{Value, json};
use uwf_cas::Hash;
use uwf_moderator::thread::ThreadView;
use uwf_moderator::{Why, why_from};

/// How many of the newest steps get a `why` in `thread steps` and `thread
/// read`: each is a moderator evaluation over the steps before it, so all
/// of a long thread's would cost time quadratic in its length.
pub const WHY_STEPS: usize = 200;

/// The fewest characters a step takes in `thread read` (its heading, hashes
/// and output fence).
const MIN_STEP_BLOCK: usize = 60;
use uwf_protocol::{AttemptRecord, ThreadId, ThreadListItem};

use crate::engine::running::{self, Found, Marker};
use crate::engine::{self, Ctx, Status};
use crate::error::CliError;
use crate::summary::shorten;

/// How often `watch` and `log -f` look again.
const POLL: Duration = Duration::from_millis(200);

/// A duration in its largest whole unit: `42s`, `3m`, `5h`, `2d`.
pub fn coarse(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// The live marker of thread `id`, if an agent of it runs now.
pub fn running_now(ctx: &Ctx, id: ThreadId) -> Option<Marker> {
    running::live_shared(&ctx.root, ctx.state(), id)
}

/// "running developer for 42 s on host".
fn running_text(m: &Marker) -> String {
    let secs = uwf_state::state::now_ms().saturating_sub(m.started_at) / 1000;
    format!("running {} for {secs} s on {}", m.role, m.host)
}

fn marker_json(m: &Marker) -> Value {
    json!({
        "role": m.role,
        "agent": m.agent,
        "pid": m.pid,
        "host": m.host,
        "startedAt": m.started_at,
        "head": m.head,
        "log": m.log,
        "text": running_text(m),
    })
}

/// The start node of a thread whose head is `head`: (prompt, timestamp).
fn start_of(ctx: &Ctx, head: Hash) -> Option<(String, u64)> {
    let start = crate::engine::nested::start_of(ctx, head).ok()?;
    let node = ctx.cas().get(start).ok()?;
    let prompt = node.payload.get("prompt")?.as_str()?.to_string();
    Some((prompt, node.timestamp))
}

fn workflow_name(ctx: &Ctx, workflow: Hash, names: &mut HashMap<Hash, String>) -> String {
    if let Some(n) = names.get(&workflow) {
        return n.clone();
    }
    let name = ctx
        .cas()
        .get(workflow)
        .ok()
        .and_then(|n| n.payload.get("name")?.as_str().map(str::to_string))
        .unwrap_or_default();
    names.insert(workflow, name.clone());
    name
}

/// The state of an active thread: `running` (a live marker), `waiting`
/// (for a person), `failed` (its last attempt at this head failed),
/// else `idle`.
pub fn active_state(ctx: &Ctx, id: ThreadId, head: Hash) -> Result<&'static str, CliError> {
    if running::live_shared(&ctx.root, ctx.state(), id).is_some() {
        return Ok("running");
    }
    if ctx.state().waiting_of(id)?.is_some() {
        return Ok("waiting");
    }
    let failed = crate::engine::retry::attempts(ctx, id, 1)?
        .first()
        .is_some_and(|(_, r)| r.head == head);
    Ok(if failed { "failed" } else { "idle" })
}

/// A thread as `thread list` lists it.
pub enum Listed {
    /// A thread whose head and workflow could be read.
    Thread(ThreadListItem),
    /// A thread whose nodes are missing or damaged (its head, its chain,
    /// its workflow, its attempt records): listed with the error.
    Broken {
        /// The thread.
        thread: ThreadId,
        /// Its head, as the state says.
        head: Hash,
        /// Archived (`--all`).
        done: bool,
        /// What could not be read.
        error: String,
    },
}

impl Listed {
    /// A broken thread, warned about on stderr.
    pub fn broken(thread: ThreadId, head: Hash, done: bool, e: &CliError) -> Self {
        warn_broken(thread, e);
        Listed::Broken {
            thread,
            head,
            done,
            error: e.to_string(),
        }
    }
}

/// Warns that thread `id` cannot be read (`e`) and is left out of, or
/// marked in, a command that goes through many threads.
pub fn warn_broken(id: ThreadId, e: &CliError) {
    tracing::warn!("thread {id} is broken: {e}; `uwf cas verify` lists what is missing");
}

/// The `thread list` row of a broken thread: `state: "broken"` and the
/// `error`; what cannot be read is `null` (docs/state.md, "Thread commands").
fn broken_row(thread: ThreadId, head: Hash, done: bool, error: String) -> Value {
    json!({
        "thread": thread,
        "name": Value::Null,
        "task": Value::Null,
        "age": Value::Null,
        "state": "broken",
        "workflow": Value::Null,
        "head": head,
        "done": done,
        "error": error,
    })
}

/// `thread list` rows: the ids and heads, with the workflow's name, the
/// task (shortened), the age and the state (running, waiting, idle,
/// failed; archived threads: done, killed, pruned; `broken` for a thread
/// that cannot be read, with its `error`).
pub fn list_rows(
    ctx: &Ctx,
    items: Vec<Listed>,
    reasons: &HashMap<ThreadId, String>,
) -> Result<Vec<Value>, CliError> {
    let now = uwf_state::state::now_ms();
    let mut names = HashMap::new();
    let mut rows = Vec::with_capacity(items.len());
    for listed in items {
        let item = match listed {
            Listed::Thread(item) => item,
            Listed::Broken {
                thread,
                head,
                done,
                error,
            } => {
                rows.push(broken_row(thread, head, done, error));
                continue;
            }
        };
        let (task, started) = start_of(ctx, item.head).unwrap_or_default();
        let state = if item.done {
            reasons
                .get(&item.thread)
                .cloned()
                .unwrap_or_else(|| "done".into())
        } else {
            match active_state(ctx, item.thread, item.head) {
                Ok(state) => state.to_string(),
                // Its attempt records cannot be read.
                Err(e) if e.is_thread_damage() => {
                    warn_broken(item.thread, &e);
                    rows.push(broken_row(item.thread, item.head, false, e.to_string()));
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        rows.push(json!({
            "thread": item.thread,
            "name": workflow_name(ctx, item.workflow, &mut names),
            "task": shorten(&task, 60),
            "age": coarse(now.saturating_sub(started)),
            "state": state,
            "workflow": item.workflow,
            "head": item.head,
            "done": item.done,
        }));
    }
    Ok(rows)
}

/// Adds to `thread show`'s answer: `name`, `task`, `state`, `running` (or
/// `stale`: a marker whose process is gone), and `lastStep` (the head
/// step's role, why it ran, how long it took).
pub fn add_to_show(ctx: &Ctx, id: ThreadId, v: &mut Value) -> Result<(), CliError> {
    let head: Hash = v["head"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .map_err(|e| CliError::from(uwf_cas::CasError::from(e)))?;
    let view = uwf_moderator::thread::load(ctx.cas(), head)?;
    v["name"] = json!(view.workflow.name);
    v["task"] = json!(view.start.prompt);
    let done = v["done"].as_bool().unwrap_or(false);
    v["state"] = json!(if done {
        match engine::status(ctx, id)? {
            Status::Archived(e) => e.reason.unwrap_or_else(|| "done".into()),
            Status::Active { .. } => "done".into(),
        }
    } else {
        active_state(ctx, id, head)?.to_string()
    });
    match running::find_shared(&ctx.root, ctx.state(), id) {
        Some(Found::Live(m)) => v["running"] = marker_json(&m),
        Some(Found::Stale(m, why)) => {
            let mut s = marker_json(&m);
            s["text"] = json!(format!("stale: {why}"));
            v["stale"] = s;
        }
        None => {}
    }
    if let Some(last) = view.steps.last() {
        let whys = why_from(&view.workflow, &view.context(), view.steps.len() - 1);
        let timings = running::timings(&ctx.root, id);
        let mut step = json!({ "hash": last.hash, "role": last.payload.record.role });
        if let Some(why) = whys.last() {
            step["why"] = why_json(why, &last.payload.record.role);
        }
        if let Some(t) = timings.get(&last.hash) {
            step["durationMs"] = json!(t.duration_ms);
        }
        v["lastStep"] = step;
    }
    Ok(())
}

fn why_json(why: &Why, role: &str) -> Value {
    let mut v = serde_json::to_value(why).unwrap_or(Value::Null);
    v["text"] = json!(why.summary(role));
    v
}

/// Adds `why`, `durationMs` and `failedAttempts` (the attempts that failed
/// before it, with their exit status) to every step of `thread steps`.
pub fn add_to_steps(
    ctx: &Ctx,
    id: ThreadId,
    view: &ThreadView,
    v: &mut Value,
) -> Result<(), CliError> {
    let first_why = view.steps.len().saturating_sub(WHY_STEPS);
    let whys = why_from(&view.workflow, &view.context(), first_why);
    let timings = running::timings(&ctx.root, id);
    let mut failed: HashMap<Hash, Vec<Value>> = HashMap::new();
    for (hash, r) in crate::engine::retry::attempts(ctx, id, 200)? {
        failed.entry(r.head).or_default().push(json!({
            "hash": hash,
            "attempt": r.attempt,
            "agent": r.agent,
            "reason": r.reason,
            "exitStatus": r.exit_code,
            "durationMs": r.duration_ms,
        }));
    }
    let Some(entries) = v["steps"].as_array_mut() else {
        return Ok(());
    };
    // entries[0] is the StartNode; entries[i + 1] is view.steps[i].
    for (i, s) in view.steps.iter().enumerate() {
        let Some(entry) = entries.get_mut(i + 1) else {
            break;
        };
        if let Some(why) = i.checked_sub(first_why).and_then(|k| whys.get(k)) {
            entry["why"] = why_json(why, &s.payload.record.role);
        }
        if let Some(t) = timings.get(&s.hash) {
            entry["durationMs"] = json!(t.duration_ms);
        }
        let before = if i == 0 {
            view.start_hash
        } else {
            view.steps[i - 1].hash
        };
        if let Some(mut f) = failed.remove(&before) {
            f.reverse();
            entry["failedAttempts"] = json!(f);
        }
    }
    Ok(())
}

/// The Markdown lines `thread read` adds to each step: why it ran, its
/// edge prompt, and how long it took.
///
/// Every step that can fit in `quota` characters gets its note (a step's
/// block is at least [`MIN_STEP_BLOCK`] characters), so every step `thread
/// read` shows is explained; at least the newest [`WHY_STEPS`] are.
pub fn read_notes(
    ctx: &Ctx,
    id: ThreadId,
    view: &ThreadView,
    quota: usize,
    before: Option<Hash>,
) -> HashMap<Hash, String> {
    // The page ends before `before` (`--before`), else at the newest step.
    let end = before
        .and_then(|b| view.steps.iter().position(|s| s.hash == b))
        .unwrap_or(view.steps.len());
    let shown = WHY_STEPS.max(quota / MIN_STEP_BLOCK + 1);
    let first_why = end.saturating_sub(shown);
    let mut context = view.context();
    context.steps.truncate(end);
    let whys = why_from(&view.workflow, &context, first_why);
    let timings = running::timings(&ctx.root, id);
    // The attempts that failed before each step, by the node they started
    // from; best effort, like the timings (the page is still worth reading).
    let mut failed: HashMap<Hash, Vec<(Hash, AttemptRecord)>> = HashMap::new();
    for (hash, r) in crate::engine::retry::attempts(ctx, id, ATTEMPTS_READ).unwrap_or_default() {
        failed.entry(r.head).or_default().push((hash, r));
    }
    let mut out = HashMap::new();
    for (i, (s, why)) in view.steps[first_why..end].iter().zip(&whys).enumerate() {
        let at = first_why + i;
        let from = if at == 0 {
            view.start_hash
        } else {
            view.steps[at - 1].hash
        };
        let mut text = String::new();
        if let Some(list) = failed.get(&from) {
            // Oldest first, as they happened.
            for (hash, r) in list.iter().rev() {
                text.push_str(&format!(
                    "**Failed before it:** attempt {} · {} {} ({} ms) · `{hash}`\n\n",
                    r.attempt, r.agent, r.reason, r.duration_ms
                ));
            }
        }
        text.push_str(&format!("**Why:** {}", why.summary(&s.payload.record.role)));
        if let Some(t) = timings.get(&s.hash) {
            text.push_str(&format!(
                " · took {:.1} s",
                Duration::from_millis(t.duration_ms).as_secs_f64()
            ));
        }
        text.push('\n');
        if let Some(p) = &why.prompt {
            text.push_str(&format!(
                "\n> **Edge prompt:** {}\n",
                p.replace('\n', "\n> ")
            ));
        }
        if at + 1 == view.steps.len()
            && end == view.steps.len()
            && let Some(then) = ending(view)
        {
            text.push_str(&format!("\n**Then:** {then}\n"));
        }
        out.insert(s.hash, text);
    }
    out
}

/// Attempts `thread read` looks at to place failures beside their steps.
const ATTEMPTS_READ: usize = 200;

/// How a thread goes on from its head when that is `$END`: the transition
/// that ended it ("reviewer → $END: transition #2, unconditional"), the
/// same words as `why`. `None` while the thread has a role to run.
fn ending(view: &ThreadView) -> Option<String> {
    let context = view.context();
    let explained = uwf_moderator::explain(&view.workflow, &context);
    let taken = explained.transitions.iter().find(|t| t.taken)?;
    if taken.role != uwf_protocol::END {
        return None;
    }
    let how = match (&taken.condition, &taken.value) {
        (Some(c), Some(v)) => format!("condition `{c}` = {v}"),
        (Some(c), None) => format!("condition `{c}`"),
        (None, _) => "unconditional".to_string(),
    };
    Some(format!(
        "{} → $END: transition #{}, {how}; the thread is done",
        explained.from, taken.transition
    ))
}

/// `thread watch`: prints what happens to thread `id` as it happens (a
/// step starts, lands, fails, waits), until the thread is archived or
/// uwf is interrupted.
pub fn watch(ctx: &Ctx, id: ThreadId) -> Result<(), CliError> {
    let mut last_head = None;
    let mut last_marker: Option<Marker> = None;
    let mut last_state = String::new();
    let mut seen_attempt = crate::engine::retry::attempts(ctx, id, 1)?
        .first()
        .map(|(h, _)| *h);
    loop {
        let status = engine::status(ctx, id)?;
        let (head, archived) = match &status {
            Status::Active { head } => (*head, None),
            Status::Archived(e) => (e.head, Some(e.reason.clone().unwrap_or_default())),
        };
        if last_head != Some(head) {
            if last_head.is_some() || archived.is_none() {
                for text in describe_landed(ctx, id, last_head, head)? {
                    line(&text);
                }
            }
            last_head = Some(head);
        }
        let marker = running::live_shared(&ctx.root, ctx.state(), id);
        if marker != last_marker {
            if let Some(m) = &marker {
                line(&format!(
                    "{}: {} started ({}) on {}, pid {}; stderr: {}",
                    now_text(),
                    m.role,
                    m.agent,
                    m.host,
                    m.pid,
                    m.log.display()
                ));
            }
            last_marker = marker;
        }
        let newest = crate::engine::retry::attempts(ctx, id, 1)?
            .into_iter()
            .next();
        if let Some((hash, r)) = newest
            && seen_attempt != Some(hash)
        {
            line(&format!(
                "{}: {} failed (attempt {}): {}",
                now_text(),
                r.role,
                r.attempt,
                r.reason
            ));
            seen_attempt = Some(hash);
        }
        if let Some(reason) = archived {
            line(&format!(
                "{}: thread {id} {}",
                now_text(),
                if reason.is_empty() { "done" } else { &reason }
            ));
            return Ok(());
        }
        let state = active_state(ctx, id, head)?;
        if state == "waiting" && last_state != "waiting" {
            line(&format!(
                "{}: waits for a person (`uwf thread answer {id}`)",
                now_text()
            ));
        }
        last_state = state.to_string();
        if crate::engine::interrupted() || crate::output::reader_gone() {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// The lines for the steps that landed since `seen` (the head printed
/// last), oldest first: several steps can land between two polls, and each
/// gets its line. Without `seen` (the first look), only the head is
/// described: the thread's start, or its newest step.
pub fn describe_landed(
    ctx: &Ctx,
    id: ThreadId,
    seen: Option<Hash>,
    head: Hash,
) -> Result<Vec<String>, CliError> {
    let view = uwf_moderator::thread::load(ctx.cas(), head)?;
    if view.steps.is_empty() {
        return Ok(vec![format!(
            "{}: thread {id} · {} · {}",
            now_text(),
            view.workflow.name,
            shorten(&view.start.prompt, 60)
        )]);
    }
    let newest = view.steps.len() - 1;
    // A head moves forward along its own chain; a `seen` that is not on it
    // (never expected) describes only the newest step.
    let first = match seen {
        Some(s) if s == view.start_hash => 0,
        Some(s) => view
            .steps
            .iter()
            .position(|step| step.hash == s)
            .map_or(newest, |i| i + 1),
        None => newest,
    };
    let whys = why_from(&view.workflow, &view.context(), first);
    let timings = running::timings(&ctx.root, id);
    let mut out = Vec::new();
    for (i, step) in view.steps.iter().enumerate().skip(first) {
        let role = &step.payload.record.role;
        let mut text = format!(
            "{}: step {} {role} landed ({})",
            now_text(),
            i + 1,
            step.hash
        );
        if let Some(t) = timings.get(&step.hash) {
            text.push_str(&format!(" in {:.1} s", t.duration_ms as f64 / 1000.0));
        }
        if let Some(w) = whys.get(i - first) {
            text.push_str(&format!(" · {}", w.summary(role)));
        }
        out.push(text);
    }
    Ok(out)
}

fn now_text() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Prints one line on stdout at once; a reader that went away is ignored.
fn line(text: &str) {
    let _ = crate::output::print_text(text);
}

/// `thread log [-f]`: the stderr of thread `id`'s agents; with `follow`,
/// then what they write, until the thread is archived or uwf is
/// interrupted.
pub fn log(ctx: &Ctx, id: ThreadId, follow: bool) -> Result<(), CliError> {
    engine::status(ctx, id)?;
    let path = running::log_path(&ctx.root, id);
    // The log is kept by the machine that runs the agent: from another
    // one (a shared database), say where it is instead of showing nothing.
    if let Some(m) = running::live_shared(&ctx.root, ctx.state(), id)
        && m.host != running::host()
    {
        eprintln!(
            "uwf: {} runs on {}; its stderr is logged there, in {} (this machine has only what ran here)",
            m.role,
            m.host,
            m.log.display()
        );
    }
    let mut offset = 0u64;
    loop {
        if let Ok(mut f) = std::fs::File::open(&path) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len > offset && f.seek(SeekFrom::Start(offset)).is_ok() {
                let mut buf = Vec::new();
                if f.read_to_end(&mut buf).is_ok() {
                    // Whole lines only; the rest comes with the next read.
                    let end = if follow {
                        buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
                    } else {
                        buf.len()
                    };
                    if end > 0 {
                        let text = String::from_utf8_lossy(&buf[..end]);
                        crate::output::print_text(&text)?;
                        offset += end as u64;
                    }
                }
            }
        }
        if !follow || crate::engine::interrupted() || crate::output::reader_gone() {
            return Ok(());
        }
        if matches!(engine::status(ctx, id)?, Status::Archived(_))
            && running::live_shared(&ctx.root, ctx.state(), id).is_none()
        {
            // One last read for what the last agent wrote.
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            if len <= offset {
                return Ok(());
            }
            continue;
        }
        std::thread::sleep(POLL);
    }
}
