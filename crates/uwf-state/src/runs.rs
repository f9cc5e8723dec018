//! The run queue of `uwf worker`: threads queued to be run to completion,
//! claimed by workers under a lease.
//!
//! A run is one record per thread. It is *queued* (any worker may claim
//! it), *claimed* (a worker holds a lease on it until `leaseUntil`) or
//! *failed* (a worker gave up on it; the error stays visible until the
//! thread is queued again). A claim whose lease ran out counts as queued
//! again: the worker that held it is presumed dead, and the next claimer
//! re-runs the step it was doing.
//!
//! Every claim gets a fresh `claimId`; [`RunQueue::renew`] and
//! [`RunQueue::release`] succeed only while the record still carries it,
//! so a worker that lost its lease (another worker claimed the thread
//! after it expired) learns so as a [`ErrorKind::Conflict`] and never
//! changes the record again.
//!
//! Times are milliseconds since the Unix epoch on the *store's* clock:
//! the filesystem backend uses the clock of the machine it runs on, a SQL
//! backend uses the database server's `now()`, so workers on several
//! machines compare leases against one clock.
//!
//! A SQL backend implements [`claim`](RunQueue::claim) with one
//! transaction: `SELECT … WHERE state = 'queued' OR (state = 'claimed' AND
//! lease_until < now()) ORDER BY queued_at FOR UPDATE SKIP LOCKED LIMIT 1`,
//! then an `UPDATE` setting the holder, a new claim id and `lease_until =
//! now() + ttl`; [`renew`](RunQueue::renew) and
//! [`release`](RunQueue::release) are `UPDATE … WHERE thread = $1 AND
//! claim_id = $2` and report a conflict when no row matched.
//!
//! [`ErrorKind::Conflict`]: crate::ErrorKind::Conflict

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use uwf_protocol::ThreadId;

use crate::state::StateError;

/// What a queued run asks for: the options of `uwf thread run` that apply
/// to every step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRequest {
    /// An agent command line or alias that overrides the configuration for
    /// every role (`--agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Give up (the run fails) after this many steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
    /// Stop each agent after this many milliseconds (`--timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Where a run stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum RunState {
    /// Waiting for a worker.
    Queued,
    /// A worker holds it.
    #[serde(rename_all = "camelCase")]
    Claimed {
        /// The worker (host, pid and a random part).
        worker: String,
        /// This claim's id: renewals and the release must present it.
        claim_id: String,
        /// When the worker claimed it (ms since the Unix epoch).
        claimed_at: u64,
        /// When the lease runs out unless renewed (ms since the Unix epoch).
        lease_until: u64,
    },
    /// A worker gave up on it; it stays until the thread is queued again.
    #[serde(rename_all = "camelCase")]
    Failed {
        /// The worker that gave up.
        worker: String,
        /// Why, in words.
        error: String,
        /// When (ms since the Unix epoch).
        at: u64,
    },
}

/// A thread in the run queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The thread.
    pub thread: ThreadId,
    /// The name of its workflow (what `uwf worker --workflow` filters on).
    pub workflow: String,
    /// The options of the run.
    pub request: RunRequest,
    /// When it was queued (ms since the Unix epoch); claims go oldest first.
    pub queued_at: u64,
    /// How many times a worker claimed it (more than one: it was taken
    /// over, or handed back at a shutdown).
    pub claims: u32,
    /// Where it stands.
    #[serde(flatten)]
    pub state: RunState,
}

impl Run {
    /// Whether a worker may claim it at `now` (queued, or claimed with a
    /// lease that ran out).
    pub fn claimable(&self, now: u64) -> bool {
        match &self.state {
            RunState::Queued => true,
            RunState::Claimed { lease_until, .. } => *lease_until < now,
            RunState::Failed { .. } => false,
        }
    }

    /// Why [`RunQueue::enqueue`] refuses to queue it again at `now`
    /// (`queued`, or which worker holds it); `None` when it failed and may
    /// be queued afresh.
    pub fn busy(&self, now: u64) -> Option<String> {
        match &self.state {
            RunState::Failed { .. } => None,
            RunState::Queued => Some("queued".to_string()),
            RunState::Claimed { worker, .. } => Some(match self.holder(now) {
                Some(_) => format!("claimed by worker {worker}"),
                None => format!("claimed by worker {worker}, lease expired"),
            }),
        }
    }

