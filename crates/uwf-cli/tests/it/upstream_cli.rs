//! Workflows in upstream uwf's forms (fixtures in `tests/upstream/`), end to
//! end with the real `uwf` and `uwf-mock`: each validates and runs to
//! `$END`; `$SUSPEND` waits and `thread resume` continues; mustache and
//! Liquid prompts render as upstream rendered them; bad inputs are refused
//! with a diagnostic; `thread read` shows role prompts and step content.
//!
//! Every test runs on both stores (`per_backend!`): the filesystem root,
//! where a `$SUSPEND` wait is an entry of `waiting.yaml`, and PostgreSQL,
//! where it is a row of `uwf_waiting` and threads, nodes and workflows are
//! the database's (nothing of them in the root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::process::Output;

use common::{Backend, Env, example, mock_bin};
use serde_json::Value;

per_backend!(
    every_upstream_form_validates,
    every_upstream_form_runs_to_the_end_with_the_mock,
    suspend_waits_and_resume_continues_from_the_resume_route,
    the_resumed_agent_gets_the_resume_prompt,
    prompts_render_as_upstream_rendered_them,
    bad_upstream_workflows_are_refused_with_a_diagnostic,
    thread_read_shows_role_prompts_and_content,
    workflows_without_new_forms_hash_as_before,
    thread_read_holds_to_the_quota_also_with_before,
    the_template_language_is_chosen_as_upstream,
    upstream_semantic_rules_hold,
    prompts_that_render_to_nothing_are_refused_naming_the_edge,
);

const EXIT_WAITING: i32 = 4;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/upstream")
}

fn fixture(name: &str) -> String {
    fixtures().join(name).to_str().unwrap().to_string()
}

/// `--agent` for uwf-mock with the fixture's scenario.
fn agent(name: &str) -> String {
    format!(
        "{:?} {:?}",
        mock_bin().display().to_string(),
        fixture(&format!("{name}.mock.yaml"))
    )
}

fn run(env: &Env, args: &[&str]) -> Output {
    env.uwf().args(args).output().unwrap()
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Every workflow of the corpus (the files without `.mock.`).
fn corpus() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            (name.ends_with(".yaml") && !name.contains(".mock."))
                .then(|| name.trim_end_matches(".yaml").to_string())
        })
        .collect();
    names.sort();
    names
}

const SUSPENDING: &[&str] = &["suspend-edge", "suspend-status"];

/// The head of thread `id` as the store records it (`threads/<id>` or its
/// `uwf_threads` row).
fn head_of(env: &Env, id: &str) -> String {
    let heads = env.heads();
    let head = heads
        .get(id)
        .unwrap_or_else(|| panic!("{id} is not active: {heads:?}"));
    head.trim_end().to_string()
}

/// Asserts that thread `id` finished: archived in the store's history
/// (`history.jsonl` or `uwf_history`) and no longer active. On PostgreSQL
/// the root holds none of it.
fn assert_archived(env: &Env, id: &str) {
    let history = env.history();
    assert!(
        history.iter().any(|h| h["thread"] == id),
        "{id} not archived: {history:?}"
    );
    assert!(!env.heads().contains_key(id), "{:?}", env.heads());
    assert_nothing_in_the_root(env);
}

/// On PostgreSQL, asserts that no node, thread or wait went to the root's
/// files: the store is the database.
fn assert_nothing_in_the_root(env: &Env) {
    if env.db.is_some() {
        for file in [
            "cas",
            "threads",
            "history.jsonl",
            "waiting.yaml",
            "registry.yaml",
        ] {
            assert!(!env.root().join(file).exists(), "{file} in the root");
        }
    }
}

