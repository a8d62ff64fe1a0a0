"""The default ``ThreadPoolDispatcher`` with real threads: volume, shutdown, leases, timeouts.

No test asserts a duration. Waits are bounded (so a bug fails the test instead of hanging it) but
generous; tests that must let real time pass are marked ``realclock``.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from timewheel.dispatch import ThreadPoolDispatcher
from timewheel.errors import JobTimeoutError, SchedulerStateError
from timewheel.scheduler import Event, Job, Scheduler
from timewheel.stores.memory import MemoryStore
from timewheel.task import Retry, Task, TaskState
from timewheel.testing import FakeClock

BOUND = 60.0  # seconds: the most any wait below may take before the test is declared hung


def _wait_until(pred: Callable[[], bool], what: str, bound: float = BOUND) -> None:
    end = time.monotonic() + bound
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.002)


def _join_workers(d: ThreadPoolDispatcher) -> None:
    for t in list(d._threads):  # the pool's own threads: the abandoned ones return late
        t.join(BOUND)
        assert not t.is_alive(), f"{t.name} did not exit"


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event blocked tasks wait on; always set at teardown so no thread outlives a test."""
    ev = threading.Event()
    yield ev
    ev.set()


# -- volume ---------------------------------------------------------------------------------


@pytest.mark.realclock
def test_cancels_racing_promotion_and_workers_never_lose_or_double_run() -> None:
    """Two threads schedule (compact records, some due at once) while a third cancels at
    random: every task ends either SUCCEEDED, having run once, or CANCELLED, never having run."""
    n = 6_000
    runs: Counter[int] = Counter()
    lock = threading.Lock()

    def work(i: int) -> None:
        with lock:
            runs[i] += 1

    jobs: dict[int, Job] = {}
    cancelled: set[int] = set()
    with Scheduler() as sched:

        def producer(part: int) -> None:
            for i in range(part, n, 2):
                jobs[i] = sched.schedule(work, i, delay=(i % 7) / 1000 if i % 3 else 0)

        producing = [threading.Thread(target=producer, args=(p,)) for p in (0, 1)]

        def canceller() -> None:
            # races the producers for as long as they run (however slow the machine), then n more
            rng = random.Random(7)
            tries = 0
            while tries < n or any(t.is_alive() for t in producing):
                tries += 1
                i = rng.randrange(n)
                job = jobs.get(i)
                if job is not None and job.cancel():
                    with lock:
                        cancelled.add(i)

        threads = [*producing, threading.Thread(target=canceller)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND)
        _wait_until(
            lambda: sched.statistics().succeeded + len(cancelled) == n,
            "every task to succeed or be cancelled",
        )
        states = {i: j.state for i, j in jobs.items()}
    assert len(jobs) == n
    assert cancelled, "the race never cancelled anything: the test lost its point"
    for i, state in states.items():
        if i in cancelled:
            assert state is TaskState.CANCELLED, (i, state)
            assert runs[i] == 0, f"cancelled task {i} ran"
        else:
            assert state is TaskState.SUCCEEDED, (i, state)
            assert runs[i] == 1, f"task {i} ran {runs[i]} times"


