"""``open_store(url)``: a store from a URL, for configuration files and the command line.

* ``memory://`` -> :class:`~timewheel.stores.memory.MemoryStore`
* ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (options as query parameters:
  ``?durability=fast&busy_timeout=10``) -> :class:`~timewheel.stores.sqlite.SQLiteStore`
"""

from __future__ import annotations

from timewheel.errors import InvalidScheduleError
from timewheel.stores.base import Store

__all__ = ["open_store"]


def open_store(url: str) -> Store:
    """Open the store *url* names; raises ``InvalidScheduleError`` for an unknown scheme."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidScheduleError(
            f"store URL {url!r} has no scheme; use memory:// or sqlite:///path/to/file.db"
        )
    if scheme == "memory":
        if rest:
            raise InvalidScheduleError(f"memory:// takes no path or options (got {url!r})")
        from timewheel.stores.memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite":
        from timewheel.stores.sqlite import SQLiteStore

        return SQLiteStore.from_url(url)
    raise InvalidScheduleError(
        f"unknown store scheme {scheme!r} in {url!r}; known: memory://, sqlite:///path"
    )
