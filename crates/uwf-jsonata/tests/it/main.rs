//! The integration tests of uwf-jsonata in one test binary,
//! `cargo test -p uwf-jsonata --test it`. Each module was a test binary of its own;
//! one binary links the dependency graph once instead of once per module.
//! Run one module's tests with a filter: `cargo test -p uwf-jsonata --test it MODULE::`.

mod differential;
mod properties;
mod suite;