def test_100k_noop_tasks_each_run_exactly_once() -> None:
    n = 100_000
    runs: Counter[int] = Counter()
    lock = threading.Lock()
    all_done = threading.Event()

    def noop(i: int) -> None:
        with lock:
            runs[i] += 1
            if len(runs) == n:
                all_done.set()

    sched = Scheduler(ready_capacity=10_000)
    # half queued before start (a backlog ten times the ready queue), half while workers run
    jobs = [sched.schedule(noop, i, delay=0) for i in range(n // 2)]
    with sched:
        jobs += [sched.schedule(noop, i, delay=(i % 100) / 1000) for i in range(n // 2, n)]
        assert all_done.wait(BOUND * 2), f"{n - len(runs)} tasks never ran"
        _wait_until(lambda: sched.statistics().succeeded == n, "every outcome to be stored")
        stats = sched.statistics()
    assert len(runs) == n
    assert set(runs.values()) == {1}
    assert sched.store.count_by_state() == {TaskState.SUCCEEDED: n}
    assert stats.states == {"succeeded": n}
    assert (stats.submitted, stats.started, stats.succeeded) == (n, n, n)
    assert (stats.failed, stats.retried, stats.timed_out, stats.cancelled) == (0, 0, 0, 0)
    assert (stats.in_wheel, stats.ready_depth) == (0, 0)
    assert stats.lateness_p50 is not None
    assert stats.lateness_max is not None
    assert 0 <= stats.lateness_p50 <= stats.lateness_max
    assert all(j.task.attempts == 1 for j in jobs[:: n // 100])


# -- graceful shutdown ------------------------------------------------------------------------


@pytest.mark.realclock
def test_shutdown_waits_for_tasks_in_flight() -> None:
    started = threading.Semaphore(0)

    def slow(i: int) -> int:
        started.release()
        time.sleep(0.2)
        return i

    sched = Scheduler(dispatcher=ThreadPoolDispatcher(workers=3)).start()
    jobs = [sched.schedule(slow, i, delay=0) for i in range(3)]
    for _ in jobs:
        assert started.acquire(timeout=BOUND)
    sched.shutdown(wait=True)
    assert [j.state for j in jobs] == [TaskState.SUCCEEDED] * 3
    assert [j.result(timeout=0) for j in jobs] == [0, 1, 2]


@pytest.mark.realclock
def test_shutdown_timeout_releases_running_tasks_and_drops_their_late_outcome(
    gate: threading.Event,
) -> None:
    started = threading.Semaphore(0)
    returned = Counter[int]()

    def blocked(i: int) -> int:
        started.release()
        gate.wait(BOUND)
        returned[i] += 1
        return i

    pool = ThreadPoolDispatcher(workers=2)
    sched = Scheduler(dispatcher=pool).start()
    jobs = [sched.schedule(blocked, i, delay=0) for i in range(2)]
    waiting = sched.schedule(blocked, 99, delay=0)  # never claimed: no free worker
    for _ in jobs:
        assert started.acquire(timeout=BOUND)
    sched.shutdown(wait=True, timeout=0.05)
    for j in jobs:  # released at once, not after a lease expiry
        t = j.task
        assert t.state is TaskState.READY
        assert (t.lease_owner, t.lease_expires) == (None, None)
        assert t.error == "released at shutdown"
        assert t.attempts == 1
    assert waiting.state is TaskState.READY
    assert pool.in_flight == 0
    gate.set()
    _join_workers(pool)
    assert returned == {0: 1, 1: 1}  # they did finish, late ...
    for j in jobs:  # ... and their outcome was discarded
        assert j.task.state is TaskState.READY
        assert j.task.result is None
        with pytest.raises(SchedulerStateError, match="shut down"):
            j.result(timeout=1)


# -- leases -----------------------------------------------------------------------------------


def test_task_of_a_silent_worker_reruns_after_its_lease_expires() -> None:
    clock = FakeClock()
    store = MemoryStore()
    now = clock.time()
    store.insert(Task(id="orphan", func=lambda: "rerun", due=now, created=now))
    store.promote(["orphan"], now)
    ghost = store.claim("orphan", expected_version=1, owner="ghost", lease_expires=now + 5, now=now)
    assert ghost is not None  # a worker that claimed it, then never heartbeats again

    events: list[Event] = []
    done = threading.Event()
    pool = ThreadPoolDispatcher(workers=2)
    sched = Scheduler(clock=clock, store=store, dispatcher=pool, lease=5)
    sched.add_listener(events.append, "timed_out", "started", "succeeded")
    with sched:
        job = sched.get("orphan")
        job.add_done_callback(lambda _: done.set())
        clock.advance(4)
        assert job.state is TaskState.RUNNING  # the lease still holds: nothing happens
        clock.advance(2)
        assert done.wait(BOUND), f"not re-run: {job.task}"
        t = job.task
        assert t.state is TaskState.SUCCEEDED
        assert t.result == "rerun"
        assert t.attempts == 2
        assert (
            store.heartbeat("orphan", owner="ghost", lease_expires=clock.time() + 5, now=0) is False
        )
        assert store.finish("orphan", owner="ghost", state=TaskState.FAILED, now=0) is None
    names = [e.name for e in events]
    assert names == ["timed_out", "started", "succeeded"]
    assert "lease of ghost expired" in (events[0].task.error or "")
    assert events[0].task.state is TaskState.PENDING
    assert events[1].task.lease_owner is not None
    assert events[1].task.lease_owner != "ghost"


@pytest.mark.realclock
def test_stalled_worker_loses_its_lease_and_its_late_result(gate: threading.Event) -> None:
    """Heartbeats off: a run that stalls past its lease is re-run by another worker, and the
    stalled run's late outcome is discarded. (On a ``FakeClock`` a live pool heartbeats before
    each reap, so this needs real time: a lease of 0.2 s.)"""
    calls = Counter[str]()
    first_started = threading.Event()
    events: list[Event] = []

    def work() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            first_started.set()
            gate.wait(BOUND)  # stalls; its worker sends no heartbeat
            return "late"
        return "fresh"

    pool = ThreadPoolDispatcher(workers=2, heartbeat=1e9)
    with Scheduler(dispatcher=pool, lease=0.2) as sched:
        sched.add_listener(events.append, "timed_out")
        job = sched.schedule(work, delay=0)
        assert first_started.wait(BOUND)
        assert job.result(timeout=BOUND) == "fresh"
        gate.set()
        _wait_until(lambda: pool.in_flight == 0, "the stalled run to return")
        assert job.result(timeout=0) == "fresh"  # "late" was discarded
        assert job.task.attempts == 2
    assert calls["n"] == 2
    assert len(events) == 1
    assert "expired" in (events[0].task.error or "")
    assert "lease of" in (events[0].task.error or "")


# -- timeouts, failures, retries ----------------------------------------------------------------


@pytest.mark.realclock
def test_per_task_timeout_frees_the_worker_slot(gate: threading.Event) -> None:
    pool = ThreadPoolDispatcher(workers=2)
    ran: list[int] = []
    with Scheduler(dispatcher=pool) as sched:
        hogs = [sched.schedule(gate.wait, BOUND, delay=0, timeout=0.05) for _ in range(2)]
        _wait_until(lambda: all(h.done() for h in hogs), "both hogs to time out")
        quick = [sched.schedule(ran.append, i, delay=0) for i in range(20)]
        for q in quick:
            q.result(timeout=BOUND)  # the abandoned hogs still block two threads
        assert sorted(ran) == list(range(20))
        for h in hogs:
            t = h.task
            assert t.state is TaskState.TIMED_OUT
            assert "timed out after 0.05 s" in (t.error or "")
        gate.set()
        _wait_until(lambda: pool.in_flight == 0, "the hogs to return")
        assert [h.state for h in hogs] == [TaskState.TIMED_OUT] * 2
        assert sched.statistics().timed_out == 2


def test_exceptions_never_kill_a_worker_and_retries_follow_the_policy() -> None:
    attempts = Counter[str]()

    def flaky(key: str, fail: int) -> str:
        attempts[key] += 1
        if attempts[key] <= fail:
            raise ValueError(f"{key} attempt {attempts[key]}")
        return key

    def exits() -> None:
        raise SystemExit(3)

    pool = ThreadPoolDispatcher(workers=1)  # one worker: a death would stop everything
    with Scheduler(dispatcher=pool) as sched:
        bad = [sched.schedule(flaky, f"bad{i}", 99, delay=0) for i in range(30)]
        fatal = sched.schedule(exits, delay=0)
        ok = sched.schedule(
            flaky, "ok", 3, delay=0, retry=Retry(max_attempts=4, backoff="fixed", delay=0)
        )
        narrow = sched.schedule(
            flaky, "narrow", 1, delay=0, retry=Retry(max_attempts=3, retry_on=(KeyError,))
        )
        assert ok.result(timeout=BOUND) == "ok"
        for j in bad:
            with pytest.raises(ValueError, match="attempt 1"):
                j.result(timeout=BOUND)
        with pytest.raises(ValueError, match="narrow attempt 1"):
            narrow.result(timeout=BOUND)
        assert fatal.exception(timeout=BOUND) is not None
        assert fatal.state is TaskState.FAILED
        last = sched.schedule(flaky, "last", 0, delay=0)
        assert last.result(timeout=BOUND) == "last"
        stats = sched.statistics()
    assert ok.task.attempts == 4
    assert narrow.task.attempts == 1
    assert attempts["ok"] == 4
    assert stats.retried == 3
    assert stats.failed == 32
    alive = [t for t in pool._threads if t.name.endswith(":w1")]
    assert alive, "the only worker thread is gone"


# -- events, callbacks, results, cancel -----------------------------------------------------------


def test_listeners_and_done_callbacks_run_once_in_the_worker() -> None:
    events: list[tuple[str, str]] = []
    callbacks: list[tuple[str, str]] = []
    lock = threading.Lock()

    def listen(ev: Event) -> None:
        with lock:
            events.append((ev.task.id, ev.name))

    def boom() -> None:
        raise RuntimeError("boom")

    # Scheduled, with their callbacks, before the scheduler starts: a callback added to a task
    # that has already finished runs at once in the caller's thread (as concurrent.futures
    # does), which this test is not about.
    sched = Scheduler(dispatcher=ThreadPoolDispatcher(workers=4))
    sched.add_listener(listen)
    good = [sched.schedule(int, str(i), delay=0, id=f"g{i}") for i in range(50)]
    bad = sched.schedule(boom, delay=0, id="bad")
    for j in [*good, bad]:
        j.add_done_callback(lambda job: callbacks.append((job.id, threading.current_thread().name)))
    with sched:
        for j in good:
            assert j.result(timeout=BOUND) == int(j.id[1:])
        assert isinstance(bad.exception(timeout=BOUND), RuntimeError)
        _wait_until(lambda: len(callbacks) == 51, "every done callback")
        late: list[Job] = []
        bad.add_done_callback(late.append)  # already done: called at once, here
        assert late == [bad]
    by_task: dict[str, list[str]] = {}
    for tid, name in events:
        by_task.setdefault(tid, []).append(name)
    assert by_task["bad"] == ["submitted", "started", "failed"]
    assert all(by_task[f"g{i}"] == ["submitted", "started", "succeeded"] for i in range(50))
    assert sorted(c[0] for c in callbacks) == sorted(j.id for j in [*good, bad])
    assert all(name.startswith("timewheel-") for _, name in callbacks)


@pytest.mark.realclock
def test_result_timeout_raises_and_leaves_the_task_alone() -> None:
    with Scheduler(dispatcher=ThreadPoolDispatcher(workers=1)) as sched:
        job = sched.schedule(int, delay=3600)
        with pytest.raises(JobTimeoutError, match=r"still pending after 0\.05 s"):
            job.result(timeout=0.05)
        assert job.state is TaskState.PENDING
        assert job.cancel()


@pytest.mark.realclock
def test_cancel_pending_ready_and_running(gate: threading.Event) -> None:
    ran: list[str] = []
    started = threading.Event()

    def hog() -> None:
        started.set()
        gate.wait(BOUND)
        ran.append("hog")

    pool = ThreadPoolDispatcher(workers=1)
    with Scheduler(dispatcher=pool) as sched:
        running = sched.schedule(hog, delay=0)
        assert started.wait(BOUND)
        ready = sched.schedule(ran.append, "ready", delay=0)
        pending = sched.schedule(ran.append, "pending", delay=3600)
        _wait_until(lambda: ready.state is TaskState.READY, "the second task to be READY")
        assert pending.cancel() is True
        assert ready.cancel() is True
        assert running.cancel() is False  # a running task cannot be stopped
        assert running.state is TaskState.RUNNING
        assert ready.cancel() is True  # cancelling twice is fine
        gate.set()
        assert running.result(timeout=BOUND) is None
        after = sched.schedule(ran.append, "after", delay=0)
        after.result(timeout=BOUND)  # the worker went past where the cancelled task was
    assert ran == ["hog", "after"]
    assert [j.state for j in (pending, ready)] == [TaskState.CANCELLED] * 2
    assert sched.statistics().cancelled == 2
    for j in (pending, ready):
        with pytest.raises(Exception, match="cancelled"):
            j.result(timeout=0)
