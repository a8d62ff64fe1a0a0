"""Recurring calls with options checked before (``timewheel.shapes``): the schedules they make are
the ones the full path makes, and every error is still raised at the call.

A herd is many ``schedule(f, cron=..., id=...)`` calls that differ in the id alone; after the
first, a call reuses the checked shape of its options and checks only its own parts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import timewheel as tw
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    SchedulerStateError,
    SerializationError,
)
from timewheel.stores.base import Store
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import ScheduleRecord, Task, TaskState
from timewheel.testing import FakeClock

UTC = timezone.utc
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC).timestamp()
EVENING = MIDNIGHT - 3600


def job(*args: Any, **kwargs: Any) -> None:
    """A module-level task (a durable store keeps it by reference)."""


def other_job() -> None:
    """Another module-level task."""


def sched(store: Store | None = None, **kw: Any) -> tuple[FakeClock, tw.Scheduler]:
    clock = FakeClock(EVENING)
    return clock, tw.Scheduler(
        clock=clock, dispatcher=tw.InlineDispatcher(), store=store, allow=[__name__], **kw
    )


def stored(s: tw.Scheduler, sid: str) -> tuple[ScheduleRecord, list[Task]]:
    rec = s.store.get_schedule(sid)
    assert rec is not None
    return rec, s.store.tasks(schedule_id=sid)


def same_series(a: tuple[ScheduleRecord, list[Task]], b: tuple[ScheduleRecord, list[Task]]) -> None:
    """Two schedules (of different ids) are stored alike: record and head instance."""
    (ra, ta), (rb, tb) = a, b
    assert (ra.func, ra.args, dict(ra.kwargs), dict(ra.rule), dict(ra.options)) == (
        rb.func,
        rb.args,
        dict(rb.kwargs),
        dict(rb.rule),
        dict(rb.options),
    )
    assert (ra.created, ra.paused, ra.version) == (rb.created, rb.paused, rb.version)
    assert len(ta) == len(tb) == 1
    x, y = ta[0], tb[0]
    fields = ("func", "args", "due", "state", "retry", "priority", "queue", "timeout", "created")
    assert [getattr(x, f) for f in fields] == [getattr(y, f) for f in fields]
    assert dict(x.extra) == dict(y.extra)
    assert x.id.split("@")[1] == y.id.split("@")[1]


OPTION_SETS: list[dict[str, Any]] = [
    {"cron": "0 0 * * *"},
    {"cron": "*/5 * * * *", "tz": "Europe/Berlin", "priority": 3, "queue": "nightly"},
    {
        "cron": "0 0 * * *",
        "retry": tw.Retry(max_attempts=3),
        "timeout": timedelta(minutes=5),
        "misfire": "run_all",
        "misfire_grace": 30,
        "overlap": "allow",
        "max_instances": 2,
        "max_runs": 5,
        "end": MIDNIGHT + 86400 * 30,
    },
    {"every": 600, "start": EVENING - 7},
    {"cron": "0 0 * * *", "jitter": 0.0, "on_conflict": "error"},
]


@pytest.mark.parametrize("options", OPTION_SETS)
def test_a_herd_member_is_stored_as_the_first_call_stores_it(
    make_store: Callable[[], Store], options: dict[str, Any]
) -> None:
    """The first call of a set of options takes the full path; the next reuse its shape. On a
    fresh scheduler (nothing reused), the same call stores the same schedule."""
    _, s = sched(make_store())
    with s:
        s.schedule(job, 1, "a", **options, id="h-0", kwargs={"k": [1, 2]})
        assert len(s.runtime.recurring.shapes) == 1
        s.schedule(job, 1, "a", **options, id="h-1", kwargs={"k": [1, 2]})
        assert len(s.runtime.recurring.shapes) == 1, "one shape for the herd"
        reused = stored(s, "h-1")
    _, fresh = sched(make_store())
    with fresh:
        fresh.schedule(job, 1, "a", **options, id="h-1", kwargs={"k": [1, 2]})
        same_series(reused, stored(fresh, "h-1"))
    same_series(stored(s, "h-0"), reused)


def test_a_known_shape_still_checks_the_id_the_arguments_and_kwargs() -> None:
    _, s = sched()
    s.schedule(job, cron="0 0 * * *", id="ok")
    with pytest.raises(InvalidScheduleError, match="schedule id"):
        s.schedule(job, cron="0 0 * * *", id="a@b")
    with pytest.raises(InvalidScheduleError, match="schedule id"):
        s.schedule(job, cron="0 0 * * *", id="")
    with pytest.raises(TypeError, match="kwargs must be a mapping"):
        s.schedule(job, cron="0 0 * * *", id="x", kwargs=[("a", 1)])  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="func must be callable"):
        s.schedule(42, cron="0 0 * * *", id="x")  # type: ignore[call-overload]
    assert [r.id for r in s.store.list_schedules()] == ["ok"], "nothing stored by a bad call"


def test_a_value_of_another_type_is_checked_again() -> None:
    """``priority=True`` equals ``priority=1`` as a key, but is refused: types are in the key."""
    _, s = sched()
    s.schedule(job, cron="0 0 * * *", id="a", priority=1)
    with pytest.raises(TypeError, match="priority must be an int"):
        s.schedule(job, cron="0 0 * * *", id="b", priority=True)
    s.schedule(job, cron="0 0 * * *", id="c", max_runs=2)
    with pytest.raises(TypeError):
        s.schedule(job, cron="0 0 * * *", id="d", max_runs=2.0)  # type: ignore[call-overload]


def test_bad_options_are_refused_every_time_and_never_kept() -> None:
    _, s = sched()
    for _ in range(2):
        with pytest.raises(InvalidScheduleError, match="misfire"):
            s.schedule(job, cron="0 0 * * *", id="a", misfire="sometimes")
        with pytest.raises(InvalidScheduleError):
            s.schedule(job, cron="0 0 61 * *", id="a")
        with pytest.raises(TypeError, match="unexpected keyword"):
            s.schedule(job, cron="0 0 * * *", id="a", priorty=1)  # type: ignore[call-overload]
        with pytest.raises(InvalidScheduleError, match="exactly one"):
            s.schedule(job, cron="0 0 * * *", id="a", at=MIDNIGHT)  # type: ignore[call-overload]
        with pytest.raises(InvalidScheduleError, match="after= does not apply"):
            s.schedule(job, cron="0 0 * * *", id="a", after="x")  # type: ignore[call-overload]
    assert len(s.runtime.recurring.shapes) == 0
    assert s.store.list_schedules() == []


def test_unhashable_option_values_take_the_full_path() -> None:
    _, s = sched()
    start = EVENING - 1

    class Unhashable(float):
        __hash__ = None  # type: ignore[assignment]

    for i in range(2):
        s.schedule(job, every=60, start=Unhashable(start), id=f"u{i}")
    assert len(s.runtime.recurring.shapes) == 0
    assert len(s.store.list_schedules()) == 2


def test_an_interval_anchored_at_its_creation_is_never_reused() -> None:
    """``every=`` without ``start=`` starts at the call: each call has its own anchor."""
    clock, s = sched()
    s.schedule(job, every=60, id="a")
    clock.advance(7.5)
    s.schedule(job, every=60, id="b")
    assert len(s.runtime.recurring.shapes) == 0
    assert s.store.get_schedule("a").rule["start"] == EVENING  # type: ignore[union-attr]
    assert s.store.get_schedule("b").rule["start"] == EVENING + 7.5  # type: ignore[union-attr]
    assert s.get("b@" + str(round((EVENING + 67.5) * 1e6))).task.due == EVENING + 67.5


def test_conflicts_and_a_stopped_scheduler_on_the_known_path() -> None:
    _, s = sched()
    s.schedule(job, cron="0 0 * * *", id="a", on_conflict="error")
    s.schedule(job, cron="0 0 * * *", id="a", on_conflict="error")  # the same: kept
    with pytest.raises(DuplicateKeyError):
        s.schedule(job, 1, cron="0 0 * * *", id="a", on_conflict="error")
    s.schedule(job, cron="0 0 * * *", id="b")
    s.schedule(other_job, cron="0 0 * * *", id="b")  # another function: replaces
    rec, tasks = stored(s, "b")
    assert rec.func is other_job
    assert [t.state for t in tasks] == [TaskState.PENDING]
    s.start()
    s.shutdown()
    with pytest.raises(SchedulerStateError):
        s.schedule(job, cron="0 0 * * *", id="c")


def test_a_durable_store_checks_the_arguments_of_every_call(tmp_path: Any) -> None:
    _, s = sched(SQLiteStore(tmp_path / "s.db"))
    with s:
        s.schedule(job, 1, cron="0 0 * * *", id="a")
        with pytest.raises(SerializationError):
            s.schedule(job, object(), cron="0 0 * * *", id="b")
        with pytest.raises(SerializationError):
            s.schedule(job, cron="0 0 * * *", id="c", kwargs={"x": object()})
        s.schedule(job, 2, cron="0 0 * * *", id="d")
        assert s.store.get_schedule("d").args == (2,)  # type: ignore[union-attr]
        assert s.store.get_schedule("b") is None


def test_a_herd_runs_on_the_known_path() -> None:
    """100 schedules made on the known path fire at midnight, each once, with a successor."""
    clock, s = sched()
    ran: list[str] = []
    for i in range(100):
        s.schedule(ran.append, f"h{i}", cron="0 0 * * *", id=f"h{i}")
    with s:
        clock.advance_to(MIDNIGHT)
    assert sorted(ran) == sorted(f"h{i}" for i in range(100))
    assert len(s.store.tasks(state=TaskState.PENDING)) == 100, "the next night's heads"


def test_instances_share_a_read_only_extra() -> None:
    _, s = sched()
    s.schedule(job, cron="0 0 * * *", id="a")
    s.schedule(job, cron="0 0 * * *", id="b")
    (ta,) = s.store.tasks(schedule_id="a")
    (tb,) = s.store.tasks(schedule_id="b")
    assert ta.extra == {"slot": MIDNIGHT}
    assert ta.extra is tb.extra
    with pytest.raises(TypeError):
        ta.extra["slot"] = 0.0  # type: ignore[index]
