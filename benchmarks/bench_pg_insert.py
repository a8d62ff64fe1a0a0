"""Where one ``schedule()`` insert into ``PostgresStore`` spends its time, piece by piece.

Run: ``python benchmarks/bench_pg_insert.py --dsn postgresql://postgres@127.0.0.1/postgres``

Every variant inserts ``--n`` rows one by one, each its own autocommitted statement on one
connection, in a database created for the run (dropped after it). The variants take turns in
``--rounds`` rounds (the order reversed every round); the median and the best round are reported,
in µs per insert: wall time, the server backend's CPU (``/proc/PID/stat`` of
``pg_backend_pid()``: the server must run on this host, and the benchmark must be allowed to read
its processes) and this thread's CPU.

* ``floor``: the plain loop of ``bench_postgres.py`` (a 4-column table with one partial index);
* ``row``: the plain insert statement (``INSERT ... ON CONFLICT (id) DO NOTHING``) of the row
  a ``schedule(f, i, delay=0)`` stores, into the current schema (no trigger: the store announces
  it afterwards): the baseline of the variants below (``schedule()`` itself runs ``row-due``'s
  statement);
* ``row-schema-4``, ``row-schema-6``: the same statement into a schema 4 or 6 table (the row
  trigger of schemas 3 to 6 announces it);
* ``row-announced``: the row announced by the statement itself (a data-modifying ``WITH`` and
  ``pg_notify``);
* ``row-trigger-empty``: as ``row-schema-6``, the trigger's function doing nothing (what calling
  it costs); ``row-trigger-constant``: its function sending a constant notification;
* ``row-listened``: as ``row``, with another connection listening on the store's channel;
* ``row-no-INDEX``: as ``row``, the index ``INDEX`` dropped (one variant per index);
* ``row-bare``: the plain statement into the table with its primary key alone;
* ``row-due``: the statement ``schedule(f, i, delay=0)`` runs, a task already due (``INSERT ...
  ON CONFLICT (id) DO NOTHING RETURNING state``, READY if the server finds it due), its state read;
  ``row-due-schema-6``: the same into a schema 6 table (its row trigger announces the row);
* ``schedule``: ``Scheduler.schedule(f, i, delay=0)`` on a ``PostgresStore`` of the current schema
  (a scheduler never started, as an application process that only enqueues; the store's default
  pool, its server CPU that of all its backends, the connection its announcements take
  included): the library's client side is its thread CPU less ``row``'s.

``--client`` instead measures this thread's CPU per ``schedule()`` with the store's parts
replaced one by one by nothing (its insert; the statement; nothing), so each part's share is the
difference of two lines, and per insert of the same statement by psycopg alone, with no library
code (what ``schedule()`` adds to it is the difference).

``--only NAME,...`` runs some variants (``floor`` and ``row`` are always run, as the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_postgres import FLOOR_SCHEMA, fresh_database, noop_job

import timewheel as tw
from timewheel.stores.postgres import PostgresStore, inserts
from timewheel.stores.postgres import schema as pg_schema
from timewheel.stores.postgres.notify import channel
from timewheel.stores.sqlite.codec import TASKS, read_back

DB = "timewheel_bench_insert"
DUE, SCHEDULE_ID = TASKS.position["due"], TASKS.position["schedule_id"]
# the insert announcing itself, instead of the trigger: a data-modifying WITH and pg_notify
ANNOUNCED = (
    "WITH ins AS ("
    + pg_schema.INSERT_TASK_IF_NEW
    + " RETURNING due) SELECT CASE WHEN due < "
    + pg_schema.SERVER_NOW
    + f" + {round(pg_schema.NOTIFY_WITHIN * 1e6)} THEN pg_notify(%s, %s) IS NULL END FROM ins"
).encode()
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """Seconds of CPU (user and system) the server process *pid* has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def store_backends(conn: Any) -> list[int]:
    """The server processes of the store's pooled connections in this database."""
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'timewheel'"
        )
    ]


def template_row(dsn: str, schema: str) -> list[Any]:
    """The encoded row ``schedule(f, 0, delay=0)`` inserts (captured from the store)."""
    captured: list[list[Any]] = []
    real = inserts.insert_new

    def spy(conn: Any, task: Any, row: list[Any], *rest: Any) -> Any:
        captured.append(list(row))
        return real(conn, task, row, *rest)

    inserts.insert_new = spy  # type: ignore[assignment]
    try:
        store = PostgresStore(dsn, schema=schema)
        sched = tw.Scheduler(store=store, allow=["bench_postgres"])
        sched.schedule(noop_job, 0, delay=0)
        sched.shutdown()
        store.close()
    finally:
        inserts.insert_new = real
    return captured[0]


class Variant:
    """One way of inserting rows: its schema, and the loop that inserts *n* of them."""

    def __init__(
        self,
        name: str,
        schema: str,
        ddl: list[str],
        run: Callable[[Any, int, int], None],
        *,
        version: int | None = None,
    ) -> None:
        self.name, self.schema, self.ddl, self.run = name, schema, ddl, run
        self.version = version
        self.rounds: list[tuple[float, float, float]] = []


