//! Crash-safe file writes.
//!
//! Whole-file writes go to a temporary file in the target's directory, are
//! flushed to disk, renamed over the target and the directory entry is then
//! flushed too, so after a crash a reader sees either the old or the new
//! content, never a torn file. Temporary files are named `.uwf-*.tmp` so
//! directory scans can skip leftovers from a killed process.
//!
//! None of these functions create parent directories. Files they create are
//! private (`0600`, [`crate::private`]); a file they replace keeps its mode.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use miette::Diagnostic;
use tempfile::NamedTempFile;
use thiserror::Error;

use crate::private::FILE_MODE;

/// Prefix of the temporary files created next to a target.
pub const TEMP_PREFIX: &str = ".uwf-";
/// Suffix of the temporary files created next to a target.
pub const TEMP_SUFFIX: &str = ".tmp";

/// A failed file write. Every variant names the path involved.
#[derive(Debug, Error, Diagnostic)]
pub enum AtomicError {
    /// Writing, flushing or renaming into place failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The target file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Opening or appending to a log-style file failed.
    #[error("cannot append to {}: {source}", path.display())]
    Append {
        /// The target file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A line passed to [`append_line`] contained a newline.
    #[error("cannot append to {}: the line contains a newline", path.display())]
    #[diagnostic(help("each record must be a single line; escape or encode embedded newlines"))]
    Newline {
        /// The target file.
        path: PathBuf,
    },
    /// Flushing a directory entry to disk failed.
    #[error("cannot sync directory {}: {source}", path.display())]
    SyncDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// Atomically replaces (or creates) `path` with `bytes`.
///
/// An existing file's permission bits are kept (a mode the user chose
/// stays); a new file is private, [`FILE_MODE`] (`0600`) whatever the
/// umask. A symlink at `path` is replaced by a regular file, not followed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AtomicError> {
    let mode = existing_mode(path);
    write_impl(path, bytes, mode)
}

/// Like [`write_atomic`] but the file gets exactly `mode` (Unix permission
/// bits, not subject to the umask). `mode` is ignored on other platforms.
pub fn write_atomic_with_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), AtomicError> {
    write_impl(path, bytes, Some(mode))
}

/// Replaces `path`, which must exist, with `bytes` as [`write_atomic`]
/// does (readers see the old or the new content; once it returns, the new
/// content is on disk), by rewriting `spare`, a file kept next to `path`
/// for this, and exchanging the two names in one step (Linux's
/// `renameat2(RENAME_EXCHANGE)`): `spare` then holds the old content,
/// ready for the next time. Rewriting blocks a file has costs the disk
/// much less than creating a file, writing it and freeing the old one
/// (docs/performance.md, "A step's writes folded"). Since the spare is
/// rewritten in place, whoever reads `path` must read it under a shared
/// lock ([`File::lock_shared`]): a reader that opened the file before an
/// exchange may read it after; the rewrite takes the exclusive lock, and
/// is not made (`Ok(false)`) while a reader holds the shared one. `spare` is created if missing
/// (private, [`FILE_MODE`]) and is not a file to read: between two calls
/// it holds an older content. `Ok(false)` when this cannot be done (no
/// file at `path`, a filesystem or a system without the exchange); nothing
/// at `path` changed then, and the caller writes it the usual way.
pub fn replace_via_spare(path: &Path, spare: &Path, bytes: &[u8]) -> Result<bool, AtomicError> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::errno::Errno;
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};

        let Ok(meta) = fs::symlink_metadata(path) else {
            return Ok(false);
        };
        if !meta.file_type().is_file() {
            return Ok(false);
        }
        // The spare, written and flushed. A spare that cannot be (not a
        // regular file of ours, say) changes nothing at `path`: the caller
        // writes it the usual way, which reports a real write failure.
        let prepared = (|| -> io::Result<()> {
            // Not through a symlink: the spare is ours, in a directory of ours.
            let file = crate::private::open_options()
                .write(true)
                .create(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(spare)?;
            // The spare was the file at `path` before the last exchange, and
            // a reader that opened it then may still read it: readers hold a
            // shared lock while they read (`FsState`'s head reads), so the
            // rewrite in place is made under an exclusive one, and not made
            // while a reader holds it.
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(io::Error::other("a reader holds it"));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
            let spare_meta = file.metadata()?;
            if !spare_meta.file_type().is_file() {
                return Err(io::Error::other("not a regular file"));
            }
            file.write_all_at(bytes, 0)?;
            let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
            if spare_meta.len() != len {
                file.set_len(len)?;
            }
            // The file at `path` keeps its mode, as with `write_atomic`.
            let mode = meta.permissions().mode() & 0o7777;
            let chmod = spare_meta.permissions().mode() & 0o7777 != mode;
            if chmod {
                file.set_permissions(fs::Permissions::from_mode(mode))?;
            }
            // The new content is on disk before its name is: only the data
            // when the file kept its mode (the common case, and the cheap
            // flush; a new length is flushed with the data), else the
            // inode too.
            if chmod {
                file.sync_all()
            } else {
                file.sync_data()
            }
        })();
        if let Err(e) = prepared {
            tracing::debug!(
                "not writing {} through {}: {e}",
                path.display(),
                spare.display()
            );
            return Ok(false);
        }
        match renameat2(
            AT_FDCWD,
            spare,
            AT_FDCWD,
            path,
            RenameFlags::RENAME_EXCHANGE,
        ) {
            Ok(()) => {}
            // Not supported here, or `path` went away meanwhile.
            Err(
                Errno::EINVAL | Errno::ENOSYS | Errno::EXDEV | Errno::ENOENT | Errno::EOPNOTSUPP,
            ) => {
                return Ok(false);
            }
            Err(e) => return Err(write_err(path, io::Error::from(e))),
        }
        sync_dir(parent_dir(path))?;
        Ok(true)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (path, spare, bytes);
        Ok(false)
    }
}

