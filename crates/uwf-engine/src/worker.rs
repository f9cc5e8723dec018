//! `uwf worker`: a long-running loop that claims queued threads from a
//! [`RunQueue`] and steps them to `$END` through [`step`], heartbeating
//! its lease while an agent runs.
//!
//! [`Worker::run`] runs `concurrency` slots. Each slot claims the oldest
//! claimable run, then steps its thread with the engine's own [`step`]
//! (the moderator, the workflow's slot, the agent, the checks, the
//! compare-and-swap of the head) until the thread ends, waits for a
//! person, fails, or the worker shuts down. Meanwhile a monitor renews the
//! lease every third of its length; when a renewal is refused (another
//! worker holds the run now) or has not succeeded for two thirds of the
//! lease (the store cannot be reached: the lease may run out before the
//! next renewal), the step's [`CancelToken`] is cancelled, the agent is
//! stopped and the worker lets go of the thread without touching it
//! again.
//!
//! Shutdown (the token passed to [`Worker::run`]): no new claims; a running
//! agent may finish for `grace`, then it is stopped; every run that is not
//! over goes back to the queue ([`RunOutcome::Interrupted`]).
//!
//! `uwf thread kill` needs nothing from the worker: a running step polls the
//! thread's head (the kill flag) and stops its agent; the worker then ends
//! the run ([`RunOutcome::Finished`]).
//!
//! See `docs/worker.md` for the guarantee this gives.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use uwf_protocol::{Hash, ThreadId};
use uwf_state::runs::{Claim, RunOutcome, RunQueue};
use uwf_state::{ErrorKind, StateError};

use crate::error::EngineError;
use crate::step::{AgentCall, StepOptions, step};
use crate::{CancelToken, Engine, Progress};

/// How many steps a run may take when its request does not say.
pub const DEFAULT_MAX_STEPS: u64 = 100;

/// How often the lease monitor wakes (renewals are every third of the lease).
const TICK: Duration = Duration::from_millis(100);

/// A worker id: this machine's name, the process id and a short random part
/// (`build-7-12345-k3f9`), unique among the workers sharing a store.
pub fn worker_id() -> String {
    let random = ThreadId::new().to_string();
    let tail = &random[random.len().saturating_sub(4)..];
    format!(
        "{}-{}-{}",
        crate::running::host(),
        std::process::id(),
        tail.to_ascii_lowercase()
    )
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The worker's id (see [`worker_id`]).
    pub id: String,
    /// How many threads it steps at once.
    pub concurrency: usize,
    /// Claim only runs of these workflows (by name); all when empty.
    pub workflows: Vec<String>,
    /// The lease of a claim: renewed every third of it while the worker
    /// lives; another worker takes the thread over once it ran out.
    pub lease: Duration,
    /// How long an idle slot waits before it looks at the queue again.
    pub poll: Duration,
    /// At shutdown, how long running agents may go on before they are stopped.
    pub grace: Duration,
}

impl WorkerOptions {
    /// One slot, every workflow, a 30 s lease, a 1 s poll and a 30 s grace.
    pub fn new(id: impl Into<String>) -> Self {
        WorkerOptions {
            id: id.into(),
            concurrency: 1,
            workflows: Vec::new(),
            lease: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            grace: Duration::from_secs(30),
        }
    }
}

/// What happened, for the worker's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The worker started (no thread).
    WorkerStarted,
    /// Shutdown began: no new claims (no thread).
    Draining,
    /// The worker stopped (no thread).
    WorkerStopped,
    /// A run was claimed.
    Claimed,
    /// An agent started on a role.
    Started,
    /// The agent finished and its StepNode passed the checks.
    Finished,
    /// An attempt failed (a retry or the run's failure follows).
    AttemptFailed,
    /// A failed attempt is retried.
    Retrying,
    /// The step waits for a slot of its workflow (docs/state.md, "Slots").
    SlotWait,
    /// The head moved: the step landed.
    Landed,
    /// The thread reached `$END`: the run is over.
    Done,
    /// A role waits for a person: the run is over until it is queued again.
    Waiting,
    /// The thread was killed: the run is over.
    Killed,
    /// The run failed; its error is recorded in the queue.
    RunFailed,
    /// The run went back to the queue (shutdown, no slot, or another
    /// process runs an agent of the thread).
    HandedBack,
    /// The lease was lost: another worker may run the thread now.
    LeaseLost,
    /// Something went wrong that does not end the run (a renewal or a
    /// claim that failed, a warning of the step).
    Warning,
}

