"""``Job``: a handle on one task, shaped like ``concurrent.futures.Future``.

A handle holds the runtime it came from and the task id, nothing else: it reads the store on each
call, so a million pending tasks cost no million futures, and a handle obtained later with
``sched.get(id)`` (or in another process, with a durable store) behaves like the one
``schedule()`` returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar, overload

from timewheel.clock import to_datetime
from timewheel.errors import JobCancelledError, TaskFailedError
from timewheel.stores.base import Store
from timewheel.task import TERMINAL_STATES, Task, TaskState

__all__ = [
    "TRACEBACK_KEY",
    "Job",
    "JobRuntime",
    "Jobs",
    "Scheduling",
    "Step",
    "TaskFunction",
    "step",
    "task_error",
    "task_traceback",
]

R = TypeVar("R")


class JobRuntime(Protocol):
    """**Protocol:** what a :class:`Job` handle asks of the runtime that made it."""

    @property
    def store(self) -> Store:
        """Where the task lives."""
        ...

    def cancel(self, task_id: str) -> bool:
        """Cancel a PENDING or READY task; True if it is now cancelled."""
        ...

    def wait(self, task_id: str, timeout: float | None) -> Task:
        """Block until the task is terminal (or *timeout* seconds pass); its final snapshot."""
        ...

    def add_done_callback(self, task_id: str, fn: Callable[[Job], object]) -> None:
        """Call ``fn(job)`` when the task ends (at once if it already has)."""
        ...

    def hold(self, handle: Job) -> None:
        """Keep *handle*'s task from retention for as long as *handle* is referenced."""
        ...

    def hold_many(self, handles: Jobs) -> None:
        """Keep the tasks of *handles* from retention for as long as *handles* is referenced."""
        ...


