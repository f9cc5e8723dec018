//! Advisory file locks.
//!
//! Backed by [`File::lock`] (`flock` on Unix, `LockFileEx` on Windows): the
//! lock belongs to the open file, so it is released when the [`FileLock`] is
//! dropped and by the OS when the process dies, even on `kill -9`. Two
//! handles opened separately conflict even inside one process.

use std::fs::{File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use miette::Diagnostic;
use thiserror::Error;

/// A failure to take a lock. Every variant names the lock file.
#[derive(Debug, Error, Diagnostic)]
pub enum LockError {
    /// The lock file could not be opened or created.
    #[error("cannot open lock file {}: {source}", path.display())]
    Open {
        /// The lock file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The OS refused the lock for a reason other than contention.
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The lock stayed held by someone else for the whole timeout.
    #[error("timed out after {waited:.1?} waiting for the lock on {}", path.display())]
    #[diagnostic(help(
        "another uwf process holds the lock; wait for it to finish, or check for a stuck uwf process"
    ))]
    Timeout {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
}

/// A held advisory lock on a file; released on drop.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

/// Longest pause between attempts in [`FileLock::exclusive_timeout`].
const MAX_BACKOFF: Duration = Duration::from_millis(50);

impl FileLock {
    /// Takes an exclusive lock on `path`, creating the file if missing and
    /// blocking until it is available.
    pub fn exclusive(path: &Path) -> Result<FileLock, LockError> {
        let file = open(path)?;
        file.lock().map_err(|e| lock_err(path, e))?;
        Ok(FileLock::held(file, path))
    }

    /// Takes a shared lock on `path`, creating the file if missing and
    /// blocking while an exclusive lock is held.
    pub fn shared(path: &Path) -> Result<FileLock, LockError> {
        let file = open(path)?;
        file.lock_shared().map_err(|e| lock_err(path, e))?;
        Ok(FileLock::held(file, path))
    }

    /// Takes an exclusive lock on `path` if nobody holds any lock on it;
    /// `Ok(None)` if someone does.
    pub fn try_exclusive(path: &Path) -> Result<Option<FileLock>, LockError> {
        let file = open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(FileLock::held(file, path))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(lock_err(path, e)),
        }
    }

    /// Takes an exclusive lock on `path`, giving up with
    /// [`LockError::Timeout`] after `timeout`.
    pub fn exclusive_timeout(path: &Path, timeout: Duration) -> Result<FileLock, LockError> {
        let file = open(path)?;
        let start = Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(FileLock::held(file, path)),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(lock_err(path, e)),
            }
            let waited = start.elapsed();
            let Some(left) = timeout.checked_sub(waited).filter(|d| !d.is_zero()) else {
                return Err(LockError::Timeout {
                    path: path.to_path_buf(),
                    waited,
                });
            };
            thread::sleep(backoff.min(left));
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// The locked file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn held(file: File, path: &Path) -> FileLock {
        FileLock {
            file,
            path: path.to_path_buf(),
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the file would release it too; unlocking first makes the
        // release independent of any other handle to the same open file.
        let _ = self.file.unlock();
    }
}

fn open(path: &Path) -> Result<File, LockError> {
    // Write access lets us create the file; the content is never touched.
    // Created private like every file uwf makes (`crate::private`).
    crate::private::open_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| LockError::Open {
            path: path.to_path_buf(),
            source,
        })
}

fn lock_err(path: &Path, source: io::Error) -> LockError {
    LockError::Lock {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn exclusive_excludes_other_handles_in_the_same_process() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let held = FileLock::exclusive(&p).unwrap();
        assert_eq!(held.path(), p);
        assert!(FileLock::try_exclusive(&p).unwrap().is_none());

        // Also at the raw std level: two opens of one path conflict.
        let other = File::open(&p).unwrap();
        assert!(matches!(
            other.try_lock_shared(),
            Err(TryLockError::WouldBlock)
        ));
    }

    #[test]
    fn drop_releases() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let held = FileLock::try_exclusive(&p).unwrap().unwrap();
        assert!(FileLock::try_exclusive(&p).unwrap().is_none());
        drop(held);
        assert!(FileLock::try_exclusive(&p).unwrap().is_some());
    }

    #[test]
    fn shared_locks_coexist_but_exclude_writers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let a = FileLock::shared(&p).unwrap();
        let b = FileLock::shared(&p).unwrap();
        assert!(FileLock::try_exclusive(&p).unwrap().is_none());
        drop(a);
        assert!(FileLock::try_exclusive(&p).unwrap().is_none());
        drop(b);
        assert!(FileLock::try_exclusive(&p).unwrap().is_some());
    }

    #[test]
    fn timeout_fires_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let _held = FileLock::exclusive(&p).unwrap();
        let timeout = Duration::from_millis(120);
        let err = FileLock::exclusive_timeout(&p, timeout).unwrap_err();
        match &err {
            LockError::Timeout { path, waited } => {
                assert_eq!(path, &p);
                assert!(*waited >= timeout, "{waited:?}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");

        let err = FileLock::exclusive_timeout(&p, Duration::ZERO).unwrap_err();
        assert!(matches!(err, LockError::Timeout { .. }));
    }

    #[test]
    fn timeout_succeeds_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let held = FileLock::exclusive(&p).unwrap();
        let releaser = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        FileLock::exclusive_timeout(&p, Duration::from_secs(10)).unwrap();
        releaser.join().unwrap();
    }

    #[test]
    fn exclusive_blocks_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let held = FileLock::exclusive(&p).unwrap();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let p = p.clone();
            thread::spawn(move || {
                let lock = FileLock::exclusive(&p).unwrap();
                tx.send(()).unwrap();
                drop(lock);
            })
        };
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        drop(held);
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        waiter.join().unwrap();
    }

    #[test]
    fn missing_directory_errors_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing").join("lock");
        let err = FileLock::exclusive(&p).unwrap_err();
        assert!(matches!(err, LockError::Open { .. }));
        assert!(err.to_string().contains(&p.display().to_string()), "{err}");
    }
}
