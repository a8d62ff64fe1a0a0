"""The policy every store applies the same way, written once: each store calls it.

A store decides *where* tasks live; what an id conflict does, how a new task's dependencies are
counted, how a finished task settles the tasks waiting on it, and what the errors say are the
same for every store. These are plain functions over :class:`~timewheel.task.Task` snapshots and
states, with the store's reads and writes passed in as callbacks, so a store of any kind (in
memory, SQLite, a server database) can use them inside its own lock or transaction.

* :func:`keep_existing` and :func:`keep_existing_schedule`: what ``on_conflict`` does with an
  existing id;
* :func:`count_dependencies`: a new task's unmet count, or the terminal state it starts in;
* :func:`settle`: the transitive effect of a task's end on the tasks that wait on it;
* :func:`as_inserted`: the snapshot an insert stores, and :func:`ready_at_insert`: which new
  tasks a durable store stores READY (work already due when it is stored);
* :func:`check_batch` and :func:`plan_batch`: what ``insert_many`` checks before it stores
  anything, and which of a batch's tasks go in one multi-row insert;
* the functions that build the errors, so every store says the same thing.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from timewheel import refs, validate
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    StoreError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.stores.base import Changed
from timewheel.task import (
    DEFAULT_QUEUE,
    TERMINAL_STATES,
    WHEN_VALUES,
    ScheduleRecord,
    Task,
    TaskState,
    dependency_effect,
)

log = logging.getLogger("timewheel.stores")

__all__ = [
    "CANCELLABLE_STATES",
    "ENDED_SQL",
    "ENDED_STATES",
    "MANAGED_TASK_FIELDS",
    "ON_CONFLICT_VALUES",
    "OTHER_QUEUES_SQL",
    "REPORTED_FAILURES",
    "RETRYING_SQL",
    "SCHEDULE_GONE",
    "BatchPlan",
    "ClaimableRefs",
    "DependencyCount",
    "as_inserted",
    "batch_changes",
    "check_batch",
    "check_on_conflict",
    "check_schedule",
    "check_schedule_changes",
    "check_task",
    "check_task_changes",
    "closed",
    "count_dependencies",
    "duplicate_in_batch",
    "duplicate_task",
    "ended_histogram",
    "ended_rows",
    "existing_in_batch",
    "histogram",
    "histogram_buckets",
    "keep_existing",
    "keep_existing_schedule",
    "missing_upstream",
    "plan_batch",
    "prefix_range",
    "queue_counts",
    "ready_at_insert",
    "ready_until",
    "schedule_not_found",
    "schedule_version_conflict",
    "settle",
    "task_exists",
    "task_not_found",
    "version_conflict",
]

_PENDING = TaskState.PENDING

ON_CONFLICT_VALUES = ("error", "keep", "replace")
"""What ``insert(on_conflict=)`` and ``put_schedule(on_conflict=)`` accept."""
CANCELLABLE_STATES = frozenset({TaskState.PENDING, TaskState.READY})
"""The states a schedule's instances are cancelled from when it is replaced or deleted."""
SCHEDULE_GONE = "its schedule was replaced or deleted"
"""The ``error`` of an instance cancelled because its schedule was replaced or deleted."""
REPORTED_FAILURES = (TaskState.FAILED, TaskState.TIMED_OUT, TaskState.UPSTREAM_FAILED)
"""The states ``recent_failures`` reports."""
ENDED_STATES: tuple[TaskState, ...] = tuple(sorted(TERMINAL_STATES, key=lambda s: s.value))
"""The terminal states in a fixed order (the states ``ended_since`` reads)."""
ENDED_SQL = "state IN (" + ", ".join(f"'{s.value}'" for s in ENDED_STATES) + ")"
"""The SQL condition on ``state`` of the SQL stores' index of ended tasks, and of the query that
uses it, written once so the two match exactly (a partial index serves only its own condition)."""
RETRYING_SQL = "state = 'pending' AND attempts > 0"
"""The SQL condition of the SQL stores' index of tasks waiting to run again, and of its query."""
OTHER_QUEUES_SQL = f"queue <> '{DEFAULT_QUEUE}'"
"""The SQL condition of the SQL stores' index of queue and state, and of its query: tasks in a
queue other than the default one, so tasks in the default queue (most, in most applications) add
nothing to the index as they change state; the default queue's counts are each state's count
minus the other queues' (see :func:`queue_counts`)."""


