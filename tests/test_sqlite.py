"""SQLiteStore-only tests on real files: reopen, pragmas, schema, bad files, fork, references.

The behaviour every store shares is in ``test_store_contract.py``.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from timewheel import refs
from timewheel._contract import CHECKS, FUNC, T0
from timewheel.errors import (
    InvalidScheduleError,
    SchemaVersionError,
    SerializationError,
    StoreConfigError,
    StoreCorruptError,
    StoreError,
)
from timewheel.stores import open_store
from timewheel.stores.memory import MemoryStore
from timewheel.stores.sqlite import APPLICATION_ID, SCHEMA_VERSION, SQLiteStore, connections, schema
from timewheel.stores.sqlite import store as sqlite_store
from timewheel.task import Retry, ScheduleRecord, Task, TaskState

S = TaskState


def _task(task_id: str, due: float = T0, **kw: object) -> Task:
    kw.setdefault("func", FUNC)
    kw.setdefault("created", T0 - 10)
    return Task(id=task_id, due=due, **kw)  # type: ignore[arg-type]  # test helper


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tw.db"


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db)
    yield s
    s.close()


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- persistence -------------------------------------------------------------------------------
def test_reopen_after_close_keeps_everything(db: Path) -> None:
    s = SQLiteStore(db)
    s.insert_many([_task(f"t{i}", due=T0 + i, priority=i % 3) for i in range(5)])
    s.insert(_task("dep", after=("t0", "t1")))
    s.promote(["t0", "t1"], T0 + 10)
    s.claim_next(owner="w", lease_expires=T0 + 60, now=T0 + 10, limit=1)
    s.put_schedule(
        ScheduleRecord(id="s", func=FUNC, rule={"kind": "every", "seconds": 5}, created=T0),
        first=_task("s@1", schedule_id="s", retry=Retry(max_attempts=2, retry_on=(OSError,))),
    )
    before_tasks = s.tasks()
    before_sched = s.list_schedules()
    s.close()
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0

    s2 = SQLiteStore(db)
    try:
        assert s2.tasks() == before_tasks
        assert s2.list_schedules() == before_sched
        assert s2.get("s@1").retry == Retry(max_attempts=2, retry_on=(OSError,))
        # dependencies survive the restart: finishing t1 and t0 releases dep
        running = s2.tasks(state=S.RUNNING)
        assert len(running) == 1
        s2.finish(running[0].id, owner="w", state=S.SUCCEEDED, now=T0 + 11)
        other = s2.claim_next(owner="w2", lease_expires=T0 + 60, now=T0 + 11, limit=1)[0]
        ch = s2.finish(other.id, owner="w2", state=S.SUCCEEDED, now=T0 + 12)
        assert ch is not None
        assert [t.id for t in ch.dependents] == ["dep"]
        assert s2.get("dep").unmet == 0
    finally:
        s2.close()


def test_pragmas_on_every_connection(db: Path) -> None:
    for durability, sync in (("durable", 2), ("fast", 1)):
        path = db.with_name(f"{durability}.db")
        s = SQLiteStore(path, durability=durability, busy_timeout=2.5)  # type: ignore[arg-type]
        try:
            seen: list[tuple[object, ...]] = []

            def probe(s: SQLiteStore = s, seen: list[tuple[object, ...]] = seen) -> None:
                c = s._connections.get()
                seen.append(
                    (
                        c.execute("PRAGMA journal_mode").fetchone()[0],
                        c.execute("PRAGMA synchronous").fetchone()[0],
                        c.execute("PRAGMA busy_timeout").fetchone()[0],
                        c.isolation_level,
                    )
                )

            probe()
            th = threading.Thread(target=probe)
            th.start()
            th.join()
            assert seen == [("wal", sync, 2500, None)] * 2
            assert s._connections.get() is s._connections.get()  # one connection per thread
        finally:
            s.close()


def test_schema_version_and_application_id(store: SQLiteStore, db: Path) -> None:
    c = _raw(db)
    assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert c.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    idx = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"tasks_due", "tasks_ready", "tasks_lease", "tasks_state"} <= idx
    c.close()


def test_queries_use_the_indexes(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot paths read their partial index in order: no full scan, no sort."""
    store.insert_many([_task(f"t{i}", due=T0 + i, queue=f"q{i % 3}") for i in range(50)])
    store.promote([f"t{i}" for i in range(0, 50, 2)], T0 + 100)
    store.claim_next(owner="w", lease_expires=T0 + 60, now=T0, limit=5)
    plans: list[str] = []
    real = store._connections.get()

    class Spy:
        def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
            if sql.lstrip().startswith("SELECT") and "FROM tasks" in sql:
                p = real.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
                plans.append(" | ".join(r[-1] for r in p))
            cursor: sqlite3.Cursor = real.execute(sql, params)
            return cursor

    monkeypatch.setattr(store._connections, "get", Spy)
    store.due_before(T0 + 10, limit=5)
    store.ready(limit=5, queues=["q1"])
    store.expired_leases(T0 + 99, limit=5)
    monkeypatch.undo()
    assert len(plans) == 3, plans
    for name, plan in zip(("tasks_due", "tasks_ready", "tasks_lease"), plans, strict=True):
        assert f"USING INDEX {name}" in plan or f"COVERING INDEX {name}" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


