//! The engine's side: a socket that answers an agent's store requests
//! from the store the engine has open.

use std::io::{self, BufReader, BufWriter};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use uwf_cas::{Cas, Hash, Store};
use uwf_state::ThreadStore;

use crate::wire::{Kind, Request, Response, read_frame, write_frame};

/// A relay serving one store while an agent runs.
///
/// The socket is in a new directory only its owner may enter (mode 0700),
/// so only processes of the same user can connect; it is removed when the
/// relay is dropped. Dropping the relay also closes every connection (an
/// agent's leftover children cannot keep it serving) and waits for the
/// requests being answered.
pub struct Relay {
    dir: PathBuf,
    path: PathBuf,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<UnixStream>>>,
    accept: Option<JoinHandle<()>>,
    /// The listening socket, to shut down when the relay stops.
    listening: UnixListener,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("path", &self.path).finish()
    }
}

impl Relay {
    /// Starts serving `store` and `state` on a new socket under the
    /// system's temporary directory.
    pub fn start(store: Arc<dyn Store>, state: Arc<dyn ThreadStore>) -> io::Result<Relay> {
        Self::start_in(&std::env::temp_dir(), store, state)
    }

    /// Starts serving the store of `cas` and `state` like
    /// [`start`](Self::start), checking every node the agent inserts
    /// against its type with `cas` (whose compiled schemas the engine
    /// keeps from step to step): the agent's side then reports
    /// [`checks_types`](uwf_cas::Store::checks_types) and compiles no
    /// schema itself, which was most of what starting an agent cost
    /// (docs/performance.md, "Starting an agent").
    pub fn start_checking(cas: Cas, state: Arc<dyn ThreadStore>) -> io::Result<Relay> {
        let store = Arc::clone(cas.store());
        Self::start_with(&std::env::temp_dir(), store, state, Some(cas))
    }

    /// Starts serving on a new socket in a new private directory under
    /// `parent` (a socket's path is limited to about 100 bytes: keep
    /// `parent` short).
    pub fn start_in(
        parent: &Path,
        store: Arc<dyn Store>,
        state: Arc<dyn ThreadStore>,
    ) -> io::Result<Relay> {
        Self::start_with(parent, store, state, None)
    }

    /// [`start_checking`](Self::start_checking) with the socket under
    /// `parent`, as [`start_in`](Self::start_in).
    pub fn start_checking_in(
        parent: &Path,
        cas: Cas,
        state: Arc<dyn ThreadStore>,
    ) -> io::Result<Relay> {
        let store = Arc::clone(cas.store());
        Self::start_with(parent, store, state, Some(cas))
    }

