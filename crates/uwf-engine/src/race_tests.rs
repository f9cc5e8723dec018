//! A step (or answer) that loses a race to one that ends its thread is a
//! conflict ([`EngineError::FinishedMeanwhile`]); only a kill is a kill
//! (docs/state.md, "Exit status"). Deterministic: the "other process" runs
//! inside the in-process agent of the losing step.

use std::sync::Arc;

use uwf_cas::Hash;
use uwf_protocol::{StepNodePayload, StepRecord, ThreadId};

use crate::{
    AgentCall, Engine, EngineError, NoProgress, Progress, Started, StepOptions, apply_offered,
    kill, settle, start, step,
};

const WORKFLOW: &str = r#"
name: once
description: one step, then the end
roles:
  finisher:
    description: finishes
    systemPrompt: finish
    outputSchema: { type: object, properties: { by: { type: string } }, required: [by] }
graph:
  $START: [ { role: finisher, condition: null } ]
  finisher: [ { role: $END, condition: null } ]
"#;

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// An engine over a fresh root with one thread of [`WORKFLOW`].
fn thread() -> (tempfile::TempDir, Engine, Started) {
    let dir = ok(tempfile::tempdir());
    let engine = ok(Engine::open(&dir.path().join("root")));
    let def = ok(uwf_moderator::definition::parse_yaml(WORKFLOW, "once.yaml"));
    let wf = ok(uwf_moderator::definition::register(engine.cas(), &def));
    let started = ok(start(&engine, wf.hash, "finish it", None));
    (dir, engine, started)
}

/// Stores the StepNode of `call`'s role with output `{by}`.
fn write_step(engine: &Engine, call: &AgentCall<'_>, by: &str) -> Result<Hash, String> {
    let cas = engine.cas();
    let schema = call.view.workflow.roles[call.role].output_schema;
    let output = cas
        .put_value(schema, &serde_json::json!({ "by": by }))
        .map_err(|e| e.to_string())?
        .hash;
    let payload = StepNodePayload {
        start: call.view.start_hash,
        prev: call.view.steps.last().map(|s| s.hash),
        record: StepRecord {
            role: call.role.to_string(),
            output,
            detail: output,
            agent: by.to_string(),
        },
        child_thread: None,
    };
    Ok(cas
        .put_value(cas.types().step_node, &payload)
        .map_err(|e| e.to_string())?
        .hash)
}

/// Stores the first step of `started`'s thread (its head not moved).
fn first_step(engine: &Engine, started: &Started, by: &str) -> Hash {
    let view = ok(uwf_moderator::thread::load(engine.cas(), started.head));
    let call = AgentCall {
        thread: started.thread,
        role: "finisher",
        head: started.head,
        view: &view,
    };
    ok(write_step(engine, &call, by))
}

/// Steps thread `id` with an in-process agent that first lets `meanwhile`
/// act on the thread (as another process would while the agent runs),
/// then offers its own step.
fn step_while(
    engine: &Engine,
    id: ThreadId,
    meanwhile: &dyn Fn(),
) -> Result<crate::Stepped, EngineError> {
    let agent = |call: &AgentCall<'_>| {
        meanwhile();
        write_step(engine, call, "loser")
    };
    let opts = StepOptions {
        in_process: Some(&agent),
        ..StepOptions::default()
    };
    let progress: Arc<dyn Progress> = Arc::new(NoProgress);
    step(engine, id, &opts, &progress)
}

/// Runs the step that ends thread `id` to completion.
fn winning_step(engine: &Engine, id: ThreadId) {
    let agent = |call: &AgentCall<'_>| write_step(engine, call, "winner");
    let opts = StepOptions {
        in_process: Some(&agent),
        ..StepOptions::default()
    };
    let progress: Arc<dyn Progress> = Arc::new(NoProgress);
    let won = ok(step(engine, id, &opts, &progress));
    assert!(won.output.done);
}

