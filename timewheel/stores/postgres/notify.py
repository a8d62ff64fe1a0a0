"""Wake-ups across hosts: ``LISTEN``/``NOTIFY`` on the store's channel.

Each store schema has one channel, :func:`channel` of its name. What is announced on it:

* every inserted PENDING, runnable task due within :data:`NOTIFY_WITHIN` seconds (by the
  server's clock), from a row trigger on the ``tasks`` table (schema version 3), whoever
  inserts: ``["p", origin, due_us, schedule_id, id]``. Its ``WHEN`` clause lets other rows pass
  for the price of a comparison, and the function runs no query;
* a bulk insert instead sets ``timewheel.quiet`` for its transaction (rows pass the trigger)
  and announces once, ``["m", origin, first_due_us]``: listeners look in the store. Successors
  of recurring instances are inserted quietly and not announced: every host carrying a schedule
  computes them itself;
* work made READY (a promotion, a release, a READY row inserted) as ``["r", origin]``, once per
  transaction (identical notifications in one transaction are delivered once).

*origin* is the token of the store object whose pooled connection wrote (each connection sets
``timewheel.origin``); a store ignores what it announced itself. A notification is delivered
when its transaction commits, so what it announces is there to be read.

A :class:`Listener` holds one connection outside the pool, in autocommit, that listens on the
channel from a daemon thread (psycopg's ``Connection.notifies()``) and tells the store's
:class:`~timewheel.stores.base.WorkListener` objects: a single task is handed over as it is
(no query), anything else as "look in the store". When the connection is lost (a restarted
server, ``pg_terminate_backend``, a dropped network) the thread reconnects with backoff (0.1 s
doubling to :data:`RECONNECT_MAX`), and after every connect tells its listeners to look in the
store for what they may have missed; until then the schedulers' polls cover it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from contextlib import suppress

import psycopg
from psycopg import sql

from timewheel.errors import StoreError
from timewheel.stores import policy
from timewheel.stores.base import WorkListener
from timewheel.stores.postgres.connections import Conn
from timewheel.stores.postgres.schema import NOTIFY_WITHIN
from timewheel.stores.sqlite.codec import from_us

__all__ = [
    "NOTIFY_WITHIN",
    "RECONNECT_MAX",
    "Listener",
    "channel",
    "many_payload",
    "ready_payload",
]

log = logging.getLogger("timewheel.stores.postgres")

RECONNECT_MAX = 30.0
"""The longest pause between two attempts to reconnect the listening connection (seconds)."""

_WAIT = 0.5  # how long one wait for notifications lasts (the thread checks for stop between)


def channel(schema: str) -> str:
    """The notification channel of the store in *schema* (the same as the schema's trigger
    computes: ``'timewheel_' || md5(schema)``, short enough for any schema name)."""
    return "timewheel_" + hashlib.md5(schema.encode(), usedforsecurity=False).hexdigest()


def many_payload(origin: str, first_due_us: int) -> str:
    """The payload announcing several PENDING tasks inserted together by the store whose token
    is *origin*, the earliest due at *first_due_us* (listeners look in the store)."""
    return json.dumps(["m", origin, first_due_us])


def ready_payload(origin: str) -> str:
    """The payload announcing READY work written by the store whose token is *origin*."""
    return json.dumps(["r", origin])


class Listener:
    """One listening connection and its thread, for the :class:`WorkListener` objects of one
    store in this process (see the module docstring).

    Args:
        connect: opens a connection outside the pool (raises ``StoreError``).
        schema: the store's schema (its channel is listened to).
        origin: this store's token: its own announcements are ignored.
        where: the server, as messages name it.
        scrub: removes the password from a text.
        on_connect: called with the connection after each connect (the clock is measured).
        on_idle: called with the connection between waits (a periodic clock measurement).
    """

    def __init__(
        self,
        connect: Callable[[], Conn],
        *,
        schema: str,
        origin: str,
        where: str,
        scrub: Callable[[str], str],
        on_connect: Callable[[Conn], None],
        on_idle: Callable[[Conn], None],
    ) -> None:
        self.channel = channel(schema)
        self.origin = origin
        self.where = where
        self.pid = os.getpid()
        #: the server process of the listening connection, while connected (``pg_stat_activity``)
        self.backend_pid: int | None = None
        #: how many times the connection was made (1 after the first connect)
        self.connects = 0
        self._connect = connect
        self._scrub = scrub
        self._on_connect = on_connect
        self._on_idle = on_idle
        self._listeners: list[WorkListener] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, listener: WorkListener) -> Callable[[], None]:
        """Tell *listener* about other processes' work (the thread starts with the first
        listener); returns the function that stops telling it."""
        with self._lock:
            self._listeners.append(listener)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="timewheel-pg-listen", daemon=True
                )
                self._thread.start()

        def remove() -> None:
            with self._lock:
                with suppress(ValueError):
                    self._listeners.remove(listener)
                if self._listeners or self._thread is None:
                    return
                self._stop.set()
                self._thread = None
                self._stop = threading.Event()  # a later add() starts a new thread

        return remove

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Block until the listening connection is made (True), or *timeout* passes."""
        return self._connected.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Stop the thread and close its connection (waits up to *timeout* seconds)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._listeners.clear()
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        stop = self._stop
        delay = 0.1
        while not stop.is_set():
            conn: Conn | None = None
            try:
                conn = self._connect()
                conn.autocommit = True
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                self.backend_pid = conn.info.backend_pid
                self._on_connect(conn)
                self.connects += 1
                if self.connects > 1:
                    log.info("PostgreSQL at %s: listening for other hosts' work again", self.where)
                delay = 0.1
                self._connected.set()
                # what was announced while nobody listened here: look in the store
                self._changed(pending=True, ready=True)
                while not stop.is_set():
                    for note in conn.notifies(timeout=_WAIT):
                        self._deliver(note.payload)
                    if not stop.is_set():
                        self._on_idle(conn)
            except (psycopg.Error, StoreError) as e:
                self._connected.clear()
                if stop.is_set():
                    break
                pause = policy.backoff_pause(delay)
                text = self._scrub(str(e)).strip()
                log.warning(
                    "PostgreSQL at %s: the connection listening for other hosts' work was lost "
                    "(%s); polling covers it meanwhile; reconnecting in %.1f s",
                    self.where,
                    text.splitlines()[0] if text else type(e).__name__,
                    pause,
                )
                stop.wait(pause)
                delay = min(delay * 2, RECONNECT_MAX)
            finally:
                self.backend_pid = None
                if conn is not None:
                    with suppress(Exception):
                        conn.close()
        self._connected.clear()

    def _targets(self) -> list[WorkListener]:
        with self._lock:
            return list(self._listeners)

    def _changed(self, *, pending: bool, ready: bool) -> None:
        for listener in self._targets():
            try:
                listener.work_changed(pending=pending, ready=ready)
            except Exception:  # a listener's failure must not end the listening thread
                log.exception("a listener failed on a notification from %s", self.where)

    def _deliver(self, payload: str) -> None:
        try:
            note = json.loads(payload)
            kind, origin = note[0], note[1]
        except (ValueError, TypeError, IndexError, KeyError):
            log.debug("ignored a malformed notification on %s: %r", self.channel, payload[:200])
            return
        if origin == self.origin:
            return  # this store's own work: its schedulers know it already
        if kind == "p" and len(note) == 5:
            entry = (str(note[4]), from_us(int(note[2])), note[3])
            for listener in self._targets():
                try:
                    listener.work_scheduled([entry])
                except Exception:
                    log.exception("a listener failed on a notification from %s", self.where)
        elif kind == "m":
            self._changed(pending=True, ready=False)
        elif kind == "r":
            self._changed(pending=False, ready=True)
