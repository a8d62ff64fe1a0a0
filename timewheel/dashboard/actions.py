"""The dashboard's writes, usable without a running scheduler and without a web framework.

Each write is one atomic store operation: a compare-and-swap ``transition`` or
``update_schedule`` (retried on a lost swap after reading again), or an ``insert`` of a new task
that never overwrites one (retry now refuses an existing id and takes the next; run now keeps
the run already inserted for the same instant). A running scheduler sees the result on its next
look at the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from timewheel.clock import Clock, SystemClock
from timewheel.errors import DuplicateKeyError, InvalidTransitionError, VersionConflictError
from timewheel.jobs import TRACEBACK_KEY, Job
from timewheel.recurring import Recurring
from timewheel.stores.base import Store
from timewheel.task import Task, TaskState

__all__ = ["RETRYABLE", "cancel_task", "retry_now", "run_schedule_now", "set_paused"]

RETRYABLE: frozenset[TaskState] = frozenset({TaskState.FAILED, TaskState.TIMED_OUT})
"""States whose tasks "retry now" copies into a new task."""


def cancel_task(store: Store, task_id: str, now: float) -> bool:
    """Cancel a PENDING or READY task by compare-and-swap; True if it is now cancelled.

    Raises:
        TaskNotFoundError: no such task.
    """
    while True:
        task = store.get(task_id)
        if task.state is TaskState.CANCELLED:
            return True
        if task.state not in (TaskState.PENDING, TaskState.READY):
            return False
        try:
            store.transition(
                task_id,
                expected_version=task.version,
                state=TaskState.CANCELLED,
                now=now,
                error="cancelled from the dashboard",
            )
        except VersionConflictError:
            continue  # someone else moved it: look again
        return True


def retry_now(store: Store, task_id: str, now: float) -> Task:
    """Run a FAILED or TIMED_OUT task again: insert a copy due *now* and return it.

    Terminal states stay terminal (``TRANSITIONS`` has no way out of FAILED), so the failed task
    keeps its history and the copy gets a new id, ``"<id>~retry<n>"`` with the first free *n*,
    and ``extra["retry_of"]`` naming the original (the failed run's kept traceback is not
    copied). The copy starts with no attempts and no
    upstream tasks (the original's dependencies were settled when it ran).

    Raises:
        TaskNotFoundError: no such task.
        InvalidTransitionError: the task is not FAILED or TIMED_OUT.
    """
    task = store.get(task_id)
    if task.state not in RETRYABLE:
        raise InvalidTransitionError(
            f"task {task_id!r} is {task.state.value}: only failed or timed-out tasks are retried"
        )
    n = 1
    while True:
        copy = Task(
            id=f"{task.id}~retry{n}",
            func=task.func,
            args=task.args,
            kwargs=task.kwargs,
            due=now,
            retry=task.retry,
            priority=task.priority,
            queue=task.queue,
            timeout=task.timeout,
            created=now,
            updated=now,
            schedule_id=task.schedule_id,
            extra={**_without_traceback(task.extra), "retry_of": task.id},
        )
        try:
            return store.insert(copy).task
        except DuplicateKeyError:
            n += 1


def _without_traceback(extra: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in extra.items() if k != TRACEBACK_KEY}


class _StoreHost:
    """What :class:`Recurring` needs from a scheduler, for a store no scheduler serves here."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    @property
    def store(self) -> Store:
        return self._store

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def timezone(self) -> str:
        return "UTC"

    def index(self, task: Task) -> None:
        pass  # a scheduler serving the store finds the instance when it polls

    def unindex(self, ids: Sequence[str]) -> None:
        pass

    def cancel(self, task_id: str) -> bool:
        return cancel_task(self._store, task_id, self._clock.time())

    def job(self, task_id: str) -> Job:
        raise NotImplementedError("the dashboard does not wait for jobs")


def set_paused(store: Store, schedule_id: str, paused: bool, clock: Clock | None = None) -> None:
    """Pause or resume a recurring schedule exactly as ``Schedule.pause``/``resume`` do: a
    compare-and-swap on the schedule record, then its waiting instances cancelled (pause) or its
    next instance inserted (resume).

    Raises:
        TaskNotFoundError: no such schedule.
    """
    recurring = Recurring(_StoreHost(store, clock or SystemClock()))
    recurring.set_paused(schedule_id, paused)


def run_schedule_now(store: Store, schedule_id: str, clock: Clock | None = None) -> Task:
    """Run a recurring schedule once more, now, exactly as ``Schedule.run_now`` does: an extra
    instance due now beside the series (the next regular run keeps its time). Returns it.

    Raises:
        TaskNotFoundError: no such schedule.
        InvalidTransitionError: the schedule is paused.
    """
    return Recurring(_StoreHost(store, clock or SystemClock())).run_now(schedule_id)
