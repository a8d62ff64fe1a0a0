"""A PostgreSQL store's claims and grouped finishes (:mod:`timewheel.stores.postgres.runs`)
against a real server: one statement for a group, compare-and-swap per row, dependents settled,
edges committed during a finish followed, a connection killed mid-finish, a hand-back of tasks
whose function does not import here.

Each test works in a fresh schema of the database ``TIMEWHEEL_POSTGRES_DSN`` names, dropped after.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conftest import postgres_dsn
from timewheel import refs
from timewheel.stores.base import Finish, SupportsPendingAmong
from timewheel.stores.postgres import PostgresStore
from timewheel.stores.postgres.connections import APPLICATION_NAME
from timewheel.stores.postgres.runs import check_finishes, group_statement
from timewheel.stores.postgres.schema import COLUMN_TYPES
from timewheel.task import Task, TaskState

S = TaskState
T0 = 1_700_000_000.0
FUNC = "tests.apps.worker_app:record"
Schemas = Callable[[], tuple[str, str]]


@pytest.fixture
def pg(postgres_schemas: Schemas) -> Iterator[PostgresStore]:
    dsn, name = postgres_schemas()
    store = PostgresStore(dsn, schema=name, pool_size=4)
    yield store
    store.close()


def _task(task_id: str, **kw: Any) -> Task:
    kw.setdefault("func", FUNC)
    kw.setdefault("created", T0 - 10)
    kw.setdefault("due", T0)
    return Task(id=task_id, **kw)


def _running(store: PostgresStore, ids: list[str], owner: str = "w1") -> dict[str, Task]:
    store.promote(ids, T0)
    got = store.claim_next(owner=owner, lease_expires=T0 + 60, now=T0, limit=len(ids))
    assert sorted(t.id for t in got) == sorted(ids), "every READY task was claimed"
    return {t.id: t for t in got}


def _holder(store: PostgresStore) -> psycopg.Connection[tuple[Any, ...]]:
    conn = psycopg.connect(postgres_dsn())
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(store.schema)))
    return conn


def _wait_for_lock_wait(store: PostgresStore) -> None:
    """Until one of *store*'s backends waits on a row lock (its statement started)."""
    deadline = time.monotonic() + 10
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        while time.monotonic() < deadline:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = %s AND wait_event_type = 'Lock'",
                (APPLICATION_NAME,),
            ).fetchone()
            if row is not None and row[0] >= 1:
                return
            time.sleep(0.01)
    raise AssertionError("the finish never waited on the row lock")


