"""``MemoryStore``: the default, in-process store. Fast, thread-safe, gone when the process ends."""

from __future__ import annotations

import functools
import heapq
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, MutableMapping, Sequence
from typing import Any

from timewheel.shards import SHARD_MASK, ShardedDict
from timewheel.stores import policy
from timewheel.stores.base import Changed, Finish, Lease, NewTasks, OnConflict, Store
from timewheel.stores.compact import CompactRecords
from timewheel.stores.ready_index import ReadyIndex
from timewheel.task import (
    DEFAULT_QUEUE,
    NO_RETRY,
    TERMINAL_STATES,
    ScheduleRecord,
    Task,
    TaskState,
    check_transition,
    function_name,
)

__all__ = ["MemoryStore"]

_P = TaskState.PENDING
_R = TaskState.READY
_RUN = TaskState.RUNNING
_PRUNE_BATCH = 1000  # deletions per hold of the lock in prune()
# maintain() rebuilds the tables of this many entries or more (smaller ones are small blocks that
# the allocator reuses anywhere) and of at most this many (a copy holds the lock ~20 ns an entry);
# a sharded table is rebuilt part by part, and one call copies about REBUILD_BUDGET entries at
# most (the next call goes on where it stopped), so that no call holds the lock much over a few
# milliseconds whatever the store's size
REBUILD_MIN = 4096
REBUILD_MAX = 250_000
REBUILD_BUDGET = 60_000


def _let_others_in() -> None:
    """Between two holds of the lock: hand the interpreter to a thread waiting for the lock.

    Releasing a lock does not pass it on: without this, the pruning thread takes it again before
    a waiting thread even runs, and that thread waits for the whole prune (half a second for a
    million tasks)."""
    time.sleep(0)


