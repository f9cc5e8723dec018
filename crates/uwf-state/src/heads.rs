//! Thread heads, one small file per active thread: `threads/<thread-id>`
//! holds the head hash and a newline.
//!
//! One file per thread keeps a step's cost independent of how many threads
//! are open: reading a head (and the kill flag a running step polls) reads
//! one file, and a compare-and-swap rewrites one file. The single
//! `threads.yaml` of uwf 0.1.0 was rewritten whole on every step.
//!
//! A store written by uwf 0.1.0 has `threads.yaml` and no `threads/`. Reads
//! use it as it is; the first change (under the state lock) migrates it:
//! the heads are written into a temporary directory, which is renamed to
//! `threads/` in one step, and `threads.yaml` is then renamed to
//! `threads.yaml.migrated` (kept for reference, never read again). A crash
//! at any point leaves either the old layout or the complete new one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use uwf_protocol::{Hash, ThreadId, ThreadsIndex};
use uwf_util::atomic::{TEMP_PREFIX, TEMP_SUFFIX, sync_dir, write_atomic};

use crate::state::{FsState, StateError, THREADS_FILE, load_yaml};

/// Directory of the per-thread head files.
pub const THREADS_DIR: &str = "threads";
/// What `threads.yaml` of uwf 0.1.0 is renamed to once migrated.
pub const MIGRATED_THREADS_FILE: &str = "threads.yaml.migrated";

