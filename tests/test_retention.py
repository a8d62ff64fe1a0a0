"""Retention of finished tasks, bounded prune steps, store maintenance and failures kept as text."""

from __future__ import annotations

import gc
import logging
import threading
import weakref
from collections.abc import Collection, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import timewheel as tw
from timewheel.dispatch import TRACEBACK_LIMIT, release_frames
from timewheel.jobs import TRACEBACK_KEY, task_traceback
from timewheel.ready import ReadyQueue
from timewheel.retention import (
    DURABLE_KEEP_FINISHED,
    MEMORY_KEEP_FINISHED,
    Retention,
    keep_finished_seconds,
)
from timewheel.stores import memory
from timewheel.stores.base import Store, SupportsMaintenance
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState
from timewheel.testing import FakeClock
from timewheel.trigger import Trigger

T0 = 1_767_225_600.0


def noop(n: int = 0) -> int:
    return n


runs: list[float] = []


def count_run() -> None:
    runs.append(0.0)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = tw.MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "t.db")
    yield s
    s.close()


def scheduler(clock: FakeClock, store: Store, **kw: Any) -> tw.Scheduler:
    return tw.Scheduler(
        clock=clock, store=store, dispatcher=tw.InlineDispatcher(), allow=[__name__], **kw
    ).start()


# -- the keep_finished option ------------------------------------------------------------------
def test_keep_finished_defaults_per_store(tmp_path: Path) -> None:
    memory, durable = tw.MemoryStore(), SQLiteStore(tmp_path / "d.db")
    try:
        assert keep_finished_seconds("default", memory) == MEMORY_KEEP_FINISHED == 3600
        assert keep_finished_seconds("default", durable) == DURABLE_KEEP_FINISHED == 7 * 86400
        assert keep_finished_seconds(None, memory) is None
        assert keep_finished_seconds(timedelta(minutes=2), memory) == 120
        assert keep_finished_seconds(30, memory) == 30.0
        with pytest.raises(ValueError, match="keep_finished"):
            keep_finished_seconds(-1, memory)
        with pytest.raises(ValueError, match="keep_finished"):
            keep_finished_seconds("forever", memory)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="keep_finished"):
            keep_finished_seconds(True, memory)
    finally:
        durable.close()


# -- retention through the scheduler ---------------------------------------------------------
def test_finished_tasks_go_after_the_period_held_handles_stay(store: Store) -> None:
    clock = FakeClock(start=T0)
    sched = scheduler(clock, store, keep_finished=timedelta(minutes=10))
    held = sched.schedule(noop, 1, delay=1)
    for i in range(5):
        sched.schedule(noop, i, delay=1, id=f"dropped-{i}")  # handles dropped at once
    sched.schedule(noop, 9, delay=1, id="recent")
    clock.advance(2)
    assert store.count_by_state()[TaskState.SUCCEEDED] == 7
    sched.schedule(noop, delay=9 * 60, id="tick-before")  # a fire inside the period
    clock.advance(9 * 60)
    assert store.find("dropped-0") is not None, "kept during the period"

    sched.schedule(noop, delay=2 * 60, id="tick-after")  # a fire once the period is over
    clock.advance(2 * 60)
    assert all(store.find(f"dropped-{i}") is None for i in range(5))
    assert store.find("tick-before") is not None, "finished 2 minutes ago: kept"
    assert held.done(), "a referenced handle still reads its task"
    assert held.result() == 1
    held_id = held.id
    del held
    gc.collect()
    sched.schedule(noop, delay=10, id="tick-later")
    clock.advance(10)
    assert store.find(held_id) is None, "once the handle is dropped, the task goes"
    sched.shutdown()


def test_two_handles_on_one_task_are_both_held() -> None:
    # handles compare equal by task id; each one still keeps the task on its own
    clock = FakeClock(start=T0)
    store = tw.MemoryStore()
    sched = scheduler(clock, store, keep_finished=timedelta(minutes=1))
    first = sched.schedule(noop, 1, delay=1, id="twice")
    second = sched.get("twice")
    assert first == second
    assert first is not second
    clock.advance(2)
    del first
    gc.collect()
    sched.schedule(noop, delay=120, id="tick-1")
    clock.advance(120)
    assert store.find("twice") is not None, "the second handle keeps the task"
    del second
    gc.collect()
    sched.schedule(noop, delay=10, id="tick-2")
    clock.advance(10)
    assert store.find("twice") is None, "once both handles are dropped, the task goes"
    sched.shutdown()


