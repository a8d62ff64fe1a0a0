"""Herds: shared rule work, pre-warmed hot seconds, bounded trigger steps and herd reports.

Every test runs on a ``FakeClock``; none measures time (``benchmarks/bench_herd.py`` does).
"""

from __future__ import annotations

import gc
import io
import math
import re
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

import timewheel as tw
from timewheel import cli
from timewheel._cronexpr import parse_cron
from timewheel.ready import ReadyQueue
from timewheel.rules import (
    CronRule,
    CronSlots,
    IntervalRule,
    Misfire,
    RuleCache,
    cron_slots,
    plan_misfires,
    runs_alone,
)
from timewheel.stores.memory import MemoryStore
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState
from timewheel.testing import FakeClock
from timewheel.trigger import Trigger

UTC = timezone.utc
NY = ZoneInfo("America/New_York")
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC).timestamp()
P, R = TaskState.PENDING, TaskState.READY

#: (schedule id, instant) of every run of :func:`record`, appended by the task itself
RUNS: list[tuple[str, float]] = []
#: the clock :func:`record` reads (set by each test that uses it)
CLOCKS: list[FakeClock] = []


def record(name: str) -> None:
    """The herd's task: notes which schedule ran when (module-level: a durable store keeps it
    by name)."""
    RUNS.append((name, CLOCKS[-1].time()))


@pytest.fixture(autouse=True)
def _fresh_runs() -> None:
    RUNS.clear()
    CLOCKS.clear()


def herd_scheduler(
    start: float, *, store: Any = None, dispatcher: Any = None, **kw: Any
) -> tuple[FakeClock, tw.Scheduler]:
    clock = FakeClock(start)
    CLOCKS.append(clock)
    sched = tw.Scheduler(
        clock=clock,
        store=store,
        dispatcher=dispatcher if dispatcher is not None else tw.InlineDispatcher(),
        allow=["tests.test_herd"],  # the functions the durable-store herds run
        **kw,
    )
    return clock, sched


def pending_heads(sched: tw.Scheduler) -> Counter[str]:
    """Fresh PENDING instances per schedule (the head, and a successor stored ahead)."""
    return Counter(
        t.schedule_id
        for t in sched.store.tasks(state=P)
        if t.schedule_id is not None and t.attempts == 0 and not t.extra.get("catchup")
    )


# -- shared rule work ------------------------------------------------------------------------------


def test_rules_with_one_expression_and_zone_share_their_instants() -> None:
    rules = [CronRule("17 3 * * *", "Asia/Tokyo", jitter=i % 3) for i in range(1_000)]
    slots = rules[0].slots
    assert all(r.slots is slots for r in rules), "one CronSlots per expression and zone"
    assert CronRule("17 3 * * *", "UTC").slots is not slots, "another zone: other instants"
    before = slots.computed
    t = datetime(2026, 5, 1, tzinfo=UTC).timestamp()
    first = {r.next_after(t) for r in rules}
    assert len(first) == 1
    (instant,) = first
    assert instant is not None
    after = {r.next_after(instant) for r in rules}
    assert slots.computed - before == 2, "each instant computed once, not once per rule"
    assert len(after) == 1
    # any question inside a known gap is answered from the memo
    assert rules[5].next_after(instant - 3600) == instant
    assert slots.computed - before == 2


def test_start_and_end_still_bound_shared_instants() -> None:
    t = datetime(2026, 5, 1, tzinfo=UTC).timestamp()
    plain = CronRule("0 12 * * *", "UTC")
    late = CronRule("0 12 * * *", "UTC", start=t + 5 * 86400)
    short = CronRule("0 12 * * *", "UTC", end=t + 86400)
    assert plain.slots is late.slots is short.slots
    assert plain.next_after(t) == t + 12 * 3600
    assert late.next_after(t) == t + 5 * 86400 + 12 * 3600
    assert short.next_after(t) == t + 12 * 3600
    assert short.next_after(t + 12 * 3600) is None


