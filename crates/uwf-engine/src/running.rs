//! What is running: a marker file per thread while its agent works, the
//! agent's stderr in a log beside it, and the time each landed step took.
//!
//! ```text
//! <root>/running/<thread>.json   the marker, while an agent runs (atomic write)
//! <root>/logs/<thread>.log       every agent's stderr, with a header per run
//! <root>/logs/<thread>.jsonl     one line per landed step: {step, role, agent, host, startedAt, durationMs}
//! ```
//!
//! Every line of the log has the store's secrets cut out (the step
//! redacts it before the sink gets it), and the files and directories
//! are created private (`0600`/`0700`).
//!
//! The marker is removed when the agent ends. A `uwf` that dies leaves it
//! behind: a reader never trusts it blindly but checks that the process
//! it names is alive (and, on Linux, is the same process: its start time
//! matches), and reports a marker that fails the check as stale.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uwf_protocol::{Hash, ThreadId};
use uwf_state::ThreadStore;

/// The marker of a running agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Marker {
    /// The thread.
    pub thread: ThreadId,
    /// The role its agent works on.
    pub role: String,
    /// The agent (alias or command line).
    pub agent: String,
    /// The `uwf` process running the step (the agent is its child).
    pub pid: u32,
    /// That process's start time in clock ticks since boot (Linux), to
    /// tell it from a later process that reuses the pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    /// The machine.
    pub host: String,
    /// When the agent started (ms since the Unix epoch).
    pub started_at: u64,
    /// The head the step started from.
    pub head: Hash,
    /// Where the agent's stderr goes: this log file, and the terminal of
    /// the `uwf` that runs it.
    pub log: PathBuf,
    /// The agent's process id, which is also its process group (once it
    /// started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_pid: Option<u32>,
    /// The agent's start time in clock ticks since boot (Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_start: Option<u64>,
}

/// A marker as a reader finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Its process is alive (or on another host, where it cannot be checked).
    Live(Marker),
    /// Its process is gone: left by a `uwf` that died.
    Stale(Marker, String),
}

/// One landed step's timing, a line of `<root>/logs/<thread>.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    /// The StepNode.
    pub step: Hash,
    /// Its role.
    pub role: String,
    /// The agent.
    pub agent: String,
    /// Where it ran.
    pub host: String,
    /// When the agent started (ms since the Unix epoch).
    pub started_at: u64,
    /// How long the agent ran.
    pub duration_ms: u64,
}

fn marker_path(root: &Path, thread: ThreadId) -> PathBuf {
    root.join("running").join(format!("{thread}.json"))
}

/// The stderr log of a thread's agents.
pub fn log_path(root: &Path, thread: ThreadId) -> PathBuf {
    root.join("logs").join(format!("{thread}.log"))
}

fn timings_path(root: &Path, thread: ThreadId) -> PathBuf {
    root.join("logs").join(format!("{thread}.jsonl"))
}

/// This machine's name.
pub fn host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// A process's start time (field 22 of `/proc/<pid>/stat`), when readable.
/// [`process_start`] of this process, read once.
fn own_start() -> Option<u64> {
    static START: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *START.get_or_init(|| process_start(std::process::id()))
}

fn process_start(pid: u32) -> Option<u64> {
    stat_field(pid, 19)?.parse().ok()
}

/// Field `n + 3` of `/proc/<pid>/stat` (`n` counts from the state, field 3).
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(n).map(str::to_string)
}

/// Whether process `pid` has exited and waits to be reaped (its parent
/// died and nobody reaps it, as in a container without an init).
fn zombie(pid: u32) -> bool {
    stat_field(pid, 0).is_some_and(|state| state == "Z")
}

/// Whether process `pid` (started at `start`, if known) still runs here.
fn alive(pid: u32, start: Option<u64>) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => {}
        Err(_) => return false,
    }
    if zombie(pid) {
        return false;
    }
    match (start, process_start(pid)) {
        (Some(want), Some(now)) => want == now,
        _ => true,
    }
}

/// The marker of `thread`, checked; `None` when no agent of it runs (or
/// the marker cannot be read).
pub fn find(root: &Path, thread: ThreadId) -> Option<Found> {
    let text = std::fs::read(marker_path(root, thread)).ok()?;
    let marker: Marker = serde_json::from_slice(&text).ok()?;
    if marker.host != host() {
        return Some(Found::Live(marker));
    }
    Some(checked(marker))
}

/// A marker of this machine as its process says: live or stale.
fn checked(marker: Marker) -> Found {
    if alive(marker.pid, marker.pid_start) {
        Found::Live(marker)
    } else {
        let why = format!(
            "process {} on {} is gone; the step it ran was never applied",
            marker.pid, marker.host
        );
        Found::Stale(marker, why)
    }
}

