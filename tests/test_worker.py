"""``timewheel worker`` and ``timewheel inspect`` on a shared SQLite file, with real processes."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import timewheel as tw
from tests.apps.worker_app import fail, record
from timewheel.cli import main
from timewheel.stores import SQLiteStore

ROOT = Path(__file__).resolve().parent.parent


def _spawn(target: str, db: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "timewheel",
            "worker",
            target,
            "--store",
            f"sqlite:///{db}",
            "--concurrency",
            "4",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.realclock
def test_tasks_from_an_exited_process_run_once_across_two_workers(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    log = tmp_path / "runs.log"
    beats = tmp_path / "beats.log"
    n = 300
    # A producer process (this one) schedules and goes away before anything is due.
    with tw.Scheduler(
        store=SQLiteStore(db), dispatcher=tw.InlineDispatcher(), allow=["tests.apps"]
    ) as producer:
        for i in range(n):
            producer.schedule(record, f"t{i}", str(log), delay=1.0 + (i % 10) * 0.1)
        bad = producer.schedule(fail, "boom", delay=1.0, id="bad")
    assert bad.id == "bad"
    env = {**os.environ, "TIMEWHEEL_TEST_BEATS": str(beats), "PYTHONPATH": str(ROOT)}
    workers = [_spawn("tests.apps.worker_app:jobs", db, env) for _ in range(2)]
    try:
        store = SQLiteStore(db)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = store.count_by_state()
            if counts.get(tw.TaskState.SUCCEEDED, 0) >= n and counts.get(tw.TaskState.FAILED):
                break
            time.sleep(0.2)
        time.sleep(1.2)  # a few beats of the recurring function
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        outputs = [w.communicate(timeout=30)[0].decode() for w in workers]
    for w, text in zip(workers, outputs, strict=True):
        assert w.returncode == 0, text
    lines = log.read_text().splitlines()
    runs = Counter(line.split()[0] for line in lines)
    assert len(runs) == n, outputs
    assert set(runs.values()) == {1}  # each task ran exactly once across both processes
    pids = {line.split()[1] for line in lines}
    assert len(pids) >= 1
    failed = store.get("bad")
    assert failed.state is tw.TaskState.FAILED
    assert "boom" in (failed.error or "")
    # the registry's recurring function ran, in one series shared by both workers
    assert len(store.list_schedules()) == 1
    assert beats.read_text().count("\n") >= 2
    assert store.integrity_check() == []
    store.close()

    out = io.StringIO()
    assert main(["inspect", "--store", f"sqlite:///{db}", "--horizon", "600"], out=out) == 0
    text = out.getvalue()
    succeeded = re.search(r"succeeded\s+(\d+)", text)
    assert succeeded is not None, text
    assert int(succeeded.group(1)) >= n  # the tasks, plus the recurring function's runs
    assert "latest failures (1)" in text
    assert "RuntimeError: boom" in text


def test_inspect_shows_the_coming_spike(tmp_path: Path) -> None:
    db = tmp_path / "spike.db"
    store = SQLiteStore(db)
    now = time.time()
    with tw.Scheduler(store=store, dispatcher=tw.InlineDispatcher(), allow=["tests.apps"]) as s:
        for i in range(50):
            s.schedule(record, f"s{i}", "/dev/null", at=now + 1830)
        s.schedule(record, "early", "/dev/null", at=now + 120)
    out = io.StringIO()
    assert main(["inspect", "--store", f"sqlite:///{db}"], out=out) == 0
    text = out.getvalue()
    assert "pending          51" in text
    assert "expected load, next 60 min in 60 s buckets: 51 tasks, peak 50" in text


def test_worker_refuses_a_memory_store() -> None:
    with pytest.raises(SystemExit, match="not shared between processes"):
        main(["worker", "tests.apps.worker_app", "--store", "memory://"])
