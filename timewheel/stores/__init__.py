"""Interchangeable task stores.

* :class:`MemoryStore` (default): in-process, any callable and arguments, gone with the process.
* :class:`SQLiteStore`: durable, multi-process on one host, standard library only.
* :class:`PostgresStore`: durable, processes on many hosts (the ``postgres`` extra).

``open_store(url)`` (:mod:`timewheel.stores.url`) builds one from ``memory://`` or
``sqlite:///path/to/file.db?durability=fast``. ``SQLiteStore`` is imported lazily, so memory-only
users never load ``sqlite3``.

:class:`Store` is the protocol; :class:`SupportsCompactInsert`, :class:`SupportsInspection` and
:class:`SupportsPromoteKeys` are optional abilities a store may add (:mod:`timewheel.stores.base`). What every store decides
the same way is in :mod:`timewheel.stores.policy`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from timewheel.stores.base import (
    Changed,
    OnConflict,
    Promoted,
    Store,
    SupportsCompactInsert,
    SupportsInspection,
    SupportsPromoteKeys,
)
from timewheel.stores.memory import MemoryStore
from timewheel.stores.url import open_store

if TYPE_CHECKING:
    from timewheel.stores.postgres import PostgresStore
    from timewheel.stores.sqlite import SQLiteStore

__all__ = [
    "Changed",
    "MemoryStore",
    "OnConflict",
    "PostgresStore",
    "Promoted",
    "SQLiteStore",
    "Store",
    "SupportsCompactInsert",
    "SupportsInspection",
    "SupportsPromoteKeys",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name == "SQLiteStore":
        from timewheel.stores.sqlite import SQLiteStore

        return SQLiteStore
    if name == "PostgresStore":
        from timewheel.stores.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
