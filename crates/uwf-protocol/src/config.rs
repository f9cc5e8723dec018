use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Hash, ThreadId};

/// An LLM endpoint: OpenAI-compatible chat completions unless
/// [`api`](Self::api) says `anthropic`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// Base URL, the API root, e.g. `https://openrouter.ai/api/v1` or
    /// `https://api.anthropic.com/v1`.
    pub base_url: String,
    /// Name of the environment variable (usually set in `.env`) holding the
    /// API key. The key itself never appears in `config.yaml`.
    pub api_key_env: String,
    /// The wire format the endpoint speaks (default: `openai`).
    #[serde(default, skip_serializing_if = "ProviderApi::is_default")]
    pub api: ProviderApi,
}

/// The API a provider speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderApi {
    /// OpenAI-compatible chat completions (`POST <baseUrl>/chat/completions`,
    /// a bearer token).
    #[default]
    Openai,
    /// The Anthropic Messages API (`POST <baseUrl>/messages`, the key in
    /// `x-api-key`).
    Anthropic,
}

impl ProviderApi {
    /// Whether this is the default, [`ProviderApi::Openai`].
    pub fn is_default(&self) -> bool {
        *self == ProviderApi::Openai
    }

    /// The name used in `config.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderApi::Openai => "openai",
            ProviderApi::Anthropic => "anthropic",
        }
    }
}

/// What a model costs, in US dollars per million tokens, for agents that
/// report or limit the cost of a step (`uwf-agent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelPrice {
    /// Dollars per million prompt (input) tokens.
    pub input: serde_json::Number,
    /// Dollars per million completion (output) tokens.
    pub output: serde_json::Number,
}

/// A model alias: which provider serves it and under what name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    /// Key into [`WorkflowConfig::providers`].
    pub provider: String,
    /// The provider's model name, e.g. `gpt-4o-mini`.
    pub name: String,
    /// Its price, when known: `{input, output}` in dollars per million tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<ModelPrice>,
}

/// An agent alias: the command `uwf` spawns as `<command> <args…> <thread> <role>`
/// (or as `<command> <args…>` for a [`AgentProtocol::Stdio`] program).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "RawAgentConfig")]
pub struct AgentConfig {
    /// Program name (looked up on `PATH`) or path. Required unless
    /// [`human`](Self::human) is set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// Arguments placed before the thread id and role.
    #[serde(default)]
    pub args: Vec<String>,
    /// A person answers the roles bound to this alias (`uwf thread answer`)
    /// instead of a program: a step on such a role does not run anything,
    /// it records that the thread waits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub human: bool,
    /// How the program answers (docs/agent-protocol.md): it stores its step
    /// itself (the default), or it is a plain program whose stdout is the
    /// role's output.
    #[serde(default, skip_serializing_if = "AgentProtocol::is_default")]
    pub protocol: AgentProtocol,
}

/// How an agent's program gives uwf its step (docs/agent-protocol.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentProtocol {
    /// The agent protocol: run as `<command> <args…> <thread> <role>`, the
    /// agent stores its output, detail and StepNode and prints the
    /// StepNode's hash.
    #[default]
    Uwf,
    /// A plain program: run as `<command> <args…>` with a JSON document
    /// about the step on its stdin; what it prints on stdout is the role's
    /// output (one JSON value), and uwf stores the step.
    Stdio,
}

impl AgentProtocol {
    /// Whether this is the default, [`AgentProtocol::Uwf`].
    pub fn is_default(&self) -> bool {
        *self == AgentProtocol::Uwf
    }
}

/// `config.yaml`'s spelling of [`AgentConfig`], before the check that it
/// names a command or a person.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAgentConfig {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    human: bool,
    #[serde(default)]
    protocol: Option<AgentProtocol>,
}

impl TryFrom<RawAgentConfig> for AgentConfig {
    type Error = String;

