//! The mutable state files of a storage root.
//!
//! ```text
//! <root>/
//! ├── threads.yaml    active thread id → head hash
//! ├── registry.yaml   workflow name → Workflow node hash
//! ├── history.jsonl   one JSON line per archived thread
//! ├── config.yaml     providers, models, agents (read only here)
//! ├── .env            API keys (loaded into the environment)
//! └── .state.lock     the advisory lock serialising every mutation
//! ```
//!
//! Rules:
//! - every mutation happens under one exclusive lock on `.state.lock`,
//!   re-reads the file it changes and rewrites it atomically
//!   ([`write_atomic`]); `history.jsonl` only grows ([`append_line`]);
//! - reads take no lock: atomic renames give them consistent snapshots;
//! - a missing file is empty; a file that cannot be parsed is an error
//!   naming the file, line and column, and a mutation refuses to touch it:
//!   uwf never replaces a file it cannot parse;
//! - archiving appends to the history before removing the thread from
//!   `threads.yaml`, so a crash in between leaves the thread in both places
//!   (readers treat "active" as authoritative) instead of losing it.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;
use uwf_protocol::{Hash, HistoryEntry, ThreadId, ThreadsIndex, WorkflowConfig, WorkflowRegistry};

use crate::guard::{GcEpoch, NodeGuard};

pub use crate::agents::{
    AgentSource, ResolvedAgent, SplitError, resolve_agent, resolve_agent_at, split_command_line,
};
use crate::config::parse_yaml;
pub use crate::config::{parse_config, parse_stored_config};
pub use crate::config_files::{ConfigFiles, ConfigFilesWritten, ENV_FILE_MODE};
pub use crate::error::{PARSE_HELP, StateError};
use crate::history::{Tail, history_tail, load_history};

use uwf_util::atomic::{append_line, write_atomic};
use uwf_util::lock::FileLock;

/// File name of the active-threads index.
pub const THREADS_FILE: &str = "threads.yaml";
/// File name of the workflow registry.
pub const REGISTRY_FILE: &str = "registry.yaml";
/// File name of the archive log.
pub const HISTORY_FILE: &str = "history.jsonl";
/// File name of the configuration.
pub const CONFIG_FILE: &str = "config.yaml";
/// File name of the secrets file.
pub const ENV_FILE: &str = ".env";
/// File name of the lock serialising every mutation.
pub const LOCK_FILE: &str = ".state.lock";
/// The garbage-collection epoch ([`crate::guard`]), a number on one line.
pub const GC_EPOCH_FILE: &str = "gc.epoch";

/// How long a mutation waits for [`LOCK_FILE`] before giving up.
///
/// Mutations hold the lock for milliseconds, so reaching this means a
/// wedged process; failing with a clear error beats hanging.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The state files of one storage root.
///
/// Cheap to create and stateless: every call reads the files afresh, so any
/// number of instances (in any number of processes) can share a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsState {
    root: PathBuf,
    lock_timeout: Duration,
}

impl FsState {
    /// State files under `root`. Nothing is touched until a method is called.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FsState {
            root: root.into(),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// The same root with a different lock timeout (default
    /// [`DEFAULT_LOCK_TIMEOUT`]).
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The storage root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/threads.yaml`.
    pub fn threads_path(&self) -> PathBuf {
        self.root.join(THREADS_FILE)
    }

    /// `<root>/registry.yaml`.
    pub fn registry_path(&self) -> PathBuf {
        self.root.join(REGISTRY_FILE)
    }

    /// `<root>/history.jsonl`.
    pub fn history_path(&self) -> PathBuf {
        self.root.join(HISTORY_FILE)
    }

    /// `<root>/config.yaml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    /// `<root>/.env`.
    pub fn env_path(&self) -> PathBuf {
        self.root.join(ENV_FILE)
    }

