//! One step of a thread: moderator → slot (for a workflow with a
//! concurrency limit) → agent → checks → compare-and-swap of the head.
//! Also the thread lookups the commands share.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uwf_cas::Hash;
use uwf_moderator::thread::{self, LoadedStep, ThreadView};
use uwf_protocol::{
    AgentProtocol, HistoryEntry, StepOutput, ThreadId, WaitingRecord, WorkflowLimits,
};
use uwf_state::policy;
use uwf_state::slots::SlotError;
use uwf_state::state::{ResolvedAgent, StateError};
use uwf_state::{GcEpoch, HeadNotices, NodeRow, SlotHold, ThreadStore};
use uwf_util::redact::Redactor;

use crate::check::CheckError;
use crate::error::{AgentFailure, EngineError};
use crate::spawn::{self, Ending, Spawn};
use crate::{AGENT_ENV, CancelToken, EDGE_PROMPT_ENV, Engine, HEAD_ENV, Progress};

/// Where a thread stands.
pub enum Status {
    /// Active (it has a head).
    Active {
        /// Its head.
        head: Hash,
    },
    /// Archived in history.jsonl.
    Archived(HistoryEntry),
}

/// Parses a thread id as a person typed it (any case, Crockford's aliases).
pub fn thread_id(s: &str) -> Result<ThreadId, EngineError> {
    Ok(s.parse::<ThreadId>()?)
}

/// Looks a thread up; unknown ids are an error.
pub fn status(ctx: &Engine, id: ThreadId) -> Result<Status, EngineError> {
    if let Some(head) = ctx.state.thread_head(id)? {
        return Ok(Status::Active { head });
    }
    match ctx.state.find_archived(id)? {
        Some(entry) => Ok(Status::Archived(entry)),
        None => Err(EngineError::UnknownThread { thread: id }),
    }
}

/// The head of an active thread; archived and unknown threads are errors.
pub fn active_head(ctx: &Engine, id: ThreadId) -> Result<Hash, EngineError> {
    match status(ctx, id)? {
        Status::Active { head } => Ok(head),
        Status::Archived(_) => Err(EngineError::ThreadFinished { thread: id }),
    }
}

/// The head of a thread, active or archived.
pub fn any_head(ctx: &Engine, id: ThreadId) -> Result<Hash, EngineError> {
    match status(ctx, id)? {
        Status::Active { head } => Ok(head),
        Status::Archived(e) => Ok(e.head),
    }
}

/// Options of a step.
#[derive(Clone, Default)]
pub struct StepOptions<'a> {
    /// An agent command line that overrides the configuration for every
    /// role (`--agent`).
    pub agent: Option<&'a str>,
    /// Stop the agent after this long (overrides the configured timeout).
    pub timeout: Option<Duration>,
    /// Cancels the step: its agent is stopped and nothing is applied.
    pub cancel: CancelToken,
    /// Runs every role in this process instead of an agent command (for
    /// tests, and programs that embed the engine): called with the step to
    /// do, it stores the StepNode and returns its hash, or says why it
    /// failed. What it returns is checked like an agent's answer.
    pub in_process: Option<&'a InProcessAgent<'a>>,
    /// Resume a thread that reached `$SUSPEND`: the role is chosen from
    /// `$START` ([`crate::suspend`]); refused if the thread is not suspended.
    pub resume: bool,
}

/// An agent that runs in the engine's process (see
/// [`StepOptions::in_process`]).
pub type InProcessAgent<'a> = dyn Fn(&AgentCall<'_>) -> Result<Hash, String> + 'a;

/// What an in-process agent is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct AgentCall<'a> {
    /// The thread.
    pub thread: ThreadId,
    /// The role the moderator chose.
    pub role: &'a str,
    /// The head the step starts from (the new StepNode's `prev` is its last
    /// step).
    pub head: Hash,
    /// The thread as loaded at that head.
    pub view: &'a ThreadView,
}

impl fmt::Debug for StepOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepOptions")
            .field("agent", &self.agent)
            .field("timeout", &self.timeout)
            .field("cancel", &self.cancel)
            .field("in_process", &self.in_process.is_some())
            .field("resume", &self.resume)
            .finish()
    }
}

/// What a step did.
#[derive(Debug, Clone)]
pub struct Stepped {
    /// The JSON answer.
    pub output: StepOutput,
    /// Set when the step did not run because the role waits for a person
    /// (directly, or through a child thread): the head did not move.
    pub waiting: Option<WaitingRecord>,
}

impl Stepped {
    /// A step that did not run: thread `id` (at `head`) waits as `record` says.
    fn waiting(workflow: Hash, id: ThreadId, head: Hash, record: WaitingRecord) -> Self {
        Stepped {
            output: StepOutput {
                workflow,
                thread: id,
                head,
                done: false,
            },
            waiting: Some(record),
        }
    }
}

/// Runs one cycle of a thread (docs/state.md, "Thread lifecycle").
///
/// If config.yaml limits the workflow's concurrency (docs/state.md, "Slots"), the agent
/// runs only while the step holds one of its slots ([`uwf_state::slots`]):
/// taken after the moderator chose the role, freed when the agent ends.
/// A role bound to a person (`human: true`) runs nothing: the thread is
/// recorded as waiting ([`crate::human`]). A failed agent is retried as
/// config.yaml's `retries` say ([`crate::retry`]).
///
/// A step whose thread stopped being active while it ran fails with
/// [`EngineError::Killed`] only if the thread was killed; if another step
/// finished it, with [`EngineError::FinishedMeanwhile`] ([`settle`]).
pub fn step(
    ctx: &Engine,
    id: ThreadId,
    opts: &StepOptions<'_>,
    progress: &Arc<dyn Progress>,
) -> Result<Stepped, EngineError> {
    step_once(ctx, id, opts, progress).map_err(|e| settle(ctx, id, e))
}

