//! [`ThreadStore`] on PostgreSQL.
//!
//! Every mutation is one transaction that first takes the store lock
//! ([`STORE_LOCK`]) in **shared** mode, so mutations run side by side;
//! [`while_collecting`](Collecting::while_collecting) takes it in **exclusive**
//! mode, so garbage collection sees a stable set of roots. Reads take no
//! lock: every statement sees a committed snapshot.
//!
//! Compare-and-swap of a head is one `UPDATE … WHERE thread = $1 AND head
//! = $2`: under PostgreSQL's row locking, of several racing updates from
//! the same expected head exactly one matches; the others re-check the
//! row after the winner commits and match nothing.

use std::time::Duration;

use postgres::Transaction;
use uwf_protocol::{
    AttemptsIndex, Hash, HistoryEntry, ThreadId, ThreadsIndex, WaitingIndex, WaitingRecord,
    WorkflowConfig, WorkflowLimits, WorkflowRegistry,
};
use uwf_state::slots::{SlotError, Waiting};
use uwf_state::{
    Collecting, ConcurrencySlots, FsState, GcEpoch, GuardNeed, Heads, NodeGuard, NodeRow, Registry,
    Settings, SideTables, SlotHold, StateError, ThreadStore,
};

use crate::{PgError, PgStore};

/// Advisory lock key (bigint space) of the whole store: shared by every
/// mutation, exclusive in `while_collecting`. "uwf_stat" in ASCII.
pub(crate) const STORE_LOCK: i64 = 0x7577_665f_7374_6174;

/// How long a mutation waits for a lock before failing as unavailable
/// (the filesystem store's lock timeout).
const LOCK_TIMEOUT: &str = "30s";

/// A head's move as [`Heads::swap_head`] makes it, for `EXECUTE` after
/// the store lock (`swap_head_at_once`): only from the expected head, and
/// only if the collection epoch is still `$4` unless that is null.
const MOVE_HEAD: &str = "PREPARE uwf_move_head (text, text, text, int8) AS \
     UPDATE uwf_threads SET head = $3 WHERE thread = $1 AND head = $2 \
     AND ($4 IS NULL OR (SELECT epoch FROM uwf_gc) = $4)";

/// [`MOVE_HEAD`] that also stores a step's nodes (arrays `$5`–`$8`, as
/// `INSERT_NODES` in cas.rs stores them), moving the head only if every
/// node's row holds exactly the bytes given.
const STORE_STEP: &str = "PREPARE uwf_store_step \
     (text, text, text, int8, text[], text[], bytea[], int8[]) AS \
     WITH input (hash, type_hash, payload, stored_at) AS \
         (SELECT * FROM unnest($5, $6, $7, $8)), \
     stored AS (INSERT INTO uwf_nodes (hash, type_hash, payload, stored_at) \
         SELECT hash, type_hash, payload, stored_at FROM input ON CONFLICT (hash) \
         DO UPDATE SET fresh_at = excluded.stored_at \
         RETURNING (SELECT uwf_nodes.type_hash = i.type_hash AND uwf_nodes.payload = i.payload \
             FROM input i WHERE i.hash = uwf_nodes.hash) AS same) \
     UPDATE uwf_threads SET head = $3 WHERE thread = $1 AND head = $2 \
     AND ($4 IS NULL OR (SELECT epoch FROM uwf_gc) = $4) \
     AND (SELECT bool_and(same) AND count(*) = (SELECT count(*) FROM input) FROM stored)";

/// The most payload bytes written into the text of one statement (as
/// hexadecimal, twice as many) by [`Heads::swap_head_storing`]; larger
/// nodes take the general path, whose statements carry them as parameters.
const MAX_INLINE_PAYLOADS: usize = 1 << 20;

fn now_ms() -> i64 {
    i64::try_from(uwf_state::state::now_ms()).unwrap_or(i64::MAX)
}

impl PgStore {
    /// The collection epoch as `client` sees it.
    fn epoch_in(&self, client: &mut impl postgres::GenericClient) -> Result<GcEpoch, PgError> {
        let row = client
            .query_opt("SELECT epoch FROM uwf_gc", &[])
            .map_err(self.err("read the collection epoch"))?;
        let Some(row) = row else {
            return Err(self.corrupt("the collection epoch (table uwf_gc)", "it has no row"));
        };
        let epoch: i64 = row.get(0);
        u64::try_from(epoch)
            .map(GcEpoch)
            .map_err(|_| self.corrupt("the collection epoch (table uwf_gc)", format!("{epoch}")))
    }

