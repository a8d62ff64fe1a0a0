"""The statements of a run on PostgreSQL: promoting due tasks, claiming READY tasks and storing
how runs ended.

A worker's round trips are what a PostgreSQL store's throughput rests on, so each step here is
as few statements as its guarantees allow:

* :func:`claim_next`: one ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)`` takes a batch,
  each row swapped on the version it read, autocommitted: one round trip, no ``BEGIN`` and
  ``COMMIT`` around it, and no row lock held while the client reads the result. A task whose
  function turns out not to import in this process is handed back READY at once, as it was.
* :func:`finish_many`: one ``UPDATE ... FROM json_array_elements(...)`` stores every outcome
  of a group that ends in the same state with the same changed columns (the common case: a group
  of successes is one statement), each row a compare-and-swap: it changes only while RUNNING
  under the finishing owner, and its version moves on. A row that does not match (its lease was
  lost, it was reaped) is reported as ``None``. Then one ``DELETE FROM deps ... RETURNING``
  takes the dependency edges of the tasks that ended; only when there are some does the shared
  policy (:func:`timewheel.stores.policy.settle`) read and settle the dependents, in the same
  transaction. The ``DELETE`` is a statement of its own on purpose: in READ COMMITTED it reads
  a snapshot taken after the ``UPDATE`` holds the rows, so an edge whose inserter held an ended
  task ``FOR SHARE`` while it was being finished is seen and followed.

Rows are read and written through the SQLite store's column tables
(:mod:`timewheel.stores.sqlite.codec`), in the column order of ``TASKS.names``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from timewheel.stores.base import Changed, Finish, Promoted
from timewheel.stores.postgres.schema import COLUMN_TYPES, SERVER_NOW
from timewheel.stores.sqlite.codec import TASKS, Row, from_us
from timewheel.task import TERMINAL_STATES, TaskState, check_transition

__all__ = [
    "CLAIM",
    "HAND_BACK",
    "PENDING_AMONG",
    "PROMOTES",
    "RETURNING",
    "Settle",
    "check_finishes",
    "claim_next",
    "finish_many",
    "group_statement",
]

#: the columns of a changed row, read back in ``TASKS.names`` order (the table is aliased ``t``)
RETURNING = " RETURNING " + ", ".join(f"t.{c}" for c in TASKS.names)

CLAIM = (
    "WITH batch AS (SELECT id, version, started FROM tasks WHERE state = 'ready'{where} "
    "ORDER BY priority DESC, due LIMIT %s FOR UPDATE SKIP LOCKED) "
    "UPDATE tasks t SET state = 'running', version = t.version + 1, attempts = t.attempts + 1, "
    "lease_owner = %s, lease_expires = %s, started = %s, updated = %s FROM batch "
    "WHERE t.id = batch.id AND t.version = batch.version" + RETURNING + ", batch.started"
)
"""The batched claim: one statement picks the batch (rows other workers hold are skipped, not
waited for) and swaps each row on the version it read. Each row comes back with the start of
its previous run last (what a hand-back restores, :data:`HAND_BACK`)."""

HAND_BACK = (
    "UPDATE tasks t SET state = 'ready', version = t.version + 1, attempts = t.attempts - 1, "
    "lease_owner = NULL, lease_expires = NULL, started = b.started, updated = %s "
    "FROM unnest(%s::text[], %s::bigint[]) AS b(id, started) "
    "WHERE t.id = b.id AND t.state = 'running' AND t.lease_owner = %s"
)
"""Claimed tasks given back unstarted: READY again as before the claim (their run count and the
start of their previous run restored), under a new version."""

# promotion: the server's time is returned with the moved rows (a row of NULLs when none moved),
# and READY work is announced (once per transaction) when some moved; on the server's clock
# ({guard}) a task not yet due by the server is left PENDING. The commit does not wait for its
# WAL to reach disk: a promotion a crash loses leaves due tasks PENDING, promoted again by the
# next refill, and any claim of a promoted task commits after it, flushing it to disk first.
_PROMOTE = (
    f"WITH clock AS (SELECT {SERVER_NOW} AS now_us, "
    "set_config('synchronous_commit', 'off', true) AS async), "
    "moved AS (UPDATE tasks t SET state = 'ready', version = t.version + 1, updated = %s "
    "FROM clock WHERE t.id = ANY(%s) AND t.state = 'pending' AND t.unmet = 0 AND t.due <= %s"
    "{guard}{returning}) "
    "SELECT clock.now_us, (SELECT pg_notify(%s, %s) FROM (SELECT 1 FROM moved LIMIT 1) one), "
    "moved.* FROM clock LEFT JOIN moved ON true"
)
# promote_keys returns these columns of the moved rows (id first, as for the full rows)
_RETURNING_KEYS = " RETURNING " + ", ".join(f"t.{c}" for c in Promoted._fields)
PROMOTES = {
    (server, keys): _PROMOTE.format(
        guard=" AND t.due <= clock.now_us" if server else "",
        returning=_RETURNING_KEYS if keys else RETURNING,
    ).encode()
    for server in (False, True)
    for keys in (False, True)
}
"""The promotion, by (compared with the server's clock too?, returning only the
:class:`~timewheel.stores.base.Promoted` keys?). Its parameters: the time of the update, the ids,
the time they must be due by, the channel and the READY payload. It returns the server's clock
first, then the moved rows (a row of ``NULL`` when none moved)."""

# One group of outcomes: the rows to change come as one JSON array of rows, each row an array of
# values in a fixed order (the id, the owner, the state it must still have, then the changed
# columns), read on the server with ->> and cast to each column's type. One json.dumps of the
# group's lists costs the client a fraction of a JSON object per row, and the server reads only
# the fields there are, not a record of every column. Each row names the state and the owner its
# task must still have; the state compared as a row's value, not a constant, keeps the planner on
# the primary key (one lookup per row) whatever its statistics say about how many rows are
# RUNNING, instead of a scan of the partial index of running tasks and a hash join.
_FINISH = (
    "UPDATE tasks t SET state = %s, version = t.version + 1, updated = %s, lease_owner = NULL, "
    "lease_expires = NULL{sets} FROM (SELECT e->>0 AS id, e->>1 AS lease_owner, e->>2 AS state"
    "{fields} FROM json_array_elements(%s::json) AS e) AS f "
    "WHERE t.id = f.id AND t.state = f.state AND t.lease_owner = f.lease_owner" + RETURNING
)
PENDING_AMONG = (
    "SELECT id, due, schedule_id FROM (SELECT id, due, schedule_id, state, unmet FROM tasks "
    "WHERE id = ANY(%s) OFFSET 0) t WHERE state = 'pending' AND unmet = 0 ORDER BY due, id"
)
"""Those of some ids still waiting to be promoted. The ids are looked up on the primary key
first (``OFFSET 0`` keeps the state test out of that lookup): tested in the same ``WHERE``, it
could send the planner along the partial index of every PENDING task instead."""
_TAKE_EDGES = "DELETE FROM deps WHERE upstream = ANY(%s) RETURNING upstream, downstream"

_ID = TASKS.position["id"]
_FUNC = TASKS.position["func"]
_PRIORITY = TASKS.position["priority"]
_DUE = TASKS.position["due"]
_PREVIOUS_START = len(TASKS.names)
_RUN = TaskState.RUNNING
_READY = TaskState.READY

Conn = psycopg.Connection[tuple[Any, ...]]
Settle = Callable[[Conn, str, TaskState, int, list[str]], tuple[Any, ...]]
"""``settle(conn, upstream_id, state, now_us, downstream_ids)``: the store's settling of the
dependents of an ended task whose edges (*downstream_ids*) were already taken."""


def claim_next(
    conn: Conn,
    *,
    owner: str,
    lease_us: int,
    now_us: int,
    limit: int,
    queues: Sequence[str] | None,
    unclaimable: list[str],
    claimable: Callable[[str], bool],
) -> tuple[list[Row], bool]:
    """Claim up to *limit* READY rows on an autocommitted *conn* (one statement, one round
    trip). *unclaimable* names the functions known not to import here, which the claim skips;
    a row calling one found now (*claimable* false) is handed back at once (:data:`HAND_BACK`).

    Returns the claimed rows, highest priority then earliest due first, and whether some were
    handed back (the caller announces them READY).
    """
    where, params = "", []
    if queues is not None:
        where += " AND queue = ANY(%s)"
        params.append(list(dict.fromkeys(queues)))
    if unclaimable:
        where += " AND func <> ALL(%s)"
        params.append(unclaimable)
    rows = conn.execute(
        CLAIM.format(where=where).encode(), (*params, limit, owner, lease_us, now_us, now_us)
    ).fetchall()
    bad = {f for f in {r[_FUNC] for r in rows} if not claimable(f)}
    if bad:
        back = [r for r in rows if r[_FUNC] in bad]
        conn.execute(
            HAND_BACK,
            (now_us, [r[_ID] for r in back], [r[_PREVIOUS_START] for r in back], owner),
        )
    kept = [r[:_PREVIOUS_START] for r in rows if r[_FUNC] not in bad]
    kept.sort(key=lambda r: (-r[_PRIORITY], r[_DUE]))
    return kept, bool(bad)


Prepared = tuple[Finish, TaskState, list[str], list[Any], dict[str, Any]]
"""A finish checked by :func:`check_finishes`: the finish, its state, the columns it changes,
its row for the statement (the id, the owner, the state it must have, the changed columns'
values), and its changes as a read gives them."""


def check_finishes(finishes: Sequence[Finish]) -> list[Prepared]:
    """Each finish with its state, the columns it changes, its row for the statement and its
    changes as a read gives them, checked before anything is written.

    Raises:
        TypeError: a finish sets the lease (finishing clears it) or a field no transition sets.
        InvalidTransitionError: a run cannot end in the state asked for.
    """
    prepared = []
    for f in finishes:
        if "lease_owner" in f.changes or "lease_expires" in f.changes:
            raise TypeError("finish clears the lease itself: do not pass lease_owner/lease_expires")
        state = TaskState(f.state)
        check_transition(f.task_id, _RUN, state)
        cols, vals, stored = TASKS.encode_changes(f.changes)
        prepared.append((f, state, cols, [f.task_id, f.owner, _RUN.value, *vals], stored))
    return prepared


@functools.cache
def group_statement(changed: tuple[str, ...], *, versions_only: bool = False) -> bytes:
    """The ``UPDATE`` that stores one group of :func:`finish_many`, whose finishes change the
    columns *changed*, returning every column of each row changed (only its id and version with
    *versions_only*); its parameters are the state, the update time and the JSON array of the
    group's rows (from :func:`check_finishes`). Made once per shape: a finisher stores groups of
    a few shapes over and over."""
    statement = _FINISH.format(
        sets="".join(f", {c} = f.{c}" for c in changed),
        fields="".join(
            f", e->>{k} AS {c}"
            if COLUMN_TYPES[c] == "text"
            else f", (e->>{k})::{COLUMN_TYPES[c]} AS {c}"
            for k, c in enumerate(changed, start=3)
        ),
    )
    if versions_only:
        statement = statement.replace(RETURNING, " RETURNING t.id, t.version")
    return statement.encode()


def finish_many(
    conn: Conn,
    prepared: Sequence[Prepared],
    now_us: int,
    settle: Settle,
) -> tuple[list[Changed | None], bool]:
    """Store *prepared* (from :func:`check_finishes`) in *conn*'s transaction: one statement per
    (state, changed columns), then the edges of what ended (see the module docstring).

    Returns one result per finish (``None``: the owner does not hold the task) and whether a
    task went back to READY (the caller announces it). A group whose finishes all carry the
    snapshot their owner claimed reads back only each row's id and version: its ended
    snapshots are the claimed ones with the finish's changes (see :class:`Finish`).
    """
    groups: dict[tuple[TaskState, tuple[str, ...]], list[int]] = {}
    for k, (_, state, cols, _, _) in enumerate(prepared):
        groups.setdefault((state, tuple(cols)), []).append(k)
    rows: dict[int, Row] = {}
    versions: dict[int, int] = {}  # the finishes built from their claimed snapshots
    seen: set[str] = set()
    for (state, changed), group in groups.items():
        # a task finished twice in one call: the first finish counts, the later ones find it
        # no longer RUNNING, as they would one after the other
        members = []
        for k in group:
            if prepared[k][0].task_id not in seen:
                seen.add(prepared[k][0].task_id)
                members.append(k)
        params = (state.value, now_us, json.dumps([prepared[k][3] for k in members]))
        if all(prepared[k][0].claimed is not None for k in members):
            # no row read back: the decoding of each (its arguments' JSON among them) is the
            # finisher's largest cost per task in benchmarks/bench_postgres.py's end to end
            got = conn.execute(group_statement(changed, versions_only=True), params).fetchall()
            version_of: dict[str, int] = {str(r[0]): int(r[1]) for r in got}
            for k in members:
                version = version_of.get(prepared[k][0].task_id)
                if version is not None:
                    versions[k] = version
            continue
        got = conn.execute(group_statement(changed), params).fetchall()
        by_id = {r[_ID]: r for r in got}
        for k in members:
            row = by_id.get(prepared[k][0].task_id)
            if row is not None:
                rows[k] = row
    ended = [
        prepared[k][0].task_id for k in (*rows, *versions) if prepared[k][1] in TERMINAL_STATES
    ]
    edges: dict[str, list[str]] = {}
    if ended:
        for up, down in conn.execute(_TAKE_EDGES, (ended,)):
            edges.setdefault(up, []).append(down)
    out: list[Changed | None] = []
    released = False
    updated = from_us(now_us)
    for k, (f, state, _, _, stored) in enumerate(prepared):
        row = rows.get(k)
        if row is not None:
            task = TASKS.decode(row)
        elif k in versions and f.claimed is not None:
            task = f.claimed.evolve(
                **stored,
                state=state,
                version=versions[k],
                updated=updated,
                lease_owner=None,
                lease_expires=None,
            )
        else:
            out.append(None)
            continue
        released = released or state is _READY
        downs = edges.pop(f.task_id, None)
        deps = settle(conn, f.task_id, state, now_us, downs) if downs else ()
        out.append(Changed(task, deps))
    return out, released
