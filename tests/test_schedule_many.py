"""``schedule_many()``: many one-shot tasks in one store step, every item checked first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

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
from timewheel.stores.base import Store
from timewheel.task import TaskState
from timewheel.testing import FakeClock

RAN: list[tuple[Any, ...]] = []


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
