use serde_json::{Value, json};
use uwf_protocol::{ModeratorContext, StartNodePayload, StepContext, WorkflowPayload};

use super::*;

fn workflow(conditions: Value, graph: Value) -> WorkflowPayload {
    let roles: serde_json::Map<String, Value> = ["planner", "developer", "reviewer"]
        .iter()
        .map(|r| {
            (
                (*r).to_string(),
                json!({"description": "", "systemPrompt": "", "outputSchema": "0000000000000"}),
            )
        })
        .collect();
    serde_json::from_value(json!({
        "name": "solve-issue",
        "description": "test",
        "roles": roles,
        "conditions": conditions,
        "graph": graph,
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn ctx(steps: &[(&str, Value)]) -> ModeratorContext {
    ModeratorContext {
        start: StartNodePayload {
            workflow: uwf_protocol::Hash::from_u64(0),
            prompt: "Fix the login bug".into(),
            parent_state: None,
        },
        steps: steps
            .iter()
            .map(|(role, output)| StepContext {
                role: (*role).into(),
                output: output.clone(),
                detail: uwf_protocol::Hash::from_u64(1),
                agent: "uwf-test".into(),
            })
            .collect(),
    }
}

fn solve_issue() -> WorkflowPayload {
    workflow(
        json!({
            "needsClarification": "$exists(steps[-1].output.needsClarification)",
            "notApproved": {"description": "Reviewer rejected", "expression": "steps[-1].output.approved = false"},
            "tooManyRounds": "$count(steps[role='developer']) >= 3",
        }),
        json!({
            "$START": [{"role": "planner", "condition": null}],
            "planner": [
                {"role": "planner", "condition": "needsClarification", "prompt": "Clarify: {{needsClarification}}"},
                {"role": "developer", "condition": null, "prompt": "Plan: {{plan}} ({{ $count(steps) }} steps)"}
            ],
            "developer": [{"role": "reviewer", "condition": null}],
            "reviewer": [
                {"role": "$END", "condition": "tooManyRounds"},
                {"role": "developer", "condition": "notApproved", "prompt": "{{comments}}"},
                {"role": "$END", "condition": null}
            ]
        }),
    )
}

fn decide(w: &WorkflowPayload, steps: &[(&str, Value)]) -> Result<Decision, ModeratorError> {
    evaluate(w, &ctx(steps))
}

fn ok(w: &WorkflowPayload, steps: &[(&str, Value)]) -> Decision {
    decide(w, steps).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn start_goes_to_first_role() {
    let d = ok(&solve_issue(), &[]);
    assert_eq!(
        d,
        Decision {
            from: "$START".into(),
            next: "planner".into(),
            index: 0,
            condition: None,
            prompt: None,
        }
    );
    assert!(!d.is_end());
}

#[test]
fn exists_condition_and_prompt_rendering() {
    let w = solve_issue();
    let d = ok(
        &w,
        &[("planner", json!({"needsClarification": "which login?"}))],
    );
    assert_eq!(d.next, "planner");
    assert_eq!(d.condition.as_deref(), Some("needsClarification"));
    assert_eq!(d.prompt.as_deref(), Some("Clarify: which login?"));

    let d = ok(
        &w,
        &[("planner", json!({"plan": "p", "steps": ["a", "b", "c"]}))],
    );
    assert_eq!((d.next.as_str(), d.index), ("developer", 1));
    assert_eq!(d.condition, None);
    assert_eq!(d.prompt.as_deref(), Some("Plan: p (3 steps)"));
}

#[test]
fn approved_false_loops_back_and_true_ends() {
    let w = solve_issue();
    let base = [
        ("planner", json!({"plan": "p"})),
        ("developer", json!({"summary": "s"})),
    ];
    let mut steps = base.to_vec();
    steps.push((
        "reviewer",
        json!({"approved": false, "comments": "add tests"}),
    ));
    let d = ok(&w, &steps);
    assert_eq!(d.next, "developer");
    assert_eq!(d.condition.as_deref(), Some("notApproved"));
    assert_eq!(d.prompt.as_deref(), Some("add tests"));

    let mut steps = base.to_vec();
    steps.push(("reviewer", json!({"approved": true, "comments": "ok"})));
    let d = ok(&w, &steps);
    assert!(d.is_end());
    assert_eq!((d.index, d.condition), (2, None));

    // `approved` missing: `undefined = false` is false, so the fallback wins.
    let mut steps = base.to_vec();
    steps.push(("reviewer", json!({"comments": "?"})));
    assert!(ok(&w, &steps).is_end());
}

#[test]
fn counted_loop_stops_after_three_rounds() {
    let w = solve_issue();
    let mut steps = vec![("planner", json!({"plan": "p"}))];
    let mut rounds = 0;
    loop {
        steps.push(("developer", json!({})));
        steps.push(("reviewer", json!({"approved": false, "comments": "again"})));
        rounds += 1;
        let d = ok(&w, &steps);
        if d.is_end() {
            assert_eq!(d.condition.as_deref(), Some("tooManyRounds"));
            break;
        }
        assert_eq!(d.next, "developer");
        assert!(rounds < 10, "loop never ended");
    }
    assert_eq!(rounds, 3);
}

#[test]
fn first_matching_transition_wins() {
    let w = workflow(
        json!({"yes": "true", "also": "1 = 1"}),
        json!({
            "$START": [
                {"role": "developer", "condition": "yes"},
                {"role": "reviewer", "condition": "also"},
                {"role": "planner", "condition": null}
            ]
        }),
    );
    let d = ok(&w, &[]);
    assert_eq!((d.next.as_str(), d.index), ("developer", 0));
}

#[test]
fn truthiness_edge_cases() {
    let w = workflow(
        json!({"v": "steps[-1].output.v"}),
        json!({
            "$START": [{"role": "planner", "condition": null}],
            "planner": [
                {"role": "developer", "condition": "v"},
                {"role": "$END", "condition": null}
            ]
        }),
    );
    for (v, want) in [
        (json!(true), true),
        (json!(false), false),
        (json!(0), false),
        (json!(0.0), false),
        (json!(-3), true),
        (json!(""), false),
        (json!("false"), true),
        (json!([]), false),
        (json!({}), false),
        (json!({"a": null}), true),
        (json!(null), false),
        (json!([0, false, "", null]), false),
        (json!([0, 1]), true),
        (json!([[]]), false),
        (json!(["x"]), true),
    ] {
        let d = ok(&w, &[("planner", json!({ "v": v }))]);
        assert_eq!(d.next == "developer", want, "v = {v}");
    }
    // Absent field: undefined is false.
    assert!(ok(&w, &[("planner", json!({}))]).is_end());
}

#[test]
fn conditions_see_start_and_all_steps() {
    let w = workflow(
        json!({
            "urgent": "$contains(start.prompt, 'login')",
            "byAgent": "steps[0].agent = 'uwf-test' and steps[0].detail = '0000000000001'"
        }),
        json!({
            "$START": [{"role": "planner", "condition": "urgent"}],
            "planner": [{"role": "$END", "condition": "byAgent"}]
        }),
    );
    assert_eq!(ok(&w, &[]).next, "planner");
    assert!(ok(&w, &[("planner", json!({}))]).is_end());
}

#[test]
fn start_prompt_renders_against_empty_object() {
    let w = workflow(
        json!({}),
        json!({"$START": [{"role": "planner", "condition": null, "prompt": "Begin{{x}}. {{ $count($keys($)) }}"}]}),
    );
    assert_eq!(ok(&w, &[]).prompt.as_deref(), Some("Begin. 0"));
}

#[test]
fn a_prompt_that_renders_to_nothing_is_an_error_naming_the_edge() {
    // uwf's own templates too, as upstream's moderator refused it.
    for prompt in ["{{ task }}", " {{ task }}\n", "{{ $string(missing) }}"] {
        let w = workflow(
            json!({}),
            json!({"$START": [{"role": "planner", "condition": null, "prompt": prompt}]}),
        );
        let e = decide(&w, &[]).err();
        assert!(
            matches!(&e, Some(ModeratorError::Evaluation(x))
                if x.subject == Subject::EdgePrompt { target: "planner".into(), index: 0 }
                    && x.role == "$START"
                    && x.message.contains("rendered to an empty text")),
            "{prompt}: {e:?}"
        );
    }
    // Any text at all is a prompt.
    let w = workflow(
        json!({}),
        json!({"$START": [{"role": "planner", "condition": null, "prompt": "-{{ task }}"}]}),
    );
    assert_eq!(ok(&w, &[]).prompt.as_deref(), Some("-"));
}

#[test]
fn no_transitions_names_workflow_and_role() {
    let w = solve_issue();
    let e = decide(&w, &[("ghost", json!({}))]).err();
    assert_eq!(
        e,
        Some(ModeratorError::NoTransitions {
            workflow: "solve-issue".into(),
            role: "ghost".into()
        })
    );
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("solve-issue") && msg.contains("ghost"),
        "{msg}"
    );

    let w = workflow(json!({}), json!({"$START": []}));
    assert!(matches!(
        decide(&w, &[]),
        Err(ModeratorError::NoTransitions { role, .. }) if role == "$START"
    ));
}

#[test]
fn unknown_condition_is_reported() {
    let w = workflow(
        json!({}),
        json!({"$START": [{"role": "planner", "condition": "nope"}, {"role": "planner", "condition": null}]}),
    );
    let e = decide(&w, &[]).err();
    assert!(
        matches!(&e, Some(ModeratorError::UnknownCondition { workflow, role, condition, index: 0 })
            if workflow == "solve-issue" && role == "$START" && condition == "nope"),
        "{e:?}"
    );
    assert_eq!(e.as_ref().and_then(|e| e.condition()), Some("nope"));
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("`nope`") && msg.contains("solve-issue"),
        "{msg}"
    );
}

#[test]
fn syntax_error_is_reported_with_message() {
    let w = workflow(
        json!({"broken": "steps[-1].output.approved ="}),
        json!({"$START": [{"role": "planner", "condition": "broken"}]}),
    );
    let e = decide(&w, &[]).err();
    match &e {
        Some(ModeratorError::Syntax(x)) => {
            assert_eq!(
                (x.workflow.as_str(), x.role.as_str()),
                ("solve-issue", "$START")
            );
            assert_eq!(
                x.subject,
                Subject::Condition {
                    name: "broken".into()
                }
            );
            assert_eq!(x.expression, "steps[-1].output.approved =");
            assert!(x.message.starts_with('S'), "{}", x.message);
        }
        other => panic!("{other:?}"),
    }
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("solve-issue") && msg.contains("`broken`") && msg.contains("$START"),
        "{msg}"
    );
}

#[test]
fn evaluation_error_is_reported_with_message() {
    let w = workflow(
        json!({"bad": "steps[-1].output.name + 1"}),
        json!({
            "$START": [{"role": "planner", "condition": null}],
            "planner": [{"role": "$END", "condition": "bad"}]
        }),
    );
    let e = decide(&w, &[("planner", json!({"name": "x"}))]).err();
    assert!(
        matches!(&e, Some(ModeratorError::Evaluation(x))
            if x.role == "planner"
                && x.subject == Subject::Condition { name: "bad".into() }
                && x.message.contains("T2001")),
        "{e:?}"
    );
    let w = workflow(
        json!({"loop": "($f := function($x){ $f($x) }; $f(1))"}),
        json!({"$START": [{"role": "planner", "condition": "loop"}]}),
    );
    assert!(matches!(
        decide(&w, &[]),
        Err(ModeratorError::Evaluation(x)) if x.message.contains("U1001")
    ));
}

#[test]
fn no_match_lists_conditions_tried() {
    let w = workflow(
        json!({"a": "false", "b": "steps[-1].output.ok"}),
        json!({
            "$START": [{"role": "planner", "condition": null}],
            "planner": [
                {"role": "developer", "condition": "a"},
                {"role": "reviewer", "condition": "b"}
            ]
        }),
    );
    let e = decide(&w, &[("planner", json!({"ok": false}))]).err();
    assert_eq!(
        e,
        Some(ModeratorError::NoMatch {
            workflow: "solve-issue".into(),
            role: "planner".into(),
            tried: vec!["a".into(), "b".into()]
        })
    );
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("`a`, `b`") && msg.contains("planner"), "{msg}");
}

#[test]
fn edge_prompt_errors_name_the_edge() {
    let w = workflow(
        json!({}),
        json!({"$START": [{"role": "planner", "condition": null, "prompt": "x {{ oops"}]}),
    );
    match decide(&w, &[]) {
        Err(ModeratorError::Syntax(x)) => {
            assert_eq!(
                (x.workflow.as_str(), x.role.as_str()),
                ("solve-issue", "$START")
            );
            assert_eq!(
                x.subject,
                Subject::EdgePrompt {
                    target: "planner".into(),
                    index: 0
                }
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn status_condition_with_backticks() {
    let w = workflow(
        json!({"done": "steps[-1].output.`$status` = \"done\""}),
        json!({
            "$START": [{"role": "planner", "condition": null}],
            "planner": [{"role": "$END", "condition": "done"}, {"role": "planner", "condition": null}]
        }),
    );
    assert!(ok(&w, &[("planner", json!({"$status": "done"}))]).is_end());
    assert!(!ok(&w, &[("planner", json!({"$status": "more"}))]).is_end());
    assert!(!ok(&w, &[("planner", json!({}))]).is_end());
}

#[test]
fn render_prompt_rules() {
    let out = json!({
        "comments": "needs tests",
        "files": ["a.rs"],
        "n": 2,
        "obj": {"z": 1, "a": [true, null]},
        "nothing": null,
        "quote": "say \"hi\""
    });
    for (tpl, want) in [
        ("plain text", "plain text"),
        ("{{comments}}", "needs tests"),
        ("[{{ comments }}]", "[needs tests]"),
        ("{{files}}", r#"["a.rs"]"#),
        ("{{n}} + 1 = {{ n + 1 }}", "2 + 1 = 3"),
        ("{{obj}}", r#"{"a":[true,null],"z":1}"#),
        ("<{{nothing}}{{missing}}>", "<>"),
        ("{{quote}}", r#"say "hi""#),
        ("{{ $count(files) }} file(s)", "1 file(s)"),
        ("{{ n > 1 }}", "true"),
        ("{{ 1/3 }}", "0.3333333333333333"),
        ("{{ \"}}\" }}", "}}"),
        ("}} and { stay", "}} and { stay"),
    ] {
        assert_eq!(
            render_prompt(tpl, &out).unwrap_or_else(|e| panic!("{tpl}: {e}")),
            want,
            "{tpl}"
        );
    }
}

#[test]
fn render_prompt_errors() {
    let e = render_prompt("Hello {{ name", &json!({})).err();
    assert!(
        matches!(&e, Some(ModeratorError::Syntax(x)) if x.subject == Subject::Template && x.message.contains("closing")),
        "{e:?}"
    );
    let msg = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.starts_with("the prompt template"), "{msg}");
    assert!(matches!(
        render_prompt("{{ 1 + }}", &json!({})),
        Err(ModeratorError::Syntax(_))
    ));
    assert!(matches!(
        render_prompt("{{ name + 1 }}", &json!({"name": "x"})),
        Err(ModeratorError::Evaluation(_))
    ));
}

#[test]
fn decision_serializes_camel_case() {
    let d = ok(&solve_issue(), &[]);
    assert_eq!(
        serde_json::to_value(&d).unwrap_or_default(),
        json!({"from": "$START", "next": "planner", "index": 0, "condition": null})
    );
}

/// A workflow stored before the static check existed still cannot route on
/// the clock or on chance: the moderator refuses such a condition itself.
#[test]
fn impure_functions_are_refused_at_run_time() {
    for expr in ["$now() > '2000'", "$random() < 2", "$eval('true')"] {
        let w = workflow(
            json!({"c": expr}),
            json!({"$START": [{"role": "planner", "condition": "c"}, {"role": "planner", "condition": null}]}),
        );
        assert!(
            matches!(&decide(&w, &[]), Err(ModeratorError::Syntax(x)) if x.message.contains("not allowed in a workflow")),
            "{expr}: {:?}",
            decide(&w, &[])
        );
    }
}

// ---- `$last` / `$first` (the helpers upstream bound for its conditions)

fn routed_by(expression: &str, steps: &[(&str, Value)]) -> String {
    let w = workflow(
        json!({ "c": expression }),
        json!({
            "$START": [{"role": "planner", "condition": null}],
            "planner": [{"role": "$END", "condition": "c"}, {"role": "developer", "condition": null}],
            "developer": [{"role": "$END", "condition": "c"}, {"role": "reviewer", "condition": null}],
            "reviewer": [{"role": "$END", "condition": "c"}, {"role": "developer", "condition": null}],
        }),
    );
    evaluate(&w, &ctx(steps))
        .unwrap_or_else(|e| panic!("{e}"))
        .next
}

#[test]
fn last_is_the_latest_output_of_a_role() {
    let steps = [
        ("developer", json!({"state": "done"})),
        ("reviewer", json!({"approved": false})),
        ("developer", json!({"state": "failed"})),
    ];
    assert_eq!(
        routed_by("$last('developer').state = 'failed'", &steps),
        "$END"
    );
    assert_eq!(
        routed_by("$last('developer').state = 'done'", &steps),
        "reviewer"
    );
}

#[test]
fn first_is_the_earliest_output_of_a_role() {
    let steps = [
        ("planner", json!({"state": "ready", "plan": "A"})),
        ("developer", json!({"state": "done"})),
        ("planner", json!({"state": "revised", "plan": "B"})),
    ];
    assert_eq!(routed_by("$first('planner').plan = 'A'", &steps), "$END");
    assert_eq!(
        routed_by("$last('planner').plan = 'A'", &steps),
        "developer"
    );
}

#[test]
fn last_of_a_role_that_never_ran_is_undefined() {
    let steps = [("planner", json!({"state": "ready"}))];
    assert_eq!(routed_by("$exists($last('reviewer'))", &steps), "developer");
    assert_eq!(routed_by("$exists($first('planner'))", &steps), "$END");
}

#[test]
fn last_wants_a_string() {
    let w = workflow(
        json!({ "c": "$last(1)" }),
        json!({ "$START": [{"role": "planner", "condition": null}],
                "planner": [{"role": "$END", "condition": "c"}] }),
    );
    let Err(e) = evaluate(&w, &ctx(&[("planner", json!({}))])) else {
        panic!("a number is refused");
    };
    assert!(e.to_string().contains("T0410"), "{e}");
}

#[test]
fn last_and_first_work_in_edge_prompts() {
    let w = workflow(
        json!({}),
        json!({
            "$START": [{"role": "planner", "condition": null}],
            "planner": [{"role": "developer", "condition": null}],
            "developer": [{"role": "reviewer", "condition": null,
                "prompt": "Plan {{ $first('planner').plan }}, now {{ $last('planner').plan }}: {{summary}}"}],
        }),
    );
    let d = evaluate(
        &w,
        &ctx(&[
            ("planner", json!({"plan": "A"})),
            ("planner", json!({"plan": "B"})),
            ("developer", json!({"summary": "done"})),
        ]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.prompt.as_deref(), Some("Plan A, now B: done"));
}

/// The one-pass conversion of the context gives exactly the document the
/// serialised context gives, keys in code point order included.
#[test]
#[allow(clippy::unwrap_used)]
fn the_fast_context_is_the_serialised_context() {
    use crate::jsonata::{Input, compile, value_compiled};
    use uwf_protocol::{StartNodePayload, StepContext};
    let step = |role: &str, output: serde_json::Value| StepContext {
        role: role.into(),
        output,
        detail: uwf_protocol::fixtures::hash("D"),
        agent: "a b".into(),
    };
    for parent in [None, Some(uwf_protocol::fixtures::hash("P"))] {
        let ctx = ModeratorContext {
            start: StartNodePayload {
                workflow: uwf_protocol::fixtures::hash("W"),
                prompt: "do ✓".into(),
                parent_state: parent,
            },
            steps: vec![
                step(
                    "b",
                    serde_json::json!({"z": 1, "a": [{"y": null, "b": true}], "é": "x", "E": 2.5}),
                ),
                step("a", serde_json::json!([3, {"k": {"j": {}, "i": []}}])),
                step("c", serde_json::json!("text")),
            ],
        };
        let fast = context_input(&ctx).unwrap();
        let slow = Input::owned(serde_json::to_value(&ctx).unwrap()).unwrap();
        for e in [
            "$string($)",
            "$keys(steps[0].output)",
            "steps.output",
            "$count(steps)",
        ] {
            let x = compile(e).unwrap();
            assert_eq!(
                value_compiled(&x, Some(&fast)).unwrap(),
                value_compiled(&x, Some(&slow)).unwrap(),
                "{e}"
            );
        }
    }
}

#[test]
fn a_document_keeps_its_key_order_a_context_is_sorted() {
    let doc: Value = serde_json::from_str(r#"{"b": 1, "a": {"z": 2, "y": 3}}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let keys = |f: fn(&str, Option<&Value>) -> Result<Option<Value>, ModeratorError>| {
        f("[$keys($), $keys(a)]", Some(&doc)).unwrap_or_else(|e| panic!("{e}"))
    };
    // (The array constructor flattens the two lists.)
    assert_eq!(keys(evaluate_document), Some(json!(["b", "a", "z", "y"])));
    assert_eq!(keys(evaluate_expression), Some(json!(["a", "b", "y", "z"])));
}

/// `n` loaded steps of one thread; step `i` has hash `base + i` and an
/// output naming `i` (every third output the same node).
fn loaded(base: u64, n: u64) -> Vec<crate::thread::LoadedStep> {
    (0..n)
        .map(|i| {
            let hash = uwf_protocol::Hash::from_u64(base + i);
            let shared = i % 3 == 0;
            let output_hash =
                uwf_protocol::Hash::from_u64(if shared { 7 } else { base + 1000 + i });
            crate::thread::LoadedStep {
                hash,
                payload: uwf_protocol::StepNodePayload {
                    start: uwf_protocol::Hash::from_u64(0),
                    prev: i
                        .checked_sub(1)
                        .map(|p| uwf_protocol::Hash::from_u64(base + p)),
                    record: uwf_protocol::StepRecord {
                        role: if i % 2 == 0 { "developer" } else { "reviewer" }.into(),
                        output: output_hash,
                        detail: uwf_protocol::Hash::from_u64(1),
                        agent: "uwf-test".into(),
                    },
                    child_thread: None,
                },
                output: if shared {
                    json!({"same": true})
                } else {
                    json!({"n": i, "deep": {"x": [i]}})
                },
                timestamp: i,
            }
        })
        .collect()
}

/// The whole document an input holds, as JSON.
fn document(input: &crate::jsonata::Input) -> Value {
    let all = crate::jsonata::compile("$").unwrap_or_else(|e| panic!("{e:?}"));
    crate::jsonata::evaluated(&all, input)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .to_json()
        .unwrap_or_else(|| panic!("undefined"))
}

/// The kept steps of this thread: how many, and the first one's object.
fn kept_now() -> (usize, Option<uwf_jsonata::Value>) {
    KEPT.with(|k| {
        let k = k.borrow();
        k.as_ref().map_or((0, None), |k| {
            assert_eq!(k.hashes.len(), k.values.len());
            (k.hashes.len(), k.values.first().cloned())
        })
    })
}

fn same_object(a: &uwf_jsonata::Value, b: &uwf_jsonata::Value) -> bool {
    match (a, b) {
        (uwf_jsonata::Value::Object(a, _), uwf_jsonata::Value::Object(b, _)) => {
            std::rc::Rc::ptr_eq(a, b)
        }
        _ => false,
    }
}

#[test]
fn kept_steps_give_the_document_of_every_head_and_convert_each_step_once() {
    let start = ctx(&[]).start;
    let steps = loaded(100, 12);
    let ok = |r: Result<crate::jsonata::Input, Failure>| r.unwrap_or_else(|e| panic!("{e:?}"));
    let mut first = None;
    // Head after head, as `thread run` decides.
    for k in 0..=steps.len() {
        let kept = ok(kept_input(&start, &steps[..k]));
        assert_eq!(
            document(&kept),
            document(&ok(loaded_input(&start, &steps[..k]))),
            "at {k}"
        );
        let (len, first_now) = kept_now();
        assert_eq!(len, k);
        if let Some(f) = &first {
            let now = first_now.unwrap_or_else(|| panic!("kept"));
            assert!(same_object(f, &now), "step 0 converted again at {k}");
        } else {
            first = first_now;
        }
    }
    // An earlier head of the same chain: its document, and the longer
    // chain still kept.
    let earlier = ok(kept_input(&start, &steps[..5]));
    assert_eq!(
        document(&earlier),
        document(&ok(loaded_input(&start, &steps[..5])))
    );
    assert_eq!(kept_now().0, steps.len());

    // A fork: the same first steps, then another one. Its own document;
    // what is kept is now that chain.
    let mut fork = steps[..6].to_vec();
    fork.extend(loaded(500, 2));
    let forked = ok(kept_input(&start, &fork));
    assert_eq!(
        document(&forked),
        document(&ok(loaded_input(&start, &fork)))
    );
    assert_eq!(kept_now().0, fork.len());

    // Another thread altogether, then the first one again.
    let other = loaded(900, 3);
    assert_eq!(
        document(&ok(kept_input(&start, &other))),
        document(&ok(loaded_input(&start, &other)))
    );
    assert_eq!(
        document(&ok(kept_input(&start, &steps))),
        document(&ok(loaded_input(&start, &steps)))
    );
    assert_eq!(kept_now().0, steps.len());
}

#[test]
fn a_step_that_cannot_be_converted_leaves_the_kept_steps_whole() {
    let start = ctx(&[]).start;
    let mut steps = loaded(300, 4);
    let mut deep = json!(1);
    for _ in 0..(crate::jsonata::MAX_INPUT_DEPTH + 2) {
        deep = json!([deep]);
    }
    steps[3].output = deep;
    steps[3].payload.record.output = uwf_protocol::Hash::from_u64(4242);
    assert!(kept_input(&start, &steps[..3]).is_ok());
    assert!(kept_input(&start, &steps).is_err());
    assert_eq!(kept_now().0, 3, "the steps before the bad one stay kept");
    let again = kept_input(&start, &steps[..3]).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        document(&again),
        document(&loaded_input(&start, &steps[..3]).unwrap_or_else(|e| panic!("{e:?}")))
    );
}

#[test]
fn evaluations_run_on_the_calling_thread() {
    let here = std::thread::current().id();
    assert_eq!(
        crate::jsonata::on_big_stack(|| std::thread::current().id()),
        here
    );
}
