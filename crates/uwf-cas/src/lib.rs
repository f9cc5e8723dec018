//! The uwf content-addressed store.
//!
//! Every piece of uwf data — workflows, thread starts, steps, agent outputs,
//! and the JSON Schemas that type them — is a [`Node`]: a payload plus the
//! hash of the schema node it conforms to. A node's [`Hash`](struct@Hash) is XXH64 over the
//! type hash and the deterministic CBOR encoding of the payload, so equal
//! content always has one name and any change of a byte is detected on read.
//!
//! Layers, bottom up:
//! * [`cbor`] and [`node`]: the hash function (specified in `docs/cas.md`);
//! * [`Store`]: backends that keep bytes ([`FsStore`], [`MemStore`], or any
//!   other behind the trait: [`Cas::with_store`]), with streaming listings,
//!   a derived-data cache and errors classified by [`CasError::kind`];
//! * [`Cas`]: the typed store — bootstrap of the self-describing meta-schema,
//!   schema registration, validation, [`refs`](Cas::refs), [`walk`](Cas::walk)
//!   and [`verify`](Cas::verify).
//!
//! ```
//! use uwf_cas::{Cas, MemStore};
//! use serde_json::json;
//!
//! let cas = Cas::new(MemStore::new())?;
//! let note = cas.put_schema(json!({
//!     "title": "note",
//!     "type": "object",
//!     "properties": { "text": { "type": "string" }, "prev": { "type": ["string", "null"], "format": "cas_ref" } },
//!     "required": ["text"]
//! }))?;
//! let first = cas.put(note.hash, json!({ "text": "hello", "prev": null }))?;
//! let second = cas.put(note.hash, json!({ "text": "world", "prev": first.hash.to_string() }))?;
//! assert_eq!(cas.refs(second.hash)?[0].hash, first.hash);
//! assert!(cas.put(note.hash, json!({ "txt": 1 })).is_err());
//! # Ok::<(), uwf_cas::CasError>(())
//! ```

#![recursion_limit = "256"]

mod cas;
pub mod cbor;
mod error;
pub mod node;
pub mod refs;
pub mod schema;
mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use cas::{
    Cas, GcOptions, GcPlan, GcReport, Pending, ProtocolTypes, SchemaEntry, Stored, VerifyIssue,
    VerifyReport, WalkEntry,
};
pub use error::{CasError, Result, StoreErrorKind, Violation};
pub use node::Node;
pub use refs::Ref;
pub use store::{
    CACHE_KEY_MAX, FsStore, HashIter, MemStore, ReindexReport, Store, Stray, StrayIter,
    check_cache_key, paged_hashes,
};
pub use uwf_protocol::{Hash, ParseHashError};
