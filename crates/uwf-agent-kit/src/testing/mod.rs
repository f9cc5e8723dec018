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
use uwf_protocol::{END, StartNodePayload, ThreadsIndex, WorkflowConfig};

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
    cas: Cas,
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
        let cas = Cas::open(dir.path())?;
        let def = uwf_moderator::definition::parse_yaml(WORKFLOW_YAML, "plan-review.yaml")?;
        let workflow = uwf_moderator::definition::register(&cas, &def)?.hash;
        Ok(Self { dir, cas, workflow })
    }

    /// The storage root.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The store of the root.
    pub fn cas(&self) -> &Cas {
        &self.cas
    }

    /// The Workflow node.
    pub fn workflow_hash(&self) -> Hash {
        self.workflow
    }

    /// Stores a StartNode for `prompt` and makes it the head of a new
    /// thread in `threads.yaml`. Returns the thread id and the StartNode.
    pub fn start_thread(&self, prompt: &str) -> Result<(String, Hash), BoxError> {
        let start = self.put_start(prompt)?;
        let thread = uwf_util::ids::ThreadId::new().to_string();
        self.set_head(&thread, start)?;
        Ok((thread, start))
    }

    /// Registers another workflow from its YAML definition (as `uwf
    /// workflow put` does, minus `registry.yaml`) and returns its node.
    pub fn register_workflow(&self, yaml: &str) -> Result<Hash, BoxError> {
        let def = uwf_moderator::definition::parse_yaml(yaml, "workflow.yaml")?;
        Ok(uwf_moderator::definition::register(&self.cas, &def)?.hash)
    }

    /// [`start_thread`](Self::start_thread) for another workflow.
    pub fn start_thread_in(
        &self,
        workflow: Hash,
        prompt: &str,
    ) -> Result<(String, Hash), BoxError> {
        let start = StartNodePayload {
            workflow: workflow.to_string(),
            prompt: prompt.into(),
            parent_state: None,
        };
        let start = self
            .cas
            .put_value(self.cas.types().start_node, &start)?
            .hash;
        let thread = uwf_util::ids::ThreadId::new().to_string();
        self.set_head(&thread, start)?;
        Ok((thread, start))
    }

    /// Writes `config` as the root's `config.yaml`.
    pub fn write_config(&self, config: &WorkflowConfig) -> Result<(), BoxError> {
        std::fs::write(
            self.root().join("config.yaml"),
            serde_yaml::to_string(config)?,
        )?;
        Ok(())
    }

    /// Runs `thread` to its end as `uwf thread run` would: asks the
    /// moderator for the next role, calls `step(role)` (which writes a
    /// StepNode, e.g. through [`execute`](crate::execute)), moves the head
    /// to it; until the moderator returns `$END` (the thread is then removed
    /// from `threads.yaml`) or `max_steps` steps ran (an error). Returns
    /// the roles run, in order.
    pub fn drive(
        &self,
        thread: &str,
        max_steps: usize,
        mut step: impl FnMut(&str) -> Result<Hash, KitError>,
    ) -> Result<Vec<String>, BoxError> {
        let mut roles = Vec::new();
        loop {
            let head = self
                .head(thread)?
                .ok_or_else(|| format!("thread {thread} is not active"))?;
            let view = uwf_moderator::thread::load(&self.cas, head)?;
            let next = view.decide()?.next;
            if next == END {
                self.remove_thread(thread)?;
                return Ok(roles);
            }
            if roles.len() >= max_steps {
                return Err(format!(
                    "thread {thread} did not end within {max_steps} steps (ran {})",
                    roles.join(" → ")
                )
                .into());
            }
            let hash = step(&next)?;
            self.set_head(thread, hash)?;
            roles.push(next);
        }
    }

    /// Stores a StartNode of the fixture workflow (not registered as a thread).
    pub fn put_start(&self, prompt: &str) -> Result<Hash, BoxError> {
        let start = StartNodePayload {
            workflow: self.workflow.to_string(),
            prompt: prompt.into(),
            parent_state: None,
        };
        Ok(self
            .cas
            .put_value(self.cas.types().start_node, &start)?
            .hash)
    }

    /// Points `thread` at `head` in `threads.yaml`, as `uwf` does after a step.
    pub fn set_head(&self, thread: &str, head: Hash) -> Result<(), BoxError> {
        let mut index = self.threads()?;
        index.insert(thread.to_owned(), head.to_string());
        self.write_threads(&index)
    }

    /// Removes `thread` from `threads.yaml`, as `uwf` does when it ends.
    pub fn remove_thread(&self, thread: &str) -> Result<(), BoxError> {
        let mut index = self.threads()?;
        index.remove(thread);
        self.write_threads(&index)
    }

    /// The head of `thread` in `threads.yaml`.
    pub fn head(&self, thread: &str) -> Result<Option<Hash>, BoxError> {
        Ok(match self.threads()?.get(thread) {
            Some(h) => Some(h.parse()?),
            None => None,
        })
    }

    fn threads(&self) -> Result<ThreadsIndex, BoxError> {
        let path = self.root().join("threads.yaml");
        if !path.exists() {
            return Ok(ThreadsIndex::new());
        }
        let text = std::fs::read_to_string(path)?;
        if text.trim().is_empty() {
            return Ok(ThreadsIndex::new());
        }
        Ok(serde_yaml::from_str(&text)?)
    }

    fn write_threads(&self, index: &ThreadsIndex) -> Result<(), BoxError> {
        std::fs::write(
            self.root().join("threads.yaml"),
            serde_yaml::to_string(index)?,
        )?;
        Ok(())
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
