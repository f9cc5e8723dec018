//! Retries, timeouts and `uwf-agent`'s policy per role, from `config.yaml` (deployment settings,
//! never workflow data).
//!
//! ```yaml
//! retries:
//!   default: { max: 2, backoff: 10s, factor: 2 }
//!   solve-issue:
//!     default: { max: 3 }          # the workflow's other roles
//!     developer: { max: 5 }        # only `max` changes; backoff and factor inherited
//! timeouts:
//!   default: 30m
//!   triage: { classify: 2m }
//! ```
//!
//! The most specific setting wins, field by field for retries: the role's
//! entry, else the workflow's (`<workflow>: {…policy…}` or
//! `<workflow>: {default: …}`), else `default`, else no retry
//! ([`RetryPolicy::NONE`]) and no timeout.

use std::time::Duration;

use miette::Diagnostic;
use thiserror::Error;
use uwf_protocol::{
    AgentPolicyConfig, AgentPolicyEntry, RetriesEntry, RetryPolicyConfig, TimeoutsEntry,
    WorkflowConfig,
};

use crate::state::CONFIG_FILE;

/// The longest wait between two attempts, whatever the policy computes.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);

/// A setting of `retries` or `timeouts` that cannot be used.
#[derive(Debug, Error, Diagnostic)]
#[error("{origin} `{key}`: {message}")]
#[diagnostic(
    code(uwf::config::policy),
    help(
        "durations look like 500ms, 10s, 2m or 1h; retries are `{{max: N, backoff: DURATION, factor: NUMBER}}` (see docs/config.md)"
    )
)]
pub struct PolicyError {
    /// Where the configuration was read from: [`CONFIG_FILE`] as the
    /// functions of this module say, another origin (a database table)
    /// once [`PolicyError::in_config`] has put it in.
    pub origin: String,
    /// Where, e.g. `retries.solve-issue.developer.backoff`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl PolicyError {
    /// An error about `key` of `config.yaml`.
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            origin: CONFIG_FILE.to_owned(),
            key: key.into(),
            message: message.into(),
        }
    }

    /// This error, naming `origin` as where the configuration lives (see
    /// [`Settings::config_name`](crate::Settings::config_name)).
    pub fn in_config(self, origin: impl Into<String>) -> Self {
        Self {
            origin: origin.into(),
            ..self
        }
    }
}

/// How a failed attempt of a role is retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: none).
    pub max: u32,
    /// The wait before the first retry.
    pub backoff: Duration,
    /// Each further retry waits this many times longer.
    pub factor: f64,
}

impl RetryPolicy {
    /// No retries: what applies when `config.yaml` says nothing.
    pub const NONE: RetryPolicy = RetryPolicy {
        max: 0,
        backoff: Duration::from_secs(10),
        factor: 2.0,
    };

