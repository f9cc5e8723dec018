//! The mock OpenAI-compatible server (documented on [`MockLlm`]).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use uwf_protocol::{ModelConfig, ProviderConfig, WorkflowConfig};

/// The model name scripted completions carry when the request names none.
pub const MOCK_MODEL: &str = "mock-model";

/// Content of the default reply, sent once the scripted replies are used up.
pub const EXHAUSTED: &str = "[uwf mock LLM: script exhausted]";

/// Largest request body accepted (bytes).
const MAX_BODY: usize = 64 << 20;

/// What the mock answers to one chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct MockReply {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: MockBody,
    /// Sleep before answering.
    pub delay: Duration,
    /// Extra response headers (e.g. `Retry-After`).
    pub headers: Vec<(String, String)>,
}

/// Alias of [`MockReply`] (the mock's "reply" in the scripts' vocabulary).
pub type Reply = MockReply;

/// The body of a [`MockReply`].
#[derive(Debug, Clone, PartialEq)]
pub enum MockBody {
    /// A JSON body. A `chat.completion` (with `choices`) gets the request's
    /// model and, if absent, a usage block; streamed when asked.
    Json(Value),
    /// Text sent verbatim (with this content type), never streamed.
    Raw {
        /// The `Content-Type`.
        content_type: String,
        /// The body.
        text: String,
    },
}

impl MockReply {
    /// A chat completion whose assistant message is `content`.
    pub fn text(content: impl Into<String>) -> Self {
        Self::message(
            json!({ "role": "assistant", "content": content.into() }),
            "stop",
        )
    }

    /// A chat completion whose content is `value` as JSON text (what an
    /// extraction model in JSON mode answers).
    pub fn json(value: &Value) -> Self {
        Self::text(value.to_string())
    }

