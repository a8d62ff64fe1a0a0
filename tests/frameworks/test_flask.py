"""The Flask recipe with the real Flask: the extension in an application factory, its test client,
and a ``FakeClock``; the reloader's watcher process; two applications on one store."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flask")

from flask import Flask

from tests.frameworks import flask_app
from timewheel import InlineDispatcher, Scheduler
from timewheel.contrib.flask import EXTENSION, Timewheel, in_reloader_watcher
from timewheel.stores.sqlite import SQLiteStore
from timewheel.testing import FakeClock

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _no_refreshes() -> Iterator[None]:
    flask_app.refreshes.clear()
    yield
    flask_app.refreshes.clear()


def _scheduler(clock: FakeClock, store: SQLiteStore | None = None) -> Scheduler:
    return Scheduler(
        clock=clock, store=store, dispatcher=InlineDispatcher(), allow=["tests.frameworks"]
    )


def test_a_view_schedules_and_the_fake_clock_runs_it(clock: FakeClock, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    app = flask_app.create_app(
        {"TIMEWHEEL_SCHEDULER": lambda: _scheduler(clock), "RUN_LOG": str(log)}
    )
    client = app.test_client()
    reply = client.post("/welcome/ada")
    assert reply.status_code == 202
    task_id = reply.get_json()["id"]
    assert client.get(f"/jobs/{task_id}").get_json() == {"state": "pending"}
    clock.advance(59)
    assert not log.exists()
    clock.advance(1)
    assert client.get(f"/jobs/{task_id}").get_json() == {"state": "succeeded"}
    assert log.read_text().split()[0] == "welcome-ada"
    clock.advance(300)
    assert flask_app.refreshes == ["refreshed"]  # the recurring job of the extension's registry
    app.extensions[EXTENSION].shutdown()


def test_a_recurring_function_declared_after_init_app_is_scheduled_too(clock: FakeClock) -> None:
    tw = Timewheel()
    app = Flask("late")
    app.config["TIMEWHEEL_SCHEDULER"] = lambda: _scheduler(clock)
    tw.init_app(app)
    ran: list[int] = []

    @tw.every(60, id="late-declared")
    def late() -> None:
        ran.append(1)

    with app.app_context():
        assert [s.id for s in tw.scheduler.schedules()] == ["late-declared"]
    clock.advance(60)
    assert ran == [1]
    app.extensions[EXTENSION].shutdown()


def test_outside_an_initialised_application_the_extension_says_what_to_do() -> None:
    with Flask("bare").app_context(), pytest.raises(RuntimeError, match="init_app"):
        assert Timewheel().scheduler is None  # never reached: the property raises


def test_two_applications_on_one_store_register_and_run_once(
    clock: FakeClock, tmp_path: Path
) -> None:
    db = tmp_path / "tasks.db"
    apps = [
        flask_app.create_app({"TIMEWHEEL_SCHEDULER": lambda: _scheduler(clock, SQLiteStore(db))})
        for _ in range(2)  # what a reloader or a test suite does: the factory runs twice
    ]
    clock.advance(3 * 300)
    assert flask_app.refreshes == ["refreshed"] * 3  # once per slot, not once per application
    store = SQLiteStore(db)
    assert [s.id for s in store.list_schedules()] == ["refresh-prices"]
    store.close()
    for app in apps:
        app.extensions[EXTENSION].shutdown()


def test_the_store_url_comes_from_the_config(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cfg.db'}"
    app = flask_app.create_app(
        {"TIMEWHEEL_STORE": url, "TIMEWHEEL_START": False, "TIMEWHEEL_ALLOW": ["tests.frameworks"]}
    )
    sched = app.extensions[EXTENSION]
    assert isinstance(sched.store, SQLiteStore)
    assert not sched.running  # TIMEWHEEL_START=False: it stores what is scheduled, runs nothing
    with app.app_context():
        assert [s.id for s in flask_app.tw.scheduler.schedules()] == ["refresh-prices"]
    sched.shutdown()


def test_the_reloaders_watcher_process_does_not_start_the_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLASK_RUN_FROM_CLI", "true")
    monkeypatch.setattr(sys, "argv", ["flask", "--app", "myapp", "run", "--debug"])
    monkeypatch.delenv("WERKZEUG_RUN_MAIN", raising=False)
    assert in_reloader_watcher()
    app = flask_app.create_app()
    assert not app.extensions[EXTENSION].running
    app.extensions[EXTENSION].shutdown()
    monkeypatch.setenv("WERKZEUG_RUN_MAIN", "true")  # the child the reloader restarts
    assert not in_reloader_watcher()
    app = flask_app.create_app()
    assert app.extensions[EXTENSION].running
    app.extensions[EXTENSION].shutdown()
    monkeypatch.delenv("WERKZEUG_RUN_MAIN")
    monkeypatch.setattr(sys, "argv", ["flask", "run", "--debug", "--no-reload"])
    assert not in_reloader_watcher()


def test_the_extension_module_does_not_import_flask() -> None:
    code = "import sys, timewheel.contrib.flask; print('flask' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
