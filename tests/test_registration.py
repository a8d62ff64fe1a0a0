"""Registering one recurring schedule from many places at once, as web deployments do.

Every web worker registers the application's cron jobs when it starts, and a development reloader
builds the application (and so a scheduler) twice. On one durable store the schedule must exist
once and fire once per slot, however many schedulers registered it, in one process or several.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.apps import fork_app
from timewheel import InlineDispatcher, Scheduler
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import TaskState
from timewheel.testing import FakeClock

RECORD = "tests.apps.fork_app:record"


def _runs(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_scheduler_built_twice_in_one_process_does_not_register_twice(tmp_path: Path) -> None:
    db, log = tmp_path / "app.db", tmp_path / "runs.log"
    clock = FakeClock()

    def build_app() -> Scheduler:
        """What a framework's startup does, run twice by its reloader in one process."""
        sched = Scheduler(
            clock=clock, store=SQLiteStore(db), dispatcher=InlineDispatcher(), allow=["tests.apps"]
        )
        sched.start()
        sched.schedule(fork_app.record, "tick", str(log), cron="* * * * *", id="tick")
        return sched

    first = build_app()
    version = first.store.get_schedule("tick")
    second = build_app()
    assert second.store.get_schedule("tick") == version  # kept, not replaced
    clock.advance(3 * 60)
    assert [line.split()[0] for line in _runs(log)] == ["tick"] * 3  # one run per slot
    for sched in (first, second):
        assert len(sched.schedules()) == 1
        sched.shutdown()
    store = SQLiteStore(db)
    assert store.tasks(state=TaskState.CANCELLED) == []
    assert len(store.tasks(state=TaskState.PENDING, schedule_id="tick")) == 1
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.parametrize("processes", [2, 6])
def test_processes_registering_the_same_schedule_at_once_leave_one_series(
    tmp_path: Path, processes: int
) -> None:
    db = tmp_path / "app.db"
    SQLiteStore(db).close()  # the file exists before the race: the race is the registration
    go_r, go_w = os.pipe()
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - a child: registers, then exits without returning
            code = 1
            try:
                os.close(go_w)
                sched = Scheduler(store=SQLiteStore(db, busy_timeout=30), allow=["tests.apps"])
                os.read(go_r, 1)  # every child is waiting here; closing the pipe frees them all
                sched.schedule(RECORD, "nightly", "/dev/null", cron="0 3 * * *", id="nightly")
                sched.schedule(RECORD, "often", "/dev/null", cron="*/5 * * * *", id="often")
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    os.close(go_r)
    os.close(go_w)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    store = SQLiteStore(db)
    assert [s.id for s in store.list_schedules()] == ["nightly", "often"]
    for sid in ("nightly", "often"):
        heads = store.tasks(state=TaskState.PENDING, schedule_id=sid)
        assert len(heads) == 1, heads  # one series: one pending head
        assert store.tasks(state=TaskState.CANCELLED, schedule_id=sid) == []
        assert store.tasks(state=TaskState.READY, schedule_id=sid) == []
    store.close()
