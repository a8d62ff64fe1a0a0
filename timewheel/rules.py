"""Recurrence rules: cron expressions in a time zone, fixed intervals, misfire and overlap policies.

A recurring schedule stores its **rule**, never its future instances. The scheduler asks the rule
for the first fire instant strictly after the previous scheduled slot (:meth:`Rule.next_after`);
instants are floats of UTC seconds since the Unix epoch, and the instants a rule returns for a
chain of calls are strictly increasing. This module owns rules, never timers: it reads no clock
and imports nothing of the package but :mod:`timewheel.errors` and its cron expression parser,
:mod:`timewheel._cronexpr`.

Cron (:class:`CronRule`)
    Five fields ``minute hour day-of-month month day-of-week``, or six with the **seconds field
    last** (``minute hour day-of-month month day-of-week second``, croniter's order), or one of the
    aliases ``@yearly @annually @monthly @weekly @daily @midnight @hourly``. The expression is
    evaluated on the wall clock of a :mod:`zoneinfo` zone (default UTC) by croniter, which does
    the calendar arithmetic on naive local times; this module maps those local times to UTC
    itself, following Vixie cron across DST changes:

    * a **fixed-time** job is one whose minute and hour fields both do not start with ``*``
      (``30 2 * * *``, ``0 9-17 * * *``, ``@daily``). A local time of a fixed-time job that falls
      in a skipped interval (spring forward) fires once, at the first instant after the gap
      (``30 2 * * *`` in New York on 2026-03-08 fires at 03:00 EDT = 07:00 UTC). A local time in
      a repeated interval (fall back) fires once, in the first pass (``30 1 * * *`` on
      2026-11-01 fires at 01:30 EDT = 05:30 UTC, not again at 01:30 EST).
    * a **wildcard** job (minute or hour field starts with ``*``: ``* * * * *``, ``*/15 * * * *``,
      ``30 * * * *``, ``@hourly``) fires at every instant whose local time matches: local times
      in a skipped interval do not exist and never fire, and a repeated interval fires in both
      passes (``* * * * *`` fires 1,380 times on the New York spring-forward day and 1,500 times
      on the fall-back day; ``0 * * * *`` fires 23 and 25 times).

    Several local times that land on the same instant (``0,30 2 * * *`` on a spring-forward day)
    fire once. Day-of-month and day-of-week combine as in Vixie cron: if either field starts with
    ``*`` both must match, otherwise either may match, ``#n`` and ``nL`` days included
    (``0 0 15 * fri#2`` fires on the 15th and on every second Friday). A list item ``*`` makes
    its field every value (``*,5`` is ``*``).

    Expressions are validated at construction: a malformed field raises
    :class:`~timewheel.errors.InvalidScheduleError` naming the field, the reason and the way out;
    an expression that can never fire (``0 0 30 2 *``) is refused; so are spellings that
    croniter 7 reads differently from classic cron (``5-5``, which croniter 7 expands to the
    whole field, and ``6/1`` in the day-of-week field, which classic cron reads as Saturday and
    Sunday and croniter 7 as Saturday only), spellings of other cron dialects (``L-3``,
    ``MON-FRI#1``, ``H``, ``R``, ``CRON_TZ=``, a year field) and non-ASCII characters. Parsing
    and validation live in :mod:`timewheel._cronexpr`.

Intervals (:class:`IntervalRule`)
    Slots at ``start + k * every`` in elapsed UTC seconds, computed by multiplication, so they
    never drift, however late each run starts or finishes.

Jitter is not part of a slot: :meth:`Rule.jittered` spreads the actual run time, while the next
slot is computed from the unjittered one.

Misfires (:class:`Misfire`, :func:`plan_misfires`) and overlap (:class:`Overlap`) are policy
values plus one pure decision function; the scheduler applies them.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import math
import random
import threading
from bisect import bisect_right, insort
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from timewheel._cronexpr import CronExpression, parse_cron
from timewheel.errors import InvalidScheduleError

__all__ = [
    "CronRule",
    "CronSlots",
    "IntervalRule",
    "Misfire",
    "MisfirePlan",
    "Overlap",
    "Rule",
    "RuleCache",
    "cron_slots",
    "make_rule",
    "parse_every",
    "plan_misfires",
    "resolve_zone",
    "rule_from_spec",
    "runs_alone",
]

_UTC = timezone.utc
_NAIVE_EPOCH = datetime(1970, 1, 1)
_UTC_KEYS = frozenset(
    {"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"}
)


# --------------------------------------------------------------------------------------------
# Rule protocol
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return type(value).__name__


def _finite(name: str, value: object) -> float:
    """Return ``value`` as a float, refusing bools, non-numbers, NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidScheduleError(
            f"{name} must be a number of seconds (got {value!r} that is a {_type_name(value)})"
        )
    result = float(value)
    if not math.isfinite(result):
        raise InvalidScheduleError(f"{name} must be a finite number of seconds (got {value!r})")
    return result


def _optional_instant(name: str, value: object) -> float | None:
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
    return _finite(name, value)


