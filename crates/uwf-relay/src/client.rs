//! The agent's side: [`uwf_cas::Store`] and [`uwf_state::ThreadStore`]
//! whose hot calls go to the engine's relay, and whose other calls go to
//! the store itself, opened only if one is made.

use std::io::{BufReader, BufWriter};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use uwf_cas::{CasError, Hash, HashIter, Node, ReindexReport, Store, StrayIter, check_cache_key};
use uwf_protocol::{
    AttemptsIndex, HistoryEntry, ThreadId, ThreadsIndex, WaitingIndex, WaitingRecord,
    WorkflowConfig, WorkflowLimits, WorkflowRegistry,
};
use uwf_state::slots::{SlotError, Waiting};
use uwf_state::{
    Collecting, ConcurrencySlots, GcEpoch, HeadNotices, Heads, NodeGuard, Registry, Settings,
    SideTables, SlotHold, StateError, ThreadStore,
};

use crate::RelayError;
use crate::wire::{Kind, Request, Response, read_frame, write_frame};

/// The backend name relay errors carry.
const BACKEND: &str = "relay";

/// A connection to an engine's relay.
pub struct RelayClient {
    path: PathBuf,
    io: Mutex<(BufReader<UnixStream>, BufWriter<UnixStream>)>,
    describe: String,
    config_name: String,
    /// The engine checks the nodes inserted through it.
    checks: bool,
    /// The engine stores several nodes in one request.
    batches: bool,
}

impl std::fmt::Debug for RelayClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayClient")
            .field("path", &self.path)
            .field("store", &self.describe)
            .finish_non_exhaustive()
    }
}

/// What a call failed with: the transport, or the store's own error.
enum CallError {
    Transport(String),
    Store {
        kind: Kind,
        message: String,
    },
    /// A node the engine found not to satisfy its type.
    Invalid {
        type_hash: Hash,
        title: String,
        violations: Vec<uwf_cas::Violation>,
    },
}

impl CallError {
    /// The kind and message of any call error.
    fn parts(self) -> (Kind, String) {
        match self {
            CallError::Transport(m) => (Kind::Unavailable, m),
            CallError::Store { kind, message } => (kind, message),
            invalid @ CallError::Invalid { .. } => (Kind::Invalid, invalid.into_cas().to_string()),
        }
    }
}

impl CallError {
    fn into_cas(self) -> CasError {
        let (kind, message) = match self {
            CallError::Invalid {
                type_hash,
                title,
                violations,
            } => {
                return CasError::Invalid {
                    type_hash,
                    title,
                    violations,
                };
            }
            other => other.parts(),
        };
        CasError::Backend {
            backend: BACKEND,
            kind: kind.into(),
            message,
            source: None,
        }
    }

    fn into_state(self) -> StateError {
        let (kind, message) = self.parts();
        StateError::Backend {
            backend: BACKEND,
            kind: kind.into(),
            message,
            source: None,
        }
    }
}

/// How long a request may wait for its answer before the agent gives up
/// on the relay (the engine answers from its own store, which has its own
/// timeouts well under this).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

