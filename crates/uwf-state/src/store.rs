//! The storage seam for the mutable state: what the engine needs, as a
//! trait a backend implements.
//!
//! [`FsState`](crate::FsState) is the embedded filesystem backend. A
//! networked backend with real transactions (PostgreSQL) implements the same
//! trait; nothing here hands out a filesystem path, and every error says
//! through [`StateError::kind`] whether it is a lost race
//! ([`ErrorKind::Conflict`]), worth retrying ([`ErrorKind::Unavailable`]) or
//! damaged data ([`ErrorKind::Corrupt`]).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use uwf_protocol::{
    AttemptsIndex, Hash, HistoryEntry, ThreadId, ThreadsIndex, WaitingIndex, WaitingRecord,
    WorkflowConfig, WorkflowLimits, WorkflowRegistry,
};

use crate::guard::{GcEpoch, NodeGuard};
use crate::slots::{SlotError, Waiting};
use crate::state::{ResolvedAgent, StateError};

/// What kind of failure a [`StateError`] is, for callers that decide what
/// to do next (retry, report a race, tell the user to repair the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A compare-and-swap lost, or the thread is not in the expected state:
    /// someone else changed it. Re-read and decide again.
    Conflict,
    /// The thing asked for does not exist (for example a thread that is not
    /// active).
    NotFound,
    /// The backend cannot be reached or is busy (a lock that was not
    /// granted in time, a connection that dropped): the same call may
    /// succeed later.
    Unavailable,
    /// Stored data cannot be parsed or contradicts itself; a person must
    /// look at it. Nothing was overwritten.
    Corrupt,
    /// The request itself is wrong (for example an agent configuration that
    /// names an undefined alias); retrying does not help.
    Invalid,
    /// Any other I/O failure.
    Io,
}

/// A concurrency slot held while an agent runs (docs/state.md, "Slots"); dropping it
/// frees the slot.
pub trait SlotHold: Send {
    /// The slot's index within the workflow's `concurrency`.
    fn index(&self) -> u32;
}

/// The mutable state of a store, as the engine and the commands use it.
///
/// Thread ids and hashes are typed ([`ThreadId`], [`struct@Hash`]); a backend
/// stores them as their canonical text or as numbers, as it likes, as long
/// as they come back equal. Implementations must make
/// [`swap_head`](Heads::swap_head), [`archive`](Heads::archive) and
/// [`insert_thread`](Heads::insert_thread) atomic with respect to each other
/// and to every other process using the same store.
pub trait ThreadStore:
    Heads + Registry + Settings + SideTables + ConcurrencySlots + Collecting + Send + Sync + fmt::Debug
{
    /// A short description of where the state lives, for messages (never a
    /// secret such as a password).
    fn describe(&self) -> String;

    /// Fails as a change of the state would fail now (a lock that cannot
    /// be taken, a state directory that cannot be written), changing
    /// nothing. A caller checks this before it stores nodes that only a
    /// state change would make reachable (the StartNode of a new thread),
    /// so that a change refused for such a reason leaves the store as it
    /// was (docs/state.md, "Thread lifecycle"). The default: nothing to
    /// check (a database refuses or takes a change as a whole).
    fn check_writable(&self) -> Result<(), StateError> {
        Ok(())
    }

    /// From now on, reads through this store see it as it is now, in one
    /// consistent snapshot, as far as the backend can (PostgreSQL: one
    /// read-only transaction); writes are not affected. For a command
    /// that only reads. The default (the filesystem store, which has no
    /// snapshots) does nothing.
    fn read_in_one_snapshot(&self) -> Result<(), StateError> {
        Ok(())
    }

    /// Announcements of moved heads, for a store that can push them (a
    /// database with LISTEN/NOTIFY): a step whose agent runs a long time
    /// then asks the store for its thread's head only when a notice came,
    /// instead of several times a second. `None`: ask the store (a
    /// directory, where reading a head is a local file read).
    fn head_notices(&self) -> Option<std::sync::Arc<dyn HeadNotices>> {
        None
    }

    /// What a step reads before anything else: the collection epoch and
    /// the head of `thread` ([`epoch_and_head`](Heads::epoch_and_head)),
    /// and the configuration ([`config`](Settings::config)), whose error,
    /// if any, is the step's only when it needs the configuration. The
    /// default reads them one after the other; a backend may read them at
    /// once (PostgreSQL: one statement, where each was a transaction).
    fn step_start(&self, thread: ThreadId) -> Result<StepStart, StateError> {
        let (epoch, head) = self.epoch_and_head(thread)?;
        Ok(StepStart {
            epoch,
            head,
            config: self.config(),
        })
    }
}

