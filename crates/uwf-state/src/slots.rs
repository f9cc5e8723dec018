//! Per-workflow concurrency slots, shared by every process on the machine.
//!
//! A workflow limited to `N` concurrent steps (`config.yaml`'s `workflows`
//! section, [`WorkflowLimits`]) has `N` slots. A step holds one while its
//! agent runs. Everything lives under `<root>/slots/<workflow>/`:
//!
//! ```text
//! slots/<workflow>/
//! ├── slot-0.lock … slot-<N-1>.lock   a slot is held = its file is flock'ed
//! ├── queue.lock                      serialises joining the queue
//! └── queue/
//!     ├── 000000000007-4242-01J…      a waiter's ticket, flock'ed by the waiter
//!     └── 000000000006-4240-01J….evicted   a ticket the queue pushed out
//! ```
//!
//! # Slots
//!
//! A slot is an advisory lock ([`FileLock`], `flock`) on `slot-<i>.lock`.
//! Acquiring tries each slot's lock without waiting; the held lock is the
//! [`SlotGuard`], and dropping it frees the slot. The operating system
//! drops the lock when the holder exits for any reason, `kill -9`
//! included, so a crashed process never keeps a slot. Locks are taken on
//! close-on-exec descriptors: an agent a step started does not inherit
//! them.
//!
//! # The queue (`overflow: queue`)
//!
//! A first-in first-out queue that survives crashes, built from files:
//!
//! 1. **Tickets.** A waiter owns a ticket file in `queue/`, named
//!    `<seq>-<pid>-<ulid>`, and holds an `flock` on it for as long as it
//!    waits. `seq` (12 zero-padded digits) orders the queue; the ULID
//!    makes every name unique, so a name is never reused. A ticket whose
//!    lock can be taken belongs to a dead process: it is **stale**, and
//!    whoever notices removes it (while holding its lock).
//! 2. **Joining** happens under the exclusive lock on `queue.lock` (held for
//!    milliseconds, never while waiting). The joiner removes stale files;
//!    if no live ticket is left it tries the slots directly (nobody is
//!    waiting, so nobody is overtaken) and is done if one is free.
//!    Otherwise, while the queue holds `maxQueue` live tickets or more, it
//!    **evicts** the oldest by renaming it to `<name>.evicted` (the rename
//!    keeps the file and its lock). Then it creates its own ticket with
//!    `seq` = the largest `seq` present + 1: it writes and locks
//!    `queue/.new-<name>` and renames that to `<name>`, so a ticket is
//!    never visible unlocked (and never mistaken for stale).
//! 3. **Waiting.** Every [poll interval](DEFAULT_POLL) a waiter checks
//!    that its ticket still exists under its name (if not, it was evicted:
//!    it fails with [`SlotError::Evicted`]) and counts the live tickets
//!    ordered before its own. With none ahead it is the head of the queue
//!    and tries the slots. Only the head does, so waiters get slots in
//!    arrival order.
//! 4. **Leaving.** The head that got a slot removes its ticket. Eviction
//!    (a rename) and leaving (an unlink) race on one name and exactly one
//!    wins: if the ticket is gone when the head removes it, the head was
//!    evicted and frees the slot it just took. A waiter that gives up
//!    (eviction, [`Waiting`] callback saying stop, error) removes its file.
//!
//! Why this is safe under races: every change of the queue's membership
//! is a single atomic file-system operation (rename into place, rename to
//! `.evicted`, unlink); joins, which need a consistent count, are
//! serialised by `queue.lock`; liveness comes from `flock`, which the OS
//! releases on death; and removing a stale ticket only happens while
//! holding its lock, which a live owner never lets go. A crash at any
//! point leaves at worst a stale ticket or `.new-` file, which the next
//! join (or a waiter behind it) removes.
//!
//! With `overflow: drop` there is no queue: no free slot means
//! [`SlotError::Full`] at once.

use std::fmt::Write as _;
use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use miette::Diagnostic;
use thiserror::Error;
use uwf_protocol::{Overflow, WorkflowLimits};

use uwf_util::lock::{FileLock, LockError};

