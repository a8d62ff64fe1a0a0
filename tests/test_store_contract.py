"""The store contract suite (``timewheel._contract``) run against every bundled store."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from timewheel._contract import CHECKS
from timewheel.stores.base import Store, SupportsCompactInsert, SupportsInspection
from timewheel.testing import check_store


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_contract(store: Store, check: Callable[[Store], None]) -> None:
    check(store)


def test_check_store_runs_every_check(make_store: Callable[[], Store]) -> None:
    check_store(make_store)


def test_check_store_names_the_failing_check() -> None:
    from timewheel.stores.memory import MemoryStore

    class Broken(MemoryStore):
        def find(self, task_id: str) -> None:  # deliberately wrong: never finds anything
            return None

    with pytest.raises(AssertionError, match=r"store contract check check_\w+ failed"):
        check_store(Broken)


def test_bundled_stores_declare_the_protocols(make_store: Callable[[], Store]) -> None:
    store = make_store()
    try:
        assert isinstance(store, Store)
        assert isinstance(store, SupportsInspection)
        assert isinstance(store, SupportsCompactInsert) is (not store.durable)
        for name in ("insert", "claim_next", "prune", "close"):
            doc = inspect.getdoc(getattr(type(store), name))
            assert doc, f"{type(store).__name__}.{name} has no documentation for help()"
        assert type(store).__doc__
    finally:
        store.close()
