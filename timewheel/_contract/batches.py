"""Contract checks for ``insert_many``: one atomic batch, ``on_conflict`` for every task of it,
dependencies on the store's tasks and on earlier tasks of the batch."""

from __future__ import annotations

from timewheel._contract.support import (
    T0,
    S,
    expect,
    finish_as,
    ids_of,
    make_running,
    new_task,
)
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.stores.base import Store


def check_insert_many_atomic(store: Store) -> None:
    """All or nothing: a refused batch inserts none of its tasks."""
    store.insert_many([new_task("a"), new_task("b", due=T0 + 1)])
    assert {t.id for t in store.tasks()} == {"a", "b"}, "insert_many inserts every task"
    assert all(t.state is S.PENDING and t.version == 0 for t in store.tasks()), (
        "insert_many stores PENDING at version 0"
    )
    e = expect(
        DuplicateKeyError,
        lambda: store.insert_many([new_task("c"), new_task("a")]),
        "insert_many with an existing id",
    )
    assert "'a'" in str(e), f"the message names the existing id (got {e})"
    assert store.find("c") is None, "a refused insert_many inserts none of its tasks"
    e = expect(
        DuplicateKeyError,
        lambda: store.insert_many([new_task("d"), new_task("x"), new_task("d")]),
        "insert_many with a repeated id",
    )
    assert "items 0 and 2" in str(e), f"the message names both items (got {e})"
    assert store.find("d") is None, "a refused insert_many inserts none of its tasks"
    assert store.find("x") is None, "a refused insert_many inserts none of its tasks"
    assert store.insert_many([]) == [], "an empty batch inserts nothing"


def check_insert_many_returns_changes(store: Store) -> None:
    """The answer lists each inserted task's snapshot, in batch order, as ``get`` reads it."""
    batch = [new_task(f"t{i}", due=T0 + 10 - i, priority=i) for i in range(5)]
    changes = store.insert_many(batch)
    assert ids_of(c.task for c in changes) == [t.id for t in batch], (
        f"insert_many answers in batch order (got {ids_of(c.task for c in changes)})"
    )
    for c in changes:
        assert store.get(c.task.id) == c.task, f"insert_many's snapshot of {c.task.id} is stored"
        assert c.dependents == (), "a new task without dependencies changes no other task"


def check_insert_many_on_conflict_invalid(store: Store) -> None:
    expect(
        InvalidScheduleError,
        lambda: store.insert_many([new_task("a")], on_conflict="merge"),  # type: ignore[arg-type]
        "insert_many(on_conflict='merge')",
    )
    assert store.find("a") is None, "a refused batch inserts nothing"


def check_insert_many_conflict_keep(store: Store) -> None:
    first = store.insert(new_task("a", priority=1)).task
    changes = store.insert_many(
        [new_task("n1"), new_task("a", priority=2), new_task("n2")], on_conflict="keep"
    )
    assert ids_of(c.task for c in changes) == ["n1", "n2"], (
        f"a kept task is left out of the answer (got {ids_of(c.task for c in changes)})"
    )
    assert store.get("a") == first, "on_conflict='keep' leaves the existing task unchanged"
    assert store.find("n2") is not None, "the other tasks of the batch are inserted"


def check_insert_many_conflict_replace(store: Store) -> None:
    store.insert(new_task("a", priority=1))
    old = store.transition("a", expected_version=0, state=S.READY, now=T0).task
    changes = store.insert_many(
        [new_task("n1"), new_task("a", priority=2, due=T0 + 5)], on_conflict="replace"
    )
    assert ids_of(c.task for c in changes) == ["n1", "a"], "a replaced task is in the answer"
    got = store.get("a")
    assert got == changes[1].task, f"replace answered {changes[1].task!r} but get reads {got!r}"
    assert (got.priority, got.due, got.state) == (2, T0 + 5, S.PENDING), (
        f"replace overwrites the fields and starts PENDING (got {got!r})"
    )
    assert got.version > old.version, "replace moves the version forward"
    make_running(store, "n1")
    running = store.get("n1")
    expect(
        VersionConflictError,
        lambda: store.insert_many([new_task("n3"), new_task("n1")], on_conflict="replace"),
        "insert_many replacing a RUNNING task",
    )
    assert store.get("n1") == running, "a refused replace leaves the running task unchanged"
    assert store.find("n3") is None, "a refused batch inserts none of its tasks"


def check_insert_many_dependencies(store: Store) -> None:
    """A batch's task may wait on the store's tasks and on earlier tasks of the batch."""
    store.insert_many([new_task("ok"), new_task("bad")])
    finish_as(store, "ok", S.SUCCEEDED)
    finish_as(store, "bad", S.FAILED)
    changes = store.insert_many(
        [
            new_task("x"),
            new_task("y", after=("x", "ok")),
            new_task("z", after=("y",)),
            new_task("f", after=("bad",)),
            new_task("g", after=("f",)),
            new_task("h", after=("ok",)),
        ]
    )
    got = {c.task.id: c.task for c in changes}
    assert list(got) == ["x", "y", "z", "f", "g", "h"], f"batch order (got {list(got)})"
    assert (got["y"].state, got["y"].unmet) == (S.PENDING, 1), (
        f"y waits on x only: ok already succeeded (got {got['y'].state}, {got['y'].unmet})"
    )
    assert (got["z"].state, got["z"].unmet) == (S.PENDING, 1), "z waits on y"
    assert got["f"].state is S.UPSTREAM_FAILED, f"f's upstream failed (got {got['f'].state})"
    assert got["g"].state is S.UPSTREAM_FAILED, (
        f"g waits on f, which started UPSTREAM_FAILED (got {got['g'].state})"
    )
    assert (got["h"].state, got["h"].unmet) == (S.PENDING, 0), "h's upstream succeeded"
    for tid, task in got.items():
        assert store.get(tid) == task, f"insert_many's snapshot of {tid} is stored"
    ch = finish_as(store, "x", S.SUCCEEDED)
    assert ids_of(ch.dependents) == ["y"], f"x's end settles y (got {ids_of(ch.dependents)})"
    assert store.get("y").unmet == 0, "y is released by x's success"
    ch = finish_as(store, "y", S.FAILED)
    assert store.get("z").state is S.UPSTREAM_FAILED, "y's failure reaches z, inserted by a batch"


def check_insert_many_dependency_refused(store: Store) -> None:
    """A missing upstream, or one placed later in the batch, refuses the whole batch."""
    store.insert(new_task("up"))
    e = expect(
        TaskNotFoundError,
        lambda: store.insert_many([new_task("a"), new_task("b", after=("up", "ghost"))]),
        "insert_many with a dependency on a missing task",
    )
    assert "ghost" in str(e), f"the message names the missing upstream (got {e})"
    e = expect(
        InvalidScheduleError,
        lambda: store.insert_many([new_task("c", after=("d",)), new_task("d")]),
        "insert_many with a dependency on a later task of the batch",
    )
    assert "item 1" in str(e), f"the message names the later item (got {e})"
    expect(
        InvalidScheduleError,
        lambda: store.insert_many([new_task("e", after=("e",))]),
        "insert_many with a task depending on itself",
    )
    for tid in "abcde":
        assert store.find(tid) is None, f"a refused batch inserts nothing ({tid} was inserted)"
