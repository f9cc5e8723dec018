//! The `uwf-hermes` binary against a fake `hermes` (a shell script replaying
//! canned output), on the agent kit's test fixture: the command line hermes
//! gets, the detail nodes, and every failure leaving the thread unchanged.
//!
//! The real hermes is exercised by `tests/it/real_hermes.rs`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};
use uwf_agent_kit::testing::Fixture;
use uwf_cas::Hash;

type TestResult = Result<(), uwf_agent_kit::BoxError>;

/// The fake hermes: `chat` replays `$FAKE_HERMES_DIR/chat.{stdout,stderr,exit}`,
/// `sessions export` replays `export.{stdout,exit}`; both log their argv
/// (NUL-separated), `HERMES_DISABLE_LAZY_INSTALLS` and the working directory.
const FAKE: &str = r#"#!/bin/sh
d=${FAKE_HERMES_DIR:?}
for a in "$@"; do printf '%s\0' "$a"; done > "$d/argv.$1"
printf '%s' "${HERMES_DISABLE_LAZY_INSTALLS-unset}" > "$d/lazy.$1"
pwd > "$d/cwd.$1"
case "$1" in
  chat)
    if [ -f "$d/chat.sleep" ]; then sleep "$(cat "$d/chat.sleep")"; fi
    cat "$d/chat.stdout" 2>/dev/null
    cat "$d/chat.stderr" >&2 2>/dev/null
    exit "$(cat "$d/chat.exit" 2>/dev/null || echo 0)" ;;
  sessions)
    cat "$d/export.stdout" 2>/dev/null
    exit "$(cat "$d/export.exit" 2>/dev/null || echo 0)" ;;
esac
echo "fake hermes: unexpected command $1" >&2
exit 64
"#;

/// Written once, before any test spawns a process (an executable still
/// open for writing in a forked child would fail with ETXTBSY).
fn fake_hermes() -> &'static Path {
    static FAKE_BIN: OnceLock<PathBuf> = OnceLock::new();
    FAKE_BIN.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("uwf-hermes-fake-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("hermes");
        std::fs::write(&path, FAKE).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        path
    })
}

const SESSION: &str = "20261122_063815_604466";
const PLAN: &str = "---\nplan: Fix the bug\nsteps:\n  - find it\n  - fix it\n---\n\nThe plan.";

/// A fixture thread, a directory for the fake's files, and a work dir.
struct Case {
    fx: Fixture,
    thread: uwf_agent_kit::ThreadId,
    start: Hash,
    fake: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

impl Case {
    fn new() -> Result<Self, uwf_agent_kit::BoxError> {
        fake_hermes();
        let fx = Fixture::new()?;
        let (thread, start) = fx.start_thread("Fix the login bug")?;
        Ok(Self {
            fx,
            thread,
            start,
            fake: tempfile::tempdir()?,
            cwd: tempfile::tempdir()?,
        })
    }

    fn set(&self, file: &str, text: &str) -> TestResult {
        std::fs::write(self.fake.path().join(file), text)?;
        Ok(())
    }

    /// hermes answers `answer` in session [`SESSION`] and exports `messages`.
    fn answers(&self, answer: &str, messages: Value) -> TestResult {
        self.set("chat.stdout", &format!("{answer}\n"))?;
        self.set("chat.stderr", &format!("\nsession_id: {SESSION}\n"))?;
        let session = json!({"id": SESSION, "model": "mock-model", "messages": messages});
        self.set("export.stdout", &format!("{session}\n"))
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uwf-hermes"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("UNCAGED_WORKFLOW_STORAGE_ROOT", self.fx.root())
            .env("HERMES_BIN", fake_hermes())
            .env("FAKE_HERMES_DIR", self.fake.path())
            .current_dir(self.cwd.path());
        cmd
    }

