"""Contract checks for runs: claims (one task, batches, racing threads), heartbeats, finishes."""

from __future__ import annotations

from timewheel._contract.support import (
    T0,
    S,
    expect,
    ids_of,
    in_threads,
    make_ready,
    make_running,
    new_task,
)
from timewheel.errors import (
    InvalidTransitionError,
)
from timewheel.stores.base import Finish, Lease, Store, SupportsFinishMany, SupportsHeartbeatMany


# -- claim -------------------------------------------------------------------------------------
def check_claim_cas(store: Store) -> None:
    store.insert(new_task("a"))
    assert store.claim("a", expected_version=0, owner="w1", lease_expires=T0 + 9, now=T0) is None, (
        "a PENDING task cannot be claimed"
    )
    r = make_ready(store, "a")[0]
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


def check_claim_records_start(store: Store) -> None:
    """Every move to RUNNING records its ``now`` as ``started`` (claim, claim_next, a
    transition); a retry and a release keep the last start until the next run replaces it; an
    insert that replaces the task clears it."""
    store.insert_many([new_task(i, due=T0 - 5 + n) for n, i in enumerate("abcd")])
    assert store.get("a").started is None, "a task that never ran has no start"
    make_ready(store, "a", "b", "c", "d")
    assert store.get("a").started is None, "promotion is no start"
    a = store.claim("a", expected_version=1, owner="w1", lease_expires=T0 + 30, now=T0 + 1)
    assert a is not None
    assert a.started == T0 + 1, f"claim records its now as the start (got {a.started})"
    assert store.get("a") == a, "the start is stored"
    (b,) = store.claim_next(owner="w2", lease_expires=T0 + 30, now=T0 + 2, limit=1)
    assert b.id == "b", f"claim_next takes the earliest due (got {b.id})"
    assert b.started == T0 + 2, f"claim_next records its now as the start (got {b.started})"
    assert store.get("b") == b, "the start is stored"
    c = store.transition(
        "c", expected_version=1, state=S.RUNNING, now=T0 + 3, lease_owner="w3"
    ).task
    assert c.started == T0 + 3, f"a transition to RUNNING records the start (got {c.started})"
    assert store.get("c") == c, "the start is stored"
    retry = store.finish("a", owner="w1", state=S.PENDING, now=T0 + 4, due=T0 + 10)
    assert retry is not None
    assert retry.task.started == T0 + 1, "a retry keeps the last run's start"
    make_ready(store, "a", now=T0 + 10)
    again = store.claim_next(owner="w1", lease_expires=T0 + 60, now=T0 + 12, limit=1)
    assert [t.started for t in again] == [T0 + 12], f"the next run replaces the start ({again})"
    done = store.finish("b", owner="w2", state=S.SUCCEEDED, now=T0 + 5)
    assert done is not None
    assert done.task.started == T0 + 2, "the end keeps the start"
    assert store.get("b").started == T0 + 2, "the end keeps the start"
    released = store.finish("c", owner="w3", state=S.READY, now=T0 + 6)
    assert released is not None
    assert released.task.started == T0 + 3, "a release keeps the last start"
    fresh = store.insert(new_task("b"), on_conflict="replace").task
    assert fresh.started is None, "a replaced task has not started"
    assert store.get("b").started is None, "a replaced task has not started"


def check_claim_next_order(store: Store) -> None:
    store.insert_many(
        [
            new_task("low", due=T0 - 50, priority=-1),
            new_task("p0-late", due=T0 - 10),
            new_task("p0-early", due=T0 - 20),
            new_task("p5-late", due=T0 - 1, priority=5),
            new_task("p5-early", due=T0 - 2, priority=5),
        ]
    )
    make_ready(store, "low", "p0-late", "p0-early", "p5-late", "p5-early")
    order: list[str] = []
    for _ in range(6):
        got = store.claim_next(owner="w", lease_expires=T0 + 30, now=T0, limit=1)
        order.extend(ids_of(got))
    assert order == ["p5-early", "p5-late", "p0-early", "p0-late", "low"], (
        f"claim_next takes highest priority first, then earliest due (got {order})"
    )


