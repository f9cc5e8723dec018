//! What can go wrong in uwf-codex. Every error leaves the thread unchanged:
//! no StepNode is written, so `uwf` keeps the head where it was.

use uwf_agent_kit::cli_agent::CliError;

/// The Codex CLI version uwf-codex is developed and tested against.
pub const CODEX_VERSION: &str = "0.169.0";

/// A failure of uwf-codex or of the Codex run it wraps.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum CodexError {
    /// Codex is missing, could not start, ran too long, was interrupted,
    /// the prompt is too long, or `UWF_CODEX_ARGS` does not split.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cli(#[from] CliError),

    /// No credentials for Codex.
    #[error(
        "no API key for Codex: OPENAI_API_KEY (or CODEX_API_KEY) is not set, Codex is not logged in, and no --provider is given"
    )]
    #[diagnostic(
        code(uwf_codex::missing_key),
        help(
            "add `OPENAI_API_KEY=<your key>` to the .env file of the storage root (`uwf setup --provider openai --api-key - --agent codex` does), or pass `--provider <alias>` to use a provider of config.yaml. Nothing was written to the thread."
        )
    )]
    MissingKey,

    /// `--provider` names a provider config.yaml does not define, or whose
    /// key variable is empty.
    #[error("provider {provider:?}: {why}")]
    #[diagnostic(
        code(uwf_codex::provider),
        help(
            "define it under `providers` in config.yaml (`uwf setup --provider openai`) with `baseUrl` (an OpenAI Responses API root, e.g. https://api.openai.com/v1) and `apiKeyEnv`, and put the key in .env. Nothing was written to the thread."
        )
    )]
    Provider {
        /// The alias.
        provider: String,
        /// What is wrong.
        why: String,
    },

    /// Codex reported a failed turn or an error, or exited non-zero.
    #[error("Codex failed ({status}){}: {message}", thread_note(.thread))]
    #[diagnostic(
        code(uwf_codex::failed),
        help(
            "check the provider (base URL, key, model name) and the sandbox mode. Nothing was written to the thread."
        )
    )]
    Failed {
        /// `exit status N`, `turn failed`, …
        status: String,
        /// Codex's error text, or its output.
        message: String,
        /// The Codex thread id, when it reported one.
        thread: Option<String>,
    },

    /// Codex exited 0 without an agent message.
    #[error("Codex gave no answer{}:\n{output}", thread_note(.thread))]
    #[diagnostic(
        code(uwf_codex::no_answer),
        help(
            "uwf-codex runs `codex exec --json` and takes the last agent_message item as the answer; see the output above. Nothing was written to the thread."
        )
    )]
    NoAnswer {
        /// What it printed.
        output: String,
        /// The thread id.
        thread: Option<String>,
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

fn thread_note(thread: &Option<String>) -> String {
    thread
        .as_deref()
        .map(|s| format!(" (codex thread {s})"))
        .unwrap_or_default()
}
