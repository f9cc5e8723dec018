//! `uwf worker` over the PostgreSQL store, on a real server (started by
//! `uwf-pg-testing`; skipped loudly without the server binaries, failing
//! instead under `CI=true`). Each worker has a `PgStore` and an engine of
//! its own, standing for a machine; the agent runs in process
//! ([`Worker::with_in_process_agent`]).
//!
//! No assertion is on timing: deadlines only turn a hang into a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use common::{count, counted, engine, register};
use uwf_engine::worker::{Event, Worker, WorkerEvent, WorkerLog, WorkerOptions, WorkerSummary};
use uwf_engine::{AgentCall, CancelToken};
use uwf_protocol::ThreadId;
use uwf_state::prelude::*;
use uwf_state::runs::{RunQueue, RunRequest};
use uwf_store_pg::PgStore;

/// Every event of a worker: (event, thread, detail).
#[derive(Default)]
struct Collect(Mutex<Vec<(Event, Option<ThreadId>, String)>>);

impl WorkerLog for Collect {
    fn event(&self, e: &WorkerEvent<'_>) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push((
            e.event,
            e.thread,
            e.detail.unwrap_or_default().to_string(),
        ));
    }
}

impl Collect {
    fn all(&self, event: Event) -> Vec<(Option<ThreadId>, String)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(e, _, _)| *e == event)
            .map(|(_, t, d)| (*t, d.clone()))
            .collect()
    }
}

fn options(id: &str, concurrency: usize, lease: Duration) -> WorkerOptions {
    let mut opts = WorkerOptions::new(id);
    opts.concurrency = concurrency;
    opts.lease = lease;
    opts.poll = Duration::from_millis(20);
    opts.grace = Duration::from_secs(30);
    opts
}

/// Polls `cond` until it holds; panics after two minutes (a hang).
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checks that every thread of `threads` ended at `$END` with exactly its
/// three steps (1, 2, 3 from its own StartNode), that the queue is empty
/// and that the store verifies clean.
fn all_done_exactly_once(store: &PgStore, threads: &BTreeMap<ThreadId, uwf_cas::Hash>) {
    let engine = engine(store);
    let cas = engine.cas();
    assert!(store.threads().unwrap().is_empty(), "threads left active");
    assert!(store.runs().unwrap().is_empty(), "runs left in the queue");
    let history = store.history().unwrap();
    assert_eq!(history.len(), threads.len(), "{history:?}");
    for entry in &history {
        assert_eq!(entry.reason.as_deref(), Some("done"), "{entry:?}");
        let Some(start) = threads.get(&entry.thread) else {
            panic!("{} is not one of the queued threads", entry.thread)
        };
        let (numbers, from) = counted(cas, entry.head);
        assert_eq!(numbers, [1, 2, 3], "thread {}", entry.thread);
        assert_eq!(from, *start, "thread {}", entry.thread);
    }
    let report = cas.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn two_workers_on_two_machines_run_twenty_threads_to_the_end() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    let machines = [
        PgStore::connect(&db.url, None).unwrap(),
        PgStore::connect(&db.url, None).unwrap(),
    ];
    let engines = [engine(&machines[0]), engine(&machines[1])];
    let workflow = register(&engines[0]);
    let mut threads = BTreeMap::new();
    for _ in 0..20 {
        let started = uwf_engine::start(&engines[0], workflow, "count", None).unwrap();
        machines[0]
            .enqueue(started.thread, "count", RunRequest::default())
            .unwrap();
        threads.insert(started.thread, started.head);
    }
    assert_eq!(machines[1].runs().unwrap().len(), 20);

    // Each call of the agent, by thread: more than three for a thread
    // would be a step run again (allowed after a lost lease, not expected
    // here); the chain walk below is what proves none was applied twice.
    let calls: Mutex<BTreeMap<ThreadId, usize>> = Mutex::new(BTreeMap::new());
    let agents: Vec<Box<uwf_engine::worker::SharedInProcessAgent<'_>>> = engines
        .iter()
        .map(|e| {
            let calls = &calls;
            Box::new(move |call: &AgentCall<'_>| {
                *calls
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(call.thread)
                    .or_default() += 1;
                // The agent works a little, so that the machines' steps overlap.
                std::thread::sleep(Duration::from_millis(5));
                count(e, call)
            }) as Box<uwf_engine::worker::SharedInProcessAgent<'_>>
        })
        .collect();
    let logs = [Arc::new(Collect::default()), Arc::new(Collect::default())];
    let shutdown = CancelToken::new();
    let summaries: Vec<WorkerSummary> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let (engine, queue, agent) = (&engines[i], &machines[i], &agents[i]);
                let log: Arc<dyn WorkerLog> = logs[i].clone();
                let shutdown = &shutdown;
                s.spawn(move || {
                    let opts = options(&format!("machine-{i}"), 3, Duration::from_secs(30));
                    Worker::new(engine, queue, opts, log)
                        .with_in_process_agent(agent.as_ref())
                        .run(shutdown)
                })
            })
            .collect();
        wait_until("every thread is done", || {
            machines[0].runs().unwrap().is_empty() && machines[0].history().unwrap().len() == 20
        });
        shutdown.cancel();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    all_done_exactly_once(&machines[1], &threads);
    // Every head moved exactly once per step: 60 steps landed in all, and
    // every run was finished by exactly one worker.
    let steps: u64 = summaries.iter().map(|s| s.steps).sum();
    let finished: u64 = summaries.iter().map(|s| s.finished).sum();
    assert_eq!((steps, finished), (60, 20), "{summaries:?}");
    assert!(summaries.iter().all(|s| s.failed == 0), "{summaries:?}");
    drop(agents);
    let calls = calls.into_inner().unwrap_or_else(PoisonError::into_inner);
    assert_eq!(calls.len(), 20);
    assert!(calls.values().all(|n| *n >= 3), "{calls:?}");
    let mut done: Vec<ThreadId> = logs
        .iter()
        .flat_map(|l| l.all(Event::Done))
        .filter_map(|(t, _)| t)
        .collect();
    done.sort();
    assert_eq!(done, threads.keys().copied().collect::<Vec<_>>());
    eprintln!("two workers: {summaries:?}");
}

