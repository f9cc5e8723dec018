//! `uwf setup`: configure a provider, a model, its API key and the default
//! agent.
//!
//! Two files in the storage root change, together and under the state lock
//! ([`FsState::edit_config_files`]):
//!
//! - `config.yaml` (no secrets): `providers.<name>.{baseUrl, apiKeyEnv}`,
//!   `models.<alias>.{provider, name}`, `defaultModel`, `agents` and
//!   `defaultAgent`. Everything else in the file is kept; a file that does
//!   not parse is refused and left byte-for-byte alone.
//! - `.env` (keys only): the `VAR=value` line of the provider's key
//!   variable is replaced or appended; other lines and comments stay. The
//!   file is written with mode `0600`.
//!
//! On a shared store (PostgreSQL, see docs/postgres.md) the configuration
//! edited is the one the store keeps for every machine, replaced by
//! compare-and-swap ([`Target::Shared`]); the key still goes to the local
//! `.env`, which never leaves the machine.
//!
//! With flags it is scripted; without flags on a terminal it asks
//! ([`ask`]). The key is never printed: not in the answer, in logs, in
//! errors, nor echoed while typed.

use std::fmt;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dialoguer::console::Term;
use dialoguer::theme::ColorfulTheme;
use dialoguer::{Input, Password, Select};
use miette::Diagnostic;
use nix::sys::termios::{SetArg, tcgetattr, tcsetattr};
use serde::Serialize;
use serde_yaml::{Mapping, Value};
use uwf_protocol::WorkflowConfig;
use uwf_state::ThreadStore;
use uwf_state::state::{
    CONFIG_FILE, ConfigFiles, ConfigFilesWritten, ENV_FILE, FsState, SplitError, StateError,
    split_command_line,
};
use uwf_util::atomic::write_atomic;

use crate::cli::SetupArgs;
use crate::engine::location::{self, StoreLocation};
use crate::error::CliError;

/// A provider preset: where it lives and which variable holds its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// Provider alias written to `config.yaml`.
    pub name: &'static str,
    /// OpenAI-compatible base URL.
    pub base_url: &'static str,
    /// Variable holding the API key.
    pub api_key_env: &'static str,
    /// A model name to suggest when asking.
    pub model: Option<&'static str>,
    /// For local servers that ignore the key: the placeholder written to
    /// `.env` when no key is given, so clients that insist on one work.
    pub dummy_key: Option<&'static str>,
    /// One line for the interactive menu.
    pub about: &'static str,
}

/// The presets, in menu order.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "openai",
        base_url: "https://api.openai.com/v1",
        api_key_env: "OPENAI_API_KEY",
        model: Some("gpt-4o-mini"),
        dummy_key: None,
        about: "OpenAI",
    },
    Preset {
        name: "openrouter",
        base_url: "https://openrouter.ai/api/v1",
        api_key_env: "OPENROUTER_API_KEY",
        model: Some("anthropic/claude-sonnet-4"),
        dummy_key: None,
        about: "OpenRouter (many vendors, one key)",
    },
    Preset {
        name: "anthropic",
        base_url: "https://api.anthropic.com/v1",
        api_key_env: "ANTHROPIC_API_KEY",
        model: Some("claude-sonnet-4-0"),
        dummy_key: None,
        about: "Anthropic (OpenAI-compatible endpoint)",
    },
    Preset {
        name: "deepseek",
        base_url: "https://api.deepseek.com/v1",
        api_key_env: "DEEPSEEK_API_KEY",
        model: Some("deepseek-chat"),
        dummy_key: None,
        about: "DeepSeek",
    },
    Preset {
        name: "groq",
        base_url: "https://api.groq.com/openai/v1",
        api_key_env: "GROQ_API_KEY",
        model: Some("llama-3.3-70b-versatile"),
        dummy_key: None,
        about: "Groq",
    },
    Preset {
        name: "together",
        base_url: "https://api.together.xyz/v1",
        api_key_env: "TOGETHER_API_KEY",
        model: Some("meta-llama/Llama-3.3-70B-Instruct-Turbo"),
        dummy_key: None,
        about: "Together AI",
    },
    Preset {
        name: "mistral",
        base_url: "https://api.mistral.ai/v1",
        api_key_env: "MISTRAL_API_KEY",
        model: Some("mistral-small-latest"),
        dummy_key: None,
        about: "Mistral AI",
    },
    Preset {
        name: "ollama",
        base_url: "http://localhost:11434/v1",
        api_key_env: "OLLAMA_API_KEY",
        model: Some("llama3.2"),
        dummy_key: Some("ollama"),
        about: "Ollama on this machine (no key needed)",
    },
    Preset {
        name: "lmstudio",
        base_url: "http://localhost:1234/v1",
        api_key_env: "LMSTUDIO_API_KEY",
        model: None,
        dummy_key: Some("lm-studio"),
        about: "LM Studio on this machine (no key needed)",
    },
];

/// The preset called `name`, if any.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Agents `uwf setup` knows by alias. `hermes` and `llm` are always
/// defined; `mock`, `claude`, `codex` and `tools` only when asked for.
const BUILTIN_AGENTS: &[(&str, &str, &str)] = &[
    (
        "hermes",
        "uwf-hermes",
        "full agent runtime (tools, many turns)",
    ),
    ("llm", "uwf-llm", "one LLM call per step (cheap roles)"),
    ("mock", "uwf-mock", "scripted answers, for tests"),
    (
        "claude",
        "uwf-claude",
        "Claude Code (needs `claude`; key: ANTHROPIC_API_KEY, e.g. --provider anthropic)",
    ),
    (
        "codex",
        "uwf-codex",
        "OpenAI Codex CLI (needs `codex`; key: OPENAI_API_KEY, e.g. --provider openai)",
    ),
    (
        "tools",
        "uwf-agent",
        "built-in agent with tools (files, search, commands) in the working directory",
    ),
];

