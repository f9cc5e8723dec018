//! Where a store lives: the embedded filesystem store under a root
//! directory (the default), or a shared PostgreSQL database.
//!
//! The local root always exists: it holds `config.yaml` (which may name the
//! store with `store:`), `.env` (secrets, among them the database
//! password), and what belongs to this machine only (running markers and
//! agent logs). Which store a command uses is decided, first match wins, by
//! `--store`, then [`STORE_ENV`], then `store:` in the root's
//! `config.yaml`, else the root itself.
//!
//! A PostgreSQL URL never carries its password in a place that is shown or
//! stored: give it in [`STORE_PASSWORD_ENV`] (in the environment or in the
//! root's `.env`), or as libpq's `PGPASSWORD`. A password written in the
//! URL itself is accepted and cut out before the URL is shown anywhere.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use miette::Diagnostic;
use thiserror::Error;
use uwf_cas::{Cas, Store};
use uwf_state::ThreadStore;
use uwf_store_pg::{PgOptions, PgStore};

use crate::{Engine, EngineError};

/// Environment variable naming the store (a directory or a PostgreSQL
/// URL). uwf sets it for every agent it starts on a PostgreSQL store, so an
/// agent opens the same store.
pub const STORE_ENV: &str = "UWF_STORE";

/// Environment variable (or `.env` entry) holding the database password
/// when the store URL has none.
pub const STORE_PASSWORD_ENV: &str = "UWF_STORE_PASSWORD";

/// libpq's password variable, read as a last resort.
pub const PGPASSWORD_ENV: &str = "PGPASSWORD";

/// Where a store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The filesystem store under this root (the layout of docs/state.md, "The files").
    Dir(PathBuf),
    /// A PostgreSQL database, by URL (`postgres://…` or `postgresql://…`).
    Postgres(String),
}

/// Which setting named the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocationSource {
    /// `--store`.
    Flag,
    /// [`STORE_ENV`].
    Env,
    /// `store:` in the root's `config.yaml`.
    Config,
    /// Nothing: the root itself.
    Root,
}

impl fmt::Display for LocationSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LocationSource::Flag => "--store",
            LocationSource::Env => STORE_ENV,
            LocationSource::Config => "`store:` in config.yaml",
            LocationSource::Root => "the storage root",
        })
    }
}

/// Why a store location cannot be used.
#[derive(Debug, Error, Diagnostic)]
pub enum LocationError {
    /// A URL of a scheme uwf has no store for.
    #[error(
        "{given} (from {source_of}) is not a store uwf knows: only a directory or a postgres:// URL"
    )]
    #[diagnostic(
        code(uwf::store::unknown_scheme),
        help(
            "give a directory, or postgres://USER@HOST:PORT/DATABASE (password in {STORE_PASSWORD_ENV} or .env)"
        )
    )]
    UnknownScheme {
        /// What was given, with any password cut out.
        given: String,
        /// Where it came from.
        source_of: LocationSource,
    },
    /// An empty `store:` or `--store`.
    #[error("the store named by {source_of} is empty")]
    #[diagnostic(
        code(uwf::store::empty),
        help(
            "remove the setting to use the storage root, or give a directory or a postgres:// URL"
        )
    )]
    Empty {
        /// Where it came from.
        source_of: LocationSource,
    },
    /// `config.yaml` could not be read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Config(#[from] uwf_state::StateError),
}

