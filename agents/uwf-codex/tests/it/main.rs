//! The integration tests of uwf-codex in one test binary,
//! `cargo test -p uwf-codex --test it`, named `it` as every crate's is: a
//! run filtered to `--test it` (as `.ci/run`'s agent steps are) then builds
//! the same units as the whole workspace's test build. Run one module's
//! tests with a filter: `cargo test -p uwf-codex --test it MODULE::`.

mod real_codex;
