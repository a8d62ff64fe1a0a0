"""Schedulers and delay queues inherited across a real ``os.fork()``.

What gunicorn ``--preload``, uWSGI without ``lazy-apps`` and multiprocessing's ``fork`` start method
do to a scheduler started before the fork: a child with the parent's memory but none of its
threads. On the memory store the child refuses the copy with an error naming the fixes; on a
durable store it restarts its own trigger and workers; the parent keeps working either way.

Each child runs a function and reports through a pipe; timeouts here are hang guards only.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import timewheel
from tests.apps import fork_app
from timewheel import DelayQueue, Scheduler, SchedulerStateError
from timewheel.errors import InheritedAcrossForkError
from timewheel.events import Event
from timewheel.stores.base import Store
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import TaskState

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()"),
    # Python 3.12+ warns that forking a process with threads may deadlock the child: that hazard
    # is what these tests are about
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]

GUARD = 60.0  # seconds before a child counts as hung

# the functions the durable-store tests run from import paths
ALLOW = ["tests.apps"]


class Child:
    """A child made by ``os.fork()`` that runs ``fn()`` and reports through a pipe."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which never returns to pytest
            try:
                os.close(r)
                try:
                    out: Any = ("ok", fn())
                except BaseException as e:
                    out = ("raised", type(e).__name__, str(e))
                data = pickle.dumps(out)
                while data:
                    data = data[os.write(w, data) :]
            finally:
                os._exit(0)
        os.close(w)
        self.pid = pid
        self._r = r

    def result(self, guard: float = GUARD) -> Any:
        """What ``fn()`` returned, or ``("raised", type name, message)``. A child still running
        after *guard* seconds is killed and the test fails."""
        chunks = []
        end = time.monotonic() + guard
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0 or not select.select([self._r], [], [], left)[0]:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    pytest.fail(f"the forked child hung for {guard} s")
                chunk = os.read(self._r, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self._r)
        _, status = os.waitpid(self.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        kind, *rest = pickle.loads(b"".join(chunks))
        return rest[0] if kind == "ok" else ("raised", *rest)


def in_child(fn: Callable[[], Any]) -> Any:
    """Run ``fn()`` in a forked child and wait for what it returned."""
    return Child(fn).result()


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "fork.db"


@pytest.fixture
def sqlite_store(sqlite_path: Path) -> Store:
    """The SQLite store at *sqlite_path* (its own fork gate keeps forks out of SQLite calls)."""
    return SQLiteStore(sqlite_path)


@pytest.fixture
def memory_sched() -> Iterator[Scheduler]:
    with Scheduler() as sched:
        yield sched


# -- the memory store: the child refuses the copy -------------------------------------------------
def test_memory_child_refuses_the_inherited_scheduler_and_names_the_fixes(
    memory_sched: Scheduler,
) -> None:
    assert memory_sched.schedule(fork_app.double, 1, delay=0).result(timeout=GUARD) == 2
    parent = os.getpid()

    def child() -> tuple[Any, ...]:
        try:
            memory_sched.schedule(fork_app.double, 2, delay=0)
        except InheritedAcrossForkError as e:
            return (os.getpid(), str(e), isinstance(e, SchedulerStateError))
        return ("scheduled",)

    got = in_child(child)
    assert got[0] != parent
    child_pid, message, is_state_error = got
    assert is_state_error
    assert f"started in process {parent}" in message
    assert f"process {child_pid} is a copy of it made by fork()" in message
    assert "post_fork" in message  # create it after the fork
    assert "timewheel.schedule()" in message  # or use the default scheduler
    assert "parent's scheduler is unaffected" in message
    # the parent goes on as before
    assert memory_sched.schedule(fork_app.double, 3, delay=0).result(timeout=GUARD) == 6
    assert memory_sched.running


def test_every_call_of_the_inherited_memory_scheduler_refuses(memory_sched: Scheduler) -> None:
    done = memory_sched.schedule(fork_app.double, 1, delay=0)
    done.result(timeout=GUARD)
    waiting = memory_sched.schedule(fork_app.double, 1, delay=3600)

    def child() -> dict[str, str]:
        calls: dict[str, Callable[[], object]] = {
            "schedule": lambda: memory_sched.schedule(fork_app.double, 1, delay=0),
            "schedule_fast": lambda: memory_sched.schedule(fork_app.double, delay=5),
            "cron": lambda: memory_sched.schedule(fork_app.double, 1, cron="* * * * *"),
            "get": lambda: memory_sched.get(done.id),
            "jobs": memory_sched.jobs,
            "cancel": lambda: memory_sched.cancel(waiting.id),
            "statistics": memory_sched.statistics,
            "upcoming": memory_sched.upcoming,
            "schedules": memory_sched.schedules,
            "start": memory_sched.start,
            "run_pending": memory_sched.run_pending,
            # a handle from before the fork: its task will never run here, so it says so
            "result": lambda: waiting.result(timeout=GUARD),
        }
        out = {}
        for name, call in calls.items():
            try:
                call()
                out[name] = "returned"
            except SchedulerStateError as e:
                out[name] = type(e).__name__
        out["running"] = str(memory_sched.running)
        memory_sched.shutdown()  # harmless here: the parent's threads and tasks are the parent's
        out["after shutdown"] = repr(memory_sched)
        return out

    got = in_child(child)
    refused = {k: v for k, v in got.items() if k not in ("running", "after shutdown", "result")}
    assert set(refused.values()) == {"InheritedAcrossForkError"}
    assert got["result"] == "SchedulerStateError"  # not a wait until the guard
    assert got["running"] == "False"
    assert got["after shutdown"].startswith("<Scheduler stopped")
    # the child's shutdown cancelled nothing of the parent's
    assert waiting.state is TaskState.PENDING
    assert memory_sched.cancel(waiting.id)
    assert memory_sched.schedule(fork_app.double, 5, delay=0).result(timeout=GUARD) == 10


def test_a_scheduler_never_started_before_the_fork_is_the_childs_to_start() -> None:
    sched = Scheduler()  # created at import time in a preloaded app, started in post_fork

    def child() -> Any:
        with sched:
            return sched.schedule(fork_app.double, 21, delay=0).result(timeout=GUARD)

    assert in_child(child) == 42
    with sched:  # the parent's copy is its own to start too
        assert sched.schedule(fork_app.double, 4, delay=0).result(timeout=GUARD) == 8


def test_the_default_scheduler_starts_anew_in_a_child() -> None:
    parents = timewheel.default_scheduler()
    assert timewheel.schedule(fork_app.double, 1, delay=0).result(timeout=GUARD) == 2

    def child() -> tuple[bool, int, bool]:
        mine = timewheel.default_scheduler()
        value = timewheel.schedule(fork_app.double, 5, delay=0).result(timeout=GUARD)
        inherited_refuses = False
        try:
            parents.schedule(fork_app.double, 1, delay=0)
        except InheritedAcrossForkError:
            inherited_refuses = True
        mine.shutdown()
        return (mine is not parents, value, inherited_refuses)

    try:
        assert in_child(child) == (True, 10, True)
        assert timewheel.default_scheduler() is parents
        assert timewheel.schedule(fork_app.double, 7, delay=0).result(timeout=GUARD) == 14
    finally:
        parents.shutdown()  # no threads left behind for later tests


# -- a durable store: the child restarts its own trigger and workers -------------------------------
def test_sqlite_child_restarts_its_own_workers(sqlite_store: Store) -> None:
    seen: list[str] = []
    with Scheduler(store=sqlite_store, allow=ALLOW) as sched:
        sched.add_listener(lambda e: seen.append(e.name), "succeeded")
        assert sched.schedule(fork_app.pid, delay=0).result(timeout=GUARD) == os.getpid()
        r, w = os.pipe()

        def child() -> tuple[int, int, bool, list[str]]:
            os.close(w)
            assert os.read(r, 1) == b"g"  # the parent's scheduler is shut down by now
            seen.clear()
            ran_in = sched.schedule(fork_app.pid, delay=0).result(timeout=GUARD)
            running = sched.running
            sched.shutdown()
            return (os.getpid(), ran_in, running, seen)

        # the child's task can only run on the child's own workers: the parent stops first
        forked = Child(child)
        sched.shutdown()
        os.close(r)
        os.write(w, b"g")
        os.close(w)
        child_pid, ran_in, running, events = forked.result()
    assert child_pid == forked.pid
    assert ran_in == child_pid
    assert running
    assert events == ["succeeded"]  # listeners carry over


def test_sqlite_parent_keeps_working_and_ids_do_not_collide(sqlite_store: Store) -> None:
    with Scheduler(store=sqlite_store, allow=ALLOW) as sched:
        before = sched.schedule(fork_app.double, 1, delay=0)
        assert before.result(timeout=GUARD) == 2

        def child() -> tuple[str, int, int]:
            job = sched.schedule(fork_app.double, 2, delay=0)
            value = job.result(timeout=GUARD)
            late = before.result(timeout=GUARD)  # a handle from before the fork still reads
            sched.shutdown()
            return (job.id, value, late)

        child_id, value, late = in_child(child)
        assert (value, late) == (4, 2)
        # generated ids start from a new random prefix in the child: none repeats the parent's
        after = sched.schedule(fork_app.double, 3, delay=0)
        assert after.result(timeout=GUARD) == 6
        assert child_id != after.id
        assert sched.get(child_id).result(timeout=GUARD) == 4
        assert sched.running


def test_shutdown_of_an_inherited_scheduler_leaves_the_parents_running_task_alone(
    sqlite_store: Store, sqlite_path: Path, tmp_path: Path
) -> None:
    flag = tmp_path / "flag"
    with Scheduler(store=sqlite_store, allow=ALLOW) as sched:
        job = sched.schedule(fork_app.wait_for, str(flag), delay=0)
        while job.state is not TaskState.RUNNING:
            time.sleep(0.01)
        owner = job.task.lease_owner

        def child() -> tuple[str, str | None]:
            sched.shutdown()  # the child never used it: the running task is the parent's
            task = SQLiteStore(sqlite_path).get(job.id)
            return (task.state.value, task.lease_owner)

        assert in_child(child) == ("running", owner)
        flag.touch()
        assert job.result(timeout=GUARD) == str(flag)


def test_a_custom_dispatcher_cannot_be_rebuilt_in_the_child(sqlite_store: Store) -> None:
    class Mine(timewheel.InlineDispatcher):
        pass

    sched = Scheduler(
        store=sqlite_store, dispatcher=Mine(), allow=ALLOW
    ).start()  # an inline dispatcher: no threads to restart
    try:

        def child() -> Any:
            return sched.schedule(fork_app.double, 1, delay=0).id

        kind, name, message = in_child(child)
        assert (kind, name) == ("raised", "InheritedAcrossForkError")
        assert "Mine" in message
        assert "after the fork" in message
    finally:
        sched.shutdown()


def _writer(sched: Scheduler, stop: threading.Event) -> None:
    while not stop.is_set():
        sched.schedule(fork_app.double, 1, delay=3600)


def test_sqlite_child_works_when_the_parent_was_writing_at_the_fork(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "busy.db", busy_timeout=1.0)
    with Scheduler(store=store, allow=ALLOW) as sched:
        stop = threading.Event()
        writers = [threading.Thread(target=_writer, args=(sched, stop)) for _ in range(2)]
        for t in writers:
            t.start()
        try:
            for _ in range(10):
                # without the store's fork gate the child may also hang in sqlite3.connect (a
                # SQLite mutex copied held): a short hang guard keeps that failure quick
                got = Child(
                    lambda: sched.schedule(fork_app.double, 4, delay=0).result(timeout=GUARD)
                ).result(guard=10)
                assert got == 8
        finally:
            stop.set()
            for t in writers:
                t.join()


# -- DelayQueue -------------------------------------------------------------------------------------
def test_a_memory_delay_queue_holding_items_refuses_in_the_child() -> None:
    q: DelayQueue[str] = DelayQueue()
    q.put("a", delay=0)
    q.put("b", delay=3600)

    def child() -> dict[str, str]:
        out = {}
        calls: dict[str, Callable[[], object]] = {
            "put": lambda: q.put("c", delay=0),
            "get": lambda: q.get(timeout=GUARD),
            "get_nowait": q.get_nowait,
            "peek": q.peek,
            "ready_count": q.ready_count,
            "cancel": lambda: q.cancel("nothing"),
        }
        for name, call in calls.items():
            try:
                call()
                out[name] = "returned"
            except InheritedAcrossForkError as e:
                out[name] = str(e)
        return out

    got = in_child(child)
    messages = set(got.values())
    assert len(messages) == 1
    message = messages.pop()
    assert f"held 2 items when process {os.getpid()} made process" in message
    assert "after the fork" in message
    assert "durable store" in message
    assert q.get(timeout=GUARD) == "a"  # the parent delivers its own items
    q.shutdown()


def test_an_empty_memory_delay_queue_is_the_childs_own() -> None:
    q: DelayQueue[str] = DelayQueue()

    def child() -> str:
        q.put("mine", delay=0)
        return q.get(timeout=GUARD)

    assert in_child(child) == "mine"
    assert q.empty()


def test_a_durable_delay_queue_delivers_each_item_once_across_the_fork(sqlite_path: Path) -> None:
    store = SQLiteStore(sqlite_path)
    q: DelayQueue[int] = DelayQueue(store=store)
    for i in range(40):
        q.put(i, delay=0)
    r, w = os.pipe()

    def drain() -> list[int]:
        out = []
        while True:
            try:
                out.append(q.get_nowait())
            except Exception:
                return out

    def child() -> list[int]:
        os.close(w)
        assert os.read(r, 1) == b"g"
        return drain()

    forked = Child(child)
    os.close(r)
    os.write(w, b"g")  # from here the two drains race on the store
    os.close(w)
    mine = drain()
    theirs = forked.result()
    assert sorted(mine + theirs) == list(range(40))  # every item once, none twice
    q.shutdown()


def test_a_listener_added_in_the_child_before_first_use_hears_the_restarted_scheduler(
    sqlite_store: Store,
) -> None:
    with Scheduler(store=sqlite_store, allow=ALLOW) as sched:

        def child() -> list[str]:
            names: list[str] = []

            def listen(e: Event) -> None:
                names.append(e.name)

            sched.add_listener(listen)
            sched.schedule(fork_app.double, 1, delay=0).result(timeout=GUARD)
            sched.shutdown()
            return names

        names = in_child(child)
        assert "submitted" in names
        assert "succeeded" in names
