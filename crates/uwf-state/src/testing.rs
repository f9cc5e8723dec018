//! The contract of the [`ThreadStore`] trait, as tests any backend can run.
//!
//! Each public function checks one behaviour against a **fresh, empty**
//! store and panics (with the reason) when the backend breaks the contract.
//! [`thread_store_contract_tests!`](crate::thread_store_contract_tests)
//! turns them all into `#[test]` functions for one backend: this crate runs
//! them for [`FsState`](crate::FsState), and another backend (the
//! PostgreSQL store) runs the very same bodies by enabling the `testing`
//! feature in its dev-dependencies:
//!
//! ```ignore
//! mod contract {
//!     // An expression evaluated once per test: (store, guard). The guard
//!     // (a temporary directory, a database) lives until the test ends.
//!     uwf_state::thread_store_contract_tests!({
//!         let dir = tempfile::tempdir().unwrap();
//!         (uwf_state::FsState::new(dir.path()), dir)
//!     });
//! }
//! ```
//!
//! No test asserts on timing: waits are bounded only to turn a hang into a
//! failure.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::Duration;

use uwf_protocol::{Hash, ThreadId, WaitingRecord, WorkflowLimits};

use crate::runs::{Claim, RunOutcome, RunQueue, RunRequest, RunState};
use crate::slots::SlotError;
use crate::{ErrorKind, NodeGuard, StateError, ThreadStore};

/// Runs every contract test of this module as a `#[test]` function.
///
/// `$make` is an expression evaluated anew in each test, giving a tuple
/// `(store, guard)`: a fresh, empty backend and anything that must stay
/// alive while it is used (use `()` if nothing). It may `return` to skip
/// the test. Invoke it inside a module of its own, once per backend; with
/// `dyn` first, the store is an `Arc<dyn ThreadStore>` (as
/// `uwf_backend::Backends` opens one).
#[macro_export]
macro_rules! thread_store_contract_tests {
    (dyn $make:expr) => {
        $crate::thread_store_contract_tests!(@all $crate::testing::shared; $make);
    };
    ($make:expr) => {
        $crate::thread_store_contract_tests!(@all $crate::testing::itself; $make);
    };
    (@all $view:path; $make:expr) => {
        $crate::thread_store_contract_tests!(@each $view; $make;
            absent_threads_have_no_head,
            insert_refuses_an_active_id,
            heads_move_by_compare_and_swap,
            racing_swaps_have_exactly_one_winner_per_round,
            archive_moves_a_thread_into_the_history,
            registry_records_the_latest_hash,
            the_configuration_is_replaced_by_compare_and_swap,
            racing_configuration_edits_have_exactly_one_winner,
            a_wait_counts_only_at_its_head,
            attempts_chain_and_survive_only_for_active_threads,
            racing_attempts_are_all_kept,
            while_locked_holds_back_mutations,
            a_collection_moves_the_epoch_odd_then_even,
            epoch_and_head_agree_with_each_read_alone,
            step_start_agrees_with_each_read_alone,
            a_guard_checks_after_a_collection_and_a_failed_check_changes_nothing,
            drop_overflow_fails_at_once_when_full,
            the_limit_holds_across_contending_holders,
            waiters_are_served_first_in_first_out,
            a_full_queue_pushes_out_its_oldest_waiter,
            waiting_can_be_cancelled,
        );
    };
    (@each $view:path; $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let (store, _guard) = $make;
                $crate::testing::$name($view(&store));
            }
        )*
    };
}

/// The store as the contract tests take it, for a concrete backend.
pub fn itself<S: ?Sized>(store: &S) -> &S {
    store
}

/// The store as the contract tests take it, for one opened at run time
/// (`thread_store_contract_tests!(dyn …)`).
pub fn shared(store: &std::sync::Arc<dyn ThreadStore>) -> &dyn ThreadStore {
    store.as_ref()
}

/// Runs every contract test of the [`RunQueue`] trait (the run queue of
/// `uwf worker`) as a `#[test]` function, like
/// [`thread_store_contract_tests!`](crate::thread_store_contract_tests):
/// `$make` gives `(store, guard)`, where the store implements both
/// [`ThreadStore`] (runs need active threads) and [`RunQueue`].
#[macro_export]
macro_rules! run_queue_contract_tests {
    ($make:expr) => {
        $crate::thread_store_contract_tests!(@each $crate::testing::itself; $make;
            enqueue_needs_an_active_thread_and_refuses_a_second_time,
            runs_are_listed_oldest_first_and_keep_their_request,
            racing_claimers_get_each_run_exactly_once,
            an_expired_lease_is_taken_over_and_the_old_holder_is_fenced,
            release_outcomes,
            claims_follow_the_workflow_filter_and_drop_runs_of_inactive_threads,
        );
    };
}