    /// Runs `guard`'s check inside a mutation (the store lock held shared,
    /// so no collection runs until the transaction ends).
    fn verify_guard(
        &self,
        tx: &mut Transaction<'_>,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        let now = if guard.needs_epoch() {
            self.epoch_in(tx)?
        } else {
            GcEpoch::default()
        };
        guard.verify(now)
    }

    /// Runs `f` in a transaction holding the store lock in shared mode
    /// (every mutation does), committing if it succeeds.
    fn mutate<T, E: From<PgError>>(
        &self,
        f: impl FnOnce(&mut Transaction<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut c = self.conn()?;
        let mut tx = c.transaction().map_err(self.err("begin a transaction"))?;
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'; SELECT pg_advisory_xact_lock_shared({STORE_LOCK})"
        ))
        .map_err(self.err("take the store lock"))?;
        let out = f(&mut tx)?;
        tx.commit().map_err(self.err("commit"))?;
        Ok(out)
    }

    /// The configuration text as stored, `None` if there is none.
    pub fn config_text(&self) -> Result<Option<String>, PgError> {
        let row = self
            .read_conn()?
            .query_opt("SELECT body FROM uwf_config", &[])
            .map_err(self.err("read the configuration"))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Replaces the configuration with `text` (YAML, as `config.yaml`),
    /// after checking that it parses; `None` removes it. Secrets do not
    /// belong here: they stay in the local `.env`.
    pub fn set_config(&self, text: Option<&str>) -> Result<(), StateError> {
        if let Some(text) = text {
            self.check_new_config(text)?;
        }
        self.mutate(|tx| -> Result<(), StateError> {
            match text {
                Some(text) => tx.execute(
                    "INSERT INTO uwf_config (only_row, body, updated_at) VALUES (true, $1, $2) \
                     ON CONFLICT (only_row) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
                    &[&text, &now_ms()],
                ),
                None => tx.execute("DELETE FROM uwf_config", &[]),
            }
            .map_err(self.err("write the configuration"))?;
            Ok(())
        })
    }

    /// Refuses a configuration text that would not parse, before it
    /// replaces the stored one.
    fn check_new_config(&self, text: &str) -> Result<(), StateError> {
        match uwf_state::parse_stored_config(&self.config_name(), text) {
            Ok(_) => Ok(()),
            Err(StateError::StoredConfig {
                origin,
                line,
                column,
                message,
            }) => Err(StateError::StoredConfig {
                origin,
                line,
                column,
                message: format!("the new text would be invalid (nothing was written): {message}"),
            }),
            Err(other) => Err(other),
        }
    }

    /// A hash read from column `idx` of a row; `what` names that value,
    /// its row and its table for the error (formatted only then).
    fn hash_at(
        &self,
        row: &postgres::Row,
        idx: usize,
        what: std::fmt::Arguments<'_>,
    ) -> Result<Hash, PgError> {
        let text: &str = row.get(idx);
        text.parse()
            .map_err(|e| self.corrupt(format!("{what} {text:?}"), format!("{e}")))
    }

    /// A thread id read from column `idx` of a row.
    fn thread_at(&self, row: &postgres::Row, idx: usize, table: &str) -> Result<ThreadId, PgError> {
        let text: &str = row.get(idx);
        text.parse().map_err(|e| {
            self.corrupt(
                format!("thread id {text:?} (table {table})"),
                format!("{e}"),
            )
        })
    }

    fn head_in(&self, tx: &mut Transaction<'_>, thread: ThreadId) -> Result<Option<Hash>, PgError> {
        let row = tx
            .query_opt(
                "SELECT head FROM uwf_threads WHERE thread = $1",
                &[&thread.to_string()],
            )
            .map_err(self.err("read a head"))?;
        row.map(|r| {
            self.hash_at(
                &r,
                0,
                format_args!("head of thread {thread} (table uwf_threads)"),
            )
        })
        .transpose()
    }

    fn parse_waiting(&self, thread: &str, text: &str) -> Result<WaitingRecord, PgError> {
        serde_json::from_str(text)
            .map_err(|e| self.corrupt(format!("waiting entry of thread {thread}"), e.to_string()))
    }

    fn history_entry(&self, row: &postgres::Row) -> Result<HistoryEntry, PgError> {
        let completed: i64 = row.get(3);
        Ok(HistoryEntry {
            thread: self.thread_at(row, 0, "uwf_history")?,
            workflow: self.hash_at(
                row,
                1,
                format_args!("workflow of a history entry (table uwf_history)"),
            )?,
            head: self.hash_at(
                row,
                2,
                format_args!("head of a history entry (table uwf_history)"),
            )?,
            completed_at: u64::try_from(completed)
                .map_err(|_| self.corrupt("history entry", format!("completed_at {completed}")))?,
            reason: row.get(4),
        })
    }
}

