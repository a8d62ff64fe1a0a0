"""The facade users touch: ``Scheduler``, ``@sched.task``, and the module-level default scheduler.

The scheduler holds no algorithm of its own. ``schedule()`` builds a task (``timewheel.options``)
and hands it to the :class:`~timewheel.runtime.Runtime`, which writes it to the store and indexes it
in the :class:`~timewheel.trigger.Trigger`'s wheel; the trigger moves due tasks to the ready queue
(driven by the :class:`~timewheel.loop.TriggerLoop` on the real clock, or by a ``FakeClock``), and
the dispatcher's workers pull and run them. See ``docs/concepts.md`` and ``docs/design.md``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, overload

from typing_extensions import Unpack

from timewheel import forking
from timewheel.clock import Clock, DrivingClock, SystemClock
from timewheel.dispatch import (
    Dispatcher,
    InlineDispatcher,
    Rebuildable,
    ThreadPoolDispatcher,
)
from timewheel.errors import InheritedAcrossForkError, InvalidScheduleError, SchedulerStateError
from timewheel.events import EVENTS, Event
from timewheel.herds import HerdReport
from timewheel.jobs import Job, Jobs, Step, TaskFunction, step
from timewheel.loop import TriggerLoop
from timewheel.options import (
    SCHEDULE_OPTIONS,
    CounterIds,
    OneShotOptions,
    RecurringOptions,
    Series,
    prepare,
    unknown_options,
)
from timewheel.ready import ReadyQueue
from timewheel.recurring import Registry, Schedule, interval_of
from timewheel.refs import Allowlist
from timewheel.retention import KeepFinished, keep_finished_seconds
from timewheel.rules import resolve_zone
from timewheel.runtime import ClockDriver, Runtime, SchedulerStatistics
from timewheel.stores.base import Store, SupportsCompactInsert, store_clock
from timewheel.stores.memory import MemoryStore
from timewheel.task import TaskState
from timewheel.validate import count, seconds

__all__ = [
    "EVENTS",
    "Event",
    "Job",
    "Scheduler",
    "SchedulerStatistics",
    "Step",
    "TaskFunction",
    "step",
]

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


class Scheduler:
    """Schedules functions to run at a future time, and runs them.

    Args:
        clock: where time comes from (default :class:`SystemClock`; tests pass a ``FakeClock``).
            On a store that keeps a server clock (PostgreSQL) a real-time clock is read
            corrected to the server's (:attr:`clock` is then that corrected clock).
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
            runs at most this late. A store that notifies (PostgreSQL) tells the scheduler at
            once, and the poll is only the fallback for lost notifications.
        allow: the modules and packages whose functions this scheduler runs from import paths
            read from its store (``["myapp.jobs", "myapp.billing"]``: those modules and the
            modules inside them), or a :class:`~timewheel.refs.Allowlist`. Registered names
            (``timewheel.refs.register``) always run. The default on a durable store is
            registered names only; on a store only this process writes (``MemoryStore``), any
            function. ``schedule()`` refuses a function this scheduler would not run, and a
            stored reference outside it ends FAILED without being imported (see
            ``docs/security.md``).
        keep_finished: how long a finished task (SUCCEEDED, FAILED, CANCELLED, TIMED_OUT,
            UPSTREAM_FAILED) stays in the store after it ended, as a ``timedelta`` or seconds;
            then the trigger deletes it, a few hundred at a time. ``"default"``: one hour on a
            ``MemoryStore``, seven days on a durable store. ``None`` keeps finished tasks
            forever. A task whose :class:`Job` handle is still referenced is kept (see
            :mod:`timewheel.retention`).

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
        allow: Iterable[str] | Allowlist | None = None,
        keep_finished: KeepFinished = "default",
    ) -> None:
        self._store: Store = store if store is not None else MemoryStore()
        self._clock: Clock = store_clock(clock, self._store)
        resolve_zone(timezone)  # an unknown zone is refused here, not at the first cron
        self.timezone = timezone
        self._fake = isinstance(self._clock, DrivingClock)
        # what a Runtime is built from: kept, so a process forked from this one can build its own
        self._runtime_options: dict[str, Any] = {
            "lease": seconds(lease, "lease", above=0, timedelta_ok=False),
            "ready_capacity": count(ready_capacity, "ready_capacity"),
            "timezone": timezone,
            "tick": tick,
            "horizon": seconds(horizon, "horizon", above=0, timedelta_ok=False),
            "max_lease_recoveries": count(max_lease_recoveries, "max_lease_recoveries", minimum=0),
            "batch": count(batch, "batch"),
            # other processes may write a durable store; on a fake clock nothing else runs
            "poll_interval": (
                None if self._fake else seconds(poll_interval, "poll_interval", above=0)
            ),
            "allow": allow if allow is None or isinstance(allow, Allowlist) else Allowlist(allow),
            "keep_finished": keep_finished_seconds(keep_finished, self._store),
        }
        self._state: Literal["created", "running", "stopped", "inherited"] = "created"
        self._assemble(dispatcher if dispatcher is not None else ThreadPoolDispatcher())
        self._ids = CounterIds()
        self._new_id = self._ids.next
        # the fast path of schedule(): compact records, when the store keeps them
        self._compact = self._store if isinstance(self._store, SupportsCompactInsert) else None
        # the clock's time(); the system clock's own function when it is the plain system clock
        self._time: Callable[[], float] = (
            time.time if type(self._clock) is SystemClock else self._clock.time
        )
        self._started_at: float | None = None
        self._pid = os.getpid()  # the process that started the scheduler (see _after_fork)
        forking.after_fork_in_child(self._after_fork)

    def _assemble(self, dispatcher: Dispatcher) -> None:
        """Build the stations around *dispatcher*: the runtime, its trigger and events, the lock."""
        self._dispatcher: Dispatcher = dispatcher
        self._runtime = Runtime(
            self._store, self._clock, served=dispatcher.queues, **self._runtime_options
        )
        self._trigger = self._runtime.trigger
        self._events = self._runtime.events
        self._trigger.on_ready = dispatcher.wakeup
        self._lock = threading.Lock()
        self._inline = isinstance(dispatcher, InlineDispatcher)
        self._loop: TriggerLoop | None = None
        self._driver = ClockDriver(self._runtime, dispatcher)

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
    def runtime(self) -> Runtime:
        """The joined stations (trigger, ready queue, events) that the dispatcher serves."""
        return self._runtime

    @property
    def ready_queue(self) -> ReadyQueue:
        """The ready queue the dispatcher's workers pull from."""
        return self._runtime.ready_queue

    @property
    def lease(self) -> float:
        """Lease length in seconds."""
        return self._runtime.lease

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`shutdown` (in a process forked from the one that
        started it: once it restarted there, see :meth:`start`)."""
        return self._state == "running"

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Scheduler:
        """Start triggering and dispatching. Returns the scheduler.

        In a process forked from the one that started it, a scheduler on a durable store starts
        its own trigger and workers here (as on any first use); one on the memory store raises
        :class:`~timewheel.errors.InheritedAcrossForkError`.
        """
        if self._state == "inherited":
            self._adopt()
            return self
        with self._lock:
            if self._state != "created":
                raise SchedulerStateError(
                    f"cannot start the scheduler when it is in the {self._state!r} state; "
                    "create a new Scheduler"
                )
            self._launch()
        return self

    def _launch(self) -> None:
        """Start the trigger, the dispatcher and the loop (lock held, state ``created``)."""
        self._state = "running"
        self._started_at = self._clock.monotonic()
        self._pid = os.getpid()
        self._runtime.running = True
        self._trigger.start(self._clock.time())
        self._dispatcher.start(self._runtime)
        if isinstance(self._clock, DrivingClock):
            self._clock.attach(self._driver)
        elif not self._inline:
            self._loop = TriggerLoop(self._trigger.step, self._clock)
            self._trigger.waker = self._loop
            self._trigger.promote_due_on_place = True
            self._loop.start()

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop triggering, then stop the dispatcher: with *wait*, in-flight tasks may finish for
        up to *timeout* seconds; tasks still running then are released to READY. Idempotent.

        In a process forked from the one that started the scheduler (and that did not use it
        since), it only marks the scheduler stopped here: the threads and running tasks it would
        stop belong to the parent, which keeps them.
        """
        with self._lock:
            if self._state == "stopped":
                return
            was = self._state
            self._state = "stopped"
        if was == "inherited":
            self._runtime.accepting = False  # handles from before the fork stop waiting
            return
        self._runtime.accepting = False
        self._runtime.running = False
        self._trigger.stop()
        if self._loop is not None:
            self._loop.stop()
        if isinstance(self._clock, DrivingClock):
            self._clock.detach(self._driver)
        if was == "running":
            self._dispatcher.shutdown(wait=wait, timeout=timeout)
        self._runtime.ready_queue.close()
        self._events.wake_all()

    # -- fork() ---------------------------------------------------------------------------------
    def _after_fork(self) -> None:
        """In a child made by ``fork()``, before anything else runs there (one thread).

        The parent's threads are not here, and any lock of the runtime may have been held by one
        of them at the fork. A running scheduler becomes ``inherited``: nothing of the copied
        runtime is used again, and the first call decides (:meth:`_adopt`).
        """
        self._lock = threading.Lock()
        self._ids = CounterIds()  # the parent goes on counting from the same numbers
        self._new_id = self._ids.next
        if self._state != "running":
            return  # never started: nothing of it ran in the parent; usable as it is
        self._state = "inherited"
        self._compact = None  # every call takes the checked path
        self._loop = None
        self._runtime.running = False
        if not self._store.durable:
            self._runtime.accepting = False  # handles from before the fork stop waiting

    def _adopt(self) -> None:
        """First use of an inherited scheduler in a forked child: restart on a durable store,
        refuse on the memory store."""
        with self._lock:
            if self._state != "inherited":
                return
            parent, child = self._pid, os.getpid()
            if not self._store.durable:
                raise InheritedAcrossForkError(
                    f"this Scheduler was started in process {parent}, and process {child} is a "
                    "copy of it made by fork() (gunicorn --preload, uWSGI without lazy-apps, "
                    "multiprocessing's fork start method): its trigger and worker threads do not "
                    "exist here, and its memory store is a copy of the parent's, whose tasks the "
                    "parent runs. Create the Scheduler after the fork, in the process that uses "
                    "it (e.g. in gunicorn's post_fork hook), or use timewheel.schedule(), whose "
                    "default scheduler starts anew in each process (or give the Scheduler a "
                    "durable store, which a forked process restarts on its own). The parent's "
                    "scheduler is unaffected"
                )
            dispatcher = self._rebuilt_dispatcher(parent, child)
            old_events, old_driver = self._events, self._driver
            if isinstance(self._clock, DrivingClock):
                self._clock.detach(old_driver)
            self._assemble(dispatcher)
            for name in EVENTS:
                for fn in old_events.listening(name):
                    self._events.add_listener(fn, (name,))
            self._launch()

    def _in_this_process(self) -> None:
        """Before a call that uses the runtime: adopt an inherited scheduler first."""
        if self._state == "inherited":
            self._adopt()

    def _rebuilt_dispatcher(self, parent: int, child: int) -> Dispatcher:
        """A dispatcher like the inherited one, with its own threads in this process."""
        with contextlib.suppress(NotImplementedError):  # a subclass that does not rebuild
            if isinstance(self._dispatcher, Rebuildable):
                return self._dispatcher.rebuilt()
        raise InheritedAcrossForkError(
            f"this Scheduler was started in process {parent}, and process {child} is a copy of it "
            f"made by fork(); its dispatcher, a {type(self._dispatcher).__qualname__}, cannot be "
            "rebuilt here (see timewheel.dispatch.Rebuildable). Create the Scheduler and its "
            "dispatcher after the fork (e.g. in gunicorn's post_fork hook); the parent is unaffected"
        )

    def _accepting(self) -> None:
        self._in_this_process()
        if self._state == "stopped":
            raise SchedulerStateError(
                "cannot schedule on a scheduler that was shut down; create a new Scheduler"
            )

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
        **options: Unpack[RecurringOptions],
    ) -> Schedule: ...
    @overload
    def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        every: float | timedelta,
        **options: Unpack[RecurringOptions],
    ) -> Schedule: ...
    @overload
    def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        delay: float | timedelta | None = None,
        **options: Unpack[OneShotOptions],
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
        if delay is None and ("cron" in options or "every" in options):
            if self._state == "inherited" or self._state == "stopped":
                self._accepting()  # adopt it, or refuse
            series = self._runtime.known_series(func, args, options, self._time)
            if series is not None:  # a recurring call with options checked before (shapes.py)
                return self._runtime.recurring.create(series)
        elif (
            mem is not None
            and self._state != "stopped"
            and callable(func)
            and not isinstance(func, TaskFunction)
        ):
            # The fast path: a one-shot task with default options, kept by the store as a
            # compact record. Everything else (and every error) takes the full path.
            task_id = self._runtime.submit_compact(
                mem, func, args, delay, options, self._time, self._new_id
            )
            if task_id is not None:
                return Job(self._runtime, task_id)
        unknown = options.keys() - SCHEDULE_OPTIONS
        if unknown:
            raise TypeError(unknown_options(unknown))
        return self._schedule(func, args, delay, options)

    def _schedule(
        self,
        func: Callable[..., Any] | str,
        args: tuple[Any, ...],
        delay: float | timedelta | None,
        options: dict[str, Any],
    ) -> Job | Schedule:
        """The full path of :meth:`schedule` (every option, every check)."""
        self._accepting()
        if isinstance(func, TaskFunction):
            func = func.func
        prepared = prepare(
            func,
            args,
            delay,
            options,
            now=self._clock.time(),
            durable=self._store.durable,
            new_id=self._new_id,
            allowlist=self._runtime.allowlist,
            shapes=self._runtime.recurring.shapes,
        )
        if isinstance(prepared, Series):
            return self._runtime.recurring.create(prepared)
        return Job(self._runtime, self._runtime.submit(prepared.task, prepared.on_conflict))

    def schedule_many(
        self,
        items: Iterable[Step | Callable[..., Any] | str | tuple[Any, ...]],
        /,
        *,
        delay: float | timedelta | None = None,
        **options: Unpack[OneShotOptions],
    ) -> Jobs:
        """Schedule many one-shot tasks in one store step: all of them or, on any error, none.

        *items*: ``step(f, *args, **options)``, ``(f, args, kwargs, options)`` tuples (or shorter)
        or callables; keywords: every item's defaults, *on_conflict* the batch's. Each item is
        checked first (an error names its index). Returns a :class:`Jobs` of handles, in order."""
        self._accepting()
        runtime, defaults = self._runtime, dict(options, delay=delay)
        return Jobs(runtime, runtime.schedule_many(items, defaults, new_id=self._ids))

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
        return self._decorator(cron=expr, **options)

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
        period = interval_of(interval, seconds, minutes, hours, days)
        return self._decorator(every=period, **options)

    def _decorator(self, **options: Any) -> Callable[[F], F]:
        def wrap(func: F) -> F:
            func.schedule_handle = self.schedule(func, **options)  # type: ignore[attr-defined]
            return func

        return wrap

    def include(self, registry: Registry) -> list[Schedule]:
        """Schedule every recurring function declared in *registry*; their handles."""
        return [self.schedule(entry.func, **entry.options) for entry in registry]

    def schedules(self) -> list[Schedule]:
        """Handles of every stored recurring schedule."""
        self._in_this_process()
        recurring = self._runtime.recurring
        return [Schedule(recurring, r.id) for r in self._store.list_schedules()]

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
        self._in_this_process()
        return self._runtime.cancel(task_id.id if isinstance(task_id, Job) else task_id)

    def get(self, task_id: str) -> Job:
        """The handle of an existing task. Raises ``TaskNotFoundError``."""
        self._in_this_process()
        self._store.get(task_id)
        return Job(self._runtime, task_id)

    def jobs(self, state: TaskState | Iterable[TaskState] | None = None) -> list[Job]:
        """Handles of the tasks in *state* (all when None), earliest due first."""
        self._in_this_process()
        return [Job(self._runtime, t.id) for t in self._store.tasks(state=state)]

    # -- listeners ------------------------------------------------------------------------------
    def add_listener(self, fn: Callable[[Event], object], *events: str) -> None:
        """Call ``fn(event)`` for the named events (all when none are named).

        Listeners run in the thread where the event happened; their exceptions are logged.
        """
        self._events.add_listener(fn, events)

    def remove_listener(self, fn: Callable[[Event], object]) -> None:
        """Stop calling *fn*."""
        self._events.remove_listener(fn)

    # -- running due work by hand ------------------------------------------------------------------
    def run_pending(self) -> list[Job]:
        """Trigger what is due now and, with an inline dispatcher, run it in this thread.

        Returns the jobs that ran here (none with a thread pool, whose workers run them).
        """
        self._in_this_process()
        if self._state != "running":
            raise SchedulerStateError(
                f"run_pending() needs a running scheduler (state {self._state!r}); call start()"
            )
        ran: list[Job] = []
        while True:
            self._trigger.reap_now()
            self._trigger.fire(self._clock.time())
            batch = [Job(self._runtime, t.id) for t in self._dispatcher.run_ready()]
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
        self._in_this_process()
        if not isinstance(self._clock, DrivingClock):
            raise SchedulerStateError("run_until_idle() needs a FakeClock; use job.result()")
        return self._driver.run_until_idle(self._clock, limit)

    # -- looking ahead, statistics ---------------------------------------------------------------------
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
        self._in_this_process()
        return self._runtime.upcoming(horizon, bucket=bucket)

    def herds(self, horizon: float = 3600.0) -> list[HerdReport]:
        """The herds coming within *horizon* seconds (and those whose second came in the last
        minute): seconds holding at least a thousand recurring instances, the schedules behind
        each and what pre-warming has done. ``str()`` of each is a one-line warning.

        Pre-warming begins five minutes ahead: the successors of the herd's instances are
        stored and their firing planned in small slices, so that at the instant only the state
        changes remain. With a durable store the trigger sees the next ``horizon`` seconds of
        the store (see :meth:`upcoming` for the whole look-ahead).
        """
        return self._runtime.herds(horizon)

    def statistics(self) -> SchedulerStatistics:
        """Counts by state, queue depths, event totals, throughput and lateness (seconds)."""
        self._in_this_process()
        up = 0.0 if self._started_at is None else self._clock.monotonic() - self._started_at
        return self._runtime.statistics(uptime=up)

    def __repr__(self) -> str:
        return (
            f"<Scheduler {self._state} clock={self._clock!r} store={self._store!r} "
            f"dispatcher={self._dispatcher!r}>"
        )
