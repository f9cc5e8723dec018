//! Tests of [`execute`](crate::execute) against a real storage root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use uwf_cas::Hash;
use uwf_protocol::{StepNodePayload, ThreadId};

use crate::testing::{Fixture, REVIEW_PROMPT};
use crate::{AgentContext, AgentRun, BoxError, KitError, execute};

fn fixture() -> (Fixture, ThreadId, Hash) {
    let fx = Fixture::new().unwrap();
    let (thread, start) = fx.start_thread("Fix the login bug").unwrap();
    (fx, thread, start)
}

fn plan() -> Value {
    json!({ "plan": "do it", "steps": ["a", "b"] })
}

fn step_of(fx: &Fixture, hash: Hash) -> StepNodePayload {
    let node = fx.cas().get(hash).unwrap();
    assert_eq!(node.type_hash, fx.cas().types().step_node);
    serde_json::from_value(node.payload).unwrap()
}

fn payload(fx: &Fixture, hash: &Hash) -> Value {
    fx.cas().get(*hash).unwrap().payload
}

fn run_role(
    fx: &Fixture,
    thread: ThreadId,
    role: &str,
    f: impl FnOnce(&AgentContext) -> Result<AgentRun, BoxError>,
) -> Result<Hash, KitError> {
    execute("test-agent", fx.root(), &thread.to_string(), role, f)
}

#[test]
fn structured_output_becomes_a_first_step() {
    let (fx, thread, start) = fixture();
    let hash = run_role(&fx, thread, "planner", |ctx| {
        assert_eq!(ctx.role(), "planner");
        assert_eq!(ctx.start().prompt, "Fix the login bug");
        assert_eq!(ctx.start_hash(), ctx.head());
        assert!(ctx.steps().unwrap().is_empty());
        assert_eq!(ctx.prev(), None);
        assert_eq!(ctx.edge_prompt(), None, "$START → planner has no prompt");
        assert_eq!(ctx.workflow().name, crate::testing::WORKFLOW_NAME);
        assert_eq!(ctx.output_schema()["title"], "plan");
        assert_eq!(
            ctx.role_definition().system_prompt,
            "You are a planning agent."
        );
        Ok(AgentRun::output(plan()).with_answer("raw planner text"))
    })
    .unwrap();

    let step = step_of(&fx, hash);
    assert_eq!(step.start, start);
    assert_eq!(step.prev, None);
    assert_eq!(step.record.role, "planner");
    assert_eq!(step.record.agent, "test-agent");
    assert_eq!(payload(&fx, &step.record.output), plan());
    let output = fx.cas().get(step.record.output).unwrap();
    assert_eq!(
        fx.cas().schema(output.type_hash).unwrap()["title"],
        "plan",
        "the output is typed by the role's schema"
    );
    assert_eq!(
        payload(&fx, &step.record.detail),
        json!({ "text": "raw planner text" })
    );
    // The head is uwf's business.
    assert_eq!(fx.head(thread).unwrap(), Some(start));
}

#[test]
fn second_step_chains_prev_and_gets_the_edge_prompt() {
    let (fx, thread, start) = fixture();
    let first = run_role(&fx, thread, "planner", |_| Ok(AgentRun::output(plan()))).unwrap();
    fx.set_head(thread, first).unwrap();

    let second = run_role(&fx, thread, "reviewer", |ctx| {
        assert_eq!(ctx.head(), first);
        assert_eq!(ctx.step_hashes().unwrap(), &[first]);
        assert_eq!(ctx.steps().unwrap().len(), 1);
        assert_eq!(ctx.steps().unwrap()[0].role, "planner");
        assert_eq!(
            ctx.steps().unwrap()[0].output,
            plan(),
            "outputs are expanded"
        );
        assert_eq!(ctx.edge_prompt(), Some(REVIEW_PROMPT));
        assert_eq!(ctx.runs_of_role().unwrap(), 0);
        let system = ctx.system_prompt();
        assert!(
            system.contains("- `approved` (boolean, required)"),
            "{system}"
        );
        assert!(system.starts_with(&ctx.format_instruction()), "{system}");
        assert!(system.ends_with("You are a reviewer."), "{system}");
        let user = ctx.user_prompt().unwrap();
        assert!(user.starts_with("## Task\n\nFix the login bug\n"), "{user}");
        assert!(
            user.contains(&format!(
                "## Instructions for this step\n\n{REVIEW_PROMPT}\n"
            )),
            "{user}"
        );
        assert!(
            user.contains(&format!("### Step 1 · planner (by test-agent) · `{first}`")),
            "{user}"
        );
        assert_eq!(ctx.prompt().unwrap(), format!("{system}\n\n{user}"));
        Ok(AgentRun::output(
            json!({ "approved": false, "comments": "more" }),
        ))
    })
    .unwrap();
    let step = step_of(&fx, second);
    assert_eq!(step.prev, Some(first));
    assert_eq!(step.start, start);
    assert_eq!(step.record.role, "reviewer");
    fx.set_head(thread, second).unwrap();

    let third = run_role(&fx, thread, "planner", |ctx| {
        assert_eq!(
            ctx.edge_prompt(),
            Some("Address the review: more"),
            "rendered against the review"
        );
        assert_eq!(ctx.runs_of_role().unwrap(), 1);
        Ok(AgentRun::output(plan()))
    })
    .unwrap();
    assert_eq!(step_of(&fx, third).prev, Some(second));
}

