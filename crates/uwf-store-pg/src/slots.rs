//! Per-workflow concurrency slots (docs/state.md, "Slots") shared by every machine using
//! the database.
//!
//! # Slots
//!
//! Each workflow gets a small integer id (`uwf_slot_workflows`). Slot `i`
//! of workflow `w` is the **session** advisory lock `(w, i)` (the two-key
//! form). A holder takes a connection of its own, tries
//! `pg_try_advisory_lock(w, i)` for `i` in `0..concurrency`, and keeps the
//! connection, and so the lock, for as long as it holds the slot
//! ([`PgSlot`]). Dropping the hold unlocks it. PostgreSQL releases session
//! locks when the session ends for any reason: a holder that exits, is
//! killed (`kill -9`), loses its machine or its network, or whose backend
//! is terminated never keeps a slot (once the server notices the
//! connection is gone: every session asks for TCP keepalives that bound a
//! silent network loss to about 25 s).
//!
//! # The queue (`overflow: queue`)
//!
//! The first-in first-out queue of the filesystem backend, in a table:
//!
//! 1. **Tickets** are rows of `uwf_slot_tickets`, ordered by `seq` (a
//!    sequence). A waiter holds the session advisory lock `(-w, seq mod
//!    2^31)` for as long as it waits, taken *before* its row is committed,
//!    so a visible ticket is always locked while its owner lives. A ticket
//!    whose lock can be taken belongs to a dead session: it is **stale**,
//!    and whoever notices deletes it (while holding its lock).
//! 2. **Joining** runs in one transaction holding a transaction advisory
//!    lock of the workflow (milliseconds, never while waiting). The joiner
//!    deletes stale tickets; if no live ticket is left it tries the slots
//!    directly and is done if one is free. Otherwise, while `maxQueue` or
//!    more tickets wait, it marks the oldest `evicted`; then it adds its
//!    own ticket.
//! 3. **Waiting.** Every poll interval a waiter reads its ticket (gone or
//!    evicted: it fails with [`SlotError::Evicted`]) and counts the live,
//!    not evicted tickets before its own (probing and deleting stale ones).
//!    With none ahead it is the head of the queue and tries the slots.
//! 4. **Leaving.** The head that got a slot deletes its ticket `WHERE NOT
//!    evicted`. Eviction (an `UPDATE … WHERE NOT evicted`) and leaving race
//!    on one row and PostgreSQL's row lock lets exactly one win: if the
//!    delete matched nothing, the head was evicted and frees the slot it
//!    just took.
//!
//! With `overflow: drop` there is no queue: no free slot means
//! [`SlotError::Full`] at once.

use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;
use postgres::GenericClient;
use uwf_protocol::{Overflow, WorkflowLimits};
use uwf_state::SlotHold;
use uwf_state::slots::{DEFAULT_POLL, SlotError, Waiting};

use crate::{Inner, PgStore};

/// A held slot: a connection of its own holding the slot's advisory lock.
/// Dropping it unlocks the slot (closing the connection if that fails).
pub struct PgSlot {
    client: Option<Client>,
    inner: std::sync::Arc<Inner>,
    workflow_id: i32,
    index: u32,
}

impl std::fmt::Debug for PgSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSlot")
            .field("workflow_id", &self.workflow_id)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl PgSlot {
    /// Whether the connection holding the slot is still up. A hold whose
    /// connection dropped no longer guarantees the slot (PostgreSQL freed
    /// it); a long-running holder may check this to stop early.
    pub fn is_alive(&mut self) -> bool {
        match self.client.as_mut() {
            Some(c) => c.is_valid(Duration::from_secs(5)).is_ok(),
            None => false,
        }
    }
}

impl SlotHold for PgSlot {
    fn index(&self) -> u32 {
        self.index
    }
}