/// Replaces (or creates) `path` with `bytes` by a rename, so readers see the
/// old or the new content, but without flushing anything to disk: for
/// derived or observational files (caches, markers of running processes)
/// whose loss in a crash is harmless and whose readers check them. A crash
/// may leave the old content, the new one, or an empty file. The file is
/// private ([`FILE_MODE`]), like the temporary file it was.
pub fn replace_unsynced(path: &Path, bytes: &[u8]) -> Result<(), AtomicError> {
    let err = |e| write_err(path, e);
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .suffix(TEMP_SUFFIX)
        .tempfile_in(parent_dir(path))
        .map_err(err)?;
    tmp.write_all(bytes).map_err(err)?;
    tmp.persist(path).map_err(|e| write_err(path, e.error))?;
    Ok(())
}

/// Creates `path` with `bytes` unless something already exists there.
///
/// Returns `Ok(true)` if this call created the file and `Ok(false)` if a
/// file was already present, including when a concurrent writer won the
/// race; the existing content is never touched.
pub fn create_new_atomic(path: &Path, bytes: &[u8]) -> Result<bool, AtomicError> {
    // Cheap early exit; the no-clobber rename below is what guarantees it.
    if fs::symlink_metadata(path).is_ok() {
        return Ok(false);
    }
    let tmp = prepare_temp(path, bytes, None)?;
    match tmp.persist_noclobber(path) {
        Ok(_) => {
            sync_dir(parent_dir(path))?;
            Ok(true)
        }
        // Dropping the returned temp file deletes it.
        Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(write_err(path, e.error)),
    }
}

/// Appends `line` plus `"\n"` to `path` (created if missing, private:
/// [`FILE_MODE`]) and flushes it.
///
/// The record goes out in a single `write` on an `O_APPEND` descriptor, so
/// concurrent appenders do not interleave within a line on local file
/// systems.
pub fn append_line(path: &Path, line: &str) -> Result<(), AtomicError> {
    if line.contains('\n') {
        return Err(AtomicError::Newline {
            path: path.to_path_buf(),
        });
    }
    let err = |source| AtomicError::Append {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match OpenOptions::new().append(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let file = crate::private::open_options()
                .append(true)
                .create(true)
                .open(path)
                .map_err(err)?;
            // A new directory entry is only durable once the directory is synced.
            sync_dir(parent_dir(path))?;
            file
        }
        Err(e) => return Err(err(e)),
    };
    let mut record = String::with_capacity(line.len() + 1);
    record.push_str(line);
    record.push('\n');
    file.write_all(record.as_bytes()).map_err(err)?;
    file.sync_data().map_err(err)
}

