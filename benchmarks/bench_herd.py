"""The midnight herd: N recurring schedules firing at the same instant, side by side with
APScheduler 3.

Run: ``python benchmarks/bench_herd.py [--schedules N] [--quick] [--no-sqlite] [--no-real]
[--real-only] [--create-only] [--create-rounds K]``

Sections (one run, same machine, same moment; ratios against APScheduler measured in it):

a. create N schedules ``cron="0 0 * * *"`` (distinct ids, a no-op module-level function) on a
   scheduler with the memory store, at 23:00 (``FakeClock``), the faster of ``--create-rounds``
   rounds in which the two libraries take turns (a process's first round also grows its heap
   from nothing), vs APScheduler 3
   ``add_job(CronTrigger(hour=0, minute=0))`` on a started, paused scheduler (its memory job
   store) and ``heapq.heappush`` of N ``(due, id)`` timers (the floor).
b. the look-ahead at 23:00: ``sched.upcoming(2 h, bucket="minute")`` and the herd report
   ``sched.herds()`` (the schedules behind the hot bucket, what pre-warming has done).
c. the midnight tick (``FakeClock``, a dispatcher that queues READY work and runs nothing):
   the clock is stepped from 23:00 to a millisecond before midnight (the trigger pre-warms the
   herd in slices during the five minutes before: successors stored, heads staged), then timed
   to midnight: every head PENDING -> READY (the first 10,000 on the bounded ready queue, the
   rest READY in the store) with its successor for the next night stored. For the memory and
   the SQLite store, for the same herd spread over 1,000 different expressions that all fire at
   midnight, and for a herd of 1,000 expressions at 02:mm in New York across the 2026-03-08
   spring-forward night (all fire at 03:00 EDT = 07:00 UTC, checked). Each row gives the
   pre-warming (trigger work, slices, longest step) and the tick. Side by side: APScheduler 3
   with N ``CronTrigger`` jobs due at the same real second and an executor that runs nothing
   (time until every job is submitted and rescheduled), and a heap that pops the N due timers
   and pushes their successors (the floor).
d. the herd on the real clock: the system clock shifted so that the herd's midnight falls
   about ``--lead`` seconds after ``start()`` (real sleeps and threads; only the wall-clock
   reading is moved; the schedules are created on the running scheduler), a thread pool of ``--workers`` running the no-op: the lateness of the first start
   and of the last READY transition, the longest trigger step in the minutes before and during
   the herd (steps in which a full garbage collection ran are counted apart: a collection of
   the whole heap pauses every thread, whoever triggers it), and the time until all SUCCEEDED.
   The first-start lateness is also taken over ``--rounds`` smaller herds (p50).

The trigger's midnight tick is profiled with cProfile at ``--profile-size`` schedules. The
machine is shared and noisy: treat ratios within ~15 % as noise.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import heapq
import inspect
import io
import math
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.executors.base import BaseExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from timewheel.clock import SystemClock
from timewheel.dispatch import NullDispatcher, ThreadPoolDispatcher
from timewheel.refs import register_task
from timewheel.scheduler import Scheduler
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState
from timewheel.testing import FakeClock
from timewheel.trigger import Trigger

UTC = timezone.utc
NY = ZoneInfo("America/New_York")
DAY = 86400.0
# A fixed midnight for the FakeClock sections: 2026-03-02T00:00:00Z (a Monday).
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC).timestamp()
# New York skips 02:00-03:00 on 2026-03-08: fixed-time jobs at 02:mm fire at 03:00 EDT.
SPRING_GAP = datetime(2026, 3, 8, 7, 0, tzinfo=UTC).timestamp()
P, R = TaskState.PENDING, TaskState.READY


def noop() -> None:
    """The herd's task: does nothing (registered by name, so the SQLite store can keep it)."""


register_task("bench-herd-noop", noop)


class QueueingDispatcher(NullDispatcher):
    """Runs nothing but serves every queue: READY work goes on the bounded ready queue (as for
    real workers), the rest stays READY in the store."""

    queues: Sequence[str] | None = None

    def __repr__(self) -> str:
        return "QueueingDispatcher()"


class ShiftedClock(SystemClock):
    """The system clock read ``offset`` seconds ahead: real waits and monotonic time, only the
    wall-clock instant is moved (so a cron midnight can fall a few seconds from now)."""

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


