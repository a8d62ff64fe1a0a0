"""Benchmark AsyncScheduler side by side with APScheduler 4's async scheduler and asyncio.

Run: ``python benchmarks/bench_async.py --aps4-path DIR [--quick] [--rounds N]``

APScheduler 4 is a pre-release and cannot share an environment with the APScheduler 3 that
``bench_scheduler.py`` compares against, so it is installed into a directory of its own
(``pip install --target DIR "apscheduler>=4.0.0a6"``) and measured in a child process with that
directory first on its path. Without ``--aps4-path`` its columns are left out.

Sections (one run; (a) and (b) in alternating rounds, medians reported):

a. ``await sched.schedule(f, delay=d)`` rate into the memory store, coroutine tasks due in about an
   hour (nothing fires), vs APScheduler 4 ``add_schedule(f, DateTrigger(...))`` (its memory data
   store) and ``loop.call_at`` on the same running loop.
b. end to end: no-op coroutine tasks due now -> done, vs APScheduler 4 ``add_job`` (its memory
   data store and async executor); both with at most 100 at once.
c. real-clock lateness (start minus due) of 10,000 coroutine tasks due over 10 s, all scheduled
   before the first is due, vs plain ``loop.call_at`` callbacks, one after the other on an
   otherwise idle process; once per round, the order alternating, medians reported (on a shared
   host one pair of series mostly measures what else ran meanwhile).
d. bytes per pending coroutine task, 100,000 tasks (tracemalloc, after a ``gc.collect()``).

Instruction counts, which a busy host does not change: ``--piece NAME --n N`` runs one piece of
``await schedule()`` N times on a started scheduler and nothing else, for ``valgrind
--tool=cachegrind --cache-sim=no``; the difference of the totals of two runs (N = 10,000 and
30,000) divided by 20,000 is the cost of one call. Pieces: ``schedule`` (the whole call),
``call_at`` (asyncio's, for scale), ``coroutine`` (awaiting a coroutine that returns at once),
``id`` (a generated id), ``record`` (``MemoryStore.add_pending``), ``wheel`` (the wheel insert),
``place`` (``Trigger.place``: lock, wheel insert, timer wake), ``submit``
(``Runtime.submit_compact``: the option check, the clock, record, placement, count; the id is
taken from a list) and ``handle`` (an ``AsyncJob``, made and
dropped); ``aps4`` is APScheduler 4's ``add_schedule`` as in (a) (with its directory on
``PYTHONPATH``); ``empty`` is the loop around them, to subtract.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from timewheel.aio import AsyncScheduler

COUNTER = [0, 0]  # completions, target
DONE: list[asyncio.Event] = []


async def noop() -> None:
    """The benchmark's task: counts itself, and wakes the waiter at the last one."""
    COUNTER[0] += 1
    if COUNTER[0] == COUNTER[1]:
        DONE[0].set()


def _arm(n: int) -> asyncio.Event:
    COUNTER[0], COUNTER[1] = 0, n
    DONE[:] = [asyncio.Event()]
    return DONE[0]


# -- (a) scheduling rate -----------------------------------------------------------------------------
async def tw_schedule(n: int) -> float:
    async with AsyncScheduler() as sched:
        schedule = sched.schedule
        gc.collect()
        t0 = time.perf_counter()
        for i in range(n):
            await schedule(noop, delay=3600.0 + (i % 1000))
        return (time.perf_counter() - t0) / n * 1e6


async def call_at_schedule(n: int) -> float:
    loop = asyncio.get_running_loop()
    call_at, now = loop.call_at, loop.time()
    handles = []
    gc.collect()
    t0 = time.perf_counter()
    for i in range(n):
        handles.append(call_at(now + 3600.0 + (i % 1000), _nothing))
    took = (time.perf_counter() - t0) / n * 1e6
    for h in handles:
        h.cancel()
    return took


def _nothing() -> None:
    pass


async def aps4_schedule(n: int) -> float:
    from apscheduler import AsyncScheduler as APSAsyncScheduler
    from apscheduler.triggers.date import DateTrigger

    async with APSAsyncScheduler() as sched:
        base = datetime.now(timezone.utc) + timedelta(hours=1)
        gc.collect()
        t0 = time.perf_counter()
        for i in range(n):
            await sched.add_schedule(noop, DateTrigger(base + timedelta(seconds=i % 1000)))
        return (time.perf_counter() - t0) / n * 1e6


# -- (b) end to end ------------------------------------------------------------------------------------
async def tw_end_to_end(n: int) -> float:
    done = _arm(n)
    async with AsyncScheduler(concurrency=100) as sched:
        schedule = sched.schedule
        t0 = time.perf_counter()
        for _ in range(n):
            await schedule(noop, delay=0)
        await asyncio.wait_for(done.wait(), 600)
        return n / (time.perf_counter() - t0)


async def aps4_end_to_end(n: int) -> float:
    from apscheduler import AsyncScheduler as APSAsyncScheduler

    done = _arm(n)
    async with APSAsyncScheduler(max_concurrent_jobs=100) as sched:
        await sched.start_in_background()
        t0 = time.perf_counter()
        for _ in range(n):
            await sched.add_job(noop)
        await asyncio.wait_for(done.wait(), 600)
        rate = n / (time.perf_counter() - t0)
        await sched.stop()
        return rate


