"""The trigger station on its own: a store, a ready queue and explicit instants, no Scheduler."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from timewheel.clock import Clock
from timewheel.plans import FirePlan, PreparePlan
from timewheel.ready import ReadyQueue
from timewheel.stores.base import Changed, Store
from timewheel.stores.memory import MemoryStore
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState
from timewheel.testing import FakeClock
from timewheel.trigger import Trigger

T0 = 1_800_000_000.0
P, R, RUN = TaskState.PENDING, TaskState.READY, TaskState.RUNNING


def noop() -> None:
    pass


class Outcomes:
    """Stands in for the runtime: records what the trigger reports."""

    def __init__(self) -> None:
        self.ended: list[tuple[str, TaskState, str]] = []
        self.skips: list[str] = []

    def finished(self, changed: Changed, exc: BaseException | None, event: str) -> None:
        self.ended.append((changed.task.id, changed.task.state, event))

    def skipped(self, changed: Changed) -> None:
        self.skips.append(changed.task.id)


class Planner:
    """A planner that runs every fired instance and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def fire(self, ids: Sequence[str], now: float) -> FirePlan:
        self.asked.append(list(ids))
        return FirePlan(run=list(ids), successors=[], skipped=[], missed=0)

    def prepare(self, ids: Sequence[str], now: float) -> PreparePlan:
        return PreparePlan(prepared=[], successors=[], deferred=[])

    def forget(self, ids: Sequence[str]) -> None:
        pass

    def repair(self, tasks: Sequence[Task], now: float) -> list[Task]:
        return []


def make(
    store: Store | None = None,
    *,
    capacity: int = 100,
    clock: Clock | None = None,
    planner: Planner | None = None,
    outcomes: Outcomes | None = None,
    poll_interval: float | None = None,
) -> Trigger:
    return Trigger(
        store if store is not None else MemoryStore(),
        ReadyQueue(capacity),
        clock if clock is not None else FakeClock(T0),
        tick=0.001,
        start=T0,
        lease=30.0,
        poll_interval=poll_interval,
        planner=planner,
        outcomes=outcomes,
    )


def add(trigger: Trigger, task_id: str, due: float, **kw: object) -> Task:
    task = Task(id=task_id, func=noop, due=due, created=T0, updated=T0, **kw)  # type: ignore[arg-type]
    stored = trigger.store.insert(task).task
    trigger.index(stored)
    return stored


def test_fire_moves_exactly_the_due_tasks_to_ready_in_the_store_and_the_queue() -> None:
    trigger = make()
    for i, due in enumerate([T0 + 1, T0 + 2, T0 + 3]):
        add(trigger, f"t{i}", due)
    first = trigger.next_deadline(T0)
    assert first is not None
    assert T0 < first <= T0 + 1, "the wheel wakes at (or before) the first due"
    deadline = trigger.fire(T0 + 2)
    states = {t.id: t.state for t in trigger.store.tasks()}
    assert states == {"t0": R, "t1": R, "t2": P}
    assert [trigger.ready.pull_nowait(), trigger.ready.pull_nowait()] != [None, None]
    assert deadline is not None
    assert T0 + 2 < deadline <= T0 + 3
    assert len(trigger) == 1
    assert "t2" in trigger
    assert "t0" not in trigger


def test_a_full_ready_queue_leaves_the_rest_ready_in_the_store_and_refills_oldest_first() -> None:
    trigger = make(capacity=2)
    for i in range(5):
        add(trigger, f"t{i}", T0 + i / 10)
    trigger.fire(T0 + 1)
    assert len(trigger.ready) == 2
    assert trigger.backlog
    assert trigger.store.count_by_state()[R] == 5, "nothing is dropped: all are READY"
    pulled = [trigger.ready.pull_nowait(), trigger.ready.pull_nowait()]
    assert [t.id for t in pulled if t is not None] == ["t0", "t1"]
    for t in pulled:
        assert t is not None
        trigger.store.claim(
            t.id, expected_version=t.version, owner="w", lease_expires=T0 + 99, now=T0 + 1
        )
    assert trigger.next_deadline(T0 + 1) == T0 + 1, "a refill is due at once"
    trigger.fire(T0 + 1)
    assert [trigger.ready.pull_nowait().id for _ in range(2)] == ["t2", "t3"]  # type: ignore[union-attr]


