//! Test support (feature `testing`): a throw-away storage root holding a
//! small workflow, with helpers to start threads and move their heads the
//! way `uwf` would.
//!
//! The workflow, [`WORKFLOW_NAME`]:
//!
//! ```text
//! $START ─▶ planner ─▶ reviewer ─┬─ notApproved ─▶ planner   (edge prompt "Address the review: {{comments}}")
//!              (edge prompt       └──────────────▶ $END
//!               "Review the plan.")
//! ```
//!
//! * `planner` outputs `{plan: string, steps: [string]}` (both required);
//! * `reviewer` outputs `{approved: boolean, comments: string}` (both
//!   required); `notApproved` is `steps[-1].output.approved = false`.
//!
//! The YAML is [`WORKFLOW_YAML`].
//!
//! [`MockLlm`] is a scripted OpenAI-compatible server on loopback, for
//! everything that calls an LLM (the extraction's layer 2, `uwf-llm`,
//! hermes), which also speaks the Anthropic Messages API (Claude Code) and
//! the OpenAI Responses API (Codex); [`real_cli`] helps tests that run a
//! real agent CLI against it; [`Fixture::write_config`] with [`MockLlm::config`] points a
//! storage root at it. [`Fixture::drive`] runs a thread to its end the way
//! `uwf thread run` would.

mod mock_llm;
mod mock_wire;

use std::path::Path;

use uwf_cas::{Cas, Hash};
use uwf_engine::{Engine, NoProgress, Progress, StepOptions};
use uwf_protocol::{StartNodePayload, ThreadId, WorkflowConfig};

use crate::{BoxError, KitError};

pub use mock_llm::{EXHAUSTED, MOCK_MODEL, MockBody, MockLlm, MockReply, MockRequest, Reply};

/// Name of the fixture's workflow.
pub const WORKFLOW_NAME: &str = "plan-review";

/// Edge prompt of `planner → reviewer`.
pub const REVIEW_PROMPT: &str = "Review the plan.";

/// Edge prompt template of `reviewer → planner` (when not approved); the
/// moderator renders `{{comments}}` from the review.
pub const REWORK_PROMPT: &str = "Address the review: {{comments}}";

/// The fixture workflow, as a `uwf workflow put` file.
pub const WORKFLOW_YAML: &str = r#"name: plan-review
description: Plan, then review until approved.
roles:
  planner:
    description: Plans
    systemPrompt: You are a planning agent.
    outputSchema:
      title: plan
      type: object
      required: [plan, steps]
      properties:
        plan: { type: string }
        steps: { type: array, items: { type: string } }
  reviewer:
    description: Reviews
    systemPrompt: You are a reviewer.
    outputSchema:
      title: review
      type: object
      required: [approved, comments]
      properties:
        approved: { type: boolean }
        comments: { type: string }
conditions:
  notApproved:
    description: The reviewer rejected the plan
    expression: steps[-1].output.approved = false
graph:
  $START:
    - { role: planner, condition: null }
  planner:
    - { role: reviewer, condition: null, prompt: "Review the plan." }
  reviewer:
    - { role: planner, condition: notApproved, prompt: "Address the review: {{comments}}" }
    - { role: $END, condition: null }
"#;

/// A temporary storage root with the fixture workflow registered.
///
/// The directory is deleted when the fixture is dropped.
pub struct Fixture {
    dir: tempfile::TempDir,
    engine: Engine,
    workflow: Hash,
}

impl std::fmt::Debug for Fixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixture")
            .field("root", &self.dir.path())
            .field("workflow", &self.workflow)
            .finish_non_exhaustive()
    }
}

impl Fixture {
    /// Creates the root, the CAS and the workflow ([`WORKFLOW_YAML`],
    /// registered as `uwf workflow put` does, minus `registry.yaml`).
    pub fn new() -> Result<Self, BoxError> {
        let dir = tempfile::tempdir()?;
        let engine = Engine::open(dir.path())?;
        let def = uwf_moderator::definition::parse_yaml(WORKFLOW_YAML, "plan-review.yaml")?;
        let workflow = uwf_moderator::definition::register(engine.cas(), &def)?.hash;
        Ok(Self {
            dir,
            engine,
            workflow,
        })
    }

    /// The storage root.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The store of the root.
    pub fn cas(&self) -> &Cas {
        self.engine.cas()
    }

    /// The engine over the root (to step threads as `uwf` does).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The Workflow node.
    pub fn workflow_hash(&self) -> Hash {
        self.workflow
    }

    /// Starts a thread of the fixture workflow for `prompt`, as `uwf thread
    /// start` does. Returns the thread id and the StartNode.
    pub fn start_thread(&self, prompt: &str) -> Result<(ThreadId, Hash), BoxError> {
        self.start_thread_in(self.workflow, prompt)
    }

    /// Registers another workflow from its YAML definition (as `uwf
    /// workflow put` does, minus `registry.yaml`) and returns its node.
    pub fn register_workflow(&self, yaml: &str) -> Result<Hash, BoxError> {
        let def = uwf_moderator::definition::parse_yaml(yaml, "workflow.yaml")?;
        Ok(uwf_moderator::definition::register(self.cas(), &def)?.hash)
    }