# -- inserts ---------------------------------------------------------------------------------------
def check_on_conflict(on_conflict: object) -> None:
    """Raise ``InvalidScheduleError`` unless *on_conflict* is one of :data:`ON_CONFLICT_VALUES`."""
    if on_conflict not in ON_CONFLICT_VALUES:
        raise InvalidScheduleError(
            f"on_conflict must be 'error', 'keep' or 'replace' (got {on_conflict!r})"
        )


def check_task(task: Task) -> None:
    """Raise ``InvalidScheduleError`` for a task no store keeps: an empty id, an unknown ``when``."""
    if not isinstance(task.id, str) or not task.id:
        raise InvalidScheduleError(f"a task id must be a non-empty str (got {task.id!r})")
    if task.when not in WHEN_VALUES:
        raise InvalidScheduleError(
            f"when must be 'all_success', 'all_done' or 'any_failed' (got {task.when!r})"
        )


MANAGED_TASK_FIELDS = frozenset(
    {"id", "state", "version", "updated", "started", "after", "unmet", "when"}
)
"""Task fields a store manages itself: ``transition(**changes)`` refuses to set them."""


def _int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidScheduleError(f"{name} must be an int (got {value!r})")


def _text(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidScheduleError(f"{name} must be a str (got {value!r})")


def _text_or_none(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise InvalidScheduleError(f"{name} must be a str or None (got {value!r})")


def _instant(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidScheduleError(f"{name} must be finite epoch seconds (got {value!r})")


def _instant_or_none(name: str, value: Any) -> None:
    if value is not None:
        _instant(name, value)


def _seconds_or_none(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise InvalidScheduleError(f"{name} must be seconds or None (got {value!r})")


_CHANGE_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "due": _instant,
    "created": _instant,
    "lease_expires": _instant_or_none,
    "timeout": _seconds_or_none,
    "attempts": _int,
    "priority": _int,
    "queue": _text,
    "lease_owner": _text_or_none,
    "error": _text_or_none,
    "schedule_id": _text_or_none,
}
_TASK_FIELDS = frozenset(Task.__dataclass_fields__)


def check_task_changes(changes: Mapping[str, Any]) -> None:
    """Check the fields a ``transition`` is asked to set, the same way in every store.

    Raises:
        TypeError: a field the store manages (:data:`MANAGED_TASK_FIELDS`) or no task field.
        InvalidScheduleError: a value of the wrong type for its field.
    """
    for name, value in changes.items():
        if name in MANAGED_TASK_FIELDS or name not in _TASK_FIELDS:
            raise TypeError(
                f"cannot change {name!r} in a transition: the store manages id, state, version, "
                "updated, started (set as a run starts) and the dependency fields (after, unmet, "
                "when)"
            )
        check = _CHANGE_CHECKS.get(name)
        if check is not None:
            check(name, value)


def keep_existing(task_id: str, existing: TaskState, on_conflict: str) -> bool:
    """What an insert of *task_id* does when a task in state *existing* has that id.

    Returns True to keep the existing task unchanged (``"keep"``), False to replace it
    (``"replace"`` of a task that is not running).

    Raises:
        DuplicateKeyError: ``on_conflict="error"``.
        VersionConflictError: ``"replace"`` of a RUNNING task (a run cannot be taken back).
    """
    if on_conflict == "keep":
        return True
    if on_conflict == "error":
        raise duplicate_task(task_id, existing)
    if existing is TaskState.RUNNING:
        raise VersionConflictError(
            f"task {task_id!r} is running and cannot be replaced; wait for it or schedule under "
            "another id"
        )
    return False


def keep_existing_schedule(schedule_id: str, on_conflict: str) -> bool:
    """What ``put_schedule`` does with an existing schedule: True keeps it, False replaces it.

    Raises:
        DuplicateKeyError: ``on_conflict="error"``.
    """
    if on_conflict == "keep":
        return True
    if on_conflict == "error":
        raise DuplicateKeyError(
            f"a schedule with id {schedule_id!r} already exists; pass on_conflict='replace' or "
            "'keep', or choose another id"
        )
    return False


def ready_at_insert(task: Task, unmet: int = 0) -> bool:
    """Whether a durable store stores the new *task* READY rather than PENDING: work already due
    when it is stored goes in as the trigger's promotion would leave it, so it never enters a
    host's wheel and no promotion races for it.

    That is a one-shot task (instances of a schedule always go through a wheel: firing one plans
    the next) with no unmet upstream task (*unmet*, as :func:`count_dependencies` counted it),
    due at or before the instant it was made (``due <= created`` in whole microseconds:
    ``created`` is the scheduling process's clock when it was built). A store whose clock is
    another machine's compares the due time with that clock as well, in the insert itself
    (PostgreSQL: the server's), so a host whose clock runs ahead never stores READY a task the
    store does not find due yet.
    """
    if unmet or task.schedule_id is not None:
        return False
    due, created = task.due, task.created
    # compared as durable stores keep instants, in whole microseconds (a batch's rows are
    # compared so), so that a due time less than half a microsecond after ``created`` is
    # stored READY by a single insert as by a batch
    return due <= created or (
        due - created < 1e-6 and round(due * 1_000_000) <= round(created * 1_000_000)
    )


def ready_until(template: Task) -> float | None:
    """For a batch of new tasks without upstream tasks built from *template* (a
    :class:`~timewheel.stores.base.NewTasks`, whose tasks differ only in function, arguments and
    due time): the latest due time a durable store stores READY (:func:`ready_at_insert`), or
    ``None`` when it stores none READY."""
    if template.after or not ready_at_insert(template.evolve(due=template.created)):
        return None
    return template.created


def as_inserted(task: Task, *, version: int = 0, durable: bool = False) -> Task:
    """The snapshot an insert stores for *task*: PENDING at *version* (READY for a *durable*
    store when :func:`ready_at_insert` says so and *task* has no upstream tasks), no lease, no
    error, not started.

    ``updated`` is set to ``created``, and ``unmet`` to 0 (:func:`count_dependencies` sets it
    for a task with dependencies).
    """
    state = TaskState.READY if durable and not task.after and ready_at_insert(task) else _PENDING
    if (
        task.state is state
        and task.version == version
        and task.updated == task.created
        and task.unmet == 0
        and task.error is None
        and task.lease_owner is None
        and task.lease_expires is None
        and task.started is None
    ):
        return task  # the common case: already as an insert leaves it
    return task.evolve(
        state=state,
        version=version,
        updated=task.created,
        unmet=0,
        error=None,
        lease_owner=None,
        lease_expires=None,
        started=None,
    )


# -- batches ---------------------------------------------------------------------------------------
def check_batch(tasks: Sequence[Task], on_conflict: object) -> None:
    """What ``insert_many`` checks before it reads or writes anything.

    Raises:
        InvalidScheduleError: *on_conflict* is unknown; a task no store keeps (see
            :func:`check_task`); a task that depends on a task placed later in the same batch
            (or on itself): a batch is inserted in order, so an upstream task must come first.
        DuplicateKeyError: an id appears twice in the batch.
    """
    check_on_conflict(on_conflict)
    position: dict[str, int] = {}
    for i, task in enumerate(tasks):
        check_task(task)
        first = position.setdefault(task.id, i)
        if first != i:
            raise duplicate_in_batch(task.id, first, i)
    for i, task in enumerate(tasks):
        for up_id in task.after:
            at = position.get(up_id)
            if at is not None and at >= i:
                raise InvalidScheduleError(
                    f"task {task.id!r} (item {i} of the batch) depends on {up_id!r}, item {at} "
                    "of the same batch; an upstream task must come before its dependents"
                )


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """How a store inserts a checked batch (see :func:`plan_batch`).

    Attributes:
        bulk: snapshots to insert as they are, in one multi-row insert: new ids without
            dependencies (the common case, and the fast one), PENDING, or READY when already
            due on a durable store.
        one_by_one: tasks to insert in batch order after *bulk*, in the same transaction, each as
            ``insert()`` does (counting dependencies, replacing an existing task).
        kept: ids whose existing task stands (``on_conflict="keep"``).
    """

    bulk: list[Task]
    one_by_one: list[Task]
    kept: frozenset[str]


def plan_batch(
    tasks: Sequence[Task],
    on_conflict: str,
    existing: Mapping[str, TaskState],
    *,
    durable: bool = False,
) -> BatchPlan:
    """Split a batch checked by :func:`check_batch` by what each task needs.

    Args:
        tasks: the batch, in order.
        on_conflict: what an existing id does, for the whole batch.
        existing: the states of the tasks that exist already among the batch's ids (a store
            may pass an empty mapping with ``on_conflict="error"`` and let its unique key
            refuse an existing id, then raise :func:`existing_in_batch`).
        durable: the store is durable: *bulk* holds READY snapshots of the tasks already due
            (see :func:`as_inserted`).

    Raises:
        DuplicateKeyError: an id exists and *on_conflict* is ``"error"``; nothing is inserted.
        VersionConflictError: ``"replace"`` of a RUNNING task; nothing is inserted.
    """
    bulk: list[Task] = []
    one_by_one: list[Task] = []
    kept: set[str] = set()
    for task in tasks:
        state = existing.get(task.id)
        if state is not None:
            if on_conflict == "error":
                raise existing_in_batch(task.id, len(tasks))
            if keep_existing(task.id, state, on_conflict):
                kept.add(task.id)
            else:
                one_by_one.append(task)
        elif task.after:
            one_by_one.append(task)
        else:
            bulk.append(as_inserted(task, durable=durable))
    return BatchPlan(bulk, one_by_one, frozenset(kept))


def batch_changes(
    tasks: Sequence[Task], plan: BatchPlan, changed: Mapping[str, Changed]
) -> list[Changed]:
    """``insert_many``'s answer: the change of each task inserted or replaced, in batch order.

    *changed* holds the changes of the one-by-one inserts by id; a bulk task's change is its
    snapshot; kept tasks are left out.
    """
    if not changed and not plan.kept:
        return [Changed(t) for t in plan.bulk]  # every task went in bulk, in batch order
    bulk = {t.id: t for t in plan.bulk}
    out: list[Changed] = []
    for task in tasks:
        snapshot = bulk.get(task.id)
        if snapshot is not None:
            out.append(Changed(snapshot))
        elif task.id in changed:
            out.append(changed[task.id])
    return out


# -- dependencies ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DependencyCount:
    """Where a new task with dependencies starts (see :func:`count_dependencies`).

    Attributes:
        state: PENDING, or the terminal state it starts in when its condition can no longer hold.
        unmet: how many upstream tasks it still waits for.
        error: why it starts terminal, if it does.
        waits_on: the upstream ids whose end it waits for (record these edges); empty when the
            task starts terminal or waits for nothing.
    """

    state: TaskState
    unmet: int
    error: str | None
    waits_on: tuple[str, ...]

    def apply(self, task: Task) -> Task:
        """*task* with this state, count and error."""
        return task.evolve(state=self.state, unmet=self.unmet, error=self.error)


def count_dependencies(task: Task, state_of: Callable[[str], TaskState | None]) -> DependencyCount:
    """Count *task*'s unmet dependencies from the current states of its upstream tasks.

    Args:
        task: the task being inserted; ``task.after`` lists its upstream ids (repeats ignored).
        state_of: the store's read of an upstream task's state, ``None`` when it does not exist.

    Upstream tasks that already ended count at once: a success counts down (``all_success``),
    any end counts down (``all_done``), a failure releases an ``any_failed`` task; a task whose
    condition can no longer hold starts in its terminal state.

    Raises:
        TaskNotFoundError: an upstream id does not exist.
    """
    ups: list[tuple[str, TaskState]] = []
    for up_id in dict.fromkeys(task.after):
        state = state_of(up_id)
        if state is None:
            raise missing_upstream(task.id, up_id)
        ups.append((up_id, state))
    unmet = len(ups)
    terminal: TaskState | None = None
    error: str | None = None
    for _, state in ups:
        # unmet == 0 with no terminal state: already released (any_failed), stop counting
        if state in TERMINAL_STATES and terminal is None and unmet > 0:
            unmet, terminal, error = dependency_effect(task.when, state, unmet)
    if terminal is not None:
        return DependencyCount(terminal, unmet, error, ())
    unmet = max(unmet, 0)
    waits_on = tuple(u for u, s in ups if s not in TERMINAL_STATES) if unmet > 0 else ()
    return DependencyCount(_PENDING, unmet, None, waits_on)


def settle(
    upstream_id: str,
    upstream_state: TaskState,
    now: float,
    *,
    take_dependents: Callable[[str], Iterable[Task]],
    save: Callable[[Task, Task], None],
) -> tuple[Task, ...]:
    """Apply a terminal upstream's effect to the tasks waiting on it, transitively.

    Args:
        upstream_id, upstream_state: the task that ended, and how.
        now: the instant of the change (the dependents' new ``updated``).
        take_dependents: the store's read of the tasks waiting on an id; it also forgets that
            they wait on it (each edge is followed once).
        save: the store's write of a dependent's new snapshot in place of the old one (a
            compare-and-swap on the old version, inside the caller's lock or transaction).

    Returns:
        The dependents changed, in the order they changed: each either counted down (``unmet``
        lower, still PENDING) or moved to a terminal state, whose own dependents follow.
    """
    out: list[Task] = []
    stack = [(upstream_id, upstream_state)]
    while stack:
        up_id, up_state = stack.pop()
        for dep in take_dependents(up_id):
            if dep.state is not _PENDING or dep.unmet <= 0:
                continue
            unmet, terminal, error = dependency_effect(dep.when, up_state, dep.unmet)
            if terminal is not None:
                new = dep.evolve(
                    state=terminal, version=dep.version + 1, unmet=unmet, error=error, updated=now
                )
                stack.append((dep.id, terminal))
            else:
                new = dep.evolve(unmet=unmet, version=dep.version + 1, updated=now)
            save(dep, new)
            out.append(new)
    return tuple(out)


# -- schedules ---------------------------------------------------------------------------------------
def check_schedule(record: ScheduleRecord) -> None:
    """Raise ``InvalidScheduleError`` for a schedule no store keeps: an empty id."""
    if not isinstance(record.id, str) or not record.id:
        raise InvalidScheduleError(f"a schedule id must be a non-empty str (got {record.id!r})")


def check_schedule_changes(changes: Mapping[str, Any]) -> None:
    """Raise ``TypeError`` when ``update_schedule`` is asked to change ``id`` or ``version``."""
    if "id" in changes or "version" in changes:
        raise TypeError("update_schedule cannot change id or version")


# -- inspection --------------------------------------------------------------------------------------
def histogram_buckets(horizon: float, bucket: float) -> int:
    """The number of buckets of ``due_histogram(horizon=, bucket=)``, after checking both.

    Raises:
        InvalidScheduleError: either is not a positive, finite number of seconds.
    """
    validate.seconds(horizon, "horizon", above=0, timedelta_ok=False)
    validate.seconds(bucket, "bucket", above=0, timedelta_ok=False)
    return math.ceil(horizon / bucket)


_BY_VALUE = {s.value: s for s in TaskState}


def ended_rows(
    rows: Iterable[tuple[str, int, int | None, int]],
) -> list[tuple[TaskState, float, float | None, float]]:
    """``ended_since``'s answer from ``(state value, due, started, ended)`` rows (microseconds,
    ``started`` NULL for a task that never ran)."""
    by_value = _BY_VALUE
    return [
        (by_value[s], due / 1e6, None if started is None else started / 1e6, ended / 1e6)
        for s, due, started, ended in rows
    ]


def ended_histogram(
    since: float, bucket: float, n: int, rows: Iterable[tuple[int, str, int]]
) -> list[tuple[float, dict[TaskState, int]]]:
    """``ended_histogram``'s answer from ``(bucket index, state value, count)`` rows."""
    counts: list[dict[TaskState, int]] = [{} for _ in range(n)]
    for b, s, k in rows:
        if 0 <= b < n:
            state = _BY_VALUE[s]
            counts[b][state] = counts[b].get(state, 0) + k
    return [(since + i * bucket, c) for i, c in enumerate(counts)]


def queue_counts(
    rows: Iterable[tuple[str | None, str | TaskState, int]],
) -> dict[str, dict[TaskState, int]]:
    """``count_by_queue``'s answer from ``(queue, state, count)`` rows: a row whose queue is
    ``None`` counts a state's tasks in every queue, the others count the queues other than the
    default one; the default queue has the rest (zeros dropped)."""
    out: dict[str, dict[TaskState, int]] = {}
    rest: dict[TaskState, int] = {}
    for queue, s, n in rows:
        state = s if isinstance(s, TaskState) else _BY_VALUE[s]
        if queue is None:
            rest[state] = rest.get(state, 0) + n
        elif n:
            out.setdefault(queue, {})[state] = n
            rest[state] = rest.get(state, 0) - n
    default = {s: n for s, n in rest.items() if n}
    if default:
        out[DEFAULT_QUEUE] = default
    return out


_LAST_CHAR = chr(0x10FFFF)


def prefix_range(prefix: str) -> tuple[str, str | None]:
    """The strings that start with *prefix*, as the range ``[low, high)`` in code point order
    (the order of SQLite's ``BINARY`` and PostgreSQL's ``"C"`` collation): an index on a column
    serves ``col >= low AND col < high`` (``high`` None: every string from ``low`` on)."""
    head = prefix.rstrip(_LAST_CHAR)
    if not head:
        return prefix, None
    following = ord(head[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:  # surrogates are no characters of a stored string
        following = 0xE000
    return prefix, head[:-1] + chr(following)


def histogram(now: float, bucket: float, counts: Iterable[int]) -> list[tuple[float, int]]:
    """``due_histogram``'s answer: ``(bucket_start, n)`` for each bucket's count, from *now*."""
    return [(now + b * bucket, n) for b, n in enumerate(counts)]


# -- messages ------------------------------------------------------------------------------------------
def _in(where: str | None) -> str:
    return f" in {where!r}" if where else ""


def task_not_found(task_id: str, where: str | None = None) -> TaskNotFoundError:
    """No task *task_id* (in the store at *where*, when the store has a location)."""
    return TaskNotFoundError(f"no task with id {task_id!r}{_in(where)}")


def schedule_not_found(schedule_id: str, where: str | None = None) -> TaskNotFoundError:
    """No schedule *schedule_id*."""
    return TaskNotFoundError(f"no schedule with id {schedule_id!r}{_in(where)}")


def duplicate_task(task_id: str, existing: TaskState) -> DuplicateKeyError:
    """An insert with ``on_conflict="error"`` met a task with the same id."""
    return DuplicateKeyError(
        f"a task with id {task_id!r} already exists (state {existing.value}); pass "
        "on_conflict='keep' or 'replace', or choose another id"
    )


def task_exists(task_id: str) -> DuplicateKeyError:
    """An insert that has no ``on_conflict`` choice met a task with the same id."""
    return DuplicateKeyError(f"a task with id {task_id!r} already exists; choose another id")


def duplicate_in_batch(task_id: str, first: int, again: int) -> DuplicateKeyError:
    """``insert_many`` was given the same id twice (items *first* and *again*)."""
    return DuplicateKeyError(
        f"task id {task_id!r} appears twice in the batch (items {first} and {again}); none inserted"
    )


def existing_in_batch(task_id: str, size: int) -> DuplicateKeyError:
    """``insert_many`` was given an id that exists already."""
    return DuplicateKeyError(
        f"a task with id {task_id!r} already exists; none of the {size} tasks were inserted"
    )


def missing_upstream(task_id: str, upstream_id: str) -> TaskNotFoundError:
    """A new task depends on a task that does not exist."""
    return TaskNotFoundError(
        f"task {task_id!r} depends on {upstream_id!r}, which does not exist; schedule the "
        "upstream task first"
    )


def version_conflict(
    task_id: str, version: int, state: TaskState, expected: int
) -> VersionConflictError:
    """A compare-and-swap on a task expected *expected* and found *version* in *state*."""
    return VersionConflictError(
        f"task {task_id!r} is at version {version} ({state.value}), not {expected}: another "
        "actor changed it first; re-read and decide again"
    )


def schedule_version_conflict(
    schedule_id: str, version: int, expected: int
) -> VersionConflictError:
    """A compare-and-swap on a schedule expected *expected* and found *version*."""
    return VersionConflictError(
        f"schedule {schedule_id!r} is at version {version}, not {expected}: another actor "
        "changed it first; re-read and decide again"
    )


def closed(store: str) -> StoreError:
    """A change was asked of a closed store (*store* names it, e.g. its repr)."""
    return StoreError(f"{store} is closed and refuses changes; open a new store")


class ClaimableRefs:
    """Which stored function references this process claims tasks for: the check a durable
    store's batched claim makes before taking a READY task, cached per reference.

    A reference that resolves here, or that an allowlist refuses without importing it (the worker
    then ends its task FAILED), is claimable. One that does not resolve is not: its tasks stay
    READY for a worker that can import it, and :meth:`unclaimable` lists it (a store's
    ``unresolvable()``). The cache of refusals is forgotten when the registry of names or the
    modules an allowlist permits change (:func:`timewheel.refs.generation`).
    """

    def __init__(self, store_name: str) -> None:
        self._store_name = store_name
        self._known: dict[str, bool] = {}
        self._generation = refs.generation()
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def unclaimable(self) -> list[str]:
        """References known not to resolve in this process."""
        with self._lock:
            generation = refs.generation()
            if generation != self._generation:
                self._known = {k: v for k, v in self._known.items() if v}
                self._generation = generation
            return [r for r, ok in self._known.items() if not ok]

    def claimable(self, ref: str) -> bool:
        """Whether this process claims tasks calling *ref* (see the class docstring)."""
        ok = self._known.get(ref)
        if ok is None:
            try:
                refs.resolve_ref(ref)
                ok = True
            except refs.ReferenceNotAllowedError:
                ok = True  # claimed, never imported: the worker's allowlist ends it FAILED
            except refs.UnresolvableRefError as e:
                ok = False
                if ref not in self._warned:
                    self._warned.add(ref)
                    log.warning(
                        "not claiming READY tasks of %s in process %d: %s; they stay READY for "
                        "a worker that can import it (see %s.unresolvable())",
                        ref,
                        os.getpid(),
                        e,
                        self._store_name,
                    )
            with self._lock:
                self._known[ref] = ok
        return ok


# a generator of the library's own: drawing from the random module's shared one would move the
# state an application (or its test framework) seeded, from whichever thread is backing off
_backoff_random = random.Random()


def backoff_pause(delay: float) -> float:
    """*delay* jittered to between half and one and a half times itself: the pause before a
    store retries after contention or a lost connection, so that clients that failed together
    don't retry in step."""
    return delay * (0.5 + _backoff_random.random())
