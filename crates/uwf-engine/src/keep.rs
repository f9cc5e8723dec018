//! Installing a root (a head, a registry entry) whose nodes a garbage
//! collection may have removed meanwhile: the engine's side of
//! [`uwf_state::guard`] (`docs/state.md`, "Garbage collection").

use uwf_cas::{Cas, Hash};
use uwf_state::guard::node_gone;
use uwf_state::{GcEpoch, NodeGuard, StateError};

/// Runs `install` with a [`NodeGuard`] whose check walks what `root`
/// reaches in `cas` (not into `known`: nodes a root already keeps, such as
/// the thread's current head). `epoch` is the collection epoch read before
/// the nodes were stored; `None` checks every time.
pub fn guarded<T>(
    cas: &Cas,
    epoch: Option<GcEpoch>,
    root: Hash,
    known: &[Hash],
    install: impl FnOnce(&NodeGuard<'_>) -> Result<T, StateError>,
) -> Result<T, StateError> {
    let check = || match cas.missing_from(root, known) {
        Ok(None) => Ok(()),
        Ok(Some(missing)) => Err(node_gone(root, missing)),
        Err(e) => Err(StateError::NodeCheck {
            root,
            message: e.to_string(),
            source: Some(Box::new(e)),
        }),
    };
    let guard = match epoch {
        Some(e) => NodeGuard::new(e, &check),
        None => NodeGuard::always(&check),
    };
    install(&guard)
}
