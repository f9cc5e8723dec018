use proptest::prelude::*;
use serde_json::json;
use uwf_protocol::{
    ConditionDefinition, ModeratorContext, RoleDefinition, StartNodePayload, StepContext,
    Transition, WorkflowPayload,
};

use super::*;
use crate::evaluate;

/// The canonical form's example, verbatim (docs/workflow.md, "Canonical
/// form").
const SEED_002: &str = r#"
name: "solve-issue"
description: "End-to-end issue resolution"
roles:
  planner:
    description: "Creates implementation plan"
    systemPrompt: "You are a planning agent. Analyze the issue and create a step-by-step plan."
    outputSchema:
      type: object
      properties:
        plan: { type: string }
        steps: { type: array, items: { type: string } }
      required: [plan, steps]
  developer:
    description: "Implements code changes"
    systemPrompt: "You are a developer agent. Implement the plan."
    outputSchema:
      type: object
      properties:
        filesChanged: { type: array, items: { type: string } }
        summary: { type: string }
      required: [filesChanged, summary]
  reviewer:
    description: "Reviews code changes"
    systemPrompt: "You are a code reviewer. Review the implementation."
    outputSchema:
      type: object
      properties:
        approved: { type: boolean }
        comments: { type: string }
      required: [approved, comments]
conditions:
  notApproved:
    description: "Reviewer rejected the implementation"
    expression: "steps[-1].output.approved = false"
graph:
  $START:
    - role: "planner"
      condition: null
  planner:
    - role: "developer"
      condition: null
  developer:
    - role: "reviewer"
      condition: null
  reviewer:
    - role: "developer"
      condition: "notApproved"
    - role: "$END"
      condition: null
"#;

/// The seed-003 form's role syntax with a status-map graph (docs/workflow.md,
/// "Seed-003 form", "Status maps").
const SEED_003: &str = r#"
name: "solve-issue"
description: "End-to-end issue resolution"
roles:
  planner:
    description: "Creates implementation plan"
    goal: "You are a planning agent. Analyze the issue and create a step-by-step plan."
    capabilities:
      - issue-analysis
      - planning
    procedure: "Analyze the issue and create a detailed, actionable implementation plan."
    output: "Output the plan summary and list of concrete steps."
    meta:
      type: object
      properties:
        plan: { type: string }
        steps: { type: array, items: { type: string } }
      required: [plan, steps]
  developer:
    description: "Implements code changes"
    goal: |
      You are a developer agent.
      Implement the plan.
    meta: { type: object }
  reviewer:
    description: "Reviews code changes"
    goal: "Review."
    meta: { type: object }
graph:
  $START: { _: planner }
  planner:
    needs_info: { role: planner, prompt: "Answer: {{question}}" }
    _: developer
  developer: { _: reviewer }
  reviewer:
    changes_requested: { role: developer, prompt: "Fix: {{comments}}" }
    approved: $END
"#;