impl PgStore {
    /// The collection epoch as a column read it (`None`: table `uwf_gc`
    /// has no row).
    fn epoch_of(&self, epoch: Option<i64>) -> Result<GcEpoch, StateError> {
        epoch
            .and_then(|e| u64::try_from(e).ok())
            .map(GcEpoch)
            .ok_or_else(|| {
                self.corrupt("the collection epoch (table uwf_gc)", format!("{epoch:?}"))
                    .into()
            })
    }

    /// [`Heads::swap_head`] in one round trip, when the guard is settled by
    /// the epoch alone: the store lock, then (with `nodes`, stored in the
    /// same statement) the move only if the head and the epoch are still
    /// the ones expected, sent as one query string, which PostgreSQL runs
    /// as one transaction, each statement in a snapshot taken after the one
    /// before (so the epoch is read under the lock, as `mutate` reads it).
    /// `false` when nothing moved (another head, another epoch, a node
    /// already stored with other bytes, or values it would not write into
    /// SQL text): the general path then tells a conflict from a
    /// collection, repairs a damaged node and runs the guard's check. A
    /// transaction and its statements sent one by one were five round
    /// trips, each waking both processes, and a step's nodes one more
    /// transaction, whose commit waited for the disk too (docs/postgres.md,
    /// "What a step costs the database"). The statement that stores and
    /// moves is prepared once per connection ([`MOVE_HEAD`],
    /// [`STORE_STEP`]) and executed with its values written as literals.
    fn swap_head_at_once(
        &self,
        thread: ThreadId,
        expected: Hash,
        new: Hash,
        nodes: &[NodeRow<'_>],
        guard: &NodeGuard<'_>,
    ) -> Result<bool, StateError> {
        let epoch = match guard.need() {
            GuardNeed::Nothing => None,
            GuardNeed::EpochStill(e) => Some(e),
            GuardNeed::Check => return Ok(false),
        };
        if nodes.iter().map(|n| n.payload.len()).sum::<usize>() > MAX_INLINE_PAYLOADS {
            return Ok(false);
        }
        // Ids and hashes are Crockford Base32; anything else stays out of
        // SQL text (payloads go in as hexadecimal).
        let text = |h: &dyn std::fmt::Display| {
            let s = h.to_string();
            s.bytes().all(|b| b.is_ascii_alphanumeric()).then_some(s)
        };
        let (Some(thread), Some(expected), Some(new)) =
            (text(&thread), text(&expected), text(&new))
        else {
            return Ok(false);
        };
        let epoch = match epoch {
            Some(e) => e.0.to_string(),
            None => "NULL".to_owned(),
        };
        let mut sql = format!(
            "SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'; \
             SELECT pg_advisory_xact_lock_shared({STORE_LOCK}); "
        );
        let (name, prepare) = if nodes.is_empty() {
            sql.push_str(&format!(
                "EXECUTE uwf_move_head('{thread}', '{expected}', '{new}', {epoch})"
            ));
            ("uwf_move_head", MOVE_HEAD)
        } else {
            let (mut hashes, mut types, mut payloads, mut times) =
                (Vec::new(), Vec::new(), String::new(), Vec::new());
            for n in nodes {
                let (Some(hash), Some(type_hash)) = (text(&n.hash), text(&n.type_hash)) else {
                    return Ok(false);
                };
                hashes.push(format!("'{hash}'"));
                types.push(format!("'{type_hash}'"));
                times.push(i64::try_from(n.timestamp).unwrap_or(i64::MAX).to_string());
                payloads.reserve(2 * n.payload.len() + 16);
                if !payloads.is_empty() {
                    payloads.push_str(", ");
                }
                payloads.push_str("'\\x");
                for b in n.payload {
                    for digit in [b >> 4, b & 0xf] {
                        payloads.push(char::from_digit(u32::from(digit), 16).unwrap_or('0'));
                    }
                }
                payloads.push('\'');
            }
            sql.push_str(&format!(
                "EXECUTE uwf_store_step('{thread}', '{expected}', '{new}', {epoch}, \
                 ARRAY[{}]::text[], ARRAY[{}]::text[], ARRAY[{payloads}]::bytea[], ARRAY[{}]::int8[])",
                hashes.join(", "),
                types.join(", "),
                times.join(", ")
            ));
            ("uwf_store_step", STORE_STEP)
        };
        let answers = self
            .conn()?
            .simple_query_executing(name, prepare, &sql)
            .map_err(self.err(if nodes.is_empty() {
                "move a head"
            } else {
                "store a step's nodes and move a head"
            }))?;
        let moved = answers.iter().rev().find_map(|m| match m {
            postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        });
        Ok(moved == Some(1))
    }

    /// The collection epoch and the head of `thread` in the first two
    /// columns of `row` ([`Heads::epoch_and_head`], [`ThreadStore::step_start`]).
    fn epoch_and_head_of(
        &self,
        thread: ThreadId,
        row: &postgres::Row,
    ) -> Result<(GcEpoch, Option<Hash>), StateError> {
        let epoch = self.epoch_of(row.get(0))?;
        let head = row
            .get::<_, Option<&str>>(1)
            .map(|text| {
                text.parse().map_err(|e| {
                    self.corrupt(
                        format!("head of thread {thread} (table uwf_threads) {text:?}"),
                        format!("{e}"),
                    )
                })
            })
            .transpose()?;
        Ok((epoch, head))
    }
}

impl ThreadStore for PgStore {
    fn describe(&self) -> String {
        self.url().to_owned()
    }

