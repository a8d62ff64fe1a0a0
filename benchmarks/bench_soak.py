"""Soak: a scheduler under steady load for minutes, on the memory and the SQLite store.

For each store, a producer schedules one-shot tasks at a steady rate (``--rate`` per second, each
due up to a second later; one in twenty raises), beside ``--recurring`` schedules that run every
second, with a short retention (``--keep`` seconds) so retention and WAL maintenance work during
the run. Every few seconds it samples the process: RSS, Python objects (``gc.get_objects()``),
Python allocator blocks in use (``sys.getallocatedblocks()``, which counts objects that the
garbage collector does not track too, such as floats and strings), open file descriptors,
threads, and the database and WAL sizes. At the end it prints:

* slopes over the second half of the run (after warm-up), per task scheduled: RSS bytes, Python
  objects and allocator blocks, database bytes; a bounded process has slopes near zero;
* lateness (start minus due) p50 and p99 of the one-shot runs;
* lost runs (one-shot tasks scheduled that never ran) and duplicated runs (ran twice): both must
  be zero; and how many runs the recurring schedules made.

Three more measurements, each run alone when asked for (``--restarts``, ``--timeouts``,
``--prune``/``--prune-sqlite``; the soak is then skipped):

* ``--restarts N``: N schedulers started, used and shut down one after the other on one SQLite
  store; open fds and threads after each (they must stay flat);
* ``--timeouts N``: N tasks on one scheduler (SQLite) that overrun a 50 ms timeout, in waves of
  ten; fds and threads as they go (each abandoned worker is replaced, and its thread and
  connection go when its function returns);
* ``--prune N`` (memory) / ``--prune-sqlite N``: a store holding N finished tasks past their
  retention, emptied by a running scheduler's retention: the trigger's step times (longest, p99;
  wall clock, and the trigger thread's CPU time, which a busy machine does not inflate) and the
  longest wait of another thread writing to the store meanwhile.

Run::

    python benchmarks/bench_soak.py                # 5 minutes (half per store)
    python benchmarks/bench_soak.py --quick        # 1 minute
    python benchmarks/bench_soak.py --minutes 60 --rate 1000
    python benchmarks/bench_soak.py --stores memory --minutes 10 --keep 60
    python benchmarks/bench_soak.py --restarts 100 --timeouts 1000
    python benchmarks/bench_soak.py --prune 1000000 --prune-sqlite 1000000
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from array import array
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import timewheel as tw
from timewheel.refs import register
from timewheel.stores.base import Store
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState

_lock = threading.Lock()
# the bookkeeping is allocated up front (no Python object per task), so it adds nothing to the
# slopes: run counts and lateness indexed by the task's number
_runs = bytearray()
_late = array("d")
_ticks = [0]


@register("soak.work")
def work(n: int) -> int:
    """One one-shot run: counted, its lateness recorded; every twentieth raises."""
    task = tw.current_task()
    assert task is not None
    late = time.time() - task.due
    with _lock:
        _runs[n] = min(255, _runs[n] + 1)
        _late[n] = late
    if n % 20 == 0:
        raise ValueError(f"failing on purpose: {n}")
    return n


@register("soak.tick")
def tick() -> None:
    """One run of a recurring schedule."""
    with _lock:
        _ticks[0] += 1


@register("soak.noop")
def noop() -> None:
    """A run that does nothing."""


@register("soak.nap")
def nap(seconds: float) -> None:
    """A run that sleeps (past its timeout, in ``--timeouts``)."""
    time.sleep(seconds)


@dataclass
class Sample:
    at: float
    scheduled: int
    rss: int
    objects: int
    blocks: int
    fds: int
    threads: int
    db: int
    wal: int
    sqlite_mem: int
    page_cache: int
    rows: int
    free_pages: int


@dataclass
class Outcome:
    name: str
    samples: list[Sample] = field(default_factory=list)
    scheduled: int = 0
    lost: int = 0
    duplicated: int = 0
    ticks: int = 0
    late: list[float] = field(default_factory=list)
    seconds: float = 1.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def sqlite_memory() -> tuple[int, int]:
    """SQLite's own accounting, over every connection of the process: the bytes it has
    allocated, and of them the bytes of page caches (``sqlite3_status64``; (0, 0) when the
    library cannot be reached through ``ctypes``)."""
    try:
        lib = ctypes.CDLL("libsqlite3.so.0")  # the one _sqlite3 links: same handle, same counters
    except OSError:
        return 0, 0
    figures = []
    for op in (0, 2):  # SQLITE_STATUS_MEMORY_USED, SQLITE_STATUS_PAGECACHE_OVERFLOW
        current, high = ctypes.c_int64(), ctypes.c_int64()
        lib.sqlite3_status64(op, ctypes.byref(current), ctypes.byref(high), 0)
        figures.append(current.value)
    return figures[0], figures[1]


def table_figures(db: Path | None) -> tuple[int, int]:
    """The tasks in the SQLite file and its free pages (pages SQLite reuses before it grows the
    file), read on a connection of the benchmark's own; (0, 0) for the memory store."""
    if db is None:
        return 0, 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (rows,) = conn.execute("SELECT count(*) FROM tasks").fetchone()
        (free,) = conn.execute("PRAGMA freelist_count").fetchone()
        return int(rows), int(free)
    finally:
        conn.close()


