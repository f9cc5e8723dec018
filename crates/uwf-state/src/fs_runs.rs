//! [`RunQueue`] for [`StateDir`]: one JSON file per queued thread.
//!
//! ```text
//! <root>/runs/<thread>.json   the run of a thread: queued, claimed (worker, claimId, leaseUntil) or failed
//! ```
//!
//! Every change happens under the state lock (`.state.lock`), re-reads the
//! file it changes and rewrites it atomically (temp file, fsync, rename) or
//! removes it (then syncs the directory), so a process killed at any point
//! leaves the old record or the new one. Reads take no lock. Leases are
//! compared with this machine's clock ([`now_ms`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use uwf_protocol::ThreadId;
use uwf_util::atomic::{TEMP_PREFIX, sync_dir, write_atomic};

use crate::runs::{Claim, Run, RunOutcome, RunQueue, RunRequest, RunState};
use crate::state::{StateDir, StateError, now_ms};

/// Directory of the run records.
pub const RUNS_DIR: &str = "runs";

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl StateDir {
    /// `<root>/runs/`, the run queue of `uwf worker`.
    pub fn runs_dir(&self) -> PathBuf {
        self.root().join(RUNS_DIR)
    }

    fn run_file(&self, thread: ThreadId) -> PathBuf {
        // A ThreadId displays as 26 alphabet characters: always a plain name.
        self.runs_dir().join(format!("{thread}.json"))
    }

    fn read_run(path: &Path) -> Result<Option<Run>, StateError> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(path)(e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::Parse {
                path: path.to_path_buf(),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })
    }

    fn write_run(&self, run: &Run) -> Result<(), StateError> {
        let path = self.run_file(run.thread);
        let dir = self.runs_dir();
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut bytes = serde_json::to_vec_pretty(run).map_err(|e| StateError::Io {
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        bytes.push(b'\n');
        write_atomic(&path, &bytes)?;
        Ok(())
    }

    fn remove_run(&self, thread: ThreadId) -> Result<(), StateError> {
        let path = self.run_file(thread);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&path)(e)),
        }
        sync_dir(&self.runs_dir())?;
        Ok(())
    }

    /// The record files under `runs/`, sorted by name (temporary files of
    /// an interrupted write are left out).
    fn run_files(&self) -> Result<Vec<PathBuf>, StateError> {
        let dir = self.runs_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err(&dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(TEMP_PREFIX) || name.starts_with('.') {
                continue;
            }
            if name.ends_with(".json") {
                files.push(entry.path());
            }
        }
        files.sort();
        Ok(files)
    }

    /// The run of `thread` with `claim`'s id, or [`StateError::LeaseLost`].
    fn held(&self, claim: &Claim) -> Result<Run, StateError> {
        let thread = claim.thread();
        let lost = |why: String| StateError::LeaseLost {
            thread,
            worker: claim.worker.clone(),
            why,
        };
        match Self::read_run(&self.run_file(thread))? {
            None => Err(lost("the run is no longer queued".into())),
            Some(run) => match &run.state {
                RunState::Claimed { claim_id, .. } if *claim_id == claim.claim_id => Ok(run),
                RunState::Claimed { worker, .. } => {
                    Err(lost(format!("worker {worker} claimed it since")))
                }
                RunState::Queued => Err(lost("it was queued again".into())),
                RunState::Failed { error, .. } => {
                    Err(lost(format!("it was marked failed: {error}")))
                }
            },
        }
    }
}

impl RunQueue for StateDir {
    fn enqueue(
        &self,
        thread: ThreadId,
        workflow: &str,
        request: RunRequest,
    ) -> Result<Run, StateError> {
        let path = self.run_file(thread);
        self.locked(|| {
            if self.read_head(thread)?.is_none() {
                return Err(StateError::NotActive { thread });
            }
            let now = now_ms();
            if let Some(old) = Self::read_run(&path)? {
                let state = match &old.state {
                    RunState::Failed { .. } => None,
                    RunState::Queued => Some("queued".to_string()),
                    RunState::Claimed { worker, .. } => match old.holder(now) {
                        Some(_) => Some(format!("claimed by worker {worker}")),
                        None => Some(format!("claimed by worker {worker}, lease expired")),
                    },
                };
                if let Some(state) = state {
                    return Err(StateError::AlreadyQueued { thread, state });
                }
            }
            let run = Run {
                thread,
                workflow: workflow.to_owned(),
                request,
                queued_at: now,
                claims: 0,
                state: RunState::Queued,
            };
            self.write_run(&run)?;
            Ok(run)
        })
    }

