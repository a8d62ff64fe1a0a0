"""Soak: a scheduler under steady load for minutes, on the memory and the SQLite store.

For each store, a producer schedules one-shot tasks at a steady rate (``--rate`` per second, each
due up to a second later; one in twenty raises), beside ``--recurring`` schedules that run every
second, with a short retention (``--keep`` seconds) so retention and WAL maintenance work during
the run. Every few seconds it samples the process: RSS, Python objects (``gc.get_objects()``),
open file descriptors, threads, and the database and WAL sizes. At the end it prints:

* slopes over the second half of the run (after warm-up), per task scheduled: RSS bytes, Python
  objects, database bytes; a bounded process has slopes near zero;
* lateness (start minus due) p50 and p99 of the one-shot runs;
* lost runs (one-shot tasks scheduled that never ran) and duplicated runs (ran twice): both must
  be zero; and how many runs the recurring schedules made.

Run::

    python benchmarks/bench_soak.py                # 5 minutes (half per store)
    python benchmarks/bench_soak.py --quick        # 1 minute
    python benchmarks/bench_soak.py --minutes 60 --rate 1000
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import random
import statistics
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


@dataclass
class Sample:
    at: float
    scheduled: int
    rss: int
    objects: int
    fds: int
    threads: int
    db: int
    wal: int


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
            out.samples.append(
                Sample(
                    at=now - start,
                    scheduled=n,
                    rss=rss_bytes(),
                    objects=len(gc.get_objects()),
                    fds=len(os.listdir("/proc/self/fd")),
                    threads=threading.active_count(),
                    db=size(db),
                    wal=size(wal),
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
    print(
        f"  objects slope  {slope(xs, [float(s.objects) for s in half]):+9.4f} objects/task "
        f"(at the end {last.objects:,})"
    )
    print(
        f"  database slope {slope(xs, [float(s.db) for s in half]):+9.2f} B/task "
        f"(db {last.db / 2**20:.2f} MiB, WAL max {max(s.wal for s in out.samples) / 2**20:.2f} "
        f"MiB, at the end {last.wal / 2**20:.2f} MiB)"
    )
    print(
        f"  fds {min(s.fds for s in half)}..{max(s.fds for s in half)}, "
        f"threads {min(s.threads for s in half)}..{max(s.threads for s in half)} "
        "(second half)"
    )
    print(f"  lateness p50 {q(0.5):.1f} ms, p99 {q(0.99):.1f} ms")
    print(f"  lost runs {out.lost}, duplicated runs {out.duplicated}, recurring runs {out.ticks}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0, help="total run time (half per store)")
    ap.add_argument("--quick", action="store_true", help="1 minute in all")
    ap.add_argument("--rate", type=float, default=500.0, help="one-shot tasks scheduled per second")
    ap.add_argument("--recurring", type=int, default=20, help="schedules running every second")
    ap.add_argument("--keep", type=float, default=10.0, help="keep_finished, seconds")
    ap.add_argument("--sample", type=float, default=2.0, help="seconds between samples")
    ap.add_argument(
        "--stores",
        default="memory,sqlite",
        help="the stores soaked, comma-separated (memory, sqlite); the time is split between them",
    )
    args = ap.parse_args()
    # the planned failures would print a traceback each; they are still formatted and counted
    logging.getLogger("timewheel.dispatch").setLevel(logging.CRITICAL)
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
    print(
        f"{seconds:.0f} s per store ({args.stores}), {args.rate:.0f} tasks/s, {args.recurring} recurring "
        f"schedules every second, keep_finished={args.keep} s, os.cpu_count()={os.cpu_count()}"
    )
    for out in outcomes:
        report(out)
    if any(o.lost or o.duplicated for o in outcomes):
        raise SystemExit("lost or duplicated runs")


if __name__ == "__main__":
    main()
