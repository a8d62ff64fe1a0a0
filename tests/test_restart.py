"""Restarts on a real SQLite file: a new Scheduler picks up what the previous one left behind.

Each test runs one scheduler on a file, stops it (or leaves rows as a dead process would), and
opens a new scheduler on the same file, on the same ``FakeClock``: nothing here sleeps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import timewheel as tw
from tests.apps.crash_app import add, boom, record
from timewheel.stores.base import Promoted
from timewheel.stores.sqlite import SQLiteStore
from timewheel.testing import FakeClock

UTC = timezone.utc
START = datetime(2026, 3, 29, tzinfo=UTC)
S = tw.TaskState


class Env:
    """One SQLite file and one fake clock shared by the schedulers a test opens in turn."""

    def __init__(self, tmp_path: Path) -> None:
        self.db = tmp_path / "tasks.db"
        self.runs = str(tmp_path / "runs.log")
        self.clock = FakeClock(start=START)
        self.t0 = self.clock.time()
        self.starts: list[tuple[str, float]] = []  # (task id, clock time) of each start
        self._open: list[tw.Scheduler] = []

    def open(self, **options: Any) -> tw.Scheduler:
        """A started scheduler on the file (a new store connection, as after a restart)."""
        options.setdefault("allow", ["tests.apps"])
        sched = tw.Scheduler(
            clock=self.clock,
            store=SQLiteStore(self.db, durability="fast"),
            dispatcher=tw.InlineDispatcher(),
            **options,
        )
        sched.add_listener(
            lambda ev: self.starts.append((ev.task.id, self.clock.time())), "started"
        )
        self._open.append(sched)
        return sched.start()

    def close(self, sched: tw.Scheduler) -> None:
        sched.shutdown()
        sched.store.close()

    def store(self) -> SQLiteStore:
        return SQLiteStore(self.db, durability="fast")

    def ran(self) -> Counter[str]:
        """Runs per tag, from the functions' own log."""
        path = Path(self.runs)
        lines = path.read_text().splitlines() if path.exists() else []
        return Counter(line.split()[1] for line in lines)

    def close_all(self) -> None:
        for s in self._open:
            if s.running:
                self.close(s)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.close_all()


