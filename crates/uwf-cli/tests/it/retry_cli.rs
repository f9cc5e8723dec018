//! Retries and timeouts per role from config.yaml, end to end: uwf-mock
//! scripted to fail its first attempts (`failFirst`), the backoff honoured,
//! every failed attempt kept as an AttemptRecord node listed by `thread
//! show` and `thread read`, the chain identical to a run that never failed,
//! Ctrl-C and `thread kill` during the backoff, and `cas gc`.
//!
//! Every test runs on both stores (`per_backend!`): the filesystem root,
//! where each thread's newest attempt is an entry of `attempts.yaml`, and
//! PostgreSQL, where it is a row of `uwf_attempts` and the policies are in
//! the store's own configuration.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use common::{Backend, Env, example, mock_agent, mock_bin};
use serde_json::Value;

per_backend!(
    a_flaky_agent_is_retried_and_the_chain_matches_a_clean_run,
    when_the_retries_run_out_the_step_fails_and_every_attempt_is_kept,
    a_timeout_from_config_is_a_retried_failure,
    ctrl_c_or_a_kill_during_the_backoff_stops_the_step,
    bad_policies_are_reported_with_their_key,
    a_kill_9_during_the_backoff_loses_nothing,
    solve_issue_with_a_human_reviewer_and_a_flaky_developer,
    secrets_an_agent_prints_are_cut_out_of_everything_uwf_writes,
);

fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_string()
}

/// solve-issue's scenario with `failFirst` (and more) added to the
/// developer's first entry.
fn scenario(env: &Env, developer_extra: &str) -> String {
    let base = std::fs::read_to_string(example("solve-issue.mock.yaml")).unwrap();
    let marked = base.replacen(
        "      delay: 150ms\n      stderr: \"developer: editing src/auth/middleware.rs\"\n",
        &format!("      stderr: \"developer: editing src/auth/middleware.rs\"\n{developer_extra}"),
        1,
    );
    assert!(
        developer_extra.is_empty() || marked != base,
        "scenario anchor not found"
    );
    env.file("scenario.yaml", &marked).display().to_string()
}

/// The configuration that runs every role with uwf-mock (alias `mock`,
/// running the scenario file `sc`) and has `policies` appended.
fn mock_config(sc: &str, policies: &str) -> String {
    format!(
        "agents:\n  mock: {{ command: {mock:?}, args: [{sc:?}] }}\ndefaultAgent: mock\n{policies}",
        mock = mock_bin().display().to_string(),
    )
}

/// A store whose configuration ([`Env::set_config`]: `config.yaml`, or the
/// store's own on PostgreSQL) is [`mock_config`]. `None` when PostgreSQL
/// tests are skipped.
fn env_with(backend: Backend, developer_extra: &str, policies: &str) -> Option<Env> {
    let env = Env::on(backend)?;
    let sc = scenario(&env, developer_extra);
    env.set_config(&mock_config(&sc, policies));
    Some(env)
}

fn hashes(env: &Env, id: &str) -> Vec<String> {
    env.json(&["thread", "steps", id])["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| s(&st["hash"]))
        .collect()
}

/// A new solve-issue thread whose planner has run: the developer is next.
fn planned(env: &Env, task: &str) -> String {
    let id = s(&env.json(&["thread", "start", &example("solve-issue.yaml"), "-p", task])["thread"]);
    env.json(&["thread", "step", &id]);
    id
}

fn run_to_end(env: &Env) -> (String, String, Duration) {
    let started = Instant::now();
    let out = env
        .uwf()
        .args([
            "thread",
            "run",
            &example("solve-issue.yaml"),
            "-p",
            "Fix the login bug",
        ])
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["done"], true);
    (s(&v["thread"]), stderr, took)
}

