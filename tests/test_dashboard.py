"""The dashboard application through Starlette's TestClient, on a SQLite store of known content."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from timewheel.cli import main
from timewheel.dashboard import create_app
from timewheel.dashboard.actions import cancel_task, retry_now, set_paused
from timewheel.errors import InvalidTransitionError, StoreError
from timewheel.rules import IntervalRule
from timewheel.stores import SQLiteStore
from timewheel.task import ScheduleRecord, Task, TaskState
from timewheel.testing import FakeClock

NOW = 1_800_000_000.0
TOKEN = "s3cret-token"
FUNC = "tests.apps.worker_app:fail"


def fill(store: SQLiteStore) -> None:
    """Three pending tasks (one due within the minute), one READY, one FAILED, one schedule."""
    for i, delay in enumerate((30.0, 600.0, 7200.0)):
        store.insert(Task(id=f"p{i}", func=FUNC, args=("x",), due=NOW + delay, created=NOW))
    store.insert(Task(id="r1", func=FUNC, args=("boom",), due=NOW - 5, queue="mail", created=NOW))
    store.promote(["r1"], NOW)
    store.insert(Task(id="f1", func=FUNC, args=("secret-arg",), due=NOW - 100, created=NOW))
    store.promote(["f1"], NOW - 90)
    claimed = store.claim(
        "f1", expected_version=1, owner="w1", lease_expires=NOW + 30, now=NOW - 90
    )
    assert claimed is not None
    store.finish("f1", owner="w1", state=TaskState.FAILED, now=NOW - 60, error="RuntimeError: boom")
    rule = IntervalRule(300)
    store.put_schedule(
        ScheduleRecord(id="every5", func=FUNC, args=("s",), rule=rule.to_spec(), created=NOW),
        first=Task(id="every5@1", func=FUNC, due=NOW + 300, schedule_id="every5", created=NOW),
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(str(tmp_path / "tasks.db"))
    fill(s)
    yield s
    s.close()


@pytest.fixture
def client(store: SQLiteStore) -> Iterator[TestClient]:
    app = create_app(store, token=TOKEN, clock=FakeClock(NOW))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def cell(html: str, element_id: str) -> str:
    m = re.search(rf'id="{re.escape(element_id)}">([^<]*)<', html)
    assert m is not None, element_id
    return m.group(1).strip()


def test_overview_shows_the_counts(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    assert cell(r.text, "count-pending") == "4"  # three tasks and the schedule's instance
    assert cell(r.text, "count-ready") == "1"
    assert cell(r.text, "count-failed") == "1"
    assert cell(r.text, "count-total") == "6"
    assert cell(r.text, "pending-minute") == "1"
    assert cell(r.text, "pending-hour") == "3"
    assert cell(r.text, "failures-hour") == "1"
    assert cell(r.text, "oldest-ready") == "5.0 s"
    assert "<td>mail</td>" in r.text


def test_every_page_renders(client: TestClient) -> None:
    for path in ("/", "/load", "/failures", "/schedules", "/task/f1", "/search?q=worker_app"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert "Traceback" not in r.text
    load = client.get("/load").text
    assert "/static/uPlot.iife.min.js" in load
    assert "http://" not in load
    assert "https://" not in load
    failures = client.get("/failures").text
    assert "RuntimeError: boom" in failures
    assert ">f1<" in failures
    schedules = client.get("/schedules").text
    assert "every5" in schedules
    assert "active" in schedules
    # next fire times are listed, in the zone and in UTC
    assert schedules.count("+00:00 / ") == 3


def test_static_chart_library_is_served(client: TestClient) -> None:
    r = client.get("/static/uPlot.iife.min.js")
    assert r.status_code == 200
    assert "uPlot" in r.text


def test_search_by_id_redirects_to_the_task(client: TestClient) -> None:
    r = client.get("/search?q=f1", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/task/f1"
    r = client.get("/search?q=no-such-thing")
    assert r.status_code == 200
    assert 'id="none"' in r.text


def test_bad_ids_are_a_404_page(client: TestClient) -> None:
    for path in ("/task/nope", "/no/such/page"):
        r = client.get(path)
        assert r.status_code == 404, path
        assert "Not found" in r.text
    r = client.post("/task/nope/retry", data={"token": TOKEN})
    assert r.status_code == 404
    r = client.post("/schedule/nope/pause", data={"token": TOKEN})
    assert r.status_code == 404


def test_arguments_are_hidden_unless_enabled(store: SQLiteStore) -> None:
    with TestClient(create_app(store, token=TOKEN, clock=FakeClock(NOW))) as c:
        assert "secret-arg" not in c.get("/task/f1").text
    app = create_app(store, token=TOKEN, show_arguments=True, clock=FakeClock(NOW))
    with TestClient(app) as c:
        assert "secret-arg" in c.get("/task/f1").text


def test_writes_are_refused_without_the_token(client: TestClient, store: SQLiteStore) -> None:
    for body in ({}, {"token": "wrong"}):
        r = client.post("/task/f1/retry", data=body)
        assert r.status_code == 403
        assert "token" in r.text
        r = client.post("/task/p0/cancel", data=body)
        assert r.status_code == 403
    assert store.get("p0").state is TaskState.PENDING
    assert store.count_by_state()[TaskState.PENDING] == 4
    # a GET never writes: it asks for a task named "p0/cancel"
    assert client.get("/task/p0/cancel").status_code == 404
    assert store.get("p0").state is TaskState.PENDING


def test_cross_site_writes_are_refused(client: TestClient, store: SQLiteStore) -> None:
    r = client.post(
        "/task/p0/cancel", data={"token": TOKEN}, headers={"Origin": "https://evil.example"}
    )
    assert r.status_code == 403
    assert "cross-site" in r.text
    assert store.get("p0").state is TaskState.PENDING


def test_read_only_refuses_writes_and_offers_none(store: SQLiteStore) -> None:
    app = create_app(store, token=TOKEN, read_only=True, clock=FakeClock(NOW))
    with TestClient(app) as c:
        assert "Retry now" not in c.get("/failures").text
        assert c.post("/task/p0/cancel", data={"token": TOKEN}).status_code == 403
    assert store.get("p0").state is TaskState.PENDING


def test_retry_now_inserts_a_copy(client: TestClient, store: SQLiteStore) -> None:
    assert "Retry now" in client.get("/failures").text
    r = client.post("/task/f1/retry", data={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/task/f1~retry1"
    copy = store.get("f1~retry1")
    assert copy.state is TaskState.PENDING
    assert copy.due == NOW
    assert copy.args == ("secret-arg",)
    assert copy.attempts == 0
    assert copy.extra["retry_of"] == "f1"
    assert store.get("f1").state is TaskState.FAILED  # history kept
    # through the header, a second retry takes the next id
    r = client.post("/task/f1/retry", headers={"X-Timewheel-Token": TOKEN}, follow_redirects=False)
    assert r.headers["location"] == "/task/f1~retry2"
    # a task that did not fail is not retried
    r = client.post("/task/p0/retry", data={"token": TOKEN})
    assert r.status_code == 409


def test_cancel_through_the_page(client: TestClient, store: SQLiteStore) -> None:
    r = client.post("/task/p1/cancel", data={"token": TOKEN})
    assert r.status_code == 200
    assert cell(r.text, "state") == "cancelled"
    assert store.get("p1").state is TaskState.CANCELLED


def test_pause_and_resume_a_schedule(client: TestClient, store: SQLiteStore) -> None:
    r = client.post("/schedule/every5/pause", data={"token": TOKEN})
    assert r.status_code == 200
    rec = store.get_schedule("every5")
    assert rec is not None
    assert rec.paused
    assert store.get("every5@1").state is TaskState.CANCELLED
    assert "Resume" in r.text
    r = client.post("/schedule/every5/resume", data={"token": TOKEN})
    rec = store.get_schedule("every5")
    assert rec is not None
    assert not rec.paused
    pending = store.tasks(state=TaskState.PENDING, schedule_id="every5")
    assert len(pending) == 1


def test_mounted_under_a_prefix(store: SQLiteStore) -> None:
    outer = Starlette(
        routes=[Mount("/timewheel", create_app(store, token=TOKEN, clock=FakeClock(NOW)))]
    )
    with TestClient(outer) as c:
        r = c.get("/timewheel/")
        assert r.status_code == 200
        assert 'href="/timewheel/failures"' in r.text
        r = c.post("/timewheel/task/p2/cancel", data={"token": TOKEN}, follow_redirects=False)
        assert r.headers["location"] == "/timewheel/task/p2"


class _Vanishing:
    """A store whose reads fail, as a database file taken away mid-request does."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        raise StoreError("database disk image is unavailable")


