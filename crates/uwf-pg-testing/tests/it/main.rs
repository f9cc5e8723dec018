//! The integration tests of uwf-pg-testing in one test binary,
//! `cargo test -p uwf-pg-testing --test it`. Each module was a test binary of its own;
//! one binary links the dependency graph once instead of once per module.
//! Run one module's tests with a filter: `cargo test -p uwf-pg-testing --test it MODULE::`.

mod proxy;
mod restart;
