//! `uwf` on a PostgreSQL store, on a real server (started by
//! `uwf-pg-testing`; skipped loudly without the server binaries, failing
//! instead under `CI=true`): `--store`, `UWF_STORE` and `store:` in
//! config.yaml select it, the password never shows, agents (uwf-mock) read
//! and write the same store, and `uwf store copy` moves a store into
//! PostgreSQL and back, resumably.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Env, example, mock_agent};
use serde_json::Value;
use uwf_pg_testing::PASSWORD;

/// The roles of a solve-issue thread run with its mock scenario (the
/// reviewer asks for one more round).
const SOLVED: [&str; 5] = ["planner", "developer", "reviewer", "developer", "reviewer"];

/// A root whose commands use the PostgreSQL database `url` (without its
/// password; the password is in the root's `.env`).
fn pg_env(url: &str) -> Env {
    let env = Env::new();
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(
        env.root().join("config.yaml"),
        format!("store: \"{url}\"\n"),
    )
    .unwrap();
    std::fs::write(
        env.root().join(".env"),
        format!("UWF_STORE_PASSWORD={PASSWORD}\n"),
    )
    .unwrap();
    env
}

/// Runs solve-issue to its end with uwf-mock, returns the thread id.
fn solve(env: &Env, task: &str) -> String {
    solve_with(env, task, &[])
}

/// [`solve`] with more variables in `uwf`'s environment.
fn solve_with(env: &Env, task: &str, vars: &[(&str, &str)]) -> String {
    let agent = mock_agent(std::path::Path::new(&example("solve-issue.mock.yaml")));
    let mut run = env.uwf();
    run.envs(vars.iter().copied()).args([
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        task,
        "--agent",
        &agent,
    ]);
    let out = run.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out["done"], true, "{out}");
    out["thread"].as_str().unwrap().to_string()
}