fn every_upstream_form_validates(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let names = corpus();
    assert_eq!(names.len(), 11, "{names:?}");
    // Validating reads the files only: the store, once opened (which
    // writes its built-in types), is left as it was.
    env.json(&["workflow", "list"]);
    let before = env.snapshot();
    for name in &names {
        assert!(
            fixtures().join(format!("{name}.mock.yaml")).exists(),
            "{name} has no scenario"
        );
        let report = env.json(&["workflow", "validate", &fixture(&format!("{name}.yaml"))]);
        assert_eq!(report["valid"], true, "{name}: {report}");
        assert_eq!(report["errors"], serde_json::json!([]), "{name}");
    }
    assert_eq!(env.snapshot(), before);
}

fn every_upstream_form_runs_to_the_end_with_the_mock(backend: Backend) {
    for name in corpus() {
        if SUSPENDING.contains(&name.as_str()) {
            continue;
        }
        let Some(env) = Env::on(backend) else {
            return;
        };
        let id = run_to_end(&env, &name);
        assert_archived(&env, &id);
    }
}

/// `uwf thread run` of fixture `name` with its scenario.
fn run_fixture(env: &Env, name: &str) -> Output {
    let workflow = fixture(&format!("{name}.yaml"));
    let agent = agent(name);
    let args = [
        "thread", "run", &workflow, "-p", "the task", "--agent", &agent,
    ];
    run(env, &args)
}

/// Runs `name` until it suspends; returns the thread id.
fn run_until_suspended(env: &Env, name: &str) -> String {
    let out = run_fixture(env, name);
    assert_eq!(
        out.status.code(),
        Some(EXIT_WAITING),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("uwf::thread::suspended"), "{stderr}");
    assert!(stderr.contains("uwf thread resume"), "{stderr}");
    let v = stdout_json(&out);
    assert_eq!(v["done"], false);
    assert_eq!(v["waiting"]["role"], "$SUSPEND");
    v["thread"].as_str().unwrap().to_string()
}

fn suspend_waits_and_resume_continues_from_the_resume_route(backend: Backend) {
    for (name, why) in [
        (
            "suspend-edge",
            "Question for the requester: Which database?",
        ),
        ("suspend-status", "The changelog mentions a breaking change"),
    ] {
        let Some(env) = Env::on(backend) else {
            return;
        };
        let id = run_until_suspended(&env, name);

        // The store records the wait at the thread's head: role `$SUSPEND`,
        // no agent ran.
        let head = head_of(&env, &id);
        let table = env.waiting_table();
        let wait = table
            .get(&id)
            .unwrap_or_else(|| panic!("no wait recorded for {id}: {table:?}"));
        assert_eq!(wait["head"], head.as_str(), "{wait}");
        assert_eq!(wait["role"], "$SUSPEND", "{wait}");
        assert_eq!(wait["agent"], "suspended", "{wait}");
        assert_eq!(wait["prompt"], why, "{wait}");
        assert_nothing_in_the_root(&env);

        // The wait is listed; stepping again shows the same wait.
        let list = env.json(&["thread", "list", "--waiting"]);
        assert_eq!(list[0]["thread"], id.as_str(), "{list}");
        assert_eq!(list[0]["waiting"]["prompt"], why);
        let again = run(&env, &["thread", "step", &id, "--agent", &agent(name)]);
        assert_eq!(again.status.code(), Some(EXIT_WAITING));
        assert_eq!(stdout_json(&again)["waiting"]["prompt"], why);

        // Not an answer for a person; nothing changes.
        let before = env.snapshot();
        let err = env.fails(&["thread", "answer", &id, "--output", "{}"]);
        assert!(err.contains("thread resume"), "{err}");
        assert_eq!(env.snapshot(), before);

        // The resume step runs the `resume` route with its prompt.
        let next = env.json(&["thread", "next", &id]);
        assert_eq!(next["role"], "$SUSPEND", "{next}");
        let resumed = env.json(&["thread", "resume", &id, "--agent", &agent(name)]);
        assert_eq!(resumed["thread"], id.as_str());
        // The wait is over: no record current at the new head.
        assert_ne!(resumed["head"], head.as_str(), "{resumed}");
        if let Some(wait) = env.waiting_table().get(&id) {
            assert_ne!(wait["head"], resumed["head"], "{id} still waits: {wait}");
        }
        assert!(
            env.json(&["thread", "list", "--waiting"])
                .as_array()
                .unwrap()
                .is_empty()
        );

        // A thread that is not suspended cannot be resumed.
        if name == "suspend-edge" {
            let before = env.snapshot();
            let err = env.fails(&["thread", "resume", &id, "--agent", &agent(name)]);
            assert!(err.contains("uwf::thread::not_suspended"), "{err}");
            assert!(err.contains("next role is worker"), "{err}");
            assert_eq!(env.snapshot(), before);
            let done = env.json(&["thread", "run", "--thread", &id, "--agent", &agent(name)]);
            assert_eq!(done["done"], true, "{done}");
        } else {
            assert_eq!(resumed["done"], true, "{resumed}");
        }
        assert_archived(&env, &id);
        let roles = env.roles(&id);
        let want: &[&str] = if name == "suspend-edge" {
            &["planner", "planner", "worker"]
        } else {
            &["checker", "checker"]
        };
        assert_eq!(roles, want, "{name}");
    }
}