fn parse(text: &str) -> WorkflowDefinition {
    parse_yaml(text, "test.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(text: &str) -> DefinitionError {
    match parse_yaml(text, "test.yaml") {
        Ok(d) => panic!("parsed: {d:?}"),
        Err(e) => e,
    }
}

/// The payload `register` would build, with a dummy schema hash.
fn payload(def: &WorkflowDefinition) -> WorkflowPayload {
    WorkflowPayload {
        name: def.name.clone(),
        description: def.description.clone(),
        roles: def
            .roles
            .iter()
            .map(|(k, r)| {
                (
                    k.clone(),
                    RoleDefinition {
                        description: r.description.clone(),
                        system_prompt: r.system_prompt.clone(),
                        output_schema: uwf_protocol::Hash::from_u64(0),
                    },
                )
            })
            .collect(),
        conditions: def.conditions.clone(),
        graph: def.graph.clone(),
    }
}

fn ctx(steps: &[(&str, serde_json::Value)]) -> ModeratorContext {
    ModeratorContext {
        start: StartNodePayload {
            workflow: uwf_protocol::Hash::from_u64(0),
            prompt: "p".into(),
            parent_state: None,
        },
        steps: steps
            .iter()
            .map(|(r, o)| StepContext {
                role: (*r).into(),
                output: o.clone(),
                detail: uwf_protocol::Hash::from_u64(0),
                agent: "a".into(),
            })
            .collect(),
    }
}

fn t(role: &str, condition: Option<&str>, prompt: Option<&str>) -> Transition {
    Transition {
        role: role.into(),
        condition: condition.map(Into::into),
        prompt: prompt.map(Into::into),
    }
}

#[test]
fn canonical_seed_002() {
    let d = parse(SEED_002);
    assert_eq!(d.name, "solve-issue");
    assert_eq!(d.description, "End-to-end issue resolution");
    assert_eq!(d.roles.len(), 3);
    assert_eq!(
        d.roles["reviewer"].output_schema["required"],
        json!(["approved", "comments"])
    );
    assert_eq!(
        d.conditions["notApproved"],
        ConditionDefinition::Described {
            description: "Reviewer rejected the implementation".into(),
            expression: "steps[-1].output.approved = false".into(),
        }
    );
    assert_eq!(
        d.graph["reviewer"],
        vec![
            t("developer", Some("notApproved"), None),
            t("$END", None, None)
        ]
    );
    assert!(validate(&d).is_ok(), "{}", validate(&d));
}

#[test]
fn alternative_seed_003() {
    let d = parse(SEED_003);
    assert_eq!(
        d.roles["planner"].system_prompt,
        "## Goal\nYou are a planning agent. Analyze the issue and create a step-by-step plan.\n\n\
         ## Capabilities\n- issue-analysis\n- planning\n\n\
         ## Procedure\nAnalyze the issue and create a detailed, actionable implementation plan.\n\n\
         ## Output\nOutput the plan summary and list of concrete steps."
    );
    assert_eq!(
        d.roles["developer"].system_prompt,
        "## Goal\nYou are a developer agent.\nImplement the plan."
    );
    assert_eq!(
        d.roles["planner"].output_schema["required"],
        json!(["plan", "steps"])
    );

    assert_eq!(d.graph["$START"], vec![t("planner", None, None)]);
    assert_eq!(
        d.graph["planner"],
        vec![
            t(
                "planner",
                Some("planner.$status=needs_info"),
                // The seed-003 form's prompts are mustache (docs/workflow.md,
                // "Which template language a prompt is written in": status
                // maps, and tags that read the same in both languages).
                Some(r#"Answer: {{ $__uwfText($__uwfGet("question")) }}"#)
            ),
            t("developer", None, None),
        ]
    );
    assert_eq!(
        d.graph["reviewer"],
        vec![
            t(
                "developer",
                Some("reviewer.$status=changes_requested"),
                Some(r#"Fix: {{ $__uwfText($__uwfGet("comments")) }}"#)
            ),
            t("$END", Some("reviewer.$status=approved"), None),
        ]
    );
    assert_eq!(
        d.conditions["reviewer.$status=approved"].expression(),
        r#"steps[-1].output.`$status` = "approved""#
    );
    let report = validate(&d);
    assert!(report.is_ok(), "{report}");
    // The reviewer has no `_`: flagged, not refused.
    assert_eq!(
        report
            .warnings
            .iter()
            .map(|w| (w.code, w.role.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("no-fallback", Some("reviewer")),
            // Read as mustache because of the status maps, with a note.
            ("prompt-language", None),
            // `question` is not in the planner's schema.
            ("unknown-variable", Some("planner"))
        ]
    );
    // Transitions are numbered from 1, as everywhere people read them.
    let unknown = report
        .warnings
        .iter()
        .find(|w| w.code == "unknown-variable")
        .map(|w| w.message.clone())
        .unwrap_or_default();
    assert!(unknown.contains("(transition #1)"), "{unknown}");
}

#[test]
fn status_routing_end_to_end() {
    let w = payload(&parse(SEED_003));
    let next = |steps: &[(&str, serde_json::Value)]| evaluate(&w, &ctx(steps));
    let ok = |steps: &[(&str, serde_json::Value)]| next(steps).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok(&[]).next, "planner");
    let d = ok(&[(
        "planner",
        json!({"$status": "needs_info", "question": "which db?"}),
    )]);
    assert_eq!(
        (d.next.as_str(), d.prompt.as_deref()),
        ("planner", Some("Answer: which db?"))
    );
    // No `$status`: the fallback.
    assert_eq!(ok(&[("planner", json!({"plan": "p"}))]).next, "developer");
    // `status` (without `$`) is not the routing field.
    assert_eq!(
        ok(&[("planner", json!({"status": "needs_info"}))]).next,
        "developer"
    );
    let d = ok(&[(
        "reviewer",
        json!({"$status": "changes_requested", "comments": "tests"}),
    )]);
    assert_eq!(
        (d.next.as_str(), d.prompt.as_deref()),
        ("developer", Some("Fix: tests"))
    );
    assert!(ok(&[("reviewer", json!({"$status": "approved"}))]).is_end());
    // No fallback and an unknown status: the moderator refuses.
    assert!(matches!(
        next(&[("reviewer", json!({"$status": "maybe"}))]),
        Err(crate::ModeratorError::NoMatch { tried, .. }) if tried.len() == 2
    ));
}

#[test]
fn conditions_accept_scalars_and_expression_only_maps() {
    let d = parse(
        "name: n\nroles: {a: {systemPrompt: s, outputSchema: {}}}\n\
         conditions:\n  always: true\n  n: 3\n  e: {expression: \"x > 1\"}\n\
         graph: {$START: [{role: a}], a: [{role: $END, condition: always}]}\n",
    );
    assert_eq!(
        d.conditions["always"],
        ConditionDefinition::Expression("true".into())
    );
    assert_eq!(d.conditions["n"].expression(), "3");
    assert_eq!(
        d.conditions["e"],
        ConditionDefinition::Expression("x > 1".into())
    );
    // `condition` may be omitted: unconditional.
    assert_eq!(d.graph["$START"], vec![t("a", None, None)]);
    assert_eq!(d.description, "");
    assert_eq!(d.roles["a"].description, "");
}

#[test]
fn yaml_syntax_error_has_location() {
    let e = parse_err("name: x\nroles: {}\ngraph: {$START: [}\n");
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.column.is_some());
    assert!(e.to_string().starts_with("test.yaml:3:"), "{e}");
    assert!(e.span.is_some());
}

#[test]
fn missing_name() {
    let e = parse_err("description: d\nroles: {}\ngraph: {$START: []}\n");
    assert!(e.message.contains("no `name`"), "{e}");
    assert!(
        e.help.as_deref().is_some_and(|h| h.contains("name:")),
        "{e:?}"
    );
    assert_eq!(e.line, Some(1));
}

#[test]
fn role_without_output_schema_points_at_the_role() {
    let text = "name: x\nroles:\n  ok:\n    systemPrompt: s\n    outputSchema: {}\n  bad:\n    description: d\n    systemPrompt: s\ngraph: {$START: []}\n";
    let e = parse_err(text);
    assert!(e.message.contains("roles.bad"), "{e}");
    assert!(e.message.contains("no output schema"), "{e}");
    assert!(
        e.help.as_deref().is_some_and(|h| h.contains("meta")),
        "{e:?}"
    );
    assert_eq!(e.line, Some(7), "{e}");
    let span = e.span.unwrap_or_else(|| panic!("no span"));
    assert_eq!(
        &text[span.offset()..span.offset() + span.len()],
        "description"
    );

    let e = parse_err("name: x\nroles:\n  a:\n    goal: g\ngraph: {$START: []}\n");
    assert!(e.message.contains("no output schema"), "{e}");
}

#[test]
fn role_may_not_mix_forms() {
    let e = parse_err(
        "name: x\nroles:\n  a:\n    systemPrompt: s\n    goal: g\n    meta: {}\ngraph: {$START: []}\n",
    );
    assert!(e.message.contains("both `systemPrompt` and `goal`"), "{e}");
    assert_eq!(e.line, Some(4));
    let e = parse_err(
        "name: x\nroles:\n  a:\n    systemPrompt: s\n    outputSchema: {}\n    meta: {}\ngraph: {$START: []}\n",
    );
    assert!(e.message.contains("both `outputSchema` and `meta`"), "{e}");
    let e = parse_err("name: x\nroles:\n  a:\n    outputSchema: {}\ngraph: {$START: []}\n");
    assert!(e.message.contains("no instructions"), "{e}");
}

#[test]
fn graph_without_start() {
    let e = parse_err(
        "name: x\nroles:\n  a: {systemPrompt: s, outputSchema: {}}\ngraph:\n  a: [{role: $END}]\n",
    );
    assert!(e.message.contains("no `$START`"), "{e}");
    assert_eq!(e.line, Some(5), "{e}");
}

#[test]
fn unknown_keys_are_refused_where_they_are() {
    let e = parse_err("name: x\nroels: {}\ngraph: {$START: []}\n");
    assert!(e.message.contains("unknown field `roels`"), "{e}");
    assert_eq!(e.line, Some(2));

    let e = parse_err(
        "name: x\nroles:\n  a:\n    systemPrompt: s\n    outputSchema: {}\n    sytemPrompt: t\ngraph: {$START: []}\n",
    );
    assert!(e.message.contains("unknown field `sytemPrompt`"), "{e}");
    assert_eq!(e.line, Some(6));

    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START:\n    - role: a\n      conditon: c\n");
    assert!(e.message.contains("unknown field `conditon`"), "{e}");
    assert_eq!(e.line, Some(6));

    let e = parse_err(
        "name: x\nroles: {}\nconditions:\n  c: {expression: x, descr: d}\ngraph: {$START: []}\n",
    );
    assert!(e.message.contains("unknown field `descr`"), "{e}");

    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START: {_: {role: a, promt: p}}\n");
    assert!(e.message.contains("unknown field `promt`"), "{e}");
}

#[test]
fn wrong_types_have_locations() {
    let e = parse_err(
        "name: x\nroles:\n  a:\n    goal: g\n    capabilities: shell\n    meta: {}\ngraph: {$START: []}\n",
    );
    assert!(e.message.contains("invalid type"), "{e}");
    assert_eq!(e.line, Some(5), "{e}");

    let e = parse_err("name: x\nroles:\n  a: just a string\ngraph: {$START: []}\n");
    assert!(e.message.contains("expected a role"), "{e}");
    assert_eq!(e.line, Some(3), "{e}");

    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START: planner\n");
    assert!(e.message.contains("expected transitions"), "{e}");
    assert_eq!(e.line, Some(4), "{e}");

    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START:\n    - planner\n");
    assert!(e.message.contains("expected a transition"), "{e}");
    assert_eq!(e.line, Some(5), "{e}");

    let e = parse_err("name: [x]\nroles: {}\ngraph: {$START: []}\n");
    assert!(e.message.contains("invalid type"), "{e}");
    assert_eq!(e.line, Some(1), "{e}");

    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START:\n    - {condition: null}\n");
    assert!(e.message.contains("missing field `role`"), "{e}");
    assert_eq!(e.line, Some(5), "{e}");
}

#[test]
fn duplicates_are_refused() {
    let e = parse_err(
        "name: x\nroles:\n  a: {systemPrompt: s, outputSchema: {}}\n  a: {systemPrompt: t, outputSchema: {}}\ngraph: {$START: []}\n",
    );
    assert!(e.message.contains("duplicate key `a`"), "{e}");
    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START: {_: a, _: b}\n");
    assert!(e.message.contains("duplicate key `_`"), "{e}");
}

#[test]
fn generated_names_may_not_clash() {
    let e = parse_err(
        "name: x\nroles: {}\nconditions:\n  a.$status=done: \"true\"\ngraph:\n  $START: {_: a}\n  a: {done: $END}\n",
    );
    assert!(e.message.contains("`a.$status=done`"), "{e}");
    assert!(
        e.help.as_deref().is_some_and(|h| h.contains("reserved")),
        "{e:?}"
    );
}

#[test]
fn start_status_map_only_takes_fallback() {
    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START: {ready: a, _: a}\n");
    assert!(e.message.contains("`ready`"), "{e}");
    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START: {}\n");
    assert!(e.message.contains("empty"), "{e}");
}

#[test]
fn empty_and_non_mapping_documents() {
    let e = parse_err("");
    assert!(!e.message.is_empty());
    let e = parse_err("- a\n- b\n");
    assert!(e.message.contains("expected a workflow"), "{e}");
    let doc = "roles: {}\ngraph: {$START: [{role: $END}]}\n";
    let e = parse_err(&format!("name: a\n{doc}---\nname: b\n{doc}"));
    assert!(e.message.contains("more than one document"), "{e}");
}

#[test]
fn display_and_diagnostic() {
    let e = parse_err("name: x\nroles:\n  a: {systemPrompt: s}\ngraph: {$START: []}\n");
    let shown = e.to_string();
    assert!(shown.starts_with("test.yaml:3:"), "{shown}");
    assert!(!shown.contains(" at line "), "{shown}");
    assert!(!shown.contains('\u{1f}'), "{shown}");
    use miette::Diagnostic;
    assert!(e.source_code().is_some());
    assert_eq!(e.labels().map(Iterator::count), Some(1));
    assert_eq!(
        e.code().map(|c| c.to_string()).as_deref(),
        Some("uwf::workflow::definition")
    );
}

#[test]
fn canonical_form_round_trips() {
    for text in [SEED_002, SEED_003] {
        let d = parse(text);
        let yaml = serde_yaml::to_string(&d).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parse(&yaml), d, "{yaml}");
    }
}

fn status_workflow(status: &str) -> String {
    // A flow-style YAML key: quote it as a JSON string (valid YAML), with
    // the characters YAML reads as line breaks inside a quoted scalar
    // (NEL, LS, PS), which JSON leaves as they are, escaped.
    let key = serde_json::to_string(status)
        .unwrap_or_default()
        .replace('\u{85}', "\\u0085")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    format!(
        "name: s\nroles:\n  a: {{systemPrompt: s, outputSchema: {{}}}}\n\
         graph:\n  $START: {{_: a}}\n  a: {{{key}: $END, _: a}}\n"
    )
}

/// Statuses holding characters YAML reads as line breaks (found by the
/// property below) compile like any other.
#[test]
fn statuses_with_yaml_line_breaks_compile() {
    for status in ["\u{85}", "\u{2028}", "a\u{2029}b"] {
        let d = parse_yaml(&status_workflow(status), "s.yaml").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            d.conditions.contains_key(&format!("a.$status={status}")),
            "{status:?}: {:?}",
            d.conditions.keys().collect::<Vec<_>>()
        );
    }
}

