"""``PostgresStore`` against a real server: schemas, credentials, faults, several processes.

The contract suite runs against it through ``tests/conftest.py``; these tests cover what only a
server store has. Each test works in fresh schemas of the database ``TIMEWHEEL_POSTGRES_DSN``
names, dropped after.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import timewheel as tw
from tests.apps.postgres_app import claim_all, serve, slow
from tests.apps.worker_app import record
from tests.conftest import postgres_dsn
from timewheel.cli import main
from timewheel.errors import SchemaVersionError, StoreConfigError, StoreError
from timewheel.stores import open_store
from timewheel.stores.postgres import SCHEMA_VERSION, PostgresStore
from timewheel.stores.postgres.connections import APPLICATION_NAME, redact
from timewheel.task import Task, TaskState

ROOT = Path(__file__).resolve().parent.parent
Schemas = Callable[[], tuple[str, str]]


def _task(task_id: str, due: float = 1.0, priority: int = 0) -> Task:
    # due after its created instant (0): stored PENDING (a task due by then is stored READY)
    return Task(
        id=task_id,
        func="tests.apps.worker_app:record",
        args=("x", "/dev/null"),
        due=due,
        priority=priority,
    )


def _admin(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(dsn, autocommit=True)


def _kill_store_backends(dsn: str, where: str = "") -> int:
    with _admin(dsn) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND application_name = %s AND pid <> pg_backend_pid()" + where,
            (APPLICATION_NAME,),
        ).fetchall()
    return len(rows)


@pytest.fixture
def pg(postgres_schemas: Schemas) -> Iterator[PostgresStore]:
    dsn, name = postgres_schemas()
    store = PostgresStore(dsn, schema=name, pool_size=4)
    yield store
    store.close()


# -- schema ------------------------------------------------------------------------------------
def test_a_hostile_schema_name_is_quoted_not_executed(postgres_schemas: Schemas) -> None:
    dsn, victim = postgres_schemas()
    PostgresStore(dsn, schema=victim).close()  # a store whose table must survive
    hostile = f'a"; DROP TABLE "{victim}".tasks;--'
    assert len(hostile.encode()) <= 63
    with _admin(dsn) as conn:
        assert conn.execute(
            "SELECT to_regclass(format('%%I.tasks', %s::text))", (victim,)
        ).fetchone() != (None,)
    store = PostgresStore(dsn, schema=hostile)
    try:
        store.insert(_task("a"))
        assert store.get("a").state is TaskState.PENDING
        assert repr(store).endswith(f"schema={hostile!r})")
    finally:
        store.close()
        with _admin(dsn) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(hostile)))
    with _admin(dsn) as conn:
        row = conn.execute(
            "SELECT to_regclass(format('%%I.tasks', %s::text)) IS NOT NULL", (victim,)
        ).fetchone()
    assert row == (True,)


def test_a_newer_schema_is_refused_and_left_untouched(postgres_schemas: Schemas) -> None:
    dsn, name = postgres_schemas()
    PostgresStore(dsn, schema=name).close()
    with _admin(dsn) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.meta SET value = '99' WHERE name = 'schema_version'").format(
                sql.Identifier(name)
            )
        )
    for create in (True, False):
        with pytest.raises(SchemaVersionError, match="version 99, newer"):
            PostgresStore(dsn, schema=name, create=create)
    with _admin(dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT value FROM {}.meta").format(sql.Identifier(name))
        ).fetchone()
    assert row == ("99",)


def test_create_false_refuses_a_missing_store(postgres_schemas: Schemas) -> None:
    dsn, name = postgres_schemas()
    with pytest.raises(StoreError, match="no timewheel store in schema") as info:
        PostgresStore(dsn, schema=name, create=False)
    assert not isinstance(info.value, SchemaVersionError)


def test_migrate_command_then_worker_open(postgres_schemas: Schemas) -> None:
    dsn, name = postgres_schemas()
    url = f"{dsn}?schema={name}"
    with pytest.raises(SystemExit, match="timewheel migrate"):
        main(["inspect", "--store", url])
    out = io.StringIO()
    assert main(["migrate", "--store", url], out=out) == 0
    assert "current schema" in out.getvalue()
    assert main(["migrate", "--store", url], out=io.StringIO()) == 0  # idempotent
    store = open_store(url, create=False)
    try:
        assert isinstance(store, PostgresStore)
        assert store.schema == name
        assert store.count_by_state() == {}
    finally:
        store.close()
    with _admin(dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT value FROM {}.meta").format(sql.Identifier(name))
        ).fetchone()
    assert row == (str(SCHEMA_VERSION),)


def test_a_version_3_schema_gains_the_start_column(
    postgres_schemas: Schemas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written before schema 4: its tasks read back with no start, and its runs
    record one from then on."""
    dsn, name = postgres_schemas()
    with _store_at_version(monkeypatch, dsn, name, 3):
        pass
    with _admin(dsn) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.tasks (id, func, args, kwargs, due, state, version, attempts, "
                "priority, queue, created, updated) VALUES ('old', 'tests.apps.worker_app:record', "
                "'[]', '{{}}', 0, 'succeeded', 3, 1, 0, 'default', 0, 5000000)"
            ).format(sql.Identifier(name))
        )
    store = PostgresStore(dsn, schema=name)
    try:
        old = store.get("old")
        assert (old.state, old.started) == (TaskState.SUCCEEDED, None)
        assert store.ended_since(0.0, limit=5) == [(TaskState.SUCCEEDED, 0.0, None, 5.0)]
        store.insert(_task("new"))
        store.promote(["new"], 1.0)
        claimed = store.claim("new", expected_version=1, owner="w", lease_expires=9.0, now=2.0)
        assert claimed is not None
        assert claimed.started == 2.0
        assert store.get("new").started == 2.0
    finally:
        store.close()
    with _admin(dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT value FROM {}.meta").format(sql.Identifier(name))
        ).fetchone()
    assert row == (str(SCHEMA_VERSION),) == ("7",)


