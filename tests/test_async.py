"""AsyncScheduler: the asyncio facade on the shared core (memory and SQLite stores, FakeClock
stepping with advance_async, cancellation and timeouts of coroutines, shutdown, listeners)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import timewheel as tw
from timewheel.aio import AsyncJob, AsyncScheduler, ThreadRunner
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import TaskState
from timewheel.testing import FakeClock

pytestmark = pytest.mark.anyio

RAN: list[tuple[str, float]] = []  # what the module-level tasks saw (durable stores import them)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def sched(clock: FakeClock) -> AsyncIterator[AsyncScheduler]:
    async with AsyncScheduler(clock=clock) as s:
        yield s


async def stamp(name: str) -> str:
    """A coroutine task that records the clock it saw (via the current task's due)."""
    task = tw.current_task()
    assert task is not None
    RAN.append((name, task.due))
    return name


# -- FakeClock stepping --------------------------------------------------------------------------
async def test_each_coroutine_sees_its_own_due_time(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    seen: list[tuple[str, float]] = []

    async def note(name: str) -> str:
        seen.append((name, clock.time()))
        await asyncio.sleep(0)  # a bare yield: still this step
        seen.append((name + "'", clock.time()))
        return name

    start = clock.time()
    b = await sched.schedule(note, "b", delay=300)
    a = await sched.schedule(note, "a", delay=60)
    ran = await clock.advance_async(minutes=10)
    assert seen == [("a", start + 60), ("a'", start + 60), ("b", start + 300), ("b'", start + 300)]
    assert ran == [a, b]
    assert await b == "b"
    assert clock.time() == start + 600


async def test_work_scheduled_inside_the_window_runs_in_it(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    start = clock.time()
    seen: list[float] = []

    async def chain(n: int) -> None:
        seen.append(clock.time() - start)
        if n:
            await sched.schedule(chain, n - 1, delay=10)

    await sched.schedule(chain, 3, delay=10)
    await clock.advance_async(seconds=35)
    assert seen == [10, 20, 30]
    await clock.advance_async(seconds=5)
    assert seen == [10, 20, 30, 40]


async def test_a_task_waiting_on_another_job_is_resumed_when_it_ends(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    start = clock.time()
    first = await sched.schedule(asyncio.sleep, 0, "one", delay=100)

    async def waiter() -> tuple[str, float]:
        value = await first
        return value, clock.time() - start

    second = await sched.schedule(waiter, delay=10)
    await clock.advance_async(seconds=50)
    assert second.state is TaskState.RUNNING  # parked on the first job: the clock moved on
    await clock.advance_async(seconds=50)
    assert await second.result(timeout=0) == ("one", 100)


async def test_plain_functions_run_in_threads_and_finish_within_the_step(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    loop_thread = threading.get_ident()
    seen: list[tuple[int, float]] = []

    def work() -> None:
        seen.append((threading.get_ident(), clock.time()))

    await sched.schedule(work, delay=5)
    await clock.advance_async(seconds=5)
    assert len(seen) == 1
    assert seen[0][0] != loop_thread


async def test_sync_advance_is_refused_with_the_way_out(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    with pytest.raises(RuntimeError, match="advance_async"):
        clock.advance(1)


async def test_result_timeout_runs_on_the_fake_clock(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    job = await sched.schedule(asyncio.sleep, 0, delay=100)
    with pytest.raises(tw.JobTimeoutError):
        await job.result(timeout=0)
    waiting = asyncio.ensure_future(job.result(timeout=30))
    await clock.advance_async(seconds=20)
    assert not waiting.done()
    await clock.advance_async(seconds=20)
    with pytest.raises(tw.JobTimeoutError):
        await waiting
    await clock.advance_async(seconds=60)
    assert await job.result(timeout=0) is None


async def test_run_until_idle(sched: AsyncScheduler) -> None:
    jobs = [await sched.schedule(asyncio.sleep, 0, i, delay=i * 3600) for i in range(3)]
    ran = await sched.run_until_idle()
    assert ran == jobs
    assert [await j for j in jobs] == [0, 1, 2]


# -- options of the core -----------------------------------------------------------------------------
async def test_after_retry_on_conflict_and_recurring(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    calls: list[str] = []

    async def flaky(name: str) -> str:
        calls.append(name)
        if calls.count(name) == 1:
            raise ValueError(name)
        return name

    up = await sched.schedule(flaky, "up", delay=1, retry=tw.Retry(max_attempts=2, delay=5))
    down = await sched.schedule(flaky, "down", after=[up], retry=tw.Retry(max_attempts=2, delay=0))
    same = await sched.schedule(flaky, "x", id="fixed", delay=1000, on_conflict="keep")
    again = await sched.schedule(flaky, "y", id="fixed", delay=1000, on_conflict="keep")
    assert same == again
    with pytest.raises(tw.DuplicateKeyError):
        await sched.schedule(flaky, "z", id="fixed", delay=100)

    ticks: list[float] = []

    @sched.every(minutes=1)
    async def tick() -> None:
        ticks.append(clock.time())

    await clock.advance_async(minutes=3)
    assert await up == "up"
    assert await down == "down"
    assert calls[:4] == ["up", "up", "down", "down"]
    assert len(ticks) == 3
    assert isinstance(tick.schedule_handle, tw.Schedule)  # type: ignore[attr-defined]
    stats = sched.statistics()
    assert stats.retried == 2
    assert stats.succeeded >= 5
    assert {j.id for j in sched.jobs(TaskState.PENDING)} >= {"fixed"}
    assert (await sched.get("fixed")).state is TaskState.PENDING


async def test_cancel_pending_and_running(sched: AsyncScheduler, clock: FakeClock) -> None:
    pending = await sched.schedule(asyncio.sleep, 0, delay=100)
    assert await pending.cancel()
    assert pending.cancelled()
    with pytest.raises(tw.JobCancelledError):
        await pending

    cleaned: list[str] = []
    release = asyncio.Event()

    async def long() -> None:
        try:
            await release.wait()
        except asyncio.CancelledError:
            cleaned.append("cancelled")
            raise

    running = await sched.schedule(long, delay=1)
    await clock.advance_async(seconds=1)
    assert running.running()
    assert await sched.cancel(running)
    assert cleaned == ["cancelled"]
    assert running.state is TaskState.FAILED  # it had started: it has an outcome
    with pytest.raises(tw.JobCancelledError):
        await running
    assert await running.cancel() is False  # finished tasks stay as they are
    with pytest.raises(tw.TaskNotFoundError):
        await sched.cancel("nope")


async def test_timeout_cancels_the_coroutine_then_retries(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    attempts: list[float] = []
    start = clock.time()

    async def slow() -> str:
        attempts.append(clock.time() - start)
        if len(attempts) == 1:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                attempts.append(-1)  # it saw the cancellation
                raise
        return "second try"

    job = await sched.schedule(
        slow, delay=0, timeout=30, retry=tw.Retry(max_attempts=2, delay=10, backoff="fixed")
    )
    await clock.advance_async(seconds=29)
    assert job.running()
    await clock.advance_async(seconds=1)
    assert attempts == [0, -1]
    assert job.state is TaskState.PENDING
    await clock.advance_async(seconds=10)
    assert await job == "second try"
    assert attempts == [0, -1, 40]

    once = await sched.schedule(asyncio.sleep, 3600, delay=0, timeout=5)
    await clock.advance_async(seconds=5)
    assert once.state is TaskState.TIMED_OUT
    with pytest.raises(TimeoutError):
        await once


async def test_current_task_inside_coroutines_and_threads(
    sched: AsyncScheduler, clock: FakeClock
) -> None:
    def in_thread() -> str | None:
        task = tw.current_task()
        return None if task is None else task.id

    async def in_coroutine() -> str | None:
        await asyncio.sleep(0)
        task = tw.current_task()
        return None if task is None else task.id

    a = await sched.schedule(in_coroutine, delay=1)
    b = await sched.schedule(in_coroutine, delay=1)
    c = await sched.schedule(in_thread, delay=1)
    await clock.advance_async(seconds=1)
    assert [await a, await b, await c] == [a.id, b.id, c.id]
    assert tw.current_task() is None


def test_current_task_in_the_thread_scheduler() -> None:
    clock = FakeClock()
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        job = sched.schedule(lambda: tw.current_task(), delay=1)
        clock.advance(1)
        task = job.result(timeout=0)
        assert task.id == job.id
        assert task.state is TaskState.RUNNING
        assert tw.current_task() is None


async def test_listeners_run_on_the_loop_thread(sched: AsyncScheduler, clock: FakeClock) -> None:
    heard: list[tuple[str, int]] = []
    async_heard: list[str] = []

    def listener(event: tw.Event) -> None:
        heard.append((event.name, threading.get_ident()))

    async def async_listener(event: tw.Event) -> None:
        async_heard.append(event.name)

    sched.add_listener(listener, "submitted", "succeeded")
    sched.add_listener(async_listener, "succeeded")
    job = await sched.schedule(lambda: None, delay=1)
    done: list[AsyncJob] = []
    job.add_done_callback(done.append)
    await clock.advance_async(seconds=1)
    await asyncio.sleep(0)
    assert [name for name, _ in heard] == ["submitted", "succeeded"]
    assert {thread for _, thread in heard} == {threading.get_ident()}
    assert async_heard == ["succeeded"]
    assert done == [job]
    sched.remove_listener(listener)
    await sched.schedule(lambda: None, delay=1)
    assert len(heard) == 2


# -- the real clock: the loop's timer, the pool, concurrency, shutdown ----------------------------------
async def test_real_clock_runs_coroutines_and_plain_functions() -> None:
    async with AsyncScheduler() as sched:
        a = await sched.schedule(asyncio.sleep, 0.001, "a", delay=0.02)
        b = await sched.schedule(lambda x: x * 2, 21, delay=0)
        late = await sched.schedule(asyncio.sleep, 0, "late", delay=3600)
        earlier = await sched.schedule(asyncio.sleep, 0, "early", delay=0.01)  # re-arms the timer
        assert await a.result(timeout=10) == "a"
        assert await b.result(timeout=10) == 42
        assert await earlier.result(timeout=10) == "early"
        assert late.state is TaskState.PENDING


async def test_concurrency_limit_is_never_exceeded() -> None:
    running = 0
    most = 0

    async def work() -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001)
        running -= 1

    async with AsyncScheduler(concurrency=10) as sched:
        jobs = [await sched.schedule(work, delay=0) for _ in range(1000)]
        for job in jobs:
            await job.result(timeout=60)
    assert most == 10


async def test_plain_function_timeout_in_a_thread() -> None:
    gate = threading.Event()

    def stuck() -> str:
        gate.wait(10)
        return "late"

    async with AsyncScheduler(threads=1) as sched:
        job = await sched.schedule(stuck, delay=0, timeout=0.05)
        with pytest.raises(TimeoutError):
            await job.result(timeout=10)
        assert job.state is TaskState.TIMED_OUT
        assert await sched.cancel(job) is False
        gate.set()
        after = await sched.schedule(lambda: "next", delay=0)
        assert await after.result(timeout=10) == "next"  # the thread came back to the pool
    assert job.state is TaskState.TIMED_OUT


async def test_a_task_that_blocks_the_loop_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def blocker() -> None:
        time.sleep(0.3)  # a blocking call inside a coroutine: the mistake being detected

    caplog.set_level(logging.WARNING, logger="timewheel.aio")
    async with AsyncScheduler(blocked_warning=0.05) as sched:
        job = await sched.schedule(blocker, delay=0)
        await job.result(timeout=10)
        await asyncio.sleep(0.1)  # the monitor's next timer runs and finds it late
        assert sched.dispatcher.blocked_total >= 1
    assert any("event loop was blocked" in r.getMessage() for r in caplog.records)


async def test_shutdown_waits_then_cancels_and_releases(tmp_path: Path) -> None:
    finished = asyncio.Event()
    seen: list[str] = []

    async def quick() -> None:
        await asyncio.sleep(0.01)
        finished.set()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    sched = AsyncScheduler()
    await sched.start()
    q = await sched.schedule(quick, delay=0)
    f = await sched.schedule(forever, delay=0)
    while not f.running():
        await asyncio.sleep(0.001)
    await sched.shutdown(wait=True, timeout=0.5)
    assert q.state is TaskState.SUCCEEDED
    assert seen == ["cancelled"]
    assert f.state is TaskState.READY  # released: a durable store would run it again
    with pytest.raises(tw.SchedulerStateError):
        await f
    with pytest.raises(tw.SchedulerStateError):
        await sched.schedule(quick, delay=0)


# -- SQLite: calls off the loop thread, restart ------------------------------------------------------------
# what the durable-store tests run from import paths: this module's functions and asyncio.sleep
SQLITE_ALLOW = ["tests.test_async", "asyncio"]


class RecordingSQLiteStore(SQLiteStore):
    """Notes the threads the trigger's and the runs' store steps ran in."""

    threads: set[int]

    def promote(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.get_ident())
        return super().promote(*args, **kwargs)

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.get_ident())
        return super().claim(*args, **kwargs)


async def test_sqlite_calls_run_off_the_loop_and_survive_a_restart(tmp_path: Path) -> None:
    RAN.clear()
    path = tmp_path / "tasks.db"
    clock = FakeClock()
    store = RecordingSQLiteStore(path, durability="fast")
    store.threads = set()
    async with AsyncScheduler(clock=clock, store=store, allow=SQLITE_ALLOW) as sched:
        assert isinstance(sched.store_runner, ThreadRunner)
        now_job = await sched.schedule(stamp, "now", delay=10)
        later = await sched.schedule(stamp, "later", delay=3600)
        await clock.advance_async(seconds=10)
        assert await now_job.result(timeout=0) == "now"
    store.close()
    assert store.threads
    assert threading.get_ident() not in store.threads

    store2 = SQLiteStore(path, durability="fast")
    async with AsyncScheduler(clock=clock, store=store2, allow=SQLITE_ALLOW) as sched2:
        job = await sched2.get(later.id)
        assert job.state is TaskState.PENDING
        await clock.advance_async(hours=1)
        assert await job.result(timeout=0) == "later"
    store2.close()
    assert [name for name, _ in RAN] == ["now", "later"]


async def test_sqlite_real_clock_shutdown_releases_to_ready_and_a_restart_runs_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    store = SQLiteStore(path, durability="fast")
    async with AsyncScheduler(store=store, allow=SQLITE_ALLOW) as sched:
        job = await sched.schedule(asyncio.sleep, 3600, delay=0)
        while not job.running():
            await asyncio.sleep(0.005)
        await sched.shutdown(wait=True, timeout=0.01)
        assert job.state is TaskState.READY
    store.close()
    store2 = SQLiteStore(path, durability="fast")
    async with AsyncScheduler(store=store2, cancel_grace=0.1, allow=SQLITE_ALLOW) as sched2:
        again = await sched2.get(job.id)
        while not again.running():
            await asyncio.sleep(0.005)
        assert again.task.attempts == 2
        assert await again.cancel()
    store2.close()