def test_a_store_that_goes_away_is_a_clear_error_page(store: SQLiteStore) -> None:
    app = create_app(_Vanishing(store), token=TOKEN, clock=FakeClock(NOW))
    with TestClient(app, raise_server_exceptions=False) as c:
        for path in ("/", "/failures", "/schedules", "/task/f1", "/search?q=x"):
            r = c.get(path)
            assert r.status_code == 503, path
            assert "Store unavailable" in r.text
            assert "Traceback" not in r.text
            assert 'File "' not in r.text


def test_a_closed_store_is_a_clear_error_page(tmp_path: Path) -> None:
    s = SQLiteStore(str(tmp_path / "gone.db"))
    fill(s)
    app = create_app(s, token=TOKEN, clock=FakeClock(NOW))
    s.close()
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/task/p0/cancel", data={"token": TOKEN})
        assert r.status_code == 503
        assert "Traceback" not in r.text


def test_a_generated_token_is_kept_on_the_app(store: SQLiteStore) -> None:
    a, b = create_app(store), create_app(store)
    assert len(a.state.token) >= 24
    assert a.state.token != b.state.token


def test_actions_without_a_web_framework(store: SQLiteStore) -> None:
    assert cancel_task(store, "p0", NOW) is True
    assert cancel_task(store, "f1", NOW) is False  # terminal: left alone
    with pytest.raises(InvalidTransitionError):
        retry_now(store, "p1", NOW)
    set_paused(store, "every5", True, FakeClock(NOW))
    set_paused(store, "every5", True, FakeClock(NOW))  # idempotent
    rec = store.get_schedule("every5")
    assert rec is not None
    assert rec.paused


def test_import_timewheel_does_not_import_starlette() -> None:
    code = "import sys, timewheel, timewheel.dashboard; print('starlette' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_dashboard_refuses_a_missing_store(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        main(["dashboard", "--store", f"sqlite:///{tmp_path / 'missing.db'}"])
    assert e.value.code != 0


def test_metrics_route_serves_the_store_gauges(client: TestClient) -> None:
    pytest.importorskip("prometheus_client")
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert "timewheel_ready 1.0" in r.text
    assert 'timewheel_pending_due{within="minute"} 1.0' in r.text


def test_schedule_last_run_and_its_outcome(client: TestClient, store: SQLiteStore) -> None:
    store.promote(["every5@1"], NOW + 300, successors=())
    claimed = store.claim(
        "every5@1", expected_version=1, owner="w", lease_expires=NOW + 400, now=NOW + 300
    )
    assert claimed is not None
    store.finish("every5@1", owner="w", state=TaskState.SUCCEEDED, now=NOW + 301)
    r = client.get("/schedules")
    assert 'href="/task/every5%401"' in r.text
    assert "succeeded" in r.text
    page = client.get("/task/every5%401")
    assert page.status_code == 200
    assert cell(page.text, "state") == "succeeded"
