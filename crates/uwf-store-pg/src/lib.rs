//! The PostgreSQL backend of uwf: one database holds what a storage root
//! holds on disk, so engines on many machines share one store.
//!
//! [`PgStore`] implements both storage traits: [`uwf_cas::Store`] (the
//! nodes, with the same hashes and payload bytes as the filesystem store,
//! and the derived-data cache) and [`uwf_state::ThreadStore`] (thread heads
//! with compare-and-swap, history, registry, configuration, the side tables
//! and the per-workflow concurrency slots (docs/state.md, "Slots"), enforced across every
//! machine). Secrets are **not** kept in the database: they are read from
//! the `.env` of a local directory the caller names (see
//! [`PgStore::connect`]). `docs/postgres.md` describes the schema and how
//! each guarantee is kept.
//!
//! The client is the synchronous [`postgres`] crate (rust-postgres): it is
//! well kept, synchronous like the rest of uwf (no async runtime to thread
//! through the CLI), and speaks Unix sockets (`?host=/dir`) and LISTEN/NOTIFY.
//!
//! ```no_run
//! use uwf_store_pg::PgStore;
//! use uwf_state::prelude::*;
//!
//! let store = PgStore::connect("postgres://uwf@db.internal/uwf", None)?;
//! store.init()?; // creates or migrates the schema (also done on first use)
//! println!("{} active threads in {}", store.threads()?.len(), store.describe());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cas;
mod error;
mod factory;
mod memo;
mod notices;
mod runs;
pub mod schema;
mod slots;
mod state;
mod url;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::collections::{HashMap, HashSet};

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement};

pub use error::{BACKEND, PgError};
pub use factory::PgBackend;
pub use schema::InitReport;
pub use slots::PgSlot;

/// Idle connections a [`PgStore`] keeps by default.
pub const DEFAULT_POOL_SIZE: usize = 4;

/// A pooled connection idle for longer than this is checked (one round
/// trip) before it is used again, so a server restart or a dropped
/// connection costs a reconnect instead of a failed call.
pub const CHECK_IDLE_AFTER: Duration = Duration::from_secs(1);

/// How long checking an idle connection may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How [`PgStore::connect_with`] connects.
#[derive(Clone, Default)]
pub struct PgOptions {
    /// The password, used when the URL has none (like libpq's
    /// `PGPASSWORD`; the integrator reads it from `.env`, never from
    /// `config.yaml`). Never shown.
    pub password: Option<String>,
    /// The directory whose `.env` holds the secrets handed to agents
    /// ([`Settings::secrets`](uwf_state::Settings::secrets)); none
    /// when `None`.
    pub secrets_dir: Option<PathBuf>,
    /// Idle connections kept for reuse (default [`DEFAULT_POOL_SIZE`]).
    pub pool_size: Option<usize>,
}

