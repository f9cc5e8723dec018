//! [`RunQueue`] on PostgreSQL: the run queue of `uwf worker`, shared by
//! workers on every machine that reaches the database.
//!
//! One row of `uwf_runs` per queued thread (schema migration 4). Every
//! time in it is milliseconds since the Unix epoch on the **database
//! server's clock** (`now()`), never a worker's: leases are set and
//! compared by the server alone, so workers whose clocks disagree still
//! agree on when a lease ran out.
//!
//! - [`claim`](RunQueue::claim) is one statement: the oldest claimable row
//!   (queued, or claimed with `lease_until < now()`) of the workflows asked
//!   for whose thread is active, locked with `FOR UPDATE SKIP LOCKED`, is
//!   updated with the worker, a fresh claim id and `lease_until = now() +
//!   lease`. Racing claimers skip each other's rows instead of waiting, and
//!   no row is claimed twice: a row locked by one claimer is invisible to
//!   the others until it commits, and then it is no longer claimable.
//!   Before it, runs of threads that are no longer active (killed or
//!   finished while queued, or failed runs of archived threads) are
//!   deleted.
//! - [`renew`](RunQueue::renew) and [`release`](RunQueue::release) are one
//!   `UPDATE`/`DELETE … WHERE thread = $1 AND claim_id = $2`: when no row
//!   matches, the claim is gone ([`StateError::LeaseLost`], a conflict) and
//!   nothing changes. A renewal runs under a `statement_timeout`, so one
//!   that hangs (a lock, a sick server) fails instead of blocking the
//!   worker's renewal loop (whose watchdog fences the agent anyway).
//!
//! Run-queue statements do not take the store lock of
//! [`while_collecting`](uwf_state::Collecting::while_collecting): runs hold no
//! hashes (garbage collection does not read them), and a long `uwf cas gc`
//! must not hold back the renewals that keep every worker's lease.

use std::sync::LazyLock;
use std::time::Duration;

use postgres::{GenericClient, Row};
use uwf_protocol::ThreadId;
use uwf_state::StateError;
use uwf_state::runs::{Claim, Run, RunOutcome, RunQueue, RunRequest, RunState, lease_lost};

use crate::{PgError, PgStore};

/// The database clock in ms since the Unix epoch (the transaction's start:
/// one value for every statement of a transaction).
const NOW_MS: &str = "(extract(epoch FROM now()) * 1000)::bigint";

/// The columns a [`Run`] is read from, in order.
const COLS: &str = "thread, workflow, request, queued_at, claims, state, worker, claim_id, \
                    claimed_at, lease_until, error, failed_at";

// Statements built from the constants above once, so that each connection
// prepares them once (`Conn::query` takes `&'static str`).
static RUN_AND_NOW: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLS}, {NOW_MS} FROM uwf_runs WHERE thread = $1"));
static ALL_RUNS: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLS} FROM uwf_runs ORDER BY queued_at, thread"));
static DROP_ENDED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "DELETE FROM uwf_runs WHERE thread IN ( \
             SELECT r.thread FROM uwf_runs r \
             WHERE (r.state <> 'claimed' OR r.lease_until < {NOW_MS}) \
               AND NOT EXISTS (SELECT 1 FROM uwf_threads t WHERE t.thread = r.thread) \
             FOR UPDATE SKIP LOCKED)"
    )
});
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH next AS ( \
             SELECT r.thread FROM uwf_runs r \
             WHERE (r.state = 'queued' OR (r.state = 'claimed' AND r.lease_until < {NOW_MS})) \
               AND (cardinality($1::text[]) = 0 OR r.workflow = ANY($1)) \
               AND EXISTS (SELECT 1 FROM uwf_threads t WHERE t.thread = r.thread) \
             ORDER BY r.queued_at, r.thread \
             LIMIT 1 \
             FOR UPDATE OF r SKIP LOCKED) \
         UPDATE uwf_runs u SET state = 'claimed', worker = $2, claim_id = $3, \
             claimed_at = {NOW_MS}, lease_until = {NOW_MS} + $4, \
             claims = u.claims + 1, error = NULL, failed_at = NULL \
         FROM next WHERE u.thread = next.thread \
         RETURNING {}",
        COLS.split(", ")
            .map(|c| format!("u.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
});

