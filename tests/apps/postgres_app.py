"""Task functions and process entry points for the PostgreSQL store's multi-process tests."""

from __future__ import annotations

import os
import time

import timewheel as tw
from timewheel.stores.postgres import PostgresStore


def append(path: str, line: str) -> None:
    """Append one line to *path* with a single ``write()`` (atomic for a short line)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def slow(tag: str, path: str, pause: float) -> str:
    """Log ``S tag pid``, work for *pause* seconds, log ``F tag pid``."""
    append(path, f"S {tag} {os.getpid()}")
    time.sleep(pause)
    append(path, f"F {tag} {os.getpid()}")
    return tag


def claim_all(dsn: str, schema: str, owner: str, batch: int) -> list[str]:
    """Claim READY tasks in batches until none is left; the ids claimed (a process's share)."""
    store = PostgresStore(dsn, schema=schema, create=False, pool_size=2)
    got: list[str] = []
    try:
        while True:
            now = time.time()
            tasks = store.claim_next(owner=owner, lease_expires=now + 600, now=now, limit=batch)
            if not tasks:
                return got
            got.extend(t.id for t in tasks)
    finally:
        store.close()


def serve(dsn: str, schema: str, lease: float) -> None:
    """Run a scheduler with workers on the store until the process is killed."""
    store = PostgresStore(dsn, schema=schema, create=False)
    with tw.Scheduler(
        store=store, lease=lease, poll_interval=0.2, allow=["tests.apps"], max_lease_recoveries=3
    ):
        while True:
            time.sleep(1)


def stamp(dsn: str, path: str, tag: str, pause: float = 0.0) -> str:
    """Log ``S tag due server_now pid`` at the start, where *server_now* is read from the
    server's clock; work for *pause* seconds; log ``F tag pid``."""
    import psycopg

    task = tw.current_task()
    assert task is not None
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    append(path, f"S {tag} {task.due!r} {float(row[0])!r} {os.getpid()}")
    time.sleep(pause)
    append(path, f"F {tag} {os.getpid()}")
    return tag


def skewed_host(dsn: str, schema: str, shift: float, lease: float, ready_path: str) -> None:
    """A "host" whose clock is *shift* seconds off: a scheduler with workers on the store, run
    until the process is killed; writes *ready_path* once it listens."""
    from timewheel.clock import ShiftedClock, SystemClock

    store = PostgresStore(dsn, schema=schema, create=False)
    with tw.Scheduler(
        store=store,
        clock=ShiftedClock(SystemClock(), shift),
        lease=lease,
        poll_interval=0.5,
        allow=["tests.apps"],
    ):
        store.listener().wait_connected(30)
        append(ready_path, f"{os.getpid()}")
        while True:
            time.sleep(1)


def beat(dsn: str, path: str) -> None:
    """Log ``S instance_id slot server_now pid`` for one run of a recurring schedule, where
    *server_now* is read from the server's clock."""
    import psycopg

    task = tw.current_task()
    assert task is not None
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    append(path, f"S {task.id} {task.due!r} {float(row[0])!r} {os.getpid()}")


def beating_host(dsn: str, schema: str, shift: float, path: str, ready_path: str) -> None:
    """A "host" whose clock is *shift* seconds off that carries the every-second schedule
    ``beat``, as every process of an application registers its schedules at start; runs until
    the process is killed and writes *ready_path* once it listens."""
    from timewheel.clock import ShiftedClock, SystemClock

    store = PostgresStore(dsn, schema=schema, create=False)
    with tw.Scheduler(
        store=store,
        clock=ShiftedClock(SystemClock(), shift),
        poll_interval=0.5,
        allow=["tests.apps"],
    ) as sched:
        sched.schedule(beat, dsn, path, every=1, id="beat", misfire="run_all")
        store.listener().wait_connected(30)
        append(ready_path, f"{os.getpid()}")
        while True:
            time.sleep(1)