fn the_resumed_agent_gets_the_resume_prompt(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = run_until_suspended(&env, "suspend-edge");
    // The agent kit finds the resumed role's edge prompt (it warns when the
    // role it runs is not the one the moderator would choose).
    let out = run(
        &env,
        &["thread", "resume", &id, "--agent", &agent("suspend-edge")],
    );
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("without an edge prompt"), "{stderr}");
    assert_eq!(stdout_json(&out)["done"], false);
    let next = env.json(&["thread", "next", &id]);
    assert_eq!(next["role"], "worker");
    assert_eq!(next["prompt"], "Carry out: Migrate the Postgres schema");
    assert_nothing_in_the_root(&env);
}

/// Runs `name` to `$END` with its scenario; returns the thread id.
fn run_to_end(env: &Env, name: &str) -> String {
    let out = run_fixture(env, name);
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    assert_eq!(v["done"], true, "{name}: {v}");
    v["thread"].as_str().unwrap().to_string()
}

/// Starts `name` and runs `steps` steps; returns the thread id.
fn started(env: &Env, name: &str, steps: usize) -> String {
    let v = env.json(&[
        "thread",
        "start",
        &fixture(&format!("{name}.yaml")),
        "-p",
        "the task",
    ]);
    let id = v["thread"].as_str().unwrap().to_string();
    for _ in 0..steps {
        env.json(&["thread", "step", &id, "--agent", &agent(name)]);
    }
    id
}

fn prompts_render_as_upstream_rendered_them(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = started(&env, "liquid-v1", 1);
    let next = env.json(&["thread", "next", &id]);
    assert_eq!(
        next["prompt"],
        "Implement specs/login.md, specs/logout.md on FIX/7-AUTH."
    );

    let id = started(&env, "mustache", 1);
    assert_eq!(
        env.json(&["thread", "next", &id])["prompt"],
        "Review a.rs,b.rs (author says ready)."
    );
    env.json(&["thread", "step", &id, "--agent", &agent("mustache")]);
    assert_eq!(
        env.json(&["thread", "next", &id])["prompt"],
        "The reviewer said changes: Use <T> & handle errors\n- a.rs: unwrap\n- b.rs: no test\n"
    );

    // A seed-003-era file: its prompts make it mustache (raw values,
    // `{{$status}}`), without `frontmatter` or `version`.
    let id = started(&env, "seed-mustache", 1);
    assert_eq!(
        env.json(&["thread", "next", &id])["prompt"],
        "Work on branch fix/7 & co in /src/app"
    );
    for _ in 0..2 {
        env.json(&["thread", "step", &id, "--agent", &agent("seed-mustache")]);
    }
    assert_eq!(
        env.json(&["thread", "next", &id])["prompt"],
        "Status: rejected\nNeeds a <test>"
    );

    let id = started(&env, "status-plain", 1);
    assert_eq!(
        env.json(&["thread", "next", &id])["prompt"],
        "Take your time: billing is hard."
    );

    let id = started(&env, "anchors-v1", 1);
    assert_eq!(
        env.json(&["thread", "next", &id])["prompt"],
        "Your opponent argues:\n\nTabs are wider\n\nAnswer."
    );
    assert_eq!(env.heads().len(), 5, "{:?}", env.heads());
    assert_nothing_in_the_root(&env);
}