DST_EXPRESSIONS = [
    ("30 2 * * *", "America/New_York"),
    ("0,30 1 * * *", "America/New_York"),
    ("*/20 * * * *", "America/New_York"),
    ("0 */2 * * *", "Europe/London"),
    ("30 * * * *", "Australia/Lord_Howe"),
    ("0 0 L * *", "Europe/Berlin"),
    ("15 2 * * 0#2", "America/New_York"),
]
YEAR_2026 = (
    datetime(2026, 1, 1, tzinfo=UTC).timestamp(),
    datetime(2027, 1, 1, tzinfo=UTC).timestamp(),
)


@settings(max_examples=40, deadline=None)
@given(
    case=st.sampled_from(DST_EXPRESSIONS),
    questions=st.lists(st.floats(*YEAR_2026), min_size=1, max_size=25),
    near=st.lists(st.integers(-7200, 7200), max_size=10),
)
def test_remembered_answers_equal_fresh_ones(
    case: tuple[str, str], questions: list[float], near: list[int]
) -> None:
    """The memo answers exactly what croniter would: questions anywhere, in any order, and
    questions just around the instants already answered (DST transitions included)."""
    expr, zone_name = case
    zone = ZoneInfo(zone_name)
    shared = CronSlots(parse_cron(expr), zone)
    asked: list[float] = []
    for t in questions:
        answer = shared.next_after(t)
        asked.append(t)
        if answer is not None:
            asked.extend(answer + d for d in near)
    for t in asked:
        assert shared.next_after(t) == CronSlots(parse_cron(expr), zone).next_after(t), t


def test_the_memo_is_bounded() -> None:
    slots = CronSlots(parse_cron("* * * * *"), ZoneInfo("UTC"))
    t = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    for k in range(3 * CronSlots.MEMO):
        slots.next_after(t + 3600 * k + 0.5)  # far apart: a new gap each time
    assert len(slots) <= CronSlots.MEMO


def test_shared_slots_are_kept_for_the_most_recent_expressions() -> None:
    zone = ZoneInfo("UTC")
    assert cron_slots("1 2 3 4 *", zone) is cron_slots("1 2 3 4 *", zone)


def test_the_rule_cache_shares_by_spec_and_by_arguments() -> None:
    cache = RuleCache(size=4)
    a, spec = cache.make(cron="0 0 * * *", tz="UTC")
    b, spec_b = cache.make(cron="0 0 * * *", tz="UTC")
    assert a is b
    assert spec is spec_b
    assert dict(spec) == a.to_spec()
    with pytest.raises(TypeError):
        spec["expr"] = "changed"  # type: ignore[index]  # read-only: shared by many records
    assert cache.from_spec(a.to_spec()) is a
    assert cache.share(CronRule("0 0 * * *", "UTC")) is a
    # a bool jitter is refused even though 1 == True as a key
    cache.make(cron="0 0 * * *", tz="UTC", jitter=1)
    with pytest.raises(tw.InvalidScheduleError, match="jitter"):
        cache.make(cron="0 0 * * *", tz="UTC", jitter=True)
    # an interval without an anchor anchors itself on its first question: never shared
    spec_free = IntervalRule(60).to_spec()
    assert cache.from_spec(spec_free) is not cache.from_spec(spec_free)
    for k in range(10):
        cache.make(cron=f"{k} 0 * * *", tz="UTC")
    assert len(cache) <= 4 + 1  # bounded (an entry may be reachable by two keys)


@pytest.mark.parametrize("policy", list(Misfire))
@pytest.mark.parametrize("late", [0.0, 5.0, 59.0, 61.0, 3000.0])
@pytest.mark.parametrize("grace", [None, 0.0, 60.0])
def test_runs_alone_is_the_on_time_case_of_the_misfire_plan(
    policy: Misfire, late: float, grace: float | None
) -> None:
    rule = IntervalRule(3600, start=0.0)
    slot = 36000.0
    plan = plan_misfires(
        rule, math.nextafter(slot, -math.inf), slot + late, policy=policy, grace=grace
    )
    assert plan.due == 1
    assert runs_alone(slot, slot + late, policy=policy, grace=grace) == bool(plan.run)


