//! `PgStore` under the faults of the trials (issue 12): the network to the
//! database cut and healed (a proxy of `uwf_pg_testing`), the server
//! restarted. A cut or a down server is an `Unavailable` error, never a
//! hang or another kind; once the network or the server is back the store
//! works again without being reopened. A restart disturbs every test on
//! the server, so these tests run on `uwf_pg_testing::fault_server` (not the
//! server of `pg`) and take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use uwf_cas::Hash;
use uwf_state::ErrorKind;
use uwf_state::prelude::*;
use uwf_store_pg::PgStore;

/// A thread id for these tests.
const T1: uwf_protocol::ThreadId = uwf_protocol::ThreadId::from_u128(1);

/// One test at a time: a restart would fail the others' calls.
static TURN: Mutex<()> = Mutex::new(());

#[test]
fn a_network_cut_is_unavailable_and_the_store_works_again_once_healed() {
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(server) = uwf_pg_testing::fault_server() else {
        return;
    };
    let db = server.create_database();
    let (port, proxy) = server.proxy();
    let store = PgStore::connect(&db.url_through(port, true), None).unwrap();
    store.init().unwrap();
    store
        .insert_thread(T1, Hash::from_u64(1), &uwf_state::NodeGuard::vouched())
        .unwrap();

    proxy.cut();
    let err = store.thread_head(T1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    // New connections are refused too: still unavailable, and a write
    // changes nothing.
    let err = store
        .swap_head(
            T1,
            Hash::from_u64(1),
            Hash::from_u64(2),
            &uwf_state::NodeGuard::vouched(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");

    proxy.heal();
    assert_eq!(store.thread_head(T1).unwrap(), Some(Hash::from_u64(1)));
    store
        .swap_head(
            T1,
            Hash::from_u64(1),
            Hash::from_u64(2),
            &uwf_state::NodeGuard::vouched(),
        )
        .unwrap();
    assert_eq!(store.thread_head(T1).unwrap(), Some(Hash::from_u64(2)));
}

#[test]
fn a_restarted_server_costs_at_most_one_failed_call() {
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(server) = uwf_pg_testing::fault_server() else {
        return;
    };
    let db = server.create_database();
    let store = PgStore::connect(&db.url, None).unwrap();
    store
        .insert_thread(T1, Hash::from_u64(1), &uwf_state::NodeGuard::vouched())
        .unwrap();

    server.shut_down();
    let err = store.thread_head(T1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    server.start_again();
    // Right after the restart, a pooled connection the server closed may
    // be tried once (it was idle less than the check interval): the call
    // fails as unavailable, never otherwise, and the next one works.
    match store.thread_head(T1) {
        Ok(head) => assert_eq!(head, Some(Hash::from_u64(1))),
        Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}"),
    }
    assert_eq!(store.thread_head(T1).unwrap(), Some(Hash::from_u64(1)));

    // And a restart while the store is idle costs nothing.
    server.restart();
    // Idle past the check interval (the behaviour under test, a lower bound).
    std::thread::sleep(uwf_store_pg::CHECK_IDLE_AFTER + Duration::from_millis(200));
    assert_eq!(store.thread_head(T1).unwrap(), Some(Hash::from_u64(1)));
}
