//! `uwf serve`: one process serving a small web app and a JSON API over
//! the store's threads, through the same functions as the `thread`
//! commands (docs/serve.md).
//!
//! A synchronous server ([`tiny_http`]) with a thread per request: the
//! engine and the stores are synchronous, and a local dashboard has few
//! clients. Every page and script is embedded in the binary; nothing is
//! loaded from the network.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use miette::Diagnostic as _;
use serde_json::{Value, json};
use tiny_http::{Header, Method, Request, Response};
use uwf_protocol::{Hash, ThreadId};
use uwf_util::redact::Redactor;
use uwf_view::escape;

use crate::cli::ServeArgs;
use crate::engine::{self, Ctx, EngineError, Status};
use crate::error::CliError;

/// `uwf serve --help`, after the options.
pub const AFTER_HELP: &str = "\
Once it listens, one line of JSON goes to stdout: {\"url\": …} (with
--new-token also {\"token\": …}, shown this once). It runs until SIGINT or
SIGTERM. Open the URL for the list of threads; /api/threads is the JSON API
(docs/serve.md).

Security: it listens on loopback unless told otherwise; any other address
is refused unless a token is configured (UWF_SERVE_TOKEN in the root's
.env, made by --new-token). A request from another machine needs the token
(Authorization: Bearer TOKEN, or open the page once with ?token=TOKEN to
get a cookie); every action (POST) needs it in the Authorization header.

Examples:
  uwf serve                                   # http://127.0.0.1:7878/
  uwf serve --listen 127.0.0.1:0              # any free port
  uwf serve --new-token --listen 0.0.0.0:7878 # reachable from the network
  uwf --store postgres://uwf@db/uwf serve";

/// The `.env` variable that holds the access token.
pub const TOKEN_VAR: &str = "UWF_SERVE_TOKEN";

/// The cookie a browser keeps the token in once it opened `?token=`.
const COOKIE: &str = "uwf_serve_token";

/// How often the event stream looks at a thread again (as `thread watch`).
const POLL: Duration = Duration::from_millis(200);

/// A comment line keeps an idle event stream open through proxies, and
/// tells the server that its reader went away.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// Page size of `GET /api/threads` without `limit`, and the largest one.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

const APP_JS: &str = include_str!("serve/app.js");
const APP_CSS: &str = include_str!("serve/app.css");

/// Why `uwf serve` cannot start.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ServeError {
    /// A non-loopback address without a token.
    #[error(
        "refusing to listen on {addr}: it is not a loopback address and no access token is configured"
    )]
    #[diagnostic(
        code(uwf::serve::no_token),
        help(
            "make one with `uwf serve --new-token --listen {addr}` (stored in the root's .env as UWF_SERVE_TOKEN), or listen on 127.0.0.1"
        )
    )]
    NoToken {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {message}")]
    #[diagnostic(
        code(uwf::serve::listen),
        help("choose another address or port with --listen (port 0 picks a free one)")
    )]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        message: String,
    },
    /// No random token could be made or stored.
    #[error("cannot make an access token: {0}")]
    #[diagnostic(code(uwf::serve::token))]
    Token(String),
}

impl From<ServeError> for CliError {
    fn from(e: ServeError) -> Self {
        CliError::Serve(Box::new(e))
    }
}

