"""The midnight herd: N recurring schedules at ``0 0 * * *`` all firing at the same instant.

Run: ``python benchmarks/bench_herd.py [--schedules N] [--workers 1,2,4,8] [--quick]``

Sections (one run, same machine, same moment):

a. create N schedules ``cron="0 0 * * *"`` (distinct ids, a no-op module-level function) on a
   scheduler with the memory store, at 23:00 (``FakeClock``): schedules/s; side by side with
   APScheduler 3 ``add_job(CronTrigger(hour=0, minute=0))`` on a started, paused scheduler (jobs go
   to its memory job store) and ``heapq.heappush`` of N ``(due, id)`` timers (the floor).
b. look-ahead at 23:00: ``sched.upcoming(2 h, bucket="minute")`` shows the hot bucket (N at 00:00).
c. trigger: the midnight tick alone (``FakeClock`` stepped to a hair before midnight, then timed
   to midnight, with a dispatcher that runs nothing): every head instance PENDING -> READY and its
   successor for the next night materialized. The ready queue is bounded (``ready_capacity``,
   10,000): the rest wait as READY rows in the store and are refilled as workers drain. Measured
   at the ``--trigger-sizes`` (each a fresh scheduler) and at N when N is among them or with
   ``--full-trigger``; the per-schedule cost is what to extrapolate from. Side by side: APScheduler
   3 with N ``CronTrigger`` jobs due at the same real second and an executor that runs nothing
   (time until every job is submitted and rescheduled for the next day), and a heap that pops the
   N due timers and pushes their successors (the floor).
d. drain on the real clock, for each W in ``--workers``:
   - the recurring herd itself: ``--recurring`` schedules ``0 0 * * *`` on a scheduler whose clock
     is the system clock shifted so that midnight falls a second after ``start()`` (a
     ``SystemClock`` plus an offset: real sleeps, real threads, only the wall-clock reading is
     moved). Time from midnight to all instances SUCCEEDED includes the trigger work above,
     which competes with the workers for the GIL;
   - a one-shot proxy: N ``at=``-scheduled tasks all due at the same real instant (no recurring
     bookkeeping: the dispatch path alone), vs APScheduler 3 date jobs due at one instant with its
     thread pool of W workers (``misfire_grace_time=None`` so none is dropped as missed).

The trigger step is profiled with cProfile at ``--profile-size`` schedules and reported per fired
schedule. The machine is shared and noisy: treat ratios within ~15 % as noise.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import heapq
import inspect
import io
import math
import platform
import pstats
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from _common import Done
from apscheduler.executors.base import BaseExecutor
from apscheduler.executors.pool import ThreadPoolExecutor as APSThreadPool
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from timewheel.clock import SystemClock, to_datetime
from timewheel.dispatch import NullDispatcher, ThreadPoolDispatcher
from timewheel.scheduler import Scheduler
from timewheel.task import Task, TaskState
from timewheel.testing import FakeClock
from timewheel.trigger import Trigger

UTC = timezone.utc
DAY = 86400.0
# A fixed midnight for the FakeClock sections: 2026-03-02T00:00:00Z.
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC).timestamp()


def noop() -> None:
    """The herd's task: does nothing (module-level, so any store could keep it by name)."""


# -- helpers -----------------------------------------------------------------------------------


