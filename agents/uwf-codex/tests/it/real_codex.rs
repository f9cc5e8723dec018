//! `examples/solve-issue.yaml` with every role on `uwf-codex`, run by the
//! real `uwf` binary, with the **real** Codex CLI (0.169.0) talking to the
//! agent kit's mock server (OpenAI Responses API, SSE) on 127.0.0.1 — no
//! internet. The endpoint comes from a provider of `config.yaml`
//! (`uwf-codex --provider mock`), its key from an environment variable.
//!
//! codex comes from `CODEX_BIN` or `PATH`. The test is `#[ignore]`d in the
//! plain `cargo test`; `.ci/run`'s `codex` step installs Codex into
//! `target/codex` and runs it with `--include-ignored` and `CI=true`.
//! Without codex it fails under `CI=true` and otherwise passes after a loud
//! notice on stderr. Locally:
//!
//! ```sh
//! npm install --prefix target/codex @openai/codex@0.169.0
//! CODEX_BIN=$PWD/target/codex/node_modules/.bin/codex \
//!   cargo test -p uwf-codex --test it real_codex:: -- --include-ignored
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{Value, json};
use uwf_agent_kit::testing::{MockLlm, MockReply, real_cli};
use uwf_cas::{Cas, Hash};

type TestResult = Result<(), uwf_agent_kit::BoxError>;

const TASK: &str = "Validate the port number in the config parser (uwf-codex CI run).";

/// The API key the run uses: it must not end up anywhere uwf writes.
const SECRET: &str = "sk-uwf-codex-test-5ecret-0123456789";

const PLAN: &str = "---\nplan: Validate the port in parse_config\nsteps:\n  - add a range check\n  - add a test\n---\n\nCheck 1..=65535 and report the line.";
const DEV_1: &str = "---\nfilesChanged:\n  - port-check.txt\nsummary: Added the range check\n---\n\nThe parser now rejects port 0.";
const REVIEW_1: &str =
    "---\napproved: false\ncomments: Add a test for port 0\n---\n\nThe check is fine but untested.";
const DEV_2: &str =
    "---\nfilesChanged:\n  - port-check.txt\nsummary: Added the test for port 0\n---\n\nTested.";
const REVIEW_2: &str = "---\napproved: true\ncomments: LGTM\n---\n\nShip it.";

/// What the developer's first run asks Codex to run: it writes a file in
/// the working directory.
const COMMAND: &str = "printf 'port must be 1..=65535\\n' > port-check.txt";

const HOW_TO_RUN: &str = "npm install --prefix target/codex @openai/codex@0.169.0
CODEX_BIN=$PWD/target/codex/node_modules/.bin/codex cargo test -p uwf-codex --test it real_codex:: -- --include-ignored
(.ci/run does this in its `codex` step.)";

/// The variable holding the provider's key (config.yaml's `apiKeyEnv`).
const KEY_VAR: &str = "UWF_TEST_CODEX_KEY";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn uwf_codex() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_uwf-codex"))
}

/// The `uwf` binary next to `uwf-codex` (built if missing).
fn uwf() -> &'static Path {
    static UWF: OnceLock<PathBuf> = OnceLock::new();
    UWF.get_or_init(|| {
        real_cli::uwf_beside(&uwf_codex(), &workspace(), "uwf-codex")
            .unwrap_or_else(|e| panic!("cannot build uwf: {e}"))
    })
}

