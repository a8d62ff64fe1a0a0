"""The thread pool's group finisher on a durable store: its backlog of successes waiting to be
stored is bounded (a slow store slows the workers), and those successes keep their leases until
they are stored (a slow store never lets a finished run's lease expire and the task run again)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import timewheel as tw
from tests.apps.worker_app import record
from tests.conftest import GUARD, wait_for
from timewheel.dispatch import GroupFinisher
from timewheel.stores.base import Changed, Finish, Lease
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState


class GatedStore:
    """A store whose ``finish_many`` waits for a gate, recording each group it stores."""

    durable = True

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.groups: list[list[str]] = []
        self.entered = threading.Event()
        self.current: list[str] = []  # the group waiting at the gate

    def finish_many(self, finishes: Sequence[Finish], *, now: float) -> list[Changed | None]:
        self.current = [f.task_id for f in finishes]
        self.entered.set()
        assert self.gate.wait(GUARD)
        self.groups.append([f.task_id for f in finishes])
        return [
            Changed(Task(id=f.task_id, func="m:f", due=now, state=TaskState.SUCCEEDED))
            for f in finishes
        ]


class Engine:
    """What the finisher uses of an engine: the store, the clock, and where outcomes go."""

    def __init__(self, store: GatedStore) -> None:
        self.store = store
        self.clock = tw.SystemClock()
        self.reported: list[str] = []

    def finished(self, changed: Changed, exc: BaseException | None, event: str) -> None:
        self.reported.append(changed.task.id)


@pytest.fixture
def gated() -> Iterator[GatedStore]:
    store = GatedStore()
    yield store
    store.gate.set()  # no thread outlives the test


def test_the_backlog_is_bounded_and_every_success_is_stored_in_order(gated: GatedStore) -> None:
    engine = Engine(gated)
    finisher = GroupFinisher(engine, limit=2, backlog=3, threads=1)  # type: ignore[arg-type]
    submitted: list[int] = []

    def produce() -> None:
        for i in range(10):
            finisher.submit(Task(id=f"t{i}", func="m:f", due=0.0), "w1", i)
            submitted.append(i)

    producer = threading.Thread(target=produce)
    producer.start()
    # the first group (one or two successes) is being stored, held at the gate; three more
    # fill the backlog, and the producer waits to submit the next
    wait_for(
        lambda: gated.entered.is_set() and len(finisher.waiting()) == len(gated.current) + 3,
        "a full backlog behind the first group",
    )
    assert len(submitted) == len(gated.current) + 3
    assert producer.is_alive()
    gated.gate.set()
    producer.join(GUARD)
    finisher.close()
    stored = [task_id for group in gated.groups for task_id in group]
    assert stored == [f"t{i}" for i in range(10)]
    assert all(len(group) <= 2 for group in gated.groups)
    assert engine.reported == stored
    assert finisher.waiting() == []


def test_successes_waiting_to_be_stored_keep_their_leases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "tasks.db")
    gate, entered = threading.Event(), threading.Event()
    real = store.finish_many

    def slow_finish_many(finishes: Sequence[Finish], *, now: float) -> list[Changed | None]:
        entered.set()
        assert gate.wait(GUARD)
        return real(finishes, now=now)

    monkeypatch.setattr(store, "finish_many", slow_finish_many)
    dispatcher = tw.ThreadPoolDispatcher(workers=2, claim_batch=4)
    sched = tw.Scheduler(store=store, dispatcher=dispatcher, lease=30.0, allow=["tests.apps"])
    try:
        sched.start()
        log = str(tmp_path / "ran.txt")
        jobs = [sched.schedule(record, str(i), log, delay=0) for i in range(3)]
        wait_for(entered.is_set, "the first group's store step")
        wait_for(
            lambda: {t.id for t, _ in _waiting(dispatcher)} == {j.id for j in jobs},
            "every success waiting to be stored",
        )
        before = {j.id: store.get(j.id) for j in jobs}
        assert all(t.state is TaskState.RUNNING for t in before.values())
        steps: list[int] = []
        real_many = store.heartbeat_many

        def one_step(leases: Sequence[Lease], *, lease_expires: float, now: float) -> list[bool]:
            steps.append(len(leases))
            return real_many(leases, lease_expires=lease_expires, now=now)

        monkeypatch.setattr(store, "heartbeat_many", one_step)
        dispatcher.beat()
        assert steps == [3], "every lease the pool holds is extended in one store step"
        for task_id, old in before.items():
            new = store.get(task_id)  # a heartbeat moves the version and sets a new lease
            assert (new.state, new.lease_owner) == (TaskState.RUNNING, old.lease_owner)
            assert new.version > old.version, (old, new)
        gate.set()
        for job in jobs:
            job.result(timeout=GUARD)
        assert all(store.get(j.id).state is TaskState.SUCCEEDED for j in jobs)
    finally:
        gate.set()
        sched.shutdown()
        store.close()


def _waiting(dispatcher: tw.ThreadPoolDispatcher) -> list[tuple[Task, str]]:
    finisher = dispatcher.finisher
    return [] if finisher is None else finisher.waiting()
