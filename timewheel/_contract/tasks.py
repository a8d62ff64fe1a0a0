"""Contract checks for a task's life outside a run: insert, read, transition, promote, queries."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from timewheel._contract.support import (
    FUNC,
    T0,
    S,
    expect,
    finish_as,
    ids_of,
    make_ready,
    make_running,
    new_task,
    noop,
    schedule_record,
)
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    InvalidTransitionError,
    StoreError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.stores.base import (
    Changed,
    Promoted,
    Store,
    SupportsCompactInsert,
    SupportsInspection,
    SupportsPromoteKeys,
)
from timewheel.task import Retry, Task, TaskState


# -- protocol shape ------------------------------------------------------------------------------
def check_protocol_shape(store: Store) -> None:
    assert isinstance(store, Store), f"{type(store).__name__} does not implement the Store protocol"
    assert isinstance(store.durable, bool), f"store.durable must be a bool (got {store.durable!r})"


def check_close_idempotent(store: Store) -> None:
    store.close()
    store.close()  # check_store closes it once more


def check_closed_store_refuses_changes(store: Store) -> None:
    """After ``close()`` every change raises ``StoreError`` and changes nothing."""
    store.insert_many([new_task("a"), new_task("b")])
    make_ready(store, "b")
    store.close()
    changes: list[tuple[str, Callable[[], object]]] = [
        ("insert", lambda: store.insert(new_task("c"))),
        ("insert_many", lambda: store.insert_many([new_task("c")])),
        ("transition", lambda: store.transition("a", expected_version=0, state=S.READY, now=T0)),
        ("promote", lambda: store.promote(["a"], T0)),
        (
            "claim",
            lambda: store.claim("b", expected_version=1, owner="w", lease_expires=T0, now=T0),
        ),
        ("claim_next", lambda: store.claim_next(owner="w", lease_expires=T0, now=T0, limit=1)),
        ("delete", lambda: store.delete("a")),
        ("prune", lambda: store.prune(before=T0 + 99, states=[S.PENDING])),
        ("put_schedule", lambda: store.put_schedule(schedule_record(), first=None)),
    ]
    for what, change in changes:
        expect(StoreError, change, f"{what} after close()")


# -- optional abilities ------------------------------------------------------------------------
def check_compact_insert(store: Store) -> None:
    """A store that offers ``add_pending``/``add_ready`` stores the tasks they describe."""
    if not isinstance(store, SupportsCompactInsert):
        return
    store.add_pending("p", noop, (1, "x"), T0 + 5, T0)
    want = Task(id="p", func=noop, args=(1, "x"), due=T0 + 5, created=T0, updated=T0)
    assert store.get("p") == want, f"add_pending stores {want!r} (got {store.get('p')!r})"
    r = store.add_ready("r", noop, (), T0 - 1, T0)
    assert (r.state, r.version) == (S.READY, 1), f"add_ready stores a promoted task (got {r!r})"
    assert store.get("r") == r, "add_ready returns what get reads"
    for add in (store.add_pending, store.add_ready):
        expect(DuplicateKeyError, partial(add, "p", noop, (), T0 - 1, T0), f"{add.__name__} twice")
    expect(
        ValueError,
        partial(store.add_ready, "late", noop, (), T0 + 1, T0),
        "add_ready of a later due",
    )
    assert store.find("late") is None, "a refused add_ready inserts nothing"


def check_inspection(store: Store) -> None:
    """A store that offers the inspection queries answers them from what it holds."""
    if not isinstance(store, SupportsInspection):
        return
    assert store.oldest_ready_age(T0) is None, "no READY task, no age"
    assert store.recent_failures() == [], "no failures yet"
    store.insert_many([new_task("r", due=T0 - 40), new_task("soon", due=T0 + 30)])
    store.insert_many([new_task("later", due=T0 + 150), new_task("f", due=T0 - 100)])
    make_ready(store, "r")
    make_running(store, "f")
    store.finish("f", owner="w1", state=S.FAILED, now=T0 + 1, error="boom")
    age = store.oldest_ready_age(T0)
    assert age == 40, f"the oldest READY task is 40 s past due (got {age})"
    hist = store.due_histogram(T0, horizon=300, bucket=60)
    want = [(T0, 1), (T0 + 60, 0), (T0 + 120, 1), (T0 + 180, 0), (T0 + 240, 0)]
    assert hist == want, f"due_histogram counts PENDING tasks per bucket (got {hist})"
    failures = store.recent_failures(5)
    assert ids_of(failures) == ["f"], f"recent_failures lists the failed task ({failures})"
    assert failures[0].error == "boom"
    assert store.unresolvable() == {}, "every function of the suite resolves"
    ended = store.ended_since(T0, limit=10)
    failed = [(S.FAILED, T0 - 100, T0, T0 + 1)]  # make_running claims at T0
    assert ended == failed, f"ended_since lists the failure, with its start ({ended})"
    assert store.ended_since(T0 + 2, limit=10) == [], "nothing ended after T0 + 1"
    make_running(store, "r")
    store.finish("r", owner="w1", state=S.SUCCEEDED, now=T0 + 3)
    ended = store.ended_since(T0, limit=10)
    want_ended = [(S.SUCCEEDED, T0 - 40, T0, T0 + 3), (S.FAILED, T0 - 100, T0, T0 + 1)]
    assert ended == want_ended, f"ended_since lists the latest first ({ended})"
    assert store.ended_since(T0, limit=1) == want_ended[:1], "ended_since keeps to its limit"
    ends = store.ended_histogram(T0, horizon=4, bucket=2)
    want_hist = [(T0, {S.FAILED: 1}), (T0 + 2, {S.SUCCEEDED: 1})]
    assert ends == want_hist, f"ended_histogram counts ends per bucket and state ({ends})"
    assert store.ended_histogram(T0 - 60, horizon=60, bucket=30) == [(T0 - 60, {}), (T0 - 30, {})]
    expect(
        InvalidScheduleError,
        lambda: store.ended_histogram(T0, horizon=60, bucket=-1),
        "an ended_histogram with buckets of -1 s",
    )
    # downstream tasks: waiting ones, and ones whose upstream had ended before they were inserted
    store.insert(new_task("d2", after=("soon", "later"), when="all_done"))
    store.insert(new_task("d1", after=("soon",)))
    store.insert(new_task("d3", after=("f",)))
    store.insert(new_task("soon2", due=T0 + 40))
    store.insert(new_task("d4", after=("soon2",)))
    down = store.dependents("soon", limit=10)
    assert ids_of(down) == ["d1", "d2"], f"dependents lists the tasks after 'soon' ({down})"
    assert ids_of(store.dependents("soon", limit=1)) == ["d1"], "dependents keeps to its limit"
    assert ids_of(store.dependents("later", limit=10)) == ["d2"]
    assert ids_of(store.dependents("f", limit=10)) == ["d3"], "an edge settled at insert counts"
    assert store.dependents("r", limit=10) == [], "nothing waits on 'r'"
    make_running(store, "soon")
    store.finish("soon", owner="w1", state=S.SUCCEEDED, now=T0 + 31)
    down = store.dependents("soon", limit=10)
    assert ids_of(down) == ["d1", "d2"], f"dependents outlive the upstream's end ({down})"
    store.delete("d1")
    assert ids_of(store.dependents("soon", limit=10)) == ["d2"], "a deleted dependent is gone"
    expect(
        InvalidScheduleError,
        lambda: store.due_histogram(T0, horizon=60, bucket=0),
        "a histogram with buckets of 0 s",
    )


# -- insert / get / find -------------------------------------------------------------------------
def check_insert_get_roundtrip(store: Store) -> None:
    retry = Retry(
        max_attempts=3,
        backoff="fixed",
        delay=2.5,
        cap=60.0,
        jitter=0.25,
        retry_on=(ValueError, KeyError),
    )
    t = new_task(
        "a",
        due=T0 + 1.5,
        args=(1, "two", [3, 4], {"five": 5.5}, None, True),
        kwargs={"k": [1, {"n": None}], "s": "é"},
        retry=retry,
        priority=7,
        queue="mail",
        timeout=12.5,
        schedule_id=None,
        extra={"tag": "x"},
    )
    ch = store.insert(t)
    assert isinstance(ch, Changed), f"insert must return Changed (got {type(ch).__name__})"
    assert ch.dependents == (), (
        f"a task without dependencies reports no dependents ({ch.dependents})"
    )
    got = store.get("a")
    for name in (
        "id",
        "func",
        "due",
        "priority",
        "queue",
        "timeout",
        "retry",
        "attempts",
        "created",
        "schedule_id",
        "after",
        "unmet",
        "when",
        "error",
        "result",
    ):
        assert getattr(got, name) == getattr(t, name), (
            f"field {name} changed on the way through the store: "
            f"{getattr(t, name)!r} -> {getattr(got, name)!r}"
        )
    assert tuple(got.args) == t.args, f"args changed: {t.args!r} -> {got.args!r}"
    assert dict(got.kwargs) == dict(t.kwargs), f"kwargs changed: {t.kwargs!r} -> {got.kwargs!r}"
    assert dict(got.extra) == {"tag": "x"}, f"extra changed: {got.extra!r}"
    assert got.state is S.PENDING, (
        f"a new task is PENDING at version 0 (got {got.state}, v{got.version})"
    )
    assert got.version == 0, f"a new task is PENDING at version 0 (got {got.state}, v{got.version})"
    assert got.lease_owner is None, "a new task holds no lease"
    assert got.lease_expires is None, "a new task holds no lease"
    assert ch.task == got, f"insert returned {ch.task!r} but get returns {got!r}"
    assert store.find("a") == got, "find and get disagree"


def check_get_missing(store: Store) -> None:
    e = expect(TaskNotFoundError, lambda: store.get("nope"), "get of a missing id")
    assert isinstance(e, LookupError), "TaskNotFoundError is a LookupError"
    assert "nope" in str(e), f"the message names the id (got {e})"
    assert store.find("nope") is None, "find of a missing id returns None"


def check_insert_resets_state_and_version(store: Store) -> None:
    store.insert(new_task("a", state=S.READY, version=7, attempts=0))
    got = store.get("a")
    assert (got.state, got.version) == (S.PENDING, 0), (
        f"insert stores PENDING at version 0 whatever the snapshot says (got {got.state}, "
        f"v{got.version})"
    )


def check_insert_due_task(store: Store) -> None:
    """A task due by the instant it was made (``due <= created``) may be stored READY at once
    (durable stores do: :func:`~timewheel.stores.policy.ready_at_insert`); then at version 0,
    listed as READY work, claimable, and left alone by ``promote`` and ``due_before``. A task not
    yet due by then, an instance of a schedule and a task with unmet upstream tasks are PENDING."""
    due = new_task("due", due=T0 - 20)  # created T0 - 10
    got = store.insert(due).task
    assert got.state in (S.PENDING, S.READY), f"a due task is stored PENDING or READY ({got})"
    assert got == store.get("due"), "insert returns the snapshot it stored"
    assert store.insert(new_task("later", due=T0 - 5)).task.state is S.PENDING, (
        "a task due after the instant it was made is stored PENDING"
    )
    inst = store.insert(new_task("inst", due=T0 - 20, schedule_id="s")).task
    assert inst.state is S.PENDING, (
        "an instance of a schedule is stored PENDING (its wheel fires it)"
    )
    dep = store.insert(new_task("dep", due=T0 - 20, after=("later",))).task
    assert (dep.state, dep.unmet) == (S.PENDING, 1), "a task with unmet upstream tasks is PENDING"
    if got.state is S.READY:
        assert got.version == 0, f"stored READY at version 0 (got v{got.version})"
        assert store.promote(["due"], T0) == [], "promote leaves a READY task alone"
        assert ids_of(store.ready(limit=10)) == ["due"], "a task stored READY is READY work"
        assert "due" not in [e[0] for e in store.due_before(T0 + 60, limit=10)]
        claimed = store.claim("due", expected_version=0, owner="w1", lease_expires=T0 + 30, now=T0)
        assert claimed is not None, "a task stored READY is claimable at version 0"
        assert claimed.state is S.RUNNING, f"claimed: RUNNING (got {claimed.state})"


def check_insert_conflict_error(store: Store) -> None:
    store.insert(new_task("a", priority=1))
    e = expect(DuplicateKeyError, lambda: store.insert(new_task("a", priority=2)), "duplicate id")
    assert "a" in str(e), f"the message names the id (got {e})"
    assert store.get("a").priority == 1, "a refused insert leaves the existing task unchanged"


def check_insert_conflict_keep(store: Store) -> None:
    first = store.insert(new_task("a", priority=1)).task
    ch = store.insert(new_task("a", priority=2), on_conflict="keep")
    assert ch.task == first, f"on_conflict='keep' returns the existing task (got {ch.task!r})"
    assert store.get("a") == first, "on_conflict='keep' leaves the existing task unchanged"


def check_insert_conflict_replace(store: Store) -> None:
    store.insert(new_task("a", priority=1))
    old = store.transition("a", expected_version=0, state=S.READY, now=T0).task
    new = store.insert(new_task("a", priority=2, due=T0 + 5), on_conflict="replace").task
    got = store.get("a")
    assert got == new, f"replace returned {new!r} but get returns {got!r}"
    assert got.priority == 2, "replace overwrites the fields"
    assert got.due == T0 + 5, "replace overwrites the fields"
    assert got.state is S.PENDING, f"a replaced task starts PENDING again (got {got.state})"
    assert got.version > old.version, (
        f"replace must move the version forward ({old.version} -> {got.version}) so holders of "
        "the old snapshot lose their compare-and-swap"
    )
    expect(
        VersionConflictError,
        lambda: store.transition("a", expected_version=old.version, state=S.RUNNING, now=T0),
        "a CAS with the replaced task's version",
    )


def check_insert_replace_running_refused(store: Store) -> None:
    store.insert(new_task("a"))
    running = make_running(store, "a")
    expect(
        VersionConflictError,
        lambda: store.insert(new_task("a", priority=9), on_conflict="replace"),
        "replace of a RUNNING task",
    )
    assert store.get("a") == running, "a refused replace leaves the running task unchanged"


def check_insert_on_conflict_invalid(store: Store) -> None:
    expect(
        InvalidScheduleError,
        lambda: store.insert(new_task("a"), on_conflict="merge"),  # type: ignore[arg-type]
        "on_conflict='merge'",
    )
    assert store.find("a") is None, "a refused insert inserts nothing"


# -- transition --------------------------------------------------------------------------------
def check_transition_cas(store: Store) -> None:
    store.insert(new_task("a"))
    ch = store.transition("a", expected_version=0, state=S.READY, now=T0 + 1)
    assert ch.task.state is S.READY, (
        f"transition moves state and version + 1 (got {ch.task.state}, v{ch.task.version})"
    )
    assert ch.task.version == 1, (
        f"transition moves state and version + 1 (got {ch.task.state}, v{ch.task.version})"
    )
    assert ch.task.updated == T0 + 1, f"transition sets updated = now (got {ch.task.updated})"
    assert store.get("a") == ch.task, "transition's result is what get returns"
    e = expect(
        VersionConflictError,
        lambda: store.transition("a", expected_version=0, state=S.CANCELLED, now=T0),
        "a CAS with a stale version",
    )
    assert isinstance(e, RuntimeError), "VersionConflictError is a RuntimeError"
    assert store.get("a") == ch.task, "a lost CAS changes nothing"


def check_transition_forbidden(store: Store) -> None:
    store.insert(new_task("a"))
    expect(
        InvalidTransitionError,
        lambda: store.transition("a", expected_version=0, state=S.RUNNING, now=T0),
        "PENDING -> RUNNING",
    )
    expect(
        InvalidTransitionError,
        lambda: store.transition("a", expected_version=0, state=S.SUCCEEDED, now=T0),
        "PENDING -> SUCCEEDED",
    )
    got = store.get("a")
    assert (got.state, got.version) == (S.PENDING, 0), "a refused move changes nothing"
    store.transition("a", expected_version=0, state=S.CANCELLED, now=T0)
    for new in TaskState:
        expect(
            InvalidTransitionError,
            partial(store.transition, "a", expected_version=1, state=new, now=T0),
            f"CANCELLED -> {new.value} (terminal states are absorbing)",
        )


def check_transition_missing(store: Store) -> None:
    expect(
        TaskNotFoundError,
        lambda: store.transition("nope", expected_version=0, state=S.READY, now=T0),
        "transition of a missing id",
    )


def check_transition_sets_changes(store: Store) -> None:
    store.insert(new_task("a"))
    make_running(store, "a", owner="w1")
    v = store.get("a").version
    t = store.transition(
        "a",
        expected_version=v,
        state=S.PENDING,
        now=T0 + 2,
        due=T0 + 60,
        error="lease expired",
        lease_owner=None,
        lease_expires=None,
    ).task
    assert (t.state, t.due, t.error) == (S.PENDING, T0 + 60, "lease expired"), (
        f"the changes are applied in the same swap (got {t.state}, {t.due}, {t.error!r})"
    )
    assert t.lease_owner is None, "the lease fields were cleared"
    assert t.lease_expires is None, "the lease fields were cleared"
    assert t.attempts == 1, "attempts are kept across a re-queue"
    assert store.get("a") == t, "get returns the changed task"


def check_transition_refuses_bad_changes(store: Store) -> None:
    """Every store refuses the same changes, names the field, and leaves the task as it was."""
    store.insert(new_task("a"))
    before = store.get("a")
    managed = ["id", "version", "updated", "started", "after", "unmet", "when", "no_such_field"]
    for name in managed:
        e = expect(
            TypeError,
            lambda name=name: store.transition(  # type: ignore[misc]
                "a", expected_version=0, state=S.READY, now=T0, **{name: before.id}
            ),
            f"transition setting {name!r}",
        )
        assert repr(name) in str(e), f"the error names the field {name!r} (got {e})"
    wrong = {"priority": "high", "attempts": 1.5, "queue": None, "due": float("nan"), "error": 3}
    for name, value in wrong.items():
        e = expect(
            InvalidScheduleError,
            lambda name=name, value=value: store.transition(  # type: ignore[misc]
                "a", expected_version=0, state=S.READY, now=T0, **{name: value}
            ),
            f"transition setting {name}={value!r}",
        )
        assert name in str(e), f"the error names the field {name!r} (got {e})"
    assert store.get("a") == before, "a refused transition changes nothing"


def check_version_increments_by_one(store: Store) -> None:
    store.insert(new_task("a"))
    seen = [store.get("a").version]
    store.promote(["a"], T0)
    seen.append(store.get("a").version)
    store.claim("a", expected_version=seen[-1], owner="w", lease_expires=T0 + 10, now=T0)
    seen.append(store.get("a").version)
    store.heartbeat("a", owner="w", lease_expires=T0 + 20, now=T0 + 1)
    seen.append(store.get("a").version)
    store.finish("a", owner="w", state=S.PENDING, now=T0 + 2, due=T0 + 5)
    seen.append(store.get("a").version)
    store.transition("a", expected_version=seen[-1], state=S.CANCELLED, now=T0 + 3)
    seen.append(store.get("a").version)
    assert seen == list(range(6)), f"each change adds exactly 1 to version (saw {seen})"


# -- promote -----------------------------------------------------------------------------------
def check_promote(store: Store) -> None:
    store.insert_many(
        [
            new_task("due", due=T0 - 5),
            new_task("now", due=T0),
            new_task("later", due=T0 + 1),
            new_task("done", due=T0 - 5),
        ]
    )
    store.transition("done", expected_version=0, state=S.CANCELLED, now=T0)
    store.insert(new_task("blocked", due=T0 - 5, after=("later",)))
    moved = store.promote(["due", "now", "later", "done", "blocked", "ghost"], T0)
    assert sorted(ids_of(moved)) == ["due", "now"], (
        f"promote moves PENDING tasks due by now with unmet == 0 only (moved {ids_of(moved)})"
    )
    for t in moved:
        assert t.state is S.READY, f"a promoted task is READY at version 1, updated now (got {t!r})"
        assert t.version == 1, f"a promoted task is READY at version 1, updated now (got {t!r})"
        assert t.updated == T0, f"a promoted task is READY at version 1, updated now (got {t!r})"
        assert store.get(t.id) == t, "promote's result is what get returns"
    assert store.get("later").state is S.PENDING, "a task not yet due stays PENDING"
    assert store.get("blocked").state is S.PENDING, "a task with unmet dependencies stays PENDING"
    assert store.promote(["due", "now"], T0 + 10) == [], "promoting READY tasks again moves none"


def check_promote_successors(store: Store) -> None:
    store.insert(new_task("s@1", due=T0, schedule_id="s"))
    store.insert(new_task("s@2", due=T0 + 60, schedule_id="s", priority=3))
    moved = store.promote(
        ["s@1"],
        T0,
        successors=[
            new_task("s@2", due=T0 + 60, schedule_id="s", priority=9),
            new_task("s@3", due=T0 + 120, schedule_id="s"),
        ],
    )
    assert ids_of(moved) == ["s@1"], f"promote returns the moved tasks only (got {ids_of(moved)})"
    assert store.get("s@2").priority == 3, "a successor whose id exists is ignored"
    s3 = store.get("s@3")
    assert (s3.state, s3.version, s3.schedule_id) == (S.PENDING, 0, "s"), (
        f"a new successor is inserted PENDING at version 0 (got {s3!r})"
    )
    store.promote([], T0, successors=[new_task("s@4", due=T0 + 180)])
    assert store.find("s@4") is not None, "successors are inserted even when nothing moves"


def check_promote_keys(store: Store) -> None:
    """A store that offers ``promote_keys`` moves what ``promote`` would, returning the keys."""
    if not isinstance(store, SupportsPromoteKeys):
        return
    store.insert_many(
        [
            new_task("due", due=T0 - 5, queue="q"),
            new_task("now", due=T0),
            new_task("later", due=T0 + 1),
            new_task("done", due=T0 - 5),
        ]
    )
    store.transition("done", expected_version=0, state=S.CANCELLED, now=T0)
    store.insert(new_task("blocked", due=T0 - 5, after=("later",)))
    moved = store.promote_keys(
        ["now", "ghost", "due", "later", "done", "blocked"],
        T0,
        successors=[new_task("next", due=T0 + 60), new_task("later", due=T0 + 9, priority=4)],
    )
    assert moved == [Promoted("now", 1, "default"), Promoted("due", 1, "q")], (
        f"promote_keys returns (id, version, queue) of the moved tasks in the order asked "
        f"(got {moved})"
    )
    for key in moved:
        t = store.get(key.id)
        assert (t.state, t.version, t.updated) == (S.READY, 1, T0), (
            f"a task promote_keys moved is READY at version 1, updated now (got {t!r})"
        )
    assert store.get("later").state is S.PENDING, "a task not yet due stays PENDING"
    assert store.get("later").priority == 0, "a successor whose id exists is ignored"
    assert store.get("blocked").state is S.PENDING, "a task with unmet dependencies stays PENDING"
    assert store.find("next") is not None, "promote_keys inserts the successors"
    assert store.promote_keys(["due", "now"], T0 + 10) == [], "READY tasks are not moved again"


# -- queries -----------------------------------------------------------------------------------
def check_due_before(store: Store) -> None:
    store.insert_many(
        [
            new_task("c", due=T0 + 3),
            new_task("a", due=T0 + 1),
            new_task("b", due=T0 + 2),
            new_task("edge", due=T0 + 10),
            new_task("r", due=T0),
            new_task("x", due=T0 - 1),
        ]
    )
    store.insert(new_task("blocked", due=T0 - 2, after=("c",)))
    make_ready(store, "r")
    store.transition("x", expected_version=0, state=S.CANCELLED, now=T0)
    got = store.due_before(T0 + 10, limit=100)
    assert got == [("a", T0 + 1, None), ("b", T0 + 2, None), ("c", T0 + 3, None)], (
        "due_before lists PENDING tasks with unmet == 0 and due < until, earliest first "
        f"(got {got})"
    )
    assert store.due_before(T0 + 10, limit=2) == [("a", T0 + 1, None), ("b", T0 + 2, None)], (
        "limit applies"
    )
    assert store.due_before(T0 + 11, limit=100)[-1] == ("edge", T0 + 10, None)
    assert store.due_before(T0, limit=100) == [], "nothing is due before T0"
    store.insert(new_task("s@1", due=T0 + 20, schedule_id="s"))
    store.insert(new_task("user@example.com", due=T0 + 21))
    assert store.due_before(T0 + 22, limit=100)[-2:] == [
        ("s@1", T0 + 20, "s"),
        ("user@example.com", T0 + 21, None),
    ], "due_before names the schedule of a recurring instance, by its field, not its id"


def check_ready_listing(store: Store) -> None:
    store.insert_many(
        [
            new_task("a", due=T0 - 1),
            new_task("b", priority=2),
            new_task("c", queue="q"),
            new_task("p", due=T0 + 100),
        ]
    )
    make_ready(store, "a", "b", "c")
    got = store.ready(limit=10)
    assert ids_of(got) == ["b", "a", "c"], f"ready(): priority, then due (got {ids_of(got)})"
    assert all(t.state is S.READY for t in got)
    assert ids_of(store.ready(limit=1)) == ["b"], "limit applies"
    assert ids_of(store.ready(limit=10, queues=["q"])) == ["c"], "queues filter"
    assert store.get("b").state is S.READY, "ready() only reads"


def check_expired_leases(store: Store) -> None:
    store.insert_many([new_task(i) for i in ("a", "b", "c", "d")])
    make_running(store, "a", lease=T0 + 20)
    make_running(store, "b", lease=T0 + 10)
    make_running(store, "c", lease=T0 + 50)
    got = store.expired_leases(T0 + 30, limit=10)
    assert ids_of(got) == ["b", "a"], (
        f"expired_leases: RUNNING tasks with lease_expires < now, soonest first (got {ids_of(got)})"
    )
    assert ids_of(store.expired_leases(T0 + 30, limit=1)) == ["b"], "limit applies"
    assert store.expired_leases(T0 + 10, limit=10) == [], "a lease expiring at now is not expired"


def check_count_by_state(store: Store) -> None:
    assert {s: n for s, n in store.count_by_state().items() if n} == {}, "an empty store counts 0"
    store.insert_many([new_task(f"t{i}") for i in range(6)])
    make_ready(store, "t0", "t1", "t2")
    make_running(store, "t2")
    store.transition("t3", expected_version=0, state=S.CANCELLED, now=T0)
    got = {s: n for s, n in store.count_by_state().items() if n}
    assert got == {S.PENDING: 2, S.READY: 2, S.RUNNING: 1, S.CANCELLED: 1}, f"counts: {got}"
    assert all(isinstance(s, TaskState) for s in store.count_by_state()), "keys are TaskState"


def check_tasks_listing(store: Store) -> None:
    store.insert_many(
        [
            new_task("s2", due=T0 + 2, schedule_id="s"),
            new_task("s1", due=T0 + 1, schedule_id="s"),
            new_task("o", due=T0),
            new_task("x", due=T0 + 3),
        ]
    )
    make_ready(store, "o")
    assert ids_of(store.tasks()) == ["o", "s1", "s2", "x"], "tasks(): earliest due first"
    assert ids_of(store.tasks(state=S.READY)) == ["o"], "state= filters"
    assert ids_of(store.tasks(state=[S.READY, S.PENDING], limit=2)) == ["o", "s1"], (
        "state= takes several states; limit applies"
    )
    assert ids_of(store.tasks(schedule_id="s")) == ["s1", "s2"], "schedule_id= filters"
    assert ids_of(store.tasks(state=S.READY, schedule_id="s")) == [], "filters combine"
    assert store.tasks(state=[]) == [], "no states, no tasks"


def check_delete(store: Store) -> None:
    store.insert(new_task("a"))
    assert store.delete("a") is True, "delete returns True for an existing task"
    assert store.find("a") is None, "a deleted task is gone"
    assert store.delete("a") is False, "delete returns False for a missing task"
    store.insert(new_task("a", priority=4))
    assert store.get("a").priority == 4, "a deleted id can be used again"


def check_prune(store: Store) -> None:
    store.insert_many([new_task(i) for i in ("old", "new", "live", "oldfail")])
    store.transition("old", expected_version=0, state=S.CANCELLED, now=T0 + 1)
    store.transition("new", expected_version=0, state=S.CANCELLED, now=T0 + 100)
    make_running(store, "oldfail")
    store.finish("oldfail", owner="w1", state=S.FAILED, now=T0 + 2)
    assert store.prune(before=T0 + 50, states=[S.FAILED]) == 1, "states= limits what is pruned"
    assert store.find("oldfail") is None
    assert store.find("old") is not None
    assert store.prune(before=T0 + 50) == 1, "prune deletes terminal tasks updated before *before*"
    assert store.find("old") is None, "the old terminal task is gone"
    assert store.find("new") is not None, "a recently finished task is kept"
    assert store.find("live") is not None, "a non-terminal task is kept"


def check_prune_bounded(store: Store) -> None:
    """``prune(limit=n)`` deletes at most *n* tasks a call; ``keep=`` ids are never deleted."""
    ids = [f"t{i}" for i in range(7)]
    store.insert_many([new_task(i) for i in [*ids, "recent", "live"]])
    for i in ids:
        store.transition(i, expected_version=0, state=S.CANCELLED, now=T0 + 1)
    store.transition("recent", expected_version=0, state=S.CANCELLED, now=T0 + 100)
    kept = {"t0", "t3"}
    counts = []
    while True:
        n = store.prune(before=T0 + 50, limit=2, keep=kept)
        assert 0 <= n <= 2, f"prune(limit=2) deleted {n} tasks"
        if n == 0:
            break
        counts.append(n)
        assert len(counts) <= 5, "bounded prune calls make progress past the kept tasks"
    assert sum(counts) == 5, f"the five expired tasks not kept are deleted (calls: {counts})"
    assert sorted(ids_of(store.tasks(state=S.CANCELLED))) == ["recent", "t0", "t3"], (
        "kept ids and a recently finished task stay"
    )
    assert store.find("live") is not None, "a non-terminal task is kept"
    assert store.prune(before=T0 + 50, limit=0) == 0, "limit=0 deletes nothing"
    assert store.prune(before=T0 + 50, keep=("t0",)) == 1, "keep= applies without a limit too"
    assert store.find("t0") is not None


def check_count_by_queue(store: Store) -> None:
    """A store that offers inspection counts its tasks per queue and state, every state and
    queue it holds, through every kind of change."""
    if not isinstance(store, SupportsInspection):
        return
    assert store.count_by_queue() == {}, "an empty store has no queue"
    store.insert_many([new_task(f"d{i}") for i in range(3)])
    store.insert_many([new_task(f"m{i}", queue="mail") for i in range(4)])
    store.insert(new_task("r1", queue="reports"))
    if isinstance(store, SupportsCompactInsert):
        store.add_pending("lite", noop, (), T0, T0)  # a compact task is in the default queue
    make_ready(store, "d0", "m0", "m1", "m2")
    make_running(store, "m0")
    store.finish("m0", owner="w1", state=S.FAILED, now=T0 + 1, error="boom")
    make_running(store, "m1")
    store.transition("m2", expected_version=1, state=S.CANCELLED, now=T0)
    store.delete("d2")
    # a change of queue in a transition, and an insert that replaces a task in another queue
    d1 = store.get("d1")
    store.transition("d1", expected_version=d1.version, state=S.READY, now=T0, queue="mail")
    store.insert(new_task("m3", queue="reports"), on_conflict="replace")
    lite = 1 if isinstance(store, SupportsCompactInsert) else 0
    want = {
        "default": {S.PENDING: 0 + lite, S.READY: 1},
        "mail": {S.FAILED: 1, S.RUNNING: 1, S.CANCELLED: 1, S.READY: 1},
        "reports": {S.PENDING: 2},
    }
    want = {q: {s: n for s, n in by.items() if n} for q, by in want.items()}
    got = store.count_by_queue()
    assert got == want, f"count_by_queue counts per queue and state (got {got}, want {want})"
    totals: dict[TaskState, int] = {}
    for by in got.values():
        for s, n in by.items():
            totals[s] = totals.get(s, 0) + n
    assert totals == store.count_by_state(), "count_by_queue adds up to count_by_state"


def check_by_function(store: Store) -> None:
    """A store that offers inspection finds tasks by the start of their function reference,
    in any state, by reference then id, within a limit."""
    if not isinstance(store, SupportsInspection):
        return
    other = "timewheel._contract.support:noop"
    store.insert_many([new_task("b2"), new_task("a1"), new_task("c3", func=other)])
    store.insert_many([new_task("z9", due=T0 + 99), new_task("x", func="timewheel.task:Retry")])
    make_running(store, "a1")
    make_ready(store, "b2")
    finish_as(store, "c3", TaskState.SUCCEEDED)  # one of each: RUNNING, READY, ended, PENDING
    found = store.by_function(FUNC, limit=10)
    assert ids_of(found) == ["a1", "b2", "z9"], f"an exact reference, by id ({ids_of(found)})"
    assert found[0] == store.get("a1"), "by_function returns the stored tasks"
    found = store.by_function("timewheel._contract", limit=10)
    # "timewheel._contract.support:noop" sorts before "timewheel._contract:noop" ("." < ":")
    assert ids_of(found) == ["c3", "a1", "b2", "z9"], (
        f"a prefix: by function reference, then id ({ids_of(found)})"
    )
    assert ids_of(store.by_function("timewheel._contract", limit=2)) == ["c3", "a1"], (
        "by_function keeps to its limit"
    )
    assert ids_of(store.by_function("timewheel.", limit=9)) == ["c3", "a1", "b2", "z9", "x"]
    assert store.by_function("timewheel._contract:noo", limit=0) == []
    for missing in ("noop", "timewheel._contract:noopx", "timewheel._contracu", "\U0010ffff"):
        assert store.by_function(missing, limit=10) == [], f"nothing starts with {missing!r}"


def check_retrying(store: Store) -> None:
    """A store that offers inspection lists the PENDING tasks that ran before, soonest first."""
    if not isinstance(store, SupportsInspection):
        return
    store.insert_many([new_task("a", due=T0 - 9), new_task("b", due=T0 - 8), new_task("c")])
    assert store.retrying(10) == [], "nothing ran yet"
    for task_id, again in (("a", T0 + 50), ("b", T0 + 20)):
        make_running(store, task_id)
        store.finish(task_id, owner="w1", state=S.PENDING, now=T0 + 1, due=again, error="boom")
    waiting = store.retrying(10)
    assert ids_of(waiting) == ["b", "a"], f"retrying lists both, soonest due first ({waiting})"
    assert (waiting[0].error, waiting[0].attempts) == ("boom", 1), f"as stored ({waiting[0]!r})"
    assert ids_of(store.retrying(1)) == ["b"], "retrying keeps to its limit"
    make_ready(store, "b", now=T0 + 20)
    assert ids_of(store.retrying(10)) == ["a"], "a promoted retry has left the list"
    a = store.get("a")
    store.transition("a", expected_version=a.version, state=S.CANCELLED, now=T0 + 2)
    assert store.retrying(10) == [], "a cancelled retry has left the list"
