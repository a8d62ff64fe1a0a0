"""Connections to one SQLite file: one per thread and process, their pragmas, and transactions;
and the ``sqlite://`` URL that says which file and how (:func:`parse_url`).

* **One connection per thread** (``threading.local``), each with ``busy_timeout`` and the
  durability's ``synchronous`` pragma, **closed when its thread ends**: the thread's local storage
  holds the connection through a small holder object whose finalizer closes it, so a store
  shared by many short-lived threads (successive schedulers, worker pools) keeps one open
  connection per live thread, not one per thread that ever used it.
* A connection is **never used across** ``fork()``: a child that inherits the store notices the
  new pid and opens its own connections. Inherited connections are deliberately leaked, never
  closed: POSIX locks belong to the process, so closing the child's copy of a descriptor would
  drop the locks its own new connections hold on the same file.
* **Every write is one ``BEGIN IMMEDIATE`` transaction** (connections use
  ``isolation_level=None``), so two writers never both read and then fail to upgrade a lock.
  Threads of one process also take a process-local lock around writes, so they queue on a mutex
  instead of on SQLite's sleeping busy handler.
* **No connection checkpoints at commit** (``PRAGMA wal_autocheckpoint = 0``): the store's
  :class:`~timewheel.stores.sqlite.checkpoints.Checkpointer` thread does it, so a commit never
  waits for the disk on behalf of the whole log, with the write lock held.
* SQLite errors become :class:`~timewheel.errors.StoreError` (or
  :class:`~timewheel.errors.StoreCorruptError`) naming the file and what the store was doing.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from timewheel.errors import StoreConfigError, StoreCorruptError, StoreError
from timewheel.stores import policy
from timewheel.stores.sqlite.checkpoints import Checkpointer

__all__ = [
    "JOURNAL_SIZE_LIMIT",
    "ROUND_COPIES",
    "SMALL_REMAINDER",
    "VALVE_FRAMES",
    "Connections",
    "Durability",
    "Mode",
    "configure",
    "connect",
    "file_size",
    "is_busy",
    "is_corrupt",
    "parse_url",
    "translate",
]

log = logging.getLogger("timewheel.stores.sqlite")

Durability = Literal["durable", "fast"]
Mode = Literal["rwc", "rw", "ro"]
"""How a connection opens the file: create it if missing, read and write, or read only."""

ROUND_COPIES = 4
"""Most ``PASSIVE`` copies in one round of the checkpoint thread (:meth:`Connections.
checkpoint_round`) before it gives up leaving the log to start over until the next round."""

SMALL_REMAINDER = 64
"""Most pages committed during a round's last copy for the round to copy what remains with this
process's writers held back (:meth:`Connections.checkpoint_round`): so few pages take a
moment to copy, and a steady stream of small commits no longer keeps the log from starting
over."""

VALVE_FRAMES = 16_000
"""Pages in the log (about 64 MB at 4 KB a page, four times :data:`JOURNAL_SIZE_LIMIT`) from
which a round that could not leave the log to start over copies the rest with this process's
writers held back (:meth:`Connections.checkpoint_round`), so that writers that outpace the copies
for good cannot grow the log without bound. A burst does not reach it (the first batches of a
purge of a million tasks took the log to ~50 MB, which the next rounds started over): held back,
the writers would wait for a copy, as they did at SQLite's own checkpoint, which made the
commit past ~1000 pages wait for the whole copy."""

_READER_PAUSE = 0.001  # seconds a round waits before copying again (readers' statements are short)

JOURNAL_SIZE_LIMIT = 16 * 1024 * 1024
"""Bytes the ``-wal`` file is cut back to when a checkpoint lets SQLite start it over.

