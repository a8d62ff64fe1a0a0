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
