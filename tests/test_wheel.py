"""Unit tests of the hierarchical timing wheel (no sleeping, no timing thresholds)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from fractions import Fraction

import pytest

from timewheel import wheel as wheel_module
from timewheel.errors import DuplicateKeyError, TimewheelError
from timewheel.wheel import (
    LEVEL_DAYS,
    LEVEL_HOURS,
    LEVEL_MINUTES,
    LEVEL_OVERFLOW,
    LEVEL_SECONDS,
    LEVEL_TICKS,
    TimingWheel,
    WheelStatistics,
)

SECOND = 1.0
MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
TICK = 0.001


def drain(w: TimingWheel[str], until: float) -> list[tuple[float, list[str]]]:
    """Sleep-loop until ``until``: advance to each next_deadline(); return (time, fired)."""
    log = []
    while True:
        nd = w.next_deadline()
        if nd is None or nd > until:
            break
        got = w.advance(nd)
        w._check()
        if got:
            log.append((nd, got))
    return log


# ------------------------------------------------------------------ construction and input


@pytest.mark.parametrize("tick", [0.001, 0.002, 0.01, 0.1, 0.5, 1.0, 1])
def test_valid_ticks(tick: float) -> None:
    w: TimingWheel[str] = TimingWheel(tick=tick)
    assert w.tick == float(tick)
    w._check()


@pytest.mark.parametrize("tick", [0.0, 0.0005, 1.5, -1.0, 0.003, 0.7])
def test_bad_tick_names_the_value(tick: float) -> None:
    with pytest.raises(ValueError, match=repr(tick)):
        TimingWheel(tick=tick)


def test_bad_tick_type_and_days() -> None:
    with pytest.raises(TypeError, match="tick"):
        TimingWheel(tick="0.001")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="days must be at least 2, got 1"):
        TimingWheel(days=1)
    with pytest.raises(TypeError, match="days"):
        TimingWheel(days=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start"):
        TimingWheel(start=math.nan)


def test_a_datetime_is_not_a_time_in_seconds() -> None:
    moment = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(TypeError, match=r"start must be a number of seconds .* of type datetime"):
        TimingWheel(start=moment)  # type: ignore[arg-type]
    w: TimingWheel[str] = TimingWheel(start=moment.timestamp())
    with pytest.raises(TypeError, match="due must be a number of seconds"):
        w.add("a", moment)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_due_is_value_error(bad: float) -> None:
    w: TimingWheel[str] = TimingWheel()
    with pytest.raises(ValueError, match=repr(bad)):
        w.add("a", bad)
    assert "a" not in w
    w._check()


@pytest.mark.parametrize("bad", ["10", b"1", None, True, False, [1.0], object()])
def test_non_numeric_due_is_type_error(bad: object) -> None:
    w: TimingWheel[str] = TimingWheel()
    with pytest.raises(TypeError, match=type(bad).__name__):
        w.add("a", bad)  # type: ignore[arg-type]
    assert len(w) == 0


def test_numeric_types_are_accepted() -> None:
    w: TimingWheel[str] = TimingWheel()
    w.add("int", 2)
    w.add("fraction", Fraction(3, 2))  # type: ignore[arg-type]
    assert w.advance(2.0) == ["fraction", "int"]


def test_advance_rejects_bad_now() -> None:
    w: TimingWheel[str] = TimingWheel()
    with pytest.raises(ValueError, match="nan"):
        w.advance(math.nan)
    with pytest.raises(TypeError, match="str"):
        w.advance("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bool"):
        w.advance(True)


def test_duplicate_key_raises_and_says_cancel_first() -> None:
    w: TimingWheel[str] = TimingWheel()
    w.add("job", 5.0)
    with pytest.raises(DuplicateKeyError, match=r"'job'.*cancel\(\) it first") as info:
        w.add("job", 7.0)
    assert isinstance(info.value, TimewheelError)
    assert isinstance(info.value, ValueError)
    # the original entry is untouched; cancel then re-add reschedules
    assert w.advance(5.0) == ["job"]
    w.add("job", 7.0)
    assert w.cancel("job")
    w.add("job", 6.0)
    assert w.advance(10.0) == ["job"]
    w._check()


# ------------------------------------------------------------------ level boundaries


def _spans() -> list[float]:
    return [SECOND, 2 * SECOND, MINUTE, 2 * MINUTE, HOUR, 2 * HOUR, DAY, 2 * DAY, 8 * DAY]


@pytest.mark.parametrize("span", _spans())
@pytest.mark.parametrize("delta", [-TICK, 0.0, TICK])
@pytest.mark.parametrize("start", [0.0, 0.4995, 1_767_225_599.9995])
def test_level_boundaries_fire_exactly(span: float, delta: float, start: float) -> None:
    """One tick before, at and after each level's span: fired at the exact due, not before."""
    w: TimingWheel[str] = TimingWheel(start=start)
    due = start + span + delta
    w.add("k", due)
    w._check()
    before = math.nextafter(due, -math.inf)
    assert w.advance(before) == []
    w._check()
    assert w.next_deadline() == due
    assert w.advance(due) == ["k"]
    w._check()
    assert len(w) == 0
    assert w.next_deadline() is None