/// Directory under the storage root holding every workflow's slots.
pub const SLOTS_DIR: &str = "slots";
/// Directory (in a workflow's slot directory) holding the queue's tickets.
pub const QUEUE_DIR: &str = "queue";
/// Lock file (in a workflow's slot directory) serialising joins.
pub const QUEUE_LOCK: &str = "queue.lock";
/// How often a waiter looks at the queue.
pub const DEFAULT_POLL: Duration = Duration::from_millis(25);
/// How long joining waits for [`QUEUE_LOCK`] (held for milliseconds).
const QUEUE_LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// Suffix of a ticket the queue pushed out.
const EVICTED_SUFFIX: &str = ".evicted";
/// Prefix of a ticket being created.
const NEW_PREFIX: &str = ".new-";
/// Longest directory name used for a workflow before it is shortened.
const MAX_DIR_NAME: usize = 120;

/// A failure to get a slot.
#[derive(Debug, Error, Diagnostic)]
pub enum SlotError {
    /// A slot or queue file could not be created, read or removed.
    #[error("cannot access {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A lock file could not be locked.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Lock(#[from] LockError),
    /// `overflow: drop` and every slot is taken.
    #[error("every slot of workflow {workflow:?} is taken ({concurrency} step(s) running)")]
    Full {
        /// The workflow name.
        workflow: String,
        /// Its number of slots.
        concurrency: u32,
    },
    /// The queue was full when a newer step arrived, and this step was its
    /// oldest waiter.
    #[error(
        "pushed out of the queue of workflow {workflow:?} after {waited:.1?}: a newer step arrived while {max_queue} were waiting"
    )]
    Evicted {
        /// The workflow name.
        workflow: String,
        /// Its `maxQueue`.
        max_queue: u32,
        /// How long this step waited.
        waited: Duration,
    },
    /// A failure of a storage backend other than the filesystem (a
    /// database) while taking a slot. The message never holds a secret.
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
    /// The [`Waiting`] callback asked to stop waiting.
    #[error("stopped waiting for a slot of workflow {workflow:?}")]
    Cancelled {
        /// The workflow name.
        workflow: String,
    },
}

/// What a waiter knows, passed to the callback of [`Slots::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    /// Live waiters ahead of this one (0: next in line, all slots busy).
    pub ahead: usize,
    /// Time since [`Slots::acquire`] was called.
    pub waited: Duration,
}

/// A held slot; dropping it frees the slot (so does the process exiting).
#[derive(Debug)]
pub struct SlotGuard {
    _lock: FileLock,
    index: u32,
}

impl SlotGuard {
    /// Which slot (`0..concurrency`).
    pub fn index(&self) -> u32 {
        self.index
    }
}

/// The slots of one workflow in one storage root. Cheap and stateless:
/// every call looks at the files afresh.
#[derive(Debug, Clone)]
pub struct Slots {
    dir: PathBuf,
    workflow: String,
    limits: WorkflowLimits,
    poll: Duration,
}

impl Slots {
    /// The slots of `workflow` under `<root>/slots/`. Nothing is touched
    /// until a slot is asked for.
    pub fn new(root: &Path, workflow: &str, limits: WorkflowLimits) -> Self {
        Slots {
            dir: root.join(SLOTS_DIR).join(dir_name(workflow)),
            workflow: workflow.to_owned(),
            limits,
            poll: DEFAULT_POLL,
        }
    }

    /// The same slots with another poll interval (default [`DEFAULT_POLL`]).
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// `<root>/slots/<workflow>`: the workflow's name, with every byte
    /// other than ASCII letters, digits, `_`, `-` and a non-leading `.`
    /// written as `%XX`; names longer than 120 bytes so written are cut
    /// and end in `~` and a hash of the whole name.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<root>/slots/<workflow>/queue`.
    pub fn queue_dir(&self) -> PathBuf {
        self.dir.join(QUEUE_DIR)
    }

    /// The lock file of slot `index`.
    pub fn slot_path(&self, index: u32) -> PathBuf {
        self.dir.join(format!("slot-{index}.lock"))
    }

    /// The limits these slots enforce.
    pub fn limits(&self) -> WorkflowLimits {
        self.limits
    }

