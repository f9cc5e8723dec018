//! What a running step reports, through a sink the caller provides.

use std::time::Duration;

/// Progress of a step, reported as it happens. Every method has a default
/// that only logs (with `tracing`), so a sink implements what it shows.
pub trait Progress: Send + Sync {
    /// An agent starts working on a role.
    fn started(&self, role: &str, agent: &str) {
        tracing::info!(role, agent, "agent started");
    }

    /// A line the agent wrote on its stderr.
    fn agent_line(&self, line: &str) {
        tracing::debug!(line, "agent");
    }

    /// The attempt failed after `elapsed` (`reason` says how); a retry or
    /// the step's error follows. [`finished`](Self::finished) is not called
    /// for it.
    fn failed(&self, role: &str, elapsed: Duration, reason: &str) {
        tracing::info!(
            role,
            elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            reason,
            "agent failed"
        );
    }

    /// The agent finished and its step passed the checks.
    fn finished(&self, role: &str, elapsed: Duration) {
        tracing::info!(
            role,
            elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            "agent finished"
        );
    }

    /// The step waits for a slot of `workflow` (its `concurrency` is
    /// reached), with `ahead` waiters before it. Called when the wait starts
    /// and whenever `ahead` changes.
    fn waiting(&self, workflow: &str, ahead: usize) {
        tracing::info!(workflow, ahead, "waiting for a slot");
    }

    /// Attempt `n` of `role` failed with `reason`; retry `n` of `max`
    /// follows after `delay`.
    fn retrying(&self, n: u32, max: u32, delay: Duration, role: &str, reason: &str) {
        tracing::warn!(n, max, ?delay, role, reason, "retrying");
    }

    /// A warning about the step that is not an error (a notify hook that
    /// failed, …).
    fn warning(&self, message: &str) {
        tracing::warn!("{message}");
    }
}

/// A sink that only logs.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