def test_a_version_4_schema_with_tasks_migrates_to_the_current_one(
    postgres_schemas: Schemas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``timewheel migrate`` of a schema 4 store holding tasks in every state: the tasks stay,
    the index of tasks by state holds ended tasks only and the index by function PENDING and
    ended ones, the counts and inspection queries (by function: tasks in every state) answer
    as before, and the schema has no trigger left."""

    dsn, name = postgres_schemas()
    url = f"{dsn}?schema={name}"
    with _store_at_version(monkeypatch, dsn, name, 4) as old:
        for tid in ("pending", "ready", "running", "done", "failed"):
            old.insert(_task(tid, due=1.0))
        old.insert(
            Task(id="waiting", func="tests.apps.worker_app:record", due=1.0, after=("pending",))
        )
        old.promote(["ready", "running", "done", "failed"], 2.0)
        for tid in ("running", "done", "failed"):
            assert old.claim(tid, expected_version=1, owner="w", lease_expires=9.0, now=3.0)
        old.finish("done", owner="w", state=TaskState.SUCCEEDED, now=4.0)
        old.finish("failed", owner="w", state=TaskState.FAILED, now=5.0, error="boom")
        before = {t.id: t for t in old.tasks()}
        counts = old.count_by_state()
    assert counts == {
        TaskState.PENDING: 2,
        TaskState.READY: 1,
        TaskState.RUNNING: 1,
        TaskState.SUCCEEDED: 1,
        TaskState.FAILED: 1,
    }
    assert main(["migrate", "--store", url], out=io.StringIO()) == 0
    with _admin(dsn) as conn:
        version = conn.execute(
            sql.SQL("SELECT value FROM {}.meta").format(sql.Identifier(name))
        ).fetchone()
        indexes = {
            str(n): str(d)
            for n, d in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (name,)
            )
        }
    assert version == (str(SCHEMA_VERSION),) == ("7",)
    assert "tasks_state" not in indexes
    assert "WHERE (state = ANY" in indexes["tasks_ended"]
    assert (
        "WHERE ((state <> 'ready'::text) AND (state <> 'running'::text))" in (indexes["tasks_func"])
    )
    store = open_store(url, create=False)
    try:
        assert isinstance(store, PostgresStore)
        assert {t.id: t for t in store.tasks()} == before
        assert store.count_by_state() == counts
        assert store.count_by_queue() == {"default": counts}
        assert [t.id for t in store.tasks(state=TaskState.FAILED)] == ["failed"]
        assert [t.id for t in store.recent_failures()] == ["failed"]
        assert [t.id for t in store.by_function("tests.apps", limit=10)] == sorted(before)
        assert store.by_function("tests.apps", limit=10) == sorted(
            before.values(), key=lambda t: t.id
        )
        assert [e[0] for e in store.ended_since(0.0, limit=5)] == [
            TaskState.FAILED,
            TaskState.SUCCEEDED,
        ]
        store.insert(_task("new", due=6.0))
        assert store.count_by_state()[TaskState.PENDING] == 3
        assert store.prune(before=100.0, states=[TaskState.SUCCEEDED]) == 1
        assert store.prune(before=100.0) == 1
        assert store.count_by_state() == {
            TaskState.PENDING: 3,
            TaskState.READY: 1,
            TaskState.RUNNING: 1,
        }
    finally:
        store.close()
    assert _triggers_and_functions(dsn, name) == ([], [])


@contextmanager
def _store_at_version(
    monkeypatch: pytest.MonkeyPatch, dsn: str, schema: str, version: int
) -> Iterator[PostgresStore]:
    """A store written by the code of schema *version* (its migrations up to that one), closed
    on leaving."""
    from timewheel.stores.postgres import schema as pg_schema

    with monkeypatch.context() as m:
        m.setattr(pg_schema, "MIGRATIONS", pg_schema.MIGRATIONS[:version])
        m.setattr(pg_schema, "SCHEMA_VERSION", version)
        old = PostgresStore(dsn, schema=schema)
        try:
            yield old
        finally:
            old.close()


def _triggers_and_functions(dsn: str, name: str) -> tuple[list[str], list[str]]:
    """The triggers on the ``tasks`` table of schema *name*, and the functions in the schema."""
    with _admin(dsn) as conn:
        triggers = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(format('%%I.tasks', "
            "%s::text)) AND NOT tgisinternal",
            (name,),
        ).fetchall()
        functions = conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = to_regnamespace(%s)", (name,)
        ).fetchall()
    return [str(t) for (t,) in triggers], [str(f) for (f,) in functions]


def test_a_version_6_schema_loses_its_trigger_and_its_tasks_stay(
    postgres_schemas: Schemas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``timewheel migrate`` of a schema 6 store (the last with the row trigger announcing
    inserts): the trigger and its function go, the tasks stay, and a fresh store has neither."""

    dsn, name = postgres_schemas()
    url = f"{dsn}?schema={name}"
    with _store_at_version(monkeypatch, dsn, name, 6) as old:
        old.insert(_task("kept", due=1.0))
        old.insert(_task("ready", due=1.0))
        old.promote(["ready"], 2.0)
    assert _triggers_and_functions(dsn, name) == (["tasks_inserted"], ["notify_inserted"])
    with pytest.raises(SchemaVersionError, match="older"):
        PostgresStore(dsn, schema=name, create=False)
    assert main(["migrate", "--store", url], out=io.StringIO()) == 0
    assert _triggers_and_functions(dsn, name) == ([], [])
    store = open_store(url, create=False)
    try:
        assert isinstance(store, PostgresStore)
        assert {t.id: t.state for t in store.tasks()} == {
            "kept": TaskState.PENDING,
            "ready": TaskState.READY,
        }
    finally:
        store.close()
    _, fresh = postgres_schemas()
    PostgresStore(dsn, schema=fresh).close()
    assert _triggers_and_functions(dsn, fresh) == ([], [])


def test_inspection_queries_can_use_their_indexes(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With sequential scans off, counts by queue read the index of queue and state alone, and
    a search by function reads a range of its index in order (its collation matches the
    query's, so the index serves a prefix) and the work in flight along the READY and RUNNING
    tasks' own indexes."""
    pg.insert_many([_task(f"t{i}") for i in range(20)])
    seen: list[tuple[str, Sequence[Any]]] = []
    real = pg._read

    def spy(query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        seen.append((query, params))
        return real(query, params)

    monkeypatch.setattr(pg, "_read", spy)
    assert pg.count_by_queue() == {"default": {TaskState.PENDING: 20}}
    assert len(pg.by_function("tests.apps.worker_app:rec", limit=3)) == 3
    monkeypatch.undo()
    plans = []
    with _admin(postgres_dsn()) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg.schema)))
        conn.execute("SET enable_seqscan = off")
        conn.execute(f"VACUUM ANALYZE {sql.Identifier(pg.schema).as_string(conn)}.tasks")
        for query, params in seen:
            rows = conn.execute(("EXPLAIN " + query).encode(), params).fetchall()
            plans.append(" | ".join(str(r[0]) for r in rows))
    assert "Index Only Scan using tasks_queue" in plans[0], plans[0]
    assert "Index Scan using tasks_func" in plans[1], plans[1]
    assert "using tasks_ready" in plans[1], plans[1]
    assert "using tasks_lease" in plans[1], plans[1]
    assert "Seq Scan" not in plans[1], plans[1]


def test_read_only_refuses_changes(pg: PostgresStore) -> None:
    pg.insert(_task("a"))
    dsn_store = PostgresStore(postgres_dsn(), schema=pg.schema, read_only=True, create=False)
    try:
        assert dsn_store.get("a").id == "a"
        with pytest.raises(StoreError, match="read-only"):
            dsn_store.insert(_task("b"))
    finally:
        dsn_store.close()


def test_url_options_are_checked() -> None:
    with pytest.raises(StoreConfigError, match="pool_size"):
        open_store("postgresql://u@127.0.0.1/db?pool_size=many")
    with pytest.raises(StoreConfigError, match="schema"):
        PostgresStore("postgresql://u@127.0.0.1/db", schema="")
    with pytest.raises(StoreConfigError, match="retries must be a whole number >= 0"):
        PostgresStore("postgresql://u@127.0.0.1/db", retries=-1)
    with pytest.raises(StoreConfigError, match="connect_timeout"):
        open_store("postgresql://u@127.0.0.1/db?connect_timeout=-2")


def test_a_pickled_store_reopens_the_same_schema(pg: PostgresStore) -> None:
    import pickle

    pg.insert(_task("a"))
    copy = pickle.loads(pickle.dumps(pg))
    try:
        assert isinstance(copy, PostgresStore)
        assert copy.schema == pg.schema
        assert copy.get("a").id == "a"
    finally:
        copy.close()


# -- credentials -------------------------------------------------------------------------------
def test_redact_hides_passwords() -> None:
    assert redact("postgresql://app:s3cret@db.example:5432/tw") == (
        "postgresql://app:***@db.example:5432/tw"
    )
    assert "s3cret" not in redact("host=db user=app password=s3cret dbname=tw")
    assert "s3cret" not in redact("postgresql://app@db/tw?password=s3cret&sslmode=require")


def test_a_failing_connect_never_shows_the_password(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    url = f"postgresql://app:{secret}@127.0.0.1:1/nowhere?connect_timeout=2"
    with caplog.at_level(logging.DEBUG), pytest.raises(StoreError) as info:
        open_store(url)
    text = str(info.value)
    assert "cannot connect to PostgreSQL at postgresql://app:***@127.0.0.1:1/nowhere" in text
    assert secret not in text
    # a traceback shows no chained exception that could quote the connection string
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__
    assert secret not in caplog.text
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["inspect", "--store", url])
    err = capsys.readouterr().err
    assert secret not in err
    assert "app:***@127.0.0.1:1" in err


def test_repr_and_inspect_never_show_the_password(postgres_schemas: Schemas) -> None:
    dsn, name = postgres_schemas()
    secret = f"pw-{uuid.uuid4().hex}"
    # trust authentication ignores the password, so the server accepts it as given
    url = dsn.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@")
    assert secret in url
    store = open_store(f"{url}?schema={name}")
    try:
        assert secret not in repr(store)
        store.insert(_task("a"))
    finally:
        store.close()
    out = io.StringIO()
    assert main(["inspect", "--store", f"{url}?schema={name}", "--json"], out=out) == 0
    assert secret not in out.getvalue()
    assert "***" in out.getvalue()


# -- faults --------------------------------------------------------------------------------------
def test_killed_idle_connections_are_replaced(pg: PostgresStore) -> None:
    pg.insert(_task("a"))
    assert _kill_store_backends(postgres_dsn()) >= 1
    # every pooled connection is dead; the next operations reconnect and go on
    now = time.time()
    claimed = pg.claim_next(owner="w", lease_expires=now + 60, now=now, limit=5)
    assert claimed == []  # "a" is PENDING, not READY
    assert [t.id for t in pg.promote(["a"], now)] == ["a"]
    _kill_store_backends(postgres_dsn())
    claimed = pg.claim_next(owner="w", lease_expires=now + 60, now=now, limit=5)
    assert [t.id for t in claimed] == ["a"]
    _kill_store_backends(postgres_dsn())
    done = pg.finish("a", owner="w", state=TaskState.SUCCEEDED, now=now, result=1)
    assert done is not None
    assert done.task.state is TaskState.SUCCEEDED
    assert pg.get("a").result == 1


def test_a_connection_killed_mid_finish_is_retried(pg: PostgresStore) -> None:
    dsn = postgres_dsn()
    now = time.time()
    pg.insert(_task("a"))
    pg.promote(["a"], now)
    (t,) = pg.claim_next(owner="w", lease_expires=now + 60, now=now, limit=1)
    holder = psycopg.connect(dsn)
    holder.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg.schema)))
    holder.execute("SELECT 1 FROM tasks WHERE id = 'a' FOR UPDATE")  # finish will wait on it
    result: list[object] = []
    finisher = threading.Thread(
        target=lambda: result.append(
            pg.finish("a", owner="w", state=TaskState.SUCCEEDED, now=now, result="ok")
        )
    )
    finisher.start()
    try:
        deadline = time.monotonic() + 10
        killed = 0
        while not killed and time.monotonic() < deadline:
            killed = _kill_store_backends(dsn, " AND wait_event_type = 'Lock'")
            time.sleep(0.02)
        assert killed == 1  # the finish's backend died while it waited inside its transaction
    finally:
        holder.rollback()
        holder.close()
    finisher.join(30)
    assert not finisher.is_alive()
    (changed,) = result
    assert changed is not None
    assert pg.get("a").state is TaskState.SUCCEEDED
    assert pg.get("a").version == t.version + 1


