"""``SQLiteStore``: the store's operations, each one SQL transaction on the file.

The file, its schema and the checks at open are in :mod:`~timewheel.stores.sqlite.schema`; rows
are encoded by :mod:`~timewheel.stores.sqlite.codec`; connections and transactions are managed by
:mod:`~timewheel.stores.sqlite.connections`; what an id conflict does and how dependencies settle
is the shared :mod:`~timewheel.stores.policy`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal

from timewheel import validate
from timewheel.errors import (
    InvalidScheduleError,
    StoreConfigError,
    StoreError,
    VersionConflictError,
)
from timewheel.stores import policy
from timewheel.stores.base import Changed, Finish, Lease, NewTasks, OnConflict, Promoted, Store
from timewheel.stores.sqlite import bulk, schema
from timewheel.stores.sqlite.codec import (
    SCHEDULES,
    TASKS,
    Row,
    claimed_fields,
    decode_dependents,
    from_us,
    new_rows,
    ready_ids,
    to_us,
    upstream_entry,
)
from timewheel.stores.sqlite.connections import (
    Connections,
    Durability,
    file_size,
    is_corrupt,
    parse_url,
    translate,
)
from timewheel.task import TERMINAL_STATES, ScheduleRecord, Task, TaskState, check_transition

__all__ = ["SQLiteStatistics", "SQLiteStore"]

log = logging.getLogger("timewheel.stores.sqlite")

_IDLE_CHECKPOINT_EVERY = 60.0  # seconds between idle wal_checkpoint(TRUNCATE) requests
_PRUNE_CHECKPOINT_WAIT = 0.05  # seconds prune's checkpoint waits for busy connections
_PRUNE_BATCH = 500  # tasks deleted per transaction; other writers get the lock in between

_P, _R, _RUN = TaskState.PENDING, TaskState.READY, TaskState.RUNNING
_HEARTBEAT = (
    "UPDATE tasks SET lease_expires = ?, version = version + 1, updated = ? "
    "WHERE id = ? AND state = 'running' AND lease_owner = ?"
)
"""One lease extended, if its owner still holds the RUNNING task: lease, now, id, owner."""

_STATES = {s.value: s for s in TaskState}

# row positions, from the one column table
_ID = TASKS.position["id"]
_FUNC = TASKS.position["func"]
_STATE = TASKS.position["state"]
_VERSION = TASKS.position["version"]
_ATTEMPTS = TASKS.position["attempts"]
_LEASE_OWNER = TASKS.position["lease_owner"]
_UPDATED = TASKS.position["updated"]
_ERROR = TASKS.position["error"]
_UNMET = TASKS.position["unmet"]
_SCHEDULE_VERSION = SCHEDULES.position["version"]

_SEL = TASKS.select
_SEL_ID = _SEL + " WHERE id = ?"
# The hot queries name their index: without ANALYZE statistics the planner may prefer tasks_state
# and sort; INDEXED BY makes the plan fixed (and fails loudly if the index cannot serve it).
_SEL_READY = _SEL + " INDEXED BY tasks_ready"
# one read for finish: the row and whether any task waits on it
_SEL_WITH_DEPS = (
    f"SELECT {', '.join(TASKS.names)}, EXISTS (SELECT 1 FROM deps WHERE upstream = tasks.id) "
    "FROM tasks WHERE id = ?"
)
_INS = TASKS.insert
_INS_IGNORE = _INS.replace("INSERT", "INSERT OR IGNORE", 1)
# promote's condition. The unary + keeps the planner on the primary key for the id list: on
# state and due it would take tasks_state and scan every task due, once per chunk (a herd's
# 100,000 heads in 200 chunks made that quadratic).
_PROMOTABLE = "AND +state = 'pending' AND +unmet = 0 AND +due <= ?"
# UPDATE ... RETURNING came with SQLite 3.35
_HAS_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)
_SSEL = SCHEDULES.select
# prune: one state's old tasks along its index, after a (due, rowid) cursor
_PRUNE_SELECT = (
    "SELECT due, rowid, id FROM tasks INDEXED BY tasks_state WHERE state = ? AND updated < ? "
    "AND (due, rowid) > (?, ?) ORDER BY due, rowid LIMIT ?"
)
_MIN_INT64 = -(2**63)
_SWEEP_START = (_MIN_INT64, _MIN_INT64)
# a bounded prune reads a window of rows per state, expired or not (the expiry is checked here):
# the index is by due time, not by when a task ended, so a filter on ``updated`` in SQL would read
# every kept row of the state whenever none has expired
_SWEEP_SELECT = (
    "SELECT due, rowid, id, updated FROM tasks INDEXED BY tasks_state WHERE state = ? "
    "AND (due, rowid) > (?, ?) ORDER BY due, rowid LIMIT ?"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SQLiteStatistics:
    """A snapshot of a store for ``timewheel inspect`` (see :meth:`SQLiteStore.statistics`)."""

    path: str
    schema_version: int
    size_bytes: int
    wal_bytes: int
    counts: Mapping[TaskState, int]
    schedules: int
    oldest_ready_age: float | None
    unresolvable: Mapping[str, int]


class SQLiteStore(Store):
    """Tasks and schedules in one SQLite file; every change is a compare-and-swap on ``version``.

    Args:
        path: the database file. Its directory must exist and be writable (WAL keeps
            ``<path>-wal`` and ``<path>-shm`` beside it).
        durability: ``"durable"`` (``synchronous=FULL``: a commit survives power loss) or
            ``"fast"`` (``synchronous=NORMAL``: a power loss may roll back the last commits; the
            file stays consistent, and a process crash loses nothing).
        busy_timeout: seconds a connection waits for another process's write lock before
            :class:`~timewheel.errors.StoreError`.
        create: create the file when it is missing (``False``: a missing file raises).
        read_only: open the file for reading only (SQLite's ``mode=ro``): every change raises
            :class:`~timewheel.errors.StoreError`; the file and its directory need not be
            writable. For tools that look inside a store (``timewheel inspect``).
        verify: run ``PRAGMA quick_check`` at open, so a damaged file is refused at once rather
            than at the first read of a damaged page. It reads the whole file (about 0.1 s per
            40 MB); ``False`` skips it.

    Raises:
        StoreConfigError: an option is malformed (an unknown durability, a negative timeout,
            ``":memory:"`` as the path).
        StoreCorruptError: the file is not an SQLite database, is damaged, or belongs to
            another application.
        SchemaVersionError: a newer timewheel wrote the file.
        StoreError: the file or its directory is read-only or missing, or WAL is not available.

    The file is left untouched by each of these errors. Thread-safe; safe to share across
    ``fork()`` (each process opens its own connections) and picklable for spawned processes
    (the copy reopens the path). Runtime complexity: single-task operations are O(log n);
    ``claim_next`` and ``promote`` are O(batch * log n) in one transaction. Implements
    :class:`~timewheel.stores.base.SupportsNewTasks` and
    :class:`~timewheel.stores.base.SupportsInspection`.
    """

    durable = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "durable",
        busy_timeout: float = 5.0,
        create: bool = True,
        read_only: bool = False,
        verify: bool = True,
    ) -> None:
        schema.check_sqlite_version()
        if durability not in ("durable", "fast"):
            raise StoreConfigError(f"durability must be 'durable' or 'fast' (got {durability!r})")
        try:
            timeout = validate.seconds(busy_timeout, "busy_timeout", minimum=0, timedelta_ok=False)
        except InvalidScheduleError as e:
            raise StoreConfigError(str(e)) from None
        for name, flag in (("create", create), ("read_only", read_only), ("verify", verify)):
            if not isinstance(flag, bool):
                raise StoreConfigError(f"{name} must be True or False (got {flag!r})")
        raw = os.fspath(path)
        if raw in ("", ":memory:") or raw.startswith("file:"):
            raise StoreConfigError(
                f"SQLiteStore needs a file path (got {raw!r}); for a store in memory use "
                "MemoryStore"
            )
        self.path = os.path.abspath(raw)
        self.durability: Durability = durability
        self.busy_timeout = timeout
        self.read_only = read_only
        self._verify = verify
        self._last_checkpoint = time.monotonic()
        # per state, where the bounded prune's sweep goes on (due, rowid): see prune()
        self._sweep: dict[str, tuple[int, int]] = {}
        self._claimable = policy.ClaimableRefs("SQLiteStore")
        conn, mode, immutable = schema.open_database(
            self.path,
            durability=durability,
            busy_timeout=timeout,
            create=create,
            read_only=read_only,
            verify=verify,
        )
        self._connections = Connections(
            self.path,
            mode=mode,
            durability=durability,
            busy_timeout=timeout,
            first=conn,
            immutable=immutable,
        )
        # bound once: every operation goes through one of these
        self._tx: Callable[[str], AbstractContextManager[sqlite3.Connection]] = (
            self._connections.transaction
        )
        self._read: Callable[..., list[Row]] = self._connections.read
        #: whether promote moves rows with ``UPDATE ... RETURNING`` (SQLite 3.35 and later)
        self.returning = _HAS_RETURNING

    # -- internals --------------------------------------------------------------------------------
    def _cas(
        self, conn: sqlite3.Connection, task_id: str, version: int, sets: str, vals: Sequence[Any]
    ) -> None:
        cur = conn.execute(
            f"UPDATE tasks SET {sets} WHERE id = ? AND version = ?", (*vals, task_id, version)
        )
        if cur.rowcount != 1:  # impossible under BEGIN IMMEDIATE; kept as a guard
            raise VersionConflictError(
                f"task {task_id!r} changed under a write transaction (expected version {version})"
            )

    def _settle(
        self, conn: sqlite3.Connection, up_id: str, up_state: TaskState, now_us: int
    ) -> tuple[Task, ...]:
        """Apply a terminal upstream's effect to its dependents, transitively, in *conn*'s tx."""

        def take_dependents(upstream_id: str) -> list[Task]:
            downs = [
                r[0]
                for r in conn.execute(
                    "SELECT downstream FROM deps WHERE upstream = ?", (upstream_id,)
                )
            ]
            if not downs:
                return []
            conn.execute("DELETE FROM deps WHERE upstream = ?", (upstream_id,))
            rows = (conn.execute(_SEL_ID, (d,)).fetchone() for d in downs)
            return [TASKS.decode(r) for r in rows if r is not None]

        def save(old: Task, new: Task) -> None:
            self._cas(
                conn,
                old.id,
                old.version,
                "state = ?, unmet = ?, error = ?, version = version + 1, updated = ?",
                (new.state.value, new.unmet, new.error, now_us),
            )

        return policy.settle(
            up_id, up_state, from_us(now_us), take_dependents=take_dependents, save=save
        )

    # -- tasks ------------------------------------------------------------------------------------
    def insert(self, task: Task, *, on_conflict: OnConflict = "error") -> Changed:
        policy.check_on_conflict(on_conflict)
        policy.check_task(task)
        with self._tx("inserting a task") as conn:
            return self._insert_in(conn, task, on_conflict)

    def _insert_in(self, conn: sqlite3.Connection, task: Task, on_conflict: OnConflict) -> Changed:
        """``insert`` inside *conn*'s write transaction."""
        row = TASKS.encode(policy.as_inserted(task))
        old = conn.execute(_SEL_ID, (task.id,)).fetchone()
        if old is not None and policy.keep_existing(task.id, _STATES[old[_STATE]], on_conflict):
            return Changed(TASKS.decode(old))

        def state_of(up_id: str) -> TaskState | None:
            r = conn.execute("SELECT state FROM tasks WHERE id = ?", (up_id,)).fetchone()
            return None if r is None else _STATES[r[0]]

        count = policy.count_dependencies(task, state_of)
        ready = count.state is TaskState.PENDING and policy.ready_at_insert(task, count.unmet)
        row[_STATE] = TaskState.READY.value if ready else count.state.value
        row[_UNMET] = count.unmet
        row[_ERROR] = count.error
        if old is not None:
            row[_VERSION] = old[_VERSION] + 1
            conn.execute("DELETE FROM deps WHERE downstream = ?", (task.id,))
            conn.execute("DELETE FROM tasks WHERE id = ?", (task.id,))
        conn.execute(_INS, row)
        if count.waits_on:
            conn.executemany(
                "INSERT OR IGNORE INTO deps (upstream, downstream) VALUES (?, ?)",
                [(u, task.id) for u in count.waits_on],
            )
        deps = (
            self._settle(conn, task.id, count.state, row[_UPDATED])
            if count.state in TERMINAL_STATES
            else ()
        )
        return Changed(TASKS.decode(tuple(row)), deps)

    def insert_many(
        self, tasks: Sequence[Task], *, on_conflict: OnConflict = "error"
    ) -> list[Changed]:
        policy.check_batch(tasks, on_conflict)
        if not tasks:
            return []
        if on_conflict == "error" and not any(t.after for t in tasks):
            # the fast case: new ids without dependencies; the unique key refuses an existing one
            plan = policy.plan_batch(tasks, on_conflict, {}, durable=True)
            rows = TASKS.encode_many(plan.bulk)
            with self._tx("inserting tasks") as conn:
                bulk.insert_rows(conn, rows, [t.id for t in tasks])
            return policy.batch_changes(tasks, plan, {})
        with self._tx("inserting tasks") as conn:
            existing = bulk.states(conn, [t.id for t in tasks])
            plan = policy.plan_batch(tasks, on_conflict, existing, durable=True)
            conn.executemany(_INS, TASKS.encode_many(plan.bulk))
            changed = {t.id: self._insert_in(conn, t, on_conflict) for t in plan.one_by_one}
        return policy.batch_changes(tasks, plan, changed)

    def insert_new(self, batch: NewTasks) -> Sequence[str]:
        """Insert a batch of fresh tasks (:class:`~timewheel.stores.base.SupportsNewTasks`):
        its rows built column by column (:func:`~timewheel.stores.sqlite.codec.new_rows`),
        one ``executemany`` in one transaction. Tasks already due are stored READY
        (:func:`~timewheel.stores.policy.ready_at_insert`); their ids are returned.

        Raises:
            DuplicateKeyError: an id exists already; nothing is inserted.
        """
        until = policy.ready_until(batch.template)
        until_us = None if until is None else to_us(until)
        rows = new_rows(batch, ready_until_us=until_us)
        if rows:
            with self._tx("inserting tasks") as conn:
                bulk.insert_rows(conn, rows, batch.ids)
        return ready_ids(batch, until_us)

    def get(self, task_id: str) -> Task:
        t = self.find(task_id)
        if t is None:
            raise policy.task_not_found(task_id, self.path)
        return t

    def find(self, task_id: str) -> Task | None:
        rows = self._read(_SEL_ID, (task_id,))
        return TASKS.decode(rows[0]) if rows else None

    def transition(
        self, task_id: str, *, expected_version: int, state: TaskState, now: float, **changes: Any
    ) -> Changed:
        state = TaskState(state)
        cols, vals, stored = TASKS.encode_changes(changes)
        now_us = to_us(now)
        with self._tx("changing a task's state") as conn:
            row = conn.execute(_SEL_ID, (task_id,)).fetchone()
            if row is None:
                raise policy.task_not_found(task_id, self.path)
            if row[_VERSION] != expected_version:
                raise policy.version_conflict(
                    task_id, row[_VERSION], _STATES[row[_STATE]], expected_version
                )
            check_transition(task_id, _STATES[row[_STATE]], state)
            sets = "state = ?, version = version + 1, updated = ?"
            if state is _RUN:
                sets += ", started = ?"  # a run starts: its start is recorded, as by claim
                vals = [now_us, *vals]
            sets += "".join(f", {c} = ?" for c in cols)
            self._cas(conn, task_id, expected_version, sets, (state.value, now_us, *vals))
            deps = self._settle(conn, task_id, state, now_us) if state in TERMINAL_STATES else ()
        # decoding happens after COMMIT: the write lock is held only for the SQL
        stored.update(state=state, version=expected_version + 1, updated=from_us(now_us))
        if state is _RUN:
            stored["started"] = from_us(now_us)
        return Changed(TASKS.decode(row, stored), deps)

    def promote(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Task]:
        """Move the given tasks PENDING -> READY (see :meth:`Store.promote`).

        One transaction: the tasks are moved a chunk at a time by one ``UPDATE ... WHERE id IN
        (...) AND state = 'pending' ... RETURNING`` each (SQLite 3.35 and later; before, a read
        of the chunk then a compare-and-swap on each ``version``), then the successors are
        inserted with one ``executemany``. The ids are looked up through the primary key, so a
        herd's chunk costs O(chunk * log n), not a scan of every task due. Runtime complexity:
        O((len(task_ids) + len(successors)) * log n).
        """
        decode = TASKS.decode
        return [decode(r) for r in self._promote(task_ids, now, successors, TASKS.names)]

    def promote_keys(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Promoted]:
        """:meth:`promote`, returning only the moved tasks' ids, versions and queues (see
        :class:`~timewheel.stores.base.SupportsPromoteKeys`): no row is decoded."""
        return [Promoted(*r) for r in self._promote(task_ids, now, successors, Promoted._fields)]

    def _promote(
        self,
        task_ids: Sequence[str],
        now: float,
        successors: Sequence[Task],
        columns: Sequence[str],
    ) -> list[Row]:
        """Promote; the moved rows' *columns* as changed, in *task_ids* order."""
        now_us = to_us(now)
        succ_rows = []
        for s in successors:
            policy.check_task(s)
            succ_rows.append(TASKS.encode(policy.as_inserted(s)))
        ids = list(dict.fromkeys(task_ids))
        if not ids and not succ_rows:
            return []
        moved: list[Row] = []
        move = self._move_returning if self.returning else self._move_checked
        with self._tx("promoting tasks") as conn:
            for chunk in bulk.chunks(ids):
                moved.extend(move(conn, chunk, now_us, columns))
            if succ_rows:
                conn.executemany(_INS_IGNORE, succ_rows)
        if len(moved) > 1:
            at = columns.index("id")
            order = {tid: i for i, tid in enumerate(ids)}
            moved.sort(key=lambda r: order[r[at]])
        return moved

    @staticmethod
    def _move_returning(
        conn: sqlite3.Connection, chunk: Sequence[str], now_us: int, columns: Sequence[str]
    ) -> list[Row]:
        """One chunk PENDING -> READY in one statement; the rows' *columns* as changed."""
        return conn.execute(
            f"UPDATE tasks SET state = 'ready', version = version + 1, updated = ? "
            f"WHERE id IN ({bulk.marks(len(chunk))}) {_PROMOTABLE} RETURNING {', '.join(columns)}",
            (now_us, *chunk, now_us),
        ).fetchall()

    @staticmethod
    def _move_checked(
        conn: sqlite3.Connection, chunk: Sequence[str], now_us: int, columns: Sequence[str]
    ) -> list[Row]:
        """:meth:`_move_returning` for SQLite before 3.35: read, then compare-and-swap each."""
        rows = conn.execute(
            f"SELECT {', '.join(columns)} FROM tasks WHERE id IN ({bulk.marks(len(chunk))}) "
            f"{_PROMOTABLE}",
            (*chunk, now_us),
        ).fetchall()
        if not rows:
            return []
        at_id, at_version = columns.index("id"), columns.index("version")
        cur = conn.executemany(
            "UPDATE tasks SET state = 'ready', version = version + 1, updated = ? "
            "WHERE id = ? AND version = ?",
            [(now_us, r[at_id], r[at_version]) for r in rows],
        )
        if cur.rowcount != len(rows):
            raise VersionConflictError("tasks changed under a promote transaction")
        changed = {"state": _R.value, "updated": now_us}
        return [
            tuple(
                r[i] + 1 if i == at_version else changed.get(c, r[i]) for i, c in enumerate(columns)
            )
            for r in rows
        ]

    def claim(
        self, task_id: str, *, expected_version: int, owner: str, lease_expires: float, now: float
    ) -> Task | None:
        lease_us, now_us = to_us(lease_expires), to_us(now)
        with self._tx("claiming a task") as conn:
            row = conn.execute(_SEL_ID, (task_id,)).fetchone()
            if row is None or row[_VERSION] != expected_version or row[_STATE] != _R.value:
                return None
            self._cas(
                conn,
                task_id,
                expected_version,
                "state = 'running', version = version + 1, attempts = attempts + 1, "
                "lease_owner = ?, lease_expires = ?, started = ?, updated = ?",
                (owner, lease_us, now_us, now_us),
            )
        return TASKS.decode(row, claimed_fields(row, owner, lease_us, now_us))

    def claim_next(
        self,
        *,
        owner: str,
        lease_expires: float,
        now: float,
        limit: int,
        queues: Sequence[str] | None = None,
    ) -> list[Task]:
        """Claim up to *limit* READY tasks (highest priority, then earliest due) in *queues*.

        One transaction: select the batch (``ORDER BY priority DESC, due LIMIT n`` on the READY
        index), then ``UPDATE ... WHERE id = ? AND version = ?`` for each. Tasks whose function
        reference does not resolve in this process are skipped (see :meth:`unresolvable`).
        When nothing is claimable the store may run an idle WAL checkpoint.
        """
        if limit <= 0 or (queues is not None and len(queues) == 0):
            return []
        lease_us, now_us = to_us(lease_expires), to_us(now)
        where = "state = 'ready'"
        qparams: tuple[Any, ...] = ()
        if queues is not None:
            qs = list(dict.fromkeys(queues))
            where += f" AND queue IN ({bulk.marks(len(qs))})"
            qparams = tuple(qs)
        with self._tx("claiming tasks") as conn:
            while True:
                bad = self._claimable.unclaimable()
                sql = f"{_SEL_READY} WHERE {where}"
                if bad:
                    sql += f" AND func NOT IN ({bulk.marks(len(bad))})"
                sql += " ORDER BY priority DESC, due LIMIT ?"
                rows = conn.execute(sql, (*qparams, *bad, limit)).fetchall()
                # every function of the batch is checked (no short-circuit): bad ones are excluded
                funcs = {r[_FUNC] for r in rows}
                if sum(not self._claimable.claimable(f) for f in funcs) == 0:
                    break
            if rows:
                cur = conn.executemany(
                    "UPDATE tasks SET state = 'running', version = version + 1, "
                    "attempts = attempts + 1, lease_owner = ?, lease_expires = ?, started = ?, "
                    "updated = ? WHERE id = ? AND version = ?",
                    [(owner, lease_us, now_us, now_us, r[_ID], r[_VERSION]) for r in rows],
                )
                if cur.rowcount != len(rows):
                    raise VersionConflictError("tasks changed under a claim transaction")
        if not rows:
            self._maybe_idle_checkpoint()
            return []
        return [TASKS.decode(r, claimed_fields(r, owner, lease_us, now_us)) for r in rows]

    def heartbeat(self, task_id: str, *, owner: str, lease_expires: float, now: float) -> bool:
        lease_us, now_us = to_us(lease_expires), to_us(now)
        with self._tx("extending a lease") as conn:
            cur = conn.execute(_HEARTBEAT, (lease_us, now_us, task_id, owner))
            return cur.rowcount == 1

    def heartbeat_many(
        self, leases: Sequence[Lease], *, lease_expires: float, now: float
    ) -> list[bool]:
        """``heartbeat`` each of *leases* in one transaction (one commit for all of them)."""
        if not leases:
            return []
        lease_us, now_us = to_us(lease_expires), to_us(now)
        with self._tx("extending leases") as conn:
            return [
                conn.execute(_HEARTBEAT, (lease_us, now_us, task_id, owner)).rowcount == 1
                for task_id, owner in leases
            ]

    def finish(
        self, task_id: str, *, owner: str, state: TaskState, now: float, **changes: Any
    ) -> Changed | None:
        return self.finish_many([Finish(task_id, owner, state, changes)], now=now)[0]

    def finish_many(self, finishes: Sequence[Finish], *, now: float) -> list[Changed | None]:
        """``finish`` each of *finishes* in one transaction (one commit for all of them)."""
        prepared = []
        for f in finishes:
            if "lease_owner" in f.changes or "lease_expires" in f.changes:
                raise TypeError(
                    "finish clears the lease itself: do not pass lease_owner/lease_expires"
                )
            prepared.append((f, TaskState(f.state), *TASKS.encode_changes(f.changes)))
        now_us = to_us(now)
        ended: list[tuple[Row, tuple[Task, ...]] | None] = []
        with self._tx("finishing a task" if len(prepared) == 1 else "finishing tasks") as conn:
            for f, state, cols, vals, _ in prepared:
                row = conn.execute(_SEL_WITH_DEPS, (f.task_id,)).fetchone()
                if row is None or row[_STATE] != _RUN.value or row[_LEASE_OWNER] != f.owner:
                    ended.append(None)
                    continue
                check_transition(f.task_id, _RUN, state)
                sets = "state = ?, version = version + 1, updated = ?, lease_owner = NULL, "
                sets += "lease_expires = NULL" + "".join(f", {c} = ?" for c in cols)
                self._cas(conn, f.task_id, row[_VERSION], sets, (state.value, now_us, *vals))
                has_deps = row[-1] and state in TERMINAL_STATES
                deps = self._settle(conn, f.task_id, state, now_us) if has_deps else ()
                ended.append((row, deps))
        # decoding happens after COMMIT: the write lock is held only for the SQL
        out: list[Changed | None] = []
        for (_, state, _, _, stored), done in zip(prepared, ended, strict=True):
            if done is None:
                out.append(None)
                continue
            row, deps = done
            stored.update(state=state, version=row[_VERSION] + 1, updated=from_us(now_us))
            stored.update(lease_owner=None, lease_expires=None)
            out.append(Changed(TASKS.decode(row, stored), deps))
        return out

    def due_before(self, until: float, *, limit: int) -> list[tuple[str, float, str | None]]:
        rows = self._read(
            "SELECT id, due, schedule_id FROM tasks INDEXED BY tasks_due "
            "WHERE state = 'pending' AND unmet = 0 AND due < ? "
            "ORDER BY due, id LIMIT ?",
            (to_us(until), max(limit, 0)),
        )
        return [(task_id, from_us(due), schedule_id) for task_id, due, schedule_id in rows]

    def ready(self, *, limit: int, queues: Sequence[str] | None = None) -> list[Task]:
        if queues is not None and not queues:
            return []
        sql, params = f"{_SEL_READY} WHERE state = 'ready'", []
        if queues is not None:
            qs = list(dict.fromkeys(queues))
            sql += f" AND queue IN ({bulk.marks(len(qs))})"
            params += qs
        rows = self._read(sql + " ORDER BY priority DESC, due LIMIT ?", (*params, max(limit, 0)))
        return [TASKS.decode(r) for r in rows]

    def expired_leases(self, now: float, *, limit: int) -> list[Task]:
        rows = self._read(
            f"{_SEL} INDEXED BY tasks_lease WHERE state = 'running' AND lease_expires < ? "
            "ORDER BY lease_expires LIMIT ?",
            (to_us(now), max(limit, 0)),
        )
        return [TASKS.decode(r) for r in rows]

    def count_by_state(self) -> dict[TaskState, int]:
        rows = self._read("SELECT state, count(*) FROM tasks GROUP BY state")
        return {_STATES[s]: n for s, n in rows if n}

    def tasks(
        self,
        *,
        state: TaskState | Iterable[TaskState] | None = None,
        schedule_id: str | None = None,
        limit: int | None = None,
    ) -> list[Task]:
        where: list[str] = []
        params: list[Any] = []
        if state is not None:
            states = (
                [TaskState(state).value]
                if isinstance(state, (TaskState, str))
                else [TaskState(s).value for s in state]
            )
            if not states:
                return []
            where.append(f"state IN ({bulk.marks(len(states))})")
            params += states
        if schedule_id is not None:
            where.append("schedule_id = ?")
            params.append(schedule_id)
        sql = (
            _SEL + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY due, created, id"
        )
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(limit, 0))
        return [TASKS.decode(r) for r in self._read(sql, params)]

    def delete(self, task_id: str) -> bool:
        with self._tx("deleting a task") as conn:
            cur = conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
            if cur.rowcount == 0:
                return False
            conn.execute(
                "DELETE FROM deps WHERE upstream = ? OR downstream = ?", (task_id, task_id)
            )
            return True

    def prune(
        self,
        *,
        before: float,
        states: Iterable[TaskState] | None = None,
        limit: int | None = None,
        keep: Collection[str] = (),
    ) -> int:
        """Delete terminal tasks (or those in *states*) last updated before *before*; the count.

        Without *limit*, deletes in transactions of at most a few hundred tasks, releasing the
        write lock between them so other writers keep going, then checkpoints the WAL so it
        shrinks back. Each state is walked once along its index (by due time), so the work is
        linear in its tasks. With *limit*, one transaction reads at most two windows of
        ``limit + len(keep)`` rows per state, expired or not, and deletes at most *limit* of them
        (no checkpoint: :meth:`maintain` does that): the first window from the earliest due,
        where tasks that ended long ago gather, the second from where the previous call's second
        window stopped, so that successive calls sweep the whole state, wrapping around at its
        end, and reach expired tasks behind any number of kept ones. The cost of a call is
        bounded by *limit* whatever the number of tasks kept. Tasks whose id is in *keep* stay.
        """
        sts = sorted({TaskState(s).value for s in (TERMINAL_STATES if states is None else states)})
        before_us = to_us(before)
        if limit is not None:
            return self._prune_some(sts, before_us, limit, keep)
        total = 0
        for state in sts:
            due, rowid = _MIN_INT64, _MIN_INT64  # a cursor past the tasks already looked at
            while True:
                with self._tx("pruning tasks") as conn:
                    rows = conn.execute(
                        _PRUNE_SELECT, (state, before_us, due, rowid, _PRUNE_BATCH)
                    ).fetchall()
                    ids = [task_id for _, _, task_id in rows if task_id not in keep]
                    if ids:
                        self._delete_rows(conn, ids)
                total += len(ids)
                if len(rows) < _PRUNE_BATCH:
                    break
                due, rowid, _ = rows[-1]
        if total:
            self._connections.try_checkpoint(_PRUNE_CHECKPOINT_WAIT)
            self._last_checkpoint = time.monotonic()
        return total

    def _prune_some(
        self, states: Sequence[str], before_us: int, limit: int, keep: Collection[str]
    ) -> int:
        """The bounded :meth:`prune`: one transaction, two bounded windows read per state."""
        if limit <= 0:
            return 0
        look = limit + len(keep)
        doomed: dict[str, None] = {}  # in order, once each

        def take(rows: list[tuple[int, int, str, int]]) -> tuple[int, int] | None:
            """Mark the expired *rows*; the position of the last row looked at, None at the
            end of the state."""
            for due, rowid, task_id, updated in rows:
                if updated < before_us and task_id not in keep:
                    doomed[task_id] = None
                    if len(doomed) >= limit:
                        return (due, rowid)
            return None if len(rows) < look else (rows[-1][0], rows[-1][1])

        with self._tx("pruning tasks") as conn:
            for state in states:
                if len(doomed) >= limit:
                    break
                stop = take(conn.execute(_SWEEP_SELECT, (state, *_SWEEP_START, look)).fetchall())
                if stop is None or len(doomed) >= limit:
                    continue  # the whole state was read, or the batch is full
                cursor = max(self._sweep.get(state, _SWEEP_START), stop)  # past the first window
                rows = conn.execute(_SWEEP_SELECT, (state, *cursor, look)).fetchall()
                self._sweep[state] = take(rows) or _SWEEP_START
            if doomed:
                self._delete_rows(conn, list(doomed))
        return len(doomed)

    @staticmethod
    def _delete_rows(conn: sqlite3.Connection, ids: Sequence[str]) -> None:
        marks = bulk.marks(len(ids))
        conn.execute(f"DELETE FROM deps WHERE upstream IN ({marks})", ids)
        conn.execute(f"DELETE FROM deps WHERE downstream IN ({marks})", ids)
        conn.execute(f"DELETE FROM tasks WHERE id IN ({marks})", ids)

    def maintain(self, now: float) -> None:
        """Ask the store's checkpoint thread to fold the write-ahead log into the file and
        truncate it at the next quiet moment (see
        :mod:`~timewheel.stores.sqlite.checkpoints`); returns at once. *now* is unused."""
        self._connections.checkpointer.request_truncate()
        self._last_checkpoint = time.monotonic()

    # -- schedules --------------------------------------------------------------------------------
    def put_schedule(
        self, record: ScheduleRecord, *, first: Task | None, on_conflict: OnConflict = "replace"
    ) -> ScheduleRecord:
        policy.check_on_conflict(on_conflict)
        policy.check_schedule(record)
        srow = SCHEDULES.encode(record)
        first_row = None
        if first is not None:
            policy.check_task(first)
            first_row = TASKS.encode(policy.as_inserted(first))
        with self._tx("storing a schedule") as conn:
            old = conn.execute(_SSEL + " WHERE id = ?", (record.id,)).fetchone()
            if old is not None:
                if policy.keep_existing_schedule(record.id, on_conflict):
                    return SCHEDULES.decode(old)
                self._cancel_instances(conn, record.id, to_us(record.updated))
                srow[_SCHEDULE_VERSION] = old[_SCHEDULE_VERSION] + 1
            conn.execute(SCHEDULES.insert.replace("INSERT", "INSERT OR REPLACE", 1), srow)
            if first_row is not None:
                ex = conn.execute(
                    "SELECT state, version FROM tasks WHERE id = ?", (first_row[_ID],)
                ).fetchone()
                if ex is None or _STATES[ex[0]] in TERMINAL_STATES:
                    if ex is not None:
                        # a reused id moves past the old version: a stale CAS cannot hit it
                        first_row[_VERSION] = ex[1] + 1
                        conn.execute("DELETE FROM deps WHERE downstream = ?", (first_row[_ID],))
                        conn.execute("DELETE FROM tasks WHERE id = ?", (first_row[_ID],))
                    conn.execute(_INS, first_row)
        return SCHEDULES.decode(tuple(srow))

    def _cancel_instances(self, conn: sqlite3.Connection, schedule_id: str, now_us: int) -> None:
        states = sorted(s.value for s in policy.CANCELLABLE_STATES)
        rows = conn.execute(
            f"SELECT id, version FROM tasks WHERE schedule_id = ? AND state IN "
            f"({bulk.marks(len(states))})",
            (schedule_id, *states),
        ).fetchall()
        for task_id, version in rows:
            self._cas(
                conn,
                task_id,
                version,
                "state = 'cancelled', version = version + 1, updated = ?, error = ?",
                (now_us, policy.SCHEDULE_GONE),
            )
            self._settle(conn, task_id, TaskState.CANCELLED, now_us)

    def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        rows = self._read(_SSEL + " WHERE id = ?", (schedule_id,))
        return SCHEDULES.decode(rows[0]) if rows else None

    def list_schedules(self) -> list[ScheduleRecord]:
        return [SCHEDULES.decode(r) for r in self._read(_SSEL + " ORDER BY id")]

    def update_schedule(
        self, schedule_id: str, *, expected_version: int, **changes: Any
    ) -> ScheduleRecord:
        policy.check_schedule_changes(changes)
        with self._tx("updating a schedule") as conn:
            old = conn.execute(_SSEL + " WHERE id = ?", (schedule_id,)).fetchone()
            if old is None:
                raise policy.schedule_not_found(schedule_id, self.path)
            rec = SCHEDULES.decode(old)
            if rec.version != expected_version:
                raise policy.schedule_version_conflict(schedule_id, rec.version, expected_version)
            new = rec.evolve(version=rec.version + 1, **changes)
            row = SCHEDULES.encode(new)
            sets = ", ".join(f"{c} = ?" for c in SCHEDULES.names[1:])
            cur = conn.execute(
                f"UPDATE schedules SET {sets} WHERE id = ? AND version = ?",
                (*row[1:], schedule_id, expected_version),
            )
            if cur.rowcount != 1:
                raise VersionConflictError(f"schedule {schedule_id!r} changed under a transaction")
        return SCHEDULES.decode(tuple(row))

    def delete_schedule(self, schedule_id: str) -> bool:
        with self._tx("deleting a schedule") as conn:
            old = conn.execute(
                "SELECT updated FROM schedules WHERE id = ?", (schedule_id,)
            ).fetchone()
            if old is None:
                return False
            conn.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,))
            self._cancel_instances(conn, schedule_id, old[0])
            return True

    # -- inspection ---------------------------------------------------------------------------------
    def unresolvable(self) -> dict[str, int]:
        """Function references this process could not resolve -> READY tasks waiting on each.

        ``claim_next`` skips those tasks (they stay READY for a worker that can import them).
        """
        bad = self._claimable.unclaimable()
        out: dict[str, int] = {}
        for chunk in bulk.chunks(bad):
            for func, n in self._read(
                f"SELECT func, count(*) FROM tasks WHERE state = 'ready' AND func IN "
                f"({bulk.marks(len(chunk))}) GROUP BY func",
                tuple(chunk),
            ):
                out[func] = n
        return {r: out.get(r, 0) for r in bad}

    def oldest_ready_age(self, now: float) -> float | None:
        """Seconds since the earliest due time among READY tasks (how far workers lag), or None."""
        (m,) = self._read("SELECT min(due) FROM tasks WHERE state = 'ready'")[0]
        return None if m is None else max(0.0, now - from_us(m))

    def due_histogram(
        self, now: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, int]]:
        """Expected load: ``(bucket_start, n)`` for PENDING tasks due in ``[now, now + horizon)``.

        Buckets are *bucket* seconds wide, aligned on *now*; empty buckets are included. Only
        materialized tasks count: a recurring schedule contributes its next instance.
        """
        n_buckets = policy.histogram_buckets(horizon, bucket)
        start, width = to_us(now), to_us(bucket)
        rows = self._read(
            "SELECT (due - ?) / ?, count(*) FROM tasks WHERE state = 'pending' AND due >= ? "
            "AND due < ? GROUP BY 1",
            (start, width, start, start + to_us(horizon)),
        )
        counts = [0] * n_buckets
        for b, n in rows:
            if 0 <= b < n_buckets:
                counts[b] += n
        return policy.histogram(now, bucket, counts)

    def recent_failures(self, limit: int = 10) -> list[Task]:
        """The last *limit* tasks that ended FAILED, TIMED_OUT or UPSTREAM_FAILED, newest first."""
        sts = [s.value for s in policy.REPORTED_FAILURES]
        rows = self._read(
            f"{_SEL} WHERE state IN ({bulk.marks(len(sts))}) ORDER BY updated DESC LIMIT ?",
            (*sts, max(limit, 0)),
        )
        return [TASKS.decode(r) for r in rows]

    def ended_histogram(
        self, since: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, dict[TaskState, int]]]:
        """What ended in ``[since, since + horizon)`` per *bucket*, counted along the index of
        ended tasks by end time."""
        n = policy.histogram_buckets(horizon, bucket)
        start, width = to_us(since), to_us(bucket)
        rows = self._read(
            f"SELECT (updated - ?) / ?, state, count(*) FROM tasks INDEXED BY tasks_ended WHERE "
            f"{policy.ENDED_SQL} AND updated >= ? AND updated < ? GROUP BY 1, 2",
            (start, width, start, start + to_us(horizon)),
        )
        return policy.ended_histogram(since, bucket, n, rows)

    def ended_since(
        self, since: float, *, limit: int
    ) -> list[tuple[TaskState, float, float | None, float]]:
        """``(state, due, started, ended)`` of up to *limit* tasks that ended at or after
        *since*, the latest first (along the index of ended tasks by end time, which holds
        every column read)."""
        rows = self._read(
            f"SELECT state, due, started, updated FROM tasks INDEXED BY tasks_ended WHERE "
            f"{policy.ENDED_SQL} AND updated >= ? ORDER BY updated DESC LIMIT ?",
            (to_us(since), max(limit, 0)),
        )
        return policy.ended_rows(rows)

    def count_by_queue(self) -> dict[str, dict[TaskState, int]]:
        """Tasks per queue and state, in one statement (one snapshot): the queues other than
        the default one along their index of queue and state, every queue by state along the
        index of states (both hold what they count: the table's rows are not read)."""
        return policy.queue_counts(
            self._read(
                "SELECT queue, state, count(*) FROM tasks INDEXED BY tasks_queue "
                f"WHERE {policy.OTHER_QUEUES_SQL} GROUP BY queue, state UNION ALL "
                "SELECT NULL, state, count(*) FROM tasks INDEXED BY tasks_state GROUP BY state"
            )
        )

    def by_function(self, prefix: str, *, limit: int) -> list[Task]:
        """Up to *limit* tasks whose function reference starts with *prefix*, by function
        reference then id (a range of the index on function reference and id)."""
        low, high = policy.prefix_range(prefix)
        sql, params = f"{_SEL} INDEXED BY tasks_func WHERE func >= ?", [low]
        if high is not None:
            sql += " AND func < ?"
            params.append(high)
        rows = self._read(sql + " ORDER BY func, id LIMIT ?", (*params, max(limit, 0)))
        return [TASKS.decode(r) for r in rows]

    def retrying(self, limit: int) -> list[Task]:
        """Up to *limit* PENDING tasks with ``attempts > 0``, the soonest due first (along
        their own index)."""
        rows = self._read(
            f"{_SEL} INDEXED BY tasks_retrying WHERE {policy.RETRYING_SQL} ORDER BY due, id LIMIT ?",
            (max(limit, 0),),
        )
        return [TASKS.decode(r) for r in rows]

    def last_ended(self, schedule_id: str) -> Task | None:
        """The instance of *schedule_id* that ended last, or None (along the schedule index)."""
        rows = self._read(
            f"{_SEL} INDEXED BY tasks_schedule WHERE schedule_id = ? AND {policy.ENDED_SQL} "
            "ORDER BY updated DESC, id DESC LIMIT 1",
            (schedule_id,),
        )
        return TASKS.decode(rows[0]) if rows else None

    def dependents(self, task_id: str, *, limit: int) -> list[Task]:
        """Up to *limit* tasks naming *task_id* in their ``after``, by id (reads only the
        tasks that have upstream tasks, along their own index)."""
        rows = self._read(
            f"{_SEL} INDEXED BY tasks_with_upstream WHERE after IS NOT NULL "
            "AND instr(after, ?) > 0 ORDER BY id",
            (upstream_entry(task_id),),
        )
        return decode_dependents(rows, task_id, limit)

    def statistics(self, now: float) -> SQLiteStatistics:
        """A snapshot for ``timewheel inspect``: counts, sizes, lag, unresolvable references."""
        (n_sched,) = self._read("SELECT count(*) FROM schedules")[0]
        (version,) = self._read("PRAGMA user_version")[0]
        return SQLiteStatistics(
            path=self.path,
            schema_version=version,
            size_bytes=file_size(self.path),
            wal_bytes=file_size(self.path + "-wal"),
            counts=self.count_by_state(),
            schedules=n_sched,
            oldest_ready_age=self.oldest_ready_age(now),
            unresolvable=self.unresolvable(),
        )

    # -- maintenance -----------------------------------------------------------------------------
    def integrity_check(self, max_errors: int = 100) -> list[str]:
        """``PRAGMA integrity_check``: the problems found, ``[]`` when the file is healthy.

        Damage bad enough to stop the check itself is reported as a problem too, never raised.
        Reads the whole file: O(size). Run it from maintenance code, not a hot path.
        """
        try:
            conn = self._connections.get()
            with self._connections.call():
                rows = conn.execute(f"PRAGMA integrity_check({int(max_errors)})").fetchall()
        except sqlite3.DatabaseError as e:
            if not is_corrupt(e):
                raise translate(self.path, e, "checking integrity") from e
            return [f"{e} (the damage stopped PRAGMA integrity_check itself)"]
        msgs = [str(r[0]) for r in rows]
        return [] if msgs == ["ok"] else msgs

    def checkpoint(
        self, mode: Literal["PASSIVE", "FULL", "RESTART", "TRUNCATE"] = "TRUNCATE"
    ) -> bool:
        """Run ``PRAGMA wal_checkpoint(mode)``; True if it completed (False: readers were busy)."""
        if self.read_only:
            raise StoreError(
                f"timewheel store {self.path!r} was opened read-only and refuses checkpointing; "
                "open it without read_only=True to change it"
            )
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise InvalidScheduleError(
                f"unknown checkpoint mode {mode!r}; use PASSIVE, FULL, RESTART or TRUNCATE"
            )
        done = self._connections.checkpoint(mode)
        self._last_checkpoint = time.monotonic()
        return done

    def _maybe_idle_checkpoint(self) -> None:
        if time.monotonic() - self._last_checkpoint < _IDLE_CHECKPOINT_EVERY:
            return
        self._last_checkpoint = time.monotonic()
        self._connections.checkpointer.request_truncate()

    # -- lifecycle --------------------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, *, create: bool = True, read_only: bool = False) -> SQLiteStore:
        """Open ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``.

        Query parameters set the keyword options: ``?durability=fast&busy_timeout=10&verify=0``.
        *create* and *read_only* are passed on.

        Raises:
            StoreConfigError: the URL is malformed or names an unknown option.
        """
        path, options = parse_url(url)
        return cls(path, create=create, read_only=read_only, **options)

    def close(self) -> None:
        """Close this process's connections (idempotent). Call it when no thread is using the store.

        The last connection to close checkpoints the WAL and removes ``-wal``/``-shm``. Later use
        raises :class:`~timewheel.errors.StoreError`.
        """
        self._connections.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[..., SQLiteStore], tuple[Any, ...]]:
        # A spawned process gets a fresh store on the same file (connections are never pickled).
        return (
            _reopen,
            (self.path, self.durability, self.busy_timeout, self.read_only, self._verify),
        )

    def __repr__(self) -> str:
        ro = ", read_only=True" if self.read_only else ""
        return f"SQLiteStore({self.path!r}, durability={self.durability!r}{ro})"


def _reopen(
    path: str, durability: Durability, busy_timeout: float, read_only: bool, verify: bool
) -> SQLiteStore:
    return SQLiteStore(
        path,
        durability=durability,
        busy_timeout=busy_timeout,
        create=False,
        read_only=read_only,
        verify=verify,
    )
