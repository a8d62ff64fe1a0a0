"""``ShardedDict``: a mapping kept in 16 dicts chosen by the key's hash, so none grows in one go.

CPython grows a dict by moving every entry to a table twice the size, in the one insertion that
fills two thirds of the old table: the 174,763rd key of a plain dict costs about 6 ms on a quiet
machine, twice that on a busy one, and nothing can reserve the room ahead. A table that grows
by 100,000 keys in the minutes before a midnight herd (the memory store's tasks, the trigger's
instance index, the pre-warmed heads) would make one of the trigger's steps that long. Split 16
ways by ``hash(key) & SHARD_MASK``, each growth moves a sixteenth of the entries (well under a
millisecond at these sizes), and the 16 parts, filling at the same rate, grow at different
insertions.

The dict methods are there (through :class:`~collections.abc.MutableMapping`, the common ones
written out), each a Python call; a hot loop picks the part itself and uses the plain dict:
``shards = table.shards`` then ``shards[hash(key) & SHARD_MASK]``. Iteration goes part by
part, each in insertion order; there is no order across parts. Runtime complexity: as a dict's,
with :func:`len` O(16). Not thread-safe beyond what a dict is: each call is a few dict calls,
so an owner that changes the table from several threads holds its own lock.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, MutableMapping, Sequence
from operator import and_, getitem
from typing import Any, TypeVar, overload

__all__ = ["SHARDS", "SHARD_MASK", "ShardedDict"]

#: the number of dicts a :class:`ShardedDict` is split into (a power of two)
SHARDS = 16
#: ``hash(key) & SHARD_MASK`` is the index of the dict holding *key*
SHARD_MASK = SHARDS - 1
_MASKS = itertools.repeat(SHARD_MASK)  # for map(and_, hashes, _MASKS): never exhausted

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")

_MISSING: Any = object()


class ShardedDict(MutableMapping[K, V]):
    """A mapping kept in :data:`SHARDS` dicts by the key's hash (see the module docstring).

    Args:
        items: the initial entries.
        make: builds each part (a ``dict`` subclass, to observe its writes).
    """

    __slots__ = ("_make", "shards")

    def __init__(
        self,
        items: Iterable[tuple[K, V]] = (),
        *,
        make: Callable[[], dict[K, V]] = dict,
    ) -> None:
        self._make = make
        #: the parts; the entry of key ``k`` is in ``shards[hash(k) & SHARD_MASK]``
        self.shards: tuple[dict[K, V], ...] = tuple(make() for _ in range(SHARDS))
        for key, value in items:
            self.shards[hash(key) & SHARD_MASK][key] = value

    def holders(self, keys: Iterable[object]) -> list[dict[K, V]]:
        """The dict that holds (or would hold) each of *keys*, in their order, in one pass in C
        (``operator.and_`` and ``getitem`` are plain C functions; ``SHARD_MASK.__and__`` and
        ``shards.__getitem__`` would build an argument tuple per call). Earned its place in
        benchmarks/bench_batch.py --memory."""
        return list(map(getitem, itertools.repeat(self.shards), map(and_, map(hash, keys), _MASKS)))

    def has_any(self, keys: Sequence[object]) -> bool:
        """Whether any of *keys* is in the table, in one pass in C."""
        return any(map(dict.__contains__, self.holders(keys), keys))

    def shard(self, key: K) -> dict[K, V]:
        """The dict that holds (or would hold) *key*."""
        return self.shards[hash(key) & SHARD_MASK]

    def __len__(self) -> int:
        return sum(map(len, self.shards))

    def __bool__(self) -> bool:
        return any(self.shards)

    def __contains__(self, key: object) -> bool:
        return key in self.shards[hash(key) & SHARD_MASK]

    def __getitem__(self, key: K) -> V:
        return self.shards[hash(key) & SHARD_MASK][key]

    def __setitem__(self, key: K, value: V) -> None:
        self.shards[hash(key) & SHARD_MASK][key] = value

    def __delitem__(self, key: K) -> None:
        del self.shards[hash(key) & SHARD_MASK][key]

    def __iter__(self) -> Iterator[K]:
        return itertools.chain.from_iterable(self.shards)

    def __repr__(self) -> str:
        return f"ShardedDict({dict(self.items())!r})"

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D, /) -> V | D: ...
    def get(self, key: K, default: Any = None, /) -> Any:
        return self.shards[hash(key) & SHARD_MASK].get(key, default)

    @overload
    def pop(self, key: K, /) -> V: ...
    @overload
    def pop(self, key: K, default: V | D, /) -> V | D: ...
    def pop(self, key: K, default: Any = _MISSING, /) -> Any:
        shard = self.shards[hash(key) & SHARD_MASK]
        return shard.pop(key) if default is _MISSING else shard.pop(key, default)

    def setdefault(self, key: K, default: V, /) -> V:
        return self.shards[hash(key) & SHARD_MASK].setdefault(key, default)

    def clear(self) -> None:
        for shard in self.shards:
            shard.clear()

    def values(self) -> Iterator[V]:  # type: ignore[override]  # an iterator over the parts, not a view
        """The values, part by part."""
        return itertools.chain.from_iterable(s.values() for s in self.shards)

    def items(self) -> Iterator[tuple[K, V]]:  # type: ignore[override]  # as values()
        """The ``(key, value)`` pairs, part by part."""
        return itertools.chain.from_iterable(s.items() for s in self.shards)

    def isdisjoint(self, keys: Iterable[object]) -> bool:
        """True when none of *keys* is held (``dict.keys().isdisjoint``), in one pass in C (a
        generator over the keys cost about 0.2 us a key in ``schedule_many``'s insert_new:
        benchmarks/bench_batch.py --memory)."""
        return not self.has_any(keys if isinstance(keys, (list, tuple)) else list(keys))

    def values_of(self, keys: Iterable[K]) -> list[V]:
        """The values of *keys*, in their order (``KeyError`` for a key not held): one call for
        a scan, where ``table[k]`` would be a Python call per key."""
        shards = self.shards
        return [shards[hash(k) & SHARD_MASK][k] for k in keys]

    def rebuild(self, index: int) -> None:
        """Replace part *index* by a fresh copy of itself (same entries, same order): the copy's
        memory comes from the calling thread's allocator (see ``MemoryStore.maintain``)."""
        shards = list(self.shards)
        fresh = self._make()
        fresh.update(shards[index])
        shards[index] = fresh
        self.shards = tuple(shards)

    def _check(self) -> None:
        """Assert that every key is in the part its hash names."""
        for i, shard in enumerate(self.shards):
            assert all(hash(k) & SHARD_MASK == i for k in shard), f"a key in the wrong part {i}"
