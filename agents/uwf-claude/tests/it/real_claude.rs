//! `examples/solve-issue.yaml` with every role on `uwf-claude`, run by the
//! real `uwf` binary, with the **real** Claude Code CLI (2.1.328) talking to
//! the agent kit's mock server (Anthropic Messages API, SSE) on 127.0.0.1 —
//! no internet.
//!
//! claude comes from `CLAUDE_BIN` or `PATH`. The test is `#[ignore]`d in
//! the plain `cargo test`; `.ci/run`'s `claude` step installs Claude Code
//! into `target/claude-code` and runs it with `--include-ignored` and
//! `CI=true`. Without claude it fails under `CI=true` and otherwise passes
//! after a loud notice on stderr. Locally:
//!
//! ```sh
//! npm install --prefix target/claude-code @anthropic-ai/claude-code@2.1.328
//! CLAUDE_BIN=$PWD/target/claude-code/node_modules/.bin/claude \
//!   cargo test -p uwf-claude --test real_claude -- --include-ignored
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{Value, json};
use uwf_agent_kit::testing::{MockLlm, MockReply, real_cli};
use uwf_cas::{Cas, Hash};

type TestResult = Result<(), uwf_agent_kit::BoxError>;

const TASK: &str = "Validate the port number in the config parser (uwf-claude CI run).";

/// The API key the run uses: it must not end up anywhere uwf writes.
const SECRET: &str = "sk-ant-uwf-test-5ecret-0123456789";

const PLAN: &str = "---\nplan: Validate the port in parse_config\nsteps:\n  - add a range check\n  - add a test\n---\n\nCheck 1..=65535 and report the line.";
const DEV_1: &str = "---\nfilesChanged:\n  - port-check.txt\nsummary: Added the range check\n---\n\nThe parser now rejects port 0.";
const REVIEW_1: &str =
    "---\napproved: false\ncomments: Add a test for port 0\n---\n\nThe check is fine but untested.";
const DEV_2: &str =
    "---\nfilesChanged:\n  - port-check.txt\nsummary: Added the test for port 0\n---\n\nTested.";
const REVIEW_2: &str = "---\napproved: true\ncomments: LGTM\n---\n\nShip it.";

/// What the developer's first run asks Claude Code to run: it writes a
/// file in the working directory.
const COMMAND: &str = "printf 'port must be 1..=65535\\n' > port-check.txt";

const HOW_TO_RUN: &str = "npm install --prefix target/claude-code @anthropic-ai/claude-code@2.1.328
CLAUDE_BIN=$PWD/target/claude-code/node_modules/.bin/claude cargo test -p uwf-claude --test real_claude -- --include-ignored
(.ci/run does this in its `claude` step.)";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn uwf_claude() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_uwf-claude"))
}

/// The `uwf` binary next to `uwf-claude` (built if missing).
fn uwf() -> &'static Path {
    static UWF: OnceLock<PathBuf> = OnceLock::new();
    UWF.get_or_init(|| {
        real_cli::uwf_beside(&uwf_claude(), &workspace(), "uwf-claude")
            .unwrap_or_else(|e| panic!("cannot build uwf: {e}"))
    })
}

/// A throw-away world: storage root, home (Claude Code's ~/.claude), and
/// the scratch working directory the agent edits.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    work: PathBuf,
}

impl World {
    fn new() -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let make = |name: &str| -> std::io::Result<PathBuf> {
            let p = dir.path().join(name);
            std::fs::create_dir_all(&p)?;
            Ok(p)
        };
        Ok(Self {
            root: make("root")?,
            home: make("home")?,
            work: make("work")?,
            _dir: dir,
        })
    }

    /// `uwf --root <root> <args…>` in the work directory, with Claude Code
    /// pointed at the mock and kept offline and off the user's files.
    fn uwf(&self, claude: &Path, base_url: &str, args: &[&str]) -> std::io::Result<Output> {
        let mut cmd = Command::new(uwf());
        cmd.arg("--root")
            .arg(&self.root)
            .args(args)
            .current_dir(&self.work)
            .env("CLAUDE_BIN", claude)
            .env("HOME", &self.home)
            .env("ANTHROPIC_BASE_URL", base_url)
            .env("ANTHROPIC_API_KEY", SECRET)
            .env("DISABLE_TELEMETRY", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "1")
            .env("NO_COLOR", "1")
            // Debug logs on stderr, which the key must not reach either.
            .env("RUST_LOG", "debug")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        for var in [
            "UNCAGED_WORKFLOW_STORAGE_ROOT",
            "WORKFLOW_STORAGE_ROOT",
            "CLAUDE_CONFIG_DIR",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "UWF_CLAUDE_ARGS",
            "UWF_CLAUDE_MODEL",
            "UWF_CLAUDE_MAX_TURNS",
            "UWF_CLAUDE_PROVIDER",
            "UWF_CLAUDE_CWD",
            "UWF_CLAUDE_ALLOWED_TOOLS",
            "UWF_CLAUDE_PERMISSION_MODE",
            "OPENAI_API_KEY",
        ] {
            cmd.env_remove(var);
        }
        cmd.output()
    }
}

