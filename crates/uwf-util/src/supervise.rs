//! One supervisor for the child processes uwf runs: an agent run by the
//! engine, a CLI run by an agent wrapper (Claude Code, Codex, Hermes), a
//! command run by `uwf-agent`'s tools.
//!
//! The child gets no stdin (or a file the caller hands it) and a process
//! group of its own, so that
//! stopping it (on a timeout, when the caller's [`CancelToken`] is
//! cancelled, or when the caller's `should_stop` says so) reaches
//! everything it started: SIGTERM to the group, SIGKILL after a grace
//! period. Its stdout and stderr are read line by line as they arrive
//! (callbacks, and as much as the caller keeps), and its exit is noticed
//! at once (exiting closes its pipes; a child that closed them itself and
//! runs on is looked at every few milliseconds). A process it started that
//! outlives it and keeps its pipes open cannot hold the caller: after a
//! short wait the group is killed, and the reading gives up on whatever
//! escaped the group. All of it on the calling thread.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Time between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);
/// How long an exited child's leftovers may hold its pipes open.
pub const LINGER: Duration = Duration::from_secs(2);
/// How often a running child is checked for its timeout and cancellation
/// (its output and its exit wake the supervisor at once).
const TICK: Duration = Duration::from_millis(50);
/// How often `should_stop` is asked.
const STOP_POLL: Duration = Duration::from_millis(200);
/// How often a child that closed its output but is not reaped yet is
/// looked at again right away, before the supervisor sleeps between looks.
const REAP_YIELDS: u32 = 64;
/// The first sleep between such looks (doubling up to [`TICK`]).
const FIRST_REAP_WAIT: Duration = Duration::from_micros(20);

/// A cancellation flag the caller owns: set it (from a signal handler,
/// another thread, a shutdown path) and the supervised child is stopped.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every run that holds a clone of this token.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How much of one output stream the [`Supervised`] result keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Keep {
    /// Everything.
    #[default]
    All,
    /// About this many bytes, in whole lines; the lines after it are still
    /// read and passed to the callback, and a last line `[… N more bytes
    /// not kept]` says how much was left out.
    UpTo(usize),
    /// Nothing (the callback sees every line).
    Nothing,
}

/// A callback for each line of output, without its line end.
pub type LineFn<'a> = Box<dyn FnMut(&str) + Send + 'a>;

/// How to supervise a child: its limits, what stops it, what is done with
/// its output.
#[derive(Default)]
#[must_use]
pub struct Supervise<'a> {
    timeout: Option<Duration>,
    cancel: Option<CancelToken>,
    should_stop: Option<Box<dyn FnMut() -> bool + 'a>>,
    on_start: Option<Box<dyn FnOnce(u32) + 'a>>,
    on_stdout: Option<LineFn<'a>>,
    on_stderr: Option<LineFn<'a>>,
    keep_stdout: Keep,
    keep_stderr: Keep,
    stdin: Option<std::fs::File>,
}

impl std::fmt::Debug for Supervise<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervise")
            .field("timeout", &self.timeout)
            .field("cancel", &self.cancel)
            .field("keep_stdout", &self.keep_stdout)
            .field("keep_stderr", &self.keep_stderr)
            .field("stdin", &self.stdin)
            .finish_non_exhaustive()
    }
}

impl<'a> Supervise<'a> {
    /// No timeout, nothing that stops it, everything kept.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives the child `file` as its stdin, read from where its offset is
    /// (a file rather than a pipe: nothing here waits for the child to
    /// read it, and a child that does not read it is not held up).
    pub fn stdin(mut self, file: std::fs::File) -> Self {
        self.stdin = Some(file);
        self
    }

