//! A throw-away PostgreSQL server for tests: the real server, never a mock.
//! Used by the tests of `uwf-store-pg` (and of anything else that needs a
//! PostgreSQL store); it knows nothing of uwf.
//!
//! [`database`] gives each test a fresh database on one server per test
//! binary, started on first use: the server binaries are found
//! (`$UWF_PG_BINDIR`, `/usr/lib/postgresql/*/bin`, or `pg_config
//! --bindir`), `initdb` creates a cluster in a temporary directory, and
//! `postgres` listens on a Unix socket in that directory only
//! (`listen_addresses=''`), as the `postgres` user (through `runuser`) when
//! the tests run as root. The cluster's superuser `uwf` has the password
//! [`PASSWORD`], so connections exercise password authentication.
//!
//! The server is watched by a small shell process whose standard input is
//! a pipe from the test process: when the test process ends, however it
//! ends, the pipe closes and the watcher stops the server (fast shutdown)
//! and deletes the temporary directory. Nothing is left behind.
//!
//! Faults, for the trials of issue 12: [`PgServer::shut_down`],
//! [`PgServer::start_again`] and [`PgServer::restart`] stop the server
//! (fast shutdown) and start it again on the same data directory and
//! socket; a [`Proxy`] in front of its socket lets a test cut the network
//! between a client and the server ([`ProxyHandle::cut`]) and heal it
//! ([`TestDb::url_through`] gives the URL through a proxy). A restart
//! disturbs every test on that server, and a crate's integration tests are
//! one binary (one process), so the tests that shut a server down or restart
//! it use [`fault_server`], a second server of the binary, and take turns
//! on it; the other tests use [`server`] (or [`database`]) undisturbed.
//!
//! When the binaries are missing, [`database`] prints a loud `SKIPPED:`
//! line to stderr and returns `None` (the test returns early), unless the
//! environment says `CI=true`: then it panics, so CI cannot skip silently.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use postgres::NoTls;

mod proxy;

/// The client [`TestDb::client`] gives, for tests that name its type.
pub use postgres::Client;
pub use proxy::{Proxy, ProxyHandle, Upstream};

/// The password of the test cluster's superuser `uwf`.
pub const PASSWORD: &str = "uwf-test-Pa55word";

/// The superuser of the test cluster.
pub const USER: &str = "uwf";

/// A running test server.
pub struct PgServer {
    bindir: PathBuf,
    base: PathBuf,
    data: PathBuf,
    socket_dir: PathBuf,
    /// Whether the server runs as the `postgres` user (we are root).
    as_postgres: bool,
    /// Serialises restarts.
    restarting: Mutex<()>,
    admin: Mutex<Client>,
    next_db: AtomicUsize,
    // Held open for as long as the server should run (see the module docs).
    watcher: Mutex<Option<(Child, ChildStdin)>>,
}

impl std::fmt::Debug for PgServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgServer")
            .field("bindir", &self.bindir)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A fresh database of the test server.
#[derive(Debug, Clone)]
pub struct TestDb {
    /// Its name.
    pub name: String,
    /// Its URL, password included (`postgresql://uwf:…@/NAME?host=…`).
    pub url: String,
    /// Its URL without the password.
    pub url_without_password: String,
}

impl TestDb {
    /// A plain client connected to this database, for checks and faults
    /// the store API does not offer (raw SQL, terminating backends).
    pub fn client(&self) -> Client {
        match Client::connect(&self.url, NoTls) {
            Ok(c) => c,
            Err(e) => panic!("connecting to the test database {}: {e}", self.name),
        }
    }

    /// Its URL through a [`Proxy`] listening on `127.0.0.1:port`, with the
    /// password if `password`.
    pub fn url_through(&self, port: u16, password: bool) -> String {
        let auth = if password {
            format!("{USER}:{PASSWORD}")
        } else {
            USER.to_owned()
        };
        format!("postgresql://{auth}@127.0.0.1:{port}/{}", self.name)
    }
}

static SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();
static FAULT_SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();

/// The server of this test binary, started on first use; `None` (after a
/// loud `SKIPPED:` line) when the server binaries are missing and `CI` is
/// not `true`.
pub fn server() -> Option<&'static PgServer> {
    started(&SERVER)
}

/// A second server of this test binary, started on first use, for the tests
/// that shut it down or restart it ([`PgServer::shut_down`],
/// [`PgServer::restart`]): they disturb each other (serialise them), not the
/// tests on [`server`] in the same process. `None` as for [`server`].
pub fn fault_server() -> Option<&'static PgServer> {
    started(&FAULT_SERVER)
}

