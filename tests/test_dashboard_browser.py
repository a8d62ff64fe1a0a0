"""The dashboard in a real headless browser (Debian's chromium and chromedriver, via selenium).

Skipped when the browser or selenium is missing, except under CI (``CI`` set), where that fails.
With ``TIMEWHEEL_SCREENSHOTS=DIR`` the main pages are saved there as PNG files (docs/img).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_dashboard import NOW, TOKEN, fill_more
from timewheel.stores import SQLiteStore
from timewheel.task import TaskState
from timewheel.testing import FakeClock

_MISSING = (
    shutil.which("chromium") is None
    or shutil.which("chromedriver") is None
    or any(__import__("importlib").util.find_spec(m) is None for m in ("selenium", "uvicorn"))
)
if _MISSING and not os.environ.get("CI"):
    pytest.skip("chromium, chromedriver, selenium or uvicorn missing", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, SQLiteStore]]:
    import uvicorn

    from timewheel.dashboard import create_app

    store = SQLiteStore(str(tmp_path / "tasks.db"))
    fill_more(store)
    app = create_app(store, token=TOKEN, clock=FakeClock(NOW))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", store
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver: Any, name: str) -> None:
    target = os.environ.get("TIMEWHEEL_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        # the whole page: the window grows to its height for the picture, then shrinks back
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(int(height) + 140, 2400))
        driver.save_screenshot(str(Path(target) / f"dashboard-{name}.png"))
        driver.set_window_size(1280, 900)


def test_dashboard_in_a_browser(served: tuple[str, SQLiteStore], browser: Any) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, store = served

    def text(element_id: str) -> str:
        return str(browser.find_element(By.ID, element_id).text)

    def after_click(path: str) -> None:
        """Wait for the page a click loads (a form's POST answers with a redirect)."""
        WebDriverWait(browser, 10).until(lambda b: b.current_url.startswith(url + path))
        WebDriverWait(browser, 10).until(
            lambda b: b.execute_script("return document.readyState") == "complete"
        )

    browser.get(url + "/")
    assert text("count-failed") == "2"
    assert text("count-pending") == "109"  # 3 + every5 + r2 + d1 + 100 bulk + 3 reports
    assert text("count-ready") == "1"
    assert text("count-succeeded") == "2"
    # the last hour: two successes and two failures, started 1, 5, 10 and 20 s late
    assert text("succeeded-hour") == "2"
    assert text("failures-hour") == "2"
    assert text("late-p50") == "5.000 s"
    assert text("late-p90") == "20.000 s"
    assert text("late-max") == "20.000 s"
    # tasks by queue and state, counted by the store
    assert text("queue-default-pending") == "109"
    assert text("queue-default-failed") == "2"
    assert text("queue-mail-ready") == "1"
    assert text("queue-mail-total") == "1"
    # the chart library drew the throughput chart, loaded from the package itself
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart-throughput canvas")) == 1
    _shot(browser, "overview")

    browser.get(url + "/load")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".chart canvas")) == 2
    herd = text("herd-minute")
    assert "103 tasks due" in herd
    assert "report-eu, report-jp, report-us" in herd
    _shot(browser, "load")

    browser.get(url + "/failures")
    rows = browser.find_elements(By.CSS_SELECTOR, "#failures tr")
    assert "f2" in rows[1].text  # the latest failure first
    browser.find_element(By.CSS_SELECTOR, "#failures .traceback summary").click()
    shown = browser.find_element(By.CSS_SELECTOR, "#failures .traceback pre")
    assert "ConnectionError: smtp.example.com" in shown.text
    assert 'File "/srv/app/jobs.py", line 12' in shown.text
    assert "TimeoutError: api" in text("retrying")
    _shot(browser, "failures")
    rows[1].find_element(By.XPATH, ".//button[text()='Retry now']").click()
    after_click("/task/f2~retry1")
    assert text("state") == "ready"  # due at once: stored READY
    assert store.get("f2~retry1").state is TaskState.READY

    browser.get(url + "/task/p0")
    assert "d1 pending" in text("downstream")
    _shot(browser, "task")
    browser.find_element(By.LINK_TEXT, "d1").click()
    after_click("/task/d1")
    assert "p0 pending" in text("upstream")
    assert "p1 pending" in text("upstream")

    browser.get(url + "/schedules")
    _shot(browser, "schedules")
    run_now = "//tr[@id='schedule-every5']//button[text()='Run now']"
    browser.find_element(By.XPATH, run_now).click()
    after_click("/task/every5")
    assert text("state") == "pending"
    runs = [t for t in store.tasks(schedule_id="every5") if t.extra.get("catchup")]
    assert [(t.due, t.state) for t in runs] == [(NOW, TaskState.PENDING)]

    browser.get(url + "/schedules")
    browser.find_element(By.XPATH, "//tr[@id='schedule-every5']//button[text()='Pause']").click()
    WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "#schedule-every5 .paused").text == "paused"
    )
    assert browser.find_element(By.CSS_SELECTOR, "#schedule-every5 .paused").text == "paused"
    rec = store.get_schedule("every5")
    assert rec is not None
    assert rec.paused

    # a write from the page's own script without the token is refused, and changes nothing
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/task/p0/cancel', {method: 'POST'}).then(r => done(r.status));"
    )
    assert status == 403
    assert store.get("p0").state is TaskState.PENDING