/// A node handed to [`Heads::swap_head_storing`], as a node store keeps
/// it: its hash, its type's hash, its payload as JSON bytes (the encoding
/// of `uwf_cas::Node::payload` that stores keep) and when it was made (ms
/// since the Unix epoch).
#[derive(Debug, Clone, Copy)]
pub struct NodeRow<'a> {
    /// The node's hash.
    pub hash: Hash,
    /// Its type's hash.
    pub type_hash: Hash,
    /// Its payload, JSON.
    pub payload: &'a [u8],
    /// When it was made.
    pub timestamp: u64,
}

/// What [`ThreadStore::step_start`] read.
#[derive(Debug)]
pub struct StepStart {
    /// The collection epoch, read before the head.
    pub epoch: GcEpoch,
    /// The thread's head (`None`: not active).
    pub head: Option<Hash>,
    /// The configuration, or why it could not be read.
    pub config: Result<Option<WorkflowConfig>, StateError>,
}

/// Which threads are active and where their heads are, and the history of
/// the ended ones: the compare-and-swap at the heart of a step.
/// Part of [`ThreadStore`]; a backend implements every part.
pub trait Heads {
    /// The head of `thread` if it is active. This is also the kill flag: a
    /// running step reads it and stops once the thread is gone or its head
    /// moved, so it must be cheap (a store with [`head_notices`](ThreadStore::head_notices)
    /// is read less often).
    fn thread_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError>;

    /// Every active thread and its head.
    fn threads(&self) -> Result<ThreadsIndex, StateError>;