# -- (c) lateness ---------------------------------------------------------------------------------------
def _quantiles(late: list[float]) -> dict[str, float]:
    late = sorted(late)

    def at(q: float) -> float:
        return late[min(len(late) - 1, int(q * len(late)))] * 1e3

    return {"p50": at(0.5), "p99": at(0.99), "max": late[-1] * 1e3}


async def tw_lateness(n: int, window: float) -> dict[str, float]:
    late: list[float] = []
    finished = asyncio.Event()

    async def task(due: float) -> None:
        late.append(time.time() - due)
        if len(late) == n:
            finished.set()

    async with AsyncScheduler() as sched:
        start = time.time() + 1.0
        for i in range(n):
            await sched.schedule(task, start + i * window / n, at=start + i * window / n)
        await asyncio.wait_for(finished.wait(), window + 60)
    return _quantiles(late)


async def call_at_lateness(n: int, window: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    late: list[float] = []
    finished = asyncio.Event()

    def callback(due: float) -> None:
        late.append(time.time() - due)
        if len(late) == n:
            finished.set()

    start = time.time() + 1.0
    for i in range(n):
        due = start + i * window / n
        loop.call_at(loop.time() + (due - time.time()), callback, due)
    await asyncio.wait_for(finished.wait(), window + 60)
    return _quantiles(late)


# -- (d) memory ------------------------------------------------------------------------------------------
async def tw_bytes(n: int) -> float:
    async with AsyncScheduler() as sched:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            await sched.schedule(noop, delay=3600.0 + i * 1e-3)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        return used / n


# -- instruction counts by piece (run under cachegrind) --------------------------------------------------
PIECES = (
    "schedule",
    "call_at",
    "coroutine",
    "id",
    "record",
    "wheel",
    "place",
    "submit",
    "handle",
    "aps4",
    "empty",
)


async def _returns(x: int) -> int:
    return x


async def piece(name: str, n: int) -> None:
    """Run one piece of ``await schedule()`` *n* times (see the module docstring)."""
    from timewheel.aio.jobs import AsyncJob

    if name == "aps4":
        from apscheduler import AsyncScheduler as APSAsyncScheduler
        from apscheduler.triggers.date import DateTrigger

        async with APSAsyncScheduler() as aps:
            base = datetime.now(timezone.utc) + timedelta(hours=1)
            gc.collect()
            for i in range(n):
                await aps.add_schedule(noop, DateTrigger(base + timedelta(seconds=i % 1000)))
        return
    async with AsyncScheduler() as sched:
        runtime = sched.runtime
        store, trigger = runtime.store, runtime.trigger
        now = time.time()
        ids = [f"piece-{i}" for i in range(n)]
        loop = asyncio.get_running_loop()
        handles = []
        gc.collect()
        if name == "schedule":
            schedule = sched.schedule
            for i in range(n):
                await schedule(noop, delay=3600.0 + (i % 1000))
        elif name == "call_at":
            call_at, start = loop.call_at, loop.time()
            for i in range(n):
                handles.append(call_at(start + 3600.0 + (i % 1000), _nothing))
        elif name == "coroutine":
            for i in range(n):
                await _returns(i)
        elif name == "id":
            new_id = sched._new_id
            for _ in range(n):
                new_id()
        elif name == "record":
            add = store.add_pending  # type: ignore[attr-defined]
            for i in range(n):
                add(ids[i], noop, (), now + 3600.0 + (i % 1000), now)
        elif name == "wheel":
            wheel_add = trigger.wheel.add
            for i in range(n):
                wheel_add(ids[i], now + 3600.0 + (i % 1000))
        elif name == "place":
            place = trigger.place
            for i in range(n):
                place(ids[i], now + 3600.0 + (i % 1000), now)
        elif name == "submit":
            submit, clock, next_id = runtime.submit_compact, time.time, iter(ids).__next__
            no_options: dict[str, Any] = {}
            for i in range(n):
                submit(store, noop, (), 3600.0 + (i % 1000), no_options, clock, next_id)  # type: ignore[arg-type]
        elif name == "handle":
            for i in range(n):
                AsyncJob(sched, ids[i])
        del handles  # not cancelled one by one: the loop drops them as it closes


# -- APScheduler 4 in a child process ---------------------------------------------------------------------
def _child(what: str, n: int, aps4_path: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([aps4_path, *sys.path])}
    out = subprocess.run(
        [sys.executable, __file__, "--child", what, "--n", str(n)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1]))


def _child_main(what: str, n: int) -> None:
    run: dict[str, Callable[[int], Any]] = {"schedule": aps4_schedule, "e2e": aps4_end_to_end}
    print(json.dumps(asyncio.run(run[what](n))))