The WAL grows while a reader keeps a checkpoint from completing (or during a large transaction)
and, without a limit, keeps its largest size for good. Four times the ~4 MB at which SQLite
checkpoints by itself: ordinary traffic never pays for truncating and growing it again."""

# Inherited connections after fork(): kept referenced forever so they are never closed (closing
# would release the child's own POSIX locks on the file). One per thread that used the store.
_ORPHANS: list[sqlite3.Connection] = []

Row = tuple[Any, ...]

if TYPE_CHECKING:
    _Closer = weakref.finalize[
        [weakref.ReferenceType["Connections"], sqlite3.Connection, int], "_ThreadConnection"
    ]


class _ForkGate:
    """Keeps ``fork()`` from happening while a thread of this process is inside SQLite.

    A fork copies the memory of every thread but runs only the forking one. A thread inside
    SQLite at that moment may hold one of SQLite's own mutexes (opening a connection takes one),
    or be inside a write transaction whose lock bookkeeping SQLite keeps in process memory: the
    child then inherits them held by a thread that does not exist there, and its first connection
    or ``BEGIN IMMEDIATE`` waits forever. So every call into SQLite passes this gate;
    ``os.register_at_fork`` closes it before a fork (waiting for the calls in flight, which are
    short: a statement or one transaction) and opens it again after, in the parent and anew in the
    child. A call that forks from inside a call (nothing here does) is not waited for.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._inside: dict[int, int] = {}  # thread id -> calls in flight (nested ones count)
        self._forking = False

    @contextmanager
    def call(self) -> Iterator[None]:
        """Around one call into SQLite."""
        me = threading.get_ident()
        with self._cond:
            while self._forking and not self._inside.get(me):
                self._cond.wait()
            self._inside[me] = self._inside.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                left = self._inside[me] - 1
                if left:
                    self._inside[me] = left
                else:
                    del self._inside[me]
                    self._cond.notify_all()

    def before_fork(self) -> None:
        me = threading.get_ident()
        self._cond.acquire()
        self._forking = True
        while any(thread != me for thread in self._inside):
            self._cond.wait()
        # held through the fork: no thread starts a call until after_fork_in_parent

    def after_fork_in_parent(self) -> None:
        self._forking = False
        self._cond.notify_all()
        self._cond.release()

    def after_fork_in_child(self) -> None:
        self.__init__()  # type: ignore[misc]  # the parent's waiters do not exist here
        for connections in list(_LIVE):
            connections.after_fork()


_GATE = _ForkGate()
_LIVE: weakref.WeakSet[Connections] = weakref.WeakSet()  # every open Connections of the process
os.register_at_fork(
    before=_GATE.before_fork,
    after_in_parent=_GATE.after_fork_in_parent,
    after_in_child=_GATE.after_fork_in_child,
)


def connect(
    path: str, *, mode: Mode, busy_timeout: float, immutable: bool = False
) -> sqlite3.Connection:
    """A new connection to *path* in *mode*, in autocommit mode, waiting *busy_timeout* for locks.

    *immutable* (read-only mode) tells SQLite that nothing changes the file while it is open, so
    it reads without locks or the WAL's shared memory.

    Raises:
        sqlite3.Error: as SQLite reports it (callers translate it).
    """
    query = f"mode={mode}&immutable=1" if immutable else f"mode={mode}"
    with _GATE.call():  # opening takes one of SQLite's own mutexes: never across a fork
        return _connect(path, query, busy_timeout)