    /// `<root>/.state.lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join(LOCK_FILE)
    }

    // ----- threads -------------------------------------------------------

    /// The active threads and their heads.
    pub fn threads(&self) -> Result<ThreadsIndex, StateError> {
        self.read_heads()
    }

    /// The head of `thread` if it is active.
    pub fn thread_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        self.read_head(thread)
    }

    /// Adds a new active thread; [`StateError::ThreadExists`] if the id is
    /// already active.
    ///
    /// With the lock held, `guard` proves `head` is still in the node store
    /// ([`crate::guard`]).
    pub fn insert_thread(
        &self,
        thread: ThreadId,
        head: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        self.locked(|| {
            self.migrate_heads_locked()?;
            if self.read_head(thread)?.is_some() {
                return Err(StateError::ThreadExists { thread });
            }
            self.verify_guard_locked(guard)?;
            self.write_head_locked(thread, head)
        })
    }

    /// Compare-and-swap of a head: succeeds only if the thread is active and
    /// its head is `expected`.
    ///
    /// Otherwise [`StateError::Conflict`] with `actual` set to the current
    /// head, or `None` if the thread is no longer active.
    ///
    /// With the lock held, `guard` proves `new` is still in the node store
    /// ([`crate::guard`]).
    pub fn swap_head(
        &self,
        thread: ThreadId,
        expected: Hash,
        new: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        self.locked(|| {
            self.migrate_heads_locked()?;
            check_head(self.read_head(thread)?, thread, Some(expected))?;
            if expected == new {
                return Ok(());
            }
            self.verify_guard_locked(guard)?;
            self.write_head_locked(thread, new)
        })
    }

    /// The garbage-collection epoch ([`crate::guard`]); `0` before the
    /// first collection.
    pub fn gc_epoch(&self) -> Result<GcEpoch, StateError> {
        let path = self.root.join(GC_EPOCH_FILE);
        let Some(text) = read_text(&path)? else {
            return Ok(GcEpoch::default());
        };
        text.trim()
            .parse::<u64>()
            .map(GcEpoch)
            .map_err(|e| StateError::Parse {
                path,
                line: 1,
                column: 1,
                message: format!("not a collection epoch: {e}"),
            })
    }

    /// Runs `guard`'s check if a collection may have run since its epoch
    /// (state lock held).
    fn verify_guard_locked(&self, guard: &NodeGuard<'_>) -> Result<(), StateError> {
        let now = if guard.needs_epoch() {
            self.gc_epoch()?
        } else {
            GcEpoch::default()
        };
        guard.verify(now)
    }

    /// Runs a garbage collection `f` holding the state lock; afterwards, an
    /// odd collection epoch ([`begin_sweep`](Self::begin_sweep)) moves to
    /// the next even one ([`crate::guard`]).
    pub fn while_collecting<T, E: From<StateError>>(
        &self,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        self.while_locked(|| {
            let out = f();
            let now = self.gc_epoch()?;
            if now.is_collecting() {
                write_atomic(
                    &self.root.join(GC_EPOCH_FILE),
                    format!("{}\n", now.end()).as_bytes(),
                )
                .map_err(StateError::from)?;
            }
            out
        })
    }

    /// With [`while_collecting`](Self::while_collecting) running, before the
    /// first node is removed: the collection epoch becomes odd, on disk
    /// (flushed), so writers know to check their nodes.
    pub fn begin_sweep(&self) -> Result<GcEpoch, StateError> {
        let running = self.gc_epoch()?.begin();
        write_atomic(
            &self.root.join(GC_EPOCH_FILE),
            format!("{running}\n").as_bytes(),
        )?;
        Ok(running)
    }

    /// Archives an active thread and returns the history entry written.
    ///
    /// Under the lock: checks the thread is active and, if `expected_head`
    /// is given, that its head is that one; appends the entry to
    /// `history.jsonl` (flushed to disk); then removes the thread from
    /// `threads.yaml`. A crash between the last two steps leaves the thread
    /// listed in both places rather than lost; archiving it again is fine.
    ///
    /// Errors: [`StateError::NotActive`] if the thread is not active and no
    /// head was expected; [`StateError::Conflict`] if a head was expected
    /// and the thread's head differs or it is no longer active (the same
    /// answer [`swap_head`](Self::swap_head) gives). A corrupt
    /// `threads.yaml` or `history.jsonl` stops it before anything is
    /// written.
    pub fn archive(
        &self,
        thread: ThreadId,
        workflow: Hash,
        expected_head: Option<Hash>,
        reason: &str,
    ) -> Result<HistoryEntry, StateError> {
        self.locked(|| {
            self.migrate_heads_locked()?;
            let head = check_head(self.read_head(thread)?, thread, expected_head)?;

            let history_path = self.history_path();
            self.repair_history_tail_locked()?;

            let entry = HistoryEntry {
                thread,
                workflow,
                head,
                completed_at: now_ms(),
                reason: Some(reason.to_owned()),
            };
            let line = serde_json::to_string(&entry).map_err(|e| StateError::Io {
                path: history_path.clone(),
                source: io::Error::other(e),
            })?;
            append_line(&history_path, &line)?;
            #[cfg(test)]
            tests::crash_point()?;

            self.remove_head_locked(thread)?;
            Ok(entry)
        })
    }

    /// Makes the last line of `history.jsonl` end where a new record can
    /// start (state lock held).
    fn repair_history_tail_locked(&self) -> Result<(), StateError> {
        let history_path = self.history_path();
        match history_tail(&history_path)? {
            Tail::Clean => {}
            Tail::Unterminated => {
                // A complete record missing only its newline: end it.
                append_line(&history_path, "")?;
            }
            Tail::Torn { offset } => {
                // Left by a crashed append (all appends happen under this
                // lock, so nobody is writing it now). That thread is still
                // active and will be archived again; drop the fragment so
                // the next record starts on a line of its own.
                tracing::warn!(
                    path = %history_path.display(),
                    offset,
                    "discarding an incomplete last line of the history (left by an interrupted write)"
                );
                truncate(&history_path, offset)?;
            }
        }
        Ok(())
    }

    /// Appends the entries of `entries` that the history does not hold yet
    /// (equal in every field), in order; returns how many were added. For
    /// copying a store: running it again adds nothing.
    pub fn import_history(&self, entries: &[HistoryEntry]) -> Result<usize, StateError> {
        self.locked(|| {
            self.repair_history_tail_locked()?;
            let path = self.history_path();
            let mut have = self.history()?;
            let mut added = 0;
            for entry in entries {
                if have.contains(entry) {
                    continue;
                }
                let line = serde_json::to_string(entry).map_err(|e| StateError::Io {
                    path: path.clone(),
                    source: io::Error::other(e),
                })?;
                append_line(&path, &line)?;
                have.push(entry.clone());
                added += 1;
            }
            Ok(added)
        })
    }

    /// `config.yaml` as written, `None` if it is missing.
    pub fn config_text(&self) -> Result<Option<String>, StateError> {
        read_text(&self.config_path())
    }

    /// Replaces `config.yaml` with `text` once it parses (atomically, under
    /// the lock); `None` removes it.
    pub fn set_config_text(&self, text: Option<&str>) -> Result<(), StateError> {
        let path = self.config_path();
        if let Some(text) = text {
            parse_config(&path, text)?;
        }
        self.locked(|| match text {
            Some(text) => Ok(write_atomic(&path, text.as_bytes())?),
            None => match fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(StateError::Io {
                    path: path.clone(),
                    source,
                }),
            },
        })
    }

    /// Replaces `config.yaml` with `new` (once it parses) only if its text
    /// is still `expected` (`None`: missing), atomically under the lock;
    /// `false`, with nothing written, when it is not.
    pub fn replace_config_text(
        &self,
        expected: Option<&str>,
        new: &str,
    ) -> Result<bool, StateError> {
        let path = self.config_path();
        parse_config(&path, new)?;
        self.locked(|| {
            if read_text(&path)?.as_deref() != expected {
                return Ok(false);
            }
            write_atomic(&path, new.as_bytes())?;
            Ok(true)
        })
    }

    // ----- history -------------------------------------------------------

    /// Every archived-thread record, in file order (empty if
    /// `history.jsonl` is missing).
    ///
    /// Blank lines are skipped. An unparsable last line without a trailing
    /// newline (a crash mid-append, or an append in progress) is ignored
    /// with a warning; any other bad line is a [`StateError::Parse`] with
    /// its line number. A thread archived twice (after a crash between the
    /// two steps of [`archive`](Self::archive)) appears twice.
    pub fn history(&self) -> Result<Vec<HistoryEntry>, StateError> {
        let path = self.history_path();
        let history = load_history(&path)?;
        if let Tail::Torn { offset } = history.tail {
            tracing::warn!(
                path = %path.display(),
                offset,
                "ignoring an incomplete last line of the history (interrupted or in-progress write)"
            );
        }
        Ok(history.entries)
    }

    /// The latest history entry of `thread`, if it was ever archived.
    ///
    /// Check [`thread_head`](Self::thread_head) first: a thread that is
    /// active is active, whatever the history says.
    pub fn find_archived(&self, thread: ThreadId) -> Result<Option<HistoryEntry>, StateError> {
        Ok(self
            .history()?
            .into_iter()
            .rev()
            .find(|e| e.thread == thread))
    }

    // ----- registry ------------------------------------------------------

    /// Workflow name → Workflow node hash (empty if `registry.yaml` is
    /// missing).
    pub fn registry(&self) -> Result<WorkflowRegistry, StateError> {
        load_yaml(&self.registry_path()).map(Option::unwrap_or_default)
    }

    /// Records `name → hash`; returns the previous hash, if any.
    pub fn register_workflow(
        &self,
        name: &str,
        hash: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<Option<Hash>, StateError> {
        self.locked(|| {
            let path = self.registry_path();
            let mut registry: WorkflowRegistry = load_yaml(&path)?.unwrap_or_default();
            self.verify_guard_locked(guard)?;
            let previous = registry.insert(name.to_owned(), hash);
            if previous != Some(hash) {
                store_yaml(&path, &registry)?;
            }
            Ok(previous)
        })
    }

    // ----- config and environment ---------------------------------------

    /// The parsed `config.yaml`, `None` if it is missing. An empty file (or
    /// one holding only comments) is the default configuration.
    pub fn config(&self) -> Result<Option<WorkflowConfig>, StateError> {
        let path = self.config_path();
        let Some(text) = read_text(&path)? else {
            return Ok(None);
        };
        Ok(Some(parse_yaml(&path, &text)?.unwrap_or_default()))
    }

    /// [`resolve_agent`] against this root's `config.yaml`, with errors
    /// naming its real path.
    pub fn resolve_agent(
        &self,
        explicit: Option<&str>,
        workflow: &str,
        role: &str,
    ) -> Result<ResolvedAgent, StateError> {
        let config = self.config()?;
        self.resolve_agent_with(config.as_ref(), explicit, workflow, role)
    }

    /// [`resolve_agent`](Self::resolve_agent) with a configuration already
    /// read (so a caller that needs it for more than the agent reads it once).
    pub fn resolve_agent_with(
        &self,
        config: Option<&WorkflowConfig>,
        explicit: Option<&str>,
        workflow: &str,
        role: &str,
    ) -> Result<ResolvedAgent, StateError> {
        resolve_agent_at(&self.config_path(), config, explicit, workflow, role)
    }

    /// Loads `<root>/.env` into the process environment without overriding
    /// variables that are already set. A missing file is fine.
    ///
    /// The whole file is validated first, so a malformed line
    /// ([`StateError::Env`], naming the line but never echoing it, as it
    /// may hold a secret) sets nothing. Call this early, before starting
    /// threads: changing the environment of a multi-threaded process races
    /// with C code reading it.
    pub fn load_env(&self) -> Result<(), StateError> {
        let Some((path, text)) = self.env_text()? else {
            return Ok(());
        };
        // Validated by `env_text`, so this cannot fail half-way.
        dotenvy::from_read(text.as_bytes())
            .map_err(|e| crate::env::error(&path, &text, text.len(), e))
    }

    /// The entries of `<root>/.env` as name/value pairs (empty if the file
    /// is missing), validated like [`load_env`](Self::load_env) but without
    /// touching the process environment: a long-running process hands them
    /// to the agents it starts instead.
    pub fn env_vars(&self) -> Result<Vec<(String, String)>, StateError> {
        let Some((path, text)) = self.env_text()? else {
            return Ok(Vec::new());
        };
        // `env_text` checked every line already.
        crate::env::pairs_checked(&path, &text)
    }

    /// The text of `.env`, checked; `None` if the file is missing.
    fn env_text(&self) -> Result<Option<(PathBuf, String)>, StateError> {
        let path = self.env_path();
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateError::Io { path, source }),
        };
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                let (line, _) = line_col(e.as_bytes(), e.utf8_error().valid_up_to());
                return Err(StateError::Env {
                    path,
                    line,
                    message: "not valid UTF-8".to_owned(),
                });
            }
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        crate::env::validate(&path, text)?;
        Ok(Some((path, text.to_owned())))
    }

    /// Runs `f` while holding the state lock, so no thread or registry
    /// change happens meanwhile (used by garbage collection). `f` may read
    /// state but must not call the mutating methods: they would wait for the
    /// lock `f` holds.
    pub fn while_locked<T, E: From<StateError>>(
        &self,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        uwf_util::private::create_dir_all(&self.root).map_err(|source| StateError::Io {
            path: self.root.clone(),
            source,
        })?;
        let _lock = FileLock::exclusive_timeout(&self.lock_path(), self.lock_timeout)
            .map_err(StateError::from)?;
        f()
    }

    // ----- internals -----------------------------------------------------

    /// Runs `f` holding the state lock, creating the root if needed.
    pub(crate) fn locked<T>(
        &self,
        f: impl FnOnce() -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        uwf_util::private::create_dir_all(&self.root).map_err(|source| StateError::Io {
            path: self.root.clone(),
            source,
        })?;
        let _lock = FileLock::exclusive_timeout(&self.lock_path(), self.lock_timeout)?;
        f()
    }
}