/// [`step`] before [`settle`] tells a kill from a race lost to a step that
/// finished the thread.
fn step_once(
    ctx: &Engine,
    id: ThreadId,
    opts: &StepOptions<'_>,
    progress: &Arc<dyn Progress>,
) -> Result<Stepped, EngineError> {
    // Before anything the new head will reach is stored or checked: the
    // head is installed only if no collection removed it meanwhile
    // (crate::keep).
    // With the configuration: one read on PostgreSQL ([`ThreadStore::step_start`]).
    let started = ctx.state.step_start(id)?;
    let (epoch, head) = (started.epoch, started.head);
    let head_read = Instant::now();
    let head = match head {
        Some(h) => h,
        // Not active: the history says why (finished, or never was).
        None => active_head(ctx, id)?,
    };
    // The thread as the last step of this process left it, if it is still
    // there (`recent`); else loaded, and decided, from the store.
    let (view, decision) = match ctx.recent.take(id, head) {
        Some(kept) if !opts.resume => kept,
        _ => {
            // An in-process agent is handed the view (`AgentCall`), and may
            // read any step of it; a process reads what it needs itself.
            let view = match opts.in_process {
                Some(_) => thread::load(&ctx.cas, head)?,
                None => thread::load_recent(&ctx.cas, head)?,
            };
            let decision = crate::suspend::decide(id, &view, opts.resume)?;
            (view, decision)
        }
    };
    let mut view = view;
    if opts.in_process.is_none()
        && let uwf_moderator::StepsNeeded::Last(n) = view.steps_needed()
    {
        // A thread stepped from its start is loaded whole, and `recent`
        // would keep it whole as it grows: keep what the decisions read.
        view.keep_last(n.max(1));
    }
    let view = view;
    let workflow = view.workflow_hash;
    if crate::suspend::suspends(&decision) {
        let record = crate::suspend::wait(ctx, id, &view, &decision)?;
        return Ok(Stepped::waiting(workflow, id, head, record));
    }
    if decision.is_end() {
        ctx.state
            .archive(id, workflow, Some(head), "done")
            .map_err(|e| conflict_or(e, id))?;
        return Ok(Stepped {
            output: StepOutput {
                workflow,
                thread: id,
                head,
                done: true,
            },
            waiting: None,
        });
    }
    let role = decision.next.clone();
    // Read once, with the head: it gives the agent, the workflow's limits
    // and the policies.
    let config = started.config?;
    let agent = match opts.in_process {
        Some(_) => ResolvedAgent {
            command: String::new(),
            args: Vec::new(),
            label: IN_PROCESS.to_string(),
            source: uwf_state::state::AgentSource::Explicit,
            human: false,
            protocol: AgentProtocol::Uwf,
        },
        None => {
            ctx.state
                .resolve_agent_with(config.as_ref(), opts.agent, &view.workflow.name, &role)?
        }
    };
    if agent.human {
        let ask = crate::human::Ask {
            role: &role,
            edge_prompt: decision.prompt.as_deref(),
            agent: &agent.label,
        };
        let record = crate::human::wait(ctx, id, &view, ask, config.as_ref(), progress.as_ref())?;
        return Ok(Stepped::waiting(workflow, id, head, record));
    }
    let name = &view.workflow.name;
    // Errors name where the configuration lives (not config.yaml on every store).
    let in_config = |e: policy::PolicyError| e.in_config(ctx.state.config_name());
    let policy = policy::retry_policy(config.as_ref(), name, &role).map_err(in_config)?;
    let timeout = match opts.timeout {
        Some(t) => Some(t),
        None => policy::timeout(config.as_ref(), name, &role).map_err(in_config)?,
    };
    let attempt = Attempt {
        ctx,
        id,
        view: &view,
        head,
        role: &role,
        agent: &agent,
        timeout,
        limits: config.as_ref().and_then(|c| c.limits(name)),
        progress,
        cancel: &opts.cancel,
        edge_prompt: decision.prompt.as_deref(),
        in_process: opts.in_process,
        epoch,
        head_seen: std::cell::Cell::new(head_read),
    };
    let (new, loaded, unstored) = match crate::retry::run(&attempt, &policy)? {
        Tried::Landed(new, loaded, unstored) => (new, loaded, unstored),
        Tried::ChildWaiting(record) => return Ok(Stepped::waiting(workflow, id, head, record)),
        // `retry::run` turns the last failure into an error.
        Tried::Failed(f) => return Err(f.into_error(&agent.label, &role, None)),
    };
    Ok(Stepped {
        output: apply_storing(ctx, id, view, &role, new, loaded, Some(epoch), unstored)?,
        waiting: None,
    })
}