    /// [`start_thread`](Self::start_thread) for another workflow.
    pub fn start_thread_in(
        &self,
        workflow: Hash,
        prompt: &str,
    ) -> Result<(ThreadId, Hash), BoxError> {
        let started = uwf_engine::start(&self.engine, workflow, prompt, None)?;
        Ok((started.thread, started.head))
    }

    /// Writes `config` as the root's `config.yaml`.
    pub fn write_config(&self, config: &WorkflowConfig) -> Result<(), BoxError> {
        std::fs::write(
            self.root().join("config.yaml"),
            serde_yaml::to_string(config)?,
        )?;
        Ok(())
    }

    /// Runs `thread` to its end through the engine, as `uwf thread run`
    /// does, with `step(role)` as the agent (it writes a StepNode, e.g.
    /// through [`execute`](crate::execute), and returns its hash): the
    /// engine checks each StepNode, moves the head and archives the thread
    /// at `$END`. Fails when `max_steps` steps ran first, or when a step
    /// fails (`step`'s error, or a StepNode the engine refuses). Returns the
    /// roles run, in order.
    pub fn drive(
        &self,
        thread: ThreadId,
        max_steps: usize,
        step: impl FnMut(&str) -> Result<Hash, KitError>,
    ) -> Result<Vec<String>, BoxError> {
        let step = std::cell::RefCell::new(step);
        let roles = std::cell::RefCell::new(Vec::new());
        let agent = |call: &uwf_engine::AgentCall<'_>| {
            roles.borrow_mut().push(call.role.to_string());
            (step.borrow_mut())(call.role).map_err(|e| e.to_string())
        };
        let opts = StepOptions {
            in_process: Some(&agent),
            ..StepOptions::default()
        };
        let progress: std::sync::Arc<dyn Progress> = std::sync::Arc::new(NoProgress);
        match uwf_engine::run(&self.engine, thread, &opts, &progress, max_steps + 1)? {
            uwf_engine::Ran::Done(_) if roles.borrow().len() <= max_steps => Ok(roles.into_inner()),
            uwf_engine::Ran::Waiting(_) => {
                Err(format!("thread {thread} waits for a person").into())
            }
            _ => Err(format!(
                "thread {thread} did not end within {max_steps} steps (ran {})",
                roles.borrow().join(" → ")
            )
            .into()),
        }
    }

    /// Stores a StartNode of the fixture workflow (not registered as a thread).
    pub fn put_start(&self, prompt: &str) -> Result<Hash, BoxError> {
        let start = StartNodePayload {
            workflow: self.workflow,
            prompt: prompt.into(),
            parent_state: None,
        };
        Ok(self
            .cas()
            .put_value(self.cas().types().start_node, &start)?
            .hash)
    }

    /// Points `thread` at `head` (adding the thread if it is not active),
    /// through the thread state with its compare-and-swap, without the
    /// engine's checks: for tests that build a chain by hand.
    pub fn set_head(&self, thread: ThreadId, head: Hash) -> Result<(), BoxError> {
        let state = self.engine.state();
        match state.thread_head(thread)? {
            Some(current) => {
                state.swap_head(thread, current, head, &uwf_state::NodeGuard::vouched())?
            }
            None => state.insert_thread(thread, head, &uwf_state::NodeGuard::vouched())?,
        }
        Ok(())
    }

    /// Archives `thread` as done, as the engine does when it ends.
    pub fn remove_thread(&self, thread: ThreadId) -> Result<(), BoxError> {
        let head = self
            .head(thread)?
            .ok_or_else(|| format!("thread {thread} is not active"))?;
        let workflow = uwf_engine::workflow_of(&self.engine, head)?;
        self.engine
            .state()
            .archive(thread, workflow, Some(head), "done")?;
        Ok(())
    }

    /// The head of `thread` if it is active.
    pub fn head(&self, thread: ThreadId) -> Result<Option<Hash>, BoxError> {
        Ok(self.engine.state().thread_head(thread)?)
    }
}

