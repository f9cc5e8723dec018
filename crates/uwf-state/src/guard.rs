//! Installing a head safely beside garbage collection.
//!
//! `uwf cas gc` removes nodes that no root (a thread head, a history entry,
//! a registry entry, an attempt record) reaches. A writer stores its nodes
//! first and makes one of them a root afterwards; in between, a collection
//! may remove them. The protocol that keeps a root from ever pointing at a
//! removed node (`docs/state.md`, "Garbage collection") is:
//!
//! - A collection runs under the store lock in exclusive mode, and every
//!   change of a root takes that lock (shared or exclusive), so a root never
//!   changes while a collection marks and sweeps.
//! - The store keeps a **collection epoch**, a counter a collection raises
//!   to an odd number before it sweeps and to the next even number when it
//!   is done ([`GcEpoch`]).
//! - A writer reads the epoch *before* it stores (or checks) the nodes it is
//!   about to install, and hands it in a [`NodeGuard`] with the method that
//!   installs the root. With the lock held, the store compares: the same
//!   even epoch means no collection started since, so every node that
//!   existed after the read still exists. Otherwise the guard's check runs,
//!   still under the lock, and walks what the new root reaches; a missing
//!   node fails the call with [`StateError::NodeGone`] and nothing changes.
//!
//! The common case costs one read of the epoch per installed root; the walk
//! happens only when a collection overlapped the write.

use std::fmt;

use uwf_protocol::Hash;

use crate::state::StateError;

/// Where garbage collection stands: raised to an odd value when a
/// collection starts sweeping, to the next even value when it ends. A
/// collection that died mid-way leaves it odd until the next one ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GcEpoch(pub u64);

impl GcEpoch {
    /// True while a collection runs (or after one died before it ended).
    pub fn is_collecting(self) -> bool {
        self.0 % 2 == 1
    }

    /// The epoch a collection starting now moves to (always odd, always
    /// greater, also after a collection that died while odd).
    pub fn begin(self) -> GcEpoch {
        GcEpoch(if self.is_collecting() {
            self.0 + 2
        } else {
            self.0 + 1
        })
    }

    /// The epoch a collection that began at `self` ends with (even).
    pub fn end(self) -> GcEpoch {
        GcEpoch(if self.is_collecting() {
            self.0 + 1
        } else {
            self.0
        })
    }

    /// Whether nodes checked after reading `self` are known to be intact
    /// when the store's epoch is `now`: no collection started in between.
    pub fn still_valid(self, now: GcEpoch) -> bool {
        self == now && !self.is_collecting()
    }
}

impl fmt::Display for GcEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What the check of a [`NodeGuard`] returns: `Ok(())` when every node the
/// new root reaches is present.
pub type GuardCheck<'a> = &'a dyn Fn() -> Result<(), StateError>;

/// Handed to the methods that install a root
/// ([`Heads::insert_thread`](crate::Heads::insert_thread),
/// [`swap_head`](crate::Heads::swap_head),
/// [`register_workflow`](crate::Registry::register_workflow)): the epoch
/// the writer read before it stored its nodes, and how to check them if a
/// collection may have run since. See the module documentation.
#[derive(Clone, Copy)]
pub struct NodeGuard<'a> {
    epoch: Option<GcEpoch>,
    check: Option<GuardCheck<'a>>,
}

impl fmt::Debug for NodeGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeGuard")
            .field("epoch", &self.epoch)
            .field("check", &self.check.is_some())
            .finish()
    }
}

impl<'a> NodeGuard<'a> {
    /// A guard for nodes stored after reading `epoch`; `check` walks them.
    pub fn new(epoch: GcEpoch, check: GuardCheck<'a>) -> Self {
        Self {
            epoch: Some(epoch),
            check: Some(check),
        }
    }

    /// A guard that always runs `check` under the lock: for writers that
    /// did not read the epoch first (rare paths where a walk costs little).
    pub fn always(check: GuardCheck<'a>) -> Self {
        Self {
            epoch: None,
            check: Some(check),
        }
    }