def check_claim_next_batch(store: Store) -> None:
    ids = [f"t{i}" for i in range(5)]
    store.insert_many([new_task(i, due=T0 - 5 + n) for n, i in enumerate(ids)])
    make_ready(store, *ids)
    a = store.claim_next(owner="A", lease_expires=T0 + 30, now=T0 + 1, limit=3)
    assert ids_of(a) == ["t0", "t1", "t2"], (
        f"a batch claim takes the first *limit* in order ({ids_of(a)})"
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
    assert ids_of(b) == ["t3", "t4"], f"a second claimer gets only what is left ({ids_of(b)})"
    assert store.claim_next(owner="C", lease_expires=T0 + 30, now=T0, limit=10) == [], (
        "nothing is claimed twice"
    )
    assert store.claim_next(owner="C", lease_expires=T0 + 30, now=T0, limit=0) == []


def check_claim_next_queues(store: Store) -> None:
    store.insert_many(
        [
            new_task("m1", queue="mail"),
            new_task("r1", queue="reports"),
            new_task("d1"),
            new_task("m2", queue="mail", due=T0 - 1),
        ]
    )
    make_ready(store, "m1", "r1", "d1", "m2")
    got = store.claim_next(owner="w", lease_expires=T0 + 5, now=T0, limit=10, queues=["mail"])
    assert ids_of(got) == ["m2", "m1"], f"queues= filters the lanes served (got {ids_of(got)})"
    assert store.claim_next(owner="w", lease_expires=T0 + 5, now=T0, limit=10, queues=[]) == [], (
        "queues=[] serves no lane"
    )
    rest = store.claim_next(
        owner="w", lease_expires=T0 + 5, now=T0, limit=10, queues=("reports", "default")
    )
    assert sorted(ids_of(rest)) == ["d1", "r1"], f"several queues (got {ids_of(rest)})"


def check_claim_next_skips_non_ready(store: Store) -> None:
    store.insert_many([new_task("p"), new_task("r"), new_task("x")])
    make_ready(store, "r", "x")
    store.transition("x", expected_version=1, state=S.CANCELLED, now=T0)
    got = store.claim_next(owner="w", lease_expires=T0 + 5, now=T0, limit=10)
    assert ids_of(got) == ["r"], f"only READY tasks are claimed (got {ids_of(got)})"


def check_claim_next_threads(store: Store) -> None:
    n = 120
    ids = [f"t{i:03d}" for i in range(n)]
    store.insert_many([new_task(i) for i in ids])
    make_ready(store, *ids)
    got: list[list[str]] = [[] for _ in range(4)]

    def work(k: int) -> None:
        while True:
            batch = store.claim_next(owner=f"w{k}", lease_expires=T0 + 60, now=T0, limit=3)
            if not batch:
                return
            got[k].extend(ids_of(batch))

    in_threads(work, "claim_next")
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
    store.insert_many([new_task(i) for i in ids])
    versions = {t.id: t.version for t in make_ready(store, *ids)}
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

    in_threads(work, "claim/finish", interleave=True)
    flat = sorted(i for w in won for i in w)
    assert flat == ids, f"every task is claimed exactly once (claims: {len(flat)} for {n})"
    for k in range(4):
        for i in won[k]:
            t = store.get(i)
            assert (t.state, t.result) == (S.SUCCEEDED, k), f"{i} ended as its winner left it"


# -- heartbeat / finish ---------------------------------------------------------------------------
def check_heartbeat(store: Store) -> None:
    store.insert(new_task("a"))
    c = make_running(store, "a", owner="w1", lease=T0 + 10)
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


def check_finish_many_from_claimed(store: Store) -> None:
    """Outcomes that carry the snapshot their owner claimed give the same ended snapshots as
    those read back from the store, after heartbeats moved the version and the lease."""
    if not isinstance(store, SupportsFinishMany):
        return
    store.insert_many([new_task(i, args=(i, [1, 2])) for i in ("e", "f", "g")])
    e = make_running(store, "e", owner="w1")
    f = make_running(store, "f", owner="w1")
    g = make_running(store, "g", owner="w2")
    assert store.heartbeat("e", owner="w1", lease_expires=T0 + 50, now=T0 + 2)
    assert store.heartbeat("e", owner="w1", lease_expires=T0 + 60, now=T0 + 3)
    out = store.finish_many(
        [
            Finish("e", "w1", S.SUCCEEDED, {"result": {"k": [1, "x"]}}, e),
            Finish("f", "w1", S.FAILED, {"error": "boom"}, f),
            Finish("g", "w1", S.SUCCEEDED, {"result": None}, g),  # w2 holds it
        ],
        now=T0 + 5,
    )
    assert out[2] is None, "a finish by an owner that does not hold the task is discarded"
    for ch, task_id in ((out[0], "e"), (out[1], "f")):
        assert ch is not None, f"{task_id} is finished"
        assert ch.task == store.get(task_id), (
            f"the ended snapshot of {task_id} built from the claimed one is the stored task "
            f"(got {ch.task!r}, stored {store.get(task_id)!r})"
        )
    assert store.get("g") == g, "the task another owner holds is unchanged"


def check_heartbeat_many(store: Store) -> None:
    """Several leases extended in one step, each as ``heartbeat`` extends it."""
    if not isinstance(store, SupportsHeartbeatMany):
        return
    store.insert_many([new_task(i) for i in ("a", "b", "c", "d")])
    a = make_running(store, "a", owner="w1", lease=T0 + 10)
    b = make_running(store, "b", owner="w2", lease=T0 + 10)
    make_running(store, "c", owner="w1", lease=T0 + 10)
    store.finish("c", owner="w1", state=S.SUCCEEDED, now=T0 + 1)
    d = store.get("d")
    assert store.heartbeat_many([], lease_expires=T0 + 20, now=T0 + 5) == [], "nothing to extend"
    got = store.heartbeat_many(
        [Lease("a", "w1"), Lease("b", "w1"), Lease("c", "w1"), Lease("d", "w1"), Lease("x", "w1")],
        lease_expires=T0 + 20,
        now=T0 + 5,
    )
    assert got == [True, False, False, False, False], (
        f"only a lease its owner holds on a RUNNING task is extended (got {got})"
    )
    t = store.get("a")
    assert (t.lease_expires, t.version, t.state, t.updated, t.lease_owner) == (
        T0 + 20,
        a.version + 1,
        S.RUNNING,
        T0 + 5,
        "w1",
    ), f"heartbeat_many extends the lease, version + 1 (got {t!r})"
    assert store.get("b") == b, "another owner's lease is left as it was"
    assert store.get("d") == d, "a task not RUNNING is left as it was"


def check_finish_owner_only(store: Store) -> None:
    store.insert(new_task("a"))
    c = make_running(store, "a", owner="w1")
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
    store.insert(new_task("a"))
    make_running(store, "a")
    t = store.finish("a", owner="w1", state=S.FAILED, now=T0 + 1, error="ValueError: bad input 'x'")
    assert t is not None
    assert t.task.state is S.FAILED
    got = store.get("a")
    assert got.error == "ValueError: bad input 'x'", f"the error text is kept ({got.error!r})"
    assert got.attempts == 1


def check_finish_forbidden(store: Store) -> None:
    store.insert(new_task("a"))
    c = make_running(store, "a")
    expect(
        InvalidTransitionError,
        lambda: store.finish("a", owner="w1", state=S.CANCELLED, now=T0),
        "finish to CANCELLED (a running task cannot be cancelled)",
    )
    assert store.get("a") == c, "a refused finish changes nothing"


def check_finish_stale_owner(store: Store) -> None:
    store.insert(new_task("a"))
    make_running(store, "a", owner="w1", lease=T0 + 5)
    expired = store.expired_leases(T0 + 6, limit=10)
    assert ids_of(expired) == ["a"], f"the lapsed lease is reported ({ids_of(expired)})"
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
    make_running(store, "a", owner="w2", lease=T0 + 60)
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
    store.insert(new_task("a"))
    make_running(store, "a")
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
    make_ready(store, "a", now=T0 + 11)
    c = store.claim_next(owner="w2", lease_expires=T0 + 60, now=T0 + 11, limit=1)
    assert ids_of(c) == ["a"], "the second run counts attempt 2"
    assert c[0].attempts == 2, "the second run counts attempt 2"


def check_finish_release(store: Store) -> None:
    store.insert(new_task("a"))
    make_running(store, "a")
    ch = store.finish("a", owner="w1", state=S.READY, now=T0 + 1)
    assert ch is not None, "a released task is READY again"
    assert ch.task.state is S.READY, "a released task is READY again"
    assert ch.task.lease_owner is None, "release clears the lease"
    assert ch.task.lease_expires is None, "release clears the lease"
    again = store.claim_next(owner="w2", lease_expires=T0 + 9, now=T0 + 2, limit=5)
    assert ids_of(again) == ["a"], "a released task can be claimed again"


def check_finish_many(store: Store) -> None:
    """Several outcomes in one step, each as ``finish`` stores it; a lost lease is ``None``."""
    if not isinstance(store, SupportsFinishMany):
        return
    store.insert_many([new_task(i) for i in ("a", "b", "c", "d")])
    store.insert(new_task("after_a", after=("a",)))
    for i in ("a", "b", "c"):
        make_running(store, i)
    make_running(store, "d", owner="w2")
    assert store.finish_many([], now=T0 + 5) == [], "an empty batch stores nothing"
    out = store.finish_many(
        [
            Finish("a", "w1", S.SUCCEEDED, {"result": 7}),
            Finish("b", "w1", S.FAILED, {"error": "boom"}),
            Finish("c", "w1", S.PENDING, {"due": T0 + 60, "error": "retry"}),
            Finish("d", "w1", S.SUCCEEDED),  # w2 holds it
            Finish("ghost", "w1", S.SUCCEEDED),
        ],
        now=T0 + 5,
    )
    assert len(out) == 5, f"one result per item (got {len(out)})"
    a, b, c, d, ghost = out
    assert d is None, "a finish by an owner that does not hold the task is discarded (None)"
    assert ghost is None, "a finish of a missing task is None"
    assert a is not None, "a held task is finished"
    assert b is not None, "a held task is finished"
    assert c is not None, "a held task is finished"
    assert (a.task.state, a.task.result, a.task.lease_owner) == (S.SUCCEEDED, 7, None), (
        f"finish_many stores each outcome as finish does (got {a.task!r})"
    )
    assert ids_of(a.dependents) == ["after_a"], "a's end settles its dependents in the same step"
    assert (b.task.state, b.task.error) == (S.FAILED, "boom"), f"got {b.task!r}"
    assert (c.task.state, c.task.due) == (S.PENDING, T0 + 60), f"got {c.task!r}"
    for ch in (a, b, c):
        assert store.get(ch.task.id) == ch.task, f"finish_many's snapshot of {ch.task.id} is stored"
    assert store.get("d").state is S.RUNNING, "the task another owner holds is unchanged"
    make_running(store, "c")
    expect(
        InvalidTransitionError,
        lambda: store.finish_many(
            [Finish("c", "w1", S.SUCCEEDED), Finish("d", "w2", S.RUNNING)], now=T0 + 6
        ),
        "finish_many with a state no run ends in",
    )
    assert store.get("c").state is S.RUNNING, "a refused finish_many stores none of its outcomes"