/// The shortest and longest `statement_timeout` of a renewal: a third of
/// the lease (the next renewal is due then anyway), within these bounds.
const RENEW_TIMEOUT_MIN: Duration = Duration::from_secs(1);
const RENEW_TIMEOUT_MAX: Duration = Duration::from_secs(10);

/// How long an enqueue or release waits for a row lock before failing as
/// unavailable (as the other mutations of the store).
const LOCK_TIMEOUT: &str = "30s";

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The `statement_timeout` of a renewal with `lease`, in ms.
fn renew_timeout(lease: Duration) -> i64 {
    millis((lease / 3).clamp(RENEW_TIMEOUT_MIN, RENEW_TIMEOUT_MAX))
}

impl PgStore {
    /// A time column as ms since the Unix epoch.
    fn ms_at(&self, row: &Row, idx: usize, thread: &str) -> Result<u64, PgError> {
        let v: i64 = row.get(idx);
        u64::try_from(v).map_err(|_| {
            self.corrupt(
                format!("run of thread {thread}"),
                format!("negative time {v}"),
            )
        })
    }

    /// A nullable column that the row's state requires.
    fn required<T>(&self, v: Option<T>, thread: &str, column: &str) -> Result<T, PgError> {
        v.ok_or_else(|| {
            self.corrupt(
                format!("run of thread {thread}"),
                format!("{column} is missing"),
            )
        })
    }

    /// A [`Run`] from a row of [`COLS`].
    fn run_at(&self, row: &Row) -> Result<Run, PgError> {
        let id: &str = row.get(0);
        let what = || format!("run of thread {id}");
        let thread: ThreadId = id
            .parse()
            .map_err(|e| self.corrupt(what(), format!("thread id: {e}")))?;
        let request: RunRequest = serde_json::from_str(row.get(2))
            .map_err(|e| self.corrupt(what(), format!("request: {e}")))?;
        let claims: i32 = row.get(4);
        let state: &str = row.get(5);
        let worker: Option<String> = row.get(6);
        let state = match state {
            "queued" => RunState::Queued,
            "claimed" => RunState::Claimed {
                worker: self.required(worker, id, "worker")?,
                claim_id: self.required(row.get(7), id, "claim_id")?,
                claimed_at: self.ms_at_opt(row, 8, id, "claimed_at")?,
                lease_until: self.ms_at_opt(row, 9, id, "lease_until")?,
            },
            "failed" => RunState::Failed {
                worker: self.required(worker, id, "worker")?,
                error: self.required(row.get(10), id, "error")?,
                at: self.ms_at_opt(row, 11, id, "failed_at")?,
            },
            other => return Err(self.corrupt(what(), format!("unknown state {other:?}"))),
        };
        Ok(Run {
            thread,
            workflow: row.get(1),
            request,
            queued_at: self.ms_at(row, 3, id)?,
            claims: u32::try_from(claims)
                .map_err(|_| self.corrupt(what(), format!("claims {claims}")))?,
            state,
        })
    }

    fn ms_at_opt(&self, row: &Row, idx: usize, thread: &str, column: &str) -> Result<u64, PgError> {
        let v: Option<i64> = row.get(idx);
        let v = self.required(v, thread, column)?;
        u64::try_from(v).map_err(|_| {
            self.corrupt(
                format!("run of thread {thread}"),
                format!("negative {column} {v}"),
            )
        })
    }

    /// The run of `thread` as `client` sees it now.
    fn run_in(
        &self,
        client: &mut impl GenericClient,
        thread: ThreadId,
    ) -> Result<Option<Run>, PgError> {
        client
            .query_opt(
                &format!("SELECT {COLS} FROM uwf_runs WHERE thread = $1"),
                &[&thread.to_string()],
            )
            .map_err(self.err("read a run"))?
            .map(|r| self.run_at(&r))
            .transpose()
    }

