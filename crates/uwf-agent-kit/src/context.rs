//! The context an agent runs in.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use uwf_cas::{Cas, Hash};
use uwf_moderator::thread::{ThreadHead, ThreadView};
use uwf_protocol::ThreadId;
use uwf_protocol::{
    RoleDefinition, StartNodePayload, StepContext, WorkflowConfig, WorkflowPayload,
};
use uwf_state::state::FsState;

use crate::KitError;
use crate::llm::LlmClient;
use crate::prompt::PromptParts;

/// Everything an agent needs to run a role on a thread, read from the
/// storage root: the workflow, the role, the thread's start and steps, the
/// edge prompt, and the store to write detail nodes into.
///
/// The thread's history (its steps) is read on first use
/// ([`steps`](Self::steps), [`prompt`](Self::prompt), …): run by uwf, which
/// hands over its decision at the head, an agent that builds no prompt
/// reads three nodes however long the thread is. The store cuts
/// the secrets of the root's `.env` and the store's password out of every
/// node put through it ([`uwf_cas::Cas::with_redactor`]), so outputs,
/// answers and transcripts never hold one.
pub struct AgentContext {
    thread_id: ThreadId,
    role: String,
    role_definition: RoleDefinition,
    output_schema: Value,
    output_schema_hash: Hash,
    /// Built from the view on first use: an agent that builds no prompt
    /// never copies the thread's outputs.
    steps: OnceLock<Vec<StepContext>>,
    step_hashes: OnceLock<Vec<Hash>>,
    edge_prompt: Option<String>,
    root: PathBuf,
    args: Vec<String>,
    store: Cas,
    /// The thread state of the same store (its configuration, for models).
    state: std::sync::Arc<dyn uwf_state::ThreadStore>,
    /// The head, start and workflow: always read.
    head: ThreadHead,
    /// The whole thread, read on first use (or at load, when the agent
    /// has to decide its edge prompt itself).
    view: OnceLock<ThreadView>,
    history_quota: usize,
    thread_text: String,
    /// `config.yaml`, read on first use; `None` inside when absent or
    /// unreadable (the error is re-read by [`AgentContext::require_config`]).
    config: OnceLock<Option<WorkflowConfig>>,
}

impl std::fmt::Debug for AgentContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentContext")
            .field("thread_id", &self.thread_id)
            .field("role", &self.role)
            .field("head", &self.head.head)
            .field("steps", &self.step_hashes.get())
            .field("edge_prompt", &self.edge_prompt)
            .field("root", &self.root)
            .field("args", &self.args)
            .field("history_quota", &self.history_quota)
            .finish_non_exhaustive()
    }
}

impl AgentContext {
    /// Loads the context of `role` on `thread` from the store of the
    /// storage root `root`: the root itself, or the store that
    /// [`UWF_STORE`](uwf_backend::STORE_ENV) or `store:` in its
    /// `config.yaml` names (uwf sets `UWF_STORE` for its agents), opened with
    /// the [backends this program registered](crate::use_backends).
    ///
    /// Validates the thread id, reads the thread's head from the thread state
    /// ([`KitError::NotActive`] when absent), loads the chain, checks the
    /// role ([`KitError::UnknownRole`]) and asks the moderator for the edge
    /// prompt. The edge prompt is kept only when the moderator would pick
    /// this role; otherwise a warning is logged and the agent runs without.
    pub fn load(root: &Path, thread: &str, role: &str) -> Result<Self, KitError> {
        let thread_id: ThreadId = thread.parse()?;
        let opened = crate::backends()
            .open_resolved(None, root)
            .map_err(|e| match e {
                uwf_backend::BackendError::UnknownScheme { given, .. } => {
                    KitError::NoBackend { store: given }
                }
                other => KitError::Store(Box::new(other)),
            })?;
        // Every node the agent stores through the context has the store's
        // secrets cut out (docs/state.md, "Secrets and file modes").
        let state = opened.stores.state;
        let redactor = uwf_backend::secrets::redactor(&state.secrets()?, &opened.secrets);
        let store = Cas::new(opened.stores.objects)?.with_redactor(std::sync::Arc::new(redactor));
        // Run by an engine that relays the store to us, the head it gave
        // is the one it just read: reading it again would cost a round
        // trip to the database and could only find a thread killed
        // meanwhile, which the engine's kill flag reports.
        let given = (std::env::var_os(crate::RELAY_ENV).is_some_and(|v| !v.is_empty()))
            .then(|| {
                std::env::var(uwf_protocol::agent_env::HEAD)
                    .ok()?
                    .parse::<uwf_cas::Hash>()
                    .ok()
            })
            .flatten();
        let head = match given {
            Some(h) => h,
            None => state
                .thread_head(thread_id)?
                .ok_or(KitError::NotActive { thread: thread_id })?,
        };
        let thread_head = uwf_moderator::thread::load_head(&store, head)?;
        let role_definition = role_of(&thread_head.workflow, role)?;
        let output_schema_hash: Hash = role_definition.output_schema;
        let output_schema = store.schema(output_schema_hash)?;
        // uwf hands over its decision at this head; otherwise (an agent run
        // by hand, an older uwf) the moderator decides here, over the whole
        // thread, which is then kept.
        let view = OnceLock::new();
        let edge_prompt = match decided_by_uwf(head) {
            Some(prompt) => prompt,
            None => {
                let loaded = uwf_moderator::thread::load(&store, head)?;
                let prompt = edge_prompt(&loaded, role);
                let _ = view.set(loaded);
                prompt
            }
        };
        tracing::debug!(
            thread = %thread_id,
            role,
            head = %head,
            history_read = view.get().is_some(),
            "agent context loaded"
        );
        Ok(Self {
            thread_id,
            role: role.to_owned(),
            role_definition,
            output_schema,
            output_schema_hash,
            steps: OnceLock::new(),
            step_hashes: OnceLock::new(),
            edge_prompt,
            root: root.to_path_buf(),
            args: Vec::new(),
            store,
            state,
            head: thread_head,
            view,
            history_quota: crate::prompt::history_quota_from_env(),
            thread_text: thread_id.to_string(),
            config: OnceLock::new(),
        })
    }

