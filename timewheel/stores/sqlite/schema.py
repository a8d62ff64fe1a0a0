"""The store's file: checks before and at open, the schema, and its migrations.

Schema versions live in ``PRAGMA user_version`` (``application_id`` marks the file as
timewheel's); ``MIGRATIONS[n]`` moves a database from version ``n`` to ``n + 1`` inside one
``BEGIN IMMEDIATE`` transaction at open. A file written by a newer timewheel raises
:class:`~timewheel.errors.SchemaVersionError` and is left untouched.

Opening checks, in order, and leaves the file byte for byte untouched when one fails: the
directory exists; the path is a file that starts with SQLite's header; the file and its directory
are writable (unless read-only); SQLite can read its schema; it is timewheel's (or empty); its
schema is not newer than this code's; ``PRAGMA quick_check`` finds no damage (unless
``verify=False``); WAL mode is on. Only then are migrations applied.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat

from timewheel.errors import SchemaVersionError, StoreCorruptError, StoreError
from timewheel.stores.policy import ENDED_SQL, OTHER_QUEUES_SQL, RETRYING_SQL
from timewheel.stores.sqlite.connections import (
    Durability,
    Mode,
    configure,
    connect,
    is_corrupt,
    translate,
)

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "MIN_SQLITE",
    "SCHEMA_VERSION",
    "check_sqlite_version",
    "open_database",
]

SCHEMA_VERSION = 3
"""The schema version this code writes (``PRAGMA user_version``)."""
APPLICATION_ID = 0x54574C31
"""``PRAGMA application_id`` of a timewheel store ("TWL1")."""
MIN_SQLITE = (3, 24, 0)
"""The oldest SQLite library the store runs on."""
log = logging.getLogger("timewheel.stores.sqlite")

_HEADER = b"SQLite format 3\x00"
_QUICK_CHECK_ROWS = 5  # problems quoted in the message about a damaged file

MIGRATIONS: tuple[tuple[str, ...], ...] = (
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
    # 1 -> 2: the dashboard's reads: tasks by end time, tasks that have upstream tasks, tasks
    # waiting to run again
    (
        f"CREATE INDEX tasks_ended ON tasks(updated, state, due) WHERE {ENDED_SQL}",  # covering
        "CREATE INDEX tasks_with_upstream ON tasks(id) WHERE after IS NOT NULL",
        f"CREATE INDEX tasks_retrying ON tasks(due, id) WHERE {RETRYING_SQL}",
    ),
    # 2 -> 3: when each run started (kept with the ended tasks' end times, for the start
    # lateness), counts by queue and state, tasks by function reference
    (
        "ALTER TABLE tasks ADD COLUMN started INTEGER",  # UTC epoch microseconds, NULL = never ran
        "DROP INDEX tasks_ended",
        f"CREATE INDEX tasks_ended ON tasks(updated, state, due, started) WHERE {ENDED_SQL}",
        # covering: counts by queue and state, of the queues other than the default one
        f"CREATE INDEX tasks_queue ON tasks(queue, state) WHERE {OTHER_QUEUES_SQL}",
        "CREATE INDEX tasks_func ON tasks(func, id)",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


def check_sqlite_version() -> None:
    """Raise ``StoreError`` when this Python's SQLite is older than :data:`MIN_SQLITE`."""
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(
            f"SQLiteStore needs SQLite >= {'.'.join(map(str, MIN_SQLITE))} "
            f"(this Python has {sqlite3.sqlite_version})"
        )


def open_database(
    path: str,
    *,
    durability: Durability,
    busy_timeout: float,
    create: bool,
    read_only: bool,
    verify: bool,
) -> tuple[sqlite3.Connection, Mode, bool]:
    """Check *path*, connect, verify the file and bring its schema up to date.

    Returns the connection, the mode later connections open the file in, and whether they open
    it as immutable: a read-only store whose directory is not writable and that no writer has
    open (there is no ``-wal`` file) is read without the WAL's shared memory.

    Raises:
        StoreError: the path or its directory is missing or unusable, or (unless *read_only*)
            read-only; WAL is not available; the file is missing and *create* is False.
        StoreCorruptError: not an SQLite file, damaged, or another application's database.
        SchemaVersionError: a newer timewheel wrote the file.
    """
    exists = _check_path(path, create=create, read_only=read_only)
    mode: Mode = "ro" if read_only else ("rw" if exists else "rwc")
    # A directory write-protected by its mode bits (which even root's SQLite would otherwise write
    # -wal and -shm files into) and no writer's log: read the file as it is, leaving nothing behind.
    immutable = (
        read_only
        and not os.path.exists(f"{path}-wal")
        and not _writable(os.path.dirname(os.path.abspath(path)))
    )
    try:
        conn = connect(path, mode=mode, busy_timeout=busy_timeout, immutable=immutable)
        if read_only and not immutable and not _readable_in_wal_mode(conn):
            conn.close()
            _refuse_unfolded_log(path)
            immutable = True
            conn = connect(path, mode=mode, busy_timeout=busy_timeout, immutable=True)
    except sqlite3.Error as e:
        raise translate(path, e, "opening") from e
    try:
        _check_and_migrate(conn, path, durability=durability, read_only=read_only, verify=verify)
    except BaseException:
        conn.close()
        raise
    return conn, mode, immutable


