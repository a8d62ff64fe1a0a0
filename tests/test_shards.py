"""``timewheel.shards.ShardedDict`` against a plain dict: every answer the same, after any
sequence of changes (hypothesis state machine), and the order within each part kept."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from timewheel.shards import SHARD_MASK, SHARDS, ShardedDict

# few distinct keys, so that sets, deletions and lookups meet the same keys often
keys = st.sampled_from([f"sched-{i}@{i * 7}" for i in range(40)] + list(range(-3, 3)))
values = st.integers(-5, 5)


class ShardedDictModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table: ShardedDict[object, int] = ShardedDict()
        self.model: dict[object, int] = {}

    @rule(key=keys, value=values)
    def set(self, key: object, value: int) -> None:
        self.table[key] = value
        self.model[key] = value

    @rule(key=keys)
    def delete(self, key: object) -> None:
        if key in self.model:
            del self.table[key]
            del self.model[key]
        else:
            with pytest.raises(KeyError):
                del self.table[key]

    @rule(key=keys)
    def pop(self, key: object) -> None:
        if key in self.model:
            assert self.table.pop(key) == self.model.pop(key)
        else:
            with pytest.raises(KeyError):
                self.table.pop(key)

    @rule(key=keys, default=values)
    def pop_default(self, key: object, default: int) -> None:
        assert self.table.pop(key, default) == self.model.pop(key, default)

    @rule(key=keys, default=values)
    def setdefault(self, key: object, default: int) -> None:
        assert self.table.setdefault(key, default) == self.model.setdefault(key, default)

    @rule(key=keys)
    def lookups(self, key: object) -> None:
        assert (key in self.table) == (key in self.model)
        assert self.table.get(key) == self.model.get(key)
        assert self.table.get(key, 99) == self.model.get(key, 99)
        if key in self.model:
            assert self.table[key] == self.model[key]
        else:
            with pytest.raises(KeyError):
                self.table[key]

    @rule(probe=st.lists(keys, max_size=5))
    def values_of(self, probe: list[object]) -> None:
        if all(k in self.model for k in probe):
            assert self.table.values_of(probe) == [self.model[k] for k in probe]
        else:
            with pytest.raises(KeyError):
                self.table.values_of(probe)

    @rule(probe=st.lists(keys, max_size=5))
    def isdisjoint(self, probe: list[object]) -> None:
        assert self.table.isdisjoint(probe) == self.model.keys().isdisjoint(probe)

    @rule(index=st.integers(0, SHARDS - 1))
    def rebuild(self, index: int) -> None:
        before = list(self.table.shards[index].items())
        self.table.rebuild(index)
        assert list(self.table.shards[index].items()) == before

    @rule()
    def clear(self) -> None:
        self.table.clear()
        self.model.clear()

    @invariant()
    def same_contents(self) -> None:
        table, model = self.table, self.model
        assert len(table) == len(model)
        assert bool(table) == bool(model)
        assert dict(table.items()) == model
        assert sorted(map(repr, table)) == sorted(map(repr, model))
        assert sorted(table.values()) == sorted(model.values())
        assert table == model  # Mapping equality
        # within a part, the order of insertion (a dict's) is kept
        for i, shard in enumerate(table.shards):
            assert list(shard) == [k for k in model if hash(k) & SHARD_MASK == i]
        table._check()


TestShardedDict = ShardedDictModel.TestCase
TestShardedDict.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)


def test_initial_items_and_a_part_factory() -> None:
    writes: list[str] = []

    class Logged(dict[str, int]):
        def __setitem__(self, key: str, value: int) -> None:
            writes.append(key)
            super().__setitem__(key, value)

    table = ShardedDict([("a", 1), ("b", 2)], make=Logged)
    assert dict(table.items()) == {"a": 1, "b": 2}
    assert all(type(s) is Logged for s in table.shards)
    table["c"] = 3
    table.shard("d")["d"] = 4  # what a hot loop does: the part itself
    assert writes == ["a", "b", "c", "d"]
    assert table.shard("d") is table.shards[hash("d") & SHARD_MASK]
    table.rebuild(hash("c") & SHARD_MASK)
    assert type(table.shard("c")) is Logged
    assert table["c"] == 3
    assert repr(ShardedDict([("x", 1)])) == "ShardedDict({'x': 1})"