/// A throw-away world: storage root (with config.yaml naming the mock as
/// provider `mock`), home, Codex's home, and the scratch working directory
/// the agent edits.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    codex_home: PathBuf,
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
            codex_home: make("codex-home")?,
            work: make("work")?,
            _dir: dir,
        })
    }

    /// The offline Codex configuration (no update check, plugin sync,
    /// analytics or feedback) and the root's config.yaml with the mock as
    /// provider `mock`.
    fn configure(&self, base_url: &str) -> std::io::Result<()> {
        std::fs::write(
            self.codex_home.join("config.toml"),
            "check_for_update_on_startup = false\n\n[features]\nplugins = false\nremote_plugin = false\napps = false\n\n[analytics]\nenabled = false\n\n[feedback]\nenabled = false\n",
        )?;
        std::fs::write(
            self.root.join("config.yaml"),
            format!("providers:\n  mock:\n    baseUrl: {base_url}\n    apiKeyEnv: {KEY_VAR}\n"),
        )
    }

    /// `uwf --root <root> <args…>` in the work directory, with Codex kept
    /// offline and off the user's files, the key in [`KEY_VAR`].
    fn uwf(&self, codex: &Path, args: &[&str]) -> std::io::Result<Output> {
        let mut cmd = Command::new(uwf());
        cmd.arg("--root")
            .arg(&self.root)
            .args(args)
            .current_dir(&self.work)
            .env("CODEX_BIN", codex)
            .env("HOME", &self.home)
            .env("CODEX_HOME", &self.codex_home)
            .env(KEY_VAR, SECRET)
            .env("NO_COLOR", "1")
            // Debug logs on stderr, which the key must not reach either.
            .env("RUST_LOG", "debug")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        for var in [
            "UNCAGED_WORKFLOW_STORAGE_ROOT",
            "WORKFLOW_STORAGE_ROOT",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "CODEX_API_KEY",
            "UWF_CODEX_ARGS",
            "UWF_CODEX_MODEL",
            "UWF_CODEX_SANDBOX",
            "UWF_CODEX_PROVIDER",
            "UWF_CODEX_CWD",
            "UWF_CODEX_TIMEOUT",
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
    real_cli::load_steps(cas, head, agent, "codex-detail", "codex-turn")
}

#[test]
#[ignore = "needs the real Codex CLI (@openai/codex 0.169.0); .ci/run's codex step runs it with --include-ignored"]
fn solve_issue_with_every_role_on_real_codex() -> TestResult {
    let Some(codex) = real_cli::find_program("CODEX_BIN", "codex") else {
        real_cli::missing("real_codex", "CODEX_BIN", "codex", HOW_TO_RUN);
        return Ok(());
    };
    let world = World::new()?;
    let mock = MockLlm::start()?;
    world.configure(&mock.base_url())?;
    // One scripted reply per model call, in order; past the script, prose
    // without frontmatter, which would fail the step loudly.
    mock.reply_text(PLAN)
        .push(MockReply::tool_call(
            "exec_command",
            json!({ "cmd": COMMAND }),
        ))
        .reply_text(DEV_1)
        .reply_text(REVIEW_1)
        .reply_text(DEV_2)
        .reply_text(REVIEW_2);

    let example = workspace().join("examples/solve-issue.yaml");
    let agent = format!(
        "'{}' --provider mock --model mock-model",
        uwf_codex().display()
    );
    let out = world.uwf(
        &codex,
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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[codex] exec: "), "{stderr}");
    assert!(stderr.contains("port-check.txt"), "{stderr}");

    // Six Responses API calls, in role order, with the key; no chat
    // completion (the extraction's LLM fallback never ran).
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
        "Codex made {} model calls",
        calls.len()
    );
    assert!(
        mock.chat_requests().is_empty(),
        "an extraction call reached the mock"
    );
    for (req, role) in calls.iter().zip(expected_roles) {
        assert!(req.is_responses(), "{}", req.path);
        assert_eq!(req.body["model"], "mock-model");
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {SECRET}").as_str())
        );
        assert!(req.raw_body.contains(role), "expected a call for {role:?}");
        assert!(req.raw_body.contains(TASK), "the task is in the prompt");
    }
    assert_eq!(mock.pending(), 0);

    let cas = Cas::open(&world.root)?;
    let head = real_cli::hash_at(&result, "head")?;
    let steps = load_steps(&cas, head, &agent)?;
    let roles: Vec<&str> = steps.iter().map(|s| s.role.as_str()).collect();
    assert_eq!(
        roles,
        ["planner", "developer", "reviewer", "developer", "reviewer"]
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
        assert!(d["threadId"].as_str().is_some_and(|s| !s.is_empty()), "{d}");
        assert_eq!(d["transcript"], "rollout", "{d}");
        assert_eq!(d["model"], "mock-model", "{d}");
        assert!(
            d["usage"]["input_tokens"].as_u64().is_some_and(|n| n > 0),
            "{d}"
        );
        assert_eq!(d["turnCount"].as_u64(), Some(step.turns.len() as u64));
        let (_, first) = &step.turns[0];
        assert_eq!(first["role"], "user");
        let prompt = first["text"].as_str().unwrap_or_default();
        assert!(prompt.contains(TASK), "{prompt}");
        assert!(prompt.contains("Deliverable format"), "{prompt}");
        let (_, last) = step.turns.last().ok_or("no turns")?;
        assert_eq!(last["role"], "assistant");
        assert_eq!(last["text"], answer);
    }
    for i in [0, 2, 3, 4] {
        assert_eq!(steps[i].turns.len(), 2, "step {i}: {:?}", steps[i].detail);
    }
    let dev = &steps[1].turns;
    let kinds: Vec<&str> = dev
        .iter()
        .map(|(_, t)| t["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["user", "assistant", "tool", "assistant"]);
    let call = &dev[1].1["toolCalls"][0];
    assert_eq!(call["name"], "exec_command");
    assert_eq!(call["input"]["cmd"], COMMAND);
    assert_eq!(dev[2].1["toolResults"][0]["toolUseId"], call["id"]);
    let prompt = steps[3].turns[0].1["text"].as_str().unwrap_or_default();
    assert!(prompt.contains("Add a test for port 0"), "{prompt}");

    let walk = world.uwf(&codex, &["cas", "walk", &head.to_string()])?;
    assert!(walk.status.success(), "{}", text(&walk));
    let walked = String::from_utf8_lossy(&walk.stdout);
    for step in &steps {
        for (t, _) in &step.turns {
            assert!(walked.contains(&t.to_string()), "cas walk misses turn {t}");
        }
    }
    let verify = world.uwf(&codex, &["cas", "verify"])?;
    assert!(verify.status.success(), "{}", text(&verify));

    // The key is nowhere uwf wrote or printed.
    assert_eq!(
        real_cli::files_containing(&world.root, SECRET)?,
        Vec::<PathBuf>::new()
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains(SECRET));
    assert!(!stderr.contains(SECRET));
    Ok(())
}

#[test]
fn without_codex_or_a_key_the_thread_is_unchanged() -> TestResult {
    let world = World::new()?;
    world.configure("http://127.0.0.1:9/v1")?;
    let example = workspace().join("examples/solve-issue.yaml");
    let nowhere = Path::new("/nonexistent/codex");
    let start = world.uwf(
        nowhere,
        &["thread", "start", &example.to_string_lossy(), "-p", TASK],
    )?;
    assert!(start.status.success(), "{}", text(&start));
    let started: Value = serde_json::from_slice(&start.stdout)?;
    let thread = started["thread"].as_str().ok_or("no thread id")?.to_owned();

    let agent = format!("'{}' --provider mock", uwf_codex().display());
    let out = world.uwf(nowhere, &["thread", "step", &thread, "--agent", &agent])?;
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("codex is not installed"), "{stderr}");
    assert!(stderr.contains("@openai/codex@0.169.0"), "{stderr}");

    // The provider's key variable is empty: refused before codex runs.
    let mut cmd = Command::new(uwf());
    cmd.arg("--root")
        .arg(&world.root)
        .args(["thread", "step", &thread, "--agent", &agent])
        .current_dir(&world.work)
        .env("CODEX_BIN", "true")
        .env("HOME", &world.home)
        .env("CODEX_HOME", &world.codex_home)
        .env_remove(KEY_VAR)
        .env_remove("UNCAGED_WORKFLOW_STORAGE_ROOT");
    let out = cmd.output()?;
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("its key variable \"{KEY_VAR}\" is not set")),
        "{stderr}"
    );

    let cas = Cas::open(&world.root)?;
    assert_eq!(cas.list_by_type(cas.types().step_node)?, Vec::<Hash>::new());
    Ok(())
}
