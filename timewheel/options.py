"""The options of ``schedule()``, written once: their types, their checks, and the task they make.

``OneShotOptions`` and ``RecurringOptions`` are what type checkers see (``Scheduler.schedule`` takes
them through ``Unpack``); :data:`SCHEDULE_OPTIONS` is derived from them, so the set the runtime
accepts and the set the overloads declare cannot drift apart. :func:`build_task` turns the
one-shot options into a validated :class:`~timewheel.task.Task`; every front end calls it.
"""

from __future__ import annotations

import difflib
import itertools
import os
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import add
from typing import Any, Protocol, TypedDict, runtime_checkable

from timewheel.errors import DuplicateKeyError, InvalidScheduleError
from timewheel.jobs import Job, Step, TaskFunction
from timewheel.refs import Allowlist, check_json, func_ref
from timewheel.rules import Misfire, Overlap
from timewheel.shapes import Series, Shapes, series_key
from timewheel.stores.base import OnConflict
from timewheel.task import EMPTY_KWARGS, NO_RETRY, WHEN_VALUES, Retry, Task
from timewheel.validate import instant, seconds

__all__ = [
    "BIG_DELAY",
    "PLAIN_NUMBERS",
    "SCHEDULE_OPTIONS",
    "CounterIds",
    "IdBatches",
    "OneShot",
    "OneShotOptions",
    "RecurringOptions",
    "Series",
    "TaskOptions",
    "build_task",
    "call_target",
    "conflict_policy",
    "due_time",
    "fast_at",
    "id_maker",
    "known_series",
    "prepare",
    "prepare_many",
    "unknown_options",
]


class TaskOptions(TypedDict, total=False):
    """Options every task takes, one-shot or recurring (see ``Scheduler.schedule``)."""

    kwargs: Mapping[str, Any] | None
    id: str | None
    priority: int
    queue: str
    retry: Retry | None
    timeout: float | timedelta | None
    on_conflict: OnConflict | None


class OneShotOptions(TaskOptions, total=False):
    """Options of a one-shot task, besides ``delay``."""

    at: datetime | float | None
    after: Iterable[Job | str] | Job | str | None
    when: str


class RecurringOptions(TaskOptions, total=False):
    """Options of a recurring schedule, besides ``cron`` or ``every``."""

    tz: Any
    start: datetime | float | None
    end: datetime | float | None
    jitter: float
    misfire: Misfire | str
    misfire_grace: float | timedelta | None
    overlap: Overlap | str
    max_instances: int
    max_runs: int


#: Every keyword option ``Scheduler.schedule`` accepts besides ``delay``.
SCHEDULE_OPTIONS = frozenset(
    {"cron", "every", *OneShotOptions.__annotations__, *RecurringOptions.__annotations__}
)

#: Options that only recurring schedules take.
RECURRING_ONLY = frozenset(RecurringOptions.__annotations__) - frozenset(
    TaskOptions.__annotations__
)


#: the exact types the fast path takes as plain numbers (no bool, no subclass)
PLAIN_NUMBERS = (float, int)
BIG_DELAY = float(1 << 53)  # a delay beyond this (or NaN) takes the full path, which names it
BIG_AT = BIG_DELAY * 1e3  # the same for epoch seconds


def fast_at(options: dict[str, Any]) -> float | None:
    """The due time of ``schedule(f, at=...)`` with no other option, when it is plain: a finite
    number of epoch seconds or an aware ``datetime``. None sends the call down the full path
    (which also reports every bad value)."""
    if len(options) != 1:
        return None
    at = options.get("at")
    if at.__class__ in PLAIN_NUMBERS and -BIG_AT < at < BIG_AT:
        return float(at)
    if at.__class__ is datetime and at.tzinfo is not None and at.utcoffset() is not None:
        return at.timestamp()
    return None


