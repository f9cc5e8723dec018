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
//! Identifiers are typed: a node reference is a [`Hash`](struct@Hash) and a thread id a
//! [`ThreadId`]. Both serialise as their canonical Crockford Base32 text
//! ([`base32`]), exactly the strings the design documents show, so the types
//! change nothing on the wire or on disk; they only make it impossible to
//! pass a thread id where a hash belongs, or to build a file name from an
//! unchecked string.
//!
//! [`schemas`] holds the JSON Schemas of the three node types uwf itself
//! writes. They are data: changing one changes its hash, so edit with care.

/// `Debug` and serde for an id type that is written as its `Display` text
/// and read back with `FromStr`.
macro_rules! text_id {
    ($ty:ident, $expecting:literal) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({self})", stringify!($ty))
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // A visitor rather than parsing a deserialized string, so
                // that the error is raised inside the deserializer, which
                // adds its position (line and column of a bad value in YAML).
                struct Visitor;

                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $ty;

                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str($expecting)
                    }

                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                }

                d.deserialize_str(Visitor)
            }
        }
    };
}
pub(crate) use text_id;

pub mod agent_env;
pub mod base32;
pub mod fixtures;
pub mod schemas;
pub mod transcript;

mod config;
mod hash;
mod nodes;
mod output;
mod resilience;
mod thread_id;

pub use config::*;
pub use hash::{Hash, ParseHashError};
pub use nodes::*;
pub use output::*;
pub use resilience::*;
pub use thread_id::{THREAD_ID_LEN, ThreadId, ThreadIdError};

/// The pseudo-role the moderator starts from.
pub const START: &str = "$START";

/// The pseudo-role that ends a thread.
pub const END: &str = "$END";
