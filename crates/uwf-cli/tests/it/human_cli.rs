//! People in the loop, end to end with the real binaries: a role bound to
//! a person (`human: true`) makes `thread step`/`run` stop with exit status
//! 4 and the wait on stdout; `thread answer` writes the StepNode (JSON,
//! frontmatter text, or `$EDITOR`), racing answers land once, answers that
//! do not fit change nothing, and a child thread that waits makes its
//! parent wait (examples/approve-release.yaml run by `uwf-workflow`).
//!
//! Every test runs on both stores (`per_backend!`): the filesystem root,
//! where waits are entries of `waiting.yaml`, and PostgreSQL, where they
//! are rows of `uwf_waiting` and the configuration is the store's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Output;

use common::{Backend, Env, example, mock_bin, workflow_bin};
use serde_json::Value;

per_backend!(
    a_person_answers_and_the_thread_finishes,
    answers_that_do_not_fit_change_nothing,
    an_unreadable_table_of_waits_refuses_the_answer,
    edit_opens_the_editor_on_a_template_of_the_schema,
    racing_answers_land_exactly_once,
    a_child_thread_that_waits_makes_its_parent_wait,
    an_answer_that_ends_the_child_lets_the_parent_finish,
);

const EXIT_WAITING: i32 = 4;

fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_string()
}

/// A root whose config binds the approver of `approve-release` and
/// `sign-off` to a person, the release role of `ship` / `ship-signed` to
/// `uwf-workflow approve-release` / `sign-off`, every other role to
/// uwf-mock with `scenario`; `extra` is appended. The configuration is
/// `config.yaml` or, on PostgreSQL, the store's own ([`Env::set_config`]).
/// `None` when PostgreSQL tests are skipped.
fn human_env(backend: Backend, scenario: &str, extra: &str) -> Option<Env> {
    let env = Env::on(backend)?;
    let config = format!(
        "agents:\n  mock: {{ command: {mock:?}, args: [{scenario:?}] }}\n  me: {{ human: true }}\n  rel: {{ command: {wf:?}, args: [approve-release] }}\n  so: {{ command: {wf:?}, args: [sign-off] }}\n\
         defaultAgent: mock\nagentOverrides:\n  approve-release: {{ approver: me }}\n  ship: {{ release: rel }}\n  sign-off: {{ approver: me }}\n  ship-signed: {{ release: so }}\n{extra}",
        mock = mock_bin().display().to_string(),
        wf = workflow_bin().display().to_string(),
        scenario = example(scenario),
    );
    env.set_config(&config);
    Some(env)
}

/// Asserts that the store records `thread` as waiting at `head` for
/// `role` (through `child` when given).
fn assert_recorded_wait(env: &Env, thread: &str, head: &Value, role: &str, child: Option<&str>) {
    let table = env.waiting_table();
    let entry = table
        .get(thread)
        .unwrap_or_else(|| panic!("no waiting entry for {thread}: {table:?}"));
    assert_eq!(&entry["head"], head, "{entry}");
    assert_eq!(entry["role"], role, "{entry}");
    assert_eq!(entry["child"].as_str(), child, "{entry}");
}