/// The current head of `thread` (`current`), checked against `expected`
/// if given.
fn check_head(
    current: Option<Hash>,
    thread: ThreadId,
    expected: Option<Hash>,
) -> Result<Hash, StateError> {
    match (current, expected) {
        (Some(actual), Some(expected)) if actual != expected => Err(StateError::Conflict {
            thread,
            expected,
            actual: Some(actual),
        }),
        (Some(actual), _) => Ok(actual),
        (None, Some(expected)) => Err(StateError::Conflict {
            thread,
            expected,
            actual: None,
        }),
        (None, None) => Err(StateError::NotActive { thread }),
    }
}

// ----- file helpers ------------------------------------------------------

/// The file's bytes, `None` if it does not exist.
pub(crate) fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>, StateError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StateError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The file as UTF-8 text, `None` if it does not exist.
pub(crate) fn read_text(path: &Path) -> Result<Option<String>, StateError> {
    let Some(bytes) = read_bytes(path)? else {
        return Ok(None);
    };
    String::from_utf8(bytes).map(Some).map_err(|e| {
        let (line, column) = line_col(e.as_bytes(), e.utf8_error().valid_up_to());
        StateError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: "not valid UTF-8".to_owned(),
        }
    })
}

/// One-based line and column (in characters) of byte `offset` in `bytes`.
pub(crate) fn line_col(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset.min(bytes.len())];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let column = 1 + String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count();
    (line, column)
}

/// Parses a YAML file; `Ok(None)` if it is missing or holds no document.
pub(crate) fn load_yaml<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StateError> {
    match read_text(path)? {
        Some(text) => parse_yaml(path, &text),
        None => Ok(None),
    }
}

/// Atomically replaces a YAML state file with `value`.
pub(crate) fn store_yaml<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    let text = serde_yaml::to_string(value).map_err(|e| StateError::Io {
        path: path.to_path_buf(),
        source: io::Error::other(e),
    })?;
    write_atomic(path, text.as_bytes())?;
    Ok(())
}