def test_held_lists_live_handles_only() -> None:
    class Handle:
        def __init__(self, task_id: str) -> None:
            self.id = task_id

    retention = Retention(tw.MemoryStore(), keep=60.0)
    a, b = Handle("a"), Handle("b")
    retention.hold(a)
    retention.hold(b)
    assert retention.held() == {"a", "b"}
    del a
    gc.collect()
    assert retention.held() == {"b"}


def test_nothing_is_held_when_nothing_is_deleted() -> None:
    class Handle:
        id = "a"

    retention = Retention(tw.MemoryStore(), keep=None)
    handle = Handle()
    retention.hold(handle)
    assert retention.held() == set()


def test_keep_finished_none_keeps_everything() -> None:
    clock = FakeClock(start=T0)
    store = tw.MemoryStore()
    sched = scheduler(clock, store, keep_finished=None)
    for i in range(3):
        sched.schedule(noop, i, delay=1, id=f"t{i}")
    clock.advance(2)
    sched.schedule(noop, delay=30 * 86400, id="tick")
    clock.advance(30 * 86400)
    assert store.count_by_state()[TaskState.SUCCEEDED] == 4
    sched.shutdown()


def test_memory_default_is_one_hour() -> None:
    clock = FakeClock(start=T0)
    store = tw.MemoryStore()
    sched = scheduler(clock, store)
    sched.schedule(noop, delay=1, id="old")
    clock.advance(2)
    sched.schedule(noop, delay=3500, id="tick-1")
    clock.advance(3500)
    assert store.find("old") is not None
    sched.schedule(noop, delay=200, id="tick-2")
    clock.advance(200)
    assert store.find("old") is None
    sched.shutdown()


def test_recurring_instances_are_pruned_their_schedule_stays(store: Store) -> None:
    clock = FakeClock(start=T0)
    sched = scheduler(clock, store, keep_finished=timedelta(minutes=5))
    runs.clear()
    sched.schedule(count_run, every=timedelta(minutes=1), id="minutely")
    for _ in range(60):
        # advance() returns handles on the jobs it ran, which keep their tasks until dropped
        clock.advance(60)
    done = store.tasks(state=TaskState.SUCCEEDED)
    assert len(done) <= 6, f"an hour of minutely runs keeps about 5 minutes of them: {len(done)}"
    assert min(t.updated for t in done) >= clock.time() - 5 * 60 - 5
    assert store.get_schedule("minutely") is not None, "the schedule stays"
    assert len(runs) >= 59, "the schedule ran on, every minute"
    sched.shutdown()


# -- bounded steps -------------------------------------------------------------------------------
class CountingStore(tw.MemoryStore):
    """A memory store that records every prune call and every maintenance call."""

    def __init__(self) -> None:
        super().__init__()
        self.prunes: list[tuple[int | None, int]] = []
        self.maintained: list[float] = []

    def prune(
        self,
        *,
        before: float,
        states: Iterable[TaskState] | None = None,
        limit: int | None = None,
        keep: Collection[str] = (),
    ) -> int:
        n = super().prune(before=before, states=states, limit=limit, keep=keep)
        self.prunes.append((limit, n))
        return n

    def maintain(self, now: float) -> None:
        self.maintained.append(now)


def finished_tasks(store: tw.MemoryStore, n: int, at: float) -> None:
    store.insert_many([Task(id=f"t{i}", func=f"{__name__}:noop", due=at) for i in range(n)])
    for i in range(n):
        store.transition(f"t{i}", expected_version=0, state=TaskState.CANCELLED, now=at)


def test_trigger_retention_step_is_bounded_per_fire() -> None:
    store = CountingStore()
    finished_tasks(store, 25, T0)
    clock = FakeClock(start=T0)
    retention = Retention(store, 60.0, batch=10, interval=5.0, maintain_interval=1000.0)
    trigger = Trigger(
        store, ReadyQueue(100), clock, tick=0.01, start=T0, lease=30, retention=retention
    )
    assert isinstance(store, SupportsMaintenance)
    now = T0 + 100
    removed: list[int] = []
    for k in range(8):  # two fires per interval
        trigger.fire(now + k * 2.5)
        removed.append(25 - sum(store.count_by_state().values()))
    # one batch per fire while batches come back full, then one pass per interval
    assert [n for _, n in store.prunes] == [10, 10, 5, 0, 0]
    assert all(limit == 10 for limit, _ in store.prunes), "every pass is bounded by the batch"
    assert removed == [10, 20, 25, 25, 25, 25, 25, 25]
    assert retention.removed == 25
    # maintenance: at the first pass, after the pass that ended the backlog, then every
    # maintain_interval (not after each full batch)
    assert store.maintained == [now, now + 5]