def test_creating_a_herd_asks_croniter_once() -> None:
    _clock, sched = herd_scheduler(MIDNIGHT - 3600)
    slots = CronRule("0 0 * * *", "UTC").slots
    before = slots.computed
    for i in range(2_000):
        sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
    assert slots.computed - before <= 1
    records = sched.store.list_schedules()
    assert len({id(r.rule) for r in records}) == 1, "one shared spec mapping"
    assert len({id(r.options) for r in records}) == 1, "one shared options mapping"


def test_a_series_resumed_before_its_slot_runs_at_it() -> None:
    """Pausing cancels the head; resuming before its slot plans that slot again (its id is the
    cancelled head's: the instance is stored anew, not left cancelled)."""
    clock, sched = herd_scheduler(MIDNIGHT - 3600)
    with sched:
        handle = sched.schedule(record, "nightly", cron="0 0 * * *", id="nightly")
        clock.advance(60)
        handle.pause()
        assert handle.next_run is None
        clock.advance(60)
        handle.resume()
        assert handle.next_run == datetime(2026, 3, 2, tzinfo=UTC)
        clock.advance_to(MIDNIGHT + 1)
        assert RUNS == [("nightly", MIDNIGHT)]


# -- the trigger's bounded steps ---------------------------------------------------------------------


def _trigger(store: Any = None) -> Trigger:
    return Trigger(
        store if store is not None else MemoryStore(),
        ReadyQueue(10_000),
        FakeClock(MIDNIGHT),
        tick=0.001,
        start=MIDNIGHT,
        lease=30.0,
        poll_interval=None,
    )


def _noop() -> None:
    pass


def test_a_step_moves_a_bounded_slice_and_fire_moves_everything_due() -> None:
    trigger = _trigger()
    trigger.step_seconds = 0.0  # the smallest slice: one chunk a step
    for i in range(200):
        task = Task(id=f"t{i}", func=_noop, due=MIDNIGHT + 1, created=MIDNIGHT, updated=MIDNIGHT)
        trigger.index(trigger.store.insert(task).task)
    now = MIDNIGHT + 1
    assert trigger.step(now) == now, "more is due: the next deadline is now"
    ready = trigger.store.count_by_state().get(R, 0)
    assert 0 < ready < 200
    steps = 1
    while trigger.step(now) == now:
        steps += 1
        assert steps < 200
    assert trigger.store.count_by_state()[R] == 200
    assert steps > 1
    assert {t.id for t in trigger.store.tasks(state=R)} == {f"t{i}" for i in range(200)}

    again = _trigger()
    again.step_seconds = 0.0
    for i in range(200):
        task = Task(id=f"u{i}", func=_noop, due=MIDNIGHT + 1, created=MIDNIGHT, updated=MIDNIGHT)
        again.index(again.store.insert(task).task)
    again.fire(now)
    assert again.store.count_by_state()[R] == 200, "fire(): everything due at the instant"


# -- pre-warming ---------------------------------------------------------------------------------------


def test_a_herd_is_seen_prewarmed_and_fires_at_its_instant() -> None:
    clock, sched = herd_scheduler(MIDNIGHT - 3600)
    n = 1_500
    with sched:
        for i in range(n):
            sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
        (seen,) = sched.herds()
        assert seen.herd.state == "ahead"
        assert seen.herd.count == n
        assert seen.schedules.rules == (("cron '0 0 * * *' in UTC (fixed-time)", n),)
        assert seen.schedules.schedules[:2] == ("h0", "h1")
        text = str(seen)
        assert "1,500 recurring instances due at 2026-03-02T00:00:00Z" in text
        assert "cron '0 0 * * *' in UTC" in text

        clock.advance_to(MIDNIGHT - 60)
        (warm,) = sched.herds()
        assert warm.herd.state == "warm"
        assert warm.herd.prepared == n
        assert warm.herd.successors == n
        assert warm.herd.slices >= 1
        assert "pre-warming done: 1,500 heads prepared, 1,500 successors stored ahead" in str(warm)
        assert set(pending_heads(sched).values()) == {2}, "each series: tonight's head + next"
        assert sched.upcoming(7200, bucket="hour") == [(datetime(2026, 3, 2, tzinfo=UTC), n)]
        head = sched.schedules()[0]
        assert head.next_run == datetime(2026, 3, 2, tzinfo=UTC), "the head, not the successor"
        assert not RUNS

        clock.advance_to(MIDNIGHT)
        assert len(RUNS) == n
        assert {t for _, t in RUNS} == {MIDNIGHT}
        assert sorted(name for name, _ in RUNS) == sorted(f"h{i}" for i in range(n))
        assert set(pending_heads(sched).values()) == {1}
        assert head.next_run == datetime(2026, 3, 3, tzinfo=UTC)
        (fired,) = [h for h in sched.herds() if h.herd.start == MIDNIGHT]
        assert fired.herd.state == "fired"

        clock.advance(days=1)
        assert len(RUNS) == 2 * n
        assert Counter(name for name, _ in RUNS) == Counter({f"h{i}": 2 for i in range(n)})
        assert sched.statistics().missed_fires == 0


