"""The ready queue on its own: lanes by queue and priority, the bound, discards, waking."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timewheel.ready import ReadyQueue
from timewheel.task import Task, TaskState

T0 = 1_800_000_000.0


def noop() -> None:
    pass


def task(
    task_id: str, *, due: float = T0, priority: int = 0, queue: str = "default", version: int = 1
) -> Task:
    return Task(
        id=task_id,
        func=noop,
        due=due,
        priority=priority,
        queue=queue,
        state=TaskState.READY,
        version=version,
        created=T0,
        updated=T0,
    )


def test_higher_priority_first_then_fifo_within_a_lane() -> None:
    q = ReadyQueue(10)
    for t in [task("a"), task("b", priority=5), task("c"), task("d", priority=5)]:
        assert q.put(t)
    assert [q.pull_nowait().id for _ in range(4)] == ["b", "d", "a", "c"]  # type: ignore[union-attr]
    assert q.pull_nowait() is None


def test_queue_names_are_served_only_to_workers_that_ask_for_them() -> None:
    q = ReadyQueue(10)
    q.put(task("mail", queue="mail"))
    q.put(task("bill", queue="billing", priority=9))
    got = q.pull_nowait(["mail"])
    assert got is not None
    assert got.id == "mail"
    assert q.pull_nowait(["mail"]) is None
    assert q.pull_nowait() is not None


def test_the_bound_refuses_and_counts_and_nothing_is_queued_twice() -> None:
    q = ReadyQueue(2)
    assert q.put(task("a"))
    assert q.put(task("b"))
    assert not q.put(task("c")), "full"
    assert not q.put(task("a")), "the same snapshot again"
    assert q.free == 0
    stats = q.statistics()
    assert stats.refused_total == 1
    assert stats.depth == 2
    assert stats.high_water == 2


def test_a_newer_snapshot_replaces_a_stale_one() -> None:
    q = ReadyQueue(5)
    q.put(task("a", version=1))
    assert q.put(task("a", version=3))
    assert len(q) == 1
    got = q.pull_nowait()
    assert got is not None
    assert got.version == 3
    assert q.pull_nowait() is None, "the stale lane entry is skipped"


def test_discard_forgets_a_queued_task() -> None:
    q = ReadyQueue(5)
    q.put(task("a"))
    q.put(task("b"))
    q.discard("a")
    q.discard("missing")
    assert len(q) == 1
    assert "a" not in q
    assert [t.id for t in q.drain()] == ["b"]


def test_on_low_is_called_when_a_pull_reaches_the_low_water_mark() -> None:
    calls: list[int] = []
    q = ReadyQueue(4, on_low=lambda: calls.append(len(q)))
    for i in range(4):
        q.put(task(f"t{i}"))
    q.pull_nowait()
    assert calls == []
    q.pull_nowait()
    assert calls == [2], "at low water (half the capacity), once"


def test_close_wakes_a_blocked_puller_and_refuses_new_tasks() -> None:
    q = ReadyQueue(4)
    result: list[Task | None] = []
    puller = threading.Thread(target=lambda: result.append(q.pull()))
    puller.start()
    q.close()
    puller.join(timeout=30)  # a hang guard, not a timing assertion
    assert not puller.is_alive()
    assert result == [None]
    assert not q.put(task("late"))


def test_a_put_wakes_a_blocked_puller() -> None:
    q = ReadyQueue(4)
    result: list[Task | None] = []
    puller = threading.Thread(target=lambda: result.append(q.pull()))
    puller.start()
    q.put(task("a"))
    puller.join(timeout=30)
    assert [t.id for t in result if t is not None] == ["a"]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ReadyQueue(0)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 9), st.integers(-1, 1), st.sampled_from("xy")),
        st.tuples(st.just("pull"), st.sampled_from([None, "x", "y"])),
        st.tuples(st.just("discard"), st.integers(0, 9)),
    ),
    max_size=60,
)


@given(ops)
def test_the_queue_agrees_with_a_model(script: list[tuple[object, ...]]) -> None:
    """Against a plain list: the highest priority first, ties by queue order then due."""
    capacity = 5
    q = ReadyQueue(capacity)
    model: list[Task] = []  # in put order
    clock = 0.0
    for op in script:
        if op[0] == "put":
            _, n, priority, queue = op
            clock += 1
            t = task(f"t{n}", due=T0 + clock, priority=int(priority), queue=str(queue))  # type: ignore[call-overload]
            expected = len(model) < capacity and all(m.id != t.id for m in model)
            assert q.put(t) is expected
            if expected:
                model.append(t)
        elif op[0] == "pull":
            wanted = op[1]
            candidates = [m for m in model if wanted is None or m.queue == wanted]
            got = q.pull_nowait(None if wanted is None else [str(wanted)])
            if not candidates:
                assert got is None
                continue
            best = min(candidates, key=lambda m: (-m.priority, m.due))
            assert got is not None
            assert got.id == best.id
            model.remove(best)
        else:
            task_id = f"t{op[1]}"
            q.discard(task_id)
            model = [m for m in model if m.id != task_id]
        assert len(q) == len(model)
