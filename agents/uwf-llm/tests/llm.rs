//! The `uwf-llm` binary against the agent kit's mock LLM server, on the
//! kit's two-role fixture workflow (`plan-review`): model resolution, the
//! request, the `llm-call` detail, the extraction call counts, and errors
//! that leave the thread unchanged.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};
use uwf_agent_kit::testing::{Fixture, MockLlm, MockReply};
use uwf_cas::Hash;

type TestResult = Result<(), uwf_agent_kit::BoxError>;

const KEY_VAR: &str = "UWF_LLM_TEST_KEY";
const KEY: &str = "sk-uwf-llm-test-0123456789";

const PLAN: &str = "---\nplan: Fix the login redirect\nsteps:\n  - find the middleware\n  - fix it\n---\n\nThe plan.";
const REVIEW: &str = "---\napproved: true\ncomments: LGTM\n---\n\nGood plan.";

/// `config.yaml` pointing at the mock: `main` is the default model, the
/// fixture's reviewer uses `small`.
fn config(base_url: &str) -> String {
    format!(
        "providers:\n  mock: {{ baseUrl: \"{base_url}\", apiKeyEnv: {KEY_VAR} }}\n\
         models:\n  main: {{ provider: mock, name: main-model }}\n  small: {{ provider: mock, name: small-model }}\n\
         defaultModel: main\n\
         roleModels:\n  plan-review:\n    reviewer: small\n"
    )
}

struct Case {
    fx: Fixture,
    mock: MockLlm,
    thread: uwf_agent_kit::ThreadId,
    start: Hash,
}

impl Case {
    /// A thread of the fixture workflow and a mock; `config.yaml` written
    /// when `config` is given.
    fn new(config: Option<&dyn Fn(&str) -> String>) -> Result<Self, uwf_agent_kit::BoxError> {
        let fx = Fixture::new()?;
        let mock = MockLlm::start()?;
        if let Some(make) = config {
            std::fs::write(fx.root().join("config.yaml"), make(&mock.base_url()))?;
        }
        let (thread, start) = fx.start_thread("Fix the login bug")?;
        Ok(Self {
            fx,
            mock,
            thread,
            start,
        })
    }

    fn with_config() -> Result<Self, uwf_agent_kit::BoxError> {
        Self::new(Some(&config))
    }

    fn cmd(&self, role: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uwf-llm"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("UNCAGED_WORKFLOW_STORAGE_ROOT", self.fx.root())
            .env(KEY_VAR, KEY)
            .env("UWF_LLM_MAX_ATTEMPTS", "1")
            .arg(self.thread.to_string())
            .arg(role);
        cmd
    }

    /// Runs `role`, checks the StepNode, moves the head to it (as uwf
    /// would) and returns it.
    fn step(&self, role: &str) -> Result<Value, uwf_agent_kit::BoxError> {
        let out = self.cmd(role).assert().success();
        let output = out.get_output();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!all.contains(KEY), "the API key leaked: {all}");
        let hash: Hash = String::from_utf8(output.stdout.clone())?.trim().parse()?;
        let node = self.fx.cas().get(hash)?.payload;
        assert_eq!(node["role"], role);
        assert_eq!(node["agent"], "uwf-llm");
        self.fx.set_head(self.thread, hash)?;
        Ok(node)
    }

    fn get(&self, node: &Value, key: &str) -> Result<(String, Value), uwf_agent_kit::BoxError> {
        let hash: Hash = node[key].as_str().ok_or("not a hash")?.parse()?;
        let n = self.fx.cas().get(hash)?;
        let title = self.fx.cas().schema(n.type_hash)?["title"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Ok((title, n.payload))
    }

    fn assert_unchanged(&self) -> TestResult {
        let cas = self.fx.cas();
        assert_eq!(cas.list_by_type(cas.types().step_node)?, Vec::<Hash>::new());
        assert_eq!(self.fx.head(self.thread)?, Some(self.start));
        Ok(())
    }
}

#[test]
fn frontmatter_answers_cost_one_call_per_step() -> TestResult {
    let c = Case::with_config()?;
    c.mock.reply_text(PLAN).reply_text(REVIEW);

    let planner = c.step("planner")?;
    assert_eq!(
        c.mock.chat_requests().len(),
        1,
        "the call only, no extraction"
    );
    let reviewer = c.step("reviewer")?;
    let chats = c.mock.chat_requests();
    assert_eq!(chats.len(), 2, "one call per step");

    // The requests: system + user messages, the role's model, the key.
    for (req, model, role_prompt) in [
        (&chats[0], "main-model", "You are a planning agent."),
        (&chats[1], "small-model", "You are a reviewer."),
    ] {
        assert_eq!(req.body["model"], model, "roleModels, else defaultModel");
        assert!(req.body.get("response_format").is_none());
        let msgs = req.body["messages"].as_array().ok_or("no messages")?;
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0]["role"], "system");
        let system = msgs[0]["content"].as_str().unwrap_or_default();
        assert!(system.contains("Deliverable format"), "{system}");
        assert!(system.contains(role_prompt), "{system}");
        assert_eq!(msgs[1]["role"], "user");
        let user = msgs[1]["content"].as_str().unwrap_or_default();
        assert!(user.contains("Fix the login bug"), "{user}");
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    // The reviewer saw the plan.
    let user = chats[1].last_user_message().unwrap_or_default();
    assert!(user.contains("Fix the login redirect"), "{user}");

    // Outputs and llm-call details.
    let (_, output) = c.get(&planner, "output")?;
    assert_eq!(
        output,
        json!({"plan": "Fix the login redirect", "steps": ["find the middleware", "fix it"]})
    );
    let (title, detail) = c.get(&planner, "detail")?;
    assert_eq!(title, "llm-call");
    assert_eq!(detail["model"], "main-model");
    assert_eq!(detail["answer"], PLAN);
    assert!(
        detail["promptTokens"].as_u64().is_some_and(|n| n > 0),
        "{detail}"
    );
    assert!(detail["completionTokens"].as_u64().is_some(), "{detail}");
    assert_eq!(
        detail["totalTokens"].as_u64(),
        Some(
            detail["promptTokens"].as_u64().unwrap_or_default()
                + detail["completionTokens"].as_u64().unwrap_or_default()
        )
    );
    assert!(detail["durationMs"].as_u64().is_some());
    let (_, review) = c.get(&reviewer, "output")?;
    assert_eq!(review, json!({"approved": true, "comments": "LGTM"}));
    let (_, detail) = c.get(&reviewer, "detail")?;
    assert_eq!(detail["model"], "small-model");
    Ok(())
}

