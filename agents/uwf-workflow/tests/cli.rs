//! The `uwf-workflow` binary against a kit fixture root: argv handling, the
//! depth limit, the child thread it starts and runs with `uwf` (its roles
//! run by `uwf-mock` as config.yaml says), finding `uwf`, stopping on
//! SIGTERM, output mapping, and every failure leaving nothing on stdout. The real `uwf` drives it in
//! crates/uwf-cli/tests/it/nested_cli.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::json;
use uwf_agent_kit::testing::Fixture;
use uwf_cas::Hash;
use uwf_protocol::{StepNodePayload, ThreadId};

struct Env {
    fx: Fixture,
    thread: ThreadId,
    start: Hash,
}

/// The binary `name` of package `package`, built beside this test's
/// `uwf-workflow` (built on demand, once per binary).
fn sibling_bin(name: &str, package: &str) -> PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let dir = assert_cmd::cargo::cargo_bin("uwf-workflow")
        .parent()
        .unwrap()
        .to_path_buf();
    let bin = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let _one_build_at_a_time = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if bin.is_file() {
        return bin;
    }
    let mut cargo = std::process::Command::new(env!("CARGO"));
    cargo
        .args([
            "build",
            "--quiet",
            "-p",
            package,
            "--bin",
            name,
            "--manifest-path",
        ])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml"));
    if dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cargo.arg("--release");
    }
    cargo.arg("--target-dir").arg(dir.parent().unwrap());
    assert!(
        cargo.status().unwrap().success(),
        "cargo build -p {package} failed"
    );
    bin
}

/// `uwf-mock`, the child's agent.
fn mock_bin() -> PathBuf {
    sibling_bin("uwf-mock", "uwf-mock")
}

/// `uwf`, which runs the child thread.
fn uwf_bin() -> PathBuf {
    sibling_bin("uwf", "uwf-cli")
}

impl Env {
    /// A fixture root whose agent is `uwf-mock` with `scenario`.
    fn new(scenario: &str) -> Self {
        let fx = Fixture::new().unwrap();
        let (thread, start) = fx.start_thread("Fix the login bug").unwrap();
        // Registered by name, as `uwf workflow put` does.
        fx.engine()
            .state()
            .register_workflow(
                "plan-review",
                fx.workflow_hash(),
                &uwf_state::NodeGuard::vouched(),
            )
            .unwrap();
        let file = fx.root().join("scenario.yaml");
        std::fs::write(&file, scenario).unwrap();
        std::fs::write(
            fx.root().join("config.yaml"),
            format!(
                "agents:\n  mock: {{ command: '{}', args: ['{}'] }}\ndefaultAgent: mock\n",
                mock_bin().display(),
                file.display()
            ),
        )
        .unwrap();
        Self { fx, thread, start }
    }

    fn cmd(&self) -> Command {
        Command::from_std(self.std_cmd())
    }

    fn std_cmd(&self) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("uwf-workflow"));
        c.env("UNCAGED_WORKFLOW_STORAGE_ROOT", self.fx.root())
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("UWF_CALL_DEPTH")
            .env_remove("UWF_MAX_CALL_DEPTH")
            .env_remove("UWF_AGENT")
            .env_remove("RUST_LOG")
            .env("UWF_BIN", uwf_bin())
            .env("NO_COLOR", "1");
        c
    }

    /// Runs `uwf-workflow plan-review <thread> <role>` with `envs`.
    fn run(&self, role: &str, envs: &[(&str, &str)]) -> std::process::Output {
        let mut c = self.cmd();
        c.args(["plan-review", &self.thread.to_string(), role]);
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// The child threads of this root: every thread whose StartNode's
    /// parentState is the parent's StartNode, active or archived.
    fn children(&self) -> Vec<ThreadId> {
        let state = self.fx.engine().state();
        let mut ids: Vec<(ThreadId, Hash)> = state.threads().unwrap().into_iter().collect();
        ids.extend(
            state
                .history()
                .unwrap()
                .into_iter()
                .map(|e| (e.thread, e.head)),
        );
        ids.into_iter()
            .filter(|(_, head)| {
                let view = uwf_moderator::thread::load(self.fx.cas(), *head).unwrap();
                view.start.parent_state == Some(self.start)
            })
            .map(|(id, _)| id)
            .collect()
    }
}

/// The planner plans, the reviewer approves: the child ends after two steps.
const APPROVES: &str = "roles:\n  planner:\n    - output: { plan: \"child plan\", steps: [a, b] }\n  reviewer:\n    - output: { approved: true, comments: fine }\n";

fn fails(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "should have failed");
    assert!(
        out.stdout.is_empty(),
        "stdout on failure: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn step_of(fx: &Fixture, stdout: &[u8]) -> (Hash, StepNodePayload) {
    let hash: Hash = String::from_utf8_lossy(stdout).trim().parse().unwrap();
    let node = fx.cas().get(hash).unwrap();
    (hash, serde_json::from_value(node.payload).unwrap())
}

