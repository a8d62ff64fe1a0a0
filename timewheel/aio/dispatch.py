"""``AsyncDispatcher``: runs READY tasks on the event loop.

A coroutine function's run is an asyncio task; a plain function's run is an asyncio task that
awaits the function in a bounded thread pool. At most ``concurrency`` runs go at once, of which at
most ``threads`` are plain functions (each holds a thread). A run is the same as in the thread
dispatcher: claim READY -> RUNNING with a lease (compare-and-swap), call, then store the outcome
with :func:`timewheel.dispatch.complete` (retries applied), while a heartbeat extends the lease.

Cancellation and timeouts:

- A coroutine that overruns its ``timeout`` is cancelled (it sees ``CancelledError``); the run is
  then stored TIMED_OUT, or back to PENDING when its retry policy allows another attempt.
- ``AsyncJob.cancel()`` on a running coroutine cancels it the same way; the run ends FAILED with
  ``JobCancelledError`` (CANCELLED is kept for tasks that never started), and is not retried.
- A coroutine that swallows its cancellation is given ``cancel_grace`` seconds, then abandoned:
  the outcome is stored, an error is logged, and whatever it returns later is discarded.
- A plain function in a thread cannot be interrupted: at its timeout the run is stored TIMED_OUT
  (or retried) and the function runs on in its thread, its result discarded; ``cancel()`` of a
  running plain function returns False.
- At shutdown, runs still going after the wait are cancelled and released back to READY in the
  store (a durable store runs them again at the next start).

A timer on the loop, every half second, extends the leases at their interval and notices a loop
that was blocked (the timer ran late): it logs a warning naming the coroutine tasks running then.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import inspect
import itertools
import logging
import math
import os
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from timewheel.aio.runner import StoreRunner
from timewheel.context import set_current_task
from timewheel.dispatch import Engine, complete, refuse, report_unresolved
from timewheel.errors import JobCancelledError
from timewheel.refs import ReferenceNotAllowedError
from timewheel.task import Task, TaskState

__all__ = ["AsyncDispatcher", "is_coroutine_function"]

log = logging.getLogger("timewheel.aio")

_SETTLE_PASSES = 100_000  # loop passes one FakeClock step may take before it gives up


def is_coroutine_function(func: Callable[..., Any]) -> bool:
    """True when calling *func* makes a coroutine: an ``async def`` function (also behind
    ``functools.partial``) or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 (the bound method itself is wanted)
    return call is not None and inspect.iscoroutinefunction(call)


class _Phase(enum.Enum):
    SLOT = "waiting for a thread"
    CLAIM = "claiming"
    USER = "running the function"
    OUTCOME = "storing the outcome"


class _Run:
    """One run: from the pulled snapshot to the stored outcome."""

    __slots__ = (
        "abandoned",
        "aio",
        "claimed",
        "coroutine",
        "deadline",
        "grace",
        "owner",
        "parked",
        "phase",
        "reason",
        "snapshot",
        "stopped",
        "thread",
        "timer",
    )

    def __init__(self, snapshot: Task) -> None:
        self.snapshot = snapshot
        self.claimed: Task | None = None
        self.owner = ""
        self.aio: asyncio.Task[None] | None = None
        self.coroutine = True
        self.phase = _Phase.CLAIM
        self.reason: str | None = None  # why it was cancelled: timeout, cancel, shutdown
        self.timer: asyncio.TimerHandle | None = None
        self.grace: asyncio.TimerHandle | None = None
        self.deadline = math.inf  # the timeout on a driving clock (epoch seconds)
        self.parked: Any = None  # the future the coroutine waits on (driving clock only)
        self.thread: asyncio.Future[Any] | None = None
        self.abandoned = False
        self.stopped = False  # ended by a cancel request


