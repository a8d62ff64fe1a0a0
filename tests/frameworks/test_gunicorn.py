"""A real gunicorn with two sync worker processes, each embedding a scheduler on one SQLite file:
tasks scheduled through either worker run once, and the recurring job every worker registers
fires once per slot. Real time, but nothing is measured: the test waits on the store's rows (with
hang guards) and counts runs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("gunicorn")

from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import TaskState

ROOT = Path(__file__).resolve().parents[2]
GUARD = 60.0  # seconds: a hang guard, never a measure
KEYS = [f"job{i}" for i in range(8)]


def _lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def _wait(what: str, condition: Callable[[], bool], server: subprocess.Popen[str]) -> None:
    end = time.monotonic() + GUARD
    while not condition():
        if server.poll() is not None:
            pytest.fail(f"gunicorn exited while waiting for {what}: {server.communicate()[0]}")
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.mark.skipif(sys.platform == "win32", reason="gunicorn runs on POSIX")
@pytest.mark.parametrize("preload", [False, True], ids=["lazy", "preload"])
def test_two_gunicorn_workers_on_one_sqlite_file_run_everything_once(
    tmp_path: Path, preload: bool
) -> None:
    db, log = tmp_path / "site.db", tmp_path / "site.log"
    SQLiteStore(db).close()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    env = {
        **os.environ,
        "TIMEWHEEL_SITE_DB": str(db),
        "TIMEWHEEL_SITE_LOG": str(log),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "--config",
        "python:tests.frameworks.gunicorn_conf",
        "--bind",
        f"fd://{listener.fileno()}",
        *(["--preload"] if preload else []),
        "tests.frameworks.gunicorn_site:app",
    ]
    server = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        pass_fds=[listener.fileno()],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    listener.close()
    try:
        # both workers started their schedulers and registered the recurring job
        _wait(
            "two workers to register",
            lambda: len({p for tag, p in _lines(log) if tag == "registered"}) == 2,
            server,
        )
        ids = []
        for key in KEYS:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/schedule/{key}", b"")
            with urllib.request.urlopen(request, timeout=GUARD) as reply:
                ids.append(json.load(reply)["id"])
        store = SQLiteStore(db)

        def settled() -> bool:
            done = all(store.get(i).state is TaskState.SUCCEEDED for i in ids)
            ticks = store.tasks(state=TaskState.SUCCEEDED, schedule_id="tick")
            return done and len(ticks) >= 2

        _wait("the tasks and two recurring runs", settled, server)
    finally:
        server.send_signal(signal.SIGTERM)
        out = server.communicate(timeout=GUARD)[0]
    assert server.returncode == 0, out
    assert "Traceback" not in out, out
    lines = _lines(log)
    registered = {pid for tag, pid in lines if tag == "registered"}
    assert len(registered) == 2  # two worker processes, each with its scheduler
    runs = Counter(tag for tag, _ in lines)
    assert {key: runs[key] for key in KEYS} == dict.fromkeys(KEYS, 1)  # each task once
    # one series however many workers registered it, and each of its runs once
    assert [s.id for s in store.list_schedules()] == ["tick"]
    instances = store.tasks(schedule_id="tick")
    succeeded = [t for t in instances if t.state is TaskState.SUCCEEDED]
    assert runs["tick"] == len(succeeded) >= 2
    assert all(t.attempts == 1 for t in succeeded)
    assert len({t.extra["slot"] for t in instances}) == len(instances)  # one instance per slot
    store.close()
