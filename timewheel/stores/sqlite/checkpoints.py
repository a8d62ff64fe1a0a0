"""WAL checkpoints of one store, run by a thread of its own instead of by whoever commits.

SQLite checkpoints the write-ahead log by itself when a commit takes it past ~1000 pages: that
commit then copies the log into the database and waits for the disk (``fsync``), in the thread
that committed, while it still holds the store's write lock. On a loaded disk that took over
100 ms, in the scheduler's trigger or in a worker, and every other writer of the process waited
the same time behind it. The store's connections therefore turn that off
(``PRAGMA wal_autocheckpoint = 0``) and a :class:`Checkpointer` does the work, in rounds
(:meth:`Checkpointable.checkpoint_round`):

* **A round** first copies the log into the database with a ``PASSIVE`` checkpoint, which takes
  no lock: writers go on appending to the log meanwhile and readers are never waited for. Then,
  if nothing was committed since it began, it takes the process's write lock for a moment and
  runs a ``RESTART`` checkpoint, which finds nothing left to copy (no disk wait) and only checks
  that no reader still uses the log: the next writer then starts the log over from its
  beginning. (Without that step a log copied while writers keep coming is never started over,
  and grows: a writer starts the log over only if it began after the whole log was copied.) A
  commit during the copy, or a reader still using part of the log, sends the round round again,
  a few times; a round that still could not copies the rest with this process's writers held
  back when only a few pages came during its last copy (a stream of small commits:
  ``connections.SMALL_REMAINDER``), or whatever came once the log passed ~64 MB
  (``connections.VALVE_FRAMES``), so the log stays bounded.
* **While the store is written**, a round about every :data:`TARGET_FRAMES` pages written, as
  SQLite's own checkpoint would come: the thread learns from each round how many pages the log
  held and spaces the next one to match the rate of writing, between :data:`SHORTEST_PAUSE`
  and :data:`PASSIVE_EVERY` seconds apart (the first commit after a quiet spell gets a round at
  once, and the next soon after, to learn the new rate). The log holds about what is written
  between two rounds; the ``-wal`` file keeps its largest size, which ``journal_size_limit``
  cuts back to 16 MB when the log starts over.
* **When asked to shrink the file** (:meth:`Checkpointer.request_truncate`: the store's
  ``maintain()``, or a worker that found nothing to claim), the round ends with ``TRUNCATE``
  instead of ``RESTART``, once nothing has been committed for :data:`PASSIVE_EVERY` seconds; a
  round that could not (readers, or a commit in between) leaves the request for the next.
* The thread starts at the first commit (a store only read never has one), sleeps while nothing
  is written, and ends when the store is closed, when the store is garbage collected without
  being closed, or at interpreter exit. A child made by ``fork()`` has no copy of it: the
  child's first commit starts its own.

Other processes on the same file run their own checkpointer (timewheel) or SQLite's automatic
checkpoint (any other program, such as the ``sqlite3`` shell, whose commits may then copy this
process's log too): checkpoints from several processes are safe, SQLite serialises them.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from typing import Protocol

__all__ = [
    "PASSIVE_EVERY",
    "SHORTEST_PAUSE",
    "TARGET_FRAMES",
    "Checkpointable",
    "Checkpointer",
]

log = logging.getLogger("timewheel.stores.sqlite")

PASSIVE_EVERY = 1.0
"""Most seconds between two rounds while the store is written, and the quiet time a
``TRUNCATE`` waits for."""

TARGET_FRAMES = 1000
"""Pages written between two rounds the thread aims at (SQLite's own ``wal_autocheckpoint``
default: about 4 MB of log)."""

SHORTEST_PAUSE = 0.05
"""Fewest seconds between two rounds, however fast the store is written."""


class Checkpointable(Protocol):
    """**Protocol:** what the checkpointer drives: the store's connections."""

    def checkpoint_round(self, *, truncate: bool) -> tuple[bool, int]:
        """One round on the calling thread's connection (module docstring): whether the log
        was left to start over (or truncated, with *truncate*), and the pages it held."""
        ...


_LIVE: weakref.WeakSet[Checkpointer] = weakref.WeakSet()


