"""Operator figures of a store, as plain data: the upcoming load with its herd warning.

Shared by ``timewheel inspect`` and the dashboard so both judge a store the same way. Everything
here reads through :class:`~timewheel.stores.base.SupportsInspection`; nothing scans every task.
"""

from __future__ import annotations

from typing import Any

from timewheel.stores.base import SupportsInspection

__all__ = ["HERD_FACTOR", "HERD_MIN", "load_report"]

HERD_MIN = 100
"""A histogram bucket with at least this many tasks ..."""
HERD_FACTOR = 10.0
"""... and this many times the average bucket is a thundering herd."""


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
