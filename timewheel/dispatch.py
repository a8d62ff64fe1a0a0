"""Dispatchers: who runs READY tasks, and how a run claims, heartbeats and completes.

Dispatch is driven by worker capacity, never by time: workers **pull** from the ready queue, so a
spike of due tasks waits in the queue (and, past its bound, as READY rows in the store) instead of
being pushed onto busy workers.

A run is: claim READY -> RUNNING with a lease (compare-and-swap: a lost claim means another worker
has it, and this one moves on), call the function, then SUCCEEDED, or FAILED / TIMED_OUT, or back
to PENDING at ``now + backoff`` when the retry policy allows another attempt. While it runs, the
dispatcher's heartbeat extends the lease. A worker that dies stops heartbeating; the trigger loop
then finds the expired lease and runs the task again: delivery is **at least once**, so handlers
must be idempotent. A task never runs twice *at once* on one lease: a late finisher whose lease was
taken over is ignored.

- :class:`InlineDispatcher` runs tasks in the thread that advances a ``FakeClock`` (or calls
  ``Scheduler.run_pending()``): deterministic, for tests.
- :class:`ThreadPoolDispatcher` (the default) runs N worker threads and one heartbeat thread;
  on a durable store, a :class:`GroupFinisher` thread stores the successes of runs that complete
  together in one transaction.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from timewheel.clock import Clock
from timewheel.context import call_as
from timewheel.jobs import TRACEBACK_KEY
from timewheel.logs import task_extra, task_label
from timewheel.ready import ReadyQueue
from timewheel.refs import ReferenceNotAllowedError
from timewheel.stores.base import (
    Changed,
    Finish,
    Lease,
    Store,
    SupportsFinishMany,
    extend_leases,
)
from timewheel.task import Task, TaskState

__all__ = [
    "HEARTBEAT_PAGE",
    "Dispatcher",
    "Engine",
    "GroupFinisher",
    "InlineDispatcher",
    "NullDispatcher",
    "Rebuildable",
    "ThreadPoolDispatcher",
    "complete",
    "format_traceback",
    "refuse",
    "release_frames",
    "report_unresolved",
    "run_claimed",
    "run_task",
]

log = logging.getLogger("timewheel.dispatch")

_UNRESOLVED: set[str] = set()  # references already reported as unresolvable in this process


@runtime_checkable
class Engine(Protocol):
    """**Protocol:** the runtime side a dispatcher calls (a scheduler's ``Runtime``).

    A run is: pull a READY snapshot from :attr:`ready_queue`, :meth:`resolve` its function,
    :meth:`claim` it (or :meth:`claim_batch` several straight from the store), call
    :meth:`started`, call the function, store the outcome with :func:`complete` (which calls
    :meth:`finished`), and keep the lease alive with ``store.heartbeat`` while it runs.
    :func:`run_task` does all of it for one pulled snapshot.
    """

    @property
    def store(self) -> Store:
        """The store the tasks live in."""
        ...

    @property
    def clock(self) -> Clock:
        """The clock leases and lateness are measured on."""
        ...

    @property
    def ready_queue(self) -> ReadyQueue:
        """The queue the trigger fills with READY tasks."""
        ...

    @property
    def lease(self) -> float:
        """Seconds a claim lasts without a heartbeat."""
        ...

    def resolve(self, task: Task) -> Callable[..., Any]:
        """The callable for *task*.

        Raises ``ReferenceNotAllowedError`` when the scheduler's allowlist refuses the stored
        reference (claim the task and :func:`refuse` it), and another ``SerializationError``
        when it is allowed but does not resolve in this process (leave it for another worker).
        """
        ...

    def claim(self, task: Task, owner: str) -> Task | None:
        """Claim a pulled READY snapshot for *owner* (compare-and-swap); None if the swap lost."""
        ...

    def claim_batch(self, owner: str, limit: int, queues: Sequence[str] | None) -> list[Task]:
        """Claim up to *limit* READY tasks of *queues* from the store in one step."""
        ...

    def started(self, task: Task) -> None:
        """Called once a claim succeeded, before the function runs."""
        ...

    def finished(self, changed: Changed, exc: BaseException | None, event: str) -> None:
        """Called after a run's outcome is stored (*event*: succeeded/failed/retried/timed_out)."""
        ...


@runtime_checkable
class Dispatcher(Protocol):
    """**Protocol:** runs READY tasks pulled from an engine's ready queue.

    ``queues`` names the queues served (``None``: all); the trigger queues only those here, and
    leaves the others READY in the store for workers elsewhere.
    """

    queues: Sequence[str] | None

    def start(self, engine: Engine) -> None:
        """Begin serving *engine*. Called once by ``Scheduler.start()``."""
        ...

    def wakeup(self) -> None:
        """New tasks may be ready."""
        ...

    def run_ready(self) -> list[Task]:
        """Run what is ready in the calling thread (inline dispatchers); the tasks that ran."""
        ...

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Stop claiming; finish (wait) or release in-flight tasks back to READY."""
        ...

    def beat(self) -> None:
        """Extend the lease of every task running here, now (a clock that jumps, such as a
        ``FakeClock``, calls it before looking for expired leases)."""
        ...


@runtime_checkable
class Rebuildable(Protocol):
    """**Protocol (optional):** a dispatcher that can make an unstarted twin of itself.

    A scheduler inherited across ``fork()`` on a durable store restarts in the child with such a
    twin, since the parent's threads do not exist there.
    """

    def rebuilt(self) -> Dispatcher:
        """A new, unstarted dispatcher with the same settings."""
        ...


TRACEBACK_LIMIT = 8192
"""Most characters of a failed run's formatted traceback kept on its exception (the last ones)."""


def format_traceback(exc: BaseException) -> str:
    """*exc*'s formatted traceback with its chain, cut to the last :data:`TRACEBACK_LIMIT`
    characters (what a failed run keeps as text)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(text) > TRACEBACK_LIMIT:
        text = "...\n" + text[-(TRACEBACK_LIMIT - 4) :]
    return text


def release_frames(exc: BaseException) -> None:
    """Keep *exc* as text, not frames: set ``exc.formatted_traceback`` to its formatted traceback
    (with its chain, cut to the last :data:`TRACEBACK_LIMIT` characters), then clear the
    ``__traceback__`` of it and of every exception in its chain (``__cause__``, ``__context__``).

    A finished task kept in a memory store holds its exception for ``job.exception()``; without
    this, the exception would hold every frame of the failed run, and each frame its locals, for
    as long as the task is kept. An exception type that refuses new attributes keeps only its
    type and message.
    """
    text = format_traceback(exc)
    try:
        exc.formatted_traceback = text  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        pass
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        e = pending.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        pending.extend(c for c in (e.__cause__, e.__context__) if c is not None)


def _summary(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text if len(text) <= 2000 else text[:1997] + "..."


def complete(
    engine: Engine,
    task: Task,
    owner: str,
    *,
    result: Any = None,
    exc: BaseException | None = None,
    timed_out: bool = False,
    final: bool = False,
) -> Changed | None:
    """Store the outcome of *owner*'s run of *task* (the version it claimed), applying retries.

    With *final*, a failure is stored as it is, without consulting the retry policy. Returns None
    when *owner* no longer holds the task (the outcome is discarded).
    """
    store = engine.store
    now = engine.clock.time()
    keep: BaseException | None = None
    if exc is None and not timed_out:
        changed = store.finish(
            task.id, owner=owner, state=TaskState.SUCCEEDED, now=now, result=result
        )
        event = "succeeded"
    else:
        err: BaseException = (
            exc
            if exc is not None
            else TimeoutError(f"task {task.id!r} timed out after {task.timeout} s")
        )
        summary = _summary(err)
        what = "timed out" if timed_out else "failed"
        if not final and task.retry.should_retry(task.attempts, err):
            due = now + task.retry.delay_for(task.attempts)
            changed = store.finish(
                task.id, owner=owner, state=TaskState.PENDING, now=now, due=due, error=summary
            )
            event = "timed_out" if timed_out else "retried"
            if changed is not None:
                log.warning(
                    "%s %s: %s; retrying in %.3g s",
                    task_label(task),
                    what,
                    summary,
                    due - now,
                    extra=task_extra(task),
                )
        else:
            state = TaskState.TIMED_OUT if timed_out else TaskState.FAILED
            keep = None if store.durable else err
            changes: dict[str, Any] = {"error": summary, "result": keep}
            if store.durable and exc is not None and not final:
                # the kept exception carries it in memory; a durable store keeps the text
                changes["extra"] = {**task.extra, TRACEBACK_KEY: format_traceback(exc)}
            changed = store.finish(task.id, owner=owner, state=state, now=now, **changes)
            event = "timed_out" if timed_out else "failed"
            if changed is not None:
                log.error(
                    "%s %s, no attempt left: %s",
                    task_label(task),
                    what,
                    summary,
                    # a refusal (final) never ran: its traceback would show only the check
                    exc_info=(
                        (type(exc), exc, exc.__traceback__)
                        if exc is not None and not final
                        else None
                    ),
                    extra=task_extra(task),
                )
    if changed is None:
        _discarded(task, owner)
        return None
    engine.finished(changed, exc, event)
    if keep is not None:
        release_frames(keep)  # after the listeners, which may still want the frames
    return changed


def _discarded(task: Task, owner: str) -> None:
    log.warning(
        "%s: outcome discarded, the lease of %s was lost (it may run again)",
        task_label(task),
        owner,
        extra=task_extra(task),
    )


HEARTBEAT_PAGE = 1_000
"""The most leases one heartbeat step extends (``SupportsHeartbeatMany``)."""


class GroupFinisher:
    """Stores the successes of runs in groups (a group commit), on threads of its own.

    A worker thread hands a run that succeeded to :meth:`submit` and goes on to its next task.
    The finisher stores every success waiting at that moment in one ``finish_many`` step (one
    transaction, one commit), then reports each (``Engine.finished``: events, waiting handles,
    dependents). A run that succeeds alone is stored at once, as ``finish`` would; runs that
    succeed while a group is being stored go together in the next one, so no run waits for
    others to complete. Failures, retries and timeouts are stored by the worker (:func:`complete`).

    Its backlog is bounded: :meth:`submit` waits while *backlog* successes wait to be stored,
    so a store slower than the workers slows the workers (which then claim no more work than
    the store keeps up with) instead of growing a list of runs already done. A success waiting
    here keeps its lease: the dispatcher's heartbeat extends it (:meth:`waiting`) until it is
    stored, so a slow store never lets a finished run's lease expire and the task run again.

    Args:
        engine: the scheduler's engine (its store must support ``finish_many``).
        limit: the most outcomes stored in one step.
        backlog: the most successes waiting to be stored (default: twice *limit*).
        threads: the threads storing groups. With two (the default), one group is prepared
            and its rows decoded while the store writes the other: the end-to-end runs of
            benchmarks/bench_postgres.py measured 7-16% more tasks per second than with one.
    """

    def __init__(
        self, engine: Engine, *, limit: int = 500, backlog: int | None = None, threads: int = 2
    ) -> None:
        store = engine.store
        if not isinstance(store, SupportsFinishMany):
            raise TypeError(f"{store!r} does not store outcomes in groups (finish_many)")
        self._engine = engine
        self._finish_many = store.finish_many
        self._limit = limit
        self._backlog = 2 * limit if backlog is None else max(1, backlog)
        self._items: list[tuple[Task, str, Any]] = []
        # the groups being stored, by storing thread
        self._storing: dict[int, list[tuple[Task, str, Any]]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"timewheel-finisher-{k}", daemon=True)
            for k in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, task: Task, owner: str, result: Any) -> None:
        """Store that *owner*'s run of *task* SUCCEEDED with *result* (soon, with others);
        waits while the backlog is full."""
        with self._cond:
            while len(self._items) >= self._backlog and not self._closed:
                self._cond.wait()
            if not self._closed:
                self._items.append((task, owner, result))
                self._cond.notify_all()
                return
        complete(self._engine, task, owner, result=result)  # closed: on the caller's thread

    def waiting(self) -> list[tuple[Task, str]]:
        """The successes not yet stored, with their owners (their leases must be kept)."""
        with self._cond:
            storing = [item for group in self._storing.values() for item in group]
            return [(t, o) for t, o, _ in (*storing, *self._items)]

    def holds(self, task_id: str, owner: str) -> bool:
        """Whether *owner*'s success of *task_id* waits here, its store step not yet begun."""
        with self._cond:
            return any(t.id == task_id and o == owner for t, o, _ in self._items)

    def _loop(self) -> None:
        me = threading.get_ident()
        while True:
            with self._cond:
                self._storing.pop(me, None)
                while not self._items and not self._closed:
                    self._cond.wait()
                if not self._items:
                    return
                group = self._storing[me] = self._items[: self._limit]
                del self._items[: self._limit]
                self._cond.notify_all()  # room in the backlog
            self._store(group)

    def _store(self, group: list[tuple[Task, str, Any]]) -> None:
        engine = self._engine
        finishes = [Finish(t.id, o, TaskState.SUCCEEDED, {"result": r}, t) for t, o, r in group]
        try:
            changes = self._finish_many(finishes, now=engine.clock.time())
        except Exception:
            log.exception(
                "storing %d outcomes together failed; storing them one by one", len(group)
            )
            for task, owner, result in group:
                try:
                    complete(engine, task, owner, result=result)
                except Exception:
                    log.exception("task %r: error while completing the run", task.id)
            return
        for (task, owner, _), changed in zip(group, changes, strict=True):
            if changed is None:
                _discarded(task, owner)
                continue
            try:
                engine.finished(changed, None, "succeeded")
            except Exception:
                log.exception("task %r: error while reporting the run", task.id)

    def close(self) -> None:
        """Store what waits, then stop the threads (later submissions are stored directly)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()


def run_task(
    engine: Engine, task: Task, owner: str, running: _Running | None = None
) -> Task | None:
    """Claim *task* (a READY snapshot) for *owner*, run it, and store the outcome.

    Returns the claimed snapshot (RUNNING) if this call ran it, else None (claim lost).
    """
    try:
        func = engine.resolve(task)
    except ReferenceNotAllowedError as e:
        claimed = engine.claim(task, owner)
        if claimed is not None:
            refuse(engine, claimed, owner, e)
        return claimed
    except Exception as e:
        report_unresolved(task, e)
        return None
    claimed = engine.claim(task, owner)
    if claimed is None:
        return None
    run_claimed(engine, claimed, owner, func, running)
    return claimed


def refuse(engine: Engine, claimed: Task, owner: str, error: ReferenceNotAllowedError) -> None:
    """End a claimed task whose stored function reference the allowlist refuses: FAILED with
    *error* as its error, without a retry (another attempt would meet the same refusal), and one
    ERROR log line (the final failure's, naming the reference). The function was never imported
    or called."""
    try:
        complete(engine, claimed, owner, exc=error, final=True)
    except Exception:  # the engine's own bookkeeping failed: never kill the worker
        log.exception("task %r: error while failing it", claimed.id)


def report_unresolved(task: Task, error: Exception) -> None:
    """Log, once per reference and process, that tasks calling *task*'s function are left READY
    for a worker that can import it."""
    ref = task.func_name
    if ref not in _UNRESOLVED:
        _UNRESOLVED.add(ref)
        log.error(
            "tasks calling %s are not claimed here (they stay READY for a worker that can "
            "import it): %s",
            ref,
            error,
        )


def run_claimed(
    engine: Engine,
    claimed: Task,
    owner: str,
    func: Callable[..., Any],
    running: _Running | None = None,
    finisher: GroupFinisher | None = None,
    *,
    begun: bool = False,
) -> None:
    """Run a task *owner* has claimed and store the outcome (retries applied); a success goes
    through *finisher* when one is given.

    With *begun*, *running* already holds the task as started (a batch claim's task, begun by
    its worker); otherwise it is added there now.
    """
    clock = engine.clock
    if running is not None and not begun:
        running.add(claimed, owner, clock.monotonic())

    def outcome(**result: Any) -> None:
        # Stop heartbeating before the outcome is stored: a heartbeat between the store step and
        # the removal would find the task no longer RUNNING under this owner and report a lost
        # lease that was never lost.
        if running is not None and not running.remove(claimed.id, owner):
            # the dispatcher ended this run for it (a timeout, or a release at shutdown) and
            # stored that end: the late outcome has nowhere to go, and no lease was lost
            log.info(
                "%s returned after its run was ended for it (timed out or released); its "
                "outcome is discarded",
                task_label(claimed),
                extra=task_extra(claimed),
            )
            return
        if finisher is not None and result.keys() == {"result"}:
            finisher.submit(claimed, owner, result["result"])
        else:
            complete(engine, claimed, owner, **result)

    try:
        engine.started(claimed)
        started = clock.monotonic()
        try:
            value = call_as(claimed, func, claimed.args, claimed.kwargs)
        except BaseException as e:  # SystemExit too: a task must never end its worker thread
            outcome(exc=e)
            if isinstance(e, KeyboardInterrupt):
                raise  # only the main thread gets one (inline dispatch): let it stop the program
        else:
            late = claimed.timeout is not None and clock.monotonic() - started > claimed.timeout
            if late:
                outcome(timed_out=True)
            else:
                outcome(result=value)
    except Exception:  # the engine's own bookkeeping failed: never kill the worker
        log.exception("task %r: error while completing the run", claimed.id)
    finally:
        if running is not None:
            running.remove(claimed.id, owner)


class _Running:
    """Tasks held by one dispatcher's workers: for heartbeats, timeouts and shutdown release.

    A task claimed in a batch waits, held but not started (``started`` None), until its worker
    reaches it; its timeout counts from :meth:`begin`, when it starts running.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, tuple[Task, str, float | None]] = {}

    def add(self, task: Task, owner: str, started: float | None) -> None:
        with self._lock:
            self._by_id[task.id] = (task, owner, started)

    def begin(self, task_id: str, owner: str, started: float) -> bool:
        """Mark a held task as running from *started*; False if *owner* no longer holds it
        (handed back because its worker was abandoned)."""
        with self._lock:
            cur = self._by_id.get(task_id)
            if cur is None or cur[1] != owner:
                return False
            self._by_id[task_id] = (cur[0], owner, started)
            return True

    def remove(self, task_id: str, owner: str) -> bool:
        """Forget *owner*'s hold on a task; False if it did not hold it (any more)."""
        with self._lock:
            cur = self._by_id.get(task_id)
            if cur is not None and cur[1] == owner:
                del self._by_id[task_id]
                return True
            return False

    def waiting(self, owner: str) -> list[Task]:
        """Forget and return the tasks *owner* holds but has not started."""
        with self._lock:
            ids = [i for i, (_, o, s) in self._by_id.items() if o == owner and s is None]
            return [self._by_id.pop(i)[0] for i in ids]

    def holds(self, task_id: str, owner: str) -> bool:
        with self._lock:
            cur = self._by_id.get(task_id)
            return cur is not None and cur[1] == owner

    def snapshot(self) -> list[tuple[Task, str, float | None]]:
        with self._lock:
            return list(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)


def _owner_prefix() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{id(object()) & 0xFFFFFF:06x}"


def _own_twin(dispatcher: object, cls: type) -> None:
    """A subclass may hold state its base cannot copy: it rebuilds only by overriding ``rebuilt``."""
    if type(dispatcher) is not cls:
        raise NotImplementedError(
            f"{type(dispatcher).__qualname__} does not override rebuilt() of {cls.__qualname__}"
        )


class NullDispatcher:
    """Runs nothing and serves no queue: due tasks are moved to READY and stay there, for workers
    in other processes (``timewheel worker``) to claim. For a process that only triggers, and for
    measuring the trigger side alone."""

    queues: Sequence[str] | None = ()

    def start(self, engine: Engine) -> None:
        """Nothing to start."""

    def wakeup(self) -> None:
        """Nothing to wake."""

    def run_ready(self) -> list[Task]:
        return []

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Nothing to stop."""

    def beat(self) -> None:
        """Nothing runs here."""

    def rebuilt(self) -> NullDispatcher:
        """A new NullDispatcher."""
        _own_twin(self, NullDispatcher)
        return NullDispatcher()

    def __repr__(self) -> str:
        return "NullDispatcher()"


class InlineDispatcher:
    """Runs ready tasks in the calling thread: the thread that advances a ``FakeClock`` or calls
    ``Scheduler.run_pending()``. Deterministic: tasks run one at a time, in ready-queue order.

    A per-task ``timeout`` is checked after the run returns (a function cannot be interrupted).
    """

    def __init__(self, queues: Sequence[str] | None = None) -> None:
        self.queues: Sequence[str] | None = None if queues is None else tuple(queues)
        self._engine: Engine | None = None
        self._owner = f"inline:{_owner_prefix()}"

    def start(self, engine: Engine) -> None:
        self._engine = engine

    def wakeup(self) -> None:
        """Nothing to wake: work runs when the clock advances."""

    def run_ready(self) -> list[Task]:
        engine = self._engine
        if engine is None:
            return []
        ran: list[Task] = []
        ready = engine.ready_queue
        while (task := ready.pull_nowait(self.queues)) is not None:
            claimed = run_task(engine, task, self._owner)
            if claimed is not None:
                ran.append(claimed)
        return ran

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> None:
        self._engine = None

    def beat(self) -> None:
        """Nothing to extend: a task runs to its end inside the call that advanced the clock."""

    def rebuilt(self) -> InlineDispatcher:
        """A new, unstarted InlineDispatcher serving the same queues."""
        _own_twin(self, InlineDispatcher)
        return InlineDispatcher(self.queues)

    def __repr__(self) -> str:
        return f"InlineDispatcher(queues={self.queues!r})"


class ThreadPoolDispatcher:
    """N worker threads pulling from the ready queue, plus one heartbeat/timeout thread.

    Args:
        workers: worker threads (default: ``min(32, cpu_count + 4)``).
        queues: the queue names served (None: all).
        heartbeat: seconds between lease extensions (default: a third of the engine's lease).
        claim_batch: with a durable store, the most tasks one worker claims in one store step
            when the ready queue holds work for every worker (one transaction for several
            claims); the rest of a batch waits, leased and heartbeated, for that worker.

    A task that overruns its ``timeout`` is abandoned: it is stored as TIMED_OUT (or retried), its
    eventual result is discarded, and a replacement worker keeps the pool at full strength (a
    Python thread cannot be killed; the abandoned one exits when the function returns).
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        queues: Sequence[str] | None = None,
        heartbeat: float | None = None,
        claim_batch: int = 8,
    ) -> None:
        if workers is None:
            workers = min(32, (os.cpu_count() or 1) + 4)
        if workers < 1:
            raise ValueError(f"workers must be >= 1 (got {workers})")
        if claim_batch < 1:
            raise ValueError(f"claim_batch must be >= 1 (got {claim_batch})")
        self.workers = workers
        self.queues: Sequence[str] | None = None if queues is None else tuple(queues)
        self.claim_batch = claim_batch
        #: seconds between lease extensions as given (None: a third of the engine's lease)
        self.heartbeat = heartbeat
        self._engine: Engine | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._running = _Running()
        self._abandoned: set[str] = set()
        self._lock = threading.Lock()
        self._hb_cond = threading.Condition()
        self._prefix = _owner_prefix()
        self._seq = 0
        self._last_probe = -math.inf
        self._finisher: GroupFinisher | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, engine: Engine) -> None:
        if self._engine is not None:
            raise RuntimeError("ThreadPoolDispatcher.start() called twice")
        self._engine = engine
        if engine.store.durable and isinstance(engine.store, SupportsFinishMany):
            self._finisher = GroupFinisher(engine)
        for _ in range(self.workers):
            self._spawn()
        hb = threading.Thread(target=self._heartbeat_loop, name="timewheel-heartbeat", daemon=True)
        hb.start()
        self._threads.append(hb)

    def _spawn(self) -> None:
        with self._lock:
            self._seq += 1
            owner = f"{self._prefix}:w{self._seq}"
        t = threading.Thread(
            target=self._worker, args=(owner,), name=f"timewheel-{owner}", daemon=True
        )
        with self._lock:
            self._threads.append(t)
        t.start()

    def wakeup(self) -> None:
        """Workers block on the ready queue and wake by themselves."""

    def run_ready(self) -> list[Task]:
        return []

    # -- workers ----------------------------------------------------------------------------
    def _worker(self, owner: str) -> None:
        engine = self._engine
        assert engine is not None
        ready = engine.ready_queue
        # A durable store claims through its batched claim: one transaction for several tasks,
        # highest priority then earliest due across every process's READY work, skipping tasks
        # whose function does not import here. The memory store claims the pulled snapshot.
        batched = engine.store.durable
        while not self._stop.is_set():
            task = ready.pull(self.queues, timeout=0.5)
            if task is None and not (batched and self._probe_due(engine)):
                continue
            if self._stop.is_set():
                break  # it stays READY in the store
            try:
                if task is None:
                    # idle: one worker a second asks the store itself, which finds READY work
                    # no snapshot announced and tells the store of the quiet moment (SQLite
                    # asks its checkpoint thread to truncate the WAL)
                    self._run_batch(engine, owner, limit=1)
                elif batched:
                    self._run_batch(engine, owner)
                else:
                    run_task(engine, task, owner, self._running)
            except Exception:  # a store error must not end the worker: the next pull retries
                log.exception("worker %s: error while claiming or running", owner)
            with self._lock:
                if owner in self._abandoned:
                    self._abandoned.discard(owner)
                    return  # a replacement took this worker's place

    def _probe_due(self, engine: Engine) -> bool:
        now = engine.clock.monotonic()
        with self._lock:
            if now - self._last_probe < 1.0:
                return False
            self._last_probe = now
            return True

    def _run_batch(self, engine: Engine, owner: str, limit: int | None = None) -> None:
        """Claim a batch from the store (a pulled snapshot said work is there) and run it.

        A batch that comes back full says the store holds more READY work than this worker
        took, perhaps made READY by another process's trigger, of which this process's queue
        holds no snapshot: the worker claims again at once, twice as many (up to
        ``claim_batch``), until a batch comes back short.
        """
        ready = engine.ready_queue
        if limit is None:
            limit = max(1, min(self.claim_batch, 1 + len(ready) // self.workers))
            self._discard(ready, limit - 1)  # the batch stands for these snapshots too
        while True:
            claimed = engine.claim_batch(owner, limit, self.queues)
            if not self._run_claimed_batch(engine, owner, claimed) or len(claimed) < limit:
                return
            limit = min(self.claim_batch, 2 * limit)
            # the next batch stands for as many queued snapshots (left, each would be a claim
            # that finds its task taken)
            self._discard(ready, limit)

    def _discard(self, ready: ReadyQueue, n: int) -> None:
        for _ in range(n):
            if ready.pull_nowait(self.queues) is None:
                return

    def _run_claimed_batch(self, engine: Engine, owner: str, claimed: list[Task]) -> bool:
        """Run the tasks of a batch *owner* claimed, in order; False if it stopped early
        (shutdown, or this worker timed out and was replaced)."""
        for task in claimed:  # leased from now: the heartbeat covers the ones still waiting
            self._running.add(task, owner, None)  # its timeout counts once it starts
        for task in claimed:
            if self._stop.is_set():
                return False  # shutdown releases what is still waiting back to READY
            if not self._running.begin(task.id, owner, engine.clock.monotonic()):
                # this worker timed out on an earlier task: the heartbeat handed back the rest
                return False
            try:
                func = engine.resolve(task)
            except ReferenceNotAllowedError as e:
                refuse(engine, task, owner, e)
                self._running.remove(task.id, owner)
                continue
            except Exception as e:
                report_unresolved(task, e)
                self._release(engine, task, owner, "its function does not import here")
                continue
            run_claimed(engine, task, owner, func, self._running, self._finisher, begun=True)
            with self._lock:
                if owner in self._abandoned:
                    return False  # timed out: its waiting tasks are back in READY already
        return not self._stop.is_set()

    def _release(self, engine: Engine, task: Task, owner: str, why: str) -> None:
        """Give a claimed, not started task back: READY again at once, not after its lease."""
        try:
            engine.store.finish(
                task.id,
                owner=owner,
                state=TaskState.READY,
                now=engine.clock.time(),
                error=f"released: {why}",
            )
        except Exception:
            log.exception("task %r: release failed (it runs again after its lease)", task.id)
        self._running.remove(task.id, owner)

    def _heartbeat_loop(self) -> None:
        engine = self._engine
        assert engine is not None
        clock = engine.clock
        interval = self.heartbeat or max(0.01, engine.lease / 3)
        deadline = clock.monotonic() + interval
        while not self._stop.is_set():
            with self._hb_cond:
                remaining = deadline - clock.monotonic()
                if remaining > 0:
                    clock.wait(self._hb_cond, min(remaining, 0.25))
            if self._stop.is_set():
                return
            mono = clock.monotonic()
            # timeouts are checked every pass; leases are extended every interval
            for task, owner, started in self._running.snapshot():
                if task.timeout is None or started is None:
                    continue
                if mono - started > task.timeout:
                    self._time_out(engine, task, owner)
            if mono < deadline:
                continue
            deadline = mono + interval
            self.beat()

    def _time_out(self, engine: Engine, task: Task, owner: str) -> None:
        """Abandon *owner*, stuck in *task* past its timeout: store the timeout, hand the tasks
        it claimed but has not started back to READY, and start one worker in its place."""
        if not self._running.remove(task.id, owner):
            return  # it finished since the snapshot
        with self._lock:
            first = owner not in self._abandoned
            self._abandoned.add(owner)
        try:
            complete(engine, task, owner, timed_out=True)
        except Exception:
            log.exception("task %r: error while timing it out", task.id)
        if not first:
            return
        for rest in self._running.waiting(owner):
            self._release(engine, rest, owner, "its worker timed out on another task")
        if not self._stop.is_set():
            self._spawn()

    def beat(self) -> None:
        """Extend the lease of every task running in this pool, now.

        The heartbeat thread calls it every interval; a ``FakeClock`` driving the scheduler
        calls it before reaping, as live workers would have heartbeated while fake time passed.
        """
        engine = self._engine
        if engine is None:
            return
        now = engine.clock.time()
        finisher = self._finisher
        held = [(task, owner) for task, owner, _ in self._running.snapshot()]
        if finisher is not None:  # successes not yet stored keep their leases too
            held += finisher.waiting()
        leases = [Lease(task.id, owner) for task, owner in held]
        extended: list[bool] = []
        for start in range(0, len(leases), HEARTBEAT_PAGE):  # one store step per page
            page = leases[start : start + HEARTBEAT_PAGE]
            try:
                extended += extend_leases(
                    engine.store, page, lease_expires=now + engine.lease, now=now
                )
            except Exception:
                log.exception("heartbeat of %d leases failed", len(page))
                extended += [True] * len(page)  # unknown: nothing is reported lost
        for (task, owner), ok in zip(held, extended, strict=True):
            if not ok and (  # not merely finished meanwhile
                self._running.holds(task.id, owner)
                or (finisher is not None and finisher.holds(task.id, owner))
            ):
                log.warning(
                    "%s: the lease of %s was lost; its result will be discarded",
                    task_label(task),
                    owner,
                    extra=task_extra(task),
                )

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Stop claiming; with *wait*, let in-flight tasks finish for up to *timeout* seconds;
        tasks still running then are released to READY at once (not after a lease expiry)."""
        engine = self._engine
        self._stop.set()
        if engine is None:
            return
        engine.ready_queue.wake_all()
        with self._hb_cond:
            self._hb_cond.notify_all()
        if wait:
            import time

            end = None if timeout is None else time.monotonic() + timeout
            for t in list(self._threads):
                if t is threading.current_thread():
                    continue
                t.join(None if end is None else max(0.0, end - time.monotonic()))
        if self._finisher is not None:
            self._finisher.close()  # the successes already in hand are stored first
        now = engine.clock.time()
        for task, owner, _ in self._running.snapshot():
            try:
                changed = engine.store.finish(
                    task.id,
                    owner=owner,
                    state=TaskState.READY,
                    now=now,
                    error="released at shutdown",
                )
            except Exception:
                log.exception("task %r: release at shutdown failed", task.id)
                continue
            if changed is not None:
                self._running.remove(task.id, owner)
                log.info("task %r released to READY at shutdown", task.id)
        self._engine = None

    @property
    def finisher(self) -> GroupFinisher | None:
        """The group finisher storing this pool's successes (on a durable store that supports
        ``finish_many``, once started), else None."""
        return self._finisher

    @property
    def in_flight(self) -> int:
        """Tasks running now."""
        return len(self._running)

    def rebuilt(self) -> ThreadPoolDispatcher:
        """A new, unstarted pool with the same settings (its own threads once started)."""
        _own_twin(self, ThreadPoolDispatcher)
        return ThreadPoolDispatcher(
            self.workers,
            queues=self.queues,
            heartbeat=self.heartbeat,
            claim_batch=self.claim_batch,
        )

    def __repr__(self) -> str:
        return f"ThreadPoolDispatcher(workers={self.workers}, queues={self.queues!r})"
