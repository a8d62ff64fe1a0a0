"""Time on the event loop: the trigger woken by the loop's own timer, or stepped by a fake clock.

:class:`LoopTimer` is the asyncio twin of :class:`~timewheel.loop.TriggerLoop`, without a thread:
one ``loop.call_at`` handle is armed for the trigger's next deadline (capped at ``max_sleep``, so a
wall-clock jump is noticed within it), the callback runs a trigger pass and arms the next one, and
a task placed earlier than the armed deadline re-arms it (:meth:`LoopTimer.wake`, callable from
any thread). With a store whose calls block, the pass runs in the store's runner and the timer is
armed again when it returns.

:class:`AsyncClockDriver` is what an ``AsyncScheduler`` attaches to a ``FakeClock``: an
:class:`~timewheel.clock.AsyncDriven` whose steps run the trigger, time out runs and waiters, and
let the started tasks settle before the clock moves on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from timewheel.aio.dispatch import AsyncDispatcher
from timewheel.aio.jobs import Waiters
from timewheel.aio.runner import StoreRunner
from timewheel.clock import Clock
from timewheel.runtime import ClockDriver, Runtime

__all__ = ["AsyncClockDriver", "LoopTimer"]

log = logging.getLogger("timewheel.aio")

_NOTHING = object()  # no wake-up was asked for during a pass


class LoopTimer:
    """Runs ``step(now)`` from the event loop's timer, at the deadline it returns.

    Args:
        step: does everything due at *now* (a trigger pass); returns the next deadline (epoch
            seconds) or None.
        clock: read for ``now``.
        runner: where *step* runs (it calls the store).
        max_sleep: the longest time between passes, so a wall-clock jump is noticed within it.
    """

    def __init__(
        self,
        step: Callable[[float], float | None],
        clock: Clock,
        runner: StoreRunner,
        *,
        max_sleep: float = 1.0,
    ) -> None:
        self._step = step
        self._clock = clock
        self._runner = runner
        self._max_sleep = max_sleep
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._handle: asyncio.TimerHandle | None = None
        #: the instant the armed handle fires (epoch seconds); None while none is armed. Read
        #: without a lock by :meth:`wake`'s callers
        self.planned: float | None = None
        self._firing = False
        self._again: Any = _NOTHING  # the earliest wake-up asked for during a pass
        self._stopped = False
        self._pass: asyncio.Task[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the first pass as soon as the loop gets to it."""
        self._loop = loop
        self._thread = threading.get_ident()
        self._arm(self._clock.time())

    def stop(self) -> None:
        """Disarm; no pass starts after this."""
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def wake(self, deadline: float | None = None) -> None:
        """Re-arm if *deadline* (epoch seconds; None: now) is earlier than the armed one.
        Callable from any thread; cheap when nothing changes."""
        planned = self.planned
        if deadline is not None and planned is not None and deadline >= planned:
            return
        if threading.get_ident() == self._thread:
            self._rearm(deadline)
            return
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._rearm, deadline)
            except RuntimeError:
                pass  # the loop is closed

    def _rearm(self, deadline: float | None) -> None:
        if self._stopped:
            return
        if self._firing:
            again = self._again
            if again is _NOTHING or deadline is None or (again is not None and deadline < again):
                self._again = deadline
            return
        if deadline is None:
            deadline = self._clock.time()
        if self.planned is not None and deadline >= self.planned:
            return
        self._arm(deadline)

    def _arm(self, deadline: float | None) -> None:
        loop = self._loop
        assert loop is not None
        if self._handle is not None:
            self._handle.cancel()
        now = self._clock.time()
        delay = self._max_sleep if deadline is None else min(deadline - now, self._max_sleep)
        self.planned = now + delay
        self._handle = loop.call_at(loop.time() + delay, self._on_timer)

    def _on_timer(self) -> None:
        self._handle = None
        self.planned = None
        if self._stopped:
            return
        self._firing = True
        if self._runner.blocking:
            assert self._loop is not None
            self._pass = self._loop.create_task(self._pass_off_loop())
            return
        try:
            deadline = self._step(self._clock.time())
        except Exception:  # keep triggering; a store hiccup must not stop the scheduler
            log.exception("trigger pass failed; retrying shortly")
            deadline = self._clock.time() + min(0.1, self._max_sleep)
        finally:
            self._firing = False
        self._next(deadline)

    async def _pass_off_loop(self) -> None:
        try:
            deadline = await self._runner.run(self._step, self._clock.time())
        except Exception:
            log.exception("trigger pass failed; retrying shortly")
            deadline = self._clock.time() + min(0.1, self._max_sleep)
        finally:
            self._firing = False
        self._next(deadline)

    def _next(self, deadline: float | None) -> None:
        if self._stopped:
            return
        again, self._again = self._again, _NOTHING
        if again is not _NOTHING:
            asked = self._clock.time() if again is None else again
            deadline = asked if deadline is None else min(deadline, asked)
        self._arm(deadline)

    async def idle(self) -> None:
        """Return once no pass is running off the loop."""
        running = self._pass
        if running is not None and not running.done():
            await asyncio.wait({running})


class AsyncClockDriver:
    """The :class:`~timewheel.clock.AsyncDriven` side of an ``AsyncScheduler`` on a clock that
    drives time (``FakeClock``). Its deadlines are the trigger's, the lease expiries (as the
    thread scheduler's :class:`~timewheel.runtime.ClockDriver` has them), the runs' timeouts and
    the waiters' timeouts."""

    __slots__ = ("__weakref__", "dispatcher", "driver", "job", "runner", "runtime", "waiters")

    def __init__(
        self,
        runtime: Runtime,
        dispatcher: AsyncDispatcher,
        waiters: Waiters,
        runner: StoreRunner,
        job: Callable[[str], Any],
    ) -> None:
        self.runtime = runtime
        self.dispatcher = dispatcher
        self.waiters = waiters
        self.runner = runner
        self.job = job
        self.driver = ClockDriver(runtime, dispatcher)

    def next_deadline(self) -> float | None:
        """The earliest of the trigger's deadline, a lease expiry, a run's or a waiter's timeout."""
        if not self.runtime.running:
            return None
        found = [
            d
            for d in (
                self.driver.next_deadline(),
                self.dispatcher.next_timeout(),
                self.waiters.next_deadline(),
            )
            if d is not None
        ]
        return min(found, default=None)

    def fire(self, now: float) -> list[Any]:
        """Refused: the tasks run on the event loop, so the clock must be advanced from it."""
        raise RuntimeError(
            "an AsyncScheduler runs its tasks on the event loop: advance its FakeClock with "
            "'await clock.advance_async(...)'"
        )

    async def fire_async(self, now: float) -> list[Any]:
        """Trigger what is due at *now*, time out runs and waiters, and let the started tasks
        settle; the handles of the runs that started."""
        if not self.runtime.running:
            return []
        dispatcher = self.dispatcher
        dispatcher.record()
        try:
            if self.runner.blocking:
                await self.runner.run(self.driver.fire, now)
            else:
                self.driver.fire(now)
            dispatcher.expire(now)
            self.waiters.expire(now)
            await dispatcher.settle()
        finally:
            started = dispatcher.recorded()
        return [self.job(task_id) for task_id in started]

    def __repr__(self) -> str:
        return f"<AsyncClockDriver of {self.runtime.store!r}>"