/// Asserts that no entry of the store's waiting table is current for
/// `thread`, whose head is now `head` (an entry at an older head is
/// stale: readers skip it).
fn assert_no_current_wait(env: &Env, thread: &str, head: &Value) {
    if let Some(entry) = env.waiting_table().get(thread) {
        assert_ne!(&entry["head"], head, "{thread} still waits: {entry}");
    }
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

/// Runs `thread run` on examples/approve-release.yaml until it waits.
fn run_until_waiting(env: &Env) -> (String, Value) {
    let out = run(
        env,
        &[
            "thread",
            "run",
            &example("approve-release.yaml"),
            "-p",
            "Release 1.2",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(EXIT_WAITING),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("uwf::thread::waiting"), "{stderr}");
    assert!(stderr.contains("uwf thread answer"), "{stderr}");
    (s(&v["thread"]), v)
}

fn roles_and_agents(env: &Env, id: &str) -> Vec<(String, String)> {
    env.json(&["thread", "steps", id])["steps"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|st| (s(&st["role"]), s(&st["agent"])))
        .collect()
}

fn a_person_answers_and_the_thread_finishes(backend: Backend) {
    // The notify hook appends to a file outside the root.
    let scratch = tempfile::tempdir().unwrap();
    let notified = scratch.path().join("notified.txt");
    let Some(env) = human_env(
        backend,
        "approve-release.mock.yaml",
        &format!(
            "notify: \"sh -c 'echo \\\"$0|$1|$UWF_WORKFLOW\\\" >> {}'\"\n",
            notified.display()
        ),
    ) else {
        return;
    };
    let (id, waiting) = run_until_waiting(&env);
    assert_eq!(waiting["done"], false);
    assert_eq!(waiting["waiting"]["role"], "approver");
    assert_eq!(waiting["waiting"]["agent"], "me");
    assert_eq!(waiting["head"], waiting["waiting"]["head"]);
    assert!(
        s(&waiting["waiting"]["prompt"]).contains("Approve them"),
        "{waiting}"
    );
    assert_recorded_wait(&env, &id, &waiting["head"], "approver", None);

    // Stepping again does not run anything, keeps the wait and does not notify twice.
    let again = run(&env, &["thread", "step", &id]);
    assert_eq!(again.status.code(), Some(EXIT_WAITING));
    let again = stdout_json(&again);
    assert_eq!(again["waiting"]["since"], waiting["waiting"]["since"]);
    let lines = std::fs::read_to_string(&notified).unwrap();
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        vec![format!("{id}|approver|approve-release")]
    );

    let list = env.json(&["thread", "list", "--waiting"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["thread"], id.as_str());
    assert_eq!(list[0]["answer"], id.as_str());
    assert_eq!(list[0]["stack"][0]["workflowName"], "approve-release");
    let shown = env.json(&["thread", "show", &id]);
    assert_eq!(shown["waiting"]["role"], "approver");

    // The answer, then the rest of the thread.
    let answered = env.json(&[
        "thread",
        "answer",
        &id,
        "--role",
        "approver",
        "--output",
        r#"{"approved": false, "comments": "Mention the login fix."}"#,
        "--as",
        "alice",
    ]);
    assert_eq!(answered["done"], false);
    assert_ne!(answered["head"], waiting["head"]);
    assert_no_current_wait(&env, &id, &answered["head"]);
    assert!(
        env.json(&["thread", "list", "--waiting"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(env.json(&["thread", "show", &id]).get("waiting").is_none());

    // Sent back: the drafter runs again and the thread waits once more.
    let out = run(&env, &["thread", "run", "--thread", &id]);
    assert_eq!(out.status.code(), Some(EXIT_WAITING));
    // A frontmatter answer this time, from stdin.
    let out = env
        .uwf()
        .args(["thread", "answer", &id, "--text", "-", "--as", "bob"])
        .write_stdin("---\napproved: true\n---\nShip it.\n")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = env.json(&["thread", "run", "--thread", &id]);
    assert_eq!(done["done"], true, "{done}");
    assert_eq!(
        roles_and_agents(&env, &id),
        [
            ("drafter", "mock"),
            ("approver", "human:alice"),
            ("drafter", "mock"),
            ("approver", "human:bob"),
            ("publisher", "mock"),
        ]
        .map(|(r, a)| (r.to_string(), a.to_string()))
    );
    env.json(&["cas", "verify"]);
}

/// A table of waits that cannot be read (`waiting.yaml` that does not
/// parse, a `uwf_waiting` row that is not a record) refuses an answer as
/// it refuses `thread show`, before anything is written.
fn an_unreadable_table_of_waits_refuses_the_answer(backend: Backend) {
    let Some(env) = human_env(backend, "approve-release.mock.yaml", "") else {
        return;
    };
    let (id, _) = run_until_waiting(&env);
    let expect = match &env.db {
        None => {
            std::fs::write(env.root().join("waiting.yaml"), "garbage: [\n").unwrap();
            "waiting.yaml at line 2".to_string()
        }
        Some(db) => {
            db.client()
                .execute(
                    "UPDATE uwf_waiting SET record = 'not a record' WHERE thread = $1",
                    &[&id],
                )
                .unwrap();
            format!("waiting entry of thread {id}")
        }
    };
    let before = env.snapshot();
    for args in [
        &["thread", "show", id.as_str()][..],
        &["thread", "answer", &id, "--output", r#"{"approved": true}"#],
    ] {
        let err = env.fails(args);
        assert!(err.contains(&expect), "{args:?}: {err}");
        assert_eq!(env.snapshot(), before, "{args:?} changed the store");
    }
}

fn answers_that_do_not_fit_change_nothing(backend: Backend) {
    let Some(env) = human_env(backend, "approve-release.mock.yaml", "") else {
        return;
    };
    let (id, waiting) = run_until_waiting(&env);
    // The wait is part of what must not change.
    assert_recorded_wait(&env, &id, &waiting["head"], "approver", None);
    let before = env.snapshot();
    for (name, args) in [
        (
            "another_role",
            vec!["--role", "drafter", "--output", r#"{"notes": "x"}"#],
        ),
        ("wrong_type", vec!["--output", r#"{"approved": "yes"}"#]),
        ("not_json", vec!["--output", "{not json"]),
        ("unreadable_text", vec!["--text", "/nonexistent/answer.md"]),
    ] {
        let mut all = vec!["thread", "answer", id.as_str()];
        all.extend(args.iter().copied());
        let err = env.fails(&all);
        insta::assert_snapshot!(format!("answer_{name}"), env.scrub(&err));
        assert_eq!(env.snapshot(), before, "{args:?} changed the root");
    }
    // Exactly one way to answer.
    let out = run(&env, &["thread", "answer", &id, "--output", "{}", "--edit"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&env, &["thread", "answer", &id]);
    assert_eq!(out.status.code(), Some(2));

    // Not a person's role: the drafter's turn after a rejection.
    env.json(&[
        "thread",
        "answer",
        &id,
        "--output",
        r#"{"approved": false}"#,
    ]);
    let err = env.fails(&["thread", "answer", &id, "--output", r#"{"notes": "x"}"#]);
    insta::assert_snapshot!("answer_for_an_agent", env.scrub(&err));

    // A killed thread takes no answer, and no longer waits.
    env.uwf()
        .args(["thread", "run", "--thread", &id])
        .assert()
        .code(EXIT_WAITING);
    assert_eq!(
        env.json(&["thread", "list", "--waiting"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    env.json(&["thread", "kill", &id]);
    assert!(
        env.json(&["thread", "list", "--waiting"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Killed: no longer active, so whatever the table still holds is stale.
    assert!(!env.heads().contains_key(&id), "{:?}", env.heads());
    let err = env.fails(&["thread", "answer", &id, "--output", r#"{"approved": true}"#]);
    insta::assert_snapshot!("answer_after_a_kill", env.scrub(&err));
}

/// A fake `$EDITOR`: a shell script that runs `body` with the file as `$1`.
fn editor(env: &Env, name: &str, body: &str) -> String {
    let path = env.dir.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    path.display().to_string()
}

/// `uwf thread answer <id> --edit` with `$EDITOR` = `editor`.
fn answer_with_editor(env: &Env, id: &str, editor: &str) -> Output {
    env.uwf()
        .args(["thread", "answer", id, "--edit"])
        .env("EDITOR", editor)
        .env_remove("VISUAL")
        .output()
        .unwrap()
}

fn edit_opens_the_editor_on_a_template_of_the_schema(backend: Backend) {
    let Some(env) = human_env(backend, "approve-release.mock.yaml", "") else {
        return;
    };
    let (id, _) = run_until_waiting(&env);
    let seen = env.dir.path().join("template.md");
    // Keeps a copy of the template, then writes the answer.
    let ed = editor(
        &env,
        "answer-editor",
        &format!(
            "cp \"$1\" '{}'\nprintf -- '---\\napproved: false\\ncomments: needs the login fix\\n---\\nSee the issue.\\n' > \"$1\"",
            seen.display()
        ),
    );
    let out = answer_with_editor(&env, &id, &ed);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    assert_eq!(v["done"], false);
    let template = std::fs::read_to_string(&seen).unwrap();
    assert!(template.starts_with("---\napproved: true\n"), "{template}");
    assert!(template.contains("Release 1.2"), "{template}");
    assert!(template.contains("Approve them"), "{template}");
    let steps = env.json(&["thread", "steps", &id])["steps"].clone();
    let last = steps.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "approver");
    assert_eq!(last["output"]["approved"], false);
    assert_eq!(last["output"]["comments"], "needs the login fix");

    // An editor that leaves the template as it is answers nothing.
    env.uwf()
        .args(["thread", "run", "--thread", &id])
        .assert()
        .code(EXIT_WAITING);
    let before = env.snapshot();
    let unchanged = editor(&env, "lazy-editor", "exit 0");
    let out = answer_with_editor(&env, &id, &unchanged);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uwf::thread::answer_abandoned"), "{err}");
    // A failing editor is an error too.
    let failing = editor(&env, "failing-editor", "exit 3");
    let out = answer_with_editor(&env, &id, &failing);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("uwf::thread::editor"));
    assert_eq!(env.snapshot(), before);
}

fn racing_answers_land_exactly_once(backend: Backend) {
    for round in 0..4 {
        let Some(env) = human_env(backend, "approve-release.mock.yaml", "") else {
            return;
        };
        let (id, waiting) = run_until_waiting(&env);
        let spawn = |approved: bool| {
            env.uwf_process()
                .args([
                    "thread",
                    "answer",
                    &id,
                    "--output",
                    &format!(r#"{{"approved": {approved}, "comments": "round {round}"}}"#),
                ])
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(true), spawn(false));
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let won: Vec<&Output> = outs.iter().filter(|o| o.status.success()).collect();
        assert_eq!(
            won.len(),
            1,
            "round {round}: {:?}",
            outs.iter()
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .collect::<Vec<_>>()
        );
        let lost = outs.iter().find(|o| !o.status.success()).unwrap();
        assert!(lost.stdout.is_empty());
        let err = String::from_utf8_lossy(&lost.stderr);
        assert!(
            err.contains("uwf::thread::conflict") || err.contains("uwf::thread::not_waiting"),
            "round {round}: {err}"
        );
        let head = env.json(&["thread", "show", &id])["head"].clone();
        assert_eq!(head, stdout_json(won[0])["head"]);
        assert_no_current_wait(&env, &id, &head);
        let steps = roles_and_agents(&env, &id);
        assert_eq!(steps.len(), 2, "{steps:?}");
        // The winner's step follows the head the thread waited at.
        let last = env.json(&["cas", "get", &s(&head)])["payload"].clone();
        assert_ne!(last["prev"], Value::Null);
        assert_ne!(s(&head), s(&waiting["head"]));
    }
}

fn a_child_thread_that_waits_makes_its_parent_wait(backend: Backend) {
    let Some(env) = human_env(backend, "approve-release.mock.yaml", "") else {
        return;
    };
    env.json(&["workflow", "put", &example("approve-release.yaml")]);
    let ship = parent_workflow(&env, "ship", "{ url: { type: string } }", "url");
    let out = run(&env, &["thread", "run", &ship, "-p", "Ship 1.2"]);
    assert_eq!(
        out.status.code(),
        Some(EXIT_WAITING),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    let parent = s(&v["thread"]);
    assert_eq!(v["waiting"]["role"], "release");
    assert_eq!(v["waiting"]["agent"], "rel");
    let child = s(&v["waiting"]["child"]);
    assert!(s(&v["waiting"]["prompt"]).contains("Approve them"), "{v}");
    // Both waits are in the store: the parent's through its child.
    assert_recorded_wait(&env, &parent, &v["head"], "release", Some(&child));
    let child_head = env.heads()[&child].trim().to_string();
    assert_recorded_wait(&env, &child, &Value::from(child_head), "approver", None);

    let list = env.json(&["thread", "list", "--waiting"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    for item in list {
        // Both point at the child, with the call stack down to it.
        assert_eq!(item["answer"], child.as_str(), "{item}");
        let stack = item["stack"].as_array().unwrap();
        assert_eq!(stack.len(), 2, "{item}");
        assert_eq!(stack[0]["workflowName"], "approve-release");
        assert_eq!(stack[0]["role"], "release");
        assert_eq!(stack[1]["thread"], parent.as_str());
    }
    let err = env.fails(&["thread", "answer", &parent, "--output", r#"{"url": "x"}"#]);
    assert!(
        err.contains(&format!("child thread {child} waits")),
        "{err}"
    );

    // Stepping the parent again waits again, on the same child.
    let again = run(&env, &["thread", "step", &parent]);
    assert_eq!(again.status.code(), Some(EXIT_WAITING));
    assert_eq!(stdout_json(&again)["waiting"]["child"], child.as_str());

    env.json(&[
        "thread",
        "answer",
        &child,
        "--output",
        r#"{"approved": true}"#,
    ]);
    let done = env.json(&["thread", "run", "--thread", &parent]);
    assert_eq!(done["done"], true, "{done}");
    // One child thread only, finished, linked from the parent's step.
    let all = env.json(&["thread", "list", "--all"]);
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    let child_show = env.json(&["thread", "show", &child]);
    assert_eq!(child_show["done"], true);
    assert_eq!(child_show["parentThread"], parent.as_str());
    let parent_show = env.json(&["thread", "show", &parent]);
    assert_eq!(
        parent_show["childThreads"][0]["childThread"],
        child_show["head"]
    );
    // Both finished: neither is active, so no entry of the table counts.
    let heads = env.heads();
    assert!(
        !heads.contains_key(&parent) && !heads.contains_key(&child),
        "{heads:?}"
    );
    assert!(
        env.json(&["thread", "list", "--waiting"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    env.json(&["cas", "verify"]);
}

/// A workflow with one role, `release`, done by a child thread (`ship` or
/// `ship-signed` in [`human_env`]'s config) whose output has `props`.
fn parent_workflow(env: &Env, name: &str, props: &str, required: &str) -> String {
    env.file(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\ndescription: Release through a child thread\nroles:\n  release:\n    description: Runs a child workflow\n    systemPrompt: Release it.\n    outputSchema:\n      type: object\n      properties: {props}\n      required: [{required}]\ngraph:\n  $START:\n    - role: release\n      condition: null\n  release:\n    - role: $END\n      condition: null\n"
        ),
    )
    .display()
    .to_string()
}

fn an_answer_that_ends_the_child_lets_the_parent_finish(backend: Backend) {
    let Some(env) = human_env(backend, "approve-release.mock.yaml", "") else {
        return;
    };
    env.file(
        "sign-off.yaml",
        "name: sign-off\ndescription: One person signs off\nroles:\n  approver:\n    description: Signs off\n    systemPrompt: Sign it off.\n    outputSchema:\n      type: object\n      properties:\n        approved: { type: boolean }\n      required: [approved]\ngraph:\n  $START:\n    - role: approver\n      condition: null\n  approver:\n    - role: $END\n      condition: null\n",
    );
    env.json(&[
        "workflow",
        "put",
        env.dir.path().join("sign-off.yaml").to_str().unwrap(),
    ]);
    let parent_yaml = parent_workflow(
        &env,
        "ship-signed",
        "{ approved: { type: boolean } }",
        "approved",
    );
    let out = run(&env, &["thread", "run", &parent_yaml, "-p", "Ship 1.3"]);
    assert_eq!(
        out.status.code(),
        Some(EXIT_WAITING),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    let parent = s(&v["thread"]);
    let child = s(&v["waiting"]["child"]);
    // The answer is the child's last step: the child ends at once.
    let answered = env.json(&[
        "thread",
        "answer",
        &child,
        "--output",
        r#"{"approved": true}"#,
    ]);
    assert_eq!(answered["done"], true);
    // The parent's workflow agent takes the finished child's answer.
    let done = env.json(&["thread", "run", "--thread", &parent]);
    assert_eq!(done["done"], true, "{done}");
    let steps = env.json(&["thread", "steps", &parent])["steps"].clone();
    assert_eq!(steps[1]["output"]["approved"], true, "{steps}");
    assert_eq!(
        env.json(&["thread", "list", "--all"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    env.json(&["cas", "verify"]);
}
