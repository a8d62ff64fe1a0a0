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
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from timewheel import refs, validate
from timewheel.errors import InvalidScheduleError, InvalidTransitionError

__all__ = [
    "ACTIVE_STATES",
    "DEFAULT_QUEUE",
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
    "function_name",
    "instance_id",
    "new_instance",
    "new_schedule_record",
    "schedule_of",
    "slot_of",
]

EMPTY_KWARGS: Mapping[str, Any] = MappingProxyType({})
DEFAULT_QUEUE = "default"
"""The queue of a task that names none."""


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
        retry_on: the exceptions that are retried; others fail at once. Each entry is an
            exception type, or the ``"module:qualname"`` name of one: a name matches an
            exception whose class, or one of its bases, has that name, so a policy can name an
            exception of a module this process does not import. A handler timeout counts as
            :class:`TimeoutError`.

    Durable stores keep the policy as :meth:`to_spec` gives it (``retry_on`` as names) and read it
    back with :meth:`from_spec`. Reading never fails on a name: an entry that names an importable
    exception type comes back as the type; one that cannot be resolved in the reading process
    (its module is missing there, or the name no longer leads to an exception type) comes back
    as the name, and still matches exceptions by their class names as written.
    """

    max_attempts: int = 1
    backoff: Literal["fixed", "exponential"] = "exponential"
    delay: float = 1.0
    cap: float = 300.0
    jitter: float = 0.0
    retry_on: tuple[type[BaseException] | str, ...] = (Exception,)

    def __post_init__(self) -> None:
        validate.count(self.max_attempts, "Retry.max_attempts", minimum=1)
        if self.backoff not in ("fixed", "exponential"):
            raise InvalidScheduleError(
                f"Retry.backoff must be 'fixed' or 'exponential' (got {self.backoff!r})"
            )
        validate.seconds(self.delay, "Retry.delay", minimum=0, timedelta_ok=False)
        validate.seconds(self.cap, "Retry.cap", minimum=0, timedelta_ok=False)
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, (int, float))
            or not 0 <= self.jitter <= 1
        ):
            raise InvalidScheduleError(f"Retry.jitter must be in [0, 1] (got {self.jitter!r})")
        given: object = self.retry_on  # a single type or name is accepted for convenience
        if isinstance(given, (type, str)):
            object.__setattr__(self, "retry_on", (given,))
        for entry in self.retry_on:
            if isinstance(entry, str):
                module, sep, qualname = entry.partition(":")
                if not (sep and module and qualname):
                    raise InvalidScheduleError(
                        f"Retry.retry_on names an exception as 'module:qualname' "
                        f"(got {entry!r}), e.g. 'builtins:ConnectionError'"
                    )
            elif not (isinstance(entry, type) and issubclass(entry, BaseException)):
                raise InvalidScheduleError(
                    f"Retry.retry_on must hold exception types or 'module:qualname' names "
                    f"(got {entry!r})"
                )

    def should_retry(self, attempts: int, exc: BaseException | None) -> bool:
        """True when a run that ended with *exc* after *attempts* runs should run again.

        *exc* ``None`` means the run was lost (its worker's lease expired): always retryable.
        """
        if attempts >= self.max_attempts:
            return False
        return exc is None or self.matches(exc)

    def matches(self, exc: BaseException) -> bool:
        """True when *exc* is one of the exceptions ``retry_on`` lists (by type or by name)."""
        names: set[str] | None = None
        for entry in self.retry_on:
            if isinstance(entry, str):
                if names is None:
                    names = {f"{c.__module__}:{c.__qualname__}" for c in type(exc).__mro__}
                if entry in names:
                    return True
            elif isinstance(exc, entry):
                return True
        return False

    def delay_for(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before run number ``attempts + 1``."""
        if self.backoff == "fixed":
            d = self.delay
        else:
            d = min(self.cap, self.delay * 2.0 ** max(0, attempts - 1))
        if self.jitter:
            d *= (rng or random).uniform(1.0 - self.jitter, 1.0)
        return d

    def to_spec(self) -> dict[str, Any]:
        """The policy as JSON-friendly data, ``retry_on`` as ``"module:qualname"`` names.

        :meth:`from_spec` reads it back. Every store that keeps policies as data uses this form.

        Raises:
            SerializationError: an exception type in ``retry_on`` cannot be named from another
                process (it is defined inside a function, in ``__main__``, ...); the message
                says why.
        """
        return {
            "max_attempts": self.max_attempts,
            "backoff": self.backoff,
            "delay": self.delay,
            "cap": self.cap,
            "jitter": self.jitter,
            "retry_on": [e if isinstance(e, str) else refs.type_ref(e) for e in self.retry_on],
        }

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Retry:
        """The policy a :meth:`to_spec` mapping describes (missing keys take their defaults).

        Each ``retry_on`` name that imports to an exception type becomes that type; a name that
        cannot be resolved in this process is kept as the name (see the class docstring), so
        reading a stored policy never fails on it.

        Raises:
            InvalidScheduleError: *spec* has keys a ``Retry`` does not know, or values it refuses.
        """
        known = ("max_attempts", "backoff", "delay", "cap", "jitter", "retry_on")
        unknown = sorted(set(spec) - set(known))
        if unknown:
            raise InvalidScheduleError(
                f"a retry spec has unknown keys {unknown}; known: {', '.join(known)}"
            )
        options = dict(spec)
        names = options.pop("retry_on", None)
        if names is None:
            return cls(**options)
        return cls(retry_on=tuple(_exception_type(n) for n in names), **options)


def _exception_type(name: str) -> type[BaseException] | str:
    """The exception type *name* imports to, or *name* itself when it does not resolve to one."""
    try:
        found = refs.import_path(name)
    except refs.UnresolvableRefError:
        return name
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    return name


NO_RETRY = Retry()


@dataclass(frozen=True, slots=True, kw_only=True, init=False)
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
        started: when its latest run began: the ``now`` of the claim (or transition) that moved
            it to RUNNING, set by the store; ``None`` until its first run. A retry or a release
            back to READY keeps it until the next run replaces it; an insert clears it. Start
            minus due is the run's lateness.
        created, updated: when the task was inserted and last changed (epoch seconds).
        result: the return value of a successful run (memory store: any object).
        error: a one-line summary of the last failure, if any.
        schedule_id: the recurring schedule this run belongs to, if any.
        after: ids of upstream tasks; ``unmet`` counts those not yet satisfied.
        when: the dependency condition (``"all_success"``, ``"all_done"``, ``"any_failed"``).
        extra: free-form data kept with the task (JSON values for durable stores).

    A snapshot is built on every state change, so ``__init__``, :meth:`evolve` and :meth:`moved`
    are written out field by field. ``__init__`` stores through the slot descriptors (about twice
    as fast as the ``object.__setattr__`` a generated frozen ``__init__`` uses); :meth:`evolve`
    and :meth:`moved` build the copy on the unfrozen layout twin :func:`new_instance` uses, with
    plain attribute stores (about three times faster again). They check nothing: stores and the
    scheduler validate what they accept. A field added to the class must be added to all three
    (and to :func:`new_instance`).
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
    queue: str = DEFAULT_QUEUE
    timeout: float | None = None
    lease_owner: str | None = None
    lease_expires: float | None = None
    started: float | None = None
    created: float = 0.0
    updated: float = 0.0
    result: Any = None
    error: str | None = None
    schedule_id: str | None = None
    after: tuple[str, ...] = ()
    unmet: int = 0
    when: str = "all_success"
    extra: Mapping[str, Any] = field(default_factory=_empty_kwargs, compare=False)

    def __init__(
        self,
        *,
        id: str,
        func: Callable[..., Any] | str,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] = EMPTY_KWARGS,
        due: float,
        state: TaskState = TaskState.PENDING,
        version: int = 0,
        attempts: int = 0,
        retry: Retry = NO_RETRY,
        priority: int = 0,
        queue: str = DEFAULT_QUEUE,
        timeout: float | None = None,
        lease_owner: str | None = None,
        lease_expires: float | None = None,
        started: float | None = None,
        created: float = 0.0,
        updated: float = 0.0,
        result: Any = None,
        error: str | None = None,
        schedule_id: str | None = None,
        after: tuple[str, ...] = (),
        unmet: int = 0,
        when: str = "all_success",
        extra: Mapping[str, Any] = EMPTY_KWARGS,
    ) -> None:
        _set_id(self, id)
        _set_func(self, func)
        _set_args(self, args)
        _set_kwargs(self, kwargs)
        _set_due(self, due)
        _set_state(self, state)
        _set_version(self, version)
        _set_attempts(self, attempts)
        _set_retry(self, retry)
        _set_priority(self, priority)
        _set_queue(self, queue)
        _set_timeout(self, timeout)
        _set_lease_owner(self, lease_owner)
        _set_lease_expires(self, lease_expires)
        _set_started(self, started)
        _set_created(self, created)
        _set_updated(self, updated)
        _set_result(self, result)
        _set_error(self, error)
        _set_schedule_id(self, schedule_id)
        _set_after(self, after)
        _set_unmet(self, unmet)
        _set_when(self, when)
        _set_extra(self, extra)

    @property
    def func_name(self) -> str:
        """A readable name for the function (its reference for durable stores)."""
        return function_name(self.func)

    def evolve(self, **changes: Any) -> Task:
        """A copy with *changes* applied (no state-machine checks: stores do those).

        Several times as fast as ``dataclasses.replace`` (a copy per state change is on the hot
        path); unknown field names raise ``TypeError`` like ``replace`` does.
        """
        c = changes
        new: Any = _new(_TaskLayout)  # typed as what it becomes
        new.id = c.pop("id") if "id" in c else self.id
        new.func = c.pop("func") if "func" in c else self.func
        new.args = c.pop("args") if "args" in c else self.args
        new.kwargs = c.pop("kwargs") if "kwargs" in c else self.kwargs
        new.due = c.pop("due") if "due" in c else self.due
        new.state = c.pop("state") if "state" in c else self.state
        new.version = c.pop("version") if "version" in c else self.version
        new.attempts = c.pop("attempts") if "attempts" in c else self.attempts
        new.retry = c.pop("retry") if "retry" in c else self.retry
        new.priority = c.pop("priority") if "priority" in c else self.priority
        new.queue = c.pop("queue") if "queue" in c else self.queue
        new.timeout = c.pop("timeout") if "timeout" in c else self.timeout
        new.lease_owner = c.pop("lease_owner") if "lease_owner" in c else self.lease_owner
        new.lease_expires = c.pop("lease_expires") if "lease_expires" in c else self.lease_expires
        new.started = c.pop("started") if "started" in c else self.started
        new.created = c.pop("created") if "created" in c else self.created
        new.updated = c.pop("updated") if "updated" in c else self.updated
        new.result = c.pop("result") if "result" in c else self.result
        new.error = c.pop("error") if "error" in c else self.error
        new.schedule_id = c.pop("schedule_id") if "schedule_id" in c else self.schedule_id
        new.after = c.pop("after") if "after" in c else self.after
        new.unmet = c.pop("unmet") if "unmet" in c else self.unmet
        new.when = c.pop("when") if "when" in c else self.when
        new.extra = c.pop("extra") if "extra" in c else self.extra
        if c:
            raise TypeError(f"Task has no field(s) {sorted(c)}")
        new.__class__ = Task
        task: Task = new
        return task

    def moved(self, state: TaskState, *, version: int, updated: float) -> Task:
        """``evolve(state=state, version=version, updated=updated)``, the copy a store makes at
        each plain state change (a promotion), in about half its time."""
        new: Any = _new(_TaskLayout)  # typed as what it becomes
        new.id = self.id
        new.func = self.func
        new.args = self.args
        new.kwargs = self.kwargs
        new.due = self.due
        new.state = state
        new.version = version
        new.attempts = self.attempts
        new.retry = self.retry
        new.priority = self.priority
        new.queue = self.queue
        new.timeout = self.timeout
        new.lease_owner = self.lease_owner
        new.lease_expires = self.lease_expires
        new.started = self.started
        new.created = self.created
        new.updated = updated
        new.result = self.result
        new.error = self.error
        new.schedule_id = self.schedule_id
        new.after = self.after
        new.unmet = self.unmet
        new.when = self.when
        new.extra = self.extra
        new.__class__ = Task
        task: Task = new
        return task


