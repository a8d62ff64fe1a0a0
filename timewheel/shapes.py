"""What a recurring schedule's options make, worked out and checked once per distinct option set.

A herd is thousands of ``schedule(f, cron="0 0 * * *", id=...)`` calls that differ in the id (and
perhaps the arguments) alone. All that the other options decide, the rule, the options record,
the instance template, the conflict policy, is a :class:`SeriesShape`. The first call with a
given set of options builds it through the full path of ``schedule()``, which checks every value;
:class:`Shapes` keeps it under those options (:func:`series_key`: each value with its type, so
``priority=True`` never passes for ``priority=1``), and later calls with the same options reuse
it and check only what is theirs: the function and its arguments, ``kwargs=`` and the id. A call
whose options were never seen, or hold a value that cannot be hashed, takes the full path and
reports any bad value there; only a shape whose checks all passed is kept.

A shape does not depend on the time of the call, except an ``every=`` schedule without
``start=``, which is anchored at its creation: such a shape is never kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from timewheel.rules import Rule
from timewheel.stores.base import OnConflict
from timewheel.task import Retry, Task

__all__ = ["Series", "SeriesShape", "Shapes", "series_key"]

#: the names of ``schedule()`` options that belong to one call, never to a shape
_PER_CALL = frozenset({"id", "kwargs"})


@dataclass(frozen=True, slots=True)
class SeriesShape:
    """What a recurring schedule's options (all but ``id=`` and ``kwargs=``) make, checked.

    Attributes:
        rule, spec: the shared rule and its spec (what the schedule record stores).
        options: the record's options, a read-only mapping shared by every schedule with them.
        retry, priority, queue, timeout: what each instance carries.
        on_conflict: the policy when the schedule id exists.
        reusable: False when the shape depends on the time of the call (an ``every=`` schedule
            anchored at its creation): it is used once, never kept.
    """

    rule: Rule
    spec: Mapping[str, Any]
    options: Mapping[str, Any]
    retry: Retry
    priority: int
    queue: str
    timeout: float | None
    on_conflict: str
    reusable: bool


@dataclass(slots=True)  # not frozen: one per schedule() call, built without object.__setattr__
class Series:
    """A prepared recurring schedule: what ``Recurring.create`` takes (``options.prepare`` and
    ``options.known_series`` make it). Either *shape* is known (a call with the same options
    was checked before) or it is built from *template* and the rest (then kept under *key*)."""

    func: Callable[..., Any] | str
    ref: Callable[..., Any] | str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    now: float
    schedule_id: str | None
    shape: SeriesShape | None = None
    key: tuple[Any, ...] | None = None
    template: Task | None = None
    cron: str | None = None
    every: float | timedelta | None = None
    on_conflict: OnConflict = "replace"
    options: dict[str, Any] | None = None


def series_key(
    func: Callable[..., Any] | str, options: Mapping[str, Any]
) -> tuple[Any, ...] | None:
    """The key of the shape a ``schedule(func, ..., **options)`` call makes: the function and
    every option but ``id=`` and ``kwargs=``, each value with its type. ``None`` when the call
    is not recurring (no ``cron=`` or ``every=``). The key may hold an unhashable value:
    :meth:`Shapes.get` then raises ``TypeError``."""
    if len(options) == 2 and "id" in options:  # the usual herd member: cron= and id= alone
        cron = options.get("cron")
        if cron.__class__ is str:
            return (func, cron)  # two items: no other key is that short
    if "cron" not in options and "every" not in options:
        return None
    key: list[Any] = [func]
    for name, value in options.items():
        if name not in _PER_CALL:
            key += (name, value, value.__class__)
    return tuple(key)


class Shapes(dict[tuple[Any, ...], SeriesShape]):
    """Shapes by :func:`series_key` (read with ``get``, which raises ``TypeError`` for a key
    that cannot be hashed), at most *size* of them (cleared when full: a burst of distinct
    option sets starts over rather than tracking age). Thread-safe: a read is one dict lookup,
    without a lock; :meth:`keep` writes under one."""

    __slots__ = ("_lock", "size")

    def __init__(self, size: int = 1_024) -> None:
        super().__init__()
        self.size = size
        self._lock = threading.Lock()

    def keep(self, key: tuple[Any, ...], shape: SeriesShape) -> None:
        """Keep *shape* under *key* (nothing when it cannot be hashed or is not reusable)."""
        if not shape.reusable:
            return
        try:
            hash(key)
        except TypeError:
            return
        with self._lock:
            if len(self) >= self.size:
                self.clear()
            self[key] = shape
