//! One step of a thread: moderator → slot (for a workflow with a
//! concurrency limit) → agent → checks → compare-and-swap of the head.
//! Also the thread lookups the commands share.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uwf_cas::{Cas, Hash};
use uwf_moderator::thread::{self, LoadedStep, ThreadView};
use uwf_protocol::{HistoryEntry, StepNodePayload, StepOutput, WaitingRecord, WorkflowLimits};
use uwf_state::policy;
use uwf_state::slots::{SlotError, SlotGuard, Slots};
use uwf_state::state::{ResolvedAgent, StateDir, StateError};

use crate::agent::{self, Ending, Spawn};
use crate::error::{AgentFailure, CliError};

/// Environment variable telling the agent how uwf names it (alias or command line).
pub const AGENT_ENV: &str = "UWF_AGENT";

/// Everything a command needs about the storage root.
pub struct Ctx {
    /// The store.
    pub cas: Cas,
    /// The state files.
    pub state: StateDir,
    /// The root directory.
    pub root: PathBuf,
}

impl Ctx {
    /// Opens the store and state of `root`.
    pub fn open(root: &Path) -> Result<Self, CliError> {
        Ok(Self {
            cas: Cas::open(root)?,
            state: StateDir::new(root),
            root: root.to_path_buf(),
        })
    }
}

/// Where a thread stands.
pub enum Status {
    /// Listed in threads.yaml.
    Active {
        /// Its head.
        head: Hash,
    },
    /// Archived in history.jsonl.
    Archived(HistoryEntry),
}

/// Parses and canonicalises a thread id.
pub fn thread_id(s: &str) -> Result<String, CliError> {
    Ok(s.parse::<uwf_util::ids::ThreadId>()?.to_string())
}