#[test]
fn a_prose_answer_costs_one_extraction_call() -> TestResult {
    let c = Case::with_config()?;
    let prose = "I would first find the middleware, then fix the redirect.";
    c.mock
        .reply_text(prose)
        .reply_json(json!({"plan": "Fix the redirect", "steps": ["find", "fix"]}));
    let planner = c.step("planner")?;
    let chats = c.mock.chat_requests();
    assert_eq!(chats.len(), 2, "the call, then one extraction");
    assert!(chats[0].body.get("response_format").is_none());
    assert_eq!(chats[1].body["response_format"]["type"], "json_object");
    assert!(
        chats[1].raw_body.contains("find the middleware"),
        "the extraction sees the answer"
    );
    let (_, output) = c.get(&planner, "output")?;
    assert_eq!(
        output,
        json!({"plan": "Fix the redirect", "steps": ["find", "fix"]})
    );
    let (_, detail) = c.get(&planner, "detail")?;
    assert_eq!(detail["answer"], prose);
    Ok(())
}

#[test]
fn no_usage_means_null_tokens() -> TestResult {
    let c = Case::with_config()?;
    c.mock.push(MockReply::completion(json!({
        "id": "x", "object": "chat.completion", "created": 0, "model": "main-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": PLAN}}],
        "usage": null
    })));
    let planner = c.step("planner")?;
    let (_, detail) = c.get(&planner, "detail")?;
    for key in ["promptTokens", "completionTokens", "totalTokens"] {
        assert_eq!(detail[key], Value::Null, "{key}: {detail}");
    }
    Ok(())
}

#[test]
fn configuration_errors_change_nothing() -> TestResult {
    // No config.yaml at all.
    let c = Case::new(None)?;
    c.cmd("planner")
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("config.yaml"));
    c.assert_unchanged()?;

    // No model for the role.
    let c = Case::new(Some(&|url: &str| {
        format!("providers:\n  mock: {{ baseUrl: \"{url}\", apiKeyEnv: {KEY_VAR} }}\n")
    }))?;
    c.cmd("planner").assert().code(1).stderr(
        predicate::str::contains("no model configured for role \"planner\"")
            .and(predicate::str::contains("defaultModel")),
    );
    c.assert_unchanged()?;

    // A model alias that is not defined.
    let c = Case::new(Some(&|url: &str| {
        format!(
            "{}defaultModel: ghost\n",
            config(url).replace("defaultModel: main\n", "")
        )
    }))?;
    c.cmd("planner")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("unknown model alias \"ghost\""));
    c.assert_unchanged()?;

    // The key variable is not set.
    let c = Case::with_config()?;
    c.cmd("planner")
        .env_remove(KEY_VAR)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(KEY_VAR));
    c.assert_unchanged()?;
    assert_eq!(c.mock.chat_requests().len(), 0, "no call without a key");
    Ok(())
}

#[test]
fn endpoint_errors_change_nothing() -> TestResult {
    let c = Case::with_config()?;
    c.mock.push(MockReply::error(500, "upstream exploded"));
    c.cmd("planner").assert().code(1).stdout("").stderr(
        predicate::str::contains("HTTP 500").and(predicate::str::contains("upstream exploded")),
    );
    c.assert_unchanged()?;

    // A provider message quoting the key does not leak it.
    c.mock
        .push(MockReply::error(401, &format!("invalid key {KEY}")));
    c.cmd("planner")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("HTTP 401").and(predicate::str::contains(KEY).not()));
    c.assert_unchanged()?;

    // An empty answer.
    c.mock.reply_text("  \n");
    c.cmd("planner")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("empty answer"));
    c.assert_unchanged()?;

    // Nobody listening (port 9, discard, is closed on loopback).
    let c = Case::new(Some(&|_: &str| config("http://127.0.0.1:9/v1")))?;
    c.cmd("planner")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("cannot reach the LLM endpoint"));
    c.assert_unchanged()
}

#[test]
fn an_unusable_answer_writes_nothing() -> TestResult {
    // Prose, then an extraction answer that violates the schema twice
    // (the repair round included).
    let c = Case::with_config()?;
    c.mock
        .reply_text("Just prose.")
        .reply_json(json!({"plan": 3}))
        .reply_json(json!({"plan": 4}));
    c.cmd("planner")
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("plan"));
    assert_eq!(
        c.mock.chat_requests().len(),
        3,
        "call, extraction, one repair"
    );
    c.assert_unchanged()
}

#[test]
fn usage_errors() -> TestResult {
    let c = Case::with_config()?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uwf-llm"));
    cmd.arg("only-one").assert().code(2);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uwf-llm"));
    cmd.arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("roleModels"));
    c.assert_unchanged()
}
