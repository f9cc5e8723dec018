//! The actions of `uwf serve` beyond answer and kill, through the API on
//! both stores: start a thread of a registered workflow, resume a
//! `$SUSPEND`, fork from a step, queue a thread for the workers (and the
//! queue as `GET /api/runs` shows it), each step's input and its tokens
//! and cost; every refusal with the CLI's error and nothing written.

use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Value, json};

use super::{Server, WAIT, client, get_json, post, post_json};
use crate::common::{self, Backend, Env};

per_backend!(serve_acts_like_the_cli);

/// An upstream workflow that suspends (`$SUSPEND` as an edge target) and
/// its uwf-mock scenario: planner asks, planner plans, worker works.
fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/upstream")
        .join(name)
        .display()
        .to_string()
}

/// POSTs `body` and checks the refusal: status, code, and a piece of the
/// message.
fn refused(url: &str, token: &str, body: &Value, status: u16, code: &str, says: &str) {
    let (got, v) = post_json(url, token, body);
    assert_eq!(got, status, "{url} {body}: {v:#}");
    assert_eq!(v["code"], code, "{url} {body}: {v:#}");
    let error = v["error"].as_str().unwrap();
    assert!(error.contains(says), "{url} {body}: {error}");
}

fn serve_acts_like_the_cli(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.set_config(&format!(
        "agents:\n  mock: {{ command: '{}', args: ['{}'] }}\ndefaultAgent: mock\n",
        common::mock_bin().display(),
        fixture("suspend-edge.mock.yaml")
    ));
    env.json(&["workflow", "put", &fixture("suspend-edge.yaml")]);
    let mut server = Server::start(&env, &["--new-token"]);
    let token = server.hello["token"].as_str().unwrap().to_string();
    let api = |path: &str| server.url(&format!("api/{path}"));

    // The registered workflows, which the start form offers.
    let (status, v) = get_json(&api("workflows"));
    assert_eq!(status, 200);
    assert_eq!(v["workflows"][0]["name"], "up-suspend-edge", "{v}");

    // Start: refusals first, none of which writes anything.
    let before = env.snapshot();
    let start = api("threads");
    let (status, v) = post(&start, None);
    assert_eq!(
        (status, v["code"].as_str()),
        (401, Some("uwf::serve::token"))
    );
    for (body, status, code, says) in [
        (
            json!({}),
            400,
            "uwf::serve::body",
            "\"workflow\" is missing",
        ),
        (
            json!({"workflow": "up-suspend-edge"}),
            400,
            "uwf::serve::body",
            "\"prompt\" is missing",
        ),
        (
            json!({"workflow": "nope", "prompt": "x"}),
            404,
            "uwf::workflow::unknown",
            "nope",
        ),
        // A file of the server's machine is not a registered workflow.
        (
            json!({"workflow": fixture("suspend-edge.yaml"), "prompt": "x"}),
            404,
            "uwf::workflow::unknown",
            "suspend-edge.yaml",
        ),
        (
            json!({"workflow": "up-suspend-edge", "prompt": "  "}),
            400,
            "uwf::thread::empty_prompt",
            "the prompt is empty",
        ),
        (
            json!({"workflow": "up-suspend-edge", "prompt": "x", "run": "yes"}),
            400,
            "uwf::serve::body",
            "\"run\" must be true or false",
        ),
        (
            json!({"workflow": "up-suspend-edge", "prompt": "x", "agent": "sh -c 'touch /tmp/x'"}),
            400,
            "uwf::serve::body",
            "\"agent\" is not accepted",
        ),
        (
            json!({"workflow": "up-suspend-edge", "prompt": "x", "parent": "X"}),
            400,
            "uwf::serve::body",
            "unknown field \"parent\"",
        ),
    ] {
        refused(&start, &token, &body, status, code, says);
    }
    assert_eq!(env.snapshot(), before, "a refused start wrote something");
    let (status, started) = post_json(
        &start,
        &token,
        &json!({"workflow": "up-suspend-edge", "prompt": "Migrate the <b>schema</b>"}),
    );
    assert_eq!(status, 200, "{started:#}");
    let id = started["thread"].as_str().unwrap().to_string();
    let shown = env.json(&["thread", "show", &id]);
    assert_eq!(shown["state"], "idle", "{shown:#}");
    assert_eq!(shown["task"], "Migrate the <b>schema</b>");
    let start_hash = shown["head"].as_str().unwrap().to_string();

    // Resume: refused while the thread is not suspended, then the step
    // from `$START`'s resume route, with the configured agent.
    let resume = api(&format!("threads/{id}/resume"));
    let not_suspended = |says: &str| {
        refused(
            &resume,
            &token,
            &json!({}),
            409,
            "uwf::thread::not_suspended",
            says,
        );
    };
    not_suspended("next role is planner");
    refused(
        &resume,
        &token,
        &json!({"agent": "uwf-mock"}),
        400,
        "uwf::serve::body",
        "\"agent\" is not accepted",
    );
    refused(
        &api("threads/01KAAAAAAAAAAAAAAAAAAAAAAA/resume"),
        &token,
        &json!({}),
        404,
        "uwf::thread::unknown",
        "no thread",
    );
    let out = env.output(&["thread", "run", "--thread", &id]);
    assert_eq!(out.status.code(), Some(4), "suspended: {out:?}");
    let suspended: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (status, v) = get_json(&api(&format!("threads/{id}")));
    assert_eq!(status, 200);
    assert_eq!(v["waiting"]["role"], "$SUSPEND", "{v:#}");
    assert!(v["waiting"].get("outputSchema").is_none(), "no form: {v:#}");
    let (status, resumed) = post_json(&resume, &token, &json!({}));
    assert_eq!(status, 200, "{resumed:#}");
    assert_eq!(resumed["thread"], id.as_str());
    assert_eq!(resumed["done"], false);
    assert_ne!(resumed["head"], suspended["head"]);
    let steps = env.json(&["thread", "steps", &id]);
    let roles: Vec<&str> = steps["steps"].as_array().unwrap()[1..]
        .iter()
        .map(|s| s["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["planner", "planner"]);
    not_suspended("next role is worker");

    // Each step's input: the prompt the agent kit built, as `uwf agent
    // context` gives it for the same head (a fork of the start).
    let first = steps["steps"][1]["hash"].as_str().unwrap().to_string();
    let second = steps["steps"][2]["hash"].as_str().unwrap().to_string();
    let (status, input) = get_json(&api(&format!("threads/{id}/steps/{first}/input")));
    assert_eq!(status, 200, "{input:#}");
    assert_eq!(input["role"], "planner");
    let text = input["input"].as_str().unwrap();
    assert!(text.contains("Migrate the <b>schema</b>"), "{text}");
    assert!(
        text.contains("Plan the request."),
        "the edge prompt: {text}"
    );
    let (_, input) = get_json(&api(&format!("threads/{id}/steps/{second}/input")));
    let text = input["input"].as_str().unwrap();
    assert!(
        text.contains("The requester answered; plan again."),
        "the resume route's prompt: {text}"
    );
    assert!(text.contains("Which database?"), "the history: {text}");
    for (path, status, code) in [
        (
            format!("threads/{id}/steps/{start_hash}/input"),
            404,
            "uwf::serve::not_in_thread",
        ),
        (
            format!("threads/{id}/steps/nothash/input"),
            400,
            "uwf::cas::bad_hash",
        ),
    ] {
        let (got, v) = get_json(&api(&path));
        assert_eq!(
            (got, v["code"].as_str()),
            (status, Some(code)),
            "{path}: {v:#}"
        );
    }

    // Fork from the start: a new thread at that node; refusals first.
    let fork = api(&format!("threads/{id}/fork"));
    let before = env.snapshot();
    for (body, status, code, says) in [
        (json!({}), 400, "uwf::serve::body", "{\"step\": \"HASH\"}"),
        (
            json!({"step": "not a hash"}),
            400,
            "uwf::cas::bad_hash",
            "not a hash",
        ),
        (
            json!({"step": resumed["workflow"]}),
            404,
            "uwf::serve::not_in_thread",
            "is not the start or a step of thread",
        ),
        (
            json!({"step": first, "at": 1}),
            400,
            "uwf::serve::body",
            "unknown field \"at\"",
        ),
    ] {
        refused(&fork, &token, &body, status, code, says);
    }
    assert_eq!(env.snapshot(), before, "a refused fork wrote something");
    let (status, forked) = post_json(&fork, &token, &json!({"step": start_hash}));
    assert_eq!(status, 200, "{forked:#}");
    assert_eq!(forked["forkedFrom"]["step"], start_hash.as_str());
    let fork_id = forked["thread"].as_str().unwrap().to_string();
    assert_ne!(fork_id, id);
    assert_eq!(
        env.json(&["thread", "show", &fork_id])["head"],
        start_hash.as_str()
    );
    let context = env.json(&["agent", "context", &fork_id, "planner"]);
    let (_, input) = get_json(&api(&format!("threads/{id}/steps/{first}/input")));
    assert_eq!(
        input["input"], context["prompt"],
        "the input of step 1 is the prompt the kit builds at the start"
    );

    // Tokens and cost, where the agent reports them in its detail node.
    let schema = env.json(&["cas", "schema", "put", "{\"type\": \"object\"}"]);
    let detail = env.json(&[
        "cas",
        "put",
        schema["hash"].as_str().unwrap(),
        "{\"model\": \"m\", \"totalTokens\": 4711, \"costUsd\": 0.0201}",
    ]);
    let script = env.file(
        "usage-agent.sh",
        &format!(
            "exec '{}' agent submit \"$1\" \"$2\" --output '{{\"$status\": \"unclear\", \"question\": \"Which one?\"}}' --detail {}\n",
            env!("CARGO_BIN_EXE_uwf"),
            detail["hash"].as_str().unwrap()
        ),
    );
    let agent = format!("sh {}", script.display());
    let out = env.output(&["thread", "step", &fork_id, "--agent", &agent]);
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(4),
        "{out:?}"
    );
    let (_, v) = get_json(&api(&format!("threads/{fork_id}")));
    assert_eq!(
        v["steps"][1]["usage"],
        json!({"tokens": 4711, "costUsd": 0.0201}),
        "{v:#}"
    );
    assert_eq!(v["usage"], json!({"tokens": 4711, "costUsd": 0.0201}));
    let (_, v) = get_json(&api(&format!("threads/{id}")));
    assert_eq!(v["usage"], json!({}), "uwf-mock reports no usage: {v:#}");
    assert!(v["elapsedMs"].as_u64().is_some(), "{v:#}");

    // The list, once: its cache now holds the thread as idle.
    let row_of = |listed: &Value| {
        let rows = listed["threads"].as_array().unwrap();
        rows.iter()
            .find(|r| r["thread"] == id.as_str())
            .unwrap()
            .clone()
    };
    let (_, listed) = get_json(&api("threads?q=schema"));
    assert_eq!(row_of(&listed)["state"], "idle", "{listed:#}");

    // Run: queued for the workers, as `thread run --detach` queues it.
    let run = api(&format!("threads/{id}/run"));
    refused(
        &run,
        &token,
        &json!({"maxSteps": 0}),
        400,
        "uwf::serve::body",
        "\"maxSteps\" must be a positive whole number",
    );
    let (status, queued) = post_json(&run, &token, &json!({"maxSteps": 10}));
    assert_eq!(status, 200, "{queued:#}");
    assert_eq!(queued["queued"], true);
    assert_eq!(queued["run"]["state"], "queued");
    refused(
        &run,
        &token,
        &json!({}),
        409,
        "uwf::state",
        "already queued to run (queued)",
    );
    let (status, runs) = get_json(&api("runs"));
    assert_eq!(status, 200);
    assert_eq!(runs["counts"], json!({"queued": 1}), "{runs:#}");
    assert_eq!(runs["runs"][0]["thread"], id.as_str());
    assert_eq!(runs["runs"][0]["workflow"], "up-suspend-edge");
    assert_eq!(runs["runs"][0]["maxSteps"], 10);
    assert_eq!(runs["workers"], json!([]));
    // The rows shown are read afresh; the counts and the state filter
    // catch up within the cache's refresh.
    let (_, listed) = get_json(&api("threads?q=schema"));
    assert_eq!(row_of(&listed)["state"], "queued", "{listed:#}");
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, v) = get_json(&api("threads?q=schema&state=queued"));
        if v["total"] == 1 {
            assert_eq!(v["counts"]["queued"], 1, "{v:#}");
            assert_eq!(v["threads"][0]["thread"], id.as_str(), "{v:#}");
            assert!(v["statesAgeMs"].as_u64().unwrap() < 60_000, "{v:#}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the counts never caught up: {v:#}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // A worker takes it and runs it to the end; the queue empties.
    let mut worker = env
        .uwf_process()
        .args(["worker", "--poll-ms", "50"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, v) = get_json(&api(&format!("threads/{id}")));
        if v["done"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not finish: {v:#}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = std::process::Command::new("kill")
        .args(["-INT", &worker.id().to_string()])
        .status();
    let _ = worker.wait();
    let (_, runs) = get_json(&api("runs"));
    assert_eq!(runs["runs"], json!([]), "{runs:#}");

    // Run on a finished thread: its final state, as `thread run` prints
    // it; on a killed one, the CLI's refusal.
    let (status, done) = post_json(&run, &token, &json!({}));
    assert_eq!(status, 200, "{done:#}");
    assert_eq!(done["done"], true);
    let (status, _) = post_json(&api(&format!("threads/{fork_id}/kill")), &token, &json!({}));
    assert_eq!(status, 200);
    refused(
        &api(&format!("threads/{fork_id}/run")),
        &token,
        &json!({}),
        409,
        "uwf::thread::finished",
        "finished",
    );
    // A finished thread forks as an active one does.
    let (status, again) = post_json(&fork, &token, &json!({"step": second}));
    assert_eq!(status, 200, "{again:#}");

    // Start and queue in one go.
    let (status, v) = post_json(
        &start,
        &token,
        &json!({"workflow": "up-suspend-edge", "prompt": "Another", "run": true}),
    );
    assert_eq!(status, 200, "{v:#}");
    assert_eq!(v["queued"], true, "{v:#}");
    assert_eq!(v["run"]["state"], "queued");

    // Every action is a POST.
    let r = client().get(&resume).call().unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert!(server.stop().success());
}
