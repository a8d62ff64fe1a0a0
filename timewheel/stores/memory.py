"""``MemoryStore``: the default, in-process store. Fast, thread-safe, gone when the process ends."""

from __future__ import annotations

import heapq
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.stores.base import Changed, OnConflict
from timewheel.task import (
    TERMINAL_STATES,
    ScheduleRecord,
    Task,
    TaskState,
    check_transition,
    dependency_effect,
)

__all__ = ["MemoryStore"]

_P = TaskState.PENDING
_R = TaskState.READY
_RUN = TaskState.RUNNING
_CANCELLABLE = (TaskState.PENDING, TaskState.READY)


def _expand(
    task_id: str,
    rec: tuple[Any, ...],
    fns: dict[int, list[Any]],
    state: TaskState = _P,
    version: int = 0,
    updated: float | None = None,
) -> Task:
    """The :class:`Task` of a compact record ``(due, created, id(func)[, args])``."""
    return Task(
        id=task_id,
        func=fns[rec[2]][0],
        args=rec[3] if len(rec) > 3 else (),
        due=rec[0],
        state=state,
        version=version,
        created=rec[1],
        updated=rec[1] if updated is None else updated,
    )


def _not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(f"no task with id {task_id!r}")


class MemoryStore:
    """Tasks in a dict behind one lock; every change is a compare-and-swap on ``version``.

    Accepts any callable and any arguments (nothing is serialized). Runtime complexity: insert,
    get, transition, claim, heartbeat and finish are O(1) (plus the dependents they settle);
    ``due_before``, ``ready``, ``expired_leases`` and ``list`` scan the matching state's tasks.

    Compact pending tasks: :meth:`add_pending` (the path ``Scheduler.schedule`` takes for a
    one-shot task with default options) keeps a fresh PENDING task as a small tuple, about a
    third of a :class:`Task` snapshot. Reads see an ordinary Task built on the fly; the first
    change (promotion to READY, cancellation, replacement) stores the full record. The tuple
    names its function by ``id()`` in a table of the functions in use (each held, with a use
    count, while a compact record needs it), so that a record without arguments holds only
    numbers: the cyclic garbage collector stops tracking it at its first pass instead of
    traversing every pending task again in each full collection.
    """

    durable = False

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tasks: dict[str, Task] = {}
        # fresh PENDING tasks with default options: id -> (due, created, id(func)[, args])
        self._lite: dict[str, tuple[Any, ...]] = {}
        # id(func) -> [func, compact records naming it, id(func) as the records' shared int]
        self._fns: dict[int, list[Any]] = {}
        self._by_state: dict[TaskState, dict[str, None]] = {s: {} for s in TaskState}
        self._dependents: dict[str, list[str]] = {}
        self._schedules: dict[str, ScheduleRecord] = {}
        # schedule id -> ids of its instances that are not terminal (the busy/head queries)
        self._active_by_schedule: dict[str, dict[str, None]] = {}
        self._closed = False

    # -- internals -----------------------------------------------------------------------------
    def _put(self, old: Task | None, new: Task) -> None:
        if old is not None and old.state is not new.state:
            del self._by_state[old.state][old.id]
        self._by_state[new.state][new.id] = None
        self._tasks[new.id] = new
        sid = new.schedule_id
        if sid is not None:
            if new.state in TERMINAL_STATES:
                active = self._active_by_schedule.get(sid)
                if active is not None:
                    active.pop(new.id, None)
                    if not active:
                        del self._active_by_schedule[sid]
            else:
                self._active_by_schedule.setdefault(sid, {})[new.id] = None

    def _take(self, task_id: str) -> Task | None:
        """The stored task, a compact one stored in full first (for a change to follow)."""
        t = self._tasks.get(task_id)
        if t is None:
            rec = self._lite.get(task_id)
            if rec is not None:
                t = self._store_in_full(task_id, rec)
        return t

    def _store_in_full(
        self,
        task_id: str,
        rec: tuple[Any, ...],
        state: TaskState = _P,
        version: int = 0,
        updated: float | None = None,
    ) -> Task:
        """Replace the compact record *rec* of *task_id* by a full snapshot (*state*, *version*,
        *updated* as given) and return it."""
        del self._lite[task_id]
        t = _expand(task_id, rec, self._fns, state, version, updated)
        self._unref(rec)
        self._put(None, t)
        return t

    def _unref(self, rec: tuple[Any, ...]) -> None:
        """A compact record was removed: release its function."""
        fid = rec[2]
        use = self._fns[fid]
        if use[1] == 1:
            del self._fns[fid]
        else:
            use[1] -= 1

    def _peek(self, task_id: str) -> Task | None:
        """The stored task, a compact one expanded into a snapshot but left compact."""
        t = self._tasks.get(task_id)
        if t is None:
            rec = self._lite.get(task_id)
            if rec is not None:
                return _expand(task_id, rec, self._fns)
        return t

    def _require(self, task_id: str) -> Task:
        t = self._take(task_id)
        if t is None:
            raise _not_found(task_id)
        return t

    def _check_new(self, task_id: str) -> None:
        if task_id in self._tasks or task_id in self._lite:
            raise DuplicateKeyError(f"a task with id {task_id!r} already exists")

    def _settle(self, upstream: Task, now: float) -> tuple[Task, ...]:
        """Apply a terminal upstream's effect to its dependents, transitively."""
        out: list[Task] = []
        stack = [upstream]
        while stack:
            up = stack.pop()
            for dep_id in self._dependents.pop(up.id, ()):
                dep = self._tasks.get(dep_id)
                if dep is None or dep.state is not _P or dep.unmet <= 0:
                    continue
                unmet, terminal, error = dependency_effect(dep.when, up.state, dep.unmet)
                if terminal is not None:
                    new = dep.evolve(
                        state=terminal,
                        version=dep.version + 1,
                        unmet=unmet,
                        error=error,
                        updated=now,
                    )
                    stack.append(new)
                else:
                    new = dep.evolve(unmet=unmet, version=dep.version + 1, updated=now)
                self._put(dep, new)
                out.append(new)
        return tuple(out)

    # -- tasks ------------------------------------------------------------------------------------
    def insert(self, task: Task, *, on_conflict: OnConflict = "error") -> Changed:
        if on_conflict not in ("error", "keep", "replace"):
            raise InvalidScheduleError(
                f"on_conflict must be 'error', 'keep' or 'replace' (got {on_conflict!r})"
            )
        with self._lock:
            old = self._peek(task.id)
            if (
                old is None
                and not task.after
                and task.state is _P
                and task.version == 0
                and task.updated == task.created
            ):
                self._put(None, task)  # the common case: a fresh task, stored as given
                return Changed(task)
            if old is not None:
                if on_conflict == "keep":
                    return Changed(old)
                if on_conflict == "error":
                    raise DuplicateKeyError(
                        f"a task with id {task.id!r} already exists (state {old.state.value}); "
                        "pass on_conflict='keep' or 'replace', or choose another id"
                    )
                if old.state is _RUN:
                    raise VersionConflictError(
                        f"task {task.id!r} is running and cannot be replaced; wait for it or "
                        "schedule under another id"
                    )
            if old is not None and task.id in self._lite:
                self._take(task.id)  # a compact record is stored in full before it changes
            unmet = 0
            terminal: TaskState | None = None
            error: str | None = None
            ups: list[Task] = []
            for up_id in dict.fromkeys(task.after):
                up = self._take(up_id)
                if up is None:
                    raise TaskNotFoundError(
                        f"task {task.id!r} depends on {up_id!r}, which does not exist; schedule "
                        "the upstream task first"
                    )
                ups.append(up)
            unmet = len(ups)
            for up in ups:
                # unmet == 0 with no terminal state: already released (any_failed), stop counting
                if up.state in TERMINAL_STATES and terminal is None and unmet > 0:
                    unmet, terminal, error = dependency_effect(task.when, up.state, unmet)
            new = task.evolve(
                state=terminal or _P,
                version=(old.version + 1) if old is not None else 0,
                unmet=max(unmet, 0) if terminal is None else unmet,
                error=error,
                created=task.created,
                updated=task.created,
            )
            if old is not None:
                self._detach_dependent(old)
            self._put(old, new)
            if terminal is None and new.unmet > 0:
                for up in ups:
                    if up.state not in TERMINAL_STATES:
                        self._dependents.setdefault(up.id, []).append(new.id)
            deps = self._settle(new, new.updated) if terminal is not None else ()
            return Changed(new, deps)

    def _detach_dependent(self, old: Task) -> None:
        for up_id in old.after:
            lst = self._dependents.get(up_id)
            if lst and old.id in lst:
                lst.remove(old.id)

    def insert_many(self, tasks: Sequence[Task]) -> None:
        with self._lock:
            seen: set[str] = set()
            for t in tasks:
                if t.id in self._tasks or t.id in self._lite or t.id in seen:
                    raise DuplicateKeyError(
                        f"a task with id {t.id!r} already exists; none inserted"
                    )
                if t.after:
                    raise InvalidScheduleError(
                        f"insert_many does not take dependencies (task {t.id!r}); use insert()"
                    )
                seen.add(t.id)
            for t in tasks:
                self._put(None, t.evolve(state=_P, version=0, updated=t.created))

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
            self._check_new(task_id)
            fid = id(func)
            use = self._fns.get(fid)
            if use is None:
                self._fns[fid] = [func, 1, fid]
            else:
                use[1] += 1
                fid = use[2]  # one shared int object, not a new one per record
            self._lite[task_id] = (due, now, fid, args) if args else (due, now, fid)

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
            self._check_new(task_id)
            self._put(None, task)
        return task

    def get(self, task_id: str) -> Task:
        with self._lock:
            t = self._peek(task_id)
        if t is None:
            raise _not_found(task_id)
        return t

    def find(self, task_id: str) -> Task | None:
        t = self._tasks.get(task_id)  # unlocked: one atomic read in the common case
        if t is None and self._lite:
            with self._lock:  # it may be moving from the compact records right now
                return self._peek(task_id)
        return t

    def transition(
        self, task_id: str, *, expected_version: int, state: TaskState, now: float, **changes: Any
    ) -> Changed:
        with self._lock:
            t = self._require(task_id)
            if t.version != expected_version:
                raise VersionConflictError(
                    f"task {task_id!r} is at version {t.version} ({t.state.value}), not "
                    f"{expected_version}: another actor changed it first; re-read and decide again"
                )
            check_transition(task_id, t.state, state)
            new = t.evolve(state=state, version=t.version + 1, updated=now, **changes)
            self._put(t, new)
            deps = self._settle(new, now) if state in TERMINAL_STATES else ()
            return Changed(new, deps)

    def promote(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Task]:
        moved: list[Task] = []
        with self._lock:
            tasks = self._tasks
            lite = self._lite
            for tid in task_ids:
                t = tasks.get(tid)
                if t is None:
                    rec = lite.get(tid)
                    if rec is None or rec[0] > now:
                        continue
                    # straight from the compact record to READY
                    moved.append(self._store_in_full(tid, rec, _R, 1, now))
                    continue
                if t.state is not _P or t.due > now or t.unmet > 0:
                    continue
                new = t.evolve(state=_R, version=t.version + 1, updated=now)
                self._put(t, new)
                moved.append(new)
            for s in successors:
                if s.id not in tasks:
                    self._put(None, s.evolve(state=_P, version=0, updated=s.created))
        return moved

    def claim(
        self, task_id: str, *, expected_version: int, owner: str, lease_expires: float, now: float
    ) -> Task | None:
        # Optimistic: build the new snapshot outside the lock, then swap it in only if the
        # stored one is still the snapshot it was built from (any change moves the version).
        # The lock is held for the swap alone, so worker threads rarely queue on it.
        t = self._tasks.get(task_id)
        if t is None or t.version != expected_version or t.state is not _R:
            return None
        new = t.evolve(
            state=_RUN,
            version=t.version + 1,
            attempts=t.attempts + 1,
            lease_owner=owner,
            lease_expires=lease_expires,
            updated=now,
        )
        with self._lock:
            if self._tasks.get(task_id) is not t:
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
            t = self._tasks.get(task_id)
            if t is None or t.state is not _RUN or t.lease_owner != owner:
                return False
            self._tasks[task_id] = t.evolve(
                version=t.version + 1, lease_expires=lease_expires, updated=now
            )
            return True

    def finish(
        self, task_id: str, *, owner: str, state: TaskState, now: float, **changes: Any
    ) -> Changed | None:
        while True:  # optimistic, as in claim(); a heartbeat in between means one more pass
            t = self._tasks.get(task_id)
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
                if self._tasks.get(task_id) is not t:
                    continue
                self._put(t, new)
                deps = self._settle(new, now) if state in TERMINAL_STATES else ()
            return Changed(new, deps)

    def due_before(self, until: float, *, limit: int) -> list[tuple[str, float, str | None]]:
        with self._lock:
            tasks = self._tasks
            hits: list[tuple[float, str, str | None]] = [
                (t.due, t.id, t.schedule_id)
                for t in (tasks[i] for i in self._by_state[_P])
                if t.due < until and t.unmet == 0
            ]
            hits += [(rec[0], i, None) for i, rec in self._lite.items() if rec[0] < until]
        hits.sort(key=_due_and_id)
        return [(i, d, s) for d, i, s in hits[:limit]]

    def ready(self, *, limit: int, queues: Sequence[str] | None = None) -> list[Task]:
        with self._lock:
            tasks = self._tasks
            qs = None if queues is None else frozenset(queues)
            rs = [t for t in (tasks[i] for i in self._by_state[_R]) if qs is None or t.queue in qs]
        return heapq.nsmallest(limit, rs, key=lambda t: (-t.priority, t.due))  # O(R log limit)

    def expired_leases(self, now: float, *, limit: int) -> list[Task]:
        with self._lock:
            tasks = self._tasks
            out = [
                t
                for t in (tasks[i] for i in self._by_state[_RUN])
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
            pool: Iterable[Task]
            if schedule_id is not None and states is not None and not states & TERMINAL_STATES:
                ids = self._active_by_schedule.get(schedule_id, {})
                pool = [t for t in (self._tasks[i] for i in ids) if t.state in states]
            elif states is None:
                pool = list(self._tasks.values())
            else:
                pool = [self._tasks[i] for s in states for i in self._by_state[s]]
            if schedule_id is None and (states is None or _P in states):
                fns = self._fns
                pool += [_expand(i, rec, fns) for i, rec in self._lite.items()]
        out = [t for t in pool if schedule_id is None or t.schedule_id == schedule_id]
        out.sort(key=lambda t: (t.due, t.created, t.id))
        return out if limit is None else out[:limit]

    def delete(self, task_id: str) -> bool:
        with self._lock:
            t = self._tasks.pop(task_id, None)
            if t is None:
                rec = self._lite.pop(task_id, None)
                if rec is None:
                    return False
                self._unref(rec)
                return True
            del self._by_state[t.state][task_id]
            if t.schedule_id is not None:
                active = self._active_by_schedule.get(t.schedule_id)
                if active is not None:
                    active.pop(task_id, None)
            self._detach_dependent(t)
            self._dependents.pop(task_id, None)
            return True

    def prune(self, *, before: float, states: Iterable[TaskState] | None = None) -> int:
        with self._lock:
            sts = TERMINAL_STATES if states is None else frozenset(states)
            victims = [i for s in sts for i in self._by_state[s] if self._tasks[i].updated < before]
            if _P in sts:
                victims += [i for i, rec in self._lite.items() if rec[1] < before]
            for i in victims:
                self.delete(i)
            return len(victims)

    # -- inspection -----------------------------------------------------------------------------
    def oldest_ready_age(self, now: float) -> float | None:
        """Seconds since the earliest due time among READY tasks (how far workers lag), or None."""
        with self._lock:
            dues = [self._tasks[i].due for i in self._by_state[_R]]
        return max(0.0, now - min(dues)) if dues else None

    def due_histogram(
        self, now: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, int]]:
        """Expected load: ``(bucket_start, n)`` for PENDING tasks due in ``[now, now + horizon)``,
        buckets *bucket* seconds wide aligned on *now*, empty ones included."""
        if bucket <= 0 or horizon <= 0:
            raise InvalidScheduleError(f"bucket and horizon must be > 0 (got {bucket}, {horizon})")
        n = math.ceil(horizon / bucket)
        counts = [0] * n
        with self._lock:
            pending = [self._tasks[i].due for i in self._by_state[_P]]
            pending += [rec[0] for rec in self._lite.values()]
            for d in pending:
                if now <= d < now + horizon:
                    b = int((d - now) // bucket)
                    if b < n:
                        counts[b] += 1
        return [(now + b * bucket, c) for b, c in enumerate(counts)]

    def unresolvable(self) -> dict[str, int]:
        """Always empty: the memory store holds callables, nothing is resolved from text."""
        return {}

    def recent_failures(self, limit: int = 10) -> list[Task]:
        """The last *limit* tasks that ended FAILED, TIMED_OUT or UPSTREAM_FAILED, newest first."""
        with self._lock:
            out = [
                self._tasks[i]
                for s in (TaskState.FAILED, TaskState.TIMED_OUT, TaskState.UPSTREAM_FAILED)
                for i in self._by_state[s]
            ]
        out.sort(key=lambda t: t.updated, reverse=True)
        return out[: max(limit, 0)]

    # -- schedules ------------------------------------------------------------------------------
    def put_schedule(
        self, record: ScheduleRecord, *, first: Task | None, on_conflict: OnConflict = "replace"
    ) -> ScheduleRecord:
        with self._lock:
            old = self._schedules.get(record.id)
            if old is not None:
                if on_conflict == "keep":
                    return old
                if on_conflict == "error":
                    raise DuplicateKeyError(
                        f"a schedule with id {record.id!r} already exists; pass "
                        "on_conflict='replace' or 'keep', or choose another id"
                    )
                self._cancel_instances(record.id, record.updated)
                record = record.evolve(version=old.version + 1)
            self._schedules[record.id] = record
            if first is not None:
                existing = self._take(first.id)
                if existing is None or existing.state in TERMINAL_STATES:
                    # a reused id moves past the old version, so a stale CAS cannot hit the new task
                    version = 0 if existing is None else existing.version + 1
                    self._put(
                        existing, first.evolve(state=_P, version=version, updated=first.created)
                    )
            return record

    def _cancel_instances(self, schedule_id: str, now: float) -> None:
        for i in list(self._active_by_schedule.get(schedule_id, ())):
            t = self._tasks[i]
            if t.state in _CANCELLABLE:
                new = t.evolve(
                    state=TaskState.CANCELLED,
                    version=t.version + 1,
                    updated=now,
                    error="its schedule was replaced or deleted",
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
        with self._lock:
            old = self._schedules.get(schedule_id)
            if old is None:
                raise TaskNotFoundError(f"no schedule with id {schedule_id!r}")
            if old.version != expected_version:
                raise VersionConflictError(
                    f"schedule {schedule_id!r} is at version {old.version}, not {expected_version}"
                )
            new = old.evolve(version=old.version + 1, **changes)
            self._schedules[schedule_id] = new
            return new

    def delete_schedule(self, schedule_id: str) -> bool:
        with self._lock:
            old = self._schedules.pop(schedule_id, None)
            if old is None:
                return False
            self._cancel_instances(schedule_id, old.updated)
            return True

    def close(self) -> None:
        self._closed = True

    def __len__(self) -> int:
        return len(self._tasks) + len(self._lite)

    def __repr__(self) -> str:
        return f"MemoryStore(tasks={len(self)}, schedules={len(self._schedules)})"

    @property
    def state_counts(self) -> Counter[TaskState]:
        """Counts by state as a ``Counter`` (a convenience over :meth:`count_by_state`)."""
        return Counter(self.count_by_state())


def _due_and_id(hit: tuple[float, str, str | None]) -> tuple[float, str]:
    return hit[0], hit[1]
