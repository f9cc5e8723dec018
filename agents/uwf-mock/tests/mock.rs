//! The `uwf-mock` binary against a real storage root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};
use uwf_agent_kit::testing::Fixture;
use uwf_cas::Hash;
use uwf_protocol::{StartNodePayload, StepNodePayload, ThreadId};

const SCENARIO: &str = r#"
roles:
  planner:
    - output: { plan: "first plan", steps: ["a"] }
      answer: "raw planner answer"
    - output: { plan: "second plan", steps: ["a", "b"] }
  reviewer:
    - text: "---\napproved: false\ncomments: fix X\n---\nbody"
    - output: { approved: true, comments: "LGTM" }
"#;

struct Env {
    fx: Fixture,
    thread: ThreadId,
    start: Hash,
    scenario: PathBuf,
}

impl Env {
    fn new(scenario: &str) -> Self {
        let fx = Fixture::new().unwrap();
        let (thread, start) = fx.start_thread("Fix the login bug").unwrap();
        let path = fx.root().join("scenario.yaml");
        std::fs::write(&path, scenario).unwrap();
        Self {
            fx,
            thread,
            start,
            scenario: path,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::cargo_bin("uwf-mock").unwrap();
        cmd.env("UNCAGED_WORKFLOW_STORAGE_ROOT", self.fx.root())
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .args(args);
        cmd
    }

    fn run(&self, role: &str) -> Command {
        let scenario = self.scenario.to_str().unwrap();
        self.cmd(&[scenario, &self.thread.to_string(), role])
    }

    /// Runs `role`, expects a hash on stdout, returns it.
    fn step(&self, role: &str) -> Hash {
        let out = self
            .run(role)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let line = String::from_utf8(out).unwrap();
        assert!(
            line.ends_with('\n') && line.lines().count() == 1,
            "{line:?}"
        );
        line.trim_end().parse().unwrap()
    }

    /// Runs `role` and moves the head, as `uwf thread step` does.
    fn advance(&self, role: &str) -> Hash {
        let h = self.step(role);
        self.fx.set_head(self.thread, h).unwrap();
        h
    }

    fn step_node(&self, h: Hash) -> StepNodePayload {
        let node = self.fx.cas().get(h).unwrap();
        assert_eq!(node.type_hash, self.fx.cas().types().step_node);
        serde_json::from_value(node.payload).unwrap()
    }

    fn payload(&self, h: &Hash) -> Value {
        self.fx.cas().get(*h).unwrap().payload
    }

    fn output_of(&self, h: Hash) -> Value {
        self.payload(&self.step_node(h).record.output)
    }

    fn step_count(&self) -> usize {
        let cas = self.fx.cas();
        cas.list_by_type(cas.types().step_node).unwrap().len()
    }
}

fn stdout_of(cmd: &mut Command) -> String {
    String::from_utf8(cmd.assert().success().get_output().stdout.clone()).unwrap()
}

#[test]
fn normal_run_prints_a_step_hash() {
    let env = Env::new(SCENARIO);
    let h = env.step("planner");
    let step = env.step_node(h);
    assert_eq!(step.start, env.start);
    assert_eq!(step.prev, None);
    assert_eq!(step.record.role, "planner");
    assert_eq!(step.record.agent, "uwf-mock");
    assert_eq!(
        env.output_of(h),
        json!({ "plan": "first plan", "steps": ["a"] })
    );
    assert_eq!(
        env.payload(&step.record.detail),
        json!({ "text": "raw planner answer" })
    );
    // The mock never moves the head.
    assert_eq!(env.fx.head(env.thread).unwrap(), Some(env.start));
}

#[test]
fn nth_run_of_a_role_gets_the_nth_entry_and_the_last_repeats() {
    let env = Env::new(SCENARIO);
    let p1 = env.advance("planner");
    let r1 = env.advance("reviewer");
    assert_eq!(
        env.output_of(r1),
        json!({ "approved": false, "comments": "fix X" }),
        "the frontmatter answer is extracted"
    );
    assert_eq!(env.step_node(r1).prev, Some(p1));
    assert_eq!(
        env.payload(&env.step_node(r1).record.detail)["text"],
        "---\napproved: false\ncomments: fix X\n---\nbody"
    );
    let p2 = env.advance("planner");
    assert_eq!(env.output_of(p2)["plan"], "second plan");
    let r2 = env.advance("reviewer");
    assert_eq!(env.output_of(r2)["approved"], true);
    let p3 = env.advance("planner");
    assert_eq!(
        env.output_of(p3)["plan"],
        "second plan",
        "the last entry repeats"
    );
    assert_eq!(env.step_node(p3).prev, Some(r2));
}

#[test]
fn run_by_uwf_the_agent_reads_the_history_only_when_its_scenario_needs_it() {
    use uwf_protocol::agent_env::{EDGE_PROMPT, HEAD};
    const ONE_ENTRY: &str = r#"
roles:
  planner:
    - output: { plan: "the plan", steps: ["a"] }
  reviewer:
    - output: { approved: false, comments: "again" }
"#;
    let env = Env::new(ONE_ENTRY);
    let p1 = env.advance("planner");
    let r1 = env.advance("reviewer");
    // Damage the history: the head's output is gone (the planner's steps
    // below store other outputs, so nothing puts it back).
    let lost = env.step_node(r1).record.output;
    assert!(env.fx.cas().store().remove(lost).unwrap());

    // Run by hand, the kit reads the whole thread to decide the edge
    // prompt, and says what it could not read.
    env.run("planner")
        .assert()
        .failure()
        .stderr(predicate::str::contains(lost.to_string()));
    // Run by uwf, which hands over its decision at the head: a role with
    // one entry needs no run count, so nothing behind the head is read.
    let with_decision = |role: &str, prompt: &str| {
        let mut cmd = env.run(role);
        cmd.env(HEAD, r1.to_string()).env(EDGE_PROMPT, prompt);
        cmd
    };
    let p2: Hash = stdout_of(&mut with_decision("planner", "Address: again"))
        .trim_end()
        .parse()
        .unwrap();
    assert_eq!(env.step_node(p2).prev, Some(r1));
    assert_eq!(env.output_of(p2)["plan"], "the plan");
    // Handed over for another head, the decision is not used: the kit
    // decides itself, and fails on the damaged history.
    env.run("planner")
        .env(HEAD, p1.to_string())
        .env(EDGE_PROMPT, "")
        .assert()
        .failure();

    // A role scripted run by run needs to know which run this is: its
    // history is read, and the damage reported.
    std::fs::write(&env.scenario, SCENARIO).unwrap();
    with_decision("planner", "")
        .assert()
        .failure()
        .stderr(predicate::str::contains(lost.to_string()));
}

#[test]
fn delay_and_stderr() {
    let env = Env::new(
        "roles:\n  planner:\n    - output: { plan: p, steps: [] }\n      delay: 300ms\n      stderr: planning…\n",
    );
    let t = Instant::now();
    env.run("planner")
        .assert()
        .success()
        .stdout(predicate::str::is_match("^[0-9A-Z]{13}\n$").unwrap())
        .stderr(predicate::str::contains("planning…"));
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn exit_code_is_propagated_and_nothing_is_written() {
    let env = Env::new("roles:\n  planner:\n    - exit: 3\n      stderr: out of tokens\n");
    env.run("planner")
        .assert()
        .code(3)
        .stdout("")
        .stderr(predicate::str::contains("out of tokens"));
    assert_eq!(env.step_count(), 0);
}

/// An agent links no database client: given a store by URL, it reaches it
/// only through its engine's relay. With the relay gone (the `uwf` that ran
/// it has ended) it says so and exits as "store unavailable" (75), writing
/// nothing; run by hand with no relay at all, it says how to run it.
#[test]
fn a_store_url_is_reached_only_through_a_live_relay() {
    let env = Env::new(SCENARIO);
    let gone = env.fx.root().join("no-such-relay");
    env.run("planner")
        .env("UWF_STORE", "postgres://u:s3cret@db.example/uwf")
        .env("UWF_RELAY", &gone)
        .assert()
        .code(75)
        .stdout("")
        .stderr(predicate::str::contains("uwf::store::relay_gone"))
        .stderr(predicate::str::contains("postgres://u:***@db.example/uwf"))
        .stderr(predicate::str::contains("s3cret").not());
    env.run("planner")
        .env("UWF_STORE", "postgres://u:s3cret@db.example/uwf")
        .env_remove("UWF_RELAY")
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("uwf::agent::no_backend"))
        .stderr(predicate::str::contains("uwf thread step"));
    assert_eq!(env.step_count(), 0);
}

fn fault_env(fault: &str) -> Env {
    Env::new(&format!(
        "roles:\n  planner:\n    - fault: {fault}\n      output: {{ plan: p, steps: [] }}\n"
    ))
}

#[test]
fn fault_no_output() {
    let env = Env::new("roles:\n  planner:\n    - fault: no-output\n");
    env.run("planner").assert().success().stdout("");
    assert_eq!(env.step_count(), 0);
}

#[test]
fn fault_garbage() {
    let env = Env::new("roles:\n  planner:\n    - fault: garbage\n");
    env.run("planner")
        .assert()
        .success()
        .stdout("hello, I am not a hash\n");
}

#[test]
fn fault_unknown_hash() {
    let env = Env::new("roles:\n  planner:\n    - fault: unknown-hash\n");
    let out = stdout_of(&mut env.run("planner"));
    let h: Hash = out.trim_end().parse().unwrap();
    assert!(!env.fx.cas().has(h).unwrap());
    assert_eq!(env.step_count(), 0);
}

#[test]
fn fault_not_a_step() {
    let env = Env::new("roles:\n  planner:\n    - fault: not-a-step\n");
    let out = stdout_of(&mut env.run("planner"));
    assert_eq!(out, format!("{}\n", env.start));
}

#[test]
fn fault_wrong_prev() {
    let env = fault_env("wrong-prev");
    let h = env.step("planner");
    let step = env.step_node(h);
    assert_eq!(step.prev, Some(env.start), "prev is the StartNode");
    assert_eq!(step.start, env.start);
    assert_eq!(step.record.role, "planner");
    assert_eq!(env.output_of(h), json!({ "plan": "p", "steps": [] }));
}

#[test]
fn fault_wrong_start() {
    let env = fault_env("wrong-start");
    let h = env.step("planner");
    let step = env.step_node(h);
    assert_ne!(step.start, env.start);
    let other: StartNodePayload = serde_json::from_value(env.payload(&step.start)).unwrap();
    assert_eq!(other.workflow, env.fx.workflow_hash());
    assert_ne!(other.prompt, "Fix the login bug");
    assert_eq!(step.prev, None);
    assert_eq!(step.record.role, "planner");
}

#[test]
fn fault_wrong_role() {
    let env = fault_env("wrong-role");
    let h = env.step("planner");
    let step = env.step_node(h);
    assert_eq!(step.record.role, "reviewer");
    assert_eq!(step.start, env.start);
    assert_eq!(step.prev, None);
}

#[test]
fn fault_invalid_output() {
    let env = Env::new("roles:\n  planner:\n    - fault: invalid-output\n      answer: oops\n");
    let h = env.step("planner");
    let step = env.step_node(h);
    assert_eq!(step.record.role, "planner");
    let cas = env.fx.cas();
    let output = cas.get(step.record.output).unwrap();
    assert_eq!(cas.schema(output.type_hash).unwrap()["title"], "mock-any");
    let planner_schema: Hash =
        env.payload(&env.fx.workflow_hash())["roles"]["planner"]["outputSchema"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
    assert!(cas.validate(planner_schema, &output.payload).is_err());
    assert_eq!(env.payload(&step.record.detail), json!({ "text": "oops" }));
}

#[test]
fn fault_after_a_step_keeps_the_real_prev_where_it_should() {
    let env = Env::new(
        "roles:\n  planner:\n    - output: { plan: p, steps: [] }\n  reviewer:\n    - fault: wrong-start\n      output: { approved: true, comments: ok }\n",
    );
    let p = env.advance("planner");
    let r = env.step("reviewer");
    let step = env.step_node(r);
    assert_eq!(step.prev, Some(p));
    assert_ne!(step.start, env.start);
}

#[test]
fn output_that_does_not_fit_the_schema_fails_with_the_path() {
    let env = Env::new("roles:\n  planner:\n    - output: { plan: 3, steps: [] }\n");
    env.run("planner")
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("/plan"));
    assert_eq!(env.step_count(), 0);
}

#[test]
fn bad_frontmatter_fails_with_the_reason() {
    let env = Env::new("roles:\n  planner:\n    - text: no frontmatter here\n");
    env.run("planner")
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("no frontmatter"));
}