#[test]
fn no_edge_prompt_when_the_moderator_picks_another_role() {
    let (fx, thread, _) = fixture();
    let first = run_role(&fx, thread, "planner", |_| Ok(AgentRun::output(plan()))).unwrap();
    fx.set_head(thread, first).unwrap();
    // The moderator would run the reviewer; run the planner again anyway.
    run_role(&fx, thread, "planner", |ctx| {
        assert_eq!(ctx.edge_prompt(), None);
        Ok(AgentRun::output(plan()))
    })
    .unwrap();
}

#[test]
fn frontmatter_answer_is_extracted() {
    let (fx, thread, _) = fixture();
    let answer = "---\nplan: refactor auth\nsteps:\n  - read\n  - write\nconfidence: 0.9\n---\n\n## Plan\nDetails.";
    let hash = run_role(&fx, thread, "planner", |_| Ok(AgentRun::text(answer))).unwrap();
    let step = step_of(&fx, hash);
    assert_eq!(
        payload(&fx, &step.record.output),
        json!({ "plan": "refactor auth", "steps": ["read", "write"] }),
        "undeclared fields are dropped"
    );
    assert_eq!(payload(&fx, &step.record.detail), json!({ "text": answer }));
}

#[test]
fn answer_without_frontmatter_and_without_config_is_a_clear_error() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, thread, "planner", |_| {
        Ok(AgentRun::text("I made a plan."))
    })
    .unwrap_err();
    let KitError::Extraction {
        role,
        layer1,
        cause,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(role, "planner");
    assert!(layer1.contains("no frontmatter"), "{layer1}");
    assert!(
        matches!(cause.as_ref(), KitError::NoConfig { path } if path.ends_with("config.yaml")),
        "{cause:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("no frontmatter") && text.contains("config.yaml"),
        "{text}"
    );
    // The library names no command; the agent binary's report says which.
    assert!(!err.help_text().unwrap_or_default().contains("uwf setup"));
    let report = format!("{:?}", crate::report(err));
    assert!(report.contains("uwf setup"), "{report}");
    assert_eq!(
        fx.cas().list_by_type(fx.cas().types().step_node).unwrap(),
        []
    );
}

#[test]
fn frontmatter_failing_the_schema_names_the_paths() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, thread, "planner", |_| {
        Ok(AgentRun::text("---\nplan: 3\n---\nbody"))
    })
    .unwrap_err();
    let KitError::Extraction { layer1, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(layer1.contains("/plan"), "{layer1}");
    assert!(layer1.contains("steps"), "{layer1}");
    assert!(
        format!("{:?}", miette::Report::new(err)).contains("frontmatter markdown"),
        "the help says how to use the fast path"
    );
}

#[test]
fn structured_output_failing_the_schema_names_the_paths() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, thread, "reviewer", |_| {
        Ok(AgentRun::output(
            json!({ "approved": "yes", "comments": "x" }),
        ))
    })
    .unwrap_err();
    let KitError::InvalidOutput {
        role, violations, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(role, "reviewer");
    assert!(violations.contains("/approved"), "{violations}");
}

