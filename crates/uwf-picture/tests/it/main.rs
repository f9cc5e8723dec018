//! The integration tests of uwf-picture in one test binary,
//! `cargo test -p uwf-picture --test it`. Each module was a test binary of its own;
//! one binary links the dependency graph once instead of once per module.
//! Run one module's tests with a filter: `cargo test -p uwf-picture --test it MODULE::`.

mod docs_examples;
mod js_reference;
mod robustness;
mod suite_cases;
