//! The typed store.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use jsonschema::Validator;
use serde::Serialize;
use serde_json::Value;
use uwf_util::redact::Redactor;

use crate::error::{CasError, Result};
use crate::{FsStore, Hash, Node, Ref, Store, Stray, cbor, node, refs, schema};

/// Hashes of the schemas of the nodes uwf itself writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolTypes {
    /// The meta-schema (type of every schema node).
    pub meta: Hash,
    /// The Workflow schema.
    pub workflow: Hash,
    /// The StartNode schema.
    pub start_node: Hash,
    /// The StepNode schema.
    pub step_node: Hash,
}

/// The result of a put.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The node's hash.
    pub hash: Hash,
    /// The node as stored (with the first timestamp if it already existed).
    pub node: Node,
    /// Whether this put created it.
    pub created: bool,
}

/// `value` as the payload of a node of type `type_hash`; a value that
/// cannot be serialized is an invalid payload.
fn serialized<T: Serialize>(type_hash: Hash, value: &T) -> Result<Value> {
    serde_json::to_value(value).map_err(|e| CasError::Invalid {
        type_hash,
        title: type_hash.to_string(),
        violations: vec![crate::Violation {
            path: String::new(),
            message: e.to_string(),
        }],
    })
}

/// A node checked and named but not stored yet ([`Cas::pending`]): its
/// payload redacted and canonical, its hash known, so that nodes which
/// name each other can be stored together ([`Cas::put_pending`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    hash: Hash,
    node: Node,
}

impl Pending {
    /// The hash the node will be stored under.
    pub fn hash(&self) -> Hash {
        self.hash
    }

    /// The node (type, payload, and the time of this put).
    pub fn node(&self) -> &Node {
        &self.node
    }
}

/// A schema node, as listed by [`Cas::schemas`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaEntry {
    /// The schema's hash (the type hash of its nodes).
    pub hash: Hash,
    /// Its `title`, if any.
    pub title: Option<String>,
}

/// One node reached by [`Cas::walk`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WalkEntry {
    /// The node.
    pub hash: Hash,
    /// Its type; `None` when the node is missing.
    #[serde(rename = "type")]
    pub type_hash: Option<Hash>,
    /// Distance from the root (the root is 0).
    pub depth: usize,
    /// True when a reference points at a node that is not in the store.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

/// A problem found by [`Cas::verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum VerifyIssue {
    /// A stored node that does not hash to its name or does not parse.
    Corrupt {
        /// The hash it is stored under.
        hash: Hash,
        /// Where the damaged copy is, for people (the file, for the
        /// filesystem store).
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// An entry of the store that is not a node (for the filesystem store,
    /// a file in the object directory not named like a node).
    Stray {
        /// The backend's identifier of the entry (the file, for the
        /// filesystem store); [`Store::remove_stray`] takes it.
        id: String,
        /// Why it is not a node.
        reason: String,
    },
    /// A node whose type is missing, not a schema, or that fails its schema.
    Invalid {
        /// The node.
        hash: Hash,
        /// Why.
        reason: String,
    },
    /// A reference to a node that is not in the store.
    Dangling {
        /// The referencing node.
        from: Hash,
        /// Where in its payload.
        path: String,
        /// The missing node.
        hash: Hash,
    },
}

/// What [`Cas::verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Nodes checked.
    pub nodes: usize,
    /// Every problem found; empty means the store is sound.
    pub issues: Vec<VerifyIssue>,
}

impl VerifyReport {
    /// True if no problem was found.
    pub fn is_ok(&self) -> bool {
        self.issues.is_empty()
    }
}

/// Options of [`Cas::gc`].
#[derive(Debug, Clone, Copy, Default)]
pub struct GcOptions {
    /// Report what would be removed, remove nothing.
    pub dry_run: bool,
    /// Keep unreachable nodes first stored less than this many milliseconds
    /// ago: an agent that is still running has written nodes nothing
    /// references yet.
    pub grace_ms: u64,
}

/// What [`Cas::gc`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    /// Whether anything was actually removed.
    pub dry_run: bool,
    /// Nodes in the store.
    pub nodes: usize,
    /// Nodes reachable from the roots (schemas included).
    pub reachable: usize,
    /// Unreachable nodes removed (or, with `dry_run`, that would be).
    pub swept: Vec<Hash>,
    /// Unreachable nodes kept because they are younger than the grace period.
    pub recent: usize,
}

/// What the mark phase of a collection found ([`Cas::gc_plan`]).
#[derive(Debug, Clone)]
pub struct GcPlan {
    report: GcReport,
    stale: Vec<Hash>,
    cutoff: u64,
}

impl GcPlan {
    /// The unreachable nodes last stored before the grace period: what
    /// [`Cas::gc_sweep`] removes if they are still stale then.
    pub fn stale(&self) -> &[Hash] {
        &self.stale
    }

    /// Whether the collection only reports.
    pub fn dry_run(&self) -> bool {
        self.report.dry_run
    }
}

/// The typed, validated store. Cheap to share across threads.
///
/// Generic over its backend; the default, `Cas` alone, is
/// `Cas<Arc<dyn Store>>`: any backend behind the [`Store`] trait, chosen at
/// run time ([`Cas::open`] for the filesystem, [`Cas::with_store`] for any
/// other).
pub struct Cas<S: Store = Arc<dyn Store>> {
    store: S,
    types: ProtocolTypes,
    /// Compiled on first use: most processes never store a schema, and
    /// compiling the meta-schema is the bulk of opening a store.
    meta_validator: Arc<std::sync::OnceLock<Arc<Validator>>>,
    validators: Arc<Mutex<HashMap<Hash, Arc<Validator>>>>,
    /// Cuts secrets out of the strings of every payload [`Cas::put`]
    /// stores ([`Cas::with_redactor`]); `None`: stored as given.
    redactor: Option<Arc<Redactor>>,
}

/// A clone shares its store and its compiled validators with the
/// original (a relay checks what an agent stores with the engine's).
impl<S: Store + Clone> Clone for Cas<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            types: self.types,
            meta_validator: Arc::clone(&self.meta_validator),
            validators: Arc::clone(&self.validators),
            redactor: self.redactor.clone(),
        }
    }
}

impl<S: Store> std::fmt::Debug for Cas<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cas")
            .field("store", &self.store)
            .field("types", &self.types)
            .finish()
    }
}