    /// Stops the child after `timeout` ([`Ending::TimedOut`]); `None` waits
    /// for ever.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Stops the child as soon as `token` is cancelled
    /// ([`Ending::Interrupted`]).
    pub fn cancel(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Asks `f` a few times a second, and stops the child when it says so
    /// ([`Ending::Stopped`]): for a reason only the caller can see (the
    /// thread was killed by another process).
    pub fn should_stop(mut self, f: impl FnMut() -> bool + 'a) -> Self {
        self.should_stop = Some(Box::new(f));
        self
    }

    /// Calls `f` with the child's process id (also its process group) once
    /// it started.
    pub fn on_start(mut self, f: impl FnOnce(u32) + 'a) -> Self {
        self.on_start = Some(Box::new(f));
        self
    }

    /// Calls `f` with each line of stdout as it arrives.
    pub fn on_stdout(mut self, f: impl FnMut(&str) + Send + 'a) -> Self {
        self.on_stdout = Some(Box::new(f));
        self
    }

    /// Calls `f` with each line of stderr as it arrives.
    pub fn on_stderr(mut self, f: impl FnMut(&str) + Send + 'a) -> Self {
        self.on_stderr = Some(Box::new(f));
        self
    }

    /// How much of stdout the result keeps.
    pub fn keep_stdout(mut self, keep: Keep) -> Self {
        self.keep_stdout = keep;
        self
    }

    /// How much of stderr the result keeps.
    pub fn keep_stderr(mut self, keep: Keep) -> Self {
        self.keep_stderr = keep;
        self
    }
}

/// Where the program `command` is: a name with a slash is itself (if it is
/// an executable file), a bare name is looked up in `path` (else our
/// `PATH`) as `execvp` would. `None`: starting it would fail as not found.
pub fn find_program(command: &str, path: Option<std::ffi::OsString>) -> Option<PathBuf> {
    if command.is_empty() {
        return None;
    }
    if command.contains('/') {
        let p = PathBuf::from(command);
        return is_executable(&p).then_some(p);
    }
    let path = path.or_else(|| std::env::var_os("PATH"))?;
    std::env::split_paths(&path).find_map(|dir| {
        // An empty entry is the current directory, for execvp too.
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".").to_path_buf()
        } else {
            dir
        };
        let candidate = dir.join(command);
        is_executable(&candidate).then_some(candidate)
    })
}

/// A regular file (after links) that someone may execute.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// How a supervised child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// It exited on its own.
    Exited(ExitStatus),
    /// It ran longer than its timeout (given here) and was stopped.
    TimedOut(Duration),
    /// `should_stop` asked to stop it.
    Stopped,
    /// The [`CancelToken`] was cancelled and it was stopped.
    Interrupted,
}