def function_name(func: Callable[..., Any] | str) -> str:
    """A readable name for *func*: ``"module:qualname"``, or *func* itself when it is already a
    stored reference or registered name (what :attr:`Task.func_name` gives)."""
    if isinstance(func, str):
        return func
    mod = getattr(func, "__module__", None) or "?"
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    return f"{mod}:{name}"


def _slot_setter(name: str) -> Callable[[Task, Any], None]:
    """The slot descriptor's ``__set__`` for Task field *name* (bypasses the frozen check)."""
    setter: Callable[[Task, Any], None] = Task.__dict__[name].__set__
    return setter


_new = object.__new__
_set_id = _slot_setter("id")
_set_func = _slot_setter("func")
_set_args = _slot_setter("args")
_set_kwargs = _slot_setter("kwargs")
_set_due = _slot_setter("due")
_set_state = _slot_setter("state")
_set_version = _slot_setter("version")
_set_attempts = _slot_setter("attempts")
_set_retry = _slot_setter("retry")
_set_priority = _slot_setter("priority")
_set_queue = _slot_setter("queue")
_set_timeout = _slot_setter("timeout")
_set_lease_owner = _slot_setter("lease_owner")
_set_lease_expires = _slot_setter("lease_expires")
_set_started = _slot_setter("started")
_set_created = _slot_setter("created")
_set_updated = _slot_setter("updated")
_set_result = _slot_setter("result")
_set_error = _slot_setter("error")
_set_schedule_id = _slot_setter("schedule_id")
_set_after = _slot_setter("after")
_set_unmet = _slot_setter("unmet")
_set_when = _slot_setter("when")
_set_extra = _slot_setter("extra")


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

    def __init__(
        self,
        *,
        id: str,
        func: Callable[..., Any] | str,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] = EMPTY_KWARGS,
        rule: Mapping[str, Any] = EMPTY_KWARGS,
        options: Mapping[str, Any] = EMPTY_KWARGS,
        paused: bool = False,
        version: int = 0,
        created: float = 0.0,
        updated: float = 0.0,
    ) -> None:
        # through the slot descriptors, as Task does: one record per schedule created
        _set_rec_id(self, id)
        _set_rec_func(self, func)
        _set_rec_args(self, args)
        _set_rec_kwargs(self, kwargs)
        _set_rec_rule(self, rule)
        _set_rec_options(self, options)
        _set_rec_paused(self, paused)
        _set_rec_version(self, version)
        _set_rec_created(self, created)
        _set_rec_updated(self, updated)

    def evolve(self, **changes: Any) -> ScheduleRecord:
        """A copy with *changes* applied."""
        return replace(self, **changes)