fn started(cell: &'static OnceLock<Result<PgServer, String>>) -> Option<&'static PgServer> {
    match cell.get_or_init(start) {
        Ok(s) => Some(s),
        Err(missing) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "PostgreSQL server binaries not found ({missing}) and CI=true: install the \
                     `postgresql` package (.ci/run does)"
                );
            }
            // Straight to the process's stderr: the test harness captures
            // `eprintln!`, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: PostgreSQL server binaries not found ({missing}); install the \
                 `postgresql` package (apt-get install postgresql) to run this test"
            );
            None
        }
    }
}

/// A fresh, empty database on the test server, or `None` when skipped.
pub fn database() -> Option<TestDb> {
    server().map(PgServer::create_database)
}

impl PgServer {
    /// The directory of the server binaries in use.
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The URL of database `name` (with the password if `password`).
    pub fn url(&self, name: &str, password: bool) -> String {
        let auth = if password {
            format!("{USER}:{PASSWORD}")
        } else {
            USER.to_owned()
        };
        format!(
            "postgresql://{auth}@/{name}?host={}",
            self.socket_dir.display()
        )
    }

    /// The server's data directory (`postmaster.pid` names its process).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The server's Unix socket file (what a [`Proxy`] forwards to).
    pub fn socket_file(&self) -> PathBuf {
        self.socket_dir.join(".s.PGSQL.5432")
    }

    /// A [`Proxy`] on `127.0.0.1` in front of the server's socket: its port
    /// and handle (see [`TestDb::url_through`]).
    pub fn proxy(&self) -> (u16, ProxyHandle) {
        match Proxy::start(Upstream::Unix(self.socket_file())) {
            Ok(p) => p,
            Err(e) => panic!("starting a proxy to the test server: {e}"),
        }
    }

    /// Stops the server with a fast shutdown (`pg_ctl stop -m fast`: open
    /// transactions are rolled back, clients are disconnected) and waits
    /// until it is down; its data directory and socket directory stay, for
    /// [`start_again`](Self::start_again). Until then every connection
    /// attempt fails.
    pub fn shut_down(&self) {
        let _one = self
            .restarting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        run(
            "pg_ctl stop -m fast",
            as_server_user(self.as_postgres, &self.bindir.join("pg_ctl"))
                .arg("stop")
                .arg("-D")
                .arg(&self.data)
                .args(["-m", "fast", "-w", "-t", "60"]),
        );
    }

