//! The working directory as the tools' whole world: every path a model
//! names is resolved inside it, or refused.
//!
//! A path is taken relative to the working directory (an absolute one is
//! accepted only when it lies inside). `..` may move around inside but
//! never above it; then the real location is checked after following
//! every symlink (`canonicalize`), so a link pointing out of the directory
//! is refused as well. For a file that does not exist yet (a write), the
//! deepest existing ancestor is checked that way and the rest of the path
//! is plain names. See docs/agents.md, "uwf-agent".

use std::path::{Component, Path, PathBuf};

/// The working directory, canonical.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
}

/// Why a path was refused; the text goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// No path given.
    #[error("the path is empty")]
    Empty,
    /// It leaves the working directory (by `..`, an absolute path or a symlink).
    #[error("{path:?} is outside the working directory; every path must stay inside it")]
    Outside {
        /// The path as given.
        path: String,
    },
    /// It does not exist (for reading).
    #[error("{path:?} does not exist")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// Another I/O error.
    #[error("{path:?}: {message}")]
    Io {
        /// The path as given.
        path: String,
        /// The OS error.
        message: String,
    },
}

impl Sandbox {
    /// The sandbox of `dir`, which must exist.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            root: dir.canonicalize()?,
        })
    }

    /// The working directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path` inside the directory, by its names alone: joined to the
    /// root, `.` dropped, `..` applied, refused when it climbs above.
    fn lexical(&self, path: &str) -> Result<PathBuf, PathError> {
        if path.trim().is_empty() {
            return Err(PathError::Empty);
        }
        let given = Path::new(path);
        let outside = || PathError::Outside {
            path: path.to_owned(),
        };
        let (mut out, rest) = if given.is_absolute() {
            // Only a path under the root (as written or canonical) is inside.
            let under = given
                .strip_prefix(&self.root)
                .map(Path::to_path_buf)
                .or_else(|_| {
                    let real = given.canonicalize().map_err(|_| outside())?;
                    real.strip_prefix(&self.root)
                        .map(Path::to_path_buf)
                        .map_err(|_| outside())
                })?;
            (self.root.clone(), under)
        } else {
            (self.root.clone(), given.to_path_buf())
        };
        for c in rest.components() {
            match c {
                Component::Normal(name) => out.push(name),
                Component::CurDir => {}
                Component::ParentDir => {
                    if out == self.root {
                        return Err(outside());
                    }
                    out.pop();
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        Ok(out)
    }

    /// `real` (a canonical path) when it lies inside the working directory;
    /// `given` names it in the error.
    fn inside(&self, real: PathBuf, given: &str) -> Result<PathBuf, PathError> {
        if real.starts_with(&self.root) {
            Ok(real)
        } else {
            Err(PathError::Outside {
                path: given.to_owned(),
            })
        }
    }

    /// An existing file or directory inside the working directory, as its
    /// real (canonical) path.
    pub fn existing(&self, path: &str) -> Result<PathBuf, PathError> {
        let lexical = self.lexical(path)?;
        let real = lexical.canonicalize().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => PathError::NotFound {
                path: path.to_owned(),
            },
            _ => PathError::Io {
                path: path.to_owned(),
                message: e.to_string(),
            },
        })?;
        self.inside(real, path)
    }

    /// A file to write inside the working directory: an existing one (its
    /// real path, so a symlink is checked where it points), or a new one
    /// whose deepest existing ancestor is inside and whose missing parents
    /// may be created.
    pub fn writable(&self, path: &str) -> Result<PathBuf, PathError> {
        let lexical = self.lexical(path)?;
        match self.existing(path) {
            Ok(real) => return Ok(real),
            Err(PathError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        // A dangling symlink "does not exist" but writing through it would
        // create its target wherever it points.
        if lexical.symlink_metadata().is_ok() {
            return Err(PathError::Outside {
                path: path.to_owned(),
            });
        }
        let mut ancestor = lexical.as_path();
        let mut missing = Vec::new();
        loop {
            let Some(parent) = ancestor.parent() else {
                return Err(PathError::Outside {
                    path: path.to_owned(),
                });
            };
            missing.push(ancestor.file_name().map(ToOwned::to_owned));
            ancestor = parent;
            if ancestor.symlink_metadata().is_ok() {
                break;
            }
        }
        let real = ancestor.canonicalize().map_err(|e| PathError::Io {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let mut out = self.inside(real, path)?;
        for name in missing.into_iter().rev() {
            match name {
                Some(n) => out.push(n),
                None => {
                    return Err(PathError::Outside {
                        path: path.to_owned(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// `path` (inside the directory) relative to it, for results: `.` for
    /// the directory itself.
    pub fn shown(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Sandbox) {
        let work = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(work.path().join("src")).unwrap();
        std::fs::write(work.path().join("src/a.txt"), "a").unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        let sb = Sandbox::new(work.path()).unwrap();
        (work, outside, sb)
    }

    fn outside(r: Result<PathBuf, PathError>) -> bool {
        matches!(r, Err(PathError::Outside { .. }))
    }

    #[test]
    fn relative_paths_resolve_inside() {
        let (_w, _o, sb) = setup();
        let a = sb.existing("src/a.txt").unwrap();
        assert_eq!(a, sb.root().join("src/a.txt"));
        assert_eq!(sb.existing("./src/../src/a.txt").unwrap(), a);
        assert_eq!(sb.shown(&a), "src/a.txt");
        assert_eq!(sb.shown(&sb.existing(".").unwrap()), ".");
        assert_eq!(
            sb.writable("src/new/deep.txt").unwrap(),
            sb.root().join("src/new/deep.txt")
        );
        assert_eq!(sb.existing(""), Err(PathError::Empty));
        assert!(matches!(
            sb.existing("src/none.txt"),
            Err(PathError::NotFound { .. })
        ));
    }

    #[test]
    fn dot_dot_may_not_climb_out() {
        let (_w, o, sb) = setup();
        assert!(outside(sb.existing("..")));
        assert!(outside(sb.existing("src/../../x")));
        assert!(outside(sb.writable("../evil.txt")));
        let name = o.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(outside(sb.existing(&format!("../{name}/secret.txt"))));
    }

    #[test]
    fn absolute_paths_only_inside() {
        let (_w, o, sb) = setup();
        let inside = sb.root().join("src/a.txt");
        assert_eq!(sb.existing(&inside.to_string_lossy()).unwrap(), inside);
        assert!(outside(sb.existing("/etc/passwd")));
        assert!(outside(
            sb.existing(&o.path().join("secret.txt").to_string_lossy())
        ));
        assert!(outside(sb.writable("/tmp/uwf-agent-escape.txt")));
    }

    #[test]
    fn symlinks_out_are_refused() {
        let (w, o, sb) = setup();
        symlink(o.path(), w.path().join("out")).unwrap();
        symlink(o.path().join("secret.txt"), w.path().join("link.txt")).unwrap();
        symlink(o.path().join("none.txt"), w.path().join("dangling.txt")).unwrap();
        symlink(w.path().join("src/a.txt"), w.path().join("ok.txt")).unwrap();
        assert!(outside(sb.existing("out/secret.txt")));
        assert!(outside(sb.existing("link.txt")));
        assert!(outside(sb.writable("link.txt")));
        assert!(outside(sb.writable("out/new.txt")));
        assert!(outside(sb.writable("dangling.txt")));
        // A link that stays inside is fine, resolved to its target.
        assert_eq!(sb.existing("ok.txt").unwrap(), sb.root().join("src/a.txt"));
    }
}
