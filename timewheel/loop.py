"""The trigger loop: the one thread that reads the clock and sleeps.

Each pass it calls its *step* (a :meth:`timewheel.trigger.Trigger.fire`) to do everything due at
``clock.time()``, then sleeps until the deadline the step returned, an
earlier task arriving (:meth:`TriggerLoop.wake`), or a cap of ``max_sleep`` seconds. Sleeps run on
the monotonic clock; the cap means a wall-clock jump is noticed within ``max_sleep`` and re-planned:
a forward jump fires what became due, a backward jump fires nothing twice (the wheel never moves
back). The loop never runs user code.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from timewheel.clock import Clock

__all__ = ["TriggerLoop"]

log = logging.getLogger("timewheel.loop")


class TriggerLoop:
    """Runs ``step(now)`` on a daemon thread, sleeping until the deadline it returns.

    Args:
        step: does everything due at *now*; returns the next deadline (epoch seconds) or None.
        clock: read for ``now`` and slept on.
        max_sleep: the longest sleep, so a wall-clock jump is noticed within it.
    """

    def __init__(
        self, step: Callable[[float], float | None], clock: Clock, *, max_sleep: float = 1.0
    ) -> None:
        self._step = step
        self._clock = clock
        self._max_sleep = max_sleep
        self._cond = threading.Condition()
        self._woken = False
        self._stopping = False
        #: the instant the loop sleeps towards (epoch seconds); None while it runs a step, when
        #: any new task may change the plan. Read without a lock by :meth:`wake`'s callers
        self.planned: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the loop thread."""
        self._thread = threading.Thread(target=self._run, name="timewheel-trigger", daemon=True)
        self._thread.start()

    def wake(self, deadline: float | None = None) -> None:
        """Re-plan now if *deadline* (epoch seconds) is earlier than the planned wake-up."""
        planned = self.planned  # unlocked read: at worst we take the lock for nothing
        if deadline is not None and planned is not None and deadline >= planned:
            return
        with self._cond:
            if deadline is not None and self.planned is not None and deadline >= self.planned:
                return
            self._woken = True
            self._cond.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the loop and wait for its thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def _was_stopped(self) -> bool:
        return self._stopping  # set by stop() from another thread while the tick ran

    def _was_woken(self) -> bool:
        return self._woken  # set by wake() from other threads while the tick ran

    def _run(self) -> None:
        clock = self._clock
        while True:
            with self._cond:
                if self._stopping:
                    return
                self._woken = False
            try:
                deadline = self._step(clock.time())
            except Exception:  # keep triggering; a store hiccup must not stop the scheduler
                log.exception("trigger loop: tick failed; retrying shortly")
                deadline = clock.time() + min(0.1, self._max_sleep)
            with self._cond:
                if self._was_stopped():
                    return
                if self._was_woken():
                    continue
                now = clock.time()
                delay = (
                    self._max_sleep if deadline is None else min(deadline - now, self._max_sleep)
                )
                self.planned = now + delay
                if delay > 0:
                    clock.wait(self._cond, delay)
                self.planned = None
