"""A new task in one autocommitted statement: the common insert in one round trip.

:meth:`PostgresStore.insert <timewheel.stores.postgres.store.PostgresStore.insert>` of a task
without upstream tasks first runs :data:`INSERT_NEW` on a connection in autocommit mode: an
``INSERT ... ON CONFLICT (id) DO NOTHING`` that also returns the row already holding the id, if
there is one. That one statement decides, and commits, what needs no transaction:

* the id is free: the task is inserted (PENDING, version 0), and the row trigger announces it to
  listening hosts when it is due soon, as any insert;
* a task holds the id: :func:`~timewheel.stores.policy.keep_existing` decides on its state, so
  ``"error"`` raises and ``"keep"`` returns it, as in the transaction.

What it cannot decide is left to the store's transaction (:func:`insert_new` returns ``None``):
``"replace"`` of an existing task (the old row and its edges go, the version moves past the old
one), and an id taken by a transaction that committed after the statement's snapshot was taken
(the insert saw the conflict, the statement cannot read the row). A task with upstream tasks is
always inserted by the transaction, which reads their states under ``FOR SHARE``.
"""

from __future__ import annotations

from typing import Any

from timewheel.stores import policy
from timewheel.stores.base import Changed, OnConflict
from timewheel.stores.postgres.connections import Conn
from timewheel.stores.sqlite.codec import TASKS
from timewheel.task import TaskState

__all__ = ["INSERT_NEW", "insert_new"]

_ID = TASKS.position["id"]
_STATE = TASKS.position["state"]

# A data-modifying CTE runs to completion whether or not it is read, and the outer SELECT reads
# the statement's snapshot: it sees a row that held the id before the statement began, never
# the row the CTE inserts. So the first column says whether the row went in, and the others are
# the conflicting row (NULLs when it went in, or when the conflict was with a row committed
# after the snapshot).
INSERT_NEW = (
    f"WITH ins AS (INSERT INTO tasks ({', '.join(TASKS.names)}) "
    f"VALUES ({', '.join(['%s'] * len(TASKS.names))}) ON CONFLICT (id) DO NOTHING RETURNING 1) "
    f"SELECT EXISTS (SELECT 1 FROM ins), {', '.join(f't.{c}' for c in TASKS.names)} "
    "FROM (VALUES (1)) AS one LEFT JOIN tasks t ON t.id = %s"
).encode()
"""The single statement; its parameters are the encoded row, then the id again."""


def insert_new(conn: Conn, row: list[Any], on_conflict: OnConflict) -> Changed | None:
    """Run :data:`INSERT_NEW` for *row* (a task as :func:`~timewheel.stores.policy.as_inserted`
    leaves it, encoded) on *conn*, in autocommit mode; the change, or ``None`` when the store's
    transaction must decide.

    Raises:
        DuplicateKeyError: ``on_conflict="error"`` and a task holds the id.
        VersionConflictError: ``"replace"`` of a RUNNING task.
    """
    got = conn.execute(INSERT_NEW, (*row, row[_ID])).fetchone()
    if got is None:  # the outer SELECT always returns its one row
        return None
    if got[0]:
        return Changed(TASKS.decode(tuple(row)))
    old = got[1:]
    if old[_ID] is None:
        return None
    if policy.keep_existing(old[_ID], TaskState(old[_STATE]), on_conflict):
        return Changed(TASKS.decode(old))
    return None