    /// The wait before retry `n` (1-based): `backoff × factor^(n-1)`, at
    /// most [`MAX_BACKOFF`].
    pub fn delay(&self, n: u32) -> Duration {
        let exp = i32::try_from(n.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.backoff.as_secs_f64() * self.factor.powi(exp);
        if !secs.is_finite() || secs >= MAX_BACKOFF.as_secs_f64() {
            MAX_BACKOFF
        } else {
            Duration::from_secs_f64(secs.max(0.0))
        }
    }

    fn apply(&mut self, key: &str, c: &RetryPolicyConfig) -> Result<(), PolicyError> {
        if let Some(max) = c.max {
            self.max = max;
        }
        if let Some(b) = &c.backoff {
            self.backoff = parse_duration(&format!("{key}.backoff"), b)?;
        }
        if let Some(f) = &c.factor {
            let f = f.as_f64().unwrap_or(f64::NAN);
            if !(1.0..=100.0).contains(&f) {
                return Err(PolicyError::new(
                    format!("{key}.factor"),
                    format!("the factor must be between 1 and 100, not {f}"),
                ));
            }
            self.factor = f;
        }
        Ok(())
    }
}

/// Parses a duration such as `10s`; `key` names the setting in the error.
pub fn parse_duration(key: &str, text: &str) -> Result<Duration, PolicyError> {
    humantime::parse_duration(text.trim())
        .map_err(|e| PolicyError::new(key, format!("{text:?} is not a duration: {e}")))
}

/// The retry policy of `role` in `workflow`.
pub fn retry_policy(
    config: Option<&WorkflowConfig>,
    workflow: &str,
    role: &str,
) -> Result<RetryPolicy, PolicyError> {
    let mut policy = RetryPolicy::NONE;
    let Some(config) = config else {
        return Ok(policy);
    };
    let layers = most_specific_last(
        "retries",
        &config.retries,
        workflow,
        role,
        "expected a policy {max, backoff, factor}",
        |e| match e {
            RetriesEntry::Policy(p) => Ok(p),
            RetriesEntry::Roles(r) => Err(r),
        },
    )?;
    for (key, p) in layers {
        policy.apply(&key, p)?;
    }
    Ok(policy)
}

/// The policies of a `{default: policy, <workflow>: policy | {role:
/// policy}}` section that apply to `role` of `workflow`, with their keys,
/// least specific first: `default`, then the workflow's policy, or its
/// `default` and the role's. `split` tells a policy from a role map; a
/// role map as `default` is an error saying `expected`.
fn most_specific_last<'a, E, P>(
    section: &str,
    entries: &'a std::collections::BTreeMap<String, E>,
    workflow: &str,
    role: &str,
    expected: &str,
    split: impl Fn(&'a E) -> Result<&'a P, &'a std::collections::BTreeMap<String, P>>,
) -> Result<Vec<(String, &'a P)>, PolicyError> {
    let mut out = Vec::new();
    match entries.get("default").map(&split) {
        Some(Ok(p)) => out.push((format!("{section}.default"), p)),
        Some(Err(_)) => return Err(PolicyError::new(format!("{section}.default"), expected)),
        None => {}
    }
    if workflow == "default" {
        return Ok(out);
    }
    match entries.get(workflow).map(&split) {
        Some(Ok(p)) => out.push((format!("{section}.{workflow}"), p)),
        Some(Err(roles)) => {
            if let Some(p) = roles.get("default") {
                out.push((format!("{section}.{workflow}.default"), p));
            }
            if let Some(p) = roles.get(role).filter(|_| role != "default") {
                out.push((format!("{section}.{workflow}.{role}"), p));
            }
        }
        None => {}
    }
    Ok(out)
}

/// The timeout of `role` in `workflow`, if any is configured.
pub fn timeout(
    config: Option<&WorkflowConfig>,
    workflow: &str,
    role: &str,
) -> Result<Option<Duration>, PolicyError> {
    let Some(config) = config else {
        return Ok(None);
    };
    let mut found = match config.timeouts.get("default") {
        Some(TimeoutsEntry::Duration(d)) => Some(parse_duration("timeouts.default", d)?),
        Some(TimeoutsEntry::Roles(_)) => {
            return Err(PolicyError::new(
                "timeouts.default",
                "expected a duration such as 30m",
            ));
        }
        None => None,
    };
    if workflow == "default" {
        return Ok(found);
    }
    match config.timeouts.get(workflow) {
        Some(TimeoutsEntry::Duration(d)) => {
            found = Some(parse_duration(&format!("timeouts.{workflow}"), d)?);
        }
        Some(TimeoutsEntry::Roles(roles)) => {
            if let Some(d) = roles.get("default") {
                found = Some(parse_duration(&format!("timeouts.{workflow}.default"), d)?);
            }
            if let Some(d) = roles.get(role).filter(|_| role != "default") {
                found = Some(parse_duration(&format!("timeouts.{workflow}.{role}"), d)?);
            }
        }
        None => {}
    }
    Ok(found)
}

/// What `uwf-agent` may do and spend in one step of a role, from
/// `agentPolicy` in `config.yaml` (docs/agents.md, "uwf-agent"). The most
/// specific setting wins, field by field, as for retries.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentPolicy {
    /// No writing tools and no commands.
    pub read_only: bool,
    /// When set, the only programs a command may start.
    pub allow_commands: Option<Vec<String>>,
    /// Programs a command may never start.
    pub deny_commands: Vec<String>,
    /// The longest one command may run.
    pub command_timeout: Duration,
    /// The most model calls in one step.
    pub max_turns: u32,
    /// The most tokens in one step, if limited.
    pub max_tokens: Option<u64>,
    /// The most dollars one step may cost, if limited.
    pub max_cost_usd: Option<f64>,
    /// The longest one step may take, if limited.
    pub max_wall_time: Option<Duration>,
}