impl Cas {
    /// Opens the filesystem store of a storage root (`<root>/cas`), creating
    /// it if needed, and registers the built-in schemas.
    pub fn open(root: &Path) -> Result<Self> {
        Self::with_store(Arc::new(FsStore::open(root.join("cas"))?))
    }

    /// Wraps any backend chosen at run time (a `Box<dyn Store>` converts
    /// with `Arc::from`); same bootstrap as [`new`](Cas::new).
    pub fn with_store(store: Arc<dyn Store>) -> Result<Self> {
        Self::new(store)
    }
}

impl<S: Store> Cas<S> {
    /// Wraps a backend, bootstrapping the meta-schema and registering the
    /// Workflow, StartNode and StepNode schemas (no writes when present).
    pub fn new(store: S) -> Result<Self> {
        let meta_payload = schema::meta_schema();
        let meta = node::self_hash(&meta_payload);
        let protocol = [
            uwf_protocol::schemas::workflow(),
            uwf_protocol::schemas::start_node(),
            uwf_protocol::schemas::step_node(),
        ];
        let hashes = [
            meta,
            node::hash_typed(meta, &protocol[0]),
            node::hash_typed(meta, &protocol[1]),
            node::hash_typed(meta, &protocol[2]),
        ];
        // One question for the four (a round trip on a networked store,
        // made by every process that opens one).
        let present = store.has_many(&hashes)?;
        if !present.first().copied().unwrap_or(false) {
            store.insert(
                meta,
                &Node {
                    type_hash: meta,
                    payload: meta_payload,
                    timestamp: node::now_ms(),
                },
            )?;
        }
        let mut cas = Self {
            store,
            types: ProtocolTypes {
                meta,
                workflow: hashes[1],
                start_node: hashes[2],
                step_node: hashes[3],
            },
            meta_validator: Arc::new(std::sync::OnceLock::new()),
            validators: Arc::new(Mutex::new(HashMap::new())),
            redactor: None,
        };
        let mut stored = [hashes[1], hashes[2], hashes[3]];
        for (i, payload) in protocol.into_iter().enumerate() {
            if !present.get(i + 1).copied().unwrap_or(false) {
                stored[i] = cas.put_schema(payload)?.hash;
            }
        }
        [
            cas.types.workflow,
            cas.types.start_node,
            cas.types.step_node,
        ] = stored;
        Ok(cas)
    }

    /// How many schemas this `Cas` (and its clones) compiled and keeps,
    /// the meta-schema included: none in an agent whose store
    /// [checks types](Store::checks_types) for it.
    pub fn compiled_schemas(&self) -> usize {
        self.validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
            + usize::from(self.meta_validator.get().is_some())
    }

    /// The compiled meta-schema.
    fn meta_validator(&self) -> Result<&Arc<Validator>> {
        if let Some(v) = self.meta_validator.get() {
            return Ok(v);
        }
        let compiled = schema::compile(&schema::meta_schema()).map_err(|reason| {
            CasError::UnsupportedSchema {
                reason: format!("built-in meta-schema: {reason}"),
            }
        })?;
        Ok(self.meta_validator.get_or_init(|| compiled))
    }

