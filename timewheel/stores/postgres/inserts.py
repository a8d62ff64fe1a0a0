"""A new task in one autocommitted statement: the common insert in one round trip.

:meth:`PostgresStore.insert <timewheel.stores.postgres.store.PostgresStore.insert>` of a task
without upstream tasks first runs :data:`INSERT_NEW`, an ``INSERT ... ON CONFLICT (id) DO
NOTHING``, on a connection in autocommit mode. When the id is free, that one statement inserts
the task (PENDING, version 0) and commits it; the store then announces it to listening hosts
when it is due soon (:class:`~timewheel.stores.postgres.notify.Announcer`).

A task already due by the clock it was made on (:func:`~timewheel.stores.policy.ready_at_insert`)
goes in by :data:`INSERT_DUE_IF_NEW` instead: the same statement, whose state is READY when the
server's clock finds the task due too and PENDING otherwise (a host whose clock runs ahead never
stores READY work the server does not find due), returning the state it stored.

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
from timewheel.stores.postgres.prepared import Statement
from timewheel.stores.sqlite.codec import TASKS, read_back, to_us
from timewheel.task import Task, TaskState

__all__ = [
    "INSERT_DUE",
    "INSERT_DUE_IF_NEW",
    "INSERT_DUE_PREPARED",
    "INSERT_NEW",
    "INSERT_NEW_PREPARED",
    "insert_new",
    "pending_unless_due",
    "ready_if_due",
]

_ID = TASKS.position["id"]
_DUE = TASKS.position["due"]
_STATE = TASKS.position["state"]
_READY = TaskState.READY.value

INSERT_NEW = schema.INSERT_TASK_IF_NEW.encode()
"""The single statement; its parameters are the encoded row. (Returning nothing, it costs the
server and the client less than a form that also returns a conflicting row.)"""

_EXISTING = (schema.SELECT_TASKS + " WHERE id = %s").encode()

# the state's parameter is the row's due time: READY if the server's clock finds it due
_STATE_IF_DUE = f"CASE WHEN %s::bigint <= {schema.SERVER_NOW} THEN 'ready' ELSE 'pending' END"
_VALUES = ", ".join(_STATE_IF_DUE if name == "state" else "%s" for name in TASKS.names)
INSERT_DUE = f"INSERT INTO tasks ({schema.TASK_COLUMNS}) VALUES ({_VALUES}) RETURNING state"
"""One encoded row of a task already due by its own clock, READY when the server's clock finds
it due too, else PENDING; returns the state stored (see :func:`ready_if_due`)."""
INSERT_DUE_IF_NEW = INSERT_DUE.replace(" RETURNING", " ON CONFLICT (id) DO NOTHING RETURNING")
""":data:`INSERT_DUE`, unless a task holds the id (then no row, and no error)."""
INSERT_DUE_PREPARED = Statement("timewheel_insert_due", INSERT_DUE_IF_NEW)
""":data:`INSERT_DUE_IF_NEW`, as ``schedule()`` runs it: past psycopg's cursor layer (see
:mod:`~timewheel.stores.postgres.prepared`)."""
INSERT_NEW_PREPARED = Statement("timewheel_insert_new", schema.INSERT_TASK_IF_NEW)
""":data:`INSERT_NEW`, as ``schedule()`` runs it."""
_STATE_NAMES = {s.value.encode(): s.value for s in TaskState}


def ready_if_due(row: list[Any]) -> list[Any]:
    """The parameters of :data:`INSERT_DUE` for *row* (a task stored READY unless the server's
    clock finds it not yet due)."""
    params = list(row)
    params[_STATE] = row[_DUE]
    return params


def insert_new(
    conn: Conn, task: Task, row: list[Any], on_conflict: OnConflict
) -> tuple[Changed, bool] | None:
    """Insert *row* (*task*, as :func:`~timewheel.stores.policy.as_inserted` leaves it for a
    durable store, encoded; a READY row is stored READY only if the server finds it due) on
    *conn*, in autocommit mode; the change and whether *row* was inserted (*row* then holds the
    state stored), or ``None`` when the store's transaction must decide. The inserted task's
    snapshot is *task* as a read would give it (:func:`~timewheel.stores.sqlite.codec.read_back`),
    with the state the server stored.

    Raises:
        DuplicateKeyError: ``on_conflict="error"`` and a task holds the id.
        VersionConflictError: ``"replace"`` of a RUNNING task.
    """
    if row[_STATE] == _READY:
        result = INSERT_DUE_PREPARED.run(conn, ready_if_due(row))
        if result.ntuples:
            row[_STATE] = _STATE_NAMES[result.get_value(0, 0) or b""]
            return Changed(read_back(task, row)), True
    elif INSERT_NEW_PREPARED.run(conn, row).command_tuples == 1:
        return Changed(read_back(task, row)), True
    old = conn.execute(_EXISTING, (row[_ID],)).fetchone()
    if old is None:
        return None
    if policy.keep_existing(old[_ID], TaskState(old[_STATE]), on_conflict):
        return Changed(TASKS.decode(old)), False
    return None


def pending_unless_due(snapshots: list[Task], server_now: int) -> bool:
    """Put back to PENDING, in place, those of *snapshots* READY by their own clock that the
    server's (*server_now*, epoch microseconds) does not find due yet, as an insert leaves
    them; whether there were any."""
    changed = False
    for k, t in enumerate(snapshots):
        if t.state is TaskState.READY and to_us(t.due) > server_now:
            snapshots[k] = t.evolve(state=TaskState.PENDING)
            changed = True
    return changed
