"""Benchmark ``schedule_many()`` on each store against its goal.

Run: ``python benchmarks/bench_batch.py [--memory] [--sqlite] [--postgres DSN] [--rounds N]``

* **memory**: N one-shot tasks in one ``schedule_many`` call on a fresh, started ``Scheduler``
  against N ``loop.call_at`` calls on a fresh asyncio event loop (not running), same N, best of
  ``--rounds`` alternating rounds; per task, in microseconds. Two shapes: every task due at one
  instant (``schedule_many([(f, (i,)) ...], delay=3600)`` vs ``call_at(when, f, i)``), and each
  task with its own due time (``(f, (i,), None, {"at": t})`` items vs ``call_at(t, f, i)``). The
  items and due times are built before the clock starts, for both; with ``--collect-inputs`` a
  full garbage collection follows, so that the collections the new items owe (a tuple and a
  dict each, where ``call_at``'s inputs are floats and ints) are not paid inside the timed call.
* **sqlite**: tasks/s of ``schedule_many`` into a ``SQLiteStore`` (``fast`` durability), batches
  of ``--batch``, N tasks in all, best of the rounds.
* **postgres**: tasks/s of ``schedule_many`` into a ``PostgresStore`` against the plain batched
  insert of ``bench_postgres.py`` (an ``unnest`` multi-row insert of a 4-column row), batches of
  ``--batch``; and the server's share: a ``COPY`` of the store's rows alone, with its indexes and
  without the ones a fresh PENDING row enters beyond the primary key.

``--piece NAME --n N`` runs one piece once and exits, for instruction counts under callgrind
(``valgrind --tool=callgrind python benchmarks/bench_batch.py --piece many --n 10000``; the
difference of two sizes divided by their difference, less the same for ``--setup-only`` (which
builds the inputs and skips the calls), is one task): pieces ``call_at``, ``many`` (one instant),
``call_at_each`` and ``many_each`` (a due time each), ``empty``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timewheel.dispatch import NullDispatcher
from timewheel.scheduler import Scheduler
from timewheel.testing import FakeClock

AHEAD = 3600.0
SETUP_ONLY = False  # --setup-only: build the inputs of a piece, skip the calls it measures
PIECE = False  # --piece: end the process right after the measured calls (no teardown counted)
COLLECT_INPUTS = False  # --collect-inputs: a full collection after the inputs are built, both sides


def _piece_done() -> None:
    if PIECE:
        os._exit(0)


def _inputs_built() -> None:
    """The inputs are built: with --collect-inputs, collect now, so that the collections their
    objects owe are not paid inside the timed calls."""
    if COLLECT_INPUTS:
        gc.collect()


def noop(*_: Any) -> None:
    pass


# -- memory ------------------------------------------------------------------------------------------
def call_at(n: int, each: bool) -> float:
    """Seconds for *n* ``call_at`` calls on a fresh loop (due one instant, or *each* its own)."""
    loop = asyncio.new_event_loop()
    try:
        base = loop.time() + AHEAD
        whens = [base + (i % 1000) for i in range(n)] if each else [base] * n
        args = list(range(n))
        at = loop.call_at
        _inputs_built()
        if SETUP_ONLY:
            _piece_done()
        t0 = time.perf_counter()
        for when, i in zip(whens, args, strict=True):
            at(when, noop, i)
        _piece_done()
        return time.perf_counter() - t0
    finally:
        loop.close()


def many(n: int, each: bool) -> float:
    """Seconds for one ``schedule_many`` of *n* tasks on a fresh, started scheduler."""
    # under callgrind (--piece) a fake clock: a real-time trigger loop does work as wall time
    # passes, and a run under valgrind is 50 times as long as the one it measures
    clock = FakeClock() if PIECE else None
    with Scheduler(dispatcher=NullDispatcher(), clock=clock) as sched:
        if each:
            base = sched.clock.time() + AHEAD
            items: list[Any] = [(noop, (i,), None, {"at": base + (i % 1000)}) for i in range(n)]
            _inputs_built()
            if SETUP_ONLY:
                _piece_done()
            t0 = time.perf_counter()
            jobs = sched.schedule_many(items)
            _piece_done()
        else:
            items = [(noop, (i,)) for i in range(n)]
            _inputs_built()
            if SETUP_ONLY:
                _piece_done()
            t0 = time.perf_counter()
            jobs = sched.schedule_many(items, delay=AHEAD)
        _piece_done()
        dt = time.perf_counter() - t0
        assert len(jobs) == n
    return dt


def memory(n: int, rounds: int) -> None:
    for each in (False, True):
        shape = "a due time each" if each else "one due instant"
        best: dict[str, float] = {}
        ratios = []
        for _ in range(rounds):
            gc.collect()
            a = call_at(n, each)
            gc.collect()
            m = many(n, each)
            best["call_at"] = min(best.get("call_at", a), a)
            best["schedule_many"] = min(best.get("schedule_many", m), m)
            ratios.append(a / m)
        a, m = best["call_at"], best["schedule_many"]
        print(
            f"memory, {n:,} tasks, {shape}: call_at {a / n * 1e6:.3f} us/task, "
            f"schedule_many {m / n * 1e6:.3f} us/task; best-of-{rounds} ratio "
            f"{a / m:.2f}x call_at (rounds {', '.join(f'{r:.2f}' for r in ratios)})"
        )


# -- sqlite ------------------------------------------------------------------------------------------
def sqlite(n: int, batch: int, rounds: int) -> None:
    from timewheel.stores.sqlite import SQLiteStore

    best = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        with open(os.path.join(tmp, "bench_batch_jobs.py"), "w") as f:
            f.write("def noop(*args, **kwargs):\n    pass\n")
        import bench_batch_jobs  # type: ignore[import-not-found]

        for r in range(rounds):
            path = os.path.join(tmp, f"r{r}.db")
            store = SQLiteStore(path, durability="fast")
            with Scheduler(
                store=store, allow=["bench_batch_jobs"], dispatcher=NullDispatcher()
            ) as sched:
                gc.collect()
                t0 = time.perf_counter()
                for start in range(0, n, batch):
                    sched.schedule_many(
                        [(bench_batch_jobs.noop, (i,)) for i in range(start, start + batch)],
                        delay=AHEAD,
                    )
                rate = n / (time.perf_counter() - t0)
            store.close()
            best = max(best, rate)
            print(f"  sqlite round {r + 1}: {rate:,.0f} tasks/s")
    print(f"sqlite, {n:,} tasks in batches of {batch:,}: best {best:,.0f} tasks/s")


# -- postgres ----------------------------------------------------------------------------------------
def postgres(dsn: str, n: int, batch: int, rounds: int) -> None:
    import psycopg

    from timewheel.stores.postgres import PostgresStore

    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        with open(os.path.join(tmp, "bench_batch_jobs.py"), "w") as f:
            f.write("def noop(*args, **kwargs):\n    pass\n")
        import bench_batch_jobs

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS bench_batch CASCADE")
            conn.execute("DROP TABLE IF EXISTS bench_plain")
            conn.execute(
                "CREATE TABLE bench_plain (id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL, "
                "payload TEXT NOT NULL, run_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
                "status TEXT NOT NULL DEFAULT 'queued')"
            )
            conn.execute(
                "CREATE INDEX bench_plain_due ON bench_plain (run_at) WHERE status = 'queued'"
            )
        best_plain = best_tw = 0.0
        for r in range(rounds):
            with psycopg.connect(dsn) as conn:
                t0 = time.perf_counter()
                for start in range(0, n, batch):
                    payloads = [f'{{"i": {i}}}' for i in range(start, start + batch)]
                    with conn.transaction():
                        conn.execute(
                            "INSERT INTO bench_plain (queue, payload) "
                            "SELECT 'default', p FROM unnest(%s::text[]) AS p",
                            (payloads,),
                        )
                plain = n / (time.perf_counter() - t0)
            store = PostgresStore(dsn, schema="bench_batch")
            with Scheduler(
                store=store, allow=["bench_batch_jobs"], dispatcher=NullDispatcher()
            ) as sched:
                t0 = time.perf_counter()
                for start in range(0, n, batch):
                    sched.schedule_many(
                        [(bench_batch_jobs.noop, (i,)) for i in range(start, start + batch)],
                        delay=AHEAD,
                    )
                tw = n / (time.perf_counter() - t0)
            store.close()
            best_plain, best_tw = max(best_plain, plain), max(best_tw, tw)
            print(f"  postgres round {r + 1}: plain {plain:,.0f}/s, schedule_many {tw:,.0f}/s")
        print(
            f"postgres, {n:,} tasks in batches of {batch:,}: plain unnest insert "
            f"{best_plain:,.0f}/s, schedule_many {best_tw:,.0f}/s = {best_tw / best_plain:.2f}x"
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS bench_batch CASCADE")
            conn.execute("DROP TABLE IF EXISTS bench_plain")


# -- pieces for callgrind -------------------------------------------------------------------------------
PIECES: dict[str, Callable[[int], object]] = {
    "call_at": lambda n: call_at(n, False),
    "call_at_each": lambda n: call_at(n, True),
    "many": lambda n: many(n, False),
    "many_each": lambda n: many(n, True),
    "empty": lambda n: many(0, False),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--sqlite", action="store_true")
    ap.add_argument("--postgres", metavar="DSN")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--piece", choices=sorted(PIECES))
    ap.add_argument("--setup-only", action="store_true")
    ap.add_argument("--collect-inputs", action="store_true")
    args = ap.parse_args(argv)
    global COLLECT_INPUTS
    COLLECT_INPUTS = args.collect_inputs
    if args.piece:
        global SETUP_ONLY, PIECE
        SETUP_ONLY, PIECE = args.setup_only, True
        if os.environ.get("NOGC"):
            gc.disable()
        PIECES[args.piece](args.n)
        return 0
    print(f"load average {os.getloadavg()[0]:.2f}, python {sys.version.split()[0]}")
    if args.memory:
        memory(args.n, args.rounds)
    if args.sqlite:
        sqlite(args.n, args.batch, args.rounds)
    if args.postgres:
        postgres(args.postgres, args.n, args.batch, args.rounds)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
