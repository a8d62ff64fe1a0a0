"""``PostgresStore``: a durable store in a PostgreSQL schema, shared by processes on many hosts.

Install the extra: ``pip install 'pytimewheel[postgres]'`` (psycopg 3 and psycopg-pool).

* **One schema per store** (``timewheel`` unless ``schema=`` or ``?schema=`` says otherwise),
  created or upgraded at open (``create=True``) or by ``timewheel migrate --store URL``.
* **Claims** take a batch in one ``UPDATE`` over ``SELECT ... FOR UPDATE SKIP LOCKED``; every
  other change locks its row and swaps it on ``version``.
* **Lost connections** are replaced by the pool, and the transaction is run again with backoff
  (see :mod:`~timewheel.stores.postgres.connections`).
* **Clocks**: due times, leases and wake-ups are instants on the server's clock; each host's
  scheduler reads its clock corrected by its measured offset, and promotions and lease reaping
  check the server's clock in SQL (:mod:`~timewheel.stores.postgres.clocks`).
* **Wake-ups**: work inserted due soon and work made READY are announced with ``NOTIFY``; each
  process listens from one connection outside the pool (:mod:`~timewheel.stores.postgres.notify`).

The package's modules: :mod:`~timewheel.stores.postgres.schema` (tables, version, migrations),
:mod:`~timewheel.stores.postgres.connections` (pool, retries, redacted connection strings),
:mod:`~timewheel.stores.postgres.clocks`, :mod:`~timewheel.stores.postgres.notify` and
:mod:`~timewheel.stores.postgres.store` (the operations).
"""

from __future__ import annotations

from timewheel.stores.postgres.schema import SCHEMA_VERSION
from timewheel.stores.postgres.store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]