    /// A chat completion calling the tool `name` with `arguments` (a JSON
    /// value, or a string used verbatim as the arguments text).
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::tool_calls(&[(name, arguments)])
    }

    /// A chat completion calling several tools at once.
    pub fn tool_calls(calls: &[(&str, Value)]) -> Self {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                let args = match args {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                json!({
                    "id": format!("call_{i}"),
                    "type": "function",
                    "function": { "name": name, "arguments": args }
                })
            })
            .collect();
        Self::message(
            json!({ "role": "assistant", "content": null, "tool_calls": calls }),
            "tool_calls",
        )
    }

    /// An error status with an OpenAI-style error body.
    pub fn status(status: u16) -> Self {
        Self::error(status, &format!("uwf mock LLM: scripted HTTP {status}"))
    }

    /// An error status with an OpenAI-style error body carrying `message`.
    pub fn error(status: u16, message: &str) -> Self {
        Self {
            status,
            body: MockBody::Json(json!({
                "error": { "message": message, "type": "mock_error", "code": status }
            })),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    /// A full `chat.completion` body of your own (status 200).
    pub fn completion(body: Value) -> Self {
        Self {
            status: 200,
            body: MockBody::Json(body),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    /// `text` verbatim with `status` (e.g. an HTML error page).
    pub fn raw(status: u16, content_type: &str, text: impl Into<String>) -> Self {
        Self {
            status,
            body: MockBody::Raw {
                content_type: content_type.to_owned(),
                text: text.into(),
            },
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    fn message(message: Value, finish: &str) -> Self {
        Self::completion(json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 0,
            "model": MOCK_MODEL,
            "choices": [{ "index": 0, "message": message, "finish_reason": finish }]
        }))
    }

    /// Waits `delay` before answering.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Adds `reasoning_content` to the assistant message.
    pub fn with_reasoning(mut self, reasoning: &str) -> Self {
        if let MockBody::Json(body) = &mut self.body
            && let Some(m) = body.pointer_mut("/choices/0/message")
        {
            m["reasoning_content"] = Value::String(reasoning.to_owned());
        }
        self
    }

    /// A reply from one turn of a script, in the format of
    /// `../shared/hermes/mock_openai.py` (so the same scripts work for
    /// both): `{content}`, `{tool_calls: [{name, arguments, id?}], content?}`,
    /// `{reasoning}`, `{status, error?}`, `{delay: seconds}`,
    /// `{finish_reason}`; plus `{json: <value>}` (content = the value as
    /// JSON) and `{retry_after: seconds}`.
    pub fn from_turn(turn: &Value) -> Result<Self, String> {
        let Some(t) = turn.as_object() else {
            return Err(format!("a turn must be a mapping, not {turn}"));
        };
        let secs = |key: &str| -> Result<Duration, String> {
            match t.get(key) {
                None | Some(Value::Null) => Ok(Duration::ZERO),
                Some(v) => v
                    .as_f64()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| format!("`{key}` must be a number of seconds, not {v}")),
            }
        };
        let delay = secs("delay")?;
        let mut reply = if let Some(status) = t.get("status").filter(|s| !s.is_null()) {
            let status = status
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .filter(|s| (100..600).contains(s))
                .ok_or_else(|| format!("`status` must be an HTTP status, not {status}"))?;
            match t.get("error").and_then(Value::as_str) {
                Some(m) => Self::error(status, m),
                None => Self::status(status),
            }
        } else {
            let mut calls = Vec::new();
            for (i, tc) in t
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let f = tc.get("function").unwrap_or(tc);
                let name = f
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("tool call {i} has no `name`"))?;
                let args = match f.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => "{}".to_owned(),
                };
                let id = tc
                    .get("id")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("call_{i}"), str::to_owned);
                calls.push(json!({
                    "id": id, "type": "function",
                    "function": { "name": name, "arguments": args }
                }));
            }
            let content = match (t.get("content"), t.get("json")) {
                (_, Some(v)) => Some(v.to_string()),
                (Some(Value::String(s)), None) => Some(s.clone()),
                (Some(Value::Null) | None, None) => None,
                (Some(other), None) => {
                    return Err(format!("`content` must be a string, not {other}"));
                }
            };
            let mut message = json!({ "role": "assistant" });
            message["content"] = match &content {
                Some(c) if !c.is_empty() || calls.is_empty() => Value::String(c.clone()),
                None if calls.is_empty() => Value::String(String::new()),
                _ => Value::Null,
            };
            if let Some(r) = t.get("reasoning").and_then(Value::as_str) {
                message["reasoning_content"] = Value::String(r.to_owned());
            }
            let finish = t
                .get("finish_reason")
                .and_then(Value::as_str)
                .unwrap_or(if calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                })
                .to_owned();
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            Self::message(message, &finish)
        };
        reply.delay = delay;
        let retry_after = secs("retry_after")?;
        if t.contains_key("retry_after") {
            reply = reply.with_header("Retry-After", &retry_after.as_secs().to_string());
        }
        Ok(reply)
    }
}

/// One request the mock received.
#[derive(Debug, Clone, PartialEq)]
pub struct MockRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The headers, names in lower case, in order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The body as text.
    pub raw_body: String,
}

impl MockRequest {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether this is a chat completion request.
    pub fn is_chat(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/chat/completions")
    }

    /// Whether this is an Anthropic Messages request (`POST …/messages`,
    /// what Claude Code sends).
    pub fn is_messages(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/messages")
    }

    /// Whether this is an OpenAI Responses request (`POST …/responses`,
    /// what Codex sends).
    pub fn is_responses(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/responses")
    }

    /// Whether this request asks the model for a turn, in any of the three
    /// APIs the mock speaks (and so consumes a scripted reply).
    pub fn is_model_call(&self) -> bool {
        self.is_chat() || self.is_messages() || self.is_responses()
    }

    /// Whether the request asked for a stream.
    pub fn is_stream(&self) -> bool {
        self.body.get("stream") == Some(&Value::Bool(true))
    }

    /// The text of the request's last `user` message, if any.
    pub fn last_user_message(&self) -> Option<&str> {
        self.body
            .get("messages")?
            .as_array()?
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?
            .get("content")?
            .as_str()
    }
}