/// The built-in agents offered in the interactive menu: all but `mock`.
fn menu_agents() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)> {
    BUILTIN_AGENTS.iter().filter(|(alias, ..)| *alias != "mock")
}

/// The first line of every `config.yaml` setup writes.
const CONFIG_HEADER: &str = "# uwf configuration (written by `uwf setup`; edit freely). No secrets here:\n# API keys live in .env next to this file. Check it with `uwf config show`.\n";

/// The flags, for error messages.
const FLAGS: &str = "--provider NAME, --base-url URL, --api-key KEY (- reads stdin), --api-key-env VAR, --model NAME, --model-alias ALIAS, --agent AGENT";

/// An API key. Never printed: `Debug` shows a placeholder and there is no
/// `Display` or `Serialize`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The key itself, for writing to `.env`.
    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Why `uwf setup` refused. No variant ever holds an API key.
#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum SetupError {
    /// No flags and no terminal to ask on.
    #[error("`uwf setup` got no flags and stdin is not a terminal, so there is nobody to ask")]
    #[diagnostic(
        code(uwf::setup::no_input),
        help("pass what to configure: {FLAGS}; or run `uwf setup` in a terminal to be asked")
    )]
    NoInput,
    /// stdin is a terminal but stderr, where questions go, is not.
    #[error("interactive setup asks its questions on stderr, which is not a terminal")]
    #[diagnostic(
        code(uwf::setup::no_terminal),
        help("do not redirect stderr, or pass flags instead: {FLAGS}")
    )]
    NoPromptTerminal,
    /// The user left a menu (Esc or q).
    #[error("setup cancelled; nothing was written")]
    #[diagnostic(code(uwf::setup::cancelled))]
    Cancelled,
    /// Ctrl-C (or SIGTERM, SIGHUP) while the questions were open.
    #[error("setup cancelled by an interrupt; nothing was written")]
    #[diagnostic(code(uwf::setup::interrupted))]
    Interrupted,
    /// Reading an answer from the terminal failed.
    #[error("cannot ask on the terminal: {0}")]
    #[diagnostic(code(uwf::setup::prompt))]
    Prompt(String),
    /// A provider name that is neither a preset nor configured, without a URL.
    #[error(
        "unknown provider {name:?}: not a preset and not in config.yaml, and no --base-url given"
    )]
    #[diagnostic(
        code(uwf::setup::unknown_provider),
        help(
            "presets: {presets}; for another OpenAI-compatible endpoint pass --base-url URL (and optionally --api-key-env VAR)"
        )
    )]
    UnknownProvider {
        /// The name given.
        name: String,
        /// The preset names, comma-separated.
        presets: String,
    },
    /// A flag that needs a provider, with no way to tell which.
    #[error(
        "{flag} needs a provider, and config.yaml has {}",
        configured_text(configured)
    )]
    #[diagnostic(
        code(uwf::setup::which_provider),
        help("pass --provider NAME (a preset, or a configured provider)")
    )]
    WhichProvider {
        /// The flag.
        flag: &'static str,
        /// The configured providers.
        configured: Vec<String>,
    },
    /// A base URL that is not an http(s) URL.
    #[error("invalid base URL {url:?}: {reason}")]
    #[diagnostic(
        code(uwf::setup::url),
        help(
            "give an http or https URL, e.g. https://api.example.com/v1 or http://localhost:11434/v1"
        )
    )]
    BadUrl {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A base URL with a user name or password in it (not repeated: it may
    /// be a secret).
    #[error("the base URL contains credentials (user:password@); they are not shown or stored")]
    #[diagnostic(
        code(uwf::setup::url_credentials),
        help("drop them from the URL and pass the key with --api-key; it goes to .env")
    )]
    UrlCredentials,
    /// An empty or malformed name.
    #[error("invalid {what} {value:?}: {reason}")]
    #[diagnostic(code(uwf::setup::name))]
    BadName {
        /// Which name.
        what: &'static str,
        /// The value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// An invalid environment variable name.
    #[error("invalid variable name {0:?} for the API key")]
    #[diagnostic(
        code(uwf::setup::env_var),
        help("use letters, digits and _, not starting with a digit, e.g. OPENAI_API_KEY")
    )]
    BadEnvVar(String),
    /// An unusable key (the key itself is not shown).
    #[error("the API key {0}")]
    #[diagnostic(
        code(uwf::setup::key),
        help("pass the key exactly as the provider gave it; --api-key - reads it from stdin")
    )]
    BadKey(&'static str),
    /// Reading the key from stdin failed.
    #[error("cannot read the API key from stdin: {0}")]
    #[diagnostic(code(uwf::setup::key_stdin))]
    ReadKey(#[source] std::io::Error),
    /// `--agent` is not an alias and not a valid command line.
    #[error("invalid --agent {agent:?}: {source}")]
    #[diagnostic(
        code(uwf::setup::agent),
        help(
            "give an agent alias (hermes, llm, claude, codex, mock, or one under `agents:`) or a command line"
        )
    )]
    BadAgent {
        /// The value.
        agent: String,
        /// Why it cannot be split.
        source: SplitError,
    },
    /// `.env` could not be edited safely (its content is not shown).
    #[error("cannot update {}: {message}", path.display())]
    #[diagnostic(
        code(uwf::setup::env_edit),
        help("edit the file by hand; entries look like NAME=value")
    )]
    EnvEdit {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The shared configuration kept changing under us.
    #[error("the configuration in {} kept changing while uwf setup ran; it was not changed", path.display())]
    #[diagnostic(
        code(uwf::setup::shared_busy),
        help("someone else is editing it: run uwf setup again in a moment")
    )]
    SharedBusy {
        /// Where the shared configuration is.
        path: PathBuf,
    },
    /// `config.yaml` parses but has a shape setup cannot merge into.
    #[error("cannot merge into {}: {message}", path.display())]
    #[diagnostic(
        code(uwf::setup::config_shape),
        help("fix the file by hand; `providers`, `models` and `agents` must be mappings")
    )]
    ConfigShape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

