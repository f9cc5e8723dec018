//! The page of a real thread of examples/solve-issue.yaml built in memory:
//! the SVG against its snapshot (`insta`, tests/snapshots/), the page's structure, its escaping and
//! its self-containment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};
use uwf_cas::{Cas, Hash, MemStore};
use uwf_moderator::definition;
use uwf_protocol::{StartNodePayload, StepNodePayload, StepRecord};
use uwf_view::report::{NoState, collect};

/// What a malicious agent might answer.
const PAYLOAD: &str =
    r#"<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">"#;

/// The thread planner → developer → reviewer (rejects) → developer →
/// reviewer (approves); the first developer answers with [`PAYLOAD`] and
/// a Claude-style transcript.
fn thread() -> (Cas<MemStore>, Hash) {
    let yaml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/solve-issue.yaml"),
    )
    .unwrap();
    let cas = Cas::new(MemStore::new()).unwrap();
    let wf = definition::register(
        &cas,
        &definition::parse_yaml(&yaml, "solve-issue.yaml").unwrap(),
    )
    .unwrap();
    let start = cas
        .put_value(
            cas.types().start_node,
            &StartNodePayload {
                workflow: wf.hash,
                prompt: "Fix the login redirect loop".into(),
                parent_state: None,
            },
        )
        .unwrap()
        .hash;
    let answer = cas
        .put_schema(json!({"title": "agent-answer", "type": "object"}))
        .unwrap()
        .hash;
    let turn_type = cas
        .put_schema(json!({"title": "claude-turn", "type": "object"}))
        .unwrap()
        .hash;
    let detail_type = cas
        .put_schema(
            json!({"title": "claude-detail", "type": "object", "properties": {
            "turns": {"type": "array", "items": {"type": "string", "format": "cas_ref"}}}}),
        )
        .unwrap()
        .hash;
    let turns: Vec<String> = [
        json!({"index": 0, "role": "user", "text": "Implement the plan.", "toolCalls": [], "toolResults": []}),
        json!({"index": 1, "role": "assistant", "text": "Reading the middleware.", "thinking": "The session check is wrong.",
            "toolCalls": [{"id": "t1", "name": "Bash", "input": {"command": "grep -n session src/auth/middleware.rs"}}], "toolResults": []}),
        json!({"index": 2, "role": "user", "text": "", "toolCalls": [],
            "toolResults": [{"toolUseId": "t1", "content": "12: if session.expired() { redirect() }", "isError": false}]}),
    ]
    .into_iter()
    .map(|t| cas.put(turn_type, t).unwrap().hash.to_string())
    .collect();
    let transcript = cas
        .put(
            detail_type,
            json!({"sessionId": "s-1", "model": "claude-x", "turnCount": 3, "turns": turns}),
        )
        .unwrap()
        .hash;
    let steps: [(&str, Value, Option<Hash>); 5] = [
        (
            "planner",
            json!({"plan": "Fix the session check.", "steps": ["fix", "test"]}),
            None,
        ),
        (
            "developer",
            json!({"filesChanged": ["src/auth/middleware.rs"], "summary": PAYLOAD}),
            Some(transcript),
        ),
        (
            "reviewer",
            json!({"approved": false, "comments": "Add a regression test."}),
            None,
        ),
        (
            "developer",
            json!({"filesChanged": ["tests/login.rs"], "summary": "Added the test."}),
            None,
        ),
        (
            "reviewer",
            json!({"approved": true, "comments": "LGTM"}),
            None,
        ),
    ];
    let mut prev: Option<Hash> = None;
    for (role, output, detail) in steps {
        let schema: Hash = wf.payload.roles[role].output_schema;
        let out = cas.put(schema, output).unwrap().hash;
        let detail = detail.unwrap_or_else(|| {
            cas.put(answer, json!({"text": format!("{role} answered")}))
                .unwrap()
                .hash
        });
        let step = StepNodePayload {
            start,
            prev,
            record: StepRecord {
                role: role.into(),
                output: out,
                detail,
                agent: "uwf-mock scenario.yaml".into(),
            },
            child_thread: None,
        };
        prev = Some(cas.put_value(cas.types().step_node, &step).unwrap().hash);
    }
    (cas, prev.unwrap())
}

#[test]
fn svg_matches_its_snapshot() {
    let (cas, head) = thread();
    let report = collect(
        &cas,
        &NoState,
        Some(uwf_protocol::fixtures::thread("01TEST")),
        head,
    )
    .unwrap();
    let svg = uwf_view::svg::render(
        &report.view.workflow,
        &report.trace,
        &uwf_view::svg::Marks::default(),
        "g",
    );
    insta::assert_snapshot!("solve_issue_svg", svg);
}

#[test]
fn the_path_is_traced_with_reasons() {
    let (cas, head) = thread();
    let report = collect(&cas, &NoState, None, head).unwrap();
    let hops: Vec<(&str, &str, Option<&str>)> = report
        .trace
        .hops
        .iter()
        .map(|h| (h.from.as_str(), h.to.as_str(), h.condition.as_deref()))
        .collect();
    assert_eq!(
        hops,
        vec![
            ("$START", "planner", None),
            ("planner", "developer", None),
            ("developer", "reviewer", None),
            ("reviewer", "developer", Some("notApproved")),
            ("developer", "reviewer", None),
        ]
    );
    assert!(report.trace.hops.iter().all(|h| h.decided));
    assert!(report.trace.ended());
    let overlay = report.trace.overlay();
    assert_eq!(overlay.visits["developer"], 2);
    assert_eq!(
        overlay.taken[&("reviewer".to_string(), 1)],
        1,
        "the else to $END"
    );
}

