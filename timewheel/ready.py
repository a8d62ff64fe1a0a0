"""The ready queue: due tasks waiting for a worker, in lanes by queue name and priority.

The trigger loop puts tasks here after moving them PENDING -> READY in the store; workers pull.
Within a queue name, a higher priority lane is always served first, and each lane is FIFO (the
wheel emits tasks in due order). The queue is bounded: ``put`` refuses a task when full, and the
task simply stays READY in the store until the loop refills the queue from there, so back-pressure
never drops a task.

Thread-safe. Runtime complexity: ``put`` O(log P) for P distinct priorities in the queue name
(O(1) for a known priority), ``pull`` O(Q) for Q queue names polled, ``discard`` O(1) (lazy).
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from timewheel.task import Task

__all__ = ["ReadyQueue", "ReadyStatistics"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadyStatistics:
    """A snapshot of the ready queue."""

    depth: int
    capacity: int
    by_lane: dict[tuple[str, int], int]
    put_total: int
    pulled_total: int
    refused_total: int
    high_water: int


class ReadyQueue:
    """Bounded multi-lane queue of READY tasks (see the module docstring)."""

    def __init__(self, capacity: int = 10_000, *, on_low: Callable[[], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"ready queue capacity must be >= 1 (got {capacity})")
        self.capacity = capacity
        self.low_water = capacity // 2
        """Depth at which ``on_low`` is called as workers drain the queue."""
        self.on_low = on_low
        """Called (outside the lock) when a pull brings the depth down to ``low_water``: the
        scheduler refills from READY rows in the store in one batch, not one row per pull."""
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._waiting = 0  # pullers blocked in _not_empty.wait (guarded by _lock)
        # queue name -> (sorted priorities ascending, priority -> lane)
        self._lanes: dict[str, tuple[list[int], dict[int, deque[Task]]]] = {}
        self._ids: dict[str, Task] = {}  # id -> the queued snapshot (stale lane entries skip)
        self._depth = 0
        self._put_total = 0
        self._pulled_total = 0
        self._refused_total = 0
        self._high_water = 0
        self._closed = False

    def __len__(self) -> int:
        return self._depth

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._ids

    @property
    def free(self) -> int:
        """How many more tasks ``put`` accepts now."""
        return max(0, self.capacity - self._depth)

    def put(self, task: Task) -> bool:
        """Enqueue *task*; False when full, closed, or already queued (this snapshot or a newer one).

        A newer snapshot of a queued task replaces the stale one.
        """
        with self._lock:
            queued = self._ids.get(task.id)
            if queued is not None:
                if queued.version >= task.version:
                    return False
                # A stale snapshot (claimed elsewhere, e.g. by another process, and READY again):
                # the newer one takes its place; the old lane entry is skipped when reached.
                del self._ids[task.id]
                self._depth -= 1
            if self._closed or self._depth >= self.capacity:
                self._refused_total += 1
                return False
            entry = self._lanes.get(task.queue)
            if entry is None:
                entry = self._lanes[task.queue] = ([], {})
            prios, lanes = entry
            lane = lanes.get(task.priority)
            if lane is None:
                lane = lanes[task.priority] = deque()
                bisect.insort(prios, task.priority)
            lane.append(task)
            self._ids[task.id] = task
            self._depth += 1
            self._put_total += 1
            if self._depth > self._high_water:
                self._high_water = self._depth
            if self._waiting:  # a notify with nobody waiting costs as much as a put
                self._not_empty.notify()
            return True

    def _pop_locked(self, queues: Sequence[str] | None) -> Task | None:
        best: deque[Task] | None = None
        best_key: tuple[int, float] | None = None
        names = self._lanes.keys() if queues is None else queues
        for name in names:
            entry = self._lanes.get(name)
            if entry is None:
                continue
            prios, lanes = entry
            for p in reversed(prios):
                lane = lanes[p]
                while lane and self._ids.get(lane[0].id) is not lane[0]:
                    lane.popleft()  # discarded earlier
                if lane:
                    key = (-p, lane[0].due)
                    if best_key is None or key < best_key:
                        best, best_key = lane, key
                    break
        if best is None:
            return None
        task = best.popleft()
        del self._ids[task.id]
        self._depth -= 1
        self._pulled_total += 1
        return task

    def pull_nowait(self, queues: Sequence[str] | None = None) -> Task | None:
        """The next task for a worker serving *queues* (None: all), or None if there is none."""
        with self._lock:
            task = self._pop_locked(queues)
        return self._pulled(task)

    def _pulled(self, task: Task | None) -> Task | None:
        """Call ``on_low`` (outside the lock: the owner refills from the store) when this pull
        brought the depth down to ``low_water``; return *task*."""
        if task is not None and self._depth == self.low_water and self.on_low is not None:
            self.on_low()
        return task

    def pull(
        self,
        queues: Sequence[str] | None = None,
        timeout: float | None = None,
        wait: Callable[[threading.Condition, float | None], None] | None = None,
    ) -> Task | None:
        """Block until a task for *queues* is available, *timeout* passes, or the queue closes.

        *wait* is the clock's wait primitive (so a fake clock's waiters wake on ``advance``); it
        defaults to a real ``Condition.wait``. Returns None on timeout or close.
        """
        with self._lock:
            task = self._pop_locked(queues)
            if task is None and not self._closed:
                self._waiting += 1
                try:
                    if wait is None:
                        self._not_empty.wait(timeout)
                    else:
                        wait(self._not_empty, timeout)
                finally:
                    self._waiting -= 1
                task = self._pop_locked(queues)
        return self._pulled(task)

    def discard(self, task_id: str) -> None:
        """Forget *task_id* if queued (lazy: the entry is skipped when pulled)."""
        with self._lock:
            if self._ids.pop(task_id, None) is not None:
                self._depth -= 1

    def close(self) -> None:
        """Refuse new tasks and wake every waiting worker."""
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()

    def wake_all(self) -> None:
        """Wake every waiting worker (e.g. to let them notice a shutdown)."""
        with self._lock:
            self._not_empty.notify_all()

    def drain(self) -> list[Task]:
        """Remove and return every queued task (highest priority first)."""
        out: list[Task] = []
        with self._lock:
            while (t := self._pop_locked(None)) is not None:
                out.append(t)
        return out

    def statistics(self) -> ReadyStatistics:
        """Counts per lane, depth, totals and the high-water mark."""
        with self._lock:
            by_lane: dict[tuple[str, int], int] = {}
            for t in self._ids.values():
                key = (t.queue, t.priority)
                by_lane[key] = by_lane.get(key, 0) + 1
            return ReadyStatistics(
                depth=self._depth,
                capacity=self.capacity,
                by_lane=by_lane,
                put_total=self._put_total,
                pulled_total=self._pulled_total,
                refused_total=self._refused_total,
                high_water=self._high_water,
            )
