"""Connections to the server: a pool per process, transactions retried after lost connections.

Every operation of the store is one function of a connection run in one transaction by
:meth:`Connections.run`. When the connection breaks (the server restarted, the backend was
terminated, the network dropped) or the transaction loses a race the database reports (a
deadlock, a serialization failure, a unique key taken by a concurrent insert), the whole
transaction is rolled back and run again on a fresh connection, with exponential backoff, up to
``retries`` times; then a :class:`~timewheel.errors.StoreError` says what was being done.
:func:`parse_url` reads the ``postgresql://`` URL a store is opened with.

Credentials never leave this module: :func:`redact` is the only form of the connection string
used in messages and ``repr``, and error texts are scrubbed of the password before they are
quoted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import errors as pgerrors
from psycopg import sql

from timewheel.errors import StoreConfigError, StoreError
from timewheel.stores import policy

__all__ = ["APPLICATION_NAME", "PLANNER", "Connections", "parse_url", "password_of", "redact"]

log = logging.getLogger("timewheel.stores.postgres")

T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]

# what a retry of the whole transaction can fix
_TRANSIENT: tuple[type[Exception], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    pgerrors.SerializationFailure,
    pgerrors.DeadlockDetected,
    pgerrors.UniqueViolation,
    psycopg_pool.PoolTimeout,
)


def redact(dsn: str) -> str:
    """*dsn* with any password replaced by ``***`` (URL or ``key=value`` form)."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        if parts.password is not None:
            user = parts.username or ""
            host = parts.netloc.rpartition("@")[2]
            parts = parts._replace(netloc=f"{user}:***@{host}")
        query = "&".join(
            "password=***" if q.lower().startswith("password=") else q
            for q in parts.query.split("&")
        )
        return urlunsplit(parts._replace(query=query))
    words = []
    for word in dsn.split():
        words.append("password=***" if word.lower().startswith("password=") else word)
    return " ".join(words)


APPLICATION_NAME = "timewheel"
"""The ``application_name`` the store's connections show in ``pg_stat_activity`` (unless the
connection string sets one)."""


def _application_name(dsn: str) -> dict[str, Any]:
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return {}
    return {} if info.get("application_name") else {"application_name": APPLICATION_NAME}


