"""Benchmark PostgresStore side by side with a plain SKIP LOCKED loop, pgqueuer and procrastinate.

Every system runs in a database of its own, created for the run and dropped after it, on the
same server, with no-op jobs. For each system:

* **enqueue one by one**: jobs/s, each job its own call and commit, the systems taking turns
  in ``--one-rounds`` rounds (so they meet the same load of the machine);
* **batched enqueue**: jobs/s, ``--batch`` jobs per call (timewheel: ``schedule_many``);
* **end to end**: jobs/s with each of ``--workers`` worker processes (a run per count, and for
  pgqueuer a run per ``--pgq-batch`` size) draining jobs enqueued (due now) before they start,
  from the start signal to the last job's run. Each worker process connects before the start
  signal and stops once the queue is drained;
* **deferred lateness**: jobs enqueued at ``--rate`` per second, each due ``--due-min`` to
  ``--due-max`` seconds ahead, run by one worker process: p50/p99/max of start minus due;
* **duplicates**: runs beyond one per job, in the end-to-end and deferred runs.

The floor is a plain loop written here: ``INSERT`` to enqueue (an ``unnest`` multi-row insert
for a batch), and workers that take ``--floor-batch`` due rows with ``UPDATE ... FROM (SELECT
... FOR UPDATE SKIP LOCKED)``, run them and mark them done in one statement, and poll every
10 ms when idle. Any library adds cost to that. pgqueuer and procrastinate (the ``bench``
extra) are skipped when they are not installed.

Run::

    nice -n 10 python benchmarks/bench_postgres.py            # minutes on 2 cores
    python benchmarks/bench_postgres.py --quick               # a smoke run
    python benchmarks/bench_postgres.py --only floor,timewheel,pgqueuer --sections e2e
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import multiprocessing as mp
import os
import queue
import random
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

CTX = mp.get_context("spawn")
SYSTEMS = ("floor", "timewheel", "pgqueuer", "procrastinate")
SECTIONS = ("one", "batched", "e2e", "deferred")
IDLE_EXIT = 1.0  # seconds without a job after which an end-to-end worker reports and exits

# -- what each job does: note that it ran (per process), when, and how late ------------------------
RAN: list[int] = []
LATE: list[float] = []
LAST = [0.0]


def noop_job(i: int) -> None:
    """The end-to-end job: a no-op that notes its number (duplicates are counted from these)."""
    RAN.append(i)
    LAST[0] = time.time()


def deferred_job(i: int, due: float) -> None:
    """The deferred job: notes its number and how late it started."""
    LATE.append(time.time() - due)
    RAN.append(i)
    LAST[0] = time.time()


def jobs() -> Any:
    """This file imported as the module ``bench_postgres``: the one copy whose job functions
    timewheel's workers import by reference (run as a script, this file is also ``__main__``)."""
    return importlib.import_module("bench_postgres")


def report(out: Any) -> None:
    """Send what this worker process's jobs noted to the parent."""
    j = jobs()
    out.put((j.RAN, j.LATE, j.LAST[0]))


