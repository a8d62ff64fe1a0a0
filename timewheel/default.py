"""The module-level default scheduler: ``timewheel.schedule(...)`` without building one.

The process-wide :class:`~timewheel.scheduler.Scheduler` (memory store, system clock, thread-pool
workers) starts on first use and shuts down, waiting for running tasks, at interpreter exit. A
process made by ``fork()`` starts its own on first use: the parent's (and its tasks) stay with the
parent.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar

from timewheel import forking
from timewheel.jobs import Job, Jobs, Step
from timewheel.scheduler import Scheduler

__all__ = ["chain", "cron", "default_scheduler", "every", "schedule", "schedule_many"]

F = TypeVar("F", bound=Callable[..., Any])

_default: Scheduler | None = None
_default_lock = threading.Lock()


def _forget_parents() -> None:
    """In a forked child: the parent's default scheduler stays the parent's; this process makes
    its own on first use (the lock is new: a parent thread may have held it at the fork)."""
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


forking.after_fork_in_child(_forget_parents)


def default_scheduler() -> Scheduler:
    """The process-wide scheduler behind :func:`timewheel.schedule`, started on first use and shut
    down (waiting for running tasks) at interpreter exit. A forked process starts its own."""
    global _default
    with _default_lock:
        if _default is None or not _default.running:
            _default = Scheduler().start()
            atexit.register(_default.shutdown)
        return _default


def schedule(func: Callable[..., Any] | str, /, *args: Any, **options: Any) -> Any:
    """Schedule on the default scheduler; see :meth:`Scheduler.schedule` (a ``Job``, or a
    ``Schedule`` for ``cron=``/``every=``)."""
    return default_scheduler().schedule(func, *args, **options)


def schedule_many(
    items: Iterable[Step | Callable[..., Any] | str | tuple[Any, ...]], /, **options: Any
) -> Jobs:
    """:meth:`Scheduler.schedule_many` on the default scheduler."""
    return default_scheduler().schedule_many(items, **options)


def chain(*steps: Step | Callable[..., Any], when: str = "all_success") -> list[Job]:
    """:meth:`Scheduler.chain` on the default scheduler."""
    return default_scheduler().chain(*steps, when=when)


def cron(expr: str, /, **options: Any) -> Callable[[F], F]:
    """``@timewheel.cron("0 0 * * *")``: a recurring function on the default scheduler."""
    return default_scheduler().cron(expr, **options)


def every(
    interval: float | timedelta | None = None,
    /,
    *,
    seconds: float = 0,
    minutes: float = 0,
    hours: float = 0,
    days: float = 0,
    **options: Any,
) -> Callable[[F], F]:
    """``@timewheel.every(minutes=5)``: a recurring function on the default scheduler."""
    return default_scheduler().every(
        interval, seconds=seconds, minutes=minutes, hours=hours, days=days, **options
    )
