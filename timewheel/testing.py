"""Testing tools: a deterministic clock, and helpers for tests of code that schedules.

:class:`FakeClock` is what timewheel's own tests use. Pass it to a ``Scheduler`` together with
``InlineDispatcher`` and ``clock.advance(minutes=10)`` runs, in due order and in the calling thread,
every task that falls due in those ten minutes, each seeing ``clock.now()`` equal to its own due time.
Nothing sleeps.

An ``AsyncScheduler`` on a ``FakeClock`` is stepped from a coroutine instead:
``await clock.advance_async(minutes=10)`` steps the same way and, at each step, lets the coroutine
tasks that became due run until they end or wait on something, before moving on.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from timewheel.clock import AsyncDriven, Driven

__all__ = ["AsyncDriven", "Driven", "FakeClock", "check_store"]

UTC = timezone.utc
_DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


class FakeClock:
    """A clock that moves only when told to. Thread-safe.

    Args:
        start: the initial instant, an aware ``datetime`` or epoch seconds (default
            2026-01-01T00:00:00Z).

    ``advance()`` and ``advance_to()`` step *deadline by deadline*: each scheduler or delay queue
    attached to this clock is asked for its next deadline, the clock moves to the earliest one inside
    the window, the due work runs (inline, with an ``InlineDispatcher``), and this repeats until no
    deadline is left inside the window; then the clock moves to the end of the window. Work scheduled
    during the advance that falls inside the window runs in it too. Anything blocked in
    :meth:`wait` is woken at every step.

    The clock refuses to go backwards: ``ValueError("time can't go backwards ...")``.
    """

    def __init__(
        self, start: datetime | float | None = None, *, max_steps: int = 1_000_000
    ) -> None:
        if start is None:
            start = _DEFAULT_START
        if isinstance(start, datetime):
            if start.tzinfo is None or start.tzinfo.utcoffset(start) is None:
                raise ValueError(
                    f"FakeClock start {start.isoformat()!r} is naive; attach a zone, "
                    "e.g. start.replace(tzinfo=datetime.timezone.utc)"
                )
            ts = start.timestamp()
        else:
            ts = _check_number(start, "start")
        self._t = ts
        self._t0 = ts
        self._lock = threading.RLock()
        self._advancing = False
        self._max_steps = max_steps
        self._driven: weakref.WeakSet[Driven] = weakref.WeakSet()
        self._waiters: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    # -- Clock protocol -------------------------------------------------------------------
    def time(self) -> float:
        return self._t

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._t, UTC)

    def monotonic(self) -> float:
        return self._t - self._t0

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on *cond* until notified or until the clock is advanced.

        *timeout* is fake time: it can only run out through :meth:`advance`, which wakes every
        waiter, so the caller's loop re-checks its own deadline on :meth:`monotonic`.
        """
        if timeout is not None and timeout <= 0:
            return
        with self._lock:
            self._waiters.add(cond)
        cond.wait()

    # -- moving time ------------------------------------------------------------------------
    def advance(
        self,
        delta: timedelta | float | None = None,
        *,
        seconds: float = 0,
        minutes: float = 0,
        hours: float = 0,
        days: float = 0,
    ) -> list[Any]:
        """Move forward by *delta* (a ``timedelta`` or seconds) plus the keyword amounts.

        Returns:
            What ran during the advance, in the order it ran (``Job`` handles for a scheduler,
            items for a delay queue).

        Raises:
            ValueError: the total is negative, NaN or infinite.
            RuntimeError: an ``AsyncScheduler`` is attached (use :meth:`advance_async`).
        """
        return self._run_to(self._t + _total(delta, seconds, minutes, hours, days))

    def advance_to(self, instant: datetime | float) -> list[Any]:
        """Move forward to *instant* (aware ``datetime`` or epoch seconds); see :meth:`advance`."""
        return self._run_to(self._target(instant))

    async def advance_async(
        self,
        delta: timedelta | float | None = None,
        *,
        seconds: float = 0,
        minutes: float = 0,
        hours: float = 0,
        days: float = 0,
    ) -> list[Any]:
        """:meth:`advance` from a coroutine, for an ``AsyncScheduler`` on this clock.

        Steps deadline by deadline like :meth:`advance`; at each step the coroutine tasks that
        became due start and run until each has ended or waits on something (a future not yet
        done: another job's result, an event, I/O, a real ``asyncio.sleep``), and plain functions
        started in threads run to their end, before the clock moves on. So every task sees
        ``clock.now()`` equal to its own due time, and what it schedules inside the window runs in
        it too. Schedulers and delay queues that are not async, attached to the same clock, are
        stepped as :meth:`advance` steps them.

        Returns:
            What ran during the advance, in the order it started (``AsyncJob`` handles).
        """
        return await self._run_to_async(self._t + _total(delta, seconds, minutes, hours, days))

    async def advance_to_async(self, instant: datetime | float) -> list[Any]:
        """:meth:`advance_to` from a coroutine; see :meth:`advance_async`."""
        return await self._run_to_async(self._target(instant))

    def _target(self, instant: datetime | float) -> float:
        if isinstance(instant, datetime):
            if instant.tzinfo is None or instant.tzinfo.utcoffset(instant) is None:
                raise ValueError(
                    f"advance_to({instant.isoformat()!r}): naive datetime, attach a zone"
                )
            target = instant.timestamp()
        else:
            target = _check_number(instant, "instant")
        if target < self._t:
            raise ValueError(
                f"time can't go backwards: advance_to({_instant_text(target)}) is before the "
                f"clock's now, {_instant_text(self._t)}; advance to a later instant"
            )
        return target

    def _begin(self) -> None:
        with self._lock:
            if self._advancing:
                # A task running inside an advance moved the clock: just move, the outer loop steps.
                raise RuntimeError(
                    "FakeClock.advance() called while an advance is running (from a task?); "
                    "schedule work instead of advancing the clock from inside it"
                )
            self._advancing = True

    def _end(self) -> None:
        with self._lock:
            self._advancing = False

    def _earliest(self, target: float) -> float | None:
        earliest: float | None = None
        for d in list(self._driven):
            dl = d.next_deadline()
            if dl is not None and dl <= target and (earliest is None or dl < earliest):
                earliest = dl
        return earliest

    def _stuck(self) -> bool:
        """After a step that ran nothing: is a deadline still at or before now? (It was a lower
        bound, e.g. work handed to other threads: stop stepping, so it cannot spin forever.)"""
        nxt: float | None = None
        for d in list(self._driven):
            dl = d.next_deadline()
            if dl is not None and (nxt is None or dl < nxt):
                nxt = dl
        return nxt is not None and nxt <= self._t

    def _count_step(self, steps: int) -> int:
        if steps + 1 > self._max_steps:
            raise RuntimeError(
                f"FakeClock.advance made {self._max_steps} steps without reaching the end "
                "of the window; is a task rescheduling itself with no delay?"
            )
        return steps + 1

    async def _run_to_async(self, target: float) -> list[Any]:
        ran: list[Any] = []
        self._begin()
        try:
            steps = 0
            while (earliest := self._earliest(target)) is not None:
                steps = self._count_step(steps)
                self._set(max(earliest, self._t))
                progressed = False
                for d in list(self._driven):
                    if isinstance(d, AsyncDriven):
                        out = await d.fire_async(self._t)
                    else:
                        out = d.fire(self._t)
                    if out:
                        ran.extend(out)
                        progressed = True
                if not progressed and self._stuck():
                    break
            self._set(target)
        finally:
            self._end()
        return ran

    def _run_to(self, target: float) -> list[Any]:
        asynchronous = [d for d in list(self._driven) if isinstance(d, AsyncDriven)]
        if asynchronous:
            raise RuntimeError(
                f"an AsyncScheduler is attached to this clock ({asynchronous[0]!r}); its tasks run "
                "on the event loop: use 'await clock.advance_async(...)' in an async test"
            )
        ran: list[Any] = []
        self._begin()
        try:
            steps = 0
            while (earliest := self._earliest(target)) is not None:
                steps = self._count_step(steps)
                self._set(max(earliest, self._t))
                progressed = False
                for d in list(self._driven):
                    out = d.fire(self._t)
                    if out:
                        ran.extend(out)
                        progressed = True
                if not progressed and self._stuck():
                    break
            self._set(target)
        finally:
            self._end()
        return ran

    def _set(self, t: float) -> None:
        with self._lock:
            if t > self._t:
                self._t = t
            waiters = list(self._waiters)
        for cond in waiters:
            with cond:
                cond.notify_all()

    def next_deadline(self) -> float | None:
        """The earliest deadline among the attached schedulers and queues (epoch seconds), or
        ``None`` when nothing waits: where the next :meth:`advance` step would stop."""
        deadlines = [d for d in (x.next_deadline() for x in list(self._driven)) if d is not None]
        return min(deadlines, default=None)

    # -- attaching ----------------------------------------------------------------------------
    def attach(self, driven: Driven) -> None:
        """Step *driven* (a scheduler's trigger, a delay queue) through its deadlines whenever the
        clock advances. Schedulers and delay queues attach themselves when they start; a custom
        component that fires work at deadlines implements :class:`Driven` and attaches here."""
        with self._lock:
            self._driven.add(driven)

    def detach(self, driven: Driven) -> None:
        """Stop stepping *driven*. Idempotent."""
        with self._lock:
            self._driven.discard(driven)

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now().isoformat()})"


