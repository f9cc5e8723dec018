//! Opening a uwf store from where it lives.
//!
//! A store is two traits: the object store ([`uwf_cas::Store`]) and the
//! thread state ([`uwf_state::ThreadStore`]), plus, when it has one, the
//! run queue of workers ([`uwf_state::RunQueue`]). Nothing above this
//! crate names a backend: the engine, the agent kit and the CLI get those
//! traits from [`Backends::open`].
//!
//! - A **directory** is the embedded filesystem store (docs/state.md, "The
//!   files"); it is always there.
//! - A **URL** (`postgres://…`) is opened by the [`BackendFactory`]
//!   registered for its scheme. A program registers the backends it wants
//!   to reach ([`Backends::with`]): the `uwf` binary registers PostgreSQL
//!   (`uwf_store_pg::factory`, behind its `postgres` feature); an agent
//!   registers none and still works on every store, because the engine
//!   that runs it serves the store it has open over a relay
//!   ([`uwf_relay`]; docs/postgres.md, "The store relay").
//!   `examples/toy_backend.rs` adds a backend without touching anything
//!   else (docs/architecture.md, "The storage seam").
//!
//! Around a factory's stores this crate does what every networked store
//! needs the same way: the password (never in what is shown or stored:
//! [`location::password`], [`secrets`]), what an agent needs in its
//! environment to reach the same store, and the relay.

#![warn(missing_docs)]

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use miette::Diagnostic;
use thiserror::Error;
use uwf_cas::Store;
use uwf_state::{FsState, RunQueue, ThreadStore};

pub mod location;
mod relayed;
pub mod secrets;

pub use location::{LocationSource, STORE_ENV, STORE_PASSWORD_ENV, StoreLocation};

/// What a backend opens: the two storage traits and, when the backend has
/// one, the run queue of workers.
pub struct Stores {
    /// The object store.
    pub objects: Arc<dyn Store>,
    /// The thread state.
    pub state: Arc<dyn ThreadStore>,
    /// The run queue (`uwf worker`, `thread run --detach`), if any.
    pub runs: Option<Arc<dyn RunQueue>>,
}

impl fmt::Debug for Stores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stores")
            .field("state", &self.state.describe())
            .field("runs", &self.runs.is_some())
            .finish_non_exhaustive()
    }
}

/// What a factory is given to open a store.
#[derive(Clone, Copy)]
pub struct Connect<'a> {
    /// The local storage root of the command (its `.env` holds the secrets
    /// handed to agents).
    pub root: &'a Path,
    /// The password, when the URL has none ([`location::password`]). Never
    /// shown.
    pub password: Option<&'a str>,
}

impl fmt::Debug for Connect<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connect")
            .field("root", &self.root)
            .field("password", &self.password.map(|_| "***"))
            .finish()
    }
}

/// The change [`Backends::init`] made to a store's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    /// The schema version found before.
    pub from: i32,
    /// The schema version now.
    pub to: i32,
    /// The migrations this call applied (empty when another process had
    /// applied them, or nothing was due).
    pub applied: Vec<i32>,
}

/// A backend's failure, as [`BackendError::Backend`] carries it: a
/// diagnostic that also says whether trying again later could work.
pub trait BackendFailure: Diagnostic + Send + Sync + 'static {
    /// The store could not be reached (a database restarting, a network
    /// cut): worth trying again later as it is.
    fn is_unavailable(&self) -> bool;
}

/// A store backend reached by URL: opens the stores of one kind.
///
/// Register it with [`Backends::with`]; [`Backends`] handles the password,
/// an agent's environment and the relay around it.
pub trait BackendFactory: Send + Sync {
    /// What the backend is called in output (`uwf store show`'s `kind`).
    fn name(&self) -> &'static str;

