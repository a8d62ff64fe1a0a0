"""``SQLiteStore``: a durable store in one SQLite file, shared by threads and processes of one host.

Layout and guarantees
---------------------
* **WAL mode**, checked at open (``PRAGMA journal_mode=WAL`` must answer ``wal``). WAL needs
  shared memory beside the file (``<path>-wal``, ``<path>-shm``) and POSIX locks that work:
  **it does not work on network filesystems** (NFS, SMB, most FUSE and container bind mounts of
  them). Keep the file on a local disk; several *hosts* need a server database (PostgreSQL).
* **Every write is one ``BEGIN IMMEDIATE`` transaction**; inside it every state change is still
  a compare-and-swap on ``version`` (``UPDATE ... WHERE id=? AND version=?``).
* **One connection per thread**, never used across ``fork()`` (see
  :mod:`~timewheel.stores.sqlite.connections`).
* **Durability**: ``"durable"`` runs ``synchronous=FULL`` (a commit survives power loss).
  ``"fast"`` runs ``synchronous=NORMAL``: a commit survives a crash of the process, but a power
  loss or OS crash may roll back the last commits (those since the last checkpoint); the database
  stays consistent either way. Tasks rolled back that way are lost or run again: handlers must be
  idempotent anyway (at-least-once, see ``docs/stores.md``).
* **Checkpoints** run in a thread of the store's own, never at commit
  (:mod:`~timewheel.stores.sqlite.checkpoints`): a ``PASSIVE`` checkpoint about every second
  while the store is written, and ``wal_checkpoint(TRUNCATE)`` at a quiet moment after
  ``maintain()`` or a ``claim_next`` that found nothing to do (at most once a minute) asked for
  one; ``checkpoint()`` runs one at once, in the caller.
* **Opening** checks the file before writing to it, including ``PRAGMA quick_check`` (see
  :mod:`~timewheel.stores.sqlite.schema`); ``read_only=True`` opens with SQLite's ``mode=ro``.

A task whose function reference cannot be resolved *in this process* is still stored and read
(``func`` stays the string), but ``claim_next`` does not claim it: it stays READY for a worker
that can import it, a warning is logged once per reference, and ``unresolvable()`` reports the
references and how many READY tasks wait on each.

The package's modules: :mod:`~timewheel.stores.sqlite.schema` (the file, its schema and
migrations), :mod:`~timewheel.stores.sqlite.codec` (rows to tasks and back, the encoding of
values), :mod:`~timewheel.stores.sqlite.connections` (connections and transactions),
:mod:`~timewheel.stores.sqlite.checkpoints` (the checkpoint thread) and
:mod:`~timewheel.stores.sqlite.store` (the operations).
"""

from __future__ import annotations

from timewheel.stores.sqlite.connections import Durability
from timewheel.stores.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION
from timewheel.stores.sqlite.store import SQLiteStatistics, SQLiteStore

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "Durability", "SQLiteStatistics", "SQLiteStore"]