def _record_setter(name: str) -> Callable[[ScheduleRecord, Any], None]:
    setter: Callable[[ScheduleRecord, Any], None] = ScheduleRecord.__dict__[name].__set__
    return setter


_set_rec_id = _record_setter("id")
_set_rec_func = _record_setter("func")
_set_rec_args = _record_setter("args")
_set_rec_kwargs = _record_setter("kwargs")
_set_rec_rule = _record_setter("rule")
_set_rec_options = _record_setter("options")
_set_rec_paused = _record_setter("paused")
_set_rec_version = _record_setter("version")
_set_rec_created = _record_setter("created")
_set_rec_updated = _record_setter("updated")


# Creating a schedule builds a record and its first instance, a herd 100,000 of each, and the
# midnight tick copies each head into its READY snapshot (Task.moved). A frozen class can only
# store through its slot descriptors (a C call each); these twins have the same slots and no
# frozen guard, so their stores are plain attribute stores, and the finished object becomes a
# Task or ScheduleRecord (``__class__`` may change between classes of one layout).
class _TaskLayout:
    __slots__ = Task.__slots__


class _RecordLayout:
    __slots__ = ScheduleRecord.__slots__


def new_instance(
    id: str,
    func: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    due: float,
    retry: Retry,
    priority: int,
    queue: str,
    timeout: float | None,
    now: float,
    schedule_id: str,
    extra: Mapping[str, Any],
    /,
) -> Task:
    """A new PENDING instance of a schedule, created and updated at *now*: the Task that
    ``Task(id=..., func=..., ..., schedule_id=..., extra=...)`` builds with every other field at
    its default. It checks nothing (as ``Task()``)."""
    t: Any = _new(_TaskLayout)  # typed as what it becomes
    t.id = id
    t.func = func
    t.args = args
    t.kwargs = kwargs
    t.due = due
    t.state = TaskState.PENDING
    t.version = 0
    t.attempts = 0
    t.retry = retry
    t.priority = priority
    t.queue = queue
    t.timeout = timeout
    t.lease_owner = None
    t.lease_expires = None
    t.started = None
    t.created = now
    t.updated = now
    t.result = None
    t.error = None
    t.schedule_id = schedule_id
    t.after = ()
    t.unmet = 0
    t.when = "all_success"
    t.extra = extra
    t.__class__ = Task
    task: Task = t
    return task


