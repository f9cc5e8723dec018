//! The stores of an agent whose engine serves it the store over a relay
//! ([`uwf_relay`]; docs/postgres.md, "The store relay").

use std::path::Path;
use std::sync::Arc;

use uwf_cas::Store;
use uwf_state::ThreadStore;

use crate::{BackendFactory, Connect, Stores};

/// What the relay named in this process's environment gave.
pub(crate) enum Relayed {
    /// No relay is named: open the store as usual.
    NotNamed,
    /// One is named but cannot be reached (the engine that ran this agent
    /// has ended, say).
    Unreachable(uwf_relay::RelayError),
    /// The stores through it.
    Open(Stores),
}

/// The stores through the relay named in this process's environment:
/// node reads and writes, the derived cache, a head, the configuration and
/// the secrets go through it; anything else opens the store itself with
/// `factory`, once, when first needed (and fails then, saying so, when this
/// program has no backend for the URL).
pub(crate) fn open(
    url: &str,
    root: &Path,
    password: Option<String>,
    factory: Option<Arc<dyn BackendFactory>>,
) -> Relayed {
    let Some(path) = uwf_relay::from_env() else {
        return Relayed::NotNamed;
    };
    let client = match uwf_relay::RelayClient::connect(&path) {
        Ok(c) => c,
        Err(e) => return Relayed::Unreachable(e),
    };
    tracing::debug!(relay = %path.display(), store = client.describe(), "store through the relay");
    let (url, root) = (url.to_owned(), root.to_path_buf());
    let fallback = uwf_relay::Fallback::new(Box::new(move || {
        let Some(factory) = &factory else {
            return Err(format!(
                "{} is reached through the relay of the engine that runs this program, and this \
                 call needs the store itself, but this program has no backend for it",
                crate::location::redact(&url)
            ));
        };
        let connect = Connect {
            root: &root,
            password: password.as_deref(),
        };
        let stores = factory.open(&url, connect).map_err(|e| e.to_string())?;
        Ok((stores.objects, stores.state))
    }));
    let objects: Arc<dyn Store> = Arc::new(uwf_relay::RelayStore::new(
        Arc::clone(&client),
        Arc::clone(&fallback),
    ));
    let state: Arc<dyn ThreadStore> = Arc::new(uwf_relay::RelayState::new(client, fallback));
    Relayed::Open(Stores {
        objects,
        state,
        runs: None,
    })
}

/// `local` (a directory this process opened, described as `describe`)
/// with its inserts sent through the relay named in this process's
/// environment, when one is named, reachable, serves the same directory
/// and checks what it stores ([`uwf_relay::RelayedInserts`]). `None`: use
/// `local` alone, which checks its nodes itself, as it always could.
pub(crate) fn inserts(local: &Arc<dyn Store>, describe: &str) -> Option<Arc<dyn Store>> {
    let path = uwf_relay::from_env()?;
    let client = match uwf_relay::RelayClient::connect(&path) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!("storing without the relay: {e}");
            return None;
        }
    };
    // A relay of another store (an agent pointed elsewhere than its
    // engine's store) would write where this process does not read.
    if !client.checks() || client.describe() != describe {
        tracing::debug!(
            relay = client.describe(),
            store = describe,
            "storing without the relay: it serves another store or does not check"
        );
        return None;
    }
    Some(Arc::new(uwf_relay::RelayedInserts::new(
        Arc::clone(local),
        client,
    )))
}