    fn try_from(raw: RawAgentConfig) -> Result<Self, String> {
        if raw.human && raw.protocol.is_some() {
            return Err(
                "a person (`human: true`) runs no program, so it has no `protocol`".to_string(),
            );
        }
        match (raw.command, raw.human) {
            (None, false) => Err(
                "missing field `command` (an agent runs a command; `human: true` makes it a person)"
                    .to_string(),
            ),
            (Some(_), true) => Err(
                "an agent is either a command or `human: true`, not both".to_string(),
            ),
            (command, human) => Ok(AgentConfig {
                command: command.unwrap_or_default(),
                args: raw.args,
                human,
                protocol: raw.protocol.unwrap_or_default(),
            }),
        }
    }
}

/// `config.yaml`: providers, models and agents. Holds no secrets.
///
/// Every section is optional so a partial file stays valid; what a command
/// needs and does not find is reported when it is needed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowConfig {
    /// Where the store lives, when it is not this directory: a PostgreSQL
    /// URL (`postgres://USER@HOST:PORT/DATABASE`, the password in `.env` as
    /// `UWF_STORE_PASSWORD`, never here) or another directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
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
    /// Per workflow name: how many of its steps may run at once on this
    /// machine, and what happens to the others (docs/state.md, "Slots"). A workflow
    /// without an entry is unlimited.
    ///
    /// ```yaml
    /// workflows:
    ///   cleanup:     { concurrency: 1, overflow: drop }
    ///   code-review: { concurrency: 3, overflow: queue, maxQueue: 20 }
    /// ```
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workflows: BTreeMap<String, WorkflowLimits>,
    /// Retries of failed agents: `default`, and per workflow name (a
    /// policy, or per role). See [`RetriesEntry`](crate::RetriesEntry).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub retries: BTreeMap<String, crate::RetriesEntry>,
    /// Agent timeouts: `default`, and per workflow name (a duration, or per
    /// role). `--timeout` overrides them. See [`TimeoutsEntry`](crate::TimeoutsEntry).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timeouts: BTreeMap<String, crate::TimeoutsEntry>,
    /// What `uwf-agent` may do and spend per step: `default`, and per
    /// workflow name (a policy, or per role). See
    /// [`AgentPolicyEntry`](crate::AgentPolicyEntry).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agent_policy: BTreeMap<String, crate::AgentPolicyEntry>,
    /// A command run (best effort) when a thread starts waiting for a
    /// person, as `<command> <args…> <thread> <role> <prompt>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<String>,
}

impl WorkflowConfig {
    /// The limits configured for `workflow` in
    /// [`workflows`](Self::workflows), if any.
    pub fn limits(&self, workflow: &str) -> Option<WorkflowLimits> {
        self.workflows.get(workflow).copied()
    }

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

/// What a step does when every slot of its workflow is taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overflow {
    /// Fail at once.
    Drop,
    /// Wait in a first-in first-out queue of at most `maxQueue` waiters;
    /// when it is full, the oldest waiter gives up.
    #[default]
    Queue,
}

impl Overflow {
    /// The name used in `config.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Overflow::Drop => "drop",
            Overflow::Queue => "queue",
        }
    }
}

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of [`WorkflowConfig::workflows`]: a concurrency limit.
///
/// Always valid: `concurrency` and `maxQueue` are between 1 and
/// [`MAX_LIMIT`](WorkflowLimits::MAX_LIMIT), and `maxQueue` is only given
/// with `overflow: queue`. Deserialising checks this (the error names the
/// offending value); so do the constructors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "RawWorkflowLimits")]
pub struct WorkflowLimits {
    concurrency: u32,
    overflow: Overflow,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_queue: Option<u32>,
}

/// `config.yaml`'s spelling of [`WorkflowLimits`], before validation.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawWorkflowLimits {
    concurrency: u32,
    #[serde(default)]
    overflow: Overflow,
    #[serde(default)]
    max_queue: Option<u32>,
}