/// [`find`], then — for a store that shares its markers with every machine
/// ([`SideTables::shares_running`](uwf_state::SideTables::shares_running), a database) — the store's marker: an
/// agent running on another machine, or started from another root. A
/// marker of this machine is checked like a local one (its process must
/// be alive); one of another machine counts while the thread's head is
/// still the one its step started from.
pub fn find_shared(root: &Path, store: &dyn ThreadStore, thread: ThreadId) -> Option<Found> {
    if let Some(found) = find(root, thread) {
        return Some(found);
    }
    if !store.shares_running() {
        return None;
    }
    let text = store
        .running_marker(thread)
        .map_err(|e| tracing::debug!(%thread, "cannot read the running marker: {e}"))
        .ok()??;
    let marker: Marker = serde_json::from_str(&text).ok()?;
    if marker.host == host() {
        return Some(checked(marker));
    }
    match store.thread_head(thread) {
        Ok(Some(head)) if head == marker.head => Some(Found::Live(marker)),
        Ok(_) => {
            let why = format!(
                "the thread moved on from the head the step on {} started from",
                marker.host
            );
            Some(Found::Stale(marker, why))
        }
        Err(_) => Some(Found::Live(marker)),
    }
}

/// [`find_shared`]'s live marker, if an agent of `thread` runs now.
pub fn live_shared(root: &Path, store: &dyn ThreadStore, thread: ThreadId) -> Option<Marker> {
    match find_shared(root, store, thread)? {
        Found::Live(m) => Some(m),
        Found::Stale(..) => None,
    }
}

/// The live marker of `thread`, if an agent of it runs now.
pub fn live(root: &Path, thread: ThreadId) -> Option<Marker> {
    match find(root, thread)? {
        Found::Live(m) => Some(m),
        Found::Stale(..) => None,
    }
}

/// The timings of a thread's landed steps, by StepNode.
pub fn timings(root: &Path, thread: ThreadId) -> std::collections::HashMap<Hash, Timing> {
    let Ok(text) = std::fs::read_to_string(timings_path(root, thread)) else {
        return Default::default();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<Timing>(l).ok())
        .map(|t| (t.step, t))
        .collect()
}

/// A running agent's marker and log, held for as long as it runs: the log
/// opened by [`Running::start`], the marker written when the agent started
/// ([`Running::agent_started`]), removed when dropped.
pub struct Running {
    marker: Marker,
    path: PathBuf,
    log: Arc<Mutex<Option<std::fs::File>>>,
    /// The store that shares markers with other machines, when it does.
    store: Option<Arc<dyn ThreadStore>>,
    /// The marker as put in that store (removed only if it is still that),
    /// once [`share`](Self::share) put it.
    shared: Mutex<Option<String>>,
    started: std::time::Instant,
}

/// How long an agent runs before its marker goes to a shared store: a
/// step that lands sooner is seen by its head moving, and would pay two
/// database transactions for a marker nobody reads.
pub const SHARE_AFTER: Duration = Duration::from_secs(1);

