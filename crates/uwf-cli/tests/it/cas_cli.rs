//! `uwf cas …` end to end, against the real binary, on both stores: every
//! test in the `per_backend!` list runs once on the filesystem and once on
//! PostgreSQL. The rest are about the filesystem layout itself (stray
//! files, permissions, a root that is a file).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Backend, Env, hash_of};
use serde_json::{Value, json};

per_backend!(
    schema_list_on_a_fresh_store_matches_its_snapshot,
    get_prints_hash_type_payload_and_optionally_timestamp,
    put_is_idempotent_and_keeps_the_first_timestamp,
    payload_from_file_and_stdin,
    has_refs_and_walk,
    walk_reports_missing_nodes,
    verify_and_reindex_on_a_sound_store,
    verify_checks_every_root_of_the_state,
    malformed_and_path_like_hashes_are_rejected,
    unknown_hashes_are_reported,
    bad_payloads_are_refused_with_the_failing_path,
    unsupported_schemas_are_refused_with_a_reason,
    corrupt_truncated_and_renamed_nodes_are_detected,
    many_writer_processes_at_once,
    gc_sweeps_only_what_no_root_reaches,
    gc_beside_running_work_never_leaves_a_broken_root,
    storing_an_old_orphan_again_protects_it_for_the_grace_period
);

const NOTE: &str = r#"{"title":"note","type":"object","properties":{"text":{"type":"string"},"prev":{"type":["string","null"],"format":"cas_ref"},"tags":{"type":"array","items":{"type":"string"}}},"required":["text"],"additionalProperties":false}"#;

