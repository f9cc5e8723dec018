//! Tests of [`execute`](crate::execute) against a real storage root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use uwf_cas::Hash;
use uwf_protocol::StepNodePayload;

use crate::testing::{Fixture, REVIEW_PROMPT};
use crate::{AgentContext, AgentRun, BoxError, KitError, execute};

fn fixture() -> (Fixture, String, Hash) {
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

fn payload(fx: &Fixture, hash: &str) -> Value {
    fx.cas().get(hash.parse().unwrap()).unwrap().payload
}

fn run_role(
    fx: &Fixture,
    thread: &str,
    role: &str,
    f: impl FnOnce(&AgentContext) -> Result<AgentRun, BoxError>,
) -> Result<Hash, KitError> {
    execute("test-agent", fx.root(), thread, role, f)
}

#[test]
fn structured_output_becomes_a_first_step() {
    let (fx, thread, start) = fixture();
    let hash = run_role(&fx, &thread, "planner", |ctx| {
        assert_eq!(ctx.role(), "planner");
        assert_eq!(ctx.start().prompt, "Fix the login bug");
        assert_eq!(ctx.start_hash(), ctx.head());
        assert!(ctx.steps().is_empty());
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
    assert_eq!(step.start, start.to_string());
    assert_eq!(step.prev, None);
    assert_eq!(step.record.role, "planner");
    assert_eq!(step.record.agent, "test-agent");
    assert_eq!(payload(&fx, &step.record.output), plan());
    let output = fx.cas().get(step.record.output.parse().unwrap()).unwrap();
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
    assert_eq!(fx.head(&thread).unwrap(), Some(start));
}

#[test]
fn second_step_chains_prev_and_gets_the_edge_prompt() {
    let (fx, thread, start) = fixture();
    let first = run_role(&fx, &thread, "planner", |_| Ok(AgentRun::output(plan()))).unwrap();
    fx.set_head(&thread, first).unwrap();

    let second = run_role(&fx, &thread, "reviewer", |ctx| {
        assert_eq!(ctx.head(), first);
        assert_eq!(ctx.step_hashes(), &[first]);
        assert_eq!(ctx.steps().len(), 1);
        assert_eq!(ctx.steps()[0].role, "planner");
        assert_eq!(ctx.steps()[0].output, plan(), "outputs are expanded");
        assert_eq!(ctx.edge_prompt(), Some(REVIEW_PROMPT));
        assert_eq!(ctx.runs_of_role(), 0);
        let system = ctx.system_prompt();
        assert!(
            system.contains("- `approved` (boolean, required)"),
            "{system}"
        );
        assert!(system.ends_with("You are a reviewer."), "{system}");
        let user = ctx.user_prompt();
        assert!(user.starts_with("## Task\n\nFix the login bug\n"), "{user}");
        assert!(user.contains("### 1. planner (by test-agent)"), "{user}");
        assert!(user.ends_with(&format!("{REVIEW_PROMPT}\n")), "{user}");
        Ok(AgentRun::output(
            json!({ "approved": false, "comments": "more" }),
        ))
    })
    .unwrap();
    let step = step_of(&fx, second);
    assert_eq!(step.prev, Some(first.to_string()));
    assert_eq!(step.start, start.to_string());
    assert_eq!(step.record.role, "reviewer");
    fx.set_head(&thread, second).unwrap();

    let third = run_role(&fx, &thread, "planner", |ctx| {
        assert_eq!(
            ctx.edge_prompt(),
            Some("Address the review: more"),
            "rendered against the review"
        );
        assert_eq!(ctx.runs_of_role(), 1);
        Ok(AgentRun::output(plan()))
    })
    .unwrap();
    assert_eq!(step_of(&fx, third).prev, Some(second.to_string()));
}

#[test]
fn no_edge_prompt_when_the_moderator_picks_another_role() {
    let (fx, thread, _) = fixture();
    let first = run_role(&fx, &thread, "planner", |_| Ok(AgentRun::output(plan()))).unwrap();
    fx.set_head(&thread, first).unwrap();
    // The moderator would run the reviewer; run the planner again anyway.
    run_role(&fx, &thread, "planner", |ctx| {
        assert_eq!(ctx.edge_prompt(), None);
        Ok(AgentRun::output(plan()))
    })
    .unwrap();
}

#[test]
fn frontmatter_answer_is_extracted() {
    let (fx, thread, _) = fixture();
    let answer = "---\nplan: refactor auth\nsteps:\n  - read\n  - write\nconfidence: 0.9\n---\n\n## Plan\nDetails.";
    let hash = run_role(&fx, &thread, "planner", |_| Ok(AgentRun::text(answer))).unwrap();
    let step = step_of(&fx, hash);
    assert_eq!(
        payload(&fx, &step.record.output),
        json!({ "plan": "refactor auth", "steps": ["read", "write"] }),
        "undeclared fields are dropped"
    );
    assert_eq!(payload(&fx, &step.record.detail), json!({ "text": answer }));
}

#[test]
fn answer_without_frontmatter_is_an_extraction_error() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, &thread, "planner", |_| {
        Ok(AgentRun::text("I made a plan."))
    })
    .unwrap_err();
    let KitError::Extraction { role, reason } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(role, "planner");
    assert!(reason.contains("no frontmatter"), "{reason}");
    assert_eq!(
        fx.cas().list_by_type(fx.cas().types().step_node).unwrap(),
        []
    );
}

#[test]
fn frontmatter_failing_the_schema_names_the_paths() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, &thread, "planner", |_| {
        Ok(AgentRun::text("---\nplan: 3\n---\nbody"))
    })
    .unwrap_err();
    let KitError::Extraction { reason, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(reason.contains("/plan"), "{reason}");
    assert!(reason.contains("steps"), "{reason}");
    assert!(
        format!("{:?}", miette::Report::new(err)).contains("layer 2"),
        "the help mentions the LLM fallback"
    );
}