def unknown_options(names: Iterable[str]) -> str:
    """The message for unexpected keyword arguments to ``schedule()``: a close match when there is
    one, else a pointer to ``kwargs=`` (the function's own keyword arguments go there)."""
    parts = []
    stray = []
    for name in sorted(names):
        close = difflib.get_close_matches(name, SCHEDULE_OPTIONS | {"delay"}, n=1)
        if close:
            parts.append(f"{name!r} (did you mean {close[0]!r}?)")
        else:
            parts.append(repr(name))
            stray.append(name)
    message = f"schedule() got unexpected keyword argument(s) {', '.join(parts)}"
    if stray:
        example = ", ".join(f"{n!r}: ..." for n in stray)
        message += (
            f"; to pass {'them' if len(stray) > 1 else 'it'} to the function, use "
            f"kwargs={{{example}}}"
        )
    return message


def conflict_policy(value: object, default: OnConflict) -> OnConflict:
    """The ``on_conflict`` option checked (``None`` means *default*)."""
    if value is None:
        return default
    if value == "error" or value == "keep" or value == "replace":
        return value
    raise InvalidScheduleError(f"on_conflict must be 'error', 'keep' or 'replace' (got {value!r})")


def due_time(now: float, delay: object, at: object, has_after: bool) -> float:
    """The due instant of a one-shot task from exactly one of *delay* and *at*, or *now* when
    neither is given but the task waits on upstream tasks."""
    if at is None and delay is not None:
        return now + seconds(delay, "delay")
    given = [n for n, v in (("delay", delay), ("at", at)) if v is not None]
    if len(given) > 1:
        raise InvalidScheduleError(
            f"pass exactly one of delay= and at= (got {' and '.join(given)})"
        )
    if delay is not None:
        return now + seconds(delay, "delay")
    if at is not None:
        return instant(at, "at")
    if has_after:
        return now
    raise InvalidScheduleError(
        "pass exactly one of delay= or at= (e.g. delay=600 for ten minutes from now), or "
        "after=[...] to run when upstream tasks finish"
    )


# the bits uuid.uuid4() sets on its 16 random bytes: the RFC 4122 variant and version 4
_UUID4_KEEP = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)


def _uuid_hex() -> str:
    """``uuid.uuid4().hex`` (the same random source, bits and text) without the ``UUID``."""
    return f"{int.from_bytes(os.urandom(16), 'big') & _UUID4_KEEP | _UUID4_SET:032x}"


#: the counter's last two hex digits, for :meth:`CounterIds.take`
_LOW_DIGITS = tuple(f"{low:02x}" for low in range(256))


@runtime_checkable
class IdBatches(Protocol):
    """**Protocol:** what names new tasks and can give the ids of a whole batch at once."""

    def __call__(self) -> str:
        """The next id."""
        ...

    def take(self, n: int) -> list[str]:
        """The next *n* ids, those *n* calls would give."""
        ...


class CounterIds:
    """A scheduler's generated task ids: ``"<6 random hex digits>-<a counter in hex>"``.

    :attr:`next` gives one, made in C (``schedule()`` calls it); :meth:`take` the next *n*, for
    ``schedule_many()``. Not thread-safe: the scheduler's callers take ids under the GIL in C
    (``next``) or from one batch at a time.
    """

    __slots__ = ("_count", "_prefix", "next")

    def __init__(self) -> None:
        self._prefix = f"{os.urandom(3).hex()}-"
        self._count = itertools.count(1)
        self.next: Callable[[], str] = map(f"{self._prefix}%x".__mod__, self._count).__next__

    def __call__(self) -> str:
        return self.next()

    def take(self, n: int) -> list[str]:
        """The next *n* ids. Past the first 255, a prefix with the counter's high digits is
        formatted once per 256 ids and each id is that prefix and two digits from a table: this
        earned its place in benchmarks/bench_batch.py --memory (string formatting each id was
        about 1,750 instructions a task under callgrind, a concatenation about a third of it)."""
        if n <= 0:
            return []
        first = next(self._count)
        if n > 1:
            next(itertools.islice(self._count, n - 2, None))  # the counter goes on after them
        prefix, end = self._prefix, first + n
        low = min(end, 256)
        ids = list(map(f"{prefix}%x".__mod__, range(first, low))) if first < 256 else []
        low = max(low, first)
        while low < end:
            high, digit = divmod(low, 256)
            upto = min(end, low - digit + 256)
            # operator.add, not the prefix's bound __add__: that method wrapper builds an
            # argument tuple per call (14 ns an id, benchmarks/bench_batch.py --memory)
            digits = _LOW_DIGITS[digit : digit + upto - low]
            ids += map(add, itertools.repeat(f"{prefix}{high:x}"), digits)
            low = upto
        return ids