@pytest.mark.parametrize("span", _spans())
def test_sleep_loop_fires_on_time(span: float) -> None:
    start = 1_767_225_600.25
    w: TimingWheel[str] = TimingWheel(start=start)
    w.add("k", start + span + 0.0004)
    log = drain(w, start + 10 * DAY)
    assert log == [(start + span + 0.0004, ["k"])]


def test_cascade_hour_minute_second_tick() -> None:
    """3 h 25 min 40 s travels hour -> minute -> second -> sub-second and fires exactly."""
    w: TimingWheel[str] = TimingWheel(start=0.0)
    due = 3 * HOUR + 25 * MINUTE + 40.123
    w.add("job", due)

    def level() -> int:
        return next(i for i, c in enumerate(w.statistics().levels) if c)

    assert level() == LEVEL_HOURS
    seen = [LEVEL_HOURS]
    while "job" in w:
        nd = w.next_deadline()
        assert nd is not None
        assert nd <= due
        assert w.advance(nd) == ([] if nd < due else ["job"])
        w._check()
        if "job" in w and level() != seen[-1]:
            seen.append(level())
    assert seen == [LEVEL_HOURS, LEVEL_MINUTES, LEVEL_SECONDS, LEVEL_TICKS]
    assert w.now == due
    stats = w.statistics()
    assert stats.cascaded == 3
    assert stats.fired == 1


def test_level_constants_index_the_statistics() -> None:
    w: TimingWheel[str] = TimingWheel(start=0.0, days=8)
    dues = {
        LEVEL_TICKS: 0.5,
        LEVEL_SECONDS: 30.0,
        LEVEL_MINUTES: 30 * MINUTE,
        LEVEL_HOURS: 5 * HOUR,
        LEVEL_DAYS: 3 * DAY,
        LEVEL_OVERFLOW: 30 * DAY,
    }
    for level, due in dues.items():
        w.add(f"at level {level}", due)
    stats = w.statistics()
    assert stats.levels == (1, 1, 1, 1, 1)
    assert stats.overflow == 1
    assert stats.level_names[LEVEL_TICKS] == "sub-second"
    assert stats.level_names[LEVEL_DAYS] == "days"
    assert len(stats.levels) == LEVEL_OVERFLOW


def test_cancel_after_cascade() -> None:
    w: TimingWheel[str] = TimingWheel()
    w.add("a", 2 * HOUR + 5.5)
    w.add("b", 2 * HOUR + 5.5)
    w.advance(2 * HOUR + 5.0)  # both are now in the sub-second ring
    assert w.statistics().levels[0] == 2
    assert w.cancel("a")
    assert not w.cancel("a")
    w._check()
    assert w.advance(3 * HOUR) == ["b"]
    w._check()


