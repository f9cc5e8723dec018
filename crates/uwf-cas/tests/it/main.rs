//! The integration tests of uwf-cas in one test binary,
//! `cargo test -p uwf-cas --test it`. Each module was a test binary of its own;
//! one binary links the dependency graph once instead of once per module.
//! Run one module's tests with a filter: `cargo test -p uwf-cas --test it MODULE::`.

mod golden;
mod store;