impl AgentPolicy {
    /// What applies when `config.yaml` says nothing: tools allowed,
    /// commands limited to 2 minutes, 50 model calls a step.
    pub fn standard() -> Self {
        AgentPolicy {
            read_only: false,
            allow_commands: None,
            deny_commands: Vec::new(),
            command_timeout: Duration::from_secs(120),
            max_turns: 50,
            max_tokens: None,
            max_cost_usd: None,
            max_wall_time: None,
        }
    }

    fn apply(&mut self, key: &str, c: &AgentPolicyConfig) -> Result<(), PolicyError> {
        if let Some(r) = c.read_only {
            self.read_only = r;
        }
        if let Some(a) = &c.allow_commands {
            self.allow_commands = Some(a.clone());
        }
        if let Some(d) = &c.deny_commands {
            self.deny_commands = d.clone();
        }
        if let Some(t) = &c.command_timeout {
            self.command_timeout = parse_duration(&format!("{key}.commandTimeout"), t)?;
        }
        if let Some(n) = c.max_turns {
            if n == 0 {
                return Err(PolicyError::new(
                    format!("{key}.maxTurns"),
                    "a step needs at least 1 model call",
                ));
            }
            self.max_turns = n;
        }
        if let Some(n) = c.max_tokens {
            self.max_tokens = Some(n);
        }
        if let Some(n) = &c.max_cost_usd {
            let v = n.as_f64().unwrap_or(f64::NAN);
            if !(v.is_finite() && v >= 0.0) {
                return Err(PolicyError::new(
                    format!("{key}.maxCostUsd"),
                    format!("expected a number of dollars, not {n}"),
                ));
            }
            self.max_cost_usd = Some(v);
        }
        if let Some(t) = &c.max_wall_time {
            self.max_wall_time = Some(parse_duration(&format!("{key}.maxWallTime"), t)?);
        }
        Ok(())
    }
}

/// The `uwf-agent` policy of `role` in `workflow`: [`AgentPolicy::standard`]
/// changed by `agentPolicy.default`, then the workflow's entry (a policy,
/// or its `default` and the role's).
pub fn agent_policy(
    config: Option<&WorkflowConfig>,
    workflow: &str,
    role: &str,
) -> Result<AgentPolicy, PolicyError> {
    let mut policy = AgentPolicy::standard();
    let Some(config) = config else {
        return Ok(policy);
    };
    let layers = most_specific_last(
        "agentPolicy",
        &config.agent_policy,
        workflow,
        role,
        "expected a policy {readOnly, allowCommands, denyCommands, commandTimeout, maxTurns, maxTokens, maxCostUsd, maxWallTime}",
        |e| match e {
            AgentPolicyEntry::Policy(p) => Ok(p),
            AgentPolicyEntry::Roles(r) => Err(r),
        },
    )?;
    for (key, p) in layers {
        policy.apply(&key, p)?;
    }
    Ok(policy)
}

