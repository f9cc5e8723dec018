//! Shared helpers for tests that run the real `uwf` binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// The store a test's commands use: see [`per_backend!`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The storage root itself (the default store).
    Fs,
    /// A fresh database on the test binary's PostgreSQL server
    /// (`uwf_pg_testing`), selected with `UWF_STORE`.
    Pg,
}

/// Runs each named test, a `fn(Backend)` of the test file, once per store:
/// `filesystem::NAME` on the storage root, `postgresql::NAME` on a fresh
/// PostgreSQL database. One suite, two backends: a test that holds on one
/// store must hold on the other, and a function left out of the list is
/// dead code (a warning, an error under clippy `-D warnings`).
#[macro_export]
macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {
        mod filesystem {
            $(#[test]
            fn $name() {
                super::$name($crate::common::Backend::Fs)
            })*
        }
        mod postgresql {
            $(#[test]
            fn $name() {
                super::$name($crate::common::Backend::Pg)
            })*
        }
    };
}

/// A fresh storage root in a temporary directory, and on
/// [`Backend::Pg`] the fresh database its commands use as their store.
pub struct Env {
    pub dir: tempfile::TempDir,
    /// The database of a [`Backend::Pg`] environment.
    pub db: Option<uwf_pg_testing::TestDb>,
}