impl Drop for PgSlot {
    fn drop(&mut self) {
        let Some(mut client) = self.client.take() else {
            return;
        };
        let index = i32::try_from(self.index).unwrap_or(i32::MAX);
        match client.query_one(
            "SELECT pg_advisory_unlock($1, $2)",
            &[&self.workflow_id, &index],
        ) {
            Ok(row) if row.get::<_, bool>(0) => self.inner.give_back(client),
            // Not held any more (the connection was cut) or unreachable:
            // close it so nothing can linger.
            _ => drop(client),
        }
    }
}

/// The advisory-lock key of a ticket.
fn ticket_key(seq: i64) -> i32 {
    i32::try_from(seq & 0x7fff_ffff).unwrap_or(0)
}

struct Ctx<'a> {
    store: &'a PgStore,
    workflow: &'a str,
    id: i32,
    limits: WorkflowLimits,
}

impl Ctx<'_> {
    fn err(&self, what: &'static str) -> impl Fn(postgres::Error) -> SlotError + '_ {
        move |e| SlotError::from(self.store.err(what)(e))
    }

    /// Takes any free slot on `client`; the index, or `None` if all are
    /// taken.
    fn try_slots(&self, client: &mut impl GenericClient) -> Result<Option<u32>, SlotError> {
        for index in 0..self.limits.concurrency() {
            let key = i32::try_from(index).unwrap_or(i32::MAX);
            let got: bool = client
                .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&self.id, &key])
                .map_err(self.err("try a concurrency slot"))?
                .get(0);
            if got {
                return Ok(Some(index));
            }
        }
        Ok(None)
    }

    fn hold(&self, client: Client, index: u32) -> PgSlot {
        PgSlot {
            client: Some(client),
            inner: self.store.inner().clone(),
            workflow_id: self.id,
            index,
        }
    }

    /// The tickets of the workflow up to `upto` (all when `None`), oldest
    /// first, as `(seq, evicted, live)`; stale ones are deleted on the way
    /// (and not returned).
    fn tickets(
        &self,
        client: &mut impl GenericClient,
        upto: Option<i64>,
        own: Option<i64>,
    ) -> Result<Vec<(i64, bool)>, SlotError> {
        let rows = client
            .query(
                "SELECT seq, evicted, \
                     CASE WHEN seq = $3::bigint THEN false \
                          ELSE pg_try_advisory_lock(-($1::int4), (seq & 2147483647)::int4) END AS stale \
                 FROM uwf_slot_tickets \
                 WHERE workflow_id = $1 AND ($2::bigint IS NULL OR seq <= $2) ORDER BY seq",
                &[&self.id, &upto, &own],
            )
            .map_err(self.err("read the queue"))?;
        let mut live = Vec::new();
        let mut stale = Vec::new();
        for r in &rows {
            let seq: i64 = r.get(0);
            if r.get::<_, bool>(2) {
                stale.push(seq);
            } else {
                live.push((seq, r.get::<_, bool>(1)));
            }
        }
        if !stale.is_empty() {
            tracing::debug!(
                workflow = self.workflow,
                ?stale,
                "removing stale queue tickets"
            );
            client
                .execute(
                    "DELETE FROM uwf_slot_tickets WHERE seq = ANY($1)",
                    &[&stale],
                )
                .map_err(self.err("remove stale queue tickets"))?;
            let keys: Vec<i32> = stale.iter().map(|s| ticket_key(*s)).collect();
            client
                .execute(
                    "SELECT pg_advisory_unlock(-($1::int4), k) FROM unnest($2::int4[]) AS k",
                    &[&self.id, &keys],
                )
                .map_err(self.err("remove stale queue tickets"))?;
        }
        Ok(live)
    }

    /// Leaves the queue without a slot: deletes the ticket, unlocks it.
    fn forget(&self, client: &mut Client, seq: i64) -> Result<(), SlotError> {
        client
            .execute("DELETE FROM uwf_slot_tickets WHERE seq = $1", &[&seq])
            .map_err(self.err("leave the queue"))?;
        client
            .execute(
                "SELECT pg_advisory_unlock(-($1::int4), $2)",
                &[&self.id, &ticket_key(seq)],
            )
            .map_err(self.err("leave the queue"))?;
        Ok(())
    }
}

