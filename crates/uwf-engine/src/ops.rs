//! Thread operations around the step: start, fork, kill, run to the end,
//! and applying a step someone else wrote (a person's answer).

use std::sync::Arc;

use uwf_cas::Hash;
use uwf_moderator::thread;
use uwf_protocol::{
    HistoryEntry, ModeratorContext, StartNodePayload, StepOutput, ThreadId, WorkflowPayload,
};
use uwf_state::GcEpoch;

use crate::check::{CheckError, check_step};
use crate::error::EngineError;
use crate::step::{StepOptions, Stepped, active_head, apply, conflict_or, settle, step};
use crate::{Engine, Progress};

/// A thread that was started or forked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The new thread's id.
    pub thread: ThreadId,
    /// Its head: the StartNode, or the node a fork starts from.
    pub head: Hash,
}

/// How [`run`] ended.
#[derive(Debug)]
pub enum Ran {
    /// The thread reached `$END` (or was already there).
    Done(StepOutput),
    /// A role waits for a person: the last step did not run.
    Waiting(Stepped),
    /// `max_steps` steps ran and the thread is not done.
    MaxSteps {
        /// Where it stands.
        output: Option<StepOutput>,
        /// How many steps ran.
        steps: usize,
    },
}

/// Fails if no thread can be added now (the thread index of a store not yet
/// migrated is corrupt, the state lock cannot be taken), so a front end can
/// check before it writes anything for a new thread (a workflow
/// registration, …): a start refused for such a reason leaves the store
/// exactly as it was. A StartNode stored by a start that fails later is
/// never removed by it: an identical start (same workflow, same task) may
/// share that node at the same moment (docs/state.md, "Thread lifecycle").
pub fn ready_to_start(engine: &Engine) -> Result<(), EngineError> {
    engine.state.thread_head(ThreadId::new())?;
    engine.state.check_writable()?;
    Ok(())
}

/// Starts a thread of the Workflow node `workflow` with the task `prompt`:
/// stores its StartNode (with `parent` as `parentState`, for a child
/// thread) and makes it active. `parent` must be a StartNode or StepNode of
/// a sound chain.
pub fn start(
    engine: &Engine,
    workflow: Hash,
    prompt: &str,
    parent: Option<Hash>,
) -> Result<Started, EngineError> {
    if prompt.trim().is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    ready_to_start(engine)?;
    // Read before the StartNode is stored (crate::keep).
    let epoch = engine.state.gc_epoch()?;
    let id = ThreadId::new();
    if let Some(p) = parent {
        thread::load(&engine.cas, p).map_err(|e| EngineError::BadParent {
            hash: p.to_string(),
            source: Box::new(e),
        })?;
    }
    let payload = StartNodePayload {
        workflow,
        prompt: prompt.to_string(),
        parent_state: parent,
    };
    let start = engine
        .cas
        .put_value(engine.cas.types().start_node, &payload)?;
    crate::keep::guarded(&engine.cas, Some(epoch), start.hash, &[], |guard| {
        engine.state.insert_thread(id, start.hash, guard)
    })?;
    Ok(Started {
        thread: id,
        head: start.hash,
    })
}

/// Checks, before a front end starts a thread of the workflow `hash`
/// (`workflow`) with the task `prompt` to step it at once (`thread run
/// WORKFLOW`), that its first step's agent can run: configured for the role
/// (`explicit` overrides the configuration, as `--agent` does) and, unless
/// a person answers it, a program that exists. The error is the one that
/// step would fail with ([`EngineError::State`] for an agent that is not
/// configured, [`EngineError::AgentSpawn`] for a program that is not
/// found), so a run whose agent is missing is refused before any thread
/// exists, and retrying it does not leave a new idle thread behind each
/// time. Nothing is written.
///
/// A first decision that cannot be made here (a condition that fails) is
/// left to the step, which reports it in the thread as it always did.
pub fn check_first_agent(
    engine: &Engine,
    hash: Hash,
    workflow: &WorkflowPayload,
    prompt: &str,
    explicit: Option<&str>,
) -> Result<(), EngineError> {
    let ctx = ModeratorContext {
        start: StartNodePayload {
            workflow: hash,
            prompt: prompt.to_string(),
            parent_state: None,
        },
        steps: Vec::new(),
    };
    let Ok(decision) = uwf_moderator::evaluate(workflow, &ctx) else {
        return Ok(());
    };
    if decision.is_end() || crate::suspend::suspends(&decision) {
        return Ok(());
    }
    let config = engine.state.config()?;
    let agent = engine.state.resolve_agent_with(
        config.as_ref(),
        explicit,
        &workflow.name,
        &decision.next,
    )?;
    if agent.human {
        return Ok(());
    }
    let path = engine.agent_dir.as_deref().map(crate::spawn::path_with);
    if uwf_util::supervise::find_program(&agent.command, path).is_none() {
        let why = if agent.command.contains('/') {
            "no such executable file"
        } else {
            "no such program in PATH"
        };
        return Err(EngineError::AgentSpawn {
            command: agent.command,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, why),
        });
    }
    Ok(())
}