def id_maker(durable: bool, new_id: Callable[[], str]) -> Callable[[], str]:
    """What names a new task without an ``id=``: a random UUID on a durable store (unique across
    the processes sharing it), the scheduler's own *new_id* otherwise."""
    return _uuid_hex if durable else new_id


def call_target(
    func: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: object,
    *,
    durable: bool,
    allowlist: Allowlist | None,
) -> tuple[Callable[..., Any] | str, Mapping[str, Any]]:
    """What a task calls, checked: ``(reference, kwargs)``, the reference being *func* itself or,
    on a *durable* store, its importable name, and *kwargs* a copy (or the shared empty mapping).
    The part of :func:`build_task` that belongs to one call, not to its options.

    Raises:
        TypeError: *func* is not callable, or *kwargs* not a mapping.
        SerializationError: a durable store cannot keep *func* or the arguments.
        ReferenceNotAllowedError: (a ``SerializationError``) the scheduler would not run *func*.
    """
    if allowlist is None:
        allowlist = Allowlist() if durable else Allowlist.everything()
    ref: Callable[..., Any] | str
    if isinstance(func, str):
        allowlist.check(func, scheduling=True)
        allowlist.resolve(func)  # raises SerializationError naming the reference
        ref = func
    elif not callable(func):
        raise TypeError(f"func must be callable (got {func!r} that is a {type(func).__name__})")
    else:
        ref = func
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a mapping (got {type(kwargs).__name__})")
    if durable:
        if not isinstance(ref, str):
            ref = func_ref(ref)
            allowlist.check(ref, scheduling=True)
        check_json(args, kwargs or {})
    return ref, EMPTY_KWARGS if not kwargs else dict(kwargs)


def build_task(
    func: Callable[..., Any] | str,
    args: tuple[Any, ...],
    *,
    due: float,
    now: float,
    durable: bool,
    new_id: Callable[[], str],
    kwargs: Mapping[str, Any] | None = None,
    id: str | None = None,
    priority: int = 0,
    queue: str = "default",
    retry: Retry | None = None,
    timeout: float | timedelta | None = None,
    after: Iterable[Job | str] | Job | str | None = None,
    when: str = "all_success",
    allowlist: Allowlist | None = None,
) -> Task:
    """A validated PENDING task for ``func(*args, **kwargs)`` due at *due*.

    With a *durable* store, *func* becomes an importable reference and the arguments must be JSON;
    ids are then random UUIDs (unique across processes), else *new_id()*. A reference (given as a
    string, or any function on a durable store) must be one *allowlist* runs: the scheduler's
    (``None``: registered names only on a durable store, anything otherwise).

    Raises:
        InvalidScheduleError, TypeError, SerializationError: naming the bad option.
        ReferenceNotAllowedError: (a ``SerializationError``) the scheduler would not run *func*.
    """
    ref, kwargs = call_target(func, args, kwargs, durable=durable, allowlist=allowlist)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int (got {priority!r})")
    if not isinstance(queue, str) or not queue:
        raise InvalidScheduleError(f"queue must be a non-empty string (got {queue!r})")
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"retry must be a timewheel.Retry (got {retry!r})")
    limit = None if timeout is None else seconds(timeout, "timeout", above=0)
    upstream: tuple[str, ...] = ()
    if after is not None:
        if isinstance(after, (Job, str)):
            after = [after]
        upstream = tuple(a.id if isinstance(a, Job) else a for a in after)
        for u in upstream:
            if not isinstance(u, str):
                raise TypeError(f"after= takes Job handles or task ids (got {u!r})")
    if when not in WHEN_VALUES:
        raise InvalidScheduleError(f"when must be one of {WHEN_VALUES} (got {when!r})")
    if id is None:
        id = id_maker(durable, new_id)()
    elif not isinstance(id, str) or not id:
        raise InvalidScheduleError(f"id must be a non-empty string (got {id!r})")
    return Task(
        id=id,
        func=ref,
        args=args,
        kwargs=kwargs,
        due=due,
        retry=retry if retry is not None else NO_RETRY,  # frozen: one shared default
        priority=priority,
        queue=queue,
        timeout=limit,
        created=now,
        updated=now,
        after=upstream,
        when=when,
    )