#[test]
fn threads_run_on_postgres_and_the_password_never_shows() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    let env = pg_env(&db.url_without_password);

    let shown = env.json(&["store", "show"]);
    assert_eq!(shown["kind"], "postgres", "{shown}");
    assert_eq!(shown["from"], "`store:` in config.yaml");
    let init = env.json(&["store", "init"]);
    assert!(init["schemaVersion"].as_i64().unwrap() >= 1, "{init}");
    // Again: nothing left to apply.
    let again = env.json(&["store", "init"]);
    assert_eq!(again["applied"], serde_json::json!([]), "{again}");

    let thread = solve(&env, "Fix the login bug");
    assert_eq!(env.roles(&thread), SOLVED);
    let listed = env.json(&["thread", "list", "--all"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let verify = env.json(&["cas", "verify"]);
    assert_eq!(verify["issues"], serde_json::json!([]), "{verify}");
    // An unreachable node is collected by gc; the thread's are kept.
    let stray = env.file("stray.json", r#"{"text": "nobody refers to this"}"#);
    let schema = env.json(&["cas", "schema", "put", &example("note.schema.json")]);
    let put = env.json(&[
        "cas",
        "put",
        schema["hash"].as_str().unwrap(),
        stray.to_str().unwrap(),
    ]);
    let gc = env.json(&["cas", "gc", "--grace", "0s"]);
    assert!(
        gc.to_string().contains(put["hash"].as_str().unwrap()),
        "{gc}"
    );
    assert_eq!(env.roles(&thread), SOLVED);
    let verify = env.json(&["cas", "verify"]);
    assert_eq!(verify["issues"], serde_json::json!([]), "{verify}");
    // Nothing of the thread is in the local root: it is all in the database.
    assert!(!env.root().join("threads").exists());
    assert!(!env.root().join("history.jsonl").exists());

    // A wrong password fails clearly, and no output or message shows a
    // password, the right one or the wrong one.
    let out = env
        .uwf()
        .env("UWF_STORE_PASSWORD", "not-the-password")
        .args(["thread", "list"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("postgres"), "{err}");
    assert!(
        !err.contains("not-the-password") && !err.contains(PASSWORD),
        "{err}"
    );
    for args in [&["store", "show"][..], &["thread", "show", &thread][..]] {
        let out = env.uwf().args(args).output().unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains(PASSWORD), "{args:?}: {all}");
    }
    // A password in the URL itself is cut out of what is shown.
    let shown = env.json(&["--store", &db.url, "store", "show"]);
    assert!(!shown.to_string().contains(PASSWORD), "{shown}");
}

#[test]
fn a_store_is_copied_into_postgres_and_back_resumably() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    // A filesystem store with two finished threads and one started.
    let fs = Env::new();
    let first = solve(&fs, "first task");
    let second = solve(&fs, "second task");
    let started = fs.json(&["thread", "start", "solve-issue", "-p", "third task"]);
    let third = started["thread"].as_str().unwrap().to_string();
    let before = fs.json(&["thread", "list", "--all"]);

    let pg = pg_env(&db.url_without_password);
    let root = fs.root().display().to_string();
    let copied = pg.json(&[
        "store",
        "copy",
        "--from",
        &root,
        "--to",
        &db.url_without_password,
    ]);
    assert_eq!(copied["conflicts"], serde_json::json!([]), "{copied}");
    assert_eq!(copied["threadsAdded"], 1, "{copied}");
    assert_eq!(copied["historyAdded"], 2, "{copied}");
    assert!(copied["nodesCopied"].as_u64().unwrap() > 10, "{copied}");
    // The destination had only the node types every store starts with.
    assert!(copied["nodes"].as_u64().unwrap() - copied["nodesCopied"].as_u64().unwrap() <= 4);

    // The same threads, steps and registry in PostgreSQL.
    let after: Value = pg.json(&["thread", "list", "--all"]);
    let ids = |v: &Value| {
        let mut ids: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{}:{}:{}", r["thread"], r["head"], r["done"]))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&after), ids(&before));
    for t in [&first, &second] {
        assert_eq!(pg.roles(t), SOLVED);
    }
    assert_eq!(pg.json(&["cas", "verify"])["issues"], serde_json::json!([]));

    // Run again: everything is there, nothing is written.
    let copy = |env: &Env, from: &str, to: &str| -> (bool, Value, String) {
        let out = env
            .uwf()
            .args(["store", "copy", "--from", from, "--to", to])
            .output()
            .unwrap();
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), report, stderr)
    };
    let (ok, again, _) = copy(&pg, &root, &db.url_without_password);
    assert!(ok, "{again}");
    assert_eq!(again["nodesCopied"], 0, "{again}");
    assert_eq!(again["threadsSame"], 1, "{again}");
    assert_eq!(again["historyAdded"], 0, "{again}");

    // The started thread takes a step in the filesystem store: copying
    // again moves the PostgreSQL head forward along the same chain.
    let agent = mock_agent(std::path::Path::new(&example("solve-issue.mock.yaml")));
    let stepped = fs.json(&["thread", "step", &third, "--agent", &agent]);
    assert_eq!(stepped["done"], false);
    let (ok, advanced, _) = copy(&pg, &root, &db.url_without_password);
    assert!(ok, "{advanced}");
    assert_eq!(advanced["threadsAdvanced"], 1, "{advanced}");
    assert_eq!(
        pg.json(&["thread", "show", &third])["head"],
        stepped["head"]
    );

    // It runs to its end in PostgreSQL; a copy back into a fresh directory
    // holds it, finished, and that filesystem store is sound.
    let ran = pg.json(&["thread", "run", &third, "--agent", &agent]);
    assert_eq!(ran["done"], true, "{ran}");
    let back = Env::new();
    let back_root = back.root().display().to_string();
    let (ok, copied, _) = copy(&pg, &db.url_without_password, &back_root);
    assert!(ok, "{copied}");
    assert_eq!(copied["historyAdded"], 3, "{copied}");
    assert_eq!(back.roles(&third), SOLVED);
    assert_eq!(
        back.json(&["cas", "verify"])["issues"],
        serde_json::json!([])
    );

    // The old filesystem store, copied once more, would revive the thread
    // PostgreSQL finished: that is refused and reported, nothing is
    // overwritten, and the exit status says so.
    let (ok, report, stderr) = copy(&pg, &root, &db.url_without_password);
    assert!(!ok);
    let conflicts = report["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{report}");
    assert!(conflicts[0].as_str().unwrap().contains(&third), "{report}");
    assert!(stderr.contains("uwf::store::copy_conflicts"), "{stderr}");
    assert_eq!(pg.json(&["thread", "show", &third])["done"], true);
}

#[test]
fn config_show_shows_the_configuration_the_store_shares() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    let env = pg_env(&db.url_without_password);
    // Local settings besides `store:` are not what commands use on a
    // shared store: `config show` must not present them as if they were.
    let local = env.root().join("config.yaml");
    let text = std::fs::read_to_string(&local).unwrap();
    std::fs::write(&local, format!("{text}defaultAgent: local-only\n")).unwrap();

    let out = env.output(&["config", "show"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["config"], Value::Null, "{shown}");
    let source = shown["configSource"].as_str().unwrap();
    assert!(
        source.starts_with(&db.url_without_password) && source.ends_with("(table uwf_config)"),
        "{shown}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uwf store init --config"), "{err}");

    let shared = env.file(
        "shared.yaml",
        "agents:\n  mock: { command: uwf-mock }\ndefaultAgent: mock\n",
    );
    env.json(&["store", "init", "--config", shared.to_str().unwrap()]);
    let shown = env.json(&["config", "show"]);
    assert_eq!(shown["config"]["defaultAgent"], "mock", "{shown}");
    assert_eq!(shown["defaultAgent"]["command"], "uwf-mock", "{shown}");
    assert_eq!(shown["store"], db.url_without_password.as_str(), "{shown}");
    assert!(!shown.to_string().contains(PASSWORD), "{shown}");
}