def test_overflow_migrates_across_a_jump_of_months() -> None:
    w: TimingWheel[str] = TimingWheel(days=8)
    dues = {f"d{d}": d * DAY + 0.5 for d in (9, 30, 95, 200)}
    for key, due in dues.items():
        w.add(key, due)
    stats = w.statistics()
    assert stats.overflow == 4
    assert w.advance(100 * DAY) == ["d9", "d30", "d95"]
    w._check()
    assert w.statistics().overflow == 0 or w.statistics().overflow == 1
    assert w.next_deadline() is not None
    assert drain(w, 400 * DAY) == [(200 * DAY + 0.5, ["d200"])]


def test_huge_jump_returns_everything_in_order() -> None:
    w: TimingWheel[int] = TimingWheel(start=1_000.0)
    dues = [1_000.0 + x for x in (0.0005, 0.7, 59.0, 3599.5, 86399.0, 8 * DAY, 400 * DAY)]
    for i, due in enumerate(reversed(dues)):
        w.add(i, due)
    assert w.advance(1_000.0 + 1000 * DAY) == list(reversed(range(len(dues))))
    w._check()
    assert len(w) == 0


def test_ties_are_first_in_first_out_across_levels() -> None:
    w: TimingWheel[str] = TimingWheel()
    due = 2 * DAY + 3 * HOUR + 0.25
    w.add("first", due)
    w.advance(DAY + 5 * HOUR)  # "first" has cascaded some levels down
    w.add("second", due)
    w.add("early", due - 0.0001)
    w.add("third", due)
    assert w.advance(3 * DAY) == ["early", "first", "second", "third"]


def test_same_tick_different_dues_fire_in_due_order() -> None:
    w: TimingWheel[str] = TimingWheel()
    w.add("c", 5.0009)
    w.add("a", 5.0001)
    w.add("b", 5.0005)
    assert w.advance(5.0005) == ["a", "b"]  # exact: c is due later within the same tick
    assert w.next_deadline() == 5.0009
    assert w.advance(5.0009) == ["c"]


def test_past_due_adds_fire_on_next_advance() -> None:
    w: TimingWheel[str] = TimingWheel(start=100.0)
    w.add("now", 100.0)
    w.add("old", 50.0)
    w.add("later", 100.0005)
    assert w.next_deadline() == 50.0
    assert w.advance(100.0) == ["old", "now"]
    assert w.advance(100.0005) == ["later"]
    w._check()


def test_a_time_long_past_is_due_now_even_beyond_the_tick_range() -> None:
    # -1e308 s is finite, but -1e308 * 1000 ticks is not: still a past time, due at once
    w: TimingWheel[str] = TimingWheel(start=100.0)
    w.add("ancient", -1e308)
    w._check()
    assert w.next_deadline() == -1e308
    assert w.advance(100.0) == ["ancient"]
    with pytest.raises(ValueError, match="finite"):
        w.add("never", 1e308)  # the far-future side has no tick either: refused by name
    assert "never" not in w


def test_backwards_advance_does_not_move_time_back() -> None:
    w: TimingWheel[str] = TimingWheel(start=10.0)
    w.add("a", 20.0)
    assert w.advance(5.0) == []
    assert w.now == 10.0
    w._check()
    w.add("past", 9.0)  # added since: returned by a backwards advance
    assert w.advance(1.0) == ["past"]
    assert w.now == 10.0
    assert w.advance(20.0) == ["a"]
    assert w.advance(19.0) == []
    assert w.now == 20.0
    w._check()


def test_exact_firing_within_a_tick() -> None:
    w: TimingWheel[str] = TimingWheel(tick=0.01, start=0.0)
    w.add("a", 1.0041)
    assert w.advance(1.004) == []
    assert w.advance(1.00409) == []
    assert w.advance(1.0041) == ["a"]