/// A finished child.
#[derive(Debug, Clone)]
pub struct Supervised {
    /// How it ended.
    pub ending: Ending,
    /// What was kept of its stdout.
    pub stdout: String,
    /// What was kept of its stderr.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

/// Why a child could not be supervised to its end.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// It could not be started: the error of [`Command::spawn`], for the
    /// caller to explain (a missing program, arguments too long).
    #[error("cannot start it: {0}")]
    Spawn(#[source] std::io::Error),
    /// It could not be waited for.
    #[error("cannot wait for it: {0}")]
    Wait(#[source] std::io::Error),
}

impl SuperviseError {
    /// The I/O error underneath.
    pub fn into_io(self) -> std::io::Error {
        match self {
            SuperviseError::Spawn(e) | SuperviseError::Wait(e) => e,
        }
    }
}

/// Runs `cmd` under supervision until it ends (see the [module](self)).
/// stdin, stdout, stderr and the process group of `cmd` are set here.
///
/// Everything happens on the calling thread: one `poll` over the child's
/// two pipes, woken by its output, by its end (an exiting child closes
/// them) and every 50 ms for its timeout and stops. It started three
/// threads per child before (two readers and a waiter), which cost about
/// 0.4 ms per run of a program that prints a line (docs/performance.md,
/// "Starting an agent").
pub fn run(mut cmd: Command, options: Supervise<'_>) -> Result<Supervised, SuperviseError> {
    let Supervise {
        timeout,
        cancel,
        mut should_stop,
        on_start,
        on_stdout,
        on_stderr,
        keep_stdout,
        keep_stderr,
        stdin,
    } = options;
    cmd.stdin(stdin.map_or_else(Stdio::null, Stdio::from))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout or a stop reaches its children too.
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(SuperviseError::Spawn)?;
    let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    if let Some(f) = on_start {
        f(child.id());
    }
    let mut streams = [
        child.stdout.take().map(|p| {
            Stream::new(
                std::fs::File::from(OwnedFd::from(p)),
                on_stdout,
                keep_stdout,
            )
        }),
        child.stderr.take().map(|p| {
            Stream::new(
                std::fs::File::from(OwnedFd::from(p)),
                on_stderr,
                keep_stderr,
            )
        }),
    ];

    let mut status: Option<ExitStatus> = None;
    // Why the child is being stopped, once it is.
    let mut stopping: Option<Ending> = None;
    // When the SIGKILL after a stop's SIGTERM is due.
    let mut kill_at: Option<Instant> = None;
    // Since when the child's leftovers have held its pipes open after its
    // exit, and whether its group was killed for it already.
    let mut lingering_since: Option<Instant> = None;
    let mut group_killed = false;
    let mut last_asked = Instant::now();
    // How long to sleep while no pipe is open but the child is not reaped
    // yet: it closed its output and is exiting (usually microseconds), or
    // it runs on without output. Doubles up to TICK.
    let mut reap_wait = FIRST_REAP_WAIT;
    let mut yields = 0;
    loop {
        if status.is_none()
            && let Some(s) = child.try_wait().map_err(SuperviseError::Wait)?
        {
            status = Some(s);
            lingering_since = Some(Instant::now());
            if kill_at.take().is_some() {
                // Stopped and gone: nothing it started may survive it.
                let _ = killpg(pgid, Signal::SIGKILL);
            }
        }
        let open = streams.iter().flatten().any(|s| !s.done);
        if status.is_some() && !open {
            break;
        }
        let now = Instant::now();
        if status.is_none() && stopping.is_none() {
            let reason = if let Some(t) = timeout.filter(|t| started.elapsed() >= *t) {
                Some(Ending::TimedOut(t))
            } else if cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
                Some(Ending::Interrupted)
            } else if last_asked.elapsed() >= STOP_POLL {
                last_asked = now;
                should_stop
                    .as_mut()
                    .is_some_and(|f| f())
                    .then_some(Ending::Stopped)
            } else {
                None
            };
            if let Some(reason) = reason {
                // SIGTERM to the whole group, SIGKILL after GRACE (or as
                // soon as the leader is gone, above).
                let _ = killpg(pgid, Signal::SIGTERM);
                kill_at = Some(now + GRACE);
                stopping = Some(reason);
            }
        }
        if kill_at.is_some_and(|at| now >= at) {
            let _ = killpg(pgid, Signal::SIGKILL);
            kill_at = None;
        }
        // The child is gone, but something it started may still hold its
        // pipes open: give it a moment, then end the group, then stop
        // reading what escaped the group.
        if let Some(since) = lingering_since
            && now >= since + LINGER
        {
            if group_killed {
                break;
            }
            tracing::warn!(
                "a child exited but a process it started kept its output open; stopping its process group"
            );
            let _ = killpg(pgid, Signal::SIGKILL);
            group_killed = true;
            lingering_since = Some(now);
        }

        let mut wait = TICK;
        if let Some(t) = timeout.filter(|_| stopping.is_none() && status.is_none()) {
            wait = wait.min(t.saturating_sub(started.elapsed()));
        }
        if let Some(at) = kill_at {
            wait = wait.min(at.saturating_duration_since(now));
        }
        if let Some(since) = lingering_since {
            wait = wait.min((since + LINGER).saturating_duration_since(now));
        }
        if !open {
            // An exiting child closes its pipes a moment before it can be
            // reaped: let it run (two cores or one) and look again, a few
            // times, before sleeping.
            if yields < REAP_YIELDS {
                yields += 1;
                std::thread::yield_now();
            } else {
                std::thread::sleep(wait.min(reap_wait));
                reap_wait = (reap_wait * 2).min(TICK);
            }
            continue;
        }
        // Which streams have something (data, or their end) to read.
        let mut ready = [false; 2];
        {
            let mut fds = Vec::with_capacity(2);
            let mut which = Vec::with_capacity(2);
            for (i, stream) in streams.iter().enumerate() {
                if let Some(stream) = stream.as_ref().filter(|s| !s.done) {
                    fds.push(PollFd::new(stream.pipe.as_fd(), PollFlags::POLLIN));
                    which.push(i);
                }
            }
            // poll counts whole milliseconds: round up, so that a deadline
            // is not polled for in a busy loop.
            let ms = u16::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u16::MAX);
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => {}
                Ok(_) => {
                    for (fd, i) in fds.iter().zip(which) {
                        if fd.revents().is_some_and(|r| !r.is_empty()) {
                            ready[i] = true;
                        }
                    }
                }
                Err(e) => return Err(SuperviseError::Wait(std::io::Error::from(e))),
            }
        }
        for (stream, ready) in streams.iter_mut().zip(ready) {
            if let Some(stream) = stream.as_mut().filter(|_| ready) {
                stream.read_some();
            }
        }
    }
    let [out, err] = streams.map(|s| s.map(Stream::finish).unwrap_or_default());
    let ending = match (stopping, status) {
        (Some(reason), _) => reason,
        (None, Some(status)) => Ending::Exited(status),
        // The loop ends only once the child was reaped.
        (None, None) => {
            return Err(SuperviseError::Wait(std::io::Error::other(
                "the child was not waited for",
            )));
        }
    };
    Ok(Supervised {
        ending,
        stdout: out,
        stderr: err,
        elapsed: started.elapsed(),
    })
}

