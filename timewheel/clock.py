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
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "to_datetime", "to_timestamp"]

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