# -- databases -------------------------------------------------------------------------------------
def _with_db(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


@contextmanager
def fresh_database(admin_dsn: str, name: str) -> Iterator[str]:
    """A new database for one system's run, dropped afterwards."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(admin_dsn, name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _collect(q: Any, procs: list[Any], bound: float = 900.0) -> list[Any]:
    """One result per worker process; fail loudly (instead of hanging) if one died."""
    out: list[Any] = []
    deadline = time.monotonic() + bound
    while len(out) < len(procs):
        try:
            out.append(q.get(timeout=1.0))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a benchmark worker died (exit codes {dead})") from None
            if time.monotonic() > deadline:
                raise RuntimeError("benchmark workers did not report in time") from None
    for p in procs:
        p.join()
    return out


# -- the floor: a plain FOR UPDATE SKIP LOCKED loop -------------------------------------------------
FLOOR_SCHEMA = """
CREATE TABLE jobs (
    id      BIGSERIAL PRIMARY KEY,
    payload TEXT NOT NULL,
    due     TIMESTAMPTZ NOT NULL DEFAULT now(),
    state   SMALLINT NOT NULL DEFAULT 0
);
CREATE INDEX jobs_due ON jobs (due) WHERE state = 0;
"""
FLOOR_CLAIM = (
    "UPDATE jobs j SET state = 1 FROM (SELECT id FROM jobs WHERE state = 0 AND due <= now() "
    "ORDER BY due LIMIT %s FOR UPDATE SKIP LOCKED) c WHERE j.id = c.id RETURNING j.id, j.payload"
)


class Floor:
    name = "floor"

    def __init__(self, dsn: str, args: argparse.Namespace) -> None:
        self.dsn = dsn
        self.args = args
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(FLOOR_SCHEMA)

    def enqueue_one(self, n: int) -> float:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            t = time.perf_counter()
            for i in range(n):
                conn.execute("INSERT INTO jobs (payload) VALUES (%s)", (json.dumps([i]),))
            return time.perf_counter() - t

    def enqueue_batched(self, n: int, batch: int, *, delay: float = 0.0) -> float:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            t = time.perf_counter()
            for start in range(0, n, batch):
                payloads = [json.dumps([i]) for i in range(start, min(n, start + batch))]
                conn.execute(
                    "INSERT INTO jobs (payload, due) SELECT p, now() + %s * interval '1 second' "
                    "FROM unnest(%s::text[]) AS p",
                    (delay, payloads),
                )
            return time.perf_counter() - t

    def reset(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE jobs")

    def enqueue_deferred(self, i: int, due: float) -> None:
        conn = getattr(self, "_conn", None)
        if conn is None:
            conn = self._conn = psycopg.connect(self.dsn, autocommit=True)
        conn.execute(
            "INSERT INTO jobs (payload, due) VALUES (%s, to_timestamp(%s))",
            (json.dumps([i, due]), due),
        )

    def close(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    @staticmethod
    def worker(dsn: str, args: argparse.Namespace, go: Any, stop: Any, out: Any) -> None:
        batch = args.floor_batch
        j = jobs()
        with psycopg.connect(dsn, autocommit=True) as conn:
            go.wait()
            last = time.time()
            while not stop.is_set():
                rows = conn.execute(FLOOR_CLAIM, (batch,)).fetchall()
                if not rows:
                    if args.e2e_mode and time.time() - last > IDLE_EXIT:
                        break
                    time.sleep(0.01)
                    continue
                for _, payload in rows:
                    a = json.loads(payload)
                    if len(a) == 2:
                        j.deferred_job(a[0], a[1])
                    else:
                        j.noop_job(a[0])
                conn.execute(
                    "UPDATE jobs SET state = 2 WHERE id = ANY(%s)", ([r[0] for r in rows],)
                )
                last = time.time()
        report(out)


# -- timewheel: PostgresStore behind a Scheduler --------------------------------------------------
class Timewheel:
    name = "timewheel"

    def __init__(self, dsn: str, args: argparse.Namespace) -> None:
        import timewheel as tw
        from timewheel.stores.postgres import PostgresStore

        self.dsn = dsn
        self.args = args
        # a scheduler that is never started: schedule() writes the store and the local wheel,
        # as an application process that only enqueues does
        self.sched = tw.Scheduler(store=PostgresStore(dsn), allow=["bench_postgres"])
        self.jobs = jobs()

    def enqueue_one(self, n: int) -> float:
        schedule = self.sched.schedule
        t = time.perf_counter()
        job = self.jobs.noop_job
        for i in range(n):
            schedule(job, i, delay=0)
        return time.perf_counter() - t

    def enqueue_batched(self, n: int, batch: int, *, delay: float = 0.0) -> float:
        many = self.sched.schedule_many
        job = self.jobs.noop_job
        t = time.perf_counter()
        for start in range(0, n, batch):
            many([(job, (i,)) for i in range(start, min(n, start + batch))], delay=delay)
        return time.perf_counter() - t

    def reset(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE timewheel.tasks, timewheel.deps")

    def enqueue_deferred(self, i: int, due: float) -> None:
        self.sched.schedule(self.jobs.deferred_job, i, due, at=due)

    def close(self) -> None:
        self.sched.shutdown()
        self.sched.store.close()

    @staticmethod
    def worker(dsn: str, args: argparse.Namespace, go: Any, stop: Any, out: Any) -> None:
        import timewheel as tw
        from timewheel.stores.postgres import PostgresStore

        store = PostgresStore(dsn)
        sched = tw.Scheduler(
            store=store,
            allow=["bench_postgres"],
            dispatcher=tw.ThreadPoolDispatcher(workers=args.tw_threads, claim_batch=args.tw_claim),
            poll_interval=args.tw_poll,
        )
        j = jobs()
        # start-up, as the other systems' connections: the pool opens its connections (each
        # measures the server's clock) before the start signal, not during the timed run
        with ThreadPoolExecutor(store.pool_size) as pool:
            list(pool.map(lambda _: store.count_by_state(), range(4 * store.pool_size)))
        go.wait()
        sched.start()
        last_n, last = 0, time.time()
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                time.sleep(0.05)
                n = len(j.RAN)
                if n != last_n:
                    last_n, last = n, time.time()
                elif args.e2e_mode and time.time() - last > IDLE_EXIT and not _tw_left(conn):
                    # as the other systems' workers, stop once the queue is drained: a process
                    # that ran nothing for a while (its trigger lost the promotions to the
                    # others) would otherwise leave early, and hand back what it had claimed
                    break
        sched.shutdown()
        report(out)


def _tw_left(conn: psycopg.Connection[Any]) -> bool:
    """Whether timewheel's store still holds a task not yet ended."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM timewheel.tasks "
        "WHERE state IN ('pending', 'ready', 'running'))"
    ).fetchone()
    return bool(row and row[0])


