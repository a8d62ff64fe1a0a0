"""``CompactRecords``: fresh pending tasks kept as small tuples until their first change.

A task scheduled with nothing but a function, arguments and a due time is, until it changes, fully
described by four values. :class:`~timewheel.stores.memory.MemoryStore` keeps such a task here as
a tuple ``(due, created, function number[, args])``, about a third of a :class:`Task` snapshot,
and builds the ordinary snapshot on the fly when it is read. The first change (promotion,
cancellation, replacement) takes the record out and stores the task in full.

The function is named by a number, ``id(func)``, in a table of the functions in use; each entry
holds the function and counts the records that name it, and leaves the table with the last of
them. A record without arguments then holds only floats and an int, objects the cyclic garbage
collector does not track: it drops the record from its lists at its first pass instead of
traversing every waiting task in each full collection. All records naming a function share one
int object for its number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, KeysView
from typing import Any

from timewheel.stores.policy import task_exists
from timewheel.task import Task, TaskState

__all__ = ["CompactRecords"]

_PENDING = TaskState.PENDING


class CompactRecords:
    """Fresh PENDING tasks with default options, by id, each held as a small tuple.

    What a record stands for is ``Task(id=task_id, func=func, args=args, due=due, created=created,
    updated=created)``, PENDING at version 0. Runtime complexity: :meth:`add`, :meth:`get`,
    :meth:`created`, :meth:`pop` and :meth:`discard` are O(1); the queries scan every record.

    Not thread-safe: the owning store's lock guards every call.
    """

    __slots__ = ("_functions", "_records")

    def __init__(self) -> None:
        # task id -> (due, created, function number) or (due, created, function number, args)
        self._records: dict[str, tuple[Any, ...]] = {}
        # function number -> [function, records naming it, the number as the records' shared int]
        self._functions: dict[int, list[Any]] = {}

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
        self._records[task_id] = (due, now, number, args) if args else (due, now, number)

    def get(self, task_id: str) -> Task | None:
        """The task a record stands for, built on the fly (the record stays), or ``None``."""
        rec = self._records.get(task_id)
        if rec is None:
            return None
        return self._expand(task_id, rec, _PENDING, 0, rec[1])

    def created(self, task_id: str) -> float | None:
        """The creation time of *task_id*'s record, or ``None`` when there is none."""
        rec = self._records.get(task_id)
        return None if rec is None else rec[1]

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
        if rec is None or (due_by is not None and rec[0] > due_by):
            return None
        del self._records[task_id]
        task = self._expand(task_id, rec, state, version, rec[1] if updated is None else updated)
        self._release(rec)
        return task

    def discard(self, task_id: str) -> bool:
        """Drop the record of *task_id*; True if there was one."""
        rec = self._records.pop(task_id, None)
        if rec is None:
            return False
        self._release(rec)
        return True

    # -- queries -----------------------------------------------------------------------------------
    def due_before(self, until: float) -> list[tuple[float, str]]:
        """``(due, id)`` of the records due before *until*, unordered."""
        return [(rec[0], i) for i, rec in self._records.items() if rec[0] < until]

    def dues(self) -> list[float]:
        """Every record's due time, unordered."""
        return [rec[0] for rec in self._records.values()]

    def with_functions(
        self, keep: Callable[[Callable[..., Any]], bool]
    ) -> list[tuple[Callable[..., Any], str]]:
        """``(function, id)`` of the records whose function passes *keep* (called once per
        function in use), unordered."""
        kept = {number for number, use in self._functions.items() if keep(use[0])}
        if not kept:
            return []
        functions = self._functions
        return [(functions[rec[2]][0], i) for i, rec in self._records.items() if rec[2] in kept]

    def tasks(self) -> list[Task]:
        """Every record's task, built on the fly, unordered."""
        expand = self._expand
        return [expand(i, rec, _PENDING, 0, rec[1]) for i, rec in self._records.items()]

    # -- internals ---------------------------------------------------------------------------------
    def _expand(
        self, task_id: str, rec: tuple[Any, ...], state: TaskState, version: int, updated: float
    ) -> Task:
        return Task(
            id=task_id,
            func=self._functions[rec[2]][0],
            args=rec[3] if len(rec) > 3 else (),
            due=rec[0],
            state=state,
            version=version,
            created=rec[1],
            updated=updated,
        )

    def _release(self, rec: tuple[Any, ...]) -> None:
        """A record left: its function leaves the table with its last record."""
        number = rec[2]
        use = self._functions[number]
        if use[1] == 1:
            del self._functions[number]
        else:
            use[1] -= 1

    def _check(self) -> None:
        """Assert the invariants: each function's count is the number of records naming it, and
        every record names its function by the function table's shared int."""
        uses: dict[int, int] = {}
        for rec in self._records.values():
            assert rec[2] in self._functions, f"a record names an unknown function {rec[2]}"
            assert rec[2] is self._functions[rec[2]][2], "a record does not share the number"
            uses[rec[2]] = uses.get(rec[2], 0) + 1
        assert {n: use[1] for n, use in self._functions.items()} == uses, "use counts are off"
        for number, (func, _, shared) in self._functions.items():
            assert id(func) == number == shared, f"function table entry {number} is inconsistent"
