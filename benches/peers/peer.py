"""One warm peer process of the side-by-side benchmark (bench.py).

    python peer.py langgraph|dbos STORE PROGRAM_JSON

STORE is `sqlite:PATH` or `postgresql://USER:PASSWORD@/DB?host=SOCKETDIR`;
PROGRAM_JSON is the argv (a JSON list) of the trivial external program
every system runs as its role's work. The process imports its library and
opens its database once, prints `{"ready": true}`, then answers one JSON
command per line on stdin with one JSON line on stdout, until stdin ends:

- `{"cmd": "thread", "steps": N}`: one new thread (LangGraph) or workflow
  (DBOS) of N steps; each step runs the program and is persisted before
  the next. Answers `{"wall": s, "cpu": s}` (wall time, and CPU of this
  process and of the programs it ran).
- `{"cmd": "threads", "count": K, "steps": N}`: K such threads one after
  the other (the scale-out workload).
- `{"cmd": "alone", "samples": S}`: the program alone, run the way a step
  runs it, S times: `{"walls": [s, ...]}`.
- `{"cmd": "prepare", "length": L}` then `{"cmd": "one_more", "length": L}`
  (LangGraph): a thread of L steps, then (each time) one more step from a
  fork of its last checkpoint, so the length stays L: `{"wall": s}`.
- `{"cmd": "positions", "lengths": [L...], "samples": S}` (DBOS): one
  workflow of max(L) + S steps timing each step inside it; answers the
  times of the S steps after each L: `{"L": [s, ...]}`.

Errors go to stderr and end the process with a non-zero status.
"""

import json
import os
import resource
import subprocess
import sys
import time
import uuid


def cpu_seconds():
    """CPU of this process and of the children it waited for."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Work:
    """The role's work: the external program; its stdout (JSON) is the output."""

    def __init__(self, argv):
        self.argv = argv

    def __call__(self):
        done = subprocess.run(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, check=True)
        return json.loads(done.stdout)


class LangGraphPeer:
    """A one-node loop graph: `work` runs the program and appends its output
    to the state's history; it loops until `n` reaches `target`. Every
    super-step is checkpointed before the next (`durability="sync"`)."""

    def __init__(self, store, work):
        import operator
        from typing import Annotated, TypedDict

        from langgraph.graph import END, START, StateGraph

        class State(TypedDict):
            n: int
            target: int
            outputs: Annotated[list, operator.add]

        def step(state):
            return {"n": state["n"] + 1, "outputs": [work()]}

        def route(state):
            return END if state["n"] >= state["target"] else "work"

        builder = StateGraph(State)
        builder.add_node("work", step)
        builder.add_edge(START, "work")
        builder.add_conditional_edges("work", route)
        self.saver = self._saver(store)
        self.graph = builder.compile(checkpointer=self.saver)
        self.prepared = {}

    def _saver(self, store):
        if store.startswith("sqlite:"):
            import sqlite3

            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(store[len("sqlite:"):], check_same_thread=False)
            saver = SqliteSaver(conn)
            saver.setup()  # sets journal_mode=WAL
            conn.execute("PRAGMA synchronous=FULL")
            mode = conn.execute("PRAGMA synchronous").fetchone()[0]
            if mode != 2:
                raise SystemExit(f"SQLite synchronous is {mode}, expected 2 (FULL)")
            return saver
        import psycopg
        from psycopg.rows import dict_row

        from langgraph.checkpoint.postgres import PostgresSaver

        # As LangGraph's documentation connects PostgresSaver: autocommit,
        # rows as dicts, no server-side prepared statements.
        conn = psycopg.connect(store, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(conn)
        saver.setup()
        return saver

    def run(self, steps, thread_id=None):
        config = {
            "configurable": {"thread_id": thread_id or str(uuid.uuid4())},
            "recursion_limit": steps + 10,
        }
        state = self.graph.invoke({"n": 0, "target": steps, "outputs": []}, config, durability="sync")
        if state["n"] != steps or len(state["outputs"]) != steps:
            raise SystemExit(f"langgraph: thread ended at n={state['n']}, expected {steps}")
        return config

    def prepare(self, length):
        config = self.run(length)
        self.prepared[length] = self.graph.get_state(config).config

    def one_more(self, length):
        at = self.prepared[length]
        config = {"configurable": dict(at["configurable"]), "recursion_limit": 10}
        state = self.graph.invoke({"target": length + 1}, config, durability="sync")
        if state["n"] != length + 1 or len(state["outputs"]) != length + 1:
            raise SystemExit(f"langgraph: one more step gave n={state['n']}, expected {length + 1}")


class DbosPeer:
    """A workflow looping over a step that runs the program; DBOS records
    each step's output in its system database before the next."""

    def __init__(self, store, work):
        from dbos import DBOS

        if store.startswith("sqlite:"):
            url = "sqlite:///" + os.path.abspath(store[len("sqlite:"):])
        else:
            url = store
        DBOS(
            config={
                "name": "uwf-peer-bench",
                "system_database_url": url,
                # Several processes share one database in the scale-out
                # workload: each is its own executor.
                "executor_id": f"bench-{os.getpid()}",
                "log_level": "WARNING",
            }
        )
        self.positions = []

        @DBOS.step()
        def step(i):
            return work()

        @DBOS.workflow()
        def loop(steps):
            for i in range(steps):
                step(i)
            return steps

        @DBOS.workflow()
        def timed_loop(steps):
            for i in range(steps):
                t = time.perf_counter()
                step(i)
                self.positions.append(time.perf_counter() - t)
            return steps

        self.loop = loop
        self.timed_loop = timed_loop
        DBOS.launch()

    def run(self, steps):
        if self.loop(steps) != steps:
            raise SystemExit("dbos: the workflow returned a wrong count")

    def positions_of(self, lengths, samples):
        self.positions = []
        self.timed_loop(max(lengths) + samples)
        return {str(n): self.positions[n : n + samples] for n in lengths}


def main():
    kind, store, program = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    work = Work(program)
    peer = LangGraphPeer(store, work) if kind == "langgraph" else DbosPeer(store, work)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        what = cmd["cmd"]
        if what == "thread":
            c, t = cpu_seconds(), time.perf_counter()
            peer.run(cmd["steps"])
            reply = {"wall": time.perf_counter() - t, "cpu": cpu_seconds() - c}
        elif what == "threads":
            c, t = cpu_seconds(), time.perf_counter()
            for _ in range(cmd["count"]):
                peer.run(cmd["steps"])
            reply = {"wall": time.perf_counter() - t, "cpu": cpu_seconds() - c}
        elif what == "alone":
            walls = []
            for _ in range(cmd["samples"]):
                t = time.perf_counter()
                work()
                walls.append(time.perf_counter() - t)
            reply = {"walls": walls}
        elif what == "prepare":
            peer.prepare(cmd["length"])
            reply = {}
        elif what == "one_more":
            t = time.perf_counter()
            peer.one_more(cmd["length"])
            reply = {"wall": time.perf_counter() - t}
        elif what == "positions":
            reply = peer.positions_of(cmd["lengths"], cmd["samples"])
        else:
            raise SystemExit(f"peer: unknown command {what!r}")
        print(json.dumps(reply), flush=True)
    if kind == "dbos":
        from dbos import DBOS

        DBOS.destroy()


if __name__ == "__main__":
    main()