class MemoryStore(Store):
    """Tasks in a dict behind one lock; every change is a compare-and-swap on ``version``.

    Accepts any callable and any arguments (nothing is serialized). Runtime complexity: insert,
    get, transition, claim, heartbeat and finish are O(1) (plus the dependents they settle, and
    O(log READY) for a task entering or leaving READY);
    ``ready`` costs the tasks it returns (READY tasks are kept in its order,
    :class:`~timewheel.stores.ready_index.ReadyIndex`); ``due_before``, ``expired_leases`` and
    ``tasks`` scan the matching state's tasks.

    Compact pending tasks: :meth:`add_pending` (the path ``Scheduler.schedule`` takes for a
    one-shot task with default options) keeps a fresh PENDING task as a small record
    (:class:`~timewheel.stores.compact.CompactRecords`), about a fifth of a :class:`Task`
    snapshot. Reads see an ordinary Task built on the fly; the first change (promotion to READY,
    cancellation, replacement) stores the full snapshot.

    The task table and the PENDING and READY id tables are split 16 ways by the id's hash
    (:class:`~timewheel.shards.ShardedDict`): a herd adds 100,000 tasks to them within minutes,
    and a plain dict would grow by moving all its entries in one insertion.

    Maintenance (:meth:`maintain`, which a scheduler's retention calls from its trigger) rebuilds
    the large tables, so that their memory comes from one thread's allocator.

    After :meth:`close` the store refuses changes with :class:`~timewheel.errors.StoreError`;
    reads keep working. Implements :class:`~timewheel.stores.base.SupportsCompactInsert`,
    :class:`~timewheel.stores.base.SupportsNewTasks`,
    :class:`~timewheel.stores.base.SupportsInspection` and
    :class:`~timewheel.stores.base.SupportsMaintenance`.
    """

    durable = False

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # The tables that grow by a herd's size in the minutes before it (its successors stored
        # ahead, then its heads made READY) are sharded, so that no insertion grows a table of
        # 100,000s of entries in one go (timewheel.shards); the other states keep the order their
        # tasks entered them in one dict (retention and the ended queries read that order).
        self._tasks: ShardedDict[str, Task] = ShardedDict()
        self._lite = CompactRecords()  # fresh PENDING tasks with default options
        self._pending: ShardedDict[str, None] = ShardedDict()
        self._ready_ids: ShardedDict[str, None] = ShardedDict()
        self._by_state: dict[TaskState, MutableMapping[str, None]] = {s: {} for s in TaskState}
        self._by_state[_P] = self._pending
        self._by_state[_R] = self._ready_ids
        self._ready = ReadyIndex()  # the READY tasks in the order ready() returns them
        self._dependents: dict[str, list[str]] = {}
        # upstream id -> ids of the tasks naming it in ``after``, kept after it settled them
        self._downstream: dict[str, dict[str, None]] = {}
        self._schedules: dict[str, ScheduleRecord] = {}
        # schedule id -> ids of its instances that are not terminal (the busy/head queries)
        self._active_by_schedule: dict[str, dict[str, None]] = {}
        # PENDING tasks with attempts > 0 (retrying): the ids, in no order
        self._retrying: dict[str, None] = {}
        # schedule id -> its instance that ended last (a hint: checked, rebuilt when pruned)
        self._last_ended: dict[str, str] = {}
        # queue -> state -> tasks, for the queues other than the default one; the default queue
        # (every compact record's) holds the rest of each state's tasks
        self._queued: dict[str, dict[TaskState, int]] = {}
        self._rebuild_next = 0  # where the next maintain() goes on (see _rebuild_units)
        self._closed = False

    # -- internals -----------------------------------------------------------------------------
    def _put(self, old: Task | None, new: Task) -> None:
        if old is not None:
            if old.state is not new.state:
                del self._by_state[old.state][old.id]
            if old.state is _R:
                self._ready.discard(old)
        if new.state is _R:
            self._ready.add(new)
        if new.attempts and new.state is _P:
            self._retrying[new.id] = None
        elif old is not None and old.attempts and old.state is _P:
            self._retrying.pop(old.id, None)
        tid = new.id
        self._by_state[new.state][tid] = None
        self._tasks.shards[hash(tid) & SHARD_MASK][tid] = new
        if new.queue != DEFAULT_QUEUE or (old is not None and old.queue != DEFAULT_QUEUE):
            self._count_queue(old, -1)
            self._count_queue(new, 1)
        sid = new.schedule_id
        if sid is not None:
            if new.state in TERMINAL_STATES:
                self._last_ended[sid] = new.id
                active = self._active_by_schedule.get(sid)
                if active is not None:
                    active.pop(new.id, None)
                    if not active:
                        del self._active_by_schedule[sid]
            else:
                self._active_by_schedule.setdefault(sid, {})[new.id] = None

    def _put_promoted(self, old: Task, new: Task) -> None:
        """:meth:`_put` for the one move a herd makes 100,000 times, a PENDING *old* becoming
        the READY *new* of the same id and queue: the task stays active for its schedule (no
        change there) and only the state indexes, READY index and queue counts move."""
        tid = new.id
        part = hash(tid) & SHARD_MASK
        del self._pending.shards[part][tid]
        self._ready_ids.shards[part][tid] = None
        self._tasks.shards[part][tid] = new
        self._ready.add(new)
        if old.attempts:
            self._retrying.pop(tid, None)
        if new.queue != DEFAULT_QUEUE:
            self._count_queue(old, -1)
            self._count_queue(new, 1)

    def _count_queue(self, task: Task | None, n: int) -> None:
        """Add *n* to the count of *task*'s queue and state (the default queue is not kept)."""
        if task is None or task.queue == DEFAULT_QUEUE:
            return
        by_state = self._queued.setdefault(task.queue, {})
        left = by_state.get(task.state, 0) + n
        if left:
            by_state[task.state] = left
        else:
            del by_state[task.state]
            if not by_state:
                del self._queued[task.queue]

    def _entered(self, state: TaskState) -> dict[str, None]:
        """The ids of a state other than PENDING and READY, in the order they entered it."""
        ids = self._by_state[state]
        assert isinstance(ids, dict), f"{state} is kept in order"
        return ids

    def _writable(self) -> None:
        if self._closed:
            raise policy.closed(repr(self))

    def _take(self, task_id: str) -> Task | None:
        """The stored task, a compact one stored in full first (for a change to follow)."""
        t = self._tasks.get(task_id)
        if t is None:
            t = self._lite.pop(task_id)
            if t is not None:
                self._put(None, t)
        return t

    def _peek(self, task_id: str) -> Task | None:
        """The stored task; a compact one is built on the fly and stays compact."""
        t = self._tasks.get(task_id)
        if t is None:
            return self._lite.get(task_id)
        return t

    def _require(self, task_id: str) -> Task:
        t = self._take(task_id)
        if t is None:
            raise policy.task_not_found(task_id)
        return t

    def _check_new(self, task_id: str) -> None:
        if task_id in self._tasks or task_id in self._lite:
            raise policy.task_exists(task_id)

    def _state_of(self, task_id: str) -> TaskState | None:
        t = self._peek(task_id)
        return None if t is None else t.state

    def _take_dependents(self, upstream_id: str) -> Iterable[Task]:
        tasks = self._tasks
        for dep_id in self._dependents.pop(upstream_id, ()):
            dep = tasks.get(dep_id)
            if dep is not None:
                yield dep

    def _settle(self, upstream: Task, now: float) -> tuple[Task, ...]:
        """Apply a terminal upstream's effect to its dependents, transitively."""
        if upstream.id not in self._dependents:
            return ()
        return policy.settle(
            upstream.id,
            upstream.state,
            now,
            take_dependents=self._take_dependents,
            save=self._put,
        )

    def _detach_dependent(self, old: Task) -> None:
        for up_id in old.after:
            lst = self._dependents.get(up_id)
            if lst and old.id in lst:
                lst.remove(old.id)
            down = self._downstream.get(up_id)
            if down is not None:
                down.pop(old.id, None)
                if not down:
                    del self._downstream[up_id]

    # -- tasks ------------------------------------------------------------------------------------
    def insert(self, task: Task, *, on_conflict: OnConflict = "error") -> Changed:
        policy.check_on_conflict(on_conflict)
        with self._lock:
            self._writable()
            return self._insert(task, on_conflict)

    def _insert(self, task: Task, on_conflict: OnConflict) -> Changed:
        """``insert`` under the lock."""
        old = self._peek(task.id)
        if old is None and not task.after:
            new = policy.as_inserted(task)
            self._put(None, new)  # the common case: a fresh task without dependencies
            return Changed(new)
        if old is not None:
            if policy.keep_existing(task.id, old.state, on_conflict):
                return Changed(old)
            old = self._take(task.id)  # a compact record is stored in full before it changes
            assert old is not None
        count = policy.count_dependencies(task, self._state_of)
        version = 0 if old is None else old.version + 1
        new = count.apply(policy.as_inserted(task, version=version))
        if old is not None:
            self._detach_dependent(old)
        self._put(old, new)
        for up_id in count.waits_on:
            self._dependents.setdefault(up_id, []).append(new.id)
        for up_id in new.after:
            self._downstream.setdefault(up_id, {})[new.id] = None
        deps = self._settle(new, new.updated) if new.state in TERMINAL_STATES else ()
        return Changed(new, deps)

    def insert_many(
        self, tasks: Sequence[Task], *, on_conflict: OnConflict = "error"
    ) -> list[Changed]:
        policy.check_batch(tasks, on_conflict)
        with self._lock:
            self._writable()
            existing: dict[str, TaskState] = {}
            for t in tasks:
                old = self._peek(t.id)
                if old is not None:
                    existing[t.id] = old.state
            plan = policy.plan_batch(tasks, on_conflict, existing)
            # every upstream must exist before anything is stored: the batch is all or nothing
            known = {t.id for t in tasks}
            for t in plan.one_by_one:
                for up_id in t.after:
                    if up_id not in known and self._peek(up_id) is None:
                        raise policy.missing_upstream(t.id, up_id)
            put = self._put
            for new in plan.bulk:
                put(None, new)
            changed = {t.id: self._insert(t, on_conflict) for t in plan.one_by_one}
            return policy.batch_changes(tasks, plan, changed)

    def insert_new(self, batch: NewTasks) -> Sequence[str]:
        """Insert a batch of fresh tasks (:class:`~timewheel.stores.base.SupportsNewTasks`) in
        one hold of the lock: as compact records when they have default options and no keyword
        arguments (what :meth:`add_pending` keeps), else as snapshots. Every task is stored
        PENDING (this process's wheel promotes those already due at its next step): the empty
        list of READY ids is returned.

        Raises:
            DuplicateKeyError: an id exists already; nothing is inserted.
        """
        t = batch.template
        compact = (
            t.retry == NO_RETRY
            and t.priority == 0
            and t.queue == DEFAULT_QUEUE
            and t.timeout is None
            and t.when == "all_success"
            and not any(batch.kwargs)
        )
        with self._lock:
            self._writable()
            tasks = self._tasks
            if not tasks.isdisjoint(batch.ids):
                raise policy.task_exists(next(i for i in batch.ids if i in tasks))
            if compact:
                self._lite.add_many(batch.ids, batch.funcs, batch.args, batch.dues, t.created)
                return ()
            lite = self._lite
            if not lite.keys().isdisjoint(batch.ids):
                raise policy.task_exists(next(i for i in batch.ids if i in lite))
            put = self._put
            for new in batch.tasks():
                put(None, new)
        return ()

    def add_pending(
        self, task_id: str, func: Callable[..., Any], args: tuple[Any, ...], due: float, now: float
    ) -> None:
        """Insert a fresh PENDING task with every other option at its default, kept compact.

        The same as ``insert(Task(id=task_id, func=func, args=args, due=due, created=now,
        updated=now))``, in about a third of the memory and time. Used by
        ``Scheduler.schedule`` for one-shot tasks with default options.

        Raises:
            DuplicateKeyError: a task with this id exists.
        """
        with self._lock:
            if self._closed:
                raise policy.closed(repr(self))
            if task_id in self._tasks.shards[hash(task_id) & SHARD_MASK]:
                raise policy.task_exists(task_id)
            self._lite.add(task_id, func, args, due, now)  # refuses an id it holds

    def add_ready(
        self, task_id: str, func: Callable[..., Any], args: tuple[Any, ...], due: float, now: float
    ) -> Task:
        """Insert a fresh task that is already due (``due <= now``) straight into READY.

        The same as :meth:`add_pending` followed by ``promote([task_id], now)``, in one step:
        the stored task is at version 1, as a promoted one would be. Returns it.

        Raises:
            DuplicateKeyError: a task with this id exists.
            ValueError: *due* is later than *now*.
        """
        if due > now:
            raise ValueError(f"add_ready needs a due time at or before now ({due!r} > {now!r})")
        task = Task(
            id=task_id,
            func=func,
            args=args,
            due=due,
            state=_R,
            version=1,
            created=now,
            updated=now,
        )
        with self._lock:
            self._writable()
            self._check_new(task_id)
            self._put(None, task)
        return task

    def get(self, task_id: str) -> Task:
        with self._lock:
            t = self._peek(task_id)
        if t is None:
            raise policy.task_not_found(task_id)
        return t

    def find(self, task_id: str) -> Task | None:
        t = self._tasks.shards[hash(task_id) & SHARD_MASK].get(task_id)  # unlocked: one read
        if t is None and self._lite:
            with self._lock:  # it may be moving from the compact records right now
                return self._peek(task_id)
        return t

    def transition(
        self, task_id: str, *, expected_version: int, state: TaskState, now: float, **changes: Any
    ) -> Changed:
        policy.check_task_changes(changes)
        with self._lock:
            self._writable()
            t = self._require(task_id)
            if t.version != expected_version:
                raise policy.version_conflict(task_id, t.version, t.state, expected_version)
            check_transition(task_id, t.state, state)
            if state is _RUN:
                changes["started"] = now  # a run starts: its start is recorded, as by claim
            new = t.evolve(state=state, version=t.version + 1, updated=now, **changes)
            self._put(t, new)
            deps = self._settle(new, now) if state in TERMINAL_STATES else ()
            return Changed(new, deps)

    def promote(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Task]:
        moved: list[Task] = []
        with self._lock:
            self._writable()
            parts = self._tasks.shards
            lite = self._lite
            for tid in task_ids:
                t = parts[hash(tid) & SHARD_MASK].get(tid)
                if t is None:
                    # straight from the compact record to READY, if it is due
                    t = lite.pop(tid, _R, 1, now, due_by=now)
                    if t is not None:
                        self._put(None, t)
                        moved.append(t)
                    continue
                if t.state is not _P or t.due > now or t.unmet > 0:
                    continue
                new = t.moved(_R, version=t.version + 1, updated=now)
                self._put_promoted(t, new)
                moved.append(new)
            for s in successors:
                if s.id not in parts[hash(s.id) & SHARD_MASK] and s.id not in lite:
                    self._put(None, policy.as_inserted(s))
        return moved

    def claim(
        self, task_id: str, *, expected_version: int, owner: str, lease_expires: float, now: float
    ) -> Task | None:
        # Optimistic: build the new snapshot outside the lock, then swap it in only if the
        # stored one is still the snapshot it was built from (any change moves the version).
        # The lock is held for the swap alone, so worker threads rarely queue on it.
        if self._closed:
            raise policy.closed(repr(self))
        tasks, part = self._tasks, hash(task_id) & SHARD_MASK
        t = tasks.shards[part].get(task_id)
        if t is None or t.version != expected_version or t.state is not _R:
            return None
        new = t.evolve(
            state=_RUN,
            version=t.version + 1,
            attempts=t.attempts + 1,
            lease_owner=owner,
            lease_expires=lease_expires,
            started=now,
            updated=now,
        )
        with self._lock:
            if tasks.shards[part].get(task_id) is not t:
                return None  # changed meanwhile: its version is no longer the expected one
            self._put(t, new)
        return new

    def claim_next(
        self,
        *,
        owner: str,
        lease_expires: float,
        now: float,
        limit: int,
        queues: Sequence[str] | None = None,
    ) -> list[Task]:
        with self._lock:
            self._writable()
            out: list[Task] = []
            for t in self.ready(limit=limit, queues=queues):
                c = self.claim(
                    t.id,
                    expected_version=t.version,
                    owner=owner,
                    lease_expires=lease_expires,
                    now=now,
                )
                if c is not None:
                    out.append(c)
            return out

    def heartbeat(self, task_id: str, *, owner: str, lease_expires: float, now: float) -> bool:
        with self._lock:
            self._writable()
            t = self._tasks.get(task_id)
            if t is None or t.state is not _RUN or t.lease_owner != owner:
                return False
            self._tasks[task_id] = t.evolve(
                version=t.version + 1, lease_expires=lease_expires, updated=now
            )
            return True

    def heartbeat_many(
        self, leases: Sequence[Lease], *, lease_expires: float, now: float
    ) -> list[bool]:
        """``heartbeat`` each of *leases*, under one hold of the store's lock."""
        with self._lock:
            return [
                self.heartbeat(task_id, owner=owner, lease_expires=lease_expires, now=now)
                for task_id, owner in leases
            ]

    def finish(
        self, task_id: str, *, owner: str, state: TaskState, now: float, **changes: Any
    ) -> Changed | None:
        if self._closed:
            raise policy.closed(repr(self))
        tasks, part = self._tasks, hash(task_id) & SHARD_MASK
        while True:  # optimistic, as in claim(); a heartbeat in between means one more pass
            t = tasks.shards[part].get(task_id)
            if t is None or t.state is not _RUN or t.lease_owner != owner:
                return None
            check_transition(task_id, t.state, state)
            new = t.evolve(
                state=state,
                version=t.version + 1,
                lease_owner=None,
                lease_expires=None,
                updated=now,
                **changes,
            )
            with self._lock:
                if tasks.shards[part].get(task_id) is not t:
                    continue
                self._put(t, new)
                deps = self._settle(new, now) if state in TERMINAL_STATES else ()
            return Changed(new, deps)

    def finish_many(self, finishes: Sequence[Finish], *, now: float) -> list[Changed | None]:
        """``finish`` each of *finishes*, in order."""
        for f in finishes:
            check_transition(f.task_id, _RUN, TaskState(f.state))  # refuse before storing any
            if "lease_owner" in f.changes or "lease_expires" in f.changes:
                raise TypeError(
                    "finish clears the lease itself: do not pass lease_owner/lease_expires"
                )
        return [
            self.finish(f.task_id, owner=f.owner, state=f.state, now=now, **f.changes)
            for f in finishes
        ]

    def due_before(self, until: float, *, limit: int) -> list[tuple[str, float, str | None]]:
        with self._lock:
            tasks = self._tasks
            hits: list[tuple[float, str, str | None]] = [
                (t.due, t.id, t.schedule_id)
                for t in tasks.values_of(self._pending)
                if t.due < until and t.unmet == 0
            ]
            hits += [(due, i, None) for due, i in self._lite.due_before(until)]
        hits.sort(key=_due_and_id)
        return [(i, d, s) for d, i, s in hits[:limit]]

    def ready(self, *, limit: int, queues: Sequence[str] | None = None) -> list[Task]:
        with self._lock:  # O(limit): the index keeps READY tasks in this order
            tasks = self._tasks
            return tasks.values_of(self._ready.first(limit, queues))

    def expired_leases(self, now: float, *, limit: int) -> list[Task]:
        with self._lock:
            tasks = self._tasks
            out = [
                t
                for t in tasks.values_of(self._by_state[_RUN])
                if t.lease_expires is not None and t.lease_expires < now
            ]
        out.sort(key=lambda t: t.lease_expires or 0.0)
        return out[:limit]

    def count_by_state(self) -> dict[TaskState, int]:
        with self._lock:
            counts = {s: len(ids) for s, ids in self._by_state.items() if ids}
            if self._lite:
                counts[_P] = counts.get(_P, 0) + len(self._lite)
            return counts

    def tasks(
        self,
        *,
        state: TaskState | Iterable[TaskState] | None = None,
        schedule_id: str | None = None,
        limit: int | None = None,
    ) -> list[Task]:
        with self._lock:
            states = (
                None
                if state is None
                else frozenset((state,) if isinstance(state, TaskState) else state)
            )
            pool: list[Task]
            if schedule_id is not None and states is not None and not states & TERMINAL_STATES:
                ids = self._active_by_schedule.get(schedule_id, {})
                pool = [t for t in self._tasks.values_of(ids) if t.state in states]
            elif states is None:
                pool = list(self._tasks.values())
            else:
                pool = [t for s in states for t in self._tasks.values_of(self._by_state[s])]
            if schedule_id is None and (states is None or _P in states):
                pool += self._lite.tasks()
        out = [t for t in pool if schedule_id is None or t.schedule_id == schedule_id]
        out.sort(key=lambda t: (t.due, t.created, t.id))
        return out if limit is None else out[:limit]

    def delete(self, task_id: str) -> bool:
        with self._lock:
            self._writable()
            return self._delete(task_id)

    def _delete(self, task_id: str) -> bool:
        t = self._tasks.pop(task_id, None)
        if t is None:
            if not self._lite.discard(task_id):
                return False
        else:
            del self._by_state[t.state][task_id]
            if t.state is _R:
                self._ready.discard(t)
            self._retrying.pop(task_id, None)
            self._count_queue(t, -1)
            if t.schedule_id is not None:
                active = self._active_by_schedule.get(t.schedule_id)
                if active is not None:
                    active.pop(task_id, None)
                if self._last_ended.get(t.schedule_id) == task_id:
                    del self._last_ended[t.schedule_id]
            self._detach_dependent(t)
        self._dependents.pop(task_id, None)
        self._downstream.pop(task_id, None)
        return True

    def prune(
        self,
        *,
        before: float,
        states: Iterable[TaskState] | None = None,
        limit: int | None = None,
        keep: Collection[str] = (),
    ) -> int:
        """Delete terminal tasks (or those in *states*) last updated before *before*; the count.

        Without *limit*, the lock is held to copy the candidates' ids, then for batches of at
        most ``_PRUNE_BATCH`` deletions, so other threads keep going while a large store is
        pruned. With *limit*, one hold of the lock looks at no more than ``limit + len(keep)``
        tasks per state, in the order they entered it (PENDING and READY, whose tables are
        sharded: in that order within each part), and deletes at most *limit*.
        Tasks whose id is in *keep* stay.
        """
        sts = TERMINAL_STATES if states is None else frozenset(states)
        if limit is not None:
            return self._prune_some(before, sts, limit, keep)
        with self._lock:
            self._writable()
            candidates = [list(self._by_state[s]) for s in sts]
            compact = list(self._lite) if _P in sts else []
        total = 0
        for ids in candidates:
            for start in range(0, len(ids), _PRUNE_BATCH):
                with self._lock:
                    for i in ids[start : start + _PRUNE_BATCH]:
                        t = self._tasks.get(i)  # changed meanwhile? then it may be kept
                        stale = t is not None and t.state in sts and t.updated < before
                        if stale and i not in keep:
                            self._delete(i)
                            total += 1
                _let_others_in()
        for start in range(0, len(compact), _PRUNE_BATCH):
            with self._lock:
                for i in compact[start : start + _PRUNE_BATCH]:
                    created = self._lite.created(i)
                    if created is not None and created < before and i not in keep:
                        self._delete(i)
                        total += 1
            _let_others_in()
        return total

    def _prune_some(
        self, before: float, sts: frozenset[TaskState], limit: int, keep: Collection[str]
    ) -> int:
        """The bounded :meth:`prune`: one hold of the lock, a bounded look per state."""
        look = limit + len(keep)
        with self._lock:
            self._writable()
            doomed: list[str] = []
            for s in sts:
                if len(doomed) >= limit:
                    break
                for i in itertools.islice(self._by_state[s], look):
                    if self._tasks[i].updated < before and i not in keep:
                        doomed.append(i)
                        if len(doomed) >= limit:
                            break
            if _P in sts and len(doomed) < limit:
                for i in itertools.islice(self._lite, look):
                    created = self._lite.created(i)
                    if created is not None and created < before and i not in keep:
                        doomed.append(i)
                        if len(doomed) >= limit:
                            break
            for i in doomed:
                self._delete(i)
        return len(doomed)

    # -- inspection -----------------------------------------------------------------------------
    def oldest_ready_age(self, now: float) -> float | None:
        """Seconds since the earliest due time among READY tasks (how far workers lag), or None."""
        with self._lock:
            oldest = self._ready.oldest_due()
        return None if oldest is None else max(0.0, now - oldest)

    def due_histogram(
        self, now: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, int]]:
        """Expected load: ``(bucket_start, n)`` for PENDING tasks due in ``[now, now + horizon)``,
        buckets *bucket* seconds wide aligned on *now*, empty ones included."""
        n = policy.histogram_buckets(horizon, bucket)
        counts = [0] * n
        with self._lock:
            pending = [t.due for t in self._tasks.values_of(self._pending)]
            pending += self._lite.dues()
        for d in pending:
            if now <= d < now + horizon:
                b = int((d - now) // bucket)
                if b < n:
                    counts[b] += 1
        return policy.histogram(now, bucket, counts)

    def recent_failures(self, limit: int = 10) -> list[Task]:
        """The last *limit* tasks that ended FAILED, TIMED_OUT or UPSTREAM_FAILED, newest first."""
        with self._lock:
            out = [
                t
                for s in policy.REPORTED_FAILURES
                for t in self._tasks.values_of(self._by_state[s])
            ]
        out.sort(key=lambda t: t.updated, reverse=True)
        return out[: max(limit, 0)]

    def ended_histogram(
        self, since: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, dict[TaskState, int]]]:
        """What ended in ``[since, since + horizon)`` per *bucket*; each terminal state is read
        backwards in the order tasks entered it, no further than *since*."""
        n = policy.histogram_buckets(horizon, bucket)
        rows: list[tuple[int, str, int]] = []
        end = since + horizon
        with self._lock:
            for s in policy.ENDED_STATES:
                for i in reversed(self._entered(s)):
                    u = self._tasks[i].updated
                    if u < since:
                        break
                    if u < end:
                        rows.append((int((u - since) // bucket), s.value, 1))
        return policy.ended_histogram(since, bucket, n, rows)

    def ended_since(
        self, since: float, *, limit: int
    ) -> list[tuple[TaskState, float, float | None, float]]:
        """``(state, due, started, ended)`` of up to *limit* tasks that ended at or after
        *since*, the latest first. Each terminal state is read backwards in the order tasks
        entered it, and no further than its first task that ended before *since*."""
        out: list[tuple[TaskState, float, float | None, float]] = []
        with self._lock:
            for s in policy.ENDED_STATES:
                for n, i in enumerate(reversed(self._entered(s))):
                    t = self._tasks[i]
                    if t.updated < since or n >= limit:
                        break
                    out.append((s, t.due, t.started, t.updated))
        out.sort(key=lambda r: r[3], reverse=True)
        return out[: max(limit, 0)]

    def count_by_queue(self) -> dict[str, dict[TaskState, int]]:
        """Tasks per queue and state, from the counts kept as tasks change (queues other than
        the default one) and each state's size (the default queue has the rest): O(queues *
        states), never a look at the tasks."""
        with self._lock:
            rows: list[tuple[str | None, TaskState, int]] = [
                (None, s, n) for s, n in self.count_by_state().items()
            ]
            rows += [(q, s, n) for q, by_state in self._queued.items() for s, n in by_state.items()]
        return policy.queue_counts(rows)

    def by_function(self, prefix: str, *, limit: int) -> list[Task]:
        """Up to *limit* tasks whose function reference starts with *prefix*, by function
        reference then id. Looks at every task (each function's reference is worked out once),
        and builds only the tasks it returns."""
        names: dict[int, str] = {}

        def name_of(func: Any) -> str:
            name = names.get(id(func))
            if name is None:
                name = names[id(func)] = function_name(func)
            return name

        with self._lock:
            hits = [
                (name, t.id)
                for t in self._tasks.values()
                if (name := name_of(t.func)).startswith(prefix)
            ]
            hits += [
                (name_of(f), i)
                for f, i in self._lite.with_functions(lambda f: name_of(f).startswith(prefix))
            ]
            best = heapq.nsmallest(max(limit, 0), hits)
            found = [self._peek(i) for _, i in best]
        return [t for t in found if t is not None]

    def retrying(self, limit: int) -> list[Task]:
        """Up to *limit* PENDING tasks with ``attempts > 0``, the soonest due first (kept as a
        set of ids as tasks enter and leave that condition)."""
        with self._lock:
            found = self._tasks.values_of(self._retrying)
        return heapq.nsmallest(max(limit, 0), found, key=lambda t: (t.due, t.id))

    def last_ended(self, schedule_id: str) -> Task | None:
        """The instance of *schedule_id* that ended last, or None (kept as each one ends; a
        pruned one is looked for again among the ended tasks)."""
        with self._lock:
            t = self._tasks.get(self._last_ended.get(schedule_id, ""))
            if t is not None and t.state in TERMINAL_STATES:
                return t
            found = [
                self._tasks[i]
                for s in policy.ENDED_STATES
                for i in self._by_state[s]
                if self._tasks[i].schedule_id == schedule_id
            ]
            if not found:
                self._last_ended.pop(schedule_id, None)
                return None
            t = max(found, key=lambda x: x.updated)
            self._last_ended[schedule_id] = t.id
            return t

    def dependents(self, task_id: str, *, limit: int) -> list[Task]:
        """Up to *limit* tasks naming *task_id* in their ``after``, by id (an index kept per
        upstream task)."""
        with self._lock:
            ids = sorted(self._downstream.get(task_id, ()))[: max(limit, 0)]
            return [self._tasks[i] for i in ids if i in self._tasks]

    def unresolvable(self) -> dict[str, int]:
        """Always ``{}``: this store keeps function objects, so there is no reference to resolve.

        (Durable stores report the function references the process cannot import, with the
        number of READY tasks waiting on each.)
        """
        return {}

    # -- schedules ------------------------------------------------------------------------------
    def put_schedule(
        self, record: ScheduleRecord, *, first: Task | None, on_conflict: OnConflict = "replace"
    ) -> ScheduleRecord:
        policy.check_on_conflict(on_conflict)
        policy.check_schedule(record)
        with self._lock:
            self._writable()
            old = self._schedules.get(record.id)
            if old is not None:
                if policy.keep_existing_schedule(record.id, on_conflict):
                    return old
                self._cancel_instances(record.id, record.updated)
                record = record.evolve(version=old.version + 1)
            self._schedules[record.id] = record
            if first is not None:
                existing = self._take(first.id)
                if existing is None or existing.state in TERMINAL_STATES:
                    # a reused id moves past the old version, so a stale CAS cannot hit the new task
                    version = 0 if existing is None else existing.version + 1
                    self._put(existing, policy.as_inserted(first, version=version))
            return record

    def _cancel_instances(self, schedule_id: str, now: float) -> None:
        for i in list(self._active_by_schedule.get(schedule_id, ())):
            t = self._tasks[i]
            if t.state in policy.CANCELLABLE_STATES:
                new = t.evolve(
                    state=TaskState.CANCELLED,
                    version=t.version + 1,
                    updated=now,
                    error=policy.SCHEDULE_GONE,
                )
                self._put(t, new)
                self._settle(new, now)

    def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        return self._schedules.get(schedule_id)

    def list_schedules(self) -> list[ScheduleRecord]:
        with self._lock:
            return sorted(self._schedules.values(), key=lambda r: r.id)

    def update_schedule(
        self, schedule_id: str, *, expected_version: int, **changes: Any
    ) -> ScheduleRecord:
        policy.check_schedule_changes(changes)
        with self._lock:
            self._writable()
            old = self._schedules.get(schedule_id)
            if old is None:
                raise policy.schedule_not_found(schedule_id)
            if old.version != expected_version:
                raise policy.schedule_version_conflict(schedule_id, old.version, expected_version)
            new = old.evolve(version=old.version + 1, **changes)
            self._schedules[schedule_id] = new
            return new

    def delete_schedule(self, schedule_id: str) -> bool:
        with self._lock:
            self._writable()
            old = self._schedules.pop(schedule_id, None)
            if old is None:
                return False
            self._cancel_instances(schedule_id, old.updated)
            return True

    def maintain(self, now: float) -> None:
        """Rebuild the large tables as fresh copies, in the calling thread (the scheduler's
        trigger), a bounded share per call. *now* is unused.

        A dict whose keys come and go (tasks inserted, finished, pruned) is rebuilt by CPython
        every so many insertions, in whichever thread inserts: finished tasks enter their
        state's table from the worker threads, and glibc serves each thread from an arena of its
        own, so over hours every worker's arena came to hold one of these megabyte tables at
        some point, and kept the space (RSS grew ~19 bytes per task over the second quarter
        hour of a soak, ``docs/benchmarks.md``). Rebuilt here, the tables come from the
        trigger's arena, and between two passes the workers' insertions mostly fit in the
        room a copy leaves.

        What is rebuilt: the task table and the PENDING and READY id tables part by part (they
        are sharded, :mod:`timewheel.shards`) once they hold :data:`REBUILD_MIN` entries, and
        the other states' id tables of :data:`REBUILD_MIN` to :data:`REBUILD_MAX` entries. One
        call copies whole tables or parts until about :data:`REBUILD_BUDGET` entries are copied
        (the lock is held for the copies: about 1 ms per 20,000 entries), and the next call
        goes on from there.
        """
        with self._lock:
            if self._closed:
                return
            units = self._rebuild_units()
            start = self._rebuild_next % len(units)
            copied = 0
            for k in range(len(units)):
                if copied >= REBUILD_BUDGET:
                    self._rebuild_next = (start + k) % len(units)
                    return
                copied += units[(start + k) % len(units)]()
            self._rebuild_next = start

    def _rebuild_units(self) -> list[Callable[[], int]]:
        """What :meth:`maintain` rebuilds, in its order: each unit copies one part or table if
        it is large enough and returns the entries it copied (0 when it left it alone)."""
        units: list[Callable[[], int]] = []
        for table in (self._tasks, self._pending, self._ready_ids):
            for index in range(len(table.shards)):
                units.append(functools.partial(_rebuild_part, table, index))
        for state in TaskState:
            if state not in (_P, _R):
                units.append(functools.partial(self._rebuild_state, state))
        return units

    def _rebuild_state(self, state: TaskState) -> int:
        ids = self._by_state[state]
        if not REBUILD_MIN <= len(ids) <= REBUILD_MAX:
            return 0
        self._by_state[state] = dict(ids)
        return len(ids)

    def close(self) -> None:
        """Refuse further changes (idempotent); what the store holds stays readable."""
        self._closed = True

    def __len__(self) -> int:
        return len(self._tasks) + len(self._lite)

    def __repr__(self) -> str:
        return f"MemoryStore(tasks={len(self)}, schedules={len(self._schedules)})"

    @property
    def state_counts(self) -> Counter[TaskState]:
        """Counts by state as a ``Counter`` (a convenience over :meth:`count_by_state`)."""
        return Counter(self.count_by_state())


def _rebuild_part(table: ShardedDict[str, Any], index: int) -> int:
    """Rebuild part *index* of *table* when the table holds :data:`REBUILD_MIN` entries."""
    if len(table) < REBUILD_MIN:
        return 0
    table.rebuild(index)
    return len(table.shards[index])


def _due_and_id(hit: tuple[float, str, str | None]) -> tuple[float, str]:
    return hit[0], hit[1]
