//! [`RunQueue`] for [`FsState`]: one JSON file per queued thread.
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

use crate::runs::{Claim, Run, RunOutcome, RunQueue, RunRequest, RunState, lease_lost};
use crate::state::{FsState, StateError, now_ms};

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

impl FsState {
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
        uwf_util::private::create_dir_all(&dir).map_err(io_err(&dir))?;
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
        let run = Self::read_run(&self.run_file(claim.thread()))?;
        match run {
            Some(run) if matches!(&run.state, RunState::Claimed { claim_id, .. } if *claim_id == claim.claim_id) => {
                Ok(run)
            }
            other => Err(lease_lost(claim, other.as_ref())),
        }
    }
}

impl RunQueue for FsState {
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
            if let Some(state) = Self::read_run(&path)?.and_then(|old| old.busy(now)) {
                return Err(StateError::AlreadyQueued { thread, state });
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

impl FsState {
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
    //! The behaviour every backend shares is tested by the contract of
    //! `crate::testing` (`run_queue_contract_tests!`, run on `FsState` in
    //! that module); these tests are about the files.

    use super::*;
    use crate::NodeGuard;
    use uwf_protocol::fixtures::{hash as h, thread as t};

    const LONG: Duration = Duration::from_secs(60);

    fn store() -> (tempfile::TempDir, FsState) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = FsState::new(dir.path().join("root"));
        (dir, state)
    }

    fn active(state: &FsState, thread: &str) {
        state
            .insert_thread(t(thread), h("HEAD0"), &NodeGuard::vouched())
            .unwrap_or_else(|e| panic!("{e}"));
    }

    fn claim(state: &FsState, worker: &str, lease: Duration) -> Option<Claim> {
        state
            .claim(worker, &[], lease)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_damaged_record_is_skipped_by_claims_and_reported_by_reads() {
        let (_d, state) = store();
        active(&state, "T1");
        state
            .enqueue(t("T1"), "wf", RunRequest::default())
            .unwrap_or_else(|e| panic!("{e}"));
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