    /// Cuts the secrets `redactor` knows out of every string of every
    /// payload stored from now on with [`put`](Self::put) or
    /// [`put_value`](Self::put_value), object keys included, before it is
    /// validated and hashed: what agents store never holds a secret
    /// (docs/state.md, "Secrets and file modes"). Schemas
    /// ([`put_schema`](Self::put_schema)) are stored as given.
    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = (!redactor.is_empty()).then_some(redactor);
        self
    }

    /// The redactor given with [`with_redactor`](Self::with_redactor), if any.
    pub fn redactor(&self) -> Option<&Redactor> {
        self.redactor.as_deref()
    }

    /// The backend (for its listings and its derived-data cache,
    /// [`Store::cache_get`] and friends).
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Hashes of the meta-schema and the protocol schemas.
    pub fn types(&self) -> ProtocolTypes {
        self.types
    }

    /// Reads a node; [`CasError::NotFound`] if absent.
    pub fn get(&self, hash: Hash) -> Result<Node> {
        self.store.get(hash)?.ok_or(CasError::NotFound(hash))
    }

    /// Reads a node if present.
    pub fn try_get(&self, hash: Hash) -> Result<Option<Node>> {
        self.store.get(hash)
    }

    /// Whether a node is present.
    pub fn has(&self, hash: Hash) -> Result<bool> {
        self.store.has(hash)
    }

    /// Registers a JSON Schema as a type. Rejects schemas outside the
    /// supported subset with the reason (see `docs/cas.md`).
    ///
    /// A schema already in the store is returned as it is: it was checked
    /// when it was stored, and the same content has the same hash. So an
    /// agent that registers its answer schema on every run
    /// (`uwf-agent-kit`) reads one node instead of compiling uwf's
    /// meta-schema (docs/performance.md, "Starting an agent").
    pub fn put_schema(&self, mut payload: Value) -> Result<Stored> {
        cbor::canonicalize(&mut payload);
        let hash = node::hash_node(self.types.meta, &payload);
        if let Some(node) = self.store.get(hash)?
            && node.type_hash == self.types.meta
        {
            return Ok(Stored {
                hash,
                node,
                created: false,
            });
        }
        if !self.store.checks_types() {
            let compiled = schema::check_subset_compiled(self.meta_validator()?, &payload)?;
            // The check compiled the schema: keep it for the nodes stored
            // against it next (compiling is most of what storing one costs).
            self.validators
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(hash, compiled);
        }
        self.insert(self.types.meta, payload)
    }

    /// Stores `payload` as a node of type `type_hash` after validating it
    /// against that schema. Storing existing content again is a no-op that
    /// returns the first node. With a [redactor](Self::with_redactor), its
    /// secrets are cut out of the payload's strings first.
    pub fn put(&self, type_hash: Hash, mut payload: Value) -> Result<Stored> {
        if type_hash == self.types.meta {
            return self.put_schema(payload);
        }
        if let Some(redactor) = &self.redactor {
            redact_strings(redactor, &mut payload);
        }
        cbor::canonicalize(&mut payload);
        if !self.store.checks_types() {
            self.validate(type_hash, &payload)?;
        }
        self.insert(type_hash, payload)
    }

    /// What [`put`](Self::put) does before it stores: redacts and
    /// canonicalises `payload` and checks it against its type (a schema is
    /// checked against the supported subset), unless the store
    /// [checks types](Store::checks_types) itself, and names it. Nothing
    /// is stored until [`put_pending`](Self::put_pending).
    pub fn pending(&self, type_hash: Hash, mut payload: Value) -> Result<Pending> {
        if type_hash == self.types.meta {
            cbor::canonicalize(&mut payload);
            if !self.store.checks_types() {
                schema::check_subset(self.meta_validator()?, &payload)?;
            }
        } else {
            if let Some(redactor) = &self.redactor {
                redact_strings(redactor, &mut payload);
            }
            cbor::canonicalize(&mut payload);
            if !self.store.checks_types() {
                self.validate(type_hash, &payload)?;
            }
        }
        Ok(Pending {
            hash: node::hash_node(type_hash, &payload),
            node: Node {
                type_hash,
                payload,
                timestamp: node::now_ms(),
            },
        })
    }

    /// [`pending`](Self::pending) of `value` serialized.
    pub fn pending_value<T: Serialize>(&self, type_hash: Hash, value: &T) -> Result<Pending> {
        self.pending(type_hash, serialized(type_hash, value)?)
    }

    /// Stores nodes made by [`pending`](Self::pending) together
    /// ([`Store::insert_many`]: one round trip and one transaction on a
    /// networked store, one commit to wait for instead of one each), in
    /// order; one [`Stored`] each.
    pub fn put_pending(&self, nodes: Vec<Pending>) -> Result<Vec<Stored>> {
        let items: Vec<(Hash, Node)> = nodes.into_iter().map(|p| (p.hash, p.node)).collect();
        let stored = self.store.insert_many(&items)?;
        if stored.len() != items.len() {
            return Err(CasError::Backend {
                backend: "store",
                kind: crate::StoreErrorKind::Io,
                message: format!(
                    "stored {} nodes when {} were given",
                    stored.len(),
                    items.len()
                ),
                source: None,
            });
        }
        Ok(items
            .iter()
            .zip(stored)
            .map(|((hash, _), (node, created))| Stored {
                hash: *hash,
                node,
                created,
            })
            .collect())
    }

    /// Serializes `value` and stores it as a node of type `type_hash`.
    pub fn put_value<T: Serialize>(&self, type_hash: Hash, value: &T) -> Result<Stored> {
        self.put(type_hash, serialized(type_hash, value)?)
    }

    fn insert(&self, type_hash: Hash, payload: Value) -> Result<Stored> {
        let hash = node::hash_node(type_hash, &payload);
        let candidate = Node {
            type_hash,
            payload,
            timestamp: node::now_ms(),
        };
        let (node, created) = self.store.insert(hash, &candidate)?;
        Ok(Stored {
            hash,
            node,
            created,
        })
    }

    /// Reads a schema node's payload.
    pub fn schema(&self, hash: Hash) -> Result<Value> {
        match self.store.get(hash)? {
            None => Err(CasError::UnknownType(hash)),
            Some(n) if n.type_hash != self.types.meta => Err(CasError::NotASchema(hash)),
            Some(n) => Ok(n.payload),
        }
    }

    /// Compiles (and keeps) the validator of the schema `type_hash` now, so
    /// that a later [`validate`](Self::validate) against it does not pay for
    /// compiling: the engine prepares the role's schema while an agent runs.
    pub fn prepare_validator(&self, type_hash: Hash) -> Result<()> {
        if type_hash == self.types.meta {
            return self.meta_validator().map(|_| ());
        }
        if self.is_prepared(type_hash) {
            return Ok(());
        }
        self.validator(type_hash).map(|_| ())
    }

    /// Whether the validator of the schema `type_hash` is compiled already
    /// (by this `Cas` or a clone of it): then validating against it reads
    /// nothing from the store.
    pub fn is_prepared(&self, type_hash: Hash) -> bool {
        if type_hash == self.types.meta {
            return self.meta_validator.get().is_some();
        }
        self.cached_validator(type_hash).is_some()
    }

    fn cached_validator(&self, type_hash: Hash) -> Option<Arc<Validator>> {
        self.validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&type_hash)
            .cloned()
    }

    fn validator(&self, type_hash: Hash) -> Result<(Arc<Validator>, Value)> {
        let schema = self.schema(type_hash)?;
        Ok((self.compiled(type_hash, &schema)?, schema))
    }

    /// The compiled validator of the schema `type_hash`, whose payload is
    /// `schema`: compiled once, kept for the life of this `Cas`.
    fn compiled(&self, type_hash: Hash, schema: &Value) -> Result<Arc<Validator>> {
        if let Some(v) = self.cached_validator(type_hash) {
            return Ok(v);
        }
        // Stored schemas passed check_subset, but a store can be written by
        // older or foreign code: report instead of trusting.
        let v = schema::compile(schema).map_err(|reason| CasError::UnsupportedSchema {
            reason: format!("stored schema {type_hash} does not compile: {reason}"),
        })?;
        self.validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(type_hash, v.clone());
        Ok(v)
    }

    /// Validates `payload` against the schema `type_hash`.
    pub fn validate(&self, type_hash: Hash, payload: &Value) -> Result<()> {
        if type_hash == self.types.meta {
            return schema::check_subset(self.meta_validator()?, payload);
        }
        // A schema is content-addressed: a validator compiled once serves
        // for ever, and the schema itself is read only to name it in an
        // error.
        if let Some(v) = self.cached_validator(type_hash)
            && schema::violations(&v, payload).is_empty()
        {
            return Ok(());
        }
        let (v, schema) = self.validator(type_hash)?;
        Self::check_against(type_hash, &v, &schema, payload)
    }

    /// [`validate`](Self::validate) with the schema read through `cache`.
    fn validate_cached(&self, cache: &SchemaCache, type_hash: Hash, payload: &Value) -> Result<()> {
        if type_hash == self.types.meta {
            return schema::check_subset(self.meta_validator()?, payload);
        }
        let schema = self.schema_cached(cache, type_hash)?;
        let v = self.compiled(type_hash, &schema)?;
        Self::check_against(type_hash, &v, &schema, payload)
    }

    fn check_against(
        type_hash: Hash,
        v: &Validator,
        schema: &Value,
        payload: &Value,
    ) -> Result<()> {
        let violations = schema::violations(v, payload);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(CasError::Invalid {
                type_hash,
                title: schema::title_of(schema)
                    .map_or_else(|| type_hash.to_string(), str::to_string),
                violations,
            })
        }
    }

    /// The references a node's payload holds, found through its schema, in
    /// document order. The node's type is not included.
    pub fn refs(&self, hash: Hash) -> Result<Vec<Ref>> {
        let node = self.get(hash)?;
        self.refs_of(&node)
    }

    /// Like [`refs`](Self::refs) for a node already in hand.
    pub fn refs_of(&self, node: &Node) -> Result<Vec<Ref>> {
        let schema = if node.type_hash == self.types.meta {
            schema::meta_schema()
        } else {
            self.schema(node.type_hash)?
        };
        refs::collect(&schema, &node.payload).map_err(|_| CasError::RefCycle(node.type_hash))
    }

    /// [`refs_of`](Self::refs_of) with the schema read through `cache`.
    fn refs_cached(&self, cache: &SchemaCache, node: &Node) -> Result<Vec<Ref>> {
        let schema = self.schema_cached(cache, node.type_hash)?;
        refs::collect(&schema, &node.payload).map_err(|_| CasError::RefCycle(node.type_hash))
    }

    /// The payload of the schema `type_hash` (the meta-schema's for the
    /// meta-schema), read from the store the first time `cache` is asked.
    fn schema_cached(&self, cache: &SchemaCache, type_hash: Hash) -> Result<Arc<Value>> {
        if let Some(s) = cache.get(type_hash) {
            return Ok(s);
        }
        let payload = if type_hash == self.types.meta {
            schema::meta_schema()
        } else {
            self.schema(type_hash)?
        };
        Ok(cache.insert(type_hash, payload))
    }

    /// Breadth-first traversal of everything reachable from `root` through
    /// references, each node once (cycle-safe). Missing nodes are reported,
    /// not followed; a missing root is an error.
    pub fn walk(&self, root: Hash) -> Result<Vec<WalkEntry>> {
        let root_node = self.get(root)?;
        let mut out = Vec::new();
        let mut seen = HashSet::from([root]);
        let mut queue = VecDeque::from([(root, Some(root_node), 0usize)]);
        while let Some((hash, node, depth)) = queue.pop_front() {
            let Some(node) = node else {
                out.push(WalkEntry {
                    hash,
                    type_hash: None,
                    depth,
                    missing: true,
                });
                continue;
            };
            for r in self.refs_of(&node)? {
                if seen.insert(r.hash) {
                    let child = self.store.get(r.hash)?;
                    queue.push_back((r.hash, child, depth + 1));
                }
            }
            out.push(WalkEntry {
                hash,
                type_hash: Some(node.type_hash),
                depth,
                missing: false,
            });
        }
        Ok(out)
    }

    /// Every schema node with its title, sorted by hash.
    pub fn schemas(&self) -> Result<Vec<SchemaEntry>> {
        let mut out = Vec::new();
        for hash in self.list_by_type(self.types.meta)? {
            let title = match self.store.get(hash)? {
                Some(n) => schema::title_of(&n.payload).map(str::to_string),
                // Indexed but gone (e.g. collected): not a schema any more.
                None => continue,
            };
            out.push(SchemaEntry { hash, title });
        }
        Ok(out)
    }

    /// Hashes of the nodes of one type, sorted. Collects the whole listing:
    /// use `store().by_type` to stream a large one.
    pub fn list_by_type(&self, type_hash: Hash) -> Result<Vec<Hash>> {
        let mut out = self.store.by_type(type_hash).collect::<Result<Vec<_>>>()?;
        out.sort();
        Ok(out)
    }

    /// Rebuilds the by-type index.
    pub fn reindex(&self) -> Result<crate::ReindexReport> {
        self.store.reindex()
    }

    /// Mark and sweep: keeps everything reachable from `roots` and every
    /// schema node (types are roots: nodes of any type may be stored at any
    /// time), removes the rest. A corrupt or unreadable node met while
    /// marking stops the collection before anything is removed, because its
    /// references cannot be known. [`gc_plan`](Self::gc_plan) then
    /// [`gc_sweep`](Self::gc_sweep), for callers with nothing to do in
    /// between.
    pub fn gc(&self, roots: impl IntoIterator<Item = Hash>, opts: GcOptions) -> Result<GcReport> {
        let plan = self.gc_plan(roots, opts)?;
        self.gc_sweep(plan)
    }

    /// The mark phase of [`gc`](Self::gc): what is reachable, and which
    /// unreachable nodes were last stored before the grace period
    /// ([`Store::last_stored`]). Removes nothing.
    pub fn gc_plan(
        &self,
        roots: impl IntoIterator<Item = Hash>,
        opts: GcOptions,
    ) -> Result<GcPlan> {
        // The grace period ends when the collection starts, not when the
        // marking is done: a node stored while it marks is kept. Nodes last
        // stored at or before `start - grace` are stale (`--grace 0s`: up
        // to the millisecond the collection started).
        let cutoff = node::now_ms()
            .saturating_sub(opts.grace_ms)
            .saturating_add(1);
        let mut marked: HashSet<Hash> = HashSet::new();
        let mut frontier: Vec<Hash> = Vec::new();
        let schemas = self.list_by_type(self.types.meta)?;
        for h in roots.into_iter().chain(schemas).chain([self.types.meta]) {
            if marked.insert(h) {
                frontier.push(h);
            }
        }
        // Breadth first, one level at a time: the nodes of a level are read
        // (and checked) on every core, then what they link to that is not
        // marked yet is the next level. Each node is read once.
        let cache = SchemaCache::default();
        while !frontier.is_empty() {
            let links = in_parallel(&frontier, |chunk| {
                let mut out = Vec::new();
                for &h in chunk {
                    let Some(node) = self.store.get(h)? else {
                        continue;
                    };
                    out.push(node.type_hash);
                    out.extend(self.refs_cached(&cache, &node)?.into_iter().map(|r| r.hash));
                }
                Ok(out)
            })?;
            frontier = links
                .into_iter()
                .flatten()
                .filter(|h| marked.insert(*h))
                .collect();
        }
        let mut report = GcReport {
            dry_run: opts.dry_run,
            ..Default::default()
        };
        // Stream the listing; look at the unreachable ones only after it
        // ends, so that no backend has to support deletion under a listing.
        let mut unreachable = Vec::new();
        for h in self.store.hashes() {
            let h = h?;
            report.nodes += 1;
            if marked.contains(&h) {
                report.reachable += 1;
            } else {
                unreachable.push(h);
            }
        }
        // Grace counts from the last time a node was stored, first or again
        // (`Store::last_stored`): a writer that stored it is about to
        // reference it.
        let mut stale = Vec::new();
        for (recent, schemas, chunk) in in_parallel(&unreachable, |chunk| {
            let mut recent = 0;
            let mut schemas = 0;
            let mut stale = Vec::new();
            for &h in chunk {
                match self.store.last_stored(h)? {
                    None => {} // removed meanwhile
                    Some(t) if t >= cutoff => recent += 1,
                    // Every schema is kept, by its type and not only by the
                    // type index: a schema stored just before the
                    // collection listed the index may not be in it yet
                    // (its index entry is written after the node).
                    Some(_)
                        if self
                            .store
                            .get(h)?
                            .is_some_and(|n| n.type_hash == self.types.meta) =>
                    {
                        schemas += 1;
                    }
                    Some(_) => stale.push(h),
                }
            }
            Ok((recent, schemas, stale))
        })? {
            report.recent += recent;
            report.reachable += schemas;
            stale.extend(chunk);
        }
        Ok(GcPlan {
            report,
            stale,
            cutoff,
        })
    }

    /// The sweep phase of [`gc`](Self::gc): removes the plan's stale nodes
    /// that are still stale ([`Store::remove_if_stale`]); with `dry_run`,
    /// reports them and removes nothing.
    pub fn gc_sweep(&self, plan: GcPlan) -> Result<GcReport> {
        let GcPlan {
            mut report,
            stale,
            cutoff,
        } = plan;
        if report.dry_run {
            report.swept = stale;
            return Ok(report);
        }
        // Removals are independent of each other, and on the filesystem
        // they wait on the disk's journal more than on a core: several per
        // core at once, reported in the order of the plan.
        for (recent, swept) in in_parallel_on(&stale, threads() * DISK_WAITS_PER_CORE, |chunk| {
            let mut recent = 0;
            let mut swept = Vec::new();
            for &h in chunk {
                if self.store.remove_if_stale(h, cutoff)? {
                    swept.push(h);
                } else {
                    // Stored again since we looked (or removed meanwhile).
                    recent += 1;
                }
            }
            Ok((recent, swept))
        })? {
            report.recent += recent;
            report.swept.extend(swept);
        }
        Ok(report)
    }

    /// The first node missing from the store among `root` and what it
    /// reaches, not walking into `known` (nodes already reachable from a
    /// root, such as a thread's current head) or into schemas (which are
    /// never collected). `Ok(None)` when everything is there. Used under the
    /// store lock when garbage collection may have run while a writer
    /// stored `root` (`uwf_state::guard`).
    pub fn missing_from(&self, root: Hash, known: &[Hash]) -> Result<Option<Hash>> {
        let mut seen: HashSet<Hash> = known.iter().copied().collect();
        seen.insert(root);
        let mut level = vec![root];
        // Presence is asked of the store (`has_many`), never concluded from
        // a read: a backend may answer a read of a node it once saw from
        // memory (nodes never change), but a collection may have removed
        // the node since, and that is what this walk is for. A level of the
        // walk at a time: two round trips per level on a networked store.
        while !level.is_empty() {
            let present = self.store.has_many(&level)?;
            if let Some(i) = present.iter().position(|p| !p) {
                return Ok(Some(level[i]));
            }
            let nodes = self.store.get_many(&level)?;
            let mut next = Vec::new();
            for (h, node) in level.iter().zip(nodes) {
                let Some(node) = node else {
                    return Ok(Some(*h));
                };
                if node.type_hash == self.types.meta {
                    continue;
                }
                for r in self.refs_of(&node)? {
                    if seen.insert(r.hash) {
                        next.push(r.hash);
                    }
                }
            }
            level = next;
        }
        Ok(None)
    }

    /// Re-hashes every node and checks its type, its schema and its
    /// references. Never stops at the first problem.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        for stray in self.store.strays() {
            let Stray { id, reason } = stray?;
            report.issues.push(VerifyIssue::Stray { id, reason });
        }
        let hashes = self.store.hashes().collect::<Result<Vec<_>>>()?;
        report.nodes = hashes.len();
        // A reference to a listed node needs no look-up; one to a node
        // stored after the listing is looked up, so it is not dangling.
        let listed: HashSet<Hash> = hashes.iter().copied().collect();
        let cache = SchemaCache::default();
        let issues = in_parallel(&hashes, |chunk| {
            let mut issues = Vec::new();
            for &hash in chunk {
                self.verify_node(hash, &listed, &cache, &mut issues)?;
            }
            Ok(issues)
        })?;
        report.issues.extend(issues.into_iter().flatten());
        Ok(report)
    }

    /// [`verify`](Self::verify) of one node: its problems go to `issues`.
    fn verify_node(
        &self,
        hash: Hash,
        listed: &HashSet<Hash>,
        cache: &SchemaCache,
        issues: &mut Vec<VerifyIssue>,
    ) -> Result<()> {
        let node = match self.store.get(hash) {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(()), // removed while we ran
            Err(CasError::Corrupt {
                hash,
                location,
                reason,
            }) => {
                issues.push(VerifyIssue::Corrupt {
                    hash,
                    location,
                    reason,
                });
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let invalid = |reason: String| VerifyIssue::Invalid { hash, reason };
        // The node hashes to its name (`get` checked), and a node is
        // self-typed exactly when that hash is its type (docs/cas.md §2):
        // no need to hash it again.
        if node.type_hash == hash {
            if hash != self.types.meta {
                issues.push(invalid("self-typed node other than the meta-schema".into()));
            }
            return Ok(());
        }
        match self.validate_cached(cache, node.type_hash, &node.payload) {
            Ok(()) => {}
            Err(
                e @ (CasError::Invalid { .. }
                | CasError::UnknownType(_)
                | CasError::NotASchema(_)
                | CasError::UnsupportedSchema { .. }),
            ) => {
                issues.push(invalid(e.to_string()));
                return Ok(());
            }
            Err(CasError::Corrupt { .. }) => {
                issues.push(invalid(format!("its type {} is corrupt", node.type_hash)));
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        match self.refs_cached(cache, &node) {
            Ok(found) => {
                for r in found {
                    if !listed.contains(&r.hash) && !self.store.has(r.hash)? {
                        issues.push(VerifyIssue::Dangling {
                            from: hash,
                            path: r.path,
                            hash: r.hash,
                        });
                    }
                }
            }
            Err(e) => issues.push(invalid(e.to_string())),
        }
        Ok(())
    }
}

/// Schema payloads read once per pass over many nodes ([`Cas::verify`],
/// [`Cas::gc_plan`]) instead of once per node: a schema is named by the hash
/// of its content, so what was read stays right for the whole pass.
#[derive(Default)]
struct SchemaCache(Mutex<HashMap<Hash, Arc<Value>>>);

impl SchemaCache {
    fn get(&self, hash: Hash) -> Option<Arc<Value>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&hash)
            .cloned()
    }

    fn insert(&self, hash: Hash, payload: Value) -> Arc<Value> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(hash)
            .or_insert_with(|| Arc::new(payload))
            .clone()
    }
}