fn configured_text(configured: &[String]) -> String {
    if configured.is_empty() {
        "none".to_owned()
    } else {
        format!("several ({})", configured.join(", "))
    }
}

impl From<SetupError> for CliError {
    fn from(e: SetupError) -> Self {
        CliError::Setup(Box::new(e))
    }
}

/// What to configure, from flags or from the questions.
#[derive(Debug, Default)]
pub struct Request {
    /// The provider alias (`None`: the only configured one, if needed).
    pub provider: Option<String>,
    /// Its base URL (`None`: keep the configured one, or the preset's).
    pub base_url: Option<String>,
    /// Its key variable (`None`: keep, or the preset's, or derived).
    pub api_key_env: Option<String>,
    /// The key.
    pub api_key: Option<Secret>,
    /// The provider's model name.
    pub model: Option<String>,
    /// The model's alias (`None`: derived from the name).
    pub model_alias: Option<String>,
    /// The default agent: alias or command line.
    pub agent: Option<String>,
}

/// The answer `uwf setup` prints. Holds no key.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `config.yaml`.
    pub config: PathBuf,
    /// `.env` when it was written, else `null`.
    pub env: Option<PathBuf>,
    /// The provider configured, if any.
    pub provider: Option<String>,
    /// The variable holding its key.
    pub api_key_env: Option<String>,
    /// The model alias configured, if any.
    pub model: Option<String>,
    /// `defaultModel` after setup.
    pub default_model: Option<String>,
    /// `defaultAgent` after setup.
    pub default_agent: Option<String>,
    /// What changed: `providers.<name>`, `models.<alias>`, `agents.<alias>`,
    /// `defaultModel`, `defaultAgent`, `.env:<VAR>`, `.env:mode`.
    pub changed: Vec<String>,
    /// A copy of the previous `config.yaml`, written when its comments
    /// could not be kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<PathBuf>,
}

/// Where `uwf setup` keeps the configuration it edits.
pub enum Target<'a> {
    /// `config.yaml` of the root: the filesystem store's.
    Root,
    /// The configuration a shared store keeps for every machine; `origin`
    /// names it in messages. API keys still go to the root's `.env`.
    Shared {
        /// The store.
        store: &'a dyn ThreadStore,
        /// Where the configuration is, as messages name it.
        origin: PathBuf,
    },
}

/// How many times a shared configuration is read, merged and swapped in
/// before giving up: each failed swap means someone else just wrote it.
const SHARED_ATTEMPTS: usize = 5;

/// Runs `uwf setup` on the store `store` names (`--store`), or the one the
/// settings of `root` name. A filesystem store is a directory holding
/// everything; a shared store keeps the configuration for every machine,
/// and the keys (`.env`) stay in the root.
pub fn run_at(root: &Path, store: Option<&str>, args: SetupArgs) -> Result<Report, CliError> {
    let (location, _) = location::resolve(store, root)?;
    match &location {
        StoreLocation::Dir(dir) => run(&FsState::new(dir), &Target::Root, args),
        StoreLocation::Url(_) => {
            let engine = location::open(root, &location)?;
            let target = Target::Shared {
                store: engine.state(),
                origin: engine.state().config_name().into(),
            };
            run(&FsState::new(root), &target, args)
        }
    }
}

/// Runs `uwf setup`.
pub fn run(state: &FsState, target: &Target<'_>, args: SetupArgs) -> Result<Report, CliError> {
    let interactive = args.provider.is_none()
        && args.base_url.is_none()
        && args.api_key.is_none()
        && args.api_key_env.is_none()
        && args.model.is_none()
        && args.model_alias.is_none()
        && args.agent.is_none();
    let request = if interactive {
        if !std::io::stdin().is_terminal() {
            return Err(SetupError::NoInput.into());
        }
        if !std::io::stderr().is_terminal() {
            return Err(SetupError::NoPromptTerminal.into());
        }
        // Refuses a broken configuration or .env before asking anything.
        let mut files = state.config_files()?;
        if let Target::Shared { store, origin } = target {
            files.config = shared_text(*store, origin)?;
        }
        let config_path = match target {
            Target::Root => state.config_path(),
            Target::Shared { origin, .. } => origin.clone(),
        };
        ask_interruptibly(state.clone(), config_path, files)?
    } else {
        request_from_args(args)?
    };
    let request = validate(request)?;
    let report = match target {
        Target::Root => apply_request(state, &request)?,
        Target::Shared { store, origin } => apply_shared(state, *store, origin, &request)?,
    };
    if interactive {
        let env = match &report.env {
            Some(env) => format!(" and {}", env.display()),
            None => String::new(),
        };
        eprintln!(
            "Saved {}{env}. Check with `uwf config show`.",
            report.config.display()
        );
    }
    Ok(report)
}

/// The request the flags describe (reading the key from stdin for `-`).
fn request_from_args(args: SetupArgs) -> Result<Request, SetupError> {
    let api_key = match args.api_key {
        Some(key) if key == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(SetupError::ReadKey)?;
            Some(Secret(text))
        }
        Some(key) => Some(Secret(key)),
        None => None,
    };
    Ok(Request {
        provider: args.provider,
        base_url: args.base_url,
        api_key_env: args.api_key_env,
        api_key,
        model: args.model,
        model_alias: args.model_alias,
        agent: args.agent,
    })
}

