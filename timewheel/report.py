"""Operator figures of a store, as plain data: the upcoming load with its herd warning.

Shared by ``timewheel inspect`` and the dashboard so both judge a store the same way. Everything
here reads through :class:`~timewheel.stores.base.SupportsInspection`; nothing scans every task.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from timewheel.stores.base import Store, SupportsInspection
from timewheel.stores.policy import histogram_buckets
from timewheel.task import TaskState

__all__ = [
    "ACTIVITY_LIMIT",
    "HERD_EXAMINED",
    "HERD_FACTOR",
    "HERD_MIN",
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
ACTIVITY_LIMIT = 100_000
"""At most this many ended tasks are read for :func:`activity_report`."""

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
    limit: int = ACTIVITY_LIMIT,
) -> dict[str, Any]:
    """What ended in ``[now - window, now)``, from ``ended_since``: ``buckets`` (``[start,
    succeeded, failed]`` per *bucket* seconds, failed counting FAILED, TIMED_OUT and
    UPSTREAM_FAILED), ``by_state`` (state value -> count), ``succeeded``, ``failed``,
    ``per_minute`` (tasks that ran to an end, per minute), ``late`` (``p50``, ``p90``, ``p99``,
    ``max`` of end minus due, seconds, of the runs that ended: lateness plus run time) and
    ``capped`` (more than *limit* tasks ended: the figures cover the latest *limit*)."""
    n = histogram_buckets(window, bucket)
    since = now - window
    rows = inspect.ended_since(since, limit=limit)
    ok, bad = [0] * n, [0] * n
    by_state: dict[str, int] = {}
    late: list[float] = []
    for state, due, ended in rows:
        if ended >= now:
            continue
        b = min(n - 1, int((ended - since) // bucket))
        by_state[state.value] = by_state.get(state.value, 0) + 1
        if state is TaskState.SUCCEEDED:
            ok[b] += 1
        elif state in _FAILED:
            bad[b] += 1
        if state in _RAN:
            late.append(max(0.0, ended - due))
    late.sort()
    ran = len(late)
    return {
        "window": window,
        "bucket": bucket,
        "buckets": [[since + i * bucket, ok[i], bad[i]] for i in range(n)],
        "by_state": by_state,
        "succeeded": sum(ok),
        "failed": sum(bad),
        "per_minute": ran / (window / 60.0),
        "late": {
            "count": ran,
            "p50": percentile(late, 0.5),
            "p90": percentile(late, 0.9),
            "p99": percentile(late, 0.99),
            "max": late[-1] if late else None,
        },
        "capped": len(rows) >= limit,
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


def herd_behind(store: Store, load: dict[str, Any], *, overdue: int) -> dict[str, Any]:
    """The schedules behind the herd of *load* (a :func:`load_report` with a ``herd``) and
    whether a scheduler pre-warmed it: ``rules`` (``[description, instances]``, most first),
    ``schedules`` (a few ids), ``instances``, ``instances_examined``, ``one_shot``,
    ``prewarm_checked``, ``prewarmed``. *overdue* is about how many PENDING tasks are due
    before *load*'s start (they are read past); at most :data:`HERD_EXAMINED` of the herd's
    rows are read."""
    from timewheel.herds import stored_herd

    start, width = load["herd"]["start"], load["bucket"]
    before = overdue + sum(n for s, n in load["buckets"] if s < start) + 1_000
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
