//! Errors of the store.

use std::path::PathBuf;

use crate::Hash;
use crate::hash::ParseHashError;

/// One way a payload fails its schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// JSON Pointer into the payload (empty for the payload itself).
    pub path: String,
    /// What the schema expected.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "at {path}: {}", self.message)
    }
}

fn list(v: &[Violation]) -> String {
    v.iter().map(|v| format!("\n  - {v}")).collect()
}

/// Errors of [`Cas`](crate::Cas) and the [`Store`](crate::Store) backends.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum CasError {
    /// A hash argument is malformed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    BadHash(#[from] ParseHashError),

    /// No node has this hash.
    #[error("no node {0} in the store")]
    #[diagnostic(
        code(uwf::cas::not_found),
        help("check the hash; `uwf cas schema list` and `uwf cas walk` show what is stored")
    )]
    NotFound(Hash),

    /// A node file exists but its content is damaged.
    #[error("node {hash} is corrupt ({path}): {reason}")]
    #[diagnostic(
        code(uwf::cas::corrupt),
        help(
            "the file does not hash to its name; restore it from a backup or remove it, then run `uwf cas verify`"
        )
    )]
    Corrupt {
        /// The hash the file is named after.
        hash: Hash,
        /// The damaged file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A node was stored with a type that does not exist.
    #[error("unknown type {0}: no schema node has this hash")]
    #[diagnostic(
        code(uwf::cas::unknown_type),
        help(
            "list the registered schemas with `uwf cas schema list`, or register one with `uwf cas schema put`"
        )
    )]
    UnknownType(Hash),

    /// A node was stored with a type that is not a schema.
    #[error("{0} is not a schema node, so it cannot be used as a type")]
    #[diagnostic(
        code(uwf::cas::not_a_schema),
        help("types are schema nodes: see `uwf cas schema list`")
    )]
    NotASchema(Hash),

    /// A payload does not satisfy its type's schema.
    #[error("payload does not match schema {title} ({type_hash}):{}", list(.violations))]
    #[diagnostic(
        code(uwf::cas::invalid),
        help(
            "fix the payload at the paths shown; `uwf cas schema get {type_hash}` prints the schema"
        )
    )]
    Invalid {
        /// The schema's hash.
        type_hash: Hash,
        /// The schema's title (or its hash when untitled).
        title: String,
        /// Every failure found.
        violations: Vec<Violation>,
    },

    /// A schema outside the subset uwf supports.
    #[error("schema rejected: {reason}")]
    #[diagnostic(
        code(uwf::cas::unsupported_schema),
        help("see the supported subset of JSON Schema in docs/cas.md")
    )]
    UnsupportedSchema {
        /// Why.
        reason: String,
    },

    /// A `$ref` chain inside a schema never reaches data (e.g. `{"$ref": "#"}`).
    #[error("schema {0} has a $ref cycle that does not consume data")]
    #[diagnostic(code(uwf::cas::ref_cycle))]
    RefCycle(Hash),

    /// The filesystem refused an operation.
    #[error("cannot {action} {path}: {source}")]
    #[diagnostic(
        code(uwf::cas::io),
        help("check that the storage root exists and is readable and writable by you")
    )]
    Io {
        /// What was being done ("read", "write", "create directory", …).
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// Writing a node file failed.
    #[error(transparent)]
    #[diagnostic(
        code(uwf::cas::io),
        help("check that the storage root is writable and the disk is not full")
    )]
    Write(#[from] uwf_util::atomic::AtomicError),
}

impl CasError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = CasError> = std::result::Result<T, E>;
