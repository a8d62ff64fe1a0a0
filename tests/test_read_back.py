"""``codec.read_back``: the snapshot an insert answers with is what a read of its row gives.

A durable store inserts a task as one encoded row and answers with the task as stored; building
that answer from the task (its state from the row, its instants as whole microseconds) instead of
decoding the row must give the same task, field for field and type for type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from timewheel.stores import policy
from timewheel.stores.sqlite.codec import TASKS, read_back
from timewheel.task import Retry, Task, TaskState

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
_instants = st.floats(min_value=0, max_value=4e9, allow_nan=False) | st.integers(0, 4_000_000_000)


# references, and a function a codec turns into one (it is decoded, not read back)
_FUNCS: list[Callable[..., Any] | str] = ["m:f", "pkg.mod:Cls.method", print]


@st.composite
def _tasks(draw: st.DrawFn) -> Task:
    created = draw(_instants)
    return Task(
        id=draw(st.text(min_size=1, max_size=8)),
        func=draw(st.sampled_from(_FUNCS)),
        args=draw(st.one_of(st.lists(_json, max_size=3).map(tuple), st.lists(_json, max_size=2))),
        kwargs=draw(st.dictionaries(st.text(max_size=4), _json, max_size=2)),
        due=draw(_instants),
        state=draw(st.sampled_from([TaskState.PENDING, TaskState.READY])),
        attempts=draw(st.integers(0, 3)),
        retry=draw(st.sampled_from([Retry(), Retry(max_attempts=3, backoff="fixed", delay=2.5)])),
        priority=draw(st.integers(-5, 5)),
        queue=draw(st.sampled_from(["default", "q"])),
        timeout=draw(st.none() | st.floats(0.001, 1e6) | st.integers(1, 100)),
        created=created,
        updated=created,
        result=draw(st.none() | _json),
        schedule_id=draw(st.none() | st.just("s")),
        extra=draw(st.dictionaries(st.text(max_size=4), _json, max_size=2)),
    )


def _fields(t: Task) -> list[tuple[str, Any, type]]:
    """Each field, its value and its type (the mappings' values only: an empty one may be any
    mapping)."""
    return [
        (n, getattr(t, n), Mapping if n in ("kwargs", "extra") else type(getattr(t, n)))
        for n in Task.__dataclass_fields__
    ]


@settings(max_examples=300, deadline=None)
@given(_tasks(), st.booleans(), st.sampled_from([None, "pending", "ready"]))
def test_read_back_is_the_row_decoded(task: Task, durable: bool, stored_state: str | None) -> None:
    new = policy.as_inserted(task, durable=durable)
    row = TASKS.encode(new)
    if stored_state is not None:
        row[TASKS.position["state"]] = stored_state  # what the server stored
    decoded = TASKS.decode(tuple(row))
    got = read_back(new, row)
    assert got == decoded
    assert _fields(got) == _fields(decoded)
    assert dict(got.extra) == dict(decoded.extra)  # (not compared by ==)
