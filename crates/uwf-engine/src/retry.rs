//! Retries of a step's agent (config.yaml `retries`; see
//! [`uwf_state::policy`]) and the records of failed attempts.
//!
//! Retried: an agent that exits non-zero, is killed by a signal, times out,
//! prints no hash (or not a hash), or whose StepNode fails the checks
//! before the head moves. Not retried (the step stops at once): a kill of
//! the thread, a moved head, an interrupt, an agent that cannot be started,
//! no slot. Each failed attempt is stored as an `AttemptRecord` node and
//! linked from `attempts.yaml` ([`uwf_state::side`]), before any retry.
//! Between attempts the step sleeps the policy's backoff, watching for an
//! interrupt and for the kill flag.

use std::time::{Duration, Instant};

use uwf_protocol::{AttemptRecord, Hash, ThreadId, attempt_record_schema};
use uwf_state::policy::RetryPolicy;

use crate::Engine;
use crate::error::EngineError;
use crate::step::{self as engine, Attempt, Failed, Tried};

/// How often the backoff checks for an interrupt and the kill flag.
const POLL: Duration = Duration::from_millis(100);

/// Runs attempts until one lands, waits for a child, or the policy gives
/// up (then the last failure is the error).
pub fn run(a: &Attempt<'_>, policy: &RetryPolicy) -> Result<Tried, EngineError> {
    let mut n: u32 = 1;
    loop {
        let failed = match engine::attempt(a)? {
            Tried::Failed(f) => f,
            other => return Ok(other),
        };
        if let Err(e) = record(a, n, &failed) {
            // Losing the record must not hide the agent's own failure.
            tracing::warn!("cannot record the failed attempt: {e}");
        }
        if n > policy.max {
            let made = (policy.max > 0).then_some(n);
            return Err(failed.into_error(&a.agent.label, a.role, made));
        }
        let delay = policy.delay(n);
        a.progress
            .retrying(n, policy.max, delay, a.role, &failed.reason);
        backoff(a, delay)?;
        n += 1;
    }
}

/// Sleeps `delay`, stopping early with the step's error on an interrupt
/// or when the thread is killed or moves on.
fn backoff(a: &Attempt<'_>, delay: Duration) -> Result<(), EngineError> {
    let until = Instant::now() + delay;
    loop {
        if a.cancel.is_cancelled() {
            return Err(EngineError::Interrupted);
        }
        if let Some(e) = engine::moved(a.ctx, a.id, a.head, false)? {
            return Err(e);
        }
        let now = Instant::now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep(POLL.min(until - now));
    }
}

/// Stores attempt `n`'s record and makes it the thread's newest.
fn record(a: &Attempt<'_>, n: u32, f: &Failed) -> Result<Hash, EngineError> {
    let cas = &a.ctx.cas;
    let schema = cas.put_schema(attempt_record_schema())?.hash;
    let mut failure: Option<EngineError> = None;
    let write = |prev: Option<Hash>| -> Result<Hash, EngineError> {
        let record = AttemptRecord {
            thread: a.id,
            head: a.head,
            prev,
            role: a.role.to_string(),
            attempt: n,
            agent: a.agent.label.clone(),
            kind: f.kind.to_string(),
            reason: f.reason.clone(),
            exit_code: f.exit_code,
            stderr_tail: f.stderr_tail.join("\n"),
            duration_ms: u64::try_from(f.elapsed.as_millis()).unwrap_or(u64::MAX),
            started_at: f.started_at,
        };
        Ok(cas.put_value(schema, &record)?.hash)
    };
    let written = a.ctx.state.record_attempt(a.id, &mut |prev| {
        write(prev).map_err(|e| {
            // The state backend only carries its own errors; keep ours.
            let message = e.to_string();
            failure = Some(e);
            uwf_state::StateError::Io {
                path: "attempt record".into(),
                source: std::io::Error::other(message),
            }
        })
    });
    match (written, failure) {
        (_, Some(e)) => Err(e),
        (Ok(hash), None) => Ok(hash),
        (Err(e), None) => Err(e.into()),
    }
}

/// The failed attempts of thread `id`, newest first (at most `limit`).
pub fn attempts(
    ctx: &Engine,
    id: ThreadId,
    limit: usize,
) -> Result<Vec<(Hash, AttemptRecord)>, EngineError> {
    let mut out = Vec::new();
    let mut next = ctx.state.attempt_head(id)?;
    while let Some(hash) = next {
        if out.len() >= limit {
            break;
        }
        // A record already collected by gc ends the list quietly.
        let Some(node) = ctx.cas.try_get(hash)? else {
            break;
        };
        let record: AttemptRecord =
            serde_json::from_value(node.payload).map_err(|e| EngineError::CorruptState {
                what: format!("the attempt records of thread {id}").into(),
                reason: format!("{hash} is not an AttemptRecord: {e}"),
            })?;
        next = record.prev;
        out.push((hash, record));
    }
    Ok(out)
}
