//! [`uwf_cas::Store`] on PostgreSQL: the `uwf_nodes` and `uwf_cache`
//! tables.
//!
//! A node row keeps the payload as the exact JSON bytes the filesystem
//! store writes for it (`serde_json`, keys in document order), so a node
//! has the same hash and bytes in both backends and can be copied between
//! them unchanged. Every read checks that the row still hashes to its
//! name. The by-type listing is an index of the table, so it can never
//! disagree with the nodes, and there are no strays (CHECK constraints
//! refuse rows not named by a hash).

use std::collections::{BTreeSet, HashMap};

use postgres::Row;
use uwf_cas::{
    CasError, Hash, HashIter, Node, ReindexReport, Result, Store, check_cache_key, paged_hashes,
};

use crate::PgStore;

/// Rows read per page of a listing.
const PAGE: i64 = 1000;

impl PgStore {
    /// A node from its row (`hash, type_hash, payload, stored_at`),
    /// checked against `hash`, and the size of its payload as stored.
    fn sized_node_from_row(&self, hash: Hash, row: &Row) -> Result<(Node, usize)> {
        let corrupt = |reason: String| CasError::Corrupt {
            hash,
            location: format!("{} (table uwf_nodes)", self.url()),
            reason,
        };
        let type_text: String = row
            .try_get(1)
            .map_err(|e| corrupt(format!("type column: {e}")))?;
        let type_hash: Hash = type_text
            .parse()
            .map_err(|e| corrupt(format!("type {type_text:?}: {e}")))?;
        let payload: &[u8] = row
            .try_get(2)
            .map_err(|e| corrupt(format!("payload column: {e}")))?;
        let size = payload.len();
        let payload = serde_json::from_slice(payload)
            .map_err(|e| corrupt(format!("payload is not JSON: {e}")))?;
        let stored_at: i64 = row
            .try_get(3)
            .map_err(|e| corrupt(format!("stored_at column: {e}")))?;
        let timestamp =
            u64::try_from(stored_at).map_err(|_| corrupt(format!("stored_at {stored_at}")))?;
        let node = Node {
            type_hash,
            payload,
            timestamp,
        };
        let actual = node.hash();
        if actual != hash {
            return Err(corrupt(format!("content hashes to {actual}")));
        }
        Ok((node, size))
    }

    /// A node from its row, checked against `hash`.
    fn node_from_row(&self, hash: Hash, row: &Row) -> Result<Node> {
        self.sized_node_from_row(hash, row).map(|(n, _)| n)
    }

    /// A node from its row, checked, and kept in the memo.
    fn remembered(&self, hash: Hash, row: &Row) -> Result<Node> {
        let (node, size) = self.sized_node_from_row(hash, row)?;
        self.inner().memo.put_node(hash, &node, size);
        Ok(node)
    }

    fn parse_hash(&self, text: &str) -> Result<Hash> {
        text.parse::<Hash>()
            .map_err(|e| CasError::from(self.corrupt(format!("node name {text:?}"), e.to_string())))
    }

    /// One page of a listing: hashes after `after`, ascending.
    fn page(&self, type_hash: Option<Hash>, after: Option<Hash>) -> Result<Vec<Hash>> {
        let mut c = self.read_conn()?;
        let after = after.map(|h| h.to_string());
        let rows = match type_hash {
            None => c.query(
                "SELECT hash FROM uwf_nodes WHERE ($1::text IS NULL OR hash > $1) \
                 ORDER BY hash LIMIT $2",
                &[&after, &PAGE],
            ),
            Some(t) => c.query(
                "SELECT hash FROM uwf_nodes WHERE type_hash = $1 AND ($2::text IS NULL OR hash > $2) \
                 ORDER BY hash LIMIT $3",
                &[&t.to_string(), &after, &PAGE],
            ),
        }
        .map_err(self.err("list nodes"))?;
        rows.iter()
            .map(|r| self.parse_hash(&r.get::<_, String>(0)))
            .collect()
    }

    fn encode_payload(node: &Node) -> Result<Vec<u8>> {
        serde_json::to_vec(&node.payload).map_err(|e| CasError::UnsupportedSchema {
            reason: format!("payload cannot be serialized: {e}"),
        })
    }
}

