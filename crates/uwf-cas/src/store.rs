//! Storage backends: where node bytes live.
//!
//! A backend only stores and retrieves nodes by hash, keeps the by-type
//! index and a small key-value cache of derived data. It never interprets
//! payloads; schemas and validation live in [`Cas`](crate::Cas).
//!
//! The [`Store`] trait is the seam between uwf and its storage: nothing in it
//! names a file. Listings are streaming iterators, problems are reported as
//! opaque identifiers ([`Stray`]), and errors say what they mean through
//! [`CasError::kind`](crate::CasError::kind), so a networked backend with
//! transactions fits behind it. The contract every backend must meet is
//! executable: see [`testing`](crate::testing) (feature `testing`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::ErrorKind;
use std::ops::Bound;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use uwf_util::{atomic, private};

use crate::error::{CasError, Result};
use crate::{Hash, Node};

/// A streaming listing of hashes. An `Err` item reports a failure to read
/// part of the listing; iteration may go on after it.
pub type HashIter<'a> = Box<dyn Iterator<Item = Result<Hash>> + 'a>;

/// A streaming listing of [`Stray`] entries.
pub type StrayIter<'a> = Box<dyn Iterator<Item = Result<Stray>> + 'a>;

/// A place nodes are kept.
///
/// Implementations must be safe to use from many processes (filesystem) or
/// threads at once, and `insert` must be idempotent: inserting a hash that is
/// already present keeps the first node (and so its timestamp).
///
/// Listings ([`hashes`](Self::hashes), [`by_type`](Self::by_type),
/// [`strays`](Self::strays)) are lazy: a backend reads them a page at a time,
/// so memory does not grow with the store. Their order is unspecified (both
/// built-in backends happen to yield [`hashes`](Self::hashes) in ascending
/// order). A node inserted or removed while a listing runs may or may not
/// appear in it; the listing never fails because of that.
///
/// No method hands out a filesystem path: entries that are not nodes are
/// reported as [`Stray`]s with an identifier only the backend interprets.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Reads a node, checking that its content hashes to `hash`.
    /// `Ok(None)` if absent; [`CasError::Corrupt`] if damaged. The node's
    /// `timestamp` is the time of its first store.
    fn get(&self, hash: Hash) -> Result<Option<Node>>;

    /// Reads several nodes at once, in the order asked (one round trip for a
    /// networked backend). The default calls [`get`](Self::get) for each.
    fn get_many(&self, hashes: &[Hash]) -> Result<Vec<Option<Node>>> {
        hashes.iter().map(|h| self.get(*h)).collect()
    }

    /// Whether a node is present (without reading or checking it).
    fn has(&self, hash: Hash) -> Result<bool>;

    /// Whether each of several nodes is present, in the order asked (one
    /// round trip for a networked backend). The default calls
    /// [`has`](Self::has) for each.
    fn has_many(&self, hashes: &[Hash]) -> Result<Vec<bool>> {
        hashes.iter().map(|h| self.has(*h)).collect()
    }

    /// Stores `node` under `hash` (the caller computed it) unless present.
    /// Returns the node as stored and whether this call created it. A
    /// present but corrupt node is replaced (the name fixes the content).
    fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)>;

    /// Stores several nodes as [`insert`](Self::insert) stores each, in
    /// order, and answers one `(node, created)` each, in the same order. A
    /// networked backend stores them in one round trip and one
    /// transaction (one commit to wait for); the default inserts them one
    /// by one. Not all-or-nothing: a failure may leave some stored, which
    /// is harmless (content is named by its hash, and garbage collection
    /// collects what nothing reaches).
    fn insert_many(&self, nodes: &[(Hash, Node)]) -> Result<Vec<(Node, bool)>> {
        nodes.iter().map(|(h, n)| self.insert(*h, n)).collect()
    }

    /// Whether [`insert`](Self::insert) itself checks each node against
    /// its type, refusing one that does not conform with
    /// [`CasError::Invalid`] (or the error of a type it cannot check), so
    /// that [`Cas::put`](crate::Cas::put) need not check it first. The
    /// default, `false`, is right for every store that writes what it is
    /// given; a store that forwards its writes to a process which checks
    /// them (the relay of the engine that runs an agent, `uwf-relay`)
    /// answers `true`, and the agent then compiles no schema of its own
    /// (docs/performance.md, "Starting an agent").
    fn checks_types(&self) -> bool {
        false
    }

    /// Every stored node's hash.
    fn hashes(&self) -> HashIter<'_>;

    /// Hashes of the nodes of one type, from the index.
    fn by_type(&self, type_hash: Hash) -> HashIter<'_>;

    /// Rebuilds the by-type index from the nodes themselves.
    fn reindex(&self) -> Result<ReindexReport>;

    /// Deletes a node (for garbage collection). Returns whether it existed.
    fn remove(&self, hash: Hash) -> Result<bool>;

    /// When the node was last stored, in milliseconds since the Unix epoch:
    /// its first store, or any later [`insert`](Self::insert) of the same
    /// node, whichever is newer. `Ok(None)` if absent. Garbage collection's
    /// grace period counts from here, so a writer that stores existing
    /// content again (an agent whose output equals an old, unreachable
    /// node) has the same grace as one that creates it (`docs/state.md`,
    /// "Garbage collection").
    fn last_stored(&self, hash: Hash) -> Result<Option<u64>>;

    /// Deletes a node only if it was last stored before `cutoff` (ms since
    /// the Unix epoch), for garbage collection. Returns whether it was
    /// removed. A backend with transactions decides and deletes atomically;
    /// the default checks [`last_stored`](Self::last_stored) first, leaving a
    /// short window in which a concurrent re-store is missed (the writer's
    /// guard, `uwf_state::NodeGuard`, catches that: `docs/state.md`,
    /// "Collecting beside running work").
    fn remove_if_stale(&self, hash: Hash, cutoff: u64) -> Result<bool> {
        match self.last_stored(hash)? {
            Some(t) if t < cutoff => self.remove(hash),
            _ => Ok(false),
        }
    }

    /// Entries that are not nodes at all (stray or misnamed files), for
    /// `verify`. Backends that cannot have any return nothing (the default).
    fn strays(&self) -> StrayIter<'_> {
        Box::new(std::iter::empty())
    }

    /// Deletes a stray reported by [`strays`](Self::strays), given its
    /// [`id`](Stray::id). Returns `false` if no stray has that id (any more).
    /// Never deletes a node. The default has no strays to remove.
    fn remove_stray(&self, id: &str) -> Result<bool> {
        let _ = id;
        Ok(false)
    }

    /// Reads a derived-data cache entry. `Ok(None)` if absent.
    ///
    /// The cache holds data computed from nodes (e.g. a linearized thread
    /// context keyed by head hash). It is safe to lose at any time, so a
    /// caller must check what it reads (the bytes are returned as stored,
    /// not verified) and must work without it. `key` must pass
    /// [`check_cache_key`].
    fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Writes a cache entry, replacing any previous value atomically: a
    /// reader sees the old bytes or the new ones, never a mix.
    fn cache_put(&self, key: &str, bytes: &[u8]) -> Result<()>;

    /// Deletes a cache entry. Returns whether it existed.
    fn cache_remove(&self, key: &str) -> Result<bool>;
}