# -- pgqueuer ----------------------------------------------------------------------------------------
class PgQueuer:
    name = "pgqueuer"

    def __init__(self, dsn: str, args: argparse.Namespace) -> None:
        self.dsn = dsn
        self.args = args
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._open())

    async def _open(self) -> None:
        from pgqueuer import PsycopgDriver, Queries

        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        self.queries = Queries(PsycopgDriver(self.conn))
        await self.queries.install()

    def enqueue_one(self, n: int) -> float:
        async def run() -> float:
            enqueue = self.queries.enqueue
            t = time.perf_counter()
            for i in range(n):
                await enqueue("noop", json.dumps([i]).encode())
            return time.perf_counter() - t

        return self.loop.run_until_complete(run())

    def enqueue_batched(self, n: int, batch: int, *, delay: float = 0.0) -> float:
        async def run() -> float:
            t = time.perf_counter()
            for start in range(0, n, batch):
                k = min(n, start + batch) - start
                await self.queries.enqueue(
                    ["noop"] * k,
                    [json.dumps([i]).encode() for i in range(start, start + k)],
                    [0] * k,
                )
            return time.perf_counter() - t

        return self.loop.run_until_complete(run())

    def reset(self) -> None:
        self.loop.run_until_complete(self.queries.clear_queue(None))

    def enqueue_deferred(self, i: int, due: float) -> None:
        after = timedelta(seconds=due - time.time())
        self.loop.run_until_complete(
            self.queries.enqueue("noop", json.dumps([i, due]).encode(), execute_after=after)
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()

    @staticmethod
    def worker(dsn: str, args: argparse.Namespace, go: Any, stop: Any, out: Any) -> None:
        async def run() -> None:
            from pgqueuer import PsycopgDriver, Queries, QueueManager
            from pgqueuer.types import QueueExecutionMode

            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            qm = QueueManager(Queries(PsycopgDriver(conn)))
            j = jobs()

            @qm.entrypoint("noop")  # type: ignore[untyped-decorator,unused-ignore]
            async def noop(job: Any) -> None:
                a = json.loads(job.payload)
                if len(a) == 2:
                    j.deferred_job(a[0], a[1])
                else:
                    j.noop_job(a[0])

            async def watch() -> None:
                while not stop.is_set():
                    await asyncio.sleep(0.05)
                qm.shutdown.set()

            await asyncio.get_running_loop().run_in_executor(None, go.wait)
            watcher = asyncio.ensure_future(watch())
            mode = QueueExecutionMode.drain if args.e2e_mode else QueueExecutionMode.continuous
            await qm.run(
                batch_size=args.pgq_batch,
                mode=mode,
                dequeue_timeout=timedelta(seconds=args.pgq_timeout),
            )
            watcher.cancel()
            await conn.close()

        asyncio.run(run())
        report(out)


# -- procrastinate -----------------------------------------------------------------------------------
def procrastinate_app(dsn: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    j = jobs()

    @app.task(name="noop")  # type: ignore[untyped-decorator,unused-ignore]
    def noop(i: int, due: float | None = None) -> None:
        if due is None:
            j.noop_job(i)
        else:
            j.deferred_job(i, due)

    return app


class Procrastinate:
    name = "procrastinate"

    def __init__(self, dsn: str, args: argparse.Namespace) -> None:
        self.dsn = dsn
        self.args = args
        self.app = jobs().procrastinate_app(dsn)
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._open())

    async def _open(self) -> None:
        await self.app.open_async()
        await self.app.schema_manager.apply_schema_async()
        self.task = self.app.tasks["noop"]

    def enqueue_one(self, n: int) -> float:
        async def run() -> float:
            defer = self.task.defer_async
            t = time.perf_counter()
            for i in range(n):
                await defer(i=i)
            return time.perf_counter() - t

        return self.loop.run_until_complete(run())

    def enqueue_batched(self, n: int, batch: int, *, delay: float = 0.0) -> float:
        async def run() -> float:
            t = time.perf_counter()
            for start in range(0, n, batch):
                await self.task.batch_defer_async(
                    *({"i": i} for i in range(start, min(n, start + batch)))
                )
            return time.perf_counter() - t

        return self.loop.run_until_complete(run())

    def reset(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE procrastinate_jobs CASCADE")

    def enqueue_deferred(self, i: int, due: float) -> None:
        at = datetime.fromtimestamp(due, timezone.utc)
        self.loop.run_until_complete(self.task.configure(schedule_at=at).defer_async(i=i, due=due))

    def close(self) -> None:
        self.loop.run_until_complete(self.app.close_async())
        self.loop.close()

    @staticmethod
    def worker(dsn: str, args: argparse.Namespace, go: Any, stop: Any, out: Any) -> None:
        async def run() -> None:
            app = jobs().procrastinate_app(dsn)
            async with app.open_async():
                await asyncio.get_running_loop().run_in_executor(None, go.wait)
                work = asyncio.ensure_future(
                    app.run_worker_async(
                        concurrency=args.proc_concurrency,
                        wait=not args.e2e_mode,
                        install_signal_handlers=False,
                    )
                )
                while not work.done() and not stop.is_set():
                    await asyncio.sleep(0.05)
                if not work.done():
                    work.cancel()
                    try:
                        await work
                    except (asyncio.CancelledError, Exception):
                        pass

        asyncio.run(run())
        report(out)


SYSTEM_CLASSES: dict[str, Callable[[str, argparse.Namespace], Any]] = {
    "floor": Floor,
    "timewheel": Timewheel,
    "pgqueuer": PgQueuer,
    "procrastinate": Procrastinate,
}


def available(name: str) -> bool:
    """Whether the system's package is installed (pgqueuer and procrastinate are optional)."""
    if name in ("pgqueuer", "procrastinate"):
        try:
            __import__(name)
        except ImportError:
            return False
    return True


# -- the measures ------------------------------------------------------------------------------------
def enqueue_rounds(systems: dict[str, Any], args: argparse.Namespace) -> dict[str, float]:
    """Enqueue one by one: ``--one`` jobs per system, in ``--one-rounds`` rounds in which the
    systems take turns (the order reversed every round), so that every system meets the same
    load of the machine; a system's rate is all its jobs over all its rounds' time."""
    per_round = max(1, args.one // args.one_rounds)
    spent = dict.fromkeys(systems, 0.0)
    names = list(systems)
    for r in range(args.one_rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            spent[name] += systems[name].enqueue_one(per_round)
    return {name: per_round * args.one_rounds / t for name, t in spent.items()}


def measure(name: str, system: Any, dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """The batched, end-to-end and deferred measures of one system asked for by ``--sections``
    (each after a reset; enqueue one by one is measured apart, in turns)."""
    cls = SYSTEM_CLASSES[name]
    res: dict[str, Any] = {"e2e": {}, "e2e_dups": 0, "late": [], "late_dups": 0}
    system.reset()
    if "batched" in args.sections:
        res["batched"] = args.batched / system.enqueue_batched(args.batched, args.batch)
        system.reset()
    if "e2e" in args.sections:
        # end to end: the jobs wait, due now, before the workers get the start signal; each
        # worker count, and each of pgqueuer's batch sizes, is a run of its own
        for setting in settings(name, args):
            for n in args.worker_counts:
                system.enqueue_batched(args.e2e, args.batch)
                rate, dups, _ = _e2e(cls, dsn, argparse.Namespace(**{**vars(args), **setting}), n)
                res["e2e"][_label(setting), n] = rate
                res["e2e_dups"] += dups
                system.reset()
    if "deferred" in args.sections:
        late, dups, _ = _deferred(system, cls, dsn, args)
        res["late"], res["late_dups"] = late, dups
    return res


def settings(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The end-to-end settings tried for *name*: pgqueuer at each of ``--pgq-batch``."""
    if name == "pgqueuer":
        return [{"pgq_batch": b} for b in args.pgq_batches]
    return [{}]


def _label(setting: dict[str, Any]) -> str:
    return ", ".join(f"batch {v}" for v in setting.values())


def _start(cls: Any, dsn: str, args: argparse.Namespace, n: int, e2e: bool) -> tuple[Any, ...]:
    wargs = argparse.Namespace(**vars(args), e2e_mode=e2e)
    q, go, stop = CTX.Queue(), CTX.Event(), CTX.Event()
    procs = [CTX.Process(target=cls.worker, args=(dsn, wargs, go, stop, q)) for _ in range(n)]
    for p in procs:
        p.start()
    return q, go, stop, procs


def _e2e(cls: Any, dsn: str, args: argparse.Namespace, workers: int) -> tuple[float, int, int]:
    q, go, _stop, procs = _start(cls, dsn, args, workers, True)
    time.sleep(args.startup)  # process start-up and imports are not the queue's cost
    t0 = time.time()
    go.set()
    results = _collect(q, procs)
    ran = [i for r in results for i in r[0]]
    end = max(r[2] for r in results)
    if len(set(ran)) != args.e2e:
        print(f"  ! {cls.name}: {len(set(ran))} of {args.e2e} jobs ran", file=sys.stderr)
    return len(set(ran)) / (end - t0), len(ran) - len(set(ran)), len(set(ran))


def _deferred(system: Any, cls: Any, dsn: str, args: argparse.Namespace) -> tuple[Any, int, int]:
    q, go, stop, procs = _start(cls, dsn, args, 1, False)
    time.sleep(args.startup)
    go.set()
    rng = random.Random(7)
    n = int(args.rate * args.seconds)
    start = time.time()
    last_due = start
    for i in range(n):
        at = start + i / args.rate
        pause = at - time.time()
        if pause > 0:
            time.sleep(pause)
        due = time.time() + rng.uniform(args.due_min, args.due_max)
        last_due = max(last_due, due)
        system.enqueue_deferred(i, due)
    time.sleep(max(0.0, last_due - time.time()) + args.settle)
    stop.set()
    results = _collect(q, procs)
    late = sorted(x for r in results for x in r[1])
    ran = [i for r in results for i in r[0]]
    if len(set(ran)) != n:
        print(f"  ! {cls.name}: {len(set(ran))} of {n} deferred jobs ran", file=sys.stderr)
    return late, len(ran) - len(set(ran)), len(set(ran))


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--only", default=",".join(SYSTEMS))
    ap.add_argument("--one", type=int, default=2000, help="jobs enqueued one by one")
    ap.add_argument(
        "--one-rounds", type=int, default=10, help="turns the systems take enqueueing one by one"
    )
    ap.add_argument("--batched", type=int, default=50_000, help="jobs enqueued in batches")
    ap.add_argument("--batch", type=int, default=1000, help="jobs per batched enqueue")
    ap.add_argument("--e2e", type=int, default=20_000, help="jobs in the end-to-end run")
    ap.add_argument(
        "--workers", default="1,4", help="worker processes end to end (comma-separated: a run each)"
    )
    ap.add_argument("--rate", type=float, default=50.0, help="deferred jobs enqueued per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long deferred jobs come")
    ap.add_argument("--due-min", type=float, default=5.0)
    ap.add_argument("--due-max", type=float, default=25.0)
    ap.add_argument("--settle", type=float, default=6.0, help="wait after the last due time")
    ap.add_argument("--startup", type=float, default=3.0, help="seconds for workers to start")
    ap.add_argument("--floor-batch", type=int, default=50)
    ap.add_argument(
        "--pgq-batch",
        default="10,50,100,500",
        help="pgqueuer's batch sizes end to end (comma-separated: a run each; the deferred run "
        "takes the first)",
    )
    ap.add_argument(
        "--pgq-timeout", type=float, default=0.1, help="pgqueuer's poll for deferred jobs (s)"
    )
    ap.add_argument("--proc-concurrency", type=int, default=10)
    ap.add_argument("--tw-threads", type=int, default=8)
    ap.add_argument("--tw-claim", type=int, default=50)
    ap.add_argument("--tw-poll", type=float, default=1.0)
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"what to measure (comma-separated, from {', '.join(SECTIONS)})",
    )
    args = ap.parse_args(argv)
    args.worker_counts = _numbers(ap, args.workers, "--workers")
    args.pgq_batches = _numbers(ap, args.pgq_batch, "--pgq-batch")
    args.pgq_batch = args.pgq_batches[0]
    args.sections = [x for x in args.sections.split(",") if x]
    for x in args.sections:
        if x not in SECTIONS:
            ap.error(f"unknown section {x!r} (choose from {', '.join(SECTIONS)})")
    if args.quick:
        args.one, args.batched, args.e2e = 200, 2000, 2000
        args.seconds, args.due_min, args.due_max, args.settle = 2.0, 1.0, 2.0, 6.0
        args.startup = 2.0
    names = [n for n in args.only.split(",") if n]
    for n in names:
        if n not in SYSTEMS:
            ap.error(f"unknown system {n!r} (choose from {', '.join(SYSTEMS)})")
    print(f"# bench_postgres  {time.strftime('%Y-%m-%d %H:%M:%S')}  load {os.getloadavg()}")
    print(f"# {vars(args)}")
    results: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        dsns, systems = {}, {}
        for name in names:
            if not available(name):
                print(f"{name}: not installed, skipped")
                continue
            dsns[name] = stack.enter_context(
                fresh_database(args.dsn, f"bench_pg_{os.getpid()}_{name}")
            )
            systems[name] = SYSTEM_CLASSES[name](dsns[name], args)
            stack.callback(systems[name].close)
        results = {name: {} for name in systems}
        if "one" in args.sections:
            print("enqueue one by one, in turns ...", flush=True)
            for name, rate in enqueue_rounds(systems, args).items():
                results[name]["one"] = rate
        for name, system in systems.items():
            print(f"{name} ...", flush=True)
            results[name].update(measure(name, system, dsns[name], args))
    _report(results, args)
    return 0


def _numbers(ap: argparse.ArgumentParser, text: str, option: str) -> list[int]:
    try:
        got = [int(x) for x in text.split(",") if x]
    except ValueError:
        got = []
    if not got or min(got) < 1:
        ap.error(f"{option} takes whole numbers >= 1, comma-separated (got {text!r})")
    return got


def _report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    def rate(r: dict[str, Any], key: str) -> str:
        return f"{r[key] / 1e3:.2f} k/s" if key in r else "-"

    print()
    print(
        f"| | enqueue one by one | batched enqueue ({args.batch}) | deferred lateness p50 / p99 "
        "/ max | duplicates |"
    )
    print("|---|---|---|---|---|")
    for name, r in results.items():
        late = r["late"]
        lat = (
            f"{_pct(late, 0.5) * 1e3:.1f} / {_pct(late, 0.99) * 1e3:.1f} / {late[-1] * 1e3:.1f} ms"
            if late
            else "-"
        )
        print(
            f"| {name} | {rate(r, 'one')} | {rate(r, 'batched')} | {lat} | "
            f"{r['e2e_dups'] + r['late_dups']} |"
        )
    if "e2e" not in args.sections:
        return
    counts = args.worker_counts
    print()
    print("| end to end | " + " | ".join(f"{n} worker process(es)" for n in counts) + " |")
    print("|---|" + "---|" * len(counts))
    best: dict[str, dict[int, float]] = {}
    for name, r in results.items():
        for label in dict.fromkeys(k[0] for k in r["e2e"]):
            row = [r["e2e"][label, n] for n in counts]
            shown = name + (f" ({label})" if label else "")
            print(f"| {shown} | " + " | ".join(f"{x / 1e3:.2f} k/s" for x in row) + " |")
            for n, x in zip(counts, row, strict=True):
                best.setdefault(name, {})[n] = max(best.get(name, {}).get(n, 0.0), x)
    tw = best.get("timewheel")
    if tw is None:
        return
    print()
    for other, b in best.items():
        if other != "timewheel":
            ratios = ", ".join(f"{n} process(es) {tw[n] / b[n]:.2f}x" for n in counts)
            print(f"end to end, timewheel / {other} (its best setting): {ratios}")
    for name, r in results.items():
        if name != "timewheel" and "one" in r and "one" in results["timewheel"]:
            t = results["timewheel"]
            print(
                f"timewheel / {name}: one by one {t['one'] / r['one']:.2f}x, batched "
                f"{t['batched'] / r['batched']:.2f}x"
            )


if __name__ == "__main__":
    sys.exit(main())