def test_herds_that_follow_each_other_within_the_look_ahead_all_fire() -> None:
    """Every two minutes a herd: each one's successors make the next herd, prepared once the
    one before has fired (never a third live instance in a series). Nothing runs the tasks
    here, so a deadline left at "now" would stop the fake clock's stepping early; the earlier
    runs stay READY, and the overlap policy lets the next ones run beside them."""
    clock, sched = herd_scheduler(MIDNIGHT - 60, dispatcher=tw.NullDispatcher())
    n = 1_100
    with sched:
        for i in range(n):
            sched.schedule(
                record,
                f"h{i}",
                cron="*/2 * * * *",
                id=f"h{i}",
                overlap="allow",
                max_instances=20,
            )
        clock.advance_to(MIDNIGHT + 20 * 60 - 1)
        ready = Counter(t.schedule_id for t in sched.store.tasks(state=R))
        assert ready == Counter({f"h{i}": 10 for i in range(n)})
        assert max(pending_heads(sched).values()) <= 2
        assert min(pending_heads(sched).values()) >= 1
        prepared = [h.herd.prepared for h in sched.herds() if h.herd.state == "fired"]
        assert prepared
        assert all(p == n for p in prepared)
        assert sched.statistics().missed_fires == 0


def test_changes_made_after_prewarming_still_hold_at_the_instant() -> None:
    clock, sched = herd_scheduler(MIDNIGHT - 3600)
    with sched:
        for i in range(1_200):
            sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
        clock.advance_to(MIDNIGHT - 30)
        assert sched.herds()[0].herd.prepared == 1_200
        by_id = {s.id: s for s in sched.schedules()}
        by_id["h0"].pause()
        by_id["h1"].cancel()
        sched.schedule(record, "h2", cron="0 1 * * *", id="h2")  # another slot
        sched.schedule(record, "h3-new", cron="0 0 * * *", id="h3")  # the same slot, new args
        sched.get("h4@" + str(round(MIDNIGHT * 1e6))).cancel()  # one run of a series
        clock.advance_to(MIDNIGHT + 3600)
        ran = Counter(name for name, _ in RUNS)
        assert "h0" not in ran
        assert "h1" not in ran
        assert "h4" not in ran
        assert ("h2", MIDNIGHT + 3600) in RUNS
        assert ran["h2"] == 1
        assert ("h3-new", MIDNIGHT) in RUNS
        assert ran["h3"] == 0
        assert ran["h5"] == 1
        heads = pending_heads(sched)
        assert "h0" not in heads
        assert "h1" not in heads
        assert heads["h2"] == heads["h3"] == heads["h5"] == 1
        (h3,) = [t for t in sched.store.tasks(state=P) if t.schedule_id == "h3"]
        assert h3.args == ("h3-new",)
        assert h3.due == MIDNIGHT + 86400
        by_id["h0"].resume()
        assert by_id["h0"].next_run == datetime(2026, 3, 3, tzinfo=UTC)
        clock.advance(days=1)
        assert Counter(name for name, _ in RUNS)["h0"] == 1