/// Starts a new thread at `node`, a StartNode or StepNode of a sound chain
/// (of any thread, active or archived): it continues from there.
pub fn fork(engine: &Engine, node: Hash) -> Result<Started, EngineError> {
    // Read before the chain is checked (crate::keep).
    let epoch = engine.state.gc_epoch()?;
    // Loading proves it is a StartNode or StepNode of a sound chain.
    thread::load(&engine.cas, node)?;
    let id = ThreadId::new();
    crate::keep::guarded(&engine.cas, Some(epoch), node, &[], |guard| {
        engine.state.insert_thread(id, node, guard)
    })?;
    Ok(Started {
        thread: id,
        head: node,
    })
}

/// Kills an active thread: archives it with reason `killed`. A step of it
/// that is running notices (the kill flag) and stops its agent.
pub fn kill(engine: &Engine, id: ThreadId) -> Result<HistoryEntry, EngineError> {
    let head = active_head(engine, id)?;
    let workflow = workflow_of(engine, head)?;
    Ok(engine.state.archive(id, workflow, None, "killed")?)
}

/// The workflow hash of the thread whose head is `head`.
pub fn workflow_of(engine: &Engine, head: Hash) -> Result<Hash, EngineError> {
    let types = engine.cas.types();
    let node = engine.cas.get(head)?;
    if node.type_hash == types.start_node {
        let start: StartNodePayload =
            serde_json::from_value(node.payload).map_err(|e| EngineError::CorruptState {
                what: format!("StartNode {head}").into(),
                reason: e.to_string(),
            })?;
        return Ok(start.workflow);
    }
    let start = node
        .payload
        .get("start")
        .and_then(serde_json::Value::as_str)
        .and_then(|s| s.parse::<Hash>().ok())
        .ok_or_else(|| EngineError::NotAStep {
            hash: head.to_string(),
        })?;
    workflow_of(engine, start)
}

/// Steps thread `id` until it ends, a role waits for a person, or
/// `max_steps` steps ran. Errors stop it at once (the thread stays where
/// the last landed step left it).
pub fn run(
    engine: &Engine,
    id: ThreadId,
    opts: &StepOptions<'_>,
    progress: &Arc<dyn Progress>,
    max_steps: usize,
) -> Result<Ran, EngineError> {
    let mut last = None;
    for _ in 0..max_steps {
        let stepped = step(engine, id, opts, progress)?;
        if stepped.waiting.is_some() {
            return Ok(Ran::Waiting(stepped));
        }
        if stepped.output.done {
            return Ok(Ran::Done(stepped.output));
        }
        last = Some(stepped.output);
    }
    Ok(Ran::MaxSteps {
        output: last,
        steps: max_steps,
    })
}

/// Applies a StepNode written outside an agent run (a person's answer) to
/// thread `id` for `role`, which must be the role the moderator chooses at
/// the thread's current head: the same checks as an agent's step, then the
/// compare-and-swap of the head, then the archive at `$END`.
///
/// `epoch` is the garbage-collection epoch the caller read before it stored
/// the StepNode and its output (`None`: not read); a node of it that a
/// collection removed meanwhile fails with
/// [`StateError::NodeGone`](uwf_state::StateError::NodeGone), nothing
/// changed ([`crate::keep`]).
pub fn apply_offered(
    engine: &Engine,
    id: ThreadId,
    expected_head: Hash,
    role: &str,
    new: Hash,
    epoch: Option<GcEpoch>,
) -> Result<StepOutput, EngineError> {
    let view = thread::load(&engine.cas, expected_head)?;
    let loaded = match check_step(&engine.cas, &view, role, new) {
        Ok(l) => l,
        Err(CheckError::Rejected(rejection)) => {
            if let Some(e) = crate::step::collected_by_gc(engine, epoch, new, &rejection)? {
                return Err(e);
            }
            return Err(EngineError::Rejected {
                thread: id,
                rejection,
            });
        }
        Err(CheckError::Store(e)) => return Err(e),
    };
    apply(engine, id, view, role, new, loaded, epoch)
        .map_err(|e| match e {
            EngineError::State(s) => conflict_or(s, id),
            other => other,
        })
        // An answer that lost to one that ended the thread is a conflict,
        // not a kill (docs/state.md, "Exit status").
        .map_err(|e| settle(engine, id, e))
}