def test_a_connection_killed_mid_claim_is_retried(pg: PostgresStore) -> None:
    dsn = postgres_dsn()
    now = time.time()
    ids = [f"t{i}" for i in range(5)]
    pg.insert_many([_task(i) for i in ids])
    pg.promote(ids, now)
    holder = psycopg.connect(dsn)
    holder.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg.schema)))
    holder.execute("LOCK TABLE tasks IN EXCLUSIVE MODE")  # the claim waits inside its statement
    result: list[list[Task]] = []
    claimer = threading.Thread(
        target=lambda: result.append(
            pg.claim_next(owner="w", lease_expires=now + 60, now=now, limit=10)
        )
    )
    claimer.start()
    try:
        deadline = time.monotonic() + 10
        killed = 0
        while not killed and time.monotonic() < deadline:
            killed = _kill_store_backends(dsn, " AND wait_event_type = 'Lock'")
            time.sleep(0.02)
        assert killed == 1
    finally:
        holder.rollback()
        holder.close()
    claimer.join(30)
    assert not claimer.is_alive()
    (claimed,) = result
    assert sorted(t.id for t in claimed) == ids
    assert all(t.attempts == 1 for t in claimed)  # the killed attempt left nothing behind
    assert pg.count_by_state() == {TaskState.RUNNING: 5}


