"""Contract checks for recurring schedules: put (with the first instance), replace, update, delete."""

from __future__ import annotations

from functools import partial

from timewheel._contract.support import (
    FUNC,
    T0,
    S,
    expect,
    make_ready,
    make_running,
    new_task,
    schedule_record,
)
from timewheel.errors import (
    DuplicateKeyError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.stores.base import Store, SupportsInspection


def check_schedule_put_get(store: Store) -> None:
    rec = schedule_record(args=(1, "a"), kwargs={"x": [1]})
    out = store.put_schedule(rec, first=new_task("s@1", due=T0 + 60, schedule_id="s"))
    got = store.get_schedule("s")
    assert got is not None, f"get_schedule returns what put_schedule stored ({got!r})"
    assert got == out, f"get_schedule returns what put_schedule stored ({got!r})"
    assert (
        got.func,
        tuple(got.args),
        dict(got.kwargs),
        dict(got.rule),
        dict(got.options),
        got.paused,
        got.version,
    ) == (FUNC, (1, "a"), {"x": [1]}, dict(rec.rule), dict(rec.options), False, 0), (
        f"fields kept ({got!r})"
    )
    first = store.get("s@1")
    assert (first.state, first.version, first.schedule_id) == (S.PENDING, 0, "s"), (
        f"the first instance is inserted in the same step ({first!r})"
    )
    assert store.get_schedule("ghost") is None
    store.put_schedule(schedule_record("t"), first=None)
    assert [r.id for r in store.list_schedules()] == ["s", "t"], "list_schedules, by id"


def check_schedule_replace(store: Store) -> None:
    store.put_schedule(schedule_record(), first=new_task("s@1", due=T0, schedule_id="s"))
    store.insert_many(
        [
            new_task("s@0", due=T0 - 60, schedule_id="s"),
            new_task("s@r", due=T0 - 120, schedule_id="s"),
            new_task("other", due=T0),
        ]
    )
    make_ready(store, "s@0")
    make_running(store, "s@r")
    new = store.put_schedule(
        schedule_record(rule={"kind": "every", "seconds": 30}, updated=T0 + 1),
        first=new_task("s@2", due=T0 + 30, schedule_id="s"),
    )
    assert new.version == 1, f"a replaced schedule moves to version + 1 with the new rule ({new!r})"
    assert dict(new.rule)["seconds"] == 30, (
        f"a replaced schedule moves to version + 1 with the new rule ({new!r})"
    )
    for i in ("s@0", "s@1"):
        assert store.get(i).state is S.CANCELLED, f"replace cancels PENDING/READY instance {i}"
    assert store.get("s@r").state is S.RUNNING, "a running instance is left to finish"
    assert store.get("other").state is S.PENDING, "other tasks are untouched"
    assert store.get("s@2").state is S.PENDING, "the new first instance is inserted"


def check_schedule_replace_reuses_instance_id(store: Store) -> None:
    store.put_schedule(schedule_record(), first=new_task("s@1", due=T0, schedule_id="s"))
    new_first = new_task("s@1", due=T0 + 5, schedule_id="s", priority=2)
    store.put_schedule(schedule_record(), first=new_first)
    t = store.get("s@1")
    assert (t.state, t.due, t.priority) == (S.PENDING, T0 + 5, 2), (
        f"the new first instance replaces the cancelled one with the same id ({t!r})"
    )
    assert t.version > 1, (
        f"its version moves past the cancelled snapshot's (got {t.version}), so a stale "
        "compare-and-swap cannot hit the new instance"
    )
    expect(
        VersionConflictError,
        lambda: store.transition("s@1", expected_version=0, state=S.READY, now=T0 + 9),
        "a CAS with the first instance's old version 0",
    )


def check_schedule_conflict(store: Store) -> None:
    store.put_schedule(schedule_record(options={"priority": 1}), first=None)
    expect(
        DuplicateKeyError,
        lambda: store.put_schedule(schedule_record(), first=None, on_conflict="error"),
        "put_schedule of an existing id with on_conflict='error'",
    )
    kept = store.put_schedule(
        schedule_record(options={"priority": 9}), first=new_task("k@1"), on_conflict="keep"
    )
    assert dict(kept.options) == {"priority": 1}, "on_conflict='keep' returns the existing one"
    assert store.find("k@1") is None, "on_conflict='keep' inserts no instance"


def check_update_schedule(store: Store) -> None:
    store.put_schedule(schedule_record(), first=None)
    new = store.update_schedule("s", expected_version=0, paused=True, updated=T0 + 5)
    assert (new.paused, new.version, new.updated) == (True, 1, T0 + 5), f"CAS applied ({new!r})"
    assert store.get_schedule("s") == new
    expect(
        VersionConflictError,
        lambda: store.update_schedule("s", expected_version=0, paused=False),
        "update_schedule with a stale version",
    )
    assert store.get_schedule("s") == new, "a lost CAS changes nothing"
    expect(
        TaskNotFoundError,
        lambda: store.update_schedule("ghost", expected_version=0),
        "update_schedule of a missing id",
    )
    for field in ("id", "version"):
        expect(
            TypeError,
            partial(store.update_schedule, "s", expected_version=1, **{field: "x"}),
            f"update_schedule changing {field}",
        )
    assert store.get_schedule("s") == new, "a refused update changes nothing"


def check_delete_schedule(store: Store) -> None:
    store.put_schedule(schedule_record(), first=new_task("s@1", schedule_id="s"))
    store.insert(new_task("s@0", schedule_id="s", due=T0 - 1))
    make_running(store, "s@0")
    assert store.delete_schedule("s") is True
    assert store.get_schedule("s") is None, "the schedule is gone"
    assert store.get("s@1").state is S.CANCELLED, "its pending instance is cancelled"
    assert store.get("s@0").state is S.RUNNING, "its running instance is left to finish"
    assert store.delete_schedule("s") is False, "deleting again returns False"
    assert store.list_schedules() == []


def check_last_ended(store: Store) -> None:
    """A store that offers inspection names the instance of a schedule that ended last."""
    if not isinstance(store, SupportsInspection):
        return
    store.put_schedule(schedule_record(), first=new_task("s@1", due=T0 - 60, schedule_id="s"))
    store.insert_many(
        [new_task("s@2", due=T0 - 30, schedule_id="s"), new_task("other", due=T0 - 90)]
    )
    assert store.last_ended("s") is None, "no instance ended yet"
    make_running(store, "s@2")
    store.finish("s@2", owner="w1", state=S.FAILED, now=T0 + 2, error="boom")
    make_running(store, "s@1")
    store.finish("s@1", owner="w1", state=S.SUCCEEDED, now=T0 + 3)
    make_running(store, "other")
    store.finish("other", owner="w1", state=S.SUCCEEDED, now=T0 + 4)
    last = store.last_ended("s")
    assert last is not None, "an instance ended"
    assert (last.id, last.state) == ("s@1", S.SUCCEEDED), f"the latest end wins ({last!r})"
    store.delete("s@1")
    last = store.last_ended("s")
    assert last is not None, "the other instance ended too"
    assert (last.id, last.state) == ("s@2", S.FAILED), f"once the latest is gone ({last!r})"
    assert store.last_ended("ghost") is None