def test_an_expired_lease_is_reported_and_the_task_is_pending_again() -> None:
    outcomes = Outcomes()
    trigger = make(outcomes=outcomes)
    add(trigger, "t", T0)
    trigger.fire(T0)
    snap = trigger.ready.pull_nowait()
    assert snap is not None
    trigger.store.claim("t", expected_version=snap.version, owner="w", lease_expires=T0 + 5, now=T0)
    trigger.fire(T0 + 4)
    assert trigger.store.get("t").state is RUN, "the lease is still live"
    trigger.reap_now()
    trigger.fire(T0 + 6)
    assert outcomes.ended == [("t", P, "timed_out")]
    assert trigger.store.get("t").error is not None


def test_instances_are_told_apart_by_their_schedule_field_not_their_id() -> None:
    planner = Planner()
    trigger = make(planner=planner)
    add(trigger, "user@example.com", T0 + 1)
    add(trigger, "plain-looking-instance", T0 + 1, schedule_id="nightly")
    trigger.fire(T0 + 1)
    assert planner.asked == [["plain-looking-instance"]]
    assert trigger.store.get("user@example.com").state is R


def test_a_durable_store_is_polled_for_work_other_processes_wrote(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    trigger = make(store, poll_interval=1.0)
    trigger.start(T0)
    other = Task(id="theirs", func="tests.test_trigger:noop", due=T0 + 1.5, created=T0, updated=T0)
    store.insert(other)  # another process's insert: this trigger never indexed it
    deadline = trigger.fire(T0)
    assert deadline is not None
    assert deadline <= T0 + 1, "the next poll bounds the sleep"
    trigger.fire(T0 + 1)  # the poll loads it into the wheel
    assert "theirs" in trigger
    trigger.fire(T0 + 1.5)
    assert store.get("theirs").state is R
    store.close()


def test_unindex_takes_a_task_out_of_the_wheel() -> None:
    trigger = make()
    add(trigger, "a", T0 + 1)
    trigger.unindex(["a"])
    assert "a" not in trigger
    trigger.fire(T0 + 2)
    assert trigger.store.get("a").state is P, "an unindexed task is not fired"


@pytest.mark.parametrize("due_now", [True, False])
def test_placing_a_due_task_promotes_it_at_once_only_when_asked(due_now: bool) -> None:
    trigger = make()
    trigger.promote_due_on_place = due_now
    clock = trigger.clock
    add(trigger, "t", clock.time() - 1)
    assert (trigger.store.get("t").state is R) is due_now


class RecordingWaker:
    """A driver sleeping towards ``planned``; records the wakes asked of it."""

    def __init__(self, planned: float | None) -> None:
        self.planned = planned
        self.wakes: list[float | None] = []

    def wake(self, deadline: float | None = None) -> None:
        self.wakes.append(deadline)


def test_placing_wakes_the_driver_only_for_a_task_due_before_its_plan() -> None:
    trigger = make()
    waker = RecordingWaker(planned=T0 + 10)
    trigger.waker = waker
    add(trigger, "later", T0 + 20)
    add(trigger, "at-the-plan", T0 + 10)
    assert waker.wakes == [], "the driver wakes by then anyway"
    add(trigger, "earlier", T0 + 5)
    assert waker.wakes == [T0 + 5]
    waker.planned = None  # firing: any new task may change the plan
    add(trigger, "while-firing", T0 + 30)
    assert waker.wakes == [T0 + 5, T0 + 30]


def test_overflowed_ready_tasks_run_before_newer_ones() -> None:
    """Under steady load the backlog in the store is served oldest first: a task never waits
    behind work that became READY after it."""
    trigger = make(capacity=4)
    for i in range(8):
        add(trigger, f"old{i}", T0 + i / 100)
    trigger.fire(T0 + 1)  # 4 queued, 4 overflow to the store
    served: list[str] = []
    for step in range(1, 6):
        # steady load: two newer tasks become due at each step while workers take two
        for j in range(2):
            add(trigger, f"new{step}.{j}", T0 + step + j / 100)
        trigger.fire(T0 + step + 0.5)
        for _ in range(2):
            task = trigger.ready.pull_nowait()
            if task is not None:
                served.append(task.id)
                trigger.store.claim(
                    task.id,
                    expected_version=task.version,
                    owner="w",
                    lease_expires=T0 + 99,
                    now=T0 + step,
                )
    olds = [served.index(f"old{i}") for i in range(8)]
    news = [served.index(t) for t in served if t.startswith("new")]
    assert olds == sorted(olds), "the backlog is served in due order"
    assert max(olds) < min(news), "no newer task overtakes the overflowed ones"


class ReadsBeforeAnotherPromote(MemoryStore):
    """A store whose ``ready()`` read is followed, before the refill acts on it, by another
    thread promoting a due-now task that overflows (a ``schedule(delay=0)`` on a caller thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: list[object] = []

    def ready(self, *, limit: int, queues: Sequence[str] | None = None) -> list[Task]:
        rows = super().ready(limit=limit, queues=queues)
        while self.meanwhile:
            hook = self.meanwhile.pop()
            hook()  # type: ignore[operator]
        return rows


def test_a_task_overflowing_during_a_refill_keeps_the_backlog() -> None:
    """A refill that read the store before another thread's due-now task went to the backlog
    must not clear the backlog flag: the task would wait READY in the store with nothing to
    fetch it."""
    store = ReadsBeforeAnotherPromote()
    trigger = make(store, capacity=4)
    trigger.promote_due_on_place = True
    for i in range(5):
        add(trigger, f"old{i}", T0 - 1 + i / 10)  # due: 4 queued, 1 in the backlog
    assert trigger.backlog
    for _ in range(4):
        task = trigger.ready.pull_nowait()
        assert task is not None
        store.claim(task.id, expected_version=task.version, owner="w", lease_expires=T0 + 9, now=T0)
    store.meanwhile.append(lambda: add(trigger, "late", T0 - 0.5))  # promoted at once
    trigger.refill_ready()
    assert store.get("late").state is R
    assert trigger.backlog, "the task that went to the backlog meanwhile is still to be fetched"
    trigger.refill_ready()
    assert [t.id for t in (trigger.ready.pull_nowait(), trigger.ready.pull_nowait()) if t] == [
        "old4",
        "late",
    ]


def test_a_refill_whose_queue_filled_meanwhile_keeps_the_backlog() -> None:
    """Places taken by another thread between the refill's read and its puts leave the rows
    that did not fit in the backlog, still to be fetched."""
    store = ReadsBeforeAnotherPromote()
    trigger = make(store, capacity=2)
    for i in range(3):
        add(trigger, f"old{i}", T0 - 1 + i / 10)
    trigger.fire(T0)  # 2 queued, 1 in the backlog
    for _ in range(2):
        task = trigger.ready.pull_nowait()
        assert task is not None
        store.claim(task.id, expected_version=task.version, owner="w", lease_expires=T0 + 9, now=T0)

    def fill() -> None:
        trigger.ready.put(Task(id="x", func=noop, due=T0))
        trigger.ready.put(Task(id="y", func=noop, due=T0))

    store.meanwhile.append(fill)
    trigger.refill_ready()
    assert "old2" not in trigger.ready
    assert trigger.backlog, "old2 did not fit: it is still to be fetched"