impl RelayClient {
    /// Connects to the relay at `path` and asks what store it serves.
    pub fn connect(path: &Path) -> Result<Arc<RelayClient>, RelayError> {
        let failed = |source: std::io::Error| RelayError::Connect {
            path: path.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(path).map_err(failed)?;
        stream
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .map_err(failed)?;
        let write = stream.try_clone().map_err(failed)?;
        let mut client = RelayClient {
            path: path.to_path_buf(),
            io: Mutex::new((BufReader::new(stream), BufWriter::new(write))),
            describe: String::new(),
            config_name: String::new(),
            checks: false,
            batches: false,
        };
        match client.call(&Request::Hello, &[]) {
            Ok((
                Response::Hello {
                    describe,
                    config_name,
                    checks,
                    batches,
                },
                _,
            )) => {
                client.describe = describe;
                client.config_name = config_name;
                client.checks = checks;
                client.batches = batches;
                Ok(Arc::new(client))
            }
            Ok((other, _)) => Err(RelayError::Protocol {
                path: path.to_path_buf(),
                message: format!("answered hello with {other:?}"),
            }),
            Err(e) => Err(RelayError::Protocol {
                path: path.to_path_buf(),
                message: e.parts().1,
            }),
        }
    }

    /// The description of the store the relay serves.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Whether the engine checks every node inserted through this relay
    /// against its type ([`Relay::start_checking`](crate::Relay::start_checking)).
    pub fn checks(&self) -> bool {
        self.checks
    }

    /// [`Store::insert_many`] through the relay.
    fn insert_many(&self, nodes: &[(Hash, Node)]) -> uwf_cas::Result<Vec<(Node, bool)>> {
        if !self.batches {
            return nodes.iter().map(|(h, n)| self.insert(*h, n)).collect();
        }
        let request = Request::InsertMany {
            nodes: nodes.to_vec(),
        };
        match self.call(&request, &[]) {
            Ok((Response::InsertedMany { nodes: stored }, _)) if stored.len() == nodes.len() => {
                Ok(stored)
            }
            Ok((other, _)) => Err(self.unexpected(&other).into_cas()),
            Err(e) => Err(e.into_cas()),
        }
    }

    /// [`Store::insert`] through the relay.
    fn insert(&self, hash: Hash, node: &Node) -> uwf_cas::Result<(Node, bool)> {
        let request = Request::Insert {
            hash,
            node: node.clone(),
        };
        match self.call(&request, &[]) {
            Ok((Response::Inserted { node, created }, _)) => Ok((node, created)),
            Ok((other, _)) => Err(self.unexpected(&other).into_cas()),
            Err(e) => Err(e.into_cas()),
        }
    }

    fn call(&self, request: &Request, blob: &[u8]) -> Result<(Response, Vec<u8>), CallError> {
        let mut io = self.io.lock().unwrap_or_else(PoisonError::into_inner);
        let (r, w) = &mut *io;
        let transport =
            |e: std::io::Error| CallError::Transport(format!("relay {}: {e}", self.path.display()));
        write_frame(w, request, blob).map_err(transport)?;
        match read_frame::<Response>(r).map_err(transport)? {
            Some((Response::Error { kind, message }, _)) => Err(CallError::Store { kind, message }),
            Some((
                Response::Invalid {
                    type_hash,
                    title,
                    violations,
                },
                _,
            )) => Err(CallError::Invalid {
                type_hash,
                title,
                violations,
            }),
            Some(answer) => Ok(answer),
            None => Err(CallError::Transport(format!(
                "relay {}: the engine closed the connection",
                self.path.display()
            ))),
        }
    }

    fn unexpected(&self, response: &Response) -> CallError {
        CallError::Store {
            kind: Kind::Io,
            message: format!(
                "relay {}: unexpected answer {response:?}",
                self.path.display()
            ),
        }
    }
}

/// The store itself: its objects and its thread state.
pub type Stores = (Arc<dyn Store>, Arc<dyn ThreadStore>);

/// Opens the store itself, for the calls the relay does not carry (the
/// error is a message for people: it never holds a secret).
pub type Opener = Box<dyn Fn() -> Result<Stores, String> + Send + Sync>;

/// The store itself, opened on first use.
pub struct Fallback {
    open: Opener,
    opened: OnceLock<Result<Stores, String>>,
}

impl std::fmt::Debug for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fallback")
            .field("opened", &self.opened.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Fallback {
    /// A fallback that opens the store with `open` when first needed.
    pub fn new(open: Opener) -> Arc<Fallback> {
        Arc::new(Fallback {
            open,
            opened: OnceLock::new(),
        })
    }

    fn get(&self) -> Result<&Stores, String> {
        self.opened
            .get_or_init(|| {
                tracing::debug!(
                    "relay: opening the store itself for a call the relay does not carry"
                );
                (self.open)()
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn store(&self) -> uwf_cas::Result<&Arc<dyn Store>> {
        self.get()
            .map(|s| &s.0)
            .map_err(|message| CasError::Backend {
                backend: BACKEND,
                kind: uwf_cas::StoreErrorKind::Unavailable,
                message,
                source: None,
            })
    }

    fn state(&self) -> Result<&Arc<dyn ThreadStore>, StateError> {
        self.get()
            .map(|s| &s.1)
            .map_err(|message| StateError::Backend {
                backend: BACKEND,
                kind: uwf_state::ErrorKind::Unavailable,
                message,
                source: None,
            })
    }
}

/// A store this process opened itself (a directory, which it reads
/// faster than any socket could relay), whose inserts go through the
/// relay of the engine that runs it, which checks each node against its
/// type before it writes it into the same store
/// ([`Relay::start_checking`](crate::Relay::start_checking)): so the agent
/// compiles no schema (docs/performance.md, "Starting an agent").
#[derive(Debug)]
pub struct RelayedInserts {
    local: Arc<dyn Store>,
    client: Arc<RelayClient>,
}

impl RelayedInserts {
    /// `local`, with its inserts sent to `client`'s engine. `local` must be
    /// the store that engine serves.
    pub fn new(local: Arc<dyn Store>, client: Arc<RelayClient>) -> Self {
        RelayedInserts { local, client }
    }
}

impl Store for RelayedInserts {
    fn get(&self, hash: Hash) -> uwf_cas::Result<Option<Node>> {
        self.local.get(hash)
    }
    fn get_many(&self, hashes: &[Hash]) -> uwf_cas::Result<Vec<Option<Node>>> {
        self.local.get_many(hashes)
    }
    fn has(&self, hash: Hash) -> uwf_cas::Result<bool> {
        self.local.has(hash)
    }
    fn has_many(&self, hashes: &[Hash]) -> uwf_cas::Result<Vec<bool>> {
        self.local.has_many(hashes)
    }
    fn insert(&self, hash: Hash, node: &Node) -> uwf_cas::Result<(Node, bool)> {
        self.client.insert(hash, node)
    }
    fn insert_many(&self, nodes: &[(Hash, Node)]) -> uwf_cas::Result<Vec<(Node, bool)>> {
        self.client.insert_many(nodes)
    }
    fn checks_types(&self) -> bool {
        self.client.checks
    }
    fn hashes(&self) -> HashIter<'_> {
        self.local.hashes()
    }
    fn by_type(&self, type_hash: Hash) -> HashIter<'_> {
        self.local.by_type(type_hash)
    }
    fn reindex(&self) -> uwf_cas::Result<ReindexReport> {
        self.local.reindex()
    }
    fn remove(&self, hash: Hash) -> uwf_cas::Result<bool> {
        self.local.remove(hash)
    }
    fn last_stored(&self, hash: Hash) -> uwf_cas::Result<Option<u64>> {
        self.local.last_stored(hash)
    }
    fn remove_if_stale(&self, hash: Hash, cutoff: u64) -> uwf_cas::Result<bool> {
        self.local.remove_if_stale(hash, cutoff)
    }
    fn strays(&self) -> StrayIter<'_> {
        self.local.strays()
    }
    fn remove_stray(&self, id: &str) -> uwf_cas::Result<bool> {
        self.local.remove_stray(id)
    }
    fn cache_get(&self, key: &str) -> uwf_cas::Result<Option<Vec<u8>>> {
        self.local.cache_get(key)
    }
    fn cache_put(&self, key: &str, bytes: &[u8]) -> uwf_cas::Result<()> {
        self.local.cache_put(key, bytes)
    }
    fn cache_remove(&self, key: &str) -> uwf_cas::Result<bool> {
        self.local.cache_remove(key)
    }
}

/// [`Store`] through a relay: reads, writes and the cache go to the
/// engine; listings and maintenance go to the store itself.
#[derive(Debug)]
pub struct RelayStore {
    client: Arc<RelayClient>,
    fallback: Arc<Fallback>,
}

impl RelayStore {
    /// The object store of `client`'s engine.
    pub fn new(client: Arc<RelayClient>, fallback: Arc<Fallback>) -> Self {
        RelayStore { client, fallback }
    }
}

impl Store for RelayStore {
    fn get(&self, hash: Hash) -> uwf_cas::Result<Option<Node>> {
        Ok(self.get_many(&[hash])?.pop().flatten())
    }

    fn get_many(&self, hashes: &[Hash]) -> uwf_cas::Result<Vec<Option<Node>>> {
        let request = Request::GetMany {
            hashes: hashes.to_vec(),
        };
        match self.client.call(&request, &[]) {
            Ok((Response::Nodes { nodes }, _)) if nodes.len() == hashes.len() => {
                // The engine's store checked them; a node that does not
                // hash to its name is refused here all the same.
                for (h, n) in hashes.iter().zip(&nodes) {
                    if let Some(n) = n
                        && n.hash() != *h
                    {
                        return Err(CasError::Corrupt {
                            hash: *h,
                            location: self.client.describe.clone(),
                            reason: format!("relayed content hashes to {}", n.hash()),
                        });
                    }
                }
                Ok(nodes)
            }
            Ok((other, _)) => Err(self.client.unexpected(&other).into_cas()),
            Err(e) => Err(e.into_cas()),
        }
    }

    fn has(&self, hash: Hash) -> uwf_cas::Result<bool> {
        Ok(self.has_many(&[hash])?.first().copied().unwrap_or(false))
    }

    fn has_many(&self, hashes: &[Hash]) -> uwf_cas::Result<Vec<bool>> {
        let request = Request::HasMany {
            hashes: hashes.to_vec(),
        };
        match self.client.call(&request, &[]) {
            Ok((Response::Bools { values }, _)) if values.len() == hashes.len() => Ok(values),
            Ok((other, _)) => Err(self.client.unexpected(&other).into_cas()),
            Err(e) => Err(e.into_cas()),
        }
    }

    fn insert(&self, hash: Hash, node: &Node) -> uwf_cas::Result<(Node, bool)> {
        self.client.insert(hash, node)
    }
    fn insert_many(&self, nodes: &[(Hash, Node)]) -> uwf_cas::Result<Vec<(Node, bool)>> {
        self.client.insert_many(nodes)
    }

    fn checks_types(&self) -> bool {
        self.client.checks
    }

    fn hashes(&self) -> HashIter<'_> {
        match self.fallback.store() {
            Ok(s) => s.hashes(),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    }

    fn by_type(&self, type_hash: Hash) -> HashIter<'_> {
        match self.fallback.store() {
            Ok(s) => s.by_type(type_hash),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    }

    fn reindex(&self) -> uwf_cas::Result<ReindexReport> {
        self.fallback.store()?.reindex()
    }

    fn remove(&self, hash: Hash) -> uwf_cas::Result<bool> {
        self.fallback.store()?.remove(hash)
    }

    fn last_stored(&self, hash: Hash) -> uwf_cas::Result<Option<u64>> {
        self.fallback.store()?.last_stored(hash)
    }

    fn remove_if_stale(&self, hash: Hash, cutoff: u64) -> uwf_cas::Result<bool> {
        self.fallback.store()?.remove_if_stale(hash, cutoff)
    }

    fn strays(&self) -> StrayIter<'_> {
        match self.fallback.store() {
            Ok(s) => s.strays(),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    }

    fn remove_stray(&self, id: &str) -> uwf_cas::Result<bool> {
        self.fallback.store()?.remove_stray(id)
    }

    fn cache_get(&self, key: &str) -> uwf_cas::Result<Option<Vec<u8>>> {
        check_cache_key(key)?;
        let request = Request::CacheGet {
            key: key.to_owned(),
        };
        match self.client.call(&request, &[]) {
            Ok((Response::Entry { present: true }, bytes)) => Ok(Some(bytes)),
            Ok((Response::Entry { present: false }, _)) => Ok(None),
            Ok((other, _)) => Err(self.client.unexpected(&other).into_cas()),
            Err(e) => Err(e.into_cas()),
        }
    }

    fn cache_put(&self, key: &str, bytes: &[u8]) -> uwf_cas::Result<()> {
        check_cache_key(key)?;
        let request = Request::CachePut {
            key: key.to_owned(),
        };
        match self.client.call(&request, bytes) {
            Ok((Response::Done, _)) => Ok(()),
            Ok((other, _)) => Err(self.client.unexpected(&other).into_cas()),
            Err(e) => Err(e.into_cas()),
        }
    }

    fn cache_remove(&self, key: &str) -> uwf_cas::Result<bool> {
        check_cache_key(key)?;
        let request = Request::CacheRemove {
            key: key.to_owned(),
        };
        match self.client.call(&request, &[]) {
            Ok((Response::Bool { value }, _)) => Ok(value),
            Ok((other, _)) => Err(self.client.unexpected(&other).into_cas()),
            Err(e) => Err(e.into_cas()),
        }
    }
}

/// [`ThreadStore`] through a relay: a head, the configuration and the
/// secrets come from the engine; every other call goes to the store
/// itself.
#[derive(Debug)]
pub struct RelayState {
    client: Arc<RelayClient>,
    fallback: Arc<Fallback>,
}

impl RelayState {
    /// The thread state of `client`'s engine.
    pub fn new(client: Arc<RelayClient>, fallback: Arc<Fallback>) -> Self {
        RelayState { client, fallback }
    }

    fn fb(&self) -> Result<&Arc<dyn ThreadStore>, StateError> {
        self.fallback.state()
    }
}

impl ThreadStore for RelayState {
    fn describe(&self) -> String {
        self.client.describe.clone()
    }

    fn check_writable(&self) -> Result<(), StateError> {
        self.fb()?.check_writable()
    }

    fn head_notices(&self) -> Option<Arc<dyn HeadNotices>> {
        self.fb().ok()?.head_notices()
    }
}

impl Heads for RelayState {
    fn thread_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        match self.client.call(&Request::ThreadHead { thread }, &[]) {
            Ok((Response::Head { head }, _)) => Ok(head),
            Ok((other, _)) => Err(self.client.unexpected(&other).into_state()),
            Err(e) => Err(e.into_state()),
        }
    }

    fn threads(&self) -> Result<ThreadsIndex, StateError> {
        self.fb()?.threads()
    }

    fn insert_thread(
        &self,
        thread: ThreadId,
        head: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        self.fb()?.insert_thread(thread, head, guard)
    }

    fn swap_head(
        &self,
        thread: ThreadId,
        expected: Hash,
        new: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        self.fb()?.swap_head(thread, expected, new, guard)
    }

    fn gc_epoch(&self) -> Result<GcEpoch, StateError> {
        self.fb()?.gc_epoch()
    }

    fn archive(
        &self,
        thread: ThreadId,
        workflow: Hash,
        expected_head: Option<Hash>,
        reason: &str,
    ) -> Result<HistoryEntry, StateError> {
        self.fb()?.archive(thread, workflow, expected_head, reason)
    }

    fn history(&self) -> Result<Vec<HistoryEntry>, StateError> {
        self.fb()?.history()
    }

    fn find_archived(&self, thread: ThreadId) -> Result<Option<HistoryEntry>, StateError> {
        self.fb()?.find_archived(thread)
    }

    fn import_history(&self, entries: &[HistoryEntry]) -> Result<usize, StateError> {
        self.fb()?.import_history(entries)
    }
}

impl Registry for RelayState {
    fn registry(&self) -> Result<WorkflowRegistry, StateError> {
        self.fb()?.registry()
    }

