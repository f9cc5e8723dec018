//! What the last steps of this process left behind: a thread as it stands
//! after a step landed, with the moderator's decision at its new head, so
//! that the next step of the same thread in the same process (`uwf thread
//! run`, `uwf worker`) neither loads the chain again nor decides again.
//!
//! Sound because both are functions of the head alone: a head is a CAS
//! node, its chain never changes, and the decision is the moderator's over
//! that chain. An entry is used only when the thread's head, read from the
//! store at the start of the step, is the entry's head; otherwise the step
//! loads and decides as always. Few entries are kept, so a long-lived
//! worker holds at most that many threads in memory
//! (docs/performance.md, "Memory").

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use uwf_moderator::Decision;
use uwf_moderator::thread::ThreadView;
use uwf_protocol::ThreadId;

use uwf_cas::Hash;

/// Threads kept: enough for a worker's few slots; each entry is a whole
/// loaded chain.
const KEEP: usize = 4;

/// The threads the last steps of this process left, newest last.
#[derive(Default)]
pub(crate) struct Recent {
    entries: Mutex<VecDeque<(ThreadId, ThreadView, Decision)>>,
}

impl Recent {
    /// The entry of thread `id`, if it stands at `head`: its view and the
    /// decision there. The entry is removed either way (the step that takes
    /// it keeps the next one).
    pub(crate) fn take(&self, id: ThreadId, head: Hash) -> Option<(ThreadView, Decision)> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let at = entries.iter().position(|(t, _, _)| *t == id)?;
        let (_, view, decision) = entries.remove(at)?;
        (view.head == head).then_some((view, decision))
    }

    /// Keeps thread `id` as `view` (at its head) with the moderator's
    /// `decision` there, dropping the oldest entry beyond [`KEEP`].
    pub(crate) fn keep(&self, id: ThreadId, view: ThreadView, decision: Decision) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|(t, _, _)| *t != id);
        entries.push_back((id, view, decision));
        while entries.len() > KEEP {
            entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uwf_protocol::{StartNodePayload, WorkflowPayload};

    fn view(head: u64) -> ThreadView {
        ThreadView {
            head: Hash::from_u64(head),
            start_hash: Hash::from_u64(1),
            start: StartNodePayload {
                workflow: Hash::from_u64(2),
                prompt: "p".into(),
                parent_state: None,
            },
            start_timestamp: 0,
            workflow_hash: Hash::from_u64(2),
            workflow: WorkflowPayload {
                name: "w".into(),
                description: String::new(),
                roles: Default::default(),
                conditions: Default::default(),
                graph: Default::default(),
            },
            steps: Vec::new(),
            unloaded: 0,
        }
    }

    fn decision() -> Decision {
        Decision {
            from: "a".into(),
            next: "b".into(),
            index: 0,
            condition: None,
            prompt: None,
        }
    }

    #[test]
    fn an_entry_serves_only_its_head_and_only_once() {
        let recent = Recent::default();
        let (a, b) = (ThreadId::new(), ThreadId::new());
        recent.keep(a, view(10), decision());
        recent.keep(b, view(20), decision());
        assert!(recent.take(a, Hash::from_u64(11)).is_none(), "another head");
        assert!(
            recent.take(a, Hash::from_u64(10)).is_none(),
            "dropped by the miss"
        );
        let (v, d) = recent
            .take(b, Hash::from_u64(20))
            .unwrap_or_else(|| panic!("kept"));
        assert_eq!((v.head, d), (Hash::from_u64(20), decision()));
        assert!(recent.take(b, Hash::from_u64(20)).is_none(), "taken");
    }

    #[test]
    fn few_threads_are_kept() {
        let recent = Recent::default();
        let ids: Vec<ThreadId> = (0..KEEP + 2).map(|_| ThreadId::new()).collect();
        for (i, id) in ids.iter().enumerate() {
            recent.keep(*id, view(i as u64), decision());
        }
        // The oldest went first.
        assert!(recent.take(ids[0], Hash::from_u64(0)).is_none());
        assert!(recent.take(ids[1], Hash::from_u64(1)).is_none());
        let last = KEEP + 1;
        assert!(
            recent
                .take(ids[last], Hash::from_u64(last as u64))
                .is_some()
        );
    }
}
