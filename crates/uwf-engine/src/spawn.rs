//! Running one agent process: spawn, stream its stderr, capture its stdout,
//! and stop it (its whole process group) on timeout, on cancellation, or
//! when the thread is killed by another process.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::CancelToken;

/// Lines of the agent's stderr kept for error messages.
const TAIL_LINES: usize = 20;
/// Largest stdout we keep: the protocol needs one line.
const STDOUT_CAP: usize = 1 << 20;
/// Time between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(2);
/// How long an exited agent's leftovers may hold its pipes open.
const LINGER: Duration = Duration::from_secs(2);
/// How often a running agent is checked for cancellation and its timeout
/// (its exit is noticed at once).
const TICK: Duration = Duration::from_millis(50);
/// How often the kill flag is read while an agent runs.
const KILL_FLAG_POLL: Duration = Duration::from_millis(200);

/// How a finished agent ended.
#[derive(Debug)]
pub enum Ending {
    /// Exited on its own.
    Exited {
        /// Exit code (None if killed by a signal).
        code: Option<i32>,
        /// Everything it printed on stdout (capped).
        stdout: String,
    },
    /// Ran longer than the timeout and was stopped.
    TimedOut,
    /// `should_stop` asked to stop it (e.g. the thread was killed).
    Stopped,
    /// The caller's [`CancelToken`] was cancelled and the agent was stopped.
    Interrupted,
}

/// The outcome of a run.
#[derive(Debug)]
pub struct Finished {
    /// How it ended.
    pub ending: Ending,
    /// The last lines of its stderr.
    pub stderr_tail: Vec<String>,
    /// How long it ran.
    pub elapsed: Duration,
}

/// What to run and how.
pub struct Spawn<'a> {
    /// Program.
    pub command: &'a str,
    /// Arguments (thread id and role already appended).
    pub args: &'a [String],
    /// Extra environment.
    pub env: Vec<(String, std::ffi::OsString)>,
    /// Stop after this long.
    pub timeout: Option<Duration>,
    /// Called with the agent's process id (also its process group) once it
    /// started (the running marker records it).
    pub on_start: Option<&'a (dyn Fn(u32) + Sync)>,
}