fn stored_hash(s: &str, file: &Path) -> Result<Hash, CliError> {
    s.parse::<Hash>().map_err(|e| CliError::CorruptState {
        path: file.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Looks a thread up; unknown ids are an error.
pub fn status(ctx: &Ctx, id: &str) -> Result<Status, CliError> {
    if let Some(head) = ctx.state.thread_head(id)? {
        return Ok(Status::Active {
            head: stored_hash(&head, &ctx.state.threads_path())?,
        });
    }
    match ctx.state.find_archived(id)? {
        Some(entry) => Ok(Status::Archived(entry)),
        None => Err(CliError::UnknownThread {
            thread: id.to_string(),
        }),
    }
}

/// The head of an active thread; archived and unknown threads are errors.
pub fn active_head(ctx: &Ctx, id: &str) -> Result<Hash, CliError> {
    match status(ctx, id)? {
        Status::Active { head } => Ok(head),
        Status::Archived(_) => Err(CliError::ThreadFinished {
            thread: id.to_string(),
        }),
    }
}

/// The head of a thread, active or archived.
pub fn any_head(ctx: &Ctx, id: &str) -> Result<Hash, CliError> {
    match status(ctx, id)? {
        Status::Active { head } => Ok(head),
        Status::Archived(e) => stored_hash(&e.head, &ctx.state.history_path()),
    }
}

/// Options of a step.
pub struct StepOptions<'a> {
    /// `--agent`.
    pub agent: Option<&'a str>,
    /// `--timeout`.
    pub timeout: Option<Duration>,
}

/// Progress callbacks (for `thread run`).
pub trait Progress: Send + Sync {
    /// An agent starts working on a role.
    fn started(&self, role: &str, agent: &str);
    /// A line the agent wrote on stderr.
    fn agent_line(&self, line: &str);
    /// The agent finished and its step passed the checks.
    fn finished(&self, role: &str, elapsed: Duration);
    /// The attempt failed after `elapsed` (`reason` says how); a retry or
    /// the step's error follows.
    fn failed(&self, role: &str, elapsed: Duration, reason: &str) {
        tracing::info!(
            role,
            elapsed_ms = elapsed.as_millis() as u64,
            reason,
            "agent failed"
        );
    }
    /// The step waits for a slot of `workflow` (its `concurrency` in
    /// config.yaml is reached), with `ahead` waiters before it. Called when
    /// the wait starts and whenever `ahead` changes.
    fn waiting(&self, workflow: &str, ahead: usize) {
        eprintln!("waiting for a slot of workflow {workflow} ({ahead} ahead)");
    }
    /// Attempt `n` of `role` failed with `reason`; retry `n` of `max`
    /// follows after `delay`.
    fn retrying(&self, n: u32, max: u32, delay: Duration, role: &str, reason: &str) {
        eprintln!(
            "retry {n}/{max} in {}: {role} {reason}",
            humantime::format_duration(delay)
        );
    }
}

/// Streams agent stderr straight through.
pub struct Plain;

impl Progress for Plain {
    fn started(&self, role: &str, agent: &str) {
        tracing::info!(role, agent, "agent started");
    }
    fn agent_line(&self, line: &str) {
        eprintln!("{line}");
    }
    fn finished(&self, role: &str, elapsed: Duration) {
        tracing::info!(
            role,
            elapsed_ms = elapsed.as_millis() as u64,
            "agent finished"
        );
    }
}

/// What a step did.
pub struct Stepped {
    /// The JSON answer.
    pub output: StepOutput,
    /// Set when the step did not run because the role waits for a person
    /// (directly, or through a child thread): the head did not move.
    pub waiting: Option<WaitingRecord>,
}

impl Stepped {
    /// A step that did not run: thread `id` (at `head`) waits as `record` says.
    fn waiting(workflow: String, id: &str, head: Hash, record: WaitingRecord) -> Self {
        Stepped {
            output: StepOutput {
                workflow,
                thread: id.to_string(),
                head: head.to_string(),
                done: false,
            },
            waiting: Some(record),
        }
    }
}

/// Runs one cycle of a thread (seed 000 §1.3).
///
/// If config.yaml limits the workflow's concurrency (seed 004), the agent
/// runs only while the step holds one of its slots ([`uwf_state::slots`]):
/// taken after the moderator chose the role, freed when the agent ends.
/// A role bound to a person (`human: true`) runs nothing: the thread is
/// recorded as waiting ([`crate::human`]). A failed agent is retried as
/// config.yaml's `retries` say ([`crate::retry`]).
pub fn step(
    ctx: &Ctx,
    id: &str,
    opts: &StepOptions<'_>,
    progress: &Arc<dyn Progress>,
) -> Result<Stepped, CliError> {
    let head = active_head(ctx, id)?;
    let view = thread::load(&ctx.cas, head)?;
    let workflow = view.workflow_hash.to_string();
    let decision = view.decide()?;
    if decision.is_end() {
        ctx.state
            .archive(id, &workflow, Some(&head.to_string()), "done")
            .map_err(|e| conflict_or(e, id))?;
        return Ok(Stepped {
            output: StepOutput {
                workflow,
                thread: id.to_string(),
                head: head.to_string(),
                done: true,
            },
            waiting: None,
        });
    }
    let role = decision.next.clone();
    // Read once: it gives the agent, the workflow's limits and the policies.
    let config = ctx.state.config()?;
    let agent =
        ctx.state
            .resolve_agent_with(config.as_ref(), opts.agent, &view.workflow.name, &role)?;
    if agent.human {
        let record = crate::human::wait(
            ctx,
            id,
            &view,
            &role,
            decision.prompt.as_deref(),
            &agent.label,
            config.as_ref(),
        )?;
        return Ok(Stepped::waiting(workflow, id, head, record));
    }
    let name = &view.workflow.name;
    let policy = policy::retry_policy(config.as_ref(), name, &role)?;
    let timeout = match opts.timeout {
        Some(t) => Some(t),
        None => policy::timeout(config.as_ref(), name, &role)?,
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
    };
    let (new, loaded) = match crate::retry::run(&attempt, &policy)? {
        Tried::Landed(new, loaded) => (new, loaded),
        Tried::ChildWaiting(record) => return Ok(Stepped::waiting(workflow, id, head, record)),
        // `retry::run` turns the last failure into an error.
        Tried::Failed(f) => return Err(f.into_error(&agent.label, &role, None)),
    };
    Ok(Stepped {
        output: apply(ctx, id, view, &role, new, loaded)?,
        waiting: None,
    })
}

/// One attempt of a step: everything the agent run needs.
pub struct Attempt<'a> {
    /// The root.
    pub ctx: &'a Ctx,
    /// The thread id.
    pub id: &'a str,
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
}

/// How an attempt ended, when nothing stops the whole step.
pub enum Tried {
    /// The agent wrote a StepNode that passed the checks (the head has not moved yet).
    Landed(Hash, LoadedStep),
    /// The agent failed in a way worth retrying.
    Failed(Failed),
    /// The agent (a workflow agent) reported that its child thread waits
    /// for a person; the thread is now recorded as waiting too.
    ChildWaiting(WaitingRecord),
}

/// A failed attempt: what [`crate::retry`] records and reports.
pub struct Failed {
    /// `exit`, `signal`, `timeout`, `no-hash`, `bad-hash` or `check`.
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
    pub fn into_error(self, agent: &str, role: &str, attempts: Option<u32>) -> CliError {
        let reason = match attempts {
            Some(n) if n > 1 => format!(
                "{} (attempt {n} of {n}; `uwf thread show` lists the failed attempts)",
                self.reason
            ),
            _ => self.reason,
        };
        CliError::Agent(Box::new(AgentFailure {
            agent: agent.to_string(),
            role: role.to_string(),
            reason,
        }))
    }
}

/// Runs the agent once: slot → kill flag → agent → checks. Errors are what
/// stops the step at once (a kill, a head conflict, an interrupt, an agent
/// that cannot be started, no slot); failures worth a retry are
/// [`Tried::Failed`].
pub fn attempt(a: &Attempt<'_>) -> Result<Tried, CliError> {
    let (ctx, id, head, role, agent) = (a.ctx, a.id, a.head, a.role, a.agent);
    // Seed 004: a slot of the workflow, held while the agent runs.
    let slot = match a.limits {
        Some(limits) => Some(acquire_slot(
            ctx,
            id,
            head,
            &a.view.workflow.name,
            limits,
            a.progress.as_ref(),
        )?),
        None => None,
    };
    // The kill flag (seed 004), checked once more just before the agent
    // starts: the thread may have been killed or moved on meanwhile.
    if let Some(e) = moved(ctx, id, &head.to_string(), false)? {
        return Err(e);
    }

    let mut args = agent.args.clone();
    args.push(id.to_string());
    args.push(role.to_string());
    let mut env = vec![
        (
            uwf_util::root::ENV_ROOT.to_string(),
            ctx.root.clone().into_os_string(),
        ),
        // What the StepNode records as `agent` (seed 000: the agent command used).
        (AGENT_ENV.to_string(), agent.label.clone().into()),
    ];
    if let Some(dir) = std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        env.push(("PATH".to_string(), agent::path_with(dir)));
    }
    let spec = Spawn {
        command: &agent.command,
        args: &args,
        env,
        timeout: a.timeout,
    };
    a.progress.started(role, &agent.label);
    let started_at = uwf_state::state::now_ms();
    let state = &ctx.state;
    let head_s = head.to_string();
    // The marker `thread show`/`list`/`watch` read, and the stderr log.
    let running =
        crate::running::Running::start(&ctx.root, id, role, &agent.label, &head_s, started_at);
    let log = running.sink();
    let sink = Arc::clone(a.progress);
    let finished = agent::run(
        &spec,
        move |line| {
            log(line);
            sink.agent_line(line);
        },
        // The kill flag of seed 004: the thread left threads.yaml, or its head moved.
        || {
            state
                .thread_head(id)
                .map(|h| h.as_deref() != Some(head_s.as_str()))
                .unwrap_or(false)
        },
    )
    .map_err(|source| CliError::AgentSpawn {
        command: agent.command.clone(),
        source,
    })?;
    // The agent is done: free the slot before checking its work.
    drop(slot);
    // The kill flag again, now that the agent returned: a thread killed (or
    // moved on) meanwhile never gets this step, and that is what to report,
    // whatever the agent did (it may have failed because of it).
    if !matches!(finished.ending, Ending::Interrupted)
        && let Some(e) = moved(ctx, id, &head_s, true)?
    {
        return Err(e);
    }

    let stderr_tail = finished.stderr_tail;
    let elapsed = finished.elapsed;
    let fail = |kind: &'static str, reason: String, exit_code: Option<i32>| {
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
        Ending::Exited { code: Some(c), .. } => {
            if c == i32::from(crate::error::EXIT_WAITING)
                && let Some(record) =
                    crate::human::child_waits(ctx, id, a.view, role, &agent.label)?
            {
                return Ok(Tried::ChildWaiting(record));
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
        Ending::Interrupted => return Err(CliError::Interrupted),
    };
    let Some(line) = agent::last_line(&stdout) else {
        return fail(
            "no-hash",
            "printed nothing on stdout (expected the new StepNode's hash)".into(),
            Some(0),
        );
    };
    let new: Hash = match line.parse() {
        Ok(h) => h,
        Err(_) => {
            return fail(
                "bad-hash",
                format!(
                    "printed {:?} on stdout, which is not a CAS hash",
                    line.chars().take(80).collect::<String>()
                ),
                Some(0),
            );
        }
    };
    match check_step(ctx, a.view, role, new) {
        Ok(loaded) => {
            a.progress.finished(role, elapsed);
            running.landed(&ctx.root, &new.to_string(), elapsed);
            Ok(Tried::Landed(new, loaded))
        }
        Err(reason) => fail("check", reason, Some(0)),
    }
}

/// Moves thread `id` from the head `view` was loaded at to `new` (a checked
/// StepNode of `role`, loaded as `loaded`) by compare-and-swap, then asks
/// the moderator whether the thread is done and archives it if so
/// (seed 000 §1.3, steps 7 and 8).
pub fn apply(
    ctx: &Ctx,
    id: &str,
    view: ThreadView,
    role: &str,
    new: Hash,
    loaded: LoadedStep,
) -> Result<StepOutput, CliError> {
    let head = view.head;
    let workflow = view.workflow_hash.to_string();
    debug_assert_eq!(loaded.payload.record.role, role);
    ctx.state
        .swap_head(id, &head.to_string(), &new.to_string())
        .map_err(|e| conflict_or(e, id))?;

    // Step 8: does the new step end the thread? The chain is the one loaded
    // at the start plus the step just checked: no need to read it again.
    let mut view = view;
    view.steps.push(loaded);
    view.head = new;
    let done = match view.decide() {
        Ok(d) if d.is_end() => {
            match ctx
                .state
                .archive(id, &workflow, Some(&new.to_string()), "done")
            {
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
        Ok(_) => false,
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
        thread: id.to_string(),
        head: new.to_string(),
        done,
    })
}

/// How often a queued step re-reads `threads.yaml` for the kill flag.
const KILL_POLL: Duration = Duration::from_millis(200);

/// Takes a slot of `workflow` for a step of thread `id` at `head`, as its
/// `limits` say: at once or [`CliError::NoSlot`] (`overflow: drop`), or
/// after waiting in the workflow's queue (`overflow: queue`), reporting the
/// wait through `progress`; [`CliError::Evicted`] if the queue pushes the
/// step out. While waiting, an interrupt stops it, and so does the kill
/// flag (the thread archived, or its head moved).
fn acquire_slot(
    ctx: &Ctx,
    id: &str,
    head: Hash,
    workflow: &str,
    limits: WorkflowLimits,
    progress: &dyn Progress,
) -> Result<SlotGuard, CliError> {
    let head = head.to_string();
    let mut stop = None;
    let mut last_check = Instant::now();
    let mut shown = None;
    let got = Slots::new(&ctx.root, workflow, limits).acquire(|w| {
        if agent::interrupted() {
            stop = Some(CliError::Interrupted);
            return false;
        }
        if last_check.elapsed() >= KILL_POLL {
            last_check = Instant::now();
            if let Some(e) = moved(ctx, id, &head, false).unwrap_or_else(Some) {
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
            return Err(CliError::NoSlot {
                thread: id.to_string(),
                workflow: workflow.to_string(),
                concurrency,
            });
        }
        Err(SlotError::Evicted {
            max_queue, waited, ..
        }) => {
            let waited = Duration::from_millis(u64::try_from(waited.as_millis()).unwrap_or(0));
            return Err(CliError::Evicted {
                thread: id.to_string(),
                workflow: workflow.to_string(),
                max_queue,
                waited: humantime::format_duration(waited).to_string(),
            });
        }
        Err(SlotError::Cancelled { .. }) => return Err(stop.unwrap_or(CliError::Interrupted)),
        Err(e) => return Err(CliError::Slot(e)),
    };
    Ok(guard)
}

/// `None` while thread `id`'s head is still `head`; otherwise the error of
/// a step that must stop: the thread was killed (before or after its agent
/// started, as `agent_ran` says), or moved on.
pub fn moved(
    ctx: &Ctx,
    id: &str,
    head: &str,
    agent_ran: bool,
) -> Result<Option<CliError>, CliError> {
    let thread = id.to_string();
    Ok(match ctx.state.thread_head(id)? {
        Some(h) if h == head => None,
        Some(actual) => Some(CliError::HeadMoved { thread, actual }),
        None if agent_ran => Some(CliError::Killed { thread }),
        None => Some(CliError::KilledBeforeStart { thread }),
    })
}

/// The agent was stopped because the thread changed under it.
fn interrupted(ctx: &Ctx, id: &str) -> Result<CliError, CliError> {
    Ok(match ctx.state.thread_head(id)? {
        None => CliError::Killed {
            thread: id.to_string(),
        },
        Some(actual) => CliError::HeadMoved {
            thread: id.to_string(),
            actual,
        },
    })
}

pub fn conflict_or(e: StateError, id: &str) -> CliError {
    match e {
        StateError::Conflict { actual: None, .. } => CliError::Killed {
            thread: id.to_string(),
        },
        StateError::Conflict {
            actual: Some(actual),
            ..
        } => CliError::HeadMoved {
            thread: id.to_string(),
            actual,
        },
        other => other.into(),
    }
}

/// Checks the StepNode an agent produced before the head may move to it.
/// On success returns the step as loaded, so the caller can extend its view
/// of the thread instead of reading the whole chain again.
pub fn check_step(
    ctx: &Ctx,
    view: &ThreadView,
    role: &str,
    new: Hash,
) -> Result<LoadedStep, String> {
    let types = ctx.cas.types();
    let node = match ctx.cas.try_get(new) {
        Ok(Some(n)) => n,
        Ok(None) => return Err(format!("printed {new}, but no such node is in the store")),
        Err(e) => return Err(format!("printed {new}, which cannot be read: {e}")),
    };
    if node.type_hash != types.step_node {
        let title = ctx
            .cas
            .schema(node.type_hash)
            .ok()
            .and_then(|s| uwf_cas::schema::title_of(&s).map(str::to_string));
        return Err(format!(
            "printed {new}, which is not a StepNode (its type is {})",
            title.unwrap_or_else(|| node.type_hash.to_string())
        ));
    }
    let timestamp = node.timestamp;
    let step: StepNodePayload = serde_json::from_value(node.payload)
        .map_err(|e| format!("StepNode {new} is malformed: {e}"))?;
    let expected_prev = view.steps.last().map(|s| s.hash.to_string());
    if step.prev != expected_prev {
        return Err(format!(
            "StepNode {new} has prev {}, expected {} (the thread's head is {}{})",
            step.prev.as_deref().unwrap_or("null"),
            expected_prev.as_deref().unwrap_or("null"),
            view.head,
            if view.steps.is_empty() {
                ", its StartNode: the first step's prev is null"
            } else {
                ""
            }
        ));
    }
    if step.start != view.start_hash.to_string() {
        return Err(format!(
            "StepNode {new} has start {} but the thread's StartNode is {}",
            step.start, view.start_hash
        ));
    }
    if step.record.role != role {
        return Err(format!(
            "StepNode {new} is for role {:?} but the moderator chose {role:?}",
            step.record.role
        ));
    }
    let schema: Hash = view
        .workflow
        .roles
        .get(role)
        .ok_or_else(|| format!("role {role:?} is not in the workflow"))?
        .output_schema
        .parse()
        .map_err(|e| format!("the workflow's schema reference is malformed: {e}"))?;
    let output: Hash = step
        .record
        .output
        .parse()
        .map_err(|e| format!("output reference is malformed: {e}"))?;
    let output_node = match ctx.cas.try_get(output) {
        Ok(Some(n)) => n,
        Ok(None) => {
            return Err(format!(
                "StepNode {new} points at output {output}, which is not in the store"
            ));
        }
        Err(e) => return Err(format!("output {output} cannot be read: {e}")),
    };
    if output_node.type_hash != schema {
        return Err(format!(
            "the output of StepNode {new} is a node of type {}, not of the role's output schema {schema}",
            output_node.type_hash
        ));
    }
    ctx.cas
        .validate(schema, &output_node.payload)
        .map_err(|e| {
            format!("the output of StepNode {new} does not match the role's schema: {e}")
        })?;
    let detail: Hash = step
        .record
        .detail
        .parse()
        .map_err(|e| format!("detail reference is malformed: {e}"))?;
    if !ctx.cas.has(detail).unwrap_or(false) {
        return Err(format!(
            "StepNode {new} points at detail {detail}, which is not in the store"
        ));
    }
    crate::nested::check_child_thread(ctx, view, new, &step)?;
    Ok(LoadedStep {
        hash: new,
        payload: step,
        output: output_node.payload,
        timestamp,
    })
}