/// The thread a head file's name stands for: only the canonical form of a
/// [`ThreadId`] names one, so temporary files of an interrupted write and
/// foreign files are never mistaken for threads.
pub(crate) fn thread_of_file_name(name: &str) -> Option<ThreadId> {
    let id: ThreadId = name.parse().ok()?;
    (id.to_string() == name).then_some(id)
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl FsState {
    /// `<root>/threads/`, the per-thread head files.
    pub fn heads_dir(&self) -> PathBuf {
        self.root().join(THREADS_DIR)
    }

    fn head_file(&self, thread: ThreadId) -> PathBuf {
        // A ThreadId displays as 26 alphabet characters: always a plain name.
        self.heads_dir().join(thread.to_string())
    }

    /// Whether the store uses the per-thread layout (it is migrated, or new).
    fn migrated(&self) -> bool {
        self.heads_dir().is_dir()
    }

    /// The head recorded in `path`, `None` if there is no such file.
    fn read_head_file(path: &Path) -> Result<Option<Hash>, StateError> {
        let mut file = match fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(path)(e)),
        };
        // Under a shared lock: the file may become the spare the next move
        // rewrites in place, which it does under an exclusive lock and never
        // while a reader holds this one (`write_head_locked`).
        file.lock_shared().map_err(io_err(path))?;
        let mut text = Vec::with_capacity(32);
        io::Read::read_to_end(&mut file, &mut text).map_err(io_err(path))?;
        let head = std::str::from_utf8(&text)
            .ok()
            .and_then(|h| h.trim_end().parse::<Hash>().ok());
        match head {
            Some(h) => Ok(Some(h)),
            None => Err(StateError::Parse {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                message: "a head file holds one hash and a newline".to_owned(),
            }),
        }
    }

    /// The head of `thread` if it is active (no state lock: the file is
    /// replaced atomically and read under its own shared lock, so a read
    /// sees the old or the new head).
    pub(crate) fn read_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        let path = self.head_file(thread);
        if let Some(head) = Self::read_head_file(&path)? {
            return Ok(Some(head));
        }
        if self.migrated() {
            // The directory may have appeared (a migration) after the read
            // above failed; now that it exists, a second read is the answer.
            return Self::read_head_file(&path);
        }
        let legacy: ThreadsIndex = load_yaml(&self.threads_path())?.unwrap_or_default();
        Ok(legacy.get(&thread).copied())
    }

    /// Every active thread and its head.
    pub(crate) fn read_heads(&self) -> Result<ThreadsIndex, StateError> {
        let dir = self.heads_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return load_yaml(&self.threads_path()).map(Option::unwrap_or_default);
            }
            Err(e) => return Err(io_err(&dir)(e)),
        };
        let mut out = ThreadsIndex::new();
        for entry in entries {
            let entry = entry.map_err(io_err(&dir))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(thread_of_file_name) else {
                // Temporary files of an interrupted write, or foreign files.
                continue;
            };
            // A thread archived between the listing and this read is gone.
            if let Some(head) = Self::read_head_file(&entry.path())? {
                out.insert(id, head);
            }
        }
        Ok(out)
    }

    /// Converts a store of uwf 0.1.0 to the per-thread layout. Call with the
    /// state lock held, before any change of a head.
    pub(crate) fn migrate_heads_locked(&self) -> Result<(), StateError> {
        if self.migrated() {
            return Ok(());
        }
        let legacy_path = self.threads_path();
        let legacy: ThreadsIndex = load_yaml(&legacy_path)?.unwrap_or_default();
        let tmp = self.root().join(format!(
            "{TEMP_PREFIX}threads-{}{TEMP_SUFFIX}",
            std::process::id()
        ));
        match fs::remove_dir_all(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&tmp)(e)),
        }
        uwf_util::private::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        for (id, head) in &legacy {
            write_atomic(&tmp.join(id.to_string()), format!("{head}\n").as_bytes())?;
        }
        sync_dir(&tmp)?;
        fs::rename(&tmp, self.heads_dir()).map_err(io_err(&tmp))?;
        sync_dir(self.root())?;
        if legacy_path.exists() {
            let kept = self.root().join(MIGRATED_THREADS_FILE);
            fs::rename(&legacy_path, &kept).map_err(io_err(&legacy_path))?;
            sync_dir(self.root())?;
            tracing::info!(
                threads = legacy.len(),
                "moved the thread heads of {THREADS_FILE} into {THREADS_DIR}/ (one file per thread)"
            );
        }
        Ok(())
    }

    /// Where the previous content of `thread`'s head file is kept, to be
    /// rewritten into the next head ([`uwf_util::atomic::replace_via_spare`]):
    /// a name no thread has, so listings skip it.
    fn spare_head_file(&self, thread: ThreadId) -> PathBuf {
        self.heads_dir().join(format!(".{thread}.spare"))
    }

    /// Writes the head of `thread` (state lock held, layout migrated): by
    /// rewriting the spare file and exchanging it with the head file where
    /// the system can (a step's head no longer creates and frees a file:
    /// docs/performance.md, "A step's writes folded"), else by a new file renamed
    /// into place.
    pub(crate) fn write_head_locked(&self, thread: ThreadId, head: Hash) -> Result<(), StateError> {
        let path = self.head_file(thread);
        let bytes = format!("{head}\n");
        if !uwf_util::atomic::replace_via_spare(
            &path,
            &self.spare_head_file(thread),
            bytes.as_bytes(),
        )? {
            write_atomic(&path, bytes.as_bytes())?;
        }
        Ok(())
    }

    /// Removes the head file of `thread` and its spare (state lock held,
    /// layout migrated).
    pub(crate) fn remove_head_locked(&self, thread: ThreadId) -> Result<(), StateError> {
        let path = self.head_file(thread);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        // A spare left behind is harmless (listings skip it): its removal
        // never stops an archive.
        let spare = self.spare_head_file(thread);
        if let Err(e) = fs::remove_file(&spare)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::debug!("cannot remove {}: {e}", spare.display());
        }
        sync_dir(&self.heads_dir())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::NodeGuard;
    use uwf_protocol::fixtures::{hash as h, thread as t};

    #[test]
    fn only_canonical_thread_ids_name_head_files() {
        for bad in [
            "",
            "..",
            "a/b",
            ".uwf-x.tmp",
            "a b",
            &"A".repeat(65),
            // Parses (case and aliases are forgiven) but is not canonical.
            "01m85h61wdys2metw4y8qbvmrn",
        ] {
            assert_eq!(thread_of_file_name(bad), None, "{bad:?}");
        }
        assert!(thread_of_file_name("01M85H61WDYS2METW4Y8QBVMRN").is_some());
    }

    #[test]
    fn a_legacy_index_is_read_then_migrated_on_the_first_change() {
        let dir = tempfile::tempdir().unwrap();
        let state = FsState::new(dir.path());
        fs::write(
            state.threads_path(),
            format!("{}: {}\n{}: {}\n", t("AAA"), h("H1"), t("BBB"), h("H2")),
        )
        .unwrap();
        assert_eq!(state.read_head(t("AAA")).unwrap(), Some(h("H1")));
        assert_eq!(state.read_heads().unwrap().len(), 2);
        state
            .swap_head(t("AAA"), h("H1"), h("H3"), &NodeGuard::vouched())
            .unwrap();
        assert!(state.heads_dir().is_dir());
        assert!(!state.threads_path().exists());
        assert!(dir.path().join(MIGRATED_THREADS_FILE).exists());
        assert_eq!(state.read_head(t("AAA")).unwrap(), Some(h("H3")));
        assert_eq!(state.read_head(t("BBB")).unwrap(), Some(h("H2")));
    }

    /// Heads rewritten through a spare file: the listing sees threads only,
    /// and archiving leaves neither file behind.
    #[test]
    fn heads_moved_through_a_spare_list_as_before_and_archive_clean() {
        let dir = tempfile::tempdir().unwrap();
        let state = FsState::new(dir.path());
        state
            .insert_thread(t("AAA"), h("H1"), &NodeGuard::vouched())
            .unwrap();
        for (from, to) in [("H1", "H2"), ("H2", "H3")] {
            state
                .swap_head(t("AAA"), h(from), h(to), &NodeGuard::vouched())
                .unwrap();
        }
        assert_eq!(state.read_head(t("AAA")).unwrap(), Some(h("H3")));
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert_eq!(
            fs::read_to_string(state.spare_head_file(t("AAA"))).unwrap(),
            format!("{}\n", h("H2")),
            "the spare holds the head before"
        );
        let heads = state.read_heads().unwrap();
        assert_eq!(heads.len(), 1);
        assert_eq!(heads.get(&t("AAA")), Some(&h("H3")));
        state
            .archive(t("AAA"), h("W"), Some(h("H3")), "done")
            .unwrap();
        let left: Vec<_> = fs::read_dir(state.heads_dir()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// A spare that cannot be used (here a directory in its place) leaves
    /// the head written the usual way.
    #[test]
    fn a_head_moves_when_its_spare_cannot_be_used() {
        let dir = tempfile::tempdir().unwrap();
        let state = FsState::new(dir.path());
        state
            .insert_thread(t("AAA"), h("H1"), &NodeGuard::vouched())
            .unwrap();
        fs::create_dir(state.spare_head_file(t("AAA"))).unwrap();
        state
            .swap_head(t("AAA"), h("H1"), h("H2"), &NodeGuard::vouched())
            .unwrap();
        assert_eq!(state.read_head(t("AAA")).unwrap(), Some(h("H2")));
        assert_eq!(state.read_heads().unwrap().len(), 1);
        state
            .archive(t("AAA"), h("W"), Some(h("H2")), "done")
            .unwrap();
        assert_eq!(state.read_head(t("AAA")).unwrap(), None);
    }

    #[test]
    fn a_damaged_head_file_is_a_parse_error_not_a_missing_thread() {
        let dir = tempfile::tempdir().unwrap();
        let state = FsState::new(dir.path());
        state
            .insert_thread(t("AAA"), h("H1"), &NodeGuard::vouched())
            .unwrap();
        fs::write(state.heads_dir().join(t("AAA").to_string()), b"\xff\n").unwrap();
        assert!(matches!(
            state.read_head(t("AAA")),
            Err(StateError::Parse { .. })
        ));
    }

    #[test]
    fn temporary_files_in_the_directory_are_not_threads() {
        let dir = tempfile::tempdir().unwrap();
        let state = FsState::new(dir.path());
        state
            .insert_thread(t("AAA"), h("H1"), &NodeGuard::vouched())
            .unwrap();
        fs::write(
            state.heads_dir().join(format!(".uwf-{}.tmp", t("AAA"))),
            format!("{}\n", h("H9")),
        )
        .unwrap();
        let heads = state.read_heads().unwrap();
        assert_eq!(heads.len(), 1);
    }
}
