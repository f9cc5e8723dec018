//! The `uwf-workflow` binary against a kit fixture root, with a scripted
//! stand-in for `uwf` (`UWF_BIN`): argv handling, the depth limit, how the
//! child is started, output mapping, and every failure leaving nothing on
//! stdout. The real `uwf` drives it in crates/uwf-cli/tests/nested_cli.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{Value, json};
use uwf_agent_kit::testing::Fixture;
use uwf_agent_kit::{AgentRun, execute};
use uwf_cas::Hash;
use uwf_protocol::{StartNodePayload, StepNodePayload};

/// A stand-in for `uwf`: logs its arguments and `UWF_CALL_DEPTH`, answers
/// `thread start` with `$FAKE_THREAD` and `thread run` with `$FAKE_HEAD`
/// (or fails with `$FAKE_RUN_EXIT`, printing `$FAKE_RUN_ERR` on stderr).
const FAKE_UWF: &str = r#"#!/bin/sh
printf '%s\n' "depth=$UWF_CALL_DEPTH" "$@" >> "$FAKE_LOG"
case "$4" in
  start) printf '{"workflow": "W", "thread": "%s"}\n' "$FAKE_THREAD" ;;
  run)
    if [ -n "$FAKE_RUN_EXIT" ]; then
      printf 'step 1: planner started\n%s\n' "$FAKE_RUN_ERR" >&2
      exit "$FAKE_RUN_EXIT"
    fi
    printf '%s\n' "$FAKE_RUN_OUT" ;;
esac
"#;

struct Env {
    fx: Fixture,
    thread: String,
    start: Hash,
    fake: PathBuf,
    log: PathBuf,
}

fn plan() -> Value {
    json!({ "plan": "child plan", "steps": ["a", "b"] })
}

impl Env {
    fn new() -> Self {
        let fx = Fixture::new().unwrap();
        let (thread, start) = fx.start_thread("Fix the login bug").unwrap();
        let fake = fx.root().join("fake-uwf");
        std::fs::write(&fake, FAKE_UWF).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let log = fx.root().join("fake.log");
        Self {
            fx,
            thread,
            start,
            fake,
            log,
        }
    }

    /// A child thread started from the parent's StartNode with the
    /// planner's step written (and a reviewer step after it when
    /// `reviewed`); returns its id and terminal step.
    fn child(&self, reviewed: bool) -> (String, Hash) {
        let start = StartNodePayload {
            workflow: self.fx.workflow_hash().to_string(),
            prompt: "child".into(),
            parent_state: Some(self.start.to_string()),
        };
        let start = self
            .fx
            .cas()
            .put_value(self.fx.cas().types().start_node, &start)
            .unwrap()
            .hash;
        let id = uwf_util::ids::ThreadId::new().to_string();
        self.fx.set_head(&id, start).unwrap();
        let root = self.fx.root();
        let planned = execute("mock", root, &id, "planner", |_| {
            Ok(AgentRun::output(plan()))
        })
        .unwrap();
        if !reviewed {
            return (id, planned);
        }
        self.fx.set_head(&id, planned).unwrap();
        let review = json!({ "approved": true, "comments": "fine" });
        let reviewed = execute("mock", root, &id, "reviewer", |_| {
            Ok(AgentRun::output(review))
        })
        .unwrap();
        (id, reviewed)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("uwf-workflow").unwrap();
        c.env("UNCAGED_WORKFLOW_STORAGE_ROOT", self.fx.root())
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("UWF_CALL_DEPTH")
            .env_remove("UWF_MAX_CALL_DEPTH")
            .env_remove("UWF_AGENT")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .env("UWF_BIN", &self.fake)
            .env("FAKE_LOG", &self.log);
        c
    }

