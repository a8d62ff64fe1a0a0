"""DelayQueue: ordering, ties, cancel, timeouts on a FakeClock, real threads, shutdown, restart.

Tests on a FakeClock never use real time as a timing assertion: a consumer thread is known to be
blocked when ``statistics().waiting_getters`` says so (it is counted under the queue's lock, which
it releases only inside its wait), and real-time bounds (``join(timeout=...)``) only keep a broken
test from hanging.
"""

from __future__ import annotations

import math
import queue
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from timewheel.delayqueue import DelayQueue, DelayToken, QueueShutDownError
from timewheel.errors import InvalidScheduleError, SchedulerStateError, SerializationError
from timewheel.stores.memory import MemoryStore
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import TaskState
from timewheel.testing import FakeClock

UTC = timezone.utc
START = datetime(2026, 3, 29, tzinfo=UTC)
T0 = START.timestamp()
BOUND = 30.0  # real seconds: only a guard against hanging, never a timing assertion


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=START)


@pytest.fixture
def q(clock: FakeClock) -> Iterator[DelayQueue[Any]]:
    dq: DelayQueue[Any] = DelayQueue(clock=clock)
    yield dq
    dq.shutdown(immediate=True)


def wait_until(pred: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + BOUND
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.001)


class Runner:
    """Runs *fn* in a thread and keeps its result or exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as e:
            self.error = e

    def join(self) -> None:
        self.thread.join(BOUND)
        assert not self.thread.is_alive(), "thread still blocked"


def waiting(dq: DelayQueue[Any], getters: int = 0, putters: int = 0) -> Callable[[], bool]:
    def pred() -> bool:
        s = dq.statistics()
        return s.waiting_getters == getters and s.waiting_putters == putters

    return pred


def drain(dq: DelayQueue[Any]) -> list[Any]:
    out = []
    while True:
        try:
            out.append(dq.get_nowait())
        except queue.Empty:
            return out


# -- ordering -------------------------------------------------------------------------------------


def test_items_come_out_earliest_due_first_and_only_when_due(
    clock: FakeClock, q: DelayQueue[Any]
) -> None:
    q.put("c", delay=3)
    q.put("a", delay=1)
    q.put("b", delay=timedelta(seconds=2))
    with pytest.raises(queue.Empty):
        q.get_nowait()
    assert clock.advance(0.999) == []
    assert q.ready_count() == 0
    assert clock.advance(0.001) == ["a"]
    assert clock.advance(5) == ["b", "c"]
    assert drain(q) == ["a", "b", "c"]


def test_ties_come_out_first_in_first_out(clock: FakeClock, q: DelayQueue[Any]) -> None:
    at = START + timedelta(seconds=10)
    for i in range(50):
        q.put(i, at=at)
    q.put("early", at=T0 + 5)
    q.put("late", delay=10.5)
    clock.advance(20)
    assert drain(q) == ["early", *range(50), "late"]


def test_a_past_due_put_overtakes_due_items_that_are_later(
    clock: FakeClock, q: DelayQueue[Any]
) -> None:
    q.put("x", delay=5)
    clock.advance(10)
    q.put("y", delay=-20)  # negative delay: due (long) ago
    q.put("z", at=clock.time())
    assert q.ready_count() == 3
    assert drain(q) == ["y", "x", "z"]


def test_advance_steps_through_the_queue_deadline_by_deadline(
    clock: FakeClock, q: DelayQueue[Any]
) -> None:
    seen: list[tuple[str, float]] = []
    for name, d in [("b", 2.5), ("a", 1.25), ("c", 3600)]:
        q.put(name, delay=d)
    made_due = clock.advance(minutes=1)
    assert made_due == ["a", "b"]
    while q.ready_count():
        seen.append((q.get_nowait(), clock.time()))
    assert seen == [("a", T0 + 60), ("b", T0 + 60)]
    assert len(q) == 1


def test_token_carries_id_and_aware_due(clock: FakeClock, q: DelayQueue[Any]) -> None:
    tok = q.put("x", delay=90)
    assert isinstance(tok, DelayToken)
    assert isinstance(tok.id, str)
    assert tok.id
    assert tok.due == START + timedelta(seconds=90)
    assert tok.due.tzinfo is not None
    other = q.put("y", at=datetime(2026, 3, 29, 3, 0, tzinfo=timezone(timedelta(hours=2))))
    assert other.due == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert other.id != tok.id


# -- peek, len, ready_count, statistics ------------------------------------------------------------


def test_peek_len_and_ready_count(clock: FakeClock, q: DelayQueue[Any]) -> None:
    assert q.peek() is None
    assert len(q) == 0
    assert q.empty()
    q.put("later", delay=20)
    q.put("soon", delay=10)
    assert q.peek() == "soon"  # not yet due, still shown
    assert (len(q), q.qsize(), q.ready_count()) == (2, 2, 0)
    assert not q.empty()
    assert not q.full()
    clock.advance(15)
    assert (len(q), q.ready_count()) == (2, 1)
    assert q.peek() == "soon"
    assert q.get_nowait() == "soon"
    assert q.peek() == "later"
    assert (len(q), q.ready_count()) == (1, 0)
    stats = q.statistics()
    assert (stats.pending, stats.ready, stats.put, stats.taken, stats.cancelled) == (1, 0, 2, 1, 0)
    assert not stats.shut_down


def test_peek_shows_a_due_item_before_an_earlier_cancelled_one(
    clock: FakeClock, q: DelayQueue[Any]
) -> None:
    first = q.put("first", delay=1)
    q.put("second", delay=2)
    q.put("third", delay=3)
    assert first.cancel()
    assert q.peek() == "second"
    clock.advance(2)
    assert q.peek() == "second"


# -- cancel ---------------------------------------------------------------------------------------


def test_cancel_before_due_after_due_and_after_taken(clock: FakeClock, q: DelayQueue[Any]) -> None:
    before = q.put("before", delay=10)
    after = q.put("after", delay=1)
    taken = q.put("taken", delay=0)
    assert before.cancel() is True
    assert before.cancel() is False  # already cancelled
    assert len(q) == 2
    assert q.get_nowait() == "taken"
    assert taken.cancel() is False  # taken before
    clock.advance(1)
    assert q.ready_count() == 1
    assert q.cancel(after.id) is True  # by id, once due
    assert q.ready_count() == 0
    assert clock.advance(60) == []
    assert len(q) == 0
    with pytest.raises(queue.Empty):
        q.get_nowait()
    assert q.statistics().cancelled == 2


def test_many_cancels_keep_order_and_memory_bounded(clock: FakeClock, q: DelayQueue[Any]) -> None:
    rng = random.Random(7)
    tokens = [(q.put(i, delay=rng.uniform(0, 100)), i) for i in range(2000)]
    keep = []
    for tok, i in tokens:
        if i % 3:
            assert tok.cancel()
        else:
            keep.append((tok.due, i))
    assert len(q._pending) <= 2 * len(q) + 64  # the peek heap is compacted
    clock.advance(50)
    for tok, i in tokens[::3][:50]:
        tok.cancel()
        keep.remove((tok.due, i))
    clock.advance(60)
    assert drain(q) == [i for _, i in sorted(keep)]


# -- bad input ------------------------------------------------------------------------------------


def test_bad_input_is_refused_with_a_way_out(q: DelayQueue[Any]) -> None:
    with pytest.raises(InvalidScheduleError, match="attach one"):
        q.put("x", at=datetime(2026, 3, 29, 12, 0))  # naive
    with pytest.raises(InvalidScheduleError, match="finite"):
        q.put("x", delay=math.nan)
    with pytest.raises(InvalidScheduleError, match="finite"):
        q.put("x", at=math.inf)
    with pytest.raises(InvalidScheduleError, match="exactly one of delay= and at="):
        q.put("x", delay=1, at=T0)
    with pytest.raises(InvalidScheduleError, match="exactly one of delay= or at="):
        q.put("x")
    with pytest.raises(TypeError, match="delay must be a number"):
        q.put("x", delay="10")  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(TypeError, match="delay must be a number"):
        q.put("x", delay=True)
    with pytest.raises(TypeError, match="pass it as delay="):
        q.put("x", at=timedelta(seconds=5))  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(InvalidScheduleError, match="range of datetime"):
        q.put("x", delay=1e300)
    with pytest.raises(InvalidScheduleError, match="non-negative"):
        q.get(timeout=-1)
    with pytest.raises(ValueError, match="name"):
        DelayQueue(name="")
    assert len(q) == 0


# -- timeouts and blocking on a FakeClock ----------------------------------------------------------


def test_get_timeout_runs_out_on_the_fake_clock(clock: FakeClock, q: DelayQueue[Any]) -> None:
    r = Runner(lambda: q.get(timeout=5))
    wait_until(waiting(q, getters=1), "the consumer waits")
    assert clock.advance(4.999) == []
    r.thread.join(0.05)
    assert r.thread.is_alive()  # 4.999 fake seconds are not 5
    wait_until(waiting(q, getters=1), "the consumer waits again")
    clock.advance(0.001)
    r.join()
    assert isinstance(r.error, queue.Empty)
    assert clock.time() == T0 + 5


def test_get_timeout_longer_than_the_advance_keeps_waiting_across_steps(
    clock: FakeClock, q: DelayQueue[Any]
) -> None:
    q.put("never in time", delay=100)
    r = Runner(lambda: q.get(timeout=30))
    wait_until(waiting(q, getters=1), "the consumer waits")
    clock.advance(10)
    clock.advance(10)
    r.thread.join(0.05)
    assert r.thread.is_alive()
    wait_until(waiting(q, getters=1), "the consumer waits again")
    assert clock.advance(90) == ["never in time"]  # steps to the timeout (30), then to 100
    r.join()
    assert isinstance(r.error, queue.Empty)
    assert q.get_nowait() == "never in time"


def test_zero_timeout_and_nonblocking_get_never_wait(q: DelayQueue[Any]) -> None:
    q.put("x", delay=1)
    with pytest.raises(queue.Empty):
        q.get(timeout=0)
    with pytest.raises(queue.Empty):
        q.get(block=False, timeout=100)


def test_blocking_get_returns_when_advance_makes_an_item_due(
    clock: FakeClock, q: DelayQueue[Any]
) -> None:
    q.put("x", delay=600)
    r = Runner(lambda: (q.get(), clock.time()))
    wait_until(waiting(q, getters=1), "the consumer waits")
    clock.advance(minutes=9, seconds=59)
    r.thread.join(0.05)
    assert r.thread.is_alive()
    assert clock.advance(seconds=1) == ["x"]
    r.join()
    assert r.error is None
    item, when = r.result
    assert item == "x"
    assert when >= T0 + 600


def test_put_of_an_earlier_item_wakes_a_waiting_consumer(
    clock: FakeClock, q: DelayQueue[Any]
) -> None:
    q.put("late", delay=3600)
    r = Runner(q.get)
    wait_until(waiting(q, getters=1), "the consumer waits")
    q.put("now", delay=0)  # the clock does not move: only the put can wake the consumer
    r.join()
    assert r.result == "now"
    assert len(q) == 1


def test_one_advance_feeds_every_waiting_consumer(clock: FakeClock, q: DelayQueue[Any]) -> None:
    runners = [Runner(q.get) for _ in range(3)]
    wait_until(waiting(q, getters=3), "three consumers wait")
    for i in range(3):
        q.put(i, delay=1)
    assert clock.advance(1) == [0, 1, 2]
    for r in runners:
        r.join()
    assert sorted(r.result for r in runners) == [0, 1, 2]


def test_bounded_queue_blocks_put_until_space_or_timeout(clock: FakeClock) -> None:
    dq: DelayQueue[int] = DelayQueue(clock=clock, maxsize=2)
    first = dq.put(1, delay=10)
    dq.put(2, delay=20)
    assert dq.full()
    with pytest.raises(queue.Full):
        dq.put_nowait(3, delay=1)
    r = Runner(lambda: dq.put(3, delay=5, timeout=5))
    wait_until(waiting(dq, putters=1), "the producer waits")
    clock.advance(5)
    r.join()
    assert isinstance(r.error, queue.Full)
    r = Runner(lambda: dq.put(4, delay=1))
    wait_until(waiting(dq, putters=1), "the producer waits")
    assert first.cancel()
    r.join()
    assert r.error is None
    clock.advance(60)
    assert drain(dq) == [4, 2]
    dq.shutdown()


# -- shutdown -------------------------------------------------------------------------------------


def test_shutdown_wakes_every_blocked_consumer_and_producer(clock: FakeClock) -> None:
    dq: DelayQueue[str] = DelayQueue(clock=clock, maxsize=1)
    dq.put("far", delay=3600)
    getters = [Runner(dq.get) for _ in range(3)] + [Runner(lambda: dq.get(timeout=100))]
    putter = Runner(lambda: dq.put("more", delay=1))
    wait_until(waiting(dq, getters=4, putters=1), "everyone waits")
    dq.shutdown()
    for r in [*getters, putter]:
        r.join()
        assert isinstance(r.error, QueueShutDownError)
        assert isinstance(r.error, SchedulerStateError)
        assert isinstance(r.error, RuntimeError)
    with pytest.raises(QueueShutDownError, match="shut down"):
        dq.put("x", delay=1)
    assert dq.statistics().shut_down


def test_shutdown_wakes_consumers_on_the_system_clock() -> None:
    dq: DelayQueue[str] = DelayQueue()
    dq.put("far", delay=3600)
    runners = [Runner(dq.get) for _ in range(4)]
    wait_until(waiting(dq, getters=4), "every consumer waits")
    dq.shutdown()
    for r in runners:
        r.join()
        assert isinstance(r.error, QueueShutDownError)


def test_after_shutdown_due_items_drain_and_then_get_raises(
    clock: FakeClock, q: DelayQueue[Any]
) -> None:
    q.put("due", delay=1)
    not_yet = q.put("not yet", delay=100)
    clock.advance(1)
    q.shutdown()
    q.shutdown()  # idempotent
    assert q.get() == "due"  # still delivered
    with pytest.raises(QueueShutDownError, match="no item is due"):
        q.get()  # does not wait for "not yet"
    with pytest.raises(QueueShutDownError):
        q.get_nowait()
    assert len(q) == 1
    assert not_yet.cancel()


def test_immediate_shutdown_discards_items(clock: FakeClock, q: DelayQueue[Any]) -> None:
    q.put("due", delay=0)
    q.put("later", delay=5)
    q.shutdown(immediate=True)
    assert len(q) == 0
    with pytest.raises(QueueShutDownError, match="discarded"):
        q.get_nowait()
    assert clock.advance(10) == []


def test_context_manager_shuts_down(clock: FakeClock) -> None:
    with DelayQueue[str](clock=clock) as dq:
        dq.put("x", delay=1)
    with pytest.raises(QueueShutDownError):
        dq.put("y", delay=1)


# -- real threads, real clock ----------------------------------------------------------------------


@pytest.mark.realclock
def test_real_clock_get_waits_until_due() -> None:
    dq: DelayQueue[str] = DelayQueue()
    tok = dq.put("x", delay=0.05)
    with pytest.raises(queue.Empty):
        dq.get_nowait()
    assert dq.get(timeout=BOUND) == "x"
    assert time.time() >= tok.due.timestamp() - 1e-6  # the token's due is rounded to 1 us
    with pytest.raises(queue.Empty):
        dq.get(timeout=0.02)
    dq.shutdown()


@pytest.mark.realclock
def test_many_producers_and_consumers_lose_and_duplicate_nothing() -> None:
    producers, per_producer, consumers = 4, 2000, 4
    dq: DelayQueue[list[int]] = DelayQueue()
    dues: dict[tuple[int, int], float] = {}
    dues_lock = threading.Lock()
    received: list[list[tuple[tuple[int, int], float]]] = [[] for _ in range(consumers)]
    errors: list[BaseException] = []

    cancelled: set[tuple[int, int]] = set()

    def produce(p: int) -> None:
        rng = random.Random(p)
        tokens = []
        for i in range(per_producer):
            tok = dq.put([p, i], delay=rng.uniform(0.0, 0.05))
            tokens.append(tok)
            with dues_lock:
                dues[(p, i)] = tok.due.timestamp()
            if i % 7 == 6:  # race a consumer for an item put a moment ago (due or not)
                j = rng.randrange(max(0, i - 20), i + 1)
                if tokens[j].cancel():
                    with dues_lock:
                        cancelled.add((p, j))

    def consume(c: int) -> None:
        try:
            while True:
                item = dq.get()
                received[c].append(((item[0], item[1]), time.time()))
        except QueueShutDownError:
            pass
        except BaseException as e:
            errors.append(e)

    cs = [threading.Thread(target=consume, args=(c,), daemon=True) for c in range(consumers)]
    ps = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(producers)]
    for t in [*cs, *ps]:
        t.start()
    try:
        for t in ps:
            t.join(BOUND)
            assert not t.is_alive(), "a producer is still putting"
        wait_until(dq.empty, "every item is taken")
    finally:
        dq.shutdown()
    for t in cs:
        t.join(BOUND)
        assert not t.is_alive()
    assert errors == []
    got = Counter(key for part in received for key, _ in part)
    assert set(got.values()) == {1}  # never twice
    assert set(got).isdisjoint(cancelled)  # a successful cancel means never delivered
    assert len(got) + len(cancelled) == producers * per_producer  # nothing lost
    assert cancelled  # the race was exercised
    early = [(k, when, dues[k]) for part in received for k, when in part if when < dues[k] - 1e-6]
    assert early == []  # never before its due time (1 us: the token's due is rounded)
    assert sum(map(len, received)) == dq.statistics().taken


@pytest.mark.realclock
def test_threads_share_a_durable_queue_exactly_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "queue.db", durability="fast")
    dq: DelayQueue[list[int]] = DelayQueue(store=store)
    received: list[tuple[int, int]] = []
    received_lock = threading.Lock()

    def produce(p: int) -> None:
        rng = random.Random(p)
        for i in range(150):
            dq.put([p, i], delay=rng.uniform(0.0, 0.02))

    def consume() -> None:
        try:
            while True:
                item = dq.get()
                with received_lock:
                    received.append((item[0], item[1]))
        except QueueShutDownError:
            pass

    threads = [threading.Thread(target=consume, daemon=True) for _ in range(3)]
    threads += [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(2)]
    for t in threads:
        t.start()
    try:
        for t in threads[3:]:
            t.join(BOUND)
            assert not t.is_alive(), "a producer is still putting"
        wait_until(dq.empty, "every item is taken")
    finally:
        dq.shutdown()
    for t in threads[:3]:
        t.join(BOUND)
    assert sorted(received) == [(p, i) for p in range(2) for i in range(150)]
    assert store.count_by_state() == {TaskState.SUCCEEDED: 300}
    store.close()


# -- stores ---------------------------------------------------------------------------------------


def test_restart_with_sqlite_store(clock: FakeClock, tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    store = SQLiteStore(path)
    dq: DelayQueue[Any] = DelayQueue(clock=clock, store=store, name="mail")
    other: DelayQueue[Any] = DelayQueue(clock=clock, store=store, name="other")
    other.put("not mail", delay=1)
    taken = dq.put({"to": "taken"}, delay=1)
    dq.put({"to": "ready"}, delay=2)
    cancelled = dq.put("cancelled", delay=3)
    dq.put(["tie", 1], delay=30)
    dq.put(["tie", 2], delay=30)
    dq.put(10, delay=20)
    dq.put(None, delay=25)
    clock.advance(2)
    assert dq.get_nowait() == {"to": "taken"}
    assert cancelled.cancel()
    assert dq.ready_count() == 1
    assert store.get(taken.id).state is TaskState.SUCCEEDED
    assert store.get(cancelled.id).state is TaskState.CANCELLED
    dq.shutdown()
    other.shutdown()
    store.close()

    store = SQLiteStore(path)
    dq = DelayQueue(clock=clock, store=store, name="mail")
    assert len(dq) == 5
    assert dq.ready_count() == 1  # the READY row is due at once
    assert dq.peek() == {"to": "ready"}
    assert clock.advance(60) == [10, None, ["tie", 1], ["tie", 2]]
    assert drain(dq) == [{"to": "ready"}, 10, None, ["tie", 1], ["tie", 2]]
    dq.shutdown()
    store.close()

    store = SQLiteStore(path)
    dq = DelayQueue(clock=clock, store=store, name="mail")
    assert len(dq) == 0  # taken items do not come back
    dq.shutdown()
    again = DelayQueue[Any](clock=clock, store=store, name="other")
    assert again.get_nowait() == "not mail"
    again.shutdown()
    store.close()


def test_a_get_that_crashed_before_finishing_is_delivered_again(
    clock: FakeClock, tmp_path: Path
) -> None:
    path = tmp_path / "queue.db"
    store = SQLiteStore(path)
    dq: DelayQueue[str] = DelayQueue(clock=clock, store=store)
    tok = dq.put("x", delay=1)
    clock.advance(1)
    assert dq.ready_count() == 1
    row = store.get(tok.id)
    # what a get() does first, then "crashes" before its finish: the item was never returned
    assert store.claim(
        tok.id, expected_version=row.version, owner="dead", lease_expires=T0 + 99, now=T0 + 1
    )
    store.close()

    store = SQLiteStore(path)
    dq = DelayQueue(clock=clock, store=store)
    assert dq.get_nowait() == "x"
    assert store.get(tok.id).state is TaskState.SUCCEEDED
    dq.shutdown()
    store.close()


def test_a_row_taken_elsewhere_is_not_delivered_here(clock: FakeClock, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "queue.db")
    dq: DelayQueue[str] = DelayQueue(clock=clock, store=store)
    tok = dq.put("x", delay=1)
    dq.put("y", delay=1)
    clock.advance(1)
    row = store.get(tok.id)
    assert store.claim(
        tok.id, expected_version=row.version, owner="elsewhere", lease_expires=T0 + 99, now=T0 + 1
    )
    assert dq.get_nowait() == "y"
    with pytest.raises(queue.Empty):
        dq.get_nowait()
    assert tok.cancel() is False
    dq.shutdown()
    store.close()


def test_durable_store_refuses_non_json_items_clearly(clock: FakeClock, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "queue.db")
    dq: DelayQueue[Any] = DelayQueue(clock=clock, store=store)
    with pytest.raises(SerializationError, match="must be a JSON value") as e:
        dq.put(object(), delay=1)
    assert isinstance(e.value, TypeError)
    with pytest.raises(SerializationError, match=r"item is a tuple"):
        dq.put((1, 2), delay=1)
    with pytest.raises(SerializationError, match=r"item\[0\]\['when'\]"):
        dq.put([{"when": datetime.now(UTC)}], delay=1)
    with pytest.raises(SerializationError, match="NaN"):
        dq.put(math.nan, delay=1)
    assert len(dq) == 0
    assert store.tasks() == []
    dq.shutdown()
    store.close()


def test_memory_store_keeps_any_item(clock: FakeClock) -> None:
    store = MemoryStore()
    dq: DelayQueue[Any] = DelayQueue(clock=clock, store=store)
    thing = object()
    tok = dq.put(thing, delay=1)
    clock.advance(1)
    assert dq.get_nowait() is thing
    assert store.get(tok.id).state is TaskState.SUCCEEDED
    dq.shutdown()


# -- documentation ----------------------------------------------------------------------------------

DOC = Path(__file__).resolve().parent.parent / "docs" / "delayqueue.md"


@pytest.mark.realclock
@pytest.mark.parametrize(
    "code",
    [
        pytest.param(code, id=f"example{i}")
        for i, code in enumerate(
            re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL), 1
        )
    ],
)
def test_docs_examples_run(code: str) -> None:
    exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})
