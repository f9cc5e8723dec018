"""uwf side by side with LangGraph and DBOS Transact (docs/performance.md,
"Side by side with LangGraph and DBOS").

    just bench-peers        # creates the venv, builds uwf, runs this

Every system runs the same trivial external program as its role's work
(PROGRAM below: it prints the output `{"n": 1, "note": "one more round"}`)
and persists each step before the next. By default uwf runs that very
program as a plain program (`protocol: stdio`, docs/agent-protocol.md,
"Plain programs"): it prints the role's output and uwf stores the step, as
the peers store theirs, so "agent alone" is the program alone. With
UWF_PEERS_AGENT=mock uwf runs `uwf-mock` instead, an agent of the agent
protocol answering that output from a scenario: it reads the thread and
writes the step into uwf's store itself, so "agent alone" is uwf-mock run
alone (as `just bench-step` times it) and the bare program is timed too. The peers
run warm: one long-lived Python process each (peer.py), imports done and
database open before anything is timed; uwf runs as its CLI (`uwf thread
run`, `uwf thread step`) and `uwf worker` do. Within a workload the systems
take turns round after round, in a rotating order, so that the noise of
the machine falls on all of them alike; tables give the median and the
90th percentile and the ratio uwf / peer of the medians.

Workloads (`UWF_PEERS_WORKLOADS`, comma-separated, default all):
- `step`: ms per step of a UWF_PEERS_STEPS-step thread (default 100),
  uwf's filesystem store vs SQLite (LangGraph: SqliteSaver, WAL,
  synchronous=FULL; DBOS: its SQLite system database, whose default is
  synchronous=FULL), and the overhead over the agent / program alone;
- `pg`: the same on PostgreSQL, with the CPU per step of the system (its
  processes and their children) and of the PostgreSQL server (postmaster,
  reaped and live backends, from /proc), then the transactions and
  sessions per step from pg_stat_database (below);
- `long`: one more step at each history length of UWF_PEERS_LENGTHS
  (default "10 1000 3000"), filesystem / SQLite;
- `workers`: steps/s of K processes on one PostgreSQL, K in
  UWF_PEERS_WORKERS (default "1 2 4 8"): UWF_PEERS_THREADS threads
  (default 80) of UWF_PEERS_THREAD_STEPS steps (default 5). uwf: K `uwf
  worker` processes claiming threads queued with `uwf thread run
  --detach`; peers: K warm processes, each given its share of the threads.
  For uwf also the PostgreSQL transactions and sessions per step of the
  workers (pg_stat_database around their run, once they have exited; the
  harness's own polling statements taken off).

Other sizes: UWF_PEERS_ROUNDS (rounds of `step` and `pg`, default 10),
UWF_PEERS_ALONE (agent-alone samples per round, default 10),
UWF_PEERS_LONG_SAMPLES (default 10). UWF_PEERS_STATEMENTS=1 loads
pg_stat_statements and lists each system's most called statements per
step (it slows every statement a little: not for the timed figures).
UWF_PEERS_SYSTEMS picks systems
(default "uwf,langgraph,dbos"); UWF_PEERS_AGENT is uwf's agent (`stdio`,
the default, or `mock`, above); UWF_PEERS_BIN is where `uwf` and
`uwf-mock` are (default target/release); UWF_PEERS_DIR keeps the stores
and logs there.

Transactions and sessions per step are measured on fresh processes run to
their end (so PostgreSQL has flushed their statistics): a thread of
10 steps and one of 10 + UWF_PEERS_STEPS steps, each from a new process;
the difference of the pg_stat_database deltas (xact_commit +
xact_rollback, sessions) divided by the difference of the steps, so start-up
and setup cancel out.
"""

import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import pgserver  # noqa: E402

OUTPUT = '{"n": 1, "note": "one more round"}'


def env_int(name, default):
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        n = int(value)
    except ValueError:
        raise SystemExit(f"{name}={value!r} is not a whole number")
    if n < 1:
        raise SystemExit(f"{name}={value!r} must be at least 1")
    return n


