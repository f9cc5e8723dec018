//! Errors of the kit.

use uwf_cas::Hash;

use crate::BoxError;

/// Everything that can go wrong while running an agent.
///
/// Every variant is a [`miette::Diagnostic`] with a help text; [`run`](crate::run)
/// prints it as a report on stderr.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum KitError {
    /// The command line is wrong (exit status 2).
    #[error("{message}")]
    #[diagnostic(
        code(uwf::agent::usage),
        help(
            "usage: {usage}\n`uwf thread step` runs agents as `<command> <args…> <thread-id> <role>`"
        )
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
    BadThreadId(#[from] uwf_util::ids::ThreadIdError),

    /// The storage root could not be determined.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Root(#[from] uwf_util::root::RootError),

    /// A store operation failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),

    /// A state file (`threads.yaml`, `.env`, …) could not be read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    State(#[from] uwf_util::state::StateError),

    /// The thread's chain could not be loaded.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Thread(#[from] uwf_moderator::thread::ThreadError),

    /// The thread is not in `threads.yaml`.
    #[error("thread {thread} is not active")]
    #[diagnostic(
        code(uwf::agent::not_active),
        help(
            "it has ended, was killed, or never existed in this storage root; `uwf thread list --all` shows every thread (is UNCAGED_WORKFLOW_STORAGE_ROOT the root uwf uses?)"
        )
    )]
    NotActive {
        /// The thread id.
        thread: String,
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

    /// The answer could not be turned into an output of the role's schema.
    #[error("cannot extract the output of role {role:?} from the answer: {reason}")]
    #[diagnostic(
        code(uwf::agent::extraction),
        help(
            "answer in frontmatter markdown: a `---` line, YAML with the fields of the role's outputSchema, a `---` line, then the body. Only this fast path (layer 1) exists in this release; the LLM fallback (layer 2) is configured in a later one"
        )
    )]
    Extraction {
        /// The role.
        role: String,
        /// What was wrong: no frontmatter, bad YAML, or the schema violations.
        reason: String,
    },

    /// A structured output does not satisfy the role's schema.
    #[error("the output of role {role:?} does not match its outputSchema {schema}:{violations}")]
    #[diagnostic(
        code(uwf::agent::invalid_output),
        help("fix the fields at the paths shown; `uwf cas schema get {schema}` prints the schema")
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
}

impl KitError {
    /// The process exit status for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            KitError::Usage { .. } => 2,
            _ => 1,
        }
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