    fn register_workflow(
        &self,
        name: &str,
        hash: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<Option<Hash>, StateError> {
        self.fb()?.register_workflow(name, hash, guard)
    }
}

impl Settings for RelayState {
    fn config(&self) -> Result<Option<WorkflowConfig>, StateError> {
        let Some(text) = self.config_text()? else {
            return Ok(None);
        };
        uwf_state::parse_stored_config(&self.config_name(), &text).map(Some)
    }

    fn config_name(&self) -> String {
        self.client.config_name.clone()
    }

    fn secrets(&self) -> Result<Vec<(String, String)>, StateError> {
        match self.client.call(&Request::Secrets, &[]) {
            Ok((Response::Secrets { pairs }, _)) => Ok(pairs),
            Ok((other, _)) => Err(self.client.unexpected(&other).into_state()),
            Err(e) => Err(e.into_state()),
        }
    }

    fn config_text(&self) -> Result<Option<String>, StateError> {
        match self.client.call(&Request::ConfigText, &[]) {
            Ok((Response::Text { text }, _)) => Ok(text),
            Ok((other, _)) => Err(self.client.unexpected(&other).into_state()),
            Err(e) => Err(e.into_state()),
        }
    }

    fn set_config_text(&self, text: Option<&str>) -> Result<(), StateError> {
        self.fb()?.set_config_text(text)
    }