    /// Starts the server again after [`shut_down`](Self::shut_down), on
    /// the same data directory and socket, and waits until it accepts
    /// connections. The databases and their contents are kept.
    pub fn start_again(&self) {
        let _one = self
            .restarting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let options: Vec<String> = server_options(&self.socket_dir)
            .into_iter()
            .map(|o| {
                assert!(!o.contains('\''), "a quote in a server option: {o}");
                format!("'{o}'")
            })
            .collect();
        run(
            "pg_ctl start",
            as_server_user(self.as_postgres, &self.bindir.join("pg_ctl"))
                .arg("start")
                .arg("-D")
                .arg(&self.data)
                .args(["-w", "-t", "60", "-l"])
                .arg(self.base.join("server-restarted.log"))
                .arg("-o")
                .arg(options.join(" ")),
        );
        let url = self.url("postgres", true);
        let deadline = Instant::now() + Duration::from_secs(60);
        let admin = loop {
            match Client::connect(&url, NoTls) {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => {
                    panic!("the test server did not come back ({e})")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        *self.admin.lock().unwrap_or_else(PoisonError::into_inner) = admin;
    }

    /// [`shut_down`](Self::shut_down), then [`start_again`](Self::start_again).
    pub fn restart(&self) {
        self.shut_down();
        self.start_again();
    }

    /// Creates a fresh database.
    pub fn create_database(&self) -> TestDb {
        let name = format!(
            "uwf_test_{}_{}",
            std::process::id(),
            self.next_db.fetch_add(1, Ordering::SeqCst)
        );
        let mut admin = self.admin.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = admin.batch_execute(&format!("CREATE DATABASE {name}")) {
            panic!("CREATE DATABASE {name}: {e}");
        }
        TestDb {
            url: self.url(&name, true),
            url_without_password: self.url(&name, false),
            name,
        }
    }

    /// Runs `sql` on the `postgres` database as the superuser.
    pub fn admin_execute(&self, sql: &str) -> Result<(), postgres::Error> {
        self.admin
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .batch_execute(sql)
    }

    /// Stops the server now (fast shutdown) and waits for it; the
    /// temporary directory is removed. Dropping the server, or the end of
    /// the process, does the same.
    pub fn stop(&self) {
        let taken = self
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((mut child, stdin)) = taken {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The watcher: starts the server (the command in its arguments) in the
/// background, waits for its standard input to close, then stops the
/// server and removes `$BASE`.
const WATCHER: &str = r#"
"$@" >"$BASE/server.log" 2>&1 &
server=$!
cat >/dev/null
pid=$(head -n 1 "$DATA/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null; fi
wait "$server"
# A server started again by `pg_ctl` is not our child: wait for it too.
while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
rm -rf "$BASE"
"#;

fn start() -> Result<PgServer, String> {
    let bindir = find_bindir()?;
    Ok(launch(bindir))
}

/// The directory of `initdb` and `postgres`.
fn find_bindir() -> Result<PathBuf, String> {
    let usable = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("UWF_PG_BINDIR") {
        let dir = PathBuf::from(dir);
        return if usable(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "UWF_PG_BINDIR={} has no initdb and postgres",
                dir.display()
            ))
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| {
                    let v = e.file_name().to_str()?.parse::<u32>().ok()?;
                    Some((v, e.path().join("bin")))
                })
                .filter(|(_, d)| usable(d))
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Ok(dir);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if usable(&dir) {
            return Ok(dir);
        }
    }
    Err("looked in $UWF_PG_BINDIR, /usr/lib/postgresql/*/bin and `pg_config --bindir`".into())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program args…`, as the `postgres` user when we are root.
fn as_server_user(root: bool, program: &Path) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn run(what: &str, cmd: &mut Command) {
    match cmd.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("{what}: cannot run it: {e}"),
    }
}

/// The options of `postgres` after `-D DATA`: the socket directory, no TCP,
/// no durability (a throw-away cluster), room for many clients.
fn server_options(socket_dir: &Path) -> Vec<String> {
    [
        "-k".to_owned(),
        socket_dir.display().to_string(),
        "-c".to_owned(),
        "listen_addresses=".to_owned(),
    ]
    .into_iter()
    .chain(
        [
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=300",
        ]
        .into_iter()
        .flat_map(|o| ["-c".to_owned(), o.to_owned()]),
    )
    .collect()
}

fn launch(bindir: PathBuf) -> PgServer {
    let root = is_root();
    let base = match tempfile::Builder::new().prefix("uwf-pg-").tempdir() {
        Ok(d) => d.keep(),
        Err(e) => panic!("creating the test server's directory: {e}"),
    };
    let data = base.join("data");
    let socket_dir = base.join("sock");
    let pwfile = base.join("pwfile");
    if let Err(e) = std::fs::create_dir(&socket_dir)
        .and_then(|()| std::fs::write(&pwfile, format!("{PASSWORD}\n")))
    {
        panic!("preparing {}: {e}", base.display());
    }
    if root {
        run(
            "chown -R postgres: (the server runs as the postgres user)",
            Command::new("chown").arg("-R").arg("postgres:").arg(&base),
        );
    }
    run(
        "initdb",
        as_server_user(root, &bindir.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", USER, "-E", "UTF8", "--no-locale", "--no-sync"])
            .args(["--auth-local=scram-sha-256", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display())),
    );
    let mut server = as_server_user(root, &bindir.join("postgres"));
    server
        .arg("-D")
        .arg(&data)
        .args(server_options(&socket_dir));
    let mut watcher = Command::new("sh");
    watcher
        .args(["-c", WATCHER, "uwf-pg-watcher"])
        .arg(server.get_program())
        .args(server.get_args())
        .env("BASE", &base)
        .env("DATA", &data)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = match watcher.spawn() {
        Ok(c) => c,
        Err(e) => panic!("starting the test server: {e}"),
    };
    let Some(stdin) = child.stdin.take() else {
        panic!("the watcher has no standard input")
    };
    let url = format!(
        "postgresql://{USER}:{PASSWORD}@/postgres?host={}",
        socket_dir.display()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let admin = loop {
        match Client::connect(&url, NoTls) {
            Ok(c) => break c,
            Err(e) => {
                let exited = child.try_wait().ok().flatten();
                if exited.is_some() || Instant::now() > deadline {
                    let mut log = String::new();
                    let _ = std::fs::File::open(base.join("server.log"))
                        .and_then(|mut f| f.read_to_string(&mut log));
                    panic!("the test server did not start ({e}); its log:\n{log}");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    PgServer {
        bindir,
        base,
        data,
        socket_dir,
        as_postgres: root,
        restarting: Mutex::new(()),
        admin: Mutex::new(admin),
        next_db: AtomicUsize::new(0),
        watcher: Mutex::new(Some((child, stdin))),
    }
}