@pytest.mark.parametrize("tick", [0.01, 1.0])
def test_non_default_ticks(tick: float) -> None:
    w: TimingWheel[str] = TimingWheel(tick=tick, start=0.0)
    dues = {"s": 0.5, "m": 61.25, "h": HOUR + 3.75, "d": DAY + 0.5, "o": 30 * DAY + 0.1}
    for key, due in dues.items():
        w.add(key, due)
    log = drain(w, 60 * DAY)
    assert log == [(due, [key]) for key, due in dues.items()]


def test_cancel_is_immediate_and_frees_slots() -> None:
    w: TimingWheel[str] = TimingWheel()
    for i in range(100):
        w.add(f"k{i}", 5 * HOUR + i)
    for i in range(100):
        assert w.cancel(f"k{i}")
    w._check()
    assert len(w) == 0
    assert w.next_deadline() is None
    assert w.statistics().levels == (0, 0, 0, 0, 0)
    assert not w.cancel("missing")
    assert w.advance(DAY) == []


@pytest.mark.parametrize("ask_deadline", [False, True])
def test_cancels_that_shrink_a_draining_slot_do_not_stall_advance(ask_deadline: bool) -> None:
    # Regression: a cascade checkpoint planned for 3,000 entries, reached after half of them
    # were cancelled (no segment emptied), owed less than a chunk; advance() skipped it without
    # planning it again and looped forever at that tick.
    w: TimingWheel[int] = TimingWheel(start=0.0)
    keys = list(range(3000))
    for k in keys:
        w.add(k, 7200.0 + k * 0.5)  # one hour slot, drained in chunks during the hour before
    w.advance(3600.5)
    for k in keys[::2] + keys[1::4]:
        assert w.cancel(k)
    if ask_deadline:
        nd = w.next_deadline()
        assert nd is not None
        assert nd < 7200.0
    assert w.advance(7199.0) == []
    w._check()
    assert w.advance(9000.0) == keys[3::4]
    w._check()
    assert len(w) == 0


