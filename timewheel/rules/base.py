"""What every recurrence rule shares: the :class:`Rule` protocol, the checks of the values a
rule is built from (seconds, instants, jitter, a start/end window, a zone), and how a rule
writes an instant in its description."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone
from typing import Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from timewheel.errors import InvalidScheduleError

__all__ = [
    "UTC",
    "Rule",
    "check_window",
    "finite_seconds",
    "jitter_seconds",
    "optional_instant",
    "parse_every",
    "resolve_zone",
    "type_name",
    "utc_text",
]

UTC = timezone.utc
"""``datetime.timezone.utc``, the zone instants are written in."""


@runtime_checkable
class Rule(Protocol):
    """**Protocol:** a recurrence rule: where the slots of a recurring schedule fall.

    Implementations must be thread-safe, and for any chain ``s1 = next_after(t)``,
    ``s2 = next_after(s1)``, ... the values must be strictly increasing.
    """

    def next_after(self, t: float) -> float | None:
        """Return the first slot strictly after ``t`` (UTC epoch seconds); None when exhausted."""
        ...

    def jittered(self, slot: float, rng: random.Random) -> float:
        """Return the instant a run for ``slot`` should actually start (``slot`` plus jitter)."""
        ...

    def describe(self) -> str:
        """Return a one-line human description of the rule."""
        ...

    def to_spec(self) -> dict[str, object]:
        """Return a JSON-serialisable dict that :func:`rule_from_spec` turns back into the rule."""
        ...


def type_name(value: object) -> str:
    """The name of *value*'s type, for messages."""
    return type(value).__name__


def finite_seconds(name: str, value: object) -> float:
    """Return ``value`` as a float, refusing bools, non-numbers, NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidScheduleError(
            f"{name} must be a number of seconds (got {value!r} that is a {type_name(value)})"
        )
    result = float(value)
    if not math.isfinite(result):
        raise InvalidScheduleError(f"{name} must be a finite number of seconds (got {value!r})")
    return result


def optional_instant(name: str, value: object) -> float | None:
    """Validate an optional UTC instant (epoch seconds or an aware ``datetime``)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidScheduleError(
                f"{name} must be an aware datetime or epoch seconds (got naive {value!r}); "
                "attach a zone, e.g. value.replace(tzinfo=ZoneInfo('UTC'))"
            )
        return value.timestamp()
    return finite_seconds(name, value)


def jitter_seconds(value: object) -> float:
    """Return a jitter in seconds, refusing a negative or non-finite one."""
    jitter = finite_seconds("jitter", value)
    if jitter < 0:
        raise InvalidScheduleError(f"jitter must be >= 0 seconds (got {value!r})")
    return jitter


def check_window(start: float | None, end: float | None) -> None:
    """Refuse a ``start``/``end`` window that is empty (``end`` is exclusive)."""
    if start is not None and end is not None and not start < end:
        raise InvalidScheduleError(
            f"start must be before end (got start={start!r}, end={end!r}); "
            "end is exclusive, so start == end would never fire"
        )


def utc_text(t: float) -> str:
    """Instant *t* as ISO 8601 UTC text (``...Z``), or its ``repr`` when out of range."""
    try:
        return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return repr(t)


def parse_every(value: object) -> float:
    """Return an interval in seconds from a ``timedelta`` or a number of seconds.

    Raises :class:`~timewheel.errors.InvalidScheduleError` unless the interval is finite and > 0.
    """
    seconds = (
        value.total_seconds() if isinstance(value, timedelta) else finite_seconds("every", value)
    )
    if not seconds > 0 or not math.isfinite(seconds):
        raise InvalidScheduleError(
            f"every must be a positive interval (got {value!r}); pass seconds > 0 or a timedelta"
        )
    return seconds


def resolve_zone(tz: object) -> ZoneInfo:
    """Return the :class:`~zoneinfo.ZoneInfo` for ``tz``: a zone name, a ``ZoneInfo`` or None (UTC).

    ``datetime.timezone.utc`` is accepted as UTC. Other fixed offsets and third-party tzinfo
    objects are refused: a fixed offset taken from ``datetime.now().astimezone()`` stays on
    standard time all summer, and a rule must be persistable by zone name.
    """
    if tz is None or tz is UTC:
        return ZoneInfo("UTC")
    if isinstance(tz, ZoneInfo):
        if tz.key is None:
            raise InvalidScheduleError(
                f"time zone {tz!r} has no key (built with ZoneInfo.from_file?) and cannot be "
                "persisted; pass a zone name such as 'Europe/Berlin'"
            )
        return tz
    if isinstance(tz, str):
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
            raise InvalidScheduleError(
                f"unknown time zone {tz!r}: use an IANA name such as 'Europe/Berlin', "
                "'America/New_York' or 'UTC' (is the tzdata package installed?)"
            ) from exc
    raise InvalidScheduleError(
        f"time zone must be an IANA zone name, a zoneinfo.ZoneInfo or None for UTC (got {tz!r} "
        f"that is a {type_name(tz)}); fixed offsets ignore daylight saving time"
    )
