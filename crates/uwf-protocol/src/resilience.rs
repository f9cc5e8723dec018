//! People in the loop and agents that fail: the `config.yaml` sections for
//! retries and timeouts, the state files recording waiting threads and
//! failed attempts, the `AttemptRecord` node and the JSON the commands
//! print about them.
//!
//! None of this changes the thread chain: a thread that waits for a person
//! has no extra node, and a failed attempt is a separate `AttemptRecord`
//! node reachable from `attempts.yaml`, never from a StepNode.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{Hash, ThreadId};

/// Title of the AttemptRecord schema.
pub const ATTEMPT_RECORD_TITLE: &str = "AttemptRecord";

/// A retry policy as written in `config.yaml`; every field is optional, so
/// a more specific entry overrides only what it names.
///
/// ```yaml
/// retries:
///   default: { max: 2, backoff: 10s, factor: 2 }
///   solve-issue:
///     developer: { max: 5 }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicyConfig {
    /// How many times a failed attempt is retried (0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
    /// The wait before the first retry, e.g. `10s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
    /// Each further retry waits this many times longer (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<serde_json::Number>,
}

/// One entry under `retries:`: `default` and a workflow name may hold a
/// policy; a workflow name may instead map its roles (and `default`) to
/// policies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RetriesEntry {
    /// A policy (for `default`, or for every role of a workflow).
    Policy(RetryPolicyConfig),
    /// Per role of a workflow (`default`: the workflow's other roles).
    Roles(BTreeMap<String, RetryPolicyConfig>),
}

/// One entry under `timeouts:`: a duration (for `default`, or for every
/// role of a workflow), or a workflow's roles (and `default`) mapped to
/// durations.
///
/// ```yaml
/// timeouts:
///   default: 30m
///   triage: { classify: 2m }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TimeoutsEntry {
    /// A duration such as `90s` or `30m`.
    Duration(String),
    /// Per role of a workflow.
    Roles(BTreeMap<String, String>),
}

/// What `uwf-agent` may do and spend in one step, as written in
/// `config.yaml`; every field is optional, so a more specific entry
/// overrides only what it names (like [`RetryPolicyConfig`]).
///
/// ```yaml
/// agentPolicy:
///   default: { maxTurns: 40, commandTimeout: 2m, denyCommands: [curl, wget] }
///   fix-test:
///     developer: { allowCommands: [sh, cat], maxCostUsd: 0.5 }
///     reviewer: { readOnly: true }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPolicyConfig {
    /// No writing tools and no commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// When given, the only programs `run_command` may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_commands: Option<Vec<String>>,
    /// Programs `run_command` never starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_commands: Option<Vec<String>>,
    /// The longest one command may run, e.g. `2m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_timeout: Option<String>,
    /// The most model calls in one step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// The most tokens (prompt and completion, all calls) in one step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The most dollars one step may cost (for models with a `price`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<serde_json::Number>,
    /// The longest one step may take, e.g. `20m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_time: Option<String>,
}

/// One entry under `agentPolicy:`: a policy (for `default`, or every role
/// of a workflow), or a workflow's roles (and `default`) mapped to policies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AgentPolicyEntry {
    /// A policy.
    Policy(AgentPolicyConfig),
    /// Per role of a workflow.
    Roles(BTreeMap<String, AgentPolicyConfig>),
}

/// `waiting.yaml`: the threads that wait for a person, directly or through
/// a child thread. An entry counts only while its thread is active with
/// the entry's `head`; any other entry is stale and
/// ignored (and dropped by the next write).
pub type WaitingIndex = BTreeMap<ThreadId, WaitingRecord>;

/// `attempts.yaml`: thread id → its newest [`AttemptRecord`] node (older
/// ones follow through `prev`).
pub type AttemptsIndex = BTreeMap<ThreadId, Hash>;

/// Why and since when a thread waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingRecord {
    /// The head the thread had when it started waiting.
    pub head: Hash,
    /// The role waiting for its answer.
    pub role: String,
    /// What the person is asked: the edge prompt of the moderator's
    /// decision, else the role's system prompt (for a wait through a child
    /// thread: the innermost prompt).
    pub prompt: String,
    /// The agent the role is bound to: a human alias, or the workflow agent
    /// whose child thread waits.
    pub agent: String,
    /// When the wait was first recorded (ms since the Unix epoch).
    pub since: u64,
    /// The child thread that waits, when the role is run by a workflow
    /// agent; the person answers that thread (or the innermost one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<ThreadId>,
}

/// `uwf thread step` / `run` when the thread waits for a person:
/// `{workflow, thread, head, done: false, waiting: {…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingOutput {
    /// `{workflow, thread, head, done}`.
    #[serde(flatten)]
    pub head: crate::StepOutput,
    /// What the thread waits for.
    pub waiting: WaitingRecord,
}

