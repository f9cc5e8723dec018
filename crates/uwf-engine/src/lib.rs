//! The uwf engine as a library: start a thread, run one step of it (the cycle of
//! docs/state.md, "Thread lifecycle", with its concurrency slots), run it to the end, fork it, kill it.
//!
//! The engine owns the whole step cycle: it resolves the head, asks the
//! moderator for the next role, resolves the agent, takes a concurrency
//! slot, runs and supervises the agent (timeouts, retries, the kill flag,
//! cancellation), checks the StepNode the agent offers ([`check`]), moves
//! the head by compare-and-swap and archives the thread at `$END`. It keeps
//! no state of its own: everything lives in the object store ([`Cas`]) and
//! the thread state ([`ThreadStore`]), so any number of engines, in any
//! number of processes, can share a store. (It only remembers, to save work,
//! the threads its last steps left, each used only while the thread's head
//! is still that step's: see docs/performance.md, "History".)
//!
//! Front ends (the `uwf` binary, a worker, a test) create an [`Engine`] over
//! the stores, pass [`StepOptions`] (with a [`CancelToken`] they control and
//! a [`Progress`] sink of their own) and render what comes back.
//!
//! `examples/embed.rs` is a complete program: it starts a thread of a
//! workflow and steps it to `$END` with a closure as the agent.

pub mod check;
pub mod copy;
mod error;
pub mod human;
pub mod keep;
pub mod nested;
mod ops;
mod progress;
#[cfg(test)]
mod race_tests;
mod recent;
pub mod replay;
pub mod retry;
pub mod running;
pub mod secrets;
pub mod spawn;
mod stdio;
mod step;
pub mod suite;
pub mod suspend;
pub mod verify;
pub mod worker;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use error::{AgentFailure, EXIT_UNAVAILABLE, EngineError};
pub use ops::{
    Ran, Started, apply_offered, check_first_agent, fork, kill, ready_to_start, run, start,
    workflow_of,
};
pub use progress::{NoProgress, Progress};
pub use step::*;
use uwf_cas::Cas;
use uwf_state::{FsState, RunQueue, ThreadStore};

/// Environment variable telling an agent how uwf names it
/// ([`uwf_protocol::agent_env::AGENT`]).
pub const AGENT_ENV: &str = uwf_protocol::agent_env::AGENT;

/// Environment variable naming the store relay an agent reaches its store
/// through ([`uwf_relay`]; docs/postgres.md, "The store relay").
pub const RELAY_ENV: &str = uwf_protocol::agent_env::RELAY;

pub use uwf_backend as backend;

/// Environment variable giving an agent the head its step starts from
/// ([`uwf_protocol::agent_env::HEAD`]).
pub const HEAD_ENV: &str = uwf_protocol::agent_env::HEAD;

/// Environment variable giving an agent the edge prompt of the moderator's
/// decision at [`HEAD_ENV`] ([`uwf_protocol::agent_env::EDGE_PROMPT`]).
pub const EDGE_PROMPT_ENV: &str = uwf_protocol::agent_env::EDGE_PROMPT;

/// A cancellation flag the caller owns: set it (from a signal handler,
/// another thread, a shutdown path) and the running step stops its agent,
/// applies nothing and returns [`EngineError::Interrupted`].
pub use uwf_util::supervise::CancelToken;

/// An engine over one store: the object store and the thread state.
pub struct Engine {
    pub(crate) cas: Cas,
    pub(crate) state: Arc<dyn ThreadStore>,
    /// The run queue of `uwf worker`, when the store has one.
    pub(crate) runs: Option<Arc<dyn RunQueue>>,
    /// What an agent needs in its environment to open the same store.
    pub(crate) store_env: Vec<(String, OsString)>,
    /// Prepended to an agent's `PATH` (where agents installed beside the
    /// front end's binary are found).
    pub(crate) agent_dir: Option<PathBuf>,
    /// Where running markers, agent logs and step timings go
    /// ([`running`]); `None`: not kept.
    pub(crate) run_dir: Option<PathBuf>,
    /// Secrets of the store besides its `.env` (a password in its URL):
    /// cut out of everything the engine writes ([`secrets`]).
    pub(crate) secrets: Vec<(String, String)>,
    /// The threads the last steps of this engine left ([`recent`]).
    pub(crate) recent: recent::Recent,
    /// Whether the agents this engine runs get a store relay
    /// ([`uwf_relay`]), which checks the nodes they store (so that an
    /// agent compiles no schema) and, on a networked store, serves their
    /// reads too (so that an agent needs no connection of its own).
    pub(crate) serves_relay: bool,
}