impl StoreLocation {
    /// Reads a store setting: a `postgres://` or `postgresql://` URL, a
    /// `file://` URL, or a directory (relative to `base`).
    pub fn parse(
        text: &str,
        base: &Path,
        source_of: LocationSource,
    ) -> Result<StoreLocation, LocationError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(LocationError::Empty { source_of });
        }
        let lower = text.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            return Ok(StoreLocation::Postgres(text.to_string()));
        }
        if let Some(path) = text.strip_prefix("file://") {
            return Ok(StoreLocation::Dir(base.join(path)));
        }
        if let Some((scheme, _)) = text.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(LocationError::UnknownScheme {
                given: redact(text),
                source_of,
            });
        }
        Ok(StoreLocation::Dir(base.join(text)))
    }

    /// Whether this is the embedded filesystem store.
    pub fn is_dir(&self) -> bool {
        matches!(self, StoreLocation::Dir(_))
    }

    /// The location as it may be shown: a directory, or the URL without
    /// its password.
    pub fn display(&self) -> String {
        match self {
            StoreLocation::Dir(d) => d.display().to_string(),
            StoreLocation::Postgres(url) => redact(url),
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Dir(d) => f.debug_tuple("Dir").field(d).finish(),
            StoreLocation::Postgres(_) => f.debug_tuple("Postgres").field(&self.display()).finish(),
        }
    }
}

/// Decides which store a command on `root` uses: `flag` (`--store`), then
/// [`STORE_ENV`], then `store:` in `root`'s `config.yaml`, else `root`.
pub fn resolve(
    flag: Option<&str>,
    root: &Path,
) -> Result<(StoreLocation, LocationSource), LocationError> {
    let env = std::env::var(STORE_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty());
    let config = || store_setting(root);
    let (text, source) = match (flag, env) {
        (Some(f), _) => (f.to_string(), LocationSource::Flag),
        (None, Some(e)) => (e, LocationSource::Env),
        (None, None) => match config()? {
            Some(c) => (c, LocationSource::Config),
            None => return Ok((StoreLocation::Dir(root.to_path_buf()), LocationSource::Root)),
        },
    };
    let base = std::env::current_dir().unwrap_or_else(|_| root.to_path_buf());
    // A directory in config.yaml is relative to the root, not to wherever
    // the command runs.
    let base = if source == LocationSource::Config {
        root.to_path_buf()
    } else {
        base
    };
    Ok((StoreLocation::parse(&text, &base, source)?, source))
}

/// Opens the engine over the store at `location`, for a command run on the
/// local storage root `root` (which keeps this machine's running markers
/// and agent logs, and whose `.env` holds the secrets handed to agents).
///
/// Agents the engine starts get what they need to open the same store:
/// the root, and for PostgreSQL [`STORE_ENV`] (and [`STORE_PASSWORD_ENV`]
/// when the password came from elsewhere than the URL).
pub fn open(root: &Path, location: &StoreLocation) -> Result<Engine, EngineError> {
    match location {
        StoreLocation::Dir(dir) => Engine::open(dir),
        StoreLocation::Postgres(url) => {
            let password = password(root)?;
            let options = PgOptions {
                password: password.clone(),
                secrets_dir: Some(root.to_path_buf()),
                ..PgOptions::default()
            };
            let mut env: Vec<(String, OsString)> = vec![
                (
                    uwf_util::root::ENV_ROOT.to_string(),
                    root.as_os_str().to_owned(),
                ),
                (STORE_ENV.to_string(), url.into()),
            ];
            // The password never goes into what the engine writes, wherever
            // it came from (docs/state.md, "Secrets and file modes").
            let mut secrets = crate::secrets::url_passwords(url);
            if let Some(p) = password {
                secrets.push(p.clone());
                env.push((STORE_PASSWORD_ENV.to_string(), p.into()));
            }
            let engine = match relayed(url, &options, env.clone())? {
                Some(engine) => engine.with_run_dir(root),
                None => {
                    let pg = PgStore::connect_with(url, options)
                        .map_err(|e| EngineError::Postgres(Box::new(e)))?;
                    let objects: Arc<dyn Store> = Arc::new(pg.clone());
                    let runs: Arc<dyn uwf_state::RunQueue> = Arc::new(pg.clone());
                    let state: Arc<dyn ThreadStore> = Arc::new(pg);
                    let engine = Engine::with_stores(Cas::new(objects)?, state, env)
                        .with_run_dir(root)
                        .with_run_queue(runs);
                    if std::env::var_os(NO_RELAY_ENV).is_some_and(|v| !v.is_empty()) {
                        engine
                    } else {
                        engine.serving_relay()
                    }
                }
            };
            Ok(secrets
                .into_iter()
                .fold(engine, |e, p| e.with_secret(STORE_PASSWORD_ENV, p)))
        }
    }
}

