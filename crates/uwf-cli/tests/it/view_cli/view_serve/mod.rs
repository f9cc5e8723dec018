//! `uwf serve` with the real binaries, on both stores: the JSON API, the
//! event stream as a step lands, killing through the API, the pages, bad
//! inputs, and the refusal of a non-loopback address without a token.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, ChildStdout};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{self, Backend, Env, example, mock_agent};

/// Start, resume, fork, run/queue, the queue, inputs and usage.
mod actions;
/// The pages in headless Chromium, over WebDriver.
mod browser;
/// The WebDriver client of [`browser`].
mod webdriver;

per_backend!(
    serve_api_events_and_kill,
    serve_refuses_bad_addresses,
    serve_answers_a_waiting_role,
);

/// How long any condition is waited for before the test fails.
const WAIT: Duration = Duration::from_secs(60);

/// A running `uwf serve`; stopped with SIGINT when dropped.
struct Server {
    child: Child,
    /// The first line it printed: `{url, token?}`.
    hello: Value,
    _stdout: BufReader<ChildStdout>,
}

impl Server {
    fn start(env: &Env, extra: &[&str]) -> Server {
        let mut child = env
            .uwf_process()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let hello: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "uwf serve printed {line:?} ({e}); stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            }
        };
        Server {
            child,
            hello,
            _stdout: stdout,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.hello["url"].as_str().unwrap())
    }

    /// Sends SIGINT; the exit status once it stopped.
    fn stop(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "uwf serve did not stop on SIGINT"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An HTTP client that returns every status as a response.
fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

/// GET `url`: (status, body as JSON).
fn get_json(url: &str) -> (u16, Value) {
    let mut r = client().get(url).call().unwrap();
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_string().unwrap();
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"));
    (status, v)
}

fn get_text(url: &str) -> (u16, String) {
    let mut r = client().get(url).call().unwrap();
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

/// POST `{}` as JSON with `token` as the bearer, if any: (status, body).
fn post(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = client()
        .post(url)
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut r = req.send("{}").unwrap();
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&body).unwrap())
}

