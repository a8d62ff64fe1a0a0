"""What ``timewheel worker MODULE:ATTR`` may run as its target.

The target is a :class:`~timewheel.recurring.Registry`, a :class:`~timewheel.scheduler.Scheduler`,
or a function marked with :func:`worker_factory`, which the worker calls with no arguments. The
mark is explicit so that a task function named as the target by mistake is refused instead of
being run by the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from typing_extensions import TypeIs

__all__ = ["is_worker_factory", "worker_factory"]

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__timewheel_worker_factory__"


def worker_factory(func: F) -> F:
    """Mark *func* as a factory that ``timewheel worker MODULE:FUNC`` may call.

    The worker calls it with no arguments; it must return a :class:`~timewheel.Scheduler` (run as
    is, with its own store) or a :class:`~timewheel.Registry` (included in a scheduler on
    ``--store``). Only marked functions are called.

    >>> @worker_factory
    ... def make_worker() -> Scheduler: ...
    """
    setattr(func, _MARK, True)  # a plain attribute: functions accept any
    return func


def is_worker_factory(obj: object) -> TypeIs[Callable[[], object]]:
    """True if *obj* is a callable marked with :func:`worker_factory`."""
    return callable(obj) and getattr(obj, _MARK, False) is True
