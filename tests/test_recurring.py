"""Recurring schedules through the scheduler, all on a FakeClock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import timewheel as tw
from timewheel.stores import MemoryStore
from timewheel.task import ScheduleRecord
from timewheel.testing import FakeClock

UTC = timezone.utc
NY = ZoneInfo("America/New_York")


def make(start: datetime, **kw: object) -> tuple[FakeClock, tw.Scheduler]:
    clock = FakeClock(start=start)
    sched = tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher(), **kw)  # type: ignore[arg-type]
    return clock, sched.start()


@pytest.fixture
def year() -> Iterator[tuple[FakeClock, tw.Scheduler]]:
    clock, sched = make(datetime(2026, 1, 1, tzinfo=UTC))
    yield clock, sched
    sched.shutdown()


def test_midnight_over_a_year_fires_365_times(year: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = year
    runs: list[datetime] = []
    handle = sched.schedule(lambda: runs.append(clock.now()), cron="0 0 * * *", id="nightly")
    assert isinstance(handle, tw.Schedule)
    assert handle.next_run == datetime(2026, 1, 2, tzinfo=UTC)
    clock.advance(days=365)
    assert len(runs) == 365
    assert runs[0] == datetime(2026, 1, 2, tzinfo=UTC)
    assert runs[-1] == datetime(2027, 1, 1, tzinfo=UTC)
    assert all(r.hour == 0 and r.minute == 0 for r in runs)
    assert sched.statistics().missed_fires == 0
    # the rule is stored, not future instances: one pending head at any time
    assert len(sched.store.tasks(state=tw.TaskState.PENDING)) == 1


@pytest.mark.parametrize(("day", "expected"), [(8, 1380), (1, 1500)])
def test_every_minute_across_dst_days_in_new_york(day: int, expected: int) -> None:
    month = 3 if day == 8 else 11
    start = datetime(2026, month, day, tzinfo=NY)
    clock, sched = make(start - timedelta(seconds=1), timezone="America/New_York")
    runs: list[float] = []
    sched.schedule(lambda: runs.append(clock.time()), cron="* * * * *")
    clock.advance_to(datetime(2026, month, day + 1, tzinfo=NY) - timedelta(seconds=1))
    sched.shutdown()
    assert len(runs) == expected
    assert runs == sorted(set(runs))


@pytest.mark.parametrize(
    ("zone", "expr", "day", "expected_utc"),
    [
        ("America/New_York", "30 2 * * *", datetime(2026, 3, 8), [datetime(2026, 3, 8, 7, 0)]),
        ("America/New_York", "30 1 * * *", datetime(2026, 11, 1), [datetime(2026, 11, 1, 5, 30)]),
        ("Europe/London", "30 1 * * *", datetime(2026, 3, 29), [datetime(2026, 3, 29, 1, 0)]),
        ("Europe/London", "30 1 * * *", datetime(2026, 10, 25), [datetime(2026, 10, 25, 0, 30)]),
    ],
)
def test_fixed_time_jobs_on_dst_transitions(
    zone: str, expr: str, day: datetime, expected_utc: list[datetime]
) -> None:
    z = ZoneInfo(zone)
    start = day.replace(tzinfo=z)
    clock, sched = make(start)
    runs: list[datetime] = []
    sched.schedule(lambda: runs.append(clock.now()), cron=expr, tz=zone)
    clock.advance_to((day + timedelta(days=1)).replace(tzinfo=z))
    sched.shutdown()
    assert runs == [e.replace(tzinfo=UTC) for e in expected_utc]


def test_interval_is_anchored_and_never_drifts(year: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = year
    t0 = clock.time()
    runs: list[float] = []

    def slow() -> None:
        runs.append(clock.time())

    sched.schedule(slow, every=timedelta(minutes=5), id="refresh")
    clock.advance(hours=10)
    assert len(runs) == 120
    assert runs == [t0 + 300 * k for k in range(1, 121)]


def test_jitter_moves_runs_but_not_the_series(year: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = year
    t0 = clock.time()
    runs: list[float] = []
    sched.schedule(lambda: runs.append(clock.time()), every=60, jitter=10, id="j")
    clock.advance(minutes=30, seconds=30)
    assert len(runs) == 30
    for k, r in enumerate(runs, start=1):
        assert t0 + 60 * k <= r <= t0 + 60 * k + 10


def _outage(policy: tw.Misfire, grace: float | None = None) -> tuple[list[float], int, float]:
    """Run a 60 s interval, stop the scheduler for 10 intervals, restart on the same store."""
    store = MemoryStore()
    clock = FakeClock(start=datetime(2026, 1, 1, tzinfo=UTC))
    t0 = clock.time()
    runs: list[float] = []

    def job() -> None:
        runs.append(clock.time())

    s1 = tw.Scheduler(clock=clock, store=store, dispatcher=tw.InlineDispatcher()).start()
    s1.schedule(job, every=60, id="s", misfire=policy, misfire_grace=grace)
    clock.advance(seconds=150)  # runs at 60 and 120
    s1.shutdown()
    clock.advance(seconds=600)  # down: slots 180 .. 720 come due unseen
    s2 = tw.Scheduler(clock=clock, store=store, dispatcher=tw.InlineDispatcher()).start()
    s2.schedule(job, every=60, id="s", misfire=policy, misfire_grace=grace)  # same definition
    clock.advance(seconds=60)  # restart at 750; the next slot, 780, runs too
    missed = s2.statistics().missed_fires
    s2.shutdown()
    return [r - t0 for r in runs], missed, t0


def test_misfire_run_once_coalesces_an_outage() -> None:
    runs, missed, _ = _outage(tw.Misfire.RUN_ONCE)
    assert runs == [60, 120, 750, 780]
    assert missed == 9  # 10 slots came due, one run stood for all


def test_misfire_run_all_runs_each_missed_slot() -> None:
    runs, missed, _ = _outage(tw.Misfire.RUN_ALL)
    assert runs[:2] == [60, 120]
    assert runs[2:12] == [750] * 10
    assert runs[12:] == [780]
    assert missed == 0


def test_misfire_skip_drops_runs_later_than_the_grace() -> None:
    runs, missed, _ = _outage(tw.Misfire.SKIP, grace=15)
    assert runs == [60, 120, 780]
    assert missed == 10


def test_misfire_skip_within_grace_still_runs() -> None:
    runs, _, _ = _outage(tw.Misfire.SKIP, grace=45)
    assert runs == [60, 120, 750, 780]  # the 720 slot is 30 s late: within grace


@pytest.mark.parametrize(
    ("overlap", "max_instances", "expected_starts"),
    [("skip", 1, 2), ("queue", 1, 3), ("allow", 2, 3)],
)
def test_overlap_policies_with_a_slow_run(
    overlap: str, max_instances: int, expected_starts: int
) -> None:
    clock = FakeClock(start=datetime(2026, 1, 1, tzinfo=UTC))
    gate = threading.Event()
    started: list[float] = []
    lock = threading.Lock()

    def slow() -> None:
        with lock:
            started.append(clock.time())
            first = len(started) == 1
        if first:
            gate.wait(10)

    with tw.Scheduler(clock=clock, dispatcher=tw.ThreadPoolDispatcher(workers=3)) as sched:
        sched.schedule(slow, every=60, id="slow", overlap=overlap, max_instances=max_instances)
        clock.advance(seconds=60)  # first run starts and blocks
        for _ in range(500):
            if started:
                break
            threading.Event().wait(0.01)
        clock.advance(seconds=60)  # second slot while the first is still running
        threading.Event().wait(0.2)
        during = len(started)
        gate.set()
        for _ in range(500):  # let the first run finish before the third slot
            if not sched.store.tasks(state=tw.TaskState.RUNNING):
                break
            threading.Event().wait(0.01)
        clock.advance(seconds=60)  # third slot, the first has finished
        for _ in range(500):
            if len(started) >= expected_starts:
                break
            threading.Event().wait(0.01)
        threading.Event().wait(0.1)
        if overlap == "skip":
            assert during == 1
            assert sched.statistics().missed_fires == 1
        elif overlap == "allow":
            assert during == 2
        assert len(started) == expected_starts


def test_pause_resume_cancel(year: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = year
    runs: list[float] = []
    h = sched.schedule(lambda: runs.append(clock.time()), every=60, id="p")
    clock.advance(minutes=2)
    assert len(runs) == 2
    h.pause()
    assert h.paused
    assert h.next_run is None
    clock.advance(minutes=5)
    assert len(runs) == 2
    h.resume()
    clock.advance(minutes=2)
    assert len(runs) == 4
    assert h.cancel() is True
    clock.advance(minutes=5)
    assert len(runs) == 4
    assert sched.schedules() == []


def test_run_now_runs_once_beside_the_series(year: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = year
    runs: list[float] = []
    h = sched.schedule(lambda: runs.append(clock.time()), every=3600, id="hourly")
    before = h.next_run
    clock.advance(seconds=10)
    assert runs == []
    job = h.run_now()
    clock.advance(seconds=1)
    assert job.done()
    assert job.state is tw.TaskState.SUCCEEDED
    assert len(runs) == 1
    assert h.next_run == before  # the series keeps its time
    assert h.last_job is not None
    clock.advance(hours=1)
    assert len(runs) == 2  # the regular run, once
    h.pause()
    with pytest.raises(tw.errors.InvalidTransitionError, match="paused"):
        h.run_now()


def test_reregistering_keeps_or_replaces(year: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = year
    runs: list[str] = []

    def job(tag: str) -> None:
        runs.append(tag)

    a = sched.schedule(job, "a", cron="*/10 * * * *")
    b = sched.schedule(job, "a", cron="*/10 * * * *")  # identical: the series stays
    assert a == b
    assert a.id == f"{job.__module__}:{job.__qualname__}"
    assert len(sched.store.tasks(state=tw.TaskState.PENDING)) == 1
    sched.schedule(job, "b", cron="*/10 * * * *")  # different: replaces
    clock.advance(minutes=10)
    assert runs == ["b"]
    with pytest.raises(tw.DuplicateKeyError, match="already exists"):
        sched.schedule(job, "c", cron="*/10 * * * *", on_conflict="error")


def test_decorators_and_registry(year: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = year
    hits: list[str] = []

    @sched.cron("0 * * * *")
    def hourly() -> None:
        hits.append("hourly")

    @sched.every(minutes=30)
    def half() -> None:
        hits.append("half")

    reg = tw.Registry()

    def noon() -> None:
        hits.append("noon")

    assert reg.cron("0 12 * * *", tz="Europe/Berlin")(noon) is noon  # returned unchanged
    handles = sched.include(reg)
    assert [h.id for h in handles] == [f"{noon.__module__}:{noon.__qualname__}"]
    clock.advance(days=1)
    assert hits.count("hourly") == 24
    assert hits.count("half") == 48
    assert hits.count("noon") == 1
    assert hourly.schedule_handle.id.endswith("hourly")  # type: ignore[attr-defined]


def test_retries_of_one_run_never_delay_the_next_slot(
    year: tuple[FakeClock, tw.Scheduler],
) -> None:
    clock, sched = year
    t0 = clock.time()
    starts: list[float] = []

    def flaky() -> None:
        starts.append(clock.time() - t0)
        if len(starts) == 1:
            raise RuntimeError("first run fails")

    sched.schedule(flaky, every=60, retry=tw.Retry(max_attempts=3, backoff="fixed", delay=90))
    clock.advance(minutes=3)
    assert starts == [60, 120, 150, 180]  # the retry at 150 sits between the slots


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"cron": "61 * * * *"}, "minute"),
        ({"cron": "0 0 30 2 *"}, "never"),
        ({"cron": "@reboot"}, "@reboot"),
        ({"cron": "0 0 * * *", "tz": "Mars/Olympus"}, "Mars/Olympus"),
        ({"every": 0}, "every"),
        ({"every": 60, "delay": 5}, "exactly one"),
        ({"cron": "* * * * *", "misfire": "sometimes"}, "misfire"),
        ({"cron": "* * * * *", "overlap": "merge"}, "overlap"),
        ({"cron": "* * * * *", "max_instances": 0}, "max_instances"),
        ({"delay": 5, "tz": "UTC"}, "tz= applies"),
    ],
)
def test_bad_recurring_input(
    year: tuple[FakeClock, tw.Scheduler], options: dict[str, Any], match: str
) -> None:
    _, sched = year
    with pytest.raises(tw.InvalidScheduleError, match=match):
        sched.schedule(print, **options)
    assert sched.schedules() == []


def test_interval_with_a_sub_microsecond_anchor_never_skips() -> None:
    """Instance ids round slots to microseconds; the plan must use the exact slot, or a run
    'late by 0.000 s' is taken for a misfire and skipped."""
    clock = FakeClock(start=1_795_990_199.154_898_3)
    runs: list[float] = []
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        sched.schedule(lambda: runs.append(clock.time()), every=0.5, id="fine")
        clock.advance(seconds=10)
        assert len(runs) == 20
        assert sched.statistics().missed_fires == 0


def test_upcoming_shows_the_midnight_spike_before_it_fires() -> None:
    clock = FakeClock(start=datetime(2026, 1, 1, 22, tzinfo=UTC))
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        for i in range(500):
            sched.schedule(print, cron="0 0 * * *", id=f"nightly-{i}")
        sched.schedule(print, delay=90)
        ahead = sched.upcoming(3 * 3600, bucket="hour")
        assert ahead == [
            (datetime(2026, 1, 1, 22, tzinfo=UTC), 1),
            (datetime(2026, 1, 2, 0, tzinfo=UTC), 500),
        ]
        minutes = sched.upcoming(7260, bucket="minute")
        assert minutes[-1] == (datetime(2026, 1, 2, 0, 0, tzinfo=UTC), 500)


def test_a_recurring_run_cut_off_by_a_lost_lease_runs_again_not_skipped() -> None:
    """The re-queued run is the same run continuing: the misfire policy (which would call it
    30 s late and skip it under SKIP with a 10 s grace) does not apply to it again."""
    clock = FakeClock(start=datetime(2026, 1, 1, tzinfo=UTC))
    # the series runs on queue "ext", served by workers elsewhere: here it only triggers
    with tw.Scheduler(
        clock=clock, dispatcher=tw.InlineDispatcher(queues=["inline"]), lease=30
    ) as sched:
        t0 = clock.time()
        sched.schedule(print, every=60, id="s", queue="ext", misfire="skip", misfire_grace=10)
        clock.advance(seconds=60)
        run = sched.store.tasks(state=tw.TaskState.READY)[0]
        claimed = sched.store.claim(
            run.id, expected_version=run.version, owner="dead", lease_expires=t0 + 90, now=t0 + 60
        )
        assert claimed is not None
        clock.advance(seconds=35)  # the lease ran out at 90: re-queued, and READY again
        again = sched.store.get(run.id)
        assert again.state is tw.TaskState.READY, again.error
        assert again.attempts == 1
        assert sched.statistics().missed_fires == 0
        heads = sched.store.tasks(state=tw.TaskState.PENDING)
        assert [h.due - t0 for h in heads] == [120.0]


def report() -> None:
    """A schedule's function that a durable store can name."""