def build(dsn: str, only: set[str] | None) -> list[Variant]:
    trigger = pg_schema.INSERT_TASK_IF_NEW.encode()
    with psycopg.connect(dsn, autocommit=True) as conn:
        pg_schema.migrate(conn, "base")
        indexes = [
            r[0]
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'base' "
                "AND tablename = 'tasks' AND indexname <> 'tasks_pkey' ORDER BY indexname"
            )
        ]
    row0 = template_row(dsn, "base")
    counter = [0]

    def rows(n: int) -> Iterator[list[Any]]:
        for _ in range(n):
            counter[0] += 1
            r = list(row0)
            r[0] = f"{counter[0]:032x}"
            r[2] = json.dumps([counter[0]])
            yield r

    def announced(conn: Any, n: int, _: int) -> None:
        # the row and its announcement in one statement
        (schema,) = conn.execute("SELECT current_schema()").fetchone()
        ch = channel(schema)
        for r in rows(n):
            payload = json.dumps(["p", "bench", r[DUE], r[SCHEDULE_ID], r[0]])
            conn.execute(ANNOUNCED, [*r, ch, payload])

    def statement(stmt: bytes) -> Callable[[Any, int, int], None]:
        def run(conn: Any, n: int, _: int) -> None:
            for r in rows(n):
                conn.execute(stmt, r)

        return run

    due_if_new = inserts.INSERT_DUE_IF_NEW.encode()

    def due(conn: Any, n: int, _: int) -> None:
        for r in rows(n):
            conn.execute(due_if_new, inserts.ready_if_due(r)).fetchone()

    def floor(conn: Any, n: int, start: int) -> None:
        for i in range(start, start + n):
            conn.execute("INSERT INTO jobs (payload) VALUES (%s)", (json.dumps([i]),))

    def schedule(conn: Any, n: int, start: int) -> None:
        sched = conn  # the scheduler stands in for the connection
        for i in range(start, start + n):
            sched.schedule(noop_job, i, delay=0)

    drop_all = [f"DROP INDEX {name}" for name in indexes]
    variants = [
        Variant("floor", "floor", [FLOOR_SCHEMA], floor),
        Variant("row", "v_row", [], statement(trigger)),
        Variant("row-schema-4", "v_four", [], statement(trigger), version=4),
        Variant("row-schema-6", "v_six", [], statement(trigger), version=6),
        Variant("row-announced", "v_announced", [], announced),
        Variant(
            "row-trigger-empty", "v_trig_empty", [_function("")], statement(trigger), version=6
        ),
        Variant(
            "row-trigger-constant",
            "v_trig_const",
            [_function("PERFORM pg_notify('timewheel_bench', 'p');")],
            statement(trigger),
            version=6,
        ),
        Variant("row-listened", "v_listened", [], statement(trigger)),
        *(
            Variant(f"row-no-{name}", f"v_no_{name}", [f"DROP INDEX {name}"], statement(trigger))
            for name in indexes
        ),
        Variant("row-bare", "v_bare", drop_all, statement(trigger)),
        Variant("row-due", "v_due", [], due),
        Variant("row-due-schema-6", "v_due_six", [], due, version=6),
        Variant("schedule", "v_schedule", [], schedule),
    ]
    return [v for v in variants if only is None or v.name in only or v.name in ("floor", "row")]


def _function(body: str) -> str:
    """The schema 6 notify trigger's function replaced by one that runs *body* (and returns)."""
    return (
        "CREATE OR REPLACE FUNCTION notify_inserted() RETURNS trigger LANGUAGE plpgsql AS "
        f"$fn$ BEGIN {body} RETURN NULL; END $fn$"
    )


def prepare(dsn: str, v: Variant) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ident = sql.Identifier(v.schema)
        if v.name == "floor":
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        elif v.version is not None:  # an older schema, as its migrations left it
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
            conn.execute(sql.SQL("SET search_path TO {}").format(ident))
            for step in pg_schema.MIGRATIONS[: v.version]:
                for statement in step:
                    conn.execute(statement.encode())
        else:
            pg_schema.migrate(conn, v.schema)
        conn.execute(sql.SQL("SET search_path TO {}").format(ident))
        for stmt in v.ddl:
            conn.execute(stmt.encode())