    fn read_in_one_snapshot(&self) -> Result<(), StateError> {
        Ok(PgStore::read_in_one_snapshot(self)?)
    }

    fn head_notices(&self) -> Option<std::sync::Arc<dyn uwf_state::HeadNotices>> {
        let listener: std::sync::Arc<dyn uwf_state::HeadNotices> = self.inner().listener();
        Some(listener)
    }

    fn step_start(&self, thread: ThreadId) -> Result<uwf_state::StepStart, StateError> {
        // One statement, one snapshot: the epoch, the head and the
        // configuration were a transaction each.
        let row = self
            .read_conn()?
            .query_one(
                "SELECT (SELECT epoch FROM uwf_gc), (SELECT head FROM uwf_threads WHERE thread = $1), \
                 (SELECT body FROM uwf_config)",
                &[&thread.to_string()],
            )
            .map_err(self.err("read a head"))?;
        let (epoch, head) = self.epoch_and_head_of(thread, &row)?;
        let config = match row.get::<_, Option<String>>(2) {
            Some(text) => uwf_state::parse_stored_config(&self.config_name(), &text).map(Some),
            None => Ok(None),
        };
        Ok(uwf_state::StepStart {
            epoch,
            head,
            config,
        })
    }
}

impl Heads for PgStore {
    fn thread_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        let row = self
            .read_conn()?
            .query_opt(
                "SELECT head FROM uwf_threads WHERE thread = $1",
                &[&thread.to_string()],
            )
            .map_err(self.err("read a head"))?;
        Ok(row
            .map(|r| {
                self.hash_at(
                    &r,
                    0,
                    format_args!("head of thread {thread} (table uwf_threads)"),
                )
            })
            .transpose()?)
    }

    fn epoch_and_head(&self, thread: ThreadId) -> Result<(GcEpoch, Option<Hash>), StateError> {
        let row = self
            .read_conn()?
            .query_one(
                "SELECT (SELECT epoch FROM uwf_gc), (SELECT head FROM uwf_threads WHERE thread = $1)",
                &[&thread.to_string()],
            )
            .map_err(self.err("read a head"))?;
        self.epoch_and_head_of(thread, &row)
    }

    fn threads(&self) -> Result<ThreadsIndex, StateError> {
        let rows = self
            .read_conn()?
            .query("SELECT thread, head FROM uwf_threads", &[])
            .map_err(self.err("list the threads"))?;
        let mut out = ThreadsIndex::new();
        for r in &rows {
            let thread = self.thread_at(r, 0, "uwf_threads")?;
            let head = self.hash_at(
                r,
                1,
                format_args!("head of thread {thread} (table uwf_threads)"),
            )?;
            out.insert(thread, head);
        }
        Ok(out)
    }

    fn insert_thread(
        &self,
        thread: ThreadId,
        head: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        self.mutate(|tx| {
            self.verify_guard(tx, guard)?;
            let n = tx
                .execute(
                    "INSERT INTO uwf_threads (thread, head) VALUES ($1, $2) ON CONFLICT (thread) DO NOTHING",
                    &[&thread.to_string(), &head.to_string()],
                )
                .map_err(self.err("add a thread"))?;
            if n == 0 {
                return Err(StateError::ThreadExists { thread });
            }
            Ok(())
        })
    }

