//! What can go wrong reading or changing the state, as one error type for
//! every backend ([`StateError`]).

use std::fmt;
use std::io;
use std::path::PathBuf;

use miette::Diagnostic;
use thiserror::Error;
use uwf_protocol::{Hash, ThreadId};

use uwf_util::atomic::AtomicError;
use uwf_util::lock::LockError;

use crate::agents::SplitError;
use crate::state::THREADS_FILE;

/// Help shown with every [`StateError::Parse`].
pub const PARSE_HELP: &str = "fix or move the file; uwf never overwrites a file it cannot parse";

/// A failure reading or changing the state files.
#[derive(Debug, Error, Diagnostic)]
pub enum StateError {
    /// Reading, creating or truncating a file failed.
    #[error("cannot access {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A state file exists but cannot be parsed.
    #[error("cannot parse {} at {}: {message}", path.display(), Position(*line, *column))]
    #[diagnostic(help("{PARSE_HELP}"))]
    Parse {
        /// The file.
        path: PathBuf,
        /// One-based line of the problem (0 if unknown).
        line: usize,
        /// One-based column of the problem (0 if unknown).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The configuration a shared store keeps (a row, not a file) cannot
    /// be parsed: fixing it means writing a new one, not editing a file.
    #[error("cannot parse {origin} at {}: {message}", Position(*line, *column))]
    #[diagnostic(help(
        "write a valid one and share it again; every machine on the store reads it"
    ))]
    StoredConfig {
        /// Where it is kept, e.g. `<url> (table uwf_config)`.
        origin: String,
        /// One-based line of the problem (0 if unknown).
        line: usize,
        /// One-based column of the problem (0 if unknown).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The state lock could not be taken.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Lock(#[from] LockError),
    /// A file could not be written.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Atomic(#[from] AtomicError),
    /// [`FsState::insert_thread`](crate::state::FsState::insert_thread) with an id that is already active.
    #[error("thread {thread} already exists in {THREADS_FILE}")]
    #[diagnostic(help("thread ids must be unique; start the thread with a fresh id"))]
    ThreadExists {
        /// The thread id.
        thread: ThreadId,
    },
    /// A compare-and-swap on a thread's head lost: someone else moved or
    /// archived the thread since it was read.
    #[error(
        "thread {thread} changed concurrently: expected head {expected}, {}",
        Actual(actual)
    )]
    Conflict {
        /// The thread id.
        thread: ThreadId,
        /// The head the caller expected.
        expected: Hash,
        /// The head found, or `None` if the thread is no longer active.
        actual: Option<Hash>,
    },
    /// A node the new root would reach is not in the store: a garbage
    /// collection removed it after it was written and before it could be
    /// installed (`docs/state.md`, "Garbage collection"). Nothing changed.
    #[error(
        "node {missing}, which {root} reaches, is no longer in the store: a garbage collection removed it before it could be recorded"
    )]
    NodeGone {
        /// The head (or registry entry) that was to be installed.
        root: Hash,
        /// The node that is gone.
        missing: Hash,
    },
    /// The check of a [`NodeGuard`](crate::guard::NodeGuard) could not
    /// read the node store.
    #[error("cannot check the nodes {root} reaches: {message}")]
    NodeCheck {
        /// The head (or registry entry) that was to be installed.
        root: Hash,
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A thread id that cannot name a thread (not ASCII letters and digits).
    #[error("{thread:?} is not a thread id")]
    BadThreadId {
        /// The text given.
        thread: String,
    },
    /// The thread is not active.
    #[error("thread {thread} is not active")]
    NotActive {
        /// The thread id.
        thread: ThreadId,
    },
    /// Nothing says which agent runs a role.
    #[error("no agent configured for role {role:?} of workflow {workflow:?}")]
    NoAgent {
        /// The workflow name.
        workflow: String,
        /// The role.
        role: String,
    },
    /// `defaultAgent` or an `agentOverrides` entry names an alias that is
    /// not defined under `agents`.
    #[error("agent alias {alias:?} is not defined under `agents` in {}", path.display())]
    #[diagnostic(help(
        "define it under `agents:` or point defaultAgent / agentOverrides at an existing alias"
    ))]
    UnknownAgentAlias {
        /// The alias.
        alias: String,
        /// The configuration file.
        path: PathBuf,
    },
    /// An agent command line that cannot be split into a command and args.
    #[error("invalid agent command {command:?}: {source}")]
    #[diagnostic(help(
        "give a program and its arguments, quoting with '…' or \"…\"; variables and globs are not expanded"
    ))]
    AgentCommand {
        /// The command line as given.
        command: String,
        /// Why it cannot be split.
        source: SplitError,
    },
    /// [`RunQueue::enqueue`](crate::runs::RunQueue::enqueue) of a thread
    /// whose run is queued or claimed already.
    #[error("thread {thread} is already queued to run ({state})")]
    #[diagnostic(help("a worker runs it; the thread's run says which"))]
    AlreadyQueued {
        /// The thread id.
        thread: ThreadId,
        /// `queued`, or which worker holds it.
        state: String,
    },
    /// A worker's claim on a run is gone: its lease ran out and another
    /// worker claimed the thread, or the run was removed.
    #[error("worker {worker} no longer holds the run of thread {thread}: {why}")]
    LeaseLost {
        /// The thread id.
        thread: ThreadId,
        /// The worker that held it.
        worker: String,
        /// What the record says now.
        why: String,
    },
    /// A failure of a storage backend other than the filesystem (a
    /// database), already classified by the backend. The message never
    /// holds a secret such as a password.
    #[error("{backend} store: {message}")]
    Backend {
        /// The backend's name (e.g. `"postgres"`).
        backend: &'static str,
        /// What the failure means to the caller.
        kind: crate::store::ErrorKind,
        /// What went wrong, for people.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A malformed line in the `.env` file.
    #[error("cannot parse {} at line {line}: {message}", path.display())]
    #[diagnostic(help("fix the line; entries look like KEY=value, and quotes must be closed"))]
    Env {
        /// The file.
        path: PathBuf,
        /// One-based line of the problem.
        line: usize,
        /// What is wrong (never the line's content, which may hold a secret).
        message: String,
    },
}

/// Formats a one-based line/column pair, or says it is unknown.
pub(crate) struct Position(usize, usize);

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (0, _) => f.write_str("an unknown position"),
            (line, 0) => write!(f, "line {line}"),
            (line, column) => write!(f, "line {line}, column {column}"),
        }
    }
}

/// Formats the `actual` of a [`StateError::Conflict`].
pub(crate) struct Actual<'a>(&'a Option<Hash>);

impl fmt::Display for Actual<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(head) => write!(f, "found {head}"),
            None => f.write_str("but it is no longer active"),
        }
    }
}
