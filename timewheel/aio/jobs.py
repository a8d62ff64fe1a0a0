"""``AsyncJob``: the asyncio twin of :class:`~timewheel.jobs.Job`, and the futures that wait on it.

An ``AsyncJob`` is a view, like ``Job``: it holds its scheduler and the task id and reads the store
on each call. ``await job`` (or ``await job.result(timeout=)``) waits without blocking the loop:
the first waiter of a task registers one done callback with the runtime, which resolves every
future waiting on that task when it ends, on the loop's thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Callable, Generator
from datetime import datetime
from typing import Any, Protocol

from timewheel.clock import Clock, to_datetime
from timewheel.errors import JobTimeoutError, SchedulerStateError
from timewheel.jobs import Job, task_error
from timewheel.stores.base import Store
from timewheel.task import TERMINAL_STATES, Task, TaskState

__all__ = ["AsyncJob", "AsyncJobHost", "Waiters"]


class AsyncJobHost(Protocol):
    """**Protocol:** what an :class:`AsyncJob` asks of its scheduler (an ``AsyncScheduler``)."""

    @property
    def store(self) -> Store:
        """Where the task lives."""
        ...

    async def cancel(self, task_id: str | AsyncJob) -> bool:
        """Cancel the task (see ``AsyncScheduler.cancel``)."""
        ...

    async def wait(self, task_id: str, timeout: float | None = None) -> Task:
        """Wait until the task is terminal; its final snapshot."""
        ...

    def add_done_callback(self, task_id: str, fn: Callable[[AsyncJob], object]) -> None:
        """Call ``fn(job)`` on the loop when the task ends (soon, if it already has)."""
        ...

    def hold(self, handle: AsyncJob) -> None:
        """Keep *handle*'s task from retention for as long as *handle* is referenced."""
        ...


class AsyncJob:
    """A handle on one task of an ``AsyncScheduler``.

    ``await job`` returns the function's result (or raises its exception), as ``await
    job.result()`` does. ``done()``, ``state`` and the other properties read the store at once
    (with a durable store, one quick read on the calling thread). While a handle is
    referenced, retention keeps its task (see ``keep_finished``).
    """

    __slots__ = ("__weakref__", "_host", "id")

    def __init__(self, host: AsyncJobHost, task_id: str) -> None:
        self._host = host
        self.id = task_id
        host.hold(self)

    @property
    def task(self) -> Task:
        """The task's current snapshot (raises ``TaskNotFoundError`` if it was pruned)."""
        return self._host.store.get(self.id)

    @property
    def state(self) -> TaskState:
        """The task's current state."""
        return self.task.state

    @property
    def due(self) -> datetime:
        """When the task is (or was) due, as an aware UTC datetime."""
        return to_datetime(self.task.due)

    def done(self) -> bool:
        """True once the task reached a terminal state."""
        return self.task.state in TERMINAL_STATES

    def cancelled(self) -> bool:
        """True if the task was cancelled before it started."""
        return self.task.state is TaskState.CANCELLED

    def running(self) -> bool:
        """True while the task runs."""
        return self.task.state is TaskState.RUNNING

    async def cancel(self) -> bool:
        """Cancel the task; see ``AsyncScheduler.cancel`` (a running coroutine is cancelled too)."""
        return await self._host.cancel(self.id)

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the outcome and return the function's return value.

        *timeout* is measured on the scheduler's clock (a ``FakeClock``'s time passes only as it
        is advanced).

        Raises:
            JobTimeoutError: *timeout* seconds passed first (the task is unaffected).
            JobCancelledError: the task was cancelled (before it started, or while running).
            SchedulerStateError: the scheduler stopped while the task still waits to run.
            Exception: the task's own exception when it failed in this process, otherwise
                ``TaskFailedError`` with the stored error summary.
        """
        task = await self._host.wait(self.id, timeout)
        if task.state is TaskState.SUCCEEDED:
            return task.result
        raise task_error(task)

    async def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the outcome; the exception a failed task raised, or None on success."""
        task = await self._host.wait(self.id, timeout)
        if task.state is TaskState.SUCCEEDED:
            return None
        return task_error(task)

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()

    def add_done_callback(self, fn: Callable[[AsyncJob], object]) -> None:
        """Call ``fn(job)`` on the event loop's thread when the task ends (soon, if it already
        has). Only outcomes reached in this process are seen."""
        self._host.add_done_callback(self.id, fn)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AsyncJob) and other.id == self.id and other._host is self._host

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        t = self._host.store.find(self.id)
        state = t.state.value if t is not None else "missing"
        return f"<AsyncJob {self.id!r} {state}>"