def new_schedule_record(
    id: str,
    func: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    rule: Mapping[str, Any],
    options: Mapping[str, Any],
    now: float,
    /,
) -> ScheduleRecord:
    """A new schedule record, created and updated at *now*, not paused, version 0: what
    ``ScheduleRecord(id=..., ..., created=now, updated=now)`` builds. It checks nothing."""
    r: Any = _new(_RecordLayout)
    r.id = id
    r.func = func
    r.args = args
    r.kwargs = kwargs
    r.rule = rule
    r.options = options
    r.paused = False
    r.version = 0
    r.created = now
    r.updated = now
    r.__class__ = ScheduleRecord
    record: ScheduleRecord = r
    return record


def instance_id(schedule_id: str, slot: float) -> str:
    """The deterministic id of a schedule's instance for *slot*."""
    return schedule_id + instance_suffix(slot)


def instance_suffix(slot: float) -> str:
    """What :func:`instance_id` appends to the schedule id for *slot*: ``"@"`` and the slot in
    integer microseconds (the same for every schedule with that slot)."""
    return f"@{round(slot * 1_000_000)}"


def slot_of(task_id: str) -> float:
    """The slot (epoch seconds) encoded in an instance id."""
    return int(task_id.rsplit("@", 1)[1]) / 1_000_000


def schedule_of(task_id: str) -> str:
    """The schedule id encoded in an instance id."""
    return task_id.rsplit("@", 1)[0]
