#![allow(clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn render(template: &str, output: Value) -> Result<String, String> {
    let compiled = compile(template, true).map_err(|e| e.to_string())?;
    crate::render_prompt(&compiled, &output).map_err(|e| e.to_string())
}

fn ok(template: &str, output: Value) -> String {
    render(template, output).unwrap_or_else(|e| panic!("{template}: {e}"))
}

fn compile_error(template: &str) -> TemplateError {
    compile(template, false).expect_err("the template is refused")
}

#[test]
fn variables_are_inserted_without_html_escaping() {
    let out = json!({"comments": "use <T> & \"Result<T, E>\" types"});
    assert_eq!(
        ok("Fix: {{comments}}", out.clone()),
        "Fix: use <T> & \"Result<T, E>\" types"
    );
    assert_eq!(
        ok("Fix: {{{comments}}}", out.clone()),
        "Fix: use <T> & \"Result<T, E>\" types"
    );
    assert_eq!(
        ok("Fix: {{& comments }}", out),
        "Fix: use <T> & \"Result<T, E>\" types"
    );
}

#[test]
fn status_and_nested_paths() {
    let out = json!({"$status": "rejected", "review": {"by": "ana", "notes": {"n": 2}}});
    assert_eq!(
        ok("{{$status}} by {{ review.by }} ({{review.notes.n}})", out),
        "rejected by ana (2)"
    );
}

#[test]
fn values_print_as_javascript_prints_them() {
    let out = json!({
        "files": ["a.rs", "b.rs"], "nested": [1, [2, 3], null], "obj": {"a": 1},
        "n": 1.5, "big": 12, "yes": true, "nothing": null
    });
    assert_eq!(ok("[{{files}}]", out.clone()), "[a.rs,b.rs]");
    assert_eq!(ok("[{{nested}}]", out.clone()), "[1,2,3,]");
    assert_eq!(ok("[{{obj}}]", out.clone()), "[[object Object]]");
    assert_eq!(ok("[{{n}} {{big}} {{yes}}]", out.clone()), "[1.5 12 true]");
    assert_eq!(ok("[{{nothing}}{{missing}}]", out), "[]");
}

#[test]
fn sections_repeat_render_once_or_skip() {
    let out = json!({
        "items": [{"name": "a"}, {"name": "b"}], "tags": ["x", "y"], "empty": [],
        "user": {"name": "ana"}, "flag": true, "off": false, "zero": 0, "blank": "",
        "title": "T"
    });
    assert_eq!(
        ok("{{#items}}<{{name}}>{{/items}}!", out.clone()),
        "<a><b>!"
    );
    assert_eq!(ok("{{#tags}}{{.}};{{/tags}}!", out.clone()), "x;y;!");
    assert_eq!(ok("{{#user}}hi {{name}}{{/user}}!", out.clone()), "hi ana!");
    // Names not found in the item come from the outer context.
    assert_eq!(
        ok("{{#items}}{{title}}{{name}} {{/items}}!", out.clone()),
        "Ta Tb !"
    );
    for falsy in ["empty", "off", "zero", "blank", "missing"] {
        assert_eq!(
            ok(&format!("{{{{#{falsy}}}}}X{{{{/{falsy}}}}}!"), out.clone()),
            "!"
        );
        assert_eq!(
            ok(&format!("{{{{^{falsy}}}}}X{{{{/{falsy}}}}}!"), out.clone()),
            "X!"
        );
    }
    assert_eq!(ok("{{#flag}}on{{/flag}}{{^flag}}off{{/flag}}!", out), "on!");
}

#[test]
fn nested_sections_see_every_enclosing_context() {
    let out =
        json!({"groups": [{"g": "A", "items": [1, 2]}, {"g": "B", "items": [3]}], "sep": "/"});
    assert_eq!(
        ok(
            "{{#groups}}{{#items}}{{g}}{{.}}{{sep}}{{/items}}{{/groups}}!",
            out
        ),
        "A1/A2/B3/!"
    );
}

#[test]
fn standalone_section_lines_disappear() {
    let out = json!({"items": ["a", "b"]});
    assert_eq!(
        ok("List:\n{{#items}}\n- {{.}}\n{{/items}}\nEnd", out.clone()),
        "List:\n- a\n- b\nEnd"
    );
    assert_eq!(ok("A\n  {{! a note }}\nB", out), "A\nB");
}

