"""The ``Store`` protocol: where tasks live, and the only place their state changes.

Every state change is a compare-and-swap on ``version`` (``UPDATE ... SET state=?,
version=version+1 WHERE id=? AND version=?`` or its in-memory twin): a lost swap means another actor
won, and the loser backs off. Stores never decide policy (retries, misfires): the scheduler does,
and tells the store the result. Time is passed in (``now``); stores do not read a clock.

Besides :class:`Store`, a store may offer optional abilities, each a small runtime-checkable
protocol that callers test with one ``isinstance`` check:

* :class:`SupportsCompactInsert`: cheap inserts of fresh tasks with default options;
* :class:`SupportsNewTasks`: a batch of fresh tasks sharing their options (:class:`NewTasks`)
  inserted straight from its columns, with no :class:`Task` snapshot built per task;
* :class:`SupportsFinishMany`: several runs' outcomes stored in one step;
* :class:`SupportsInspection`: the read-only queries behind ``timewheel inspect``;
* :class:`SupportsMaintenance`: housekeeping the scheduler's trigger runs now and then;
* :class:`SupportsServerClock`: a server whose clock every host's times are compared on;
* :class:`SupportsNotifications`: tells listening processes about work other processes added
  or made READY (a :class:`WorkListener` hears it), so they need not wait for their next poll;
* :class:`SupportsPromoteKeys`: promotion that reads back only what the trigger needs when the
  promoted tasks are not queued in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from timewheel.clock import Clock, DrivingClock, SystemClock
from timewheel.task import EMPTY_KWARGS, ScheduleRecord, Task, TaskState

__all__ = [
    "Changed",
    "Finish",
    "Lease",
    "NewTasks",
    "OnConflict",
    "Promoted",
    "Store",
    "SupportsCompactInsert",
    "SupportsFinishMany",
    "SupportsHeartbeatMany",
    "SupportsInspection",
    "SupportsMaintenance",
    "SupportsNewTasks",
    "SupportsNotifications",
    "SupportsPendingAmong",
    "SupportsPromoteKeys",
    "SupportsServerClock",
    "WorkListener",
    "extend_leases",
    "store_clock",
]

OnConflict = Literal["error", "keep", "replace"]


class Changed(NamedTuple):
    """The result of a change that can settle dependents.

    ``task`` is the task after the change; ``dependents`` are the tasks whose dependency count or
    state changed as a consequence, transitively (those with ``unmet == 0`` and state PENDING may
    now run; others moved to a terminal state).
    """

    task: Task
    dependents: tuple[Task, ...] = ()


@runtime_checkable
class Store(Protocol):
    """**Protocol:** durable or in-memory storage of tasks and recurring schedules.

    Implementations must be safe to call from several threads. ``durable`` stores keep only
    importable function references and JSON-serializable arguments (see ``timewheel.refs``).
    ``timewheel.testing.check_store(make_store)`` runs the contract suite against any store.
    """

    durable: bool

    # -- tasks -------------------------------------------------------------------------------
    def insert(self, task: Task, *, on_conflict: OnConflict = "error") -> Changed:
        """Insert *task* (state PENDING, version 0).

        Computes ``unmet`` from the current states of ``task.after`` atomically: upstream tasks
        already finished count at once, and a task whose condition can no longer hold is inserted
        in its terminal state. ``on_conflict`` decides what an existing id does: ``"error"`` raises
        ``DuplicateKeyError``, ``"keep"`` returns the existing task unchanged, ``"replace"``
        overwrites a task that is not RUNNING (a running one raises ``VersionConflictError``).

        Raises:
            TaskNotFoundError: an id in ``task.after`` does not exist.
        """
        ...

    def insert_many(
        self, tasks: Sequence[Task], *, on_conflict: OnConflict = "error"
    ) -> list[Changed]:
        """Insert a batch of tasks in one atomic step: all of them, or (on an error) none.

        Each task is inserted as :meth:`insert` would, in batch order, with *on_conflict* for
        every task of the batch. A task may depend (``after``) on tasks in the store or on tasks
        placed earlier in the same batch. New ids without dependencies, the common case, go in
        one multi-row insert (``policy.plan_batch`` decides; ``policy.check_batch`` checks the
        batch before anything is read or written).

        Returns the change of each task inserted or replaced, in batch order; a task kept under
        ``on_conflict="keep"`` is not among them.

        Raises:
            DuplicateKeyError: an id appears twice in the batch, or exists already and
                *on_conflict* is ``"error"``.
            VersionConflictError: ``"replace"`` of a RUNNING task.
            InvalidScheduleError: an unknown *on_conflict*; a task that depends on a later task
                of the batch.
            TaskNotFoundError: an id in a task's ``after`` does not exist.
        """
        ...

    def get(self, task_id: str) -> Task:
        """Return the task. Raises ``TaskNotFoundError``."""
        ...

    def find(self, task_id: str) -> Task | None:
        """Return the task, or ``None``."""
        ...

    def transition(
        self, task_id: str, *, expected_version: int, state: TaskState, now: float, **changes: Any
    ) -> Changed:
        """Compare-and-swap: move the task to *state* if its version is *expected_version*.

        Other fields in *changes* (``due``, ``error``, ``result``, ``lease_owner`` ...) are set in
        the same swap. A terminal *state* settles dependents.

        Raises:
            TaskNotFoundError, VersionConflictError (someone else changed it first),
            InvalidTransitionError (the table forbids it), TypeError (a field the store manages,
            see ``policy.check_task_changes``), InvalidScheduleError (a value of the wrong type).
        """
        ...

    def promote(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Task]:
        """Move the given tasks PENDING -> READY where still PENDING, due by *now* and ``unmet == 0``.

        One atomic step per call: *successors* (the next instances of recurring schedules) are
        inserted in the same step, ignoring ids that already exist. Returns the tasks moved.
        """
        ...

    def claim(
        self, task_id: str, *, expected_version: int, owner: str, lease_expires: float, now: float
    ) -> Task | None:
        """READY -> RUNNING with a lease for *owner*, ``attempts + 1``; ``None`` if the swap lost."""
        ...

    def claim_next(
        self,
        *,
        owner: str,
        lease_expires: float,
        now: float,
        limit: int,
        queues: Sequence[str] | None = None,
    ) -> list[Task]:
        """Claim up to *limit* READY tasks (highest priority, then earliest due) in *queues*."""
        ...

    def heartbeat(self, task_id: str, *, owner: str, lease_expires: float, now: float) -> bool:
        """Extend the lease if *owner* still holds it on a RUNNING task; False otherwise."""
        ...

    def finish(
        self, task_id: str, *, owner: str, state: TaskState, now: float, **changes: Any
    ) -> Changed | None:
        """End *owner*'s run: RUNNING -> SUCCEEDED | FAILED | TIMED_OUT | PENDING (retry) | READY.

        Clears the lease. ``None`` when *owner* no longer holds the task (its lease expired and
        someone else took over): the caller's outcome is discarded.
        """
        ...

    def due_before(self, until: float, *, limit: int) -> list[tuple[str, float, str | None]]:
        """``(id, due, schedule_id)`` of PENDING tasks with ``unmet == 0`` and ``due < until``,
        earliest first (ties by id). ``schedule_id`` tells the trigger which are instances of
        recurring schedules (``None`` for one-shot tasks)."""
        ...

    def ready(self, *, limit: int, queues: Sequence[str] | None = None) -> list[Task]:
        """READY tasks, highest priority then earliest due first (to refill a ready queue)."""
        ...

    def expired_leases(self, now: float, *, limit: int) -> list[Task]:
        """RUNNING tasks whose lease expired before *now*."""
        ...

    def count_by_state(self) -> dict[TaskState, int]:
        """How many tasks are in each state (states with none may be missing)."""
        ...

    def tasks(
        self,
        *,
        state: TaskState | Iterable[TaskState] | None = None,
        schedule_id: str | None = None,
        limit: int | None = None,
    ) -> list[Task]:
        """Tasks filtered by state and/or schedule, earliest due first (ties by creation time, then id)."""
        ...

    def delete(self, task_id: str) -> bool:
        """Remove a task; True if it existed."""
        ...

    def prune(
        self,
        *,
        before: float,
        states: Iterable[TaskState] | None = None,
        limit: int | None = None,
        keep: Collection[str] = (),
    ) -> int:
        """Delete terminal tasks (or those in *states*) last updated before *before*; the count.

        With *limit*, delete at most that many (the earliest first, as far as the store keeps an
        order) and look at no more than about ``limit + len(keep)`` tasks per state: a bounded
        step that a caller repeats. Tasks whose id is in *keep* are never deleted.
        """
        ...

    # -- recurring schedules ------------------------------------------------------------------
    def put_schedule(
        self, record: ScheduleRecord, *, first: Task | None, on_conflict: OnConflict = "replace"
    ) -> ScheduleRecord:
        """Insert or replace a schedule and, in the same atomic step, its first instance.

        Replacing a schedule cancels its PENDING/READY instances before inserting *first*.
        """
        ...

    def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        """Return the schedule, or ``None``."""
        ...

    def list_schedules(self) -> list[ScheduleRecord]:
        """All schedules."""
        ...

    def update_schedule(
        self, schedule_id: str, *, expected_version: int, **changes: Any
    ) -> ScheduleRecord:
        """Compare-and-swap on the schedule's version. Raises ``VersionConflictError``."""
        ...

    def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the schedule and cancel its PENDING/READY instances; True if it existed."""
        ...

    def close(self) -> None:
        """Release resources. Idempotent. A closed store refuses further changes (``StoreError``)."""
        ...


@runtime_checkable
class SupportsCompactInsert(Protocol):
    """**Protocol:** a store that inserts fresh one-shot tasks with default options cheaply.

    ``Scheduler.schedule`` uses these for a task that has nothing but a function, arguments and a
    due time; what they store reads back exactly as the :class:`Task` described below.
    """

    def add_pending(
        self, task_id: str, func: Callable[..., Any], args: tuple[Any, ...], due: float, now: float
    ) -> None:
        """Insert ``Task(id=task_id, func=func, args=args, due=due, created=now, updated=now)``.

        Raises:
            DuplicateKeyError: a task with this id exists.
        """
        ...

    def add_ready(
        self, task_id: str, func: Callable[..., Any], args: tuple[Any, ...], due: float, now: float
    ) -> Task:
        """Insert that task already promoted (READY at version 1, as ``promote`` leaves it).

        Raises:
            DuplicateKeyError: a task with this id exists.
            ValueError: *due* is later than *now*.
        """
        ...


@dataclass(frozen=True, slots=True)
class NewTasks:
    """A checked batch of fresh PENDING tasks without dependencies that share every option but
    their function, arguments and due time: what ``schedule_many`` builds for the common case.

    Task *k* is ``template.evolve(id=ids[k], func=funcs[k], args=args[k], kwargs=kwargs[k],
    due=dues[k])``, PENDING at version 0 (:meth:`tasks` builds them). The lists have one entry
    per task; ids are fresh (generated), so none repeats within the batch. On a durable store
    ``funcs`` hold references (``"module:qualname"``) and the arguments were checked as JSON.
    """

    template: Task
    ids: list[str]
    funcs: Sequence[Callable[..., Any] | str]
    args: Sequence[tuple[Any, ...]]
    kwargs: Sequence[Mapping[str, Any]]
    dues: Sequence[float]

    def __len__(self) -> int:
        return len(self.ids)

    def tasks(self) -> list[Task]:
        """The batch as :class:`Task` snapshots, in order (for stores without
        :class:`SupportsNewTasks`)."""
        t = self.template
        return [
            Task(
                id=i,
                func=f,
                args=a,
                kwargs=k,
                due=d,
                retry=t.retry,
                priority=t.priority,
                queue=t.queue,
                timeout=t.timeout,
                created=t.created,
                updated=t.created,
                when=t.when,
            )
            for i, f, a, k, d in zip(
                self.ids, self.funcs, self.args, self.kwargs, self.dues, strict=True
            )
        ]


@runtime_checkable
class SupportsNewTasks(Protocol):
    """**Protocol:** a store that inserts a :class:`NewTasks` batch from its columns.

    The same as ``insert_many(batch.tasks())`` (with ``on_conflict="error"``), without building
    a snapshot per task: one store step, all of the batch or, on any error, none of it.
    """

    def insert_new(self, batch: NewTasks) -> Sequence[str]:
        """Insert every task of *batch* in one step; the ids of the tasks it stored READY
        rather than PENDING (a durable store stores work already due READY, see
        :func:`~timewheel.stores.policy.ready_at_insert`), in batch order.

        Raises:
            DuplicateKeyError: an id exists already; nothing is inserted.
        """
        ...


class Finish(NamedTuple):
    """One run's outcome for :meth:`SupportsFinishMany.finish_many`: the arguments of
    ``Store.finish(task_id, owner=owner, state=state, **changes)``, and optionally the snapshot
    *owner* claimed (*claimed*). A RUNNING task changes only by its owner's heartbeats (its lease,
    version and update time) and its end, so a store may build the ended snapshot from the
    claimed one and the finish's changes instead of reading the row back."""

    task_id: str
    owner: str
    state: TaskState
    changes: Mapping[str, Any] = EMPTY_KWARGS
    claimed: Task | None = None