/// The id of `workflow` in `uwf_slot_workflows`, created if needed.
fn workflow_id(store: &PgStore, client: &mut Client, workflow: &str) -> Result<i32, SlotError> {
    if let Some(id) = store.inner().workflow_ids().get(workflow) {
        return Ok(*id);
    }
    // A row inserted by a concurrent transaction may be invisible to this
    // statement's snapshot: look again.
    for _ in 0..5 {
        let row = client
            .query_opt(
                "WITH new AS (INSERT INTO uwf_slot_workflows (name) VALUES ($1) \
                              ON CONFLICT (name) DO NOTHING RETURNING id) \
                 SELECT id FROM new UNION ALL SELECT id FROM uwf_slot_workflows WHERE name = $1 \
                 LIMIT 1",
                &[&workflow],
            )
            .map_err(|e| SlotError::from(store.err("name a workflow's slots")(e)))?;
        if let Some(row) = row {
            let id: i32 = row.get(0);
            store.inner().workflow_ids().insert(workflow.to_owned(), id);
            return Ok(id);
        }
    }
    Err(SlotError::from(store.corrupt(
        format!("slots of workflow {workflow:?}"),
        "the workflow has no id in uwf_slot_workflows",
    )))
}

/// Takes a slot of `workflow` as `limits` say (see the module docs).
pub(crate) fn acquire(
    store: &PgStore,
    workflow: &str,
    limits: WorkflowLimits,
    poll: Option<Duration>,
    on_wait: &mut dyn FnMut(&Waiting) -> bool,
) -> Result<PgSlot, SlotError> {
    // Make sure the schema exists before using a raw connection.
    drop(store.conn().map_err(SlotError::from)?);
    // On any error the connection is dropped, not pooled: closing it
    // releases every lock it may hold.
    let mut client = store.inner().take().map_err(SlotError::from)?;
    let id = workflow_id(store, &mut client, workflow)?;
    let ctx = Ctx {
        store,
        workflow,
        id,
        limits,
    };
    match limits.overflow() {
        Overflow::Drop => match ctx.try_slots(&mut client)? {
            Some(index) => Ok(ctx.hold(client, index)),
            None => {
                store.inner().give_back(client);
                Err(SlotError::Full {
                    workflow: workflow.to_owned(),
                    concurrency: limits.concurrency(),
                })
            }
        },
        Overflow::Queue => queued(&ctx, client, poll.unwrap_or(DEFAULT_POLL), on_wait),
    }
}

