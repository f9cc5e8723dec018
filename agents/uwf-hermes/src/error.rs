//! What can go wrong in uwf-hermes. Every error leaves the thread unchanged:
//! no StepNode is written, so `uwf` keeps the head where it was.

use crate::transcript::Unfinished;

/// The hermes version uwf-hermes is developed and tested against.
pub const HERMES_VERSION: &str = "0.19.0";

/// A failure of uwf-hermes or of the hermes run it wraps.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum HermesError {
    /// hermes is missing, could not start, did not finish in time, was
    /// interrupted, the prompt is too long, or `UWF_HERMES_ARGS` does not
    /// split (the kit's [`CliError`](uwf_agent_kit::cli_agent::CliError)).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cli(#[from] uwf_agent_kit::cli_agent::CliError),

    /// hermes exited with a non-zero status (or was killed).
    #[error("hermes failed ({status}){}:\n{output}", uwf_agent_kit::cli_agent::session_note(.session))]
    #[diagnostic(
        code(uwf_hermes::failed),
        help(
            "hermes prints its errors on stdout (shown above). Check the model endpoint in $HERMES_HOME/config.yaml (default ~/.hermes) and $HERMES_HOME/logs/errors.log. Nothing was written to the thread."
        )
    )]
    Failed {
        /// `exit status N` or `killed by a signal`.
        status: String,
        /// hermes' stdout (its last part) and stderr.
        output: String,
        /// The session id, when hermes printed one.
        session: Option<String>,
    },

    /// hermes used up its tool-calling budget without a final answer.
    #[error("hermes reached its maximum number of turns{} without a final answer{}:\n{output}", limit.map(|n| format!(" ({n})")).unwrap_or_default(), uwf_agent_kit::cli_agent::session_note(.session))]
    #[diagnostic(
        code(uwf_hermes::max_turns),
        help(
            "raise the budget with `--max-turns N` (or UWF_HERMES_MAX_TURNS) in the agent's command line, or make the role's task smaller. Nothing was written to the thread."
        )
    )]
    MaxTurns {
        /// The budget hermes reported.
        limit: Option<u32>,
        /// What hermes printed instead of an answer.
        output: String,
        /// The session id.
        session: Option<String>,
    },

    /// The model kept returning empty content.
    #[error("hermes got no reply from the model{}:\n{output}", uwf_agent_kit::cli_agent::session_note(.session))]
    #[diagnostic(
        code(uwf_hermes::no_reply),
        help(
            "the model returned empty content on every retry; check the model and its endpoint in $HERMES_HOME/config.yaml. Nothing was written to the thread."
        )
    )]
    NoReply {
        /// What hermes printed.
        output: String,
        /// The session id.
        session: Option<String>,
    },

    /// hermes exited 0 but printed no answer.
    #[error("hermes exited successfully but gave no answer{}", uwf_agent_kit::cli_agent::session_note(.session))]
    #[diagnostic(
        code(uwf_hermes::no_answer),
        help(
            "see the session with `hermes sessions export --session-id <id> -`. Nothing was written to the thread."
        )
    )]
    NoAnswer {
        /// The session id.
        session: Option<String>,
    },

    /// The transcript says the session did not end with a final answer.
    #[error("hermes did not finish session {session}: {why}")]
    #[diagnostic(
        code(uwf_hermes::unfinished),
        help(
            "a finished session ends with an assistant message with finish_reason \"stop\"; see the whole session with `hermes sessions export --session-id {session} -`. Nothing was written to the thread."
        )
    )]
    Unfinished {
        /// The session id.
        session: String,
        /// How the transcript ends.
        why: Unfinished,
    },

    /// The storage root could not be determined or read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Kit(#[from] uwf_agent_kit::KitError),

    /// Storing a detail node failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),
}
