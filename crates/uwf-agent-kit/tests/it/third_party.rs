//! A third-party agent written against the public API only, as in the
//! crate docs (`examples/echo_agent.rs`), running whole workflows.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use serde_json::json;
use uwf_agent_kit::testing::{Fixture, MockLlm};
use uwf_agent_kit::{AgentContext, AgentRun, BoxError, KitError, execute};
use uwf_protocol::StepNodePayload;

/// The closure of `examples/echo_agent.rs`, character for character.
fn echo(root: &std::path::Path, thread: &str, role: &str) -> Result<uwf_cas::Hash, KitError> {
    #[rustfmt::skip]
    let hash = execute("echo", root, thread, role, |ctx: &AgentContext| {
        // format instruction + role prompt + task + history (within a quota) + edge prompt
        let prompt = ctx.prompt()?;
        let answer = format!("---\nstatus: done\n---\n\nRole {} saw {} steps.\n\n{prompt}",
                             ctx.role(), ctx.steps()?.len());
        Ok(AgentRun::text(answer))
    });
    hash
}

const STATUS_WORKFLOW: &str = r#"name: write-check
description: Write, then check.
roles:
  writer:
    description: Writes
    systemPrompt: You write things.
    outputSchema:
      title: status-only
      type: object
      required: [status]
      additionalProperties: false
      properties:
        status: { type: string, enum: [done, blocked], description: How it went }
  checker:
    description: Checks
    systemPrompt: You check things.
    outputSchema:
      title: status-only
      type: object
      required: [status]
      additionalProperties: false
      properties:
        status: { type: string, enum: [done, blocked], description: How it went }
graph:
  $START: [{ role: writer, condition: null }]
  writer: [{ role: checker, condition: null, prompt: "Check the writing." }]
  checker: [{ role: $END, condition: null }]
"#;

fn detail_text(fx: &Fixture, step: uwf_cas::Hash) -> String {
    let step: StepNodePayload =
        serde_json::from_value(fx.cas().get(step).unwrap().payload).unwrap();
    let detail = fx.cas().get(step.record.detail).unwrap();
    detail.payload["text"].as_str().unwrap().to_owned()
}

#[test]
fn the_echo_agent_runs_a_workflow_on_the_fast_path() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    fx.write_config(&mock.config()).unwrap();
    let wf = fx.register_workflow(STATUS_WORKFLOW).unwrap();
    let (thread, _) = fx.start_thread_in(wf, "Write a haiku").unwrap();
    let mut steps = Vec::new();
    let roles = fx
        .drive(thread, 5, |role| {
            let h = echo(fx.root(), &thread.to_string(), role)?;
            steps.push(h);
            Ok(h)
        })
        .unwrap();
    assert_eq!(roles, ["writer", "checker"]);
    assert_eq!(mock.requests().len(), 0, "frontmatter answers need no LLM");

    let checker = detail_text(&fx, steps[1]);
    assert!(
        checker.starts_with("---\nstatus: done\n---\n\nRole checker saw 1 steps."),
        "{checker}"
    );
    // The prompt the agent echoed: format instruction from the schema,
    // scope, role prompt, task, edge prompt, history.
    for piece in [
        "## Deliverable format",
        "- `status` (one of \"done\", \"blocked\", required): How it went",
        "---\nstatus: done\n---",
        "Focus exclusively on YOUR role's deliverable.",
        "You check things.",
        "## Task\n\nWrite a haiku",
        "## Instructions for this step\n\nCheck the writing.",
        "### Step 1 · writer (by echo)",
    ] {
        assert!(checker.contains(piece), "{piece:?} missing from\n{checker}");
    }
}

#[test]
fn the_echo_agent_on_other_schemas_uses_one_extract_call_per_step() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    fx.write_config(&mock.config()).unwrap();
    let (thread, _) = fx.start_thread("Fix the login bug").unwrap();
    // `status: done` is not what plan-review's roles declare: layer 2.
    mock.reply_json(json!({ "plan": "p", "steps": ["s"] }))
        .reply_json(json!({ "approved": true, "comments": "ok" }));
    let roles = fx
        .drive(thread, 5, |role| echo(fx.root(), &thread.to_string(), role))
        .unwrap();
    assert_eq!(roles, ["planner", "reviewer"]);
    assert_eq!(mock.count("/v1/chat/completions"), 2);
}

