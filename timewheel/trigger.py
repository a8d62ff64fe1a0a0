"""The trigger: finds due work in the timing wheel and hands it to dispatch.

Driven by time, never by worker capacity. Each :meth:`Trigger.step` does a bounded slice of what
is due at ``now`` (:meth:`Trigger.fire` repeats steps until nothing due is left):

1. re-queue runs whose lease expired (a worker died or stalled), or end them TIMED_OUT when no
   re-run is left;
2. take the due tasks (from the wheel, and from the herds staged ahead) and move them
   PENDING -> READY in the store, one store step per chunk, as many chunks as fit in
   ``step_seconds``; instances of recurring schedules go through the :class:`InstancePlanner`
   first (misfire and overlap policy, the next instance materialised in the same store step);
3. put the READY tasks on the bounded ready queue; what does not fit stays READY in the store (the
   *backlog*) and is refilled, oldest first, as workers drain the queue;
4. pre-warm herds: a second holding ``herd_size`` or more recurring instances that comes within
   ``prewarm_ahead`` seconds is prepared in small slices during the time before it (below);
5. with a durable store, keep the wheel filled with the next ``horizon`` seconds of the store, and
   poll for work other processes scheduled or made ready (a store that notifies, such as
   PostgreSQL's, tells the trigger at once: :meth:`Trigger.work_scheduled` places another
   process's task in the wheel, :meth:`Trigger.work_changed` has the next step look in the
   store; the poll then only covers lost notifications);
6. delete finished tasks past their retention, at most one bounded batch per call
   (:mod:`timewheel.retention`).

It returns the next deadline: ``now`` itself while due work is left, so the real-time loop hands
READY work to the workers between slices instead of holding the interpreter for the whole of a
herd. Who calls it decides how time passes: the real-time :class:`~timewheel.loop.TriggerLoop`
sleeps until the deadline, a ``FakeClock`` steps to it. The trigger never runs user code.

Herds. Thousands of schedules sharing one slot (``0 0 * * *``) make one second hold them all.
The trigger counts the recurring instances it holds per second; once a second holding at least
``herd_size`` comes within ``prewarm_ahead``, each slice (at most ``slice_seconds`` of work,
spread over the time left) asks the planner to *prepare* a chunk of its heads (their
successors are computed and stored, in one store step per slice) and moves them out of the
wheel into a staging heap. At the instant only the state changes remain: the staged heads are
promoted in bounded chunks, the misfire and overlap decisions still made against the real
``now``; once the ready queue is full, a store with ``promote_keys`` reads back only keys. Full
garbage collections are held off from the first slice until the herd is promoted
(:mod:`timewheel.collector`). :meth:`Trigger.herds` reports what was seen and done.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from heapq import heappop, heappush
from typing import Protocol

from timewheel.clock import Clock
from timewheel.collector import CollectorHold
from timewheel.errors import DuplicateKeyError, VersionConflictError
from timewheel.logs import task_extra, task_label
from timewheel.plans import Herd, InstancePlanner, Warming
from timewheel.ready import ReadyQueue
from timewheel.retention import Retention
from timewheel.rules.base import utc_text
from timewheel.shards import SHARD_MASK, ShardedDict
from timewheel.stores import Promoted, SupportsPromoteKeys
from timewheel.stores.base import Changed, Store, SupportsNotifications, SupportsPendingAmong
from timewheel.task import Task, TaskState
from timewheel.wheel import TimingWheel, bucket_width

__all__ = ["Outcomes", "Trigger", "Waker"]

log = logging.getLogger("timewheel.trigger")

_P = TaskState.PENDING
_Moved = Task | Promoted  # what a promotion read back: tasks, or only their keys


class Outcomes(Protocol):
    """**Protocol:** where the trigger reports the changes it makes besides promotion."""

    def finished(self, changed: Changed, exc: BaseException | None, event: str) -> None:
        """A run ended without its worker (*event* ``"timed_out"``: its lease expired)."""
        ...

    def skipped(self, changed: Changed) -> None:
        """An instance was cancelled instead of run (misfire or overlap policy)."""
        ...


def _unzip(pairs: list[tuple[str, float]]) -> tuple[Sequence[str], Sequence[float]]:
    """``(ids, dues)`` of ``(id, due)`` pairs."""
    if not pairs:
        return (), ()
    ids, dues = zip(*pairs, strict=True)
    return ids, dues


class Waker(Protocol):
    """**Protocol:** the driver that sleeps towards the trigger's next deadline and can be woken
    earlier (:class:`~timewheel.loop.TriggerLoop`, the asyncio scheduler's ``LoopTimer``)."""

    #: the instant it next fires (epoch seconds), or None while it fires or has nothing armed;
    #: read without a lock, so that placing a later task costs no call (:meth:`wake` checks again)
    planned: float | None

    def wake(self, deadline: float | None = None) -> None:
        """Fire at *deadline* (None: now) if that is earlier than planned; from any thread."""
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
            (``None``: never, when nothing else writes to the store or time is fake). With a
            store that notifies (:class:`~timewheel.stores.base.SupportsNotifications`) the
            trigger also listens from :meth:`start` to :meth:`stop`, and the poll is the
            fallback for lost notifications.
        served: the queue names the dispatcher serves (``None``: all).
        planner: plans recurring instances; ``None`` treats every task as one-shot.
        outcomes: told about expired leases and skipped instances.
        on_ready: called after tasks were put on the ready queue (wakes idle workers).
        step_seconds: the trigger work one :meth:`step` aims at when much is due (at least one
            chunk is always moved): the longest the loop keeps workers waiting for the
            interpreter and the store's lock.
        herd_size: recurring instances in one second that make it a herd to pre-warm.
        prewarm_ahead: how long before a herd's second pre-warming may begin (with a durable
            store, at most ``horizon``: the wheel holds no more).
        slice_seconds: the trigger work one pre-warming slice aims at.
        retention: deletes expired finished tasks and maintains the store, a bounded step per
            :meth:`step` (``None``: never).
        hold_gc: keep CPython's full garbage collections off the heap during a herd's window,
            from its first pre-warming slice until it is promoted (:mod:`timewheel.collector`).

    Thread-safe: :meth:`step` and :meth:`fire` run in one thread at a time (the loop's, or the
    one advancing a fake clock), while :meth:`place`, :meth:`index` and :meth:`unindex` may be
    called from any.
    """

    #: pre-warming ends this long before a herd's second when the time allows (seconds)
    PREWARM_LEAD = 10.0
    #: the shortest pause between two pre-warming slices (seconds)
    MIN_GAP = 0.002
    #: ids a pre-warming chunk asks the planner about
    PREPARE_CHUNK = 32
    #: the most READY rows of a durable store one refill of the ready queue reads (whose
    #: workers claim batches from the store: a snapshot only has to wake one)
    REFILL_PAGE = 256
    #: the same for the memory store, whose refill costs about 1.5 µs per row: a step that
    #: reads at most this many stays within a few milliseconds behind a herd's backlog
    MEMORY_REFILL_PAGE = 2_048

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
        step_seconds: float = 0.003,
        herd_size: int = 1_000,
        prewarm_ahead: float = 300.0,
        slice_seconds: float = 0.003,
        retention: Retention | None = None,
        hold_gc: bool = True,
    ) -> None:
        self.store = store
        self.ready = ready
        self.clock = clock
        self.wheel: TimingWheel[str] = TimingWheel(tick=tick, start=start)
        self.lock = threading.RLock()
        """Guards the wheel (and the instance index, staging and release queue beside it)."""
        self.planner = planner
        self.outcomes = outcomes
        self.on_ready = on_ready
        self.retention = retention
        self.served: frozenset[str] | None = None if served is None else frozenset(served)
        self.durable = store.durable
        self._keys = store if isinstance(store, SupportsPromoteKeys) else None  # see promote
        #: the most rows :meth:`refill_ready` reads; the queue asks for a refill at half of it
        self.refill_page = min(
            ready.capacity, self.REFILL_PAGE if self.durable else self.MEMORY_REFILL_PAGE
        )
        ready.low_water = min(ready.low_water, self.refill_page // 2)
        self.lease = lease
        self.max_lease_recoveries = max_lease_recoveries
        self.batch = batch
        self.horizon = horizon
        self.poll_interval = poll_interval
        self.step_seconds = step_seconds
        self.herd_size = herd_size
        self.prewarm_ahead = min(prewarm_ahead, horizon) if self.durable else prewarm_ahead
        self.slice_seconds = slice_seconds
        #: the fewest tasks a step promotes (and heads a pre-warming slice prepares) when that
        #: many are waiting: a durable store's step has a fixed cost (a transaction and its
        #: commit) that small chunks would pay again and again
        self.min_chunk = 512 if self.durable else 16
        self.missed_fires = 0
        #: set when READY work waits in the store beyond the ready queue's capacity
        self.backlog = False
        # counts the tasks sent to the backlog; a refill compares it across its store read, so
        # a task that overflowed on another thread meanwhile keeps the backlog flag set
        self._overflowed = 0
        self.active = False
        #: the driver that sleeps towards the next deadline (the loop), woken when a task placed
        #: is due earlier than it planned
        self.waker: Waker | None = None
        #: when a real-time loop runs, a task placed already due is promoted by the placing thread
        self.promote_due_on_place = False
        # recurring instances held (in the wheel, staged or being released) -> due (sharded: a
        # herd's successors must not grow one large table in one slice, timewheel.shards)
        self._instances: ShardedDict[str, float] = ShardedDict()
        # second -> the instance ids placed due in it (may name ids gone since: checked on use)
        self._by_second: dict[int, list[str]] = {}
        self._seconds: list[int] = []  # heap of the keys of _by_second, to drop passed ones
        self._hot: set[int] = set()  # herd seconds not yet pre-warming
        self._warming: dict[int, Warming] = {}
        self._next_look = math.inf  # when a hot second comes within prewarm_ahead
        # prepared heads moved out of the wheel: id -> due, and a heap of (due, id) to release
        self._staged: ShardedDict[str, float] = ShardedDict()
        # the staged ids by due time (a herd shares a few), and a heap of those due times
        self._staged_by_due: dict[float, deque[str]] = {}
        self._staged_heap: list[float] = []
        self._releasing: deque[str] = deque()  # due ids taken from the wheel, not yet promoted
        self._cost_per_id = 20e-6  # running estimate of the trigger work per promoted id
        self._store_cost = 20e-6  # running estimate of a pre-warming store step's work per head
        #: freezes the collector's generations during a herd's window
        self.collector = CollectorHold(hold_gc)
        self._refilled_until = -math.inf
        self._next_reap = -math.inf
        self._next_poll = -math.inf
        # set by notifications from other processes (any thread), done by the next step
        self._look_pending = False
        self._look_ready = False
        self._unlisten: Callable[[], None] | None = None
        ready.on_low = self._on_ready_low

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, now: float) -> None:
        """Load the store's pending work into the wheel and look for READY work left there."""
        self.active = True
        self.refill_wheel(now)
        self.backlog = True  # pick up READY tasks left in a durable store
        store = self.store
        if self.poll_interval is not None and isinstance(store, SupportsNotifications):
            self._unlisten = store.listen(self)

    def stop(self) -> None:
        """Stop asking for deadlines (what is in the wheel stays there) and stop listening."""
        self.active = False
        unlisten, self._unlisten = self._unlisten, None
        if unlisten is not None:
            unlisten()
        self.collector.release()

    # -- what other processes did (the WorkListener protocol) -----------------------------------
    def work_scheduled(self, entries: Sequence[tuple[str, float, str | None]]) -> None:
        """Another process inserted these PENDING tasks ``(id, due, schedule_id)``: those within
        the wheel's horizon are placed at once (the rest come with a later refill), and the loop
        wakes if one is due before its planned wake-up. Called from the store's thread."""
        if not self.active:
            return
        until = self._refilled_until
        near = [e for e in entries if e[1] < until]
        if not near:
            return
        self._load(near)
        if self.waker is not None:
            self.waker.wake(min(e[1] for e in near))

    def work_changed(self, *, pending: bool, ready: bool) -> None:
        """Another process inserted PENDING work due soon (*pending*: the next step loads the
        wheel's horizon from the store) or made work READY (*ready*: the next step refills the
        ready queue, which wakes idle workers). Called from the store's thread."""
        if not self.active:
            return
        if pending:
            self._look_pending = True
        if ready:
            self._look_ready = True
        if self.waker is not None:
            self.waker.wake(None)

    # -- placing tasks in the wheel --------------------------------------------------------------
    def index(self, task: Task) -> None:
        """Put a PENDING, runnable task in the wheel, if it belongs to the wheel's horizon."""
        if task.state is not _P or task.unmet > 0:
            return
        if self.durable and task.due >= self._refilled_until:
            return  # beyond the horizon: the refill will load it
        if task.schedule_id is not None:
            self._place_instance(task.id, task.due)
        else:
            self.place(task.id, task.due, self.clock.time())

    def index_many(self, tasks: Iterable[Task]) -> None:
        """:meth:`index` for a batch of new tasks: the runnable one-shot tasks through
        :meth:`place_many`."""
        ids: list[str] = []
        dues: list[float] = []
        for task in tasks:
            if task.state is _P and task.unmet == 0 and task.schedule_id is None:
                ids.append(task.id)
                dues.append(task.due)
            else:
                self.index(task)
        if ids:
            self.place_many(ids, dues, self.clock.time())

    def place_many(self, ids: Sequence[str], dues: Sequence[float], now: float) -> None:
        """:meth:`place` for a batch of new one-shot tasks (``dues[k]`` is ``ids[k]``'s), in one
        hold of the lock and at most one wake-up. When a real-time loop runs, the tasks already
        due are promoted together, in steps of at most ``batch``; on a durable store the tasks
        beyond the wheel's horizon are left to its refill. Runtime: O(1) per task."""
        if self.durable and dues and max(dues) >= self._refilled_until:
            until = self._refilled_until
            ids, dues = _unzip([e for e in zip(ids, dues, strict=True) if e[1] < until])
        if not dues:
            return
        earliest = min(dues)
        if earliest <= now and self.promote_due_on_place:
            due = [i for i, d in zip(ids, dues, strict=True) if d <= now]
            ids, dues = _unzip([e for e in zip(ids, dues, strict=True) if e[1] > now])
            for start in range(0, len(due), self.batch):
                self.promote(due[start : start + self.batch], now)
            if not dues:
                return
            earliest = min(dues)
        with self.lock:
            wheel = self.wheel
            try:
                wheel.add_many(ids, dues)
            except DuplicateKeyError:  # a task indexed again keeps its slot
                for task_id, at in zip(ids, dues, strict=True):
                    if task_id not in wheel:
                        wheel.add(task_id, at)
        waker = self.waker
        if waker is not None:
            planned = waker.planned
            if planned is None or earliest < planned:
                waker.wake(earliest)

    def place(self, task_id: str, due: float, now: float, *, instance: bool = False) -> None:
        """Put a task in the wheel, or trigger it at once when a real-time loop runs and it is
        already due (handing it to the loop's thread would cost a thread switch per task under
        the GIL and change nothing about its order).

        *instance* marks an instance of a recurring schedule: those always go through the wheel,
        since firing them plans the next one.
        """
        if instance:
            self._place_instance(task_id, due)
            return
        if due <= now and self.promote_due_on_place:
            self.promote([task_id], now)
            return
        with self.lock:
            try:
                self.wheel.add(task_id, due)
            except DuplicateKeyError:
                return  # placed already (a task indexed again): it keeps its slot
        waker = self.waker
        if waker is not None:
            planned = waker.planned  # a wake (a call, a lock) only for a task due before it
            if planned is None or due < planned:
                waker.wake(due)

    def _place_instance(self, task_id: str, due: float) -> None:
        with self.lock:
            try:
                self.wheel.add(task_id, due)
            except DuplicateKeyError:
                return  # placed already (a task indexed again): it keeps its slot
            hot = self._count(task_id, due)
        waker = self.waker
        if waker is not None:
            waker.wake(due if hot is None else min(due, hot))

    def _count(self, task_id: str, due: float) -> float | None:
        """Index a recurring instance by its second (lock held); when the second turns into a
        herd, the instant its pre-warming may begin."""
        self._instances[task_id] = due
        second = math.floor(due)
        ids = self._by_second.get(second)
        if ids is None:
            self._by_second[second] = [task_id]
            heappush(self._seconds, second)
            return None
        ids.append(task_id)
        warming = self._warming.get(second)
        if warming is not None:
            if warming.done and second > self.wheel.now:
                warming.done = False  # more heads came for a herd already pre-warmed
                warming.next_at = -math.inf
                return -math.inf
            return None
        if len(ids) != self.herd_size or self.planner is None:
            return None
        self._hot.add(second)
        begin = second - self.prewarm_ahead
        if begin < self._next_look:
            self._next_look = begin
            return begin
        return None

    def unindex(self, ids: Iterable[str]) -> None:
        """Remove tasks from the wheel (cancelled, replaced, deleted)."""
        forget: list[str] = []
        with self.lock:
            staged = self._staged
            for task_id in ids:
                self.wheel.cancel(task_id)
                if self._instances.pop(task_id, None) is not None and task_id in staged:
                    del staged[task_id]  # its heap entry is skipped when it comes up
                    forget.append(task_id)
        if forget and self.planner is not None:
            self.planner.forget(forget)

    def __len__(self) -> int:
        with self.lock:
            return len(self.wheel) + len(self._staged) + len(self._releasing)

    def __contains__(self, task_id: object) -> bool:
        with self.lock:
            return task_id in self.wheel or task_id in self._staged

    def upcoming(self, horizon: float, *, bucket: float | str) -> list[tuple[float, int]]:
        """``(bucket start, count)`` of the tasks waiting to fire per bucket over *horizon*
        seconds (the wheel's entries and the staged heads of herds), buckets aligned to
        multiples of their width."""
        with self.lock:
            rows = self.wheel.upcoming(horizon, bucket=bucket)
            staged = list(self._staged.values()) if self._staged else []
            now, tick = self.wheel.now, self.wheel.tick
        if not staged:
            return rows
        counts = dict(rows)
        per_second = round(1.0 / tick)
        bucket_ticks = max(1, round(bucket_width(bucket) * per_second))
        limit = now + horizon
        for due in staged:
            if due < limit:
                number = math.floor(max(due, now) * per_second) // bucket_ticks
                start = number * bucket_ticks / per_second
                counts[start] = counts.get(start, 0) + 1
        return sorted(counts.items())

    # -- firing ------------------------------------------------------------------------------------
    def fire(self, now: float) -> float | None:
        """Do everything due at *now*, step after step; return the next deadline.

        For a caller that moves time itself (a ``FakeClock``, ``run_pending``): every task the
        wheel holds due at *now* is READY when it returns (tasks placed due meanwhile, such as
        catch-up runs, fire at the next call). A real-time loop calls :meth:`step` instead.
        """
        self._reap_if_due(now)  # first, so re-queued tasks due now fire in this pass
        with self.lock:
            self._releasing.extend(self.wheel.advance(now))
        while True:
            deadline = self.step(now, advance=False)
            if not self._release_left(now):
                return deadline

    def step(self, now: float, *, advance: bool = True) -> float | None:
        """Do a bounded slice of what is due at *now* (see the module docstring); return the
        next deadline, which is *now* itself while due work is left. With *advance* false the
        wheel is not advanced (:meth:`fire` advanced it once)."""
        self._reap_if_due(now)  # first, so re-queued tasks due now fire in this pass
        self._release(now, advance)
        if self._seconds and self._seconds[0] < now - 1:
            self._drop_passed(now)
        if self.backlog and self._refill_due():
            self.refill_ready()
        # due work first: the refill, a notification's look and the poll read the herd itself
        busy = self._release_left(now)
        refill = self.durable and now + self.horizon / 2 >= self._refilled_until
        if not busy and (self._look_pending or refill):
            self._look_pending = False  # before the query: a later notification looks again
            self.refill_wheel(now)
        if self._look_ready:
            self._look_ready = False
            if self.ready.free:
                self.refill_ready()
        if self.retention is not None:
            self.retention.step(now)  # bounded: at most one batch, at most every few seconds
        polling = self.durable and self.poll_interval is not None
        if polling and not busy and now >= self._next_poll:
            # other processes share the store: look for what they scheduled or made ready
            self.poll(now)
            self._next_poll = now + (self.poll_interval or 1.0)
        if self.planner is not None:  # last: the refills above may have brought a herd
            if now >= self._next_look:
                self._look(now)
            if self._warming and not busy:  # due work comes first
                self._prewarm(now)
        if self.collector.held and not self._in_herd(now):
            self.collector.release()
        deadline = self.next_deadline(now)
        if polling:
            deadline = self._next_poll if deadline is None else min(deadline, self._next_poll)
        return deadline

    def _reap_if_due(self, now: float) -> None:
        if now >= self._next_reap:
            self.reap(now)
            self._next_reap = now + min(1.0, self.lease / 4)

    def _release(self, now: float, advance: bool) -> None:
        """Promote due tasks in chunks until ``step_seconds`` of work is done or none is left
        (a chunk is sized by the cost per task measured so far, never below ``min_chunk``)."""
        clock = time.perf_counter
        end = clock() + self.step_seconds
        ready = self.ready
        while True:
            fits = int((end - clock()) / self._cost_per_id)
            ids = self._take_due(now, max(self.min_chunk, min(self.batch, fits)), advance)
            if not ids:
                return
            advance = False  # once per step: what it gave is all taken first
            idle = not ready
            began = clock()
            self.promote(ids, now)
            done = clock()
            cost = max(1e-7, (done - began) / len(ids))
            self._cost_per_id = 0.7 * self._cost_per_id + 0.3 * cost
            if idle and ready:
                # The workers were idle and were just woken: hand them the interpreter now,
                # so the first tasks of a herd start while the rest is still being promoted
                # (without this they would wait for the interpreter's switch interval).
                time.sleep(0)
            if done >= end:
                return

    def _take_due(self, now: float, room: int, advance: bool) -> list[str]:
        """Up to *room* due ids: staged heads first, then the wheel's (advanced, when
        *advance*, only once what it gave last is all taken)."""
        out: list[str] = []
        with self.lock:
            heap, staged, by_due = self._staged_heap, self._staged.shards, self._staged_by_due
            while heap and heap[0] <= now and len(out) < room:
                ids = by_due[heap[0]]
                while ids and len(out) < room:
                    task_id = ids.popleft()
                    if staged[hash(task_id) & SHARD_MASK].pop(task_id, None) is not None:
                        out.append(task_id)
                if not ids:
                    del by_due[heappop(heap)]
            releasing = self._releasing
            if len(out) < room:
                if advance and not releasing:
                    releasing.extend(self.wheel.advance(now))
                while releasing and len(out) < room:
                    out.append(releasing.popleft())
        return out

    def _release_left(self, now: float) -> bool:
        """True while fired ids wait to be promoted or staged heads are due."""
        with self.lock:
            heap = self._staged_heap
            return bool(self._releasing) or bool(heap and heap[0] <= now)

    def reap_now(self) -> None:
        """Look for expired leases at the next :meth:`fire`, whatever the interval says."""
        self._next_reap = -math.inf

    def next_deadline(self, now: float) -> float | None:
        """The earliest instant something is due: a wheel entry, a cascade step, a staged herd,
        a pre-warming slice, a refill, a retention batch after a full one."""
        with self.lock:
            deadline = self.wheel.next_deadline()
            heap = self._staged_heap
            if heap:
                deadline = heap[0] if deadline is None else min(deadline, heap[0])
            if self._releasing:
                deadline = now
        if self.planner is not None:
            # Pre-warming never asks for "now": a loop stepping a fake clock takes a deadline
            # at or before now, after a step that ran nothing, for a stuck one and stops.
            soonest = now + self.MIN_GAP
            if self._hot and self._next_look < math.inf:
                at = max(self._next_look, soonest)
                deadline = at if deadline is None else min(deadline, at)
            for warming in list(self._warming.values()):
                if not warming.done:
                    at = max(warming.next_at, soonest)
                    deadline = at if deadline is None else min(deadline, at)
        if self.durable and self.active:
            refill = self._refilled_until - self.horizon / 2  # when the wheel needs more
            deadline = refill if deadline is None else min(deadline, refill)
        if self.backlog and self._refill_due():
            deadline = now if deadline is None else min(deadline, now)
        if self.retention is not None and self.retention.catching_up:
            at = self.retention.next_pass  # expired tasks wait: the next batch soon
            deadline = at if deadline is None else min(deadline, at)
        return deadline

    def promote(self, ids: Sequence[str], now: float) -> None:
        """Move fired tasks PENDING -> READY in one store step and queue them."""
        successors: Sequence[Task] = ()
        skipped: Sequence[tuple[Task, str]] = ()
        expected: Mapping[str, int] = {}
        instances = self._instances
        if instances and not instances.isdisjoint(ids):
            parts = instances.shards
            with self.lock:
                fired = [i for i in ids if parts[hash(i) & SHARD_MASK].pop(i, None) is not None]
            fired_set = set(fired) if len(fired) < len(ids) else None
            plain = [i for i in ids if i not in fired_set] if fired_set is not None else []
            if self.planner is None:
                ids = list(ids)
            else:
                plan = self.planner.fire(fired, now)
                ids, successors, skipped = plain + plan.run, plan.successors, plan.skipped
                expected = plan.expected
                self.missed_fires += plan.missed
        promoted: list[Promoted] = []
        tasks: list[Task] = []
        if self._keys is not None and (self.backlog or not self.ready.free):
            # none would be queued (they wait READY for a refill): only the keys are read back
            moved: Sequence[_Moved]
            moved = promoted = self._keys.promote_keys(ids, now, successors=successors)
        else:
            moved = tasks = self.store.promote(ids, now, successors=successors)
        # Skip only once the successors are stored: a crash between the two steps then leaves the
        # skipped head PENDING (decided again after a restart), never a series without a head.
        for task, why in skipped:
            self._skip(task, why, now)
        for successor in successors:
            self.index(successor)
        if expected:
            self._repair(moved, expected, now)
        if len(moved) != len(ids):
            self._reindex_unmoved(ids, moved)
        if promoted:
            self._left_in_store(promoted)
        else:
            self.enqueue(tasks)

    def _repair(self, moved: Sequence[_Moved], expected: Mapping[str, int], now: float) -> None:
        """Prepared heads promoted with another version than planned were replaced since (in
        another process): their pre-warmed successor was cancelled with the old schedule, so
        the schedule as it is now gives the next instance."""
        replaced = [m for m in moved if m.id in expected and m.version != expected[m.id] + 1]
        if replaced and self.planner is not None:
            found = [m if isinstance(m, Task) else self.store.find(m.id) for m in replaced]
            successors = self.planner.repair([t for t in found if t is not None], now)
            if successors:
                self.store.promote((), now, successors=successors)
                for successor in successors:
                    self.index(successor)

    def _left_in_store(self, moved: Sequence[Promoted]) -> None:
        """:meth:`enqueue` for tasks it would not queue: READY in the store, refilled later."""
        if any(self.served is None or m.queue in self.served for m in moved):
            self._to_backlog()
        self._wake_for_backlog()

    def _to_backlog(self) -> None:
        """A served READY task stays in the store, for a refill in due order."""
        self.backlog = True
        self._overflowed += 1  # a refill reading the store meanwhile keeps the flag set

    def _wake_for_backlog(self) -> None:
        """Have the loop refill now, rather than at its next planned wake-up, once it is due."""
        if self.backlog and self._refill_due() and self.waker is not None:
            self.waker.wake(None)

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
                self._to_backlog()
        if any_put and self.on_ready is not None:
            self.on_ready()
        else:
            self._wake_for_backlog()

    def inserted_ready(self, tasks: Sequence[Task] = ()) -> None:
        """New work a durable store stored READY, already due: queued as a promotion's while
        the trigger runs, else (or without *tasks*) left READY for the next refill."""
        if tasks and self.active:
            self.enqueue(tasks)
        else:
            self._to_backlog()
            self._wake_for_backlog()

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

    def _reindex_unmoved(self, ids: Sequence[str], moved: Sequence[_Moved]) -> None:
        """Ids the wheel emitted that the store did not promote: cancelled, replaced or already
        taken (dropped), or still PENDING and not yet due (put back, so nothing is lost). The
        last happens when a durable store keeps a due time rounded up to its microsecond above
        the float the wheel was given."""
        done = {t.id for t in moved}
        unmoved = [task_id for task_id in ids if task_id not in done]
        store = self.store
        if isinstance(store, SupportsPendingAmong):
            # one read: with several processes on the store, most were promoted by another one
            waiting = store.pending_among(unmoved)
        else:
            found = (store.find(task_id) for task_id in unmoved)
            waiting = [
                (t.id, t.due, t.schedule_id)
                for t in found
                if t is not None and t.state is _P and t.unmet == 0
            ]
        if waiting:
            # back in the wheel, never promoted from here: a store on its server's clock
            # refuses a task not yet due by that clock, and the loop's next step tries again
            self._load(waiting)
            if self.waker is not None:
                self.waker.wake(min(due for _, due, _ in waiting))

    # -- herds ------------------------------------------------------------------------------------
    def _drop_passed(self, now: float) -> None:
        """Forget the per-second index of seconds gone by (their instances fired or left)."""
        with self.lock:
            seconds, by_second = self._seconds, self._by_second
            while seconds and seconds[0] < now - 1:
                second = heappop(seconds)
                by_second.pop(second, None)
                self._hot.discard(second)
            for second in [s for s, w in self._warming.items() if s < now - 60 and w.done]:
                del self._warming[second]

    def _waiting(self, second: int, ids: Iterable[str]) -> list[str]:
        """Those of *ids* still waiting in the wheel due in *second* (lock held): the per-second
        lists may name ids fired, cancelled or placed again elsewhere since."""
        instances, wheel, floor = self._instances.shards, self.wheel, math.floor
        out: list[str] = []
        for task_id in ids:
            due = instances[hash(task_id) & SHARD_MASK].get(task_id)
            if due is not None and floor(due) == second and task_id in wheel:
                out.append(task_id)
        return out

    def _look(self, now: float) -> None:
        """Begin pre-warming the herds that came within ``prewarm_ahead`` (their ids are
        checked slice by slice, not here: this step stays short whatever the herd's size)."""
        began: list[Warming] = []
        with self.lock:
            horizon = now + self.prewarm_ahead
            later = math.inf
            for second in sorted(self._hot):
                if second <= now:
                    self._hot.discard(second)  # its instant came: nothing left to prepare ahead
                elif second <= horizon:
                    self._hot.discard(second)
                    placed = self._by_second.setdefault(second, [])
                    warming = Warming(second=second, placed=placed, next_at=now)
                    self._warming[second] = warming
                    began.append(warming)
                else:
                    later = min(later, second - self.prewarm_ahead)
            self._next_look = later
        for warming in began:
            log.info(
                "herd: %d recurring instances due in the second from %s; pre-warming them",
                warming.count,
                utc_text(warming.second),
            )

    def _prewarm(self, now: float) -> None:
        """Run one pre-warming slice for the earliest herd whose slice is due."""
        due = [w for w in self._warming.values() if not w.done and w.next_at <= now]
        if not due:
            return
        warming = min(due, key=lambda w: w.second)
        if now >= warming.second:
            warming.done = True  # its instant came: what is left fires from the wheel
            return
        if not warming.left and warming.deferred:
            if now < warming.retry_at:
                warming.next_at = warming.retry_at
                return
            warming.again, warming.deferred = warming.deferred, []
        self._slice(warming, now)
        left = warming.left
        if left:
            time_left = warming.second - self.PREWARM_LEAD - now
            slices = math.ceil(left / max(1, warming.per_slice))
            gap = time_left / slices if time_left > 0 else 0.0
            warming.next_at = now + min(1.0, max(self.MIN_GAP, gap))
        elif warming.deferred:
            warming.retry_at = now + 1.0  # their predecessors fire first
            warming.next_at = warming.retry_at
        else:
            warming.done = True
            if warming.reported:
                return
            warming.reported = True
            log.info(
                "herd at %s: %d of %d instances prepared (%d successors stored) in %d slices, "
                "%.3f s of trigger work, the longest slice %.1f ms",
                utc_text(warming.second),
                warming.prepared,
                warming.count,
                warming.successors,
                warming.slices,
                warming.work,
                warming.longest_slice * 1e3,
            )

    def _slice(self, warming: Warming, now: float) -> None:
        """Prepare chunks of the herd's heads while ``slice_seconds`` allows (counting the store
        step still to come, by its cost per head measured so far): one store step stores their
        successors, then the prepared heads move from the wheel to the staging heap."""
        planner = self.planner
        assert planner is not None
        clock = time.perf_counter
        began = clock()
        prepared: list[str] = []
        successors: list[Task] = []
        looked, spent = 0, 0.0
        # at least this many ids per slice, fewer when each costs the planner much
        affordable = int(self.slice_seconds / warming.head_cost) if warming.head_cost else 64
        least = min(self.min_chunk, 64, max(1, affordable))
        while warming.left:
            chunk_began = clock()
            taken = warming.take(warming.chunk(self.PREPARE_CHUNK, self.slice_seconds - spent))
            looked += len(taken)
            with self.lock:
                chunk = self._waiting(warming.second, dict.fromkeys(taken))
            plan = planner.prepare(chunk, now)
            prepared.extend(plan.prepared)
            successors.extend(plan.successors)
            warming.deferred.extend(plan.deferred)
            warming.declined += len(chunk) - len(plan.prepared) - len(plan.deferred)
            chunk_ended = clock()
            spent, chunk_cost = chunk_ended - began, chunk_ended - chunk_began
            warming.measured(len(taken), chunk_cost)
            after = (len(successors) + self.PREPARE_CHUNK) * self._store_cost
            if looked >= least and spent + chunk_cost + after >= self.slice_seconds:
                break
        if successors:
            stored = clock()
            try:
                self.store.promote((), now, successors=successors)
            except BaseException:
                planner.forget(prepared)
                raise
            for successor in successors:
                self.index(successor)
            per_head = (clock() - stored) / len(successors)
            self._store_cost = 0.7 * self._store_cost + 0.3 * max(1e-7, per_head)
        gone: list[str] = []
        with self.lock:
            instances, staged, by_due, wheel = (
                self._instances.shards,
                self._staged.shards,
                self._staged_by_due,
                self.wheel,
            )
            for task_id in prepared:
                part = hash(task_id) & SHARD_MASK
                due = instances[part].get(task_id)
                if due is not None and wheel.cancel(task_id):
                    staged[part][task_id] = due
                    ids = by_due.get(due)
                    if ids is None:
                        ids = by_due[due] = deque()
                        heappush(self._staged_heap, due)
                    ids.append(task_id)
                else:
                    gone.append(task_id)
        if gone:
            planner.forget(gone)
        self.collector.hold()  # what the slice made is held too
        took = clock() - began
        warming.prepared += len(prepared) - len(gone)
        warming.successors += len(successors)
        warming.work += took
        warming.slices += 1
        warming.longest_slice = max(warming.longest_slice, took)
        warming.per_slice = max(1, looked)

    def _in_herd(self, now: float) -> bool:
        """True while a herd pre-warms, has heads staged for its instant or is being promoted."""
        busy = bool(self._releasing or self._staged_heap)  # (reading their size needs no lock)
        return busy or any(not w.done and now < w.second for w in list(self._warming.values()))

    def herds(self, now: float, horizon: float = math.inf) -> list[Herd]:
        """The herds seen coming within *horizon* seconds of *now* (and those whose second
        came in the last minute), earliest first, with what pre-warming did for each. A herd
        not yet pre-warming counts the instances placed in its second (an upper bound: ids
        cancelled or moved since are only found out when it is pre-warmed)."""
        out: list[Herd] = []
        with self.lock:
            for second in sorted(self._hot | self._warming.keys()):
                if second > now + horizon:
                    continue
                warming = self._warming.get(second)
                if warming is None:
                    if second >= now:
                        placed = len(self._by_second.get(second, ()))
                        out.append(Herd(start=float(second), count=placed, state="ahead"))
                    continue
                if now >= second:
                    due_left = bool(self._staged_heap and self._staged_heap[0] < second + 1)
                    state = "firing" if due_left else "fired"
                else:
                    state = "warm" if warming.done else "warming"
                out.append(
                    Herd(
                        start=float(second),
                        count=warming.count,
                        state=state,
                        prepared=warming.prepared,
                        successors=warming.successors,
                        deferred=len(warming.deferred),
                        declined=warming.declined,
                        remaining=warming.left,
                        work=warming.work,
                        slices=warming.slices,
                        longest_slice=warming.longest_slice,
                    )
                )
        return out

    def herd_ids(self, start: float) -> list[str]:
        """The instances waiting to fire in the second from *start*: in the wheel or staged.

        The per-second list is copied under the lock and checked outside it, so asking costs
        the trigger no long pause even for a herd of 100,000.
        """
        second = math.floor(start)
        with self.lock:
            placed = list(self._by_second.get(second, ()))
            staged = list(self._staged_by_due.items())
        instances, floor = self._instances, math.floor
        out = [
            i
            for i in dict.fromkeys(placed)
            if (due := instances.get(i)) is not None and floor(due) == second
        ]
        known = set(out)
        waiting = self._staged
        for due, ids in staged:
            if floor(due) == second:
                out.extend(i for i in list(ids) if i in waiting and i not in known)
        return out

    # -- refills and polls ----------------------------------------------------------------------------
    def refill_ready(self) -> None:
        """Fill the ready queue's free places from READY tasks in the store, highest priority then
        earliest due first."""
        ready = self.ready
        free = ready.free
        if free <= 0:
            return
        limit = min(free + len(ready), self.refill_page)
        served = None if self.served is None else sorted(self.served)
        overflowed = self._overflowed
        rows = self.store.ready(limit=limit, queues=served)
        batch = [t for t in rows if t.id not in ready]
        left = len(batch) > free
        for task in batch[:free]:
            if not ready.put(task):
                left = True  # places taken meanwhile by another thread: fetched next time
        # A full page means more READY rows may wait beyond it (queued rows and rows pulled but
        # not yet claimed take places in it): look again, or they are stranded for good. So
        # does a task promoted on another thread (a due-now schedule()) that went to the
        # backlog after the read above: clearing the flag would strand it.
        self.backlog = left or len(rows) >= limit or self._overflowed != overflowed
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
        if not self._releasing:  # else ids taken from the wheel and not yet promoted come back
            self._load(self.store.due_before(now + 2 * interval, limit=10_000))
        if self.ready.free:
            self.refill_ready()

    def _load(self, entries: Iterable[tuple[str, float, str | None]]) -> None:
        wake: float | None = None
        with self.lock:
            wheel, staged = self.wheel, self._staged
            for task_id, due, schedule_id in entries:
                if task_id not in wheel and task_id not in staged:
                    wheel.add(task_id, due)
                    if schedule_id is not None:
                        hot = self._count(task_id, due)
                        if hot is not None:
                            wake = hot
        if wake is not None and self.waker is not None:
            self.waker.wake(wake)

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
            self.waker.wake(None)