def _connect(path: str, query: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(
        f"file:{_quote_path(path)}?{query}",
        uri=True,
        isolation_level=None,
        check_same_thread=False,  # each connection is used by one thread; close() from any
        timeout=busy_timeout,
        cached_statements=256,
    )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    return conn


def configure(conn: sqlite3.Connection, durability: Durability) -> None:
    """Set the per-connection pragmas: ``synchronous`` for *durability*, temporary data in memory,
    :data:`JOURNAL_SIZE_LIMIT`, and no automatic checkpoint at commit (the store's
    :class:`~timewheel.stores.sqlite.checkpoints.Checkpointer` runs them)."""
    sync = "FULL" if durability == "durable" else "NORMAL"
    conn.execute(f"PRAGMA synchronous = {sync}")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
    conn.execute("PRAGMA wal_autocheckpoint = 0")


def is_busy(e: sqlite3.Error) -> bool:
    """True when *e* says another connection holds the lock."""
    msg = str(e)
    return "locked" in msg or "busy" in msg


def is_corrupt(e: sqlite3.Error) -> bool:
    """True when *e* says the file is damaged or not a database."""
    msg = str(e)
    return isinstance(e, sqlite3.DatabaseError) and any(
        s in msg for s in ("malformed", "not a database", "corrupt")
    )


def translate(path: str, e: sqlite3.Error, doing: str) -> StoreError:
    """The :class:`StoreError` for SQLite error *e* met on *path* while *doing*."""
    msg = str(e)
    if is_corrupt(e):
        return StoreCorruptError(
            f"timewheel store {path!r} is damaged ({msg}) while {doing}; restore a backup, or "
            "move the file aside and start with an empty store"
        )
    if is_busy(e):
        return StoreError(
            f"timewheel store {path!r} stayed locked by another connection while {doing} ({msg}); "
            "a long transaction elsewhere holds it: raise busy_timeout or find the holder"
        )
    if "readonly" in msg or "read-only" in msg:
        return StoreError(
            f"timewheel store {path!r} is read-only ({msg}) while {doing}; make the file and "
            "its directory writable"
        )
    return StoreError(f"timewheel store {path!r} failed while {doing}: {msg}")


class _ThreadConnection:
    """One thread's connection, held in that thread's local storage.

    When the thread ends its local storage is freed with it, and so is this holder: its
    finalizer (:func:`_thread_ended`) then closes the connection.
    """

    __slots__ = ("__weakref__", "conn", "pid")

    def __init__(self, conn: sqlite3.Connection, pid: int) -> None:
        self.conn = conn
        self.pid = pid


def _thread_ended(
    owner: weakref.ReferenceType[Connections], conn: sqlite3.Connection, pid: int
) -> None:
    """Close the connection of a thread that ended (or whose store was closed)."""
    if os.getpid() != pid:
        # A forked child frees the local storage of the parent's other threads: their
        # connections are the parent's, never closed here (see the module docstring).
        _ORPHANS.append(conn)
        return
    connections = owner()
    if connections is not None:
        connections.forget(conn)
    try:
        conn.close()
    except sqlite3.Error:
        pass  # closing is best effort


class Connections:
    """The connections of one store to its file: one per live thread, opened on first use.

    Args:
        path: the database file (absolute).
        mode: how connections open it (``"ro"``: every write is refused before it reaches SQLite).
        durability: the ``synchronous`` level of every connection.
        busy_timeout: seconds to wait for another process's write lock.
        first: the connection that opened the file, used by the calling thread.
        immutable: open later connections as immutable too (see :func:`connect`).
    """

    def __init__(
        self,
        path: str,
        *,
        mode: Mode,
        durability: Durability,
        busy_timeout: float,
        first: sqlite3.Connection,
        immutable: bool = False,
    ) -> None:
        self.path = path
        self._immutable = immutable
        self.read_only = mode == "ro"
        self._mode: Mode = "ro" if self.read_only else "rw"
        self._durability: Durability = durability
        self._busy_timeout = busy_timeout
        self._busy_pragma = f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}"
        self._pid = os.getpid()
        self._local = threading.local()
        # this process's open connections (their holders' finalizers close them)
        self._open: dict[int, tuple[sqlite3.Connection, _Closer]] = {}
        self._meta = threading.Lock()
        self._write_lock = threading.Lock()
        # one checkpoint at a time in this process: SQLite answers a second one "busy" at once
        self._checkpoint_lock = threading.Lock()
        self.closed = False
        self._hold(first, self._pid)
        #: the thread that checkpoints the WAL (started by the first commit; none when read-only)
        self.checkpointer = Checkpointer(self)
        self._written = self.checkpointer.written
        _LIVE.add(self)

    def __len__(self) -> int:
        """How many connections this process holds open (one per live thread that used it)."""
        with self._meta:
            return len(self._open)

    def _hold(self, conn: sqlite3.Connection, pid: int) -> None:
        holder = _ThreadConnection(conn, pid)
        closer = weakref.finalize(holder, _thread_ended, weakref.ref(self), conn, pid)
        closer.atexit = False  # at exit, sqlite3 closes what is left itself
        with self._meta:
            self._open[id(conn)] = (conn, closer)
        self._local.holder = holder

    def forget(self, conn: sqlite3.Connection) -> None:
        """Drop *conn* from the open connections (its thread ended; it is being closed)."""
        with self._meta:
            self._open.pop(id(conn), None)

    def call(self) -> AbstractContextManager[None]:
        """Around a statement the caller runs on :meth:`get`'s connection itself (see
        :class:`_ForkGate`)."""
        return _GATE.call()

    def get(self) -> sqlite3.Connection:
        """The calling thread's connection, opened on first use (and anew after ``fork()``).

        Raises:
            StoreError: the store is closed, or the connection cannot be opened.
        """
        pid = os.getpid()
        holder: _ThreadConnection | None = getattr(self._local, "holder", None)
        if holder is not None and holder.pid == pid:
            return holder.conn
        if self.closed:
            raise StoreError(f"timewheel store {self.path!r} is closed; open a new SQLiteStore")
        if pid != self._pid:
            self.after_fork()
        try:
            with _GATE.call():
                conn = connect(
                    self.path,
                    mode=self._mode,
                    busy_timeout=self._busy_timeout,
                    immutable=self._immutable,
                )
                configure(conn, self._durability)
        except sqlite3.Error as e:
            raise translate(self.path, e, "opening a connection") from e
        self._hold(conn, pid)
        return conn

    def after_fork(self) -> None:
        """In a child made by ``fork()``: set aside the parent's connections (never used or closed
        here) and make new locks. Run once in the child right after the fork."""
        pid = os.getpid()
        if pid == self._pid:
            return
        for conn, closer in self._open.values():
            closer.detach()
            _ORPHANS.append(conn)
        self._open = {}
        self._meta = threading.Lock()
        self._write_lock = threading.Lock()
        # one checkpoint at a time in this process: SQLite answers a second one "busy" at once
        self._checkpoint_lock = threading.Lock()
        self._pid = pid
        self.checkpointer.after_fork()

    def read(self, sql: str, params: Sequence[Any] = (), doing: str = "reading") -> list[Row]:
        """Run one query on the calling thread's connection and fetch every row."""
        try:
            conn = self.get()
            with _GATE.call():
                return conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise translate(self.path, e, doing) from e

    @contextmanager
    def transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` write transaction; SQLite errors become StoreError.

        Raises:
            StoreError: the store is read-only or closed, or SQLite failed (*doing* says where).
        """
        if self.read_only:
            raise StoreError(
                f"timewheel store {self.path!r} was opened read-only and refuses {doing}; open "
                "it without read_only=True to change it"
            )
        conn = self.get()
        with _GATE.call(), self._write_lock:
            try:
                self._begin(conn)
            except sqlite3.Error as e:
                raise translate(self.path, e, doing) from e
            changes = conn.total_changes
            try:
                yield conn
            except BaseException as e:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the error already ended the transaction
                if isinstance(e, sqlite3.Error):
                    raise translate(self.path, e, doing) from e
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as e:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                    raise translate(self.path, e, doing) from e
                if conn.total_changes != changes:  # an idle claim that found nothing wrote nothing
                    self._written()

    def _begin(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, waiting for another process's write lock at most busy_timeout.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between attempts, leaving the lock
        idle while writers that hold it for ~50 us come and go. Here the wait starts at ~20 us
        and backs off (with jitter) to at most 1 ms, so waiting writers take the lock soon after
        it is released. The connection's busy_timeout is set to 0 only around this statement.
        """
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if not is_busy(e):
                    raise
            deadline = time.monotonic() + self._busy_timeout
            delay = 2e-5
            while True:
                time.sleep(policy.backoff_pause(delay))
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as e:
                    if not is_busy(e) or time.monotonic() >= deadline:
                        raise
                delay = min(delay * 1.5, 1e-3)
        finally:
            conn.execute(self._busy_pragma)

    def checkpoint(self, mode: str) -> bool:
        """``PRAGMA wal_checkpoint(mode)`` on the calling thread's connection, after any other
        checkpoint of this process; True if it completed (False: other connections were busy).

        Raises:
            StoreError: SQLite failed.
        """
        with self._checkpoint_lock:
            (busy, _, _) = self.read(f"PRAGMA wal_checkpoint({mode})", doing="checkpointing")[0]
        return int(busy) == 0

    def try_checkpoint(self, busy_wait: float) -> None:
        """``wal_checkpoint(TRUNCATE)`` waiting at most *busy_wait* seconds; skipped if busy."""
        conn = self.get()
        with _GATE.call(), self._checkpoint_lock:
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(busy_wait * 1000)}")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error as e:
                log.debug("checkpoint of %s skipped: %s", self.path, e)
            finally:
                conn.execute(self._busy_pragma)

    def checkpoint_round(self, *, truncate: bool) -> tuple[bool, int]:
        """One round of the checkpoint thread (see :mod:`~timewheel.stores.sqlite.checkpoints`)
        on the calling thread's connection: a ``PASSIVE`` checkpoint without locks, then, if
        it copied the whole log and nothing was committed since it began, ``RESTART`` (or
        ``TRUNCATE``) under this process's write lock, which copies nothing and waits for
        nobody. A commit during the copy, or a reader that still needs part of the log, sends
        it round again (each copies only what came during the one before), at most
        :data:`ROUND_COPIES` times. When even the last one had commits during it, one more copy
        runs under the write lock if they were few (at most :data:`SMALL_REMAINDER` pages: a
        stream of small commits), or if the log holds :data:`VALVE_FRAMES` pages or more (so
        that it stays bounded even when this process writes faster than the disk takes the
        copies). Returns whether the log was left to start over
        (or truncated) and the most pages it held."""
        conn = self.get()
        most = 0
        seen = [0]  # the log's pages at each copy: their growth is what a copy sees committed
        with _GATE.call(), self._checkpoint_lock:
            try:
                conn.execute("PRAGMA busy_timeout = 0")
                for _ in range(ROUND_COPIES):
                    (before,) = conn.execute("PRAGMA data_version").fetchone()
                    (_, frames, copied) = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    seen.append(frames)
                    most = max(most, frames)
                    if frames <= 0 and not truncate:
                        return True, most  # empty, or started over already
                    if copied == frames:  # else a reader still needs the rest (briefly)
                        with self._write_lock:  # no commit of this process meanwhile
                            (now,) = conn.execute("PRAGMA data_version").fetchone()
                            if now == before:
                                mode = "TRUNCATE" if truncate else "RESTART"
                                (busy, _, _) = conn.execute(
                                    f"PRAGMA wal_checkpoint({mode})"
                                ).fetchone()
                                if int(busy) == 0:
                                    return True, most
                    time.sleep(_READER_PAUSE)  # committed meanwhile, or a reader held on
                # frequent small commits came during every copy: the last copy then leaves little,
                # and copying it with the writers held back is short; past VALVE_FRAMES the
                # writers outpace the copies and wait whatever it takes
                small = 0 <= seen[-1] - seen[-2] <= SMALL_REMAINDER
                if most < VALVE_FRAMES and not small:
                    return False, most  # a burst: the next round tries again
                with self._write_lock:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                return int(busy) == 0, most
            except sqlite3.Error as e:
                log.debug("checkpoint of %s skipped: %s", self.path, e)
                return False, most
            finally:
                conn.execute(self._busy_pragma)

    def close(self) -> None:
        """Close this process's connections (idempotent); later use raises StoreError."""
        if self.closed:
            return
        self.closed = True
        if os.getpid() != self._pid:
            self.after_fork()
        self.checkpointer.stop()  # before its connection is closed under it
        with self._meta:
            closers = [closer for _, closer in self._open.values()]
        for closer in closers:
            closer()  # closes the connection now; a finalizer runs once
        self._local = threading.local()


def _quote_path(path: str) -> str:
    # URI-escape the characters that have a meaning in a file: URI
    return path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """The path and keyword options of an ``sqlite://`` URL (see :meth:`SQLiteStore.from_url`).

    Raises:
        StoreConfigError: the URL is malformed or names an unknown option.
    """
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise StoreConfigError(f"not an sqlite:// URL: {url!r}")
    if parts.netloc:
        raise StoreConfigError(
            f"{url!r} has a host ({parts.netloc!r}); use sqlite:///relative/path or "
            "sqlite:////absolute/path (SQLite files must be local)"
        )
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not path:
        raise StoreConfigError(f"{url!r} names no file; use sqlite:///path/to/file.db")
    options: dict[str, Any] = {}
    for k, vs in parse_qs(parts.query, keep_blank_values=True, strict_parsing=False).items():
        value = vs[-1]
        if k == "durability":
            options[k] = value
        elif k == "busy_timeout":
            try:
                options[k] = float(value)
            except ValueError:
                raise StoreConfigError(
                    f"busy_timeout in {url!r} is not a number (got {value!r})"
                ) from None
        elif k == "verify":
            flags = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
            if value.lower() not in flags:
                raise StoreConfigError(f"verify in {url!r} must be 1 or 0 (got {value!r})")
            options[k] = flags[value.lower()]
        else:
            raise StoreConfigError(
                f"unknown option {k!r} in {url!r}; known: durability, busy_timeout, verify"
            )
    return path, options


def file_size(path: str) -> int:
    """The size of the file at *path* in bytes; 0 when it does not exist (a WAL not yet made)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