/// An entry in a store that is not a node, as reported by [`Store::strays`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Stray {
    /// Identifies the entry to the backend that reported it (for
    /// [`FsStore`], the path of the file); pass it to
    /// [`Store::remove_stray`]. Meant for people and for that backend only.
    pub id: String,
    /// Why it is not a node.
    pub reason: String,
}

/// Longest allowed cache key, in bytes.
pub const CACHE_KEY_MAX: usize = 200;

/// Checks a derived-data cache key: 1 to [`CACHE_KEY_MAX`] characters among
/// `A-Z a-z 0-9 _ - .`, not starting with `.`. Every backend accepts exactly
/// these keys, so a key is also a safe file name. Letter case is kept, but a
/// backend on a case-insensitive filesystem may treat keys that differ only
/// in case as one entry: do not rely on case alone to tell keys apart.
pub fn check_cache_key(key: &str) -> Result<()> {
    let bad = |reason| {
        Err(CasError::BadCacheKey {
            key: key.to_string(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("it is empty");
    }
    if key.len() > CACHE_KEY_MAX {
        return bad("it is longer than 200 bytes");
    }
    if key.starts_with('.') {
        return bad("it starts with '.'");
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return bad("only A-Z, a-z, 0-9, '_', '-' and '.' are allowed");
    }
    Ok(())
}

/// Turns a page reader into a streaming listing: `page(after)` returns the
/// next hashes in ascending order strictly after `after` (from the start when
/// `None`); an empty page ends the listing. This is keyset pagination, the
/// natural way for a database backend to implement [`Store::hashes`].
pub fn paged_hashes<'a>(
    mut page: impl FnMut(Option<Hash>) -> Result<Vec<Hash>> + 'a,
) -> HashIter<'a> {
    let mut after: Option<Hash> = None;
    let mut buf = std::collections::VecDeque::new();
    let mut done = false;
    Box::new(std::iter::from_fn(move || {
        if buf.is_empty() && !done {
            match page(after) {
                Ok(v) if v.is_empty() => done = true,
                Ok(v) => buf.extend(v),
                Err(e) => {
                    done = true;
                    return Some(Err(e));
                }
            }
        }
        let h = buf.pop_front()?;
        after = Some(h);
        Some(Ok(h))
    }))
}

macro_rules! forward_store {
    ($ty:ty) => {
        impl<T: Store + ?Sized> Store for $ty {
            fn get(&self, hash: Hash) -> Result<Option<Node>> {
                (**self).get(hash)
            }
            fn get_many(&self, hashes: &[Hash]) -> Result<Vec<Option<Node>>> {
                (**self).get_many(hashes)
            }
            fn has(&self, hash: Hash) -> Result<bool> {
                (**self).has(hash)
            }
            fn has_many(&self, hashes: &[Hash]) -> Result<Vec<bool>> {
                (**self).has_many(hashes)
            }
            fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)> {
                (**self).insert(hash, node)
            }
            fn insert_many(&self, nodes: &[(Hash, Node)]) -> Result<Vec<(Node, bool)>> {
                (**self).insert_many(nodes)
            }
            fn checks_types(&self) -> bool {
                (**self).checks_types()
            }
            fn hashes(&self) -> HashIter<'_> {
                (**self).hashes()
            }
            fn by_type(&self, type_hash: Hash) -> HashIter<'_> {
                (**self).by_type(type_hash)
            }
            fn reindex(&self) -> Result<ReindexReport> {
                (**self).reindex()
            }
            fn remove(&self, hash: Hash) -> Result<bool> {
                (**self).remove(hash)
            }
            fn last_stored(&self, hash: Hash) -> Result<Option<u64>> {
                (**self).last_stored(hash)
            }
            fn remove_if_stale(&self, hash: Hash, cutoff: u64) -> Result<bool> {
                (**self).remove_if_stale(hash, cutoff)
            }
            fn strays(&self) -> StrayIter<'_> {
                (**self).strays()
            }
            fn remove_stray(&self, id: &str) -> Result<bool> {
                (**self).remove_stray(id)
            }
            fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
                (**self).cache_get(key)
            }
            fn cache_put(&self, key: &str, bytes: &[u8]) -> Result<()> {
                (**self).cache_put(key, bytes)
            }
            fn cache_remove(&self, key: &str) -> Result<bool> {
                (**self).cache_remove(key)
            }
        }
    };
}

