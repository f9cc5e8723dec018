//! The integration tests of uwf-engine in one test binary,
//! `cargo test -p uwf-engine --test it`. Each module was a test binary of its own;
//! one binary links the dependency graph once instead of once per module.
//! Run one module's tests with a filter: `cargo test -p uwf-engine --test it MODULE::`.

mod common;

mod postgres;
mod postgres_worker;