    fn swap_head(
        &self,
        thread: ThreadId,
        expected: Hash,
        new: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<(), StateError> {
        if expected != new && self.swap_head_at_once(thread, expected, new, &[], guard)? {
            return Ok(());
        }
        self.mutate(|tx| {
            // The head moves and the epoch is read in one statement. The
            // guard is verified after the update, in the same transaction:
            // the store lock it holds keeps a collection from moving the
            // epoch until it ends, and a failed check rolls the move back.
            let row = tx
                .query_opt(
                    "UPDATE uwf_threads SET head = $3 WHERE thread = $1 AND head = $2 \
                     RETURNING (SELECT epoch FROM uwf_gc)",
                    &[&thread.to_string(), &expected.to_string(), &new.to_string()],
                )
                .map_err(self.err("move a head"))?;
            let Some(row) = row else {
                return Err(StateError::Conflict {
                    thread,
                    expected,
                    actual: self.head_in(tx, thread)?,
                });
            };
            if expected != new {
                guard.verify(self.epoch_of(row.get(0))?)?;
            }
            Ok(())
        })
    }

    fn swap_head_storing(
        &self,
        thread: ThreadId,
        expected: Hash,
        new: Hash,
        nodes: &[NodeRow<'_>],
        guard: &NodeGuard<'_>,
    ) -> Result<bool, StateError> {
        if expected == new {
            return Ok(false);
        }
        self.swap_head_at_once(thread, expected, new, nodes, guard)
    }

    fn archive(
        &self,
        thread: ThreadId,
        workflow: Hash,
        expected_head: Option<Hash>,
        reason: &str,
    ) -> Result<HistoryEntry, StateError> {
        self.mutate(|tx| {
            let removed = tx
                .query_opt(
                    "DELETE FROM uwf_threads WHERE thread = $1 AND ($2::text IS NULL OR head = $2) \
                     RETURNING head",
                    &[&thread.to_string(), &expected_head.map(|h| h.to_string())],
                )
                .map_err(self.err("archive a thread"))?;
            let Some(row) = removed else {
                return Err(match expected_head {
                    Some(expected) => StateError::Conflict {
                        thread,
                        expected,
                        actual: self.head_in(tx, thread)?,
                    },
                    None => StateError::NotActive { thread },
                });
            };
            let entry = HistoryEntry {
                thread,
                workflow,
                head: self.hash_at(
                    &row,
                    0,
                    format_args!("head of thread {thread} (table uwf_threads)"),
                )?,
                completed_at: uwf_state::state::now_ms(),
                reason: Some(reason.to_owned()),
            };
            tx.execute(
                "INSERT INTO uwf_history (thread, workflow, head, completed_at, reason) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &entry.thread.to_string(),
                    &entry.workflow.to_string(),
                    &entry.head.to_string(),
                    &i64::try_from(entry.completed_at).unwrap_or(i64::MAX),
                    &entry.reason,
                ],
            )
            .map_err(self.err("append to the history"))?;
            // A marker left by a `uwf` that died mid-step would otherwise
            // stay (stale) for a thread that never runs again.
            tx.execute(
                "DELETE FROM uwf_running WHERE thread = $1",
                &[&entry.thread.to_string()],
            )
            .map_err(self.err("remove an archived thread's running marker"))?;
            Ok(entry)
        })
    }

    fn history(&self) -> Result<Vec<HistoryEntry>, StateError> {
        let rows = self
            .read_conn()?
            .query(
                "SELECT thread, workflow, head, completed_at, reason FROM uwf_history ORDER BY seq",
                &[],
            )
            .map_err(self.err("read the history"))?;
        Ok(rows
            .iter()
            .map(|r| self.history_entry(r))
            .collect::<Result<_, _>>()?)
    }

    fn find_archived(&self, thread: ThreadId) -> Result<Option<HistoryEntry>, StateError> {
        let row = self
            .read_conn()?
            .query_opt(
                "SELECT thread, workflow, head, completed_at, reason FROM uwf_history \
                 WHERE thread = $1 ORDER BY seq DESC LIMIT 1",
                &[&thread.to_string()],
            )
            .map_err(self.err("read the history"))?;
        Ok(row.map(|r| self.history_entry(&r)).transpose()?)
    }

    fn import_history(&self, entries: &[HistoryEntry]) -> Result<usize, StateError> {
        self.mutate(|tx| -> Result<usize, StateError> {
            let mut added = 0;
            for e in entries {
                let at = i64::try_from(e.completed_at).unwrap_or(i64::MAX);
                // Equal in every field: already there (a copy run again).
                added += tx
                    .execute(
                        "INSERT INTO uwf_history (thread, workflow, head, completed_at, reason) \
                         SELECT $1, $2, $3, $4, $5 WHERE NOT EXISTS ( \
                           SELECT 1 FROM uwf_history WHERE thread = $1 AND workflow = $2 \
                           AND head = $3 AND completed_at = $4 AND reason IS NOT DISTINCT FROM $5)",
                        &[
                            &e.thread.to_string(),
                            &e.workflow.to_string(),
                            &e.head.to_string(),
                            &at,
                            &e.reason,
                        ],
                    )
                    .map_err(self.err("import the history"))?;
            }
            Ok(usize::try_from(added).unwrap_or(usize::MAX))
        })
    }

    fn gc_epoch(&self) -> Result<GcEpoch, StateError> {
        let mut c = self.read_conn()?;
        Ok(self.epoch_in(&mut *c)?)
    }
}

impl Registry for PgStore {
    fn registry(&self) -> Result<WorkflowRegistry, StateError> {
        let rows = self
            .read_conn()?
            .query("SELECT name, hash FROM uwf_registry", &[])
            .map_err(self.err("read the registry"))?;
        let mut out = WorkflowRegistry::new();
        for r in &rows {
            let name: String = r.get(0);
            let hash =
                self.hash_at(r, 1, format_args!("workflow {name:?} (table uwf_registry)"))?;
            out.insert(name, hash);
        }
        Ok(out)
    }

