"""Operator figures of a store, as plain data: the upcoming load with its herd warning.

Shared by ``timewheel inspect`` and the dashboard so both judge a store the same way. Everything
here reads through :class:`~timewheel.stores.base.SupportsInspection`; nothing scans every task.
"""

from __future__ import annotations

import math
import sys
import threading
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

from timewheel.stores.base import Store, SupportsInspection
from timewheel.task import TaskState

__all__ = [
    "HERD_EXAMINED",
    "HERD_FACTOR",
    "HERD_MIN",
    "LATENESS_SAMPLE",
    "RecentValues",
    "activity_report",
    "herd_behind",
    "load_report",
    "percentile",
]

HERD_MIN = 100
"""A histogram bucket with at least this many tasks ..."""
HERD_FACTOR = 10.0
"""... and this many times the average bucket is a thundering herd."""
HERD_EXAMINED = 10_000
"""At most this many of a herd's instances are read to name the schedules behind it."""
LATENESS_SAMPLE = 10_000
""":func:`activity_report` takes start lateness percentiles over at most this many of the latest
ended tasks (the counts cover every task)."""


class RecentValues:
    """The latest *capacity* floats appended, in one flat array of doubles: a bounded window
    (a scheduler's recent lateness) that allocates nothing per value once it is full.

    A ``deque(maxlen=...)`` of floats holds a 24-byte float object per value and allocates a new
    one for each value appended; here a value is 8 bytes in place and the storage stops growing at
    *capacity*. Iteration yields the kept values, oldest first once the window has wrapped.
    :meth:`append` may be called from any thread.
    """

    __slots__ = ("_lock", "_next", "_values", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._values = array("d")
        self._next = 0  # the slot the next value overwrites once full
        self._lock = threading.Lock()

    def append(self, value: float) -> None:
        """Keep *value*, dropping the oldest value when the window is full."""
        with self._lock:
            values = self._values
            if len(values) < self.capacity:
                values.append(value)
            else:
                values[self._next] = value
                self._next = (self._next + 1) % self.capacity

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[float]:
        with self._lock:
            values, cut = self._values, self._next
            return iter(values[cut:] + values[:cut])

    @property
    def nbytes(self) -> int:
        """Bytes the window's storage takes (``sys.getsizeof`` of its array: its allocation,
        over-allocation included), which stops growing once the window is full."""
        return sys.getsizeof(self._values)


_RAN = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.TIMED_OUT})
_FAILED = frozenset({TaskState.FAILED, TaskState.TIMED_OUT, TaskState.UPSTREAM_FAILED})


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """The *q* quantile (0..1) of the sorted *ordered* by nearest rank; None when empty."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def activity_report(
    inspect: SupportsInspection,
    now: float,
    *,
    window: float = 3600.0,
    bucket: float = 60.0,
    sample: int = LATENESS_SAMPLE,
) -> dict[str, Any]:
    """What ended in ``[now - window, now)``: ``buckets`` (``[start, succeeded, failed]`` per
    *bucket* seconds, failed counting FAILED, TIMED_OUT and UPSTREAM_FAILED), ``by_state``
    (state value -> count), ``succeeded``, ``failed``, ``per_minute`` (runs that ended, per
    minute), all counted by the store (``ended_histogram``); and ``late``: ``p50``, ``p90``,
    ``p99`` and ``max`` of the start lateness (start of the run minus due, in seconds, 0 for a
    run that started early), over the runs among the latest *sample* tasks that ended
    (``ended_since``: SUCCEEDED, FAILED or TIMED_OUT with a recorded start), with ``count``
    runs among them and ``sampled`` when more ended in the window."""
    since = now - window
    ok: list[int] = []
    bad: list[int] = []
    by_state: dict[str, int] = {}
    for _, counts in inspect.ended_histogram(since, horizon=window, bucket=bucket):
        ok.append(counts.get(TaskState.SUCCEEDED, 0))
        bad.append(sum(n for s, n in counts.items() if s in _FAILED))
        for s, n in counts.items():
            by_state[s.value] = by_state.get(s.value, 0) + n
    rows = inspect.ended_since(since, limit=sample)
    late = sorted(
        max(0.0, started - due)
        for state, due, started, _ in rows
        if state in _RAN and started is not None
    )
    ran = sum(n for s, n in by_state.items() if TaskState(s) in _RAN)
    return {
        "window": window,
        "bucket": bucket,
        "buckets": [[since + i * bucket, ok[i], bad[i]] for i in range(len(ok))],
        "by_state": by_state,
        "succeeded": sum(ok),
        "failed": sum(bad),
        "per_minute": ran / (window / 60.0),
        "late": {
            "count": len(late),
            "sampled": len(rows) >= sample,
            "p50": percentile(late, 0.5),
            "p90": percentile(late, 0.9),
            "p99": percentile(late, 0.99),
            "max": late[-1] if late else None,
        },
    }


def load_report(
    inspect: SupportsInspection, now: float, *, horizon: float, bucket: float
) -> dict[str, Any]:
    """PENDING tasks due in ``[now, now + horizon)`` per *bucket* seconds, with the peak and a
    ``herd`` entry (``start``, ``count``, ``times_average``) when one bucket dwarfs the others."""
    buckets = inspect.due_histogram(now, horizon=horizon, bucket=bucket)
    total = sum(n for _, n in buckets)
    peak_start, peak = max(buckets, key=lambda b: b[1], default=(now, 0))
    average = total / len(buckets) if buckets else 0.0
    herd = None
    if peak >= HERD_MIN and peak >= HERD_FACTOR * average:
        herd = {"start": peak_start, "count": peak, "times_average": peak / average}
    return {
        "horizon": horizon,
        "bucket": bucket,
        "total": total,
        "peak": peak,
        "buckets": [[start, n] for start, n in buckets],
        "herd": herd,
    }


def herd_behind(
    store: Store, load: dict[str, Any], *, overdue: int, read_limit: int | None = None
) -> dict[str, Any]:
    """The schedules behind the herd of *load* (a :func:`load_report` with a ``herd``) and
    whether a scheduler pre-warmed it: ``rules`` (``[description, instances]``, most first),
    ``schedules`` (a few ids), ``instances``, ``instances_examined``, ``one_shot``,
    ``prewarm_checked``, ``prewarmed``. *overdue* is about how many PENDING tasks are due
    before *load*'s start (they are read past); at most :data:`HERD_EXAMINED` of the herd's
    rows are read. With *read_limit*, a herd behind more PENDING tasks than that is not
    examined: the answer is ``{"not_examined": <tasks due before it>}``."""
    from timewheel.herds import stored_herd

    start, width = load["herd"]["start"], load["bucket"]
    before = overdue + sum(n for s, n in load["buckets"] if s < start) + 1_000
    if read_limit is not None and before > read_limit:
        return {"not_examined": before}
    seen = stored_herd(store, start, start + width, before=before, limit=HERD_EXAMINED)
    who = seen.schedules
    return {
        "rules": [[text, n] for text, n in who.rules],
        "schedules": list(who.schedules),
        "instances": who.total,
        "instances_examined": who.examined,
        "one_shot": seen.one_shot,
        "prewarm_checked": seen.checked,
        "prewarmed": seen.prewarmed,
    }