    /// The URL schemes it opens, lower case (`["postgres", "postgresql"]`).
    fn schemes(&self) -> &'static [&'static str];

    /// Opens the store at `url`, which must already be prepared
    /// ([`init`](Self::init)).
    fn open(&self, url: &str, connect: Connect<'_>) -> Result<Stores, BackendError>;

    /// Prepares the store at `url` for use (creates or upgrades what it
    /// needs); safe to run again, and from several machines at once.
    fn init(&self, url: &str, connect: Connect<'_>) -> Result<Option<SchemaChange>, BackendError>;

    /// Environment variables the backend's own client reads a password
    /// from, tried after [`STORE_PASSWORD_ENV`] (PostgreSQL: `PGPASSWORD`).
    fn password_vars(&self) -> &'static [&'static str] {
        &[]
    }
}

/// A store, opened: its traits, and what an engine on it needs to hand its
/// agents.
pub struct Opened {
    /// The store's traits.
    pub stores: Stores,
    /// What an agent needs in its environment to open the same store.
    pub agent_env: Vec<(String, OsString)>,
    /// Secrets of the store besides its `.env` (a password from anywhere):
    /// cut out of everything written ([`secrets`]).
    pub secrets: Vec<(String, String)>,
    /// Where this machine keeps running markers and agent logs: the local
    /// storage root.
    pub run_dir: PathBuf,
    /// Whether an engine on it serves the store to its agents over a relay
    /// ([`uwf_relay`]), which checks the nodes they store: every store. On
    /// a store reached by URL it carries a step's reads too, so that an
    /// agent needs no backend for it (an engine that is itself relayed, in
    /// an agent that runs child threads, relays on).
    pub serve_relay: bool,
    /// Whether the stores themselves are (or, on a directory, store their
    /// nodes through) a relay: this process is an agent whose engine serves
    /// it the store.
    pub relayed: bool,
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened")
            .field("stores", &self.stores)
            .field("run_dir", &self.run_dir)
            .field("serve_relay", &self.serve_relay)
            .field("relayed", &self.relayed)
            .finish_non_exhaustive()
    }
}

/// Why a store cannot be opened.
#[derive(Debug, Error, Diagnostic)]
pub enum BackendError {
    /// A URL of a scheme no registered backend opens.
    #[error("{given} (from {source_of}) is not a store this program can open: {known}")]
    #[diagnostic(code(uwf::store::unknown_scheme))]
    UnknownScheme {
        /// What was given, with any password cut out.
        given: String,
        /// Where it came from.
        source_of: LocationSource,
        /// What it can open instead, in words.
        known: String,
    },
    /// An empty `store:` or `--store`.
    #[error("the store named by {source_of} is empty")]
    #[diagnostic(code(uwf::store::empty))]
    Empty {
        /// Where it came from.
        source_of: LocationSource,
    },
    /// `config.yaml` or `.env` could not be read, or the filesystem store
    /// failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    State(#[from] uwf_state::StateError),
    /// The filesystem object store failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),
    /// The store is reached only through the relay of the engine that ran
    /// this program, and that relay is gone (the engine has ended).
    #[error(
        "{store} is reached through the relay of the engine that runs this program, which cannot be reached: {source}"
    )]
    #[diagnostic(code(uwf::store::relay_gone))]
    RelayUnreachable {
        /// The store, without its password.
        store: String,
        /// Why the relay could not be reached.
        #[source]
        source: uwf_relay::RelayError,
    },
    /// A registered backend failed (connecting, migrating, …).
    #[error("{0}")]
    #[diagnostic(transparent)]
    Backend(Box<dyn BackendFailure>),
}

impl BackendError {
    /// Wraps a backend's own error.
    pub fn backend(e: impl BackendFailure) -> Self {
        BackendError::Backend(Box::new(e))
    }

