//! The engine's errors: what went wrong and the facts of it (thread, head,
//! workflow, agent). Each has a stable diagnostic code; hints that name a
//! command of some front end (`uwf thread step …`) are that front end's to
//! add (the `uwf` binary does, by code).

use std::path::PathBuf;

use miette::Diagnostic;
use thiserror::Error;

use uwf_protocol::{Hash, ThreadId};

use crate::check::Rejection;

/// A failure of an engine operation. Whatever it is, the store and the
/// thread state are as valid as before: nodes an agent wrote may be left
/// unreferenced, nothing else changed.
#[derive(Debug, Error, Diagnostic)]
pub enum EngineError {
    /// The object store failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),

    /// The moderator could not decide (a condition failed, …).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Moderator(#[from] uwf_moderator::ModeratorError),

    /// A thread's chain could not be loaded.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Thread(#[from] uwf_moderator::thread::ThreadError),

    /// The thread state failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    State(#[from] uwf_state::StateError),

    /// A malformed thread id.
    #[error(transparent)]
    #[diagnostic(transparent)]
    ThreadId(#[from] uwf_protocol::ThreadIdError),

    /// The store cannot be opened: its setting, or its backend (connecting,
    /// migrating, …).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Backend(#[from] uwf_backend::BackendError),

    /// A command needs something the store does not have.
    #[error("the store {store} has no {what}")]
    #[diagnostic(code(uwf::store::unsupported))]
    Unsupported {
        /// The store, as it may be shown.
        store: String,
        /// What is missing (`run queue`, …).
        what: &'static str,
    },

    /// A `retries` or `timeouts` setting cannot be used.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Policy(#[from] uwf_state::policy::PolicyError),

    /// The state holds something that is not what uwf wrote.
    #[error("{what} is corrupt: {reason}")]
    #[diagnostic(code(uwf::state::corrupt))]
    CorruptState {
        /// Which record (a file of the filesystem backend, …).
        what: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// No thread has this id.
    #[error("no thread {thread}")]
    #[diagnostic(code(uwf::thread::unknown))]
    UnknownThread {
        /// The id.
        thread: ThreadId,
    },

    /// The thread is archived.
    #[error("thread {thread} is finished (archived); it cannot be stepped or killed")]
    #[diagnostic(code(uwf::thread::finished))]
    ThreadFinished {
        /// The id.
        thread: ThreadId,
    },

    /// The thread was killed while a step ran.
    #[error("thread {thread} was killed while the step ran; its result was not applied")]
    #[diagnostic(code(uwf::thread::killed))]
    Killed {
        /// The id.
        thread: ThreadId,
    },

    /// Another step (or answer) finished the thread while this one ran:
    /// the thread was archived with a reason other than `killed` (its
    /// history entry says which), so this step lost a race and was not
    /// applied. A conflict, like [`HeadMoved`](Self::HeadMoved), not a kill.
    #[error("{}", finished_meanwhile(thread, reason))]
    #[diagnostic(code(uwf::thread::conflict))]
    FinishedMeanwhile {
        /// The id.
        thread: ThreadId,
        /// The reason of its history entry (`done`, `pruned`, …).
        reason: String,
        /// Its head when it was archived.
        head: Hash,
    },

    /// The thread was killed while the step waited for a slot of its
    /// workflow, or just before its agent would have started.
    #[error("thread {thread} was killed before its agent started; nothing was run")]
    #[diagnostic(code(uwf::thread::killed))]
    KilledBeforeStart {
        /// The id.
        thread: ThreadId,
    },

    /// `overflow: drop` and every slot of the workflow is taken.
    #[error(
        "no free slot: workflow {workflow} already runs {concurrency} step(s), its limit with `overflow: drop`; thread {thread} was not stepped"
    )]
    #[diagnostic(code(uwf::thread::no_slot))]
    NoSlot {
        /// The id.
        thread: ThreadId,
        /// The workflow name.
        workflow: String,
        /// Its `concurrency`.
        concurrency: u32,
    },