def _jitter(value: object) -> float:
    jitter = _finite("jitter", value)
    if jitter < 0:
        raise InvalidScheduleError(f"jitter must be >= 0 seconds (got {value!r})")
    return jitter


def _check_window(start: float | None, end: float | None) -> None:
    if start is not None and end is not None and not start < end:
        raise InvalidScheduleError(
            f"start must be before end (got start={start!r}, end={end!r}); "
            "end is exclusive, so start == end would never fire"
        )


def _utc_text(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, _UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return repr(t)


def parse_every(value: object) -> float:
    """Return an interval in seconds from a ``timedelta`` or a number of seconds.

    Raises :class:`~timewheel.errors.InvalidScheduleError` unless the interval is finite and > 0.
    """
    seconds = value.total_seconds() if isinstance(value, timedelta) else _finite("every", value)
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
    if tz is None or tz is _UTC:
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
        f"that is a {_type_name(tz)}); fixed offsets ignore daylight saving time"
    )


# --------------------------------------------------------------------------------------------
# CronRule
# --------------------------------------------------------------------------------------------


def _offset(zone: ZoneInfo, t: float) -> float:
    """UTC offset of ``zone`` at instant ``t``, in seconds.

    Zone transitions fall on whole seconds, so the offset at ``t`` is the one at ``floor(t)``;
    flooring also keeps ``fromtimestamp``'s rounding to microseconds from carrying an instant a
    hair before a transition across it.
    """
    off = datetime.fromtimestamp(math.floor(t), zone).utcoffset()
    assert off is not None  # a ZoneInfo always knows its offset
    return off.total_seconds()


def _transition(zone: ZoneInfo, before: float, after: float, new_offset: float) -> float:
    """First whole-second instant in ``(before, after]`` whose offset is ``new_offset``."""
    lo, hi = math.floor(before), math.ceil(after)  # offset(lo) is the old one, hi the new one
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(zone, mid) == new_offset:
            hi = mid
        else:
            lo = mid
    return float(hi)


def _croniter_walls(expression: str, after: float) -> Iterator[float]:
    """croniter's matches of ``expression`` after the naive wall time ``after``, increasing."""
    it = croniter(expression, after, implement_cron_bug=True)
    try:
        while True:
            yield it.get_next()
    except (CroniterBadDateError, OverflowError, ValueError):
        return


def _merged(streams: Iterable[Iterator[float]]) -> Iterator[float]:
    """The increasing streams merged into one, each value once (a day may match both fields)."""
    previous: float | None = None
    for value in heapq.merge(*streams):
        if value != previous:
            previous = value
            yield value


def cron_slots(expr: str, zone: ZoneInfo) -> CronSlots:
    """The :class:`CronSlots` of a valid expression in *zone*, shared: one per expression and zone
    among the last :data:`SHARED_SLOTS` asked for (a rule keeps its own alive while it lives)."""
    key = (expr, zone.key)
    with _SHARED_LOCK:
        slots = _SHARED.get(key)
        if slots is not None:
            _SHARED.move_to_end(key)
            return slots
    slots = CronSlots(parse_cron(expr), zone)
    with _SHARED_LOCK:
        slots = _SHARED.setdefault(key, slots)
        while len(_SHARED) > SHARED_SLOTS:
            _SHARED.popitem(last=False)
    return slots


SHARED_SLOTS = 4096
"""How many (expression, zone) pairs :func:`cron_slots` keeps shared (least recently used go)."""
_SHARED: OrderedDict[tuple[str, str | None], CronSlots] = OrderedDict()
_SHARED_LOCK = threading.Lock()


