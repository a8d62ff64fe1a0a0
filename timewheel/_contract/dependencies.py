"""Contract checks for dependencies: counting at insert and settling, transitively, at the end."""

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
from timewheel.errors import TaskNotFoundError
from timewheel.stores.base import Store
from timewheel.task import Task, TaskState


def check_dep_unknown_upstream(store: Store) -> None:
    store.insert(new_task("up"))
    e = expect(
        TaskNotFoundError,
        lambda: store.insert(new_task("d", after=("up", "ghost"))),
        "a dependency on a missing task",
    )
    assert "ghost" in str(e), f"the message names the missing upstream (got {e})"
    assert store.find("d") is None, "nothing is inserted"


def check_dep_unmet_at_insert(store: Store) -> None:
    store.insert_many([new_task(i) for i in ("p1", "p2", "ok", "bad", "ok2")])
    for i in ("ok", "ok2"):
        make_running(store, i)
        store.finish(i, owner="w1", state=S.SUCCEEDED, now=T0)
    make_running(store, "bad")
    store.finish("bad", owner="w1", state=S.FAILED, now=T0)

    def ins(tid: str, after: tuple[str, ...], when: str) -> Task:
        return store.insert(new_task(tid, after=after, when=when)).task

    cases: list[tuple[str, tuple[str, ...], str, TaskState, int]] = [
        ("d1", ("p1", "p2"), "all_success", S.PENDING, 2),
        ("d2", ("p1", "ok"), "all_success", S.PENDING, 1),
        ("d3", ("ok", "ok2"), "all_success", S.PENDING, 0),
        ("d4", ("p1", "bad"), "all_success", S.UPSTREAM_FAILED, -1),
        ("d5", ("p1", "bad"), "all_done", S.PENDING, 1),
        ("d6", ("p1", "bad"), "any_failed", S.PENDING, 0),
        ("d7", ("bad", "ok"), "any_failed", S.PENDING, 0),
        ("d8", ("ok", "bad"), "any_failed", S.PENDING, 0),
        ("d9", ("ok", "ok2"), "any_failed", S.CANCELLED, -1),
        ("d10", ("ok", "p1"), "any_failed", S.PENDING, 1),
        ("d11", ("p1", "p1"), "all_success", S.PENDING, 1),
    ]
    for tid, after, when, state, unmet in cases:
        t = ins(tid, after, when)
        assert t.state is state, f"{when} after {after}: inserted {t.state}, expected {state}"
        if unmet >= 0:
            assert t.unmet == unmet, f"{when} after {after}: unmet {t.unmet}, expected {unmet}"
        assert store.get(tid) == t, "insert's result is what get returns"
    assert store.get("d4").error, "an UPSTREAM_FAILED task says why"
    due = [i for i, *_ in store.due_before(T0 + 1, limit=100)]
    assert "d3" in due, f"only tasks with unmet == 0 are due (got {due})"
    assert "d6" in due, f"only tasks with unmet == 0 are due (got {due})"
    assert "d1" not in due, f"only tasks with unmet == 0 are due (got {due})"


def check_dep_all_success(store: Store) -> None:
    store.insert_many([new_task("a"), new_task("b")])
    store.insert(new_task("c", after=("a", "b")))
    store.insert(new_task("d", after=("c",)))
    ch = finish_as(store, "a", S.SUCCEEDED)
    assert ids_of(ch.dependents) == ["c"], f"finishing a reports its dependents ({ch.dependents})"
    c = store.get("c")
    assert (c.state, c.unmet) == (S.PENDING, 1), f"c waits for b now (got {c.state}, {c.unmet})"
    assert ch.dependents[0] == c, "Changed.dependents holds the dependents as stored"
    ch = finish_as(store, "b", S.SUCCEEDED)
    c = store.get("c")
    assert (c.state, c.unmet) == (S.PENDING, 0), "c may run now"
    assert ids_of(store.promote(["c"], T0 + 5)) == ["c"], "a released dependent can be promoted"
    ch = finish_as(store, "c", S.FAILED)
    d = store.get("d")
    assert d.state is S.UPSTREAM_FAILED, f"a failed upstream fails d ({d!r})"
    assert d.error, f"a failed upstream fails d ({d!r})"
    assert ids_of(ch.dependents) == ["d"]


