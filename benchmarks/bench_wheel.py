"""Benchmark the timing wheel side by side with the usual timer structures.

Run: ``python benchmarks/bench_wheel.py [--quick] [--plot PATH]``; ``--split`` only splits the
wheel's fire-all and cancel costs into their pieces.

Structures, all behind the same add(key, due) / cancel(key) / advance(now) -> keys interface:

- ``wheel``: :class:`timewheel.wheel.TimingWheel` (1 ms ticks)
- ``heapq``: a heap of ``(due, seq, key)`` tuples with a ``key -> seq`` dict; cancel is lazy
- ``asyncio``: ``loop.call_at`` on a loop that is not running; cancel = ``handle.cancel()``;
  advance pops ``loop._scheduled`` the way ``BaseEventLoop._run_once`` does (including its
  clean-up of cancelled handles)
- ``sortedlist``: ``sortedcontainers.SortedList`` of ``(due, seq, key)``
- ``sched``: stdlib ``sched.scheduler`` driven by a fake time function (its cancel is O(n))

Rates are this thread's CPU time (``time.thread_time``, so preemption by other processes does
not count), medians of ``--rounds`` alternating rounds (each round measures every structure in
turn), with the cyclic GC on (its cost is part of each structure's cost); single-advance
timings run with the GC off (medians of wall time; maxima in both CPU and wall time). On a shared, noisy machine treat ratios within ~15 % as noise.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import heapq
import itertools
import platform
import random
import sched
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol

from sortedcontainers import SortedList

from timewheel.wheel import TimingWheel

START = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC, a day boundary
DAY = 86400.0
HOUR = 3600.0
_INF = float("inf")


class Timers(Protocol):
    name: str

    def add(self, key: Hashable, due: float) -> None: ...
    def cancel(self, key: Hashable) -> bool: ...
    def advance(self, now: float) -> list[Hashable]: ...


class WheelTimers:
    name = "wheel"

    def __init__(self, start: float) -> None:
        self.w: TimingWheel[Hashable] = TimingWheel(start=start)
        self.add = self.w.add
        self.cancel = self.w.cancel
        self.advance = self.w.advance
        self.next_deadline = self.w.next_deadline


class HeapqTimers:
    name = "heapq"

    def __init__(self, start: float) -> None:
        self.h: list[tuple[float, int, Hashable]] = []
        self.live: dict[Hashable, int] = {}
        self.seq = itertools.count()

    def add(self, key: Hashable, due: float) -> None:
        if key in self.live:
            raise KeyError(key)
        s = next(self.seq)
        self.live[key] = s
        heapq.heappush(self.h, (due, s, key))

    def cancel(self, key: Hashable) -> bool:
        return self.live.pop(key, None) is not None

    def advance(self, now: float) -> list[Hashable]:
        h = self.h
        live = self.live
        out = []
        while h and h[0][0] <= now:
            _, s, key = heapq.heappop(h)
            if live.get(key) == s:
                del live[key]
                out.append(key)
        return out


def _noop(*args: object) -> None:
    pass


class AsyncioTimers:
    name = "asyncio"

    def __init__(self, start: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.handles: dict[Hashable, asyncio.TimerHandle] = {}

    def add(self, key: Hashable, due: float) -> None:
        if key in self.handles:
            raise KeyError(key)
        self.handles[key] = self.loop.call_at(due, _noop, key)

    def cancel(self, key: Hashable) -> bool:
        h = self.handles.pop(key, None)
        if h is None:
            return False
        h.cancel()
        return True

    def advance(self, now: float) -> list[Hashable]:
        # The timer part of BaseEventLoop._run_once (CPython 3.11).
        loop: Any = self.loop
        sched_ = loop._scheduled
        if len(sched_) > 100 and loop._timer_cancelled_count / len(sched_) > 0.5:
            new = [h for h in sched_ if not h._cancelled]
            for h in sched_:
                if h._cancelled:
                    h._scheduled = False
            heapq.heapify(new)
            loop._scheduled = sched_ = new
            loop._timer_cancelled_count = 0
        else:
            while sched_ and sched_[0]._cancelled:
                loop._timer_cancelled_count -= 1
                h = heapq.heappop(sched_)
                h._scheduled = False
        out = []
        handles = self.handles
        while sched_ and sched_[0]._when <= now:
            h = heapq.heappop(sched_)
            h._scheduled = False
            if h._cancelled:
                loop._timer_cancelled_count -= 1
                continue
            key = h._args[0]
            del handles[key]
            out.append(key)
        return out

    def close(self) -> None:
        self.loop.close()


class SortedListTimers:
    name = "sortedlist"

    def __init__(self, start: float) -> None:
        self.sl = SortedList()
        self.live: dict[Hashable, tuple[float, int, Hashable]] = {}
        self.seq = itertools.count()

    def add(self, key: Hashable, due: float) -> None:
        if key in self.live:
            raise KeyError(key)
        e = (due, next(self.seq), key)
        self.live[key] = e
        self.sl.add(e)

    def cancel(self, key: Hashable) -> bool:
        e = self.live.pop(key, None)
        if e is None:
            return False
        self.sl.remove(e)
        return True

    def advance(self, now: float) -> list[Hashable]:
        sl = self.sl
        i = sl.bisect_left((now, _INF))
        if not i:
            return []
        got = sl[:i]
        del sl[:i]
        live = self.live
        for e in got:
            del live[e[2]]
        return [e[2] for e in got]


class SchedTimers:
    name = "sched"

    def __init__(self, start: float) -> None:
        self.clock = start
        self.s = sched.scheduler(lambda: self.clock, lambda _: None)
        self.events: dict[Hashable, sched.Event] = {}
        self.out: list[Hashable] = []

    def _fire(self, key: Hashable) -> None:
        del self.events[key]
        self.out.append(key)

    def add(self, key: Hashable, due: float) -> None:
        if key in self.events:
            raise KeyError(key)
        self.events[key] = self.s.enterabs(due, 0, self._fire, (key,))

    def cancel(self, key: Hashable) -> bool:
        e = self.events.pop(key, None)
        if e is None:
            return False
        self.s.cancel(e)  # list.remove + heapify: O(n)
        return True

    def advance(self, now: float) -> list[Hashable]:
        self.clock = max(self.clock, now)
        self.out = []
        self.s.run(blocking=False)
        return self.out


FACTORIES: list[Callable[[float], Any]] = [
    WheelTimers,
    HeapqTimers,
    AsyncioTimers,
    SortedListTimers,
    SchedTimers,
]
NAMES = [f.name for f in FACTORIES]  # type: ignore[attr-defined]


def close(t: Any) -> None:
    if hasattr(t, "close"):
        t.close()


def timed(fn: Callable[[], object]) -> float:
    """CPU seconds of this thread spent in ``fn`` (immune to preemption by other processes)."""
    gc.collect()
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def fill(t: Any, keys: Iterable[Hashable], dues: list[float]) -> None:
    add = t.add
    for k, d in zip(keys, dues, strict=False):
        add(k, d)


def cancel_all(cancel: Callable[[Any], object], keys: Iterable[Hashable]) -> None:
    for k in keys:
        cancel(k)


def churn_loop(t: Any, base: int, dues: list[float], m: int) -> None:
    add, cancel = t.add, t.cancel
    for i in range(m):
        add(base + i, dues[i])
        cancel(base + i)


def fire_loop(t: Any, steps: int, step: float, fired: list[int]) -> None:
    advance = t.advance
    n = 0
    for i in range(1, steps + 1):
        n += len(advance(START + i * step))
    fired.append(n)


def sleep_until(t: Any, end: float, wake: list[tuple[float, float]]) -> None:
    """Advance to ``end``: the wheel by sleeping until each next_deadline(), others at once.

    Records (wall seconds, thread CPU seconds) of each wheel wake-up."""
    if t.name != "wheel":
        t.advance(end)
        return
    perf, cpu = time.perf_counter, time.thread_time
    while True:
        nd = t.next_deadline()
        now = end if nd is None or nd > end else nd
        t0, c0 = perf(), cpu()
        t.advance(now)
        wake.append((perf() - t0, cpu() - c0))
        if now >= end:
            return


def steps_from(t: Any, a: float, b: float, samples: list[tuple[float, float]]) -> None:
    """Advance in 1 ms steps from ``a`` to ``b``: (wall, thread CPU) seconds of each call."""
    perf, cpu = time.perf_counter, time.thread_time
    advance = t.advance
    for i in range(round((b - a) * 1000)):
        now = a + i * 0.001
        t0, c0 = perf(), cpu()
        advance(now)
        samples.append((perf() - t0, cpu() - c0))


# ---------------------------------------------------------------------------- measurements


def median_rounds(rounds: int, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` (one pass over every structure) ``rounds`` times; median per structure."""
    runs = [fn() for _ in range(rounds)]
    out: dict[str, Any] = {}
    for name in runs[0]:
        vals = [r[name] for r in runs]
        if isinstance(vals[0], dict):
            out[name] = {k: statistics.median(v[k] for v in vals) for k in vals[0]}
        else:
            out[name] = statistics.median(vals)
    return out