/// One attempt of a step: everything the agent run needs.
pub struct Attempt<'a> {
    /// The root.
    pub ctx: &'a Engine,
    /// The thread id.
    pub id: ThreadId,
    /// The thread as loaded at the start of the step.
    pub view: &'a ThreadView,
    /// Its head.
    pub head: Hash,
    /// The role the moderator chose.
    pub role: &'a str,
    /// The agent that runs it.
    pub agent: &'a ResolvedAgent,
    /// Stop the agent after this long.
    pub timeout: Option<Duration>,
    /// The workflow's concurrency limits, if any.
    pub limits: Option<WorkflowLimits>,
    /// Progress callbacks.
    pub progress: &'a Arc<dyn Progress>,
    /// Cancels the attempt.
    pub cancel: &'a CancelToken,
    /// The edge prompt of the moderator's decision (handed to the agent).
    pub edge_prompt: Option<&'a str>,
    /// Runs the role in this process instead of the agent command.
    pub in_process: Option<&'a InProcessAgent<'a>>,
    /// The garbage-collection epoch read when the step began
    /// ([`crate::keep`]).
    pub epoch: GcEpoch,
    /// When the thread was last seen at `head` (read from the store): the
    /// kill flag need not be read again just before an agent starts
    /// unless the step waited since ([`HEAD_FRESH`]).
    pub head_seen: std::cell::Cell<Instant>,
}

/// How long a head read stays as good as a new one before an agent starts.
/// The moderator's decision is all that runs between the step's first read
/// and the agent's start; a wait for a slot or a retry's backoff is longer,
/// and then the head is read again, so that a thread killed meanwhile
/// starts nothing. (A kill after that read is the kill flag's to notice
/// while the agent runs, however fresh the read was.)
pub const HEAD_FRESH: Duration = Duration::from_millis(100);

/// How an attempt ended, when nothing stops the whole step.
pub enum Tried {
    /// The agent wrote a StepNode that passed the checks (the head has not
    /// moved yet); with the nodes the engine made for it and has not stored
    /// yet (a plain program's).
    Landed(Hash, LoadedStep, Unstored),
    /// The agent failed in a way worth retrying.
    Failed(Failed),
    /// The agent (a workflow agent) reported that its child thread waits
    /// for a person; the thread is now recorded as waiting too.
    ChildWaiting(WaitingRecord),
}

/// Nodes of a landed step that the engine made itself and has not stored
/// yet (a plain program's output and StepNode), in the order to store them:
/// [`apply_storing`] stores them with the head's move, in one transaction
/// where the store can ([`uwf_state::Heads::swap_head_storing`]).
#[derive(Default)]
pub struct Unstored(pub(crate) Vec<uwf_cas::Pending>);

/// A failed attempt: what [`crate::retry`] records and reports.
pub struct Failed {
    /// `exit`, `signal`, `timeout`, `no-hash`, `bad-hash` or `check`; for a
    /// plain program also `no-output` or `bad-output`.
    pub kind: &'static str,
    /// The failure in words.
    pub reason: String,
    /// The exit status, if it exited.
    pub exit_code: Option<i32>,
    /// The last lines of its stderr.
    pub stderr_tail: Vec<String>,
    /// How long it ran.
    pub elapsed: Duration,
    /// When it started (ms since the Unix epoch).
    pub started_at: u64,
}

impl Failed {
    /// The error reported when no retry is left; `attempts` adds how many
    /// were made (when there were retries).
    pub fn into_error(self, agent: &str, role: &str, attempts: Option<u32>) -> EngineError {
        let reason = match attempts {
            Some(n) if n > 1 => format!(
                "{} (attempt {n} of {n}; `uwf thread show` lists the failed attempts)",
                self.reason
            ),
            _ => self.reason,
        };
        EngineError::Agent(Box::new(AgentFailure {
            agent: agent.to_string(),
            role: role.to_string(),
            reason,
            stderr_tail: self.stderr_tail.join("\n"),
            unavailable: self.kind == "unavailable",
        }))
    }
}