def check_dep_transitive(store: Store) -> None:
    store.insert(new_task("a"))
    store.insert(new_task("b", after=("a",)))
    store.insert(new_task("c", after=("b",)))
    store.insert(new_task("e", after=("b",), when="all_done"))
    store.insert(new_task("f", after=("c",), when="any_failed"))
    ch = finish_as(store, "a", S.FAILED)
    got = {t.id: t.state for t in ch.dependents}
    assert got.get("b") is S.UPSTREAM_FAILED, f"failure settles dependents transitively (got {got})"
    assert got.get("c") is S.UPSTREAM_FAILED, f"failure settles dependents transitively (got {got})"
    assert "e" in got, "all_done counts an UPSTREAM_FAILED upstream as done"
    assert got["e"] is S.PENDING, "all_done counts an UPSTREAM_FAILED upstream as done"
    assert store.get("e").unmet == 0, "all_done counts an UPSTREAM_FAILED upstream as done"
    assert "f" in got, "any_failed is released by an UPSTREAM_FAILED upstream"
    assert store.get("f").unmet == 0, "any_failed is released by an UPSTREAM_FAILED upstream"
    assert store.get("f").state is S.PENDING, (
        "any_failed is released by an UPSTREAM_FAILED upstream"
    )
    for t in ch.dependents:
        assert store.get(t.id) == t, f"reported dependent {t.id} is what get returns"


def check_dep_all_done(store: Store) -> None:
    store.insert_many([new_task("a"), new_task("b")])
    store.insert(new_task("c", after=("a", "b"), when="all_done"))
    finish_as(store, "a", S.FAILED)
    assert store.get("c").unmet == 1
    assert store.get("c").state is S.PENDING
    store.transition("b", expected_version=0, state=S.CANCELLED, now=T0)
    c = store.get("c")
    assert (c.state, c.unmet) == (S.PENDING, 0), f"all_done: any end counts down ({c!r})"


def check_dep_any_failed(store: Store) -> None:
    store.insert_many([new_task("a"), new_task("b"), new_task("x"), new_task("y")])
    store.insert(new_task("c", after=("a", "b"), when="any_failed"))
    store.insert(new_task("z", after=("x", "y"), when="any_failed"))
    finish_as(store, "a", S.SUCCEEDED)
    assert store.get("c").unmet == 1, "a success counts down"
    ch = finish_as(store, "b", S.SUCCEEDED)
    c = store.get("c")
    assert c.state is S.CANCELLED, f"every upstream succeeded: cancelled ({c!r})"
    assert c.error, f"every upstream succeeded: cancelled ({c!r})"
    assert ids_of(ch.dependents) == ["c"]
    finish_as(store, "x", S.TIMED_OUT)
    z = store.get("z")
    assert (z.state, z.unmet) == (S.PENDING, 0), f"one failure releases any_failed ({z!r})"
    finish_as(store, "y", S.SUCCEEDED)
    z = store.get("z")
    assert (z.state, z.unmet) == (S.PENDING, 0), f"a later success changes nothing ({z!r})"


def check_dep_settled_by_transition(store: Store) -> None:
    store.insert(new_task("a"))
    store.insert(new_task("b", after=("a",)))
    ch = store.transition("a", expected_version=0, state=S.CANCELLED, now=T0 + 1)
    assert ids_of(ch.dependents) == ["b"], "a terminal transition settles dependents"
    b = store.get("b")
    assert b.state is S.UPSTREAM_FAILED, (
        f"the dependent moved with version + 1, updated now ({b!r})"
    )
    assert b.version == 1, f"the dependent moved with version + 1, updated now ({b!r})"
    assert b.updated == T0 + 1, f"the dependent moved with version + 1, updated now ({b!r})"
    store.insert(new_task("c"))
    store.insert(new_task("d", after=("c",)))
    ch = store.transition("c", expected_version=0, state=S.READY, now=T0)
    assert ch.dependents == (), "a non-terminal move settles nothing"
    assert store.get("d").unmet == 1


def check_dep_cancelled_dependent_ignored(store: Store) -> None:
    store.insert(new_task("a"))
    store.insert(new_task("b", after=("a",)))
    store.transition("b", expected_version=0, state=S.CANCELLED, now=T0)
    ch = finish_as(store, "a", S.SUCCEEDED)
    assert ch.dependents == (), f"a dependent already ended is left alone ({ch.dependents})"
    assert store.get("b").state is S.CANCELLED


def check_dep_deleted_upstream_forgotten(store: Store) -> None:
    """Deleting an upstream task forgets who waits on it: a new task under its id releases none."""
    store.insert(new_task("up"))
    store.insert(new_task("d", after=("up",)))
    assert store.delete("up") is True
    store.insert(new_task("up"))
    ch = finish_as(store, "up", S.SUCCEEDED)
    assert ch.dependents == (), f"the new 'up' has no dependents ({ch.dependents})"
    got = store.get("d")
    assert (got.state, got.unmet) == (S.PENDING, 1), f"'d' still waits ({got.state}, {got.unmet})"