    fn register_workflow(
        &self,
        name: &str,
        hash: Hash,
        guard: &NodeGuard<'_>,
    ) -> Result<Option<Hash>, StateError> {
        self.mutate(|tx| {
            self.verify_guard(tx, guard)?;
            // Serialises registrations of one name (a missing row cannot be
            // locked with FOR UPDATE).
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('uwf-registry:' || $1, 0))",
                &[&name],
            )
            .map_err(self.err("lock a registry entry"))?;
            let previous = tx
                .query_opt("SELECT hash FROM uwf_registry WHERE name = $1", &[&name])
                .map_err(self.err("read the registry"))?
                .map(|r| {
                    self.hash_at(
                        &r,
                        0,
                        format_args!("workflow {name:?} (table uwf_registry)"),
                    )
                })
                .transpose()?;
            if previous != Some(hash) {
                tx.execute(
                    "INSERT INTO uwf_registry (name, hash) VALUES ($1, $2) \
                     ON CONFLICT (name) DO UPDATE SET hash = excluded.hash",
                    &[&name, &hash.to_string()],
                )
                .map_err(self.err("register a workflow"))?;
            }
            Ok(previous)
        })
    }
}

impl Settings for PgStore {
    fn config(&self) -> Result<Option<WorkflowConfig>, StateError> {
        let Some(text) = self.config_text()? else {
            return Ok(None);
        };
        uwf_state::parse_stored_config(&self.config_name(), &text).map(Some)
    }

    fn config_name(&self) -> String {
        // There is no config.yaml to fix: the configuration is a row.
        format!("{} (table uwf_config)", self.url())
    }

    fn secrets(&self) -> Result<Vec<(String, String)>, StateError> {
        match &self.inner().secrets_dir {
            Some(dir) => FsState::new(dir).env_vars(),
            None => Ok(Vec::new()),
        }
    }

    fn config_text(&self) -> Result<Option<String>, StateError> {
        Ok(PgStore::config_text(self)?)
    }

    fn set_config_text(&self, text: Option<&str>) -> Result<(), StateError> {
        self.set_config(text)
    }

    fn replace_config_text(&self, expected: Option<&str>, new: &str) -> Result<bool, StateError> {
        self.check_new_config(new)?;
        // One statement each way: the row is compared and written atomically.
        let changed = match expected {
            None => self.conn()?.execute(
                "INSERT INTO uwf_config (only_row, body, updated_at) VALUES (true, $1, $2) \
                 ON CONFLICT (only_row) DO NOTHING",
                &[&new, &now_ms()],
            ),
            Some(old) => self.conn()?.execute(
                "UPDATE uwf_config SET body = $1, updated_at = $2 WHERE body = $3",
                &[&new, &now_ms(), &old],
            ),
        }
        .map_err(self.err("write the configuration"))?;
        Ok(changed == 1)
    }
}

impl SideTables for PgStore {
    fn waiting(&self) -> Result<WaitingIndex, StateError> {
        let rows = self
            .read_conn()?
            .query(
                "SELECT w.thread, w.record FROM uwf_waiting w \
                 JOIN uwf_threads t ON t.thread = w.thread AND t.head = w.head",
                &[],
            )
            .map_err(self.err("read the waiting threads"))?;
        let mut out = WaitingIndex::new();
        for r in &rows {
            let thread = self.thread_at(r, 0, "uwf_waiting")?;
            let record = self.parse_waiting(r.get(0), r.get(1))?;
            out.insert(thread, record);
        }
        Ok(out)
    }