fn a_flaky_agent_is_retried_and_the_chain_matches_a_clean_run(backend: Backend) {
    let Some(flaky) = env_with(
        backend,
        "      failFirst: 2\n",
        "retries:\n  default: { max: 0 }\n  solve-issue:\n    developer: { max: 3, backoff: 300ms, factor: 2 }\n",
    ) else {
        return;
    };
    let (id, stderr, took) = run_to_end(&flaky);
    assert!(
        stderr.contains("retry 1/3 in 300ms: developer exited with status 1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("retry 2/3 in 600ms: developer exited with status 1"),
        "{stderr}"
    );
    assert!(!stderr.contains("retry 3/3"), "{stderr}");
    // The backoff was waited for: 300 ms + 600 ms at least.
    assert!(took >= Duration::from_millis(900), "{took:?}");

    // Both failures are inspectable.
    let shown = flaky.json(&["thread", "show", &id]);
    let attempts = shown["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{shown}");
    assert_eq!(attempts[0]["attempt"], 2);
    assert_eq!(attempts[1]["attempt"], 1);
    for a in attempts {
        assert_eq!(a["role"], "developer");
        assert_eq!(a["agent"], "mock");
        assert_eq!(a["reason"], "exited with status 1");
        let record = flaky.json(&["cas", "get", &s(&a["hash"])])["payload"].clone();
        assert_eq!(record["thread"], id.as_str());
        assert_eq!(record["kind"], "exit");
        assert_eq!(record["exitCode"], 1);
        assert!(
            s(&record["stderrTail"]).contains("uwf-mock: scripted failure"),
            "{record}"
        );
        assert!(record["durationMs"].as_u64().is_some());
    }
    let second = flaky.json(&["cas", "get", &s(&attempts[0]["hash"])])["payload"].clone();
    assert_eq!(second["prev"], attempts[1]["hash"]);
    // The store links the thread to its newest attempt.
    assert_eq!(
        flaky.attempts_table(),
        BTreeMap::from([(id.clone(), s(&attempts[0]["hash"]))])
    );
    let read = flaky.uwf().args(["thread", "read", &id]).output().unwrap();
    let read = String::from_utf8_lossy(&read.stdout);
    // Beside the step they preceded, oldest first; none is still pending.
    let first = read
        .find("**Failed before it:** attempt 1 · mock exited with status 1")
        .unwrap_or_else(|| panic!("{read}"));
    let second = read
        .find("**Failed before it:** attempt 2 · mock exited with status 1")
        .unwrap_or_else(|| panic!("{read}"));
    assert!(first < second, "{read}");
    let step = read[..first].rfind("## Step ").unwrap();
    assert!(read[step..].starts_with("## Step 2 · developer"), "{read}");
    assert!(!read.contains("## Failed attempts"), "{read}");
    // And how the thread ended.
    assert!(read.contains("→ $END: transition #"), "{read}");

    // The chain is the one a run that never failed makes.
    let Some(clean) = env_with(backend, "", "") else {
        return;
    };
    let (clean_id, clean_stderr, _) = run_to_end(&clean);
    assert!(!clean_stderr.contains("retry"), "{clean_stderr}");
    assert_eq!(hashes(&flaky, &id), hashes(&clean, &clean_id));
    assert!(
        clean
            .json(&["thread", "show", &clean_id])
            .get("attempts")
            .is_none()
    );
    assert_eq!(clean.attempts_table(), BTreeMap::new());
    flaky.json(&["cas", "verify"]);
}

fn when_the_retries_run_out_the_step_fails_and_every_attempt_is_kept(backend: Backend) {
    let Some(env) = env_with(
        backend,
        "      failFirst: 9\n      failExit: 7\n",
        "retries:\n  default: { max: 1, backoff: 10ms }\n",
    ) else {
        return;
    };
    let id = planned(&env, "Fix it");
    let head = env.json(&["thread", "show", &id])["head"].clone();
    let err = env.fails(&["thread", "step", &id]);
    assert!(
        err.contains("retry 1/1 in 10ms: developer exited with status 7"),
        "{err}"
    );
    assert!(
        err.contains("exited with status 7 (attempt 2 of 2"),
        "{err}"
    );
    let shown = env.json(&["thread", "show", &id]);
    assert_eq!(shown["head"], head, "the head did not move");
    assert_eq!(shown["attempts"].as_array().unwrap().len(), 2, "{shown}");

    // gc keeps the records while the thread is active, not after.
    let record = s(&shown["attempts"][0]["hash"]);
    let older = s(&shown["attempts"][1]["hash"]);
    assert_eq!(env.attempts_table().get(&id), Some(&record));
    env.json(&["cas", "gc", "--grace", "0s"]);
    for h in [&record, &older] {
        assert_eq!(env.json(&["cas", "has", h])["exists"], true);
    }
    assert_eq!(env.attempts_table().get(&id), Some(&record));
    env.json(&["thread", "kill", &id]);
    env.json(&["cas", "gc", "--grace", "0s"]);
    for h in [&record, &older] {
        assert_eq!(env.json(&["cas", "has", h])["exists"], false);
    }
    // gc dropped the killed thread's entry with its records.
    assert_eq!(env.attempts_table().get(&id), None);
    env.json(&["cas", "verify"]);
}

fn a_timeout_from_config_is_a_retried_failure(backend: Backend) {
    let Some(env) = env_with(
        backend,
        "      failFirst: 1\n      failDelay: 30s\n",
        "timeouts:\n  default: 10m\n  solve-issue: { developer: 500ms }\nretries:\n  solve-issue: { max: 1, backoff: 0s }\n",
    ) else {
        return;
    };
    let id = planned(&env, "Fix it");
    let started = Instant::now();
    let out = env.uwf().args(["thread", "step", &id]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("retry 1/1 in 0s: developer did not finish within 500ms and was stopped"),
        "{stderr}"
    );
    // Stopped long before the scripted 30 s sleep ended.
    assert!(started.elapsed() < Duration::from_secs(20));
    let shown = env.json(&["thread", "show", &id]);
    let record = env.json(&["cas", "get", &s(&shown["attempts"][0]["hash"])])["payload"].clone();
    assert_eq!(
        env.attempts_table().get(&id),
        Some(&s(&shown["attempts"][0]["hash"]))
    );
    assert_eq!(record["kind"], "timeout");
    assert_eq!(record["exitCode"], Value::Null);

    // --timeout still wins over config.yaml (on a new thread, whose
    // developer again sleeps through its first attempt).
    let id = planned(&env, "Again");
    let out = env
        .uwf()
        .args(["thread", "step", &id, "--timeout", "1500ms"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("did not finish within 1s 500ms"),
        "{stderr}"
    );
}

/// Starts `thread step` and returns it once its stderr shows the first retry.
fn step_until_backoff(env: &Env, id: &str) -> (std::process::Child, Vec<String>) {
    let mut child = env
        .uwf_process()
        .args(["thread", "step", id])
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("uwf ended before the backoff: {lines:?}");
        }
        let retry = line.starts_with("retry 1/");
        lines.push(line);
        if retry {
            break;
        }
    }
    // Keep draining stderr so uwf never blocks on a full pipe.
    std::thread::spawn(move || for _ in reader.lines() {});
    (child, lines)
}