forward_store!(Arc<T>);
forward_store!(Box<T>);
forward_store!(&T);

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

/// Hashes read per lock of a [`MemStore`] listing.
const MEM_PAGE: usize = 512;

/// An in-memory store, for tests and embedding.
#[derive(Debug, Default)]
pub struct MemStore {
    inner: Mutex<MemInner>,
}

#[derive(Debug, Default)]
struct MemInner {
    nodes: BTreeMap<Hash, Node>,
    index: BTreeMap<Hash, BTreeMap<Hash, ()>>,
    cache: BTreeMap<String, Vec<u8>>,
    /// When a node was stored again after its first store.
    restored: BTreeMap<Hash, u64>,
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

/// Up to [`MEM_PAGE`] keys of `set` after `after`, ascending.
fn page_after<V>(set: &BTreeMap<Hash, V>, after: Option<Hash>) -> Vec<Hash> {
    let range = match after {
        None => set.range(..),
        Some(a) => set.range((Bound::Excluded(a), Bound::Unbounded)),
    };
    range.take(MEM_PAGE).map(|(h, _)| *h).collect()
}

impl Store for MemStore {
    fn get(&self, hash: Hash) -> Result<Option<Node>> {
        Ok(self.lock().nodes.get(&hash).cloned())
    }

    fn get_many(&self, hashes: &[Hash]) -> Result<Vec<Option<Node>>> {
        let g = self.lock();
        Ok(hashes.iter().map(|h| g.nodes.get(h).cloned()).collect())
    }