/// Trims and checks every field of `request`.
fn validate(mut r: Request) -> Result<Request, SetupError> {
    if let Some(name) = &mut r.provider {
        *name = name.trim().to_owned();
        check_alias("provider name", name)?;
    }
    if let Some(url) = &mut r.base_url {
        *url = check_url(url)?;
    }
    if let Some(var) = &mut r.api_key_env {
        *var = var.trim().to_owned();
        check_env_var(var)?;
    }
    if let Some(key) = &mut r.api_key {
        *key = check_key(key)?;
    }
    if let Some(model) = &mut r.model {
        *model = model.trim().to_owned();
        check_model_name(model)?;
    }
    if let Some(alias) = &mut r.model_alias {
        *alias = alias.trim().to_owned();
        check_alias("model alias", alias)?;
    }
    if let Some(agent) = &mut r.agent {
        *agent = agent.trim().to_owned();
        if agent.is_empty() {
            return Err(SetupError::BadName {
                what: "agent",
                value: String::new(),
                reason: "it is empty",
            });
        }
    }
    Ok(r)
}

/// An alias: letters, digits, `.`, `_`, `-`, starting with a letter or digit.
fn check_alias(what: &'static str, name: &str) -> Result<(), SetupError> {
    let bad = |reason| {
        Err(SetupError::BadName {
            what,
            value: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.chars().count() > 64 {
        return bad("it is longer than 64 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("it must start with a letter or a digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return bad("use letters, digits, '.', '_' and '-' only");
    }
    Ok(())
}

/// A provider's model name: anything printable without whitespace.
fn check_model_name(name: &str) -> Result<(), SetupError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "it contains whitespace or control characters"
    } else {
        return Ok(());
    };
    Err(SetupError::BadName {
        what: "model name",
        value: name.to_owned(),
        reason,
    })
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn check_env_var(var: &str) -> Result<(), SetupError> {
    let ok = var.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(SetupError::BadEnvVar(var.to_owned()))
    }
}

/// The key without surrounding whitespace; refuses empty keys and keys
/// with inner whitespace or control characters.
fn check_key(key: &Secret) -> Result<Secret, SetupError> {
    let key = key.expose().trim();
    if key.is_empty() {
        return Err(SetupError::BadKey("is empty"));
    }
    if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SetupError::BadKey(
            "contains whitespace or control characters",
        ));
    }
    Ok(Secret(key.to_owned()))
}

/// Checks an http(s) URL; returns it trimmed, without a trailing `/`.
pub fn check_url(url: &str) -> Result<String, SetupError> {
    let trimmed = url.trim();
    let bad = |reason: &str| SetupError::BadUrl {
        url: trimmed.to_owned(),
        reason: reason.to_owned(),
    };
    let parsed = url::Url::parse(trimmed).map_err(|e| match e {
        url::ParseError::RelativeUrlWithoutBase => {
            bad("it has no scheme; start it with https:// or http://")
        }
        other => bad(&other.to_string()),
    })?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(SetupError::UrlCredentials);
    }
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(&format!(
            "the scheme is {:?}; only http and https are supported",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host"));
    }
    Ok(trimmed.trim_end_matches('/').to_owned())
}

/// `<NAME>_API_KEY` with everything but letters and digits turned into `_`.
fn derived_env_var(provider: &str) -> String {
    let mut var: String = provider
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if var.starts_with(|c: char| c.is_ascii_digit()) {
        var.insert(0, '_');
    }
    var.push_str("_API_KEY");
    var
}

/// A model alias from a model name: its last `/` segment, with anything
/// but letters, digits, `.`, `_`, `-` turned into `-`.
pub fn derived_model_alias(name: &str) -> String {
    let last = name.rsplit('/').find(|s| !s.is_empty()).unwrap_or(name);
    let alias: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let alias = alias.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    if alias.is_empty() {
        "model".to_owned()
    } else {
        alias.chars().take(64).collect()
    }
}

// ----- applying ------------------------------------------------------------

/// Writes what `request` asks for, under the state lock.
fn apply_request(state: &FsState, request: &Request) -> Result<Report, CliError> {
    let config_path = state.config_path();
    let env_path = state.env_path();
    let backup_path = state.root().join(format!("{CONFIG_FILE}.bak"));
    let (written, mut report) = state.edit_config_files(|files| {
        let (new, mut report) = merge(files, request, &config_path, &env_path)?;
        // Rewriting drops comments: keep the previous file next to it.
        if let (Some(_), Some(old)) = (&new.config, &files.config)
            && has_own_comments(old)
        {
            write_atomic(&backup_path, old.as_bytes()).map_err(StateError::from)?;
            report.backup = Some(backup_path.clone());
        }
        Ok::<_, CliError>((new, report))
    })?;
    note_env(&mut report, &written, &env_path);
    if let Some(backup) = &report.backup {
        tracing::warn!(
            "comments in {} cannot be kept when it is rewritten; the previous file is saved as {}",
            config_path.display(),
            backup.display()
        );
    }
    Ok(report)
}

/// Records in `report` what was done to `.env` (at `env_path`).
fn note_env(report: &mut Report, written: &ConfigFilesWritten, env_path: &Path) {
    if written.env {
        report.env = Some(env_path.to_path_buf());
    }
    if let Some(mode) = written.env_loose_mode {
        tracing::warn!(
            "{} was accessible to other users (mode {mode:04o}); rewrote it with mode 0600",
            env_path.display()
        );
        report.changed.push(".env:mode".to_owned());
    }
}

/// The shared configuration's text, refused when it does not parse.
fn shared_text(store: &dyn ThreadStore, origin: &Path) -> Result<Option<String>, StateError> {
    let text = store.config_text()?;
    if let Some(text) = &text {
        uwf_state::parse_stored_config(&origin.to_string_lossy(), text)?;
    }
    Ok(text)
}

