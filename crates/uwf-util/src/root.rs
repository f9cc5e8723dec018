//! Storage-root resolution.
//!
//! Precedence: `--root` flag, then [`ENV_ROOT`], then [`ENV_ROOT_FALLBACK`],
//! then `~/.uncaged/workflow`. Empty environment values count as unset. The
//! result is always absolute so child processes started with a different
//! working directory still find the same root.

use std::cell::RefCell;
use std::env::VarError;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use miette::Diagnostic;
use thiserror::Error;

/// Primary environment variable naming the storage root.
pub const ENV_ROOT: &str = "UNCAGED_WORKFLOW_STORAGE_ROOT";

/// Fallback environment variable, consulted only if [`ENV_ROOT`] is unset or empty.
pub const ENV_ROOT_FALLBACK: &str = "WORKFLOW_STORAGE_ROOT";

/// Where the storage root came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootSource {
    /// The `--root` command-line flag.
    Flag,
    /// The named environment variable.
    Env(&'static str),
    /// The default under the home directory.
    Default,
}

impl fmt::Display for RootSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootSource::Flag => f.write_str("--root"),
            RootSource::Env(var) => write!(f, "${var}"),
            RootSource::Default => f.write_str("default (~/.uncaged/workflow)"),
        }
    }
}

/// An absolute storage root and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRoot {
    /// The absolute root directory (it may not exist yet).
    pub path: PathBuf,
    /// Which setting supplied it.
    pub source: RootSource,
}

/// Why no storage root could be determined.
#[derive(Debug, Error, Diagnostic)]
pub enum RootError {
    /// Nothing was configured and the home directory is unknown.
    #[error("cannot determine the storage root: no home directory")]
    #[diagnostic(help("pass --root <DIR> or set {ENV_ROOT}"))]
    NoHome,
    /// An environment variable holds a value that is not valid UTF-8.
    #[error("{var} is not valid UTF-8: {}", value.display())]
    #[diagnostic(help("pass --root <DIR> instead, or fix {var}"))]
    EnvNotUnicode {
        /// The variable's name.
        var: String,
        /// Its value, lossily shown.
        value: PathBuf,
    },
    /// The configured path could not be made absolute.
    #[error("cannot make storage root {} (from {source_of}) absolute: {source}", path.display())]
    #[diagnostic(help("pass a non-empty --root <DIR>, or run from an existing working directory"))]
    Absolute {
        /// The configured path.
        path: PathBuf,
        /// Which setting supplied it.
        source_of: RootSource,
        /// The underlying error.
        source: io::Error,
    },
}

/// Resolves the storage root from `flag`, the process environment and the
/// home directory.
pub fn resolve_root(flag: Option<&Path>) -> Result<ResolvedRoot, RootError> {
    // Falling through to the next source on a non-UTF-8 value would silently
    // pick a different root, so remember it and fail instead.
    let bad = RefCell::new(None);
    let env = |name: &str| match std::env::var(name) {
        Ok(v) => Some(v),
        Err(VarError::NotPresent) => None,
        Err(VarError::NotUnicode(v)) => {
            bad.borrow_mut()
                .get_or_insert((name.to_owned(), PathBuf::from(v)));
            None
        }
    };
    let resolved = resolve_root_with(flag, env, dirs::home_dir());
    match bad.into_inner() {
        Some((var, value)) => Err(RootError::EnvNotUnicode { var, value }),
        None => resolved,
    }
}

