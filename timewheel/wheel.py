"""The hierarchical timing wheel: "what is due now?" in O(due), never O(pending).

See :class:`TimingWheel`. The wheel is a pure data structure: it never reads a clock, sleeps,
locks, does I/O or calls user code. Time is a parameter (``advance(now)``).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Hashable, Iterator, Sequence
from heapq import heapify, heappop, heappush
from itertools import repeat
from operator import countOf, setitem
from typing import Generic, TypeVar

from timewheel.errors import DuplicateKeyError
from timewheel.shards import SHARD_MASK, ShardedDict
from timewheel.wheeltimes import (
    WheelStatistics,
    as_time,
    bad_time,
    bucket_width,
    split_at_ticks,
)

__all__ = ["TimingWheel", "WheelStatistics", "bucket_width"]

K = TypeVar("K", bound=Hashable)

_floor = math.floor
_INF = math.inf
_NEG_INF = -math.inf
_FAR = 1 << 200  # an integer tick later than any real event
_BIG = 1e200  # add_many places a due time beyond this through add (the ticks would overflow)
_EXACT_TICKS = 1 << 53  # ticks below this compare exactly as floats (add_many splits a batch so)
_BY_SLOT_MAX = 8  # add_many splits a batch over at most this many slots (a pass over it each)

#: The wheel's levels, lowest first: the index of a level in its per-level arrays and in
#: :attr:`WheelStatistics.levels`. A slot of a level above the tick level cascades into the level
#: just below it; the overflow cascades into the day ring.
LEVEL_TICKS = 0
LEVEL_SECONDS = 1
LEVEL_MINUTES = 2
LEVEL_HOURS = 3
LEVEL_DAYS = 4
LEVEL_OVERFLOW = 5
_LEVEL_NAMES = ("sub-second", "seconds", "minutes", "hours", "days", "overflow")
_RING_LEVELS = (LEVEL_SECONDS, LEVEL_MINUTES, LEVEL_HOURS, LEVEL_DAYS)  # rings of segmented slots
# levels that cascade into the level below, top-down (the order a cascade must complete in)
_CASCADING_LEVELS = (LEVEL_OVERFLOW, LEVEL_DAYS, LEVEL_HOURS, LEVEL_MINUTES, LEVEL_SECONDS)
# A level's bit in TimingWheel._stale_levels. add() uses these precomputed bits rather than
# shifting by the level: with the shift, add ran 3% more CPU instructions per call (measured
# under cachegrind, 50,000 adds of bench_wheel.py's insert workload).
_SECONDS_STALE = 1 << LEVEL_SECONDS
_MINUTES_STALE = 1 << LEVEL_MINUTES
_HOURS_STALE = 1 << LEVEL_HOURS
# Slots in the seconds, minutes and hours rings: two of the unit above each (see TimingWheel).
_SECOND_SLOTS = 120
_MINUTE_SLOTS = 120
_HOUR_SLOTS = 48

#: A slot holding more entries than this is cascaded in chunks spread over the time before it is
#: needed; a smaller slot is cascaded in one piece just before its time (it costs < 0.5 ms).
DRAIN_CHUNK = 512
#: Slots above the sub-second level are lists of dict segments of at most this many entries, so
#: a cascade takes whole segments oldest-first instead of rescanning a big dict's deleted head.
#: 682 fills a dict's 1,024-slot table exactly (CPython grows a dict when it is two-thirds full):
#: 512 would leave a quarter of each segment's entry table unused (about 9 bytes per entry).
SEGMENT = 682


class TimingWheel(Generic[K]):
    """A hierarchical timing wheel of keys, each due at a float time in seconds.

    Levels as users think of them, each a ring of slots (dicts ``key -> due``)::

        level      slot width   slots  holds
        -----------------------------------------------------------------
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

    State: times are integer tick numbers (``floor(t / tick)``) and slots are found by absolute
    slot numbers (a tick number divided by the level's slot width in ticks; the ring index is
    that number modulo the ring size). Per-level arrays are indexed by the ``LEVEL_*``
    constants. ``add`` picks a level by comparing an entry's tick with the first ticks of the
    next second, minute, hour and day and the end of the day ring; those five limits and the
    current slot number of each level are kept as attributes, updated as time moves, because
    ``add`` and ``advance`` read them on every call.

    Memory: two dict entries (the key index and the slot) and the due float per pending entry;
    no per-entry objects and no reference cycles.

    Thread safety: none. The wheel is not thread-safe; the caller serializes every call (the
    trigger loop owns its wheel and holds a lock around each call if other threads add or
    cancel). No method blocks, calls back into user code, or reads a clock.
    """

    __slots__ = (
        "__weakref__",
        "_advances",
        "_cascade_tick",
        "_cascaded",
        "_chunk",
        "_current_day",
        "_current_hour",
        "_current_minute",
        "_current_second",
        "_current_tick",
        "_day_ring",
        "_day_ring_end_tick",
        "_days",
        "_fired",
        "_hour_ring",
        "_index",
        "_last_drain_tick",
        "_minute_ring",
        "_next_cascade_tick",
        "_next_day_tick",
        "_next_hour_tick",
        "_next_minute_tick",
        "_next_second_tick",
        "_now",
        "_occupancy",
        "_overflow",
        "_overflow_days",
        "_ring_sizes",
        "_rings",
        "_second_ring",
        "_segment_slot",
        "_slot_ticks",
        "_stale_levels",
        "_tick",
        "_tick_heap",
        "_tick_ring",
        "_tick_slots",
        "_ticks_per_hour",
        "_ticks_per_minute",
        "_ticks_per_second",
    )

    def __init__(self, *, tick: float = 0.001, days: int = 8, start: float = 0.0) -> None:
        """Create an empty wheel whose current time is ``start``.

        ``tick`` (seconds, 0.001 to 1.0, dividing one second evenly) is the width of a
        sub-second slot: the most an entry can be late when the caller advances once per tick.
        ``days`` (>= 2) is the number of day slots; entries due later than that wait in the
        sorted overflow. ``start`` is a number of seconds (the epoch is the caller's).
        """
        if isinstance(tick, bool) or not isinstance(tick, (int, float)):
            raise TypeError(f"tick must be a number of seconds, got {tick!r}")
        if not 0.001 <= tick <= 1.0:
            raise ValueError(f"tick must be between 0.001 and 1.0 seconds, got {tick!r}")
        ticks_per_second = round(1.0 / tick)
        if abs(ticks_per_second * tick - 1.0) > 1e-9:
            raise ValueError(
                f"tick must divide one second evenly (0.001, 0.002, 0.005, 0.01, ..., 0.5, 1.0), "
                f"got {tick!r}; try {1.0 / ticks_per_second!r}"
            )
        if isinstance(days, bool) or not isinstance(days, int):
            raise TypeError(f"days must be an int, got {days!r}")
        if days < 2:
            raise ValueError(f"days must be at least 2, got {days!r}")
        start = as_time("start", start)
        self._tick = float(tick)
        self._ticks_per_second = ticks_per_second
        self._days = days
        day_ticks = 86400 * ticks_per_second
        # ticks per slot, per level (an overflow slot is a day)
        self._slot_ticks: tuple[int, ...] = (
            1,
            ticks_per_second,
            60 * ticks_per_second,
            3600 * ticks_per_second,
            day_ticks,
            day_ticks,
        )
        # Named copies for add(), which reads one on every call: indexing _slot_ticks there cost
        # 1% more instructions per add (cachegrind, bench_wheel.py's insert workload).
        self._ticks_per_minute = self._slot_ticks[LEVEL_MINUTES]
        self._ticks_per_hour = self._slot_ticks[LEVEL_HOURS]
        self._tick_slots = 2 * ticks_per_second
        # slots per ring, per level (the overflow is not a ring)
        self._ring_sizes = (self._tick_slots, _SECOND_SLOTS, _MINUTE_SLOTS, _HOUR_SLOTS, days)
        # The tick ring: one dict per tick. The rings above (and overflow days): a list of dict
        # segments of at most SEGMENT entries, oldest first, so a big slot drains without
        # rescanning. _rings[LEVEL_TICKS] is empty: the tick ring has no segments.
        self._tick_ring: list[dict[K, float]] = [{} for _ in range(self._tick_slots)]
        self._rings: list[list[list[dict[K, float]]]] = [[]] + [
            [[] for _ in range(self._ring_sizes[level])] for level in _RING_LEVELS
        ]
        self._second_ring = self._rings[LEVEL_SECONDS]
        self._minute_ring = self._rings[LEVEL_MINUTES]
        self._hour_ring = self._rings[LEVEL_HOURS]
        self._day_ring = self._rings[LEVEL_DAYS]
        # id() of every tick slot and segment -> (level, ring index, or day for the overflow)
        self._segment_slot: dict[int, tuple[int, int]] = {
            id(slot): (LEVEL_TICKS, place) for place, slot in enumerate(self._tick_ring)
        }
        # per level above the ticks: bit i set when the slot at ring index i is non-empty
        self._occupancy = [0, 0, 0, 0, 0]
        # ticks of the non-empty tick slots (may hold ticks of slots emptied since)
        self._tick_heap: list[int] = []
        self._overflow: dict[int, list[dict[K, float]]] = {}
        self._overflow_days: list[int] = []
        # key -> its slot (segment); sharded, so no add grows one large table (timewheel.shards)
        self._index: ShardedDict[K, dict[K, float]] = ShardedDict()
        self._now = start
        self._current_tick = _floor(start * ticks_per_second)
        # per source level: the tick of its last partial drain
        self._last_drain_tick = [0, 0, 0, 0, 0, 0]
        # per source level: the next tick at which it must cascade (cached)
        self._cascade_tick = [_FAR] * 6
        # bit L set: _cascade_tick[L] must be recomputed before it is read
        self._stale_levels = 0
        self._next_cascade_tick = _FAR  # min(_cascade_tick) when no level is stale
        self._chunk = DRAIN_CHUNK
        self._cascaded = 0
        self._fired = 0
        self._advances = 0
        self._current_second = self._current_minute = 0
        self._current_hour = self._current_day = 0
        self._next_second_tick = self._next_minute_tick = self._next_hour_tick = 0
        self._next_day_tick = self._day_ring_end_tick = 0
        self._set_current_slots()

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
        part = self._index.shards[hash(key) & SHARD_MASK]
        if key in part:
            raise DuplicateKeyError(
                f"key {key!r} is already scheduled in the wheel (due {part[key][key]!r}); "
                f"cancel() it first to reschedule"
            )
        if due.__class__ is not float:
            due = as_time("due", due)
        ticks_per_second = self._ticks_per_second
        try:
            tick = _floor(due * ticks_per_second)
        except (ValueError, OverflowError):  # NaN, infinite, or too far for a tick number
            if due - due != 0.0 or due > self._now:
                raise bad_time("due", due) from None
            tick = self._current_tick  # a finite time long past: due now
        if tick < self._next_second_tick:
            if due <= self._now:
                tick = self._current_tick  # past due: the current tick
            slot = self._tick_ring[tick % self._tick_slots]
            if not slot:
                heappush(self._tick_heap, tick)
        else:
            if tick < self._next_minute_tick:
                level = LEVEL_SECONDS
                ring_index = tick // ticks_per_second % _SECOND_SLOTS
                segments = self._second_ring[ring_index]
                self._stale_levels |= _SECONDS_STALE
            elif tick < self._next_hour_tick:
                level = LEVEL_MINUTES
                ring_index = tick // self._ticks_per_minute % _MINUTE_SLOTS
                segments = self._minute_ring[ring_index]
                self._stale_levels |= _MINUTES_STALE
            elif tick < self._next_day_tick:
                level = LEVEL_HOURS
                ring_index = tick // self._ticks_per_hour % _HOUR_SLOTS
                segments = self._hour_ring[ring_index]
                self._stale_levels |= _HOURS_STALE
            else:
                self._add_far(key, due, tick, part)
                return
            if segments:
                slot = segments[-1]
                if len(slot) >= SEGMENT:
                    slot = self._new_segment(level, ring_index, segments)
            else:
                slot = self._new_segment(level, ring_index, segments)
        slot[key] = due
        part[key] = slot

    def add_many(self, keys: Sequence[K], dues: Sequence[float]) -> None:
        """:meth:`add` each key of *keys* at the due time in the same position of *dues*, raising
        as ``add`` does (keys placed before the error stay placed), in the order given, so equal
        due times keep it. O(1) per key; a segment at a time when it can (:meth:`_add_by_slot`).
        """
        if len(keys) > 1 and self._add_by_slot(keys, dues):
            return
        index, add, tps = self._index.shards, self.add, self._ticks_per_second
        floor, big, first_second = _floor, _BIG, self._next_second_tick // tps
        slots: dict[int, list[dict[K, float]]] = {}  # second -> its slot's segments: no sort
        last_second = -1  # the second of the key before (consecutive keys often share one)
        segments: list[dict[K, float]] | None = None  # its slot's segments
        for key, due in zip(keys, dues, strict=True):
            part = index[hash(key) & SHARD_MASK]
            if due.__class__ is float and -big < due < big and key not in part:
                second = floor(due * tps) // tps
                if second != last_second:
                    segments, last_second = slots.get(second), second
                if segments is None:
                    add(key, due)
                    if second >= first_second:
                        segments = slots[second] = self._segments_holding(part[key])[2]
                elif len(segments[-1]) < SEGMENT:
                    slot = segments[-1]
                    slot[key] = due
                    part[key] = slot
                else:
                    add(key, due)  # a new segment, appended to `segments`
                continue
            add(key, due)

    def _add_by_slot(self, keys: Sequence[K], dues: Sequence[float]) -> bool:
        """:meth:`add_many` with the work per key in C, for distinct new keys due above the tick
        level in at most ``_BY_SLOT_MAX`` slots (else False, nothing done). Earned its place in
        benchmarks/bench_batch.py --memory: the per-key loop was 4,000 instructions a key."""
        if countOf(map(type, dues), float) != len(dues) or not math.isfinite(sum(dues)):
            return False
        tps, lo, hi = self._ticks_per_second, min(dues), max(dues)
        if not lo > -_BIG or not hi < _BIG:
            return False
        first, last = _floor(lo * tps), _floor(hi * tps)
        if first < self._next_second_tick or last >= _EXACT_TICKS:
            return False  # the tick level (a heap entry per tick, past due times); or too far
        ends: list[int] = []  # the first tick after each slot the batch spans but the last
        end = self._slot_end(first)
        while end <= last:
            if len(ends) == _BY_SLOT_MAX - 1:
                return False
            ends.append(end)
            end = self._slot_end(end)
        holders = self._index.holders(keys)  # each key's part of the index, found once (in C)
        if any(map(dict.__contains__, holders, keys)) or len(set(keys)) != len(keys):
            return False  # add() names the key
        for part_dues, part_keys, part_holders in split_at_ticks(dues, tps, ends, keys, holders):
            key = part_keys[0]
            self.add(key, part_dues[0])  # the slot's bookkeeping, as for one key
            segment = part_holders[0][key]
            level, place, segments = self._segments_holding(segment)
            placed = [segment]  # each key's segment
            done, count = 1, len(part_keys)
            while done < count:
                room = SEGMENT - len(segment)
                if room <= 0:
                    segment, room = self._new_segment(level, place, segments), SEGMENT
                upto = min(count, done + room)
                segment.update(zip(part_keys[done:upto], part_dues[done:upto], strict=True))
                placed.extend(repeat(segment, upto - done))
                done = upto
            any(map(setitem, part_holders, part_keys, placed))  # in C: setitem gives None
        return True

    def _slot_end(self, tick: int) -> int:
        """The first tick after the slot (above the tick level) that holds *tick*."""
        for limit, width in (
            (self._next_minute_tick, self._ticks_per_second),
            (self._next_hour_tick, self._ticks_per_minute),
            (self._next_day_tick, self._ticks_per_hour),
        ):
            if tick < limit:
                return (tick // width + 1) * width
        return (tick // self._slot_ticks[LEVEL_DAYS] + 1) * self._slot_ticks[LEVEL_DAYS]

    def _segments_holding(self, segment: dict[K, float]) -> tuple[int, int, list[dict[K, float]]]:
        """``(level, place, segments)`` of the slot above the ticks that *segment* is in."""
        level, place = self._segment_slot[id(segment)]
        segments = self._overflow[place] if level == LEVEL_OVERFLOW else self._rings[level][place]
        return level, place, segments

    def _add_far(self, key: K, due: float, tick: int, part: dict[K, dict[K, float]]) -> None:
        """``add`` for the day ring and the overflow (*part*: the index's part for *key*)."""
        day = tick // self._slot_ticks[LEVEL_DAYS]
        if tick < self._day_ring_end_tick:
            level = LEVEL_DAYS
            place = day % self._days
            segments: list[dict[K, float]] | None = self._day_ring[place]
        else:
            level = LEVEL_OVERFLOW
            place = day
            segments = self._overflow.get(day)
        self._stale_levels |= 1 << level
        full = not segments or len(segments[-1]) >= SEGMENT
        # not None when `full` is false
        slot = self._new_segment(level, place, segments) if full else segments[-1]  # type: ignore[index]
        slot[key] = due
        part[key] = slot

    def _new_segment(
        self, level: int, place: int, segments: list[dict[K, float]] | None
    ) -> dict[K, float]:
        """Append a fresh segment to a slot of ``level`` (above the ticks) and return it.

        ``place`` is the ring index, or the day number of an overflow slot; ``segments`` is the
        slot's segment list (None for an overflow day not opened yet).
        """
        if not segments:
            if level == LEVEL_OVERFLOW:
                if segments is None:
                    segments = self._overflow[place] = []
                    insort(self._overflow_days, place)
            else:
                segments = self._rings[level][place]
                self._occupancy[level] |= 1 << place
        segment: dict[K, float] = {}
        segments.append(segment)
        self._segment_slot[id(segment)] = (level, place)
        return segment

    def cancel(self, key: object) -> bool:
        """Remove ``key`` if pending; return whether it was.

        The entry is freed at once (no tombstone). Runtime complexity: O(1) (O(d) for the d
        overflow days when it empties one).
        """
        # any object may be asked
        slot = self._index.shards[hash(key) & SHARD_MASK].pop(key, None)  # type: ignore[arg-type]
        if slot is None:
            return False
        del slot[key]  # type: ignore[arg-type]  # present: the index said so
        if not slot:
            self._emptied(slot)
        return True

    def _emptied(self, segment: dict[K, float]) -> None:
        """Bookkeeping when ``cancel`` emptied a tick slot or a segment of a higher level."""
        level, place = self._segment_slot[id(segment)]
        if level == LEVEL_TICKS:
            segment.clear()  # frees a large table; its tick in the tick heap is skipped later
            return
        del self._segment_slot[id(segment)]
        self._stale_levels |= 1 << level
        segments = self._overflow[place] if level == LEVEL_OVERFLOW else self._rings[level][place]
        for position, other in enumerate(segments):
            if other is segment:
                del segments[position]
                break
        if not segments:
            self._drop_slot(level, place)

    def _drop_slot(self, level: int, place: int) -> None:
        """A slot of ``level`` (above the ticks) has no segments left."""
        if level == LEVEL_OVERFLOW:
            del self._overflow[place]
            del self._overflow_days[bisect_left(self._overflow_days, place)]
        else:
            self._occupancy[level] &= ~(1 << place)

    # ------------------------------------------------------------------ time bookkeeping

    def _set_current_slots(self) -> None:
        """Recompute each level's current slot number and the limits ``add`` compares with."""
        tick = self._current_tick
        slot_ticks = self._slot_ticks
        second = self._current_second = tick // slot_ticks[LEVEL_SECONDS]
        minute = self._current_minute = tick // slot_ticks[LEVEL_MINUTES]
        hour = self._current_hour = tick // slot_ticks[LEVEL_HOURS]
        day = self._current_day = tick // slot_ticks[LEVEL_DAYS]
        self._next_second_tick = (second + 1) * slot_ticks[LEVEL_SECONDS]
        self._next_minute_tick = (minute + 1) * slot_ticks[LEVEL_MINUTES]
        self._next_hour_tick = (hour + 1) * slot_ticks[LEVEL_HOURS]
        self._next_day_tick = (day + 1) * slot_ticks[LEVEL_DAYS]
        self._day_ring_end_tick = (day + self._days) * slot_ticks[LEVEL_DAYS]

    def _current_slots(self) -> tuple[int, int, int, int, int]:
        """The current slot number of each level, indexed by level (the tick level: the tick)."""
        return (
            self._current_tick,
            self._current_second,
            self._current_minute,
            self._current_hour,
            self._current_day,
        )

    def _source(self, level: int) -> tuple[int, int, list[dict[K, float]]]:
        """The earliest non-empty slot that ``level`` (above the ticks) drains downwards.

        Returns (slot number, ring index or day, segments); segments is empty if none.
        """
        if level == LEVEL_OVERFLOW:
            if not self._overflow_days:
                return 0, 0, []
            day = self._overflow_days[0]
            return day, day, self._overflow[day]
        occupancy = self._occupancy[level]
        if not occupancy:
            return 0, 0, []
        size = self._ring_sizes[level]
        if level == LEVEL_SECONDS:
            first = self._current_second + 1
        elif level == LEVEL_MINUTES:
            first = self._current_minute + 1
        elif level == LEVEL_HOURS:
            first = self._current_hour + 1
        else:
            first = self._current_day + 1
        start = first % size
        if occupancy >> start & 1:  # the very next slot (the common case on a busy level)
            return first, start, self._rings[level][start]
        # rotate the bitmap so that bit 0 is the next slot, then take its lowest set bit
        rotated = ((occupancy >> start) | (occupancy << (size - start))) & ((1 << size) - 1)
        ahead = (rotated & -rotated).bit_length() - 1
        place = (start + ahead) % size
        return first + ahead, place, self._rings[level][place]

    def _window(self, level: int, slot_number: int) -> tuple[int, int]:
        """Ticks [start, end) during which source slot number ``slot_number`` of ``level``
        drains."""
        if level == LEVEL_OVERFLOW:
            start = (slot_number - self._days) * self._slot_ticks[LEVEL_DAYS]
            return start, start + self._slot_ticks[LEVEL_DAYS]
        width = self._slot_ticks[level]
        return (slot_number - 1) * width, slot_number * width

    def _level_cascade_tick(self, level: int) -> int:
        """The next tick at which ``level`` must move entries down (``_FAR`` if none)."""
        slot_number, _, segments = self._source(level)
        if not segments:
            return _FAR
        start, end = self._window(level, slot_number)
        tick = end - 1  # a small slot moves in one piece, just before its time
        chunk = self._chunk
        if len(segments) > 1 or len(segments[0]) > chunk:
            start = max(start, self._last_drain_tick[level])
            size = _size(segments)
            if size > chunk and tick > start:
                tick = start - (-chunk * (tick - start) // size)  # when a chunk's worth is owed
        after_now = self._current_tick + 1
        return tick if tick > after_now else after_now

    def _next_cascade(self) -> int:
        """The earliest tick at which any level above the ticks has cascade work.

        Each level's tick is cached; only the levels marked stale are computed again.
        """
        stale = self._stale_levels
        if stale:
            cascade_tick = self._cascade_tick
            for level in _CASCADING_LEVELS:
                if stale >> level & 1:
                    cascade_tick[level] = self._level_cascade_tick(level)
            self._stale_levels = 0
            self._next_cascade_tick = min(cascade_tick)
        return self._next_cascade_tick

    def _goto(self, tick: int) -> None:
        """Move the current tick forward to ``tick`` (no tick slot before ``tick`` is pending)."""
        if tick >= self._next_second_tick:
            # Crossing a second boundary (or more). Any draining slot whose time starts by
            # ``tick`` must be empty first: complete them top-down while time is still before
            # it. (Only when work was owed at ``tick`` itself; see _level_cascade_tick's clamp.)
            self._next_cascade()
            cascade_tick = self._cascade_tick
            for level in _CASCADING_LEVELS:
                if cascade_tick[level] <= tick:
                    slot_number, place, segments = self._source(level)
                    if segments and self._window(level, slot_number)[1] <= tick:
                        self._move(level, place, segments, _FAR)
                        self._next_cascade()
            self._current_tick = tick
            # Within the same minute only the second changed: update just its two numbers
            # (bench_wheel.py fire-all measured the full recomputation on every second).
            if tick < self._next_minute_tick:
                second = self._current_second = tick // self._ticks_per_second
                self._next_second_tick = (second + 1) * self._ticks_per_second
            else:
                self._set_current_slots()
        else:
            self._current_tick = tick

    def _drain(self, tick: int) -> None:
        """At ``tick`` (the current tick), move each draining slot's share of entries one level
        down."""
        cascade_tick = self._cascade_tick
        for level in _CASCADING_LEVELS:
            if self._stale_levels:
                self._next_cascade()
            if cascade_tick[level] > tick:
                continue
            slot_number, place, segments = self._source(level)
            owed = 0
            if segments:
                start, end = self._window(level, slot_number)
                if start <= tick:  # draining
                    start = max(start, self._last_drain_tick[level])
                    if tick >= end - 1 or end - 1 <= start:
                        owed = _FAR
                    else:
                        size = _size(segments)
                        owed = -(-size * (tick - start) // (end - 1 - start))
                        if owed < self._chunk and owed < size:
                            owed = 0  # planned when the slot was bigger (cancels shrank it)
            if owed:
                self._move(level, place, segments, owed)
                self._last_drain_tick[level] = tick
            else:
                # Nothing owed at this checkpoint after all: plan the level again (its next
                # checkpoint is after the current tick, so advance() always makes progress).
                self._stale_levels |= 1 << level
        self._next_cascade()

    def _move(self, level: int, place: int, segments: list[dict[K, float]], count: int) -> None:
        """Move whole segments, oldest first, of slot ``place`` of ``level`` one level down,
        until at least ``count`` entries moved or the slot is empty."""
        target = level - 1
        index = self._index.shards
        segment_slot = self._segment_slot
        ticks_per_second = self._ticks_per_second
        moved = 0
        while segments and moved < count:
            segment = segments.pop(0)
            del segment_slot[id(segment)]
            moved += len(segment)
            if target == LEVEL_TICKS:
                tick_ring = self._tick_ring
                ring_size = self._tick_slots
                fresh = []
                for key, due in segment.items():
                    tick = _floor(due * ticks_per_second)
                    slot = tick_ring[tick % ring_size]
                    if not slot:
                        fresh.append(tick)
                    slot[key] = due
                    index[hash(key) & SHARD_MASK][key] = slot
                if fresh:
                    heap = self._tick_heap
                    heap += fresh
                    heapify(heap)
            else:
                ring = self._rings[target]
                ring_size = self._ring_sizes[target]
                width = self._slot_ticks[target]
                for key, due in segment.items():
                    target_place = _floor(due * ticks_per_second) // width % ring_size
                    target_segments = ring[target_place]
                    if target_segments and len(target_segments[-1]) < SEGMENT:
                        slot = target_segments[-1]
                    else:
                        slot = self._new_segment(target, target_place, target_segments)
                    slot[key] = due
                    index[hash(key) & SHARD_MASK][key] = slot
            segment.clear()
        self._cascaded += moved
        self._stale_levels |= (1 << level) | (1 << target)
        if not segments:
            self._drop_slot(level, place)

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
            now = as_time("now", now)
        elif now - now != 0.0:  # NaN or +-inf (x - x is 0.0 for every finite float)
            raise bad_time("now", now)
        self._advances += 1
        if now > self._now:
            self._now = now
        else:
            now = self._now
        tick_now = _floor(now * self._ticks_per_second)
        out: list[K] = []
        heap = self._tick_heap
        if tick_now == self._current_tick:
            if heap and heap[0] <= tick_now:
                self._fire_ticks(tick_now, now, out)
            return out
        cascade_tick = self._next_cascade() if self._stale_levels else self._next_cascade_tick
        while True:
            # Fire the ticks before the next cascade checkpoint first: the cascade at that tick
            # may still bring entries into that tick itself (a slot completed at the last tick
            # of its window leaves the level below one more move), and they must not fire
            # after entries of that tick that happened to arrive earlier.
            last = tick_now if tick_now < cascade_tick else cascade_tick - 1
            if heap and heap[0] <= last:
                self._fire_ticks(last, now, out)
            if cascade_tick > tick_now:
                break
            self._goto(cascade_tick)
            self._drain(cascade_tick)
            cascade_tick = self._next_cascade_tick
        self._goto(tick_now)
        return out

    def _fire_ticks(self, last: int, now: float, out: list[K]) -> None:
        """Fire the tick slots up to tick ``last``; the slot at the tick of ``now`` partially."""
        heap = self._tick_heap
        ring = self._tick_ring
        ring_size = self._tick_slots
        index = self._index.shards
        tick_now = _floor(now * self._ticks_per_second)
        fired = 0
        while heap and heap[0] <= last:
            tick = heap[0]
            slot = ring[tick % ring_size]
            if not slot:
                heappop(heap)  # emptied by cancel since it was pushed
                continue
            if tick < tick_now:
                heappop(heap)
                if len(slot) == 1:  # the common case: no sort, no list
                    for key in slot:
                        out.append(key)
                        del index[hash(key) & SHARD_MASK][key]
                    fired += 1
                else:
                    keys = sorted(slot, key=slot.__getitem__)
                    for key in keys:
                        del index[hash(key) & SHARD_MASK][key]
                    out.extend(keys)
                    fired += len(keys)
                slot.clear()
                continue
            # the current tick: exact comparison with each due time
            ready = [key for key, due in slot.items() if due <= now]
            if ready:
                if len(ready) > 1:
                    ready.sort(key=slot.__getitem__)
                for key in ready:
                    del slot[key]
                    del index[hash(key) & SHARD_MASK][key]
                out.extend(ready)
                fired += len(ready)
                if not slot:
                    heappop(heap)
                    slot.clear()
            break
        self._fired += fired
        if len(heap) > 2 * ring_size + 64:  # drop the ticks of emptied slots: a bounded heap
            heap[:] = [tick for tick in set(heap) if ring[tick % ring_size]]
            heapify(heap)

    # ------------------------------------------------------------------ queries

    def _tick_start(self, tick: int) -> float:
        """The smallest float time whose tick is >= ``tick``."""
        ticks_per_second = self._ticks_per_second
        time = tick / ticks_per_second
        while _floor(time * ticks_per_second) < tick:
            time = math.nextafter(time, _INF)
        while True:
            earlier = math.nextafter(time, _NEG_INF)
            if _floor(earlier * ticks_per_second) < tick:
                return time
            time = earlier

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
        heap = self._tick_heap
        ring = self._tick_ring
        ring_size = self._tick_slots
        while heap and not ring[heap[0] % ring_size]:
            heappop(heap)
        cascade_tick = self._next_cascade()
        best = _INF if cascade_tick >= _FAR else self._tick_start(cascade_tick)
        if heap and heap[0] <= cascade_tick:
            best = min(best, min(ring[heap[0] % ring_size].values()))
        return best

    def _all_slots(self) -> Iterator[tuple[int, int, list[dict[K, float]]]]:
        """(level, slot number, segments) of every non-empty slot; tick slots numbered by tick."""
        ring = self._tick_ring
        ring_size = self._tick_slots
        for tick in sorted(set(self._tick_heap)):
            if ring[tick % ring_size]:
                yield LEVEL_TICKS, tick, [ring[tick % ring_size]]
        current = self._current_slots()
        for level in _RING_LEVELS:
            occupancy = self._occupancy[level]
            size = self._ring_sizes[level]
            first = current[level] + 1
            while occupancy:
                lowest = occupancy & -occupancy
                occupancy ^= lowest
                place = lowest.bit_length() - 1
                yield level, first + (place - first) % size, self._rings[level][place]
        for day in self._overflow_days:
            yield LEVEL_OVERFLOW, day, self._overflow[day]

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
        horizon = as_time("horizon", horizon)
        width = bucket_width(bucket)
        if horizon < 0:
            raise ValueError(f"horizon must be >= 0 seconds, got {horizon!r}")
        ticks_per_second = self._ticks_per_second
        bucket_ticks = max(1, round(width * ticks_per_second))
        now = self._now
        limit = now + horizon
        limit_tick = _floor(limit * ticks_per_second)
        tick_now = _floor(now * ticks_per_second)
        slot_ticks = self._slot_ticks
        counts: dict[int, int] = {}
        for level, slot_number, segments in self._all_slots():
            # the slot covers ticks [first, end)
            first = slot_number * slot_ticks[level]
            end = (slot_number + 1) * slot_ticks[level]
            if first > limit_tick:
                continue
            if (
                first > tick_now
                and end <= limit_tick
                and first // bucket_ticks == (end - 1) // bucket_ticks
            ):
                number = first // bucket_ticks
                counts[number] = counts.get(number, 0) + sum(len(segment) for segment in segments)
                continue
            for segment in segments:
                for due in segment.values():
                    if due < limit:
                        number = _floor(max(due, now) * ticks_per_second) // bucket_ticks
                        counts[number] = counts.get(number, 0) + 1
        return [
            (number * bucket_ticks / ticks_per_second, count)
            for number, count in sorted(counts.items())
        ]

    def statistics(self) -> WheelStatistics:
        """A snapshot of sizes and counters. Runtime complexity: O(non-empty slots)."""
        levels = [0, 0, 0, 0, 0, 0]
        for level, _, segments in self._all_slots():
            levels[level] += sum(len(segment) for segment in segments)
        return WheelStatistics(
            pending=len(self._index),
            levels=tuple(levels[:LEVEL_OVERFLOW]),
            level_names=_LEVEL_NAMES[:LEVEL_OVERFLOW],
            overflow=levels[LEVEL_OVERFLOW],
            cascaded=self._cascaded,
            fired=self._fired,
            advances=self._advances,
        )

    # ------------------------------------------------------------------ invariants

    def _check(self) -> None:
        """Assert every internal invariant (O(n)); raises AssertionError naming the broken one."""
        tick_now = self._current_tick
        ticks_per_second = self._ticks_per_second
        slot_ticks = self._slot_ticks
        ring_sizes = self._ring_sizes
        days = self._days

        def fail(msg: str) -> None:
            raise AssertionError(msg)

        if _floor(self._now * ticks_per_second) != tick_now:
            fail(f"current tick {tick_now} does not match now={self._now!r}")
        names = (
            "_current_second",
            "_current_minute",
            "_current_hour",
            "_current_day",
            "_next_second_tick",
            "_next_minute_tick",
            "_next_hour_tick",
            "_next_day_tick",
            "_day_ring_end_tick",
        )
        saved = [getattr(self, name) for name in names]
        self._set_current_slots()
        again = [getattr(self, name) for name in names]
        if saved != again:
            fail(f"cached slot numbers/limits {saved} differ from recomputed {again}")
        current = self._current_slots()
        index = self._index
        seen = 0
        segment_count = 0
        tick_slots = ring_sizes[LEVEL_TICKS]
        if len(self._tick_heap) > 2 * tick_slots + 64:
            fail(f"tick heap has {len(self._tick_heap)} entries, over its bound")
        if any(tick < tick_now for tick in self._tick_heap):
            fail(f"tick heap holds ticks before the current tick {tick_now}")
        heap_places = {tick % tick_slots for tick in self._tick_heap}

        def check_entries(slot: dict[K, float], where: str) -> None:
            for key, due in slot.items():
                if index.get(key) is not slot:
                    fail(f"index of {key!r} does not point at {where}")
                if due.__class__ is not float or due - due != 0.0:
                    fail(f"{key!r} has a bad due {due!r}")

        tick_ring_end = (self._current_second + 2) * slot_ticks[LEVEL_SECONDS]
        for place, slot in enumerate(self._tick_ring):
            if self._segment_slot.get(id(slot)) != (LEVEL_TICKS, place):
                fail(f"slot map lost tick slot {place}")
            check_entries(slot, f"tick slot {place}")
            seen += len(slot)
            if slot and place not in heap_places:
                fail(f"non-empty tick slot {place} is missing from the tick heap")
            for key, due in slot.items():
                if due <= self._now:
                    if place != tick_now % tick_slots:
                        fail(f"past-due {key!r} due {due!r} not in the current tick slot")
                    continue
                tick = _floor(due * ticks_per_second)
                if not (tick_now <= tick < tick_ring_end and tick % tick_slots == place):
                    fail(
                        f"{key!r} due {due!r} (tick {tick}) misplaced in tick slot {place} "
                        f"at tick {tick_now}"
                    )

        def check_segments(
            level: int, place: int, segments: list[dict[K, float]], name: str
        ) -> None:
            nonlocal seen, segment_count
            if not segments:
                fail(f"{name} is an empty segment list")
            for segment in segments:
                segment_count += 1
                if not segment or len(segment) > SEGMENT:
                    fail(f"{name} has a segment of {len(segment)} entries")
                if self._segment_slot.get(id(segment)) != (level, place):
                    fail(f"slot map lost a segment of {name}")
                check_entries(segment, name)
                seen += len(segment)

        for level in _RING_LEVELS:
            occupancy = self._occupancy[level]
            size = ring_sizes[level]
            if occupancy >> size:
                fail(f"level {level} occupancy has bits beyond its ring: {occupancy:b}")
            for place, segments in enumerate(self._rings[level]):
                name = f"level {level} slot {place}"
                if bool(occupancy >> place & 1) != bool(segments):
                    fail(
                        f"occupancy bit of {name} is {occupancy >> place & 1}, "
                        f"it has {len(segments)} segments"
                    )
                if not segments:
                    continue
                check_segments(level, place, segments, name)
                if level == LEVEL_DAYS:
                    highest = current[LEVEL_DAYS] + days
                else:
                    per_slot_above = slot_ticks[level + 1] // slot_ticks[level]
                    highest = (current[level + 1] + 2) * per_slot_above - 1
                for segment in segments:
                    for key, due in segment.items():
                        number = _floor(due * ticks_per_second) // slot_ticks[level]
                        if not (current[level] + 1 <= number <= highest and number % size == place):
                            fail(
                                f"{key!r} due {due!r} (slot number {number}) misplaced in "
                                f"{name}; allowed {current[level] + 1}..{highest}"
                            )
        overflow_days = self._overflow_days
        if overflow_days != sorted(self._overflow) or len(set(overflow_days)) != len(
            self._overflow
        ):
            fail(f"overflow day list {overflow_days} is not the sorted overflow days")
        for day, segments in self._overflow.items():
            name = f"overflow day {day}"
            check_segments(LEVEL_OVERFLOW, day, segments, name)
            if day < current[LEVEL_DAYS] + days:
                fail(f"{name} is within the wheel (day now {current[LEVEL_DAYS]})")
            for segment in segments:
                for key, due in segment.items():
                    if _floor(due * ticks_per_second) // slot_ticks[LEVEL_DAYS] != day:
                        fail(f"{key!r} due {due!r} misplaced in {name}")
        if seen != len(index):
            fail(f"index has {len(index)} keys but the slots hold {seen}")
        if len(self._segment_slot) != tick_slots + segment_count:
            fail(
                f"slot map has {len(self._segment_slot)} slots, "
                f"expected {tick_slots + segment_count}"
            )
        for level in _CASCADING_LEVELS:
            slot_number, _, segments = self._source(level)
            if segments and self._window(level, slot_number)[1] <= tick_now:
                fail(
                    f"level {level} slot {slot_number} should have been cascaded before tick "
                    f"{tick_now}"
                )


def _size(segments: list[dict[K, float]]) -> int:
    """Entries in a segmented slot, counting full segments as full (an upper bound)."""
    return (len(segments) - 1) * SEGMENT + len(segments[-1])