@runtime_checkable
class SupportsFinishMany(Protocol):
    """**Protocol:** a store that stores several runs' outcomes in one step.

    On a durable store that is one transaction and one commit for all of them, where
    ``finish`` pays a commit each. The thread pool dispatcher finishes the runs that complete
    together through it (a group commit: no run waits for others to complete).
    """

    def finish_many(self, finishes: Sequence[Finish], *, now: float) -> list[Changed | None]:
        """``finish`` each of *finishes* at *now*, in order, in one step.

        Returns one result per item, as ``finish`` returns it: ``None`` where the owner no
        longer holds the task (that outcome is discarded; the others are stored all the same).

        Raises:
            InvalidTransitionError: an item's state is not one a run ends in; nothing is stored.
            TypeError: an item's changes name the lease fields.
        """
        ...


class Lease(NamedTuple):
    """One lease for :meth:`SupportsHeartbeatMany.heartbeat_many`: *owner*'s hold on the
    RUNNING task *task_id*."""

    task_id: str
    owner: str


@runtime_checkable
class SupportsHeartbeatMany(Protocol):
    """**Protocol:** a store that extends several leases in one step.

    A process's thread pool holds every task its workers claimed and have not finished
    (running, waiting in a claimed batch, or succeeded and waiting to be stored): on a durable
    store that can be hundreds, whose leases the heartbeat extends in one statement and one
    commit instead of one each.
    """

    def heartbeat_many(
        self, leases: Sequence[Lease], *, lease_expires: float, now: float
    ) -> list[bool]:
        """``heartbeat`` each of *leases* to *lease_expires* at *now*, in one step.

        Returns one result per item, in order, as ``heartbeat`` returns it: False where the
        owner no longer holds a RUNNING task of that id (the others are extended all the same).
        """
        ...


