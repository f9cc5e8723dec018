//! A toy store backend, added without touching the engine, the agent kit
//! or the CLI: `mem://NAME` keeps its nodes in this process's memory (one
//! [`MemStore`] per name) and its thread state in a directory per name.
//!
//! A program that wants it registers it beside the others
//! (`Backends::new().with(MemBackend::new(dir))`), and every
//! `Backends::open` of a `mem://` location then gets its stores: an
//! engine built from them (`uwf_engine::Engine::from_opened`) starts,
//! steps and serves agents exactly as on the built-in stores.
//! `tests/backend.rs` runs the storage contract suites against it.
//!
//! Run it: `cargo run -p uwf-backend --example toy_backend`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use uwf_backend::{
    BackendError, BackendFactory, BackendFailure, Backends, Connect, LocationSource, SchemaChange,
    StoreLocation, Stores,
};
use uwf_cas::{Cas, MemStore, Store};
use uwf_state::FsState;

/// The toy's own error: a backend reports its failures as any diagnostic
/// that says whether trying again could help.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{0:?} is not mem://NAME (NAME: letters, digits, - and _)")]
#[diagnostic(code(toy::bad_name))]
pub struct BadName(String);

impl BackendFailure for BadName {
    fn is_unavailable(&self) -> bool {
        false
    }
}

/// `mem://NAME`: nodes in memory, thread state in `dir/NAME`.
pub struct MemBackend {
    dir: PathBuf,
    named: Mutex<HashMap<String, Arc<MemStore>>>,
}

impl MemBackend {
    /// Keeps the thread state of each store under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        MemBackend {
            dir: dir.into(),
            named: Mutex::new(HashMap::new()),
        }
    }

    /// The name in `mem://NAME`: letters, digits, `-` and `_` only, since
    /// it names a directory.
    fn name(url: &str) -> Result<&str, BackendError> {
        // What follows `://` and any `user:password@`.
        let rest = url.split_once("://").map_or("", |(_, n)| n);
        let name = rest.rsplit_once('@').map_or(rest, |(_, n)| n);
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(BackendError::backend(BadName(
                uwf_backend::location::redact(url),
            )));
        }
        Ok(name)
    }
}

impl BackendFactory for MemBackend {
    fn name(&self) -> &'static str {
        "mem"
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["mem"]
    }

    fn open(&self, url: &str, _: Connect<'_>) -> Result<Stores, BackendError> {
        let name = Self::name(url)?;
        let objects: Arc<dyn Store> = match self.named.lock() {
            Ok(mut named) => named.entry(name.to_owned()).or_default().clone(),
            // A panic elsewhere while the map was held: the map is still whole.
            Err(poisoned) => poisoned
                .into_inner()
                .entry(name.to_owned())
                .or_default()
                .clone(),
        };
        let state = Arc::new(FsState::new(self.dir.join(name)));
        Ok(Stores {
            objects,
            state: state.clone(),
            runs: Some(state),
        })
    }

    fn init(&self, url: &str, _: Connect<'_>) -> Result<Option<SchemaChange>, BackendError> {
        Self::name(url)?;
        Ok(None)
    }
}

/// Opens `mem://demo` twice through the registry and shows that both see
/// the same store.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = tempfile::tempdir()?;
    let backends = Backends::new().with(MemBackend::new(root.path().join("mem")));
    let open = |root: &Path| backends.open_resolved(Some("mem://demo"), root);

    let first = open(root.path())?;
    let cas = Cas::new(first.stores.objects)?;
    let schema = cas.put_schema(serde_json::json!({ "type": "object" }))?;
    let node = cas.put(schema.hash, serde_json::json!({ "hello": "toy" }))?;
    let thread = uwf_protocol::ThreadId::from_u128(7);
    first
        .stores
        .state
        .insert_thread(thread, node.hash, &uwf_state::NodeGuard::vouched())?;

    let second = open(root.path())?;
    let again = Cas::new(second.stores.objects)?.get(node.hash)?;
    let head = second.stores.state.thread_head(thread)?;
    println!(
        "{} opened twice: node {} is {}, thread {thread} is at {}",
        backends.kind(
            &StoreLocation::Url("mem://demo".into()),
            LocationSource::Flag
        )?,
        node.hash,
        again.payload,
        head.map_or_else(|| "nothing".to_string(), |h| h.to_string()),
    );
    Ok(())
}