#[test]
fn scenario_errors_name_the_file() {
    let env = Env::new(SCENARIO);
    let thread = env.thread.to_string();
    let thread = thread.as_str();

    let missing = env.fx.root().join("nope.yaml");
    env.cmd(&[missing.to_str().unwrap(), thread, "planner"])
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("nope.yaml"));

    let bad = env.fx.root().join("bad.yaml");
    std::fs::write(&bad, "roles:\n  planner:\n    - output: [unclosed\n").unwrap();
    env.cmd(&[bad.to_str().unwrap(), thread, "planner"])
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("bad.yaml").and(predicate::str::contains("line")));

    let no_role = env.fx.root().join("no-role.yaml");
    std::fs::write(&no_role, "roles:\n  reviewer:\n    - exit: 1\n").unwrap();
    env.cmd(&[no_role.to_str().unwrap(), thread, "planner"])
        .assert()
        .code(1)
        .stdout("")
        .stderr(
            predicate::str::contains("no-role.yaml")
                .and(predicate::str::contains("planner"))
                .and(predicate::str::contains("reviewer")),
        );
}

#[test]
fn protocol_errors() {
    let env = Env::new(SCENARIO);
    env.run("tester")
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("no entries for role"));

    env.fx.remove_thread(env.thread).unwrap();
    env.run("planner")
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("is not active"));
}

#[test]
fn usage_help_and_version() {
    let env = Env::new(SCENARIO);
    // No arguments at all: the help on stderr, exit 0 (not a protocol call).
    env.cmd(&[])
        .assert()
        .success()
        .stdout("")
        .stderr(predicate::str::contains(
            "uwf-mock <scenario.yaml> <thread-id> <role>",
        ));
    env.cmd(&["a", "b"]).assert().code(2).stdout("");
    env.cmd(&["--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "Usage: uwf-mock <scenario.yaml> <thread-id> <role>",
        ));
    env.cmd(&["--version"])
        .assert()
        .success()
        .stdout(format!("uwf-mock {}\n", env!("CARGO_PKG_VERSION")));
}
