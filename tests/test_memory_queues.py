"""MemoryStore's counts by queue and its search by function, against a recount of every task.

The store keeps counts for the queues other than the default one as tasks change, and works
out the default queue's from each state's size; a random sequence of operations (compact and
full inserts, replacements, promotions, runs, retries, queue changes, deletions, pruning) must
leave :meth:`count_by_queue` equal to a count of :meth:`tasks`, and :meth:`by_function` equal
to a sort of every task by reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from timewheel.errors import TimewheelError
from timewheel.stores import policy
from timewheel.stores.memory import MemoryStore
from timewheel.task import DEFAULT_QUEUE, Task, TaskState

S = TaskState
IDS = [f"t{i}" for i in range(8)]
QUEUES = [DEFAULT_QUEUE, "mail", "reports"]


def send(*args: Any) -> None:
    pass


def sync(*args: Any) -> None:
    pass


FUNCS = [send, sync, "tests.apps.worker_app:fail"]


def _quietly(fn: Callable[[], object]) -> None:
    try:
        fn()
    except TimewheelError:
        pass  # a refused change (a conflict, a missing task) is part of the sequence


class QueuesVersusRecount(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()
        self.now = 1000.0

    def version(self, tid: str) -> int:
        t = self.store.find(tid)
        return 0 if t is None else t.version

    @rule(
        tid=st.sampled_from(IDS),
        queue=st.sampled_from(QUEUES),
        func=st.sampled_from(FUNCS),
        how=st.sampled_from(["keep", "replace", "error"]),
    )
    def insert(self, tid: str, queue: str, func: Any, how: Any) -> None:
        t = Task(id=tid, func=func, due=self.now + 1, queue=queue, created=self.now)
        _quietly(lambda: self.store.insert(t, on_conflict=how))

    @rule(tid=st.sampled_from(IDS), func=st.sampled_from([send, sync]))
    def add_pending(self, tid: str, func: Callable[..., Any]) -> None:
        _quietly(lambda: self.store.add_pending(tid, func, (), self.now + 2, self.now))

    @rule(step=st.floats(0, 5))
    def tick(self, step: float) -> None:
        self.now += step

    @rule(ids=st.lists(st.sampled_from(IDS), max_size=4))
    def promote(self, ids: list[str]) -> None:
        self.store.promote(ids, self.now)

    @rule(
        tid=st.sampled_from(IDS),
        end=st.sampled_from([S.SUCCEEDED, S.FAILED, S.PENDING, S.READY]),
    )
    def run(self, tid: str, end: TaskState) -> None:
        c = self.store.claim(
            tid,
            expected_version=self.version(tid),
            owner="w",
            lease_expires=self.now + 9,
            now=self.now,
        )
        if c is not None:
            assert c.started == self.now
            self.store.finish(tid, owner="w", state=end, now=self.now)

    @rule(
        tid=st.sampled_from(IDS),
        state=st.sampled_from([S.READY, S.CANCELLED, S.RUNNING]),
        queue=st.sampled_from(QUEUES),
    )
    def transition(self, tid: str, state: TaskState, queue: str) -> None:
        _quietly(
            lambda: self.store.transition(
                tid, expected_version=self.version(tid), state=state, now=self.now, queue=queue
            )
        )

    @rule(tid=st.sampled_from(IDS))
    def delete(self, tid: str) -> None:
        self.store.delete(tid)

    @rule(limit=st.none() | st.integers(1, 3))
    def prune(self, limit: int | None) -> None:
        self.store.prune(before=self.now + 1, limit=limit)

    @invariant()
    def counts_match_a_recount(self) -> None:
        want: dict[str, dict[TaskState, int]] = {}
        for t in self.store.tasks():
            by_state = want.setdefault(t.queue, {})
            by_state[t.state] = by_state.get(t.state, 0) + 1
        assert self.store.count_by_queue() == want

    @invariant()
    def retrying_and_ready_match_a_recount(self) -> None:
        # promote keeps these indexes by a path of its own (PENDING -> READY)
        every = self.store.tasks()
        retrying = {t.id for t in every if t.state is S.PENDING and t.attempts}
        assert {t.id for t in self.store.retrying(len(IDS))} == retrying
        ready = {t.id for t in every if t.state is S.READY}
        assert {t.id for t in self.store.ready(limit=len(IDS))} == ready

    @invariant()
    def by_function_matches_a_sort(self) -> None:
        every = sorted(self.store.tasks(), key=lambda t: (t.func_name, t.id))
        for prefix in ("tests.", "tests.test_memory_queues:s", "tests.test_memory_queues:send"):
            want = [t for t in every if t.func_name.startswith(prefix)]
            assert self.store.by_function(prefix, limit=3) == want[:3]


TestQueuesVersusRecount = QueuesVersusRecount.TestCase
TestQueuesVersusRecount.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


@given(prefix=st.text(max_size=4), text=st.text(max_size=6))
@settings(max_examples=400, deadline=None)
def test_prefix_range_holds_exactly_the_strings_with_the_prefix(prefix: str, text: str) -> None:
    """``prefix_range`` is the range of code points the SQL stores read for a prefix."""
    low, high = policy.prefix_range(prefix)
    following = prefix and prefix[-1] != chr(0x10FFFF)
    after = [prefix[:-1] + chr(ord(prefix[-1]) + 1) + text] if following else []
    for s in (text, prefix + text, prefix[:-1] + text, *after):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in s):
            continue  # a lone surrogate is no stored text
        inside = low <= s and (high is None or s < high)
        assert inside == s.startswith(prefix), (prefix, s, low, high)


def test_prefix_range_at_the_last_code_point() -> None:
    last = chr(0x10FFFF)
    assert policy.prefix_range("a" + last) == ("a" + last, "b")
    assert policy.prefix_range(last) == (last, None)
    assert policy.prefix_range("\ud7ff") == ("\ud7ff", "\ue000")
