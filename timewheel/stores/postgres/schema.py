"""The store's schema in a PostgreSQL database: its tables, its version, and its migrations.

A store lives in one PostgreSQL *schema* (``timewheel`` unless configured), so several
applications can share a database. The schema's ``meta`` table holds ``schema_version``;
``MIGRATIONS[n]`` moves it from version ``n`` to ``n + 1``. :func:`migrate` applies the missing
ones in one transaction under an advisory lock (two hosts starting at once migrate once), and a
schema written by a newer timewheel raises :class:`~timewheel.errors.SchemaVersionError` and is
left untouched. The schema name is always quoted with :class:`psycopg.sql.Identifier`, never
pasted into SQL text.

Columns and their encoding are the SQLite store's (:mod:`timewheel.stores.sqlite.codec`): instants
are ``BIGINT`` UTC epoch microseconds, JSON values are ``TEXT``. Ids compare bytewise
(``COLLATE "C"``), so ordering by id is the same as in the other stores.
"""

from __future__ import annotations

from collections.abc import Collection

import psycopg
from psycopg import sql

from timewheel.errors import SchemaVersionError, StoreError
from timewheel.stores.policy import ENDED_SQL, ENDED_STATES, OTHER_QUEUES_SQL, RETRYING_SQL
from timewheel.stores.sqlite.codec import TASKS

__all__ = [
    "COLUMN_TYPES",
    "COUNT_BY_STATE",
    "FUNCTION_INDEXED",
    "INSERT_TASK",
    "INSERT_TASK_IF_NEW",
    "MIGRATIONS",
    "NOTIFY_WITHIN",
    "SCHEMA_VERSION",
    "SELECT_TASKS",
    "SERVER_NOW",
    "TASK_COLUMNS",
    "migrate",
    "schema_version",
    "states_condition",
]

TASK_COLUMNS = ", ".join(TASKS.names)
"""The ``tasks`` table's columns, in the codec's order."""
COLUMN_TYPES: dict[str, str] = {
    "id": "text",
    "func": "text",
    "args": "text",
    "kwargs": "text",
    "due": "bigint",
    "state": "text",
    "version": "bigint",
    "attempts": "integer",
    "retry": "text",
    "priority": "integer",
    "queue": "text",
    "timeout": "double precision",
    "lease_owner": "text",
    "lease_expires": "bigint",
    "created": "bigint",
    "updated": "bigint",
    "result": "text",
    "result_repr": "integer",
    "error": "text",
    "schedule_id": "text",
    "after": "text",
    "unmet": "integer",
    "when_": "text",
    "extra": "text",
    "started": "bigint",
}
"""The SQL type of each column of the ``tasks`` table, as :data:`MIGRATIONS` leave it: what a
statement casts a value read from JSON to."""
SELECT_TASKS = f"SELECT {TASK_COLUMNS} FROM tasks"
"""Every column of the ``tasks`` table, in the codec's order: add a ``WHERE`` clause."""
INSERT_TASK = f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES ({', '.join(['%s'] * len(TASKS.names))})"
"""One encoded task row."""
INSERT_TASK_IF_NEW = INSERT_TASK + " ON CONFLICT (id) DO NOTHING"
"""One encoded task row, unless a task holds its id (then nothing, and no error)."""

SCHEMA_VERSION = 7
"""The schema version this code writes."""

NOTIFY_WITHIN = 600.0
"""Inserted tasks due within this many seconds (of the server's clock) are announced to listening
hosts (:mod:`~timewheel.stores.postgres.notify`); later ones are loaded by the schedulers'
periodic refills of their wheels (every ``horizon / 2``)."""

SERVER_NOW = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
"""The server's clock in SQL, in epoch microseconds."""

# Schemas 3 to 6 announced inserted work from a row trigger (its WHEN clause let far-future rows,
# blocked rows and bulk inserts pass; a transaction that set timewheel.quiet announced once
# itself). Schema 7 drops it: the store announces what it inserts (see
# timewheel.stores.postgres.notify), without the queued event and the function call per row.
_NOTIFY_FUNCTION = """CREATE FUNCTION notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    origin text := coalesce(current_setting('timewheel.origin', true), '');
    payload text;
BEGIN
    IF NEW.state = 'ready' THEN
        payload := json_build_array('r', origin)::text;
    ELSE
        payload := json_build_array('p', origin, NEW.due, NEW.schedule_id, NEW.id)::text;
        IF octet_length(payload) > 7000 THEN
            payload := json_build_array('m', origin, NEW.due)::text;
        END IF;
    END IF;
    PERFORM pg_notify('timewheel_' || md5(TG_TABLE_SCHEMA), payload);
    RETURN NULL;
END
$fn$"""
_NOTIFY_TRIGGER = (
    "CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks FOR EACH ROW "
    "WHEN (NEW.unmet = 0 AND (NEW.state = 'ready' OR (NEW.state = 'pending' "
    "AND NEW.due < (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + {within_us})) "
    "AND current_setting('timewheel.quiet', true) IS DISTINCT FROM 'on') "
    "EXECUTE FUNCTION notify_inserted()"
).replace("{within_us}", str(round(NOTIFY_WITHIN * 1_000_000)))
# schema 5: the same condition, the setting first (the conditions are evaluated in order: the
# rows of a bulk insert pass on the setting alone, the clock not read for each)
_NOTIFY_TRIGGER_QUIET_FIRST = (
    "CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks FOR EACH ROW "
    "WHEN (current_setting('timewheel.quiet', true) IS DISTINCT FROM 'on' AND NEW.unmet = 0 "
    "AND (NEW.state = 'ready' OR (NEW.state = 'pending' "
    f"AND NEW.due < {SERVER_NOW} + {round(NOTIFY_WITHIN * 1_000_000)}))) "
    "EXECUTE FUNCTION notify_inserted()"
)

