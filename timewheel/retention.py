"""Retention: finished tasks are removed after a while, a little at a time, from the trigger.

A scheduler keeps a finished task (SUCCEEDED, FAILED, CANCELLED, TIMED_OUT, UPSTREAM_FAILED) for
``keep_finished`` seconds after it ended, then deletes it, so a store that runs for months stays
the size of its recent work. Finished instances of recurring schedules go the same way; the
schedules themselves stay.

The work is bounded: :meth:`Retention.step`, which :meth:`Trigger.fire <timewheel.trigger.
Trigger.fire>` calls, does nothing until ``interval`` seconds passed since its last pass, then
deletes at most ``batch`` tasks in one ``prune`` call (one short transaction on SQLite). A pass
that deleted a full batch is followed by another ``pause`` seconds later instead of ``interval``
later: while :attr:`Retention.catching_up` is true, the trigger's next deadline is
:attr:`Retention.next_pass`, so even an idle trigger works through a backlog of expired tasks one
bounded batch per step, never in one long hold of the store, and the pause leaves the store to
other threads between two batches (an SQLite writer polls for the write lock: without a pause,
back-to-back batches would keep it waiting for the whole backlog).

A task whose :class:`~timewheel.jobs.Job` handle is still referenced somewhere in this process
is kept, however old: the scheduler registers every handle it makes (:meth:`Retention.hold`) as a
weak reference in a set, and each pass skips the ids of the handles still alive. Once the last
handle of a task is dropped, the task goes at the next pass that reaches it. A pass looks at up to
``batch`` plus the number of live handles tasks per state, so an application that keeps very many
handles makes each pass longer in proportion.

Registering is on the path of every ``schedule()`` call, so it is kept to two C calls: a weak
reference whose callback (the set's own ``discard``) takes it out of the set when the handle is
dropped, and the set insert. No lock is needed (each is one step under the GIL) and no Python code
runs, neither when a handle is made nor when it goes. With ``keep_finished=None`` nothing is
deleted, so nothing is registered.

Stores with maintenance to do (:class:`~timewheel.stores.base.SupportsMaintenance`, such as a WAL
checkpoint in SQLite) get :meth:`~timewheel.stores.base.SupportsMaintenance.maintain` called from
here too: right after a pass that deleted tasks but not a full batch (the end of a backlog, or
ordinary expiry), and otherwise at least every ``maintain_interval`` seconds.
"""

from __future__ import annotations

import math
import weakref
from datetime import timedelta
from typing import Literal, Protocol

from timewheel.stores.base import Store, SupportsMaintenance

__all__ = [
    "DURABLE_BATCH",
    "DURABLE_KEEP_FINISHED",
    "MEMORY_BATCH",
    "MEMORY_KEEP_FINISHED",
    "Handle",
    "Handles",
    "KeepFinished",
    "Retention",
    "keep_finished_seconds",
]

MEMORY_BATCH = 500
"""Most finished tasks one retention pass deletes from a store only this process uses."""

DURABLE_BATCH = 250
"""Most finished tasks one retention pass deletes from a durable store: deleting a row updates
every index of the table, and 500 rows made the longest pass about 27 ms of CPU on SQLite (250:
about 14 ms; ``benchmarks/bench_soak.py --prune-sqlite``), all of it in the trigger's thread."""

MEMORY_KEEP_FINISHED = 3600.0
"""Default retention of finished tasks on a store only this process uses (memory): one hour."""

DURABLE_KEEP_FINISHED = 7 * 86400.0
"""Default retention of finished tasks on a durable store (SQLite): seven days."""

KeepFinished = timedelta | float | None | Literal["default"]
"""What ``keep_finished=`` takes: a duration, seconds, ``None`` (keep forever) or ``"default"``."""


class Handles(Protocol):
    """**Protocol:** live handles on a batch of tasks (``Jobs``): every one of them is kept."""

    @property
    def ids(self) -> list[str]:
        """The task ids."""
        ...


class Handle(Protocol):
    """**Protocol:** a live handle on a task (``Job``, ``AsyncJob``): its task is kept."""

    @property
    def id(self) -> str:
        """The task id."""
        ...


def keep_finished_seconds(value: KeepFinished, store: Store) -> float | None:
    """Seconds to keep finished tasks in *store* (``None``: forever), from ``keep_finished=``.

    ``"default"`` is :data:`DURABLE_KEEP_FINISHED` on a durable store, else
    :data:`MEMORY_KEEP_FINISHED`. Raises ``ValueError`` for a negative or non-finite duration and
    ``TypeError`` for anything else.
    """
    if value is None:
        return None
    if isinstance(value, str):
        if value != "default":
            raise ValueError(f"keep_finished must be a duration, None or 'default', not {value!r}")
        return DURABLE_KEEP_FINISHED if store.durable else MEMORY_KEEP_FINISHED
    if isinstance(value, timedelta):
        secs = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        secs = float(value)
    else:
        raise TypeError(f"keep_finished must be a timedelta, seconds or None, not {value!r}")
    if not math.isfinite(secs) or secs < 0:
        raise ValueError(f"keep_finished must be a finite duration >= 0, not {value!r}")
    return secs


