"""Model-based test: the timing wheel against a plain ``heapq`` reference.

Random add / cancel / advance (small steps, tick-boundary steps, exact due times, level
boundaries, huge jumps of hours, days and months, backwards steps) must produce the same keys in
the same order (due time, then insertion) as the heap, never early, with ``_check()`` after
every step. Drain chunks and slot segments are made tiny so spread cascades are exercised with a few keys.
"""

from __future__ import annotations

import heapq
import math

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import timewheel.wheel as wheel_module
from timewheel.errors import DuplicateKeyError
from timewheel.wheel import TimingWheel

SEGMENT = wheel_module.SEGMENT
KEYS = st.integers(min_value=0, max_value=24)
HOUR = 3600.0
DAY = 86400.0

# Offsets from the wheel's current time for new due times.
OFFSETS = st.one_of(
    st.floats(min_value=-5.0, max_value=0.0),  # past due / exactly now
    st.floats(min_value=0.0, max_value=2.5),  # sub-second and seconds
    st.floats(min_value=0.0, max_value=2 * HOUR),  # minutes, hours
    st.floats(min_value=0.0, max_value=20 * DAY),  # days and overflow
    st.floats(min_value=0.0, max_value=400 * DAY),  # months
    st.sampled_from([0.001, 0.0005, 1.0, 59.999, 60.0, HOUR - 0.001, HOUR, DAY, 8 * DAY]),
)