fn ok<T>(r: Result<T, StateError>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// A thread id made from `n`.
pub fn tid(n: u64) -> ThreadId {
    ThreadId::from_u128(u128::from(n))
}

/// A head made from `n`.
pub fn head(n: u64) -> Hash {
    Hash::from_u64(n)
}

fn limits_queue(concurrency: u32, max_queue: u32) -> WorkflowLimits {
    match WorkflowLimits::queue(concurrency, max_queue) {
        Ok(l) => l,
        Err(e) => panic!("limits: {e}"),
    }
}

/// The Workflow node hashes archived threads name.
const WF: Hash = Hash::from_u64(0xABC);
const WF2: Hash = Hash::from_u64(0xABD);

const POLL: Option<Duration> = Some(Duration::from_millis(5));

fn join<T>(h: thread::ScopedJoinHandle<'_, T>) -> T {
    match h.join() {
        Ok(v) => v,
        Err(_) => panic!("a test thread panicked"),
    }
}

/// An unknown thread has no head, and nothing is listed in a fresh store.
pub fn absent_threads_have_no_head(store: &dyn ThreadStore) {
    assert_eq!(ok(store.thread_head(tid(1)), "thread_head"), None);
    assert!(ok(store.threads(), "threads").is_empty());
    assert!(ok(store.history(), "history").is_empty());
    assert!(ok(store.registry(), "registry").is_empty());
    assert!(ok(store.waiting(), "waiting").is_empty());
    assert!(ok(store.attempts(), "attempts").is_empty());
    assert_eq!(ok(store.find_archived(tid(1)), "find_archived"), None);
    assert!(!store.describe().is_empty());
}

/// A second insert of an active id fails with `ThreadExists` and changes
/// nothing.
pub fn insert_refuses_an_active_id(store: &dyn ThreadStore) {
    ok(
        store.insert_thread(tid(1), head(1), &NodeGuard::vouched()),
        "insert",
    );
    let err = store
        .insert_thread(tid(1), head(2), &NodeGuard::vouched())
        .err();
    assert!(
        matches!(err, Some(StateError::ThreadExists { ref thread }) if *thread == tid(1)),
        "{err:?}"
    );
    assert_eq!(ok(store.thread_head(tid(1)), "thread_head"), Some(head(1)));
    ok(
        store.insert_thread(tid(2), head(1), &NodeGuard::vouched()),
        "insert another",
    );
    let all = ok(store.threads(), "threads");
    assert_eq!(all.len(), 2);
    assert_eq!(all.get(&tid(2)), Some(&head(1)));
}

/// `swap_head` moves a head only from the expected one, and says what it
/// found otherwise.
pub fn heads_move_by_compare_and_swap(store: &dyn ThreadStore) {
    let t = tid(1);
    ok(
        store.insert_thread(t, head(1), &NodeGuard::vouched()),
        "insert",
    );
    ok(
        store.swap_head(t, head(1), head(2), &NodeGuard::vouched()),
        "swap",
    );
    assert_eq!(ok(store.thread_head(t), "thread_head"), Some(head(2)));
    match store.swap_head(t, head(1), head(3), &NodeGuard::vouched()) {
        Err(StateError::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!(expected, head(1));
            assert_eq!(actual, Some(head(2)));
        }
        other => panic!("a stale swap must conflict: {other:?}"),
    }
    // Swapping to the same head is a successful no-op.
    ok(
        store.swap_head(t, head(2), head(2), &NodeGuard::vouched()),
        "swap to itself",
    );
    match store.swap_head(tid(9), head(1), head(2), &NodeGuard::vouched()) {
        Err(e @ StateError::Conflict { actual: None, .. }) => {
            assert_eq!(e.kind(), crate::ErrorKind::Conflict);
        }
        other => panic!("a swap of an unknown thread must conflict: {other:?}"),
    }
}

/// Eight threads race to move one head from the same expected value, 20
/// rounds: exactly one wins each round, and every loser is told the
/// winner's head.
pub fn racing_swaps_have_exactly_one_winner_per_round(store: &dyn ThreadStore) {
    let t = tid(7);
    ok(
        store.insert_thread(t, head(0), &NodeGuard::vouched()),
        "insert",
    );
    let mut current = head(0);
    for round in 1..=20u64 {
        let barrier = Barrier::new(8);
        let results: Vec<(Hash, Result<(), StateError>)> = thread::scope(|s| {
            let handles: Vec<_> = (0..8u64)
                .map(|i| {
                    let (t, current, barrier) = (t, &current, &barrier);
                    s.spawn(move || {
                        let new = head(round * 100 + i);
                        barrier.wait();
                        let r = store.swap_head(t, *current, new, &NodeGuard::vouched());
                        (new, r)
                    })
                })
                .collect();
            handles.into_iter().map(join).collect()
        });
        let winners: Vec<&Hash> = results
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let winner = *winners[0];
        for (_, r) in &results {
            match r {
                Ok(()) => {}
                Err(StateError::Conflict { actual, .. }) => {
                    assert_eq!(actual.as_ref(), Some(&winner), "round {round}")
                }
                Err(e) => panic!("round {round}: a loser failed otherwise: {e}"),
            }
        }
        assert_eq!(ok(store.thread_head(t), "thread_head"), Some(winner));
        current = winner;
    }
}

/// Archiving checks the head, removes the thread and appends to the
/// history, newest last; `find_archived` finds the latest entry.
pub fn archive_moves_a_thread_into_the_history(store: &dyn ThreadStore) {
    let (a, b) = (tid(1), tid(2));
    ok(
        store.insert_thread(a, head(1), &NodeGuard::vouched()),
        "insert a",
    );
    ok(
        store.insert_thread(b, head(2), &NodeGuard::vouched()),
        "insert b",
    );
    match store.archive(a, WF, Some(head(9)), "done") {
        Err(StateError::Conflict { actual, .. }) => assert_eq!(actual, Some(head(1))),
        other => panic!("archiving at a wrong head must conflict: {other:?}"),
    }
    let entry = ok(store.archive(a, WF, Some(head(1)), "done"), "archive a");
    assert_eq!((entry.thread, entry.head), (a, head(1)));
    assert_eq!(entry.reason.as_deref(), Some("done"));
    assert_eq!(ok(store.thread_head(a), "thread_head"), None);
    match store.archive(a, WF, None, "killed") {
        Err(e @ StateError::NotActive { .. }) => {
            assert_eq!(e.kind(), crate::ErrorKind::NotFound);
        }
        other => panic!("archiving an archived thread must fail: {other:?}"),
    }
    match store.archive(a, WF, Some(head(1)), "killed") {
        Err(StateError::Conflict { actual: None, .. }) => {}
        other => panic!("archiving a gone thread at a head must conflict: {other:?}"),
    }
    ok(store.archive(b, WF2, None, "killed"), "archive b");
    // The same id again: active, then archived a second time.
    ok(
        store.insert_thread(a, head(3), &NodeGuard::vouched()),
        "insert a again",
    );
    ok(store.archive(a, WF, None, "done"), "archive a again");
    let history = ok(store.history(), "history");
    let seen: Vec<(ThreadId, Hash)> = history.iter().map(|e| (e.thread, e.head)).collect();
    assert_eq!(seen, vec![(a, head(1)), (b, head(2)), (a, head(3))]);
    assert_eq!(history[1].workflow, WF2);
    assert_eq!(history[1].reason.as_deref(), Some("killed"));
    let latest = ok(store.find_archived(a), "find_archived");
    assert_eq!(latest.map(|e| e.head), Some(head(3)));
    assert!(ok(store.threads(), "threads").is_empty());
}

/// `register_workflow` returns the previous hash and the registry lists
/// the latest one.
pub fn registry_records_the_latest_hash(store: &dyn ThreadStore) {
    assert_eq!(
        ok(
            store.register_workflow("w", head(1), &NodeGuard::vouched()),
            "register"
        ),
        None
    );
    assert_eq!(
        ok(
            store.register_workflow("w", head(2), &NodeGuard::vouched()),
            "register"
        ),
        Some(head(1))
    );
    assert_eq!(
        ok(
            store.register_workflow("w", head(2), &NodeGuard::vouched()),
            "register same"
        ),
        Some(head(2))
    );
    ok(
        store.register_workflow("other/name é", head(3), &NodeGuard::vouched()),
        "register",
    );
    let reg = ok(store.registry(), "registry");
    assert_eq!(reg.len(), 2);
    assert_eq!(reg.get("w"), Some(&head(2)));
    assert_eq!(reg.get("other/name é"), Some(&head(3)));
}

/// `replace_config_text` writes only over the text it was given, refuses
/// a configuration that does not parse, and keeps the text as written.
pub fn the_configuration_is_replaced_by_compare_and_swap(store: &dyn ThreadStore) {
    const A: &str = "# the team's\ndefaultAgent: a\n";
    const B: &str = "defaultAgent: b\n";
    assert_eq!(ok(store.config_text(), "config text"), None);
    assert!(
        !ok(
            store.replace_config_text(Some(A), B),
            "replace a missing one"
        ),
        "replaced a configuration that does not exist"
    );
    assert!(ok(store.replace_config_text(None, A), "create"));
    assert!(
        !ok(store.replace_config_text(None, B), "create again"),
        "created over an existing configuration"
    );
    assert_eq!(ok(store.config_text(), "config text").as_deref(), Some(A));
    assert!(ok(store.replace_config_text(Some(A), B), "replace"));
    assert!(!ok(
        store.replace_config_text(Some(A), A),
        "replace a stale one"
    ));
    assert_eq!(ok(store.config_text(), "config text").as_deref(), Some(B));
    let config = ok(store.config(), "config").unwrap_or_default();
    assert_eq!(config.default_agent.as_deref(), Some("b"));
    match store.replace_config_text(Some(B), "defaultAgent: [unclosed\n") {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}"),
        Ok(done) => panic!("an unparsable configuration was accepted ({done})"),
    }
    assert_eq!(ok(store.config_text(), "config text").as_deref(), Some(B));
}

