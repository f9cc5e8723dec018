//! A small client for OpenAI-compatible chat completions (and the
//! Anthropic Messages API, for a provider with `api: anthropic`),
//! configured from `config.yaml`.
//!
//! ```text
//! providers:                       # where: base URL + the env var holding the key
//!   openrouter: { baseUrl: "https://openrouter.ai/api/v1", apiKeyEnv: OPENROUTER_API_KEY }
//! models:                          # aliases: provider + the provider's model name
//!   sonnet: { provider: openrouter, name: anthropic/claude-sonnet-4 }
//!   mini:   { provider: openrouter, name: openai/gpt-4o-mini }
//! defaultModel: sonnet
//! modelOverrides: { extract: mini }        # the extraction model
//! roleModels: { solve-issue: { reviewer: mini } }   # per workflow, per role
//! ```
//!
//! [`resolve_model`] picks the alias, [`LlmClient::from_config`] turns it
//! into a client, [`LlmClient::chat`] sends the messages. The API key is
//! read from the environment variable the provider names (`.env` in the
//! storage root is loaded by [`run`](crate::run)); a provider with
//! `apiKeyEnv: ""` sends no key (local servers such as Ollama).
//! [`LlmClient::post_json`] sends a request body of the caller's own in the
//! provider's API (tool calls, for `uwf-agent`) with the same key handling,
//! timeouts and retries.
//!
//! Requests time out (connect 10 s, whole call 120 s) and are retried with
//! exponential backoff on HTTP 429, 5xx and connection failures (3 attempts,
//! honouring `Retry-After` up to 60 s). Environment overrides:
//! [`TIMEOUT_ENV`], [`BACKOFF_ENV`], [`ATTEMPTS_ENV`].
//!
//! The key never appears in a `Debug` of the client, in errors (a provider
//! message quoting it is redacted) or in logs.

use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uwf_protocol::{ProviderApi, WorkflowConfig};

use crate::KitError;

/// Environment variable: the whole-call timeout in seconds (default 120).
pub const TIMEOUT_ENV: &str = "UWF_LLM_TIMEOUT_SECS";
/// Environment variable: the backoff base in milliseconds (default 1000);
/// the n-th retry waits `base × 2^(n-1)` unless `Retry-After` says otherwise.
pub const BACKOFF_ENV: &str = "UWF_LLM_BACKOFF_MS";
/// Environment variable: attempts per call, at least 1 (default 3).
pub const ATTEMPTS_ENV: &str = "UWF_LLM_MAX_ATTEMPTS";

/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default whole-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Default backoff base.
pub const DEFAULT_BACKOFF: Duration = Duration::from_millis(1000);
/// Default attempts per call.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// Longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The scenario name of extraction in `modelOverrides` (and the model
/// alias tried after it).
pub const EXTRACT: &str = "extract";

/// The `anthropic-version` header sent to [`ProviderApi::Anthropic`]
/// providers (the Messages API version this client speaks).
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` of a [`LlmClient::chat`] over the Anthropic Messages API,
/// which requires one.
pub const ANTHROPIC_MAX_TOKENS: u32 = 8192;

/// The answer of [`LlmClient::post_json`].
#[derive(Debug, Clone, PartialEq)]
pub struct JsonReply {
    /// The response body.
    pub body: Value,
    /// Wall time of the call, retries and backoff included (ms).
    pub duration_ms: u64,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: "system".into(),
            content: content.into(),
        }
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: "user".into(),
            content: content.into(),
        }
    }

    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: "assistant".into(),
            content: content.into(),
        }
    }
}

/// Token counts reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the request.
    pub prompt_tokens: u64,
    /// Tokens in the answer.
    pub completion_tokens: u64,
    /// Their sum, as the provider reports it.
    pub total_tokens: u64,
}

/// The answer of [`LlmClient::chat`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatReply {
    /// The assistant message's text.
    pub content: String,
    /// Token usage, when the provider reports it.
    pub usage: Option<Usage>,
    /// Wall time of the call, retries and backoff included (ms).
    pub duration_ms: u64,
}

/// The model alias to use (see the [module docs](self)).
///
/// * For a role (`scenario` `None`): `roleModels[workflow][role]`, then
///   `defaultModel`.
/// * For a scenario such as [`EXTRACT`]: `modelOverrides[scenario]`, then a
///   model alias named like the scenario (`models.extract`), then
///   `defaultModel`.
///
/// Only picks the alias; [`LlmClient::from_config`] checks that it exists.
/// [`KitError::NoModel`] when nothing applies.
///
/// ```
/// use uwf_protocol::{ProviderApi, WorkflowConfig};
/// let config: WorkflowConfig = serde_yaml::from_str(
///     "defaultModel: big\nmodelOverrides: { extract: small }\nroleModels: { wf: { reviewer: small } }\n",
/// ).unwrap();
/// use uwf_agent_kit::llm::resolve_model;
/// assert_eq!(resolve_model(&config, None, "wf", "reviewer").unwrap(), "small");
/// assert_eq!(resolve_model(&config, None, "wf", "planner").unwrap(), "big");
/// assert_eq!(resolve_model(&config, Some("extract"), "wf", "planner").unwrap(), "small");
/// ```
pub fn resolve_model(
    config: &WorkflowConfig,
    scenario: Option<&str>,
    workflow: &str,
    role: &str,
) -> Result<String, KitError> {
    let found = match scenario {
        None => config.role_model(workflow, role),
        Some(s) => config
            .model_override(s)
            .or_else(|| config.models.get_key_value(s).map(|(k, _)| k.as_str())),
    };
    if let Some(alias) = found.or(config.default_model.as_deref()) {
        return Ok(alias.to_owned());
    }
    Err(KitError::NoModel {
        purpose: match scenario {
            None => format!("role {role:?} of workflow {workflow:?}"),
            Some(EXTRACT) => "extraction (layer 2 of the output extract)".to_owned(),
            Some(s) => format!("scenario {s:?}"),
        },
    })
}