# -- the full path of schedule(), shared by the facades ---------------------------------------------


@dataclass(frozen=True, slots=True)
class OneShot:
    """A prepared one-shot task: what ``Runtime.submit`` takes."""

    task: Task
    on_conflict: OnConflict


def known_series(
    func: Callable[..., Any] | str,
    args: tuple[Any, ...],
    options: Mapping[str, Any],
    time: Callable[[], float],
    durable: bool,
    allowlist: Allowlist | None,
    shapes: Shapes,
) -> Series | None:
    """``schedule(func, *args, **options)`` as a :class:`Series`, when it is recurring and a call
    with the same options was checked before (*shapes*): only the function, its arguments and
    ``kwargs=`` are checked here (the id when the series is created), and the clock (*time*)
    is read. ``None`` otherwise: the call takes :func:`prepare`'s full path.

    Raises:
        TypeError, SerializationError: as :func:`call_target`.
    """
    key = series_key(func, options)
    if key is None:
        return None
    try:
        shape = shapes.get(key)
    except TypeError:  # an option value that cannot be hashed: never kept
        return None
    if shape is None:
        return None
    kwargs = options.get("kwargs")
    ref: Callable[..., Any] | str
    checked: Mapping[str, Any]
    if kwargs is None and not durable and callable(func):
        ref, checked = func, EMPTY_KWARGS  # nothing of this call's own to check
    else:
        ref, checked = call_target(func, args, kwargs, durable=durable, allowlist=allowlist)
    return Series(func, ref, args, checked, time(), options.get("id"), shape)


def prepare(
    func: Callable[..., Any] | str,
    args: tuple[Any, ...],
    delay: float | timedelta | None,
    options: dict[str, Any],
    *,
    now: float,
    durable: bool,
    new_id: Callable[[], str],
    allowlist: Allowlist | None = None,
    shapes: Shapes | None = None,
) -> OneShot | Series:
    """Check the options of ``schedule(func, *args, delay=..., **options)`` and build what the
    store step takes: a :class:`OneShot` task or a recurring :class:`Series`. No store is touched.
    *options* is consumed (popped), unless a recurring call's options are known to *shapes*
    (the runtime's, :mod:`timewheel.shapes`): then only the function, its arguments and the id
    are left to check.

    Raises:
        InvalidScheduleError, TypeError, SerializationError: naming the bad option.
    """
    if not options and delay.__class__ in PLAIN_NUMBERS and -BIG_DELAY < delay < BIG_DELAY:
        # schedule(f, *args, delay=d) alone: what build_task makes of it, the call's own checks
        # made (every option at its default has nothing to check)
        ref, _ = call_target(func, args, None, durable=durable, allowlist=allowlist)
        task_id = id_maker(durable, new_id)()
        due = now + float(delay)
        return OneShot(
            Task(id=task_id, func=ref, args=args, due=due, created=now, updated=now), "error"
        )
    key = None
    if shapes is not None and delay is None:
        known = known_series(func, args, options, lambda: now, durable, allowlist, shapes)
        if known is not None:
            return known
        key = series_key(func, options)
    cron, every = options.pop("cron", None), options.pop("every", None)
    if cron is not None or every is not None:
        at = options.pop("at", None)
        given = [
            name
            for name, value in (("delay", delay), ("at", at), ("cron", cron), ("every", every))
            if value is not None
        ]
        if len(given) > 1:
            raise InvalidScheduleError(
                f"pass exactly one of delay=, at=, cron= and every= (got {' and '.join(given)})"
            )
        task_options = {k: options.pop(k) for k in list(options) if k not in RECURRING_ONLY}
        on_conflict = conflict_policy(task_options.pop("on_conflict", None), "replace")
        schedule_id = task_options.pop("id", None)
        template = build_task(
            func,
            args,
            due=now,
            now=now,
            durable=durable,
            new_id=lambda: "template",
            allowlist=allowlist,
            **task_options,
        )
        return Series(
            func,
            template.func,
            args,
            template.kwargs,
            now,
            schedule_id,
            key=key,
            template=template,
            cron=cron,
            every=every,
            on_conflict=on_conflict,
            options=dict(options),
        )
    for name in RECURRING_ONLY & options.keys():
        if options[name] is not None:
            raise InvalidScheduleError(f"{name}= applies to cron= and every= schedules only")
        del options[name]
    on_conflict = conflict_policy(options.pop("on_conflict", None), "error")
    due = due_time(now, delay, options.pop("at", None), options.get("after") is not None)
    task = build_task(
        func,
        args,
        due=due,
        now=now,
        durable=durable,
        new_id=new_id,
        allowlist=allowlist,
        **options,
    )
    return OneShot(task, on_conflict)