def test_tasks_of_a_previous_scheduler_run_at_their_due_time(env: Env) -> None:
    s1 = env.open()
    delays = {"soon": 10.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
    for tag, d in delays.items():
        s1.schedule(record, tag, env.runs, delay=d, id=tag)
    env.close(s1)
    assert env.starts == []

    s2 = env.open(horizon=300)
    # the wheel is rebuilt from the store, up to the horizon only
    assert s2.statistics().in_wheel == 2
    env.clock.advance(seconds=120)
    assert env.starts == [("soon", env.t0 + 10), ("minute", env.t0 + 60)]
    assert s2.statistics().in_wheel == 0
    env.clock.advance(seconds=3600 - 120 - 150)  # the hour task comes into the horizon
    assert s2.statistics().in_wheel == 1
    env.clock.advance(days=1)
    assert env.starts == [(tag, env.t0 + d) for tag, d in delays.items()]
    assert env.ran() == dict.fromkeys(delays, 1)
    assert all(s2.get(tag).result(timeout=0) == tag for tag in delays)
    env.close(s2)


def test_tasks_due_while_no_scheduler_ran_run_at_once_after_restart(env: Env) -> None:
    s1 = env.open()
    for k in range(5):
        s1.schedule(record, f"t{k}", env.runs, delay=10 * (k + 1), id=f"t{k}")
    env.close(s1)
    env.clock.advance(seconds=35)  # down: t0, t1, t2 came due unseen
    s2 = env.open()
    env.clock.advance(seconds=0.5)
    late = env.t0 + 35
    assert env.starts == [("t0", late), ("t1", late), ("t2", late)]  # in due order, not early
    env.clock.advance(seconds=30)
    assert env.starts[3:] == [("t3", env.t0 + 40), ("t4", env.t0 + 50)]
    assert env.ran() == {f"t{k}": 1 for k in range(5)}
    env.close(s2)


@pytest.mark.parametrize("expired_at_restart", [False, True])
def test_expired_lease_of_a_dead_process_is_requeued_and_run(
    env: Env, expired_at_restart: bool
) -> None:
    s1 = env.open()
    s1.schedule(record, "orphan", env.runs, delay=0, id="orphan")
    s1.schedule(record, "other", env.runs, delay=5, id="other")
    env.close(s1)
    # a worker process claimed "orphan" and was killed mid-run: its row stays RUNNING
    store = env.store()
    now = env.clock.time()
    ready = store.get("orphan")  # due when scheduled: stored READY
    assert ready.state is S.READY
    claimed = store.claim(
        "orphan",
        expected_version=ready.version,
        owner="gone-host:99999:w1",
        lease_expires=now + 30,
        now=now,
    )
    assert claimed is not None
    store.close()
    if expired_at_restart:
        env.clock.advance(seconds=60)
    s2 = env.open()
    if not expired_at_restart:
        env.clock.advance(seconds=29)
        assert env.starts == [("other", env.t0 + 5)]
        assert s2.get("orphan").state is S.RUNNING  # the lease still stands
    env.clock.advance(seconds=2)
    assert [tid for tid, _ in env.starts].count("orphan") == 1
    job = s2.get("orphan")
    assert job.result(timeout=0) == "orphan"
    assert job.task.attempts == 2  # the dead run, then the re-run after its lease expired
    assert job.task.lease_owner is None
    assert s2.statistics().timed_out == 1
    assert env.ran() == {"orphan": 1, "other": 1}
    env.close(s2)


def test_ready_rows_left_behind_are_run(env: Env) -> None:
    s1 = env.open()
    ids = [f"r{k:02d}" for k in range(25)]
    for tid in ids:
        s1.schedule(record, tid, env.runs, delay=1, id=tid)
    env.close(s1)
    store = env.store()
    env.clock.advance(seconds=2)
    moved = store.promote(ids, env.clock.time())  # a process promoted them and died
    assert len(moved) == 25
    assert store.count_by_state() == {S.READY: 25}
    store.close()

    s2 = env.open(ready_capacity=4)  # fewer places than rows: the backlog is refilled
    env.clock.advance(seconds=1)
    assert sorted(tid for tid, _ in env.starts) == ids
    assert env.ran() == dict.fromkeys(ids, 1)
    assert s2.store.count_by_state() == {S.SUCCEEDED: 25}
    env.close(s2)


def _outage(env: Env, policy: tw.Misfire, **options: Any) -> list[float]:
    """An every-60 s series runs at 60 and 120, the process is down from 150 to 750 (slots 180
    to 720 come due unseen), a new scheduler re-registers the same schedule and runs to 790."""
    s1 = env.open()
    s1.schedule(record, "s", env.runs, every=60, id="s", misfire=policy, **options)
    created = s1.schedules()[0].record.created
    env.clock.advance(seconds=150)
    env.close(s1)
    env.clock.advance(seconds=600)
    s2 = env.open()
    s2.schedule(record, "s", env.runs, every=60, id="s", misfire=policy, **options)
    (sch,) = s2.schedules()
    assert sch.record.created == created  # the identical definition kept the series
    env.clock.advance(seconds=40)
    pending = s2.store.tasks(state=S.PENDING, schedule_id="s")
    assert [t.id for t in pending] == [f"s@{round((env.t0 + 840) * 1e6)}"]  # one head
    ids = [tid for tid, _ in env.starts]
    assert len(ids) == len(set(ids)), "no instance ran twice"
    assert env.ran() == {"s": len(ids)}
    env.close(s2)
    return [t - env.t0 for _, t in env.starts]


def test_misfire_run_once_coalesces_the_downtime(env: Env) -> None:
    assert _outage(env, tw.Misfire.RUN_ONCE) == [60, 120, 750, 780]


def test_misfire_skip_skips_the_downtime(env: Env) -> None:
    assert _outage(env, tw.Misfire.SKIP, misfire_grace=15) == [60, 120, 780]
    store = env.store()
    skipped = [t for t in store.tasks(schedule_id="s") if t.state is S.CANCELLED]
    assert len(skipped) == 1  # the head due at 180, decided at 750
    assert "misfire" in (skipped[0].error or "")
    store.close()


def test_misfire_run_all_runs_each_missed_slot_up_to_max_runs(env: Env) -> None:
    runs = _outage(env, tw.Misfire.RUN_ALL, max_runs=4)
    assert runs == [60, 120, 750, 750, 750, 750, 780]
    store = env.store()
    catchups = [t for t in store.tasks(schedule_id="s") if t.extra.get("catchup")]
    # the four most recent missed slots ran, each under its own instance
    assert sorted(t.extra["slot"] - env.t0 for t in catchups) == [600, 660, 720]
    store.close()


def test_paused_schedule_stays_paused_across_restart(env: Env) -> None:
    s1 = env.open()
    s1.schedule(record, "p", env.runs, every=60, id="p")
    env.clock.advance(seconds=61)
    s1.schedules()[0].pause()
    env.close(s1)
    assert env.starts == [(f"p@{round((env.t0 + 60) * 1e6)}", env.t0 + 60)]

    s2 = env.open()
    s2.schedule(record, "p", env.runs, every=60, id="p")  # re-registered at start
    (sch,) = s2.schedules()
    assert sch.paused
    assert sch.next_run is None
    env.clock.advance(minutes=10)
    assert len(env.starts) == 1, "nothing runs while paused"
    env.close(s2)

    s3 = env.open()
    (sch,) = s3.schedules()
    assert sch.paused
    sch.resume()
    env.clock.advance(seconds=60)
    assert len(env.starts) == 2
    assert env.starts[1][1] == env.t0 + 720  # the first slot after the resume
    env.close(s3)


def test_results_and_errors_read_back_after_restart(env: Env) -> None:
    s1 = env.open()
    s1.schedule(add, 2, 3, delay=1, id="ok")
    s1.schedule(boom, "kaput", delay=1, id="bad")
    s1.schedule(add, 40, 2, delay=100, id="later")  # still pending at shutdown
    env.clock.advance(seconds=2)
    env.close(s1)

    s2 = env.open()
    assert s2.get("ok").result(timeout=0) == 5
    with pytest.raises(tw.TaskFailedError, match="ValueError: kaput"):
        s2.get("bad").result(timeout=0)
    exc = s2.get("bad").exception(timeout=0)
    assert isinstance(exc, tw.TaskFailedError)
    assert s2.get("bad").state is S.FAILED
    env.clock.advance(seconds=100)
    assert s2.get("later").result(timeout=0) == 42
    env.close(s2)


def test_fan_in_child_runs_once_after_the_last_parent_across_restart(env: Env) -> None:
    s1 = env.open()
    s1.schedule(record, "a", env.runs, delay=10, id="a")
    s1.schedule(record, "b", env.runs, delay=100, id="b")
    s1.schedule(record, "child", env.runs, after=["a", "b"], id="child")
    env.clock.advance(seconds=50)
    assert [tid for tid, _ in env.starts] == ["a"]
    env.close(s1)

    s2 = env.open()
    assert s2.get("child").task.unmet == 1  # a's completion survived the restart
    env.clock.advance(seconds=100)
    assert env.starts == [("a", env.t0 + 10), ("b", env.t0 + 100), ("child", env.t0 + 100)]
    assert env.ran() == {"a": 1, "b": 1, "child": 1}
    assert s2.get("child").result(timeout=0) == "child"
    env.close(s2)

    s3 = env.open()  # and nothing runs again after yet another restart
    env.clock.advance(days=1)
    assert len(env.starts) == 3
    env.close(s3)


class _CrashAfterSkip(BaseException):
    """Stands for a SIGKILL between two store steps of one trigger pass."""


def test_crash_between_skip_and_successor_loses_no_series(env: Env) -> None:
    """A head skipped by its misfire policy and its successor: a crash between the two store
    steps must leave a series that still has a head (regression: the skip was committed first,
    so a crash lost the series for good, and re-registering kept the headless series)."""
    s1 = env.open()
    s1.schedule(record, "s", env.runs, every=60, id="s", misfire=tw.Misfire.SKIP, misfire_grace=1)
    env.close(s1)
    env.clock.advance(seconds=630)  # down: the head (slot 60) is now 570 s late, beyond grace

    store = SQLiteStore(env.db, durability="fast")
    real_promote = store.promote

    def promote(ids: Any, now: float, *, successors: Any = ()) -> list[tw.Task]:
        if successors:
            raise _CrashAfterSkip
        return real_promote(ids, now, successors=successors)

    real_keys = store.promote_keys

    def promote_keys(ids: Any, now: float, *, successors: Any = ()) -> list[Promoted]:
        if successors:
            raise _CrashAfterSkip
        return real_keys(ids, now, successors=successors)

    store.promote = promote  # type: ignore[method-assign,assignment]
    store.promote_keys = promote_keys  # type: ignore[method-assign,assignment]
    crashed = tw.Scheduler(
        clock=env.clock, store=store, dispatcher=tw.InlineDispatcher(), allow=["tests.apps"]
    )
    crashed.start()
    with pytest.raises(_CrashAfterSkip):
        env.clock.advance(seconds=1)
    crashed.shutdown()
    store.close()

    s2 = env.open()
    s2.schedule(record, "s", env.runs, every=60, id="s", misfire=tw.Misfire.SKIP, misfire_grace=1)
    env.clock.advance(seconds=60)
    (sch,) = s2.schedules()
    assert sch.next_run is not None, "the series lost its head"
    assert [t - env.t0 for _, t in env.starts] == [660]
    heads = s2.store.tasks(state=S.PENDING, schedule_id="s")
    assert len(heads) == 1
    env.close(s2)
