//! The integration tests of uwf-agent-kit in one test binary,
//! `cargo test -p uwf-agent-kit --test it`. Each module was a test binary of its own;
//! one binary links the dependency graph once instead of once per module.
//! Run one module's tests with a filter: `cargo test -p uwf-agent-kit --test it MODULE::`.

mod gemini_example;
mod mock_llm_bin;
mod third_party;
