"""``schedule_many()``: many one-shot tasks in one store step, every item checked first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import timewheel as tw
from timewheel.aio import AsyncScheduler
from timewheel.dispatch import InlineDispatcher
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    SchedulerStateError,
    SerializationError,
    TaskNotFoundError,
)
from timewheel.events import Event
from timewheel.options import CounterIds
from timewheel.stores.base import NewTasks, Store, SupportsNewTasks
from timewheel.task import Task, TaskState
from timewheel.testing import FakeClock

RAN: list[tuple[Any, ...]] = []
T = 1_800_000_000.0


def record(*args: object, **kwargs: object) -> None:
    """A module-level function durable stores can keep."""
    RAN.append((*args, *sorted(kwargs.items())))


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def _sched(store: Store | None = None) -> tuple[tw.Scheduler, FakeClock]:
    clock = FakeClock()
    sched = tw.Scheduler(
        clock=clock,
        store=store,
        dispatcher=InlineDispatcher(),
        allow=["tests.test_schedule_many"],
    )
    return sched, clock


def test_every_item_shape_runs_in_due_order() -> None:
    sched, clock = _sched()
    with sched:
        jobs = sched.schedule_many(
            [
                (record, (1,)),
                tw.step(record, 2, kwargs={"k": 3}, delay=5),
                (record, [4], {"k": 5}, {"id": "four", "delay": 3}),
                (record,),
                record,
            ],
            delay=1,
        )
        assert [j.id for j in jobs][2] == "four"
        assert all(j.state is TaskState.PENDING for j in jobs)
        clock.advance(10)
        assert RAN == [(1,), (), (), (4, ("k", 5)), (2, ("k", 3))]
        assert all(j.result(timeout=0) is None for j in jobs)


def test_defaults_apply_to_every_item_and_items_override_them() -> None:
    sched, _ = _sched()
    with sched:
        jobs = sched.schedule_many(
            [(record, (1,)), (record, (2,), None, {"priority": 7, "queue": "mail"})],
            delay=60,
            priority=3,
            queue="bulk",
        )
        a, b = (j.task for j in jobs)
        assert (a.priority, a.queue, b.priority, b.queue) == (3, "bulk", 7, "mail")
        assert a.due == b.due


@pytest.mark.parametrize(
    ("items", "options", "exc", "message"),
    [
        (
            [(record, (1,)), (record, (2,), None, {"delay": "soon"})],
            {"delay": 1},
            TypeError,
            "item 1: delay",
        ),
        ([(record, (1,), None, {"delay": 1}), (record, (2,))], {}, InvalidScheduleError, "item 1:"),
        ([record, 42], {"delay": 1}, TypeError, "item 1: an item is"),
        ([(record, 5)], {"delay": 1}, TypeError, "item 0: an item's args"),
        ([(record, (), None, {"cron": "* * * * *"})], {}, InvalidScheduleError, "is for schedule"),
        (
            [(record, (), None, {"on_conflict": "keep"})],
            {"delay": 1},
            InvalidScheduleError,
            "whole",
        ),
        ([(record, (), None, {"dealy": 1})], {}, TypeError, "did you mean 'delay'"),
        ([(record, (), {"a": 1}, {"kwargs": {}})], {"delay": 1}, InvalidScheduleError, "twice"),
        ([record], {"delay": 1, "id": "x"}, InvalidScheduleError, "id= per item"),
        ([record], {"every": 5}, InvalidScheduleError, "is for schedule"),
        ([record], {"delay": 1, "on_conflict": "merge"}, InvalidScheduleError, "on_conflict"),
        ([record], {"delay": 1, "queue": ""}, InvalidScheduleError, "item 0: queue"),
    ],
)
def test_a_bad_item_is_named_and_nothing_is_stored(
    items: list[object], options: dict[str, object], exc: type[Exception], message: str
) -> None:
    sched, _ = _sched()
    with sched:
        with pytest.raises(exc, match=message):
            sched.schedule_many(items, **options)  # type: ignore[arg-type]
        assert sched.store.tasks() == []


def test_repeated_ids_are_refused_before_anything_is_stored() -> None:
    sched, _ = _sched()
    with sched:
        with pytest.raises(DuplicateKeyError, match="items 0 and 2 have the same id 'a'"):
            sched.schedule_many([(record, (), None, {"id": i}) for i in ("a", "b", "a")], delay=1)
        assert sched.store.tasks() == []


def test_on_conflict_for_the_whole_batch() -> None:
    sched, clock = _sched()
    with sched:
        sched.schedule(record, "old", id="a", delay=5)
        with pytest.raises(DuplicateKeyError, match="'a' already exists"):
            sched.schedule_many(
                [(record, ("b",), None, {"id": "b"}), (record, ("a",), None, {"id": "a"})], delay=1
            )
        assert sched.store.find("b") is None
        kept = sched.schedule_many(
            [(record, ("new",), None, {"id": "a"})], delay=1, on_conflict="keep"
        )
        assert kept[0].task.args == ("old",)
        replaced = sched.schedule_many(
            [(record, ("new",), None, {"id": "a"})], delay=1, on_conflict="replace"
        )
        assert replaced[0].task.args == ("new",)
        clock.advance(10)
        assert RAN == [("new",)], "the replaced task left the wheel; only the new one ran"


def test_after_names_earlier_items_and_existing_tasks() -> None:
    sched, clock = _sched()
    with sched:
        up = sched.schedule(record, "up", delay=3)
        jobs = sched.schedule_many(
            [
                (record, ("a",), None, {"id": "a", "delay": 1}),
                (record, ("b",), None, {"id": "b", "after": ["a", up]}),
                (record, ("c",), None, {"after": "b"}),
            ]
        )
        clock.advance(10)
        assert RAN == [("a",), ("up",), ("b",), ("c",)]
        assert all(j.state is TaskState.SUCCEEDED for j in jobs)
        with pytest.raises(TaskNotFoundError, match="ghost"):
            sched.schedule_many(
                [
                    (record, (), None, {"id": "d", "delay": 1}),
                    (record, (), None, {"after": "ghost"}),
                ]
            )
        assert sched.store.find("d") is None
        with pytest.raises(InvalidScheduleError, match="must come before"):
            sched.schedule_many(
                [(record, (), None, {"after": "e"}), (record, (), None, {"id": "e", "delay": 1})]
            )


def test_submitted_events_and_an_empty_batch() -> None:
    sched, _ = _sched()
    seen: list[Event] = []
    with sched:
        assert sched.schedule_many([]) == []
        sched.add_listener(seen.append, "submitted")
        jobs = sched.schedule_many([record, record], delay=1)
        assert [e.task.id for e in seen] == [j.id for j in jobs]
        assert sched.statistics().submitted == 2


def test_a_stopped_scheduler_refuses() -> None:
    sched, _ = _sched()
    sched.start()
    sched.shutdown()
    with pytest.raises(SchedulerStateError):
        sched.schedule_many([record], delay=1)


def test_task_functions_are_scheduled_as_their_function() -> None:
    sched, clock = _sched()
    with sched:
        fn = sched.task(record)
        sched.schedule_many([(fn, (1,))], delay=1)
        clock.advance(2)
        assert RAN == [(1,)]


def test_durable_stores_keep_the_batch(make_store: Callable[[], Store]) -> None:
    store = make_store()
    sched, clock = _sched(store)
    with sched:
        jobs = sched.schedule_many(
            [(record, (i,), {"k": i}, {"delay": 1 + i % 3}) for i in range(30)], queue="q"
        )
        assert len({j.id for j in jobs}) == 30
        assert {t.queue for t in store.tasks()} == {"q"}
        clock.advance(5)
        assert sorted(RAN) == sorted((i, ("k", i)) for i in range(30))
    if store.durable:
        sched2, _ = _sched(make_store())
        with sched2, pytest.raises(SerializationError, match="item 1"):
            sched2.schedule_many([record, lambda: None], delay=1)


def test_async_twin() -> None:
    async def main() -> None:
        clock = FakeClock()
        async with AsyncScheduler(clock=clock) as sched:
            first = await sched.schedule(record, "first", delay=1)
            jobs = await sched.schedule_many(
                [(record, ("x",)), tw.step(record, "y", after=first)], delay=2
            )
            await clock.advance_async(5)
            assert [await j.result(timeout=0) for j in jobs] == [None, None]
            assert RAN == [("first",), ("x",), ("y",)] or RAN == [("first",), ("y",), ("x",)]
            with pytest.raises(TypeError, match="item 0"):
                await sched.schedule_many([(record, 1)], delay=1)

    asyncio.run(main())


def test_a_running_scheduler_runs_a_due_batch(make_store: Callable[[], Store]) -> None:
    """With the real-time loop running, tasks due at once are promoted together and run."""
    with tw.Scheduler(store=make_store(), allow=["tests.test_schedule_many"]) as sched:
        jobs = sched.schedule_many([(record, (i,)) for i in range(40)], delay=0)
        later = sched.schedule_many([(record, (i,)) for i in range(40, 45)], delay=0.05)
        for job in jobs + later:
            job.result(timeout=30)
    assert sorted(r[0] for r in RAN) == list(range(45))


# -- the column-by-column path (plain items) and the item-by-item path agree -----------------------
_ITEM = st.tuples(
    st.sampled_from(["tuple2", "tuple4-at", "tuple4-delay", "step-kwargs", "tuple1"]),
    st.integers(min_value=-5, max_value=5),
    st.floats(min_value=0, max_value=7200, allow_nan=False),
)


def _spec(kind: str, arg: int, when: float, base: float) -> Any:
    if kind == "tuple2":
        return (record, (arg,))
    if kind == "tuple1":
        return (record,)
    if kind == "tuple4-at":
        return (record, [arg], None, {"at": base + when})
    if kind == "tuple4-delay":
        return (record, (arg,), None, {"delay": when})
    return tw.step(record, arg, kwargs={"k": arg})


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=st.lists(_ITEM, max_size=12), shared=st.booleans())
# due a fraction of a microsecond after it was made: READY (the same microsecond) either way
@example(items=[("tuple4-delay", 0, 1.192092896e-07)], shared=True)
def test_a_batch_stores_what_one_by_one_would(
    make_store: Callable[[], Store], items: list[tuple[str, int, float]], shared: bool
) -> None:
    """schedule_many of a random batch stores the tasks schedule() would, one by one."""
    store_a, store_b = make_store(), make_store()
    try:
        _compare_batch_with_one_by_one(store_a, store_b, items, shared)
    finally:
        # closed within the example: a PostgreSQL pool left open goes on connecting from its
        # own threads, and psycopg_pool draws each connection's lifetime jitter from the global
        # random module, which hypothesis reports when it moves while the next example is drawn
        store_a.close()
        store_b.close()


def _compare_batch_with_one_by_one(
    store_a: Store, store_b: Store, items: list[tuple[str, int, float]], shared: bool
) -> None:
    sched_a, clock_a = _sched(store_a)
    sched_b, clock_b = _sched(store_b)
    assert clock_b.time() == clock_a.time()
    with sched_a, sched_b:
        base = clock_a.time()
        clash = "tuple4-at" if shared else "tuple4-delay"  # both delay= and at=: refused
        specs = [_spec(k, a, w, base) for k, a, w in items if k != clash]
        defaults: dict[str, Any] = {"delay": 30} if shared else {"at": base + 60}
        jobs = sched_a.schedule_many(specs, **defaults)
        one_by_one = []
        for spec in specs:
            func, args, kwargs, options = _parts(spec)
            merged = {**defaults, **options}
            one_by_one.append(sched_b.schedule(func, *args, kwargs=kwargs, **merged))
        got = [_shape(j.task) for j in jobs]
        want = [_shape(j.task) for j in one_by_one]
        assert got == want
        assert len(set(jobs.ids)) == len(jobs)


def _parts(spec: object) -> tuple[Any, tuple[Any, ...], Any, dict[str, Any]]:
    if isinstance(spec, tw.Step):
        options = dict(spec.options)
        return spec.func, tuple(spec.args), options.pop("kwargs", None), options
    assert isinstance(spec, tuple)
    func, args, kwargs, options = (*spec, None, None, None)[:4]
    return func, tuple(args or ()), kwargs, dict(options or {})


def _shape(task: Any) -> tuple[Any, ...]:
    return (
        task.args,
        dict(task.kwargs),
        task.due,
        task.state,
        task.version,
        task.priority,
        task.queue,
        task.retry,
        task.timeout,
        task.after,
    )


def test_a_bad_item_in_a_plain_batch_stores_nothing(make_store: Callable[[], Store]) -> None:
    """A bad item in the middle of plain items: the call names it and nothing is stored."""
    sched, _ = _sched(make_store())
    with sched:
        items: list[Any] = [(record, (i,)) for i in range(50)]
        items[25] = (
            (record, (object(),))
            if sched.store.durable
            else (record, (1,), None, {"delay": "soon"})
        )
        with pytest.raises((SerializationError, TypeError), match="schedule_many item 25: "):
            sched.schedule_many(items, delay=1)
        assert sched.jobs() == []
        jobs = sched.schedule_many(items[:25], delay=1)
        assert [j.state for j in jobs] == [TaskState.PENDING] * 25


def test_jobs_make_handles_when_read() -> None:
    sched, clock = _sched()
    with sched:
        jobs = sched.schedule_many([(record, (i,)) for i in range(3)], delay=1)
        assert len(jobs) == 3
        assert jobs == list(jobs)
        assert jobs[0] == jobs[:1][0]
        extra = sched.schedule_many([record], delay=1)
        assert [j.id for j in jobs + extra] == [*jobs.ids, *extra.ids]
        clock.advance(seconds=1)
        assert [j.result() for j in jobs] == [None] * 3
        assert sorted(RAN) == [(), (0,), (1,), (2,)]


def test_insert_new_refuses_an_existing_id_and_stores_nothing(
    make_store: Callable[[], Store],
) -> None:
    """A store's insert_new is all or nothing: an id that exists refuses the whole batch."""
    store = make_store()
    if not isinstance(store, SupportsNewTasks):
        pytest.skip("the store takes plain batches through insert_many")
    func: Any = record if not store.durable else "tests.test_schedule_many:record"
    template = Task(id="template", func=func, due=T, created=T, updated=T)
    store.insert(Task(id="b", func=func, due=T, created=T, updated=T))
    batch = NewTasks(template, ["a", "b", "c"], [func] * 3, [(1,), (2,), (3,)], [{}] * 3, [T] * 3)
    with pytest.raises(DuplicateKeyError, match="'b'"):
        store.insert_new(batch)
    assert store.find("a") is None
    assert store.find("c") is None
    store.insert_new(NewTasks(template, ["a", "c"], [func] * 2, [(1,), (3,)], [{}] * 2, [T] * 2))
    assert store.get("c").args == (3,)
    store.close()