def env_ints(name, default):
    value = os.environ.get(name, "").strip() or default
    try:
        out = [int(x) for x in value.replace(",", " ").split()]
    except ValueError:
        raise SystemExit(f"{name}={value!r} is not a list of whole numbers")
    if not out or min(out) < 1:
        raise SystemExit(f"{name}={value!r} must list numbers of at least 1")
    return out


def env_words(name, default, allowed):
    value = os.environ.get(name, "").strip() or default
    out = [w for w in value.replace(",", " ").split()]
    unknown = [w for w in out if w not in allowed]
    if unknown:
        raise SystemExit(f"{name}: unknown {', '.join(unknown)} (choose from {', '.join(allowed)})")
    return out


STEPS = env_int("UWF_PEERS_STEPS", 100)
ROUNDS = env_int("UWF_PEERS_ROUNDS", 10)
ALONE = env_int("UWF_PEERS_ALONE", 10)
LENGTHS = sorted(set(env_ints("UWF_PEERS_LENGTHS", "10 1000 3000")))
LONG_SAMPLES = env_int("UWF_PEERS_LONG_SAMPLES", 10)
WORKERS = env_ints("UWF_PEERS_WORKERS", "1 2 4 8")
THREADS = env_int("UWF_PEERS_THREADS", 80)
THREAD_STEPS = env_int("UWF_PEERS_THREAD_STEPS", 5)
WORKLOADS = env_words("UWF_PEERS_WORKLOADS", "step,pg,long,workers", ["step", "pg", "long", "workers"])
SYSTEMS = env_words("UWF_PEERS_SYSTEMS", "uwf,langgraph,dbos", ["uwf", "langgraph", "dbos"])
PEERS = [s for s in SYSTEMS if s != "uwf"]
BIN = os.environ.get("UWF_PEERS_BIN") or os.path.join(REPO, "target", "release")
PROGRAM = [shutil.which("echo") or "/bin/echo", OUTPUT]
AGENT = env_words("UWF_PEERS_AGENT", "stdio", ["stdio", "mock"])[0]

SCENARIO = 'roles:\n  work:\n    - output: { n: 1, note: "one more round" }\n'


def workflow(name, limit):
    return f"""name: {name}
description: loops until the thread has {limit} steps
roles:
  work:
    description: works
    systemPrompt: "do the work"
    outputSchema: {{ type: object, properties: {{ n: {{ type: integer }}, note: {{ type: string }} }}, required: [n] }}
conditions:
  enough: {{ description: enough steps, expression: "$count(steps) >= {limit}" }}
graph:
  $START: [ {{ role: work, condition: null }} ]
  work: [ {{ role: $END, condition: enough }}, {{ role: work, condition: null }} ]
"""


def ms(seconds):
    return seconds * 1000.0


def median_p90(values):
    v = sorted(values)
    return statistics.median(v), v[round((len(v) - 1) * 0.9)]


def rotate(items, k):
    k %= len(items)
    return items[k:] + items[:k]


# --- uwf ---------------------------------------------------------------------