/// Stores a node unless present. Storing a present node again moves
/// `fresh_at`: garbage collection's grace counts from it
/// (Store::last_stored). Returns whether the row is new, its first
/// timestamp, and whether it holds exactly these bytes (then it is this
/// node: same bytes, same hash, and need not be read again).
const INSERT_NODE: &str = "INSERT INTO uwf_nodes (hash, type_hash, payload, stored_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (hash) \
     DO UPDATE SET fresh_at = excluded.stored_at \
     RETURNING xmax = 0, stored_at, \
         (uwf_nodes.type_hash = $2 AND uwf_nodes.payload = $3)";

/// [`INSERT_NODE`] for several nodes in one statement (one round trip,
/// one autocommitted transaction): the rows come from arrays, and each
/// returned row names its node, since `RETURNING` keeps no order. The
/// hashes must be distinct (one row may be touched once per statement).
const INSERT_NODES: &str = "WITH input (hash, type_hash, payload, stored_at) AS \
         (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int8[])) \
     INSERT INTO uwf_nodes (hash, type_hash, payload, stored_at) \
     SELECT hash, type_hash, payload, stored_at FROM input ON CONFLICT (hash) \
     DO UPDATE SET fresh_at = excluded.stored_at \
     RETURNING uwf_nodes.hash, xmax = 0, uwf_nodes.stored_at, \
         (SELECT uwf_nodes.type_hash = i.type_hash AND uwf_nodes.payload = i.payload \
          FROM input i WHERE i.hash = uwf_nodes.hash)";