impl TryFrom<RawWorkflowLimits> for WorkflowLimits {
    type Error = String;

    fn try_from(raw: RawWorkflowLimits) -> Result<Self, String> {
        WorkflowLimits::new(raw.concurrency, raw.overflow, raw.max_queue)
    }
}

impl WorkflowLimits {
    /// `maxQueue` when `overflow: queue` does not give one.
    pub const DEFAULT_MAX_QUEUE: u32 = 16;
    /// The largest `concurrency` and `maxQueue` accepted.
    pub const MAX_LIMIT: u32 = 1024;

    /// Checked limits; the error says which value is wrong and why.
    pub fn new(
        concurrency: u32,
        overflow: Overflow,
        max_queue: Option<u32>,
    ) -> Result<Self, String> {
        let max = Self::MAX_LIMIT;
        if !(1..=max).contains(&concurrency) {
            return Err(format!(
                "concurrency must be between 1 and {max}, not {concurrency}"
            ));
        }
        match (overflow, max_queue) {
            (Overflow::Drop, Some(_)) => {
                return Err(
                    "maxQueue applies only to `overflow: queue`; remove it or set `overflow: queue`"
                        .to_string(),
                );
            }
            (Overflow::Queue, Some(m)) if !(1..=max).contains(&m) => {
                return Err(format!("maxQueue must be between 1 and {max}, not {m}"));
            }
            _ => {}
        }
        Ok(WorkflowLimits {
            concurrency,
            overflow,
            max_queue,
        })
    }

    /// `overflow: drop` with `concurrency` slots.
    pub fn drop(concurrency: u32) -> Result<Self, String> {
        Self::new(concurrency, Overflow::Drop, None)
    }

    /// `overflow: queue` with `concurrency` slots and at most `max_queue` waiters.
    pub fn queue(concurrency: u32, max_queue: u32) -> Result<Self, String> {
        Self::new(concurrency, Overflow::Queue, Some(max_queue))
    }

    /// How many steps of the workflow may run at once (at least 1).
    pub fn concurrency(&self) -> u32 {
        self.concurrency
    }

    /// What happens when every slot is taken.
    pub fn overflow(&self) -> Overflow {
        self.overflow
    }

    /// The most waiters the queue holds (`maxQueue`, default
    /// [`DEFAULT_MAX_QUEUE`](Self::DEFAULT_MAX_QUEUE)); meaningless with
    /// `overflow: drop`.
    pub fn max_queue(&self) -> u32 {
        self.max_queue.unwrap_or(Self::DEFAULT_MAX_QUEUE)
    }
}

/// The active threads: thread id → head hash (the head files under
/// `threads/`, or the `threads.yaml` of a store of uwf 0.1.0).
pub type ThreadsIndex = BTreeMap<ThreadId, Hash>;

/// `registry.yaml`: workflow name → Workflow node hash.
pub type WorkflowRegistry = BTreeMap<String, Hash>;