class Uwf:
    """The uwf binaries on one store: a root directory, and with `pg` its
    database instead of the root's files."""

    def __init__(self, work, name, pg=None, db=None):
        self.root = os.path.join(work, name)
        os.makedirs(self.root, exist_ok=True)
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("RUST_LOG", "UNCAGED_WORKFLOW_STORAGE_ROOT", "WORKFLOW_STORAGE_ROOT",
                         "UWF_STORE", "UWF_STORE_PASSWORD")
        }
        self.env["NO_COLOR"] = "1"
        if pg:
            self.env["UWF_STORE"] = pg.url(db, password=False)
            self.env["UWF_STORE_PASSWORD"] = pgserver.PASSWORD
        self.log = os.path.join(work, name + ".log")
        self.scenario = os.path.join(work, "scenario.yaml")
        # Both agents as aliases of the store's configuration (config.yaml,
        # or the database's own), so that workers find them too.
        config = (
            "agents:\n"
            f"  mock: {{ command: {json.dumps(os.path.join(BIN, 'uwf-mock'))}, args: [{json.dumps(self.scenario)}] }}\n"
            f"  stdio: {{ command: {json.dumps(PROGRAM[0])}, args: [{json.dumps(OUTPUT)}], protocol: stdio }}\n"
        )
        if pg:
            path = os.path.join(work, name + ".config.yaml")
            with open(path, "w") as f:
                f.write(config)
            self.run("store", "init", "--config", path)
        else:
            with open(os.path.join(self.root, "config.yaml"), "w") as f:
                f.write(config)
        self.agent = AGENT

    def argv(self, *args):
        return [os.path.join(BIN, "uwf"), "--root", self.root, *args]

    def run(self, *args, ok=(0,), expect=None):
        """Runs `uwf ARGS` to its end: (wall s, CPU s of it and its agents, stdout)."""
        return timed(self.argv(*args), self.env, self.log, ok=ok, expect=expect)

    def alone(self, thread, head):
        """uwf-mock alone, as uwf starts it for `thread`'s role `work` at
        `head` (with the environment uwf gives it: docs/agent-protocol.md)."""
        env = dict(self.env)
        env["UNCAGED_WORKFLOW_STORAGE_ROOT"] = self.root
        env["UWF_AGENT"] = "mock"
        env["UWF_HEAD"] = head
        env["UWF_EDGE_PROMPT"] = ""  # the loop's edge has no prompt
        return timed([os.path.join(BIN, "uwf-mock"), self.scenario, thread, "work"], env, self.log)

    def spawn(self, *args):
        with open(self.log, "a") as log:
            return subprocess.Popen(self.argv(*args), env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log)