impl Event {
    /// The event's name in logs (`claimed`, `lease-lost`, …).
    pub fn name(self) -> &'static str {
        match self {
            Event::WorkerStarted => "worker-started",
            Event::Draining => "draining",
            Event::WorkerStopped => "worker-stopped",
            Event::Claimed => "claimed",
            Event::Started => "started",
            Event::Finished => "finished",
            Event::AttemptFailed => "attempt-failed",
            Event::Retrying => "retrying",
            Event::SlotWait => "slot-wait",
            Event::Landed => "landed",
            Event::Done => "done",
            Event::Waiting => "waiting",
            Event::Killed => "killed",
            Event::RunFailed => "run-failed",
            Event::HandedBack => "handed-back",
            Event::LeaseLost => "lease-lost",
            Event::Warning => "warning",
        }
    }
}

/// One line of the worker's log.
#[derive(Debug, Clone, Copy)]
pub struct WorkerEvent<'a> {
    /// The worker.
    pub worker: &'a str,
    /// What happened.
    pub event: Event,
    /// The thread, if the event is about one.
    pub thread: Option<ThreadId>,
    /// The role, when known.
    pub role: Option<&'a str>,
    /// How long it took (an agent run, a whole run).
    pub duration: Option<Duration>,
    /// More words: the agent, the new head, an error.
    pub detail: Option<&'a str>,
}

/// Where a worker's events go (the `uwf worker` binary prints a line each).
pub trait WorkerLog: Send + Sync {
    /// Something happened.
    fn event(&self, event: &WorkerEvent<'_>);
}

/// What a worker did, counted when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerSummary {
    /// Runs claimed.
    pub claimed: u64,
    /// Steps landed.
    pub steps: u64,
    /// Runs ended (done, killed, waiting for a person).
    pub finished: u64,
    /// Runs that failed.
    pub failed: u64,
    /// Runs handed back to the queue.
    pub handed_back: u64,
    /// Leases lost.
    pub lost: u64,
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    steps: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    handed_back: AtomicU64,
    lost: AtomicU64,
}

/// An in-process agent a worker can share between its slots (see
/// [`Worker::with_in_process_agent`]).
pub type SharedInProcessAgent<'a> = dyn Fn(&AgentCall<'_>) -> Result<Hash, String> + Sync + 'a;

/// A worker over an engine and a run queue.
pub struct Worker<'e> {
    engine: &'e Engine,
    queue: &'e dyn RunQueue,
    opts: WorkerOptions,
    log: Arc<dyn WorkerLog>,
    counters: Counters,
    in_process: Option<&'e SharedInProcessAgent<'e>>,
}

impl<'e> Worker<'e> {
    /// A worker stepping threads of `engine` claimed from `queue` (the same
    /// store), logging to `log`.
    pub fn new(
        engine: &'e Engine,
        queue: &'e dyn RunQueue,
        opts: WorkerOptions,
        log: Arc<dyn WorkerLog>,
    ) -> Self {
        Worker {
            engine,
            queue,
            opts,
            log,
            counters: Counters::default(),
            in_process: None,
        }
    }

