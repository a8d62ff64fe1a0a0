"""``PostgresStore.insert`` in one autocommitted statement, and what it leaves to a transaction;
a promotion in one autocommitted statement.

Every on_conflict mode against a free id, an existing task, a running one and an id taken by a
transaction that commits while the statement waits; tasks with upstream tasks; several threads
inserting the same id at once. The contract suite checks the same behaviour on every store.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from timewheel.errors import DuplicateKeyError, VersionConflictError
from timewheel.stores.base import OnConflict
from timewheel.stores.postgres import PostgresStore, inserts
from timewheel.stores.postgres.connections import Connections
from timewheel.stores.sqlite.codec import TASKS
from timewheel.task import Task, TaskState

Schemas = Callable[[], tuple[str, str]]


def _task(task_id: str, due: float = 100.0, **kw: Any) -> Task:
    return Task(id=task_id, func="tests.apps.worker_app:record", args=("x",), due=due, **kw)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Each unit of work the stores run: (what, autocommitted?); not the announcements the
    store sends from its own thread after an insert committed."""
    seen: list[tuple[str, bool]] = []
    real = Connections.run

    def spy(self: Connections, doing: str, work: Any, *, autocommit: bool = False) -> Any:
        if doing != "announcing inserted work":
            seen.append((doing, autocommit))
        return real(self, doing, work, autocommit=autocommit)

    monkeypatch.setattr(Connections, "run", spy)
    return seen


@pytest.fixture
def pg(postgres_schemas: Schemas, runs: list[tuple[str, bool]]) -> Iterator[PostgresStore]:
    """A store opened after the spy is in place (it keeps the pool's bound method)."""
    dsn, name = postgres_schemas()
    store = PostgresStore(dsn, schema=name, pool_size=8)
    runs.clear()
    yield store
    store.close()


def _running(pg: PostgresStore, task_id: str) -> None:
    pg.promote([task_id], 1e9)
    assert pg.claim(task_id, expected_version=1, owner="w", lease_expires=2e9, now=1e9)


@pytest.mark.parametrize("mode", ["error", "keep", "replace"])
def test_a_new_task_is_one_autocommitted_statement(
    pg: PostgresStore, runs: list[tuple[str, bool]], mode: OnConflict
) -> None:
    changed = pg.insert(_task("a", priority=3), on_conflict=mode)
    assert runs == [("inserting a task", True)]
    assert changed.task == pg.get("a")
    assert (changed.task.state, changed.task.version, changed.task.priority) == (
        TaskState.PENDING,
        0,
        3,
    )
    assert changed.dependents == ()
    # the version it returns is the one a compare-and-swap expects
    moved = pg.transition("a", expected_version=0, state=TaskState.CANCELLED, now=200.0)
    assert moved.task.version == 1


def test_an_existing_id_is_decided_by_the_same_statement_for_error_and_keep(
    pg: PostgresStore, runs: list[tuple[str, bool]]
) -> None:
    first = pg.insert(_task("a", due=100.0)).task
    runs.clear()
    with pytest.raises(DuplicateKeyError, match="'a'"):
        pg.insert(_task("a", due=500.0))
    kept = pg.insert(_task("a", due=500.0), on_conflict="keep")
    assert runs == [("inserting a task", True)] * 2
    assert kept.task == first == pg.get("a")


def test_replace_falls_back_to_the_transaction(
    pg: PostgresStore, runs: list[tuple[str, bool]]
) -> None:
    pg.insert(_task("a", due=100.0))
    runs.clear()
    new = pg.insert(_task("a", due=500.0), on_conflict="replace").task
    assert runs == [("inserting a task", True), ("inserting a task", False)]
    assert (new.due, new.version) == (500.0, 1)  # past the old version: a stale CAS misses
    assert pg.get("a") == new
    with pytest.raises(VersionConflictError):
        pg.transition("a", expected_version=0, state=TaskState.CANCELLED, now=200.0)


def test_a_running_task_is_never_replaced_nor_overwritten(pg: PostgresStore) -> None:
    pg.insert(_task("a", due=100.0))
    _running(pg, "a")
    with pytest.raises(VersionConflictError, match="running"):
        pg.insert(_task("a", due=500.0), on_conflict="replace")
    with pytest.raises(DuplicateKeyError):
        pg.insert(_task("a", due=500.0))
    kept = pg.insert(_task("a", due=500.0), on_conflict="keep").task
    assert kept.state is TaskState.RUNNING
    assert pg.get("a").due == 100.0


def test_tasks_with_upstream_tasks_are_counted_in_the_transaction(
    pg: PostgresStore, runs: list[tuple[str, bool]]
) -> None:
    pg.insert(_task("up"))
    pg.insert(_task("done"))
    pg.transition("done", expected_version=0, state=TaskState.CANCELLED, now=150.0)
    runs.clear()
    waiting = pg.insert(_task("down", after=("up",))).task
    failed = pg.insert(_task("after-cancelled", after=("done",))).task
    assert runs == [("inserting a task", False)] * 2
    assert (waiting.state, waiting.unmet) == (TaskState.PENDING, 1)
    assert failed.state is TaskState.UPSTREAM_FAILED
    # the edge is recorded: the upstream's end releases the dependent
    pg.promote(["up"], 1e9)
    assert pg.claim("up", expected_version=1, owner="w", lease_expires=2e9, now=1e9)
    done = pg.finish("up", owner="w", state=TaskState.SUCCEEDED, now=1e9)
    assert done is not None
    assert [(t.id, t.unmet) for t in done.dependents] == [("down", 0)]