@runtime_checkable
class SupportsInspection(Protocol):
    """**Protocol:** the read-only queries ``timewheel inspect`` shows for a store."""

    def oldest_ready_age(self, now: float) -> float | None:
        """Seconds since the earliest due time among READY tasks (how far workers lag), or None."""
        ...

    def due_histogram(
        self, now: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, int]]:
        """Expected load: ``(bucket_start, n)`` for PENDING tasks due in ``[now, now + horizon)``.

        Buckets are *bucket* seconds wide, aligned on *now*; empty buckets are included.

        Raises:
            InvalidScheduleError: *bucket* or *horizon* is not a positive number of seconds.
        """
        ...

    def recent_failures(self, limit: int = 10) -> list[Task]:
        """The last *limit* tasks that ended FAILED, TIMED_OUT or UPSTREAM_FAILED, newest first."""
        ...

    def unresolvable(self) -> dict[str, int]:
        """Function references this process cannot resolve -> READY tasks waiting on each."""
        ...

    def ended_histogram(
        self, since: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, dict[TaskState, int]]]:
        """What ended in ``[since, since + horizon)``: ``(bucket_start, {state: n})`` per
        *bucket* seconds, aligned on *since*, empty buckets included (``{}``), counted by the
        store along an index of end times.

        Raises:
            InvalidScheduleError: *bucket* or *horizon* is not a positive number of seconds.
        """
        ...

    def ended_since(
        self, since: float, *, limit: int
    ) -> list[tuple[TaskState, float, float | None, float]]:
        """``(state, due, started, ended)`` of up to *limit* tasks that reached a terminal state
        at or after *since*, the latest first (``started`` is when the task's last run began,
        ``None`` when it never ran; ``ended`` is its ``updated``).

        Served by an index on the end time: the cost grows with the tasks returned, not with
        the tasks kept (the start lateness of the last hour's runs).
        """
        ...

    def count_by_queue(self) -> dict[str, dict[TaskState, int]]:
        """How many tasks each queue holds in each state: ``{queue: {state: n}}`` (queues and
        states with none are missing). Counted from an index (SQL stores: one ``GROUP BY`` along
        an index of queue and state; the memory store keeps the counts as tasks change), never
        by reading the tasks themselves."""
        ...

    def by_function(self, prefix: str, *, limit: int) -> list[Task]:
        """Up to *limit* tasks whose function reference (``Task.func_name``) starts with
        *prefix*, in any state, ordered by function reference then id.

        SQL stores read a range of an index on the function reference; the memory store, whose
        tasks hold function objects, looks at every task and keeps *limit* of them.
        """
        ...

    def retrying(self, limit: int) -> list[Task]:
        """Up to *limit* PENDING tasks that ran before (``attempts > 0``): a failed attempt
        waiting for its retry, or a run whose lease expired, the soonest due first. Served by an
        index of those tasks alone."""
        ...

    def last_ended(self, schedule_id: str) -> Task | None:
        """The instance of schedule *schedule_id* that ended last (any terminal state), or None.

        Reads the schedule's own instances only (a schedule's last run and its outcome).
        """
        ...

    def dependents(self, task_id: str, *, limit: int) -> list[Task]:
        """Up to *limit* tasks that name *task_id* in their ``after``, in any state, by id.

        Reads only the tasks that have upstream tasks (never every task): a task's page lists
        what waits, or waited, on it.
        """
        ...