class WheelVersusHeap(RuleBasedStateMachine):
    """Compare :class:`TimingWheel` with a heap of (due, seq, key)."""

    def __init__(self) -> None:
        super().__init__()
        self.wheel: TimingWheel[int] = TimingWheel()
        self.heap: list[tuple[float, int, int]] = []
        self.live: dict[int, tuple[float, int]] = {}
        self.seq = 0
        self.now = 0.0

    @initialize(
        tick=st.sampled_from([0.001, 0.01, 0.25, 1.0]),
        days=st.sampled_from([2, 3, 8]),
        start=st.sampled_from([0.0, 1_767_225_599.5, -100.25, 59.9995, 86399.999]),
        chunk=st.sampled_from([1, 2, 5, 512]),
        segment=st.sampled_from([1, 2, 3, 512]),
    )
    def setup(self, tick: float, days: int, start: float, chunk: int, segment: int) -> None:
        wheel_module.SEGMENT = segment  # small segments: multi-segment slots with a few keys
        self.wheel = TimingWheel(tick=tick, days=days, start=start)
        self.wheel._chunk = chunk
        self.now = start

    def teardown(self) -> None:
        wheel_module.SEGMENT = SEGMENT

    # -- model helpers
    def model_due(self) -> list[int]:
        out = []
        while self.heap and self.heap[0][0] <= self.now:
            due, seq, key = heapq.heappop(self.heap)
            if self.live.get(key) == (due, seq):
                del self.live[key]
                out.append(key)
        return out

    def model_min(self) -> float | None:
        while self.heap and self.live.get(self.heap[0][2]) != self.heap[0][:2]:
            heapq.heappop(self.heap)
        return self.heap[0][0] if self.heap else None

    def do_advance(self, to: float) -> None:
        self.now = max(self.now, to)
        got = self.wheel.advance(to)
        want = self.model_due()
        assert got == want, f"advance({to!r}) returned {got}, heap says {want}"
        assert self.wheel.now == self.now

    # -- rules
    @rule(key=KEYS, offset=OFFSETS)
    def add(self, key: int, offset: float) -> None:
        self.add_at(key, self.now + offset)

    def add_at(self, key: int, due: float) -> None:
        if key in self.live:
            try:
                self.wheel.add(key, due)
            except DuplicateKeyError:
                return
            raise AssertionError(f"duplicate key {key} accepted")
        self.wheel.add(key, due)
        self.seq += 1
        self.live[key] = (due, self.seq)
        heapq.heappush(self.heap, (due, self.seq, key))

    @precondition(lambda self: bool(self.live))
    @rule(key=KEYS, data=st.data())
    def add_tie(self, key: int, data: st.DataObject) -> None:
        """Add a key due at exactly the same time as a pending one: FIFO must hold."""
        other = data.draw(st.sampled_from(sorted(self.live)))
        self.add_at(key, self.live[other][0])

    @rule(
        first=st.integers(min_value=100, max_value=160),
        count=st.integers(min_value=2, max_value=40),
        offset=st.sampled_from([90.0, 2 * 60.0, 1.5 * HOUR, 1.2 * DAY]),
        spread=st.floats(min_value=0.0, max_value=50.0),
    )
    def add_many(self, first: int, count: int, offset: float, spread: float) -> None:
        """Fill one future slot with many keys, so it drains in several chunks."""
        for j in range(count):
            self.add_at(first + j, self.now + offset + spread * j / count)

    @rule(
        keys=st.lists(st.integers(min_value=0, max_value=220), min_size=1, max_size=30),
        offset=st.sampled_from([0.4, 2.5, 90.0, 2 * 60.0, 1.5 * HOUR, 1.2 * DAY, 30 * DAY]),
        spread=st.sampled_from([0.0, 0.5, 3.0, 70.0, HOUR, 3 * DAY]),
        data=st.data(),
    )
    def add_batch(self, keys: list[int], offset: float, spread: float, data: st.DataObject) -> None:
        """``add_many``: the keys in the batch's order, due times spread over one or more slots
        (ties among them and with pending keys); a key pending or repeated raises as ``add``
        does, with the keys before it placed."""
        dues = [
            self.now + offset + data.draw(st.sampled_from([0.0, spread / 2, spread])) for _ in keys
        ]
        tie: bool = data.draw(st.booleans())
        if tie and self.live:  # a tie with a pending key
            dues[0] = self.live[data.draw(st.sampled_from(sorted(self.live)))][0]
        placed = 0
        seen: set[int] = set()
        for key in keys:
            if key in self.live or key in seen:
                break
            seen.add(key)
            placed += 1
        if placed < len(keys):
            try:
                self.wheel.add_many(keys, dues)
            except DuplicateKeyError:
                pass
            else:
                raise AssertionError(f"a repeated key of {keys} accepted")
        else:
            self.wheel.add_many(keys, dues)
        for key, due in zip(keys[:placed], dues[:placed], strict=True):
            self.seq += 1
            self.live[key] = (due, self.seq)
            heapq.heappush(self.heap, (due, self.seq, key))

    @rule(first=st.integers(min_value=100, max_value=160), every=st.integers(1, 4))
    def cancel_many(self, first: int, every: int) -> None:
        """Cancel every n-th key of a bulk-added run: slots shrink without emptying segments."""
        for key in range(first, 201, every + 1):
            assert self.wheel.cancel(key) == (self.live.pop(key, None) is not None)

    @rule(key=KEYS)
    def cancel(self, key: int) -> None:
        assert self.wheel.cancel(key) == (self.live.pop(key, None) is not None)

    @rule(step=st.floats(min_value=0.0, max_value=3.0))
    def small_step(self, step: float) -> None:
        self.do_advance(self.now + step)

    @rule(
        ticks=st.integers(min_value=-2, max_value=3000),
        unit=st.sampled_from([1.0, 60.0, HOUR, DAY]),
        nudge=st.sampled_from([-1, 0, 1]),
    )
    def boundary_step(self, ticks: int, unit: float, nudge: int) -> None:
        """Step to a level boundary (next second/minute/hour/day), or a tick either side."""
        tick = self.wheel.tick
        boundary = (math.floor(self.now / unit) + 1) * unit
        self.do_advance(boundary + nudge * tick + (ticks % 3) * tick)

    @rule(jump=st.sampled_from([HOUR, 3 * HOUR + 1500.5, DAY, 2.5 * DAY, 40 * DAY, 200 * DAY]))
    def huge_jump(self, jump: float) -> None:
        self.do_advance(self.now + jump)

    @rule(back=st.floats(min_value=0.0, max_value=10.0))
    def backwards(self, back: float) -> None:
        self.do_advance(self.now - back)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def to_exact_due(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.live)))
        due = self.live[key][0]
        self.do_advance(due)
        assert key not in self.wheel

    @precondition(lambda self: bool(self.live))
    @rule()
    def sleep_loop(self) -> None:
        """A loop sleeping until next_deadline() fires the earliest key exactly on time."""
        first = self.model_min()
        assert first is not None
        # Each wake-up fires, or moves at least one entry one level down (a chunk can be a
        # single entry), or re-plans a checkpoint: bounded by a few per pending entry.
        wakes = 40 + 8 * len(self.live)
        for _ in range(wakes):
            deadline = self.wheel.next_deadline()
            assert deadline is not None
            assert deadline <= first
            self.do_advance(deadline)
            if self.model_min() != first or not self.heap:
                return
        raise AssertionError(f"sleep loop woke {wakes} times without firing the earliest key")

    # -- invariants
    @invariant()
    def consistent(self) -> None:
        self.wheel._check()
        assert len(self.wheel) == len(self.live)
        first = self.model_min()
        deadline = self.wheel.next_deadline()
        if first is None:
            assert deadline is None
            return
        assert deadline is not None
        assert deadline <= first, f"next_deadline {deadline!r} after the earliest due {first!r}"
        if first > self.now:
            assert deadline > self.now, f"next_deadline {deadline!r} not after now {self.now!r}"
        for key in list(self.live)[:3]:
            assert key in self.wheel


WheelVersusHeap.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestWheelVersusHeap = WheelVersusHeap.TestCase