#[test]
fn a_step_that_loses_to_the_step_ending_the_thread_is_a_conflict() {
    let (_dir, engine, started) = thread();
    let id = started.thread;
    let err = match step_while(&engine, id, &|| winning_step(&engine, id)) {
        Ok(s) => panic!("the losing step landed: {:?}", s.output),
        Err(e) => e,
    };
    let EngineError::FinishedMeanwhile {
        thread,
        reason,
        head,
    } = &err
    else {
        panic!("not a lost race: {err:?}");
    };
    assert_eq!((*thread, reason.as_str()), (id, "done"));
    assert!(!err.is_killed());
    assert!(
        err.to_string().contains("finished by another step"),
        "{err}"
    );
    // The history's head is the winner's step.
    let entry = ok(engine.state().find_archived(id)).unwrap_or_else(|| panic!("not archived"));
    assert_eq!(*head, entry.head);
}

#[test]
fn a_step_whose_thread_is_killed_meanwhile_is_still_a_kill() {
    let (_dir, engine, started) = thread();
    let id = started.thread;
    let err = match step_while(&engine, id, &|| {
        ok(kill(&engine, id));
    }) {
        Ok(s) => panic!("the step landed on a killed thread: {:?}", s.output),
        Err(e) => e,
    };
    assert!(err.is_killed(), "{err:?}");
}

#[test]
fn an_answer_that_loses_to_the_step_ending_the_thread_is_a_conflict() {
    let (_dir, engine, started) = thread();
    let id = started.thread;
    // The answer is written at the start, then another step ends the thread.
    let answer = first_step(&engine, &started, "person");
    winning_step(&engine, id);
    match apply_offered(&engine, id, started.head, "finisher", answer, None) {
        Err(EngineError::FinishedMeanwhile { reason, .. }) => assert_eq!(reason, "done"),
        other => panic!("not a lost race: {other:?}"),
    }
}

#[test]
fn settle_leaves_other_errors_and_active_threads_alone() {
    let (_dir, engine, started) = thread();
    let id = started.thread;
    // Still active: whatever the step saw, it was no race with an end.
    let e = settle(&engine, id, EngineError::Killed { thread: id });
    assert!(matches!(e, EngineError::Killed { .. }), "{e:?}");
    let moved = EngineError::HeadMoved {
        thread: id,
        actual: started.head,
    };
    assert!(matches!(
        settle(&engine, id, moved),
        EngineError::HeadMoved { .. }
    ));
    assert!(matches!(
        settle(&engine, id, EngineError::Interrupted),
        EngineError::Interrupted
    ));
    let workflow = ok(crate::workflow_of(&engine, started.head));
    // Active, with a history line a crash between the two writes of an
    // archive left: active is what counts.
    let leftover = uwf_protocol::HistoryEntry {
        thread: id,
        workflow,
        head: started.head,
        completed_at: 1,
        reason: Some("done".into()),
    };
    ok(engine.state().import_history(&[leftover]));
    let e = settle(&engine, id, EngineError::Killed { thread: id });
    assert!(matches!(e, EngineError::Killed { .. }), "{e:?}");
    // Pruned by someone else: a lost race too, naming the reason.
    ok(engine
        .state()
        .archive(id, workflow, Some(started.head), "pruned"));
    let e = settle(&engine, id, EngineError::KilledBeforeStart { thread: id });
    assert!(e.to_string().contains("reason pruned"), "{e}");
    assert!(!e.is_killed());
}

#[test]
fn a_step_that_loses_to_a_final_step_not_yet_archived_is_a_conflict_with_the_end() {
    let (_dir, engine, started) = thread();
    let id = started.thread;
    // Another process moved the head to a step that ends the thread and
    // has not archived it yet (it decides again first).
    let last = first_step(&engine, &started, "winner");
    let check = || Ok(());
    let guard = uwf_state::NodeGuard::always(&check);
    ok(engine.state().swap_head(id, started.head, last, &guard));
    let moved = EngineError::HeadMoved {
        thread: id,
        actual: last,
    };
    match settle(&engine, id, moved) {
        EngineError::FinishedMeanwhile {
            thread,
            reason,
            head,
        } => assert_eq!((thread, reason.as_str(), head), (id, "done", last)),
        other => panic!("not a lost race with the end: {other:?}"),
    }
    // A head the thread has moved on from since is no such race.
    let stale = EngineError::HeadMoved {
        thread: id,
        actual: started.head,
    };
    assert!(matches!(
        settle(&engine, id, stale),
        EngineError::HeadMoved { .. }
    ));
}