/// `uwf serve`: listens, prints `{"url": …}`, serves until interrupted.
pub fn run(ctx: Ctx, redactor: Redactor, args: &ServeArgs) -> Result<(), CliError> {
    let state = uwf_state::FsState::new(&ctx.root);
    let mut token = configured_token(&state)?;
    let mut fresh = None;
    if args.new_token {
        let t = new_token()?;
        store_token(&state, &t)?;
        token = Some(t.clone());
        fresh = Some(t);
    }
    if !args.listen.ip().is_loopback() && token.is_none() {
        return Err(ServeError::NoToken { addr: args.listen }.into());
    }
    let server = tiny_http::Server::http(args.listen).map_err(|e| ServeError::Listen {
        addr: args.listen,
        message: e.to_string(),
    })?;
    let Some(addr) = server.server_addr().to_ip() else {
        return Err(ServeError::Listen {
            addr: args.listen,
            message: "not an IP socket".into(),
        }
        .into());
    };
    let mut hello = json!({ "url": format!("http://{addr}/") });
    if let Some(t) = fresh {
        hello["token"] = json!(t);
    }
    crate::output::print_text(&hello.to_string())?;
    let app = Arc::new(App {
        list_cache: std::sync::Mutex::new(ListCache::default()),
        ctx,
        token,
        redactor,
        loopback_only: args.listen.ip().is_loopback(),
    });
    {
        // Keeps the list's states fresh while someone looks at the list.
        let app = Arc::clone(&app);
        std::thread::spawn(move || {
            while !engine::interrupted() {
                app.refresh_list();
                std::thread::sleep(POLL);
            }
        });
    }
    while !engine::interrupted() {
        match server.recv_timeout(POLL) {
            Ok(Some(request)) => {
                let app = Arc::clone(&app);
                std::thread::spawn(move || app.handle(request));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("uwf serve: cannot accept a request: {e}"),
        }
    }
    tracing::info!("uwf serve: stopped");
    Ok(())
}

/// The token in the root's `.env`, if one is set.
fn configured_token(state: &uwf_state::FsState) -> Result<Option<String>, CliError> {
    let files = state.config_files()?;
    Ok(uwf_state::env::lookup(files.env.as_deref(), TOKEN_VAR).filter(|t| !t.is_empty()))
}

/// 32 random bytes from the system, as 64 hex digits.
fn new_token() -> Result<String, ServeError> {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| ServeError::Token(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Sets [`TOKEN_VAR`] in the root's `.env` (under the state lock, mode
/// 0600, as `uwf setup` writes keys).
fn store_token(state: &uwf_state::FsState, token: &str) -> Result<(), CliError> {
    state.edit_config_files(|files| {
        let (env, _) = uwf_state::env::set_var(files.env.as_deref(), TOKEN_VAR, token)
            .map_err(|e| ServeError::Token(e.to_string()))?;
        Ok::<_, CliError>((
            uwf_state::state::ConfigFiles {
                config: files.config.clone(),
                env: Some(env),
            },
            (),
        ))
    })?;
    Ok(())
}

/// Equal, in time that does not depend on where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a request presents, and where it comes from.
struct Credentials<'a> {
    /// Not a GET: an action.
    action: bool,
    /// From a loopback address.
    from_loopback: bool,
    /// The token of an `Authorization: Bearer` header.
    bearer: Option<&'a str>,
    /// The token of the cookie `?token=` set.
    cookie: Option<&'a str>,
}

/// Whether a request may go on, `token` being the configured one
/// (docs/serve.md, "Security"): an action needs the token in the
/// `Authorization` header (a browser never sends that by itself, so no
/// other site can act), whoever asks; a request from another machine
/// needs it in the header or the cookie.
fn admit(token: Option<&str>, c: &Credentials<'_>) -> Result<(), Failure> {
    let valid = |t: Option<&str>| token.zip(t).is_some_and(|(a, b)| same_secret(a, b));
    if c.action {
        if token.is_none() {
            return Err(Failure::new(
                401,
                "uwf::serve::token",
                "actions need an access token, and none is configured",
            )
            .with_help(
                "restart with `uwf serve --new-token` and send Authorization: Bearer TOKEN",
            ));
        }
        if !valid(c.bearer) {
            return Err(Failure::new(
                401,
                "uwf::serve::token",
                "this action needs the access token in an Authorization: Bearer header",
            ));
        }
        return Ok(());
    }
    if c.from_loopback || valid(c.bearer) || valid(c.cookie) {
        Ok(())
    } else {
        Err(Failure::new(
            401,
            "uwf::serve::token",
            "a request from another machine needs the access token",
        )
        .with_help("send Authorization: Bearer TOKEN, or open the page once with ?token=TOKEN"))
    }
}

/// An answer that is not a thread's data: status, `{error, code}`.
struct Failure {
    status: u16,
    error: String,
    code: String,
    help: Option<String>,
}

impl Failure {
    fn new(status: u16, code: &str, error: impl Into<String>) -> Self {
        Failure {
            status,
            error: error.into(),
            code: code.into(),
            help: None,
        }
    }

    fn with_help(mut self, help: &str) -> Self {
        self.help = Some(help.into());
        self
    }

    /// A command's error as the CLI reports it (its `uwf::…` code), with
    /// the HTTP status that fits it.
    fn from_cli(e: CliError) -> Self {
        let status = status_of(&e);
        let error = e.to_string();
        let shown = crate::report::Shown(e);
        let code = shown
            .code()
            .map_or_else(|| "uwf::error".to_string(), |c| c.to_string());
        let help = shown.help().map(|h| h.to_string());
        Failure {
            status,
            error,
            code,
            help,
        }
    }
}

/// The HTTP status that fits a command's error: the caller's mistake
/// (400), something unknown (404), a thread not in the state the action
/// needs (409), a store that cannot do it (501), the store unreachable
/// (503), else 500.
fn status_of(e: &CliError) -> u16 {
    use uwf_state::ErrorKind;
    match e {
        CliError::InThread(t) => status_of(&t.error),
        CliError::ThreadId(_) | CliError::AmbiguousThread { .. } | CliError::Json(_) => 400,
        CliError::UnknownPrefix { .. } | CliError::NoThreads | CliError::UnknownWorkflow { .. } => {
            404
        }
        CliError::NotWaiting { .. } => 409,
        CliError::Engine(f) => match &f.0 {
            EngineError::ThreadId(_) | EngineError::EmptyPrompt | EngineError::NotAStep { .. } => {
                400
            }
            EngineError::UnknownThread { .. } => 404,
            EngineError::ThreadFinished { .. }
            | EngineError::FinishedMeanwhile { .. }
            | EngineError::NotSuspended { .. }
            | EngineError::HeadMoved { .. } => 409,
            EngineError::Unsupported { .. } => 501,
            EngineError::Cas(c) if c.kind() == uwf_cas::StoreErrorKind::NotFound => 404,
            EngineError::State(s) => match s.kind() {
                ErrorKind::Conflict => 409,
                ErrorKind::NotFound => 404,
                ErrorKind::Invalid => 400,
                ErrorKind::Unavailable => 503,
                ErrorKind::Corrupt | ErrorKind::Io => 500,
            },
            e if e.is_killed() => 409,
            e if e.is_unavailable() => 503,
            _ => 500,
        },
        _ => 500,
    }
}

/// How often, at most, the list's cache reads the states of the active
/// threads again (docs/serve.md, "Many threads").
const LIST_REFRESH: Duration = Duration::from_secs(5);

/// The rows of `thread list` between two requests of `GET /api/threads`,
/// so that a page of 50 does not read every thread (docs/serve.md, "Many
/// threads"): counts and filters use them, the rows of the page are read
/// afresh.
#[derive(Default)]
struct ListCache {
    /// Per thread: its head and whether it was archived when its row was
    /// read, and the row.
    rows: HashMap<ThreadId, ((Hash, bool), Value)>,
    /// When every active thread's row was last read.
    at: Option<Instant>,
    /// When the list was last asked for.
    asked: Option<Instant>,
}

impl ListCache {
    /// Whether the row of `e` is in the cache, read at the same head and
    /// end (an archived thread keeps its head).
    fn holds(&self, e: &super::thread::ListEntry) -> bool {
        self.rows
            .get(&e.thread)
            .is_some_and(|(key, _)| *key == (e.head, e.archived.is_some()))
    }

    /// Keeps `rows`, read for `entries` (in the same order).
    fn store(&mut self, entries: &[super::thread::ListEntry], rows: Vec<Value>) {
        for (e, row) in entries.iter().zip(rows) {
            self.rows
                .insert(e.thread, ((e.head, e.archived.is_some()), row));
        }
        if self.at.is_none() && !entries.is_empty() {
            self.at = Some(Instant::now());
        }
    }
}

/// What every request needs.
struct App {
    /// The rows of the list between requests.
    list_cache: std::sync::Mutex<ListCache>,
    ctx: Ctx,
    /// The access token, when one is configured.
    token: Option<String>,
    /// Cuts the store's secrets out of error messages.
    redactor: Redactor,
    /// Bound to a loopback address: then only loopback host names are
    /// served (a page on another site cannot reach it by DNS rebinding).
    loopback_only: bool,
}

/// A response about to be sent.
type Reply = Response<std::io::Cursor<Vec<u8>>>;

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn with_headers(mut r: Reply, headers: &[(&str, &str)]) -> Reply {
    for (n, v) in headers {
        if let Some(h) = header(n, v) {
            r.add_header(h);
        }
    }
    r
}

/// Headers of every answer: nothing sniffed, no referrer, not framed by
/// other sites.
const COMMON: &[(&str, &str)] = &[
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
];

/// The policy of the app's own pages: its script and style only.
const APP_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; frame-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn json_reply(status: u16, v: &Value) -> Reply {
    let body = serde_json::to_vec_pretty(v).unwrap_or_default();
    with_headers(
        Response::from_data(body).with_status_code(status),
        &[("Content-Type", "application/json")],
    )
}

fn html_reply(page: String, csp: &str) -> Reply {
    with_headers(
        Response::from_data(page.into_bytes()),
        &[
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Security-Policy", csp),
        ],
    )
}

/// A request split into what routing needs.
struct Target {
    path: String,
    query: Vec<(String, String)>,
}

impl Target {
    fn parse(url: &str) -> Self {
        // `//api/threads` (a base URL ending in `/` joined with `/api/…`)
        // would read as a host name: one leading slash.
        let url = format!("/{}", url.trim_start_matches('/'));
        let parsed = url::Url::parse("http://local/").and_then(|base| base.join(&url));
        match parsed {
            Ok(u) => Target {
                path: u.path().to_string(),
                query: u.query_pairs().into_owned().collect(),
            },
            Err(_) => Target {
                path: url.to_string(),
                query: Vec::new(),
            },
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

fn header_value<'r>(req: &'r Request, name: &str) -> Option<&'r str> {
    req.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

impl App {
    fn handle(&self, mut req: Request) {
        let target = Target::parse(req.url());
        let reply = match self.check(&req, &target) {
            Err(f) => self.failure(f),
            Ok(Some(reply)) => reply,
            Ok(None) => {
                if req.method() == &Method::Get
                    && let Some(rest) = target.path.strip_prefix("/api/threads/")
                    && let Some(id) = rest.strip_suffix("/events")
                {
                    return self.events(req, id);
                }
                self.route(&mut req, &target)
                    .unwrap_or_else(|f| self.failure(f))
            }
        };
        let reply = with_headers(reply, COMMON);
        if let Err(e) = req.respond(reply) {
            tracing::debug!("uwf serve: cannot answer: {e}");
        }
    }

    /// Who may ask what. `Ok(Some(_))`: answered already (a redirect that
    /// drops `?token=` from the address after setting the cookie).
    fn check(&self, req: &Request, target: &Target) -> Result<Option<Reply>, Failure> {
        if self.loopback_only {
            let host = header_value(req, "Host").unwrap_or_default();
            if !is_loopback_host(host) {
                return Err(Failure::new(
                    421,
                    "uwf::serve::host",
                    format!("this server answers to localhost only, not to host {host:?}"),
                ));
            }
        }
        let from_loopback = req.remote_addr().is_some_and(|a| a.ip().is_loopback());
        let bearer = header_value(req, "Authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let cookie = header_value(req, "Cookie").and_then(|c| {
            c.split(';')
                .filter_map(|kv| kv.trim().split_once('='))
                .find(|(k, _)| *k == COOKIE)
                .map(|(_, v)| v)
        });
        let presented = Credentials {
            action: req.method() != &Method::Get,
            from_loopback,
            bearer,
            cookie,
        };
        if presented.action {
            admit(self.token.as_deref(), &presented)?;
            return Ok(None);
        }
        if let Some(t) = target.get("token") {
            if !self
                .token
                .as_deref()
                .is_some_and(|token| same_secret(token, t))
            {
                return Err(Failure::new(401, "uwf::serve::token", "wrong access token"));
            }
            let rest: Vec<_> = target.query.iter().filter(|(k, _)| k != "token").collect();
            let mut location = target.path.clone();
            if !rest.is_empty() {
                let mut q = url::form_urlencoded::Serializer::new(String::new());
                for (k, v) in rest {
                    q.append_pair(k, v);
                }
                location = format!("{location}?{}", q.finish());
            }
            let cookie =
                format!("{COOKIE}={t}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000");
            let reply = with_headers(
                Response::from_data(Vec::new()).with_status_code(303),
                &[("Location", &location), ("Set-Cookie", &cookie)],
            );
            return Ok(Some(reply));
        }
        admit(self.token.as_deref(), &presented)?;
        Ok(None)
    }

    fn failure(&self, f: Failure) -> Reply {
        let mut v = json!({
            "error": self.redactor.redact(&f.error),
            "code": f.code,
        });
        if let Some(h) = &f.help {
            v["help"] = json!(self.redactor.redact(h));
        }
        json_reply(f.status, &v)
    }

    fn route(&self, req: &mut Request, target: &Target) -> Result<Reply, Failure> {
        let path = target.path.as_str();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let method = req.method().clone();
        match (&method, segments.as_slice()) {
            (Method::Get, [""]) => Ok(html_reply(self.list_page(target)?, APP_CSP)),
            (Method::Get, ["app.js"]) => Ok(with_headers(
                Response::from_data(APP_JS.as_bytes().to_vec()),
                &[("Content-Type", "text/javascript; charset=utf-8")],
            )),
            (Method::Get, ["app.css"]) => Ok(with_headers(
                Response::from_data(APP_CSS.as_bytes().to_vec()),
                &[("Content-Type", "text/css; charset=utf-8")],
            )),
            (Method::Get, ["threads", id]) => Ok(html_reply(self.thread_page(id)?, APP_CSP)),
            (Method::Get, ["threads", id, "view"]) => {
                let id = self.thread(id)?;
                let page = super::view::page(&self.ctx, id).map_err(Failure::from_cli)?;
                // The page carries its own policy; this one only lets the
                // app's thread page frame it.
                Ok(html_reply(page, "frame-ancestors 'self'"))
            }
            (Method::Get, ["api", "threads"]) => Ok(json_reply(200, &self.list(target)?)),
            (Method::Get, ["api", "threads", id]) => Ok(json_reply(200, &self.show(id)?)),
            (Method::Post, ["api", "threads", id, "kill"]) => {
                read_json_body(req)?;
                let id = self.thread(id)?;
                engine::kill(&self.ctx, id).map_err(|e| Failure::from_cli(e.into()))?;
                Ok(json_reply(200, &json!({ "thread": id, "archived": true })))
            }
            (Method::Post, ["api", "threads", id, "answer"]) => {
                let body = read_json_body(req)?;
                let id = self.thread(id)?;
                Ok(json_reply(200, &self.answer(id, &body)?))
            }
            (Method::Post, ["api", "threads", id, "resume"]) => {
                let body = read_json_body(req)?;
                only_fields(&body, &[])?;
                let id = self.thread(id)?;
                Ok(json_reply(200, &self.resume(id)?))
            }
            (Method::Post, ["api", "threads", id, "fork"]) => {
                let body = read_json_body(req)?;
                only_fields(&body, &["step"])?;
                let id = self.thread(id)?;
                Ok(json_reply(200, &self.fork(id, &body)?))
            }
            (Method::Post, ["api", "threads", id, "run"]) => {
                let body = read_json_body(req)?;
                only_fields(&body, &["maxSteps", "timeoutMs"])?;
                let id = self.thread(id)?;
                Ok(json_reply(200, &self.queue(id, &body)?))
            }
            (Method::Post, ["api", "threads"]) => {
                let body = read_json_body(req)?;
                only_fields(&body, &["workflow", "prompt", "run"])?;
                Ok(json_reply(200, &self.start(&body)?))
            }
            (Method::Get, ["api", "threads", id, "steps", step, "input"]) => {
                let id = self.thread(id)?;
                Ok(json_reply(200, &self.input(id, step)?))
            }
            (Method::Get, ["api", "workflows"]) => Ok(json_reply(200, &self.workflows()?)),
            (Method::Get, ["api", "runs"]) => Ok(json_reply(200, &self.runs()?)),
            (_, ["api", ..]) | (_, ["threads", ..]) | (_, [""]) => Err(Failure::new(
                405,
                "uwf::serve::method",
                format!("{method} is not allowed on {path}"),
            )),
            _ => Err(Failure::new(
                404,
                "uwf::serve::not_found",
                format!("nothing at {path}"),
            )),
        }
    }

    /// The answer action: `{output, role?, as?}` becomes the step of the
    /// role the thread waits on, through the same call and checks as
    /// `uwf thread answer --output` (the output is validated against the
    /// role's schema there; a refusal says why, 422). The person is
    /// `human:<as>`, `human:web` without a name.
    fn answer(&self, id: ThreadId, body: &Value) -> Result<Value, Failure> {
        let Some(output) = body.get("output").filter(|o| o.is_object()).cloned() else {
            return Err(Failure::new(
                400,
                "uwf::serve::body",
                "the body must be {\"output\": {…}} (the role's output as an object), with \"role\" and \"as\" optional",
            ));
        };
        let text = |key: &str| body.get(key).and_then(Value::as_str);
        let name = text("as").filter(|n| !n.trim().is_empty()).unwrap_or("web");
        let stepped = crate::human::answer(
            &self.ctx,
            id,
            text("role"),
            crate::human::AnswerInput::Value(output),
            Some(name),
        )
        .map_err(|e| {
            let status = match &e {
                CliError::AnswerRejected { .. } => 422,
                CliError::NotWaiting { .. } => 409,
                _ => 0,
            };
            let mut f = Failure::from_cli(e);
            if status != 0 {
                f.status = status;
            }
            // An output its schema refuses, as the kit checks it.
            if f.code == "uwf::agent::invalid_output" {
                f.status = 422;
            }
            f
        })?;
        serde_json::to_value(&stepped).map_err(|e| Failure::new(500, "uwf::output", e.to_string()))
    }

    /// `step` as a hash (a malformed one is 400, with the CLI's error),
    /// and thread `id` loaded from its head, active or archived.
    fn node_of(
        &self,
        id: ThreadId,
        step: &str,
    ) -> Result<(uwf_cas::Hash, uwf_moderator::thread::ThreadView), Failure> {
        let hash = step.parse::<uwf_cas::Hash>().map_err(|e| {
            let mut f = Failure::from_cli(e.into());
            f.status = 400;
            f
        })?;
        let head = engine::any_head(&self.ctx, id).map_err(|e| Failure::from_cli(e.into()))?;
        let view = uwf_moderator::thread::load(self.ctx.cas(), head)
            .map_err(|e| Failure::from_cli(e.into()))?;
        Ok((hash, view))
    }

    /// The resume action: one step of a thread suspended at `$SUSPEND`,
    /// through the same call as `uwf thread resume` (its configured agent;
    /// the request returns once the step landed or was refused).
    fn resume(&self, id: ThreadId) -> Result<Value, Failure> {
        let progress: Arc<dyn engine::Progress> = Arc::new(engine::NoProgress);
        let stepped = super::thread::resume(&self.ctx, id, None, None, &progress)
            .map_err(Failure::from_cli)?;
        let v = match stepped.waiting {
            // It suspended again, or a person is asked next: the wait, as
            // `thread resume` prints it.
            Some(waiting) => serde_json::to_value(uwf_protocol::WaitingOutput {
                head: stepped.output,
                waiting,
            }),
            None => serde_json::to_value(stepped.output),
        };
        v.map_err(|e| Failure::new(500, "uwf::output", e.to_string()))
    }

    /// The fork action: `{step}`, the StartNode or a StepNode of thread
    /// `id`, becomes the head of a new thread, through the same call as
    /// `uwf thread fork`.
    fn fork(&self, id: ThreadId, body: &Value) -> Result<Value, Failure> {
        let Some(step) = body.get("step").and_then(Value::as_str) else {
            return Err(Failure::new(
                400,
                "uwf::serve::body",
                "the body must be {\"step\": \"HASH\"}: the thread's start or one of its steps",
            ));
        };
        let (hash, view) = self.node_of(id, step)?;
        if hash != view.start_hash && !view.steps.iter().any(|s| s.hash == hash) {
            return Err(Failure::new(
                404,
                "uwf::serve::not_in_thread",
                format!("{hash} is not the start or a step of thread {id}"),
            )
            .with_help(&format!(
                "`uwf thread steps {id}` (or GET /api/threads/{id}) lists its nodes"
            )));
        }
        let forked = super::thread::fork(&self.ctx, hash).map_err(Failure::from_cli)?;
        serde_json::to_value(forked).map_err(|e| Failure::new(500, "uwf::output", e.to_string()))
    }

    /// The run action: thread `id` queued for the workers, as `uwf thread
    /// run --detach` queues it (a thread an answer already finished
    /// answers its final state). The agents are the workers' configured
    /// ones: a page never names a command to run.
    fn queue(&self, id: ThreadId, body: &Value) -> Result<Value, Failure> {
        let request = uwf_state::runs::RunRequest {
            agent: None,
            max_steps: whole_number(body, "maxSteps")?,
            timeout_ms: whole_number(body, "timeoutMs")?,
        };
        if let Some(finished) =
            super::thread::finished_run(&self.ctx, id).map_err(Failure::from_cli)?
        {
            return serde_json::to_value(finished)
                .map_err(|e| Failure::new(500, "uwf::output", e.to_string()));
        }
        super::thread::queue_run(&self.ctx, id, request).map_err(Failure::from_cli)
    }

    /// The start action: `{workflow, prompt, run?}` starts a thread of a
    /// registered workflow (its name or hash) as `uwf thread start` does;
    /// with `run: true` it is queued for the workers too, as `uwf thread
    /// run --detach` does. Only registered workflows: a path would make
    /// the server read a file of its own machine.
    fn start(&self, body: &Value) -> Result<Value, Failure> {
        let text = |key: &str| -> Result<&str, Failure> {
            body.get(key).and_then(Value::as_str).ok_or_else(|| {
                Failure::new(
                    400,
                    "uwf::serve::body",
                    format!("the body must be {{\"workflow\": NAME, \"prompt\": TEXT, \"run\"?: BOOL}}: \"{key}\" is missing or not a string"),
                )
            })
        };
        let (workflow, prompt) = (text("workflow")?, text("prompt")?);
        let run = match body.get("run") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(Failure::new(
                    400,
                    "uwf::serve::body",
                    "\"run\" must be true or false",
                ));
            }
        };
        let registry = self
            .ctx
            .state()
            .registry()
            .map_err(|e| Failure::from_cli(e.into()))?;
        let hash = registry
            .get(workflow)
            .copied()
            .or_else(|| {
                registry
                    .values()
                    .find(|h| h.to_string() == workflow)
                    .copied()
            })
            .ok_or_else(|| {
                Failure::from_cli(CliError::UnknownWorkflow {
                    name: workflow.to_string(),
                    known: registry.keys().cloned().collect(),
                })
            })?;
        if run {
            // Before anything is started: a store without a run queue
            // refuses here, not after the thread exists.
            super::worker::queue(&self.ctx).map_err(Failure::from_cli)?;
        }
        let started = super::thread::start_for(&self.ctx, &hash.to_string(), prompt, None, None)
            .map_err(Failure::from_cli)?;
        if run {
            return super::thread::queue_run(
                &self.ctx,
                started.thread,
                uwf_state::runs::RunRequest::default(),
            )
            .map_err(Failure::from_cli);
        }
        serde_json::to_value(started).map_err(|e| Failure::new(500, "uwf::output", e.to_string()))
    }

    /// `GET /api/workflows`: what `uwf workflow list` prints (the start
    /// form offers these).
    fn workflows(&self) -> Result<Value, Failure> {
        let registry = self
            .ctx
            .state()
            .registry()
            .map_err(|e| Failure::from_cli(e.into()))?;
        let list: Vec<Value> = registry
            .into_iter()
            .map(|(name, hash)| json!({ "name": name, "hash": hash }))
            .collect();
        Ok(json!({ "workflows": list }))
    }

    /// `GET /api/runs`: the run queue of `uwf worker` (docs/worker.md):
    /// every run oldest first as `thread show` gives it, counts per state,
    /// and the workers that hold a live lease with their runs.
    fn runs(&self) -> Result<Value, Failure> {
        let queue = super::worker::queue(&self.ctx).map_err(Failure::from_cli)?;
        let runs = queue.runs().map_err(|e| Failure::from_cli(e.into()))?;
        Ok(runs_json(&runs, uwf_state::state::now_ms()))
    }

    /// A thread id, unique prefix or `@last`, as the CLI resolves it; an
    /// unknown one is 404.
    fn thread(&self, arg: &str) -> Result<ThreadId, Failure> {
        let id = crate::lookup::thread(&self.ctx, arg).map_err(Failure::from_cli)?;
        engine::status(&self.ctx, id).map_err(|e| Failure::from_cli(e.into()))?;
        Ok(id)
    }

    /// `GET /api/threads/{id}`: what `thread show` prints, with `steps`
    /// as `thread steps` prints them.
    fn show(&self, arg: &str) -> Result<Value, Failure> {
        let id = self.thread(arg)?;
        let mut v = super::thread::show_value(&self.ctx, id).map_err(Failure::from_cli)?;
        let steps = super::thread::steps_value(&self.ctx, id).map_err(Failure::from_cli)?;
        v["steps"] = steps["steps"].clone();
        self.add_usage(&mut v);
        if let Some(schema) = self.answer_schema(id, &v).map_err(Failure::from_cli)? {
            v["waiting"]["outputSchema"] = schema;
        }
        Ok(v)
    }

    /// `GET /api/threads/{id}/steps/{step}/input`: the whole prompt the
    /// agent of that step was given, rebuilt as the agent kit builds it
    /// from the thread as it was before the step ([`uwf_agent_kit::prompt_at`],
    /// with the history quota in force now).
    fn input(&self, id: ThreadId, step: &str) -> Result<Value, Failure> {
        let (hash, view) = self.node_of(id, step)?;
        let Some(i) = view.steps.iter().position(|s| s.hash == hash) else {
            return Err(Failure::new(
                404,
                "uwf::serve::not_in_thread",
                format!("{hash} is not a step of thread {id}"),
            )
            .with_help(&format!("`uwf thread steps {id}` lists its steps")));
        };
        let prev = if i == 0 {
            view.start_hash
        } else {
            view.steps[i - 1].hash
        };
        let role = view.steps[i].payload.record.role.clone();
        let before = uwf_moderator::thread::load(self.ctx.cas(), prev)
            .map_err(|e| Failure::from_cli(e.into()))?;
        let quota = uwf_agent_kit::prompt::history_quota_from_env();
        let input = uwf_agent_kit::prompt_at(self.ctx.cas(), id, &before, &role, quota)
            .map_err(|e| Failure::from_cli(CliError::kit(e)))?;
        Ok(json!({ "thread": id, "step": hash, "role": role, "input": input }))
    }

    /// Adds to each step of `v["steps"]` the tokens and cost its agent
    /// reported in its detail node ([`usage`]), and to `v` the totals:
    /// `usage` (what the steps that report them add up to) and `elapsedMs`
    /// (the steps' durations added up).
    fn add_usage(&self, v: &mut Value) {
        let (mut tokens, mut cost, mut elapsed) = (None::<u64>, None::<f64>, None::<u64>);
        for entry in v["steps"].as_array_mut().into_iter().flatten() {
            if let Some(ms) = entry["durationMs"].as_u64() {
                elapsed = Some(elapsed.unwrap_or(0) + ms);
            }
            let Some(detail) = entry["detail"]
                .as_str()
                .and_then(|d| d.parse::<uwf_cas::Hash>().ok())
            else {
                continue;
            };
            // A detail that cannot be read has no usage to show; the
            // thread's page does not fail for it.
            let Ok(Some(node)) = self.ctx.cas().try_get(detail) else {
                continue;
            };
            if let Some(u) = usage(&node.payload) {
                if let Some(t) = u["tokens"].as_u64() {
                    tokens = Some(tokens.unwrap_or(0) + t);
                }
                if let Some(c) = u["costUsd"].as_f64() {
                    cost = Some(cost.unwrap_or(0.0) + c);
                }
                entry["usage"] = u;
            }
        }
        let mut total = json!({});
        if let Some(t) = tokens {
            total["tokens"] = json!(t);
        }
        if let Some(c) = cost {
            total["costUsd"] = json!(c);
        }
        v["usage"] = total;
        if let Some(ms) = elapsed {
            v["elapsedMs"] = json!(ms);
        }
    }

    /// The outputSchema of the role thread `id` waits on, when a person
    /// answers this thread itself (not a child thread that waits, not a
    /// `$SUSPEND`): the thread page builds its answer form from it
    /// (docs/serve.md, "The answer form"). `shown` is the thread's
    /// `thread show` value.
    fn answer_schema(&self, id: ThreadId, shown: &Value) -> Result<Option<Value>, CliError> {
        let waiting = &shown["waiting"];
        let Some(role) = waiting["role"].as_str() else {
            return Ok(None);
        };
        if role == uwf_moderator::SUSPEND || waiting["answer"].as_str() != Some(&id.to_string()) {
            return Ok(None);
        }
        let Status::Active { head } = engine::status(&self.ctx, id)? else {
            return Ok(None);
        };
        let view = uwf_moderator::thread::load(self.ctx.cas(), head)?;
        let Some(definition) = view.workflow.roles.get(role) else {
            return Ok(None);
        };
        Ok(Some(self.ctx.cas().schema(definition.output_schema)?))
    }

    /// `GET /api/threads`: `thread list --all`, filtered, newest first,
    /// paged, with counts per state.
    fn list(&self, target: &Target) -> Result<Value, Failure> {
        let number = |key: &str, default: usize| -> Result<usize, Failure> {
            match target.get(key) {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| {
                    Failure::new(
                        400,
                        "uwf::serve::query",
                        format!("{key} must be a whole number, not {v:?}"),
                    )
                }),
            }
        };
        let limit = number("limit", DEFAULT_LIMIT)?.min(MAX_LIMIT);
        let offset = number("offset", 0)?;
        let state = target.get("state");
        let workflow = target.get("workflow");
        let q = target.get("q").map(str::to_lowercase);
        let ctx = &self.ctx;
        // The thread state alone (no node read): every id, newest first
        // (ULIDs sort by creation time).
        let mut entries = super::thread::list_entries(ctx, true).map_err(Failure::from_cli)?;
        entries.sort_by_key(|e| std::cmp::Reverse(e.thread));
        // Rows of threads not seen before, or whose head or end changed,
        // are read now; the others come from the cache.
        let missing: Vec<_> = {
            let mut cache = self.list_cache();
            cache.asked = Some(Instant::now());
            entries
                .iter()
                .filter(|e| !cache.holds(e))
                .cloned()
                .collect()
        };
        let read =
            super::thread::list_rows_of(ctx, missing.clone(), false).map_err(Failure::from_cli)?;
        let mut cache = self.list_cache();
        cache.store(&missing, read);
        let mut counts = serde_json::Map::new();
        let mut matching = Vec::new();
        for e in &entries {
            let Some((_, r)) = cache.rows.get(&e.thread) else {
                continue;
            };
            let keep = workflow
                .is_none_or(|w| r["name"].as_str() == Some(w) || r["workflow"].as_str() == Some(w))
                && q.as_deref().is_none_or(|q| {
                    r["task"]
                        .as_str()
                        .is_some_and(|t| t.to_lowercase().contains(q))
                });
            if !keep {
                continue;
            }
            let s = r["state"].as_str().unwrap_or("unknown").to_string();
            if state.is_none_or(|want| want == s) {
                matching.push(e.clone());
            }
            let n = counts.get(&s).and_then(Value::as_u64).unwrap_or(0);
            counts.insert(s, json!(n + 1));
        }
        let states_age = cache.at.map_or(0, |at| {
            u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX)
        });
        drop(cache);
        let total = matching.len();
        // The rows shown are read afresh (their states may have changed
        // since the cache was filled).
        let page: Vec<_> = matching.into_iter().skip(offset).take(limit).collect();
        let rows =
            super::thread::list_rows_of(ctx, page.clone(), false).map_err(Failure::from_cli)?;
        self.list_cache().store(&page, rows.clone());
        Ok(json!({
            "threads": rows,
            "total": total,
            "counts": counts,
            "statesAgeMs": states_age,
            "limit": limit,
            "offset": offset,
        }))
    }

    fn list_cache(&self) -> std::sync::MutexGuard<'_, ListCache> {
        // A panic while the cache was held leaves rows that are still
        // rows: go on with them.
        self.list_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads again the rows of every active thread, so that the states
    /// the list counts and filters on are at most [`LIST_REFRESH`] (plus
    /// one pass) old; archived threads do not change. Only while someone
    /// asked for the list in the last minute.
    fn refresh_list(&self) {
        let (asked, at) = {
            let cache = self.list_cache();
            (cache.asked, cache.at)
        };
        let looking = asked.is_some_and(|a| a.elapsed() < Duration::from_secs(60));
        if !looking || at.is_some_and(|at| at.elapsed() < LIST_REFRESH) {
            return;
        }
        let entries = match super::thread::list_entries(&self.ctx, true) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("uwf serve: cannot list the threads: {e}");
                return;
            }
        };
        let active: Vec<_> = entries
            .iter()
            .filter(|e| e.archived.is_none())
            .cloned()
            .collect();
        match super::thread::list_rows_of(&self.ctx, active.clone(), false) {
            Ok(rows) => {
                let mut cache = self.list_cache();
                let known: std::collections::HashSet<ThreadId> =
                    entries.iter().map(|e| e.thread).collect();
                cache.rows.retain(|id, _| known.contains(id));
                cache.store(&active, rows);
                cache.at = Some(Instant::now());
            }
            Err(e) => tracing::warn!("uwf serve: cannot list the threads: {e}"),
        }
    }

    /// `GET /api/threads/{id}/events`: server-sent events, `state` when
    /// the thread's state changes (first on connecting), `step` for each
    /// step that lands (the lines of `thread watch`); ends when the
    /// thread is archived, the reader goes away or `uwf serve` stops.
    fn events(&self, req: Request, arg: &str) {
        let id = match self.thread(arg) {
            Ok(id) => id,
            Err(f) => {
                let _ = req.respond(with_headers(self.failure(f), COMMON));
                return;
            }
        };
        let mut out = req.into_writer();
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n";
        if out
            .write_all(head.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
        let mut send = |event: &str, data: &Value| -> bool {
            let text = format!("event: {event}\ndata: {data}\n\n");
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .is_ok()
        };
        if let Err(e) = self.follow(id, &mut send) {
            let f = Failure::from_cli(e);
            send(
                "error",
                &json!({ "error": self.redactor.redact(&f.error), "code": f.code }),
            );
        }
    }

    /// The loop of [`events`](Self::events): `send` returns false when the
    /// reader is gone.
    fn follow(
        &self,
        id: ThreadId,
        send: &mut dyn FnMut(&str, &Value) -> bool,
    ) -> Result<(), CliError> {
        let ctx = &self.ctx;
        let mut last_head = None;
        let mut last_state = String::new();
        let mut beat = Instant::now();
        loop {
            let (head, archived) = match engine::status(ctx, id)? {
                Status::Active { head } => (head, None),
                Status::Archived(e) => (e.head, Some(e.reason.unwrap_or_else(|| "done".into()))),
            };
            if last_head != Some(head) {
                if last_head.is_some() {
                    for text in super::story::describe_landed(ctx, id, last_head, head)? {
                        let data = json!({ "thread": id, "head": head, "text": text });
                        if !send("step", &data) {
                            return Ok(());
                        }
                    }
                }
                last_head = Some(head);
            }
            let state: Cow<'_, str> = match &archived {
                Some(reason) => Cow::Borrowed(reason),
                None => Cow::Borrowed(super::story::active_state(ctx, id, head)?),
            };
            if state != last_state {
                let mut data = json!({ "thread": id, "state": state, "head": head, "done": archived.is_some() });
                if let Some(m) = super::story::running_now(ctx, id) {
                    data["running"] = json!({ "role": m.role, "agent": m.agent, "host": m.host, "startedAt": m.started_at });
                }
                if !send("state", &data) {
                    return Ok(());
                }
                last_state = state.into_owned();
            }
            if archived.is_some() || engine::interrupted() {
                return Ok(());
            }
            if beat.elapsed() >= HEARTBEAT {
                if !send_comment(send) {
                    return Ok(());
                }
                beat = Instant::now();
            }
            std::thread::sleep(POLL);
        }
    }

    /// `GET /`: the threads, filtered by state, refreshed by the script.
    fn list_page(&self, target: &Target) -> Result<String, Failure> {
        let listed = self.list(target)?;
        let state = target.get("state").unwrap_or_default();
        let mut options = String::from("<option value=\"\">every state</option>");
        let mut states: Vec<&str> = vec![
            "running", "waiting", "failed", "idle", "done", "killed", "pruned", "broken",
        ];
        if let Some(counts) = listed["counts"].as_object() {
            for s in counts.keys() {
                if !states.contains(&s.as_str()) {
                    states.push(s);
                }
            }
        }
        for s in states {
            let n = listed["counts"][s].as_u64().unwrap_or(0);
            let selected = if s == state { " selected" } else { "" };
            options.push_str(&format!(
                "<option value=\"{}\"{selected}>{} ({n})</option>",
                escape::attr(s),
                escape::text(s)
            ));
        }
        let mut rows = String::new();
        for r in listed["threads"].as_array().into_iter().flatten() {
            rows.push_str(&row_html(r));
        }
        Ok(format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>uwf threads</title>\
             <link rel=\"stylesheet\" href=\"/app.css\"><script src=\"/app.js\" defer></script></head>\
             <body data-page=\"list\"><header><h1>uwf threads</h1>\
             <form method=\"get\" action=\"/\"><label>state <select name=\"state\" id=\"state\">{options}</select></label> \
             <button>filter</button></form><p id=\"total\">{} threads</p></header>\
             <table><thead><tr><th>thread</th><th>state</th><th>workflow</th><th>task</th><th>age</th></tr></thead>\
             <tbody id=\"rows\">{rows}</tbody></table>\
             <section class=\"start\"><h2>Start a thread</h2><form id=\"start-form\">\
             <p><label>workflow <select id=\"start-workflow\" required><option value=\"\">…</option></select></label> \
             <label><input type=\"checkbox\" id=\"start-run\"> queue it for the workers</label></p>\
             <p><label>task <textarea id=\"start-prompt\" rows=\"2\" cols=\"60\" required></textarea></label></p>\
             <p><label>access token <input type=\"password\" id=\"token\" autocomplete=\"off\" spellcheck=\"false\" size=\"24\"></label> \
             <button id=\"start-submit\">start</button></p>\
             <div id=\"start-errors\" class=\"errors\" role=\"alert\"></div></form></section>\
             <section class=\"queue\"><h2>Workers and queue</h2><p id=\"queue-note\" class=\"note\"></p>\
             <ul id=\"workers\"></ul><table><thead><tr><th>thread</th><th>workflow</th><th>run</th><th>worker</th>\
             <th>lease until / failed at</th><th>claims</th><th>error</th></tr></thead><tbody id=\"runs\"></tbody></table></section>\
             </body></html>\n",
            listed["total"]
        ))
    }

    /// `GET /threads/{id}`: the thread's state, its actions (kill; the
    /// answer form, which the script builds from the API's
    /// `waiting.outputSchema`) and the `thread view` page in a frame,
    /// reloaded by the script when a step lands.
    fn thread_page(&self, arg: &str) -> Result<String, Failure> {
        let id = self.thread(arg)?;
        let v = super::thread::show_value(&self.ctx, id).map_err(Failure::from_cli)?;
        let text = |k: &str| escape::text(v[k].as_str().unwrap_or_default());
        let id_text = id.to_string();
        // Whether actions can work at all; the token itself never goes
        // into a page (the person types it, docs/serve.md).
        let token_note = if self.token.is_some() {
            ""
        } else {
            "<p class=\"note\" id=\"no-token\">Actions need an access token, and this server has none: \
             restart it with <code>uwf serve --new-token</code>.</p>"
        };
        Ok(format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>uwf thread {id}</title>\
             <link rel=\"stylesheet\" href=\"/app.css\"><script src=\"/app.js\" defer></script></head>\
             <body data-page=\"thread\" data-thread=\"{}\"><header><p><a href=\"/\">all threads</a></p>\
             <h1>{} · <span class=\"state\" id=\"state\">{}</span></h1><p class=\"task\">{}</p></header>\
             {token_note}<p class=\"token\"><label>access token <input type=\"password\" id=\"token\" autocomplete=\"off\" spellcheck=\"false\" size=\"24\"></label></p>\
             <section id=\"actions\" class=\"actions\"{}>\
             <p><button type=\"button\" id=\"run\" hidden>run (queue for the workers)</button> \
             <button type=\"button\" id=\"resume\" hidden>resume</button> \
             <button type=\"button\" id=\"kill\">kill thread</button></p>\
             <div id=\"answer\"></div></section>\
             <p id=\"action-status\" class=\"status\" role=\"status\"></p>\
             <section class=\"timeline\"><h2>Timeline</h2><table id=\"timeline\"><thead><tr>\
             <th>#</th><th>role</th><th>agent</th><th>landed</th><th>took</th><th>failed attempts</th><th>tokens · cost</th><th></th>\
             </tr></thead><tbody id=\"steps\"></tbody></table><p id=\"totals\" class=\"note\"></p></section>\
             <ol id=\"events\" class=\"events\"></ol>\
             <iframe id=\"view\" title=\"thread view\" src=\"/threads/{}/view\"></iframe></body></html>\n",
            escape::attr(&id_text),
            text("name"),
            text("state"),
            text("task"),
            if v["done"] == true { " hidden" } else { "" },
            escape::attr(&id_text),
        ))
    }
}