FUNCTION_INDEXED = "state <> 'ready' AND state <> 'running'"
"""The condition of the index of tasks by function reference (``tasks_func``), and of the
queries that read along it: PENDING and ended tasks, the two states whose tasks can be many
(work to come, and history until pruned). READY and RUNNING tasks, the work in flight, add no
entry to it, so neither a promotion, a claim nor a task stored READY at insert writes one; a
query by function reads them along their own partial indexes."""

COUNT_BY_STATE = (
    "SELECT 'pending', count(*) FROM tasks WHERE state = 'pending' AND unmet = 0 "
    "UNION ALL SELECT 'pending', count(*) FROM tasks WHERE after IS NOT NULL "
    "AND state = 'pending' AND unmet <> 0 "
    "UNION ALL SELECT 'ready', count(*) FROM tasks WHERE state = 'ready' "
    "UNION ALL SELECT 'running', count(*) FROM tasks WHERE state = 'running' "
    f"UNION ALL SELECT state, count(*) FROM tasks WHERE {ENDED_SQL} GROUP BY state"
)
"""``(state, n)`` rows, a state possibly in several (add them up): every state counted along an
index that holds only its rows (runnable PENDING tasks in ``tasks_due``, waiting ones among the
tasks with upstream tasks (a task waits only on upstream tasks), READY in ``tasks_ready``,
RUNNING in ``tasks_lease``, the ended states in ``tasks_ended``), so a count reads no index
entry of another state and no state needs an index of its own."""

_ENDED_VALUES = frozenset(s.value for s in ENDED_STATES)


def states_condition(states: Collection[str]) -> str:
    """The SQL condition on ``state`` of a query for the tasks in *states* (values), with one
    parameter, the array of the values: for ended states alone it names the condition of the
    index of ended tasks too, so the planner can read that index."""
    if states and _ENDED_VALUES.issuperset(states):
        return f"{ENDED_SQL} AND state = ANY(%s)"
    return "state = ANY(%s)"


MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the initial schema
    (
        """CREATE TABLE tasks (
            id            TEXT COLLATE "C" PRIMARY KEY,
            func          TEXT NOT NULL,
            args          TEXT NOT NULL,
            kwargs        TEXT NOT NULL,
            due           BIGINT NOT NULL,
            state         TEXT NOT NULL,
            version       BIGINT NOT NULL,
            attempts      INTEGER NOT NULL,
            retry         TEXT,
            priority      INTEGER NOT NULL,
            queue         TEXT NOT NULL,
            timeout       DOUBLE PRECISION,
            lease_owner   TEXT,
            lease_expires BIGINT,
            created       BIGINT NOT NULL,
            updated       BIGINT NOT NULL,
            result        TEXT,
            result_repr   INTEGER NOT NULL DEFAULT 0,
            error         TEXT,
            schedule_id   TEXT COLLATE "C",
            after         TEXT,
            unmet         INTEGER NOT NULL DEFAULT 0,
            when_         TEXT NOT NULL DEFAULT 'all_success',
            extra         TEXT
        )""",
        "CREATE INDEX tasks_due ON tasks (due, id) WHERE state = 'pending' AND unmet = 0",
        "CREATE INDEX tasks_ready ON tasks (priority DESC, due) WHERE state = 'ready'",
        "CREATE INDEX tasks_lease ON tasks (lease_expires) WHERE state = 'running'",
        "CREATE INDEX tasks_state ON tasks (state, updated)",
        "CREATE INDEX tasks_schedule ON tasks (schedule_id) WHERE schedule_id IS NOT NULL",
        """CREATE TABLE deps (
            upstream   TEXT COLLATE "C" NOT NULL,
            downstream TEXT COLLATE "C" NOT NULL,
            PRIMARY KEY (upstream, downstream)
        )""",
        "CREATE INDEX deps_downstream ON deps (downstream)",
        """CREATE TABLE schedules (
            id       TEXT COLLATE "C" PRIMARY KEY,
            func     TEXT NOT NULL,
            args     TEXT NOT NULL,
            kwargs   TEXT NOT NULL,
            rule     TEXT NOT NULL,
            options  TEXT NOT NULL,
            paused   INTEGER NOT NULL,
            version  BIGINT NOT NULL,
            created  BIGINT NOT NULL,
            updated  BIGINT NOT NULL
        )""",
    ),
    # 1 -> 2: the dashboard's tasks that have upstream tasks and tasks waiting to run again
    # (the index of tasks by state serves end times)
    (
        "CREATE INDEX tasks_with_upstream ON tasks (id) WHERE after IS NOT NULL",
        f"CREATE INDEX tasks_retrying ON tasks (due, id) WHERE {RETRYING_SQL}",
    ),
    # 2 -> 3: inserted work due soon is announced to listening hosts (LISTEN/NOTIFY)
    (_NOTIFY_FUNCTION, _NOTIFY_TRIGGER),
    # 3 -> 4: when each run started (start lateness), counts by queue and state, tasks by
    # function reference (in code point order, so a prefix is one range of the index)
    (
        "ALTER TABLE tasks ADD COLUMN started BIGINT",
        f"CREATE INDEX tasks_queue ON tasks (queue, state) WHERE {OTHER_QUEUES_SQL}",
        'CREATE INDEX tasks_func ON tasks ((func COLLATE "C"), id)',
    ),
    # 4 -> 5: cheaper inserts. The index of tasks by state and end time holds ended tasks only
    # (a new task adds no entry to it; the other states are counted along their own partial
    # indexes, see COUNT_BY_STATE), and the rows of bulk inserts pass the trigger on the setting
    # alone
    (
        f"CREATE INDEX tasks_ended ON tasks (state, updated) WHERE {ENDED_SQL}",
        "DROP INDEX tasks_state",
        "DROP TRIGGER tasks_inserted ON tasks",
        _NOTIFY_TRIGGER_QUIET_FIRST,
    ),
    # 5 -> 6: cheaper runs. The index by function reference holds PENDING and ended tasks only
    # (see FUNCTION_INDEXED): a task stored READY, promoted or claimed adds no entry to it
    (
        "DROP INDEX tasks_func",
        f'CREATE INDEX tasks_func ON tasks ((func COLLATE "C"), id) WHERE {FUNCTION_INDEXED}',
    ),
    # 6 -> 7: cheaper single inserts. No row trigger: the store announces the work it inserts
    # after the commit (timewheel.stores.postgres.notify.Announcer)
    (
        "DROP TRIGGER IF EXISTS tasks_inserted ON tasks",
        "DROP FUNCTION IF EXISTS notify_inserted()",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION


def schema_version(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int | None:
    """The version of the store in *schema*, or ``None`` when the schema holds no store."""
    row = conn.execute(
        "SELECT to_regclass(format('%%I.meta', %s::text)) IS NOT NULL", (schema,)
    ).fetchone()
    if row is None or not row[0]:
        return None
    got = conn.execute(
        sql.SQL("SELECT value FROM {}.meta WHERE name = 'schema_version'").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    return 0 if got is None else int(str(got[0]))


def check_version(version: int, schema: str) -> None:
    """Raise ``SchemaVersionError`` when *version* is newer than this code knows."""
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"timewheel schema {schema!r} is at version {version}, newer than this timewheel "
            f"knows ({SCHEMA_VERSION}); upgrade timewheel on this host"
        )


def migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    """Create or upgrade the store in *schema*, in one transaction; the version it had before.

    Raises:
        SchemaVersionError: the schema is newer than this code.
    """
    ident = sql.Identifier(schema)
    with conn.transaction():
        # one migrator per schema at a time, across hosts
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("timewheel:" + schema,))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        before = schema_version(conn, schema)
        version = 0 if before is None else before
        check_version(version, schema)
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        if before is None:
            conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for step in MIGRATIONS[version:]:
            for statement in step:
                conn.execute(statement.encode())
        conn.execute(
            "INSERT INTO meta (name, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
    return version


def require(conn: psycopg.Connection[tuple[object, ...]], schema: str, where: str) -> None:
    """Check that *schema* holds a store this code can use (for ``create=False``).

    Raises:
        StoreError: no store there. SchemaVersionError: a newer one.
    """
    version = schema_version(conn, schema)
    if version is None:
        raise StoreError(
            f"no timewheel store in schema {schema!r} of {where}; run `timewheel migrate "
            "--store URL` or open it with create=True"
        )
    check_version(version, schema)
    if version < SCHEMA_VERSION:
        raise SchemaVersionError(
            f"timewheel schema {schema!r} of {where} is at version {version}, older than this "
            f"timewheel ({SCHEMA_VERSION}); run `timewheel migrate --store URL`"
        )