impl fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgOptions")
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("secrets_dir", &self.secrets_dir)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// A uwf store in a PostgreSQL database.
///
/// Cheap to clone (the clones share one pool of connections) and safe to
/// use from many threads. Every call takes a connection from the pool (or
/// opens one) and gives it back; a held concurrency slot keeps a connection
/// of its own for as long as it is held.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    config: postgres::Config,
    /// The URL without its password.
    target: String,
    /// The password, only to redact it from messages.
    secret: Option<String>,
    secrets_dir: Option<PathBuf>,
    idle: Mutex<Vec<Pooled>>,
    pool_size: usize,
    schema_ready: AtomicBool,
    workflow_ids: Mutex<std::collections::HashMap<String, i32>>,
    /// The head notices' listener, started when a step first asks for it.
    listener: std::sync::OnceLock<Arc<notices::Listener>>,
    /// Nodes and derived-cache entries this process has read or written
    /// ([`memo`]).
    pub(crate) memo: memo::Memo,
    /// The connection whose read-only transaction the reads of a
    /// read-only command go through ([`PgStore::read_in_one_snapshot`]).
    snapshot: Mutex<Option<Pooled>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(l) = self.listener.get() {
            l.stop();
        }
    }
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.inner.target)
            .field("secrets_dir", &self.inner.secrets_dir)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to the store at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`,
    /// or `postgresql://USER@/DATABASE?host=/socket/dir` for a Unix socket).
    /// `secrets_dir` is the local directory whose `.env` holds the secrets
    /// handed to agents (the database holds none).
    ///
    /// One connection is opened at once, so a wrong URL, password or
    /// database fails here. The schema is created or migrated on first use
    /// (or by [`init`](Self::init)).
    pub fn connect(url: &str, secrets_dir: Option<&Path>) -> Result<PgStore, PgError> {
        Self::connect_with(
            url,
            PgOptions {
                secrets_dir: secrets_dir.map(Path::to_path_buf),
                ..PgOptions::default()
            },
        )
    }

    /// [`connect`](Self::connect) with more options (a password from
    /// elsewhere than the URL, the pool size).
    pub fn connect_with(url: &str, options: PgOptions) -> Result<PgStore, PgError> {
        let parsed = url::parse(url, options.password.as_deref())?;
        let store = PgStore {
            inner: Arc::new(Inner {
                config: parsed.config,
                target: parsed.display,
                secret: parsed.password,
                secrets_dir: options.secrets_dir,
                idle: Mutex::new(Vec::new()),
                pool_size: options.pool_size.unwrap_or(DEFAULT_POOL_SIZE),
                schema_ready: AtomicBool::new(false),
                workflow_ids: Mutex::new(std::collections::HashMap::new()),
                listener: std::sync::OnceLock::new(),
                memo: memo::Memo::new(),
                snapshot: Mutex::new(None),
            }),
        };
        let client = store.inner.open()?;
        store.inner.give_back(client);
        Ok(store)
    }

    /// The URL of the store without its password.
    pub fn url(&self) -> &str {
        &self.inner.target
    }

    /// Creates the schema or brings it up to date (idempotent; safe when
    /// several processes do it at once). Also done on first use.
    pub fn init(&self) -> Result<InitReport, PgError> {
        let mut client = self.inner.take()?;
        let report = schema::migrate(&mut client, &self.inner.target, self.inner.secret());
        if report.is_ok() {
            self.inner.schema_ready.store(true, Ordering::SeqCst);
            self.inner.give_back(client);
        }
        report
    }

    /// The schema version of the database (`0` before [`init`](Self::init)).
    pub fn schema_version(&self) -> Result<i32, PgError> {
        let mut client = self.inner.take()?;
        let v = schema::current_version(&mut client, &self.inner.target, self.inner.secret())?;
        self.inner.give_back(client);
        Ok(v.unwrap_or(0))
    }

    /// A connection with the schema in place.
    pub(crate) fn conn(&self) -> Result<Conn<'_>, PgError> {
        self.inner.ensure_schema()?;
        Ok(Conn {
            inner: &self.inner,
            held: Some(Held::Pooled(Box::new(self.inner.take_pooled()?))),
        })
    }

    /// A connection for a read: the snapshot's, when reads go through one
    /// ([`read_in_one_snapshot`](Self::read_in_one_snapshot)) and it is
    /// free, else a pooled one.
    pub(crate) fn read_conn(&self) -> Result<Conn<'_>, PgError> {
        self.inner.ensure_schema()?;
        // `try_lock`: a read made while another holds the snapshot (a
        // second thread, or a read nested in a read) takes a pooled
        // connection instead of waiting.
        if let Ok(guard) = self.inner.snapshot.try_lock()
            && guard.is_some()
        {
            return Ok(Conn {
                inner: &self.inner,
                held: Some(Held::Snapshot(guard)),
            });
        }
        self.conn()
    }

    /// From now on, the reads of this store (and of its clones) see the
    /// database as it is now: one read-only transaction at `REPEATABLE
    /// READ`, held until the store is dropped. Writes go on as before,
    /// outside it (and are not seen by those reads). For commands that
    /// only read: what they show is one state of the store, and the whole
    /// command is one transaction on the server.
    pub fn read_in_one_snapshot(&self) -> Result<(), PgError> {
        self.inner.ensure_schema()?;
        let mut pooled = self.inner.take_pooled()?;
        pooled
            .client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .map_err(self.err("begin a read-only snapshot"))?;
        *self
            .inner
            .snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(pooled);
        Ok(())
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// A [`PgError::Query`] for a failed statement.
    pub(crate) fn err(&self, what: &'static str) -> impl Fn(postgres::Error) -> PgError + '_ {
        move |e| PgError::query(&self.inner.target, what, &e, self.inner.secret())
    }

    /// A [`PgError::Corrupt`] for a row.
    pub(crate) fn corrupt(&self, what: impl Into<String>, reason: impl Into<String>) -> PgError {
        PgError::Corrupt {
            target: self.inner.target.clone(),
            what: what.into(),
            reason: reason.into(),
        }
    }
}

impl Inner {
    /// The listener of head notices, started on first use.
    pub(crate) fn listener(&self) -> Arc<notices::Listener> {
        Arc::clone(
            self.listener
                .get_or_init(|| notices::Listener::start(self.config.clone())),
        )
    }

    pub(crate) fn secret(&self) -> Option<&str> {
        self.secret.as_deref()
    }

    /// Opens a new connection.
    pub(crate) fn open(&self) -> Result<Client, PgError> {
        self.config
            .connect(NoTls)
            .map_err(|e| PgError::connect(&self.target, &e, self.secret()))
    }

    /// An idle connection, or a new one.
    pub(crate) fn take(&self) -> Result<Client, PgError> {
        self.take_pooled().map(|p| p.client)
    }

    /// An idle connection with the statements prepared on it, or a new
    /// one.
    fn take_pooled(&self) -> Result<Pooled, PgError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(mut p) if !p.client.is_closed() => {
                if p.since.elapsed() < CHECK_IDLE_AFTER || p.client.is_valid(CHECK_TIMEOUT).is_ok()
                {
                    Ok(p)
                } else {
                    self.open().map(Pooled::new)
                }
            }
            _ => self.open().map(Pooled::new),
        }
    }

    /// Returns a connection to the pool (or closes it if the pool is full
    /// or the connection is broken).
    pub(crate) fn give_back(&self, client: Client) {
        self.give_back_pooled(Pooled::new(client));
    }

    fn give_back_pooled(&self, mut pooled: Pooled) {
        if pooled.client.is_closed() {
            return;
        }
        pooled.since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.pool_size {
            idle.push(pooled);
        }
    }

    fn ensure_schema(&self) -> Result<(), PgError> {
        if self.schema_ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut client = self.take()?;
        let current = schema::current_version(&mut client, &self.target, self.secret())?;
        match current {
            Some(v) if v == schema::latest_version() => {}
            Some(v) if v > schema::latest_version() => {
                return Err(PgError::SchemaTooNew {
                    target: self.target.clone(),
                    found: v,
                    supported: schema::latest_version(),
                });
            }
            _ => {
                schema::migrate(&mut client, &self.target, self.secret())?;
            }
        }
        self.schema_ready.store(true, Ordering::SeqCst);
        self.give_back(client);
        Ok(())
    }

    pub(crate) fn workflow_ids(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, i32>> {
        self.workflow_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// An idle connection and the statements prepared on it.
///
/// Every statement sent as text is parsed and planned by the server in a
/// transaction of its own before it runs in another (the extended query
/// protocol's Parse/Describe, then Bind/Execute): twice the transactions
/// and the parsing each time. Prepared once per connection and kept here,
/// a statement then costs one (docs/postgres.md, "Transactions per step").
pub(crate) struct Pooled {
    client: Client,
    statements: HashMap<&'static str, Statement>,
    /// Statements prepared with SQL's `PREPARE` on this connection (by
    /// name), for query strings that `EXECUTE` them.
    named: HashSet<&'static str>,
    since: Instant,
}

impl Pooled {
    fn new(client: Client) -> Self {
        Pooled {
            client,
            statements: HashMap::new(),
            named: HashSet::new(),
            since: Instant::now(),
        }
    }
}

/// Where a [`Conn`]'s connection comes from.
enum Held<'a> {
    /// The pool: given back when dropped (boxed: it is the larger by far,
    /// and moved in and out of the pool anyway).
    Pooled(Box<Pooled>),
    /// The read-only snapshot (always `Some` while held).
    Snapshot(std::sync::MutexGuard<'a, Option<Pooled>>),
}

/// A pooled connection, given back when dropped. A connection whose
/// transaction was left open is rolled back by the client library first;
/// a broken one is closed instead.
///
/// Its `query`, `query_opt`, `query_one` and `execute` take the text of a
/// statement known at compile time and prepare it once per connection;
/// other statements go to the [`Client`] it dereferences to.
pub(crate) struct Conn<'a> {
    inner: &'a Inner,
    held: Option<Held<'a>>,
}

impl Conn<'_> {
    fn pooled(&mut self) -> &mut Pooled {
        // Only `Drop` takes it out; a held snapshot is never `None`.
        match self.held.as_mut() {
            Some(Held::Pooled(p)) => p,
            Some(Held::Snapshot(g)) => g.as_mut().unwrap_or_else(|| unreachable!()),
            None => unreachable!(),
        }
    }

    /// `sql` prepared on this connection (once; the server keeps the plan).
    pub(crate) fn prepared(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        let p = self.pooled();
        if let Some(s) = p.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = p.client.prepare(sql)?;
        p.statements.insert(sql, s.clone());
        Ok(s)
    }

    /// Runs `f` with `sql` prepared; a statement that failed is prepared
    /// anew next time (a schema changed under a cached plan fails once).
    fn with_prepared<T>(
        &mut self,
        sql: &'static str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let statement = self.prepared(sql)?;
        let p = self.pooled();
        let out = f(&mut p.client, &statement);
        if out.is_err() {
            p.statements.remove(sql);
            // A failed statement ends a transaction's use: later reads go
            // to the pool rather than into an aborted snapshot.
            if let Some(Held::Snapshot(g)) = self.held.as_mut() {
                g.take();
            }
        }
        out
    }

    /// Runs the query string `body`, which `EXECUTE`s the statement `name`,
    /// after `prepare` (SQL's `PREPARE name … AS …`) on this connection if
    /// it was not yet: the server parses and plans that statement once per
    /// connection, while a query string is parsed and planned every time
    /// (a third of the server's CPU in a step, measured with `perf`). A
    /// session that lost the statement has it prepared again, once.
    pub(crate) fn simple_query_executing(
        &mut self,
        name: &'static str,
        prepare: &'static str,
        body: &str,
    ) -> Result<Vec<postgres::SimpleQueryMessage>, postgres::Error> {
        use postgres::error::SqlState;
        let mut again = false;
        loop {
            let p = self.pooled();
            if !p.named.contains(name) {
                match p.client.batch_execute(prepare) {
                    Ok(()) => {}
                    Err(e) if e.code() == Some(&SqlState::DUPLICATE_PSTATEMENT) => {}
                    Err(e) => return Err(e),
                }
                p.named.insert(name);
            }
            match p.client.simple_query(body) {
                Err(e) if !again && e.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) => {
                    p.named.remove(name);
                    again = true;
                }
                other => return other,
            }
        }
    }

    pub(crate) fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        self.with_prepared(sql, |c, s| c.query(s, params))
    }

    pub(crate) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        self.with_prepared(sql, |c, s| c.query_opt(s, params))
    }

    pub(crate) fn query_one(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        self.with_prepared(sql, |c, s| c.query_one(s, params))
    }

    pub(crate) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.with_prepared(sql, |c, s| c.execute(s, params))
    }
}

