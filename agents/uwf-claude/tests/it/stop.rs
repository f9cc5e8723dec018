//! Stopping `uwf-claude` (SIGTERM, as `uwf thread step --timeout` or Ctrl-C
//! does) stops the whole process group of the CLI it runs, and its own
//! `--timeout` does the same; nothing is written. A stand-in `claude`
//! script starts a background `sleep` (a grandchild, like a tool command)
//! and waits.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use uwf_agent_kit::testing::Fixture;

type TestResult = Result<(), uwf_agent_kit::BoxError>;

/// A `claude` that starts `sleep 300` in the background, records its pid
/// in `<dir>/pid`, and waits for it.
fn fake_claude(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join("claude");
    let script = format!(
        "#!/bin/sh\nsleep 300 &\necho $! > '{0}.tmp'\nmv '{0}.tmp' '{0}'\nwait\n",
        dir.join("pid").display()
    );
    std::fs::write(&path, script)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

fn spawn(fx: &Fixture, claude: &Path, thread: &str, extra: &[&str]) -> std::io::Result<Child> {
    Command::new(env!("CARGO_BIN_EXE_uwf-claude"))
        .args(extra)
        .args([thread, "planner"])
        .env("UNCAGED_WORKFLOW_STORAGE_ROOT", fx.root())
        .env("CLAUDE_BIN", claude)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env_remove("UWF_CLAUDE_PROVIDER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Waits (up to a minute) for the fake to record its grandchild's pid.
fn grandchild(dir: &Path) -> Result<String, uwf_agent_kit::BoxError> {
    for _ in 0..600 {
        if let Ok(pid) = std::fs::read_to_string(dir.join("pid")) {
            return Ok(pid.trim().to_owned());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("the fake claude never started".into())
}

/// Whether process `pid` still exists (and is not a zombie).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')))
}

/// Waits (up to a minute) for `pid` to be gone.
fn gone(pid: &str) -> bool {
    for _ in 0..600 {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn sigterm_stops_claude_and_its_children() -> TestResult {
    let fx = Fixture::new()?;
    let dir = tempfile::tempdir()?;
    let claude = fake_claude(dir.path())?;
    let (thread, start) = fx.start_thread("Plan it")?;
    let child = spawn(&fx, &claude, &thread.to_string(), &[])?;
    let pid = grandchild(dir.path())?;
    assert!(alive(&pid));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    assert!(status.success());
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("interrupted while claude was running"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    assert!(gone(&pid), "the tool process {pid} outlived uwf-claude");
    assert_eq!(fx.head(thread)?, Some(start));
    Ok(())
}

#[test]
fn the_timeout_stops_claude_and_its_children() -> TestResult {
    let fx = Fixture::new()?;
    let dir = tempfile::tempdir()?;
    let claude = fake_claude(dir.path())?;
    let (thread, start) = fx.start_thread("Plan it")?;
    let out = spawn(&fx, &claude, &thread.to_string(), &["--timeout", "2s"])?.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("claude did not finish within 2s; it was stopped"),
        "{stderr}"
    );
    let pid = grandchild(dir.path())?;
    assert!(gone(&pid), "the tool process {pid} outlived the timeout");
    assert_eq!(fx.head(thread)?, Some(start));
    Ok(())
}
