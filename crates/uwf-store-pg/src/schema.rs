//! The database schema, as numbered migrations.
//!
//! `uwf_schema_version` holds one row per applied migration. Applying runs
//! in one transaction that first takes a transaction-level advisory lock
//! (the key `uwf_mig` in ASCII), so processes racing to set up a fresh database
//! apply each migration exactly once: the others wait for the lock, then
//! find the work done. A migration never changes once released; a new
//! schema change is a new entry at the end of [`MIGRATIONS`].

use postgres::Client;

use crate::error::PgError;

/// Advisory lock key (bigint space) serialising migrations: "uwf_mig" in
/// ASCII.
pub(crate) const MIGRATION_LOCK: i64 = 0x7577_665f_6d69_6700;

/// One schema change.
pub struct Migration {
    /// Its version (1, 2, …, in order).
    pub version: i32,
    /// What it does, for logs.
    pub name: &'static str,
    /// The SQL statements.
    pub sql: &'static str,
}

/// Every migration, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "nodes and the derived-data cache",
        sql: r#"
CREATE TABLE uwf_nodes (
    hash      text COLLATE "C" PRIMARY KEY CHECK (hash ~ '^[0-9A-HJKMNP-TV-Z]{13}$'),
    type_hash text COLLATE "C" NOT NULL CHECK (type_hash ~ '^[0-9A-HJKMNP-TV-Z]{13}$'),
    payload   bytea  NOT NULL,
    stored_at bigint NOT NULL
);
CREATE INDEX uwf_nodes_by_type ON uwf_nodes (type_hash, hash);
CREATE TABLE uwf_cache (
    key   text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL
);
"#,
    },
    Migration {
        version: 2,
        name: "threads, history, registry, configuration, side tables",
        sql: r#"
CREATE TABLE uwf_threads (
    thread text COLLATE "C" PRIMARY KEY,
    head   text NOT NULL
);
CREATE TABLE uwf_history (
    seq          bigserial PRIMARY KEY,
    thread       text COLLATE "C" NOT NULL,
    workflow     text NOT NULL,
    head         text NOT NULL,
    completed_at bigint NOT NULL,
    reason       text
);
CREATE INDEX uwf_history_by_thread ON uwf_history (thread, seq);
CREATE TABLE uwf_registry (
    name text COLLATE "C" PRIMARY KEY,
    hash text NOT NULL
);
CREATE TABLE uwf_config (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    body       text NOT NULL,
    updated_at bigint NOT NULL
);
CREATE TABLE uwf_waiting (
    thread text COLLATE "C" PRIMARY KEY,
    head   text NOT NULL,
    record text NOT NULL
);
CREATE TABLE uwf_attempts (
    thread text COLLATE "C" PRIMARY KEY,
    record text NOT NULL
);
"#,
    },
    Migration {
        version: 3,
        name: "concurrency slots and their queue",
        sql: r#"
CREATE TABLE uwf_slot_workflows (
    id   serial PRIMARY KEY,
    name text NOT NULL UNIQUE
);
CREATE TABLE uwf_slot_tickets (
    seq         bigserial PRIMARY KEY,
    workflow_id integer NOT NULL REFERENCES uwf_slot_workflows (id),
    evicted     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX uwf_slot_tickets_queue ON uwf_slot_tickets (workflow_id, seq);
"#,
    },
    Migration {
        version: 4,
        name: "the run queue of uwf worker",
        sql: r#"
CREATE TABLE uwf_runs (
    thread      text COLLATE "C" PRIMARY KEY,
    workflow    text NOT NULL,
    request     text NOT NULL,
    queued_at   bigint NOT NULL,
    claims      integer NOT NULL DEFAULT 0 CHECK (claims >= 0),
    state       text NOT NULL CHECK (state IN ('queued', 'claimed', 'failed')),
    worker      text,
    claim_id    text,
    claimed_at  bigint,
    lease_until bigint,
    error       text,
    failed_at   bigint,
    CHECK (state <> 'claimed' OR (worker IS NOT NULL AND claim_id IS NOT NULL
                                  AND claimed_at IS NOT NULL AND lease_until IS NOT NULL)),
    CHECK (state <> 'failed' OR (worker IS NOT NULL AND error IS NOT NULL AND failed_at IS NOT NULL))
);
CREATE INDEX uwf_runs_by_age ON uwf_runs (queued_at, thread);
"#,
    },
    Migration {
        version: 5,
        name: "garbage collection beside running work",
        // `fresh_at`: when a node was last stored again (garbage
        // collection's grace counts from the later of it and `stored_at`);
        // `uwf_gc.epoch`: odd while a collection runs (docs/state.md,
        // "Garbage collection").
        sql: r#"
ALTER TABLE uwf_nodes ADD COLUMN fresh_at bigint;
CREATE TABLE uwf_gc (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    epoch bigint NOT NULL CHECK (epoch >= 0)
);
INSERT INTO uwf_gc (epoch) VALUES (0);
"#,
    },
    Migration {
        version: 6,
        name: "running markers seen from every machine",
        // One row per thread whose agent runs now: the marker the step
        // wrote (JSON text, compared as written when it is removed).
        sql: r#"
CREATE TABLE uwf_running (
    thread text COLLATE "C" PRIMARY KEY,
    marker text NOT NULL
);
"#,
    },
    Migration {
        version: 7,
        name: "head notices",
        // A notice on `uwf_heads` (payload: the thread id) from the
        // transaction that moves a head or archives the thread, so running
        // steps need not poll their head (docs/postgres.md, "Kill notices").
        sql: r#"
CREATE FUNCTION uwf_head_notice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('uwf_heads', OLD.thread);
    RETURN NULL;
END
$$;
CREATE TRIGGER uwf_threads_head_notice AFTER UPDATE OR DELETE ON uwf_threads
    FOR EACH ROW EXECUTE FUNCTION uwf_head_notice();
"#,
    },
];

