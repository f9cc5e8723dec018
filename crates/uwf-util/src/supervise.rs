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
//! at once. A process it started that outlives it and keeps its pipes open
//! cannot hold the caller: after a short wait the group is killed, and
//! the readers give up on whatever escaped the group.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Time between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);
/// How long an exited child's leftovers may hold its pipes open.
pub const LINGER: Duration = Duration::from_secs(2);
/// How often a running child is checked for its timeout and cancellation
/// (its exit is noticed at once).
const TICK: Duration = Duration::from_millis(50);
/// How often `should_stop` is asked.
const STOP_POLL: Duration = Duration::from_millis(200);

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
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    // Set when the readers must stop waiting for output that a process
    // outside the group keeps from ending.
    let give_up = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let give_up = &give_up;
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let out = stdout.map(|pipe| {
            let done = done_tx.clone();
            scope.spawn(move || {
                let kept = read_lines(pipe, on_stdout, keep_stdout, give_up);
                let _ = done.send(());
                kept
            })
        });
        let err = stderr.map(|pipe| {
            let done = done_tx.clone();
            scope.spawn(move || {
                let kept = read_lines(pipe, on_stderr, keep_stderr, give_up);
                let _ = done.send(());
                kept
            })
        });
        drop(done_tx);
        let readers = usize::from(out.is_some()) + usize::from(err.is_some());
        // The exit is waited for on its own thread, so it is noticed at once.
        let (exit_tx, exit_rx) = mpsc::channel();
        scope.spawn(move || {
            let _ = exit_tx.send(child.wait());
        });

        let mut last_asked = Instant::now();
        let ending = loop {
            let tick = timeout.map_or(TICK, |t| TICK.min(t.saturating_sub(started.elapsed())));
            match exit_rx.recv_timeout(tick) {
                Ok(status) => break Ending::Exited(status.map_err(SuperviseError::Wait)?),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(SuperviseError::Wait(std::io::Error::other(
                        "the thread waiting for the child ended",
                    )));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Some(t) = timeout.filter(|t| started.elapsed() >= *t) {
                stop(pgid, &exit_rx);
                break Ending::TimedOut(t);
            }
            if cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
                stop(pgid, &exit_rx);
                break Ending::Interrupted;
            }
            if last_asked.elapsed() >= STOP_POLL {
                last_asked = Instant::now();
                if should_stop.as_mut().is_some_and(|f| f()) {
                    stop(pgid, &exit_rx);
                    break Ending::Stopped;
                }
            }
        };
        // The child is gone, but something it started may still hold its
        // pipes open: give it a moment, then end the group, then stop
        // reading what escaped the group.
        let mut finished = 0;
        let deadline = Instant::now() + LINGER;
        while finished < readers
            && done_rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .is_ok()
        {
            finished += 1;
        }
        if finished < readers {
            tracing::warn!(
                "a child exited but a process it started kept its output open; stopping its process group"
            );
            let _ = killpg(pgid, Signal::SIGKILL);
            let deadline = Instant::now() + LINGER;
            while finished < readers
                && done_rx
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    .is_ok()
            {
                finished += 1;
            }
            give_up.store(true, Ordering::SeqCst);
        }
        let join = |reader: Option<std::thread::ScopedJoinHandle<'_, String>>| {
            reader.and_then(|r| r.join().ok()).unwrap_or_default()
        };
        Ok(Supervised {
            ending,
            stdout: join(out),
            stderr: join(err),
            elapsed: started.elapsed(),
        })
    })
}

/// SIGTERM to the whole group, SIGKILL after [`GRACE`] (or as soon as the
/// leader is gone, so nothing it started survives).
fn stop(pgid: Pid, exit: &mpsc::Receiver<std::io::Result<ExitStatus>>) {
    let _ = killpg(pgid, Signal::SIGTERM);
    let _ = exit.recv_timeout(GRACE);
    let _ = killpg(pgid, Signal::SIGKILL);
}

/// Reads `pipe` to its end (or until `give_up`), line by line: each line
/// (without its line end; bytes that are not UTF-8 replaced) to `on_line`,
/// and what `keep` says into the returned text (with line ends).
fn read_lines<R: Read + AsFd>(
    mut pipe: R,
    mut on_line: Option<LineFn<'_>>,
    keep: Keep,
    give_up: &AtomicBool,
) -> String {
    let mut kept = Kept::new(keep);
    let mut line = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut emit = |line: &[u8], kept: &mut Kept| {
        let text = String::from_utf8_lossy(line);
        if let Some(f) = on_line.as_mut() {
            f(text.trim_end_matches(['\n', '\r']));
        }
        kept.push(&text);
    };
    loop {
        // Waits in short slices, so that a reader whose pipe a stray
        // process holds open can be told to give up.
        let ready = {
            let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::from(50u16))
        };
        match ready {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {
                if give_up.load(Ordering::SeqCst) {
                    break;
                }
                continue;
            }
            Ok(_) => {}
            Err(_) => break,
        }
        let n = match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut rest = &chunk[..n];
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&rest[..=end]);
            emit(&line, &mut kept);
            line.clear();
            rest = &rest[end + 1..];
        }
        line.extend_from_slice(rest);
    }
    if !line.is_empty() {
        emit(&line, &mut kept);
    }
    kept.finish()
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