    /// Adds a new active thread; [`StateError::ThreadExists`] if the id is
    /// already active. With the store lock held, `guard` proves `head` and
    /// what it reaches are still in the node store
    /// ([`crate::guard`]); [`StateError::NodeGone`] otherwise, and nothing
    /// changes.
    fn insert_thread(
        &self,
        thread: ThreadId,
        head: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError>;

    /// Compare-and-swap of a head: succeeds only if the thread is active and
    /// its head is `expected`; otherwise [`StateError::Conflict`] with the
    /// current head (or `None` if the thread is no longer active). With the
    /// store lock held, `guard` proves `new` and what it reaches are still in
    /// the node store ([`crate::guard`]); [`StateError::NodeGone`]
    /// otherwise, and nothing changes.
    fn swap_head(
        &self,
        thread: ThreadId,
        expected: Hash,
        new: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError>;

    /// [`swap_head`](Self::swap_head) that also stores `nodes` (not stored
    /// yet; `new` and nodes it reaches), in one transaction, for a backend
    /// that keeps nodes in the same database as heads: one commit to wait
    /// for where there were two. `Ok(true)`: stored and moved.
    /// `Ok(false)`: the head did not move (this default always says so;
    /// a backend says so too when another head, a collection or a guard
    /// that must run its check needs the general path), and the caller
    /// stores the nodes and calls [`swap_head`](Self::swap_head), which
    /// reports what stopped the move. Nodes stored by a call that answered
    /// `false` are harmless: content named by its hash, stored again.
    fn swap_head_storing(
        &self,
        thread: ThreadId,
        expected: Hash,
        new: Hash,
        nodes: &[NodeRow<'_>],
        guard: &NodeGuard<'_>,
    ) -> Result<bool, StateError> {
        let _ = (thread, expected, new, nodes, guard);
        Ok(false)
    }

    /// The garbage-collection epoch ([`crate::guard`]): read it before
    /// storing nodes that a root will reach, and hand it back in the
    /// [`NodeGuard`] of the call that installs the root. Cheap, lock-free.
    fn gc_epoch(&self) -> Result<GcEpoch, StateError>;

    /// The collection epoch and then the head of `thread`, as
    /// [`gc_epoch`](Heads::gc_epoch) and [`thread_head`](Heads::thread_head)
    /// called in that order give them: what a step reads first. A backend
    /// may read both at once (PostgreSQL: one statement, one snapshot).
    fn epoch_and_head(&self, thread: ThreadId) -> Result<(GcEpoch, Option<Hash>), StateError> {
        let epoch = self.gc_epoch()?;
        Ok((epoch, self.thread_head(thread)?))
    }

    /// Archives an active thread (checking its head against
    /// `expected_head` if given) and returns the history entry written.
    fn archive(
        &self,
        thread: ThreadId,
        workflow: Hash,
        expected_head: Option<Hash>,
        reason: &str,
    ) -> Result<HistoryEntry, StateError>;

    /// Every archived-thread record, oldest first.
    fn history(&self) -> Result<Vec<HistoryEntry>, StateError>;

    /// The latest history entry of `thread`, if it was ever archived.
    fn find_archived(&self, thread: ThreadId) -> Result<Option<HistoryEntry>, StateError>;

    /// Appends the entries of `entries` that the history does not hold yet
    /// (equal in every field), in order, and returns how many were added.
    /// Copying a store uses it; running it again adds nothing.
    fn import_history(&self, entries: &[HistoryEntry]) -> Result<usize, StateError>;
}

/// The workflow registry: a name's latest Workflow node.
/// Part of [`ThreadStore`]; a backend implements every part.
pub trait Registry {
    /// Workflow name → Workflow node hash.
    fn registry(&self) -> Result<WorkflowRegistry, StateError>;

    /// Records `name → hash`; returns the previous hash, if any. `guard`
    /// proves the Workflow node is still in the node store, as for
    /// [`swap_head`](Heads::swap_head).
    fn register_workflow(
        &self,
        name: &str,
        hash: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<Option<Hash>, StateError>;
}

/// The configuration (`config.yaml`, or the row a shared store keeps) and
/// the secrets handed to agents (`.env`).
/// Part of [`ThreadStore`]; a backend implements every part.
pub trait Settings {
    /// The configuration (`None` when there is none).
    fn config(&self) -> Result<Option<WorkflowConfig>, StateError>;

    /// Where the configuration lives, as errors about one of its settings
    /// name it ([`PolicyError::in_config`](crate::policy::PolicyError::in_config),
    /// [`resolve_agent_with`](Settings::resolve_agent_with)) and `uwf config
    /// show` reports it: the path of its `config.yaml` for the filesystem
    /// store, a table for PostgreSQL; bare `config.yaml` by default.
    fn config_name(&self) -> String {
        crate::state::CONFIG_FILE.to_owned()
    }

    /// Which agent runs `role` of `workflow` (`explicit` overrides the
    /// configuration), as [`resolve_agent`](crate::state::resolve_agent)
    /// says, errors naming [`config_name`](Settings::config_name).
    fn resolve_agent_with(
        &self,
        config: Option<&WorkflowConfig>,
        explicit: Option<&str>,
        workflow: &str,
        role: &str,
    ) -> Result<ResolvedAgent, StateError> {
        let origin = self.config_name();
        crate::state::resolve_agent_at(Path::new(&origin), config, explicit, workflow, role)
    }

    /// The secrets of the store (`.env` for the filesystem backend) as
    /// name/value pairs, handed to agents in their environment. Never
    /// logged.
    fn secrets(&self) -> Result<Vec<(String, String)>, StateError>;

    /// The configuration as stored (YAML text, comments kept), `None` when
    /// there is none.
    fn config_text(&self) -> Result<Option<String>, StateError>;

    /// Replaces the configuration with `text` once it parses; `None`
    /// removes it.
    fn set_config_text(&self, text: Option<&str>) -> Result<(), StateError>;

    /// Replaces the configuration with `new` (once it parses) only if it is
    /// still `expected` (`None`: there is none): a compare-and-swap for
    /// read-modify-write editors such as `uwf setup`. `false`, with nothing
    /// written, when it changed meanwhile.
    fn replace_config_text(&self, expected: Option<&str>, new: &str) -> Result<bool, StateError>;
}

/// The side tables of active threads: who waits for a person, the failed
/// attempts of a step, and the markers of agents running on this machine.
/// Part of [`ThreadStore`]; a backend implements every part.
pub trait SideTables {
    /// The threads waiting for a person now (entries whose thread has moved
    /// on are left out).
    fn waiting(&self) -> Result<WaitingIndex, StateError>;

    /// What `thread` waits for now, if anything.
    fn waiting_of(&self, thread: ThreadId) -> Result<Option<WaitingRecord>, StateError> {
        Ok(self.waiting()?.remove(&thread))
    }

    /// Records that `thread` waits as `record` says; `true` if this starts
    /// a wait. [`StateError::Conflict`] unless the thread is active at
    /// `record.head`.
    fn mark_waiting(&self, thread: ThreadId, record: WaitingRecord) -> Result<bool, StateError>;

    /// Thread → newest AttemptRecord node, as stored.
    fn attempts(&self) -> Result<AttemptsIndex, StateError>;

    /// The newest AttemptRecord node of `thread`, if any.
    fn attempt_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        Ok(self.attempts()?.remove(&thread))
    }

    /// Adds an attempt record for `thread`: atomically, `write` gets the
    /// thread's newest record (the new one's `prev`), stores the new node
    /// and returns its hash, which becomes the thread's newest record.
    fn record_attempt(
        &self,
        thread: ThreadId,
        write: &mut dyn FnMut(Option<Hash>) -> Result<Hash, StateError>,
    ) -> Result<Hash, StateError>;

    /// Whether this store keeps the running markers of agents itself, so
    /// that every machine using it sees what runs where (a shared database).
    /// A store that does not (a directory, one machine) leaves the markers
    /// to the files beside the local root (docs/state.md, "What is running").
    fn shares_running(&self) -> bool {
        false
    }

    /// Records `marker` (a running marker, JSON) as what runs for `thread`
    /// now, replacing the one before. Not a root for garbage collection.
    fn put_running(&self, thread: ThreadId, marker: &str) -> Result<(), StateError> {
        let _ = (thread, marker);
        Ok(())
    }

    /// Removes the marker of `thread` if it is still `marker` (exactly as
    /// put): a later step's marker is kept.
    fn clear_running(&self, thread: ThreadId, marker: &str) -> Result<(), StateError> {
        let _ = (thread, marker);
        Ok(())
    }

    /// The marker of `thread` as put, if any.
    fn running_marker(&self, thread: ThreadId) -> Result<Option<String>, StateError> {
        let _ = thread;
        Ok(None)
    }
}

/// The per-workflow concurrency slots (docs/state.md, "Slots").
/// Part of [`ThreadStore`]; a backend implements every part.
pub trait ConcurrencySlots {
    /// Takes a slot of `workflow` as `limits` say, calling `on_wait` while
    /// it waits in the queue (returning `false` gives up with
    /// [`SlotError::Cancelled`]). `poll` is how often a waiter looks again.
    fn acquire_slot(
        &self,
        workflow: &str,
        limits: WorkflowLimits,
        poll: Option<Duration>,
        on_wait: &mut dyn FnMut(&Waiting) -> bool,
    ) -> Result<Box<dyn SlotHold>, SlotError>;
}

/// What garbage collection needs of the state: the lock it holds, the
/// epoch it moves, and the side tables' roots (docs/state.md, "Garbage
/// collection").
/// Part of [`ThreadStore`]; a backend implements every part.
pub trait Collecting {
    /// Runs a garbage collection `f` while no thread, registry or
    /// side-table change can happen (it needs a stable set of roots): takes
    /// the store lock exclusively, runs `f`, and then, whatever `f`
    /// returned, moves an odd [`GcEpoch`] (raised by
    /// [`begin_sweep`](Collecting::begin_sweep)) to the next even one. `f` must not
    /// call the mutating methods.
    fn while_collecting(
        &self,
        f: &mut dyn FnMut() -> Result<(), StateError>,
    ) -> Result<(), StateError>;

    /// Inside [`while_collecting`](Collecting::while_collecting), before the first
    /// node is removed: raises the [`GcEpoch`] to odd, durably, so that a
    /// writer whose nodes may be removed checks them before it installs a
    /// root ([`crate::guard`]). A collection that removes nothing (a dry
    /// run, nothing stale) never calls it and changes nothing.
    fn begin_sweep(&self) -> Result<GcEpoch, StateError>;

    /// With [`while_collecting`](Collecting::while_collecting) held: the newest attempt
    /// record of every active thread (roots that keep its records); with
    /// `prune`, also drops side-table entries of threads that are no longer
    /// active.
    fn side_table_roots_locked(&self, prune: bool) -> Result<Vec<Hash>, StateError>;
}

/// What [`ThreadStore::head_notices`] gives: a way to tell, without asking
/// the store, whether a thread's head may have moved.
pub trait HeadNotices: Send + Sync {
    /// A mark that changes whenever a move of `thread`'s head was announced,
    /// and whenever announcements may have been missed (the listening
    /// connection was opened again). `None` while nothing listens (not yet,
    /// or the connection is down): ask the store instead.
    ///
    /// A reader keeps the mark it saw, reads the head, and reads it again
    /// only when the mark differs — so the mark is taken *before* reading
    /// the head, and a move between the two is never lost.
    fn mark(&self, thread: ThreadId) -> Option<u64>;
}
