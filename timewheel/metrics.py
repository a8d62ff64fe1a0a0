"""Prometheus metrics of a scheduler and its store (the ``metrics`` extra: prometheus-client).

:class:`Metrics` counts events by name, queue and function and times runs when added as a
scheduler listener; its gauges are read from the store at each scrape, through bounded queries
(counts by state, ``due_before`` and ``expired_leases`` with a limit), never a scan of every task::

    metrics = register_metrics(store)            # prometheus_client.REGISTRY by default
    scheduler.add_listener(metrics.listener)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

from timewheel.clock import Clock, SystemClock
from timewheel.events import Event
from timewheel.stores.base import Store
from timewheel.task import TaskState

__all__ = ["GAUGE_LIMIT", "Metrics", "register_metrics"]

GAUGE_LIMIT = 100_000
"""Gauges read at most this many tasks each; a larger figure is reported as this limit."""

_ENDS = frozenset({"succeeded", "failed", "retried", "timed_out"})


class _StoreGauges(Collector):
    def __init__(self, store: Store, clock: Clock, prefix: str) -> None:
        self.store = store
        self.clock = clock
        self.prefix = prefix

    def collect(self) -> Iterator[Metric]:
        now = self.clock.time()
        counts = self.store.count_by_state()
        p = self.prefix
        yield GaugeMetricFamily(f"{p}_ready", "READY tasks", counts.get(TaskState.READY, 0))
        yield GaugeMetricFamily(f"{p}_running", "RUNNING tasks", counts.get(TaskState.RUNNING, 0))
        pending = GaugeMetricFamily(
            f"{p}_pending_due", "PENDING tasks due within the window", labels=["within"]
        )
        for label, seconds in (("minute", 60.0), ("hour", 3600.0)):
            due = self.store.due_before(now + seconds, limit=GAUGE_LIMIT)
            pending.add_metric([label], len(due))
        yield pending
        expired = self.store.expired_leases(now, limit=GAUGE_LIMIT)
        yield GaugeMetricFamily(
            f"{p}_expired_leases", "RUNNING tasks whose lease has run out", len(expired)
        )


class Metrics:
    """Counters and histograms fed by :meth:`listener`, and store gauges read at scrape time.

    Metric names start with *prefix*: ``<prefix>_events_total{event,queue,function}``,
    ``<prefix>_lateness_seconds`` (start minus due), ``<prefix>_run_seconds`` (start to end, for
    runs this process saw start), and the gauges ``<prefix>_ready``, ``<prefix>_running``,
    ``<prefix>_pending_due{within="minute"|"hour"}``, ``<prefix>_expired_leases``.
    """

    def __init__(
        self,
        store: Store,
        registry: CollectorRegistry,
        *,
        clock: Clock | None = None,
        prefix: str = "timewheel",
    ) -> None:
        self.clock = clock or SystemClock()
        self.events = Counter(
            f"{prefix}_events",
            "Task events by name, queue and function",
            ["event", "queue", "function"],
            registry=registry,
        )
        self.lateness = Histogram(
            f"{prefix}_lateness_seconds",
            "Seconds between a task's due time and the start of its run",
            registry=registry,
        )
        self.run_time = Histogram(f"{prefix}_run_seconds", "Seconds a run took", registry=registry)
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()
        registry.register(_StoreGauges(store, self.clock, prefix))

    def listener(self, event: Event) -> None:
        """Count *event*; pass to ``Scheduler.add_listener`` (all events)."""
        task = event.task
        self.events.labels(event.name, task.queue, task.func_name).inc()
        now = self.clock.time()
        if event.name == "started":
            self.lateness.observe(max(0.0, now - task.due))
            with self._lock:
                self._started[task.id] = now
        elif event.name in _ENDS:
            with self._lock:
                began = self._started.pop(task.id, None)
            if began is not None:
                self.run_time.observe(now - began)


def register_metrics(
    store: Store,
    registry: CollectorRegistry | None = None,
    *,
    clock: Clock | None = None,
    prefix: str = "timewheel",
) -> Metrics:
    """Register timewheel's metrics of *store* with *registry* (the default registry when None)."""
    return Metrics(
        store, registry if registry is not None else REGISTRY, clock=clock, prefix=prefix
    )