class Job:
    """A handle on one task, shaped like ``concurrent.futures.Future``.

    Handles are cheap views: they hold the runtime and the id, and read the store on each call.
    While a handle is referenced, the scheduler's retention keeps its task, finished or not
    (see ``keep_finished``); once every handle on it is dropped, a finished task is deleted when
    its retention period is over.
    """

    __slots__ = ("__weakref__", "_runtime", "id")

    def __init__(self, runtime: JobRuntime, task_id: str) -> None:
        self._runtime = runtime
        self.id = task_id
        runtime.hold(self)

    @property
    def task(self) -> Task:
        """The task's current snapshot (raises ``TaskNotFoundError`` if it was pruned)."""
        return self._runtime.store.get(self.id)

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
        """True if the task was cancelled."""
        return self.task.state is TaskState.CANCELLED

    def running(self) -> bool:
        """True while a worker runs the task."""
        return self.task.state is TaskState.RUNNING

    def cancel(self) -> bool:
        """Cancel the task if it has not started; True if it is now cancelled."""
        return self._runtime.cancel(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the outcome and return the function's return value.

        Raises:
            JobTimeoutError: *timeout* seconds (on the scheduler's clock) passed first.
            JobCancelledError: the task was cancelled.
            Exception: the task's own exception, when it failed in this process; otherwise
                ``TaskFailedError`` with the stored error summary (also for TIMED_OUT and
                UPSTREAM_FAILED).
        """
        task = self._runtime.wait(self.id, timeout)
        if task.state is TaskState.SUCCEEDED:
            return task.result
        raise self._error(task)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the outcome; the exception a failed task raised, or None on success."""
        task = self._runtime.wait(self.id, timeout)
        if task.state is TaskState.SUCCEEDED:
            return None
        return self._error(task)

    def _error(self, task: Task) -> BaseException:
        return task_error(task)

    def add_done_callback(self, fn: Callable[[Job], object]) -> None:
        """Call ``fn(job)`` when the task ends (at once if it already has), in the thread that
        ended it. Only outcomes reached in this process are seen."""
        self._runtime.add_done_callback(self.id, fn)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id and other._runtime is self._runtime

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        t = self._runtime.store.find(self.id)
        state = t.state.value if t is not None else "missing"
        return f"<Job {self.id!r} {state}>"


TRACEBACK_KEY = "traceback"
"""The ``extra`` key under which a durable store keeps a failed run's formatted traceback."""


class Jobs(Sequence[Job]):
    """The handles of a ``schedule_many`` batch, in order: a sequence of :class:`Job` that makes
    each handle when it is read, so a batch of a million tasks costs no million handles up front.

    It holds the runtime and the list of ids (:attr:`ids`); while it is referenced, retention
    keeps its tasks, as a handle would. It compares equal to any sequence of the same handles,
    and ``+`` with another sequence gives a list.
    """

    __slots__ = ("__weakref__", "_runtime", "ids")

    def __init__(self, runtime: JobRuntime, ids: list[str]) -> None:
        self._runtime = runtime
        #: the task ids, in batch order
        self.ids = ids
        runtime.hold_many(self)

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> Job: ...

    @overload
    def __getitem__(self, index: slice) -> list[Job]: ...

    def __getitem__(self, index: int | slice) -> Job | list[Job]:
        if isinstance(index, slice):
            runtime = self._runtime
            return [Job(runtime, i) for i in self.ids[index]]
        return Job(self._runtime, self.ids[index])

    def __iter__(self) -> Iterator[Job]:
        runtime = self._runtime
        return (Job(runtime, i) for i in self.ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Jobs):
            return other._runtime is self._runtime and other.ids == self.ids
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __add__(self, other: Sequence[Job]) -> list[Job]:
        return [*self, *other]

    def __radd__(self, other: Sequence[Job]) -> list[Job]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"<Jobs of {len(self.ids)} tasks>"


def task_traceback(task: Task) -> str | None:
    """The formatted traceback of *task*'s failed run, as text, when the store kept one.

    A durable store keeps it in ``task.extra["traceback"]`` (the last 8 KB, with the exception's
    chain); a memory store keeps the exception itself, whose ``formatted_traceback`` holds the
    same text once the run's frames were released. ``None`` for a run that raised nothing (a
    success, a timeout, a cancellation) or a refusal that never ran.
    """
    text = task.extra.get(TRACEBACK_KEY)
    if isinstance(text, str):
        return text
    kept = getattr(task.result, "formatted_traceback", None)
    return kept if isinstance(task.result, BaseException) and isinstance(kept, str) else None


def task_error(task: Task) -> BaseException:
    """The exception that waiting on a task that ended other than SUCCEEDED raises:
    ``JobCancelledError`` when cancelled, the task's own exception when it failed in this process,
    otherwise ``TaskFailedError`` with the stored error summary."""
    if task.state is TaskState.CANCELLED:
        return JobCancelledError(f"task {task.id!r} was cancelled ({task.error or 'by request'})")
    if isinstance(task.result, BaseException):
        return task.result
    return TaskFailedError(f"task {task.id!r} ended {task.state.value}: {task.error}")


class Scheduling(Protocol):
    """**Protocol:** what a :class:`TaskFunction` schedules through (a ``Scheduler``)."""

    def schedule(self, func: Callable[..., Any] | str, /, *args: Any, **options: Any) -> Any:
        """Schedule ``func(*args)``; see ``Scheduler.schedule``."""
        ...


@dataclass(frozen=True, slots=True)
class Step:
    """One step of :meth:`Scheduler.chain`: a function, its arguments and scheduling options."""

    func: Callable[..., Any] | str
    args: tuple[Any, ...]
    options: Mapping[str, Any]


def step(func: Callable[..., Any] | str, /, *args: Any, **options: Any) -> Step:
    """A :meth:`Scheduler.chain` step: ``step(send, "bob", kwargs={...}, retry=Retry(3))``."""
    return Step(func, args, options)


class TaskFunction(Generic[R]):
    """A function registered with ``@sched.task(...)``: call it directly, or ``.schedule(...)`` it
    with the registered defaults (per-call options override them)."""

    def __init__(self, scheduler: Scheduling, func: Callable[..., R], defaults: dict[str, Any]):
        self._sched = scheduler
        self.func = func
        self.defaults = defaults
        self.__name__ = getattr(func, "__name__", "task")
        self.__qualname__ = getattr(func, "__qualname__", self.__name__)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.func(*args, **kwargs)

    def schedule(self, *args: Any, **options: Any) -> Job:
        """Schedule a run; options as for :meth:`Scheduler.schedule`."""
        merged = {**self.defaults, **options}
        job = self._sched.schedule(self.func, *args, **merged)
        assert isinstance(job, Job), "use Scheduler.schedule() for cron=/every= schedules"
        return job