impl std::ops::Deref for Conn<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        // Only `Drop` takes it out; a held snapshot is never `None`.
        match self.held.as_ref() {
            Some(Held::Pooled(p)) => &p.client,
            Some(Held::Snapshot(g)) => &g.as_ref().unwrap_or_else(|| unreachable!()).client,
            None => unreachable!(),
        }
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.pooled().client
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(Held::Pooled(p)) = self.held.take() {
            self.inner.give_back_pooled(*p);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A store on `db` whose pool keeps one connection, schema created.
    fn one_connection(db: &uwf_pg_testing::TestDb) -> PgStore {
        let store = PgStore::connect_with(
            &db.url,
            PgOptions {
                pool_size: Some(1),
                ..PgOptions::default()
            },
        )
        .unwrap();
        store.init().unwrap();
        store
    }

    fn prepared_in_session(c: &mut Conn<'_>) -> i64 {
        Client::query_one(c, "SELECT count(*) FROM pg_prepared_statements", &[])
            .unwrap()
            .get(0)
    }

    /// A statement prepared with SQL's `PREPARE` for query strings that
    /// `EXECUTE` it: once per connection, again when the session lost it,
    /// and not twice when the session has it already.
    #[test]
    fn a_named_statement_is_prepared_once_and_again_when_lost() {
        let Some(db) = uwf_pg_testing::database() else {
            return;
        };
        let store = one_connection(&db);
        const PREPARE: &str = "PREPARE uwf_test_two (int) AS SELECT $1 + 1";
        let two = |c: &mut Conn<'_>| -> String {
            let answers = c
                .simple_query_executing("uwf_test_two", PREPARE, "EXECUTE uwf_test_two(1)")
                .unwrap();
            answers
                .iter()
                .find_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                    _ => None,
                })
                .unwrap()
        };
        let mut c = store.conn().unwrap();
        let before = prepared_in_session(&mut c);
        assert_eq!(two(&mut c), "2");
        assert_eq!(two(&mut c), "2");
        assert_eq!(prepared_in_session(&mut c), before + 1);
        drop(c);
        let mut c = store.conn().unwrap();
        assert_eq!(two(&mut c), "2", "kept with the pooled connection");
        Client::batch_execute(&mut c, "DEALLOCATE uwf_test_two").unwrap();
        assert_eq!(two(&mut c), "2", "prepared again once lost");
        // Prepared behind its back: used as it is.
        c.pooled().named.clear();
        assert_eq!(two(&mut c), "2");
        assert_eq!(prepared_in_session(&mut c), before + 1);
    }

    /// A statement is prepared once per connection and kept with it in the
    /// pool: running it again, or on the connection taken back from the
    /// pool, prepares nothing more.
    #[test]
    fn a_statement_is_prepared_once_per_pooled_connection() {
        let Some(db) = uwf_pg_testing::database() else {
            return;
        };
        let store = one_connection(&db);
        const SQL: &str = "SELECT head FROM uwf_threads WHERE thread = $1";
        let before = {
            let mut c = store.conn().unwrap();
            let before = prepared_in_session(&mut c);
            assert!(c.query_opt(SQL, &[&"nobody"]).unwrap().is_none());
            assert_eq!(prepared_in_session(&mut c), before + 1);
            assert!(c.query_opt(SQL, &[&"nobody"]).unwrap().is_none());
            assert_eq!(prepared_in_session(&mut c), before + 1);
            before
        };
        let mut again = store.conn().unwrap();
        assert!(again.query_opt(SQL, &[&"nobody"]).unwrap().is_none());
        assert_eq!(prepared_in_session(&mut again), before + 1);
        // A statement that fails is prepared anew next time.
        const BAD: &str = "SELECT 1 / $1::int";
        assert!(again.query_one(BAD, &[&0i32]).is_err());
        assert_eq!(again.query_one(BAD, &[&1i32]).unwrap().get::<_, i32>(0), 1);
    }

    /// Reads in one snapshot see the store as it was when it began, writes
    /// go on beside it, and a failed read ends it.
    #[test]
    fn reads_in_one_snapshot_see_the_store_as_it_was_and_writes_go_on() {
        use uwf_state::NodeGuard;
        use uwf_state::prelude::*;
        let Some(db) = uwf_pg_testing::database() else {
            return;
        };
        let store = PgStore::connect(&db.url, None).unwrap();
        let other = PgStore::connect(&db.url, None).unwrap();
        let t = uwf_protocol::ThreadId::from_u128(1);
        let h = uwf_protocol::Hash::from_u64;
        let vouched = NodeGuard::vouched();
        store.insert_thread(t, h(1), &vouched).unwrap();
        ThreadStore::read_in_one_snapshot(&store).unwrap();
        assert_eq!(store.thread_head(t).unwrap(), Some(h(1)));
        other.swap_head(t, h(1), h(2), &vouched).unwrap();
        assert_eq!(store.thread_head(t).unwrap(), Some(h(1)));
        assert_eq!(store.threads().unwrap().get(&t), Some(&h(1)));
        assert_eq!(other.thread_head(t).unwrap(), Some(h(2)));
        // A write goes on outside the snapshot (it read the head anew).
        store.swap_head(t, h(2), h(3), &vouched).unwrap();
        assert_eq!(store.thread_head(t).unwrap(), Some(h(1)));
        // A read that fails ends the snapshot: later reads see the store.
        {
            let mut c = store.read_conn().unwrap();
            assert!(c.query_one("SELECT 1 / $1::int", &[&0i32]).is_err());
        }
        assert_eq!(store.thread_head(t).unwrap(), Some(h(3)));
    }
}