def _instant_text(t: float) -> str:
    """An instant as people read it (ISO 8601, UTC), with the epoch seconds for exactness."""
    try:
        return f"{datetime.fromtimestamp(t, UTC).isoformat()} ({t!r})"
    except (OverflowError, OSError, ValueError):
        return repr(t)


def _total(
    delta: timedelta | float | None, seconds: float, minutes: float, hours: float, days: float
) -> float:
    """The seconds of an ``advance(delta, seconds=, minutes=, hours=, days=)``, checked."""
    total = 0.0
    if isinstance(delta, timedelta):
        total += delta.total_seconds()
    elif delta is not None:
        total += _check_number(delta, "delta")
    for name, v, mult in (
        ("seconds", seconds, 1),
        ("minutes", minutes, 60),
        ("hours", hours, 3600),
        ("days", days, 86400),
    ):
        total += _check_number(v, name) * mult
    if total < 0:
        raise ValueError(f"time can't go backwards (advance by {total!r} s); use a delta >= 0")
    return total


def _check_number(v: object, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number of seconds (got {v!r} that is a {type(v)!r})")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite (got {v!r})")
    return f


def check_store(make_store: Callable[[], Any]) -> None:
    """Run the store contract suite against a store implementation.

    *make_store* returns a fresh, empty store each call. Every check of the suite that timewheel's
    own stores pass runs in turn; the first failure raises ``AssertionError`` naming the check.
    Use it to prove a third-party ``Store``::

        def test_my_store_conforms(tmp_path):
            timewheel.testing.check_store(lambda: MyStore(tmp_path / "db"))
    """
    from timewheel._contract import CHECKS

    for check in CHECKS:
        store = make_store()
        try:
            check(store)
        except AssertionError as e:
            raise AssertionError(f"store contract check {check.__name__} failed: {e}") from e
        finally:
            store.close()
