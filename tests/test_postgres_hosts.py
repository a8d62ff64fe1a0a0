"""``PostgresStore`` across hosts: time on the server's clock, and LISTEN/NOTIFY wake-ups.

"Hosts" are schedulers with their own store objects (their own pools, their own listening
connections) on one schema, in this process or in spawned processes; a host whose clock is wrong
reads a :class:`~timewheel.clock.ShiftedClock`. Waits below are bounded only so that a broken
build fails instead of hanging: what is asserted is an outcome or an order, never a duration.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import queue
import re
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import timewheel as tw
from tests.apps.postgres_app import beating_host, skewed_host, stamp
from tests.apps.worker_app import record
from tests.conftest import postgres_dsn
from timewheel.clock import ShiftedClock, SystemClock
from timewheel.stores.base import SupportsNotifications, SupportsServerClock, WorkListener
from timewheel.stores.postgres import PostgresStore
from timewheel.task import Task, TaskState

Schemas = Callable[[], tuple[str, str]]
SKEW = 5.0
pytestmark = pytest.mark.realclock


def _task(task_id: str, due: float, func: str = "tests.apps.worker_app:record") -> Task:
    return Task(id=task_id, func=func, args=("x", "/dev/null"), due=due)


def _ready(task_id: str) -> Task:
    """A task due when it was made: stored READY."""
    now = time.time()
    return Task(id=task_id, func="tests.apps.worker_app:record", due=now - 1, created=now)


def _server_now(dsn: str) -> float:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def _until(check: Callable[[], bool], limit: float = 30.0) -> bool:
    """Wait for *check* (a bound against hanging, not a timing assertion)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


class Heard:
    """A :class:`WorkListener` that records what the store told it."""

    def __init__(self) -> None:
        self.events: queue.Queue[tuple[str, object]] = queue.Queue()

    def work_scheduled(self, entries: Sequence[tuple[str, float, str | None]]) -> None:
        for entry in entries:
            self.events.put(("scheduled", entry))

    def work_changed(self, *, pending: bool, ready: bool) -> None:
        self.events.put(("changed", (pending, ready)))

    def next(self, timeout: float = 30.0) -> tuple[str, object]:
        return self.events.get(timeout=timeout)

    def drain(self) -> list[tuple[str, object]]:
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out


@pytest.fixture
def two(postgres_schemas: Schemas) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two hosts' stores on one schema."""
    dsn, name = postgres_schemas()
    a = PostgresStore(dsn, schema=name, pool_size=4)
    b = PostgresStore(dsn, schema=name, pool_size=4, create=False)
    yield a, b
    a.close()
    b.close()


# -- time on the server's clock -------------------------------------------------------------------
def test_the_store_offers_a_server_clock_and_notifications(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, _ = two
    assert isinstance(a, SupportsServerClock)
    assert isinstance(a, SupportsNotifications)


@pytest.mark.parametrize("shift", [SKEW, -SKEW])
def test_a_skewed_host_reads_the_servers_clock_and_is_warned(
    two: tuple[PostgresStore, PostgresStore], caplog: pytest.LogCaptureFixture, shift: float
) -> None:
    a, _ = two
    host = ShiftedClock(SystemClock(), shift)
    with caplog.at_level(logging.WARNING, logger="timewheel.stores.postgres"):
        corrected = a.server_clock(host)
    assert a.server_clock(host) is corrected  # one corrected clock per host clock
    before = _server_now(postgres_dsn())
    reading = corrected.time()
    after = _server_now(postgres_dsn())
    # the offset is taken as an upper bound: the corrected clock is never ahead of the server's
    assert reading <= after
    assert abs(reading - before) < SKEW / 5  # corrected, not 5 s off
    side = "ahead of" if shift > 0 else "behind"
    # the figure is measured: 4.999 as well as 5.000 (a round trip's bias)
    found = re.search(rf"clock is (\d+\.\d{{3}}) s {side} the PostgreSQL server's", caplog.text)
    assert found is not None, caplog.text
    assert abs(float(found.group(1)) - SKEW) < SKEW / 5
    # a scheduler on a real-time clock reads time through it; a FakeClock stays as it is
    with tw.Scheduler(store=a, clock=host, dispatcher=tw.NullDispatcher()) as sched:
        assert isinstance(sched.clock, ShiftedClock)
        assert sched.clock.base is host
    fake = tw.testing.FakeClock()
    assert tw.Scheduler(store=a, clock=fake).clock is fake


def _kill_pool(store: PostgresStore) -> None:
    with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = "
            "current_database() AND application_name = 'timewheel' AND pid <> %s",
            (store.listener().backend_pid or 0,),
        )


