"""Clocks: the system clock's contract and the fake clock's strictness."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from timewheel.clock import Clock, ShiftedClock, SystemClock, to_datetime, to_timestamp
from timewheel.errors import InvalidScheduleError
from timewheel.testing import FakeClock

UTC = timezone.utc


def test_both_clocks_satisfy_the_protocol() -> None:
    assert isinstance(SystemClock(), Clock)
    assert isinstance(FakeClock(), Clock)


def test_system_clock_readings() -> None:
    c = SystemClock()
    assert abs(c.time() - time.time()) < 5
    assert c.now().tzinfo is UTC
    a = c.monotonic()
    assert c.monotonic() >= a


def test_fake_clock_start_and_readings() -> None:
    start = datetime(2026, 3, 29, 1, 2, 3, tzinfo=UTC)
    c = FakeClock(start=start)
    assert c.now() == start
    assert c.time() == start.timestamp()
    assert c.monotonic() == 0.0
    assert FakeClock(start=1000.0).time() == 1000.0


def test_fake_clock_advance_forms() -> None:
    c = FakeClock(start=0.0)
    c.advance(1.5)
    c.advance(timedelta(seconds=2))
    c.advance(seconds=1, minutes=1, hours=1, days=1)
    assert c.time() == 1.5 + 2 + 1 + 60 + 3600 + 86400
    assert c.monotonic() == c.time()
    c.advance_to(datetime(1970, 1, 3, tzinfo=UTC))
    assert c.time() == 2 * 86400
    c.advance(0)
    assert c.time() == 2 * 86400


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.advance(-0.001), ValueError, "time can't go backwards"),
        (lambda c: c.advance(minutes=-1), ValueError, "time can't go backwards"),
        (lambda c: c.advance_to(50.0), ValueError, "time can't go backwards"),
        (lambda c: c.advance(float("nan")), ValueError, "finite"),
        (lambda c: c.advance(float("inf")), ValueError, "finite"),
        (lambda c: c.advance("1"), TypeError, "number"),
        (lambda c: c.advance_to(datetime(2026, 1, 1)), ValueError, "naive"),
    ],
)
def test_fake_clock_refuses_bad_moves(call, error, match) -> None:  # type: ignore[no-untyped-def]
    c = FakeClock(start=100.0)
    with pytest.raises(error, match=match):
        call(c)
    assert c.time() == 100.0


def test_fake_clock_rejects_naive_start() -> None:
    with pytest.raises(ValueError, match="naive"):
        FakeClock(start=datetime(2026, 1, 1))


def test_fake_clock_wakes_waiters_on_advance() -> None:
    c = FakeClock(start=0.0)
    cond = threading.Condition()
    woke = threading.Event()

    def waiter() -> None:
        with cond:
            c.wait(cond, 10)
        woke.set()

    t = threading.Thread(target=waiter)
    t.start()
    for _ in range(200):  # let the waiter block; the wait itself is not timed
        if cond in c._waiters:
            break
        time.sleep(0.005)
    c.advance(1)
    assert woke.wait(5)
    t.join()


def test_datetime_conversions() -> None:
    dt = datetime(2026, 3, 29, tzinfo=UTC)
    assert to_datetime(to_timestamp(dt)) == dt
    with pytest.raises(InvalidScheduleError, match=r"naive datetime .* attach"):
        to_timestamp(datetime(2026, 3, 29))


def test_shifted_clock_moves_instants_only() -> None:
    fake = FakeClock(start=datetime(2026, 3, 29, tzinfo=timezone.utc))
    ahead = ShiftedClock(fake, 5.0)
    assert ahead.time() == fake.time() + 5.0
    assert ahead.now() == datetime(2026, 3, 29, 0, 0, 5, tzinfo=timezone.utc)
    assert ahead.monotonic() == fake.monotonic()  # waits are the base clock's
    ahead.shift = -2.5  # may change at any time (a store re-measuring its server's clock)
    assert ahead.time() == fake.time() - 2.5
    cond = threading.Condition()
    with cond:
        ahead.wait(cond, 0)
    assert isinstance(ahead, Clock)
    assert repr(ahead) == f"ShiftedClock({fake!r}, -2.500000)"