    /// Whether trying again later could work as it is (the store could not
    /// be reached).
    pub fn is_unavailable(&self) -> bool {
        match self {
            BackendError::State(e) => e.kind() == uwf_state::ErrorKind::Unavailable,
            BackendError::Cas(e) => e.kind() == uwf_cas::StoreErrorKind::Unavailable,
            BackendError::Backend(e) => e.is_unavailable(),
            // The engine that would apply this program's work is gone: no
            // retry of this process can succeed, but the step may be run
            // again by another.
            BackendError::RelayUnreachable { .. } => true,
            _ => false,
        }
    }
}

/// The backends a program can open: the filesystem store, and every
/// [`BackendFactory`] it registered (jj's store factories are the model:
/// the library knows the traits, the binary decides what is linked).
#[derive(Clone, Default)]
pub struct Backends {
    factories: Vec<Arc<dyn BackendFactory>>,
}

impl fmt::Debug for Backends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.factories.iter().map(|b| b.name()))
            .finish()
    }
}

impl Backends {
    /// The filesystem store only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `factory`; a later registration of a scheme wins.
    pub fn with(mut self, factory: impl BackendFactory + 'static) -> Self {
        self.register(Arc::new(factory));
        self
    }

    /// Adds `factory`; a later registration of a scheme wins.
    pub fn register(&mut self, factory: Arc<dyn BackendFactory>) {
        self.factories.insert(0, factory);
    }

    /// The factory for `scheme`, if one is registered.
    pub fn factory(&self, scheme: &str) -> Option<&Arc<dyn BackendFactory>> {
        self.factories
            .iter()
            .find(|f| f.schemes().iter().any(|s| s.eq_ignore_ascii_case(scheme)))
    }

