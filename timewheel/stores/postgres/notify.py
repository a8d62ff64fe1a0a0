"""Wake-ups across hosts: ``LISTEN``/``NOTIFY`` on the store's channel.

Each store schema has one channel, :func:`channel` of its name. What is announced on it, always
by the store that wrote it (the schema has no trigger):

* work inserted one task at a time (``insert``, the first instance of a schedule): after the
  insert commits, the store's :class:`Announcer` gathers for :data:`ANNOUNCE_WINDOW` and sends
  what it gathered in one statement from a daemon thread, on a pooled connection: a READY task
  as ``["r", origin]``; a PENDING, runnable task due within :data:`NOTIFY_WITHIN` seconds (of
  the server's clock, by the host's measured offset) as ``["p", origin, due_us, schedule_id,
  id]`` when it is the only one of the window, else one ``["m", origin, first_due_us]`` for all
  of them (listeners look in the store);
* a bulk insert (``insert_many``, ``insert_new``) announces once from its own transaction,
  ``["m", origin, first_due_us]`` for PENDING work due soon and ``["r", origin]`` for READY work.
  Successors of recurring instances are not announced: every host carrying a schedule computes
  them itself;
* work made READY (a promotion, a release, a state change) as ``["r", origin]``, from the
  transaction that made it, once per transaction (identical notifications in one transaction are
  delivered once).

*origin* is the token of the store object that wrote; a store ignores what it announced itself.
A notification is delivered when its transaction commits, so what it announces is there to be
read. An announcement can be lost: a single insert's announcement fails when the server cannot
be reached (after the store's retries; it is logged and never raises into the insert), and a
process that ends between the insert's commit and the announcement (killed, or gone without
``close()``) never sends it. Every scheduler's poll (``poll_interval``) and its wheel's refills
find such work all the same, later.

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
import time
from collections.abc import Callable, Sequence
from contextlib import suppress

import psycopg
from psycopg import sql

from timewheel import forking
from timewheel.errors import StoreError
from timewheel.stores import policy
from timewheel.stores.base import WorkListener
from timewheel.stores.postgres.connections import Conn
from timewheel.stores.postgres.schema import NOTIFY_WITHIN
from timewheel.stores.sqlite.codec import from_us

__all__ = [
    "ANNOUNCE_GAP",
    "ANNOUNCE_WINDOW",
    "NOTIFY_WITHIN",
    "RECONNECT_MAX",
    "Announcer",
    "Listener",
    "channel",
    "many_payload",
    "pending_payload",
    "ready_payload",
]

log = logging.getLogger("timewheel.stores.postgres")

RECONNECT_MAX = 30.0
"""The longest pause between two attempts to reconnect the listening connection (seconds)."""

ANNOUNCE_WINDOW = 0.002
"""Seconds an :class:`Announcer` gathers after the first insert it is told of before it sends:
the inserts of the window cost one statement. A lone insert reaches other hosts this much later."""

ANNOUNCE_GAP = 0.010
"""The fewest seconds between the starts of two sends of an :class:`Announcer`: while inserts
keep coming, it sends at most this often, so a process inserting one task after another pays
for one statement per this much time, not per few inserts (a send costs the client about as
much as an insert), and other hosts hear of its work at most this much later."""

_MAX_PAYLOAD = 7000  # bytes: a longer "p" (a long id) is sent as "m" (PostgreSQL's limit is 8000)
_WAIT = 0.5  # how long one wait for notifications lasts (the thread checks for stop between)


def _reason(error: BaseException, scrub: Callable[[str], str]) -> str:
    """The first line of *error*'s text, the password removed, for a warning (its type when it
    has no text)."""
    text = scrub(str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__


def channel(schema: str) -> str:
    """The notification channel of the store in *schema*: ``'timewheel_' || md5(schema)``,
    short enough for any schema name."""
    return "timewheel_" + hashlib.md5(schema.encode(), usedforsecurity=False).hexdigest()


def many_payload(origin: str, first_due_us: int) -> str:
    """The payload announcing several PENDING tasks inserted together by the store whose token
    is *origin*, the earliest due at *first_due_us* (listeners look in the store)."""
    return json.dumps(["m", origin, first_due_us])


def ready_payload(origin: str) -> str:
    """The payload announcing READY work written by the store whose token is *origin*."""
    return json.dumps(["r", origin])


def pending_payload(origin: str, task_id: str, due_us: int, schedule_id: str | None) -> str:
    """The payload announcing one PENDING task inserted by the store whose token is *origin*
    (listeners hand it to their wheels without a query); :func:`many_payload` when too long."""
    note = json.dumps(["p", origin, due_us, schedule_id, task_id])
    if len(note.encode()) > _MAX_PAYLOAD:
        return many_payload(origin, due_us)
    return note


class Announcer:
    """Announces the work one store object inserts one task at a time, after the inserts
    commit, from a daemon thread (see the module docstring).

    The inserting thread only records (:meth:`ready`, :meth:`pending`): a lock, a few fields,
    and waking the thread when it is idle. The thread waits :attr:`window` seconds from the first
    record (and at least :attr:`gap` seconds from the start of its last send), takes what was
    recorded, and sends it in one statement through *send*. A failure is
    logged (scrubbed of the password) and the announcement dropped: polls find the work.

    After ``fork()`` the child starts with nothing recorded and starts its own thread on its
    first record (what the parent recorded is the parent's to send).

    Args:
        send: runs one statement with its parameters on a pooled connection, in autocommit
            (raises ``StoreError`` when the retries are spent).
        channel: the store's channel.
        origin: the store's token.
        where: the server, as messages name it.
        scrub: removes the password from a text.
        clock_offset: this host's clock minus the server's (seconds, as the store measured it).
        window: seconds gathered before a send (:data:`ANNOUNCE_WINDOW`).
        gap: the fewest seconds between two sends (:data:`ANNOUNCE_GAP`).
    """

    def __init__(
        self,
        send: Callable[[bytes, Sequence[str]], object],
        *,
        channel: str,
        origin: str,
        where: str,
        scrub: Callable[[str], str],
        clock_offset: float = 0.0,
        window: float = ANNOUNCE_WINDOW,
        gap: float = ANNOUNCE_GAP,
    ) -> None:
        self.channel = channel
        self.origin = origin
        self.where = where
        #: seconds gathered after the first record before a send
        self.window = window
        #: the fewest seconds between the starts of two sends
        self.gap = gap
        #: this host's clock minus the server's (seconds): which tasks are due soon on the
        #: server's clock
        self.clock_offset = clock_offset
        #: how many statements were sent (failed ones included)
        self.sends = 0
        self._send = send
        self._scrub = scrub
        self._ready_note = ready_payload(origin)
        self._start_over()
        forking.after_fork_in_child(self._start_over)

    def _start_over(self) -> None:
        """Nothing recorded, no thread (at construction, and in a child after ``fork()``: the
        parent's lock may have been held by its thread at the fork)."""
        self._lock = threading.Lock()
        self._sent = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._hurry = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._armed = False  # the thread was woken for what is recorded
        self._ready = False
        self._count = 0  # PENDING tasks recorded
        self._first: tuple[str, int, str | None] = ("", 0, None)
        self._earliest = 0
        self._recorded = 0  # records made, ever
        self._taken = 0  # records the thread has taken to send
        self._done = 0  # records the thread has sent (or dropped on a failure)

    # -- the inserting side ----------------------------------------------------------------------
    def ready(self) -> None:
        """READY work was inserted (its transaction committed)."""
        with self._lock:
            if self._closed:
                return
            self._ready = True
            self._recorded += 1
            wake = self._arm()
        if wake:
            self._wake.set()

    def pending(self, task_id: str, due_us: int, schedule_id: str | None) -> None:
        """A PENDING task with no unmet dependency, due at *due_us* (epoch microseconds), was
        inserted (its transaction committed): announced when due within :data:`NOTIFY_WITHIN`
        seconds of the server's clock (this host's, less :attr:`clock_offset`)."""
        if due_us >= (time.time() - self.clock_offset + NOTIFY_WITHIN) * 1_000_000:
            return  # the wheels' refills load it
        with self._lock:
            if self._closed:
                return
            if self._count == 0:
                self._first = (task_id, due_us, schedule_id)
                self._earliest = due_us
            elif due_us < self._earliest:
                self._earliest = due_us
            self._count += 1
            self._recorded += 1
            wake = self._arm()
        if wake:
            self._wake.set()

    def _arm(self) -> bool:
        """Under the lock: whether the thread must be woken (it is idle), starting it first."""
        if self._armed:
            return False
        self._armed = True
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="timewheel-pg-announce", daemon=True
            )
            self._thread.start()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is recorded now, without waiting for the rest of the window; block until
        it was sent (True) or *timeout* passed."""
        with self._lock:
            target = self._recorded
            if self._done >= target:
                return True
            if self._taken < target:  # (else they are being sent: the next window is left alone)
                self._hurry.set()
            return self._sent.wait_for(lambda: self._done >= target, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is recorded, then stop the thread (waits up to *timeout* seconds); later
        records are ignored."""
        with self._lock:
            self._closed = True
            thread = self._thread
            self._hurry.set()
            self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the thread ------------------------------------------------------------------------------
    def _take(self) -> list[str]:
        """Under the lock: the payloads of what is recorded, which is then forgotten."""
        notes = [self._ready_note] if self._ready else []
        if self._count == 1:
            task_id, due_us, schedule_id = self._first
            notes.append(pending_payload(self.origin, task_id, due_us, schedule_id))
        elif self._count > 1:
            notes.append(many_payload(self.origin, self._earliest))
        self._ready = False
        self._count = 0
        self._taken = self._recorded
        self._armed = False
        self._wake.clear()
        self._hurry.clear()
        return notes

    def _run(self) -> None:
        last = -float("inf")  # when the last send started (monotonic)
        while True:
            self._wake.wait()
            # gather the window's inserts, and while they keep coming, up to the gap since the
            # last send (a flush or close ends the wait)
            self._hurry.wait(max(self.window, last + self.gap - time.monotonic()))
            last = time.monotonic()
            with self._lock:
                notes, upto, closed = self._take(), self._taken, self._closed
            if notes:
                self._announce(notes)
            with self._lock:
                self._done = upto
                self._sent.notify_all()
                if closed and self._done == self._recorded:
                    self._thread = None
                    return

    def _announce(self, notes: list[str]) -> None:
        statement = "SELECT " + ", ".join(["pg_notify(%s, %s)"] * len(notes))
        params: list[str] = []
        for note in notes:
            params += (self.channel, note)
        self.sends += 1
        try:
            self._send(statement.encode(), params)
        except Exception as e:  # never into the inserts: polls find the work
            log.warning(
                "PostgreSQL at %s: announcing inserted work to other hosts failed (%s); their "
                "polls find it",
                self.where,
                _reason(e, self._scrub),
            )


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
                log.warning(
                    "PostgreSQL at %s: the connection listening for other hosts' work was lost "
                    "(%s); polling covers it meanwhile; reconnecting in %.1f s",
                    self.where,
                    _reason(e, self._scrub),
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
