//! Storage backends: where node bytes live.
//!
//! A backend only stores and retrieves nodes by hash and keeps the by-type
//! index. It never interprets payloads; schemas and validation live in
//! [`Cas`](crate::Cas).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use uwf_util::atomic;

use crate::error::{CasError, Result};
use crate::{Hash, Node};

/// A place nodes are kept.
///
/// Implementations must be safe to use from many processes (filesystem) or
/// threads at once, and `insert` must be idempotent: inserting a hash that is
/// already present keeps the first node (and so its timestamp).
pub trait Store: Send + Sync {
    /// Reads a node, checking that its content hashes to `hash`.
    /// `Ok(None)` if absent; [`CasError::Corrupt`] if damaged.
    fn get(&self, hash: Hash) -> Result<Option<Node>>;

    /// Whether a node is present (without reading or checking it).
    fn contains(&self, hash: Hash) -> Result<bool>;

    /// Stores `node` under `hash` (the caller computed it) unless present.
    /// Returns the node as stored and whether this call created it.
    fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)>;

    /// Every stored hash, sorted.
    fn hashes(&self) -> Result<Vec<Hash>>;

    /// Hashes of the nodes of one type, from the index, sorted.
    fn by_type(&self, type_hash: Hash) -> Result<Vec<Hash>>;

    /// Rebuilds the by-type index from the nodes themselves.
    fn reindex(&self) -> Result<ReindexReport>;

    /// Deletes a node (for garbage collection). Returns whether it existed.
    fn remove(&self, hash: Hash) -> Result<bool>;

    /// Entries that are not nodes at all (stray or misnamed files), for
    /// `verify`. Backends that cannot have any return nothing.
    fn strays(&self) -> Result<Vec<PathBuf>> {
        Ok(Vec::new())
    }

    /// Where a node lives, for messages (a path, or `memory:<hash>`).
    fn location(&self, hash: Hash) -> PathBuf;
}

/// What [`Store::reindex`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReindexReport {
    /// Nodes read.
    pub nodes: usize,
    /// Distinct types among them.
    pub types: usize,
    /// Index entries that were missing and were added.
    pub added: usize,
    /// Index entries that pointed at nothing (or at a node of another type) and were removed.
    pub removed: usize,
    /// Nodes that could not be read and so are not indexed.
    pub unreadable: Vec<Hash>,
}

// ---------------------------------------------------------------------------

/// An in-memory store, for tests and embedding.
#[derive(Debug, Default)]
pub struct MemStore {
    inner: Mutex<MemInner>,
}

#[derive(Debug, Default)]
struct MemInner {
    nodes: BTreeMap<Hash, Node>,
    index: BTreeMap<Hash, BTreeSet<Hash>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, MemInner> {
        // A panic elsewhere cannot leave the maps half-updated in a way that
        // matters: every mutation is a single insert/remove.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Store for MemStore {
    fn get(&self, hash: Hash) -> Result<Option<Node>> {
        Ok(self.lock().nodes.get(&hash).cloned())
    }

    fn contains(&self, hash: Hash) -> Result<bool> {
        Ok(self.lock().nodes.contains_key(&hash))
    }

    fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)> {
        let mut g = self.lock();
        if let Some(existing) = g.nodes.get(&hash) {
            return Ok((existing.clone(), false));
        }
        g.nodes.insert(hash, node.clone());
        g.index.entry(node.type_hash).or_default().insert(hash);
        Ok((node.clone(), true))
    }

    fn hashes(&self) -> Result<Vec<Hash>> {
        Ok(self.lock().nodes.keys().copied().collect())
    }

    fn by_type(&self, type_hash: Hash) -> Result<Vec<Hash>> {
        Ok(self
            .lock()
            .index
            .get(&type_hash)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default())
    }

    fn reindex(&self) -> Result<ReindexReport> {
        let mut g = self.lock();
        let mut index: BTreeMap<Hash, BTreeSet<Hash>> = BTreeMap::new();
        for (h, n) in &g.nodes {
            index.entry(n.type_hash).or_default().insert(*h);
        }
        let report = ReindexReport {
            nodes: g.nodes.len(),
            types: index.len(),
            ..Default::default()
        };
        g.index = index;
        Ok(report)
    }