#[test]
fn unknown_role_lists_the_roles() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, thread, "tester", |_| -> Result<AgentRun, BoxError> {
        panic!("must not run")
    })
    .unwrap_err();
    let KitError::UnknownRole {
        role,
        roles,
        workflow,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(role, "tester");
    assert_eq!(roles, "planner, reviewer");
    assert_eq!(workflow, crate::testing::WORKFLOW_NAME);
}

#[test]
fn inactive_and_malformed_threads() {
    let (fx, thread, _) = fixture();
    fx.remove_thread(thread).unwrap();
    let err = run_role(&fx, thread, "planner", |_| Ok(AgentRun::output(plan()))).unwrap_err();
    assert!(
        matches!(&err, KitError::NotActive { thread: t } if *t == thread),
        "{err:?}"
    );

    let other = ThreadId::new();
    let err = run_role(&fx, other, "planner", |_| Ok(AgentRun::output(plan()))).unwrap_err();
    assert!(matches!(err, KitError::NotActive { .. }), "{err:?}");

    let err = execute("test-agent", fx.root(), "not-a-thread", "planner", |_| {
        Ok(AgentRun::output(plan()))
    })
    .unwrap_err();
    assert!(matches!(err, KitError::BadThreadId(_)), "{err:?}");
}

/// An agent has no database client: a store named by URL, with no engine
/// relaying it, is refused saying how to run the agent, the password cut.
#[test]
fn a_store_url_without_a_relay_is_refused_with_how_to_run_the_agent() {
    if std::env::var_os(uwf_backend::STORE_ENV).is_some() {
        return;
    }
    let (fx, thread, _) = fixture();
    std::fs::write(
        fx.root().join("config.yaml"),
        "store: postgres://u:s3cret@db.example/uwf\n",
    )
    .unwrap();
    let err = AgentContext::load(fx.root(), &thread.to_string(), "planner").unwrap_err();
    assert!(matches!(&err, KitError::NoBackend { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("postgres://u:***@db.example/uwf"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    let help = err.help_text().unwrap_or_default();
    assert!(help.contains("relay of the engine"), "{help}");
    // The agent binary's report says which command runs it.
    let report = format!("{:?}", crate::report(err));
    assert!(report.contains("uwf thread step"), "{report}");
}

#[test]
fn lower_case_thread_ids_are_accepted() {
    let (fx, thread, _) = fixture();
    let lower = thread.to_string().to_lowercase();
    execute("test-agent", fx.root(), &lower, "planner", |_| {
        Ok(AgentRun::output(plan()))
    })
    .unwrap();
}

#[test]
fn detail_given_by_the_agent() {
    let (fx, thread, _) = fixture();
    let missing = Hash::from_u64(42);
    assert!(!fx.cas().has(missing).unwrap());
    let err = run_role(&fx, thread, "planner", |_| {
        Ok(AgentRun::output(plan()).with_detail(missing))
    })
    .unwrap_err();
    assert!(
        matches!(err, KitError::MissingDetail(h) if h == missing),
        "{err:?}"
    );

    let hash = run_role(&fx, thread, "planner", |ctx| {
        let detail = crate::put_answer(ctx.store(), "transcript")?;
        Ok(AgentRun::output(plan()).with_detail(detail))
    })
    .unwrap();
    assert_eq!(
        payload(&fx, &step_of(&fx, hash).record.detail),
        json!({ "text": "transcript" })
    );
}

#[test]
fn agent_errors_carry_their_chain_and_write_nothing() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, thread, "planner", |ctx| {
        std::fs::read_to_string(ctx.root().join("no-such-file"))?;
        Ok(AgentRun::output(plan()))
    })
    .unwrap_err();
    assert!(matches!(err, KitError::Agent(_)), "{err:?}");
    assert!(err.to_string().starts_with("the agent failed: "), "{err}");
    assert_eq!(
        fx.cas().list_by_type(fx.cas().types().step_node).unwrap(),
        []
    );
}

#[test]
fn write_step_does_not_validate_beyond_the_cas() {
    let (fx, thread, start) = fixture();
    let ctx = AgentContext::load(fx.root(), &thread.to_string(), "planner").unwrap();
    // The detail and output are not checked: the StepNode schema only
    // requires well-formed references.
    let bogus = Hash::from_u64(7);
    let hash = crate::write_step(fx.cas(), &ctx, bogus, bogus, "liar").unwrap();
    let step = step_of(&fx, hash);
    assert_eq!(step.start, start);
    assert_eq!(step.record.output, bogus);
    assert_eq!(step.record.agent, "liar");
}

#[test]
fn closures_take_anyhow_and_boxed_errors_with_question_mark() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, thread, "planner", |_| {
        let n: u32 = "x".parse().map_err(anyhow::Error::from)?;
        Ok(AgentRun::output(
            json!({ "plan": n.to_string(), "steps": [] }),
        ))
    })
    .unwrap_err();
    assert!(err.to_string().contains("invalid digit"), "{err}");
    let err = run_role(&fx, thread, "planner", |_| {
        let r: Result<(), BoxError> = Err("boxed".into());
        r?;
        Ok(AgentRun::output(plan()))
    })
    .unwrap_err();
    assert_eq!(err.to_string(), "the agent failed: boxed");
}