/// Set (to anything but empty), an engine on PostgreSQL runs its agents
/// without a store relay: each opens its own connection, as before the
/// relay existed (to compare the two, or to rule the relay out).
pub const NO_RELAY_ENV: &str = "UWF_NO_RELAY";

/// The engine of an agent that the engine running it serves the store to
/// ([`uwf_relay`]; docs/postgres.md, "The store relay"): node reads and
/// writes, the derived cache, a head, the configuration and the secrets go
/// through the relay, anything else opens the store itself, once, when
/// first needed. `None` when no relay is named or it cannot be reached
/// (then the store is opened as usual).
fn relayed(
    url: &str,
    options: &PgOptions,
    env: Vec<(String, OsString)>,
) -> Result<Option<Engine>, EngineError> {
    let Some(path) = uwf_relay::from_env() else {
        return Ok(None);
    };
    let client = match uwf_relay::RelayClient::connect(&path) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!("opening the store itself: {e}");
            return Ok(None);
        }
    };
    tracing::debug!(relay = %path.display(), store = client.describe(), "store through the relay");
    let (url, options) = (url.to_owned(), options.clone());
    let fallback = uwf_relay::Fallback::new(Box::new(move || {
        let pg = PgStore::connect_with(&url, options.clone()).map_err(|e| e.to_string())?;
        let objects: Arc<dyn Store> = Arc::new(pg.clone());
        let state: Arc<dyn ThreadStore> = Arc::new(pg);
        Ok((objects, state))
    }));
    let objects: Arc<dyn Store> = Arc::new(uwf_relay::RelayStore::new(
        Arc::clone(&client),
        Arc::clone(&fallback),
    ));
    let state: Arc<dyn ThreadStore> = Arc::new(uwf_relay::RelayState::new(client, fallback));
    Ok(Some(Engine::with_stores(Cas::new(objects)?, state, env)))
}

/// Prepares the store at `location`: creates or upgrades the schema of a
/// PostgreSQL store (safe to run again, and from several machines at once:
/// see `uwf_store_pg::PgStore::init`), creates the directory of a
/// filesystem store. Returns the schema change of a PostgreSQL store.
pub fn init(
    root: &Path,
    location: &StoreLocation,
) -> Result<Option<uwf_store_pg::InitReport>, EngineError> {
    match location {
        StoreLocation::Dir(dir) => {
            Engine::open(dir)?;
            Ok(None)
        }
        StoreLocation::Postgres(url) => {
            let pg = PgStore::connect_with(
                url,
                PgOptions {
                    password: password(root)?,
                    secrets_dir: Some(root.to_path_buf()),
                    ..PgOptions::default()
                },
            )
            .map_err(|e| EngineError::Postgres(Box::new(e)))?;
            Ok(Some(
                pg.init().map_err(|e| EngineError::Postgres(Box::new(e)))?,
            ))
        }
    }
}

/// [`resolve`] then [`open`]: the engine a command (or an agent, with
/// `flag` `None`) uses on the storage root `root`.
pub fn open_resolved(flag: Option<&str>, root: &Path) -> Result<Engine, EngineError> {
    let (location, source) = resolve(flag, root)?;
    tracing::debug!(store = %location.display(), from = %source, "store");
    open(root, &location)
}

/// `store:` of `root`'s `config.yaml`. Only that key is read: a
/// configuration that is wrong elsewhere is reported by the commands that
/// need it, not by every command. A file that cannot be read at all is no
/// setting (opening the root then says what is wrong); one that is not
/// YAML is an error only if it seems to name a store, so a broken file
/// never silently sends commands to the local store instead of a shared one.
fn store_setting(root: &Path) -> Result<Option<String>, LocationError> {
    let path = uwf_state::StateDir::new(root).config_path();
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    match serde_yaml::from_str::<serde_yaml::Value>(&text) {
        Ok(v) => Ok(v.get("store").and_then(|s| s.as_str()).map(str::to_string)),
        Err(_) if !text.lines().any(|l| l.trim_start().starts_with("store:")) => Ok(None),
        Err(_) => {
            // The state crate's reading gives the line and column.
            uwf_state::StateDir::new(root).config()?;
            Ok(None)
        }
    }
}

