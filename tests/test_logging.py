"""Failures are visible without a listener: what the ``timewheel`` loggers say, at which level,
with the task's id, function and attempt in the message and in ``extra``."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timezone

import pytest

import timewheel as tw
from timewheel.testing import FakeClock

START = datetime(2026, 4, 1, tzinfo=timezone.utc)


def boom() -> None:
    raise ValueError("card declined")


def task_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("timewheel") and hasattr(r, "task_id")]


def test_a_retried_attempt_warns_and_the_final_failure_is_an_error_with_the_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(START)
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        sched.schedule(boom, delay=1, id="pay", retry=tw.Retry(max_attempts=2, delay=10))
        with caplog.at_level(logging.INFO, logger="timewheel"):
            clock.advance(minutes=1)
    records = task_records(caplog)
    assert [(r.levelname, r.attempt) for r in records] == [("WARNING", 1), ("ERROR", 2)]  # type: ignore[attr-defined]
    retry, final = records
    for r in records:
        assert r.task_id == "pay"  # type: ignore[attr-defined]
        assert r.function == "tests.test_logging:boom"  # type: ignore[attr-defined]
        assert "'pay'" in r.getMessage()
        assert "tests.test_logging:boom" in r.getMessage()
    assert "card declined" in retry.getMessage()
    assert "retrying in 10 s" in retry.getMessage()
    assert "no attempt left" in final.getMessage()
    assert final.exc_info is not None
    assert final.exc_info[0] is ValueError


def test_a_final_timeout_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()

    def stuck() -> None:
        release.wait(30)

    with (
        caplog.at_level(logging.INFO, logger="timewheel"),
        tw.Scheduler(dispatcher=tw.ThreadPoolDispatcher(workers=1)) as sched,
    ):
        job = sched.schedule(stuck, delay=0, id="stuck", timeout=0.05)
        with pytest.raises(TimeoutError, match=r"timed out after 0\.05 s"):
            job.result(timeout=30)
        release.set()
    (record,) = [r for r in task_records(caplog) if r.levelname == "ERROR"]
    assert "timed out, no attempt left" in record.getMessage()


def test_a_skipped_misfire_is_info(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(START)
    ran: list[float] = []
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        sched.schedule(ran.append, 1.0, every=60, id="tick", misfire="skip", misfire_grace=1)
        with caplog.at_level(logging.INFO, logger="timewheel"):
            # a stalled trigger: it fires 30 s after the latest slot, past the 1 s grace
            sched.runtime.trigger.fire(clock.time() + 630)
    skipped = [r for r in task_records(caplog) if "skipped" in r.getMessage()]
    assert skipped
    assert all(r.levelname == "INFO" for r in skipped)


def test_an_application_without_logging_config_sees_final_failures_on_stderr() -> None:
    program = textwrap.dedent(
        """
        import timewheel as tw

        def boom():
            raise ValueError("card declined")

        with tw.Scheduler() as sched:
            job = sched.schedule(boom, delay=0)
            try:
                job.result(timeout=30)
            except ValueError:
                pass
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert "no attempt left: ValueError: card declined" in proc.stderr
    assert "Traceback" in proc.stderr


def test_a_heartbeat_while_an_outcome_is_stored_reports_no_lost_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The false alarm seen under load with fast retries: a heartbeat that ran after the worker
    stored a retry but before it stopped tracking the task found it no longer RUNNING and warned
    of a lost lease. Listeners run in the worker right after the store step: beat there."""
    attempts: list[int] = []

    def flaky() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("again")

    pool = tw.ThreadPoolDispatcher(workers=1)
    with tw.Scheduler(dispatcher=pool) as sched:
        sched.add_listener(lambda e: pool.beat(), "retried", "succeeded")
        with caplog.at_level(logging.WARNING, logger="timewheel"):
            job = sched.schedule(flaky, delay=0, retry=tw.Retry(max_attempts=3, delay=0))
            job.result(timeout=30)
    assert len(attempts) == 3
    assert not [r for r in caplog.records if "was lost" in r.getMessage()]