/// The newest schema version this build knows.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// What [`PgStore::init`](crate::PgStore::init) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitReport {
    /// The schema version found before.
    pub from: i32,
    /// The schema version now.
    pub to: i32,
    /// The migrations this call applied (empty when another process had
    /// applied them, or nothing was due).
    pub applied: Vec<i32>,
}

/// The applied version, `None` when the version table does not exist yet.
///
/// Every command that opens the store asks this first, so it is one round
/// trip: one statement in the simple query protocol (no separate
/// Parse/Describe exchange), whose failure for a missing table means a
/// database not set up yet (which the server logs as an error, once per
/// such database). It was two prepared statements, four round
/// trips (docs/postgres.md, "What a step costs the database").
pub(crate) fn current_version(
    client: &mut Client,
    target: &str,
    secret: Option<&str>,
) -> Result<Option<i32>, PgError> {
    use postgres::SimpleQueryMessage;
    use postgres::error::SqlState;

    let messages = match client.simple_query("SELECT max(version) FROM uwf_schema_version") {
        Ok(messages) => messages,
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => return Ok(None),
        Err(e) => {
            return Err(PgError::query(
                target,
                "read the schema version",
                &e,
                secret,
            ));
        }
    };
    let corrupt = |reason: String| PgError::Corrupt {
        target: target.to_owned(),
        what: "schema version (uwf_schema_version)".to_owned(),
        reason,
    };
    let row = messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .ok_or_else(|| corrupt("the query gave no row".to_owned()))?;
    let value = row
        .try_get(0)
        .map_err(|e| PgError::query(target, "read the schema version", &e, secret))?;
    match value {
        // No migration recorded yet (an interrupted first setup).
        None => Ok(Some(0)),
        Some(text) => text
            .parse::<i32>()
            .map(Some)
            .map_err(|e| corrupt(format!("{text:?} is not a version number: {e}"))),
    }
}

/// Applies every migration that is due, under the migration lock.
pub(crate) fn migrate(
    client: &mut Client,
    target: &str,
    secret: Option<&str>,
) -> Result<InitReport, PgError> {
    let q = |what: &'static str| move |e: postgres::Error| PgError::query(target, what, &e, secret);
    let mut tx = client.transaction().map_err(q("begin a migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(q("take the migration lock"))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS uwf_schema_version (
            version    integer PRIMARY KEY,
            name       text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .map_err(q("create the schema version table"))?;
    let from: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM uwf_schema_version",
            &[],
        )
        .map_err(q("read the schema version"))?
        .get(0);
    if from > latest_version() {
        return Err(PgError::SchemaTooNew {
            target: target.to_owned(),
            found: from,
            supported: latest_version(),
        });
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > from) {
        tracing::info!(
            version = m.version,
            name = m.name,
            store = target,
            "applying a schema migration"
        );
        tx.batch_execute(m.sql)
            .map_err(q("apply a schema migration"))?;
        tx.execute(
            "INSERT INTO uwf_schema_version (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .map_err(q("record a schema migration"))?;
        applied.push(m.version);
    }
    tx.commit().map_err(q("commit the schema migrations"))?;
    Ok(InitReport {
        from,
        to: from.max(latest_version()),
        applied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_consecutive_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i32::try_from(i + 1).unwrap_or(0), "{}", m.name);
        }
        assert_eq!(latest_version(), 7);
    }
}