/// [`resolve_root`] with the environment lookup and home directory injected,
/// so the precedence rules can be tested without touching the process.
pub fn resolve_root_with(
    flag: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
    home: Option<PathBuf>,
) -> Result<ResolvedRoot, RootError> {
    let (path, source) = if let Some(flag) = flag {
        (flag.to_path_buf(), RootSource::Flag)
    } else if let Some((var, value)) = [ENV_ROOT, ENV_ROOT_FALLBACK]
        .into_iter()
        .find_map(|var| env(var).filter(|v| !v.is_empty()).map(|v| (var, v)))
    {
        (PathBuf::from(value), RootSource::Env(var))
    } else {
        let home = home.ok_or(RootError::NoHome)?;
        (home.join(".uncaged").join("workflow"), RootSource::Default)
    };
    match std::path::absolute(&path) {
        Ok(path) => Ok(ResolvedRoot { path, source }),
        Err(source_err) => Err(RootError::Absolute {
            path,
            source_of: source,
            source: source_err,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn home() -> Option<PathBuf> {
        Some(PathBuf::from("/home/u"))
    }

    const BOTH: &[(&str, &str)] = &[(ENV_ROOT, "/primary"), (ENV_ROOT_FALLBACK, "/fallback")];

    #[test]
    fn flag_beats_everything() {
        let r = resolve_root_with(Some(Path::new("/flag")), env_of(BOTH), home()).unwrap();
        assert_eq!(r.path, PathBuf::from("/flag"));
        assert_eq!(r.source, RootSource::Flag);
    }

    #[test]
    fn primary_env_beats_fallback_and_home() {
        let r = resolve_root_with(None, env_of(BOTH), home()).unwrap();
        assert_eq!(r.path, PathBuf::from("/primary"));
        assert_eq!(r.source, RootSource::Env(ENV_ROOT));
    }

    #[test]
    fn fallback_env_beats_home() {
        let env = env_of(&[(ENV_ROOT_FALLBACK, "/fallback")]);
        let r = resolve_root_with(None, env, home()).unwrap();
        assert_eq!(r.path, PathBuf::from("/fallback"));
        assert_eq!(r.source, RootSource::Env(ENV_ROOT_FALLBACK));
    }

    #[test]
    fn empty_env_values_are_ignored() {
        let env = env_of(&[(ENV_ROOT, ""), (ENV_ROOT_FALLBACK, "/fallback")]);
        let r = resolve_root_with(None, env, home()).unwrap();
        assert_eq!(r.source, RootSource::Env(ENV_ROOT_FALLBACK));

        let env = env_of(&[(ENV_ROOT, ""), (ENV_ROOT_FALLBACK, "")]);
        let r = resolve_root_with(None, env, home()).unwrap();
        assert_eq!(r.source, RootSource::Default);
    }

    #[test]
    fn default_is_under_home() {
        let r = resolve_root_with(None, env_of(&[]), home()).unwrap();
        assert_eq!(r.path, PathBuf::from("/home/u/.uncaged/workflow"));
        assert_eq!(r.source, RootSource::Default);
    }

    #[test]
    fn no_home_is_an_error_only_when_needed() {
        let err = resolve_root_with(None, env_of(&[]), None).unwrap_err();
        assert!(matches!(err, RootError::NoHome));
        assert!(resolve_root_with(None, env_of(BOTH), None).is_ok());
        assert!(resolve_root_with(Some(Path::new("/f")), env_of(&[]), None).is_ok());
    }

    #[test]
    fn relative_paths_are_made_absolute() {
        let cwd = std::env::current_dir().unwrap();
        let r = resolve_root_with(Some(Path::new("rel/root")), env_of(&[]), None).unwrap();
        assert!(r.path.is_absolute());
        assert_eq!(r.path, cwd.join("rel/root"));

        let r = resolve_root_with(None, env_of(&[(ENV_ROOT, "envrel")]), None).unwrap();
        assert_eq!(r.path, cwd.join("envrel"));
    }

    #[test]
    fn empty_flag_is_an_error_naming_the_source() {
        let err = resolve_root_with(Some(Path::new("")), env_of(BOTH), home()).unwrap_err();
        assert!(matches!(
            err,
            RootError::Absolute {
                source_of: RootSource::Flag,
                ..
            }
        ));
        assert!(err.to_string().contains("--root"), "{err}");
    }
}
