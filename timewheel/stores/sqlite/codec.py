"""How tasks and schedules become table rows and back, driven by one table of columns each.

:data:`TASKS` and :data:`SCHEDULES` list their table's columns in order, each with the record
field it holds and how a value converts; the ``SELECT`` and ``INSERT`` statements, the row
positions and the decoders all derive from that one list, so the column order is written once.

Encoding
--------
Instants (``due``, ``lease_expires``, ``started``, ``created``, ``updated``) are **UTC epoch
integers in microseconds**: exact comparisons and ordering in SQL with no float surprises,
readable with ``datetime(due / 1e6, 'unixepoch')``, and 64-bit range to the year 294,000. A float
due time keeps its value to the microsecond (round to nearest), far finer than the wheel's 1 ms
tick. ``started`` is NULL until a task's first run.
``timeout`` is a duration (REAL seconds). ``func`` is a reference string (``timewheel.refs``);
``args``/``kwargs``/``extra``/``after`` are JSON; ``retry`` is :meth:`Retry.to_spec` as JSON
(NULL for the default policy); a ``result`` is JSON, or its ``repr`` marked by
``result_repr = 1`` (read back as :class:`timewheel.refs.ResultRepr`).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from timewheel import refs
from timewheel.errors import InvalidScheduleError, SerializationError
from timewheel.stores import policy
from timewheel.stores.base import NewTasks
from timewheel.task import EMPTY_KWARGS, NO_RETRY, Retry, ScheduleRecord, Task, TaskState

__all__ = [
    "SCHEDULES",
    "TASKS",
    "Column",
    "Row",
    "RowCodec",
    "claimed_fields",
    "decode_dependents",
    "from_us",
    "new_rows",
    "read_back",
    "ready_ids",
    "to_us",
    "to_us_optional",
    "upstream_entry",
]

Row = tuple[Any, ...]
_UNSET = object()
R = TypeVar("R", Task, ScheduleRecord)

_STATES = {s.value: s for s in TaskState}
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode


# -- values ----------------------------------------------------------------------------------------
def to_us(t: float) -> int:
    """Epoch seconds as integer microseconds (round to nearest).

    Raises:
        InvalidScheduleError: *t* is not a finite number.
    """
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        raise InvalidScheduleError(f"a time must be finite epoch seconds (got {t!r})")
    return round(t * 1_000_000)


def to_us_optional(t: float | None) -> int | None:
    """:func:`to_us`, with ``None`` kept."""
    return None if t is None else to_us(t)


def from_us(us: int) -> float:
    """Integer microseconds as epoch seconds."""
    return us / 1_000_000


# ``us / 1e6`` as a C-level call: decoding runs it for every instant of every row read
_from_us_fast: Callable[[int], float] = (1_000_000.0).__rtruediv__


def _from_us_optional(us: int | None) -> float | None:
    return None if us is None else us / 1_000_000


def _enc_args(args: Sequence[Any]) -> str:
    refs.check_json(args, EMPTY_KWARGS)
    return _dumps(list(args)) if args else "[]"


def _dec_args(s: str) -> tuple[Any, ...]:
    return () if s == "[]" else tuple(json.loads(s))


def _enc_kwargs(kwargs: Mapping[str, Any]) -> str:
    refs.check_json((), kwargs)
    return _dumps(dict(kwargs)) if kwargs else "{}"


def _dec_kwargs(s: str) -> Mapping[str, Any]:
    kwargs: Mapping[str, Any] = EMPTY_KWARGS if s == "{}" else json.loads(s)
    return kwargs


def _enc_retry(r: Retry) -> str | None:
    if not isinstance(r, Retry):
        raise SerializationError(f"retry must be a timewheel.Retry (got {r!r})")
    return None if r == NO_RETRY else _dumps(r.to_spec())


@functools.lru_cache(maxsize=256)
def _retry_from_json(s: str) -> Retry:
    return Retry.from_spec(json.loads(s))


def _dec_retry(s: str | None) -> Retry:
    return NO_RETRY if s is None else _retry_from_json(s)


def _enc_result(v: Any) -> tuple[str | None, int]:
    if v is None:
        return None, 0
    if isinstance(v, refs.ResultRepr):
        return str(v), 1
    try:
        return _dumps(v), 0
    except (TypeError, ValueError):
        return repr(v), 1


def _dec_result(s: str | None, is_repr: int) -> Any:
    if s is None:
        return None
    return refs.ResultRepr(s) if is_repr else json.loads(s)


def _enc_extra(v: Mapping[str, Any]) -> str | None:
    if not v:
        return None
    refs.check_json_value(dict(v), "extra")
    return _dumps(dict(v))


def _dec_extra(s: str | None) -> Mapping[str, Any]:
    extra: Mapping[str, Any] = EMPTY_KWARGS if s is None else json.loads(s)
    return extra


def _enc_after(v: Sequence[str]) -> str | None:
    return _dumps(list(v)) if v else None


def _dec_after(s: str | None) -> tuple[str, ...]:
    return () if s is None else tuple(json.loads(s))


def upstream_entry(task_id: str) -> str:
    """How *task_id* appears inside a stored ``after`` column (a JSON string): a substring
    search for it finds every task naming it, and a few whose ids merely contain it (see
    :func:`decode_dependents`)."""
    return _dumps(task_id)


def decode_dependents(rows: Iterable[Row], task_id: str, limit: int) -> list[Task]:
    """The first *limit* tasks of *rows* (found by a substring search for
    :func:`upstream_entry`) that really name *task_id* in their ``after``; decoding stops there."""
    found = (TASKS.decode(r) for r in rows)
    return list(itertools.islice((t for t in found if task_id in t.after), max(limit, 0)))


def _enc_timeout(v: float | None) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidScheduleError(f"timeout must be seconds or None (got {v!r})")
    return float(v)


def _enc_flag(v: object) -> int:
    return int(bool(v))


def _json_object(what: str) -> Callable[[Mapping[str, Any]], str]:
    def encode(v: Mapping[str, Any]) -> str:
        try:
            return _dumps(dict(v))
        except (TypeError, ValueError) as e:
            raise SerializationError(f"{what} cannot be stored as JSON: {e}") from None

    return encode


# -- the column tables ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Column:
    """One field of a record and the table column(s) that hold it.

    Attributes:
        name: the SQL column.
        field: the record field it holds.
        encode: field value -> SQL value (``None``: stored as is). With *spans*, it returns one
            value per column.
        decode: SQL value -> field value (``None``: read as is). With *spans*, it takes one
            argument per column.
        spans: further SQL columns, right after *name*, that the same field fills.
        changeable: whether a transition may set the field (the store manages the others).
    """

    name: str
    field: str
    encode: Callable[[Any], Any] | None = None
    decode: Callable[..., Any] | None = None
    spans: tuple[str, ...] = ()
    changeable: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        """The SQL columns of the field, in order."""
        return (self.name, *self.spans)


def _row_builder(columns: Sequence[Column]) -> Callable[[Any], list[Any]]:
    """A function of a record that returns its row: one list display of the fields, each
    through its column's encoder, in column order (``RowCodec.encode`` runs once per insert;
    a loop over the columns costs it twice as much: 6.5 against 4.4 µs per call in
    ``benchmarks/bench_pg_insert.py --client``)."""
    encoders: dict[str, Callable[[Any], Any]] = {}
    items = []
    for k, c in enumerate(columns):
        if not c.field.isidentifier():
            raise ValueError(f"not a field name: {c.field!r}")
        value = f"r.{c.field}"
        if c.encode is not None:
            encoders[f"e{k}"] = c.encode
            value = f"e{k}({value})"
        items.append(f"*{value}" if c.spans else value)
    namespace: dict[str, Any] = {}
    exec(f"def build(r):\n    return [{', '.join(items)}]\n", encoders, namespace)
    built: Callable[[Any], list[Any]] = namespace["build"]
    return built


class RowCodec(Generic[R]):
    """Rows of one table to records and back, from its list of :class:`Column`.

    Attributes:
        table: the table's name.
        names: the SQL columns in row order.
        position: SQL column name -> its index in a row.
        select: ``SELECT <every column> FROM <table>``.
        insert: ``INSERT INTO <table> (<every column>) VALUES (?, ...)``.
    """

    def __init__(
        self, table: str, kind: str, build: Callable[..., R], columns: Sequence[Column]
    ) -> None:
        self.table = table
        self.kind = kind
        self.columns = tuple(columns)
        self.names = tuple(n for c in self.columns for n in c.names)
        self.position = {n: i for i, n in enumerate(self.names)}
        self.select = f"SELECT {', '.join(self.names)} FROM {table}"
        self.insert = f"INSERT INTO {table} ({', '.join(self.names)}) VALUES ({', '.join('?' * len(self.names))})"
        self._build: Callable[..., R] = build
        self._by_field = {c.field: c for c in self.columns}
        self._encode = _row_builder(self.columns)
        self._plain = [(c.field, self.position[c.name]) for c in self.columns if c.decode is None]
        self._converted = [
            (c.field, self.position[c.name], c.decode)
            for c in self.columns
            if c.decode is not None and not c.spans
        ]
        self._spanning = [
            (c.field, self.position[c.name], len(c.names), c.decode)
            for c in self.columns
            if c.decode is not None and c.spans
        ]

    def encode(self, record: R) -> list[Any]:
        """The row that holds *record*.

        Raises:
            SerializationError: a value cannot be stored (the message names the record).
            InvalidScheduleError: a time is not finite, or a value has the wrong type.
        """
        try:
            return self._encode(record)
        except SerializationError as e:
            raise SerializationError(f"{self.kind} {record.id!r}: {e}") from None

    def encode_many(self, records: Iterable[R]) -> list[list[Any]]:
        """The rows of *records*, each as :meth:`encode` gives it. A value that a record shares
        with the one before it (the same object: a batch's due time, creation time, options,
        empty keyword arguments) is encoded once.

        Raises:
            SerializationError, InvalidScheduleError: as :meth:`encode`.
        """
        columns = [(k, c.encode, bool(c.spans)) for k, c in enumerate(self.columns)]
        values_of = operator.attrgetter(*(c.field for c in self.columns))
        last: list[Any] = [_UNSET] * len(columns)
        last_encoded: list[Any] = [None] * len(columns)
        rows: list[list[Any]] = []
        for record in records:
            row: list[Any] = []
            values = values_of(record)
            try:
                for k, enc, spans in columns:
                    v = values[k]
                    if enc is None:
                        row.append(v)
                        continue
                    if v is last[k]:
                        e = last_encoded[k]
                    else:
                        e = last_encoded[k] = enc(v)
                        last[k] = v
                    if spans:
                        row.extend(e)
                    else:
                        row.append(e)
            except SerializationError as e:
                raise SerializationError(f"{self.kind} {record.id!r}: {e}") from None
            rows.append(row)
        return rows

    def decode(self, row: Row, changes: Mapping[str, Any] | None = None) -> R:
        """The record *row* holds, with the fields in *changes* replaced (one constructor call)."""
        kw = {f: row[i] for f, i in self._plain}
        for f, i, dec in self._converted:
            kw[f] = dec(row[i])
        for f, i, n, dec in self._spanning:
            kw[f] = dec(*row[i : i + n])
        if changes:
            kw.update(changes)
        return self._build(**kw)

    def encode_changes(
        self, changes: Mapping[str, Any]
    ) -> tuple[list[str], list[Any], dict[str, Any]]:
        """Columns and values for a transition's *changes*, and the changes as a read gives them.

        Raises:
            TypeError: a field the store manages (id, state, version, updated, the dependency
                fields) or an unknown field.
            InvalidScheduleError, SerializationError: a value of the wrong type or not storable.
        """
        policy.check_task_changes(changes)
        cols: list[str] = []
        vals: list[Any] = []
        stored: dict[str, Any] = {}
        for k, v in changes.items():
            c = self._by_field.get(k)
            if c is None or not c.changeable:
                raise TypeError(f"cannot change {k!r} in a transition")
            enc = v if c.encode is None else c.encode(v)
            if c.spans:
                cols += c.names
                vals += enc
                stored[k] = c.decode(*enc) if c.decode is not None else enc
            else:
                cols.append(c.name)
                vals.append(enc)
                stored[k] = enc if c.decode is None else c.decode(enc)
        return cols, vals, stored


def _enc_state(s: TaskState) -> str:
    return s.value


TASKS: RowCodec[Task] = RowCodec(
    "tasks",
    "task",
    Task,
    [
        Column("id", "id", changeable=False),
        Column("func", "func", encode=refs.func_ref),
        Column("args", "args", encode=_enc_args, decode=_dec_args),
        Column("kwargs", "kwargs", encode=_enc_kwargs, decode=_dec_kwargs),
        Column("due", "due", encode=to_us, decode=_from_us_fast),
        Column("state", "state", encode=_enc_state, decode=_STATES.__getitem__, changeable=False),
        Column("version", "version", changeable=False),
        Column("attempts", "attempts"),
        Column("retry", "retry", encode=_enc_retry, decode=_dec_retry),
        Column("priority", "priority"),
        Column("queue", "queue"),
        Column("timeout", "timeout", encode=_enc_timeout),
        Column("lease_owner", "lease_owner"),
        Column("lease_expires", "lease_expires", encode=to_us_optional, decode=_from_us_optional),
        Column(
            "started",
            "started",
            encode=to_us_optional,
            decode=_from_us_optional,
            changeable=False,
        ),
        Column("created", "created", encode=to_us, decode=_from_us_fast),
        Column("updated", "updated", encode=to_us, decode=_from_us_fast, changeable=False),
        Column("result", "result", encode=_enc_result, decode=_dec_result, spans=("result_repr",)),
        Column("error", "error"),
        Column("schedule_id", "schedule_id"),
        Column("after", "after", encode=_enc_after, decode=_dec_after, changeable=False),
        Column("unmet", "unmet", changeable=False),
        Column("when_", "when", changeable=False),
        Column("extra", "extra", encode=_enc_extra, decode=_dec_extra),
    ],
)
"""The ``tasks`` table."""


SCHEDULES: RowCodec[ScheduleRecord] = RowCodec(
    "schedules",
    "schedule",
    ScheduleRecord,
    [
        Column("id", "id", changeable=False),
        Column("func", "func", encode=refs.func_ref),
        Column("args", "args", encode=_enc_args, decode=_dec_args),
        Column("kwargs", "kwargs", encode=_enc_kwargs, decode=_dec_kwargs),
        Column("rule", "rule", encode=_json_object("its rule"), decode=json.loads),
        Column("options", "options", encode=_json_object("its options"), decode=json.loads),
        Column("paused", "paused", encode=_enc_flag, decode=bool),
        Column("version", "version", changeable=False),
        Column("created", "created", encode=to_us, decode=from_us),
        Column("updated", "updated", encode=to_us, decode=from_us),
    ],
)
"""The ``schedules`` table."""


def claimed_fields(row: Row, owner: str, lease_us: int, now_us: int) -> dict[str, Any]:
    """The fields a claim changes (RUNNING, one more attempt, the lease, the start), for the
    decoded snapshot of *row*, read just before the claim."""
    return {
        "state": TaskState.RUNNING,
        "version": row[TASKS.position["version"]] + 1,
        "attempts": row[TASKS.position["attempts"]] + 1,
        "lease_owner": owner,
        "lease_expires": from_us(lease_us),
        "started": from_us(now_us),
        "updated": from_us(now_us),
    }


_DUE, _STATE, _CREATED = TASKS.position["due"], TASKS.position["state"], TASKS.position["created"]
_UPDATED, _TIMEOUT = TASKS.position["updated"], TASKS.position["timeout"]


def read_back(task: Task, row: list[Any]) -> Task:
    """What a read of *row* gives, *row* being :meth:`TASKS.encode <RowCodec.encode>` of *task*
    (its state perhaps set since): the snapshot an insert answers with, without decoding what
    was just encoded.

    The fields *row* keeps as they are come from *task*: the function reference, the arguments
    (checked to survive JSON unchanged when encoded), the options. The state, the instants (as
    whole microseconds) and the timeout (a float) come from *row*. A task whose function is not
    yet a reference, whose arguments are not a tuple, that carries a result, a lease or a start
    is decoded.
    """
    if (
        type(task.func) is not str
        or type(task.args) is not tuple
        or task.result is not None
        or task.lease_expires is not None
        or task.started is not None
    ):
        return TASKS.decode(tuple(row))
    state = _STATES[row[_STATE]]
    due, created = _from_us_fast(row[_DUE]), _from_us_fast(row[_CREATED])
    updated, timeout = _from_us_fast(row[_UPDATED]), row[_TIMEOUT]
    if (
        state is task.state
        and due == task.due
        and created == task.created
        and updated == task.updated
        and type(task.due) is type(task.created) is type(task.updated) is float
        and type(timeout) is type(task.timeout)
    ):
        return task
    return task.evolve(state=state, due=due, created=created, updated=updated, timeout=timeout)


# -- a batch of new tasks --------------------------------------------------------------------------
_TAIL = len(TASKS.names) - 5  # the columns after id, func, args, kwargs, due: the batch's own


_STATE_IN_TAIL = TASKS.position["state"] - 5


def new_rows(batch: NewTasks, *, ready_until_us: int | None = None) -> list[Row]:
    """The rows of a :class:`~timewheel.stores.base.NewTasks` batch, in its order: PENDING, but
    READY for the tasks due at or before *ready_until_us* (epoch microseconds; see
    :func:`~timewheel.stores.policy.ready_until`).

    The columns a batch shares (state, version, options, times and the rest) are encoded once,
    from its template; per task only its id, function reference, arguments (as JSON), keyword
    arguments and due time, which are the first five columns, so each row is one tuple
    concatenation. The batch's arguments were checked as JSON when it was built.

    Raises:
        SerializationError, InvalidScheduleError: as :meth:`RowCodec.encode`.
    """
    n = len(batch.ids)
    if not n:
        return []
    shared = tuple(TASKS.encode(batch.template.evolve(func=batch.funcs[0])))[5:]
    assert len(shared) == _TAIL
    args = list(map(_dumps, batch.args))  # a tuple is written as a JSON array
    kwargs = batch.kwargs
    first = kwargs[0]
    if kwargs.count(first) == n:
        kwargs_text = [_enc_kwargs(first)] * n
    else:
        kwargs_text = list(map(_enc_kwargs, kwargs))
    dues = batch.dues
    dues_us = [to_us(dues[0])] * n if dues.count(dues[0]) == n else list(map(to_us, dues))
    funcs = batch.funcs
    if not all(isinstance(f, str) for f in set(funcs)):
        funcs = list(map(refs.func_ref, funcs))
    heads = zip(batch.ids, funcs, args, kwargs_text, dues_us, strict=True)
    if ready_until_us is None or min(dues_us) > ready_until_us:
        return list(map(tuple.__add__, heads, itertools.repeat(shared)))
    ready = (*shared[:_STATE_IN_TAIL], TaskState.READY.value, *shared[_STATE_IN_TAIL + 1 :])
    if max(dues_us) <= ready_until_us:
        return list(map(tuple.__add__, heads, itertools.repeat(ready)))
    return [head + (ready if head[4] <= ready_until_us else shared) for head in heads]


def ready_ids(batch: NewTasks, ready_until_us: int | None) -> Sequence[str]:
    """The ids of the tasks :func:`new_rows` made READY with the same *ready_until_us*, in batch
    order (the batch's own list when all of them are)."""
    dues = batch.dues
    if ready_until_us is None or not dues or to_us(min(dues)) > ready_until_us:
        return []
    if to_us(max(dues)) <= ready_until_us:
        return batch.ids
    return [i for i, d in zip(batch.ids, dues, strict=True) if to_us(d) <= ready_until_us]