/// Checks every `retries`, `timeouts` and `agentPolicy` setting of `config` at once (the
/// steps that use one check only theirs): for a configuration about to be
/// shared by many machines, where a bad setting would fail their steps.
pub fn check(config: &WorkflowConfig) -> Result<(), PolicyError> {
    let mut pairs: Vec<(&str, &str)> = vec![("default", "default")];
    for (workflow, entry) in &config.retries {
        pairs.push((workflow, "default"));
        if let RetriesEntry::Roles(roles) = entry {
            pairs.extend(roles.keys().map(|role| (workflow.as_str(), role.as_str())));
        }
    }
    for (workflow, entry) in &config.timeouts {
        pairs.push((workflow, "default"));
        if let TimeoutsEntry::Roles(roles) = entry {
            pairs.extend(roles.keys().map(|role| (workflow.as_str(), role.as_str())));
        }
    }
    for (workflow, entry) in &config.agent_policy {
        pairs.push((workflow, "default"));
        if let AgentPolicyEntry::Roles(roles) = entry {
            pairs.extend(roles.keys().map(|role| (workflow.as_str(), role.as_str())));
        }
    }
    for (workflow, role) in pairs {
        retry_policy(Some(config), workflow, role)?;
        timeout(Some(config), workflow, role)?;
        agent_policy(Some(config), workflow, role)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> WorkflowConfig {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn check_finds_a_bad_setting_wherever_it_is() {
        assert!(check(&config("retries:\n  default: { max: 2, backoff: 1s }\n")).is_ok());
        for (yaml, key) in [
            (
                "retries:\n  w:\n    r: { backoff: soon }\n",
                "retries.w.r.backoff",
            ),
            ("retries:\n  w: { factor: 0.5 }\n", "retries.w.factor"),
            (
                "timeouts:\n  w:\n    default: never\n",
                "timeouts.w.default",
            ),
            ("timeouts:\n  default: { r: 1s }\n", "timeouts.default"),
        ] {
            match check(&config(yaml)) {
                Err(e) => assert_eq!(e.key, key, "{yaml}"),
                Ok(()) => panic!("accepted:\n{yaml}"),
            }
        }
    }

    #[test]
    fn the_most_specific_setting_wins_field_by_field() {
        let c = config(
            "retries:\n  default: { max: 2, backoff: 10s, factor: 2 }\n  solve-issue:\n    default: { backoff: 1s }\n    developer: { max: 5 }\n  flat: { max: 1 }\n",
        );
        let p = |w: &str, r: &str| retry_policy(Some(&c), w, r).unwrap_or_else(|e| panic!("{e}"));
        let dev = p("solve-issue", "developer");
        assert_eq!((dev.max, dev.backoff), (5, Duration::from_secs(1)));
        let rev = p("solve-issue", "reviewer");
        assert_eq!((rev.max, rev.backoff), (2, Duration::from_secs(1)));
        assert_eq!(p("flat", "x").max, 1);
        let other = p("other", "x");
        assert_eq!(
            (other.max, other.backoff, other.factor),
            (2, Duration::from_secs(10), 2.0)
        );
        assert_eq!(retry_policy(None, "w", "r").ok(), Some(RetryPolicy::NONE));
    }

    #[test]
    fn agent_policies_merge_field_by_field() {
        let c = config(
            "agentPolicy:\n  default: { maxTurns: 10, denyCommands: [curl] }\n  fix:\n    default: { commandTimeout: 5s }\n    reviewer: { readOnly: true, maxCostUsd: 0.25 }\n  flat: { allowCommands: [sh], maxWallTime: 1m, maxTokens: 900 }\n",
        );
        let p = |w: &str, r: &str| agent_policy(Some(&c), w, r).unwrap_or_else(|e| panic!("{e}"));
        let rev = p("fix", "reviewer");
        assert!(rev.read_only);
        assert_eq!(rev.max_turns, 10);
        assert_eq!(rev.deny_commands, vec!["curl".to_string()]);
        assert_eq!(rev.command_timeout, Duration::from_secs(5));
        assert_eq!(rev.max_cost_usd, Some(0.25));
        let dev = p("fix", "developer");
        assert!(!dev.read_only);
        assert_eq!(dev.max_cost_usd, None);
        let flat = p("flat", "x");
        assert_eq!(flat.allow_commands, Some(vec!["sh".to_string()]));
        assert_eq!(flat.max_wall_time, Some(Duration::from_secs(60)));
        assert_eq!(flat.max_tokens, Some(900));
        assert_eq!(
            flat.command_timeout,
            AgentPolicy::standard().command_timeout
        );
        assert_eq!(
            agent_policy(None, "w", "r").ok(),
            Some(AgentPolicy::standard())
        );
        for (yaml, key) in [
            (
                "agentPolicy:\n  w: { r: { maxTurns: 0 } }\n",
                "agentPolicy.w.r.maxTurns",
            ),
            (
                "agentPolicy:\n  w: { maxWallTime: soon }\n",
                "agentPolicy.w.maxWallTime",
            ),
            (
                "agentPolicy:\n  default: { maxCostUsd: -1 }\n",
                "agentPolicy.default.maxCostUsd",
            ),
            (
                "agentPolicy:\n  default: { r: {} }\n",
                "agentPolicy.default",
            ),
        ] {
            match check(&config(yaml)) {
                Err(e) => assert_eq!(e.key, key, "{yaml}"),
                Ok(()) => panic!("accepted:\n{yaml}"),
            }
        }
        assert!(
            serde_yaml::from_str::<WorkflowConfig>(
                "agentPolicy:\n  w: { readOnly: true, maxTurn: 3 }\n"
            )
            .is_err()
        );
    }

    #[test]
    fn delays_grow_by_the_factor_and_are_capped() {
        let p = RetryPolicy {
            max: 5,
            backoff: Duration::from_secs(10),
            factor: 2.0,
        };
        assert_eq!(p.delay(1), Duration::from_secs(10));
        assert_eq!(p.delay(2), Duration::from_secs(20));
        assert_eq!(p.delay(3), Duration::from_secs(40));
        assert_eq!(p.delay(200), MAX_BACKOFF);
    }

    proptest::proptest! {
        #[test]
        fn delays_never_shrink_and_stay_capped(
            backoff_ms in 0u64..10_000_000,
            factor in 1.0f64..100.0,
            n in 1u32..400,
        ) {
            let p = RetryPolicy { max: n, backoff: Duration::from_millis(backoff_ms), factor };
            let (a, b) = (p.delay(n), p.delay(n + 1));
            proptest::prop_assert!(a <= b, "{a:?} > {b:?}");
            proptest::prop_assert!(b <= MAX_BACKOFF);
            // The first retry waits the backoff (up to float rounding).
            let first = p.delay(1).abs_diff(p.backoff.min(MAX_BACKOFF));
            proptest::prop_assert!(first <= Duration::from_micros(1), "{first:?}");
        }

        #[test]
        fn any_duration_text_parses_or_names_its_key(text in "\\PC{0,12}") {
            match parse_duration("retries.default.backoff", &text) {
                Ok(_) => {}
                Err(e) => proptest::prop_assert!(e.to_string().contains("retries.default.backoff")),
            }
        }
    }

    #[test]
    fn timeouts_per_workflow_and_role() {
        let c = config(
            "timeouts:\n  default: 30m\n  triage: { classify: 2m }\n  flat: 5m\n  mixed: { default: 1m, slow: 1h }\n",
        );
        let t = |w: &str, r: &str| timeout(Some(&c), w, r).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t("triage", "classify"), Some(Duration::from_secs(120)));
        assert_eq!(t("triage", "other"), Some(Duration::from_secs(1800)));
        assert_eq!(t("flat", "x"), Some(Duration::from_secs(300)));
        assert_eq!(t("mixed", "x"), Some(Duration::from_secs(60)));
        assert_eq!(t("mixed", "slow"), Some(Duration::from_secs(3600)));
        assert_eq!(timeout(None, "w", "r").ok(), Some(None));
    }

    #[test]
    fn bad_settings_name_their_key() {
        let c = config("retries:\n  w:\n    r: { backoff: soon }\n");
        let e = retry_policy(Some(&c), "w", "r")
            .err()
            .map(|e| e.to_string());
        assert!(
            e.as_deref()
                .unwrap_or_default()
                .contains("retries.w.r.backoff"),
            "{e:?}"
        );
        let c = config("retries:\n  default: { factor: 0.5 }\n");
        assert!(retry_policy(Some(&c), "w", "r").is_err());
        let c = config("timeouts:\n  default: { r: 1m }\n");
        assert!(timeout(Some(&c), "w", "r").is_err());
        let c = config("timeouts:\n  w: { r: forever }\n");
        let e = timeout(Some(&c), "w", "r").err().map(|e| e.to_string());
        assert!(
            e.as_deref().unwrap_or_default().contains("timeouts.w.r"),
            "{e:?}"
        );
    }

    #[test]
    fn errors_name_config_yaml_unless_told_where_the_configuration_is() {
        let c = config("retries:\n  w:\n    r: { backoff: soon }\n");
        let Err(e) = retry_policy(Some(&c), "w", "r") else {
            panic!("`soon` was taken for a duration");
        };
        assert!(
            e.to_string()
                .starts_with("config.yaml `retries.w.r.backoff`: "),
            "{e}"
        );
        let origin = "postgresql://uwf@/db (table uwf_config)";
        let moved = e.in_config(origin).to_string();
        assert!(
            moved.starts_with(&format!("{origin} `retries.w.r.backoff`: \"soon\"")),
            "{moved}"
        );
        assert!(!moved.contains("config.yaml"), "{moved}");
    }
}
