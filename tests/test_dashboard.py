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
from timewheel.jobs import TRACEBACK_KEY
from timewheel.report import herd_behind, load_report
from timewheel.rules import CronRule, IntervalRule
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
    version = store.get("f1").version  # (stored READY: due before it was made)
    claimed = store.claim(
        "f1", expected_version=version, owner="w1", lease_expires=NOW + 30, now=NOW - 90
    )
    assert claimed is not None
    store.finish("f1", owner="w1", state=TaskState.FAILED, now=NOW - 60, error="RuntimeError: boom")
    rule = IntervalRule(300)
    store.put_schedule(
        ScheduleRecord(id="every5", func=FUNC, args=("s",), rule=rule.to_spec(), created=NOW),
        first=Task(id="every5@1", func=FUNC, due=NOW + 300, schedule_id="every5", created=NOW),
    )


HERD_AT = NOW + 1830  # the minute a herd is due in fill_more


def fill_more(store: SQLiteStore) -> None:
    """:func:`fill`, then what the other pages show: two runs that succeeded in the last hour,
    a failure with its traceback, a failed attempt waiting for its retry, a task waiting on two
    others, and a herd of 100 one-shot tasks and three cron schedules due in the same minute.

    The runs that ended in the last hour started 10 (f1), 20 (s1), 1 (s2) and 5 s (f2) late."""
    fill(store)
    ran(store, "s1", NOW - 300, NOW - 200, TaskState.SUCCEEDED, started=NOW - 280)
    ran(store, "s2", NOW - 130, NOW - 120, TaskState.SUCCEEDED, started=NOW - 129)
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/jobs.py", line 12, in send_report\n'
        "    raise ConnectionError(host)\n"
        "ConnectionError: smtp.example.com\n"
    )
    ran(
        store,
        "f2",
        NOW - 50,
        NOW - 40,
        TaskState.FAILED,
        started=NOW - 45,
        error="ConnectionError: smtp.example.com",
        extra={TRACEBACK_KEY: tb},
    )
    # a failed attempt waiting for its retry at NOW + 90
    ran(store, "r2", NOW - 25, NOW - 20, TaskState.PENDING, due=NOW + 90, error="TimeoutError: api")
    store.insert(Task(id="d1", func=FUNC, due=NOW, created=NOW, after=("p0", "p1")))
    store.insert_many(
        [Task(id=f"bulk-{i:03}", func=FUNC, due=HERD_AT, created=NOW) for i in range(100)]
    )
    for sid, expr, zone in (
        ("report-eu", "30 1 * * *", "Europe/Paris"),
        ("report-us", "30 1 * * *", "America/New_York"),
        ("report-jp", "30 1 * * *", "Asia/Tokyo"),
    ):
        store.put_schedule(
            ScheduleRecord(id=sid, func=FUNC, rule=CronRule(expr, zone).to_spec(), created=NOW),
            first=Task(id=f"{sid}@1", func=FUNC, due=HERD_AT, schedule_id=sid, created=NOW),
        )


def ran(
    store: SQLiteStore,
    task_id: str,
    at: float,
    ended: float,
    state: TaskState,
    *,
    started: float | None = None,
    **changes: Any,
) -> None:
    """Insert *task_id* due *at*, start it at *started* (default: *at*), and finish it in
    *state* at *ended*."""
    start = at if started is None else started
    store.insert(Task(id=task_id, func=FUNC, due=at, created=at))
    store.promote([task_id], at)  # (stored READY already: due when made)
    version = store.get(task_id).version
    assert store.claim(task_id, expected_version=version, owner="w", lease_expires=ended, now=start)
    store.finish(task_id, owner="w", state=state, now=ended, **changes)


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
    # tasks by queue and state: a column for each state some queue holds
    assert cell(r.text, "queue-default-pending") == "4"
    assert cell(r.text, "queue-default-ready") == "0"
    assert cell(r.text, "queue-default-failed") == "1"
    assert cell(r.text, "queue-default-total") == "5"
    assert cell(r.text, "queue-mail-pending") == "0"
    assert cell(r.text, "queue-mail-ready") == "1"
    assert cell(r.text, "queue-mail-failed") == "0"
    assert cell(r.text, "queue-mail-total") == "1"
    assert 'id="queue-mail-running"' not in r.text  # no queue holds a RUNNING task