/// Runs the agent once: slot → kill flag → agent → checks. Errors are what
/// stops the step at once (a kill, a head conflict, an interrupt, an agent
/// that cannot be started, no slot); failures worth a retry are
/// [`Tried::Failed`].
pub fn attempt(a: &Attempt<'_>) -> Result<Tried, EngineError> {
    let (ctx, id, head, role, agent) = (a.ctx, a.id, a.head, a.role, a.agent);
    // A slot of the workflow, held while the agent runs (docs/config.md,
    // "Concurrency limits"; docs/state.md, "Slots").
    let slot = match a.limits {
        Some(limits) => Some(acquire_slot(
            ctx,
            id,
            head,
            &a.view.workflow.name,
            limits,
            a.progress.as_ref(),
            a.cancel,
        )?),
        None => None,
    };
    // The kill flag, checked once more just before the agent starts if the
    // step waited since it last read the head: the thread may have been
    // killed or moved on meanwhile.
    if slot.is_some() || a.head_seen.get().elapsed() >= HEAD_FRESH {
        if let Some(e) = moved(ctx, id, head, false)? {
            return Err(e);
        }
        a.head_seen.set(Instant::now());
    }
    if let Some(run) = a.in_process {
        return attempt_in_process(a, run, slot);
    }

    // A plain program (`protocol: stdio`) is run as configured and told the
    // step on its stdin and in its environment; an agent gets the thread and
    // the role as its last two arguments (docs/agent-protocol.md).
    let stdio = agent.protocol == AgentProtocol::Stdio;
    let mut args = agent.args.clone();
    if !stdio {
        args.push(id.to_string());
        args.push(role.to_string());
    }
    let (mut env, redactor) = agent_env(ctx, &agent.label, head, a.edge_prompt)?;
    let stdin = if stdio {
        env.push(("UWF_THREAD".to_string(), id.to_string().into()));
        env.push((
            "UWF_WORKFLOW".to_string(),
            a.view.workflow.name.clone().into(),
        ));
        env.push(("UWF_ROLE".to_string(), role.into()));
        let doc = crate::stdio::input(id, a.view, role, a.edge_prompt);
        let file = crate::stdio::input_file(&doc).map_err(|source| EngineError::AgentSpawn {
            command: agent.command.clone(),
            source,
        })?;
        Some(file)
    } else {
        None
    };
    // The agent stores its nodes through this engine, which checks them
    // with the schemas it has compiled already, so the agent compiles none;
    // on a networked store it reads through it too, needing no connection
    // of its own (docs/postgres.md, "The store relay"). Without a relay the
    // agent opens the store itself and checks its nodes, as it always could.
    // A plain program does not touch the store: no relay.
    let relay = if ctx.serves_relay && !stdio {
        match uwf_relay::Relay::start_checking(ctx.cas.clone(), Arc::clone(&ctx.state)) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::debug!("no store relay for this agent: {e}");
                None
            }
        }
    } else {
        None
    };
    if let Some(r) = &relay {
        env.push((uwf_relay::RELAY_ENV.to_string(), r.path().into()));
    }
    // Whatever the agent prints passes through it before it is logged,
    // shown or recorded (docs/state.md, "Secrets and file modes").
    let redactor = Arc::new(redactor);
    a.progress.started(role, &agent.label);
    let started_at = uwf_state::state::now_ms();
    let cancel = a.cancel.clone();
    let mut kill_flag = KillFlag::new(ctx.state.as_ref(), id, head);
    // The marker `thread show`/`list`/`watch` read, and the stderr log.
    let running = ctx.run_dir.as_deref().map(|dir| {
        crate::running::Running::start(dir, &ctx.state, id, role, &agent.label, head, started_at)
    });
    let on_start = |pid: u32| {
        if let Some(r) = &running {
            r.agent_started(pid);
        }
    };
    let spec = Spawn {
        command: &agent.command,
        args: &args,
        env,
        timeout: a.timeout,
        on_start: Some(&on_start),
        stdin,
    };
    let log = running.as_ref().map(crate::running::Running::sink);
    let sink = Arc::clone(a.progress);
    let line_redactor = Arc::clone(&redactor);
    // The role's schema is compiled while the agent runs (compiling is most
    // of the check that follows); a failure here shows again in the check.
    // (In `thread run` and a worker it is compiled from the second step on.)
    let schema: Option<Hash> = a
        .view
        .workflow
        .roles
        .get(role)
        .map(|r| r.output_schema)
        .filter(|h| !ctx.cas.is_prepared(*h));
    let finished = std::thread::scope(|scope| {
        if let Some(schema) = schema {
            let cas = &ctx.cas;
            scope.spawn(move || {
                let _ = cas.prepare_validator(schema);
            });
        }
        spawn::run(
            spec,
            // Whole lines (spawn reads stderr line by line), so a secret is
            // never split between two calls.
            move |line| {
                let line = line_redactor.redact(line);
                if let Some(log) = &log {
                    log(&line);
                }
                sink.agent_line(&line);
            },
            &cancel,
            // The kill flag: the thread is no longer active, or its head moved.
            || {
                if let Some(r) = &running {
                    r.share();
                }
                kill_flag.raised()
            },
        )
    })
    .map_err(|source| EngineError::AgentSpawn {
        command: agent.command.clone(),
        source,
    })?;
    // The agent is done: free the slot (and the relay) before checking its
    // work.
    drop(slot);
    drop(relay);
    // The kill flag again, now that the agent returned: a thread killed (or
    // moved on) meanwhile never gets this step, and that is what to report,
    // whatever the agent did (it may have failed because of it). An agent
    // that succeeded needs no read here if its step lands: the head's
    // compare-and-swap fails for a thread killed or moved on, and reports
    // it alike (`settle`); if its answer is refused, `fail` reads it.
    let succeeded = matches!(finished.ending, Ending::Exited { code: Some(0), .. });
    if !succeeded && !matches!(finished.ending, Ending::Interrupted) {
        if let Some(e) = moved(ctx, id, head, true)? {
            return Err(e);
        }
        a.head_seen.set(Instant::now());
    }

    let stderr_tail: Vec<String> = finished
        .stderr_tail
        .iter()
        .map(|l| redactor.redact(l).into_owned())
        .collect();
    let elapsed = finished.elapsed;
    let fail = |kind: &'static str, reason: String, exit_code: Option<i32>| {
        // An agent that exited 0 but whose answer is refused was not asked
        // about the kill flag above: a thread killed (or moved on) meanwhile
        // is still what to report, and no retry may follow.
        if succeeded && let Some(e) = moved(ctx, id, head, true)? {
            return Err(e);
        }
        let reason = redactor.redact(&reason).into_owned();
        a.progress.failed(role, elapsed, &reason);
        Ok(Tried::Failed(Failed {
            kind,
            reason,
            exit_code,
            stderr_tail: stderr_tail.clone(),
            elapsed,
            started_at,
        }))
    };
    let stdout = match finished.ending {
        Ending::Exited {
            code: Some(0),
            stdout,
        } => stdout,
        Ending::Exited { code: Some(c), .. } if stdio => {
            return fail("exit", format!("exited with status {c}"), Some(c));
        }
        Ending::Exited { code: Some(c), .. } => {
            if c == i32::from(crate::human::EXIT_WAITING)
                && let Some(record) =
                    crate::human::child_waits(ctx, id, a.view, role, &agent.label)?
            {
                return Ok(Tried::ChildWaiting(record));
            }
            if c == i32::from(crate::error::EXIT_UNAVAILABLE) {
                return fail(
                    "unavailable",
                    format!("could not reach the store (exit status {c}); nothing was written"),
                    Some(c),
                );
            }
            return fail("exit", format!("exited with status {c}"), Some(c));
        }
        Ending::Exited { code: None, .. } => {
            return fail("signal", "was killed by a signal".into(), None);
        }
        Ending::TimedOut => {
            let t = a
                .timeout
                .map(|t| humantime::format_duration(t).to_string())
                .unwrap_or_default();
            return fail(
                "timeout",
                format!("did not finish within {t} and was stopped"),
                None,
            );
        }
        Ending::Stopped => return Err(interrupted(ctx, id)?),
        Ending::Interrupted => return Err(EngineError::Interrupted),
    };
    let landed = |new: Hash, loaded: LoadedStep, unstored: Unstored| {
        a.progress.finished(role, elapsed);
        if let (Some(r), Some(dir)) = (&running, ctx.run_dir.as_deref()) {
            r.landed(dir, new, elapsed);
        }
        Ok(Tried::Landed(new, loaded, unstored))
    };
    if stdio {
        // The engine makes these nodes itself, from an output it
        // validated: nothing to read back or check again. They are stored
        // with the head's move (`apply_storing`).
        return match crate::stdio::store_step(
            &ctx.cas,
            a.view,
            role,
            &agent.label,
            &stdout,
            &redactor,
        )? {
            Ok((new, loaded, unstored)) => landed(new, loaded, unstored),
            Err(refused) => fail(refused.kind, refused.reason, Some(0)),
        };
    }
    let new = match hash_answer(&stdout, &redactor) {
        Ok(h) => h,
        Err((kind, reason)) => return fail(kind, reason, Some(0)),
    };
    match crate::check::check_step(&ctx.cas, a.view, role, new) {
        Ok(loaded) => landed(new, loaded, Unstored::default()),
        Err(CheckError::Rejected(r)) => match collected(a, new, &r)? {
            Some(e) => Err(e),
            None => fail("check", r.to_string(), Some(0)),
        },
        // The store failing is not the agent's fault: stop, never retry.
        Err(CheckError::Store(e)) => Err(e),
    }
}