def timed(argv, env, log, ok=(0,), expect=None):
    """Runs argv; (wall s, CPU s of the process and the children it reaped, stdout)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode(errors="replace")
    with open(log, "a") as f:
        f.write(stderr)
    if p.returncode not in ok or (expect and expect not in stderr):
        raise SystemExit(f"{' '.join(argv)} exited with {p.returncode}:\n{stderr[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, stdout


# --- the peers ---------------------------------------------------------------


class Peer:
    """A warm peer process (peer.py)."""

    def __init__(self, kind, store, work, tag=""):
        self.kind = kind
        self.log_path = os.path.join(work, f"{kind}{tag}.log")
        self.log = open(self.log_path, "a")
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), kind, store, json.dumps(PROGRAM)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=work,
        )
        self._read()

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            self.p.wait()
            with open(self.log_path) as f:
                tail = f.read()[-3000:]
            raise SystemExit(f"peer {self.kind} ended (status {self.p.returncode}):\n{tail}")
        return json.loads(line)

    def send(self, cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def ask(self, cmd):
        self.send(cmd)
        return self._read()

    def close(self):
        self.p.stdin.close()
        status = self.p.wait()
        self.log.close()
        if status != 0:
            with open(self.log_path) as f:
                tail = f.read()[-3000:]
            raise SystemExit(f"peer {self.kind} exited with {status}:\n{tail}")


def program_alone():
    t = time.perf_counter()
    subprocess.run(PROGRAM, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, check=True)
    return time.perf_counter() - t


# --- workloads ----------------------------------------------------------------


def fmt(values, scale=ms, digits=1):
    if not values:
        return "—"
    m, p = median_p90([scale(v) for v in values])
    return f"{m:.{digits}f} ({p:.{digits}f})"


def med(values, scale=ms):
    return statistics.median([scale(v) for v in values]) if values else None


def ratio(a, b):
    return f"{a / b:.2f}×" if a is not None and b else "—"


def print_table(title, rows, note):
    print(f"\n### {title}\n")
    if note:
        print(note + "\n")
    header = ["workload"] + SYSTEMS + [f"uwf / {p}" for p in PEERS if "uwf" in SYSTEMS]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for label, cells, medians in rows:
        line = [label] + [cells.get(s, "—") for s in SYSTEMS]
        if "uwf" in SYSTEMS:
            line += [ratio(medians.get("uwf"), medians.get(p)) for p in PEERS]
        print("| " + " | ".join(line) + " |")
    sys.stdout.flush()


def per_step_rounds(work, pg=None):
    """`step` and `pg`: ROUNDS rounds of a STEPS-step thread per system,
    plus the agent / program alone; on PostgreSQL the CPU with the server's."""
    tag = "pg" if pg else "fs"
    wall = {s: [] for s in SYSTEMS}
    cpu = {s: [] for s in SYSTEMS}
    dbcpu = {s: [] for s in SYSTEMS}
    alone = {s: [] for s in SYSTEMS}
    bare = []
    if "uwf" in SYSTEMS:
        db = None
        if pg:
            db = "uwf_steps"
            pg.create_database(db)
        uwf = Uwf(work, f"uwf-{tag}", pg, db)
        wf = os.path.join(work, f"loop-{STEPS}.yaml")
        endless = os.path.join(work, "endless.yaml")
        # The thread the agent alone answers in: uwf steps it before each
        # sample (untimed), so every sample writes a new StepNode.
        alone_thread = json.loads(uwf.run("thread", "start", endless, "-p", "agent alone")[2])["thread"]
        # A plain program alone is the bare program, timed below.
        agent_alone = 0 if pg or AGENT == "stdio" else ALONE
    peers = {}
    for kind in PEERS:
        if pg:
            pg.create_database(f"{kind}_steps")
            store = pg.url(f"{kind}_steps")
        else:
            store = "sqlite:" + os.path.join(work, f"{kind}-{tag}.sqlite")
        peers[kind] = Peer(kind, store, work, f"-{tag}")
    baseline = pg.children_count() if pg else 0
    for r in range(ROUNDS + 1):  # round 0 warms up, untimed
        for s in rotate(SYSTEMS, r):
            before = pg.cpu_seconds() if pg else 0.0
            if s == "uwf":
                w, c, _ = uwf.run("thread", "run", wf, "-p", f"round {r}", "--agent", uwf.agent,
                                   "--max-steps", str(STEPS))
            else:
                reply = peers[s].ask({"cmd": "thread", "steps": STEPS})
                w, c = reply["wall"], reply["cpu"]
            if pg:
                pg.settle(baseline)
            d = (pg.cpu_seconds() - before) if pg else 0.0
            if r == 0:
                continue
            wall[s].append(w / STEPS)
            cpu[s].append(c / STEPS)
            dbcpu[s].append(d / STEPS)
        # The agent / program alone, in the same round.
        for s in rotate(SYSTEMS, r):
            if s == "uwf":
                # uwf-mock alone reaches PostgreSQL only through the relay
                # of a uwf that runs it (it links no database client), so
                # it is timed alone on the filesystem only. Alone it also
                # checks the nodes it stores, which inside a step the
                # engine does for it (docs/performance.md, "Starting an
                # agent"): the bare program is the fairer baseline.
                for _ in range(agent_alone):
                    out = uwf.run("thread", "step", alone_thread, "--agent", uwf.agent)[2]
                    w, _, _ = uwf.alone(alone_thread, json.loads(out)["head"])
                    if r:
                        alone[s].append(w)
                for _ in range(ALONE):
                    w = program_alone()
                    if r:
                        bare.append(w)
                        if AGENT == "stdio":
                            alone[s].append(w)
            else:
                walls = peers[s].ask({"cmd": "alone", "samples": ALONE})["walls"]
                if r:
                    alone[s].extend(walls)
        print(f"  {tag} round {r}/{ROUNDS} done", file=sys.stderr, flush=True)
    for p in peers.values():
        p.close()
    store = "PostgreSQL" if pg else "filesystem / SQLite"
    rows = []
    rows.append((f"ms per step, {store} ({STEPS}-step thread)",
                 {s: fmt(wall[s]) for s in SYSTEMS}, {s: med(wall[s]) for s in SYSTEMS}))
    rows.append((f"agent (uwf: {'echo' if AGENT == 'stdio' else 'uwf-mock'}) / program alone, ms",
                 {s: fmt(alone[s]) for s in SYSTEMS}, {}))
    over = {s: med(wall[s]) - med(alone[s]) if alone[s] else None for s in SYSTEMS}
    rows.append(("overhead over the agent / program alone, ms (median − median)",
                 {s: "—" if over[s] is None else f"{over[s]:.1f}" for s in SYSTEMS}, over))
    if "uwf" in SYSTEMS:
        # The same program under every system: uwf's step over echo run
        # alone, the peers' over the program as they run it (their row
        # above).
        o = med(wall["uwf"]) - med(bare)
        bare_over = {s: over[s] for s in PEERS}
        bare_over["uwf"] = o
        rows.append(("overhead over the bare program (uwf: echo alone), ms",
                     {s: (f"{o:.1f} (echo alone {fmt(bare)})" if s == "uwf"
                          else "—" if over[s] is None else f"{over[s]:.1f}") for s in SYSTEMS},
                     bare_over))
    rows.append(("CPU ms per step of the system's processes",
                 {s: fmt(cpu[s]) for s in SYSTEMS}, {s: med(cpu[s]) for s in SYSTEMS}))
    if pg:
        rows.append(("CPU ms per step of PostgreSQL",
                     {s: fmt(dbcpu[s]) for s in SYSTEMS}, {s: med(dbcpu[s]) for s in SYSTEMS}))
        tot = {s: [a + b for a, b in zip(cpu[s], dbcpu[s])] for s in SYSTEMS}
        rows.append(("CPU ms per step incl. the database",
                     {s: fmt(tot[s]) for s in SYSTEMS}, {s: med(tot[s]) for s in SYSTEMS}))
    return rows