/// [`apply_request`] for a shared store: the key into the local `.env`
/// (under the state lock), the rest into the store's configuration by
/// compare-and-swap, read and merged again when someone else wrote it
/// meanwhile (writing the same `.env` line again changes nothing).
fn apply_shared(
    state: &FsState,
    store: &dyn ThreadStore,
    origin: &Path,
    request: &Request,
) -> Result<Report, CliError> {
    let env_path = state.env_path();
    let backup_path = state.root().join(format!("shared-{CONFIG_FILE}.bak"));
    for _ in 0..SHARED_ATTEMPTS {
        let shared = shared_text(store, origin)?;
        let (written, (mut report, new_config)) = state.edit_config_files(|files| {
            let view = ConfigFiles {
                config: shared.clone(),
                env: files.env.clone(),
            };
            let (new, report) = merge(&view, request, origin, &env_path)?;
            // The local config.yaml (its `store:`) is left as it is.
            let local = ConfigFiles {
                config: None,
                env: new.env,
            };
            Ok::<_, CliError>((local, (report, new.config)))
        })?;
        note_env(&mut report, &written, &env_path);
        let Some(text) = new_config else {
            return Ok(report);
        };
        if let Some(old) = &shared
            && has_own_comments(old)
        {
            write_atomic(&backup_path, old.as_bytes()).map_err(StateError::from)?;
            report.backup = Some(backup_path.clone());
        }
        if store.replace_config_text(shared.as_deref(), &text)? {
            if let Some(backup) = &report.backup {
                tracing::warn!(
                    "comments in {} cannot be kept when it is rewritten; the previous text is saved as {}",
                    origin.display(),
                    backup.display()
                );
            }
            return Ok(report);
        }
        tracing::debug!("the shared configuration changed meanwhile; merging again");
    }
    Err(SetupError::SharedBusy {
        path: origin.to_path_buf(),
    }
    .into())
}

/// Whether `text` has comments other than [`CONFIG_HEADER`] (a heuristic:
/// a line starting with `#`, or ` #` inside a line).
fn has_own_comments(text: &str) -> bool {
    let text = text.strip_prefix(CONFIG_HEADER).unwrap_or(text);
    text.lines()
        .any(|l| l.trim_start().starts_with('#') || l.contains(" #"))
}

/// The new texts of `config.yaml` and `.env` (`None`: unchanged) and the
/// report, from the current texts and the request.
fn merge(
    files: &ConfigFiles,
    request: &Request,
    config_path: &Path,
    env_path: &Path,
) -> Result<(ConfigFiles, Report), SetupError> {
    let shape = |message: String| SetupError::ConfigShape {
        path: config_path.to_path_buf(),
        message,
    };
    // Already checked by `edit_config_files`, so these parse.
    let typed: WorkflowConfig = match &files.config {
        Some(text) => serde_yaml::from_str::<Option<WorkflowConfig>>(text)
            .map_err(|e| shape(e.to_string()))?
            .unwrap_or_default(),
        None => WorkflowConfig::default(),
    };
    let old: Mapping = match &files.config {
        Some(text) => {
            match serde_yaml::from_str::<Value>(text).map_err(|e| shape(e.to_string()))? {
                Value::Mapping(m) => m,
                Value::Null => Mapping::new(),
                _ => return Err(shape("the file is not a mapping".to_owned())),
            }
        }
        None => Mapping::new(),
    };
    let mut doc = old.clone();
    let mut env_text = files.env.clone();
    let mut changed = Vec::new();

    // Provider.
    let needs_provider = [
        (request.base_url.is_some(), "--base-url"),
        (request.api_key_env.is_some(), "--api-key-env"),
        (request.api_key.is_some(), "--api-key"),
        (request.model.is_some(), "--model"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag));
    let provider = match (&request.provider, needs_provider) {
        (Some(name), _) => Some(name.clone()),
        (None, Some(flag)) => match typed.providers.keys().collect::<Vec<_>>()[..] {
            [only] => Some(only.clone()),
            _ => {
                return Err(SetupError::WhichProvider {
                    flag,
                    configured: typed.providers.keys().cloned().collect(),
                });
            }
        },
        (None, None) => None,
    };
    let mut api_key_env = None;
    if let Some(name) = &provider {
        let existing = typed.providers.get(name);
        let preset = preset(name);
        let base_url = match (&request.base_url, existing, preset) {
            (Some(url), _, _) => url.clone(),
            (None, Some(p), _) => p.base_url.clone(),
            (None, None, Some(p)) => p.base_url.to_owned(),
            (None, None, None) => {
                return Err(SetupError::UnknownProvider {
                    name: name.clone(),
                    presets: PRESETS
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        };
        let var = match (&request.api_key_env, existing, preset) {
            (Some(var), _, _) => var.clone(),
            (None, Some(p), _) => p.api_key_env.clone(),
            (None, None, Some(p)) => p.api_key_env.to_owned(),
            (None, None, None) => derived_env_var(name),
        };
        let entry = entry_mut(section_mut(&mut doc, "providers", &shape)?, name, &shape)?;
        entry.insert(s("baseUrl"), s(&base_url));
        entry.insert(s("apiKeyEnv"), s(&var));

        // The key, or a placeholder for local servers.
        let key = match (&request.api_key, preset) {
            (Some(key), _) => Some(key.expose().to_owned()),
            (
                None,
                Some(Preset {
                    dummy_key: Some(dummy),
                    ..
                }),
            ) if env_lookup(env_text.as_deref(), &var).is_none() => Some((*dummy).to_owned()),
            _ => None,
        };
        if let Some(key) = key {
            let (text, did_change) = set_env_var(env_text.as_deref(), &var, &key, env_path)?;
            if did_change {
                changed.push(format!("{ENV_FILE}:{var}"));
                env_text = Some(text);
            }
        }
        api_key_env = Some(var);
    }

    // Model.
    let mut model_alias = None;
    if let (Some(model), Some(provider)) = (&request.model, &provider) {
        let alias = request
            .model_alias
            .clone()
            .unwrap_or_else(|| derived_model_alias(model));
        let entry = entry_mut(section_mut(&mut doc, "models", &shape)?, &alias, &shape)?;
        entry.insert(s("provider"), s(provider));
        entry.insert(s("name"), s(model));
        doc.insert(s("defaultModel"), s(&alias));
        model_alias = Some(alias);
    }

    // Agents: hermes and llm always exist; the default from --agent.
    {
        let agents = section_mut(&mut doc, "agents", &shape)?;
        for (alias, command, _) in &BUILTIN_AGENTS[..2] {
            if !agents.contains_key(*alias) {
                agents.insert(s(alias), agent_value(command, &[]));
            }
        }
    }
    let default_agent = match &request.agent {
        Some(agent) => Some(resolve_agent_alias(&mut doc, agent, &shape)?),
        None if typed.default_agent.is_none() => Some("hermes".to_owned()),
        None => None,
    };
    if let Some(alias) = default_agent {
        doc.insert(s("defaultAgent"), s(&alias));
    }

    if files.config.is_none() {
        doc = canonical_order(doc);
    }
    changed.splice(0..0, diff(&old, &doc));
    let new_config = if files.config.is_none() || doc != old {
        let body = serde_yaml::to_string(&Value::Mapping(doc.clone()))
            .map_err(|e| shape(e.to_string()))?;
        Some(format!("{CONFIG_HEADER}{body}"))
    } else {
        None
    };
    let string_at = |key: &str| doc.get(key).and_then(Value::as_str).map(str::to_owned);
    let report = Report {
        config: config_path.to_path_buf(),
        env: None,
        provider,
        api_key_env,
        model: model_alias,
        default_model: string_at("defaultModel"),
        default_agent: string_at("defaultAgent"),
        changed,
        backup: None,
    };
    let env = if env_text != files.env {
        env_text
    } else {
        None
    };
    Ok((
        ConfigFiles {
            config: new_config,
            env,
        },
        report,
    ))
}

/// `doc` with the known top-level keys in the order the documentation
/// uses, then anything else.
fn canonical_order(mut doc: Mapping) -> Mapping {
    const ORDER: [&str; 8] = [
        "providers",
        "models",
        "agents",
        "defaultAgent",
        "agentOverrides",
        "defaultModel",
        "modelOverrides",
        "roleModels",
    ];
    let mut out = Mapping::new();
    for key in ORDER {
        if let Some(value) = doc.shift_remove(key) {
            out.insert(s(key), value);
        }
    }
    out.extend(doc);
    out
}

fn s(text: &str) -> Value {
    Value::String(text.to_owned())
}

fn agent_value(command: &str, args: &[String]) -> Value {
    let mut m = Mapping::new();
    m.insert(s("command"), s(command));
    m.insert(
        s("args"),
        Value::Sequence(args.iter().map(|a| s(a)).collect()),
    );
    Value::Mapping(m)
}

/// The mapping under top-level `key`, created if missing or null.
fn section_mut<'a>(
    doc: &'a mut Mapping,
    key: &str,
    shape: &impl Fn(String) -> SetupError,
) -> Result<&'a mut Mapping, SetupError> {
    let value = doc.entry(s(key)).or_insert(Value::Null);
    if value.is_null() {
        *value = Value::Mapping(Mapping::new());
    }
    value
        .as_mapping_mut()
        .ok_or_else(|| shape(format!("`{key}` is not a mapping")))
}

/// The mapping under `name` in `section`, created if missing or null.
fn entry_mut<'a>(
    section: &'a mut Mapping,
    name: &str,
    shape: &impl Fn(String) -> SetupError,
) -> Result<&'a mut Mapping, SetupError> {
    let value = section.entry(s(name)).or_insert(Value::Null);
    if value.is_null() {
        *value = Value::Mapping(Mapping::new());
    }
    value
        .as_mapping_mut()
        .ok_or_else(|| shape(format!("the entry `{name}` is not a mapping")))
}

