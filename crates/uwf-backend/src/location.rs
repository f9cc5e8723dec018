//! Where a store lives, and which setting said so.
//!
//! The local root always exists: it holds `config.yaml` (which may name the
//! store with `store:`), `.env` (secrets, among them a database password),
//! and what belongs to this machine only (running markers and agent logs).
//! Which store a command uses is decided, first match wins, by `--store`,
//! then [`STORE_ENV`], then `store:` in the root's `config.yaml`, else the
//! root itself ([`resolve`]).
//!
//! A store URL never carries its password in a place that is shown or
//! stored: give it in [`STORE_PASSWORD_ENV`] (in the environment or in the
//! root's `.env`), or in the backend's own variable (PostgreSQL's
//! `PGPASSWORD`). A password written in the URL itself is accepted and cut
//! out before the URL is shown anywhere ([`redact`]).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::BackendError;

/// Environment variable naming the store (a directory or a URL). uwf sets
/// it for every agent it starts on a store named by URL, so that the agent
/// opens the same store.
pub const STORE_ENV: &str = "UWF_STORE";

/// Environment variable (or `.env` entry) holding the store's password
/// when its URL has none.
pub const STORE_PASSWORD_ENV: &str = "UWF_STORE_PASSWORD";

/// libpq's password variable: a secret wherever it is set, and read as a
/// last resort by the PostgreSQL backend.
pub const PGPASSWORD_ENV: &str = "PGPASSWORD";

/// Where a store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The filesystem store under this root (the layout of docs/state.md,
    /// "The files"): the embedded default.
    Dir(PathBuf),
    /// A store a registered backend opens, by URL (`postgres://…`); which
    /// backend is decided by the scheme when it is opened
    /// ([`Backends`](crate::Backends)).
    Url(String),
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

impl StoreLocation {
    /// Reads a store setting: a URL (`scheme://…`; `file://` names a
    /// directory), or a directory (relative to `base`). Whether a backend
    /// for the URL's scheme is there is decided when it is opened.
    pub fn parse(
        text: &str,
        base: &Path,
        source_of: LocationSource,
    ) -> Result<StoreLocation, BackendError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(BackendError::Empty { source_of });
        }
        if let Some(path) = text.strip_prefix("file://") {
            return Ok(StoreLocation::Dir(base.join(path)));
        }
        if scheme_of(text).is_some() {
            return Ok(StoreLocation::Url(text.to_string()));
        }
        Ok(StoreLocation::Dir(base.join(text)))
    }

    /// Whether this is the embedded filesystem store.
    pub fn is_dir(&self) -> bool {
        matches!(self, StoreLocation::Dir(_))
    }

    /// The URL's scheme, lower case (`None` for a directory).
    pub fn scheme(&self) -> Option<String> {
        match self {
            StoreLocation::Dir(_) => None,
            StoreLocation::Url(url) => scheme_of(url).map(str::to_ascii_lowercase),
        }
    }

    /// The location as it may be shown: a directory, or the URL without
    /// its password.
    pub fn display(&self) -> String {
        match self {
            StoreLocation::Dir(d) => d.display().to_string(),
            StoreLocation::Url(url) => redact(url),
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Dir(d) => f.debug_tuple("Dir").field(d).finish(),
            StoreLocation::Url(_) => f.debug_tuple("Url").field(&self.display()).finish(),
        }
    }
}

/// The scheme of `text` if it is written as a URL (`scheme://`), as given.
fn scheme_of(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let well_formed = !scheme.is_empty()
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    well_formed.then_some(scheme)
}

/// Decides which store a command on `root` uses: `flag` (`--store`), then
/// [`STORE_ENV`], then `store:` in `root`'s `config.yaml`, else `root`.
pub fn resolve(
    flag: Option<&str>,
    root: &Path,
) -> Result<(StoreLocation, LocationSource), BackendError> {
    let env = std::env::var(STORE_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty());
    let (text, source) = match (flag, env) {
        (Some(f), _) => (f.to_string(), LocationSource::Flag),
        (None, Some(e)) => (e, LocationSource::Env),
        (None, None) => match store_setting(root)? {
            Some(c) => (c, LocationSource::Config),
            None => return Ok((StoreLocation::Dir(root.to_path_buf()), LocationSource::Root)),
        },
    };
    // A directory in config.yaml is relative to the root, not to wherever
    // the command runs.
    let base = if source == LocationSource::Config {
        root.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_else(|_| root.to_path_buf())
    };
    Ok((StoreLocation::parse(&text, &base, source)?, source))
}

/// `store:` of `root`'s `config.yaml`. Only that key is read: a
/// configuration that is wrong elsewhere is reported by the commands that
/// need it, not by every command. A file that cannot be read at all is no
/// setting (opening the root then says what is wrong); one that is not
/// YAML is an error only if it seems to name a store, so a broken file
/// never silently sends commands to the local store instead of a shared one.
fn store_setting(root: &Path) -> Result<Option<String>, BackendError> {
    let path = uwf_state::FsState::new(root).config_path();
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    match serde_yaml::from_str::<serde_yaml::Value>(&text) {
        Ok(v) => Ok(v.get("store").and_then(|s| s.as_str()).map(str::to_string)),
        Err(_) if !text.lines().any(|l| l.trim_start().starts_with("store:")) => Ok(None),
        Err(_) => {
            // The state crate's reading gives the line and column.
            uwf_state::FsState::new(root).config()?;
            Ok(None)
        }
    }
}

/// The store's password when the URL has none: [`STORE_PASSWORD_ENV`] in
/// the environment, then in `root`'s `.env`, then the first of `fallbacks`
/// (a backend's own variables, such as [`PGPASSWORD_ENV`]) set in the
/// environment.
pub fn password(root: &Path, fallbacks: &[&str]) -> Result<Option<String>, BackendError> {
    if let Some(p) = std::env::var(STORE_PASSWORD_ENV)
        .ok()
        .filter(|p| !p.is_empty())
    {
        return Ok(Some(p));
    }
    let from_env_file = uwf_state::FsState::new(root)
        .env_vars()?
        .into_iter()
        .find(|(k, v)| k == STORE_PASSWORD_ENV && !v.is_empty())
        .map(|(_, v)| v);
    if from_env_file.is_some() {
        return Ok(from_env_file);
    }
    Ok(fallbacks
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|p| !p.is_empty())))
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
        let url = at("postgres://u@h/db").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(url.scheme().as_deref(), Some("postgres"));
        let url = at("PostgreSQL://u@h/db").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(url.scheme().as_deref(), Some("postgresql"));
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
        // Not a scheme: a directory whose name has "://" in it.
        assert_eq!(
            at("1a://b").ok(),
            Some(StoreLocation::Dir(PathBuf::from("/base/1a://b")))
        );
        assert!(matches!(at("  "), Err(BackendError::Empty { .. })));
        let unknown = at("mysql://u:pw@h/db").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(unknown.display(), "mysql://u:***@h/db");
        assert!(!format!("{unknown:?}").contains("pw"));
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
            let loc = StoreLocation::Url(url.to_string());
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