def pg_counts(work, pg):
    """Transactions and sessions per step (see the module docs)."""
    short, long_ = 10, 10 + STEPS
    out = {}
    reads = {}
    for s in SYSTEMS:
        db = f"{s}_counts"
        pg.create_database(db)
        if s == "uwf":
            uwf = Uwf(work, "uwf-counts", pg, db)
        deltas = []
        # The first run (untimed) creates the schema, once per database.
        for n in (1, short, long_):
            baseline = pg.children_count()
            if pg.statements and n == long_:
                pg.reset_statements()
            x0, s0 = pg.stat(db)
            if s == "uwf":
                wf = os.path.join(work, f"loop-{n}.yaml")
                with open(wf, "w") as f:
                    f.write(workflow(f"loop{n}", n))
                uwf.run("thread", "run", wf, "-p", "count", "--agent", uwf.agent, "--max-steps", str(n))
            else:
                peer = Peer(s, pg.url(db), work, "-counts")
                peer.ask({"cmd": "thread", "steps": n})
                peer.close()
            pg.settle(baseline, timeout=10)
            x1, s1 = pg.stat(db)
            deltas.append((x1 - x0, s1 - s0))
        if pg.statements:
            print(f"\nmost called statements of {s}, per step of the {long_}-step run "
                  "(calls, rows; pg_stat_statements):")
            for calls, nrows, query in pg.top_statements(db):
                q = " ".join(query.split())[:110]
                print(f"  {calls / long_:6.1f} {nrows / long_:7.1f}  {q}")
        (xa, sa), (xb, sb) = deltas[1:]
        out[s] = ((xb - xa) / (long_ - short), (sb - sa) / (long_ - short), xb / long_, sb / long_)
        if s == "uwf":
            # Read-only commands: transactions of one more run (1 vs 3 runs,
            # so the measuring connections' own cancel out).
            for args in (("thread", "show", "@last"), ("thread", "list", "--all")):
                counted = []
                for k in (1, 3):
                    baseline = pg.children_count()
                    x0, _ = pg.stat(db)
                    for _ in range(k):
                        uwf.run(*args)
                    pg.settle(baseline, timeout=10)
                    x1, _ = pg.stat(db)
                    counted.append(x1 - x0)
                reads[" ".join(args[:2])] = (counted[1] - counted[0]) / 2
    rows = [
        ("PostgreSQL transactions per step (marginal)",
         {s: f"{out[s][0]:.1f}" for s in SYSTEMS}, {s: out[s][0] for s in SYSTEMS}),
        ("PostgreSQL sessions (connections) per step (marginal)",
         {s: f"{out[s][1]:.2f}" for s in SYSTEMS}, {}),
        (f"transactions / sessions per step, whole {long_}-step run incl. start-up",
         {s: f"{out[s][2]:.1f} / {out[s][3]:.2f}" for s in SYSTEMS}, {}),
    ]
    for what, n in reads.items():
        rows.append((f"uwf: PostgreSQL transactions of one `uwf {what}`", {"uwf": f"{n:.1f}"}, {}))
    return rows