def test_promote_looks_ids_up_by_the_primary_key(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """promote reads its ids through the primary key, not tasks_state (a scan of every task due,
    once per chunk: quadratic for a herd)."""
    store.insert_many([_task(f"t{i}", due=T0 + i) for i in range(50)])
    store._connections.checkpointer.stop()  # the spy stands in for every thread's connection
    plans: list[str] = []
    real = store._connections.get()

    class Spy:
        def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
            if "FROM tasks" in sql or sql.startswith("UPDATE tasks"):
                p = real.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
                plans.append(" | ".join(r[-1] for r in p))
            cursor: sqlite3.Cursor = real.execute(sql, params)
            return cursor

        def executemany(self, sql: str, params: Any) -> sqlite3.Cursor:
            cursor: sqlite3.Cursor = real.executemany(sql, params)
            return cursor

        @property
        def total_changes(self) -> int:
            return real.total_changes

    ways = (True, False) if sqlite_store._HAS_RETURNING else (False,)
    for first, returning in enumerate(ways):
        monkeypatch.setattr(store, "returning", returning)
        monkeypatch.setattr(store._connections, "get", Spy)
        plans.clear()
        moved = store.promote([f"t{i}" for i in range(first, 50, 2)], T0 + 100)
        monkeypatch.setattr(store._connections, "get", lambda: real)
        assert len(moved) == 25
        assert plans, "promote ran no statement on tasks"
        for plan in plans:
            assert "sqlite_autoindex_tasks_1 (id=?)" in plan, plan


@pytest.mark.parametrize("check", [c for c in CHECKS if "promote" in c.__name__])
def test_promote_without_returning(
    store: SQLiteStore, check: Callable[[SQLiteStore], None]
) -> None:
    """SQLite before 3.35 has no UPDATE ... RETURNING: promote reads, then compare-and-swaps."""
    store.returning = False
    check(store)


def test_migrations_run_in_order(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    SQLiteStore(db).close()
    extra = ("ALTER TABLE tasks ADD COLUMN note TEXT",)
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, extra))
    monkeypatch.setattr(schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    s = SQLiteStore(db)
    s.close()
    c = _raw(db)
    assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert "note" in {r[1] for r in c.execute("PRAGMA table_info(tasks)")}
    c.close()


def test_a_version_2_store_gains_the_start_column(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written before schema 3: its tasks read back with no start, its ended tasks
    count without one, and its runs record one from then on."""
    with monkeypatch.context() as m:
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:2])
        m.setattr(schema, "SCHEMA_VERSION", 2)
        SQLiteStore(db).close()
    c = _raw(db)
    assert c.execute("PRAGMA user_version").fetchone()[0] == 2
    assert "started" not in {r[1] for r in c.execute("PRAGMA table_info(tasks)")}
    us = round(T0 * 1e6)
    c.execute(  # a task that ran and ended under schema 2
        "INSERT INTO tasks (id, func, args, kwargs, due, state, version, attempts, priority, "
        "queue, created, updated) VALUES ('old', ?, '[]', '{}', ?, 'succeeded', 3, 1, 0, "
        "'default', ?, ?)",
        (FUNC, us, us, us + 5_000_000),
    )
    c.close()
    with SQLiteStore(db) as s:
        assert s.statistics(T0).schema_version == SCHEMA_VERSION == 3
        old = s.get("old")
        assert (old.state, old.started) == (TaskState.SUCCEEDED, None)
        assert s.ended_since(T0, limit=5) == [(TaskState.SUCCEEDED, T0, None, T0 + 5)]
        s.insert(_task("new", due=T0 - 1))
        s.promote(["new"], T0)
        claimed = s.claim("new", expected_version=1, owner="w", lease_expires=T0 + 9, now=T0 + 2)
        assert claimed is not None
        assert claimed.started == T0 + 2
        assert s.count_by_queue() == {"default": {TaskState.SUCCEEDED: 1, TaskState.RUNNING: 1}}
        assert [t.id for t in s.by_function(FUNC, limit=5)] == ["new", "old"]
    c = _raw(db)
    idx = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"tasks_ended", "tasks_queue", "tasks_func"} <= idx
    cols = [r[2] for r in c.execute("PRAGMA index_info(tasks_ended)")]
    assert cols == ["updated", "state", "due", "started"]
    c.close()


def test_inspection_reads_only_its_indexes(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard's counts by queue and ended runs read covering indexes (never the table);
    a search by function reads a range of its index in order."""
    store.insert_many([_task(f"t{i}", queue=f"q{i % 3}") for i in range(30)])
    plans: list[str] = []
    real = store._connections.get()

    class Spy:
        def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
            if sql.lstrip().startswith("SELECT") and "FROM tasks" in sql:
                p = real.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
                plans.append(" | ".join(r[-1] for r in p))
            cursor: sqlite3.Cursor = real.execute(sql, params)
            return cursor

    monkeypatch.setattr(store._connections, "get", Spy)
    store.count_by_queue()
    store.ended_since(T0, limit=5)
    store.by_function("tests.", limit=5)
    monkeypatch.undo()
    assert len(plans) == 3, plans
    assert "COVERING INDEX tasks_queue" in plans[0], plans[0]  # the other queues
    assert "COVERING INDEX tasks_state" in plans[0], plans[0]  # every queue, by state
    assert "COVERING INDEX tasks_ended" in plans[1], plans[1]
    assert "USING INDEX tasks_func (func>? AND func<?)" in plans[2], plans[2]
    for plan in plans:
        assert "TEMP B-TREE" not in plan, plan


# -- encoding ---------------------------------------------------------------------------------------
def test_times_are_integer_microseconds(store: SQLiteStore, db: Path) -> None:
    store.insert(_task("a", due=T0 + 0.1234564))
    c = _raw(db)
    due, typ = c.execute("SELECT due, typeof(due) FROM tasks WHERE id = 'a'").fetchone()
    c.close()
    assert typ == "integer"
    assert due == round((T0 + 0.1234564) * 1e6)
    assert store.get("a").due == pytest.approx(T0 + 0.123456, abs=1e-7)
    with pytest.raises(InvalidScheduleError, match="finite"):
        store.insert(_task("nan", due=float("nan")))


def test_callables_are_stored_as_references(store: SQLiteStore) -> None:
    t = store.insert(_task("a", func=refs.func_ref)).task
    assert t.func == "timewheel.refs:func_ref"
    assert store.get("a").func == "timewheel.refs:func_ref"
    with pytest.raises(SerializationError, match="lambda"):
        store.insert(_task("b", func=lambda: None))
    with pytest.raises(SerializationError, match=r"args\[0\] is a tuple"):
        store.insert(_task("c", args=((1, 2),)))

    class Local(Exception): ...

    with pytest.raises(SerializationError, match="inside another function"):
        store.insert(_task("d", retry=Retry(max_attempts=2, retry_on=(Local,))))
    assert [t.id for t in store.tasks()] == ["a"]


def test_result_that_is_not_json_is_kept_as_marked_repr(store: SQLiteStore) -> None:
    store.insert_many([_task("a"), _task("b")])
    store.promote(["a", "b"], T0)
    store.claim_next(owner="w", lease_expires=T0 + 9, now=T0, limit=2)
    ch = store.finish("a", owner="w", state=S.SUCCEEDED, now=T0, result={1, 2})
    assert ch is not None
    assert isinstance(ch.task.result, refs.ResultRepr)
    assert store.get("a").result == "{1, 2}"
    assert isinstance(store.get("a").result, refs.ResultRepr)
    store.finish("b", owner="w", state=S.SUCCEEDED, now=T0, result=(1, [2]))
    assert store.get("b").result == [1, [2]]  # results come back as JSON gives them


def test_finish_rejects_lease_fields(store: SQLiteStore) -> None:
    store.insert(_task("a"))
    store.promote(["a"], T0)
    store.claim_next(owner="w", lease_expires=T0 + 9, now=T0, limit=1)
    with pytest.raises(TypeError, match="clears the lease"):
        store.finish("a", owner="w", state=S.SUCCEEDED, now=T0, lease_owner="x")
    with pytest.raises(TypeError, match="cannot change 'unmet'"):
        store.finish("a", owner="w", state=S.SUCCEEDED, now=T0, unmet=3)


# -- unresolvable functions ---------------------------------------------------------------------------
def test_unresolvable_functions_are_not_claimed(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    ghost = "no_such_module_for_tw_tests:job"
    refs.permit_imports(["no_such_module_for_tw_tests"])  # as an allowlist naming it would
    store.insert_many([_task("g1", func=ghost, priority=5), _task("g2", func=ghost), _task("ok")])
    store.promote(["g1", "g2", "ok"], T0)
    with caplog.at_level(logging.WARNING, logger="timewheel.stores.sqlite"):
        got = store.claim_next(owner="w", lease_expires=T0 + 9, now=T0, limit=10)
        assert [t.id for t in got] == ["ok"]
        assert store.claim_next(owner="w", lease_expires=T0 + 9, now=T0, limit=10) == []
    assert sum(ghost in r.getMessage() for r in caplog.records) == 1  # warned once
    assert store.get("g1").state is S.READY
    assert store.get("g1").func == ghost  # read back as the string
    assert store.unresolvable() == {ghost: 2}
    assert store.statistics(T0).unresolvable == {ghost: 2}

    refs.register_task(ghost, refs.func_ref)  # now this process can run it
    try:
        got = store.claim_next(owner="w", lease_expires=T0 + 9, now=T0, limit=10)
        assert [t.id for t in got] == ["g1", "g2"]
        assert store.unresolvable() == {}
    finally:
        refs.unregister(ghost)


# -- bad files: clear errors, the file untouched ---------------------------------------------------------
def _bytes(p: Path) -> bytes:
    return p.read_bytes()


def test_missing_parent_directory(tmp_path: Path) -> None:
    p = tmp_path / "nope" / "tw.db"
    with pytest.raises(StoreError, match=r"directory .*nope.* does not exist; create it"):
        SQLiteStore(p)
    assert not p.parent.exists()


def test_not_a_database(db: Path) -> None:
    junk = os.urandom(8192)
    db.write_bytes(junk)
    with pytest.raises(StoreCorruptError, match=r"is not an SQLite database") as info:
        SQLiteStore(db)
    assert str(db) in str(info.value)
    assert _bytes(db) == junk
    assert not Path(f"{db}-wal").exists()


def test_text_file(db: Path) -> None:
    db.write_text("hello, I am a config file\n")
    with pytest.raises(StoreCorruptError):
        SQLiteStore(db)
    assert db.read_text() == "hello, I am a config file\n"


def test_corrupt_database(db: Path) -> None:
    SQLiteStore(db).close()
    data = bytearray(_bytes(db))
    data[100:4096] = os.urandom(3996)  # page 1 after the header: the schema b-tree
    db.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=r"not a usable SQLite database.*backup"):
        SQLiteStore(db)
    assert _bytes(db) == bytes(data)


def test_database_of_another_application(db: Path) -> None:
    c = _raw(db)
    c.execute("CREATE TABLE invoices (id INTEGER)")
    c.close()
    before = _bytes(db)
    with pytest.raises(StoreCorruptError, match=r"another application.*invoices"):
        SQLiteStore(db)
    assert _bytes(db) == before


def test_newer_schema(db: Path) -> None:
    SQLiteStore(db).close()
    c = _raw(db)
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    c.close()
    before = _bytes(db)
    with pytest.raises(SchemaVersionError, match=rf"schema version {SCHEMA_VERSION + 5}.*upgrade"):
        SQLiteStore(db)
    assert _bytes(db) == before


def test_read_only_file(db: Path) -> None:
    s = SQLiteStore(db)
    s.insert(_task("a"))
    s.close()
    before = _bytes(db)
    db.chmod(0o444)
    try:
        with pytest.raises(StoreError, match=r"read-only; .*chmod"):
            SQLiteStore(db)
        assert _bytes(db) == before
    finally:
        db.chmod(0o644)


def test_read_only_directory(tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    SQLiteStore(d / "tw.db").close()
    before = _bytes(d / "tw.db")
    d.chmod(0o555)
    try:
        with pytest.raises(StoreError, match=r"directory .* is read-only.*-wal"):
            SQLiteStore(d / "tw.db")
        with pytest.raises(StoreError, match="read-only"):
            SQLiteStore(d / "new.db")
    finally:
        d.chmod(0o755)
    assert _bytes(d / "tw.db") == before


def test_bad_paths_and_options(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="MemoryStore"):
        SQLiteStore(":memory:")
    with pytest.raises(StoreError, match="is a directory"):
        SQLiteStore(tmp_path)
    with pytest.raises(StoreConfigError, match="durability"):
        SQLiteStore(tmp_path / "x.db", durability="sloppy")  # type: ignore[arg-type]
    with pytest.raises(StoreConfigError, match="busy_timeout"):
        SQLiteStore(tmp_path / "x.db", busy_timeout=-1)
    with pytest.raises(StoreConfigError, match="busy_timeout"):
        SQLiteStore(tmp_path / "x.db", busy_timeout="5")  # type: ignore[arg-type]
    with pytest.raises(StoreConfigError, match="read_only must be True or False"):
        SQLiteStore(tmp_path / "x.db", read_only="yes")  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()


def test_closed_store_refuses(db: Path) -> None:
    s = SQLiteStore(db)
    s.close()
    s.close()
    with pytest.raises(StoreError, match="is closed"):
        s.find("a")


def test_lock_timeout_is_a_store_error(db: Path) -> None:
    s = SQLiteStore(db, busy_timeout=0.05)
    c = _raw(db)
    c.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match=r"stayed locked .*busy_timeout"):
            s.insert(_task("a"))
    finally:
        c.execute("ROLLBACK")
        c.close()
    s.insert(_task("a"))
    s.close()


# -- processes -------------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_child_opens_its_own_connection(store: SQLiteStore) -> None:
    store.insert_many([_task("a"), _task("b")])
    store.promote(["a", "b"], T0)
    parent_conn = store._connections.get()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            c = store._connections.get()
            got = store.claim_next(owner="child", lease_expires=T0 + 9, now=T0, limit=1)
            ok = c is not parent_conn and [t.id for t in got] == ["a"]
            ok = ok and parent_conn in connections._ORPHANS
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store._connections.get() is parent_conn  # the parent keeps its connection
    assert store.get("a").lease_owner == "child"
    assert [t.id for t in store.claim_next(owner="p", lease_expires=T0 + 9, now=T0, limit=5)] == [
        "b"
    ]
    assert store.integrity_check() == []


def test_pickle_reopens_the_file(store: SQLiteStore) -> None:
    store.insert(_task("a"))
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert copy.path == store.path
        assert copy.durability == store.durability
        assert copy.get("a") == store.get("a")
    finally:
        copy.close()


# -- maintenance and inspection ----------------------------------------------------------------------------
def test_checkpoint_and_integrity(store: SQLiteStore, db: Path) -> None:
    store.insert_many([_task(f"t{i}") for i in range(500)])
    assert Path(f"{db}-wal").stat().st_size > 0
    assert store.checkpoint() is True
    assert Path(f"{db}-wal").stat().st_size == 0
    assert store.integrity_check() == []
    with pytest.raises(InvalidScheduleError):
        store.checkpoint("SOMETIMES")  # type: ignore[arg-type]


def test_inspection_queries(store: SQLiteStore) -> None:
    store.insert_many(
        [_task("soon", due=T0 + 30), _task("later", due=T0 + 150), _task("far", due=T0 + 7200)]
        + [_task(f"r{i}", due=T0 - 40 + i) for i in range(3)]
        + [_task(f"f{i}", due=T0 - 100) for i in range(3)]
    )
    # (the tasks due before they were created went in READY already)
    assert store.promote(["r0", "r1", "r2", "f0", "f1", "f2"], T0) == []
    for i, end in enumerate((S.FAILED, S.TIMED_OUT, S.SUCCEEDED)):
        store.claim(f"f{i}", expected_version=0, owner="w", lease_expires=T0 + 5, now=T0)
        store.finish(f"f{i}", owner="w", state=end, now=T0 + i, error=f"boom {i}")
    assert store.oldest_ready_age(T0) == pytest.approx(40)
    hist = store.due_histogram(T0, horizon=300, bucket=60)
    assert hist == [(T0, 1), (T0 + 60, 0), (T0 + 120, 1), (T0 + 180, 0), (T0 + 240, 0)]
    assert [t.id for t in store.recent_failures(5)] == ["f1", "f0"]
    st = store.statistics(T0)
    assert st.counts == {S.PENDING: 3, S.READY: 3, S.FAILED: 1, S.TIMED_OUT: 1, S.SUCCEEDED: 1}
    assert st.schema_version == SCHEMA_VERSION
    assert st.size_bytes > 0
    assert st.oldest_ready_age == pytest.approx(40)
    assert MemoryStore().count_by_state() == {}
    empty = SQLiteStore(Path(store.path).with_name("empty.db"))
    assert empty.oldest_ready_age(T0) is None
    empty.close()


def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = open_store("sqlite:///rel.db?durability=fast&busy_timeout=1.5")
    assert isinstance(s, SQLiteStore)
    assert (s.path, s.durability, s.busy_timeout) == (str(tmp_path / "rel.db"), "fast", 1.5)
    s.close()
    absolute = tmp_path / "abs.db"
    s = open_store(f"sqlite:///{absolute}")
    assert isinstance(s, SQLiteStore)
    assert s.path == str(absolute)
    s.close()
    assert isinstance(open_store("memory://"), MemoryStore)
    for bad, match in [
        ("postgres://x/y", "unknown store scheme"),
        ("rel.db", "no scheme"),
        ("sqlite://host/x.db", "has a host"),
        ("sqlite:///x.db?color=red", "unknown option 'color'"),
        ("sqlite:///", "names no file"),
        ("memory://x", "takes no path"),
    ]:
        with pytest.raises(StoreConfigError, match=match):
            open_store(bad)


def test_sqlite_version_is_recent_enough() -> None:
    assert sqlite3.sqlite_version_info >= schema.MIN_SQLITE, sys.version


# -- damaged files, opening without creating, read-only ---------------------------------------------------
def _damaged_store(db: Path) -> bytes:
    """A store of 5,000 tasks whose pages 20-24 (task rows) are overwritten with random bytes."""
    s = SQLiteStore(db, durability="fast")
    s.insert_many([_task(f"t{i}", due=T0 + i, args=(i,)) for i in range(5000)])
    s.close()
    data = bytearray(_bytes(db))
    data[4096 * 20 : 4096 * 25] = os.urandom(4096 * 5)
    db.write_bytes(bytes(data))
    return bytes(data)


def test_damaged_pages_are_refused_at_open(db: Path) -> None:
    data = _damaged_store(db)
    with pytest.raises(StoreCorruptError, match=r"is damaged: PRAGMA quick_check reports") as info:
        SQLiteStore(db)
    assert "integrity_check()" not in str(info.value)  # it does not advise a call that fails too
    assert "backup" in str(info.value)
    assert _bytes(db) == data
    with pytest.raises(StoreCorruptError):
        SQLiteStore(db, read_only=True)
    assert _bytes(db) == data


def test_integrity_check_lists_damage_instead_of_raising(db: Path) -> None:
    data = _damaged_store(db)
    s = SQLiteStore(db, verify=False)  # opening without the check reaches the damage later
    try:
        problems = s.integrity_check()
        assert problems
        assert all(isinstance(p, str) for p in problems)
        with pytest.raises(StoreCorruptError, match="is damaged") as info:
            s.tasks()
        assert "integrity_check()" not in str(info.value)
    finally:
        s.close()
    assert _bytes(db)[4096 * 20 : 4096 * 25] == data[4096 * 20 : 4096 * 25]


def test_create_false_needs_an_existing_store(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(StoreError, match=r"missing\.db' does not exist \(create=False") as info:
        SQLiteStore(missing, create=False)
    assert not isinstance(info.value, StoreCorruptError)
    assert not missing.exists()
    with pytest.raises(StoreError, match=r"does not exist \(read_only=True"):
        SQLiteStore(missing, read_only=True)
    with pytest.raises(StoreError, match="does not exist"):
        open_store(f"sqlite:///{missing}", create=False)
    assert not missing.exists()
    SQLiteStore(missing).close()
    s = SQLiteStore(missing, create=False)
    s.close()


def test_read_only_refuses_changes_and_leaves_the_file_alone(db: Path) -> None:
    s = SQLiteStore(db)
    s.insert_many([_task("a"), _task("b", due=T0 + 5)])
    s.promote(["a"], T0)
    s.close()
    before = _bytes(db)
    ro = open_store(f"sqlite:///{db}", create=False, read_only=True)
    assert isinstance(ro, SQLiteStore)
    try:
        assert ro.read_only
        assert "read_only=True" in repr(ro)
        assert ro.count_by_state() == {S.PENDING: 1, S.READY: 1}
        assert ro.get("a").state is S.READY
        assert ro.integrity_check() == []
        assert ro.statistics(T0).counts == ro.count_by_state()
        changes: list[Callable[[], object]] = [
            lambda: ro.insert(_task("c")),
            lambda: ro.insert_many([_task("c")]),
            lambda: ro.promote(["b"], T0 + 9),
            lambda: ro.transition("b", expected_version=0, state=S.CANCELLED, now=T0),
            lambda: ro.claim_next(owner="w", lease_expires=T0 + 9, now=T0, limit=1),
            lambda: ro.delete("a"),
            lambda: ro.prune(before=T0 + 99),
            lambda: ro.put_schedule(ScheduleRecord(id="s", func=FUNC), first=None),
            lambda: ro.checkpoint(),
        ]
        for change in changes:
            with pytest.raises(StoreError, match="opened read-only and refuses"):
                change()

        def in_a_thread() -> None:
            with pytest.raises(StoreError, match="read-only"):
                ro.delete("a")
            assert ro.find("a") is not None

        th = threading.Thread(target=in_a_thread)
        th.start()
        th.join()
    finally:
        ro.close()
    assert _bytes(db) == before


def _read_only_checks(path: Path) -> None:
    s = SQLiteStore(path, read_only=True)
    try:
        assert [t.id for t in s.tasks()] == ["a"]
        with pytest.raises(StoreError, match="read-only"):
            s.insert(_task("b"))
    finally:
        s.close()
    with pytest.raises(StoreError, match=r"read_only=True to look inside"):
        SQLiteStore(path)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory any user can reach (pytest's own temporary directories are private)."""
    base = Path(tempfile.mkdtemp(prefix="timewheel-ro-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for p in (base, *base.rglob("*")):
            p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(base)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() and POSIX users")
def test_read_only_works_on_a_file_the_user_can_only_read(shared_dir: Path) -> None:
    d = shared_dir / "ro"
    d.mkdir()
    s = SQLiteStore(d / "tw.db")
    s.insert(_task("a"))
    s.close()
    before = _bytes(d / "tw.db")
    (d / "tw.db").chmod(0o444)
    d.chmod(0o555)
    if os.geteuid() != 0:
        _read_only_checks(d / "tw.db")
    else:  # root ignores file modes: check as an unprivileged user, in a child process
        if not all(os.stat(p).st_mode & 0o001 for p in shared_dir.parents):
            pytest.skip("an unprivileged user cannot reach the temporary directory")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 1
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                _read_only_checks(d / "tw.db")
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    assert _bytes(d / "tw.db") == before
    assert sorted(p.name for p in d.iterdir()) == ["tw.db"]


def test_open_store_passes_create_and_read_only(tmp_path: Path) -> None:
    for kwargs in ({"create": False}, {"read_only": True}):
        with pytest.raises(StoreConfigError, match="memory:// always starts a new, empty store"):
            open_store("memory://", **kwargs)
    path = tmp_path / "new.db"
    s = open_store(f"sqlite:///{path}?verify=0")
    assert isinstance(s, SQLiteStore)
    s.close()
    with pytest.raises(StoreConfigError, match="verify"):
        open_store(f"sqlite:///{path}?verify=maybe")


# -- connections of ended threads ------------------------------------------------------------------------
def _open_files(path: Path) -> int:
    """How many of this process's file descriptors point at the store's files."""
    fd_dir = Path("/proc/self/fd")
    n = 0
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        n += target.startswith(str(path))
    return n


def test_a_thread_s_connection_is_closed_when_the_thread_ends(db: Path) -> None:
    s = SQLiteStore(db)
    s.insert(_task("a"))
    checkpointer = s._connections.checkpointer
    while checkpointer.rounds == 0:  # its first checkpoint opened its connection
        time.sleep(0.005)
    assert len(s._connections) == 2  # this thread's and the checkpoint thread's

    def one_thread() -> None:
        th = threading.Thread(target=s.get, args=("a",))
        th.start()
        th.join()

    one_thread()
    # SQLite keeps a closed connection's descriptor for reuse while another connection of the
    # process holds a lock on the file: one more descriptor, reused by every later connection
    files = _open_files(db) if Path("/proc/self/fd").is_dir() else None
    for _ in range(100):  # a store shared by many short-lived threads, one after the other
        one_thread()
    assert len(s._connections) == 2
    if files is not None:
        assert _open_files(db) == files

    release = threading.Event()
    started = threading.Barrier(6)

    def hold() -> None:
        s.get("a")
        started.wait()
        release.wait()

    threads = [threading.Thread(target=hold) for _ in range(5)]
    for th in threads:
        th.start()
    started.wait()
    assert len(s._connections) == 7  # live threads keep theirs
    release.set()
    for th in threads:
        th.join()
    assert len(s._connections) == 2
    assert s.get("a").id == "a"
    s.close()
    assert len(s._connections) == 0
    if files is not None:
        assert _open_files(db) == 0


# -- pruning -------------------------------------------------------------------------------------------------
def test_prune_deletes_in_batches_of_its_own_transactions(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "_PRUNE_BATCH", 3)
    store.insert_many([_task(f"c{i}") for i in range(10)] + [_task("kept"), _task("live")])
    store.insert(_task("d", after=("c0", "live"), when="all_done"))
    store.insert(_task("x", after=("live",)))
    for i in range(10):
        store.transition(f"c{i}", expected_version=0, state=S.CANCELLED, now=T0 + 1)
    store.transition("x", expected_version=0, state=S.CANCELLED, now=T0 + 1)
    store.transition("kept", expected_version=0, state=S.CANCELLED, now=T0 + 100)
    transactions: list[str] = []
    real_tx = store._tx

    def counting_tx(doing: str) -> Any:
        transactions.append(doing)
        return real_tx(doing)

    monkeypatch.setattr(store, "_tx", counting_tx)
    assert store.prune(before=T0 + 50) == 11
    # one transaction per batch, the lock released between: 3 + 3 + 3 + 2 cancelled tasks, and
    # one finding nothing in each of the other four terminal states
    assert transactions.count("pruning tasks") == 4 + 4
    assert sorted(t.id for t in store.tasks()) == ["d", "kept", "live"]
    raw = _raw(Path(store.path))
    try:
        deps = raw.execute("SELECT upstream, downstream FROM deps ORDER BY upstream").fetchall()
    finally:
        raw.close()
    assert deps == [("live", "d")]  # the edge to the pruned "x" is gone with it


def test_a_bounded_prune_reads_a_window_and_sweeps_on_to_expired_tasks(
    store: SQLiteStore,
) -> None:
    """Expired tasks behind many kept ones (by due time) are reached by the sweep a window per
    call; the kept ones are never all read by one call."""
    store.insert_many([_task(f"k{i:02}", due=T0 + i) for i in range(30)])
    store.insert_many([_task(f"e{i}", due=T0 + 100 + i) for i in range(3)])
    for i in range(30):  # ended recently: kept
        store.transition(f"k{i:02}", expected_version=0, state=S.CANCELLED, now=T0 + 500)
    for i in range(3):  # ended long ago: expired
        store.transition(f"e{i}", expected_version=0, state=S.CANCELLED, now=T0 + 1)
    found = [store.prune(before=T0 + 100, states=[S.CANCELLED], limit=5) for _ in range(6)]
    # each call reads the first 5 rows by due, then the next 5 of its sweep: the 30 kept rows
    # are passed 5 by 5, the expired ones found by the sixth call's sweep
    assert found == [0, 0, 0, 0, 0, 3]
    assert {t.id for t in store.tasks()} == {f"k{i:02}" for i in range(30)}
    # the sweep wrapped around at the end of the state: it starts over
    assert [store.prune(before=T0 + 600, states=[S.CANCELLED], limit=5) for _ in range(7)] == [
        5,
        5,
        5,
        5,
        5,
        5,
        0,
    ]


def test_prune_leaves_the_wal_small(db: Path) -> None:
    s = SQLiteStore(db, durability="fast")
    try:
        for k in range(4):
            s.insert_many(
                [_task(f"t{k}-{i}", args=("x" * 400,)) for i in range(1000)]  # ~2 MB of rows
            )
        raw = _raw(db)
        raw.execute("UPDATE tasks SET state = 'succeeded'")
        raw.close()
        limit = s._connections.get().execute("PRAGMA journal_size_limit").fetchone()[0]
        assert limit == connections.JOURNAL_SIZE_LIMIT
        assert s.prune(before=T0 + 3600) == 4000
        assert s.count_by_state() == {}
        wal = Path(f"{db}-wal")
        assert not wal.exists() or wal.stat().st_size == 0  # checkpointed and truncated
        assert s.integrity_check() == []
    finally:
        s.close()
