"""``AsyncScheduler``: the asyncio twin of :class:`~timewheel.scheduler.Scheduler`.

The same core, driven from the event loop: ``schedule()`` builds a task with
:mod:`timewheel.options` and hands it to the :class:`~timewheel.runtime.Runtime` (store, wheel,
trigger, recurring planner, events); the trigger is woken by the loop's own timer
(:class:`~timewheel.aio.timer.LoopTimer`, no thread), and an
:class:`~timewheel.aio.dispatch.AsyncDispatcher` runs coroutine tasks as asyncio tasks and plain
functions in a bounded thread pool. Store steps run on the loop for the memory store and in the
store's own thread for a durable one (:mod:`timewheel.aio.runner`). See ``docs/async.md``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, overload

from typing_extensions import Unpack

from timewheel.aio.dispatch import AsyncDispatcher, is_coroutine_function
from timewheel.aio.jobs import AsyncJob, Waiters
from timewheel.aio.runner import DirectRunner, StoreRunner, ThreadRunner
from timewheel.aio.timer import AsyncClockDriver, LoopTimer
from timewheel.clock import Clock, DrivingClock, SystemClock
from timewheel.errors import JobTimeoutError, SchedulerStateError
from timewheel.events import Event
from timewheel.jobs import Job, Step, TaskFunction
from timewheel.options import (
    SCHEDULE_OPTIONS,
    CounterIds,
    RecurringOptions,
    Series,
    TaskOptions,
    prepare,
    unknown_options,
)
from timewheel.ready import ReadyQueue
from timewheel.recurring import Registry, Schedule, interval_of
from timewheel.refs import Allowlist
from timewheel.retention import KeepFinished, keep_finished_seconds
from timewheel.rules import resolve_zone
from timewheel.runtime import Runtime, SchedulerStatistics
from timewheel.stores.base import Store, SupportsCompactInsert, store_clock
from timewheel.stores.memory import MemoryStore
from timewheel.task import TERMINAL_STATES, Task, TaskState
from timewheel.validate import count, seconds

__all__ = ["AsyncOneShotOptions", "AsyncScheduler"]

log = logging.getLogger("timewheel.aio")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class AsyncOneShotOptions(TaskOptions, total=False):
    """Options of a one-shot task of an ``AsyncScheduler``, besides ``delay`` (``after=`` takes
    ``AsyncJob`` handles)."""

    at: datetime | float | None
    after: Iterable[AsyncJob | Job | str] | AsyncJob | Job | str | None
    when: str


class AsyncScheduler:
    """Schedules functions (``async def`` or plain) and runs them on the running event loop.

    Args:
        clock: where time comes from (default :class:`SystemClock`; tests pass a ``FakeClock``
            and advance it with ``await clock.advance_async(...)``). On a store that keeps a
            server clock (PostgreSQL) a real-time clock is read corrected to the server's.
        store: where tasks live (default a new :class:`MemoryStore`).
        concurrency: most tasks running at once.
        threads: most plain (non-async) functions running at once, each in a thread of the
            scheduler's pool (default ``min(32, cpu_count + 4)``).
        queues: the queue names this scheduler runs (None: all).
        heartbeat: seconds between lease extensions (default: a third of *lease*).
        cancel_grace: seconds a cancelled coroutine has to end before it is abandoned.
        blocked_warning: the loop found blocked this many seconds (a timer that late) logs a
            warning naming the coroutine tasks running.
        store_runner: where store calls run (default: on the loop for a store that does no I/O,
            in one thread of its own for a durable store); see :mod:`timewheel.aio.runner`.
        tick, timezone, lease, ready_capacity, horizon, max_lease_recoveries, batch: as for
            :class:`~timewheel.scheduler.Scheduler`.
        poll_interval: as for :class:`~timewheel.scheduler.Scheduler`.
        allow: the modules whose functions run from import paths read from a durable store (see
            ``docs/security.md``), as for :class:`~timewheel.scheduler.Scheduler`.
        keep_finished: how long finished tasks are kept, as for
            :class:`~timewheel.scheduler.Scheduler`.

    Use it as an async context manager on the running loop (``async with AsyncScheduler() as
    sched:``) or await :meth:`start` and :meth:`shutdown`. Its methods are called from the loop's
    thread; from another thread, use ``asyncio.run_coroutine_threadsafe(sched.schedule(...),
    loop)``.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        concurrency: int = 100,
        threads: int | None = None,
        queues: Iterable[str] | None = None,
        heartbeat: float | None = None,
        cancel_grace: float = 5.0,
        blocked_warning: float = 1.0,
        store_runner: StoreRunner | None = None,
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
        self._dispatcher = AsyncDispatcher(
            concurrency,
            threads=threads,
            queues=None if queues is None else tuple(queues),
            heartbeat=None if heartbeat is None else seconds(heartbeat, "heartbeat", above=0),
            cancel_grace=seconds(cancel_grace, "cancel_grace", minimum=0, timedelta_ok=False),
            blocked_warning=seconds(blocked_warning, "blocked_warning", above=0),
        )
        resolve_zone(timezone)  # an unknown zone is refused here, not at the first cron
        self.timezone = timezone
        self._driving = isinstance(self._clock, DrivingClock)
        self._runtime = Runtime(
            self._store,
            self._clock,
            lease=seconds(lease, "lease", above=0, timedelta_ok=False),
            ready_capacity=count(ready_capacity, "ready_capacity"),
            timezone=timezone,
            served=self._dispatcher.queues,
            tick=tick,
            horizon=seconds(horizon, "horizon", above=0, timedelta_ok=False),
            max_lease_recoveries=count(max_lease_recoveries, "max_lease_recoveries", minimum=0),
            batch=count(batch, "batch"),
            # other processes may write a durable store; on a fake clock nothing else runs
            poll_interval=(
                None if self._driving else seconds(poll_interval, "poll_interval", above=0)
            ),
            allow=allow if allow is None or isinstance(allow, Allowlist) else Allowlist(allow),
            keep_finished=keep_finished_seconds(keep_finished, self._store),
        )
        self._trigger = self._runtime.trigger
        self._events = self._runtime.events
        self._trigger.on_ready = self._dispatcher.wakeup
        self._runner: StoreRunner = (
            store_runner
            if store_runner is not None
            else (ThreadRunner() if self._store.durable else DirectRunner())
        )
        self._runner_open = True
        self._waiters = Waiters(self._clock, driving=self._driving)
        self._state: Literal["created", "running", "stopped"] = "created"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._timer: LoopTimer | None = None
        self._driver: AsyncClockDriver | None = None
        self._listeners: dict[Callable[[Event], object], list[Callable[[Event], None]]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._ids = CounterIds()
        self._new_id = self._ids.next
        # the fast path of schedule(): compact records, when the store keeps them on the loop
        self._compact = (
            self._store
            if isinstance(self._store, SupportsCompactInsert) and not self._runner.blocking
            else None
        )
        self._time: Callable[[], float] = (
            time.time if type(self._clock) is SystemClock else self._clock.time
        )
        self._started_at: float | None = None

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
    def dispatcher(self) -> AsyncDispatcher:
        """The dispatcher running the tasks on the loop."""
        return self._dispatcher

    @property
    def runtime(self) -> Runtime:
        """The joined stations (trigger, ready queue, events) that the dispatcher serves."""
        return self._runtime

    @property
    def ready_queue(self) -> ReadyQueue:
        """The ready queue the dispatcher pulls from."""
        return self._runtime.ready_queue

    @property
    def store_runner(self) -> StoreRunner:
        """Where the store calls run."""
        return self._runner

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`shutdown`."""
        return self._state == "running"

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the scheduler runs on (None before :meth:`start`)."""
        return self._loop

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> AsyncScheduler:
        """Start triggering and dispatching on the running event loop. Returns the scheduler."""
        if self._state != "created":
            raise SchedulerStateError(
                f"cannot start the scheduler when it is in the {self._state!r} state; "
                "create a new AsyncScheduler"
            )
        loop = asyncio.get_running_loop()
        self._state = "running"
        self._loop = loop
        self._thread = threading.get_ident()
        self._started_at = self._clock.monotonic()
        self._waiters.bind(loop)
        self._runtime.running = True
        await self._do(self._trigger.start, self._clock.time())
        self._dispatcher.start(self._runtime, loop=loop, runner=self._runner, driving=self._driving)
        clock = self._clock
        if isinstance(clock, DrivingClock):
            self._driver = AsyncClockDriver(
                self._runtime, self._dispatcher, self._waiters, self._runner, self._job
            )
            clock.attach(self._driver)
        else:
            self._timer = LoopTimer(self._step, clock, self._runner)
            self._trigger.waker = self._timer
            self._trigger.promote_due_on_place = True
            self._timer.start(loop)
        return self

    def _step(self, now: float) -> float | None:
        """One trigger pass on the real clock (where the store is reached): leases first when
        the loop ran late, so the trigger never re-runs tasks that are alive here."""
        dispatcher = self._dispatcher
        if dispatcher.beat_overdue():
            dispatcher.beat_now()
        return self._trigger.fire(now)

    async def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop triggering; with *wait*, let running tasks finish for up to *timeout* seconds;
        then cancel those still running and release them to READY (a durable store runs them at
        the next start). Waiters of tasks that will not run here get ``SchedulerStateError``.
        Idempotent."""
        if self._state == "stopped":
            return
        was_running = self._state == "running"
        self._state = "stopped"
        self._runtime.accepting = False
        self._runtime.running = False
        self._trigger.stop()
        if self._timer is not None:
            self._timer.stop()
            await self._timer.idle()
        if self._driver is not None and isinstance(self._clock, DrivingClock):
            self._clock.detach(self._driver)
        if was_running:
            await self._dispatcher.shutdown(wait=wait, timeout=timeout)
        self._runtime.ready_queue.close()
        self._events.wake_all()
        waiting = self._waiters.waiting()
        if waiting:
            self._waiters.fail_unstarted(await self._do(self._states, waiting))
        if self._background:
            await asyncio.wait(set(self._background), timeout=self._dispatcher.cancel_grace)
        await self._runner.idle()
        self._runner.close()
        self._runner_open = False

    def _states(self, ids: list[str]) -> dict[str, TaskState | None]:
        out: dict[str, TaskState | None] = {}
        for task_id in ids:
            task = self._store.find(task_id)
            out[task_id] = None if task is None else task.state
        return out

    async def __aenter__(self) -> AsyncScheduler:
        if self._state == "created":
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def _do(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a store step where the store is reached (on the loop, or through the runner)."""
        if self._runner.blocking and self._runner_open:
            return await self._runner.run(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    def _job(self, task_id: str) -> AsyncJob:
        return AsyncJob(self, task_id)

    # -- scheduling -----------------------------------------------------------------------------
    @overload
    async def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        cron: str,
        **options: Unpack[RecurringOptions],
    ) -> Schedule: ...
    @overload
    async def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        every: float | timedelta,
        **options: Unpack[RecurringOptions],
    ) -> Schedule: ...
    @overload
    async def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        delay: float | timedelta | None = None,
        **options: Unpack[AsyncOneShotOptions],
    ) -> AsyncJob: ...
    async def schedule(
        self,
        func: Callable[..., Any] | str,
        /,
        *args: Any,
        delay: float | timedelta | None = None,
        **options: Any,
    ) -> AsyncJob | Schedule:
        """Schedule ``func(*args, **kwargs)``, an ``async def`` function or a plain one: once
        (*delay*/*at*) or recurring (*cron*/*every*). Options and errors as for
        :meth:`timewheel.scheduler.Scheduler.schedule`; ``after=`` takes ``AsyncJob`` handles
        too. Returns an :class:`AsyncJob`, or a :class:`Schedule` for *cron*/*every*."""
        mem = self._compact
        if (
            mem is not None
            and self._state != "stopped"
            and callable(func)
            and not isinstance(func, TaskFunction)
        ):
            # The fast path: a one-shot task with default options, kept by the memory store as
            # a compact record, on the loop's thread. Everything else takes the full path.
            task_id = self._runtime.submit_compact(
                mem, func, args, delay, options, self._time, self._new_id
            )
            if task_id is not None:
                return AsyncJob(self, task_id)
        if delay is None and ("cron" in options or "every" in options) and self._state != "stopped":
            # a recurring call with options checked before (see timewheel.shapes)
            series = self._runtime.known_series(func, args, options, self._time)
            if series is not None:
                return await self._do(self._runtime.recurring.create, series)
        prepared = self._prepare(func, args, delay, options)
        if isinstance(prepared, Series):
            return await self._do(self._runtime.recurring.create, prepared)
        runtime = self._runtime
        task_id = await self._do(runtime.submit, prepared.task, prepared.on_conflict)
        return AsyncJob(self, task_id)

    async def schedule_many(
        self,
        items: Iterable[Step | Callable[..., Any] | str | tuple[Any, ...]],
        /,
        *,
        delay: float | timedelta | None = None,
        **options: Unpack[AsyncOneShotOptions],
    ) -> list[AsyncJob]:
        """Schedule many one-shot tasks in one store step: all of them, or (on any error) none.

        Items, defaults and errors as for
        :meth:`timewheel.scheduler.Scheduler.schedule_many`; ``after=`` takes ``AsyncJob``
        handles too. With a durable store the batch is written off the event loop. Returns one
        :class:`AsyncJob` per item, in order.
        """
        if self._state == "stopped":
            raise SchedulerStateError(
                "cannot schedule on a scheduler that was shut down; create a new AsyncScheduler"
            )
        ids = await self._do(
            self._runtime.schedule_many,
            items,
            dict(options, delay=delay),
            new_id=self._ids,
            upstream=_upstream_ids,
        )
        return [AsyncJob(self, i) for i in ids]

    def _prepare(
        self,
        func: Callable[..., Any] | str,
        args: tuple[Any, ...],
        delay: float | timedelta | None,
        options: dict[str, Any],
    ) -> Any:
        unknown = options.keys() - SCHEDULE_OPTIONS
        if unknown:
            raise TypeError(unknown_options(unknown))
        if self._state == "stopped":
            raise SchedulerStateError(
                "cannot schedule on a scheduler that was shut down; create a new AsyncScheduler"
            )
        if isinstance(func, TaskFunction):
            func = func.func
        after = options.get("after")
        if after is not None:
            options["after"] = _upstream_ids(after)
        return prepare(
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

    def _register(self, func: Callable[..., Any], options: dict[str, Any]) -> Schedule:
        """A recurring schedule stored at once (decorators cannot await): on the loop for the
        memory store, one store write waited for with a durable store."""
        prepared = self._prepare(func, (), None, options)
        assert isinstance(prepared, Series)
        recurring = self._runtime.recurring
        if self._runner.blocking and self._runner_open:
            return self._runner.call(recurring.create, prepared)
        return recurring.create(prepared)

    def cron(self, expr: str, /, **options: Any) -> Callable[[F], F]:
        """Decorator: run the function on the cron expression *expr*; options as for
        :meth:`schedule`. The function is returned unchanged, with ``.schedule_handle``.

        The schedule is stored when the decorator runs (with a durable store, one write the loop
        waits for: declare schedules at startup, or ``await sched.schedule(f, cron=...)``)."""

        def wrap(func: F) -> F:
            func.schedule_handle = self._register(func, {"cron": expr, **options})  # type: ignore[attr-defined]
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
        """Decorator: run the function every *interval* (or ``minutes=5`` etc.); see :meth:`cron`."""
        period = interval_of(interval, seconds, minutes, hours, days)

        def wrap(func: F) -> F:
            func.schedule_handle = self._register(func, {"every": period, **options})  # type: ignore[attr-defined]
            return func

        return wrap

    async def include(self, registry: Registry) -> list[Schedule]:
        """Schedule every recurring function declared in *registry*; their handles."""
        out: list[Schedule] = []
        for entry in registry:
            handle = await self.schedule(entry.func, **entry.options)
            assert isinstance(handle, Schedule)
            out.append(handle)
        return out

    def schedules(self) -> list[Schedule]:
        """Handles of every stored recurring schedule."""
        recurring = self._runtime.recurring
        return [Schedule(recurring, r.id) for r in self._store.list_schedules()]

    async def cancel(self, task_id: str | AsyncJob) -> bool:
        """Cancel a task; True if it is now cancelled or was stopped.

        A PENDING or READY task becomes CANCELLED. A running coroutine is cancelled (it sees
        ``CancelledError``) and this waits for its run to end: the run is stored FAILED with
        ``JobCancelledError`` and not retried, and True is returned (False if the coroutine
        swallowed the cancellation and ended otherwise). A plain function running in a thread
        cannot be interrupted: False. A finished task stays as it is: False.

        Raises:
            TaskNotFoundError: no task has that id.
        """
        tid = task_id.id if isinstance(task_id, AsyncJob) else task_id
        if await self._do(self._runtime.cancel, tid):
            return True
        return bool(await self._dispatcher.cancel_running(tid))

    async def get(self, task_id: str) -> AsyncJob:
        """The handle of an existing task. Raises ``TaskNotFoundError``."""
        await self._do(self._store.get, task_id)
        return AsyncJob(self, task_id)

    def jobs(self, state: TaskState | Iterable[TaskState] | None = None) -> list[AsyncJob]:
        """Handles of the tasks in *state* (all when None), earliest due first (one store read
        on the calling thread)."""
        return [AsyncJob(self, t.id) for t in self._store.tasks(state=state)]

    # -- waiting ----------------------------------------------------------------------------------
    async def wait(self, task_id: str, timeout: float | None = None) -> Task:
        """Wait until the task is terminal, without blocking the loop; its final snapshot.

        *timeout* is measured on the scheduler's clock.

        Raises:
            JobTimeoutError: *timeout* seconds passed first.
            SchedulerStateError: the scheduler stopped while the task still waits to run.
        """
        limit = None if timeout is None else seconds(timeout, "timeout", minimum=0)
        task = await self._do(self._store.get, task_id)
        if task.state in TERMINAL_STATES:
            return task
        if limit == 0:
            raise JobTimeoutError(
                f"task {task_id!r} is still {task.state.value} after 0 s; the task is "
                "unaffected, wait again or cancel it"
            )
        if not self._runtime.accepting and task.state in (TaskState.PENDING, TaskState.READY):
            raise SchedulerStateError(
                f"task {task_id!r} is {task.state.value} and the scheduler was shut down; it "
                "will not run in this scheduler"
            )
        fut, first = self._waiters.add(task_id, limit)
        if first:
            await self._do(self._runtime.add_done_callback, task_id, self._waiters.ended)
        if self._store.durable and not self._driving:
            # outcomes reached in other processes show only in the store: look now and then
            while not fut.done():
                await asyncio.wait({fut}, timeout=0.5)
                if fut.done():
                    break
                task = await self._do(self._store.get, task_id)
                if task.state in TERMINAL_STATES:
                    self._waiters.discard(task_id, fut)
                    fut.cancel()
                    return task
        return await fut

    def hold(self, handle: AsyncJob) -> None:
        """Keep *handle*'s task from retention while *handle* is referenced."""
        self._runtime.retention.hold(handle)

    def add_done_callback(self, task_id: str, fn: Callable[[AsyncJob], object]) -> None:
        """Call ``fn(job)`` on the loop's thread when the task ends (soon, if it already has);
        an ``async def`` *fn* runs as an asyncio task."""
        job = AsyncJob(self, task_id)
        deliver = self._on_loop(lambda _event: fn(job))
        self._runtime.add_done_callback(task_id, lambda _job: deliver(None))

    # -- listeners ------------------------------------------------------------------------------
    def add_listener(self, fn: Callable[[Event], object], *events: str) -> None:
        """Call ``fn(event)`` for the named events (all when none are named), on the loop's
        thread; an ``async def`` *fn* runs as an asyncio task. Exceptions are logged."""
        wrapper = self._on_loop(fn)
        self._events.add_listener(wrapper, events)
        self._listeners.setdefault(fn, []).append(wrapper)

    def remove_listener(self, fn: Callable[[Event], object]) -> None:
        """Stop calling *fn*."""
        for wrapper in self._listeners.pop(fn, ()):
            self._events.remove_listener(wrapper)

    def _on_loop(self, fn: Callable[[Any], object]) -> Callable[[Any], None]:
        """*fn* delivered on the loop's thread, whichever thread reports."""
        coroutine = is_coroutine_function(fn)

        def call(arg: Any) -> None:
            try:
                out: Any = fn(arg)
                if coroutine:
                    task = asyncio.ensure_future(out)
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)
            except Exception:
                log.exception("listener or callback %r failed", fn)

        def deliver(arg: Any) -> None:
            loop = self._loop
            if loop is None or threading.get_ident() == self._thread:
                call(arg)
                return
            try:
                loop.call_soon_threadsafe(call, arg)
            except RuntimeError:
                pass  # the loop is closed

        return deliver

    # -- testing helpers ------------------------------------------------------------------------
    async def run_until_idle(self, limit: int = 10_000) -> list[AsyncJob]:
        """With a ``FakeClock``: advance deadline by deadline until nothing is pending or ready,
        running at most *limit* tasks; the jobs that ran.

        Raises:
            SchedulerStateError: the clock is not a FakeClock, or more than *limit* tasks ran.
        """
        clock, driver = self._clock, self._driver
        if driver is None or not isinstance(clock, DrivingClock):
            raise SchedulerStateError(
                "run_until_idle() needs a running scheduler on a FakeClock; await job.result() "
                "instead"
            )
        ran: list[AsyncJob] = []
        while (deadline := driver.next_deadline()) is not None:
            step = clock.advance_to_async(max(deadline, clock.time()))  # type: ignore[attr-defined]
            ran.extend(await step)
            if len(ran) > limit:
                raise SchedulerStateError(
                    f"run_until_idle() ran more than {limit} tasks without going idle; raise "
                    "limit= or advance the clock by a fixed amount instead"
                )
        return ran

    def statistics(self) -> SchedulerStatistics:
        """Counts by state, queue depths, event totals, throughput and lateness (seconds)."""
        up = 0.0 if self._started_at is None else self._clock.monotonic() - self._started_at
        return self._runtime.statistics(uptime=up)

    def __repr__(self) -> str:
        return (
            f"<AsyncScheduler {self._state} clock={self._clock!r} store={self._store!r} "
            f"dispatcher={self._dispatcher!r}>"
        )


def _upstream_ids(after: object) -> object:
    """``after=`` with :class:`AsyncJob` handles replaced by their ids (the core takes ids)."""
    if isinstance(after, AsyncJob):
        return after.id
    if isinstance(after, (str, Job)) or not isinstance(after, Iterable):
        return after
    return [a.id if isinstance(a, AsyncJob) else a for a in after]