/// Flushes the directory entries of `dir` to disk. A no-op off Unix, where
/// directories cannot be opened this way.
pub fn sync_dir(dir: &Path) -> Result<(), AtomicError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| AtomicError::SyncDir {
                path: dir.to_path_buf(),
                source,
            })
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

fn write_impl(path: &Path, bytes: &[u8], mode: Option<u32>) -> Result<(), AtomicError> {
    let tmp = prepare_temp(path, bytes, mode)?;
    tmp.persist(path).map_err(|e| write_err(path, e.error))?;
    sync_dir(parent_dir(path))
}

/// A fully written and flushed temp file next to `path`, ready to rename.
fn prepare_temp(
    path: &Path,
    bytes: &[u8],
    mode: Option<u32>,
) -> Result<NamedTempFile, AtomicError> {
    let err = |e| write_err(path, e);
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX).suffix(TEMP_SUFFIX);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // What uwf writes is for its owner only (docs/state.md, "Secrets and
        // file modes"); tempfile's default is the same, said here on purpose.
        builder.permissions(fs::Permissions::from_mode(FILE_MODE));
    }
    let mut tmp = builder.tempfile_in(parent_dir(path)).map_err(err)?;
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt;
        // fchmod is exact, unlike the creation mode which the umask trims.
        tmp.as_file()
            .set_permissions(fs::Permissions::from_mode(mode))
            .map_err(err)?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    tmp.write_all(bytes).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    Ok(tmp)
}