impl Running {
    /// Prepares the marker of `thread` running `role` with `agent` from
    /// `head` (written when the agent has started), and opens its stderr
    /// log. Failing to write them does not stop the step: the agent runs
    /// unobserved (a warning says so).
    pub fn start(
        root: &Path,
        store: &Arc<dyn ThreadStore>,
        thread: ThreadId,
        role: &str,
        agent: &str,
        head: Hash,
        started_at: u64,
    ) -> Running {
        let pid = std::process::id();
        let marker = Marker {
            thread,
            role: role.to_string(),
            agent: agent.to_string(),
            pid,
            pid_start: own_start(),
            host: host(),
            started_at,
            head,
            log: log_path(root, thread),
            agent_pid: None,
            agent_start: None,
        };
        // Written once the agent has started, with its pid
        // ([`agent_started`](Self::agent_started)): the marker is for seeing
        // and stopping the agent, and a step writes it once, not twice.
        let path = marker_path(root, thread);
        let store = store.shares_running().then(|| Arc::clone(store));
        let log = open_log(&marker.log).map(|mut f| {
            let header = format!(
                "── {role} · {agent} · started {} on {} (uwf pid {pid}) ──\n",
                humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + Duration::from_millis(started_at)
                ),
                marker.host
            );
            let _ = f.write_all(header.as_bytes());
            f
        });
        Running {
            marker,
            path,
            log: Arc::new(Mutex::new(log)),
            store,
            shared: Mutex::new(None),
            started: std::time::Instant::now(),
        }
    }

    /// Puts the marker in a store that shares markers with other machines,
    /// once the agent has run for [`SHARE_AFTER`] (called as the step
    /// watches its agent; later calls do nothing). A failure is a warning:
    /// the agent runs on, seen from this machine only.
    pub fn share(&self) {
        let Some(store) = &self.store else {
            return;
        };
        if self.started.elapsed() < SHARE_AFTER {
            return;
        }
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.is_some() {
            return;
        }
        let Ok(text) = serde_json::to_string(&self.marker) else {
            return;
        };
        match store.put_running(self.marker.thread, &text) {
            Ok(()) => *shared = Some(text),
            Err(e) => tracing::warn!("cannot record the running agent in the store: {e}"),
        }
    }

    /// The agent started as process `pid` (its own process group): the
    /// marker records it, so that a worker taking the thread over after
    /// this `uwf` died can stop an agent left running ([`stop_orphan`]).
    pub fn agent_started(&self, pid: u32) {
        let marker = Marker {
            agent_pid: Some(pid),
            agent_start: process_start(pid),
            ..self.marker.clone()
        };
        write_marker(&self.path, &marker);
    }

    /// Something that appends a stderr line to the log, for the agent's
    /// stderr callback; it writes lines as given, so the caller redacts
    /// them first (the step does, [`crate::secrets`]).
    pub fn sink(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let log = Arc::clone(&self.log);
        move |line: &str| {
            let mut guard = log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // One write per line (a `File` is not buffered, and the log is
            // appended to by whole lines).
            if let Some(f) = guard.as_mut()
                && f.write_all(format!("{line}\n").as_bytes()).is_err()
            {
                *guard = None;
            }
        }
    }

    /// The step landed as `step` after `elapsed`: its timing is recorded.
    pub fn landed(&self, root: &Path, step: Hash, elapsed: Duration) {
        let timing = Timing {
            step,
            role: self.marker.role.clone(),
            agent: self.marker.agent.clone(),
            host: self.marker.host.clone(),
            started_at: self.marker.started_at,
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        };
        let path = timings_path(root, self.marker.thread);
        let line = serde_json::to_string(&timing).unwrap_or_default();
        // Observational, so not flushed to disk (an fsync per step would be
        // most of the step's own cost); a line torn by a crash is skipped by
        // its readers.
        let appended = open_log(&path)
            .ok_or_else(|| std::io::Error::other("cannot open the file"))
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = appended {
            tracing::warn!(
                "cannot record the step's duration in {}: {e}",
                path.display()
            );
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Only our own marker: a later step of the thread may have replaced it.
        let ours = std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Marker>(&b).ok())
            .is_some_and(|m| {
                Marker {
                    agent_pid: None,
                    agent_start: None,
                    ..m
                } == self.marker
            });
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
        let shared = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let (Some(store), Some(text)) = (&self.store, shared)
            && let Err(e) = store.clear_running(self.marker.thread, &text)
        {
            // Left behind, it reads as stale once the head moves on.
            tracing::warn!("cannot remove the running agent's marker from the store: {e}");
        }
    }
}

fn write_marker(path: &Path, marker: &Marker) {
    let written = path
        .parent()
        .map_or(Ok(()), uwf_util::private::create_dir_all)
        .map_err(|e| e.to_string())
        .and_then(|()| serde_json::to_vec_pretty(marker).map_err(|e| e.to_string()))
        .and_then(|bytes| {
            // Not flushed to disk: a marker lost in a crash says "not
            // running", which is then the truth; readers check the pid.
            uwf_util::atomic::replace_unsynced(path, &bytes).map_err(|e| e.to_string())
        });
    if let Err(e) = written {
        tracing::warn!("cannot write the running marker {}: {e}", path.display());
    }
}

/// How long [`stop_orphan`] waits for a stopped agent to be gone.
const ORPHAN_WAIT: Duration = Duration::from_secs(5);

/// Stops the agent a dead `uwf` left running, as a stale marker of this
/// host names it (its agent process group, checked by start time against a
/// reused pid), and waits until it is gone. Returns the agent's pid when
/// there was one to stop. A `uwf` killed with SIGKILL cannot stop its agent
/// (it runs in a process group of its own); a worker taking the thread over
/// calls this before it runs the step again, so the two never overlap.
pub fn stop_orphan(root: &Path, thread: ThreadId) -> Option<u32> {
    let Some(Found::Stale(marker, _)) = find(root, thread) else {
        return None;
    };
    let pid = marker.agent_pid?;
    if marker.host != host() || !alive(pid, marker.agent_start) {
        return None;
    }
    let raw = i32::try_from(pid).ok()?;
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(raw),
        nix::sys::signal::Signal::SIGKILL,
    );
    let until = std::time::Instant::now() + ORPHAN_WAIT;
    while alive(pid, marker.agent_start) && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(pid)
}

