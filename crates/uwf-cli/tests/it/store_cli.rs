//! `uwf store …` and choosing the store, on filesystem stores (the
//! PostgreSQL side is in postgres_cli.rs): which store commands use and
//! why, bad settings, and copying one directory store into another.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Env, example, mock_agent};

#[test]
fn the_store_is_the_root_unless_something_names_another() {
    let env = Env::new();
    let shown = env.json(&["store", "show"]);
    assert_eq!(shown["kind"], "filesystem");
    assert_eq!(shown["from"], "the storage root");
    assert_eq!(shown["store"], env.root().display().to_string());

    // store: in config.yaml is relative to the root.
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(env.root().join("config.yaml"), "store: elsewhere\n").unwrap();
    let shown = env.json(&["store", "show"]);
    assert_eq!(shown["from"], "`store:` in config.yaml");
    assert_eq!(
        shown["store"],
        env.root().join("elsewhere").display().to_string()
    );
    // UWF_STORE wins over it, --store over both.
    let other = env.dir.path().join("other");
    let out = env
        .uwf()
        .env("UWF_STORE", &other)
        .args(["store", "show"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["from"], "UWF_STORE");
    let flag = env.dir.path().join("flag");
    let v = env.json(&["--store", flag.to_str().unwrap(), "store", "show"]);
    assert_eq!(v["from"], "--store");
}

#[test]
fn bad_store_settings_are_clear_errors() {
    let env = Env::new();
    let err = env.fails(&["--store", "mysql://u:hunter2@h/db", "thread", "list"]);
    assert!(err.contains("uwf::store::unknown_scheme"), "{err}");
    assert!(err.contains("mysql://u:***@h/db"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    let err = env.fails(&["--store", " ", "thread", "list"]);
    assert!(err.contains("uwf::store::empty"), "{err}");
    let root = env.root().display().to_string();
    let err = env.fails(&["store", "copy", "--from", &root, "--to", &root]);
    assert!(err.contains("uwf::store::same"), "{err}");
    // A config.yaml that is wrong elsewhere does not stop commands that do
    // not need that part; one that is not YAML and seems to name a store does.
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(env.root().join("config.yaml"), "store: [unclosed\n").unwrap();
    let err = env.fails(&["thread", "list"]);
    assert!(err.contains("config.yaml"), "{err}");
}

#[test]
fn a_directory_store_is_copied_into_another_and_again_copies_nothing() {
    let env = Env::new();
    let agent = mock_agent(std::path::Path::new(&example("solve-issue.mock.yaml")));
    let done = env.json(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "a task",
        "--agent",
        &agent,
    ]);
    let thread = done["thread"].as_str().unwrap().to_string();
    let open = env.json(&["thread", "start", "solve-issue", "-p", "another"]);

    let to = env.dir.path().join("copy");
    let (from, to_s) = (env.root().display().to_string(), to.display().to_string());
    let copied = env.json(&["store", "copy", "--from", &from, "--to", &to_s]);
    assert_eq!(copied["conflicts"], serde_json::json!([]), "{copied}");
    assert_eq!(copied["historyAdded"], 1);
    assert_eq!(copied["threadsAdded"], 1);
    assert_eq!(copied["registryAdded"], 1);

    let copy = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["--root", to_s.as_str()];
        all.extend_from_slice(args);
        env.json(&all)
    };
    // Step timings are this machine's logs, not part of the store.
    let without_timings = |mut v: serde_json::Value| {
        for s in v["steps"].as_array_mut().unwrap() {
            s.as_object_mut().unwrap().remove("durationMs");
        }
        v
    };
    assert_eq!(
        without_timings(copy(&["thread", "steps", &thread])),
        without_timings(env.json(&["thread", "steps", &thread]))
    );
    let open = open["thread"].as_str().unwrap();
    assert_eq!(
        copy(&["thread", "show", open])["head"],
        env.json(&["thread", "show", open])["head"]
    );
    assert_eq!(copy(&["cas", "verify"])["issues"], serde_json::json!([]));

    let again = env.json(&["store", "copy", "--from", &from, "--to", &to_s]);
    assert_eq!(again["nodesCopied"], 0, "{again}");
    assert_eq!(again["historyAdded"], 0, "{again}");
    assert_eq!(again["threadsSame"], 1, "{again}");
}