proptest! {
    #[test]
    fn any_status_compiles_to_an_exact_match(status in "\\PC{1,12}|[\"\\\\`'${}\\n\\t ]{1,6}") {
        prop_assume!(status != "_");
        let d = parse_yaml(&status_workflow(&status), "s.yaml")
            .unwrap_or_else(|e| panic!("{e}"));
        let name = format!("a.$status={status}");
        prop_assert!(d.conditions.contains_key(&name));
        let report = validate(&d);
        prop_assert!(report.is_ok(), "{}", report);
        let w = payload(&d);
        let same = evaluate(&w, &ctx(&[("a", json!({"$status": status}))]))
            .unwrap_or_else(|e| panic!("{e}"));
        prop_assert!(same.is_end());
        let other = evaluate(&w, &ctx(&[("a", json!({"$status": format!("{status}x")}))]))
            .unwrap_or_else(|e| panic!("{e}"));
        prop_assert!(!other.is_end());
    }

    #[test]
    fn parse_never_panics(text in "[a-z$_{}\\[\\]:, \\n\"-]{0,80}") {
        let _ = parse_yaml(&text, "fuzz.yaml");
    }

    #[test]
    fn errors_are_located_within_the_text(extra in "[a-z]{1,8}", line in 0usize..6) {
        let mut lines: Vec<String> = SEED_002.lines().map(str::to_string).collect();
        let at = (line * 7 + 2).min(lines.len());
        lines.insert(at, format!("{extra}: [oops"));
        let text = lines.join("\n");
        if let Err(e) = parse_yaml(&text, "p.yaml") {
            if let Some(span) = e.span {
                prop_assert!(span.offset() + span.len() <= text.len());
            }
            prop_assert!(e.line.is_some());
        }
    }
}