/// An API key that never shows in `Debug`.
#[derive(Clone)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A client for one model of an OpenAI-compatible provider.
///
/// ```no_run
/// use uwf_agent_kit::llm::{LlmClient, Message};
/// # fn demo(config: &uwf_protocol::WorkflowConfig) -> Result<(), uwf_agent_kit::KitError> {
/// let client = LlmClient::from_config(config, "sonnet")?;
/// let reply = client.chat(&[Message::user("Say hi")], false)?;
/// println!("{} ({:?})", reply.content, reply.usage);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LlmClient {
    agent: ureq::Agent,
    base_url: String,
    api: ProviderApi,
    endpoint: String,
    api_key: Option<Secret>,
    model: String,
    alias: String,
    connect_timeout: Duration,
    timeout: Duration,
    backoff: Duration,
    attempts: u32,
}

impl fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmClient")
            .field("endpoint", &self.endpoint)
            .field("api", &self.api)
            .field("model", &self.model)
            .field("alias", &self.alias)
            .field("api_key", &self.api_key)
            .field("timeout", &self.timeout)
            .field("backoff", &self.backoff)
            .field("attempts", &self.attempts)
            .finish()
    }
}

impl LlmClient {
    /// A client for `model` at `base_url` (the API root, e.g.
    /// `https://api.openai.com/v1`; requests go to
    /// `<base_url>/chat/completions`), sending `api_key` as a bearer token
    /// if given. Defaults: [`DEFAULT_TIMEOUT`], [`DEFAULT_BACKOFF`],
    /// [`DEFAULT_ATTEMPTS`]; environment overrides are applied by
    /// [`from_config`](Self::from_config) only.
    pub fn new(base_url: &str, api_key: Option<String>, model: impl Into<String>) -> Self {
        let model = model.into();
        let base_url = base_url.trim_end_matches('/').to_owned();
        let endpoint = format!("{base_url}/chat/completions");
        let mut client = Self {
            agent: ureq::Agent::new_with_defaults(),
            base_url,
            api: ProviderApi::Openai,
            endpoint,
            api_key: api_key.map(Secret),
            alias: model.clone(),
            model,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            backoff: DEFAULT_BACKOFF,
            attempts: DEFAULT_ATTEMPTS,
        };
        client.rebuild();
        client
    }

    /// The client for the model alias `model_alias` of `config`: its
    /// provider's base URL, its name, and the key from the provider's
    /// `apiKeyEnv` variable. Errors: [`KitError::UnknownModel`],
    /// [`KitError::UnknownProvider`], [`KitError::BadBaseUrl`],
    /// [`KitError::MissingApiKey`].
    pub fn from_config(config: &WorkflowConfig, model_alias: &str) -> Result<Self, KitError> {
        Self::from_config_with(config, model_alias, |var| std::env::var(var).ok())
    }