    /// Runs every role of every thread it claims with `agent`, in this
    /// process ([`StepOptions::in_process`]), instead of an agent command:
    /// for tests and programs that embed the engine. The `agent` of a
    /// run's request is then ignored. An in-process agent cannot be
    /// stopped: when the lease is lost, the worker lets go of the thread at
    /// once and the call runs on until it returns, but nothing it returns
    /// is applied (the step was cancelled).
    pub fn with_in_process_agent(mut self, agent: &'e SharedInProcessAgent<'e>) -> Self {
        self.in_process = Some(agent);
        self
    }

    /// The worker's options.
    pub fn options(&self) -> &WorkerOptions {
        &self.opts
    }

    fn emit(&self, event: Event, thread: Option<ThreadId>, detail: Option<&str>) {
        self.log.event(&WorkerEvent {
            worker: &self.opts.id,
            event,
            thread,
            role: None,
            duration: None,
            detail,
        });
    }

    /// Runs until `shutdown` is cancelled, then drains: no new claims,
    /// running agents get [`WorkerOptions::grace`] to finish, the runs that
    /// are not over go back to the queue. Returns what it did.
    pub fn run(&self, shutdown: &CancelToken) -> WorkerSummary {
        let detail = format!(
            "concurrency {}, lease {}, workflows {}",
            self.opts.concurrency.max(1),
            humantime::format_duration(self.opts.lease),
            if self.opts.workflows.is_empty() {
                "all".to_string()
            } else {
                self.opts.workflows.join(",")
            }
        );
        self.emit(Event::WorkerStarted, None, Some(&detail));
        let stopped = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let slots: Vec<_> = (0..self.opts.concurrency.max(1))
                .map(|_| scope.spawn(|| self.slot(shutdown)))
                .collect();
            // Says at once that the drain began (the slots may take the
            // grace period to come back).
            scope.spawn(|| {
                while !shutdown.is_cancelled() && !stopped.load(Ordering::SeqCst) {
                    std::thread::sleep(TICK);
                }
                if shutdown.is_cancelled() {
                    self.emit(Event::Draining, None, None);
                }
            });
            for slot in slots {
                let _ = slot.join();
            }
            stopped.store(true, Ordering::SeqCst);
        });
        let c = &self.counters;
        let summary = WorkerSummary {
            claimed: c.claimed.load(Ordering::SeqCst),
            steps: c.steps.load(Ordering::SeqCst),
            finished: c.finished.load(Ordering::SeqCst),
            failed: c.failed.load(Ordering::SeqCst),
            handed_back: c.handed_back.load(Ordering::SeqCst),
            lost: c.lost.load(Ordering::SeqCst),
        };
        let detail = format!(
            "{} claimed, {} steps, {} finished, {} failed, {} handed back, {} leases lost",
            summary.claimed,
            summary.steps,
            summary.finished,
            summary.failed,
            summary.handed_back,
            summary.lost
        );
        self.emit(Event::WorkerStopped, None, Some(&detail));
        summary
    }

    /// One slot: claim, run, repeat, until shutdown.
    fn slot(&self, shutdown: &CancelToken) {
        while !shutdown.is_cancelled() {
            let claimed = self
                .queue
                .claim(&self.opts.id, &self.opts.workflows, self.opts.lease);
            match claimed {
                Ok(Some(claim)) => {
                    self.counters.claimed.fetch_add(1, Ordering::SeqCst);
                    if !self.run_claim(claim, shutdown) {
                        // Handed back without progress: let others have it first.
                        sleep_unless(shutdown, self.opts.poll);
                    }
                }
                Ok(None) => sleep_unless(shutdown, self.opts.poll),
                Err(e) => {
                    self.emit(Event::Warning, None, Some(&format!("cannot claim: {e}")));
                    sleep_unless(shutdown, self.opts.poll);
                }
            }
        }
    }

    /// Runs a claimed thread until its run is over, the lease is lost or
    /// the worker shuts down. `false` when it was handed back before any
    /// step ran.
    fn run_claim(&self, claim: Claim, shutdown: &CancelToken) -> bool {
        let thread = claim.thread();
        let started = Instant::now();
        self.log.event(&WorkerEvent {
            worker: &self.opts.id,
            event: Event::Claimed,
            thread: Some(thread),
            role: None,
            duration: None,
            detail: Some(&format!("claim {} of the run", claim.run.claims)),
        });
        let request = claim.run.request.clone();
        let step_cancel = CancelToken::new();
        let lease = Lease {
            claim: Mutex::new(claim),
            lost: AtomicBool::new(false),
            over: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
        };
        let step_log = Arc::new(StepLog {
            log: Arc::clone(&self.log),
            worker: self.opts.id.clone(),
            thread,
            role: Mutex::new(None),
        });
        let opts = StepOptions {
            agent: request.agent.as_deref(),
            timeout: request.timeout_ms.map(Duration::from_millis),
            cancel: step_cancel.clone(),
            in_process: self
                .in_process
                .map(|a| -> &crate::step::InProcessAgent<'_> { a }),
            resume: false,
        };
        let max_steps = request.max_steps.unwrap_or(DEFAULT_MAX_STEPS);
        std::thread::scope(|scope| {
            scope.spawn(|| self.monitor(&lease, thread, &step_cancel, shutdown));
            let end = self.steps(thread, &opts, &step_log, max_steps, &lease, shutdown);
            lease.finish();
            let ran = !matches!(end, End::Busy | End::NoSlot(_));
            self.end(&lease, thread, end, started.elapsed());
            ran
        })
    }

    /// Steps `thread` until something ends the run.
    fn steps(
        &self,
        thread: ThreadId,
        opts: &StepOptions<'_>,
        step_log: &Arc<StepLog>,
        max_steps: u64,
        lease: &Lease,
        shutdown: &CancelToken,
    ) -> End {
        let mut steps = 0u64;
        // The head as the run found it, then after each step.
        let mut at = self.engine.state().thread_head(thread).ok().flatten();
        loop {
            if lease.lost.load(Ordering::SeqCst) {
                return End::Lost;
            }
            if shutdown.is_cancelled() {
                return End::Shutdown;
            }
            if steps >= max_steps {
                return End::Failed(format!(
                    "the run took {max_steps} steps and the thread is not done (maxSteps)"
                ));
            }
            if let Some(dir) = self.engine.run_dir() {
                // A worker killed mid-step leaves its agent running: stop
                // it before the step runs again.
                if let Some(pid) = crate::running::stop_orphan(dir, thread) {
                    let detail =
                        format!("stopped agent process {pid}, left running by a uwf that died");
                    self.emit(Event::Warning, Some(thread), Some(&detail));
                }
                if let Some(m) = crate::running::live(dir, thread)
                    && m.host == crate::running::host()
                {
                    tracing::debug!(%thread, pid = m.pid, "an agent of the thread runs elsewhere");
                    return End::Busy;
                }
            }
            let progress: Arc<dyn Progress> = step_log.clone();
            match step(self.engine, thread, opts, &progress) {
                Ok(s) if s.waiting.is_some() => return End::Waiting,
                Ok(s) if s.output.done => {
                    // The step that reaches `$END` lands too (unless the
                    // thread was at its end already when claimed).
                    if at != Some(s.output.head) {
                        self.landed(step_log, s.output.head);
                    }
                    return End::Done(s.output.head);
                }
                Ok(s) => {
                    steps += 1;
                    at = Some(s.output.head);
                    self.landed(step_log, s.output.head);
                }
                Err(_) if lease.lost.load(Ordering::SeqCst) => return End::Lost,
                Err(EngineError::Interrupted) => return End::Shutdown,
                Err(e) if e.is_killed() => return End::Killed,
                // Another process's step ended the thread: the run is over
                // as if this worker had made that step.
                Err(EngineError::FinishedMeanwhile { reason, head, .. }) if reason == "done" => {
                    return End::Done(head);
                }
                Err(EngineError::FinishedMeanwhile { .. }) => return End::Killed,
                Err(e) if e.is_no_slot() => return End::NoSlot(e.to_string()),
                Err(e @ EngineError::HeadMoved { .. }) => {
                    // Someone else moved the thread (a step by hand): go on
                    // from where it is now.
                    self.emit(Event::Warning, Some(thread), Some(&e.to_string()));
                }
                // The store could not be reached (by this worker or by the
                // agent): nothing was applied, and another try will do.
                Err(e) if e.is_unavailable() => return End::Unavailable(self.shown(&e)),
                Err(e) => return End::Failed(self.shown(&e)),
            }
        }
    }

    /// The error as the run queue records it and the log shows it: with
    /// the store's secrets cut out, should any have reached it (what an
    /// agent printed is redacted before that already; this is read only
    /// when a run fails).
    fn shown(&self, e: &EngineError) -> String {
        let text = e.to_string();
        let redactor = self
            .engine
            .redactor()
            .unwrap_or_else(|_| self.engine.redactor_of(&[]));
        redactor.redact(&text).into_owned()
    }

    /// A step of the run moved the head to `head`: counted and logged.
    fn landed(&self, step_log: &StepLog, head: Hash) {
        self.counters.steps.fetch_add(1, Ordering::SeqCst);
        let role = step_log.role();
        self.log.event(&WorkerEvent {
            worker: &self.opts.id,
            event: Event::Landed,
            thread: Some(step_log.thread),
            role: role.as_deref(),
            duration: None,
            detail: Some(&head.to_string()),
        });
    }

    /// Hands the run back as `end` says and logs it.
    fn end(&self, lease: &Lease, thread: ThreadId, end: End, elapsed: Duration) {
        let (event, outcome, detail) = match end {
            End::Lost => {
                self.counters.lost.fetch_add(1, Ordering::SeqCst);
                // Not ours any more: never touch the record again.
                return;
            }
            End::Done(head) => (Event::Done, RunOutcome::Finished, Some(head.to_string())),
            End::Waiting => (Event::Waiting, RunOutcome::Finished, None),
            End::Killed => (Event::Killed, RunOutcome::Finished, None),
            End::Shutdown => (
                Event::HandedBack,
                RunOutcome::Interrupted,
                Some("shutdown".to_string()),
            ),
            End::Busy => (
                Event::HandedBack,
                RunOutcome::Interrupted,
                Some("another process runs an agent of this thread".to_string()),
            ),
            End::NoSlot(e) => (Event::HandedBack, RunOutcome::Interrupted, Some(e)),
            End::Unavailable(e) => (
                Event::HandedBack,
                RunOutcome::Interrupted,
                Some(format!("the store was unavailable: {e}")),
            ),
            End::Failed(e) => (Event::RunFailed, RunOutcome::Failed(e.clone()), Some(e)),
        };
        let counter = match &outcome {
            RunOutcome::Finished => &self.counters.finished,
            RunOutcome::Failed(_) => &self.counters.failed,
            RunOutcome::Interrupted => &self.counters.handed_back,
        };
        let released = {
            let claim = lease.claim.lock().unwrap_or_else(PoisonError::into_inner);
            self.queue.release(&claim, outcome)
        };
        match released {
            Ok(()) => {
                counter.fetch_add(1, Ordering::SeqCst);
                self.log.event(&WorkerEvent {
                    worker: &self.opts.id,
                    event,
                    thread: Some(thread),
                    role: None,
                    duration: Some(elapsed),
                    detail: detail.as_deref(),
                });
            }
            Err(e) if e.kind() == ErrorKind::Conflict => {
                self.counters.lost.fetch_add(1, Ordering::SeqCst);
                self.emit(Event::LeaseLost, Some(thread), Some(&e.to_string()));
            }
            // The claim stays; its lease runs out and another worker (or
            // this one) takes the thread over.
            Err(e) => self.emit(
                Event::Warning,
                Some(thread),
                Some(&format!("cannot release the run: {e}")),
            ),
        }
    }

    /// Renews the lease every third of it while the run goes on, and
    /// watches: stops the step when the lease is lost, when no renewal has
    /// succeeded for two thirds of the lease (a renewal that fails or hangs:
    /// the lease may run out before the next one), or when the shutdown
    /// grace is over.
    fn monitor(
        &self,
        lease: &Lease,
        thread: ThreadId,
        step_cancel: &CancelToken,
        shutdown: &CancelToken,
    ) {
        let every = self.opts.lease / 3;
        let fence = self.opts.lease.saturating_sub(every);
        let base = Instant::now();
        // When the last successful renewal started, in ms after `base`.
        let last_ok = AtomicU64::new(0);
        std::thread::scope(|scope| {
            scope.spawn(|| self.renew_loop(lease, thread, step_cancel, every, base, &last_ok));
            let mut shutdown_at: Option<Instant> = None;
            while !lease.over.load(Ordering::SeqCst) {
                lease.tick();
                if shutdown.is_cancelled() {
                    let at = *shutdown_at.get_or_insert_with(Instant::now);
                    if at.elapsed() >= self.opts.grace && !step_cancel.is_cancelled() {
                        step_cancel.cancel();
                    }
                }
                let since = base
                    .elapsed()
                    .saturating_sub(Duration::from_millis(last_ok.load(Ordering::SeqCst)));
                if since >= fence && !lease.over.load(Ordering::SeqCst) {
                    let why = format!(
                        "no renewal of the lease succeeded for {}; the agent is stopped before the lease can run out",
                        humantime::format_duration(Duration::from_secs(since.as_secs()))
                    );
                    self.lose(lease, thread, step_cancel, &why);
                    return;
                }
            }
        });
    }

    /// Renews the lease every `every` until the run is over or the lease
    /// is lost.
    fn renew_loop(
        &self,
        lease: &Lease,
        thread: ThreadId,
        step_cancel: &CancelToken,
        every: Duration,
        base: Instant,
        last_ok: &AtomicU64,
    ) {
        let mut last_try = Instant::now();
        while !lease.over.load(Ordering::SeqCst) && !lease.lost.load(Ordering::SeqCst) {
            lease.tick();
            if last_try.elapsed() < every {
                continue;
            }
            last_try = Instant::now();
            let tried = u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX);
            let renewed = {
                let mut claim = lease.claim.lock().unwrap_or_else(PoisonError::into_inner);
                if lease.over.load(Ordering::SeqCst) {
                    return;
                }
                self.queue.renew(&mut claim, self.opts.lease)
            };
            match renewed {
                Ok(()) => last_ok.store(tried, Ordering::SeqCst),
                Err(e) if is_lost(&e) => {
                    self.lose(lease, thread, step_cancel, &e.to_string());
                    return;
                }
                Err(e) => self.emit(
                    Event::Warning,
                    Some(thread),
                    Some(&format!("cannot renew the lease: {e}")),
                ),
            }
        }
    }

    /// The lease is gone (once): the step is cancelled and the run left alone.
    fn lose(&self, lease: &Lease, thread: ThreadId, step_cancel: &CancelToken, why: &str) {
        if lease.lost.swap(true, Ordering::SeqCst) {
            return;
        }
        step_cancel.cancel();
        self.emit(Event::LeaseLost, Some(thread), Some(why));
    }
}