impl Engine {
    /// The embedded default: the filesystem store under `root` (docs/state.md's
    /// layout). Agents get `root` in their environment.
    pub fn open(root: &Path) -> Result<Self, EngineError> {
        Ok(Self {
            cas: Cas::open(root)?,
            state: Arc::new(FsState::new(root)),
            runs: Some(Arc::new(FsState::new(root))),
            store_env: vec![(
                uwf_util::root::ENV_ROOT.to_string(),
                root.as_os_str().to_owned(),
            )],
            agent_dir: None,
            run_dir: Some(root.to_path_buf()),
            secrets: Vec::new(),
            recent: recent::Recent::default(),
            serves_relay: true,
        })
    }

    /// An engine over any stores. `store_env` is what an agent needs in its
    /// environment to open the same store (for the filesystem store:
    /// [`uwf_util::root::ENV_ROOT`] and the root).
    pub fn with_stores(
        cas: Cas,
        state: Arc<dyn ThreadStore>,
        store_env: Vec<(String, OsString)>,
    ) -> Self {
        Self {
            cas,
            state,
            runs: None,
            store_env,
            agent_dir: None,
            run_dir: None,
            secrets: Vec::new(),
            recent: recent::Recent::default(),
            serves_relay: false,
        }
    }

    /// Keeps running markers, agent logs and step timings under `dir`
    /// ([`running`]); [`Engine::open`] keeps them under its root.
    pub fn with_run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.run_dir = Some(dir.into());
        self
    }

    /// Where running markers, agent logs and step timings are kept, if anywhere.
    pub fn run_dir(&self) -> Option<&Path> {
        self.run_dir.as_deref()
    }

    /// Every agent this engine starts also gets `key=value` in its
    /// environment (for example the call depth of a nested run).
    pub fn with_agent_env(mut self, key: impl Into<String>, value: impl Into<OsString>) -> Self {
        self.store_env.push((key.into(), value.into()));
        self
    }

    /// Agents are looked up in `dir` first (for example the directory of the
    /// front end's own binary, where uwf's agents are installed).
    pub fn with_agent_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.agent_dir = Some(dir.into());
        self
    }

    /// The object store.
    pub fn cas(&self) -> &Cas {
        &self.cas
    }

    /// The thread state.
    pub fn state(&self) -> &dyn ThreadStore {
        self.state.as_ref()
    }

    /// Serves the store to every agent this engine runs through a relay
    /// ([`uwf_relay`]; docs/postgres.md, "The store relay"), which also
    /// checks the nodes they store.
    pub fn serving_relay(mut self) -> Self {
        self.serves_relay = true;
        self
    }

    /// Gives the engine the run queue of its store (for `uwf worker` and
    /// `thread run --detach`); [`Engine::open`] has the filesystem's.
    pub fn with_run_queue(mut self, runs: Arc<dyn RunQueue>) -> Self {
        self.runs = Some(runs);
        self
    }

    /// The object store and the thread state, for a program that needs
    /// them without the engine (an agent reading its thread).
    pub fn into_stores(self) -> (Cas, Arc<dyn ThreadStore>) {
        (self.cas, self.state)
    }

    /// The run queue of the store, if it has one.
    pub fn run_queue(&self) -> Option<&Arc<dyn RunQueue>> {
        self.runs.as_ref()
    }

    /// The engine over a store [`uwf_backend::Backends`] opened: its
    /// agents get what they need to reach the same store, its secrets are
    /// cut out of what it writes, and on a networked store it serves its
    /// agents the store over a relay.
    pub fn from_opened(opened: uwf_backend::Opened) -> Result<Self, EngineError> {
        let uwf_backend::Opened {
            stores,
            agent_env,
            secrets,
            run_dir,
            serve_relay,
            relayed: _,
        } = opened;
        let mut engine = Engine::with_stores(Cas::new(stores.objects)?, stores.state, agent_env)
            .with_run_dir(run_dir);
        engine.runs = stores.runs;
        engine.serves_relay = serve_relay;
        engine.secrets = secrets;
        Ok(engine)
    }

    /// [`uwf_backend::Backends::open_resolved`] then [`from_opened`](Self::from_opened):
    /// the engine a command (or an agent, with `flag` `None`) uses on the
    /// storage root `root`.
    pub fn open_resolved(
        backends: &uwf_backend::Backends,
        flag: Option<&str>,
        root: &Path,
    ) -> Result<Self, EngineError> {
        Self::from_opened(backends.open_resolved(flag, root)?)
    }
}
