"""Scheduler behaviour on a FakeClock with the InlineDispatcher: nothing here sleeps."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import timewheel as tw
from timewheel.testing import FakeClock

UTC = timezone.utc
START = datetime(2026, 3, 29, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=START)


@pytest.fixture
def sched(clock: FakeClock) -> Iterator[tw.Scheduler]:
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as s:
        yield s


def test_design_example_runs_without_sleeping(clock: FakeClock, sched: tw.Scheduler) -> None:
    calls: list[tuple[str, float]] = []

    def send_email(to: str) -> str:
        calls.append((to, clock.time()))
        return f"sent to {to}"

    job = sched.schedule(send_email, "bob@example.com", delay=600)
    assert not job.done()
    clock.advance(minutes=9, seconds=59)
    assert calls == []
    ran = clock.advance(seconds=1)
    assert ran == [job]
    assert calls == [("bob@example.com", START.timestamp() + 600)]
    assert job.result(timeout=0) == "sent to bob@example.com"
    assert job.state is tw.TaskState.SUCCEEDED


def test_advance_steps_deadline_by_deadline_in_due_order(
    clock: FakeClock, sched: tw.Scheduler
) -> None:
    seen: list[tuple[int, float]] = []

    def f(n: int) -> None:
        seen.append((n, clock.time()))

    t0 = clock.time()
    for n, d in [(3, 30.5), (1, 10.25), (2, 20.0), (4, 30.5)]:
        sched.schedule(f, n, delay=d)
    clock.advance(minutes=1)
    assert seen == [(1, t0 + 10.25), (2, t0 + 20.0), (3, t0 + 30.5), (4, t0 + 30.5)]
    assert clock.time() == t0 + 60


def test_tasks_scheduled_during_the_advance_run_in_it(
    clock: FakeClock, sched: tw.Scheduler
) -> None:
    seen: list[float] = []

    def chain(n: int) -> None:
        seen.append(clock.time())
        if n:
            sched.schedule(chain, n - 1, delay=10)

    t0 = clock.time()
    sched.schedule(chain, 5, delay=10)
    clock.advance(seconds=45)
    assert seen == [t0 + 10, t0 + 20, t0 + 30, t0 + 40]
    clock.advance(seconds=100)
    assert seen[-2:] == [t0 + 50, t0 + 60]


def test_negative_delay_and_past_at_mean_due_now(clock: FakeClock, sched: tw.Scheduler) -> None:
    a = sched.schedule(lambda: "a", delay=-5)
    b = sched.schedule(lambda: "b", at=START - timedelta(days=1))
    clock.advance(0)
    assert a.result(timeout=0) == "a"
    assert b.result(timeout=0) == "b"


def test_at_accepts_aware_datetimes_in_any_zone(clock: FakeClock, sched: tw.Scheduler) -> None:
    from zoneinfo import ZoneInfo

    at = datetime(2026, 3, 29, 9, 30, tzinfo=ZoneInfo("Asia/Tokyo"))  # 00:30 UTC
    job = sched.schedule(lambda: 1, at=at)
    assert job.task.due == at.timestamp()
    clock.advance(minutes=29)
    assert not job.done()
    clock.advance(minutes=1)
    assert job.done()


def test_retry_with_backoff_then_success(clock: FakeClock, sched: tw.Scheduler) -> None:
    times: list[float] = []

    def flaky() -> str:
        times.append(clock.time())
        if len(times) < 3:
            raise ConnectionError("down")
        return "up"

    t0 = clock.time()
    job = sched.schedule(
        flaky, delay=1, retry=tw.Retry(max_attempts=3, delay=2, backoff="exponential")
    )
    clock.advance(minutes=1)
    assert times == [t0 + 1, t0 + 3, t0 + 7]  # waits 2, then 4
    assert job.result(timeout=0) == "up"
    assert job.task.attempts == 3
    assert sched.statistics().retried == 2


def test_failure_without_retries_keeps_the_exception(clock: FakeClock, sched: tw.Scheduler) -> None:
    def boom() -> None:
        raise KeyError("missing")

    job = sched.schedule(boom, delay=1)
    clock.advance(seconds=1)
    assert job.state is tw.TaskState.FAILED
    with pytest.raises(KeyError, match="missing"):
        job.result(timeout=0)
    assert isinstance(job.exception(timeout=0), KeyError)
    assert "KeyError" in (job.task.error or "")


def test_retry_on_limits_which_exceptions_are_retried(
    clock: FakeClock, sched: tw.Scheduler
) -> None:
    def boom() -> None:
        raise ValueError("bad input")

    job = sched.schedule(boom, delay=1, retry=tw.Retry(max_attempts=5, retry_on=(ConnectionError,)))
    clock.advance(minutes=5)
    assert job.state is tw.TaskState.FAILED
    assert job.task.attempts == 1


def test_cancel_pending_and_finished(clock: FakeClock, sched: tw.Scheduler) -> None:
    ran: list[int] = []
    a = sched.schedule(ran.append, 1, delay=10)
    b = sched.schedule(ran.append, 2, delay=20)
    assert a.cancel() is True
    assert a.cancel() is True  # idempotent
    clock.advance(seconds=30)
    assert ran == [2]
    assert a.cancelled()
    assert b.cancel() is False
    with pytest.raises(tw.JobCancelledError):
        a.result(timeout=0)
    with pytest.raises(tw.TaskNotFoundError):
        sched.cancel("no-such-id")


def test_user_id_makes_scheduling_idempotent(clock: FakeClock, sched: tw.Scheduler) -> None:
    ran: list[str] = []
    j1 = sched.schedule(ran.append, "first", delay=10, id="report")
    with pytest.raises(tw.DuplicateKeyError, match="report"):
        sched.schedule(ran.append, "second", delay=10, id="report")
    j2 = sched.schedule(ran.append, "kept?", delay=5, id="report", on_conflict="keep")
    assert j2 == j1
    j3 = sched.schedule(ran.append, "replaced", delay=30, id="report", on_conflict="replace")
    clock.advance(seconds=20)
    assert ran == []
    clock.advance(seconds=10)
    assert ran == ["replaced"]
    assert j3.result(timeout=0) is None


def test_priority_orders_tasks_due_together(clock: FakeClock, sched: tw.Scheduler) -> None:
    order: list[str] = []
    for name, prio in [("low", 0), ("high", 10), ("mid", 5)]:
        sched.schedule(order.append, name, delay=5, priority=prio)
    clock.advance(seconds=5)
    assert order == ["high", "mid", "low"]


def test_kwargs_are_passed_separately_from_options(clock: FakeClock, sched: tw.Scheduler) -> None:
    def f(a: int, *, delay: str) -> str:
        return f"{a}:{delay}"

    job = sched.schedule(f, 1, delay=1, kwargs={"delay": "mine"})
    clock.advance(seconds=1)
    assert job.result(timeout=0) == "1:mine"


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({}, tw.InvalidScheduleError, "exactly one of delay= or at="),
        ({"delay": 1, "at": START}, tw.InvalidScheduleError, "delay and at"),
        ({"delay": math.nan}, tw.InvalidScheduleError, "nan"),
        ({"delay": math.inf}, tw.InvalidScheduleError, "inf"),
        ({"delay": "10"}, TypeError, "'10'"),
        ({"delay": True}, TypeError, "True"),
        ({"delay": -math.inf}, tw.InvalidScheduleError, "inf"),
        ({"delay": 10**400}, tw.InvalidScheduleError, "delay must be finite.*too large"),
        ({"delay": 1, "priorty": 2}, TypeError, "'priorty' .did you mean 'priority'"),
        ({"at": datetime(2026, 1, 1)}, tw.InvalidScheduleError, "naive datetime.*attach"),
        ({"delay": 1, "timeout": 0}, tw.InvalidScheduleError, "timeout"),
        ({"delay": 1, "when": "sometimes"}, tw.InvalidScheduleError, "sometimes"),
        ({"delay": 1, "queue": ""}, tw.InvalidScheduleError, "queue"),
        ({"delay": 1, "priority": 1.5}, TypeError, "priority"),
        ({"delay": 1, "after": ["nope"]}, tw.TaskNotFoundError, "nope"),
        ({"delay": 1, "on_conflict": "merge"}, tw.InvalidScheduleError, "merge"),
    ],
)
def test_bad_input_raises_at_the_call(
    sched: tw.Scheduler, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        sched.schedule(print, **options)
    assert sched.store.count_by_state() == {}


def test_default_options_take_the_compact_path_with_the_same_result(
    clock: FakeClock, sched: tw.Scheduler
) -> None:
    seen: list[tw.Event] = []
    fast = sched.schedule(print, 1, 2, delay=30)  # no options: the compact fast path
    full = sched.schedule(print, 1, 2, delay=30, priority=0)  # an option: the full path
    assert sched.store._lite.keys() == {fast.id}  # type: ignore[attr-defined]
    a, b = fast.task, full.task
    assert a == b.evolve(id=a.id, created=a.created, updated=a.updated, due=a.due)
    assert a.due == a.created + 30
    assert a.state is tw.TaskState.PENDING
    sched.add_listener(seen.append, "submitted")
    late = sched.schedule(print, delay=1.5)
    assert [(e.name, e.task.id, e.task.due) for e in seen] == [
        ("submitted", late.id, clock.time() + 1.5)
    ]
    assert sched.statistics().submitted == 3
    assert sorted(j.id for j in clock.advance(minutes=1)) == sorted([fast.id, full.id, late.id])
    assert fast.state is tw.TaskState.SUCCEEDED
    assert not sched.store._lite  # type: ignore[attr-defined]


def test_plain_at_takes_the_compact_path_too(clock: FakeClock, sched: tw.Scheduler) -> None:
    t0 = clock.time()
    by_number = sched.schedule(print, 1, at=t0 + 60)
    by_datetime = sched.schedule(print, 2, at=START + timedelta(seconds=90))
    in_berlin = sched.schedule(
        print, 3, at=datetime(2026, 3, 29, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    )
    full = sched.schedule(print, 1, at=t0 + 60, queue="default")  # an option: full path
    lite = sched.store._lite  # type: ignore[attr-defined]
    assert set(lite) == {by_number.id, by_datetime.id, in_berlin.id}
    assert by_number.task == full.task.evolve(id=by_number.id)
    assert by_datetime.task.due == t0 + 90
    assert in_berlin.task.due == t0 + 30  # 01:00:30 at +01:00 is 00:00:30 UTC
    ran = clock.advance(minutes=2)
    assert [j.id for j in ran] == [in_berlin.id, by_number.id, full.id, by_datetime.id]
    # bad values still take the full path, which names them
    with pytest.raises(tw.InvalidScheduleError, match="naive datetime"):
        sched.schedule(print, at=datetime(2026, 1, 1))
    with pytest.raises(tw.InvalidScheduleError, match="nan"):
        sched.schedule(print, at=math.nan)
    with pytest.raises(tw.InvalidScheduleError, match="delay and at"):
        sched.schedule(print, delay=1, at=t0)


def test_non_callable_is_refused(sched: tw.Scheduler) -> None:
    with pytest.raises(TypeError, match="callable"):
        sched.schedule(42, delay=1)  # type: ignore[call-overload]


def test_schedule_after_shutdown_is_refused(clock: FakeClock) -> None:
    s = tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher())
    s.start()
    s.shutdown()
    with pytest.raises(tw.SchedulerStateError, match="shut down"):
        s.schedule(print, delay=1)
    with pytest.raises(tw.SchedulerStateError, match="stopped"):
        s.start()
    s.shutdown()  # idempotent


def test_tasks_scheduled_before_start_run_after_it(clock: FakeClock) -> None:
    s = tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher())
    job = s.schedule(lambda: "x", delay=5)
    clock.advance(seconds=10)
    assert not job.done()  # not started: nothing triggers
    with s:
        clock.advance(0)
        assert job.result(timeout=0) == "x"


def test_result_timeout_on_the_fake_clock(sched: tw.Scheduler) -> None:
    job = sched.schedule(print, delay=60)
    with pytest.raises(tw.JobTimeoutError, match="still pending"):
        job.result(timeout=0)
    with pytest.raises(TimeoutError):
        job.result(timeout=0)


def test_task_decorator_with_defaults(clock: FakeClock, sched: tw.Scheduler) -> None:
    @sched.task(priority=3, retry=tw.Retry(max_attempts=2))
    def double(x: int) -> int:
        return 2 * x

    assert double(4) == 8  # still a plain function
    job = double.schedule(21, delay=1)
    assert job.task.priority == 3
    assert job.task.retry.max_attempts == 2
    clock.advance(seconds=1)
    assert job.result(timeout=0) == 42


def test_listeners_and_done_callbacks(clock: FakeClock, sched: tw.Scheduler) -> None:
    events: list[tuple[str, str]] = []
    sched.add_listener(lambda e: events.append((e.name, e.task.id)))
    done: list[str] = []

    def fail() -> None:
        raise RuntimeError("x")

    ok = sched.schedule(lambda: None, delay=1, id="ok")
    bad = sched.schedule(fail, delay=2, id="bad", retry=tw.Retry(max_attempts=2, delay=1))
    ok.add_done_callback(lambda j: done.append(j.id))
    bad.add_done_callback(lambda j: done.append(j.id))
    clock.advance(seconds=10)
    ok.add_done_callback(lambda j: done.append("again:" + j.id))  # already done: called at once
    assert done == ["ok", "bad", "again:ok"]
    names = [e for e in events if e[1] == "bad"]
    assert names == [
        ("submitted", "bad"),
        ("started", "bad"),
        ("retried", "bad"),
        ("started", "bad"),
        ("failed", "bad"),
    ]
    with pytest.raises(tw.InvalidScheduleError, match="unknown event"):
        sched.add_listener(print, "exploded")


def test_listener_exceptions_are_logged_not_raised(
    clock: FakeClock, sched: tw.Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    def bad_listener(e: tw.Event) -> None:
        raise RuntimeError("listener bug")

    sched.add_listener(bad_listener, "succeeded")
    job = sched.schedule(lambda: 5, delay=1)
    clock.advance(seconds=1)
    assert job.result(timeout=0) == 5
    assert "listener bug" in caplog.text


def test_statistics(clock: FakeClock, sched: tw.Scheduler) -> None:
    for i in range(10):
        sched.schedule(lambda: None, delay=i)
    sched.schedule(lambda: None, delay=3600)
    clock.advance(seconds=10)
    st = sched.statistics()
    assert st.states == {"succeeded": 10, "pending": 1}
    assert st.in_wheel == 1
    assert st.submitted == 11
    assert st.succeeded == 10
    assert st.lateness_max == 0.0  # a fake clock is never late
    assert st.uptime == 10.0


def test_run_until_idle(clock: FakeClock, sched: tw.Scheduler) -> None:
    for d in (5, 3600, 86400 * 3):
        sched.schedule(lambda: None, delay=d)
    ran = sched.run_until_idle()
    assert len(ran) == 3
    assert clock.time() == START.timestamp() + 86400 * 3

    def again() -> None:
        sched.schedule(again, delay=1)

    sched.schedule(again, delay=1)
    with pytest.raises(tw.SchedulerStateError, match="limit"):
        sched.run_until_idle(limit=50)


def test_expired_lease_reruns_the_task(clock: FakeClock) -> None:
    """A worker that claimed a task and then vanished: the reaper re-queues it."""
    events: list[str] = []
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher(), lease=30) as s:
        s.add_listener(lambda e: events.append(e.name), "timed_out")
        job = s.schedule(lambda: "done", delay=5)
        clock.advance(seconds=4)
        # a worker elsewhere promotes and claims it, then dies without heartbeating
        ready = s.store.promote([job.id], clock.time() + 1)
        t = s.store.claim(
            job.id,
            expected_version=ready[0].version,
            owner="dead-worker",
            lease_expires=clock.time() + 30,
            now=clock.time(),
        )
        assert t is not None
        clock.advance(seconds=29.5)
        assert job.state is tw.TaskState.RUNNING
        clock.advance(seconds=1)
        assert job.result(timeout=0) == "done"
        assert events == ["timed_out"]
        assert job.task.attempts == 2
        assert "lease of dead-worker expired" in (job.task.error or "")


def test_fake_clock_refuses_to_go_backwards(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="time can't go backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="time can't go backwards"):
        clock.advance_to(START - timedelta(seconds=1))


def test_job_repr_and_equality(sched: tw.Scheduler) -> None:
    job = sched.schedule(print, delay=1, id="x")
    assert repr(job) == "<Job 'x' pending>"
    assert sched.get("x") == job
    assert sched.jobs(tw.TaskState.PENDING) == [job]
    with pytest.raises(tw.TaskNotFoundError):
        sched.get("y")


def test_tasks_of_queues_not_served_here_never_fill_the_ready_queue(clock: FakeClock) -> None:
    """A dispatcher serving only "fast": "slow" tasks stay READY in the store for other
    workers, and cannot take the bounded queue's places from "fast" ones."""
    with tw.Scheduler(
        clock=clock, dispatcher=tw.InlineDispatcher(queues=["fast"]), ready_capacity=2
    ) as s:
        ran: list[str] = []
        for i in range(5):
            s.schedule(ran.append, f"slow{i}", delay=1, queue="slow")
        for i in range(3):
            s.schedule(ran.append, f"fast{i}", delay=2, queue="fast")
        clock.advance(seconds=3)
        assert ran == ["fast0", "fast1", "fast2"]
        assert len(s.store.tasks(state=tw.TaskState.READY)) == 5
        assert len(s.ready_queue) == 0


