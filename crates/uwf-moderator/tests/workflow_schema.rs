//! The JSON Schema of the workflow YAML accepts every example workflow and
//! refuses what the parser refuses for its shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::Value;
use uwf_moderator::definition::{WORKFLOW_SCHEMA, parse_yaml};

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(WORKFLOW_SCHEMA).unwrap();
    jsonschema::draft7::new(&schema).unwrap()
}

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap()
}

#[test]
fn every_example_workflow_matches_the_schema() {
    let v = validator();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".yaml") || name.ends_with(".mock.yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        parse_yaml(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        let errors: Vec<String> = v.iter_errors(&yaml(&text)).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        seen += 1;
    }
    assert!(seen >= 5, "only {seen} examples");
}

const BASE: &str = "name: w
roles:
  a:
    systemPrompt: s
    outputSchema: { type: object }
graph:
  $START: [{ role: a }]
  a: { done: $END, _: { role: a, prompt: again } }
";

#[test]
fn the_schema_refuses_what_the_parser_refuses() {
    let v = validator();
    assert!(v.is_valid(&yaml(BASE)));
    parse_yaml(BASE, "w").unwrap();
    let alternative = "name: w
x-anchors: { common: &c { type: object } }
roles:
  a: { goal: g, capabilities: [x], meta: *c }
conditions:
  c1: 'true'
  c2: { description: d, expression: 'false' }
graph:
  $START: { _: a }
  a: [{ role: $END, condition: c1 }, { role: a, condition: null }]
";
    assert!(v.is_valid(&yaml(alternative)));
    for bad in [
        // A misspelt key, a missing graph, both instruction styles, two
        // schemas, no schema, a transition without role, a bad condition.
        BASE.replace("systemPrompt", "systemPromt"),
        BASE.replace(
            "graph:\n  $START: [{ role: a }]\n  a: { done: $END, _: { role: a, prompt: again } }\n",
            "",
        ),
        BASE.replace("systemPrompt: s", "systemPrompt: s\n    goal: g"),
        BASE.replace(
            "outputSchema: { type: object }",
            "outputSchema: {}\n    meta: {}",
        ),
        BASE.replace("    outputSchema: { type: object }\n", ""),
        BASE.replace("[{ role: a }]", "[{ condition: null }]"),
        BASE.replace("name: w", "name: w\nconditions: { c: [1] }"),
        BASE.replace("  $START: [{ role: a }]\n", ""),
    ] {
        assert!(!v.is_valid(&yaml(&bad)), "accepted:\n{bad}");
        // Where both can tell, the parser refuses it too (x- keys and
        // `frontmatter` are newer syntax the schema already knows).
        assert!(parse_yaml(&bad, "w").is_err(), "parsed:\n{bad}");
    }
}