    fn replace_config_text(&self, expected: Option<&str>, new: &str) -> Result<bool, StateError> {
        self.fb()?.replace_config_text(expected, new)
    }
}

impl SideTables for RelayState {
    fn waiting(&self) -> Result<WaitingIndex, StateError> {
        self.fb()?.waiting()
    }

    fn waiting_of(&self, thread: ThreadId) -> Result<Option<WaitingRecord>, StateError> {
        self.fb()?.waiting_of(thread)
    }

    fn mark_waiting(&self, thread: ThreadId, record: WaitingRecord) -> Result<bool, StateError> {
        self.fb()?.mark_waiting(thread, record)
    }

    fn attempts(&self) -> Result<AttemptsIndex, StateError> {
        self.fb()?.attempts()
    }

    fn attempt_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        self.fb()?.attempt_head(thread)
    }

    fn record_attempt(
        &self,
        thread: ThreadId,
        write: &mut dyn FnMut(Option<Hash>) -> Result<Hash, StateError>,
    ) -> Result<Hash, StateError> {
        self.fb()?.record_attempt(thread, write)
    }

    fn shares_running(&self) -> bool {
        self.fb().is_ok_and(|s| s.shares_running())
    }

    fn put_running(&self, thread: ThreadId, marker: &str) -> Result<(), StateError> {
        self.fb()?.put_running(thread, marker)
    }