def test_an_idle_trigger_steps_again_soon_while_retention_catches_up() -> None:
    store = CountingStore()
    finished_tasks(store, 25, T0)
    clock = FakeClock(start=T0)
    retention = Retention(store, 60.0, batch=10, interval=5.0, maintain_interval=1000.0)
    trigger = Trigger(
        store, ReadyQueue(100), clock, tick=0.01, start=T0, lease=30, retention=retention
    )
    now = T0 + 100
    fired, deadlines = [], []
    for _ in range(4):  # nothing is scheduled: only retention asks for a next step
        trigger.fire(now)
        fired.append(now)
        deadline = trigger.next_deadline(now)
        deadlines.append(deadline)
        now = deadline if deadline is not None else now + 1
    assert [n for _, n in store.prunes] == [10, 10, 5]
    pause = retention.pause
    assert deadlines[:2] == [fired[0] + pause, fired[1] + pause], "a full batch: another soon"
    assert deadlines[2:] == [None, None], "the backlog is worked off: nothing due"
    assert not retention.catching_up


def test_maintenance_runs_every_interval_without_retention() -> None:
    store = CountingStore()
    retention = Retention(store, None, interval=5.0, maintain_interval=60.0)
    for k in range(0, 200, 5):
        retention.step(T0 + k)
    assert store.prunes == [], "keep=None never prunes"
    assert store.maintained == [T0, T0 + 60, T0 + 120, T0 + 180]


# -- failures keep text, not frames ----------------------------------------------------------
class Marker:
    """An object only a failing task's frame refers to."""


markers: list[weakref.ref[Marker]] = []


def fails_with_a_local() -> None:
    local = Marker()
    markers.append(weakref.ref(local))
    try:
        raise KeyError("inner")
    except KeyError as e:
        raise ValueError("outer failure") from e


def test_a_failed_task_releases_its_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    # the test's log capture keeps every record, with the traceback of the failure's ERROR line
    monkeypatch.setattr(logging.getLogger("timewheel.dispatch"), "disabled", True)
    markers.clear()
    clock = FakeClock(start=T0)
    sched = scheduler(clock, tw.MemoryStore())
    job = sched.schedule(fails_with_a_local, delay=1)
    clock.advance(2)
    assert job.state is TaskState.FAILED
    gc.collect()
    assert len(markers) == 1
    assert markers[0]() is None, "the frame's local was released"
    exc = job.exception()
    assert isinstance(exc, ValueError)
    assert str(exc) == "outer failure"
    assert exc.__traceback__ is None
    assert isinstance(exc.__cause__, KeyError)
    assert exc.__cause__.__traceback__ is None
    text = exc.formatted_traceback  # type: ignore[attr-defined]
    assert "fails_with_a_local" in text
    assert "KeyError: 'inner'" in text
    assert text.rstrip().endswith("ValueError: outer failure")
    with pytest.raises(ValueError, match="outer failure"):
        job.result()
    sched.shutdown()


def test_a_durable_store_keeps_the_traceback_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logging.getLogger("timewheel.dispatch"), "disabled", True)
    clock = FakeClock(start=T0)
    store = SQLiteStore(tmp_path / "tb.db")
    sched = scheduler(clock, store)
    job = sched.schedule(fails_with_a_local, delay=1)
    clock.advance(2)
    assert job.state is TaskState.FAILED
    sched.shutdown()
    task = store.get(job.id)
    text = task_traceback(task)
    assert text is not None
    assert text == task.extra[TRACEBACK_KEY]
    assert "fails_with_a_local" in text
    assert "KeyError: 'inner'" in text
    assert text.rstrip().endswith("ValueError: outer failure")
    assert task.error == "ValueError: outer failure"
    store.close()


def test_task_traceback_of_a_memory_store_and_of_a_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logging.getLogger("timewheel.dispatch"), "disabled", True)
    clock = FakeClock(start=T0)
    sched = scheduler(clock, tw.MemoryStore())
    failed = sched.schedule(fails_with_a_local, delay=1)
    ok = sched.schedule(noop, delay=1)
    clock.advance(2)
    text = task_traceback(sched.store.get(failed.id))
    assert text is not None
    assert "ValueError: outer failure" in text
    assert task_traceback(sched.store.get(ok.id)) is None
    sched.shutdown()


