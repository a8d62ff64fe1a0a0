"""Benchmark the scheduler core side by side with APScheduler 3, stdlib ``sched`` and asyncio.

Run: ``python benchmarks/bench_scheduler.py [--quick] [--rounds N] [--trace] [--profile]``

Sections (one process; (a), (b) and (d) in alternating rounds, medians reported):

a. ``schedule()`` rate into the memory store, tasks due in an hour (nothing fires), vs
   APScheduler 3 ``add_job`` (date trigger, running ``BackgroundScheduler``), asyncio
   ``loop.call_at`` (loop not running) and ``sched.enterabs``.
b. end-to-end no-op throughput, due now -> SUCCEEDED: timewheel with its thread pool (scheduling
   while the workers run), and with ``InlineDispatcher`` + ``FakeClock``, vs APScheduler's thread
   pool (``misfire_grace_time=None`` so that no job is skipped as missed).
c. bytes per pending task (tracemalloc, after a ``gc.collect()``).
d. real-clock lateness (start minus due) of tasks spread over a window (all enqueued before the
   first is due), one library at a time on an otherwise idle process: timewheel, APScheduler, ``sched`` (a single thread sleeping to the
   exact due time: the floor) and asyncio ``call_at``.

``--profile`` prints the cProfile top entries of ``schedule()`` and of the end-to-end path.
The machine is shared and noisy: treat ratios within ~15 % as noise.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import platform
import pstats
import random
import sched
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from _common import Done
from apscheduler.executors.pool import ThreadPoolExecutor as APSThreadPool
from apscheduler.schedulers.background import BackgroundScheduler

from timewheel.dispatch import InlineDispatcher, ThreadPoolDispatcher
from timewheel.scheduler import Scheduler
from timewheel.task import TaskState
from timewheel.testing import FakeClock

UTC = timezone.utc


def noop(*_: Any) -> None:
    pass


def _aps(workers: int = 10, *, paused: bool = False) -> Any:
    s = BackgroundScheduler(
        executors={"default": APSThreadPool(workers)},
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
        timezone=UTC,
    )
    s.start(paused=paused)
    return s


# -- (a) schedule() rate ---------------------------------------------------------------------------


def rate_timewheel(n: int) -> float:
    with Scheduler() as s:  # started: trigger loop and workers idle, as in an application
        t0 = time.perf_counter()
        for i in range(n):
            s.schedule(noop, delay=3600 + (i % 1000))
        dt = time.perf_counter() - t0
    return dt / n * 1e6


def rate_aps(n: int) -> float:
    s = _aps()
    run_date = datetime.now(UTC) + timedelta(hours=1)
    try:
        t0 = time.perf_counter()
        for i in range(n):
            s.add_job(noop, "date", run_date=run_date + timedelta(seconds=i % 1000))
        dt = time.perf_counter() - t0
    finally:
        s.shutdown(wait=False)
    return dt / n * 1e6


def rate_asyncio(n: int) -> float:
    loop = asyncio.new_event_loop()
    try:
        base = loop.time() + 3600
        t0 = time.perf_counter()
        for i in range(n):
            loop.call_at(base + (i % 1000), noop)
        dt = time.perf_counter() - t0
    finally:
        loop.close()
    return dt / n * 1e6


def rate_sched(n: int) -> float:
    s = sched.scheduler(time.time, time.sleep)
    base = time.time() + 3600
    t0 = time.perf_counter()
    for i in range(n):
        s.enterabs(base + (i % 1000), 0, noop)
    return (time.perf_counter() - t0) / n * 1e6


# -- (b) end-to-end throughput -----------------------------------------------------------------------


def e2e_timewheel_pool(n: int) -> float:
    done = Done(n)
    with Scheduler(dispatcher=ThreadPoolDispatcher()) as s:
        t0 = time.perf_counter()
        for _ in range(n):
            s.schedule(done.hit, delay=0)
        done.wait()
        while s.store.count_by_state().get(TaskState.SUCCEEDED, 0) < n:  # outcomes stored
            time.sleep(0.001)
        dt = time.perf_counter() - t0
    return n / dt


def e2e_timewheel_inline(n: int) -> float:
    clock = FakeClock()
    done = Done(n)
    with Scheduler(clock=clock, dispatcher=InlineDispatcher()) as s:
        t0 = time.perf_counter()
        for _ in range(n):
            s.schedule(done.hit, delay=0)
        clock.advance(0.001)
        dt = time.perf_counter() - t0
        assert done.count == n, done.count
    return n / dt


def e2e_aps(n: int) -> float:
    done = Done(n)
    s = _aps()
    try:
        t0 = time.perf_counter()
        now = datetime.now(UTC)
        for _ in range(n):
            s.add_job(done.hit, "date", run_date=now)
        done.wait()
        dt = time.perf_counter() - t0
    finally:
        s.shutdown(wait=False)
    return n / dt


# -- (c) memory ----------------------------------------------------------------------------------------


def _bytes_per(n: int, make: Callable[[], Any], add: Callable[[Any, int], None]) -> float:
    gc.collect()
    holder = make()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        add(holder, i)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del holder
    return used / n


def mem_timewheel(n: int) -> float:
    clock = FakeClock()

    def make() -> Scheduler:
        return Scheduler(clock=clock, dispatcher=InlineDispatcher()).start()

    def add(s: Scheduler, i: int) -> None:
        s.schedule(noop, delay=3600 + (i % 1000))

    return _bytes_per(n, make, add)


def mem_aps(n: int) -> float:
    run_date = datetime.now(UTC) + timedelta(hours=1)

    def make() -> Any:
        s = BackgroundScheduler(timezone=UTC)  # not started: jobs go straight to the store
        s.start(paused=True)
        return s

    def add(s: Any, i: int) -> None:
        s.add_job(noop, "date", run_date=run_date + timedelta(seconds=i % 1000))

    try:
        return _bytes_per(n, make, add)
    finally:
        gc.collect()


def mem_asyncio(n: int) -> float:
    loop = asyncio.new_event_loop()
    base = loop.time() + 3600
    try:
        return _bytes_per(n, lambda: loop, lambda lp, i: lp.call_at(base + (i % 1000), noop))
    finally:
        loop.close()


def mem_sched(n: int) -> float:
    base = time.time() + 3600
    return _bytes_per(
        n,
        lambda: sched.scheduler(time.time, time.sleep),
        lambda s, i: s.enterabs(base + (i % 1000), 0, noop),
    )


# -- (d) real-clock lateness -----------------------------------------------------------------------------


def _offsets(n: int, window: float, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return sorted(2.0 + rng.random() * window for _ in range(n))  # 2 s to enqueue them all


def _pct(xs: list[float]) -> tuple[float, float, float]:
    xs = sorted(xs)
    k = len(xs)
    return xs[(k - 1) // 2], xs[min(k - 1, int(0.99 * k))], xs[-1]


def late_timewheel(n: int, window: float) -> tuple[float, float, float]:
    out: list[float] = []
    done = Done(n)

    def run(due: float) -> None:
        out.append(time.time() - due)
        done.hit()

    s = Scheduler()  # enqueue before start, as the others do: measure firing, not enqueueing
    base = time.time()
    for off in _offsets(n, window):
        s.schedule(run, base + off, at=base + off)
    with s:
        done.wait(window + 60)
    return _pct(out)


def late_aps(n: int, window: float) -> tuple[float, float, float]:
    out: list[float] = []
    done = Done(n)

    def run(due: float) -> None:
        out.append(time.time() - due)
        done.hit()

    s = _aps(paused=True)
    try:
        base = time.time()
        for off in _offsets(n, window):
            due = base + off
            s.add_job(run, "date", run_date=datetime.fromtimestamp(due, UTC), args=(due,))
        s.resume()
        done.wait(window + 60)
    finally:
        s.shutdown(wait=False)
    return _pct(out)


def late_sched(n: int, window: float) -> tuple[float, float, float]:
    out: list[float] = []
    s = sched.scheduler(time.time, time.sleep)
    base = time.time()
    for off in _offsets(n, window):
        due = base + off
        s.enterabs(due, 0, lambda d=due: out.append(time.time() - d))
    s.run()
    return _pct(out)


def late_asyncio(n: int, window: float) -> tuple[float, float, float]:
    out: list[float] = []
    loop = asyncio.new_event_loop()
    try:
        fut: asyncio.Future[None] = loop.create_future()
        base = loop.time()

        def run(due: float) -> None:
            out.append(loop.time() - due)
            if len(out) == n:
                fut.set_result(None)

        for off in _offsets(n, window):
            loop.call_at(base + off, run, base + off)
        loop.run_until_complete(fut)
    finally:
        loop.close()
    return _pct(out)


# -- trace: where the lateness and the schedule() time go ---------------------------------------------------


def trace_lateness(n: int, window: float) -> dict[str, tuple[float, float, float]]:
    """The lateness of (d) split at the hand-off, with one worker: due -> promoted by the
    trigger loop -> pulled from the ready queue by the worker -> running (ms p50/p99/max)."""
    promoted: dict[str, float] = {}
    pulled: dict[str, float] = {}
    started: dict[str, float] = {}
    done = Done(n)
    s = Scheduler(dispatcher=ThreadPoolDispatcher(workers=1))
    promote, pull = s.runtime.trigger.promote, s.ready_queue.pull

    def traced_promote(ids: Any, now: float) -> None:
        t = time.time()
        promoted.update(dict.fromkeys(ids, t))
        promote(ids, now)

    def traced_pull(*a: Any, **k: Any) -> Any:
        task = pull(*a, **k)
        if task is not None:
            pulled[task.id] = time.time()
        return task

    s.runtime.trigger.promote = traced_promote  # type: ignore[method-assign]
    s.ready_queue.pull = traced_pull  # type: ignore[method-assign]
    ids: list[str] = []

    def run(k: int) -> None:
        started[ids[k]] = time.time()
        done.hit()

    base = time.time()
    dues = [base + off for off in _offsets(n, window)]
    ids += [s.schedule(run, k, at=due).id for k, due in enumerate(dues)]
    with s:
        done.wait(window + 60)

    def ms(xs: list[float]) -> tuple[float, float, float]:
        return tuple(x * 1e3 for x in _pct(xs))  # type: ignore[return-value]

    return {
        "due -> promoted (trigger loop)": ms(
            [promoted[i] - d for i, d in zip(ids, dues, strict=True)]
        ),
        "promoted -> pulled (hand-off)": ms([pulled[i] - promoted[i] for i in ids]),
        "pulled -> running": ms([started[i] - pulled[i] for i in ids]),
        "due -> running": ms([started[i] - d for i, d in zip(ids, dues, strict=True)]),
    }


def trace_schedule(n: int) -> dict[str, float]:
    """µs per call of the pieces of the schedule() fast path, each timed alone."""
    from timewheel.scheduler import Job
    from timewheel.stores.memory import MemoryStore
    from timewheel.wheel import TimingWheel

    s = Scheduler()
    store, lock = MemoryStore(), threading.RLock()
    wheel: TimingWheel[str] = TimingWheel(start=time.time())
    keys = [f"x{i}" for i in range(n)]
    base = time.time() + 3600

    def per(fn: Callable[[], object]) -> float:
        gc.collect()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) / n * 1e6

    def record() -> None:
        for k in keys:
            store.add_pending(k, noop, (), base, 0.0)

    def wheel_add() -> None:
        for i, k in enumerate(keys):
            wheel.add(k, base + i % 1000)

    def locked() -> None:
        for _ in keys:
            with lock:
                pass

    return {
        "compact record (MemoryStore.add_pending)": per(record),
        "wheel insert (TimingWheel.add)": per(wheel_add),
        "a lock around it": per(locked),
        "the Job handle": per(lambda: [Job(s.runtime, "x") for _ in keys]),
        "the generated id": per(lambda: [s._new_id() for _ in keys]),
        "the clock": per(lambda: [s._time() for _ in keys]),
        "all of schedule()": per(lambda: [s.schedule(noop, delay=3600) for _ in keys]),
        "schedule() with the GC off": _gc_off(
            lambda: per(lambda: [s.schedule(noop, delay=3600) for _ in keys])
        ),
    }


def _gc_off(fn: Callable[[], float]) -> float:
    gc.disable()
    try:
        return fn()
    finally:
        gc.enable()


# -- profile ------------------------------------------------------------------------------------------------


def profile(n: int) -> None:
    def top(title: str, fn: Callable[[], object]) -> None:
        pr = cProfile.Profile()
        pr.enable()
        fn()
        pr.disable()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(14)
        print(f"\n--- cProfile: {title} (sorted by own time) ---")
        lines = buf.getvalue().splitlines()
        start = next(i for i, ln in enumerate(lines) if "ncalls" in ln)
        print("\n".join(lines[start - 1 : start + 15]))

    clock = FakeClock()
    s = Scheduler(clock=clock, dispatcher=InlineDispatcher()).start()
    top(f"schedule() x {n}", lambda: [s.schedule(noop, delay=3600) for _ in range(n)])

    c2 = FakeClock()
    s2 = Scheduler(clock=c2, dispatcher=InlineDispatcher()).start()

    def e2e() -> None:
        for _ in range(n):
            s2.schedule(noop, delay=0)
        c2.advance(0.001)

    top(f"end to end, inline x {n}", e2e)

    done = Done(n)
    with Scheduler() as s3:
        # the pool's workers run in threads cProfile does not see: profile the trigger side
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(n):
            s3.schedule(done.hit, delay=0)
        done.wait()
        pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(10)
    print(f"\n--- cProfile: schedule + wait, thread pool x {n} (main thread only) ---")
    lines = buf.getvalue().splitlines()
    start = next(i for i, ln in enumerate(lines) if "ncalls" in ln)
    print("\n".join(lines[start - 1 : start + 11]))


# -- main ---------------------------------------------------------------------------------------------------


def _goal(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, a 2 s lateness window")
    ap.add_argument("--profile", action="store_true", help="print cProfile top entries")
    ap.add_argument(
        "--trace", action="store_true", help="also split schedule() and the lateness into pieces"
    )
    ap.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds of (a), (b), (d): medians shown"
    )
    args = ap.parse_args(argv)
    n_rate = 20_000 if args.quick else 100_000
    n_e2e = 5_000 if args.quick else 20_000
    n_mem = 20_000 if args.quick else 100_000
    n_late, window = (2_000, 2.0) if args.quick else (10_000, 10.0)
    rounds = max(1, args.rounds)

    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"{sys.platform}; quick={args.quick}; rounds={rounds} (median, [min-max])"
    )
    rows: list[str] = []

    def alternate(fns: dict[str, Callable[[], Any]]) -> dict[str, list[Any]]:
        """Each function once per round, in turn, so that a slow spell of the machine hits
        every library alike."""
        out: dict[str, list[Any]] = {k: [] for k in fns}
        for _ in range(rounds):
            for k, fn in fns.items():
                out[k].append(fn())
        return out

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    # (a)
    rate_runs = alternate(
        {
            "timewheel schedule()": lambda: rate_timewheel(n_rate),
            "APScheduler add_job": lambda: rate_aps(n_rate),
            "asyncio call_at": lambda: rate_asyncio(n_rate),
            "sched.enterabs": lambda: rate_sched(n_rate),
        }
    )
    rate = {k: med(v) for k, v in rate_runs.items()}
    tw = rate["timewheel schedule()"]
    rows.append(f"\n(a) scheduling {n_rate:,} tasks due in ~1 h (us per call, lower is better)")
    for k, v in rate.items():
        lo, hi = min(rate_runs[k]), max(rate_runs[k])
        rows.append(
            f"  {k:28s} {v:9.2f} us [{lo:.2f}-{hi:.2f}]   timewheel is {v / tw:6.2f}x as fast"
        )
    per_round_aps = [
        a / t
        for a, t in zip(
            rate_runs["APScheduler add_job"], rate_runs["timewheel schedule()"], strict=True
        )
    ]
    per_round_aio = [
        a / t
        for a, t in zip(
            rate_runs["asyncio call_at"], rate_runs["timewheel schedule()"], strict=True
        )
    ]
    vs_aps, vs_aio = med(per_round_aps), med(per_round_aio)
    rows.append(
        f"  goal >= 20x APScheduler: {vs_aps:.1f}x (rounds {', '.join(f'{x:.1f}' for x in per_round_aps)}) "
        f"{_goal(vs_aps >= 20)}"
    )
    rows.append(
        f"  goal >= 1x asyncio call_at: {vs_aio:.2f}x (rounds {', '.join(f'{x:.2f}' for x in per_round_aio)}) "
        f"{_goal(vs_aio >= 1)}"
    )

    # (b)
    e2e_runs = alternate(
        {
            "timewheel thread pool": lambda: e2e_timewheel_pool(n_e2e),
            "timewheel inline+FakeClock": lambda: e2e_timewheel_inline(n_e2e),
            "APScheduler thread pool": lambda: e2e_aps(n_e2e),
        }
    )
    e2e = {k: med(v) for k, v in e2e_runs.items()}
    aps = e2e["APScheduler thread pool"]
    rows.append(
        f"\n(b) end to end, {n_e2e:,} no-op tasks due now -> done (tasks/s, higher is better)"
    )
    for k, v in e2e.items():
        lo, hi = min(e2e_runs[k]), max(e2e_runs[k])
        rows.append(f"  {k:28s} {v:11,.0f}/s [{lo:,.0f}-{hi:,.0f}]   {v / aps:6.2f}x APScheduler")
    per_round = [
        t / a
        for t, a in zip(
            e2e_runs["timewheel thread pool"], e2e_runs["APScheduler thread pool"], strict=True
        )
    ]
    r = med(per_round)
    rows.append(
        f"  goal >= 2x APScheduler (thread pools): {r:.2f}x (rounds {', '.join(f'{x:.2f}' for x in per_round)}) "
        f"{_goal(r >= 2)}"
    )

    # (c)
    mem = {
        "timewheel": mem_timewheel(n_mem),
        "APScheduler": mem_aps(n_mem),
        "asyncio call_at": mem_asyncio(n_mem),
        "sched": mem_sched(n_mem),
    }
    rows.append(f"\n(c) bytes per pending task ({n_mem:,} tasks, tracemalloc)")
    for k, v in mem.items():
        rows.append(f"  {k:28s} {v:9.0f} B")
    rows.append(f"  goal <= 250 B: {mem['timewheel']:.0f} B {_goal(mem['timewheel'] <= 250)}")

    # (d)
    late_runs = alternate(
        {
            "timewheel": lambda: late_timewheel(n_late, window),
            "APScheduler": lambda: late_aps(n_late, window),
            "sched (floor)": lambda: late_sched(n_late, window),
            "asyncio call_at": lambda: late_asyncio(n_late, window),
        }
    )
    rows.append(
        f"\n(d) lateness of {n_late:,} tasks due over {window:g} s, idle process "
        "(ms: p50 / p99 / max, medians of the rounds; p99 of each round in brackets)"
    )
    for k, runs in late_runs.items():
        p50, p99, mx = (med([x[i] for x in runs]) * 1e3 for i in range(3))
        each = ", ".join(f"{x[1] * 1e3:.2f}" for x in runs)
        rows.append(f"  {k:28s} {p50:8.3f} {p99:8.3f} {mx:8.3f}   [{each}]")
    twp99 = med([x[1] for x in late_runs["timewheel"]])
    aiop99 = med([x[1] for x in late_runs["asyncio call_at"]])
    rows.append(
        f"  goal p99 <= asyncio call_at p99: {twp99 * 1e3:.3f} vs {aiop99 * 1e3:.3f} ms "
        f"{_goal(twp99 <= aiop99)}"
    )
    print("\n".join(rows))

    if args.trace:
        print(f"\n(trace) schedule() fast path, piece by piece ({n_rate:,} calls each, us/call)")
        for k, v in trace_schedule(n_rate).items():
            print(f"  {k:42s} {v:7.2f}")
        print("\n(trace) lateness of (d) split at the hand-off, one worker (ms p50 / p99 / max)")
        for k, (p50, p99, mx) in trace_lateness(n_late, window).items():
            print(f"  {k:32s} {p50:8.3f} {p99:8.3f} {mx:8.3f}")
    if args.profile:
        profile(n_e2e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
