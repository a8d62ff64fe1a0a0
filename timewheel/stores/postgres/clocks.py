"""Time on the server's clock: each host's offset measured, logged, and corrected.

Hosts that share a store compare due times and leases; if each used its own clock, a host
running five seconds ahead would start work five seconds early and reap other hosts' leases
while they are still alive. So every scheduler on a ``PostgresStore`` reads time through a
:class:`~timewheel.clock.ShiftedClock` whose shift is minus its host's measured offset from the
server: due times, leases, the trigger's ``now`` and the wheel's wake-ups are all instants on the
server's clock.

The offset is measured when the scheduler is built, on every new connection (a reconnect), every
:data:`REMEASURE_EVERY` seconds on the listening connection, and at once when the server finds
the host's ``now`` ahead of its own. A measurement reads ``clock_timestamp()`` between two
readings of the host's clock, three times, and keeps the round trip that was shortest; it takes
the *later* host reading, so the corrected clock is never ahead of the server's, only behind by
at most that round trip (a fraction of a millisecond on a LAN). Offsets over
:data:`CLOCK_WARNING` seconds are logged as warnings, with the figure.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any

import psycopg

from timewheel.clock import Clock, ShiftedClock

__all__ = ["CLOCK_WARNING", "REMEASURE_EVERY", "ServerClocks", "measure"]

log = logging.getLogger("timewheel.stores.postgres")

CLOCK_WARNING = 1.0
"""Seconds of difference between a host's clock and the server's that are logged as a warning."""

REMEASURE_EVERY = 30.0
"""Seconds between two measurements on the listening connection (drift, a stepped clock)."""

_SAMPLES = 3
_SERVER_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"


def measure(conn: psycopg.Connection[Any], clock: Clock) -> float:
    """*clock*'s offset from the server's clock (*clock* minus server, seconds): an upper
    bound, off by at most the shortest of three round trips. The caller ends the transaction
    the readings opened (unless *conn* is in autocommit)."""
    best: tuple[float, float] | None = None
    for _ in range(_SAMPLES):
        t0 = clock.time()
        row = conn.execute(_SERVER_NOW).fetchone()
        t1 = clock.time()
        if row is None:
            continue
        trip = t1 - t0
        if best is None or trip < best[0]:
            best = (trip, t1 - float(row[0]))
    if best is None:
        return 0.0
    return best[1]


class ServerClocks:
    """The clocks corrected to one server's (see the module docstring). Thread-safe.

    Args:
        where: the server, as messages name it (no password).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self._lock = threading.Lock()
        # host clock -> its corrected clock (weak: a scheduler that is gone is not measured)
        self._clocks: weakref.WeakValueDictionary[int, ShiftedClock] = weakref.WeakValueDictionary()
        self._warned: float | None = None
        self._last = -float("inf")  # monotonic time of the last measurement
        #: True once a corrected clock was handed out: the store then also guards its time
        #: comparisons with the server's clock
        self.active = False

    def correct(self, conn: psycopg.Connection[Any], clock: Clock) -> ShiftedClock:
        """*clock* corrected to the server's clock (measured now on *conn*); the same object
        for the same *clock*."""
        with self._lock:
            shifted = self._clocks.get(id(clock))
            if shifted is None or shifted.base is not clock:
                shifted = ShiftedClock(clock)
                self._clocks[id(clock)] = shifted
            self.active = True
        self._set(shifted, measure(conn, clock), "at start")
        return shifted

    def remeasure(self, conn: psycopg.Connection[Any], why: str) -> None:
        """Measure every corrected clock again on *conn* (*why* goes to the log)."""
        with self._lock:
            clocks = list(self._clocks.values())
            self._last = time.monotonic()
        for shifted in clocks:
            self._set(shifted, measure(conn, shifted.base), why)

    def due(self) -> bool:
        """True when :data:`REMEASURE_EVERY` seconds passed since the last measurement."""
        return bool(self._clocks) and time.monotonic() - self._last >= REMEASURE_EVERY

    def note(self, offset: float, why: str) -> None:
        """Log *offset* (this host's clock minus the server's): a warning when it is large
        and not the figure warned about last."""
        large = abs(offset) > CLOCK_WARNING
        with self._lock:
            repeat = self._warned is not None and abs(offset - self._warned) < 0.25
            if large and not repeat:
                self._warned = offset
            elif not large:
                self._warned = None
        if large and not repeat:
            log.warning(
                "this host's clock is %.3f s %s the PostgreSQL server's at %s (measured %s); "
                "due times, leases and wake-ups are corrected to the server's clock, but keep "
                "the clocks synchronised (NTP)",
                abs(offset),
                "ahead of" if offset > 0 else "behind",
                self.where,
                why,
            )
        else:
            log.debug("clock offset from %s: %+.6f s (measured %s)", self.where, offset, why)

    def note_drift(self, ahead_us: int) -> None:
        """The server found this host's corrected time *ahead_us* microseconds ahead of its
        own (the clock drifted or was stepped since the last measurement)."""
        log.info(
            "the server at %s found this host's corrected clock %.3f ms ahead of its own; "
            "measuring the offset again",
            self.where,
            ahead_us / 1000,
        )

    def _set(self, shifted: ShiftedClock, offset: float, why: str) -> None:
        shifted.shift = -offset
        with self._lock:
            self._last = time.monotonic()
        self.note(offset, why)
