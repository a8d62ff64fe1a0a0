"""Metrics after a known sequence of runs, read back through the Prometheus text format."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import timewheel as tw
from timewheel.metrics import register_metrics
from timewheel.stores import MemoryStore
from timewheel.testing import FakeClock

START = 1_800_000_000.0


def ok() -> int:
    return 1


def boom() -> None:
    raise RuntimeError("boom")


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counters_histograms_and_gauges_after_a_known_sequence() -> None:
    clock = FakeClock(START)
    store = MemoryStore()
    registry = CollectorRegistry()
    metrics = register_metrics(store, registry, clock=clock)
    with tw.Scheduler(store=store, clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        sched.add_listener(metrics.listener)
        sched.schedule(ok, delay=1.0, id="a")
        sched.schedule(ok, delay=2.0, id="b", queue="mail")
        sched.schedule(boom, delay=3.0, id="c")
        sched.schedule(ok, delay=30.0, id="later")
        sched.schedule(ok, delay=600.0, id="much-later")
        clock.advance(5.0)
        got = samples(registry)
    ok_name = f"{__name__}:ok"
    boom_name = f"{__name__}:boom"

    def events(event: str, queue: str, function: str) -> float:
        key = (("event", event), ("function", function), ("queue", queue))
        return got.get(("timewheel_events_total", key), 0.0)

    assert events("submitted", "default", ok_name) == 3
    assert events("submitted", "mail", ok_name) == 1
    assert events("started", "default", ok_name) == 1
    assert events("succeeded", "mail", ok_name) == 1
    assert events("failed", "default", boom_name) == 1
    assert got[("timewheel_lateness_seconds_count", ())] == 3
    assert got[("timewheel_run_seconds_count", ())] == 3
    assert got[("timewheel_ready", ())] == 0
    assert got[("timewheel_running", ())] == 0
    assert got[("timewheel_pending_due", (("within", "minute"),))] == 1
    assert got[("timewheel_pending_due", (("within", "hour"),))] == 2
    assert got[("timewheel_expired_leases", ())] == 0


class _Recorder:
    """Records what instruments receive, standing in for an SDK's meter."""

    def __init__(self) -> None:
        self.values: dict[str, list[tuple[float, dict[str, str]]]] = {}

    def instrument(self, name: str, **_: object) -> Any:
        values = self.values.setdefault(name, [])

        class Instrument:
            def add(self, amount: float, attributes: dict[str, str]) -> None:
                values.append((amount, dict(attributes)))

            record = add

        return Instrument()

    create_counter = create_histogram = instrument


def test_opentelemetry_listener_after_a_known_sequence() -> None:
    pytest.importorskip("opentelemetry")
    from timewheel.otel import OtelListener

    clock = FakeClock(START)
    meter = _Recorder()
    listener = OtelListener(meter, clock=clock)  # type: ignore[arg-type]
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        sched.add_listener(listener)
        sched.schedule(ok, delay=1.0, id="a")
        sched.schedule(boom, delay=2.0, id="c")
        clock.advance(5.0)
    names = [
        (a["event"], a["function"].rsplit(":", 1)[1]) for _, a in meter.values["timewheel.events"]
    ]
    assert names.count(("submitted", "ok")) == 1
    assert ("succeeded", "ok") in names
    assert ("failed", "boom") in names
    assert len(meter.values["timewheel.lateness"]) == 2
    assert len(meter.values["timewheel.run_time"]) == 2


def test_opentelemetry_listener_with_the_api_alone() -> None:
    pytest.importorskip("opentelemetry")
    from timewheel.otel import OtelListener

    with tw.Scheduler(clock=FakeClock(START), dispatcher=tw.InlineDispatcher()) as sched:
        sched.add_listener(OtelListener())  # the no-op meter: nothing to see, nothing raised
        job = sched.schedule(ok, delay=0.0)
        sched.clock.advance(1.0)  # type: ignore[attr-defined]
        assert job.result(timeout=1) == 1