def test_the_overlap_policy_is_decided_against_the_instant() -> None:
    """A series with an instance still running when its herd was prepared is asked again at
    the instant: skipped if it still runs then, run if it finished meanwhile."""
    clock, sched = herd_scheduler(MIDNIGHT - 3600, dispatcher=tw.NullDispatcher())
    store = sched.store
    with sched:
        for i in range(1_100):
            sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
        now = clock.time()
        for sid in ("h0", "h1"):  # an earlier run of these series, still going
            earlier = Task(
                id=f"{sid}@earlier", func=record, due=now, created=now, updated=now, schedule_id=sid
            )
            store.insert(earlier)
            store.promote([earlier.id], now)
            claimed = store.claim(
                earlier.id, expected_version=1, owner="w", lease_expires=now + 1e6, now=now
            )
            assert claimed is not None
        clock.advance_to(MIDNIGHT - 60)
        assert sched.herds()[0].herd.prepared == 1_100
        store.finish("h1@earlier", owner="w", state=TaskState.SUCCEEDED, now=clock.time())
        clock.advance_to(MIDNIGHT)
        head = f"@{round(MIDNIGHT * 1e6)}"
        assert store.get("h0" + head).state is TaskState.CANCELLED
        assert "overlap" in (store.get("h0" + head).error or "")
        assert store.get("h1" + head).state is R
        assert store.get("h2" + head).state is R
        assert sched.statistics().missed_fires == 1
        assert pending_heads(sched)["h0"] == 1, "the series goes on"


def _vixie(expr: str, after: datetime, until: datetime) -> list[float]:
    """Instants of *expr* in ``(after, until]``, by cronsim (Vixie cron's DST rules)."""
    out: list[float] = []
    for instant in CronSim(expr, after):
        if instant > until:
            return out
        out.append(instant.timestamp())
    return out


def _expressions_at_two() -> list[str]:
    """1,000 distinct expressions whose local time is 02:mm in the night of 2026-03-08, when
    New York skips from 02:00 to 03:00: every one of them fires at 03:00 EDT (07:00 UTC)."""
    days = [
        "* * *",
        "* * 0",
        "8 3 *",
        "1-31 * *",
        "* 3 *",
        "* * 0,6",
        "*/1 * *",
        "8 * *",
        "* 1-6 *",
        "1-10 * *",
        "* * sun",
        "* mar *",
        "7-9 * *",
        "* 2-4 *",
        "* * 0-2",
        "8 3 0",
        "*/2 * *",  # odd days: the 8th does not match, the 9th does
    ]
    out = [f"{m} 2 {d}" for d in days for m in range(60)]
    return out[:1_000]


def test_a_herd_of_a_thousand_expressions_across_spring_forward_fires_at_vixie_instants() -> None:
    start = datetime(2026, 3, 7, 23, 0, tzinfo=NY)
    until = datetime(2026, 3, 10, 4, 0, tzinfo=NY)
    expressions = _expressions_at_two()
    assert len(set(expressions)) == 1_000
    clock, sched = herd_scheduler(start.timestamp(), timezone="America/New_York")
    copies = 2
    with sched:
        for k, expr in enumerate(expressions):
            for c in range(copies):
                sid = f"e{k}-{c}"
                sched.schedule(record, sid, cron=expr, id=sid)
        gap = datetime(2026, 3, 8, 7, 0, tzinfo=UTC).timestamp()
        (herd,) = [h for h in sched.herds(horizon=86400) if h.herd.start == gap]
        assert herd.herd.count > 1_000
        assert len(herd.schedules.rules) > 900, "the schedules behind it, by rule"
        clock.advance_to(gap - 1)
        (herd,) = [h for h in sched.herds(horizon=86400) if h.herd.start == gap]
        assert herd.herd.state == "warm"
        assert herd.herd.prepared == herd.herd.count
        clock.advance_to(until)
    got: dict[str, list[float]] = {}
    for name, instant in RUNS:
        got.setdefault(name, []).append(instant)
    for k, expr in enumerate(expressions):
        expected = _vixie(expr, start, until)
        assert expected, expr
        for c in range(copies):
            assert got.get(f"e{k}-{c}", []) == expected, (expr, c)
    assert sched.statistics().missed_fires == 0


