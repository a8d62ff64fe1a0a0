"""A new task in one autocommitted statement: the common insert in one round trip; and the
statements that insert a task and announce it to listening hosts.

:meth:`PostgresStore.insert <timewheel.stores.postgres.store.PostgresStore.insert>` of a task
without upstream tasks first runs :data:`INSERT_NEW`, an ``INSERT ... ON CONFLICT (id) DO
NOTHING``, on a connection in autocommit mode. When the id is free, that one statement inserts
the task (PENDING, version 0), announces it to listening hosts when it is due soon (see
:func:`insert_row`) and commits both.

When a task holds the id, a second statement reads it and
:func:`~timewheel.stores.policy.keep_existing` decides on its state: ``"error"`` raises and
``"keep"`` returns it, as the store's transaction would. What neither statement can do is left to
that transaction (:func:`insert_new` returns ``None``): ``"replace"`` of an existing task (the old
row and its edges go, the version moves past the old one), and an id whose task was deleted
between the two statements. A task with upstream tasks is always inserted by the transaction,
which reads their states under ``FOR SHARE``.

The store's connections set ``timewheel.quiet``, so the schema's row trigger, which announces
rows that others insert, lets the store's rows pass: the store's statements announce what they
insert themselves, in the statement that inserts it (a data-modifying ``WITH``), which costs the
server less than the trigger's function and its queued event. The statement decides on the
server's clock whether the row is due soon enough to announce, as the trigger does.
"""

from __future__ import annotations

from typing import Any

from timewheel.stores import policy
from timewheel.stores.base import Changed, OnConflict
from timewheel.stores.postgres import schema
from timewheel.stores.postgres.connections import Conn
from timewheel.stores.postgres.notify import ready_payload, task_payload
from timewheel.stores.sqlite.codec import TASKS
from timewheel.task import TaskState

__all__ = ["INSERT_ANNOUNCED", "INSERT_NEW", "announcement", "insert_new", "insert_row"]

_ID = TASKS.position["id"]
_DUE = TASKS.position["due"]
_STATE = TASKS.position["state"]
_UNMET = TASKS.position["unmet"]
_SCHEDULE_ID = TASKS.position["schedule_id"]

# the inserted row's announcement: always (READY work), or when it is due within NOTIFY_WITHIN
# of the server's clock; one row returned per inserted row (none when an existing id is kept)
_ANNOUNCE = (
    " RETURNING due) SELECT CASE WHEN %s OR due < "
    f"{schema.SERVER_NOW} + {round(schema.NOTIFY_WITHIN * 1_000_000)} "
    "THEN pg_notify(%s, %s) IS NULL END FROM ins"
)

INSERT_NEW = ("WITH ins AS (" + schema.INSERT_TASK_IF_NEW + _ANNOUNCE).encode()
"""The single statement; its parameters are the encoded row and its :func:`announcement`. (It
returns a row only when it inserted one: a form that also returned a conflicting row cost the
server and the client more.)"""

INSERT_ANNOUNCED = ("WITH ins AS (" + schema.INSERT_TASK + _ANNOUNCE).encode()
"""One encoded task row and its :func:`announcement`."""

_INSERT = schema.INSERT_TASK.encode()
_EXISTING = (schema.SELECT_TASKS + " WHERE id = %s").encode()


def announcement(row: list[Any], channel: str, origin: str) -> list[Any] | None:
    """The parameters that announce the encoded *row* on *channel* as written by the store
    whose token is *origin* (``always``, the channel, the payload), or ``None`` when the row is
    not announced: it waits on upstream tasks or is not runnable (ended, or inserted RUNNING).
    """
    if row[_UNMET]:
        return None
    state = row[_STATE]
    if state == "ready":
        return [True, channel, ready_payload(origin)]
    if state == "pending":
        return [False, channel, task_payload(origin, row[_DUE], row[_SCHEDULE_ID], row[_ID])]
    return None


def insert_row(conn: Conn, row: list[Any], channel: str, origin: str) -> None:
    """Insert the encoded *row* on *conn* (a plain ``INSERT``: a task holding its id raises),
    announcing it as :func:`announcement` says."""
    note = announcement(row, channel, origin)
    if note is None:
        conn.execute(_INSERT, row)
    else:
        conn.execute(INSERT_ANNOUNCED, [*row, *note])


def insert_new(
    conn: Conn, row: list[Any], on_conflict: OnConflict, channel: str, origin: str
) -> Changed | None:
    """Insert *row* (a task as :func:`~timewheel.stores.policy.as_inserted` leaves it, encoded)
    on *conn*, in autocommit mode, announced on *channel* as written by *origin*; the change, or
    ``None`` when the store's transaction must decide.

    Raises:
        DuplicateKeyError: ``on_conflict="error"`` and a task holds the id.
        VersionConflictError: ``"replace"`` of a RUNNING task.
    """
    note = announcement(row, channel, origin)
    if note is None:
        return None  # (not the case of a new task without upstream tasks)
    if conn.execute(INSERT_NEW, [*row, *note]).rowcount == 1:
        return Changed(TASKS.decode(tuple(row)))
    old = conn.execute(_EXISTING, (row[_ID],)).fetchone()
    if old is None:
        return None
    if policy.keep_existing(old[_ID], TaskState(old[_STATE]), on_conflict):
        return Changed(TASKS.decode(old))
    return None