/// A store with a `note` type and two linked notes.
fn chain(env: &Env) -> (String, String, String) {
    let t = hash_of(&env.json(&["cas", "schema", "put", NOTE]));
    let a = hash_of(&env.json(&["cas", "put", &t, r#"{"text":"first","prev":null}"#]));
    let b = hash_of(&env.json(&[
        "cas",
        "put",
        &t,
        &format!(r#"{{"text":"second","prev":"{a}"}}"#),
    ]));
    (t, a, b)
}

fn schema_list_on_a_fresh_store_matches_its_snapshot(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let out = env.uwf().args(["cas", "schema", "list"]).output().unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!("cas_schema_list", String::from_utf8(out.stdout).unwrap());
}

fn get_prints_hash_type_payload_and_optionally_timestamp(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let (t, a, _) = chain(&env);
    let v = env.json(&["cas", "get", &a]);
    assert_eq!(
        v,
        json!({"hash": a, "type": t, "payload": {"text": "first", "prev": null}})
    );
    let v = env.json(&["cas", "get", &a.to_lowercase(), "--timestamp"]);
    assert!(v["timestamp"].as_u64().unwrap() > 1_600_000_000_000);
    let yaml = env
        .uwf()
        .args(["--format", "yaml", "cas", "get", &a])
        .output()
        .unwrap();
    let y: Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(y["payload"]["text"], "first");
}

fn put_is_idempotent_and_keeps_the_first_timestamp(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let t = hash_of(&env.json(&["cas", "schema", "put", NOTE]));
    let first = env.json(&["cas", "put", &t, r#"{"text":"x"}"#]);
    assert_eq!(first["created"], true);
    let ts = env.json(&["cas", "get", &hash_of(&first), "--timestamp"])["timestamp"].clone();
    // A node stored again from now on would get a later timestamp.
    common::wait_past_ms(ts.as_u64().unwrap());
    // Same content, other key order and spacing: same node.
    let again = env.json(&["cas", "put", &t, r#"{ "text" : "x" }"#]);
    assert_eq!(again["created"], false);
    assert_eq!(hash_of(&again), hash_of(&first));
    assert_eq!(
        env.json(&["cas", "get", &hash_of(&first), "--timestamp"])["timestamp"],
        ts
    );
}

fn payload_from_file_and_stdin(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let schema_file = env.dir.path().join("note.schema.json");
    std::fs::write(&schema_file, NOTE).unwrap();
    let t = hash_of(&env.json(&["cas", "schema", "put", schema_file.to_str().unwrap()]));
    let out = env
        .uwf()
        .args(["cas", "put", &t, "-"])
        .write_stdin(r#"{"text":"from stdin"}"#)
        .output()
        .unwrap();
    assert!(out.status.success());
    let h = hash_of(&serde_json::from_slice(&out.stdout).unwrap());
    assert_eq!(
        env.json(&["cas", "get", &h])["payload"]["text"],
        "from stdin"
    );
    assert_eq!(
        env.json(&["cas", "schema", "get", &t]),
        serde_json::from_str::<Value>(NOTE).unwrap()
    );
}

fn has_refs_and_walk(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let (t, a, b) = chain(&env);
    assert_eq!(
        env.json(&["cas", "has", &a]),
        json!({"hash": a, "exists": true})
    );
    assert_eq!(
        env.json(&["cas", "has", "0000000000000"]),
        json!({"hash": "0000000000000", "exists": false})
    );
    assert_eq!(
        env.json(&["cas", "refs", &b]),
        json!([{"path": "/prev", "hash": a}])
    );
    assert_eq!(env.json(&["cas", "refs", &a]), json!([]));
    assert_eq!(
        env.json(&["cas", "walk", &b]),
        json!([{"hash": b, "type": t, "depth": 0}, {"hash": a, "type": t, "depth": 1}])
    );
}

fn walk_reports_missing_nodes(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let t = hash_of(&env.json(&["cas", "schema", "put", NOTE]));
    let h = hash_of(&env.json(&["cas", "put", &t, r#"{"text":"x","prev":"0000000000000"}"#]));
    let w = env.json(&["cas", "walk", &h]);
    assert_eq!(
        w[1],
        json!({"hash": "0000000000000", "type": null, "depth": 1, "missing": true})
    );
    // And verify calls it dangling.
    let out = env.uwf().args(["cas", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["issues"][0]["kind"], "dangling");
    assert_eq!(report["issues"][0]["path"], "/prev");
}

fn verify_and_reindex_on_a_sound_store(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    chain(&env);
    let v = env.json(&["cas", "verify"]);
    assert_eq!(v["issues"], json!([]));
    assert_eq!(v["nodes"], 7); // meta + 3 protocol schemas + note + 2 notes
    // On the filesystem the by-type index is files that can be lost and
    // rebuilt; on PostgreSQL it is a database index, so nothing is added.
    let added = if env.db.is_none() {
        std::fs::remove_dir_all(env.root().join("cas/index")).unwrap();
        std::fs::create_dir(env.root().join("cas/index")).unwrap();
        7
    } else {
        0
    };
    let r = env.json(&["cas", "reindex"]);
    assert_eq!(
        (r["nodes"].as_u64(), r["added"].as_u64()),
        (Some(7), Some(added))
    );
    assert_eq!(
        env.json(&["cas", "schema", "list"])
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

/// `uwf thread start <workflow> -p <task>`: the new thread's id.
fn start_thread(env: &Env, workflow: &str, task: &str) -> String {
    let v = env.json(&["thread", "start", workflow, "-p", task]);
    v["thread"].as_str().unwrap().to_string()
}

fn verify_checks_every_root_of_the_state(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let solve = common::example("solve-issue.yaml");
    let draft = common::example("draft-loop.yaml");
    let workflow = hash_of(&env.json(&["workflow", "put", &solve]));
    env.json(&["workflow", "put", &draft]);
    let broken = start_thread(&env, "solve-issue", "its head goes missing");
    let sound = start_thread(&env, "solve-issue", "an attempt record of the wrong type");
    let gone = start_thread(&env, "solve-issue", "forgotten with a run queued");
    let archived = start_thread(&env, "solve-issue", "archived, then its head retyped");
    let start = env.heads()[&sound].trim().to_string();
    for id in [&broken, &gone] {
        env.json(&["thread", "run", id, "--detach", "--agent", "nobody"]);
    }
    env.json(&["thread", "kill", &archived]);
    // A sound store first: every root checked, nothing wrong.
    let v = env.json(&["cas", "verify"]);
    assert_eq!(v["issues"], json!([]), "{v}");
    // 3 heads, 2 runs, 2 registry entries, 1 history entry.
    assert_eq!(v["roots"], 8, "{v}");

    let missing = "0000000000000";
    env.damage_head(&broken, missing);
    env.damage_waiting(&broken, missing, "planner");
    env.damage_attempt(&sound, &workflow);
    env.forget_thread(&gone);
    env.damage_registry("draft-loop", &start);
    env.damage_history_head(&archived, &workflow);
    let out = env.output(&["cas", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    insta::assert_snapshot!("verify_of_broken_roots", env.scrub(&stderr));
    // Every broken root, in the order of the state: heads, waits, attempt
    // records, runs, registry, history; each naming its thread or name.
    let got: Vec<(String, String, String, String)> = v["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!(i["kind"], "brokenRoot", "{i}");
            let who = i["thread"].as_str().or(i["workflow"].as_str()).unwrap();
            let r = |k: &str| i[k].as_str().unwrap_or_default().to_string();
            (r("root"), who.to_string(), r("problem"), r("expected"))
        })
        .collect();
    let row = |root: &str, who: &str, problem: &str, expected: &str| {
        (root.into(), who.into(), problem.into(), expected.into())
    };
    let thread_node = "StartNode or StepNode";
    assert_eq!(
        got,
        vec![
            row("head", &broken, "missing", thread_node),
            row("waiting", &broken, "missing", thread_node),
            row("attempt", &sound, "wrongType", "AttemptRecord"),
            row("run", &broken, "missing", thread_node),
            row("run", &gone, "unknownThread", "thread"),
            row("registry", "draft-loop", "wrongType", "Workflow"),
            row("history", &archived, "wrongType", thread_node),
        ],
        "{v:#}"
    );
    let issues = v["issues"].as_array().unwrap();
    assert_eq!(issues[0]["hash"], missing);
    assert_eq!(
        issues[0]["reason"],
        format!(
            "the head of thread {broken} is {missing}, which is not in the store (expected a StartNode or StepNode)"
        )
    );
    // The type found is named, by hash and title.
    assert_eq!(issues[5]["hash"], start.as_str());
    let start_type = env.json(&["cas", "get", &start])["type"].clone();
    assert_eq!(issues[5]["type"], start_type);
    assert!(
        issues[5]["reason"]
            .as_str()
            .unwrap()
            .contains("which is a StartNode, not a Workflow"),
        "{}",
        issues[5]
    );
    assert_eq!(v["roots"], 9, "{v}");
}

#[test]
fn completions_version_and_help() {
    let env = Env::new();
    let out = env.uwf().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("uwf"));
    let out = env.uwf().arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("uwf "));
    let out = env.uwf().args(["cas", "put", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Example"));
}

// ----- bad input: a clear error, a non-zero exit, nothing on stdout, nothing changed -----

/// Runs a failing command and checks the store did not change.
fn fails_unchanged(env: &Env, args: &[&str], expect: &str) {
    let before = env.snapshot();
    let err = env.fails(args);
    assert!(
        err.contains(expect),
        "uwf {args:?}: stderr lacks {expect:?}:\n{err}"
    );
    assert_eq!(before, env.snapshot(), "uwf {args:?} changed the store");
}

fn malformed_and_path_like_hashes_are_rejected(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    chain(&env);
    for bad in [
        "",
        "ABC",
        "../x",
        "/etc/passwd",
        "../../../../etc",
        "0000000000000A",
        "000000000000U",
        "G000000000000",
        "00000000000/0",
    ] {
        for cmd in [
            &["cas", "get"][..],
            &["cas", "has"],
            &["cas", "refs"],
            &["cas", "walk"],
            &["cas", "schema", "get"],
        ] {
            let mut args = cmd.to_vec();
            args.push(bad);
            fails_unchanged(&env, &args, "is not a CAS hash");
        }
        fails_unchanged(&env, &["cas", "put", bad, "{}"], "is not a CAS hash");
    }
}

fn unknown_hashes_are_reported(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let (_, a, _) = chain(&env);
    for cmd in ["get", "refs", "walk"] {
        fails_unchanged(
            &env,
            &["cas", cmd, "0000000000000"],
            "no node 0000000000000",
        );
    }
    fails_unchanged(
        &env,
        &["cas", "put", "0000000000000", "{}"],
        "unknown type 0000000000000",
    );
    fails_unchanged(&env, &["cas", "put", &a, "{}"], "is not a schema node");
    fails_unchanged(&env, &["cas", "schema", "get", &a], "is not a schema node");
}

fn bad_payloads_are_refused_with_the_failing_path(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let (t, _, _) = chain(&env);
    fails_unchanged(
        &env,
        &["cas", "put", &t, r#"{"text": "x",}"#],
        "is not valid JSON",
    );
    fails_unchanged(
        &env,
        &["cas", "put", &t, "no-such-file.json"],
        "neither an existing file nor JSON",
    );
    fails_unchanged(&env, &["cas", "put", &t, r#"{"text": 5}"#], "at /text");
    fails_unchanged(
        &env,
        &["cas", "put", &t, r#"{"text": "x", "tags": ["a", 2]}"#],
        "at /tags/1",
    );
    fails_unchanged(
        &env,
        &["cas", "put", &t, r#"{"text": "x", "prev": "../../etc"}"#],
        "at /prev",
    );
    fails_unchanged(
        &env,
        &["cas", "put", &t, r#"{"text": "x", "extra": 1}"#],
        "extra",
    );
    let err = env.fails(&["cas", "put", &t, r#"{}"#]);
    assert!(err.contains("\"text\" is a required property"), "{err}");
}

fn unsupported_schemas_are_refused_with_a_reason(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    chain(&env);
    fails_unchanged(
        &env,
        &["cas", "schema", "put", r#"{"$id": "https://x/y"}"#],
        "`$id` at the root is not supported",
    );
    fails_unchanged(
        &env,
        &["cas", "schema", "put", r#"{"$ref": "https://x/y"}"#],
        "/$ref",
    );
    fails_unchanged(
        &env,
        &[
            "cas",
            "schema",
            "put",
            r#"{"type": "object", "properties": {"a": {"definitions": {}}}}"#,
        ],
        "use `$defs`",
    );
    fails_unchanged(
        &env,
        &["cas", "schema", "put", r#"{"type": "strnig"}"#],
        "/type",
    );
    fails_unchanged(
        &env,
        &["cas", "schema", "put", r#"{"format": "cas-ref"}"#],
        "does not compile",
    );
    fails_unchanged(&env, &["cas", "schema", "put", "true"], "JSON object");
    fails_unchanged(&env, &["cas", "schema", "put", "[1,2"], "is not valid JSON");
}

fn corrupt_truncated_and_renamed_nodes_are_detected(backend: Backend) {
    for damage in ["corrupt", "truncate", "rename"] {
        let Some(env) = Env::on(backend) else {
            return;
        };
        let (t, a, b) = chain(&env);
        // Where the store keeps `a`: what the error must name.
        let shown = match &env.db {
            None => {
                let path = env.object_path(&a);
                let bytes = std::fs::read(&path).unwrap();
                match damage {
                    "corrupt" => {
                        let text = String::from_utf8(bytes).unwrap().replace("first", "fir5t");
                        std::fs::write(&path, text).unwrap();
                    }
                    "truncate" => std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap(),
                    // b's file takes a's name: valid JSON that hashes to b, not a.
                    _ => drop(std::fs::copy(env.object_path(&b), &path).unwrap()),
                }
                path.display().to_string()
            }
            Some(db) => {
                let sql = match damage {
                    "corrupt" => {
                        "UPDATE uwf_nodes SET payload = \
                         convert_to(replace(convert_from(payload, 'UTF8'), 'first', 'fir5t'), 'UTF8') \
                         WHERE hash = $1"
                    }
                    "truncate" => {
                        "UPDATE uwf_nodes SET payload = substring(payload FROM 1 FOR length(payload) / 2) \
                         WHERE hash = $1"
                    }
                    // b's row under a's hash: content that hashes to b, not a.
                    _ => {
                        "UPDATE uwf_nodes SET (type_hash, payload) = \
                         (SELECT type_hash, payload FROM uwf_nodes WHERE hash = $2) WHERE hash = $1"
                    }
                };
                let mut client = db.client();
                let changed = if damage == "rename" {
                    client.execute(sql, &[&a, &b])
                } else {
                    client.execute(sql, &[&a])
                };
                assert_eq!(changed.unwrap(), 1, "{damage}");
                "uwf_nodes".to_string()
            }
        };
        let victim = a.clone();
        fails_unchanged(
            &env,
            &["cas", "get", &victim],
            &format!("node {victim} is corrupt"),
        );
        let err = env.fails(&["cas", "get", &victim]);
        assert!(
            err.replace('\n', "").contains(&shown.replace('\n', "")) || err.contains(&a[2..]),
            "{damage}: where the node is kept is not named:\n{err}"
        );
        fails_unchanged(&env, &["cas", "walk", &b], "is corrupt");
        let out = env.uwf().args(["cas", "verify"]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{damage}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            report["issues"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["kind"] == "corrupt" && i["hash"] == a.as_str()),
            "{damage}: {report}"
        );
        // Putting the same content again repairs the file.
        env.json(&["cas", "put", &t, r#"{"text":"first","prev":null}"#]);
        assert_eq!(env.json(&["cas", "get", &a])["payload"]["text"], "first");
        assert_eq!(env.json(&["cas", "verify"])["issues"], json!([]));
    }
}

#[test]
fn stray_files_are_reported_by_verify() {
    let env = Env::new();
    chain(&env);
    std::fs::write(env.root().join("cas/objects/00/notanode.txt"), "x").unwrap_or_else(|_| {
        std::fs::create_dir_all(env.root().join("cas/objects/00")).unwrap();
        std::fs::write(env.root().join("cas/objects/00/notanode.txt"), "x").unwrap();
    });
    let out = env.uwf().args(["cas", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["issues"][0]["kind"], "stray");
    let id = report["issues"][0]["id"].as_str().unwrap().to_string();
    assert!(id.ends_with("notanode.txt"), "{report}");
    assert!(report["issues"][0]["reason"].is_string(), "{report}");

    let v = env.json(&["cas", "verify", "--remove-strays"]);
    assert_eq!(v["issues"], json!([]), "{v}");
    assert_eq!(v["removedStrays"][0]["id"], id.as_str(), "{v}");
    assert!(!env.root().join("cas/objects/00/notanode.txt").exists());
    let v = env.json(&["cas", "verify", "--remove-strays"]);
    assert_eq!(v["removedStrays"], json!([]), "{v}");
}

#[test]
fn a_root_that_is_a_file_is_a_clear_error() {
    let env = Env::new();
    std::fs::write(env.root(), "not a directory").unwrap();
    let err = env.fails(&["cas", "schema", "list"]);
    assert!(err.contains("cannot create directory"), "{err}");
    assert!(err.contains(&env.root().display().to_string()), "{err}");
    assert_eq!(
        std::fs::read_to_string(env.root()).unwrap(),
        "not a directory"
    );
}

/// Runs `uwf` as an unprivileged user when the tests run as root (root
/// ignores permission bits), so the permission tests really test something.
fn as_unprivileged(env: &Env, args: &[&str]) -> std::process::Output {
    let bin = assert_cmd::cargo::cargo_bin("uwf");
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    let mut cmd = if is_root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin);
        c
    } else {
        std::process::Command::new(bin)
    };
    cmd.args(args)
        .env("UNCAGED_WORKFLOW_STORAGE_ROOT", env.root())
        .env("NO_COLOR", "1")
        .env("COLUMNS", "200")
        .output()
        .unwrap()
}

#[cfg(unix)]
#[test]
fn read_only_and_unreadable_roots() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let (t, a, _) = chain(&env);
    // The temp dir itself must be traversable by the unprivileged user.
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let set_tree = |mode_dir: u32, mode_file: u32| {
        fn walk(p: &std::path::Path, d: u32, f: u32) {
            for e in std::fs::read_dir(p).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, d, f);
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(d)).unwrap();
                } else {
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f)).unwrap();
                }
            }
        }
        walk(&env.root(), mode_dir, mode_file);
        std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(mode_dir)).unwrap();
    };

    // Read-only: reads work, writes fail clearly and change nothing.
    set_tree(0o555, 0o444);
    let before = env.snapshot();
    let out = as_unprivileged(&env, &["cas", "get", &a]);
    assert!(
        out.status.success(),
        "read on a read-only root failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_unprivileged(&env, &["cas", "put", &t, r#"{"text":"new"}"#]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot") && err.contains("Permission denied"),
        "{err}"
    );
    assert_eq!(before, env.snapshot());

    // Unreadable: a clear error naming the path.
    set_tree(0o700, 0o600);
    let out = as_unprivileged(&env, &["cas", "get", &a]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Permission denied") && err.contains(&env.root().display().to_string()),
        "{err}"
    );
    set_tree(0o755, 0o644);
}

fn many_writer_processes_at_once(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let t = hash_of(&env.json(&["cas", "schema", "put", NOTE]));
    let children: Vec<_> = (0..8)
        .map(|i| {
            // Half the processes write the same payload, half their own.
            let text = if i % 2 == 0 {
                "shared".to_string()
            } else {
                format!("own-{i}")
            };
            env.uwf_process()
                .args(["cas", "put", &t, &format!(r#"{{"text":"{text}"}}"#)])
                .spawn()
                .unwrap()
        })
        .collect();
    let mut created_shared = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = env.json(&["cas", "get", &hash_of(&v)])["payload"]["text"].clone();
        if text == "shared" && v["created"] == true {
            created_shared += 1;
        }
    }
    assert_eq!(
        created_shared, 1,
        "exactly one writer creates a shared node"
    );
    assert_eq!(env.json(&["cas", "verify"])["issues"], json!([]));
}

fn gc_sweeps_only_what_no_root_reaches(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let (t, a, b) = chain(&env);
    // Nothing references the notes: they are garbage once the grace is zero,
    // the type (a schema) is not.
    let dry = env.json(&["cas", "gc", "--dry-run", "--grace", "0s"]);
    let mut swept: Vec<String> = dry["swept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_string())
        .collect();
    swept.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(swept, want);
    assert_eq!(env.json(&["cas", "has", &a])["exists"], true);
    // With the default grace (1h) fresh nodes are kept.
    assert_eq!(env.json(&["cas", "gc"])["swept"], json!([]));
    let done = env.json(&["cas", "gc", "--grace", "0s"]);
    assert_eq!(done["swept"].as_array().unwrap().len(), 2);
    assert_eq!(env.json(&["cas", "has", &b])["exists"], false);
    assert_eq!(env.json(&["cas", "has", &t])["exists"], true);
    assert_eq!(env.json(&["cas", "verify"])["issues"], json!([]));
    // A corrupt thread head stops gc before anything is removed: which
    // nodes are reachable is unknown.
    let expect = match &env.db {
        None => {
            std::fs::write(
                env.root().join("threads.yaml"),
                "01J7K9M2XNPQR5VWBCDF8G3H4T: [oops\n",
            )
            .unwrap();
            "threads.yaml"
        }
        Some(db) => {
            db.client()
                .execute(
                    "INSERT INTO uwf_threads (thread, head) VALUES ('01J7K9M2XNPQR5VWBCDF8G3H4T', 'oops')",
                    &[],
                )
                .unwrap();
            "uwf_threads"
        }
    };
    let before = env.snapshot();
    let err = env.fails(&["cas", "gc", "--grace", "0s"]);
    assert!(err.contains(expect), "{err}");
    assert_eq!(before, env.snapshot());
}

/// `uwf cas gc --grace 0s` in a loop beside many writers (starts, agent
/// steps, a person's answers, forks and unreferenced puts, each a real
/// `uwf` process) never leaves a root that points at a removed node: a
/// writer whose nodes were swept fails with the "garbage collection removed
/// it" error and nothing changes, and afterwards every chain of every
/// active and archived thread walks to its end and the store verifies
/// (docs/state.md, "Garbage collection").
fn gc_beside_running_work_never_leaves_a_broken_root(backend: Backend) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const WRITERS: usize = 3;
    const ROUNDS: usize = 10;
    let Some(env) = Env::on(backend) else {
        return;
    };
    let scenario = env.file(
        "scenario.yaml",
        "roles:\n  drafter:\n    - output: { notes: \"v1.2\" }\n  publisher:\n    - output: { url: \"https://example.com/v1.2\" }\n",
    );
    env.set_config(&format!(
        "agents:\n  mock: {{ command: {mock:?}, args: [{scenario:?}] }}\n  me: {{ human: true }}\n\
         defaultAgent: mock\nagentOverrides:\n  approve-release: {{ approver: me }}\n",
        mock = common::mock_bin().display().to_string(),
        scenario = scenario.display().to_string(),
    ));
    env.json(&["workflow", "put", &common::example("approve-release.yaml")]);
    let note = env.json(&["cas", "schema", "put", NOTE])["hash"]
        .as_str()
        .unwrap()
        .to_string();

    let stop = AtomicBool::new(false);
    let (gone, swept, collections) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    // Runs `uwf args`: Some(stdout JSON) on `ok` exit statuses, None when a
    // collection removed the writer's nodes (then nothing may be printed);
    // anything else fails the test.
    let run = |args: &[&str], ok: &[i32]| -> Option<Value> {
        let out = env.uwf().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code().unwrap_or(-1);
        if ok.contains(&code) {
            return Some(serde_json::from_slice(&out.stdout).unwrap_or(Value::Null));
        }
        assert!(
            code == 1
                && stderr.contains("a garbage collection removed it")
                && out.stdout.is_empty(),
            "uwf {args:?} exited {code}:\n{stderr}"
        );
        gone.fetch_add(1, Ordering::Relaxed);
        None
    };
    // A start, step, answer or fork is tried again when a collection took
    // its nodes; the thread must still be where it was.
    let retry = |args: &[&str], ok: &[i32]| -> Value {
        for _ in 0..20 {
            if let Some(v) = run(args, ok) {
                return v;
            }
        }
        panic!("uwf {args:?} lost to garbage collection 20 times in a row")
    };
    /// Stops the collector however the writers end (a failed assertion
    /// included), so that the scope can end.
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let r = env.json(&["cas", "gc", "--grace", "0s"]);
                swept.fetch_add(r["swept"].as_array().unwrap().len(), Ordering::Relaxed);
                collections.fetch_add(1, Ordering::Relaxed);
            }
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (run, retry, note) = (&run, &retry, &note);
                s.spawn(move || {
                    for i in 0..ROUNDS {
                        // Garbage for every collection to sweep.
                        let text = format!(r#"{{"text": "scratch {w}/{i}"}}"#);
                        run(&["cas", "put", note, &text], &[0]);
                        let task = format!("Release {w}.{i}");
                        let start = ["thread", "start", "approve-release", "-p", &task];
                        let started = retry(&start, &[0]);
                        let id = started["thread"].as_str().unwrap().to_string();
                        let drafted = retry(&["thread", "step", &id], &[0]);
                        let drafted = drafted["head"].as_str().unwrap().to_string();
                        let waiting = retry(&["thread", "step", &id], &[4]);
                        assert_eq!(waiting["waiting"]["role"], "approver", "{waiting}");
                        let answer = [
                            "thread",
                            "answer",
                            &id,
                            "--as",
                            "ci",
                            "--output",
                            r#"{"approved": true}"#,
                        ];
                        retry(&answer, &[0]);
                        let fork = retry(&["thread", "fork", &drafted], &[0]);
                        assert_eq!(fork["forkedFrom"]["step"], drafted.as_str(), "{fork}");
                        let done = retry(&["thread", "step", &id], &[0]);
                        assert_eq!(done["done"], true, "{done}");
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    eprintln!(
        "{} collections swept {} nodes; {} writes lost to them and were retried",
        collections.load(Ordering::Relaxed),
        swept.load(Ordering::Relaxed),
        gone.load(Ordering::Relaxed)
    );
    assert!(
        swept.load(Ordering::Relaxed) > 0,
        "no collection removed anything: the race was not exercised"
    );
    // Every root reaches only nodes that are there.
    let history: Vec<String> = env
        .history()
        .iter()
        .map(|e| e["head"].as_str().unwrap().to_string())
        .collect();
    let heads: Vec<String> = env
        .heads()
        .into_values()
        .map(|h| h.trim().to_string())
        .collect();
    // Every thread ended; every fork waits at the approver.
    assert_eq!(history.len(), WRITERS * ROUNDS, "{history:?}");
    assert_eq!(heads.len(), WRITERS * ROUNDS, "{heads:?}");
    for head in history.iter().chain(&heads) {
        let walk = env.json(&["cas", "walk", head]);
        let missing: Vec<&Value> = walk
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["missing"] == true)
            .collect();
        assert!(
            missing.is_empty(),
            "{head} reaches removed nodes: {missing:?}"
        );
    }
    for (thread, _) in env.heads() {
        env.json(&["thread", "show", &thread]);
    }
    env.json(&["thread", "list"]);
    assert_eq!(env.json(&["cas", "verify"])["issues"], json!([]));
}

/// Makes node `hash` look stored two hours ago (first store and any store
/// since), as an old orphan would be.
fn age(env: &Env, hash: &str) {
    const TWO_HOURS_MS: i64 = 2 * 3600 * 1000;
    match &env.db {
        None => {
            let past = std::time::SystemTime::now()
                - std::time::Duration::from_millis(TWO_HOURS_MS as u64);
            std::fs::File::options()
                .write(true)
                .open(env.object_path(hash))
                .unwrap()
                .set_modified(past)
                .unwrap();
        }
        Some(db) => {
            let n = db
                .client()
                .execute(
                    "UPDATE uwf_nodes SET stored_at = stored_at - $2, fresh_at = NULL WHERE hash = $1",
                    &[&hash, &TWO_HOURS_MS],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
    }
}

/// An old orphan stored again is fresh for gc: its writer is about to
/// reference it, so the grace period protects it like a new node, and the
/// node keeps its first timestamp (docs/state.md, "Garbage collection").
fn storing_an_old_orphan_again_protects_it_for_the_grace_period(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let (t, a, b) = chain(&env);
    age(&env, &a);
    age(&env, &b);
    let first = env.json(&["cas", "get", &a, "--timestamp"])["timestamp"].clone();
    // Both are old orphans: the default grace (1h) would sweep them.
    let dry = env.json(&["cas", "gc", "--dry-run"]);
    assert_eq!(dry["swept"].as_array().unwrap().len(), 2, "{dry}");
    // An agent's output that happens to equal `a`.
    let again = env.json(&["cas", "put", &t, r#"{"text":"first","prev":null}"#]);
    assert_eq!(again["hash"], a.as_str());
    assert_eq!(again["created"], false);
    let done = env.json(&["cas", "gc"]);
    assert_eq!(done["swept"], json!([b]), "{done}");
    assert_eq!(done["recent"], 1, "{done}");
    assert_eq!(env.json(&["cas", "has", &a])["exists"], true);
    assert_eq!(
        env.json(&["cas", "get", &a, "--timestamp"])["timestamp"],
        first,
        "storing again keeps the first timestamp"
    );
}
