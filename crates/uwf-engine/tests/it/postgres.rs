//! The engine over the PostgreSQL store, on a real server (started by
//! `uwf-pg-testing`; skipped loudly without the server binaries, failing
//! instead under `CI=true`): two stores with pools of their own stand for
//! two machines stepping threads of one workflow with `concurrency: 1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{count, engine};
use uwf_engine::{AgentCall, NoProgress, Progress, Ran, StepOptions};
use uwf_state::prelude::*;
use uwf_store_pg::PgStore;

#[test]
fn two_machines_step_threads_to_the_end_within_the_workflow_limit() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    let machines = [
        PgStore::connect(&db.url, None).unwrap(),
        PgStore::connect(&db.url, None).unwrap(),
    ];
    machines[0]
        .set_config(Some(
            "workflows:\n  count: { concurrency: 1, overflow: queue, maxQueue: 50 }\n",
        ))
        .unwrap();
    let engines = [engine(&machines[0]), engine(&machines[1])];
    let workflow = common::register(&engines[0]);
    let threads: Vec<(usize, uwf_protocol::ThreadId)> = (0..6)
        .map(|i| {
            let started = uwf_engine::start(&engines[i % 2], workflow, "count", None).unwrap();
            (i % 2, started.thread)
        })
        .collect();
    assert_eq!(machines[1].threads().unwrap().len(), 6);

    let running = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    let calls = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for (machine, thread) in &threads {
            let engine = &engines[*machine];
            let (running, most, calls) = (&running, &most, &calls);
            s.spawn(move || {
                let agent = |call: &AgentCall<'_>| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    calls.fetch_add(1, Ordering::SeqCst);
                    // The agent works a little, so that agents overlap if the
                    // limit lets them (the behaviour under test).
                    std::thread::sleep(Duration::from_millis(5));
                    let out = count(engine, call);
                    running.fetch_sub(1, Ordering::SeqCst);
                    out
                };
                let opts = StepOptions {
                    in_process: Some(&agent),
                    ..StepOptions::default()
                };
                let progress: Arc<dyn Progress> = Arc::new(NoProgress);
                match uwf_engine::run(engine, *thread, &opts, &progress, 10).unwrap() {
                    Ran::Done(_) => {}
                    other => panic!("thread {thread} did not finish: {other:?}"),
                }
            });
        }
    });
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "concurrency: 1 across machines"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        18,
        "3 steps for each of 6 threads"
    );
    assert!(machines[0].threads().unwrap().is_empty());
    let history = machines[1].history().unwrap();
    assert_eq!(history.len(), 6);
    assert!(history.iter().all(|e| e.reason.as_deref() == Some("done")));
    let report = engines[1].cas().verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
}