@pytest.mark.parametrize(("chunk", "segment"), [(1, 1), (2, 3), (5, 2), (512, 682)])
@pytest.mark.parametrize("drained", [0.0, 0.5, 0.99])
def test_due_order_holds_when_a_cascade_lands_on_the_tick_it_fires(
    chunk: int, segment: int, drained: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: keys due at the very start of a minute (and of its first second) sat in a
    # minute slot that completed its cascade at the last tick of the minute before, leaving one
    # more move (seconds -> ticks) for the tick they fire at. A single big advance fired that
    # tick before making the move, so a late-added key tied with an earlier one came out after
    # keys due later than both.
    monkeypatch.setattr(wheel_module, "SEGMENT", segment)
    w: TimingWheel[str] = TimingWheel(start=0.0)
    w._chunk = chunk
    dues = {f"a{j:02d}": 180.0 + j * 1e-6 for j in range(24)}
    for k, d in dues.items():
        w.add(k, d)
    w.advance(120.0 + 60.0 * drained)  # the minute slot of 180 s is draining
    w.add("tie", dues["a12"])  # appended to the draining slot: after a12 (FIFO), before a13
    dues["tie"] = dues["a12"]
    order = list(dues)
    assert w.advance(200.0) == sorted(dues, key=lambda k: (dues[k], order.index(k)))
    w._check()


def test_cancel_in_overflow_and_contains() -> None:
    w: TimingWheel[str] = TimingWheel()
    w.add("far", 100 * DAY)
    assert "far" in w
    assert "near" not in w
    assert w.cancel("far")
    assert "far" not in w
    w._check()
    assert w.statistics().overflow == 0


# ------------------------------------------------------------------ next_deadline


def test_next_deadline_exact_for_tick_slot_and_cascade_time_above() -> None:
    w: TimingWheel[str] = TimingWheel(start=0.0)
    assert w.next_deadline() is None
    w.add("x", 0.2503)
    w.add("y", 0.2501)
    assert w.next_deadline() == 0.2501
    w.cancel("y")
    assert w.next_deadline() == 0.2503
    w.cancel("x")
    w.add("hour", 5 * HOUR + 1.0)
    nd = w.next_deadline()
    assert nd is not None
    assert 0.0 < nd <= 5 * HOUR + 1.0
    assert w.advance(nd) == []  # a cascade, not a fire
    w._check()


def test_next_deadline_never_wakes_for_an_emptied_slot() -> None:
    w: TimingWheel[str] = TimingWheel(start=0.0)
    w.add("soon", 1.5)
    w.add("late", 3 * HOUR)
    w.cancel("soon")
    nd = w.next_deadline()
    assert nd is not None
    assert nd > 1.5  # the emptied tick/second slot is not reported


def test_spread_cascade_bounded_per_wake() -> None:
    """A big day slot is cascaded in chunks ahead of midnight: no single wake moves it all."""
    w: TimingWheel[int] = TimingWheel(start=0.0)
    n = 5000
    for i in range(n):
        w.add(i, DAY + (i * 17.3) % DAY)  # all in tomorrow's day slot
    moves = []
    last = 0
    while w.now < DAY + 10:
        nd = w.next_deadline()
        assert nd is not None
        w.advance(nd)
        c = w.statistics().cascaded
        moves.append(c - last)
        last = c
    w._check()
    # each wake moves at most a chunk or two per level (whole segments), never the slot
    assert max(moves) < 4 * wheel_module.SEGMENT
    assert sum(1 for m in moves if m) >= 5


# ------------------------------------------------------------------ upcoming and statistics


def test_upcoming_buckets() -> None:
    w: TimingWheel[str] = TimingWheel(start=DAY - 90.0)  # 23:58:30
    for i in range(30):
        w.add(f"midnight{i}", DAY + i * 0.01)  # a spike at midnight
    w.add("a", DAY - 60.0)
    w.add("b", DAY - 59.5)
    w.add("later", DAY + 2 * HOUR)
    w.add("past", DAY - 100.0)
    got = w.upcoming(HOUR, bucket="minute")
    assert got == [(DAY - 120.0, 1), (DAY - 60.0, 2), (DAY, 30)]
    assert w.upcoming(3 * HOUR, bucket="hour")[-1] == (DAY + 2 * HOUR, 1)
    assert sum(c for _, c in w.upcoming(1000 * DAY, bucket=1.0)) == len(w)
    assert w.upcoming(0.0) == [(DAY - 120.0, 1)] or w.upcoming(0.0) == []
    with pytest.raises(ValueError, match="fortnight"):
        w.upcoming(10.0, bucket="fortnight")
    with pytest.raises(ValueError, match="-1"):
        w.upcoming(-1.0)


def test_statistics() -> None:
    w: TimingWheel[str] = TimingWheel(start=0.0)
    w.add("t", 0.5)
    w.add("s", 30.0)
    w.add("m", 20 * MINUTE)
    w.add("h", 5 * HOUR)
    w.add("d", 3 * DAY)
    w.add("o", 30 * DAY)
    stats = w.statistics()
    assert isinstance(stats, WheelStatistics)
    assert stats.pending == 6
    assert stats.levels == (1, 1, 1, 1, 1)
    assert stats.level_names == ("sub-second", "seconds", "minutes", "hours", "days")
    assert stats.overflow == 1
    assert (stats.cascaded, stats.fired, stats.advances) == (0, 0, 0)
    w.advance(20 * MINUTE)
    stats = w.statistics()
    assert stats.fired == 3
    assert stats.advances == 1
    assert stats.cascaded >= 1
    with pytest.raises(AttributeError):
        stats.pending = 1  # type: ignore[misc]


def test_check_detects_corruption() -> None:
    w: TimingWheel[str] = TimingWheel()
    w.add("a", 5.0)
    w._index["ghost"] = {}
    with pytest.raises(AssertionError, match="index"):
        w._check()


def test_repr_and_properties() -> None:
    w: TimingWheel[str] = TimingWheel(tick=0.01, days=3, start=7.0)
    assert w.now == 7.0
    assert w.days == 3
    assert "pending=0" in repr(w)
