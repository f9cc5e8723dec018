//! The integration tests of uwf-hermes in one test binary,
//! `cargo test -p uwf-hermes --test it`. Each module was a test binary of its own;
//! one binary links the dependency graph once instead of once per module.
//! Run one module's tests with a filter: `cargo test -p uwf-hermes --test it MODULE::`.

mod cli;
mod real_hermes;