/// The alias `--agent` names, defining it under `agents` if needed: an
/// existing alias, a built-in one (`hermes`, `llm`, `mock`), the alias of
/// an identical command, or a new alias for the command line.
fn resolve_agent_alias(
    doc: &mut Mapping,
    agent: &str,
    shape: &impl Fn(String) -> SetupError,
) -> Result<String, SetupError> {
    let agents = section_mut(doc, "agents", shape)?;
    if agents.contains_key(agent) {
        return Ok(agent.to_owned());
    }
    if let Some((alias, command, _)) = BUILTIN_AGENTS.iter().find(|(a, ..)| *a == agent) {
        agents.insert(s(alias), agent_value(command, &[]));
        return Ok((*alias).to_owned());
    }
    let mut words = split_command_line(agent).map_err(|source| SetupError::BadAgent {
        agent: agent.to_owned(),
        source,
    })?;
    if words.first().is_none_or(String::is_empty) {
        return Err(SetupError::BadAgent {
            agent: agent.to_owned(),
            source: SplitError::Empty,
        });
    }
    let command = words.remove(0);
    let wanted = agent_value(&command, &words);
    if let Some(alias) = agents
        .iter()
        .find(|(_, v)| **v == wanted)
        .and_then(|(alias, _)| alias.as_str())
    {
        return Ok(alias.to_owned());
    }
    let base = Path::new(&command)
        .file_stem()
        .and_then(|n| n.to_str())
        .map(|n| n.strip_prefix("uwf-").unwrap_or(n))
        .map(derived_model_alias)
        .unwrap_or_else(|| "agent".to_owned());
    let alias = (1..)
        .map(|i| {
            if i == 1 {
                base.clone()
            } else {
                format!("{base}-{i}")
            }
        })
        .find(|a| !agents.contains_key(a.as_str()))
        .unwrap_or(base);
    agents.insert(s(&alias), wanted);
    Ok(alias)
}