#[test]
fn help_usage_and_no_arguments() {
    let env = Env::new(APPROVES);
    let out = env.cmd().output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: uwf-workflow"));
    let out = env.cmd().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for part in [
        "--max-depth",
        "--max-steps",
        "UWF_CALL_DEPTH",
        "UWF_MAX_CALL_DEPTH",
        "UWF_BIN",
    ] {
        assert!(help.contains(part), "{part} not in {help}");
    }
    let out = env.cmd().args(["develop", "only-two"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn child_output_that_fits_is_used_as_is_and_linked() {
    let env = Env::new(APPROVES);
    // The child (plan-review) ends with the reviewer's output, which is
    // exactly the parent's role (reviewer) output.
    let out = env.run("reviewer", &[("UWF_AGENT", "wf-alias")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, step) = step_of(&env.fx, &out.stdout);
    let children = env.children();
    assert_eq!(children.len(), 1, "{children:?}");
    let terminal: Hash = step.child_thread.unwrap();
    let child = uwf_moderator::thread::load(env.fx.cas(), terminal).unwrap();
    assert_eq!(child.steps.len(), 2);
    assert_eq!(child.start.parent_state, Some(env.start));
    assert!(
        child.start.prompt.contains("Fix the login bug"),
        "{}",
        child.start.prompt
    );
    assert!(
        child
            .start
            .prompt
            .contains("## Delegated by the calling workflow"),
        "{}",
        child.start.prompt
    );
    assert_eq!(step.record.detail, terminal);
    assert_eq!(step.record.agent, "wf-alias");
    assert_eq!(step.start, env.start);
    let output = env.fx.cas().get(step.record.output).unwrap();
    assert_eq!(
        output.payload,
        json!({ "approved": true, "comments": "fine" })
    );
    // The child was run to its end by `uwf thread run` and archived.
    assert_eq!(env.fx.head(children[0]).unwrap(), None);
    // The child's progress was passed on, nested.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("│ step 1: planner"), "{err}");
    // The parent thread's head did not move: that is uwf's job.
    assert_eq!(env.fx.head(env.thread).unwrap(), Some(env.start));
}

#[test]
fn child_output_that_does_not_fit_goes_through_extraction() {
    let env = Env::new(APPROVES);
    // The reviewer's {approved, comments} has none of the planner's fields,
    // and there is no config for the LLM layer: a clear mapping error.
    let out = env.run("planner", &[]);
    let err = fails(&out);
    let child = env.children().pop().unwrap();
    for part in [
        format!(
            "the final output of child thread {child} (role \"reviewer\") does not match role \"planner\"'s outputSchema"
        ),
        "the parent thread is unchanged".to_string(),
    ] {
        assert!(err.contains(&part), "{part:?} not in:\n{err}");
    }
}

#[test]
fn a_failed_child_is_reported_with_its_id_and_cause() {
    // The child's planner fails (uwf-mock's `exit` entry).
    let env = Env::new("roles:\n  planner:\n    - exit: 3\n");
    let out = env.run("planner", &[]);
    let err = fails(&out);
    let child = env.children().pop().unwrap();
    assert!(
        err.contains(&format!(
            "child thread {child} (workflow plan-review) failed: agent mock (role planner) exited with status 3"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("uwf thread read {child}")), "{err}");
    // The child's progress was passed on, marked as nested.
    assert!(err.contains("│ step 1: planner (mock) started"), "{err}");
    // The child stays active, to be read or continued.
    assert!(env.fx.head(child).unwrap().is_some());
}

#[test]
fn the_depth_limit_stops_before_any_child_is_started() {
    let env = Env::new(APPROVES);
    let out = env.run("planner", &[("UWF_CALL_DEPTH", "8")]);
    let err = fails(&out);
    assert!(
        err.contains("call depth limit reached: role \"planner\" of thread"),
        "{err}"
    );
    assert!(err.contains("at depth 9, over the limit of 8"), "{err}");
    assert!(env.children().is_empty(), "a child was started");

    let out = env.run(
        "planner",
        &[("UWF_CALL_DEPTH", "1"), ("UWF_MAX_CALL_DEPTH", "1")],
    );
    assert!(fails(&out).contains("at depth 2, over the limit of 1"));
    let mut c = env.cmd();
    let out = c
        .args([
            "--max-depth",
            "0",
            "plan-review",
            &env.thread.to_string(),
            "planner",
        ])
        .output()
        .unwrap();
    assert!(fails(&out).contains("at depth 1, over the limit of 0"));
    assert!(env.children().is_empty());

    // The parentState chain counts even without the variable: a child
    // thread of the parent is at depth 1.
    let child = uwf_engine::start(
        env.fx.engine(),
        env.fx.workflow_hash(),
        "child",
        Some(env.start),
    )
    .unwrap()
    .thread;
    let mut c = env.cmd();
    let out = c
        .args([
            "--max-depth",
            "1",
            "plan-review",
            &child.to_string(),
            "reviewer",
        ])
        .output()
        .unwrap();
    assert!(fails(&out).contains("at depth 2, over the limit of 1"));

    for (var, value) in [("UWF_CALL_DEPTH", "deep"), ("UWF_MAX_CALL_DEPTH", "-1")] {
        let out = env.run("planner", &[(var, value)]);
        let err = fails(&out);
        assert!(
            err.contains(&format!("{var}={value:?} is not a non-negative integer")),
            "{err}"
        );
    }
}

/// Waits for `cond` (polled every 20 ms) for at most `limit`.
fn wait_until(limit: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    cond()
}

/// The processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if line.contains(needle) {
            found.push(line);
        }
    }
    found
}

#[test]
fn uwf_is_found_on_path_else_beside_this_binary_else_reported() {
    let env = Env::new(APPROVES);
    let uwf = uwf_bin();
    let empty = tempfile::tempdir().unwrap();
    // On PATH (as uwf puts its own directory first for its agents), then
    // beside uwf-workflow when PATH has none.
    for path in [uwf.parent().unwrap(), empty.path()] {
        let out = env
            .cmd()
            .env_remove("UWF_BIN")
            .env("PATH", path)
            .args(["plan-review", &env.thread.to_string(), "reviewer"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "PATH={}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(env.children().len(), 2);

    // UWF_BIN naming nothing: a clear error, nothing started.
    let out = env.run("reviewer", &[("UWF_BIN", "/nonexistent/uwf")]);
    let err = fails(&out);
    assert!(err.contains("uwf::workflow_agent::spawn"), "{err}");
    assert!(err.contains("cannot run /nonexistent/uwf"), "{err}");
    assert!(err.contains("Set UWF_BIN to its path"), "{err}");

    // No uwf anywhere: a copy of uwf-workflow alone in a directory.
    let lone = empty.path().join("uwf-workflow");
    let built = assert_cmd::cargo::cargo_bin("uwf-workflow");
    if std::fs::hard_link(&built, &lone).is_err() {
        std::fs::copy(&built, &lone).unwrap();
    }
    let out = std::process::Command::new(&lone)
        .args(["plan-review", &env.thread.to_string(), "reviewer"])
        .env("UNCAGED_WORKFLOW_STORAGE_ROOT", env.fx.root())
        .env_remove("UWF_BIN")
        .env("PATH", empty.path().join("nothing-here"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let err = fails(&out);
    assert!(
        err.contains("cannot find the uwf binary to run the child thread with"),
        "{err}"
    );
    assert_eq!(env.children().len(), 2, "a child was started");
}

#[test]
fn sigterm_stops_the_child_uwf_and_its_agent() {
    use std::io::BufRead;
    // The child's planner would run for a minute.
    let env =
        Env::new("roles:\n  planner:\n    - delay: 60s\n      output: { plan: p, steps: [a] }\n");
    let mut child = env
        .std_cmd()
        .args(["plan-review", &env.thread.to_string(), "planner"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let started = "│ step 1: planner (mock) started";
    while !seen.iter().any(|l: &String| l.contains(started)) {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(line) => seen.push(line),
            Err(e) => panic!("the child's agent never started ({e}): {seen:#?}"),
        }
    }
    let scenario = env.fx.root().join("scenario.yaml");
    let scenario = scenario.to_string_lossy().into_owned();
    assert!(
        wait_until(std::time::Duration::from_secs(10), || !processes_with(
            &scenario
        )
        .is_empty()),
        "the child's agent is not running"
    );
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    // Far less than the agent's minute: stopped, not waited for.
    let mut ended = None;
    assert!(
        wait_until(std::time::Duration::from_secs(20), || {
            ended = child.try_wait().unwrap();
            ended.is_some()
        }),
        "uwf-workflow still runs after SIGTERM"
    );
    assert!(!ended.unwrap().success());
    reader.join().unwrap();
    seen.extend(rx.try_iter());
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(stdout.is_empty(), "stdout: {stdout}");
    let children = env.children();
    assert_eq!(children.len(), 1);
    let err = seen.join("\n");
    assert!(
        err.contains(&format!(
            "child thread {} (workflow plan-review) failed",
            children[0]
        )),
        "{err}"
    );
    // The child's uwf and its agent are gone; the child thread stays at
    // its start, the parent unchanged.
    let child_id = children[0].to_string();
    assert!(
        wait_until(std::time::Duration::from_secs(10), || {
            processes_with(&scenario).is_empty() && processes_with(&child_id).is_empty()
        }),
        "left running: {:?} {:?}",
        processes_with(&scenario),
        processes_with(&child_id)
    );
    let head = env.fx.head(children[0]).unwrap().unwrap();
    assert_eq!(
        uwf_moderator::thread::load(env.fx.cas(), head)
            .unwrap()
            .steps
            .len(),
        0
    );
    assert_eq!(env.fx.head(env.thread).unwrap(), Some(env.start));
}
