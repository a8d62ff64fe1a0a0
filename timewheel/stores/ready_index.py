"""``ReadyIndex``: the memory store's READY tasks in the order workers take them.

``Store.ready(limit=n)`` answers with the first *n* READY tasks, highest priority first and,
within a priority, earliest due first (the oldest waiting work is served first, so none
starves); ties go to the task that became READY first. The trigger asks it each time the ready
queue has room while a backlog waits in the store: with a midnight herd's 100,000 tasks READY, a
scan of every READY task took about 60 ms per refill of 10,000. The index keeps the READY tasks
in that order instead, so a refill costs the tasks it returns.

Lanes by priority, then by queue (``ready(queues=...)`` reads only the lanes it serves; lanes of
one priority are merged by due time and entry number). A lane keeps its distinct due times
sorted, in chunks of at most ``2 * LOAD`` (a sorted list of sorted lists: an insert or removal
moves at most a chunk, and a due time later than the others, the usual case, is appended), and
for each due time its tasks' ids in the order they became READY, in dicts of at most
:data:`GROUP` ids (a herd, 100,000 tasks due at one instant, is a list of 25 dicts, filled one
after the other: no insertion grows a table of 100,000 ids in one go, which costs a CPython dict
several milliseconds). Each task carries an entry number, a global counter, which orders ties
across lanes.

Per READY task: a dict entry (id to entry number) and the entry number's int; a task alone at
its due time is a 2-tuple instead, plus the due time's place in the lane. Not thread-safe: the
owning store's lock guards every call.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence

from timewheel.task import Task

__all__ = ["GROUP", "LOAD", "Lane", "ReadyIndex", "SortedKeys"]

#: half the largest chunk of a lane
LOAD = 512
#: the most ids one dict of a due time's tasks holds (the next ones start a new dict)
GROUP = 4096

Key = float


class SortedKeys:
    """Distinct keys (due times) in sorted order, in chunks of at most ``2 * LOAD`` (a sorted
    list of sorted lists: an insert or removal moves at most a chunk). Runtime complexity:
    :meth:`add` and :meth:`remove` O(log n + LOAD), O(1) for a key later than every other;
    :meth:`first` O(k)."""

    __slots__ = ("_chunks", "_len", "_maxes")

    def __init__(self) -> None:
        self._chunks: list[list[Key]] = []
        self._maxes: list[Key] = []  # the last key of each chunk
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Key]:
        return itertools.chain.from_iterable(self._chunks)

    def add(self, key: Key) -> None:
        """Insert *key* (not already held)."""
        maxes, chunks = self._maxes, self._chunks
        if not maxes:
            chunks.append([key])
            maxes.append(key)
            self._len = 1
            return
        if key > maxes[-1]:  # later than every key held: the usual case
            i = len(maxes) - 1
            chunk = chunks[i]
            chunk.append(key)
            maxes[i] = key
        else:
            i = bisect_left(maxes, key)
            chunk = chunks[i]
            insort(chunk, key)
        self._len += 1
        if len(chunk) > 2 * LOAD:
            chunks.insert(i + 1, chunk[LOAD:])
            del chunk[LOAD:]
            maxes[i] = chunk[-1]
            maxes.insert(i + 1, chunks[i + 1][-1])

    def remove(self, key: Key) -> None:
        """Remove *key*; ``KeyError`` if it is not held."""
        maxes = self._maxes
        i = bisect_left(maxes, key)
        if i == len(maxes):
            raise KeyError(key)
        chunk = self._chunks[i]
        j = bisect_left(chunk, key)
        if chunk[j] != key:
            raise KeyError(key)
        del chunk[j]
        self._len -= 1
        if not chunk:
            del self._chunks[i]
            del maxes[i]
        elif j == len(chunk):
            maxes[i] = chunk[-1]

    def first(self, n: int) -> list[Key]:
        """The *n* smallest keys, in order."""
        out: list[Key] = []
        for chunk in self._chunks:
            room = n - len(out)
            if room <= 0:
                break
            out += chunk[:room] if len(chunk) > room else chunk
        return out

    def smallest(self) -> Key | None:
        """The smallest key, or ``None`` when empty."""
        return self._chunks[0][0] if self._chunks else None

    def check(self) -> None:
        """Raise ``AssertionError`` unless the chunks are sorted and the bookkeeping agrees."""
        keys = list(self)
        assert keys == sorted(keys), "keys out of order"
        assert len(set(keys)) == len(keys), "a key twice"
        assert self._len == len(keys), "count"
        assert all(self._chunks), "an empty chunk"
        assert all(len(c) <= 2 * LOAD for c in self._chunks), "a chunk too large"
        assert self._maxes == [c[-1] for c in self._chunks], "maxes"


#: a due time's READY tasks in a lane: ``(id, entry number)`` for one, else dicts ``{id: entry
#: number}`` of at most :data:`GROUP` ids each, in the order the tasks became READY
Bucket = tuple[str, int] | list[dict[str, int]]


class Lane:
    """The READY tasks of one priority and queue: their distinct due times in order
    (:class:`SortedKeys`), and for each the tasks due then, in the order they became READY.

    A task becoming READY at a due time already held (a herd) is one dict insertion; one at a
    new due time, the usual latest, an append. Each task carries its entry number, which orders
    ties across lanes. Taking a task out of a due time's dicts looks for it from the first one:
    workers take the oldest first, so it is there but for cancellations (at most
    ``tasks / GROUP`` dict lookups)."""

    __slots__ = ("_by_due", "_dues", "size")

    def __init__(self) -> None:
        self._dues = SortedKeys()
        self._by_due: dict[float, Bucket] = {}
        self.size = 0

    def add(self, due: float, task_id: str, entry: int) -> None:
        """Hold *task_id* (not already held) due at *due*, READY as the *entry*-th."""
        by_due = self._by_due
        bucket = by_due.get(due)
        if bucket is None:
            by_due[due] = (task_id, entry)
            self._dues.add(due)
        else:
            if isinstance(bucket, tuple):
                bucket = by_due[due] = [{bucket[0]: bucket[1]}]
            _append(bucket, task_id, entry)
        self.size += 1

    def remove(self, due: float, task_id: str) -> None:
        """Drop *task_id*, held at *due* (``KeyError`` if it is not)."""
        by_due = self._by_due
        bucket = by_due[due]
        if isinstance(bucket, tuple):
            if bucket[0] != task_id:
                raise KeyError(task_id)
            del by_due[due]
            self._dues.remove(due)
        else:
            for k, group in enumerate(bucket):
                if task_id in group:
                    del group[task_id]
                    if not group:
                        del bucket[k]
                    break
            else:
                raise KeyError(task_id)
            if not bucket:
                del by_due[due]
                self._dues.remove(due)
        self.size -= 1

    def first(self, n: int) -> list[str]:
        """The ids of the first *n* tasks, in order."""
        out: list[str] = []
        by_due = self._by_due
        for due in self._dues:
            room = n - len(out)
            if room <= 0:
                break
            bucket = by_due[due]
            if isinstance(bucket, tuple):
                out.append(bucket[0])
                continue
            for group in bucket:
                if len(group) <= room:
                    out += group
                    room -= len(group)
                else:
                    out += itertools.islice(group, room)
                    break
        return out

    def entries(self) -> Iterator[tuple[float, int, str]]:
        """``(due, entry number, id)`` of every task, in order (for a merge across lanes)."""
        by_due = self._by_due
        for due in self._dues:
            bucket = by_due[due]
            if isinstance(bucket, tuple):
                yield due, bucket[1], bucket[0]
            else:
                for group in bucket:
                    for task_id, entry in group.items():
                        yield due, entry, task_id

    def earliest(self) -> float | None:
        """The earliest due time held, or ``None``."""
        return self._dues.smallest()

    def check(self) -> None:
        """Raise ``AssertionError`` unless the bookkeeping agrees (tests)."""
        self._dues.check()
        assert sorted(self._by_due) == list(self._dues), "due times"
        held = list(self.entries())
        assert self.size == len(held), "count"
        assert len({i for _, _, i in held}) == len(held), "an id twice"
        for bucket in self._by_due.values():
            assert bucket, "an empty due time"
            if not isinstance(bucket, tuple):
                assert all(bucket), "an empty group"
                assert all(len(group) <= GROUP for group in bucket), "a group too large"
                entries = [entry for group in bucket for entry in group.values()]
                assert entries == sorted(entries), "entry order"


def _append(bucket: list[dict[str, int]], task_id: str, entry: int) -> None:
    """Add *task_id* to the last dict of a due time's tasks, or a new one when it is full."""
    last = bucket[-1]
    if len(last) < GROUP:
        last[task_id] = entry
    else:
        bucket.append({task_id: entry})