// ---------------------------------------------------------------- upstream forms

/// A workflow in upstream's latest syntax (written for these tests).
const UPSTREAM_V1: &str = r#"
version: 1
name: fix-bug
description: Plan, then fix
x-shared:
  done-schema: &done
    oneOf:
      - properties:
          $status: { const: done }
          note: { type: string }
        required: [$status]
roles:
  planner:
    description: Plans
    goal: Plan the fix
    capabilities: []
    procedure: Read the report
    output: Set $status to ready, or wait for more information
    frontmatter:
      oneOf:
        - properties:
            $status: { const: ready }
            files: { type: array, items: { type: string } }
            branch: { type: string }
          required: [$status, files, branch]
        - properties:
            $status: { const: unclear }
            question: { type: string }
          required: [$status, question]
  fixer:
    description: Fixes
    goal: Fix it
    frontmatter: *done
graph:
  $START:
    new: { role: planner, prompt: "Plan the fix" }
    resume: { role: planner, prompt: "Continue where you stopped" }
  planner:
    ready: { role: fixer, prompt: "Fix {{ files | join: \", \" }} on {{ branch }}" }
    unclear: { role: $SUSPEND, prompt: "Waiting: {{{question}}}" }
  fixer:
    done: { role: $END, prompt: "Finished: {{$status}}" }
