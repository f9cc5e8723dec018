//! The uwf contract.
//!
//! Plain serde types for everything that crosses a process or file boundary:
//! the payloads of the CAS nodes a thread is made of ([`WorkflowPayload`],
//! [`StartNodePayload`], [`StepNodePayload`]), the context the moderator
//! evaluates ([`ModeratorContext`]), the JSON that `uwf` prints
//! ([`StartOutput`], [`StepOutput`], …) and the state files
//! ([`WorkflowConfig`], [`ThreadsIndex`], [`HistoryEntry`]).
//!
//! Field names are camelCase on the wire, exactly as in the design documents.
//! Hashes are plain strings here ([`CasRef`]); the CAS validates their format
//! (`cas_ref`) whenever a node is stored, so this crate stays dependency-free.
//!
//! [`schemas`] holds the JSON Schemas of the three node types uwf itself
//! writes. They are data: changing one changes its hash, so edit with care.

pub mod schemas;

mod config;
mod nodes;
mod output;
mod resilience;

pub use config::*;
pub use nodes::*;
pub use output::*;
pub use resilience::*;

/// A CAS hash: XXH64 of the node, as 13 Crockford Base32 characters.
pub type CasRef = String;

/// A thread id: a ULID, 26 Crockford Base32 characters.
pub type ThreadId = String;

/// The pseudo-role the moderator starts from.
pub const START: &str = "$START";

/// The pseudo-role that ends a thread.
pub const END: &str = "$END";