/// Helpers for tests that run a real agent CLI (hermes, Claude Code,
/// Codex, …): find it, skip loudly without it, fail under `CI=true`.
pub mod real_cli {
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output};

    use serde_json::Value;
    use uwf_cas::{Cas, Hash};

    use crate::BoxError;

    /// Whether this is a CI run (`CI=true` or `CI=1`), where a real-CLI
    /// test must not skip.
    pub fn in_ci() -> bool {
        std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
    }

    /// The program `$<bin_var>` names (a path, or a name looked up on
    /// `PATH`), else `default` on `PATH`; `None` when it is not a file.
    pub fn find_program(bin_var: &str, default: &str) -> Option<PathBuf> {
        let name = std::env::var_os(bin_var)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.into());
        let name = PathBuf::from(name);
        if name.components().count() > 1 {
            return name.is_file().then_some(name);
        }
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(&name))
            .find(|p| p.is_file())
    }

    /// Reports that the real-CLI test `test` did not run because the
    /// program of `bin_var` is missing: panics under `CI=true`, else prints
    /// a loud notice with `how_to_run` on the process's stderr (the
    /// harness does not capture it) and returns.
    pub fn missing(test: &str, bin_var: &str, default: &str, how_to_run: &str) {
        let why = match std::env::var_os(bin_var).filter(|v| !v.is_empty()) {
            Some(v) => format!("{bin_var}={} is not a file", v.to_string_lossy()),
            None => format!("{bin_var} is not set and there is no `{default}` on PATH"),
        };
        assert!(
            !in_ci(),
            "the real-CLI test {test} must run in CI, but the program is missing: {why}"
        );
        let bar = "!".repeat(78);
        let how: String = how_to_run.lines().map(|l| format!("!!!   {l}\n")).collect();
        let _ = writeln!(
            std::io::stderr().lock(),
            "\n{bar}\n!!! SKIPPED: the real-CLI test {test} did not run.\n!!! {why}.\n!!! To run it:\n{how}{bar}\n"
        );
    }

    /// The `uwf` binary next to the agent binary `agent` (cargo's
    /// `CARGO_BIN_EXE_<agent>`), built with `cargo build -p uwf-cli -p
    /// <package>` in `workspace` when it is missing (an agent crate cannot
    /// depend on uwf-cli, so cargo does not build it for the agent's tests).
    pub fn uwf_beside(agent: &Path, workspace: &Path, package: &str) -> Result<PathBuf, BoxError> {
        let dir = agent.parent().unwrap_or(Path::new("."));
        let uwf = dir.join(format!("uwf{}", std::env::consts::EXE_SUFFIX));
        if !uwf.is_file() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--locked", "-p", "uwf-cli", "-p", package])
                .current_dir(workspace);
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status()?;
            if !status.success() {
                return Err(format!("cargo build -p uwf-cli failed: {status}").into());
            }
        }
        Ok(uwf)
    }

    /// A finished process's status, stdout and stderr, for messages.
    pub fn output_text(out: &Output) -> String {
        format!(
            "status {}\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// The title of the schema of node `hash`.
    pub fn title(cas: &Cas, hash: Hash) -> Result<String, BoxError> {
        let node = cas.get(hash)?;
        Ok(cas.schema(node.type_hash)?["title"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// The hash in the string field `key` of `v`.
    pub fn hash_at(v: &Value, key: &str) -> Result<Hash, BoxError> {
        Ok(v[key]
            .as_str()
            .ok_or_else(|| format!("no {key} in {v}"))?
            .parse()?)
    }

    /// One step of a finished thread, with its detail's turns.
    #[derive(Debug, Clone)]
    pub struct Step {
        /// The role.
        pub role: String,
        /// The output node's payload.
        pub output: Value,
        /// The detail node's payload.
        pub detail: Value,
        /// The turn nodes the detail's `turns` point at, in order.
        pub turns: Vec<(Hash, Value)>,
    }

    /// The steps of the chain ending at `head`, first to last. Checks that
    /// each was written by `agent` (the label uwf gives the agent), that its
    /// detail is a `detail_title` node and its turns `turn_title` nodes.
    pub fn load_steps(
        cas: &Cas,
        head: Hash,
        agent: &str,
        detail_title: &str,
        turn_title: &str,
    ) -> Result<Vec<Step>, BoxError> {
        let mut steps = Vec::new();
        let mut cur = Some(head);
        while let Some(h) = cur {
            let node = cas.get(h)?.payload;
            if node["agent"] != agent {
                return Err(format!("step {h} is by {}, not {agent}", node["agent"]).into());
            }
            let detail_hash = hash_at(&node, "detail")?;
            let t = title(cas, detail_hash)?;
            if t != detail_title {
                return Err(format!("the detail of {h} is a {t} node, not {detail_title}").into());
            }
            let detail = cas.get(detail_hash)?.payload;
            let mut turns = Vec::new();
            for t in detail["turns"].as_array().into_iter().flatten() {
                let t: Hash = t.as_str().ok_or("a turn is not a string")?.parse()?;
                let tt = title(cas, t)?;
                if tt != turn_title {
                    return Err(format!("turn {t} is a {tt} node, not {turn_title}").into());
                }
                turns.push((t, cas.get(t)?.payload));
            }
            steps.push(Step {
                role: node["role"].as_str().unwrap_or_default().to_owned(),
                output: cas.get(hash_at(&node, "output")?)?.payload,
                detail,
                turns,
            });
            cur = match node["prev"].as_str() {
                Some(p) => Some(p.parse()?),
                None => None,
            };
        }
        steps.reverse();
        Ok(steps)
    }

    /// Every file under `dir` whose bytes contain `needle` (e.g. an API
    /// key that must not be stored).
    pub fn files_containing(dir: &Path, needle: &str) -> std::io::Result<Vec<PathBuf>> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d)? {
                let path = entry?.path();
                if path.is_dir() {
                    stack.push(path);
                } else if std::fs::read(&path)?
                    .windows(needle.len().max(1))
                    .any(|w| w == needle.as_bytes())
                {
                    found.push(path);
                }
            }
        }
        Ok(found)
    }
}