/// Editors that read the same configuration and race to replace it: one
/// wins, the others are told, and nothing is lost without them knowing.
pub fn racing_configuration_edits_have_exactly_one_winner(store: &dyn ThreadStore) {
    const BASE: &str = "defaultAgent: base\n";
    assert!(ok(store.replace_config_text(None, BASE), "create"));
    let barrier = Barrier::new(4);
    let won = AtomicUsize::new(0);
    thread::scope(|s| {
        for i in 0..4 {
            let (barrier, won) = (&barrier, &won);
            s.spawn(move || {
                let mine = format!("defaultAgent: editor-{i}\n");
                barrier.wait();
                if ok(store.replace_config_text(Some(BASE), &mine), "replace") {
                    won.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(won.load(Ordering::SeqCst), 1);
    let text = ok(store.config_text(), "config text").unwrap_or_default();
    assert!(text.starts_with("defaultAgent: editor-"), "{text}");
}

fn record(head: Hash, role: &str, since: u64) -> WaitingRecord {
    WaitingRecord {
        head,
        role: role.into(),
        prompt: "approve?".into(),
        agent: "me".into(),
        since,
        child: None,
    }
}

/// A wait is recorded only at the thread's head, kept once, and forgotten
/// when the head moves or the thread is archived.
pub fn a_wait_counts_only_at_its_head(store: &dyn ThreadStore) {
    let t = tid(1);
    ok(
        store.insert_thread(t, head(1), &NodeGuard::vouched()),
        "insert",
    );
    assert!(ok(
        store.mark_waiting(t, record(head(1), "reviewer", 1)),
        "mark"
    ));
    assert!(!ok(
        store.mark_waiting(t, record(head(1), "reviewer", 99)),
        "mark again"
    ));
    assert_eq!(
        ok(store.waiting_of(t), "waiting_of").map(|r| r.since),
        Some(1)
    );
    assert_eq!(ok(store.waiting(), "waiting").len(), 1);
    ok(
        store.swap_head(t, head(1), head(2), &NodeGuard::vouched()),
        "swap",
    );
    assert_eq!(ok(store.waiting_of(t), "waiting_of"), None);
    assert!(ok(store.waiting(), "waiting").is_empty());
    match store.mark_waiting(t, record(head(1), "reviewer", 3)) {
        Err(StateError::Conflict { actual, .. }) => assert_eq!(actual, Some(head(2))),
        other => panic!("a wait at a stale head must conflict: {other:?}"),
    }
    assert!(ok(
        store.mark_waiting(t, record(head(2), "reviewer", 4)),
        "mark"
    ));
    ok(store.archive(t, WF, None, "killed"), "archive");
    assert!(ok(store.waiting(), "waiting").is_empty());
    let mut roots = None;
    ok(
        store.while_collecting(&mut || {
            roots = Some(store.side_table_roots_locked(true)?);
            Ok(())
        }),
        "while_locked",
    );
    assert_eq!(roots, Some(Vec::new()));
    assert!(ok(store.waiting(), "waiting").is_empty());
}

/// Attempt records chain through `prev`; a failed write changes nothing;
/// pruning drops the entries of archived threads only.
pub fn attempts_chain_and_survive_only_for_active_threads(store: &dyn ThreadStore) {
    let (t, u) = (tid(1), tid(2));
    ok(
        store.insert_thread(t, head(1), &NodeGuard::vouched()),
        "insert t",
    );
    ok(
        store.insert_thread(u, head(1), &NodeGuard::vouched()),
        "insert u",
    );
    let first = ok(
        store.record_attempt(t, &mut |prev| {
            assert_eq!(prev, None);
            Ok(head(11))
        }),
        "first attempt",
    );
    assert_eq!(first, head(11));
    let second = ok(
        store.record_attempt(t, &mut |prev| {
            assert_eq!(prev, Some(head(11)));
            Ok(head(12))
        }),
        "second attempt",
    );
    assert_eq!(second, head(12));
    let failed = store.record_attempt(t, &mut |_| Err(StateError::NotActive { thread: tid(99) }));
    assert!(failed.is_err());
    assert_eq!(ok(store.attempt_head(t), "attempt_head"), Some(head(12)));
    ok(store.record_attempt(u, &mut |_| Ok(head(19))), "attempt u");
    ok(store.archive(u, WF, None, "done"), "archive u");
    let roots = |prune: bool| {
        let mut out = Vec::new();
        ok(
            store.while_collecting(&mut || {
                out = store.side_table_roots_locked(prune)?;
                Ok(())
            }),
            "while_locked",
        );
        out
    };
    assert_eq!(roots(false), vec![head(12)]);
    assert_eq!(ok(store.attempt_head(u), "attempt_head"), Some(head(19)));
    assert_eq!(roots(true), vec![head(12)]);
    assert_eq!(ok(store.attempt_head(u), "attempt_head"), None);
    assert_eq!(ok(store.attempts(), "attempts").len(), 1);
}

/// Eight threads recording attempts of one thread at once: every record
/// links the one before it, none is lost.
pub fn racing_attempts_are_all_kept(store: &dyn ThreadStore) {
    let t = tid(3);
    ok(
        store.insert_thread(t, head(1), &NodeGuard::vouched()),
        "insert",
    );
    let links: Mutex<Vec<(Option<Hash>, Hash)>> = Mutex::new(Vec::new());
    let barrier = Barrier::new(8);
    thread::scope(|s| {
        for i in 0..8u64 {
            let (t, links, barrier) = (t, &links, &barrier);
            s.spawn(move || {
                barrier.wait();
                ok(
                    store.record_attempt(t, &mut |prev| {
                        let new = head(100 + i);
                        links
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push((prev, new));
                        Ok(new)
                    }),
                    "record_attempt",
                );
            });
        }
    });
    let links = links
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert_eq!(links.len(), 8);
    // Walk back from the newest: every record reached exactly once.
    let mut at = ok(store.attempt_head(t), "attempt_head");
    let mut walked = 0;
    while let Some(h) = at {
        let link = links.iter().find(|(_, new)| *new == h);
        let Some((prev, _)) = link else {
            panic!("{h} is not a recorded attempt: {links:?}")
        };
        walked += 1;
        assert!(walked <= 8, "the chain loops: {links:?}");
        at = *prev;
    }
    assert_eq!(walked, 8, "a record was lost: {links:?}");
}

/// `epoch_and_head` gives what `gc_epoch` and `thread_head` give, for an
/// absent thread, an active one, one that moved and one archived, and
/// after a collection.
pub fn epoch_and_head_agree_with_each_read_alone(store: &dyn ThreadStore) {
    let both = |t| ok(store.epoch_and_head(t), "epoch_and_head");
    let alone = |t| {
        (
            ok(store.gc_epoch(), "gc_epoch"),
            ok(store.thread_head(t), "thread_head"),
        )
    };
    assert_eq!(both(tid(1)), alone(tid(1)));
    assert_eq!(both(tid(1)).1, None);
    ok(
        store.insert_thread(tid(1), head(1), &NodeGuard::vouched()),
        "insert",
    );
    assert_eq!(both(tid(1)), (alone(tid(1)).0, Some(head(1))));
    ok(
        store.swap_head(tid(1), head(1), head(2), &NodeGuard::vouched()),
        "swap",
    );
    assert_eq!(both(tid(1)).1, Some(head(2)));
    ok(
        store.while_collecting(&mut || store.begin_sweep().map(|_| ())),
        "while_collecting",
    );
    assert_eq!(both(tid(1)), alone(tid(1)));
    ok(store.archive(tid(1), head(9), None, "done"), "archive");
    assert_eq!(both(tid(1)), (alone(tid(1)).0, None));
}

/// `step_start` gives what `epoch_and_head` and `config` give, with no
/// configuration and with one.
pub fn step_start_agrees_with_each_read_alone(store: &dyn ThreadStore) {
    let start = |t| ok(store.step_start(t), "step_start");
    let first = start(tid(1));
    assert_eq!(
        (first.epoch, first.head),
        ok(store.epoch_and_head(tid(1)), "epoch_and_head")
    );
    assert_eq!(ok(first.config, "config"), ok(store.config(), "config"));
    ok(
        store.insert_thread(tid(1), head(1), &NodeGuard::vouched()),
        "insert",
    );
    ok(
        store.set_config_text(Some(
            "defaultAgent: mock\nagents:\n  mock: { command: uwf-mock }\n",
        )),
        "set_config_text",
    );
    let second = start(tid(1));
    assert_eq!(second.head, Some(head(1)));
    let config = ok(second.config, "config");
    assert_eq!(config, ok(store.config(), "config"));
    assert_eq!(
        config.and_then(|c| c.default_agent),
        Some("mock".to_string())
    );
}

/// A collection that sweeps makes the epoch odd while it runs (visible to
/// other readers) and even, and greater, after it; one that removes nothing
/// leaves it alone; one whose closure fails after it began still ends.
pub fn a_collection_moves_the_epoch_odd_then_even(store: &dyn ThreadStore) {
    let before = ok(store.gc_epoch(), "gc_epoch");
    assert!(!before.is_collecting(), "a fresh store is not collecting");
    // A collection that removes nothing changes nothing.
    ok(store.while_collecting(&mut || Ok(())), "while_collecting");
    assert_eq!(ok(store.gc_epoch(), "gc_epoch"), before);
    let mut seen = None;
    ok(
        store.while_collecting(&mut || {
            let began = store.begin_sweep()?;
            seen = Some(store.gc_epoch()?);
            assert_eq!(seen, Some(began));
            Ok(())
        }),
        "while_collecting",
    );
    let Some(during) = seen else {
        panic!("while_collecting did not run its closure")
    };
    assert!(
        during.is_collecting() && during > before,
        "{before} → {during}"
    );
    let after = ok(store.gc_epoch(), "gc_epoch");
    assert!(
        !after.is_collecting() && after > during,
        "{during} → {after}"
    );
    let failed = store.while_collecting(&mut || {
        store.begin_sweep()?;
        Err(StateError::NotActive { thread: tid(9) })
    });
    assert!(
        matches!(failed, Err(StateError::NotActive { .. })),
        "{failed:?}"
    );
    let later = ok(store.gc_epoch(), "gc_epoch");
    assert!(!later.is_collecting() && later > after, "{after} → {later}");
}

/// Installing a root runs the guard's check only when a collection may have
/// run since the guard's epoch, and a failing check leaves heads and the
/// registry as they were.
pub fn a_guard_checks_after_a_collection_and_a_failed_check_changes_nothing(
    store: &dyn ThreadStore,
) {
    use std::cell::Cell;
    let calls = Cell::new(0);
    let fine = || {
        calls.set(calls.get() + 1);
        Ok(())
    };
    let gone = || Err(crate::guard::node_gone(head(7), head(8)));
    let epoch = ok(store.gc_epoch(), "gc_epoch");
    let (t, u) = (tid(1), tid(2));
    ok(
        store.insert_thread(t, head(1), &NodeGuard::new(epoch, &fine)),
        "insert",
    );
    ok(
        store.swap_head(t, head(1), head(2), &NodeGuard::new(epoch, &fine)),
        "swap",
    );
    assert_eq!(calls.get(), 0, "no collection ran: nothing to check");

    ok(
        store.while_collecting(&mut || store.begin_sweep().map(|_| ())),
        "while_collecting",
    );
    ok(
        store.swap_head(t, head(2), head(3), &NodeGuard::new(epoch, &fine)),
        "swap",
    );
    assert_eq!(calls.get(), 1, "a collection ran since the epoch: checked");

    let err = store.swap_head(t, head(3), head(4), &NodeGuard::new(epoch, &gone));
    assert!(matches!(err, Err(StateError::NodeGone { .. })), "{err:?}");
    assert_eq!(ok(store.thread_head(t), "thread_head"), Some(head(3)));
    let err = store.insert_thread(u, head(5), &NodeGuard::new(epoch, &gone));
    assert!(matches!(err, Err(StateError::NodeGone { .. })), "{err:?}");
    assert_eq!(ok(store.thread_head(u), "thread_head"), None);
    let err = store.register_workflow("w", head(6), &NodeGuard::new(epoch, &gone));
    assert!(matches!(err, Err(StateError::NodeGone { .. })), "{err:?}");
    assert!(ok(store.registry(), "registry").is_empty());
    // The current epoch proves nothing was collected since: no check.
    let now = ok(store.gc_epoch(), "gc_epoch");
    ok(
        store.swap_head(t, head(3), head(4), &NodeGuard::new(now, &gone)),
        "swap at the current epoch",
    );
}

/// While `while_collecting` runs, a mutation from another thread waits
/// until it is done.
pub fn while_locked_holds_back_mutations(store: &dyn ThreadStore) {
    let t = tid(1);
    ok(
        store.insert_thread(t, head(1), &NodeGuard::vouched()),
        "insert",
    );
    let inside = AtomicBool::new(false);
    let released = AtomicBool::new(false);
    thread::scope(|s| {
        let (inside, released) = (&inside, &released);
        let mut mover = None;
        ok(
            store.while_collecting(&mut || {
                inside.store(true, Ordering::SeqCst);
                let h = s.spawn(move || {
                    ok(
                        store.swap_head(t, head(1), head(2), &NodeGuard::vouched()),
                        "swap",
                    );
                    // The swap may only complete once the lock is released.
                    released.load(Ordering::SeqCst)
                });
                mover = Some(h);
                // Give the mover every chance to (wrongly) get through.
                thread::sleep(Duration::from_millis(200));
                // Reads still work while locked.
                assert_eq!(store.thread_head(t)?, Some(head(1)));
                released.store(true, Ordering::SeqCst);
                Ok(())
            }),
            "while_locked",
        );
        assert!(inside.load(Ordering::SeqCst));
        let Some(h) = mover else {
            panic!("while_locked did not run its closure")
        };
        assert!(join(h), "a swap completed while the store was locked");
    });
    assert_eq!(ok(store.thread_head(t), "thread_head"), Some(head(2)));
}

/// `overflow: drop`: no free slot fails at once, and a freed slot is taken
/// again.
pub fn drop_overflow_fails_at_once_when_full(store: &dyn ThreadStore) {
    let limits = match WorkflowLimits::drop(2) {
        Ok(l) => l,
        Err(e) => panic!("limits: {e}"),
    };
    let take = || store.acquire_slot("wf", limits, POLL, &mut |_| panic!("drop never waits"));
    let a = take().unwrap_or_else(|e| panic!("first slot: {e}"));
    let b = take().unwrap_or_else(|e| panic!("second slot: {e}"));
    assert_ne!(a.index(), b.index());
    match take() {
        Err(SlotError::Full {
            workflow,
            concurrency: 2,
        }) => assert_eq!(workflow, "wf"),
        Err(e) => panic!("a third holder must be refused as full: {e}"),
        Ok(h) => panic!("a third holder got slot {}", h.index()),
    }
    // Another workflow has slots of its own.
    let other = store.acquire_slot("wf2", limits, POLL, &mut |_| true);
    assert!(other.is_ok(), "{:?}", other.err());
    drop(a);
    let c = take().unwrap_or_else(|e| panic!("a freed slot: {e}"));
    drop((b, c));
}

/// Six holders contend for a workflow with `concurrency: 2` (queueing):
/// never more than two hold a slot at once, and every one gets a turn.
pub fn the_limit_holds_across_contending_holders(store: &dyn ThreadStore) {
    let running = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    let served = AtomicUsize::new(0);
    let barrier = Barrier::new(6);
    thread::scope(|s| {
        for _ in 0..6 {
            let (running, most, served, barrier) = (&running, &most, &served, &barrier);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..3 {
                    let hold = store
                        .acquire_slot("wf", limits_queue(2, 16), POLL, &mut |_| true)
                        .unwrap_or_else(|e| panic!("acquire: {e}"));
                    assert!(hold.index() < 2, "slot index {}", hold.index());
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(10));
                    running.fetch_sub(1, Ordering::SeqCst);
                    served.fetch_add(1, Ordering::SeqCst);
                    drop(hold);
                }
            });
        }
    });
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "{} holders at once",
        most.load(Ordering::SeqCst)
    );
    assert!(most.load(Ordering::SeqCst) >= 1);
    assert_eq!(served.load(Ordering::SeqCst), 18);
}

/// Queues `n` waiters for `wf` one after the other (each is in the queue
/// before the next starts); each records its number in `order` once served
/// and holds the slot for a moment.
fn queue_up<'s, 'e>(
    s: &'s thread::Scope<'s, 'e>,
    store: &'e dyn ThreadStore,
    limits: WorkflowLimits,
    range: std::ops::Range<usize>,
    order: &'e Mutex<Vec<usize>>,
) -> Vec<thread::ScopedJoinHandle<'s, Result<(), SlotError>>> {
    range
        .map(|i| {
            let (tx, rx) = mpsc::channel::<()>();
            let h = s.spawn(move || {
                let hold = store.acquire_slot("wf", limits, POLL, &mut |_| {
                    let _ = tx.send(());
                    true
                });
                // Unblock the spawner even if this one never waited.
                drop(tx);
                let hold = hold?;
                order
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(i);
                thread::sleep(Duration::from_millis(10));
                drop(hold);
                Ok(())
            });
            // In the queue (or done) before the next one arrives.
            let _ = rx.recv_timeout(Duration::from_secs(60));
            h
        })
        .collect()
}

/// Who was served so far, in order.
fn served(order: &Mutex<Vec<usize>>) -> Vec<usize> {
    order
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Takes a slot of `wf` that must be free.
fn take_free_slot(store: &dyn ThreadStore, limits: WorkflowLimits) -> Box<dyn crate::SlotHold> {
    store
        .acquire_slot("wf", limits, POLL, &mut |_| panic!("the slot is free"))
        .unwrap_or_else(|e| panic!("acquire: {e}"))
}

/// With the only slot held, five waiters queue one after the other; once
/// it is freed they are served in arrival order.
pub fn waiters_are_served_first_in_first_out(store: &dyn ThreadStore) {
    let limits = limits_queue(1, 16);
    let held = take_free_slot(store, limits);
    let order = Mutex::new(Vec::new());
    thread::scope(|s| {
        let waiters = queue_up(s, store, limits, 0..5, &order);
        thread::sleep(Duration::from_millis(50));
        assert!(served(&order).is_empty(), "somebody got the held slot");
        drop(held);
        for w in waiters {
            join(w).unwrap_or_else(|e| panic!("waiter: {e}"));
        }
    });
    assert_eq!(served(&order), [0, 1, 2, 3, 4]);
    // Nobody is left in the queue: the slot is free for a newcomer at once.
    let again = store.acquire_slot("wf", limits, POLL, &mut |w| {
        panic!("an empty queue made a newcomer wait: {w:?}")
    });
    assert!(again.is_ok(), "{:?}", again.err());
}

/// `maxQueue: 2`: a third waiter pushes out the oldest, which fails with
/// `Evicted`; the others are served in order.
pub fn a_full_queue_pushes_out_its_oldest_waiter(store: &dyn ThreadStore) {
    let limits = limits_queue(1, 2);
    let held = take_free_slot(store, limits);
    let order = Mutex::new(Vec::new());
    thread::scope(|s| {
        let mut first_two = queue_up(s, store, limits, 0..2, &order).into_iter();
        let first = first_two.next();
        let mut rest: Vec<_> = first_two.collect();
        rest.extend(queue_up(s, store, limits, 2..3, &order));
        let Some(first) = first else {
            panic!("no first waiter")
        };
        match join(first) {
            Err(SlotError::Evicted {
                workflow,
                max_queue: 2,
                ..
            }) => assert_eq!(workflow, "wf"),
            other => panic!("the oldest waiter must be evicted: {other:?}"),
        }
        assert!(served(&order).is_empty());
        drop(held);
        for w in rest {
            join(w).unwrap_or_else(|e| panic!("waiter: {e}"));
        }
    });
    assert_eq!(served(&order), [1, 2]);
}

/// The waiting callback learns its place in the queue, and returning
/// `false` gives up with `Cancelled` (leaving the queue).
pub fn waiting_can_be_cancelled(store: &dyn ThreadStore) {
    let limits = limits_queue(1, 16);
    let held = take_free_slot(store, limits);
    let order = Mutex::new(Vec::new());
    thread::scope(|s| {
        let first = queue_up(s, store, limits, 0..1, &order);
        let mut seen = Vec::new();
        let got = store.acquire_slot("wf", limits, POLL, &mut |w| {
            seen.push(w.ahead);
            seen.len() < 3
        });
        match got {
            Err(SlotError::Cancelled { workflow }) => assert_eq!(workflow, "wf"),
            Err(e) => panic!("must be cancelled: {e}"),
            Ok(h) => panic!("got slot {} while it was held", h.index()),
        }
        assert_eq!(seen, [1, 1, 1]);
        drop(held);
        for w in first {
            join(w).unwrap_or_else(|e| panic!("waiter: {e}"));
        }
    });
    // The head of the queue sees nobody ahead.
    let held = take_free_slot(store, limits);
    let mut seen = Vec::new();
    let _ = store.acquire_slot("wf", limits, POLL, &mut |w| {
        seen.push(w.ahead);
        false
    });
    assert_eq!(seen, [0]);
    drop(held);
}

// ----- the run queue ------------------------------------------------------

/// A lease no test outlives.
const LONG: Duration = Duration::from_secs(600);

/// Makes thread `n` active and queues it for `workflow`.
fn queued<S: ThreadStore + RunQueue>(store: &S, n: u64, workflow: &str) -> crate::Run {
    ok(
        store.insert_thread(tid(n), head(n), &NodeGuard::vouched()),
        "insert",
    );
    ok(
        store.enqueue(tid(n), workflow, RunRequest::default()),
        "enqueue",
    )
}

/// Claims any run for `worker`.
fn claim_any(store: &dyn RunQueue, worker: &str, lease: Duration) -> Option<Claim> {
    ok(store.claim(worker, &[], lease), "claim")
}

/// Claims a run that must be there.
fn claim_one(store: &dyn RunQueue, worker: &str) -> Claim {
    match claim_any(store, worker, LONG) {
        Some(c) => c,
        None => panic!("{worker} found nothing to claim"),
    }
}

/// The worker named by the run of `thread`, if it is claimed.
fn claimed_by(store: &dyn RunQueue, thread: ThreadId) -> Option<String> {
    match ok(store.run_of(thread), "run_of").map(|r| r.state) {
        Some(RunState::Claimed { worker, .. }) => Some(worker),
        _ => None,
    }
}

/// Only an active thread can be queued, and only once while it is queued
/// or claimed (a conflict that changes nothing).
pub fn enqueue_needs_an_active_thread_and_refuses_a_second_time<S: ThreadStore + RunQueue>(
    store: &S,
) {
    match store.enqueue(tid(1), "wf", RunRequest::default()) {
        Err(e @ StateError::NotActive { .. }) => assert_eq!(e.kind(), ErrorKind::NotFound),
        other => panic!("queueing an unknown thread: {other:?}"),
    }
    assert!(ok(store.runs(), "runs").is_empty());
    let run = queued(store, 1, "wf");
    assert_eq!(
        (run.thread, run.state, run.claims),
        (tid(1), RunState::Queued, 0)
    );
    assert_eq!(run.workflow, "wf");
    match store.enqueue(tid(1), "other", RunRequest::default()) {
        Err(e @ StateError::AlreadyQueued { .. }) => {
            assert_eq!(e.kind(), ErrorKind::Conflict);
            assert!(e.to_string().contains("(queued)"), "{e}");
        }
        other => panic!("queueing twice: {other:?}"),
    }
    let _held = claim_one(store, "w1");
    match store.enqueue(tid(1), "wf", RunRequest::default()) {
        Err(e @ StateError::AlreadyQueued { .. }) => {
            assert!(e.to_string().contains("claimed by worker w1"), "{e}");
        }
        other => panic!("queueing a claimed run: {other:?}"),
    }
    let runs = ok(store.runs(), "runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].workflow, "wf");
}

/// `runs` lists oldest first; a run keeps its request through a claim,
/// and the claim is what `run_of` then shows.
pub fn runs_are_listed_oldest_first_and_keep_their_request<S: ThreadStore + RunQueue>(store: &S) {
    let request = RunRequest {
        agent: Some("uwf-mock 's.yaml'".into()),
        max_steps: Some(7),
        timeout_ms: Some(1500),
    };
    for n in [3, 1, 2] {
        ok(
            store.insert_thread(tid(n), head(n), &NodeGuard::vouched()),
            "insert",
        );
        ok(store.enqueue(tid(n), "wf", request.clone()), "enqueue");
        // Distinct queue times, so the order is the order of queueing.
        thread::sleep(Duration::from_millis(3));
    }
    let runs = ok(store.runs(), "runs");
    let order: Vec<ThreadId> = runs.iter().map(|r| r.thread).collect();
    assert_eq!(order, [tid(3), tid(1), tid(2)]);
    assert!(runs.windows(2).all(|w| w[0].queued_at < w[1].queued_at));
    assert!(runs.iter().all(|r| r.request == request));
    assert_eq!(ok(store.run_of(tid(9)), "run_of"), None);

    let c = claim_one(store, "host-1-ab");
    assert_eq!((c.thread(), c.worker.as_str()), (tid(3), "host-1-ab"));
    assert_eq!((c.run.request.clone(), c.run.claims), (request, 1));
    assert_eq!(Some(&c.run), ok(store.run_of(tid(3)), "run_of").as_ref());
    match &c.run.state {
        RunState::Claimed {
            worker,
            claim_id,
            claimed_at,
            lease_until,
        } => {
            assert_eq!((worker, claim_id), (&c.worker, &c.claim_id));
            assert_eq!(*lease_until, c.lease_until);
            assert!(*lease_until >= claimed_at + 600_000, "{c:?}");
        }
        other => panic!("a claimed run is {other:?}"),
    }
    let next = claim_one(store, "w2");
    assert_ne!(
        next.claim_id, c.claim_id,
        "every claim has an id of its own"
    );
    assert_eq!(next.thread(), tid(1));
}

/// Eight workers claim at once until nothing is left: every run is
/// claimed exactly once.
pub fn racing_claimers_get_each_run_exactly_once<S: ThreadStore + RunQueue + Sync>(store: &S) {
    for n in 0..12 {
        queued(store, n, "wf");
    }
    let barrier = Barrier::new(8);
    let mut all: Vec<ThreadId> = thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let mut got = Vec::new();
                    while let Some(c) = claim_any(store, &format!("w{w}"), LONG) {
                        assert_eq!(claimed_by(store, c.thread()), Some(format!("w{w}")));
                        got.push(c.thread());
                    }
                    got
                })
            })
            .collect();
        handles.into_iter().flat_map(join).collect()
    });
    all.sort();
    assert_eq!(all, (0..12).map(tid).collect::<Vec<_>>());
    assert!(claim_any(store, "late", LONG).is_none());
}