impl Env {
    /// A filesystem environment.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            db: None,
        }
    }

    /// An environment on `backend`; `None` when PostgreSQL tests are
    /// skipped (no server binaries and not `CI=true`: `uwf_pg_testing`
    /// has said so loudly), so the test returns early.
    pub fn on(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Fs => Some(Self::new()),
            Backend::Pg => Some(Self {
                dir: tempfile::tempdir().unwrap(),
                db: Some(uwf_pg_testing::database()?),
            }),
        }
    }

    /// Which store this environment's commands use.
    pub fn backend(&self) -> Backend {
        if self.db.is_some() {
            Backend::Pg
        } else {
            Backend::Fs
        }
    }

    /// `uwf` with this root and this store, no colour, and no inherited
    /// root or store variables: on PostgreSQL `UWF_STORE` (the URL without
    /// its password) and `UWF_STORE_PASSWORD` select the database.
    pub fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("uwf"));
        c.env("UNCAGED_WORKFLOW_STORAGE_ROOT", self.root())
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("RUST_LOG")
            .env_remove("UWF_STORE")
            .env_remove("UWF_STORE_PASSWORD")
            .env_remove("UWF_RELAY")
            .env("NO_COLOR", "1")
            .env("COLUMNS", "200");
        if let Some(db) = &self.db {
            c.env("UWF_STORE", &db.url_without_password)
                .env("UWF_STORE_PASSWORD", uwf_pg_testing::PASSWORD);
        }
        c
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `uwf` with this root and store (see [`Env::command`]).
    pub fn uwf(&self) -> Command {
        Command::from_std(self.command())
    }

    /// `uwf` as [`Env::uwf`] runs it, but under the file mode creation
    /// mask `umask` (set by `sh`, so the test process keeps its own).
    pub fn uwf_under_umask(&self, umask: &str) -> Command {
        let inner = self.command();
        let mut c = std::process::Command::new("sh");
        c.arg("-c")
            .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
            .arg(inner.get_program());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        Command::from_std(c)
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

    /// `text` with this environment's temporary directory written `[DIR]`,
    /// so a report that names a file in it can be a snapshot.
    pub fn redact(&self, text: &str) -> String {
        text.replace(&self.dir.path().display().to_string(), "[DIR]")
    }

    /// [`Env::redact`], and every thread id written `[THREAD]` and every
    /// node hash `[HASH]` (both change from run to run).
    pub fn scrub(&self, text: &str) -> String {
        scrub_ids(&self.redact(text))
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

    /// Every file under the root with its bytes and, on PostgreSQL, every
    /// row of the store's tables ([`Env::tables`], keyed `postgresql/TABLE`),
    /// for "nothing changed" checks.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        snap(&self.root(), &self.root(), &mut out);
        for (table, rows) in self.tables() {
            out.insert(
                Path::new("postgresql").join(table),
                rows.join("\n").into_bytes(),
            );
        }
        out
    }

    /// On PostgreSQL, the rows of each of the store's tables that has any,
    /// as text in a stable order: table → rows. Empty on the filesystem.
    /// The schema's own bookkeeping (`uwf_schema_version`) is left out: a
    /// command may apply the migrations on first use, and that is no change
    /// of what the store holds; so is a node's `fresh_at`.
    pub fn tables(&self) -> BTreeMap<String, Vec<String>> {
        let Some(db) = &self.db else {
            return BTreeMap::new();
        };
        let mut client = db.client();
        let names: Vec<String> = client
            .query(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name LIKE 'uwf\\_%' \
                 AND table_name <> 'uwf_schema_version' ORDER BY 1",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut out = BTreeMap::new();
        for name in names {
            // A node's `fresh_at` (when it was last stored again) is the
            // database's node-file modification time, which the filesystem
            // snapshot does not compare either: storing a node again is no
            // change of what the store holds (docs/state.md, "Garbage
            // collection").
            let row = if name == "uwf_nodes" {
                "(t.hash, t.type_hash, t.payload, t.stored_at)::text"
            } else {
                "t::text"
            };
            let rows: Vec<String> = client
                .query(&format!("SELECT {row} FROM {name} t ORDER BY 1"), &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            if !rows.is_empty() {
                out.insert(name, rows);
            }
        }
        out
    }

    /// Every file under the root but `.env` (where secrets belong), and on
    /// PostgreSQL every row of the store's tables ([`Env::tables`]), whose
    /// bytes hold `needle`: as written, or hex-encoded as a `bytea` column
    /// (a node's payload) shows it. For "this secret is nowhere" checks.
    pub fn places_holding(&self, needle: &str) -> Vec<String> {
        let hex: String = needle.bytes().map(|b| format!("{b:02x}")).collect();
        let mut found: Vec<String> = Vec::new();
        let mut stack = vec![self.root()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p != self.root().join(".env") {
                    let bytes = std::fs::read(&p).unwrap();
                    if bytes
                        .windows(needle.len().max(1))
                        .any(|w| w == needle.as_bytes())
                    {
                        found.push(p.display().to_string());
                    }
                }
            }
        }
        for (table, rows) in self.tables() {
            for row in rows {
                if row.contains(needle) || row.contains(&hex) {
                    found.push(format!("{table}: {row}"));
                }
            }
        }
        found
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

/// `text` with every word that is a ULID (26 characters of Crockford's
/// base32) written `[THREAD]` and every word that is a node hash (13 such
/// characters, at least one a digit, so that an English word in capitals is
/// left alone) written `[HASH]`.
pub fn scrub_ids(text: &str) -> String {
    const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let crockford = word.chars().all(|c| CROCKFORD.contains(c));
        let digit = word.chars().any(|c| c.is_ascii_digit());
        match word.len() {
            26 if crockford => out.push_str("[THREAD]"),
            13 if crockford && digit => out.push_str("[HASH]"),
            _ => out.push_str(word),
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// The hash field of a command's JSON answer.
pub fn hash_of(v: &Value) -> String {
    v["hash"].as_str().unwrap().to_string()
}

/// The workspace's `examples/` directory.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// An example file, e.g. `example("solve-issue.yaml")`, as a string path.
pub fn example(name: &str) -> String {
    examples().join(name).to_str().unwrap().to_string()
}

static BUILD_MOCK: std::sync::Once = std::sync::Once::new();
static BUILD_WORKFLOW: std::sync::Once = std::sync::Once::new();

/// The `uwf-mock` binary, built beside `uwf` (`cargo_bin("uwf-mock")` only
/// works inside its own package). Built once with cargo if it is missing.
pub fn mock_bin() -> PathBuf {
    agent_bin("uwf-mock", &BUILD_MOCK)
}

static BUILD_LLM: std::sync::Once = std::sync::Once::new();

/// The `uwf-llm` agent binary, built beside `uwf` like [`mock_bin`].
pub fn llm_bin() -> PathBuf {
    agent_bin("uwf-llm", &BUILD_LLM)
}

/// The `uwf-workflow` binary, built beside `uwf` like [`mock_bin`].
pub fn workflow_bin() -> PathBuf {
    agent_bin("uwf-workflow", &BUILD_WORKFLOW)
}

/// An agent binary of the workspace (package and binary `name`), built
/// beside `uwf` once with cargo if it is missing.
fn agent_bin(name: &str, once: &std::sync::Once) -> PathBuf {
    let uwf = assert_cmd::cargo::cargo_bin("uwf");
    let dir = uwf.parent().unwrap().to_path_buf();
    let bin = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    once.call_once(|| {
        if bin.is_file() {
            return;
        }
        let mut cargo = std::process::Command::new(env!("CARGO"));
        cargo
            .args(["build", "--quiet", "-p", name, "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml"));
        let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if profile == "release" {
            cargo.arg("--release");
        }
        if matches!(profile, "debug" | "release") {
            cargo.arg("--target-dir").arg(dir.parent().unwrap());
        }
        let status = cargo
            .status()
            .unwrap_or_else(|e| panic!("cannot run cargo to build {name}: {e}"));
        assert!(status.success(), "cargo build -p {name} failed");
    });
    assert!(
        bin.is_file(),
        "{name} not found at {}; run `cargo build -p {name}`",
        bin.display()
    );
    bin
}

/// `--agent` value running `uwf-mock` with a scenario file.
pub fn mock_agent(scenario: &Path) -> String {
    format!("'{}' '{}'", mock_bin().display(), scenario.display())
}

/// The state files that agent failures must leave alone, besides the
/// per-thread head files under `threads/`.
pub const STATE_FILES: [&str; 2] = ["history.jsonl", "registry.yaml"];

impl Env {
    /// Sets the configuration the store's commands use: `config.yaml` in
    /// the root on the filesystem, the store's own configuration (`uwf
    /// store init --config`) on PostgreSQL. Returns the file written.
    pub fn set_config(&self, yaml: &str) -> PathBuf {
        if self.db.is_some() {
            let p = self.file("config-for-the-store.yaml", yaml);
            self.json(&["store", "init", "--config", p.to_str().unwrap()]);
            return p;
        }
        std::fs::create_dir_all(self.root()).unwrap();
        let p = self.root().join("config.yaml");
        std::fs::write(&p, yaml).unwrap();
        p
    }

    /// Puts `yaml` where the store keeps its configuration without any
    /// check (`uwf store init --config` refuses an invalid one): as
    /// `config.yaml`, or straight into the `uwf_config` table (whose schema
    /// is created first). For tests of configurations gone bad.
    pub fn set_config_unchecked(&self, yaml: &str) {
        let Some(db) = &self.db else {
            self.set_config(yaml);
            return;
        };
        self.json(&["store", "init"]);
        db.client()
            .execute(
                "INSERT INTO uwf_config (only_row, body, updated_at) VALUES (true, $1, 0) \
                 ON CONFLICT (only_row) DO UPDATE SET body = excluded.body",
                &[&yaml],
            )
            .unwrap();
    }

    /// What errors about the configuration name: the path of `config.yaml`,
    /// or the database's URL and the `uwf_config` table.
    pub fn config_origin(&self) -> String {
        match &self.db {
            Some(db) => format!("{} (table uwf_config)", db.url_without_password),
            None => self.root().join("config.yaml").display().to_string(),
        }
    }

    /// The archived threads, as `history.jsonl`'s lines say (or on
    /// PostgreSQL the rows of `uwf_history`, in the same JSON form).
    pub fn history(&self) -> Vec<Value> {
        if let Some(db) = &self.db {
            let Ok(rows) = db.client().query(
                "SELECT thread::text, workflow, head, completed_at, reason \
                 FROM uwf_history ORDER BY seq",
                &[],
            ) else {
                return Vec::new();
            };
            return rows
                .iter()
                .map(|r| {
                    let mut v = serde_json::json!({
                        "thread": r.get::<_, String>(0),
                        "workflow": r.get::<_, String>(1),
                        "head": r.get::<_, String>(2),
                        "completedAt": r.get::<_, i64>(3),
                    });
                    if let Some(reason) = r.get::<_, Option<String>>(4) {
                        v["reason"] = reason.into();
                    }
                    v
                })
                .collect();
        }
        std::fs::read_to_string(self.root().join("history.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The store's table of waits as it is stored, stale entries included:
    /// thread → the record (`head`, `role`, `agent`, `prompt`, `child`, …).
    /// `waiting.yaml` on the filesystem, the rows of `uwf_waiting` on
    /// PostgreSQL (whose `head` column must agree with the record's).
    pub fn waiting_table(&self) -> BTreeMap<String, Value> {
        let Some(db) = &self.db else {
            return std::fs::read(self.root().join("waiting.yaml"))
                .map(|b| serde_yaml::from_slice(&b).unwrap())
                .unwrap_or_default();
        };
        db.client()
            .query("SELECT thread, head, record FROM uwf_waiting", &[])
            .unwrap()
            .iter()
            .map(|r| {
                let (thread, head): (String, String) = (r.get(0), r.get(1));
                let record: Value = serde_json::from_str(r.get(2)).unwrap();
                assert_eq!(record["head"], head.as_str(), "uwf_waiting row of {thread}");
                (thread, record)
            })
            .collect()
    }

    /// The store's table of attempts as it is stored: thread → its newest
    /// AttemptRecord node. `attempts.yaml` on the filesystem, the rows of
    /// `uwf_attempts` on PostgreSQL.
    pub fn attempts_table(&self) -> BTreeMap<String, String> {
        let Some(db) = &self.db else {
            return std::fs::read(self.root().join("attempts.yaml"))
                .map(|b| serde_yaml::from_slice(&b).unwrap())
                .unwrap_or_default();
        };
        db.client()
            .query("SELECT thread, record FROM uwf_attempts", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    /// The registered workflows: name → Workflow node hash (`registry.yaml`,
    /// or `uwf_registry` on PostgreSQL).
    pub fn registry(&self) -> BTreeMap<String, String> {
        if let Some(db) = &self.db {
            let Ok(rows) = db
                .client()
                .query("SELECT name, hash FROM uwf_registry", &[])
            else {
                return BTreeMap::new();
            };
            return rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        }
        std::fs::read(self.root().join("registry.yaml"))
            .map(|b| serde_yaml::from_slice(&b).unwrap())
            .unwrap_or_default()
    }
}

/// Damaging the thread state behind uwf's back, the same way on both
/// stores (files of the root, or rows of the database), for tests of what
/// commands do with a store that is not what uwf wrote.
impl Env {
    /// Points the head of active thread `thread` at `hash` (`threads/<id>`,
    /// or its `uwf_threads` row).
    pub fn damage_head(&self, thread: &str, hash: &str) {
        match &self.db {
            Some(db) => {
                let n = db
                    .client()
                    .execute(
                        "UPDATE uwf_threads SET head = $2 WHERE thread = $1",
                        &[&thread, &hash],
                    )
                    .unwrap();
                assert_eq!(n, 1, "no active thread {thread}");
            }
            None => {
                let path = self.root().join("threads").join(thread);
                assert!(path.is_file(), "no active thread {thread}");
                std::fs::write(path, format!("{hash}\n")).unwrap();
            }
        }
    }

    /// Removes active thread `thread` from the state altogether (neither
    /// active nor archived any more).
    pub fn forget_thread(&self, thread: &str) {
        match &self.db {
            Some(db) => {
                db.client()
                    .execute("DELETE FROM uwf_threads WHERE thread = $1", &[&thread])
                    .unwrap();
            }
            None => std::fs::remove_file(self.root().join("threads").join(thread)).unwrap(),
        }
    }

    /// Points registry entry `name` at `hash`.
    pub fn damage_registry(&self, name: &str, hash: &str) {
        match &self.db {
            Some(db) => {
                db.client()
                    .execute(
                        "UPDATE uwf_registry SET hash = $2 WHERE name = $1",
                        &[&name, &hash],
                    )
                    .unwrap();
            }
            None => {
                let mut registry = self.registry();
                registry.insert(name.to_string(), hash.to_string());
                let text = serde_yaml::to_string(&registry).unwrap();
                std::fs::write(self.root().join("registry.yaml"), text).unwrap();
            }
        }
    }

    /// Points every history entry of `thread` at head `hash`.
    pub fn damage_history_head(&self, thread: &str, hash: &str) {
        match &self.db {
            Some(db) => {
                db.client()
                    .execute(
                        "UPDATE uwf_history SET head = $2 WHERE thread = $1",
                        &[&thread, &hash],
                    )
                    .unwrap();
            }
            None => {
                let lines: Vec<String> = self
                    .history()
                    .into_iter()
                    .map(|mut e| {
                        if e["thread"] == thread {
                            e["head"] = hash.into();
                        }
                        e.to_string()
                    })
                    .collect();
                let path = self.root().join("history.jsonl");
                std::fs::write(path, lines.join("\n") + "\n").unwrap();
            }
        }
    }

    /// Makes `hash` the newest attempt record of `thread`.
    pub fn damage_attempt(&self, thread: &str, hash: &str) {
        match &self.db {
            Some(db) => {
                db.client()
                    .execute(
                        "INSERT INTO uwf_attempts (thread, record) VALUES ($1, $2) \
                         ON CONFLICT (thread) DO UPDATE SET record = excluded.record",
                        &[&thread, &hash],
                    )
                    .unwrap();
            }
            None => {
                let mut table = self.attempts_table();
                table.insert(thread.to_string(), hash.to_string());
                let text = serde_yaml::to_string(&table).unwrap();
                std::fs::write(self.root().join("attempts.yaml"), text).unwrap();
            }
        }
    }

    /// Records that `thread` waits at `head` for a person (role `role`).
    pub fn damage_waiting(&self, thread: &str, head: &str, role: &str) {
        let record = serde_json::json!({
            "head": head, "role": role, "prompt": "?", "agent": "me", "since": 1
        });
        match &self.db {
            Some(db) => {
                db.client()
                    .execute(
                        "INSERT INTO uwf_waiting (thread, head, record) VALUES ($1, $2, $3)",
                        &[&thread, &head, &record.to_string()],
                    )
                    .unwrap();
            }
            None => {
                let mut table = self.waiting_table();
                table.insert(thread.to_string(), record);
                let text = serde_yaml::to_string(&table).unwrap();
                std::fs::write(self.root().join("waiting.yaml"), text).unwrap();
            }
        }
    }
}

impl Env {
    /// Writes `text` to `name` in the temporary directory (outside the root).
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The bytes of every head file (`threads/<id>`), `history.jsonl` and
    /// `registry.yaml` (`None` when missing); on PostgreSQL, the rows of
    /// the tables that hold the same.
    pub fn state_snapshot(&self) -> BTreeMap<String, Option<Vec<u8>>> {
        if self.db.is_some() {
            let tables = self.tables();
            return ["uwf_threads", "uwf_history", "uwf_registry"]
                .into_iter()
                .map(|t| {
                    let rows = tables.get(t).map(|r| r.join("\n").into_bytes());
                    (t.to_string(), rows)
                })
                .collect();
        }
        let mut out: BTreeMap<String, Option<Vec<u8>>> = STATE_FILES
            .iter()
            .map(|f| (f.to_string(), std::fs::read(self.root().join(f)).ok()))
            .collect();
        for (id, head) in self.heads() {
            out.insert(format!("threads/{id}"), Some(head.into_bytes()));
        }
        out
    }

    /// The active threads as their head files say: id → head file content
    /// (the hash and a newline); on PostgreSQL, as `uwf_threads` says, in
    /// the same form.
    pub fn heads(&self) -> BTreeMap<String, String> {
        if let Some(db) = &self.db {
            let Ok(rows) = db
                .client()
                .query("SELECT thread::text, head FROM uwf_threads", &[])
            else {
                // No schema yet: no thread.
                return BTreeMap::new();
            };
            return rows
                .iter()
                .map(|r| (r.get(0), format!("{}\n", r.get::<_, String>(1))))
                .collect();
        }
        let Ok(rd) = std::fs::read_dir(self.root().join("threads")) else {
            return BTreeMap::new();
        };
        rd.map(|e| e.unwrap())
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read_to_string(e.path()).unwrap(),
                )
            })
            .collect()
    }

    /// The roles of a thread's chain, oldest first, as `uwf thread steps`
    /// lists them after the StartNode (which must come first).
    pub fn roles(&self, thread: &str) -> Vec<String> {
        let v = self.json(&["thread", "steps", thread]);
        let steps = v["steps"]
            .as_array()
            .unwrap_or_else(|| panic!("no steps in {v}"));
        assert!(steps[0]["prompt"].is_string(), "not a StartNode first: {v}");
        steps[1..]
            .iter()
            .map(|s| s["role"].as_str().unwrap().to_string())
            .collect()
    }

    /// Runs `uwf args…` and returns its output, whatever the status.
    pub fn output(&self, args: &[&str]) -> std::process::Output {
        self.uwf().args(args).output().unwrap()
    }

    /// Runs `uwf args…`, expects success, returns stdout as text.
    pub fn text(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "uwf {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Env {
    /// `uwf` as a plain `std::process::Command` (to spawn it in the
    /// background), with the same environment as [`Env::uwf`].
    pub fn uwf_process(&self) -> std::process::Command {
        let mut c = self.command();
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    }
}

/// Command lines of the running processes whose command line contains
/// `pattern` (`pgrep -f`); `None` when `pgrep` is not available.
pub fn processes_matching(pattern: &str) -> Option<Vec<String>> {
    let out = std::process::Command::new("pgrep")
        .args(["-a", "-f", "--", pattern])
        .output()
        .ok()?;
    match out.status.code() {
        Some(0) => Some(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect(),
        ),
        Some(1) => Some(Vec::new()),
        _ => None,
    }
}

/// Waits until no process's command line contains `pattern` (true), or
/// `timeout` passes (false). True at once when `pgrep` is missing.
pub fn wait_no_process(pattern: &str, timeout: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match processes_matching(pattern) {
            None => return true,
            Some(p) if p.is_empty() => return true,
            Some(_) if std::time::Instant::now() >= deadline => return false,
            Some(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

/// Polls `cond` until it holds; panics naming `what` once `timeout` has
/// passed. The timeout is a bound that only catches a hang, never a timing
/// assertion: tests wait on a condition like this, not a fixed sleep.
pub fn wait_until(what: &str, timeout: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether process `pid` has a child process now (`/proc/PID/task/*/children`,
/// Linux): for a background `uwf`, whether it has started its agent.
pub fn has_child(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("children"))
            .is_ok_and(|children| !children.trim().is_empty())
    })
}

/// Waits until the clock reads a later millisecond than `ms` (a node's
/// timestamp), so that a node stored from now on would get a later one.
pub fn wait_past_ms(ms: u64) {
    wait_until(
        "the clock to pass a timestamp",
        std::time::Duration::from_secs(10),
        || uwf_cas::node::now_ms() > ms,
    );
}

/// solve-issue answers for uwf-mock, the reviewer approving at once; each
/// entry waits `delay` (`"600ms"`, `"60s"`, …).
pub fn solve_scenario(delay: &str) -> String {
    format!(
        "roles:\n  planner:\n    - output: {{ plan: \"the plan\", steps: [\"one\"] }}\n      delay: {delay}\n  developer:\n    - output: {{ filesChanged: [\"a.rs\"], summary: \"done\" }}\n      delay: {delay}\n  reviewer:\n    - output: {{ approved: true, comments: \"LGTM\" }}\n      delay: {delay}\n"
    )
}

/// The roles of a solve-issue thread run with [`solve_scenario`].
pub const SOLVED_ONCE: [&str; 3] = ["planner", "developer", "reviewer"];

/// `uwf thread run solve-issue -p task --agent agent --detach`: queues a
/// new thread for a worker; returns its id.
pub fn detach(env: &Env, agent: &str, task: &str) -> String {
    let v = env.json(&[
        "thread",
        "run",
        "solve-issue",
        "-p",
        task,
        "--agent",
        agent,
        "--detach",
    ]);
    assert_eq!(v["queued"], true, "{v}");
    assert_eq!(v["run"]["state"], "queued", "{v}");
    v["thread"].as_str().unwrap().to_string()
}

#[test]
fn scrub_ids_masks_thread_ids_and_hashes_only() {
    assert_eq!(
        scrub_ids("thread 01M8CMVV22C6YCGPFP2QJEB06V at 1TM6QWPENJAPY, 0000000000000."),
        "thread [THREAD] at [HASH], [HASH]."
    );
    // Capitals without a digit, other lengths and other letters stay.
    assert_eq!(
        scrub_ids("CONFIGURATION 1TM6QWPENJAP 1tm6qwpenjapy 1TM6QWPENJAPU"),
        "CONFIGURATION 1TM6QWPENJAP 1tm6qwpenjapy 1TM6QWPENJAPU"
    );
}