def test_the_offset_is_measured_again_on_reconnect_and_when_the_server_finds_it_ahead(
    two: tuple[PostgresStore, PostgresStore], caplog: pytest.LogCaptureFixture
) -> None:
    a, _ = two
    host = ShiftedClock(SystemClock(), SKEW)
    corrected = a.server_clock(host)
    with caplog.at_level(logging.WARNING, logger="timewheel.stores.postgres"):
        host.shift = 2 * SKEW  # the host's clock is stepped five seconds further
        _kill_pool(a)
        a.find("x")  # a new connection: measured again
    assert abs(corrected.time() - _server_now(postgres_dsn())) < SKEW / 5
    figures = [float(f) for f in re.findall(r"clock is (\d+\.\d{3}) s ahead", caplog.text)]
    assert [f for f in figures if abs(f - 2 * SKEW) < SKEW / 5], caplog.text
    host.shift = 3 * SKEW  # stepped again, no reconnect: the corrected clock runs ahead
    now = corrected.time()
    a.insert(_task("soon", due=now - SKEW / 2))  # due by this clock, not by the server's
    assert a.promote(["soon"], now) == []  # refused on the server's clock, and measured again
    assert corrected.time() <= _server_now(postgres_dsn())
    assert a.get("soon").state is TaskState.PENDING