/// One output stream of the child: read as it arrives, line by line, each
/// line (without its line end; bytes that are not UTF-8 replaced) to the
/// callback, and what [`Keep`] says kept (with line ends).
struct Stream<'a> {
    pipe: std::fs::File,
    on_line: Option<LineFn<'a>>,
    kept: Kept,
    /// A line not ended yet.
    line: Vec<u8>,
    /// The pipe reached its end (or cannot be read).
    done: bool,
}

impl<'a> Stream<'a> {
    fn new(pipe: std::fs::File, on_line: Option<LineFn<'a>>, keep: Keep) -> Self {
        Stream {
            pipe,
            on_line,
            kept: Kept::new(keep),
            line: Vec::new(),
            done: false,
        }
    }

    /// One read, after `poll` said the pipe has something: data, or its
    /// end (so the read does not block).
    fn read_some(&mut self) {
        let mut chunk = [0u8; 8192];
        let n = match self.pipe.read(&mut chunk) {
            Ok(0) => {
                self.done = true;
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return,
            Err(_) => {
                self.done = true;
                return;
            }
        };
        let mut rest = &chunk[..n];
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&rest[..=end]);
            self.emit_line();
            rest = &rest[end + 1..];
        }
        self.line.extend_from_slice(rest);
    }

    /// The line gathered so far to the callback and to what is kept; its
    /// buffer then serves the next line.
    fn emit_line(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        if let Some(f) = self.on_line.as_mut() {
            f(text.trim_end_matches(['\n', '\r']));
        }
        self.kept.push(&text);
        self.line.clear();
    }

    /// What was kept, the last line included even without a line end.
    fn finish(mut self) -> String {
        if !self.line.is_empty() {
            self.emit_line();
        }
        self.kept.finish()
    }
}

/// The text kept of one stream ([`Keep`]).
struct Kept {
    keep: Keep,
    text: String,
    dropped: usize,
}

impl Kept {
    fn new(keep: Keep) -> Self {
        Self {
            keep,
            text: String::new(),
            dropped: 0,
        }
    }

    fn push(&mut self, line: &str) {
        match self.keep {
            Keep::All => self.text.push_str(line),
            Keep::UpTo(limit) if self.text.len() + line.len() <= limit => self.text.push_str(line),
            Keep::UpTo(_) => self.dropped += line.len(),
            Keep::Nothing => {}
        }
    }

