"""``schedule_many()``'s common case: a batch of plain items built as one :class:`NewTasks`.

Most batches are one or a few functions with many argument lists, sharing their options (a
mailing, an import, a fan-out). :func:`prepare_new` checks such a batch in one pass and builds the
store's columns directly: each function's reference, allowlist check and the shared options are
worked out once, and per item only the arguments (JSON on a durable store) and the due time are
checked. No :class:`~timewheel.task.Task` is built per item; a store with
:class:`~timewheel.stores.base.SupportsNewTasks` writes the columns as its own records
(compact records in memory, row tuples on SQLite, ``COPY`` rows on PostgreSQL).

Any other batch (ids, ``after=``, per-item options beyond ``delay``/``at``/``kwargs``, a
conflict policy other than ``"error"``) and any batch with an error goes through
:func:`~timewheel.options.prepare_many`, which checks item by item and names the problem: both
paths accept and refuse the same batches, and this one never raises.

Ids (:func:`new_ids`): on a durable store, time-ordered (RFC 9562 version 7 UUIDs with a counter
per batch) rather than random, so a batch's rows sit next to each other in the primary key and the
``(func, id)`` index, at their right edge, instead of on a random page each.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from itertools import islice
from operator import countOf, itemgetter
from typing import Any

from timewheel.jobs import Step, TaskFunction
from timewheel.options import BIG_DELAY, PLAIN_NUMBERS, IdBatches, build_task, due_time
from timewheel.refs import Allowlist, check_json, check_json_args
from timewheel.stores.base import NewTasks
from timewheel.task import EMPTY_KWARGS

__all__ = ["new_ids", "prepare_new"]

#: defaults a :class:`NewTasks` batch takes (the rest, and a non-None ``after`` or ``id``,
#: send the batch to ``prepare_many``)
_SHARED = frozenset({"delay", "at", "kwargs", "priority", "queue", "retry", "timeout", "when"})
#: an item's own options that keep it in the batch
_PER_ITEM = frozenset({"delay", "at", "kwargs"})
_BIG_AT = BIG_DELAY * 1e3
_FIRST, _SECOND, _THIRD, _FOURTH = (itemgetter(k) for k in range(4))
_COUNTER_BITS = 20  # ids per random draw of a durable batch's ids


def new_ids(n: int, *, durable: bool, now: float, new_id: Callable[[], str]) -> list[str]:
    """Ids for *n* new tasks without an ``id=``.

    Not durable: the scheduler's own *new_id*, as ``schedule()`` names tasks (taken at once
    when it is :class:`~timewheel.options.IdBatches`, as the scheduler's is, or an iterator's
    ``__next__``). Durable: 32 hex
    digits laid out as an RFC 9562 version 7 UUID: the milliseconds of *now* (48 bits), then
    random bits drawn once per batch (54 of them) and a 20-bit counter, so ids are unique across
    the processes sharing the store (two batches in the same millisecond collide with
    probability 2**-54) and ascending within a batch and over time.
    """
    if not durable:
        if isinstance(new_id, IdBatches):
            return new_id.take(n)
        source = getattr(new_id, "__self__", None)
        if isinstance(source, Iterator):  # an iterator's __next__: its next n, in one C call
            return list(islice(source, n))
        return [new_id() for _ in range(n)]
    out: list[str] = []
    ms = int(now * 1000) & 0xFFFF_FFFF_FFFF
    while len(out) < n:
        r = int.from_bytes(os.urandom(8), "big")
        hi = ms << 16 | 0x7000 | r >> 52  # time, version 7, 12 random bits
        lo = 1 << 63 | (r & ((1 << 42) - 1)) << _COUNTER_BITS  # variant 10, 42 random, counter
        take = min(n - len(out), 1 << _COUNTER_BITS)
        out.extend(map(f"{hi:016x}%016x".__mod__, range(lo, lo + take)))
    return out


def _shared_due(now: float, defaults: Mapping[str, Any]) -> float | None:
    """The due time the defaults give every item (``None``: each item gives its own)."""
    if defaults.get("delay") is None and defaults.get("at") is None:
        return None
    return due_time(now, defaults.get("delay"), defaults.get("at"), False)


def _columns(
    items: Sequence[Any],
    shared_due: float | None,
    default_delay: object,
    default_at: object,
    now: float,
) -> tuple[Sequence[Any], Sequence[Any], Sequence[float]] | None:
    """``(funcs, args, dues)`` of a batch whose items are all tuples of one length, with tuple
    arguments, no keyword arguments of their own, and either no options or each exactly one
    plain ``delay`` or ``at`` number: read column by column, in C (``zip``, ``map``, ``set``).
    ``None`` for any other batch (the per-item pass then reads it)."""
    # countOf(map(type, ...), t) != n rather than a set of the types: a set costs a hash and a
    # probe per item (benchmarks/bench_batch.py --memory, under callgrind)
    n = len(items)
    if not n or countOf(map(type, items), tuple) != n:
        return None
    width = len(items[0])
    if not 1 <= width <= 4 or countOf(map(len, items), width) != n:
        return None
    funcs = list(map(_FIRST, items))
    args = list(map(_SECOND, items)) if width > 1 else [()] * n
    if countOf(map(type, args), tuple) != n:
        return None
    if width > 2 and list(map(_THIRD, items)).count(None) != n:
        return None
    options: list[Any] = list(map(_FOURTH, items)) if width == 4 else [None]
    if options[0] is None:
        if width == 4 and options.count(None) != n:
            return None
        return None if shared_due is None else (funcs, args, [shared_due] * n)
    name = next(iter(options[0]))
    if name == "at" and default_delay is None:
        bound = _BIG_AT
    elif name == "delay" and default_at is None:
        bound = BIG_DELAY
    else:
        return None
    values = list(map(itemgetter(name), options))  # KeyError: an item names another option
    if sum(map(len, options)) != n:  # each has *name*: none has another option
        return None
    kinds = {float} if countOf(map(type, values), float) == n else set(map(type, values))
    if not kinds <= {float, int} or not math.isfinite(sum(values)):  # NaN and inf propagate
        return None
    if not -bound < min(values) or not max(values) < bound:
        return None
    if int in kinds:
        values = list(map(float, values))
    return funcs, args, (values if name == "at" else list(map(now.__add__, values)))


def prepare_new(
    items: Sequence[object],
    defaults: Mapping[str, Any],
    *,
    now: float,
    durable: bool,
    new_id: Callable[[], str],
    allowlist: Allowlist | None,
) -> NewTasks | None:
    """``schedule_many(items, **defaults)`` as one :class:`NewTasks`, or ``None`` when the batch
    is not the common case or has an error (``prepare_many`` then builds it, or names the error).

    The common case: every item a function (a callable, a stored reference, a ``@task``
    function) with positional arguments and optionally keyword arguments and its own ``delay=``
    or ``at=`` (a tuple of one to four, a callable, or a ``step``); no ``id=`` and no
    ``after=`` anywhere; the batch's ``on_conflict`` ``"error"`` (ids are new, so it cannot meet
    an existing task). Runtime: one pass over *items*, O(1) per item.
    """
    if not defaults.keys() <= _SHARED | {"on_conflict", "after", "id"}:
        return None
    if defaults.get("after") is not None or defaults.get("id") is not None:
        return None
    if defaults.get("on_conflict") not in (None, "error"):
        return None
    try:
        shared = {k: v for k, v in defaults.items() if k in _SHARED and k not in ("delay", "at")}
        shared_kwargs = shared.pop("kwargs", None)
        shared_due = _shared_due(now, defaults)
        # the shared options checked once, on a function anything allows
        template = build_task(
            print, (), due=now, now=now, durable=False, new_id=new_id, id="template", **shared
        )
        if shared_kwargs is not None:
            if not isinstance(shared_kwargs, Mapping):
                return None
            shared_kwargs = dict(shared_kwargs) if shared_kwargs else EMPTY_KWARGS
        else:
            shared_kwargs = EMPTY_KWARGS
        if durable and shared_kwargs:
            check_json((), shared_kwargs)
    except Exception:
        return None
    default_delay, default_at = defaults.get("delay"), defaults.get("at")
    refs: dict[object, Callable[..., Any] | str] = {}

    def resolve(func: object) -> Callable[..., Any] | str:
        """*func*'s reference (checked as ``schedule()`` checks it), once per function."""
        ref = refs.get(func)
        if ref is None:
            ref = refs[func] = build_task(
                func.func if isinstance(func, TaskFunction) else func,  # type: ignore[arg-type]
                (),
                due=now,
                now=now,
                durable=durable,
                new_id=new_id,
                id="template",
                allowlist=allowlist,
            ).func
        return ref

    try:
        columns = _columns(items, shared_due, default_delay, default_at, now)
        if columns is not None:
            raw, args_column, dues_column = columns
            n = len(raw)
            distinct = {raw[0]} if raw.count(raw[0]) == n else set(raw)
            for func in distinct:
                resolve(func)
            refs_column = (
                [refs[raw[0]]] * n if len(distinct) == 1 else list(map(refs.__getitem__, raw))
            )
            if durable:
                check_json_args(args_column)
            ids = new_ids(n, durable=durable, now=now, new_id=new_id)
            return NewTasks(
                template, ids, refs_column, args_column, [shared_kwargs] * n, dues_column
            )
    except Exception:
        return None
    funcs: list[Callable[..., Any] | str] = []
    all_args: list[tuple[Any, ...]] = []
    all_kwargs: list[Mapping[str, Any]] = []
    dues: list[float] = []
    add_func, add_args, add_kwargs, add_due = (
        funcs.append,
        all_args.append,
        all_kwargs.append,
        dues.append,
    )
    plain = PLAIN_NUMBERS
    spec: Any
    try:
        for spec in items:
            kwargs: Any = None
            options: Any = None
            if spec.__class__ is tuple:
                n = len(spec)
                if n == 2:
                    func, args = spec
                elif n == 1:
                    func, args = spec[0], ()
                elif n == 3:
                    func, args, kwargs = spec
                elif n == 4:
                    func, args, kwargs, options = spec
                else:
                    return None
            elif spec.__class__ is Step:
                func, args, options = spec.func, spec.args, spec.options
            elif callable(spec):
                func, args = spec, ()
            else:
                return None
            ref = refs.get(func)
            if ref is None:
                if not isinstance(func, Hashable):
                    return None
                ref = resolve(func)
            if args.__class__ is not tuple:
                if args.__class__ is list:
                    args = tuple(args)
                elif args is None and spec.__class__ is tuple:
                    args = ()
                else:
                    return None
            due = shared_due
            if options:
                if not options.keys() <= _PER_ITEM:
                    return None
                if "kwargs" in options:
                    if kwargs is not None:
                        return None
                    kwargs = options["kwargs"]
                    if kwargs is None:
                        kwargs = EMPTY_KWARGS  # the item's own None overrides the default
                if "delay" in options or "at" in options:
                    delay = options.get("delay", default_delay)
                    at = options.get("at", default_at)
                    if at is None and delay.__class__ in plain and -BIG_DELAY < delay < BIG_DELAY:
                        due = now + delay
                    elif delay is None and at.__class__ in plain and -_BIG_AT < at < _BIG_AT:
                        due = float(at)
                    else:
                        due = due_time(now, delay, at, False)
            elif options is not None and not isinstance(options, Mapping):
                return None
            if due is None:
                return None
            if kwargs is None:
                kwargs = shared_kwargs
            elif kwargs.__class__ is dict or isinstance(kwargs, Mapping):
                kwargs = dict(kwargs) if kwargs else EMPTY_KWARGS
            else:
                return None
            if durable:
                check_json(args, kwargs)
            add_func(ref)
            add_args(args)
            add_kwargs(kwargs)
            add_due(due)
    except Exception:
        return None
    ids = new_ids(len(funcs), durable=durable, now=now, new_id=new_id)
    return NewTasks(template, ids, funcs, all_args, all_kwargs, dues)
