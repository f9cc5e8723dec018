//! `examples/solve-issue.yaml` with every role on `uwf-hermes`, run by the
//! real `uwf` binary, with the **real** hermes CLI (hermes-agent 0.19.0)
//! talking to the agent kit's mock LLM server on 127.0.0.1 — no internet.
//!
//! hermes comes from `HERMES_BIN` or `PATH`. The test is `#[ignore]`d in the
//! plain `cargo test`; `.ci/run`'s `hermes` step installs hermes into
//! `target/hermes-venv` and runs it with `--include-ignored` and `CI=true`.
//! Without hermes it fails under `CI=true` and otherwise passes after a loud
//! notice on stderr. Locally:
//!
//! ```sh
//! python3 -m venv target/hermes-venv && target/hermes-venv/bin/pip install hermes-agent==0.19.0
//! HERMES_BIN=$PWD/target/hermes-venv/bin/hermes \
//!   cargo test -p uwf-hermes --test real_hermes -- --include-ignored
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{Value, json};
use uwf_agent_kit::testing::{MockLlm, real_cli};
use uwf_cas::{Cas, Hash};

type TestResult = Result<(), uwf_agent_kit::BoxError>;

const HERMES_VERSION: &str = "0.19.0";

const TASK: &str = "Validate the port number in the config parser (uwf-hermes CI run).";

const PLAN: &str = "---\nplan: Validate the port in parse_config\nsteps:\n  - add a range check\n  - add a test\n---\n\nCheck 1..=65535 and report the line.";
const DEV_1: &str = "---\nfilesChanged:\n  - src/config.rs\nsummary: Added the range check\n---\n\nThe parser now rejects port 0.";
const REVIEW_1: &str =
    "---\napproved: false\ncomments: Add a test for port 0\n---\n\nThe check is fine but untested.";
const DEV_2: &str = "---\nfilesChanged:\n  - src/config.rs\n  - tests/config.rs\nsummary: Added the test for port 0\n---\n\nTested.";
const REVIEW_2: &str = "---\napproved: true\ncomments: LGTM\n---\n\nShip it.";

/// What the developer's first run asks hermes to run in the terminal.
const ECHO: &str = "echo uwf-hermes-was-here";

/// The repository root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const HOW_TO_RUN: &str = "python3 -m venv target/hermes-venv && target/hermes-venv/bin/pip install hermes-agent==0.19.0
HERMES_BIN=$PWD/target/hermes-venv/bin/hermes cargo test -p uwf-hermes --test real_hermes -- --include-ignored
(.ci/run does this in its `hermes` step.)";

/// `uwf-hermes` as cargo built it for this test.
fn uwf_hermes() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_uwf-hermes"))
}

/// The `uwf` binary next to `uwf-hermes` (built if missing).
fn uwf() -> &'static Path {
    static UWF: OnceLock<PathBuf> = OnceLock::new();
    UWF.get_or_init(|| {
        real_cli::uwf_beside(&uwf_hermes(), &workspace(), "uwf-hermes")
            .unwrap_or_else(|e| panic!("cannot build uwf: {e}"))
    })
}

/// The offline hermes home of README §3: config.yaml pointing at the mock,
/// and a fresh update-check cache (no PyPI lookup).
fn hermes_home(dir: &Path, base_url: &str) -> std::io::Result<()> {
    let config = format!(
        r#"model:
  provider: custom
  default: mock-model
  base_url: {base_url}
  api_key: mock-key
  context_length: 131072
agent:
  api_max_retries: 1
  environment_probe: false
  verify_on_stop: false
  disabled_toolsets: [clarify]
display:
  show_reasoning: false
  streaming: false
  inline_diffs: false
security:
  tirith_enabled: false
  allow_lazy_installs: false
auxiliary:
  title_generation:
    enabled: false
memory:
  nudge_interval: 0
skills:
  creation_nudge_interval: 0
curator:
  enabled: false
model_catalog:
  enabled: false
lsp:
  enabled: false
clarify:
  timeout: 5
"#
    );
    std::fs::write(dir.join("config.yaml"), config)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    std::fs::write(
        dir.join(".update_check"),
        format!("{{\"ts\": {now}, \"behind\": 0, \"rev\": null, \"ver\": \"{HERMES_VERSION}\"}}\n"),
    )
}

