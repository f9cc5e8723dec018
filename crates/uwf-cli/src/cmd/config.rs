//! `uwf config show`: the effective configuration, keys masked.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use uwf_protocol::WorkflowConfig;
use uwf_state::state::FsState;
use uwf_util::root::ResolvedRoot;

use crate::cli::ConfigCommand;
use crate::engine::location::{self, StoreLocation};
use crate::error::CliError;

/// What `uwf config show` prints. Never holds a full key.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shown {
    /// The storage root.
    pub root: PathBuf,
    /// Where the root came from (`--root`, `$VAR`, or the default).
    pub root_source: String,
    /// `<root>/config.yaml` (where `store:` is read, and the whole
    /// configuration on the filesystem store).
    pub config_file: PathBuf,
    /// The store commands use (a PostgreSQL URL without its password, or a
    /// directory).
    pub store: String,
    /// Where the configuration shown comes from: the store's
    /// `config.yaml`, or its `uwf_config` table on PostgreSQL (which every
    /// machine shares, set with `uwf store init --config`).
    pub config_source: String,
    /// `<root>/.env`, or `null` when it does not exist.
    pub env_file: Option<PathBuf>,
    /// `config.yaml` as parsed, `null` when it does not exist.
    pub config: Option<WorkflowConfig>,
    /// Per provider: its endpoint and whether its key is set.
    pub providers: BTreeMap<String, ProviderStatus>,
    /// `defaultAgent` resolved through `agents`.
    pub default_agent: Option<AgentStatus>,
    /// `defaultModel` resolved through `models` and `providers`.
    pub default_model: Option<ModelStatus>,
    /// Inconsistencies worth fixing (undefined aliases, missing keys).
    pub problems: Vec<String>,
}

/// A provider and the state of its key.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    /// Base URL.
    pub base_url: String,
    /// The variable that holds the key.
    pub api_key_env: String,
    /// Whether the variable is set (and non-empty).
    pub set: bool,
    /// `environment` (set before `.env` was read, which never overrides)
    /// or `.env`; `null` when unset.
    pub source: Option<&'static str>,
    /// The key masked ([`mask`]); `null` when unset.
    pub key: Option<String>,
}

/// The default agent.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// The alias.
    pub alias: String,
    /// Its command, `null` if the alias is not defined or is a person.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// A person answers its roles (`human: true`; then `command` is null).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub human: bool,
}

/// The default model.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    /// The alias.
    pub alias: String,
    /// Its provider alias, `null` if the model alias is not defined.
    pub provider: Option<String>,
    /// The provider's model name.
    pub name: Option<String>,
    /// The provider's base URL, `null` if the provider is not defined.
    pub base_url: Option<String>,
    /// Whether the provider's key is set.
    pub key_set: bool,
}

/// Shows a key as its first 3 and last 4 characters (`sk-…abcd`) when it
/// has at least 12, else `****`.
pub fn mask(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() >= 12 {
        let head: String = chars[..3].iter().collect();
        let tail: String = chars[chars.len() - 4..].iter().collect();
        format!("{head}…{tail}")
    } else {
        "****".to_owned()
    }
}

/// Runs `uwf config …` on the store `store` names (`--store`), or the one
/// the root's settings name.
pub fn run(
    root: &ResolvedRoot,
    store: Option<&str>,
    command: ConfigCommand,
    quiet: bool,
) -> Result<Shown, CliError> {
    match command {
        ConfigCommand::Show => show(root, store, quiet),
    }
}