fn validate_errors(env: &Env, yaml: &str) -> Value {
    let path = env.dir.path().join("bad.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = run(env, &["workflow", "validate", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    stdout_json(&out)["errors"].clone()
}

fn bad_upstream_workflows_are_refused_with_a_diagnostic(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    // A mustache syntax error: where, what, and why the prompt is mustache.
    let path = env.dir.path().join("syntax.yaml");
    std::fs::write(
        &path,
        "name: s\nroles:\n  a:\n    goal: g\n    frontmatter: {properties: {$status: {enum: [done]}, x: {}}}\n\
         graph:\n  $START: {_: a}\n  a:\n    done: {role: $END, prompt: \"Fix {{#x}}{{.}}\"}\n",
    )
    .unwrap();
    // Refusals change nothing in the store (once opened: that writes its
    // built-in types).
    env.json(&["workflow", "list"]);
    let before = env.snapshot();
    let err = env.fails(&["workflow", "validate", path.to_str().unwrap()]);
    insta::assert_snapshot!("mustache_syntax_error", env.redact(&err));

    // A status key the role's schema never allows, and an undeclared
    // Liquid variable.
    let errors = validate_errors(
        &env,
        "version: 1\nname: k\nroles:\n  a:\n    goal: g\n    frontmatter:\n      oneOf:\n        - properties: {$status: {const: ok}, n: {}}\n\
         graph:\n  $START: {new: a}\n  a:\n    ok: {role: $END, prompt: \"{{ m }}\"}\n    okay: {role: $END, prompt: done}\n",
    );
    let codes: Vec<&str> = errors
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["unknown-variable", "unknown-status"], "{errors}");
    assert!(
        errors[1]["message"]
            .as_str()
            .unwrap()
            .contains("$status \"okay\""),
        "{errors}"
    );

    // `$last` of a role that does not exist.
    let errors = validate_errors(
        &env,
        "name: l\nroles:\n  a: {systemPrompt: s, outputSchema: {}}\nconditions:\n  c: \"$last('b').x\"\n\
         graph:\n  $START: [{role: a}]\n  a: [{role: $END, condition: c}, {role: $END}]\n",
    );
    assert_eq!(errors[0]["code"], "unknown-role", "{errors}");

    // An unknown version.
    let path = env.dir.path().join("v2.yaml");
    std::fs::write(
        &path,
        "version: 2\nname: v\nroles: {}\ngraph: {$START: {_: a}}\n",
    )
    .unwrap();
    let err = env.fails(&["workflow", "validate", path.to_str().unwrap()]);
    insta::assert_snapshot!("unknown_version", env.redact(&err));
    assert_eq!(env.snapshot(), before);
}

