//! The side tables of active threads: `waiting.yaml` (threads waiting for
//! a person) and `attempts.yaml` (each thread's newest failed attempt).
//!
//! Both follow the rules of [`crate::state`]: every change happens under
//! the state lock and rewrites the file atomically; reads take no lock.
//! Neither is ever the truth about a thread's progress, which stays in
//! the head files and the CAS:
//!
//! - a waiting entry counts only while its thread is active **with the
//!   entry's head**; once the head moves (an answer, a fork's own id, a
//!   kill) the entry is stale, readers skip it and the next write drops it.
//!   A crash can therefore never leave a thread "waiting" by mistake, and
//!   answering needs no second write to clear it;
//! - an attempts entry points at a CAS node written (and fsynced) before
//!   the entry, so it never dangles; the new node links the previous one
//!   (`prev`), read under the same lock, so concurrent failures of one
//!   thread are all kept. `uwf cas gc` keeps the records of active threads
//!   and (unless it is a dry run) drops the entries of the others.

use std::path::PathBuf;

use uwf_protocol::{AttemptsIndex, Hash, ThreadId, ThreadsIndex, WaitingIndex, WaitingRecord};

use crate::state::{FsState, StateError, load_yaml, store_yaml};

/// File name of the waiting table.
pub const WAITING_FILE: &str = "waiting.yaml";
/// File name of the attempts table.
pub const ATTEMPTS_FILE: &str = "attempts.yaml";

/// Whether `record` still describes `thread` given the active threads.
fn current(threads: &ThreadsIndex, thread: ThreadId, record: &WaitingRecord) -> bool {
    threads.get(&thread) == Some(&record.head)
}

impl FsState {
    /// `<root>/waiting.yaml`.
    pub fn waiting_path(&self) -> PathBuf {
        self.root().join(WAITING_FILE)
    }

    /// `<root>/attempts.yaml`.
    pub fn attempts_path(&self) -> PathBuf {
        self.root().join(ATTEMPTS_FILE)
    }

    /// The threads waiting now: the entries of `waiting.yaml` whose thread
    /// is active at the entry's head (stale ones are left out).
    pub fn waiting(&self) -> Result<WaitingIndex, StateError> {
        let all: WaitingIndex = load_yaml(&self.waiting_path())?.unwrap_or_default();
        // Only the waiting threads' heads are read, not every thread's.
        let mut out = WaitingIndex::new();
        for (thread, record) in all {
            if self.thread_head(thread)? == Some(record.head) {
                out.insert(thread, record);
            }
        }
        Ok(out)
    }

    /// What `thread` waits for now, if anything.
    pub fn waiting_of(&self, thread: ThreadId) -> Result<Option<WaitingRecord>, StateError> {
        Ok(self.waiting()?.remove(&thread))
    }

    /// Records that `thread` waits, as `record` says. Returns `true` if this
    /// starts a wait, `false` if the thread already waited at that head for
    /// that role (the first record, with its `since`, is kept).
    ///
    /// Fails with [`StateError::Conflict`] unless the thread is active at
    /// `record.head`: a thread that moved on or was killed does not wait.
    /// Stale entries are dropped on the way.
    pub fn mark_waiting(
        &self,
        thread: ThreadId,
        record: WaitingRecord,
    ) -> Result<bool, StateError> {
        self.locked(|| {
            let actual = self.thread_head(thread)?;
            if actual != Some(record.head) {
                return Err(StateError::Conflict {
                    thread,
                    expected: record.head,
                    actual,
                });
            }
            let path = self.waiting_path();
            let all: WaitingIndex = load_yaml(&path)?.unwrap_or_default();
            let before = all.len();
            // Only the waiting threads' heads are read, not every thread's.
            let mut kept = WaitingIndex::new();
            for (t, r) in all {
                if self.thread_head(t)? == Some(r.head) {
                    kept.insert(t, r);
                }
            }
            let mut all = kept;
            let same = all
                .get(&thread)
                .is_some_and(|r| r.role == record.role && r.child == record.child);
            if same {
                if all.len() != before {
                    store_yaml(&path, &all)?;
                }
                return Ok(false);
            }
            all.insert(thread, record);
            store_yaml(&path, &all)?;
            Ok(true)
        })
    }

    /// `attempts.yaml` as stored: thread → newest AttemptRecord node.
    pub fn attempts(&self) -> Result<AttemptsIndex, StateError> {
        load_yaml(&self.attempts_path()).map(Option::unwrap_or_default)
    }