    /// Runs `f` in a transaction with `settings` (`SET LOCAL …`), committing
    /// if it succeeds.
    fn run_tx<T>(
        &self,
        settings: &str,
        f: impl FnOnce(&mut postgres::Transaction<'_>) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        let mut c = self.conn()?;
        let mut tx = c.transaction().map_err(self.err("begin a transaction"))?;
        tx.batch_execute(settings)
            .map_err(self.err("set the transaction up"))?;
        let out = f(&mut tx)?;
        tx.commit().map_err(self.err("commit"))?;
        Ok(out)
    }

    /// The claim's row is gone or held by another claim: what it is now.
    fn lost(
        &self,
        tx: &mut postgres::Transaction<'_>,
        claim: &Claim,
    ) -> Result<StateError, StateError> {
        let now = self.run_in(tx, claim.thread())?;
        Ok(lease_lost(claim, now.as_ref()))
    }
}

impl RunQueue for PgStore {
    fn enqueue(
        &self,
        thread: ThreadId,
        workflow: &str,
        request: RunRequest,
    ) -> Result<Run, StateError> {
        let id = thread.to_string();
        let body = serde_json::to_string(&request)
            .map_err(|e| self.corrupt(format!("request of thread {id}"), e.to_string()))?;
        self.run_tx(&format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"), |tx| {
            // Locks the thread's row against archiving until this commits,
            // so a run is never queued for a thread that ends meanwhile.
            let active = tx
                .query_opt(
                    "SELECT 1 FROM uwf_threads WHERE thread = $1 FOR KEY SHARE",
                    &[&id],
                )
                .map_err(self.err("read a head"))?;
            if active.is_none() {
                return Err(StateError::NotActive { thread });
            }
            // A failed run is replaced; a queued or claimed one is kept.
            let inserted = tx
                .query_opt(
                    &format!(
                        "INSERT INTO uwf_runs (thread, workflow, request, queued_at, claims, state) \
                         VALUES ($1, $2, $3, {NOW_MS}, 0, 'queued') \
                         ON CONFLICT (thread) DO UPDATE SET workflow = excluded.workflow, \
                             request = excluded.request, queued_at = excluded.queued_at, \
                             claims = 0, state = 'queued', worker = NULL, claim_id = NULL, \
                             claimed_at = NULL, lease_until = NULL, error = NULL, failed_at = NULL \
                         WHERE uwf_runs.state = 'failed' \
                         RETURNING {COLS}"
                    ),
                    &[&id, &workflow, &body],
                )
                .map_err(self.err("queue a run"))?;
            if let Some(row) = inserted {
                return Ok(self.run_at(&row)?);
            }
            // The conflicting row is locked by the INSERT until commit: it
            // is still there, queued or claimed.
            let row = tx
                .query_one(
                    RUN_AND_NOW.as_str(),
                    &[&id],
                )
                .map_err(self.err("read a run"))?;
            let old = self.run_at(&row)?;
            let now = self.ms_at(&row, 12, &id)?;
            let state = old.busy(now).unwrap_or_else(|| "failed".to_string());
            Err(StateError::AlreadyQueued { thread, state })
        })
    }

    fn runs(&self) -> Result<Vec<Run>, StateError> {
        let rows = self
            .read_conn()?
            .query(ALL_RUNS.as_str(), &[])
            .map_err(self.err("list the runs"))?;
        Ok(rows
            .iter()
            .map(|r| self.run_at(r))
            .collect::<Result<_, _>>()?)
    }

    fn run_of(&self, thread: ThreadId) -> Result<Option<Run>, StateError> {
        Ok(self.run_in(&mut *self.read_conn()?, thread)?)
    }