    /// Takes any free slot without waiting or looking at the queue;
    /// `Ok(None)` if all are taken.
    pub fn try_acquire(&self) -> Result<Option<SlotGuard>, SlotError> {
        create_dir(&self.dir)?;
        for index in 0..self.limits.concurrency() {
            if let Some(lock) = FileLock::try_exclusive(&self.slot_path(index))? {
                return Ok(Some(SlotGuard { _lock: lock, index }));
            }
        }
        Ok(None)
    }

    /// Gets a slot following the workflow's overflow policy.
    ///
    /// `drop`: a free slot, or [`SlotError::Full`]. `queue`: waits in the
    /// queue (see the [module documentation](self)); fails with
    /// [`SlotError::Evicted`] if a newer step pushes this one out. While it
    /// waits, `on_wait` is called every poll interval; returning `false`
    /// stops waiting with [`SlotError::Cancelled`] (use it for kill flags
    /// and interrupts).
    pub fn acquire(&self, on_wait: impl FnMut(&Waiting) -> bool) -> Result<SlotGuard, SlotError> {
        match self.limits.overflow() {
            Overflow::Drop => self.try_acquire()?.ok_or_else(|| SlotError::Full {
                workflow: self.workflow.clone(),
                concurrency: self.limits.concurrency(),
            }),
            Overflow::Queue => self.queued(on_wait),
        }
    }

    fn queued(&self, mut on_wait: impl FnMut(&Waiting) -> bool) -> Result<SlotGuard, SlotError> {
        let started = Instant::now();
        let ticket = match self.join()? {
            Joined::Slot(guard) => return Ok(guard),
            Joined::Ticket(ticket) => ticket,
        };
        let evicted = || SlotError::Evicted {
            workflow: self.workflow.clone(),
            max_queue: self.limits.max_queue(),
            waited: started.elapsed(),
        };
        loop {
            if !ticket.queued()? {
                return Err(evicted());
            }
            let ahead = self.live_ahead(&ticket.key)?;
            if ahead == 0
                && let Some(guard) = self.try_acquire()?
            {
                return if ticket.leave()? {
                    Ok(guard)
                } else {
                    // Evicted between our last look and now: the eviction
                    // counted us as waiting, so give the slot back.
                    drop(guard);
                    Err(evicted())
                };
            }
            let waiting = Waiting {
                ahead,
                waited: started.elapsed(),
            };
            if !on_wait(&waiting) {
                return Err(SlotError::Cancelled {
                    workflow: self.workflow.clone(),
                });
            }
            thread::sleep(self.poll);
        }
    }

    /// Step 2 of the protocol, under `queue.lock`.
    fn join(&self) -> Result<Joined, SlotError> {
        let queue = self.queue_dir();
        create_dir(&queue)?;
        let _joining = FileLock::exclusive_timeout(&self.dir.join(QUEUE_LOCK), QUEUE_LOCK_TIMEOUT)?;
        let mut live = Vec::new();
        let mut max_seq = 0;
        for entry in scan(&queue)? {
            max_seq = max_seq.max(entry.key.seq);
            // Nobody else is joining, so a `.new-` file is a crash's leftover;
            // probing removes it (and any stale ticket) unless it is locked.
            if probe(&entry.path)? == Probe::Live && entry.kind == Kind::Ticket {
                live.push(entry);
            }
        }
        if live.is_empty()
            && let Some(guard) = self.try_acquire()?
        {
            return Ok(Joined::Slot(guard));
        }
        let max_queue = usize::try_from(self.limits.max_queue()).unwrap_or(usize::MAX);
        // `live` is sorted oldest first; evict from the front.
        let mut live = live.into_iter();
        while live.len() >= max_queue {
            let Some(oldest) = live.next() else { break };
            match fs::rename(&oldest.path, evicted_path(&oldest.path)) {
                Ok(()) => {
                    tracing::debug!(ticket = %oldest.path.display(), "queue full: evicted the oldest waiter")
                }
                // It left (got its slot or gave up) meanwhile: one fewer anyway.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(SlotError::Io {
                        path: oldest.path,
                        source,
                    });
                }
            }
        }
        Ok(Joined::Ticket(Ticket::create(&queue, max_seq + 1)?))
    }

    /// The live tickets ordered before `key`; removes stale ones on the way.
    fn live_ahead(&self, key: &Key) -> Result<usize, SlotError> {
        let mut ahead = 0;
        for entry in scan(&self.queue_dir())? {
            if entry.kind == Kind::Ticket && entry.key < *key && probe(&entry.path)? == Probe::Live
            {
                ahead += 1;
            }
        }
        Ok(ahead)
    }
}