def test_concurrent_registration_keeps_the_other_process_head(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes register the same schedule at once, across a slot boundary: the later one
    finds the earlier one's record at its insert and keeps that series, whose just-due head is
    not cancelled."""
    from timewheel.stores import SQLiteStore

    path = tmp_path / "shared.db"
    clock = FakeClock(start=datetime(2026, 1, 1, 8, 55, tzinfo=UTC))
    allow = ["tests.test_recurring"]
    early = tw.Scheduler(
        store=SQLiteStore(path), clock=clock, dispatcher=tw.NullDispatcher(), allow=allow
    )
    early.start()
    early.schedule(report, cron="0 9 * * *", id="report")
    clock.advance(minutes=5)  # 09:00: the head is due and promoted
    (head,) = early.store.tasks(state=tw.TaskState.READY, schedule_id="report")

    late_store = SQLiteStore(path)
    real_get = late_store.get_schedule
    reads: list[str] = []

    def read_before_the_other_write(schedule_id: str) -> ScheduleRecord | None:
        reads.append(schedule_id)
        return None if len(reads) == 1 else real_get(schedule_id)

    monkeypatch.setattr(late_store, "get_schedule", read_before_the_other_write)
    late = tw.Scheduler(
        store=late_store, clock=clock, dispatcher=tw.NullDispatcher(), allow=allow
    ).start()
    late.schedule(report, cron="0 9 * * *", id="report")
    try:
        same = early.store.get(head.id)
        assert same.state is tw.TaskState.READY
        assert same.version == head.version
        assert early.store.get_schedule("report").version == 0  # type: ignore[union-attr]
        assert reads == ["report", "report"]  # read again after its insert met the record
    finally:
        late.shutdown()
        early.shutdown()