@runtime_checkable
class SupportsMaintenance(Protocol):
    """**Protocol:** a store with housekeeping to do now and then (the SQLite store checkpoints
    its write-ahead log). The scheduler's trigger calls :meth:`maintain` after it pruned finished
    tasks and otherwise every few minutes (see ``timewheel.retention``)."""

    def maintain(self, now: float) -> None:
        """Do a short piece of housekeeping; never waits long for other connections."""
        ...


@runtime_checkable
class SupportsServerClock(Protocol):
    """**Protocol:** a store shared by hosts whose times are compared on its server's clock.

    A scheduler on a real-time clock reads time through :meth:`server_clock`, so due times,
    leases and the wheel's wake-ups are all instants on the server's clock, whatever this host's
    clock says. A ``FakeClock`` is never corrected: fake time is its own.
    """

    def server_clock(self, clock: Clock) -> Clock:
        """*clock* corrected to the server's clock (this host's offset measured now and kept up
        to date); from then on the store also refuses, on the server's clock, to promote work
        not yet due or to reap a lease not yet expired."""
        ...


@runtime_checkable
class WorkListener(Protocol):
    """**Protocol:** hears from a :class:`SupportsNotifications` store what other processes did
    (a scheduler's trigger). Called on the store's listening thread: return quickly."""

    def work_scheduled(self, entries: Sequence[tuple[str, float, str | None]]) -> None:
        """Other processes inserted these PENDING, runnable tasks, due soon: ``(id, due,
        schedule_id)``, as :meth:`Store.due_before` gives them."""
        ...

    def work_changed(self, *, pending: bool, ready: bool) -> None:
        """Look in the store: other processes inserted PENDING work due soon that the
        notification does not list (*pending*), or made work READY (*ready*); both when
        notifications may have been lost (the store reconnected)."""
        ...


