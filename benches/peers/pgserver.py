"""A throw-away PostgreSQL server for the peer benchmark, started the way
uwf's own tests start theirs (crates/uwf-pg-testing): `initdb` into a
temporary directory, a Unix socket in that directory only, password
(scram-sha-256) authentication, run as the `postgres` user through
`runuser` when we are root. Unlike the tests' server it keeps PostgreSQL's
durability: `fsync=on`, `synchronous_commit=on`, `full_page_writes=on`.
"""

import glob
import os
import shutil
import subprocess
import tempfile
import time

USER = "bench"
PASSWORD = "bench-Pa55word"


def find_bindir():
    """`$UWF_PG_BINDIR`, else the newest /usr/lib/postgresql/*/bin."""
    given = os.environ.get("UWF_PG_BINDIR")
    candidates = [given] if given else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2])
    )[::-1]
    for d in candidates:
        if os.path.isfile(os.path.join(d, "initdb")) and os.path.isfile(os.path.join(d, "postgres")):
            return d
    raise SystemExit(
        "PostgreSQL server binaries not found (looked in $UWF_PG_BINDIR and "
        "/usr/lib/postgresql/*/bin): install the `postgresql` package"
    )


class Server:
    def __init__(self, statements=False):
        """`statements`: load pg_stat_statements (it costs a little on
        every statement, so only for the statement listing)."""
        self.bindir = find_bindir()
        self.root = os.geteuid() == 0
        self.base = tempfile.mkdtemp(prefix="uwf-peers-pg-")
        self.data = os.path.join(self.base, "data")
        self.sock = os.path.join(self.base, "sock")
        os.mkdir(self.sock)
        pwfile = os.path.join(self.base, "pwfile")
        with open(pwfile, "w") as f:
            f.write(PASSWORD + "\n")
        if self.root:
            # The base directory must be reachable by the postgres user.
            os.chmod(self.base, 0o755)
            subprocess.run(["chown", "-R", "postgres:", self.base], check=True)
        self._run(
            "initdb", "-D", self.data, "-U", USER, "-E", "UTF8", "--no-locale",
            "--auth-local=scram-sha-256", "--auth-host=scram-sha-256", f"--pwfile={pwfile}",
        )
        options = " ".join(
            f"-c {o}"
            for o in [
                "listen_addresses=''", "fsync=on", "synchronous_commit=on",
                "full_page_writes=on", "max_connections=200",
                "track_counts=on",
            ]
            + (["shared_preload_libraries=pg_stat_statements"] if statements else [])
        )
        self._run(
            "pg_ctl", "start", "-D", self.data, "-w", "-t", "60",
            "-l", os.path.join(self.base, "server.log"), "-o", f"-k {self.sock} {options}",
        )
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            self.postmaster = int(f.readline())
        self.statements = statements
        if statements:
            with self.connect() as c:
                c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def _run(self, program, *args):
        cmd = [os.path.join(self.bindir, program), *args]
        if self.root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{program} failed ({done.returncode}):\n{done.stdout}")

    def url(self, db, password=True):
        auth = f"{USER}:{PASSWORD}" if password else USER
        return f"postgresql://{auth}@/{db}?host={self.sock}"

    def connect(self, db="postgres"):
        import psycopg

        return psycopg.connect(self.url(db), autocommit=True)

    def create_database(self, name):
        with self.connect() as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')

    def stop(self):
        if self.base is None:
            return
        try:
            self._run("pg_ctl", "stop", "-D", self.data, "-m", "fast", "-w", "-t", "60")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    # --- what the server spends -------------------------------------------

    def _children(self):
        kids = []
        for task in os.listdir(f"/proc/{self.postmaster}/task"):
            try:
                with open(f"/proc/{self.postmaster}/task/{task}/children") as f:
                    kids.extend(int(p) for p in f.read().split())
            except OSError:
                pass
        return kids

    def cpu_seconds(self):
        """CPU of the whole server: the postmaster, the backends it reaped
        (cutime + cstime) and every live child process."""
        tick = os.sysconf("SC_CLK_TCK")

        def fields(pid):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()
            except OSError:
                return None

        total = 0
        for pid in self._children():
            f = fields(pid)
            if f:
                total += int(f[11]) + int(f[12])  # utime, stime
        f = fields(self.postmaster)
        total += sum(int(x) for x in f[11:15])  # utime, stime, cutime, cstime
        return total / tick

    def settle(self, baseline, timeout=2.0):
        """Waits until the server has at most `baseline` child processes
        (backends of exited clients have gone), or `timeout`."""
        end = time.monotonic() + timeout
        while len(self._children()) > baseline and time.monotonic() < end:
            time.sleep(0.005)

    def children_count(self):
        return len(self._children())

    def stat(self, db):
        """(transactions committed + rolled back, sessions) of database `db`."""
        with self.connect() as c:
            row = c.execute(
                "SELECT xact_commit + xact_rollback, sessions FROM pg_stat_database WHERE datname = %s",
                (db,),
            ).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def reset_statements(self):
        with self.connect() as c:
            c.execute("SELECT pg_stat_statements_reset()")

    def top_statements(self, db, limit=int(os.environ.get("UWF_PEERS_TOP", "8"))):
        """[(calls, rows, query)] of database `db`, most called first."""
        with self.connect() as c:
            return c.execute(
                "SELECT s.calls, s.rows, s.query FROM pg_stat_statements s "
                "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s "
                "ORDER BY s.calls DESC LIMIT %s",
                (db, limit),
            ).fetchall()
