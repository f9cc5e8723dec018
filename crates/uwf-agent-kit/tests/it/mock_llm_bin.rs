//! The `uwf-mock-llm` binary: scripted replies from a YAML file, a port
//! file, a request log.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use uwf_agent_kit::llm::{LlmClient, Message};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serves_a_script_and_logs_requests() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - content: first\n  - json: { approved: true }\n  - status: 401\n    error: nope\nexhausted: { content: the end }\n",
    )
    .unwrap();
    let log = dir.path().join("log.jsonl");
    let port_file = dir.path().join("port");
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_uwf-mock-llm"))
            .args(["--port", "0", "--script"])
            .arg(&script)
            .arg("--log")
            .arg(&log)
            .arg("--port-file")
            .arg(&port_file)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("uwf-mock-llm listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    let port = std::fs::read_to_string(&port_file).unwrap();
    assert_eq!(url, format!("http://127.0.0.1:{port}/v1"));

    let c = LlmClient::new(&url, Some("sk-binary-test-key".into()), "m");
    let say = |c: &LlmClient| c.chat(&[Message::user("x")], false);
    assert_eq!(say(&c).unwrap().content, "first");
    assert_eq!(say(&c).unwrap().content, r#"{"approved":true}"#);
    let err = say(&c).unwrap_err();
    assert!(err.to_string().contains("HTTP 401"), "{err}");
    assert_eq!(say(&c).unwrap().content, "the end");

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["path"], "/v1/chat/completions");
    assert_eq!(lines[2]["reply_status"], 401);
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("sk-binary-test-key")
    );
}

#[test]
fn bad_scripts_and_arguments_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bad.yaml");
    std::fs::write(&script, "- status: 42\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_uwf-mock-llm"))
        .arg("--script")
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("turn 0"));
    let out = Command::new(env!("CARGO_BIN_EXE_uwf-mock-llm"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_uwf-mock-llm"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--script FILE"));
}
