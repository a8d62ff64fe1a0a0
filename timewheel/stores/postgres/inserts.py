"""A new task in one autocommitted statement: the common insert in one round trip.

:meth:`PostgresStore.insert <timewheel.stores.postgres.store.PostgresStore.insert>` of a task
without upstream tasks first runs :data:`INSERT_NEW`, an ``INSERT ... ON CONFLICT (id) DO
NOTHING``, on a connection in autocommit mode. When the id is free, that one statement inserts
the task (PENDING, version 0) and commits it; the row trigger announces it to listening hosts
when it is due soon, as for any insert.

When a task holds the id, a second statement reads it and
:func:`~timewheel.stores.policy.keep_existing` decides on its state: ``"error"`` raises and
``"keep"`` returns it, as the store's transaction would. What neither statement can do is left to
that transaction (:func:`insert_new` returns ``None``): ``"replace"`` of an existing task (the old
row and its edges go, the version moves past the old one), and an id whose task was deleted
between the two statements. A task with upstream tasks is always inserted by the transaction,
which reads their states under ``FOR SHARE``.
"""

from __future__ import annotations

from typing import Any

from timewheel.stores import policy
from timewheel.stores.base import Changed, OnConflict
from timewheel.stores.postgres import schema
from timewheel.stores.postgres.connections import Conn
from timewheel.stores.sqlite.codec import TASKS
from timewheel.task import TaskState

__all__ = ["INSERT_NEW", "insert_new"]

_ID = TASKS.position["id"]
_STATE = TASKS.position["state"]

INSERT_NEW = schema.INSERT_TASK_IF_NEW.encode()
"""The single statement; its parameters are the encoded row. (Returning nothing, it costs the
server and the client less than a form that also returns a conflicting row.)"""

_EXISTING = (schema.SELECT_TASKS + " WHERE id = %s").encode()


def insert_new(conn: Conn, row: list[Any], on_conflict: OnConflict) -> Changed | None:
    """Insert *row* (a task as :func:`~timewheel.stores.policy.as_inserted` leaves it, encoded)
    on *conn*, in autocommit mode; the change, or ``None`` when the store's transaction must
    decide.

    Raises:
        DuplicateKeyError: ``on_conflict="error"`` and a task holds the id.
        VersionConflictError: ``"replace"`` of a RUNNING task.
    """
    if conn.execute(INSERT_NEW, row).rowcount == 1:
        return Changed(TASKS.decode(tuple(row)))
    old = conn.execute(_EXISTING, (row[_ID],)).fetchone()
    if old is None:
        return None
    if policy.keep_existing(old[_ID], TaskState(old[_STATE]), on_conflict):
        return Changed(TASKS.decode(old))
    return None