    /// Sets the character quota of the history in [`prompt`](Self::prompt)
    /// (default: [`HISTORY_QUOTA_ENV`](crate::prompt::HISTORY_QUOTA_ENV) if
    /// set, else [`DEFAULT_HISTORY_QUOTA`](crate::prompt::DEFAULT_HISTORY_QUOTA)).
    pub fn with_history_quota(mut self, chars: usize) -> Self {
        self.history_quota = chars;
        self
    }

    /// Uses `config` instead of reading `<root>/config.yaml` (for tests, or
    /// agents that assemble their configuration themselves).
    pub fn with_config(mut self, config: WorkflowConfig) -> Self {
        self.config = OnceLock::from(Some(config));
        self
    }

    /// Sets the extra arguments the agent was given before `<thread-id> <role>`.
    pub fn with_args(mut self, args: Vec<String>) -> Self {
        self.args = args;
        self
    }

    /// The thread id.
    pub fn thread_id(&self) -> ThreadId {
        self.thread_id
    }

    fn thread_str(&self) -> &str {
        &self.thread_text
    }

    /// The role to run.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The role's definition (description, system prompt, schema hash).
    pub fn role_definition(&self) -> &RoleDefinition {
        &self.role_definition
    }

    /// The workflow the thread runs.
    pub fn workflow(&self) -> &WorkflowPayload {
        &self.head.workflow
    }

    /// Hash of the Workflow node.
    pub fn workflow_hash(&self) -> Hash {
        self.head.workflow_hash
    }

    /// The role's outputSchema (a JSON Schema).
    pub fn output_schema(&self) -> &Value {
        &self.output_schema
    }

    /// Hash of the role's outputSchema node: the type of the output node.
    pub fn output_schema_hash(&self) -> Hash {
        self.output_schema_hash
    }

    /// The thread's StartNode payload (the workflow and the user's prompt).
    pub fn start(&self) -> &StartNodePayload {
        &self.head.start
    }

    /// Hash of the thread's StartNode.
    pub fn start_hash(&self) -> Hash {
        self.head.start_hash
    }

    /// The executed steps, oldest first, each with its output expanded.
    /// The thread's history is read on the first call (see
    /// [`view`](Self::view)).
    pub fn steps(&self) -> Result<&[StepContext], KitError> {
        if let Some(steps) = self.steps.get() {
            return Ok(steps);
        }
        let steps = self.view()?.context().steps;
        Ok(self.steps.get_or_init(|| steps))
    }

    /// Hashes of the StepNodes, parallel to [`steps`](Self::steps).
    pub fn step_hashes(&self) -> Result<&[Hash], KitError> {
        if let Some(hashes) = self.step_hashes.get() {
            return Ok(hashes);
        }
        let hashes = self.view()?.steps.iter().map(|s| s.hash).collect();
        Ok(self.step_hashes.get_or_init(|| hashes))
    }