    fn remove(&self, hash: Hash) -> Result<bool> {
        let mut g = self.lock();
        match g.nodes.remove(&hash) {
            Some(n) => {
                if let Some(set) = g.index.get_mut(&n.type_hash) {
                    set.remove(&hash);
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn location(&self, hash: Hash) -> PathBuf {
        PathBuf::from(format!("memory:{hash}"))
    }
}

// ---------------------------------------------------------------------------

/// The filesystem store, under `<root>/cas/`.
///
/// Layout (see `docs/cas.md`):
/// * `objects/<2 chars>/<11 chars>.json` — one node per file, as JSON
///   `{"type", "payload", "timestamp"}`; the file name is the hash.
/// * `index/<type hash>/<hash>` — empty marker files, one per node, so that
///   listing by type is a directory read and concurrent writers never
///   contend on a shared index file.
///
/// Writes go to a temporary file in the target directory, are fsynced, then
/// linked into place without replacing an existing file: of two concurrent
/// writers of one node the first wins and both see its timestamp.
#[derive(Debug, Clone)]
pub struct FsStore {
    dir: PathBuf,
}

/// File extension of node files.
const EXT: &str = "json";

impl FsStore {
    /// Opens (creating if needed) the store in `dir` (usually `<root>/cas`).
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        for sub in [dir.join("objects"), dir.join("index")] {
            fs::create_dir_all(&sub).map_err(|e| CasError::io("create directory", &sub, e))?;
        }
        Ok(Self { dir })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn object_path(&self, hash: Hash) -> PathBuf {
        let a = hash.to_array();
        let s = String::from_utf8_lossy(&a);
        self.dir
            .join("objects")
            .join(&s[..2])
            .join(format!("{}.{EXT}", &s[2..]))
    }

    fn marker_path(&self, type_hash: Hash, hash: Hash) -> PathBuf {
        self.dir
            .join("index")
            .join(type_hash.to_string())
            .join(hash.to_string())
    }

    fn ensure_marker(&self, type_hash: Hash, hash: Hash) -> Result<bool> {
        let p = self.marker_path(type_hash, hash);
        if p.exists() {
            return Ok(false);
        }
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(|e| CasError::io("create directory", parent, e))?;
        }
        // Markers carry no data; losing one to a crash is repaired by reindex.
        match fs::OpenOptions::new().write(true).create_new(true).open(&p) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(CasError::io("write", &p, e)),
        }
    }

    fn read_node(&self, hash: Hash, path: &Path) -> Result<Option<Node>> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CasError::io("read", path, e)),
        };
        let corrupt = |reason: String| CasError::Corrupt {
            hash,
            path: path.to_path_buf(),
            reason,
        };
        let node: Node =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not a node: {e}")))?;
        let actual = node.hash();
        if actual != hash {
            return Err(corrupt(format!("content hashes to {actual}")));
        }
        Ok(Some(node))
    }

    fn encode_file(node: &Node) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec(node).map_err(|e| CasError::UnsupportedSchema {
            reason: format!("payload cannot be serialized: {e}"),
        })?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    fn each_object(&self, mut f: impl FnMut(std::result::Result<Hash, PathBuf>)) -> Result<()> {
        let objects = self.dir.join("objects");
        let mut prefixes: Vec<_> = read_dir_sorted(&objects)?;
        prefixes.retain(|p| !is_hidden(p));
        for prefix_dir in prefixes {
            let prefix = file_name(&prefix_dir);
            if !prefix_dir.is_dir() || prefix.len() != 2 {
                f(Err(prefix_dir));
                continue;
            }
            for file in read_dir_sorted(&prefix_dir)? {
                if is_hidden(&file) {
                    // A writer's temporary file: in flight, or left by a crash.
                    continue;
                }
                let name = file_name(&file);
                let parsed = name
                    .strip_suffix(".json")
                    .map(|stem| format!("{prefix}{stem}"))
                    .filter(|full| Hash::is_cas_ref(full))
                    .and_then(|full| full.parse::<Hash>().ok());
                match parsed {
                    Some(h) => f(Ok(h)),
                    None => f(Err(file)),
                }
            }
        }
        Ok(())
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn is_hidden(p: &Path) -> bool {
    file_name(p).starts_with('.')
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CasError::io("read directory", dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        out.push(
            entry
                .map_err(|e| CasError::io("read directory", dir, e))?
                .path(),
        );
    }
    out.sort();
    Ok(out)
}

impl Store for FsStore {
    fn get(&self, hash: Hash) -> Result<Option<Node>> {
        self.read_node(hash, &self.object_path(hash))
    }

    fn contains(&self, hash: Hash) -> Result<bool> {
        let p = self.object_path(hash);
        match fs::metadata(&p) {
            Ok(m) => Ok(m.is_file()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(CasError::io("read", &p, e)),
        }
    }

    fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)> {
        let path = self.object_path(hash);
        let stored = match self.read_node(hash, &path) {
            Ok(Some(existing)) => Some(existing),
            Ok(None) => None,
            Err(CasError::Corrupt { reason, .. }) => {
                // Same name, same content by definition: replacing it repairs the store.
                tracing::warn!(%hash, path = %path.display(), %reason, "replacing a corrupt node file");
                atomic::write_atomic(&path, &Self::encode_file(node)?)?;
                self.ensure_marker(node.type_hash, hash)?;
                return Ok((node.clone(), true));
            }
            Err(e) => return Err(e),
        };
        if let Some(existing) = stored {
            // Heal an index entry lost to a crash between the two writes.
            self.ensure_marker(existing.type_hash, hash)?;
            return Ok((existing, false));
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| CasError::io("create directory", parent, e))?;
        }
        let created = atomic::create_new_atomic(&path, &Self::encode_file(node)?)?;
        let result = if created {
            node.clone()
        } else {
            // Lost a race with another writer: report the winner's node.
            self.read_node(hash, &path)?.ok_or_else(|| {
                CasError::io("read", &path, std::io::Error::from(ErrorKind::NotFound))
            })?
        };
        self.ensure_marker(result.type_hash, hash)?;
        Ok((result, created))
    }

    fn hashes(&self) -> Result<Vec<Hash>> {
        let mut out = Vec::new();
        self.each_object(|r| {
            if let Ok(h) = r {
                out.push(h);
            }
        })?;
        Ok(out)
    }

    fn by_type(&self, type_hash: Hash) -> Result<Vec<Hash>> {
        let dir = self.dir.join("index").join(type_hash.to_string());
        let mut out: Vec<Hash> = read_dir_sorted(&dir)?
            .iter()
            .filter_map(|p| file_name(p).parse::<Hash>().ok())
            .collect();
        out.sort();
        Ok(out)
    }

    fn reindex(&self) -> Result<ReindexReport> {
        let mut report = ReindexReport::default();
        let mut type_of: BTreeMap<Hash, Hash> = BTreeMap::new();
        for h in self.hashes()? {
            match self.get(h) {
                Ok(Some(n)) => {
                    report.nodes += 1;
                    type_of.insert(h, n.type_hash);
                    if self.ensure_marker(n.type_hash, h)? {
                        report.added += 1;
                    }
                }
                Ok(None) => {}
                Err(CasError::Corrupt { .. }) => report.unreadable.push(h),
                Err(e) => return Err(e),
            }
        }
        report.types = type_of.values().collect::<BTreeSet<_>>().len();
        // Drop markers that no longer match a node of that type.
        let index = self.dir.join("index");
        for type_dir in read_dir_sorted(&index)? {
            let Ok(t) = file_name(&type_dir).parse::<Hash>() else {
                continue;
            };
            for marker in read_dir_sorted(&type_dir)? {
                let Ok(h) = file_name(&marker).parse::<Hash>() else {
                    continue;
                };
                let stale = match type_of.get(&h) {
                    Some(actual) => *actual != t,
                    // Unknown to our listing: keep it if the node exists
                    // (written concurrently, or unreadable and reported).
                    None => !self.contains(h)?,
                };
                if stale {
                    fs::remove_file(&marker).map_err(|e| CasError::io("remove", &marker, e))?;
                    report.removed += 1;
                }
            }
        }
        Ok(report)
    }

    fn remove(&self, hash: Hash) -> Result<bool> {
        let path = self.object_path(hash);
        let node = self.get(hash).ok().flatten();
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(CasError::io("remove", &path, e)),
        }
        if let Some(n) = node {
            let m = self.marker_path(n.type_hash, hash);
            match fs::remove_file(&m) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(CasError::io("remove", &m, e)),
            }
        }
        Ok(true)
    }

    fn strays(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        self.each_object(|r| {
            if let Err(p) = r {
                out.push(p);
            }
        })?;
        Ok(out)
    }

    fn location(&self, hash: Hash) -> PathBuf {
        self.object_path(hash)
    }
}