    /// [`from_config`](Self::from_config) with `env` instead of the
    /// process environment (for tests; also used for the overrides).
    pub fn from_config_with(
        config: &WorkflowConfig,
        model_alias: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, KitError> {
        let list = |keys: Vec<&String>| {
            if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let Some(model) = config.models.get(model_alias) else {
            return Err(KitError::UnknownModel {
                alias: model_alias.to_owned(),
                known: list(config.models.keys().collect()),
            });
        };
        let Some(provider) = config.providers.get(&model.provider) else {
            return Err(KitError::UnknownProvider {
                model: model_alias.to_owned(),
                provider: model.provider.clone(),
                known: list(config.providers.keys().collect()),
            });
        };
        let url = provider.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(KitError::BadBaseUrl {
                provider: model.provider.clone(),
                url: provider.base_url.clone(),
            });
        }
        let var = provider.api_key_env.trim();
        let api_key = if var.is_empty() {
            None
        } else {
            match env(var) {
                Some(k) if !k.trim().is_empty() => Some(k.trim().to_owned()),
                _ => {
                    return Err(KitError::MissingApiKey {
                        var: var.to_owned(),
                        provider: model.provider.clone(),
                    });
                }
            }
        };
        let mut client = Self::new(url, api_key, model.name.clone());
        client.alias = model_alias.to_owned();
        client.api = provider.api;
        let number = |var: &str| -> Option<u64> {
            let v = env(var)?;
            match v.trim().parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    tracing::warn!(value = %v, "{var} is not a whole number; ignored");
                    None
                }
            }
        };
        if let Some(s) = number(TIMEOUT_ENV) {
            client.timeout = Duration::from_secs(s.max(1));
        }
        if let Some(ms) = number(BACKOFF_ENV) {
            client.backoff = Duration::from_millis(ms);
        }
        if let Some(n) = number(ATTEMPTS_ENV) {
            client.attempts = u32::try_from(n).unwrap_or(u32::MAX).max(1);
        }
        client.rebuild();
        Ok(client)
    }

    /// Sets the whole-call timeout (connect, send, wait, read).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.rebuild();
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self.rebuild();
        self
    }

    /// Sets the backoff base: retry n waits `base × 2^(n-1)`.
    pub fn with_backoff(mut self, base: Duration) -> Self {
        self.backoff = base;
        self
    }

    /// Sets the number of attempts per call (at least 1).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The provider's model name (what is sent as `model`).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The alias the client was made from (the model name for
    /// [`new`](Self::new)).
    pub fn alias(&self) -> &str {
        &self.alias
    }

    /// The URL [`chat`](Self::chat) requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The API root (the provider's `baseUrl` without a trailing `/`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The API the provider speaks (`api` in `config.yaml`; [`new`](Self::new):
    /// OpenAI-compatible).
    pub fn api(&self) -> ProviderApi {
        self.api
    }

    /// Sets the API the provider speaks.
    pub fn with_api(mut self, api: ProviderApi) -> Self {
        self.api = api;
        self
    }

    /// Posts `body` to `<baseUrl>/<path>` with the key as the provider's
    /// API expects it (a bearer token; `x-api-key` and `anthropic-version`
    /// for [`ProviderApi::Anthropic`]), with the same timeouts and retries
    /// as [`chat`](Self::chat), and returns the response parsed as JSON:
    /// for agents that speak a provider's wire format themselves (tool
    /// calls). Errors as for `chat`, none containing the key.
    pub fn post_json(&self, path: &str, body: &Value) -> Result<JsonReply, KitError> {
        let url = format!("{}/{}", self.base_url, path.trim_start_matches('/'));
        let started = Instant::now();
        let text = self.send_with_retries(&url, body)?;
        let value: Value = serde_json::from_str(&text).map_err(|e| KitError::LlmResponse {
            url: url.clone(),
            reason: self.redact(&format!("not JSON ({e}): {}", excerpt(&text, 200))),
        })?;
        Ok(JsonReply {
            body: value,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    fn rebuild(&mut self) {
        let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
            .iter()
            .any(|p| self.endpoint.starts_with(p));
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(self.connect_timeout))
            .timeout_global(Some(self.timeout))
            .user_agent(concat!("uwf-agent-kit/", env!("CARGO_PKG_VERSION")));
        if loopback {
            // A local server is never reached through HTTP(S)_PROXY.
            config = config.proxy(None);
        }
        self.agent = config.build().into();
    }

    /// Removes the API key from `text`.
    fn redact(&self, text: &str) -> String {
        match &self.api_key {
            Some(Secret(k)) if !k.is_empty() => text.replace(k.as_str(), "<redacted>"),
            _ => text.to_owned(),
        }
    }

    /// Sends `messages` and returns the assistant's answer. With `json`,
    /// asks for JSON mode (`response_format: {"type": "json_object"}`).
    ///
    /// Retries HTTP 429, 5xx and connection failures up to the attempt
    /// limit with exponential backoff (honouring `Retry-After`). Errors:
    /// [`KitError::LlmUnreachable`], [`KitError::LlmStatus`],
    /// [`KitError::LlmResponse`] — none of them contains the key.
    pub fn chat(&self, messages: &[Message], json: bool) -> Result<ChatReply, KitError> {
        if self.api == ProviderApi::Anthropic {
            return self.chat_anthropic(messages);
        }
        let mut body = json!({ "model": self.model, "messages": messages, "stream": false });
        if json {
            body["response_format"] = json!({ "type": "json_object" });
        }
        let started = Instant::now();
        let text = self.send_with_retries(&self.endpoint, &body)?;
        let mut reply = self.parse_reply(&text)?;
        reply.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::debug!(
            model = %self.model,
            duration_ms = reply.duration_ms,
            usage = ?reply.usage,
            "chat completion"
        );
        Ok(reply)
    }

    /// [`chat`](Self::chat) over the Anthropic Messages API: the system
    /// messages become `system`, the text of the answer's text blocks is
    /// the content (that API has no JSON mode).
    fn chat_anthropic(&self, messages: &[Message]) -> Result<ChatReply, KitError> {
        let system: Vec<&str> = messages
            .iter()
            .filter(|m| m.role == "system")
            .map(|m| m.content.as_str())
            .collect();
        let rest: Vec<&Message> = messages.iter().filter(|m| m.role != "system").collect();
        let mut body =
            json!({ "model": self.model, "max_tokens": ANTHROPIC_MAX_TOKENS, "messages": rest });
        if !system.is_empty() {
            body["system"] = Value::String(system.join("\n\n"));
        }
        let reply = self.post_json("messages", &body)?;
        let url = format!("{}/messages", self.base_url);
        let blocks = reply
            .body
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| KitError::LlmResponse {
                url,
                reason: self.redact(&format!(
                    "no content in {}",
                    excerpt(&reply.body.to_string(), 200)
                )),
            })?;
        let content = blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("");
        let tokens = |k: &str| {
            reply
                .body
                .pointer(&format!("/usage/{k}"))
                .and_then(Value::as_u64)
        };
        let usage = match (tokens("input_tokens"), tokens("output_tokens")) {
            (Some(i), Some(o)) => Some(Usage {
                prompt_tokens: i,
                completion_tokens: o,
                total_tokens: i + o,
            }),
            _ => None,
        };
        Ok(ChatReply {
            content,
            usage,
            duration_ms: reply.duration_ms,
        })
    }

    /// Posts `body` to `url`, retrying as [`chat`](Self::chat) documents;
    /// the body of the first 2xx response.
    fn send_with_retries(&self, url: &str, body: &Value) -> Result<String, KitError> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let (error, retry_after) = match self.send(url, body) {
                Ok(Sent::Ok(text)) => return Ok(text),
                Ok(Sent::Status {
                    status,
                    message,
                    retry_after,
                }) => {
                    let retryable = status == 429 || (500..600).contains(&status);
                    let e = KitError::LlmStatus {
                        url: url.to_owned(),
                        status,
                        attempts: attempt,
                        help: status_help(status),
                        message,
                    };
                    if !retryable {
                        return Err(e);
                    }
                    (e, retry_after)
                }
                Err(Failure { reason, retryable }) => {
                    let e = KitError::LlmUnreachable {
                        url: url.to_owned(),
                        attempts: attempt,
                        reason,
                    };
                    if !retryable {
                        return Err(e);
                    }
                    (e, None)
                }
            };
            if attempt >= self.attempts {
                return Err(error);
            }
            let wait = retry_after.unwrap_or_else(|| {
                self.backoff
                    .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
            });
            tracing::warn!(
                model = %self.model,
                attempt,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "LLM call failed; retrying"
            );
            std::thread::sleep(wait);
        }
    }

    fn send(&self, url: &str, body: &Value) -> Result<Sent, Failure> {
        let mut req = self
            .agent
            .post(url)
            .header("Content-Type", "application/json");
        match (&self.api_key, self.api) {
            (Some(Secret(key)), ProviderApi::Openai) => {
                req = req.header("Authorization", &format!("Bearer {key}"));
            }
            (Some(Secret(key)), ProviderApi::Anthropic) => {
                req = req.header("x-api-key", key);
            }
            (None, _) => {}
        }
        if self.api == ProviderApi::Anthropic {
            req = req.header("anthropic-version", ANTHROPIC_VERSION);
        }
        let mut resp = req.send_json(body).map_err(|e| self.failure(&e))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s).min(MAX_RETRY_AFTER));
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| self.failure(&e))?;
        if (200..300).contains(&status) {
            return Ok(Sent::Ok(text));
        }
        Ok(Sent::Status {
            status,
            message: self.redact(&error_message(&text)),
            retry_after,
        })
    }

    fn failure(&self, e: &ureq::Error) -> Failure {
        use ureq::Error as E;
        let retryable = match e {
            E::Io(_) | E::ConnectionFailed => true,
            E::Timeout(t) => matches!(t, ureq::Timeout::Connect),
            _ => false,
        };
        let reason = match e {
            E::Timeout(_) => format!(
                "{e} (timeouts: connect {}s, whole call {}s)",
                self.connect_timeout.as_secs(),
                self.timeout.as_secs()
            ),
            _ => e.to_string(),
        };
        Failure {
            reason: self.redact(&reason),
            retryable,
        }
    }

    fn parse_reply(&self, text: &str) -> Result<ChatReply, KitError> {
        let bad = |reason: String| KitError::LlmResponse {
            url: self.endpoint.clone(),
            reason: self.redact(&reason),
        };
        let v: Value = serde_json::from_str(text)
            .map_err(|e| bad(format!("not JSON ({e}): {}", excerpt(text, 200))))?;
        let message = v
            .pointer("/choices/0/message")
            .ok_or_else(|| bad(format!("no choices[0].message in {}", excerpt(text, 200))))?;
        let content = match message.get("content") {
            Some(Value::String(s)) => s.clone(),
            _ if message.get("tool_calls").is_some() => {
                return Err(bad(
                    "the model answered with tool calls instead of text".into()
                ));
            }
            _ => return Err(bad("the message has no text content".into())),
        };
        let usage = v
            .get("usage")
            .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok());
        Ok(ChatReply {
            content,
            usage,
            duration_ms: 0,
        })
    }
}