def _readable_in_wal_mode(conn: sqlite3.Connection) -> bool:
    """False when a read-only connection cannot read because SQLite cannot set up the WAL's
    shared memory (``<file>-shm`` is missing and the directory is not writable)."""
    try:
        conn.execute("PRAGMA user_version").fetchone()
    except sqlite3.OperationalError as e:
        msg = str(e)
        if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
            return False
        raise
    return True


def _refuse_unfolded_log(path: str) -> None:
    """Raise ``StoreError`` when a ``-wal`` file may hold changes an immutable read would miss."""
    if os.path.exists(path + "-wal"):
        raise StoreError(
            f"timewheel store {path!r} has a write-ahead log ({path}-wal) whose changes are not "
            "in the file yet, and reading it needs <file>-shm, which cannot be created in its "
            "read-only directory; open the store once with write access to fold the log in, "
            "or read it where its directory is writable"
        )


def _check_path(path: str, *, create: bool, read_only: bool) -> bool:
    """Checks before SQLite touches anything; returns whether the file exists."""
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StoreError(
            f"cannot open timewheel store {path!r}: its directory {parent!r} does not exist; "
            "create it first (e.g. os.makedirs(dir, exist_ok=True))"
        )
    if not os.path.exists(path):
        if read_only or not create:
            why = "read_only=True" if read_only else "create=False"
            raise StoreError(
                f"timewheel store {path!r} does not exist ({why} opens an existing store only); "
                "check the path, or open it with create=True to start an empty store"
            )
        if not _writable(parent):
            raise StoreError(
                f"the directory {parent!r} of timewheel store {path!r} is read-only; SQLite in "
                "WAL mode creates <file>-wal and <file>-shm beside the file: make it writable"
            )
        return False
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
    if read_only:
        return True
    if not _writable(path):
        raise StoreError(
            f"timewheel store {path!r} is read-only; the store writes on every change: make it "
            "writable (chmod u+w), open a copy, or open it with read_only=True to look inside"
        )
    if not _writable(parent):
        raise StoreError(
            f"the directory {parent!r} of timewheel store {path!r} is read-only; SQLite in "
            "WAL mode creates <file>-wal and <file>-shm beside the file: make it writable, or "
            "open the store with read_only=True to look inside"
        )
    return True


def _check_and_migrate(
    conn: sqlite3.Connection, path: str, *, durability: Durability, read_only: bool, verify: bool
) -> None:
    try:  # reads only: a bad file raises here, before anything is written
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as e:
        if not is_corrupt(e):
            raise translate(path, e, "opening") from e
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
    if verify:
        _quick_check(conn, path)
    if read_only:
        if version == 0:
            raise StoreError(
                f"{path!r} is an empty SQLite database, not a timewheel store yet, and was "
                "opened read-only; open it without read_only=True to create the store"
            )
        if version < SCHEMA_VERSION:
            raise StoreError(
                f"timewheel store {path!r} has schema version {version}, older than this "
                f"timewheel's ({SCHEMA_VERSION}), and was opened read-only; open it once "
                "without read_only=True to migrate it"
            )
        configure(conn, durability)
        return
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    except sqlite3.Error as e:
        raise translate(path, e, "switching to WAL mode") from e
    if str(mode).lower() != "wal":
        raise StoreError(
            f"timewheel store {path!r} could not use WAL mode (journal_mode is {mode!r}); "
            "WAL needs shared memory and working file locks, which network filesystems "
            "(NFS, SMB) lack: put the file on a local filesystem"
        )
    configure(conn, durability)
    if version == SCHEMA_VERSION:
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # another opener?
            for v in range(version, SCHEMA_VERSION):
                for stmt in MIGRATIONS[v]:
                    conn.execute(stmt)
                log.info("migrated %s to schema version %d", path, v + 1)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as e:
        raise translate(path, e, "creating the schema") from e


def _quick_check(conn: sqlite3.Connection, path: str) -> None:
    """``PRAGMA quick_check``: raise StoreCorruptError naming the damage it finds."""
    try:
        rows = conn.execute(f"PRAGMA quick_check({_QUICK_CHECK_ROWS})").fetchall()
        problems = [str(r[0]) for r in rows]
    except sqlite3.DatabaseError as e:
        if not is_corrupt(e):
            raise translate(path, e, "checking the file") from e
        problems = [str(e)]
    if problems != ["ok"]:
        raise StoreCorruptError(
            f"timewheel store {path!r} is damaged: PRAGMA quick_check reports "
            f"{'; '.join(problems)}; restore a backup, or move the file aside and start with an "
            "empty store (the sqlite3 shell's .recover command can salvage its rows)"
        )


def _writable(path: str) -> bool:
    """Writable by us, and not write-protected by its mode bits (honoured even for root)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return os.access(path, os.W_OK) and bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
