//! Running one agent process: spawn, stream its stderr, capture its stdout,
//! and stop it (its whole process group) on timeout, on cancellation, or
//! when the thread is killed by another process.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use uwf_util::supervise::{self, Keep, Supervise};

use crate::CancelToken;

/// Lines of the agent's stderr kept for error messages.
const TAIL_LINES: usize = 20;
/// Largest stdout we keep: the protocol needs one line.
const STDOUT_CAP: usize = 1 << 20;

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
    /// Its stdin (none if `None`).
    pub stdin: Option<std::fs::File>,
}

/// Runs an agent to completion under the supervisor every child of uwf
/// runs under ([`uwf_util::supervise`]). `on_stderr` receives each stderr
/// line as it arrives (to stream it to the user); `cancel` stops it at
/// once; `should_stop` is polled a few times a second and stops the agent
/// when it returns true.
pub fn run(
    spec: Spawn<'_>,
    on_stderr: impl Fn(&str) + Send + Sync + 'static,
    cancel: &CancelToken,
    should_stop: impl FnMut() -> bool,
) -> std::io::Result<Finished> {
    let mut cmd = Command::new(program(spec.command, &spec.env));
    // argv[0] stays the name as configured, as execvp would pass it.
    cmd.arg0(spec.command)
        .args(spec.args)
        // A relay this process was given is its own engine's, not one for
        // the agent: the agent gets one only through `spec.env`.
        .env_remove(uwf_relay::RELAY_ENV);
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let mut tail = std::collections::VecDeque::with_capacity(TAIL_LINES + 1);
    let mut options = Supervise::new()
        .timeout(spec.timeout)
        .cancel(cancel.clone())
        .should_stop(should_stop)
        .keep_stdout(Keep::UpTo(STDOUT_CAP))
        .keep_stderr(Keep::Nothing)
        .on_stderr(|line| {
            on_stderr(line);
            tail.push_back(line.to_owned());
            if tail.len() > TAIL_LINES {
                tail.pop_front();
            }
        });
    if let Some(on_start) = spec.on_start {
        options = options.on_start(on_start);
    }
    if let Some(stdin) = spec.stdin {
        options = options.stdin(stdin);
    }
    let done = supervise::run(cmd, options).map_err(supervise::SuperviseError::into_io)?;
    let ending = match done.ending {
        supervise::Ending::Exited(status) => Ending::Exited {
            code: status.code(),
            stdout: done.stdout,
        },
        supervise::Ending::TimedOut(_) => Ending::TimedOut,
        supervise::Ending::Stopped => Ending::Stopped,
        supervise::Ending::Interrupted => Ending::Interrupted,
    };
    Ok(Finished {
        ending,
        stderr_tail: tail.into(),
        elapsed: done.elapsed,
    })
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
    supervise::find_program(command, path).map_or_else(|| command.into(), PathBuf::into_os_string)
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
    use std::time::Instant;

    fn sh(script: &str, timeout: Option<Duration>) -> Finished {
        let args = vec!["-c".to_string(), script.to_string()];
        let spec = Spawn {
            command: "sh",
            args: &args,
            env: vec![],
            timeout,
            on_start: None,
            stdin: None,
        };
        run(spec, |_| {}, &CancelToken::new(), || false).unwrap_or_else(|e| panic!("{e}"))
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
            stdin: None,
        };
        let start = Instant::now();
        let f = run(
            spec,
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
            stdin: None,
        };
        let f = run(spec, |_| {}, &CancelToken::new(), || false).unwrap_or_else(|e| panic!("{e}"));
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
            stdin: None,
        };
        let e = run(spec, |_| {}, &CancelToken::new(), || false).err();
        assert_eq!(e.map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    }

    #[test]
    fn last_line_skips_blank_lines() {
        assert_eq!(last_line("a\nb\n\n  \n"), Some("b"));
        assert_eq!(last_line(""), None);
    }
}
