//! The context an agent runs in.

use std::path::{Path, PathBuf};

use serde_json::Value;
use uwf_cas::{Cas, Hash};
use uwf_moderator::thread::ThreadView;
use uwf_protocol::{RoleDefinition, StartNodePayload, StepContext, WorkflowPayload};
use uwf_util::ids::ThreadId;
use uwf_util::state::StateDir;

use crate::KitError;

/// Everything an agent needs to run a role on a thread, read from the
/// storage root: the workflow, the role, the thread's start and steps, the
/// edge prompt, and the store to write detail nodes into.
pub struct AgentContext {
    thread_id: ThreadId,
    role: String,
    role_definition: RoleDefinition,
    output_schema: Value,
    output_schema_hash: Hash,
    steps: Vec<StepContext>,
    step_hashes: Vec<Hash>,
    edge_prompt: Option<String>,
    root: PathBuf,
    args: Vec<String>,
    store: Cas,
    view: ThreadView,
}

impl std::fmt::Debug for AgentContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentContext")
            .field("thread_id", &self.thread_id)
            .field("role", &self.role)
            .field("head", &self.view.head)
            .field("steps", &self.step_hashes)
            .field("edge_prompt", &self.edge_prompt)
            .field("root", &self.root)
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl AgentContext {
    /// Loads the context of `role` on `thread` from the storage root `root`.
    ///
    /// Validates the thread id, reads the thread's head from `threads.yaml`
    /// ([`KitError::NotActive`] when absent), loads the chain, checks the
    /// role ([`KitError::UnknownRole`]) and asks the moderator for the edge
    /// prompt. The edge prompt is kept only when the moderator would pick
    /// this role; otherwise a warning is logged and the agent runs without.
    pub fn load(root: &Path, thread: &str, role: &str) -> Result<Self, KitError> {
        let thread_id: ThreadId = thread.parse()?;
        let store = Cas::open(root)?;
        let state = StateDir::new(root);
        let head =
            state
                .thread_head(&thread_id.to_string())?
                .ok_or_else(|| KitError::NotActive {
                    thread: thread_id.to_string(),
                })?;
        let head: Hash = head.parse().map_err(uwf_cas::CasError::from)?;
        let view = uwf_moderator::thread::load(&store, head)?;

        let Some(role_definition) = view.workflow.roles.get(role).cloned() else {
            return Err(KitError::UnknownRole {
                role: role.to_owned(),
                workflow: view.workflow.name.clone(),
                roles: view
                    .workflow
                    .roles
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let output_schema_hash: Hash = role_definition
            .output_schema
            .parse()
            .map_err(uwf_cas::CasError::from)?;
        let output_schema = store.schema(output_schema_hash)?;
        let edge_prompt = edge_prompt(&view, role);
        let steps = view.context().steps;
        let step_hashes = view.steps.iter().map(|s| s.hash).collect();
        tracing::debug!(
            thread = %thread_id,
            role,
            head = %view.head,
            steps = view.steps.len(),
            "agent context loaded"
        );
        Ok(Self {
            thread_id,
            role: role.to_owned(),
            role_definition,
            output_schema,
            output_schema_hash,
            steps,
            step_hashes,
            edge_prompt,
            root: root.to_path_buf(),
            args: Vec::new(),
            store,
            view,
        })
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
        &self.view.workflow
    }

    /// Hash of the Workflow node.
    pub fn workflow_hash(&self) -> Hash {
        self.view.workflow_hash
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
        &self.view.start
    }

    /// Hash of the thread's StartNode.
    pub fn start_hash(&self) -> Hash {
        self.view.start_hash
    }

    /// The executed steps, oldest first, each with its output expanded.
    pub fn steps(&self) -> &[StepContext] {
        &self.steps
    }

    /// Hashes of the StepNodes, parallel to [`steps`](Self::steps).
    pub fn step_hashes(&self) -> &[Hash] {
        &self.step_hashes
    }

    /// The last StepNode: the `prev` of the step this agent writes; `None`
    /// before the first step.
    pub fn prev(&self) -> Option<Hash> {
        self.step_hashes.last().copied()
    }

    /// The thread's head (the last StepNode, or the StartNode).
    pub fn head(&self) -> Hash {
        self.view.head
    }

    /// How many times this role already ran in the thread.
    pub fn runs_of_role(&self) -> usize {
        self.steps.iter().filter(|s| s.role == self.role).count()
    }

    /// The rendered prompt of the graph edge that leads to this role, if the
    /// edge has one and the moderator picks this role now.
    pub fn edge_prompt(&self) -> Option<&str> {
        self.edge_prompt.as_deref()
    }

    /// The system prompt for an LLM: the deliverable format derived from
    /// the role's outputSchema, the scope constraint, then the role's own
    /// system prompt.
    pub fn system_prompt(&self) -> String {
        format!(
            "{}\n{}\n\n{}",
            crate::prompt::output_format_instruction(&self.output_schema),
            crate::prompt::SCOPE_CONSTRAINT,
            self.role_definition.system_prompt
        )
    }

    /// The user prompt for an LLM: the user's task, the previous steps'
    /// outputs, and the edge prompt (see [`crate::prompt::thread_text`]).
    pub fn user_prompt(&self) -> String {
        crate::prompt::thread_text(&self.view.start.prompt, &self.steps, self.edge_prompt())
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

    /// The loaded thread, as the moderator sees it.
    pub fn view(&self) -> &ThreadView {
        &self.view
    }
}

fn edge_prompt(view: &ThreadView, role: &str) -> Option<String> {
    match view.decide() {
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