def _count_updates(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count the statements the store sends, by their first word."""
    seen: Counter[str] = Counter()
    execute = psycopg.Connection.execute

    def counting(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query.decode() if isinstance(query, bytes) else str(query)
        seen[text.split(None, 1)[0].upper()] += 1
        return execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    return seen


def test_a_group_of_successes_is_one_update(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"t{i:02d}" for i in range(50)]
    pg.insert_many([_task(i) for i in ids])
    claimed = _running(pg, ids)
    seen = _count_updates(monkeypatch)
    out = pg.finish_many(
        [Finish(i, "w1", S.SUCCEEDED, {"result": {"n": k}}) for k, i in enumerate(ids)],
        now=T0 + 5,
    )
    assert seen["UPDATE"] == 1, f"one UPDATE for the group (sent {dict(seen)})"
    assert seen["SELECT"] == 0, f"no row is read before it is changed (sent {dict(seen)})"
    assert seen["DELETE"] == 1, "one statement takes the dependency edges of the group"
    for k, (i, ch) in enumerate(zip(ids, out, strict=True)):
        assert ch is not None
        assert ch.task == pg.get(i), "the snapshot returned is the row stored"
        assert (ch.task.state, ch.task.result, ch.task.lease_owner) == (S.SUCCEEDED, {"n": k}, None)
        assert ch.task.version == claimed[i].version + 1
        assert ch.task.updated == T0 + 5
        assert ch.dependents == ()


def test_a_lost_lease_inside_a_group_is_none_and_left_alone(pg: PostgresStore) -> None:
    pg.insert_many([_task(i) for i in ("a", "b", "c")])
    _running(pg, ["a", "b", "c"])
    # b's lease expired and the trigger put it back; another worker holds it now
    b = pg.get("b")
    pg.transition("b", expected_version=b.version, state=S.PENDING, now=T0 + 1, due=T0 + 1)
    pg.promote(["b"], T0 + 2)
    (b2,) = pg.claim_next(owner="w2", lease_expires=T0 + 60, now=T0 + 2, limit=5)
    out = pg.finish_many(
        [Finish(i, "w1", S.SUCCEEDED, {"result": i}) for i in ("a", "b", "c")], now=T0 + 5
    )
    assert [ch is not None for ch in out] == [True, False, True], (
        "the task another owner holds is reported lost (None), the others are finished"
    )
    assert pg.get("b") == b2, "the row another owner holds is unchanged"
    assert pg.get("a").state is S.SUCCEEDED
    assert pg.get("c").state is S.SUCCEEDED


def test_a_task_finished_twice_in_one_call_counts_once(pg: PostgresStore) -> None:
    pg.insert(_task("a"))
    _running(pg, ["a"])
    first, second = pg.finish_many(
        [Finish("a", "w1", S.SUCCEEDED, {"result": 1}), Finish("a", "w1", S.FAILED)],
        now=T0 + 5,
    )
    assert first is not None
    assert second is None, "the second finish finds the task no longer RUNNING"
    assert (pg.get("a").state, pg.get("a").result) == (S.SUCCEEDED, 1)


def test_the_dependents_of_a_group_are_settled(pg: PostgresStore) -> None:
    pg.insert_many([_task(i) for i in ("a", "b", "c")])
    pg.insert(_task("both", after=("a", "b")))
    pg.insert(_task("after_c", after=("c",)))
    pg.insert(_task("after_after_c", after=("after_c",)))
    _running(pg, ["a", "b", "c"])
    a, b, c = pg.finish_many(
        [
            Finish("a", "w1", S.SUCCEEDED, {"result": 1}),
            Finish("c", "w1", S.FAILED, {"error": "boom"}),
            Finish("b", "w1", S.SUCCEEDED, {"result": 2}),
        ],
        now=T0 + 5,
    )
    assert a is not None
    assert b is not None
    assert c is not None
    both = pg.get("both")
    assert (both.state, both.unmet) == (S.PENDING, 0), "both upstreams succeeded: it may run"
    assert pg.get("after_c").state is S.UPSTREAM_FAILED
    assert pg.get("after_after_c").state is S.UPSTREAM_FAILED, "the failure cascades"
    settled = [t.id for ch in (a, b, c) for t in ch.dependents]
    assert sorted(settled) == ["after_after_c", "after_c", "both", "both"], (
        f"each finish reports the dependents it changed (got {settled})"
    )
    with _holder(pg) as conn:
        (edges,) = conn.execute("SELECT count(*) FROM deps").fetchone() or (None,)
    assert edges == 0, "every edge of an ended task is followed once and forgotten"


def test_an_edge_committed_while_the_group_finishes_is_followed(pg: PostgresStore) -> None:
    """An inserter holds the upstream FOR SHARE (as insert does while it counts dependencies)
    and adds an edge; the finish waits for it and then still sees the edge."""
    pg.insert_many([_task("a"), _task("late")])
    _running(pg, ["a"])
    holder = _holder(pg)
    holder.execute("SELECT state FROM tasks WHERE id = 'a' FOR SHARE")
    holder.execute("UPDATE tasks SET unmet = 1 WHERE id = 'late'")
    holder.execute("INSERT INTO deps (upstream, downstream) VALUES ('a', 'late')")
    result: list[object] = []
    finisher = threading.Thread(
        target=lambda: result.extend(
            pg.finish_many([Finish("a", "w1", S.SUCCEEDED, {"result": 1})], now=T0 + 5)
        )
    )
    finisher.start()
    try:
        _wait_for_lock_wait(pg)
    finally:
        holder.commit()
        holder.close()
    finisher.join(30)
    assert not finisher.is_alive()
    (changed,) = result
    assert changed is not None
    late = pg.get("late")
    assert (late.state, late.unmet) == (S.PENDING, 0), "the edge committed meanwhile is followed"


def test_a_connection_killed_mid_group_finish_loses_nothing(pg: PostgresStore) -> None:
    ids = [f"t{i:02d}" for i in range(20)]
    pg.insert_many([_task(i) for i in ids])
    claimed = _running(pg, ids)
    holder = _holder(pg)
    holder.execute("SELECT 1 FROM tasks WHERE id = 't07' FOR UPDATE")  # the group waits on it
    result: list[object] = []
    finisher = threading.Thread(
        target=lambda: result.extend(
            pg.finish_many([Finish(i, "w1", S.SUCCEEDED, {"result": i}) for i in ids], now=T0)
        )
    )
    finisher.start()
    try:
        _wait_for_lock_wait(pg)
        with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                "current_database() AND application_name = %s AND wait_event_type = 'Lock'",
                (APPLICATION_NAME,),
            ).fetchall()
        assert len(killed) == 1, "the finishing backend died inside its transaction"
    finally:
        holder.rollback()
        holder.close()
    finisher.join(30)
    assert not finisher.is_alive()
    assert all(ch is not None for ch in result), "the retried group finished every task"
    for i in ids:
        t = pg.get(i)
        assert (t.state, t.result) == (S.SUCCEEDED, i)
        assert t.version == claimed[i].version + 1, (
            "each row changed once: the killed attempt left nothing"
        )


def test_a_task_whose_function_does_not_import_is_handed_back_as_it_was(
    pg: PostgresStore,
) -> None:
    ghost = "no_such_module_for_tw_runs_tests:job"
    refs.permit_imports(["no_such_module_for_tw_runs_tests"])  # as an allowlist naming it would
    pg.insert_many([_task("g", func=ghost, priority=5), _task("ok")])
    pg.promote(["g", "ok"], T0)
    before = pg.get("g")
    got = pg.claim_next(owner="w", lease_expires=T0 + 9, now=T0 + 1, limit=10)
    assert [t.id for t in got] == ["ok"], "the task this process cannot run is not returned"
    g = pg.get("g")
    assert g.state is S.READY, "handed back READY at once, not after its lease"
    assert (g.attempts, g.started, g.lease_owner, g.lease_expires) == (
        before.attempts,
        before.started,
        None,
        None,
    ), "its run count and previous start are restored"
    assert g.version > before.version, "a snapshot from before the claim cannot swap it"
    assert pg.claim_next(owner="w", lease_expires=T0 + 9, now=T0 + 1, limit=10) == []
    assert pg.unresolvable() == {ghost: 1}


def test_pending_among_names_the_tasks_still_waiting(pg: PostgresStore) -> None:
    assert isinstance(pg, SupportsPendingAmong)
    pg.insert_many([_task("waits", schedule_id=None), _task("moved"), _task("up")])
    pg.insert(_task("blocked", after=("up",)))
    pg.promote(["moved"], T0)
    got = pg.pending_among(["moved", "blocked", "missing", "waits", "up"])
    assert got == [("up", T0, None), ("waits", T0, None)], (
        f"only PENDING tasks with no unmet dependency, as due_before gives them (got {got})"
    )
    assert pg.pending_among([]) == []


def test_the_column_types_are_the_tables(pg: PostgresStore) -> None:
    rows = pg.read_rows(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 'tasks'",
        (pg.schema,),
    )
    assert dict(rows) == COLUMN_TYPES, "a finish casts each value to its column's own type"


def test_a_group_stores_nulls_beside_values_of_every_type(pg: PostgresStore) -> None:
    ids = ["a", "b", "c", "d", "e"]
    pg.insert_many([_task(i) for i in ids])
    _running(pg, ids)
    text = 'quote " backslash \\ newline \n tab \t unicode é ∞ \u0001'
    out = pg.finish_many(
        [
            Finish("a", "w1", S.SUCCEEDED, {"result": None}),
            Finish("b", "w1", S.SUCCEEDED, {"result": {"text": text, "n": [1, 2.5, None]}}),
            Finish("c", "w1", S.PENDING, {"due": T0 + 30, "error": None}),
            Finish("d", "w1", S.PENDING, {"due": T0 + 31.000001, "error": text}),
            Finish("e", "w1", S.FAILED, {"error": "x" * 10_000, "attempts": 7}),
        ],
        now=T0 + 5,
    )
    got = {ch.task.id: ch.task for ch in out if ch is not None}
    assert sorted(got) == ids, "every finish of a held task is stored"
    for i in ids:
        assert pg.get(i) == got[i], f"the snapshot of {i} is the row stored"
    assert got["a"].result is None
    assert got["b"].result == {"text": text, "n": [1, 2.5, None]}, "a result's text is kept"
    assert (got["c"].due, got["c"].error) == (T0 + 30, None), "a NULL beside a value is stored"
    assert (got["d"].due, got["d"].error) == (T0 + 31.000001, text)
    assert (got["e"].error, got["e"].attempts) == ("x" * 10_000, 7)


def test_a_group_finds_its_rows_by_primary_key(pg: PostgresStore) -> None:
    ids = [f"t{i:03d}" for i in range(200)]
    pg.insert_many([_task(i) for i in ids])
    # (in a table of a few thousand rows a scan of it all is the cheaper plan, and is chosen)
    pg.insert_many([_task(f"later{i:05d}", due=T0 + 3600) for i in range(20_000)])
    claimed = _running(pg, ids)
    with _holder(pg) as conn:
        conn.execute("ANALYZE tasks")
        conn.commit()
    prepared = check_finishes(
        [Finish(i, "w1", S.SUCCEEDED, {"result": None}, claimed[i]) for i in ids]
    )
    rows = json.dumps([p[3] for p in prepared])
    statement = group_statement(("result", "result_repr")).decode()
    plan = pg.read_rows("EXPLAIN " + statement, ("succeeded", 0, rows))
    text = "\n".join(str(r[0]) for r in plan)
    assert "tasks_pkey" in text, f"each row is looked up on the primary key:\n{text}"