class CronSlots:
    """The fire instants of one cron expression in one zone, shared by every rule that has them.

    A :class:`CronRule` asks its slots for the first instant after ``t``; rules with the same
    expression and zone (whatever their ``start``, ``end`` or jitter) share one ``CronSlots``
    through :func:`cron_slots`, so 100,000 schedules at ``0 0 * * *`` in one zone compute each
    instant once, not 100,000 times.

    Two things make repeated questions cheap:

    * one kept croniter iterator: asking for the instant after the one it last returned costs
      one croniter step (about 40-70 µs); any other ``t`` re-seeks (about 2-3x);
    * a memo of known gaps: ``next_after(t) == r`` means no instant lies in ``(t, r)``, so every
      ``t'`` in ``[t, r)`` has the same answer. The memo keeps at most :attr:`MEMO` such
      intervals (the earliest are dropped first, since time moves forward), and answers any
      question that falls in one with a bisection, without croniter. The set of fire instants
      is a fixed function of the expression and the zone (DST included), so a remembered gap
      never goes stale.

    Thread-safe (one lock).
    """

    __slots__ = (
        "_ends",
        "_gen",
        "_last",
        "_lock",
        "_parsed",
        "_recent",
        "_starts",
        "_utc",
        "_zone",
        "computed",
        "remembered",
    )

    #: the most gaps remembered per expression and zone
    MEMO = 256
    # fast-path: at most this many stream values are skipped before re-seeking
    _MAX_SKIP = 32

    def __init__(self, parsed: CronExpression, zone: ZoneInfo) -> None:
        self._parsed = parsed
        self._zone = zone
        self._utc = zone.key in _UTC_KEYS
        self._lock = threading.Lock()
        self._gen: Iterator[float] | None = None
        self._last: float | None = None
        self._ends: list[float] = []  # the answers r of the remembered gaps, increasing
        self._starts: dict[float, float] = {}  # r -> the earliest t known to answer r
        self._recent = (math.inf, -math.inf)  # the gap answered last: (t, r)
        #: instants computed with croniter (questions the memo could not answer)
        self.computed = 0
        #: questions answered from the memo
        self.remembered = 0

    def next_after(self, t: float) -> float | None:
        """The first fire instant strictly after ``t``; None when croniter finds none."""
        low, end = self._recent  # one read of one tuple: consistent without the lock
        if low <= t < end:
            self.remembered += 1
            return end
        with self._lock:
            ends = self._ends
            i = bisect_right(ends, t)
            if i < len(ends):
                end = ends[i]
                low = self._starts[end]
                if low <= t:
                    self.remembered += 1
                    self._recent = (low, end)
                    return end
            self.computed += 1
            value, low = self._next_locked(t)
            if value is not None:
                self._remember(low, value)
                self._recent = (self._starts[value], value)
            return value

    def __len__(self) -> int:
        """How many gaps are remembered."""
        return len(self._ends)

    def _remember(self, low: float, end: float) -> None:
        starts = self._starts
        known = starts.get(end)
        if known is not None:
            if low < known:
                starts[end] = low
            return
        ends = self._ends
        if len(ends) >= self.MEMO:
            drop = ends[: self.MEMO // 2]  # the earliest half: time moves forward
            del ends[: self.MEMO // 2]
            for old in drop:
                del starts[old]
        insort(ends, end)
        starts[end] = low

    def _next_locked(self, t: float) -> tuple[float | None, float]:
        """The first instant after ``t``, and where the gap before it is known to begin: the
        instant before it when the kept iterator stepped there (a proven neighbour), else ``t``."""
        gen, last = self._gen, self._last
        if gen is not None and last is not None and t >= last:
            for _ in range(self._MAX_SKIP):
                value = next(gen, None)
                low, self._last = last, value
                if value is None:
                    self._gen = None
                    return None, t
                if value > t:
                    return value, low
                last = value
        self._gen = gen = self._stream(t)
        value = next(gen, None)
        self._last = value
        if value is None:
            self._gen = None
        return value, t

    def _local_walls(self, wall_from: float) -> Iterator[float]:
        """Naive local wall-clock times (as epoch-like seconds) matching, from ``wall_from`` on."""
        step = 1.0 if self._parsed.has_seconds else 60.0
        first = math.floor(wall_from / step) * step - step
        expressions = self._parsed.croniter_expressions
        if len(expressions) == 1:
            return _croniter_walls(expressions[0], first)
        return _merged(_croniter_walls(expression, first) for expression in expressions)

    def _stream(self, t: float) -> Iterator[float]:
        """Yield the fire instants strictly after ``t``, strictly increasing."""
        if self._utc:
            for wall in self._local_walls(t):
                if wall > t:
                    yield wall
            return
        zone = self._zone
        off_t = _offset(zone, t)
        # A later instant can have an earlier wall time only across a fall-back: start the
        # local enumeration early enough to see the second pass of a repeated interval.
        drop = max(0.0, off_t - min(_offset(zone, t + k * 1800.0) for k in range(1, 13)))
        walls = self._local_walls(t + off_t - drop)
        prev = t
        fixed = self._parsed.fixed
        lookahead: float | None = None
        while True:
            if lookahead is not None:
                wall, lookahead = lookahead, None
            else:
                wall_next = next(walls, None)
                if wall_next is None:
                    return
                wall = wall_next
            off0, off1 = self._wall_offsets(wall)
            if off0 == off1:
                candidates: list[float] = [wall - off0]
            elif off0 < off1:  # in a gap (spring forward)
                if not fixed:
                    continue  # the local time does not exist: a wildcard job skips it
                candidates = [_transition(zone, wall - off1, wall - off0, off1)]
            elif fixed:  # repeated interval, fixed-time job: first pass only
                candidates = [wall - off0]
            else:  # repeated interval, wildcard job: every match of the first pass, then the second
                region = [wall]
                span = off0 - off1
                while True:
                    more = next(walls, None)
                    if more is None:
                        break
                    if more - wall < span and self._wall_offsets(more) == (off0, off1):
                        region.append(more)
                    else:
                        lookahead = more
                        break
                candidates = [w - off0 for w in region] + [w - off1 for w in region]
            for instant in candidates:
                if instant > prev:
                    prev = instant
                    yield instant

    def _wall_offsets(self, wall: float) -> tuple[float, float]:
        naive = _NAIVE_EPOCH + timedelta(seconds=wall)
        a = naive.replace(tzinfo=self._zone).utcoffset()
        b = naive.replace(tzinfo=self._zone, fold=1).utcoffset()
        assert a is not None
        assert b is not None
        return a.total_seconds(), b.total_seconds()


class CronRule:
    """A cron expression evaluated on the wall clock of a zone (see the module docstring).

    ``CronRule(expr, tz=None, *, jitter=0, start=None, end=None)``: ``tz`` is an IANA zone name or
    a :class:`~zoneinfo.ZoneInfo` (None means UTC). ``start``/``end`` (UTC epoch seconds or aware
    datetimes) bound the fire times: ``start <= fire < end``. ``jitter`` seconds are added to the
    run time by :meth:`jittered`, never to the slot.

    The instants come from the :class:`CronSlots` of the expression and zone, shared by every
    rule with them (see :func:`cron_slots`): a kept croniter iterator and a memo of known gaps,
    so 100,000 rules at ``0 0 * * *`` ask croniter once per instant. Thread-safe.
    """

    __slots__ = ("_end", "_jitter", "_parsed", "_slots", "_start", "_zone")

    def __init__(
        self,
        expr: str,
        tz: str | ZoneInfo | None = None,
        *,
        jitter: float = 0.0,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
    ) -> None:
        self._zone = resolve_zone(tz)
        self._parsed = parse_cron(expr)
        self._jitter = _jitter(jitter)
        self._start = _optional_instant("start", start)
        self._end = _optional_instant("end", end)
        _check_window(self._start, self._end)
        self._slots = cron_slots(self._parsed.source, self._zone)

    # -- public -----------------------------------------------------------------------------

    @property
    def expr(self) -> str:
        """The expression as written."""
        return self._parsed.source

    @property
    def zone(self) -> ZoneInfo:
        """The evaluation zone."""
        return self._zone

    @property
    def jitter(self) -> float:
        """Maximum jitter in seconds added by :meth:`jittered`."""
        return self._jitter

    @property
    def fixed_time(self) -> bool:
        """True for a Vixie fixed-time job (neither minute nor hour field starts with ``*``)."""
        return self._parsed.fixed

    @property
    def slots(self) -> CronSlots:
        """The shared instants of this rule's expression and zone."""
        return self._slots

    def next_after(self, t: float) -> float | None:
        """Return the first fire instant strictly after ``t`` (UTC epoch seconds).

        Returns None once ``end`` is reached (or, for pathological expressions, when croniter
        finds no match within 50 years).
        """
        if t.__class__ is not float or t - t != 0.0:  # else a finite float, as is
            t = _finite("t", t)
        if self._start is not None and t < self._start:
            t = math.nextafter(self._start, -math.inf)
        result = self._slots.next_after(t)
        if result is not None and self._end is not None and result >= self._end:
            return None
        return result

    def jittered(self, slot: float, rng: random.Random) -> float:
        """Return ``slot + rng.uniform(0, jitter)`` (``slot`` itself when jitter is 0)."""
        if self._jitter == 0:
            return slot
        return slot + rng.uniform(0.0, self._jitter)

    def describe(self) -> str:
        """E.g. ``cron '30 2 * * *' in America/New_York (fixed-time)``."""
        kind = "fixed-time" if self._parsed.fixed else "wildcard"
        text = f"cron {self._parsed.source!r} in {self._zone.key} ({kind})"
        if self._jitter:
            text += f", jitter {self._jitter:g}s"
        if self._start is not None:
            text += f", from {_utc_text(self._start)}"
        if self._end is not None:
            text += f", until {_utc_text(self._end)}"
        return text

    def to_spec(self) -> dict[str, object]:
        """``{"kind": "cron", "expr": ..., "tz": ..., "jitter": ..., "start": ..., "end": ...}``."""
        return {
            "kind": "cron",
            "expr": self._parsed.source,
            "tz": self._zone.key,
            "jitter": self._jitter,
            "start": self._start,
            "end": self._end,
        }

    def __repr__(self) -> str:
        return f"CronRule({self._parsed.source!r}, tz={self._zone.key!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CronRule):
            return NotImplemented
        return self.to_spec() == other.to_spec()

    def __hash__(self) -> int:
        return hash((self._parsed.source, self._zone.key, self._jitter, self._start, self._end))


# --------------------------------------------------------------------------------------------
# IntervalRule
# --------------------------------------------------------------------------------------------


class IntervalRule:
    """Slots at ``start + k * every`` (k = 0, 1, 2, ...), in elapsed UTC seconds.

    ``IntervalRule(every, *, start=None, end=None, jitter=0)``:

    * ``every``: seconds (> 0, finite) or a ``timedelta``.
    * ``start``: the anchor, slot 0 (UTC epoch seconds or an aware datetime). When None, the rule
      anchors itself on the ``t`` of its first :meth:`next_after` call (so the first slot is
      ``t + every``) and :meth:`to_spec` records that anchor from then on; the scheduler passes
      the schedule's creation time as ``start`` through :func:`make_rule`.
    * ``end``: exclusive bound: slots satisfy ``slot < end``; ``start=s, end=s + n*every`` gives
      exactly n slots.
    * ``jitter``: seconds added by :meth:`jittered` to the run time, never to the slot. A jitter
      of ``every`` or more lets consecutive runs swap order; the overlap policy then applies.

    Slots are computed by multiplication from the anchor, never by accumulating, so a thousand
    slots later the rule has not drifted, whenever the runs actually started or finished.
    """

    __slots__ = ("_end", "_every", "_jitter", "_lock", "_start")

    def __init__(
        self,
        every: float | timedelta,
        *,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        jitter: float = 0.0,
    ) -> None:
        self._every = parse_every(every)
        self._start = _optional_instant("start", start)
        self._end = _optional_instant("end", end)
        self._jitter = _jitter(jitter)
        _check_window(self._start, self._end)
        self._lock = threading.Lock()

    @property
    def every(self) -> float:
        """The period in seconds."""
        return self._every

    @property
    def start(self) -> float | None:
        """The anchor (slot 0), or None while the rule is not yet anchored."""
        return self._start

    @property
    def end(self) -> float | None:
        """The exclusive end, or None."""
        return self._end

    @property
    def jitter(self) -> float:
        """Maximum jitter in seconds added by :meth:`jittered`."""
        return self._jitter

    def anchored(self, start: float) -> IntervalRule:
        """Return a copy anchored at ``start`` (this rule's own anchor wins if it has one)."""
        anchor = self._start if self._start is not None else _finite("start", start)
        return IntervalRule(self._every, start=anchor, end=self._end, jitter=self._jitter)

    def slot(self, k: int) -> float:
        """Return slot ``k`` (``start + k * every``); the rule must be anchored."""
        if self._start is None:
            raise InvalidScheduleError("the interval rule has no start yet; call anchored()")
        return self._start + k * self._every

    def index_after(self, t: float) -> int:
        """Return the smallest k with ``slot(k) > t`` (k >= 0); the rule must be anchored."""
        start = self.slot(0)
        every = self._every
        k = max(0, math.floor((t - start) / every) + 1)
        while start + k * every <= t:  # guard against rounding in the division
            k += 1
        while k > 0 and start + (k - 1) * every > t:
            k -= 1
        return k

    def next_after(self, t: float) -> float | None:
        """Return the first slot strictly after ``t``, or None at/after ``end``."""
        t = _finite("t", t)
        if self._start is None:
            with self._lock:
                if self._start is None:
                    self._start = t
        slot = self.slot(self.index_after(t))
        if self._end is not None and slot >= self._end:
            return None
        return slot

    def count_between(self, after: float, upto: float) -> int:
        """Number of slots ``s`` with ``after < s <= upto`` (and ``s < end``), in O(1)."""
        if upto <= after:
            return 0
        first = self.index_after(after)
        last = self.index_after(upto)  # first index beyond upto
        if self._end is not None:
            last = min(last, self.index_after(math.nextafter(self._end, -math.inf)))
        return max(0, last - first)

    def jittered(self, slot: float, rng: random.Random) -> float:
        """Return ``slot + rng.uniform(0, jitter)`` (``slot`` itself when jitter is 0)."""
        if self._jitter == 0:
            return slot
        return slot + rng.uniform(0.0, self._jitter)

    def describe(self) -> str:
        """E.g. ``every 300s from 2026-01-01T00:00:00Z``."""
        text = f"every {self._every:g}s"
        text += f" from {_utc_text(self._start)}" if self._start is not None else " (unanchored)"
        if self._end is not None:
            text += f" until {_utc_text(self._end)} (exclusive)"
        if self._jitter:
            text += f", jitter {self._jitter:g}s"
        return text

    def to_spec(self) -> dict[str, object]:
        """``{"kind": "interval", "every": ..., "start": ..., "end": ..., "jitter": ...}``."""
        return {
            "kind": "interval",
            "every": self._every,
            "start": self._start,
            "end": self._end,
            "jitter": self._jitter,
        }

    def __repr__(self) -> str:
        return f"IntervalRule({self._every!r}, start={self._start!r}, end={self._end!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalRule):
            return NotImplemented
        return self.to_spec() == other.to_spec()

    def __hash__(self) -> int:
        return hash((self._every, self._start, self._end, self._jitter))


# --------------------------------------------------------------------------------------------
# Construction helpers
# --------------------------------------------------------------------------------------------


def make_rule(
    *,
    cron: str | None = None,
    every: float | timedelta | None = None,
    tz: str | ZoneInfo | None = None,
    start: float | datetime | None = None,
    end: float | datetime | None = None,
    jitter: float = 0.0,
) -> CronRule | IntervalRule:
    """Build a rule from scheduler arguments: exactly one of ``cron`` and ``every``.

    ``tz`` applies to cron only (an interval is elapsed UTC time; passing ``tz`` with ``every``
    is refused so nobody believes it matters). ``start``/``end`` bound either kind; for an
    interval ``start`` is the anchor (the scheduler passes the creation time).
    """
    if (cron is None) == (every is None):
        raise InvalidScheduleError(
            f"pass exactly one of cron= and every= (got cron={cron!r}, every={every!r})"
        )
    if cron is not None:
        return CronRule(cron, tz, jitter=jitter, start=start, end=end)
    assert every is not None
    if tz is not None:
        raise InvalidScheduleError(
            f"tz={tz!r} does not apply to every=: intervals are elapsed UTC time; "
            "use cron= for wall-clock schedules"
        )
    return IntervalRule(every, start=start, end=end, jitter=jitter)


def _spec_number(spec: Mapping[str, object], name: str) -> float | None:
    value = spec.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidScheduleError(f"rule spec {name} must be a number or null (got {value!r})")
    return float(value)


def rule_from_spec(spec: Mapping[str, object]) -> CronRule | IntervalRule:
    """Rebuild a rule from :meth:`Rule.to_spec` output (e.g. read back from JSON)."""
    if not isinstance(spec, Mapping):
        raise InvalidScheduleError(f"rule spec must be a mapping (got {_type_name(spec)})")
    kind = spec.get("kind")
    start_f, end_f = _spec_number(spec, "start"), _spec_number(spec, "end")
    jitter_f = _spec_number(spec, "jitter") or 0.0
    if kind == "cron":
        expr, tz = spec.get("expr"), spec.get("tz")
        if not isinstance(expr, str) or not isinstance(tz, (str, type(None))):
            raise InvalidScheduleError(f"malformed cron rule spec {dict(spec)!r}")
        return CronRule(expr, tz, jitter=jitter_f, start=start_f, end=end_f)
    if kind == "interval":
        every = spec.get("every")
        if isinstance(every, bool) or not isinstance(every, (int, float)):
            raise InvalidScheduleError(f"malformed interval rule spec {dict(spec)!r}")
        return IntervalRule(every, start=start_f, end=end_f, jitter=jitter_f)
    raise InvalidScheduleError(
        f"unknown rule kind {kind!r} in spec {dict(spec)!r}: expected 'cron' or 'interval'"
    )


class RuleCache:
    """Rules shared by spec: schedules whose rule is the same get one rule object and one
    read-only spec mapping.

    A bounded LRU (*size* entries, least recently used dropped first), looked up by a stored
    spec (:meth:`from_spec`) or by the arguments that make a rule (:meth:`make`: creating
    100,000 schedules with one expression builds and validates it once). Built rules are
    immutable in what they answer, so sharing one among many schedules is safe; an interval
    rule without an anchor (it anchors itself on its first question) is built afresh every time.
    Thread-safe.
    """

    __slots__ = ("_entries", "_lock", "_made", "size")

    def __init__(self, size: int = 4096) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidScheduleError(f"size must be an int >= 1 (got {size!r})")
        self.size = size
        self._entries: OrderedDict[
            tuple[object, ...], tuple[CronRule | IntervalRule, Mapping[str, object]]
        ] = OrderedDict()
        self._lock = threading.Lock()
        # make()'s arguments -> entry: read without the lock (one dict lookup per schedule
        # created), cleared when full
        self._made: dict[
            tuple[object, ...], tuple[CronRule | IntervalRule, Mapping[str, object]]
        ] = {}

    def from_spec(self, spec: Mapping[str, object]) -> CronRule | IntervalRule:
        """The rule of *spec* (as :func:`rule_from_spec`), built once while it stays cached."""
        try:
            key: tuple[object, ...] = tuple(spec.items())
            hash(key)
        except (AttributeError, TypeError):  # not a mapping of plain values: no sharing
            return rule_from_spec(spec)
        got = self._get(key)
        if got is not None:
            return got[0]
        return self._keep(rule_from_spec(spec), key)[0]

    def make(
        self,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str | ZoneInfo | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        jitter: float = 0.0,
    ) -> tuple[CronRule | IntervalRule, Mapping[str, object]]:
        """``(rule, spec)`` for :func:`make_rule`'s arguments: the rule shared with every equal
        one, and its spec as a shared read-only mapping (what a schedule record stores)."""
        # the types too: True == 1 == 1.0 as keys, and make_rule refuses a bool jitter
        key: tuple[object, ...] = (
            cron,
            every,
            tz,
            start,
            end,
            jitter,
            every.__class__,
            start.__class__,
            end.__class__,
            jitter.__class__,
        )
        try:
            got = self._made.get(key)  # hashes the key: an unhashable argument raises
            hashable = True
        except TypeError:
            got, hashable = None, False
        if got is not None:
            return got
        rule = make_rule(cron=cron, every=every, tz=tz, start=start, end=end, jitter=jitter)
        entry = self._keep(rule, None)
        if hashable and not (isinstance(rule, IntervalRule) and rule.start is None):
            made = self._made
            if len(made) >= self.size:
                made.clear()  # a burst of distinct rules: start over rather than track age
            made[key] = entry
        return entry

    def share(self, rule: CronRule | IntervalRule) -> CronRule | IntervalRule:
        """The cached rule with *rule*'s spec if there is one, else *rule*, now cached."""
        return self._keep(rule, None)[0]

    def _get(
        self, key: tuple[object, ...]
    ) -> tuple[CronRule | IntervalRule, Mapping[str, object]] | None:
        with self._lock:
            got = self._entries.get(key)
            if got is not None:
                self._entries.move_to_end(key)
            return got

    def _keep(
        self, rule: CronRule | IntervalRule, key: tuple[object, ...] | None
    ) -> tuple[CronRule | IntervalRule, Mapping[str, object]]:
        """Cache *rule* under its spec (and *key*), or return the entry already cached."""
        spec = rule.to_spec()
        entry: tuple[CronRule | IntervalRule, Mapping[str, object]] = (rule, MappingProxyType(spec))
        if isinstance(rule, IntervalRule) and rule.start is None:
            return entry
        spec_key = tuple(spec.items())
        entries = self._entries
        with self._lock:
            entry = entries.setdefault(spec_key, entry)
            entries.move_to_end(spec_key)
            if key is not None:
                entries[key] = entry
            while len(entries) > self.size:
                entries.popitem(last=False)
        return entry

    def __len__(self) -> int:
        return len(self._entries)


# --------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------


class Misfire(enum.Enum):
    """What to do with slots that came due while the scheduler was down or stalled.

    * ``RUN_ONCE`` (default): all due slots coalesce into one run, for the most recent one.
      Grace does not apply: a catch-up run always happens.
    * ``RUN_ALL``: each due slot not older than the grace runs, oldest first, at most
      ``max_runs`` of them (the most recent are kept).
    * ``SKIP``: the most recent due slot runs only if it is late by at most the grace
      (default :data:`DEFAULT_SKIP_GRACE`); otherwise nothing runs until the next slot.
    """

    RUN_ONCE = "run_once"
    RUN_ALL = "run_all"
    SKIP = "skip"

    @property
    def default_grace(self) -> float | None:
        """The grace used when the schedule gives none: 60 s for SKIP, unlimited otherwise."""
        return DEFAULT_SKIP_GRACE if self is Misfire.SKIP else None


DEFAULT_SKIP_GRACE = 60.0
"""Default grace for :attr:`Misfire.SKIP`, seconds (Quartz's misfire threshold).

Long enough that a GC pause, GIL contention or a busy worker pool never turns a run into a
skip (APScheduler's 1 s default does, and users hate it); short enough that after a real
outage a SKIP schedule does skip.
"""


class Overlap(enum.Enum):
    """What to do when a slot comes due while the previous run of the same schedule still runs.

    * ``SKIP`` (default): do not start a new instance; count the slot as skipped.
    * ``QUEUE``: start the new instance when the previous one finishes (one waiting at most).
    * ``ALLOW``: run concurrently, up to the schedule's ``max_instances``.
    """

    SKIP = "skip"
    QUEUE = "queue"
    ALLOW = "allow"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MisfirePlan:
    """The decision of :func:`plan_misfires` for one schedule at one instant.

    ``run``: the slots to run now, increasing. ``due``: how many slots fell in
    ``(last_slot, now]`` (a lower bound when ``due_exact`` is False: counting a huge outage of
    a dense cron rule is capped). ``next_slot``: the first slot after ``now`` (None when the
    rule is exhausted). ``iterations``: how many rule evaluations the plan cost.
    """

    run: tuple[float, ...]
    due: int
    due_exact: bool
    next_slot: float | None
    iterations: int = 0

    @property
    def skipped(self) -> int:
        """Due slots that do not run (coalesced, expired or over the cap); see ``due_exact``."""
        return self.due - len(self.run)


_COUNT_LIMIT = 256  # cron slots counted one by one before the count becomes a lower bound


class _Counter:
    """Wraps ``rule.next_after`` to count evaluations."""

    __slots__ = ("calls", "rule")

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.calls = 0

    def __call__(self, t: float) -> float | None:
        self.calls += 1
        return self.rule.next_after(t)


def _latest_due(next_after: _Counter, last_slot: float, now: float) -> float | None:
    """The latest slot in ``(last_slot, now]``: gallop back from ``now``, then bisect."""
    s = next_after(last_slot)
    if s is None or s > now:
        return None
    width = 1.0
    while True:  # find a due slot as close to now as the gallop allows
        low = max(last_slot, now - width)
        found = next_after(low)
        if found is not None and found <= now:
            s = found
            break
        width *= 4
    high = now  # invariant: no due slot in (high, now], s is a due slot <= high
    while True:
        after = next_after(s)
        if after is None or after > now:
            return s
        mid = (s + high) / 2
        probe = next_after(mid)
        if probe is not None and probe <= now:
            s = probe  # a due slot beyond mid
        else:
            high, s = mid, after  # none in (mid, now]: the latest lies in (s, mid]


def runs_alone(slot: float, now: float, *, policy: Misfire, grace: float | None) -> bool:
    """Whether *slot* runs at *now* when it is the only slot due (the on-time case of
    :func:`plan_misfires`): always under ``RUN_ONCE`` or without a grace; under ``SKIP`` when
    at most *grace* late; under ``RUN_ALL`` when inside the grace window. Pure and O(1)."""
    if policy is Misfire.RUN_ONCE or grace is None:
        return True
    if policy is Misfire.SKIP:
        return now - slot <= grace
    return slot > math.nextafter(now - grace, -math.inf)  # as _recent_slots bounds RUN_ALL


def plan_misfires(
    rule: Rule,
    last_slot: float,
    now: float,
    *,
    policy: Misfire,
    grace: float | None,
    max_runs: int = 100,
    first: float | None = None,
) -> MisfirePlan:
    """Decide which of the slots in ``(last_slot, now]`` run now (pure; reads no clock).

    ``last_slot`` is the most recent slot already handled (run or decided). ``grace`` is how late
    (``now - slot``) a slot may still start, None for unlimited; pass ``policy.default_grace``
    when the schedule gives none. See :class:`Misfire` for the policies. ``max_runs`` caps
    ``RUN_ALL``. ``first``, when the caller already knows it, is the rule's first slot after
    ``last_slot`` (a cron rule asked about an instant before its last answer restarts its
    iterator, which costs far more than stepping on).

    Cost: O(1) for an :class:`IntervalRule`; for other rules two evaluations when at most one
    slot is due (the on-time case), else O(log(now - last_slot)) evaluations to find the latest
    due slot, plus at most 256 to count the due slots (beyond that ``due`` is a lower bound)
    and, for ``RUN_ALL``, a few times ``max_runs``.
    """
    last_slot, now = _finite("last_slot", last_slot), _finite("now", now)
    if grace is not None:
        grace = _finite("grace", grace)
        if grace < 0:
            raise InvalidScheduleError(f"misfire grace must be >= 0 seconds (got {grace!r})")
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise InvalidScheduleError(f"max_runs must be an int >= 1 (got {max_runs!r})")
    if not isinstance(policy, Misfire):
        raise InvalidScheduleError(f"policy must be a Misfire (got {policy!r})")
    if isinstance(rule, IntervalRule):
        return _plan_interval(rule, last_slot, now, policy=policy, grace=grace, max_runs=max_runs)

    counter = _Counter(rule)
    if now > last_slot:
        s1 = first if first is not None else counter(last_slot)
        if s1 is None or s1 > now:  # nothing due
            return MisfirePlan(
                run=(), due=0, due_exact=True, next_slot=s1, iterations=counter.calls
            )
        s2 = counter(s1)
        if s2 is None or s2 > now:  # exactly one slot due: the on-time case
            one: tuple[float, ...] = (
                (s1,) if runs_alone(s1, now, policy=policy, grace=grace) else ()
            )
            return MisfirePlan(
                run=one, due=1, due_exact=True, next_slot=s2, iterations=counter.calls
            )
    next_slot = counter(now) if now >= last_slot else counter(last_slot)
    if now <= last_slot:
        return MisfirePlan(
            run=(), due=0, due_exact=True, next_slot=next_slot, iterations=counter.calls
        )
    latest = _latest_due(counter, last_slot, now)
    if latest is None:
        return MisfirePlan(
            run=(), due=0, due_exact=True, next_slot=next_slot, iterations=counter.calls
        )
    # count the due slots, one by one, up to a limit
    due, exact, s = 0, False, last_slot
    for _ in range(_COUNT_LIMIT):
        nxt = counter(s)
        if nxt is None or nxt > now:
            exact = True
            break
        due, s = due + 1, nxt
    if policy is Misfire.RUN_ONCE:
        run: tuple[float, ...] = (latest,)
    elif policy is Misfire.SKIP:
        run = (latest,) if grace is None or now - latest <= grace else ()
    else:
        run = _recent_slots(counter, last_slot, now, grace, max_runs)
    return MisfirePlan(
        run=run,
        due=max(due, len(run)),
        due_exact=exact,
        next_slot=next_slot,
        iterations=counter.calls,
    )


def _recent_slots(
    next_after: _Counter, last_slot: float, now: float, grace: float | None, max_runs: int
) -> tuple[float, ...]:
    """The most recent ``max_runs`` slots in ``(lower, now]``, lower = max(last_slot, now-grace)."""
    lower = last_slot
    if grace is not None:
        lower = max(lower, math.nextafter(now - grace, -math.inf))
    width = 60.0
    while True:
        begin = max(lower, now - width)
        window: deque[float] = deque(maxlen=max_runs)
        count, s = 0, begin
        while True:
            nxt = next_after(s)
            if nxt is None or nxt > now:
                break
            window.append(nxt)
            count, s = count + 1, nxt
        if count >= max_runs or begin <= lower:
            return tuple(window)
        width *= 8


def _plan_interval(
    rule: IntervalRule,
    last_slot: float,
    now: float,
    *,
    policy: Misfire,
    grace: float | None,
    max_runs: int,
) -> MisfirePlan:
    if rule.start is None:
        rule = rule.anchored(last_slot)
    next_slot = rule.next_after(max(now, last_slot))
    due = rule.count_between(last_slot, now)
    if due == 0:
        return MisfirePlan(run=(), due=0, due_exact=True, next_slot=next_slot, iterations=1)
    last_k = rule.index_after(now) - 1
    latest = rule.slot(last_k)
    if policy is Misfire.RUN_ONCE:
        run: tuple[float, ...] = (latest,)
    elif policy is Misfire.SKIP:
        run = (latest,) if grace is None or now - latest <= grace else ()
    else:
        first_k = rule.index_after(last_slot)
        if grace is not None:
            first_k = max(first_k, rule.index_after(math.nextafter(now - grace, -math.inf)))
        first_k = max(first_k, last_k - max_runs + 1)
        run = tuple(rule.slot(k) for k in range(first_k, last_k + 1))
    return MisfirePlan(run=run, due=due, due_exact=True, next_slot=next_slot, iterations=1)
