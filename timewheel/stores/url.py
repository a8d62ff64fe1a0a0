"""``open_store(url)``: a store from a URL, for configuration files and the command line.

* ``memory://`` -> :class:`~timewheel.stores.memory.MemoryStore`
* ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (options as query parameters:
  ``?durability=fast&busy_timeout=10&verify=0``) -> :class:`~timewheel.stores.sqlite.SQLiteStore`
* ``postgresql://user@host:5432/db?schema=app1`` (needs the ``postgres`` extra)
  -> :class:`~timewheel.stores.postgres.PostgresStore`

What the caller intends, rather than how the store is configured, is passed as keywords:
``create=False`` opens an existing store only, ``read_only=True`` opens it for reading
(``timewheel inspect`` uses both).
"""

from __future__ import annotations

from timewheel.errors import StoreConfigError
from timewheel.stores.base import Store

__all__ = ["open_store"]


def open_store(url: str, *, create: bool = True, read_only: bool = False) -> Store:
    """Open the store *url* names.

    Args:
        url: ``memory://``, ``sqlite:///path/to/file.db?option=value`` or
            ``postgresql://user@host/db?schema=name``.
        create: create the store when it does not exist (``False``: a missing store raises
            :class:`~timewheel.errors.StoreError` naming it).
        read_only: open it for reading only; changes raise ``StoreError``.

    Raises:
        StoreConfigError: an unknown scheme, a malformed URL or option, or ``create=False`` /
            ``read_only=True`` with ``memory://`` (a memory store always starts new and empty).
        StoreError: the store cannot be opened (see the store class).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise StoreConfigError(
            f"store URL {url!r} has no scheme; use memory:// or sqlite:///path/to/file.db"
        )
    if scheme == "memory":
        if rest:
            raise StoreConfigError(f"memory:// takes no path or options (got {url!r})")
        if read_only or not create:
            raise StoreConfigError(
                "memory:// always starts a new, empty store, so it cannot be opened "
                f"{'read-only' if read_only else 'without creating it'}; use sqlite:///PATH for "
                "a store that outlives its process"
            )
        from timewheel.stores.memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite":
        from timewheel.stores.sqlite import SQLiteStore

        return SQLiteStore.from_url(url, create=create, read_only=read_only)
    if scheme == "postgresql":
        try:
            from timewheel.stores.postgres import PostgresStore
        except ImportError as e:
            raise StoreConfigError(
                f"{scheme}:// needs psycopg and psycopg-pool ({e}); install 'pytimewheel[postgres]'"
            ) from None
        return PostgresStore.from_url(url, create=create, read_only=read_only)
    raise StoreConfigError(
        f"unknown store scheme {scheme!r} in {url!r}; known: memory://, sqlite:///path, "
        "postgresql://host/db"
    )