fn thread_read_shows_role_prompts_and_content(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = run_to_end(&env, "liquid-v1");
    // `thread read` reads an archived thread from the store's history.
    assert_archived(&env, &id);
    let read = run(&env, &["thread", "read", &id]);
    assert!(read.status.success());
    let text = String::from_utf8_lossy(&read.stdout);
    assert!(
        text.contains("<prompt role=\"specifier\">\n## Goal\nYou write specs."),
        "{text}"
    );
    assert_eq!(text.matches("<prompt role=\"specifier\">").count(), 1);
    assert!(
        text.contains("### Content\n\n---\n$status: ready"),
        "{text}"
    );
    assert!(text.contains("Specs written."), "{text}");

    // A quota of 0 is a usage error, as upstream.
    let bad = run(&env, &["thread", "read", &id, "--quota", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("invalid --quota: must be a positive integer")
    );
}

fn workflows_without_new_forms_hash_as_before(backend: Backend) {
    // Hashes of uwf's own examples, unchanged by the upstream support.
    let Some(env) = Env::on(backend) else {
        return;
    };
    for (file, hash) in [
        ("solve-issue.yaml", "1TM6QWPENJAPY"),
        ("triage.yaml", "8YCZHJD643GC0"),
        ("draft-loop.yaml", "4FYE51400TQSB"),
        ("approve-release.yaml", "7W6TR81BWS88D"),
    ] {
        let v = env.json(&["workflow", "put", &example(file)]);
        assert_eq!(v["hash"], hash, "{file}");
        // Registered under that hash in the store.
        let name = v["name"].as_str().unwrap();
        assert_eq!(env.registry()[name], hash, "{file}");
    }
    assert_eq!(env.registry().len(), 4, "{:?}", env.registry());
    assert_nothing_in_the_root(&env);
}

/// Upstream's `thread read --quota N` bounds the whole text to `N`
/// characters (its test "quota with --before parameter"); uwf printed 789
/// characters for a quota of 700 (role prompts and the heading were not
/// counted).
fn thread_read_holds_to_the_quota_also_with_before(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = run_to_end(&env, "mustache");
    let steps = env.json(&["thread", "steps", &id]);
    // Entry 0 is the StartNode.
    let hashes: Vec<String> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["hash"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(hashes.len(), 5, "{steps}");
    let last = &hashes[4];
    for quota in [400usize, 500, 700, 900, 1200, 2000] {
        for before in [None, Some(last.as_str())] {
            let q = quota.to_string();
            let mut args = vec!["thread", "read", id.as_str(), "--quota", q.as_str()];
            if let Some(b) = before {
                args.extend(["--before", b]);
            }
            let text = env.text(&args);
            let n = text.chars().count();
            assert!(
                n <= quota,
                "{n} characters for --quota {quota} ({before:?}):\n{text}"
            );
            // The newest step asked for is always there.
            let newest = if before.is_some() {
                "## Step 3 · author"
            } else {
                "## Step 4 · reviewer"
            };
            assert!(text.contains(newest), "{quota} {before:?}:\n{text}");
            if before.is_some() {
                assert!(!text.contains("## Step 4"), "{text}");
            }
        }
    }
    // A generous quota shows every step and no pointer back.
    let all = env.text(&["thread", "read", &id, "--quota", "100000"]);
    assert!(all.contains("## Step 1 · author"), "{all}");
    assert!(!all.contains("earlier step(s) not shown"), "{all}");
}

/// `workflow validate` of `yaml` (written to `name`): the report.
fn validate_text(env: &Env, name: &str, yaml: &str) -> Value {
    let path = env.dir.path().join(name);
    std::fs::write(&path, yaml).unwrap();
    stdout_json(&run(env, &["workflow", "validate", path.to_str().unwrap()]))
}

fn codes(findings: &Value) -> Vec<&str> {
    findings
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect()
}

/// A seed-003 workflow (status maps, `meta`) whose prompts read the same
/// in mustache and JSONata.
const AMBIGUOUS: &str = "name: amb\nroles:\n  a:\n    goal: g\n    meta: {properties: {$status: {enum: [done]}, files: {}}}\n\
    \x20 b: {goal: g, meta: {}}\ngraph:\n  $START: {_: a}\n  a:\n    done: {role: b, prompt: \"Merged {{files}}\"}\n  b: {_: $END}\n";

/// The prompt for `b` after `a` finished with two files, in `yaml`.
fn ambiguous_prompt(env: &Env, yaml: &str) -> Value {
    let path = env.dir.path().join("amb.yaml");
    std::fs::write(&path, yaml).unwrap();
    let scenario = env.dir.path().join("amb.mock.yaml");
    std::fs::write(
        &scenario,
        "steps:\n  - role: a\n    output: \"---\\n$status: done\\nfiles: [a.rs, b.rs]\\n---\\n\"\n",
    )
    .unwrap();
    let agent = format!(
        "{:?} {:?}",
        mock_bin().display().to_string(),
        scenario.display().to_string()
    );
    let id = env.json(&["thread", "start", path.to_str().unwrap(), "-p", "t"])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    env.json(&["thread", "step", &id, "--agent", &agent]);
    env.json(&["thread", "next", &id])["prompt"].clone()
}

/// The seed-003 form's edge prompts are mustache (docs/workflow.md, "Which
/// template language a prompt is written in"): a prompt only mustache reads,
/// or status maps, select it; a choice that could be wrong is a warning
/// that says how to pin the language.
fn the_template_language_is_chosen_as_upstream(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    // Plainly mustache: valid, no warning about the language.
    let report = validate_text(
        &env,
        "plain.yaml",
        &std::fs::read_to_string(fixture("seed-mustache.yaml")).unwrap(),
    );
    assert_eq!(report["valid"], true, "{report}");
    assert!(
        !codes(&report["warnings"]).contains(&"prompt-language"),
        "{report}"
    );

    // Ambiguous: mustache because of the status maps, with a warning that
    // names the choice and the way to pin it.
    let report = validate_text(&env, "amb.yaml", AMBIGUOUS);
    assert_eq!(report["valid"], true, "{report}");
    let warning = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "prompt-language")
        .unwrap_or_else(|| panic!("{report}"));
    let message = warning["message"].as_str().unwrap();
    assert!(message.contains("read as mustache"), "{message}");
    assert!(message.contains("x-uwf-prompts: jsonata"), "{message}");
    // Rendered as mustache: a list is its items joined by commas.
    assert_eq!(ambiguous_prompt(&env, AMBIGUOUS), "Merged a.rs,b.rs");

    // Pinned: no warning, and the language pinned.
    for (pin, prompt) in [
        ("mustache", "Merged a.rs,b.rs"),
        ("jsonata", r#"Merged ["a.rs","b.rs"]"#),
    ] {
        let yaml = format!("x-uwf-prompts: {pin}\n{AMBIGUOUS}");
        let report = validate_text(&env, "pinned.yaml", &yaml);
        assert_eq!(report["valid"], true, "{report}");
        assert!(
            !codes(&report["warnings"]).contains(&"prompt-language"),
            "{pin}: {report}"
        );
        assert_eq!(ambiguous_prompt(&env, &yaml), prompt, "{pin}");
    }
}

/// Upstream's semantic validator tests, each a change to its
/// `makeWorkflow` (`tests/upstream/semantic/base.yaml`).
fn upstream_semantic_rules_hold(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let base = std::fs::read_to_string(fixtures().join("semantic/base.yaml")).unwrap();
    let changed = |from: &str, to: &str| {
        assert!(base.contains(from), "{from}");
        base.replace(from, to)
    };
    // 1.5: the workflow as it is is valid.
    let report = validate_text(&env, "base.yaml", &base);
    assert_eq!(report["errors"], serde_json::json!([]), "{report}");

    let rejected = "    rejected: { role: writer, prompt: \"Fix: {{ reason }}\" }\n";
    let approved = "    approved: { role: $END, prompt: \"Done: {{ summary }}\" }\n";
    // 3.4: a role with several exits must route each.
    let report = validate_text(&env, "3.4.yaml", &changed(rejected, ""));
    assert_eq!(codes(&report["errors"]), ["missing-status"], "{report}");
    let e = &report["errors"][0];
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("$status \"rejected\""),
        "{e}"
    );
    assert_eq!(e["role"], "reviewer");
    assert!(e["line"].as_u64().is_some(), "{e}");

    // 3.5: and may not use `_` there.
    let fallback = "    _: { role: $END, prompt: \"Done\" }\n";
    let report = validate_text(
        &env,
        "3.5.yaml",
        &changed(&format!("{approved}{rejected}"), fallback),
    );
    assert_eq!(
        codes(&report["errors"]),
        ["fallback-status", "missing-status"],
        "{report}"
    );
    assert!(
        report["errors"][1]["message"]
            .as_str()
            .unwrap()
            .contains("\"approved\", \"rejected\""),
        "{report}"
    );

    // 4.1: a prompt reads a variable the role's schema does not have: in
    // Liquid (`version: 1`) and in the mustache of the same file without it.
    let unknown = changed("Review this: {{ plan }}", "Review: {{ branch }}");
    let mustache = unknown.replace("version: 1\n", "");
    for (name, yaml) in [
        ("4.1-liquid.yaml", &unknown),
        ("4.1-mustache.yaml", &mustache),
    ] {
        let report = validate_text(&env, name, yaml);
        assert_eq!(
            codes(&report["errors"]),
            ["unknown-variable"],
            "{name}: {report}"
        );
        let e = &report["errors"][0];
        assert!(e["message"].as_str().unwrap().contains("`branch`"), "{e}");
        assert_eq!(e["role"], "writer");
    }
}

/// Upstream's moderator refused an edge prompt that renders to nothing
/// (its test "returns error when rendered prompt is empty string").
fn prompts_that_render_to_nothing_are_refused_naming_the_edge(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let base = std::fs::read_to_string(fixtures().join("semantic/base.yaml")).unwrap();
    // Empty as written: refused when the file is read, naming the edge.
    for (name, empty) in [("empty", "\"\""), ("blank", "\"  \"")] {
        let path = env.dir.path().join("empty.yaml");
        std::fs::write(&path, base.replace("\"Review this: {{ plan }}\"", empty)).unwrap();
        let err = env.fails(&["workflow", "validate", path.to_str().unwrap()]);
        insta::assert_snapshot!(format!("{name}_edge_prompt"), env.redact(&err));
    }
    // Empty once rendered (its only variable missing, or white space
    // around it): the step fails naming the edge, and the thread stays.
    for (name, prompt) in [
        ("variable", "\"{{ userPrompt }}\""),
        ("variable_in_blanks", "\"  {{ userPrompt }}  \""),
    ] {
        let path = env.dir.path().join("render.yaml");
        std::fs::write(&path, base.replace("\"Begin writing\"", prompt)).unwrap();
        let id = env.json(&["thread", "start", path.to_str().unwrap(), "-p", "t"])["thread"]
            .as_str()
            .unwrap()
            .to_string();
        let head = head_of(&env, &id);
        let out = run(&env, &["thread", "next", &id]);
        assert_eq!(out.status.code(), Some(1));
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr).replace(&id, "[THREAD]");
        insta::assert_snapshot!(format!("edge_prompt_rendered_empty_{name}"), err);
        assert_eq!(head_of(&env, &id), head);
    }
}