def malloc_trim() -> None:
    """Have glibc return the free memory it keeps to the system (``--malloc-trim``): an RSS
    that grows with it untrimmed but stays flat trimmed is the allocator's, not live data."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def size(path: Path | None) -> int:
    try:
        return 0 if path is None else path.stat().st_size
    except FileNotFoundError:
        return 0


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of *ys* over *xs* (0 when *xs* do not vary)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def soak(
    name: str, store: Store, db: Path | None, seconds: float, args: argparse.Namespace
) -> Outcome:
    capacity = int(seconds * args.rate) + 1
    with _lock:
        _runs[:] = bytearray(capacity)
        _late[:] = array("d", bytes(8 * capacity))
        _ticks[0] = 0
    out = Outcome(name)
    sched = tw.Scheduler(store=store, keep_finished=args.keep)
    sched.start()
    for i in range(args.recurring):
        sched.schedule(tick, every=timedelta(seconds=1), id=f"tick-{i}")
    wal = None if db is None else db.with_name(db.name + "-wal")
    start = time.time()
    next_sample = start
    n = 0
    rng = random.Random(1)
    while (now := time.time()) < start + seconds:
        target = min(capacity, int((now - start) * args.rate))
        # a producer that falls behind the rate still stops to sample on time
        while n < target and (n % 100 or time.time() < next_sample):
            sched.schedule(work, n, delay=rng.random())  # the handle is dropped at once
            n += 1
        if time.time() >= next_sample:
            now = time.time()
            gc.collect()
            if args.malloc_trim:
                malloc_trim()
            mem = sqlite_memory() if db is not None else (0, 0)
            rows, free_pages = table_figures(db)
            out.samples.append(
                Sample(
                    at=now - start,
                    scheduled=n,
                    rss=rss_bytes(),
                    objects=len(gc.get_objects()),
                    blocks=sys.getallocatedblocks(),
                    fds=len(os.listdir("/proc/self/fd")),
                    threads=threading.active_count(),
                    db=size(db),
                    wal=size(wal),
                    sqlite_mem=mem[0],
                    page_cache=mem[1],
                    rows=rows,
                    free_pages=free_pages,
                )
            )
            next_sample = now + args.sample
        time.sleep(0.01)
    time.sleep(3)  # the last tasks fall due within a second; let them run
    sched.shutdown(wait=True)
    with _lock:
        out.scheduled = n
        out.seconds = seconds
        out.lost = _runs[:n].count(0)
        out.duplicated = n - out.lost - _runs[:n].count(1)
        out.ticks = _ticks[0]
        out.late = list(_late[:n])
    return out


def report(out: Outcome) -> None:
    half = out.samples[len(out.samples) // 2 :]
    xs = [float(s.scheduled) for s in half]
    late = sorted(out.late)

    def q(p: float) -> float:
        return late[min(len(late) - 1, int(p * len(late)))] * 1000 if late else float("nan")

    last = out.samples[-1]
    rate = out.scheduled / out.seconds
    print(
        f"\n== {out.name}: {out.scheduled:,} tasks scheduled ({rate:,.0f}/s), "
        f"{len(out.samples)} samples"
    )
    print(
        f"  RSS slope      {slope(xs, [float(s.rss) for s in half]):+9.2f} B/task "
        f"(RSS at the end {last.rss / 2**20:.1f} MiB)"
    )
    marks = [out.samples[max(0, len(out.samples) * k // 4 - 1)] for k in (1, 2, 3, 4)]
    quarter = out.samples[3 * len(out.samples) // 4 :]
    last_slope = slope([float(s.scheduled) for s in quarter], [float(s.rss) for s in quarter])
    print(
        "  RSS at 1/4, 1/2, 3/4, end of the run: "
        + ", ".join(f"{s.rss / 2**20:.1f}" for s in marks)
        + f" MiB; slope over the last quarter {last_slope:+.2f} B/task"
    )
    print(
        f"  objects slope  {slope(xs, [float(s.objects) for s in half]):+9.4f} objects/task "
        f"(at the end {last.objects:,})"
    )
    print(
        f"  blocks slope   {slope(xs, [float(s.blocks) for s in half]):+9.4f} blocks/task "
        f"(Python allocator blocks in use, sys.getallocatedblocks(): {last.blocks:,} at the end)"
    )
    print(
        f"  database slope {slope(xs, [float(s.db) for s in half]):+9.2f} B/task "
        f"(db {last.db / 2**20:.2f} MiB, WAL max {max(s.wal for s in out.samples) / 2**20:.2f} "
        f"MiB, at the end {last.wal / 2**20:.2f} MiB)"
    )
    if last.sqlite_mem:
        print(
            f"  SQLite memory  {slope(xs, [float(s.sqlite_mem) for s in half]):+9.2f} B/task "
            f"(sqlite3_status64, all connections: {last.sqlite_mem / 2**20:.2f} MiB at the end, "
            f"page caches {last.page_cache / 2**20:.2f} MiB; at 1/4, 1/2, 3/4, end: "
            + ", ".join(f"{s.sqlite_mem / 2**20:.2f}" for s in marks)
            + " MiB)"
        )
        print(
            "  db, WAL at 1/4, 1/2, 3/4, end: "
            + ", ".join(f"{s.db / 2**20:.2f}/{s.wal / 2**20:.2f}" for s in marks)
            + f" MiB; db slope over the last quarter "
            f"{slope([float(s.scheduled) for s in quarter], [float(s.db) for s in quarter]):+.2f}"
            " B/task"
        )
        peak = max(out.samples, key=lambda s: s.rows)
        print(
            "  tasks in the file at 1/4, 1/2, 3/4, end: "
            + ", ".join(f"{s.rows:,}" for s in marks)
            + f"; most {peak.rows:,} at {peak.at:.0f} s; free pages at the end "
            f"{last.free_pages:,}; file bytes per task at the end "
            f"{last.db / max(1, last.rows):.0f}, at the peak {peak.db / max(1, peak.rows):.0f}"
        )
    print(
        f"  fds {min(s.fds for s in half)}..{max(s.fds for s in half)}, "
        f"threads {min(s.threads for s in half)}..{max(s.threads for s in half)} "
        "(second half)"
    )
    print(f"  lateness p50 {q(0.5):.1f} ms, p99 {q(0.99):.1f} ms")
    print(f"  lost runs {out.lost}, duplicated runs {out.duplicated}, recurring runs {out.ticks}")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def pool_threads() -> int:
    """Live worker threads of thread pools (not the pool's heartbeat and finisher threads, the
    trigger, or an SQLite store's checkpoint thread)."""
    service = (
        "timewheel-heartbeat",
        "timewheel-finisher",
        "timewheel-trigger",
        "timewheel-sqlite-checkpoints",
    )
    return sum(
        t.name.startswith("timewheel-") and t.name not in service for t in threading.enumerate()
    )


def wait_done(jobs: list[tw.Job]) -> None:
    end = time.monotonic() + 120
    while not all(j.done() for j in jobs):
        if time.monotonic() > end:
            raise SystemExit("tasks did not end within 120 s")
        time.sleep(0.005)


def restarts(n: int) -> None:
    """Start, use and shut down *n* schedulers in turn on one SQLite store: fds and threads."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "restarts.db")
        rows: list[tuple[int, int, int]] = []
        gc.collect()
        rows.append((0, open_fds(), threading.active_count()))
        for i in range(1, n + 1):
            with tw.Scheduler(store=store) as sched:
                wait_done([sched.schedule(noop, delay=0) for _ in range(10)])
            if i in (1, 2, 10) or i % 25 == 0 or i == n:
                gc.collect()
                rows.append((i, open_fds(), threading.active_count()))
        store.close()
    print(f"\n== {n} scheduler restarts on one SQLite store (10 tasks each)")
    print("  restarts  fds  threads")
    for i, fds, threads in rows:
        print(f"  {i:8}  {fds:3}  {threads:7}")


def timeouts(n: int) -> None:
    """*n* tasks overrunning a 50 ms timeout (sleeping 200 ms) on one scheduler (SQLite)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "timeouts.db")
        rows: list[tuple[int, int, int, int]] = []
        with tw.Scheduler(store=store) as sched:
            dispatcher = sched.dispatcher
            assert isinstance(dispatcher, tw.ThreadPoolDispatcher)
            time.sleep(0.5)
            rows.append((0, open_fds(), threading.active_count(), pool_threads()))
            done = 0
            while done < n:
                wave = [
                    sched.schedule(nap, 0.2, delay=0, timeout=0.05)
                    for _ in range(min(10, n - done))
                ]
                wait_done(wave)
                done += len(wave)
                if done % 100 == 0 or done == n:
                    time.sleep(0.3)  # the abandoned functions return; their threads end
                    gc.collect()
                    rows.append((done, open_fds(), threading.active_count(), pool_threads()))
            timed_out = sched.statistics().timed_out
        store.close()
    print(f"\n== {n} tasks timing out (50 ms timeout, 200 ms run) on one SQLite scheduler")
    print(f"  timed out: {timed_out}")
    print(f"  {dispatcher.workers} workers; after each hundred tasks and 0.3 s:")
    print("  tasks  fds  threads  worker threads")
    for i, fds, threads, workers in rows:
        print(f"  {i:5}  {fds:3}  {threads:7}  {workers:14}")


