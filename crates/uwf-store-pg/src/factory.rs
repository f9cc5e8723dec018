//! PostgreSQL as a registered backend ([`uwf_backend::BackendFactory`]):
//! what a program registers to reach `postgres://` stores.

use std::sync::Arc;

use uwf_backend::{BackendError, BackendFactory, BackendFailure, Connect, SchemaChange, Stores};

use crate::{PgError, PgOptions, PgStore};

/// The PostgreSQL backend's factory: register it with
/// [`uwf_backend::Backends::with`] (the `uwf` binary does, behind its
/// `postgres` feature).
#[derive(Debug, Clone, Copy, Default)]
pub struct PgBackend;

impl BackendFailure for PgError {
    fn is_unavailable(&self) -> bool {
        self.kind() == uwf_state::ErrorKind::Unavailable
    }
}

fn connect(url: &str, c: Connect<'_>) -> Result<PgStore, BackendError> {
    let options = PgOptions {
        password: c.password.map(str::to_owned),
        secrets_dir: Some(c.root.to_path_buf()),
        ..PgOptions::default()
    };
    PgStore::connect_with(url, options).map_err(BackendError::backend)
}

impl BackendFactory for PgBackend {
    fn name(&self) -> &'static str {
        crate::error::BACKEND
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["postgres", "postgresql"]
    }

    fn open(&self, url: &str, c: Connect<'_>) -> Result<Stores, BackendError> {
        let pg = connect(url, c)?;
        Ok(Stores {
            objects: Arc::new(pg.clone()),
            runs: Some(Arc::new(pg.clone())),
            state: Arc::new(pg),
        })
    }

    fn init(&self, url: &str, c: Connect<'_>) -> Result<Option<SchemaChange>, BackendError> {
        let report = connect(url, c)?.init().map_err(BackendError::backend)?;
        Ok(Some(SchemaChange {
            from: report.from,
            to: report.to,
            applied: report.applied,
        }))
    }

    fn password_vars(&self) -> &'static [&'static str] {
        &[uwf_backend::location::PGPASSWORD_ENV]
    }
}
