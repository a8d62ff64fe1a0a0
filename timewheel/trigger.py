"""The trigger: finds due work in the timing wheel and hands it to dispatch.

Driven by time, never by worker capacity. Each :meth:`Trigger.fire` does everything due at ``now``:

1. re-queue runs whose lease expired (a worker died or stalled), or end them TIMED_OUT when no
   re-run is left;
2. advance the wheel and move the due tasks PENDING -> READY in the store, one store step per batch;
   instances of recurring schedules go through the :class:`InstancePlanner` first (misfire and
   overlap policy, the next instance materialised in the same store step);
3. put the READY tasks on the bounded ready queue; what does not fit stays READY in the store (the
   *backlog*) and is refilled, oldest first, as workers drain the queue;
4. with a durable store, keep the wheel filled with the next ``horizon`` seconds of the store, and
   poll for work other processes scheduled or made ready;
5. delete finished tasks past their retention, at most one bounded batch per call
   (:mod:`timewheel.retention`).

It returns the next deadline. Who calls it decides how time passes: the real-time
:class:`~timewheel.loop.TriggerLoop` sleeps until the deadline, a ``FakeClock`` steps to it.
The trigger never runs user code.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from timewheel.clock import Clock
from timewheel.errors import DuplicateKeyError, VersionConflictError
from timewheel.logs import task_extra, task_label
from timewheel.ready import ReadyQueue
from timewheel.retention import Retention
from timewheel.stores.base import Changed, Store
from timewheel.task import Task, TaskState
from timewheel.wheel import TimingWheel

__all__ = ["FirePlan", "InstancePlanner", "Outcomes", "Trigger"]

log = logging.getLogger("timewheel.trigger")

_P = TaskState.PENDING


@dataclass(frozen=True, slots=True)
class FirePlan:
    """What to do with a batch of fired recurring instances (see :meth:`InstancePlanner.fire`).

    ``run`` are ids to move to READY, ``successors`` the next instances to insert in the same store
    step, ``skipped`` instances to cancel with the reason, ``missed`` the count of missed runs.
    """

    run: list[str]
    successors: list[Task]
    skipped: list[tuple[Task, str]]
    missed: int


class InstancePlanner(Protocol):
    """**Protocol:** decides what fired instances of recurring schedules do (``Recurring``)."""

    def fire(self, ids: Sequence[str], now: float) -> FirePlan:
        """Plan the fired instance ids: which run, which are skipped, the next instances."""
        ...


class Outcomes(Protocol):
    """**Protocol:** where the trigger reports the changes it makes besides promotion."""

    def finished(self, changed: Changed, exc: BaseException | None, event: str) -> None:
        """A run ended without its worker (*event* ``"timed_out"``: its lease expired)."""
        ...

    def skipped(self, changed: Changed) -> None:
        """An instance was cancelled instead of run (misfire or overlap policy)."""
        ...


class Trigger:
    """Owns the timing wheel and the trigger policy (see the module docstring).

    Args:
        store: the source of truth; every move is a store step.
        clock: where "now" comes from when a task is placed.
        ready: the ready queue the dispatcher's workers pull from.
        tick: the wheel's finest slot, in seconds.
        start: the wheel's start instant (epoch seconds).
        lease: lease length; expired leases are looked for every ``min(1, lease / 4)`` seconds.
        max_lease_recoveries: re-runs allowed after lost leases, on top of the retry policy.
        batch: most tasks moved PENDING -> READY in one store step.
        horizon: with a durable store, how far ahead the wheel holds the store's tasks.
        poll_interval: with a durable store, how often to look for other processes' work
            (``None``: never, when nothing else writes to the store or time is fake).
        served: the queue names the dispatcher serves (``None``: all).
        planner: plans recurring instances; ``None`` treats every task as one-shot.
        outcomes: told about expired leases and skipped instances.
        on_ready: called after tasks were put on the ready queue (wakes idle workers).
        retention: deletes expired finished tasks and maintains the store, a bounded step per
            :meth:`fire` (``None``: never).

    Thread-safe: :meth:`fire` runs in one thread at a time (the loop's, or the one advancing a
    fake clock), while :meth:`place`, :meth:`index` and :meth:`unindex` may be called from any.
    """

    def __init__(
        self,
        store: Store,
        ready: ReadyQueue,
        clock: Clock,
        *,
        tick: float,
        start: float,
        lease: float,
        max_lease_recoveries: int = 3,
        batch: int = 1_000,
        horizon: float = 300.0,
        poll_interval: float | None = 1.0,
        served: Iterable[str] | None = None,
        planner: InstancePlanner | None = None,
        outcomes: Outcomes | None = None,
        on_ready: Callable[[], None] | None = None,
        retention: Retention | None = None,
    ) -> None:
        self.store = store
        self.ready = ready
        self.clock = clock
        self.wheel: TimingWheel[str] = TimingWheel(tick=tick, start=start)
        self.lock = threading.RLock()
        """Guards the wheel (and the instance set beside it)."""
        self.planner = planner
        self.outcomes = outcomes
        self.on_ready = on_ready
        self.retention = retention
        self.served: frozenset[str] | None = None if served is None else frozenset(served)
        self.durable = store.durable
        self.lease = lease
        self.max_lease_recoveries = max_lease_recoveries
        self.batch = batch
        self.horizon = horizon
        self.poll_interval = poll_interval
        self.missed_fires = 0
        #: set when READY work waits in the store beyond the ready queue's capacity
        self.backlog = False
        self.active = False
        #: called with a deadline when a placed task is due earlier than planned (the loop's wake)
        self.waker: Callable[[float | None], None] | None = None
        #: when a real-time loop runs, a task placed already due is promoted by the placing thread
        self.promote_due_on_place = False
        self._instances: set[str] = set()  # wheel ids that are instances of recurring schedules
        self._refilled_until = -math.inf
        self._next_reap = -math.inf
        self._next_poll = -math.inf
        ready.on_low = self._on_ready_low

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, now: float) -> None:
        """Load the store's pending work into the wheel and look for READY work left there."""
        self.active = True
        self.refill_wheel(now)
        self.backlog = True  # pick up READY tasks left in a durable store

    def stop(self) -> None:
        """Stop asking for deadlines (what is in the wheel stays there)."""
        self.active = False

    # -- placing tasks in the wheel --------------------------------------------------------------
    def index(self, task: Task) -> None:
        """Put a PENDING, runnable task in the wheel, if it belongs to the wheel's horizon."""
        if task.state is not _P or task.unmet > 0:
            return
        if self.durable and task.due >= self._refilled_until:
            return  # beyond the horizon: the refill will load it
        self.place(task.id, task.due, self.clock.time(), instance=task.schedule_id is not None)

    def place(self, task_id: str, due: float, now: float, *, instance: bool = False) -> None:
        """Put a task in the wheel, or trigger it at once when a real-time loop runs and it is
        already due (handing it to the loop's thread would cost a thread switch per task under
        the GIL and change nothing about its order).

        *instance* marks an instance of a recurring schedule: those always go through the wheel,
        since firing them plans the next one.
        """
        if instance:
            with self.lock:
                self._instances.add(task_id)
        elif due <= now and self.promote_due_on_place:
            self.promote([task_id], now)
            return
        with self.lock:
            try:
                self.wheel.add(task_id, due)
            except DuplicateKeyError:
                pass  # placed already (a task indexed again): it keeps its slot
        waker = self.waker
        if waker is not None:
            waker(due)

    def unindex(self, ids: Iterable[str]) -> None:
        """Remove tasks from the wheel (cancelled, replaced, deleted)."""
        with self.lock:
            for task_id in ids:
                self.wheel.cancel(task_id)
                self._instances.discard(task_id)

    def __len__(self) -> int:
        with self.lock:
            return len(self.wheel)

    def __contains__(self, task_id: object) -> bool:
        with self.lock:
            return task_id in self.wheel

    def upcoming(self, horizon: float, *, bucket: float | str) -> list[tuple[float, int]]:
        """``(bucket start, count)`` of the wheel's entries per bucket over *horizon* seconds."""
        with self.lock:
            return self.wheel.upcoming(horizon, bucket=bucket)

    # -- firing ------------------------------------------------------------------------------------
    def fire(self, now: float) -> float | None:
        """Do everything due at *now* (see the module docstring); return the next deadline."""
        if now >= self._next_reap:  # first, so re-queued tasks due now fire in this pass
            self.reap(now)
            self._next_reap = now + min(1.0, self.lease / 4)
        with self.lock:
            ids = self.wheel.advance(now)
        for i in range(0, len(ids), self.batch):
            self.promote(ids[i : i + self.batch], now)
        if self.backlog and self._refill_due():
            self.refill_ready()
        if self.durable and now + self.horizon / 2 >= self._refilled_until:
            self.refill_wheel(now)
        if self.retention is not None:
            self.retention.step(now)  # bounded: at most one batch, at most every few seconds
        deadline = self.next_deadline(now)
        if self.durable and self.poll_interval is not None:
            # other processes share the store: look for what they scheduled or made ready
            if now >= self._next_poll:
                self.poll(now)
                self._next_poll = now + self.poll_interval
            deadline = self._next_poll if deadline is None else min(deadline, self._next_poll)
        return deadline

    def reap_now(self) -> None:
        """Look for expired leases at the next :meth:`fire`, whatever the interval says."""
        self._next_reap = -math.inf

    def next_deadline(self, now: float) -> float | None:
        """The earliest instant something is due: a wheel entry, a cascade step, a refill."""
        with self.lock:
            deadline = self.wheel.next_deadline()
        if self.durable and self.active:
            refill = self._refilled_until - self.horizon / 2  # when the wheel needs more
            deadline = refill if deadline is None else min(deadline, refill)
        if self.backlog and self._refill_due():
            deadline = now if deadline is None else min(deadline, now)
        return deadline

    def promote(self, ids: Sequence[str], now: float) -> None:
        """Move fired tasks PENDING -> READY in one store step and queue them."""
        successors: Sequence[Task] = ()
        skipped: Sequence[tuple[Task, str]] = ()
        instances = self._instances
        if instances and not instances.isdisjoint(ids):
            with self.lock:
                fired = [i for i in ids if i in instances]
                instances.difference_update(fired)
            plain = [i for i in ids if i not in fired] if len(fired) < len(ids) else []
            if self.planner is None:
                ids = list(ids)
            else:
                plan = self.planner.fire(fired, now)
                ids, successors, skipped = plain + plan.run, plan.successors, plan.skipped
                self.missed_fires += plan.missed
        moved = self.store.promote(ids, now, successors=successors)
        # Skip only once the successors are stored: a crash between the two steps then leaves the
        # skipped head PENDING (decided again after a restart), never a series without a head.
        for task, why in skipped:
            self._skip(task, why, now)
        for successor in successors:
            self.index(successor)
        if len(moved) != len(ids):
            self._reindex_unmoved(ids, moved)
        self.enqueue(moved)

    def enqueue(self, tasks: Iterable[Task]) -> None:
        """Queue READY tasks for this process's workers. Tasks of queue names the dispatcher
        does not serve stay READY in the store (for other processes' workers), so they never
        take the bounded queue's places from the queues served here.

        While older READY work waits in the store (the backlog), newer tasks wait there too:
        queueing them directly would let them overtake it for as long as the load lasts, since
        the queue would never drain to where a refill is due. Refills take the store's READY
        work highest priority first, then earliest due, so nothing starves.
        """
        ready, served = self.ready, self.served
        any_put = False
        for task in tasks:
            if served is not None and task.queue not in served:
                continue
            if not self.backlog and ready.put(task):
                any_put = True
            else:
                self.backlog = True  # stays READY in the store; refilled in due order
        if any_put and self.on_ready is not None:
            self.on_ready()
        elif self.backlog and self._refill_due() and self.waker is not None:
            self.waker(None)  # the loop refills now rather than at its next planned wake-up

    def _skip(self, task: Task, why: str, now: float) -> None:
        try:
            changed = self.store.transition(
                task.id,
                expected_version=task.version,
                state=TaskState.CANCELLED,
                now=now,
                error=f"skipped: {why}",
            )
        except VersionConflictError:
            return
        log.info("%s skipped: %s", task_label(task), why, extra=task_extra(task))
        if self.outcomes is not None:
            self.outcomes.skipped(changed)

    def _reindex_unmoved(self, ids: Sequence[str], moved: Sequence[Task]) -> None:
        """Ids the wheel emitted that the store did not promote: cancelled, replaced or already
        taken (dropped), or still PENDING and not yet due (put back, so nothing is lost). The
        last happens when a durable store keeps a due time rounded up to its microsecond above
        the float the wheel was given."""
        done = {t.id for t in moved}
        for task_id in ids:
            if task_id not in done:
                task = self.store.find(task_id)
                if task is not None and task.state is _P and task.unmet == 0:
                    self.index(task)

    # -- refills and polls ----------------------------------------------------------------------------
    def refill_ready(self) -> None:
        """Fill the ready queue's free places from READY tasks in the store, highest priority then
        earliest due first."""
        ready = self.ready
        free = ready.free
        if free <= 0:
            return
        limit = free + len(ready)
        served = None if self.served is None else sorted(self.served)
        rows = self.store.ready(limit=limit, queues=served)
        batch = [t for t in rows if t.id not in ready]
        for task in batch[:free]:
            ready.put(task)
        # A full page means more READY rows may wait beyond it (queued rows and rows pulled but
        # not yet claimed take places in it): look again, or they are stranded for good.
        self.backlog = len(batch) > free or len(rows) >= limit
        if batch and self.on_ready is not None:
            self.on_ready()

    def refill_wheel(self, now: float) -> None:
        """Load the store's runnable PENDING tasks due within the horizon into the wheel."""
        until = now + self.horizon if self.durable else math.inf
        self._load(self.store.due_before(until, limit=10_000_000))
        self._refilled_until = until

    def poll(self, now: float) -> None:
        """Load tasks due within the next poll interval that another process inserted, and queue
        READY tasks another process promoted (claims are compare-and-swap: one process wins)."""
        interval = self.poll_interval if self.poll_interval is not None else 1.0
        self._load(self.store.due_before(now + 2 * interval, limit=10_000))
        if self.ready.free:
            self.refill_ready()

    def _load(self, entries: Iterable[tuple[str, float, str | None]]) -> None:
        with self.lock:
            wheel, instances = self.wheel, self._instances
            for task_id, due, schedule_id in entries:
                if task_id not in wheel:
                    wheel.add(task_id, due)
                    if schedule_id is not None:
                        instances.add(task_id)

    def reap(self, now: float) -> None:
        """Re-run (or end TIMED_OUT) RUNNING tasks whose lease expired before *now*."""
        for task in self.store.expired_leases(now, limit=1_000):
            rerun = task.attempts < task.retry.max_attempts + self.max_lease_recoveries
            message = (
                f"lease of {task.lease_owner} expired at {task.lease_expires} during run "
                f"{task.attempts} (worker lost or stalled)"
            )
            try:
                changed = self.store.transition(
                    task.id,
                    expected_version=task.version,
                    state=_P if rerun else TaskState.TIMED_OUT,
                    now=now,
                    due=now,
                    lease_owner=None,
                    lease_expires=None,
                    error=message + ("; running it again" if rerun else "; no re-runs left"),
                )
            except VersionConflictError:
                continue  # it heartbeated or finished meanwhile
            log.warning("%s: %s", task_label(task), changed.task.error, extra=task_extra(task))
            if self.outcomes is not None:
                self.outcomes.finished(changed, None, "timed_out")
            elif changed.task.state is _P:
                self.index(changed.task)

    def _refill_due(self) -> bool:
        """Refill the ready queue from the store once it is at most half full: one store query
        per half queue of work, not one per task a worker took."""
        ready = self.ready
        return len(ready) <= ready.low_water and ready.free > 0

    def _on_ready_low(self) -> None:
        if self.backlog and self.waker is not None:
            self.waker(None)
