//! Errors of the store.

use std::path::PathBuf;

use crate::Hash;
use uwf_protocol::ParseHashError;

/// One way a payload fails its schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    #[diagnostic(code(uwf::cas::not_found))]
    NotFound(Hash),

    /// A stored node exists but its content is damaged.
    #[error("node {hash} is corrupt ({location}): {reason}")]
    #[diagnostic(code(uwf::cas::corrupt))]
    Corrupt {
        /// The hash the node is stored under.
        hash: Hash,
        /// Where the damaged copy is, for people: a file path for the
        /// filesystem store, a backend-specific description otherwise.
        location: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A node was stored with a type that does not exist.
    #[error("unknown type {0}: no schema node has this hash")]
    #[diagnostic(code(uwf::cas::unknown_type))]
    UnknownType(Hash),

    /// A node was stored with a type that is not a schema.
    #[error("{0} is not a schema node, so it cannot be used as a type")]
    #[diagnostic(code(uwf::cas::not_a_schema))]
    NotASchema(Hash),

    /// A payload does not satisfy its type's schema.
    #[error("payload does not match schema {title} ({type_hash}):{}", list(.violations))]
    #[diagnostic(code(uwf::cas::invalid))]
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

    /// A derived-data cache key outside the allowed charset (see
    /// [`check_cache_key`](crate::check_cache_key)).
    #[error("bad cache key {key:?}: {reason}")]
    #[diagnostic(code(uwf::cas::bad_cache_key))]
    BadCacheKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A failure reported by a storage backend other than the filesystem
    /// (a database, a network service), already classified by the backend.
    #[error("{backend} store: {message}")]
    #[diagnostic(code(uwf::cas::backend))]
    Backend {
        /// The backend's name (e.g. `"postgres"`).
        backend: &'static str,
        /// What the failure means to the caller.
        kind: StoreErrorKind,
        /// What went wrong, for people.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// Writing a node file failed.
    #[error(transparent)]
    #[diagnostic(
        code(uwf::cas::io),
        help("check that the storage root is writable and the disk is not full")
    )]
    Write(#[from] uwf_util::atomic::AtomicError),
}

/// What a [`CasError`] means to a caller that must decide what to do next,
/// independent of the backend that produced it (see [`CasError::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The requested node (or other entry) does not exist.
    NotFound,
    /// The caller's input was refused: a malformed hash or cache key, an
    /// unknown type, a payload or schema that fails validation. Retrying the
    /// same call fails the same way.
    Invalid,
    /// A concurrent writer got in the way (e.g. a serialization failure of a
    /// database transaction). The whole operation may be retried.
    Conflict,
    /// The backend is temporarily unreachable or overloaded (timeout,
    /// connection refused, interrupted call). Retrying later may succeed.
    Unavailable,
    /// Stored data is damaged: it does not parse or does not hash to its
    /// name. Retrying does not help; repair or restore the store.
    Corrupt,
    /// Any other failure of the storage (permissions, full disk, a broken
    /// mount). Needs an operator; retrying is unlikely to help.
    Io,
}

impl StoreErrorKind {
    /// Whether retrying the failed operation may succeed
    /// ([`Conflict`](Self::Conflict) and [`Unavailable`](Self::Unavailable)).
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Conflict | Self::Unavailable)
    }
}

/// Classifies an OS error the filesystem store met.
fn io_kind(e: &std::io::Error) -> StoreErrorKind {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound => StoreErrorKind::NotFound,
        K::InvalidData | K::UnexpectedEof => StoreErrorKind::Corrupt,
        K::Interrupted | K::WouldBlock | K::TimedOut | K::ResourceBusy => {
            StoreErrorKind::Unavailable
        }
        _ => StoreErrorKind::Io,
    }
}

impl CasError {
    /// What this error means to the caller, whatever the backend: not found,
    /// invalid input, conflict or unavailable (both retryable), corrupt data,
    /// or another storage failure.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            Self::NotFound(_) => StoreErrorKind::NotFound,
            Self::BadHash(_)
            | Self::UnknownType(_)
            | Self::NotASchema(_)
            | Self::Invalid { .. }
            | Self::UnsupportedSchema { .. }
            | Self::RefCycle(_)
            | Self::BadCacheKey { .. } => StoreErrorKind::Invalid,
            Self::Corrupt { .. } => StoreErrorKind::Corrupt,
            Self::Backend { kind, .. } => *kind,
            Self::Io { source, .. } => io_kind(source),
            Self::Write(e) => match e {
                uwf_util::atomic::AtomicError::Write { source, .. }
                | uwf_util::atomic::AtomicError::Append { source, .. }
                | uwf_util::atomic::AtomicError::SyncDir { source, .. } => io_kind(source),
                uwf_util::atomic::AtomicError::Newline { .. } => StoreErrorKind::Io,
            },
        }
    }

    /// Shorthand for `self.kind().is_retryable()`.
    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn io_err(kind: io::ErrorKind) -> CasError {
        CasError::io("read", "/x", io::Error::from(kind))
    }

    #[test]
    fn os_errors_are_classified() {
        use StoreErrorKind as K;
        for (os, want) in [
            (io::ErrorKind::NotFound, K::NotFound),
            (io::ErrorKind::InvalidData, K::Corrupt),
            (io::ErrorKind::UnexpectedEof, K::Corrupt),
            (io::ErrorKind::TimedOut, K::Unavailable),
            (io::ErrorKind::Interrupted, K::Unavailable),
            (io::ErrorKind::WouldBlock, K::Unavailable),
            (io::ErrorKind::PermissionDenied, K::Io),
            (io::ErrorKind::StorageFull, K::Io),
        ] {
            assert_eq!(io_err(os).kind(), want, "{os:?}");
        }
        let write = CasError::Write(uwf_util::atomic::AtomicError::Write {
            path: "/x".into(),
            source: io::Error::from(io::ErrorKind::TimedOut),
        });
        assert_eq!(write.kind(), K::Unavailable);
        assert!(write.is_retryable());
    }

    #[test]
    fn backend_errors_keep_their_kind_and_only_conflict_and_unavailable_retry() {
        use StoreErrorKind as K;
        for kind in [
            K::NotFound,
            K::Invalid,
            K::Conflict,
            K::Unavailable,
            K::Corrupt,
            K::Io,
        ] {
            let e = CasError::Backend {
                backend: "test",
                kind,
                message: "m".into(),
                source: None,
            };
            assert_eq!(e.kind(), kind);
            assert_eq!(
                e.is_retryable(),
                matches!(kind, K::Conflict | K::Unavailable),
                "{kind:?}"
            );
        }
        assert_eq!(
            CasError::NotFound(Hash::from_u64(1)).kind(),
            StoreErrorKind::NotFound
        );
        assert_eq!(
            CasError::UnknownType(Hash::from_u64(1)).kind(),
            StoreErrorKind::Invalid
        );
    }
}
