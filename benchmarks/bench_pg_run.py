"""Where the server's time of one run goes: the claim and the finish of a task on PostgreSQL.

Run: ``python benchmarks/bench_pg_run.py --dsn postgresql://postgres@127.0.0.1/postgres``

Each variant holds ``--rounds`` x ``--n`` READY rows in a schema of its own, in a database created
for the run (dropped after it). In every round each variant claims ``--n`` rows, ``--batch`` per
statement, then stores their ends in one statement, on one autocommitted connection; the variants
take turns, the order reversed every round. Reported per task: wall time, and the CPU of the
server's backend (``/proc/PID/stat`` of ``pg_backend_pid()``: the server must run on this host),
for the claims and the finishes apart, in µs.

* ``floor``: the plain loop of ``bench_postgres.py``: its claim (``UPDATE ... FROM (SELECT ...
  FOR UPDATE SKIP LOCKED)``, returning the id and payload) and its ``UPDATE ... WHERE id =
  ANY(...)`` marking them done;
* ``tasks``: ``PostgresStore``'s statements (:func:`timewheel.stores.postgres.runs.claim_next` and
  :func:`~timewheel.stores.postgres.runs.finish_many` of successes built from the claimed
  snapshots) on the current schema;
* ``tasks-no-history-index``: the same with the two indexes that hold ended tasks
  (``tasks_func``, ``tasks_ended``) dropped: what a finish would cost if ended tasks were
  indexed elsewhere, or not at all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_postgres import FLOOR_CLAIM, FLOOR_SCHEMA, fresh_database

from timewheel.stores.base import Finish
from timewheel.stores.postgres import runs
from timewheel.stores.postgres import schema as pg_schema
from timewheel.stores.sqlite.codec import TASKS
from timewheel.task import TaskState

VARIANTS: dict[str, list[str]] = {
    "floor": [],
    "tasks": [],
    "tasks-no-history-index": ["DROP INDEX tasks_func", "DROP INDEX tasks_ended"],
}
FUNC = "bench_postgres:noop_job"
T0_US = 1_700_000_000_000_000


def backend_cpu(pid: int) -> float:
    """The CPU seconds the server process *pid* has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prepare(conn: psycopg.Connection[Any], name: str, ddl: list[str], rows: int) -> None:
    """Schema *name* holding *rows* READY rows (the loop's table for ``floor``)."""
    ident = sql.Identifier(name.replace("-", "_"))
    if name == "floor":
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(sql.SQL("SET search_path TO {}").format(ident))
        conn.execute(FLOOR_SCHEMA)
        conn.execute(
            "INSERT INTO jobs (payload) SELECT '[' || g || ']' FROM generate_series(1, %s) g",
            (rows,),
        )
    else:
        pg_schema.migrate(conn, name.replace("-", "_"))
        conn.execute(sql.SQL("SET search_path TO {}").format(ident))
        for statement in ddl:
            conn.execute(statement.encode())
        conn.execute(
            "INSERT INTO tasks (id, func, args, kwargs, due, state, version, attempts, priority, "
            "queue, created, updated) SELECT md5(g::text), %s, '[' || g || ']', '{}', "
            "%s + g, 'ready', 0, 0, 0, 'default', %s, %s FROM generate_series(1, %s) g",
            (FUNC, T0_US, T0_US, T0_US, rows),
        )
    conn.execute("VACUUM ANALYZE")


def one_round(
    conn: psycopg.Connection[Any], name: str, n: int, batch: int
) -> tuple[float, float, float, float]:
    """Claim *n* rows of variant *name*, *batch* a statement, then end them in one statement:
    wall and server CPU seconds of the claims, then of the finish."""
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name.replace("-", "_"))))
    pid = conn.info.backend_pid
    cpu0, t0 = backend_cpu(pid), time.perf_counter()
    claimed: list[Any] = []
    while len(claimed) < n:
        if name == "floor":
            got = conn.execute(FLOOR_CLAIM, (batch,)).fetchall()
        else:
            got, _ = runs.claim_next(
                conn,
                owner="w1",
                lease_us=T0_US + 60_000_000,
                now_us=T0_US + 10**12,
                limit=batch,
                queues=None,
                unclaimable=[],
                claimable=lambda _: True,
            )
            got = [TASKS.decode(r) for r in got]
        if not got:
            raise SystemExit(f"{name}: ran out of READY rows")
        claimed += got
    cpu1, t1 = backend_cpu(pid), time.perf_counter()
    if name == "floor":
        conn.execute("UPDATE jobs SET state = 2 WHERE id = ANY(%s)", ([r[0] for r in claimed],))
    else:
        finishes = [Finish(t.id, "w1", TaskState.SUCCEEDED, {"result": None}, t) for t in claimed]
        with conn.transaction():
            out, _ = runs.finish_many(
                conn, runs.check_finishes(finishes), T0_US + 10**12, lambda *_: ()
            )
        if sum(1 for ch in out if ch is not None) != len(claimed):
            raise SystemExit(f"{name}: a finish found its task not held")
    cpu2, t2 = backend_cpu(pid), time.perf_counter()
    return t1 - t0, cpu1 - cpu0, t2 - t1, cpu2 - cpu1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--n", type=int, default=2_000, help="tasks per variant and round")
    ap.add_argument("--batch", type=int, default=50, help="rows a claim takes")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    print("load average at start:", os.getloadavg())
    with (
        fresh_database(args.dsn, "tw_bench_run") as dsn,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        for name, ddl in VARIANTS.items():
            prepare(conn, name, ddl, args.n * args.rounds)
        results: dict[str, list[tuple[float, float, float, float]]] = {v: [] for v in VARIANTS}
        for r in range(args.rounds):
            order = list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]
            for name in order:
                results[name].append(one_round(conn, name, args.n, args.batch))
    print(f"per task, µs; median of {args.rounds} rounds of {args.n} (claims of {args.batch})")
    print(f"{'variant':26} {'claim wall':>10} {'server':>7} {'finish wall':>11} {'server':>7}")
    for name, rounds in results.items():
        cols = [statistics.median(x[k] for x in rounds) / args.n * 1e6 for k in range(4)]
        print(f"{name:26} {cols[0]:10.1f} {cols[1]:7.1f} {cols[2]:11.1f} {cols[3]:7.1f}")
    print("load average at end:", os.getloadavg())
    print(json.dumps({k: v for k, v in vars(args).items() if k != "dsn"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
