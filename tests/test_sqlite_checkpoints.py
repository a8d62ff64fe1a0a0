"""The SQLite store's checkpoint thread, on real files: commits never checkpoint, the thread keeps
the WAL bounded and truncates it when asked, and it ends with the store (close, garbage
collection, fork) without leaving threads or file descriptors behind."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from timewheel._contract import FUNC, T0
from timewheel.stores.base import SupportsMaintenance
from timewheel.stores.sqlite import SQLiteStore
from timewheel.stores.sqlite import connections as sqlite_connections
from timewheel.stores.sqlite.checkpoints import Checkpointer
from timewheel.task import Task, TaskState

THREAD = "timewheel-sqlite-checkpoints"
PAGE = 4096


def _tasks(prefix: str, n: int, size: int = 2000) -> list[Task]:
    return [Task(id=f"{prefix}-{i}", func=FUNC, due=T0, args=("x" * size,)) for i in range(n)]


def _wait_until(pred: Callable[[], bool], what: str, bound: float = 20.0) -> None:
    deadline = time.monotonic() + bound
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound} s: {what}")
        time.sleep(0.005)


def _wal(db: Path) -> int:
    try:
        return Path(f"{db}-wal").stat().st_size
    except FileNotFoundError:
        return 0


def _threads() -> int:
    return sum(t.name == THREAD for t in threading.enumerate())


def _running(checkpointer: Checkpointer) -> bool:
    return checkpointer.running  # a call: each assert reads it anew


def _ran_since(checkpointer: Checkpointer, before: int) -> bool:
    return checkpointer.rounds > before


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tw.db"


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db, durability="fast")
    yield s
    s.close()


def test_commits_never_checkpoint(store: SQLiteStore, db: Path) -> None:
    conn = store._connections.get()
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    store._connections.checkpointer.stop()  # no thread: only commits could checkpoint
    for k in range(6):
        store.insert_many(_tasks(f"t{k}", 500))  # ~1 MB of rows each
    # past SQLite's automatic checkpoint at 1000 pages: no commit copied the log back
    assert _wal(db) > 1000 * PAGE
    frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1:]
    assert frames > 1000
    assert copied == frames  # copied only now, by this explicit checkpoint


def test_the_thread_keeps_the_wal_bounded(store: SQLiteStore, db: Path) -> None:
    checkpointer = store._connections.checkpointer
    checkpointer.every = 0.0  # one checkpoint per wake: the test waits for each
    largest = 0
    for k in range(30):  # ~30 MB written in all, ~1 MB per commit
        before = checkpointer.rounds
        store.insert_many(_tasks(f"t{k}", 500))
        _wait_until(partial(_ran_since, checkpointer, before), "a PASSIVE checkpoint")
        largest = max(largest, _wal(db))
    assert _running(checkpointer)
    # each commit starts the log over after the checkpoint that followed the previous one
    assert largest < 4 * 2**20, largest
    assert store.count_by_state() == {TaskState.PENDING: 15_000}
    assert store.integrity_check() == []


def test_maintain_truncates_the_wal_at_a_quiet_moment(store: SQLiteStore, db: Path) -> None:
    assert isinstance(store, SupportsMaintenance)
    store.insert_many(_tasks("t", 200))
    assert _wal(db) > 0
    store.maintain(T0)  # returns at once: the thread waits for a second without commits
    checkpointer = store._connections.checkpointer
    _wait_until(lambda: checkpointer.truncates == 1, "a TRUNCATE")
    assert _wal(db) == 0


def test_idle_claim_asks_for_a_truncate(store: SQLiteStore, db: Path) -> None:
    store.insert_many(_tasks("t", 300))
    store._last_checkpoint -= 3600
    assert store.claim_next(owner="w", lease_expires=T0, now=T0, limit=5) == []
    _wait_until(lambda: _wal(db) == 0, "the WAL truncated")


def test_the_thread_ends_with_the_store_and_leaves_no_fd(db: Path) -> None:
    gc.collect()  # other tests' unclosed stores end their threads now, not during this test
    threads, fds = _threads(), _fds()
    s = SQLiteStore(db)
    assert not _running(s._connections.checkpointer)  # nothing written yet
    s.insert_many(_tasks("t", 50))
    assert _running(s._connections.checkpointer)
    _wait_until(lambda: s._connections.checkpointer.rounds > 0, "a checkpoint")
    assert len(s._connections) == 2  # this thread's connection and the checkpointer's
    s.close()
    assert not _running(s._connections.checkpointer)
    assert _threads() <= threads
    assert _fds() <= fds


def test_a_store_collected_unclosed_ends_its_thread(db: Path) -> None:
    threads = _threads()
    s = SQLiteStore(db)
    s.insert_many(_tasks("t", 50))
    checkpointer = s._connections.checkpointer
    _wait_until(lambda: checkpointer.rounds > 0, "a checkpoint")
    del s
    gc.collect()
    _wait_until(lambda: not _running(checkpointer), "the thread ended")
    assert _threads() <= threads  # (the collection may end other unclosed stores' threads too)


def test_a_read_only_store_has_no_thread(db: Path) -> None:
    SQLiteStore(db).close()
    ro = SQLiteStore(db, read_only=True)
    try:
        assert ro.count_by_state() == {}
        assert not _running(ro._connections.checkpointer)
    finally:
        ro.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_runs_its_own_thread(store: SQLiteStore, db: Path) -> None:
    store.insert_many(_tasks("p", 50))
    checkpointer = store._connections.checkpointer
    assert _running(checkpointer)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            ok = not _running(checkpointer) and _threads() == 0  # not copied by fork()
            store.insert_many(_tasks("c", 50))
            ok = ok and _running(checkpointer)
            checkpointer.every = 0.0
            deadline = time.monotonic() + 20
            while checkpointer.rounds == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
            ok = ok and checkpointer.rounds > 0
            store.close()
            ok = ok and not _running(checkpointer)
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _running(checkpointer)  # the parent's thread goes on
    assert len(store.tasks()) == 100
    assert store.integrity_check() == []


@pytest.mark.parametrize("valve", [False, True])
def test_a_round_with_commits_during_each_copy(
    store: SQLiteStore, db: Path, monkeypatch: pytest.MonkeyPatch, valve: bool
) -> None:
    """A commit during the copy keeps the round from leaving the log to start over (that
    commit's writer starts it over itself, when the copy had caught up); past VALVE_FRAMES the
    round copies once more with this process's writers held back, and does."""
    connections = store._connections
    connections.checkpointer.stop()  # the test runs the round itself
    monkeypatch.setattr(sqlite_connections, "ROUND_COPIES", 1)
    monkeypatch.setattr(sqlite_connections, "VALVE_FRAMES", 1 if valve else 10**9)
    store.insert_many(_tasks("t", 200))
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("PRAGMA wal_autocheckpoint = 0")
    result: list[tuple[bool, int]] = []
    with connections._write_lock:  # the round copies, then waits here ...
        th = threading.Thread(
            target=lambda: result.append(connections.checkpoint_round(truncate=False))
        )
        th.start()
        _wait_until(lambda: connections._checkpoint_lock.locked(), "the round began")
        time.sleep(0.2)  # ... after its copy (the copy takes no lock)
        other.execute("DELETE FROM tasks WHERE id = 't-0'")  # ... while another connection commits
    th.join()
    other.close()
    restarted, frames = result[0]
    assert frames > 0
    assert restarted is valve
    assert store.integrity_check() == []