/// What differs between two versions of `config.yaml`: per entry for
/// `providers`, `models` and `agents`, per key otherwise.
fn diff(old: &Mapping, new: &Mapping) -> Vec<String> {
    let empty = Mapping::new();
    let mut out = Vec::new();
    for (key, value) in new {
        let Some(key) = key.as_str() else { continue };
        let before = old.get(key);
        if before == Some(value) {
            continue;
        }
        match (key, value) {
            ("providers" | "models" | "agents", Value::Mapping(entries)) => {
                let before = before.and_then(Value::as_mapping).unwrap_or(&empty);
                for (name, entry) in entries {
                    if before.get(name) != Some(entry)
                        && let Some(name) = name.as_str()
                    {
                        out.push(format!("{key}.{name}"));
                    }
                }
            }
            _ => out.push(key.to_owned()),
        }
    }
    out
}

// ----- .env ------------------------------------------------------------------

/// The value of `var` in `.env` text (see [`uwf_state::env::lookup`]).
fn env_lookup(text: Option<&str>, var: &str) -> Option<String> {
    uwf_state::env::lookup(text, var)
}

/// Whether `.env` text defines `var`.
pub fn env_defines(text: Option<&str>, var: &str) -> bool {
    uwf_state::env::lookup(text, var).is_some()
}

