"""The hierarchical timing wheel: "what is due now?" in O(due), never O(pending).

See :class:`TimingWheel`. The wheel is a pure data structure: it never reads a clock, sleeps,
locks, does I/O or calls user code. Time is a parameter (``advance(now)``).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from typing import Generic, TypeVar

from timewheel.errors import DuplicateKeyError

__all__ = ["TimingWheel", "WheelStatistics", "bucket_width"]

K = TypeVar("K", bound=Hashable)

_floor = math.floor
_INF = math.inf
_NEG_INF = -math.inf
_FAR = 1 << 200  # an integer tick later than any real event
_LEVEL_NAMES = ("sub-second", "seconds", "minutes", "hours", "days", "overflow")
_BUCKETS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}

#: A slot holding more entries than this is cascaded in chunks spread over the time before it is
#: needed; a smaller slot is cascaded in one piece just before its time (it costs < 0.5 ms).
DRAIN_CHUNK = 512
#: Slots above the sub-second level are lists of dict segments of at most this many entries, so
#: a cascade takes whole segments oldest-first instead of rescanning a big dict's deleted head.
#: 682 fills a dict's 1,024-slot table exactly (CPython grows a dict when it is two-thirds full):
#: 512 would leave a quarter of each segment's entry table unused (about 9 bytes per entry).
SEGMENT = 682


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


def _bad_time(name: str, value: object) -> Exception:
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
    width = _as_time("bucket", bucket)
    if width <= 0:
        raise ValueError(f"bucket must be a positive width in seconds, got {bucket!r}")
    return width


def _as_time(name: str, value: object) -> float:
    """Return ``value`` as a finite float, or raise TypeError/ValueError naming it."""
    if value.__class__ is not float:
        if isinstance(value, (bool, str, bytes)):
            raise _bad_time(name, value)
        try:
            value = float(value)  # type: ignore[arg-type]  # checked by the except clause
        except (TypeError, ValueError):
            raise _bad_time(name, value) from None
    assert isinstance(value, float)
    if value - value != 0.0:  # NaN or +-inf
        raise _bad_time(name, value)
    return value


class TimingWheel(Generic[K]):
    """A hierarchical timing wheel of keys, each due at a float time in seconds.

    Levels as users think of them, each a ring of slots (dicts ``key -> due``)::

        level      slot width   slots  holds (c_L = current slot number at that level)
        -------------------------------------------------------------------------------
        0 sub-sec  one tick      2/tick  ticks up to the end of the next second
        1 seconds  1 s           120     rest of this minute + the next minute
        2 minutes  1 min         120     rest of this hour   + the next hour
        3 hours    1 h           48      rest of this day    + the next day
        4 days     1 day         days    the next ``days`` days
        overflow   1 day each    sparse  later days; a sorted list of day numbers

    At 00:00:00.000 (in hour h = 0, 1 ms ticks), a key due in 3 h 25 min 40 s sits in an
    hour slot; the rings below span two of the unit above::

        hours    | h |h+1|h+2|h+3|...|h+47|    <- due 03:25:40.123: hour slot h+3
        minutes  | m |m+1|  ...  |m+119|      this hour and the next
        seconds  | s |s+1|  ...  |s+119|      this minute and the next
        ticks    | t |t+1|  ...  |t+1999|     this second and the next

    During hour h+2 the hour slot h+3 is **drained**: its entries move, oldest first, into the
    minute ring (which spans two hours for this reason), a chunk at a time in proportion to the
    time elapsed, and all of it before h+3 begins. The minute slot of h+3:25 is drained the same
    way during the minute before it, into the seconds ring; the second slot during the second
    before, into ticks; the tick slot fires at the exact due time. An entry is moved at most
    once per level, and no cascade arrives as a burst: a slot of n entries is moved in chunks of
    ``DRAIN_CHUNK`` spread over a whole slot period of the level above, so the work per
    ``advance`` stays near its due work even with a million entries in one day slot.
    ``next_deadline()`` includes the drain checkpoints, so a loop that sleeps until it does the
    same bounded work per wake-up.

    Exactness: each entry keeps its due time as given; ``advance(now)`` returns exactly the
    entries with ``due <= now`` (never one due later, even within the current tick), in due
    order, first-in first-out among equal due times.

    Runtime complexity (n pending, d returned, L = 5 levels):

    - ``add``: O(1) (O(log days) for a new overflow day)
    - ``cancel``: O(1), memory freed at once (O(days beyond the wheel) to drop an overflow day)
    - ``advance``: O(d + d log d within one tick + L per non-empty slot or drain checkpoint
      crossed), plus the cascade moves owed by the time that passed (bounded per call, about
      ``DRAIN_CHUNK`` per level, when the caller advances at least once per drain checkpoint)
    - ``next_deadline``: O(L) via occupancy bitmaps (O(k) for the k entries of one tick slot)
    - ``upcoming``: O(non-empty slots + entries in slots wider than a bucket)
    - ``len``, ``in``, ``now``: O(1); ``statistics``: O(non-empty slots); ``_check``: O(n)

    Slots above the sub-second level are short lists of dict segments (at most ``SEGMENT``
    entries each, oldest first): a spread cascade takes whole segments, so it never rescans the
    deleted head of a big dict.

    Memory: two dict entries (the key index and the slot) and the due float per pending entry;
    no per-entry objects and no reference cycles.

    Thread safety: none. The wheel is not thread-safe; the caller serializes every call (the
    trigger loop owns its wheel and holds a lock around each call if other threads add or
    cancel). No method blocks, calls back into user code, or reads a clock.
    """

    __slots__ = (
        "_T",
        "_W",
        "__weakref__",
        "_advances",
        "_c1",
        "_c2",
        "_c3",
        "_c4",
        "_cascaded",
        "_chunk",
        "_days",
        "_ev",
        "_fired",
        "_heap0",
        "_index",
        "_last",
        "_lev",
        "_lim0",
        "_lim1",
        "_lim2",
        "_lim3",
        "_lim4",
        "_n",
        "_n0",
        "_now",
        "_occ",
        "_ovf",
        "_ovf_days",
        "_r1",
        "_r2",
        "_r3",
        "_ring0",
        "_rings",
        "_roll",
        "_stale",
        "_tick",
        "_tps",
        "_where",
    )

    def __init__(self, *, tick: float = 0.001, days: int = 8, start: float = 0.0) -> None:
        """Create an empty wheel whose current time is ``start``.

        ``tick`` (seconds, 0.001 to 1.0, dividing one second evenly) is the width of a
        sub-second slot: the most an entry can be late when the caller advances once per tick.
        ``days`` (>= 2) is the number of day slots; entries due later than that wait in the
        sorted overflow.
        """
        if isinstance(tick, bool) or not isinstance(tick, (int, float)):
            raise TypeError(f"tick must be a number of seconds, got {tick!r}")
        if not 0.001 <= tick <= 1.0:
            raise ValueError(f"tick must be between 0.001 and 1.0 seconds, got {tick!r}")
        tps = round(1.0 / tick)
        if abs(tps * tick - 1.0) > 1e-9:
            raise ValueError(
                f"tick must divide one second evenly (0.001, 0.002, 0.005, 0.01, ..., 0.5, 1.0), "
                f"got {tick!r}; try {1.0 / tps!r}"
            )
        if isinstance(days, bool) or not isinstance(days, int):
            raise TypeError(f"days must be an int, got {days!r}")
        if days < 2:
            raise ValueError(f"days must be at least 2, got {days!r}")
        start = _as_time("start", start)
        self._tick = float(tick)
        self._tps = tps
        self._days = days
        self._W = (1, tps, 60 * tps, 3600 * tps, 86400 * tps)
        self._n = (2 * tps, 120, 120, 48, days)
        self._n0 = 2 * tps
        # Level 0: one dict per tick. Levels 1-4 (and overflow days): a list of dict segments
        # of at most SEGMENT entries, oldest first, so a big slot drains without rescanning.
        self._ring0: list[dict[K, float]] = [{} for _ in range(2 * tps)]
        self._rings: list[list[list[dict[K, float]]]] = [[]] + [
            [[] for _ in range(n)] for n in self._n[1:]
        ]
        self._r1, self._r2, self._r3 = self._rings[1], self._rings[2], self._rings[3]
        self._where: dict[int, tuple[int, int]] = {id(d): (0, i) for i, d in enumerate(self._ring0)}
        self._occ = [0, 0, 0, 0, 0]  # occupancy bitmaps of levels 1-4 (level 0: _heap0)
        self._heap0: list[int] = []  # ticks of non-empty level-0 slots (may hold stale ticks)
        self._ovf: dict[int, list[dict[K, float]]] = {}
        self._ovf_days: list[int] = []
        self._index: dict[K, dict[K, float]] = {}
        self._now = start
        self._T = _floor(start * tps)
        self._last = [0, 0, 0, 0, 0, 0]  # tick of the last partial drain per source level
        self._lev = [_FAR] * 6  # cached next cascade tick per source level 1..5
        self._stale = 0  # bit L set: _lev[L] must be recomputed
        self._ev = _FAR  # min(_lev) when _stale == 0
        self._chunk = DRAIN_CHUNK
        self._cascaded = 0
        self._fired = 0
        self._advances = 0
        self._c1 = self._c2 = self._c3 = self._c4 = 0
        self._lim0 = self._lim1 = self._lim2 = self._lim3 = self._lim4 = self._roll = 0
        self._set_limits()

    # ------------------------------------------------------------------ properties, dunders

    @property
    def now(self) -> float:
        """The wheel's current time: ``start`` or the largest ``now`` passed to ``advance``."""
        return self._now

    @property
    def tick(self) -> float:
        """The width of a sub-second slot, in seconds."""
        return self._tick

    @property
    def days(self) -> int:
        """The number of day slots before the overflow."""
        return self._days

    def __len__(self) -> int:
        """The number of pending keys. O(1)."""
        return len(self._index)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is pending. O(1)."""
        return key in self._index

    def __repr__(self) -> str:
        return (
            f"<TimingWheel now={self._now!r} tick={self._tick!r} days={self._days} "
            f"pending={len(self._index)}>"
        )

    # ------------------------------------------------------------------ add / cancel

    def add(self, key: K, due: float) -> None:
        """Schedule ``key`` at time ``due`` (seconds, same epoch as ``now``).

        A due time at or before the wheel's current time is returned by the next ``advance``.
        ``due`` is stored as a float and compared exactly.

        Raises :class:`~timewheel.errors.DuplicateKeyError` if ``key`` is already pending
        (``cancel()`` it first), ``TypeError`` if ``due`` is not a number (bools are refused),
        ``ValueError`` if it is NaN or infinite.

        Runtime complexity: O(1); O(log d) when it opens a new overflow day (d overflow days).
        """
        index = self._index
        if key in index:
            raise DuplicateKeyError(
                f"key {key!r} is already scheduled in the wheel (due {index[key][key]!r}); "
                f"cancel() it first to reschedule"
            )
        if due.__class__ is not float:
            due = _as_time("due", due)
        try:
            u = _floor(due * self._tps)
        except (ValueError, OverflowError):  # NaN, infinite, or too far for a tick number
            if due - due != 0.0 or due > self._now:
                raise _bad_time("due", due) from None
            u = self._T  # a finite time long past: due now
        if u < self._lim0:
            if due <= self._now:
                u = self._T  # past due: the current tick
            slot = self._ring0[u % self._n0]
            if not slot:
                heappush(self._heap0, u)
        else:
            if u < self._lim1:
                level = 1
                i = u // self._tps % 120
                segs = self._r1[i]
                self._stale |= 2
            elif u < self._lim2:
                level = 2
                i = u // self._W[2] % 120
                segs = self._r2[i]
                self._stale |= 4
            elif u < self._lim3:
                level = 3
                i = u // self._W[3] % 48
                segs = self._r3[i]
                self._stale |= 8
            else:
                self._add_far(key, due, u)
                return
            if segs:
                slot = segs[-1]
                if len(slot) >= SEGMENT:
                    slot = self._new_segment(level, i, segs)
            else:
                slot = self._new_segment(level, i, segs)
        slot[key] = due
        index[key] = slot

    def _add_far(self, key: K, due: float, u: int) -> None:
        """``add`` for the day level and the overflow."""
        if u < self._lim4:
            level = 4
            i = u // self._W[4] % self._days
            segs: list[dict[K, float]] | None = self._rings[4][i]
        else:
            level = 5
            i = u // self._W[4]
            segs = self._ovf.get(i)
        self._stale |= 1 << level
        full = not segs or len(segs[-1]) >= SEGMENT
        slot = self._new_segment(level, i, segs) if full else segs[-1]  # type: ignore[index]
        slot[key] = due
        self._index[key] = slot

    def _new_segment(self, level: int, i: int, segs: list[dict[K, float]] | None) -> dict[K, float]:
        """Append a fresh segment to slot ``i`` of ``level`` (>= 1) and return it."""
        if not segs:
            if level == 5:
                if segs is None:
                    segs = self._ovf[i] = []
                    insort(self._ovf_days, i)
            else:
                segs = self._rings[level][i]
                self._occ[level] |= 1 << i
        seg: dict[K, float] = {}
        segs.append(seg)
        self._where[id(seg)] = (level, i)
        return seg

    def cancel(self, key: object) -> bool:
        """Remove ``key`` if pending; return whether it was.

        The entry is freed at once (no tombstone). Runtime complexity: O(1) (O(d) for the d
        overflow days when it empties one).
        """
        slot = self._index.pop(key, None)  # type: ignore[arg-type]  # any object may be asked
        if slot is None:
            return False
        del slot[key]  # type: ignore[arg-type]  # present: the index said so
        if not slot:
            self._emptied(slot)
        return True

    def _emptied(self, seg: dict[K, float]) -> None:
        """Bookkeeping when ``cancel`` emptied a slot (level 0) or a segment (levels >= 1)."""
        level, i = self._where[id(seg)]
        if level == 0:
            seg.clear()  # frees a large table; the stale tick in _heap0 is skipped later
            return
        del self._where[id(seg)]
        self._stale |= 1 << level
        segs = self._rings[level][i] if level < 5 else self._ovf[i]
        for j, s in enumerate(segs):
            if s is seg:
                del segs[j]
                break
        if not segs:
            self._drop_slot(level, i)

    def _drop_slot(self, level: int, i: int) -> None:
        """Slot ``i`` of ``level`` (>= 1) has no segments left."""
        if level == 5:
            del self._ovf[i]
            del self._ovf_days[bisect_left(self._ovf_days, i)]
        else:
            self._occ[level] &= ~(1 << i)

    # ------------------------------------------------------------------ time bookkeeping

    def _set_limits(self) -> None:
        """Recompute the current slot numbers and the add-coverage limits from ``_T``."""
        t = self._T
        w = self._W
        c1 = self._c1 = t // w[1]
        c2 = self._c2 = t // w[2]
        c3 = self._c3 = t // w[3]
        c4 = self._c4 = t // w[4]
        self._lim0 = (c1 + 1) * w[1]
        self._lim1 = (c2 + 1) * w[2]
        self._lim2 = (c3 + 1) * w[3]
        self._lim3 = (c4 + 1) * w[4]
        self._lim4 = (c4 + self._days) * w[4]
        self._roll = (c1 + 1) * w[1]

    def _source(self, level: int) -> tuple[int, int, list[dict[K, float]]]:
        """The earliest non-empty slot that ``level`` (1-5) drains downwards.

        Returns (slot number, ring index or day, segments); segments is empty if none.
        """
        if level == 5:
            if not self._ovf_days:
                return 0, 0, []
            day = self._ovf_days[0]
            return day, day, self._ovf[day]
        occ = self._occ[level]
        if not occ:
            return 0, 0, []
        n = self._n[level]
        if level == 1:
            first = self._c1 + 1
        elif level == 2:
            first = self._c2 + 1
        elif level == 3:
            first = self._c3 + 1
        else:
            first = self._c4 + 1
        p = first % n
        if occ >> p & 1:  # the very next slot (the common case on a busy level)
            return first, p, self._rings[level][p]
        rot = ((occ >> p) | (occ << (n - p))) & ((1 << n) - 1)
        j = (rot & -rot).bit_length() - 1
        i = (p + j) % n
        return first + j, i, self._rings[level][i]

    def _window(self, level: int, s: int) -> tuple[int, int]:
        """Ticks [start, end) during which source slot number ``s`` of ``level`` drains."""
        if level == 5:
            start = (s - self._days) * self._W[4]
            return start, start + self._W[4]
        w = self._W[level]
        return (s - 1) * w, s * w

    def _level_event(self, level: int) -> int:
        """The next tick at which ``level`` must move entries down (``_FAR`` if none)."""
        s, _, segs = self._source(level)
        if not segs:
            return _FAR
        start, end = self._window(level, s)
        x = end - 1  # a small slot moves in one piece, just before its time
        chunk = self._chunk
        if len(segs) > 1 or len(segs[0]) > chunk:
            start = max(start, self._last[level])
            n = _size(segs)
            if n > chunk and x > start:
                x = start - (-chunk * (x - start) // n)  # when a chunk's worth is owed
        t = self._T + 1
        return x if x > t else t

    def _events(self) -> int:
        """The earliest tick at which any level above 0 has cascade work (cached per level)."""
        stale = self._stale
        if stale:
            lev = self._lev
            for level in (1, 2, 3, 4, 5):
                if stale >> level & 1:
                    lev[level] = self._level_event(level)
            self._stale = 0
            self._ev = min(lev)
        return self._ev

    def _goto(self, t: int) -> None:
        """Move the current tick forward to ``t`` (no level-0 slot before ``t`` is pending)."""
        if t >= self._roll:
            # Crossing a second boundary (or more). Any draining slot whose time starts by
            # ``t`` must be empty first: complete them top-down while time is still before it.
            # (Only when work was owed at ``t`` itself; see the clamp in _level_event.)
            self._events()
            lev = self._lev
            for level in (5, 4, 3, 2, 1):
                if lev[level] <= t:
                    s, i, segs = self._source(level)
                    if segs and self._window(level, s)[1] <= t:
                        self._move(level, i, segs, _FAR)
                        self._events()
            self._T = t
            if t < self._lim1:  # the same minute: only the second changed
                c1 = self._c1 = t // self._tps
                self._lim0 = self._roll = (c1 + 1) * self._tps
            else:
                self._set_limits()
        else:
            self._T = t

    def _drain(self, x: int) -> None:
        """At tick ``x`` (== ``_T``), move each draining slot's share of entries one level down."""
        lev = self._lev
        for level in (5, 4, 3, 2, 1):
            if self._stale:
                self._events()
            if lev[level] > x:
                continue
            s, i, segs = self._source(level)
            m = 0
            if segs:
                start, end = self._window(level, s)
                if start <= x:  # draining
                    start = max(start, self._last[level])
                    if x >= end - 1 or end - 1 <= start:
                        m = _FAR
                    else:
                        n = _size(segs)
                        m = -(-n * (x - start) // (end - 1 - start))
                        if m < self._chunk and m < n:
                            m = 0  # planned when the slot was bigger (cancels shrank it)
            if m:
                self._move(level, i, segs, m)
                self._last[level] = x
            else:
                # Nothing owed at this checkpoint after all: plan the level again (its next
                # checkpoint is after the current tick, so advance() always makes progress).
                self._stale |= 1 << level
        self._events()

    def _move(self, level: int, i: int, segs: list[dict[K, float]], m: int) -> None:
        """Move whole segments, oldest first, of slot ``i`` of ``level`` one level down, until
        at least ``m`` entries moved or the slot is empty."""
        target = level - 1
        index = self._index
        where = self._where
        tps = self._tps
        moved = 0
        while segs and moved < m:
            seg = segs.pop(0)
            del where[id(seg)]
            moved += len(seg)
            if target == 0:
                ring0 = self._ring0
                n0 = self._n0
                fresh = []
                for k, due in seg.items():
                    u = _floor(due * tps)
                    slot = ring0[u % n0]
                    if not slot:
                        fresh.append(u)
                    slot[k] = due
                    index[k] = slot
                if fresh:
                    heap = self._heap0
                    heap += fresh
                    heapify(heap)
            else:
                ring = self._rings[target]
                n = self._n[target]
                w = self._W[target]
                for k, due in seg.items():
                    j = _floor(due * tps) // w % n
                    tsegs = ring[j]
                    if tsegs and len(tsegs[-1]) < SEGMENT:
                        slot = tsegs[-1]
                    else:
                        slot = self._new_segment(target, j, tsegs)
                    slot[k] = due
                    index[k] = slot
            seg.clear()
        self._cascaded += moved
        self._stale |= (1 << level) | (1 << target)
        if not segs:
            self._drop_slot(level, i)

    # ------------------------------------------------------------------ advance

    def advance(self, now: float) -> list[K]:
        """Move time forward to ``now`` and return the keys that are due, removing them.

        Returns exactly the pending keys with ``due <= max(now, self.now)``: in due order,
        first-in first-out among equal due times. A key due later than ``now`` is never
        returned, even within the current tick. A ``now`` earlier than the current time does
        not move time back; it returns only past-due keys added since (normally nothing).

        Runtime complexity: O(d + d log d within a tick) for d keys returned, O(L) per
        non-empty slot or cascade checkpoint crossed, plus the cascade moves owed by the time
        that passed (a chunk of ~``DRAIN_CHUNK`` per level and checkpoint; see the class
        docstring). Independent of the number pending.
        """
        if now.__class__ is not float:
            now = _as_time("now", now)
        elif now - now != 0.0:
            raise _bad_time("now", now)
        self._advances += 1
        if now > self._now:
            self._now = now
        else:
            now = self._now
        t_new = _floor(now * self._tps)
        out: list[K] = []
        heap = self._heap0
        if t_new == self._T:
            if heap and heap[0] <= t_new:
                self._fire0(t_new, now, out)
            return out
        ev = self._events() if self._stale else self._ev
        while True:
            # Fire the ticks before the next cascade checkpoint first: the cascade at tick ev
            # may still bring entries into tick ev itself (a slot completed at the last tick of
            # its window leaves the level below one more move), and they must not fire after
            # entries of that tick that happened to arrive earlier.
            hi = t_new if t_new < ev else ev - 1
            if heap and heap[0] <= hi:
                self._fire0(hi, now, out)
            if ev > t_new:
                break
            self._goto(ev)
            self._drain(ev)
            ev = self._ev
        self._goto(t_new)
        return out

    def _fire0(self, hi: int, now: float, out: list[K]) -> None:
        """Fire level-0 slots with tick <= ``hi``; the slot at the tick of ``now`` partially."""
        heap = self._heap0
        ring = self._ring0
        n = self._n0
        index = self._index
        t_now = _floor(now * self._tps)
        fired = 0
        while heap and heap[0] <= hi:
            u = heap[0]
            slot = ring[u % n]
            if not slot:
                heappop(heap)  # stale: emptied by cancel
                continue
            if u < t_now:
                heappop(heap)
                if len(slot) == 1:
                    for k in slot:
                        out.append(k)
                        del index[k]
                    fired += 1
                else:
                    keys = sorted(slot, key=slot.__getitem__)
                    for k in keys:
                        del index[k]
                    out.extend(keys)
                    fired += len(keys)
                slot.clear()
                continue
            # the current tick: exact comparison with each due time
            ready = [k for k, d in slot.items() if d <= now]
            if ready:
                if len(ready) > 1:
                    ready.sort(key=slot.__getitem__)
                for k in ready:
                    del slot[k]
                    del index[k]
                out.extend(ready)
                fired += len(ready)
                if not slot:
                    heappop(heap)
                    slot.clear()
            break
        self._fired += fired
        if len(heap) > 2 * n + 64:  # drop stale ticks so the heap stays bounded
            heap[:] = [t for t in set(heap) if ring[t % n]]
            heapify(heap)

    # ------------------------------------------------------------------ queries

    def _tick_start(self, t: int) -> float:
        """The smallest float time whose tick is >= ``t``."""
        tps = self._tps
        x = t / tps
        while _floor(x * tps) < t:
            x = math.nextafter(x, _INF)
        while True:
            y = math.nextafter(x, _NEG_INF)
            if _floor(y * tps) < t:
                return x
            x = y

    def next_deadline(self) -> float | None:
        """The earliest time at which ``advance`` has work; ``None`` if the wheel is empty.

        If the earliest non-empty slot is a sub-second (tick) slot, this is the exact minimum
        due time of its entries; if the earliest work is a cascade from a higher level or the
        overflow (or a chunk of a spread cascade), it is the start of the tick at which that
        work must run, which is never later than any due time in that slot. It may be at or
        before ``now`` when past-due entries are pending. A loop that sleeps until this time and
        then calls ``advance`` is never more than a tick late and never wakes for an empty slot
        (after cancels have shrunk a draining slot, a cascade checkpoint may come early: that
        wake-up moves nothing and plans the next one).

        Runtime complexity: O(L) with occupancy bitmaps, plus O(k) for the k entries of the
        tick slot it reports.
        """
        if not self._index:
            return None
        heap = self._heap0
        ring = self._ring0
        n = self._n0
        while heap and not ring[heap[0] % n]:
            heappop(heap)
        ev = self._events()
        best = _INF if ev >= _FAR else self._tick_start(ev)
        if heap and heap[0] <= ev:
            best = min(best, min(ring[heap[0] % n].values()))
        return best

    def _all_slots(self) -> Iterator[tuple[int, int, list[dict[K, float]]]]:
        """(level, absolute slot number, segments) of every non-empty slot; level 0 in ticks."""
        ring0 = self._ring0
        for u in sorted(set(self._heap0)):
            if ring0[u % self._n0]:
                yield 0, u, [ring0[u % self._n0]]
        cs = (self._T, self._c1, self._c2, self._c3, self._c4)
        for level in (1, 2, 3, 4):
            occ = self._occ[level]
            n = self._n[level]
            first = cs[level] + 1
            while occ:
                low = occ & -occ
                occ ^= low
                i = low.bit_length() - 1
                yield level, first + (i - first) % n, self._rings[level][i]
        for day in self._ovf_days:
            yield 5, day, self._ovf[day]

    def upcoming(self, horizon: float, *, bucket: float | str = 60.0) -> list[tuple[float, int]]:
        """Counts of pending keys per time bucket over ``[now, now + horizon)``.

        ``bucket`` is a width in seconds (rounded to whole ticks) or ``"second"``, ``"minute"``,
        ``"hour"``. Buckets are aligned to multiples of their width (minutes start at :00
        seconds). Returns ``(bucket_start, count)`` for each non-empty bucket, in time order;
        keys already past due are counted in the bucket that holds ``now``. Use it to see a
        spike (say, midnight) before it fires.

        Runtime complexity: O(S + k) for S non-empty slots and k the entries in slots that are
        wider than a bucket or straddle the window's ends; a slot inside one bucket is counted
        with ``len()``.
        """
        horizon = _as_time("horizon", horizon)
        width = bucket_width(bucket)
        if horizon < 0:
            raise ValueError(f"horizon must be >= 0 seconds, got {horizon!r}")
        tps = self._tps
        bw = max(1, round(width * tps))  # bucket width in ticks
        now = self._now
        limit = now + horizon
        t_lim = _floor(limit * tps)
        t_now = _floor(now * tps)
        w = (1, *self._W[1:], self._W[4])
        counts: dict[int, int] = {}
        for level, a, segs in self._all_slots():
            lo, hi = a * w[level], (a + 1) * w[level]  # the slot covers ticks [lo, hi)
            if lo > t_lim:
                continue
            if lo > t_now and hi <= t_lim and lo // bw == (hi - 1) // bw:
                b = lo // bw
                counts[b] = counts.get(b, 0) + sum(len(s) for s in segs)
                continue
            for seg in segs:
                for due in seg.values():
                    if due < limit:
                        b = _floor(max(due, now) * tps) // bw
                        counts[b] = counts.get(b, 0) + 1
        return [(b * bw / tps, c) for b, c in sorted(counts.items())]

    def statistics(self) -> WheelStatistics:
        """A snapshot of sizes and counters. Runtime complexity: O(non-empty slots)."""
        levels = [0, 0, 0, 0, 0, 0]
        for level, _, segs in self._all_slots():
            levels[level] += sum(len(s) for s in segs)
        return WheelStatistics(
            pending=len(self._index),
            levels=tuple(levels[:5]),
            level_names=_LEVEL_NAMES[:5],
            overflow=levels[5],
            cascaded=self._cascaded,
            fired=self._fired,
            advances=self._advances,
        )

    # ------------------------------------------------------------------ invariants

    def _check(self) -> None:
        """Assert every internal invariant (O(n)); raises AssertionError naming the broken one."""
        t = self._T
        tps = self._tps
        w = self._W
        n = self._n
        days = self._days

        def fail(msg: str) -> None:
            raise AssertionError(msg)

        if _floor(self._now * tps) != t:
            fail(f"current tick {t} does not match now={self._now!r}")
        names = ("_c1", "_c2", "_c3", "_c4", "_lim0", "_lim1", "_lim2", "_lim3", "_lim4", "_roll")
        saved = [getattr(self, a) for a in names]
        self._set_limits()
        again = [getattr(self, a) for a in names]
        if saved != again:
            fail(f"cached slot numbers/limits {saved} differ from recomputed {again}")
        cs = (t, self._c1, self._c2, self._c3, self._c4)
        index = self._index
        seen = 0
        segments = 0
        if len(self._heap0) > 2 * n[0] + 64:
            fail(f"level-0 tick heap has {len(self._heap0)} entries, over its bound")
        if any(x < t for x in self._heap0):
            fail(f"tick heap holds ticks before the current tick {t}")
        heap_pos = {x % n[0] for x in self._heap0}

        def check_entries(slot: dict[K, float], where: str) -> None:
            for key, due in slot.items():
                if index.get(key) is not slot:
                    fail(f"index of {key!r} does not point at {where}")
                if due.__class__ is not float or due - due != 0.0:
                    fail(f"{key!r} has a bad due {due!r}")

        for i, slot in enumerate(self._ring0):
            if self._where.get(id(slot)) != (0, i):
                fail(f"slot map lost tick slot {i}")
            check_entries(slot, f"tick slot {i}")
            seen += len(slot)
            if slot and i not in heap_pos:
                fail(f"non-empty tick slot {i} is missing from the tick heap")
            for key, due in slot.items():
                if due <= self._now:
                    if i != t % n[0]:
                        fail(f"past-due {key!r} due {due!r} not in the current tick slot")
                    continue
                u = _floor(due * tps)
                if not (t <= u < (self._c1 + 2) * w[1] and u % n[0] == i):
                    fail(f"{key!r} due {due!r} (tick {u}) misplaced in tick slot {i} at tick {t}")

        def check_segments(level: int, i: int, segs: list[dict[K, float]], name: str) -> None:
            nonlocal seen, segments
            if not segs:
                fail(f"{name} is an empty segment list")
            for seg in segs:
                segments += 1
                if not seg or len(seg) > SEGMENT:
                    fail(f"{name} has a segment of {len(seg)} entries")
                if self._where.get(id(seg)) != (level, i):
                    fail(f"slot map lost a segment of {name}")
                check_entries(seg, name)
                seen += len(seg)

        for level in (1, 2, 3, 4):
            occ = self._occ[level]
            if occ >> n[level]:
                fail(f"level {level} occupancy has bits beyond its ring: {occ:b}")
            for i, segs in enumerate(self._rings[level]):
                name = f"level {level} slot {i}"
                if bool(occ >> i & 1) != bool(segs):
                    fail(f"occupancy bit of {name} is {occ >> i & 1}, it has {len(segs)} segments")
                if not segs:
                    continue
                check_segments(level, i, segs, name)
                if level == 4:
                    hi = cs[4] + days
                else:
                    hi = (cs[level + 1] + 2) * (w[level + 1] // w[level]) - 1
                for seg in segs:
                    for key, due in seg.items():
                        a = _floor(due * tps) // w[level]
                        if not (cs[level] + 1 <= a <= hi and a % n[level] == i):
                            fail(
                                f"{key!r} due {due!r} (slot number {a}) misplaced in {name}; "
                                f"allowed {cs[level] + 1}..{hi}"
                            )
        if self._ovf_days != sorted(self._ovf) or len(set(self._ovf_days)) != len(self._ovf):
            fail(f"overflow day list {self._ovf_days} is not the sorted overflow days")
        for day, segs in self._ovf.items():
            name = f"overflow day {day}"
            check_segments(5, day, segs, name)
            if day < cs[4] + days:
                fail(f"{name} is within the wheel (day now {cs[4]})")
            for seg in segs:
                for key, due in seg.items():
                    if _floor(due * tps) // w[4] != day:
                        fail(f"{key!r} due {due!r} misplaced in {name}")
        if seen != len(index):
            fail(f"index has {len(index)} keys but the slots hold {seen}")
        if len(self._where) != n[0] + segments:
            fail(f"slot map has {len(self._where)} slots, expected {n[0] + segments}")
        for level in (1, 2, 3, 4, 5):
            s, _, segs = self._source(level)
            if segs and self._window(level, s)[1] <= t:
                fail(f"level {level} slot {s} should have been cascaded before tick {t}")


def _size(segs: list[dict[K, float]]) -> int:
    """Entries in a segmented slot, counting full segments as full (an upper bound)."""
    return (len(segs) - 1) * SEGMENT + len(segs[-1])