    /// The last StepNode: the `prev` of the step this agent writes; `None`
    /// before the first step.
    pub fn prev(&self) -> Option<Hash> {
        self.head.last_step.is_some().then_some(self.head.head)
    }

    /// The thread's head (the last StepNode, or the StartNode).
    pub fn head(&self) -> Hash {
        self.head.head
    }

    /// How many times this role already ran in the thread (reads the
    /// history, see [`view`](Self::view)).
    pub fn runs_of_role(&self) -> Result<usize, KitError> {
        Ok(self
            .view()?
            .steps
            .iter()
            .filter(|s| s.payload.record.role == self.role)
            .count())
    }

    /// The rendered prompt of the graph edge that leads to this role, if the
    /// edge has one and the moderator picks this role now.
    pub fn edge_prompt(&self) -> Option<&str> {
        self.edge_prompt.as_deref()
    }

    /// The history's character quota (see [`with_history_quota`](Self::with_history_quota)).
    pub fn history_quota(&self) -> usize {
        self.history_quota
    }

    /// The deliverable format instruction derived from the role's
    /// outputSchema (see [`prompt::output_format_instruction`](crate::prompt::output_format_instruction)).
    pub fn format_instruction(&self) -> String {
        crate::prompt::output_format_instruction(&self.output_schema)
    }

    /// The pieces [`prompt`](Self::prompt) is assembled from (reads the
    /// history, see [`view`](Self::view)).
    pub fn prompt_parts(&self) -> Result<PromptParts<'_>, KitError> {
        Ok(PromptParts {
            schema: &self.output_schema,
            role_prompt: &self.role_definition.system_prompt,
            task: &self.head.start.prompt,
            edge_prompt: self.edge_prompt(),
            thread: self.thread_str(),
            steps: self.steps()?,
            step_hashes: self.step_hashes()?,
            history_quota: self.history_quota,
        })
    }

    /// The whole prompt for an agent that takes one prompt: the format
    /// instruction, the scope constraint, the role's system prompt, the task,
    /// the edge prompt if any, and the history of previous steps, newest
    /// first within the [history quota](Self::with_history_quota). Its size
    /// is bounded however long the thread is (see [`crate::prompt`]).
    ///
    /// Equal to [`system_prompt`](Self::system_prompt), a blank line, and
    /// [`user_prompt`](Self::user_prompt). Errors: the thread's history
    /// cannot be read (see [`view`](Self::view)).
    pub fn prompt(&self) -> Result<String, KitError> {
        Ok(self.prompt_parts()?.full())
    }

    /// The system half of [`prompt`](Self::prompt): the format instruction,
    /// the scope constraint, then the role's own system prompt. It does not
    /// depend on the history, which it does not read.
    pub fn system_prompt(&self) -> String {
        PromptParts {
            schema: &self.output_schema,
            role_prompt: &self.role_definition.system_prompt,
            task: &self.head.start.prompt,
            edge_prompt: self.edge_prompt(),
            thread: self.thread_str(),
            steps: &[],
            step_hashes: &[],
            history_quota: self.history_quota,
        }
        .system()
    }

    /// The user half of [`prompt`](Self::prompt): the task, the edge
    /// prompt, and the history within the quota (reads the history).
    pub fn user_prompt(&self) -> Result<String, KitError> {
        Ok(self.prompt_parts()?.user())
    }

    /// `config.yaml` of the storage root, read once; `None` when there is
    /// none or it cannot be read (a warning is logged;
    /// [`require_config`](Self::require_config) reports why).
    pub fn config(&self) -> Option<&WorkflowConfig> {
        self.config
            .get_or_init(|| match self.state.config() {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read config.yaml");
                    None
                }
            })
            .as_ref()
    }

    /// [`config`](Self::config), or why there is none:
    /// [`KitError::NoConfig`] when the file is missing, the parse error
    /// (with file, line and column) when it is broken.
    pub fn require_config(&self) -> Result<&WorkflowConfig, KitError> {
        if let Some(c) = self.config() {
            return Ok(c);
        }
        self.state.config()?;
        Err(KitError::NoConfig {
            path: if self.state.describe() == self.root.display().to_string() {
                FsState::new(&self.root).config_path()
            } else {
                PathBuf::from(self.state.describe())
            },
        })
    }

    /// The model alias for this role ([`llm::resolve_model`](crate::llm::resolve_model)
    /// with this context's workflow and role): `scenario` `None` for the
    /// role's own model, `Some("extract")` for extraction.
    pub fn model_alias(&self, scenario: Option<&str>) -> Result<String, KitError> {
        crate::llm::resolve_model(
            self.require_config()?,
            scenario,
            &self.head.workflow.name,
            &self.role,
        )
    }

    /// An LLM client for this role: the model of
    /// [`model_alias`](Self::model_alias)`(scenario)`, its provider, and the
    /// API key from the environment variable the provider names (`.env` is
    /// loaded by [`run`](crate::run)).
    pub fn llm(&self, scenario: Option<&str>) -> Result<LlmClient, KitError> {
        let alias = self.model_alias(scenario)?;
        LlmClient::from_config(self.require_config()?, &alias)
    }

    /// The storage root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Extra arguments given before `<thread-id> <role>` (see
    /// [`Runner::args`](crate::Runner::args)); empty for plain agents.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The store, for detail nodes the agent writes itself.
    pub fn store(&self) -> &Cas {
        &self.store
    }

    /// The whole thread, as the moderator sees it: read from the store,
    /// its chain walked and checked, on the first call of this or of a
    /// method that needs the history ([`steps`](Self::steps),
    /// [`prompt`](Self::prompt), [`runs_of_role`](Self::runs_of_role), …),
    /// then kept. Errors: the chain cannot be read
    /// ([`KitError::Thread`]).
    pub fn view(&self) -> Result<&ThreadView, KitError> {
        if let Some(view) = self.view.get() {
            return Ok(view);
        }
        let loaded = uwf_moderator::thread::load(&self.store, self.head.head)?;
        Ok(self.view.get_or_init(|| loaded))
    }
}

