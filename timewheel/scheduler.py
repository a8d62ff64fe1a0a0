"""The facade users touch: ``Scheduler``, ``Job`` handles, ``@sched.task``, the default scheduler.

The scheduler contains no algorithm of its own: it writes tasks to the store (the source of truth),
indexes their due times in the timing wheel, lets the trigger loop move due tasks to the ready
queue, and lets the dispatcher's workers pull and run them. See ``docs/concepts.md``.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar, overload

from timewheel._loop import TriggerLoop
from timewheel._ready import ReadyQueue
from timewheel.clock import Clock, SystemClock, to_timestamp
from timewheel.dispatch import Dispatcher, InlineDispatcher, ThreadPoolDispatcher
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    JobCancelledError,
    JobTimeoutError,
    SchedulerStateError,
    TaskFailedError,
    VersionConflictError,
)
from timewheel.recurring import Recurring, Registry, Schedule
from timewheel.rules import Misfire, Overlap
from timewheel.stores.base import Changed, OnConflict, Store
from timewheel.stores.memory import MemoryStore
from timewheel.task import (
    EMPTY_KWARGS,
    NO_RETRY,
    TERMINAL_STATES,
    WHEN_VALUES,
    Retry,
    Task,
    TaskState,
)
from timewheel.wheel import TimingWheel, bucket_width

__all__ = [
    "EVENTS",
    "Event",
    "Job",
    "Scheduler",
    "SchedulerStatistics",
    "Step",
    "TaskFunction",
    "chain",
    "cron",
    "default_scheduler",
    "every",
    "schedule",
    "step",
]

log = logging.getLogger("timewheel")

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

EVENTS = (
    "submitted",
    "started",
    "succeeded",
    "failed",
    "retried",
    "timed_out",
    "cancelled",
    "upstream_failed",
)
"""Names of the events listeners can subscribe to."""

_P = TaskState.PENDING
_TERMINAL_EVENT = {
    TaskState.SUCCEEDED: "succeeded",
    TaskState.FAILED: "failed",
    TaskState.TIMED_OUT: "timed_out",
    TaskState.CANCELLED: "cancelled",
    TaskState.UPSTREAM_FAILED: "upstream_failed",
}


@dataclass(frozen=True, slots=True)
class Event:
    """Passed to listeners: what happened, to which task (snapshot), and the exception if any."""

    name: str
    task: Task
    exception: BaseException | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerStatistics:
    """A snapshot from :meth:`Scheduler.statistics`. Lateness is start time minus due time."""

    states: dict[str, int]
    in_wheel: int
    ready_depth: int
    ready_capacity: int
    submitted: int
    started: int
    succeeded: int
    failed: int
    retried: int
    timed_out: int
    cancelled: int
    missed_fires: int
    throughput: float
    lateness_p50: float | None
    lateness_p99: float | None
    lateness_max: float | None
    uptime: float


class Job:
    """A handle on one task, shaped like ``concurrent.futures.Future``.

    Handles are cheap views: they hold the scheduler and the id, and read the store on each call.
    """

    __slots__ = ("_sched", "id")

    def __init__(self, scheduler: Scheduler, task_id: str) -> None:
        self._sched = scheduler
        self.id = task_id

    @property
    def task(self) -> Task:
        """The task's current snapshot (raises ``TaskNotFoundError`` if it was pruned)."""
        return self._sched.store.get(self.id)

    @property
    def state(self) -> TaskState:
        """The task's current state."""
        return self.task.state

    @property
    def due(self) -> datetime:
        """When the task is (or was) due, as an aware UTC datetime."""
        from timewheel.clock import to_datetime

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
        return self._sched.cancel(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the outcome and return the function's return value.

        Raises:
            JobTimeoutError: *timeout* seconds (on the scheduler's clock) passed first.
            JobCancelledError: the task was cancelled.
            Exception: the task's own exception, when it failed in this process; otherwise
                ``TaskFailedError`` with the stored error summary (also for TIMED_OUT and
                UPSTREAM_FAILED).
        """
        task = self._sched._wait(self.id, timeout)
        if task.state is TaskState.SUCCEEDED:
            return task.result
        raise self._error(task)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the outcome; the exception a failed task raised, or None on success."""
        task = self._sched._wait(self.id, timeout)
        if task.state is TaskState.SUCCEEDED:
            return None
        return self._error(task)

    def _error(self, task: Task) -> BaseException:
        if task.state is TaskState.CANCELLED:
            return JobCancelledError(
                f"task {task.id!r} was cancelled ({task.error or 'by request'})"
            )
        if isinstance(task.result, BaseException):
            return task.result
        return TaskFailedError(f"task {task.id!r} ended {task.state.value}: {task.error}")

    def add_done_callback(self, fn: Callable[[Job], object]) -> None:
        """Call ``fn(job)`` when the task ends (at once if it already has), in the thread that
        ended it. Only outcomes reached in this process are seen."""
        self._sched._add_callback(self.id, fn)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id and other._sched is self._sched

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        t = self._sched.store.find(self.id)
        state = t.state.value if t is not None else "missing"
        return f"<Job {self.id!r} {state}>"


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

    def __init__(self, scheduler: Scheduler, func: Callable[..., R], defaults: dict[str, Any]):
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


_PLAIN_NUMBERS = (float, int)
_BIG = float(1 << 53)  # a delay beyond this (or NaN) takes the full path, which names it
_BIG_AT = _BIG * 1e3  # the same for epoch seconds


def _fast_at(options: dict[str, Any]) -> float | None:
    """The due time of ``schedule(f, at=...)`` with no other option, when it is plain: a finite
    number of epoch seconds or an aware ``datetime``. None sends the call down the full path
    (which also reports every bad value)."""
    if len(options) != 1:
        return None
    at = options.get("at")
    if at.__class__ in _PLAIN_NUMBERS and -_BIG_AT < at < _BIG_AT:
        return float(at)
    if at.__class__ is datetime and at.tzinfo is not None and at.utcoffset() is not None:
        return at.timestamp()
    return None


def _seconds(value: object, name: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a number of seconds or a timedelta (got {value!r} that is a "
            f"{type(value).__name__})"
        )
    try:
        f = float(value)
    except OverflowError:
        assert isinstance(value, int)
        raise InvalidScheduleError(
            f"{name} must be finite (got an integer of {value.bit_length()} bits, too large)"
        ) from None
    if not math.isfinite(f):
        raise InvalidScheduleError(f"{name} must be finite (got {value!r})")
    return f


class Scheduler:
    """Schedules functions to run at a future time, and runs them.

    Args:
        clock: where time comes from (default :class:`SystemClock`; tests pass a ``FakeClock``).
        store: where tasks live (default a new :class:`MemoryStore`).
        dispatcher: who runs due tasks (default ``ThreadPoolDispatcher()``).
        tick: the timing wheel's finest slot, in seconds (0.001 to 1).
        timezone: the default zone for cron rules (``"UTC"``).
        lease: seconds a worker's claim lasts without a heartbeat; an expired lease re-runs the task.
        ready_capacity: bound of the ready queue; beyond it, due tasks wait as READY in the store.
        horizon: with a durable store, how far ahead (seconds) the wheel is filled from the store.
        max_lease_recoveries: re-runs allowed after lost leases, on top of the retry policy.
        batch: most tasks moved PENDING -> READY in one store step.
        poll_interval: with a durable store shared by several processes, how often (seconds)
            the store is polled for tasks other processes scheduled or made ready; such a task
            runs at most this late.

    Use it as a context manager (``with Scheduler() as sched:``) or call :meth:`start` and
    :meth:`shutdown`. Tasks may be scheduled before :meth:`start`; none runs until then.
    With a ``FakeClock`` no thread triggers: ``clock.advance()`` does, and with an
    ``InlineDispatcher`` runs the due tasks in the calling thread, in due order.

    Thread-safe: every method may be called from any thread, including from running tasks.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        dispatcher: Dispatcher | None = None,
        tick: float = 0.001,
        timezone: str = "UTC",
        lease: float = 30.0,
        ready_capacity: int = 10_000,
        horizon: float = 300.0,
        max_lease_recoveries: int = 3,
        batch: int = 1_000,
        poll_interval: float = 1.0,
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._store: Store = store if store is not None else MemoryStore()
        self._dispatcher: Dispatcher = (
            dispatcher if dispatcher is not None else ThreadPoolDispatcher()
        )
        if lease <= 0 or not math.isfinite(lease):
            raise InvalidScheduleError(
                f"lease must be a positive number of seconds (got {lease!r})"
            )
        self.timezone = timezone
        self._lease = float(lease)
        self._horizon = float(horizon)
        self._batch = batch
        self._max_lease_recoveries = max_lease_recoveries
        self._lock = threading.RLock()
        self._done = threading.Condition(threading.Lock())
        self._wheel: TimingWheel[str] = TimingWheel(tick=tick, start=self._clock.time())
        self._ready = ReadyQueue(ready_capacity, on_low=self._on_ready_low)
        self._state: Literal["created", "running", "stopped"] = "created"
        self._fake = hasattr(self._clock, "_attach")
        self._inline = isinstance(self._dispatcher, InlineDispatcher)
        queues = getattr(self._dispatcher, "queues", None)
        self._served: frozenset[str] | None = None if queues is None else frozenset(queues)
        self._loop: TriggerLoop | None = None
        self._backlog = False
        self._refilled_until = -math.inf
        self._next_reap = -math.inf
        self._next_poll = -math.inf
        self._poll_interval = float(poll_interval)
        # generated task ids: "<6 random hex digits>-<a counter in hex>", made in C
        self._new_id: Callable[[], str] = map(
            f"{os.urandom(3).hex()}-%x".__mod__, itertools.count(1)
        ).__next__
        self._resolved: dict[str, Callable[..., Any]] = {}
        self._callbacks: dict[str, list[Callable[[Job], object]]] = {}
        self._waiting = 0  # threads in _wait (guarded by self._done)
        self._listeners: dict[str, list[Callable[[Event], object]]] = {e: [] for e in EVENTS}
        self._counts = dict.fromkeys(EVENTS, 0)
        # the fast path of schedule(): compact records in exactly our own memory store
        self._compact = self._store if type(self._store) is MemoryStore else None
        # the clock's time(); the system clock's own function when it is the plain system clock
        self._time: Callable[[], float] = (
            time.time if type(self._clock) is SystemClock else self._clock.time
        )
        self._missed_fires = 0
        self._lateness: deque[float] = deque(maxlen=100_000)
        self._started_at: float | None = None
        self._recurring = Recurring(self)

    # -- properties ---------------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        """The scheduler's clock."""
        return self._clock

    @property
    def store(self) -> Store:
        """The scheduler's store."""
        return self._store

    @property
    def dispatcher(self) -> Dispatcher:
        """The scheduler's dispatcher."""
        return self._dispatcher

    @property
    def ready_queue(self) -> ReadyQueue:
        """The ready queue (for dispatchers)."""
        return self._ready

    @property
    def lease(self) -> float:
        """Lease length in seconds."""
        return self._lease

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`shutdown`."""
        return self._state == "running"

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Scheduler:
        """Start triggering and dispatching. Returns the scheduler."""
        with self._lock:
            if self._state != "created":
                raise SchedulerStateError(
                    f"cannot start the scheduler when it is in the {self._state!r} state; "
                    "create a new Scheduler"
                )
            self._state = "running"
            self._started_at = self._clock.monotonic()
        now = self._clock.time()
        self._refill_wheel(now)
        self._backlog = True  # pick up READY tasks left in a durable store
        self._dispatcher.start(self)
        if self._fake:
            self._clock._attach(self)  # type: ignore[attr-defined]
        elif not self._inline:
            self._loop = TriggerLoop(self, self._clock)
            self._loop.start()
        return self

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop triggering, then stop the dispatcher: with *wait*, in-flight tasks may finish for
        up to *timeout* seconds; tasks still running then are released to READY. Idempotent."""
        with self._lock:
            if self._state == "stopped":
                return
            was_running = self._state == "running"
            self._state = "stopped"
        if self._loop is not None:
            self._loop.stop()
        if self._fake:
            self._clock._detach(self)  # type: ignore[attr-defined]
        if was_running:
            self._dispatcher.shutdown(wait=wait, timeout=timeout)
        self._ready.close()
        with self._done:
            self._done.notify_all()

    def __enter__(self) -> Scheduler:
        if self._state == "created":
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- scheduling -----------------------------------------------------------------------------
    @overload
    def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        cron: str,
        kwargs: Mapping[str, Any] | None = None,
        id: str | None = None,
        priority: int = 0,
        queue: str = "default",
        retry: Retry | None = None,
        timeout: float | timedelta | None = None,
        on_conflict: OnConflict | None = None,
        tz: str | Any | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        jitter: float = 0.0,
        misfire: Misfire | str = Misfire.RUN_ONCE,
        misfire_grace: float | timedelta | None = None,
        overlap: Overlap | str = Overlap.SKIP,
        max_instances: int = 1,
        max_runs: int = 100,
    ) -> Schedule: ...
    @overload
    def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        every: float | timedelta,
        kwargs: Mapping[str, Any] | None = None,
        id: str | None = None,
        priority: int = 0,
        queue: str = "default",
        retry: Retry | None = None,
        timeout: float | timedelta | None = None,
        on_conflict: OnConflict | None = None,
        tz: str | Any | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        jitter: float = 0.0,
        misfire: Misfire | str = Misfire.RUN_ONCE,
        misfire_grace: float | timedelta | None = None,
        overlap: Overlap | str = Overlap.SKIP,
        max_instances: int = 1,
        max_runs: int = 100,
    ) -> Schedule: ...
    @overload
    def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        delay: float | timedelta | None = None,
        at: datetime | float | None = None,
        kwargs: Mapping[str, Any] | None = None,
        id: str | None = None,
        priority: int = 0,
        queue: str = "default",
        retry: Retry | None = None,
        timeout: float | timedelta | None = None,
        on_conflict: OnConflict | None = None,
        after: Iterable[Job | str] | None = None,
        when: str = "all_success",
    ) -> Job: ...
    def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        delay: float | timedelta | None = None,
        **options: Any,
    ) -> Job | Schedule:
        """Schedule ``func(*args, **kwargs)``: once (*delay*/*at*) or recurring (*cron*/*every*).

        Args:
            func: a callable; with a durable store, an importable module-level function or a
                registered name (``"module:qualname"`` strings are accepted too).
            delay: seconds (or a ``timedelta``) from now; negative means due now.
            at: an aware ``datetime`` or epoch seconds; a past instant means due now.
            cron: a cron expression, evaluated in *tz* (default: the scheduler's ``timezone``);
                returns a :class:`Schedule`. See ``docs/recurring.md``.
            every: an interval (seconds or ``timedelta``) anchored at *start* (default now), in
                elapsed UTC time; returns a :class:`Schedule`.
            kwargs: the function's keyword arguments (options and arguments never mix).
            id: a unique id. One-shot: scheduling the same id again follows *on_conflict*
                (``"error"`` by default, ``"keep"`` the existing task, ``"replace"`` it).
                Recurring: defaults to the function's ``module:qualname``; registering an
                identical schedule again keeps its series, a different one replaces it (default
                ``on_conflict="replace"``).
            priority: higher runs first among tasks ready together.
            queue: the ready-queue lane; workers may serve a subset of queues.
            retry: the retry policy (default: no retries).
            timeout: seconds a run may take; an overrun is TIMED_OUT (or retried).
            after: upstream jobs (or ids): the task runs once they satisfy *when*
                (``"all_success"``, ``"all_done"``, ``"any_failed"``); without *delay*/*at* it is
                due as soon as they do.
            tz, start, end, jitter: recurring only: the cron zone, the first and last instants
                of the series (*end* exclusive), and a random delay of up to *jitter* seconds
                added to each run (the series itself never drifts).
            misfire, misfire_grace, max_runs: recurring only: what to do with slots missed while
                the scheduler was down or stalled (``Misfire.RUN_ONCE`` coalesces them,
                ``RUN_ALL`` runs up to *max_runs*, ``SKIP`` drops runs later than the grace).
            overlap, max_instances: recurring only: when the previous run is still going,
                ``"skip"`` this one, ``"queue"`` it, or ``"allow"`` up to *max_instances*.

        Exactly one of *delay*, *at*, *cron* and *every* is required, unless *after* is given.

        Raises:
            InvalidScheduleError: contradictory or malformed options (named in the message).
            TypeError: *func* is not callable, or an option has the wrong type.
            SerializationError: a durable store cannot keep *func* or the arguments.
            SchedulerStateError: the scheduler was shut down.
            TaskNotFoundError: an id in *after* does not exist.
            DuplicateKeyError: *id* exists and *on_conflict* is ``"error"``.
        """
        mem = self._compact
        if mem is not None and self._state != "stopped" and callable(func):
            # The fast path: a one-shot task with default options into the memory store, kept
            # there as a compact record. Everything else (and every error) takes the full path.
            if options:
                at = _fast_at(options) if delay is None else None
                plain = at is not None
            else:
                at = None
                # a plain number (not bool, not a subclass, not timedelta), finite
                plain = delay.__class__ in _PLAIN_NUMBERS and -_BIG < delay < _BIG
            if plain and not isinstance(func, TaskFunction):
                now = self._time()
                due = now + delay if at is None else at  # type: ignore[operator]
                task_id = self._new_id()
                watched = self._listeners["submitted"]
                if due <= now and self._loop is not None and not watched:
                    # due now: straight to READY and onto the ready queue, in one store step
                    self._enqueue((mem.add_ready(task_id, func, args, due, now),))
                    self._counts["submitted"] += 1
                    return Job(self, task_id)
                mem.add_pending(task_id, func, args, due, now)
                if watched:
                    self._count("submitted", self._store.get(task_id))
                else:
                    self._counts["submitted"] += 1
                self._place(task_id, due, now)
                return Job(self, task_id)
        unknown = options.keys() - _SCHEDULE_OPTIONS
        if unknown:
            raise TypeError(_unknown_options(unknown))
        return self._schedule(func, args, delay=delay, **options)

    def _schedule(
        self,
        func: Callable[..., Any] | str,
        args: tuple[Any, ...],
        *,
        delay: float | timedelta | None = None,
        at: datetime | float | None = None,
        cron: str | None = None,
        every: float | timedelta | None = None,
        kwargs: Mapping[str, Any] | None = None,
        id: str | None = None,
        priority: int = 0,
        queue: str = "default",
        retry: Retry | None = None,
        timeout: float | timedelta | None = None,
        on_conflict: OnConflict | None = None,
        after: Iterable[Job | str] | None = None,
        when: str = "all_success",
        tz: str | Any | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        jitter: float = 0.0,
        misfire: Misfire | str = Misfire.RUN_ONCE,
        misfire_grace: float | timedelta | None = None,
        overlap: Overlap | str = Overlap.SKIP,
        max_instances: int = 1,
        max_runs: int = 100,
    ) -> Job | Schedule:
        """The full path of :meth:`schedule` (every option, every check)."""
        if self._state == "stopped":
            raise SchedulerStateError(
                "cannot schedule on a scheduler that was shut down; create a new Scheduler"
            )
        now = self._clock.time()
        if cron is not None or every is not None:
            given = [
                n
                for n, v in (("delay", delay), ("at", at), ("cron", cron), ("every", every))
                if v is not None
            ]
            if len(given) > 1:
                raise InvalidScheduleError(
                    f"pass exactly one of delay=, at=, cron= and every= (got {' and '.join(given)})"
                )
            template = self._make_task(
                func,
                args,
                kwargs,
                now,
                now,
                "template",
                priority,
                queue,
                retry,
                timeout,
                after,
                when,
            )
            return self._recurring.create(
                func,
                args,
                kwargs,
                now=now,
                cron=cron,
                every=every,
                tz=tz,
                start=start,
                end=end,
                jitter=jitter,
                misfire=misfire,
                misfire_grace=misfire_grace,
                overlap=overlap,
                max_instances=max_instances,
                max_runs=max_runs,
                schedule_id=id,
                template=template,
                on_conflict=on_conflict or "replace",
            )
        for name, v in (("tz", tz), ("start", start), ("end", end)):
            if v is not None:
                raise InvalidScheduleError(f"{name}= applies to cron= and every= schedules only")
        on_conflict = on_conflict or "error"
        due = self._due(now, delay, at, after is not None)
        task = self._make_task(
            func, args, kwargs, due, now, id, priority, queue, retry, timeout, after, when
        )
        if on_conflict == "keep" and self._store.find(task.id) is not None:
            return Job(self, task.id)  # the existing task stands
        changed = self._store.insert(task, on_conflict=on_conflict)
        stored = changed.task
        if on_conflict == "replace":
            with self._lock:
                self._wheel.cancel(stored.id)
            self._ready.discard(stored.id)
        self._count("submitted", stored)
        self._index(stored)
        self._settled(changed.dependents)
        if stored.state in TERMINAL_STATES:
            self._notify_terminal(stored, None)
        return Job(self, stored.id)

    def chain(self, *steps: Step | Callable[..., Any], when: str = "all_success") -> list[Job]:
        """Schedule a linear pipeline: each step runs after the previous one (per *when*).

        Steps are callables (run with no arguments) or :func:`step` specs carrying arguments and
        options: ``sched.chain(step(fetch, url), step(parse), step(store, retry=Retry(3)))``.
        The first step is due now unless its options say otherwise (``delay=``/``at=``).
        Returns the jobs in order; each step can read its predecessor's result through the
        returned handles.
        """
        if not steps:
            raise InvalidScheduleError("chain() needs at least one step")
        jobs: list[Job] = []
        for st in steps:
            spec = st if isinstance(st, Step) else Step(st, (), {})
            options = dict(spec.options)
            if jobs:
                options["after"] = [jobs[-1], *options.get("after", ())]
                options.setdefault("when", when)
            elif "delay" not in options and "at" not in options and "after" not in options:
                options["delay"] = 0
            job = self.schedule(spec.func, *spec.args, **options)
            assert isinstance(job, Job)
            jobs.append(job)
        return jobs

    def cron(self, expr: str, /, **options: Any) -> Callable[[F], F]:
        """Decorator: run the function on the cron expression *expr*.

        ``@sched.cron("0 0 * * *", tz="Europe/Berlin", misfire=Misfire.RUN_ONCE)``. Options as
        for :meth:`schedule`. The function is returned unchanged, with ``.schedule_handle``.
        """

        def wrap(func: F) -> F:
            handle = self.schedule(func, cron=expr, **options)
            func.schedule_handle = handle  # type: ignore[attr-defined]
            return func

        return wrap

    def every(
        self,
        interval: float | timedelta | None = None,
        /,
        *,
        seconds: float = 0,
        minutes: float = 0,
        hours: float = 0,
        days: float = 0,
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorator: run the function every *interval* (or ``minutes=5`` etc.).

        ``@sched.every(minutes=5, jitter=10)``. Options as for :meth:`schedule`.
        """
        from timewheel.recurring import _interval

        period = _interval(interval, seconds, minutes, hours, days)

        def wrap(func: F) -> F:
            handle = self.schedule(func, every=period, **options)
            func.schedule_handle = handle  # type: ignore[attr-defined]
            return func

        return wrap

    def include(self, registry: Registry) -> list[Schedule]:
        """Schedule every recurring function declared in *registry*; their handles."""
        out: list[Schedule] = []
        for entry in registry:
            out.append(self.schedule(entry.func, **entry.options))
        return out

    def schedules(self) -> list[Schedule]:
        """Handles of every stored recurring schedule."""
        return [Schedule(self, r.id) for r in self._store.list_schedules()]

    def _unindex(self, ids: Iterable[str]) -> None:
        with self._lock:
            for i in ids:
                self._wheel.cancel(i)

    def _due(self, now: float, delay: object, at: object, has_after: bool) -> float:
        given = [n for n, v in (("delay", delay), ("at", at)) if v is not None]
        if len(given) > 1:
            raise InvalidScheduleError(
                f"pass exactly one of delay= and at= (got {' and '.join(given)})"
            )
        if delay is not None:
            return now + _seconds(delay, "delay")
        if at is not None:
            if isinstance(at, datetime):
                return to_timestamp(at)
            return _seconds(at, "at")
        if has_after:
            return now
        raise InvalidScheduleError(
            "pass exactly one of delay= or at= (e.g. delay=600 for ten minutes from now), or "
            "after=[...] to run when upstream tasks finish"
        )

    def _make_task(
        self,
        func: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None,
        due: float,
        now: float,
        task_id: str | None,
        priority: int,
        queue: str,
        retry: Retry | None,
        timeout: float | timedelta | None,
        after: Iterable[Job | str] | None,
        when: str,
    ) -> Task:
        if isinstance(func, TaskFunction):
            func = func.func
        if isinstance(func, str):
            from timewheel.refs import resolve_ref

            resolve_ref(func)  # raises SerializationError naming the reference
            ref: Callable[..., Any] | str = func
        elif not callable(func):
            raise TypeError(f"func must be callable (got {func!r} that is a {type(func).__name__})")
        else:
            ref = func
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"kwargs must be a mapping (got {type(kwargs).__name__})")
        if self._store.durable:
            from timewheel.refs import check_json, func_ref

            if not isinstance(ref, str):
                ref = func_ref(ref)
            check_json(args, kwargs or {})
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority must be an int (got {priority!r})")
        if not isinstance(queue, str) or not queue:
            raise InvalidScheduleError(f"queue must be a non-empty string (got {queue!r})")
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"retry must be a timewheel.Retry (got {retry!r})")
        tmo: float | None = None
        if timeout is not None:
            tmo = _seconds(timeout, "timeout")
            if tmo <= 0:
                raise InvalidScheduleError(f"timeout must be > 0 seconds (got {timeout!r})")
        ups: tuple[str, ...] = ()
        if after is not None:
            if isinstance(after, (Job, str)):
                after = [after]
            ups = tuple(a.id if isinstance(a, Job) else a for a in after)
            for u in ups:
                if not isinstance(u, str):
                    raise TypeError(f"after= takes Job handles or task ids (got {u!r})")
        if when not in WHEN_VALUES:
            raise InvalidScheduleError(f"when must be one of {WHEN_VALUES} (got {when!r})")
        if task_id is None:
            if self._store.durable:
                import uuid

                task_id = uuid.uuid4().hex
            else:
                task_id = self._new_id()
        elif not isinstance(task_id, str) or not task_id:
            raise InvalidScheduleError(f"id must be a non-empty string (got {task_id!r})")
        return Task(
            id=task_id,
            func=ref,
            args=args,
            kwargs=EMPTY_KWARGS if not kwargs else dict(kwargs),
            due=due,
            retry=retry if retry is not None else NO_RETRY,  # frozen: one shared default
            priority=priority,
            queue=queue,
            timeout=tmo,
            created=now,
            updated=now,
            after=ups,
            when=when,
        )

    def _index(self, task: Task) -> None:
        """Put a PENDING, runnable task in the wheel (if it belongs to the wheel's horizon)."""
        if task.state is not _P or task.unmet > 0:
            return
        if self._store.durable and task.due >= self._refilled_until:
            return  # beyond the horizon: the refill will load it
        self._place(task.id, task.due, self._clock.time())

    def _place(self, task_id: str, due: float, now: float) -> None:
        """Trigger a task that is already due here, in one store step, rather than handing it to
        the trigger loop thread (a thread switch per task under the GIL); put any other in the
        wheel and wake the loop if it is now the earliest. Recurring instances always go through
        the wheel: firing them plans the next one."""
        loop = self._loop
        if loop is not None and due <= now and "@" not in task_id:
            self._promote([task_id], now)
            return
        with self._lock:
            try:
                self._wheel.add(task_id, due)
            except DuplicateKeyError:
                pass  # placed already (a task indexed again): it keeps its slot
        if loop is not None:
            loop.wake(due)

    @overload
    def task(self, func: Callable[..., R], /) -> TaskFunction[R]: ...
    @overload
    def task(
        self, func: None = None, /, **defaults: Any
    ) -> Callable[[Callable[..., R]], TaskFunction[R]]: ...
    def task(
        self, func: Callable[..., R] | None = None, /, **defaults: Any
    ) -> TaskFunction[R] | Callable[[Callable[..., R]], TaskFunction[R]]:
        """Register a function with default options: ``@sched.task(retry=Retry(3))``.

        The decorated function stays callable and gains ``.schedule(*args, **options)``.
        """

        def wrap(f: Callable[..., R]) -> TaskFunction[R]:
            if not callable(f):
                raise TypeError(f"@task decorates callables (got {f!r})")
            return TaskFunction(self, f, defaults)

        return wrap(func) if func is not None else wrap

    def cancel(self, task_id: str | Job) -> bool:
        """Cancel a PENDING or READY task; True if it is now cancelled. A running task cannot be
        stopped (False); a finished one stays as it is (False).

        Raises:
            TaskNotFoundError: no task has that id.
        """
        if isinstance(task_id, Job):
            task_id = task_id.id
        while True:
            t = self._store.get(task_id)
            if t.state is TaskState.CANCELLED:
                return True
            if t.state not in (TaskState.PENDING, TaskState.READY):
                return False
            try:
                changed = self._store.transition(
                    task_id,
                    expected_version=t.version,
                    state=TaskState.CANCELLED,
                    now=self._clock.time(),
                    error="cancelled by request",
                )
            except VersionConflictError:
                continue  # someone else moved it: look again
            break
        with self._lock:
            self._wheel.cancel(task_id)
        self._ready.discard(task_id)
        self._notify_terminal(changed.task, None)
        self._settled(changed.dependents)
        return True

    def get(self, task_id: str) -> Job:
        """The handle of an existing task. Raises ``TaskNotFoundError``."""
        self._store.get(task_id)
        return Job(self, task_id)

    def jobs(self, state: TaskState | Iterable[TaskState] | None = None) -> list[Job]:
        """Handles of the tasks in *state* (all when None), earliest due first."""
        return [Job(self, t.id) for t in self._store.tasks(state=state)]

    # -- listeners ------------------------------------------------------------------------------
    def add_listener(self, fn: Callable[[Event], object], *events: str) -> None:
        """Call ``fn(event)`` for the named events (all when none are named).

        Listeners run in the thread where the event happened; their exceptions are logged.
        """
        names = events or EVENTS
        for e in names:
            if e not in self._listeners:
                raise InvalidScheduleError(f"unknown event {e!r}; events are {', '.join(EVENTS)}")
        for e in names:
            self._listeners[e].append(fn)

    def remove_listener(self, fn: Callable[[Event], object]) -> None:
        """Stop calling *fn*."""
        for lst in self._listeners.values():
            while fn in lst:
                lst.remove(fn)

    def _count(self, name: str, task: Task, exc: BaseException | None = None) -> None:
        self._counts[name] += 1
        listeners = self._listeners[name]
        if listeners:
            ev = Event(name, task, exc)
            for fn in list(listeners):
                try:
                    fn(ev)
                except Exception:
                    log.exception("listener %r failed on %s of task %r", fn, name, task.id)

    # -- the trigger side -------------------------------------------------------------------------
    def _tick(self, now: float) -> float | None:
        """Everything due at *now*: wheel -> store READY -> ready queue; leases; refills."""
        if now >= self._next_reap:  # first, so re-queued tasks due now fire in this tick
            self._reap(now)
            self._next_reap = now + min(1.0, self._lease / 4)
        with self._lock:
            ids = self._wheel.advance(now)
        for i in range(0, len(ids), self._batch):
            self._promote(ids[i : i + self._batch], now)
        if self._backlog and self._refill_due():
            self._refill_ready()
        if self._store.durable and now + self._horizon / 2 >= self._refilled_until:
            self._refill_wheel(now)
        d = self._next_deadline()
        if self._store.durable and not self._fake:
            # other processes share the store: look for what they scheduled or made ready
            if now >= self._next_poll:
                self._poll(now)
                self._next_poll = now + self._poll_interval
            d = self._next_poll if d is None else min(d, self._next_poll)
        return d

    def _poll(self, now: float) -> None:
        """Load tasks due within the next poll interval that another process inserted, and queue
        READY tasks another process promoted (claims are compare-and-swap: one process wins)."""
        soon = self._store.due_before(now + 2 * self._poll_interval, limit=10_000)
        with self._lock:
            for tid, due in soon:
                if tid not in self._wheel:
                    self._wheel.add(tid, due)
        if self._ready.free:
            self._refill_ready()

    def _promote(self, ids: Sequence[str], now: float) -> None:
        successors: Sequence[Task] = ()
        skipped: Sequence[tuple[Task, str]] = ()
        if any("@" in i for i in ids):  # instances of recurring schedules are named "sid@slot"
            plan = self._recurring.fire(ids, now)
            plain = [i for i in ids if "@" not in i]
            ids, successors, skipped = plain + plan.run, plan.successors, plan.skipped
            self._missed_fires += plan.missed
        moved = self._store.promote(ids, now, successors=successors)
        # Skip only once the successors are stored: a crash between the two steps then leaves the
        # skipped head PENDING (decided again after a restart), never a series without a head.
        for t, why in skipped:
            self._skip(t, why, now)
        for succ in successors:
            self._index(succ)
        if len(moved) != len(ids):
            self._reindex_unmoved(ids, moved)
        self._enqueue(moved)

    def _enqueue(self, tasks: Iterable[Task]) -> None:
        """Queue READY tasks for this process's workers. Tasks of queue names the dispatcher
        does not serve stay READY in the store (for other processes' workers), so they never
        take the bounded queue's places from the queues served here."""
        ready, served = self._ready, self._served
        any_put = False
        for t in tasks:
            if served is not None and t.queue not in served:
                continue
            if ready.put(t):
                any_put = True
            else:
                self._backlog = True  # stays READY in the store; refilled as the queue drains
        if any_put:
            self._dispatcher.wakeup()

    def _skip(self, task: Task, why: str, now: float) -> None:
        try:
            changed = self._store.transition(
                task.id,
                expected_version=task.version,
                state=TaskState.CANCELLED,
                now=now,
                error=f"skipped: {why}",
            )
        except VersionConflictError:
            return
        log.info("task %r skipped: %s", task.id, why)
        self._notify_terminal(changed.task, None)
        self._settled(changed.dependents)

    def _reindex_unmoved(self, ids: Sequence[str], moved: Sequence[Task]) -> None:
        """Ids the wheel emitted that the store did not promote: cancelled, replaced or already
        taken (dropped), or still PENDING and not yet due (put back, so nothing is lost). The
        last happens when a durable store keeps a due time rounded up to its microsecond above
        the float the wheel was given."""
        done = {t.id for t in moved}
        for tid in ids:
            if tid not in done:
                t = self._store.find(tid)
                if t is not None and t.state is _P and t.unmet == 0:
                    self._index(t)

    def _refill_ready(self) -> None:
        free = self._ready.free
        if free <= 0:
            return
        limit = free + len(self._ready)
        served = None if self._served is None else sorted(self._served)
        rows = self._store.ready(limit=limit, queues=served)
        batch = [t for t in rows if t.id not in self._ready]
        for t in batch[:free]:
            self._ready.put(t)
        # A full page means more READY rows may wait beyond it (queued rows and rows pulled but
        # not yet claimed take places in it): look again, or they are stranded for good.
        self._backlog = len(batch) > free or len(rows) >= limit
        if batch:
            self._dispatcher.wakeup()

    def _refill_wheel(self, now: float) -> None:
        until = now + self._horizon if self._store.durable else math.inf
        with self._lock:
            for tid, due in self._store.due_before(until, limit=10_000_000):
                if tid not in self._wheel:
                    self._wheel.add(tid, due)
            self._refilled_until = until

    def _reap(self, now: float) -> None:
        for t in self._store.expired_leases(now, limit=1_000):
            rerun = t.attempts < t.retry.max_attempts + self._max_lease_recoveries
            msg = (
                f"lease of {t.lease_owner} expired at {t.lease_expires} during run {t.attempts} "
                "(worker lost or stalled)"
            )
            try:
                changed = self._store.transition(
                    t.id,
                    expected_version=t.version,
                    state=_P if rerun else TaskState.TIMED_OUT,
                    now=now,
                    due=now,
                    lease_owner=None,
                    lease_expires=None,
                    error=msg + ("; running it again" if rerun else "; no re-runs left"),
                )
            except VersionConflictError:
                continue  # it heartbeated or finished meanwhile
            log.warning("task %r: %s", t.id, changed.task.error)
            self._finished(changed, None, "timed_out")

    def _next_deadline(self) -> float | None:
        with self._lock:
            d = self._wheel.next_deadline()
        if self._store.durable and self._state == "running":
            refill = self._refilled_until - self._horizon / 2  # when the wheel needs more
            d = refill if d is None else min(d, refill)
        if self._backlog and self._refill_due():
            now = self._clock.time()
            d = now if d is None else min(d, now)
        return d

    def _refill_due(self) -> bool:
        """Refill the ready queue from the store once it is at most half full: one store query
        per half queue of work, not one per task a worker took."""
        ready = self._ready
        return len(ready) <= ready.low_water and ready.free > 0

    def _on_ready_low(self) -> None:
        if self._backlog and self._loop is not None:
            self._loop.wake()

    # -- FakeClock driving ----------------------------------------------------------------------
    def _fake_clock_deadline(self) -> float | None:
        if self._state != "running":
            return None
        d = self._next_deadline()
        running = self._store.tasks(state=TaskState.RUNNING)
        leases = [t.lease_expires for t in running if t.lease_expires is not None]
        if leases:
            # a lease has expired once now > lease_expires; durable stores keep microseconds, so
            # step one microsecond past it (the next float would round back onto the lease)
            e = max(math.nextafter(min(leases), math.inf), min(leases) + 1e-6)
            d = e if d is None else min(d, e)
        return d

    def _fake_clock_fire(self, now: float) -> list[Any]:
        if self._state != "running":
            return []
        beat = getattr(self._dispatcher, "beat", None)
        if beat is not None:
            beat()  # live workers would have heartbeated while fake time passed
        self._next_reap = -math.inf
        self._tick(now)
        return [Job(self, t.id) for t in self._dispatcher.run_ready()]

    def run_pending(self) -> list[Job]:
        """Trigger what is due now and, with an inline dispatcher, run it in this thread.

        Returns the jobs that ran here (none with a thread pool, whose workers run them).
        """
        if self._state != "running":
            raise SchedulerStateError(
                f"run_pending() needs a running scheduler (state {self._state!r}); call start()"
            )
        ran: list[Job] = []
        while True:
            self._next_reap = -math.inf
            self._tick(self._clock.time())
            batch = [Job(self, t.id) for t in self._dispatcher.run_ready()]
            if not batch:
                return ran
            ran.extend(batch)

    def run_until_idle(self, limit: int = 10_000) -> list[Job]:
        """With a ``FakeClock``: advance deadline by deadline until nothing is pending or ready,
        running at most *limit* tasks; returns the jobs that ran.

        Raises:
            SchedulerStateError: the clock is not a FakeClock, or more than *limit* tasks ran
                (a task that keeps rescheduling itself never goes idle).
        """
        if not self._fake:
            raise SchedulerStateError(
                "run_until_idle() needs a FakeClock; use job.result() instead"
            )
        ran: list[Job] = []
        while True:
            d = self._fake_clock_deadline()
            if d is None:
                return ran
            ran.extend(self._clock.advance_to(max(d, self._clock.time())))  # type: ignore[attr-defined]
            if len(ran) > limit:
                raise SchedulerStateError(
                    f"run_until_idle() ran more than {limit} tasks without going idle; raise "
                    "limit= or advance the clock by a fixed amount instead"
                )

    # -- the dispatch side (Engine protocol) --------------------------------------------------------
    def _resolve(self, task: Task) -> Callable[..., Any]:
        f = task.func
        if not isinstance(f, str):
            return f
        got = self._resolved.get(f)
        if got is None:
            from timewheel.refs import resolve_ref

            got = self._resolved[f] = resolve_ref(f)
        return got

    def _started(self, task: Task) -> None:
        self._lateness.append(self._clock.time() - task.due)
        self._count("started", task)

    def _finished(self, changed: Changed, exc: BaseException | None, event: str) -> None:
        task = changed.task
        if task.state is _P:
            self._index(task)
            self._count(event, task, exc)
        else:
            self._notify_terminal(task, exc, event)
        self._settled(changed.dependents)

    def _settled(self, dependents: Iterable[Task]) -> None:
        for d in dependents:
            if d.state is _P:
                self._index(d)
            elif d.state in TERMINAL_STATES:
                self._notify_terminal(d, None)

    def _release_held(self, schedule_id: str) -> None:
        held = self._recurring.release(schedule_id)
        if held:
            now = self._clock.time()
            self._enqueue(self._store.promote(held, now))

    def _notify_terminal(
        self, task: Task, exc: BaseException | None, event: str | None = None
    ) -> None:
        self._count(event or _TERMINAL_EVENT[task.state], task, exc)
        if task.schedule_id is not None:
            self._release_held(task.schedule_id)
        cbs = None
        if self._waiting or self._callbacks:  # read without the lock: see _wait
            with self._done:
                self._done.notify_all()
                cbs = self._callbacks.pop(task.id, None)
        if cbs:
            job = Job(self, task.id)
            for fn in cbs:
                try:
                    fn(job)
                except Exception:
                    log.exception("done callback %r of task %r failed", fn, task.id)

    def _add_callback(self, task_id: str, fn: Callable[[Job], object]) -> None:
        with self._done:
            t = self._store.get(task_id)
            if t.state not in TERMINAL_STATES:
                self._callbacks.setdefault(task_id, []).append(fn)
                return
        fn(Job(self, task_id))

    def _wait(self, task_id: str, timeout: float | None) -> Task:
        clock = self._clock
        end = None if timeout is None else clock.monotonic() + timeout
        with self._done:
            # counted before the state is read, so a finisher that stores the outcome after our
            # read sees a waiter and notifies (it takes this lock, so after we wait)
            self._waiting += 1
            try:
                return self._wait_locked(task_id, timeout, end)
            finally:
                self._waiting -= 1

    def _wait_locked(self, task_id: str, timeout: float | None, end: float | None) -> Task:
        clock = self._clock
        while True:
            t = self._store.get(task_id)
            if t.state in TERMINAL_STATES:
                return t
            remaining = None if end is None else end - clock.monotonic()
            if remaining is not None and remaining <= 0:
                raise JobTimeoutError(
                    f"task {task_id!r} is still {t.state.value} after {timeout} s; the task "
                    "is unaffected, wait again or cancel it"
                )
            if self._state == "stopped" and t.state in (TaskState.PENDING, TaskState.READY):
                raise SchedulerStateError(
                    f"task {task_id!r} is {t.state.value} and the scheduler was shut down; "
                    "it will not run in this scheduler"
                )
            # a short cap lets outcomes reached in other processes (durable stores) be seen
            cap = 0.5 if self._store.durable else None
            wait_for = (
                remaining if cap is None else (cap if remaining is None else min(cap, remaining))
            )
            clock.wait(self._done, wait_for)

    def upcoming(
        self, horizon: float = 3600.0, *, bucket: float | str = 60.0
    ) -> list[tuple[datetime, int]]:
        """Look-ahead: ``(bucket_start, count)`` of tasks due per bucket over the next *horizon*
        seconds, for non-empty buckets, so a spike (midnight) is visible before it fires.

        *bucket* is a width in seconds or ``"second"``, ``"minute"``, ``"hour"``. Counts come from
        the timing wheel (cost O(non-empty slots); buckets aligned to multiples of their width),
        or with a durable store from the store (one indexed query; buckets aligned on now).
        Recurring schedules count their next instance.
        """
        from timewheel.clock import to_datetime

        hist = getattr(self._store, "due_histogram", None)
        if self._store.durable and hist is not None:
            # the store holds every pending task; the wheel only the near horizon
            w = bucket_width(bucket)
            counts = dict(hist(self._clock.time(), horizon=horizon, bucket=w))
        else:
            with self._lock:
                counts = dict(self._wheel.upcoming(horizon, bucket=bucket))
        return [(to_datetime(t), n) for t, n in sorted(counts.items()) if n]

    # -- statistics -----------------------------------------------------------------------------------
    def statistics(self) -> SchedulerStatistics:
        """Counts by state, queue depths, event totals, throughput and lateness (seconds)."""
        states = {s.value: n for s, n in self._store.count_by_state().items()}
        lat = sorted(self._lateness)
        up = 0.0 if self._started_at is None else self._clock.monotonic() - self._started_at
        done = self._counts["succeeded"] + self._counts["failed"] + self._counts["timed_out"]

        def pct(q: float) -> float | None:
            if not lat:
                return None
            return lat[min(len(lat) - 1, max(0, math.ceil(q * len(lat)) - 1))]

        with self._lock:
            in_wheel = len(self._wheel)
        return SchedulerStatistics(
            states=states,
            in_wheel=in_wheel,
            ready_depth=len(self._ready),
            ready_capacity=self._ready.capacity,
            submitted=self._counts["submitted"],
            started=self._counts["started"],
            succeeded=self._counts["succeeded"],
            failed=self._counts["failed"],
            retried=self._counts["retried"],
            timed_out=self._counts["timed_out"],
            cancelled=self._counts["cancelled"],
            missed_fires=self._missed_fires,
            throughput=done / up if up > 0 else 0.0,
            lateness_p50=pct(0.5),
            lateness_p99=pct(0.99),
            lateness_max=lat[-1] if lat else None,
            uptime=up,
        )

    def __repr__(self) -> str:
        return (
            f"<Scheduler {self._state} clock={self._clock!r} store={self._store!r} "
            f"dispatcher={self._dispatcher!r}>"
        )


# -- the module-level default scheduler -----------------------------------------------------------
_default: Scheduler | None = None
_default_lock = threading.Lock()


def default_scheduler() -> Scheduler:
    """The process-wide scheduler behind :func:`timewheel.schedule`, started on first use and shut
    down (waiting for running tasks) at interpreter exit."""
    global _default
    with _default_lock:
        if _default is None or _default._state == "stopped":
            _default = Scheduler().start()
            atexit.register(_default.shutdown)
        return _default


def _unknown_options(names: Iterable[str]) -> str:
    import difflib

    parts = []
    for name in sorted(names):
        close = difflib.get_close_matches(name, _SCHEDULE_OPTIONS | {"delay"}, n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"schedule() got unexpected keyword argument(s) {', '.join(parts)}"


_code = Scheduler._schedule.__code__
#: The keyword options ``Scheduler.schedule`` accepts besides ``delay`` (checked on the full path).
_SCHEDULE_OPTIONS = frozenset(_code.co_varnames[: _code.co_argcount + _code.co_kwonlyargcount]) - {
    "self",
    "func",
    "args",
    "delay",
}
del _code


def schedule(func: Callable[..., Any] | str, /, *args: Any, **options: Any) -> Any:
    """Schedule on the default scheduler; see :meth:`Scheduler.schedule` (a ``Job``, or a
    ``Schedule`` for ``cron=``/``every=``)."""
    return default_scheduler().schedule(func, *args, **options)


def chain(*steps: Step | Callable[..., Any], when: str = "all_success") -> list[Job]:
    """:meth:`Scheduler.chain` on the default scheduler."""
    return default_scheduler().chain(*steps, when=when)


def cron(expr: str, /, **options: Any) -> Callable[[F], F]:
    """``@timewheel.cron("0 0 * * *")``: a recurring function on the default scheduler."""
    return default_scheduler().cron(expr, **options)


def every(
    interval: float | timedelta | None = None,
    /,
    *,
    seconds: float = 0,
    minutes: float = 0,
    hours: float = 0,
    days: float = 0,
    **options: Any,
) -> Callable[[F], F]:
    """``@timewheel.every(minutes=5)``: a recurring function on the default scheduler."""
    return default_scheduler().every(
        interval, seconds=seconds, minutes=minutes, hours=hours, days=days, **options
    )