class Checkpointer:
    """The checkpoint thread of one store in this process (see the module docstring).

    Args:
        target: the store's connections, held weakly: once they are collected the thread ends.
        every: most seconds between two rounds while the store is written, and the quiet
            time before a ``TRUNCATE``.

    :meth:`written` and :meth:`request_truncate` may be called from any thread.
    """

    def __init__(self, target: Checkpointable, *, every: float = PASSIVE_EVERY) -> None:
        self._target = weakref.ref(target)
        self.every = every
        self._pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._dirty = False  # committed since the last checkpoint began
        self._truncate = False  # a TRUNCATE is asked for
        self._stopped = False
        #: rounds ended so far, and how many of them left the log to start over or truncated it
        self.rounds = self.restarts = self.truncates = 0
        weakref.finalize(target, self._signal_stop)
        _LIVE.add(self)

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def written(self) -> None:
        """Called after each commit: the first since the last checkpoint wakes the thread (a
        plain attribute test otherwise)."""
        if not self._dirty:
            self._wake(truncate=False)

    def request_truncate(self) -> None:
        """Ask for the ``-wal`` file to be checkpointed and truncated at the next quiet moment."""
        self._wake(truncate=True)

    def _wake(self, *, truncate: bool) -> None:
        if os.getpid() != self._pid:
            self.after_fork()
        with self._cond:
            if self._stopped:
                return
            if truncate:
                self._truncate = True
            else:
                self._dirty = True
            self._cond.notify_all()
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name="timewheel-sqlite-checkpoints", daemon=True
                )
                try:
                    thread.start()
                except RuntimeError:  # interpreter shutting down: closing the store checkpoints
                    return
                self._thread = thread

    def stop(self) -> None:
        """End the thread and wait for it (a checkpoint in progress finishes first)."""
        self._signal_stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _signal_stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def after_fork(self) -> None:
        """In a child made by ``fork()``: the thread was not copied; the next commit starts one."""
        pid = os.getpid()
        if pid == self._pid:
            return
        self._pid = pid
        self._cond = threading.Condition(threading.Lock())
        self._thread = None
        self._dirty = self._truncate = False

    def _run(self) -> None:
        last = -float("inf")  # when the last round began
        pause = self.every  # seconds from one round to the next
        woken = True  # started, or slept until a commit came: the rate of writing is not known
        while True:
            with self._cond:
                while not (self._dirty or self._truncate or self._stopped):
                    woken = True
                    self._cond.wait()
                # commits gather for `pause` seconds; a TRUNCATE waits for `every` of silence
                while not self._stopped:
                    wait = self.every if self._truncate and not self._dirty else pause
                    left = last + wait - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stopped:
                    return
                dirty, self._dirty = self._dirty, False
                truncate = self._truncate and not dirty
                if truncate:
                    self._truncate = False
            began = time.monotonic()
            done, frames = self._round(truncate)
            # the pages written since the last round, at this rate, reach TARGET_FRAMES after...
            pause = min(self.every, (began - last) * TARGET_FRAMES / max(frames, 1))
            if woken:  # measure the new rate soon: a burst after a pause fills the log fast
                pause = min(pause, 2 * SHORTEST_PAUSE)
            pause = max(SHORTEST_PAUSE, pause)
            last = began
            woken = False
            if truncate and not done:
                with self._cond:
                    self._truncate = True  # at the next quiet moment

    def _round(self, truncate: bool) -> tuple[bool, int]:
        target = self._target()
        if target is None:
            self._signal_stop()
            return False, 0
        try:
            done, frames = target.checkpoint_round(truncate=truncate)
        except Exception:  # a closed store, a damaged file: the store's own calls report it
            log.debug("checkpoint round failed", exc_info=True)
            done, frames = False, 0
        if done:
            if truncate:
                self.truncates += 1
            else:
                self.restarts += 1
        self.rounds += 1
        return done, frames


@atexit.register
def _stop_all() -> None:
    # before the interpreter tears down: no checkpoint is left half-way in a frozen thread
    for checkpointer in list(_LIVE):
        checkpointer.stop()