    fn finish(mut self) -> String {
        if self.dropped > 0 {
            self.text
                .push_str(&format!("[… {} more bytes not kept]\n", self.dropped));
        }
        self.text
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    #[test]
    fn output_is_read_line_by_line_and_kept() {
        let lines = std::sync::Mutex::new(Vec::new());
        let out = run(
            sh("printf 'a\\nb\\r\\nc'; echo err >&2; exit 3"),
            Supervise::new().on_stdout(|l| lines.lock().unwrap().push(l.to_owned())),
        )
        .unwrap();
        assert_eq!(out.ending.clone(), Ending::Exited(out_status(&out)));
        assert_eq!(out_status(&out).code(), Some(3));
        assert_eq!(out.stdout, "a\nb\r\nc");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(*lines.lock().unwrap(), ["a", "b", "c"]);
    }

    fn out_status(out: &Supervised) -> ExitStatus {
        match out.ending {
            Ending::Exited(s) => s,
            ref other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stdin_is_the_given_file_from_its_offset_or_nothing() {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"skipped|read by the child\n").unwrap();
        file.seek(SeekFrom::Start(8)).unwrap();
        let out = run(sh("cat"), Supervise::new().stdin(file)).unwrap();
        assert_eq!(out.stdout, "read by the child\n");
        // Without one, the child reads an empty stdin, not the caller's.
        let out = run(sh("cat; echo end"), Supervise::new()).unwrap();
        assert_eq!(out.stdout, "end\n");
        // A child that never reads it is not held up by it.
        let mut big = tempfile::tempfile().unwrap();
        big.write_all(&vec![b'x'; 1 << 20]).unwrap();
        big.rewind().unwrap();
        let out = run(sh("echo done"), Supervise::new().stdin(big)).unwrap();
        assert_eq!(out.stdout, "done\n");
    }

    #[test]
    fn keeping_is_bounded_and_says_what_it_left_out() {
        let out = run(
            sh("for i in 1 2 3 4 5; do echo 0123456789; done"),
            Supervise::new()
                .keep_stdout(Keep::UpTo(25))
                .keep_stderr(Keep::Nothing),
        )
        .unwrap();
        assert_eq!(
            out.stdout,
            "0123456789\n0123456789\n[… 33 more bytes not kept]\n"
        );
    }

    #[test]
    fn a_timeout_stops_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("grandchild-lived");
        // The grandchild would write the marker a second after the start.
        let script = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let out = run(
            sh(&script),
            Supervise::new().timeout(Some(Duration::from_millis(200))),
        )
        .unwrap();
        assert_eq!(out.ending, Ending::TimedOut(Duration::from_millis(200)));
        assert!(out.elapsed < Duration::from_secs(1), "{:?}", out.elapsed);
        // What is tested is that nothing happens when the grandchild would
        // have acted: that takes waiting past that moment.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists(), "a process of the group outlived the stop");
    }

    #[test]
    fn cancelling_and_should_stop_end_it() {
        let token = CancelToken::new();
        let cancel = token.clone();
        let out = run(
            sh("sleep 30"),
            Supervise::new()
                .cancel(token)
                .on_start(move |_| cancel.cancel()),
        )
        .unwrap();
        assert_eq!(out.ending, Ending::Interrupted);
        let mut asked = 0;
        let out = run(
            sh("sleep 30"),
            Supervise::new().should_stop(|| {
                asked += 1;
                asked >= 2
            }),
        )
        .unwrap();
        assert_eq!(out.ending, Ending::Stopped);
    }

    #[test]
    fn a_process_that_escapes_the_group_cannot_hold_the_caller() {
        // setsid puts the background sleep in a session of its own, out of
        // reach of the group kill; it inherits stdout.
        let out = run(sh("setsid sleep 6 & echo started"), Supervise::new()).unwrap();
        assert_eq!(out.stdout, "started\n");
        assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
    }

    #[test]
    fn both_streams_are_read_as_they_fill_however_much_comes() {
        // Far more than a pipe holds on each stream, interleaved: a
        // supervisor reading one stream at a time would deadlock here.
        let lines = std::sync::Mutex::new(0usize);
        let out = run(
            sh("i=0; while [ $i -lt 3000 ]; do echo out-$i-0123456789abcdef; echo err-$i-0123456789abcdef >&2; i=$((i+1)); done"),
            Supervise::new().on_stderr(|_| *lines.lock().unwrap() += 1),
        )
        .unwrap();
        assert_eq!(out_status(&out).code(), Some(0));
        assert_eq!(out.stdout.lines().count(), 3000);
        assert_eq!(out.stderr.lines().count(), 3000);
        assert!(out.stdout.ends_with("out-2999-0123456789abcdef\n"));
        assert_eq!(*lines.lock().unwrap(), 3000);
    }

    #[test]
    fn a_child_that_closed_its_output_is_still_waited_for_and_its_end_seen() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran-on");
        let script = format!(
            "echo before; exec >&- 2>&-; sleep 0.3; touch {}; exit 5",
            marker.display()
        );
        let out = run(sh(&script), Supervise::new()).unwrap();
        assert_eq!(out_status(&out).code(), Some(5));
        assert_eq!(out.stdout, "before\n");
        // It ran to its end after closing its pipes, and that end was seen
        // (not the wait of a stop or of leftovers: those are seconds).
        assert!(marker.exists());
        assert!(out.elapsed < Duration::from_secs(5), "{:?}", out.elapsed);
    }

    #[test]
    fn a_program_that_is_not_there_is_the_spawn_error() {
        let err = run(
            Command::new("/nonexistent/uwf-no-such-program"),
            Supervise::new(),
        )
        .unwrap_err();
        assert!(matches!(&err, SuperviseError::Spawn(_)), "{err:?}");
        assert_eq!(err.into_io().kind(), std::io::ErrorKind::NotFound);
    }
}
