//! The mutable state of a uwf store: which threads are active and where
//! their heads are, the archive of finished threads, the workflow registry,
//! the configuration, the side tables of waiting threads and failed
//! attempts, and the per-workflow concurrency slots (docs/state.md, "Slots").
//!
//! Everything else a store holds is immutable and lives in the CAS
//! (`uwf-cas`). The engine reaches this state through the
//! [`ThreadStore`] trait; [`FsState`] is the embedded filesystem backend
//! (the layout documented in `docs/state.md`).

mod agents;
mod config;
mod config_files;
pub mod env;
mod error;
mod fs_runs;
mod fs_store;
pub mod guard;
pub mod heads;
mod history;
pub mod policy;
pub mod runs;
pub mod side;
pub mod slots;
pub mod state;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// The state traits, to call their methods on a concrete backend
/// (`FsState`, `PgStore`): `use uwf_state::prelude::*;`. Through `dyn
/// ThreadStore` (or a `T: ThreadStore`) every part's methods are there
/// without it.
pub mod prelude {
    pub use crate::store::{
        Collecting as _, ConcurrencySlots as _, Heads as _, Registry as _, Settings as _,
        SideTables as _, ThreadStore,
    };
}

pub use guard::{GcEpoch, GuardNeed, NodeGuard};
pub use runs::{Claim, Run, RunOutcome, RunQueue, RunRequest, RunState};
pub use state::{FsState, StateError, parse_config, parse_stored_config};
pub use store::{
    Collecting, ConcurrencySlots, ErrorKind, HeadNotices, Heads, NodeRow, Registry, Settings,
    SideTables, SlotHold, StepStart, ThreadStore,
};