/// `.env` text with `var` set to `value` (see [`uwf_state::env::set_var`]);
/// errors name `path` and never show the value.
fn set_env_var(
    text: Option<&str>,
    var: &str,
    value: &str,
    path: &Path,
) -> Result<(String, bool), SetupError> {
    uwf_state::env::set_var(text, var, value).map_err(|e| SetupError::EnvEdit {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

// ----- asking ----------------------------------------------------------------

/// Asks for a provider, base URL, model, key (hidden) and default agent.
fn ask(state: &FsState, config_path: &Path, files: &ConfigFiles) -> Result<Request, CliError> {
    // Checked when `files` was read.
    let config: WorkflowConfig = match &files.config {
        Some(text) => uwf_state::parse_config(config_path, text)?,
        None => WorkflowConfig::default(),
    };
    let theme = ColorfulTheme::default();
    let term = Term::stderr();
    let prompt_err = |e: dialoguer::Error| {
        // Ctrl-C in a menu arrives as a read error (the flag may lag).
        let dialoguer::Error::IO(io) = &e;
        if io.kind() == std::io::ErrorKind::Interrupted || crate::engine::interrupted() {
            return SetupError::Interrupted;
        }
        SetupError::Prompt(e.to_string())
    };
    eprintln!(
        "uwf setup: writes {} (no secrets) and {} (API keys, mode 0600).",
        config_path.display(),
        state.env_path().display()
    );

    // Provider: presets, configured custom ones, or a new custom one.
    let custom: Vec<(&String, &uwf_protocol::ProviderConfig)> = config
        .providers
        .iter()
        .filter(|(name, _)| preset(name).is_none())
        .collect();
    let mut items: Vec<String> = PRESETS
        .iter()
        .map(|p| format!("{:<11}{}", p.name, p.about))
        .collect();
    items.extend(
        custom
            .iter()
            .map(|(name, p)| format!("{name:<11}{} (configured)", p.base_url)),
    );
    items.push(format!(
        "{:<11}another OpenAI-compatible endpoint",
        "custom"
    ));
    let current_provider = config
        .default_model
        .as_ref()
        .and_then(|m| config.models.get(m))
        .map(|m| m.provider.clone());
    let names: Vec<String> = PRESETS
        .iter()
        .map(|p| p.name.to_owned())
        .chain(custom.iter().map(|(n, _)| (*n).clone()))
        .collect();
    let default = current_provider
        .as_ref()
        .and_then(|p| names.iter().position(|n| n == p))
        .unwrap_or(0);
    let choice = Select::with_theme(&theme)
        .with_prompt("Provider")
        .items(&items)
        .default(default)
        .interact_on_opt(&term)
        .map_err(prompt_err)?
        .ok_or(SetupError::Cancelled)?;

    let (name, default_url, default_var) = if let Some(name) = names.get(choice) {
        let existing = config.providers.get(name);
        let preset = preset(name);
        let url = existing
            .map(|p| p.base_url.clone())
            .or_else(|| preset.map(|p| p.base_url.to_owned()));
        let var = existing
            .map(|p| p.api_key_env.clone())
            .or_else(|| preset.map(|p| p.api_key_env.to_owned()))
            .unwrap_or_else(|| derived_env_var(name));
        (name.clone(), url, var)
    } else {
        let name: String = Input::with_theme(&theme)
            .with_prompt("Provider name")
            .validate_with(|v: &String| {
                check_alias("provider name", v.trim()).map_err(|e| e.to_string())
            })
            .interact_text_on(&term)
            .map_err(prompt_err)?;
        let name = name.trim().to_owned();
        let var = derived_env_var(&name);
        (name, None, var)
    };

    let mut url_input = Input::<String>::with_theme(&theme).with_prompt("Base URL");
    if let Some(url) = &default_url {
        url_input = url_input.default(url.clone());
    }
    let base_url = url_input
        .validate_with(|v: &String| check_url(v).map(drop).map_err(|e| e.to_string()))
        .interact_text_on(&term)
        .map_err(prompt_err)?;

    let api_key_env = if names.get(choice).is_some() {
        default_var
    } else {
        let var: String = Input::with_theme(&theme)
            .with_prompt("Variable for the API key")
            .default(default_var)
            .validate_with(|v: &String| check_env_var(v.trim()).map_err(|e| e.to_string()))
            .interact_text_on(&term)
            .map_err(prompt_err)?;
        var.trim().to_owned()
    };

    // Model: the current one of this provider, else the preset's suggestion.
    let current_model = config
        .models
        .iter()
        .filter(|(_, m)| m.provider == name)
        .max_by_key(|(alias, _)| config.default_model.as_ref() == Some(*alias))
        .map(|(alias, m)| (alias.clone(), m.name.clone()));
    let mut model_input = Input::<String>::with_theme(&theme).with_prompt("Model name");
    if let Some(model) = current_model
        .as_ref()
        .map(|(_, n)| n.clone())
        .or_else(|| preset(&name).and_then(|p| p.model).map(str::to_owned))
    {
        model_input = model_input.default(model);
    }
    let model = model_input
        .validate_with(|v: &String| check_model_name(v.trim()).map_err(|e| e.to_string()))
        .interact_text_on(&term)
        .map_err(prompt_err)?;
    let model = model.trim().to_owned();
    let alias_default = match &current_model {
        Some((alias, n)) if *n == model => alias.clone(),
        _ => derived_model_alias(&model),
    };
    let alias: String = Input::with_theme(&theme)
        .with_prompt("Model alias (used in config.yaml)")
        .default(alias_default)
        .validate_with(|v: &String| check_alias("model alias", v.trim()).map_err(|e| e.to_string()))
        .interact_text_on(&term)
        .map_err(prompt_err)?;

    // The key, hidden.
    let hint = if env_defines(files.env.as_deref(), &api_key_env) {
        "; empty keeps the current one"
    } else if preset(&name).is_some_and(|p| p.dummy_key.is_some()) {
        "; not needed here, empty is fine"
    } else {
        "; empty to set it later"
    };
    let key = Password::with_theme(&theme)
        .with_prompt(format!(
            "API key (stored in .env as {api_key_env}; hidden{hint})"
        ))
        .allow_empty_password(true)
        .interact_on(&term)
        .map_err(prompt_err)?;
    let api_key = (!key.trim().is_empty()).then_some(Secret(key));

    // Default agent.
    let mut agent_names: Vec<String> = Vec::new();
    let mut agent_items: Vec<String> = Vec::new();
    for (alias, command, about) in menu_agents() {
        agent_names.push((*alias).to_owned());
        agent_items.push(format!("{alias:<11}{command}: {about}"));
    }
    for (alias, agent) in &config.agents {
        if !agent_names.contains(alias) {
            agent_names.push(alias.clone());
            let line = std::iter::once(agent.command.as_str())
                .chain(agent.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            agent_items.push(format!("{alias:<11}{line} (configured)"));
        }
    }
    let default = config
        .default_agent
        .as_ref()
        .and_then(|a| agent_names.iter().position(|n| n == a))
        .unwrap_or(0);
    let agent = Select::with_theme(&theme)
        .with_prompt("Default agent")
        .items(&agent_items)
        .default(default)
        .interact_on_opt(&term)
        .map_err(prompt_err)?
        .ok_or(SetupError::Cancelled)?;

    Ok(Request {
        provider: Some(name),
        base_url: Some(base_url),
        api_key_env: Some(api_key_env),
        api_key,
        model: Some(model),
        model_alias: Some(alias.trim().to_owned()),
        agent: agent_names.get(agent).cloned(),
    })
}

/// Asks the questions ([`ask`]) on a thread of their own, so that Ctrl-C
/// can end them.
///
/// uwf's SIGINT handler (installed for agents by
/// [`crate::engine::forward_interrupts`]) only raises a flag, and the read at
/// a prompt would simply restart. So this thread watches the flag while the
/// questions are open; on an interrupt it restores the terminal (echo, the
/// cursor) and returns [`SetupError::Interrupted`], which `main` turns into
/// exit status 130 after saying that nothing was written. The thread still
/// blocked in its read ends with the process.
fn ask_interruptibly(
    state: FsState,
    config_path: PathBuf,
    files: ConfigFiles,
) -> Result<Request, CliError> {
    let saved = tcgetattr(std::io::stdin()).ok();
    let (answer, answered) = std::sync::mpsc::channel();
    let asking = std::thread::Builder::new()
        .name("uwf-setup-questions".to_owned())
        .spawn(move || {
            // The receiver is gone only after an interrupt: nobody listens.
            let _ = answer.send(ask(&state, &config_path, &files));
        });
    if let Err(e) = asking {
        return Err(SetupError::Prompt(format!("cannot start the questions: {e}")).into());
    }
    loop {
        match answered.recv_timeout(Duration::from_millis(25)) {
            Ok(request) => return request,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if crate::engine::interrupted() => {
                if let Some(termios) = &saved {
                    let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, termios);
                }
                let _ = Term::stderr().show_cursor();
                return Err(SetupError::Interrupted.into());
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(
                    SetupError::Prompt("the questions ended without an answer".into()).into(),
                );
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls() {
        assert_eq!(derived_env_var("my-corp.ai"), "MY_CORP_AI_API_KEY");
        assert_eq!(derived_env_var("1x"), "_1X_API_KEY");
        assert_eq!(
            derived_model_alias("anthropic/claude-sonnet-4"),
            "claude-sonnet-4"
        );
        assert_eq!(derived_model_alias("llama3.2:latest"), "llama3.2-latest");
        assert_eq!(derived_model_alias("///"), "model");
        assert_eq!(check_url(" https://x.io/v1/ ").unwrap(), "https://x.io/v1");
        assert!(check_url("ftp://x.io").is_err());
        assert!(check_url("not a url").is_err());
        assert!(check_url("localhost:11434").is_err());
        assert!(matches!(
            check_url("https://u:secret@x.io"),
            Err(SetupError::UrlCredentials)
        ));
        assert!(check_alias("x", "ok-name_1.2").is_ok());
        assert!(check_alias("x", "-bad").is_err());
        assert!(check_alias("x", "").is_err());
        assert!(check_env_var("OK_1").is_ok());
        assert!(check_env_var("1BAD").is_err());
        assert!(check_env_var("BAD-X").is_err());
    }

    #[test]
    fn secret_debug_is_redacted() {
        let r = Request {
            api_key: Some(Secret("sk-very-secret".into())),
            ..Request::default()
        };
        assert!(!format!("{r:?}").contains("very-secret"));
    }
}
