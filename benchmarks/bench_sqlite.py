"""Benchmark the SQLite store layer, side by side with APScheduler 3's SQLAlchemyJobStore.

Measures, for ``durable`` and ``fast`` durability and 1, 2 and 4 worker processes:

* **claims/s**: workers drain a file of READY tasks with ``claim_next(limit=batch)``;
* **end to end tasks/s**: the parent inserts (``insert_many``) and promotes (``due_before`` +
  ``promote``) while the workers claim (batched) and ``finish`` each task, until all succeeded;
* **p99 claim latency**: of every ``claim_next`` call in the end-to-end run.

Then APScheduler 3 (SQLAlchemyJobStore on SQLite): ``add_job`` throughput, and the time to run
jobs due now with its default thread pool.

Run::

    python benchmarks/bench_sqlite.py                 # CI size, about a minute on 2 cores
    python benchmarks/bench_sqlite.py --tasks 100000  # bigger
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import threading
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from timewheel._contract import FUNC
from timewheel.stores.sqlite import Durability, SQLiteStore
from timewheel.task import Task, TaskState

CTX = mp.get_context("spawn")


def _tasks(ids: list[str], now: float) -> list[Task]:
    return [Task(id=i, func=FUNC, args=(i,), due=now, created=now) for i in ids]


def _claim_worker(path: str, durability: Durability, batch: int, out: Any) -> None:
    store = SQLiteStore(path, durability=durability, busy_timeout=60)
    n = 0
    t0 = time.perf_counter()
    while True:
        now = time.time()
        got = store.claim_next(
            owner=f"w{os.getpid()}", lease_expires=now + 600, now=now, limit=batch
        )
        if not got:
            break
        n += len(got)
    out.put((n, time.perf_counter() - t0, []))
    store.close()


def _e2e_worker(path: str, durability: Durability, batch: int, produced: Event, out: Any) -> None:
    store = SQLiteStore(path, durability=durability, busy_timeout=60)
    owner = f"w{os.getpid()}"
    n = 0
    lat: list[float] = []
    while True:
        now = time.time()
        t = time.perf_counter()
        got = store.claim_next(owner=owner, lease_expires=now + 600, now=now, limit=batch)
        lat.append(time.perf_counter() - t)
        if not got:
            if produced.is_set() and not store.claim_next(
                owner=owner, lease_expires=now + 600, now=now, limit=batch
            ):
                break
            time.sleep(0.001)
            continue
        for task in got:
            store.finish(task.id, owner=owner, state=TaskState.SUCCEEDED, now=time.time(), result=n)
            n += 1
    out.put((n, 0.0, lat))
    store.close()


def _collect(q: Any, procs: list[Any]) -> list[tuple[int, float, list[float]]]:
    """One result per worker; fail loudly (instead of hanging) if a worker died."""
    import queue

    out: list[tuple[int, float, list[float]]] = []
    while len(out) < len(procs):
        try:
            out.append(q.get(timeout=1.0))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a benchmark worker died (exit codes {dead})") from None
    return out


def bench_claims(tmp: Path, durability: Durability, workers: int, n: int, batch: int) -> float:
    path = tmp / f"claims-{durability}-{workers}-{batch}.db"
    store = SQLiteStore(path, durability="fast")
    now = time.time()
    for start in range(0, n, 5000):
        ids = [f"t{i:07d}" for i in range(start, min(n, start + 5000))]
        store.insert_many(_tasks(ids, now))
        store.promote(ids, now)
    store.close()
    q = CTX.Queue()
    procs = [
        CTX.Process(target=_claim_worker, args=(str(path), durability, batch, q))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    results = _collect(q, procs)
    for p in procs:
        p.join()
    assert sum(r[0] for r in results) == n
    # process start-up is excluded: each worker times its own drain; the slowest one bounds it
    return n / max(r[1] for r in results)


def bench_e2e(
    tmp: Path, durability: Durability, workers: int, n: int, batch: int
) -> tuple[float, float]:
    path = tmp / f"e2e-{durability}-{workers}-{batch}.db"
    SQLiteStore(path, durability=durability).close()
    q = CTX.Queue()
    produced = CTX.Event()
    procs = [
        CTX.Process(target=_e2e_worker, args=(str(path), durability, batch, produced, q))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let the workers start polling (spawn start-up is not the store's cost)
    store = SQLiteStore(path, durability=durability, busy_timeout=60)
    t0 = time.perf_counter()
    chunk = 1000
    for start in range(0, n, chunk):
        now = time.time()
        store.insert_many(_tasks([f"t{i:07d}" for i in range(start, min(n, start + chunk))], now))
        due = [i for i, *_ in store.due_before(now + 1e-3, limit=chunk)]
        store.promote(due, now)
    produced.set()
    results = _collect(q, procs)
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    done = store.count_by_state().get(TaskState.SUCCEEDED, 0)
    store.close()
    assert done == n == sum(r[0] for r in results), (done, n)
    lat = sorted(x for r in results for x in r[2])
    p99 = lat[int(len(lat) * 0.99)] if lat else 0.0
    return n / elapsed, p99 * 1000


# -- APScheduler 3 -------------------------------------------------------------------------------------
def bench_apscheduler(tmp: Path, n: int) -> tuple[float, float] | None:
    try:
        from apscheduler.events import EVENT_JOB_EXECUTED
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
        from apscheduler.schedulers.background import BackgroundScheduler
    except ImportError as e:
        print(
            f"(APScheduler 3 / SQLAlchemy not installed: {e}; pip install 'apscheduler<4' sqlalchemy)"
        )
        return None
    import logging

    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    url = f"sqlite:///{tmp / 'aps.db'}"
    sched = BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url=url)})
    sched.start(paused=True)
    t0 = time.perf_counter()
    for i in range(n):
        sched.add_job(FUNC, "date", id=f"j{i}", misfire_grace_time=3600)
    add_rate = n / (time.perf_counter() - t0)
    done = threading.Event()
    count = [0]

    def on_done(_: object) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    sched.add_listener(on_done, EVENT_JOB_EXECUTED)
    t0 = time.perf_counter()
    sched.resume()
    done.wait(600)
    run_rate = count[0] / (time.perf_counter() - t0)
    sched.shutdown()
    return add_rate, run_rate


def bench_insert(tmp: Path, durability: Durability, n: int) -> float:
    store = SQLiteStore(tmp / f"ins-{durability}.db", durability=durability)
    now = time.time()
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        store.insert_many(_tasks([f"t{i:07d}" for i in range(start, min(n, start + 1000))], now))
    rate = n / (time.perf_counter() - t0)
    store.close()
    return rate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=20_000, help="tasks per run (default 20000)")
    ap.add_argument("--batch", type=int, default=32, help="claim_next limit (default 32)")
    ap.add_argument("--workers", default="1,2,4", help="worker process counts (default 1,2,4)")
    ap.add_argument("--aps-jobs", type=int, default=2000, help="APScheduler jobs (default 2000)")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]
    import sqlite3
    import sys

    print(
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"{args.tasks} tasks per run, claim batch {args.batch}"
    )
    rows: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory(prefix="tw-bench-", dir=os.environ.get("TMPDIR")) as d:
        tmp = Path(d)
        for durability in ("durable", "fast"):
            ins = bench_insert(tmp, durability, args.tasks)
            rows.append(
                (f"timewheel SQLiteStore {durability}", "-", "insert_many", f"{ins:,.0f}/s", "")
            )
            for w in counts:
                c = bench_claims(tmp, durability, w, args.tasks, args.batch)
                e2e, p99 = bench_e2e(tmp, durability, w, args.tasks, args.batch)
                rows.append(
                    (f"timewheel SQLiteStore {durability}", str(w), "claims", f"{c:,.0f}/s", "")
                )
                rows.append(
                    (
                        f"timewheel SQLiteStore {durability}",
                        str(w),
                        "end to end",
                        f"{e2e:,.0f}/s",
                        f"{p99:.2f} ms",
                    )
                )
        single = bench_claims(tmp, "fast", 1, args.tasks, 1)
        rows.append(("timewheel SQLiteStore fast, limit=1", "1", "claims", f"{single:,.0f}/s", ""))
        aps = bench_apscheduler(tmp, args.aps_jobs)
        if aps is not None:
            rows.append(
                ("APScheduler 3 SQLAlchemyJobStore", "-", "add_job", f"{aps[0]:,.0f}/s", "")
            )
            rows.append(
                ("APScheduler 3 SQLAlchemyJobStore", "10 threads", "run", f"{aps[1]:,.0f}/s", "")
            )
    head = ("store", "workers", "operation", "throughput", "p99 claim")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*head))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