fn show(root: &ResolvedRoot, store: Option<&str>, quiet: bool) -> Result<Shown, CliError> {
    let (loc, _) = location::resolve(store, &root.path)?;
    // A filesystem store is a directory holding everything; a shared store
    // keeps the configuration, and secrets (`.env`) stay in the root.
    let state = match &loc {
        StoreLocation::Dir(dir) => FsState::new(dir),
        StoreLocation::Url(_) => FsState::new(&root.path),
    };
    let (config, config_source, hint) = match &loc {
        StoreLocation::Dir(_) => {
            let path = state.config_path();
            let hint = format!("no {} yet; run `uwf setup` to create it", path.display());
            (state.config()?, path.display().to_string(), hint)
        }
        StoreLocation::Url(_) => {
            let engine = location::open(&root.path, &loc)?;
            let source = engine.state().config_name();
            let hint = format!(
                "the store {} has no configuration yet; share one with `uwf store init --config FILE`",
                loc.display()
            );
            (engine.state().config()?, source, hint)
        }
    };
    let none = WorkflowConfig::default();
    let c = config.as_ref().unwrap_or(&none);

    // `.env` never overrides: what is set now comes from the environment.
    let is_set = |var: &str| std::env::var(var).is_ok_and(|v| !v.is_empty());
    let from_environment: Vec<bool> = c
        .providers
        .values()
        .map(|p| is_set(&p.api_key_env))
        .collect();
    state.load_env()?;

    let mut problems = Vec::new();
    let mut providers = BTreeMap::new();
    for ((name, p), before) in c.providers.iter().zip(from_environment) {
        let value = std::env::var(&p.api_key_env).ok().filter(|v| !v.is_empty());
        if value.is_none() {
            problems.push(format!(
                "provider {name:?}: {} is not set (in the environment or {})",
                p.api_key_env,
                state.env_path().display()
            ));
        }
        providers.insert(
            name.clone(),
            ProviderStatus {
                base_url: p.base_url.clone(),
                api_key_env: p.api_key_env.clone(),
                set: value.is_some(),
                source: value
                    .as_ref()
                    .map(|_| if before { "environment" } else { ".env" }),
                key: value.as_deref().map(mask),
            },
        );
    }
    for (alias, m) in &c.models {
        if !c.providers.contains_key(&m.provider) {
            problems.push(format!(
                "model {alias:?} uses provider {:?}, which is not defined under `providers`",
                m.provider
            ));
        }
    }

    let default_agent = c.default_agent.as_ref().map(|alias| {
        let agent = c.agents.get(alias);
        if agent.is_none() {
            problems.push(format!(
                "defaultAgent {alias:?} is not defined under `agents`"
            ));
        }
        AgentStatus {
            alias: alias.clone(),
            command: agent.filter(|a| !a.human).map(|a| a.command.clone()),
            human: agent.is_some_and(|a| a.human),
            args: agent.map(|a| a.args.clone()).unwrap_or_default(),
        }
    });
    let default_model = c.default_model.as_ref().map(|alias| {
        let model = c.models.get(alias);
        if model.is_none() {
            problems.push(format!(
                "defaultModel {alias:?} is not defined under `models`"
            ));
        }
        let provider = model.and_then(|m| providers.get(&m.provider));
        ModelStatus {
            alias: alias.clone(),
            provider: model.map(|m| m.provider.clone()),
            name: model.map(|m| m.name.clone()),
            base_url: provider.map(|p| p.base_url.clone()),
            key_set: provider.is_some_and(|p| p.set),
        }
    });

    if config.is_none() && !quiet {
        eprintln!("hint: {hint}");
    }
    let env_file = state.env_path();
    Ok(Shown {
        root: root.path.clone(),
        root_source: root.source.to_string(),
        config_file: state.config_path(),
        store: loc.display(),
        config_source,
        env_file: env_file.exists().then_some(env_file),
        config,
        providers,
        default_agent,
        default_model,
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::mask;

    #[test]
    fn masking() {
        assert_eq!(mask("sk-abcdefghijkl"), "sk-…ijkl");
        assert_eq!(mask("123456789012"), "123…9012");
        assert_eq!(mask("12345678901"), "****");
        assert_eq!(mask(""), "****");
        assert_eq!(mask("ééééééééééééé"), "ééé…éééé");
    }
}