"#;

#[test]
fn upstream_latest_syntax_compiles_to_the_canonical_form() {
    let d = parse(UPSTREAM_V1);
    // `frontmatter` is the schema, also through a YAML anchor in an `x-` key;
    // the reserved status `$SUSPEND` is accepted besides it.
    let fixer = &d.roles["fixer"].output_schema["anyOf"];
    assert_eq!(
        fixer[0]["oneOf"][0]["properties"]["$status"]["const"],
        "done"
    );
    assert_eq!(fixer[1]["properties"]["$status"]["const"], "$SUSPEND");
    assert!(d.roles["planner"].output_schema["anyOf"][0]["oneOf"].is_array());
    assert_eq!(
        d.graph["fixer"][0],
        t("$SUSPEND", Some("fixer.$status=$SUSPEND"), None)
    );
    // `$START: {new, resume}`: resume first, under a generated condition.
    assert_eq!(
        d.graph["$START"],
        vec![
            t(
                "planner",
                Some("$START.resume"),
                Some("Continue where you stopped")
            ),
            t("planner", None, Some("Plan the fix")),
        ]
    );
    assert_eq!(
        d.conditions["$START.resume"].expression(),
        "$count(steps) > 0"
    );
    // `$SUSPEND` stays a target; prompts are compiled to uwf templates.
    assert_eq!(d.graph["planner"][2].role, "$SUSPEND");
    let report = validate(&d);
    assert!(report.is_ok(), "{report}");
    // Upstream's status maps have no `_`: only `no-fallback` warnings.
    assert!(
        report.warnings.iter().all(|w| w.code == "no-fallback"),
        "{report}"
    );

    let w = payload(&d);
    let first = evaluate(&w, &ctx(&[])).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (first.next.as_str(), first.prompt.as_deref()),
        ("planner", Some("Plan the fix"))
    );
    let steps = [(
        "planner",
        json!({"$status": "ready", "files": ["a.rs", "b.rs"], "branch": "fix/1"}),
    )];
    let d1 = evaluate(&w, &ctx(&steps)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d1.prompt.as_deref(), Some("Fix a.rs, b.rs on fix/1"));
    let steps = [(
        "planner",
        json!({"$status": "unclear", "question": "Which <browser>?"}),
    )];
    let d2 = evaluate(&w, &ctx(&steps)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (d2.next.as_str(), d2.prompt.as_deref()),
        ("$SUSPEND", Some("Waiting: Which <browser>?"))
    );
    // Resumed: `$START`'s `resume` route, against the whole thread.
    let r = crate::evaluate_resume(&w, &ctx(&steps)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r.next.as_str(), r.prompt.as_deref()),
        ("planner", Some("Continue where you stopped"))
    );
    // Any role may finish with the reserved status.
    let steps = [("fixer", json!({"$status": "$SUSPEND", "reason": "blocked"}))];
    let wait = evaluate(&w, &ctx(&steps)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wait.next, "$SUSPEND");
    let steps = [("fixer", json!({"$status": "done"}))];
    let end = evaluate(&w, &ctx(&steps)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (end.next.as_str(), end.prompt.as_deref()),
        ("$END", Some("Finished: done"))
    );
}