enum Joined {
    Slot(SlotGuard),
    Ticket(Ticket),
}

/// Our place in the queue: the locked ticket file.
struct Ticket {
    path: PathBuf,
    key: Key,
    left: bool,
    // Declared last: dropped after `Drop::drop` removed the file.
    _lock: FileLock,
}

impl Ticket {
    /// Creates, locks and publishes a ticket with sequence number `seq`.
    fn create(queue: &Path, seq: u64) -> Result<Ticket, SlotError> {
        let name = format!("{seq:012}-{}-{}", std::process::id(), ulid::Ulid::new());
        let path = queue.join(&name);
        let new = queue.join(format!("{NEW_PREFIX}{name}"));
        let lock = FileLock::try_exclusive(&new)?.ok_or_else(|| SlotError::Io {
            path: new.clone(),
            source: io::Error::other("a freshly created ticket is locked by someone else"),
        })?;
        if let Err(source) = fs::rename(&new, &path) {
            let _ = fs::remove_file(&new);
            return Err(SlotError::Io { path, source });
        }
        let key = parse_name(&name).map_or(
            Key {
                seq,
                rest: String::new(),
            },
            |(key, _)| key,
        );
        Ok(Ticket {
            path,
            key,
            left: false,
            _lock: lock,
        })
    }

    /// Whether the ticket is still in the queue (not evicted).
    fn queued(&self) -> Result<bool, SlotError> {
        match fs::symlink_metadata(&self.path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(SlotError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Leaves the queue with a slot; `false` if the ticket was evicted first.
    fn leave(mut self) -> Result<bool, SlotError> {
        match fs::remove_file(&self.path) {
            Ok(()) => {
                self.left = true;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(SlotError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.left {
            // Gave up or was evicted: take our file, whichever name it has.
            let _ = fs::remove_file(&self.path);
            let _ = fs::remove_file(evicted_path(&self.path));
        }
    }
}

/// Queue order: sequence number, then the rest of the (unique) name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    seq: u64,
    rest: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A waiting ticket.
    Ticket,
    /// A ticket pushed out, not yet cleaned up by its owner.
    Evicted,
    /// A ticket being created (or left by a crash while it was).
    New,
}

struct Entry {
    path: PathBuf,
    key: Key,
    kind: Kind,
}

/// `<seq>-<rest>` → its key; `None` for names the queue did not write.
fn parse_name(name: &str) -> Option<(Key, Kind)> {
    let (name, kind) = if let Some(n) = name.strip_prefix(NEW_PREFIX) {
        (n, Kind::New)
    } else if let Some(n) = name.strip_suffix(EVICTED_SUFFIX) {
        (n, Kind::Evicted)
    } else {
        (name, Kind::Ticket)
    };
    let (seq, rest) = name.split_once('-')?;
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = seq.parse().ok()?;
    Some((
        Key {
            seq,
            rest: rest.to_owned(),
        },
        kind,
    ))
}

/// The queue's files, oldest first (unknown names are ignored).
fn scan(queue: &Path) -> Result<Vec<Entry>, SlotError> {
    let io_err = |source| SlotError::Io {
        path: queue.to_path_buf(),
        source,
    };
    let rd = match fs::read_dir(queue) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(e)),
    };
    let mut entries = Vec::new();
    for item in rd {
        let item = item.map_err(io_err)?;
        let name = item.file_name();
        let Some((key, kind)) = name.to_str().and_then(parse_name) else {
            continue;
        };
        entries.push(Entry {
            path: item.path(),
            key,
            kind,
        });
    }
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(entries)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Its owner holds its lock.
    Live,
    /// Gone, or stale and now removed.
    Gone,
}

/// Whether a queue file's owner is alive; removes it if not.
///
/// The file is opened without creating it (so a ticket that just left is
/// not resurrected) and its lock tried: taking it proves the owner is
/// dead, and the file is removed while the lock is held.
fn probe(path: &Path) -> Result<Probe, SlotError> {
    let io_err = |source| SlotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Gone),
        Err(e) => return Err(io_err(e)),
    };
    match file.try_lock() {
        Ok(()) => {
            tracing::debug!(ticket = %path.display(), "removing a stale queue ticket");
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(e)),
            }
            let _ = file.unlock();
            Ok(Probe::Gone)
        }
        Err(TryLockError::WouldBlock) => Ok(Probe::Live),
        Err(TryLockError::Error(e)) => Err(io_err(e)),
    }
}