fn edge_prompt(view: &ThreadView, role: &str) -> Option<String> {
    // A suspended thread moves only through `uwf thread resume`, whose role
    // and prompt come from `$START`'s resume route.
    let decision = match view.decide() {
        Ok(d) if d.next == uwf_moderator::SUSPEND => view.decide_resume(),
        other => other,
    };
    match decision {
        Ok(d) if d.next == role => d.prompt,
        Ok(d) => {
            tracing::warn!(
                role,
                moderator = %d.next,
                "the moderator would run {} next, not {role}; running {role} without an edge prompt",
                d.next
            );
            None
        }
        Err(e) => {
            tracing::warn!(
                role,
                error = %e,
                "the moderator cannot decide the next role; running {role} without an edge prompt"
            );
            None
        }
    }
}

/// `role` of the thread's workflow, or [`KitError::UnknownRole`].
fn role_of(workflow: &WorkflowPayload, role: &str) -> Result<RoleDefinition, KitError> {
    workflow
        .roles
        .get(role)
        .cloned()
        .ok_or_else(|| KitError::UnknownRole {
            role: role.to_owned(),
            workflow: workflow.name.clone(),
            roles: workflow
                .roles
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The whole prompt ([`AgentContext::prompt`]) that the kit builds for
/// `role` on thread `thread` when its head is `view`'s: for a step
/// already recorded, load `view` at that step's `prev` to see what its
/// agent was given (with `history_quota`, the quota the agent ran with
/// if it is known, else the one in force). The edge prompt is the
/// moderator's at that head, as [`AgentContext::load`] takes it when uwf
/// did not hand it over. `uwf serve` shows it as each step's input.
///
/// Errors: [`KitError::UnknownRole`]; the schema cannot be read.
pub fn prompt_at(
    store: &Cas,
    thread: ThreadId,
    view: &ThreadView,
    role: &str,
    history_quota: usize,
) -> Result<String, KitError> {
    let definition = role_of(&view.workflow, role)?;
    let schema = store.schema(definition.output_schema)?;
    let edge = edge_prompt(view, role);
    let steps = view.context().steps;
    let hashes: Vec<Hash> = view.steps.iter().map(|s| s.hash).collect();
    let thread = thread.to_string();
    Ok(PromptParts {
        schema: &schema,
        role_prompt: &definition.system_prompt,
        task: &view.start.prompt,
        edge_prompt: edge.as_deref(),
        thread: &thread,
        steps: &steps,
        step_hashes: &hashes,
        history_quota,
    }
    .full())
}

/// The edge prompt uwf decided for the step at `head` (`UWF_EDGE_PROMPT`,
/// empty for none), when uwf started this agent for that very head
/// (`UWF_HEAD`); `None` when the agent has to decide itself.
fn decided_by_uwf(head: Hash) -> Option<Option<String>> {
    let from = std::env::var(uwf_protocol::agent_env::HEAD).ok()?;
    if from != head.to_string() {
        return None;
    }
    let prompt = std::env::var(uwf_protocol::agent_env::EDGE_PROMPT).ok()?;
    Some((!prompt.is_empty()).then_some(prompt))
}