struct State {
    queue: VecDeque<MockReply>,
    default: MockReply,
    requests: Vec<MockRequest>,
    log: Option<File>,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not take the mock down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A scripted OpenAI-compatible server on loopback, for tests. Stops when
/// dropped.
///
/// It listens on `127.0.0.1` (never another interface), serves
/// `POST …/chat/completions` from a queue of scripted [`MockReply`]s (then
/// a default reply), answers every other request with a quick 404, and
/// records every request. A request with `"stream": true` gets the same
/// reply as server-sent events (`chat.completion.chunk`s: role, content /
/// reasoning / tool-call deltas in pieces, the finish chunk, a usage chunk
/// when `stream_options.include_usage` is set, `data: [DONE]`), as the
/// OpenAI SDKs (and hermes) expect. The same queue also serves `POST
/// …/messages` (the Anthropic Messages API: Claude Code) and `POST
/// …/responses` (the OpenAI Responses API: Codex), each reply translated
/// into that API's events; [`model_requests`](Self::model_requests) lists
/// the calls of all three. Every response closes its connection.
///
/// ```
/// use uwf_agent_kit::testing::MockLlm;
/// use uwf_agent_kit::llm::{LlmClient, Message};
/// use serde_json::json;
///
/// let mock = MockLlm::start()?;
/// mock.reply_json(json!({ "approved": true }))
///     .reply_status(500);
/// let client = LlmClient::new(&mock.base_url(), None, "mock-model");
/// let reply = client.chat(&[Message::user("hi")], true)?;
/// assert_eq!(reply.content, r#"{"approved":true}"#);
/// assert_eq!(mock.count("/v1/chat/completions"), 1);
/// assert_eq!(mock.requests()[0].body["response_format"]["type"], "json_object");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm")
            .field("addr", &self.addr)
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

impl MockLlm {
    /// Starts a mock on a free loopback port.
    pub fn start() -> io::Result<Self> {
        Self::bind(0, None)
    }

