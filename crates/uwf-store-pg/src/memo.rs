//! What a process has read or written already, kept so it is not read
//! from the database again: nodes, and entries of the derived cache.
//!
//! A node never changes (its name is its content), so a node once read is
//! the node for as long as it exists. Garbage collection may remove it
//! from the database meanwhile, but only once nothing reachable refers to
//! it, and a removal made through this store forgets it here too. So a
//! read answered from memory is one the database would have given.
//! Presence (`has`) is never answered from here: a caller that decides
//! not to store a node because it is present must see the database.
//!
//! Derived-cache entries are data computed from nodes, checked by every
//! reader and safe to lose ([`uwf_cas::Store::cache_get`]): an entry kept
//! here that another process replaced or removed, or an absence kept here
//! that another process filled, costs a reader at most the slower way (it
//! reads the nodes), never a wrong answer. Absences are kept because a
//! thread's chain is looked up step by step backwards until an entry is
//! found (docs/state.md, "Derived cache"), and each next step of the same
//! thread asks again for the keys the last one found absent.
//!
//! Both are bounded in bytes and forget the oldest first, so a worker that
//! runs for days holds at most [`NODE_BYTES`] + [`CACHE_BYTES`].

use std::collections::{HashMap, VecDeque};
use std::hash::Hash as StdHash;
use std::sync::{Mutex, PoisonError};

use uwf_cas::{Hash, Node};

/// Bytes of node payloads kept (their size as stored).
pub(crate) const NODE_BYTES: usize = 24 << 20;

/// Bytes of derived-cache entries kept; an entry larger than a quarter of
/// it is not kept at all.
pub(crate) const CACHE_BYTES: usize = 8 << 20;

/// The size counted for an entry beyond its bytes (key, bookkeeping).
const OVERHEAD: usize = 64;

/// A map bounded in bytes that forgets its oldest entries first.
struct Bounded<K, V> {
    map: HashMap<K, (V, usize)>,
    order: VecDeque<K>,
    bytes: usize,
    limit: usize,
}

impl<K: Eq + StdHash + Clone, V: Clone> Bounded<K, V> {
    fn new(limit: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            limit,
        }
    }

    fn get(&self, k: &K) -> Option<V> {
        self.map.get(k).map(|(v, _)| v.clone())
    }

    fn put(&mut self, k: K, v: V, size: usize) {
        let size = size + OVERHEAD;
        if size > self.limit / 4 {
            self.forget(&k);
            return;
        }
        match self.map.insert(k.clone(), (v, size)) {
            Some((_, old)) => self.bytes = self.bytes - old + size,
            None => {
                self.bytes += size;
                self.order.push_back(k);
            }
        }
        while self.bytes > self.limit {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, s)) = self.map.remove(&oldest) {
                self.bytes -= s;
            }
        }
    }

    fn forget(&mut self, k: &K) {
        if let Some((_, s)) = self.map.remove(k) {
            self.bytes -= s;
            // Its place in `order` goes when it comes round (removing it
            // now would be a scan); a key put again meanwhile is counted
            // once more there, which only makes it go sooner. Places of
            // forgotten keys are dropped once they outnumber the kept.
            if self.order.len() > 2 * self.map.len() + 64 {
                let map = &self.map;
                self.order.retain(|k| map.contains_key(k));
            }
        }
    }
}

/// The memo of one store (shared by its clones).
pub(crate) struct Memo {
    nodes: Mutex<Bounded<Hash, Node>>,
    cache: Mutex<Bounded<String, Option<Vec<u8>>>>,
}

impl Memo {
    pub(crate) fn new() -> Self {
        Self::with_limits(NODE_BYTES, CACHE_BYTES)
    }

    pub(crate) fn with_limits(nodes: usize, cache: usize) -> Self {
        Memo {
            nodes: Mutex::new(Bounded::new(nodes)),
            cache: Mutex::new(Bounded::new(cache)),
        }
    }

    pub(crate) fn node(&self, hash: Hash) -> Option<Node> {
        self.nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&hash)
    }

    /// Keeps `node` (stored as `size` bytes).
    pub(crate) fn put_node(&self, hash: Hash, node: &Node, size: usize) {
        self.nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(hash, node.clone(), size);
    }

    pub(crate) fn forget_node(&self, hash: Hash) {
        self.nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .forget(&hash);
    }

    /// `Some(entry)` when known (`Some(None)`: known to be absent).
    pub(crate) fn cache_entry(&self, key: &str) -> Option<Option<Vec<u8>>> {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key.to_owned())
    }

    pub(crate) fn put_cache_entry(&self, key: &str, entry: Option<&[u8]>) {
        let size = entry.map_or(0, <[u8]>::len) + key.len();
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(key.to_owned(), entry.map(<[u8]>::to_vec), size);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn node(n: u64) -> Node {
        Node {
            type_hash: Hash::from_u64(1),
            payload: serde_json::json!({ "n": n }),
            timestamp: 1,
        }
    }

    #[test]
    fn the_oldest_go_first_and_the_bytes_stay_bounded() {
        let memo = Memo::with_limits(10 * (100 + OVERHEAD), 1 << 20);
        let nodes: Vec<Node> = (0..25).map(node).collect();
        for n in &nodes {
            memo.put_node(n.hash(), n, 100);
        }
        let kept: Vec<bool> = nodes
            .iter()
            .map(|n| memo.node(n.hash()).is_some())
            .collect();
        assert_eq!(kept.iter().filter(|k| **k).count(), 10);
        assert!(kept[15..].iter().all(|k| *k), "{kept:?}");
        assert_eq!(memo.node(nodes[24].hash()), Some(nodes[24].clone()));
        memo.forget_node(nodes[24].hash());
        assert_eq!(memo.node(nodes[24].hash()), None);
        let bytes = memo.nodes.lock().unwrap().bytes;
        assert_eq!(bytes, 9 * (100 + OVERHEAD));
    }

    #[test]
    fn absences_are_kept_and_large_entries_are_not() {
        let memo = Memo::with_limits(1 << 20, 4000);
        assert_eq!(memo.cache_entry("k"), None);
        memo.put_cache_entry("k", None);
        assert_eq!(memo.cache_entry("k"), Some(None));
        memo.put_cache_entry("k", Some(b"v"));
        assert_eq!(memo.cache_entry("k"), Some(Some(b"v".to_vec())));
        // Over a quarter of the bound: not kept, and what was kept goes.
        memo.put_cache_entry("k", Some(&[0u8; 2000]));
        assert_eq!(memo.cache_entry("k"), None);
        let bytes = memo.cache.lock().unwrap().bytes;
        assert_eq!(bytes, 0);
    }
}
