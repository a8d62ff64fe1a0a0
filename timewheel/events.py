"""Events: what listeners hear, how often each happened, and who waits for a task to end.

Every station reports through one :class:`EventHub`: the facade when a task is submitted or
cancelled, the trigger when it skips a misfired run or re-queues an expired lease, the dispatcher's
workers when a run starts and ends. Listeners run in the thread where the event happened; their
exceptions are logged, never raised into the station that reported.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from timewheel.errors import InvalidScheduleError
from timewheel.task import Task, TaskState

__all__ = ["EVENTS", "TERMINAL_EVENT", "Event", "EventHub"]

log = logging.getLogger("timewheel")

EVENTS = (
    "submitted",
    "started",
    "succeeded",
    "failed",
    "retried",
    "timed_out",
    "cancelled",
    "upstream_failed",
)
"""Names of the events listeners can subscribe to."""

TERMINAL_EVENT = {
    TaskState.SUCCEEDED: "succeeded",
    TaskState.FAILED: "failed",
    TaskState.TIMED_OUT: "timed_out",
    TaskState.CANCELLED: "cancelled",
    TaskState.UPSTREAM_FAILED: "upstream_failed",
}
"""The event reported when a task reaches each terminal state."""


@dataclass(frozen=True, slots=True)
class Event:
    """Passed to listeners: what happened, to which task (snapshot), and the exception if any."""

    name: str
    task: Task
    exception: BaseException | None = None


class EventHub:
    """Listeners, event counters, and the condition that threads waiting on a task's end use.

    ``counts`` maps each event name to how many times it happened (read freely; a fast path may
    increment ``counts["submitted"]`` itself when :meth:`listening` says nobody listens).
    ``done`` is notified whenever a task reaches a terminal state; ``waiting`` counts the threads
    blocked on it (guarded by ``done``), so a finisher skips the lock when nobody waits.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(EVENTS, 0)
        self.done = threading.Condition(threading.Lock())
        self.waiting = 0
        self._listeners: dict[str, list[Callable[[Event], object]]] = {e: [] for e in EVENTS}
        self._callbacks: dict[str, list[Callable[[], object]]] = {}

    # -- listeners --------------------------------------------------------------------------
    def add_listener(self, fn: Callable[[Event], object], events: Iterable[str] = ()) -> None:
        """Call ``fn(event)`` for the named *events* (all when none are named)."""
        names = tuple(events) or EVENTS
        for e in names:
            if e not in self._listeners:
                raise InvalidScheduleError(f"unknown event {e!r}; events are {', '.join(EVENTS)}")
        for e in names:
            self._listeners[e].append(fn)

    def remove_listener(self, fn: Callable[[Event], object]) -> None:
        """Stop calling *fn*."""
        for lst in self._listeners.values():
            while fn in lst:
                lst.remove(fn)

    def listening(self, name: str) -> list[Callable[[Event], object]]:
        """The live list of listeners of *name* (empty when nobody listens)."""
        return self._listeners[name]

    def emit(self, name: str, task: Task, exc: BaseException | None = None) -> None:
        """Count the event *name* for *task* and call its listeners."""
        self.counts[name] += 1
        listeners = self._listeners[name]
        if listeners:
            ev = Event(name, task, exc)
            for fn in list(listeners):
                try:
                    fn(ev)
                except Exception:
                    log.exception("listener %r failed on %s of task %r", fn, name, task.id)

    # -- the end of a task ------------------------------------------------------------------------
    def ended(self, task_id: str) -> list[Callable[[], object]]:
        """Wake the threads waiting on any task's end; return *task_id*'s done callbacks (removed),
        for the caller to run outside the lock."""
        if not (self.waiting or self._callbacks):  # read without the lock: see Runtime.wait
            return []
        with self.done:
            self.done.notify_all()
            return self._callbacks.pop(task_id, None) or []

    def add_callback(
        self, task_id: str, fn: Callable[[], object], finished: Callable[[], bool]
    ) -> bool:
        """Keep *fn* for :meth:`ended` unless ``finished()`` says the task has already ended
        (checked under the lock, so no end slips between the check and the registration).

        Returns True when *fn* was kept; False means the caller runs it now.
        """
        with self.done:
            if finished():
                return False
            self._callbacks.setdefault(task_id, []).append(fn)
            return True

    def wake_all(self) -> None:
        """Wake every waiting thread (the scheduler stopped)."""
        with self.done:
            self.done.notify_all()

    @staticmethod
    def run_callbacks(task_id: str, callbacks: Iterable[Callable[[], Any]]) -> None:
        """Run done callbacks, logging (not raising) their exceptions."""
        for fn in callbacks:
            try:
                fn()
            except Exception:
                log.exception("done callback %r of task %r failed", fn, task_id)
