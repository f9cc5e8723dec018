//! What can go wrong in a step of `uwf-agent`. Every variant leaves the
//! thread unchanged: the agent exits 1 without a StepNode, and uwf's retry
//! policy (`retries` in config.yaml) retries it like any failed attempt.

use uwf_agent_kit::KitError;
use uwf_agent_kit::cli_agent::CliError;

/// A failed step.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum AgentError {
    /// Config, model, key, endpoint or store errors, with the kit's help.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Kit(#[from] KitError),

    /// Storing a node failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),

    /// `agentPolicy` in config.yaml cannot be used.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Policy(#[from] uwf_state::policy::PolicyError),

    /// Reading `.env` failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    State(#[from] uwf_state::StateError),

    /// The step was interrupted while a command ran.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Command(#[from] CliError),

    /// This process was asked to stop (uwf's timeout, `uwf thread kill`,
    /// Ctrl-C) between two tool calls.
    #[error("interrupted; the step was stopped")]
    #[diagnostic(
        code(uwf_agent::interrupted),
        help("nothing was written to the thread")
    )]
    Interrupted,

    /// The working directory cannot be used.
    #[error("cannot use the working directory {dir}")]
    #[diagnostic(
        code(uwf_agent::workdir),
        help("run uwf from the directory the role works in, or set UWF_AGENT_CWD to it")
    )]
    WorkDir {
        /// The directory.
        dir: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },

    /// The provider answered something that is not a model turn.
    #[error("model {model:?} sent a reply uwf-agent cannot read: {reason}")]
    #[diagnostic(
        code(uwf_agent::bad_reply),
        help(
            "check that the provider's `api` in config.yaml (openai or anthropic) is what its baseUrl speaks; the step's transcript so far is node {transcript}"
        )
    )]
    BadReply {
        /// The model.
        model: String,
        /// What is wrong.
        reason: String,
        /// The transcript stored so far.
        transcript: String,
    },

    /// A limit of the step was reached.
    #[error("{what}; the step was stopped")]
    #[diagnostic(
        code(uwf_agent::limit),
        help(
            "raise the limit under agentPolicy in config.yaml ({key}) or give the role a smaller task; nothing was written to the thread, and the retry policy retries the step like any failure. The transcript so far is node {transcript} (uwf cas get {transcript})"
        )
    )]
    Limit {
        /// Which limit, with the figures.
        what: String,
        /// The `agentPolicy` key.
        key: &'static str,
        /// The transcript stored so far.
        transcript: String,
    },

    /// The model ended without an answer or a submission.
    #[error("model {model:?} ended its turn with neither text nor a submission")]
    #[diagnostic(
        code(uwf_agent::empty_answer),
        help(
            "nothing was written to the thread; run the step again or pick another model for the role (roleModels in config.yaml). The transcript is node {transcript}"
        )
    )]
    EmptyAnswer {
        /// The model.
        model: String,
        /// The transcript.
        transcript: String,
    },
}