#[test]
fn the_prompt_dialect_is_chosen_by_marker_version_or_syntax() {
    let wf = |head: &str, key: &str, start: &str| {
        format!(
            "{head}name: d\nroles:\n  a:\n    goal: g\n    {key}: {{type: object, properties: {{x: {{}}}}}}\n\
             graph:\n  $START: {start}\n  a:\n    _: {{ role: $END, prompt: \"Got {{{{{{x}}}}}}\" }}\n"
        )
    };
    // Upstream's markers: mustache (or Liquid with `version`); without
    // them, a prompt only mustache reads (`{{{x}}}`) is mustache.
    for (head, key, start) in [
        ("", "meta", "{_: a}"),
        ("", "frontmatter", "{_: a}"),
        ("", "meta", "{new: a, resume: a}"),
        ("version: 1\n", "meta", "{_: a}"),
        ("x-uwf-prompts: mustache\n", "meta", "{_: a}"),
        ("x-uwf-prompts: liquid\n", "meta", "{_: a}"),
    ] {
        let d = parse(&wf(head, key, start));
        let report = validate(&d);
        assert!(report.is_ok(), "{head}{key}: {report}");
        let out = evaluate(&payload(&d), &ctx(&[("a", json!({"x": "<1>"}))]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.prompt.as_deref(), Some("Got <1>"), "{head}{key}");
    }
    // The explicit marker wins over the syntax: JSONata templates, where
    // `{{{x}}}` is not valid.
    let d = parse(&wf("x-uwf-prompts: jsonata\n", "frontmatter", "{_: a}"));
    let report = validate(&d);
    assert!(
        report.errors.iter().any(|e| e.code == "prompt-syntax"),
        "{report}"
    );
    let e = parse_err(&wf("x-uwf-prompts: handlebars\n", "meta", "{_: a}"));
    assert!(e.message.contains("handlebars"), "{e}");
}

#[test]
fn upstream_forms_refused_with_a_reason() {
    let e = parse_err(
        "name: x\nroles:\n  a: {goal: g, meta: {}, frontmatter: {}}\ngraph: {$START: {_: a}}\n",
    );
    assert!(e.message.contains("both `meta` and `frontmatter`"), "{e}");
    let e = parse_err("version: 2\nname: x\nroles: {}\ngraph: {$START: {_: a}}\n");
    assert!(e.message.contains("`version: 2`"), "{e}");
    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START: {new: a, _: a}\n");
    assert!(e.message.contains("both `_` and `new`"), "{e}");
    let e = parse_err("name: x\nroles: {}\ngraph:\n  $START: {resume: a}\n");
    assert!(e.message.contains("which role runs first"), "{e}");
    let e = parse_err("name: x\nroles: {}\nx-ok: 1\nextra: 2\ngraph: {$START: {_: a}}\n");
    assert!(e.message.contains("unknown field `extra`"), "{e}");
    assert_eq!(e.line, Some(4), "{e}");
    // A mustache syntax error names the edge, the language and the place.
    let e = parse_err(
        "version: 1\nname: x\nroles:\n  a: {goal: g, frontmatter: {}}\ngraph:\n  $START: {new: a}\n  a:\n    done: {role: $END, prompt: \"Fix {{#files}}{{.}}\"}\n",
    );
    assert!(
        e.message
            .contains("`graph.a` (status `done`) is not a valid liquid template"),
        "{e}"
    );
    assert!(
        e.message.contains("the section `files` is never closed"),
        "{e}"
    );
    // Placed at the prompt, not at the start of the document.
    assert_eq!((e.line, e.column), (Some(8), Some(33)), "{e}");
    // An empty prompt: at its edge's entry.
    let e = parse_err(
        "# a comment\nname: x\nroles:\n  a: {goal: g, frontmatter: {}}\ngraph:\n  $START: {new: a}\n  a:\n    done: {role: $END, prompt: \"  \"}\n",
    );
    assert!(
        e.message.contains("`graph.a` (status `done`) is empty"),
        "{e}"
    );
    assert_eq!((e.line, e.column), (Some(7), Some(3)), "{e}");
    let e = parse_err(
        "name: x\nroles:\n  a: {goal: g, identity: i, meta: {}}\ngraph: {$START: {_: a}}\n",
    );
    assert!(e.message.contains("identity"), "{e}");
}

#[test]
fn identity_prepare_execute_report_roles() {
    let d = parse(
        "name: x\nroles:\n  a:\n    identity: You plan.\n    prepare: Read.\n    execute: Plan.\n    report: Say it.\n    outputSchema: {}\ngraph:\n  $START: [{role: a}]\n  a: [{role: $END}]\n",
    );
    assert_eq!(
        d.roles["a"].system_prompt,
        "## Identity\nYou plan.\n\n## Prepare\nRead.\n\n## Execute\nPlan.\n\n## Report\nSay it."
    );
}

#[test]
fn status_keys_must_be_statuses_the_schema_allows() {
    let d = parse(
        "version: 1\nname: x\nroles:\n  a:\n    goal: g\n    frontmatter:\n      oneOf:\n        - properties: {$status: {const: ok}, n: {}}\n        - properties: {$status: {const: bad}}\n  b:\n    goal: g\n    meta: {properties: {$status: {enum: [yes, no]}}}\ngraph:\n  $START: {new: a}\n  a:\n    ok: {role: b, prompt: \"n={{n}}\"}\n    okay: {role: b, prompt: \"typo\"}\n    bad: {role: $END, prompt: \"{{n}}\"}\n  b:\n    yes: {role: $END, prompt: e}\n    maybe: {role: $END, prompt: e}\n",
    );
    let report = validate(&d);
    let codes: Vec<(&str, Option<&str>)> = report
        .errors
        .iter()
        .map(|e| (e.code, e.condition.as_deref()))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("unknown-status", Some("a.$status=okay")),
            ("unknown-variable", Some("a.$status=bad")),
            ("unknown-status", Some("b.$status=maybe")),
            // Upstream's rule 3.4: `b` can finish with `no`, not routed.
            ("missing-status", None),
        ],
        "{report}"
    );
    let msg = &report.errors[1].message;
    assert!(
        msg.contains("reads `n`") && msg.contains("with $status \"bad\""),
        "{msg}"
    );
}

