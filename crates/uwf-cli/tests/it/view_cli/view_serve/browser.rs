//! `uwf serve` in a real browser: Debian's headless `chromium` driven by
//! `chromedriver` over WebDriver ([`webdriver`](super::webdriver)), on
//! both stores. What a person does: open the list, open a thread, watch
//! a step land, answer the role that waits for them through the form
//! (a refusal shown first; fields, and the JSON text area of a schema
//! without properties), read the timeline and a step's input, fork from a
//! step, kill a thread, start a thread from the list.
//!
//! Without `chromedriver` the test says loudly that it skipped; with `CI`
//! set it fails (.ci/run installs it). With `UWF_SCREENSHOTS=1`, the
//! filesystem run writes the screenshots of docs/serve.md into docs/img/.

use std::path::PathBuf;
use std::process::Child;
use std::time::Instant;

use serde_json::{Value, json};

use super::Server;
use super::webdriver::{self, Driver, Session, WAIT};
use crate::common::{self, Backend, Env};

per_backend!(serve_in_a_browser);

/// A writer (uwf-mock) and a reviewer that a person answers: its
/// outputSchema has one field of each kind the form draws.
const WORKFLOW: &str = r#"name: review-change
description: "A writer proposes a change; a person reviews it"
roles:
  writer:
    description: "Writes the change"
    systemPrompt: "Write the change the task asks for."
    outputSchema:
      type: object
      properties:
        summary: { type: string }
      required: [summary]
  reviewer:
    description: "Reviews the change (a person, bound in config.yaml)"
    systemPrompt: "Review the change: approve it, or ask for another round."
    outputSchema:
      type: object
      properties:
        verdict: { enum: [approve, revise], description: "<i>approve</i> ends the thread" }
        score: { type: integer, minimum: 1, maximum: 5 }
        urgent: { type: boolean }
        comments: { type: string }
        labels: { type: array, items: { type: string } }
      required: [verdict, score]
graph:
  $START:
    - role: writer
      condition: null
  writer:
    - role: reviewer
      condition: null
  reviewer:
    - role: $END
      condition: null
"#;

/// A person's role whose outputSchema has no properties to draw: the form
/// is one text area for the whole output as JSON.
const FREE_FORM: &str = r#"name: free-note
description: "A person writes a note with any keys"
roles:
  noter:
    description: "Writes the note (a person, bound in config.yaml)"
    systemPrompt: "Write the note as a JSON object of strings."
    outputSchema:
      type: object
      additionalProperties: { type: string }
graph:
  $START:
    - role: noter
      condition: null
  noter:
    - role: $END
      condition: null
"#;

/// The writer takes a moment, so the page is open before its step lands.
const SCENARIO: &str = "roles:\n  writer:\n    - output: { summary: \"Cache the session <b>lookup</b>\" }\n      delay: 300ms\n";

/// The chromedriver to use; `None` (after saying so) when the test skips.
fn chromedriver() -> Option<PathBuf> {
    if let Some(bin) = webdriver::find() {
        return Some(bin);
    }
    let msg = "chromedriver not found (install Debian's `chromium-driver`, or set CHROMEDRIVER)";
    assert!(
        std::env::var_os("CI").is_none(),
        "{msg}; CI is set, and CI must run the browser tests (.ci/run installs chromium-driver)"
    );
    eprintln!("\n*** SKIPPED serve_in_a_browser: {msg} ***\n");
    None
}

