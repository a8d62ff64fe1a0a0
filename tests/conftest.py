"""Shared fixtures: ``store`` runs a test once per bundled store (memory, SQLite on a real file)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from timewheel.stores.base import Store
from timewheel.stores.memory import MemoryStore

STORE_KINDS = ("memory", "sqlite")


def _maker(kind: str, tmp_path: Path) -> Callable[[], Store]:
    if kind == "memory":
        return MemoryStore
    from timewheel.stores.sqlite import SQLiteStore

    counter = iter(range(1_000_000))
    return lambda: SQLiteStore(tmp_path / f"store{next(counter)}.db", durability="fast")


@pytest.fixture(params=STORE_KINDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """A factory of fresh, empty stores of one kind (parametrized over every bundled store)."""
    return _maker(request.param, tmp_path)


@pytest.fixture
def store(make_store: Callable[[], Store]) -> Iterator[Store]:
    """A fresh, empty store of each bundled kind, closed after the test."""
    s = make_store()
    yield s
    s.close()