#[test]
fn the_prompt_of_a_long_thread_stays_bounded() {
    let (fx, thread, _) = fixture();
    let big = |i: usize| json!({ "plan": format!("{i} {}", "x".repeat(400)), "steps": [] });
    let mut hashes = Vec::new();
    for i in 0..30 {
        let h = run_role(&fx, thread, "planner", |_| Ok(AgentRun::output(big(i)))).unwrap();
        fx.set_head(thread, h).unwrap();
        hashes.push(h);
    }
    let ctx = AgentContext::load(fx.root(), &thread.to_string(), "reviewer")
        .unwrap()
        .with_history_quota(2_000);
    assert_eq!(ctx.history_quota(), 2_000);
    let prompt = ctx.prompt().unwrap();
    let fixed = {
        let mut p = ctx.prompt_parts().unwrap();
        p.steps = &[];
        p.step_hashes = &[];
        p.full().chars().count()
    };
    let bound = fixed + 2_000 + crate::prompt::HISTORY_OVERHEAD + 26 + 26;
    assert!(
        prompt.chars().count() <= bound,
        "{} > {bound}",
        prompt.chars().count()
    );
    let shown = prompt.matches("### Step ").count();
    assert!((1..30).contains(&shown), "{shown}");
    assert!(prompt.contains("### Step 30 · planner"), "newest first");
    assert!(
        prompt.contains(&format!(
            "> {} earlier step(s) not shown (history quota: 2000 characters). Read them with `uwf thread read {} --before {}`.",
            30 - shown,
            ctx.thread_id(),
            hashes[30 - shown]
        )),
        "{prompt}"
    );
}

/// A workflow of one role that ends after it: a child thread of it ends
/// with its first step.
const ONE_STEP: &str = r#"name: one-step
description: works once
roles:
  work:
    description: works
    systemPrompt: work
    outputSchema: { type: object, properties: { done: { type: boolean } }, required: [done] }
graph:
  $START: [ { role: work, condition: null } ]
  work: [ { role: $END, condition: null } ]
"#;