    fn claim(
        &self,
        worker: &str,
        workflows: &[String],
        lease: Duration,
    ) -> Result<Option<Claim>, StateError> {
        let claim_id = ulid::Ulid::new().to_string();
        let mut c = self.conn()?;
        // Runs of threads that ended while queued, and failed runs of
        // threads that ended since: of no use to anyone. Rows another
        // claimer holds are left to it.
        c.execute(DROP_ENDED.as_str(), &[])
            .map_err(self.err("drop the runs of ended threads"))?;
        let row = c
            .query_opt(
                CLAIM.as_str(),
                &[&workflows, &worker, &claim_id, &millis(lease)],
            )
            .map_err(self.err("claim a run"))?;
        let Some(row) = row else { return Ok(None) };
        let run = self.run_at(&row)?;
        let lease_until = match &run.state {
            RunState::Claimed { lease_until, .. } => *lease_until,
            other => {
                return Err(self
                    .corrupt(
                        format!("run of thread {}", run.thread),
                        format!("claimed, but reads back as {other:?}"),
                    )
                    .into());
            }
        };
        Ok(Some(Claim {
            run,
            worker: worker.to_owned(),
            claim_id,
            lease_until,
        }))
    }

    fn renew(&self, claim: &mut Claim, lease: Duration) -> Result<(), StateError> {
        let settings = format!(
            "SET LOCAL statement_timeout = {}; SET LOCAL lock_timeout = {0}",
            renew_timeout(lease)
        );
        let run = self.run_tx(&settings, |tx| {
            let row = tx
                .query_opt(
                    &format!(
                        "UPDATE uwf_runs SET lease_until = {NOW_MS} + $3 \
                         WHERE thread = $1 AND claim_id = $2 AND state = 'claimed' \
                         RETURNING {COLS}"
                    ),
                    &[&claim.thread().to_string(), &claim.claim_id, &millis(lease)],
                )
                .map_err(self.err("renew a lease"))?;
            match row {
                Some(row) => Ok(self.run_at(&row)?),
                None => Err(self.lost(tx, claim)?),
            }
        })?;
        if let RunState::Claimed { lease_until, .. } = &run.state {
            claim.lease_until = *lease_until;
        }
        claim.run = run;
        Ok(())
    }

    fn release(&self, claim: &Claim, outcome: RunOutcome) -> Result<(), StateError> {
        let id = claim.thread().to_string();
        let held = "thread = $1 AND claim_id = $2 AND state = 'claimed'";
        self.run_tx(
            &format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"),
            |tx| {
                let n = match &outcome {
                    RunOutcome::Finished => tx.execute(
                        &format!("DELETE FROM uwf_runs WHERE {held}"),
                        &[&id, &claim.claim_id],
                    ),
                    RunOutcome::Failed(error) => tx.execute(
                        &format!(
                            "UPDATE uwf_runs SET state = 'failed', worker = $3, error = $4, \
                         failed_at = {NOW_MS}, claim_id = NULL, claimed_at = NULL, \
                         lease_until = NULL WHERE {held}"
                        ),
                        &[&id, &claim.claim_id, &claim.worker, error],
                    ),
                    RunOutcome::Interrupted => tx.execute(
                        &format!(
                            "UPDATE uwf_runs SET state = 'queued', worker = NULL, claim_id = NULL, \
                         claimed_at = NULL, lease_until = NULL WHERE {held}"
                        ),
                        &[&id, &claim.claim_id],
                    ),
                }
                .map_err(self.err("release a run"))?;
                if n == 0 {
                    return Err(self.lost(tx, claim)?);
                }
                Ok(())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_time_out_within_a_third_of_the_lease_and_bounds() {
        assert_eq!(renew_timeout(Duration::from_secs(30)), 10_000);
        assert_eq!(renew_timeout(Duration::from_secs(6)), 2_000);
        assert_eq!(renew_timeout(Duration::from_millis(900)), 1_000);
        assert_eq!(renew_timeout(Duration::from_secs(3600)), 10_000);
    }

    #[test]
    fn the_returned_columns_are_the_read_columns() {
        assert_eq!(COLS.split(", ").count(), 12);
    }
}