class _Tracked:
    """Awaits a coroutine step by step, recording the future it waits on, so a ``FakeClock``
    step can tell a coroutine that waits (parked on a future not done) from one that can go on."""

    __slots__ = ("coro", "run")

    def __init__(self, coro: Any, run: _Run) -> None:
        self.coro = coro
        self.run = run

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self.coro.__await__()
        run = self.run
        send: Any = None
        error: BaseException | None = None
        while True:
            try:
                out = inner.send(send) if error is None else inner.throw(error)
            except StopIteration as stop:
                run.parked = None
                return stop.value
            run.parked = out
            try:
                send = yield out
                error = None
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as e:  # a cancellation thrown in by the task: pass it on
                send, error = None, e
            run.parked = None


class AsyncDispatcher:
    """Runs READY tasks on the event loop (see the module docstring).

    Args:
        concurrency: most runs at once (coroutines and plain functions together).
        threads: most plain functions at once, each in a thread of the dispatcher's pool
            (default ``min(32, cpu_count + 4)``).
        queues: the queue names served (None: all).
        heartbeat: seconds between lease extensions (default: a third of the lease).
        cancel_grace: seconds a cancelled coroutine has to end before it is abandoned.
        blocked_warning: a loop timer that runs this many seconds late logs a warning.
    """

    def __init__(
        self,
        concurrency: int = 100,
        *,
        threads: int | None = None,
        queues: Sequence[str] | None = None,
        heartbeat: float | None = None,
        cancel_grace: float = 5.0,
        blocked_warning: float = 1.0,
    ) -> None:
        if threads is None:
            threads = min(32, (os.cpu_count() or 1) + 4)
        for name, value in (("concurrency", concurrency), ("threads", threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1 (got {value!r})")
        self.concurrency = concurrency
        self.threads = threads
        self.queues: Sequence[str] | None = None if queues is None else tuple(queues)
        self.cancel_grace = cancel_grace
        self.blocked_warning = blocked_warning
        #: how many times the loop was found blocked for ``blocked_warning`` seconds or more
        self.blocked_total = 0
        self._heartbeat = heartbeat
        self._engine: Engine | None = None
        self._runner: StoreRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._driving = False
        self._pool: ThreadPoolExecutor | None = None
        self._thread_slots: asyncio.Semaphore | None = None
        self._live: dict[asyncio.Task[None], _Run] = {}  # every run not ended
        self._runs: dict[str, _Run] = {}  # claimed runs by task id (heartbeats, cancel)
        self._active = 0  # runs holding a concurrency slot
        self._stopping = False
        self._pump_scheduled = False
        self._recording: list[str] | None = None
        self._prefix = f"aio:{threading.get_ident() & 0xFFFF:04x}:{id(self) & 0xFFFFFF:06x}:"
        self._seq = itertools.count(1)
        self._interval = 0.0
        self._tick = 0.5
        self._next_beat = math.inf
        self._planned = 0.0
        self._monitor_handle: asyncio.TimerHandle | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(
        self,
        engine: Engine,
        *,
        loop: asyncio.AbstractEventLoop,
        runner: StoreRunner,
        driving: bool,
    ) -> None:
        """Serve *engine* on *loop*, reaching the store through *runner*. With *driving* (a
        ``FakeClock``), timeouts and heartbeats follow the clock's steps instead of loop timers."""
        if self._engine is not None:
            raise RuntimeError("AsyncDispatcher.start() called twice")
        self._engine = engine
        self._loop = loop
        self._runner = runner
        self._driving = driving
        self._thread = threading.get_ident()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="timewheel-aio")
        self._thread_slots = asyncio.Semaphore(self.threads)
        self._interval = self._heartbeat or max(0.01, engine.lease / 3)
        if not driving:
            now = loop.time()
            self._next_beat = now + self._interval
            self._tick = min(self._interval, max(0.01, self.blocked_warning / 2))
            self._planned = now + self._tick
            self._monitor_handle = loop.call_at(self._planned, self._monitor)

    async def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Stop starting runs; with *wait*, let the runs going finish for up to *timeout* seconds;
        then cancel those still going and release them to READY (see the module docstring)."""
        self._stopping = True
        if self._monitor_handle is not None:
            self._monitor_handle.cancel()
            self._monitor_handle = None
        if wait and self._live:
            await asyncio.wait(set(self._live), timeout=timeout)
        for run in list(self._live.values()):
            if run.phase is _Phase.USER and run.reason is None and run.aio is not None:
                run.reason = "shutdown"
                run.aio.cancel()
        going = {t for t in self._live if not t.done()}
        if going:
            await asyncio.wait(going, timeout=self.cancel_grace)
        for run in list(self._live.values()):
            if run.phase is _Phase.USER and not run.abandoned and run.claimed is not None:
                log.error(
                    "task %r ignored its cancellation at shutdown; released to READY, and what "
                    "it does from now on is discarded",
                    run.claimed.id,
                )
                run.abandoned = True
                await self._store(self._release, run.claimed, run.owner, "released at shutdown")
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -- pulling work -------------------------------------------------------------------------
    def wakeup(self) -> None:
        """New tasks may be ready (called from any thread)."""
        if self._stopping or self._loop is None:
            return
        if threading.get_ident() == self._thread:
            self._pump()
        elif not self._pump_scheduled:
            self._pump_scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._pump)
            except RuntimeError:  # the loop is closed
                self._pump_scheduled = False

    def run_ready(self) -> list[Task]:
        """Nothing runs in the caller's thread: runs are asyncio tasks."""
        return []

    def _pump(self) -> None:
        self._pump_scheduled = False
        engine, loop = self._engine, self._loop
        if engine is None or loop is None or self._stopping:
            return
        ready, queues, live = engine.ready_queue, self.queues, self._live
        while self._active < self.concurrency:
            task = ready.pull_nowait(queues)
            if task is None:
                return
            self._active += 1
            run = _Run(task)
            aio = loop.create_task(self._run(run))
            run.aio = aio
            live[aio] = run

    # -- one run ------------------------------------------------------------------------------------
    async def _run(self, run: _Run) -> None:
        engine, runner = self._engine, self._runner
        assert engine is not None
        assert runner is not None
        snapshot = run.snapshot
        slot = False
        try:
            try:
                func = engine.resolve(snapshot)
            except ReferenceNotAllowedError as e:
                # never imported: the task ends FAILED rather than waiting for another worker
                owner = run.owner = self._prefix + str(next(self._seq))
                if runner.blocking:
                    refused = await runner.run(engine.claim, snapshot, owner)
                    if refused is not None:
                        await runner.run(refuse, engine, refused, owner, e)
                else:
                    refused = engine.claim(snapshot, owner)
                    if refused is not None:
                        refuse(engine, refused, owner, e)
                return
            except Exception as e:
                report_unresolved(snapshot, e)
                return
            if not is_coroutine_function(func):
                run.coroutine = False
                assert self._thread_slots is not None
                run.phase = _Phase.SLOT
                await self._thread_slots.acquire()
                slot = True
                run.phase = _Phase.CLAIM
            if self._stopping:
                return  # it stays READY in the store
            owner = run.owner = self._prefix + str(next(self._seq))
            if runner.blocking:
                claimed = await runner.run(engine.claim, snapshot, owner)
            else:
                claimed = engine.claim(snapshot, owner)
            if claimed is None:
                return  # another worker won the claim
            run.claimed = claimed
            if self.stopping:  # shutdown began while the claim was made
                await self._store(self._release, claimed, owner, "released at shutdown")
                return
            self._runs[claimed.id] = run
            if claimed.timeout is not None:
                self._arm_timeout(run, claimed.timeout)
            engine.started(claimed)
            if self._recording is not None:
                self._recording.append(claimed.id)
            set_current_task(claimed)  # in this asyncio task's own context
            run.phase = _Phase.USER
            try:
                if run.coroutine:
                    coro = func(*claimed.args, **claimed.kwargs)
                    result = await (_Tracked(coro, run) if self._driving else coro)
                else:
                    thread = self._in_thread(run, func, claimed)
                    slot = False  # the thread gives it back when the function returns
                    result = await thread
            except asyncio.CancelledError:
                run.phase = _Phase.OUTCOME
                await self._cancelled(run, claimed)
                if run.reason is None:
                    raise  # cancelled from outside (the loop is closing): let it propagate
                return
            except Exception as e:
                run.phase = _Phase.OUTCOME
                if not run.abandoned:
                    log.info("task %r failed (attempt %d): %r", claimed.id, claimed.attempts, e)
                    await self._store(complete, engine, claimed, owner, exc=e)
                return
            except BaseException as e:  # KeyboardInterrupt, SystemExit: store, then stop
                run.phase = _Phase.OUTCOME
                await self._store(complete, engine, claimed, owner, exc=e)
                raise
            run.phase = _Phase.OUTCOME
            if run.abandoned:
                log.warning(
                    "task %r ended after it was abandoned; its result is discarded", claimed.id
                )
            elif run.reason == "timeout":
                log.warning("task %r swallowed the cancellation of its timeout", claimed.id)
                await self._store(complete, engine, claimed, owner, timed_out=True)
            else:
                await self._store(complete, engine, claimed, owner, result=result)
        except Exception:  # the engine's own bookkeeping failed: never lose the dispatcher
            log.exception("task %r: error while claiming or completing the run", snapshot.id)
        finally:
            self._ended(run, slot)

    def _ended(self, run: _Run, slot: bool) -> None:
        if slot and self._thread_slots is not None:
            self._thread_slots.release()
        for handle in (run.timer, run.grace):
            if handle is not None:
                handle.cancel()
        claimed = run.claimed
        if claimed is not None and self._runs.get(claimed.id) is run:
            del self._runs[claimed.id]
        if run.aio is not None:
            self._live.pop(run.aio, None)
        if not run.abandoned:
            self._active -= 1
        engine = self._engine
        if engine is not None and not self._stopping and len(engine.ready_queue):
            self._pump()

    async def _cancelled(self, run: _Run, claimed: Task) -> None:
        """The run's asyncio task was cancelled: store what its reason says."""
        if run.abandoned:
            return  # its outcome was stored when it was abandoned
        engine = self._engine
        assert engine is not None
        if run.reason == "timeout":
            await self._store(complete, engine, claimed, run.owner, timed_out=True)
        elif run.reason == "cancel":
            run.stopped = True
            await self._store(self._stop_outcome, claimed, run.owner)
        else:
            why = "released at shutdown" if run.reason else "its asyncio task was cancelled"
            await self._store(self._release, claimed, run.owner, why)

    def _in_thread(self, run: _Run, func: Callable[..., Any], claimed: Task) -> asyncio.Future[Any]:
        assert self._pool is not None
        assert self._loop is not None
        context = contextvars.copy_context()  # carries the current task into the thread
        done: Future[Any] = self._pool.submit(context.run, func, *claimed.args, **claimed.kwargs)
        done.add_done_callback(self._thread_ended)
        run.thread = asyncio.wrap_future(done, loop=self._loop)
        return run.thread

    def _thread_ended(self, _: Future[Any]) -> None:
        loop, slots = self._loop, self._thread_slots
        if loop is None or slots is None:
            return
        try:
            loop.call_soon_threadsafe(slots.release)
        except RuntimeError:
            pass  # the loop is closed

    async def _store(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a store step where the store is reached (directly, or through the runner)."""
        runner = self._runner
        assert runner is not None
        if runner.blocking:
            return await runner.run(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    def _release(self, task: Task, owner: str, why: str) -> None:
        """Give a claimed task back: READY again at once (not after its lease)."""
        engine = self._engine
        assert engine is not None
        changed = engine.store.finish(
            task.id, owner=owner, state=TaskState.READY, now=engine.clock.time(), error=why
        )
        if changed is not None:
            log.info("task %r %s (back to READY)", task.id, why)

    def _stop_outcome(self, task: Task, owner: str) -> None:
        """A run stopped by ``cancel()``: FAILED with ``JobCancelledError``, never retried."""
        engine = self._engine
        assert engine is not None
        store = engine.store
        error = JobCancelledError(f"task {task.id!r} was cancelled while running (by request)")
        changed = store.finish(
            task.id,
            owner=owner,
            state=TaskState.FAILED,
            now=engine.clock.time(),
            error=str(error),
            result=None if store.durable else error,
        )
        if changed is not None:
            engine.finished(changed, error, "failed")

    # -- timeouts and cancel requests -------------------------------------------------------------
    def _arm_timeout(self, run: _Run, timeout: float) -> None:
        if self._driving:
            assert self._engine is not None
            run.deadline = self._engine.clock.time() + timeout
        else:
            assert self._loop is not None
            run.timer = self._loop.call_later(timeout, self._expire, run)

    def _expire(self, run: _Run) -> None:
        if run.phase is not _Phase.USER or run.reason is not None or run.aio is None:
            return
        run.reason = "timeout"
        claimed = run.claimed
        assert claimed is not None
        if run.coroutine:
            log.info("task %r timed out after %s s: cancelling it", claimed.id, claimed.timeout)
            self._cancel_with_grace(run)
        else:
            log.warning(
                "task %r (a plain function in a thread) overran its timeout of %s s: stored as "
                "timed out; a thread cannot be interrupted, so it runs on and its result is "
                "discarded",
                claimed.id,
                claimed.timeout,
            )
            run.aio.cancel()  # stops awaiting the thread

    def _cancel_with_grace(self, run: _Run) -> None:
        assert run.aio is not None
        assert self._loop is not None
        run.aio.cancel()
        run.grace = self._loop.call_later(self.cancel_grace, self._abandon, run)

    def _abandon(self, run: _Run) -> None:
        """A cancelled coroutine did not end within the grace: store its outcome without it."""
        claimed = run.claimed
        if run.phase is not _Phase.USER or claimed is None or run.abandoned:
            return
        run.abandoned = True
        self._active -= 1  # its place goes to the next task
        log.error(
            "task %r ignored its cancellation (%s) for %s s: abandoned; its outcome is stored "
            "now and what it returns later is discarded",
            claimed.id,
            run.reason,
            self.cancel_grace,
        )
        assert self._loop is not None
        assert self._engine is not None
        if run.reason == "cancel":
            run.stopped = True
            step: Any = self._store(self._stop_outcome, claimed, run.owner)
        else:
            step = self._store(complete, self._engine, claimed, run.owner, timed_out=True)
        self._loop.create_task(step)
        self._pump()

    async def cancel_running(self, task_id: str) -> bool | None:
        """Cancel the running coroutine of *task_id* and wait for the run to end: True when it
        ended by the cancel (FAILED with ``JobCancelledError``), False when the coroutine swallowed
        it and ended otherwise; None when no coroutine of that task runs here (a plain function in
        a thread cannot be interrupted)."""
        run = self._runs.get(task_id)
        if run is None or run.aio is None or not run.coroutine or run.phase is not _Phase.USER:
            return None
        if run.reason is None:
            run.reason = "cancel"
            self._cancel_with_grace(run)
        if run.aio is asyncio.current_task():
            return True  # a task cancelling itself: CancelledError comes at its next await
        await asyncio.wait({run.aio})
        return run.stopped

    # -- heartbeats and the blocked-loop monitor --------------------------------------------------
    def beat(self) -> None:
        """Extend the lease of every run going here, now (a store step: the caller runs it where
        the store is reached)."""
        engine = self._engine
        if engine is None:
            return
        now = engine.clock.time()
        for run in tuple(self._runs.values()):
            claimed = run.claimed
            if claimed is None or run.abandoned:
                continue
            try:
                ok = engine.store.heartbeat(
                    claimed.id, owner=run.owner, lease_expires=now + engine.lease, now=now
                )
            except Exception:
                log.exception("task %r: heartbeat failed", claimed.id)
                continue
            if not ok and self._runs.get(claimed.id) is run:
                log.warning(
                    "task %r: lease of %s was lost; its result will be discarded",
                    claimed.id,
                    run.owner,
                )

    def beat_overdue(self) -> bool:
        """True when the leases were due an extension (the loop ran late): the trigger extends
        them before it looks for expired leases, so a blocked loop does not re-run its own tasks."""
        loop = self._loop
        return loop is not None and not self._driving and loop.time() >= self._next_beat

    def beat_now(self) -> None:
        """:meth:`beat` and restart the interval (a store step, like :meth:`beat`)."""
        assert self._loop is not None
        self._next_beat = self._loop.time() + self._interval
        self.beat()

    def _monitor(self) -> None:
        loop, engine = self._loop, self._engine
        if loop is None or engine is None or self._stopping:
            return
        now = loop.time()
        late = now - self._planned
        if late >= self.blocked_warning:
            self.blocked_total += 1
            running = [r.claimed.id for r in self._runs.values() if r.claimed and r.coroutine]
            log.warning(
                "the event loop was blocked for %.3f s (a timer ran that late): heartbeats and "
                "triggering waited%s; a coroutine task must not call blocking code (make it a "
                "plain function, which runs in a thread, or await asyncio.to_thread(...))%s",
                late,
                f"; coroutine tasks running: {running[:5]}" if running else "",
                (
                    f"; that is longer than the lease ({engine.lease} s), so their leases may "
                    "have expired and they may run again"
                    if late >= engine.lease
                    else ""
                ),
            )
        if now >= self._next_beat:
            runner = self._runner
            assert runner is not None
            if runner.blocking:
                self._next_beat = now + self._interval
                loop.create_task(runner.run(self.beat))
            else:
                self.beat_now()
        self._planned = now + self._tick
        self._monitor_handle = loop.call_at(self._planned, self._monitor)

    # -- a driving clock's side --------------------------------------------------------------------
    def next_timeout(self) -> float | None:
        """The earliest timeout of a run going here (driving clock only)."""
        ends = [r.deadline for r in self._runs.values() if r.phase is _Phase.USER]
        end = min(ends, default=math.inf)
        return None if end == math.inf else end

    def expire(self, now: float) -> None:
        """Time out the runs whose timeout ended by *now* (driving clock only)."""
        for run in list(self._runs.values()):
            if run.deadline <= now:
                self._expire(run)

    def record(self) -> None:
        """Start recording the ids of the runs that start (a clock step's result)."""
        self._recording = []

    def recorded(self) -> list[str]:
        """The ids recorded since :meth:`record`; stops recording."""
        out, self._recording = self._recording or [], None
        return out

    async def settle(self) -> None:
        """Let the runs go until each has ended or waits on a future not yet done, the threads
        of plain functions have returned, and no ready task waits for a free place."""
        runner, engine = self._runner, self._engine
        assert runner is not None
        assert engine is not None
        ready = engine.ready_queue
        for passes in itertools.count():
            await asyncio.sleep(0)
            if passes > _SETTLE_PASSES:
                going = [r.snapshot.id for r in self._live.values() if r.parked is None]
                raise RuntimeError(
                    f"tasks kept running without waiting for {_SETTLE_PASSES} event loop passes "
                    f"in one FakeClock step: {going[:5]}; does a task loop on asyncio.sleep(0)?"
                )
            if self._pump_scheduled:
                continue
            if runner.busy:
                await runner.idle()
                continue
            threads = [
                r.thread
                for r in self._live.values()
                if r.phase is _Phase.USER
                and r.thread is not None
                and not r.thread.done()
                and r.reason is None
            ]
            if threads:
                await asyncio.wait(threads, return_when=asyncio.FIRST_COMPLETED)
                continue
            if any(_moving(r) for r in self._live.values()):
                continue
            if not self._stopping and self._active < self.concurrency and len(ready):
                self._pump()
                continue
            return

    @property
    def stopping(self) -> bool:
        """True once :meth:`shutdown` began."""
        return self._stopping

    @property
    def in_flight(self) -> int:
        """Runs going now."""
        return len(self._live)

    def __repr__(self) -> str:
        return (
            f"AsyncDispatcher(concurrency={self.concurrency}, threads={self.threads}, "
            f"queues={self.queues!r})"
        )


def _moving(run: _Run) -> bool:
    """True while a run can go on by itself (not parked on a future that is not done)."""
    if run.phase in (_Phase.CLAIM, _Phase.OUTCOME):
        return True
    if run.phase is _Phase.USER and run.coroutine and not run.abandoned:
        parked = run.parked
        return parked is None or parked.done()
    return False
