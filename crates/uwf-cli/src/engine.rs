//! The engine as the commands use it: [`uwf_engine`] re-exported, plus
//! opening the storage root and the process's cancellation token.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use uwf_engine::*;

use crate::error::CliError;

/// The store backends `uwf` opens: the filesystem store, and PostgreSQL
/// with the `postgres` feature (on by default). docs/architecture.md, "The
/// storage seam".
pub fn backends() -> &'static backend::Backends {
    static BACKENDS: OnceLock<backend::Backends> = OnceLock::new();
    BACKENDS.get_or_init(|| {
        let backends = backend::Backends::new();
        #[cfg(feature = "postgres")]
        let backends = backends.with(uwf_store_pg::PgBackend);
        backends
    })
}

/// Where a store lives, over [`backends`]: [`backend::location`] with the
/// opening done by `uwf`'s registry.
pub mod location {
    use std::path::Path;

    pub use uwf_engine::backend::location::*;
    use uwf_engine::backend::{BackendError, SchemaChange};
    use uwf_engine::{Engine, EngineError};

    /// The engine over the store at `location`, for a command on the
    /// storage root `root`.
    pub fn open(root: &Path, location: &StoreLocation) -> Result<Engine, EngineError> {
        Engine::from_opened(super::backends().open(root, location)?)
    }

    /// Prepares the store at `location` ([`uwf_engine::backend::Backends::init`]).
    pub fn init(
        root: &Path,
        location: &StoreLocation,
    ) -> Result<Option<SchemaChange>, BackendError> {
        super::backends().init(root, location)
    }

    /// What `location` is: `filesystem`, or its backend's name.
    pub fn kind(
        location: &StoreLocation,
        source: LocationSource,
    ) -> Result<&'static str, BackendError> {
        super::backends().kind(location, source)
    }
}

/// The engine a command runs on, over the filesystem store at `root`.
pub struct Ctx {
    engine: Engine,
    /// The storage root (for what only the filesystem store has: the agent
    /// kit's context of a person's answer, config editing).
    pub root: PathBuf,
}

impl std::ops::Deref for Ctx {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl Ctx {
    /// The same store, with the store's secrets cut out of every node put
    /// through [`Engine::cas`] ([`Engine::redacting`]).
    pub fn redacting(self) -> Result<Ctx, CliError> {
        Ok(Ctx {
            engine: self.engine.redacting()?,
            root: self.root,
        })
    }
}

/// Opens the store a command on the storage root `root` uses (`store`:
/// `--store`; see [`location::resolve`]). Agents installed beside `uwf` are
/// found first.
pub fn open(root: &Path, store: Option<&str>) -> Result<Ctx, CliError> {
    let engine = Engine::open_resolved(backends(), store, root)?;
    let engine = match std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        Some(dir) => engine.with_agent_dir(dir),
        None => engine,
    };
    Ok(Ctx {
        engine,
        root: root.to_path_buf(),
    })
}

/// Cancelled when `uwf` gets SIGINT, SIGTERM or SIGHUP.
pub fn cancel_token() -> &'static CancelToken {
    static TOKEN: OnceLock<CancelToken> = OnceLock::new();
    TOKEN.get_or_init(CancelToken::new)
}

/// Makes SIGINT/SIGTERM/SIGHUP to `uwf` cancel the running step (its agent's
/// whole process group is stopped instead of orphaned). Call once, early.
pub fn forward_interrupts() {
    let token = cancel_token().clone();
    // Fails only if a handler is already installed: then keep that one.
    let _ = ctrlc::set_handler(move || token.cancel());
}

/// Whether `uwf` was asked to stop.
pub fn interrupted() -> bool {
    cancel_token().is_cancelled()
}