class ShiftedClock(SystemClock):
    """The system clock read ``offset`` seconds ahead: real waits and monotonic time, only the
    wall-clock instant is moved (so a cron midnight can fall a second from now)."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def time(self) -> float:
        return time.time() + self.offset

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)


class NullAPSExecutor(BaseExecutor):  # type: ignore[misc]
    """An APScheduler executor that accepts jobs and runs nothing (to time its trigger alone)."""

    def _do_submit_job(self, job: Any, run_times: Any) -> None:
        pass


def _herd_scheduler(n: int, clock: Any, dispatcher: Any) -> Scheduler:
    s = Scheduler(clock=clock, dispatcher=dispatcher)
    for i in range(n):
        s.schedule(noop, cron="0 0 * * *", id=f"herd-{i}")
    return s


def _wait_succeeded(s: Scheduler, n: int, bound: float) -> float:
    """Poll the store until *n* tasks are SUCCEEDED; the real time when they were."""
    end = time.monotonic() + bound
    while s.store.count_by_state().get(TaskState.SUCCEEDED, 0) < n:
        if time.monotonic() > end:
            raise RuntimeError(f"herd not drained after {bound} s: {s.store.count_by_state()}")
        time.sleep(0.002)
    return time.time()


def _aps(executor: Any, *, misfire: int | None = None) -> Any:
    s = BackgroundScheduler(
        executors={"default": executor},
        job_defaults={"misfire_grace_time": misfire, "coalesce": False, "max_instances": 1},
        timezone=UTC,
    )
    s.start(paused=True)  # jobs go straight to the job store; nothing fires until resume()
    return s


class Overran(RuntimeError):
    """Setup took longer than the lead planned before the shared due instant."""


def _retry(f: Callable[[int, int, float], float], n: int, workers: int) -> float:
    """Run *f* with a lead factor, doubling it when the setup overran the planned instant."""
    for lead in (1.0, 2.0, 4.0):
        try:
            return f(n, workers, lead)
        except Overran:
            gc.collect()
    raise RuntimeError(f"{f.__name__}: setup overran its planned instant three times")


# -- (a) creation --------------------------------------------------------------------------------


def create_timewheel(n: int) -> tuple[float, Scheduler, FakeClock]:
    clock = FakeClock(MIDNIGHT - 3600)  # 23:00
    gc.collect()
    t0 = time.perf_counter()
    s = _herd_scheduler(n, clock, NullDispatcher())
    dt = time.perf_counter() - t0
    s.start()
    return dt, s, clock


def create_heap(n: int) -> float:
    heap: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    for i in range(n):
        heapq.heappush(heap, (MIDNIGHT, f"herd-{i}"))
    return time.perf_counter() - t0


# -- (c) trigger ---------------------------------------------------------------------------------


def trigger_timewheel(n: int) -> tuple[float, float, dict[str, int], int, int]:
    """(seconds of the midnight tick, seconds of the creation, states after, ready depth,
    successors due the next midnight)."""
    dt_create, s, clock = create_timewheel(n)
    clock.advance_to(MIDNIGHT - 0.001)  # cascades down the wheel levels happen here, untimed
    gc.collect()
    t0 = time.perf_counter()
    clock.advance_to(MIDNIGHT)
    dt = time.perf_counter() - t0
    states = {k.value: v for k, v in s.store.count_by_state().items()}
    depth = len(s.ready_queue)
    nxt = dict(s.upcoming(DAY + 60, bucket="minute")).get(to_datetime(MIDNIGHT + DAY), 0)
    s.shutdown(wait=False)
    return dt, dt_create, states, depth, nxt


def aps_create_and_trigger(n: int, lead: float = 1.0) -> tuple[float, float]:
    """APScheduler 3: (seconds to add N cron jobs, seconds for them all to fire).

    The jobs use ``CronTrigger(hour=H, minute=M, second=S)``, the same trigger class with the
    same kind of fixed fields as ``hour=0, minute=0``, aimed at a real instant a few seconds
    after the adds so that they can fire in this run. The executor runs nothing: the firing
    time is from that instant until every job was submitted and moved to the next day.
    """
    probe = _aps(NullAPSExecutor())  # calibrate the add rate, to aim the instant
    k = min(n, 1000)
    t0 = time.perf_counter()
    for i in range(k):
        probe.add_job(noop, CronTrigger(hour=0, minute=0, timezone=UTC), id=f"probe-{i}")
    per_add = (time.perf_counter() - t0) / k
    probe.shutdown(wait=False)
    s = _aps(NullAPSExecutor())
    try:
        store = s._lookup_jobstore("default")
        ahead = lead * (1.3 * n * per_add + 2.0)
        fire = datetime.fromtimestamp(math.ceil(time.time() + ahead), UTC)
        gc.collect()
        t0 = time.perf_counter()
        for i in range(n):
            trig = CronTrigger(hour=fire.hour, minute=fire.minute, second=fire.second, timezone=UTC)
            s.add_job(noop, trig, id=f"herd-{i}")
        t_add = time.perf_counter() - t0
        if datetime.now(UTC) >= fire:
            raise Overran
        s.resume()
        fire_ts = fire.timestamp()
        # Its memory store keeps [(job, timestamp)] sorted; a job's own next_run_time changes
        # before it is moved, so watch the stored timestamp of the head, not get_next_run_time().
        jobs: list[tuple[Any, float]] = store._jobs
        while jobs[0][1] <= fire_ts:
            time.sleep(0.001)
        return t_add, time.time() - fire_ts
    finally:
        s.shutdown(wait=False)


def trigger_heap(n: int) -> float:
    heap = [(MIDNIGHT, f"herd-{i}") for i in range(n)]
    heapq.heapify(heap)
    gc.collect()
    t0 = time.perf_counter()
    due: list[str] = []
    while heap and heap[0][0] <= MIDNIGHT:
        _, tid = heapq.heappop(heap)
        due.append(tid)
    for tid in due:
        heapq.heappush(heap, (MIDNIGHT + DAY, tid))
    return time.perf_counter() - t0


# -- (d) drain -----------------------------------------------------------------------------------


def drain_recurring(n: int, workers: int) -> tuple[float, float]:
    """(seconds from midnight to all SUCCEEDED, lateness of the first start in seconds)."""
    clock = ShiftedClock()
    clock.offset = (MIDNIGHT - 3600) - time.time()  # 23:00 while the schedules are created
    s = _herd_scheduler(n, clock, ThreadPoolDispatcher(workers))
    clock.offset = (MIDNIGHT - 1.0) - time.time()  # midnight is one second from now
    with s:
        end = _wait_succeeded(s, n, bound=600 + n / 50)
        drained = end + clock.offset - MIDNIGHT
        first = s.statistics().lateness_p50  # a proxy: median start lateness over the herd
    return drained, first or 0.0


def _retry2(f: Callable[[int, float], tuple[float, float]], n: int) -> tuple[float, float]:
    for lead in (1.0, 2.0, 4.0):
        try:
            return f(n, lead)
        except Overran:
            gc.collect()
    raise RuntimeError(f"{f.__name__}: setup overran its planned instant three times")


def drain_oneshot(n: int, workers: int, lead: float = 1.0) -> float:
    """Seconds from the shared due instant to the last of *n* one-shot completions."""
    done = Done(n)
    s = Scheduler(dispatcher=ThreadPoolDispatcher(workers))
    t_at = time.time() + lead * (n * 30e-6 + 1.0)  # schedule() is ~10-20 us: room for all
    for _ in range(n):
        s.schedule(done.hit, at=t_at)
    if time.time() >= t_at:
        s.shutdown(wait=False)
        raise Overran
    with s:
        done.wait(600 + n / 50)
        _wait_succeeded(s, n, bound=600)  # outcomes stored too
    return done.last - t_at


def drain_aps(n: int, workers: int, lead: float = 1.0) -> float:
    done = Done(n)
    s = _aps(APSThreadPool(workers))
    try:
        t_at = time.time() + lead * (n * 60e-6 + 1.0)  # add_job(date) is ~40 us
        run_date = datetime.fromtimestamp(t_at, UTC)
        for _ in range(n):
            s.add_job(done.hit, "date", run_date=run_date)
        if time.time() >= t_at:
            raise Overran
        s.resume()
        done.wait(600 + n / 50)
    finally:
        s.shutdown(wait=False)
    return done.last - t_at


# -- profile -------------------------------------------------------------------------------------


def _watch() -> list[tuple[str, Callable[[str, int, str], bool]]]:
    """(label, matcher on a pstats key) for the costs worth reporting per fired schedule."""
    from croniter import croniter

    from timewheel import recurring, rules
    from timewheel.ready import ReadyQueue
    from timewheel.stores.memory import MemoryStore

    def fn(f: Any) -> Callable[[str, int, str], bool]:
        code = inspect.unwrap(f).__code__
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        return lambda file, line, name: (file, line, name) == key

    def comp_in(f: Any) -> Callable[[str, int, str], bool]:
        lines, first = inspect.getsourcelines(f)
        file = inspect.getsourcefile(f)
        last = first + len(lines)
        return lambda fl, ln, nm: fl == file and nm == "<listcomp>" and first <= ln < last

    R, T = recurring.Recurring, Trigger
    return [
        ("Trigger.fire", fn(T.fire)),
        ("Recurring.fire", fn(R.fire)),
        ("  Recurring.rule (rule cache)", fn(R.rule)),
        ("    scan of all cached rules", comp_in(R.rule)),
        ("    rule_from_spec (cache miss)", fn(rules.rule_from_spec)),
        ("  plan_misfires", fn(rules.plan_misfires)),
        ("    CronRule.next_after", fn(rules.CronRule.next_after)),
        ("  croniter() constructions", fn(croniter.__init__)),
        ("  croniter._expand (parsing)", fn(croniter._expand)),  # type: ignore[attr-defined]
        ("  Recurring._overlap", fn(R._overlap)),
        ("    MemoryStore.tasks(state, sid)", fn(MemoryStore.tasks)),
        ("  Recurring._instance", fn(R._instance)),
        ("  MemoryStore.find", fn(MemoryStore.find)),
        ("  MemoryStore.get_schedule", fn(MemoryStore.get_schedule)),
        ("MemoryStore.promote", fn(MemoryStore.promote)),
        ("Task.evolve", fn(Task.evolve)),
        ("Trigger.index (successors)", fn(T.index)),
        ("ReadyQueue.put", fn(ReadyQueue.put)),
    ]


def profile_trigger(n: int) -> list[str]:
    _, s, clock = create_timewheel(n)
    clock.advance_to(MIDNIGHT - 0.001)
    pr = cProfile.Profile()
    pr.enable()
    clock.advance_to(MIDNIGHT)
    pr.disable()
    s.shutdown(wait=False)
    out = [f"\n--- cProfile: the midnight tick, {n:,} schedules (per fired schedule) ---"]
    st = pstats.Stats(pr)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    out.append(
        f"  total own time {total:.2f} s under the profiler = {total / n * 1e6:,.0f} us each"
    )
    out.append(
        f"  {'function':34s} {'calls/sched':>11s} {'cum us/sched':>13s} {'own us/sched':>13s}"
    )
    for label, match in _watch():
        calls, tot, cum = 0, 0.0, 0.0
        for (fname, line, func), (_cc, nc, tt, ct, _callers) in raw.items():
            if match(fname, line, func):
                calls, tot, cum = calls + nc, tot + tt, cum + ct
        if calls:
            out.append(
                f"  {label:34s} {calls / n:11.2f} {cum / n * 1e6:13.1f} {tot / n * 1e6:13.1f}"
            )
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(12)
    lines = buf.getvalue().splitlines()
    start = next(i for i, ln in enumerate(lines) if "ncalls" in ln)
    out.append("\n  top own time:")
    out.extend("  " + ln[:150] for ln in lines[start : start + 13])
    return out


# -- main ----------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def _fmt_rate(n: int, seconds: float) -> str:
    return f"{seconds:9.3f} s {n / seconds:12,.0f}/s {seconds / n * 1e6:9.2f} us"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--schedules", type=int, default=None, help="herd size N (default 100,000)")
    ap.add_argument("--workers", default="1,2,4,8", help="worker counts for the drain")
    ap.add_argument("--quick", action="store_true", help="N=10,000 and smaller side sizes")
    ap.add_argument(
        "--trigger-sizes",
        default=None,
        help="herd sizes at which the midnight tick is timed (default 2000,8000; quick 1000,2500)",
    )
    ap.add_argument("--full-trigger", action="store_true", help="also time the tick at N")
    ap.add_argument(
        "--recurring",
        type=int,
        default=None,
        help="schedules in the real-clock recurring drain (default 3,000; quick 1,000)",
    )
    ap.add_argument("--profile-size", type=int, default=None, help="schedules profiled (2,000)")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile section")
    args = ap.parse_args(argv)
    n = args.schedules or (10_000 if args.quick else 100_000)
    workers = _ints(args.workers)
    sizes = _ints(args.trigger_sizes or ("1000,2500" if args.quick else "2000,8000"))
    if args.full_trigger and n not in sizes:
        sizes.append(n)
    n_rec = args.recurring or (1_000 if args.quick else 3_000)
    n_prof = args.profile_size or (1_000 if args.quick else 2_000)
    began = time.perf_counter()

    print(
        f"python {platform.python_version()} on {platform.machine()}, {sys.platform}; "
        f"N={n:,} workers={workers} quick={args.quick}"
    )
    print(f"command: python benchmarks/bench_herd.py {' '.join(argv or sys.argv[1:])}".rstrip())
    rows: list[str] = []

    # (a) + (b)
    dt_tw, s, _clock = create_timewheel(n)
    t0 = time.perf_counter()
    look = s.upcoming(2 * 3600, bucket="minute")
    dt_look = time.perf_counter() - t0
    s.shutdown(wait=False)
    del s, _clock
    gc.collect()
    dt_aps, t_aps = _retry2(aps_create_and_trigger, n)
    dt_heap = create_heap(n)
    rows.append(f"\n(a) create {n:,} schedules '0 0 * * *' (seconds, rate, us each)")
    rows.append(f"  {'timewheel schedule(cron=)':34s} {_fmt_rate(n, dt_tw)}")
    rows.append(f"  {'APScheduler add_job(CronTrigger) *':34s} {_fmt_rate(n, dt_aps)}")
    rows.append(f"  {'heapq.heappush (floor)':34s} {_fmt_rate(n, dt_heap)}")
    rows.append(
        f"  timewheel is {dt_aps / dt_tw:.2f}x as fast as APScheduler, "
        f"{dt_tw / dt_heap:,.0f}x slower than heappush"
    )
    rows.append(
        "  * CronTrigger(hour=H, minute=M, second=S) aimed a few seconds ahead, to fire in (c); "
        "same cost as hour=0, minute=0"
    )
    rows.append(
        f"\n(b) look-ahead at 23:00: sched.upcoming(7200, bucket='minute') took "
        f"{dt_look * 1e3:.2f} ms"
    )
    for start, count in look:
        hot = "   <- the hot bucket" if count == n else ""
        rows.append(f"  {start.isoformat()}  {count:>10,}{hot}")
    print("\n".join(rows))
    rows = []

    # (c)
    print(
        "\n(c) the midnight tick: all heads PENDING -> READY + next night's successors "
        "(FakeClock, nothing runs)"
    )
    print(
        f"  {'schedules':>10s} {'tick s':>9s} {'us/sched':>9s} {'create us':>10s} "
        f"{'READY':>8s} {'in queue':>9s} {'next 00:00':>11s}"
    )
    per: dict[int, float] = {}
    for m in sizes:
        dt, dtc, states, depth, nxt = trigger_timewheel(m)
        per[m] = dt / m
        print(
            f"  {m:10,} {dt:9.2f} {dt / m * 1e6:9.1f} {dtc / m * 1e6:10.1f} "
            f"{states.get('ready', 0):8,} {depth:9,} {nxt:11,}",
            flush=True,
        )
    ms = sorted(per)
    big = ms[-1]
    if len(ms) >= 2:
        a = ms[0]
        growth = per[big] / per[a]
        shape = "superlinear" if growth > 1.25 else "about linear"
        print(f"  per-schedule cost grows {growth:.2f}x from {a:,} to {big:,} schedules ({shape})")
        if n not in per:
            # cost(m) = c1*m + c2*m^2 through the two ends, extrapolated to N
            c2 = (per[big] - per[a]) / (big - a)
            est = max((per[a] + c2 * (n - a)) * n, per[big] * n)
            print(
                f"  extrapolated tick at N={n:,}: ~{est:,.0f} s "
                "(c1*N + c2*N^2 fit; --full-trigger measures it)"
            )
    t_heap = trigger_heap(n)
    tw_label = "timewheel tick" if big == n else f"timewheel tick (at {big:,})"
    print(f"\n  side by side, N={n:,} (seconds, us per schedule)")
    print(f"  {tw_label:34s} {per[big] * big:9.3f} s {per[big] * 1e6:9.2f} us")
    print(f"  {'APScheduler cron, null executor':34s} {t_aps:9.3f} s {t_aps / n * 1e6:9.2f} us")
    print(f"  {'heapq pop N + push N (floor)':34s} {t_heap:9.3f} s {t_heap / n * 1e6:9.2f} us")
    print(
        f"  per schedule, timewheel takes {per[big] * n / t_aps:.1f}x APScheduler's time and "
        f"{per[big] * n / t_heap:,.0f}x the heap's"
    )

    # (d)
    rows.append(
        f"\n(d) drain on the real clock: midnight -> all SUCCEEDED (seconds, tasks/s), "
        f"recurring herd of {n_rec:,}, one-shot herds of {n:,}"
    )
    rows.append(
        f"  {'W':>3s} {'recurring s':>12s} {'rec tasks/s':>12s} {'one-shot s':>11s} "
        f"{'tasks/s':>10s} {'APS s':>9s} {'APS tasks/s':>12s} {'tw/APS':>7s}"
    )
    print("\n".join(rows), flush=True)
    for w in workers:
        rec, _ = drain_recurring(n_rec, w)
        gc.collect()
        one = _retry(drain_oneshot, n, w)
        gc.collect()
        aps = _retry(drain_aps, n, w)
        gc.collect()
        line = (
            f"  {w:3d} {rec:12.2f} {n_rec / rec:12,.0f} {one:11.2f} {n / one:10,.0f} "
            f"{aps:9.2f} {n / aps:12,.0f} {aps / one:7.2f}"
        )
        print(line, flush=True)
    print(
        "  recurring: a SystemClock shifted so midnight is 1 s after start(); the trigger work "
        "of (c) runs in the same process and competes with the workers for the GIL.\n"
        "  one-shot: at= tasks all due at one real instant (dispatch path only); APScheduler: "
        "date jobs, its thread pool of W, misfire_grace_time=None."
    )

    if not args.no_profile:
        print("\n".join(profile_trigger(n_prof)))
    print(f"\ntotal run time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
