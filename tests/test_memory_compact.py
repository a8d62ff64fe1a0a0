"""MemoryStore's compact pending records (``add_pending``) behave exactly like full tasks.

A differential test: two stores receive the same operations, one holding the fresh tasks as
full :class:`Task` snapshots (``insert``), the other as compact records (``add_pending``);
every answer must be the same.
"""

from __future__ import annotations

import functools
import gc
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from timewheel.errors import DuplicateKeyError, TaskNotFoundError, TimewheelError
from timewheel.stores import memory
from timewheel.stores.base import NewTasks
from timewheel.stores.compact import RECORD, fields
from timewheel.stores.memory import MemoryStore
from timewheel.task import EMPTY_KWARGS, Task, TaskState

S = TaskState
IDS = [f"t{i}" for i in range(6)]


def work(*args: Any) -> None:
    pass


def other(*args: Any) -> None:
    pass


def _outcome(fn: Callable[[], Any]) -> Any:
    """The value, or the exception type (the two stores must agree on both)."""
    try:
        return ("ok", fn())
    except TimewheelError as e:
        return ("error", type(e))


def _norm(x: Any) -> Any:
    """Changed/Task results compared as plain values."""
    if hasattr(x, "task") and hasattr(x, "dependents"):
        return (x.task, tuple(x.dependents))
    if isinstance(x, list):
        return [_norm(v) for v in x]
    return x