fn send_comment(send: &mut dyn FnMut(&str, &Value) -> bool) -> bool {
    send("ping", &json!({}))
}

/// One row of the list page (the script renders the same from the API).
fn row_html(r: &Value) -> String {
    let s = |k: &str| escape::text(r[k].as_str().unwrap_or_default());
    let id = r["thread"].as_str().unwrap_or_default();
    format!(
        "<tr><td><a href=\"/threads/{}\"><code>{}</code></a></td><td class=\"state state-{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        escape::attr(id),
        escape::text(id),
        escape::attr(r["state"].as_str().unwrap_or_default()),
        s("state"),
        s("name"),
        s("task"),
        s("age"),
    )
}

/// The tokens and cost an agent reports in its detail node
/// (docs/agents.md, "Detail nodes"): `totalTokens` (else `promptTokens` +
/// `completionTokens`) and `costUsd` of uwf-agent and Claude Code, or a
/// `usage` object with `total_tokens` (else `input_tokens` +
/// `output_tokens`). `None` when it reports neither.
fn usage(detail: &Value) -> Option<Value> {
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
    let sum = |v: &Value, a: &str, b: &str| Some(n(v, a)? + n(v, b)?);
    let tokens = n(detail, "totalTokens")
        .or_else(|| sum(detail, "promptTokens", "completionTokens"))
        .or_else(|| {
            let u = detail.get("usage")?;
            n(u, "total_tokens").or_else(|| sum(u, "input_tokens", "output_tokens"))
        });
    let cost = detail.get("costUsd").and_then(Value::as_f64);
    if tokens.is_none() && cost.is_none() {
        return None;
    }
    let mut v = json!({});
    if let Some(t) = tokens {
        v["tokens"] = json!(t);
    }
    if let Some(c) = cost {
        v["costUsd"] = json!(c);
    }
    Some(v)
}