# -- a durable store: pre-warmed successors and crashes --------------------------------------------


def test_prewarmed_successors_survive_a_crash_without_doubling_runs(tmp_path: Path) -> None:
    """Pre-warming stores the next instance ahead. A crash then leaves two fresh instances in
    a series: restarted before the instant, the head runs once; restarted after the successor's
    slot too, the late run stands for both (misfire policy) and the successor is superseded."""
    db = tmp_path / "herd.db"
    expr = "*/10 * * * *"
    clock, sched = herd_scheduler(MIDNIGHT - 600, store=SQLiteStore(db, durability="fast"))
    sched.runtime.trigger.herd_size = 40
    with sched:
        for i in range(60):
            sched.schedule(record, f"h{i}", cron=expr, id=f"h{i}")
        clock.advance_to(MIDNIGHT - 1)
        assert sched.herds()[0].herd.prepared == 60
        assert set(pending_heads(sched).values()) == {2}
        sched.store.close()
    # the process is gone; restart 25 minutes later: slots 00:00, 00:10 and 00:20 were missed
    clock2, sched2 = herd_scheduler(MIDNIGHT + 1500, store=SQLiteStore(db, durability="fast"))
    with sched2:
        for i in range(60):
            sched2.schedule(record, f"h{i}", cron=expr, id=f"h{i}")  # same definitions
        clock2.advance(1)
        ran = Counter(name for name, _ in RUNS)
        assert ran == Counter({f"h{i}": 1 for i in range(60)}), "one catch-up run per series"
        assert set(pending_heads(sched2).values()) == {1}
        (head,) = [t for t in sched2.store.tasks(state=P) if t.schedule_id == "h0"]
        assert head.due == MIDNIGHT + 1800
        clock2.advance_to(MIDNIGHT + 1800)
        assert Counter(name for name, _ in RUNS)["h7"] == 2
        sched2.store.close()


def test_a_prewarmed_sqlite_herd_fires_in_batches(tmp_path: Path) -> None:
    db = tmp_path / "herd.db"
    clock, sched = herd_scheduler(MIDNIGHT - 200, store=SQLiteStore(db, durability="fast"))
    with sched:
        for i in range(1_100):
            sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
        clock.advance_to(MIDNIGHT - 1)
        assert sched.herds()[0].herd.prepared == 1_100
        clock.advance_to(MIDNIGHT)
        assert len(RUNS) == 1_100
        assert {t for _, t in RUNS} == {MIDNIGHT}
        assert set(pending_heads(sched).values()) == {1}
        sched.store.close()


class _Holding(tw.NullDispatcher):
    """Runs nothing but serves every queue: READY work fills the ready queue and stays there."""

    queues = None