class ReadyIndex:
    """READY tasks by priority (highest first), then due time, then the order they became READY.

    Lanes by priority and queue (see the module docstring). The owning store calls :meth:`add`
    when a task enters READY and :meth:`discard` with the same snapshot when it leaves (or
    changes while READY: discard the old, add the new).
    """

    __slots__ = ("_entries", "_lanes", "_order")

    def __init__(self) -> None:
        self._lanes: dict[int, dict[str, Lane]] = {}
        self._order: list[int] = []  # the priorities held, highest first
        self._entries = itertools.count()

    def __len__(self) -> int:
        return sum(lane.size for lanes in self._lanes.values() for lane in lanes.values())

    def add(self, task: Task) -> None:
        """Index a READY task."""
        lanes = self._lanes.get(task.priority)
        if lanes is None:
            lanes = self._lanes[task.priority] = {}
            self._order = sorted(self._lanes, reverse=True)
        lane = lanes.get(task.queue)
        if lane is None:
            lane = lanes[task.queue] = Lane()
        bucket = lane._by_due.get(task.due)
        if bucket.__class__ is list:  # a due time with tasks already (a herd): one insertion
            last = bucket[-1]
            if len(last) < GROUP:
                last[task.id] = next(self._entries)
            else:
                bucket.append({task.id: next(self._entries)})
            lane.size += 1
        else:
            lane.add(task.due, task.id, next(self._entries))

    def discard(self, task: Task) -> None:
        """Take a task out, given the snapshot it was indexed with (``KeyError`` if it was not)."""
        lanes = self._lanes[task.priority]
        lane = lanes[task.queue]
        lane.remove(task.due, task.id)
        if not lane.size:
            del lanes[task.queue]
            if not lanes:
                del self._lanes[task.priority]
                self._order = sorted(self._lanes, reverse=True)

    def first(self, limit: int, queues: Iterable[str] | None = None) -> list[str]:
        """The ids of the first *limit* READY tasks (of *queues*, or all): highest priority
        first, then earliest due, then the first to become READY."""
        out: list[str] = []
        served: Sequence[str] | None = None if queues is None else list(dict.fromkeys(queues))
        for priority in self._order:
            room = limit - len(out)
            if room <= 0:
                break
            lanes = self._lanes[priority]
            chosen = (
                list(lanes.values()) if served is None else [lanes[q] for q in served if q in lanes]
            )
            if len(chosen) == 1:
                out += chosen[0].first(room)
            elif chosen:
                merged = heapq.merge(*(lane.entries() for lane in chosen))
                out += [entry[2] for entry in itertools.islice(merged, room)]
        return out

    def oldest_due(self) -> float | None:
        """The earliest due time among the READY tasks, or ``None``."""
        heads = [
            due
            for lanes in self._lanes.values()
            for lane in lanes.values()
            if (due := lane.earliest()) is not None
        ]
        return min(heads, default=None)

    def check(self) -> None:
        """Raise ``AssertionError`` unless every lane is consistent (tests)."""
        assert self._order == sorted(self._lanes, reverse=True), "priority order"
        for lanes in self._lanes.values():
            assert lanes, "an empty priority"
            for lane in lanes.values():
                assert lane.size, "an empty lane"
                lane.check()