def test_counts_by_queue_follow_the_tasks(client: TestClient, store: SQLiteStore) -> None:
    """Every state of every queue, as tasks move; the state counts are the queues' sums."""
    store.insert(Task(id="m2", func=FUNC, due=NOW - 1, queue="mail", created=NOW))
    store.promote(["m2"], NOW)
    assert store.claim(
        "m2", expected_version=store.get("m2").version, owner="w", lease_expires=NOW + 9, now=NOW
    )
    store.insert(Task(id="x1", func=FUNC, due=NOW + 5, queue="exports", created=NOW))
    store.transition("p0", expected_version=0, state=TaskState.CANCELLED, now=NOW)
    r = client.get("/")
    want = {
        "default": {"pending": 3, "cancelled": 1, "failed": 1, "total": 5},
        "exports": {"pending": 1, "total": 1},
        "mail": {"ready": 1, "running": 1, "total": 2},
    }
    states = ("pending", "ready", "running", "failed", "cancelled")
    for queue, counts in want.items():
        for state in (*states, "total"):
            assert cell(r.text, f"queue-{queue}-{state}") == str(counts.get(state, 0)), (
                queue,
                state,
            )
    assert cell(r.text, "count-pending") == "4"
    assert cell(r.text, "count-total") == "8"
    assert re.findall(r'<td>(\w+)</td><td class="n" id="queue-', r.text) == [
        "default",
        "exports",
        "mail",
    ]


def test_overview_of_a_memory_store() -> None:
    """The memory store counts queues from what it keeps (compact tasks in the default queue)."""
    from timewheel.stores import MemoryStore

    store = MemoryStore()
    for i in range(3):
        store.add_pending(f"c{i}", print, (), NOW + 60 * i, NOW)
    store.insert(Task(id="m1", func=print, due=NOW - 1, queue="mail", created=NOW))
    store.promote(["m1", "c0"], NOW)
    with TestClient(create_app(store, token=TOKEN, clock=FakeClock(NOW))) as c:
        page = c.get("/").text
    assert cell(page, "queue-default-pending") == "2"
    assert cell(page, "queue-default-ready") == "1"
    assert cell(page, "queue-mail-ready") == "1"
    assert cell(page, "count-ready") == "2"
    with TestClient(create_app(store, token=TOKEN, clock=FakeClock(NOW))) as c:
        found = c.get("/search?q=builtins:pr").text
    assert re.findall(r'href="/task/([^"]+)"', found) == ["c0", "c1", "c2", "m1"]