def fill_finished(store: Store, db: Path | None, n: int, old: float) -> None:
    """Put *n* tasks in *store* that SUCCEEDED at *old*: inserted, then claimed and finished
    through the store's methods (memory), or ended by one SQL ``UPDATE`` (SQLite: a million
    finishing transactions would take long, and the rows are the same)."""
    for first in range(0, n, 50_000):
        store.insert_many(
            [
                Task(id=f"t{i}", func="soak.noop", due=old + i * 1e-3, created=old)
                for i in range(first, min(n, first + 50_000))
            ]
        )
    if db is not None:
        with sqlite3.connect(db) as conn:
            conn.execute(
                "UPDATE tasks SET state = 'succeeded', version = 1, attempts = 1, updated = ?",
                (int(old * 1e6),),
            )
        conn.close()
        return
    ids = [f"t{i}" for i in range(n)]
    for first in range(0, n, 1000):
        chunk = ids[first : first + 1000]
        for task in store.promote(chunk, old + n):
            claimed = store.claim(
                task.id,
                expected_version=task.version,
                owner="fill",
                lease_expires=old + 60,
                now=old,
            )
            assert claimed is not None
            store.finish(task.id, owner="fill", state=TaskState.SUCCEEDED, now=old)


def prune(n: int, durable: bool) -> None:
    """Retention empties a store of *n* expired finished tasks while another thread writes."""
    name = "SQLiteStore" if durable else "MemoryStore"
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "prune.db"
        store: Store = SQLiteStore(db) if durable else tw.MemoryStore()
        old = time.time() - 3600
        began = time.perf_counter()
        fill_finished(store, db if durable else None, n, old)
        filled = time.perf_counter() - began
        if isinstance(store, SQLiteStore):
            store.checkpoint("TRUNCATE")  # the filling's WAL is not the retention's work
        sched = tw.Scheduler(store=store, keep_finished=60)
        trigger = sched.runtime.trigger
        real_step = trigger.step
        steps: list[float] = []

        cpu: list[float] = []  # the trigger thread's CPU time per step: its work, not waits

        def timed_step(now: float, *, advance: bool = True) -> float | None:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return real_step(now, advance=advance)
            finally:
                steps.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)

        trigger.step = timed_step  # type: ignore[method-assign]
        waits: list[float] = []
        stop = threading.Event()

        def writer() -> None:  # another thread using the store meanwhile: one write at a time
            while not stop.is_set():
                t0 = time.perf_counter()
                store.delete("no-such-task")
                waits.append(time.perf_counter() - t0)
                time.sleep(0.001)

        other = threading.Thread(target=writer, daemon=True)
        retention = sched.runtime.retention
        began = time.perf_counter()
        with sched:
            other.start()
            wal = db.with_name(db.name + "-wal")
            wal_max = 0
            while retention.removed < n:
                time.sleep(0.05)
                wal_max = max(wal_max, size(wal))
            took = time.perf_counter() - began
            stop.set()
            other.join()
        if durable:
            assert isinstance(store, SQLiteStore)
            store.close()
    steps.sort()
    cpu.sort()
    waits.sort()
    print(f"\n== {name}: retention removes {n:,} expired finished tasks")
    print(f"  filled in {filled:.1f} s")
    print(f"  emptied in {took:.1f} s by {len(steps):,} trigger steps")
    print(
        f"  trigger step p50 {steps[len(steps) // 2] * 1e3:.2f} ms, "
        f"p99 {steps[int(len(steps) * 0.99)] * 1e3:.2f} ms, longest {steps[-1] * 1e3:.1f} ms"
    )
    print(
        f"  trigger step CPU time p99 {cpu[int(len(cpu) * 0.99)] * 1e3:.2f} ms, "
        f"longest {cpu[-1] * 1e3:.1f} ms (the wall times above include waiting for a core)"
    )
    print(
        f"  another thread's write: p99 {waits[int(len(waits) * 0.99)] * 1e3:.2f} ms, "
        f"longest {waits[-1] * 1e3:.1f} ms ({len(waits):,} writes)"
    )
    print(
        "  five longest trigger steps (wall): "
        + ", ".join(f"{t * 1e3:.1f}" for t in reversed(steps[-5:]))
        + " ms"
    )
    if durable:
        print(f"  WAL at most {wal_max / 2**20:.2f} MiB (sampled every 50 ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0, help="total run time (half per store)")
    ap.add_argument("--quick", action="store_true", help="1 minute in all")
    ap.add_argument("--rate", type=float, default=500.0, help="one-shot tasks scheduled per second")
    ap.add_argument("--recurring", type=int, default=20, help="schedules running every second")
    ap.add_argument("--keep", type=float, default=10.0, help="keep_finished, seconds")
    ap.add_argument("--sample", type=float, default=2.0, help="seconds between samples")
    ap.add_argument(
        "--malloc-trim",
        action="store_true",
        help="call glibc's malloc_trim(0) before each sample (Linux): RSS without the free "
        "memory the allocator keeps",
    )
    ap.add_argument(
        "--stores",
        default="memory,sqlite",
        help="the stores soaked, comma-separated (memory, sqlite); the time is split between them",
    )
    ap.add_argument("--restarts", type=int, default=0, help="scheduler restarts on one store")
    ap.add_argument("--timeouts", type=int, default=0, help="tasks that time out")
    ap.add_argument("--prune", type=int, default=0, help="finished tasks removed (memory)")
    ap.add_argument("--prune-sqlite", type=int, default=0, help="finished tasks removed (SQLite)")
    args = ap.parse_args()
    # the planned failures would print a traceback each; they are still formatted and counted
    logging.getLogger("timewheel.dispatch").setLevel(logging.CRITICAL)
    if args.restarts or args.timeouts or args.prune or args.prune_sqlite:
        print(f"os.cpu_count()={os.cpu_count()}")
        if args.restarts:
            restarts(args.restarts)
        if args.timeouts:
            timeouts(args.timeouts)
        if args.prune:
            prune(args.prune, durable=False)
        if args.prune_sqlite:
            prune(args.prune_sqlite, durable=True)
        return
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if not stores or set(stores) - {"memory", "sqlite"}:
        raise SystemExit(f"--stores takes memory and/or sqlite, not {args.stores!r}")
    seconds = (60.0 if args.quick else args.minutes * 60) / len(stores)
    outcomes = []
    if "memory" in stores:
        outcomes.append(soak("MemoryStore", tw.MemoryStore(), None, seconds, args))
    if "sqlite" in stores:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "soak.db"
            store = SQLiteStore(db)
            outcomes.append(soak("SQLiteStore", store, db, seconds, args))
            store.close()
    trim = ", malloc_trim before each sample" if args.malloc_trim else ""
    print(
        f"{seconds:.0f} s per store ({args.stores}{trim}), {args.rate:.0f} tasks/s, "
        f"{args.recurring} recurring schedules every second, keep_finished={args.keep} s, "
        f"os.cpu_count()={os.cpu_count()}"
    )
    for out in outcomes:
        report(out)
    if any(o.lost or o.duplicated for o in outcomes):
        raise SystemExit("lost or duplicated runs")


if __name__ == "__main__":
    main()
