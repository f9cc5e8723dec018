//! Errors of the kit.

use uwf_cas::Hash;

use crate::BoxError;

/// Everything that can go wrong while running an agent.
///
/// Every variant is a [`miette::Diagnostic`] with a help text that names no
/// `uwf` command: which command helps is for the binary's report to say
/// ([`report`](crate::report), which [`run`](crate::run) uses, adds it;
/// docs/architecture.md, "Errors and output").
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum KitError {
    /// The command line is wrong (exit status 2).
    #[error("{message}")]
    #[diagnostic(
        code(uwf::agent::usage),
        help("usage: {usage}\nagents are run as `<command> <args…> <thread-id> <role>`")
    )]
    Usage {
        /// What is wrong.
        message: String,
        /// The usage line.
        usage: String,
    },

    /// The thread id is not a ULID.
    #[error(transparent)]
    #[diagnostic(transparent)]
    BadThreadId(#[from] uwf_protocol::ThreadIdError),

    /// The storage root could not be determined.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Root(#[from] uwf_util::root::RootError),

    /// A store operation failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),

    /// A state file (a head file, `.env`, …) could not be read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    State(#[from] uwf_state::state::StateError),

    /// The thread's chain could not be loaded.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Thread(#[from] uwf_moderator::thread::ThreadError),

    /// The thread is not active.
    #[error("thread {thread} is not active")]
    #[diagnostic(
        code(uwf::agent::not_active),
        help(
            "it has ended, was killed, or never existed in this storage root (is UNCAGED_WORKFLOW_STORAGE_ROOT the root the engine uses?)"
        )
    )]
    NotActive {
        /// The thread id.
        thread: uwf_protocol::ThreadId,
    },

    /// The workflow has no such role.
    #[error("workflow {workflow} has no role {role:?}")]
    #[diagnostic(code(uwf::agent::unknown_role), help("its roles are: {roles}"))]
    UnknownRole {
        /// The role asked for.
        role: String,
        /// The workflow's name.
        workflow: String,
        /// Its roles, comma-separated.
        roles: String,
    },

    /// The agent's own code failed.
    #[error("the agent failed: {}", chain(.0.as_ref()))]
    #[diagnostic(
        code(uwf::agent::failed),
        help("nothing was written to the thread; fix the cause and run the step again")
    )]
    Agent(BoxError),

    /// Neither extraction layer produced an output: the frontmatter fast
    /// path failed (`layer1` says why) and so did the LLM fallback
    /// (`cause`: [`NoConfig`](Self::NoConfig), [`MissingApiKey`](Self::MissingApiKey),
    /// [`LlmUnreachable`](Self::LlmUnreachable), [`ExtractInvalid`](Self::ExtractInvalid), …).
    #[error(
        "cannot extract the output of role {role:?}: {layer1}; the LLM fallback failed too: {cause}"
    )]
    #[diagnostic(code(uwf::agent::extraction), help("{help}"))]
    Extraction {
        /// The role.
        role: String,
        /// Why the frontmatter fast path (layer 1) failed.
        layer1: String,
        /// Why the LLM fallback (layer 2) failed.
        cause: Box<KitError>,
        /// What to do about both.
        help: String,
    },

    /// The store could not be opened (a PostgreSQL store that cannot be
    /// reached, a bad `UWF_STORE`, …).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(Box<uwf_backend::BackendError>),

    /// The store is named by a URL this agent has no backend for, and no
    /// engine relays it (the agent was run by hand).
    #[error("{store} is not a store this agent can open by itself")]
    #[diagnostic(
        code(uwf::agent::no_backend),
        help(
            "agents reach a store named by URL through the relay of the engine that runs them; run by hand, point UWF_STORE at a directory"
        )
    )]
    NoBackend {
        /// The store, without its password.
        store: String,
    },

    /// `config.yaml` is missing, and something needs a model.
    #[error("no configuration file {}", path.display())]
    #[diagnostic(
        code(uwf::agent::no_config),
        help("LLM calls need providers and models in config.yaml (see docs/writing-agents.md)")
    )]
    NoConfig {
        /// Where it was looked for.
        path: std::path::PathBuf,
    },

    /// Nothing in the configuration names a model for this purpose.
    #[error("no model configured for {purpose}")]
    #[diagnostic(
        code(uwf::agent::no_model),
        help(
            "set `defaultModel` in config.yaml (or `modelOverrides.extract` for extraction, `roleModels.<workflow>.<role>` for a role) to an alias defined under `models`"
        )
    )]
    NoModel {
        /// What a model was needed for (`extraction`, `role "planner" of workflow "x"`).
        purpose: String,
    },

    /// A model alias that `models` does not define.
    #[error("unknown model alias {alias:?}")]
    #[diagnostic(
        code(uwf::agent::unknown_model),
        help(
            "config.yaml defines these models: {known}; define {alias:?} under `models` or use one of them"
        )
    )]
    UnknownModel {
        /// The alias.
        alias: String,
        /// The aliases defined, comma-separated (or `none`).
        known: String,
    },

    /// A model whose provider alias `providers` does not define.
    #[error("model {model:?} uses provider {provider:?}, which config.yaml does not define")]
    #[diagnostic(
        code(uwf::agent::unknown_provider),
        help(
            "the providers defined are: {known}; add {provider:?} under `providers` with `baseUrl` and `apiKeyEnv`"
        )
    )]
    UnknownProvider {
        /// The model alias.
        model: String,
        /// The provider alias it names.
        provider: String,
        /// The providers defined, comma-separated (or `none`).
        known: String,
    },

    /// A provider whose `baseUrl` is not an `http://` or `https://` URL.
    #[error("provider {provider:?} has baseUrl {url:?}, which is not an http(s) URL")]
    #[diagnostic(
        code(uwf::agent::bad_base_url),
        help(
            "set it to the OpenAI-compatible API root, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`"
        )
    )]
    BadBaseUrl {
        /// The provider alias.
        provider: String,
        /// The URL as configured.
        url: String,
    },

    /// The environment variable the provider names holds no API key.
    #[error(
        "the API key of provider {provider:?} is missing: environment variable {var} is not set"
    )]
    #[diagnostic(
        code(uwf::agent::missing_api_key),
        help("add `{var}=<your key>` to the .env file of the storage root, or export it")
    )]
    MissingApiKey {
        /// The variable (`apiKeyEnv`).
        var: String,
        /// The provider alias.
        provider: String,
    },

    /// The endpoint could not be reached (refused, DNS, TLS, timeout).
    #[error("cannot reach the LLM endpoint {url} ({attempts} attempt(s)): {reason}")]
    #[diagnostic(
        code(uwf::agent::llm_unreachable),
        help(
            "check the provider's baseUrl in config.yaml, the network, and that the server is running"
        )
    )]
    LlmUnreachable {
        /// The URL called.
        url: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last failure.
        reason: String,
    },

    /// The endpoint answered with an error status.
    #[error("the LLM endpoint {url} answered HTTP {status} ({attempts} attempt(s)): {message}")]
    #[diagnostic(code(uwf::agent::llm_status), help("{help}"))]
    LlmStatus {
        /// The URL called.
        url: String,
        /// The HTTP status of the last answer.
        status: u16,
        /// How many attempts were made.
        attempts: u32,
        /// The provider's error message (any API key redacted).
        message: String,
        /// What to do, depending on the status.
        help: String,
    },

    /// The endpoint answered 2xx with something that is not a usable chat
    /// completion.
    #[error("the LLM endpoint {url} sent an unusable answer: {reason}")]
    #[diagnostic(
        code(uwf::agent::llm_response),
        help(
            "is baseUrl the OpenAI-compatible API root (it must serve POST <baseUrl>/chat/completions)?"
        )
    )]
    LlmResponse {
        /// The URL called.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The extraction model did not answer with JSON, even after the repair
    /// round.
    #[error(
        "the extraction model {model} did not answer with JSON after {attempts} call(s): {reason}"
    )]
    #[diagnostic(
        code(uwf::agent::extract_not_json),
        help(
            "the model may not support JSON mode; set `modelOverrides.extract` to a model that does"
        )
    )]
    ExtractNotJson {
        /// The model name.
        model: String,
        /// How many chat calls were made (the first and the repair round).
        attempts: u32,
        /// Why the last answer is not JSON, with its start.
        reason: String,
    },

    /// The extraction model's JSON does not satisfy the role's schema, even
    /// after the repair round.
    #[error(
        "the extraction model {model} answered JSON that does not match the outputSchema after {attempts} call(s):{violations}"
    )]
    #[diagnostic(
        code(uwf::agent::extract_invalid),
        help(
            "the answer may lack the information the schema requires; make the agent answer in frontmatter (the format instruction in `ctx.prompt()`), or use a stronger extraction model (`modelOverrides.extract`)"
        )
    )]
    ExtractInvalid {
        /// The model name.
        model: String,
        /// How many chat calls were made.
        attempts: u32,
        /// The violations of the last answer, one per line.
        violations: String,
    },

    /// A structured output does not satisfy the role's schema.
    #[error("the output of role {role:?} does not match its outputSchema {schema}:{violations}")]
    #[diagnostic(
        code(uwf::agent::invalid_output),
        help("fix the fields at the paths shown; the schema is node {schema} of the store")
    )]
    InvalidOutput {
        /// The role.
        role: String,
        /// The role's outputSchema.
        schema: Hash,
        /// Every violation, one per line (`at <JSON pointer>: <message>`).
        violations: String,
    },

    /// The detail hash the agent returned is not in the store.
    #[error("the detail node {0} is not in the store")]
    #[diagnostic(
        code(uwf::agent::missing_detail),
        help(
            "store the detail with `ctx.store().put(...)` before returning its hash with `AgentRun::with_detail`"
        )
    )]
    MissingDetail(Hash),

    /// The child thread given with [`AgentRun::with_child_thread`](crate::AgentRun::with_child_thread)
    /// is not a StepNode in the store.
    #[error("the child thread {hash} {reason}")]
    #[diagnostic(
        code(uwf::agent::bad_child_thread),
        help(
            "`AgentRun::with_child_thread` takes the child thread's terminal StepNode (its head after its last step)"
        )
    )]
    BadChildThread {
        /// The hash given.
        hash: Hash,
        /// What is wrong ("is not in the store", "is not a StepNode").
        reason: String,
    },
}

