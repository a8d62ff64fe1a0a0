"""The scheduler model of ``tests/test_scheduler_model.py``, run against ``AsyncScheduler``.

The same rules and invariants: random interleavings of scheduling (compact fast path and full
path), cancelling, advancing a ``FakeClock``, and simulated workers of the ``"ext"`` queue that
pull, claim, heartbeat, complete, fail or vanish; after every step, only legal moves, versions
increasing, terminal states absorbing, nothing early, nothing lost, statistics agreeing with the
store. Here the machine's tasks run on an event loop: coroutine bodies as asyncio tasks, plain
ones in the dispatcher's threads, the clock advanced with ``advance_async``. Each rule runs the
loop until its coroutine is done (hypothesis rules are plain functions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize

from tests.test_scheduler_model import (
    INLINE,
    LEASE,
    MAX_RECOVERIES,
    SETTINGS,
    SchedulerMachine,
    _Boom,
)
from timewheel.aio import AsyncScheduler
from timewheel.ready import ReadyQueue
from timewheel.runtime import Runtime, SchedulerStatistics
from timewheel.testing import FakeClock


class LoopClock(FakeClock):
    """A ``FakeClock`` whose plain ``advance`` runs ``advance_async`` on the machine's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop

    def advance(
        self,
        delta: timedelta | float | None = None,
        *,
        seconds: float = 0,
        minutes: float = 0,
        hours: float = 0,
        days: float = 0,
    ) -> list[Any]:
        step = self.advance_async(delta, seconds=seconds, minutes=minutes, hours=hours, days=days)
        return self.loop.run_until_complete(step)


class SyncView:
    """The calls the machine makes on a ``Scheduler``, made on an ``AsyncScheduler``."""

    def __init__(self, sched: AsyncScheduler, loop: asyncio.AbstractEventLoop) -> None:
        self.sched = sched
        self.loop = loop

    def schedule(self, func: Callable[..., Any], /, *args: Any, **options: Any) -> Any:
        return self.loop.run_until_complete(self.sched.schedule(func, *args, **options))

    def cancel(self, task_id: str) -> bool:
        return self.loop.run_until_complete(self.sched.cancel(task_id))

    def run_pending(self) -> None:
        clock = self.sched.clock
        assert isinstance(clock, FakeClock)
        self.loop.run_until_complete(clock.advance_async(0))

    @property
    def ready_queue(self) -> ReadyQueue:
        return self.sched.ready_queue

    @property
    def runtime(self) -> Runtime:
        return self.sched.runtime

    def statistics(self) -> SchedulerStatistics:
        return self.sched.statistics()

    def shutdown(self) -> None:
        try:
            self.loop.run_until_complete(self.sched.shutdown())
        finally:
            self.loop.close()


class AsyncSchedulerMachine(SchedulerMachine):
    """:class:`SchedulerMachine` on an ``AsyncScheduler`` (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = LoopClock(self.loop)

    @initialize(capacity=st.sampled_from([2, 1000]))
    def start(self, capacity: int) -> None:
        sched = AsyncScheduler(
            clock=self.clock,
            store=self.store,
            queues=INLINE,
            lease=LEASE,
            ready_capacity=capacity,
            max_lease_recoveries=MAX_RECOVERIES,
            keep_finished=None,  # the model keeps every task it saw; retention is tested apart
        )
        self.loop.run_until_complete(sched.start())
        self.sched = SyncView(sched, self.loop)  # type: ignore[assignment]

    async def _body(self, task_id: str, fail_times: int) -> str:  # type: ignore[override]
        """The full path's tasks are coroutines here (the fast path's stay plain functions,
        which run in the dispatcher's threads)."""
        now = self.clock.time()
        due = self.store.get(task_id).due
        if now < due:
            self.early.append((task_id, now, due))
        await asyncio.sleep(0)
        self.calls[task_id] += 1
        if self.calls[task_id] <= fail_times:
            raise _Boom(f"{task_id} fails (call {self.calls[task_id]})")
        return "ok"

    def teardown(self) -> None:
        if self.sched is None:
            self.loop.close()
            return
        super().teardown()


TestAsyncSchedulerMachine = AsyncSchedulerMachine.TestCase
TestAsyncSchedulerMachine.settings = SETTINGS