    fn runs(&self) -> Result<Vec<Run>, StateError> {
        let mut runs = Vec::new();
        for path in self.run_files()? {
            // Removed between the listing and the read: not queued any more.
            if let Some(run) = Self::read_run(&path)? {
                runs.push(run);
            }
        }
        runs.sort_by(|a, b| (a.queued_at, &a.thread).cmp(&(b.queued_at, &b.thread)));
        Ok(runs)
    }

    fn run_of(&self, thread: ThreadId) -> Result<Option<Run>, StateError> {
        Self::read_run(&self.run_file(thread))
    }

    fn claim(
        &self,
        worker: &str,
        workflows: &[String],
        lease: Duration,
    ) -> Result<Option<Claim>, StateError> {
        self.locked(|| {
            let now = now_ms();
            // The oldest claimable run whose thread is still active; runs of
            // killed or finished threads are dropped on the way.
            while let Some(mut run) = self.next_claimable(workflows, now)? {
                if self.read_head(run.thread)?.is_none() {
                    self.remove_run(run.thread)?;
                    continue;
                }
                let claim_id = ulid::Ulid::new().to_string();
                let lease_until = now.saturating_add(millis(lease));
                run.claims = run.claims.saturating_add(1);
                run.state = RunState::Claimed {
                    worker: worker.to_owned(),
                    claim_id: claim_id.clone(),
                    claimed_at: now,
                    lease_until,
                };
                self.write_run(&run)?;
                return Ok(Some(Claim {
                    run,
                    worker: worker.to_owned(),
                    claim_id,
                    lease_until,
                }));
            }
            Ok(None)
        })
    }

    fn renew(&self, claim: &mut Claim, lease: Duration) -> Result<(), StateError> {
        self.locked(|| {
            let mut run = self.held(claim)?;
            let lease_until = now_ms().saturating_add(millis(lease));
            if let RunState::Claimed {
                lease_until: until, ..
            } = &mut run.state
            {
                *until = lease_until;
            }
            self.write_run(&run)?;
            claim.lease_until = lease_until;
            claim.run = run;
            Ok(())
        })
    }

    fn release(&self, claim: &Claim, outcome: RunOutcome) -> Result<(), StateError> {
        self.locked(|| {
            let mut run = self.held(claim)?;
            match outcome {
                RunOutcome::Finished => self.remove_run(claim.thread()),
                RunOutcome::Failed(error) => {
                    run.state = RunState::Failed {
                        worker: claim.worker.clone(),
                        error,
                        at: now_ms(),
                    };
                    self.write_run(&run)
                }
                RunOutcome::Interrupted => {
                    run.state = RunState::Queued;
                    self.write_run(&run)
                }
            }
        })
    }
}

impl StateDir {
    /// The oldest claimable run at `now` of `workflows` (all when empty).
    /// Failed runs of threads no longer active are removed on the way (the
    /// state lock is held).
    fn next_claimable(&self, workflows: &[String], now: u64) -> Result<Option<Run>, StateError> {
        let mut best: Option<Run> = None;
        for path in self.run_files()? {
            let run = match Self::read_run(&path) {
                Ok(Some(run)) => run,
                Ok(None) => continue,
                // One damaged record must not stop every worker: it is left
                // for a person (`uwf thread show` reports it).
                Err(e) => {
                    tracing::warn!("skipping a run record: {e}");
                    continue;
                }
            };
            // A failed run whose thread was killed (or finished by hand)
            // since is of no use to anyone.
            if matches!(run.state, RunState::Failed { .. }) && self.read_head(run.thread)?.is_none()
            {
                self.remove_run(run.thread)?;
                continue;
            }
            if run.claimable(now)
                && (workflows.is_empty() || workflows.contains(&run.workflow))
                && best
                    .as_ref()
                    .is_none_or(|b| (run.queued_at, &run.thread) < (b.queued_at, &b.thread))
            {
                best = Some(run);
            }
        }
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;
    use crate::ErrorKind;
    use uwf_protocol::fixtures::{hash as h, thread as t};

    const LONG: Duration = Duration::from_secs(60);

    fn store() -> (tempfile::TempDir, StateDir) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = StateDir::new(dir.path().join("root"));
        (dir, state)
    }