    fn argv(&self, which: &str) -> Vec<String> {
        std::fs::read_to_string(self.fake.path().join(format!("argv.{which}")))
            .unwrap_or_default()
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn steps(&self) -> Vec<Hash> {
        let cas = self.fx.cas();
        cas.list_by_type(cas.types().step_node)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Nothing was written: no StepNode, the head is still the StartNode.
    fn assert_unchanged(&self) -> TestResult {
        assert_eq!(self.steps(), Vec::<Hash>::new());
        assert_eq!(self.fx.head(self.thread)?, Some(self.start));
        Ok(())
    }

    fn title_of(&self, hash: Hash) -> Result<String, uwf_agent_kit::BoxError> {
        let node = self.fx.cas().get(hash)?;
        let schema = self.fx.cas().schema(node.type_hash)?;
        Ok(schema["title"].as_str().unwrap_or_default().to_owned())
    }

    /// Runs the planner and returns the StepNode's detail hash.
    fn run_ok(&self, cmd: &mut Command) -> Result<Hash, uwf_agent_kit::BoxError> {
        let out = cmd
            .arg(self.thread.to_string())
            .arg("planner")
            .assert()
            .success();
        let stdout = String::from_utf8(out.get_output().stdout.clone())?;
        let step: Hash = stdout.trim().parse()?;
        let node = self.fx.cas().get(step)?;
        assert_eq!(node.payload["role"], "planner");
        assert_eq!(node.payload["agent"], "uwf-hermes");
        let output: Hash = node.payload["output"]
            .as_str()
            .unwrap_or_default()
            .parse()?;
        assert_eq!(
            self.fx.cas().get(output)?.payload,
            json!({"plan": "Fix the bug", "steps": ["find it", "fix it"]})
        );
        Ok(node.payload["detail"]
            .as_str()
            .unwrap_or_default()
            .parse()?)
    }
}

fn finished(prompt: &str, answer: &str) -> Value {
    json!([
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": "", "finish_reason": "tool_calls",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}]},
        {"role": "tool", "content": "{\"output\": \"\", \"exit_code\": 0}", "tool_call_id": "c1", "tool_name": "terminal"},
        {"role": "assistant", "content": answer, "finish_reason": "stop", "reasoning": "easy"}
    ])
}

#[test]
fn runs_hermes_and_stores_the_transcript() -> TestResult {
    let c = Case::new()?;
    c.answers(PLAN, finished("the prompt", PLAN))?;
    let detail = c.run_ok(c.cmd().env("UWF_HERMES_ARGS", "--source 'tool'").args([
        "--max-turns",
        "3",
        "--hermes-arg",
        "-t",
        "--hermes-arg=terminal,file",
    ]))?;

    // The command line: the prompt, then the fixed flags, then the extras.
    let argv = c.argv("chat");
    assert_eq!(argv[..2], ["chat", "-q"]);
    let prompt = &argv[2];
    assert!(prompt.contains("Fix the login bug"), "{prompt}");
    assert!(prompt.contains("You are a planning agent."), "{prompt}");
    assert!(prompt.contains("`plan`"), "{prompt}");
    assert_eq!(
        argv[3..],
        [
            "--yolo",
            "--max-turns",
            "3",
            "--quiet",
            "--source",
            "tool",
            "-t",
            "terminal,file"
        ]
    );
    assert_eq!(
        c.argv("sessions"),
        ["sessions", "export", "--session-id", SESSION, "-"]
    );
    assert_eq!(
        std::fs::read_to_string(c.fake.path().join("lazy.chat"))?,
        "1"
    );
    let cwd = std::fs::read_to_string(c.fake.path().join("cwd.chat"))?;
    assert_eq!(
        Path::new(cwd.trim()).canonicalize()?,
        c.cwd.path().canonicalize()?
    );

    // The detail: a hermes-detail node whose turns are hermes-turn nodes.
    assert_eq!(c.title_of(detail)?, "hermes-detail");
    let d = c.fx.cas().get(detail)?.payload;
    assert_eq!(d["sessionId"], SESSION);
    assert_eq!(d["model"], "mock-model");
    assert_eq!(d["turnCount"], 4);
    assert!(d["duration"].as_u64().is_some());
    let turns: Vec<Hash> = d["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str()?.parse().ok())
        .collect();
    assert_eq!(turns.len(), 4);
    for t in &turns {
        assert_eq!(c.title_of(*t)?, "hermes-turn");
    }
    let roles: Vec<Value> = turns
        .iter()
        .map(|t| Ok(c.fx.cas().get(*t)?.payload["role"].clone()))
        .collect::<Result<_, uwf_agent_kit::BoxError>>()?;
    assert_eq!(
        roles,
        [
            json!("user"),
            json!("assistant"),
            json!("tool"),
            json!("assistant")
        ]
    );
    let call = c.fx.cas().get(turns[1])?.payload;
    // Stored as the turn every agent writes: OpenAI's `function` call
    // becomes a named tool call, `content` the text, `reasoning` thinking.
    assert_eq!(call["toolCalls"][0]["name"], "terminal");
    let result = c.fx.cas().get(turns[2])?.payload;
    assert_eq!(result["toolResults"][0]["name"], "terminal");
    let last = c.fx.cas().get(turns[3])?.payload;
    assert_eq!(last["text"], PLAN);
    assert_eq!(last["thinking"], "easy");
    // The store's reference walk reaches the turns.
    let walked: Vec<Hash> = c.fx.cas().walk(detail)?.iter().map(|e| e.hash).collect();
    assert!(turns.iter().all(|t| walked.contains(t)));
    Ok(())
}

#[test]
fn the_transcripts_answer_wins_over_stray_stdout_lines() -> TestResult {
    let c = Case::new()?;
    c.answers(PLAN, finished("p", PLAN))?;
    // A warning line before the answer (e.g. an unconfigured tirith) would
    // break the frontmatter; the transcript has the clean answer.
    c.set(
        "chat.stdout",
        &format!("  ⚠ tirith security scanner enabled but not available\r\n{PLAN}\n"),
    )?;
    c.run_ok(&mut c.cmd())?;
    Ok(())
}

#[test]
fn without_a_transcript_the_stdout_is_the_detail() -> TestResult {
    // `hermes sessions export` of an unknown id prints a line and exits 0.
    let c = Case::new()?;
    c.answers(PLAN, json!([]))?;
    c.set(
        "export.stdout",
        &format!("Session '{SESSION}' not found.\n"),
    )?;
    let detail = c.run_ok(&mut c.cmd())?;
    assert_eq!(c.title_of(detail)?, "hermes-raw-output");
    assert_eq!(
        c.fx.cas().get(detail)?.payload,
        json!({"text": format!("{PLAN}\n")})
    );

    // No session id on stderr: no export at all.
    let c = Case::new()?;
    c.answers(PLAN, json!([]))?;
    c.set("chat.stderr", "")?;
    let detail = c.run_ok(&mut c.cmd())?;
    assert_eq!(c.title_of(detail)?, "hermes-raw-output");
    assert!(c.argv("sessions").is_empty());

    // A failing export.
    let c = Case::new()?;
    c.answers(PLAN, json!([]))?;
    c.set("export.exit", "2")?;
    let detail = c.run_ok(&mut c.cmd())?;
    assert_eq!(c.title_of(detail)?, "hermes-raw-output");
    Ok(())
}

#[test]
fn hermes_not_installed() -> TestResult {
    let c = Case::new()?;
    c.cmd()
        .env("HERMES_BIN", "/nonexistent/hermes")
        .arg(c.thread.to_string())
        .arg("planner")
        .assert()
        .code(1)
        .stdout("")
        .stderr(
            predicate::str::contains("hermes is not installed")
                .and(predicate::str::contains("/nonexistent/hermes"))
                .and(predicate::str::contains("pip install hermes-agent==0.19.0"))
                .and(predicate::str::contains("HERMES_BIN")),
        );
    c.assert_unchanged()?;

    // Not on PATH either.
    c.cmd()
        .env_remove("HERMES_BIN")
        .env("PATH", c.cwd.path())
        .arg(c.thread.to_string())
        .arg("planner")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("not found on PATH"));
    c.assert_unchanged()
}

#[test]
fn hermes_errors_are_reported_with_its_stdout() -> TestResult {
    let c = Case::new()?;
    c.answers("API call failed after 1 retries: HTTP 500: boom", json!([]))?;
    c.set("chat.exit", "1")?;
    c.cmd()
        .arg(c.thread.to_string())
        .arg("planner")
        .assert()
        .code(1)
        .stdout("")
        .stderr(
            predicate::str::contains("hermes failed (exit status 1)")
                .and(predicate::str::contains("HTTP 500: boom"))
                .and(predicate::str::contains(SESSION)),
        );
    c.assert_unchanged()?;
    assert!(c.argv("sessions").is_empty());
    Ok(())
}

#[test]
fn a_hermes_that_runs_too_long_is_stopped() -> TestResult {
    let c = Case::new()?;
    c.answers(PLAN, json!([]))?;
    c.set("chat.sleep", "60")?;
    c.cmd()
        .args(["--timeout", "1s"])
        .arg(c.thread.to_string())
        .arg("planner")
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains(
            "hermes did not finish within 1s; it was stopped",
        ));
    c.assert_unchanged()?;
    assert!(c.argv("sessions").is_empty());
    Ok(())
}

#[test]
fn exit_zero_without_an_answer_is_a_failure() -> TestResult {
    let cases = [
        (
            "⚠️  Reached maximum iterations (2). Requesting summary...\nI reached the iteration limit and couldn't generate a summary.",
            "maximum number of turns (2)",
        ),
        (
            "⚠️ No reply: the model returned empty content after retries.",
            "no reply from the model",
        ),
        ("", "gave no answer"),
    ];
    for (stdout, message) in cases {
        let c = Case::new()?;
        c.answers(stdout, json!([]))?;
        c.cmd()
            .args(["--max-turns", "2"])
            .arg(c.thread.to_string())
            .arg("planner")
            .assert()
            .code(1)
            .stdout("")
            .stderr(predicate::str::contains(message));
        c.assert_unchanged()?;
    }
    Ok(())
}

#[test]
fn an_unfinished_transcript_is_a_failure() -> TestResult {
    let c = Case::new()?;
    let messages = json!([
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": PLAN, "finish_reason": null}
    ]);
    c.answers(PLAN, messages)?;
    c.cmd()
        .arg(c.thread.to_string())
        .arg("planner")
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("did not finish session")
                .and(predicate::str::contains("without a finish_reason")),
        );
    c.assert_unchanged()
}

#[test]
fn an_answer_without_the_roles_fields_writes_nothing() -> TestResult {
    let c = Case::new()?;
    let answer = "---\nplan: only a plan\n---\n";
    c.answers(answer, finished("p", answer))?;
    // No config.yaml: the LLM fallback cannot run either.
    c.cmd()
        .arg(c.thread.to_string())
        .arg("planner")
        .assert()
        .code(1)
        .stdout("");
    c.assert_unchanged()
}

#[test]
fn usage_and_options() -> TestResult {
    let c = Case::new()?;
    c.cmd()
        .arg(c.thread.to_string())
        .assert()
        .code(2)
        .stdout("");
    c.cmd()
        .args(["--max-turns", "0", &c.thread.to_string(), "planner"])
        .assert()
        .code(2);
    c.cmd()
        .env("UWF_HERMES_MAX_TURNS", "lots")
        .args([&c.thread.to_string(), "planner"])
        .assert()
        .code(2);
    c.cmd()
        .env("UWF_HERMES_ARGS", "-t 'unterminated")
        .args([&c.thread.to_string(), "planner"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("UWF_HERMES_ARGS"));
    c.cmd().arg("--help").assert().success().stdout(
        predicate::str::contains("HERMES_BIN").and(predicate::str::contains("--max-turns")),
    );
    c.cmd()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with("uwf-hermes "));
    c.assert_unchanged()?;

    // UWF_HERMES_MAX_TURNS is the default of --max-turns.
    c.answers(PLAN, finished("p", PLAN))?;
    c.run_ok(c.cmd().env("UWF_HERMES_MAX_TURNS", "7"))?;
    let argv = c.argv("chat");
    assert!(
        argv.windows(2).any(|w| w == ["--max-turns", "7"]),
        "{argv:?}"
    );
    Ok(())
}

#[test]
fn unknown_thread_or_role() -> TestResult {
    let c = Case::new()?;
    c.cmd()
        .args([&c.thread.to_string(), "nobody"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("has no role"));
    // hermes never ran.
    assert!(c.argv("chat").is_empty());
    c.assert_unchanged()
}