/// The StepNode hash an agent printed as the last line of its `stdout`, or
/// the failure's kind and reason.
fn hash_answer(stdout: &str, redactor: &Redactor) -> Result<Hash, (&'static str, String)> {
    let Some(line) = spawn::last_line(stdout) else {
        return Err((
            "no-hash",
            "printed nothing on stdout (expected the new StepNode's hash)".into(),
        ));
    };
    line.parse().map_err(|_| {
        // Redacted before it is quoted: quoting escapes characters, and
        // an escaped secret would no longer be recognised.
        let line = redactor.redact(line);
        (
            "bad-hash",
            format!(
                "printed {:?} on stdout, which is not a CAS hash",
                line.chars().take(80).collect::<String>()
            ),
        )
    })
}

/// A node the agent wrote is missing and a garbage collection ran since the
/// step began: the collection removed it, which is not the agent's fault
/// and not worth a retry of the agent (`docs/state.md`, "Garbage
/// collection"). `None` when the rejection is the agent's.
fn collected(
    a: &Attempt<'_>,
    new: Hash,
    r: &crate::check::Rejection,
) -> Result<Option<EngineError>, EngineError> {
    collected_by_gc(a.ctx, Some(a.epoch), new, r)
}

/// For a StepNode `new` written after reading `epoch` (`None`: not known)
/// and rejected as `r`: [`StateError::NodeGone`] if a node it needs is
/// missing and a garbage collection may have removed it since.
pub(crate) fn collected_by_gc(
    ctx: &Engine,
    epoch: Option<GcEpoch>,
    new: Hash,
    r: &crate::check::Rejection,
) -> Result<Option<EngineError>, EngineError> {
    use crate::check::Rejection;
    let missing = match r {
        Rejection::NotInStore { step } => *step,
        Rejection::OutputMissing { output, .. } => *output,
        Rejection::DetailMissing { detail, .. } => *detail,
        _ => return Ok(None),
    };
    if let Some(e) = epoch
        && e.still_valid(ctx.state.gc_epoch()?)
    {
        return Ok(None);
    }
    Ok(Some(EngineError::State(StateError::NodeGone {
        root: new,
        missing,
    })))
}

/// Longest edge prompt handed to an agent in [`EDGE_PROMPT_ENV`].
const MAX_ENV_PROMPT: usize = 64 * 1024;

/// The label of an in-process agent (what [`Failed`] and progress name).
pub const IN_PROCESS: &str = "in-process";

