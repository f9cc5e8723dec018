//! [`ThreadStore`] for [`FsState`], the embedded filesystem backend.

use std::time::Duration;

use uwf_protocol::{
    AttemptsIndex, Hash, HistoryEntry, ThreadId, ThreadsIndex, WaitingIndex, WaitingRecord,
    WorkflowConfig, WorkflowLimits, WorkflowRegistry,
};
use uwf_util::lock::LockError;

use crate::guard::{GcEpoch, NodeGuard};
use crate::slots::{SlotError, SlotGuard, Slots, Waiting};
use crate::state::{FsState, StateError};
use crate::store::{
    Collecting, ConcurrencySlots, ErrorKind, Heads, Registry, Settings, SideTables, SlotHold,
    ThreadStore,
};

impl SlotHold for SlotGuard {
    fn index(&self) -> u32 {
        SlotGuard::index(self)
    }
}

impl StateError {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            StateError::Backend { kind, .. } => *kind,
            StateError::Conflict { .. }
            | StateError::ThreadExists { .. }
            | StateError::AlreadyQueued { .. }
            | StateError::LeaseLost { .. } => ErrorKind::Conflict,
            StateError::NotActive { .. } => ErrorKind::NotFound,
            // The writer's nodes are gone: writing them again is a new
            // attempt, like a lost race.
            StateError::NodeGone { .. } => ErrorKind::Conflict,
            StateError::NodeCheck { .. } => ErrorKind::Io,
            StateError::Lock(LockError::Timeout { .. }) => ErrorKind::Unavailable,
            StateError::Parse { .. } | StateError::StoredConfig { .. } | StateError::Env { .. } => {
                ErrorKind::Corrupt
            }
            StateError::BadThreadId { .. }
            | StateError::NoAgent { .. }
            | StateError::UnknownAgentAlias { .. }
            | StateError::AgentCommand { .. } => ErrorKind::Invalid,
            StateError::Io { .. } | StateError::Lock(_) | StateError::Atomic(_) => ErrorKind::Io,
        }
    }
}

impl ThreadStore for FsState {
    fn describe(&self) -> String {
        self.root().display().to_string()
    }

    fn check_writable(&self) -> Result<(), StateError> {
        // Every change takes the state lock first: one that can be taken
        // (and is released at once) is what a change needs.
        self.locked(|| Ok(()))
    }
}

impl Heads for FsState {
    fn thread_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        FsState::thread_head(self, thread)
    }

    fn threads(&self) -> Result<ThreadsIndex, StateError> {
        FsState::threads(self)
    }

    fn insert_thread(
        &self,
        thread: ThreadId,
        head: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        FsState::insert_thread(self, thread, head, guard)
    }

    fn swap_head(
        &self,
        thread: ThreadId,
        expected: Hash,
        new: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        FsState::swap_head(self, thread, expected, new, guard)
    }

    fn gc_epoch(&self) -> Result<GcEpoch, StateError> {
        FsState::gc_epoch(self)
    }

    fn archive(
        &self,
        thread: ThreadId,
        workflow: Hash,
        expected_head: Option<Hash>,
        reason: &str,
    ) -> Result<HistoryEntry, StateError> {
        FsState::archive(self, thread, workflow, expected_head, reason)
    }

    fn history(&self) -> Result<Vec<HistoryEntry>, StateError> {
        FsState::history(self)
    }

    fn find_archived(&self, thread: ThreadId) -> Result<Option<HistoryEntry>, StateError> {
        FsState::find_archived(self, thread)
    }

    fn import_history(&self, entries: &[HistoryEntry]) -> Result<usize, StateError> {
        FsState::import_history(self, entries)
    }
}

impl Registry for FsState {
    fn registry(&self) -> Result<WorkflowRegistry, StateError> {
        FsState::registry(self)
    }

    fn register_workflow(
        &self,
        name: &str,
        hash: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<Option<Hash>, StateError> {
        FsState::register_workflow(self, name, hash, guard)
    }
}

impl Settings for FsState {
    fn config(&self) -> Result<Option<WorkflowConfig>, StateError> {
        FsState::config(self)
    }

    fn config_name(&self) -> String {
        self.config_path().display().to_string()
    }

    fn secrets(&self) -> Result<Vec<(String, String)>, StateError> {
        FsState::env_vars(self)
    }

    fn config_text(&self) -> Result<Option<String>, StateError> {
        FsState::config_text(self)
    }

    fn set_config_text(&self, text: Option<&str>) -> Result<(), StateError> {
        FsState::set_config_text(self, text)
    }

    fn replace_config_text(&self, expected: Option<&str>, new: &str) -> Result<bool, StateError> {
        FsState::replace_config_text(self, expected, new)
    }
}

impl SideTables for FsState {
    fn waiting(&self) -> Result<WaitingIndex, StateError> {
        FsState::waiting(self)
    }

    fn waiting_of(&self, thread: ThreadId) -> Result<Option<WaitingRecord>, StateError> {
        FsState::waiting_of(self, thread)
    }

    fn mark_waiting(&self, thread: ThreadId, record: WaitingRecord) -> Result<bool, StateError> {
        FsState::mark_waiting(self, thread, record)
    }

    fn attempts(&self) -> Result<AttemptsIndex, StateError> {
        FsState::attempts(self)
    }

    fn attempt_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        FsState::attempt_head(self, thread)
    }

    fn record_attempt(
        &self,
        thread: ThreadId,
        write: &mut dyn FnMut(Option<Hash>) -> Result<Hash, StateError>,
    ) -> Result<Hash, StateError> {
        FsState::record_attempt(self, thread, write)
    }
}

impl ConcurrencySlots for FsState {
    fn acquire_slot(
        &self,
        workflow: &str,
        limits: WorkflowLimits,
        poll: Option<Duration>,
        on_wait: &mut dyn FnMut(&Waiting) -> bool,
    ) -> Result<Box<dyn SlotHold>, SlotError> {
        let mut slots = Slots::new(self.root(), workflow, limits);
        if let Some(poll) = poll {
            slots = slots.with_poll(poll);
        }
        Ok(Box::new(slots.acquire(on_wait)?))
    }
}

impl Collecting for FsState {
    fn while_collecting(
        &self,
        f: &mut dyn FnMut() -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        FsState::while_collecting(self, f)
    }

    fn begin_sweep(&self) -> Result<GcEpoch, StateError> {
        FsState::begin_sweep(self)
    }

    fn side_table_roots_locked(&self, prune: bool) -> Result<Vec<Hash>, StateError> {
        FsState::side_table_roots_locked(self, prune)
    }
}