    fn clear_running(&self, thread: ThreadId, marker: &str) -> Result<(), StateError> {
        self.fb()?.clear_running(thread, marker)
    }

    fn running_marker(&self, thread: ThreadId) -> Result<Option<String>, StateError> {
        self.fb()?.running_marker(thread)
    }
}

impl ConcurrencySlots for RelayState {
    fn acquire_slot(
        &self,
        workflow: &str,
        limits: WorkflowLimits,
        poll: Option<Duration>,
        on_wait: &mut dyn FnMut(&Waiting) -> bool,
    ) -> Result<Box<dyn SlotHold>, SlotError> {
        let fallback = self.fallback.get().map_err(|message| SlotError::Backend {
            backend: BACKEND,
            kind: uwf_state::ErrorKind::Unavailable,
            message,
            source: None,
        })?;
        fallback.1.acquire_slot(workflow, limits, poll, on_wait)
    }
}

impl Collecting for RelayState {
    fn while_collecting(
        &self,
        f: &mut dyn FnMut() -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        self.fb()?.while_collecting(f)
    }

    fn begin_sweep(&self) -> Result<GcEpoch, StateError> {
        self.fb()?.begin_sweep()
    }

    fn side_table_roots_locked(&self, prune: bool) -> Result<Vec<Hash>, StateError> {
        self.fb()?.side_table_roots_locked(prune)
    }
}
