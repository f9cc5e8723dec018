use serde_json::{Value, json};
use uwf_cas::{Cas, Hash, MemStore};
use uwf_protocol::{StartNodePayload, StepNodePayload, StepRecord, WorkflowPayload};

use super::*;
use crate::definition::{parse_yaml, register};
use crate::thread::load;

const OLD: &str = r#"
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
    - { role: writer, condition: rejected, prompt: "Fix: {{comments}}" }
    - { role: $END, condition: null }
"#;

fn h<T>(r: Result<T, impl std::fmt::Display>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn workflow(cas: &Cas<MemStore>, yaml: &str) -> (Hash, WorkflowPayload) {
    let r = h(register(cas, &h(parse_yaml(yaml, "w.yaml"))));
    (r.hash, r.payload)
}

/// A thread of `OLD` with these (role, output) steps, loaded.
fn thread(cas: &Cas<MemStore>, steps: &[(&str, Value)]) -> ThreadView {
    let (wf_hash, wf) = workflow(cas, OLD);
    let start = h(cas.put_value(
        cas.types().start_node,
        &StartNodePayload {
            workflow: wf_hash,
            prompt: "task".into(),
            parent_state: None,
        },
    ))
    .hash;
    let text = h(cas.put_schema(json!({"title": "text", "type": "string"}))).hash;
    let detail = h(cas.put(text, json!("transcript"))).hash;
    let mut prev = None;
    let mut head = start;
    for (role, output) in steps {
        let out = h(cas.put(wf.roles[*role].output_schema, output.clone())).hash;
        let p = StepNodePayload {
            start,
            prev,
            record: StepRecord {
                role: (*role).into(),
                output: out,
                detail,
                agent: "a".into(),
            },
            child_thread: None,
        };
        head = h(cas.put_value(cas.types().step_node, &p)).hash;
        prev = Some(head);
    }
    h(load(cas, head))
}

fn rejected_once(cas: &Cas<MemStore>) -> ThreadView {
    thread(
        cas,
        &[
            ("writer", json!({})),
            ("reviewer", json!({"approved": false, "comments": "typo"})),
            ("writer", json!({})),
            ("reviewer", json!({"approved": true, "comments": "ok"})),
        ],
    )
}

fn check(cas: &Cas<MemStore>) -> impl Fn(Hash, &Value) -> Result<(), String> + Sync + '_ {
    |schema, v| cas.validate(schema, v).map_err(|e| e.to_string())
}

/// `rejected_once` replayed under `yaml`.
fn replayed_under(yaml: &str) -> (ThreadView, ThreadReplay) {
    let cas = h(Cas::new(MemStore::new()));
    let view = rejected_once(&cas);
    let (_, new) = workflow(&cas, yaml);
    let r = replay(&view, &new, &check(&cas));
    (view, r)
}

#[test]
fn the_same_workflow_routes_every_thread_the_same() {
    let cas = h(Cas::new(MemStore::new()));
    let view = rejected_once(&cas);
    let r = replay(&view, &view.workflow, &check(&cas));
    assert_eq!(r.outcome, Outcome::Same);
    assert_eq!(r.steps, 4);
    assert!(r.divergence.is_none() && r.invalid.is_none() && r.prompts.is_empty());
}

#[test]
fn a_changed_condition_diverges_at_the_first_step_it_decides_otherwise() {
    // Rejections no longer send the work back.
    let (view, r) = replayed_under(&OLD.replace(
        "steps[-1].output.approved = false",
        "steps[-1].output.approved = false and $count(steps) > 2",
    ));
    assert_eq!(r.outcome, Outcome::Diverged);
    let d = r.divergence.unwrap_or_else(|| panic!("no divergence"));
    assert_eq!((d.step, d.from.as_str()), (3, "reviewer"));
    assert_eq!(d.at, view.steps[1].hash);
    assert_eq!(d.old.role.as_deref(), Some("writer"));
    assert_eq!(d.new.role.as_deref(), Some("$END"));
    assert_eq!(d.old.condition.as_deref(), Some("rejected"));
    assert_eq!((d.old.transition, d.new.transition), (Some(1), Some(2)));
    assert_eq!(d.old.transitions[0].value, Some(json!(true)));
    assert_eq!(d.new.transitions[0].value, Some(json!(false)));
}