/// [`attempt`] with an in-process agent: call it, then the same kill-flag
/// check and acceptance check as for a process.
fn attempt_in_process(
    a: &Attempt<'_>,
    run: &InProcessAgent<'_>,
    slot: Option<Box<dyn SlotHold>>,
) -> Result<Tried, EngineError> {
    let (ctx, id, role) = (a.ctx, a.id, a.role);
    a.progress.started(role, &a.agent.label);
    let started_at = uwf_state::state::now_ms();
    let started = Instant::now();
    let answer = run(&AgentCall {
        thread: id,
        role,
        head: a.head,
        view: a.view,
    });
    drop(slot);
    let elapsed = started.elapsed();
    if let Some(e) = moved(ctx, id, a.head, true)? {
        return Err(e);
    }
    // Cancelled while the call ran (it cannot be stopped like a process):
    // nothing of it is applied, as for a stopped agent.
    if a.cancel.is_cancelled() {
        return Err(EngineError::Interrupted);
    }
    let new = match answer {
        Ok(h) => h,
        Err(reason) => {
            let reason = redact_failure(ctx, format!("failed: {reason}"));
            a.progress.failed(role, elapsed, &reason);
            return Ok(Tried::Failed(Failed {
                kind: "exit",
                reason,
                exit_code: None,
                stderr_tail: Vec::new(),
                elapsed,
                started_at,
            }));
        }
    };
    match crate::check::check_step(&ctx.cas, a.view, role, new) {
        Ok(loaded) => {
            a.progress.finished(role, elapsed);
            Ok(Tried::Landed(new, loaded, Unstored::default()))
        }
        Err(CheckError::Rejected(r)) => {
            if let Some(e) = collected(a, new, &r)? {
                return Err(e);
            }
            let reason = redact_failure(ctx, r.to_string());
            a.progress.failed(role, elapsed, &reason);
            Ok(Tried::Failed(Failed {
                kind: "check",
                reason,
                exit_code: None,
                stderr_tail: Vec::new(),
                elapsed,
                started_at,
            }))
        }
        Err(CheckError::Store(e)) => Err(e),
    }
}

/// `reason` with the store's secrets cut out, for a failure record of an
/// in-process agent (read only when one fails; unreadable secrets leave
/// the environment's).
fn redact_failure(ctx: &Engine, reason: String) -> String {
    let redactor = ctx.redactor().unwrap_or_else(|_| ctx.redactor_of(&[]));
    redactor.redact(&reason).into_owned()
}

/// Moves thread `id` from the head `view` was loaded at to `new` (a checked
/// StepNode of `role`, loaded as `loaded`) by compare-and-swap, then asks
/// the moderator whether the thread is done and archives it if so
/// (docs/agent-protocol.md, "What uwf checks").
///
/// `epoch` is the garbage-collection epoch read before `new` and what it
/// reaches were stored (`None`: not known, so they are checked under the
/// store lock). If a collection removed any of them,
/// [`StateError::NodeGone`] and the thread stays where it was.
pub fn apply(
    ctx: &Engine,
    id: ThreadId,
    view: ThreadView,
    role: &str,
    new: Hash,
    loaded: LoadedStep,
    epoch: Option<GcEpoch>,
) -> Result<StepOutput, EngineError> {
    apply_storing(ctx, id, view, role, new, loaded, epoch, Unstored::default())
}

/// [`apply`] for a step whose nodes are not stored yet (`unstored`): they
/// are stored with the head's move, in one transaction where the store
/// can ([`uwf_state::Heads::swap_head_storing`]; PostgreSQL: one commit to
/// wait for where there were two), else first, then the head moves.
#[allow(clippy::too_many_arguments)]
pub fn apply_storing(
    ctx: &Engine,
    id: ThreadId,
    view: ThreadView,
    role: &str,
    new: Hash,
    loaded: LoadedStep,
    epoch: Option<GcEpoch>,
    unstored: Unstored,
) -> Result<StepOutput, EngineError> {
    let head = view.head;
    let workflow = view.workflow_hash;
    debug_assert_eq!(loaded.payload.record.role, role);
    let nodes = unstored.0;
    // Stores encode a payload as its JSON bytes; a node that cannot be
    // encoded is left to `put_pending` to report.
    let payloads: Option<Vec<Vec<u8>>> = nodes
        .iter()
        .map(|p| serde_json::to_vec(&p.node().payload).ok())
        .collect();
    let moved = match payloads {
        Some(payloads) if !nodes.is_empty() => {
            let rows: Vec<NodeRow<'_>> = nodes
                .iter()
                .zip(&payloads)
                .map(|(p, payload)| NodeRow {
                    hash: p.hash(),
                    type_hash: p.node().type_hash,
                    payload,
                    timestamp: p.node().timestamp,
                })
                .collect();
            crate::keep::guarded(&ctx.cas, epoch, new, &[head], |guard| {
                ctx.state.swap_head_storing(id, head, new, &rows, guard)
            })
            .map_err(|e| conflict_or(e, id))?
        }
        _ => false,
    };
    if !moved {
        if !nodes.is_empty() {
            ctx.cas.put_pending(nodes)?;
        }
        crate::keep::guarded(&ctx.cas, epoch, new, &[head], |guard| {
            ctx.state.swap_head(id, head, new, guard)
        })
        .map_err(|e| conflict_or(e, id))?;
    }

    // Step 8: does the new step end the thread? The chain is the one loaded
    // at the start plus the step just checked: no need to read it again.
    let mut view = view;
    view.steps.push(loaded);
    view.head = new;
    if !view.is_whole()
        && let uwf_moderator::StepsNeeded::Last(n) = view.steps_needed()
    {
        // What `recent` keeps of the thread stays a few steps however
        // long it grows (the view was cut in `step_once`).
        view.keep_last(n.max(1));
    }
    let decided = view.decide();
    let done = match decided {
        Ok(d) if d.is_end() => {
            match ctx.state.archive(id, workflow, Some(new), "done") {
                Ok(_) => true,
                // Killed (archived with this very head) right after the step
                // landed: the step stands and the thread is over either way.
                Err(StateError::Conflict { actual: None, .. }) => {
                    tracing::warn!("thread {id} was killed just after this step was recorded");
                    true
                }
                Err(e) => return Err(conflict_or(e, id)),
            }
        }
        Ok(d) => {
            // What the next step of this thread starts from (crate::recent).
            ctx.recent.keep(id, view, d);
            false
        }
        Err(e) => {
            // The step itself landed; the next `step` will report this properly.
            tracing::warn!(
                "the step was recorded, but the moderator cannot decide what comes next: {e}"
            );
            false
        }
    };
    Ok(StepOutput {
        workflow,
        thread: id,
        head: new,
        done,
    })
}