/// A claim whose lease ran out is taken over; the old holder's renewal and
/// release then fail with `LeaseLost` (a conflict) and change nothing,
/// while the new holder renews and keeps the run.
pub fn an_expired_lease_is_taken_over_and_the_old_holder_is_fenced<S: ThreadStore + RunQueue>(
    store: &S,
) {
    queued(store, 1, "wf");
    let mut first = match claim_any(store, "w1", Duration::from_millis(1)) {
        Some(c) => c,
        None => panic!("nothing to claim"),
    };
    assert_eq!(first.run.claims, 1);
    // Not claimable while the lease runs (however short, it may not have
    // run out yet); once it has, the next claim takes the run over.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let second = loop {
        thread::sleep(Duration::from_millis(20));
        if let Some(c) = claim_any(store, "w2", LONG) {
            break c;
        }
        assert!(std::time::Instant::now() < deadline, "never taken over");
    };
    assert_eq!((second.thread(), second.run.claims), (tid(1), 2));
    assert_ne!(second.claim_id, first.claim_id);
    let lease_before = first.lease_until;
    match store.renew(&mut first, LONG) {
        Err(e @ StateError::LeaseLost { .. }) => {
            assert_eq!(e.kind(), ErrorKind::Conflict);
            assert!(e.to_string().contains("worker w2 claimed it since"), "{e}");
        }
        other => panic!("renewing a lost lease: {other:?}"),
    }
    assert_eq!(first.lease_until, lease_before);
    let before = ok(store.run_of(tid(1)), "run_of");
    for outcome in [
        RunOutcome::Finished,
        RunOutcome::Interrupted,
        RunOutcome::Failed("stale".into()),
    ] {
        match store.release(&first, outcome) {
            Err(e @ StateError::LeaseLost { .. }) => assert_eq!(e.kind(), ErrorKind::Conflict),
            other => panic!("releasing a lost lease: {other:?}"),
        }
    }
    assert_eq!(ok(store.run_of(tid(1)), "run_of"), before);
    // The live holder renews and keeps it; nobody else can claim it.
    let mut second = second;
    let until = second.lease_until;
    ok(store.renew(&mut second, LONG), "renew");
    assert!(second.lease_until >= until);
    assert!(claim_any(store, "w3", LONG).is_none());
    assert_eq!(claimed_by(store, tid(1)), Some("w2".to_string()));
}