def password_of(dsn: str) -> str | None:
    """The password in *dsn*, if it holds one (so messages can be scrubbed of it)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return None
    pw = info.get("password")
    return None if pw in (None, "") else str(pw)


class Connections:
    """This process's pool of connections to one database, set to one schema.

    Args:
        dsn: the connection string (URL or ``key=value``).
        schema: the PostgreSQL schema every statement's tables are found in.
        read_only: connections refuse writes (``default_transaction_read_only``).
        max_size: the pool's size.
        retries: how many times a failed transaction is run again.
        connect_timeout: seconds to wait for a connection.
        origin: set as ``timewheel.origin`` on every pooled connection (the token that marks
            this store's own notifications).
        on_connect: called with every new pooled connection, configured and idle, in
            autocommit mode (a reconnect: the store measures the clock again).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        read_only: bool,
        max_size: int,
        retries: int,
        connect_timeout: float,
        origin: str = "",
        on_connect: Callable[[Conn], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.origin = origin
        self.on_connect = on_connect
        self.where = redact(dsn)
        self.schema = schema
        self.read_only = read_only
        self.max_size = max_size
        self.retries = retries
        self.connect_timeout = connect_timeout
        self._password = password_of(dsn)
        self._kwargs = _application_name(dsn)
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[Conn] | None = None
        self._pid = os.getpid()
        self._closed = False

    def scrub(self, text: str) -> str:
        """*text* with the password removed."""
        if self._password:
            text = text.replace(self._password, "***")
        return text

    def connect(self) -> Conn:
        """One connection outside the pool (for opening checks and migrations), autocommit off.

        Raises:
            StoreError: the server cannot be reached; the message holds no password.
        """
        try:
            conn: Conn = psycopg.connect(
                self.dsn, connect_timeout=max(1, round(self.connect_timeout)), **self._kwargs
            )
        except psycopg.Error as e:
            raise StoreError(
                f"cannot connect to PostgreSQL at {self.where}: {self.scrub(str(e)).strip()}"
            ) from None
        return conn

    def _configure(self, conn: Conn) -> None:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.execute(PLANNER)
        if self.origin:
            conn.execute("SELECT set_config('timewheel.origin', %s, false)", (self.origin,))
        if self.read_only:
            conn.execute("SET default_transaction_read_only = on")
        if self.on_connect is not None:
            self.on_connect(conn)

    def _get_pool(self) -> psycopg_pool.ConnectionPool[Conn]:
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._lock:
            if self._closed:
                raise StoreError(f"timewheel store at {self.where} is closed; open a new store")
            if self._pool is None or self._pid != os.getpid():
                # after fork() the parent's pool (sockets, threads) is left alone, never used
                self._pid = os.getpid()
                self._pool = psycopg_pool.ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self.max_size,
                    kwargs=dict(self._kwargs, autocommit=True),
                    configure=self._configure,
                    timeout=self.connect_timeout,
                    reconnect_timeout=max(self.connect_timeout, 5.0),
                    name=f"timewheel-{self.schema}",
                    open=True,
                )
            return self._pool

    def run(self, doing: str, work: Callable[[Conn], T], *, autocommit: bool = False) -> T:
        """Run *work* in one transaction; retried on a lost connection or a lost race.

        The pool's connections stay in autocommit mode (set when each is opened, never
        switched): *work* runs inside ``conn.transaction()``, which sends ``BEGIN`` and
        ``COMMIT`` (or ``ROLLBACK``) around it. With *autocommit*, *work* runs outside any
        transaction: each statement it executes commits on its own, in one round trip (a
        transaction adds two more). For work that is one statement.

        Raises:
            StoreError: the retries are spent (the message names *doing*, never the password);
                the exceptions *work* raises on purpose pass through.
        """
        delay = 0.05
        attempt = 0
        while True:
            pool = self._get_pool()
            try:
                # getconn/putconn rather than pool.connection(): that context also ends a
                # transaction the connection never opened (a commit, one more wait per call);
                # putconn rolls back what a broken transaction left and drops a broken connection
                conn = pool.getconn()
                try:
                    if autocommit:
                        return work(conn)
                    with conn.transaction():
                        return work(conn)
                finally:
                    pool.putconn(conn)
            except pgerrors.ReadOnlySqlTransaction:
                raise StoreError(
                    f"timewheel store at {self.where} (schema {self.schema!r}) was opened "
                    f"read-only and refuses {doing}"
                ) from None
            except _TRANSIENT as e:
                attempt += 1
                if self._closed:
                    raise StoreError(
                        f"timewheel store at {self.where} is closed; open a new store"
                    ) from None
                if attempt > self.retries:
                    raise StoreError(
                        f"PostgreSQL at {self.where} failed while {doing}, {attempt} attempts: "
                        f"{self.scrub(str(e)).strip()}"
                    ) from None
                if not isinstance(e, pgerrors.UniqueViolation):
                    log.warning(
                        "PostgreSQL at %s: %s while %s; retrying in %.2fs (attempt %d of %d)",
                        self.where,
                        type(e).__name__,
                        doing,
                        delay,
                        attempt,
                        self.retries,
                    )
                time.sleep(policy.backoff_pause(delay))
                delay = min(delay * 2, 2.0)
            except psycopg.Error as e:
                raise StoreError(
                    f"PostgreSQL at {self.where} failed while {doing}: {self.scrub(str(e)).strip()}"
                ) from None

    def close(self) -> None:
        """Close this process's pool (idempotent)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()


PLANNER = "SET enable_bitmapscan = off"
"""Set on every pooled connection. The store's statements read along an index in its order and
stop early (a batched claim takes the first READY tasks of the index of READY tasks in priority
and due order; a refill, the promotions' and the inspection queries are bounded likewise). The
planner's other choice for them, every matching row read through a bitmap and then sorted, makes
a claim cost in proportion to the READY work waiting instead of the batch; it takes that choice
when the table's statistics predate a burst of READY work (work already due inserted in bulk, a
herd promoted), which is when claims matter most."""

# the store's own options in a postgresql:// URL (the rest is libpq's)
_OPTIONS = ("schema", "pool_size", "retries", "connect_timeout")


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """The libpq connection string and the store's options of a ``postgresql://`` URL.

    Raises:
        StoreConfigError: an option is malformed.
    """
    parts = urlsplit(url)
    if parts.scheme != "postgresql":
        raise StoreConfigError("not a postgresql:// URL")
    options: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k not in _OPTIONS:
            rest.append((k, v))
        elif k == "schema":
            options[k] = v
        else:
            try:
                options[k] = float(v) if k == "connect_timeout" else int(v)
            except ValueError:
                raise StoreConfigError(
                    f"{k} in the store URL is not a number (got {v!r})"
                ) from None
    return urlunsplit(parts._replace(query=urlencode(rest))), options