/// How often a queued step re-reads the thread's head for the kill flag.
const KILL_POLL: Duration = Duration::from_millis(200);

/// Takes a slot of `workflow` for a step of thread `id` at `head`, as its
/// `limits` say: at once or [`EngineError::NoSlot`] (`overflow: drop`), or
/// after waiting in the workflow's queue (`overflow: queue`), reporting the
/// wait through `progress`; [`EngineError::Evicted`] if the queue pushes the
/// step out. While waiting, an interrupt stops it, and so does the kill
/// flag (the thread archived, or its head moved).
fn acquire_slot(
    ctx: &Engine,
    id: ThreadId,
    head: Hash,
    workflow: &str,
    limits: WorkflowLimits,
    progress: &dyn Progress,
    cancel: &CancelToken,
) -> Result<Box<dyn SlotHold>, EngineError> {
    let mut stop = None;
    let mut last_check = Instant::now();
    let mut shown = None;
    let got = ctx.state.acquire_slot(workflow, limits, None, &mut |w| {
        if cancel.is_cancelled() {
            stop = Some(EngineError::Interrupted);
            return false;
        }
        if last_check.elapsed() >= KILL_POLL {
            last_check = Instant::now();
            if let Some(e) = moved(ctx, id, head, false).unwrap_or_else(Some) {
                stop = Some(e);
                return false;
            }
        }
        if shown != Some(w.ahead) {
            shown = Some(w.ahead);
            progress.waiting(workflow, w.ahead);
        }
        true
    });
    let guard = match got {
        Ok(guard) => guard,
        Err(SlotError::Full { concurrency, .. }) => {
            return Err(EngineError::NoSlot {
                thread: id,
                workflow: workflow.to_string(),
                concurrency,
            });
        }
        Err(SlotError::Evicted {
            max_queue, waited, ..
        }) => {
            let waited = Duration::from_millis(u64::try_from(waited.as_millis()).unwrap_or(0));
            return Err(EngineError::Evicted {
                thread: id,
                workflow: workflow.to_string(),
                max_queue,
                waited: humantime::format_duration(waited).to_string(),
            });
        }
        Err(SlotError::Cancelled { .. }) => return Err(stop.unwrap_or(EngineError::Interrupted)),
        Err(e) => return Err(EngineError::Slot(e)),
    };
    Ok(guard)
}

/// `None` while thread `id`'s head is still `head`; otherwise the error of
/// a step that must stop: the thread was killed (before or after its agent
/// started, as `agent_ran` says), or moved on.
pub fn moved(
    ctx: &Engine,
    id: ThreadId,
    head: Hash,
    agent_ran: bool,
) -> Result<Option<EngineError>, EngineError> {
    let thread = id;
    Ok(match ctx.state.thread_head(id)? {
        Some(h) if h == head => None,
        Some(actual) => Some(EngineError::HeadMoved { thread, actual }),
        None if agent_ran => Some(EngineError::Killed { thread }),
        None => Some(EngineError::KilledBeforeStart { thread }),
    })
}

/// The agent was stopped because the thread changed under it.
fn interrupted(ctx: &Engine, id: ThreadId) -> Result<EngineError, EngineError> {
    Ok(match ctx.state.thread_head(id)? {
        None => EngineError::Killed { thread: id },
        Some(actual) => EngineError::HeadMoved { thread: id, actual },
    })
}

/// What a step (or answer) of thread `id` that stopped with `e` reports,
/// once the history is asked why the thread is no longer active.
///
/// The kill flag, a lost compare-and-swap and a stopped agent all see only
/// that the thread is gone ([`EngineError::Killed`],
/// [`EngineError::KilledBeforeStart`]) or that its head moved
/// ([`EngineError::HeadMoved`]). A thread is also archived when a step
/// reaches `$END` (or by `thread prune`): then the step lost a race, which
/// is [`EngineError::FinishedMeanwhile`] (a conflict), not a kill. Only
/// reason `killed` stays a kill (docs/state.md, "Exit status"). Any other
/// error, a thread that is still active, or a history that cannot be read
/// leaves `e` as it is.
pub fn settle(ctx: &Engine, id: ThreadId, e: EngineError) -> EngineError {
    let ours = match &e {
        // A head that moved: perhaps to the step that ended the thread.
        EngineError::Killed { thread }
        | EngineError::KilledBeforeStart { thread }
        | EngineError::HeadMoved { thread, .. } => *thread == id,
        _ => false,
    };
    if !ours {
        return e;
    }
    match ctx.state.thread_head(id) {
        // Gone: the history says why, below.
        Ok(None) => {}
        // Still active at the head it moved to. If the step that moved it
        // there ended the thread, that step archives it next (the head
        // moves first: docs/state.md, "Thread lifecycle"); this one lost to the
        // end of the thread all the same, whether or not the archive has
        // happened yet.
        Ok(Some(now)) => {
            if let EngineError::HeadMoved { actual, .. } = &e
                && *actual == now
                && ends_there(ctx, now)
            {
                return EngineError::FinishedMeanwhile {
                    thread: id,
                    reason: "done".into(),
                    head: now,
                };
            }
            return e;
        }
        Err(_) => return e,
    }
    match ctx.state.find_archived(id) {
        Ok(Some(entry)) => match entry.reason {
            Some(reason) if reason != "killed" => EngineError::FinishedMeanwhile {
                thread: id,
                reason,
                head: entry.head,
            },
            _ => e,
        },
        Ok(None) => e,
        Err(err) => {
            tracing::debug!(thread = %id, error = %err, "cannot read the history to tell why the thread ended");
            e
        }
    }
}