/// `Finished` removes the run, `Failed` keeps it (with its error, never
/// claimed) until it is queued again, `Interrupted` puts it back keeping
/// its place; a released claim is gone.
pub fn release_outcomes<S: ThreadStore + RunQueue>(store: &S) {
    for n in 1..=3 {
        queued(store, n, "wf");
    }
    let c1 = claim_one(store, "w");
    let c2 = claim_one(store, "w");
    let c3 = claim_one(store, "w");
    assert_eq!(
        [c1.thread(), c2.thread(), c3.thread()],
        [tid(1), tid(2), tid(3)]
    );

    ok(store.release(&c1, RunOutcome::Finished), "release finished");
    assert_eq!(ok(store.run_of(tid(1)), "run_of"), None);

    ok(
        store.release(&c2, RunOutcome::Failed("agent exploded".into())),
        "release failed",
    );
    match ok(store.run_of(tid(2)), "run_of").map(|r| r.state) {
        Some(RunState::Failed { error, worker, .. }) => {
            assert_eq!((error.as_str(), worker.as_str()), ("agent exploded", "w"));
        }
        other => panic!("a failed run is {other:?}"),
    }

    ok(
        store.release(&c3, RunOutcome::Interrupted),
        "release interrupted",
    );
    assert_eq!(
        ok(store.run_of(tid(3)), "run_of").map(|r| r.state),
        Some(RunState::Queued)
    );
    // Back in the queue, keeping its place; the failed one is not claimed.
    let again = claim_one(store, "w2");
    assert_eq!((again.thread(), again.run.claims), (tid(3), 2));
    assert_eq!(again.run.queued_at, c3.run.queued_at);
    assert!(claim_any(store, "w2", LONG).is_none());
    // Releasing twice: the claim is gone.
    match store.release(&c1, RunOutcome::Finished) {
        Err(e @ StateError::LeaseLost { .. }) => {
            assert!(e.to_string().contains("no longer queued"), "{e}");
        }
        other => panic!("releasing twice: {other:?}"),
    }
    let mut stale = c3.clone();
    match store.renew(&mut stale, LONG) {
        Err(StateError::LeaseLost { .. }) => {}
        other => panic!("renewing a released claim: {other:?}"),
    }

    // A failed run can be queued again, and is claimed again.
    let run = ok(
        store.enqueue(tid(2), "wf", RunRequest::default()),
        "enqueue a failed run",
    );
    assert_eq!((run.state, run.claims), (RunState::Queued, 0));
    assert_eq!(claim_one(store, "w3").thread(), tid(2));
}