    fn waiting_of(&self, thread: ThreadId) -> Result<Option<WaitingRecord>, StateError> {
        let id = thread.to_string();
        let row = self
            .read_conn()?
            .query_opt(
                "SELECT w.record FROM uwf_waiting w \
                 JOIN uwf_threads t ON t.thread = w.thread AND t.head = w.head \
                 WHERE w.thread = $1",
                &[&id],
            )
            .map_err(self.err("read a waiting thread"))?;
        Ok(row.map(|r| self.parse_waiting(&id, r.get(0))).transpose()?)
    }

    fn shares_running(&self) -> bool {
        true
    }

    fn put_running(&self, thread: ThreadId, marker: &str) -> Result<(), StateError> {
        // One autocommit statement, no store lock: a marker is no root of
        // garbage collection and no part of a thread's state.
        self.conn()?
            .execute(
                "INSERT INTO uwf_running (thread, marker) VALUES ($1, $2) \
                 ON CONFLICT (thread) DO UPDATE SET marker = EXCLUDED.marker",
                &[&thread.to_string(), &marker],
            )
            .map_err(self.err("record a running agent"))?;
        Ok(())
    }

    fn clear_running(&self, thread: ThreadId, marker: &str) -> Result<(), StateError> {
        self.conn()?
            .execute(
                "DELETE FROM uwf_running WHERE thread = $1 AND marker = $2",
                &[&thread.to_string(), &marker],
            )
            .map_err(self.err("remove a running agent's marker"))?;
        Ok(())
    }

    fn running_marker(&self, thread: ThreadId) -> Result<Option<String>, StateError> {
        let row = self
            .read_conn()?
            .query_opt(
                "SELECT marker FROM uwf_running WHERE thread = $1",
                &[&thread.to_string()],
            )
            .map_err(self.err("read a running agent's marker"))?;
        Ok(row.map(|r| r.get(0)))
    }

    fn mark_waiting(&self, thread: ThreadId, record: WaitingRecord) -> Result<bool, StateError> {
        let id = thread.to_string();
        let head = record.head.to_string();
        let text = serde_json::to_string(&record)
            .map_err(|e| self.corrupt(format!("waiting entry of thread {id}"), e.to_string()))?;
        self.mutate(|tx| {
            // Locks the thread's row: its head cannot move meanwhile, and
            // marks of one thread are serialised.
            let actual = tx
                .query_opt(
                    "SELECT head FROM uwf_threads WHERE thread = $1 FOR UPDATE",
                    &[&id],
                )
                .map_err(self.err("read a head"))?
                .map(|r| {
                    self.hash_at(
                        &r,
                        0,
                        format_args!("head of thread {id} (table uwf_threads)"),
                    )
                })
                .transpose()?;
            if actual != Some(record.head) {
                return Err(StateError::Conflict {
                    thread,
                    expected: record.head,
                    actual,
                });
            }
            let existing = tx
                .query_opt(
                    "SELECT record FROM uwf_waiting WHERE thread = $1 AND head = $2",
                    &[&id, &head],
                )
                .map_err(self.err("read a waiting thread"))?;
            if let Some(row) = existing {
                let old = self.parse_waiting(&id, row.get(0))?;
                if old.role == record.role && old.child == record.child {
                    return Ok(false);
                }
            }
            tx.execute(
                "INSERT INTO uwf_waiting (thread, head, record) VALUES ($1, $2, $3) \
                 ON CONFLICT (thread) DO UPDATE SET head = excluded.head, record = excluded.record",
                &[&id, &head, &text],
            )
            .map_err(self.err("record a waiting thread"))?;
            Ok(true)
        })
    }

    fn attempts(&self) -> Result<AttemptsIndex, StateError> {
        let rows = self
            .read_conn()?
            .query("SELECT thread, record FROM uwf_attempts", &[])
            .map_err(self.err("read the attempts"))?;
        let mut out = AttemptsIndex::new();
        for r in &rows {
            let thread = self.thread_at(r, 0, "uwf_attempts")?;
            let record = self.hash_at(
                r,
                1,
                format_args!("attempts of thread {thread} (table uwf_attempts)"),
            )?;
            out.insert(thread, record);
        }
        Ok(out)
    }

    fn attempt_head(&self, thread: ThreadId) -> Result<Option<Hash>, StateError> {
        let row = self
            .read_conn()?
            .query_opt(
                "SELECT record FROM uwf_attempts WHERE thread = $1",
                &[&thread.to_string()],
            )
            .map_err(self.err("read the attempts"))?;
        Ok(row
            .map(|r| {
                self.hash_at(
                    &r,
                    0,
                    format_args!("attempts of thread {thread} (table uwf_attempts)"),
                )
            })
            .transpose()?)
    }

