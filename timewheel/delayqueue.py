"""``DelayQueue``: a thread-safe queue whose items come out only when due, earliest due first.

The method names are those of :class:`queue.Queue` (``put``, ``get``, ``get_nowait``, ``qsize``,
``empty``, ``full``, ``shutdown``); the semantics are those of Java's
``java.util.concurrent.DelayQueue``: every item carries a due time, ``get`` returns the item with
the earliest due time once that time has come (first in, first out among equal due times), and an
item never comes out early.

Structure::

    put(item, delay=/at=) ──► TimingWheel (not yet due, keyed by item id)
                               │   advance(clock.time()) on every get/peek/ready_count,
                               │   and at each FakeClock step
                               ▼
                              ready heap (due, seq): due items, earliest first ──► get()

One lock guards everything; consumers wait on a condition through ``clock.wait`` until the wheel's
next deadline (or their own timeout), so with a ``FakeClock`` nothing sleeps and with the
``SystemClock`` a consumer sleeps exactly until the next item is due (capped at one second so a
wall-clock jump is noticed). A ``put`` of an item due earlier than the deadline the consumers sleep
towards wakes them.

With a store, each item is a task row (``func`` = :data:`ITEM_FUNC`, ``args = [item]``,
``queue`` = the queue's name): items falling due are promoted PENDING -> READY in one step, and a
``get`` claims READY -> RUNNING and finishes RUNNING -> SUCCEEDED before it returns the item
(at-most-once delivery: see ``docs/delayqueue.md``).
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import queue as _queue
import reprlib
import sys
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from timewheel import forking, refs
from timewheel.clock import Clock, DrivingClock, to_datetime, to_timestamp
from timewheel.errors import (
    InheritedAcrossForkError,
    InvalidScheduleError,
    InvalidTransitionError,
    SchedulerStateError,
    SerializationError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.stores.base import Store, store_clock
from timewheel.task import Task, TaskState
from timewheel.validate import seconds
from timewheel.wheel import TimingWheel

__all__ = [
    "ITEM_FUNC",
    "DelayQueue",
    "DelayQueueStatistics",
    "DelayToken",
    "QueueShutDownError",
]

T = TypeVar("T")

#: The function reference stored as ``func`` of every delay-queue row: a harmless identity function.
ITEM_FUNC = "timewheel.delayqueue:_delivered"

_MAX_SLEEP = 1.0  # a consumer re-reads the wall clock at least this often (jumps are noticed)
_LEASE = 3600.0  # a claim is finished at once; the lease only marks rows of a crashed get()
_IN_WHEEL, _READY, _GONE = 0, 1, 2


def _delivered(item: Any) -> Any:
    """The stored ``func`` of delay-queue rows: returns the item (never called by the queue)."""
    return item


if sys.version_info >= (3, 13):

    class QueueShutDownError(SchedulerStateError, _queue.ShutDown):
        """The :class:`DelayQueue` was shut down (also a ``queue.ShutDown`` on Python 3.13+)."""

else:

    class QueueShutDownError(SchedulerStateError):
        """The :class:`DelayQueue` was shut down (also a ``queue.ShutDown`` on Python 3.13+)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DelayToken:
    """What :meth:`DelayQueue.put` returns: the item's id, its due time, and a way to cancel it.

    Attributes:
        id: the item's id, unique in the queue (and in its store).
        due: when the item becomes due, an aware UTC ``datetime``.
    """

    id: str
    due: datetime
    _queue: DelayQueue[Any] = field(repr=False, compare=False)

    def cancel(self) -> bool:
        """Remove the item if it is still in the queue; True if it was removed by this call.

        False when a consumer already took it, or it was cancelled before. Works after
        ``shutdown()`` too (with a store it then cancels the stored row).
        """
        return self._queue.cancel(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class DelayQueueStatistics:
    """A snapshot of a :class:`DelayQueue` (from :meth:`DelayQueue.statistics`).

    Attributes:
        pending: items not yet due.
        ready: items due and not yet taken.
        waiting_getters: threads blocked in ``get``.
        waiting_putters: threads blocked in ``put`` (bounded queue full).
        put: items put since the queue was created (items reloaded from a store not counted).
        taken: items returned by ``get``.
        cancelled: items removed by ``cancel``.
        shut_down: whether :meth:`DelayQueue.shutdown` was called.
    """

    pending: int
    ready: int
    waiting_getters: int
    waiting_putters: int
    put: int
    taken: int
    cancelled: int
    shut_down: bool


class _Entry:
    """One item in the queue (in the wheel, in the ready heap, or gone)."""

    __slots__ = ("due", "id", "item", "seq", "stored_ready", "version", "where")

    def __init__(self, id: str, item: Any, due: float, seq: int) -> None:
        self.id = id
        self.item = item
        self.due = due
        self.seq = seq
        self.where = _IN_WHEEL
        self.version = 0  # the stored row's version (store only)
        self.stored_ready = False  # the stored row is READY (store only)


class _Timeout:
    """The deadline of one blocked ``get``/``put``, measured on the queue's clock.

    With a ``FakeClock`` the deadline is a fake instant that the queue reports as one of its
    deadlines, so ``clock.advance()`` steps to it and marks it ``expired`` (no float drift between
    the clock's time and its monotonic reading can leave a waiter blocked).
    """

    __slots__ = ("end", "expired")

    def __init__(self, end: float) -> None:
        self.end = end
        self.expired = False


def _timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    t = seconds(timeout, "timeout")
    if t < 0:
        raise InvalidScheduleError(
            f"timeout must be a non-negative number of seconds (got {timeout!r}); pass None to "
            "wait without limit"
        )
    return t


class DelayQueue(Generic[T]):
    """A thread-safe queue of items that come out only when due, earliest due first.

    Args:
        clock: where time comes from (default :class:`~timewheel.clock.SystemClock`). A
            ``FakeClock`` drives the queue deadline by deadline: ``clock.advance()`` moves items
            to the ready heap as they fall due, wakes blocked consumers and returns the items
            that became due, in due order.
        store: optional :class:`~timewheel.stores.base.Store` that makes items survive a restart.
            With a durable store (``SQLiteStore``) items must be JSON values. Pending and ready
            rows of this queue's *name* are loaded when the queue is created. Use a store (file)
            of its own, or at least one no ``Scheduler`` serves: a scheduler would run the rows.
        name: the queue's name, stored as each row's ``queue``, so several delay queues can share
            one store. At most one live ``DelayQueue`` per (store, name).
        tick: the timing wheel's finest slot in seconds (0.001 to 1): how late at most an item
            becomes available after its due time (plus the OS wake-up), never early.
        maxsize: the most items (due or not) the queue holds; ``0`` means unbounded. A full queue
            blocks ``put`` (or raises ``queue.Full``), as ``queue.Queue`` does.

    Example::

        q = DelayQueue()
        q.put("b", delay=2.0)
        q.put("a", delay=1.0)
        q.get()   # "a", after one second
        q.get()   # "b", one second later

    Errors: bad ``delay``/``at`` raise :class:`~timewheel.errors.InvalidScheduleError`
    (``ValueError``) or ``TypeError``; after :meth:`shutdown`, ``put`` raises and ``get`` raises once
    nothing due is left: :class:`QueueShutDownError` (a ``SchedulerStateError``, a
    ``RuntimeError``, and on Python 3.13+ a ``queue.ShutDown``).

    Thread safety: every method may be called from any thread. One lock guards the queue; store
    I/O (insert, promote, claim, finish) runs under it, so with a durable store consumers take
    items one at a time, in due order.

    Runtime complexity (n items): ``put`` O(log n) (wheel O(1) plus a heap kept for ``peek``),
    ``get`` O(log n) plus the due work of the wheel, ``cancel`` O(1) (amortized), ``peek``
    O(log n) amortized, ``len``/``qsize``/``empty``/``full`` O(1), ``ready_count`` O(due work).
    Memory: every item is held in memory, also with a store.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        name: str = "delayqueue",
        tick: float = 0.001,
        maxsize: int = 0,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidScheduleError(f"name must be a non-empty string (got {name!r})")
        if isinstance(maxsize, bool) or not isinstance(maxsize, int):
            raise TypeError(f"maxsize must be an int (got {maxsize!r})")
        # on a store shared by hosts, due times are instants on its server's clock
        self._clock: Clock = store_clock(clock, store)
        self._store = store
        self._durable = bool(store is not None and store.durable)
        self.name = name
        self.maxsize = maxsize
        self._wheel: TimingWheel[str] = TimingWheel(tick=tick, start=self._clock.time())
        self._tick = self._wheel.tick
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._entries: dict[str, _Entry] = {}
        self._ready: list[tuple[float, int, _Entry]] = []  # heap; skips entries no longer READY
        self._nready = 0
        self._pending: list[tuple[float, int, _Entry]] = []  # heap for peek(); lazily cleaned
        self._timeouts: set[_Timeout] = set()  # blocked calls' deadlines (FakeClock only)
        self._getters = 0
        self._putters = 0
        self._n_put = self._n_taken = self._n_cancelled = 0
        self._shutdown = False
        self._discarded = False
        self._pid = os.getpid()
        self._owner = f"delayqueue:{name}@{self._pid}:{uuid.uuid4().hex[:8]}"
        self._inherited: tuple[int, int] | None = None  # (parent pid, items) in a refused copy
        start = 1
        if store is not None:
            start = self._reload(store)
        self._seq = itertools.count(start)
        # on a clock that drives time itself (FakeClock), the clock steps this queue's deadlines
        self._driver: _QueueDriver | None = None
        self._fake = isinstance(self._clock, DrivingClock)
        if isinstance(self._clock, DrivingClock):
            self._driver = _QueueDriver(self)
            self._clock.attach(self._driver)
        forking.after_fork_in_child(self._after_fork)

    # -- putting ------------------------------------------------------------------------------
    def put(
        self,
        item: T,
        *,
        delay: float | timedelta | None = None,
        at: datetime | float | None = None,
        block: bool = True,
        timeout: float | None = None,
    ) -> DelayToken:
        """Add *item*, due after *delay* or at the instant *at* (exactly one of them).

        Args:
            item: any object; with a durable store, a JSON value (refused otherwise).
            delay: seconds (or a ``timedelta``) from now, on the queue's clock; negative means due
                now. The due time is fixed when ``put`` is called, also if it then blocks.
            at: an aware ``datetime`` or epoch seconds.
            block, timeout: as ``queue.Queue.put``: only matter for a full bounded queue; the
                *timeout* is measured on the queue's clock.

        Returns:
            A :class:`DelayToken` with the item's ``id``, its ``due`` time and ``cancel()``.

        Raises:
            InvalidScheduleError: both or neither of *delay* and *at*, NaN or infinite values,
                a naive ``datetime`` (attach a zone), a due time outside ``datetime``'s range.
            TypeError: *delay*/*at* of the wrong type.
            SerializationError: the store is durable and *item* is not a JSON value.
            queue.Full: the bounded queue stayed full (``block=False``, or *timeout* ran out).
            QueueShutDownError: the queue was shut down.
        """
        due = self._due(delay, at)
        try:
            due_dt = to_datetime(due)
        except (OverflowError, ValueError, OSError):
            raise InvalidScheduleError(
                f"due time {due!r} (epoch seconds) is outside the range of datetime (years 1 to "
                "9999); pass a nearer delay= or at="
            ) from None
        if self._durable:
            try:
                refs.check_json_value(item, "item")
            except SerializationError as e:
                raise SerializationError(
                    f"DelayQueue {self.name!r} keeps its items in a durable store, so each item "
                    f"must be a JSON value (None, bool, int, float, str, list, dict with str "
                    f"keys); {reprlib.repr(item)} is not: {e}. Convert it (e.g. to a dict), or "
                    "use a DelayQueue without a durable store"
                ) from None
        tmo = _timeout(timeout) if block else None
        if self._inherited is not None:
            raise self._fork_error()
        with self._lock:
            if self._shutdown:
                raise self._shut_error("put")
            if self.maxsize > 0 and len(self._entries) >= self.maxsize:
                self._wait_for_space(block, tmo)
            item_id = uuid.uuid4().hex
            seq = next(self._seq)
            entry = _Entry(item_id, item, due, seq)
            if self._store is not None:
                now = self._clock.time()
                stored = self._store.insert(
                    Task(
                        id=item_id,
                        func=ITEM_FUNC,
                        args=(item,),
                        due=due,
                        queue=self.name,
                        created=now,
                        updated=now,
                        extra={"seq": seq},
                    )
                ).task
                # a durable store stores an item already due READY: nothing to promote
                entry.stored_ready = stored.state is TaskState.READY
                entry.version = stored.version
            wake = False
            if self._getters:
                dl = self._wheel.next_deadline()
                wake = dl is None or due < dl
            self._wheel.add(item_id, due)
            self._entries[item_id] = entry
            heapq.heappush(self._pending, (due, seq, entry))
            self._n_put += 1
            if wake:
                # One consumer re-plans for the earlier item; the others keep their (later)
                # deadline. A consumer that leaves without an item passes the wake-up on.
                self._not_empty.notify()
        return DelayToken(id=item_id, due=due_dt, _queue=self)

    def put_nowait(
        self,
        item: T,
        *,
        delay: float | timedelta | None = None,
        at: datetime | float | None = None,
    ) -> DelayToken:
        """``put(item, delay=/at=, block=False)``: raises ``queue.Full`` at once if full."""
        return self.put(item, delay=delay, at=at, block=False)

    def _due(self, delay: object, at: object) -> float:
        if delay is not None and at is not None:
            raise InvalidScheduleError(
                f"pass exactly one of delay= and at= (got delay={delay!r} and at={at!r})"
            )
        if delay is not None:
            due = self._clock.time() + seconds(delay, "delay")
            if not math.isfinite(due):
                raise InvalidScheduleError(f"delay={delay!r} puts the due time beyond any date")
            return due
        if at is not None:
            if isinstance(at, datetime):
                return to_timestamp(at)
            if isinstance(at, timedelta):
                raise TypeError(
                    f"at= is an instant (aware datetime or epoch seconds), got the duration {at!r}; "
                    "pass it as delay= instead"
                )
            return seconds(at, "at")
        raise InvalidScheduleError(
            "pass exactly one of delay= or at= (e.g. delay=600 for ten minutes from now, or "
            "at=datetime(2026, 3, 29, 12, 0, tzinfo=timezone.utc))"
        )

    def _wait_for_space(self, block: bool, tmo: float | None) -> None:
        """Wait (lock held) until the bounded queue has room; raise Full or QueueShutDownError."""
        deadline = self._start_timeout(tmo) if block else None
        try:
            while True:
                if self._shutdown:
                    raise self._shut_error("put")
                if len(self._entries) < self.maxsize:
                    return
                if not block:
                    raise _queue.Full
                wait = self._remaining(deadline)
                if wait is not None and wait <= 0:
                    raise _queue.Full
                self._putters += 1
                try:
                    self._clock.wait(self._not_full, wait)
                finally:
                    self._putters -= 1
        finally:
            if deadline is not None:
                self._timeouts.discard(deadline)

    # -- getting ------------------------------------------------------------------------------
    def get(self, block: bool = True, timeout: float | None = None) -> T:
        """Remove and return the item with the earliest due time, once it is due.

        Args:
            block: wait for an item to become due (``False``: as :meth:`get_nowait`).
            timeout: with *block*, the most seconds to wait, measured on the queue's clock
                (``None``: no limit). With a ``FakeClock`` the wait ends only when the clock is
                advanced by *timeout*.

        Raises:
            queue.Empty: no item is due (``block=False``) or none became due within *timeout*.
            QueueShutDownError: the queue was shut down and no due item is left (a blocked
                ``get`` raises as soon as ``shutdown()`` is called).
            StoreError: the store failed; the item stays in the queue.
        """
        tmo = _timeout(timeout) if block else None
        clock = self._clock
        if self._inherited is not None:
            raise self._fork_error()
        with self._lock:
            deadline = self._start_timeout(tmo) if block else None
            try:
                while True:
                    if self._discarded:
                        raise self._shut_error("get")
                    now = clock.time()
                    self._advance(now)
                    while self._nready:
                        # A FakeClock step that ended this wait at deadline.end leaves us only
                        # items due by then, however late this thread runs after the step.
                        if (
                            deadline is not None
                            and deadline.expired
                            and self._top_ready().due > deadline.end
                        ):
                            break
                        entry = self._pop_ready()
                        if self._take(entry, now):
                            return entry.item  # type: ignore[no-any-return]  # items are T
                    if self._shutdown:
                        raise self._shut_error("get")
                    if not block:
                        raise _queue.Empty
                    wait = self._remaining(deadline)
                    if wait is not None and wait <= 0:
                        if self._getters:
                            self._not_empty.notify()  # a wake-up meant for us may be owed
                        raise _queue.Empty
                    dl = self._wheel.next_deadline()
                    if dl is not None:
                        until = dl - now
                        if until <= 0:
                            until = self._tick
                        if not self._fake:
                            until = min(until, _MAX_SLEEP)
                        wait = until if wait is None else min(wait, until)
                    self._getters += 1
                    try:
                        clock.wait(self._not_empty, wait)
                    finally:
                        self._getters -= 1
            finally:
                if deadline is not None:
                    self._timeouts.discard(deadline)

    def get_nowait(self) -> T:
        """Remove and return the earliest due item, or raise ``queue.Empty`` if none is due."""
        return self.get(block=False)

    def _top_ready(self) -> _Entry:
        """The earliest live READY entry, left in place (lock held, ``_nready > 0``)."""
        ready = self._ready
        while ready[0][2].where != _READY:
            heapq.heappop(ready)
        return ready[0][2]

    def _pop_ready(self) -> _Entry:
        """Pop the earliest live READY entry (lock held, ``_nready > 0``)."""
        ready = self._ready
        while True:
            entry = heapq.heappop(ready)[2]
            if entry.where == _READY:
                entry.where = _GONE
                del self._entries[entry.id]
                self._nready -= 1
                return entry

    def _take(self, entry: _Entry, now: float) -> bool:
        """Record that *entry* was taken (store: claim + finish); False if someone else took it.

        On a store error the entry is put back and the error propagates.
        """
        if self._store is not None:
            try:
                taken = self._take_stored(self._store, entry, now)
            except BaseException:
                self._restore_ready(entry)
                raise
            if not taken:
                return False
        self._n_taken += 1
        if self._nready and self._getters:
            self._not_empty.notify()  # chain: another due item for another waiting consumer
        if self._putters:
            self._not_full.notify()
        return True

    def _take_stored(self, store: Store, entry: _Entry, now: float) -> bool:
        owner = self._owner
        claimed = store.claim(
            entry.id,
            expected_version=entry.version,
            owner=owner,
            lease_expires=now + _LEASE,
            now=now,
        )
        if claimed is None:
            # Our cached version is stale (an earlier attempt failed half-way) or another actor
            # changed the row: look at it once.
            row = store.find(entry.id)
            if row is None or row.state.terminal:
                return False
            if row.state is TaskState.READY:
                claimed = store.claim(
                    entry.id,
                    expected_version=row.version,
                    owner=owner,
                    lease_expires=now + _LEASE,
                    now=now,
                )
                if claimed is None:
                    return False
            elif row.state is not TaskState.RUNNING or row.lease_owner != owner:
                return False
        return store.finish(entry.id, owner=owner, state=TaskState.SUCCEEDED, now=now) is not None

    def _restore_ready(self, entry: _Entry) -> None:
        entry.where = _READY
        self._entries[entry.id] = entry
        self._nready += 1
        heapq.heappush(self._ready, (entry.due, entry.seq, entry))

    # -- looking ------------------------------------------------------------------------------
    def peek(self) -> T | None:
        """The item with the earliest due time, due or not, without removing it; ``None`` if empty.

        A due item comes first (the ready items are all due no later than any pending one).
        """
        if self._inherited is not None:
            raise self._fork_error()
        with self._lock:
            self._advance(self._clock.time())
            if self._nready:
                return self._top_ready().item  # type: ignore[no-any-return]  # items are T
            pending = self._pending
            while pending and pending[0][2].where != _IN_WHEEL:
                heapq.heappop(pending)
            return pending[0][2].item if pending else None

    def ready_count(self) -> int:
        """How many items are due now (and not yet taken)."""
        if self._inherited is not None:
            raise self._fork_error()
        with self._lock:
            self._advance(self._clock.time())
            return self._nready

    def __len__(self) -> int:
        """How many items the queue holds, due or not."""
        return len(self._entries)

    def qsize(self) -> int:
        """``len(queue)``: all items, due or not (as ``queue.Queue.qsize``)."""
        return len(self._entries)

    def empty(self) -> bool:
        """True if the queue holds no item at all (due or not)."""
        return not self._entries

    def full(self) -> bool:
        """True if the queue is bounded and holds ``maxsize`` items."""
        return 0 < self.maxsize <= len(self._entries)

    def statistics(self) -> DelayQueueStatistics:
        """A consistent snapshot of the queue's counters (see :class:`DelayQueueStatistics`)."""
        with self._lock:
            if not self._discarded:
                self._advance(self._clock.time())
            return DelayQueueStatistics(
                pending=len(self._wheel),
                ready=self._nready,
                waiting_getters=self._getters,
                waiting_putters=self._putters,
                put=self._n_put,
                taken=self._n_taken,
                cancelled=self._n_cancelled,
                shut_down=self._shutdown,
            )

    # -- cancelling ---------------------------------------------------------------------------
    def cancel(self, token: DelayToken | str) -> bool:
        """Remove the item of *token* (or with that id) if still queued; True if this call did.

        With a store, the row moves to CANCELLED in the same call. False when the item was taken,
        cancelled before, or its row was changed by another process (it is then dropped here).
        """
        item_id = token.id if isinstance(token, DelayToken) else token
        if self._inherited is not None:
            raise self._fork_error()
        with self._lock:
            entry = self._entries.get(item_id)
            if entry is None:
                return False
            ok = True
            if self._store is not None:
                try:
                    self._store.transition(
                        item_id,
                        expected_version=entry.version,
                        state=TaskState.CANCELLED,
                        now=self._clock.time(),
                    )
                except (VersionConflictError, InvalidTransitionError, TaskNotFoundError):
                    ok = False  # the row moved on elsewhere: it is not ours to deliver any more
            self._forget(entry)
            if ok:
                self._n_cancelled += 1
            if self._putters:
                self._not_full.notify()
            return ok

    def _forget(self, entry: _Entry) -> None:
        """Drop *entry* from memory (lock held)."""
        del self._entries[entry.id]
        where, entry.where = entry.where, _GONE
        if where == _IN_WHEEL:
            self._wheel.cancel(entry.id)
            if len(self._pending) > 2 * len(self._wheel) + 64:
                self._pending = [p for p in self._pending if p[2].where == _IN_WHEEL]
                heapq.heapify(self._pending)
        elif where == _READY:
            self._nready -= 1
            if len(self._ready) > 2 * self._nready + 64:
                self._ready = [r for r in self._ready if r[2].where == _READY]
                heapq.heapify(self._ready)

    # -- shutting down ------------------------------------------------------------------------
    def shutdown(self, immediate: bool = False) -> None:
        """Refuse new items and wake every blocked ``get`` and ``put``. Idempotent.

        After it, ``put`` raises :class:`QueueShutDownError`; ``get`` and ``get_nowait`` still
        return items that are already due, and raise :class:`QueueShutDownError` (instead of
        waiting, or of ``queue.Empty``) once none is due. With ``immediate=True`` the queue also
        forgets every item at once, so every ``get`` raises. ``cancel`` keeps working.

        The store is never changed by a shutdown: items left in it are loaded again by the next
        ``DelayQueue`` with the same store and name. The store is not closed (it is yours).
        """
        with self._lock:
            self._shutdown = True
            if immediate and not self._discarded:
                self._discarded = True
                for entry in list(self._entries.values()):
                    self._forget(entry)
                self._ready.clear()
                self._pending.clear()
            self._not_empty.notify_all()
            self._not_full.notify_all()
        if self._driver is not None and isinstance(self._clock, DrivingClock):
            self._clock.detach(self._driver)

    def __enter__(self) -> DelayQueue[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _shut_error(self, what: str) -> QueueShutDownError:
        if what == "put":
            return QueueShutDownError(
                f"cannot put into DelayQueue {self.name!r}: it was shut down; create a new "
                "DelayQueue (with the same store and name to keep the stored items)"
            )
        left = "its items were discarded" if self._discarded else "no item is due"
        return QueueShutDownError(
            f"DelayQueue {self.name!r} was shut down and {left} ({len(self._entries)} not yet "
            "due are left: cancel them, or reopen the queue to receive them)"
        )

    # -- fork() -------------------------------------------------------------------------------
    def _after_fork(self) -> None:
        """In a child made by ``fork()``, before anything else runs there (one thread).

        The parent's blocked ``get``/``put`` calls are not in this process, and one of its threads
        may have held the lock at the fork: the lock, conditions and waiter counts start anew.
        With a durable store the items stay: each is claimed from the store, so each is taken
        once, here or in the parent. Without one, items held at the fork are the parent's.
        """
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._getters = self._putters = 0
        self._timeouts = set()
        parent, self._pid = self._pid, os.getpid()
        self._owner = f"delayqueue:{self.name}@{self._pid}:{uuid.uuid4().hex[:8]}"
        if self._entries and not self._durable and self._inherited is None:
            self._inherited = (parent, len(self._entries))

    def _fork_error(self) -> InheritedAcrossForkError:
        parent, items = self._inherited or (0, 0)
        return InheritedAcrossForkError(
            f"DelayQueue {self.name!r} held {items} items when process {parent} made process "
            f"{os.getpid()} by fork(); they are the parent's to deliver (taking them here too "
            "would deliver each twice), so this copy refuses to be used. Create the DelayQueue "
            "after the fork, in the process that uses it, or give it a durable store "
            "(SQLiteStore), whose items each process may take, each once. The parent's queue is "
            "unaffected"
        )

    # -- time ---------------------------------------------------------------------------------
    def _start_timeout(self, tmo: float | None) -> _Timeout | None:
        """A deadline *tmo* seconds from now on the queue's clock (lock held)."""
        if tmo is None:
            return None
        if self._fake:
            t = _Timeout(self._clock.time() + tmo)
            self._timeouts.add(t)
            return t
        return _Timeout(self._clock.monotonic() + tmo)

    def _remaining(self, deadline: _Timeout | None) -> float | None:
        if deadline is None:
            return None
        if deadline.expired:
            return 0.0
        if self._fake:
            return deadline.end - self._clock.time()
        return deadline.end - self._clock.monotonic()

    def _advance(self, now: float) -> list[Any]:
        """Move items due by *now* from the wheel to the ready heap (lock held); return them."""
        ids = self._wheel.advance(now)
        if not ids:
            return []
        entries = [self._entries[i] for i in ids]
        if self._store is not None:
            try:
                entries = self._promote(self._store, entries, now)
            except BaseException:
                for e in entries:
                    self._wheel.add(e.id, e.due)  # nothing is lost: retried on the next advance
                raise
        ready = self._ready
        for e in entries:
            e.where = _READY
            heapq.heappush(ready, (e.due, e.seq, e))
        self._nready += len(entries)
        pending = self._pending
        while pending and pending[0][2].where != _IN_WHEEL:
            heapq.heappop(pending)
        if self._getters:
            self._not_empty.notify(len(entries))
        return [e.item for e in entries]

    def _promote(self, store: Store, entries: list[_Entry], now: float) -> list[_Entry]:
        """PENDING -> READY in the store for *entries*; return those still ours, in order."""
        todo = [e.id for e in entries if not e.stored_ready]
        if not todo:
            return entries
        moved = {t.id: t.version for t in store.promote(todo, now)}
        kept: list[_Entry] = []
        for e in entries:
            if not e.stored_ready:
                version = moved.get(e.id)
                if version is None:
                    row = store.find(e.id)  # promoted by someone else, cancelled, or deleted
                    if row is None or row.state is not TaskState.READY:
                        del self._entries[e.id]
                        e.where = _GONE
                        continue
                    version = row.version
                e.version = version
                e.stored_ready = True
            kept.append(e)
        return kept

    def _reload(self, store: Store) -> int:
        """Load this queue's PENDING/READY rows into the wheel; return the next sequence number.

        RUNNING rows are those of a ``get`` that crashed between its claim and its finish (it
        never returned the item): they are released to READY and delivered again.
        """
        now = self._clock.time()
        rows: list[tuple[float, int, str, Task]] = []
        states: Iterable[TaskState] = (TaskState.PENDING, TaskState.READY, TaskState.RUNNING)
        for t in store.tasks(state=states):
            if t.queue != self.name or t.func_name != ITEM_FUNC:
                continue
            if t.state is TaskState.RUNNING:
                changed = store.finish(
                    t.id, owner=t.lease_owner or "", state=TaskState.READY, now=now
                )
                if changed is None:
                    continue
                t = changed.task
            seq = t.extra.get("seq", 0)
            rows.append((t.due, seq if isinstance(seq, int) else 0, t.id, t))
        rows.sort(key=lambda r: (r[0], r[1], r[2]))
        top = 0
        for due, seq, item_id, t in rows:
            entry = _Entry(item_id, t.args[0] if t.args else None, due, seq)
            entry.version = t.version
            entry.stored_ready = t.state is TaskState.READY
            self._wheel.add(item_id, due)
            self._entries[item_id] = entry
            self._pending.append((due, seq, entry))
            top = max(top, seq)
        heapq.heapify(self._pending)
        return top + 1

    # -- driven by a DrivingClock (FakeClock) ------------------------------------------------------
    def _next_deadline(self) -> float | None:
        with self._lock:
            d = self._wheel.next_deadline()
            for t in self._timeouts:
                if not t.expired and (d is None or t.end < d):
                    d = t.end
            return d

    def _fire(self, now: float) -> list[Any]:
        with self._lock:
            if self._discarded:
                return []
            made_due = self._advance(now)
            expired = [t for t in self._timeouts if t.end <= now]
            for t in expired:
                t.expired = True
                self._timeouts.discard(t)
            if expired:
                self._not_empty.notify_all()
                self._not_full.notify_all()
            return made_due

    def __repr__(self) -> str:
        state = " shut down" if self._shutdown else ""
        return (
            f"<DelayQueue {self.name!r}{state} items={len(self._entries)} ready={self._nready} "
            f"clock={self._clock!r}>"
        )


class _QueueDriver:
    """The :class:`~timewheel.clock.Driven` side of a queue on a clock that drives time: the clock
    asks for the next deadline (an item or a blocked call's timeout) and fires it there."""

    __slots__ = ("__weakref__", "_queue")

    def __init__(self, queue: DelayQueue[Any]) -> None:
        self._queue = queue

    def next_deadline(self) -> float | None:
        return self._queue._next_deadline()

    def fire(self, now: float) -> list[Any]:
        return self._queue._fire(now)