/// `uwf prompt <which>`: the Markdown text.
fn prompt_text(env: &Env, which: &str) -> String {
    env.text(&["prompt", which])
}

/// Upstream's `uwf prompt workflow-authoring` taught an agent to write
/// workflows: every complete workflow in uwf's text (a YAML block with
/// `name`, `roles` and `graph`, nothing elided) validates, so one written
/// from it can.
#[test]
fn the_workflows_of_the_authoring_text_validate() {
    let env = Env::new();
    let text = prompt_text(&env, "workflow-authoring");
    let mut checked = 0;
    for block in text.split("```yaml\n").skip(1) {
        let yaml = block.split("\n```").next().unwrap();
        let top = |key: &str| yaml.lines().any(|l| l.starts_with(key));
        // A block whose value is `{ … }` is an outline of the format, not a
        // workflow.
        if !(top("name:") && top("roles:") && top("graph:")) || yaml.contains(": { … }") {
            continue;
        }
        let path = env.dir.path().join(format!("w{checked}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        let report = env.json(&["workflow", "validate", path.to_str().unwrap()]);
        assert_eq!(report["valid"], true, "{yaml}\n{report}");
        checked += 1;
    }
    assert!(checked >= 2, "{checked} workflows in:\n{text}");
}

/// The texts are the docs, the schema and the CLI itself: they say what
/// this uwf does.
#[test]
fn the_prompt_texts_are_the_docs_the_schema_and_the_commands() {
    let env = Env::new();
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let doc = |name: &str| std::fs::read_to_string(docs.join(name)).unwrap();
    let section = |doc: &str, heading: &str| {
        let start = doc.find(&format!("\n{heading}\n")).unwrap();
        let rest = &doc[start + 1..];
        let end = rest[heading.len()..]
            .find("\n## ")
            .map_or(rest.len(), |e| e + heading.len());
        rest[..end].trim_end().to_string()
    };

    let authoring = prompt_text(&env, "workflow-authoring");
    let workflow_md = doc("workflow.md");
    for heading in [
        "## Top level",
        "## Status maps (seed 003)",
        "## Static validation",
    ] {
        assert!(
            authoring.contains(&section(&workflow_md, heading)),
            "{heading}"
        );
    }
    // The schema `uwf workflow schema` prints.
    let schema = env.json(&["workflow", "schema"]);
    let block = authoring
        .split("```json\n")
        .last()
        .and_then(|b| b.split("\n```").next())
        .unwrap();
    assert_eq!(serde_json::from_str::<Value>(block).unwrap(), schema);

    let adapter = prompt_text(&env, "adapter-developing");
    assert!(adapter.contains(doc("writing-agents.md").trim_end()));
    assert!(adapter.contains(doc("agent-protocol.md").trim_end()));

    // Every command the usage text teaches is one `uwf` has.
    let usage = prompt_text(&env, "usage");
    let commands: Vec<&str> = usage
        .lines()
        .filter_map(|l| l.strip_prefix("### `uwf ")?.strip_suffix('`'))
        .collect();
    assert!(commands.contains(&"thread run"), "{usage}");
    assert!(commands.contains(&"prompt workflow-authoring"), "{usage}");
    for command in &commands {
        let mut args: Vec<&str> = command.split(' ').collect();
        args.push("--help");
        let out = run(&env, &args);
        assert!(
            out.status.success(),
            "uwf {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Markdown only, as `thread read`.
    let out = run(&env, &["--format", "json", "prompt", "usage"]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("prints Markdown"));
}

/// JSONata's own suite: objects keep the order of their members
/// (`$keys({"b":1,"a":2})` is `["b","a"]`), in an input document and in
/// what an expression builds; only a thread's context is sorted.
#[test]
fn eval_keeps_the_key_order_of_its_input_and_of_built_objects() {
    let env = Env::new();
    let eval = |args: &[&str]| -> Value {
        let mut all = vec!["eval"];
        all.extend(args);
        env.json(&all)
    };
    let keys = serde_json::json!(["b", "a"]);
    assert_eq!(eval(&["$keys({\"b\":1,\"a\":2})"]), keys);
    let document = r#"{"b": 1, "a": {"z": 2, "y": 3}}"#;
    assert_eq!(eval(&["$keys($)", "--input", document]), keys);
    assert_eq!(
        eval(&["$keys(a)", "--input", document]),
        serde_json::json!(["z", "y"])
    );
    assert_eq!(
        eval(&["$string($)", "--input", document]),
        r#"{"b":1,"a":{"z":2,"y":3}}"#
    );
    // Printed as it is ordered.
    let out = run(
        &env,
        &["--format", "json", "eval", "$", "--input", document],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.find("\"b\"").unwrap() < text.find("\"a\"").unwrap(),
        "{text}"
    );
}