/// The database URL of role `role` with password `password` instead of
/// the superuser's.
fn url_as(db: &uwf_pg_testing::TestDb, role: &str, password: &str) -> String {
    let superuser = format!("{}:{}@", uwf_pg_testing::USER, uwf_pg_testing::PASSWORD);
    assert!(db.url.contains(&superuser), "unexpected test URL shape");
    db.url
        .replacen(&superuser, &format!("{role}:{password}@"), 1)
}

#[test]
fn a_worker_cut_off_from_the_database_is_fenced_and_the_thread_taken_over() {
    let Some(db) = uwf_pg_testing::database() else {
        return;
    };
    // Machine B, and the schema, as the superuser.
    let b = PgStore::connect(&db.url, None).unwrap();
    b.init().unwrap();
    // Machine A logs in as a role of its own, so that the test can cut it
    // off: no new connection, and its open ones terminated.
    let role = format!("machine_a_{}", db.name);
    let mut admin = db.client();
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'machine-a-pw'; \
             GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}; \
             GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ))
        .unwrap();
    let a = PgStore::connect(&url_as(&db, &role, "machine-a-pw"), None).unwrap();
    let (engine_a, engine_b) = (engine(&a), engine(&b));
    let workflow = register(&engine_b);
    let started = uwf_engine::start(&engine_b, workflow, "count", None).unwrap();
    b.enqueue(started.thread, "count", RunRequest::default())
        .unwrap();

    // A's agent says when it runs, then waits to be let go.
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (go, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let entered_tx = Mutex::new(entered_tx);
    let a_calls = AtomicUsize::new(0);
    let a_returned = AtomicUsize::new(0);
    let agent_a = |call: &AgentCall<'_>| {
        a_calls.fetch_add(1, Ordering::SeqCst);
        let _ = entered_tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(());
        let _ = go_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv_timeout(Duration::from_secs(120));
        let out = count(&engine_a, call);
        a_returned.fetch_add(1, Ordering::SeqCst);
        out
    };
    let agent_b = |call: &AgentCall<'_>| count(&engine_b, call);
    let lease = Duration::from_secs(3);
    let (log_a, log_b) = (Arc::new(Collect::default()), Arc::new(Collect::default()));
    let (stop_a, stop_b) = (CancelToken::new(), CancelToken::new());

    let (summary_a, summary_b) = std::thread::scope(|s| {
        let worker_a = s.spawn(|| {
            let log: Arc<dyn WorkerLog> = log_a.clone();
            Worker::new(&engine_a, &a, options("machine-a", 1, lease), log)
                .with_in_process_agent(&agent_a)
                .run(&stop_a)
        });
        entered
            .recv_timeout(Duration::from_secs(120))
            .expect("worker A never ran the agent");
        let claimed_by_a = b.run_of(started.thread).unwrap().unwrap();
        assert_eq!(claimed_by_a.claims, 1);

        // The cut: A can neither reconnect nor use its open connections.
        admin
            .batch_execute(&format!(
                "ALTER ROLE {role} NOLOGIN; \
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}';"
            ))
            .unwrap();
        // Its renewals fail, and its watchdog fences the agent before the
        // lease can run out.
        wait_until("worker A reports its lease lost", || {
            !log_a.all(Event::LeaseLost).is_empty()
        });
        // A may reach the database again, and its agent returns: what it
        // made is not applied, and A claims nothing more.
        stop_a.cancel();
        admin
            .batch_execute(&format!("ALTER ROLE {role} LOGIN"))
            .unwrap();
        go.send(()).unwrap();
        let summary_a = worker_a.join().unwrap();
        assert_eq!(a_returned.load(Ordering::SeqCst), 1);
        assert_eq!(
            b.thread_head(started.thread).unwrap(),
            Some(started.head),
            "the fenced worker's step landed"
        );

        // B takes the thread over once the lease ran out (on the
        // database's clock) and runs it to the end.
        let worker_b = s.spawn(|| {
            let log: Arc<dyn WorkerLog> = log_b.clone();
            Worker::new(&engine_b, &b, options("machine-b", 1, lease), log)
                .with_in_process_agent(&agent_b)
                .run(&stop_b)
        });
        wait_until("the thread is done", || {
            b.history().unwrap().len() == 1 && b.runs().unwrap().is_empty()
        });
        stop_b.cancel();
        (summary_a, worker_b.join().unwrap())
    });

    assert_eq!(a_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        (summary_a.claimed, summary_a.steps, summary_a.lost),
        (1, 0, 1),
        "{summary_a:?}"
    );
    assert_eq!(
        summary_a.finished + summary_a.failed + summary_a.handed_back,
        0
    );
    let why = log_a.all(Event::LeaseLost);
    assert!(
        why.iter()
            .any(|(_, d)| d.contains("no renewal of the lease succeeded")),
        "{why:?}"
    );
    assert_eq!(
        (summary_b.claimed, summary_b.steps, summary_b.finished),
        (1, 3, 1),
        "{summary_b:?}"
    );
    let claimed = log_b.all(Event::Claimed);
    assert_eq!(
        claimed,
        [(Some(started.thread), "claim 2 of the run".to_string())]
    );
    let threads = BTreeMap::from([(started.thread, started.head)]);
    all_done_exactly_once(&b, &threads);
}
