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