fn text(out: &Output) -> String {
    real_cli::output_text(out)
}

fn load_steps(
    cas: &Cas,
    head: Hash,
    agent: &str,
) -> Result<Vec<real_cli::Step>, uwf_agent_kit::BoxError> {
    real_cli::load_steps(cas, head, agent, "claude-detail", "claude-turn")
}

#[test]
#[ignore = "needs the real Claude Code (@anthropic-ai/claude-code 2.1.328); .ci/run's claude step runs it with --include-ignored"]
fn solve_issue_with_every_role_on_real_claude() -> TestResult {
    let Some(claude) = real_cli::find_program("CLAUDE_BIN", "claude") else {
        real_cli::missing("real_claude", "CLAUDE_BIN", "claude", HOW_TO_RUN);
        return Ok(());
    };
    let world = World::new()?;
    let mock = MockLlm::start()?;
    // One scripted reply per model call, in order. Past the script, the
    // default reply is prose (no frontmatter), which would fail the step
    // loudly (no extraction model is configured).
    mock.reply_text(PLAN)
        .push(MockReply::tool_call(
            "Bash",
            json!({ "command": COMMAND, "description": "Record the port rule" }),
        ))
        .reply_text(DEV_1)
        .reply_text(REVIEW_1)
        .reply_text(DEV_2)
        .reply_text(REVIEW_2);
    let base_url = format!("http://{}", mock.addr());

    let example = workspace().join("examples/solve-issue.yaml");
    let agent = format!("'{}' --max-turns 4", uwf_claude().display());
    let out = world.uwf(
        &claude,
        &base_url,
        &[
            "thread",
            "run",
            &example.to_string_lossy(),
            "-p",
            TASK,
            "--agent",
            &agent,
            "--timeout",
            "180s",
        ],
    )?;
    assert!(
        out.status.success(),
        "uwf thread run failed: {}",
        text(&out)
    );
    let result: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("uwf printed no JSON ({e}): {}", text(&out)))?;
    assert_eq!(result["done"], true, "{}", text(&out));

    // The tool call really ran, in the scratch working directory.
    let written = std::fs::read_to_string(world.work.join("port-check.txt"))?;
    assert_eq!(written, "port must be 1..=65535\n");

    // Live progress: the tool call showed on stderr while the step ran.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("[claude] turn 1 · Bash: {COMMAND}")),
        "{stderr}"
    );

    // The mock: six Anthropic Messages calls, in role order, and not a
    // single chat completion (the extraction's LLM fallback never ran).
    let calls = mock.model_requests();
    let expected_roles = [
        "You are a planning agent",
        "You are a developer agent",
        "You are a developer agent",
        "You are a code reviewer",
        "You are a developer agent",
        "You are a code reviewer",
    ];
    assert_eq!(
        calls.len(),
        expected_roles.len(),
        "Claude Code made {} model calls",
        calls.len()
    );
    assert!(
        mock.chat_requests().is_empty(),
        "an extraction call reached the mock"
    );
    for (req, role) in calls.iter().zip(expected_roles) {
        assert!(req.is_messages(), "{}", req.path);
        assert!(req.is_stream(), "Claude Code streams every call");
        assert_eq!(req.header("x-api-key"), Some(SECRET));
        assert!(req.raw_body.contains(role), "expected a call for {role:?}");
        assert!(req.raw_body.contains(TASK), "the task is in the prompt");
    }
    assert_eq!(mock.pending(), 0);

    // The thread, step by step.
    let cas = Cas::open(&world.root)?;
    let head = real_cli::hash_at(&result, "head")?;
    let steps = load_steps(&cas, head, &agent)?;
    let roles: Vec<&str> = steps.iter().map(|s| s.role.as_str()).collect();
    assert_eq!(
        roles,
        ["planner", "developer", "reviewer", "developer", "reviewer"]
    );
    assert_eq!(
        steps[0].output["steps"],
        json!(["add a range check", "add a test"])
    );
    assert_eq!(
        steps[1].output,
        json!({"filesChanged": ["port-check.txt"], "summary": "Added the range check"})
    );
    assert_eq!(
        steps[2].output,
        json!({"approved": false, "comments": "Add a test for port 0"})
    );
    assert_eq!(
        steps[4].output,
        json!({"approved": true, "comments": "LGTM"})
    );

    let answers = [PLAN, DEV_1, REVIEW_1, DEV_2, REVIEW_2];
    for (step, answer) in steps.iter().zip(answers) {
        let d = &step.detail;
        assert!(
            d["sessionId"].as_str().is_some_and(|s| !s.is_empty()),
            "{d}"
        );
        assert_eq!(d["transcript"], "session-file", "{d}");
        assert!(d["duration"].as_u64().is_some_and(|ms| ms > 0), "{d}");
        assert!(d["costUsd"].is_number(), "{d}");
        assert_eq!(d["turnCount"].as_u64(), Some(step.turns.len() as u64));
        let (_, first) = &step.turns[0];
        assert_eq!(first["role"], "user");
        let prompt = first["text"].as_str().unwrap_or_default();
        assert!(prompt.contains(TASK), "{prompt}");
        assert!(prompt.contains("Deliverable format"), "{prompt}");
        let (_, last) = step.turns.last().ok_or("no turns")?;
        assert_eq!(last["role"], "assistant");
        assert_eq!(last["text"], answer);
        for (i, (_, t)) in step.turns.iter().enumerate() {
            assert_eq!(t["index"], i);
        }
    }
    for i in [0, 2, 3, 4] {
        assert_eq!(steps[i].turns.len(), 2, "step {i}: {:?}", steps[i].detail);
        assert_eq!(steps[i].detail["numTurns"], 1, "{:?}", steps[i].detail);
    }
    // The developer's first run: prompt, tool call, tool result, answer.
    let dev = &steps[1].turns;
    let kinds: Vec<&str> = dev
        .iter()
        .map(|(_, t)| t["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["user", "assistant", "user", "assistant"]);
    let call = &dev[1].1["toolCalls"][0];
    assert_eq!(call["name"], "Bash");
    assert_eq!(call["input"]["command"], COMMAND);
    let tool_result = &dev[2].1["toolResults"][0];
    assert_eq!(tool_result["toolUseId"], call["id"]);
    assert_eq!(tool_result["isError"], false);
    assert_eq!(steps[1].detail["numTurns"], 2);
    // The second developer run saw the review in its history.
    let prompt = steps[3].turns[0].1["text"].as_str().unwrap_or_default();
    assert!(prompt.contains("Add a test for port 0"), "{prompt}");

    // `thread read` shows what Claude Code did in the developer's step.
    let thread = result["thread"].as_str().ok_or("no thread id")?;
    let read = world.uwf(&claude, &base_url, &["thread", "read", thread])?;
    assert!(read.status.success(), "{}", text(&read));
    let read = String::from_utf8_lossy(&read.stdout);
    assert_eq!(read.matches("agent activity:").count(), 1, "{read}");
    assert!(
        read.contains("agent activity: 1 tool call in 4 turns"),
        "{read}"
    );
    assert!(
        read.contains(&format!("- `Bash: {}`", COMMAND.replace('`', "'"))),
        "{read}"
    );

    // `uwf cas walk` from the head reaches every turn node; the store is sound.
    let walk = world.uwf(&claude, &base_url, &["cas", "walk", &head.to_string()])?;
    assert!(walk.status.success(), "{}", text(&walk));
    let walked = String::from_utf8_lossy(&walk.stdout);
    for step in &steps {
        for (t, _) in &step.turns {
            assert!(walked.contains(&t.to_string()), "cas walk misses turn {t}");
        }
    }
    let verify = world.uwf(&claude, &base_url, &["cas", "verify"])?;
    assert!(verify.status.success(), "{}", text(&verify));

    // The key is nowhere uwf wrote or printed.
    assert_eq!(
        real_cli::files_containing(&world.root, SECRET)?,
        Vec::<PathBuf>::new()
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains(SECRET));
    assert!(!stderr.contains(SECRET));
    assert!(
        stderr.contains("transcript stored"),
        "the debug log was on: {stderr}"
    );
    Ok(())
}

#[test]
#[ignore = "needs the real Claude Code; .ci/run's claude step runs it"]
fn an_api_error_through_a_provider_leaves_the_thread_unchanged() -> TestResult {
    let Some(claude) = real_cli::find_program("CLAUDE_BIN", "claude") else {
        real_cli::missing("real_claude", "CLAUDE_BIN", "claude", HOW_TO_RUN);
        return Ok(());
    };
    let world = World::new()?;
    let mock = MockLlm::start()?;
    mock.set_default(MockReply::error(500, "scripted outage"));
    // The endpoint comes from config.yaml (`--provider mock`, its baseUrl
    // with `/v1`), overriding the dead ANTHROPIC_BASE_URL of the
    // environment; the key from the variable the provider names.
    std::fs::write(
        world.root.join("config.yaml"),
        format!(
            "providers:\n  mock:\n    baseUrl: {}\n    apiKeyEnv: ANTHROPIC_API_KEY\n",
            mock.base_url()
        ),
    )?;
    let dead = "http://127.0.0.1:9";
    let example = workspace().join("examples/solve-issue.yaml");
    let start = world.uwf(
        &claude,
        dead,
        &["thread", "start", &example.to_string_lossy(), "-p", TASK],
    )?;
    assert!(start.status.success(), "{}", text(&start));
    let started: Value = serde_json::from_slice(&start.stdout)?;
    let thread = started["thread"].as_str().ok_or("no thread id")?.to_owned();
    let agent = format!("'{}' --provider mock", uwf_claude().display());
    let out = world.uwf(
        &claude,
        dead,
        &[
            "thread",
            "step",
            &thread,
            "--agent",
            &agent,
            "--timeout",
            "120s",
        ],
    )?;
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Claude Code failed"), "{stderr}");
    assert!(stderr.contains("scripted outage"), "{stderr}");
    assert!(!stderr.contains(SECRET));
    let calls = mock.model_requests();
    assert!(
        !calls.is_empty(),
        "Claude Code did not reach the provider's endpoint"
    );
    for req in &calls {
        assert_eq!(req.path, "/v1/messages");
        assert_eq!(req.header("x-api-key"), Some(SECRET));
    }
    let cas = Cas::open(&world.root)?;
    assert_eq!(cas.list_by_type(cas.types().step_node)?, Vec::<Hash>::new());
    assert_eq!(
        real_cli::files_containing(&world.root, SECRET)?,
        Vec::<PathBuf>::new()
    );
    Ok(())
}

#[test]
fn without_claude_or_a_key_the_thread_is_unchanged() -> TestResult {
    let world = World::new()?;
    let example = workspace().join("examples/solve-issue.yaml");
    let nowhere = Path::new("/nonexistent/claude");
    let start = world.uwf(
        nowhere,
        "http://127.0.0.1:9",
        &["thread", "start", &example.to_string_lossy(), "-p", TASK],
    )?;
    assert!(start.status.success(), "{}", text(&start));
    let started: Value = serde_json::from_slice(&start.stdout)?;
    let thread = started["thread"].as_str().ok_or("no thread id")?.to_owned();
    let agent = format!("'{}'", uwf_claude().display());

    let out = world.uwf(
        nowhere,
        "http://127.0.0.1:9",
        &["thread", "step", &thread, "--agent", &agent],
    )?;
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("claude is not installed"), "{stderr}");
    assert!(stderr.contains("/nonexistent/claude"), "{stderr}");
    assert!(
        stderr.contains("@anthropic-ai/claude-code@2.1.328"),
        "{stderr}"
    );

    // No key at all (and no login in the throw-away home): refused before
    // claude runs (`true` would otherwise "succeed" with no answer).
    let mut cmd = Command::new(uwf());
    cmd.arg("--root")
        .arg(&world.root)
        .args(["thread", "step", &thread, "--agent", &agent])
        .current_dir(&world.work)
        .env("CLAUDE_BIN", "true")
        .env("HOME", &world.home);
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
        "CLAUDE_CONFIG_DIR",
        "UNCAGED_WORKFLOW_STORAGE_ROOT",
        "UWF_CLAUDE_PROVIDER",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.output()?;
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no API key for Claude Code"), "{stderr}");

    let cas = Cas::open(&world.root)?;
    assert_eq!(cas.list_by_type(cas.types().step_node)?, Vec::<Hash>::new());
    Ok(())
}