/// The database password when the URL has none: [`STORE_PASSWORD_ENV`] in
/// the environment, then in `root`'s `.env`, then [`PGPASSWORD_ENV`] in the
/// environment.
pub fn password(root: &Path) -> Result<Option<String>, LocationError> {
    if let Some(p) = std::env::var(STORE_PASSWORD_ENV)
        .ok()
        .filter(|p| !p.is_empty())
    {
        return Ok(Some(p));
    }
    let from_env_file = uwf_state::StateDir::new(root)
        .env_vars()?
        .into_iter()
        .find(|(k, v)| k == STORE_PASSWORD_ENV && !v.is_empty())
        .map(|(_, v)| v);
    if from_env_file.is_some() {
        return Ok(from_env_file);
    }
    Ok(std::env::var(PGPASSWORD_ENV).ok().filter(|p| !p.is_empty()))
}

/// `text` with the password of a URL (`scheme://user:PASSWORD@…`, or a
/// `password=` parameter) replaced by `***`.
pub fn redact(text: &str) -> String {
    let mut out = text.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                let from = rest_start + colon + 1;
                let to = rest_start + at;
                out.replace_range(from..to, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_directories() {
        let base = Path::new("/base");
        let at = |t: &str| StoreLocation::parse(t, base, LocationSource::Flag);
        assert!(matches!(
            at("postgres://u@h/db"),
            Ok(StoreLocation::Postgres(_))
        ));
        assert!(matches!(
            at("PostgreSQL://u@h/db"),
            Ok(StoreLocation::Postgres(_))
        ));
        assert_eq!(
            at("rel/dir").ok(),
            Some(StoreLocation::Dir(PathBuf::from("/base/rel/dir")))
        );
        assert_eq!(
            at("/abs").ok(),
            Some(StoreLocation::Dir(PathBuf::from("/abs")))
        );
        assert_eq!(
            at("file:///x/y").ok(),
            Some(StoreLocation::Dir(PathBuf::from("/x/y")))
        );
        assert!(matches!(at("  "), Err(LocationError::Empty { .. })));
        match at("mysql://u:pw@h/db") {
            Err(e @ LocationError::UnknownScheme { .. }) => {
                let text = e.to_string();
                assert!(text.contains("mysql://u:***@h/db"), "{text}");
                assert!(!text.contains("pw"), "{text}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            (
                "postgres://u@h/db?password=secret&sslmode=disable",
                "postgres://u@h/db?password=***&sslmode=disable",
            ),
            ("postgres://u:sec@ret@h/db", "postgres://u:***@h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgresql://u@/db?host=/run/pg",
                "postgresql://u@/db?host=/run/pg",
            ),
        ] {
            assert_eq!(redact(url), shown);
            let loc = StoreLocation::Postgres(url.to_string());
            assert_eq!(loc.display(), shown);
            assert!(!format!("{loc:?}").contains("secret"));
        }
    }

    #[test]
    fn the_root_config_names_the_store_relative_to_the_root() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("config.yaml"), "store: shared\n")
            .unwrap_or_else(|e| panic!("{e}"));
        // A flag wins over the configuration (the environment is not
        // touched here: tests run in parallel).
        let (loc, source) =
            resolve(Some("postgres://u@h/db"), dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((loc.is_dir(), source), (false, LocationSource::Flag));
        if std::env::var_os(STORE_ENV).is_none() {
            let (loc, source) = resolve(None, dir.path()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(loc, StoreLocation::Dir(dir.path().join("shared")));
            assert_eq!(source, LocationSource::Config);
        }
    }
}
