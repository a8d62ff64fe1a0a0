"""How timewheel reports through the standard ``logging`` module.

Everything goes to the logger ``"timewheel"`` and its children (``timewheel.dispatch``,
``timewheel.trigger`` ...). Records about one task carry, in their message and as ``extra``
attributes, the task's ``task_id``, ``function`` (its reference, ``module:qualname``) and
``attempt`` (the run number, from 1), so a handler or a structured formatter can filter on them.

What is logged, and at which level:

- a run that failed and will be retried: WARNING;
- a final failure or a final timeout: ERROR, with the traceback when the exception was raised in
  this process;
- a lease that expired (the worker died or stalled) and re-queued its task: WARNING;
- a recurring run skipped by its misfire or overlap policy: INFO.

timewheel adds no handler: an application that configures no logging still sees WARNING and
ERROR records on stderr (through ``logging.lastResort``). ``docs/concepts.md`` shows how to route
or silence them.
"""

from __future__ import annotations

from typing import Any

from timewheel.task import Task

__all__ = ["task_extra", "task_label"]


def task_extra(task: Task) -> dict[str, Any]:
    """The ``extra`` of a log record about *task*: ``task_id``, ``function`` and ``attempt``."""
    return {"task_id": task.id, "function": task.func_name, "attempt": task.attempts}


def task_label(task: Task) -> str:
    """``task 'id' (module:function, attempt n)`` for the start of a log message."""
    return f"task {task.id!r} ({task.func_name}, attempt {task.attempts})"
