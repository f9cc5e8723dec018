//! Live progress of `thread run` on stderr: a spinner on a terminal, plain
//! lines otherwise. Agent stderr is printed above the spinner.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use uwf_engine::Progress;

/// `eprintln!` in one write: stderr is unbuffered, and `eprintln!` writes
/// each piece of its format with a system call of its own (a step's lines
/// were a dozen writes each).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

/// Progress for one thread.
pub struct Live {
    thread: String,
    tty: bool,
    state: Mutex<State>,
}

struct State {
    step: usize,
    bar: Option<ProgressBar>,
    /// The next `started` is a retry of the current step, not a new step.
    retry: Option<u32>,
}

impl Live {
    /// Progress for `thread`.
    pub fn new(thread: uwf_protocol::ThreadId) -> Self {
        Self {
            thread: thread.to_string(),
            tty: std::io::stderr().is_terminal(),
            state: Mutex::new(State {
                step: 0,
                bar: None,
                retry: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The thread finished.
    pub fn done(&self) {
        let s = self.lock();
        say!("thread {} done after {} step(s)", self.thread, s.step);
    }
}

impl Progress for Live {
    fn started(&self, role: &str, agent: &str) {
        let mut s = self.lock();
        let attempt = match s.retry.take() {
            Some(n) => format!(" (attempt {})", n + 1),
            None => {
                s.step += 1;
                String::new()
            }
        };
        if self.tty {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} step {prefix} · {msg} · {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(s.step.to_string());
            bar.set_message(format!("{role} · {agent}{attempt}"));
            bar.enable_steady_tick(Duration::from_millis(100));
            s.bar = Some(bar);
        } else {
            say!("step {}: {role} ({agent}) started{attempt}", s.step);
        }
    }

    fn agent_line(&self, line: &str) {
        let s = self.lock();
        match &s.bar {
            Some(bar) => bar.println(line),
            None => say!("{line}"),
        }
    }

    fn retrying(&self, n: u32, max: u32, delay: Duration, role: &str, reason: &str) {
        let mut s = self.lock();
        s.retry = Some(n);
        say!(
            "retry {n}/{max} in {}: {role} {reason}",
            humantime::format_duration(delay)
        );
    }

    fn waiting(&self, workflow: &str, ahead: usize) {
        let s = self.lock();
        let line = format!("waiting for a slot of workflow {workflow} ({ahead} ahead)");
        match &s.bar {
            Some(bar) => bar.println(line),
            None => say!("{line}"),
        }
    }

    fn warning(&self, message: &str) {
        let s = self.lock();
        match &s.bar {
            Some(bar) => bar.println(format!("warning: {message}")),
            None => say!("warning: {message}"),
        }
    }

    fn failed(&self, role: &str, elapsed: Duration, reason: &str) {
        let mut s = self.lock();
        if let Some(bar) = s.bar.take() {
            bar.finish_and_clear();
        }
        say!(
            "step {}: {role} failed after {:.1}s: {reason}",
            s.step,
            elapsed.as_secs_f64()
        );
    }

    fn finished(&self, role: &str, elapsed: Duration) {
        let mut s = self.lock();
        if let Some(bar) = s.bar.take() {
            bar.finish_and_clear();
        }
        say!(
            "step {}: {role} finished in {:.1}s",
            s.step,
            elapsed.as_secs_f64()
        );
    }
}

/// `thread step`: agent stderr streamed straight through, waits, retries
/// and warnings as plain lines; starts and ends only in the log.
pub struct Plain;

impl Progress for Plain {
    fn agent_line(&self, line: &str) {
        say!("{line}");
    }

    fn waiting(&self, workflow: &str, ahead: usize) {
        say!("waiting for a slot of workflow {workflow} ({ahead} ahead)");
    }

    fn retrying(&self, n: u32, max: u32, delay: Duration, role: &str, reason: &str) {
        say!(
            "retry {n}/{max} in {}: {role} {reason}",
            humantime::format_duration(delay)
        );
    }

    fn warning(&self, message: &str) {
        say!("warning: {message}");
    }
}
