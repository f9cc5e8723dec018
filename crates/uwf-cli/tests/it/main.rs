//! The integration tests of uwf-cli (the `uwf` binary) in one test binary,
//! `cargo test -p uwf-cli --test it`. Each module was a test binary of its own;
//! one binary links the dependency graph once instead of once per module.
//! Run one module's tests with a filter: `cargo test -p uwf-cli --test it MODULE::`.

#[macro_use]
mod common;

mod agent_cli;
mod cas_cli;
mod concurrency_cli;
mod derived_cache;
mod diagnostics;
mod editors_cli;
mod expressions_cli;
mod fault_trials;
mod habits_cli;
mod human_cli;
mod layers;
mod legacy_store;
mod multihost;
mod nested_cli;
mod postgres_cli;
mod retry_cli;
mod setup_cli;
mod stdio_cli;
mod store_cli;
mod story_cli;
mod thread_cli;
mod upstream_cli;
mod view_cli;
mod worker_cli;
mod workflow_cli;
