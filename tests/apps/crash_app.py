"""Task functions and process entry points for the crash and restart tests.

Everything here is importable by name (durable stores keep ``module:qualname``) and writes one
line per event with ``O_APPEND`` (a short line written by one ``write()`` call is atomic), so
processes that are SIGKILLed at any moment leave whole lines or nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import timewheel as tw
from timewheel.dispatch import NullDispatcher
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task

DB_ENV = "TIMEWHEEL_CRASH_DB"
LOG_ENV = "TIMEWHEEL_CRASH_LOG"
LEASE_ENV = "TIMEWHEEL_CRASH_LEASE"


def append(path: str, line: str) -> None:
    """Append one line to *path* with a single ``write()`` on an ``O_APPEND`` descriptor."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def record(tag: str, path: str) -> str:
    """Append ``R tag pid`` to *path* (one line per run)."""
    append(path, f"R {tag} {os.getpid()}")
    return tag


def add(a: int, b: int) -> int:
    return a + b


def boom(message: str) -> None:
    raise ValueError(message)


def step(tag: str, path: str, ok: bool, pause: float) -> str:
    """A fan-in node: log ``S tag pid``, work for *pause* seconds, log ``F tag pid``; fail
    (after logging ``F``) when not *ok*."""
    append(path, f"S {tag} {os.getpid()}")
    time.sleep(pause)
    append(path, f"F {tag} {os.getpid()}")
    if not ok:
        raise RuntimeError(f"{tag} failed on purpose")
    return tag


# -- recurring series used by the kill test ----------------------------------------------------
SERIES = {"rec-a": 0.05, "rec-b": 0.11, "rec-c": 0.23}
"""Schedule id -> interval (seconds) of the recurring series in the kill test."""


def register_series(sched: tw.Scheduler, runs: str) -> None:
    """Register the kill test's recurring series (identical on every start: the series is kept)."""
    for sid, every in SERIES.items():
        sched.schedule(record, sid, runs, every=every, id=sid)


def start_logger(path: str) -> Callable[[tw.Event], None]:
    """A ``started`` listener appending ``S task_id attempts pid`` (after the claim, before the
    function runs)."""

    def on_start(ev: tw.Event) -> None:
        t: Task = ev.task
        append(path, f"S {t.id} {t.attempts} {os.getpid()}")

    return on_start


def victim(db: str, runs: str, starts: str, inline: bool, lease: float) -> None:
    """A scheduler process that is SIGKILLed at a random moment by the kill test.

    With *inline* it triggers and runs tasks in this thread (``run_pending`` in a loop);
    otherwise its trigger loop only moves due tasks to READY (an idle dispatcher).
    """
    store = SQLiteStore(db, durability="fast", busy_timeout=30)
    dispatcher: tw.Dispatcher = tw.InlineDispatcher() if inline else NullDispatcher()
    sched = tw.Scheduler(
        store=store,
        dispatcher=dispatcher,
        lease=lease,
        max_lease_recoveries=1_000_000,
        allow=["tests.apps"],
        poll_interval=0.05,
        horizon=1.0,  # a short horizon: start-up loads a slice, later refills load the rest
    )
    sched.add_listener(start_logger(starts), "started")
    register_series(sched, runs)
    sched.start()
    while True:  # until SIGKILL
        if inline:
            sched.run_pending()
        time.sleep(0.001)


def zygote(conn: Connection) -> None:
    """Fork victims on request: ``("fork", victim_args)`` answers the child's pid, ``("reap",
    pid)`` its wait status, ``None`` ends the loop.

    A clean, single-threaded process that has imported timewheel once: a fork from it starts a
    victim in about a millisecond, where a fresh interpreter (or a fork server under pytest, which
    re-imports the main module in each child) takes a hundred times longer.
    """
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, payload = msg
        if kind == "fork":
            pid = os.fork()
            if pid == 0:  # the victim: runs until SIGKILLed
                try:
                    victim(*payload)
                finally:
                    os._exit(1)
            conn.send(pid)
        else:
            conn.send(os.waitpid(payload, 0)[1])


@tw.worker_factory
def make_worker() -> tw.Scheduler:
    """For ``python -m timewheel worker tests.apps.crash_app:make_worker``: a scheduler on the
    store named by ``$TIMEWHEEL_CRASH_DB`` with a short lease (``$TIMEWHEEL_CRASH_LEASE``), thread
    workers, and a ``started`` listener logging to ``$TIMEWHEEL_CRASH_LOG``."""
    lease = float(os.environ.get(LEASE_ENV, "0.5"))
    sched = tw.Scheduler(
        store=SQLiteStore(os.environ[DB_ENV], durability="fast", busy_timeout=30),
        dispatcher=tw.ThreadPoolDispatcher(workers=4),
        lease=lease,
        max_lease_recoveries=1_000_000,
        allow=["tests.apps"],
        poll_interval=0.05,
    )
    log = os.environ.get(LOG_ENV)
    if log:
        sched.add_listener(start_logger(log), "started")
    return sched