# -- the run ----------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--aps4-path", help="a directory holding APScheduler 4 (pip --target)")
    ap.add_argument("--quick", action="store_true", help="small sizes, one round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--piece", choices=PIECES, help="run one piece N times (for cachegrind)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help="how many times --piece runs")
    args = ap.parse_args(argv)
    if args.piece:
        asyncio.run(piece(args.piece, args.n))
        return 0
    if args.child:
        _child_main(args.child, args.n)
        return 0
    quick = args.quick
    rounds = 1 if quick else args.rounds
    n_sched = 10_000 if quick else 100_000
    n_aps_sched = 1_000 if quick else 5_000
    n_e2e = 2_000 if quick else 20_000
    n_aps_e2e = 500 if quick else 2_000
    n_late, window = (1_000, 2.0) if quick else (10_000, 10.0)
    n_mem = 10_000 if quick else 100_000
    aps4 = args.aps4_path

    print(
        f"# bench_async: Python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {'quick' if quick else 'full'}, {rounds} round(s)",
        flush=True,
    )
    a: dict[str, list[float]] = {"timewheel": [], "call_at": [], "aps4": []}
    b: dict[str, list[float]] = {"timewheel": [], "aps4": []}
    c: dict[str, list[dict[str, float]]] = {"timewheel": [], "call_at": []}
    for r in range(rounds):
        a["timewheel"].append(asyncio.run(tw_schedule(n_sched)))
        a["call_at"].append(asyncio.run(call_at_schedule(n_sched)))
        b["timewheel"].append(asyncio.run(tw_end_to_end(n_e2e)))
        if aps4:
            a["aps4"].append(_child("schedule", n_aps_sched, aps4))
            b["aps4"].append(_child("e2e", n_aps_e2e, aps4))
        # (c) once per round, which series goes first alternating
        for which in ("timewheel", "call_at") if r % 2 == 0 else ("call_at", "timewheel"):
            late = tw_lateness if which == "timewheel" else call_at_lateness
            c[which].append(asyncio.run(late(n_late, window)))
        print(
            f"round {r + 1}: a (us/call) "
            + ", ".join(f"{k} {v[-1]:.2f}" for k, v in a.items() if v)
            + "; b (tasks/s) "
            + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in b.items() if v)
            + "; c p99 (ms) "
            + ", ".join(f"{k} {v[-1]['p99']:.2f}" for k, v in c.items()),
            flush=True,
        )
    late_tw = {q: statistics.median(x[q] for x in c["timewheel"]) for q in ("p50", "p99", "max")}
    late_call_at = {q: statistics.median(x[q] for x in c["call_at"]) for q in ("p50", "p99", "max")}
    per_task = asyncio.run(tw_bytes(n_mem))

    med = {k: statistics.median(v) for k, v in a.items() if v}
    e2e = {k: statistics.median(v) for k, v in b.items() if v}
    rows = [
        "",
        f"(a) await schedule(), tasks due in ~1 h, us/call (median of {rounds})",
        f"    timewheel {med['timewheel']:.2f} ({n_sched:,} tasks)",
        f"    loop.call_at {med['call_at']:.2f} ({n_sched:,} handles)",
    ]
    if "aps4" in med:
        rows.append(f"    APScheduler 4 add_schedule {med['aps4']:.1f} ({n_aps_sched:,} schedules)")
    rows += [
        f"(b) end to end, no-op coroutines due now -> done, tasks/s (median of {rounds})",
        f"    timewheel {e2e['timewheel']:,.0f} ({n_e2e:,} tasks)",
    ]
    if "aps4" in e2e:
        rows.append(f"    APScheduler 4 add_job {e2e['aps4']:,.0f} ({n_aps_e2e:,} jobs)")
    rows += [
        f"(c) real-clock lateness, {n_late:,} tasks over {window:g} s, ms p50 / p99 / max "
        f"(medians of {rounds})",
        "    timewheel {p50:.2f} / {p99:.2f} / {max:.2f}".format(**late_tw),
        "    loop.call_at {p50:.2f} / {p99:.2f} / {max:.2f}".format(**late_call_at),
        f"(d) bytes per pending coroutine task ({n_mem:,}): {per_task:.0f}",
        "",
        "goals:",
    ]
    goals: list[tuple[str, str, bool]] = []
    if "aps4" in med:
        ratio = med["aps4"] / med["timewheel"]
        goals.append(("schedule() >= 20x APScheduler 4", f"{ratio:.1f}x", ratio >= 20))
    ratio = med["call_at"] / med["timewheel"]
    goals.append(("schedule() >= 0.5x loop.call_at", f"{ratio:.2f}x", ratio >= 0.5))
    if "aps4" in e2e:
        ratio = e2e["timewheel"] / e2e["aps4"]
        goals.append(("end to end >= 5x APScheduler 4", f"{ratio:.1f}x", ratio >= 5))
    goals.append(
        (
            "p99 lateness <= loop.call_at's",
            f"{late_tw['p99']:.2f} vs {late_call_at['p99']:.2f} ms",
            late_tw["p99"] <= late_call_at["p99"],
        )
    )
    goals.append(("<= 250 bytes per pending task", f"{per_task:.0f} B", per_task <= 250))
    for name, got, met in goals:
        rows.append(f"    {name}: {got} {'yes' if met else 'NO'}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main())