#[test]
fn a_workflow_without_new_forms_hashes_as_before() {
    // The compiled form of uwf's own syntax is unchanged by the upstream
    // support: same graph, same conditions, prompts kept as written (a
    // prompt only JSONata reads makes the status maps uwf's own, as in
    // examples/triage.yaml).
    let d = parse(&SEED_003.replace("{{question}}", "{{ $string(question) }}"));
    assert_eq!(
        d.graph["planner"][0].prompt.as_deref(),
        Some("Answer: {{ $string(question) }}")
    );
    assert!(
        validate(&d)
            .warnings
            .iter()
            .all(|w| w.code != "prompt-language")
    );
    assert!(!d.conditions.contains_key("$START.resume"));
}

#[test]
fn the_first_status_maps_routed_on_status() {
    // Upstream's status maps of 2026-05-25 read the output's `status`
    // (renamed `$status` the same day): a mustache-era role that declares
    // `status` and no `$status` routes on it.
    let d = parse(
        "name: x\nroles:\n  a:\n    goal: g\n    frontmatter: {properties: {status: {enum: [ok, ko]}}}\ngraph:\n  $START: {_: a}\n  a:\n    ok: {role: $END, prompt: done}\n    ko: {role: a, prompt: \"again: {{status}}\"}\n",
    );
    assert!(validate(&d).is_ok(), "{}", validate(&d));
    let w = payload(&d);
    let next = |out| {
        evaluate(&w, &ctx(&[("a", out)]))
            .unwrap_or_else(|e| panic!("{e}"))
            .next
    };
    assert_eq!(next(json!({"status": "ok"})), "$END");
    assert_eq!(next(json!({"status": "ko"})), "a");
    assert_eq!(
        d.conditions["a.status=ok"].expression(),
        r#"steps[-1].output.`status` = "ok""#
    );
}

#[test]
fn an_unrouted_or_missing_status_stops_the_thread() {
    // As upstream's moderator: a status with no edge, or no `$status` at
    // all, in a map without `_`, is an error (here `no_match`).
    let d = parse(UPSTREAM_V1);
    let w = payload(&d);
    for out in [json!({"$status": "other"}), json!({"plan": "x"})] {
        let e = evaluate(&w, &ctx(&[("planner", out.clone())])).map(|d| d.next);
        assert!(
            matches!(e, Err(crate::ModeratorError::NoMatch { .. })),
            "{out}: {e:?}"
        );
    }
}