#[test]
fn liquid_filters() {
    let out = json!({"specFiles": ["specs/a.md", "specs/b.md"], "name": "Ana", "none": null});
    assert_eq!(
        ok("Specs: {{ specFiles | join: \", \" }}.", out.clone()),
        "Specs: specs/a.md, specs/b.md."
    );
    assert_eq!(
        ok("[{{ specFiles | join }}]", out.clone()),
        "[specs/a.md specs/b.md]"
    );
    assert_eq!(
        ok(
            "{{ name | upcase }} {{ name | downcase | append: '!' }}",
            out.clone()
        ),
        "ANA ana!"
    );
    assert_eq!(
        ok(
            "{{ none | default: 'n/a' }} {{ specFiles | size }}",
            out.clone()
        ),
        "n/a 2"
    );
    assert_eq!(ok("{{ name | prepend: \"Dr \" }}", out), "Dr Ana");
}

#[test]
fn a_prompt_that_renders_to_nothing_is_refused() {
    let e = render("{{missing}}", json!({})).expect_err("empty");
    assert!(e.contains("rendered to an empty text"), "{e}");
    let e = render("  {{#items}}x{{/items}}  ", json!({"items": []})).expect_err("empty");
    assert!(e.contains("rendered to an empty text"), "{e}");
    assert_eq!(ok("{{present}}", json!({"present": "x"})), "x");
    // Literal text can never render to nothing: no check needed.
    assert_eq!(
        compile("Go: {{x}}", false).map(|c| c.contains("NonEmpty")),
        Ok(false)
    );
}

#[test]
fn syntax_errors_say_what_and_where() {
    let cases = [
        ("Fix {{comments", "has no closing `}}`", 4),
        ("Fix {{{comments}}", "has no closing `}}}`", 4),
        ("{{#items}}x", "the section `items` is never closed", 0),
        (
            "{{#a}}x{{/b}}",
            "closes the section `a` opened at byte 0",
            7,
        ),
        ("x{{/a}}", "never opened", 1),
        ("{{> header}}", "partials", 0),
        ("{{=<% %>=}}", "delimiter", 0),
        ("{% if x %}y{% endif %}", "Liquid tags", 0),
        ("a {{ }}", "the tag is empty", 4),
        ("{{ a b }}", "`a b` is not a variable name", 2),
        ("{{ a..b }}", "empty part", 2),
        (
            "{{ x | sort }}",
            "the Liquid filter `sort` is not supported",
            2,
        ),
        ("{{ x | default }}", "takes one argument", 2),
        ("{{ x | upcase: 1 }}", "takes no argument", 2),
    ];
    for (template, message, offset) in cases {
        let e = compile_error(template);
        assert!(
            e.message.contains(message),
            "{template}: {} lacks {message}",
            e.message
        );
        assert_eq!(e.offset, offset, "{template}: {e}");
    }
}

#[test]
fn compiled_templates_are_valid_uwf_templates() {
    let compiled = compile("Fix {{x}} {{#a}}{{b}}{{/a}}", false).unwrap_or_else(|e| panic!("{e}"));
    assert!(crate::template::parse(&compiled).is_ok(), "{compiled}");
    // Literal `{{` cannot be written in mustache, but `}}` and `{` can.
    assert_eq!(ok("a } b }} c { d", json!({})), "a } b }} c { d");
}

proptest! {
    #[test]
    fn text_without_tags_renders_as_itself(s in "[^{]*[^{\\s][^{]*") {
        prop_assert_eq!(render(&s, json!({})), Ok(s.clone()));
    }

    #[test]
    fn string_values_are_inserted_verbatim(v in "\\PC*", before in "[a-z][a-z ]{0,7}") {
        let out = json!({"x": v.clone()});
        prop_assert_eq!(render(&format!("{before}{{{{x}}}}"), out.clone()), Ok(format!("{before}{v}")));
        prop_assert_eq!(render(&format!("{before}{{{{{{x}}}}}}"), out), Ok(format!("{before}{v}")));
    }

    #[test]
    fn compiling_never_panics(s in "(\\{\\{|\\}\\}|\\{\\{\\{|[#^/!&.|:a-z'\" \n{}%])*") {
        if let Ok(c) = compile(&s, true) {
            prop_assert!(crate::template::parse(&c).is_ok(), "{}", c);
        }
    }
}
