"""Work already due when it is stored goes into a durable store READY (``policy.ready_at_insert``):
it never enters a wheel, and no promotion races for it. On PostgreSQL "due" holds by the
server's clock as well as by the clock the task was made on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import timewheel as tw
from timewheel.clock import Clock, SystemClock
from timewheel.dispatch import InlineDispatcher
from timewheel.events import Event
from timewheel.stores import policy
from timewheel.stores.base import NewTasks, Store, SupportsNewTasks
from timewheel.task import Task, TaskState
from timewheel.testing import FakeClock

S = TaskState
FUNC = "tests.test_ready_at_insert:record"
RAN: list[Any] = []


def record(*args: object) -> None:
    """A module-level function durable stores can keep."""
    RAN.append(args)


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Any) -> Callable[[], Store]:
    from tests.conftest import _maker

    return _maker(request.param, tmp_path, request)


def _task(task_id: str, due: float, created: float, **kw: Any) -> Task:
    return Task(id=task_id, func=FUNC, due=due, created=created, updated=created, **kw)


def _batch(ids: list[str], dues: list[float], created: float) -> NewTasks:
    return NewTasks(
        template=Task(id="-", func=FUNC, due=created, created=created, updated=created),
        ids=ids,
        funcs=[FUNC] * len(ids),
        args=[()] * len(ids),
        kwargs=[{}] * len(ids),
        dues=dues,
    )


def inline_scheduler(store: Store, clock: Clock) -> tw.Scheduler:
    """A scheduler on *store* and *clock* that runs this module's functions inline."""
    return tw.Scheduler(
        clock=clock,
        store=store,
        dispatcher=InlineDispatcher(),
        allow=["tests.test_ready_at_insert"],
    )


# -- the rule ----------------------------------------------------------------------------------------


def test_the_rule_in_one_place() -> None:
    now = 1_800_000_000.0
    assert policy.ready_at_insert(_task("a", now, now))
    assert policy.ready_at_insert(_task("a", now - 5, now))
    assert not policy.ready_at_insert(_task("a", now + 0.001, now))
    assert not policy.ready_at_insert(_task("a", now, now), unmet=1)
    assert not policy.ready_at_insert(_task("a", now, now, schedule_id="s"))
    assert policy.as_inserted(_task("a", now, now)).state is S.PENDING  # the memory store's
    assert policy.as_inserted(_task("a", now, now), durable=True).state is S.READY
    with_upstream = _task("a", now, now, after=("u",))
    assert policy.as_inserted(with_upstream, durable=True).state is S.PENDING  # counted later
    template = _task("-", now, now)
    assert policy.ready_until(template) == now
    assert policy.ready_until(template.evolve(schedule_id="s")) is None


# -- the stores ----------------------------------------------------------------------------------------
def test_a_due_task_is_stored_ready(durable: Callable[[], Store]) -> None:
    store = durable()
    try:
        now = time.time() - 1  # due by every clock here, the server's included
        changed = store.insert(_task("now", now, now))
        assert (changed.task.state, changed.task.version) == (S.READY, 0)
        assert store.get("now").state is S.READY
        assert store.insert(_task("later", now + 3600, now)).task.state is S.PENDING
        assert store.insert(_task("inst", now, now, schedule_id="s")).task.state is S.PENDING
        # an upstream task not ended: PENDING
        assert store.insert(_task("dep", now, now, after=("later",))).task.state is S.PENDING
        claimed = store.claim("now", expected_version=0, owner="w", lease_expires=now + 60, now=now)
        assert claimed is not None
        store.finish("now", owner="w", state=S.SUCCEEDED, now=now)
        # its upstream task succeeded already: nothing unmet, READY
        after_done = store.insert(_task("dep3", now, now, after=("now",)))
        assert (after_done.task.state, after_done.task.unmet) == (S.READY, 0)
        # replace keeps the rule; the version moves past the old one
        replaced = store.insert(_task("later", now, now), on_conflict="replace")
        assert (replaced.task.state, replaced.task.version) == (S.READY, 1)
        # a READY task is no promotion's business, and is listed as READY work
        assert store.promote(["dep3", "later"], now) == []
        assert {t.id for t in store.ready(limit=10)} == {"dep3", "later"}
        assert [e[0] for e in store.due_before(now + 7200, limit=10)] == ["inst"]
    finally:
        store.close()


def test_batches_store_due_tasks_ready(durable: Callable[[], Store]) -> None:
    store = durable()
    try:
        now = time.time() - 1
        changes = store.insert_many([_task("a", now, now), _task("b", now + 3600, now)])
        assert [(c.task.id, c.task.state) for c in changes] == [("a", S.READY), ("b", S.PENDING)]
        assert isinstance(store, SupportsNewTasks)
        ready = store.insert_new(_batch(["c", "d", "e"], [now - 5, now + 3600, now], now))
        assert list(ready) == ["c", "e"]
        assert {t.id: t.state for t in store.tasks()} == {
            "a": S.READY,
            "b": S.PENDING,
            "c": S.READY,
            "d": S.PENDING,
            "e": S.READY,
        }
        assert list(store.insert_new(_batch(["f", "g"], [now, now], now))) == ["f", "g"]
    finally:
        store.close()


