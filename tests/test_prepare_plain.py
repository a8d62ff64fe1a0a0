"""``prepare`` of ``schedule(f, *args, delay=d)`` with no other option builds the task the full
path builds (the same call with an option at its default value), and refuses what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timewheel.errors import SerializationError, TimewheelError
from timewheel.options import OneShot, prepare
from timewheel.refs import Allowlist


def job(*args: Any) -> None: ...


def _prepare(args: tuple[Any, ...], delay: Any, options: dict[str, Any], durable: bool) -> OneShot:
    got = prepare(
        job,
        args,
        delay,
        options,
        now=1_700_000_000.123456,
        durable=durable,
        new_id=lambda: "id-1",
        allowlist=Allowlist([__name__]),
    )
    assert isinstance(got, OneShot)
    return got


_values = st.none() | st.booleans() | st.integers() | st.text(max_size=4) | st.floats(-1e9, 1e9)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_values, max_size=3).map(tuple),
    st.integers(-(10**6), 10**6) | st.floats(-1e6, 1e6),
    st.booleans(),
)
def test_a_plain_delay_builds_what_the_full_path_builds(
    args: tuple[Any, ...], delay: float, durable: bool
) -> None:
    plain = _prepare(args, delay, {}, durable)
    full = _prepare(args, delay, {"priority": 0}, durable)
    assert plain.on_conflict == full.on_conflict == "error"
    task = plain.task.evolve(id=full.task.id)
    assert task == full.task
    assert [type(getattr(task, f)) for f in ("due", "created", "kwargs", "retry")] == [
        type(getattr(full.task, f)) for f in ("due", "created", "kwargs", "retry")
    ]
    assert (len(plain.task.id) == 32) if durable else (plain.task.id == "id-1")


def _outcome(delay: Any, options: dict[str, Any]) -> object:
    try:
        return _prepare((), delay, options, False).task
    except (TimewheelError, TypeError) as e:
        return (type(e), str(e))


@pytest.mark.parametrize("delay", [float("nan"), float("inf"), True, 2.0**60, -(2.0**60)])
def test_a_delay_the_plain_path_does_not_take_is_judged_by_the_full_path(delay: Any) -> None:
    assert _outcome(delay, {}) == _outcome(delay, {"priority": 0})


def test_arguments_not_json_are_refused_on_a_durable_store() -> None:
    with pytest.raises(SerializationError):
        _prepare((object(),), 0, {}, True)