/// Claims take only runs of the workflows asked for; runs of threads that
/// are no longer active are dropped on the way, and a failed run goes once
/// its thread is no longer active.
pub fn claims_follow_the_workflow_filter_and_drop_runs_of_inactive_threads<
    S: ThreadStore + RunQueue,
>(
    store: &S,
) {
    queued(store, 1, "alpha");
    queued(store, 2, "beta");
    queued(store, 3, "beta");
    queued(store, 4, "gamma");
    ok(store.archive(tid(2), WF, None, "killed"), "archive");
    let only_alpha = ["alpha".to_string()];
    let c = ok(store.claim("w", &only_alpha, LONG), "claim alpha");
    assert_eq!(c.as_ref().map(Claim::thread), Some(tid(1)));
    assert!(ok(store.claim("w", &only_alpha, LONG), "claim alpha").is_none());
    let beta_gamma = ["gamma".to_string(), "beta".to_string()];
    let c = ok(store.claim("w", &beta_gamma, LONG), "claim beta");
    assert_eq!(c.as_ref().map(Claim::thread), Some(tid(3)));
    // Thread 2 was killed while queued: its run is gone.
    assert_eq!(ok(store.run_of(tid(2)), "run_of"), None);
    // A failed run stays while its thread is active, and goes once the
    // thread is no longer active.
    let Some(c) = c else { panic!("no claim") };
    ok(
        store.release(&c, RunOutcome::Failed("no".into())),
        "release",
    );
    let last = claim_any(store, "w", LONG);
    assert_eq!(last.as_ref().map(Claim::thread), Some(tid(4)));
    assert!(claim_any(store, "w", LONG).is_none());
    assert!(ok(store.run_of(tid(3)), "run_of").is_some());
    ok(store.archive(tid(3), WF, None, "killed"), "archive");
    assert!(claim_any(store, "w", LONG).is_none());
    assert_eq!(ok(store.run_of(tid(3)), "run_of"), None);
    let left: Vec<ThreadId> = ok(store.runs(), "runs").iter().map(|r| r.thread).collect();
    assert_eq!(left, [tid(1), tid(4)], "the claimed runs are left");
}

#[cfg(test)]
mod tests {
    mod fs {
        crate::thread_store_contract_tests!({
            let dir = match tempfile::tempdir() {
                Ok(d) => d,
                Err(e) => panic!("tempdir: {e}"),
            };
            (crate::FsState::new(dir.path()), dir)
        });
        crate::run_queue_contract_tests!({
            let dir = match tempfile::tempdir() {
                Ok(d) => d,
                Err(e) => panic!("tempdir: {e}"),
            };
            (crate::FsState::new(dir.path()), dir)
        });
    }
}
