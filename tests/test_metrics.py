"""Metrics after a known sequence of runs, read back through the Prometheus text format."""

from __future__ import annotations

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
