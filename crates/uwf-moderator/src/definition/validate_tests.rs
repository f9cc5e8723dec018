use serde_json::json;
use uwf_protocol::WorkflowPayload;

use super::*;
use crate::definition::parse_yaml;

fn def(yaml: &str) -> WorkflowDefinition {
    parse_yaml(yaml, "v.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn codes(findings: &[Finding]) -> Vec<&'static str> {
    findings.iter().map(|f| f.code).collect()
}

const GOOD: &str = r#"
name: good
roles:
  a: { systemPrompt: s, outputSchema: { type: object } }
  b: { systemPrompt: s, outputSchema: { type: object } }
conditions:
  more: "$count(steps[role='a']) < 3"
graph:
  $START: [{ role: a, condition: null }]
  a: [{ role: b, condition: null, prompt: "{{summary}}" }]
  b: [{ role: a, condition: more }, { role: $END, condition: null }]
"#;

#[test]
fn a_good_workflow_is_clean() {
    let r = validate(&def(GOOD));
    assert_eq!(r, Report::default(), "{r}");
    assert!(r.is_ok());
}

#[test]
fn expression_errors() {
    let r = validate(&def(r#"
name: x
roles: { a: { systemPrompt: s, outputSchema: {} } }
conditions:
  broken: "steps[-1].output.approved ="
  parent: "%.x"
graph:
  $START: [{ role: a, condition: null }]
  a:
    - { role: a, condition: broken, prompt: "ok {{ 1 + }}" }
    - { role: a, condition: parent, prompt: "{{ unclosed" }
    - { role: $END, condition: null }
"#));
    assert_eq!(
        codes(&r.errors),
        [
            "prompt-syntax",
            "prompt-syntax",
            "condition-syntax",
            "condition-syntax"
        ],
        "{r}"
    );
    assert_eq!(r.errors[0].role.as_deref(), Some("a"));
    assert_eq!(r.errors[0].condition.as_deref(), Some("broken"));
    assert!(r.errors[1].message.contains("closing"), "{r}");
    assert_eq!(r.errors[2].condition.as_deref(), Some("broken"));
    assert!(r.errors[3].message.contains("%"), "{r}");
}

#[test]
fn graph_errors() {
    let r = validate(&def(r#"
name: x
roles:
  a: { systemPrompt: s, outputSchema: {} }
  orphan: { systemPrompt: s, outputSchema: {} }
  mute: { systemPrompt: s, outputSchema: {} }
  $bad: { systemPrompt: s, outputSchema: {} }
graph:
  $START: [{ role: a, condition: null }, { role: mute, condition: null }]
  a:
    - { role: ghost, condition: nope }
    - { role: $START, condition: null }
    - { role: $END, condition: null }
  orphan: [{ role: $END, condition: null }]
  $bad: [{ role: $END }]
  typo: [{ role: $END }]
  $END: [{ role: a }]
"#));
    let errors = codes(&r.errors);
    for want in [
        "invalid-role-name",
        "unknown-source",
        "no-transitions",
        "unknown-target",
        "unknown-condition",
        "unreachable",
        "no-end",
    ] {
        assert!(errors.contains(&want), "{want} missing: {r}");
    }
    let by = |code| r.errors.iter().filter(move |f| f.code == code);
    assert_eq!(
        by("unknown-source")
            .filter_map(|f| f.role.as_deref())
            .collect::<Vec<_>>(),
        ["$END", "typo"]
    );
    assert_eq!(
        by("no-transitions")
            .filter_map(|f| f.role.as_deref())
            .collect::<Vec<_>>(),
        ["mute"]
    );
    // `mute` is only reachable through a dead edge: unreachable too.
    assert_eq!(
        by("unreachable")
            .filter_map(|f| f.role.as_deref())
            .collect::<Vec<_>>(),
        ["$bad", "mute", "orphan"]
    );
    assert_eq!(by("unknown-target").count(), 2);
    let warnings = codes(&r.warnings);
    assert!(warnings.contains(&"dead-transition"), "{r}");
}

#[test]
fn no_end_and_no_way_out() {
    let r = validate(&def(r#"
name: x
roles:
  a: { systemPrompt: s, outputSchema: {} }
  b: { systemPrompt: s, outputSchema: {} }
conditions: { c: "true" }
graph:
  $START: [{ role: a, condition: null }]
  a: [{ role: b, condition: null }]
  b: [{ role: a, condition: null }]
"#));
    assert_eq!(codes(&r.errors), ["no-end"], "{r}");
    assert_eq!(codes(&r.warnings), ["unused-condition"], "{r}");

    let r = validate(&def(r#"
name: x
roles:
  a: { systemPrompt: s, outputSchema: {} }
  trap: { systemPrompt: s, outputSchema: {} }
conditions: { stuck: "steps[-1].output.stuck" }
graph:
  $START: [{ role: a, condition: null }]
  a: [{ role: trap, condition: stuck }, { role: $END, condition: null }]
  trap: [{ role: trap, condition: null }]
"#));
    assert!(r.is_ok(), "{r}");
    assert_eq!(codes(&r.warnings), ["no-way-out"], "{r}");
    assert_eq!(r.warnings[0].role.as_deref(), Some("trap"));
}

#[test]
fn warnings_do_not_block() {
    let r = validate(&def(r#"
name: x
roles: { a: { systemPrompt: s, outputSchema: {} } }
conditions: { never: "false", spare: "1" }
graph:
  $START: [{ role: a, condition: null }, { role: a, condition: never }]
  a: [{ role: $END, condition: never }]
"#));
    assert!(r.is_ok(), "{r}");
    assert_eq!(
        codes(&r.warnings),
        ["dead-transition", "no-fallback", "unused-condition"],
        "{r}"
    );
    assert_eq!(r.warnings[2].condition.as_deref(), Some("spare"));
}

#[test]
fn schema_must_be_an_object() {
    let mut d = def(GOOD);
    if let Some(r) = d.roles.get_mut("a") {
        r.output_schema = json!("5GWKR8TN1V3JA");
    }
    let r = validate(&d);
    assert_eq!(codes(&r.errors), ["schema-not-object"]);
    assert!(r.errors[0].message.contains("a string"), "{r}");
}

#[test]
fn no_roles_and_no_start() {
    let mut d = def(GOOD);
    d.roles.clear();
    d.graph.clear();
    d.conditions.clear();
    let r = validate(&d);
    assert_eq!(codes(&r.errors), ["no-roles", "no-start"], "{r}");
}

#[test]
fn payload_validation_shares_the_graph_checks() {
    let w: WorkflowPayload = serde_json::from_value(json!({
        "name": "w", "description": "",
        "roles": { "a": { "description": "", "systemPrompt": "", "outputSchema": "0000000000000" } },
        "conditions": { "bad": "(" },
        "graph": { "$START": [{ "role": "a", "condition": "bad" }, { "role": "b", "condition": null }] }
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let r = validate_payload(&w);
    assert_eq!(
        codes(&r.errors),
        [
            "no-transitions",
            "unknown-target",
            "condition-syntax",
            "no-end"
        ],
        "{r}"
    );
}

#[test]
fn findings_serialize() {
    let r = validate(&def(
        "name: x\nroles: {a: {systemPrompt: s, outputSchema: {}}}\nconditions: {u: \"1\"}\ngraph: {$START: [{role: a}], a: [{role: $END}]}\n",
    ));
    assert_eq!(
        serde_json::to_value(&r).unwrap_or_default(),
        json!({
            "errors": [],
            "warnings": [{
                "code": "unused-condition",
                "message": "condition `u` is not used by any transition",
                "role": null,
                "condition": "u"
            }]
        })
    );
    assert_eq!(
        r.to_string(),
        "warning [unused-condition] condition `u` is not used by any transition\n"
    );
}

#[test]
fn output_schemas_outside_the_subset_are_errors() {
    let def = crate::definition::parse_yaml(
        r#"
name: w
roles:
  a:
    systemPrompt: s
    outputSchema: { type: strin }
graph:
  $START: [{ role: a, condition: null }]
  a: [{ role: $END, condition: null }]
"#,
        "w.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = crate::definition::validate(&def);
    assert!(
        r.errors
            .iter()
            .any(|f| f.code == "invalid-schema" && f.role.as_deref() == Some("a")),
        "{r}"
    );
}

#[test]
fn typos_are_connected_to_what_they_probably_meant_and_every_finding_is_placed() {
    let yaml = r#"name: typo
roles:
  writer: { systemPrompt: s, outputSchema: { type: object } }
  critic: { systemPrompt: s, outputSchema: { type: object } }
conditions:
  notApproved: "steps[-1].output.approved = false"
  bad: "steps[ = 1"
graph:
  $START: [{ role: writer }]
  writer: [{ role: critc }, { role: critic }]
  critic:
    - { role: writer, condition: notAproved }
    - { role: $END }
"#;
    let mut r = validate(&def(yaml));
    r.locate(yaml, "typo.yaml");
    let find = |code: &str| {
        r.errors
            .iter()
            .chain(&r.warnings)
            .find(|f| f.code == code)
            .unwrap_or_else(|| panic!("no {code} in {r}"))
    };
    let unknown = find("unknown-condition");
    assert!(
        unknown.message.contains("did you mean `notApproved`?"),
        "{unknown}"
    );
    assert!(unknown.message.contains("(transition #1)"), "{unknown}");
    assert_eq!((unknown.line, unknown.column), (Some(12), Some(34)));
    let unused = r
        .warnings
        .iter()
        .find(|f| f.condition.as_deref() == Some("notApproved"))
        .unwrap_or_else(|| panic!("no unused notApproved in {r}"));
    assert!(unused.message.contains("uses `notAproved`"), "{unused}");
    assert_eq!((unused.line, unused.column), (Some(6), Some(3)));
    let target = find("unknown-target");
    assert!(
        target.message.contains("did you mean `critic`?"),
        "{target}"
    );
    assert_eq!(target.line, Some(10));
    // Every finding has a place, and its display a caret under it.
    for f in r.errors.iter().chain(&r.warnings) {
        assert!(f.line.is_some(), "not placed: {f}");
    }
    let syntax = find("condition-syntax").to_string();
    assert!(syntax.starts_with("typo.yaml:7:"), "{syntax}");
    assert!(
        syntax.contains("\n    7 |   bad: \"steps[ = 1\"\n      | "),
        "{syntax}"
    );
    assert!(syntax.ends_with('^'), "{syntax}");
}
