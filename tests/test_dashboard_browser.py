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

from tests.test_dashboard import NOW, TOKEN, fill
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
    fill(store)
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
        driver.save_screenshot(str(Path(target) / f"dashboard-{name}.png"))


def test_dashboard_in_a_browser(served: tuple[str, SQLiteStore], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    url, store = served
    browser.get(url + "/")
    assert browser.find_element(By.ID, "count-failed").text == "1"
    assert browser.find_element(By.ID, "count-pending").text == "4"
    assert browser.find_element(By.ID, "count-ready").text == "1"
    _shot(browser, "overview")

    browser.get(url + "/load")
    # the chart library drew the charts (a canvas each), loaded from the package itself
    assert len(browser.find_elements(By.CSS_SELECTOR, ".chart canvas")) == 2
    _shot(browser, "load")

    browser.get(url + "/failures")
    _shot(browser, "failures")
    browser.find_element(By.XPATH, "//button[text()='Retry now']").click()
    assert browser.find_element(By.ID, "state").text == "pending"
    assert store.get("f1~retry1").state is TaskState.PENDING
    _shot(browser, "task")

    browser.get(url + "/schedules")
    _shot(browser, "schedules")
    browser.find_element(By.XPATH, "//button[text()='Pause']").click()
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
