"""``PostgresStore``: a durable store in a PostgreSQL schema, shared by processes on many hosts.

Install the extra: ``pip install 'pytimewheel[postgres]'`` (psycopg 3 and psycopg-pool).

* **One schema per store** (``timewheel`` unless ``schema=`` or ``?schema=`` says otherwise),
  created or upgraded at open (``create=True``) or by ``timewheel migrate --store URL``.
* **Claims** take a batch in one ``UPDATE`` over ``SELECT ... FOR UPDATE SKIP LOCKED``; every
  other change locks its row and swaps it on ``version``.
* **Lost connections** are replaced by the pool, and the transaction is run again with backoff
  (see :mod:`~timewheel.stores.postgres.connections`).
* **Clocks**: due times and leases are compared on the ``now`` each host passes; the store
  measures and logs a host's offset from the server's clock at open.

The package's modules: :mod:`~timewheel.stores.postgres.schema` (tables, version, migrations),
:mod:`~timewheel.stores.postgres.connections` (pool, retries, redacted connection strings) and
:mod:`~timewheel.stores.postgres.store` (the operations).
"""

from __future__ import annotations

from timewheel.stores.postgres.schema import SCHEMA_VERSION
from timewheel.stores.postgres.store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]