enum Sent {
    Ok(String),
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
}

struct Failure {
    reason: String,
    retryable: bool,
}

/// The provider's error message: `error.message` of an OpenAI-style error
/// body, else the start of the body.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
    });
    match message {
        Some(m) => excerpt(m, 300),
        None if body.trim().is_empty() => "(empty body)".to_owned(),
        None => excerpt(body, 300),
    }
}

/// The first `max` characters of `text` on one line.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}

fn status_help(status: u16) -> String {
    match status {
        401 | 403 => "the provider rejected the API key: check the variable named by the provider's `apiKeyEnv` in the storage root's .env".into(),
        404 => "check the provider's baseUrl (the API root, e.g. https://api.openai.com/v1) and the model's `name` in config.yaml".into(),
        400 | 422 => "the provider rejected the request; check the model's `name` and whether it supports JSON mode".into(),
        429 => "rate limited even after retrying; wait, raise the provider's limits, or set UWF_LLM_MAX_ATTEMPTS / UWF_LLM_BACKOFF_MS".into(),
        s if s >= 500 => "the provider failed even after retrying; try again later or switch models in config.yaml".into(),
        _ => "see the provider's message above".into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> WorkflowConfig {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    const CONFIG: &str = "providers:\n  p: { baseUrl: 'http://127.0.0.1:9/v1', apiKeyEnv: TEST_KEY }\n  local: { baseUrl: 'http://127.0.0.1:9/v1', apiKeyEnv: '' }\n  bad: { baseUrl: 'ftp://x', apiKeyEnv: '' }\nmodels:\n  big: { provider: p, name: big-1 }\n  extract: { provider: local, name: small-1 }\n  orphan: { provider: nope, name: x }\n  ftp: { provider: bad, name: x }\ndefaultModel: big\n";

    #[test]
    fn model_resolution_order() {
        let c = config(CONFIG);
        assert_eq!(
            resolve_model(&c, Some(EXTRACT), "wf", "r").ok().as_deref(),
            Some("extract"),
            "models.extract"
        );
        let c2 = config(&format!("{CONFIG}modelOverrides: {{ extract: big }}\n"));
        assert_eq!(
            resolve_model(&c2, Some(EXTRACT), "wf", "r").ok().as_deref(),
            Some("big"),
            "modelOverrides first"
        );
        let c3 = config("defaultModel: d\n");
        assert_eq!(
            resolve_model(&c3, Some(EXTRACT), "wf", "r").ok().as_deref(),
            Some("d"),
            "then defaultModel"
        );
        assert_eq!(
            resolve_model(&c3, None, "wf", "r").ok().as_deref(),
            Some("d")
        );
        let c4 = config("defaultModel: d\nroleModels: { wf: { r: special } }\n");
        assert_eq!(
            resolve_model(&c4, None, "wf", "r").ok().as_deref(),
            Some("special")
        );
        assert_eq!(
            resolve_model(&c4, None, "other", "r").ok().as_deref(),
            Some("d")
        );
        let none = WorkflowConfig::default();
        let e = resolve_model(&none, Some(EXTRACT), "wf", "r").unwrap_err();
        assert!(
            matches!(&e, KitError::NoModel { purpose } if purpose.contains("extraction")),
            "{e:?}"
        );
        let e = resolve_model(&none, None, "wf", "r").unwrap_err();
        assert!(
            e.to_string().contains("role \"r\" of workflow \"wf\""),
            "{e}"
        );
    }

    #[test]
    fn from_config_errors() {
        let c = config(CONFIG);
        let env = |v: &str| (v == "TEST_KEY").then(|| "sk-test".to_owned());
        let ok = LlmClient::from_config_with(&c, "big", env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.model(), "big-1");
        assert_eq!(ok.alias(), "big");
        assert_eq!(ok.endpoint(), "http://127.0.0.1:9/v1/chat/completions");
        let dbg = format!("{ok:?}");
        assert!(
            !dbg.contains("sk-test") && dbg.contains("<redacted>"),
            "{dbg}"
        );

        let no_key =
            LlmClient::from_config_with(&c, "extract", |_| None).unwrap_or_else(|e| panic!("{e}"));
        assert!(format!("{no_key:?}").contains("api_key: None"));

        let e = LlmClient::from_config_with(&c, "big", |_| None).unwrap_err();
        assert!(
            matches!(&e, KitError::MissingApiKey { var, provider } if var == "TEST_KEY" && provider == "p"),
            "{e:?}"
        );
        assert!(e.to_string().contains("TEST_KEY"), "{e}");
        let e = LlmClient::from_config_with(&c, "big", |_| Some("  ".into())).unwrap_err();
        assert!(
            matches!(e, KitError::MissingApiKey { .. }),
            "an empty key is missing"
        );

        let e = LlmClient::from_config_with(&c, "gpt5", env).unwrap_err();
        assert!(
            matches!(&e, KitError::UnknownModel { alias, known } if alias == "gpt5" && known == "big, extract, ftp, orphan"),
            "{e:?}"
        );
        let e = LlmClient::from_config_with(&c, "orphan", env).unwrap_err();
        assert!(
            matches!(&e, KitError::UnknownProvider { provider, known, .. } if provider == "nope" && known == "bad, local, p"),
            "{e:?}"
        );
        let e = LlmClient::from_config_with(&c, "ftp", env).unwrap_err();
        assert!(matches!(e, KitError::BadBaseUrl { .. }), "{e:?}");
    }

    #[test]
    fn env_overrides() {
        let c = config(CONFIG);
        let env = |v: &str| match v {
            TIMEOUT_ENV => Some("7".to_owned()),
            BACKOFF_ENV => Some("5".to_owned()),
            ATTEMPTS_ENV => Some("0".to_owned()),
            _ => None,
        };
        let client =
            LlmClient::from_config_with(&c, "extract", env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(client.timeout, Duration::from_secs(7));
        assert_eq!(client.backoff, Duration::from_millis(5));
        assert_eq!(client.attempts, 1);
        let junk = |v: &str| (v == BACKOFF_ENV).then(|| "soon".to_owned());
        let client =
            LlmClient::from_config_with(&c, "extract", junk).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(client.backoff, DEFAULT_BACKOFF);
    }

    #[test]
    fn error_messages_and_excerpts() {
        assert_eq!(
            error_message(r#"{"error":{"message":"bad key sk-1"}}"#),
            "bad key sk-1"
        );
        assert_eq!(error_message(r#"{"error":"nope"}"#), "nope");
        assert_eq!(error_message(""), "(empty body)");
        assert_eq!(error_message("<html>\n oops</html>"), "<html> oops</html>");
        assert_eq!(excerpt(&"a".repeat(10), 4), "aaaa…");
    }
}