    /// The worker holding a live lease on it at `now`, if any.
    pub fn holder(&self, now: u64) -> Option<&str> {
        match &self.state {
            RunState::Claimed {
                worker,
                lease_until,
                ..
            } if *lease_until >= now => Some(worker),
            _ => None,
        }
    }
}

/// A claimed run, held by one worker until it is released or its lease
/// is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The run as claimed (its state is [`RunState::Claimed`]).
    pub run: Run,
    /// The worker.
    pub worker: String,
    /// The claim's id.
    pub claim_id: String,
    /// When the lease runs out unless renewed (the store's clock, ms since
    /// the Unix epoch).
    pub lease_until: u64,
}

impl Claim {
    /// The thread.
    pub fn thread(&self) -> ThreadId {
        self.run.thread
    }
}

/// The [`StateError::LeaseLost`] of `claim`, saying what the store holds
/// now instead (`run`: the thread's run as read after the claim was found
/// missing, if there is one). Every backend words it the same way.
pub fn lease_lost(claim: &Claim, run: Option<&Run>) -> StateError {
    let why = match run.map(|r| &r.state) {
        None => "the run is no longer queued".to_string(),
        Some(RunState::Claimed { worker, .. }) => format!("worker {worker} claimed it since"),
        Some(RunState::Queued) => "it was queued again".to_string(),
        Some(RunState::Failed { error, .. }) => format!("it was marked failed: {error}"),
    };
    StateError::LeaseLost {
        thread: claim.thread(),
        worker: claim.worker.clone(),
        why,
    }
}

/// How a worker hands a run back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The run is over: the thread reached `$END`, was killed, or waits for
    /// a person. The record is removed.
    Finished,
    /// The run failed; the message stays visible (`thread show`, `thread
    /// list`) and no worker claims it until it is queued again.
    Failed(String),
    /// The worker stops (a shutdown) before the run is over: back to the
    /// queue, keeping its place.
    Interrupted,
}

/// The run queue, as `uwf thread run --detach` and `uwf worker` use it.
///
/// Implementations must make [`claim`](Self::claim) atomic with respect to
/// every other process using the same store: at most one unexpired claim
/// per thread, ever.
pub trait RunQueue: Send + Sync + fmt::Debug {
    /// Queues active thread `thread` (of the workflow named `workflow`) to
    /// be run to completion. A failed run is queued afresh;
    /// [`StateError::AlreadyQueued`] if it is queued or claimed already,
    /// [`StateError::NotActive`] if the thread is not active.
    fn enqueue(
        &self,
        thread: ThreadId,
        workflow: &str,
        request: RunRequest,
    ) -> Result<Run, StateError>;

    /// Every run in the queue (queued, claimed and failed), oldest first.
    fn runs(&self) -> Result<Vec<Run>, StateError>;

    /// The run of `thread`, if it is in the queue.
    fn run_of(&self, thread: ThreadId) -> Result<Option<Run>, StateError>;

    /// Claims the oldest claimable run (queued, or with an expired lease)
    /// of one of `workflows` (all workflows when empty) for `worker`, with a
    /// lease of `lease`. `None` when there is nothing to claim. Runs of
    /// threads that are no longer active are dropped on the way.
    fn claim(
        &self,
        worker: &str,
        workflows: &[String],
        lease: Duration,
    ) -> Result<Option<Claim>, StateError>;

    /// Extends the lease of `claim` to `lease` from now (updating
    /// `claim.lease_until`). [`StateError::LeaseLost`] (a conflict) if the
    /// run is no longer held by this claim.
    fn renew(&self, claim: &mut Claim, lease: Duration) -> Result<(), StateError>;

    /// Hands the run back as `outcome` says. [`StateError::LeaseLost`] (a
    /// conflict) if the run is no longer held by this claim: nothing changes.
    fn release(&self, claim: &Claim, outcome: RunOutcome) -> Result<(), StateError>;
}
