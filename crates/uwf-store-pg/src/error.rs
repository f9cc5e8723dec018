//! The errors of the PostgreSQL backend, and how they map onto the error
//! types of the storage traits.
//!
//! No message built here ever holds the password: the password is never
//! given to anything but the connection configuration, every message is
//! built from redacted parts, and [`PgError::redact`] removes the secret
//! from any text that might have echoed it anyway.

use uwf_cas::{CasError, StoreErrorKind};
use uwf_state::ErrorKind;
use uwf_state::StateError;
use uwf_state::slots::SlotError;

/// The backend name used in the errors of the storage traits.
pub const BACKEND: &str = "postgres";

/// A failure of the PostgreSQL backend.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum PgError {
    /// The store URL cannot be used.
    #[error("invalid PostgreSQL store URL {url}: {reason}")]
    #[diagnostic(
        code(uwf::pg::url),
        help(
            "write it as postgres://USER@HOST:PORT/DATABASE or postgresql://USER@/DATABASE?host=/socket/dir"
        )
    )]
    Url {
        /// The URL with any password removed.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Connecting to the server failed.
    #[error("cannot connect to the PostgreSQL store {target}: {message}")]
    #[diagnostic(
        code(uwf::pg::connect),
        help(
            "check that the server runs and accepts connections there, and that the user, password and database are right"
        )
    )]
    Connect {
        /// The store, as [`describe`](uwf_state::ThreadStore::describe) says.
        target: String,
        /// What went wrong, redacted.
        message: String,
        /// What the failure means to the caller.
        kind: ErrorKind,
    },

    /// A statement failed.
    #[error("PostgreSQL store {target}: cannot {what}: {message}")]
    #[diagnostic(code(uwf::pg::query))]
    Query {
        /// The store.
        target: String,
        /// What was being done ("read a node", "move a head", …).
        what: &'static str,
        /// What went wrong, redacted.
        message: String,
        /// What the failure means to the caller.
        kind: ErrorKind,
    },

    /// A row holds something uwf did not write.
    #[error("PostgreSQL store {target}: corrupt {what}: {reason}")]
    #[diagnostic(
        code(uwf::pg::corrupt),
        help("the row was changed outside uwf; repair or delete it")
    )]
    Corrupt {
        /// The store.
        target: String,
        /// Which row.
        what: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The database was set up by a newer uwf.
    #[error(
        "PostgreSQL store {target} has uwf schema version {found}, but this uwf knows versions up to {supported}"
    )]
    #[diagnostic(
        code(uwf::pg::schema_too_new),
        help("upgrade uwf on this machine: a newer uwf has migrated the database")
    )]
    SchemaTooNew {
        /// The store.
        target: String,
        /// The version found in `uwf_schema_version`.
        found: i32,
        /// The newest version this build knows.
        supported: i32,
    },
}

impl PgError {
    /// What this failure means to the caller.
    pub fn kind(&self) -> ErrorKind {
        match self {
            PgError::Url { .. } | PgError::SchemaTooNew { .. } => ErrorKind::Invalid,
            PgError::Connect { kind, .. } | PgError::Query { kind, .. } => *kind,
            PgError::Corrupt { .. } => ErrorKind::Corrupt,
        }
    }

    /// Whether retrying may succeed (a lost race or an unreachable server).
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind(), ErrorKind::Conflict | ErrorKind::Unavailable)
    }

    /// `text` with every occurrence of `secret` replaced by `***`.
    pub fn redact(text: &str, secret: Option<&str>) -> String {
        match secret {
            Some(s) if !s.is_empty() => text.replace(s, "***"),
            _ => text.to_owned(),
        }
    }

    pub(crate) fn connect(target: &str, e: &postgres::Error, secret: Option<&str>) -> Self {
        PgError::Connect {
            target: target.to_owned(),
            message: Self::redact(&describe_pg(e), secret),
            kind: classify(e),
        }
    }

    pub(crate) fn query(
        target: &str,
        what: &'static str,
        e: &postgres::Error,
        secret: Option<&str>,
    ) -> Self {
        PgError::Query {
            target: target.to_owned(),
            what,
            message: Self::redact(&describe_pg(e), secret),
            kind: classify(e),
        }
    }
}