class CompactVersusFull(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.full = MemoryStore()
        self.compact = MemoryStore()
        self.now = 1000.0

    def both(self, fn: Callable[[MemoryStore], Any]) -> Any:
        a = _outcome(lambda: _norm(fn(self.full)))
        b = _outcome(lambda: _norm(fn(self.compact)))
        assert a == b
        return a

    @rule(tid=st.sampled_from(IDS), delay=st.floats(-5, 50), args=st.sampled_from([(), (1, "x")]))
    def add(self, tid: str, delay: float, args: tuple[Any, ...]) -> None:
        due, now = self.now + delay, self.now
        a = _outcome(
            lambda: (
                self.full.insert(
                    Task(id=tid, func=work, args=args, due=due, created=now, updated=now)
                ).task
            )
        )
        b = _outcome(lambda: self.compact.add_pending(tid, work, args, due, now))
        if a[0] == "ok":
            assert b == ("ok", None)
        else:
            assert b == ("error", DuplicateKeyError)

    @rule(
        ids=st.lists(st.sampled_from(IDS), unique=True, min_size=1, max_size=4),
        data=st.data(),
    )
    def add_batch(self, ids: list[str], data: st.DataObject) -> None:
        """``insert_new``: a batch of one function is kept as int records (a batch), one of
        several functions record by record; all or nothing."""
        n, now = len(ids), self.now
        funcs = data.draw(st.sampled_from([[work] * n, [work, other] * n]))[:n]
        args = [data.draw(st.sampled_from([(), (3,), ("y", 4)])) for _ in ids]
        dues = [now + data.draw(st.floats(-5, 50)) for _ in ids]
        tasks = [
            Task(id=i, func=f, args=a, due=d, created=now, updated=now)
            for i, f, a, d in zip(ids, funcs, args, dues, strict=True)
        ]
        a = _outcome(lambda: [c.task for c in self.full.insert_many(tasks, on_conflict="error")])
        template = Task(id="template", func=print, due=now, created=now, updated=now)
        batch = NewTasks(template, list(ids), funcs, args, [EMPTY_KWARGS] * n, dues)
        b = _outcome(lambda: self.compact.insert_new(batch))
        if a[0] == "ok":
            assert b == ("ok", ())
        else:
            assert b == ("error", DuplicateKeyError)

    @rule(tid=st.sampled_from(IDS), late=st.floats(0, 5), args=st.sampled_from([(), (2,)]))
    def add_due(self, tid: str, late: float, args: tuple[Any, ...]) -> None:
        due, now = self.now - late, self.now

        def full() -> Task:
            self.full.insert(Task(id=tid, func=work, args=args, due=due, created=now, updated=now))
            (moved,) = self.full.promote([tid], now)
            return moved

        a = _outcome(full)
        b = _outcome(lambda: self.compact.add_ready(tid, work, args, due, now))
        assert a == b

    @rule(tid=st.sampled_from(IDS), how=st.sampled_from(["keep", "replace", "error"]))
    def insert_again(self, tid: str, how: Any) -> None:
        t = Task(id=tid, func=other, due=self.now + 3, created=self.now, updated=self.now)
        self.both(lambda s: s.insert(t, on_conflict=how))

    @rule(tid=st.sampled_from(IDS), up=st.sampled_from(IDS))
    def insert_dependent(self, tid: str, up: str) -> None:
        t = Task(id=tid + "d", func=other, due=self.now, after=(up,), created=self.now)
        self.both(lambda s: s.insert(t, on_conflict="replace"))

    @rule(step=st.floats(0, 20))
    def tick(self, step: float) -> None:
        self.now += step

    @rule(ids=st.lists(st.sampled_from(IDS), max_size=4))
    def promote(self, ids: list[str]) -> None:
        self.both(lambda s: s.promote(ids, self.now))

    @rule(tid=st.sampled_from(IDS), state=st.sampled_from([S.CANCELLED, S.READY]))
    def transition(self, tid: str, state: TaskState) -> None:
        t = self.full.find(tid)
        version = t.version if t is not None else 0
        self.both(lambda s: s.transition(tid, expected_version=version, state=state, now=self.now))

    @rule(tid=st.sampled_from(IDS))
    def claim_and_finish(self, tid: str) -> None:
        t = self.full.find(tid)
        version = t.version if t is not None else 0
        self.both(
            lambda s: s.claim(
                tid, expected_version=version, owner="w", lease_expires=self.now + 9, now=self.now
            )
        )
        self.both(lambda s: s.finish(tid, owner="w", state=S.SUCCEEDED, now=self.now))

    @rule(tid=st.sampled_from(IDS))
    def delete(self, tid: str) -> None:
        self.both(lambda s: s.delete(tid))

    @rule(pending=st.booleans(), before=st.floats(990, 1100))
    def prune(self, pending: bool, before: float) -> None:
        states = [S.PENDING, S.CANCELLED] if pending else None
        self.both(lambda s: s.prune(before=before, states=states))

    @invariant()
    def same_answers(self) -> None:
        for tid in IDS:
            self.both(functools.partial(MemoryStore.get, task_id=tid))
            self.both(functools.partial(MemoryStore.find, task_id=tid))
        self.both(lambda s: s.count_by_state())
        self.both(lambda s: len(s))
        self.both(lambda s: s.tasks())
        self.both(lambda s: s.tasks(state=S.PENDING))
        self.both(lambda s: s.tasks(state=[S.READY, S.CANCELLED]))
        self.both(lambda s: s.due_before(self.now + 10, limit=3))
        self.both(lambda s: s.due_histogram(self.now, horizon=60, bucket=10))
        self.both(lambda s: s.ready(limit=10))

    @invariant()
    def function_table_counts_the_records(self) -> None:
        records = self.compact._lite._records
        functions = self.compact._lite._functions
        uses = Counter(self.compact._lite._fields(rec)[2] for rec in records.values())
        assert {fid: use[1] for fid, use in functions.items()} == dict(uses)
        for fid, (func, _, shared) in functions.items():
            assert id(func) == fid == shared
        self.compact._lite._check()


TestCompactVersusFull = CompactVersusFull.TestCase
TestCompactVersusFull.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_compact_record_reads_as_a_full_task() -> None:
    s = MemoryStore()
    s.add_pending("a", work, (1, 2), 110.0, 100.0)
    s.add_pending("b", work, (), 105.0, 100.0)
    assert s.get("a") == Task(
        id="a", func=work, args=(1, 2), due=110.0, created=100.0, updated=100.0
    )
    assert s.find("b") == Task(id="b", func=work, due=105.0, created=100.0, updated=100.0)
    assert s.count_by_state() == {S.PENDING: 2}
    assert len(s) == 2
    assert [t.id for t in s.tasks()] == ["b", "a"]
    with pytest.raises(DuplicateKeyError, match="'a'"):
        s.add_pending("a", work, (), 1.0, 1.0)
    # reads do not expand the record: it stays compact until it changes
    assert s._lite.keys() == {"a", "b"}
    assert not s._tasks
    moved = s.promote(["a", "b"], 106.0)
    assert [(t.id, t.state, t.version, t.updated) for t in moved] == [("b", S.READY, 1, 106.0)]
    assert s._lite.keys() == {"a"}
    assert s.transition("a", expected_version=0, state=S.CANCELLED, now=107.0).task.version == 1
    assert not s._lite
    assert s.delete("b")
    assert not s.delete("b")
    with pytest.raises(TaskNotFoundError):
        s.get("b")


def test_add_ready_stores_a_due_task_as_promoted() -> None:
    s = MemoryStore()
    t = s.add_ready("r", work, (3,), 99.0, 100.0)
    assert t == Task(
        id="r",
        func=work,
        args=(3,),
        due=99.0,
        state=S.READY,
        version=1,
        created=100.0,
        updated=100.0,
    )
    assert s.get("r") == t
    assert s.ready(limit=5) == [t]
    with pytest.raises(DuplicateKeyError, match="'r'"):
        s.add_ready("r", work, (), 1.0, 1.0)
    s.add_pending("p", work, (), 200.0, 100.0)
    with pytest.raises(DuplicateKeyError, match="'p'"):
        s.add_ready("p", work, (), 1.0, 1.0)
    with pytest.raises(ValueError, match="at or before now"):
        s.add_ready("late", work, (), 101.0, 100.0)
    assert s.count_by_state() == {S.READY: 1, S.PENDING: 1}


def test_compact_records_are_not_tracked_by_the_cyclic_gc() -> None:
    # A record without arguments holds only numbers, so the collector drops it after one pass
    # instead of traversing every pending task in each full collection.
    s = MemoryStore()
    s.add_pending("a", work, (), 110.0, 100.0)
    s.add_pending("b", work, ([1],), 110.0, 100.0)
    gc.collect()
    records = s._lite._records
    assert not gc.is_tracked(records["a"])
    assert gc.is_tracked(records["b"])  # its arguments hold a list
    # one object per record without arguments (no tuple, no float, no int of its own) ...
    assert type(records["a"]) is bytes
    assert len(records["a"]) == RECORD.size
    # ... and one int object per function, not per record, in those with arguments
    s.add_pending("c", work, (2,), 110.0, 100.0)
    b, c = records["b"], records["c"]
    assert isinstance(b, tuple)
    assert isinstance(c, tuple)
    assert b[2] is c[2] == fields(records["a"])[2] == id(work)
    assert s.get("a").func is work
    s._lite._check()


@pytest.mark.parametrize("end", ["promote", "cancel", "delete", "replace", "prune"])
def test_a_function_is_released_with_its_last_compact_record(end: str) -> None:
    s = MemoryStore()

    def make() -> Callable[[], None]:
        return lambda: None

    f = make()
    ref = weakref.ref(f)
    s.add_pending("a", f, (), 110.0, 100.0)
    s.add_pending("b", f, (), 120.0, 100.0)
    del f
    s.delete("b")
    assert ref() is not None  # "a" still needs it
    if end == "promote":
        (t,) = s.promote(["a"], 115.0)
        del t
        s.delete("a")
    elif end == "cancel":
        s.transition("a", expected_version=0, state=S.CANCELLED, now=101.0)
        s.delete("a")
    elif end == "delete":
        s.delete("a")
    elif end == "replace":
        s.insert(Task(id="a", func=other, due=1.0, created=1.0), on_conflict="replace")
    else:
        assert s.prune(before=101.0, states=[S.PENDING]) == 1
    assert not s._lite._functions
    gc.collect()
    assert ref() is None


def test_a_deleted_compact_upstream_forgets_its_dependents() -> None:
    s = MemoryStore()
    s.add_pending("up", work, (), 110.0, 100.0)
    s.insert(Task(id="d", func=other, due=100.0, after=("up",), created=100.0))
    assert s._lite.keys() == {"up"}  # counting a dependency leaves the upstream compact
    assert s.delete("up")
    s.add_pending("up", work, (), 110.0, 100.0)  # a new task under the same id
    s.promote(["up"], 120.0)
    s.claim("up", expected_version=1, owner="w", lease_expires=130.0, now=120.0)
    ch = s.finish("up", owner="w", state=S.SUCCEEDED, now=121.0)
    assert ch is not None
    assert ch.dependents == ()
    assert s.get("d").unmet == 1  # it waited on the deleted task, not on this one


def test_promote_leaves_a_compact_task_alone_when_a_successor_has_its_id() -> None:
    s = MemoryStore()
    s.add_pending("next", work, (1,), 200.0, 100.0)
    s.promote([], 150.0, successors=[Task(id="next", func=other, due=300.0, created=150.0)])
    assert s.get("next") == Task(
        id="next", func=work, args=(1,), due=200.0, created=100.0, updated=100.0
    )
    assert len(s) == 1
    s._lite._check()


class _CountingLock:
    """A re-entrant lock that counts how often it is taken (from outside)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.holds = 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.holds += 1

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_prune_releases_the_lock_between_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_PRUNE_BATCH", 3)
    s = MemoryStore()
    for i in range(10):
        s.insert(Task(id=f"c{i}", func=work, due=1.0, created=1.0))
        s.transition(f"c{i}", expected_version=0, state=S.CANCELLED, now=2.0)
    for i in range(5):
        s.add_pending(f"p{i}", work, (), 50.0, 1.0)
    s.add_pending("young", work, (), 50.0, 20.0)
    s.insert(Task(id="kept", func=work, due=1.0, created=1.0))
    s.transition("kept", expected_version=0, state=S.CANCELLED, now=30.0)
    counting = _CountingLock()
    s._lock = counting  # type: ignore[assignment]  # the point of the test
    assert s.prune(before=10.0, states=[S.CANCELLED, S.PENDING]) == 15
    assert counting.holds == 1 + 4 + 2  # the candidates once, then 4 + 2 batches of 3
    assert sorted(t.id for t in s.tasks()) == ["kept", "young"]
    assert s.count_by_state() == {S.CANCELLED: 1, S.PENDING: 1}
    s._lite._check()


def test_prune_lets_a_waiting_thread_in_between_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two batches the pruning thread hands over the interpreter, unlocked: another
    thread's write made at that moment goes through (with the lock held it would block)."""
    monkeypatch.setattr(memory, "_PRUNE_BATCH", 3)
    s = MemoryStore()
    for i in range(9):
        s.insert(Task(id=f"c{i}", func=work, due=1.0, created=1.0))
        s.transition(f"c{i}", expected_version=0, state=S.CANCELLED, now=2.0)
    written: list[str] = []

    def other_thread_writes() -> None:
        task_id = f"w{len(written)}"
        t = threading.Thread(target=s.insert, args=(Task(id=task_id, func=work, due=9.0),))
        t.start()
        t.join(10.0)
        assert not t.is_alive(), "the lock was held between two batches"
        written.append(task_id)

    monkeypatch.setattr(memory, "_let_others_in", other_thread_writes)
    assert s.prune(before=10.0, states=[S.CANCELLED]) == 9
    assert written == ["w0", "w1", "w2"], "once after each batch"
    assert sorted(t.id for t in s.tasks()) == written


def test_a_batch_of_one_function_is_kept_as_int_records_until_its_last_task_leaves() -> None:
    s = MemoryStore()
    template = Task(id="template", func=print, due=100.0, created=100.0, updated=100.0)
    args: list[tuple[Any, ...]] = [(1,), (), ([2],)]
    dues = [110.0, 111.0, 112.0]
    s.insert_new(NewTasks(template, ["a", "b", "c"], [work] * 3, args, [EMPTY_KWARGS] * 3, dues))
    records = s._lite._records
    assert [type(r) for r in records.values()] == [int, int, int]  # no tuple per task
    assert [(t.id, t.args, t.due, t.created) for t in sorted(s.tasks(), key=lambda t: t.id)] == [
        ("a", (1,), 110.0, 100.0),
        ("b", (), 111.0, 100.0),
        ("c", ([2],), 112.0, 100.0),
    ]
    s._lite._check()
    (moved,) = s.promote(["b"], 111.0)
    assert (moved.state, moved.args, moved.func) == (S.READY, (), work)
    s.delete("a")
    s._lite._check()
    assert s.get("c").args == ([2],)
    assert s._lite._batches
    s.delete("c")
    assert not s._lite._batches
    assert not s._lite._functions