def test_the_kept_traceback_is_bounded() -> None:
    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        raise RuntimeError("x" * 10_000)

    with pytest.raises(RuntimeError) as info:
        deep(200)
    e = info.value
    release_frames(e)
    text = e.formatted_traceback  # type: ignore[attr-defined]
    assert len(text) <= TRACEBACK_LIMIT
    assert text.startswith("...\n")
    assert text.rstrip().endswith("x" * 20)
    assert e.__traceback__ is None


# -- AsyncScheduler ------------------------------------------------------------------------------
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def anoop(n: int = 0) -> int:
    return n


@pytest.mark.anyio
async def test_async_scheduler_removes_finished_tasks_keeps_held_ones() -> None:
    clock = FakeClock(start=T0)
    store = tw.MemoryStore()
    async with tw.AsyncScheduler(clock=clock, store=store, keep_finished=60) as sched:
        held = await sched.schedule(anoop, 1, delay=1)
        await sched.schedule(anoop, 2, delay=1, id="dropped")
        await sched.schedule(anoop, delay=10, id="tick-1")
        await sched.run_until_idle()  # returns the jobs that ran, held until dropped
        assert store.find("dropped") is not None
        await sched.schedule(anoop, delay=120, id="tick-2")
        await sched.run_until_idle()
        assert store.find("dropped") is None, "gone 60 s after it ended"
        assert await held == 1, "a referenced handle still reads its task"


# -- the memory store's maintenance ------------------------------------------------------------
def test_memory_store_maintain_rebuilds_its_large_tables_in_the_calling_thread() -> None:
    store = tw.MemoryStore()
    n = memory.REBUILD_MIN + 10
    finished_tasks(store, n, T0)
    store.insert_many([Task(id=f"p{i}", func=f"{__name__}:noop", due=T0 + 60) for i in range(5)])
    parts, cancelled = store._tasks.shards, store._by_state[TaskState.CANCELLED]
    pending = store._pending.shards
    before = store.tasks()
    done = threading.Event()

    def trigger() -> None:
        store.maintain(T0)
        done.set()

    th = threading.Thread(target=trigger)
    th.start()
    th.join()
    assert done.is_set()
    # the large tables are new copies (the sharded task table part by part), the small one
    # untouched; contents and order the same
    assert all(new is not old for new, old in zip(store._tasks.shards, parts, strict=True))
    assert store._by_state[TaskState.CANCELLED] is not cancelled
    assert store._pending.shards == pending
    assert all(new is old for new, old in zip(store._pending.shards, pending, strict=True))
    assert list(store._by_state[TaskState.CANCELLED]) == list(cancelled)
    assert store.tasks() == before
    assert store.count_by_state() == {TaskState.CANCELLED: n, TaskState.PENDING: 5}
    # retention still deletes oldest first after the rebuild
    assert store.prune(before=T0 + 1, limit=3) == 3
    ids = {t.id for t in store.tasks()}
    assert "t0" not in ids
    assert "t3" in ids


def test_memory_store_maintain_copies_a_bounded_share_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory, "REBUILD_MIN", 64)
    monkeypatch.setattr(memory, "REBUILD_BUDGET", 300)
    store = tw.MemoryStore()
    store.insert_many([Task(id=f"p{i}", func=f"{__name__}:noop", due=T0 + 60) for i in range(800)])
    before = store.tasks()
    tasks, pending = list(store._tasks.shards), list(store._pending.shards)
    store.maintain(T0)
    copied = [new is not old for new, old in zip(store._tasks.shards, tasks, strict=True)]
    assert 0 < sum(copied) < len(copied), "a share of the parts, not all of them"
    assert sum(len(p) for p, c in zip(store._tasks.shards, copied, strict=True) if c) < 300 + 100
    for _ in range(10):  # later calls go on where the last one stopped
        store.maintain(T0)
    assert all(new is not old for new, old in zip(store._tasks.shards, tasks, strict=True))
    assert all(new is not old for new, old in zip(store._pending.shards, pending, strict=True))
    assert store.tasks() == before
    assert store.count_by_state() == {TaskState.PENDING: 800}


def test_memory_store_maintain_is_called_by_retention_and_stops_at_close() -> None:
    store = tw.MemoryStore()
    assert isinstance(store, SupportsMaintenance)
    finished_tasks(store, memory.REBUILD_MIN, T0)
    retention = Retention(store, 60.0, batch=10)
    assert id(retention.maintenance) == id(store)
    store.close()
    parts = store._tasks.shards
    store.maintain(T0)  # closed: nothing changes any more
    assert store._tasks.shards is parts
