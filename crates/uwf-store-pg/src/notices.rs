//! Head notices over LISTEN/NOTIFY ([`uwf_state::HeadNotices`]).
//!
//! A trigger on `uwf_threads` (migration 7) sends a notice on [`CHANNEL`]
//! with the thread's id whenever its head moves or it is archived, in the
//! transaction that does it. One [`Listener`] per [`PgStore`](crate::PgStore)
//! (per process) holds one connection that LISTENs, started the first time a
//! step asks for it, and counts the notices per thread. A step whose agent
//! runs long then reads its thread's head only when its count changed
//! (docs/postgres.md, "Kill notices"). Notices sent while the connection is
//! down are lost, so every (re)connection changes every thread's mark, and
//! while it is down there is no mark at all: readers ask the store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use postgres::NoTls;
use postgres::fallible_iterator::FallibleIterator;
use uwf_protocol::ThreadId;
use uwf_state::HeadNotices;

/// The channel the trigger notifies on; the payload is the thread id.
pub(crate) const CHANNEL: &str = "uwf_heads";

/// How long the listener waits for a notice before it looks whether it
/// should stop.
const WAKE: Duration = Duration::from_secs(1);

/// How long the listener waits before connecting again after a failure.
const RETRY: Duration = Duration::from_secs(2);

/// The listening side: counts per thread, and the connection's generation.
pub(crate) struct Listener {
    counts: Mutex<HashMap<String, u64>>,
    /// Incremented each time LISTEN succeeds on a new connection.
    generation: AtomicU64,
    /// Whether the connection is up and listening.
    listening: AtomicBool,
    stop: AtomicBool,
}

impl Listener {
    /// Starts listening on a connection of its own, made with `config`, in
    /// a thread of its own.
    pub(crate) fn start(config: postgres::Config) -> Arc<Listener> {
        let listener = Arc::new(Listener {
            counts: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let this = Arc::clone(&listener);
        let spawned = std::thread::Builder::new()
            .name("uwf-pg-notices".into())
            .spawn(move || this.run(&config));
        if let Err(e) = spawned {
            // Nothing listens: readers ask the store, as without notices.
            tracing::warn!("cannot start listening for head notices: {e}");
        }
        listener
    }

    /// Stops the listening thread (within [`WAKE`]).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn run(&self, config: &postgres::Config) {
        while !self.stop.load(Ordering::SeqCst) {
            match config.connect(NoTls) {
                Ok(mut client) => {
                    if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")) {
                        tracing::debug!("cannot LISTEN for head notices: {e}");
                    } else {
                        self.generation.fetch_add(1, Ordering::SeqCst);
                        self.listening.store(true, Ordering::SeqCst);
                        self.receive(&mut client);
                        self.listening.store(false, Ordering::SeqCst);
                    }
                }
                Err(e) => tracing::debug!("cannot connect to listen for head notices: {e}"),
            }
            if !self.stop.load(Ordering::SeqCst) {
                std::thread::sleep(RETRY);
            }
        }
    }

    /// Counts notices until the connection fails or the listener stops.
    fn receive(&self, client: &mut postgres::Client) {
        while !self.stop.load(Ordering::SeqCst) {
            {
                let mut notifications = client.notifications();
                let mut waiting = notifications.timeout_iter(WAKE);
                loop {
                    match waiting.next() {
                        Ok(Some(notice)) => {
                            let mut counts =
                                self.counts.lock().unwrap_or_else(PoisonError::into_inner);
                            *counts.entry(notice.payload().to_string()).or_default() += 1;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!("the head notices' connection failed: {e}");
                            return;
                        }
                    }
                }
            }
            if client.is_closed() {
                return;
            }
        }
    }
}

impl HeadNotices for Listener {
    fn mark(&self, thread: ThreadId) -> Option<u64> {
        if !self.listening.load(Ordering::SeqCst) {
            return None;
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let count = self
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&thread.to_string())
            .copied()
            .unwrap_or(0);
        // Still listening on the same connection after reading the count:
        // otherwise a notice may have been missed in between.
        if !self.listening.load(Ordering::SeqCst)
            || self.generation.load(Ordering::SeqCst) != generation
        {
            return None;
        }
        Some(generation.wrapping_shl(40) ^ count)
    }
}
