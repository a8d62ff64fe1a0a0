"""``PostgresStore``: the store's operations, each one transaction on a pooled connection.

Rows are encoded by the SQLite store's column tables (:mod:`timewheel.stores.sqlite.codec`);
the schema is in :mod:`~timewheel.stores.postgres.schema`; the pool and the retries in
:mod:`~timewheel.stores.postgres.connections`; what an id conflict does and how dependencies
settle is the shared :mod:`~timewheel.stores.policy`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from timewheel import validate
from timewheel.clock import Clock, SystemClock
from timewheel.errors import (
    InvalidScheduleError,
    StoreConfigError,
    StoreError,
    VersionConflictError,
)
from timewheel.stores import policy
from timewheel.stores.base import (
    Changed,
    Finish,
    Lease,
    NewTasks,
    OnConflict,
    Promoted,
    Store,
    WorkListener,
)
from timewheel.stores.postgres import inserts, notify, runs, schema
from timewheel.stores.postgres.clocks import CLOCK_WARNING, ServerClocks, measure
from timewheel.stores.postgres.connections import Conn, Connections, parse_url
from timewheel.stores.postgres.inspection import InspectionQueries
from timewheel.stores.sqlite.codec import (
    SCHEDULES,
    TASKS,
    Row,
    from_us,
    new_rows,
    ready_ids,
    to_us,
)
from timewheel.task import TERMINAL_STATES, ScheduleRecord, Task, TaskState, check_transition

__all__ = ["CLOCK_WARNING", "PostgresStore"]

log = logging.getLogger("timewheel.stores.postgres")

_PRUNE_BATCH = 500
_STATES = {s.value: s for s in TaskState}
_RUN = TaskState.RUNNING

_ID = TASKS.position["id"]
_DUE = TASKS.position["due"]
_STATE = TASKS.position["state"]
_VERSION = TASKS.position["version"]
_UPDATED = TASKS.position["updated"]
_ERROR = TASKS.position["error"]
_UNMET = TASKS.position["unmet"]
_SCHEDULE_ID = TASKS.position["schedule_id"]
_PENDING, _READY = TaskState.PENDING.value, TaskState.READY.value
_SCHEDULE_VERSION = SCHEDULES.position["version"]

_SEL = schema.SELECT_TASKS
_SEL_ID = _SEL + " WHERE id = %s"
_INS = schema.INSERT_TASK
_INS_IGNORE = schema.INSERT_TASK_IF_NEW
_INS_DUE = inserts.INSERT_DUE.encode()
_COPY = f"COPY tasks ({schema.TASK_COLUMNS}) FROM STDIN"
_SSEL = f"SELECT {', '.join(SCHEDULES.names)} FROM schedules"
_SINS = (
    f"INSERT INTO schedules ({', '.join(SCHEDULES.names)}) "
    f"VALUES ({', '.join(['%s'] * len(SCHEDULES.names))})"
)
_RETURNING = runs.RETURNING
# the server's clock, once per statement, in epoch microseconds
_SERVER_NOW = schema.SERVER_NOW
_WITHIN_US = round(schema.NOTIFY_WITHIN * 1_000_000)


class PostgresStore(InspectionQueries, Store):
    """Tasks and schedules in a PostgreSQL schema, shared by processes on any number of hosts.

    Every change is one transaction and a compare-and-swap on ``version``; ``claim_next`` takes
    its batch in one ``UPDATE`` over ``SELECT ... FOR UPDATE SKIP LOCKED``, so workers on
    several hosts never wait for each other's rows and never claim the same task.

    Args:
        dsn: a libpq connection string, ``postgresql://user@host:5432/db`` or ``key=value``.
        schema: the PostgreSQL schema the store's tables live in (quoted, never pasted into
            SQL, so any name is safe).
        create: create or upgrade the schema at open (``False``: a missing store raises
            :class:`~timewheel.errors.StoreError`; an older one asks for ``timewheel migrate``).
        read_only: every change raises ``StoreError`` (for ``timewheel inspect``).
        pool_size: the most connections this process holds.
        retries: how many times an operation is run again after a lost connection or a lost
            race the database reports, with exponential backoff, before ``StoreError``.
        connect_timeout: seconds to wait for a connection.

    Time is the server's: a scheduler on a real-time clock reads it through
    :meth:`server_clock` (its host's offset from the server measured at start, on every
    reconnect and every half minute, and logged when over :data:`CLOCK_WARNING` seconds), and the
    store then refuses, on the server's clock, to promote a task not yet due or to reap a lease
    not yet expired. Without it (a ``FakeClock``, the contract suite) times are compared as the
    caller passes them, as on every store. Other hosts hear of work due soon and of READY work at
    once (:meth:`listen`: ``LISTEN``/``NOTIFY``). Implements
    :class:`~timewheel.stores.base.SupportsNewTasks`,
    :class:`~timewheel.stores.base.SupportsInspection`,
    :class:`~timewheel.stores.base.SupportsServerClock` and
    :class:`~timewheel.stores.base.SupportsNotifications`.
    """

    durable = True

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "timewheel",
        create: bool = True,
        read_only: bool = False,
        pool_size: int = 10,
        retries: int = 5,
        connect_timeout: float = 10.0,
    ) -> None:
        if not isinstance(schema, str) or not schema or len(schema.encode()) > 63:
            raise StoreConfigError(
                f"schema must be a non-empty name of at most 63 bytes (got {schema!r})"
            )
        for name, n, least in (("pool_size", pool_size, 1), ("retries", retries, 0)):
            if isinstance(n, bool) or not isinstance(n, int) or n < least:
                raise StoreConfigError(f"{name} must be a whole number >= {least} (got {n!r})")
        try:
            timeout = validate.seconds(
                connect_timeout, "connect_timeout", above=0, timedelta_ok=False
            )
        except InvalidScheduleError as e:
            raise StoreConfigError(str(e)) from None
        for name, flag in (("create", create), ("read_only", read_only)):
            if not isinstance(flag, bool):
                raise StoreConfigError(f"{name} must be True or False (got {flag!r})")
        self.schema = schema
        self.pool_size = pool_size
        self.retries = retries
        self.connect_timeout = timeout
        self.read_only = read_only
        #: this store object's token: its own notifications are not told to its own listeners
        self.origin = uuid.uuid4().hex[:16]
        self._connections = Connections(
            dsn,
            schema=schema,
            read_only=read_only,
            max_size=pool_size,
            retries=retries,
            connect_timeout=timeout,
            origin=self.origin,
            on_connect=self._connected,
        )
        self.where = self._connections.where
        self._claimable = policy.ClaimableRefs("PostgresStore")
        self._clocks = ServerClocks(self.where)
        self._listener: notify.Listener | None = None
        self._listener_lock = threading.Lock()
        self._remeasured = -float("inf")
        conn = self._connections.connect()
        try:
            if create and not read_only:
                _migrate(conn, self.schema)
            else:
                _require(conn, self.schema, self.where)
            #: this host's system clock minus the server's, measured at open (seconds)
            self.clock_offset = measure(conn, SystemClock())
            conn.rollback()
        except psycopg.Error as e:
            raise StoreError(
                f"PostgreSQL at {self.where} failed while opening the store: "
                f"{self._connections.scrub(str(e)).strip()}"
            ) from None
        finally:
            conn.close()
        self._clocks.note(self.clock_offset, "at open")
        self._run = self._connections.run
        self._channel = notify.channel(schema)
        self._ready_note = notify.ready_payload(self.origin)
        #: announces the tasks this store object inserts one at a time, after their commits
        self.announcer = notify.Announcer(
            lambda statement, params: self._write(
                "announcing inserted work", lambda c: c.execute(statement, params), autocommit=True
            ),
            channel=self._channel,
            origin=self.origin,
            where=self.where,
            scrub=self._connections.scrub,
            clock_offset=self.clock_offset,
        )

    # -- internals --------------------------------------------------------------------------------
    def _write(self, doing: str, work: Callable[[Conn], Any], *, autocommit: bool = False) -> Any:
        if self.read_only:
            raise StoreError(
                f"timewheel store at {self.where} (schema {self.schema!r}) was opened read-only "
                f"and refuses {doing}; open it without read_only=True to change it"
            )
        return self._run(doing, work, autocommit=autocommit)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        def work(conn: Conn) -> list[Row]:
            return conn.execute(sql.encode(), params).fetchall()

        rows: list[Row] = self._run("reading", work)
        return rows

    def read_rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """The rows of one read-only statement (the inspection queries read through it)."""
        return self._read(sql, params)

    def _cas(self, conn: Conn, task_id: str, version: int, sets: str, vals: Sequence[Any]) -> None:
        cur = conn.execute(
            f"UPDATE tasks SET {sets} WHERE id = %s AND version = %s".encode(),
            (*vals, task_id, version),
        )
        if cur.rowcount != 1:  # the row is locked FOR UPDATE: kept as a guard
            raise VersionConflictError(
                f"task {task_id!r} changed under a transaction (expected version {version})"
            )

    def _settle(
        self,
        conn: Conn,
        up_id: str,
        up_state: TaskState,
        now_us: int,
        taken: list[str] | None = None,
    ) -> tuple[Task, ...]:
        """Settle the dependents of *up_id*, which ended in *up_state*; *taken*: the downstream
        ids of its edges when the caller already deleted them."""

        def take_dependents(upstream_id: str) -> list[Task]:
            if upstream_id == up_id and taken is not None:
                downs = taken
            else:
                downs = [
                    r[0]
                    for r in conn.execute(
                        "DELETE FROM deps WHERE upstream = %s RETURNING downstream", (upstream_id,)
                    )
                ]
            if not downs:
                return []
            rows = conn.execute(
                (_SEL + " WHERE id = ANY(%s) ORDER BY id FOR UPDATE").encode(), (downs,)
            ).fetchall()
            return [TASKS.decode(r) for r in rows]

        def save(old: Task, new: Task) -> None:
            self._cas(
                conn,
                old.id,
                old.version,
                "state = %s, unmet = %s, error = %s, version = version + 1, updated = %s",
                (new.state.value, new.unmet, new.error, now_us),
            )

        return policy.settle(
            up_id, up_state, from_us(now_us), take_dependents=take_dependents, save=save
        )

    def _connected(self, conn: Conn) -> None:
        """A new pooled connection (a reconnect): measure the corrected clocks again."""
        if self._clocks.active:
            try:
                self._clocks.remeasure(conn, "on a new connection")
            except psycopg.Error as e:
                log.debug("clock measurement on a new connection failed: %s", e)

    def _listener_idle(self, conn: Conn) -> None:
        if self._clocks.due():
            self._clocks.remeasure(conn, "periodically")

    def _server_now(self, conn: Conn) -> int:
        """The server's clock (epoch microseconds): tasks due by then may be stored READY."""
        row = conn.execute(f"SELECT {_SERVER_NOW}").fetchone()
        assert row is not None
        now_us: int = row[0]
        return now_us

    def _announce_many(self, conn: Conn, first_due_us: int) -> None:
        """Tell listening hosts to look for PENDING work bulk-inserted in this transaction, the
        earliest due at *first_due_us*, if that is within ``NOTIFY_WITHIN`` of the server's
        clock."""
        conn.execute(
            f"SELECT pg_notify(%s, %s) WHERE %s < {_SERVER_NOW} + %s",
            (
                self._channel,
                notify.many_payload(self.origin, first_due_us),
                first_due_us,
                _WITHIN_US,
            ),
        )

    def _announce_ready(self, conn: Conn) -> None:
        """Tell listening hosts that READY work is there (once per transaction)."""
        conn.execute("SELECT pg_notify(%s, %s)", (self._channel, self._ready_note))

    def _announce_inserted(self, row: list[Any]) -> None:
        """Have the announcer tell listening hosts of the committed *row* of one inserted task
        (READY, or PENDING with no unmet dependency)."""
        if row[_UNMET]:
            return
        if row[_STATE] == _READY:
            self.announcer.ready()
        elif row[_STATE] == _PENDING:
            self.announcer.pending(row[_ID], row[_DUE], row[_SCHEDULE_ID])

    # -- time and wake-ups across hosts -------------------------------------------------------------
    def server_clock(self, clock: Clock) -> Clock:
        """*clock* corrected to the server's clock: a :class:`~timewheel.clock.ShiftedClock`
        shifted by minus this host's offset, measured now (and again on every reconnect, every
        half minute while a scheduler listens, and whenever the server finds this host's time
        ahead of its own). From now on this store also compares due times and lease expiries
        with the server's clock in SQL: a task is never promoted before it is due there, a lease
        never reaped before it expired there. A scheduler on a real-time clock calls it when it
        is built; the same *clock* gives the same corrected clock.

        Raises:
            StoreError: the server cannot be reached.
        """
        corrected: Clock = self._run(
            "measuring the clock", lambda conn: self._clocks.correct(conn, clock)
        )
        return corrected

    def listen(self, listener: WorkListener) -> Callable[[], None]:
        """Tell *listener* (a scheduler's trigger) when another process inserts work due within
        :data:`~timewheel.stores.postgres.schema.NOTIFY_WITHIN` seconds or makes work READY,
        from a dedicated connection outside the pool (``LISTEN``), until the returned function
        is called. The connection is made again with backoff when it is lost, and *listener* is
        then told to look in the store for what it may have missed (see
        :mod:`~timewheel.stores.postgres.notify`)."""
        return self.listener().add(listener)

    def listener(self) -> notify.Listener:
        """This process's listening connection and thread (made when first asked for)."""
        with self._listener_lock:
            current = self._listener
            if current is None or current.pid != os.getpid():
                # after fork() the parent's thread is not here: listen anew
                current = self._listener = notify.Listener(
                    self._connections.connect,
                    schema=self.schema,
                    origin=self.origin,
                    where=self.where,
                    scrub=self._connections.scrub,
                    on_connect=self._connected,
                    on_idle=self._listener_idle,
                )
            return current

    def _ahead(self, now_us: int, server_us: int) -> None:
        """The server found this host's *now* ahead of its clock: the offset drifted (or the
        host's clock was stepped); measure again, at most once a second."""
        mono = time.monotonic()
        if mono - self._remeasured < 1.0:
            return
        self._remeasured = mono
        self._clocks.note_drift(now_us - server_us)
        self._run("measuring the clock", lambda conn: self._clocks.remeasure(conn, "after drift"))

    # -- tasks ------------------------------------------------------------------------------------
    def insert(self, task: Task, *, on_conflict: OnConflict = "error") -> Changed:
        policy.check_on_conflict(on_conflict)
        policy.check_task(task)
        if not task.after:
            # one autocommitted statement; the transaction decides what it leaves (see inserts)
            new = policy.as_inserted(task, durable=True)
            row = TASKS.encode(new)
            done: tuple[Changed, bool] | None = self._write(
                "inserting a task",
                lambda conn: inserts.insert_new(conn, new, row, on_conflict),
                autocommit=True,
            )
            if done is not None:
                if done[1]:
                    self._announce_inserted(row)
                return done[0]
        inserted: list[list[Any]] = []

        def work(conn: Conn) -> Changed:
            inserted.clear()  # (a retried transaction starts over)
            return self._insert_in(conn, task, on_conflict, inserted)

        result: Changed = self._write("inserting a task", work)
        for row in inserted:
            self._announce_inserted(row)
        return result

    def _insert_in(
        self, conn: Conn, task: Task, on_conflict: OnConflict, inserted: list[list[Any]]
    ) -> Changed:
        """``insert`` inside *conn*'s transaction; the row it inserts is appended to
        *inserted* (none when the task holding the id is kept)."""
        row = TASKS.encode(policy.as_inserted(task))
        old = conn.execute((_SEL_ID + " FOR UPDATE").encode(), (task.id,)).fetchone()
        if old is not None and policy.keep_existing(task.id, _STATES[old[_STATE]], on_conflict):
            return Changed(TASKS.decode(old))

        def state_of(up_id: str) -> TaskState | None:
            # FOR SHARE: an upstream cannot end between this count and the edge's commit
            r = conn.execute("SELECT state FROM tasks WHERE id = %s FOR SHARE", (up_id,)).fetchone()
            return None if r is None else _STATES[r[0]]

        count = policy.count_dependencies(task, state_of)
        row[_STATE] = count.state.value
        row[_UNMET] = count.unmet
        row[_ERROR] = count.error
        if old is not None:
            row[_VERSION] = old[_VERSION] + 1
            conn.execute("DELETE FROM deps WHERE downstream = %s", (task.id,))
            conn.execute("DELETE FROM tasks WHERE id = %s", (task.id,))
        if count.state is TaskState.PENDING and policy.ready_at_insert(task, count.unmet):
            # READY if the server's clock finds it due as well
            stored = conn.execute(_INS_DUE, inserts.ready_if_due(row)).fetchone()
            assert stored is not None  # an INSERT ... RETURNING returns its row
            row[_STATE] = stored[0]
        else:
            conn.execute(_INS.encode(), row)
        inserted.append(row)
        if count.waits_on:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO deps (upstream, downstream) VALUES (%s, %s) "
                    "ON CONFLICT DO NOTHING",
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
        ids = [t.id for t in tasks]
        # encoded before the transaction (the common case: every task new, none with
        # dependencies); a batch that meets existing ids encodes what it inserts again
        fresh = [policy.as_inserted(t, durable=True) for t in tasks if not t.after]
        encoded = TASKS.encode_many(fresh)

        def work(conn: Conn) -> list[Changed]:
            # a join on the ids, not "id = ANY(...)": a large array against a table the planner
            # believes small (fresh statistics lag behind a bulk load) becomes a sequential scan
            # comparing every row with every id
            existing = {
                r[0]: _STATES[r[1]]
                for r in conn.execute(
                    "SELECT t.id, t.state FROM unnest(%s::text[]) AS b(id) "
                    "JOIN tasks t ON t.id = b.id FOR UPDATE OF t",
                    (ids,),
                )
            }
            plan = policy.plan_batch(tasks, on_conflict, existing, durable=True)
            if plan.bulk:
                server_now = self._server_now(conn)
                rows = encoded if len(plan.bulk) == len(fresh) else TASKS.encode_many(plan.bulk)
                if inserts.pending_unless_due(plan.bulk, server_now):
                    rows = TASKS.encode_many(plan.bulk)
                # COPY: one statement streams every row (the fastest bulk insert PostgreSQL has)
                with conn.cursor() as cur, cur.copy(_COPY) as copy:
                    for row in rows:
                        copy.write_row(row)
            inserted: list[list[Any]] = []
            changed = {
                t.id: self._insert_in(conn, t, on_conflict, inserted) for t in plan.one_by_one
            }
            # one notification for the batch, not one per row
            dues = [to_us(t.due) for t in plan.bulk if t.state is TaskState.PENDING]
            ready = len(dues) < len(plan.bulk) or any(r[_STATE] == _READY for r in inserted)
            dues += [r[_DUE] for r in inserted if r[_STATE] == _PENDING and not r[_UNMET]]
            if dues:
                self._announce_many(conn, min(dues))
            if ready:
                self._announce_ready(conn)
            return policy.batch_changes(tasks, plan, changed)

        result: list[Changed] = self._write("inserting tasks", work)
        return result

    def insert_new(self, batch: NewTasks) -> Sequence[str]:
        """Insert a batch of fresh tasks (:class:`~timewheel.stores.base.SupportsNewTasks`): its
        rows built column by column (:func:`~timewheel.stores.sqlite.codec.new_rows`), one
        ``COPY`` in one transaction, no read first: the ids are new, and the primary key refuses
        one that exists (rolling the batch back). Tasks already due by the batch's clock and by
        the server's (read as the transaction begins) are stored READY
        (:func:`~timewheel.stores.policy.ready_at_insert`); their ids are returned.

        Raises:
            DuplicateKeyError: an id exists already; nothing is inserted.
        """
        until = policy.ready_until(batch.template)
        until_us = None if until is None else to_us(until)
        built = new_rows(batch, ready_until_us=until_us)
        if not built:
            return ()

        def work(conn: Conn) -> Sequence[str]:
            # one notification for the batch, not one per row
            server_now_us = self._server_now(conn)
            limit, rows = until_us, built
            if limit is not None and limit > server_now_us:
                # this host's clock is ahead of the server's: READY only what the server finds due
                limit = server_now_us
                rows = new_rows(batch, ready_until_us=limit)
            try:
                with conn.transaction(), conn.cursor() as cur, cur.copy(_COPY) as copy:
                    for row in rows:
                        copy.write_row(row)
            except pgerrors.UniqueViolation:
                found = conn.execute(
                    "SELECT t.id FROM unnest(%s::text[]) AS b(id) JOIN tasks t ON t.id = b.id "
                    "LIMIT 1",
                    (batch.ids,),
                ).fetchone()
                raise policy.existing_in_batch(
                    str(found[0]) if found else batch.ids[0], len(rows)
                ) from None
            ready = ready_ids(batch, limit)
            if len(ready) < len(rows):
                pending = (d for d in map(to_us, batch.dues) if limit is None or d > limit)
                self._announce_many(conn, min(pending))
            if ready:
                self._announce_ready(conn)
            return ready

        stored_ready: Sequence[str] = self._write("inserting tasks", work)
        return stored_ready

    def get(self, task_id: str) -> Task:
        t = self.find(task_id)
        if t is None:
            raise policy.task_not_found(task_id, self.where)
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

        def work(conn: Conn) -> Changed:
            row = conn.execute((_SEL_ID + " FOR UPDATE").encode(), (task_id,)).fetchone()
            if row is None:
                raise policy.task_not_found(task_id, self.where)
            if row[_VERSION] != expected_version:
                raise policy.version_conflict(
                    task_id, row[_VERSION], _STATES[row[_STATE]], expected_version
                )
            check_transition(task_id, _STATES[row[_STATE]], state)
            sets = "state = %s, version = version + 1, updated = %s"
            started: list[int] = []
            if state is _RUN:
                sets += ", started = %s"  # a run starts: its start is recorded, as by claim
                started.append(now_us)
            sets += "".join(f", {c} = %s" for c in cols)
            self._cas(conn, task_id, expected_version, sets, (state.value, now_us, *started, *vals))
            if state is TaskState.READY:
                self._announce_ready(conn)
            deps = self._settle(conn, task_id, state, now_us) if state in TERMINAL_STATES else ()
            new = dict(stored, state=state, version=expected_version + 1, updated=from_us(now_us))
            if started:
                new["started"] = from_us(now_us)
            return Changed(TASKS.decode(row, new), deps)

        result: Changed = self._write("changing a task's state", work)
        return result

    def promote(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Task]:
        decode = TASKS.decode
        return [decode(r) for r in self._promote(task_ids, now, successors, keys=False)]

    def promote_keys(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Promoted]:
        """:meth:`promote`, returning only the moved tasks' ids, versions and queues (see
        :class:`~timewheel.stores.base.SupportsPromoteKeys`): no row is decoded."""
        return [Promoted(*r) for r in self._promote(task_ids, now, successors, keys=True)]

    def _promote(
        self, task_ids: Sequence[str], now: float, successors: Sequence[Task], *, keys: bool
    ) -> list[Row]:
        """Promote in one transaction; the moved rows (every column, or the :class:`Promoted`
        keys; ``id`` first) in *task_ids* order."""
        now_us = to_us(now)
        succ_rows = []
        for s in successors:
            policy.check_task(s)
            succ_rows.append(TASKS.encode(policy.as_inserted(s)))
        ids = list(dict.fromkeys(task_ids))
        if not ids and not succ_rows:
            return []

        on_server = self._clocks.active
        sql = runs.PROMOTES[on_server, keys]
        server_now: list[int] = []

        def work(conn: Conn) -> list[Row]:
            rows: list[Row] = []
            if ids:  # (alone, one autocommitted statement)
                got = conn.execute(
                    sql, (now_us, ids, now_us, self._channel, self._ready_note)
                ).fetchall()
                server_now[:] = [got[0][0]]
                rows = [r[2:] for r in got if r[2] is not None]
            if succ_rows:
                # deterministic instance ids: a slot another host materialised is kept; not
                # announced: each host carrying the schedule computes its successors itself
                with conn.cursor() as cur:
                    cur.executemany(_INS_IGNORE.encode(), succ_rows)
            return rows

        moved: list[Row] = self._write("promoting tasks", work, autocommit=not succ_rows)
        if on_server and server_now and now_us > server_now[0]:
            self._ahead(now_us, server_now[0])
        if len(moved) > 1:
            order = {tid: i for i, tid in enumerate(ids)}
            moved.sort(key=lambda r: order[r[0]])
        return moved

    def claim(
        self, task_id: str, *, expected_version: int, owner: str, lease_expires: float, now: float
    ) -> Task | None:
        lease_us, now_us = to_us(lease_expires), to_us(now)

        def work(conn: Conn) -> Row | None:
            return conn.execute(
                (
                    "UPDATE tasks t SET state = 'running', version = t.version + 1, "
                    "attempts = t.attempts + 1, lease_owner = %s, lease_expires = %s, "
                    "started = %s, updated = %s WHERE id = %s AND version = %s "
                    "AND state = 'ready'" + _RETURNING
                ).encode(),
                (owner, lease_us, now_us, now_us, task_id, expected_version),
            ).fetchone()

        row: Row | None = self._write("claiming a task", work)
        return None if row is None else TASKS.decode(row)

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

        One autocommitted statement: ``UPDATE ... FROM (SELECT ... ORDER BY priority DESC, due
        LIMIT n FOR UPDATE SKIP LOCKED)``, each row swapped on the version read (see
        :func:`~timewheel.stores.postgres.runs.claim_next`). Tasks whose function reference
        does not resolve in this process are not claimed (see :meth:`unresolvable`): one met
        for the first time is handed back READY at once, as it was before the claim.
        """
        if limit <= 0 or (queues is not None and len(queues) == 0):
            return []
        lease_us, now_us = to_us(lease_expires), to_us(now)
        claimable = self._claimable

        def work(conn: Conn) -> tuple[list[Row], bool]:
            return runs.claim_next(
                conn,
                owner=owner,
                lease_us=lease_us,
                now_us=now_us,
                limit=limit,
                queues=queues,
                unclaimable=claimable.unclaimable(),
                claimable=claimable.claimable,
            )

        got: tuple[list[Row], bool] = self._write("claiming tasks", work, autocommit=True)
        rows, handed_back = got
        if handed_back:
            self._write("announcing READY work", self._announce_ready, autocommit=True)
        return [TASKS.decode(r) for r in rows]

    def heartbeat(self, task_id: str, *, owner: str, lease_expires: float, now: float) -> bool:
        lease_us, now_us = to_us(lease_expires), to_us(now)

        def work(conn: Conn) -> bool:
            cur = conn.execute(
                "UPDATE tasks SET lease_expires = %s, version = version + 1, updated = %s "
                "WHERE id = %s AND state = 'running' AND lease_owner = %s",
                (lease_us, now_us, task_id, owner),
            )
            return cur.rowcount == 1

        ok: bool = self._write("extending a lease", work)
        return ok

    def heartbeat_many(
        self, leases: Sequence[Lease], *, lease_expires: float, now: float
    ) -> list[bool]:
        """``heartbeat`` each of *leases* in one autocommitted statement: an ``UPDATE ... FROM
        unnest(...)`` that extends every lease its owner still holds and returns those."""
        if not leases:
            return []
        lease_us, now_us = to_us(lease_expires), to_us(now)
        ids = [lease.task_id for lease in leases]
        owners = [lease.owner for lease in leases]

        def work(conn: Conn) -> set[tuple[str, str]]:
            rows = conn.execute(
                "UPDATE tasks t SET lease_expires = %s, version = t.version + 1, updated = %s "
                "FROM unnest(%s::text[], %s::text[]) AS h(id, owner) "
                "WHERE t.id = h.id AND t.state = 'running' AND t.lease_owner = h.owner "
                "RETURNING t.id, t.lease_owner",
                (lease_us, now_us, ids, owners),
            ).fetchall()
            return {(str(r[0]), str(r[1])) for r in rows}

        held: set[tuple[str, str]] = self._write("extending leases", work, autocommit=True)
        return [(lease.task_id, lease.owner) in held for lease in leases]

    def finish(
        self, task_id: str, *, owner: str, state: TaskState, now: float, **changes: Any
    ) -> Changed | None:
        return self.finish_many([Finish(task_id, owner, state, changes)], now=now)[0]

    def finish_many(self, finishes: Sequence[Finish], *, now: float) -> list[Changed | None]:
        """``finish`` each of *finishes* in one transaction (one commit for all of them): one
        ``UPDATE`` for the outcomes that end in the same state with the same changes (see
        :func:`~timewheel.stores.postgres.runs.finish_many`)."""
        prepared = runs.check_finishes(finishes)
        if not prepared:
            return []
        now_us = to_us(now)

        def work(conn: Conn) -> list[Changed | None]:
            out, released = runs.finish_many(conn, prepared, now_us, self._settle)
            if released:
                self._announce_ready(conn)  # released: another host's workers may take it
            return out

        doing = "finishing a task" if len(prepared) == 1 else "finishing tasks"
        result: list[Changed | None] = self._write(doing, work)
        return result

    def due_before(self, until: float, *, limit: int) -> list[tuple[str, float, str | None]]:
        rows = self._read(
            "SELECT id, due, schedule_id FROM tasks WHERE state = 'pending' AND unmet = 0 "
            "AND due < %s ORDER BY due, id LIMIT %s",
            (to_us(until), max(limit, 0)),
        )
        return [(task_id, from_us(due), schedule_id) for task_id, due, schedule_id in rows]

    def pending_among(self, task_ids: Sequence[str]) -> list[tuple[str, float, str | None]]:
        """``(id, due, schedule_id)`` of those of *task_ids* still PENDING with no unmet
        dependency, in one read (see :class:`~timewheel.stores.base.SupportsPendingAmong`)."""
        if not task_ids:
            return []
        rows = self._read(runs.PENDING_AMONG, (list(task_ids),))
        return [(task_id, from_us(due), schedule_id) for task_id, due, schedule_id in rows]

    def ready(self, *, limit: int, queues: Sequence[str] | None = None) -> list[Task]:
        if queues is not None and not queues:
            return []
        sql, params = _SEL + " WHERE state = 'ready'", []
        if queues is not None:
            sql += " AND queue = ANY(%s)"
            params.append(list(dict.fromkeys(queues)))
        rows = self._read(sql + " ORDER BY priority DESC, due LIMIT %s", (*params, max(limit, 0)))
        return [TASKS.decode(r) for r in rows]

    def expired_leases(self, now: float, *, limit: int) -> list[Task]:
        # on the server's clock, a lease is not expired before the server says so either
        guard = f" AND lease_expires < {_SERVER_NOW}" if self._clocks.active else ""
        rows = self._read(
            _SEL + " WHERE state = 'running' AND lease_expires < %s" + guard + " ORDER BY "
            "lease_expires LIMIT %s",
            (to_us(now), max(limit, 0)),
        )
        return [TASKS.decode(r) for r in rows]

    def count_by_state(self) -> dict[TaskState, int]:
        counts: dict[TaskState, int] = {}
        for s, n in self._read(schema.COUNT_BY_STATE):
            if n:
                counts[_STATES[s]] = counts.get(_STATES[s], 0) + n
        return counts

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
            where.append(schema.states_condition(states))
            params.append(states)
        if schedule_id is not None:
            where.append("schedule_id = %s")
            params.append(schedule_id)
        sql = _SEL + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY due, created, id"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(max(limit, 0))
        return [TASKS.decode(r) for r in self._read(sql, params)]

    def delete(self, task_id: str) -> bool:
        def work(conn: Conn) -> bool:
            cur = conn.execute("DELETE FROM tasks WHERE id = %s", (task_id,))
            if cur.rowcount == 0:
                return False
            conn.execute(
                "DELETE FROM deps WHERE upstream = %s OR downstream = %s", (task_id, task_id)
            )
            return True

        ok: bool = self._write("deleting a task", work)
        return ok

    def prune(
        self,
        *,
        before: float,
        states: Iterable[TaskState] | None = None,
        limit: int | None = None,
        keep: Collection[str] = (),
    ) -> int:
        """Delete terminal tasks (or those in *states*) last updated before *before*; the count.

        Without *limit*, deletes in transactions of at most a few hundred tasks, so other writers
        keep going. With *limit*, one transaction deletes at most *limit* tasks. Tasks whose id is
        in *keep* stay.
        """
        sts = sorted({TaskState(s).value for s in (TERMINAL_STATES if states is None else states)})
        if not sts or (limit is not None and limit <= 0):
            return 0
        before_us = to_us(before)
        kept = list(keep)
        batch = _PRUNE_BATCH if limit is None else min(limit, _PRUNE_BATCH)

        def work(conn: Conn) -> int:
            ids = [
                r[0]
                for r in conn.execute(
                    "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE "
                    f"{schema.states_condition(sts)} AND updated < %s AND NOT (id = ANY(%s)) "
                    "LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id",
                    (sts, before_us, kept, batch),
                )
            ]
            if ids:
                conn.execute(
                    "DELETE FROM deps WHERE upstream = ANY(%s) OR downstream = ANY(%s)", (ids, ids)
                )
            return len(ids)

        total = 0
        while True:
            n: int = self._write("pruning tasks", work)
            total += n
            if n < batch or (limit is not None and total >= limit):
                return total

    # -- schedules --------------------------------------------------------------------------------
    def put_schedule(
        self, record: ScheduleRecord, *, first: Task | None, on_conflict: OnConflict = "replace"
    ) -> ScheduleRecord:
        policy.check_on_conflict(on_conflict)
        policy.check_schedule(record)
        base = SCHEDULES.encode(record)
        first_base = None
        if first is not None:
            policy.check_task(first)
            first_base = TASKS.encode(policy.as_inserted(first))

        inserted: list[list[Any]] = []

        def work(conn: Conn) -> ScheduleRecord:
            inserted.clear()  # (a retried transaction starts over)
            srow = list(base)
            old = conn.execute(
                (_SSEL + " WHERE id = %s FOR UPDATE").encode(), (record.id,)
            ).fetchone()
            if old is not None:
                if policy.keep_existing_schedule(record.id, on_conflict):
                    return SCHEDULES.decode(old)
                self._cancel_instances(conn, record.id, to_us(record.updated))
                srow[_SCHEDULE_VERSION] = old[_SCHEDULE_VERSION] + 1
                conn.execute("DELETE FROM schedules WHERE id = %s", (record.id,))
            conn.execute(_SINS.encode(), srow)
            if first_base is not None:
                first_row = list(first_base)
                ex = conn.execute(
                    "SELECT state, version FROM tasks WHERE id = %s FOR UPDATE",
                    (first_row[_ID],),
                ).fetchone()
                if ex is None or _STATES[ex[0]] in TERMINAL_STATES:
                    if ex is not None:
                        # a reused id moves past the old version: a stale CAS cannot hit it
                        first_row[_VERSION] = ex[1] + 1
                        conn.execute("DELETE FROM deps WHERE downstream = %s", (first_row[_ID],))
                        conn.execute("DELETE FROM tasks WHERE id = %s", (first_row[_ID],))
                    conn.execute(_INS.encode(), first_row)
                    inserted.append(first_row)
            return SCHEDULES.decode(tuple(srow))

        result: ScheduleRecord = self._write("storing a schedule", work)
        for row in inserted:
            self._announce_inserted(row)
        return result

    def _cancel_instances(self, conn: Conn, schedule_id: str, now_us: int) -> None:
        states = sorted(s.value for s in policy.CANCELLABLE_STATES)
        rows = conn.execute(
            "SELECT id, version FROM tasks WHERE schedule_id = %s AND state = ANY(%s) "
            "ORDER BY id FOR UPDATE",
            (schedule_id, states),
        ).fetchall()
        for task_id, version in rows:
            self._cas(
                conn,
                task_id,
                version,
                "state = 'cancelled', version = version + 1, updated = %s, error = %s",
                (now_us, policy.SCHEDULE_GONE),
            )
            self._settle(conn, task_id, TaskState.CANCELLED, now_us)

    def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        rows = self._read(_SSEL + " WHERE id = %s", (schedule_id,))
        return SCHEDULES.decode(rows[0]) if rows else None

    def list_schedules(self) -> list[ScheduleRecord]:
        return [SCHEDULES.decode(r) for r in self._read(_SSEL + " ORDER BY id")]

    def update_schedule(
        self, schedule_id: str, *, expected_version: int, **changes: Any
    ) -> ScheduleRecord:
        policy.check_schedule_changes(changes)

        def work(conn: Conn) -> ScheduleRecord:
            old = conn.execute(
                (_SSEL + " WHERE id = %s FOR UPDATE").encode(), (schedule_id,)
            ).fetchone()
            if old is None:
                raise policy.schedule_not_found(schedule_id, self.where)
            rec = SCHEDULES.decode(old)
            if rec.version != expected_version:
                raise policy.schedule_version_conflict(schedule_id, rec.version, expected_version)
            new = rec.evolve(version=rec.version + 1, **changes)
            row = SCHEDULES.encode(new)
            sets = ", ".join(f"{c} = %s" for c in SCHEDULES.names[1:])
            cur = conn.execute(
                f"UPDATE schedules SET {sets} WHERE id = %s AND version = %s".encode(),
                (*row[1:], schedule_id, expected_version),
            )
            if cur.rowcount != 1:
                raise VersionConflictError(f"schedule {schedule_id!r} changed under a transaction")
            return SCHEDULES.decode(tuple(row))

        result: ScheduleRecord = self._write("updating a schedule", work)
        return result

    def delete_schedule(self, schedule_id: str) -> bool:
        def work(conn: Conn) -> bool:
            old = conn.execute(
                "DELETE FROM schedules WHERE id = %s RETURNING updated", (schedule_id,)
            ).fetchone()
            if old is None:
                return False
            self._cancel_instances(conn, schedule_id, old[0])
            return True

        ok: bool = self._write("deleting a schedule", work)
        return ok

    # -- inspection ---------------------------------------------------------------------------------
    def unresolvable(self) -> dict[str, int]:
        """Function references this process could not resolve -> READY tasks waiting on each."""
        bad = self._claimable.unclaimable()
        if not bad:
            return {}
        rows = self._read(
            "SELECT func, count(*) FROM tasks WHERE state = 'ready' AND func = ANY(%s) "
            "GROUP BY func",
            (bad,),
        )
        out: dict[str, int] = dict(rows)
        return {r: out.get(r, 0) for r in bad}

    # -- lifecycle --------------------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, *, create: bool = True, read_only: bool = False) -> PostgresStore:
        """Open ``postgresql://user@host:5432/db?schema=app1``.

        The store's own options (``schema``, ``pool_size``, ``retries``, ``connect_timeout``)
        are taken from the query; every other query parameter goes to libpq.

        Raises:
            StoreConfigError: an option is malformed.
        """
        dsn, options = parse_url(url)
        return cls(dsn, create=create, read_only=read_only, **options)

    def close(self) -> None:
        """Send the announcements gathered, then close this process's connections
        (idempotent); later use raises ``StoreError``."""
        self.announcer.close()
        with self._listener_lock:
            listener, self._listener = self._listener, None
        if listener is not None and listener.pid == os.getpid():
            listener.close()
        self._connections.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[..., PostgresStore], tuple[Any, ...]]:
        # a spawned process opens its own pool on the same schema (connections are never pickled)
        return (
            _reopen,
            (
                self._connections.dsn,
                self.schema,
                self.read_only,
                self.pool_size,
                self.retries,
                self.connect_timeout,
            ),
        )

    def __repr__(self) -> str:
        ro = ", read_only=True" if self.read_only else ""
        return f"PostgresStore({self.where!r}, schema={self.schema!r}{ro})"


def _reopen(
    dsn: str, schema_name: str, read_only: bool, pool_size: int, retries: int, timeout: float
) -> PostgresStore:
    return PostgresStore(
        dsn,
        schema=schema_name,
        create=False,
        read_only=read_only,
        pool_size=pool_size,
        retries=retries,
        connect_timeout=timeout,
    )


def _migrate(conn: Conn, name: str) -> None:
    conn.autocommit = False
    schema.migrate(conn, name)


def _require(conn: Conn, name: str, where: str) -> None:
    """Refuse a schema that holds no store, an older or a newer one."""
    schema.require(conn, name, where)
    conn.rollback()