/// Opens a log for appending, creating it (and `logs/`) private: what an
/// agent prints is its owner's only (docs/state.md, "Secrets and file
/// modes").
fn open_log(path: &Path) -> Option<std::fs::File> {
    let dir = path.parent()?;
    uwf_util::private::create_dir_all(dir).ok()?;
    uwf_util::private::open_options()
        .create(true)
        .append(true)
        .open(path)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use uwf_protocol::fixtures::{hash as h, thread as t};

    /// The filesystem store of `root`, which keeps markers in files only.
    fn local(root: &Path) -> Arc<dyn ThreadStore> {
        Arc::new(uwf_state::FsState::new(root))
    }

    #[test]
    fn a_marker_lives_while_held_and_a_dead_process_is_stale() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        {
            let running =
                Running::start(root, &local(root), t("T"), "developer", "agent", h("H"), 1);
            // The marker is written once the agent has started (this test
            // process stands in for it).
            assert_eq!(find(root, t("T")), None);
            running.agent_started(std::process::id());
            running.sink()("a line");
            match find(root, t("T")) {
                Some(Found::Live(m)) => {
                    assert_eq!(m.role, "developer");
                    assert_eq!(m.agent_pid, Some(std::process::id()));
                }
                other => panic!("{other:?}"),
            }
            running.landed(root, h("STEP"), Duration::from_millis(1500));
            // Private, whatever the umask: the log holds what agents print.
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: PathBuf| {
                std::fs::metadata(&p)
                    .map(|m| m.permissions().mode() & 0o777)
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            };
            assert_eq!(mode(root.join("running")), 0o700);
            assert_eq!(mode(root.join("logs")), 0o700);
            assert_eq!(mode(marker_path(root, t("T"))), 0o600);
            assert_eq!(mode(log_path(root, t("T"))), 0o600);
            assert_eq!(mode(timings_path(root, t("T"))), 0o600);
        }
        assert_eq!(find(root, t("T")), None);
        assert_eq!(timings(root, t("T"))[&h("STEP")].duration_ms, 1500);
        let log = std::fs::read_to_string(log_path(root, t("T"))).unwrap_or_default();
        assert!(log.contains("developer · agent · started") && log.ends_with("a line\n"));

        // A marker left by a process that is gone.
        let mut child = std::process::Command::new("true")
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let pid = child.id();
        let _ = child.wait();
        let marker = Marker {
            thread: uwf_protocol::fixtures::thread("U"),
            role: "r".into(),
            agent: "a".into(),
            pid,
            pid_start: None,
            host: host(),
            started_at: 1,
            head: uwf_protocol::fixtures::hash("H"),
            log: log_path(root, t("U")),
            agent_pid: None,
            agent_start: None,
        };
        std::fs::write(
            marker_path(root, t("U")),
            serde_json::to_vec(&marker).unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(find(root, t("U")), Some(Found::Stale(..))));
        assert_eq!(live(root, t("U")), None);
        // Our own process, but a different start time: a reused pid.
        let reused = Marker {
            pid: std::process::id(),
            pid_start: process_start(std::process::id()).map(|s| s + 1),
            ..marker
        };
        std::fs::write(
            marker_path(root, t("U")),
            serde_json::to_vec(&reused).unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let expect_stale = reused.pid_start.is_some();
        assert_eq!(
            matches!(find(root, t("U")), Some(Found::Stale(..))),
            expect_stale
        );
    }

    #[test]
    fn an_agent_left_by_a_dead_uwf_is_stopped() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        let mut agent = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let pid = agent.id();
        let reaper = std::thread::spawn(move || agent.wait());
        let mut dead = std::process::Command::new("true")
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let dead_pid = dead.id();
        let _ = dead.wait();
        let marker = Marker {
            thread: t("T"),
            role: "r".into(),
            agent: "a".into(),
            pid: dead_pid,
            pid_start: None,
            host: host(),
            started_at: 1,
            head: h("H"),
            log: log_path(root, t("T")),
            agent_pid: Some(pid),
            agent_start: process_start(pid),
        };
        std::fs::create_dir_all(root.join("running")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            marker_path(root, t("T")),
            serde_json::to_vec(&marker).unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stop_orphan(root, t("T")), Some(pid));
        let status = reaper
            .join()
            .unwrap_or_else(|_| panic!("reaper"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!status.success());
        // Gone now: nothing more to stop.
        assert_eq!(stop_orphan(root, t("T")), None);
    }

    #[test]
    fn a_live_step_records_its_agent_and_keeps_its_marker_until_dropped() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        let running = Running::start(root, &local(root), t("T"), "developer", "agent", h("H"), 1);
        running.agent_started(std::process::id());
        match find(root, t("T")) {
            Some(Found::Live(m)) => assert_eq!(m.agent_pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        // The uwf that runs it is alive: not an orphan.
        assert_eq!(stop_orphan(root, t("T")), None);
        drop(running);
        assert_eq!(find(root, t("T")), None);
    }
}