def test_on_the_server_clock_nothing_is_promoted_early_nor_a_live_lease_reaped(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, _ = two
    server = _server_now(postgres_dsn())
    a.insert(_task("early", due=server + 60))
    a.insert(_task("leased", due=server - 1))
    a.promote(["leased"], server)
    (held,) = a.claim_next(owner="w", lease_expires=server + 60, now=server, limit=1)
    ahead = server + 120  # a caller whose clock runs two minutes ahead
    # without a server clock, times are compared as the caller passes them (as every store does)
    assert [t.id for t in a.expired_leases(ahead, limit=10)] == ["leased"]
    a.server_clock(SystemClock())
    assert a.promote(["early"], ahead) == []
    assert a.get("early").state is TaskState.PENDING
    assert a.expired_leases(ahead, limit=10) == []
    assert a.get("leased").version == held.version


def test_skewed_hosts_never_start_early_nor_steal_a_live_lease(
    postgres_schemas: Schemas, tmp_path: Path
) -> None:
    """Two host processes, clocks -5 s and +5 s: every task starts at or after its due time on
    the server's clock, and runs longer than its lease (heartbeats keep it) run once."""
    dsn, name = postgres_schemas()
    log = tmp_path / "runs.log"
    ready = tmp_path / "ready"
    store = PostgresStore(dsn, schema=name)
    ctx = multiprocessing.get_context("spawn")
    lease = 1.0
    hosts = [
        ctx.Process(target=skewed_host, args=(dsn, name, shift, lease, str(ready)))
        for shift in (-SKEW, SKEW)
    ]
    for p in hosts:
        p.start()
    try:
        assert _until(lambda: ready.exists() and len(ready.read_text().split()) == 2, 60)
        producer = tw.Scheduler(store=store, dispatcher=tw.NullDispatcher(), allow=["tests.apps"])
        server = _server_now(dsn)
        n, slow = 20, 4
        for i in range(n):
            # due on the server's clock; the producer is never started: only the hosts run them
            producer.schedule(
                stamp,
                dsn,
                str(log),
                f"t{i}",
                2.5 * lease if i < slow else 0.0,
                at=tw.clock.to_datetime(server + 1.0 + 0.1 * i),
            )

        def done() -> bool:
            return store.count_by_state().get(TaskState.SUCCEEDED, 0) == n

        assert _until(done, 90)
    finally:
        for p in hosts:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
            p.join(10)
        store.close()
    lines = [line.split() for line in log.read_text().splitlines()]
    starts = [line for line in lines if line[0] == "S"]
    for _, tag, due, server_now, _pid in starts:
        assert float(server_now) >= float(due), tag
    runs = Counter(line[1] for line in starts)
    assert set(runs) == {f"t{i}" for i in range(n)}
    assert set(runs.values()) == {1}  # no live lease was reaped: nothing ran twice
    assert len({line[4] for line in starts}) == 2  # both hosts ran work


def test_an_every_second_schedule_carried_by_skewed_hosts_fires_once_per_slot(
    postgres_schemas: Schemas, tmp_path: Path
) -> None:
    """Three host processes, clocks -5 s, 0 and +5 s, each registering the same every-second
    schedule: each slot materialises and runs once, never before its time on the server's
    clock, with no gap between the first and the last slot run (``misfire="run_all"``, so a
    slow host makes a slot late, never missing)."""
    dsn, name = postgres_schemas()
    log = tmp_path / "beats.log"
    ready = tmp_path / "ready"
    PostgresStore(dsn, schema=name).close()  # the schema, before the hosts open it
    ctx = multiprocessing.get_context("spawn")
    hosts = [
        ctx.Process(target=beating_host, args=(dsn, name, shift, str(log), str(ready)))
        for shift in (-SKEW, 0.0, SKEW)
    ]
    for p in hosts:
        p.start()
    try:
        assert _until(lambda: ready.exists() and len(ready.read_text().split()) == 3, 60)

        def slots_run() -> int:
            return len(log.read_text().splitlines()) if log.exists() else 0

        first = slots_run()
        assert _until(lambda: slots_run() >= first + 6, 60)
    finally:
        for p in hosts:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
            p.join(10)
    starts = [line.split() for line in log.read_text().splitlines()]
    runs = Counter(line[1] for line in starts)
    assert set(runs.values()) == {1}, runs  # one run per slot, whichever host carried it
    for _, task_id, due, server_now, _pid in starts:
        assert float(server_now) >= float(due), task_id
    slots = sorted(float(line[2]) for line in starts)
    steps = {round(b - a, 3) for a, b in itertools.pairwise(slots)}
    assert steps == {1.0}, steps  # consecutive slots: none skipped, none doubled


# -- what is announced ---------------------------------------------------------------------------
def test_work_due_soon_and_ready_work_are_announced_to_other_hosts(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    heard = Heard()
    stop = b.listen(heard)
    try:
        assert b.listener().wait_connected(30)
        assert heard.next() == ("changed", (True, True))  # on connect: look for what was missed
        now = time.time()
        a.insert(_task("soon", due=now + 2))
        assert heard.next() == ("scheduled", ("soon", pytest.approx(now + 2, abs=1e-6), None))
        a.insert(_task("far", due=now + 86_400))  # left to the wheels' refills
        a.insert_many([_task(f"m{i}", due=now + 1) for i in range(3)])
        assert heard.next() == ("changed", (True, False))  # a bulk insert: look in the store
        a.insert_many([_task(f"n{i}", due=now + 86_400) for i in range(3)])  # not due soon
        # successors are computed by every host carrying the schedule: not announced
        a.promote([], now, successors=[_task("next-slot", due=now + 1)])
        a.promote(["soon", "m0", "m1"], now + 5)
        assert heard.next() == ("changed", (False, True))  # one announcement per transaction
        b.insert(_task("own", due=now + 1))  # a store is not told its own work
        a.insert(_task("last", due=now + 1))
        assert heard.next()[1][0] == "last"  # type: ignore[index]
        assert heard.drain() == []
    finally:
        stop()


def _heard_after_connect(b: PostgresStore) -> tuple[Heard, Callable[[], None]]:
    heard = Heard()
    stop = b.listen(heard)
    assert b.listener().wait_connected(30)
    assert heard.next() == ("changed", (True, True))  # on connect: look for what was missed
    return heard, stop


def test_single_inserts_are_announced_after_their_commits(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    """One PENDING task due soon: "p" with its id, due time and schedule; a READY one: "r";
    several in one window: one "m"; a far-future one: nothing sent at all."""
    a, b = two
    heard, stop = _heard_after_connect(b)
    try:
        now = time.time()
        a.insert(Task(id="one", func="tests.apps.worker_app:record", due=now + 2, schedule_id="s"))
        assert heard.next() == ("scheduled", ("one", pytest.approx(now + 2, abs=1e-6), "s"))
        assert a.insert(_ready("due")).task.state is TaskState.READY
        assert heard.next() == ("changed", (False, True))
        assert a.announcer.flush(30)
        sends = a.announcer.sends
        a.insert(_task("far", due=now + 86_400))  # left to the wheels' refills
        assert a.announcer.flush(30)
        assert a.announcer.sends == sends  # not even a statement
        a.announcer.window = 3600.0  # gathered until flushed
        for i in range(3):
            a.insert(_task(f"m{i}", due=now + 3 - i))
        a.insert(_ready("r2"))
        assert a.announcer.flush(30)
        assert a.announcer.sends == sends + 1  # one statement for the window
        got = sorted([heard.next(), heard.next()], key=str)
        assert got == [("changed", (False, True)), ("changed", (True, False))]
        assert heard.drain() == []
    finally:
        stop()


def test_a_batch_announces_its_pending_and_its_ready_work_from_its_transaction(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    heard, stop = _heard_after_connect(b)
    try:
        now = time.time()
        a.insert(_task("old", due=now + 86_400))  # not announced: due beyond NOTIFY_WITHIN
        # "x" goes in by COPY, READY; "old" is replaced one by one, PENDING and due soon
        a.insert_many([_ready("x"), _task("old", due=now + 1)], on_conflict="replace")
        got = sorted([heard.next(), heard.next()], key=str)
        assert got == [("changed", (False, True)), ("changed", (True, False))]
        assert a.announcer.flush(30)
        assert heard.drain() == []
    finally:
        stop()


def test_a_store_is_not_told_its_own_inserts_and_close_sends_what_is_gathered(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    own, stop_own = _heard_after_connect(a)
    heard, stop = _heard_after_connect(b)
    try:
        now = time.time()
        a.insert(_task("mine", due=now + 1))
        assert a.announcer.flush(30)
        b.insert(_task("theirs", due=now + 1))
        # b's announcement, sent after a's, reaches a: a's own came before it and was ignored
        assert own.next()[1][0] == "theirs"  # type: ignore[index]
        assert heard.next()[1][0] == "mine"  # type: ignore[index]
        a.announcer.window = 3600.0
        a.insert(_task("at-close", due=now + 1))
        stop_own()
        a.close()
        assert heard.next()[1][0] == "at-close"  # type: ignore[index]
        assert heard.drain() == []
    finally:
        stop()


def test_an_insert_commits_when_its_announcement_fails(
    postgres_schemas: Schemas, caplog: pytest.LogCaptureFixture
) -> None:
    """The announcer's connection is killed: without retries the announcement is lost and
    logged, the insert stands, and the next one is announced again; with retries it is sent on
    a new connection."""
    dsn, name = postgres_schemas()
    sep = "&" if "?" in dsn else "?"
    a = PostgresStore(f"{dsn}{sep}application_name=tw_announcing", schema=name, pool_size=1)
    lone = PostgresStore(
        f"{dsn}{sep}application_name=tw_announcing",
        schema=name,
        pool_size=1,
        retries=0,
        create=False,
    )
    b = PostgresStore(dsn, schema=name, create=False)
    heard, stop = _heard_after_connect(b)

    def kill_pools() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE "
                "datname = current_database() AND application_name = 'tw_announcing'"
            )

    try:
        now = time.time()
        for store in (lone, a):
            store.insert(_task(f"warm-{store.retries}", due=now + 86_400))  # the pool's connection
            store.announcer.window = 3600.0
        with caplog.at_level(logging.WARNING, logger="timewheel.stores.postgres"):
            lone.insert(_task("unheard", due=now + 1))
            a.insert(_task("retried", due=now + 1))
            kill_pools()
            assert lone.announcer.flush(30)
            assert a.announcer.flush(30)
        assert "announcing inserted work to other hosts failed" in caplog.text
        assert heard.next()[1][0] == "retried"  # type: ignore[index]
        assert b.get("unheard").state is TaskState.PENDING  # committed all the same
        lone.insert(_task("heard-again", due=now + 1))
        assert lone.announcer.flush(30)
        assert heard.next()[1][0] == "heard-again"  # type: ignore[index]
        assert heard.drain() == []
    finally:
        stop()
        for store in (a, lone, b):
            store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_announces_its_own_inserts(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    """The announcer's thread does not cross a fork: the child starts its own, and what the
    parent gathered stays the parent's to send."""
    a, b = two
    heard, stop = _heard_after_connect(b)
    try:
        now = time.time()
        a.announcer.window = 3600.0
        a.insert(_task("parent", due=now + 1))  # gathered in the parent at the fork
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child, which never returns to pytest
            code = 1
            try:
                a.announcer.window = 0.001
                a.insert(_task("child", due=now + 1))
                code = 0 if a.announcer.flush(30) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert heard.next()[1][0] == "child"  # type: ignore[index]
        assert a.announcer.flush(30)
        assert heard.next()[1][0] == "parent"  # type: ignore[index]
        assert heard.drain() == []
    finally:
        stop()


def test_a_task_scheduled_on_another_host_runs_without_a_poll(
    two: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    """Host B polls once an hour and refills its wheel every half hour; a task host A
    schedules (A runs no trigger) still runs on B, at its due time: B heard of it."""
    a, b = two
    log = tmp_path / "runs.log"
    sched_b = tw.Scheduler(store=b, poll_interval=3600, horizon=3600, allow=["tests.apps"])
    with sched_b:
        assert b.listener().wait_connected(30)
        sched_a = tw.Scheduler(store=a, dispatcher=tw.NullDispatcher(), allow=["tests.apps"])
        job = sched_a.schedule(stamp, postgres_dsn(), str(log), "from-a", delay=1.0)
        assert _until(lambda: b.get(job.id).state is TaskState.SUCCEEDED)
    (start,) = [line.split() for line in log.read_text().splitlines() if line[0] == "S"]
    assert float(start[3]) >= float(start[2])  # not early on the server's clock


class Watching(tw.NullDispatcher):
    """A dispatcher serving every queue that runs nothing and never asks the store itself: its
    ready queue fills only when the trigger refills it."""

    queues: Sequence[str] | None = None

    def __init__(self) -> None:
        self.woken = threading.Event()

    def wakeup(self) -> None:
        self.woken.set()


def test_ready_work_on_another_host_wakes_idle_workers(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    watching = Watching()
    with tw.Scheduler(store=b, dispatcher=watching, poll_interval=3600, horizon=3600) as sched:
        assert b.listener().wait_connected(30)
        now = time.time()
        a.insert(_task("r1", due=now + 3600))  # beyond the announcements: B does not hold it
        assert "r1" not in sched.ready_queue
        watching.woken.clear()
        a.promote(["r1"], now + 3600)  # another host makes it READY
        assert watching.woken.wait(30)
        assert _until(lambda: "r1" in sched.ready_queue)


# -- a lost listening connection -------------------------------------------------------------------
def _terminate(pid: int) -> None:
    with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))


def test_a_killed_listening_connection_reconnects_and_hears_again(
    two: tuple[PostgresStore, PostgresStore], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = two
    log = tmp_path / "runs.log"
    sched_a = tw.Scheduler(store=a, dispatcher=tw.NullDispatcher(), allow=["tests.apps"])
    with (
        caplog.at_level(logging.WARNING, logger="timewheel.stores.postgres"),
        tw.Scheduler(store=b, poll_interval=3600, horizon=3600, allow=["tests.apps"]),
    ):
        listener = b.listener()
        assert listener.wait_connected(30)
        first = listener.backend_pid
        assert first is not None
        _terminate(first)
        # scheduled while the connection is down or coming back: the catch-up after the
        # reconnect, or the notification itself, brings it
        lost = sched_a.schedule(record, "lost", str(log), delay=0.5)
        assert _until(lambda: listener.connects >= 2)
        assert listener.backend_pid not in (None, first)
        assert _until(lambda: b.get(lost.id).state is TaskState.SUCCEEDED)
        later = sched_a.schedule(record, "later", str(log), delay=0.5)
        assert _until(lambda: b.get(later.id).state is TaskState.SUCCEEDED)
    assert "the connection listening for other hosts' work was lost" in caplog.text
    assert sorted(line.split()[0] for line in log.read_text().splitlines()) == ["later", "lost"]


def test_polling_covers_a_listening_connection_that_cannot_come_back(
    postgres_schemas: Schemas, tmp_path: Path
) -> None:
    """The listening connection is killed and its role may not log in for a while: host B's
    poll (the fallback) still runs host A's work; once logins work, B listens again."""
    dsn, name = postgres_schemas()
    role = f"tw_role_{uuid.uuid4().hex[:10]}"
    log = tmp_path / "runs.log"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER").format(sql.Identifier(role)))
    a = PostgresStore(dsn, schema=name)
    b = PostgresStore(dsn.replace("postgresql://postgres@", f"postgresql://{role}@"), schema=name)
    try:
        with tw.Scheduler(
            store=b,
            dispatcher=tw.ThreadPoolDispatcher(workers=1),
            poll_interval=0.3,
            allow=["tests.apps"],
        ):
            listener = b.listener()
            assert listener.wait_connected(30)
            pid = listener.backend_pid
            assert pid is not None
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(role)))
            _terminate(pid)
            assert _until(lambda: listener.backend_pid is None)
            sched_a = tw.Scheduler(store=a, dispatcher=tw.NullDispatcher(), allow=["tests.apps"])
            job = sched_a.schedule(record, "polled", str(log), delay=0.2)
            assert _until(lambda: b.get(job.id).state is TaskState.SUCCEEDED)
            assert listener.connects == 1  # it ran while nobody listened
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(role)))
            assert _until(lambda: listener.connects == 2, 60)
    finally:
        a.close()
        b.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_listener_is_a_work_listener() -> None:
    assert isinstance(Heard(), WorkListener)


def test_a_version_1_schema_is_upgraded_with_its_tasks(postgres_schemas: Schemas) -> None:
    from timewheel.stores.postgres.schema import MIGRATIONS

    dsn, name = postgres_schemas()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
        conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for statement in MIGRATIONS[0]:
            conn.execute(statement.encode())
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    with pytest.raises(tw.errors.SchemaVersionError, match="older"):
        PostgresStore(dsn, schema=name, create=False)
    old = PostgresStore(dsn, schema=name, create=True)  # upgraded at open
    try:
        old.insert(_task("kept", due=time.time() + 3600))
        heard = Heard()
        stop = old.listen(heard)
        try:
            assert old.listener().wait_connected(30)
            other = PostgresStore(dsn, schema=name, create=False)
            try:
                other.insert(_task("soon", due=time.time() + 1))
            finally:
                other.close()
            assert heard.next() == ("changed", (True, True))
            assert heard.next()[1][0] == "soon"  # type: ignore[index]
        finally:
            stop()
        assert old.get("kept").state is TaskState.PENDING
    finally:
        old.close()


def test_an_async_scheduler_hears_another_host_too(
    two: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    import asyncio

    from timewheel.aio import AsyncScheduler

    a, b = two
    log = tmp_path / "runs.log"

    async def main() -> None:
        async with AsyncScheduler(
            store=b, poll_interval=3600, horizon=3600, allow=["tests.apps"]
        ) as sched:
            assert isinstance(sched.clock, ShiftedClock)  # on the server's clock
            assert await asyncio.to_thread(b.listener().wait_connected, 30)
            other = tw.Scheduler(store=a, dispatcher=tw.NullDispatcher(), allow=["tests.apps"])
            job = other.schedule(record, "async", str(log), delay=0.5)
            end = time.monotonic() + 30
            while b.get(job.id).state is not TaskState.SUCCEEDED and time.monotonic() < end:
                await asyncio.sleep(0.05)
            assert b.get(job.id).state is TaskState.SUCCEEDED

    asyncio.run(main())
