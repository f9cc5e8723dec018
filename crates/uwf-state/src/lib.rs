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

pub use guard::{GcEpoch, NodeGuard};
pub use runs::{Claim, Run, RunOutcome, RunQueue, RunRequest, RunState};
pub use state::{FsState, StateError, parse_config, parse_stored_config};
pub use store::{ErrorKind, HeadNotices, SlotHold, ThreadStore};
