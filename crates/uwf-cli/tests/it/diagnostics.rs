//! What `uwf` prints when a user gets something wrong, whole, as snapshots
//! (`insta`; the files under `tests/it/snapshots/`). Each report is the
//! contract of its error: the message, the code and the hint. A change to
//! one shows up as a snapshot diff in review (`cargo insta review`, or
//! `INSTA_UPDATE=always` to write them) instead of passing unnoticed
//! behind a `contains` check. Only reports without a machine's paths are
//! snapshotted.

use crate::common::Env;

/// A store URL of a scheme `uwf` has no backend for: the URL without its
/// password, where the setting came from, what it can open, the hint.
#[test]
fn an_unknown_store_scheme() {
    let env = Env::new();
    let err = env.fails(&["--store", "mysql://u:hunter2@h/db", "thread", "list"]);
    insta::assert_snapshot!(err);
}

/// An empty `--store`.
#[test]
fn an_empty_store_setting() {
    let env = Env::new();
    insta::assert_snapshot!(env.fails(&["--store", " ", "thread", "list"]));
}

/// A thread id that names no thread, and one that is not an id at all.
#[test]
fn threads_that_are_not_there() {
    let env = Env::new();
    let unknown = env.fails(&["thread", "show", "01M8C61M37J78PDJ24K6GMVMN6"]);
    insta::assert_snapshot!("unknown_thread", unknown);
    let malformed = env.fails(&["thread", "show", "not-a-thread"]);
    insta::assert_snapshot!("malformed_thread_id", malformed);
}

/// `uwf setup` with no flags and no terminal to ask on.
#[test]
fn setup_without_flags_or_a_terminal() {
    let env = Env::new();
    insta::assert_snapshot!(env.fails(&["setup"]));
}