fn ctrl_c_or_a_kill_during_the_backoff_stops_the_step(backend: Backend) {
    // Two failures: one for the interrupted step, one for the killed one.
    let Some(env) = env_with(
        backend,
        "      failFirst: 2\n",
        "retries:\n  default: { max: 2, backoff: 1h }\n",
    ) else {
        return;
    };
    let id = planned(&env, "Fix it");
    let head = env.json(&["thread", "show", &id])["head"].clone();

    let (child, lines) = step_until_backoff(&env, &id);
    assert!(lines.last().unwrap().contains("in 1h"), "{lines:?}");
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let shown = env.json(&["thread", "show", &id]);
    assert_eq!(shown["head"], head);
    assert_eq!(shown["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(
        env.attempts_table().get(&id),
        Some(&s(&shown["attempts"][0]["hash"]))
    );

    // The kill flag ends the backoff too (exit status 5).
    let (child, _) = step_until_backoff(&env, &id);
    env.json(&["thread", "kill", &id]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(out.stdout.is_empty());
}

fn bad_policies_are_reported_with_their_key(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let sc = scenario(&env, "");
    let yaml = mock_config(
        &sc,
        "retries:\n  solve-issue:\n    planner: { backoff: soon }\n",
    );
    // `store init --config` checks every setting of what it would share
    // and shares nothing when one is wrong.
    let file = env.file("bad-policies.yaml", &yaml);
    let before = env.snapshot();
    let err = env.fails(&["store", "init", "--config", file.to_str().unwrap()]);
    assert!(
        err.contains(&format!(
            "{} `retries.solve-issue.planner.backoff`",
            file.display()
        )),
        "{err}"
    );
    assert_eq!(env.snapshot(), before);
    // Put there all the same, the step that needs it reports it.
    env.set_config_unchecked(&yaml);
    let id = s(&env.json(&[
        "thread",
        "start",
        &example("solve-issue.yaml"),
        "-p",
        "Fix it",
    ])["thread"]);
    let before = env.snapshot();
    let err = env.fails(&["thread", "step", &id]);
    assert!(err.contains("uwf::config::policy"), "{err}");
    // The error names where the configuration is: config.yaml, or the
    // database's table (there is no config.yaml to fix on PostgreSQL).
    let origin = match backend {
        Backend::Fs => "config.yaml".to_string(),
        Backend::Pg => env.config_origin(),
    };
    assert!(
        err.contains(&format!("{origin} `retries.solve-issue.planner.backoff`")),
        "{err}"
    );
    if backend == Backend::Pg {
        assert!(!err.contains("config.yaml"), "{err}");
    }
    assert_eq!(env.snapshot(), before);
}

fn a_kill_9_during_the_backoff_loses_nothing(backend: Backend) {
    let Some(env) = env_with(
        backend,
        "      failFirst: 1\n",
        "retries:\n  default: { max: 1, backoff: 1h }\n",
    ) else {
        return;
    };
    let id = planned(&env, "Fix it");
    let head = env.json(&["thread", "show", &id])["head"].clone();
    let (mut child, _) = step_until_backoff(&env, &id);
    child.kill().unwrap();
    child.wait().unwrap();
    // The failed attempt was recorded before the backoff; the thread is as it was.
    let shown = env.json(&["thread", "show", &id]);
    assert_eq!(shown["head"], head);
    assert_eq!(shown["attempts"].as_array().unwrap().len(), 1, "{shown}");
    let recorded = s(&shown["attempts"][0]["hash"]);
    assert_eq!(env.attempts_table().get(&id), Some(&recorded));
    env.json(&["cas", "verify"]);
    // Stepping again goes on: the scripted failure is spent, the developer lands.
    let stepped = env.json(&["thread", "step", &id]);
    assert_ne!(stepped["head"], head);
    assert_eq!(
        env.json(&["thread", "show", &id])["attempts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(env.attempts_table().get(&id), Some(&recorded));
}

/// The issue's "done when": a person reviews in `solve-issue` (bound in
/// config.yaml only), the developer fails twice and is retried; the thread
/// runs until it waits, is answered from another process, and finishes,
/// with both failures inspectable.
fn solve_issue_with_a_human_reviewer_and_a_flaky_developer(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let sc = scenario(&env, "      failFirst: 2\n");
    let config = format!(
        "agents:\n  mock: {{ command: {mock:?}, args: [{sc:?}] }}\n  me: {{ human: true }}\n\
         defaultAgent: mock\nagentOverrides:\n  solve-issue: {{ reviewer: me }}\n\
         retries:\n  solve-issue:\n    developer: {{ max: 2, backoff: 50ms }}\n",
        mock = mock_bin().display().to_string(),
    );
    env.set_config(&config);

    let out = env
        .uwf()
        .args([
            "thread",
            "run",
            &example("solve-issue.yaml"),
            "-p",
            "Fix the login bug",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waiting: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(waiting["waiting"]["role"], "reviewer");
    let id = s(&waiting["thread"]);

    let answered = env
        .uwf()
        .args([
            "thread",
            "answer",
            &id,
            "--text",
            "-",
            "--as",
            "reviewer-on-call",
        ])
        .write_stdin("---\napproved: true\ncomments: LGTM\n---\nTested locally.\n")
        .output()
        .unwrap();
    assert!(
        answered.status.success(),
        "{}",
        String::from_utf8_lossy(&answered.stderr)
    );
    // The approval was the last step: the answer ends the thread.
    let answered: Value = serde_json::from_slice(&answered.stdout).unwrap();
    assert_eq!(answered["done"], true, "{answered}");

    let steps = env.json(&["thread", "steps", &id])["steps"].clone();
    let roles: Vec<(String, String)> = steps.as_array().unwrap()[1..]
        .iter()
        .map(|st| (s(&st["role"]), s(&st["agent"])))
        .collect();
    assert_eq!(
        roles,
        [
            ("planner", "mock"),
            ("developer", "mock"),
            ("reviewer", "human:reviewer-on-call")
        ]
        .map(|(r, a)| (r.to_string(), a.to_string()))
    );
    let shown = env.json(&["thread", "show", &id]);
    assert_eq!(shown["done"], true);
    assert_eq!(shown["attempts"].as_array().unwrap().len(), 2, "{shown}");
    assert_eq!(
        env.attempts_table().get(&id),
        Some(&s(&shown["attempts"][0]["hash"]))
    );
}

/// The API key of the `.env` the secrets test writes.
const API_KEY: &str = "sk-or-v1-5e3c9a1f7b2d4e6a8c0b";

/// An agent that prints every secret it has on stderr and stdout: its
/// first attempt exits 3, the next prints the API key as its answer (not a
/// hash). `$1` is a file counting the attempts.
const LEAKY_AGENT: &str = r#"
echo "request failed: 401 for key $OPENROUTER_API_KEY" >&2
echo "store password $UWF_STORE_PASSWORD in ${UWF_STORE:-the root}" >&2
echo "stdout: $OPENROUTER_API_KEY $UWF_STORE_PASSWORD ${UWF_STORE:-}"
if [ -e "$1" ]; then
  echo "$OPENROUTER_API_KEY"
  exit 0
fi
: > "$1"
exit 3
"#;

/// Issue 25: a failing agent that prints its API key (a `.env` entry), the
/// store's password (`UWF_STORE_PASSWORD`) and, on PostgreSQL, the store
/// URL with the password in it, on stderr and stdout; and a kit agent
/// (uwf-mock) whose output, answer and stderr quote the key. None of the
/// secrets reaches a file under the root (but `.env`), a row of the
/// store's tables, or what `uwf` prints; `‹redacted:NAME›` is where they
/// were.
fn secrets_an_agent_prints_are_cut_out_of_everything_uwf_writes(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let store_password = match backend {
        // Not needed by a filesystem store, but handed to agents all the same.
        Backend::Fs => "fs-store-password-0451",
        Backend::Pg => uwf_pg_testing::PASSWORD,
    };
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(
        env.root().join(".env"),
        format!("OPENROUTER_API_KEY={API_KEY}\nUWF_CLAUDE_MODEL=sonnet\n"),
    )
    .unwrap();
    env.set_config("retries:\n  default: { max: 1, backoff: 10ms }\n");
    let scenario = env.file(
        "leaky.mock.yaml",
        &format!(
            "roles:\n  planner:\n    - output: {{ plan: \"call the API with {API_KEY}\", steps: [\"sonnet\"] }}\n      answer: \"raw answer quoting {API_KEY}\"\n      stderr: \"planner: using {API_KEY}\"\n"
        ),
    );
    let script = env.file("leaky-agent.sh", LEAKY_AGENT);
    let key_marker = "‹redacted:OPENROUTER_API_KEY›";
    let password_marker = "‹redacted:UWF_STORE_PASSWORD›";
    let secrets = [API_KEY, store_password];
    let clean = |what: &str, text: &str| {
        for secret in secrets {
            assert!(!text.contains(secret), "{what} holds {secret:?}:\n{text}");
        }
    };

    // How the store password reaches the agent: in UWF_STORE_PASSWORD, and
    // on PostgreSQL also inside the store URL.
    let mut ways = vec!["UWF_STORE_PASSWORD"];
    if backend == Backend::Pg {
        ways.push("the store URL");
    }
    for (n, way) in ways.into_iter().enumerate() {
        let uwf = |args: &[&str]| {
            let mut cmd = env.uwf();
            match (&env.db, way) {
                (Some(db), "the store URL") => {
                    cmd.env("UWF_STORE", &db.url)
                        .env_remove("UWF_STORE_PASSWORD");
                }
                _ => {
                    cmd.env("UWF_STORE_PASSWORD", store_password);
                }
            }
            cmd.args(args).output().unwrap()
        };
        let ok = |args: &[&str]| {
            let out = uwf(args);
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
            assert!(out.status.success(), "uwf {args:?} ({way}):\n{stderr}");
            clean(&format!("the stdout of {args:?} ({way})"), &stdout);
            clean(&format!("the stderr of {args:?} ({way})"), &stderr);
            (stdout, stderr)
        };
        let (started, _) = ok(&[
            "thread",
            "start",
            &example("solve-issue.yaml"),
            "-p",
            "Fix it",
        ]);
        let id = s(&serde_json::from_str::<Value>(&started).unwrap()["thread"]);

        // A kit agent: its stderr is redacted as it streams, its output
        // and its answer (the detail) when stored.
        let (_, stderr) = ok(&["thread", "step", &id, "--agent", &mock_agent(&scenario)]);
        assert!(
            stderr.contains(&format!("planner: using {key_marker}")),
            "{stderr}"
        );
        let detail = ok(&["thread", "read", &id]).0;
        assert!(
            detail.contains(&format!("call the API with {key_marker}")),
            "{detail}"
        );
        assert!(
            detail.contains(&format!("raw answer quoting {key_marker}")),
            "{detail}"
        );

        // The leaky agent fails twice; the step fails.
        let counter = env.dir.path().join(format!("leaky-{n}.count"));
        let agent = format!("sh '{}' '{}'", script.display(), counter.display());
        let out = uwf(&["thread", "step", &id, "--agent", &agent]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{stderr}");
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        clean(&format!("the failed step's stderr ({way})"), &stderr);
        assert!(
            stderr.contains(&format!("request failed: 401 for key {key_marker}")),
            "{stderr}"
        );
        assert!(stderr.contains(password_marker), "{way}: {stderr}");
        assert!(
            stderr.contains(&format!("printed \"{key_marker}\" on stdout")),
            "{stderr}"
        );

        // The failed attempts, as `thread show`, `thread log` and the
        // thread's page show them.
        let shown: Value = serde_json::from_str(&ok(&["thread", "show", &id]).0).unwrap();
        let attempts = shown["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{shown}");
        assert_eq!(
            s(&attempts[0]["reason"]),
            format!("printed \"{key_marker}\" on stdout, which is not a CAS hash")
        );
        for a in attempts {
            let record: Value =
                serde_json::from_str(&ok(&["cas", "get", &s(&a["hash"])]).0).unwrap();
            let tail = s(&record["payload"]["stderrTail"]);
            assert!(
                tail.contains(key_marker) && tail.contains(password_marker),
                "{tail}"
            );
        }
        let log = ok(&["thread", "log", &id]).0;
        assert!(log.contains(&format!("401 for key {key_marker}")), "{log}");
        assert!(log.contains(password_marker), "{log}");
        let page = ok(&["thread", "view", &id, "--html", "-"]).0;
        assert!(
            page.contains(key_marker),
            "the page shows where the key was"
        );
    }

    // Nothing under the root (but `.env`) and no row of the store holds a
    // secret; the markers are stored where the secrets were.
    for secret in secrets {
        assert_eq!(
            env.places_holding(secret),
            Vec::<String>::new(),
            "{secret:?}"
        );
    }
    let marked = env.places_holding(key_marker);
    assert!(
        marked.iter().any(|p| p.contains("/logs/")),
        "the agents' log: {marked:?}"
    );
    let nodes = match backend {
        Backend::Fs => "/cas/objects/",
        Backend::Pg => "uwf_nodes: ",
    };
    assert!(
        marked.iter().filter(|p| p.contains(nodes)).count() >= 4,
        "two attempt records, an output and a detail per thread: {marked:?}"
    );
    assert!(
        !env.places_holding(password_marker).is_empty(),
        "the logs and attempt records show the password was there"
    );
}
