//! `uwf thread view` and `uwf workflow graph --thread` with the real
//! binaries: a thread of examples/solve-issue.yaml run by uwf-mock, one of
//! whose outputs is a script payload.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, example, mock_agent};
use serde_json::Value;

/// What a malicious agent might answer.
pub const PAYLOAD: &str =
    r#"<script>window.__pwned = 1; document.title = "PWNED"</script><img src=x onerror="window.__pwned = 2">"#;

/// examples/solve-issue.mock.yaml with the first developer summary
/// replaced by [`PAYLOAD`]; runs the thread to its end and returns its id.
pub fn payload_thread(env: &Env) -> String {
    let scenario = std::fs::read_to_string(example("solve-issue.mock.yaml")).unwrap();
    let original = "summary: \"Treat an expired session as logged out instead of redirecting again.\"";
    assert!(scenario.contains(original), "the example scenario changed");
    let quoted = serde_json::to_string(PAYLOAD).unwrap();
    let scenario = scenario.replace(original, &format!("summary: {quoted}"));
    let path = env.file("payload.mock.yaml", &scenario);
    let out = env.json(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "Fix the login redirect loop",
        "--agent",
        &mock_agent(&path),
    ]);
    assert_eq!(out["done"], true);
    out["thread"].as_str().unwrap().to_string()
}

#[test]
fn view_writes_one_self_contained_page() {
    let env = Env::new();
    let id = payload_thread(&env);
    let file = env.dir.path().join("out.html");
    let out = env.json(&["thread", "view", &id, "--html", file.to_str().unwrap()]);
    assert_eq!(out["thread"], id.as_str());
    assert_eq!(out["html"], file.to_str().unwrap());
    let page = std::fs::read_to_string(&file).unwrap();
    assert_eq!(out["bytes"], page.len());
    assert!(page.starts_with("<!DOCTYPE html>"));
    // The payload is text.
    assert!(!page.contains("<script>window.__pwned"));
    assert!(!page.contains("<img"));
    assert!(page.contains("&lt;script&gt;window.__pwned = 1;"));
    assert_eq!(page.matches("<script").count(), 1, "only the page's own script");
    for bad in [" href=", "@import", "url(http"] {
        assert!(!page.contains(bad), "refers to something outside: {bad}");
    }
    // Every step, with why it ran.
    assert_eq!(page.matches(r#"class="card step""#).count(), 5);
    assert!(page.contains("From reviewer: condition notApproved held (#1)"));
    assert!(page.contains(&format!("<dd>{id}</dd>")));
}

#[test]
fn view_to_stdout_and_to_the_temp_dir() {
    let env = Env::new();
    let id = payload_thread(&env);
    let page = env.text(&["thread", "view", &id, "--html", "-"]);
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));

    // Without --html: uwf-thread-<id>.html in the temp directory.
    let tmp = env.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = env
        .uwf()
        .env("TMPDIR", &tmp)
        .args(["thread", "view", &id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = tmp.join(format!("uwf-thread-{id}.html"));
    assert_eq!(v["html"], want.to_str().unwrap());
    assert_eq!(std::fs::read_to_string(&want).unwrap(), page);
}

#[test]
fn view_failures_say_why_and_print_nothing() {
    let env = Env::new();
    let id = payload_thread(&env);
    let err = env.fails(&["thread", "view", "01J7K9M2XNPQR5VWBCDF8G3H4T"]);
    assert!(err.contains("no thread 01J7K9M2XNPQR5VWBCDF8G3H4T"), "{err}");
    let missing = env.dir.path().join("no/such/dir/out.html");
    let err = env.fails(&["thread", "view", &id, "--html", missing.to_str().unwrap()]);
    assert!(err.contains("uwf::view::write") && err.contains("cannot write"), "{err}");
    assert!(!missing.exists());
    let err = env.fails(&["thread", "view", "not-an-id"]);
    assert!(!err.is_empty());
}

#[test]
fn graph_overlays_the_threads_path() {
    let env = Env::new();
    let id = payload_thread(&env);
    let mermaid = env.text(&["workflow", "graph", "--thread", &id]);
    assert!(mermaid.starts_with("flowchart TD\n"), "{mermaid}");
    assert!(mermaid.contains(r#"["developer ×2"]"#), "{mermaid}");
    assert!(mermaid.contains(r#"|"notApproved ×1"|"#), "{mermaid}");
    assert!(mermaid.contains("classDef visited"), "{mermaid}");
    assert!(mermaid.contains("linkStyle "), "{mermaid}");

    let dot = env.text(&["workflow", "graph", "--thread", &id, "--format", "dot"]);
    assert!(dot.contains("\"reviewer\" [label=\"reviewer\\n×2\""), "{dot}");
    assert!(dot.contains("penwidth=3"), "{dot}");

    let v = env.json(&["workflow", "graph", "--thread", &id, "--format", "json"]);
    let path: Vec<(String, String)> = v["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["from"].as_str().unwrap().into(), h["to"].as_str().unwrap().into()))
        .collect();
    let want = [
        ("$START", "planner"),
        ("planner", "developer"),
        ("developer", "reviewer"),
        ("reviewer", "developer"),
        ("developer", "reviewer"),
        ("reviewer", "$END"),
    ];
    assert_eq!(
        path,
        want.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    );
    assert_eq!(v["visits"]["developer"], 2);

    // The plain diagram is unchanged, and the two ways to name a workflow conflict.
    let plain = env.text(&["workflow", "graph", &example("solve-issue.yaml")]);
    assert!(!plain.contains("×"));
    let out = env.output(&["workflow", "graph", &example("solve-issue.yaml"), "--thread", &id]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    env.fails(&["workflow", "graph", "--thread", "01J7K9M2XNPQR5VWBCDF8G3H4T"]);
}