def long_threads(work):
    """`long`: one more step at each history length, filesystem / SQLite."""
    times = {s: {n: [] for n in LENGTHS} for s in SYSTEMS}
    top = max(LENGTHS)
    uwf = None
    if "uwf" in SYSTEMS:
        uwf = Uwf(work, "uwf-long")
        # A thread of `top` steps in a workflow that never ends there; each
        # sample forks it at a length (untimed) and times `uwf thread step`.
        wf = os.path.join(work, "endless.yaml")
        print(f"  long: uwf builds a {top}-step thread …", file=sys.stderr, flush=True)
        uwf.run("thread", "run", wf, "-p", "long", "--max-steps", str(top), "--agent", uwf.agent,
                ok=(1,), expect="max_steps")
        thread = json.loads(uwf.run("thread", "list")[2])[0]["thread"]
        steps = json.loads(uwf.run("thread", "steps", thread)[2])["steps"]
        at = {n: steps[n]["hash"] for n in LENGTHS}
    lg = None
    if "langgraph" in SYSTEMS:
        lg = Peer("langgraph", "sqlite:" + os.path.join(work, "langgraph-long.sqlite"), work, "-long")
        for n in LENGTHS:
            print(f"  long: langgraph builds a {n}-step thread …", file=sys.stderr, flush=True)
            lg.ask({"cmd": "prepare", "length": n})
    for r in range(LONG_SAMPLES + 1):
        for n in LENGTHS:
            for s in rotate([s for s in SYSTEMS if s != "dbos"], r):
                if s == "uwf":
                    fork = json.loads(uwf.run("thread", "fork", at[n])[2])["thread"]
                    w, _, _ = uwf.run("thread", "step", fork, "--agent", uwf.agent)
                else:
                    w = lg.ask({"cmd": "one_more", "length": n})["wall"]
                if r:
                    times[s][n].append(w)
    if lg:
        lg.close()
    if "dbos" in SYSTEMS:
        print(f"  long: dbos runs a {top + LONG_SAMPLES}-step workflow …", file=sys.stderr, flush=True)
        d = Peer("dbos", "sqlite:" + os.path.join(work, "dbos-long.sqlite"), work, "-long")
        got = d.ask({"cmd": "positions", "lengths": LENGTHS, "samples": LONG_SAMPLES})
        d.close()
        for n in LENGTHS:
            times["dbos"][n] = got[str(n)]
    rows = []
    for n in LENGTHS:
        rows.append((f"one more step at history length {n}, ms",
                     {s: fmt(times[s][n]) for s in SYSTEMS}, {s: med(times[s][n]) for s in SYSTEMS}))
    lo, hi = LENGTHS[0], LENGTHS[-1]
    if lo != hi:
        g = {s: med(times[s][hi]) / med(times[s][lo]) for s in SYSTEMS}
        rows.append((f"length {hi} / length {lo}", {s: f"{g[s]:.2f}×" for s in SYSTEMS}, {}))
    return rows