# -- schedule_many(): many one-shot tasks, checked before any is stored ------------------------------

#: what ``schedule_many`` takes for the whole batch only
BATCH_ONLY = frozenset({"on_conflict"})
#: options that make no sense shared by every task of a batch
ITEM_ONLY = frozenset({"id"})


def _item(spec: object) -> tuple[Callable[..., Any] | str, tuple[Any, ...], dict[str, Any]]:
    """``(func, args, options)`` of one ``schedule_many`` item (see its docstring for shapes)."""
    if isinstance(spec, Step):
        return spec.func, tuple(spec.args), dict(spec.options)
    if callable(spec) or isinstance(spec, str):
        return spec, (), {}
    if not isinstance(spec, tuple) or not 1 <= len(spec) <= 4:
        raise TypeError(
            "an item is a step(func, *args, **options), a callable, or a tuple (func,), "
            f"(func, args), (func, args, kwargs) or (func, args, kwargs, options) (got {spec!r})"
        )
    func, args, kwargs, options = (*spec, None, None, None)[:4]
    if not isinstance(args, (tuple, list)):
        if args is not None:
            raise TypeError(f"an item's args must be a tuple or list (got {args!r})")
        args = ()
    if options is None:
        options = {}
    elif not isinstance(options, Mapping):
        raise TypeError(f"an item's options must be a mapping (got {options!r})")
    opts = dict(options)
    if kwargs is not None:
        if "kwargs" in opts:
            raise InvalidScheduleError("an item gives kwargs twice (in its tuple and its options)")
        opts["kwargs"] = kwargs
    return func, tuple(args), opts


def _one_shot(options: Mapping[str, Any]) -> None:
    """Refuse the options of recurring schedules in a ``schedule_many`` call."""
    recurring = sorted((RECURRING_ONLY | {"cron", "every"}) & options.keys())
    if recurring:
        raise InvalidScheduleError(
            f"schedule_many() schedules one-shot tasks; {recurring[0]}= is for schedule()"
        )


def _at_item(e: Exception, index: int) -> Exception:
    """*e* of the same type with the message prefixed by the item's index (or *e* itself, noted,
    when its type cannot be built from a message)."""
    message = f"schedule_many item {index}: {e}"
    try:
        again = type(e)(message)
    except Exception:  # an exception type that takes other arguments
        note = getattr(e, "add_note", None)  # Python 3.11+
        if note is not None:
            note(message)
        return e
    return again