class _HandleRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a handle, hashed and compared as itself: handles compare equal by task
    id, and two live handles on one task must both be kept (a set of plain weak references, which
    compare their referents, would keep only one of them)."""

    __slots__ = ()
    __hash__ = object.__hash__
    __eq__ = object.__eq__


class Retention:
    """Deletes finished tasks older than *keep* seconds, in bounded passes (module docstring).

    Args:
        store: where the tasks live.
        keep: seconds a finished task is kept after it ended; ``None`` keeps them forever (passes
            then only do the store's maintenance).
        batch: most tasks deleted per pass (default :data:`DURABLE_BATCH` on a durable store,
            :data:`MEMORY_BATCH` otherwise).
        interval: least seconds between two passes, unless the last one deleted a full batch.
        pause: seconds between two passes while a backlog is worked off (after a full batch).
        maintain_interval: most seconds between two maintenance calls, for stores that have
            maintenance to do.

    :meth:`step` runs in the trigger's thread; :meth:`hold` may be called from any thread.
    """

    def __init__(
        self,
        store: Store,
        keep: float | None,
        *,
        batch: int | None = None,
        interval: float = 5.0,
        maintain_interval: float = 120.0,
        pause: float = 0.01,
    ) -> None:
        self.store = store
        self.keep = keep
        if batch is None:
            batch = DURABLE_BATCH if store.durable else MEMORY_BATCH
        self.batch = batch
        self.interval = interval
        self.maintain_interval = maintain_interval
        self.pause = pause
        self.maintenance = store if isinstance(store, SupportsMaintenance) else None
        #: tasks deleted by all passes so far
        self.removed = 0
        # weak references to the live handles; a dropped handle's reference removes itself
        self._handles: set[_HandleRef] = set()
        self._forget = self._handles.discard
        # the same for batches of handles (``Jobs``)
        self._batches: set[_HandleRef] = set()
        self._forget_batch = self._batches.discard
        self._next_pass = -math.inf
        self._next_maintenance = -math.inf
        self._catching_up = False

    def hold(self, handle: Handle) -> None:
        """Keep the task of *handle* for as long as *handle* is referenced (from any thread).
        With ``keep`` None (set at construction: nothing is ever deleted) nothing is recorded."""
        if self.keep is not None:
            self._handles.add(_HandleRef(handle, self._forget))

    def hold_many(self, handles: Handles) -> None:
        """:meth:`hold` for a batch: keep the tasks of *handles* while it is referenced."""
        if self.keep is not None:
            self._batches.add(_HandleRef(handles, self._forget_batch))

    def held(self) -> set[str]:
        """The ids of the tasks live handles refer to."""
        ids = set()
        for ref in self._handles.copy():  # one C step: other threads' adds and drops wait for it
            handle = ref()
            if handle is not None:
                ids.add(handle.id)
        for ref in self._batches.copy():
            batch = ref()
            if batch is not None:
                ids.update(batch.ids)
        return ids

    @property
    def catching_up(self) -> bool:
        """True after a pass that deleted a full batch: more expired tasks may wait, and the
        next pass is due ``pause`` seconds later (:attr:`next_pass`), whatever else the trigger
        has to do."""
        return self._catching_up

    @property
    def next_pass(self) -> float:
        """When the next pass is due (scheduler clock, epoch seconds)."""
        return self._next_pass

    def step(self, now: float) -> int:
        """One pass, if one is due at *now*: delete at most ``batch`` expired finished tasks and
        maintain the store when it is time. Returns the number of tasks deleted. A full batch
        makes the next pass due ``pause`` seconds later."""
        if now < self._next_pass:
            return 0
        self._next_pass = now + self.interval
        self._catching_up = False
        removed = 0
        if self.keep is not None:
            removed = self.store.prune(before=now - self.keep, limit=self.batch, keep=self.held())
            self.removed += removed
            if removed >= self.batch:
                self._next_pass = now + self.pause  # more may wait: another batch soon
                self._catching_up = True
        # after a backlog is worked off (not after each of its full batches: SQLite's checkpoint
        # thread keeps the WAL bounded meanwhile), and at least every maintain_interval
        done = 0 < removed < self.batch
        if self.maintenance is not None and (done or now >= self._next_maintenance):
            self.maintenance.maintain(now)
            self._next_maintenance = now + self.maintain_interval
        return removed
