"""The store contract suite: one set of checks every :class:`~timewheel.stores.base.Store` passes.

Each check is a plain function ``check_xxx(store)`` that takes a fresh, empty store and uses plain
``assert`` statements with messages; nothing here needs pytest. ``timewheel.testing.check_store``
runs them all against a third-party store, and timewheel's own tests parametrize them over every
bundled store (``tests/test_store_contract.py``).

The checks use only values a durable store can keep: function references as strings
(``"timewheel._contract:noop"``), JSON-native arguments (lists, dicts with string keys, numbers,
strings, ``None``), and times that are whole microseconds (durable stores may round to them).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    InvalidTransitionError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.stores.base import Changed, Store
from timewheel.task import Retry, ScheduleRecord, Task, TaskState

__all__ = ["CHECKS", "FUNC", "T0", "noop"]

S = TaskState
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
"""The instant the checks start at (epoch seconds)."""
FUNC = "timewheel._contract:noop"
"""The function reference every task of the suite carries."""


def noop(*args: Any, **kwargs: Any) -> None:
    """The importable function the checks' tasks refer to. Does nothing."""


def _task(task_id: str, due: float = T0, **kw: Any) -> Task:
    kw.setdefault("func", FUNC)
    kw.setdefault("created", T0 - 10)
    return Task(id=task_id, due=due, **kw)


def _expect(exc: type[BaseException], fn: Callable[[], object], what: str) -> BaseException:
    """Call *fn* and return the exception of type *exc* it raises; fail if it raises none."""
    try:
        out = fn()
    except exc as e:
        return e
    raise AssertionError(f"{what}: expected {exc.__name__}, but it returned {out!r}")


def _ready(store: Store, *ids: str, now: float = T0) -> list[Task]:
    """Promote the given (inserted, due) tasks to READY; assert they all moved."""
    moved = store.promote(list(ids), now)
    assert sorted(t.id for t in moved) == sorted(ids), (
        f"promote({list(ids)}) moved {[t.id for t in moved]}"
    )
    return moved


def _running(store: Store, task_id: str, owner: str = "w1", lease: float = T0 + 30) -> Task:
    t = store.get(task_id)
    if t.state is S.PENDING:
        _ready(store, task_id, now=max(T0, t.due))
        t = store.get(task_id)
    c = store.claim(task_id, expected_version=t.version, owner=owner, lease_expires=lease, now=T0)
    assert c is not None, f"claim of READY task {task_id!r} at its version returned None"
    return c


def _ids(tasks: Iterable[Task]) -> list[str]:
    return [t.id for t in tasks]


# -- protocol shape ------------------------------------------------------------------------------
def check_protocol_shape(store: Store) -> None:
    assert isinstance(store, Store), f"{type(store).__name__} does not implement the Store protocol"
    assert isinstance(store.durable, bool), f"store.durable must be a bool (got {store.durable!r})"


