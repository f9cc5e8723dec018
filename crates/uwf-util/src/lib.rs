//! Shared infrastructure for uwf.
//!
//! Everything here is small, dependency-light and free of uwf domain logic:
//! storage-root resolution, crash-safe file writes, private file modes, advisory locks, secret redaction, tracing set-up and the frontmatter-markdown parser used by agents.

pub mod atomic;
pub mod frontmatter;
pub mod lock;
pub mod private;
pub mod redact;
pub mod root;
pub mod trace;
