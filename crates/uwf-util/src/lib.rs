//! Shared infrastructure for uwf.
//!
//! Everything here is small, dependency-light and free of uwf domain logic:
//! the Crockford Base32 codec used for CAS hashes, thread ids, storage-root
//! resolution, crash-safe file writes, advisory locks, tracing set-up and the frontmatter-markdown parser used by agents.

pub mod atomic;
pub mod base32;
pub mod frontmatter;
pub mod ids;
pub mod lock;
pub mod root;
pub mod trace;
