"""``SQLiteStore``: a durable store in one SQLite file, shared by threads and processes of one host.

Layout and guarantees
---------------------
* **WAL mode**, checked at open (``PRAGMA journal_mode=WAL`` must answer ``wal``). WAL needs
  shared memory beside the file (``<path>-wal``, ``<path>-shm``) and POSIX locks that work:
  **it does not work on network filesystems** (NFS, SMB, most FUSE and container bind mounts of
  them). Keep the file on a local disk; several *hosts* need a server database (PostgreSQL).
* **Every write is one ``BEGIN IMMEDIATE`` transaction** (connections use
  ``isolation_level=None``), so two writers never both read and then fail to upgrade a lock.
  Inside the transaction every state change is still a compare-and-swap on ``version``
  (``UPDATE ... WHERE id=? AND version=?``). Threads of one process also take a process-local
  lock around writes, so they queue on a mutex instead of on SQLite's sleeping busy handler.
* **One connection per thread** (``threading.local``), each with ``busy_timeout``; a connection is
  **never used across** ``fork()``: a child that inherits the store notices the new pid and opens
  its own connections. Inherited connections are deliberately leaked, never closed: closing the
  child's copy could drop the POSIX locks its own new connections hold on the same file.
* **Durability**: ``"durable"`` runs ``synchronous=FULL`` (a commit survives power loss).
  ``"fast"`` runs ``synchronous=NORMAL``: a commit survives a crash of the process, but a power
  loss or OS crash may roll back the last commits (those since the last checkpoint); the database
  stays consistent either way. Tasks rolled back that way are lost or run again: handlers must be
  idempotent anyway (at-least-once, see ``docs/stores.md``).
* **Checkpoints**: SQLite checkpoints the WAL automatically every ~1000 pages, but a reader that
  is always busy can starve it and the ``-wal`` file never shrinks by itself. The store runs
  ``wal_checkpoint(TRUNCATE)`` (with a short busy wait, skipped when the file is busy) when
  :meth:`claim_next` finds nothing to do, at most once a minute, and on :meth:`checkpoint`.

Encoding
--------
Instants (``due``, ``lease_expires``, ``created``, ``updated``) are **UTC epoch integers in
microseconds**: exact comparisons and ordering in SQL with no float surprises, readable with
``datetime(due / 1e6, 'unixepoch')``, and 64-bit range to the year 294,000. A float due time
keeps its value to the microsecond (round to nearest), far finer than the wheel's 1 ms tick.
``timeout`` is a duration (REAL seconds). ``func`` is a reference string (``timewheel.refs``);
``args``/``kwargs``/``extra``/``after`` are JSON; ``retry`` is JSON with ``retry_on`` as
``"module:qualname"`` strings (NULL for the default policy); a ``result`` is JSON, or its
``repr`` marked by ``result_repr = 1`` (read back as :class:`timewheel.refs.ResultRepr`).

A task whose function reference cannot be resolved *in this process* is still stored and read
(``func`` stays the string), but :meth:`claim_next` does not claim it: it stays READY for a
worker that can import it, a warning is logged once per reference, and
:meth:`unresolvable` reports the references and how many READY tasks wait on each.

Schema versions live in ``PRAGMA user_version`` (``application_id`` marks the file as
timewheel's); ``_MIGRATIONS[n]`` moves a database from version ``n`` to ``n + 1`` inside one
``BEGIN IMMEDIATE`` transaction at open. A file written by a newer timewheel raises
:class:`~timewheel.errors.SchemaVersionError` and is left untouched.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import random
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from timewheel import refs
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    SchemaVersionError,
    SerializationError,
    StoreCorruptError,
    StoreError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.stores.base import Changed, OnConflict
from timewheel.task import (
    EMPTY_KWARGS,
    NO_RETRY,
    TERMINAL_STATES,
    Retry,
    ScheduleRecord,
    Task,
    TaskState,
    check_transition,
    dependency_effect,
)

__all__ = ["SCHEMA_VERSION", "SQLiteStatistics", "SQLiteStore"]

log = logging.getLogger("timewheel.stores.sqlite")

Durability = Literal["durable", "fast"]

SCHEMA_VERSION = 1
"""The schema version this code writes (``PRAGMA user_version``)."""
APPLICATION_ID = 0x54574C31  # "TWL1": marks the file as a timewheel store (PRAGMA application_id)
_HEADER = b"SQLite format 3\x00"
_MIN_SQLITE = (3, 24, 0)
_CHUNK = 500  # ids per IN (...) list, well under SQLITE_MAX_VARIABLE_NUMBER
_IDLE_CHECKPOINT_EVERY = 60.0  # seconds between idle wal_checkpoint(TRUNCATE) attempts

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the initial schema
    (
        """CREATE TABLE tasks (
            id            TEXT PRIMARY KEY,
            func          TEXT NOT NULL,
            args          TEXT NOT NULL,              -- JSON array
            kwargs        TEXT NOT NULL,              -- JSON object
            due           INTEGER NOT NULL,           -- UTC epoch microseconds
            state         TEXT NOT NULL,
            version       INTEGER NOT NULL,
            attempts      INTEGER NOT NULL,
            retry         TEXT,                       -- JSON, NULL = no retries
            priority      INTEGER NOT NULL,
            queue         TEXT NOT NULL,
            timeout       REAL,                       -- seconds
            lease_owner   TEXT,
            lease_expires INTEGER,                    -- UTC epoch microseconds
            created       INTEGER NOT NULL,
            updated       INTEGER NOT NULL,
            result        TEXT,                       -- JSON, or a repr when result_repr = 1
            result_repr   INTEGER NOT NULL DEFAULT 0,
            error         TEXT,
            schedule_id   TEXT,
            after         TEXT,                       -- JSON array of upstream ids, NULL = none
            unmet         INTEGER NOT NULL DEFAULT 0,
            when_         TEXT NOT NULL DEFAULT 'all_success',
            extra         TEXT                        -- JSON object, NULL = empty
        )""",
        # due_before: PENDING, unmet = 0, by due (covering)
        "CREATE INDEX tasks_due ON tasks(due, id) WHERE state = 'pending' AND unmet = 0",
        # claim_next / ready: READY by priority then due; queue in the index to filter lanes
        "CREATE INDEX tasks_ready ON tasks(priority DESC, due, queue) WHERE state = 'ready'",
        # expired_leases
        "CREATE INDEX tasks_lease ON tasks(lease_expires) WHERE state = 'running'",
        # count_by_state, tasks(state=), prune, inspect queries
        "CREATE INDEX tasks_state ON tasks(state, due)",
        "CREATE INDEX tasks_schedule ON tasks(schedule_id) WHERE schedule_id IS NOT NULL",
        """CREATE TABLE deps (
            upstream   TEXT NOT NULL,
            downstream TEXT NOT NULL,
            PRIMARY KEY (upstream, downstream)
        ) WITHOUT ROWID""",
        "CREATE INDEX deps_downstream ON deps(downstream)",
        """CREATE TABLE schedules (
            id       TEXT PRIMARY KEY,
            func     TEXT NOT NULL,
            args     TEXT NOT NULL,
            kwargs   TEXT NOT NULL,
            rule     TEXT NOT NULL,                   -- JSON
            options  TEXT NOT NULL,                   -- JSON
            paused   INTEGER NOT NULL,
            version  INTEGER NOT NULL,
            created  INTEGER NOT NULL,
            updated  INTEGER NOT NULL
        )""",
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

_COLS = (
    "id",
    "func",
    "args",
    "kwargs",
    "due",
    "state",
    "version",
    "attempts",
    "retry",
    "priority",
    "queue",
    "timeout",
    "lease_owner",
    "lease_expires",
    "created",
    "updated",
    "result",
    "result_repr",
    "error",
    "schedule_id",
    "after",
    "unmet",
    "when_",
    "extra",
)
_SEL = "SELECT " + ", ".join(_COLS) + " FROM tasks"
# The hot queries name their index: without ANALYZE statistics the planner may prefer tasks_state
# and sort; INDEXED BY makes the plan fixed (and fails loudly if the index cannot serve it).
_SEL_READY = _SEL + " INDEXED BY tasks_ready"
# one read for finish: the row and whether any task waits on it
_SEL_WITH_DEPS = (
    "SELECT " + ", ".join(_COLS) + ", EXISTS (SELECT 1 FROM deps WHERE upstream = tasks.id) "
    "FROM tasks WHERE id = ?"
)
_INS = f"INSERT INTO tasks ({', '.join(_COLS)}) VALUES ({', '.join('?' * len(_COLS))})"
_I = {c: i for i, c in enumerate(_COLS)}
_VERSION, _STATE, _FUNC, _LEASE_OWNER = _I["version"], _I["state"], _I["func"], _I["lease_owner"]
_SCOLS = (
    "id",
    "func",
    "args",
    "kwargs",
    "rule",
    "options",
    "paused",
    "version",
    "created",
    "updated",
)
_SSEL = "SELECT " + ", ".join(_SCOLS) + " FROM schedules"

_P, _R, _RUN = TaskState.PENDING, TaskState.READY, TaskState.RUNNING
_STATES = {s.value: s for s in TaskState}
_FAILED_STATES = (TaskState.FAILED, TaskState.TIMED_OUT, TaskState.UPSTREAM_FAILED)

# Inherited connections after fork(): kept referenced forever so they are never closed (closing
# would release the child's own POSIX locks on the file). One per thread that used the store.
_ORPHANS: list[sqlite3.Connection] = []

Row = tuple[Any, ...]


# -- encoding --------------------------------------------------------------------------------------
def _us(t: float) -> int:
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        raise InvalidScheduleError(f"a time must be finite epoch seconds (got {t!r})")
    return round(t * 1_000_000)


def _us_opt(t: float | None) -> int | None:
    return None if t is None else _us(t)


def _sec(us: int) -> float:
    return us / 1_000_000


def _sec_opt(us: int | None) -> float | None:
    return None if us is None else us / 1_000_000


_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode


def _dumps_lenient(value: Any, what: str) -> str:
    try:
        return _dumps(value)
    except (TypeError, ValueError) as e:
        raise SerializationError(f"{what} cannot be stored as JSON: {e}") from None


def _enc_args(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]:
    refs.check_json(args, kwargs)
    return (_dumps(list(args)) if args else "[]", _dumps(dict(kwargs)) if kwargs else "{}")


def _dec_args(s: str) -> tuple[Any, ...]:
    return () if s == "[]" else tuple(json.loads(s))


def _dec_kwargs(s: str) -> Mapping[str, Any]:
    kw: Mapping[str, Any] = EMPTY_KWARGS if s == "{}" else json.loads(s)
    return kw


def _enc_retry(r: Retry) -> str | None:
    if r == NO_RETRY:
        return None
    if not isinstance(r, Retry):
        raise SerializationError(f"retry must be a timewheel.Retry (got {r!r})")
    return _dumps(r.to_spec())


@functools.lru_cache(maxsize=256)
def _dec_retry(s: str) -> Retry:
    return Retry.from_spec(json.loads(s))


def _enc_result(v: Any) -> tuple[str | None, int]:
    if v is None:
        return None, 0
    if isinstance(v, refs.ResultRepr):
        return str(v), 1
    try:
        return _dumps(v), 0
    except (TypeError, ValueError):
        return repr(v), 1


def _dec_result(s: str | None, is_repr: int) -> Any:
    if s is None:
        return None
    return refs.ResultRepr(s) if is_repr else json.loads(s)


def _enc_extra(v: Mapping[str, Any]) -> str | None:
    if not v:
        return None
    refs.check_json_value(dict(v), "extra")
    return _dumps(dict(v))


def _enc_task(t: Task) -> Row:
    args, kwargs = _enc_args(t.args, t.kwargs)
    res, res_repr = _enc_result(t.result)
    return (
        t.id,
        refs.func_ref(t.func),
        args,
        kwargs,
        _us(t.due),
        t.state.value,
        t.version,
        t.attempts,
        _enc_retry(t.retry),
        t.priority,
        t.queue,
        t.timeout,
        t.lease_owner,
        _us_opt(t.lease_expires),
        _us(t.created),
        _us(t.updated),
        res,
        res_repr,
        t.error,
        t.schedule_id,
        _dumps(list(t.after)) if t.after else None,
        t.unmet,
        t.when,
        _enc_extra(t.extra),
    )


def _dec_task(r: Row, ov: Mapping[str, Any] | None = None) -> Task:
    """The task a row holds, with the fields in *ov* replaced (one constructor call)."""
    kw: dict[str, Any] = {
        "id": r[0],
        "func": r[1],
        "args": _dec_args(r[2]),
        "kwargs": _dec_kwargs(r[3]),
        "due": r[4] / 1e6,
        "state": _STATES[r[5]],
        "version": r[6],
        "attempts": r[7],
        "retry": NO_RETRY if r[8] is None else _dec_retry(r[8]),
        "priority": r[9],
        "queue": r[10],
        "timeout": r[11],
        "lease_owner": r[12],
        "lease_expires": _sec_opt(r[13]),
        "created": r[14] / 1e6,
        "updated": r[15] / 1e6,
        "result": _dec_result(r[16], r[17]),
        "error": r[18],
        "schedule_id": r[19],
        "after": () if r[20] is None else tuple(json.loads(r[20])),
        "unmet": r[21],
        "when": r[22],
        "extra": EMPTY_KWARGS if r[23] is None else json.loads(r[23]),
    }
    if ov:
        kw.update(ov)
    return Task(**kw)


def _validate_task(t: Task) -> None:
    if not isinstance(t.id, str) or not t.id:
        raise InvalidScheduleError(f"a task id must be a non-empty str (got {t.id!r})")
    if t.when not in ("all_success", "all_done", "any_failed"):
        raise InvalidScheduleError(
            f"when must be 'all_success', 'all_done' or 'any_failed' (got {t.when!r})"
        )


# Fields a transition/finish may change: name -> (encode to column values, decode back).
def _change_columns(changes: Mapping[str, Any]) -> tuple[list[str], list[Any], dict[str, Any]]:
    """Columns and values for *changes*, and the changes as a read would give them back."""
    cols: list[str] = []
    vals: list[Any] = []
    stored: dict[str, Any] = {}
    for k, v in changes.items():
        if k in ("due", "created"):
            cols.append(k)
            vals.append(_us(v))
            stored[k] = _sec(vals[-1])
        elif k == "lease_expires":
            cols.append(k)
            vals.append(_us_opt(v))
            stored[k] = _sec_opt(vals[-1])
        elif k in ("attempts", "priority"):
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidScheduleError(f"{k} must be an int (got {v!r})")
            cols.append(k)
            vals.append(v)
            stored[k] = v
        elif k in ("lease_owner", "error", "schedule_id", "queue"):
            if v is not None and not isinstance(v, str):
                raise InvalidScheduleError(f"{k} must be a str or None (got {v!r})")
            if k == "queue" and v is None:
                raise InvalidScheduleError("queue must be a str (got None)")
            cols.append(k)
            vals.append(v)
            stored[k] = v
        elif k == "timeout":
            cols.append(k)
            vals.append(None if v is None else float(v))
            stored[k] = vals[-1]
        elif k == "result":
            s, is_repr = _enc_result(v)
            cols += ["result", "result_repr"]
            vals += [s, is_repr]
            stored[k] = _dec_result(s, is_repr)
        elif k == "retry":
            s = _enc_retry(v)
            cols.append(k)
            vals.append(s)
            stored[k] = NO_RETRY if s is None else _dec_retry(s)
        elif k == "extra":
            s = _enc_extra(v)
            cols.append(k)
            vals.append(s)
            stored[k] = EMPTY_KWARGS if s is None else json.loads(s)
        elif k == "func":
            cols.append(k)
            vals.append(refs.func_ref(v))
            stored[k] = vals[-1]
        elif k in ("args", "kwargs"):
            a, kw = _enc_args(v, {}) if k == "args" else _enc_args((), v)
            cols.append(k)
            vals.append(a if k == "args" else kw)
            stored[k] = _dec_args(a) if k == "args" else _dec_kwargs(kw)
        else:
            raise TypeError(
                f"cannot change {k!r} in a transition: the store manages id, state, version, "
                "updated and the dependency fields (after, unmet, when)"
            )
    return cols, vals, stored


def _sql_in(n: int) -> str:
    return ",".join("?" * n)


def _chunks(seq: Sequence[str], n: int = _CHUNK) -> Iterator[Sequence[str]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _translate(path: str, e: sqlite3.Error, doing: str) -> StoreError:
    msg = str(e)
    if isinstance(e, sqlite3.DatabaseError) and any(
        s in msg for s in ("malformed", "not a database", "corrupt")
    ):
        return StoreCorruptError(
            f"timewheel store {path!r} is damaged ({msg}) while {doing}; run "
            "SQLiteStore.integrity_check(), restore a backup or move the file aside"
        )
    if "locked" in msg or "busy" in msg:
        return StoreError(
            f"timewheel store {path!r} stayed locked by another connection while {doing} ({msg}); "
            "a long transaction elsewhere holds it: raise busy_timeout or find the holder"
        )
    if "readonly" in msg or "read-only" in msg:
        return StoreError(
            f"timewheel store {path!r} is read-only ({msg}) while {doing}; make the file and "
            "its directory writable"
        )
    return StoreError(f"timewheel store {path!r} failed while {doing}: {msg}")


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


class SQLiteStore:
    """Tasks and schedules in one SQLite file; every change is a compare-and-swap on ``version``.

    Args:
        path: the database file. Its directory must exist and be writable (WAL keeps
            ``<path>-wal`` and ``<path>-shm`` beside it). Created when missing.
        durability: ``"durable"`` (``synchronous=FULL``: a commit survives power loss) or
            ``"fast"`` (``synchronous=NORMAL``: a power loss may roll back the last commits; the
            file stays consistent, and a process crash loses nothing).
        busy_timeout: seconds a connection waits for another process's write lock before
            :class:`~timewheel.errors.StoreError`.

    Raises:
        StoreCorruptError: the file is not an SQLite database, is damaged, or belongs to
            another application.
        SchemaVersionError: a newer timewheel wrote the file.
        StoreError: the file or its directory is read-only or missing, or WAL is not available.

    The file is left untouched by each of these errors. Thread-safe; safe to share across
    ``fork()`` (each process opens its own connections) and picklable for spawned processes
    (the copy reopens the path). Runtime complexity: single-task operations are O(log n);
    ``claim_next`` and ``promote`` are O(batch * log n) in one transaction.
    """

    durable = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "durable",
        busy_timeout: float = 5.0,
    ) -> None:
        if sqlite3.sqlite_version_info < _MIN_SQLITE:
            raise StoreError(
                f"SQLiteStore needs SQLite >= {'.'.join(map(str, _MIN_SQLITE))} "
                f"(this Python has {sqlite3.sqlite_version})"
            )
        if durability not in ("durable", "fast"):
            raise InvalidScheduleError(
                f"durability must be 'durable' or 'fast' (got {durability!r})"
            )
        if (
            isinstance(busy_timeout, bool)
            or not isinstance(busy_timeout, (int, float))
            or not math.isfinite(busy_timeout)
            or busy_timeout < 0
        ):
            raise InvalidScheduleError(f"busy_timeout must be seconds >= 0 (got {busy_timeout!r})")
        raw = os.fspath(path)
        if raw in ("", ":memory:") or raw.startswith("file:"):
            raise StoreError(
                f"SQLiteStore needs a file path (got {raw!r}); for a store in memory use "
                "MemoryStore"
            )
        self.path = os.path.abspath(raw)
        self.durability: Durability = durability
        self.busy_timeout = float(busy_timeout)
        self._busy_pragma = f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}"
        self._pid = os.getpid()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._meta = threading.Lock()
        self._wlock = threading.Lock()
        self._closed = False
        self._resolvable: dict[str, bool] = {}
        self._resolvable_gen = refs.generation()
        self._warned: set[str] = set()
        self._last_checkpoint = time.monotonic()
        conn = self._open()
        self._local.conn = conn
        self._local.pid = self._pid
        self._conns.append(conn)

    # -- opening --------------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        """Check the file, connect, verify WAL and migrate; leave the file untouched on error."""
        path = self.path
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            raise StoreError(
                f"cannot open timewheel store {path!r}: its directory {parent!r} does not exist; "
                "create it first (e.g. os.makedirs(dir, exist_ok=True))"
            )
        exists = os.path.exists(path)
        if exists:
            if os.path.isdir(path):
                raise StoreError(f"cannot open timewheel store {path!r}: it is a directory")
            try:
                with open(path, "rb") as f:
                    head = f.read(100)
            except OSError as e:
                raise StoreError(f"cannot read timewheel store {path!r}: {e}") from e
            if head and not head.startswith(_HEADER):
                raise StoreCorruptError(
                    f"{path!r} is not an SQLite database (it starts with {head[:16]!r}); point "
                    "SQLiteStore at a new path or move the file aside"
                )
            if not _writable(path):
                raise StoreError(
                    f"timewheel store {path!r} is read-only; the store writes on every change: "
                    "make it writable (chmod u+w) or open a copy"
                )
        if not _writable(parent):
            raise StoreError(
                f"the directory {parent!r} of timewheel store {path!r} is read-only; SQLite in "
                "WAL mode creates <file>-wal and <file>-shm beside the file: make it writable"
            )
        try:
            conn = self._connect(create=not exists)
        except sqlite3.Error as e:
            raise _translate(path, e, "opening") from e
        try:
            self._check_and_migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect(self, *, create: bool = False) -> sqlite3.Connection:
        mode = "rwc" if create else "rw"
        uri = "file:" + _quote_path(self.path) + f"?mode={mode}"
        conn = sqlite3.connect(
            uri,
            uri=True,
            isolation_level=None,
            check_same_thread=False,  # each connection is used by one thread; close() from any
            timeout=self.busy_timeout,
            cached_statements=256,
        )
        conn.execute(self._busy_pragma)
        return conn

    def _configure(self, conn: sqlite3.Connection) -> None:
        sync = "FULL" if self.durability == "durable" else "NORMAL"
        conn.execute(f"PRAGMA synchronous = {sync}")
        conn.execute("PRAGMA temp_store = MEMORY")

    def _check_and_migrate(self, conn: sqlite3.Connection) -> None:
        path = self.path
        try:  # reads only: a bad file raises here, before anything is written
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.DatabaseError as e:
            raise StoreCorruptError(
                f"{path!r} is not a usable SQLite database ({e}); restore a backup, or move the "
                "file aside and start with an empty store"
            ) from e
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
            raise StoreCorruptError(
                f"{path!r} is an SQLite database of another application (application_id "
                f"{app_id:#x}, tables {sorted(tables)}); give timewheel its own file"
            )
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"timewheel store {path!r} has schema version {version}, newer than this "
                f"timewheel understands ({SCHEMA_VERSION}); upgrade timewheel, or open a "
                "different file"
            )
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.Error as e:
            raise _translate(path, e, "switching to WAL mode") from e
        if str(mode).lower() != "wal":
            raise StoreError(
                f"timewheel store {path!r} could not use WAL mode (journal_mode is {mode!r}); "
                "WAL needs shared memory and working file locks, which network filesystems "
                "(NFS, SMB) lack: put the file on a local filesystem"
            )
        self._configure(conn)
        if version == SCHEMA_VERSION:
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]  # another opener?
                for v in range(version, SCHEMA_VERSION):
                    for stmt in _MIGRATIONS[v]:
                        conn.execute(stmt)
                    log.info("migrated %s to schema version %d", path, v + 1)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise _translate(path, e, "creating the schema") from e

    # -- connections -----------------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        local = self._local
        pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == pid:
            return conn
        if self._closed:
            raise StoreError(f"timewheel store {self.path!r} is closed; open a new SQLiteStore")
        if pid != self._pid:
            self._after_fork(pid)
        try:
            conn = self._connect()
            self._configure(conn)
        except sqlite3.Error as e:
            raise _translate(self.path, e, "opening a connection") from e
        local.conn = conn
        local.pid = pid
        with self._meta:
            self._conns.append(conn)
        return conn

    def _after_fork(self, pid: int) -> None:
        # Runs in the child: the parent's connections (and locks) must not be used or closed.
        _ORPHANS.extend(self._conns)
        self._conns = []
        self._meta = threading.Lock()
        self._wlock = threading.Lock()
        self._pid = pid

    @contextmanager
    def _tx(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` write transaction; SQLite errors become StoreError."""
        conn = self._db()
        with self._wlock:
            try:
                self._begin(conn)
            except sqlite3.Error as e:
                raise _translate(self.path, e, doing) from e
            try:
                yield conn
            except BaseException as e:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the error already ended the transaction
                if isinstance(e, sqlite3.Error):
                    raise _translate(self.path, e, doing) from e
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as e:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                    raise _translate(self.path, e, doing) from e

    def _begin(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, waiting for another process's write lock at most busy_timeout.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between attempts, leaving the lock
        idle while writers that hold it for ~50 us come and go. Here the wait starts at ~20 us
        and backs off (with jitter) to at most 1 ms, so waiting writers take the lock soon after
        it is released. The connection's busy_timeout is set to 0 only around this statement.
        """
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if not _is_busy(e):
                    raise
            deadline = time.monotonic() + self.busy_timeout
            delay = 2e-5
            while True:
                time.sleep(delay * (0.5 + random.random()))
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as e:
                    if not _is_busy(e) or time.monotonic() >= deadline:
                        raise
                delay = min(delay * 1.5, 1e-3)
        finally:
            conn.execute(self._busy_pragma)

    def _read(self, sql: str, params: Sequence[Any] = (), doing: str = "reading") -> list[Row]:
        try:
            return self._db().execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise _translate(self.path, e, doing) from e

    # -- internals --------------------------------------------------------------------------------
    def _row(self, conn: sqlite3.Connection, task_id: str) -> Row | None:
        r: Row | None = conn.execute(_SEL + " WHERE id = ?", (task_id,)).fetchone()
        return r

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
        out: list[Task] = []
        stack: list[tuple[str, TaskState]] = [(up_id, up_state)]
        while stack:
            up_id, up_state = stack.pop()
            downs = [
                r[0]
                for r in conn.execute("SELECT downstream FROM deps WHERE upstream = ?", (up_id,))
            ]
            if not downs:
                continue
            conn.execute("DELETE FROM deps WHERE upstream = ?", (up_id,))
            for dep_id in downs:
                row = self._row(conn, dep_id)
                if row is None:
                    continue
                dep = _dec_task(row)
                if dep.state is not _P or dep.unmet <= 0:
                    continue
                unmet, terminal, error = dependency_effect(dep.when, up_state, dep.unmet)
                now = _sec(now_us)
                if terminal is not None:
                    self._cas(
                        conn,
                        dep.id,
                        dep.version,
                        "state = ?, unmet = ?, error = ?, version = version + 1, updated = ?",
                        (terminal.value, unmet, error, now_us),
                    )
                    new = dep.evolve(
                        state=terminal,
                        version=dep.version + 1,
                        unmet=unmet,
                        error=error,
                        updated=now,
                    )
                    stack.append((dep.id, terminal))
                else:
                    self._cas(
                        conn,
                        dep.id,
                        dep.version,
                        "unmet = ?, version = version + 1, updated = ?",
                        (unmet, now_us),
                    )
                    new = dep.evolve(unmet=unmet, version=dep.version + 1, updated=now)
                out.append(new)
        return tuple(out)

    def _bad_refs(self) -> list[str]:
        """References known not to resolve here (forgotten when the name registry changes)."""
        gen = refs.generation()
        if gen != self._resolvable_gen:
            self._resolvable = {k: v for k, v in list(self._resolvable.items()) if v}
            self._resolvable_gen = gen
        return [r for r, ok in list(self._resolvable.items()) if not ok]

    def _resolves(self, ref: str) -> bool:
        ok = self._resolvable.get(ref)
        if ok is None:
            try:
                refs.resolve_ref(ref)
                ok = True
            except refs.UnresolvableRefError as e:
                ok = False
                if ref not in self._warned:
                    self._warned.add(ref)
                    log.warning(
                        "not claiming READY tasks of %s in process %d: %s; they stay READY for "
                        "a worker that can import it (see SQLiteStore.unresolvable())",
                        ref,
                        os.getpid(),
                        e,
                    )
            self._resolvable[ref] = ok
        return ok

    # -- tasks ------------------------------------------------------------------------------------
    def insert(self, task: Task, *, on_conflict: OnConflict = "error") -> Changed:
        if on_conflict not in ("error", "keep", "replace"):
            raise InvalidScheduleError(
                f"on_conflict must be 'error', 'keep' or 'replace' (got {on_conflict!r})"
            )
        _validate_task(task)
        base = task.evolve(
            state=_P,
            version=0,
            updated=task.created,
            unmet=0,
            error=None,
            lease_owner=None,
            lease_expires=None,
        )
        row = list(_enc_task(base))
        with self._tx("inserting a task") as conn:
            old = self._row(conn, task.id)
            if old is not None:
                if on_conflict == "keep":
                    return Changed(_dec_task(old))
                if on_conflict == "error":
                    raise DuplicateKeyError(
                        f"a task with id {task.id!r} already exists (state {old[_STATE]}); "
                        "pass on_conflict='keep' or 'replace', or choose another id"
                    )
                if old[_STATE] == _RUN.value:
                    raise VersionConflictError(
                        f"task {task.id!r} is running and cannot be replaced; wait for it or "
                        "schedule under another id"
                    )
            ups: list[tuple[str, TaskState]] = []
            for up_id in dict.fromkeys(task.after):
                r = conn.execute("SELECT state FROM tasks WHERE id = ?", (up_id,)).fetchone()
                if r is None:
                    raise TaskNotFoundError(
                        f"task {task.id!r} depends on {up_id!r}, which does not exist; schedule "
                        "the upstream task first"
                    )
                ups.append((up_id, _STATES[r[0]]))
            unmet = len(ups)
            terminal: TaskState | None = None
            error: str | None = None
            for _, st in ups:
                if st in TERMINAL_STATES and terminal is None and unmet > 0:
                    unmet, terminal, err = dependency_effect(task.when, st, unmet)
                    if terminal is not None:
                        error = err
            if terminal is None:
                unmet = max(unmet, 0)
            row[_STATE] = (terminal or _P).value
            row[_I["unmet"]] = unmet
            row[_I["error"]] = error
            if old is not None:
                row[_VERSION] = old[_VERSION] + 1
                conn.execute("DELETE FROM deps WHERE downstream = ?", (task.id,))
                conn.execute("DELETE FROM tasks WHERE id = ?", (task.id,))
            conn.execute(_INS, row)
            if terminal is None and unmet > 0:
                conn.executemany(
                    "INSERT OR IGNORE INTO deps (upstream, downstream) VALUES (?, ?)",
                    [(u, task.id) for u, st in ups if st not in TERMINAL_STATES],
                )
            new = _dec_task(tuple(row))
            deps = (
                self._settle(conn, new.id, new.state, row[_I["updated"]])
                if terminal is not None
                else ()
            )
            return Changed(new, deps)

    def insert_many(self, tasks: Sequence[Task]) -> None:
        seen: set[str] = set()
        rows: list[Row] = []
        for t in tasks:
            if t.id in seen:
                raise DuplicateKeyError(
                    f"task id {t.id!r} appears twice in insert_many; none inserted"
                )
            if t.after:
                raise InvalidScheduleError(
                    f"insert_many does not take dependencies (task {t.id!r}); use insert()"
                )
            _validate_task(t)
            seen.add(t.id)
            rows.append(
                _enc_task(
                    t.evolve(
                        state=_P,
                        version=0,
                        updated=t.created,
                        unmet=0,
                        lease_owner=None,
                        lease_expires=None,
                    )
                )
            )
        if not rows:
            return
        with self._tx("inserting tasks") as conn:
            try:
                conn.executemany(_INS, rows)
            except sqlite3.IntegrityError:
                ids = list(seen)
                dup = next(
                    r[0]
                    for chunk in _chunks(ids)
                    for r in conn.execute(
                        f"SELECT id FROM tasks WHERE id IN ({_sql_in(len(chunk))})", tuple(chunk)
                    )
                )
                raise DuplicateKeyError(
                    f"a task with id {dup!r} already exists; none of the {len(rows)} tasks were "
                    "inserted"
                ) from None

    def get(self, task_id: str) -> Task:
        t = self.find(task_id)
        if t is None:
            raise TaskNotFoundError(f"no task with id {task_id!r} in {self.path!r}")
        return t

    def find(self, task_id: str) -> Task | None:
        rows = self._read(_SEL + " WHERE id = ?", (task_id,))
        return _dec_task(rows[0]) if rows else None

    def transition(
        self, task_id: str, *, expected_version: int, state: TaskState, now: float, **changes: Any
    ) -> Changed:
        state = TaskState(state)
        cols, vals, stored = _change_columns(changes)
        now_us = _us(now)
        with self._tx("changing a task's state") as conn:
            row = self._row(conn, task_id)
            if row is None:
                raise TaskNotFoundError(f"no task with id {task_id!r} in {self.path!r}")
            if row[_VERSION] != expected_version:
                raise VersionConflictError(
                    f"task {task_id!r} is at version {row[_VERSION]} ({row[_STATE]}), not "
                    f"{expected_version}: another actor changed it first; re-read and decide again"
                )
            check_transition(task_id, _STATES[row[_STATE]], state)
            sets = "state = ?, version = version + 1, updated = ?"
            sets += "".join(f", {c} = ?" for c in cols)
            self._cas(conn, task_id, expected_version, sets, (state.value, now_us, *vals))
            deps = self._settle(conn, task_id, state, now_us) if state in TERMINAL_STATES else ()
        # decoding happens after COMMIT: the write lock is held only for the SQL
        stored.update(state=state, version=expected_version + 1, updated=_sec(now_us))
        return Changed(_dec_task(row, stored), deps)

    def promote(
        self, task_ids: Sequence[str], now: float, *, successors: Sequence[Task] = ()
    ) -> list[Task]:
        now_us = _us(now)
        succ_rows = []
        for s in successors:
            _validate_task(s)
            succ_rows.append(
                _enc_task(
                    s.evolve(
                        state=_P,
                        version=0,
                        updated=s.created,
                        unmet=0,
                        lease_owner=None,
                        lease_expires=None,
                    )
                )
            )
        ids = list(dict.fromkeys(task_ids))
        if not ids and not succ_rows:
            return []
        moved_rows: list[Row] = []
        now_s = _sec(now_us)
        with self._tx("promoting tasks") as conn:
            for chunk in _chunks(ids):
                rows = conn.execute(
                    f"{_SEL} WHERE id IN ({_sql_in(len(chunk))}) AND state = 'pending' "
                    "AND unmet = 0 AND due <= ?",
                    (*chunk, now_us),
                ).fetchall()
                if not rows:
                    continue
                cur = conn.executemany(
                    "UPDATE tasks SET state = 'ready', version = version + 1, updated = ? "
                    "WHERE id = ? AND version = ?",
                    [(now_us, r[0], r[_VERSION]) for r in rows],
                )
                if cur.rowcount != len(rows):
                    raise VersionConflictError("tasks changed under a promote transaction")
                moved_rows.extend(rows)
            if succ_rows:
                conn.executemany(_INS.replace("INSERT", "INSERT OR IGNORE", 1), succ_rows)
        order = {tid: i for i, tid in enumerate(ids)}
        moved_rows.sort(key=lambda r: order[r[0]])
        return [
            _dec_task(r, {"state": _R, "version": r[_VERSION] + 1, "updated": now_s})
            for r in moved_rows
        ]

    def claim(
        self, task_id: str, *, expected_version: int, owner: str, lease_expires: float, now: float
    ) -> Task | None:
        lease_us, now_us = _us(lease_expires), _us(now)
        with self._tx("claiming a task") as conn:
            row = self._row(conn, task_id)
            if row is None or row[_VERSION] != expected_version or row[_STATE] != _R.value:
                return None
            self._cas(
                conn,
                task_id,
                expected_version,
                "state = 'running', version = version + 1, attempts = attempts + 1, "
                "lease_owner = ?, lease_expires = ?, updated = ?",
                (owner, lease_us, now_us),
            )
            t = _dec_task(row)
            return t.evolve(
                state=_RUN,
                version=t.version + 1,
                attempts=t.attempts + 1,
                lease_owner=owner,
                lease_expires=_sec(lease_us),
                updated=_sec(now_us),
            )

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
        lease_us, now_us = _us(lease_expires), _us(now)
        where = "state = 'ready'"
        qparams: tuple[Any, ...] = ()
        if queues is not None:
            qs = list(dict.fromkeys(queues))
            where += f" AND queue IN ({_sql_in(len(qs))})"
            qparams = tuple(qs)
        with self._tx("claiming tasks") as conn:
            while True:
                bad = self._bad_refs()
                sql = f"{_SEL_READY} WHERE {where}"
                if bad:
                    sql += f" AND func NOT IN ({_sql_in(len(bad))})"
                sql += " ORDER BY priority DESC, due LIMIT ?"
                rows = conn.execute(sql, (*qparams, *bad, limit)).fetchall()
                # every function of the batch is checked (no short-circuit): bad ones are excluded
                funcs = {r[_FUNC] for r in rows}
                if sum(not self._resolves(f) for f in funcs) == 0:
                    break
            if rows:
                cur = conn.executemany(
                    "UPDATE tasks SET state = 'running', version = version + 1, "
                    "attempts = attempts + 1, lease_owner = ?, lease_expires = ?, updated = ? "
                    "WHERE id = ? AND version = ?",
                    [(owner, lease_us, now_us, r[0], r[_VERSION]) for r in rows],
                )
                if cur.rowcount != len(rows):
                    raise VersionConflictError("tasks changed under a claim transaction")
        if not rows:
            self._maybe_idle_checkpoint()
            return []
        ov = {"state": _RUN, "lease_owner": owner, "lease_expires": _sec(lease_us)}
        ov["updated"] = _sec(now_us)
        return [
            _dec_task(r, {**ov, "version": r[_VERSION] + 1, "attempts": r[7] + 1}) for r in rows
        ]

    def heartbeat(self, task_id: str, *, owner: str, lease_expires: float, now: float) -> bool:
        lease_us, now_us = _us(lease_expires), _us(now)
        with self._tx("extending a lease") as conn:
            cur = conn.execute(
                "UPDATE tasks SET lease_expires = ?, version = version + 1, updated = ? "
                "WHERE id = ? AND state = 'running' AND lease_owner = ?",
                (lease_us, now_us, task_id, owner),
            )
            return cur.rowcount == 1

    def finish(
        self, task_id: str, *, owner: str, state: TaskState, now: float, **changes: Any
    ) -> Changed | None:
        state = TaskState(state)
        if "lease_owner" in changes or "lease_expires" in changes:
            raise TypeError("finish clears the lease itself: do not pass lease_owner/lease_expires")
        cols, vals, stored = _change_columns(changes)
        now_us = _us(now)
        with self._tx("finishing a task") as conn:
            row = conn.execute(_SEL_WITH_DEPS, (task_id,)).fetchone()
            if row is None or row[_STATE] != _RUN.value or row[_LEASE_OWNER] != owner:
                return None
            check_transition(task_id, _RUN, state)
            sets = "state = ?, version = version + 1, updated = ?, lease_owner = NULL, "
            sets += "lease_expires = NULL" + "".join(f", {c} = ?" for c in cols)
            self._cas(conn, task_id, row[_VERSION], sets, (state.value, now_us, *vals))
            has_deps = row[-1] and state in TERMINAL_STATES
            deps = self._settle(conn, task_id, state, now_us) if has_deps else ()
        stored.update(state=state, version=row[_VERSION] + 1, updated=_sec(now_us))
        return Changed(_dec_task(row, {**stored, "lease_owner": None, "lease_expires": None}), deps)

    def due_before(self, until: float, *, limit: int) -> list[tuple[str, float]]:
        rows = self._read(
            "SELECT id, due FROM tasks INDEXED BY tasks_due "
            "WHERE state = 'pending' AND unmet = 0 AND due < ? "
            "ORDER BY due, id LIMIT ?",
            (_us(until), max(limit, 0)),
        )
        return [(r[0], r[1] / 1e6) for r in rows]

    def ready(self, *, limit: int, queues: Sequence[str] | None = None) -> list[Task]:
        if queues is not None and not queues:
            return []
        sql, params = f"{_SEL_READY} WHERE state = 'ready'", []
        if queues is not None:
            qs = list(dict.fromkeys(queues))
            sql += f" AND queue IN ({_sql_in(len(qs))})"
            params += qs
        rows = self._read(sql + " ORDER BY priority DESC, due LIMIT ?", (*params, max(limit, 0)))
        return [_dec_task(r) for r in rows]

    def expired_leases(self, now: float, *, limit: int) -> list[Task]:
        rows = self._read(
            f"{_SEL} INDEXED BY tasks_lease WHERE state = 'running' AND lease_expires < ? "
            "ORDER BY lease_expires LIMIT ?",
            (_us(now), max(limit, 0)),
        )
        return [_dec_task(r) for r in rows]

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
            where.append(f"state IN ({_sql_in(len(states))})")
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
        return [_dec_task(r) for r in self._read(sql, params)]

    def delete(self, task_id: str) -> bool:
        with self._tx("deleting a task") as conn:
            cur = conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
            if cur.rowcount == 0:
                return False
            conn.execute(
                "DELETE FROM deps WHERE upstream = ? OR downstream = ?", (task_id, task_id)
            )
            return True

    def prune(self, *, before: float, states: Iterable[TaskState] | None = None) -> int:
        sts = [s.value for s in (TERMINAL_STATES if states is None else map(TaskState, states))]
        if not sts:
            return 0
        cond = f"state IN ({_sql_in(len(sts))}) AND updated < ?"
        params = (*sts, _us(before))
        with self._tx("pruning tasks") as conn:
            for col in ("upstream", "downstream"):
                conn.execute(
                    f"DELETE FROM deps WHERE {col} IN (SELECT id FROM tasks WHERE {cond})", params
                )
            return conn.execute(f"DELETE FROM tasks WHERE {cond}", params).rowcount

    # -- schedules --------------------------------------------------------------------------------
    def put_schedule(
        self, record: ScheduleRecord, *, first: Task | None, on_conflict: OnConflict = "replace"
    ) -> ScheduleRecord:
        if on_conflict not in ("error", "keep", "replace"):
            raise InvalidScheduleError(
                f"on_conflict must be 'error', 'keep' or 'replace' (got {on_conflict!r})"
            )
        srow = list(_enc_schedule(record))
        first_row = None
        if first is not None:
            _validate_task(first)
            first_row = list(
                _enc_task(
                    first.evolve(
                        state=_P,
                        version=0,
                        updated=first.created,
                        unmet=0,
                        lease_owner=None,
                        lease_expires=None,
                    )
                )
            )
        with self._tx("storing a schedule") as conn:
            old = conn.execute(_SSEL + " WHERE id = ?", (record.id,)).fetchone()
            if old is not None:
                if on_conflict == "keep":
                    return _dec_schedule(old)
                if on_conflict == "error":
                    raise DuplicateKeyError(
                        f"a schedule with id {record.id!r} already exists; pass "
                        "on_conflict='replace' or 'keep', or choose another id"
                    )
                self._cancel_instances(conn, record.id, _us(record.updated))
                srow[_SCOLS.index("version")] = old[_SCOLS.index("version")] + 1
            conn.execute(
                f"INSERT OR REPLACE INTO schedules ({', '.join(_SCOLS)}) "
                f"VALUES ({_sql_in(len(_SCOLS))})",
                srow,
            )
            if first_row is not None:
                ex = conn.execute(
                    "SELECT state, version FROM tasks WHERE id = ?", (first_row[0],)
                ).fetchone()
                if ex is None or _STATES[ex[0]] in TERMINAL_STATES:
                    if ex is not None:
                        first_row[_VERSION] = ex[1] + 1
                        conn.execute("DELETE FROM deps WHERE downstream = ?", (first_row[0],))
                        conn.execute("DELETE FROM tasks WHERE id = ?", (first_row[0],))
                    conn.execute(_INS, first_row)
            return _dec_schedule(tuple(srow))

    def _cancel_instances(self, conn: sqlite3.Connection, schedule_id: str, now_us: int) -> None:
        rows = conn.execute(
            f"{_SEL} WHERE schedule_id = ? AND state IN ('pending', 'ready')", (schedule_id,)
        ).fetchall()
        err = "its schedule was replaced or deleted"
        for r in rows:
            self._cas(
                conn,
                r[0],
                r[_VERSION],
                "state = 'cancelled', version = version + 1, updated = ?, error = ?",
                (now_us, err),
            )
            self._settle(conn, r[0], TaskState.CANCELLED, now_us)

    def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        rows = self._read(_SSEL + " WHERE id = ?", (schedule_id,))
        return _dec_schedule(rows[0]) if rows else None

    def list_schedules(self) -> list[ScheduleRecord]:
        return [_dec_schedule(r) for r in self._read(_SSEL + " ORDER BY id")]

    def update_schedule(
        self, schedule_id: str, *, expected_version: int, **changes: Any
    ) -> ScheduleRecord:
        with self._tx("updating a schedule") as conn:
            old = conn.execute(_SSEL + " WHERE id = ?", (schedule_id,)).fetchone()
            if old is None:
                raise TaskNotFoundError(f"no schedule with id {schedule_id!r} in {self.path!r}")
            rec = _dec_schedule(old)
            if rec.version != expected_version:
                raise VersionConflictError(
                    f"schedule {schedule_id!r} is at version {rec.version}, not {expected_version}:"
                    " another actor changed it first; re-read and decide again"
                )
            if "id" in changes or "version" in changes:
                raise TypeError("update_schedule cannot change id or version")
            new = rec.evolve(version=rec.version + 1, **changes)
            row = _enc_schedule(new)
            sets = ", ".join(f"{c} = ?" for c in _SCOLS[1:])
            cur = conn.execute(
                f"UPDATE schedules SET {sets} WHERE id = ? AND version = ?",
                (*row[1:], schedule_id, expected_version),
            )
            if cur.rowcount != 1:
                raise VersionConflictError(f"schedule {schedule_id!r} changed under a transaction")
            return _dec_schedule(row)

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

    # -- operations: inspection, maintenance -----------------------------------------------------
    def unresolvable(self) -> dict[str, int]:
        """Function references this process could not resolve -> READY tasks waiting on each.

        ``claim_next`` skips those tasks (they stay READY for a worker that can import them).
        """
        bad = self._bad_refs()
        out: dict[str, int] = {}
        for chunk in _chunks(bad):
            for func, n in self._read(
                f"SELECT func, count(*) FROM tasks WHERE state = 'ready' AND func IN "
                f"({_sql_in(len(chunk))}) GROUP BY func",
                tuple(chunk),
            ):
                out[func] = n
        return {r: out.get(r, 0) for r in bad}

    def oldest_ready_age(self, now: float) -> float | None:
        """Seconds since the earliest due time among READY tasks (how far workers lag), or None."""
        (m,) = self._read("SELECT min(due) FROM tasks WHERE state = 'ready'")[0]
        return None if m is None else max(0.0, now - m / 1e6)

    def due_histogram(
        self, now: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, int]]:
        """Expected load: ``(bucket_start, n)`` for PENDING tasks due in ``[now, now + horizon)``.

        Buckets are *bucket* seconds wide, aligned on *now*; empty buckets are included. Only
        materialized tasks count: a recurring schedule contributes its next instance.
        """
        if bucket <= 0 or horizon <= 0:
            raise InvalidScheduleError(f"bucket and horizon must be > 0 (got {bucket}, {horizon})")
        n_buckets = math.ceil(horizon / bucket)
        start, width = _us(now), _us(bucket)
        rows = self._read(
            "SELECT (due - ?) / ?, count(*) FROM tasks WHERE state = 'pending' AND due >= ? "
            "AND due < ? GROUP BY 1",
            (start, width, start, start + _us(horizon)),
        )
        counts = dict.fromkeys(range(n_buckets), 0)
        for b, n in rows:
            if 0 <= b < n_buckets:
                counts[b] += n
        return [(now + b * bucket, n) for b, n in counts.items()]

    def recent_failures(self, limit: int = 10) -> list[Task]:
        """The last *limit* tasks that ended FAILED, TIMED_OUT or UPSTREAM_FAILED, newest first."""
        sts = [s.value for s in _FAILED_STATES]
        rows = self._read(
            f"{_SEL} WHERE state IN ({_sql_in(len(sts))}) ORDER BY updated DESC LIMIT ?",
            (*sts, max(limit, 0)),
        )
        return [_dec_task(r) for r in rows]

    def statistics(self, now: float) -> SQLiteStatistics:
        """A snapshot for ``timewheel inspect``: counts, sizes, lag, unresolvable references."""
        (n_sched,) = self._read("SELECT count(*) FROM schedules")[0]
        (version,) = self._read("PRAGMA user_version")[0]
        return SQLiteStatistics(
            path=self.path,
            schema_version=version,
            size_bytes=_size(self.path),
            wal_bytes=_size(self.path + "-wal"),
            counts=self.count_by_state(),
            schedules=n_sched,
            oldest_ready_age=self.oldest_ready_age(now),
            unresolvable=self.unresolvable(),
        )

    def integrity_check(self, max_errors: int = 100) -> list[str]:
        """``PRAGMA integrity_check``: the problems found, ``[]`` when the file is healthy.

        Reads the whole file: O(size). Run it from maintenance code, not a hot path.
        """
        rows = self._read(f"PRAGMA integrity_check({int(max_errors)})", doing="checking integrity")
        msgs = [str(r[0]) for r in rows]
        return [] if msgs == ["ok"] else msgs

    def checkpoint(
        self, mode: Literal["PASSIVE", "FULL", "RESTART", "TRUNCATE"] = "TRUNCATE"
    ) -> bool:
        """Run ``PRAGMA wal_checkpoint(mode)``; True if it completed (False: readers were busy)."""
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise InvalidScheduleError(f"unknown checkpoint mode {mode!r}")
        (busy, _, _) = self._read(f"PRAGMA wal_checkpoint({mode})", doing="checkpointing")[0]
        self._last_checkpoint = time.monotonic()
        return int(busy) == 0

    def _maybe_idle_checkpoint(self) -> None:
        if time.monotonic() - self._last_checkpoint < _IDLE_CHECKPOINT_EVERY:
            return
        self._last_checkpoint = time.monotonic()
        conn = self._db()
        try:  # a short busy wait: an idle worker must not stall behind other processes
            conn.execute("PRAGMA busy_timeout = 50")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as e:
            log.debug("idle checkpoint of %s skipped: %s", self.path, e)
        finally:
            conn.execute(self._busy_pragma)

    # -- lifecycle --------------------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """Open ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``.

        Query parameters set the keyword options: ``?durability=fast&busy_timeout=10``.
        """
        parts = urlsplit(url)
        if parts.scheme != "sqlite":
            raise InvalidScheduleError(f"not an sqlite:// URL: {url!r}")
        if parts.netloc:
            raise InvalidScheduleError(
                f"{url!r} has a host ({parts.netloc!r}); use sqlite:///relative/path or "
                "sqlite:////absolute/path (SQLite files must be local)"
            )
        path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        if not path:
            raise InvalidScheduleError(f"{url!r} names no file; use sqlite:///path/to/file.db")
        opts: dict[str, Any] = {}
        for k, vs in parse_qs(parts.query, keep_blank_values=True, strict_parsing=False).items():
            if k == "durability":
                opts[k] = vs[-1]
            elif k == "busy_timeout":
                try:
                    opts[k] = float(vs[-1])
                except ValueError:
                    raise InvalidScheduleError(f"busy_timeout in {url!r} is not a number") from None
            else:
                raise InvalidScheduleError(
                    f"unknown option {k!r} in {url!r}; known: durability, busy_timeout"
                )
        return cls(path, **opts)

    def close(self) -> None:
        """Close this process's connections (idempotent). Call it when no thread is using the store.

        The last connection to close checkpoints the WAL and removes ``-wal``/``-shm``.
        """
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._pid:
            self._after_fork(os.getpid())
        with self._meta:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except sqlite3.Error:
                pass  # closing is best effort
        self._local = threading.local()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[..., SQLiteStore], tuple[Any, ...]]:
        # A spawned process gets a fresh store on the same file (connections are never pickled).
        return (_reopen, (self.path, self.durability, self.busy_timeout))

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, durability={self.durability!r})"


def _reopen(path: str, durability: Durability, busy_timeout: float) -> SQLiteStore:
    return SQLiteStore(path, durability=durability, busy_timeout=busy_timeout)


def _enc_schedule(r: ScheduleRecord) -> Row:
    if not isinstance(r.id, str) or not r.id:
        raise InvalidScheduleError(f"a schedule id must be a non-empty str (got {r.id!r})")
    args, kwargs = _enc_args(r.args, r.kwargs)
    return (
        r.id,
        refs.func_ref(r.func),
        args,
        kwargs,
        _dumps_lenient(dict(r.rule), f"schedule {r.id!r} rule"),
        _dumps_lenient(dict(r.options), f"schedule {r.id!r} options"),
        int(bool(r.paused)),
        r.version,
        _us(r.created),
        _us(r.updated),
    )


def _dec_schedule(r: Row) -> ScheduleRecord:
    return ScheduleRecord(
        id=r[0],
        func=r[1],
        args=_dec_args(r[2]),
        kwargs=_dec_kwargs(r[3]),
        rule=json.loads(r[4]),
        options=json.loads(r[5]),
        paused=bool(r[6]),
        version=r[7],
        created=r[8] / 1e6,
        updated=r[9] / 1e6,
    )


def _is_busy(e: sqlite3.OperationalError) -> bool:
    msg = str(e)
    return "locked" in msg or "busy" in msg


def _writable(path: str) -> bool:
    """Writable by us, and not write-protected by its mode bits (honoured even for root)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return os.access(path, os.W_OK) and bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _quote_path(path: str) -> str:
    # URI-escape the characters that have a meaning in a file: URI
    return path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