    /// No check: the caller vouches that the nodes exist and stay (tests of
    /// the state alone, which have no node store).
    pub fn vouched() -> NodeGuard<'static> {
        NodeGuard {
            epoch: None,
            check: None,
        }
    }

    /// Runs the check unless `now` proves it unnecessary. Backends call it
    /// with the store lock held, after reading the current epoch.
    pub fn verify(&self, now: GcEpoch) -> Result<(), StateError> {
        let Some(check) = self.check else {
            return Ok(());
        };
        if self.epoch.is_some_and(|e| e.still_valid(now)) {
            return Ok(());
        }
        check()
    }

    /// Whether [`verify`](Self::verify) needs the current epoch at all (a
    /// backend may skip reading it otherwise).
    pub fn needs_epoch(&self) -> bool {
        self.check.is_some() && self.epoch.is_some()
    }

    /// What satisfies this guard without running its check, for a backend
    /// that compares the epoch inside the statement installing the root
    /// (one round trip) and takes the general path, which calls
    /// [`verify`](Self::verify), when that statement changed nothing.
    pub fn need(&self) -> GuardNeed {
        match (self.check, self.epoch) {
            (None, _) => GuardNeed::Nothing,
            (Some(_), Some(e)) if !e.is_collecting() => GuardNeed::EpochStill(e),
            (Some(_), _) => GuardNeed::Check,
        }
    }
}

/// What a [`NodeGuard`] needs before its root may be installed
/// ([`NodeGuard::need`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardNeed {
    /// Nothing: the caller vouched for its nodes.
    Nothing,
    /// The store's epoch, read under the store lock, still this one (even:
    /// no collection started since the writer read it).
    EpochStill(GcEpoch),
    /// The check, whatever the epoch (the writer read none, or read it
    /// while a collection ran).
    Check,
}

/// The error a guard's check gives for a node that is gone.
pub fn node_gone(root: Hash, missing: Hash) -> StateError {
    StateError::NodeGone { root, missing }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_guard_needs_its_check_unless_vouched_or_read_at_a_quiet_epoch() {
        let check = || Ok(());
        assert_eq!(NodeGuard::vouched().need(), GuardNeed::Nothing);
        assert_eq!(NodeGuard::always(&check).need(), GuardNeed::Check);
        assert_eq!(
            NodeGuard::new(GcEpoch(4), &check).need(),
            GuardNeed::EpochStill(GcEpoch(4))
        );
        // Read while a collection ran: the epoch proves nothing.
        assert_eq!(NodeGuard::new(GcEpoch(5), &check).need(), GuardNeed::Check);
    }

    #[test]
    fn epochs_go_odd_while_collecting_and_even_after() {
        let e = GcEpoch(0);
        assert!(!e.is_collecting());
        let running = e.begin();
        assert_eq!(running, GcEpoch(1));
        assert!(running.is_collecting());
        assert_eq!(running.end(), GcEpoch(2));
        // A collection that died at 1 leaves 1; the next one moves on.
        assert_eq!(running.begin(), GcEpoch(3));
        assert_eq!(GcEpoch(3).end(), GcEpoch(4));
    }

    #[test]
    fn a_guard_checks_only_when_a_collection_may_have_run() {
        let calls = Cell::new(0);
        let check = || {
            calls.set(calls.get() + 1);
            Ok(())
        };
        let g = NodeGuard::new(GcEpoch(4), &check);
        g.verify(GcEpoch(4)).unwrap();
        assert_eq!(calls.get(), 0, "same even epoch: no check");
        g.verify(GcEpoch(5)).unwrap();
        g.verify(GcEpoch(6)).unwrap();
        assert_eq!(calls.get(), 2, "another epoch: checked");
        let odd = NodeGuard::new(GcEpoch(5), &check);
        odd.verify(GcEpoch(5)).unwrap();
        assert_eq!(calls.get(), 3, "read while collecting: checked");
        NodeGuard::always(&check).verify(GcEpoch(0)).unwrap();
        assert_eq!(calls.get(), 4);
        NodeGuard::vouched().verify(GcEpoch(9)).unwrap();
        assert_eq!(calls.get(), 4);
    }

    #[test]
    fn a_failing_check_is_returned() {
        let check = || Err(node_gone(Hash::from_u64(1), Hash::from_u64(2)));
        let err = NodeGuard::new(GcEpoch(0), &check)
            .verify(GcEpoch(2))
            .unwrap_err();
        assert!(matches!(err, StateError::NodeGone { .. }), "{err:?}");
    }
}