def scale_out(work, pg):
    """`workers`: steps/s of K processes on one PostgreSQL."""
    total = THREADS * THREAD_STEPS
    rate = {s: {} for s in SYSTEMS}
    cpu = {s: {} for s in SYSTEMS}
    xacts = {}  # uwf's PostgreSQL transactions and sessions per step, by K
    wf = os.path.join(work, f"loop-{THREAD_STEPS}.yaml")
    for k in WORKERS:
        for s in rotate(SYSTEMS, k):
            db = f"{s}_w{k}"
            pg.create_database(db)
            baseline = pg.children_count()
            if s == "uwf":
                uwf = Uwf(work, f"uwf-w{k}", pg, db)
                uwf.run("workflow", "put", wf)
                for i in range(THREADS):
                    uwf.run("thread", "run", wf, "--detach", "-p", f"t{i}", "--agent", uwf.agent,
                            "--max-steps", str(THREAD_STEPS))
                with pg.connect(db) as c:
                    queued = c.execute("SELECT count(*) FROM uwf_runs").fetchone()[0]
                if queued != THREADS:
                    raise SystemExit(f"uwf: {queued} runs queued, expected {THREADS}")
                pg.settle(baseline, timeout=10)
                x0, s0 = pg.stat(db)
                own = 0  # this process's statements on `db` while the workers run
                c0, d0 = children_cpu(), pg.cpu_seconds()
                t = time.perf_counter()
                workers = [uwf.spawn("worker", "--concurrency", "1", "--poll-ms", "50", "-q")
                           for _ in range(k)]
                with pg.connect(db) as c:
                    while True:
                        done = c.execute("SELECT count(*) FROM uwf_history").fetchone()[0]
                        own += 1
                        if done >= THREADS:
                            break
                        failed = c.execute("SELECT count(*) FROM uwf_runs WHERE state = 'failed'").fetchone()[0]
                        own += 1
                        if failed or any(w.poll() is not None for w in workers):
                            for p in workers:
                                p.kill()
                            raise SystemExit(f"uwf: a run failed or a worker ended early; see {uwf.log}")
                        time.sleep(0.02)
                w = time.perf_counter() - t
                d1 = pg.cpu_seconds()
                for p in workers:
                    p.send_signal(signal.SIGTERM)
                for p in workers:
                    p.wait()
                c1 = children_cpu()
                pg.settle(baseline, timeout=10)
                x1, s1 = pg.stat(db)
                # Autocommit: one transaction per statement; one session.
                xacts[k] = ((x1 - x0 - own) / total, (s1 - s0 - 1) / total)
                with pg.connect(db) as c:
                    steps = c.execute(
                        "SELECT count(*) FROM uwf_nodes n WHERE n.type_hash = "
                        "(SELECT type_hash FROM uwf_nodes WHERE hash IN (SELECT head FROM uwf_history) LIMIT 1)"
                    ).fetchone()[0]
                if steps < total:
                    raise SystemExit(f"uwf: {steps} StepNodes stored, expected at least {total}")
                # The workers idle between the last step and SIGTERM: their
                # CPU is counted to the end, a slight overestimate.
                cpu[s][k] = ((c1 - c0) + (d1 - d0)) / total
            else:
                procs = [Peer(s, pg.url(db), work, f"-w{k}-{i}") for i in range(k)]
                shares = [THREADS // k + (1 if i < THREADS % k else 0) for i in range(k)]
                d0 = pg.cpu_seconds()
                t = time.perf_counter()
                for p, n in zip(procs, shares):
                    p.send({"cmd": "threads", "count": n, "steps": THREAD_STEPS})
                replies = [p._read() for p in procs]
                w = time.perf_counter() - t
                d1 = pg.cpu_seconds()
                for p in procs:
                    p.close()
                cpu[s][k] = (sum(r["cpu"] for r in replies) + (d1 - d0)) / total
            pg.settle(baseline, timeout=10)
            rate[s][k] = total / w
            print(f"  workers: {s} K={k}: {rate[s][k]:.1f} steps/s", file=sys.stderr, flush=True)
    rows = []
    for k in WORKERS:
        rows.append((f"steps/s, {k} worker process{'es' if k > 1 else ''}",
                     {s: f"{rate[s][k]:.1f}" for s in SYSTEMS}, {s: rate[s][k] for s in SYSTEMS}))
    for k in WORKERS:
        rows.append((f"CPU ms per step incl. PostgreSQL, {k} process{'es' if k > 1 else ''}",
                     {s: f"{ms(cpu[s][k]):.1f}" for s in SYSTEMS}, {s: cpu[s][k] for s in SYSTEMS}))
    for k in xacts:
        rows.append((f"uwf worker: PostgreSQL transactions / sessions per step, {k} process{'es' if k > 1 else ''}",
                     {"uwf": f"{xacts[k][0]:.1f} / {xacts[k][1]:.2f}"}, {}))
    return rows


def children_cpu():
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def versions():
    from importlib.metadata import version

    out = {}
    for p in ("langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres", "dbos", "psycopg"):
        try:
            out[p] = version(p)
        except Exception:
            out[p] = "not installed"
    return out


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model}), Linux {platform.release()}, Python {platform.python_version()}"


