"""``current_task()``: the task whose function is running, read from inside that function.

The dispatchers set it around each run, through a :mod:`contextvars` variable: a thread worker for
the duration of the call, an asyncio run inside its own asyncio task (so concurrent coroutine tasks
each see their own), and a plain function that the asyncio scheduler runs in a thread sees the one
it was started for. Outside a run it is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from typing import Any

from timewheel.task import Task

__all__ = ["call_as", "current_task", "reset_current_task", "set_current_task"]

_CURRENT: ContextVar[Task | None] = ContextVar("timewheel_current_task", default=None)


def current_task() -> Task | None:
    """The snapshot of the task being run, as claimed (state RUNNING, ``attempts`` counting this
    run), or ``None`` outside a task.

    ::

        def send_report():
            task = timewheel.current_task()
            log.info("run %d of %s, due %s", task.attempts, task.id, task.due)
    """
    return _CURRENT.get()


def set_current_task(task: Task | None) -> Token[Task | None]:
    """Make *task* the current task in this context (a dispatcher calls it before a run); the
    token undoes it."""
    return _CURRENT.set(task)


def reset_current_task(token: Token[Task | None]) -> None:
    """Undo :func:`set_current_task`."""
    _CURRENT.reset(token)


def call_as(
    task: Task, func: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """Call ``func(*args, **kwargs)`` with *task* as the current task; return what it returns."""
    token = _CURRENT.set(task)
    try:
        return func(*args, **kwargs)
    finally:
        _CURRENT.reset(token)
