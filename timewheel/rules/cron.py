"""Cron rules: :class:`CronRule` (an expression on the wall clock of a zone, following Vixie cron
across DST changes; see :mod:`timewheel.rules`) and :class:`CronSlots`, the fire instants of
one expression and zone shared by every rule that has them (:func:`cron_slots`)."""

from __future__ import annotations

import heapq
import math
import random
import threading
from bisect import bisect_right, insort
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from timewheel._cronexpr import CronExpression, parse_cron
from timewheel.rules.base import (
    check_window,
    finite_seconds,
    jitter_seconds,
    optional_instant,
    resolve_zone,
    utc_text,
)

__all__ = ["SHARED_SLOTS", "CronRule", "CronSlots", "cron_slots"]

_NAIVE_EPOCH = datetime(1970, 1, 1)
_UTC_KEYS = frozenset(
    {"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"}
)


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
    """A cron expression evaluated on the wall clock of a zone (see :mod:`timewheel.rules`).

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
        self._jitter = jitter_seconds(jitter)
        self._start = optional_instant("start", start)
        self._end = optional_instant("end", end)
        check_window(self._start, self._end)
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
            t = finite_seconds("t", t)
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
            text += f", from {utc_text(self._start)}"
        if self._end is not None:
            text += f", until {utc_text(self._end)}"
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