/// Cuts `path` down to its first `len` bytes and flushes it.
fn truncate(path: &Path, len: usize) -> Result<(), StateError> {
    let err = |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new().write(true).open(path).map_err(err)?;
    file.set_len(u64::try_from(len).unwrap_or(u64::MAX))
        .map_err(err)?;
    file.sync_all().map_err(err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::process::Command;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    use std::thread;
    use uwf_util::lock::LockError;

    use tempfile::TempDir;
    use uwf_protocol::AgentConfig;

    // 01J7K9M2XNPQR5VWBCDF8G3H4T and 01J8AB3QRMSTV6WKXZ2C4DF7GN.
    const T1: ThreadId = ThreadId::from_u128(0x191e69a0bb5b5f05df16c6bd101c49a);
    const T2: ThreadId = ThreadId::from_u128(0x19214b1df14ceb66e4fbf1308d79e15);
    // 8FWKR3TN5V1QA, 3CNWT9KR6D2HV, 0000000000002 and AAAAAAAAAAAAA.
    const H0: Hash = Hash::from_u64(0x87f2781eaa5d86ea);
    const H1: Hash = Hash::from_u64(0x36579a4cf0668a3b);
    const H2: Hash = Hash::from_u64(2);
    const WF: Hash = Hash::from_u64(0xa5294a5294a5294a);

    fn setup() -> (TempDir, FsState) {
        let dir = tempfile::tempdir().unwrap();
        let state = FsState::new(dir.path());
        (dir, state)
    }

    /// A distinct, valid thread id.
    fn tid(worker: usize, i: usize) -> ThreadId {
        ThreadId::from_u128((worker as u128) << 64 | i as u128)
    }

    /// A distinct hash for worker `w`'s `i`-th write.
    fn head(worker: usize, i: usize) -> Hash {
        Hash::from_u64(((worker as u64) << 32) | i as u64 | 1 << 63)
    }

    fn expect_parse(err: StateError, path: &Path, line: usize) -> (usize, String) {
        let text = err.to_string();
        match err {
            StateError::Parse {
                path: p,
                line: l,
                column,
                message,
            } => {
                assert_eq!(p, path);
                assert_eq!(l, line, "{text}");
                assert!(text.contains(&path.display().to_string()), "{text}");
                assert!(text.contains(&format!("line {line}")), "{text}");
                (column, message)
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    // ----- paths and empty state -----------------------------------------

    #[test]
    fn paths() {
        let s = FsState::new("/r");
        assert_eq!(s.root(), Path::new("/r"));
        assert_eq!(s.threads_path(), Path::new("/r/threads.yaml"));
        assert_eq!(s.registry_path(), Path::new("/r/registry.yaml"));
        assert_eq!(s.history_path(), Path::new("/r/history.jsonl"));
        assert_eq!(s.config_path(), Path::new("/r/config.yaml"));
        assert_eq!(s.env_path(), Path::new("/r/.env"));
        assert_eq!(s.lock_path(), Path::new("/r/.state.lock"));
    }

    #[test]
    fn missing_files_are_empty_and_reads_create_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("not-yet");
        let s = FsState::new(&root);
        assert!(s.threads().unwrap().is_empty());
        assert_eq!(s.thread_head(T1).unwrap(), None);
        assert!(s.registry().unwrap().is_empty());
        assert!(s.history().unwrap().is_empty());
        assert_eq!(s.find_archived(T1).unwrap(), None);
        assert_eq!(s.config().unwrap(), None);
        s.load_env().unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn empty_and_comment_only_files_are_empty() {
        let (_d, s) = setup();
        fs::write(s.threads_path(), "").unwrap();
        fs::write(s.registry_path(), "# nothing yet\n").unwrap();
        fs::write(s.config_path(), "# defaults\n").unwrap();
        fs::write(s.history_path(), "\n  \n").unwrap();
        assert!(s.threads().unwrap().is_empty());
        assert!(s.registry().unwrap().is_empty());
        assert_eq!(s.config().unwrap(), Some(WorkflowConfig::default()));
        assert!(s.history().unwrap().is_empty());
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        assert_eq!(s.thread_head(T1).unwrap(), Some(H0));
    }

    #[test]
    fn mutations_create_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let s = FsState::new(dir.path().join("a").join("b"));
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        assert_eq!(s.thread_head(T1).unwrap(), Some(H0));
        assert!(s.lock_path().exists());
    }

    // ----- threads --------------------------------------------------------

    #[test]
    fn threads_round_trip() {
        let (_d, s) = setup();
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        s.insert_thread(T2, H1, &NodeGuard::vouched()).unwrap();
        let threads = s.threads().unwrap();
        assert_eq!(threads.len(), 2);
        assert_eq!(threads[&T1], H0);
        assert_eq!(threads[&T2], H1);
        // One file per thread holding the head and a newline (docs/state.md).
        let text = fs::read_to_string(s.heads_dir().join(T1.to_string())).unwrap();
        assert_eq!(text, format!("{H0}\n"));
        assert!(!s.threads_path().exists(), "no threads.yaml in a new store");
        // A fresh instance sees the same.
        assert_eq!(FsState::new(s.root()).threads().unwrap(), threads);

        let err = s.insert_thread(T1, H2, &NodeGuard::vouched()).unwrap_err();
        assert!(matches!(&err, StateError::ThreadExists { thread } if *thread == T1));
        assert_eq!(s.thread_head(T1).unwrap(), Some(H0));
    }

    #[test]
    fn reads_hand_written_threads_yaml() {
        let (_d, s) = setup();
        fs::write(
            s.threads_path(),
            format!("# active\n{T1}: \"{H0}\"\n'{T2}': {H1}\n"),
        )
        .unwrap();
        let threads = s.threads().unwrap();
        assert_eq!(threads[&T1], H0);
        assert_eq!(threads[&T2], H1);
    }

    #[test]
    fn swap_head_succeeds_only_from_the_expected_head() {
        let (_d, s) = setup();
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        s.swap_head(T1, H0, H1, &NodeGuard::vouched()).unwrap();
        assert_eq!(s.thread_head(T1).unwrap(), Some(H1));

        // Wrong expected head.
        let err = s.swap_head(T1, H0, H2, &NodeGuard::vouched()).unwrap_err();
        match &err {
            StateError::Conflict {
                thread,
                expected,
                actual,
            } => {
                assert_eq!(*thread, T1);
                assert_eq!(*expected, H0);
                assert_eq!(*actual, Some(H1));
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains(&format!("found {H1}")), "{err}");
        assert_eq!(s.thread_head(T1).unwrap(), Some(H1));

        // Same head: a successful no-op.
        s.swap_head(T1, H1, H1, &NodeGuard::vouched()).unwrap();
        assert_eq!(s.thread_head(T1).unwrap(), Some(H1));

        // Unknown thread.
        let err = s.swap_head(T2, H0, H1, &NodeGuard::vouched()).unwrap_err();
        assert!(matches!(err, StateError::Conflict { actual: None, .. }));
        assert_eq!(s.thread_head(T2).unwrap(), None);
    }

    #[test]
    fn swap_head_on_an_archived_thread_conflicts() {
        let (_d, s) = setup();
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        s.archive(T1, WF, Some(H0), "done").unwrap();
        let err = s.swap_head(T1, H0, H1, &NodeGuard::vouched()).unwrap_err();
        assert!(
            matches!(&err, StateError::Conflict { actual: None, expected, .. } if *expected == H0)
        );
        assert!(err.to_string().contains("no longer active"), "{err}");
        assert_eq!(s.thread_head(T1).unwrap(), None);
    }

    // ----- archive and history -------------------------------------------

    #[test]
    fn archive_appends_history_then_removes_the_thread() {
        let (_d, s) = setup();
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        s.insert_thread(T2, H1, &NodeGuard::vouched()).unwrap();
        let before = now_ms();
        let entry = s.archive(T1, WF, Some(H0), "done").unwrap();
        assert_eq!(entry.thread, T1);
        assert_eq!(entry.workflow, WF);
        assert_eq!(entry.head, H0);
        assert_eq!(entry.reason.as_deref(), Some("done"));
        assert!(entry.completed_at >= before && entry.completed_at <= now_ms());

        assert_eq!(s.thread_head(T1).unwrap(), None);
        assert_eq!(s.thread_head(T2).unwrap(), Some(H1));
        assert_eq!(s.history().unwrap(), vec![entry.clone()]);
        assert_eq!(s.find_archived(T1).unwrap(), Some(entry.clone()));
        assert_eq!(s.find_archived(T2).unwrap(), None);

        // One camelCase JSON line.
        let text = fs::read_to_string(s.history_path()).unwrap();
        assert_eq!(text.lines().count(), 1);
        assert!(text.ends_with('\n'));
        assert!(text.contains("\"completedAt\":"), "{text}");

        // Without an expected head, the current head is recorded.
        s.swap_head(T2, H1, H2, &NodeGuard::vouched()).unwrap();
        let entry2 = s.archive(T2, WF, None, "killed").unwrap();
        assert_eq!(entry2.head, H2);
        assert_eq!(s.history().unwrap(), vec![entry, entry2]);
        assert!(s.threads().unwrap().is_empty());
    }

    #[test]
    fn archive_checks_the_thread_and_head() {
        let (_d, s) = setup();
        let err = s.archive(T1, WF, None, "killed").unwrap_err();
        assert!(matches!(&err, StateError::NotActive { thread } if *thread == T1));
        let err = s.archive(T1, WF, Some(H0), "done").unwrap_err();
        assert!(matches!(err, StateError::Conflict { actual: None, .. }));

        s.insert_thread(T1, H1, &NodeGuard::vouched()).unwrap();
        let err = s.archive(T1, WF, Some(H0), "done").unwrap_err();
        assert!(
            matches!(&err, StateError::Conflict { actual: Some(a), .. } if *a == H1),
            "{err:?}"
        );
        assert_eq!(s.thread_head(T1).unwrap(), Some(H1));
        assert!(!s.history_path().exists(), "nothing written on conflict");

        s.archive(T1, WF, None, "killed").unwrap();
        let err = s.archive(T1, WF, None, "killed").unwrap_err();
        assert!(matches!(err, StateError::NotActive { .. }));
        assert_eq!(s.history().unwrap().len(), 1);
    }

    #[test]
    fn crash_between_append_and_removal_leaves_the_thread_active() {
        let (_d, s) = setup();
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        // What a crash after the append but before the rewrite leaves behind.
        let stale = HistoryEntry {
            thread: T1,
            workflow: WF,
            head: H0,
            completed_at: 1,
            reason: Some("done".into()),
        };
        append_line(&s.history_path(), &serde_json::to_string(&stale).unwrap()).unwrap();
        assert_eq!(s.thread_head(T1).unwrap(), Some(H0));
        assert_eq!(s.find_archived(T1).unwrap(), Some(stale.clone()));

        // Archiving again completes the job; the latest entry wins.
        let entry = s.archive(T1, WF, Some(H0), "done").unwrap();
        assert_eq!(s.history().unwrap(), vec![stale, entry.clone()]);
        assert_eq!(s.find_archived(T1).unwrap(), Some(entry));
        assert_eq!(s.thread_head(T1).unwrap(), None);
    }

    thread_local! {
        /// Makes [`crash_point`] fail, simulating a crash inside `archive`.
        static CRASH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Called by `archive` between the history append and the
    /// `threads.yaml` rewrite.
    pub(super) fn crash_point() -> Result<(), StateError> {
        if CRASH.with(std::cell::Cell::get) {
            return Err(StateError::Io {
                path: PathBuf::from("<crash>"),
                source: io::Error::other("simulated crash"),
            });
        }
        Ok(())
    }

    #[test]
    fn archive_writes_history_before_touching_threads() {
        let (_d, s) = setup();
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        let threads_before = fs::read(s.heads_dir().join(T1.to_string())).unwrap();
        CRASH.with(|c| c.set(true));
        let result = s.archive(T1, WF, Some(H0), "done");
        CRASH.with(|c| c.set(false));
        assert!(matches!(result, Err(StateError::Io { .. })), "{result:?}");
        // The crash left the thread in both places, not in neither.
        assert_eq!(s.history().unwrap().len(), 1, "history written first");
        assert_eq!(
            fs::read(s.heads_dir().join(T1.to_string())).unwrap(),
            threads_before
        );
        assert_eq!(s.thread_head(T1).unwrap(), Some(H0));
        // And the lock was released.
        let entry = s.archive(T1, WF, Some(H0), "done").unwrap();
        assert_eq!(s.find_archived(T1).unwrap(), Some(entry));
        assert_eq!(s.history().unwrap().len(), 2);
        assert_eq!(s.thread_head(T1).unwrap(), None);
    }

    fn entry_line(thread: ThreadId, at: u64) -> String {
        serde_json::to_string(&HistoryEntry {
            thread,
            workflow: WF,
            head: H0,
            completed_at: at,
            reason: None,
        })
        .unwrap()
    }

    #[test]
    fn torn_last_history_line_is_ignored_then_dropped() {
        let (_d, s) = setup();
        let good = format!("{}\n{}\n", entry_line(T1, 1), entry_line(T2, 2));
        // A crash mid-append, cutting a multi-byte character in half too.
        let mut bytes = good.clone().into_bytes();
        bytes.extend_from_slice(b"{\"thread\":\"X\",\"reason\":\"caf\xc3");
        fs::write(s.history_path(), &bytes).unwrap();

        let history = s.history().unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[1].thread, T2);
        assert_eq!(s.find_archived(T2).unwrap().unwrap().completed_at, 2);

        // The next archive drops the fragment before appending.
        let t3 = tid(9, 9);
        s.insert_thread(t3, H1, &NodeGuard::vouched()).unwrap();
        let entry = s.archive(t3, WF, None, "done").unwrap();
        let text = fs::read_to_string(s.history_path()).unwrap();
        assert!(text.starts_with(&good), "{text}");
        assert_eq!(text.lines().count(), 3);
        assert_eq!(s.history().unwrap().last(), Some(&entry));
    }

    #[test]
    fn complete_last_line_without_newline_counts_and_is_ended() {
        let (_d, s) = setup();
        fs::write(s.history_path(), entry_line(T2, 2)).unwrap();
        assert_eq!(s.history().unwrap().len(), 1);
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        s.archive(T1, WF, None, "done").unwrap();
        let history = s.history().unwrap();
        assert_eq!(
            history.iter().map(|e| e.thread).collect::<Vec<_>>(),
            [T2, T1]
        );
        assert!(
            fs::read_to_string(s.history_path())
                .unwrap()
                .ends_with('\n')
        );
    }

    #[test]
    fn corrupt_history_line_is_an_error_and_never_rewritten() {
        fn entry_len(appended: &[u8]) -> usize {
            let line = std::str::from_utf8(appended).unwrap();
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line:?}"
            );
            serde_json::from_str::<HistoryEntry>(line.trim_end()).unwrap();
            appended.len()
        }
        let (_d, s) = setup();
        let content = format!(
            "{}\n\n{{\"thread\": oops}}\n{}\n",
            entry_line(T1, 1),
            entry_line(T2, 2)
        );
        fs::write(s.history_path(), &content).unwrap();
        let err = s.history().unwrap_err();
        let (column, _) = expect_parse(err, &s.history_path(), 3);
        assert_eq!(column, 12);
        let err = s.find_archived(T1).unwrap_err();
        expect_parse(err, &s.history_path(), 3);

        // Archiving reads only the last line (its cost must not grow with
        // the history): it appends after the damage and rewrites nothing,
        // and readers still report the bad line.
        s.insert_thread(tid(1, 1), H0, &NodeGuard::vouched())
            .unwrap();
        s.archive(tid(1, 1), WF, Some(H0), "done").unwrap();
        let after = fs::read(s.history_path()).unwrap();
        assert!(
            after.starts_with(content.as_bytes()),
            "the old lines are untouched"
        );
        assert_eq!(
            after.len() - content.len(),
            entry_len(&after[content.len()..])
        );
        expect_parse(s.history().unwrap_err(), &s.history_path(), 3);
        assert_eq!(s.thread_head(tid(1, 1)).unwrap(), None);

        // A terminated last line is not "torn": it is an error too.
        fs::write(s.history_path(), format!("{}\nnope\n", entry_line(T1, 1))).unwrap();
        expect_parse(s.history().unwrap_err(), &s.history_path(), 2);
        // And a wrongly shaped record is as bad as broken JSON.
        fs::write(s.history_path(), format!("{{\"thread\":\"{T1}\"}}\n")).unwrap();
        let (_, message) = expect_parse(s.history().unwrap_err(), &s.history_path(), 1);
        assert!(message.contains("missing field"), "{message}");
        assert!(
            !message.contains("at line"),
            "position not repeated: {message}"
        );
    }

    // ----- corrupt YAML ---------------------------------------------------

    #[test]
    fn corrupt_threads_yaml_is_reported_and_never_overwritten() {
        let (_d, s) = setup();
        let corrupt = format!("{T1}: {H0}\n\t{T2}: {H1}\n");
        fs::write(s.threads_path(), &corrupt).unwrap();

        let err = s.threads().unwrap_err();
        let report = format!("{:?}", miette::Report::new(err));
        assert!(report.contains(PARSE_HELP), "{report}");
        expect_parse(s.threads().unwrap_err(), &s.threads_path(), 2);
        expect_parse(s.thread_head(T1).unwrap_err(), &s.threads_path(), 2);

        let t3 = tid(3, 3);
        for result in [
            s.insert_thread(t3, H1, &NodeGuard::vouched()),
            s.swap_head(T1, H0, H1, &NodeGuard::vouched()),
            s.archive(T1, WF, Some(H0), "done").map(drop),
            s.archive(T1, WF, None, "killed").map(drop),
        ] {
            expect_parse(result.unwrap_err(), &s.threads_path(), 2);
            assert_eq!(fs::read_to_string(s.threads_path()).unwrap(), corrupt);
        }
        assert!(!s.history_path().exists());
    }

    #[test]
    fn yaml_problems_name_the_line() {
        let (_d, s) = setup();
        let path = s.threads_path();
        let cases: &[(String, usize)] = &[
            // Wrong shape.
            ("- a\n- b\n".into(), 1),
            // Non-string head.
            (format!("{T1}: {H0}\n{T2}:\n  nested: 1\n"), 3),
            // Bad indentation.
            (format!("{T1}: {H0}\n\t{T2}: {H1}\n"), 2),
            // Unclosed quote.
            (format!("{T1}: {H0}\n{T2}: '{H1}\n"), 3),
            // A head that is not a hash, a key that is not a thread id.
            (format!("{T1}: {H0}\n{T2}: nope\n"), 2),
            (format!("{T1}: {H0}\nnope: {H1}\n"), 2),
        ];
        for (text, line) in cases {
            fs::write(&path, text).unwrap();
            let err = s.threads().unwrap_err();
            expect_parse(err, &path, *line);
        }
        // Duplicate keys would silently lose one head: refused.
        fs::write(&path, format!("{T1}: {H0}\n{T1}: {H1}\n")).unwrap();
        let (_, message) = expect_parse(s.threads().unwrap_err(), &path, 1);
        assert!(message.contains("duplicate"), "{message}");
        assert!(s.insert_thread(T2, H0, &NodeGuard::vouched()).is_err());
    }

    #[test]
    fn non_utf8_file_is_a_parse_error() {
        let (_d, s) = setup();
        fs::write(s.registry_path(), b"a: b\nc: d\xff\n").unwrap();
        let (column, message) = expect_parse(s.registry().unwrap_err(), &s.registry_path(), 2);
        assert_eq!(column, 5);
        assert!(message.contains("UTF-8"));
    }

    #[test]
    fn registry_round_trip_and_corruption() {
        let (_d, s) = setup();
        assert_eq!(
            s.register_workflow("solve-issue", H0, &NodeGuard::vouched())
                .unwrap(),
            None
        );
        assert_eq!(
            s.register_workflow("develop", H1, &NodeGuard::vouched())
                .unwrap(),
            None
        );
        assert_eq!(
            s.register_workflow("solve-issue", H2, &NodeGuard::vouched())
                .unwrap(),
            Some(H0)
        );
        assert_eq!(
            s.register_workflow("solve-issue", H2, &NodeGuard::vouched())
                .unwrap(),
            Some(H2)
        );
        let registry = s.registry().unwrap();
        assert_eq!(registry.len(), 2);
        assert_eq!(registry["solve-issue"], H2);
        assert_eq!(registry["develop"], H1);

        let corrupt = "develop: x\nsolve-issue: {\n";
        fs::write(s.registry_path(), corrupt).unwrap();
        expect_parse(s.registry().unwrap_err(), &s.registry_path(), 3);
        expect_parse(
            s.register_workflow("new", H0, &NodeGuard::vouched())
                .unwrap_err(),
            &s.registry_path(),
            3,
        );
        assert_eq!(fs::read_to_string(s.registry_path()).unwrap(), corrupt);
    }

    // ----- config ---------------------------------------------------------

    const SEED_CONFIG: &str = r#"
providers:
  openrouter:
    baseUrl: "https://openrouter.ai/api/v1"
    apiKeyEnv: "OPENROUTER_API_KEY"

models:
  sonnet:
    provider: "openrouter"
    name: "anthropic/claude-sonnet-4"

agents:
  hermes:
    command: "uwf-hermes"
    args: []
  cursor:
    command: "uwf-cursor"
    args: ["--fast", "a b"]

defaultAgent: "hermes"
agentOverrides:
  solve-issue:
    developer: "cursor"

defaultModel: "sonnet"
modelOverrides:
  extract: "sonnet"
"#;

    fn seed_config() -> WorkflowConfig {
        serde_yaml::from_str(SEED_CONFIG).unwrap()
    }

    #[test]
    fn config_parses_the_documented_example() {
        let (_d, s) = setup();
        fs::write(s.config_path(), SEED_CONFIG).unwrap();
        let config = s.config().unwrap().unwrap();
        assert_eq!(config, seed_config());
        assert_eq!(config.default_agent.as_deref(), Some("hermes"));
        assert_eq!(config.agents["cursor"].args, ["--fast", "a b"]);
    }

    #[test]
    fn config_errors_name_file_and_line() {
        let (_d, s) = setup();
        let path = s.config_path();
        fs::write(
            &path,
            "defaultAgent: hermes\nagents:\n  x:\n    command: a\n    bogus: 1\n",
        )
        .unwrap();
        let (column, message) = expect_parse(s.config().unwrap_err(), &path, 5);
        assert_eq!(column, 5);
        assert!(message.contains("unknown field `bogus`"), "{message}");
        assert!(
            !message.contains("at line"),
            "position not repeated: {message}"
        );

        fs::write(&path, "defaultAgent: hermes\ndefaultAgnet: x\n").unwrap();
        expect_parse(s.config().unwrap_err(), &path, 2);
        fs::write(&path, "agents:\n  x:\n    args: []\n").unwrap();
        // Reported at the alias (line 2): it lacks both a command and `human: true`.
        let (_, message) = expect_parse(s.config().unwrap_err(), &path, 2);
        assert!(message.contains("missing field `command`"), "{message}");
        // And resolution through the FsState surfaces it.
        let err = s.resolve_agent(None, "wf", "role").unwrap_err();
        expect_parse(err, &path, 2);
        fs::write(&path, "agents:\n  me:\n    human: true\n    command: x\n").unwrap();
        let (_, message) = expect_parse(s.config().unwrap_err(), &path, 2);
        assert!(message.contains("not both"), "{message}");
        fs::write(&path, "agents:\n  me: { human: true }\ndefaultAgent: me\n").unwrap();
        let me = s.resolve_agent(None, "wf", "role").unwrap();
        assert!(me.human && me.command.is_empty(), "{me:?}");
    }

    // ----- .env -----------------------------------------------------------

    #[test]
    fn load_env_sets_without_overriding() {
        let (_d, s) = setup();
        let key_a = "UWF_STATE_TEST_ENV_A_7F3K";
        let key_b = "UWF_STATE_TEST_ENV_B_7F3K";
        fs::write(
            s.env_path(),
            format!("\u{feff}# secrets\n{key_a}=first\nexport {key_b}=\"two words\"\n"),
        )
        .unwrap();
        s.load_env().unwrap();
        assert_eq!(std::env::var(key_a).unwrap(), "first");
        assert_eq!(std::env::var(key_b).unwrap(), "two words");

        let (_d2, other) = setup();
        fs::write(other.env_path(), format!("{key_a}=second\n")).unwrap();
        other.load_env().unwrap();
        assert_eq!(std::env::var(key_a).unwrap(), "first", "not overridden");
    }

    #[test]
    fn malformed_env_line_is_an_error_and_sets_nothing() {
        let (_d, s) = setup();
        let key = "UWF_STATE_TEST_ENV_C_7F3K";
        fs::write(
            s.env_path(),
            format!("# top\n{key}=ok\n\nSECRET=sk-123 oops\nLATER=x\n"),
        )
        .unwrap();
        let err = s.load_env().unwrap_err();
        let text = err.to_string();
        match &err {
            StateError::Env { path, line, .. } => {
                assert_eq!(path, &s.env_path());
                assert_eq!(*line, 4, "{text}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!text.contains("sk-123"), "secrets are not echoed: {text}");
        assert!(std::env::var(key).is_err(), "nothing is set");

        // An unclosed quote spanning to the end of the file.
        fs::write(s.env_path(), "A=1\nB=\"open\nC=2\n").unwrap();
        match s.load_env().unwrap_err() {
            StateError::Env { line, message, .. } => {
                assert_eq!(line, 2);
                assert!(message.contains("unclosed quote"), "{message}");
            }
            other => panic!("{other:?}"),
        }

        fs::write(s.env_path(), b"A=\xff\n").unwrap();
        assert!(matches!(
            s.load_env().unwrap_err(),
            StateError::Env { line: 1, .. }
        ));
    }

    // ----- locking and concurrency ---------------------------------------

    #[test]
    fn a_held_lock_times_out_with_a_clear_error() {
        let (_d, s) = setup();
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        let _held = FileLock::exclusive(&s.lock_path()).unwrap();
        let s = s.with_lock_timeout(Duration::from_millis(100));
        let err = s.swap_head(T1, H0, H1, &NodeGuard::vouched()).unwrap_err();
        assert!(
            matches!(err, StateError::Lock(LockError::Timeout { .. })),
            "{err:?}"
        );
        assert!(err.to_string().contains(".state.lock"), "{err}");
        // Reads do not need the lock.
        assert_eq!(s.thread_head(T1).unwrap(), Some(H0));
    }

    #[test]
    fn concurrent_inserts_from_separate_instances_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let (root, barrier) = (root.clone(), Arc::clone(&barrier));
                thread::spawn(move || {
                    let s = FsState::new(root);
                    barrier.wait();
                    for i in 0..50 {
                        s.insert_thread(tid(w, i), head(w, i), &NodeGuard::vouched())
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let threads = FsState::new(&root).threads().unwrap();
        assert_eq!(threads.len(), 400);
        for w in 0..8 {
            for i in 0..50 {
                assert_eq!(threads[&tid(w, i)], head(w, i));
            }
        }
    }

    #[test]
    fn racing_swaps_from_one_head_have_exactly_one_winner() {
        for round in 0..10 {
            let (_d, s) = setup();
            s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
            let barrier = Arc::new(Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|w| {
                    let (s, barrier) = (FsState::new(s.root()), Arc::clone(&barrier));
                    thread::spawn(move || {
                        let new = head(w, 0);
                        barrier.wait();
                        (s.swap_head(T1, H0, new, &NodeGuard::vouched()), new)
                    })
                })
                .collect();
            let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            let winners: Vec<&Hash> = results
                .iter()
                .filter(|(r, _)| r.is_ok())
                .map(|(_, n)| n)
                .collect();
            assert_eq!(winners.len(), 1, "round {round}: {results:?}");
            let head = s.thread_head(T1).unwrap().unwrap();
            assert_eq!(&head, winners[0]);
            for (result, _) in &results {
                if let Err(e) = result {
                    assert!(
                        matches!(e, StateError::Conflict { actual: Some(a), .. } if *a == head),
                        "{e:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn racing_archive_and_swaps_have_exactly_one_winner() {
        for _ in 0..5 {
            let (_d, s) = setup();
            s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
            let barrier = Arc::new(Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|w| {
                    let (s, barrier) = (FsState::new(s.root()), Arc::clone(&barrier));
                    thread::spawn(move || {
                        barrier.wait();
                        if w % 2 == 0 {
                            s.archive(T1, WF, Some(H0), "done").is_ok()
                        } else {
                            s.swap_head(T1, H0, head(w, 0), &NodeGuard::vouched())
                                .is_ok()
                        }
                    })
                })
                .collect();
            let wins = handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|won| *won)
                .count();
            assert_eq!(wins, 1);
            let history = s.history().unwrap();
            match s.thread_head(T1).unwrap() {
                Some(head) => {
                    assert_ne!(head, H0);
                    assert!(history.is_empty());
                }
                None => assert_eq!(history.len(), 1),
            }
        }
    }

    #[test]
    fn lock_free_reads_see_consistent_snapshots_during_writes() {
        let (_d, s) = setup();
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (s, done) = (FsState::new(s.root()), Arc::clone(&done));
            thread::spawn(move || {
                let (mut kept, mut archived, mut reads) = (0, 0, 0);
                while !done.load(Ordering::Relaxed) {
                    // Threads that are never archived only accumulate, and
                    // so does the history.
                    let threads = s.threads().unwrap();
                    let n = (0..100)
                        .filter(|i| i % 10 != 0 && threads.contains_key(&tid(0, *i)))
                        .count();
                    assert!(n >= kept, "went back from {kept} to {n}");
                    let h = s.history().unwrap().len();
                    assert!(h >= archived, "history went back from {archived} to {h}");
                    (kept, archived) = (n, h);
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..100 {
            s.insert_thread(tid(0, i), H0, &NodeGuard::vouched())
                .unwrap();
            if i % 10 == 0 {
                s.archive(tid(0, i), WF, None, "done").unwrap();
                s.insert_thread(tid(1, i), H0, &NodeGuard::vouched())
                    .unwrap();
            }
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        assert_eq!(s.threads().unwrap().len(), 100);
        assert_eq!(s.history().unwrap().len(), 10);
    }

    const CHILD_ROOT: &str = "UWF_STATE_TEST_CHILD_ROOT";
    const CHILD_ID: &str = "UWF_STATE_TEST_CHILD_ID";
    const CHILD_PROCS: usize = 6;
    const CHILD_INSERTS: usize = 20;

    /// Body of each child process of [`many_processes_share_one_root`]; a
    /// no-op in a normal test run.
    #[test]
    fn child_process_worker() {
        let (Ok(root), Ok(id)) = (std::env::var(CHILD_ROOT), std::env::var(CHILD_ID)) else {
            return;
        };
        let w: usize = id.parse().unwrap();
        let s = FsState::new(&root);
        for i in 0..CHILD_INSERTS {
            s.insert_thread(tid(w, i), H1, &NodeGuard::vouched())
                .unwrap();
            // Keep the CAS race below well contended.
            let _ = s.swap_head(T1, H0, head(w, 0), &NodeGuard::vouched());
            let _ = s.register_workflow("shared", head(w, i + 1), &NodeGuard::vouched());
        }
        match s.swap_head(T2, H0, head(w, 0), &NodeGuard::vouched()) {
            Ok(()) => fs::write(Path::new(&root).join(format!("won-{w}")), "").unwrap(),
            Err(StateError::Conflict { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn many_processes_share_one_root() {
        let (_d, s) = setup();
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        s.insert_thread(T2, H0, &NodeGuard::vouched()).unwrap();
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..CHILD_PROCS)
            .map(|w| {
                Command::new(&exe)
                    .args([
                        "--exact",
                        "state::tests::child_process_worker",
                        "--test-threads=1",
                        "--quiet",
                    ])
                    .env(CHILD_ROOT, s.root())
                    .env(CHILD_ID, w.to_string())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let threads = s.threads().unwrap();
        assert_eq!(threads.len(), 2 + CHILD_PROCS * CHILD_INSERTS);
        let won: Vec<_> = fs::read_dir(s.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("won-"))
            .collect();
        assert_eq!(won.len(), 1, "{won:?}");
        let winner: usize = won[0].trim_start_matches("won-").parse().unwrap();
        assert_eq!(threads[&T2], head(winner, 0));
        assert_ne!(threads[&T1], H0);
        let shared = s.registry().unwrap()["shared"];
        assert!((0..CHILD_PROCS).any(|w| (1..=CHILD_INSERTS).any(|i| shared == head(w, i))));
        // No temp files left behind.
        let leftovers: BTreeSet<_> = fs::read_dir(s.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(uwf_util::atomic::TEMP_SUFFIX))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    // ----- agent resolution ----------------------------------------------

    fn agent(command: &str, args: &[&str], label: &str, source: AgentSource) -> ResolvedAgent {
        ResolvedAgent {
            command: command.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            label: label.into(),
            source,
            human: false,
            protocol: Default::default(),
        }
    }

    #[test]
    fn resolve_agent_precedence() {
        use AgentSource::*;
        let config = seed_config();
        let c = Some(&config);
        type Case<'a> = (
            Option<&'a WorkflowConfig>,
            Option<&'a str>,
            &'a str,
            &'a str,
            ResolvedAgent,
        );
        let cases: Vec<Case> = vec![
            // Explicit alias beats the override.
            (
                c,
                Some("hermes"),
                "solve-issue",
                "developer",
                agent("uwf-hermes", &[], "hermes", Explicit),
            ),
            // Explicit command line.
            (
                c,
                Some("my-agent --model 'gpt 4' -v"),
                "solve-issue",
                "developer",
                agent(
                    "my-agent",
                    &["--model", "gpt 4", "-v"],
                    "my-agent --model 'gpt 4' -v",
                    Explicit,
                ),
            ),
            // Unknown alias: just a command.
            (
                c,
                Some("ghost"),
                "wf",
                "r",
                agent("ghost", &[], "ghost", Explicit),
            ),
            // Explicit without any config.
            (
                None,
                Some("/usr/bin/agent x"),
                "wf",
                "r",
                agent("/usr/bin/agent", &["x"], "/usr/bin/agent x", Explicit),
            ),
            // The override for this workflow and role.
            (
                c,
                None,
                "solve-issue",
                "developer",
                agent("uwf-cursor", &["--fast", "a b"], "cursor", Override),
            ),
            // Same workflow, other role: default.
            (
                c,
                None,
                "solve-issue",
                "reviewer",
                agent("uwf-hermes", &[], "hermes", Default),
            ),
            // Same role, other workflow: default.
            (
                c,
                None,
                "develop",
                "developer",
                agent("uwf-hermes", &[], "hermes", Default),
            ),
        ];
        for (config, explicit, workflow, role, expected) in cases {
            assert_eq!(
                resolve_agent(config, explicit, workflow, role).unwrap(),
                expected,
                "{explicit:?} {workflow} {role}"
            );
        }
    }

    #[test]
    fn resolve_agent_errors() {
        // Nothing configured.
        let err = resolve_agent(None, None, "wf", "dev").unwrap_err();
        assert!(
            matches!(&err, StateError::NoAgent { workflow, role } if workflow == "wf" && role == "dev")
        );
        // The hint naming `uwf setup` is the CLI's to give (tested in
        // uwf-cli's thread_cli.rs); the library names the facts only.
        let message = err.to_string();
        assert!(
            message.contains("\"dev\"") && message.contains("\"wf\""),
            "{message}"
        );
        let report = format!("{:?}", miette::Report::new(err));
        assert!(!report.contains("uwf setup"), "{report}");

        // Config without a default, and no matching override.
        let mut config = seed_config();
        config.default_agent = None;
        let err = resolve_agent(Some(&config), None, "solve-issue", "reviewer").unwrap_err();
        assert!(matches!(err, StateError::NoAgent { .. }));
        assert_eq!(
            resolve_agent(Some(&config), None, "solve-issue", "developer")
                .unwrap()
                .label,
            "cursor"
        );
        assert!(resolve_agent(Some(&WorkflowConfig::default()), None, "w", "r").is_err());

        // defaultAgent naming a missing alias.
        let mut config = seed_config();
        config.default_agent = Some("ghost".into());
        let err = resolve_agent(Some(&config), None, "develop", "x").unwrap_err();
        assert!(
            matches!(&err, StateError::UnknownAgentAlias { alias, path } if alias == "ghost" && path == Path::new(CONFIG_FILE))
        );
        // ...but an override or explicit choice that applies bypasses it.
        assert!(resolve_agent(Some(&config), None, "solve-issue", "developer").is_ok());
        assert!(resolve_agent(Some(&config), Some("hermes"), "develop", "x").is_ok());

        // An override naming a missing alias is an error even with a good default.
        let mut config = seed_config();
        config
            .agent_overrides
            .as_mut()
            .unwrap()
            .get_mut("solve-issue")
            .unwrap()
            .insert("developer".into(), "uwf-cursor --fast".into());
        let err = resolve_agent(Some(&config), None, "solve-issue", "developer").unwrap_err();
        assert!(
            matches!(&err, StateError::UnknownAgentAlias { alias, .. } if alias == "uwf-cursor --fast")
        );

        // Unusable explicit command lines.
        for bad in ["", "   ", "''", "\"\" arg", "'open", "trailing\\"] {
            let err = resolve_agent(Some(&seed_config()), Some(bad), "w", "r").unwrap_err();
            assert!(
                matches!(&err, StateError::AgentCommand { command, .. } if command == bad),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn state_dir_resolve_agent_names_the_real_config() {
        let (_d, s) = setup();
        // No config at all.
        assert!(matches!(
            s.resolve_agent(None, "w", "r").unwrap_err(),
            StateError::NoAgent { .. }
        ));
        assert_eq!(
            s.resolve_agent(Some("x y"), "w", "r").unwrap(),
            agent("x", &["y"], "x y", AgentSource::Explicit)
        );
        fs::write(s.config_path(), "defaultAgent: ghost\n").unwrap();
        match s.resolve_agent(None, "w", "r").unwrap_err() {
            StateError::UnknownAgentAlias { alias, path } => {
                assert_eq!(alias, "ghost");
                assert_eq!(path, s.config_path());
            }
            other => panic!("{other:?}"),
        }
        s.register_workflow("w", H0, &NodeGuard::vouched()).unwrap();
        fs::write(
            s.config_path(),
            "agents:\n  a:\n    command: run-a\ndefaultAgent: a\n",
        )
        .unwrap();
        assert_eq!(
            s.resolve_agent(None, "w", "r").unwrap(),
            agent("run-a", &[], "a", AgentSource::Default)
        );
    }

    // ----- command-line splitting ----------------------------------------

    fn split(s: &str) -> Vec<String> {
        split_command_line(s).unwrap()
    }

    #[test]
    fn splits_words_and_quotes() {
        let cases: &[(&str, &[&str])] = &[
            ("a", &["a"]),
            ("a b  c", &["a", "b", "c"]),
            ("  a\tb\n", &["a", "b"]),
            ("'a b' c", &["a b", "c"]),
            ("\"a b\" c", &["a b", "c"]),
            ("a\\ b", &["a b"]),
            ("a\\'b", &["a'b"]),
            ("''", &[""]),
            ("a '' b", &["a", "", "b"]),
            ("\"\"", &[""]),
            ("a'b c'd", &["ab cd"]),
            ("'a\\b'", &["a\\b"]),
            ("'say \"hi\"'", &["say \"hi\""]),
            ("\"it's\"", &["it's"]),
            ("\"a\\\"b\"", &["a\"b"]),
            ("\"a\\\\b\"", &["a\\b"]),
            ("\"\\$HOME \\`x\\`\"", &["$HOME `x`"]),
            ("\"a\\nb\"", &["a\\nb"]),
            ("a\\\nb", &["ab"]),
            ("\"a\\\nb\"", &["ab"]),
            ("$HOME *.rs ~ a|b >c", &["$HOME", "*.rs", "~", "a|b", ">c"]),
            ("héllo 'wörld ✓'", &["héllo", "wörld ✓"]),
            (
                "uwf-llm --model \"anthropic/claude sonnet\" --temp=0.2",
                &[
                    "uwf-llm",
                    "--model",
                    "anthropic/claude sonnet",
                    "--temp=0.2",
                ],
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(split(input), *expected, "{input:?}");
        }
    }

    #[test]
    fn split_errors() {
        assert_eq!(split_command_line(""), Err(SplitError::Empty));
        assert_eq!(split_command_line(" \t\n"), Err(SplitError::Empty));
        assert_eq!(split_command_line("\\\n"), Err(SplitError::Empty));
        assert_eq!(
            split_command_line("'abc"),
            Err(SplitError::UnterminatedQuote {
                quote: '\'',
                pos: 0
            })
        );
        assert_eq!(
            split_command_line("é \"b"),
            Err(SplitError::UnterminatedQuote { quote: '"', pos: 2 })
        );
        assert_eq!(
            split_command_line("\"ab\\"),
            Err(SplitError::UnterminatedQuote { quote: '"', pos: 0 })
        );
        assert_eq!(
            split_command_line("a\\"),
            Err(SplitError::TrailingBackslash)
        );
        let msg = split_command_line("x 'y").unwrap_err().to_string();
        assert!(msg.contains("character 2"), "{msg}");
    }

    #[test]
    fn agent_config_type_is_the_protocol_one() {
        // Guards the field names this module relies on.
        let a = AgentConfig {
            command: "c".into(),
            args: vec![],
            human: false,
            protocol: Default::default(),
        };
        let mut config = WorkflowConfig::default();
        config.agents.insert("x".into(), a);
        config.default_agent = Some("x".into());
        assert_eq!(
            resolve_agent(Some(&config), None, "w", "r")
                .unwrap()
                .command,
            "c"
        );
    }

    #[test]
    fn now_ms_is_recent() {
        // 2024-01-01 in ms.
        assert!(now_ms() > 1_704_067_200_000);
    }

    // ----- edit_config_files ---------------------------------------------

    fn replace_with(
        config: &str,
        env: &str,
    ) -> impl FnOnce(&ConfigFiles) -> Result<(ConfigFiles, ()), StateError> {
        let new = ConfigFiles {
            config: Some(config.to_owned()),
            env: Some(env.to_owned()),
        };
        move |_| Ok((new, ()))
    }

    #[test]
    fn edit_config_files_writes_both_and_env_privately() {
        let (dir, state) = setup();
        let root = dir.path().join("new-root");
        let state = FsState::new(&root).with_lock_timeout(state.lock_timeout);
        let (written, ()) = state
            .edit_config_files(replace_with("defaultAgent: x\n", "K=v\n"))
            .unwrap();
        assert!(written.config && written.env);
        assert_eq!(written.env_loose_mode, None);
        assert_eq!(
            fs::read_to_string(state.config_path()).unwrap(),
            "defaultAgent: x\n"
        );
        assert_eq!(fs::read_to_string(state.env_path()).unwrap(), "K=v\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(state.env_path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, ENV_FILE_MODE);
        }
        // The edit sees what is there; unchanged files are not rewritten.
        let (written, seen) = state
            .edit_config_files(|files| Ok::<_, StateError>((files.clone(), files.clone())))
            .unwrap();
        assert_eq!(written, ConfigFilesWritten::default());
        assert_eq!(seen.config.as_deref(), Some("defaultAgent: x\n"));
        assert_eq!(seen.env.as_deref(), Some("K=v\n"));
        assert!(!format!("{seen:?}").contains("K=v"), "Debug shows the env");
    }

    #[test]
    fn edit_config_files_refuses_bad_files_and_bad_edits() {
        let (_dir, state) = setup();
        fs::write(state.config_path(), "providers: [\n").unwrap();
        fs::write(state.env_path(), "K=v\n").unwrap();
        let err = state
            .edit_config_files(replace_with("{}\n", "K=w\n"))
            .unwrap_err();
        expect_parse(err, &state.config_path(), 2);
        assert_eq!(
            fs::read_to_string(state.config_path()).unwrap(),
            "providers: [\n"
        );
        assert_eq!(fs::read_to_string(state.env_path()).unwrap(), "K=v\n");

        fs::write(state.config_path(), "{}\n").unwrap();
        fs::write(state.env_path(), "K='secretvalue\n").unwrap();
        let err = state
            .edit_config_files(replace_with("{}\n", "K=w\n"))
            .unwrap_err();
        assert!(matches!(err, StateError::Env { line: 1, .. }), "{err:?}");
        assert!(!err.to_string().contains("secretvalue"), "{err}");

        // New content that would not parse is refused; nothing is written.
        fs::write(state.env_path(), "K=v\n").unwrap();
        let err = state
            .edit_config_files(replace_with("defaultAgent: [1]\n", "K=w\n"))
            .unwrap_err();
        assert!(err.to_string().contains("nothing was written"), "{err}");
        let err = state
            .edit_config_files(replace_with("{}\n", "K='w\n"))
            .unwrap_err();
        assert!(err.to_string().contains("nothing was written"), "{err}");
        assert_eq!(fs::read_to_string(state.config_path()).unwrap(), "{}\n");
        assert_eq!(fs::read_to_string(state.env_path()).unwrap(), "K=v\n");
    }

    #[cfg(unix)]
    #[test]
    fn edit_config_files_makes_a_shared_env_private() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, state) = setup();
        fs::write(state.env_path(), "K=v\n").unwrap();
        fs::set_permissions(state.env_path(), fs::Permissions::from_mode(0o644)).unwrap();
        let (written, ()) = state
            .edit_config_files(|_| Ok::<_, StateError>((ConfigFiles::default(), ())))
            .unwrap();
        assert!(written.env && !written.config);
        assert_eq!(written.env_loose_mode, Some(0o644));
        let mode = fs::metadata(state.env_path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(fs::read_to_string(state.env_path()).unwrap(), "K=v\n");
        assert!(!state.config_path().exists());
    }

    /// Everything the state creates under a new root is its owner's only
    /// (docs/state.md, "Secrets and file modes"), whatever the umask.
    #[cfg(unix)]
    #[test]
    fn what_the_state_creates_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, state) = setup();
        let root = dir.path().join("new-root");
        let s = FsState::new(&root).with_lock_timeout(state.lock_timeout);
        s.insert_thread(T1, H0, &NodeGuard::vouched()).unwrap();
        s.swap_head(T1, H0, H1, &NodeGuard::vouched()).unwrap();
        s.insert_thread(T2, H0, &NodeGuard::vouched()).unwrap();
        s.register_workflow("w", WF, &NodeGuard::vouched()).unwrap();
        s.record_attempt(T1, |_| -> Result<Hash, StateError> { Ok(H2) })
            .unwrap();
        s.archive(T2, WF, Some(H0), "done").unwrap();
        s.edit_config_files(replace_with("defaultAgent: x\n", "K=v\n"))
            .unwrap();
        let mut seen = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(p) = stack.pop() {
            let meta = fs::metadata(&p).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            if meta.is_dir() {
                assert_eq!(mode, 0o700, "{}", p.display());
                stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else {
                assert_eq!(mode, 0o600, "{}", p.display());
            }
            seen.push(p.strip_prefix(&root).unwrap().display().to_string());
        }
        seen.sort();
        for expected in [
            "",
            ".env",
            ".state.lock",
            "attempts.yaml",
            "config.yaml",
            "history.jsonl",
            "registry.yaml",
            "threads",
        ] {
            assert!(seen.iter().any(|p| p == expected), "{expected}: {seen:?}");
        }
        assert!(seen.iter().any(|p| p.starts_with("threads/")), "{seen:?}");
    }
}