def bench_insert_cancel(n: int, rng: random.Random) -> dict[str, dict[str, float]]:
    """inserts/s into n pending (all n inserted), then cancels/s (a random half)."""
    dues = [START + rng.random() * DAY for _ in range(n)]
    keys = list(range(n))
    victims = rng.sample(keys, n // 2)
    res: dict[str, dict[str, float]] = {}
    for f in FACTORIES:
        t = f(START)
        ins = timed(functools.partial(fill, t, keys, dues))
        vs = victims if t.name != "sched" else victims[:200]  # sched.cancel is O(n)
        can = timed(functools.partial(cancel_all, t.cancel, vs))
        res[t.name] = {"insert": n / ins, "cancel": len(vs) / can}
        close(t)
        del t
        gc.collect()
    return res


def bench_churn(background: int, ops: int, rng: random.Random) -> dict[str, float]:
    """insert+cancel pairs/s over ``background`` pending timers (a timeout that is reset)."""
    dues = [START + rng.random() * HOUR for _ in range(background)]
    new_dues = [START + 30 + rng.random() * HOUR for _ in range(ops)]
    res = {}
    for f in FACTORIES:
        t = f(START)
        fill(t, range(background), dues)
        m = ops if t.name != "sched" else ops // 500
        res[t.name] = m / timed(functools.partial(churn_loop, t, background, new_dues, m))
        close(t)
        del t
        gc.collect()
    return res


def bench_fire_all(n: int, step: float, rng: random.Random) -> dict[str, float]:
    """fired/s: n timers over a day, advanced in ``step`` seconds until all have fired."""
    dues = [START + 0.5 + rng.random() * (DAY - 1) for _ in range(n)]
    res = {}
    for f in FACTORIES:
        t = f(START)
        fill(t, range(n), dues)
        fired: list[int] = []
        res[t.name] = n / timed(functools.partial(fire_loop, t, int(DAY / step) + 1, step, fired))
        assert fired == [n], (t.name, fired, n)
        close(t)
        del t
        gc.collect()
    return res


def bench_advance_cost(
    sizes: list[int], rng: random.Random, names: list[str]
) -> dict[str, dict[int, float]]:
    """Seconds per advance(1 ms step) with ~10 due per step, as the pending count grows.

    The n background timers are due uniformly over [now + 1 h, now + 25 h) (so they stay
    pending); the foreground is 10 timers due within each of the 2,000 measured 1 ms steps.
    """
    start = START + 1800.0  # mid-hour
    steps = 2000
    fg_dues = [start + (i // 10) * 0.001 + 0.0001 * (i % 10) + 0.00005 for i in range(steps * 10)]
    res: dict[str, dict[int, float]] = {name: {} for name in names}
    for n in sizes:
        bg = [start + HOUR + rng.random() * DAY for _ in range(n)]
        for f in FACTORIES:
            if f.name not in names:  # type: ignore[attr-defined]
                continue
            if n > 1_000_000 and f.name in ("sortedlist", "sched"):  # type: ignore[attr-defined]
                continue  # minutes to fill; their trend is clear by 1,000,000
            t = f(start)
            fill(t, range(n), bg)
            fill(t, range(n, n + len(fg_dues)), fg_dues)
            advance = t.advance
            samples = []
            perf = time.perf_counter
            gc.collect()
            gc.disable()
            try:
                fired = 0
                for i in range(1, steps + 1):
                    now = start + i * 0.001
                    t0 = perf()
                    fired += len(advance(now))
                    samples.append(perf() - t0)
            finally:
                gc.enable()
            assert fired >= 10 * (steps - 2), (t.name, fired)
            res[t.name][n] = statistics.median(samples[100:])
            close(t)
            del t
            gc.collect()
        del bg
    return res


def bench_worst_advance(
    n: int, rng: random.Random, names: list[str]
) -> dict[str, dict[str, float]]:
    """The worst single advance in 1 ms steps around hour and day boundaries, n pending.

    n timers are due uniformly over the day after ``START`` (all in one day slot: a naive wheel
    moves all of them at midnight). The structures start at ``START - DAY`` (the moment that
    day becomes the next one) and reach 23:58 by sleeping until next_deadline() (the wheel, whose
    spread cascade work happens at those wake-ups and counts) or in one step (the others, which
    have no cascade). Then 1 ms steps from 23:58:00 to 00:02:00 and from 00:58:00 to 01:02:00.
    """
    dues = [START + rng.random() * DAY for _ in range(n)]
    res: dict[str, dict[str, float]] = {}
    for f in FACTORIES:
        if f.name not in names:  # type: ignore[attr-defined]
            continue
        t = f(START - DAY)
        fill(t, range(n), dues)
        samples: list[tuple[float, float]] = []
        wake: list[tuple[float, float]] = []
        gc.collect()
        gc.disable()
        try:
            sleep_until(t, START - 120, wake)
            steps_from(t, START - 120, START + 120, samples)
            sleep_until(t, START + HOUR - 120, wake)
            steps_from(t, START + HOUR - 120, START + HOUR + 120, samples)
        finally:
            gc.enable()
        wall = sorted(x[0] for x in samples)
        cpu = sorted(x[1] for x in samples)
        res[t.name] = {
            "max": wall[-1],
            "p999": wall[int(len(wall) * 0.999)],
            "cpu_max": cpu[-1],
            "cpu_p999": cpu[int(len(cpu) * 0.999)],
            "wake_max": max((x[0] for x in wake), default=0.0),
            "wake_cpu_max": max((x[1] for x in wake), default=0.0),
            "wakes": float(len(wake)),
        }
        close(t)
        del t
        gc.collect()
    return res


def bench_memory(n: int, rng: random.Random, keytype: str) -> dict[str, float]:
    """Bytes per pending entry, beyond the key (tracemalloc; due floats made while adding)."""
    offsets = [rng.random() * DAY for _ in range(n)]
    keys: list[Hashable] = (
        [f"task-{i:08d}" for i in range(n)] if keytype == "str" else list(range(n))
    )
    res = {}
    for f in FACTORIES:
        t = f(START)
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        add = t.add
        for k, o in zip(keys, offsets, strict=True):
            add(k, START + o)
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        res[t.name] = used / n
        close(t)
        del t
        gc.collect()
    return res


def split_fire_all(n: int, rng: random.Random) -> dict[str, tuple[float, int]]:
    """Where fire-all's time goes in the wheel: (seconds, entries) per cascade level and firing.

    The wheel's own ``_move`` and ``_fire_ticks`` are wrapped with ``perf_counter`` timers (wall time;
    their own cost, ~0.1 us a call, lands in "everything else"); the rest of the advance calls is
    their bookkeeping."""

    acc: dict[str, list[float]] = {}

    class Timed(TimingWheel[Hashable]):
        __slots__ = ()

        def _move(self, level: int, i: int, segs: Any, m: int) -> None:
            t0, before = time.perf_counter(), self._cascaded
            super()._move(level, i, segs, m)
            a = acc.setdefault(f"move {_LEVELS[level]}", [0.0, 0])
            a[0] += time.perf_counter() - t0
            a[1] += self._cascaded - before

        def _fire_ticks(self, last: int, now: float, out: list[Hashable]) -> None:
            t0, before = time.perf_counter(), len(out)
            super()._fire_ticks(last, now, out)
            a = acc.setdefault("fire from the tick slots", [0.0, 0])
            a[0] += time.perf_counter() - t0
            a[1] += len(out) - before

    dues = [START + 0.5 + rng.random() * (DAY - 1) for _ in range(n)]
    w = Timed(start=START)
    fill(w, range(n), dues)
    fired: list[int] = []
    gc.collect()
    t0 = time.perf_counter()
    fire_loop(w, int(DAY), 1.0, fired)
    total = time.perf_counter() - t0
    assert fired == [n], fired
    out = {k: (v[0], int(v[1])) for k, v in sorted(acc.items())}
    out["everything else in advance()"] = (total - sum(v[0] for v in acc.values()), n)
    out["all of fire-all"] = (total, n)
    return out


_LEVELS = (
    "ticks",
    "second -> tick",
    "minute -> second",
    "hour -> minute",
    "day -> hour",
    "overflow",
)


def split_cancel(n: int, rng: random.Random) -> dict[str, float]:
    """Seconds per cancel of a random half of n: the wheel, asyncio, and one dict pop alone."""
    dues = [START + rng.random() * DAY for _ in range(n)]
    victims = rng.sample(range(n), n // 2)
    out: dict[str, float] = {}
    for f in (WheelTimers, AsyncioTimers):
        t = f(START)
        fill(t, range(n), dues)
        out[f"{t.name} cancel"] = timed(functools.partial(cancel_all, t.cancel, victims))
        close(t)
        del t
        gc.collect()
    d = dict.fromkeys(range(n))
    out["one dict pop (a dict of n keys)"] = timed(functools.partial(cancel_all, d.pop, victims))
    del d
    w: TimingWheel[int] = TimingWheel(start=START)
    fill(w, range(n), dues)
    index = w._index
    out["the wheel's index pop alone"] = timed(functools.partial(cancel_all, index.pop, victims))
    return {k: v / len(victims) for k, v in out.items()}


# ---------------------------------------------------------------------------- report


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f} M/s" if x >= 1e6 else f"{x / 1e3:.0f} k/s"


def fmt_us(x: float) -> str:
    return f"{x * 1e6:.1f} us" if x < 1e-3 else f"{x * 1e3:.2f} ms"


def row(label: str, vals: dict[str, float], fmt: Callable[[float], str], ratio: bool = True) -> str:
    cells = []
    for name in NAMES:
        if name not in vals:
            cells.append("-")
            continue
        v = vals[name]
        cell = fmt(v)
        if ratio and name != "heapq" and vals.get("heapq"):
            cell += f" ({v / vals['heapq']:.2f}x)"
        cells.append(cell)
    return f"| {label} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, skip 10M")
    ap.add_argument("--plot", default="docs/img/advance_cost.png", help="PNG path ('' to skip)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (median) for rates")
    ap.add_argument(
        "--split",
        action="store_true",
        help="only split the wheel's fire-all and cancel costs into their pieces",
    )
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    big = 1_000_000
    if args.split:
        print(f"# {' '.join(sys.argv)}; GC on; fire-all in wall time, cancels in thread CPU time")
        sizes_split = (100_000, big)  # the smaller one fits in the CPU caches
        runs = [split_fire_all(n, rng) for n in sizes_split]
        head = " | ".join(f"{n:,} keys" for n in sizes_split)
        print(f"\n| fire-all piece: ns per entry moved or fired (share) | {head} |")
        print("|---|" + "---|" * len(sizes_split))
        for label in runs[-1]:
            cells = []
            for parts in runs:
                secs, count = parts.get(label, (0.0, 1))
                whole = parts["all of fire-all"][0]
                cells.append(f"{secs / count * 1e9:.0f} ({secs / whole:.0%})")
            print(f"| {label} | " + " | ".join(cells) + " |")
        print(f"\n| cancel of a random half of {big:,} | ns per call |\n|---|---|")
        for label, secs in split_cancel(big, rng).items():
            print(f"| {label} | {secs * 1e9:.0f} |")
        return 0
    sizes = [1_000, 10_000, 100_000, 1_000_000] + ([] if args.quick else [10_000_000])
    print(f"# {' '.join(sys.argv)}")
    print(f"# Python {platform.python_version()} on {platform.machine()}, {platform.system()}")
    print(
        "# rates: thread CPU time, median of alternating rounds, GC on; single advances: GC off, median wall time; worst advance: max of thread CPU (and wall)"
    )
    t_all = time.perf_counter()

    rounds = 1 if args.quick else args.rounds
    print("inserts/cancels ...", file=sys.stderr)
    ic = median_rounds(rounds, lambda: bench_insert_cancel(big, rng))
    print("churn ...", file=sys.stderr)
    ops = 200_000 if not args.quick else 100_000
    churn = median_rounds(rounds, lambda: bench_churn(100_000, ops, rng))
    print("fire-all ...", file=sys.stderr)
    fire = median_rounds(rounds, lambda: bench_fire_all(big, 1.0, rng))
    print("advance cost ...", file=sys.stderr)
    cost = bench_advance_cost(sizes, rng, NAMES)
    print("worst advance ...", file=sys.stderr)
    worst = bench_worst_advance(big, rng, ["wheel", "heapq", "asyncio", "sortedlist"])
    print("memory ...", file=sys.stderr)
    mem_int = bench_memory(big, rng, "int")
    mem_str = bench_memory(big, rng, "str")

    lines = [
        "| measure | " + " | ".join(NAMES) + " |",
        "|---|" + "---|" * len(NAMES),
        row("inserts into 1,000,000 pending", {k: v["insert"] for k, v in ic.items()}, fmt_rate),
        row("cancels (500,000 of 1,000,000)", {k: v["cancel"] for k, v in ic.items()}, fmt_rate),
        row("insert+cancel churn over 100,000", churn, fmt_rate),
        row("fire-all: 1,000,000 over a day, 1 s steps", fire, fmt_rate),
    ]
    for n in sizes:
        lines.append(
            row(
                f"one advance, ~10 due, {n:,} pending",
                {k: v[n] for k, v in cost.items() if n in v},
                fmt_us,
            )
        )
    for label, field in (
        ("worst advance near day/hour boundary, max CPU", "cpu_max"),
        ("worst advance near day/hour boundary, p99.9 CPU", "cpu_p999"),
        ("worst advance near day/hour boundary, max wall", "max"),
        ("worst advance near day/hour boundary, p99.9 wall", "p999"),
    ):
        lines.append(row(label, {k: v[field] for k, v in worst.items()}, fmt_us))
    lines.append(row("bytes per entry beyond the key (int keys)", mem_int, lambda x: f"{x:.0f} B"))
    lines.append(row("bytes per entry beyond the key (str keys)", mem_str, lambda x: f"{x:.0f} B"))
    print("\n".join(lines))
    wk = worst["wheel"]
    print(
        f"\nwheel: {int(wk['wakes'])} sleeping-loop wake-ups between the measured minutes "
        f"(spread cascade work and fires), slowest {fmt_us(wk['wake_cpu_max'])} CPU, "
        f"{fmt_us(wk['wake_max'])} wall"
    )

    # goals
    w = "wheel"
    c1k, c_top = cost[w][sizes[0]], cost[w][sizes[-1]]
    goals = [
        ("inserts >= 0.8x heapq at 1,000,000", ic[w]["insert"] / ic["heapq"]["insert"], 0.8),
        ("cancels >= 1.5x asyncio", ic[w]["cancel"] / ic["asyncio"]["cancel"], 1.5),
        ("churn >= 2x asyncio", churn[w] / churn["asyncio"], 2.0),
        ("fire-all >= 2x heapq at 1,000,000", fire[w] / fire["heapq"], 2.0),
    ]
    print("\n| goal | measured | met |\n|---|---|---|")
    for label, got, need in goals:
        print(f"| {label} | {got:.2f}x | {'yes' if got >= need else 'NO'} |")
    r = c_top / c1k
    print(
        f"| advance at {sizes[-1]:,} <= 1.5x its cost at 1,000 | {r:.2f}x | {'yes' if r <= 1.5 else 'NO'} |"
    )
    worst_cpu = max(wk["cpu_max"], wk["wake_cpu_max"])
    worst_wall = max(wk["max"], wk["wake_max"])
    print(
        f"| worst advance across a day boundary <= 5 ms at 1,000,000 (incl. wake-ups ahead) | {fmt_us(worst_cpu)} CPU, {fmt_us(worst_wall)} wall | {'yes' if worst_cpu <= 0.005 else 'NO'} (CPU){'' if worst_wall <= 0.005 else '; wall max includes preemption'} |"
    )
    worst_mem = max(mem_int[w], mem_str[w])
    print(
        f"| <= 100 bytes per entry beyond the key | {mem_int[w]:.0f} B (int keys), {mem_str[w]:.0f} B (str keys) | {'yes' if worst_mem <= 100 else 'NO (int keys)' if mem_str[w] <= 100 else 'NO'} |"
    )
    print(f"\n# total {time.perf_counter() - t_all:.0f} s")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, by_n in cost.items():
            xs = sorted(by_n)
            ax.plot(xs, [by_n[x] * 1e6 for x in xs], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("pending timers")
        ax.set_ylabel("one advance with ~10 due (us, median)")
        ax.set_title("Cost of one advance vs pending count")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"# plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
