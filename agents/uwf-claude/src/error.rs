//! What can go wrong in uwf-claude. Every error leaves the thread
//! unchanged: no StepNode is written, so `uwf` keeps the head where it was.

use uwf_agent_kit::cli_agent::CliError;

/// The Claude Code version uwf-claude is developed and tested against.
pub const CLAUDE_VERSION: &str = "2.1.328";

/// A failure of uwf-claude or of the Claude Code run it wraps.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ClaudeError {
    /// Claude Code is missing, could not start, ran too long, was
    /// interrupted, the prompt is too long, or `UWF_CLAUDE_ARGS` does not
    /// split.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cli(#[from] CliError),

    /// No credentials for Claude Code.
    #[error(
        "no API key for Claude Code: ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN) is not set and Claude Code is not logged in"
    )]
    #[diagnostic(
        code(uwf_claude::missing_key),
        help(
            "add `ANTHROPIC_API_KEY=<your key>` to the .env file of the storage root (`uwf setup --provider anthropic --api-key - --agent claude` does), or pass `--provider <alias>` to use a provider of config.yaml. Nothing was written to the thread."
        )
    )]
    MissingKey,

    /// `--provider` names a provider config.yaml does not define, or whose
    /// key variable is empty.
    #[error("provider {provider:?}: {why}")]
    #[diagnostic(
        code(uwf_claude::provider),
        help(
            "define it under `providers` in config.yaml (`uwf setup --provider anthropic`) with `baseUrl` (the Anthropic API root, e.g. https://api.anthropic.com/v1) and `apiKeyEnv`, and put the key in .env. Nothing was written to the thread."
        )
    )]
    Provider {
        /// The alias.
        provider: String,
        /// What is wrong.
        why: String,
    },

    /// Claude Code reported an error (`is_error`), or exited non-zero.
    #[error("Claude Code failed ({status}){}: {message}", uwf_agent_kit::cli_agent::session_note(.session))]
    #[diagnostic(
        code(uwf_claude::failed),
        help(
            "check the model endpoint (ANTHROPIC_BASE_URL), the key and the model name; `--max-turns` if the turn budget ran out. Nothing was written to the thread."
        )
    )]
    Failed {
        /// `exit status N`, the result subtype, …
        status: String,
        /// Claude's error text (its `result`, `errors`, or its output).
        message: String,
        /// The session id, when Claude Code reported one.
        session: Option<String>,
    },

    /// Claude Code exited 0 without a result event or with an empty answer.
    #[error("Claude Code gave no answer{}:\n{output}", uwf_agent_kit::cli_agent::session_note(.session))]
    #[diagnostic(
        code(uwf_claude::no_answer),
        help(
            "uwf-claude runs `claude -p … --output-format stream-json --verbose` and reads the final `result` event; see the output above. Nothing was written to the thread."
        )
    )]
    NoAnswer {
        /// What it printed.
        output: String,
        /// The session id.
        session: Option<String>,
    },

    /// Storing a detail node failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),

    /// The thread's history (for the prompt) cannot be read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Kit(#[from] uwf_agent_kit::KitError),
}