def test_a_spent_retry_budget_is_a_clear_store_error(postgres_schemas: Schemas) -> None:
    dsn, name = postgres_schemas()
    role = f"tw_role_{uuid.uuid4().hex[:10]}"
    secret = f"pw-{uuid.uuid4().hex}"
    with _admin(dsn) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER").format(sql.Identifier(role)))
    try:
        url = dsn.replace("postgresql://postgres@", f"postgresql://{role}:{secret}@")
        store = PostgresStore(url, schema=name, retries=2, connect_timeout=2)
        try:
            store.insert(_task("a"))
            with _admin(dsn) as conn:
                conn.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(role)))
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (role,),
                )
            with pytest.raises(StoreError, match="failed while reading, 3 attempts") as info:
                store.get("a")
            assert secret not in str(info.value)
            assert secret not in repr(store)
        finally:
            store.close()
    finally:
        with _admin(dsn) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# -- several processes ---------------------------------------------------------------------------
def test_processes_never_claim_a_task_twice(postgres_schemas: Schemas) -> None:
    dsn, name = postgres_schemas()
    n = 3000
    store = PostgresStore(dsn, schema=name)
    try:
        store.insert_many([_task(f"t{i:05d}", priority=i % 3) for i in range(n)])
        assert len(store.promote([f"t{i:05d}" for i in range(n)], time.time())) == n
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            shares = pool.starmap(claim_all, [(dsn, name, f"p{k}", 7) for k in range(4)])
        claimed = Counter(i for share in shares for i in share)
        assert len(claimed) == n
        assert set(claimed.values()) == {1}
        assert sum(1 for share in shares if share) >= 2  # the work was really shared
        assert store.count_by_state() == {TaskState.RUNNING: n}
        owners = {t.lease_owner for t in store.tasks(state=TaskState.RUNNING)}
        assert owners <= {f"p{k}" for k in range(4)}
    finally:
        store.close()