    fn has(&self, hash: Hash) -> Result<bool> {
        Ok(self.lock().nodes.contains_key(&hash))
    }

    fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)> {
        let mut g = self.lock();
        if let Some(existing) = g.nodes.get(&hash).cloned() {
            g.restored.insert(hash, crate::node::now_ms());
            return Ok((existing, false));
        }
        g.nodes.insert(hash, node.clone());
        g.index.entry(node.type_hash).or_default().insert(hash, ());
        Ok((node.clone(), true))
    }

    fn hashes(&self) -> HashIter<'_> {
        // The lock is held for one page only, so the caller may use the
        // store (even remove nodes) while it iterates.
        paged_hashes(move |after| Ok(page_after(&self.lock().nodes, after)))
    }

    fn by_type(&self, type_hash: Hash) -> HashIter<'_> {
        paged_hashes(move |after| {
            Ok(self
                .lock()
                .index
                .get(&type_hash)
                .map(|set| page_after(set, after))
                .unwrap_or_default())
        })
    }

    fn reindex(&self) -> Result<ReindexReport> {
        let mut g = self.lock();
        let mut index: BTreeMap<Hash, BTreeMap<Hash, ()>> = BTreeMap::new();
        for (h, n) in &g.nodes {
            index.entry(n.type_hash).or_default().insert(*h, ());
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
        g.restored.remove(&hash);
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

    fn last_stored(&self, hash: Hash) -> Result<Option<u64>> {
        let g = self.lock();
        Ok(g.nodes.get(&hash).map(|n| {
            let again = g.restored.get(&hash).copied().unwrap_or(0);
            n.timestamp.max(again)
        }))
    }

    fn remove_if_stale(&self, hash: Hash, cutoff: u64) -> Result<bool> {
        // Decided and done under one lock: no re-store can slip in between.
        let mut g = self.lock();
        let Some(node) = g.nodes.get(&hash) else {
            return Ok(false);
        };
        let again = g.restored.get(&hash).copied().unwrap_or(0);
        if node.timestamp.max(again) >= cutoff {
            return Ok(false);
        }
        let type_hash = node.type_hash;
        g.nodes.remove(&hash);
        g.restored.remove(&hash);
        if let Some(set) = g.index.get_mut(&type_hash) {
            set.remove(&hash);
        }
        Ok(true)
    }

    fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        check_cache_key(key)?;
        Ok(self.lock().cache.get(key).cloned())
    }

    fn cache_put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        check_cache_key(key)?;
        self.lock().cache.insert(key.to_string(), bytes.to_vec());
        Ok(())
    }

    fn cache_remove(&self, key: &str) -> Result<bool> {
        check_cache_key(key)?;
        Ok(self.lock().cache.remove(key).is_some())
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
/// * `cache/<key>` — derived-data cache entries ([`Store::cache_get`]),
///   created on first use; safe to delete at any time.
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

/// One entry met while scanning `objects/`.
enum Scanned {
    Node(Hash),
    Stray(Stray),
}

impl FsStore {
    /// Opens (creating if needed) the store in `dir` (usually `<root>/cas`).
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        for sub in [dir.join("objects"), dir.join("index")] {
            private::create_dir_all(&sub).map_err(|e| CasError::io("create directory", &sub, e))?;
        }
        Ok(Self { dir })
    }

    /// The store's directory (for opening it again, not for reaching into it:
    /// the layout is the backend's business).
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

    fn cache_path(&self, key: &str) -> Result<PathBuf> {
        check_cache_key(key)?;
        Ok(self.dir.join("cache").join(key))
    }

    fn ensure_marker(&self, type_hash: Hash, hash: Hash) -> Result<bool> {
        let p = self.marker_path(type_hash, hash);
        if p.exists() {
            return Ok(false);
        }
        if let Some(parent) = p.parent() {
            private::create_dir_all(parent)
                .map_err(|e| CasError::io("create directory", parent, e))?;
        }
        // Markers carry no data; losing one to a crash is repaired by reindex.
        match private::open_options()
            .write(true)
            .create_new(true)
            .open(&p)
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(CasError::io("write", &p, e)),
        }
    }

    fn read_node(&self, hash: Hash, path: &Path) -> Result<Option<Node>> {
        let Some(bytes) = read_small(path)? else {
            return Ok(None);
        };
        let corrupt = |reason: String| CasError::Corrupt {
            hash,
            location: path.display().to_string(),
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

    /// Scans `objects/` one prefix directory at a time.
    fn scan(&self) -> Box<dyn Iterator<Item = Result<Scanned>> + '_> {
        let objects = self.dir.join("objects");
        let prefixes = match read_dir_sorted(&objects) {
            Ok(p) => p,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        Box::new(
            prefixes
                .into_iter()
                .filter(|p| !is_hidden(p))
                .flat_map(|prefix_dir| scan_prefix(&prefix_dir)),
        )
    }
}

/// Moves a node file's modification time to now: the node was stored
/// again, and garbage collection's grace period starts anew
/// ([`Store::last_stored`]). Best effort: a file this user may not touch
/// keeps its time, and the writer's guard still catches a removal.
fn freshen(path: &Path) {
    let result = fs::File::open(path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
    if let Err(e) = result {
        tracing::debug!(path = %path.display(), error = %e, "cannot freshen a node file");
    }
}

/// A file's modification time in milliseconds since the Unix epoch (0 if
/// the file system does not say).
fn mtime_ms(m: &fs::Metadata) -> u64 {
    m.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The entries of one entry of `objects/`.
fn scan_prefix(prefix_dir: &Path) -> Vec<Result<Scanned>> {
    let prefix = file_name(prefix_dir);
    let stray = |p: &Path, reason: &str| {
        Ok(Scanned::Stray(Stray {
            id: p.display().to_string(),
            reason: reason.to_string(),
        }))
    };
    if !is_prefix_dir(prefix_dir) {
        return vec![stray(
            prefix_dir,
            "not a directory named by the first 2 characters of a hash",
        )];
    }
    let files = match read_dir_sorted(prefix_dir) {
        Ok(f) => f,
        Err(e) => return vec![Err(e)],
    };
    files
        .into_iter()
        // A hidden file is a writer's temporary file: in flight, or left by a crash.
        .filter(|file| !is_hidden(file))
        .map(|file| match node_file_hash(&prefix, &file) {
            Some(h) => Ok(Scanned::Node(h)),
            None => stray(
                &file,
                "not named <last 11 characters of a canonical hash>.json",
            ),
        })
        .collect()
}

/// Whether an entry of `objects/` is a prefix directory (2-character name).
fn is_prefix_dir(p: &Path) -> bool {
    p.is_dir() && file_name(p).len() == 2
}

/// The hash a file in prefix directory `prefix` is named after, if any.
fn node_file_hash(prefix: &str, file: &Path) -> Option<Hash> {
    file_name(file)
        .strip_suffix(".json")
        .map(|stem| format!("{prefix}{stem}"))
        .filter(|full| Hash::is_cas_ref(full))
        .and_then(|full| full.parse::<Hash>().ok())
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

/// A node file's `type`, the rest skipped unparsed into values.
#[derive(serde::Deserialize)]
struct TypeOnly {
    #[serde(rename = "type")]
    type_hash: Hash,
}

/// Reads a whole file; `Ok(None)` if it is not there. Unlike `fs::read` (and
/// `File`'s own `read_to_end`), it does not ask the file's size first: node
/// files are small, and that is one system call less for every node read.
fn read_small(path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CasError::io("read", path, e)),
    };
    let mut bytes = Vec::with_capacity(READ_GUESS);
    // Through `take`, reading to the end uses no size hint (no `statx`).
    std::io::Read::read_to_end(&mut std::io::Read::take(file, u64::MAX), &mut bytes)
        .map_err(|e| CasError::io("read", path, e))?;
    Ok(Some(bytes))
}

/// Bytes [`read_small`] reserves before it reads: most nodes fit.
const READ_GUESS: usize = 8192;

/// How many times [`FsStore::insert`] tries to store a node whose file
/// another process keeps creating and removing.
const INSERT_TRIES: usize = 64;

/// Removes a file; `Ok(false)` if it was not there.
fn remove_if_present(path: &Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(CasError::io("remove", path, e)),
    }
}

impl Store for FsStore {
    fn get(&self, hash: Hash) -> Result<Option<Node>> {
        self.read_node(hash, &self.object_path(hash))
    }

    fn has(&self, hash: Hash) -> Result<bool> {
        let p = self.object_path(hash);
        match fs::metadata(&p) {
            Ok(m) => Ok(m.is_file()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(CasError::io("read", &p, e)),
        }
    }

    fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)> {
        let path = self.object_path(hash);
        let mut created_dir = false;
        // A node seen here can vanish before it is read again: a collection
        // with a short grace may remove it at any moment while no root
        // reaches it (docs/state.md, "Collecting beside running work").
        // Then it is simply absent again, and this writer stores it; the
        // epoch protocol, not this loop, decides whether a root may point
        // at it. Bounded so that a collector sweeping in a tight loop cannot
        // hold a writer forever.
        for _ in 0..INSERT_TRIES {
            match self.read_node(hash, &path) {
                Ok(Some(existing)) => {
                    // Heal an index entry lost to a crash between the two writes.
                    self.ensure_marker(existing.type_hash, hash)?;
                    freshen(&path);
                    return Ok((existing, false));
                }
                Ok(None) => {}
                Err(CasError::Corrupt { reason, .. }) => {
                    // Same name, same content by definition: replacing it repairs the store.
                    tracing::warn!(%hash, path = %path.display(), %reason, "replacing a corrupt node file");
                    atomic::write_atomic(&path, &Self::encode_file(node)?)?;
                    self.ensure_marker(node.type_hash, hash)?;
                    return Ok((node.clone(), true));
                }
                Err(e) => return Err(e),
            }
            if !created_dir && let Some(parent) = path.parent() {
                private::create_dir_all(parent)
                    .map_err(|e| CasError::io("create directory", parent, e))?;
                created_dir = true;
            }
            if atomic::create_new_atomic(&path, &Self::encode_file(node)?)? {
                self.ensure_marker(node.type_hash, hash)?;
                return Ok((node.clone(), true));
            }
            // Lost a race with another writer: the next turn reports the
            // winner's node, or stores ours if the winner's is gone already.
        }
        Err(CasError::io(
            "store",
            &path,
            std::io::Error::other(format!(
                "the node file kept disappearing while it was stored ({INSERT_TRIES} tries): is something removing files under the store?"
            )),
        ))
    }

    fn hashes(&self) -> HashIter<'_> {
        Box::new(self.scan().filter_map(|r| match r {
            Ok(Scanned::Node(h)) => Some(Ok(h)),
            Ok(Scanned::Stray(_)) => None,
            Err(e) => Some(Err(e)),
        }))
    }

    fn by_type(&self, type_hash: Hash) -> HashIter<'_> {
        let dir = self.dir.join("index").join(type_hash.to_string());
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Box::new(std::iter::empty()),
            Err(e) => {
                return Box::new(std::iter::once(Err(CasError::io(
                    "read directory",
                    &dir,
                    e,
                ))));
            }
        };
        // Straight from the directory, unsorted: one type can have millions
        // of nodes. Entries not named like a hash are not markers.
        Box::new(rd.filter_map(move |entry| match entry {
            Ok(e) => e.file_name().to_str()?.parse::<Hash>().ok().map(Ok),
            Err(e) => Some(Err(CasError::io("read directory", &dir, e))),
        }))
    }

    fn reindex(&self) -> Result<ReindexReport> {
        let mut report = ReindexReport::default();
        let mut type_of: BTreeMap<Hash, Hash> = BTreeMap::new();
        for h in self.hashes() {
            let h = h?;
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
                    None => !self.has(h)?,
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
        // Only the type is needed, to find the index marker: the payload is
        // not parsed into values nor hashed (a file that does not say its
        // type keeps its marker, which `reindex` drops).
        let type_hash = read_small(&path)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<TypeOnly>(&b).ok())
            .map(|t| t.type_hash);
        if !remove_if_present(&path)? {
            return Ok(false);
        }
        if let Some(t) = type_hash {
            remove_if_present(&self.marker_path(t, hash))?;
        }
        Ok(true)
    }

    fn last_stored(&self, hash: Hash) -> Result<Option<u64>> {
        // The file's modification time: set when it is written, moved
        // forward when the same node is stored again (`freshen`).
        let path = self.object_path(hash);
        match fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(mtime_ms(&m))),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CasError::io("read", &path, e)),
        }
    }

    fn strays(&self) -> StrayIter<'_> {
        Box::new(self.scan().filter_map(|r| match r {
            Ok(Scanned::Stray(s)) => Some(Ok(s)),
            Ok(Scanned::Node(_)) => None,
            Err(e) => Some(Err(e)),
        }))
    }

    fn remove_stray(&self, id: &str) -> Result<bool> {
        // Only what a scan would report right now: the id must name an
        // entry of `objects/` (or of one of its prefix directories) that is
        // not a node, a prefix directory or a writer's temporary file.
        let path = PathBuf::from(id);
        let objects = self.dir.join("objects");
        let Some(parent) = path.parent() else {
            return Ok(false);
        };
        // `x/..` has a parent but no file name: never let it through.
        let plain = path.file_name().is_some()
            && path
                .components()
                .all(|c| !matches!(c, Component::ParentDir | Component::CurDir));
        if !plain || is_hidden(&path) || fs::symlink_metadata(&path).is_err() {
            return Ok(false);
        }
        let stray = if parent == objects {
            !is_prefix_dir(&path)
        } else {
            parent.parent() == Some(objects.as_path())
                && is_prefix_dir(parent)
                && node_file_hash(&file_name(parent), &path).is_none()
        };
        if !stray {
            return Ok(false);
        }
        let meta = fs::symlink_metadata(&path).map_err(|e| CasError::io("read", &path, e))?;
        if meta.is_dir() {
            // A directory where a prefix directory cannot be: all of it is stray.
            fs::remove_dir_all(&path).map_err(|e| CasError::io("remove", &path, e))?;
            Ok(true)
        } else {
            remove_if_present(&path)
        }
    }

    fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.cache_path(key)?;
        match fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CasError::io("read", &path, e)),
        }
    }

    fn cache_put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let path = self.cache_path(key)?;
        let dir = self.dir.join("cache");
        private::create_dir_all(&dir).map_err(|e| CasError::io("create directory", &dir, e))?;
        // Renamed into place so readers never see half an entry, but not
        // fsynced: the cache is derived data, checked on every read, and an
        // entry lost or torn by a crash is simply rebuilt. Syncing would add
        // a disk flush to every step for nothing.
        let mut tmp = tempfile::Builder::new()
            .prefix(atomic::TEMP_PREFIX)
            .suffix(atomic::TEMP_SUFFIX)
            .tempfile_in(&dir)
            .map_err(|e| CasError::io("create a temporary file in", &dir, e))?;
        std::io::Write::write_all(&mut tmp, bytes)
            .map_err(|e| CasError::io("write", tmp.path(), e))?;
        tmp.persist(&path)
            .map_err(|e| CasError::io("rename into", &path, e.error))?;
        Ok(())
    }

    fn cache_remove(&self, key: &str) -> Result<bool> {
        remove_if_present(&self.cache_path(key)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// An accepted key is one plain path component on every platform.
        #[test]
        fn accepted_cache_keys_are_single_safe_file_names(key in "\\PC{0,40}") {
            if check_cache_key(&key).is_ok() {
                let comps: Vec<_> = Path::new(&key).components().collect();
                prop_assert_eq!(comps.len(), 1);
                prop_assert!(matches!(comps[0], Component::Normal(_)));
                prop_assert!(!key.starts_with('.'));
                prop_assert!(!key.contains(['/', '\\', ':']));
            }
        }

        /// Every key of the documented charset is accepted.
        #[test]
        fn documented_cache_keys_are_accepted(key in "[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}") {
            prop_assert!(check_cache_key(&key).is_ok());
        }
    }

    #[test]
    fn a_page_error_is_reported_once_and_ends_the_listing() {
        let mut calls = 0;
        let items: Vec<_> = paged_hashes(move |after| {
            calls += 1;
            match (calls, after) {
                (1, None) => Ok(vec![Hash::from_u64(1), Hash::from_u64(2)]),
                (2, Some(h)) if h == Hash::from_u64(2) => Err(CasError::NotFound(h)),
                _ => panic!("asked again after an error: call {calls}, after {after:?}"),
            }
        })
        .collect();
        assert_eq!(items.len(), 3);
        assert!(items[..2].iter().all(Result::is_ok));
        assert!(items[2].is_err());
    }

    fn ok<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    /// `remove` finds a node's index marker from the type its file names,
    /// without hashing it: a file whose content was altered still loses its
    /// marker with it; one that names no type leaves its marker to `reindex`.
    #[test]
    fn remove_takes_the_marker_named_by_the_file() {
        let tmp = ok(tempfile::tempdir());
        let store = ok(FsStore::open(tmp.path().join("cas")));
        let ty = Hash::from_u64(1);
        for (i, altered) in [
            (2, None),
            (3, Some("{\"type\":\"0000000000001\",\"payload\":9}")),
            (4, Some("{")),
        ] {
            let hash = Hash::from_u64(i);
            let node = Node {
                type_hash: ty,
                payload: serde_json::json!({ "x": i }),
                timestamp: 0,
            };
            ok(store.insert(hash, &node));
            if let Some(bytes) = altered {
                ok(fs::write(store.object_path(hash), bytes));
            }
            assert!(store.marker_path(ty, hash).exists());
            assert!(ok(store.remove(hash)));
            assert!(!store.object_path(hash).exists());
            assert_eq!(store.marker_path(ty, hash).exists(), i == 4, "node {i}");
            assert!(!ok(store.remove(hash)));
        }
    }

    /// Node files larger than the first read's guess read back whole.
    #[test]
    fn a_node_larger_than_the_read_guess_reads_back() {
        let tmp = ok(tempfile::tempdir());
        let store = ok(FsStore::open(tmp.path().join("cas")));
        let node = Node {
            type_hash: Hash::from_u64(1),
            payload: serde_json::json!({ "text": "x".repeat(3 * READ_GUESS + 5) }),
            timestamp: 0,
        };
        let hash = node.hash();
        ok(store.insert(hash, &node));
        assert_eq!(ok(store.get(hash)), Some(node));
        assert_eq!(ok(read_small(&tmp.path().join("absent"))), None);
    }

    /// Every directory and file the store creates is its owner's only
    /// (docs/state.md, "Secrets and file modes"), whatever the umask.
    #[cfg(unix)]
    #[test]
    fn what_the_store_creates_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path().join("root").join("cas");
        let store = FsStore::open(&dir).unwrap_or_else(|e| panic!("{e}"));
        let node = Node {
            type_hash: Hash::from_u64(1),
            payload: serde_json::json!({ "x": 1 }),
            timestamp: 0,
        };
        store
            .insert(Hash::from_u64(2), &node)
            .unwrap_or_else(|e| panic!("{e}"));
        store.cache_put("k", b"v").unwrap_or_else(|e| panic!("{e}"));
        let mut seen = 0;
        let mut stack = vec![tmp.path().join("root")];
        while let Some(p) = stack.pop() {
            let meta = fs::metadata(&p).unwrap_or_else(|e| panic!("{e}"));
            let mode = meta.permissions().mode() & 0o777;
            if meta.is_dir() {
                assert_eq!(mode, 0o700, "{}", p.display());
                for e in fs::read_dir(&p).unwrap_or_else(|e| panic!("{e}")) {
                    stack.push(e.unwrap_or_else(|e| panic!("{e}")).path());
                }
            } else {
                assert_eq!(mode, 0o600, "{}", p.display());
            }
            seen += 1;
        }
        // root, cas, objects, index, cache, the object's and the index
        // entry's directories, the object, the index entry, the cache entry.
        assert!(seen >= 10, "{seen}");
    }
}