# -- PostgreSQL: the server's clock decides too ------------------------------------------------------
class _Ahead(SystemClock):
    """This host's clock, five seconds ahead of the server's."""

    def time(self) -> float:
        return time.time() + 5.0


def _server_now(dsn: str) -> float:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])


def test_a_host_ahead_never_stores_ready_what_the_server_finds_not_due(
    postgres_schemas: Callable[[], tuple[str, str]],
) -> None:
    from timewheel.stores.postgres import PostgresStore

    dsn, name = postgres_schemas()
    store = PostgresStore(dsn, schema=name, pool_size=2)
    try:
        host = _Ahead()
        # due in 3 s by the server, 2 s ago by this host's clock (which the task was made on)
        host_now = host.time()
        due = _server_now(dsn) + 3.0
        assert due < host_now
        assert store.insert(_task("one", due, host_now)).task.state is S.PENDING
        assert store.insert(_task("dep", due, host_now, after=("one",))).task.state is S.PENDING
        many = store.insert_many([_task("m1", due, host_now), _task("m2", due - 10, host_now)])
        assert [c.task.state for c in many] == [S.PENDING, S.READY]
        ready = store.insert_new(_batch(["n1", "n2"], [due, due - 10], host_now))
        assert list(ready) == ["n2"]
        assert {t.id: t.state for t in store.tasks()} == {
            "one": S.PENDING,
            "dep": S.PENDING,
            "m1": S.PENDING,
            "m2": S.READY,
            "n1": S.PENDING,
            "n2": S.READY,
        }
        # a scheduler on that host reads the server's clock: a due-now task is READY at once,
        # one due in 3 s (by the server) waits in the wheel
        with inline_scheduler(store, host) as sched:
            soon = sched.schedule(record, "soon", delay=3)
            assert store.get(soon.id).state is S.PENDING
            now_job = sched.schedule(record, "now", delay=0)
            assert store.get(now_job.id).state is S.READY
    finally:
        store.close()


# -- the schedulers ------------------------------------------------------------------------------------
def test_the_scheduler_queues_work_stored_ready(durable: Callable[[], Store]) -> None:
    store = durable()
    clock = FakeClock(start=time.time() - 60)  # (behind the server's clock: due by it too)
    events: list[Event] = []
    sched = inline_scheduler(store, clock)
    sched.add_listener(events.append, "submitted")
    with sched:
        one = sched.schedule(record, "one", delay=0)
        many = sched.schedule_many([(record, ("m", i)) for i in range(3)], delay=0)
        mixed = sched.schedule_many(
            [(record, ("x",)), (record, ("y",), None, {"delay": 5})], delay=0
        )
        assert store.get(one.id).state is S.READY
        assert {store.get(j.id).state for j in many} == {S.READY}
        assert [store.get(j.id).state for j in mixed] == [S.READY, S.PENDING]
        assert [e.task.state for e in events] == [S.READY] * 5 + [S.PENDING]
        clock.advance(0)
        assert sorted(RAN) == sorted([("one",), ("m", 0), ("m", 1), ("m", 2), ("x",)])
        clock.advance(5)
        assert ("y",) in RAN
        assert one.result(timeout=0) is None


def test_a_scheduler_not_started_leaves_ready_work_for_its_start(
    durable: Callable[[], Store],
) -> None:
    store = durable()
    clock = FakeClock(start=time.time() - 60)
    sched = inline_scheduler(store, clock)
    jobs = [*sched.schedule_many([(record, (i,)) for i in range(5)], delay=0)]
    jobs.append(sched.schedule(record, 9, delay=0))
    assert {store.get(j.id).state for j in jobs} == {S.READY}
    with sched:
        clock.advance(0)
        assert sorted(RAN) == [(0,), (1,), (2,), (3,), (4,), (9,)]


def test_a_delay_queue_takes_an_item_stored_ready(durable: Callable[[], Store]) -> None:
    store = durable()
    clock = FakeClock(start=time.time() - 60)
    q: tw.DelayQueue[str] = tw.DelayQueue(store=store, clock=clock)
    q.put("now", delay=0)
    q.put("later", delay=5)
    assert sorted(t.state for t in store.tasks()) == [S.PENDING, S.READY]
    assert q.get(timeout=0) == "now"
    clock.advance(5)
    assert q.get(timeout=0) == "later"
    q.shutdown()


def test_a_refill_reads_a_page_of_a_durable_stores_ready_work(tmp_path: Any) -> None:
    from timewheel.ready import ReadyQueue
    from timewheel.stores.sqlite import SQLiteStore
    from timewheel.trigger import Trigger

    store = SQLiteStore(tmp_path / "page.db", durability="fast")
    clock = FakeClock(start=time.time() - 60)
    sched = inline_scheduler(store, clock)
    sched.schedule_many([(record, (i,)) for i in range(1000)], delay=0)
    assert store.count_by_state() == {S.READY: 1000}
    ready = ReadyQueue(10_000)
    trigger = Trigger(store, ready, clock, tick=0.01, start=clock.time(), lease=30.0)
    trigger.refill_ready()
    # one page read; the queue asks for the next at half of it
    assert len(ready) == Trigger.REFILL_PAGE
    assert ready.low_water == Trigger.REFILL_PAGE // 2
    assert trigger.backlog  # more READY work waits in the store
    with sched:
        clock.advance(0)
        assert len(RAN) == 1000  # page after page, all of it
