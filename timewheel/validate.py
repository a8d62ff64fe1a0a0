"""Validation of the numbers users pass: durations in seconds and instants.

One home for these checks, so every front end (``Scheduler``, ``DelayQueue``, rules, stores) refuses
the same bad values with the same exception and message:

- a value of the wrong type (a string, a bool, ``None`` where a number is needed) raises
  :class:`~timewheel.errors.InvalidTypeError`, which is both an ``InvalidScheduleError`` and a
  ``TypeError``;
- a number that is not finite, or outside the allowed range, raises
  :class:`~timewheel.errors.InvalidScheduleError` (a ``ValueError``).

Messages name the option, the value and what would be accepted.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from timewheel.errors import InvalidScheduleError, InvalidTypeError

__all__ = ["count", "instant", "seconds", "type_name"]


def type_name(value: object) -> str:
    """The name of *value*'s type, as messages show it."""
    return type(value).__name__


def seconds(
    value: object,
    name: str,
    *,
    minimum: float | None = None,
    above: float | None = None,
    timedelta_ok: bool = True,
) -> float:
    """Return the duration *value* (seconds, or a ``timedelta`` when *timedelta_ok*) as a float.

    Args:
        value: what the user passed.
        name: the option's name, for the message (``"delay"``, ``"timeout"``).
        minimum: the smallest value allowed (inclusive), if any.
        above: a bound the value must be strictly greater than, if any.
        timedelta_ok: whether a ``timedelta`` is accepted.

    Raises:
        InvalidTypeError: *value* is not a number (bools are refused) or ``timedelta``.
        InvalidScheduleError: *value* is NaN, infinite, too large for a float, or out of range.
    """
    if timedelta_ok and isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        accepted = "a number of seconds or a timedelta" if timedelta_ok else "a number of seconds"
        raise InvalidTypeError(
            f"{name} must be {accepted} (got {value!r} that is a {type_name(value)})"
        )
    else:
        try:
            result = float(value)
        except OverflowError:
            assert isinstance(value, int)
            raise InvalidScheduleError(
                f"{name} must be finite (got an integer of {value.bit_length()} bits, too large)"
            ) from None
    if not math.isfinite(result):
        raise InvalidScheduleError(f"{name} must be finite (got {value!r})")
    if minimum is not None and result < minimum:
        raise InvalidScheduleError(f"{name} must be >= {minimum:g} seconds (got {value!r})")
    if above is not None and not result > above:
        raise InvalidScheduleError(f"{name} must be > {above:g} seconds (got {value!r})")
    return result


def instant(value: object, name: str) -> float:
    """Return the instant *value* (epoch seconds, or an aware ``datetime``) as epoch seconds.

    Raises:
        InvalidTypeError: *value* is neither a number nor a ``datetime``.
        InvalidScheduleError: a naive ``datetime`` (its zone would be a guess), or a number that
            is not finite.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidScheduleError(
                f"{name}={value.isoformat()!r} is a naive datetime with no time zone; attach one, "
                "e.g. value.replace(tzinfo=zoneinfo.ZoneInfo('Europe/Berlin')) or "
                "tzinfo=datetime.timezone.utc"
            )
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(
            f"{name} must be an aware datetime or epoch seconds (got {value!r} that is a "
            f"{type_name(value)})"
        )
    return seconds(value, name, timedelta_ok=False)


def count(value: object, name: str, *, minimum: int = 1) -> int:
    """Return *value* as an ``int`` of at least *minimum* (a count: workers, attempts, a limit).

    Raises:
        InvalidTypeError: *value* is not an ``int`` (bools and floats are refused).
        InvalidScheduleError: *value* is below *minimum*.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(
            f"{name} must be an int >= {minimum} (got {value!r} that is a {type_name(value)})"
        )
    if value < minimum:
        raise InvalidScheduleError(f"{name} must be an int >= {minimum} (got {value!r})")
    return value