@pytest.mark.realclock
def test_sigkill_mid_run_loses_nothing(postgres_schemas: Schemas, tmp_path: Path) -> None:
    dsn, name = postgres_schemas()
    log = tmp_path / "runs.log"
    store = PostgresStore(dsn, schema=name)
    n = 6
    with tw.Scheduler(
        store=store, dispatcher=tw.InlineDispatcher(), allow=["tests.apps"]
    ) as producer:
        for i in range(n):
            producer.schedule(slow, f"s{i}", str(log), 1.5, delay=0.0)
    ctx = multiprocessing.get_context("spawn")
    victim = ctx.Process(target=serve, args=(dsn, name, 1.0))
    victim.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if log.exists() and log.read_text().count("S ") >= 2:
                break
            time.sleep(0.05)
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10)
        started = Counter(
            line.split()[1] for line in log.read_text().splitlines() if line[0] == "S"
        )
        assert started  # the victim was mid-run when it died
        # a second worker re-runs what the dead one held once its leases expire
        with tw.Scheduler(store=store, lease=1.0, poll_interval=0.2, allow=["tests.apps"]):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if store.count_by_state().get(TaskState.SUCCEEDED, 0) == n:
                    break
                time.sleep(0.1)
        assert store.count_by_state() == {TaskState.SUCCEEDED: n}
        finished = Counter(
            line.split()[1] for line in log.read_text().splitlines() if line[0] == "F"
        )
        assert set(finished) == {f"s{i}" for i in range(n)}
    finally:
        if victim.is_alive():
            victim.kill()
        store.close()


