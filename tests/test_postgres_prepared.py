"""Statements run through libpq's prepared-statement call (``timewheel.stores.postgres.prepared``):
the values they send, the errors they raise, and a statement the session lost or a connection
killed under them. Real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pgerrors
from psycopg import sql

from tests.conftest import postgres_dsn
from timewheel.errors import StoreError
from timewheel.stores.postgres import PostgresStore
from timewheel.stores.postgres.prepared import Statement
from timewheel.task import Task, TaskState

Schemas = Callable[[], tuple[str, str]]
Conn = psycopg.Connection[tuple[Any, ...]]

INSERT = Statement(
    "timewheel_test_insert",
    "INSERT INTO t (k, n, x, s) VALUES (%s, %s, %s, %s) ON CONFLICT (k) DO NOTHING RETURNING k",
)


@pytest.fixture
def conn(postgres_schemas: Schemas) -> Iterator[Conn]:
    dsn, name = postgres_schemas()
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        c.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
        c.execute("CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT, x DOUBLE PRECISION, s TEXT)")
        yield c


def test_values_of_each_type_arrive_as_sent(conn: Conn) -> None:
    text = "quote ' \" backslash \\ tab \t newline \n é ∞ 😀"
    rows = [
        ("a", 2**62, 0.1, text),
        ("b", -1, float("inf"), ""),
        ("c", None, None, None),
        ("d", 0, 1e-300, "x" * 100_000),
    ]
    for row in rows:
        result = INSERT.run(conn, row)
        assert result.get_value(0, 0) == row[0].encode(), "RETURNING comes back as text"
    got = conn.execute("SELECT k, n, x, s FROM t ORDER BY k").fetchall()
    assert got == rows, "every value is stored as psycopg would have stored it"
    assert INSERT.run(conn, rows[0]).ntuples == 0, "a conflict inserts nothing"


def test_a_nul_character_is_refused_not_cut(conn: Conn) -> None:
    with pytest.raises(psycopg.DataError):
        INSERT.run(conn, ("nul", 1, 1.0, "before\x00after"))
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,), "nothing was stored"


def test_a_server_error_is_psycopgs_exception(conn: Conn) -> None:
    conn.execute("ALTER TABLE t ADD CONSTRAINT positive CHECK (n > 0)")
    with pytest.raises(pgerrors.CheckViolation):
        INSERT.run(conn, ("a", -5, 1.0, "s"))
    INSERT.run(conn, ("a", 5, 1.0, "s"))  # the connection is usable after the error


def test_a_statement_the_session_lost_is_prepared_again(conn: Conn) -> None:
    INSERT.run(conn, ("a", 1, 1.0, "s"))
    conn.execute("DEALLOCATE ALL")
    INSERT.run(conn, ("b", 2, 2.0, "t"))
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_a_killed_connection_raises_operational_error(conn: Conn) -> None:
    INSERT.run(conn, ("a", 1, 1.0, "s"))
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        INSERT.run(conn, ("b", 2, 2.0, "t"))
    assert conn.closed, "the connection is known broken (a pool drops it)"


def test_a_statement_with_a_literal_percent_is_refused() -> None:
    with pytest.raises(ValueError, match="literal %"):
        Statement("x", "SELECT 'a%%b', %s")


def test_schedule_survives_its_connection_killed(postgres_schemas: Schemas) -> None:
    dsn, name = postgres_schemas()
    store = PostgresStore(dsn, schema=name, pool_size=1)
    try:
        store.insert(Task(id="a", func="tests.apps.worker_app:record", due=100.0))
        (pid,) = store.read_rows("SELECT pg_backend_pid()")[0]
        with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        done = store.insert(Task(id="b", func="tests.apps.worker_app:record", due=0.0, created=1.0))
        assert done.task.state is TaskState.READY, "retried on a new connection and stored"
        assert store.get("b") == done.task
    finally:
        store.close()


def test_a_task_id_with_a_nul_is_refused_and_nothing_stored(postgres_schemas: Schemas) -> None:
    dsn, name = postgres_schemas()
    store = PostgresStore(dsn, schema=name, pool_size=1)
    try:
        with pytest.raises(StoreError, match="0x00"):
            store.insert(Task(id="a\x00b", func="tests.apps.worker_app:record", due=100.0))
        assert sum(store.count_by_state().values()) == 0, "nothing was stored"
    finally:
        store.close()