def test_a_durable_herd_beyond_the_ready_queue_is_promoted_without_reading_it_back(
    tmp_path: Path,
) -> None:
    """Once the ready queue is full, the heads stay READY in the store for a refill: the store
    returns only their keys (no task decoded), and the queue holds full snapshots."""
    store = SQLiteStore(tmp_path / "herd.db", durability="fast")
    calls = Counter[str]()
    for name in ("promote", "promote_keys"):
        real = getattr(store, name)

        def counted(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _real(*a, **kw)

        setattr(store, name, counted)
    clock, sched = herd_scheduler(
        MIDNIGHT - 200, store=store, dispatcher=_Holding(), ready_capacity=100
    )
    with sched:
        for i in range(1_100):
            sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
        clock.advance_to(MIDNIGHT - 1)
        calls.clear()
        clock.advance_to(MIDNIGHT)
        assert sched.store.count_by_state()[R] == 1_100
        assert calls["promote_keys"] > 0, calls
        queued = sched.ready_queue.drain()
        assert len(queued) == 100
        assert all(t == sched.store.get(t.id) and t.state is R for t in queued)
        assert set(pending_heads(sched).values()) == {1}
        store.close()


def test_a_durable_herd_is_not_read_again_while_it_is_promoted(tmp_path: Path) -> None:
    """The wheel's refill reads every PENDING task due: during a herd that is the herd itself,
    so it waits until the herd is promoted."""
    store = SQLiteStore(tmp_path / "herd.db", durability="fast")
    clock, sched = herd_scheduler(MIDNIGHT - 200, store=store, dispatcher=_Holding())
    ready_when_read: list[int] = []
    real = store.due_before

    def due_before(until: float, *, limit: int) -> list[tuple[str, float, str | None]]:
        ready_when_read.append(store.count_by_state().get(R, 0))
        return real(until, limit=limit)

    store.due_before = due_before  # type: ignore[method-assign]
    with sched:
        for i in range(1_100):
            sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
        clock.advance_to(MIDNIGHT - 1)
        trigger = sched.runtime.trigger
        trigger._refilled_until = MIDNIGHT + trigger.horizon / 2  # a refill due at the instant
        ready_when_read.clear()
        clock.advance_to(MIDNIGHT)
        assert store.count_by_state()[R] == 1_100
        assert ready_when_read, "the refill due at the instant ran"
        assert set(ready_when_read) == {1_100}, ready_when_read
        store.close()


def test_full_collections_are_held_off_during_a_herd_window_only() -> None:
    """From the first pre-warming slice until the herd is promoted the collector's objects are
    frozen (no full collection walks the heap); afterwards they are handed back."""
    assert gc.get_freeze_count() == 0
    clock, sched = herd_scheduler(MIDNIGHT - 200)
    try:
        with sched:
            for i in range(1_100):
                sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
            clock.advance_to(MIDNIGHT - 1)
            assert gc.get_freeze_count() > 0, "held while the herd waits for its second"
            clock.advance_to(MIDNIGHT)
            assert len(RUNS) == 1_100
            clock.advance_to(MIDNIGHT + 2)
            assert gc.get_freeze_count() == 0, "handed back once the herd was promoted"
    finally:
        gc.unfreeze()


def test_a_freeze_made_by_someone_else_is_left_alone() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        clock, sched = herd_scheduler(MIDNIGHT - 200)
        with sched:
            for i in range(1_100):
                sched.schedule(record, f"h{i}", cron="0 0 * * *", id=f"h{i}")
            clock.advance_to(MIDNIGHT + 2)
            assert len(RUNS) == 1_100
        # (frozen objects freed since lower the count a little; unfrozen, it would be 0)
        assert gc.get_freeze_count() > frozen // 2, "the trigger left another's freeze alone"
    finally:
        gc.unfreeze()


# -- timewheel inspect -----------------------------------------------------------------------------------


def test_inspect_names_the_schedules_behind_a_herd_and_the_prewarming(tmp_path: Path) -> None:
    db = tmp_path / "inspect.db"
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    instant = now + timedelta(minutes=30)
    expr = f"{instant.minute} {instant.hour} * * *"
    clock, sched = herd_scheduler(now.timestamp(), store=SQLiteStore(db, durability="fast"))
    sched.runtime.trigger.herd_size = 100
    with sched:
        for i in range(150):
            sched.schedule(record, f"n{i}", cron=expr, id=f"nightly-{i}")
        for i in range(20):
            sched.schedule(record, f"o{i}", at=instant.timestamp())
        out = io.StringIO()
        assert cli.main(["inspect", "--store", f"sqlite:///{db}"], out) == 0
        text = out.getvalue()
        assert "herd warning: 170 tasks due" in text
        assert f"150 instances of cron '{expr}' in UTC (fixed-time)" in text
        assert "20 one-shot tasks" in text
        assert "schedules: nightly-0, nightly-1, nightly-10" in text
        assert "not pre-warmed yet" in text
        clock.advance_to(instant.timestamp() - 60)  # the scheduler pre-warms the herd
        out = io.StringIO()
        assert cli.main(["inspect", "--store", f"sqlite:///{db}", "--json"], out) == 0
        sched.store.close()
    import json

    herd = json.loads(out.getvalue())["load"]["herd"]
    assert herd["rules"] == [[f"cron '{expr}' in UTC (fixed-time)", 150]]
    assert herd["prewarmed"] == herd["prewarm_checked"] > 0
    assert re.fullmatch(r"nightly-\d+", herd["schedules"][0])