fn evicted_path(ticket: &Path) -> PathBuf {
    let mut name = ticket.as_os_str().to_owned();
    name.push(EVICTED_SUFFIX);
    PathBuf::from(name)
}

fn create_dir(dir: &Path) -> Result<(), SlotError> {
    uwf_util::private::create_dir_all(dir).map_err(|source| SlotError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

/// A workflow name as a single, safe directory name (see [`Slots::dir`]).
fn dir_name(workflow: &str) -> String {
    if workflow.is_empty() {
        // No other name encodes to a lone `%`.
        return "%".to_owned();
    }
    let mut out = String::with_capacity(workflow.len());
    for (i, b) in workflow.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    if out.len() > MAX_DIR_NAME {
        // `~` is always encoded, so a shortened name cannot equal a plain one.
        out.truncate(MAX_DIR_NAME - 17);
        let _ = write!(out, "~{:016x}", fnv1a(workflow.as_bytes()));
    }
    out
}

/// 64-bit FNV-1a: tiny, and stable across versions and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier, Mutex};

    fn queue(concurrency: u32, max_queue: u32) -> WorkflowLimits {
        WorkflowLimits::queue(concurrency, max_queue).unwrap()
    }

    fn slots(root: &Path, limits: WorkflowLimits) -> Slots {
        Slots::new(root, "wf", limits).with_poll(Duration::from_millis(5))
    }

    /// Live tickets in the queue.
    fn waiting(s: &Slots) -> usize {
        scan(&s.queue_dir())
            .unwrap()
            .iter()
            .filter(|e| e.kind == Kind::Ticket)
            .count()
    }

    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    fn queue_files(s: &Slots) -> Vec<String> {
        fs::read_dir(s.queue_dir())
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn directory_names_are_safe_and_distinct() {
        assert_eq!(dir_name("solve-issue"), "solve-issue");
        assert_eq!(dir_name("a_b.c-9"), "a_b.c-9");
        assert_eq!(dir_name(".."), "%2E.");
        assert_eq!(dir_name("a/b"), "a%2Fb");
        assert_eq!(dir_name("a%2Fb"), "a%252Fb");
        assert_eq!(dir_name("été"), "%C3%A9t%C3%A9");
        assert_eq!(dir_name(""), "%");
        let long = "x".repeat(300);
        let short = dir_name(&long);
        assert!(short.len() <= MAX_DIR_NAME, "{short}");
        assert!(short.contains('~'));
        assert_ne!(short, dir_name(&"x".repeat(301)));
        let root = Path::new("/r");
        let s = Slots::new(root, "a/../b", queue(1, 1));
        assert_eq!(s.dir(), Path::new("/r/slots/a%2F..%2Fb"));
        assert_eq!(s.slot_path(2), Path::new("/r/slots/a%2F..%2Fb/slot-2.lock"));
    }

    #[test]
    fn ticket_names_parse_and_order() {
        let (a, k) = parse_name("000000000002-7-01J").unwrap();
        assert_eq!(k, Kind::Ticket);
        let (b, k) = parse_name("000000000010-1-01A.evicted").unwrap();
        assert_eq!(k, Kind::Evicted);
        assert!(a < b, "numeric order");
        assert_eq!(parse_name(".new-000000000003-1-X").unwrap().1, Kind::New);
        assert!(parse_name("junk").is_none());
        assert!(parse_name("-1-x").is_none());
        assert!(parse_name("12a-1-x").is_none());
    }

    #[test]
    fn drop_policy_fails_at_once_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let s = slots(dir.path(), WorkflowLimits::drop(2).unwrap());
        let a = s.acquire(|_| panic!("drop never waits")).unwrap();
        let b = s.acquire(|_| panic!("drop never waits")).unwrap();
        assert_ne!(a.index(), b.index());
        let err = s.acquire(|_| panic!("drop never waits")).unwrap_err();
        assert!(
            matches!(&err, SlotError::Full { workflow, concurrency: 2 } if workflow == "wf"),
            "{err:?}"
        );
        drop(a);
        let c = s.acquire(|_| true).unwrap();
        drop((b, c));
        assert!(s.queue_dir().read_dir().is_err(), "drop makes no queue");
    }

    #[test]
    fn the_limit_holds_across_threads_and_everyone_gets_a_turn() {
        let dir = tempfile::tempdir().unwrap();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                // One `Slots` per thread: separate lock handles, as separate
                // processes would have.
                let s = slots(dir.path(), queue(2, 16));
                let (running, most, start) = (running.clone(), most.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    let guard = s.acquire(|_| true).unwrap();
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(30));
                    running.fetch_sub(1, Ordering::SeqCst);
                    drop(guard);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(waiting(&slots(dir.path(), queue(2, 16))), 0);
    }

    /// Holds the only slot, queues `n` waiters one after the other, and
    /// returns them; each records its number in `order` when served.
    fn queue_up(
        s: &Slots,
        n: usize,
        order: &Arc<Mutex<Vec<usize>>>,
    ) -> Vec<thread::JoinHandle<Result<(), SlotError>>> {
        (0..n)
            .map(|i| {
                let mine = s.clone();
                let order = order.clone();
                let h = thread::spawn(move || {
                    let guard = mine.acquire(|_| true)?;
                    order.lock().unwrap().push(i);
                    thread::sleep(Duration::from_millis(10));
                    drop(guard);
                    Ok(())
                });
                // Joined before the next one arrives.
                wait_until("the waiter joined", || {
                    waiting(s) == i + 1 || h.is_finished()
                });
                h
            })
            .collect()
    }

    #[test]
    fn waiters_are_served_first_in_first_out() {
        let dir = tempfile::tempdir().unwrap();
        let s = slots(dir.path(), queue(1, 16));
        let held = s.try_acquire().unwrap().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters = queue_up(&s, 5, &order);
        thread::sleep(Duration::from_millis(50));
        assert!(order.lock().unwrap().is_empty(), "nobody got the held slot");
        drop(held);
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
        assert!(queue_files(&s).is_empty(), "{:?}", queue_files(&s));
    }

    #[test]
    fn a_full_queue_pushes_out_its_oldest_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let s = slots(dir.path(), queue(1, 2));
        let held = s.try_acquire().unwrap().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = queue_up(&s, 2, &order).into_iter();
        let first = waiters.next().unwrap();
        // A third arrives: the queue holds 2, so the first gives up.
        let mut rest: Vec<_> = waiters.collect();
        let third = s.clone();
        let o = order.clone();
        rest.push(thread::spawn(move || {
            let g = third.acquire(|_| true)?;
            o.lock().unwrap().push(2);
            drop(g);
            Ok(())
        }));
        let err = first.join().unwrap().unwrap_err();
        assert!(
            matches!(&err, SlotError::Evicted { workflow, max_queue: 2, .. } if workflow == "wf"),
            "{err:?}"
        );
        assert!(err.to_string().contains("pushed out of the queue"), "{err}");
        assert!(order.lock().unwrap().is_empty());
        drop(held);
        for w in rest {
            w.join().unwrap().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [1, 2]);
        assert!(queue_files(&s).is_empty(), "{:?}", queue_files(&s));
    }

    #[test]
    fn waiting_reports_the_place_in_the_queue_and_can_be_cancelled() {
        let dir = tempfile::tempdir().unwrap();
        let s = slots(dir.path(), queue(1, 16));
        let held = s.try_acquire().unwrap().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = queue_up(&s, 1, &order);
        let mut seen = Vec::new();
        let err = s
            .acquire(|w| {
                seen.push(w.ahead);
                seen.len() < 3
            })
            .unwrap_err();
        assert!(matches!(err, SlotError::Cancelled { .. }), "{err:?}");
        assert_eq!(seen, [1, 1, 1]);
        assert_eq!(waiting(&s), 1, "the cancelled ticket is gone");
        drop(held);
        for w in first {
            w.join().unwrap().unwrap();
        }
        // The head of the queue sees nobody ahead.
        let held = s.try_acquire().unwrap().unwrap();
        let mut seen = Vec::new();
        let _ = s.acquire(|w| {
            seen.push(w.ahead);
            false
        });
        assert_eq!(seen, [0]);
        drop(held);
    }

    #[test]
    fn stale_queue_files_are_removed_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let s = slots(dir.path(), queue(1, 1));
        fs::create_dir_all(s.queue_dir()).unwrap();
        // Files of dead waiters: nobody holds their locks.
        for name in [
            "000000000001-1-A",
            "000000000002-1-B.evicted",
            ".new-000000000003-1-C",
        ] {
            fs::write(s.queue_dir().join(name), "").unwrap();
        }
        fs::write(s.queue_dir().join("README"), "not ours").unwrap();
        let guard = s
            .acquire(|_| panic!("a stale ticket made us wait"))
            .unwrap();
        assert_eq!(queue_files(&s), ["README"]);
        drop(guard);

        // A stale ticket that appears ahead of us while we wait is not
        // counted, and is removed.
        let held = s.try_acquire().unwrap().unwrap();
        let mut seen = Vec::new();
        let got = s.acquire(|w| {
            seen.push(w.ahead);
            if seen.len() == 1 {
                fs::write(s.queue_dir().join("000000000000-1-Z"), "").unwrap();
            }
            seen.len() < 4
        });
        assert!(matches!(got, Err(SlotError::Cancelled { .. })));
        assert_eq!(seen, [0, 0, 0, 0]);
        drop(held);
        assert_eq!(queue_files(&s), ["README"]);
    }

    // ----- processes ------------------------------------------------------

    /// Set (to a storage root) when this test binary runs as a helper child.
    const CHILD_ENV: &str = "UWF_SLOTS_TEST_CHILD";

    /// The helper: takes the slot of `wf` (concurrency 1, queue) in the
    /// root named by [`CHILD_ENV`], writes `<root>/ready` once it holds the
    /// slot or waits in the queue, then sleeps until killed. A no-op in a
    /// normal test run.
    #[test]
    fn child_process_helper() {
        let Some(root) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let root = PathBuf::from(root);
        let s = slots(&root, queue(1, 16));
        let ready = root.join("ready");
        let _guard = s
            .acquire(|_| {
                let _ = fs::write(&ready, "queued");
                true
            })
            .unwrap();
        fs::write(&ready, "held").unwrap();
        thread::sleep(Duration::from_secs(60));
    }

    /// Starts the helper on `root` and waits until it says `state`.
    fn child(root: &Path, state: &str) -> std::process::Child {
        let _ = fs::remove_file(root.join("ready"));
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "slots::tests::child_process_helper",
                "--exact",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, root)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_until(&format!("the child is {state}"), || {
            fs::read_to_string(root.join("ready")).is_ok_and(|s| s == state)
        });
        child
    }

    #[test]
    fn a_slot_or_ticket_of_a_killed_process_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let s = slots(dir.path(), queue(1, 16));

        // A process holds the slot: nobody else gets it, until kill -9.
        let mut holder = child(dir.path(), "held");
        assert!(s.try_acquire().unwrap().is_none());
        holder.kill().unwrap(); // SIGKILL
        holder.wait().unwrap();
        let held = s.try_acquire().unwrap().expect("released by the OS");

        // A process waits in the queue and is killed: its ticket is stale
        // and nobody queues behind it.
        let mut waiter = child(dir.path(), "queued");
        assert_eq!(waiting(&s), 1);
        waiter.kill().unwrap();
        waiter.wait().unwrap();
        drop(held);
        let t = Instant::now();
        let mut ahead = Vec::new();
        let guard = s
            .acquire(|w| {
                ahead.push(w.ahead);
                true
            })
            .unwrap();
        assert!(ahead.is_empty(), "waited behind a dead ticket: {ahead:?}");
        assert!(t.elapsed() < Duration::from_secs(2));
        assert!(queue_files(&s).is_empty(), "{:?}", queue_files(&s));
        drop(guard);
    }
}