/// A throw-away world: storage root, hermes home, home, working directory.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    hermes_home: PathBuf,
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
            hermes_home: make("hermes-home")?,
            home: make("home")?,
            work: make("work")?,
            _dir: dir,
        })
    }

    /// `uwf --root <root> <args…>` in the work directory, with an
    /// environment that keeps hermes offline and off the user's files.
    fn uwf(&self, hermes_bin: &Path, args: &[&str]) -> Result<Output, std::io::Error> {
        let mut cmd = Command::new(uwf());
        cmd.arg("--root")
            .arg(&self.root)
            .args(args)
            .current_dir(&self.work)
            .env("HERMES_BIN", hermes_bin)
            .env("HERMES_HOME", &self.hermes_home)
            // The terminal tool sources ~/.bashrc & co.: use an empty home.
            .env("HOME", &self.home)
            .env("NO_COLOR", "1")
            // hermes' HTTP client honours HTTP(S)_PROXY; the mock is local.
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        for var in [
            "UNCAGED_WORKFLOW_STORAGE_ROOT",
            "WORKFLOW_STORAGE_ROOT",
            "UWF_HERMES_ARGS",
            "UWF_HERMES_MAX_TURNS",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "OPENROUTER_API_KEY",
            "ANTHROPIC_API_KEY",
            "RUST_LOG",
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
    real_cli::load_steps(cas, head, agent, "hermes-detail", "hermes-turn")
}

#[test]
#[ignore = "needs the real hermes (hermes-agent 0.19.0); .ci/run's hermes step runs it with --include-ignored"]
fn solve_issue_with_every_role_on_real_hermes() -> TestResult {
    let Some(hermes) = real_cli::find_program("HERMES_BIN", "hermes") else {
        real_cli::missing("real_hermes", "HERMES_BIN", "hermes", HOW_TO_RUN);
        return Ok(());
    };
    let world = World::new()?;
    let mock = MockLlm::bind(0, Some(&world.hermes_home.join("mock-requests.jsonl")))?;
    hermes_home(&world.hermes_home, &mock.base_url())?;

    // One scripted reply per model call, in order: hermes makes exactly one
    // streaming call per plain answer with the offline config, plus one per
    // tool call. Past the script, the default reply is prose (no
    // frontmatter), which would fail the step loudly (no extraction model).
    mock.reply_text(PLAN)
        .reply_tool_call("terminal", json!({ "command": ECHO }))
        .reply_text(DEV_1)
        .reply_text(REVIEW_1)
        .reply_text(DEV_2)
        .reply_text(REVIEW_2);

    let example = workspace().join("examples/solve-issue.yaml");
    let agent = format!("'{}' --max-turns 4", uwf_hermes().display());
    let out = world.uwf(
        &hermes,
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

    // The mock: six streaming agent calls with tools, in role order, and
    // not a single extraction call (the frontmatter fast path did it all).
    let chats = mock.chat_requests();
    let expected_roles = [
        "You are a planning agent",
        "You are a developer agent",
        "You are a developer agent",
        "You are a code reviewer",
        "You are a developer agent",
        "You are a code reviewer",
    ];
    assert_eq!(
        chats.len(),
        expected_roles.len(),
        "hermes made {} model calls: {:#?}",
        chats.len(),
        chats
            .iter()
            .map(|r| r
                .last_user_message()
                .map(|m| m.chars().take(120).collect::<String>()))
            .collect::<Vec<_>>()
    );
    for (req, role) in chats.iter().zip(expected_roles) {
        assert!(req.is_stream(), "hermes streams every agent call");
        assert!(req.body["tools"].is_array(), "agent calls carry tools");
        assert!(
            req.body.get("response_format").is_none(),
            "an extraction call reached the mock: {}",
            req.raw_body
        );
        let user = req.last_user_message().unwrap_or_default();
        assert!(
            user.contains(role),
            "expected a call for {role:?}, got {user:.300}"
        );
        assert!(user.contains(TASK), "the task is in the prompt");
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
        assert_eq!(d["model"], "mock-model");
        assert!(d["duration"].as_u64().is_some_and(|ms| ms > 0), "{d}");
        assert_eq!(d["turnCount"].as_u64(), Some(step.turns.len() as u64));
        let (_, first) = &step.turns[0];
        assert_eq!(first["role"], "user");
        assert_eq!(first["index"], 0);
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
    // Plain answers: the prompt and the answer.
    for i in [0, 2, 3, 4] {
        assert_eq!(steps[i].turns.len(), 2, "step {i}: {:?}", steps[i].detail);
    }
    // The developer's first run: prompt, tool call, tool result, answer.
    let dev = &steps[1].turns;
    let kinds: Vec<&str> = dev
        .iter()
        .map(|(_, t)| t["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["user", "assistant", "tool", "assistant"]);
    let call = &dev[1].1["toolCalls"][0];
    assert_eq!(call["name"], "terminal");
    assert_eq!(call["input"]["command"], ECHO);
    let result = &dev[2].1["toolResults"][0];
    let result_text = result["content"].as_str().unwrap_or_default();
    assert!(result_text.contains("uwf-hermes-was-here"), "{result_text}");
    assert_eq!(result["name"], "terminal");
    // The second developer run saw the review in its history.
    let prompt = steps[3].turns[0].1["text"].as_str().unwrap_or_default();
    assert!(prompt.contains("Add a test for port 0"), "{prompt}");

    // `uwf cas walk` from the head reaches every turn node.
    let walk = world.uwf(&hermes, &["cas", "walk", &head.to_string()])?;
    assert!(walk.status.success(), "{}", text(&walk));
    let walked = String::from_utf8_lossy(&walk.stdout);
    for step in &steps {
        for (t, _) in &step.turns {
            assert!(walked.contains(&t.to_string()), "cas walk misses turn {t}");
        }
    }
    let verify = world.uwf(&hermes, &["cas", "verify"])?;
    assert!(verify.status.success(), "{}", text(&verify));
    Ok(())
}

#[test]
fn without_hermes_the_thread_is_unchanged() -> TestResult {
    let world = World::new()?;
    let example = workspace().join("examples/solve-issue.yaml");
    let start = world.uwf(
        Path::new("/nonexistent/hermes"),
        &["thread", "start", &example.to_string_lossy(), "-p", TASK],
    )?;
    assert!(start.status.success(), "{}", text(&start));
    let started: Value = serde_json::from_slice(&start.stdout)?;
    let thread = started["thread"].as_str().ok_or("no thread id")?.to_owned();
    let show = |w: &World| -> Result<Value, uwf_agent_kit::BoxError> {
        let out = w.uwf(
            Path::new("/nonexistent/hermes"),
            &["thread", "show", &thread],
        )?;
        assert!(out.status.success(), "{}", text(&out));
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let before = show(&world)?;

    let agent = format!("'{}'", uwf_hermes().display());
    let out = world.uwf(
        Path::new("/nonexistent/hermes"),
        &["thread", "step", &thread, "--agent", &agent],
    )?;
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("hermes is not installed"), "{stderr}");
    assert!(stderr.contains("/nonexistent/hermes"), "{stderr}");
    assert!(
        stderr.contains("pip install hermes-agent==0.19.0"),
        "{stderr}"
    );

    let after = show(&world)?;
    // The failed attempt is recorded (`attempts`); the thread itself is as it was.
    assert_eq!(before["head"], after["head"], "the thread moved");
    assert_eq!(after["done"], false);
    assert_eq!(after["attempts"][0]["role"], "planner", "{after}");
    let cas = Cas::open(&world.root)?;
    assert_eq!(cas.list_by_type(cas.types().step_node)?, Vec::<Hash>::new());
    Ok(())
}