@runtime_checkable
class SupportsNotifications(Protocol):
    """**Protocol:** a store that tells listening processes when another process inserts work
    due soon or makes work READY (PostgreSQL's ``LISTEN``/``NOTIFY``), so a scheduler learns of
    it at once instead of at its next poll. Polling still covers lost notifications."""

    def listen(self, listener: WorkListener) -> Callable[[], None]:
        """Tell *listener* about other processes' work until the returned function is called."""
        ...


class Promoted(NamedTuple):
    """A task :meth:`SupportsPromoteKeys.promote_keys` moved to READY: its id, its version after
    the move and its queue."""

    id: str
    version: int
    queue: str


@runtime_checkable
class SupportsPromoteKeys(Protocol):
    """**Protocol:** :meth:`Store.promote` without reading the promoted tasks back.

    The trigger uses it while its ready queue is full: the tasks it promotes then stay READY in
    the store (workers get them through a later refill), so decoding each one into a
    :class:`Task` would be work nobody reads. A durable store's herd of 100,000 heads is promoted
    with the rows changed in place and three columns returned.
    """

    def promote_keys(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Promoted]:
        """Exactly :meth:`Store.promote` (the same tasks move, in one atomic step with the
        *successors*), returning each moved task's :class:`Promoted` keys, in *task_ids* order."""
        ...


