use serde_json::{Value, json};
use uwf_cas::{Cas, Hash, MemStore, Node, Store};
use uwf_protocol::{StartNodePayload, StepNodePayload, StepRecord};

use super::*;
use crate::definition::{parse_yaml, register};

const YAML: &str = r#"
name: review
roles:
  writer:
    systemPrompt: Write.
    outputSchema: { type: object }
  reviewer:
    systemPrompt: Review.
    outputSchema: { type: object, properties: { approved: { type: boolean } }, required: [approved] }
conditions:
  rejected: "steps[-1].output.approved = false"
graph:
  $START: [{ role: writer, condition: null }]
  writer: [{ role: reviewer, condition: null }]
  reviewer:
    - { role: writer, condition: rejected, prompt: "Round {{ $string($count($keys($))) }}: {{comments}}" }
    - { role: $END, condition: null }
"#;

struct Fixture {
    cas: Cas<MemStore>,
    workflow: Hash,
    start: Hash,
    detail: Hash,
}

fn h<T>(r: Result<T, impl std::fmt::Display>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn fixture() -> Fixture {
    let cas = h(Cas::new(MemStore::new()));
    let def = h(parse_yaml(YAML, "review.yaml"));
    let workflow = h(register(&cas, &def)).hash;
    let start = put_start(&cas, workflow, "Write a poem");
    let text = h(cas.put_schema(json!({"title": "text", "type": "string"}))).hash;
    let detail = h(cas.put(text, json!("raw transcript"))).hash;
    Fixture {
        cas,
        workflow,
        start,
        detail,
    }
}

fn put_start(cas: &Cas<MemStore>, workflow: Hash, prompt: &str) -> Hash {
    let p = StartNodePayload {
        workflow,
        prompt: prompt.into(),
        parent_state: None,
    };
    h(cas.put_value(cas.types().start_node, &p)).hash
}

impl Fixture {
    fn step(&self, start: Hash, prev: Option<Hash>, role: &str, output: Value) -> Hash {
        let wf = h(load(&self.cas, start)).workflow;
        let schema: Hash = wf.roles[role].output_schema;
        let out = h(self.cas.put(schema, output)).hash;
        let p = StepNodePayload {
            start,
            prev,
            record: StepRecord {
                role: role.into(),
                output: out,
                detail: self.detail,
                agent: "uwf-test".into(),
            },
            child_thread: None,
        };
        h(self.cas.put_value(self.cas.types().step_node, &p)).hash
    }
}

#[test]
fn start_only_thread() {
    let f = fixture();
    let v = h(load(&f.cas, f.start));
    assert_eq!(
        (v.head, v.start_hash, v.workflow_hash),
        (f.start, f.start, f.workflow)
    );
    assert_eq!(v.start.prompt, "Write a poem");
    assert!(v.steps.is_empty() && v.last_step().is_none());
    assert!(v.start_timestamp > 0);
    assert_eq!(v.workflow.name, "review");
    let d = h(v.decide());
    assert_eq!((d.from.as_str(), d.next.as_str()), ("$START", "writer"));
}

#[test]
fn chain_is_loaded_oldest_first() {
    let f = fixture();
    let s1 = f.step(f.start, None, "writer", json!({"text": "v1"}));
    let s2 = f.step(
        f.start,
        Some(s1),
        "reviewer",
        json!({"approved": false, "comments": "rhyme"}),
    );
    let v = h(load(&f.cas, s2));
    assert_eq!(v.head, s2);
    assert_eq!(v.start_hash, f.start);
    assert_eq!(v.steps.iter().map(|s| s.hash).collect::<Vec<_>>(), [s1, s2]);
    assert_eq!(v.steps[0].output, json!({"text": "v1"}));
    assert_eq!(
        v.last_step().map(|s| s.payload.record.role.as_str()),
        Some("reviewer")
    );

    let ctx = v.context();
    assert_eq!(ctx.start, v.start);
    assert_eq!(ctx.steps.len(), 2);
    assert_eq!(ctx.steps[1].output["comments"], "rhyme");
    assert_eq!(ctx.steps[1].detail, f.detail);
    assert_eq!(ctx.steps[1].agent, "uwf-test");

    let d = h(v.decide());
    assert_eq!(d.next, "writer");
    assert_eq!(d.condition.as_deref(), Some("rejected"));
    assert_eq!(d.prompt.as_deref(), Some("Round 2: rhyme"));

    let s3 = f.step(f.start, Some(s2), "writer", json!({"text": "v2"}));
    let s4 = f.step(f.start, Some(s3), "reviewer", json!({"approved": true}));
    let v = h(load(&f.cas, s4));
    assert_eq!(v.steps.len(), 4);
    assert!(h(v.decide()).is_end());
}

#[test]
fn missing_head_is_not_found() {
    let f = fixture();
    let ghost = Hash::from_u64(42);
    match load(&f.cas, ghost) {
        Err(ThreadError::NotFound { hash, what }) => {
            assert_eq!(hash, ghost);
            assert_eq!(what, "thread head");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn head_of_wrong_type_is_refused() {
    let f = fixture();
    match load(&f.cas, f.workflow) {
        Err(e @ ThreadError::WrongType { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("StartNode or StepNode") && msg.contains("Workflow"),
                "{msg}"
            );
            assert!(msg.contains(&f.workflow.to_string()), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn steps_of_another_thread_break_the_chain() {
    let f = fixture();
    let other_start = put_start(&f.cas, f.workflow, "Another task");
    let foreign = f.step(other_start, None, "writer", json!({}));
    let s2 = f.step(
        f.start,
        Some(foreign),
        "reviewer",
        json!({"approved": true}),
    );
    match load(&f.cas, s2) {
        Err(ThreadError::BrokenChain {
            step,
            expected,
            found,
        }) => {
            assert_eq!((step, expected), (foreign, f.start));
            assert_eq!(found, other_start);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn prev_must_be_a_step() {
    let f = fixture();
    let s = f.step(f.start, Some(f.start), "writer", json!({}));
    assert!(matches!(
        load(&f.cas, s),
        Err(ThreadError::WrongType { hash, expected: "StepNode", .. }) if hash == f.start
    ));
}

#[test]
fn start_must_name_a_workflow() {
    let f = fixture();
    let bogus = put_start(&f.cas, f.detail, "x");
    match load(&f.cas, bogus) {
        Err(e @ ThreadError::WrongType { .. }) => {
            assert!(e.to_string().contains("text"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_output_is_not_found() {
    let f = fixture();
    let p = StepNodePayload {
        start: f.start,
        prev: None,
        record: StepRecord {
            role: "writer".into(),
            output: Hash::from_u64(7),
            detail: f.detail,
            agent: "a".into(),
        },
        child_thread: None,
    };
    let s = h(f.cas.put_value(f.cas.types().step_node, &p)).hash;
    match load(&f.cas, s) {
        Err(e @ ThreadError::NotFound { .. }) => {
            assert!(e.to_string().contains("output of step"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn undecodable_workflow_is_reported() {
    let f = fixture();
    // Bypass validation: write a Workflow-typed node the moderator cannot read.
    let payload = json!({"name": "broken"});
    let type_hash = f.cas.types().workflow;
    let hash = uwf_cas::node::hash_node(type_hash, &payload);
    h(f.cas.store().insert(
        hash,
        &Node {
            type_hash,
            payload,
            timestamp: 1,
        },
    ));
    let start = put_start(&f.cas, hash, "x");
    assert!(matches!(
        load(&f.cas, start),
        Err(ThreadError::WorkflowInvalid { hash: w, .. }) if w == hash
    ));
}

fn put_child_start(cas: &Cas<MemStore>, workflow: Hash, parent: Hash) -> Hash {
    let p = StartNodePayload {
        workflow,
        prompt: "child task".into(),
        parent_state: Some(parent),
    };
    h(cas.put_value(cas.types().start_node, &p)).hash
}

#[test]
fn call_stack_of_a_top_level_thread_is_one_frame() {
    let f = fixture();
    let s1 = f.step(f.start, None, "writer", json!({"text": "v1"}));
    let frames = h(call_stack(&f.cas, s1));
    assert_eq!(frames.len(), 1);
    assert_eq!(
        (frames[0].node, frames[0].view.start_hash, frames[0].depth),
        (s1, f.start, 0)
    );
    assert_eq!(frames[0].role, None);
}

#[test]
fn call_stack_follows_parent_state_and_names_the_calling_role() {
    let f = fixture();
    // The parent ran `writer`; its next role (reviewer) is done by a child
    // thread, which itself calls a grandchild from its StartNode.
    let s1 = f.step(f.start, None, "writer", json!({"text": "v1"}));
    let child = put_child_start(&f.cas, f.workflow, s1);
    let c1 = f.step(child, None, "writer", json!({"text": "child"}));
    let grandchild = put_child_start(&f.cas, f.workflow, child);

    let frames = h(call_stack(&f.cas, grandchild));
    let summary: Vec<_> = frames
        .iter()
        .map(|f| (f.node, f.view.start_hash, f.role.as_deref(), f.depth))
        .collect();
    assert_eq!(
        summary,
        [
            (grandchild, grandchild, Some("writer"), 2),
            (child, child, Some("reviewer"), 1),
            (s1, f.start, None, 0),
        ]
    );
    let from_step = h(call_stack(&f.cas, c1));
    assert_eq!(from_step.len(), 2);
    assert_eq!(from_step[0].view.steps.len(), 1);
    assert_eq!(from_step[1].node, s1);
}

#[test]
fn call_stack_reports_a_missing_parent() {
    let f = fixture();
    let child = put_child_start(&f.cas, f.workflow, Hash::from_u64(99));
    let Err(err) = call_stack(&f.cas, child) else {
        panic!("a dangling parentState must be an error")
    };
    assert!(matches!(err, ThreadError::NotFound { .. }), "{err:?}");
}

#[test]
fn load_head_reads_the_head_start_and_workflow_only() {
    let f = fixture();
    let s1 = f.step(f.start, None, "writer", json!({"text": "a"}));
    let s2 = f.step(f.start, Some(s1), "reviewer", json!({"approved": false}));
    let full = h(load(&f.cas, s2));
    let head = h(load_head(&f.cas, s2));
    assert_eq!(head.head, s2);
    assert_eq!(
        (head.start_hash, &head.start, head.start_timestamp),
        (full.start_hash, &full.start, full.start_timestamp)
    );
    assert_eq!(
        (head.workflow_hash, &head.workflow),
        (f.workflow, &full.workflow)
    );
    assert_eq!(head.last_step.as_ref(), Some(&full.steps[1].payload));
    // At the start: no step.
    let at_start = h(load_head(&f.cas, f.start));
    assert_eq!((at_start.head, at_start.last_step), (f.start, None));

    // Nothing behind the head is read: a missing earlier step does not
    // matter to it, while `load` reports it.
    let dangling = StepNodePayload {
        start: f.start,
        prev: Some(Hash::from_u64(9)),
        record: full.steps[1].payload.record.clone(),
        child_thread: None,
    };
    let dangling = h(f.cas.put_value(f.cas.types().step_node, &dangling)).hash;
    assert!(matches!(
        load(&f.cas, dangling),
        Err(ThreadError::NotFound { .. })
    ));
    assert_eq!(h(load_head(&f.cas, dangling)).start_hash, f.start);

    // The nodes it reads are checked as `load` checks them.
    assert!(matches!(
        load_head(&f.cas, f.workflow),
        Err(ThreadError::WrongType {
            expected: "StartNode or StepNode",
            ..
        })
    ));
    assert!(matches!(
        load_head(&f.cas, Hash::from_u64(5)),
        Err(ThreadError::NotFound { .. })
    ));
    let bad_start = StepNodePayload {
        start: f.workflow,
        prev: None,
        record: full.steps[0].payload.record.clone(),
        child_thread: None,
    };
    let bad_start = h(f.cas.put_value(f.cas.types().step_node, &bad_start)).hash;
    assert!(matches!(
        load_head(&f.cas, bad_start),
        Err(ThreadError::WrongType {
            expected: "StartNode",
            ..
        })
    ));
}

/// A workflow whose decisions read the number of steps and the last two.
const RECENT: &str = r#"
name: recent
roles:
  a: { goal: A., meta: { type: object } }
  b: { goal: B., meta: { type: object } }
conditions:
  enough: "$count(steps) >= 23"
  twice: "steps[-2].output.n = steps[-1].output.n"
  odd: "steps[-1].output.n % 2 = 1"
graph:
  $START: [{ role: a }]
  a:
    - { role: $END, condition: enough }
    - { role: b, condition: twice, prompt: "again {{ n }}" }
    - { role: a, condition: odd }
    - { role: b }
  b: [{ role: a }]
"#;

impl Fixture {
    /// A thread of `RECENT` whose step `i` outputs `{n: ns[i]}`, every head.
    fn recent_thread(&self, ns: &[u64]) -> Vec<Hash> {
        let def = h(parse_yaml(RECENT, "recent.yaml"));
        let workflow = h(register(&self.cas, &def)).hash;
        let start = put_start(&self.cas, workflow, "count");
        let mut heads = vec![start];
        let mut prev = None;
        for (i, n) in ns.iter().enumerate() {
            let role = if i % 3 == 2 { "b" } else { "a" };
            let step = self.step(start, prev, role, json!({ "n": n }));
            prev = Some(step);
            heads.push(step);
        }
        heads
    }
}

fn decision_text(view: &ThreadView) -> String {
    match view.decide() {
        Ok(d) => format!("{} #{} {:?}", d.next, d.index, d.prompt),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn a_view_of_the_last_steps_decides_as_the_whole_thread() {
    let f = fixture();
    let ns: Vec<u64> = (0..60u64).map(|i| (i * 7 + i / 5) % 4).collect();
    let heads = f.recent_thread(&ns);
    // Every head, in order (the length entries written on the way serve
    // the next ones), then every head again in reverse, with chain
    // entries written by whole loads in between.
    let order = heads.iter().chain(heads.iter().rev());
    for (i, &head) in order.enumerate() {
        if i % 11 == 0 {
            h(load(&f.cas, head));
        }
        let whole = h(load_uncached(&f.cas, head));
        let recent = h(load_recent(&f.cas, head));
        assert_eq!(recent.len(), whole.steps.len(), "length at {head}");
        assert_eq!(recent.steps.len(), whole.steps.len().min(2));
        assert_eq!(
            recent.steps,
            whole.steps[whole.steps.len() - recent.steps.len()..]
        );
        assert_eq!(decision_text(&recent), decision_text(&whole), "at {head}");
        assert_eq!(
            recent.decide_resume().ok(),
            whole.decide_resume().ok(),
            "resume at {head}"
        );
    }
}

#[test]
fn the_length_is_walked_once_then_read_from_the_cache() {
    let f = fixture();
    let heads = f.recent_thread(&[1; 30]);
    let key = |h: Hash| format!("len-{h}");
    let entry = |step: Hash| h(f.cas.store().cache_get(&key(step)));
    let view = h(load_recent(&f.cas, heads[30]));
    assert_eq!((view.unloaded, view.steps.len()), (28, 2));
    assert!(entry(heads[30]).is_some(), "a long walk records the length");
    // The next steps stop at that entry, and write none of their own until
    // the walk to it is long again; then the older entry is removed.
    let mut head = heads[30];
    for n in 31..=40 {
        head = f.step(view.start_hash, Some(head), "a", json!({ "n": 1 }));
        let view = h(load_recent(&f.cas, head));
        assert_eq!((view.unloaded, view.steps.len()), (n - 2, 2));
        let rewritten = n - 30 >= crate::view_cache::REWRITE_AFTER;
        assert_eq!(entry(head).is_some(), rewritten, "at step {n}");
        assert_eq!(entry(heads[30]).is_none(), rewritten, "at step {n}");
        if rewritten {
            break;
        }
    }
    let written = entry(head);

    // A damaged entry, or one of another step or thread, is not believed.
    let text = String::from_utf8(written.unwrap_or_default()).unwrap_or_default();
    let len = h(load_recent(&f.cas, head)).len();
    for bad in [
        text.replace(&format!(" {len} "), &format!(" {} ", len + 1)),
        text.replace(&view.start_hash.to_string(), &heads[1].to_string()),
        text.replace(&head.to_string(), &heads[30].to_string()),
        text.trim_end().to_string(),
        String::new(),
    ] {
        h(f.cas.store().cache_put(&key(head), bad.as_bytes()));
        let view = h(load_recent(&f.cas, head));
        assert_eq!(view.len(), len, "entry {bad:?}");
        assert_eq!(entry(head), Some(text.clone().into_bytes()), "rewritten");
    }
}

#[test]
fn a_workflow_that_may_read_any_step_is_loaded_whole() {
    let f = fixture();
    let mut prev = None;
    for _ in 0..20 {
        prev = Some(f.step(f.start, prev, "writer", json!({})));
    }
    let head = prev.unwrap_or(f.start);
    let changed = YAML.replace(
        "\"steps[-1].output.approved = false\"",
        "\"$count(steps[role = 'reviewer']) < 3\"",
    );
    let workflow = h(register(&f.cas, &h(parse_yaml(&changed, "r.yaml")))).hash;
    let start = put_start(&f.cas, workflow, "x");
    let mut prev = None;
    for _ in 0..20 {
        prev = Some(f.step(start, prev, "writer", json!({})));
    }
    let whole = h(load_recent(&f.cas, prev.unwrap_or(start)));
    assert!(whole.is_whole());
    assert_eq!(whole.steps.len(), 20);
    // The first workflow reads the last step only.
    let recent = h(load_recent(&f.cas, head));
    assert_eq!((recent.unloaded, recent.steps.len()), (19, 1));
    // Handed a workflow that reads further back, the view refuses to decide.
    let mut wrong = recent.clone();
    wrong.workflow = whole.workflow.clone();
    wrong.workflow_hash = whole.workflow_hash;
    assert!(matches!(
        wrong.decide(),
        Err(crate::ModeratorError::HistoryNotLoaded {
            loaded: 1,
            len: 20,
            ..
        })
    ));
}

#[test]
fn keep_last_makes_a_view_of_the_last_steps() {
    let f = fixture();
    let heads = f.recent_thread(&[1, 2, 3, 4, 5, 6]);
    let whole = h(load(&f.cas, heads[6]));
    let mut kept = whole.clone();
    kept.keep_last(2);
    assert_eq!((kept.unloaded, kept.steps.len()), (4, 2));
    assert_eq!(decision_text(&kept), decision_text(&whole));
    kept.keep_last(3);
    assert_eq!((kept.unloaded, kept.steps.len()), (4, 2));
    let mut recent = h(load_recent(&f.cas, heads[6]));
    recent.keep_last(1);
    assert_eq!((recent.unloaded, recent.steps.len()), (5, 1));
    assert_eq!(recent.last_step().map(|s| s.hash), Some(heads[6]));
    // Kept shorter than the workflow reads, a view refuses to decide.
    assert!(matches!(
        recent.decide(),
        Err(crate::ModeratorError::HistoryNotLoaded { .. })
    ));
}