@pytest.mark.realclock
def test_worker_command_on_a_postgresql_url(postgres_schemas: Schemas, tmp_path: Path) -> None:
    dsn, name = postgres_schemas()
    url = f"{dsn}?schema={name}"
    log = tmp_path / "runs.log"
    n = 60
    store = PostgresStore(dsn, schema=name)
    with tw.Scheduler(
        store=store, dispatcher=tw.InlineDispatcher(), allow=["tests.apps"]
    ) as producer:
        for i in range(n):
            producer.schedule(record, f"t{i}", str(log), delay=0.5 + (i % 5) * 0.1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "timewheel", "worker", "tests.apps.worker_app:jobs"]
    outs = [tmp_path / f"worker{k}.out" for k in range(2)]
    workers = []
    for path in outs:
        with open(path, "wb") as sink:
            workers.append(
                subprocess.Popen(
                    [*cmd, "--store", url, "--concurrency", "4"],
                    cwd=ROOT,
                    env=env,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # both workers have started (and handle SIGTERM) and the work is done
            started = all(p.read_text().startswith("timewheel worker") for p in outs)
            if started and store.count_by_state().get(TaskState.SUCCEEDED, 0) >= n:
                break
            time.sleep(0.2)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(timeout=30)
    outputs = [p.read_text() for p in outs]
    for w, text in zip(workers, outputs, strict=True):
        assert w.returncode == 0, text
    runs = Counter(line.split()[0] for line in log.read_text().splitlines())
    assert len(runs) == n, outputs
    assert set(runs.values()) == {1}
    # the registry's recurring function is one series however many workers carry it
    assert len(store.list_schedules()) == 1
    store.close()
    out = io.StringIO()
    assert main(["inspect", "--store", url], out=out) == 0
    assert "succeeded" in out.getvalue()


# -- the delay queue -----------------------------------------------------------------------------
def test_a_delay_queue_survives_a_restart_on_postgresql(postgres_schemas: Schemas) -> None:
    from datetime import datetime, timezone

    from timewheel.delayqueue import DelayQueue
    from timewheel.testing import FakeClock

    dsn, name = postgres_schemas()
    clock = FakeClock(start=datetime(2026, 3, 29, tzinfo=timezone.utc))
    store = PostgresStore(dsn, schema=name)
    dq: DelayQueue[object] = DelayQueue(clock=clock, store=store, name="mail")
    taken = dq.put({"to": "taken"}, delay=1)
    dq.put({"to": "ready"}, delay=2)
    cancelled = dq.put("cancelled", delay=3)
    dq.put(10, delay=20)
    clock.advance(2)
    assert dq.get_nowait() == {"to": "taken"}
    assert cancelled.cancel()
    assert store.get(taken.id).state is TaskState.SUCCEEDED
    assert store.get(cancelled.id).state is TaskState.CANCELLED
    dq.shutdown()
    store.close()

    store = PostgresStore(dsn, schema=name, create=False)
    dq = DelayQueue(clock=clock, store=store, name="mail")
    assert len(dq) == 2
    assert dq.ready_count() == 1
    assert dq.get_nowait() == {"to": "ready"}
    assert clock.advance(60) == [10]
    assert dq.get_nowait() == 10
    assert len(dq) == 0
    dq.shutdown()
    store.close()


def test_a_delay_queue_keeps_due_times_on_the_servers_clock(postgres_schemas: Schemas) -> None:
    """A queue on a host whose clock is a minute slow stores due times on the server's clock,
    so a queue reopened on another host does not hand its items out early."""
    from timewheel.clock import ShiftedClock, SystemClock
    from timewheel.delayqueue import DelayQueue

    dsn, name = postgres_schemas()
    store = PostgresStore(dsn, schema=name)
    slow_host: DelayQueue[str] = DelayQueue(
        clock=ShiftedClock(SystemClock(), -60.0), store=store, name="mail"
    )
    item = slow_host.put("hello", delay=30)
    slow_host.shutdown()
    store.close()

    store = PostgresStore(dsn, schema=name, create=False)
    other_host: DelayQueue[str] = DelayQueue(store=store, name="mail")
    try:
        assert len(other_host) == 1
        # on the slow host's own clock the item would be 30 s overdue here
        assert other_host.ready_count() == 0
        assert store.get(item.id).due > time.time() + 15
    finally:
        other_host.shutdown()
        store.close()
