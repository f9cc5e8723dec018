//! Shared infrastructure for uwf.
//!
//! Everything here is small, dependency-light and free of uwf domain logic:
//! storage-root resolution, crash-safe file writes, private file modes, advisory locks,
//! secret redaction, tracing set-up, the frontmatter-markdown parser used by agents, the
//! supervisor of child processes (`supervise`), and
//! error text about a person's files that quotes no more than the line at
//! fault.

pub mod atomic;
pub mod frontmatter;
pub mod lock;
pub mod private;
pub mod redact;
pub mod root;
#[cfg(unix)]
pub mod supervise;
pub mod text;
pub mod trace;