/// `localhost`, `127.0.0.1`, `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The answer of `GET /api/runs` for the queue's `runs` at `now` (the
/// store's clock, ms): each run as `thread show` gives it, with its thread
/// and workflow; counts per state; the workers holding a live lease, with
/// their threads and the latest of their leases.
fn runs_json(runs: &[uwf_state::runs::Run], now: u64) -> Value {
    let mut counts = serde_json::Map::new();
    let mut workers: std::collections::BTreeMap<String, (u64, Vec<Value>)> =
        std::collections::BTreeMap::new();
    let mut rows = Vec::with_capacity(runs.len());
    for run in runs {
        let mut v = super::worker::run_json(run, now);
        v["thread"] = json!(run.thread);
        v["workflow"] = json!(run.workflow);
        if let Some(n) = run.request.max_steps {
            v["maxSteps"] = json!(n);
        }
        if let Some(ms) = run.request.timeout_ms {
            v["timeoutMs"] = json!(ms);
        }
        let state = v["state"].as_str().unwrap_or("unknown").to_string();
        let n = counts.get(&state).and_then(Value::as_u64).unwrap_or(0);
        counts.insert(state, json!(n + 1));
        if let (Some(worker), uwf_state::runs::RunState::Claimed { lease_until, .. }) =
            (run.holder(now), &run.state)
        {
            let entry = workers.entry(worker.to_string()).or_default();
            entry.0 = entry.0.max(*lease_until);
            entry.1.push(json!(run.thread));
        }
        rows.push(v);
    }
    let workers: Vec<Value> = workers
            .into_iter()
            .map(|(worker, (lease, threads))| {
                json!({ "worker": worker, "leaseUntil": lease, "threads": threads })
            })
            .collect();
    json!({ "runs": rows, "counts": counts, "workers": workers, "now": now })
}