#[test]
fn child_thread_is_written_and_checked() {
    let (fx, thread, start) = fixture();
    // A child thread started from the parent's head, run to its end.
    let child_wf = fx.register_workflow(ONE_STEP).unwrap();
    let child = uwf_engine::start(fx.engine(), child_wf, "child task", Some(start)).unwrap();
    let terminal = run_role(&fx, child.thread, "work", |_| {
        Ok(AgentRun::output(json!({ "done": true })))
    })
    .unwrap();

    let hash = run_role(&fx, thread, "planner", |_| {
        Ok(AgentRun::output(plan())
            .with_detail(terminal)
            .with_child_thread(terminal))
    })
    .unwrap();
    let step = step_of(&fx, hash);
    assert_eq!(step.child_thread, Some(terminal));
    assert_eq!(step.record.detail, terminal);
    let refs = fx.cas().refs_of(&fx.cas().get(hash).unwrap()).unwrap();
    assert!(
        refs.iter()
            .any(|r| r.path == "/childThread" && r.hash == terminal),
        "{refs:?}"
    );

    // An ordinary step has no childThread at all.
    let (other, _) = fx.start_thread("another task").unwrap();
    let plain = run_role(&fx, other, "planner", |_| Ok(AgentRun::output(plan()))).unwrap();
    let v = payload(&fx, &plain);
    assert!(v.get("childThread").is_none(), "{v}");

    // The kit runs the engine's own check before writing anything: what
    // uwf would refuse is never written.
    let refused = |child: Hash| {
        run_role(&fx, thread, "planner", |_| {
            Ok(AgentRun::output(plan()).with_child_thread(child))
        })
        .unwrap_err()
    };
    let missing = Hash::from_u64(4242);
    let err = refused(missing);
    assert!(
        matches!(&err, KitError::BadChildThread { hash, .. } if *hash == missing),
        "{err:?}"
    );
    let output_node = step.record.output;
    let err = refused(output_node);
    assert!(err.to_string().contains("not a usable thread"), "{err}");
    // A step of a thread that was not started from this head.
    let err = refused(plain);
    assert!(err.to_string().contains("started from nothing"), "{err}");
    // A child started from this head that has not ended.
    let unfinished =
        uwf_engine::start(fx.engine(), fx.workflow_hash(), "child", Some(start)).unwrap();
    let first = run_role(&fx, unfinished.thread, "planner", |_| {
        Ok(AgentRun::output(plan()))
    })
    .unwrap();
    let err = refused(first);
    assert!(err.to_string().contains("has not ended"), "{err}");
}

/// What an agent stores through its context (output, answer, a transcript
/// of its own) has the secrets of the root's `.env` cut out
/// (docs/state.md, "Secrets and file modes"); nothing on disk holds one.
#[test]
fn what_an_agent_stores_has_the_secrets_of_env_cut_out() {
    let (fx, thread, _) = fixture();
    let key = "sk-kit-test-0123456789";
    std::fs::write(
        fx.root().join(".env"),
        format!("UWF_KIT_TEST_SECRET_7R4={key}\nMODEL=sonnet\n"),
    )
    .unwrap();
    let marker = "‹redacted:UWF_KIT_TEST_SECRET_7R4›";
    let mut transcript = None;
    let hash = run_role(&fx, thread, "planner", |ctx| {
        let schemas = crate::cli_agent::TranscriptSchemas {
            detail: json!({"title": "kit-secret-detail", "type": "object", "properties": {
                "turns": {"type": "array", "items": {"type": "string", "format": "cas_ref"}}}}),
            turn: json!({"title": "kit-secret-turn", "type": "object"}),
        };
        let mut fields = serde_json::Map::new();
        fields.insert("command".into(), format!("curl -H 'key: {key}'").into());
        let detail = crate::cli_agent::store_transcript(
            ctx.store(),
            &schemas,
            fields,
            &[crate::cli_agent::Turn::new(
                "tool",
                format!("401 for key {key}"),
            )],
        )?;
        transcript = Some(detail);
        Ok(
            AgentRun::output(json!({ "plan": format!("use {key}"), "steps": ["sonnet"] }))
                .with_detail(detail),
        )
    })
    .unwrap();
    let step = step_of(&fx, hash);
    assert_eq!(
        payload(&fx, &step.record.output),
        json!({ "plan": format!("use {marker}"), "steps": ["sonnet"] }),
        "short values are not secrets"
    );
    let detail = payload(&fx, &step.record.detail);
    assert_eq!(Some(step.record.detail), transcript);
    assert_eq!(detail["command"], format!("curl -H 'key: {marker}'"));
    let turn: Hash = detail["turns"][0].as_str().unwrap().parse().unwrap();
    assert_eq!(payload(&fx, &turn)["text"], format!("401 for key {marker}"));

    // An answer stored as the detail, too.
    let (thread2, _) = fx.start_thread("again").unwrap();
    let hash = run_role(&fx, thread2, "planner", |_| {
        Ok(AgentRun::output(plan()).with_answer(format!("my key is {key}")))
    })
    .unwrap();
    let step = step_of(&fx, hash);
    assert_eq!(
        payload(&fx, &step.record.detail),
        json!({ "text": format!("my key is {marker}") })
    );
    let leaks = crate::testing::real_cli::files_containing(&fx.root().join("cas"), key).unwrap();
    assert!(leaks.is_empty(), "{leaks:?}");
}