def prepare_many(
    specs: Iterable[object],
    defaults: dict[str, Any],
    *,
    now: float,
    durable: bool,
    new_id: Callable[[], str],
    allowlist: Allowlist | None = None,
    upstream: Callable[[object], object] | None = None,
) -> tuple[list[Task], OnConflict]:
    """Check every item of ``schedule_many(specs, **defaults)`` and build its tasks, in order.
    No store is touched; an error names the item's index.

    A ``@sched.task`` function is scheduled as its plain function (as ``schedule()`` does);
    *upstream* turns a front end's own ``after=`` handles into ids.

    Raises:
        InvalidScheduleError, TypeError, SerializationError: naming the bad item and option.
        DuplicateKeyError: two items carry the same ``id``.
    """
    unknown = defaults.keys() - SCHEDULE_OPTIONS - {"delay"}
    if unknown:
        raise TypeError(unknown_options(unknown).replace("schedule()", "schedule_many()"))
    on_conflict = conflict_policy(defaults.pop("on_conflict", None), "error")
    if ITEM_ONLY & defaults.keys():
        raise InvalidScheduleError("schedule_many() takes id= per item only")
    _one_shot(defaults)
    if upstream is not None and defaults.get("after") is not None:
        defaults["after"] = upstream(defaults["after"])

    def build(func: Any, args: tuple[Any, ...], options: dict[str, Any]) -> Task:
        merged = {**defaults, **options}
        if upstream is not None and "after" in options and merged["after"] is not None:
            merged["after"] = upstream(merged["after"])
        delay = merged.pop("delay", None)
        due = due_time(now, delay, merged.pop("at", None), merged.get("after") is not None)
        return build_task(
            func,
            args,
            due=due,
            now=now,
            durable=durable,
            new_id=new_id,
            allowlist=allowlist,
            **merged,
        )

    # Items with no options of their own (the common case: one function, many argument lists)
    # share everything but the id and the arguments with the first such item of their function:
    # its reference, allowlist check and options are worked out once.
    templates: dict[Any, Task] = {}
    make_id = id_maker(durable, new_id)
    tasks: list[Task] = []
    first: dict[str, int] = {}
    for index, spec in enumerate(specs):
        try:
            func, args, options = _item(spec)
            if isinstance(func, TaskFunction):
                func = func.func
            kwargs = options.get("kwargs") if len(options) == 1 else None
            template = (
                templates.get(func)
                if (not options or kwargs is not None) and isinstance(func, Hashable)
                else None
            )
            if template is not None:
                if kwargs is not None and not isinstance(kwargs, Mapping):
                    raise TypeError(f"kwargs must be a mapping (got {type(kwargs).__name__})")
                if durable:
                    check_json(args, kwargs or {})
                task = Task(
                    id=make_id(),
                    func=template.func,
                    args=args,
                    kwargs=EMPTY_KWARGS if not kwargs else dict(kwargs),
                    due=template.due,
                    retry=template.retry,
                    priority=template.priority,
                    queue=template.queue,
                    timeout=template.timeout,
                    created=now,
                    updated=now,
                    after=template.after,
                    when=template.when,
                )
            else:
                if BATCH_ONLY & options.keys():
                    raise InvalidScheduleError(
                        "on_conflict= applies to the whole batch: "
                        "schedule_many(..., on_conflict=...)"
                    )
                _one_shot(options)
                unknown = options.keys() - SCHEDULE_OPTIONS - {"delay"}
                if unknown:
                    raise TypeError(
                        unknown_options(unknown).replace("schedule()", "schedule_many()")
                    )
                task = build(func, args, options)
                if (not options or kwargs is not None) and isinstance(func, Hashable):
                    templates[func] = task
        except Exception as e:
            again = _at_item(e, index)
            if again is e:
                raise
            raise again from e
        if "id" in options:
            at = first.setdefault(task.id, index)
            if at != index:
                raise DuplicateKeyError(
                    f"schedule_many items {at} and {index} have the same id {task.id!r}; ids "
                    "must be unique within a batch"
                )
        tasks.append(task)
    return tasks, on_conflict
