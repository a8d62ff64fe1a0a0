"""The memory store's READY index against a brute-force scan.

``MemoryStore.ready(limit=, queues=)`` reads an index of READY tasks kept up to date on every
transition (promote, claim, finish, cancel, retry, replace, delete, prune). A state machine
drives random transitions on a real store and compares every answer with the READY tasks found
by scanning the store, sorted by (highest priority, earliest due, the first to become READY). Chunks are made tiny so
that splits and emptied chunks happen with a few tasks.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import timewheel.stores.ready_index as ready_index
from timewheel.stores.memory import MemoryStore
from timewheel.stores.ready_index import Lane, ReadyIndex, SortedKeys
from timewheel.task import Task, TaskState

LOAD = ready_index.LOAD
GROUP = ready_index.GROUP
T0 = 1_800_000_000.0
IDS = st.sampled_from([f"t{i}" for i in range(16)])
QUEUES = ["default", "mail", "billing"]
P, R, RUN = TaskState.PENDING, TaskState.READY, TaskState.RUNNING


def noop() -> None:
    pass


def brute(
    store: MemoryStore, entered: dict[str, int], limit: int, queues: list[str] | None
) -> list[str]:
    """The first *limit* READY ids by a scan of every task: highest priority, earliest due,
    then the first to become READY (*entered*: id -> when it last became READY)."""
    ready = [t for t in store.tasks(state=R) if queues is None or t.queue in queues]
    ready.sort(key=lambda t: (-t.priority, t.due, entered[t.id]))
    return [t.id for t in ready[: max(limit, 0)]]


class ReadyVersusScan(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()
        self.now = T0
        self.entered: dict[str, int] = {}  # id -> when it last became READY
        self.entries = 0

    def _ready_now(self) -> set[tuple[str, int]]:
        return {(t.id, t.version) for t in self.store.tasks(state=R)}

    def _note(self, before: set[tuple[str, int]], order: list[str]) -> None:
        """Number the tasks that became READY since *before*, in the order of *order*."""
        new = {i for i, _ in self._ready_now() - before}
        for task_id in dict.fromkeys(order):
            if task_id in new:
                self.entered[task_id] = self.entries
                self.entries += 1
                new.discard(task_id)
        assert not new, f"became READY unnoticed: {new}"

    @initialize(load=st.sampled_from([1, 2, 3, LOAD]), group=st.sampled_from([1, 2, 3, GROUP]))
    def setup(self, load: int, group: int) -> None:
        ready_index.LOAD = load
        ready_index.GROUP = group  # a due time's tasks in dicts of this many

    def teardown(self) -> None:
        ready_index.LOAD = LOAD
        ready_index.GROUP = GROUP

    def _get(self, task_id: str) -> Task | None:
        return self.store.find(task_id)

    @rule(
        task_id=IDS,
        due=st.sampled_from([T0 - 5, T0 - 1, T0, T0 + 0.5]) | st.floats(T0 - 100, T0),  # ties
        priority=st.sampled_from([0, 0, 1, 5, -2]),
        queue=st.sampled_from(QUEUES),
        replace=st.booleans(),
    )
    def insert(self, task_id: str, due: float, priority: int, queue: str, replace: bool) -> None:
        task = Task(
            id=task_id, func=noop, due=due, priority=priority, queue=queue, created=self.now
        )
        existing = self._get(task_id)
        if existing is None:
            self.store.insert(task)
        elif replace and existing.state is not RUN:
            self.store.insert(task, on_conflict="replace")

    @rule(task_id=IDS)
    def add_compact(self, task_id: str) -> None:
        if self._get(task_id) is None:
            self.store.add_pending(task_id, noop, (), T0 - 3, self.now)

    @rule(task_id=IDS)
    def add_ready(self, task_id: str) -> None:
        if self._get(task_id) is None:
            before = self._ready_now()
            self.store.add_ready(task_id, noop, (), T0 - 2, self.now)
            self._note(before, [task_id])

    @rule(ids=st.lists(IDS, max_size=6))
    def promote(self, ids: list[str]) -> None:
        before = self._ready_now()
        self.store.promote(ids, self.now)
        self._note(before, ids)

    @rule(task_id=IDS)
    def claim(self, task_id: str) -> None:
        t = self._get(task_id)
        if t is not None and t.state is R:
            self.store.claim(
                task_id, expected_version=t.version, owner="w", lease_expires=T0 + 30, now=T0
            )

    @rule(limit=st.integers(0, 4), queues=st.none() | st.lists(st.sampled_from(QUEUES)))
    def claim_next(self, limit: int, queues: list[str] | None) -> None:
        expected = brute(self.store, self.entered, limit, queues)
        got = self.store.claim_next(
            owner="w", lease_expires=T0 + 30, now=T0, limit=limit, queues=queues
        )
        assert [t.id for t in got] == expected

    @rule(task_id=IDS, state=st.sampled_from([TaskState.SUCCEEDED, TaskState.FAILED]))
    def finish(self, task_id: str, state: TaskState) -> None:
        t = self._get(task_id)
        if t is not None and t.state is RUN:
            self.store.finish(task_id, owner="w", state=state, now=T0)

    @rule(task_id=IDS)
    def cancel(self, task_id: str) -> None:
        t = self._get(task_id)
        if t is not None and t.state in (P, R):
            self.store.transition(
                task_id, expected_version=t.version, state=TaskState.CANCELLED, now=T0
            )

    @rule(
        task_id=IDS,
        to=st.sampled_from([P, R]),
        priority=st.sampled_from([0, 3]),
        due=st.floats(T0 - 50, T0),
    )
    def back_from_running(self, task_id: str, to: TaskState, priority: int, due: float) -> None:
        """A run goes back to wait (a retry, a lost lease): READY again with another due time
        and priority, or PENDING."""
        t = self._get(task_id)
        if t is not None and t.state is RUN:
            before = self._ready_now()
            self.store.transition(
                task_id, expected_version=t.version, state=to, now=T0, priority=priority, due=due
            )
            self._note(before, [task_id])

    @rule(task_id=IDS)
    def delete(self, task_id: str) -> None:
        self.store.delete(task_id)

    @rule(limit=st.none() | st.integers(1, 3))
    def prune(self, limit: int | None) -> None:
        self.store.prune(before=T0 + 1, states=[R, TaskState.SUCCEEDED], limit=limit)

    @invariant()
    def ready_matches_a_scan(self) -> None:
        for limit in (0, 1, 3, 100):
            for queues in (None, ["mail"], ["default", "billing"], [], ["nowhere"]):
                got = [t.id for t in self.store.ready(limit=limit, queues=queues)]
                assert got == brute(self.store, self.entered, limit, queues), (limit, queues)

    @invariant()
    def index_is_consistent(self) -> None:
        self.store._ready.check()

    @invariant()
    def oldest_ready_age_matches_a_scan(self) -> None:
        dues = [t.due for t in self.store.tasks(state=R)]
        age = self.store.oldest_ready_age(T0 + 10)
        assert age == (None if not dues else max(0.0, T0 + 10 - min(dues)))


TestReadyVersusScan = ReadyVersusScan.TestCase
TestReadyVersusScan.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 60), st.sampled_from([0.0, 0.5, 100.0])),
        max_size=200,
    ),
    load=st.sampled_from([1, 2, 4]),
)
def test_sorted_keys_against_a_sorted_list(ops: list[tuple[bool, int, float]], load: int) -> None:
    """Adds and removes in any order keep the chunks sorted, split and pruned correctly."""
    saved = ready_index.LOAD
    ready_index.LOAD = load
    try:
        keys = SortedKeys()
        model: set[float] = set()
        for add, n, due in ops:
            key = T0 + n + due
            if add and key not in model:
                keys.add(key)
                model.add(key)
            elif not add and key in model:
                keys.remove(key)
                model.discard(key)
            keys.check()
            assert list(keys) == sorted(model)
            assert keys.first(3) == sorted(model)[:3]
            assert keys.smallest() == (min(model) if model else None)
    finally:
        ready_index.LOAD = saved


def test_removing_a_key_not_held_raises() -> None:
    keys = SortedKeys()
    with pytest.raises(KeyError):
        keys.remove(1.0)
    keys.add(1.0)
    with pytest.raises(KeyError):
        keys.remove(2.0)
    with pytest.raises(KeyError):
        keys.remove(0.5)
    lane = Lane()
    lane.add(T0, "a", 0)
    with pytest.raises(KeyError):
        lane.remove(T0, "b")
    with pytest.raises(KeyError):
        lane.remove(T0 + 1, "a")
    lane.add(T0, "c", 1)  # two at one due time: its dicts are searched
    with pytest.raises(KeyError):
        lane.remove(T0, "b")


def _group_sizes(lane: Lane, due: float) -> list[int]:
    bucket = lane._by_due[due]
    assert isinstance(bucket, list)
    return [len(group) for group in bucket]


def test_a_due_time_with_more_tasks_than_a_group_keeps_them_in_several_dicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ready_index, "GROUP", 3)
    index = ReadyIndex()
    tasks = [Task(id=f"h{i}", func=noop, due=T0, state=R) for i in range(10)]
    for t in tasks:
        index.add(t)
    index.check()
    lane = index._lanes[0]["default"]
    assert _group_sizes(lane, T0) == [3, 3, 3, 1]
    assert index.first(7) == [t.id for t in tasks[:7]]
    for t in (tasks[4], tasks[0], tasks[1], tasks[2], tasks[9]):  # empties the first dict, then one
        index.discard(t)
        index.check()
    assert _group_sizes(lane, T0) == [2, 3]
    assert index.first(10) == ["h3", "h5", "h6", "h7", "h8"]


def test_a_herd_in_the_index_is_served_in_due_order_across_queues_and_priorities() -> None:
    """100 READY tasks in random order come out highest priority, then earliest due."""
    index = ReadyIndex()
    rng = random.Random(7)
    tasks = [
        Task(
            id=f"h{i:03d}",
            func=noop,
            due=T0 + rng.choice([0, 0, 1, 2]),
            priority=rng.choice([0, 1]),
            queue=rng.choice(QUEUES),
            state=R,
        )
        for i in range(100)
    ]
    rng.shuffle(tasks)  # ties go by the order added, not by id
    for t in tasks:
        index.add(t)
    index.check()
    order = sorted(tasks, key=lambda t: (-t.priority, t.due))  # stable: the order added
    assert index.first(100) == [t.id for t in order]
    assert index.first(10, ["mail"]) == [t.id for t in order if t.queue == "mail"][:10]
    assert index.oldest_due() == T0
    for t in tasks:
        index.discard(t)
    index.check()
    assert len(index) == 0
    assert index.first(5) == []
    assert index.oldest_due() is None
