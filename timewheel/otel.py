"""OpenTelemetry instruments for a scheduler (the ``otel`` extra: opentelemetry-api).

:class:`OtelListener` records, through a meter of the application's configured provider, the
same figures :mod:`timewheel.metrics` gives Prometheus: ``timewheel.events`` (a counter with
the attributes ``event``, ``queue``, ``function``), ``timewheel.lateness`` and
``timewheel.run_time`` (histograms in seconds). Without an SDK configured the API's no-op meter
makes it free::

    scheduler.add_listener(OtelListener())
"""

from __future__ import annotations

import threading

from opentelemetry import metrics as otel_metrics

from timewheel.clock import Clock, SystemClock
from timewheel.events import Event

__all__ = ["OtelListener"]

_ENDS = frozenset({"succeeded", "failed", "retried", "timed_out"})


class OtelListener:
    """A scheduler listener recording events, lateness and run times as OpenTelemetry metrics."""

    def __init__(self, meter: otel_metrics.Meter | None = None, clock: Clock | None = None) -> None:
        meter = meter or otel_metrics.get_meter("timewheel")
        self.clock = clock or SystemClock()
        self.events = meter.create_counter(
            "timewheel.events", unit="1", description="Task events by name, queue and function"
        )
        self.lateness = meter.create_histogram(
            "timewheel.lateness", unit="s", description="Start of a run minus its due time"
        )
        self.run_time = meter.create_histogram(
            "timewheel.run_time", unit="s", description="Seconds a run took"
        )
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        """Record *event*."""
        task = event.task
        attributes = {"event": event.name, "queue": task.queue, "function": task.func_name}
        self.events.add(1, attributes)
        now = self.clock.time()
        if event.name == "started":
            self.lateness.record(max(0.0, now - task.due), {"queue": task.queue})
            with self._lock:
                self._started[task.id] = now
        elif event.name in _ENDS:
            with self._lock:
                began = self._started.pop(task.id, None)
            if began is not None:
                self.run_time.record(now - began, {"queue": task.queue})