    /// Starts a mock on loopback port `port` (0: any free port), appending
    /// one JSON line per request to `log` if given (`seq`, `method`, `path`,
    /// `headers` with `authorization` cut short, `body`, `reply_status`).
    pub fn bind(port: u16, log: Option<&Path>) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        let addr = listener.local_addr()?;
        let log = match log {
            Some(p) => Some(OpenOptions::new().create(true).append(true).open(p)?),
            None => None,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                default: MockReply::text(EXHAUSTED),
                requests: Vec::new(),
                log,
            }),
            stop: AtomicBool::new(false),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("uwf-mock-llm".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if accept_shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let conn_shared = Arc::clone(&accept_shared);
                    // Each connection on its own thread: a delayed reply must
                    // not hold up the others.
                    let _ = std::thread::Builder::new()
                        .name("uwf-mock-llm-conn".into())
                        .spawn(move || {
                            let _ = serve(stream, &conn_shared);
                        });
                }
            })?;
        Ok(Self {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address listened on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API root to configure as a provider's `baseUrl`:
    /// `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// A configuration with one provider `mock` (this server, no API key),
    /// one model alias `mock` (named [`MOCK_MODEL`]) and `defaultModel: mock`.
    pub fn config(&self) -> WorkflowConfig {
        let mut c = WorkflowConfig::default();
        c.providers.insert(
            "mock".into(),
            ProviderConfig {
                base_url: self.base_url(),
                api_key_env: String::new(),
                api: uwf_protocol::ProviderApi::Openai,
            },
        );
        c.models.insert(
            "mock".into(),
            ModelConfig {
                provider: "mock".into(),
                name: MOCK_MODEL.into(),
                price: None,
            },
        );
        c.default_model = Some("mock".into());
        c
    }

    /// Queues `reply` for the next chat request without one.
    pub fn push(&self, reply: MockReply) -> &Self {
        self.shared.lock().queue.push_back(reply);
        self
    }

    /// Queues a completion answering `content`.
    pub fn reply_text(&self, content: impl Into<String>) -> &Self {
        self.push(MockReply::text(content))
    }

    /// Queues a completion whose content is `value` as JSON.
    pub fn reply_json(&self, value: Value) -> &Self {
        self.push(MockReply::json(&value))
    }

    /// Queues an error status.
    pub fn reply_status(&self, status: u16) -> &Self {
        self.push(MockReply::status(status))
    }

    /// Queues a completion calling tool `name` with `arguments`.
    pub fn reply_tool_call(&self, name: &str, arguments: Value) -> &Self {
        self.push(MockReply::tool_call(name, arguments))
    }

    /// Sets the reply used when the queue is empty (default: a completion
    /// answering [`EXHAUSTED`]).
    pub fn set_default(&self, reply: MockReply) -> &Self {
        self.shared.lock().default = reply;
        self
    }

    /// Scripted replies not yet used.
    pub fn pending(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<MockRequest> {
        self.shared.lock().requests.clone()
    }

    /// The chat completion requests received so far.
    pub fn chat_requests(&self) -> Vec<MockRequest> {
        self.requests()
            .into_iter()
            .filter(MockRequest::is_chat)
            .collect()
    }

    /// The model calls received so far, in any API (chat completions,
    /// Anthropic Messages, OpenAI Responses).
    pub fn model_requests(&self) -> Vec<MockRequest> {
        self.requests()
            .into_iter()
            .filter(MockRequest::is_model_call)
            .collect()
    }

    /// How many requests had path `path` (query string ignored).
    pub fn count(&self, path: &str) -> usize {
        self.shared
            .lock()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .count()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut out = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(());
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or("/").to_owned();
    let path = target.split('?').next().unwrap_or("/").to_owned();
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if header("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = if header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        read_chunked(&mut reader)?
    } else {
        let n = header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
            .min(MAX_BODY);
        let mut buf = vec![0; n];
        reader.read_exact(&mut buf)?;
        buf
    };
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let body: Value = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
    let request = MockRequest {
        method,
        path,
        headers,
        body,
        raw_body,
    };

    let reply = {
        let mut state = shared.lock();
        let reply = if request.is_model_call() {
            match state.queue.pop_front() {
                Some(r) => r,
                None => state.default.clone(),
            }
        } else {
            MockReply::error(
                404,
                &format!("uwf mock LLM: no route {} {}", request.method, request.path),
            )
        };
        let seq = state.requests.len() + 1;
        if let Some(log) = state.log.as_mut() {
            let headers: serde_json::Map<String, Value> = request
                .headers
                .iter()
                .map(|(k, v)| {
                    let v = if k == "authorization" && v.chars().count() > 14 {
                        format!("{}...", v.chars().take(14).collect::<String>())
                    } else {
                        v.clone()
                    };
                    (k.clone(), Value::String(v))
                })
                .collect();
            let entry = json!({
                "seq": seq,
                "method": request.method,
                "path": request.path,
                "headers": headers,
                "body": if request.body.is_null() { Value::String(request.raw_body.clone()) } else { request.body.clone() },
                "stream": request.is_stream(),
                "reply_status": reply.status,
            });
            let _ = writeln!(log, "{entry}");
            let _ = log.flush();
        }
        state.requests.push(request.clone());
        reply
    };
    if !reply.delay.is_zero() {
        std::thread::sleep(reply.delay);
    }
    respond(&mut out, &request, reply)?;
    out.flush()?;
    let _ = out.shutdown(std::net::Shutdown::Both);
    Ok(())
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        line.clear();
        reader.read_line(&mut line)?;
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// A rough token count for the usage block: 4 characters a token.
fn usage_for(request: &MockRequest, completion: &str) -> Value {
    let prompt = request
        .body
        .get("messages")
        .map_or(0, |m| m.to_string().len() / 4)
        .max(1);
    let completion = (completion.len() / 4).max(1);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion
    })
}

fn respond(out: &mut impl Write, request: &MockRequest, reply: MockReply) -> io::Result<()> {
    let (content_type, text) = match reply.body {
        MockBody::Raw { content_type, text } => (content_type, text),
        MockBody::Json(mut body) => {
            if body.get("choices").is_some() {
                if let Some(model) = request.body.get("model").filter(|m| m.is_string()) {
                    body["model"] = model.clone();
                }
                if body.get("usage").is_none() {
                    let content = body
                        .pointer("/choices/0/message")
                        .map(Value::to_string)
                        .unwrap_or_default();
                    body["usage"] = usage_for(request, &content);
                }
                let ok = (200..300).contains(&reply.status);
                if ok && request.is_messages() {
                    return super::mock_wire::anthropic(out, request, &body, &reply.headers);
                }
                if ok && request.is_responses() {
                    return super::mock_wire::responses(out, request, &body, &reply.headers);
                }
                if request.is_stream() && ok {
                    return stream(out, request, &body, &reply.headers);
                }
            }
            ("application/json".to_owned(), body.to_string())
        }
    };
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason_phrase(reply.status),
        text.len()
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(text.as_bytes())
}

/// Up to three pieces of `text`, so clients must re-assemble deltas.
pub(super) fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < 6 {
        return vec![text.to_owned()];
    }
    let size = chars.len().div_ceil(3);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn stream(
    out: &mut impl Write,
    request: &MockRequest,
    completion: &Value,
    headers: &[(String, String)],
) -> io::Result<()> {
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n",
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;

    let id = completion
        .get("id")
        .cloned()
        .unwrap_or(json!("chatcmpl-mock"));
    let model = completion
        .get("model")
        .cloned()
        .unwrap_or(json!(MOCK_MODEL));
    let created = completion.get("created").cloned().unwrap_or(json!(0));
    let message = completion
        .pointer("/choices/0/message")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let finish = completion
        .pointer("/choices/0/finish_reason")
        .cloned()
        .unwrap_or(json!("stop"));
    let mut chunk = |delta: Value, finish: Value, usage: Option<&Value>| -> io::Result<()> {
        let mut obj = json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }]
        });
        if let Some(u) = usage {
            obj["choices"] = json!([]);
            obj["usage"] = u.clone();
        }
        out.write_all(format!("data: {obj}\n\n").as_bytes())?;
        out.flush()
    };

    chunk(
        json!({ "role": "assistant", "content": "" }),
        Value::Null,
        None,
    )?;
    for key in ["reasoning_content", "reasoning"] {
        if let Some(r) = message.get(key).and_then(Value::as_str) {
            for p in pieces(r) {
                chunk(json!({ "reasoning_content": p }), Value::Null, None)?;
            }
            break;
        }
    }
    if let Some(c) = message
        .get("content")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
    {
        for p in pieces(c) {
            chunk(json!({ "content": p }), Value::Null, None)?;
        }
    }
    for (i, tc) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = tc.pointer("/function/name").cloned().unwrap_or(Value::Null);
        let args = tc
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("{}");
        let tc_id = tc
            .get("id")
            .cloned()
            .unwrap_or_else(|| json!(format!("call_{i}")));
        chunk(
            json!({ "tool_calls": [{ "index": i, "id": tc_id, "type": "function",
                                      "function": { "name": name, "arguments": "" } }] }),
            Value::Null,
            None,
        )?;
        for p in pieces(args) {
            chunk(
                json!({ "tool_calls": [{ "index": i, "function": { "arguments": p } }] }),
                Value::Null,
                None,
            )?;
        }
    }
    chunk(json!({}), finish, None)?;
    let include_usage = request
        .body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if include_usage && let Some(u) = completion.get("usage") {
        chunk(Value::Null, Value::Null, Some(u))?;
    }
    out.write_all(b"data: [DONE]\n\n")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A minimal HTTP/1.1 client: sends `body` to `path`, returns the status
    /// line and the body.
    fn http(mock: &MockLlm, method: &str, path: &str, body: &str) -> (String, String) {
        let mut s = TcpStream::connect(mock.addr()).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-very-secret-key\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_owned(), body.to_owned())
    }

    /// What a client re-assembles from a stream.
    struct Assembled {
        content: String,
        reasoning: String,
        tools: Vec<(String, String)>,
        usage: Option<Value>,
        finish: String,
        done: bool,
    }

    /// Re-assembles an SSE stream the way OpenAI clients do.
    fn assemble(sse: &str) -> Assembled {
        let mut content = String::new();
        let mut reasoning = String::new();
        let mut tools: Vec<(String, String)> = Vec::new();
        let mut usage = None;
        let mut finish = String::new();
        let mut done = false;
        for event in sse.split("\n\n").filter(|e| !e.is_empty()) {
            let data = event.strip_prefix("data: ").unwrap();
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(v["object"], "chat.completion.chunk");
            if let Some(u) = v.get("usage") {
                usage = Some(u.clone());
            }
            let Some(choice) = v["choices"].get(0) else {
                continue;
            };
            if let Some(f) = choice["finish_reason"].as_str() {
                finish = f.to_owned();
            }
            let d = &choice["delta"];
            content.push_str(d["content"].as_str().unwrap_or(""));
            reasoning.push_str(d["reasoning_content"].as_str().unwrap_or(""));
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let i = tc["index"].as_u64().unwrap() as usize;
                if tools.len() <= i {
                    tools.push((String::new(), String::new()));
                }
                if let Some(n) = tc["function"]["name"].as_str() {
                    tools[i].0.push_str(n);
                }
                tools[i]
                    .1
                    .push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
            }
        }
        Assembled {
            content,
            reasoning,
            tools,
            usage,
            finish,
            done,
        }
    }

    #[test]
    fn scripted_replies_in_order_then_default() {
        let mock = MockLlm::start().unwrap();
        mock.reply_text("one").reply_status(503);
        let (status, body) = http(
            &mock,
            "POST",
            "/v1/chat/completions",
            r#"{"model":"m1","messages":[]}"#,
        );
        assert_eq!(status, "HTTP/1.1 200 OK");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "one");
        assert_eq!(v["model"], "m1", "the request's model is echoed");
        assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
        let (status, body) = http(&mock, "POST", "/v1/chat/completions", "{}");
        assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
        assert!(body.contains("scripted HTTP 503"), "{body}");
        let (_, body) = http(&mock, "POST", "/v1/chat/completions", "{}");
        assert!(body.contains(EXHAUSTED), "{body}");
        assert_eq!(mock.count("/v1/chat/completions"), 3);
        assert_eq!(mock.pending(), 0);
        let r = &mock.requests()[0];
        assert_eq!(r.body["model"], "m1");
        assert_eq!(r.header("Authorization"), Some("Bearer sk-very-secret-key"));
    }

    #[test]
    fn other_paths_are_404_and_do_not_consume_replies() {
        let mock = MockLlm::start().unwrap();
        mock.reply_text("kept");
        for path in ["/v1/models", "/api/tags", "/version"] {
            let (status, _) = http(&mock, "GET", path, "");
            assert_eq!(status, "HTTP/1.1 404 Not Found");
        }
        let (status, _) = http(&mock, "POST", "/api/show", "{}");
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        assert_eq!(mock.pending(), 1);
        assert_eq!(mock.count("/v1/models"), 1);
        assert_eq!(mock.requests().len(), 4);
        assert!(mock.chat_requests().is_empty());
    }

    #[test]
    fn streams_content_reasoning_tool_calls_and_usage() {
        let mock = MockLlm::start().unwrap();
        mock.push(MockReply::text("Hello, streaming world!").with_reasoning("thinking hard"))
            .reply_tool_call("terminal", json!({ "command": "echo hi" }));
        let req = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}"#;
        let (status, sse) = http(&mock, "POST", "/v1/chat/completions", req);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(
            sse.matches("data: ").count() > 4,
            "split into pieces: {sse}"
        );
        let Assembled {
            content,
            reasoning,
            tools,
            usage,
            finish,
            done,
        } = assemble(&sse);
        assert_eq!(content, "Hello, streaming world!");
        assert_eq!(reasoning, "thinking hard");
        assert!(tools.is_empty());
        assert!(usage.is_some());
        assert_eq!(finish, "stop");
        assert!(done);

        let req = r#"{"model":"m","stream":true,"messages":[]}"#;
        let (_, sse) = http(&mock, "POST", "/v1/chat/completions", req);
        let Assembled {
            content,
            tools,
            usage,
            finish,
            done,
            ..
        } = assemble(&sse);
        assert_eq!(content, "");
        assert_eq!(
            tools,
            vec![("terminal".to_owned(), r#"{"command":"echo hi"}"#.to_owned())]
        );
        assert_eq!(usage, None, "no usage chunk unless include_usage");
        assert_eq!(finish, "tool_calls");
        assert!(done);
        assert!(mock.requests().iter().all(MockRequest::is_stream));
    }

    #[test]
    fn errors_are_not_streamed() {
        let mock = MockLlm::start().unwrap();
        mock.push(MockReply::status(429).with_header("Retry-After", "0"));
        let (status, body) = http(&mock, "POST", "/v1/chat/completions", r#"{"stream":true}"#);
        assert_eq!(status, "HTTP/1.1 429 Too Many Requests");
        assert!(body.starts_with('{'), "{body}");
    }

    #[test]
    fn script_turns_in_the_python_mock_format() {
        let turns: Value = serde_json::from_str(
            r#"[{"content": "hi", "delay": 0.01},
                {"tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}, "id": "c1"}], "content": ""},
                {"status": 500, "error": "boom"},
                {"json": {"a": 1}},
                {"reasoning": "r", "content": "x", "finish_reason": "length"},
                {"status": 429, "retry_after": 2}]"#,
        )
        .unwrap();
        let replies: Vec<MockReply> = turns
            .as_array()
            .unwrap()
            .iter()
            .map(|t| MockReply::from_turn(t).unwrap())
            .collect();
        assert_eq!(replies[0].delay, Duration::from_millis(10));
        let MockBody::Json(b) = &replies[1].body else {
            panic!()
        };
        assert_eq!(b["choices"][0]["message"]["tool_calls"][0]["id"], "c1");
        assert_eq!(
            b["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            r#"{"command":"ls"}"#
        );
        assert_eq!(b["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(b["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(replies[2].status, 500);
        let MockBody::Json(b) = &replies[3].body else {
            panic!()
        };
        assert_eq!(b["choices"][0]["message"]["content"], r#"{"a":1}"#);
        let MockBody::Json(b) = &replies[4].body else {
            panic!()
        };
        assert_eq!(b["choices"][0]["finish_reason"], "length");
        assert_eq!(b["choices"][0]["message"]["reasoning_content"], "r");
        assert_eq!(
            replies[5].headers,
            vec![("Retry-After".to_owned(), "2".to_owned())]
        );
        assert!(MockReply::from_turn(&json!("x")).is_err());
        assert!(MockReply::from_turn(&json!({ "status": 42 })).is_err());
        assert!(MockReply::from_turn(&json!({ "tool_calls": [{}] })).is_err());
    }

    #[test]
    fn log_file_and_chunked_bodies() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.jsonl");
        let mock = MockLlm::bind(0, Some(&log)).unwrap();
        let mut s = TcpStream::connect(mock.addr()).unwrap();
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-0123456789abcdef\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{{\"a\":\r\n3\r\n 1}}\r\n0\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        assert_eq!(mock.requests()[0].body, json!({ "a": 1 }));
        let line = std::fs::read_to_string(&log).unwrap();
        let entry: Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(entry["path"], "/v1/chat/completions");
        assert_eq!(entry["body"], json!({ "a": 1 }));
        assert_eq!(entry["headers"]["authorization"], "Bearer sk-0123...");
        assert!(!line.contains("abcdef"));
    }

    #[test]
    fn delayed_replies_do_not_block_others_and_drop_stops() {
        let mock = MockLlm::start().unwrap();
        mock.push(MockReply::text("slow").with_delay(Duration::from_millis(400)))
            .reply_text("fast");
        let addr = mock.addr();
        let slow = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(
                s,
                "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{{}}"
            )
            .unwrap();
            let mut t = String::new();
            s.read_to_string(&mut t).unwrap();
            t
        });
        std::thread::sleep(Duration::from_millis(100));
        let started = std::time::Instant::now();
        let (_, body) = http(&mock, "POST", "/v1/chat/completions", "{}");
        assert!(body.contains("fast"));
        assert!(started.elapsed() < Duration::from_millis(300));
        assert!(slow.join().unwrap().contains("slow"));
        drop(mock);
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err(),
            "stopped"
        );
    }
}
