"""Shared fixtures: ``store`` runs a test once per bundled store (memory, SQLite on a real file,
PostgreSQL in a fresh schema of the database ``TIMEWHEEL_POSTGRES_DSN`` names).

Outside CI, PostgreSQL tests are skipped when ``TIMEWHEEL_POSTGRES_DSN`` is unset or the server
is unreachable; with ``CI=true`` they fail instead, so a CI run never passes without them.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from timewheel.stores.base import Store
from timewheel.stores.memory import MemoryStore

STORE_KINDS = ("memory", "sqlite", "postgres")

GUARD = 60.0
"""Seconds a test waits for something to happen: a hang guard, never a timing assertion."""


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll *condition* until it holds; fail naming *what* after ``GUARD`` seconds."""
    end = time.monotonic() + GUARD
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


_reachable: dict[str, str | None] = {}


def postgres_dsn() -> str:
    """The test database's DSN; skips the test (fails it under ``CI=true``) when unusable."""
    dsn = os.environ.get("TIMEWHEEL_POSTGRES_DSN", "")
    in_ci = os.environ.get("CI", "").lower() == "true"
    problem: str | None
    if not dsn:
        problem = "TIMEWHEEL_POSTGRES_DSN is not set"
    else:
        if dsn not in _reachable:
            try:
                import psycopg

                with psycopg.connect(dsn, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                _reachable[dsn] = None
            except Exception as e:  # any failure means: no server for these tests
                _reachable[dsn] = f"PostgreSQL at TIMEWHEEL_POSTGRES_DSN is unreachable: {e}"
        problem = _reachable[dsn]
    if problem is not None:
        if in_ci:
            pytest.fail(f"{problem} (CI=true: PostgreSQL tests must run)")
        pytest.skip(problem)
    return dsn


def drop_schema(dsn: str, name: str) -> None:
    """Drop a test schema and everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def postgres_schemas() -> Iterator[Callable[[], tuple[str, str]]]:
    """A factory of fresh schema names in the test database: ``(dsn, schema)``; dropped after."""
    dsn = postgres_dsn()
    made: list[str] = []

    def new() -> tuple[str, str]:
        name = f"tw_test_{uuid.uuid4().hex[:12]}"
        made.append(name)
        return dsn, name

    yield new
    for name in made:
        drop_schema(dsn, name)


def _maker(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], Store]:
    if kind == "memory":
        return MemoryStore
    if kind == "postgres":
        from timewheel.stores.postgres import PostgresStore

        schemas: Callable[[], tuple[str, str]] = request.getfixturevalue("postgres_schemas")

        def make() -> Store:
            dsn, name = schemas()
            return PostgresStore(dsn, schema=name, pool_size=4)

        return make
    from timewheel.stores.sqlite import SQLiteStore

    counter = iter(range(1_000_000))
    return lambda: SQLiteStore(tmp_path / f"store{next(counter)}.db", durability="fast")


@pytest.fixture(params=STORE_KINDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """A factory of fresh, empty stores of one kind (parametrized over every bundled store)."""
    return _maker(request.param, tmp_path, request)


@pytest.fixture
def store(make_store: Callable[[], Store]) -> Iterator[Store]:
    """A fresh, empty store of each bundled kind, closed after the test."""
    s = make_store()
    yield s
    s.close()