#[test]
fn page_structure_escaping_and_self_containment() {
    let (cas, head) = thread();
    let report = collect(
        &cas,
        &NoState,
        Some(uwf_protocol::fixtures::thread("01TEST")),
        head,
    )
    .unwrap();
    let page = uwf_view::html::page(&report);
    // To look at it: UWF_VIEW_PAGE_DIR=/some/dir cargo test -p uwf-view --test render
    if let Some(dir) = std::env::var_os("UWF_VIEW_PAGE_DIR") {
        std::fs::write(Path::new(&dir).join("solve-issue.html"), &page).unwrap();
    }

    // The payload is text, never markup.
    assert!(
        !page.contains("<script>window.__pwned"),
        "payload unescaped"
    );
    assert!(!page.contains("<img"), "payload unescaped");
    assert!(page.contains("&lt;script&gt;window.__pwned = 1&lt;/script&gt;&lt;img src=x onerror=&quot;window.__pwned = 2&quot;&gt;"));
    // Exactly one script: the page's own, allowed by hash.
    assert_eq!(page.matches("<script").count(), 1);
    assert!(page.contains("script-src 'sha256-"));
    assert!(page.contains("default-src 'none'"));
    // Nothing is fetched: no src/href attributes, no CSS urls but markers.
    for bad in [" src=", " href=", "@import", "url(http", "url(//"] {
        assert!(
            !page.replace("src=x", "").contains(bad),
            "the page refers to something outside: {bad}"
        );
    }

    // The story: every step, why, the transcript as a conversation.
    assert_eq!(page.matches(r#"class="card step""#).count(), 5);
    assert!(page.contains("From reviewer: condition notApproved held (#1)"));
    assert!(page.contains("conversation: 3 turns, 1 tool call"));
    assert!(page.contains(
        r#"<span class="tool">Bash</span><pre>grep -n session src/auth/middleware.rs</pre>"#
    ));
    assert!(page.contains("12: if session.expired() { redirect() }"));
    assert!(page.contains(r#"<span class="state done">done</span>"#));
    assert!(page.contains(r#"class="card end""#));
    // The graph with the path.
    assert!(page.contains(r#"<g class="node visited" data-role="developer""#));
    assert!(page.contains(r#"class="edge taken back" data-from="reviewer" data-to="developer""#));
}

#[test]
fn a_thread_without_steps_shows_what_comes_next() {
    let (cas, head) = thread();
    let view = uwf_moderator::thread::load(&cas, head).unwrap();
    let report = collect(
        &cas,
        &NoState,
        Some(uwf_protocol::fixtures::thread("01NEW")),
        view.start_hash,
    )
    .unwrap();
    let page = uwf_view::html::page(&report);
    assert_eq!(page.matches(r#"class="card step""#).count(), 0);
    assert!(page.contains(r#"class="card next" data-role="planner""#));
    assert!(page.contains(r#"<g class="node next" data-role="planner""#));
    assert!(page.contains("next: planner"));
}

/// Every example workflow lays out cleanly: no node overlaps another, every
/// edge is routed from its source to its target, no label covers a node
/// or another label.
#[test]
fn every_example_workflow_lays_out_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if !name.ends_with(".yaml") || name.ends_with(".mock.yaml") {
            continue;
        }
        let yaml = std::fs::read_to_string(&path).unwrap();
        let cas = Cas::new(MemStore::new()).unwrap();
        let wf =
            definition::register(&cas, &definition::parse_yaml(&yaml, &name).unwrap()).unwrap();
        let (names, edges, l) =
            uwf_view::svg::geometry(&wf.payload, &uwf_view::trace::Trace::default());
        assert_eq!(l.nodes.len(), names.len());
        for (i, a) in l.nodes.iter().enumerate() {
            for b in &l.nodes[i + 1..] {
                assert!(!a.overlaps(b), "{name}: nodes overlap");
            }
        }
        let labels: Vec<_> = l.routes.iter().filter_map(|r| r.label).collect();
        for (i, a) in labels.iter().enumerate() {
            assert!(
                !l.nodes.iter().any(|n| n.overlaps(a)),
                "{name}: a label covers a node"
            );
            for b in &labels[i + 1..] {
                assert!(!a.overlaps(b), "{name}: labels overlap: {a:?} {b:?}");
            }
        }
        assert_eq!(l.routes.len(), edges.len(), "{name}");
        for (e, r) in edges.iter().zip(&l.routes) {
            assert!(
                r.points.len() >= 2,
                "{name}: {} -> {} not drawn",
                e.from,
                e.to
            );
            if !e.label.is_empty() {
                assert!(
                    r.label.is_some(),
                    "{name}: label of {} -> {} not placed",
                    e.from,
                    e.to
                );
            }
        }
        seen += 1;
    }
    assert!(seen >= 5, "only {seen} example workflows found");
}