fn ms(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

impl Store for PgStore {
    fn get(&self, hash: Hash) -> Result<Option<Node>> {
        if let Some(node) = self.inner().memo.node(hash) {
            return Ok(Some(node));
        }
        let row = self
            .read_conn()?
            .query_opt(
                "SELECT hash, type_hash, payload, stored_at FROM uwf_nodes WHERE hash = $1",
                &[&hash.to_string()],
            )
            .map_err(self.err("read a node"))?;
        row.map(|r| self.remembered(hash, &r)).transpose()
    }

    fn get_many(&self, hashes: &[Hash]) -> Result<Vec<Option<Node>>> {
        let mut found: HashMap<Hash, Node> = HashMap::with_capacity(hashes.len());
        let mut wanted: Vec<String> = Vec::new();
        for h in hashes {
            match self.inner().memo.node(*h) {
                Some(n) => {
                    found.insert(*h, n);
                }
                None => wanted.push(h.to_string()),
            }
        }
        if !wanted.is_empty() {
            let rows = self
                .read_conn()?
                .query(
                    "SELECT hash, type_hash, payload, stored_at FROM uwf_nodes WHERE hash = ANY($1)",
                    &[&wanted],
                )
                .map_err(self.err("read nodes"))?;
            for r in &rows {
                let h = self.parse_hash(&r.get::<_, String>(0))?;
                found.insert(h, self.remembered(h, r)?);
            }
        }
        Ok(hashes.iter().map(|h| found.get(h).cloned()).collect())
    }

    fn has(&self, hash: Hash) -> Result<bool> {
        let row = self
            .read_conn()?
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM uwf_nodes WHERE hash = $1)",
                &[&hash.to_string()],
            )
            .map_err(self.err("look for a node"))?;
        Ok(row.get(0))
    }

    fn has_many(&self, hashes: &[Hash]) -> Result<Vec<bool>> {
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<String> = hashes.iter().map(ToString::to_string).collect();
        let rows = self
            .read_conn()?
            .query(
                "SELECT hash FROM uwf_nodes WHERE hash = ANY($1)",
                &[&wanted],
            )
            .map_err(self.err("look for nodes"))?;
        let found: BTreeSet<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
        Ok(wanted.iter().map(|h| found.contains(h)).collect())
    }

    fn insert_many(&self, nodes: &[(Hash, Node)]) -> Result<Vec<(Node, bool)>> {
        if nodes.len() < 2 {
            return nodes.iter().map(|(h, n)| self.insert(*h, n)).collect();
        }
        let payloads = nodes
            .iter()
            .map(|(_, n)| Self::encode_payload(n))
            .collect::<Result<Vec<_>>>()?;
        // Twice the same node in one batch: stored once, answered for both.
        let distinct: BTreeSet<Hash> = nodes.iter().map(|(h, _)| *h).collect();
        if distinct.len() != nodes.len() {
            return nodes.iter().map(|(h, n)| self.insert(*h, n)).collect();
        }
        // One statement: one round trip and one commit (one WAL flush) for
        // the batch, not one each, which is most of what storing a step's
        // nodes costs with `synchronous_commit` on.
        let hashes: Vec<String> = nodes.iter().map(|(h, _)| h.to_string()).collect();
        let types: Vec<String> = nodes.iter().map(|(_, n)| n.type_hash.to_string()).collect();
        let times: Vec<i64> = nodes.iter().map(|(_, n)| ms(n.timestamp)).collect();
        let returned = self
            .conn()?
            .with_prepared(INSERT_NODES, |client, statement| {
                client.query(statement, &[&hashes, &types, &payloads, &times])
            })
            .map_err(self.err("store nodes"))?;
        let mut by_hash: HashMap<String, (bool, i64, bool)> = returned
            .iter()
            .map(|r| {
                let same: Option<bool> = r.get(3);
                (
                    r.get::<_, String>(0),
                    (r.get(1), r.get(2), same.unwrap_or(false)),
                )
            })
            .collect();
        let rows = hashes
            .iter()
            .map(|h| {
                by_hash.remove(h).ok_or_else(|| CasError::Backend {
                    backend: "postgres",
                    kind: uwf_cas::StoreErrorKind::Io,
                    message: format!("the database did not return node {h} it was given"),
                    source: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        nodes
            .iter()
            .zip(payloads)
            .zip(rows)
            .map(|(((hash, node), payload), (created, stored_at, same))| {
                if created {
                    self.inner().memo.put_node(*hash, node, payload.len());
                    return Ok((node.clone(), true));
                }
                if same && let Ok(timestamp) = u64::try_from(stored_at) {
                    let existing = Node {
                        timestamp,
                        ..node.clone()
                    };
                    self.inner().memo.put_node(*hash, &existing, payload.len());
                    return Ok((existing, false));
                }
                // Other bytes under this name: `insert` decides, as for
                // one node.
                self.insert(*hash, node)
            })
            .collect()
    }

    fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)> {
        let payload = Self::encode_payload(node)?;
        let name = hash.to_string();
        let type_hash = node.type_hash.to_string();
        // A node removed between our two statements makes us go round again.
        for _ in 0..3 {
            // Storing a present node again moves `fresh_at`: garbage
            // collection's grace counts from it (Store::last_stored).
            // The row's first timestamp comes back, and whether the row
            // holds exactly these bytes: then it is this node (same bytes,
            // same hash) and need not be read again.
            let row = self
                .conn()?
                .query_one(
                    INSERT_NODE,
                    &[&name, &type_hash, &payload, &ms(node.timestamp)],
                )
                .map_err(self.err("store a node"))?;
            let (created, stored_at, same): (bool, i64, bool) =
                (row.get(0), row.get(1), row.get(2));
            if created {
                self.inner().memo.put_node(hash, node, payload.len());
                return Ok((node.clone(), true));
            }
            if same && let Ok(timestamp) = u64::try_from(stored_at) {
                let existing = Node {
                    timestamp,
                    ..node.clone()
                };
                self.inner().memo.put_node(hash, &existing, payload.len());
                return Ok((existing, false));
            }
            // Other bytes under this name (a row written by another
            // encoder, or damaged): the row as stored decides.
            self.inner().memo.forget_node(hash);
            match self.get(hash) {
                Ok(Some(existing)) => return Ok((existing, false)),
                Ok(None) => continue,
                Err(CasError::Corrupt { reason, .. }) => {
                    // Same name, same content by definition: replacing it
                    // repairs the store.
                    tracing::warn!(%hash, %reason, store = self.url(), "replacing a corrupt node row");
                    self.conn()?
                        .execute(
                            "UPDATE uwf_nodes SET type_hash = $2, payload = $3, stored_at = $4 \
                             WHERE hash = $1",
                            &[&name, &type_hash, &payload, &ms(node.timestamp)],
                        )
                        .map_err(self.err("repair a node"))?;
                    return Ok((node.clone(), true));
                }
                Err(e) => return Err(e),
            }
        }
        Err(self
            .corrupt(
                format!("node {hash}"),
                "it keeps disappearing while being stored",
            )
            .into())
    }

    fn hashes(&self) -> HashIter<'_> {
        paged_hashes(move |after| self.page(None, after))
    }

    fn by_type(&self, type_hash: Hash) -> HashIter<'_> {
        paged_hashes(move |after| self.page(Some(type_hash), after))
    }

    fn reindex(&self) -> Result<ReindexReport> {
        // The by-type index is a database index: nothing to rebuild. Read
        // every node (a page at a time) to report what is unreadable.
        let mut report = ReindexReport::default();
        let mut types = BTreeSet::new();
        let mut after: Option<String> = None;
        loop {
            let rows = self
                .conn()?
                .query(
                    "SELECT hash, type_hash, payload, stored_at FROM uwf_nodes \
                     WHERE ($1::text IS NULL OR hash > $1) ORDER BY hash LIMIT $2",
                    &[&after, &PAGE],
                )
                .map_err(self.err("read nodes"))?;
            let Some(last) = rows.last() else { break };
            after = Some(last.get(0));
            for r in &rows {
                let h = self.parse_hash(&r.get::<_, String>(0))?;
                match self.node_from_row(h, r) {
                    Ok(n) => {
                        report.nodes += 1;
                        types.insert(n.type_hash);
                    }
                    Err(CasError::Corrupt { .. }) => report.unreadable.push(h),
                    Err(e) => return Err(e),
                }
            }
        }
        report.types = types.len();
        Ok(report)
    }

    fn remove(&self, hash: Hash) -> Result<bool> {
        let n = self
            .conn()?
            .execute(
                "DELETE FROM uwf_nodes WHERE hash = $1",
                &[&hash.to_string()],
            )
            .map_err(self.err("remove a node"))?;
        self.inner().memo.forget_node(hash);
        Ok(n == 1)
    }

    fn last_stored(&self, hash: Hash) -> Result<Option<u64>> {
        let row = self
            .conn()?
            .query_opt(
                "SELECT GREATEST(stored_at, COALESCE(fresh_at, 0)) FROM uwf_nodes WHERE hash = $1",
                &[&hash.to_string()],
            )
            .map_err(self.err("read a node's store time"))?;
        Ok(row.map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
    }

    fn remove_if_stale(&self, hash: Hash, cutoff: u64) -> Result<bool> {
        // One statement: a concurrent store again either commits first (and
        // the row no longer matches) or waits for this delete and inserts
        // the node anew.
        let n = self
            .conn()?
            .execute(
                "DELETE FROM uwf_nodes WHERE hash = $1 \
                 AND GREATEST(stored_at, COALESCE(fresh_at, 0)) < $2",
                &[&hash.to_string(), &ms(cutoff)],
            )
            .map_err(self.err("remove a node"))?;
        if n == 1 {
            self.inner().memo.forget_node(hash);
        }
        Ok(n == 1)
    }

    fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        check_cache_key(key)?;
        if let Some(entry) = self.inner().memo.cache_entry(key) {
            return Ok(entry);
        }
        let row = self
            .read_conn()?
            .query_opt("SELECT value FROM uwf_cache WHERE key = $1", &[&key])
            .map_err(self.err("read a cache entry"))?;
        let entry: Option<Vec<u8>> = row.map(|r| r.get(0));
        self.inner().memo.put_cache_entry(key, entry.as_deref());
        Ok(entry)
    }

    fn cache_put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        check_cache_key(key)?;
        self.conn()?
            .execute(
                "INSERT INTO uwf_cache (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&key, &bytes],
            )
            .map_err(self.err("write a cache entry"))?;
        self.inner().memo.put_cache_entry(key, Some(bytes));
        Ok(())
    }

    fn cache_remove(&self, key: &str) -> Result<bool> {
        check_cache_key(key)?;
        // Known absent (read or removed by this process): an entry another
        // process put since is derived data, safe to keep (memo.rs).
        if self.inner().memo.cache_entry(key) == Some(None) {
            return Ok(false);
        }
        let n = self
            .conn()?
            .execute("DELETE FROM uwf_cache WHERE key = $1", &[&key])
            .map_err(self.err("remove a cache entry"))?;
        self.inner().memo.put_cache_entry(key, None);
        Ok(n == 1)
    }
}