# -- a batch with a due time each fires as the same tasks scheduled one by one ---------------------
STAMPS: list[tuple[float, int]] = []
_CLOCKS: list[FakeClock] = []


def stamp(i: int) -> None:
    """Record the fake clock's time and the task's number when it runs."""
    STAMPS.append((_CLOCKS[-1].time(), i))


_OFFSET = st.one_of(
    st.sampled_from([-1.0, 0.0, 0.5, 1.0, 59.0, 60.0, 61.5, 3599.0, 3600.0, 7200.0, 86400.0]),
    st.floats(min_value=-2, max_value=2 * 86400, allow_nan=False),
)


@settings(max_examples=40, deadline=None)
@given(offsets=st.lists(_OFFSET, min_size=1, max_size=40), delay=st.booleans())
def test_a_batch_fires_when_and_in_the_order_one_by_one_would(
    offsets: list[float], delay: bool
) -> None:
    """Items with their own ``at=`` (or ``delay=``): the batch's tasks fire at the same instants
    and in the same order (due time, then the batch's order, past due times too) as the same tasks scheduled one by
    one, and none fires before its due time."""
    runs = []
    for batched in (True, False):
        sched, clock = _sched()
        _CLOCKS.append(clock)
        STAMPS.clear()
        with sched:
            base = clock.time()
            options: list[dict[str, Any]] = [
                {"delay": o} if delay else {"at": base + o} for o in offsets
            ]
            if batched:
                sched.schedule_many([(stamp, (i,), None, o) for i, o in enumerate(options)])
            else:
                for i, o in enumerate(options):
                    sched.schedule(stamp, i, **o)
            clock.advance(max(offsets) + 2 - min(0.0, min(offsets)))
        runs.append(list(STAMPS))
        assert sorted(i for _, i in STAMPS) == list(range(len(offsets)))
        assert all(t >= base + offsets[i] for t, i in STAMPS)
    _CLOCKS.clear()
    assert runs[0] == runs[1]
    assert runs[0] == sorted(runs[0], key=lambda run: (base + offsets[run[1]], run[1]))


@settings(max_examples=60, deadline=None)
@given(calls=st.lists(st.integers(min_value=0, max_value=700), max_size=12))
def test_a_batch_takes_the_ids_one_call_at_a_time_would(calls: list[int]) -> None:
    """``CounterIds.take(n)`` gives the ids *n* calls would, and the counter goes on after them
    (across the 256-id blocks whose prefix is formatted once)."""
    ids = CounterIds()
    prefix = ids.next().rsplit("-", 1)[0]
    counter, got = 1, []
    for n in calls:
        if n == 0:
            got.append(ids.next())
            counter += 1
            continue
        got.extend(ids.take(n))
        counter += n
    want = [f"{prefix}-{k:x}" for k in range(2, counter + 1)]
    assert got == want
    assert ids.next() == f"{prefix}-{counter + 1:x}"