    /// What a location is: `filesystem`, or its backend's
    /// [`name`](BackendFactory::name).
    pub fn kind(
        &self,
        location: &StoreLocation,
        source_of: LocationSource,
    ) -> Result<&'static str, BackendError> {
        match location {
            StoreLocation::Dir(_) => Ok("filesystem"),
            StoreLocation::Url(_) => Ok(self.factory_for(location, source_of)?.name()),
        }
    }

    fn factory_for(
        &self,
        location: &StoreLocation,
        source_of: LocationSource,
    ) -> Result<&Arc<dyn BackendFactory>, BackendError> {
        location
            .scheme()
            .and_then(|s| self.factory(&s))
            .ok_or_else(|| BackendError::UnknownScheme {
                given: location.display(),
                source_of,
                known: self.known(),
            })
    }

    /// The kinds of store this program opens, in words.
    fn known(&self) -> String {
        let urls: Vec<String> = self
            .factories
            .iter()
            .filter_map(|f| f.schemes().first())
            .map(|s| format!("a {s}:// URL"))
            .collect();
        match urls.as_slice() {
            [] => "only a directory (no backend for URLs is built into it)".to_string(),
            urls => format!("a directory or {}", urls.join(" or ")),
        }
    }

    /// Opens the store at `location` for a command run on the local storage
    /// root `root` (which keeps this machine's running markers and agent
    /// logs, and whose `.env` holds the secrets handed to agents).
    ///
    /// In an agent whose engine serves it the store ([`uwf_relay`]), a URL
    /// is reached through the relay; what the relay does not carry opens the
    /// store itself, once, when first needed (which needs its backend).
    pub fn open(&self, root: &Path, location: &StoreLocation) -> Result<Opened, BackendError> {
        self.open_from(root, location, LocationSource::Flag)
    }

    fn open_from(
        &self,
        root: &Path,
        location: &StoreLocation,
        source_of: LocationSource,
    ) -> Result<Opened, BackendError> {
        let url = match location {
            StoreLocation::Dir(dir) => return open_dir(dir),
            StoreLocation::Url(url) => url,
        };
        let factory = self.factory_for(location, source_of);
        let fallbacks = factory.as_ref().map_or(&[][..], |f| f.password_vars());
        let password = location::password(root, fallbacks)?;
        let mut agent_env: Vec<(String, OsString)> = vec![
            (
                uwf_util::root::ENV_ROOT.to_string(),
                root.as_os_str().to_owned(),
            ),
            (STORE_ENV.to_string(), url.into()),
        ];
        // The password never goes into what is written, wherever it came
        // from (docs/state.md, "Secrets and file modes").
        let mut secrets: Vec<(String, String)> = secrets::url_passwords(url)
            .into_iter()
            .map(|p| (STORE_PASSWORD_ENV.to_string(), p))
            .collect();
        if let Some(p) = &password {
            secrets.push((STORE_PASSWORD_ENV.to_string(), p.clone()));
            agent_env.push((STORE_PASSWORD_ENV.to_string(), p.into()));
        }
        let opened = |stores, serve_relay, relayed| Opened {
            stores,
            agent_env: agent_env.clone(),
            secrets: secrets.clone(),
            run_dir: root.to_path_buf(),
            serve_relay,
            relayed,
        };
        let usable = factory.as_ref().ok().map(|f| Arc::clone(f));
        match relayed::open(url, root, password.clone(), usable) {
            relayed::Relayed::Open(stores) => return Ok(opened(stores, true, true)),
            relayed::Relayed::NotNamed => {}
            relayed::Relayed::Unreachable(e) if factory.is_ok() => {
                tracing::debug!("opening the store itself: {e}");
            }
            relayed::Relayed::Unreachable(source) => {
                return Err(BackendError::RelayUnreachable {
                    store: location.display(),
                    source,
                });
            }
        }
        let factory = factory?;
        let stores = factory.open(
            url,
            Connect {
                root,
                password: password.as_deref(),
            },
        )?;
        Ok(opened(stores, true, false))
    }

    /// Prepares the store at `location`: creates the directory of a
    /// filesystem store, or lets the backend create or upgrade what it
    /// needs ([`BackendFactory::init`]), whose schema change it returns.
    pub fn init(
        &self,
        root: &Path,
        location: &StoreLocation,
    ) -> Result<Option<SchemaChange>, BackendError> {
        match location {
            StoreLocation::Dir(dir) => {
                open_dir(dir)?;
                Ok(None)
            }
            StoreLocation::Url(url) => {
                let factory = self.factory_for(location, LocationSource::Flag)?;
                let password = location::password(root, factory.password_vars())?;
                factory.init(
                    url,
                    Connect {
                        root,
                        password: password.as_deref(),
                    },
                )
            }
        }
    }

    /// [`location::resolve`] then [`open`](Self::open): the store a command
    /// (or an agent, with `flag` `None`) uses on the storage root `root`.
    pub fn open_resolved(&self, flag: Option<&str>, root: &Path) -> Result<Opened, BackendError> {
        let (location, source) = location::resolve(flag, root)?;
        tracing::debug!(store = %location.display(), from = %source, "store");
        self.open_from(root, &location, source)
    }
}

/// The filesystem store under `dir`; agents get `dir` as their root.
///
/// An agent run by an engine on the same directory reads it itself but
/// stores its nodes through the engine's relay, which checks them
/// ([`relayed::inserts`]); its engine serves one to its own agents.
fn open_dir(dir: &Path) -> Result<Opened, BackendError> {
    let mut objects: Arc<dyn Store> = Arc::new(uwf_cas::FsStore::open(dir.join("cas"))?);
    let state = Arc::new(FsState::new(dir));
    let relayed = match relayed::inserts(&objects, &state.describe()) {
        Some(through) => {
            objects = through;
            true
        }
        None => false,
    };
    Ok(Opened {
        stores: Stores {
            objects,
            state: state.clone(),
            runs: Some(state),
        },
        agent_env: vec![(
            uwf_util::root::ENV_ROOT.to_string(),
            dir.as_os_str().to_owned(),
        )],
        secrets: Vec::new(),
        run_dir: dir.to_path_buf(),
        serve_relay: true,
        relayed,
    })
}