# -- expressions -----------------------------------------------------------------------------------


def midnight_expressions(k: int) -> list[str]:
    """*k* distinct expressions that all fire at 00:00 UTC every day (and at other times)."""
    out = ["0 0 * * *"]
    out += [f"0,{m} 0,{h} * * *" for h in range(1, 24) for m in range(1, 60)]
    return out[:k]


def spring_expressions(k: int) -> list[str]:
    """*k* distinct fixed-time expressions at 02:mm on 2026-03-08 in New York (skipped)."""
    days = [
        "* * *",
        "* * 0",
        "8 3 *",
        "1-31 * *",
        "* 3 *",
        "* * 0,6",
        "*/1 * *",
        "8 * *",
        "* 1-6 *",
        "1-10 * *",
        "* * sun",
        "* mar *",
        "7-9 * *",
        "* 2-4 *",
        "* * 0-2",
        "8 3 0",
        "8,9 * *",
    ]
    return [f"{m} 2 {d}" for d in days for m in range(60)][:k]


# -- instruments -----------------------------------------------------------------------------------


class CollectionWatch:
    """Records when full (generation 2) garbage collections ran, in ``perf_counter`` time."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._began = 0.0

    def __enter__(self) -> CollectionWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.spans.append((self._began, time.perf_counter()))

    def overlaps(self, start: float, end: float) -> bool:
        return any(a < end and b > start for a, b in self.spans)


@dataclass(frozen=True)
class Longest:
    """The longest trigger steps of a stretch: wall time and the trigger thread's CPU time, of
    all steps and of those in which no full garbage collection ran."""

    wall: float
    wall_clean: float
    cpu: float
    cpu_clean: float
    steps: int
    collected: int
    cpu_p99: float
    over_10ms: int  # steps whose CPU time exceeded 10 ms
    refill_in_slow: float  # the most CPU refill_ready took in one of those steps
    refill_longest: float  # the most CPU refill_ready took in any step

    def text(self) -> str:
        return (
            f"{_ms(self.wall)} wall / {_ms(self.cpu)} CPU; without the {self.collected} of "
            f"{self.steps} steps with a full collection {_ms(self.wall_clean)} / "
            f"{_ms(self.cpu_clean)}; p99 {_ms(self.cpu_p99)} CPU, {self.over_10ms} over 10 ms; "
            f"refill_ready: at most {_ms(self.refill_longest)} CPU in a step, "
            f"{_ms(self.refill_in_slow)} in those over 10 ms"
        )


#: what a trigger step may spend its time on, timed apart (nested ones are counted in both)
STEP_PARTS = (
    "reap",
    "_release",
    "promote",
    "refill_ready",
    "refill_wheel",
    "poll",
    "_look",
    "_prewarm",
)


@dataclass
class StepTimes:
    """Every ``Trigger.step`` timed: (instant on the scheduler's clock, perf start, wall
    seconds, seconds of the trigger thread's CPU, of which in ``refill_ready``). The wall time
    of a step includes waiting for the interpreter while worker threads hold it; its CPU time is
    the trigger's own work. Steps of more than 10 ms of CPU keep their breakdown (``slow``):
    the CPU in each of :data:`STEP_PARTS`, in the store's ``ready()``, in the retention pass,
    in handing the collector back, and in garbage collections (any generation)."""

    steps: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    slow: list[tuple[float, float, dict[str, float]]] = field(default_factory=list)
    after: Callable[[float], None] | None = None

    def install(self, trigger: Trigger) -> None:
        perf, cpu = time.perf_counter, time.thread_time
        parts: dict[str, float] = {}
        stepping = [False]

        def timed_part(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                if not stepping[0]:
                    return fn(*args, **kwargs)
                used = cpu()
                try:
                    return fn(*args, **kwargs)
                finally:
                    parts[name] = parts.get(name, 0.0) + cpu() - used

            return run

        # instruments for this run only: instance attributes shadow the methods
        for name in STEP_PARTS:
            setattr(trigger, name, timed_part(name, getattr(trigger, name)))
        store = trigger.store
        store.ready = timed_part("store.ready", store.ready)  # type: ignore[method-assign]
        if trigger.retention is not None:
            retention = trigger.retention
            retention.step = timed_part("retention", retention.step)  # type: ignore[method-assign]
        collector = trigger.collector
        collector.release = timed_part("collector.release", collector.release)  # type: ignore[method-assign]
        began_gc = [0.0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if not stepping[0]:
                return
            if phase == "start":
                began_gc[0] = cpu()
            else:
                key = f"gc{info['generation']}"
                parts[key] = parts.get(key, 0.0) + cpu() - began_gc[0]

        gc.callbacks.append(on_gc)
        step = trigger.step

        def timed(now: float, *, advance: bool = True) -> float | None:
            parts.clear()
            stepping[0] = True
            began, used = perf(), cpu()
            try:
                deadline = step(now, advance=advance)
            finally:
                stepping[0] = False
            spent = cpu() - used
            self.steps.append((now, began, perf() - began, spent, parts.get("refill_ready", 0.0)))
            if spent > 0.010:
                self.slow.append((now, spent, dict(parts)))
            if self.after is not None:
                self.after(now)
            return deadline

        trigger.step = timed  # type: ignore[method-assign]

    def slow_steps(self, start: float, end: float, most: int = 8) -> list[str]:
        """The slowest steps (over 10 ms of CPU) in [start, end): their breakdown, one line
        each (instants relative to *start*)."""
        chosen = sorted((x for x in self.slow if start <= x[0] < end), key=lambda x: -x[1])
        return [
            f"at +{now - start:.3f} s: {_ms(spent)} CPU; "
            + ", ".join(f"{k} {_ms(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]))
            for now, spent, parts in chosen[:most]
        ]

    def longest(
        self, watch: CollectionWatch, start: float = -math.inf, end: float = math.inf
    ) -> Longest:
        chosen = [(b, w, c, r) for now, b, w, c, r in self.steps if start <= now < end]
        clean = [(w, c) for b, w, c, _ in chosen if not watch.overlaps(b, b + w)]
        cpu = sorted(c for _, _, c, _ in chosen)
        slow = [r for _, _, c, r in chosen if c > 0.010]
        return Longest(
            cpu_p99=cpu[min(len(cpu) - 1, math.ceil(0.99 * len(cpu)) - 1)] if cpu else 0.0,
            over_10ms=len(slow),
            refill_in_slow=max(slow, default=0.0),
            refill_longest=max((r for _, _, _, r in chosen), default=0.0),
            wall=max((w for _, w, _, _ in chosen), default=0.0),
            wall_clean=max((w for w, _ in clean), default=0.0),
            cpu=max(cpu, default=0.0),
            cpu_clean=max((c for _, c in clean), default=0.0),
            steps=len(chosen),
            collected=len(chosen) - len(clean),
        )


# -- (a) creation ---------------------------------------------------------------------------------


def build(
    n: int,
    clock: Any,
    dispatcher: Any,
    *,
    store: Any = None,
    expressions: Sequence[str] = ("0 0 * * *",),
    timezone_name: str = "UTC",
) -> tuple[Scheduler, float]:
    """A scheduler with *n* schedules over *expressions* (round robin); the creation seconds."""
    s = Scheduler(clock=clock, dispatcher=dispatcher, store=store, timezone=timezone_name)
    return s, populate(s, n, expressions)


def populate(s: Scheduler, n: int, expressions: Sequence[str] = ("0 0 * * *",)) -> float:
    """Schedule *n* herd members over *expressions* (round robin); the seconds it took."""
    return populate_timed(s, n, expressions)[0]


def populate_timed(
    s: Scheduler, n: int, expressions: Sequence[str] = ("0 0 * * *",)
) -> tuple[float, float]:
    """:func:`populate`: (wall seconds, seconds of this thread's CPU)."""
    k = len(expressions)
    gc.collect()
    c0, t0 = time.thread_time(), time.perf_counter()
    for i in range(n):
        s.schedule(noop, cron=expressions[i % k], id=f"herd-{i}")
    return time.perf_counter() - t0, time.thread_time() - c0


def create_heap(n: int) -> float:
    heap: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    for i in range(n):
        heapq.heappush(heap, (MIDNIGHT, f"herd-{i}"))
    return time.perf_counter() - t0


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


def aps_create_and_trigger(n: int, lead: float = 1.0) -> tuple[float, float, float]:
    """APScheduler 3: (seconds to add N cron jobs, the adding thread's CPU seconds, seconds for
    them all to fire).

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
        ahead = lead * (1.5 * n * per_add + 2.0)
        fire = datetime.fromtimestamp(math.ceil(time.time() + ahead), UTC)
        gc.collect()
        c0, t0 = time.thread_time(), time.perf_counter()
        for i in range(n):
            trig = CronTrigger(hour=fire.hour, minute=fire.minute, second=fire.second, timezone=UTC)
            s.add_job(noop, trig, id=f"herd-{i}")
        t_add = time.perf_counter() - t0
        cpu_add = time.thread_time() - c0
        if datetime.now(UTC) >= fire:
            raise Overran
        s.resume()
        fire_ts = fire.timestamp()
        # Its memory store keeps [(job, timestamp)] sorted; a job's own next_run_time changes
        # before it is moved, so watch the stored timestamp of the head, not get_next_run_time().
        jobs: list[tuple[Any, float]] = store._jobs
        while jobs[0][1] <= fire_ts:
            time.sleep(0.001)
        return t_add, cpu_add, time.time() - fire_ts
    finally:
        s.shutdown(wait=False)


def aps_retry(n: int) -> tuple[float, float, float]:
    for lead in (1.0, 2.0, 4.0):
        try:
            return aps_create_and_trigger(n, lead)
        except Overran:
            gc.collect()
    raise RuntimeError("APScheduler: setup overran its planned instant three times")


# -- (c) the tick on a FakeClock -------------------------------------------------------------------


@dataclass
class Tick:
    """One herd stepped through on a FakeClock."""

    label: str
    n: int
    create: float
    before: float  # seconds to step from the start to a millisecond before the instant
    tick: float
    prewarm_work: float
    slices: int
    prepared: int
    longest: Longest
    ready: int
    queued: int
    successors: int
    report: str
    correct: bool
    refill: float  # CPU seconds of one refill of the ready queue from the store's backlog


def fake_tick(
    label: str,
    n: int,
    *,
    instant: float = MIDNIGHT,
    expressions: Sequence[str] = ("0 0 * * *",),
    timezone_name: str = "UTC",
    sqlite: bool = False,
) -> Tick:
    path = os.path.join(tempfile.mkdtemp(prefix="bench-herd-"), "herd.db")
    # SQLite: the schedules are created with commits that do not wait for the disk (an fsync
    # per schedule would make creation the benchmark); the tick runs on the store reopened
    # with the default durability, a commit per store step
    store = SQLiteStore(path, durability="fast") if sqlite else None
    clock = FakeClock(instant - 3600)  # an hour before
    s, dt_create = build(
        n,
        clock,
        QueueingDispatcher(),
        store=store,
        expressions=expressions,
        timezone_name=timezone_name,
    )
    if store is not None:
        s.shutdown(wait=False)
        store.close()
        store = SQLiteStore(path)
        s = Scheduler(
            clock=clock, dispatcher=QueueingDispatcher(), store=store, timezone=timezone_name
        )
    times = StepTimes()
    times.install(s.runtime.trigger)
    s.start()
    with CollectionWatch() as watch:
        t0 = time.perf_counter()
        clock.advance_to(instant - 0.001)  # pre-warming happens here, in slices
        before = time.perf_counter() - t0
        herds = s.herds()
        gc.collect()
        t0 = time.perf_counter()
        clock.advance_to(instant)
        dt = time.perf_counter() - t0
    herd = next(h for h in herds if h.herd.start == instant)
    counts = s.store.count_by_state()
    ready = s.store.tasks(state=R)
    correct = len(ready) == n and all(t.due == instant for t in ready)
    longest = times.longest(watch, end=instant)
    successors = counts.get(P, 0)
    queued = len(s.ready_queue)
    refill = refill_from_backlog(s, clock.time()) if store is None else math.nan
    s.shutdown(wait=False)
    if store is not None:
        store.close()
    return Tick(
        label=label,
        n=n,
        create=dt_create,
        before=before,
        tick=dt,
        prewarm_work=herd.herd.work,
        slices=herd.herd.slices,
        prepared=herd.herd.prepared,
        longest=longest,
        ready=counts.get(R, 0),
        queued=queued,
        successors=successors,
        report=str(herd),
        correct=correct,
        refill=refill,
    )


def refill_from_backlog(s: Scheduler, now: float, rounds: int = 3) -> float:
    """The trigger's refill of the ready queue while READY work waits in the store: workers
    (here: this thread) claim what the queue holds, then ``refill_ready`` reads the next
    places' worth from the store. The least CPU of *rounds* refills, in seconds."""
    ready, trigger, store = s.ready_queue, s.runtime.trigger, s.store
    best = math.inf
    for _ in range(rounds):
        while (task := ready.pull_nowait()) is not None:
            store.claim(
                task.id,
                expected_version=task.version,
                owner="bench",
                lease_expires=now + 60,
                now=now,
            )
        used = time.thread_time()
        trigger.refill_ready()
        best = min(best, time.thread_time() - used)
    return best


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


# -- (d) the real clock ------------------------------------------------------------------------------


@dataclass
class RealHerd:
    """One herd on the real clock."""

    n: int
    first_start: float  # seconds after midnight
    last_ready: float
    drained: float
    longest_before: Longest
    longest_during: Longest
    collections: list[float]
    prepared: int
    slow_during: list[str]
    slow_before: list[str]


def real_herd(n: int, workers: int, lead: float) -> RealHerd:
    """A herd of *n* at a midnight about *lead* seconds after ``start()``, on the real clock,
    the schedules created on the running scheduler; with no worker (*workers* 0) the READY
    tasks stay queued and nothing competes with the trigger."""
    clock = ShiftedClock()
    per = 100e-6  # seconds per schedule() planned: creation ends well before midnight
    clock.offset = (MIDNIGHT - lead - n * per) - time.time()
    dispatcher = ThreadPoolDispatcher(workers) if workers else QueueingDispatcher()
    s = Scheduler(clock=clock, dispatcher=dispatcher)
    store = s.store
    times = StepTimes()
    marks: dict[str, float] = {}

    def after(now: float) -> None:
        if "ready" not in marks and now >= MIDNIGHT and store.count_by_state().get(P, 0) <= n:
            marks["ready"] = clock.time()  # only the successors are PENDING: all heads READY

    times.after = after
    times.install(s.runtime.trigger)
    done = TaskState.SUCCEEDED if workers else R
    with CollectionWatch() as watch:
        began = time.perf_counter()
        with s:
            populate(s, n)
            while store.count_by_state().get(done, 0) < n:
                if time.perf_counter() - began > lead + 600 + n / 50:
                    raise RuntimeError(f"herd not drained: {store.count_by_state()}")
                time.sleep(0.005)
            drained = clock.time() - MIDNIGHT
            first = min(s.runtime.lateness) if workers else math.nan
            prepared = next(h.herd.prepared for h in s.herds() if h.herd.start == MIDNIGHT)
            s.shutdown(wait=True)
        spans = [b - a for a, b in watch.spans]
        return RealHerd(
            n=n,
            first_start=first,
            last_ready=marks.get("ready", math.nan) - MIDNIGHT,
            drained=drained,
            longest_before=times.longest(watch, MIDNIGHT - 300, MIDNIGHT),
            longest_during=times.longest(watch, MIDNIGHT, MIDNIGHT + 3600),
            collections=spans,
            prepared=prepared,
            slow_during=times.slow_steps(MIDNIGHT, MIDNIGHT + 3600),
            slow_before=times.slow_steps(MIDNIGHT - 300, MIDNIGHT),
        )


# -- profile -------------------------------------------------------------------------------------


def _watch() -> list[tuple[str, Callable[[str, int, str], bool]]]:
    """(label, matcher on a pstats key) for the costs worth reporting per fired schedule."""
    from timewheel import recurring
    from timewheel.ready import ReadyQueue
    from timewheel.stores.memory import MemoryStore

    def fn(f: Any) -> Callable[[str, int, str], bool]:
        code = inspect.unwrap(f).__code__
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        return lambda file, line, name: (file, line, name) == key

    R_, T = recurring.Recurring, Trigger
    return [
        ("Trigger.fire", fn(T.fire)),
        ("  Trigger._take_due", fn(T._take_due)),
        ("  Trigger.promote", fn(T.promote)),
        ("    Recurring.fire", fn(R_.fire)),
        ("      Recurring._fire_prepared", fn(R_._fire_prepared)),
        ("      Recurring._fire_one (not prepared)", fn(R_._fire_one)),
        ("    MemoryStore.promote", fn(MemoryStore.promote)),
        ("      Task.moved", fn(Task.moved)),
        ("    Trigger.enqueue", fn(T.enqueue)),
        ("      ReadyQueue.put", fn(ReadyQueue.put)),
    ]


def profile_tick(n: int) -> list[str]:
    clock = FakeClock(MIDNIGHT - 3600)
    s, _ = build(n, clock, QueueingDispatcher())
    s.start()
    clock.advance_to(MIDNIGHT - 0.001)
    gc.collect()
    pr = cProfile.Profile()
    pr.enable()
    clock.advance_to(MIDNIGHT)
    pr.disable()
    s.shutdown(wait=False)
    out = [f"\n--- cProfile: the midnight tick after pre-warming, {n:,} schedules ---"]
    st = pstats.Stats(pr)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    out.append(
        f"  total own time {total:.2f} s under the profiler = {total / n * 1e6:,.1f} us each"
    )
    out.append(
        f"  {'function':42s} {'calls/sched':>11s} {'cum us/sched':>13s} {'own us/sched':>13s}"
    )
    for label, match in _watch():
        calls, tot, cum = 0, 0.0, 0.0
        for (fname, line, func), (_cc, nc, tt, ct, _callers) in raw.items():
            if match(fname, line, func):
                calls, tot, cum = calls + nc, tot + tt, cum + ct
        if calls:
            out.append(
                f"  {label:42s} {calls / n:11.3f} {cum / n * 1e6:13.2f} {tot / n * 1e6:13.2f}"
            )
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(10)
    lines = buf.getvalue().splitlines()
    start = next(i for i, ln in enumerate(lines) if "ncalls" in ln)
    out.append("\n  top own time:")
    out.extend("  " + ln[:150] for ln in lines[start : start + 11])
    return out


def real_section(n: int, workers: int, lead: float, rounds: int) -> None:
    """Section (d): the herd on the real clock, alone and with *workers*."""
    print(f"\n(d) the herd on the real clock: midnight {lead:g} s after start(), memory store")
    alone = real_herd(n, 0, lead)
    print(
        f"  trigger alone (READY work queued, no worker): last READY {_ms(alone.last_ready)} "
        f"after midnight; {alone.prepared:,} heads pre-warmed"
    )
    print(f"    longest step, the 5 minutes before: {alone.longest_before.text()}")
    print(f"    longest step, during the herd:      {alone.longest_during.text()}")
    gc.collect()
    big = real_herd(n, workers, lead)
    print(
        f"  {workers} workers running the no-op: first start {_ms(big.first_start)} "
        f"after midnight, last READY {_ms(big.last_ready)}, all SUCCEEDED "
        f"{big.drained:.2f} s"
    )
    print(f"    longest step, the 5 minutes before: {big.longest_before.text()}")
    print(f"    longest step, during the herd:      {big.longest_during.text()}")
    for label, run in (("alone", alone), (f"{workers} workers", big)):
        for line in run.slow_before:
            print(f"    slow step before midnight ({label}) {line}")
        for line in run.slow_during:
            print(f"    slow step after midnight ({label}) {line}")
    for label, run in (("alone", alone), ("with workers", big)):
        if run.collections:
            print(
                f"  full collections ({label}): {len(run.collections)}, the longest "
                f"{_ms(max(run.collections))}"
            )
    small = max(1_000, n // 10)
    firsts = [big.first_start]
    for _ in range(rounds - 1):
        gc.collect()
        firsts.append(real_herd(small, workers, min(lead, 15.0)).first_start)
    print(
        f"  first start over {rounds} herds (N={n:,} once, {small:,} after): "
        f"p50 {_ms(statistics.median(firsts))}; each " + ", ".join(_ms(x) for x in firsts)
    )


# -- main ----------------------------------------------------------------------------------------


def _fmt_rate(n: int, seconds: float) -> str:
    return f"{seconds:9.3f} s {n / seconds:12,.0f}/s {seconds / n * 1e6:9.2f} us"


def _ms(x: float) -> str:
    return f"{x * 1e3:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--schedules", type=int, default=None, help="herd size N (default 100,000)")
    ap.add_argument("--quick", action="store_true", help="N=10,000 and fewer rounds")
    ap.add_argument("--workers", type=int, default=4, help="worker threads on the real clock")
    ap.add_argument("--lead", type=float, default=None, help="seconds from start() to midnight")
    ap.add_argument("--rounds", type=int, default=None, help="real-clock herds for the p50")
    ap.add_argument("--no-sqlite", action="store_true", help="skip the SQLite tick")
    ap.add_argument("--no-real", action="store_true", help="skip the real-clock section")
    ap.add_argument("--real-only", action="store_true", help="the real-clock section alone")
    ap.add_argument("--create-only", action="store_true", help="sections (a) and (b) alone")
    ap.add_argument("--profile-size", type=int, default=None, help="schedules profiled")
    ap.add_argument(
        "--create-rounds", type=int, default=2, help="rounds of (a), the libraries taking turns"
    )
    args = ap.parse_args(argv)
    n = args.schedules or (10_000 if args.quick else 100_000)
    rounds = args.rounds or (3 if args.quick else 5)
    lead = args.lead or (15.0 if args.quick else 40.0)
    n_prof = args.profile_size or min(n, 20_000)
    began = time.perf_counter()

    print(
        f"python {platform.python_version()} on {platform.machine()}, {sys.platform}; "
        f"N={n:,} quick={args.quick}"
    )
    print(f"command: python benchmarks/bench_herd.py {' '.join(argv or sys.argv[1:])}".rstrip())
    if args.real_only:
        real_section(n, args.workers, lead, rounds)
        print(f"\ntotal run time {time.perf_counter() - began:.0f} s")
        return 0

    # (a) + (b): the libraries take turns, --create-rounds times each (the first round of a
    # process pays for growing its heap from nothing, later ones reuse what the last freed)
    tw_runs: list[float] = []
    aps_runs: list[float] = []
    tw_cpu: list[float] = []
    aps_cpu: list[float] = []
    aps_fires: list[float] = []
    for _ in range(args.create_rounds):
        clock = FakeClock(MIDNIGHT - 3600)
        s = Scheduler(clock=clock, dispatcher=QueueingDispatcher())
        dt, cpu = populate_timed(s, n)
        tw_runs.append(dt)
        tw_cpu.append(cpu)
        s.start()
        t0 = time.perf_counter()
        look = s.upcoming(2 * 3600, bucket="minute")
        dt_look = time.perf_counter() - t0
        t0 = time.perf_counter()
        herds = s.herds()
        dt_herds = time.perf_counter() - t0
        s.shutdown(wait=False)
        del s, clock
        gc.collect()
        dt, cpu, fired = aps_retry(n)
        aps_runs.append(dt)
        aps_cpu.append(cpu)
        aps_fires.append(fired)
        gc.collect()
    dt_tw, dt_aps, t_aps = min(tw_runs), min(aps_runs), min(aps_fires)
    dt_heap = create_heap(n)
    print(
        f"\n(a) create {n:,} schedules '0 0 * * *' (seconds, rate, us each; the faster of "
        f"{args.create_rounds} rounds, the libraries taking turns)"
    )
    print(f"  {'timewheel schedule(cron=)':34s} {_fmt_rate(n, dt_tw)}")
    print(f"  {'APScheduler add_job(CronTrigger) *':34s} {_fmt_rate(n, dt_aps)}")
    print(f"  {'heapq.heappush (floor)':34s} {_fmt_rate(n, dt_heap)}")
    print(
        f"  timewheel is {dt_aps / dt_tw:.1f}x as fast as APScheduler (goal >= 10x), "
        f"{dt_tw / dt_heap:,.0f}x slower than heappush"
    )
    print(
        "  rounds, us each: timewheel "
        + ", ".join(f"{x / n * 1e6:.1f}" for x in tw_runs)
        + "; APScheduler "
        + ", ".join(f"{x / n * 1e6:.1f}" for x in aps_runs)
        + f"; first round alone {aps_runs[0] / tw_runs[0]:.1f}x"
    )
    print(
        "  the adding thread's CPU, us each: timewheel "
        + ", ".join(f"{x / n * 1e6:.1f}" for x in tw_cpu)
        + "; APScheduler "
        + ", ".join(f"{x / n * 1e6:.1f}" for x in aps_cpu)
        + f"; least of each: {min(aps_cpu) / min(tw_cpu):.1f}x"
    )
    print(
        "  * CronTrigger(hour=H, minute=M, second=S) aimed a few seconds ahead, to fire in (c); "
        "same cost as hour=0, minute=0"
    )
    print(
        f"\n(b) look-ahead at 23:00: upcoming(7200, bucket='minute') {_ms(dt_look)}, "
        f"herds() {_ms(dt_herds)}"
    )
    for start, count in look:
        print(f"  {start.isoformat()}  {count:>10,}")
    for h in herds:
        print(f"  {h}")

    if args.create_only:
        print(f"\ntotal run time {time.perf_counter() - began:.0f} s")
        return 0

    # (c)
    print(
        "\n(c) the midnight tick on a FakeClock: every head PENDING -> READY, successors stored"
        "\n    (pre-warming: the trigger work of the slices during the minutes before; longest"
        "\n    step: of every trigger step from 23:00 to the instant, and without the steps in"
        "\n    which a full garbage collection ran)"
    )
    cases: list[tuple[str, dict[str, Any]]] = [("memory, '0 0 * * *'", {})]
    if not args.no_sqlite:
        cases.append(("SQLite, '0 0 * * *'", {"sqlite": True}))
    cases.append(
        ("memory, 1,000 expressions", {"expressions": midnight_expressions(1_000)}),
    )
    cases.append(
        (
            "memory, 1,000 at 02:mm New York",
            {
                "expressions": spring_expressions(1_000),
                "timezone_name": "America/New_York",
                "instant": SPRING_GAP,
            },
        )
    )
    ticks: list[Tick] = []
    print("    (longest, w/o gc: wall time; p99 and >10ms: the trigger thread's CPU time per step)")
    print(
        f"  {'herd':34s} {'create us':>9s} {'prewarm s':>9s} {'slices':>6s} {'longest':>8s} "
        f"{'w/o gc':>7s} {'gc':>3s} {'p99':>6s} {'>10ms':>5s} {'tick s':>7s} {'us each':>8s} "
        f"{'READY':>8s} {'queued':>7s} {'succ.':>8s} {'ok':>3s}"
    )
    for label, kw in cases:
        t = fake_tick(label, n, **kw)
        ticks.append(t)
        print(
            f"  {label:34s} {t.create / n * 1e6:9.1f} {t.prewarm_work:9.2f} {t.slices:6d} "
            f"{t.longest.wall * 1e3:6.1f}ms {t.longest.wall_clean * 1e3:5.1f}ms "
            f"{t.longest.collected:3d} {t.longest.cpu_p99 * 1e3:4.1f}ms {t.longest.over_10ms:5d} "
            f"{t.tick:7.3f} {t.tick / n * 1e6:8.2f} {t.ready:8,} "
            f"{t.queued:7,} {t.successors:8,} {'yes' if t.correct else 'NO':>3s}",
            flush=True,
        )
    for t in ticks:
        print(f"  {t.label}: {t.report}")
    for t in ticks:
        if not math.isnan(t.refill):
            print(
                f"  {t.label}: a refill of the ready queue (its {t.queued:,} places taken by "
                f"workers) from the READY backlog in the store: {_ms(t.refill)} CPU"
            )
    print(
        "  create us: the SQLite row creates with commits that do not wait for the disk; its "
        "tick runs with the default durability"
    )
    t_heap = trigger_heap(n)
    mem = ticks[0]
    print(f"\n  side by side, N={n:,} (seconds, us per schedule)")
    print(f"  {'timewheel tick, memory':34s} {mem.tick:9.3f} s {mem.tick / n * 1e6:9.2f} us")
    if not args.no_sqlite:
        lite = ticks[1]
        print(f"  {'timewheel tick, SQLite':34s} {lite.tick:9.3f} s {lite.tick / n * 1e6:9.2f} us")
    print(f"  {'APScheduler cron, null executor':34s} {t_aps:9.3f} s {t_aps / n * 1e6:9.2f} us")
    print(f"  {'heapq pop N + push N (floor)':34s} {t_heap:9.3f} s {t_heap / n * 1e6:9.2f} us")
    print(
        f"  memory: {t_aps / mem.tick:.1f}x as fast as APScheduler (goal <= 1 s, >= 25x)"
        + (f"; SQLite: {t_aps / ticks[1].tick:.1f}x (goal <= 5 s)" if not args.no_sqlite else "")
    )

    # (d)
    if not args.no_real:
        real_section(n, args.workers, lead, rounds)

    print("\n".join(profile_tick(n_prof)))
    print(f"\ntotal run time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
