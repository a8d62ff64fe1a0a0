"""The runtime: the stations of one scheduler, joined, and the bookkeeping between them.

A :class:`Runtime` holds the store, the clock, the :class:`~timewheel.trigger.Trigger` (with its
wheel), the ready queue, the recurring-schedule planner and the :class:`~timewheel.events.EventHub`.
It is the object a dispatcher serves (it implements :class:`~timewheel.dispatch.Engine`), the one a
:class:`~timewheel.jobs.Job` handle reads through, and where the trigger reports what it did. It
keeps what happens *between* the stations: submitting a task, cancelling it, settling its
dependents, counting events, waking the threads that wait for an outcome.

The user-facing :class:`~timewheel.scheduler.Scheduler` owns one and delegates to it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from timewheel.batches import prepare_new
from timewheel.clock import Clock, to_datetime
from timewheel.errors import JobTimeoutError, SchedulerStateError, VersionConflictError
from timewheel.events import TERMINAL_EVENT, EventHub
from timewheel.herds import HerdReport
from timewheel.jobs import Job, Jobs, TaskFunction
from timewheel.options import (
    BIG_DELAY,
    PLAIN_NUMBERS,
    Series,
    fast_at,
    known_series,
    prepare_many,
)
from timewheel.ready import ReadyQueue
from timewheel.recurring import Recurring
from timewheel.refs import Allowlist, permit_imports
from timewheel.report import RecentValues, percentile
from timewheel.retention import Retention
from timewheel.stores.base import (
    Changed,
    NewTasks,
    OnConflict,
    Store,
    SupportsCompactInsert,
    SupportsInspection,
    SupportsNewTasks,
)
from timewheel.task import TERMINAL_STATES, Task, TaskState
from timewheel.trigger import Trigger
from timewheel.wheel import bucket_width

__all__ = ["ClockDriver", "Runtime", "SchedulerStatistics"]

_P = TaskState.PENDING


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


class Runtime:
    """The joined stations of one scheduler (see the module docstring).

    Args:
        store, clock: the source of truth and of time.
        trigger_options: passed to :class:`~timewheel.trigger.Trigger` (tick, lease, horizon...).
        ready_capacity: bound of the ready queue.
        lease: seconds a claim lasts without a heartbeat.
        timezone: the default zone of cron schedules.
        served: the queue names the dispatcher serves (``None``: all).
        allow: which stored function references run (``None``: registered names only on a
            durable store, anything on a store only this process writes); see
            :class:`~timewheel.refs.Allowlist`.
        keep_finished: seconds a finished task is kept (``None``: forever); see
            :mod:`timewheel.retention`.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        lease: float,
        ready_capacity: int,
        timezone: str,
        served: Iterable[str] | None,
        tick: float,
        horizon: float,
        max_lease_recoveries: int,
        batch: int,
        poll_interval: float | None,
        allow: Allowlist | None = None,
        keep_finished: float | None = None,
    ) -> None:
        self.store = store
        self._new_tasks = store if isinstance(store, SupportsNewTasks) else None
        #: deletes finished tasks after *keep_finished* seconds, from the trigger
        self.retention = Retention(store, keep_finished)
        #: ``hold(handle)``: keep *handle*'s task from retention while *handle* is referenced
        #: (every ``Job`` calls it when made: the retention's own method, no call in between)
        self.hold: Callable[[Job], None] = self.retention.hold
        #: ``hold_many(handles)``: the same for a batch's handles (``Jobs``)
        self.hold_many: Callable[[Jobs], None] = self.retention.hold_many
        self.clock = clock
        self.lease = lease
        self.timezone = timezone
        self.events = EventHub()
        self._submitted = self.events.listening("submitted")
        self.ready_queue = ReadyQueue(ready_capacity)
        self.recurring = Recurring(self)
        self.trigger = Trigger(
            store,
            self.ready_queue,
            clock,
            tick=tick,
            start=clock.time(),
            lease=lease,
            max_lease_recoveries=max_lease_recoveries,
            batch=batch,
            horizon=horizon,
            poll_interval=poll_interval,
            served=served,
            planner=self.recurring,
            outcomes=self,
            retention=self.retention,
        )
        #: False once the scheduler stopped: waits for PENDING/READY tasks then give up
        self.accepting = True
        #: True between the scheduler's start and its shutdown
        self.running = False
        #: start minus due time of the most recent runs, seconds
        self.lateness = RecentValues(100_000)
        self._resolved: dict[str, Callable[..., Any]] = {}
        if allow is None:
            allow = Allowlist() if store.durable else Allowlist.everything()
        #: which stored function references this scheduler runs
        self.allowlist = allow
        permit_imports(allow.modules)

    def allow(self, modules: Iterable[str]) -> None:
        """Run import paths into *modules* too (``timewheel worker`` adds its target's package)."""
        self.allowlist = self.allowlist.extended(modules)
        permit_imports(self.allowlist.modules)

    # -- the dispatcher's side (the Engine protocol) ---------------------------------------------
    def resolve(self, task: Task) -> Callable[..., Any]:
        """The callable *task* names: a stored reference is checked against :attr:`allowlist`
        before anything is imported, and resolved once per process.

        Raises:
            ReferenceNotAllowedError: the allowlist refuses the reference (it was not imported).
            SerializationError: the reference is allowed but does not resolve in this process.
        """
        func = task.func
        if not isinstance(func, str):
            return func
        got = self._resolved.get(func)
        if got is None:
            got = self._resolved[func] = self.allowlist.resolve(func)
        return got

    def claim(self, task: Task, owner: str) -> Task | None:
        """Claim a READY snapshot pulled from the ready queue for *owner*: READY -> RUNNING with a
        lease, a compare-and-swap on the snapshot's version. None if another worker won."""
        now = self.clock.time()
        return self.store.claim(
            task.id,
            expected_version=task.version,
            owner=owner,
            lease_expires=now + self.lease,
            now=now,
        )

    def claim_batch(self, owner: str, limit: int, queues: Sequence[str] | None) -> list[Task]:
        """Claim up to *limit* READY tasks of *queues* from the store for *owner*, highest priority
        then earliest due, in one store step (the store skips tasks whose function this process
        cannot import, and may use an idle moment for maintenance)."""
        now = self.clock.time()
        return self.store.claim_next(
            owner=owner, lease_expires=now + self.lease, now=now, limit=limit, queues=queues
        )

    def started(self, task: Task) -> None:
        """A claimed run is about to call its function."""
        self.lateness.append(self.clock.time() - task.due)
        self.events.emit("started", task)

    def finished(self, changed: Changed, exc: BaseException | None, event: str) -> None:
        """A run's outcome is stored (*event*: succeeded, failed, retried or timed_out)."""
        task = changed.task
        if task.state is _P:
            self.trigger.index(task)
            self.events.emit(event, task, exc)
        else:
            self.notify_terminal(task, exc, event)
        self.settle(changed.dependents)

    # -- the trigger's side (the Outcomes protocol) ------------------------------------------------
    def skipped(self, changed: Changed) -> None:
        """A recurring instance was cancelled by its misfire or overlap policy."""
        self.notify_terminal(changed.task, None)
        self.settle(changed.dependents)

    # -- the recurring planner's side ----------------------------------------------------------------
    def job(self, task_id: str) -> Job:
        """A handle on *task_id*."""
        return Job(self, task_id)

    def index(self, task: Task) -> None:
        """Put a PENDING task in the trigger's wheel (if runnable and within its horizon)."""
        self.trigger.index(task)

    def unindex(self, ids: Iterable[str]) -> None:
        """Take tasks out of the trigger's wheel."""
        self.trigger.unindex(ids)

    # -- submitting, cancelling, settling -------------------------------------------------------------
    def submit(self, task: Task, on_conflict: OnConflict) -> str:
        """Insert a new task, index it, and report it; returns the id that stands (with
        ``on_conflict="keep"``, an existing task's)."""
        if on_conflict == "keep" and self.store.find(task.id) is not None:
            return task.id  # the existing task stands
        changed = self.store.insert(task, on_conflict=on_conflict)
        stored = changed.task
        if on_conflict == "replace":
            self.trigger.unindex((stored.id,))
            self.ready_queue.discard(stored.id)
        self.events.emit("submitted", stored)
        if stored.state is TaskState.READY:
            self.trigger.inserted_ready((stored,))  # already due: stored READY (durable store)
        else:
            self.trigger.index(stored)
        self.settle(changed.dependents)
        if stored.state in TERMINAL_STATES:
            self.notify_terminal(stored, None)
        return stored.id

    def schedule_many(
        self,
        items: Iterable[object],
        defaults: dict[str, Any],
        *,
        new_id: Callable[[], str],
        upstream: Callable[[object], object] | None = None,
    ) -> list[str]:
        """``schedule_many(items, **defaults)`` of the facades; the ids, in order.

        The common case (plain items sharing their options, see :mod:`timewheel.batches`) is
        built as one :class:`~timewheel.stores.base.NewTasks` and inserted by :meth:`submit_new`;
        any other batch is checked and built item by item
        (:func:`~timewheel.options.prepare_many`), then inserted by :meth:`submit_many`."""
        if not isinstance(items, (list, tuple)):
            items = list(items)  # read once: the common case may hand it to the full path
        now = self.clock.time()
        durable = self.store.durable
        batch = prepare_new(
            items, defaults, now=now, durable=durable, new_id=new_id, allowlist=self.allowlist
        )
        if batch is not None:
            if batch.ids:
                self.submit_new(batch, now)
            return batch.ids
        tasks, on_conflict = prepare_many(
            items,
            defaults,
            now=now,
            durable=durable,
            new_id=new_id,
            allowlist=self.allowlist,
            upstream=upstream,
        )
        if tasks:
            self.submit_many(tasks, on_conflict)
        return [t.id for t in tasks]

    def submit_new(self, batch: NewTasks, now: float) -> None:
        """Insert a batch of fresh tasks in one store step (from its columns, when the store
        can), place them in the wheel together, and report them. Tasks a durable store stored
        READY (already due) are not placed: the ready queue is refilled with them."""
        store = self._new_tasks
        ready: Sequence[str]
        if store is not None:
            ready = store.insert_new(batch)
        else:
            changes = self.store.insert_many(batch.tasks(), on_conflict="error")
            ready = [c.task.id for c in changes if c.task.state is TaskState.READY]
        marked = set(ready)
        events = self.events
        if events.listening("submitted"):
            for task in batch.tasks():
                if task.id in marked:
                    task = task.evolve(state=TaskState.READY)
                events.emit("submitted", task)
        else:
            events.counts["submitted"] += len(batch.ids)
        ids, dues = batch.ids, batch.dues
        if marked:
            kept = [k for k, task_id in enumerate(ids) if task_id not in marked]
            ids, dues = [ids[k] for k in kept], [dues[k] for k in kept]
            self.trigger.inserted_ready()
        if ids:
            self.trigger.place_many(ids, dues, now)

    def submit_many(self, tasks: Sequence[Task], on_conflict: OnConflict) -> None:
        """Insert a batch of new tasks in one store step, index them, and report them (a task
        kept under ``on_conflict="keep"`` is the existing one: nothing to report)."""
        changes = self.store.insert_many(tasks, on_conflict=on_conflict)
        if on_conflict == "replace":
            ids = [c.task.id for c in changes]
            self.trigger.unindex(ids)
            for task_id in ids:
                self.ready_queue.discard(task_id)
        events = self.events
        if events.listening("submitted"):
            for change in changes:
                events.emit("submitted", change.task)
        else:
            events.counts["submitted"] += len(changes)
        self.trigger.index_many([c.task for c in changes])
        ready = [c.task for c in changes if c.task.state is TaskState.READY]
        if ready:
            self.trigger.inserted_ready(ready)  # already due: stored READY (durable store)
        for stored, dependents in changes:
            if dependents:
                self.settle(dependents)
            if stored.state in TERMINAL_STATES:
                self.notify_terminal(stored, None)

    def known_series(
        self,
        func: Callable[..., Any] | str,
        args: tuple[Any, ...],
        options: Mapping[str, Any],
        time: Callable[[], float],
    ) -> Series | None:
        """The fast path of ``schedule()`` for a recurring call, both facades': a call whose
        options were checked before (:mod:`timewheel.shapes`) as a :class:`Series` to create;
        ``None`` sends it down the full path (see :func:`~timewheel.options.known_series`)."""
        if isinstance(func, TaskFunction):
            func = func.func
        store, recurring = self.store, self.recurring
        return known_series(
            func, args, options, time, store.durable, self.allowlist, recurring.shapes
        )

    def submit_compact(
        self,
        store: SupportsCompactInsert,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        delay: object,
        options: dict[str, Any],
        time: Callable[[], float],
        new_id: Callable[[], str],
    ) -> str | None:
        """The fast path of ``schedule()``, both facades': a ``schedule(f, *args, delay=d)`` or
        ``schedule(f, *args, at=t)`` call with no other option and a plain value is kept by
        *store* (this runtime's store) as a compact record, under an id from *new_id*, which is
        returned. Any other call returns None without reading the clock (*time*) and takes the
        full path, which also reports every bad value. When a real-time loop runs (the trigger's
        ``promote_due_on_place``), a task already due goes straight to READY and onto the ready
        queue in one store step."""
        if options:
            due = fast_at(options) if delay is None else None
            if due is None:
                return None
            now = time()
        # a plain number (not bool, not a subclass, not timedelta), finite
        elif delay.__class__ in PLAIN_NUMBERS and -BIG_DELAY < delay < BIG_DELAY:
            now = time()
            due = now + delay
        else:
            return None
        task_id = new_id()
        watched = self._submitted  # the live list of "submitted" listeners
        trigger = self.trigger
        if due <= now and trigger.promote_due_on_place and not watched:
            trigger.enqueue((store.add_ready(task_id, func, args, due, now),))
            self.events.counts["submitted"] += 1
            return task_id
        store.add_pending(task_id, func, args, due, now)
        if watched:
            self.events.emit("submitted", self.store.get(task_id))
        else:
            self.events.counts["submitted"] += 1
        trigger.place(task_id, due, now)
        return task_id

    def cancel(self, task_id: str) -> bool:
        """Cancel a PENDING or READY task; True if it is now cancelled (see ``Scheduler.cancel``)."""
        store = self.store
        while True:
            task = store.get(task_id)
            if task.state is TaskState.CANCELLED:
                return True
            if task.state not in (TaskState.PENDING, TaskState.READY):
                return False
            try:
                changed = store.transition(
                    task_id,
                    expected_version=task.version,
                    state=TaskState.CANCELLED,
                    now=self.clock.time(),
                    error="cancelled by request",
                )
            except VersionConflictError:
                continue  # someone else moved it: look again
            break
        self.trigger.unindex((task_id,))
        self.ready_queue.discard(task_id)
        self.notify_terminal(changed.task, None)
        self.settle(changed.dependents)
        return True

    def settle(self, dependents: Iterable[Task]) -> None:
        """Index dependents that may now run; report those that ended with their upstream."""
        for task in dependents:
            if task.state is _P:
                self.trigger.index(task)
            elif task.state in TERMINAL_STATES:
                self.notify_terminal(task, None)

    def notify_terminal(
        self, task: Task, exc: BaseException | None, event: str | None = None
    ) -> None:
        """Report a task's end: the event, a held recurring instance it releases, the threads
        waiting on it and its done callbacks."""
        self.events.emit(event or TERMINAL_EVENT[task.state], task, exc)
        if task.schedule_id is not None:
            held = self.recurring.release(task.schedule_id)
            if held:
                self.trigger.enqueue(self.store.promote(held, self.clock.time()))
        callbacks = self.events.ended(task.id)
        if callbacks:
            self.events.run_callbacks(task.id, callbacks)

    # -- waiting ----------------------------------------------------------------------------------------
    def add_done_callback(self, task_id: str, fn: Callable[[Job], object]) -> None:
        """Call ``fn(job)`` when the task ends, in the thread that ended it; at once (in this
        thread) if it already has."""
        callback = functools.partial(fn, Job(self, task_id))
        store = self.store
        if not self.events.add_callback(
            task_id, callback, lambda: store.get(task_id).state in TERMINAL_STATES
        ):
            callback()

    def wait(self, task_id: str, timeout: float | None) -> Task:
        """Block until the task is terminal; its final snapshot.

        Raises:
            JobTimeoutError: *timeout* seconds (on the clock) passed first.
            SchedulerStateError: the scheduler stopped while the task still waits to run.
        """
        clock, events = self.clock, self.events
        end = None if timeout is None else clock.monotonic() + timeout
        with events.done:
            # counted before the state is read, so a finisher that stores the outcome after our
            # read sees a waiter and notifies (it takes this lock, so after we wait)
            events.waiting += 1
            try:
                while True:
                    task = self.store.get(task_id)
                    if task.state in TERMINAL_STATES:
                        return task
                    remaining = None if end is None else end - clock.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise JobTimeoutError(
                            f"task {task_id!r} is still {task.state.value} after {timeout} s; "
                            "the task is unaffected, wait again or cancel it"
                        )
                    if not self.accepting and task.state in (TaskState.PENDING, TaskState.READY):
                        raise SchedulerStateError(
                            f"task {task_id!r} is {task.state.value} and the scheduler was shut "
                            "down; it will not run in this scheduler"
                        )
                    # a short cap lets outcomes reached in other processes (durable stores) show
                    cap = 0.5 if self.store.durable else None
                    wait_for = (
                        remaining
                        if cap is None
                        else (cap if remaining is None else min(cap, remaining))
                    )
                    clock.wait(events.done, wait_for)
            finally:
                events.waiting -= 1

    def lateness_percentile(self, q: float) -> float | None:
        """The *q* quantile (0..1) of recent lateness, seconds; None before any run."""
        return percentile(sorted(self.lateness), q)

    def upcoming(self, horizon: float, *, bucket: float | str) -> list[tuple[datetime, int]]:
        """``(bucket_start, count)`` of tasks due per bucket over the next *horizon* seconds, for
        non-empty buckets (see ``Scheduler.upcoming``): from the store when it is durable and
        inspectable (it holds every pending task; the wheel only the near horizon), else from the
        trigger's wheel."""
        store = self.store
        if store.durable and isinstance(store, SupportsInspection):
            width = bucket_width(bucket)
            counts = dict(store.due_histogram(self.clock.time(), horizon=horizon, bucket=width))
        else:
            counts = dict(self.trigger.upcoming(horizon, bucket=bucket))
        return [(to_datetime(t), n) for t, n in sorted(counts.items()) if n]

    def herds(self, horizon: float) -> list[HerdReport]:
        """The herds coming within *horizon* seconds, with the schedules behind each (see
        ``Scheduler.herds``)."""
        trigger, recurring = self.trigger, self.recurring
        now = self.clock.time()
        return [
            recurring.report(herd, trigger.herd_ids(herd.start))
            for herd in trigger.herds(now, horizon)
        ]

    def statistics(self, *, uptime: float) -> SchedulerStatistics:
        """A snapshot of counts by state, queue depths, event totals and lateness."""
        states = {s.value: n for s, n in self.store.count_by_state().items()}
        counts = self.events.counts
        done = counts["succeeded"] + counts["failed"] + counts["timed_out"]
        return SchedulerStatistics(
            states=states,
            in_wheel=len(self.trigger),
            ready_depth=len(self.ready_queue),
            ready_capacity=self.ready_queue.capacity,
            submitted=counts["submitted"],
            started=counts["started"],
            succeeded=counts["succeeded"],
            failed=counts["failed"],
            retried=counts["retried"],
            timed_out=counts["timed_out"],
            cancelled=counts["cancelled"],
            missed_fires=self.trigger.missed_fires,
            throughput=done / uptime if uptime > 0 else 0.0,
            lateness_p50=self.lateness_percentile(0.5),
            lateness_p99=self.lateness_percentile(0.99),
            lateness_max=max(self.lateness) if self.lateness else None,
            uptime=uptime,
        )


