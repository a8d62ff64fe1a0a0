"""The timing wheel's times as arguments: checking them, naming a bad one, look-ahead bucket
widths, splitting a batch at slot boundaries; and :class:`WheelStatistics`, the wheel's snapshot (re-exported by
:mod:`timewheel.wheel`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import gt, mul, not_
from typing import Any

__all__ = ["WheelStatistics", "as_time", "bad_time", "bucket_width", "split_at_ticks"]

_BUCKETS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class WheelStatistics:
    """A snapshot of a :class:`TimingWheel` (from :meth:`TimingWheel.statistics`).

    ``levels`` counts the entries per level, lowest first: sub-second, seconds, minutes, hours,
    days (``level_names`` names them). ``overflow`` counts those beyond the last level.
    ``cascaded`` is the total number of single-level moves ever made (each entry moves at most
    once per level), ``fired`` the total number of keys returned by ``advance``, ``advances`` the
    number of ``advance`` calls.
    """

    pending: int
    levels: tuple[int, ...]
    level_names: tuple[str, ...]
    overflow: int
    cascaded: int
    fired: int
    advances: int


def bad_time(name: str, value: object) -> Exception:
    """The error for *value*, given as the time *name*: ``TypeError`` when it is no number,
    ``ValueError`` when it is NaN or infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            float(value)  # type: ignore[arg-type]  # probing: Decimal/Fraction/numpy are numbers
            numeric = not isinstance(value, (bool, str, bytes))
        except (TypeError, ValueError):
            numeric = False
        if not numeric:
            return TypeError(
                f"{name} must be a number of seconds (int or float), "
                f"got {value!r} of type {type(value).__name__}"
            )
    return ValueError(f"{name} must be a finite number of seconds, got {value!r}")


def bucket_width(bucket: float | str) -> float:
    """Seconds in a look-ahead bucket: a positive width, or ``"second"``, ``"minute"``, ``"hour"``.

    Raises ``ValueError`` (``TypeError`` for a non-number) naming the value.
    """
    if isinstance(bucket, str):
        if bucket not in _BUCKETS:
            raise ValueError(
                f"bucket must be a width in seconds or one of {sorted(_BUCKETS)}, got {bucket!r}"
            )
        return _BUCKETS[bucket]
    width = as_time("bucket", bucket)
    if width <= 0:
        raise ValueError(f"bucket must be a positive width in seconds, got {bucket!r}")
    return width


def as_time(name: str, value: object) -> float:
    """Return ``value`` as a finite float, or raise TypeError/ValueError naming it."""
    if value.__class__ is not float:
        if isinstance(value, (bool, str, bytes)):
            raise bad_time(name, value)
        try:
            value = float(value)  # type: ignore[arg-type]  # checked by the except clause
        except (TypeError, ValueError):
            raise bad_time(name, value) from None
    assert isinstance(value, float)
    if value - value != 0.0:  # NaN or +-inf
        raise bad_time(name, value)
    return value


def split_at_ticks(
    dues: Sequence[float], ticks_per_second: int, ends: Sequence[int], *columns: Sequence[Any]
) -> list[tuple[Sequence[Any], ...]]:
    """``(dues, *columns)`` of a batch (*columns* in step with *dues*) split before each tick of
    *ends* (ascending ticks, each below 2**53 so that it compares exactly as a float), in the
    batch's order within each part; the empty parts left out. A due time's tick is
    ``floor(due * ticks_per_second)``, as the wheel computes it. Runtime: a pass in C over what
    is left of the batch per column and tick of *ends*."""
    parts: list[tuple[Sequence[Any], ...]] = []
    rest: tuple[Sequence[Any], ...] = (dues, *columns)
    # operator functions with repeat(), not a float's bound __mul__ and __gt__: those method
    # wrappers build an argument tuple per call (a third of each pass: bench_batch.py --memory)
    scaled = list(map(mul, dues, repeat(float(ticks_per_second))))
    for end in ends:
        before = list(map(gt, repeat(float(end)), scaled))
        after = list(map(not_, before))
        if any(before):
            parts.append(tuple(list(compress(column, before)) for column in rest))
        rest = tuple(list(compress(column, after)) for column in rest)
        scaled = list(compress(scaled, after))
    if rest[0]:
        parts.append(rest)
    return parts
