//! `uwf worker`, `uwf thread run --detach`, and what `thread show` /
//! `thread list` say about queued threads.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};
use uwf_protocol::{Hash, ThreadId};
use uwf_state::runs::{Run, RunQueue, RunRequest, RunState};
use uwf_state::state::now_ms;

use crate::cli::{LogFormat, WorkerArgs};
use crate::engine::worker::{Worker, WorkerEvent, WorkerLog, WorkerOptions, worker_id};
use crate::engine::{self, Ctx};
use crate::error::CliError;

/// The run queue of the store `ctx` opened.
pub fn queue(ctx: &Ctx) -> Result<&dyn RunQueue, CliError> {
    ctx.run_queue().map(|q| q.as_ref()).ok_or_else(|| {
        engine::EngineError::Unsupported {
            store: ctx.state().describe(),
            what: "run queue (uwf worker needs one)",
        }
        .into()
    })
}

/// Runs the worker until SIGINT/SIGTERM, then drains.
pub fn run(ctx: &Ctx, args: &WorkerArgs) -> Result<(), CliError> {
    let queue = queue(ctx)?;
    let mut opts = WorkerOptions::new(worker_id());
    opts.concurrency = usize::from(args.concurrency);
    opts.workflows = args.workflow.clone();
    opts.lease = Duration::from_secs(args.lease);
    opts.grace = Duration::from_secs(args.grace);
    opts.poll = Duration::from_millis(args.poll_ms);
    let log: Arc<dyn WorkerLog> = Arc::new(Lines {
        format: args.log_format,
    });
    Worker::new(ctx, queue, opts, log).run(engine::cancel_token());
    Ok(())
}

/// `thread run --detach`: queues thread `id` (of the workflow whose hash is
/// `workflow`) for a worker.
pub fn detach(
    ctx: &Ctx,
    id: ThreadId,
    workflow: Hash,
    request: RunRequest,
) -> Result<Value, CliError> {
    let head = engine::active_head(ctx, id)?;
    let name = uwf_moderator::thread::load(ctx.cas(), head)?.workflow.name;
    let run = queue(ctx)?.enqueue(id, &name, request)?;
    Ok(json!({
        "workflow": workflow,
        "thread": id,
        "queued": true,
        "run": run_json(&run, now_ms()),
    }))
}

/// A run as `thread show` and `thread list` give it: {state, worker,
/// leaseUntil, claims, error}.
pub fn run_json(run: &Run, now: u64) -> Value {
    let mut v = json!({ "queuedAt": run.queued_at, "claims": run.claims });
    match &run.state {
        RunState::Queued => v["state"] = json!("queued"),
        RunState::Claimed {
            worker,
            lease_until,
            ..
        } => {
            let expired = *lease_until < now;
            v["state"] = json!(if expired { "lease-expired" } else { "claimed" });
            v["worker"] = json!(worker);
            v["leaseUntil"] = json!(lease_until);
        }
        RunState::Failed { worker, error, at } => {
            v["state"] = json!("failed");
            v["worker"] = json!(worker);
            v["error"] = json!(error);
            v["failedAt"] = json!(at);
        }
    }
    v
}

/// Adds `run` to `thread show`'s answer when the thread is in the queue.
pub fn add_to_show(ctx: &Ctx, id: ThreadId, v: &mut Value) -> Result<(), CliError> {
    // A store without a run queue has nothing queued.
    let Some(queue) = ctx.run_queue() else {
        return Ok(());
    };
    if let Some(run) = queue.run_of(id)?
        && v["done"] != true
    {
        let run = run_json(&run, now_ms());
        refine_state(v, &run);
        v["run"] = run;
    }
    Ok(())
}

/// Adds `run` (and `worker`, when one holds it) to `thread list` rows of
/// threads in the queue.
pub fn add_to_list(ctx: &Ctx, rows: &mut [Value]) -> Result<(), CliError> {
    let Some(queue) = ctx.run_queue() else {
        return Ok(());
    };
    let runs = queue.runs()?;
    if runs.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    let by_thread: std::collections::HashMap<ThreadId, &Run> =
        runs.iter().map(|r| (r.thread, r)).collect();
    for row in rows.iter_mut() {
        let Some(run) = row["thread"]
            .as_str()
            .and_then(|t| t.parse::<ThreadId>().ok())
            .and_then(|t| by_thread.get(&t))
        else {
            continue;
        };
        if row["done"].as_bool() == Some(true) {
            continue;
        }
        let run = run_json(run, now);
        refine_state(row, &run);
        if let Some(w) = run.get("worker").filter(|_| run["state"] == "claimed") {
            row["worker"] = w.clone();
        }
        row["run"] = run;
    }
    Ok(())
}

/// An `idle` thread in the queue is `queued`, `claimed`, `lease-expired`
/// or `failed`, as its run says.
fn refine_state(v: &mut Value, run: &Value) {
    if v["state"] == "idle" {
        v["state"] = run["state"].clone();
    }
}

/// Event lines on stderr.
struct Lines {
    format: LogFormat,
}

impl WorkerLog for Lines {
    fn event(&self, e: &WorkerEvent<'_>) {
        let time = humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(now_ms()));
        let line = match self.format {
            LogFormat::Json => {
                let mut v = json!({
                    "time": time.to_string(),
                    "worker": e.worker,
                    "event": e.event.name(),
                });
                if let Some(t) = e.thread {
                    v["thread"] = json!(t);
                }
                if let Some(r) = e.role {
                    v["role"] = json!(r);
                }
                if let Some(d) = e.duration {
                    v["durationMs"] = json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                }
                if let Some(d) = e.detail {
                    v["detail"] = json!(d);
                }
                v.to_string()
            }
            LogFormat::Text => {
                let mut s = format!("{time} {} {}", e.worker, e.event.name());
                if let Some(t) = e.thread {
                    s.push_str(&format!(" thread={t}"));
                }
                if let Some(r) = e.role {
                    s.push_str(&format!(" role={r}"));
                }
                if let Some(d) = e.duration {
                    s.push_str(&format!(" duration={:.1}s", d.as_secs_f64()));
                }
                if let Some(d) = e.detail {
                    s.push_str(&format!(" — {d}"));
                }
                s
            }
        };
        eprintln!("{line}");
    }
}