/// Writes a screenshot of the window (of the element `css` selects, when
/// given) as docs/img/`name` when `UWF_SCREENSHOTS=1`, on the filesystem
/// run only (one set of pictures).
fn keep_screenshot(env: &Env, s: &Session, name: &str, css: Option<&str>) {
    if env.backend() != Backend::Fs || std::env::var("UWF_SCREENSHOTS").as_deref() != Ok("1") {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/img");
    std::fs::create_dir_all(&dir).unwrap();
    let element = css.map(|c| s.wait_for(c));
    std::fs::write(dir.join(name), s.screenshot(element.as_ref())).unwrap();
}

/// Waits for a background `uwf` to exit; its status code.
fn exit_code(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        assert!(Instant::now() < deadline, "uwf did not finish");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn serve_in_a_browser(backend: Backend) {
    let Some(bin) = chromedriver() else {
        return;
    };
    let Some(env) = Env::on(backend) else {
        return;
    };
    let scenario = env.file("writer.mock.yaml", SCENARIO);
    env.set_config(&format!(
        "agents:\n  mock: {{ command: '{}', args: ['{}'] }}\n  me: {{ human: true }}\ndefaultAgent: mock\nagentOverrides:\n  review-change: {{ reviewer: me }}\n  free-note: {{ noter: me }}\n",
        common::mock_bin().display(),
        scenario.display()
    ));
    let workflow = env.file("review-change.yaml", WORKFLOW);
    let workflow = workflow.to_str().unwrap();
    let start = |task: &str| {
        env.json(&["thread", "start", workflow, "-p", task])["thread"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let reviewed = start("Make <b>login</b> faster");
    let killed = start("Drop the legacy session table");
    let idle = start("Rename the config key");
    let free_form = env.file("free-note.yaml", FREE_FORM);
    let free = env.json(&[
        "thread",
        "start",
        free_form.to_str().unwrap(),
        "-p",
        "Notes",
    ])["thread"]
        .as_str()
        .unwrap()
        .to_string();
    let out = env.output(&["thread", "step", &free]);
    assert_eq!(out.status.code(), Some(4), "waits for the noter: {out:?}");
    let mut server = Server::start(&env, &["--new-token"]);
    let token = server.hello["token"].as_str().unwrap().to_string();

    let driver = Driver::start(&bin);
    let s = driver.session(env.dir.path());

    // The list: every thread, its task as text (never markup).
    s.goto(&server.url(""));
    let link = format!("a[href=\"/threads/{reviewed}\"]");
    for id in [&reviewed, &killed, &idle, &free] {
        s.wait_for(&format!("a[href=\"/threads/{id}\"]"));
    }
    let rows = s.text_of("#rows").unwrap();
    assert!(rows.contains("Make <b>login</b> faster"), "{rows}");
    assert_eq!(
        s.script("return document.querySelector('#rows b')", &[]),
        Value::Null
    );
    assert_eq!(s.text_of("#total").as_deref(), Some("4 threads"));

    // Open a thread from the list.
    s.click_css(&link);
    s.until("the thread's page", || {
        let page = s.script("return document.body.dataset.thread || null", &[]);
        (page == json!(reviewed)).then_some(())
    });
    // The event stream is open once its first `state` event has styled
    // the state: only then can a step be seen landing.
    s.wait_for("#state.state-idle");
    assert!(s.find("#answer-form").is_none(), "nobody is asked yet");
    s.type_into(&s.wait_for("#token"), &token);

    // A step lands live: the writer runs in the background, the page
    // lists its step, and the thread waits for the reviewer.
    let mut run = env
        .uwf_process()
        .args(["thread", "run", "--thread", &reviewed])
        .spawn()
        .unwrap();
    s.until("the writer's step on the page", || {
        s.text_of("#events")
            .filter(|t| t.contains("step 1 writer landed"))
    });
    s.until("the state waiting", || {
        (s.text_of("#state").as_deref() == Some("waiting")).then_some(())
    });
    assert_eq!(exit_code(&mut run), Some(4), "the run stops to wait");

    // The form, generated from the reviewer's outputSchema.
    s.wait_for("#answer-form");
    let kinds = s.script(
        "return Array.from(document.querySelectorAll('#answer-form [name]')).map(e => \
         [e.name, e.tagName.toLowerCase(), e.type, e.required])",
        &[],
    );
    assert_eq!(
        kinds,
        json!([
            ["verdict", "select", "select-one", true],
            ["score", "input", "number", true],
            ["urgent", "input", "checkbox", false],
            ["comments", "textarea", "textarea", false],
            ["labels", "textarea", "textarea", false],
        ])
    );
    let marked = s.script(
        "return Array.from(document.querySelectorAll('#answer-form .required')).map(e => e.parentElement.htmlFor)",
        &[],
    );
    assert_eq!(marked, json!(["field-verdict", "field-score"]));
    // The schema's texts are text, never markup.
    let hint = s.text_of("#answer-form .hint").unwrap();
    assert_eq!(hint, "<i>approve</i> ends the thread");
    assert_eq!(
        s.script("return document.querySelector('#answer-form i')", &[]),
        Value::Null
    );
    keep_screenshot(&env, &s, "serve-thread.png", None);

    // The browser checks what it can: nothing is sent while a required
    // field is empty or a JSON field does not parse.
    let invalid = || {
        s.script(
            "return Array.from(document.querySelectorAll('#answer-form :invalid')).map(e => e.name)",
            &[],
        )
    };
    assert_eq!(invalid(), json!(["verdict", "score"]));
    let labels = s.wait_for("#answer-form [name=labels]");
    s.type_into(&labels, "[oops");
    s.click(&s.wait_for("#answer-submit"));
    assert_eq!(invalid(), json!(["verdict", "score", "labels"]));
    assert_eq!(s.text_of("#answer-errors").as_deref(), Some(""));
    s.click(&s.wait_for("#answer-form [name=verdict] option:nth-child(2)"));
    s.type_into(&s.wait_for("#answer-form [name=score]"), "9");
    assert_eq!(
        invalid(),
        json!(["score", "labels"]),
        "9 is above the maximum"
    );
    let score = s.wait_for("#answer-form [name=score]");
    s.clear(&score);
    s.type_into(&score, "4");
    s.type_into(
        &s.wait_for("#answer-form [name=comments]"),
        "Looks <b>good</b>",
    );
    // JSON that parses but that the schema refuses: the server says why.
    s.clear(&labels);
    s.type_into(&labels, "[\"fast\", 1]");
    assert_eq!(invalid(), json!([]));
    let before = env.json(&["thread", "show", &reviewed]);
    s.click(&s.wait_for("#answer-submit"));
    let refusal = s.until("the refusal under the form", || {
        s.text_of("#answer-errors").filter(|t| !t.is_empty())
    });
    assert!(refusal.contains("/labels/1"), "{refusal}");
    assert!(refusal.contains("is not of type \"string\""), "{refusal}");
    assert!(refusal.contains("uwf::agent::invalid_output"), "{refusal}");
    let marked = s.script(
        "return Array.from(document.querySelectorAll('#answer-form .field.refused')).map(e => e.dataset.name)",
        &[],
    );
    assert_eq!(marked, json!(["labels"]), "the field the refusal names");
    let after = env.json(&["thread", "show", &reviewed]);
    assert_eq!(
        after["head"], before["head"],
        "a refused answer wrote a step"
    );
    assert_eq!(after["state"], "waiting");
    keep_screenshot(&env, &s, "serve-refused.png", Some("#actions"));

    // The answer, fixed: the step lands and the thread ends.
    s.clear(&labels);
    s.type_into(&labels, "[\"fast\", \"ui\"]");
    s.type_into(&s.wait_for("#answer-form input[type=text]"), "ann");
    s.click(&s.wait_for("#answer-submit"));
    s.until("the reviewer's step on the page", || {
        s.text_of("#events")
            .filter(|t| t.contains("step 2 reviewer landed"))
    });
    let steps = env.json(&["thread", "steps", &reviewed]);
    let last = steps["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "reviewer", "{last:#}");
    assert_eq!(last["agent"], "human:ann", "{last:#}");
    assert_eq!(
        last["output"],
        json!({"verdict": "approve", "score": 4, "urgent": false,
               "comments": "Looks <b>good</b>", "labels": ["fast", "ui"]}),
        "the form's fields, typed as the schema says"
    );
    // The answer was the thread's last step: it is done, nothing to act on.
    s.until("the state done", || {
        (s.text_of("#state").as_deref() == Some("done")).then_some(())
    });
    s.until("the form gone", || {
        s.find("#answer-form").is_none().then_some(())
    });
    assert_eq!(
        s.script("return document.getElementById('actions').hidden", &[]),
        json!(true)
    );

    // The timeline: each step with its agent and how long it took; a
    // step's input, rebuilt as the agent kit built it, opened on demand.
    let writer_hash = steps["steps"][1]["hash"].as_str().unwrap().to_string();
    let writer_row = format!("#steps tr[data-hash=\"{writer_hash}\"]");
    s.until("the timeline drawn to the last step", || {
        s.text_of("#steps").filter(|t| t.contains("human:ann"))
    });
    let took = s.text_of(&format!("{writer_row} td.took")).unwrap();
    assert!(took.ends_with(" s") || took.ends_with(" ms"), "{took:?}");
    s.click(&s.wait_for(&format!("{writer_row} + tr.input summary")));
    let input = s.until("the writer's input", || {
        s.text_of(&format!("{writer_row} + tr.input pre"))
            .filter(|t| t.contains("## Task"))
    });
    assert!(input.contains("Make <b>login</b> faster"), "{input}");
    assert!(
        input.contains("Write the change the task asks for."),
        "{input}"
    );
    // Fork from the writer's step: a new thread whose head is that step,
    // linked from the page.
    s.click(&s.wait_for(&format!("{writer_row} button.fork")));
    let forked = s.until("the fork's link", || {
        s.find("#forked")?;
        s.text_of("#forked")
    });
    assert_eq!(
        env.json(&["thread", "show", &forked])["head"],
        writer_hash.as_str(),
        "the fork starts at the writer's step"
    );
    keep_screenshot(&env, &s, "serve-timeline.png", Some("body"));

    // A schema without properties: the whole output typed as JSON, which
    // must be an object before the browser sends it.
    s.goto(&server.url(&format!("threads/{free}")));
    let area = s.wait_for("#answer-form textarea");
    let fields = s.script(
        "return Array.from(document.querySelectorAll('#answer-form textarea, #answer-form select, #answer-form input:not([type=text])')).map(e => [e.dataset.kind, e.labels[0].textContent])",
        &[],
    );
    assert_eq!(fields, json!([["json", "output (JSON) *"]]));
    s.clear(&area);
    s.type_into(&area, "[1]");
    assert_eq!(invalid(), json!([""]), "an array is not an object");
    s.clear(&area);
    s.type_into(&area, "{\"topic\": 1}");
    assert_eq!(invalid(), json!([]));
    s.click(&s.wait_for("#answer-submit"));
    let refusal = s.until("the refusal under the form", || {
        s.text_of("#answer-errors").filter(|t| !t.is_empty())
    });
    assert!(refusal.contains("/topic"), "{refusal}");
    s.clear(&area);
    s.type_into(&area, "{\"topic\": \"cache\"}");
    s.click(&s.wait_for("#answer-submit"));
    s.until("the state done", || {
        (s.text_of("#state").as_deref() == Some("done")).then_some(())
    });
    let steps = env.json(&["thread", "steps", &free]);
    let last = steps["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["output"], json!({"topic": "cache"}), "{last:#}");

    // A failed attempt of the step still to come: the timeline's last row.
    let out = env.output(&["thread", "step", &idle, "--agent", "false"]);
    assert!(!out.status.success(), "{out:?}");
    s.goto(&server.url(&format!("threads/{idle}")));
    let pending = s.until("the failed attempt in the timeline", || {
        s.find("#steps tr.pending")?;
        s.text_of("#steps tr.pending")
    });
    assert!(pending.contains("writer"), "{pending}");
    assert!(
        pending.contains("#1 false: exited with status 1"),
        "{pending}"
    );
    // Queue it for the workers from its page; the button then goes away.
    s.until("the kept token", || {
        (s.script("return document.getElementById('token').value", &[]) == json!(token))
            .then_some(())
    });
    s.click(&s.until("the run button", || s.find("#run:not([hidden])")));
    s.until("the run queued", || {
        s.text_of("#action-status")
            .filter(|t| t == "queued for the workers")
    });
    assert_eq!(
        env.json(&["thread", "show", &idle])["run"]["state"],
        "queued"
    );
    s.until("the run button hidden", || s.find("#run[hidden]"));

    // Kill a thread from its page; the token typed before is kept for the tab.
    s.goto(&server.url(&format!("threads/{killed}")));
    s.until("the kept token", || {
        (s.script("return document.getElementById('token').value", &[]) == json!(token))
            .then_some(())
    });
    s.click(&s.wait_for("#kill"));
    s.accept_dialog();
    s.until("the state killed", || {
        (s.text_of("#state").as_deref() == Some("killed")).then_some(())
    });
    s.until("the actions hidden", || {
        (s.script("return document.getElementById('actions').hidden", &[]) == json!(true))
            .then_some(())
    });
    let history = env.history();
    let entry = history
        .iter()
        .find(|h| h["thread"] == killed.as_str())
        .unwrap();
    assert_eq!(entry["reason"], "killed", "{entry}");

    // Back to the list: each thread in its new state.
    s.goto(&server.url(""));
    s.until("the killed thread in the list", || {
        s.text_of("#rows").filter(|t| t.contains("killed"))
    });
    keep_screenshot(&env, &s, "serve-list.png", Some("body"));

    // Start a thread of a registered workflow from the list page; the
    // page then shows the new thread.
    s.until("the registered workflows offered", || {
        s.find("#start-workflow option[value=\"review-change\"]")
    });
    s.click(&s.wait_for("#start-workflow option[value=\"review-change\"]"));
    s.type_into(&s.wait_for("#start-prompt"), "Speed up the <i>search</i>");
    s.click(&s.wait_for("#start-submit"));
    let known = [&reviewed, &killed, &idle, &free, &forked];
    let started = s.until("the new thread's page", || {
        let id = s.script("return document.body.dataset.thread || null", &[]);
        id.as_str()
            .filter(|id| !known.iter().any(|k| k.as_str() == *id))
            .map(str::to_string)
    });
    let shown = env.json(&["thread", "show", &started]);
    assert_eq!(shown["task"], "Speed up the <i>search</i>", "{shown:#}");
    assert_eq!(shown["name"], "review-change");
    assert_eq!(
        s.text_of(".task").as_deref(),
        Some("Speed up the <i>search</i>")
    );
    drop(s);
    assert!(server.stop().success());
}