def main():
    # A SIGTERM ends the run through the `finally` below: the server stops.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for b in ("uwf", "uwf-mock"):
        if not os.path.isfile(os.path.join(BIN, b)):
            raise SystemExit(f"{os.path.join(BIN, b)} is missing: build it first "
                             "(`cargo build --release --locked -p uwf-cli -p uwf-mock`, or `just bench-peers`)")
    needed = (["langgraph"] if "langgraph" in SYSTEMS else []) + (["dbos"] if "dbos" in SYSTEMS else [])
    if "pg" in WORKLOADS or "workers" in WORKLOADS:
        needed.append("psycopg")
    missing = [p for p in needed if versions()[p] == "not installed"]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not installed in {sys.executable}: run `just bench-peers`, "
                         "or use a venv with benches/peers/requirements.txt installed")
    keep = os.environ.get("UWF_PEERS_DIR")
    work = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="uwf-peers-")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "scenario.yaml"), "w") as f:
        f.write(SCENARIO)
    for name, limit in ((f"loop-{STEPS}", STEPS), (f"loop-{THREAD_STEPS}", THREAD_STEPS), ("loop-1", 1),
                        ("endless", 1_000_000_000)):
        with open(os.path.join(work, name + ".yaml"), "w") as f:
            f.write(workflow(name.replace("-", ""), limit))
    print(f"machine: {machine()}; load average at start {os.getloadavg()[0]:.2f}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    print(f"sizes: steps {STEPS}, rounds {ROUNDS}, alone {ALONE}, lengths {LENGTHS}, "
          f"long samples {LONG_SAMPLES}, workers {WORKERS}, threads {THREADS} × {THREAD_STEPS} steps")
    print(f"the program: {' '.join(PROGRAM[:1])} '{OUTPUT}'; uwf's agent: "
          + ("that program (protocol: stdio)" if AGENT == "stdio" else "uwf-mock"))
    pg = None
    try:
        if "pg" in WORKLOADS or "workers" in WORKLOADS:
            pg = pgserver.Server(statements=os.environ.get("UWF_PEERS_STATEMENTS") == "1")
            with pg.connect() as c:
                print("PostgreSQL: " + c.execute("SHOW server_version").fetchone()[0]
                      + ", fsync " + c.execute("SHOW fsync").fetchone()[0]
                      + ", synchronous_commit " + c.execute("SHOW synchronous_commit").fetchone()[0])
        start = time.time()
        if "step" in WORKLOADS:
            rows = per_step_rounds(work)
            print_table("Per step, filesystem / SQLite", rows, None)
        if "pg" in WORKLOADS:
            rows = per_step_rounds(work, pg)
            rows += pg_counts(work, pg)
            print_table("Per step, PostgreSQL", rows, None)
        if "long" in WORKLOADS:
            rows = long_threads(work)
            print_table("Long threads, filesystem / SQLite", rows,
                        "uwf: a whole `uwf thread step` on a fork at that length; LangGraph: one "
                        "more step (invoke) from the thread's checkpoint at that length; DBOS: the "
                        "step after that many, timed inside one running workflow.")
        if "workers" in WORKLOADS:
            rows = scale_out(work, pg)
            print_table(f"Scale-out on one PostgreSQL ({THREADS} threads × {THREAD_STEPS} steps)", rows,
                        "uwf: `uwf worker --concurrency 1 --poll-ms 50` processes claiming queued "
                        "threads; peers: warm processes, each given an equal share of the threads.")
        print(f"\nload average at end {os.getloadavg()[0]:.2f}; {time.time() - start:.0f} s")
    finally:
        if pg:
            pg.stop()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"stores and logs kept in {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