def _hold(dsn: str, schema: str, task: Task) -> psycopg.Connection[Any]:
    """A transaction that has inserted *task* and not committed."""
    conn = psycopg.connect(dsn)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    cols = ", ".join(TASKS.names)
    marks = ", ".join(["%s"] * len(TASKS.names))
    conn.execute(f"INSERT INTO tasks ({cols}) VALUES ({marks})".encode(), TASKS.encode(task))
    return conn


def _waiting(dsn: str, n: int = 1) -> bool:
    """Some store connection waits on a lock."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with psycopg.connect(dsn, autocommit=True) as conn:
            got = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone()
        if got is not None and got[0] >= n:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("mode", ["keep", "error", "replace"])
def test_an_id_committed_while_the_insert_waits(
    postgres_schemas: Schemas, runs: list[tuple[str, bool]], mode: OnConflict
) -> None:
    dsn, name = postgres_schemas()
    with PostgresStore(dsn, schema=name) as pg:
        other = _hold(dsn, name, _task("a", due=100.0))
        out: list[object] = []

        def insert() -> None:
            try:
                out.append(pg.insert(_task("a", due=500.0), on_conflict=mode).task)
            except DuplicateKeyError as e:
                out.append(e)

        runs.clear()
        t = threading.Thread(target=insert)
        t.start()
        assert _waiting(dsn)  # the insert waits for the other transaction's row
        other.commit()
        other.close()
        t.join(10)
        ran = list(runs)
        stored = pg.get("a")
        if mode == "keep":
            assert ran == [("inserting a task", True)]  # the second statement reads the row
            assert out == [stored]
            assert stored.due == 100.0
        elif mode == "error":
            assert ran == [("inserting a task", True)]
            assert len(out) == 1
            assert isinstance(out[0], DuplicateKeyError)
        else:
            assert ran == [("inserting a task", True), ("inserting a task", False)]
            assert out == [stored]
            assert (stored.due, stored.version) == (500.0, 1)


def test_a_task_deleted_between_the_two_statements_is_inserted_by_the_transaction(
    pg: PostgresStore, runs: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pg.insert(_task("a", due=100.0))
    statement = inserts.INSERT_NEW_PREPARED
    real = statement.run

    def deleted_after_the_insert(conn: Any, params: Any) -> Any:
        # the task holding the id is deleted right after the insert met it
        result = real(conn, params)
        conn.execute("DELETE FROM tasks WHERE id = %s", (params[0],))
        return result

    monkeypatch.setattr(statement, "run", deleted_after_the_insert)
    runs.clear()
    got = pg.insert(_task("a", due=500.0), on_conflict="keep").task
    assert runs == [("inserting a task", True), ("inserting a task", False)]
    assert got == pg.get("a")
    assert (got.due, got.version) == (500.0, 0)


@pytest.mark.parametrize("mode", ["error", "keep", "replace"])
def test_threads_inserting_one_id_at_once(pg: PostgresStore, mode: OnConflict) -> None:
    n = 6
    start = threading.Barrier(n)
    outcomes: list[object] = []
    lock = threading.Lock()

    def insert(i: int) -> None:
        start.wait()
        try:
            got: object = pg.insert(_task("same", due=100.0 + i), on_conflict=mode).task
        except (DuplicateKeyError, VersionConflictError) as e:
            got = type(e)
        with lock:
            outcomes.append(got)

    threads = [threading.Thread(target=insert, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(outcomes) == n
    final = pg.get("same")
    assert pg.count_by_state() == {TaskState.PENDING: 1}
    tasks = [o for o in outcomes if isinstance(o, Task)]
    if mode == "error":
        assert Counter(Task if isinstance(o, Task) else o for o in outcomes) == {
            Task: 1,
            DuplicateKeyError: n - 1,
        }
        assert tasks == [final]
    elif mode == "keep":
        assert len(tasks) == n
        assert all(t == final for t in tasks)  # every caller gets the one task that stands
        assert final.version == 0
    else:
        assert len(tasks) == n
        # each replacement moved past the version it replaced: n inserts, n - 1 replacements
        assert final.version == n - 1
        assert sorted(t.version for t in tasks) == list(range(n))
        assert final in tasks


def test_a_promotion_alone_is_one_autocommitted_statement(
    pg: PostgresStore, runs: list[tuple[str, bool]]
) -> None:
    pg.insert(_task("a", due=100.0))
    runs.clear()
    assert [t.id for t in pg.promote(["a"], 200.0)] == ["a"]
    assert runs == [("promoting tasks", True)]
    pg.promote([], 200.0, successors=[_task("b", due=300.0)])  # with successors: a transaction
    assert runs[-1] == ("promoting tasks", False)
    assert pg.get("b").state is TaskState.PENDING
    # its commit skipped the WAL flush, and only its own: the pooled connections still flush
    settings = {
        r[0] for _ in range(4) for r in pg.read_rows("SELECT current_setting('synchronous_commit')")
    }
    assert settings == {"on"}
