//! The `uwf-agent` binary against the agent kit's mock LLM server, with
//! scripted conversations: the example workflow end to end through `uwf
//! thread run`, both providers' wire formats, tool errors fed back, the
//! sandbox, the policy's limits, the extraction fallback and secrets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uwf_agent_kit::testing::real_cli::{self, files_containing, load_steps};
use uwf_agent_kit::testing::{Fixture, MockLlm, MockReply, MockRequest};
use uwf_cas::Hash;

type TestResult = Result<(), uwf_agent_kit::BoxError>;
type BoxResult<T> = Result<T, uwf_agent_kit::BoxError>;

const KEY_VAR: &str = "UWF_AGENT_TEST_KEY";
const KEY: &str = "sk-uwf-agent-test-0123456789";
/// A secret of the storage root's `.env`.
const SECRET: &str = "db-password-s3cr3t-value";

fn agent_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_uwf-agent"))
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn uwf() -> &'static Path {
    static UWF: OnceLock<PathBuf> = OnceLock::new();
    UWF.get_or_init(|| {
        real_cli::uwf_beside(&agent_bin(), &workspace(), "uwf-agent")
            .unwrap_or_else(|e| panic!("cannot build uwf: {e}"))
    })
}

/// `config.yaml` pointing at the mock with `api`, plus `extra`.
fn config(base_url: &str, api: &str, extra: &str) -> String {
    format!(
        "providers:\n  mock: {{ baseUrl: \"{base_url}\", apiKeyEnv: {KEY_VAR}, api: {api} }}\n\
         models:\n  main: {{ provider: mock, name: main-model }}\n\
         defaultModel: main\n{extra}"
    )
}

/// A thread of the kit's fixture workflow (`planner` outputs `{plan,
/// steps}`), a mock, and a working directory with `a.txt` and `src/`.
struct Case {
    fx: Fixture,
    mock: MockLlm,
    work: tempfile::TempDir,
    thread: uwf_agent_kit::ThreadId,
}

impl Case {
    fn new(api: &str, extra: &str) -> BoxResult<Self> {
        let fx = Fixture::new()?;
        let mock = MockLlm::start()?;
        std::fs::write(
            fx.root().join("config.yaml"),
            config(&mock.base_url(), api, extra),
        )?;
        std::fs::write(fx.root().join(".env"), format!("DB_PASSWORD={SECRET}\n"))?;
        let work = tempfile::tempdir()?;
        std::fs::write(work.path().join("a.txt"), "alpha\nbeta\ngamma\n")?;
        std::fs::create_dir(work.path().join("src"))?;
        let (thread, _) = fx.start_thread("Plan the release")?;
        Ok(Self {
            fx,
            mock,
            work,
            thread,
        })
    }

    fn script(&self, replies: Vec<MockReply>) -> &Self {
        for r in replies {
            self.mock.push(r);
        }
        self
    }

    /// Runs the planner; checks that neither the key nor the secret leaked.
    fn run(&self) -> BoxResult<Output> {
        let out = Command::new(agent_bin())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("UNCAGED_WORKFLOW_STORAGE_ROOT", self.fx.root())
            .env("UWF_AGENT_CWD", self.work.path())
            .env(KEY_VAR, KEY)
            .env("UWF_LLM_MAX_ATTEMPTS", "1")
            .args([self.thread.to_string().as_str(), "planner"])
            .output()?;
        let all = real_cli::output_text(&out);
        assert!(!all.contains(KEY), "the API key leaked: {all}");
        assert!(!all.contains(SECRET), "a secret leaked: {all}");
        let stored = files_containing(&self.fx.root().join("cas"), SECRET)?;
        assert!(stored.is_empty(), "a secret was stored: {stored:?}");
        Ok(out)
    }