#[test]
fn a_damaged_shared_configuration_says_how_to_replace_it() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    let env = pg_env(&db.url_without_password);
    env.json(&["store", "init"]);
    // Written outside uwf: uwf itself refuses to store such a text.
    db.client()
        .execute(
            "INSERT INTO uwf_config (only_row, body, updated_at) VALUES (true, 'agents: [unclosed', 0)",
            &[],
        )
        .unwrap();
    let out = env.output(&["config", "show"]);
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(table uwf_config)"), "{err}");
    assert!(err.contains("uwf store init --config"), "{err}");
    assert!(!err.contains("move the file"), "{err}");
    // `uwf setup` would merge into it: it refuses the same way, and writes
    // neither the row nor the local files.
    let before = env.snapshot();
    let out = env
        .uwf()
        .args([
            "setup",
            "--provider",
            "openai",
            "--api-key",
            "sk-x",
            "--model",
            "m",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uwf store init --config"), "{err}");
    assert_eq!(env.snapshot(), before);
    let body: String = db
        .client()
        .query_one("SELECT body FROM uwf_config", &[])
        .unwrap()
        .get(0);
    assert_eq!(body, "agents: [unclosed");

    // Doing what the help says repairs it.
    let shared = env.file(
        "shared.yaml",
        "agents:\n  mock: { command: uwf-mock }\ndefaultAgent: mock\n",
    );
    env.json(&["store", "init", "--config", shared.to_str().unwrap()]);
    assert_eq!(
        env.json(&["config", "show"])["config"]["defaultAgent"],
        "mock"
    );
}

#[test]
fn setup_edits_the_shared_configuration_and_keeps_the_key_local() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    let env = pg_env(&db.url_without_password);
    let shared = env.file(
        "shared.yaml",
        "# the team's agents\nagents:\n  mock: { command: uwf-mock }\ndefaultAgent: mock\n",
    );
    env.json(&["store", "init", "--config", shared.to_str().unwrap()]);
    let local_before = std::fs::read_to_string(env.root().join("config.yaml")).unwrap();
    const KEY: &str = "sk-test-0123456789abcdef";
    const SETUP: [&str; 7] = [
        "setup",
        "--provider",
        "openai",
        "--api-key",
        KEY,
        "--model",
        "gpt-4o-mini",
    ];

    let out = env
        .uwf()
        .env_remove("OPENAI_API_KEY")
        .args(SETUP)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!report.to_string().contains(KEY) && !err.contains(KEY));
    assert!(
        report["config"]
            .as_str()
            .unwrap()
            .ends_with("(table uwf_config)"),
        "{report}"
    );
    assert!(!report.to_string().contains(PASSWORD), "{report}");
    // The shared configuration gained the provider and the model, kept the
    // team's agents and default, and its comment is saved beside the root.
    let shown = env.json(&["config", "show"]);
    let config = &shown["config"];
    assert_eq!(config["providers"]["openai"]["apiKeyEnv"], "OPENAI_API_KEY");
    assert_eq!(config["defaultModel"], "gpt-4o-mini");
    assert_eq!(config["agents"]["mock"]["command"], "uwf-mock");
    assert_eq!(config["defaultAgent"], "mock", "{shown}");
    let backup = std::path::PathBuf::from(report["backup"].as_str().unwrap());
    assert!(
        std::fs::read_to_string(&backup)
            .unwrap()
            .contains("# the team's agents")
    );
    // The key is in the local .env only, and the local config.yaml (its
    // `store:`) is untouched.
    let dotenv = std::fs::read_to_string(env.root().join(".env")).unwrap();
    assert!(dotenv.contains(&format!("OPENAI_API_KEY={KEY}")), "no key");
    assert!(!env.tables().values().flatten().any(|row| row.contains(KEY)));
    assert_eq!(
        std::fs::read_to_string(env.root().join("config.yaml")).unwrap(),
        local_before
    );
    assert_eq!(shown["providers"]["openai"]["set"], true, "{shown}");

    // The same setup again changes nothing in the database.
    let before = env.tables();
    let again = env.json(&SETUP);
    assert_eq!(again["changed"], serde_json::json!([]), "{again}");
    assert_eq!(env.tables(), before);
}

/// The agents of a run reach the store through their engine's relay
/// (docs/postgres.md, "The store relay"), and only through it: a five-step
/// thread whose database is reached through a proxy that counts
/// connections opens the engine's few, not one more per agent, and the
/// agents (which link no database client) still read and write the store.
#[test]
fn agents_reach_the_store_through_their_engine_not_a_connection_each() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    let server = uwf_pg_testing::server().unwrap();
    let (port, proxy) = server.proxy();
    let env = pg_env(&db.url_through(port, false));
    let thread = solve_with(&env, "Fix the login bug", &[]);
    let relayed = proxy.accepted();
    assert_eq!(env.roles(&thread), SOLVED);
    let verify = env.json(&["cas", "verify"]);
    assert_eq!(verify["issues"], serde_json::json!([]), "{verify}");
    assert!(
        (1..SOLVED.len()).contains(&relayed),
        "{relayed} connections for {} agents through the relay",
        SOLVED.len()
    );
}