/// Items a worker of [`in_parallel`] takes at a time.
const CHUNK: usize = 512;

/// Threads per core for work that mostly waits on the disk (removing
/// files): more removals in flight let one journal commit carry them
/// (docs/performance.md, "Store at scale").
const DISK_WAITS_PER_CORE: usize = 4;

/// Threads for work bound by the CPU: the machine's cores, at most 8.
fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(8)
}

/// Runs `f` over `items` cut into chunks of [`CHUNK`], on as many threads as
/// the machine has cores (at most 8), and returns the results in the order
/// of the chunks. A chunk's error is returned (the first in order) once
/// every thread has stopped; the others stop taking chunks when one fails.
/// Few items are done on the calling thread.
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&[T]) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    in_parallel_on(items, threads(), f)
}

/// [`in_parallel`] on at most `threads` threads.
fn in_parallel_on<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&[T]) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let threads = threads.min(items.len().div_ceil(CHUNK));
    if threads <= 1 {
        return Ok(vec![f(items)?]);
    }
    let chunks: Vec<&[T]> = items.chunks(CHUNK).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let mut done: Vec<(usize, Result<R>)> = std::thread::scope(|s| {
        let work = || {
            let mut out = Vec::new();
            while !failed.load(std::sync::atomic::Ordering::Relaxed) {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(chunk) = chunks.get(i) else { break };
                let r = f(chunk);
                if r.is_err() {
                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                out.push((i, r));
            }
            out
        };
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Redacts every string of `value`, however deep, object keys included
/// (a key holding a secret is rare, so the map is rebuilt only then; two
/// keys that redact alike keep the later value).
fn redact_strings(redactor: &Redactor, value: &mut Value) {
    match value {
        Value::String(s) => {
            redactor.redact_in_place(s);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_strings(redactor, v)),
        Value::Object(map) => {
            map.values_mut().for_each(|v| redact_strings(redactor, v));
            if map
                .keys()
                .any(|k| matches!(redactor.redact(k), std::borrow::Cow::Owned(_)))
            {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, v)| (redactor.redact(&k).into_owned(), v))
                    .collect();
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStore;
    use serde_json::json;

    fn ok<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn in_parallel_keeps_the_order_of_the_chunks_and_reports_the_first_error() {
        let items: Vec<usize> = (0..10 * CHUNK + 7).collect();
        let sums = ok(in_parallel(&items, |chunk| Ok(chunk.to_vec())));
        assert_eq!(sums.into_iter().flatten().collect::<Vec<_>>(), items);
        // More threads than chunks, as the sweep may ask for.
        let sums = ok(in_parallel_on(&items, 64, |chunk| Ok(chunk.to_vec())));
        assert_eq!(sums.into_iter().flatten().collect::<Vec<_>>(), items);
        // Few items: one chunk, on the calling thread.
        assert_eq!(ok(in_parallel(&items[..3], |c| Ok(c.len()))), vec![3]);
        let failed = in_parallel(&items, |chunk| {
            if chunk.contains(&(3 * CHUNK)) || chunk.contains(&(7 * CHUNK)) {
                Err(CasError::NotFound(Hash::from_u64(chunk[0] as u64)))
            } else {
                Ok(())
            }
        });
        assert!(
            matches!(failed, Err(CasError::NotFound(h)) if h == Hash::from_u64(3 * CHUNK as u64)),
            "{failed:?}"
        );
    }

    #[test]
    fn a_compiled_validator_is_kept_and_names_its_schema_in_errors() {
        let store = Arc::new(MemStore::new());
        let cas = ok(Cas::new(Arc::clone(&store)));
        let t = ok(cas.put_schema(json!({
            "title": "counted",
            "type": "object",
            "properties": { "n": { "type": "integer" } },
            "required": ["n"]
        })))
        .hash;
        // Storing a schema compiles it; another `Cas` on the same store
        // compiles it when asked, and its clones share it.
        assert!(cas.is_prepared(t));
        let other = ok(Cas::new(Arc::clone(&store)));
        assert!(!other.is_prepared(t));
        ok(other.prepare_validator(t));
        assert!(other.is_prepared(t));
        assert!(other.clone().is_prepared(t));
        ok(other.validate(t, &json!({ "n": 1 })));
        match other.validate(t, &json!({ "n": "one" })) {
            Err(CasError::Invalid {
                title, violations, ..
            }) => {
                assert_eq!(title, "counted");
                assert_eq!(violations.len(), 1, "{violations:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A store big enough for `verify` and `gc` to cut it into many chunks:
    /// a linked list of `n` nodes (one level of the marking per node) and
    /// `n` nodes that each point at the list's head (one wide level).
    fn big_store(n: usize) -> (Cas<MemStore>, Hash, Vec<Hash>, Vec<Hash>) {
        let cas = ok(Cas::new(MemStore::new()));
        let t = ok(cas.put_schema(json!({
            "type": "object",
            "properties": { "next": { "type": ["string", "null"], "format": "cas_ref" }, "n": { "type": "integer" } },
            "required": ["n"]
        })))
        .hash;
        let mut next: Option<Hash> = None;
        let mut list = Vec::new();
        for i in 0..n {
            let h = ok(cas.put(t, json!({ "next": next.map(|h| h.to_string()), "n": i }))).hash;
            list.push(h);
            next = Some(h);
        }
        let head = next.unwrap_or_else(|| panic!("empty list"));
        let fans = (0..n)
            .map(|i| ok(cas.put(t, json!({ "next": head.to_string(), "n": n + i }))).hash)
            .collect();
        (cas, t, list, fans)
    }

    #[test]
    fn verify_of_many_nodes_finds_every_problem_in_listing_order() {
        let (cas, t, list, _) = big_store(3 * CHUNK);
        assert!(ok(cas.verify()).is_ok());
        // Problems spread over several chunks: dangling references, a node
        // failing its schema, a node of an unknown type, a stray self-typed one.
        let missing = Hash::from_u64(7);
        let mut want = Vec::new();
        for i in [5, 2 * CHUNK, 5 * CHUNK + 1] {
            let h = ok(cas.put(t, json!({ "next": missing.to_string(), "n": 100_000 + i }))).hash;
            want.push((h, "dangling"));
        }
        let mut raw = |type_hash: Hash, payload: Value, what: &'static str| {
            let hash = node::hash_node(type_hash, &payload);
            let n = Node {
                type_hash,
                payload,
                timestamp: 0,
            };
            ok(cas.store().insert(hash, &n));
            want.push((hash, what));
        };
        raw(t, json!({ "next": null }), "invalid");
        raw(Hash::from_u64(99), json!({ "n": 1 }), "invalid");
        let own = json!({ "title": "not the meta-schema" });
        raw(node::self_hash(&own), own, "invalid");
        want.sort();
        let report = ok(cas.verify());
        assert_eq!(
            report.nodes,
            ok(cas.store().hashes().collect::<Result<Vec<_>>>()).len()
        );
        let got: Vec<(Hash, &str)> = report
            .issues
            .iter()
            .map(|i| match i {
                VerifyIssue::Dangling { from, hash, .. } => {
                    assert_eq!(*hash, missing);
                    (*from, "dangling")
                }
                VerifyIssue::Invalid { hash, .. } => (*hash, "invalid"),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(got, want, "{:#?}", report.issues);
        assert!(list.iter().all(|h| !got.iter().any(|(g, _)| g == h)));
    }

    #[test]
    fn gc_of_many_nodes_marks_long_chains_and_wide_levels() {
        let (cas, t, list, fans) = big_store(3 * CHUNK);
        // Garbage: a second list that no root reaches.
        let mut next: Option<Hash> = None;
        let mut garbage = Vec::new();
        for i in 0..CHUNK + 3 {
            let h = ok(cas.put(
                t,
                json!({ "next": next.map(|h| h.to_string()), "n": -1 - i as i64 }),
            ))
            .hash;
            garbage.push(h);
            next = Some(h);
        }
        let opts = GcOptions {
            dry_run: false,
            grace_ms: 0,
        };
        // The fans reach the whole list through its head.
        let report = ok(cas.gc(fans.clone(), opts));
        let mut swept = report.swept.clone();
        swept.sort();
        garbage.sort();
        assert_eq!(swept, garbage);
        // Every fan, every list node, the two schemas of this store's types
        // and the built-in ones.
        let schemas = ok(cas.list_by_type(cas.types().meta)).len();
        assert_eq!(report.reachable, fans.len() + list.len() + schemas);
        assert!(list.iter().chain(&fans).all(|h| ok(cas.has(*h))));
        assert!(garbage.iter().all(|h| !ok(cas.has(*h))));
        // Rooted at the list's tail only: the list goes but its last node.
        let tail = list[0];
        let report = ok(cas.gc([tail], opts));
        assert_eq!(report.swept.len(), list.len() - 1 + fans.len());
        assert!(ok(cas.has(tail)));
    }

    #[test]
    fn a_redactor_cuts_secrets_out_of_every_string_before_hashing() {
        let plain = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let redactor = Arc::new(Redactor::new().with("API_KEY", "sk-0123456789"));
        let cas = Cas::new(MemStore::new())
            .unwrap_or_else(|e| panic!("{e}"))
            .with_redactor(redactor);
        let schema = json!({
            "title": "t",
            "type": "object",
            "properties": {
                "text": { "type": "string" },
                "turns": { "type": "array", "items": { "type": "object" } }
            }
        });
        let ty = cas
            .put_schema(schema.clone())
            .unwrap_or_else(|e| panic!("{e}"))
            .hash;
        plain.put_schema(schema).unwrap_or_else(|e| panic!("{e}"));
        let payload = json!({
            "text": "401 for key sk-0123456789",
            "turns": [{ "sk-0123456789": ["deep sk-0123456789", 1, null, true] }]
        });
        let stored = cas.put(ty, payload).unwrap_or_else(|e| panic!("{e}"));
        let expected = json!({
            "text": "401 for key ‹redacted:API_KEY›",
            "turns": [{ "‹redacted:API_KEY›": ["deep ‹redacted:API_KEY›", 1, null, true] }]
        });
        assert_eq!(stored.node.payload, expected);
        // The hash is that of what was stored.
        assert_eq!(
            stored.hash,
            plain
                .put(ty, expected)
                .unwrap_or_else(|e| panic!("{e}"))
                .hash
        );
        assert!(cas.redactor().is_some());
        // An empty redactor is none at all.
        let none = Cas::new(MemStore::new())
            .unwrap_or_else(|e| panic!("{e}"))
            .with_redactor(Arc::new(Redactor::new()));
        assert!(none.redactor().is_none());
    }

    #[test]
    fn a_schema_already_stored_is_not_checked_again() {
        let store = Arc::new(MemStore::new());
        let first = Cas::new(Arc::clone(&store)).unwrap_or_else(|e| panic!("{e}"));
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let stored = first
            .put_schema(schema.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(stored.created);
        // Storing it checked it against the meta-schema and compiled it:
        // a node of its type needs no second compilation.
        assert!(first.meta_validator.get().is_some());
        assert!(
            first
                .validators
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&stored.hash)
        );

        // Another process on the same store: the schema is there, so it
        // is returned without compiling the meta-schema.
        let second = Cas::new(store).unwrap_or_else(|e| panic!("{e}"));
        let again = second.put_schema(schema).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.hash, stored.hash);
        assert!(!again.created);
        assert_eq!(again.node, stored.node);
        assert!(second.meta_validator.get().is_none());
        // A schema outside the subset is still refused when it is new.
        assert!(matches!(
            second.put_schema(json!({"type": "object", "$dynamicRef": "#x"})),
            Err(CasError::UnsupportedSchema { .. })
        ));
    }

    /// A store that says it checks what is inserted (as an engine's relay
    /// does) but does not: what reaches it shows what `Cas` checked.
    #[derive(Debug)]
    struct Checking(MemStore);

    impl Store for Checking {
        fn get(&self, hash: Hash) -> Result<Option<Node>> {
            self.0.get(hash)
        }
        fn has(&self, hash: Hash) -> Result<bool> {
            self.0.has(hash)
        }
        fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)> {
            self.0.insert(hash, node)
        }
        fn checks_types(&self) -> bool {
            true
        }
        fn hashes(&self) -> crate::HashIter<'_> {
            self.0.hashes()
        }
        fn by_type(&self, type_hash: Hash) -> crate::HashIter<'_> {
            self.0.by_type(type_hash)
        }
        fn reindex(&self) -> Result<crate::ReindexReport> {
            self.0.reindex()
        }
        fn remove(&self, hash: Hash) -> Result<bool> {
            self.0.remove(hash)
        }
        fn last_stored(&self, hash: Hash) -> Result<Option<u64>> {
            self.0.last_stored(hash)
        }
        fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.0.cache_get(key)
        }
        fn cache_put(&self, key: &str, bytes: &[u8]) -> Result<()> {
            self.0.cache_put(key, bytes)
        }
        fn cache_remove(&self, key: &str) -> Result<bool> {
            self.0.cache_remove(key)
        }
    }

    #[test]
    fn a_store_that_checks_types_is_left_to_check_them() {
        let checking = Cas::new(Checking(MemStore::new())).unwrap_or_else(|e| panic!("{e}"));
        assert!(checking.store().checks_types());
        let ty = checking
            .put_schema(json!({"type": "object", "required": ["n"]}))
            .unwrap_or_else(|e| panic!("{e}"))
            .hash;
        // Neither the schema nor the node was checked here: the store is
        // the one that would refuse them.
        assert!(checking.meta_validator.get().is_none());
        let stored = checking
            .put(ty, json!({}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(stored.created);
        assert!(
            checking
                .validators
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
        );
        // An ordinary store checks through `Cas` as ever.
        let plain = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!plain.store().checks_types());
        let ty = plain
            .put_schema(json!({"type": "object", "required": ["n"]}))
            .unwrap_or_else(|e| panic!("{e}"))
            .hash;
        assert!(matches!(
            plain.put(ty, json!({})),
            Err(CasError::Invalid { .. })
        ));
    }

    /// A store whose reads answer from memory once a node was read (as the
    /// PostgreSQL store's do): presence must still come from the store.
    #[derive(Debug)]
    struct Remembering {
        inner: MemStore,
        seen: Mutex<HashMap<Hash, Node>>,
    }

    impl Store for Remembering {
        fn get(&self, hash: Hash) -> Result<Option<Node>> {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = seen.get(&hash) {
                return Ok(Some(n.clone()));
            }
            let got = self.inner.get(hash)?;
            if let Some(n) = &got {
                seen.insert(hash, n.clone());
            }
            Ok(got)
        }
        fn has(&self, hash: Hash) -> Result<bool> {
            self.inner.has(hash)
        }
        fn insert(&self, hash: Hash, node: &Node) -> Result<(Node, bool)> {
            self.inner.insert(hash, node)
        }
        fn hashes(&self) -> crate::HashIter<'_> {
            self.inner.hashes()
        }
        fn by_type(&self, type_hash: Hash) -> crate::HashIter<'_> {
            self.inner.by_type(type_hash)
        }
        fn reindex(&self) -> Result<crate::ReindexReport> {
            self.inner.reindex()
        }
        fn remove(&self, hash: Hash) -> Result<bool> {
            self.inner.remove(hash)
        }
        fn last_stored(&self, hash: Hash) -> Result<Option<u64>> {
            self.inner.last_stored(hash)
        }
        fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.inner.cache_get(key)
        }
        fn cache_put(&self, key: &str, bytes: &[u8]) -> Result<()> {
            self.inner.cache_put(key, bytes)
        }
        fn cache_remove(&self, key: &str) -> Result<bool> {
            self.inner.cache_remove(key)
        }
    }

    #[test]
    fn a_node_removed_after_it_was_read_is_missing_from_its_root() {
        let cas = Cas::new(Remembering {
            inner: MemStore::new(),
            seen: Mutex::new(HashMap::new()),
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let leaf_ty = cas
            .put_schema(json!({"type": "object"}))
            .unwrap_or_else(|e| panic!("{e}"))
            .hash;
        let link_ty = cas
            .put_schema(json!({
                "type": "object",
                "properties": { "to": { "type": "string", "format": "cas_ref" } }
            }))
            .unwrap_or_else(|e| panic!("{e}"))
            .hash;
        let leaf = cas
            .put(leaf_ty, json!({"n": 1}))
            .unwrap_or_else(|e| panic!("{e}"))
            .hash;
        let root = cas
            .put(link_ty, json!({"to": leaf.to_string()}))
            .unwrap_or_else(|e| panic!("{e}"))
            .hash;
        assert_eq!(
            cas.missing_from(root, &[])
                .unwrap_or_else(|e| panic!("{e}")),
            None
        );
        // Read (and so remembered), then removed by a collection.
        assert!(
            cas.try_get(leaf)
                .unwrap_or_else(|e| panic!("{e}"))
                .is_some()
        );
        assert!(
            cas.store()
                .inner
                .remove(leaf)
                .unwrap_or_else(|e| panic!("{e}"))
        );
        assert_eq!(
            cas.missing_from(root, &[])
                .unwrap_or_else(|e| panic!("{e}")),
            Some(leaf)
        );
        // Not walked into what a root already keeps.
        assert_eq!(
            cas.missing_from(root, &[leaf])
                .unwrap_or_else(|e| panic!("{e}")),
            None
        );
    }
}