def test_every_page_renders(client: TestClient) -> None:
    for path in ("/", "/load", "/failures", "/schedules", "/task/f1", "/search?q=tests.apps"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert "Traceback" not in r.text
    for path in ("/", "/load"):  # the pages with charts load the library from the package
        page = client.get(path).text
        assert "/static/uPlot.iife.min.js" in page
        assert "http://" not in page
        assert "https://" not in page
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


def results(html: str) -> list[str]:
    return re.findall(r'<tr><td><a href="/task/([^"]+)">', html)


def test_search_by_function(client: TestClient, store: SQLiteStore) -> None:
    """Tasks whose function reference starts with the text, in any state, by reference then
    id; only the start of a reference matches."""
    store.insert(Task(id="a0", func="tests.apps.worker_app:add", due=NOW + 9, created=NOW))
    every = ["every5%401", "f1", "p0", "p1", "p2", "r1"]  # "every5@1", url-encoded
    r = client.get("/search?q=tests.apps.worker_app:fail")
    assert results(r.text) == every
    assert "6 tasks whose function reference starts with" in cell_text(r.text, "found")
    assert results(client.get("/search?q=tests.apps.worker_app:").text) == ["a0", *every]
    assert results(client.get("/search?q=tests.apps.worker_app:a").text) == ["a0"]
    assert "1 task whose" in client.get("/search?q=tests.apps.worker_app:a").text
    for text in ("worker_app", "fail", "tests.apps.worker_app:failx"):
        page = client.get(f"/search?q={text}").text
        assert results(page) == [], text
        assert 'id="none"' in page


def test_search_shows_its_limit(tmp_path: Path) -> None:
    """A search lists at most 100 tasks and says that more match."""
    s = SQLiteStore(str(tmp_path / "many.db"))
    try:
        s.insert_many(
            [Task(id=f"t{i:03}", func=FUNC, due=NOW + i, created=NOW) for i in range(101)]
        )
        with TestClient(create_app(s, token=TOKEN, clock=FakeClock(NOW))) as c:
            page = c.get("/search?q=tests.apps").text
            assert results(page) == [f"t{i:03}" for i in range(100)]
            assert "The first 100 tasks" in page
            assert "more match" in page
            s.delete("t100")
            page = c.get("/search?q=tests.apps").text
            assert len(results(page)) == 100
            assert "100 tasks whose" in page
            assert "more match" not in page
    finally:
        s.close()


def cell_text(html: str, element_id: str, tag: str = "p") -> str:
    """The text of the *tag* element *element_id*, the tags inside removed."""
    m = re.search(rf'id="{re.escape(element_id)}">(.*?)</{tag}>', html, re.S)
    assert m is not None, element_id
    return re.sub(r"<[^>]+>", "", m.group(1))


def test_a_task_page_shows_when_its_run_started(client: TestClient, store: SQLiteStore) -> None:
    page = client.get("/task/f1").text
    assert "2027-01-15T07:58:30+00:00" in cell_text(page, "started", "td")  # NOW - 90
    assert cell(page, "start-lateness") == "10.000 s"  # due NOW - 100
    assert cell(client.get("/task/p0").text, "started") == "-"
    # a failed attempt waiting for its retry shows its start, not a lateness against the new due
    ran(store, "w1", NOW - 50, NOW - 40, TaskState.PENDING, started=NOW - 48, due=NOW + 60)
    page = client.get("/task/w1").text
    assert "2027-01-15T07:59:12+00:00" in cell_text(page, "started", "td")
    assert 'id="start-lateness"' not in page


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
    assert copy.state is TaskState.READY  # due at once: stored READY
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
        for path in ("/", "/load", "/failures", "/schedules", "/task/f1", "/search?q=x"):
            r = c.get(path)
            assert r.status_code == 503, path
            assert "Store unavailable" in r.text
            assert "Traceback" not in r.text
            assert 'File "' not in r.text
        for path in ("/task/f1/retry", "/schedule/every5/run", "/schedule/every5/pause"):
            r = c.post(path, data={"token": TOKEN})
            assert r.status_code == 503, path
            assert "Store unavailable" in r.text


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


def test_overview_shows_the_last_hour(client: TestClient, store: SQLiteStore) -> None:
    # start lateness: f1 (of fill) started 10 s after its due time
    ran(store, "s1", NOW - 300, NOW - 200, TaskState.SUCCEEDED, started=NOW - 275)  # 25 s late
    ran(store, "s2", NOW - 130, NOW - 120, TaskState.SUCCEEDED, started=NOW - 129)  # 1 s late
    ran(store, "old", NOW - 9000, NOW - 7200, TaskState.SUCCEEDED)  # before the hour
    store.transition("p2", expected_version=0, state=TaskState.CANCELLED, now=NOW - 1)  # no run
    # a failed attempt whose retry ended in the hour: its last start counts, 3 s after the
    # retry's due time
    ran(store, "a2", NOW - 900, NOW - 890, TaskState.PENDING, due=NOW - 600)
    store.promote(["a2"], NOW - 600)
    assert store.claim(
        "a2", expected_version=store.get("a2").version, owner="w", lease_expires=NOW, now=NOW - 597
    )
    store.finish("a2", owner="w", state=TaskState.SUCCEEDED, now=NOW - 500)
    r = client.get("/")
    assert cell(r.text, "succeeded-hour") == "3"
    assert cell(r.text, "failures-hour") == "1"  # f1
    assert cell(r.text, "throughput") == "0.1"  # 4 runs in 60 minutes
    assert cell(r.text, "late-runs") == "4"  # the cancelled task never ran
    assert "Start lateness" in r.text
    # start lateness 1, 3, 10, 25 s: nearest rank p50 = 2nd, p90 = p99 = 4th
    assert cell(r.text, "late-p50") == "3.000 s"
    assert cell(r.text, "late-p90") == "25.000 s"
    assert cell(r.text, "late-p99") == "25.000 s"
    assert cell(r.text, "late-max") == "25.000 s"
    assert 'id="chart-throughput"' in r.text
    assert "/static/uPlot.iife.min.js" in r.text


def test_the_failures_page_shows_the_traceback(client: TestClient, store: SQLiteStore) -> None:
    text = 'Traceback (most recent call last):\n  File "job.py", line 3\nRuntimeError: <boom>\n'
    store.insert(Task(id="f2", func=FUNC, due=NOW - 50, created=NOW - 50))
    store.promote(["f2"], NOW - 50)
    assert store.claim(
        "f2", expected_version=store.get("f2").version, owner="w", lease_expires=NOW, now=NOW - 50
    )
    store.finish(
        "f2",
        owner="w",
        state=TaskState.FAILED,
        now=NOW - 40,
        error="RuntimeError: <boom>",
        extra={TRACEBACK_KEY: text},
    )
    page = client.get("/failures").text
    assert "<summary>3 lines</summary>" in page
    assert "File &#34;job.py&#34;, line 3" in page
    assert "RuntimeError: &lt;boom&gt;" in page  # escaped
    task = client.get("/task/f2").text
    assert "Traceback (most recent call last)" in task
    # f1 failed without one (the store kept none): a dash, no empty block
    assert client.get("/task/f1").text.count('id="traceback"') == 0
    # the retried copy starts without the old traceback
    client.post("/task/f2/retry", data={"token": TOKEN})
    assert TRACEBACK_KEY not in store.get("f2~retry1").extra


def test_a_task_page_lists_upstream_and_downstream(client: TestClient, store: SQLiteStore) -> None:
    store.insert(Task(id="d1", func=FUNC, due=NOW, created=NOW, after=("p0", "p1")))
    store.insert(Task(id="d2", func=FUNC, due=NOW, created=NOW, after=("f1",)))  # starts terminal
    page = client.get("/task/p0").text
    assert '<a href="/task/d1">d1</a> pending (all_success)' in page
    page = client.get("/task/f1").text
    assert '<a href="/task/d2">d2</a> upstream_failed' in page
    page = client.get("/task/d1").text
    assert '<a href="/task/p0">p0</a> pending' in page
    assert '<a href="/task/p1">p1</a> pending' in page
    assert cell(client.get("/task/p2").text, "downstream") == "-"


def test_run_now_inserts_an_extra_run(client: TestClient, store: SQLiteStore) -> None:
    assert "Run now" in client.get("/schedules").text
    for body, headers in (({}, {}), ({"token": TOKEN}, {"Origin": "https://evil.example"})):
        r = client.post("/schedule/every5/run", data=body, headers=headers)
        assert r.status_code == 403
    assert store.tasks(schedule_id="every5") == [store.get("every5@1")]
    r = client.post("/schedule/every5/run", data={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303
    run_id = f"every5@{round(NOW * 1_000_000)}"
    assert r.headers["location"] == f"/task/every5%40{round(NOW * 1_000_000)}"
    run = store.get(run_id)
    assert run.state is TaskState.PENDING
    assert run.due == NOW
    assert run.args == ("s",)
    assert run.extra["catchup"] is True
    assert store.get("every5@1").state is TaskState.PENDING  # the series keeps its next run
    page = client.get(r.headers["location"])
    assert cell(page.text, "state") == "pending"
    # a paused schedule's runs are skipped: run now is refused, with the reason
    client.post("/schedule/every5/pause", data={"token": TOKEN})
    r = client.post("/schedule/every5/run", data={"token": TOKEN})
    assert r.status_code == 409
    assert "paused" in r.text
    assert client.post("/schedule/nope/run", data={"token": TOKEN}).status_code == 404


def test_run_now_is_refused_read_only(store: SQLiteStore) -> None:
    app = create_app(store, token=TOKEN, read_only=True, clock=FakeClock(NOW))
    with TestClient(app) as c:
        assert "Run now" not in c.get("/schedules").text
        assert c.post("/schedule/every5/run", data={"token": TOKEN}).status_code == 403
    assert len(store.tasks(schedule_id="every5")) == 1


def test_a_herd_is_named_by_its_schedules(client: TestClient, store: SQLiteStore) -> None:
    slot = NOW + 1830
    for i in range(120):
        sid = f"nightly-{i:03}"
        store.put_schedule(
            ScheduleRecord(id=sid, func=FUNC, rule=IntervalRule(86400).to_spec(), created=NOW),
            first=Task(id=f"{sid}@1", func=FUNC, due=slot, schedule_id=sid, created=NOW),
        )
    page = client.get("/load").text
    assert 'id="herd-minute"' in page
    assert "120 tasks due in the bucket" in page
    assert "<li>120 instances of every 86400s (unanchored)</li>" in page
    assert "nightly-000, nightly-001" in page


def test_the_richer_store_pages(store: SQLiteStore, tmp_path: Path) -> None:
    rich = SQLiteStore(str(tmp_path / "rich.db"))
    fill_more(rich)
    app = create_app(rich, token=TOKEN, clock=FakeClock(NOW))
    with TestClient(app) as c:
        load = c.get("/load").text
        assert "103 tasks due in the bucket" in load
        assert "<li>1 instance of cron &#39;30 1 * * *&#39; in Europe/Paris" in load
        assert "report-eu, report-jp, report-us" in load
        assert "100 one-shot tasks." in load
        schedules = c.get("/schedules").text
        assert "Europe/Paris" in schedules
        assert "+01:00 / " in schedules  # Paris in winter, then UTC
        page = c.get("/task/p0").text
        assert '<a href="/task/d1">d1</a> pending (all_success)' in page
    rich.close()


def test_last_run_of_a_schedule_with_a_long_history(client: TestClient, store: SQLiteStore) -> None:
    # more finished instances than a page would read in due order: the latest end is shown
    for i in range(250):
        due = NOW - 86400 + i * 300
        state = TaskState.FAILED if i == 249 else TaskState.SUCCEEDED
        store.insert(Task(id=f"every5@h{i}", func=FUNC, due=due, schedule_id="every5", created=due))
        store.promote([f"every5@h{i}"], due)
        assert store.claim(
            f"every5@h{i}", expected_version=1, owner="w", lease_expires=due + 9, now=due
        )
        store.finish(f"every5@h{i}", owner="w", state=state, now=due + 1, error="x")
    page = client.get("/schedules").text
    assert re.search(r'href="/task/every5%40h249">[^<]+</a> failed', page), page


def test_failures_page_cancels_a_retry(client: TestClient, store: SQLiteStore) -> None:
    assert "No task waits for a retry." in client.get("/failures").text
    store.promote(["p0"], NOW + 30)
    assert store.claim("p0", expected_version=1, owner="w", lease_expires=NOW + 60, now=NOW + 30)
    store.finish(
        "p0", owner="w", state=TaskState.PENDING, now=NOW + 31, due=NOW + 90, error="OSError: x"
    )
    page = client.get("/failures").text
    assert 'id="retrying"' in page
    assert "OSError: x" in page
    assert '/task/p0/cancel"' in page
    r = client.post("/task/p0/cancel", data={"token": TOKEN})
    assert cell(r.text, "state") == "cancelled"
    assert store.get("p0").state is TaskState.CANCELLED
    assert "No task waits for a retry." in client.get("/failures").text


def test_a_herd_behind_too_many_tasks_is_not_examined(tmp_path: Path) -> None:
    rich = SQLiteStore(str(tmp_path / "rich.db"))
    fill_more(rich)
    load = load_report(rich, NOW, horizon=3600.0, bucket=60.0)
    assert load["herd"] is not None
    assert herd_behind(rich, load, overdue=0, read_limit=10) == {
        "not_examined": 1_005
    }  # 5 due before it, and a margin
    named = herd_behind(rich, load, overdue=0, read_limit=2_000)
    assert named["schedules"] == ["report-eu", "report-jp", "report-us"]
    rich.close()