    fn active(state: &StateDir, thread: &str) {
        state
            .insert_thread(t(thread), h("HEAD0"))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    fn queued(state: &StateDir, thread: &str, workflow: &str) -> Run {
        active(state, thread);
        state
            .enqueue(t(thread), workflow, RunRequest::default())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn claim(state: &StateDir, worker: &str, lease: Duration) -> Option<Claim> {
        state
            .claim(worker, &[], lease)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn enqueue_needs_an_active_thread_and_refuses_a_second_time() {
        let (_d, state) = store();
        let err = state.enqueue(t("T1"), "wf", RunRequest::default());
        assert!(matches!(err, Err(StateError::NotActive { .. })), "{err:?}");
        let run = queued(&state, "T1", "wf");
        assert_eq!((run.state, run.claims), (RunState::Queued, 0));
        match state.enqueue(t("T1"), "wf", RunRequest::default()) {
            Err(e @ StateError::AlreadyQueued { .. }) => assert_eq!(e.kind(), ErrorKind::Conflict),
            other => panic!("{other:?}"),
        }
        assert_eq!(state.runs().unwrap_or_default().len(), 1);
    }

    #[test]
    fn eight_racing_claimers_get_each_run_exactly_once() {
        let (_d, state) = store();
        for i in 0..5 {
            queued(&state, &format!("T{i}"), "wf");
        }
        let state = Arc::new(state);
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let (state, barrier) = (Arc::clone(&state), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut got = Vec::new();
                    while let Some(c) = claim(&state, &format!("w{w}"), LONG) {
                        got.push(c.thread());
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<ThreadId> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect();
        all.sort();
        assert_eq!(all, ["T0", "T1", "T2", "T3", "T4"].map(t));
        assert!(claim(&state, "late", LONG).is_none());
    }

    #[test]
    fn an_expired_lease_is_taken_over_and_the_old_holder_gets_a_conflict() {
        let (_d, state) = store();
        queued(&state, "T1", "wf");
        let mut first = claim(&state, "w1", Duration::from_millis(1)).unwrap_or_else(|| panic!());
        assert_eq!(first.run.claims, 1);
        std::thread::sleep(Duration::from_millis(20));
        let second = claim(&state, "w2", LONG).unwrap_or_else(|| panic!("not taken over"));
        assert_eq!((second.thread(), second.run.claims), (t("T1"), 2));
        match state.renew(&mut first, LONG) {
            Err(e @ StateError::LeaseLost { .. }) => {
                assert_eq!(e.kind(), ErrorKind::Conflict);
                assert!(e.to_string().contains("worker w2 claimed it since"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let before = state.run_of(t("T1")).unwrap_or_default();
        let err = state.release(&first, RunOutcome::Finished);
        assert!(matches!(err, Err(StateError::LeaseLost { .. })), "{err:?}");
        assert_eq!(state.run_of(t("T1")).unwrap_or_default(), before);
        // The live holder renews and keeps it; nobody else can claim it.
        let mut second = second;
        state
            .renew(&mut second, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(claim(&state, "w3", LONG).is_none());
        assert_eq!(
            state
                .run_of(t("T1"))
                .unwrap_or_default()
                .and_then(|r| r.holder(now_ms()).map(str::to_string)),
            Some("w2".to_string())
        );
    }

    #[test]
    fn release_outcomes() {
        let (_d, state) = store();
        queued(&state, "T1", "wf");
        queued(&state, "T2", "wf");
        queued(&state, "T3", "wf");
        let c1 = claim(&state, "w", LONG).unwrap_or_else(|| panic!());
        let c2 = claim(&state, "w", LONG).unwrap_or_else(|| panic!());
        let c3 = claim(&state, "w", LONG).unwrap_or_else(|| panic!());
        assert_eq!(
            [c1.thread(), c2.thread(), c3.thread()],
            [t("T1"), t("T2"), t("T3")]
        );

        state
            .release(&c1, RunOutcome::Finished)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state.run_of(t("T1")).unwrap_or_default(), None);

        state
            .release(&c2, RunOutcome::Failed("agent exploded".into()))
            .unwrap_or_else(|e| panic!("{e}"));
        match state.run_of(t("T2")).unwrap_or_default().map(|r| r.state) {
            Some(RunState::Failed { error, worker, .. }) => {
                assert_eq!((error.as_str(), worker.as_str()), ("agent exploded", "w"));
            }
            other => panic!("{other:?}"),
        }

        state
            .release(&c3, RunOutcome::Interrupted)
            .unwrap_or_else(|e| panic!("{e}"));
        // Back in the queue, keeping its place; the failed one is not claimed.
        let again = claim(&state, "w2", LONG).unwrap_or_else(|| panic!("not requeued"));
        assert_eq!((again.thread(), again.run.claims), (t("T3"), 2));
        assert_eq!(again.run.queued_at, c3.run.queued_at);
        assert!(claim(&state, "w2", LONG).is_none());
        // Releasing twice: the claim is gone.
        let err = state.release(&c1, RunOutcome::Finished);
        assert!(matches!(err, Err(StateError::LeaseLost { .. })), "{err:?}");

        // A failed run can be queued again.
        let run = state
            .enqueue(t("T2"), "wf", RunRequest::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.state, RunState::Queued);
    }

    #[test]
    fn claims_follow_the_workflow_filter_and_drop_runs_of_inactive_threads() {
        let (_d, state) = store();
        queued(&state, "T1", "alpha");
        queued(&state, "T2", "beta");
        queued(&state, "T3", "beta");
        state
            .archive(t("T2"), h("WF"), None, "killed")
            .unwrap_or_else(|e| panic!("{e}"));
        let only_alpha = ["alpha".to_string()];
        let c = state
            .claim("w", &only_alpha, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.as_ref().map(Claim::thread), Some(t("T1")));
        assert!(
            state
                .claim("w", &only_alpha, LONG)
                .unwrap_or_else(|e| panic!("{e}"))
                .is_none()
        );
        let c = claim(&state, "w", LONG);
        assert_eq!(c.as_ref().map(Claim::thread), Some(t("T3")));
        // T2 was killed while queued: its run is gone.
        assert_eq!(state.run_of(t("T2")).unwrap_or_default(), None);
        // A failed run stays while its thread is active, and goes once the
        // thread is killed.
        state
            .release(
                &c.unwrap_or_else(|| panic!()),
                RunOutcome::Failed("no".into()),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(claim(&state, "w", LONG).is_none());
        assert!(state.run_of(t("T3")).unwrap_or_default().is_some());
        state
            .archive(t("T3"), h("WF"), None, "killed")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(claim(&state, "w", LONG).is_none());
        assert_eq!(state.run_of(t("T3")).unwrap_or_default(), None);
    }

    #[test]
    fn a_damaged_record_is_skipped_by_claims_and_reported_by_reads() {
        let (_d, state) = store();
        queued(&state, "T1", "wf");
        active(&state, "T0");
        let bad = state.runs_dir().join("T0.json");
        fs::write(&bad, b"{not json").unwrap_or_else(|e| panic!("{e}"));
        let c = claim(&state, "w", LONG);
        assert_eq!(c.as_ref().map(Claim::thread), Some(t("T1")));
        assert!(matches!(state.runs(), Err(StateError::Parse { .. })));
        assert_eq!(fs::read(&bad).unwrap_or_default(), b"{not json");
    }

    #[test]
    fn records_round_trip_as_camel_case_json() {
        let (_d, state) = store();
        active(&state, "T1");
        let request = RunRequest {
            agent: Some("uwf-mock s.yaml".into()),
            max_steps: Some(7),
            timeout_ms: Some(1500),
        };
        state
            .enqueue(t("T1"), "wf", request.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        let c = claim(&state, "host-1-ab", LONG).unwrap_or_else(|| panic!());
        let text = fs::read_to_string(state.runs_dir().join(format!("{}.json", t("T1"))))
            .unwrap_or_default();
        for key in [
            "\"state\": \"claimed\"",
            "\"leaseUntil\"",
            "\"claimId\"",
            "\"maxSteps\": 7",
            "\"worker\": \"host-1-ab\"",
        ] {
            assert!(text.contains(key), "{key} missing in {text}");
        }
        assert_eq!(c.run.request, request);
    }
}
