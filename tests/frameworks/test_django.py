"""The Django recipe with the real Django: the scheduler started in ``AppConfig.ready``, a view
scheduling through it, Django's test client and a ``FakeClock``; ``ready()`` twice and the
autoreloader's watcher process; ``timewheel worker`` with Django set up, on a durable store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("django")

import django
from django.apps import apps
from django.test import Client

from timewheel import NullDispatcher, Scheduler, TaskState
from timewheel.stores.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "tests.frameworks.django_site.test_settings"
GUARD = 60.0  # seconds: a hang guard, never a measure


@pytest.fixture(scope="module")
def site() -> None:
    """Django set up with the example project's test settings (once per process: Django's
    settings cannot be configured twice)."""
    from django.conf import settings

    if not settings.configured:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
        django.setup()
    assert settings.SETTINGS_MODULE == SETTINGS


def test_ready_starts_the_scheduler_and_a_view_schedules_on_it(site: None, tmp_path: Path) -> None:
    from tests.frameworks.django_site import testing
    from tests.frameworks.django_site.jobs import scheduling, tasks

    sched = scheduling.scheduler()
    assert sched.running  # started by JobsConfig.ready()
    assert [s.id for s in sched.schedules()] == ["nightly-cleanup"]
    log = tmp_path / "runs.log"
    client = Client()
    reply = client.post(f"/welcome/ada?log={log}")
    assert reply.status_code == 202
    task_id = reply.json()["id"]
    assert client.get(f"/jobs/{task_id}").json() == {"state": "pending"}
    testing.CLOCK.advance(60)
    assert client.get(f"/jobs/{task_id}").json() == {"state": "succeeded"}
    assert log.read_text().split()[0] == "welcome-ada"
    before = len(tasks.cleanups)
    testing.CLOCK.advance(24 * 3600)
    assert len(tasks.cleanups) == before + 1  # the nightly job, once


def test_ready_twice_keeps_one_scheduler(site: None) -> None:
    from tests.frameworks.django_site.jobs import scheduling

    sched = scheduling.scheduler()
    apps.get_app_config("jobs").ready()  # Django may call it more than once
    assert scheduling.scheduler() is sched
    assert [s.id for s in sched.schedules()] == ["nightly-cleanup"]


def test_the_autoreloaders_watcher_process_starts_nothing(
    site: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.frameworks.django_site.jobs import scheduling

    monkeypatch.delenv("RUN_MAIN", raising=False)
    monkeypatch.setattr(sys, "argv", ["manage.py", "runserver"])
    assert scheduling.in_autoreloader_watcher()
    assert scheduling.start() is None
    monkeypatch.setenv("RUN_MAIN", "true")  # the serving child the autoreloader restarts
    assert not scheduling.in_autoreloader_watcher()
    monkeypatch.delenv("RUN_MAIN")
    monkeypatch.setattr(sys, "argv", ["manage.py", "runserver", "--noreload"])
    assert not scheduling.in_autoreloader_watcher()
    monkeypatch.setattr(sys, "argv", ["manage.py", "migrate"])
    assert not scheduling.in_autoreloader_watcher()


def test_timewheel_worker_runs_the_projects_tasks_with_django_set_up(tmp_path: Path) -> None:
    from tests.frameworks.django_site.jobs import tasks

    db, log = tmp_path / "tasks.db", tmp_path / "runs.log"
    # the web process's side: a scheduler that stores and triggers, and runs nothing
    with Scheduler(
        store=SQLiteStore(db), dispatcher=NullDispatcher(), allow=["tests.frameworks"]
    ) as web:
        job = web.schedule(tasks.welcome, "grace", str(log), delay=0)
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.frameworks.django_site.settings",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "timewheel",
                "worker",
                "tests.frameworks.django_site.jobs.worker:make",
                "--store",
                f"sqlite:///{db}",
                "--concurrency",
                "2",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            end = time.monotonic() + GUARD
            while job.state is not TaskState.SUCCEEDED:
                assert worker.poll() is None, worker.communicate()[0]
                assert time.monotonic() < end, "the worker did not run the task"
                time.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGTERM)
            out = worker.communicate(timeout=GUARD)[0]
        assert worker.returncode == 0, out
        assert job.result() == "grace"
        line = log.read_text().split()
        assert line[0] == "welcome-grace"
        assert int(line[1]) == worker.pid  # the worker ran it, with Django's settings
        assert line[2] == "UTC"
        # the project's recurring jobs came with the registry
        assert [s.id for s in web.schedules()] == ["nightly-cleanup"]
