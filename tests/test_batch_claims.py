"""A running Scheduler on SQLite claims through the store's batched claim: tasks whose function
does not import here are reported (not claimed), an idle store gets its WAL checkpoint, and a
batch's waiting tasks are neither timed out before they start nor held by a worker that timed
out."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import timewheel as tw
from tests.conftest import GUARD, wait_for
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState

_GATE = threading.Event()


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """The event :func:`hold` waits on; set at teardown so no thread outlives a test."""
    _GATE.clear()
    yield _GATE
    _GATE.set()


def hold(seconds: float) -> None:
    _GATE.wait(seconds)


def counting_claims(store: SQLiteStore) -> list[int]:
    """Record the size of every batched claim *store* makes."""
    claims: list[int] = []
    real = store.claim_next

    def counting(**kw: object) -> list[Task]:
        got = real(**kw)  # type: ignore[arg-type]
        claims.append(len(got))
        return got

    store.claim_next = counting  # type: ignore[method-assign]
    return claims


def record(path: str, value: int) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{value}\n")


def test_workers_claim_in_batches_and_each_task_runs_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    out = tmp_path / "out.txt"
    claims: list[int] = []
    real = store.claim_next

    def counting(**kw: object) -> list[Task]:
        got = real(**kw)  # type: ignore[arg-type]
        claims.append(len(got))
        return got

    store.claim_next = counting  # type: ignore[method-assign]
    sched = tw.Scheduler(
        store=store, dispatcher=tw.ThreadPoolDispatcher(workers=2), allow=[__name__]
    )
    # scheduled before start: they are all due at once when the trigger starts
    jobs = [sched.schedule(record, str(out), i, delay=0) for i in range(200)]
    with sched:
        for job in jobs:
            job.result(timeout=GUARD)
    assert sorted(int(x) for x in out.read_text().split()) == list(range(200))
    assert sum(claims) == 200, "every run was claimed through the batched claim"
    assert max(claims) > 1, "some claims took several tasks in one store step"
    store.close()


def test_a_task_whose_function_does_not_import_is_reported_not_claimed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    now = time.time()
    store.insert(
        Task(id="ghost", func="no_such_module_anywhere:job", due=now, created=now, updated=now)
    )
    out = tmp_path / "out.txt"
    # allowed, so it is judged by its import (a refused one ends FAILED: test_allowlist.py)
    allow = [__name__, "no_such_module_anywhere"]
    with tw.Scheduler(
        store=store, dispatcher=tw.ThreadPoolDispatcher(workers=2), allow=allow
    ) as sched:
        job = sched.schedule(record, str(out), 1, delay=0)
        job.result(timeout=GUARD)
        wait_for(lambda: "no_such_module_anywhere:job" in store.unresolvable(), "the report")
        assert store.unresolvable() == {"no_such_module_anywhere:job": 1}
        assert store.get("ghost").state is TaskState.READY, "left for a worker that can import it"
    store.close()


def test_an_idle_running_scheduler_checkpoints_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from timewheel.stores.sqlite import store as sqlite_module

    monkeypatch.setattr(sqlite_module, "_IDLE_CHECKPOINT_EVERY", 0.0)
    store = SQLiteStore(tmp_path / "t.db")
    wal = Path(f"{tmp_path / 't.db'}-wal")
    out = tmp_path / "out.txt"
    with tw.Scheduler(
        store=store, dispatcher=tw.ThreadPoolDispatcher(workers=1), allow=[__name__]
    ) as sched:
        for job in [sched.schedule(record, str(out), i, delay=0) for i in range(50)]:
            job.result(timeout=GUARD)
        assert wal.exists()
        # nothing is due: an idle worker asks the store, which truncates the WAL
        wait_for(lambda: wal.stat().st_size == 0, "the idle checkpoint")
    store.close()


@pytest.mark.realclock
def test_a_batched_task_times_out_from_its_start_not_from_its_claim(
    tmp_path: Path, gate: threading.Event
) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    claims = counting_claims(store)
    out = tmp_path / "out.txt"
    pool = tw.ThreadPoolDispatcher(workers=1, claim_batch=8)
    sched = tw.Scheduler(store=store, dispatcher=pool, allow=[__name__])
    first = sched.schedule(hold, GUARD, delay=0, priority=1)  # first in the batch, no timeout
    rest = [sched.schedule(record, str(out), i, delay=0, timeout=1.0) for i in range(5)]
    with sched:
        # the claim's count is recorded after the store marked the batch RUNNING
        wait_for(lambda: bool(claims) and first.state is TaskState.RUNNING, "the first start")
        assert claims[0] == 6, "one claim took the whole batch"
        time.sleep(2.0)  # the rest wait behind it for longer than their timeout
        gate.set()
        for job in rest:
            job.result(timeout=GUARD)  # before their start, their timeout did not run
        first.result(timeout=GUARD)
    assert [job.state for job in rest] == [TaskState.SUCCEEDED] * 5
    assert sorted(int(x) for x in out.read_text().split()) == list(range(5))
    store.close()


@pytest.mark.realclock
def test_a_worker_that_timed_out_hands_back_its_batch_and_is_replaced_once(
    tmp_path: Path, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    claims = counting_claims(store)
    out = tmp_path / "out.txt"
    pool = tw.ThreadPoolDispatcher(workers=1, claim_batch=8)
    sched = tw.Scheduler(store=store, dispatcher=pool, allow=[__name__])
    stuck = sched.schedule(hold, GUARD, delay=0, priority=1, timeout=0.2)
    rest = [sched.schedule(record, str(out), i, delay=0, timeout=5.0) for i in range(5)]
    with caplog.at_level(logging.WARNING, logger="timewheel"), sched:
        # the stuck function never returns while the test runs: the tasks it claimed with it
        # go back to READY when it times out, and its one replacement runs them
        for job in rest:
            job.result(timeout=GUARD)
        assert claims[0] == 6, "one claim took the whole batch"
        assert stuck.state is TaskState.TIMED_OUT
        assert [job.state for job in rest] == [TaskState.SUCCEEDED] * 5
        workers = [t for t in pool._threads if t.name != "timewheel-heartbeat"]
        assert len(workers) == 2, "the first worker and one replacement"
        assert not [r for r in caplog.records if "lost" in r.getMessage()]
        gate.set()  # the stuck function returns while the scheduler shuts down
    # its outcome is dropped quietly: the timeout was stored for it, no lease was lost
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [m for m in warnings if "lost" in m], warnings
    store.close()


def test_a_full_batch_is_followed_by_larger_ones_while_the_store_holds_more(
    tmp_path: Path,
) -> None:
    """READY work beyond what the ready queue holds (as when another process's trigger promoted
    it): a worker whose batch comes back full claims again at once, up to claim_batch, instead of
    one small batch per snapshot."""
    store = SQLiteStore(tmp_path / "t.db")
    out = tmp_path / "out.txt"
    claims = counting_claims(store)
    sched = tw.Scheduler(
        store=store,
        dispatcher=tw.ThreadPoolDispatcher(workers=1, claim_batch=8),
        ready_capacity=2,  # a batch sized by the queue alone would be at most 1 + 2 // 1 = 3
        allow=[__name__],
    )
    jobs = [sched.schedule(record, str(out), i, delay=0) for i in range(100)]
    with sched:
        for job in jobs:
            job.result(timeout=GUARD)
    assert sorted(int(x) for x in out.read_text().split()) == list(range(100)), "each ran once"
    assert sum(claims) == 100, "every run was claimed through the batched claim"
    assert max(claims) == 8, f"full batches grew to claim_batch (claims: {claims})"
    store.close()