/// Refuses a body that is not an object or has a key outside `allowed`:
/// a typo is an error, not an option silently ignored, and no action
/// takes an agent command line from a page.
fn only_fields(body: &Value, allowed: &[&str]) -> Result<(), Failure> {
    let Some(map) = body.as_object() else {
        return Err(Failure::new(
            400,
            "uwf::serve::body",
            "the body must be a JSON object",
        ));
    };
    for key in map.keys() {
        if key == "agent" {
            return Err(Failure::new(
                400,
                "uwf::serve::body",
                "\"agent\" is not accepted from a page: the agents are the ones configured for the store",
            )
            .with_help("configure agents in config.yaml (`uwf setup`, `uwf config show`)"));
        }
        if !allowed.contains(&key.as_str()) {
            let expected = if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            };
            return Err(Failure::new(
                400,
                "uwf::serve::body",
                format!("unknown field {key:?} in the body (expected: {expected})"),
            ));
        }
    }
    Ok(())
}

/// The positive whole number at `key` of `body`, if there is one.
fn whole_number(body: &Value, key: &str) -> Result<Option<u64>, Failure> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
            Failure::new(
                400,
                "uwf::serve::body",
                format!("{key:?} must be a positive whole number, not {v}"),
            )
        }),
    }
}

/// An action's body: JSON (a form cannot send it from another site
/// without the browser asking first), at most 64 KiB.
fn read_json_body(req: &mut Request) -> Result<Value, Failure> {
    use std::io::Read as _;
    let json_type = header_value(req, "Content-Type").is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|t| t.trim() == "application/json")
    });
    if !json_type {
        return Err(Failure::new(
            415,
            "uwf::serve::content_type",
            "an action's body must be JSON (Content-Type: application/json)",
        ));
    }
    let mut body = Vec::new();
    req.as_reader()
        .take(64 * 1024 + 1)
        .read_to_end(&mut body)
        .map_err(|e| {
            Failure::new(
                400,
                "uwf::serve::body",
                format!("cannot read the body: {e}"),
            )
        })?;
    if body.len() > 64 * 1024 {
        return Err(Failure::new(
            413,
            "uwf::serve::body",
            "the body is larger than 64 KiB",
        ));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(&body).map_err(|e| {
        Failure::new(
            400,
            "uwf::serve::body",
            format!("the body is not JSON: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubled_slashes_are_paths_not_hosts() {
        for url in [
            "/api/threads?limit=2",
            "//api/threads?limit=2",
            "///api/threads?limit=2",
        ] {
            let t = Target::parse(url);
            assert_eq!(t.path, "/api/threads", "{url}");
            assert_eq!(t.query, [("limit".to_string(), "2".to_string())], "{url}");
        }
    }

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:80",
            "127.0.0.1:7878",
            "[::1]:9",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "",
            "evil.example",
            "evil.example:7878",
            "10.0.0.1:80",
            "127.0.0.1.evil.example",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn who_may_ask_what() {
        let ask = |token: Option<&str>, action, from_loopback, bearer, cookie| {
            admit(
                token,
                &Credentials {
                    action,
                    from_loopback,
                    bearer,
                    cookie,
                },
            )
            .map_err(|f| f.status)
        };
        let t = Some("secret");
        // Reading: loopback freely, another machine with the token only.
        assert_eq!(ask(None, false, true, None, None), Ok(()));
        assert_eq!(ask(None, false, false, None, None), Err(401));
        assert_eq!(ask(t, false, false, None, None), Err(401));
        assert_eq!(ask(t, false, false, Some("wrong"), None), Err(401));
        assert_eq!(ask(t, false, false, Some("secret"), None), Ok(()));
        assert_eq!(ask(t, false, false, None, Some("secret")), Ok(()));
        assert_eq!(ask(t, false, false, None, Some("secre")), Err(401));
        // Acting: the header only, from anywhere; never without a token.
        assert_eq!(ask(None, true, true, None, None), Err(401));
        assert_eq!(ask(None, true, true, Some(""), None), Err(401));
        assert_eq!(ask(t, true, true, None, None), Err(401));
        assert_eq!(ask(t, true, true, None, Some("secret")), Err(401));
        assert_eq!(ask(t, true, false, Some("secret"), None), Ok(()));
        assert_eq!(ask(t, true, true, Some("secret"), None), Ok(()));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("", "a"));
    }

    #[test]
    fn tokens_are_random_hex() {
        let (a, b) = (
            new_token().unwrap_or_default(),
            new_token().unwrap_or_default(),
        );
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn usage_from_detail_nodes() {
        let agent = json!({"model": "m", "promptTokens": 4210, "completionTokens": 501,
                           "totalTokens": 4711, "costUsd": 0.0201});
        assert_eq!(
            usage(&agent),
            Some(json!({"tokens": 4711, "costUsd": 0.0201}))
        );
        let parts = json!({"promptTokens": 10, "completionTokens": 5, "costUsd": null});
        assert_eq!(usage(&parts), Some(json!({"tokens": 15})));
        let claude = json!({"sessionId": "s", "costUsd": 0.1096, "numTurns": 2});
        assert_eq!(usage(&claude), Some(json!({"costUsd": 0.1096})));
        let codex = json!({"usage": {"input_tokens": 7, "output_tokens": 3}});
        assert_eq!(usage(&codex), Some(json!({"tokens": 10})));
        assert_eq!(usage(&json!({"text": "no usage"})), None);
        assert_eq!(usage(&json!({"totalTokens": "many"})), None);
    }

    #[test]
    fn the_queue_with_its_workers() {
        use uwf_state::runs::{Run, RunRequest, RunState};
        let run = |n: u8, state: RunState| Run {
            thread: uwf_protocol::fixtures::thread(&format!("T{n}")),
            workflow: "solve-issue".into(),
            request: RunRequest::default(),
            queued_at: u64::from(n),
            claims: 1,
            state,
        };
        let claimed = |worker: &str, lease_until| RunState::Claimed {
            worker: worker.into(),
            claim_id: "c".into(),
            claimed_at: 10,
            lease_until,
        };
        let runs = [
            run(1, RunState::Queued),
            run(2, claimed("w1", 2_000)),
            run(3, claimed("w1", 3_000)),
            run(4, claimed("w2", 500)),
            run(
                5,
                RunState::Failed {
                    worker: "w2".into(),
                    error: "agent <missing>".into(),
                    at: 900,
                },
            ),
        ];
        let v = runs_json(&runs, 1_000);
        assert_eq!(
            v["counts"],
            json!({"queued": 1, "claimed": 2, "lease-expired": 1, "failed": 1})
        );
        // w2's lease ran out: it is presumed dead, so it is not listed.
        assert_eq!(
            v["workers"],
            json!([{"worker": "w1", "leaseUntil": 3_000, "threads": [runs[1].thread, runs[2].thread]}])
        );
        assert_eq!(v["runs"][4]["error"], "agent <missing>");
        assert_eq!(v["runs"][4]["workflow"], "solve-issue");
        assert_eq!(v["runs"][0]["thread"], json!(runs[0].thread));
    }

    #[test]
    fn statuses_fit_the_cli_errors() {
        let thread = uwf_protocol::fixtures::thread("T");
        let engine = |e: EngineError| status_of(&CliError::from(e));
        assert_eq!(engine(EngineError::UnknownThread { thread }), 404);
        assert_eq!(engine(EngineError::ThreadFinished { thread }), 409);
        assert_eq!(
            engine(EngineError::NotSuspended {
                thread,
                next: "worker".into()
            }),
            409
        );
        assert_eq!(engine(EngineError::EmptyPrompt), 400);
        assert_eq!(
            engine(EngineError::Unsupported {
                store: "x".into(),
                what: "run queue"
            }),
            501
        );
        let queued = uwf_state::StateError::AlreadyQueued {
            thread,
            state: "queued".into(),
        };
        assert_eq!(status_of(&CliError::from(queued).in_thread(thread)), 409);
        let unknown = CliError::UnknownWorkflow {
            name: "x".into(),
            known: Vec::new(),
        };
        assert_eq!(status_of(&unknown), 404);
        assert_eq!(status_of(&CliError::Output("x".into())), 500);
    }

    #[test]
    fn bodies_name_only_known_fields() {
        assert!(only_fields(&json!({}), &[]).is_ok());
        assert!(only_fields(&json!({"step": "X"}), &["step"]).is_ok());
        let f = only_fields(&json!({"stpe": "X"}), &["step"])
            .err()
            .map(|f| f.error);
        assert_eq!(
            f.as_deref(),
            Some("unknown field \"stpe\" in the body (expected: step)")
        );
        let f = only_fields(&json!({"agent": "sh -c evil"}), &["agent"])
            .err()
            .map(|f| f.status);
        assert_eq!(
            f,
            Some(400),
            "no command line from a page, whatever is allowed"
        );
        assert!(only_fields(&json!([]), &[]).is_err());
        assert_eq!(whole_number(&json!({"n": 3}), "n").ok().flatten(), Some(3));
        assert!(whole_number(&json!({"n": 0}), "n").is_err());
        assert!(whole_number(&json!({"n": "3"}), "n").is_err());
        assert_eq!(whole_number(&json!({}), "n").ok().flatten(), None);
    }

    #[test]
    fn rows_escape_untrusted_text() {
        let row = row_html(&json!({
            "thread": "01J\"><script>", "state": "idle", "name": "<b>", "task": "<img src=x onerror=1>", "age": "1s"
        }));
        assert!(!row.contains("<script>") && !row.contains("<img") && !row.contains("<b>"));
        assert!(row.contains("&lt;img src=x onerror=1&gt;"));
    }
}