@runtime_checkable
class SupportsPendingAmong(Protocol):
    """**Protocol:** which of some tasks still wait to be promoted, in one read.

    The trigger asks it about the tasks its wheel emitted that :meth:`Store.promote` did not move:
    with several processes on one store, most were promoted by another process's trigger, and a
    read per task would cost a round trip each.
    """

    def pending_among(self, task_ids: Sequence[str]) -> list[tuple[str, float, str | None]]:
        """``(id, due, schedule_id)`` of those of *task_ids* that are PENDING with no unmet
        dependency (as :meth:`Store.due_before` gives them), by due time then id."""
        ...


def extend_leases(
    store: Store, leases: Sequence[Lease], *, lease_expires: float, now: float
) -> list[bool]:
    """``heartbeat`` each of *leases*: in one step when *store* supports
    :class:`SupportsHeartbeatMany`, else one lease at a time. One result per lease, in order."""
    if isinstance(store, SupportsHeartbeatMany):
        return store.heartbeat_many(leases, lease_expires=lease_expires, now=now)
    return [
        store.heartbeat(task_id, owner=owner, lease_expires=lease_expires, now=now)
        for task_id, owner in leases
    ]


def store_clock(clock: Clock | None, store: Store | None) -> Clock:
    """The clock a scheduler or queue on *store* reads: *clock* (default :class:`SystemClock`),
    read through the store's server clock when the store keeps one
    (:class:`SupportsServerClock`: PostgreSQL) and time is real. Hosts sharing such a store then
    agree on due times, leases and wake-ups whatever their own clocks say. A clock that drives
    time itself (``FakeClock``) is used as it is."""
    if clock is None:
        clock = SystemClock()
    if isinstance(clock, DrivingClock) or store is None:
        return clock
    if isinstance(store, SupportsServerClock):
        return store.server_clock(clock)
    return clock