/// One row of `uwf thread list --waiting`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingListItem {
    /// The thread id.
    pub thread: ThreadId,
    /// The Workflow node the thread runs.
    pub workflow: Hash,
    /// What it waits for.
    pub waiting: WaitingRecord,
    /// The innermost thread that waits for a person (this thread itself
    /// unless it waits through a child thread): the one to answer.
    pub answer: ThreadId,
    /// The call stack of the thread to [`answer`](Self::answer), innermost
    /// first (as `uwf thread stack` prints it): where the person's answer
    /// goes, up to the top-level thread.
    pub stack: Vec<crate::StackFrame>,
}

/// A failed attempt of a step, as stored in an [`AttemptRecord`] node:
/// what ran, how it ended, what it said. The thread's chain never links it;
/// `attempts.yaml` does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    /// The thread.
    pub thread: ThreadId,
    /// The head the attempt started from (the thread's StartNode or last StepNode).
    pub head: Hash,
    /// The thread's previous attempt record, if any.
    pub prev: Option<Hash>,
    /// The role.
    pub role: String,
    /// 1 for the first try of the step, 2 for the first retry, …
    pub attempt: u32,
    /// The agent (alias or command line).
    pub agent: String,
    /// How it failed: `exit`, `signal`, `timeout`, `no-hash`, `bad-hash` or
    /// `check`; for a plain program (`protocol: stdio`) also `no-output` or
    /// `bad-output`.
    pub kind: String,
    /// The failure in words, e.g. `exited with status 1`.
    pub reason: String,
    /// The exit status, when it exited.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The last lines of its stderr.
    pub stderr_tail: String,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// When it started (ms since the Unix epoch).
    pub started_at: u64,
}

/// One failed attempt as `thread show` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptSummary {
    /// The AttemptRecord node.
    pub hash: Hash,
    /// Its role.
    pub role: String,
    /// Its attempt number.
    pub attempt: u32,
    /// Its agent.
    pub agent: String,
    /// The failure in words.
    pub reason: String,
    /// The head it started from.
    pub head: Hash,
}

/// Schema of an [`AttemptRecord`] node (registered when the first one is
/// stored).
pub fn attempt_record_schema() -> Value {
    json!({
        "title": ATTEMPT_RECORD_TITLE,
        "description": "A failed attempt of a thread's step, kept for debugging; not part of the thread's chain.",
        "type": "object",
        "required": ["thread", "head", "prev", "role", "attempt", "agent", "kind", "reason", "exitCode", "stderrTail", "durationMs", "startedAt"],
        "additionalProperties": false,
        "properties": {
            "thread": { "type": "string" },
            "head": { "type": "string", "format": "cas_ref" },
            "prev": { "type": ["string", "null"], "format": "cas_ref" },
            "role": { "type": "string", "minLength": 1 },
            "attempt": { "type": "integer", "minimum": 1 },
            "agent": { "type": "string" },
            "kind": { "type": "string" },
            "reason": { "type": "string" },
            "exitCode": { "type": ["integer", "null"] },
            "stderrTail": { "type": "string" },
            "durationMs": { "type": "integer", "minimum": 0 },
            "startedAt": { "type": "integer", "minimum": 0 }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_records_round_trip_with_every_required_field() {
        let r = AttemptRecord {
            thread: ThreadId::from(ulid::Ulid(7)),
            head: Hash::from_u64(8),
            prev: None,
            role: "developer".into(),
            attempt: 1,
            agent: "mock".into(),
            kind: "exit".into(),
            reason: "exited with status 1".into(),
            exit_code: Some(1),
            stderr_tail: "oops".into(),
            duration_ms: 5,
            started_at: 1,
        };
        let v = serde_json::to_value(&r).unwrap_or_default();
        for key in attempt_record_schema()["required"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let key = key.as_str().unwrap_or_default();
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        let back: AttemptRecord = serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, r);
    }

    #[test]
    fn retries_and_timeouts_take_policies_or_roles() {
        let yaml = "default: { max: 2, backoff: 10s, factor: 2 }\nsolve-issue: { developer: { max: 5 } }\nflat: { max: 1 }\n";
        let r: BTreeMap<String, RetriesEntry> =
            serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(r.get("default"), Some(RetriesEntry::Policy(p)) if p.max == Some(2)));
        assert!(
            matches!(r.get("solve-issue"), Some(RetriesEntry::Roles(m)) if m["developer"].max == Some(5))
        );
        assert!(matches!(r.get("flat"), Some(RetriesEntry::Policy(p)) if p.max == Some(1)));
        let t: BTreeMap<String, TimeoutsEntry> =
            serde_yaml::from_str("default: 30m\ntriage: { classify: 2m }\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            t.get("default"),
            Some(&TimeoutsEntry::Duration("30m".into()))
        );
        assert!(matches!(t.get("triage"), Some(TimeoutsEntry::Roles(m)) if m["classify"] == "2m"));
        // A typo in a policy is no policy, and not a role map either.
        assert!(
            serde_yaml::from_str::<BTreeMap<String, RetriesEntry>>("w: { max: 1, bakoff: 2s }")
                .is_err()
        );
    }
}