    fn start_with(
        parent: &Path,
        store: Arc<dyn Store>,
        state: Arc<dyn ThreadStore>,
        checker: Option<Cas>,
    ) -> io::Result<Relay> {
        let dir = parent.join(format!("uwf-relay-{}", ulid::Ulid::new()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = dir.join("s");
        let listener = match UnixListener::bind(&path) {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let listening = match listener.try_clone() {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let stop = Arc::clone(&stop);
            let conns = Arc::clone(&conns);
            std::thread::Builder::new()
                .name("uwf-relay".into())
                .spawn(move || {
                    let serving = Serving {
                        store,
                        state,
                        checker,
                    };
                    accept_loop(&listener, &stop, &conns, &serving);
                })?
        };
        Ok(Relay {
            dir,
            path,
            stop,
            conns,
            accept: Some(accept),
            listening,
        })
    }

    /// The socket's path: what the agent gets in
    /// [`RELAY_ENV`](crate::RELAY_ENV).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`: shutting the
        // listening socket down ends a waiting `accept` (on Linux), and a
        // connection wakes it where that does not; either alone would do
        // unless the socket file was removed under us.
        let _ = nix::sys::socket::shutdown(
            self.listening.as_raw_fd(),
            nix::sys::socket::Shutdown::Both,
        );
        let _ = UnixStream::connect(&self.path);
        for c in self
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a relay serves: the store, the thread state, and what checks the
/// nodes inserted through it (`None`: they are inserted as sent).
#[derive(Clone)]
struct Serving {
    store: Arc<dyn Store>,
    state: Arc<dyn ThreadStore>,
    checker: Option<Cas>,
}

fn accept_loop(
    listener: &UnixListener,
    stop: &AtomicBool,
    conns: &Mutex<Vec<UnixStream>>,
    serving: &Serving,
) {
    let mut handlers = Vec::new();
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("relay: accept failed: {e}");
                // Out of descriptors, say: not a busy loop.
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let Ok(closer) = stream.try_clone() else {
            continue;
        };
        {
            let mut open = conns.lock().unwrap_or_else(PoisonError::into_inner);
            // Checked under the lock `Drop` drains: a connection accepted
            // as the relay stops is closed here rather than missed there.
            if stop.load(Ordering::SeqCst) {
                let _ = closer.shutdown(std::net::Shutdown::Both);
                break;
            }
            open.push(closer);
        }
        let serving = serving.clone();
        match std::thread::Builder::new()
            .name("uwf-relay-conn".into())
            .spawn(move || serve(stream, &serving))
        {
            Ok(h) => handlers.push(h),
            Err(e) => tracing::debug!("relay: cannot start a connection's thread: {e}"),
        }
    }
    for h in handlers {
        let _ = h.join();
    }
}

/// Answers the requests of one connection until it ends.
fn serve(stream: UnixStream, serving: &Serving) {
    let Ok(write) = stream.try_clone() else {
        return;
    };
    let mut r = BufReader::new(stream);
    let mut w = BufWriter::new(write);
    loop {
        let (request, blob) = match read_frame::<Request>(&mut r) {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("relay: a request that cannot be read ends its connection: {e}");
                return;
            }
        };
        let (response, out) = answer(serving, request, blob);
        if write_frame(&mut w, &response, &out).is_err() {
            return;
        }
    }
}

fn cas_error(e: &uwf_cas::CasError) -> Response {
    Response::Error {
        kind: e.kind().into(),
        message: e.to_string(),
    }
}

fn state_error(e: &uwf_state::StateError) -> Response {
    Response::Error {
        kind: e.kind().into(),
        message: e.to_string(),
    }
}

/// Why a node sent to be stored is refused, if it is: what goes into the
/// engine's store is named by its content, whoever sent it, and (with a
/// checker) satisfies its type.
fn refused(serving: &Serving, hash: Hash, node: &uwf_cas::Node) -> Option<Response> {
    let actual = node.hash();
    if actual != hash {
        return Some(Response::Error {
            kind: Kind::Invalid,
            message: format!("a node sent as {hash} hashes to {actual}"),
        });
    }
    let cas = serving.checker.as_ref()?;
    match cas.validate(node.type_hash, &node.payload) {
        Ok(()) => None,
        Err(uwf_cas::CasError::Invalid {
            type_hash,
            title,
            violations,
        }) => Some(Response::Invalid {
            type_hash,
            title,
            violations,
        }),
        Err(other) => Some(cas_error(&other)),
    }
}

/// One request, answered from the engine's store.
fn answer(serving: &Serving, request: Request, blob: Vec<u8>) -> (Response, Vec<u8>) {
    let (store, state) = (serving.store.as_ref(), serving.state.as_ref());
    let none = Vec::new();
    let response = match request {
        Request::Hello => Response::Hello {
            describe: state.describe(),
            config_name: state.config_name(),
            checks: serving.checker.is_some(),
            batches: true,
        },
        Request::GetMany { hashes } => {
            let got = match hashes.as_slice() {
                [one] => store.get(*one).map(|n| vec![n]),
                _ => store.get_many(&hashes),
            };
            match got {
                Ok(nodes) => Response::Nodes { nodes },
                Err(e) => cas_error(&e),
            }
        }
        Request::HasMany { hashes } => match store.has_many(&hashes) {
            Ok(values) => Response::Bools { values },
            Err(e) => cas_error(&e),
        },
        Request::Insert { hash, node } => match refused(serving, hash, &node) {
            Some(refusal) => refusal,
            None => match store.insert(hash, &node) {
                Ok((node, created)) => Response::Inserted { node, created },
                Err(e) => cas_error(&e),
            },
        },
        // Every node is looked at before any is stored: one refused, none
        // is.
        Request::InsertMany { nodes } => {
            match nodes
                .iter()
                .find_map(|(hash, node)| refused(serving, *hash, node))
            {
                Some(refusal) => refusal,
                None => match store.insert_many(&nodes) {
                    Ok(nodes) => Response::InsertedMany { nodes },
                    Err(e) => cas_error(&e),
                },
            }
        }
        Request::CacheGet { key } => match store.cache_get(&key) {
            Ok(Some(bytes)) => return (Response::Entry { present: true }, bytes),
            Ok(None) => Response::Entry { present: false },
            Err(e) => cas_error(&e),
        },
        Request::CachePut { key } => match store.cache_put(&key, &blob) {
            Ok(()) => Response::Done,
            Err(e) => cas_error(&e),
        },
        Request::CacheRemove { key } => match store.cache_remove(&key) {
            Ok(value) => Response::Bool { value },
            Err(e) => cas_error(&e),
        },
        Request::ThreadHead { thread } => match state.thread_head(thread) {
            Ok(head) => Response::Head { head },
            Err(e) => state_error(&e),
        },
        Request::ConfigText => match state.config_text() {
            Ok(text) => Response::Text { text },
            Err(e) => state_error(&e),
        },
        Request::Secrets => match state.secrets() {
            Ok(pairs) => Response::Secrets { pairs },
            Err(e) => state_error(&e),
        },
    };
    (response, none)
}