def test_null_dispatcher_only_triggers(clock: FakeClock) -> None:
    """A trigger-only process: due tasks become READY rows for workers elsewhere."""
    with tw.Scheduler(clock=clock, dispatcher=tw.NullDispatcher()) as s:
        jobs = [s.schedule(print, i, delay=i) for i in range(1, 4)]
        clock.advance(seconds=2)
        assert [j.state for j in jobs] == [
            tw.TaskState.READY,
            tw.TaskState.READY,
            tw.TaskState.PENDING,
        ]
        assert len(s.ready_queue) == 0


def test_an_id_with_an_at_sign_is_a_plain_task(clock: FakeClock, sched: tw.Scheduler) -> None:
    """Recurring instances are told apart by their schedule field, never by the shape of the id."""
    ran: list[str] = []
    job = sched.schedule(ran.append, "mail", delay=60, id="user@example.com")
    also = sched.schedule(ran.append, "now", delay=0, id="billing@2026")
    clock.advance(minutes=2)
    assert ran == ["now", "mail"]
    assert job.task.schedule_id is None
    assert also.done()
    assert sched.statistics().missed_fires == 0


def test_an_unknown_zone_is_refused_at_construction() -> None:
    with pytest.raises(tw.InvalidScheduleError, match="Europe/Berln"):
        tw.Scheduler(timezone="Europe/Berln")


# options a type checker would refuse, passed as a user without one could
STRAY: dict[str, Any] = {"recipient": "bob"}
MISSPELT: dict[str, Any] = {"priorty": 3}
RECURRING_ONLY: dict[str, Any] = {"misfire": "skip"}


def test_a_stray_keyword_points_to_kwargs(sched: tw.Scheduler) -> None:
    with pytest.raises(TypeError, match=r"kwargs=\{'recipient': \.\.\.\}"):
        sched.schedule(print, delay=1, **STRAY)
    with pytest.raises(TypeError, match="did you mean 'priority'"):
        sched.schedule(print, delay=1, **MISSPELT)


def test_recurring_options_on_a_one_shot_task_are_refused(sched: tw.Scheduler) -> None:
    with pytest.raises(tw.InvalidScheduleError, match="misfire= applies to cron= and every="):
        sched.schedule(print, delay=1, **RECURRING_ONLY)
