"""The task record and the retry policy: construction, copies, and the retry spec codec."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from timewheel.errors import InvalidScheduleError, InvalidTypeError, SerializationError
from timewheel.task import (
    NO_RETRY,
    Retry,
    ScheduleRecord,
    Task,
    TaskState,
    new_instance,
    new_schedule_record,
)


def _every_field_set() -> dict[str, Any]:
    """A value for every Task field, each different from its default."""
    return {
        "id": "a",
        "func": "m:f",
        "args": (1,),
        "kwargs": {"k": 2},
        "due": 5.0,
        "state": TaskState.RUNNING,
        "version": 3,
        "attempts": 2,
        "retry": Retry(max_attempts=4),
        "priority": 9,
        "queue": "mail",
        "timeout": 1.5,
        "lease_owner": "w",
        "lease_expires": 7.0,
        "started": 5.0,
        "created": 1.0,
        "updated": 2.0,
        "result": [1],
        "error": "boom",
        "schedule_id": "s",
        "after": ("u",),
        "unmet": 1,
        "when": "all_done",
        "extra": {"tag": "x"},
    }


def test_init_takes_every_field_by_keyword_with_the_declared_defaults() -> None:
    fields = dataclasses.fields(Task)
    params = list(inspect.signature(Task.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    for f, p in zip(fields, params, strict=True):
        declared = (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        )
        if declared is dataclasses.MISSING:
            assert p.default is inspect.Parameter.empty, f.name
        else:
            assert p.default == declared, f.name


def test_init_and_evolve_set_every_field() -> None:
    values = _every_field_set()
    t = Task(**values)
    assert {f.name: getattr(t, f.name) for f in dataclasses.fields(Task)} == values
    base = Task(id="b", func="m:g", due=0.0)
    assert base.evolve(**values) == t
    assert base.evolve(**values).extra == t.extra  # extra is left out of ==
    for name, value in values.items():
        one = base.evolve(**{name: value})
        assert getattr(one, name) == value, name
        others = {f.name for f in dataclasses.fields(Task)} - {name}
        assert all(getattr(one, o) == getattr(base, o) for o in others), name


def test_moved_copies_every_field_but_state_version_and_updated() -> None:
    t = Task(**_every_field_set())
    m = t.moved(TaskState.READY, version=9, updated=5.0)
    want = {f.name: getattr(t, f.name) for f in dataclasses.fields(Task)}
    want.update(state=TaskState.READY, version=9, updated=5.0)
    assert {f.name: getattr(m, f.name) for f in dataclasses.fields(Task)} == want
    assert m == t.evolve(state=TaskState.READY, version=9, updated=5.0)
    # both copies are built on the unfrozen layout twin: they must come out as frozen Tasks
    for copy in (m, t.evolve(due=3.0)):
        assert type(copy) is Task
        with pytest.raises(dataclasses.FrozenInstanceError):
            copy.due = 0.0  # type: ignore[misc]  # the point of the test


def test_evolve_refuses_unknown_fields_and_tasks_stay_frozen() -> None:
    t = Task(id="a", func="m:f", due=1.0)
    with pytest.raises(TypeError, match=r"no field\(s\) \['colour'\]"):
        t.evolve(colour="red")
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.due = 2.0  # type: ignore[misc]  # the point of the test
    with pytest.raises(TypeError):
        Task(id="a", due=1.0)  # type: ignore[call-arg]  # func is required


# -- the retry spec codec --------------------------------------------------------------------------
class Throttled(ConnectionError):
    """An importable exception for the codec tests."""


def test_new_instance_and_record_are_what_the_constructors_build() -> None:
    retry, extra = Retry(max_attempts=2), {"slot": 60.0}
    made = new_instance(
        "s@60", f"{__name__}:f", (1,), {"k": 2}, 61.0, retry, 3, "q", 4.0, 7.0, "s", extra
    )
    built = Task(
        id="s@60",
        func=f"{__name__}:f",
        args=(1,),
        kwargs={"k": 2},
        due=61.0,
        retry=retry,
        priority=3,
        queue="q",
        timeout=4.0,
        created=7.0,
        updated=7.0,
        schedule_id="s",
        extra=extra,
    )
    assert type(made) is Task
    for f in dataclasses.fields(Task):  # every field set, to the constructor's value
        assert getattr(made, f.name) == getattr(built, f.name), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.due = 0.0  # type: ignore[misc]
    rec = new_schedule_record("s", "m:f", (1,), {"k": 2}, {"cron": "* * * * *"}, {"o": 1}, 7.0)
    want = ScheduleRecord(
        id="s",
        func="m:f",
        args=(1,),
        kwargs={"k": 2},
        rule={"cron": "* * * * *"},
        options={"o": 1},
        created=7.0,
        updated=7.0,
    )
    assert type(rec) is ScheduleRecord
    assert [getattr(rec, f.name) for f in dataclasses.fields(ScheduleRecord)] == [
        getattr(want, f.name) for f in dataclasses.fields(ScheduleRecord)
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.paused = True  # type: ignore[misc]


def test_retry_spec_round_trip() -> None:
    r = Retry(max_attempts=3, backoff="fixed", delay=2.5, cap=9, jitter=0.5, retry_on=(Throttled,))
    spec = r.to_spec()
    assert spec == {
        "max_attempts": 3,
        "backoff": "fixed",
        "delay": 2.5,
        "cap": 9,
        "jitter": 0.5,
        "retry_on": [f"{__name__}:Throttled"],
    }
    assert Retry.from_spec(spec) == r
    assert Retry.from_spec({}) == NO_RETRY
    assert Retry.from_spec(NO_RETRY.to_spec()) == NO_RETRY


def test_retry_spec_refuses_what_it_cannot_name() -> None:
    class Local(Exception): ...

    with pytest.raises(SerializationError, match="inside another function"):
        Retry(retry_on=(Local,)).to_spec()
    with pytest.raises(InvalidScheduleError, match=r"unknown keys \['colour'\]"):
        Retry.from_spec({"colour": "red"})


def test_unresolvable_retry_on_is_kept_by_name_and_matches_by_class_name() -> None:
    spec = {"max_attempts": 2, "retry_on": ["no_such_module_for_tw:Throttled", "builtins:print"]}
    r = Retry.from_spec(spec)
    assert r.retry_on == ("no_such_module_for_tw:Throttled", "builtins:print")
    assert r.to_spec()["retry_on"] == spec["retry_on"]

    class Throttled(Exception): ...

    class Slower(Throttled): ...

    Throttled.__module__ = Slower.__module__ = "no_such_module_for_tw"
    Throttled.__qualname__ = "Throttled"
    assert r.should_retry(1, Throttled())
    assert r.should_retry(1, Slower())  # a base class with the name matches too
    assert not r.should_retry(1, ValueError())
    assert not r.should_retry(2, Throttled())  # no attempts left
    assert r.should_retry(1, None)  # a lost run is always retryable


def test_retry_on_names_and_types_may_be_mixed() -> None:
    r = Retry(max_attempts=2, retry_on=(KeyError, "builtins:ConnectionError"))
    assert r.matches(KeyError())
    assert r.matches(ConnectionResetError())
    assert not r.matches(ValueError())
    one: Any = "builtins:OSError"  # a single name is accepted, as a single type is
    assert Retry(retry_on=one).retry_on == ("builtins:OSError",)
    assert Retry.from_spec(r.to_spec()).retry_on == (KeyError, ConnectionError)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_attempts": 0}, InvalidScheduleError, "max_attempts must be an int >= 1"),
        ({"max_attempts": 1.5}, InvalidTypeError, "max_attempts"),
        ({"backoff": "linear"}, InvalidScheduleError, "backoff"),
        ({"delay": -1}, InvalidScheduleError, "Retry.delay must be >= 0"),
        ({"cap": "1"}, InvalidTypeError, "Retry.cap"),
        ({"jitter": 2}, InvalidScheduleError, "jitter"),
        ({"retry_on": (int,)}, InvalidScheduleError, "exception types"),
        ({"retry_on": ("ConnectionError",)}, InvalidScheduleError, "'module:qualname'"),
    ],
)
def test_retry_refuses_bad_options(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Retry(**options)
