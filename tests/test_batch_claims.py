"""A running Scheduler on SQLite claims through the store's batched claim: tasks whose function
does not import here are reported (not claimed), and an idle store gets its WAL checkpoint."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

import timewheel as tw
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState

GUARD = 60.0  # seconds: a hang guard, never a timing assertion


def wait_for(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + GUARD
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


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