class Waiters:
    """The futures waiting for tasks to end, on one event loop.

    :meth:`watch` returns the ``register`` step the scheduler runs where its store is reached
    (``Runtime.add_done_callback``): the runtime then calls back, in whatever thread ended the
    task, and the futures are resolved on the loop. Timeouts run on the scheduler's clock: on the
    real clock a loop timer, on a driving clock (``FakeClock``) a deadline the clock steps to.
    """

    def __init__(self, clock: Clock, *, driving: bool) -> None:
        self._clock = clock
        self._driving = driving
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._by_id: dict[str, list[asyncio.Future[Task]]] = {}
        # driving clock only: (end, sequence, future, task id, timeout)
        self._deadlines: list[tuple[float, int, asyncio.Future[Task], str, float]] = []
        self._seq = itertools.count()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Resolve futures on *loop* (the scheduler's, at its start)."""
        self._loop = loop
        self._thread = threading.get_ident()

    def add(self, task_id: str, timeout: float | None) -> tuple[asyncio.Future[Task], bool]:
        """A future for *task_id*'s final snapshot; True when it is the first waiter of the task
        (the caller then registers :meth:`ended` with the runtime)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Task] = loop.create_future()
        waiting = self._by_id.get(task_id)
        first = waiting is None
        if waiting is None:
            waiting = self._by_id[task_id] = []
        waiting.append(fut)
        if timeout is not None:
            if self._driving:
                end = self._clock.time() + timeout
                heapq.heappush(self._deadlines, (end, next(self._seq), fut, task_id, timeout))
            else:
                handle = loop.call_later(timeout, self._time_out, fut, task_id, timeout)
                fut.add_done_callback(lambda _: handle.cancel())
        return fut, first

    def discard(self, task_id: str, fut: asyncio.Future[Task]) -> None:
        """Forget one future (its waiter found the outcome by itself)."""
        waiting = self._by_id.get(task_id)
        if waiting is not None and fut in waiting:
            waiting.remove(fut)

    def ended(self, job: Job) -> None:
        """The runtime's done callback: *job*'s task ended (called in the thread that ended it)."""
        task = job.task
        if threading.get_ident() == self._thread:
            self._resolve(task)
        elif self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._resolve, task)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more

    def _resolve(self, task: Task) -> None:
        for fut in self._by_id.pop(task.id, ()):
            if not fut.done():
                fut.set_result(task)

    def _time_out(self, fut: asyncio.Future[Task], task_id: str, timeout: float) -> None:
        self.discard(task_id, fut)
        if not fut.done():
            fut.set_exception(
                JobTimeoutError(
                    f"task {task_id!r} did not end within {timeout} s; the task is unaffected, "
                    "wait again or cancel it"
                )
            )

    # -- a driving clock's side -------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """The earliest timeout of a waiter (driving clock only)."""
        heap = self._deadlines
        while heap and heap[0][2].done():
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def expire(self, now: float) -> None:
        """Time out the waiters whose timeout ended by *now* (driving clock only)."""
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, _, fut, task_id, timeout = heapq.heappop(heap)
            if not fut.done():
                self._time_out(fut, task_id, timeout)

    def waiting(self) -> list[str]:
        """The ids of the tasks some future waits on."""
        return list(self._by_id)

    def fail_unstarted(self, states: dict[str, TaskState | None]) -> None:
        """The scheduler stopped: waiters of tasks that can no longer run here (*states* maps a
        task id to its state, None when missing) get ``SchedulerStateError``."""
        for task_id, state in states.items():
            if state not in (TaskState.PENDING, TaskState.READY, None):
                continue
            what = state.value if state is not None else "missing"
            for fut in self._by_id.pop(task_id, ()):
                if not fut.done():
                    fut.set_exception(
                        SchedulerStateError(
                            f"task {task_id!r} is {what} and the scheduler was shut down; it "
                            "will not run in this scheduler"
                        )
                    )