/// Whether the moderator ends the thread at `head` (a step that reached
/// `$END`); `false` when it cannot tell. Asked only of a step that lost a
/// race, to say what it lost to.
fn ends_there(ctx: &Engine, head: Hash) -> bool {
    match uwf_moderator::thread::load(&ctx.cas, head).map(|view| view.decide()) {
        Ok(Ok(decision)) => decision.is_end(),
        Ok(Err(err)) => {
            tracing::debug!(%head, error = %err, "cannot decide at the head a race moved to");
            false
        }
        Err(err) => {
            tracing::debug!(%head, error = %err, "cannot load the head a race moved to");
            false
        }
    }
}

/// The engine error for a lost compare-and-swap of thread `id`: killed
/// (no longer active) or moved on; other state errors pass through.
pub fn conflict_or(e: StateError, id: ThreadId) -> EngineError {
    match e {
        StateError::Conflict { actual: None, .. } => EngineError::Killed { thread: id },
        StateError::Conflict {
            actual: Some(actual),
            ..
        } => EngineError::HeadMoved { thread: id, actual },
        other => other.into(),
    }
}

/// After how long an agent's step stops asking the store for its head
/// several times a second and listens for head notices instead, where the
/// store has them ([`ThreadStore::head_notices`]): a short step is over
/// before listening would pay for its connection.
const LISTEN_AFTER: Duration = Duration::from_secs(2);

/// How often a step that listens still reads its head, in case a notice
/// was lost in a way the listener cannot see.
const READ_ANYWAY: Duration = Duration::from_secs(10);

/// The kill flag of a running step: whether its thread is no longer
/// active, or no longer at the head the step started from (a kill, or
/// another step won). Asked by the agent's supervisor a few times a
/// second; it reads the head each time until the agent has run for
/// [`LISTEN_AFTER`], then only when a head notice for the thread came (or
/// every [`READ_ANYWAY`]), so a long agent run costs the database almost
/// nothing (docs/postgres.md, "Kill notices").
struct KillFlag<'a> {
    state: &'a dyn ThreadStore,
    thread: ThreadId,
    head: Hash,
    started: Instant,
    notices: Option<Arc<dyn HeadNotices>>,
    asked_for_notices: bool,
    /// The notices' mark when the head was last read.
    seen: Option<u64>,
    last_read: Instant,
}

impl<'a> KillFlag<'a> {
    fn new(state: &'a dyn ThreadStore, thread: ThreadId, head: Hash) -> Self {
        let now = Instant::now();
        KillFlag {
            state,
            thread,
            head,
            started: now,
            notices: None,
            asked_for_notices: false,
            seen: None,
            last_read: now,
        }
    }

    fn raised(&mut self) -> bool {
        if !self.asked_for_notices && self.started.elapsed() >= LISTEN_AFTER {
            self.asked_for_notices = true;
            self.notices = self.state.head_notices();
        }
        // The mark is taken before the head is read: a move in between
        // changes the mark, and the next call reads again.
        let mark = self.notices.as_ref().and_then(|n| n.mark(self.thread));
        if mark.is_some() && mark == self.seen && self.last_read.elapsed() < READ_ANYWAY {
            return false;
        }
        self.seen = mark;
        self.last_read = Instant::now();
        self.state
            .thread_head(self.thread)
            .map(|h| h != Some(self.head))
            .unwrap_or(false)
    }
}

/// The environment of an agent: where the store is, how uwf names the
/// agent, the head its step starts from, `PATH` with the engine's agent
/// directory first, and the store's secrets (`.env`) that the engine's own
/// environment does not set already. Nothing is written into the engine's
/// process environment. With it, the redactor of the secrets the agent
/// may know, from the same reading of `.env` ([`crate::secrets`]).
fn agent_env(
    ctx: &Engine,
    label: &str,
    head: Hash,
    edge_prompt: Option<&str>,
) -> Result<(Vec<(String, std::ffi::OsString)>, Redactor), EngineError> {
    let mut env = ctx.store_env.clone();
    // What the StepNode records as `agent` (docs/agent-protocol.md: the agent command used).
    env.push((AGENT_ENV.to_string(), label.into()));
    env.push((HEAD_ENV.to_string(), head.to_string().into()));
    // The decision at that head, so the agent need not evaluate the
    // conditions again (an empty value: no edge prompt). Very long prompts
    // are left to the agent to compute.
    if edge_prompt.is_none_or(|p| p.len() <= MAX_ENV_PROMPT) {
        env.push((
            EDGE_PROMPT_ENV.to_string(),
            edge_prompt.unwrap_or_default().into(),
        ));
    }
    if let Some(dir) = &ctx.agent_dir {
        env.push(("PATH".to_string(), spawn::path_with(dir)));
    }
    let secrets = ctx.state.secrets()?;
    let redactor = ctx.redactor_of(&secrets);
    for (key, value) in secrets {
        if std::env::var_os(&key).is_none() {
            env.push((key, value.into()));
        }
    }
    Ok((env, redactor))
}
