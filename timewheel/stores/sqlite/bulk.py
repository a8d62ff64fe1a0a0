"""Batches of tasks in one SQLite transaction: reading which ids of a batch exist, and writing a
batch of new tasks with one ``executemany``.

The functions take a connection inside the store's transaction (``BEGIN IMMEDIATE``); the store's
``insert_many`` and ``insert_new`` hold it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from timewheel.stores import policy
from timewheel.stores.sqlite.codec import TASKS
from timewheel.task import TaskState

__all__ = ["CHUNK", "chunks", "first_existing", "insert_rows", "marks", "states"]

CHUNK = 500
"""Ids per ``IN (...)`` list, well under ``SQLITE_MAX_VARIABLE_NUMBER``."""

_STATES = {s.value: s for s in TaskState}


def marks(n: int) -> str:
    """``?,?,...``: *n* parameter marks for an ``IN (...)`` list."""
    return ",".join("?" * n)


def chunks(seq: Sequence[str], n: int = CHUNK) -> Iterator[Sequence[str]]:
    """*seq* in slices of at most *n*."""
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def states(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, TaskState]:
    """The states of the tasks among *ids* that exist."""
    return {
        r[0]: _STATES[r[1]]
        for chunk in chunks(ids)
        for r in conn.execute(
            f"SELECT id, state FROM tasks WHERE id IN ({marks(len(chunk))})", tuple(chunk)
        )
    }


def first_existing(conn: sqlite3.Connection, ids: Sequence[str]) -> str:
    """An id among *ids* that exists (after a unique-key failure says one does)."""
    found: str = next(
        r[0]
        for chunk in chunks(ids)
        for r in conn.execute(
            f"SELECT id FROM tasks WHERE id IN ({marks(len(chunk))})", tuple(chunk)
        )
    )
    return found


def insert_rows(
    conn: sqlite3.Connection, rows: Sequence[Sequence[Any]], ids: Sequence[str]
) -> None:
    """Insert the rows of new tasks (*ids*, in the same order) with one ``executemany``.

    Raises:
        DuplicateKeyError: an id exists already (the primary key refused it); the caller's
            transaction rolls back, so nothing of the batch is stored.
    """
    conn.execute("SAVEPOINT new_rows")
    try:
        conn.executemany(TASKS.insert, rows)
    except sqlite3.IntegrityError:
        # the rows before the refused one are in: undo them, so the id found is one that
        # existed before the batch
        conn.execute("ROLLBACK TO new_rows")
        raise policy.existing_in_batch(first_existing(conn, ids), len(ids)) from None
    conn.execute("RELEASE new_rows")