    /// The newest AttemptRecord node of `thread`, if any.
    pub fn attempt_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        Ok(self.attempts()?.remove(&thread))
    }

    /// Adds an attempt record for `thread`: under the lock, `write` gets the
    /// thread's newest record (the new one's `prev`), stores the new node
    /// and returns its hash, which becomes the thread's newest record.
    /// Nothing is changed if `write` fails.
    pub fn record_attempt<E: From<StateError>>(
        &self,
        thread: ThreadId,
        write: impl FnOnce(Option<Hash>) -> Result<Hash, E>,
    ) -> Result<Hash, E> {
        let mut out = None;
        self.while_locked(|| -> Result<(), E> {
            let path = self.attempts_path();
            let mut all: AttemptsIndex = load_yaml(&path)?.unwrap_or_default();
            let new = write(all.get(&thread).copied())?;
            all.insert(thread, new);
            store_yaml(&path, &all)?;
            out = Some(new);
            Ok(())
        })?;
        out.ok_or_else(|| {
            E::from(StateError::Io {
                path: self.attempts_path(),
                source: std::io::Error::other("the attempt record was not written"),
            })
        })
    }

    /// For garbage collection, with the state lock already held (inside
    /// [`while_locked`](FsState::while_locked)): returns the newest attempt
    /// record of every active thread, the roots that keep its records. With
    /// `prune` (not for a dry run), also drops the entries of threads that
    /// are no longer active from both tables, and stale waiting entries.
    pub fn side_table_roots_locked(&self, prune: bool) -> Result<Vec<Hash>, StateError> {
        let threads: ThreadsIndex = self.threads()?;
        let path = self.attempts_path();
        let mut attempts: AttemptsIndex = load_yaml(&path)?.unwrap_or_default();
        let before = attempts.len();
        attempts.retain(|t, _| threads.contains_key(t));
        if prune && attempts.len() != before {
            store_yaml(&path, &attempts)?;
        }
        let wpath = self.waiting_path();
        let mut waiting: WaitingIndex = load_yaml(&wpath)?.unwrap_or_default();
        let before = waiting.len();
        waiting.retain(|t, r| current(&threads, *t, r));
        if prune && waiting.len() != before {
            store_yaml(&wpath, &waiting)?;
        }
        Ok(attempts.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeGuard;
    use uwf_protocol::fixtures::{hash as h, thread as t};

    fn record(head: &str, role: &str) -> WaitingRecord {
        WaitingRecord {
            head: h(head),
            role: role.into(),
            prompt: "approve?".into(),
            agent: "me".into(),
            since: 1,
            child: None,
        }
    }

    #[test]
    fn a_wait_counts_only_at_its_head() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let s = FsState::new(dir.path());
        s.insert_thread(t("T"), h("A"), &NodeGuard::vouched())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            s.mark_waiting(t("T"), record("A", "reviewer"))
                .unwrap_or(false)
        );
        // Again at the same head: not a new wait, `since` kept.
        let mut later = record("A", "reviewer");
        later.since = 99;
        assert!(!s.mark_waiting(t("T"), later).unwrap_or(true));
        assert_eq!(
            s.waiting_of(t("T")).ok().flatten().map(|r| r.since),
            Some(1)
        );
        // The head moves: the entry is stale at once.
        s.swap_head(t("T"), h("A"), h("B"), &NodeGuard::vouched())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.waiting_of(t("T")).ok().flatten(), None);
        // Waiting at a head the thread does not have is refused.
        assert!(matches!(
            s.mark_waiting(t("T"), record("A", "reviewer")),
            Err(StateError::Conflict { .. })
        ));
        // A killed thread does not wait either, and gc forgets it.
        assert!(
            s.mark_waiting(t("T"), record("B", "reviewer"))
                .unwrap_or(false)
        );
        s.archive(t("T"), h("W"), None, "killed")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.waiting().unwrap_or_default().is_empty());
        let roots = s
            .side_table_roots_locked(true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(roots.is_empty());
        let raw = std::fs::read_to_string(s.waiting_path()).unwrap_or_default();
        assert!(!raw.contains(&t("T").to_string()), "{raw}");
    }

    #[test]
    fn attempts_chain_and_survive_only_for_active_threads() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let s = FsState::new(dir.path());
        s.insert_thread(t("T"), h("A"), &NodeGuard::vouched())
            .unwrap_or_else(|e| panic!("{e}"));
        s.insert_thread(t("U"), h("A"), &NodeGuard::vouched())
            .unwrap_or_else(|e| panic!("{e}"));
        let first = s.record_attempt(t("T"), |prev| -> Result<Hash, StateError> {
            assert_eq!(prev, None);
            Ok(h("R1"))
        });
        assert_eq!(first.ok(), Some(h("R1")));
        let second = s.record_attempt(t("T"), |prev| -> Result<Hash, StateError> {
            assert_eq!(prev, Some(h("R1")));
            Ok(h("R2"))
        });
        assert_eq!(second.ok(), Some(h("R2")));
        let failed = s.record_attempt(t("T"), |_| -> Result<Hash, StateError> {
            Err(StateError::NotActive { thread: t("T") })
        });
        assert!(failed.is_err());
        assert_eq!(s.attempt_head(t("T")).ok().flatten(), Some(h("R2")));
        s.record_attempt(t("U"), |_| -> Result<Hash, StateError> { Ok(h("R9")) })
            .unwrap_or_else(|e| panic!("{e}"));
        s.archive(t("U"), h("W"), None, "done")
            .unwrap_or_else(|e| panic!("{e}"));
        // A dry run changes nothing; a real one drops U's entry.
        let roots = s
            .side_table_roots_locked(false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(roots, vec![h("R2")]);
        assert_eq!(s.attempt_head(t("U")).ok().flatten(), Some(h("R9")));
        let roots = s
            .side_table_roots_locked(true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(roots, vec![h("R2")]);
        assert_eq!(s.attempt_head(t("U")).ok().flatten(), None);
    }
}
