"""An example WSGI application served by gunicorn's worker processes, each with a scheduler of its
own on one SQLite file (see ``docs/web.md`` and ``gunicorn_conf.py``).

Every worker registers the same recurring job; the store keeps one series, so it runs once per
slot. A task scheduled by any worker runs once, on whichever worker claims it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import timewheel as tw
from tests.apps import fork_app
from timewheel.stores import open_store

DB = os.environ.get("TIMEWHEEL_SITE_DB", "site.db")
LOG = os.environ.get("TIMEWHEEL_SITE_LOG", "site.log")

_lock = threading.Lock()
_scheduler: tw.Scheduler | None = None


def tick(log: str) -> None:
    """The recurring job: one line per run."""
    fork_app.record("tick", log)


def start() -> tw.Scheduler:
    """Start this worker's scheduler (gunicorn's ``post_fork`` hook calls it) and register the
    recurring job, as every worker does."""
    global _scheduler
    with _lock:
        if _scheduler is None:
            sched = tw.Scheduler(
                store=open_store(f"sqlite:///{DB}"), allow=["tests.apps", "tests.frameworks"]
            )
            sched.start()
            sched.schedule(tick, LOG, cron="* * * * * *", id="tick")  # every second
            fork_app.record("registered", LOG)
            _scheduler = sched
        return _scheduler


def stop() -> None:
    """Stop this worker's scheduler, letting running tasks finish (``worker_exit`` calls it)."""
    global _scheduler
    with _lock:
        sched, _scheduler = _scheduler, None
    if sched is not None:
        sched.shutdown(wait=True, timeout=10)


def app(
    environ: dict[str, Any], start_response: Callable[[str, list[tuple[str, str]]], object]
) -> Iterable[bytes]:
    """``POST /schedule/KEY`` schedules ``record(KEY)`` now and answers with the task id."""
    path = environ.get("PATH_INFO", "")
    if environ.get("REQUEST_METHOD") == "POST" and path.startswith("/schedule/"):
        key = path.removeprefix("/schedule/")
        job = start().schedule(fork_app.record, key, LOG, delay=0)
        body = json.dumps({"id": job.id, "pid": os.getpid()}).encode()
        start_response("202 Accepted", [("Content-Type", "application/json")])
        return [body]
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"not found"]