def check_close_idempotent(store: Store) -> None:
    store.close()
    store.close()  # check_store closes it once more


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
    t = _task(
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
    e = _expect(TaskNotFoundError, lambda: store.get("nope"), "get of a missing id")
    assert isinstance(e, LookupError), "TaskNotFoundError is a LookupError"
    assert "nope" in str(e), f"the message names the id (got {e})"
    assert store.find("nope") is None, "find of a missing id returns None"


def check_insert_resets_state_and_version(store: Store) -> None:
    store.insert(_task("a", state=S.READY, version=7, attempts=0))
    got = store.get("a")
    assert (got.state, got.version) == (S.PENDING, 0), (
        f"insert stores PENDING at version 0 whatever the snapshot says (got {got.state}, "
        f"v{got.version})"
    )


def check_insert_conflict_error(store: Store) -> None:
    store.insert(_task("a", priority=1))
    e = _expect(DuplicateKeyError, lambda: store.insert(_task("a", priority=2)), "duplicate id")
    assert "a" in str(e), f"the message names the id (got {e})"
    assert store.get("a").priority == 1, "a refused insert leaves the existing task unchanged"


def check_insert_conflict_keep(store: Store) -> None:
    first = store.insert(_task("a", priority=1)).task
    ch = store.insert(_task("a", priority=2), on_conflict="keep")
    assert ch.task == first, f"on_conflict='keep' returns the existing task (got {ch.task!r})"
    assert store.get("a") == first, "on_conflict='keep' leaves the existing task unchanged"


def check_insert_conflict_replace(store: Store) -> None:
    store.insert(_task("a", priority=1))
    old = store.transition("a", expected_version=0, state=S.READY, now=T0).task
    new = store.insert(_task("a", priority=2, due=T0 + 5), on_conflict="replace").task
    got = store.get("a")
    assert got == new, f"replace returned {new!r} but get returns {got!r}"
    assert got.priority == 2, "replace overwrites the fields"
    assert got.due == T0 + 5, "replace overwrites the fields"
    assert got.state is S.PENDING, f"a replaced task starts PENDING again (got {got.state})"
    assert got.version > old.version, (
        f"replace must move the version forward ({old.version} -> {got.version}) so holders of "
        "the old snapshot lose their compare-and-swap"
    )
    _expect(
        VersionConflictError,
        lambda: store.transition("a", expected_version=old.version, state=S.RUNNING, now=T0),
        "a CAS with the replaced task's version",
    )


def check_insert_replace_running_refused(store: Store) -> None:
    store.insert(_task("a"))
    running = _running(store, "a")
    _expect(
        VersionConflictError,
        lambda: store.insert(_task("a", priority=9), on_conflict="replace"),
        "replace of a RUNNING task",
    )
    assert store.get("a") == running, "a refused replace leaves the running task unchanged"


def check_insert_on_conflict_invalid(store: Store) -> None:
    _expect(
        InvalidScheduleError,
        lambda: store.insert(_task("a"), on_conflict="merge"),  # type: ignore[arg-type]
        "on_conflict='merge'",
    )
    assert store.find("a") is None, "a refused insert inserts nothing"


def check_insert_many_atomic(store: Store) -> None:
    store.insert_many([_task("a"), _task("b", due=T0 + 1)])
    assert {t.id for t in store.tasks()} == {"a", "b"}, "insert_many inserts every task"
    assert all(t.state is S.PENDING and t.version == 0 for t in store.tasks()), (
        "insert_many stores PENDING at version 0"
    )
    _expect(
        DuplicateKeyError,
        lambda: store.insert_many([_task("c"), _task("a")]),
        "insert_many with an existing id",
    )
    assert store.find("c") is None, "a refused insert_many inserts none of its tasks"
    _expect(
        DuplicateKeyError,
        lambda: store.insert_many([_task("d"), _task("d")]),
        "insert_many with a repeated id",
    )
    assert store.find("d") is None, "a refused insert_many inserts none of its tasks"
    _expect(
        InvalidScheduleError,
        lambda: store.insert_many([_task("e"), _task("f", after=("a",))]),
        "insert_many of a task with dependencies",
    )
    assert store.find("e") is None, "nothing inserted"
    assert store.find("f") is None, "nothing inserted"
    store.insert_many([])


# -- transition --------------------------------------------------------------------------------
def check_transition_cas(store: Store) -> None:
    store.insert(_task("a"))
    ch = store.transition("a", expected_version=0, state=S.READY, now=T0 + 1)
    assert ch.task.state is S.READY, (
        f"transition moves state and version + 1 (got {ch.task.state}, v{ch.task.version})"
    )
    assert ch.task.version == 1, (
        f"transition moves state and version + 1 (got {ch.task.state}, v{ch.task.version})"
    )
    assert ch.task.updated == T0 + 1, f"transition sets updated = now (got {ch.task.updated})"
    assert store.get("a") == ch.task, "transition's result is what get returns"
    e = _expect(
        VersionConflictError,
        lambda: store.transition("a", expected_version=0, state=S.CANCELLED, now=T0),
        "a CAS with a stale version",
    )
    assert isinstance(e, RuntimeError), "VersionConflictError is a RuntimeError"
    assert store.get("a") == ch.task, "a lost CAS changes nothing"


def check_transition_forbidden(store: Store) -> None:
    store.insert(_task("a"))
    _expect(
        InvalidTransitionError,
        lambda: store.transition("a", expected_version=0, state=S.RUNNING, now=T0),
        "PENDING -> RUNNING",
    )
    _expect(
        InvalidTransitionError,
        lambda: store.transition("a", expected_version=0, state=S.SUCCEEDED, now=T0),
        "PENDING -> SUCCEEDED",
    )
    got = store.get("a")
    assert (got.state, got.version) == (S.PENDING, 0), "a refused move changes nothing"
    store.transition("a", expected_version=0, state=S.CANCELLED, now=T0)
    for new in TaskState:
        _expect(
            InvalidTransitionError,
            partial(store.transition, "a", expected_version=1, state=new, now=T0),
            f"CANCELLED -> {new.value} (terminal states are absorbing)",
        )


def check_transition_missing(store: Store) -> None:
    _expect(
        TaskNotFoundError,
        lambda: store.transition("nope", expected_version=0, state=S.READY, now=T0),
        "transition of a missing id",
    )


def check_transition_sets_changes(store: Store) -> None:
    store.insert(_task("a"))
    _running(store, "a", owner="w1")
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


def check_version_increments_by_one(store: Store) -> None:
    store.insert(_task("a"))
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
            _task("due", due=T0 - 5),
            _task("now", due=T0),
            _task("later", due=T0 + 1),
            _task("done", due=T0 - 5),
        ]
    )
    store.transition("done", expected_version=0, state=S.CANCELLED, now=T0)
    store.insert(_task("blocked", due=T0 - 5, after=("later",)))
    moved = store.promote(["due", "now", "later", "done", "blocked", "ghost"], T0)
    assert sorted(_ids(moved)) == ["due", "now"], (
        f"promote moves PENDING tasks due by now with unmet == 0 only (moved {_ids(moved)})"
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
    store.insert(_task("s@1", due=T0, schedule_id="s"))
    store.insert(_task("s@2", due=T0 + 60, schedule_id="s", priority=3))
    moved = store.promote(
        ["s@1"],
        T0,
        successors=[
            _task("s@2", due=T0 + 60, schedule_id="s", priority=9),
            _task("s@3", due=T0 + 120, schedule_id="s"),
        ],
    )
    assert _ids(moved) == ["s@1"], f"promote returns the moved tasks only (got {_ids(moved)})"
    assert store.get("s@2").priority == 3, "a successor whose id exists is ignored"
    s3 = store.get("s@3")
    assert (s3.state, s3.version, s3.schedule_id) == (S.PENDING, 0, "s"), (
        f"a new successor is inserted PENDING at version 0 (got {s3!r})"
    )
    store.promote([], T0, successors=[_task("s@4", due=T0 + 180)])
    assert store.find("s@4") is not None, "successors are inserted even when nothing moves"


# -- claim -------------------------------------------------------------------------------------
def check_claim_cas(store: Store) -> None:
    store.insert(_task("a"))
    assert store.claim("a", expected_version=0, owner="w1", lease_expires=T0 + 9, now=T0) is None, (
        "a PENDING task cannot be claimed"
    )
    r = _ready(store, "a")[0]
    c = store.claim("a", expected_version=r.version, owner="w1", lease_expires=T0 + 9, now=T0 + 1)
    assert c is not None, "claim of a READY task at its version succeeds"
    assert (c.state, c.version, c.attempts) == (S.RUNNING, r.version + 1, 1), (
        f"claim: RUNNING, version + 1, attempts + 1 (got {c.state}, v{c.version}, {c.attempts})"
    )
    assert (c.lease_owner, c.lease_expires, c.updated) == ("w1", T0 + 9, T0 + 1), (
        f"claim sets the lease and updated (got {c.lease_owner}, {c.lease_expires}, {c.updated})"
    )
    assert store.get("a") == c, "claim's result is what get returns"
    lost = store.claim("a", expected_version=r.version, owner="w2", lease_expires=T0 + 9, now=T0)
    assert lost is None, "a second claim of the same version loses"
    assert store.get("a").lease_owner == "w1", "the loser changes nothing"
    assert store.claim("ghost", expected_version=0, owner="w", lease_expires=T0, now=T0) is None


def check_claim_next_order(store: Store) -> None:
    store.insert_many(
        [
            _task("low", due=T0 - 50, priority=-1),
            _task("p0-late", due=T0 - 10),
            _task("p0-early", due=T0 - 20),
            _task("p5-late", due=T0 - 1, priority=5),
            _task("p5-early", due=T0 - 2, priority=5),
        ]
    )
    _ready(store, "low", "p0-late", "p0-early", "p5-late", "p5-early")
    order: list[str] = []
    for _ in range(6):
        got = store.claim_next(owner="w", lease_expires=T0 + 30, now=T0, limit=1)
        order.extend(_ids(got))
    assert order == ["p5-early", "p5-late", "p0-early", "p0-late", "low"], (
        f"claim_next takes highest priority first, then earliest due (got {order})"
    )


def check_claim_next_batch(store: Store) -> None:
    ids = [f"t{i}" for i in range(5)]
    store.insert_many([_task(i, due=T0 - 5 + n) for n, i in enumerate(ids)])
    _ready(store, *ids)
    a = store.claim_next(owner="A", lease_expires=T0 + 30, now=T0 + 1, limit=3)
    assert _ids(a) == ["t0", "t1", "t2"], (
        f"a batch claim takes the first *limit* in order ({_ids(a)})"
    )
    for t in a:
        assert (t.state, t.lease_owner, t.lease_expires, t.attempts, t.version) == (
            S.RUNNING,
            "A",
            T0 + 30,
            1,
            2,
        ), f"each claimed task is leased to A (got {t!r})"
        assert store.get(t.id) == t, "claim_next's results are what get returns"
    b = store.claim_next(owner="B", lease_expires=T0 + 30, now=T0 + 1, limit=10)
    assert _ids(b) == ["t3", "t4"], f"a second claimer gets only what is left ({_ids(b)})"
    assert store.claim_next(owner="C", lease_expires=T0 + 30, now=T0, limit=10) == [], (
        "nothing is claimed twice"
    )
    assert store.claim_next(owner="C", lease_expires=T0 + 30, now=T0, limit=0) == []


def check_claim_next_queues(store: Store) -> None:
    store.insert_many(
        [
            _task("m1", queue="mail"),
            _task("r1", queue="reports"),
            _task("d1"),
            _task("m2", queue="mail", due=T0 - 1),
        ]
    )
    _ready(store, "m1", "r1", "d1", "m2")
    got = store.claim_next(owner="w", lease_expires=T0 + 5, now=T0, limit=10, queues=["mail"])
    assert _ids(got) == ["m2", "m1"], f"queues= filters the lanes served (got {_ids(got)})"
    assert store.claim_next(owner="w", lease_expires=T0 + 5, now=T0, limit=10, queues=[]) == [], (
        "queues=[] serves no lane"
    )
    rest = store.claim_next(
        owner="w", lease_expires=T0 + 5, now=T0, limit=10, queues=("reports", "default")
    )
    assert sorted(_ids(rest)) == ["d1", "r1"], f"several queues (got {_ids(rest)})"


def check_claim_next_skips_non_ready(store: Store) -> None:
    store.insert_many([_task("p"), _task("r"), _task("x")])
    _ready(store, "r", "x")
    store.transition("x", expected_version=1, state=S.CANCELLED, now=T0)
    got = store.claim_next(owner="w", lease_expires=T0 + 5, now=T0, limit=10)
    assert _ids(got) == ["r"], f"only READY tasks are claimed (got {_ids(got)})"


def _in_threads(work: Callable[[int], None], what: str, *, interleave: bool = False) -> None:
    """Run ``work(k)`` in four threads started together; re-raise (as an assertion) the first
    exception any of them raised. ``interleave`` makes the interpreter switch threads as often
    as it can while they run, so that races show up."""
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(k: int) -> None:
        try:
            start.wait()
            work(k)
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    interval = sys.getswitchinterval()
    if interleave:
        sys.setswitchinterval(1e-6)
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, f"{what} raised in a thread: {errors[0]!r}"


def check_claim_next_threads(store: Store) -> None:
    n = 120
    ids = [f"t{i:03d}" for i in range(n)]
    store.insert_many([_task(i) for i in ids])
    _ready(store, *ids)
    got: list[list[str]] = [[] for _ in range(4)]

    def work(k: int) -> None:
        while True:
            batch = store.claim_next(owner=f"w{k}", lease_expires=T0 + 60, now=T0, limit=3)
            if not batch:
                return
            got[k].extend(_ids(batch))

    _in_threads(work, "claim_next")
    flat = [i for g in got for i in g]
    assert len(flat) == len(set(flat)), "a task was claimed twice by concurrent threads"
    assert sorted(flat) == ids, f"every READY task is claimed once ({len(flat)} of {n})"
    for k in range(4):
        for i in got[k]:
            assert store.get(i).lease_owner == f"w{k}", f"{i} is leased to its claimer"


def check_claim_and_finish_race_threads(store: Store) -> None:
    """Threads racing ``claim`` on the same READY versions: each task is won exactly once, and
    its winner's heartbeat and ``finish`` land while the others keep racing for other tasks."""
    n = 60
    ids = [f"r{i:03d}" for i in range(n)]
    store.insert_many([_task(i) for i in ids])
    versions = {t.id: t.version for t in _ready(store, *ids)}
    won: list[list[str]] = [[] for _ in range(4)]

    def work(k: int) -> None:
        owner = f"w{k}"
        for i in ids:
            c = store.claim(
                i, expected_version=versions[i], owner=owner, lease_expires=T0 + 60, now=T0
            )
            if c is None:
                continue
            won[k].append(i)
            store.heartbeat(i, owner=owner, lease_expires=T0 + 90, now=T0)
            done = store.finish(i, owner=owner, state=S.SUCCEEDED, now=T0, result=k)
            assert done is not None, f"{owner} lost the finish of {i} it had claimed"

    _in_threads(work, "claim/finish", interleave=True)
    flat = sorted(i for w in won for i in w)
    assert flat == ids, f"every task is claimed exactly once (claims: {len(flat)} for {n})"
    for k in range(4):
        for i in won[k]:
            t = store.get(i)
            assert (t.state, t.result) == (S.SUCCEEDED, k), f"{i} ended as its winner left it"


# -- heartbeat / finish ---------------------------------------------------------------------------
def check_heartbeat(store: Store) -> None:
    store.insert(_task("a"))
    c = _running(store, "a", owner="w1", lease=T0 + 10)
    assert store.heartbeat("a", owner="w2", lease_expires=T0 + 99, now=T0) is False, (
        "only the lease owner may heartbeat"
    )
    assert store.get("a") == c, "a refused heartbeat changes nothing"
    assert store.heartbeat("a", owner="w1", lease_expires=T0 + 20, now=T0 + 5) is True
    t = store.get("a")
    assert (t.lease_expires, t.version, t.state, t.updated) == (
        T0 + 20,
        c.version + 1,
        S.RUNNING,
        T0 + 5,
    ), f"heartbeat extends the lease, version + 1 (got {t!r})"
    store.finish("a", owner="w1", state=S.SUCCEEDED, now=T0 + 6)
    assert store.heartbeat("a", owner="w1", lease_expires=T0 + 30, now=T0 + 7) is False, (
        "a finished task cannot be heartbeat"
    )
    assert store.heartbeat("ghost", owner="w1", lease_expires=T0, now=T0) is False


def check_finish_owner_only(store: Store) -> None:
    store.insert(_task("a"))
    c = _running(store, "a", owner="w1")
    assert store.finish("a", owner="w2", state=S.SUCCEEDED, now=T0) is None, (
        "only the lease owner may finish"
    )
    assert store.get("a") == c, "a refused finish changes nothing"
    ch = store.finish(
        "a",
        owner="w1",
        state=S.SUCCEEDED,
        now=T0 + 3,
        result={"rows": [1, 2.5, None, "x"], "ok": True},
    )
    assert ch is not None, "the owner's finish succeeds"
    t = ch.task
    assert (t.state, t.version, t.updated) == (S.SUCCEEDED, c.version + 1, T0 + 3), (
        f"finish: new state, version + 1, updated now (got {t!r})"
    )
    assert t.lease_owner is None, "finish clears the lease"
    assert t.lease_expires is None, "finish clears the lease"
    assert t.result == {"rows": [1, 2.5, None, "x"], "ok": True}, f"result kept ({t.result!r})"
    assert store.get("a") == t, "finish's result is what get returns"
    assert store.finish("a", owner="w1", state=S.FAILED, now=T0 + 4) is None, (
        "a finished task cannot be finished again"
    )
    assert store.finish("ghost", owner="w1", state=S.FAILED, now=T0) is None


def check_finish_failed(store: Store) -> None:
    store.insert(_task("a"))
    _running(store, "a")
    t = store.finish("a", owner="w1", state=S.FAILED, now=T0 + 1, error="ValueError: bad input 'x'")
    assert t is not None
    assert t.task.state is S.FAILED
    got = store.get("a")
    assert got.error == "ValueError: bad input 'x'", f"the error text is kept ({got.error!r})"
    assert got.attempts == 1


def check_finish_forbidden(store: Store) -> None:
    store.insert(_task("a"))
    c = _running(store, "a")
    _expect(
        InvalidTransitionError,
        lambda: store.finish("a", owner="w1", state=S.CANCELLED, now=T0),
        "finish to CANCELLED (a running task cannot be cancelled)",
    )
    assert store.get("a") == c, "a refused finish changes nothing"


def check_finish_stale_owner(store: Store) -> None:
    store.insert(_task("a"))
    _running(store, "a", owner="w1", lease=T0 + 5)
    expired = store.expired_leases(T0 + 6, limit=10)
    assert _ids(expired) == ["a"], f"the lapsed lease is reported ({_ids(expired)})"
    e = expired[0]
    store.transition(
        "a",
        expected_version=e.version,
        state=S.PENDING,
        now=T0 + 6,
        lease_owner=None,
        lease_expires=None,
        error="lease expired",
    )
    _running(store, "a", owner="w2", lease=T0 + 60)
    assert store.finish("a", owner="w1", state=S.SUCCEEDED, now=T0 + 7) is None, (
        "the stale owner's outcome is discarded"
    )
    assert store.heartbeat("a", owner="w1", lease_expires=T0 + 99, now=T0 + 7) is False
    t = store.get("a")
    assert (t.state, t.lease_owner, t.attempts) == (S.RUNNING, "w2", 2), (
        f"the new owner keeps the task (got {t.state}, {t.lease_owner}, {t.attempts})"
    )
    assert store.finish("a", owner="w2", state=S.SUCCEEDED, now=T0 + 8) is not None


def check_finish_retry(store: Store) -> None:
    store.insert(_task("a"))
    _running(store, "a")
    ch = store.finish(
        "a", owner="w1", state=S.PENDING, now=T0 + 1, due=T0 + 11, error="ValueError: try again"
    )
    assert ch is not None
    t = ch.task
    assert (t.state, t.due, t.error, t.attempts) == (
        S.PENDING,
        T0 + 11,
        "ValueError: try again",
        1,
    ), f"a retry is PENDING at the new due ({t!r})"
    assert t.lease_owner is None, "a retry clears the lease"
    assert t.lease_expires is None, "a retry clears the lease"
    assert store.due_before(T0 + 12, limit=10) == [("a", T0 + 11, None)], "the retry is due again"
    assert store.promote(["a"], T0 + 5) == [], "not before its new due time"
    _ready(store, "a", now=T0 + 11)
    c = store.claim_next(owner="w2", lease_expires=T0 + 60, now=T0 + 11, limit=1)
    assert _ids(c) == ["a"], "the second run counts attempt 2"
    assert c[0].attempts == 2, "the second run counts attempt 2"


def check_finish_release(store: Store) -> None:
    store.insert(_task("a"))
    _running(store, "a")
    ch = store.finish("a", owner="w1", state=S.READY, now=T0 + 1)
    assert ch is not None, "a released task is READY again"
    assert ch.task.state is S.READY, "a released task is READY again"
    assert ch.task.lease_owner is None, "release clears the lease"
    assert ch.task.lease_expires is None, "release clears the lease"
    again = store.claim_next(owner="w2", lease_expires=T0 + 9, now=T0 + 2, limit=5)
    assert _ids(again) == ["a"], "a released task can be claimed again"


# -- queries -----------------------------------------------------------------------------------
def check_due_before(store: Store) -> None:
    store.insert_many(
        [
            _task("c", due=T0 + 3),
            _task("a", due=T0 + 1),
            _task("b", due=T0 + 2),
            _task("edge", due=T0 + 10),
            _task("r", due=T0),
            _task("x", due=T0 - 1),
        ]
    )
    store.insert(_task("blocked", due=T0 - 2, after=("c",)))
    _ready(store, "r")
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
    store.insert(_task("s@1", due=T0 + 20, schedule_id="s"))
    store.insert(_task("user@example.com", due=T0 + 21))
    assert store.due_before(T0 + 22, limit=100)[-2:] == [
        ("s@1", T0 + 20, "s"),
        ("user@example.com", T0 + 21, None),
    ], "due_before names the schedule of a recurring instance, by its field, not its id"


def check_ready_listing(store: Store) -> None:
    store.insert_many(
        [
            _task("a", due=T0 - 1),
            _task("b", priority=2),
            _task("c", queue="q"),
            _task("p", due=T0 + 100),
        ]
    )
    _ready(store, "a", "b", "c")
    got = store.ready(limit=10)
    assert _ids(got) == ["b", "a", "c"], f"ready(): priority, then due (got {_ids(got)})"
    assert all(t.state is S.READY for t in got)
    assert _ids(store.ready(limit=1)) == ["b"], "limit applies"
    assert _ids(store.ready(limit=10, queues=["q"])) == ["c"], "queues filter"
    assert store.get("b").state is S.READY, "ready() only reads"


def check_expired_leases(store: Store) -> None:
    store.insert_many([_task(i) for i in ("a", "b", "c", "d")])
    _running(store, "a", lease=T0 + 20)
    _running(store, "b", lease=T0 + 10)
    _running(store, "c", lease=T0 + 50)
    got = store.expired_leases(T0 + 30, limit=10)
    assert _ids(got) == ["b", "a"], (
        f"expired_leases: RUNNING tasks with lease_expires < now, soonest first (got {_ids(got)})"
    )
    assert _ids(store.expired_leases(T0 + 30, limit=1)) == ["b"], "limit applies"
    assert store.expired_leases(T0 + 10, limit=10) == [], "a lease expiring at now is not expired"


def check_count_by_state(store: Store) -> None:
    assert {s: n for s, n in store.count_by_state().items() if n} == {}, "an empty store counts 0"
    store.insert_many([_task(f"t{i}") for i in range(6)])
    _ready(store, "t0", "t1", "t2")
    _running(store, "t2")
    store.transition("t3", expected_version=0, state=S.CANCELLED, now=T0)
    got = {s: n for s, n in store.count_by_state().items() if n}
    assert got == {S.PENDING: 2, S.READY: 2, S.RUNNING: 1, S.CANCELLED: 1}, f"counts: {got}"
    assert all(isinstance(s, TaskState) for s in store.count_by_state()), "keys are TaskState"


def check_tasks_listing(store: Store) -> None:
    store.insert_many(
        [
            _task("s2", due=T0 + 2, schedule_id="s"),
            _task("s1", due=T0 + 1, schedule_id="s"),
            _task("o", due=T0),
            _task("x", due=T0 + 3),
        ]
    )
    _ready(store, "o")
    assert _ids(store.tasks()) == ["o", "s1", "s2", "x"], "tasks(): earliest due first"
    assert _ids(store.tasks(state=S.READY)) == ["o"], "state= filters"
    assert _ids(store.tasks(state=[S.READY, S.PENDING], limit=2)) == ["o", "s1"], (
        "state= takes several states; limit applies"
    )
    assert _ids(store.tasks(schedule_id="s")) == ["s1", "s2"], "schedule_id= filters"
    assert _ids(store.tasks(state=S.READY, schedule_id="s")) == [], "filters combine"
    assert store.tasks(state=[]) == [], "no states, no tasks"


def check_delete(store: Store) -> None:
    store.insert(_task("a"))
    assert store.delete("a") is True, "delete returns True for an existing task"
    assert store.find("a") is None, "a deleted task is gone"
    assert store.delete("a") is False, "delete returns False for a missing task"
    store.insert(_task("a", priority=4))
    assert store.get("a").priority == 4, "a deleted id can be used again"


def check_prune(store: Store) -> None:
    store.insert_many([_task(i) for i in ("old", "new", "live", "oldfail")])
    store.transition("old", expected_version=0, state=S.CANCELLED, now=T0 + 1)
    store.transition("new", expected_version=0, state=S.CANCELLED, now=T0 + 100)
    _running(store, "oldfail")
    store.finish("oldfail", owner="w1", state=S.FAILED, now=T0 + 2)
    assert store.prune(before=T0 + 50, states=[S.FAILED]) == 1, "states= limits what is pruned"
    assert store.find("oldfail") is None
    assert store.find("old") is not None
    assert store.prune(before=T0 + 50) == 1, "prune deletes terminal tasks updated before *before*"
    assert store.find("old") is None, "the old terminal task is gone"
    assert store.find("new") is not None, "a recently finished task is kept"
    assert store.find("live") is not None, "a non-terminal task is kept"


# -- dependencies --------------------------------------------------------------------------------
def check_dep_unknown_upstream(store: Store) -> None:
    store.insert(_task("up"))
    e = _expect(
        TaskNotFoundError,
        lambda: store.insert(_task("d", after=("up", "ghost"))),
        "a dependency on a missing task",
    )
    assert "ghost" in str(e), f"the message names the missing upstream (got {e})"
    assert store.find("d") is None, "nothing is inserted"


def check_dep_unmet_at_insert(store: Store) -> None:
    store.insert_many([_task(i) for i in ("p1", "p2", "ok", "bad", "ok2")])
    for i in ("ok", "ok2"):
        _running(store, i)
        store.finish(i, owner="w1", state=S.SUCCEEDED, now=T0)
    _running(store, "bad")
    store.finish("bad", owner="w1", state=S.FAILED, now=T0)

    def ins(tid: str, after: tuple[str, ...], when: str) -> Task:
        return store.insert(_task(tid, after=after, when=when)).task

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


def _finish(store: Store, task_id: str, state: TaskState) -> Changed:
    _running(store, task_id)
    ch = store.finish(task_id, owner="w1", state=state, now=T0 + 5)
    assert ch is not None
    return ch


def check_dep_all_success(store: Store) -> None:
    store.insert_many([_task("a"), _task("b")])
    store.insert(_task("c", after=("a", "b")))
    store.insert(_task("d", after=("c",)))
    ch = _finish(store, "a", S.SUCCEEDED)
    assert _ids(ch.dependents) == ["c"], f"finishing a reports its dependents ({ch.dependents})"
    c = store.get("c")
    assert (c.state, c.unmet) == (S.PENDING, 1), f"c waits for b now (got {c.state}, {c.unmet})"
    assert ch.dependents[0] == c, "Changed.dependents holds the dependents as stored"
    ch = _finish(store, "b", S.SUCCEEDED)
    c = store.get("c")
    assert (c.state, c.unmet) == (S.PENDING, 0), "c may run now"
    assert _ids(store.promote(["c"], T0 + 5)) == ["c"], "a released dependent can be promoted"
    ch = _finish(store, "c", S.FAILED)
    d = store.get("d")
    assert d.state is S.UPSTREAM_FAILED, f"a failed upstream fails d ({d!r})"
    assert d.error, f"a failed upstream fails d ({d!r})"
    assert _ids(ch.dependents) == ["d"]


def check_dep_transitive(store: Store) -> None:
    store.insert(_task("a"))
    store.insert(_task("b", after=("a",)))
    store.insert(_task("c", after=("b",)))
    store.insert(_task("e", after=("b",), when="all_done"))
    store.insert(_task("f", after=("c",), when="any_failed"))
    ch = _finish(store, "a", S.FAILED)
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
    store.insert_many([_task("a"), _task("b")])
    store.insert(_task("c", after=("a", "b"), when="all_done"))
    _finish(store, "a", S.FAILED)
    assert store.get("c").unmet == 1
    assert store.get("c").state is S.PENDING
    store.transition("b", expected_version=0, state=S.CANCELLED, now=T0)
    c = store.get("c")
    assert (c.state, c.unmet) == (S.PENDING, 0), f"all_done: any end counts down ({c!r})"


def check_dep_any_failed(store: Store) -> None:
    store.insert_many([_task("a"), _task("b"), _task("x"), _task("y")])
    store.insert(_task("c", after=("a", "b"), when="any_failed"))
    store.insert(_task("z", after=("x", "y"), when="any_failed"))
    _finish(store, "a", S.SUCCEEDED)
    assert store.get("c").unmet == 1, "a success counts down"
    ch = _finish(store, "b", S.SUCCEEDED)
    c = store.get("c")
    assert c.state is S.CANCELLED, f"every upstream succeeded: cancelled ({c!r})"
    assert c.error, f"every upstream succeeded: cancelled ({c!r})"
    assert _ids(ch.dependents) == ["c"]
    _finish(store, "x", S.TIMED_OUT)
    z = store.get("z")
    assert (z.state, z.unmet) == (S.PENDING, 0), f"one failure releases any_failed ({z!r})"
    _finish(store, "y", S.SUCCEEDED)
    z = store.get("z")
    assert (z.state, z.unmet) == (S.PENDING, 0), f"a later success changes nothing ({z!r})"


def check_dep_settled_by_transition(store: Store) -> None:
    store.insert(_task("a"))
    store.insert(_task("b", after=("a",)))
    ch = store.transition("a", expected_version=0, state=S.CANCELLED, now=T0 + 1)
    assert _ids(ch.dependents) == ["b"], "a terminal transition settles dependents"
    b = store.get("b")
    assert b.state is S.UPSTREAM_FAILED, (
        f"the dependent moved with version + 1, updated now ({b!r})"
    )
    assert b.version == 1, f"the dependent moved with version + 1, updated now ({b!r})"
    assert b.updated == T0 + 1, f"the dependent moved with version + 1, updated now ({b!r})"
    store.insert(_task("c"))
    store.insert(_task("d", after=("c",)))
    ch = store.transition("c", expected_version=0, state=S.READY, now=T0)
    assert ch.dependents == (), "a non-terminal move settles nothing"
    assert store.get("d").unmet == 1


def check_dep_cancelled_dependent_ignored(store: Store) -> None:
    store.insert(_task("a"))
    store.insert(_task("b", after=("a",)))
    store.transition("b", expected_version=0, state=S.CANCELLED, now=T0)
    ch = _finish(store, "a", S.SUCCEEDED)
    assert ch.dependents == (), f"a dependent already ended is left alone ({ch.dependents})"
    assert store.get("b").state is S.CANCELLED


# -- schedules -----------------------------------------------------------------------------------
def _sched(sid: str = "s", **kw: Any) -> ScheduleRecord:
    kw.setdefault("func", FUNC)
    kw.setdefault("rule", {"kind": "every", "seconds": 60})
    kw.setdefault("options", {"queue": "default", "priority": 0})
    kw.setdefault("created", T0)
    kw.setdefault("updated", T0)
    return ScheduleRecord(id=sid, **kw)


def check_schedule_put_get(store: Store) -> None:
    rec = _sched(args=(1, "a"), kwargs={"x": [1]})
    out = store.put_schedule(rec, first=_task("s@1", due=T0 + 60, schedule_id="s"))
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
    store.put_schedule(_sched("t"), first=None)
    assert [r.id for r in store.list_schedules()] == ["s", "t"], "list_schedules, by id"


def check_schedule_replace(store: Store) -> None:
    store.put_schedule(_sched(), first=_task("s@1", due=T0, schedule_id="s"))
    store.insert_many(
        [
            _task("s@0", due=T0 - 60, schedule_id="s"),
            _task("s@r", due=T0 - 120, schedule_id="s"),
            _task("other", due=T0),
        ]
    )
    _ready(store, "s@0")
    _running(store, "s@r")
    new = store.put_schedule(
        _sched(rule={"kind": "every", "seconds": 30}, updated=T0 + 1),
        first=_task("s@2", due=T0 + 30, schedule_id="s"),
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
    store.put_schedule(_sched(), first=_task("s@1", due=T0, schedule_id="s"))
    new_first = _task("s@1", due=T0 + 5, schedule_id="s", priority=2)
    store.put_schedule(_sched(), first=new_first)
    t = store.get("s@1")
    assert (t.state, t.due, t.priority) == (S.PENDING, T0 + 5, 2), (
        f"the new first instance replaces the cancelled one with the same id ({t!r})"
    )
    assert t.version > 1, (
        f"its version moves past the cancelled snapshot's (got {t.version}), so a stale "
        "compare-and-swap cannot hit the new instance"
    )
    _expect(
        VersionConflictError,
        lambda: store.transition("s@1", expected_version=0, state=S.READY, now=T0 + 9),
        "a CAS with the first instance's old version 0",
    )


def check_schedule_conflict(store: Store) -> None:
    store.put_schedule(_sched(options={"priority": 1}), first=None)
    _expect(
        DuplicateKeyError,
        lambda: store.put_schedule(_sched(), first=None, on_conflict="error"),
        "put_schedule of an existing id with on_conflict='error'",
    )
    kept = store.put_schedule(
        _sched(options={"priority": 9}), first=_task("k@1"), on_conflict="keep"
    )
    assert dict(kept.options) == {"priority": 1}, "on_conflict='keep' returns the existing one"
    assert store.find("k@1") is None, "on_conflict='keep' inserts no instance"


def check_update_schedule(store: Store) -> None:
    store.put_schedule(_sched(), first=None)
    new = store.update_schedule("s", expected_version=0, paused=True, updated=T0 + 5)
    assert (new.paused, new.version, new.updated) == (True, 1, T0 + 5), f"CAS applied ({new!r})"
    assert store.get_schedule("s") == new
    _expect(
        VersionConflictError,
        lambda: store.update_schedule("s", expected_version=0, paused=False),
        "update_schedule with a stale version",
    )
    assert store.get_schedule("s") == new, "a lost CAS changes nothing"
    _expect(
        TaskNotFoundError,
        lambda: store.update_schedule("ghost", expected_version=0),
        "update_schedule of a missing id",
    )


def check_delete_schedule(store: Store) -> None:
    store.put_schedule(_sched(), first=_task("s@1", schedule_id="s"))
    store.insert(_task("s@0", schedule_id="s", due=T0 - 1))
    _running(store, "s@0")
    assert store.delete_schedule("s") is True
    assert store.get_schedule("s") is None, "the schedule is gone"
    assert store.get("s@1").state is S.CANCELLED, "its pending instance is cancelled"
    assert store.get("s@0").state is S.RUNNING, "its running instance is left to finish"
    assert store.delete_schedule("s") is False, "deleting again returns False"
    assert store.list_schedules() == []


CHECKS: tuple[Callable[[Store], None], ...] = (
    check_protocol_shape,
    check_close_idempotent,
    check_insert_get_roundtrip,
    check_get_missing,
    check_insert_resets_state_and_version,
    check_insert_conflict_error,
    check_insert_conflict_keep,
    check_insert_conflict_replace,
    check_insert_replace_running_refused,
    check_insert_on_conflict_invalid,
    check_insert_many_atomic,
    check_transition_cas,
    check_transition_forbidden,
    check_transition_missing,
    check_transition_sets_changes,
    check_version_increments_by_one,
    check_promote,
    check_promote_successors,
    check_claim_cas,
    check_claim_next_order,
    check_claim_next_batch,
    check_claim_next_queues,
    check_claim_next_skips_non_ready,
    check_claim_next_threads,
    check_claim_and_finish_race_threads,
    check_heartbeat,
    check_finish_owner_only,
    check_finish_failed,
    check_finish_forbidden,
    check_finish_stale_owner,
    check_finish_retry,
    check_finish_release,
    check_due_before,
    check_ready_listing,
    check_expired_leases,
    check_count_by_state,
    check_tasks_listing,
    check_delete,
    check_prune,
    check_dep_unknown_upstream,
    check_dep_unmet_at_insert,
    check_dep_all_success,
    check_dep_transitive,
    check_dep_all_done,
    check_dep_any_failed,
    check_dep_settled_by_transition,
    check_dep_cancelled_dependent_ignored,
    check_schedule_put_get,
    check_schedule_replace,
    check_schedule_replace_reuses_instance_id,
    check_schedule_conflict,
    check_update_schedule,
    check_delete_schedule,
)
"""Every check, in the order ``check_store`` runs them."""