/// POST `body` as JSON with `token` as the bearer: (status, body).
fn post_json(url: &str, token: &str, body: &Value) -> (u16, Value) {
    let mut r = client()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Authorization", &format!("Bearer {token}"))
        .send(body.to_string())
        .unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

/// A person answers the role a thread waits on through the API: the same
/// checks as `uwf thread answer` (the role's schema, the role asked), a
/// refusal explained and nothing written, then the step lands.
fn serve_answers_a_waiting_role(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let scenario = common::examples().join("approve-release.mock.yaml");
    env.set_config(&format!(
        "agents:\n  mock: {{ command: '{}', args: ['{}'] }}\n  me: {{ human: true }}\ndefaultAgent: mock\nagentOverrides:\n  approve-release: {{ approver: me }}\n",
        common::mock_bin().display(),
        scenario.display()
    ));
    let out = env.output(&[
        "thread",
        "run",
        &example("approve-release.yaml"),
        "-p",
        "Release 2.0",
    ]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let waiting: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = waiting["thread"].as_str().unwrap().to_string();
    // Without a token the thread page says that actions need one.
    let mut tokenless = Server::start(&env, &[]);
    let (status, page) = get_text(&tokenless.url(&format!("threads/{id}")));
    assert_eq!(status, 200);
    assert!(page.contains("id=\"no-token\""), "{page}");
    assert!(page.contains("uwf serve --new-token"), "{page}");
    assert!(tokenless.stop().success());
    let mut server = Server::start(&env, &["--new-token"]);
    let (_, page) = get_text(&server.url(&format!("threads/{id}")));
    assert!(
        !page.contains("no-token") && page.contains("id=\"kill\""),
        "{page}"
    );
    // The thread's API answer carries the waiting role's outputSchema,
    // which the page builds its form from.
    let (status, shown) = get_json(&server.url(&format!("api/threads/{id}")));
    assert_eq!(status, 200);
    assert_eq!(shown["waiting"]["role"], "approver", "{shown:#}");
    assert_eq!(
        shown["waiting"]["outputSchema"],
        json!({
            "type": "object",
            "properties": { "approved": { "type": "boolean" }, "comments": { "type": "string" } },
            "required": ["approved"],
            "title": "approve-release.approver",
        })
    );
    let token = server.hello["token"].as_str().unwrap().to_string();
    let answer = server.url(&format!("api/threads/{id}/answer"));
    let before = env.snapshot();
    for (body, status, code, says) in [
        (
            json!({"output": {"approved": "yes"}}),
            422,
            "uwf::agent::invalid_output",
            "is not of type \"boolean\"",
        ),
        (
            json!({"output": {"approved": true}, "role": "publisher"}),
            409,
            "uwf::thread::not_waiting",
            "waits for role \"approver\"",
        ),
        (
            json!({"approved": true}),
            400,
            "uwf::serve::body",
            "{\"output\": {…}}",
        ),
    ] {
        let (got, v) = post_json(&answer, &token, &body);
        assert_eq!(got, status, "{body}: {v:#}");
        assert_eq!(v["code"], code, "{v:#}");
        assert!(v["error"].as_str().unwrap().contains(says), "{v:#}");
    }
    assert_eq!(env.snapshot(), before, "a refused answer wrote something");
    let (got, v) = post_json(
        &answer,
        &token,
        &json!({"output": {"approved": true, "comments": "Ship it."}, "as": "ann"}),
    );
    assert_eq!(got, 200, "{v:#}");
    assert_eq!(v["thread"], id.as_str());
    assert_ne!(v["head"], waiting["head"]);
    let steps = env.json(&["thread", "steps", &id]);
    let last = steps["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "approver", "{last:#}");
    assert_eq!(last["agent"], "human:ann", "{last:#}");
    // Nothing waits any more: a second answer is refused.
    let (got, v) = post_json(&answer, &token, &json!({"output": {"approved": true}}));
    assert_eq!(got, 409, "{v:#}");
    assert!(server.stop().success());
}

/// The events of `url` as (name, data), read on a thread of their own.
fn events(url: &str) -> mpsc::Receiver<(String, Value)> {
    let r = client().get(url).call().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (tx, rx) = mpsc::channel();
    let reader = BufReader::new(r.into_body().into_reader());
    std::thread::spawn(move || {
        let mut name = String::new();
        for line in reader.lines() {
            let Ok(line) = line else { return };
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_string();
            } else if let Some(d) = line.strip_prefix("data: ") {
                let data = serde_json::from_str(d).unwrap_or(Value::Null);
                if tx.send((name.clone(), data)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Waits for an event that `want` accepts; the ones before it are returned too.
fn wait_for(
    rx: &mpsc::Receiver<(String, Value)>,
    want: impl Fn(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((name, data)) => {
                let done = want(&name, &data);
                seen.push((name, data));
                if done {
                    return seen;
                }
            }
            Err(e) => panic!("no such event ({e}); seen: {seen:?}"),
        }
    }
}

fn serve_api_events_and_kill(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let started = env.json(&[
        "thread",
        "start",
        &example("solve-issue.yaml"),
        "-p",
        "Fix <b>the</b> login",
    ]);
    let id = started["thread"].as_str().unwrap().to_string();
    let mut server = Server::start(&env, &["--new-token"]);
    let token = server.hello["token"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 64);
    // The token is in the root's .env, readable by its owner only.
    let dotenv = env.root().join(".env");
    let text = std::fs::read_to_string(&dotenv).unwrap();
    assert!(text.contains(&format!("UWF_SERVE_TOKEN={token}")));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dotenv).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    // The event stream: the state first, then a step as it lands.
    let stream = events(&server.url(&format!("api/threads/{id}/events")));
    let first = wait_for(&stream, |n, _| n == "state");
    assert_eq!(first[0].1["state"], "idle", "{first:?}");
    let scenario = env.file(
        "planner.mock.yaml",
        "roles:\n  planner:\n    - output: { plan: \"p\", steps: [\"one\"] }\n      delay: 200ms\n",
    );
    let stepped = env.json(&["thread", "step", &id, "--agent", &mock_agent(&scenario)]);
    let head = stepped["head"].as_str().unwrap().to_string();
    let seen = wait_for(&stream, |n, d| n == "step" && d["head"] == head.as_str());
    let step = &seen.last().unwrap().1;
    let text = step["text"].as_str().unwrap();
    assert!(text.contains("step 1 planner landed"), "{text}");
    assert!(text.contains("$START → planner"), "{text}");

    // The list: the thread with its state, counts, filters and paging.
    let (status, list) = get_json(&server.url("api/threads"));
    assert_eq!(status, 200);
    assert_eq!(list["total"], 1);
    assert_eq!(list["counts"], json!({ "idle": 1 }));
    let row = &list["threads"][0];
    assert_eq!(row["thread"], id.as_str());
    assert_eq!(row["state"], "idle");
    assert_eq!(row["name"], "solve-issue");
    assert_eq!(row["task"], "Fix <b>the</b> login");
    assert_eq!(row["head"], head.as_str());
    for (query, total) in [
        ("state=idle", 1),
        ("state=done", 0),
        ("workflow=solve-issue", 1),
        ("workflow=other", 0),
        ("q=LOGIN", 1),
        ("q=nothing", 0),
    ] {
        let (_, v) = get_json(&server.url(&format!("api/threads?{query}")));
        assert_eq!(v["total"], total, "{query}: {v}");
    }
    let (_, paged) = get_json(&server.url("api/threads?limit=1&offset=1"));
    assert_eq!(paged["threads"], json!([]));
    assert_eq!(paged["total"], 1);
    let (status, bad) = get_json(&server.url("api/threads?limit=many"));
    assert_eq!(status, 400);
    assert_eq!(bad["code"], "uwf::serve::query");

    // One thread: what `thread show` prints, plus its steps.
    let shown = env.json(&["thread", "show", &id]);
    let (status, v) = get_json(&server.url(&format!("api/threads/{id}")));
    assert_eq!(status, 200);
    for key in [
        "thread", "head", "workflow", "done", "name", "task", "state",
    ] {
        assert_eq!(v[key], shown[key], "{key}");
    }
    assert_eq!(v["lastStep"]["role"], "planner");
    assert!(v.get("waiting").is_none(), "nobody is asked: {v}");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "the start and one step: {v}");
    assert_eq!(steps[1]["role"], "planner");
    assert!(steps[1]["why"]["text"].as_str().unwrap().contains("$START"));
    assert!(steps[1]["durationMs"].as_u64().is_some(), "{v}");

    // Bad ids and tokens.
    let (status, v) = get_json(&server.url("api/threads/01KAAAAAAAAAAAAAAAAAAAAAAA"));
    assert_eq!(
        (status, v["code"].as_str()),
        (404, Some("uwf::thread::unknown"))
    );
    assert!(v["error"].as_str().unwrap().contains("no thread"));
    let (status, v) = get_json(&server.url("api/threads/not-a-thread!"));
    assert_eq!(
        (status, v["code"].as_str()),
        (400, Some("uwf::thread::bad_id"))
    );
    let (status, _) = get_json(&server.url("api/threads/01KAAAAAAAAAAAAAAAAAAAAAAA/events"));
    assert_eq!(status, 404);
    let kill = server.url(&format!("api/threads/{id}/kill"));
    let (status, v) = post(&kill, None);
    assert_eq!(
        (status, v["code"].as_str()),
        (401, Some("uwf::serve::token"))
    );
    let (status, _) = post(&kill, Some("0000"));
    assert_eq!(status, 401);
    let (status, _) = get_json(&server.url(&format!("api/threads/{id}/kill")));
    assert_eq!(status, 405, "an action is never a GET");
    let r = client()
        .post(&kill)
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send("a=b")
        .unwrap();
    assert_eq!(r.status().as_u16(), 415, "a form cannot act");
    assert_eq!(env.json(&["thread", "show", &id])["done"], false);

    // `?token=` sets the cookie and leads to the same address without it.
    let (status, _) = get_json(&server.url("?token=wrong"));
    assert_eq!(status, 401);
    let r = client()
        .get(&server.url(&format!("?state=idle&token={token}")))
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let header = |name: &str| r.headers().get(name).unwrap().to_str().unwrap();
    assert_eq!(header("location"), "/?state=idle");
    let cookie = header("set-cookie");
    assert!(
        cookie.starts_with(&format!("uwf_serve_token={token};"))
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    // The pages: the list, the thread, its `thread view` page; every text escaped.
    let (status, page) = get_text(&server.url(""));
    assert_eq!(status, 200);
    assert!(page.contains(&format!("href=\"/threads/{id}\"")));
    assert!(page.contains("Fix &lt;b&gt;the&lt;/b&gt; login"));
    assert!(!page.contains("<b>"));
    let (status, page) = get_text(&server.url(&format!("threads/{id}")));
    assert_eq!(status, 200);
    assert!(page.contains(&format!("src=\"/threads/{id}/view\"")));
    let (status, view) = get_text(&server.url(&format!("threads/{id}/view")));
    assert_eq!(status, 200);
    let cli_view = env.text(&["thread", "view", &id, "--html", "-"]);
    assert_eq!(
        view.trim_end(),
        cli_view.trim_end(),
        "the same page as `thread view`"
    );
    let (status, js) = get_text(&server.url("app.js"));
    assert_eq!(status, 200);
    assert!(js.contains("EventSource"));
    let (status, _) = get_text(&server.url("nothing/here"));
    assert_eq!(status, 404);

    // Kill through the API: archived killed in the store, and the stream says so.
    let (status, v) = post(&kill, Some(&token));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, json!({ "thread": id, "archived": true }));
    let history = env.history();
    let entry = history.iter().find(|h| h["thread"] == id.as_str()).unwrap();
    assert_eq!(entry["reason"], "killed", "{entry}");
    wait_for(&stream, |n, d| n == "state" && d["state"] == "killed");
    let (_, v) = get_json(&server.url(&format!("api/threads/{id}")));
    assert_eq!(v["state"], "killed");
    let (status, v) = post(&kill, Some(&token));
    assert_eq!(
        (status, v["code"].as_str()),
        (409, Some("uwf::thread::finished"))
    );

    assert!(server.stop().success(), "stops cleanly on SIGINT");
}

fn serve_refuses_bad_addresses(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let err = env.fails(&["serve", "--listen", "0.0.0.0:0"]);
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(err.contains("uwf serve --new-token"), "{err}");
    assert!(err.contains("uwf::serve::no_token"), "{err}");
    // A loopback server refuses a request that names another host (a page
    // of another site reaching it by DNS rebinding).
    let server = Server::start(&env, &[]);
    let r = client()
        .get(&server.url("api/threads"))
        .header("Host", "evil.example")
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 421);
    // A port in use is an error, with nothing on stdout.
    let addr = server.hello["url"].as_str().unwrap();
    let addr = addr.trim_start_matches("http://").trim_end_matches('/');
    let err = env.fails(&["serve", "--listen", addr]);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert!(err.contains("uwf::serve::listen"), "{err}");
}