impl KitError {
    /// The process exit status for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            KitError::Usage { .. } => 2,
            e if e.is_unavailable() => uwf_protocol::agent_env::EXIT_UNAVAILABLE,
            _ => 1,
        }
    }

    /// Whether the store could not be reached (a database restarting, a
    /// network cut): the step may succeed when run again, and uwf's worker
    /// hands such a run back instead of failing it.
    pub fn is_unavailable(&self) -> bool {
        match self {
            KitError::Store(e) => e.is_unavailable(),
            KitError::Cas(e) => e.kind() == uwf_cas::StoreErrorKind::Unavailable,
            KitError::State(e) => e.kind() == uwf_state::ErrorKind::Unavailable,
            _ => false,
        }
    }

    /// For an [`Extraction`](Self::Extraction) error, why the LLM fallback
    /// failed; otherwise `None`.
    pub fn llm_cause(&self) -> Option<&KitError> {
        match self {
            KitError::Extraction { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// The help text of this error's diagnostic, if any.
    pub fn help_text(&self) -> Option<String> {
        miette::Diagnostic::help(self).map(|h| h.to_string())
    }
}

/// `error: source: source…`, each level once.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let msg = s.to_string();
        // Many errors repeat their source in their own message.
        if !out.ends_with(&msg) {
            out.push_str(": ");
            out.push_str(&msg);
        }
        cur = s.source();
    }
    out
}

/// `\n  - at <path>: <message>` for each violation.
pub(crate) fn violation_list(v: &[uwf_cas::Violation]) -> String {
    v.iter().map(|v| format!("\n  - {v}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn chain_lists_sources() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(chain(&e), "outer: inner");
        let boxed: BoxError = Box::new(e);
        assert_eq!(
            KitError::Agent(boxed).to_string(),
            "the agent failed: outer: inner"
        );
    }

    #[test]
    fn exit_codes() {
        let usage = KitError::Usage {
            message: "x".into(),
            usage: "y".into(),
        };
        assert_eq!(usage.exit_code(), 2);
        assert_eq!(KitError::MissingDetail(Hash::from_u64(1)).exit_code(), 1);
    }
}