/// A client error as one line: the server's message and SQLSTATE for a
/// database error, else the error and its causes.
fn describe_pg(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            out.push_str(": ");
            out.push_str(detail);
        }
        return out;
    }
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// What a client error means: a lost race (serialization failure,
/// deadlock), an unreachable or restarting server, a refusal that retrying
/// does not fix, damaged data, or another failure.
pub(crate) fn classify(e: &postgres::Error) -> ErrorKind {
    if let Some(code) = e.code() {
        let c = code.code();
        return match c {
            // serialization_failure, deadlock_detected
            "40001" | "40P01" => ErrorKind::Conflict,
            // lock_not_available (lock_timeout), query_canceled (statement_timeout)
            "55P03" | "57014" => ErrorKind::Unavailable,
            // undefined_table etc. are Invalid below; admin/crash shutdown,
            // cannot_connect_now, too many connections, out of resources
            _ if c.starts_with("08") || c.starts_with("53") || c.starts_with("57") => {
                ErrorKind::Unavailable
            }
            // invalid authorization, unknown database, bad statement
            _ if c.starts_with("28") || c == "3D000" || c.starts_with("42") => ErrorKind::Invalid,
            // data exception, internal error (e.g. a damaged page)
            _ if c.starts_with("22") || c.starts_with("XX") => ErrorKind::Corrupt,
            _ => ErrorKind::Io,
        };
    }
    if e.is_closed() {
        return ErrorKind::Unavailable;
    }
    // Refused or dropped connections, timeouts: the causes are I/O errors.
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>().is_some() {
            return ErrorKind::Unavailable;
        }
        cause = c.source();
    }
    // The client's own error kinds are only visible through its messages.
    let text = e.to_string();
    if text.starts_with("invalid configuration")
        || text.starts_with("invalid connection string")
        || text.starts_with("authentication error")
    {
        return ErrorKind::Invalid;
    }
    if text.contains("timeout") || text.contains("connecting") {
        return ErrorKind::Unavailable;
    }
    ErrorKind::Io
}

/// The CAS error kind of a state error kind.
fn store_kind(kind: ErrorKind) -> StoreErrorKind {
    match kind {
        ErrorKind::Conflict => StoreErrorKind::Conflict,
        ErrorKind::NotFound => StoreErrorKind::NotFound,
        ErrorKind::Unavailable => StoreErrorKind::Unavailable,
        ErrorKind::Corrupt => StoreErrorKind::Corrupt,
        ErrorKind::Invalid => StoreErrorKind::Invalid,
        ErrorKind::Io => StoreErrorKind::Io,
    }
}

impl From<PgError> for StateError {
    fn from(e: PgError) -> Self {
        StateError::Backend {
            backend: BACKEND,
            kind: e.kind(),
            message: e.to_string(),
            source: None,
        }
    }
}

impl From<PgError> for SlotError {
    fn from(e: PgError) -> Self {
        SlotError::Backend {
            backend: BACKEND,
            kind: e.kind(),
            message: e.to_string(),
            source: None,
        }
    }
}

impl From<PgError> for CasError {
    fn from(e: PgError) -> Self {
        CasError::Backend {
            backend: BACKEND,
            kind: store_kind(e.kind()),
            message: e.to_string(),
            source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_carry_over_to_every_trait_error() {
        for kind in [
            ErrorKind::Conflict,
            ErrorKind::Unavailable,
            ErrorKind::Invalid,
            ErrorKind::Io,
        ] {
            let e = PgError::Query {
                target: "postgres://u@h/db".into(),
                what: "read",
                message: "m".into(),
                kind,
            };
            assert_eq!(StateError::from(e).kind(), kind);
        }
        let corrupt = PgError::Corrupt {
            target: "t".into(),
            what: "row".into(),
            reason: "r".into(),
        };
        assert_eq!(CasError::from(corrupt).kind(), StoreErrorKind::Corrupt);
        let url = PgError::Url {
            url: "x".into(),
            reason: "r".into(),
        };
        assert!(!url.is_retryable());
        assert!(matches!(
            SlotError::from(url),
            SlotError::Backend {
                kind: ErrorKind::Invalid,
                ..
            }
        ));
    }

    /// Real server errors, raised with each SQLSTATE, are classified as the
    /// table in docs/postgres.md says.
    #[test]
    fn server_errors_are_classified_by_their_sqlstate() {
        let Some(db) = uwf_pg_testing::database() else {
            return;
        };
        let mut client = db.client();
        for (code, want) in [
            ("40001", ErrorKind::Conflict),    // serialization_failure
            ("40P01", ErrorKind::Conflict),    // deadlock_detected
            ("57P01", ErrorKind::Unavailable), // admin_shutdown
            ("57P03", ErrorKind::Unavailable), // cannot_connect_now
            ("08006", ErrorKind::Unavailable), // connection_failure
            ("53300", ErrorKind::Unavailable), // too_many_connections
            ("55P03", ErrorKind::Unavailable), // lock_not_available
            ("28P01", ErrorKind::Invalid),     // invalid_password
            ("3D000", ErrorKind::Invalid),     // invalid_catalog_name
            ("42P01", ErrorKind::Invalid),     // undefined_table
            ("22P02", ErrorKind::Corrupt),     // invalid_text_representation
            ("XX001", ErrorKind::Corrupt),     // data_corrupted
            ("23505", ErrorKind::Io),          // unique_violation
        ] {
            let sql =
                format!("DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{code}'; END $$");
            match client.batch_execute(&sql) {
                Err(e) => {
                    assert_eq!(e.code().map(|c| c.code()), Some(code));
                    assert_eq!(classify(&e), want, "{code}");
                    let pg = PgError::query("t", "test", &e, None);
                    assert!(pg.to_string().contains(code), "{pg}");
                }
                Ok(()) => panic!("{code} was not raised"),
            }
        }
    }

    #[test]
    fn redaction_replaces_every_occurrence() {
        assert_eq!(
            PgError::redact("a pw b pw", Some("pw")),
            "a *** b ***".to_string()
        );
        assert_eq!(PgError::redact("a", Some("")), "a");
        assert_eq!(PgError::redact("a", None), "a");
    }
}