#[test]
fn a_changed_decision_at_the_head_is_a_divergence_after_the_last_step() {
    // An approval now needs a second review.
    let (_, r) = replayed_under(
        &OLD.replace(
            "- { role: $END, condition: null }",
            "- { role: $END, condition: twice }\n    - { role: reviewer, condition: null }",
        )
        .replace(
            "conditions:\n",
            "conditions:\n  twice: \"$count(steps[role='reviewer']) >= 3\"\n",
        ),
    );
    let d = r.divergence.unwrap_or_else(|| panic!("no divergence"));
    assert_eq!((d.step, d.old.role.as_deref()), (5, Some("$END")));
    assert_eq!(d.new.role.as_deref(), Some("reviewer"));
}

#[test]
fn an_output_refused_by_a_changed_schema_makes_the_thread_invalid() {
    let (view, r) =
        replayed_under(&OLD.replace("required: [approved]", "required: [approved, severity]"));
    assert_eq!(r.outcome, Outcome::Invalid);
    let i = r.invalid.unwrap_or_else(|| panic!("not invalid"));
    assert_eq!((i.step, i.role.as_str()), (2, "reviewer"));
    assert_eq!(i.hash, view.steps[1].hash);
    assert!(i.reason.contains("severity"), "{}", i.reason);
}

#[test]
fn a_changed_edge_prompt_is_listed_without_a_divergence() {
    let (_, r) = replayed_under(&OLD.replace("Fix: {{comments}}", "Please fix: {{comments}}"));
    assert_eq!(r.outcome, Outcome::Same);
    assert_eq!(r.prompts.len(), 1);
    assert_eq!(r.prompts[0].step, 3);
    assert_eq!(r.prompts[0].old.as_deref(), Some("Fix: typo"));
    assert_eq!(r.prompts[0].new.as_deref(), Some("Please fix: typo"));
}

#[test]
fn a_moderator_that_fails_under_the_new_workflow_is_a_divergence_with_its_error() {
    let (_, r) = replayed_under(&OLD.replace(
        "steps[-1].output.approved = false",
        "steps[-1].output.comments + 1",
    ));
    let d = r.divergence.unwrap_or_else(|| panic!("no divergence"));
    assert_eq!(d.step, 3);
    assert_eq!(d.new.role, None);
    assert!(
        d.new
            .error
            .as_deref()
            .is_some_and(|e| e.contains("rejected"))
    );
}

#[test]
fn changed_sources_names_roles_whose_transitions_or_conditions_changed() {
    let cas = h(Cas::new(MemStore::new()));
    let (_, old) = workflow(&cas, OLD);
    let (_, new) = workflow(&cas, &OLD.replace("approved = false", "approved != true"));
    let changed: Vec<String> = changed_sources(&old, &new).into_iter().collect();
    assert_eq!(changed, vec!["reviewer".to_string()]);
    assert!(changed_sources(&old, &old).is_empty());
}

#[test]
fn the_prompt_of_the_step_that_would_run_next_is_compared_too() {
    let cas = h(Cas::new(MemStore::new()));
    // Active: rejected, the writer runs next.
    let view = thread(
        &cas,
        &[
            ("writer", json!({})),
            ("reviewer", json!({"approved": false, "comments": "typo"})),
        ],
    );
    let (_, new) = workflow(
        &cas,
        &OLD.replace("Fix: {{comments}}", "Now fix: {{comments}}"),
    );
    let r = replay(&view, &new, &check(&cas));
    assert_eq!(r.outcome, Outcome::Same);
    assert_eq!(r.prompts.len(), 1);
    assert_eq!(
        (r.prompts[0].step, r.prompts[0].role.as_str()),
        (3, "writer")
    );
    assert_eq!(r.prompts[0].new.as_deref(), Some("Now fix: typo"));
}

#[test]
fn a_prefix_of_the_prepared_thread_is_the_document_a_step_sees() {
    let cas = h(Cas::new(MemStore::new()));
    let view = rejected_once(&cas);
    let prepared =
        h(crate::eval::Prepared::new(&view.start, &view.steps)
            .map_err(|f| f.message().to_string()));
    let whole = h(crate::jsonata::compile("$string($)").map_err(|f| f.message().to_string()));
    let text =
        |input: crate::jsonata::Input| {
            h(crate::jsonata::value_compiled(&whole, Some(&input))
                .map_err(|f| f.message().to_string()))
        };
    for k in 0..=view.steps.len() {
        let step = h(crate::eval::loaded_input(&view.start, &view.steps[..k])
            .map_err(|f| f.message().to_string()));
        let prefix = h(prepared.input(k).map_err(|f| f.message().to_string()));
        let (a, b) = (text(step), text(prefix));
        assert_eq!(a, b, "after {k} steps");
        let doc = a.as_ref().and_then(Value::as_str).unwrap_or_default();
        assert_eq!(doc.matches("\"role\"").count(), k, "{doc}");
    }
}
