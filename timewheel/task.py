"""The task record, its states, the table of allowed transitions, and retry policies.

A task moves through these states; every move is a compare-and-swap on ``version``::

    PENDING ──► READY ──► RUNNING ──► SUCCEEDED
       ▲          │          ├──────► FAILED       (error, no attempts left)
       │          │          ├──────► TIMED_OUT    (timeout or lost lease, no attempts left)
       │          │          ├──────► READY        (released by a worker shutting down)
       └──────────┼──────────┘ retry: error, timeout or lost lease with attempts left
                  │                   (``last_error`` says which; due = now + backoff)
    any non-terminal ──► CANCELLED (PENDING/READY only: a running task cannot be stopped)
    PENDING/READY    ──► UPSTREAM_FAILED (a dependency failed)

Terminal states (SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, UPSTREAM_FAILED) are absorbing.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal

from timewheel.errors import InvalidScheduleError, InvalidTransitionError

__all__ = [
    "ACTIVE_STATES",
    "EMPTY_KWARGS",
    "FAILURE_STATES",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Retry",
    "ScheduleRecord",
    "Task",
    "TaskState",
    "check_transition",
    "dependency_effect",
]

EMPTY_KWARGS: Mapping[str, Any] = MappingProxyType({})


def _empty_kwargs() -> Mapping[str, Any]:
    return EMPTY_KWARGS  # shared: tasks without keyword arguments cost no dict each


class TaskState(str, enum.Enum):
    """The state of one task. String values keep stored rows readable."""

    PENDING = "pending"
    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    UPSTREAM_FAILED = "upstream_failed"

    @property
    def terminal(self) -> bool:
        """True for the absorbing states."""
        return self in TERMINAL_STATES

    def __str__(self) -> str:
        return self.value


S = TaskState
TRANSITIONS: Mapping[TaskState, frozenset[TaskState]] = MappingProxyType(
    {
        S.PENDING: frozenset({S.READY, S.CANCELLED, S.UPSTREAM_FAILED}),
        S.READY: frozenset({S.RUNNING, S.CANCELLED, S.UPSTREAM_FAILED}),
        S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.PENDING, S.READY}),
        S.SUCCEEDED: frozenset(),
        S.FAILED: frozenset(),
        S.TIMED_OUT: frozenset(),
        S.CANCELLED: frozenset(),
        S.UPSTREAM_FAILED: frozenset(),
    }
)
"""Allowed moves: ``TRANSITIONS[current]`` is the set of states ``current`` may move to."""

TERMINAL_STATES: frozenset[TaskState] = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
ACTIVE_STATES: frozenset[TaskState] = frozenset(TaskState) - TERMINAL_STATES
del S


def check_transition(task_id: str, current: TaskState, new: TaskState) -> None:
    """Raise :class:`InvalidTransitionError` unless the table allows ``current -> new``."""
    if new not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "nothing (terminal)"
        raise InvalidTransitionError(
            f"task {task_id!r} cannot move from {current.value} to {new.value}; "
            f"from {current.value} it may move to: {allowed}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """How often and how soon a failed task runs again.

    Args:
        max_attempts: total runs allowed, the first included (1 = no retries, the default).
        backoff: ``"fixed"`` waits ``delay`` every time; ``"exponential"`` waits
            ``delay * 2 ** (attempt - 1)``, capped at ``cap``.
        delay: the base wait in seconds.
        cap: the longest wait in seconds (exponential backoff).
        jitter: a fraction in [0, 1]: each wait is multiplied by ``uniform(1 - jitter, 1)``, so
            retries of many tasks that failed together spread out.
        retry_on: exception types that are retried; others fail at once. A handler timeout counts
            as :class:`TimeoutError`.
    """

    max_attempts: int = 1
    backoff: Literal["fixed", "exponential"] = "exponential"
    delay: float = 1.0
    cap: float = 300.0
    jitter: float = 0.0
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise InvalidScheduleError(
                f"Retry.max_attempts must be an int (got {self.max_attempts!r})"
            )
        if self.max_attempts < 1:
            raise InvalidScheduleError(
                f"Retry.max_attempts must be >= 1 (got {self.max_attempts}); 1 means no retries"
            )
        if self.backoff not in ("fixed", "exponential"):
            raise InvalidScheduleError(
                f"Retry.backoff must be 'fixed' or 'exponential' (got {self.backoff!r})"
            )
        for name in ("delay", "cap"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InvalidScheduleError(f"Retry.{name} must be a finite number >= 0 (got {v!r})")
        if not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter <= 1:
            raise InvalidScheduleError(f"Retry.jitter must be in [0, 1] (got {self.jitter!r})")
        given: object = self.retry_on  # a single type is accepted for convenience
        if isinstance(given, type):
            object.__setattr__(self, "retry_on", (given,))
        for t in self.retry_on:
            if not (isinstance(t, type) and issubclass(t, BaseException)):
                raise InvalidScheduleError(f"Retry.retry_on must hold exception types (got {t!r})")

    def should_retry(self, attempts: int, exc: BaseException | None) -> bool:
        """True when a run that ended with *exc* after *attempts* runs should run again.

        *exc* ``None`` means the run was lost (its worker's lease expired): always retryable.
        """
        if attempts >= self.max_attempts:
            return False
        return exc is None or isinstance(exc, self.retry_on)

    def delay_for(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before run number ``attempts + 1``."""
        if self.backoff == "fixed":
            d = self.delay
        else:
            d = min(self.cap, self.delay * 2.0 ** max(0, attempts - 1))
        if self.jitter:
            d *= (rng or random).uniform(1.0 - self.jitter, 1.0)
        return d


NO_RETRY = Retry()


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One scheduled run of a function: an immutable snapshot of a stored task.

    Stores keep the source of truth; every change makes a new snapshot with ``version + 1``.

    Attributes:
        id: unique id (user-supplied ids make scheduling idempotent).
        func: the callable (memory store) or its reference ``"module:qualname"`` / registered name.
        args, kwargs: the call's arguments.
        due: the UTC instant (epoch seconds) at which the task may run, never earlier.
        state, version: the state machine position and its compare-and-swap counter.
        attempts: runs started so far.
        retry: the retry policy.
        priority: higher runs first among tasks that are ready together.
        queue: the ready-queue lane; workers choose which queues they serve.
        timeout: seconds a run may take before it is abandoned as TIMED_OUT (None: no limit).
        lease_owner, lease_expires: the worker running it and when its lease runs out.
        created, updated: when the task was inserted and last changed (epoch seconds).
        result: the return value of a successful run (memory store: any object).
        error: a one-line summary of the last failure, if any.
        schedule_id: the recurring schedule this run belongs to, if any.
        after: ids of upstream tasks; ``unmet`` counts those not yet satisfied.
        when: the dependency condition (``"all_success"``, ``"all_done"``, ``"any_failed"``).
    """

    id: str
    func: Callable[..., Any] | str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=_empty_kwargs)
    due: float
    state: TaskState = TaskState.PENDING
    version: int = 0
    attempts: int = 0
    retry: Retry = NO_RETRY
    priority: int = 0
    queue: str = "default"
    timeout: float | None = None
    lease_owner: str | None = None
    lease_expires: float | None = None
    created: float = 0.0
    updated: float = 0.0
    result: Any = None
    error: str | None = None
    schedule_id: str | None = None
    after: tuple[str, ...] = ()
    unmet: int = 0
    when: str = "all_success"
    extra: Mapping[str, Any] = field(default_factory=_empty_kwargs, compare=False)

    @property
    def func_name(self) -> str:
        """A readable name for the function (its reference for durable stores)."""
        f = self.func
        if isinstance(f, str):
            return f
        mod = getattr(f, "__module__", None) or "?"
        name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)
        return f"{mod}:{name}"

    def evolve(self, **changes: Any) -> Task:
        """A copy with *changes* applied (no state-machine checks: stores do those).

        About twice as fast as ``dataclasses.replace`` (a copy per state change is on the hot
        path); unknown field names raise ``TypeError`` like ``replace`` does.
        """
        return _copy_task(self, changes)


def _make_fast_paths() -> tuple[Callable[[Task, dict[str, Any]], Task], Callable[..., None]]:
    """Build ``copy(task, changes)`` and a replacement ``Task.__init__``, generated once at import.

    Both are straight-line code over Task's fields that store through the slot descriptors
    (about twice as fast as ``object.__setattr__``, which the dataclass's frozen ``__init__``
    uses): a task is built on every state change, so this is on the hot path. The ``__init__``
    has the dataclass's signature and defaults (keyword-only, ``id``/``func``/``due`` required).
    """
    fs = fields(Task)
    names = [f.name for f in fs]
    ns: dict[str, Any] = {"new": object.__new__, "Task": Task}
    for n in names:
        ns[f"set_{n}"] = Task.__dict__[n].__set__
    params = []
    for f in fs:
        if f.default is not MISSING:
            ns[f"d_{f.name}"] = f.default
            params.append(f"{f.name}=d_{f.name}")
        elif f.default_factory is not MISSING:
            ns[f"d_{f.name}"] = f.default_factory()  # shared immutable defaults (EMPTY_KWARGS)
            params.append(f"{f.name}=d_{f.name}")
        else:
            params.append(f.name)
    lines = ["def copy(t, ch):", "    n = new(Task)"]
    lines += [f"    set_{n}(n, ch.pop({n!r}) if {n!r} in ch else t.{n})" for n in names]
    lines += [
        "    if ch:",
        "        raise TypeError(f'Task has no field(s) {sorted(ch)}')",
        "    return n",
        "def __init__(self, *, " + ", ".join(params) + "):",
    ]
    lines += [f"    set_{n}(self, {n})" for n in names]
    exec("\n".join(lines), ns)  # no per-call reflection
    return ns["copy"], ns["__init__"]


_copy_task, _fast_init = _make_fast_paths()
_fast_init.__qualname__ = "Task.__init__"
_fast_init.__doc__ = Task.__init__.__doc__
Task.__init__ = _fast_init  # type: ignore[method-assign]  # same signature, stores via slots


FAILURE_STATES: frozenset[TaskState] = frozenset(
    {TaskState.FAILED, TaskState.TIMED_OUT, TaskState.CANCELLED, TaskState.UPSTREAM_FAILED}
)
WHEN_VALUES = ("all_success", "all_done", "any_failed")


def dependency_effect(
    when: str, upstream_state: TaskState, unmet: int
) -> tuple[int, TaskState | None, str | None]:
    """What an upstream task reaching *upstream_state* does to a waiting dependent.

    Args:
        when: the dependent's condition.
        upstream_state: the terminal state the upstream task reached.
        unmet: the dependent's count of unsatisfied upstream tasks before this one.

    Returns:
        ``(new_unmet, terminal_state, error)``: the new count (0 = the dependent may run) and,
        when the dependent can never run, the terminal state to move it to with the reason.

    * ``all_success``: a success counts down; any other end makes the dependent UPSTREAM_FAILED.
    * ``all_done``: any end counts down.
    * ``any_failed``: a failure releases the dependent at once; if every upstream succeeded, the
      dependent is CANCELLED (its condition can no longer hold).
    """
    ok = upstream_state is TaskState.SUCCEEDED
    if when == "all_success":
        if ok:
            return unmet - 1, None, None
        return unmet, TaskState.UPSTREAM_FAILED, f"an upstream task ended {upstream_state.value}"
    if when == "all_done":
        return unmet - 1, None, None
    if when == "any_failed":
        if ok:
            left = unmet - 1
            if left <= 0:
                return (
                    0,
                    TaskState.CANCELLED,
                    "condition any_failed not met: every upstream succeeded",
                )
            return left, None, None
        return 0, None, None
    raise InvalidScheduleError(f"when must be one of {WHEN_VALUES} (got {when!r})")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord:
    """A recurring schedule as stored: the rule, never its future instances.

    Each firing materializes one task (id ``f"{id}@{slot}"``, ``schedule_id`` = this id); the next
    instance is inserted in the same atomic step that moves the current one to READY.

    Attributes:
        id: the schedule's id (defaults to the function's ``module:qualname``).
        func, args, kwargs: what each instance calls.
        rule: the rule's serialisable spec (see ``timewheel.rules.rule_from_spec``).
        options: instance options (priority, queue, timeout, retry, misfire, overlap, ...) as a
            JSON-friendly mapping.
        paused: paused schedules materialize no new instances.
        version: compare-and-swap counter.
        created, updated: epoch seconds.
    """

    id: str
    func: Callable[..., Any] | str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=_empty_kwargs)
    rule: Mapping[str, Any] = field(default_factory=_empty_kwargs)
    options: Mapping[str, Any] = field(default_factory=_empty_kwargs)
    paused: bool = False
    version: int = 0
    created: float = 0.0
    updated: float = 0.0

    def evolve(self, **changes: Any) -> ScheduleRecord:
        """A copy with *changes* applied."""
        return replace(self, **changes)
