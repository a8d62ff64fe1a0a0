"""Clocks: where the scheduler reads time and waits.

Due times are absolute UTC instants, carried internally as float seconds since the Unix epoch
(:meth:`Clock.time`). Waiting uses the monotonic reading (:meth:`Clock.monotonic`), so a wall-clock
jump never stretches or shortens a sleep; the trigger loop caps each sleep so a jump is noticed and
re-planned within a second.

Only the trigger loop (and blocking calls such as ``Job.result(timeout=)`` or
``DelayQueue.get(timeout=)``) read a clock or wait on one. The wheel takes ``now`` as a parameter.
"""

from __future__ import annotations

import threading
import time as _time
from datetime import datetime, timezone
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AsyncDriven",
    "Clock",
    "Driven",
    "DrivingClock",
    "ShiftedClock",
    "SystemClock",
    "to_datetime",
    "to_timestamp",
]

UTC = timezone.utc


@runtime_checkable
class Clock(Protocol):
    """**Protocol:** a source of time and a way to wait on it.

    Implementations must be thread-safe.
    """

    def time(self) -> float:
        """Return the current UTC instant as seconds since the Unix epoch."""
        ...

    def now(self) -> datetime:
        """Return the current instant as an aware ``datetime`` in UTC."""
        ...

    def monotonic(self) -> float:
        """Return a reading that never goes backwards, in seconds; only differences matter."""
        ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Block on *cond* (held by the caller) until notified or *timeout* seconds pass.

        *timeout* is measured on this clock's own timeline. Spurious returns are allowed: callers
        re-check their predicate and their deadline (from :meth:`monotonic`) in a loop.
        """
        ...


@runtime_checkable
class Driven(Protocol):
    """**Protocol:** work that a :class:`DrivingClock` steps deadline by deadline.

    A scheduler's trigger and a ``DelayQueue`` implement it. A clock that drives time itself (the
    test clock ``timewheel.testing.FakeClock``) asks every attached ``Driven`` for its next deadline,
    moves to the earliest, and calls :meth:`fire` there; the real-time trigger loop does the same on
    the system clock, sleeping in between.
    """

    def next_deadline(self) -> float | None:
        """The earliest instant (epoch seconds) at which work becomes due, or ``None``."""
        ...

    def fire(self, now: float) -> list[Any]:
        """Do everything due at *now*; return what ran in the calling thread (may be empty)."""
        ...


@runtime_checkable
class AsyncDriven(Driven, Protocol):
    """**Protocol:** a :class:`Driven` whose work runs on an event loop (an ``AsyncScheduler``).

    Its fired work must be let run before time moves on, so it is stepped from a coroutine
    (``await FakeClock.advance_async(...)``) through :meth:`fire_async`; its plain ``fire`` refuses.
    """

    async def fire_async(self, now: float) -> list[Any]:
        """Do everything due at *now* and let the tasks it started run until each has ended or
        waits on something; return what ran."""
        ...


@runtime_checkable
class DrivingClock(Clock, Protocol):
    """**Protocol:** a clock that moves only when told to, and then fires the due work itself.

    Instead of sleeping in a thread, what runs on such a clock attaches a :class:`Driven` and is
    stepped through its deadlines as the clock is advanced (``FakeClock.advance``).
    """

    def attach(self, driven: Driven) -> None:
        """Step *driven* through its deadlines whenever the clock advances."""
        ...

    def detach(self, driven: Driven) -> None:
        """Stop stepping *driven*. Idempotent."""
        ...


class SystemClock:
    """The real clock: ``time.time()`` for instants, ``time.monotonic()`` for waiting."""

    __slots__ = ()

    def time(self) -> float:
        return _time.time()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return _time.monotonic()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        if timeout is not None and timeout <= 0:
            return
        cond.wait(timeout)

    def __repr__(self) -> str:
        return "SystemClock()"


class ShiftedClock:
    """Another clock's time moved by ``shift`` seconds: ``time() == base.time() + shift``.

    Waiting and the monotonic reading are *base*'s, so sleeps are unchanged; only the instants
    move. ``shift`` may be changed at any time, from any thread (one float assignment): a store
    that compares times on its server's clock keeps it equal to minus this host's measured offset
    (see ``PostgresStore.server_clock``). Tests use it for a host whose clock is wrong:
    ``Scheduler(clock=ShiftedClock(SystemClock(), 5.0))`` runs five seconds ahead.

    Args:
        base: the clock read (a real-time clock; a ``FakeClock`` drives time itself and is never
            shifted).
        shift: seconds added to *base*'s instants.
    """

    __slots__ = ("__weakref__", "base", "shift")

    def __init__(self, base: Clock, shift: float = 0.0) -> None:
        self.base = base
        self.shift = float(shift)

    def time(self) -> float:
        return self.base.time() + self.shift

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)

    def monotonic(self) -> float:
        return self.base.monotonic()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        self.base.wait(cond, timeout)

    def __repr__(self) -> str:
        return f"ShiftedClock({self.base!r}, {self.shift:+.6f})"


def to_datetime(ts: float) -> datetime:
    """Convert epoch seconds to an aware UTC ``datetime``."""
    return datetime.fromtimestamp(ts, UTC)


def to_timestamp(dt: datetime) -> float:
    """Convert an aware ``datetime`` to epoch seconds.

    Raises:
        InvalidScheduleError: *dt* is naive (no ``tzinfo``), which would be ambiguous.
    """
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        from timewheel.errors import InvalidScheduleError

        raise InvalidScheduleError(
            f"naive datetime {dt.isoformat()!r} has no time zone; attach one, e.g. "
            "dt.replace(tzinfo=zoneinfo.ZoneInfo('Europe/Berlin')) or tzinfo=datetime.timezone.utc"
        )
    return dt.timestamp()
