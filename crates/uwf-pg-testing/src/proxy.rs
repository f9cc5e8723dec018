//! A small TCP proxy in front of the test server, so that a test can cut
//! the network between a client (a `PgStore`, a `uwf worker`) and the
//! database, and heal it again, without touching the server.
//!
//! [`Proxy::start`] listens on a loopback port and forwards every
//! connection to its [`Upstream`] (the server's Unix socket, or a TCP
//! address), one pair of copying threads per connection.
//! [`ProxyHandle::cut`] drops every open connection (both ends are shut
//! down, so the client sees its connection closed at once) and closes the
//! listening socket, so new connections are refused; [`ProxyHandle::heal`]
//! listens on the same port again. Dropping the last handle stops the proxy.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Where a [`Proxy`] forwards its connections.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// A Unix socket (a PostgreSQL socket file, `<dir>/.s.PGSQL.<port>`).
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

/// The proxy; see the module documentation.
#[derive(Debug)]
pub struct Proxy;

/// Controls a running proxy: [`cut`](Self::cut), [`heal`](Self::heal).
/// Clones control the same proxy; the proxy stops when the last one is
/// dropped.
#[derive(Debug, Clone)]
pub struct ProxyHandle {
    shared: Arc<Shared>,
    _stop: Arc<StopOnDrop>,
}

#[derive(Debug)]
struct Shared {
    port: u16,
    upstream: Upstream,
    cut: AtomicBool,
    stopped: AtomicBool,
    /// Whether the accept loop holds a listening socket.
    listening: AtomicBool,
    /// Both ends of every open connection, to shut them down on a cut.
    open: Mutex<Vec<(u64, Ends)>>,
    next_id: AtomicUsize,
    accepted: AtomicUsize,
}

#[derive(Debug)]
struct Ends {
    client: TcpStream,
    server: ServerEnd,
}

#[derive(Debug)]
enum ServerEnd {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl ServerEnd {
    fn shutdown(&self) {
        let _ = match self {
            ServerEnd::Unix(s) => s.shutdown(Shutdown::Both),
            ServerEnd::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }

    fn try_clone(&self) -> io::Result<ServerEnd> {
        Ok(match self {
            ServerEnd::Unix(s) => ServerEnd::Unix(s.try_clone()?),
            ServerEnd::Tcp(s) => ServerEnd::Tcp(s.try_clone()?),
        })
    }
}

#[derive(Debug)]
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::SeqCst);
        self.0.drop_all();
    }
}

/// How often the accept loop looks at the cut flag.
const TICK: Duration = Duration::from_millis(10);

impl Proxy {
    /// Starts a proxy on `127.0.0.1` (a free port) forwarding to
    /// `upstream`; returns the port and the handle.
    pub fn start(upstream: Upstream) -> io::Result<(u16, ProxyHandle)> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            port,
            upstream,
            cut: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            listening: AtomicBool::new(true),
            open: Mutex::new(Vec::new()),
            next_id: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
        });
        listener.set_nonblocking(true)?;
        let s = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(format!("pg-proxy-{port}"))
            .spawn(move || accept_loop(&s, Some(listener)))?;
        let handle = ProxyHandle {
            _stop: Arc::new(StopOnDrop(Arc::clone(&shared))),
            shared,
        };
        Ok((port, handle))
    }
}

impl ProxyHandle {
    /// The proxy's port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// Drops every open connection and refuses new ones (the listening
    /// socket is closed) until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.drop_all();
        // The accept loop closes the listener within a tick; wait for it so
        // that a connection attempt after `cut` returns is refused.
        while self.shared.listening() {
            std::thread::sleep(TICK);
        }
    }

    /// Accepts and forwards connections again.
    pub fn heal(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
        while !self.shared.listening() && !self.shared.stopped.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
        }
    }

    /// Whether the network is cut.
    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Shared {
    fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }

    fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::SeqCst);
    }

    fn drop_all(&self) {
        let open = std::mem::take(&mut *self.open.lock().unwrap_or_else(PoisonError::into_inner));
        for (_, ends) in open {
            let _ = ends.client.shutdown(Shutdown::Both);
            ends.server.shutdown();
        }
    }

    fn forget(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(i, _)| *i != id);
    }

    fn connect_upstream(&self) -> io::Result<ServerEnd> {
        Ok(match &self.upstream {
            Upstream::Unix(path) => ServerEnd::Unix(UnixStream::connect(path)?),
            Upstream::Tcp(addr) => {
                let s = TcpStream::connect(addr)?;
                s.set_nodelay(true)?;
                ServerEnd::Tcp(s)
            }
        })
    }
}

fn accept_loop(shared: &Arc<Shared>, mut listener: Option<TcpListener>) {
    shared.set_listening(listener.is_some());
    while !shared.stopped.load(Ordering::SeqCst) {
        let cut = shared.cut.load(Ordering::SeqCst);
        if cut && listener.is_some() {
            listener = None;
            shared.set_listening(false);
        } else if !cut && listener.is_none() {
            // The same port again (std sets SO_REUSEADDR on Unix).
            match TcpListener::bind(("127.0.0.1", shared.port))
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
            {
                Ok(l) => {
                    listener = Some(l);
                    shared.set_listening(true);
                }
                Err(_) => {
                    std::thread::sleep(TICK);
                    continue;
                }
            }
        }
        let Some(l) = &listener else {
            std::thread::sleep(TICK);
            continue;
        };
        match l.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                forward(shared, client);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(_) => std::thread::sleep(TICK),
        }
    }
    shared.set_listening(false);
}

/// Connects `client` to the upstream and copies both ways; a connection
/// that cannot reach the upstream (the server is down) is closed.
fn forward(shared: &Arc<Shared>, client: TcpStream) {
    let _ = client.set_nonblocking(false);
    let _ = client.set_nodelay(true);
    let Ok(server) = shared.connect_upstream() else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst) as u64;
    let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    ) else {
        let _ = client.shutdown(Shutdown::Both);
        server.shutdown();
        return;
    };
    {
        let mut open = shared.open.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.cut.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            server.shutdown();
            return;
        }
        open.push((id, Ends { client, server }));
    }
    let up = Arc::clone(shared);
    let down = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("pg-proxy-up".into())
        .spawn(move || {
            copy(c2, s2);
            up.forget(id);
        })
        .and_then(|_| {
            std::thread::Builder::new()
                .name("pg-proxy-down".into())
                .spawn(move || {
                    copy_back(s3, c3);
                    down.forget(id);
                })
        });
    if spawned.is_err() {
        shared.drop_all();
    }
}

/// Client → server until either side ends; then both are shut down.
fn copy(mut from: TcpStream, to: ServerEnd) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let written = match &to {
            ServerEnd::Unix(s) => (&*s).write_all(&buf[..n]),
            ServerEnd::Tcp(s) => (&*s).write_all(&buf[..n]),
        };
        if written.is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    to.shutdown();
}

/// Server → client until either side ends; then both are shut down.
fn copy_back(from: ServerEnd, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let read = match &from {
            ServerEnd::Unix(s) => (&*s).read(&mut buf),
            ServerEnd::Tcp(s) => (&*s).read(&mut buf),
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    from.shutdown();
}
