use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{CasRef, ThreadId};

/// An OpenAI-compatible endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// Base URL, e.g. `https://openrouter.ai/api/v1`.
    pub base_url: String,
    /// Name of the environment variable (usually set in `.env`) holding the
    /// API key. The key itself never appears in `config.yaml`.
    pub api_key_env: String,
}

/// A model alias: which provider serves it and under what name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    /// Key into [`WorkflowConfig::providers`].
    pub provider: String,
    /// The provider's model name, e.g. `gpt-4o-mini`.
    pub name: String,
}

/// An agent alias: the command `uwf` spawns as `<command> <args…> <thread> <role>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    /// Program name (looked up on `PATH`) or path.
    pub command: String,
    /// Arguments placed before the thread id and role.
    #[serde(default)]
    pub args: Vec<String>,
}

/// `config.yaml`: providers, models and agents. Holds no secrets.
///
/// Every section is optional so a partial file stays valid; what a command
/// needs and does not find is reported when it is needed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowConfig {
    /// Provider aliases.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Model aliases.
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
    /// Agent aliases.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentConfig>,
    /// Agent alias used when nothing more specific applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_agent: Option<String>,
    /// Per workflow name, per role: agent alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_overrides: Option<BTreeMap<String, BTreeMap<String, String>>>,
    /// Model alias used when nothing more specific applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_model: Option<String>,
    /// Per scenario (e.g. `extract`): model alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_overrides: Option<BTreeMap<String, String>>,
    /// Per workflow name, per role: model alias, for agents that call a
    /// model themselves (e.g. `uwf-llm`). A role without an entry uses
    /// [`default_model`](Self::default_model).
    ///
    /// ```yaml
    /// roleModels:
    ///   solve-issue:
    ///     reviewer: gpt4o-mini
    /// ```
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_models: Option<BTreeMap<String, BTreeMap<String, String>>>,
}

impl WorkflowConfig {
    /// The model alias configured for `role` of `workflow` in
    /// [`role_models`](Self::role_models), if any (no fallback).
    pub fn role_model(&self, workflow: &str, role: &str) -> Option<&str> {
        self.role_models
            .as_ref()?
            .get(workflow)?
            .get(role)
            .map(String::as_str)
    }

    /// The model alias configured for `scenario` in
    /// [`model_overrides`](Self::model_overrides), if any (no fallback).
    pub fn model_override(&self, scenario: &str) -> Option<&str> {
        self.model_overrides
            .as_ref()?
            .get(scenario)
            .map(String::as_str)
    }
}

/// `threads.yaml`: active thread id → head hash.
pub type ThreadsIndex = BTreeMap<ThreadId, CasRef>;

/// `registry.yaml`: workflow name → Workflow node hash.
pub type WorkflowRegistry = BTreeMap<String, CasRef>;

/// One line of `history.jsonl`: a thread that was archived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The thread id.
    pub thread: ThreadId,
    /// The Workflow node.
    pub workflow: CasRef,
    /// The head when the thread was archived.
    pub head: CasRef,
    /// When it was archived (ms since the Unix epoch).
    pub completed_at: u64,
    /// Why: `"done"` (the moderator returned `$END`) or `"killed"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_models_round_trip_and_lookup() {
        let yaml = "defaultModel: sonnet\nmodelOverrides:\n  extract: mini\nroleModels:\n  solve-issue:\n    reviewer: mini\n";
        let config: WorkflowConfig = serde_yaml::from_str(yaml).unwrap_or_default();
        assert_eq!(config.role_model("solve-issue", "reviewer"), Some("mini"));
        assert_eq!(config.role_model("solve-issue", "planner"), None);
        assert_eq!(config.role_model("other", "reviewer"), None);
        assert_eq!(config.model_override("extract"), Some("mini"));
        assert_eq!(config.model_override("summary"), None);
        let back = serde_yaml::to_string(&config).unwrap_or_default();
        assert!(back.contains("roleModels:"), "{back}");
        let empty = serde_yaml::to_string(&WorkflowConfig::default()).unwrap_or_default();
        assert!(!empty.contains("roleModels"), "{empty}");
        assert!(serde_yaml::from_str::<WorkflowConfig>("roleModel: {}\n").is_err());
    }
}