def one_round(dsn: str, v: Variant, n: int, start: int) -> tuple[float, float, float]:
    """Wall, server CPU and client CPU seconds of *n* inserts of variant *v*."""
    listener = None
    if v.name == "row-listened":
        listener = psycopg.connect(dsn, autocommit=True)
        listener.execute(f'LISTEN "{channel(v.schema)}"')
    store: PostgresStore | None = None
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(v.schema)))
            target: Any = conn
            if v.name == "schedule":
                store = PostgresStore(dsn, schema=v.schema)
                target = tw.Scheduler(store=store, allow=["bench_postgres"])
                target.schedule(noop_job, -1, delay=3600)  # the pool's connection, opened
            else:
                (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
            v.run(target, 50, start)  # warm up: statements prepared

            def server_cpu() -> dict[int, float]:
                if store is None:
                    return {pid: backend_cpu(pid)}
                return {p: backend_cpu(p) for p in store_backends(conn)}

            cpu0, thread0, t0 = server_cpu(), time.thread_time(), time.perf_counter()
            v.run(target, n, start + 50)
            wall = time.perf_counter() - t0
            client = time.thread_time() - thread0
            server = sum(c - cpu0.get(p, 0.0) for p, c in server_cpu().items())
            if v.name == "schedule":
                target.shutdown()
            conn.execute("TRUNCATE jobs" if v.name == "floor" else "TRUNCATE tasks")
    finally:
        if store is not None:
            store.close()
        if listener is not None:
            listener.close()
    return wall, server, client


def client_pieces(dsn: str, rounds: int, n: int) -> None:
    """This thread's CPU per ``schedule()``, the store's parts replaced one by one by nothing:
    what each part of the client's path costs (``--client``)."""
    from timewheel.stores import policy
    from timewheel.stores.base import Changed

    store = PostgresStore(dsn, schema="client")
    sched = tw.Scheduler(store=store, allow=["bench_postgres"])
    real_new, real_insert = inserts.insert_new, store.insert

    def no_statement(conn: Any, task: Any, row: list[Any], *rest: Any) -> Any:
        return Changed(read_back(task, row))

    def encode_only(task: Any, on_conflict: Any = "error") -> Any:
        policy.check_task(task)
        new = policy.as_inserted(task, durable=True)
        return Changed(read_back(new, TASKS.encode(new)))

    row0 = template_row(dsn, "client")
    raw = psycopg.connect(dsn, autocommit=True)
    raw.execute("SET search_path TO client")
    due_stmt = inserts.INSERT_DUE_IF_NEW.encode()
    counter = [0]

    def statement_alone() -> float:
        """Thread CPU per insert of the same row by psycopg alone (no library code)."""
        rows = []
        for _ in range(n):
            counter[0] += 1
            r = list(row0)
            r[0], r[2] = f"raw{counter[0]:029x}", json.dumps([counter[0]])
            rows.append(inserts.ready_if_due(r))
        t = time.thread_time()
        for r in rows:
            raw.execute(due_stmt, r).fetchone()
        return (time.thread_time() - t) / n * 1e6

    pieces: dict[str, list[float]] = {}
    try:
        for _ in range(rounds):
            pieces.setdefault("the statement alone (psycopg, no library code)", []).append(
                statement_alone()
            )
            for label, insert, new in (
                ("schedule(), the store's insert doing nothing", lambda t, **_: Changed(t), None),
                ("+ checking, as_inserted, the row encoded, the snapshot", encode_only, None),
                (
                    "+ the pool's connection and the retry wrapper (no statement)",
                    None,
                    no_statement,
                ),
                ("schedule(), the store's insert", None, None),
            ):
                store.insert = insert or real_insert  # type: ignore[method-assign,assignment]
                inserts.insert_new = new or real_new  # type: ignore[assignment]
                t = time.thread_time()
                for i in range(n):
                    sched.schedule(noop_job, i, delay=0)
                pieces.setdefault(label, []).append((time.thread_time() - t) / n * 1e6)
    finally:
        store.insert, inserts.insert_new = real_insert, real_new  # type: ignore[method-assign]
        sched.shutdown()
        store.close()
        raw.close()
    print(f"{'client CPU per schedule() (median, best round)':<62} µs")
    for label, got in pieces.items():
        print(f"{label:<62} {statistics.median(got):6.1f} {min(got):6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=None)
    ap.add_argument("--client", action="store_true", help="the client's pieces instead")
    args = ap.parse_args()
    only = None if args.only is None else set(args.only.split(","))
    with open("/proc/loadavg") as f:
        print("load average at start:", f.read().split()[:3])
    if args.client:
        with fresh_database(args.dsn, DB) as dsn:
            client_pieces(dsn, args.rounds, args.n)
        return
    with fresh_database(args.dsn, DB) as dsn:
        variants = build(dsn, only)
        for v in variants:
            prepare(dsn, v)
        start = 0
        for k in range(args.rounds):
            for v in variants if k % 2 == 0 else variants[::-1]:
                v.rounds.append(one_round(dsn, v, args.n, start))
                start += args.n + 100
    us = 1e6 / args.n
    print(f"{'variant':<30} {'wall':>7} {'server':>7} {'client':>7}   best: wall server client")
    for v in variants:
        med = [statistics.median(x[i] for x in v.rounds) * us for i in range(3)]
        best = [min(x[i] for x in v.rounds) * us for i in range(3)]
        print(
            f"{v.name:<30} {med[0]:7.1f} {med[1]:7.1f} {med[2]:7.1f}   {best[0]:7.1f} {best[1]:7.1f} {best[2]:7.1f}"
        )
    with open("/proc/loadavg") as f:
        print("load average at end:", f.read().split()[:3])


if __name__ == "__main__":
    main()
