"""``CompactRecords``: fresh pending tasks kept as small tuples until their first change.

A task scheduled with nothing but a function, arguments and a due time is, until it changes, fully
described by four values. :class:`~timewheel.stores.memory.MemoryStore` keeps such a task here as
a small record, about a fifth of a :class:`Task` snapshot, and builds the ordinary snapshot on the
fly when it is read. The first change (promotion, cancellation, replacement) takes the record out
and stores the task in full.

The function is named by a number, ``id(func)``, in a table of the functions in use; each entry
holds the function and counts the records that name it, and leaves the table with the last of
them. A record without arguments is then three machine numbers, the due and creation times as
doubles and the function number, packed into one 24-byte ``bytes`` value (:data:`RECORD`): one
object per task instead of a tuple and two floats (57 bytes instead of 112 as tracemalloc
counts them; the due time's float object lives on in the trigger's wheel, which shares the one
the caller passed). ``bytes`` are never tracked by the cyclic garbage collector, so no full
collection traverses the waiting tasks. A record with arguments is a tuple
``(due, created, function number, args)``; those name the function by the one int object the
table keeps for it.

A batch of one function (:meth:`CompactRecords.add_many`) keeps its due times and arguments as
two lists (copies of the batch's columns), and each task's record is an int naming the batch and
a position in it (:data:`BATCH_SHIFT`): no tuple or bytes object is made per task, and ints are
not tracked by the collector either, so inserting a batch sets off no collection (a tuple per
task did, and a collection of the young generations traverses each one; the full collection
they bring on in turn traverses the whole heap: benchmarks/bench_batch.py --memory). A task
holds 48 bytes (the int and two list slots) where a tuple record took 72. A position whose task
has left holds ``None``, and the two lists go with the batch's last task: until then a task
that left still costs its 16 bytes of list slots.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, KeysView, Sequence
from typing import Any

from timewheel.stores.policy import task_exists
from timewheel.task import Task, TaskState

__all__ = ["BATCH_SHIFT", "RECORD", "CompactRecords", "fields"]

_PENDING = TaskState.PENDING

RECORD = struct.Struct("=ddQ")
"""The packed form of a record without arguments: due, created (doubles), function number."""
_pack = RECORD.pack
_unpack = RECORD.unpack

#: An int record is ``batch number << BATCH_SHIFT | position``.
BATCH_SHIFT = 32
_POSITION = (1 << BATCH_SHIFT) - 1
# the parts of a batch (a list): its due times, its arguments (None: no task has any), the
# creation time, the function number, the number of its tasks still held
_DUES, _ARGS, _CREATED, _NUMBER, _LIVE = range(5)


class CompactRecords:
    """Fresh PENDING tasks with default options, by id, each held as a small record.

    What a record stands for is ``Task(id=task_id, func=func, args=args, due=due, created=created,
    updated=created)``, PENDING at version 0. Runtime complexity: :meth:`add`, :meth:`get`,
    :meth:`created`, :meth:`pop` and :meth:`discard` are O(1); the queries scan every record.

    Not thread-safe: the owning store's lock guards every call.
    """

    __slots__ = ("_batches", "_functions", "_next_batch", "_records")

    def __init__(self) -> None:
        # task id -> RECORD-packed bytes, (due, created, function number, args), or an int
        # naming a batch and a position in it
        self._records: dict[str, bytes | tuple[Any, ...] | int] = {}
        # function number -> [function, records naming it, the number as the records' shared int]
        self._functions: dict[int, list[Any]] = {}
        # batch number -> [dues, args or None, created, function number, tasks still held]
        self._batches: dict[int, list[Any]] = {}
        self._next_batch = 0

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._records

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def keys(self) -> KeysView[str]:
        """The ids of the records."""
        return self._records.keys()

    def add(
        self, task_id: str, func: Callable[..., Any], args: tuple[Any, ...], due: float, now: float
    ) -> None:
        """Keep the fresh task *task_id* (the caller checks that no full task has the id).

        Raises:
            DuplicateKeyError: a record with this id exists.
        """
        if task_id in self._records:
            raise task_exists(task_id)
        number = id(func)
        use = self._functions.get(number)
        if use is None:
            self._functions[number] = [func, 1, number]
        else:
            use[1] += 1
            number = use[2]  # one shared int object, not a new one per record
        self._records[task_id] = (due, now, number, args) if args else _pack(due, now, number)

    def add_many(
        self,
        ids: Sequence[str],
        funcs: Sequence[Callable[..., Any] | str],
        args: Sequence[tuple[Any, ...]],
        dues: Sequence[float],
        now: float,
    ) -> None:
        """:meth:`add` for a batch of fresh tasks with new, distinct ids, all or none. A batch of
        one function is kept as one batch of int records (see the module docstring).

        Raises:
            DuplicateKeyError: a record with one of the ids exists (nothing is added).
        """
        records = self._records
        if not records.keys().isdisjoint(ids):
            raise task_exists(next(i for i in ids if i in records))
        n = len(ids)
        if n and funcs.count(funcs[0]) == n and n <= _POSITION:
            number = self._use(funcs[0], n)
            self._next_batch += 1
            start = self._next_batch << BATCH_SHIFT
            # copies: the caller's lists may be read while the store empties these
            batch_args = list(args) if any(args) else None
            self._batches[self._next_batch] = [list(dues), batch_args, now, number, n]
            records.update(zip(ids, range(start, start + n), strict=True))
            return
        for task_id, func, a, due in zip(ids, funcs, args, dues, strict=True):
            number = self._use(func, 1)
            records[task_id] = (due, now, number, a) if a else _pack(due, now, number)

    def _use(self, func: Callable[..., Any] | str, records: int) -> int:
        """Count *records* more records naming *func*; its number (the table's shared int)."""
        number = id(func)
        use = self._functions.get(number)
        if use is None:
            self._functions[number] = [func, records, number]
            return number
        use[1] += records
        shared: int = use[2]
        return shared

    def get(self, task_id: str) -> Task | None:
        """The task a record stands for, built on the fly (the record stays), or ``None``."""
        rec = self._records.get(task_id)
        if rec is None:
            return None
        return self._expand(task_id, self._fields(rec), _PENDING, 0, None)

    def created(self, task_id: str) -> float | None:
        """The creation time of *task_id*'s record, or ``None`` when there is none."""
        rec = self._records.get(task_id)
        return None if rec is None else self._fields(rec)[1]

    def pop(
        self,
        task_id: str,
        state: TaskState = _PENDING,
        version: int = 0,
        updated: float | None = None,
        *,
        due_by: float | None = None,
    ) -> Task | None:
        """Take the record out and return its task in full, with *state*, *version* and
        *updated* as given (``updated`` defaults to the creation time).

        ``None`` when there is no record, or (with *due_by*) when it is due later than *due_by*,
        in which case the record stays.
        """
        rec = self._records.get(task_id)
        if rec is None:
            return None
        values = self._fields(rec)
        if due_by is not None and values[0] > due_by:
            return None
        del self._records[task_id]
        task = self._expand(task_id, values, state, version, updated)
        self._forget(rec, values[2])
        return task

    def discard(self, task_id: str) -> bool:
        """Drop the record of *task_id*; True if there was one."""
        rec = self._records.pop(task_id, None)
        if rec is None:
            return False
        self._forget(rec, self._fields(rec)[2])
        return True

    # -- queries -----------------------------------------------------------------------------------
    def due_before(self, until: float) -> list[tuple[float, str]]:
        """``(due, id)`` of the records due before *until*, unordered."""
        hits = []
        fields_of = self._fields
        for i, rec in self._records.items():
            due = fields_of(rec)[0]
            if due < until:
                hits.append((due, i))
        return hits

    def dues(self) -> list[float]:
        """Every record's due time, unordered."""
        fields_of = self._fields
        return [fields_of(rec)[0] for rec in self._records.values()]

    def with_functions(
        self, keep: Callable[[Callable[..., Any]], bool]
    ) -> list[tuple[Callable[..., Any], str]]:
        """``(function, id)`` of the records whose function passes *keep* (called once per
        function in use), unordered."""
        kept = {number for number, use in self._functions.items() if keep(use[0])}
        if not kept:
            return []
        functions, fields_of = self._functions, self._fields
        hits = []
        for i, rec in self._records.items():
            number = fields_of(rec)[2]
            if number in kept:
                hits.append((functions[number][0], i))
        return hits

    def tasks(self) -> list[Task]:
        """Every record's task, built on the fly, unordered."""
        expand, fields_of = self._expand, self._fields
        return [expand(i, fields_of(rec), _PENDING, 0, None) for i, rec in self._records.items()]

    # -- internals ---------------------------------------------------------------------------------
    def _expand(
        self,
        task_id: str,
        values: tuple[Any, ...],
        state: TaskState,
        version: int,
        updated: float | None,
    ) -> Task:
        due, created, number, args = values
        return Task(
            id=task_id,
            func=self._functions[number][0],
            args=args,
            due=due,
            state=state,
            version=version,
            created=created,
            updated=created if updated is None else updated,
        )

    def _fields(self, record: bytes | tuple[Any, ...] | int) -> tuple[Any, ...]:
        """A record's ``(due, created, function number, args)``, whatever its form."""
        if record.__class__ is not int:
            return fields(record)  # type: ignore[arg-type]  # bytes or a tuple
        batch = self._batches[record >> BATCH_SHIFT]
        position = record & _POSITION
        args = batch[_ARGS]
        return (
            batch[_DUES][position],
            batch[_CREATED],
            batch[_NUMBER],
            () if args is None else args[position],
        )

    def _forget(self, record: bytes | tuple[Any, ...] | int, number: int) -> None:
        """A record that named function *number* was taken out: let its function go with its
        last record and, for an int record, its batch position (and the batch with its last)."""
        if record.__class__ is int:
            key = record >> BATCH_SHIFT
            batch = self._batches[key]
            if batch[_LIVE] == 1:
                del self._batches[key]
            else:
                batch[_LIVE] -= 1
                position = record & _POSITION
                batch[_DUES][position] = None
                if batch[_ARGS] is not None:
                    batch[_ARGS][position] = None
        self._release(number)

    def _release(self, number: int) -> None:
        """A record naming function *number* left: the function leaves the table with its last
        record."""
        use = self._functions[number]
        if use[1] == 1:
            del self._functions[number]
        else:
            use[1] -= 1

    def _check(self) -> None:
        """Assert the invariants: each function's count is the number of records naming it; a
        record without arguments is packed, one with arguments names its function by the function
        table's shared int."""
        uses: dict[int, int] = {}
        held: dict[int, int] = {}  # batch number -> its int records
        for rec in self._records.values():
            number = self._fields(rec)[2]
            assert number in self._functions, f"a record names an unknown function {number}"
            if isinstance(rec, int):
                batch = self._batches[rec >> BATCH_SHIFT]
                assert number is batch[_NUMBER] is self._functions[number][2], "a batch's number"
                assert batch[_DUES][rec & _POSITION] is not None, "a record at a freed position"
                held[rec >> BATCH_SHIFT] = held.get(rec >> BATCH_SHIFT, 0) + 1
            elif isinstance(rec, tuple):
                assert len(rec) == 4, f"a tuple record has {len(rec)} fields"
                assert rec[3], "a tuple record has no arguments"
                assert number is self._functions[number][2], "a record does not share the number"
            else:
                assert len(rec) == RECORD.size, f"a packed record has {len(rec)} bytes"
            uses[number] = uses.get(number, 0) + 1
        assert held == {k: b[_LIVE] for k, b in self._batches.items()}, "batch counts are off"
        assert {n: use[1] for n, use in self._functions.items()} == uses, "use counts are off"
        for number, (func, _, shared) in self._functions.items():
            assert id(func) == number == shared, f"function table entry {number} is inconsistent"


def fields(record: bytes | tuple[Any, ...]) -> tuple[Any, ...]:
    """A packed or tuple record's ``(due, created, function number, args)`` (an int record is
    read through its :class:`CompactRecords`, which holds its batch)."""
    if record.__class__ is bytes:
        return (*_unpack(record), ())
    return record  # type: ignore[return-value]  # a tuple record (mypy cannot narrow __class__)