    /// Runs the planner to success; the StepNode's output and the steps.
    fn step(&self) -> BoxResult<(Value, real_cli::Step)> {
        let out = self.run()?;
        assert!(out.status.success(), "{}", real_cli::output_text(&out));
        let hash: Hash = String::from_utf8(out.stdout)?.trim().parse()?;
        let steps = load_steps(
            self.fx.cas(),
            hash,
            "uwf-agent",
            "uwf-agent-detail",
            "uwf-agent-turn",
        )?;
        let step = steps.into_iter().last().ok_or("no step")?;
        Ok((step.output.clone(), step))
    }

    /// Runs the planner to a failure; its stderr. Checks nothing was written.
    fn fails(&self) -> BoxResult<String> {
        let out = self.run()?;
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            real_cli::output_text(&out)
        );
        assert!(out.stdout.is_empty());
        let cas = self.fx.cas();
        assert_eq!(cas.list_by_type(cas.types().step_node)?, Vec::<Hash>::new());
        Ok(String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn calls(&self) -> Vec<MockRequest> {
        self.mock.model_requests()
    }
}

fn submit_plan() -> MockReply {
    MockReply::tool_call(
        "submit",
        json!({"plan": "Ship it", "steps": ["tag", "publish"]}),
    )
}

/// The `role: tool` messages of an OpenAI request: `(tool_call_id, content)`.
fn tool_messages(req: &MockRequest) -> Vec<(String, String)> {
    req.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn tool_names(req: &MockRequest) -> Vec<String> {
    req.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t.pointer("/function/name")
                .or_else(|| t.get("name"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

#[test]
fn openai_wire_format_with_parallel_calls() -> TestResult {
    let c = Case::new("openai", "")?;
    c.script(vec![
        MockReply::tool_calls(&[
            (
                "read_file",
                json!({"path": "a.txt", "start_line": 2, "end_line": 2}),
            ),
            ("list_dir", json!({})),
        ]),
        submit_plan(),
    ]);
    let (output, step) = c.step()?;
    assert_eq!(
        output,
        json!({"plan": "Ship it", "steps": ["tag", "publish"]})
    );
    let calls = c.calls();
    assert_eq!(calls.len(), 2, "two model calls, no extraction");
    for req in &calls {
        assert_eq!(req.path, "/v1/chat/completions");
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(req.body["model"], "main-model");
    }
    // The tools, submit's parameters being the role's output schema.
    let first = &calls[0].body;
    assert_eq!(
        tool_names(&calls[0]),
        [
            "read_file",
            "list_dir",
            "glob",
            "grep",
            "write_file",
            "edit_file",
            "run_command",
            "submit"
        ]
    );
    let submit = &first["tools"][7]["function"]["parameters"];
    assert_eq!(submit["required"], json!(["plan", "steps"]));
    assert_eq!(first["tools"][0]["type"], "function");
    let msgs = first["messages"].as_array().ok_or("no messages")?;
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["role"], "system");
    assert!(
        msgs[0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("You are a planning agent.")
    );
    assert!(
        msgs[1]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("Plan the release")
    );
    // The second call: the assistant's two calls, then one `tool` message
    // per call, in order, with its tool_call_id.
    let msgs = calls[1].body["messages"].as_array().ok_or("no messages")?;
    let roles: Vec<&str> = msgs
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    let asked: Vec<&str> = msgs[2]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(asked, ["call_0", "call_1"]);
    assert_eq!(msgs[2]["tool_calls"][0]["type"], "function");
    let results = tool_messages(&calls[1]);
    assert_eq!(
        results[0],
        (
            "call_0".to_owned(),
            "2\tbeta\n(lines 2–2 of 3)\n".to_owned()
        )
    );
    assert_eq!(results[1], ("call_1".to_owned(), "a.txt\nsrc/".to_owned()));

    // The record: prompt, call, two results, call, submit's result.
    let roles: Vec<&str> = step
        .turns
        .iter()
        .map(|(_, t)| t["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "tool"
        ]
    );
    assert_eq!(step.turns[2].1["toolCalls"][1]["name"], "list_dir");
    assert_eq!(step.turns[3].1["toolResults"][0]["toolUseId"], "call_0");
    assert!(step.turns[2].1["promptTokens"].as_u64().unwrap_or(0) > 0);
    let d = &step.detail;
    assert_eq!(
        (d["ended"].as_str(), d["api"].as_str()),
        (Some("submit"), Some("openai"))
    );
    assert_eq!(
        (d["modelCalls"].as_u64(), d["toolCalls"].as_u64()),
        (Some(2), Some(3))
    );
    assert!(d["totalTokens"].as_u64().unwrap_or(0) > 0);
    assert_eq!(d["costUsd"], Value::Null, "no price, no cost");
    Ok(())
}

#[test]
fn anthropic_wire_format() -> TestResult {
    let c = Case::new("anthropic", "")?;
    let cfg = std::fs::read_to_string(c.fx.root().join("config.yaml"))?.replace(
        "main: { provider: mock, name: main-model }",
        "main: { provider: mock, name: claude-x, price: { input: 3, output: 15 } }",
    );
    std::fs::write(c.fx.root().join("config.yaml"), cfg)?;
    c.script(vec![
        MockReply::tool_calls(&[
            ("read_file", json!({"path": "missing.txt"})),
            ("grep", json!({"pattern": "^b"})),
        ]),
        submit_plan(),
    ]);
    let (output, step) = c.step()?;
    assert_eq!(output["plan"], "Ship it");
    let calls = c.calls();
    assert_eq!(calls.len(), 2);
    for req in &calls {
        assert_eq!(req.path, "/v1/messages");
        assert_eq!(req.header("x-api-key"), Some(KEY));
        assert_eq!(req.header("authorization"), None);
        assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(req.body["model"], "claude-x");
        assert_eq!(req.body["max_tokens"], 8192);
        assert!(
            req.body["system"]
                .as_str()
                .unwrap_or_default()
                .contains("You are a planning agent.")
        );
    }
    let tools = calls[0].body["tools"].as_array().ok_or("no tools")?;
    assert!(
        tools.iter().all(|t| t["input_schema"]["type"] == "object"),
        "{tools:?}"
    );
    assert_eq!(
        tool_names(&calls[0]).last().map(String::as_str),
        Some("submit")
    );
    // user, assistant (tool_use blocks), user (tool_result blocks).
    let msgs = calls[1].body["messages"].as_array().ok_or("no messages")?;
    let roles: Vec<&str> = msgs
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    let uses = msgs[1]["content"].as_array().ok_or("no blocks")?;
    assert_eq!(uses[0]["type"], "tool_use");
    assert_eq!(uses[0]["input"], json!({"path": "missing.txt"}));
    let results = msgs[2]["content"].as_array().ok_or("no blocks")?;
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], uses[0]["id"]);
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("does not exist")
    );
    assert_eq!(results[1]["tool_use_id"], uses[1]["id"]);
    assert_eq!(results[1]["is_error"], false);
    assert_eq!(results[1]["content"], "a.txt:2:beta");
    // Priced: a cost per call and for the step.
    let d = &step.detail;
    assert_eq!(d["api"], "anthropic");
    let tokens = (
        d["promptTokens"].as_u64().unwrap_or(0),
        d["completionTokens"].as_u64().unwrap_or(0),
    );
    let expect = (tokens.0 as f64 * 3.0 + tokens.1 as f64 * 15.0) / 1e6;
    let cost = d["costUsd"].as_f64().ok_or("no cost")?;
    assert!((cost - expect).abs() < 1e-9, "{cost} vs {expect}");
    assert!(step.turns[2].1["costUsd"].as_f64().unwrap_or(0.0) > 0.0);
    Ok(())
}

#[test]
fn tool_errors_are_fed_back_and_recovered_from() -> TestResult {
    let c = Case::new("openai", "")?;
    c.script(vec![
        MockReply::tool_call(
            "edit_file",
            json!({"path": "a.txt", "old_text": "BETA", "new_text": "b"}),
        ),
        MockReply::tool_call(
            "edit_file",
            json!({"path": "a.txt", "old_text": "beta", "new_text": "BETA"}),
        ),
        MockReply::tool_call("submit", json!({"plan": "Ship it"})),
        MockReply::tool_call("nope", json!({})),
        submit_plan(),
    ]);
    let (output, step) = c.step()?;
    assert_eq!(output["steps"], json!(["tag", "publish"]));
    assert_eq!(
        std::fs::read_to_string(c.work.path().join("a.txt"))?,
        "alpha\nBETA\ngamma\n"
    );
    let calls = c.calls();
    assert_eq!(calls.len(), 5);
    let last = |i: usize| {
        tool_messages(&calls[i])
            .last()
            .cloned()
            .unwrap_or_default()
            .1
    };
    assert!(
        last(1).contains("`old_text` was not found in a.txt"),
        "{}",
        last(1)
    );
    assert_eq!(last(2), "edited a.txt at line 2");
    assert!(
        last(3).contains("does not match the role's output schema"),
        "{}",
        last(3)
    );
    assert!(last(3).contains("steps"), "{}", last(3));
    assert!(last(4).contains("there is no tool \"nope\""), "{}", last(4));
    let errors: Vec<bool> = step
        .turns
        .iter()
        .filter(|(_, t)| t["role"] == "tool")
        .map(|(_, t)| t["toolResults"][0]["isError"] == true)
        .collect();
    assert_eq!(errors, [true, false, true, true, false]);
    Ok(())
}

#[test]
fn paths_outside_the_working_directory_are_refused() -> TestResult {
    let c = Case::new("openai", "")?;
    let outside = tempfile::tempdir()?;
    std::fs::write(outside.path().join("secret.txt"), "top secret")?;
    std::os::unix::fs::symlink(outside.path(), c.work.path().join("link"))?;
    let target = outside.path().join("written.txt");
    c.script(vec![
        MockReply::tool_calls(&[
            ("read_file", json!({"path": "../secret.txt"})),
            (
                "read_file",
                json!({"path": outside.path().join("secret.txt")}),
            ),
            ("read_file", json!({"path": "link/secret.txt"})),
            ("write_file", json!({"path": target, "content": "x"})),
            (
                "write_file",
                json!({"path": "link/new.txt", "content": "x"}),
            ),
        ]),
        submit_plan(),
    ]);
    c.step()?;
    let results = tool_messages(&c.calls()[1]);
    assert_eq!(results.len(), 5);
    for (_, content) in &results {
        assert!(
            content.contains("is outside the working directory"),
            "{content}"
        );
        assert!(!content.contains("top secret"), "{content}");
    }
    assert!(!target.exists());
    assert!(!outside.path().join("new.txt").exists());
    Ok(())
}

#[test]
fn a_command_that_runs_too_long_is_stopped() -> TestResult {
    let c = Case::new(
        "openai",
        "agentPolicy:\n  default: { commandTimeout: 300ms }\n",
    )?;
    let marker = c.work.path().join("late.txt");
    // The marker's full path names this test's processes for
    // `wait_no_process`.
    let late = format!("touch '{}'", marker.display());
    c.script(vec![
        MockReply::tool_call(
            "run_command",
            json!({"command": format!("(sleep 1.5; {late}) & sleep 30"), "timeout_secs": 60}),
        ),
        submit_plan(),
    ]);
    let started = Instant::now();
    c.step()?;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let result = tool_messages(&c.calls()[1]).remove(0).1;
    assert!(result.contains("stopped after 300ms"), "{result}");
    // The whole process group went: the background job never writes.
    wait_no_process(&late);
    assert!(!marker.exists(), "a process the command started survived");
    Ok(())
}

#[test]
fn stopping_the_agent_stops_its_command() -> TestResult {
    let c = Case::new("openai", "")?;
    let marker = c.work.path().join("late.txt");
    // The marker's full path names this test's processes for
    // `wait_no_process`.
    let late = format!("touch '{}'", marker.display());
    c.script(vec![MockReply::tool_call(
        "run_command",
        json!({"command": format!("touch started; (sleep 1.5; {late}) & sleep 30")}),
    )]);
    let child = Command::new(agent_bin())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("UNCAGED_WORKFLOW_STORAGE_ROOT", c.fx.root())
        .env("UWF_AGENT_CWD", c.work.path())
        .env(KEY_VAR, KEY)
        .args([c.thread.to_string().as_str(), "planner"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.work.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // What uwf does when a step times out or is killed: SIGTERM.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    assert!(killed.success());
    let out = child.wait_with_output()?;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        real_cli::output_text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(out.stdout.is_empty());
    wait_no_process(&late);
    assert!(!marker.exists(), "the command outlived the agent");
    assert_eq!(c.calls().len(), 1);
    Ok(())
}

#[test]
fn the_turn_limit_fails_the_step() -> TestResult {
    let c = Case::new(
        "openai",
        "agentPolicy:\n  fix:\n    planner: { maxTurns: 9 }\n  plan-review:\n    planner: { maxTurns: 2 }\n",
    )?;
    c.mock
        .set_default(MockReply::tool_call("list_dir", json!({})));
    let stderr = c.fails()?;
    assert!(
        stderr.contains("the turn limit was reached: 2 model calls"),
        "{stderr}"
    );
    assert!(stderr.contains("maxTurns"), "{stderr}");
    assert_eq!(c.calls().len(), 2);
    // The failed step's transcript is stored and named.
    let hash = stderr
        .split("transcript so far is node ")
        .nth(1)
        .and_then(|r| r.get(..13))
        .ok_or("no transcript named")?;
    let detail = c.fx.cas().get(hash.parse()?)?.payload;
    assert_eq!(detail["ended"], "failed");
    assert_eq!(detail["modelCalls"], 2);
    assert!(
        detail["error"]
            .as_str()
            .unwrap_or_default()
            .contains("turn limit")
    );
    Ok(())
}

#[test]
fn token_and_cost_limits_fail_the_step() -> TestResult {
    let c = Case::new("openai", "agentPolicy:\n  default: { maxTokens: 10 }\n")?;
    c.mock
        .set_default(MockReply::tool_call("list_dir", json!({})));
    let stderr = c.fails()?;
    assert!(stderr.contains("the token limit was reached"), "{stderr}");
    assert_eq!(c.calls().len(), 1);

    let c = Case::new(
        "openai",
        "agentPolicy:\n  default: { maxCostUsd: 0.000001 }\n",
    )?;
    let cfg = std::fs::read_to_string(c.fx.root().join("config.yaml"))?.replace(
        "name: main-model }",
        "name: main-model, price: { input: 5, output: 5 } }",
    );
    std::fs::write(c.fx.root().join("config.yaml"), cfg)?;
    c.mock
        .set_default(MockReply::tool_call("list_dir", json!({})));
    let stderr = c.fails()?;
    assert!(stderr.contains("the cost limit was reached"), "{stderr}");
    Ok(())
}

#[test]
fn a_model_that_never_submits_gets_the_kits_extraction() -> TestResult {
    let c = Case::new("openai", "")?;
    c.script(vec![
        MockReply::tool_call("read_file", json!({"path": "a.txt"})),
        MockReply::text("The plan: ship it, by tagging and publishing."),
        MockReply::json(&json!({"plan": "ship it", "steps": ["tag", "publish"]})),
    ]);
    let (output, step) = c.step()?;
    assert_eq!(
        output,
        json!({"plan": "ship it", "steps": ["tag", "publish"]})
    );
    let calls = c.calls();
    assert_eq!(calls.len(), 3, "two turns, then one extraction call");
    assert_eq!(calls[2].body["response_format"]["type"], "json_object");
    assert!(calls[2].body.get("tools").is_none());
    assert_eq!(step.detail["ended"], "answer");
    Ok(())
}

#[test]
fn read_only_roles_get_no_writing_tools_and_commands_hide_secrets() -> TestResult {
    let c = Case::new(
        "openai",
        "agentPolicy:\n  plan-review: { readOnly: true }\n",
    )?;
    c.script(vec![
        MockReply::tool_call("write_file", json!({"path": "x.txt", "content": "x"})),
        submit_plan(),
    ]);
    c.step()?;
    let calls = c.calls();
    assert_eq!(
        tool_names(&calls[0]),
        ["read_file", "list_dir", "glob", "grep", "submit"]
    );
    assert!(tool_messages(&calls[1])[0].1.contains("read-only"));
    assert!(!c.work.path().join("x.txt").exists());

    // Commands never see the .env secrets or the key.
    let c = Case::new("openai", "")?;
    c.script(vec![
        MockReply::tool_call(
            "run_command",
            json!({"command": format!("echo \"db=$DB_PASSWORD key=${KEY_VAR}\"")}),
        ),
        submit_plan(),
    ]);
    c.step()?;
    let result = tool_messages(&c.calls()[1]).remove(0).1;
    assert!(result.contains("db= key=\n"), "{result}");

    // A secret in a file the model reads is cut out of what it is sent
    // (and of what is recorded: `run` checks the store).
    let c = Case::new("openai", "")?;
    std::fs::write(
        c.work.path().join("leak.txt"),
        format!("password={SECRET}\n"),
    )?;
    c.script(vec![
        MockReply::tool_call("read_file", json!({"path": "leak.txt"})),
        submit_plan(),
    ]);
    c.step()?;
    let sent = &c.calls()[1].raw_body;
    assert!(!sent.contains(SECRET), "{sent}");
    assert!(sent.contains("password=‹redacted:DB_PASSWORD›"), "{sent}");
    Ok(())
}

#[test]
fn usage_errors_and_a_missing_working_directory() -> TestResult {
    let c = Case::new("openai", "")?;
    let out = Command::new(agent_bin()).arg("--help").output()?;
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("agentPolicy"));
    let out = Command::new(agent_bin())
        .env("UNCAGED_WORKFLOW_STORAGE_ROOT", c.fx.root())
        .env("UWF_AGENT_CWD", c.work.path().join("nope"))
        .env(KEY_VAR, KEY)
        .args([c.thread.to_string().as_str(), "planner"])
        .output()?;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot use the working directory"),
        "{stderr}"
    );
    assert!(stderr.contains("UWF_AGENT_CWD"), "{stderr}");
    assert!(c.calls().is_empty());
    Ok(())
}

/// Copies the files of `from` into `to`.
/// Waits (up to a minute) until no process's command line contains
/// `pattern` (`/proc/*/cmdline`): once the processes that could still act
/// are gone, checking that they did not act needs no sleep.
fn wait_no_process(pattern: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = || {
        std::fs::read_dir("/proc").is_ok_and(|procs| {
            procs.flatten().any(|p| {
                std::fs::read(p.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(pattern))
            })
        })
    };
    while running() {
        assert!(
            Instant::now() < deadline,
            "a process running {pattern:?} survived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

/// A storage root whose `config.yaml` binds every role to uwf-agent on a
/// mock, and a copy of the example repository examples/fix-test/.
struct Example {
    mock: MockLlm,
    root: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Example {
    fn new(extra: &str) -> BoxResult<Self> {
        let mock = MockLlm::start()?;
        let root = tempfile::tempdir()?;
        let work = tempfile::tempdir()?;
        copy_dir(&workspace().join("examples/fix-test"), work.path())?;
        std::fs::write(
            root.path().join("config.yaml"),
            config(
                &mock.base_url(),
                "openai",
                &format!(
                    "agents:\n  tools: {{ command: uwf-agent }}\ndefaultAgent: tools\n{extra}"
                ),
            ),
        )?;
        Ok(Self { mock, root, work })
    }

    /// `uwf --root <root> <args>` in the repository.
    fn uwf(&self, args: &[&str]) -> BoxResult<Output> {
        Ok(Command::new(uwf())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env(KEY_VAR, KEY)
            .env("UWF_LLM_MAX_ATTEMPTS", "1")
            .arg("--root")
            .arg(self.root.path())
            .args(args)
            .current_dir(self.work.path())
            .output()?)
    }
}

/// A step that reaches a limit fails like any step: uwf records the failed
/// attempt and its retry policy runs the role again.
#[test]
fn a_limit_fails_the_attempt_and_uwf_retries_it() -> TestResult {
    let ex = Example::new(
        "retries:\n  default: { max: 1, backoff: 10ms }\n\
         agentPolicy:\n  fix-test:\n    developer: { maxTurns: 1 }\n",
    )?;
    ex.mock
        .push(MockReply::tool_call("list_dir", json!({})))
        .push(MockReply::tool_call(
            "submit",
            json!({"testsPass": false, "filesChanged": [], "summary": "Nothing done."}),
        ))
        .push(MockReply::text(
            "---\napproved: true\ncomments: fine\n---\n",
        ));
    let wf = workspace().join("examples/fix-test.yaml");
    let out = ex.uwf(&["thread", "run", &wf.to_string_lossy(), "-p", "Try"])?;
    assert!(out.status.success(), "{}", real_cli::output_text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the turn limit was reached: 1 model calls"),
        "{stderr}"
    );
    assert!(stderr.contains("retry 1/1"), "{stderr}");
    let done: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(done["done"], true);
    let thread = done["thread"].as_str().ok_or("no thread")?;
    let show: Value = serde_json::from_slice(&ex.uwf(&["thread", "show", thread])?.stdout)?;
    assert_eq!(show["attempts"].as_array().map(Vec::len), Some(1), "{show}");
    assert_eq!(ex.mock.model_requests().len(), 3);
    Ok(())
}

/// The example: `uwf thread run examples/fix-test.yaml` in a copy of
/// examples/fix-test/, both roles on uwf-agent, the model scripted by
/// examples/mock-llm/fix-test.yaml.
#[test]
fn the_fix_test_example_runs_end_to_end() -> TestResult {
    let examples = workspace().join("examples");
    let script: Value = serde_yaml::from_str(&std::fs::read_to_string(
        examples.join("mock-llm/fix-test.yaml"),
    )?)?;
    let ex = Example::new(
        "agentPolicy:\n  fix-test:\n    developer: { allowCommands: [sh], maxTurns: 10 }\n    reviewer: { readOnly: true }\n",
    )?;
    let (mock, work) = (&ex.mock, &ex.work);
    for turn in script["turns"].as_array().ok_or("no turns")? {
        mock.push(MockReply::from_turn(turn)?);
    }
    let before = Command::new("sh")
        .arg("test.sh")
        .current_dir(work.path())
        .output()?;
    assert!(
        !before.status.success(),
        "the example's test must fail first"
    );
    let uwf = |args: &[&str]| ex.uwf(args);
    let wf = examples.join("fix-test.yaml");
    let out = uwf(&[
        "thread",
        "run",
        &wf.to_string_lossy(),
        "-p",
        "Make sh test.sh pass",
    ])?;
    assert!(out.status.success(), "{}", real_cli::output_text(&out));
    let done: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(done["done"], true);

    // The repository is fixed.
    let after = Command::new("sh")
        .arg("test.sh")
        .current_dir(work.path())
        .output()?;
    assert!(after.status.success(), "{}", real_cli::output_text(&after));
    assert!(std::fs::read_to_string(work.path().join("lib.sh"))?.contains("$(($1 + $2))"));

    // What uwf-agent told the model: the failing run, both files, the passing run.
    let calls = mock.model_requests();
    assert_eq!(
        calls.len(),
        7,
        "5 developer turns, 2 reviewer turns, no extraction"
    );
    let results = tool_messages(&calls[4]);
    let by_id = |id: &str| {
        results
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, c)| c.clone())
            .unwrap_or_default()
    };
    assert!(by_id("call_test1").contains("FAIL: add 2 3: got -1, expected 5"));
    assert!(by_id("call_test1").starts_with("exit status 1: $ sh test.sh\n"));
    assert!(by_id("call_read_test").contains(". ./lib.sh"));
    assert!(by_id("call_read_lib").contains("echo $(($1 - $2))"));
    assert_eq!(by_id("call_edit"), "edited lib.sh at line 5");
    assert!(
        by_id("call_test2").contains("exit status 0"),
        "{}",
        by_id("call_test2")
    );
    assert!(by_id("call_test2").contains("ok: add 2 3"));
    // The reviewer is read-only, and saw the developer's step.
    assert_eq!(
        tool_names(&calls[5]),
        ["read_file", "list_dir", "glob", "grep", "submit"]
    );
    let reviewer_task = calls[5].body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reviewer_task.contains("Review the fix: add() subtracted"),
        "{reviewer_task}"
    );

    // The thread: two steps by uwf-agent, their transcripts, shown by step-details.
    let thread = done["thread"].as_str().ok_or("no thread")?;
    let head = done["head"].as_str().ok_or("no head")?;
    let show = uwf(&["cas", "get", head])?;
    assert!(show.status.success());
    let out = uwf(&["thread", "read", thread])?;
    let read = String::from_utf8_lossy(&out.stdout);
    assert!(
        read.contains("agent activity: 6 tool calls in 13 turns"),
        "{read}"
    );
    assert!(read.contains("- `run_command: sh test.sh`"), "{read}");
    let head_node: Value = serde_json::from_slice(&show.stdout)?;
    let developer_step = head_node["payload"]["prev"].as_str().ok_or("no prev")?;
    let out = uwf(&["--format", "json", "thread", "step-details", developer_step])?;
    assert!(out.status.success(), "{}", real_cli::output_text(&out));
    let details: Value = serde_json::from_slice(&out.stdout)?;
    let content = &details["content"];
    assert_eq!(content["ended"], "submit");
    assert_eq!(content["modelCalls"], 5);
    let turns = content["turns"].as_array().ok_or("turns not expanded")?;
    assert_eq!(
        turns[2]["toolCalls"][0]["input"]["argv"],
        json!(["sh", "test.sh"])
    );
    assert_eq!(turns[4]["toolCalls"].as_array().map(Vec::len), Some(2));
    let reviewer: Value = serde_json::from_slice(
        &uwf(&["--format", "json", "thread", "step-details", head])?.stdout,
    )?;
    assert_eq!(reviewer["content"]["ended"], "answer");
    // The page of `thread view` shows the conversation: calls and results.
    let page = uwf(&["thread", "view", thread, "--html", "-"])?;
    assert!(page.status.success(), "{}", real_cli::output_text(&page));
    let html = String::from_utf8_lossy(&page.stdout);
    for shown in [
        "uwf-agent-detail",
        "edit_file",
        "FAIL: add 2 3: got -1, expected 5",
    ] {
        assert!(html.contains(shown), "{shown} is not on the page");
    }
    let verify = uwf(&["cas", "verify"])?;
    assert!(
        verify.status.success(),
        "{}",
        real_cli::output_text(&verify)
    );
    Ok(())
}