    /// The step waited in its workflow's queue and was pushed out, being
    /// the oldest waiter when a newer one arrived at a full queue.
    #[error(
        "thread {thread} was pushed out of the queue of workflow {workflow} after waiting {waited}: a newer step arrived while the queue was full (maxQueue {max_queue}), and the oldest waiter gives way; the thread was not stepped"
    )]
    #[diagnostic(code(uwf::thread::evicted))]
    Evicted {
        /// The id.
        thread: ThreadId,
        /// The workflow name.
        workflow: String,
        /// Its `maxQueue`.
        max_queue: u32,
        /// How long the step waited, human-readable.
        waited: String,
    },

    /// The concurrency slots of a workflow could not be used.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Slot(uwf_state::slots::SlotError),

    /// Another process moved the head while the step ran.
    #[error("thread {thread} moved to {actual} while the step ran; this step was not applied")]
    #[diagnostic(code(uwf::thread::conflict))]
    HeadMoved {
        /// The id.
        thread: ThreadId,
        /// The head it has now.
        actual: Hash,
    },

    /// The step was cancelled (the caller's [`CancelToken`](crate::CancelToken))
    /// while an agent ran, or while it waited for a slot or a retry.
    #[error(
        "interrupted: the step was stopped (its agent too, if one ran) and nothing was applied"
    )]
    #[diagnostic(code(uwf::interrupted))]
    Interrupted,

    /// A step resuming a thread that is not suspended (its next role is
    /// not `$SUSPEND`); nothing was run.
    #[error("thread {thread} is not suspended (its next role is {next}); nothing was run")]
    #[diagnostic(code(uwf::thread::not_suspended))]
    NotSuspended {
        /// The id.
        thread: ThreadId,
        /// What the moderator decides instead.
        next: String,
    },

    /// A thread was started with an empty task.
    #[error("the prompt is empty")]
    #[diagnostic(code(uwf::thread::empty_prompt))]
    EmptyPrompt,

    /// A hash that is not a StartNode or StepNode where one was needed.
    #[error("{hash} is not a StepNode")]
    #[diagnostic(code(uwf::thread::not_a_step))]
    NotAStep {
        /// The hash.
        hash: String,
    },

    /// A parent state that is not a thread node.
    #[error("--parent {hash} is not a usable parent state: {source}")]
    #[diagnostic(code(uwf::thread::bad_parent))]
    BadParent {
        /// The hash given.
        hash: String,
        /// Why it cannot be loaded as a thread.
        #[source]
        source: Box<uwf_moderator::thread::ThreadError>,
    },

    /// The agent could not be started.
    #[error("cannot start agent {command:?}: {source}")]
    #[diagnostic(code(uwf::agent::spawn))]
    AgentSpawn {
        /// The program.
        command: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The agent failed or misbehaved; the thread is unchanged.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Agent(Box<AgentFailure>),

    /// A StepNode offered for a thread (by a person's answer, …) failed the
    /// checks before the head may move; the thread is unchanged.
    #[error("the step offered for thread {thread} was not applied: {rejection}")]
    #[diagnostic(code(uwf::thread::rejected))]
    Rejected {
        /// The thread.
        thread: ThreadId,
        /// Why.
        rejection: Rejection,
    },
}

impl EngineError {
    /// Whether the step ended because its thread was killed.
    pub fn is_killed(&self) -> bool {
        matches!(
            self,
            EngineError::Killed { .. } | EngineError::KilledBeforeStart { .. }
        )
    }

    /// Whether this says the thread is archived now (killed, finished by
    /// another step, or finished before): it cannot be run on, only forked.
    pub fn thread_is_over(&self) -> bool {
        self.is_killed()
            || matches!(
                self,
                EngineError::FinishedMeanwhile { .. } | EngineError::ThreadFinished { .. }
            )
    }

    /// Whether this says that the nodes of one thread are missing or
    /// damaged (its head, its chain, its StartNode or Workflow, its attempt
    /// records), as opposed to the whole store failing: a command going
    /// through many threads reports such a thread and goes on with the
    /// others.
    pub fn is_thread_damage(&self) -> bool {
        use uwf_cas::StoreErrorKind;
        use uwf_moderator::thread::ThreadError;
        let damage = |e: &uwf_cas::CasError| {
            matches!(
                e.kind(),
                StoreErrorKind::NotFound | StoreErrorKind::Corrupt | StoreErrorKind::Invalid
            )
        };
        match self {
            EngineError::Cas(e) | EngineError::Thread(ThreadError::Cas(e)) => damage(e),
            EngineError::Thread(_)
            | EngineError::NotAStep { .. }
            | EngineError::CorruptState { .. } => true,
            _ => false,
        }
    }

    /// Whether the step did not run for lack of a concurrency slot.
    pub fn is_no_slot(&self) -> bool {
        matches!(
            self,
            EngineError::NoSlot { .. } | EngineError::Evicted { .. }
        )
    }

    /// Whether this is worth trying again later as it is: the store could
    /// not be reached (a database restarting, a network cut), by the engine
    /// or by the agent (which then exits with [`EXIT_UNAVAILABLE`]).
    pub fn is_unavailable(&self) -> bool {
        use uwf_cas::StoreErrorKind;
        match self {
            EngineError::State(e) => e.kind() == uwf_state::ErrorKind::Unavailable,
            EngineError::Cas(e) => e.kind() == StoreErrorKind::Unavailable,
            EngineError::Backend(e) => e.is_unavailable(),
            EngineError::Thread(uwf_moderator::thread::ThreadError::Cas(e)) => {
                e.kind() == StoreErrorKind::Unavailable
            }
            EngineError::Agent(f) => f.unavailable,
            _ => false,
        }
    }
}

/// The message of [`EngineError::FinishedMeanwhile`].
fn finished_meanwhile(thread: &ThreadId, reason: &str) -> String {
    match reason {
        "done" => format!(
            "thread {thread} was finished by another step while this one ran (it reached `$END`); this step was not applied"
        ),
        other => format!(
            "thread {thread} was archived by another uwf process while this step ran (reason {other}); this step was not applied"
        ),
    }
}

/// The exit status of an agent that could not reach the store
/// ([`uwf_protocol::agent_env::EXIT_UNAVAILABLE`]).
pub const EXIT_UNAVAILABLE: u8 = uwf_protocol::agent_env::EXIT_UNAVAILABLE;

/// An agent failed or produced something unusable.
#[derive(Debug, Error, Diagnostic)]
// The stderr was streamed as the agent ran (`Progress::agent_line`): the
// report does not repeat it; the tail stays here and in the attempt record.
#[error("agent {agent} (role {role}) {reason}")]
#[diagnostic(code(uwf::agent::failed))]
pub struct AgentFailure {
    /// The agent (alias or command).
    pub agent: String,
    /// The role it ran.
    pub role: String,
    /// What went wrong.
    pub reason: String,
    /// The end of its stderr.
    pub stderr_tail: String,
    /// It failed because the store could not be reached (it exited with
    /// [`EXIT_UNAVAILABLE`]): trying again later is the answer.
    pub unavailable: bool,
}