fn is_lost(e: &StateError) -> bool {
    e.kind() == ErrorKind::Conflict
}

/// The claim a slot holds, shared with its lease monitor.
struct Lease {
    claim: Mutex<Claim>,
    lost: AtomicBool,
    over: AtomicBool,
    /// Wakes the lease threads when the run is over, so a finished run
    /// does not wait out their tick before the slot takes the next one.
    wake: (Mutex<()>, Condvar),
}

impl Lease {
    /// The run is over: the lease threads stop now.
    fn finish(&self) {
        self.over.store(true, Ordering::SeqCst);
        let _held = self.wake.0.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.1.notify_all();
    }

    /// Waits one tick, or less if the run ends meanwhile.
    fn tick(&self) {
        let held = self.wake.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked under the lock `finish` notifies under: no wake-up is lost.
        if self.over.load(Ordering::SeqCst) {
            return;
        }
        let _ = self
            .wake
            .1
            .wait_timeout(held, TICK)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// Why a run's steps stopped.
enum End {
    Done(Hash),
    Waiting,
    Killed,
    Lost,
    Shutdown,
    Busy,
    NoSlot(String),
    Unavailable(String),
    Failed(String),
}

/// Sleeps `d`, waking early at shutdown.
fn sleep_unless(shutdown: &CancelToken, d: Duration) {
    let until = Instant::now() + d;
    while !shutdown.is_cancelled() {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep(TICK.min(until - now));
    }
}

/// The step's progress, as worker events.
struct StepLog {
    log: Arc<dyn WorkerLog>,
    worker: String,
    thread: ThreadId,
    /// The role of the agent that ran last.
    role: Mutex<Option<String>>,
}

impl StepLog {
    fn role(&self) -> Option<String> {
        self.role
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn emit(
        &self,
        event: Event,
        role: Option<&str>,
        duration: Option<Duration>,
        detail: Option<&str>,
    ) {
        self.log.event(&WorkerEvent {
            worker: &self.worker,
            event,
            thread: Some(self.thread),
            role,
            duration,
            detail,
        });
    }
}

impl Progress for StepLog {
    fn started(&self, role: &str, agent: &str) {
        *self.role.lock().unwrap_or_else(PoisonError::into_inner) = Some(role.to_string());
        self.emit(Event::Started, Some(role), None, Some(agent));
    }

    fn agent_line(&self, _line: &str) {
        // The agent's stderr goes to the thread's log (`uwf thread log`).
    }

    fn failed(&self, role: &str, elapsed: Duration, reason: &str) {
        self.emit(
            Event::AttemptFailed,
            Some(role),
            Some(elapsed),
            Some(reason),
        );
    }

    fn finished(&self, role: &str, elapsed: Duration) {
        self.emit(Event::Finished, Some(role), Some(elapsed), None);
    }

    fn waiting(&self, workflow: &str, ahead: usize) {
        let detail = format!("workflow {workflow}, {ahead} ahead");
        self.emit(Event::SlotWait, None, None, Some(&detail));
    }

    fn retrying(&self, n: u32, max: u32, delay: Duration, role: &str, reason: &str) {
        let detail = format!(
            "retry {n} of {max} after {}: {reason}",
            humantime::format_duration(delay)
        );
        self.emit(Event::Retrying, Some(role), None, Some(&detail));
    }

    fn warning(&self, message: &str) {
        self.emit(Event::Warning, None, None, Some(message));
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use uwf_state::FsState;
    use uwf_state::runs::{Run, RunRequest};

    use super::*;

    const WORKFLOW: &str = r#"
name: count
description: counts
roles:
  counter:
    description: adds one
    systemPrompt: add one
    outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
graph:
  $START: [ { role: counter, condition: null } ]
  counter: [ { role: $END, condition: null } ]
"#;

    /// The filesystem queue, except that renewals fail with `error`.
    #[derive(Debug)]
    struct Flaky {
        inner: FsState,
        error: fn() -> StateError,
    }

    impl RunQueue for Flaky {
        fn enqueue(&self, t: ThreadId, w: &str, r: RunRequest) -> Result<Run, StateError> {
            self.inner.enqueue(t, w, r)
        }
        fn runs(&self) -> Result<Vec<Run>, StateError> {
            self.inner.runs()
        }
        fn run_of(&self, t: ThreadId) -> Result<Option<Run>, StateError> {
            self.inner.run_of(t)
        }
        fn claim(&self, w: &str, f: &[String], l: Duration) -> Result<Option<Claim>, StateError> {
            self.inner.claim(w, f, l)
        }
        fn renew(&self, _: &mut Claim, _: Duration) -> Result<(), StateError> {
            Err((self.error)())
        }
        fn release(&self, c: &Claim, o: RunOutcome) -> Result<(), StateError> {
            self.inner.release(c, o)
        }
    }

    #[derive(Default)]
    struct Collect(Mutex<Vec<(Event, String)>>);

    impl WorkerLog for Collect {
        fn event(&self, e: &WorkerEvent<'_>) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((e.event, e.detail.unwrap_or_default().to_string()));
        }
    }

    impl Collect {
        fn find(&self, event: Event) -> Option<String> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .find(|(e, _)| *e == event)
                .map(|(_, d)| d.clone())
        }
    }

    /// Runs a worker over a thread whose agent sleeps, with renewals
    /// failing as `error` says, until it reports a lost lease; returns
    /// what it said.
    fn lost_with(error: fn() -> StateError) -> (String, WorkerSummary) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root: PathBuf = dir.path().join("root");
        let engine = Engine::open(&root).unwrap_or_else(|e| panic!("{e}"));
        let def = uwf_moderator::definition::parse_yaml(WORKFLOW, "count.yaml")
            .unwrap_or_else(|e| panic!("{e}"));
        let wf = uwf_moderator::definition::register(engine.cas(), &def)
            .unwrap_or_else(|e| panic!("{e}"));
        let started =
            crate::start(&engine, wf.hash, "count", None).unwrap_or_else(|e| panic!("{e}"));
        let queue = Flaky {
            inner: FsState::new(&root),
            error,
        };
        let request = RunRequest {
            agent: Some("sh -c 'sleep 60' agent".into()),
            ..RunRequest::default()
        };
        queue
            .enqueue(started.thread, "count", request)
            .unwrap_or_else(|e| panic!("{e}"));
        let log = Arc::new(Collect::default());
        let mut opts = WorkerOptions::new("test-worker");
        opts.lease = Duration::from_millis(900);
        opts.poll = Duration::from_millis(50);
        opts.grace = Duration::from_millis(0);
        let shutdown = CancelToken::new();
        let worker = Worker::new(&engine, &queue, opts, log.clone());
        let summary = std::thread::scope(|scope| {
            let running = scope.spawn(|| worker.run(&shutdown));
            let until = Instant::now() + Duration::from_secs(60);
            while log.find(Event::LeaseLost).is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            shutdown.cancel();
            running
                .join()
                .unwrap_or_else(|_| panic!("the worker panicked"))
        });
        let why = log
            .find(Event::LeaseLost)
            .unwrap_or_else(|| panic!("no lease-lost event"));
        // The agent never finished: nothing landed, the thread is where it was.
        assert_eq!(summary.steps, 0);
        assert_eq!(
            engine
                .state()
                .thread_head(started.thread)
                .unwrap_or_default(),
            Some(started.head)
        );
        (why, summary)
    }

    #[test]
    fn a_refused_renewal_stops_the_agent_and_lets_the_run_go() {
        let (why, summary) = lost_with(|| StateError::LeaseLost {
            thread: uwf_protocol::fixtures::thread("T"),
            worker: "test-worker".into(),
            why: "worker other claimed it since".into(),
        });
        assert!(why.contains("worker other claimed it since"), "{why}");
        assert!(summary.lost >= 1, "{summary:?}");
    }

    #[test]
    fn renewals_that_keep_failing_fence_the_agent_before_the_lease_runs_out() {
        let (why, summary) = lost_with(|| StateError::Io {
            path: "store".into(),
            source: std::io::Error::other("the network is down"),
        });
        assert!(why.contains("no renewal of the lease succeeded"), "{why}");
        assert!(summary.lost >= 1, "{summary:?}");
    }

    #[test]
    fn worker_ids_name_the_host_and_the_process() {
        let id = worker_id();
        assert!(id.starts_with(&crate::running::host()), "{id}");
        assert!(id.contains(&format!("-{}-", std::process::id())), "{id}");
        assert_ne!(id, worker_id());
    }
}