/// Runs an agent to completion. `on_stderr` receives each stderr line as it
/// arrives (to stream it to the user); `cancel` stops it at once;
/// `should_stop` is polled a few times a second and stops the agent when it
/// returns true.
pub fn run(
    spec: &Spawn<'_>,
    on_stderr: impl Fn(&str) + Send + Sync + 'static,
    cancel: &CancelToken,
    mut should_stop: impl FnMut() -> bool,
) -> std::io::Result<Finished> {
    let started = Instant::now();
    let mut cmd = Command::new(program(spec.command, &spec.env));
    // argv[0] stays the name as configured, as execvp would pass it.
    cmd.arg0(spec.command)
        .args(spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout or kill reaches its children too.
        .process_group(0)
        // A relay this process was given is its own engine's, not one for
        // the agent: the agent gets one only through `spec.env`.
        .env_remove(uwf_relay::RELAY_ENV);
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn()?;
    let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    if let Some(on_start) = spec.on_start {
        on_start(child.id());
    }

    let tail = Arc::new(Mutex::new(Vec::<String>::new()));
    let (stderr_done_tx, stderr_done) = mpsc::channel::<()>();
    if let Some(err) = child.stderr.take() {
        let tail = Arc::clone(&tail);
        thread::spawn(move || {
            // Split on bytes, not `lines()`: a line that is not UTF-8 would
            // end `lines()`, and an agent still writing would then block on
            // a full pipe until its timeout.
            for line in BufReader::new(err).split(b'\n').map_while(Result::ok) {
                let line = line.strip_suffix(b"\r").unwrap_or(&line);
                let line = String::from_utf8_lossy(line).into_owned();
                on_stderr(&line);
                let mut t = tail
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                t.push(line);
                if t.len() > TAIL_LINES {
                    t.remove(0);
                }
            }
            let _ = stderr_done_tx.send(());
        });
    } else {
        let _ = stderr_done_tx.send(());
    }
    let (stdout_tx, stdout_rx) = mpsc::channel::<String>();
    if let Some(out) = child.stdout.take() {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.take(STDOUT_CAP as u64).read_to_end(&mut buf);
            let _ = stdout_tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
    }
    // The exit is waited for on its own thread, so it is noticed at once
    // (no polling delay); stopping goes through the process group.
    let (exit_tx, exit_rx) = mpsc::channel::<std::io::Result<std::process::ExitStatus>>();
    thread::spawn(move || {
        let _ = exit_tx.send(child.wait());
    });

    let mut last_check = Instant::now();
    let ending = loop {
        let mut tick = TICK;
        if let Some(t) = spec.timeout {
            tick = tick.min(t.saturating_sub(started.elapsed()));
        }
        match exit_rx.recv_timeout(tick) {
            Ok(status) => {
                break Ending::Exited {
                    code: status?.code(),
                    stdout: String::new(),
                };
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Ending::Exited {
                    code: None,
                    stdout: String::new(),
                };
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if spec.timeout.is_some_and(|t| started.elapsed() >= t) {
            stop(pgid, &exit_rx);
            break Ending::TimedOut;
        }
        if cancel.is_cancelled() {
            stop(pgid, &exit_rx);
            break Ending::Interrupted;
        }
        if last_check.elapsed() >= KILL_FLAG_POLL {
            last_check = Instant::now();
            if should_stop() {
                stop(pgid, &exit_rx);
                break Ending::Stopped;
            }
        }
    };
    if !matches!(ending, Ending::Exited { .. }) {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    // The agent is gone, but something it started may still hold its stdout
    // open: give it a moment, then end the group rather than wait forever.
    let stdout = match stdout_rx.recv_timeout(LINGER) {
        Ok(s) => s,
        Err(_) => {
            tracing::warn!(
                "the agent exited but a process it started kept its stdout open; stopping its process group"
            );
            let _ = killpg(pgid, Signal::SIGKILL);
            stdout_rx.recv_timeout(LINGER).unwrap_or_default()
        }
    };
    if stderr_done.recv_timeout(LINGER).is_err() {
        // Ends as soon as the group is gone; no need to wait for it.
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    let ending = match ending {
        Ending::Exited { code, .. } => Ending::Exited { code, stdout },
        other => other,
    };
    let stderr_tail = tail
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    Ok(Finished {
        ending,
        stderr_tail,
        elapsed: started.elapsed(),
    })
}

/// SIGTERM to the whole group, SIGKILL after a grace period (or as soon as
/// the leader is gone, so nothing it started survives).
fn stop(pgid: Pid, exit: &mpsc::Receiver<std::io::Result<std::process::ExitStatus>>) {
    let _ = killpg(pgid, Signal::SIGTERM);
    let _ = exit.recv_timeout(GRACE);
    let _ = killpg(pgid, Signal::SIGKILL);
}

/// The last non-empty line of an agent's stdout: the protocol's answer.
pub fn last_line(stdout: &str) -> Option<&str> {
    stdout.lines().map(str::trim).rfind(|l| !l.is_empty())
}

/// The program to start for `command`: a name without a slash is looked
/// up in the `PATH` the agent gets (its `env`, else ours), as `execvp`
/// would, and given as that path.
///
/// Why: with `PATH` set in the child's environment and a bare program name,
/// std's `Command` cannot use `posix_spawn` and falls back to fork + exec,
/// and forking copies the page tables of the whole (possibly large, long
/// running) uwf process on every step (docs/performance.md, "Starting the
/// agent"). A name found nowhere is returned as it is, so that starting it
/// fails exactly as before (not found).
fn program(command: &str, env: &[(String, std::ffi::OsString)]) -> std::ffi::OsString {
    if command.is_empty() || command.contains('/') {
        return command.into();
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, p)| p.clone());
    find_program(command, path).map_or_else(|| command.into(), PathBuf::into_os_string)
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
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `PATH` with `dir` first, so agents installed beside `uwf` are found.
pub fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut parts = vec![dir.to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        parts.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(parts).unwrap_or_else(|_| std::env::var_os("PATH").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Option<Duration>) -> Finished {
        let args = vec!["-c".to_string(), script.to_string()];
        let spec = Spawn {
            command: "sh",
            args: &args,
            env: vec![],
            timeout,
            on_start: None,
        };
        run(&spec, |_| {}, &CancelToken::new(), || false).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn captures_stdout_and_stderr_tail() {
        let f = sh("echo one; echo two; echo oops >&2; exit 3", None);
        match f.ending {
            Ending::Exited { code, stdout } => {
                assert_eq!(code, Some(3));
                assert_eq!(last_line(&stdout), Some("two"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(f.stderr_tail, vec!["oops".to_string()]);
    }

    #[test]
    fn stderr_that_is_not_utf8_is_read_to_its_end() {
        // An invalid line, then enough output to fill a pipe (64 KiB) had
        // reading stopped there, then a last line.
        let f = sh(
            "printf 'bad \\377 line\\r\\n' >&2; \
             i=0; while [ $i -lt 2000 ]; do echo 'filler line of some length to fill the pipe' >&2; i=$((i+1)); done; \
             echo last >&2; echo done",
            Some(Duration::from_secs(60)),
        );
        match f.ending {
            Ending::Exited { code, stdout } => {
                assert_eq!(code, Some(0));
                assert_eq!(last_line(&stdout), Some("done"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(f.stderr_tail.last().map(String::as_str), Some("last"));
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let start = Instant::now();
        // A grandchild holding stdout open must not keep us waiting.
        let f = sh("sleep 30 & sleep 30", Some(Duration::from_millis(200)));
        assert!(matches!(f.ending, Ending::TimedOut));
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn stop_request_is_honoured() {
        let args = vec!["-c".to_string(), "sleep 30".to_string()];
        let spec = Spawn {
            command: "sh",
            args: &args,
            env: vec![],
            timeout: None,
            on_start: None,
        };
        let start = Instant::now();
        let f = run(
            &spec,
            |_| {},
            &CancelToken::new(),
            || start.elapsed() > Duration::from_millis(300),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(f.ending, Ending::Stopped));
    }

    #[test]
    fn a_grandchild_holding_stdout_does_not_block_after_exit() {
        let start = Instant::now();
        let f = sh("(sleep 30) & echo HASH", None);
        match f.ending {
            Ending::Exited { code, stdout } => {
                assert_eq!(code, Some(0));
                assert_eq!(last_line(&stdout), Some("HASH"));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "waited {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_bare_name_is_found_in_the_agents_path() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let exe = dir.path().join("my-agent");
        std::fs::write(&exe, "#!/bin/sh\necho HASH\n").unwrap_or_else(|e| panic!("{e}"));
        let plain = dir.path().join("not-executable");
        std::fs::write(&plain, "").unwrap_or_else(|e| panic!("{e}"));
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let env = vec![("PATH".to_string(), path_with(dir.path()))];
        assert_eq!(program("my-agent", &env), exe.clone().into_os_string());
        // Not executable, absent, or a path already: left as given.
        assert_eq!(program("not-executable", &env), "not-executable");
        assert_eq!(program("no-such-agent-here", &env), "no-such-agent-here");
        assert_eq!(program("./my-agent", &env), "./my-agent");
        // And it runs from there (a system program: executing a file this
        // test wrote could meet ETXTBSY from another test's fork).
        let system = std::ffi::OsString::from("/nonexistent-uwf-dir:/usr/bin:/bin");
        let sh_env = vec![("PATH".to_string(), system)];
        let found = program("sh", &sh_env);
        assert!(Path::new(&found).is_absolute(), "{found:?}");
        let args = vec!["-c".to_string(), "echo HASH".to_string()];
        let spec = Spawn {
            command: "sh",
            args: &args,
            env: sh_env,
            timeout: None,
            on_start: None,
        };
        let f = run(&spec, |_| {}, &CancelToken::new(), || false).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(&f.ending, Ending::Exited { code: Some(0), stdout } if last_line(stdout) == Some("HASH")),
            "{:?}",
            f.ending
        );
        // A program found nowhere fails to start as it always did.
        let spec = Spawn {
            command: "no-such-agent-here",
            args: &[],
            env: vec![("PATH".to_string(), path_with(dir.path()))],
            timeout: None,
            on_start: None,
        };
        let e = run(&spec, |_| {}, &CancelToken::new(), || false).err();
        assert_eq!(e.map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    }

    #[test]
    fn last_line_skips_blank_lines() {
        assert_eq!(last_line("a\nb\n\n  \n"), Some("b"));
        assert_eq!(last_line(""), None);
    }
}