    fn record_attempt(
        &self,
        thread: ThreadId,
        write: &mut dyn FnMut(Option<Hash>) -> Result<Hash, StateError>,
    ) -> Result<Hash, StateError> {
        let id = thread.to_string();
        self.mutate(|tx| {
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('uwf-attempts:' || $1, 0))",
                &[&id],
            )
            .map_err(self.err("lock the attempts of a thread"))?;
            let prev = tx
                .query_opt("SELECT record FROM uwf_attempts WHERE thread = $1", &[&id])
                .map_err(self.err("read the attempts"))?
                .map(|r| {
                    self.hash_at(
                        &r,
                        0,
                        format_args!("attempts of thread {id} (table uwf_attempts)"),
                    )
                })
                .transpose()?;
            let new = write(prev)?;
            tx.execute(
                "INSERT INTO uwf_attempts (thread, record) VALUES ($1, $2) \
                 ON CONFLICT (thread) DO UPDATE SET record = excluded.record",
                &[&id, &new.to_string()],
            )
            .map_err(self.err("record an attempt"))?;
            Ok(new)
        })
    }
}

impl ConcurrencySlots for PgStore {
    fn acquire_slot(
        &self,
        workflow: &str,
        limits: WorkflowLimits,
        poll: Option<Duration>,
        on_wait: &mut dyn FnMut(&Waiting) -> bool,
    ) -> Result<Box<dyn SlotHold>, SlotError> {
        Ok(Box::new(crate::slots::acquire(
            self, workflow, limits, poll, on_wait,
        )?))
    }
}

impl Collecting for PgStore {
    fn while_collecting(
        &self,
        f: &mut dyn FnMut() -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        // A session lock, held while `begin_sweep` commits the odd epoch on
        // another connection (visible to every writer at once). Losing the
        // connection releases the lock and may leave the epoch odd: writers
        // then check their nodes until the next collection ends.
        let mut c = self.conn()?;
        c.batch_execute(&format!(
            "SET lock_timeout = '{LOCK_TIMEOUT}'; SELECT pg_advisory_lock({STORE_LOCK}); \
             RESET lock_timeout"
        ))
        .map_err(self.err("take the store lock"))?;
        let run = (|| -> Result<(), StateError> {
            let out = f();
            c.execute(
                "UPDATE uwf_gc SET epoch = epoch + 1 WHERE epoch % 2 = 1",
                &[],
            )
            .map_err(self.err("end a collection epoch"))?;
            out
        })();
        let unlocked = postgres::Client::execute(
            &mut c,
            &format!("SELECT pg_advisory_unlock({STORE_LOCK})"),
            &[],
        )
        .map_err(self.err("release the store lock"));
        run?;
        unlocked?;
        Ok(())
    }

    fn begin_sweep(&self) -> Result<GcEpoch, StateError> {
        // Committed at once (autocommit): every writer sees it before the
        // first node goes.
        let row = self
            .conn()?
            .query_one(
                "UPDATE uwf_gc SET epoch = epoch + CASE WHEN epoch % 2 = 0 THEN 1 ELSE 2 END \
                 RETURNING epoch",
                &[],
            )
            .map_err(self.err("start a collection epoch"))?;
        let epoch: i64 = row.get(0);
        Ok(GcEpoch(u64::try_from(epoch).unwrap_or(0)))
    }

    fn side_table_roots_locked(&self, prune: bool) -> Result<Vec<Hash>, StateError> {
        // Called inside `while_collecting`: no store lock here (it is held).
        let mut c = self.conn()?;
        let mut tx = c.transaction().map_err(self.err("begin a transaction"))?;
        let roots = tx
            .query(
                "SELECT a.record FROM uwf_attempts a JOIN uwf_threads t ON t.thread = a.thread \
                 ORDER BY a.thread",
                &[],
            )
            .map_err(self.err("read the attempts"))?
            .iter()
            .map(|r| self.hash_at(r, 0, format_args!("an attempt record (table uwf_attempts)")))
            .collect::<Result<Vec<Hash>, PgError>>()?;
        if prune {
            tx.batch_execute(
                "DELETE FROM uwf_attempts a WHERE NOT EXISTS \
                     (SELECT 1 FROM uwf_threads t WHERE t.thread = a.thread); \
                 DELETE FROM uwf_waiting w WHERE NOT EXISTS \
                     (SELECT 1 FROM uwf_threads t WHERE t.thread = w.thread AND t.head = w.head)",
            )
            .map_err(self.err("prune the side tables"))?;
        }
        tx.commit().map_err(self.err("commit"))?;
        Ok(roots)
    }
}