#[test]
fn the_api_key_comes_from_dot_env_and_is_never_stored() {
    const KEY: &str = "sk-third-party-test-7c1d9e-DO-NOT-STORE";
    let var = "UWF_KIT_THIRD_PARTY_TEST_KEY";
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    let mut config = mock.config();
    config.providers.get_mut("mock").unwrap().api_key_env = var.into();
    fx.write_config(&config).unwrap();
    std::fs::write(fx.root().join(".env"), format!("{var}={KEY}\n")).unwrap();
    // What `run` does before calling the agent.
    uwf_state::state::FsState::new(fx.root())
        .load_env()
        .unwrap();

    let (thread, _) = fx.start_thread("t").unwrap();
    mock.reply_json(json!({ "plan": "p", "steps": [] }));
    let step = execute("a", fx.root(), &thread.to_string(), "planner", |_| {
        Ok(AgentRun::text("prose with no frontmatter"))
    })
    .unwrap();
    assert_eq!(
        mock.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    // No node, and no file but .env, holds the key.
    let mut stack = vec![fx.root().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name() != Some(".env".as_ref()) {
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(KEY),
                    "{} holds the key",
                    path.display()
                );
            }
        }
    }
    let _ = step;

    // A 401 quoting the key: the error does not.
    mock.push(uwf_agent_kit::testing::MockReply::error(
        401,
        &format!("invalid key {KEY}"),
    ));
    let err = execute("a", fx.root(), &thread.to_string(), "planner", |_| {
        Ok(AgentRun::text("prose"))
    })
    .unwrap_err();
    let shown = format!("{err}\n{err:?}");
    let report = format!("{:?}", miette::Report::new(err));
    assert!(shown.contains("HTTP 401"), "{shown}");
    assert!(
        !shown.contains(KEY) && !report.contains(KEY),
        "{shown}\n{report}"
    );
}

#[test]
fn closures_use_question_mark_with_common_error_types() {
    fn anyhow_work(fail: bool) -> anyhow::Result<String> {
        if fail {
            anyhow::bail!("anyhow says no");
        }
        Ok("---\nstatus: done\n---\n".into())
    }
    fn boxed_work() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Err("boxed says no".into())
    }
    let fx = Fixture::new().unwrap();
    let wf = fx.register_workflow(STATUS_WORKFLOW).unwrap();
    let (thread, _) = fx.start_thread_in(wf, "t").unwrap();

    execute("a", fx.root(), &thread.to_string(), "writer", |_| {
        Ok(AgentRun::text(anyhow_work(false)?))
    })
    .unwrap();
    let err = execute("a", fx.root(), &thread.to_string(), "writer", |_| {
        use anyhow::Context as _;
        let text = anyhow_work(true).context("while writing")?;
        Ok(AgentRun::text(text))
    })
    .unwrap_err();
    assert!(matches!(err, KitError::Agent(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the agent failed: while writing: anyhow says no"
    );

    let err = execute("a", fx.root(), &thread.to_string(), "writer", |_| {
        boxed_work()?;
        Ok(AgentRun::text("x"))
    })
    .unwrap_err();
    assert_eq!(err.to_string(), "the agent failed: boxed says no");

    // A function returning anyhow::Result<AgentRun>, handed over.
    fn work(_: &AgentContext) -> anyhow::Result<AgentRun> {
        Err(anyhow::anyhow!("from a function"))
    }
    let err = execute("a", fx.root(), &thread.to_string(), "writer", |ctx| {
        Ok(work(ctx)?)
    })
    .unwrap_err();
    assert!(err.to_string().ends_with("from a function"), "{err}");

    // And a plain BoxError function works directly.
    fn plain(_: &AgentContext) -> Result<AgentRun, BoxError> {
        Ok(AgentRun::text("---\nstatus: blocked\n---\n"))
    }
    execute("a", fx.root(), &thread.to_string(), "writer", plain).unwrap();
}