#[test]
fn structured_output_failing_the_schema_names_the_paths() {
    let (fx, thread, _) = fixture();
    let err = run_role(&fx, &thread, "reviewer", |_| {
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
    let err = run_role(&fx, &thread, "tester", |_| -> Result<AgentRun, BoxError> {
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
    fx.remove_thread(&thread).unwrap();
    let err = run_role(&fx, &thread, "planner", |_| Ok(AgentRun::output(plan()))).unwrap_err();
    assert!(
        matches!(&err, KitError::NotActive { thread: t } if *t == thread),
        "{err:?}"
    );

    let other = uwf_util::ids::ThreadId::new().to_string();
    let err = run_role(&fx, &other, "planner", |_| Ok(AgentRun::output(plan()))).unwrap_err();
    assert!(matches!(err, KitError::NotActive { .. }), "{err:?}");

    let err = run_role(&fx, "not-a-thread", "planner", |_| {
        Ok(AgentRun::output(plan()))
    })
    .unwrap_err();
    assert!(matches!(err, KitError::BadThreadId(_)), "{err:?}");
}

#[test]
fn lower_case_thread_ids_are_accepted() {
    let (fx, thread, _) = fixture();
    run_role(&fx, &thread.to_lowercase(), "planner", |_| {
        Ok(AgentRun::output(plan()))
    })
    .unwrap();
}

#[test]
fn detail_given_by_the_agent() {
    let (fx, thread, _) = fixture();
    let missing = Hash::from_u64(42);
    assert!(!fx.cas().has(missing).unwrap());
    let err = run_role(&fx, &thread, "planner", |_| {
        Ok(AgentRun::output(plan()).with_detail(missing))
    })
    .unwrap_err();
    assert!(
        matches!(err, KitError::MissingDetail(h) if h == missing),
        "{err:?}"
    );

    let hash = run_role(&fx, &thread, "planner", |ctx| {
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
    let err = run_role(&fx, &thread, "planner", |ctx| {
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
    let ctx = AgentContext::load(fx.root(), &thread, "planner").unwrap();
    // The detail and output are not checked: the StepNode schema only
    // requires well-formed references.
    let bogus = Hash::from_u64(7);
    let hash = crate::write_step(fx.cas(), &ctx, bogus, bogus, "liar").unwrap();
    let step = step_of(&fx, hash);
    assert_eq!(step.start, start.to_string());
    assert_eq!(step.record.output, bogus.to_string());
    assert_eq!(step.record.agent, "liar");
}