fn queued(
    ctx: &Ctx<'_>,
    mut client: Client,
    poll: Duration,
    on_wait: &mut dyn FnMut(&Waiting) -> bool,
) -> Result<PgSlot, SlotError> {
    let started = Instant::now();
    let seq = match join(ctx, &mut client)? {
        Joined::Slot(index) => return Ok(ctx.hold(client, index)),
        Joined::Ticket(seq) => seq,
    };
    let evicted = || SlotError::Evicted {
        workflow: ctx.workflow.to_owned(),
        max_queue: ctx.limits.max_queue(),
        waited: started.elapsed(),
    };
    loop {
        let tickets = ctx.tickets(&mut client, Some(seq), Some(seq))?;
        match tickets.last() {
            Some((s, false)) if *s == seq => {}
            // Evicted (or, impossibly, deleted as stale).
            _ => {
                ctx.forget(&mut client, seq)?;
                return Err(evicted());
            }
        }
        let ahead = tickets.iter().filter(|(s, ev)| *s != seq && !ev).count();
        if ahead == 0
            && let Some(index) = ctx.try_slots(&mut client)?
        {
            let left = client
                .execute(
                    "DELETE FROM uwf_slot_tickets WHERE seq = $1 AND NOT evicted",
                    &[&seq],
                )
                .map_err(ctx.err("leave the queue"))?;
            if left == 1 {
                client
                    .execute(
                        "SELECT pg_advisory_unlock(-($1::int4), $2)",
                        &[&ctx.id, &ticket_key(seq)],
                    )
                    .map_err(ctx.err("leave the queue"))?;
                return Ok(ctx.hold(client, index));
            }
            // Evicted between our last look and now: the eviction counted
            // us as waiting, so give the slot back.
            let index = i32::try_from(index).unwrap_or(i32::MAX);
            client
                .execute("SELECT pg_advisory_unlock($1, $2)", &[&ctx.id, &index])
                .map_err(ctx.err("give a slot back"))?;
            ctx.forget(&mut client, seq)?;
            ctx.store.inner().give_back(client);
            return Err(evicted());
        }
        let waiting = Waiting {
            ahead,
            waited: started.elapsed(),
        };
        if !on_wait(&waiting) {
            ctx.forget(&mut client, seq)?;
            ctx.store.inner().give_back(client);
            return Err(SlotError::Cancelled {
                workflow: ctx.workflow.to_owned(),
            });
        }
        thread::sleep(poll);
    }
}

enum Joined {
    Slot(u32),
    Ticket(i64),
}

/// Step 2 of the protocol, in one transaction under the workflow's join
/// lock.
fn join(ctx: &Ctx<'_>, client: &mut Client) -> Result<Joined, SlotError> {
    let mut tx = client.transaction().map_err(ctx.err("join the queue"))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('uwf-slots:' || $1::text, 0))",
        &[&ctx.id.to_string()],
    )
    .map_err(ctx.err("lock the queue"))?;
    let live: Vec<i64> = ctx
        .tickets(&mut tx, None, None)?
        .into_iter()
        .filter(|(_, evicted)| !evicted)
        .map(|(s, _)| s)
        .collect();
    if live.is_empty()
        && let Some(index) = ctx.try_slots(&mut tx)?
    {
        tx.commit().map_err(ctx.err("join the queue"))?;
        return Ok(Joined::Slot(index));
    }
    let max_queue = usize::try_from(ctx.limits.max_queue()).unwrap_or(usize::MAX);
    let mut live = live.into_iter();
    while live.len() >= max_queue {
        let Some(oldest) = live.next() else { break };
        tracing::debug!(
            workflow = ctx.workflow,
            ticket = oldest,
            "queue full: evicting the oldest waiter"
        );
        tx.execute(
            "UPDATE uwf_slot_tickets SET evicted = true WHERE seq = $1 AND NOT evicted",
            &[&oldest],
        )
        .map_err(ctx.err("evict a waiter"))?;
    }
    let seq: i64 = tx
        .query_one(
            "SELECT nextval(pg_get_serial_sequence('uwf_slot_tickets', 'seq'))",
            &[],
        )
        .map_err(ctx.err("join the queue"))?
        .get(0);
    // Locked before the row is visible: a visible ticket is never stale
    // while its owner lives.
    tx.execute(
        "SELECT pg_advisory_lock(-($1::int4), $2)",
        &[&ctx.id, &ticket_key(seq)],
    )
    .map_err(ctx.err("join the queue"))?;
    tx.execute(
        "INSERT INTO uwf_slot_tickets (seq, workflow_id) VALUES ($1, $2)",
        &[&seq, &ctx.id],
    )
    .map_err(ctx.err("join the queue"))?;
    tx.commit().map_err(ctx.err("join the queue"))?;
    Ok(Joined::Ticket(seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_keys_stay_non_negative() {
        assert_eq!(ticket_key(1), 1);
        assert_eq!(ticket_key(0x8000_0001), 1);
        assert!(ticket_key(i64::MAX) >= 0);
    }
}