/// One line of `history.jsonl`: a thread that was archived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The thread id.
    pub thread: ThreadId,
    /// The Workflow node.
    pub workflow: Hash,
    /// The head when the thread was archived.
    pub head: Hash,
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
    fn an_agent_speaks_the_agent_protocol_unless_it_says_stdio() {
        let yaml = "agents:\n  a: { command: x }\n  b: { command: y, protocol: stdio }\n  c: { command: z, protocol: uwf }\n";
        let config: WorkflowConfig = serde_yaml::from_str(yaml).unwrap_or_default();
        let protocol = |name: &str| config.agents.get(name).map(|a| a.protocol);
        assert_eq!(protocol("a"), Some(AgentProtocol::Uwf));
        assert_eq!(protocol("b"), Some(AgentProtocol::Stdio));
        assert_eq!(protocol("c"), Some(AgentProtocol::Uwf));
        // Written back, the default is left out and `stdio` kept.
        let back = serde_yaml::to_string(&config).unwrap_or_default();
        assert_eq!(back.matches("protocol").count(), 1, "{back}");
        let again: WorkflowConfig = serde_yaml::from_str(&back).unwrap_or_default();
        assert_eq!(again, config);
    }

    #[test]
    fn a_bad_protocol_is_refused() {
        let err = |yaml: &str| match serde_yaml::from_str::<WorkflowConfig>(yaml) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e.to_string(),
        };
        let unknown = err("agents:\n  a: { command: x, protocol: http }\n");
        assert!(
            unknown.contains("unknown variant `http`, expected `uwf` or `stdio`"),
            "{unknown}"
        );
        let person = err("agents:\n  me: { human: true, protocol: stdio }\n");
        assert!(
            person.contains("runs no program, so it has no `protocol`"),
            "{person}"
        );
    }

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

    fn parse(yaml: &str) -> Result<WorkflowConfig, String> {
        serde_yaml::from_str::<WorkflowConfig>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn workflow_limits_parse_with_defaults_and_round_trip() {
        let yaml = "workflows:\n  cleanup: { concurrency: 1, overflow: drop }\n  review: { concurrency: 3, overflow: queue, maxQueue: 20 }\n  plain: { concurrency: 2 }\n";
        let config = parse(yaml).unwrap_or_default();
        let cleanup = config.limits("cleanup");
        assert_eq!(cleanup, WorkflowLimits::drop(1).ok());
        let review = config
            .limits("review")
            .map(|l| (l.concurrency(), l.overflow(), l.max_queue()));
        assert_eq!(review, Some((3, Overflow::Queue, 20)));
        let plain = config
            .limits("plain")
            .map(|l| (l.overflow(), l.max_queue()));
        assert_eq!(
            plain,
            Some((Overflow::Queue, WorkflowLimits::DEFAULT_MAX_QUEUE))
        );
        assert_eq!(config.limits("other"), None);

        let back = serde_yaml::to_string(&config).unwrap_or_default();
        assert_eq!(parse(&back).unwrap_or_default(), config, "{back}");
        assert!(back.contains("maxQueue: 20"), "{back}");
        // A drop entry never gains a maxQueue it would then refuse.
        assert!(!back.contains("maxQueue: 16"), "{back}");
        let empty = serde_yaml::to_string(&WorkflowConfig::default()).unwrap_or_default();
        assert!(!empty.contains("workflows"), "{empty}");
    }

    #[test]
    fn bad_workflow_limits_are_refused_with_the_reason() {
        for (yaml, expect) in [
            (
                "{concurrency: 0}",
                "concurrency must be between 1 and 1024, not 0",
            ),
            (
                "{concurrency: 5000}",
                "concurrency must be between 1 and 1024, not 5000",
            ),
            ("{concurrency: -1}", "integer `-1`, expected u32"),
            ("{concurrency: two}", "invalid type"),
            ("{overflow: queue}", "missing field `concurrency`"),
            ("{concurrency: 1, overflow: dorp}", "unknown variant `dorp`"),
            (
                "{concurrency: 1, maxQueue: 0}",
                "maxQueue must be between 1 and 1024, not 0",
            ),
            (
                "{concurrency: 1, overflow: drop, maxQueue: 3}",
                "maxQueue applies only to `overflow: queue`",
            ),
            (
                "{concurrency: 1, max_queue: 3}",
                "unknown field `max_queue`",
            ),
            ("3", "invalid type"),
        ] {
            let err = parse(&format!("workflows:\n  w: {yaml}\n"))
                .err()
                .unwrap_or_default();
            assert!(err.contains(expect), "{yaml}: {err}");
            // The path names the section, the position the entry.
            assert!(err.starts_with("workflows"), "{yaml}: {err}");
            assert!(err.contains("line 2"), "{yaml}: {err}");
        }
    }
}