    /// Runs `uwf-workflow plan-review <thread> planner` with `envs`.
    fn run(&self, envs: &[(&str, &str)]) -> std::process::Output {
        let mut c = self.cmd();
        c.args(["plan-review", &self.thread, "planner"]);
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn run_out(id: &str, head: Hash) -> String {
    json!({ "workflow": "W", "thread": id, "head": head.to_string(), "done": true }).to_string()
}

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
    let env = Env::new();
    let out = env.cmd().output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: uwf-workflow"));
    let out = env.cmd().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for part in ["--max-depth", "--max-steps", "UWF_CALL_DEPTH", "UWF_BIN"] {
        assert!(help.contains(part), "{part} not in {help}");
    }
    let out = env.cmd().args(["develop", "only-two"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn child_output_that_fits_is_used_as_is_and_linked() {
    let env = Env::new();
    let (child, terminal) = env.child(false);
    let out = env.run(&[
        ("FAKE_THREAD", &child),
        ("FAKE_RUN_OUT", &run_out(&child, terminal)),
        ("UWF_AGENT", "wf-alias"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, step) = step_of(&env.fx, &out.stdout);
    assert_eq!(step.child_thread, Some(terminal.to_string()));
    assert_eq!(step.record.detail, terminal.to_string());
    assert_eq!(step.record.agent, "wf-alias");
    assert_eq!(step.start, env.start.to_string());
    let output = env
        .fx
        .cas()
        .get(step.record.output.parse().unwrap())
        .unwrap();
    assert_eq!(output.payload, plan());

    // How the child was started and run.
    let log = env.log();
    let lines: Vec<&str> = log.lines().collect();
    let root = env.fx.root().display().to_string();
    let start = env.start.to_string();
    assert_eq!(
        &lines[..8],
        [
            "depth=1",
            "--root",
            root.as_str(),
            "thread",
            "start",
            "plan-review",
            "--parent",
            start.as_str(),
        ]
    );
    assert!(lines[8].starts_with("--prompt=Fix the login bug"), "{log}");
    assert!(
        log.contains("## Delegated by the calling workflow"),
        "{log}"
    );
    let run_at = lines.iter().position(|l| *l == "run").unwrap();
    assert_eq!(
        &lines[run_at - 1..],
        [
            "thread",
            "run",
            "--thread",
            child.as_str(),
            "--max-steps",
            "100"
        ]
    );
    // The thread's head did not move: that is uwf's job.
    assert_eq!(env.fx.head(&env.thread).unwrap(), Some(env.start));
}

#[test]
fn child_output_that_does_not_fit_goes_through_extraction() {
    let env = Env::new();
    let (child, terminal) = env.child(true);
    // The reviewer's {approved, comments} has none of the planner's fields,
    // and there is no config for the LLM layer: a clear mapping error.
    let out = env.run(&[
        ("FAKE_THREAD", &child),
        ("FAKE_RUN_OUT", &run_out(&child, terminal)),
    ]);
    let err = fails(&out);
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
    let env = Env::new();
    let (child, _) = env.child(false);
    let out = env.run(&[
        ("FAKE_THREAD", &child),
        ("FAKE_RUN_EXIT", "1"),
        (
            "FAKE_RUN_ERR",
            "  × agent mock (role planner) exited with status 3",
        ),
    ]);
    let err = fails(&out);
    assert!(
        err.contains(&format!(
            "child thread {child} (workflow plan-review) failed: agent mock (role planner) exited with status 3"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("uwf thread read {child}")), "{err}");
    // The child's stderr was passed on, marked as nested.
    assert!(err.contains("│ step 1: planner started"), "{err}");

    let out = env.run(&[("FAKE_THREAD", &child), ("FAKE_RUN_OUT", "not json")]);
    assert!(fails(&out).contains("which is not its JSON answer"));
}

#[test]
fn the_depth_limit_stops_before_any_child_is_started() {
    let env = Env::new();
    let out = env.run(&[("UWF_CALL_DEPTH", "8")]);
    let err = fails(&out);
    assert!(
        err.contains("call depth limit reached: role \"planner\" of thread"),
        "{err}"
    );
    assert!(err.contains("at depth 9, over the limit of 8"), "{err}");
    assert!(env.log().is_empty(), "uwf was run: {}", env.log());

    let out = env.run(&[("UWF_CALL_DEPTH", "1"), ("UWF_MAX_CALL_DEPTH", "1")]);
    assert!(fails(&out).contains("at depth 2, over the limit of 1"));
    let mut c = env.cmd();
    let out = c
        .args(["--max-depth", "0", "plan-review", &env.thread, "planner"])
        .output()
        .unwrap();
    assert!(fails(&out).contains("at depth 1, over the limit of 0"));
    assert!(env.log().is_empty());

    // The parentState chain counts even without the variable: a child
    // thread of the parent is at depth 1.
    let (child, _) = env.child(false);
    let mut c = env.cmd();
    let out = c
        .args(["--max-depth", "1", "plan-review", &child, "reviewer"])
        .output()
        .unwrap();
    assert!(fails(&out).contains("at depth 2, over the limit of 1"));

    for (var, value) in [("UWF_CALL_DEPTH", "deep"), ("UWF_MAX_CALL_DEPTH", "-1")] {
        let out = env.run(&[(var, value)]);
        let err = fails(&out);
        assert!(
            err.contains(&format!("{var}={value:?} is not a non-negative integer")),
            "{err}"
        );
    }
}

#[test]
fn a_missing_uwf_is_a_clear_error() {
    let env = Env::new();
    let mut c = env.cmd();
    let out = c
        .env("UWF_BIN", Path::new("/nonexistent/uwf"))
        .args(["plan-review", &env.thread, "planner"])
        .output()
        .unwrap();
    let err = fails(&out);
    assert!(err.contains("cannot run /nonexistent/uwf"), "{err}");
    assert!(err.contains("UWF_BIN"), "{err}");
}
