//! `examples/gemini_agent.rs` (the third-party CLI wrapper of
//! docs/writing-agents.md) against a stand-in `gemini` script that answers
//! the way the Gemini CLI's headless JSON mode does.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use uwf_agent_kit::testing::Fixture;
use uwf_cas::Hash;

/// The example binary, built by cargo next to this test (`cargo test`
/// builds the examples); built on demand otherwise.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("examples/gemini_agent");
    if !bin.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "uwf-agent-kit", "--example", "gemini_agent"])
            .status()
            .unwrap();
        assert!(status.success());
    }
    bin
}

/// A stand-in `gemini`: records its arguments, prints `stdout`, exits `code`.
fn fake_gemini(dir: &Path, stdout: &str, code: i32) -> PathBuf {
    let path = dir.join("gemini");
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\necho 'gemini: working' >&2\ncat <<'JSON'\n{stdout}\nJSON\nexit {code}\n",
        dir.join("args").display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn run(fx: &Fixture, gemini: &Path, thread: &str) -> Output {
    Command::new(example())
        .args([thread, "planner"])
        .env("UNCAGED_WORKFLOW_STORAGE_ROOT", fx.root())
        .env("GEMINI_BIN", gemini)
        .env("UWF_GEMINI_MODEL", "gemini-test")
        .env_remove("UWF_GEMINI_ARGS")
        .output()
        .unwrap()
}

#[test]
fn a_frontmatter_response_becomes_a_step_with_a_transcript() {
    let fx = Fixture::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let response = serde_json::json!({
        "response": "---\nplan: Fix it\nsteps: [one, two]\n---\n\nThe plan.",
        "stats": { "models": { "gemini-test": { "tokens": { "total": 42 } } } }
    });
    let gemini = fake_gemini(dir.path(), &response.to_string(), 0);
    let (thread, _) = fx.start_thread("Fix the login bug").unwrap();
    let out = run(&fx, &gemini, &thread.to_string());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("gemini: working"),
        "stderr is passed through: {stderr}"
    );
    assert!(stderr.contains("[gemini] answered in"), "{stderr}");

    let hash: Hash = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let step = fx.cas().get(hash).unwrap().payload;
    let output = fx
        .cas()
        .get(step["output"].as_str().unwrap().parse().unwrap())
        .unwrap();
    assert_eq!(output.payload["steps"], serde_json::json!(["one", "two"]));
    let detail_hash: Hash = step["detail"].as_str().unwrap().parse().unwrap();
    let detail = fx.cas().get(detail_hash).unwrap();
    assert_eq!(
        fx.cas().schema(detail.type_hash).unwrap()["title"],
        "gemini-detail"
    );
    assert_eq!(detail.payload["model"], "gemini-test");
    assert_eq!(
        detail.payload["stats"]["models"]["gemini-test"]["tokens"]["total"],
        42
    );
    assert_eq!(fx.cas().refs(detail_hash).unwrap().len(), 2);

    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    assert!(args.starts_with("-p\n"), "{args}");
    assert!(
        args.contains("Fix the login bug"),
        "the prompt is passed: {args}"
    );
    assert!(
        args.contains("--output-format\njson\n--yolo\n--model\ngemini-test\n"),
        "{args}"
    );
}

#[test]
fn an_error_leaves_the_thread_unchanged() {
    let fx = Fixture::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gemini = fake_gemini(dir.path(), r#"{"error": {"message": "quota exceeded"}}"#, 1);
    let (thread, start) = fx.start_thread("Fix the login bug").unwrap();
    let out = run(&fx, &gemini, &thread.to_string());
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gemini failed (exit status 1)"), "{stderr}");
    assert!(stderr.contains("quota exceeded"), "{stderr}");
    assert_eq!(fx.head(thread).unwrap(), Some(start));
    assert!(
        fx.cas()
            .list_by_type(fx.cas().types().step_node)
            .unwrap()
            .is_empty()
    );

    let out = run(&fx, &dir.path().join("missing-gemini"), &thread.to_string());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gemini is not installed"), "{stderr}");
    assert!(stderr.contains("missing-gemini"), "{stderr}");
    assert!(stderr.contains("from GEMINI_BIN"), "{stderr}");
}

#[test]
fn the_guide_shows_the_example_as_it_is() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("examples/gemini_agent.rs")).unwrap();
    let code = &example[example.find("use std::time::Duration;").unwrap()..];
    let guide = std::fs::read_to_string(root.join("../../docs/writing-agents.md")).unwrap();
    assert!(
        guide.contains(&format!("```rust\n{code}```")),
        "docs/writing-agents.md must show examples/gemini_agent.rs (from its first `use`) verbatim"
    );
}