class InlineRunner(Protocol):
    """**Protocol:** the part of a dispatcher a :class:`ClockDriver` uses."""

    def run_ready(self) -> list[Task]:
        """Run what is ready in the calling thread; the tasks that ran."""
        ...

    def beat(self) -> None:
        """Extend the leases of the tasks running here."""
        ...


class ClockDriver:
    """The :class:`~timewheel.clock.Driven` side of a runtime on a clock that drives time
    (``FakeClock``): the next deadline includes lease expiries; firing extends live leases (as
    workers would have while time passed), triggers, and runs inline work in the calling thread.
    """

    __slots__ = ("__weakref__", "dispatcher", "runtime")

    def __init__(self, runtime: Runtime, dispatcher: InlineRunner) -> None:
        self.runtime = runtime
        self.dispatcher = dispatcher

    def next_deadline(self) -> float | None:
        """The trigger's next deadline, or a lease expiry if one comes first."""
        runtime = self.runtime
        if not runtime.running:
            return None
        deadline = runtime.trigger.next_deadline(runtime.clock.time())
        running = runtime.store.tasks(state=TaskState.RUNNING)
        leases = [t.lease_expires for t in running if t.lease_expires is not None]
        if leases:
            # a lease has expired once now > lease_expires; durable stores keep microseconds, so
            # step one microsecond past it (the next float would round back onto the lease)
            expiry = max(math.nextafter(min(leases), math.inf), min(leases) + 1e-6)
            deadline = expiry if deadline is None else min(deadline, expiry)
        return deadline

    def run_until_idle(self, clock: Any, limit: int) -> list[Any]:
        """Advance *clock* (a ``FakeClock`` driving this runtime) deadline by deadline until
        nothing is pending or ready; the jobs that ran.

        Raises:
            SchedulerStateError: more than *limit* tasks ran without going idle.
        """
        ran: list[Any] = []
        while (deadline := self.next_deadline()) is not None:
            ran.extend(clock.advance_to(max(deadline, clock.time())))
            if len(ran) > limit:
                raise SchedulerStateError(
                    f"run_until_idle() ran more than {limit} tasks without going idle; raise "
                    "limit= or advance the clock by a fixed amount instead"
                )
        return ran

    def fire(self, now: float) -> list[Any]:
        """Trigger what is due at *now* and run inline work; the jobs that ran here."""
        runtime = self.runtime
        if not runtime.running:
            return []
        self.dispatcher.beat()
        runtime.trigger.reap_now()
        runtime.trigger.fire(now)
        return [Job(runtime, t.id) for t in self.dispatcher.run_ready()]
