//! Shared helpers for tests that run the real `uwf` binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// A fresh storage root in a temporary directory.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `uwf` with this root, no colour, and no inherited root variables.
    pub fn uwf(&self) -> Command {
        let mut c = Command::cargo_bin("uwf").unwrap();
        c.env("UNCAGED_WORKFLOW_STORAGE_ROOT", self.root())
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .env("COLUMNS", "200");
        c
    }

    /// Runs `uwf args…`, expects success, returns stdout as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.uwf().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "uwf {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "uwf {args:?}: stdout is not JSON ({e}):\n{}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Runs `uwf args…`, expects failure with nothing on stdout; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.uwf().args(args).output().unwrap();
        assert!(!out.status.success(), "uwf {args:?} should have failed");
        assert!(
            out.stdout.is_empty(),
            "uwf {args:?} wrote to stdout on failure:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Every file under the root with its bytes, for "nothing changed" checks.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        snap(&self.root(), &self.root(), &mut out);
        out
    }

    /// Path of a node file (layout of docs/cas.md).
    pub fn object_path(&self, hash: &str) -> PathBuf {
        self.root()
            .join("cas/objects")
            .join(&hash[..2])
            .join(format!("{}.json", &hash[2..]))
    }
}

fn snap(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.insert(p.strip_prefix(base).unwrap().join(""), Vec::new());
            snap(base, &p, out);
        } else {
            out.insert(
                p.strip_prefix(base).unwrap().to_path_buf(),
                std::fs::read(&p).unwrap(),
            );
        }
    }
}

/// Compares `actual` with a golden file; `UPDATE_GOLDEN=1` rewrites it.
pub fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "missing golden file {} ({e}); run with UPDATE_GOLDEN=1",
            path.display()
        )
    });
    assert_eq!(
        actual,
        want,
        "output differs from {}; if intended, rerun with UPDATE_GOLDEN=1",
        path.display()
    );
}

/// The hash field of a command's JSON answer.
pub fn hash_of(v: &Value) -> String {
    v["hash"].as_str().unwrap().to_string()
}