fn existing_mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// The directory holding `path`; `.` for a bare file name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn write_err(path: &Path, source: io::Error) -> AtomicError {
    AtomicError::Write {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_spare_takes_the_new_content_and_keeps_the_old() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (path, spare) = (dir.path().join("head"), dir.path().join(".head.spare"));
        // Nothing to replace: nothing written.
        assert!(!replace_via_spare(&path, &spare, b"one\n").unwrap());
        assert_eq!(entries(dir.path()), Vec::<String>::new());
        write_atomic(&path, b"one\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        assert!(replace_via_spare(&path, &spare, b"two\n").unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"two\n");
        assert_eq!(fs::read(&spare).unwrap(), b"one\n");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o640, "the file keeps its mode");
        // Again, with a shorter content: the spare is rewritten whole.
        assert!(replace_via_spare(&path, &spare, b"3\n").unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"3\n");
        assert_eq!(fs::read(&spare).unwrap(), b"two\n");
        assert_eq!(entries(dir.path()), vec![".head.spare", "head"]);
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_spare_that_is_not_a_file_of_ours_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let (path, spare) = (dir.path().join("head"), dir.path().join(".head.spare"));
        let elsewhere = dir.path().join("elsewhere");
        fs::write(&elsewhere, b"keep").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &spare).unwrap();
        write_atomic(&path, b"one\n").unwrap();
        // Refused: the caller writes the usual way.
        assert!(!replace_via_spare(&path, &spare, b"two\n").unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"one\n");
        assert_eq!(fs::read(&elsewhere).unwrap(), b"keep");
        // A reader holding the spare (it was the file at `path` before an
        // exchange): not rewritten under it.
        fs::remove_file(&spare).unwrap();
        fs::write(&spare, b"old\n").unwrap();
        let reader = File::open(&spare).unwrap();
        reader.lock_shared().unwrap();
        assert!(!replace_via_spare(&path, &spare, b"two\n").unwrap());
        assert_eq!(fs::read(&spare).unwrap(), b"old\n");
        assert_eq!(fs::read(&path).unwrap(), b"one\n");
        drop(reader);
        assert!(replace_via_spare(&path, &spare, b"two\n").unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"two\n");
        write_atomic(&path, b"one\n").unwrap();
        // A spare that is not a file at all: the same.
        fs::remove_file(&spare).unwrap();
        fs::create_dir(&spare).unwrap();
        assert!(!replace_via_spare(&path, &spare, b"two\n").unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"one\n");
    }

    #[test]
    fn writes_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        write_atomic(&p, b"one").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"two, longer").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two, longer");
        write_atomic(&p, b"").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"");
        assert_eq!(entries(dir.path()), ["f.txt"]);
    }

    #[test]
    fn relative_bare_file_name_uses_current_dir() {
        assert_eq!(parent_dir(Path::new("x")), Path::new("."));
        assert_eq!(parent_dir(Path::new("a/x")), Path::new("a"));
    }

    #[cfg(unix)]
    #[test]
    fn modes() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".env");

        write_atomic_with_mode(&p, b"SECRET=1", 0o600).unwrap();
        assert_eq!(mode(&p), 0o600);
        write_atomic(&p, b"SECRET=2").unwrap();
        assert_eq!(mode(&p), 0o600, "replacement keeps the old bits");
        assert_eq!(fs::read(&p).unwrap(), b"SECRET=2");

        write_atomic_with_mode(&p, b"x", 0o640).unwrap();
        assert_eq!(mode(&p), 0o640);

        // New files are private, whatever the umask gives `File::create`;
        // so are the other writers' new files.
        let q = dir.path().join("new");
        write_atomic(&q, b"x").unwrap();
        assert_eq!(mode(&q), 0o600);
        let r = dir.path().join("new-unsynced");
        replace_unsynced(&r, b"x").unwrap();
        assert_eq!(mode(&r), 0o600);
        let c = dir.path().join("new-object");
        assert!(create_new_atomic(&c, b"x").unwrap());
        assert_eq!(mode(&c), 0o600);
        let l = dir.path().join("new.jsonl");
        append_line(&l, "x").unwrap();
        assert_eq!(mode(&l), 0o600);
        // A replaced file keeps the mode it had, private or not.
        fs::set_permissions(&q, fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic(&q, b"y").unwrap();
        assert_eq!(mode(&q), 0o644);
    }

    #[test]
    fn missing_directory_errors_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing").join("f.txt");
        let err = write_atomic(&p, b"x").unwrap_err();
        assert!(matches!(err, AtomicError::Write { .. }));
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");
        let err = create_new_atomic(&p, b"x").unwrap_err();
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");
        let err = append_line(&p, "x").unwrap_err();
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");
    }

    #[test]
    fn create_new_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        assert!(create_new_atomic(&p, b"first").unwrap());
        assert!(!create_new_atomic(&p, b"second").unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"first");
        assert_eq!(entries(dir.path()), ["f"]);
    }

    #[test]
    fn create_new_race_has_exactly_one_winner() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let p = Arc::new(dir.path().join("obj"));
            let barrier = Arc::new(Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let (p, barrier) = (Arc::clone(&p), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        let content = format!("writer {i}");
                        barrier.wait();
                        (create_new_atomic(&p, content.as_bytes()).unwrap(), content)
                    })
                })
                .collect();
            let results: Vec<(bool, String)> =
                handles.into_iter().map(|h| h.join().unwrap()).collect();
            let winners: Vec<&String> = results.iter().filter(|r| r.0).map(|r| &r.1).collect();
            assert_eq!(winners.len(), 1, "{results:?}");
            assert_eq!(fs::read_to_string(&*p).unwrap(), *winners[0]);
            assert_eq!(entries(dir.path()), ["obj"]);
        }
    }

    #[test]
    fn append_line_appends_records() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        append_line(&p, "{\"a\":1}").unwrap();
        append_line(&p, "").unwrap();
        append_line(&p, "third").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n\nthird\n");
    }

    #[test]
    fn append_line_rejects_newlines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let err = append_line(&p, "two\nlines").unwrap_err();
        assert!(matches!(err, AtomicError::Newline { .. }));
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");
        assert!(!p.exists(), "nothing is written for a rejected line");
    }

    #[test]
    fn concurrent_appends_do_not_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let p = Arc::new(dir.path().join("log"));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let p = Arc::clone(&p);
                std::thread::spawn(move || {
                    let line = i.to_string().repeat(1000);
                    for _ in 0..25 {
                        append_line(&p, &line).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let text = fs::read_to_string(&*p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 100);
        for line in lines {
            assert_eq!(line.len(), 1000);
            assert!(line.bytes().all(|b| b == line.as_bytes()[0]));
        }
    }

    #[test]
    fn sync_dir_reports_missing_dir() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        sync_dir(dir.path()).unwrap();
        if cfg!(unix) {
            let err = sync_dir(&missing).unwrap_err();
            assert!(err.to_string().contains("nope"), "{err}");
        }
    }
}
