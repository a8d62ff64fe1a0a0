"""Model-based tests of the scheduler core: hypothesis state machines over random interleavings.

Two machines:

* :class:`StoreMachine` drives a ``MemoryStore`` directly, as several workers and a lease reaper
  would, and compares it after every step with a plain model of what each compare-and-swap must
  do (win, or lose without a trace).
* :class:`SchedulerMachine` drives a ``Scheduler`` with a ``FakeClock`` and an
  ``InlineDispatcher`` that serves the ``"inline"`` queue, while simulated workers ``w1..w3``
  pull, claim, heartbeat, complete and abandon tasks of the ``"ext"`` queue.

Both record *every* snapshot the store writes (a recording dict replaces the store's table) and
check, after every step: only moves in ``TRANSITIONS``; ``version`` strictly increasing per task;
terminal states absorbing; RUNNING iff a lease owner is set; ``attempts`` within the retry policy
plus the lease recoveries. The scheduler machine also checks that no task runs before its due
time, that nothing is lost (every task is terminal, or in the wheel, the ready queue or a
worker's hands), and that the statistics agree with the store.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from timewheel.dispatch import InlineDispatcher, complete
from timewheel.errors import InvalidTransitionError, VersionConflictError
from timewheel.scheduler import Scheduler
from timewheel.shards import ShardedDict
from timewheel.stores.memory import MemoryStore
from timewheel.task import TERMINAL_STATES, TRANSITIONS, Retry, Task, TaskState
from timewheel.testing import FakeClock

P, R, RUN = TaskState.PENDING, TaskState.READY, TaskState.RUNNING
WORKERS = ("w1", "w2", "w3")
LEASE = 10.0
MAX_RECOVERIES = 2
MAX_TASKS = 30
INLINE = ("inline", "default")  # the queues the scheduler machine's inline dispatcher serves
# The wheel fires a task in the tick that holds its due time; allow that much slack when asking
# "should this have fired by now?" (never when asking "did it run early?": there is no slack).
SLACK = 0.002

SETTINGS = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class _Boom(Exception):
    """The exception the test's tasks raise."""


def _noop() -> None:
    pass


class _LoggedPart(dict[str, Task]):
    """A part of a store's task table that adds every snapshot written to it to *log*."""

    def __init__(self, log: list[Task]) -> None:
        super().__init__()
        self.log = log

    def __setitem__(self, key: str, value: Task) -> None:
        self.log.append(value)
        super().__setitem__(key, value)


class _History(ShardedDict[str, Task]):
    """A store's task table that records every snapshot written to it, in order."""

    def __init__(self) -> None:
        self.log: list[Task] = []
        super().__init__(make=lambda: _LoggedPart(self.log))


class RecordingStore(MemoryStore):
    """A ``MemoryStore`` whose every write (insert, transition, claim, heartbeat ...) is logged."""

    def __init__(self) -> None:
        super().__init__()
        self.history = _History()
        self._tasks = self.history


def recording_memory_store() -> tuple[MemoryStore, _History]:
    """A plain ``MemoryStore`` (so ``Scheduler.schedule`` takes its compact fast path) whose task
    table records every snapshot written to it. Compact records live outside that table until
    their first change."""
    store = MemoryStore()
    history = _History()
    store._tasks = history
    return store, history


class HistoryChecker:
    """Checks each new snapshot in a store's recorded log against the previous one.

    A task in ``compact`` was scheduled as a compact record: PENDING at version 0 without a
    snapshot, so its first recorded snapshot may also be its promotion (READY at version 1)."""

    def __init__(self, history: _History, compact: set[str] | None = None) -> None:
        self.history = history
        self.compact = compact if compact is not None else set()
        self.last: dict[str, Task] = {}
        self.seen = 0
        self.moves: Counter[tuple[TaskState, TaskState]] = Counter()

    def check(self) -> None:
        log = self.history.log
        for snap in log[self.seen :]:
            prev = self.last.get(snap.id)
            where = f"task {snap.id!r}: {prev and (prev.state.value, prev.version)} -> " + str(
                (snap.state.value, snap.version)
            )
            if prev is None and snap.id in self.compact and snap.state is R:
                assert snap.version == 1, where
                self.moves[P, R] += 1
            elif prev is None:
                assert snap.state is P, where
                assert snap.version == 0, where
            else:
                assert prev.state not in TERMINAL_STATES, f"terminal state left: {where}"
                assert snap.version > prev.version, f"version not increasing: {where}"
                if snap.state is prev.state:
                    # a heartbeat (RUNNING) or a dependency count (PENDING) changes no state
                    assert snap.state in (P, RUN), where
                else:
                    assert snap.state in TRANSITIONS[prev.state], f"forbidden move: {where}"
                self.moves[prev.state, snap.state] += 1
            running = snap.state is RUN
            assert running == (snap.lease_owner is not None), f"lease owner vs state: {snap}"
            assert running == (snap.lease_expires is not None), f"lease expiry vs state: {snap}"
            assert snap.attempts <= snap.retry.max_attempts + MAX_RECOVERIES, snap
            self.last[snap.id] = snap
        self.seen = len(log)


# --------------------------------------------------------------------------------------------
# 1. the store alone, against a model of each compare-and-swap
# --------------------------------------------------------------------------------------------

retries = st.builds(
    Retry,
    max_attempts=st.integers(1, 3),
    backoff=st.just("fixed"),
    delay=st.sampled_from([0.0, 0.5, 3.0]),
)
offsets = st.one_of(
    st.just(0.0),
    st.floats(-5, 0, allow_nan=False),
    st.floats(0, 5, allow_nan=False),
    st.floats(5, 120, allow_nan=False),
)
steps = st.one_of(st.floats(0, 0.01), st.floats(0, 2), st.floats(0, 30), st.just(LEASE + 1))


class StoreMachine(RuleBasedStateMachine):
    """Workers w1..w3 and a reaper against a ``MemoryStore``; a dict model predicts each swap."""

    def __init__(self) -> None:
        super().__init__()
        self.store = RecordingStore()
        self.checker = HistoryChecker(self.store.history)
        self.now = 1_000_000.0
        self.model: dict[str, Task] = {}  # the expected current snapshot of each task
        self.n = 0

    def _expect(self, task_id: str, **changes: Any) -> Task:
        old = self.model[task_id]
        new = old.evolve(version=old.version + 1, updated=self.now, **changes)
        self.model[task_id] = new
        return new

    @precondition(lambda self: len(self.model) < MAX_TASKS)
    @rule(offset=offsets, retry=retries)
    def insert(self, offset: float, retry: Retry) -> None:
        self.n += 1
        task = Task(
            id=f"t{self.n}", func=_noop, due=self.now + offset, retry=retry, created=self.now
        )
        got = self.store.insert(task).task
        assert got.state is P
        assert got.version == 0
        self.model[task.id] = got

    @rule(dt=steps)
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(data=st.data())
    def promote(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(sorted(self.model) or ["nope"]), unique=True))
        moved = self.store.promote(ids, self.now)
        want = {
            i
            for i in ids
            if i in self.model and self.model[i].state is P and self.model[i].due <= self.now
        }
        assert {t.id for t in moved} == want
        for i in want:
            self._expect(i, state=R)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), owner=st.sampled_from(WORKERS), stale=st.booleans())
    def claim(self, data: st.DataObject, owner: str, stale: bool) -> None:
        tid = data.draw(st.sampled_from(sorted(self.model)))
        cur = self.model[tid]
        got = self.store.claim(
            tid,
            expected_version=cur.version - stale,
            owner=owner,
            lease_expires=self.now + LEASE,
            now=self.now,
        )
        if cur.state is R and not stale:
            assert got is not None
            assert got.due <= self.now, "claimed before its due time"
            want = self._expect(
                tid,
                state=RUN,
                attempts=cur.attempts + 1,
                lease_owner=owner,
                lease_expires=self.now + LEASE,
                started=self.now,
            )
            assert got == want
        else:
            assert got is None

    @rule(owner=st.sampled_from(WORKERS))
    def claim_next(self, owner: str) -> None:
        ready = sorted(
            (t for t in self.model.values() if t.state is R), key=lambda t: (-t.priority, t.due)
        )
        got = self.store.claim_next(
            owner=owner, lease_expires=self.now + LEASE, now=self.now, limit=2
        )
        assert len(got) == min(2, len(ready))
        for t in got:
            assert self.model[t.id].state is R
            self._expect(
                t.id,
                state=RUN,
                attempts=t.attempts,
                lease_owner=owner,
                lease_expires=self.now + LEASE,
                started=self.now,
            )

    def _running(self, data: st.DataObject) -> Task:
        return data.draw(st.sampled_from([t for t in self.model.values() if t.state is RUN]))

    def _any_running(self) -> bool:
        return any(t.state is RUN for t in self.model.values())

    @precondition(lambda self: self._any_running())
    @rule(data=st.data(), owner=st.sampled_from(WORKERS))
    def heartbeat(self, data: st.DataObject, owner: str) -> None:
        t = self._running(data)
        ok = self.store.heartbeat(t.id, owner=owner, lease_expires=self.now + LEASE, now=self.now)
        assert ok == (t.lease_owner == owner)
        if ok:
            self._expect(t.id, lease_expires=self.now + LEASE)

    @precondition(lambda self: self._any_running())
    @rule(
        data=st.data(),
        owner=st.sampled_from(WORKERS),
        outcome=st.sampled_from(["succeed", "fail", "fail_fatal", "release"]),
    )
    def finish(self, data: st.DataObject, owner: str, outcome: str) -> None:
        t = self._running(data)
        exc: BaseException = _Boom() if outcome == "fail" else KeyboardInterrupt()
        changes: dict[str, Any] = {}
        if outcome == "succeed":
            state = TaskState.SUCCEEDED
        elif outcome == "release":
            state = R
        elif t.retry.should_retry(t.attempts, exc):
            state = P
            changes["due"] = self.now + t.retry.delay_for(t.attempts)
        else:
            state = TaskState.FAILED
        got = self.store.finish(t.id, owner=owner, state=state, now=self.now, **changes)
        if t.lease_owner != owner:
            assert got is None, "a worker without the lease changed the task"
            return
        assert got is not None
        want = self._expect(t.id, state=state, lease_owner=None, lease_expires=None, **changes)
        assert got.task == want

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), stale=st.booleans())
    def cancel(self, data: st.DataObject, stale: bool) -> None:
        tid = data.draw(st.sampled_from(sorted(self.model)))
        cur = self.model[tid]
        try:
            got = self.store.transition(
                tid,
                expected_version=cur.version - stale,
                state=TaskState.CANCELLED,
                now=self.now,
            )
        except VersionConflictError:
            assert stale
            return
        except InvalidTransitionError:
            assert not stale
            assert cur.state not in (P, R)
            return
        assert not stale
        assert cur.state in (P, R)
        assert got.task == self._expect(tid, state=TaskState.CANCELLED)

    @rule()
    def reap(self) -> None:
        """The scheduler's reaper: expired leases go back to PENDING, or TIMED_OUT."""
        expired = self.store.expired_leases(self.now, limit=1000)
        want = {
            t.id
            for t in self.model.values()
            if t.state is RUN and t.lease_expires is not None and t.lease_expires < self.now
        }
        assert {t.id for t in expired} == want
        for t in expired:
            rerun = t.attempts < t.retry.max_attempts + MAX_RECOVERIES
            state = P if rerun else TaskState.TIMED_OUT
            self.store.transition(
                t.id,
                expected_version=t.version,
                state=state,
                now=self.now,
                due=self.now,
                lease_owner=None,
                lease_expires=None,
            )
            self._expect(t.id, state=state, due=self.now, lease_owner=None, lease_expires=None)

    @precondition(lambda self: self._any_running())
    @rule(data=st.data())
    def reaper_races_heartbeat(self, data: st.DataObject) -> None:
        """A reaper acting on a snapshot read before a heartbeat must lose its swap (River #1302)."""
        t = self._running(data)
        assert t.lease_owner is not None
        assert self.store.heartbeat(
            t.id, owner=t.lease_owner, lease_expires=self.now + LEASE, now=self.now
        )
        self._expect(t.id, lease_expires=self.now + LEASE)
        with pytest.raises(VersionConflictError):
            self.store.transition(
                t.id, expected_version=t.version, state=P, now=self.now, lease_owner=None
            )

    @invariant()
    def history_is_legal(self) -> None:
        self.checker.check()

    @invariant()
    def store_matches_model(self) -> None:
        for tid, want in self.model.items():
            got = self.store.get(tid)
            assert (got.state, got.version, got.attempts, got.lease_owner, got.lease_expires) == (
                want.state,
                want.version,
                want.attempts,
                want.lease_owner,
                want.lease_expires,
            ), tid
            assert got.due == want.due, tid
        counts = Counter(t.state for t in self.model.values())
        assert self.store.count_by_state() == {s: n for s, n in counts.items() if n}


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = SETTINGS


# --------------------------------------------------------------------------------------------
# 2. the scheduler: trigger, ready queue, inline dispatch, simulated workers, reaper
# --------------------------------------------------------------------------------------------

delays = st.one_of(
    st.just(0.0),
    st.floats(-30, 0, allow_nan=False),
    st.floats(0, 3, allow_nan=False),
    st.floats(3, 300, allow_nan=False),
    st.floats(3_000, 200_000, allow_nan=False),  # hours and days: the upper wheel levels
)
clock_steps = st.one_of(
    st.floats(0, 0.005),
    st.floats(0, 2),
    st.floats(0, 120),
    st.just(LEASE + 0.5),
    st.floats(3_600, 3 * 86_400),
)


class SchedulerMachine(RuleBasedStateMachine):
    """A ``Scheduler`` on a ``FakeClock``; inline tasks run on advance, ``"ext"`` tasks are run by
    simulated workers that may pull, claim, heartbeat, complete, fail or vanish.

    The store is a plain ``MemoryStore``, so a ``schedule()`` with only a delay (rule
    ``schedule_plain``) takes the compact fast path; its tasks are in the ``"default"`` queue,
    which the inline dispatcher serves too."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store, history = recording_memory_store()
        self.plain: set[str] = set()  # ids scheduled down the fast path
        self.checker = HistoryChecker(history, self.plain)
        self.sched: Scheduler | None = None
        self.ids: list[str] = []
        self.queue_of: dict[str, str] = {}
        self.fail_times: dict[str, int] = {}
        self.calls: Counter[str] = Counter()
        self.cancelled: set[str] = set()
        self.early: list[tuple[str, float, float]] = []
        self.plain_id: dict[str, str] = {}  # the key a fast-path task was given -> its id
        self.pulled: dict[str, Task] = {}  # worker -> a READY snapshot pulled, not yet claimed
        self.held: dict[str, dict[str, Task]] = {w: {} for w in WORKERS}  # worker -> claims

    @initialize(capacity=st.sampled_from([2, 1000]))
    def start(self, capacity: int) -> None:
        self.sched = Scheduler(
            clock=self.clock,
            store=self.store,
            dispatcher=InlineDispatcher(queues=INLINE),
            lease=LEASE,
            ready_capacity=capacity,
            max_lease_recoveries=MAX_RECOVERIES,
            keep_finished=None,  # the model keeps every task it saw; retention is tested apart
        )
        self.sched.start()

    @property
    def s(self) -> Scheduler:
        assert self.sched is not None
        return self.sched

    def _body(self, task_id: str, fail_times: int) -> str:
        now = self.clock.time()
        due = self.store.get(task_id).due
        if now < due:
            self.early.append((task_id, now, due))
        self.calls[task_id] += 1
        if self.calls[task_id] <= fail_times:
            raise _Boom(f"{task_id} fails (call {self.calls[task_id]})")
        return "ok"

    def _plain_body(self, key: str) -> str:
        tid = self.plain_id[key]
        now = self.clock.time()
        due = self.store.get(tid).due
        if now < due:
            self.early.append((tid, now, due))
        self.calls[tid] += 1
        return "ok"

    # -- app-side rules -----------------------------------------------------------------------
    @precondition(lambda self: len(self.ids) < MAX_TASKS)
    @rule(delay=delays)
    def schedule_plain(self, delay: float) -> None:
        """``schedule(f, arg, delay=d)`` and nothing else: the compact fast path."""
        key = f"p{len(self.ids)}"
        before = len(self.store._lite)
        job = self.s.schedule(self._plain_body, key, delay=delay)
        assert len(self.store._lite) == before + 1, "the fast path keeps a compact record"
        self.plain_id[key] = job.id
        self.plain.add(job.id)
        assert job.task.due == pytest.approx(self.clock.time() + delay, abs=1e-6)
        assert job.task.queue == "default"
        self.ids.append(job.id)
        self.queue_of[job.id] = "default"
        self.fail_times[job.id] = 0

    @precondition(lambda self: len(self.ids) < MAX_TASKS)
    @rule(
        delay=delays,
        queue=st.sampled_from(["inline", "inline", "ext"]),
        retry=retries,
        fail_times=st.integers(0, 3),
    )
    def schedule(self, delay: float, queue: str, retry: Retry, fail_times: int) -> None:
        tid = f"t{len(self.ids)}"
        job = self.s.schedule(
            self._body, tid, fail_times, id=tid, delay=delay, queue=queue, retry=retry
        )
        assert job.id == tid
        assert job.task.due == pytest.approx(self.clock.time() + delay, abs=1e-6)
        self.ids.append(tid)
        self.queue_of[tid] = queue
        self.fail_times[tid] = fail_times

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(self.ids))
        before = self.store.get(tid).state
        ok = self.s.cancel(tid)
        assert ok == (before in (P, R, TaskState.CANCELLED))
        after = self.store.get(tid)
        if ok:
            assert after.state is TaskState.CANCELLED
            assert tid not in self.s.ready_queue
            self.cancelled.add(tid)
        else:
            assert after.state is before

    @rule(dt=clock_steps)
    def advance(self, dt: float) -> None:
        self.clock.advance(dt)
        self._check_progress()

    @rule()
    def run_pending(self) -> None:
        self.s.run_pending()

    def _check_progress(self) -> None:
        """After an advance nothing due waits in the wheel, and inline work waits only for room."""
        now = self.clock.time()
        for t in self.store.tasks(state=P):
            assert t.due > now - SLACK, f"{t.id} due {t.due} still PENDING at {now}"
        stuck = [t.id for t in self.store.tasks(state=R) if t.queue in INLINE]
        if stuck:
            assert len(self.s.ready_queue) == self.s.ready_queue.capacity, stuck

    # -- simulated workers of the "ext" queue ----------------------------------------------------
    @precondition(lambda self: len(self.pulled) < len(WORKERS))
    @rule(owner=st.sampled_from(WORKERS))
    def pull(self, owner: str) -> None:
        if owner in self.pulled:
            return
        # "ext" is served by no dispatcher of this scheduler: its tasks wait as READY rows in
        # the store, where workers elsewhere find them
        taken = {p.id for p in self.pulled.values()}
        t = next((r for r in self.store.ready(limit=8, queues=["ext"]) if r.id not in taken), None)
        if t is not None:
            self.pulled[owner] = t

    @precondition(lambda self: bool(self.pulled))
    @rule(data=st.data())
    def claim_pulled(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(sorted(self.pulled)))
        snap = self.pulled.pop(owner)
        self._claim(owner, snap)

    @rule(owner=st.sampled_from(WORKERS))
    def foreign_claim(self, owner: str) -> None:
        """A claim that bypasses this scheduler's ready queue (another process on a shared store)."""
        rows = [t for t in self.store.ready(limit=100) if t.queue == "ext"]
        if rows:
            self._claim(owner, rows[0])

    def _claim(self, owner: str, snap: Task) -> None:
        now = self.clock.time()
        cur = self.store.get(snap.id)
        got = self.store.claim(
            snap.id, expected_version=snap.version, owner=owner, lease_expires=now + LEASE, now=now
        )
        if cur.state is R and cur.version == snap.version:
            assert got is not None
            assert now >= got.due, f"{got.id} claimed at {now}, due {got.due}"
            self.held[owner][got.id] = got
            self.s.runtime.started(got)  # what run_task does after a won claim (Engine protocol)
        else:
            assert got is None

    def _held(self) -> list[tuple[str, str]]:
        return sorted((w, i) for w, ts in self.held.items() for i in ts)

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        owner, tid = data.draw(st.sampled_from(self._held()))
        now = self.clock.time()
        cur = self.store.get(tid)
        ok = self.store.heartbeat(tid, owner=owner, lease_expires=now + LEASE, now=now)
        assert ok == (cur.state is RUN and cur.lease_owner == owner)

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data(), outcome=st.sampled_from(["ok", "ok", "error", "timeout", "vanish"]))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        owner, tid = data.draw(st.sampled_from(self._held()))
        claimed = self.held[owner].pop(tid)
        if outcome == "vanish":
            return  # the worker died: only the lease expiry brings the task back
        cur = self.store.get(tid)
        holds = cur.state is RUN and cur.lease_owner == owner
        if outcome == "ok":
            got = complete(self.s.runtime, claimed, owner, result="ok")
        elif outcome == "error":
            got = complete(self.s.runtime, claimed, owner, exc=_Boom("worker error"))
        else:
            got = complete(self.s.runtime, claimed, owner, timed_out=True)
        if not holds:
            assert got is None, "a late outcome was stored over another worker's run"
            assert self.store.get(tid) == cur
            return
        assert got is not None
        t = got.task
        if outcome == "ok":
            assert t.state is TaskState.SUCCEEDED
        elif claimed.attempts < claimed.retry.max_attempts:
            assert t.state is P
            assert t.due >= self.clock.time()
        else:
            assert t.state is (TaskState.FAILED if outcome == "error" else TaskState.TIMED_OUT)

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def history_is_legal(self) -> None:
        self.checker.check()

    @invariant()
    def never_early(self) -> None:
        assert not self.early, self.early

    @invariant()
    def nothing_lost(self) -> None:
        if self.sched is None:
            return
        ready = self.s.ready_queue
        pulled = {t.id for t in self.pulled.values()}
        for tid in self.ids:
            t = self.store.get(tid)
            if t.state in TERMINAL_STATES:
                assert tid not in self.s.runtime.trigger, f"terminal {tid} still in the wheel"
            elif t.state is P:
                assert tid in self.s.runtime.trigger, f"PENDING {tid} is in no wheel slot"
            elif t.state is R and t.queue == "ext":
                assert tid not in ready, f"READY {tid} of unserved queue 'ext' was queued"
            elif t.state is R:
                queued = ready._ids.get(tid)  # the snapshot a worker would pull
                fresh = queued is not None and queued.version == t.version
                assert fresh or tid in pulled or self.s.runtime.trigger.backlog, (
                    f"READY {tid} (v{t.version}) is neither queued (queued: {queued and queued.version}), "
                    "nor pulled by a worker, nor awaited by a refill"
                )
            else:
                assert t.state is RUN
                assert t.lease_owner in WORKERS, f"RUNNING {tid} with unknown owner {t.lease_owner}"
                holders = [w for w in WORKERS if tid in self.held[w] and w == t.lease_owner]
                if not holders:
                    # its worker vanished: the lease expiry must come back as a deadline
                    assert t.lease_expires is not None
                    deadline = self.clock.next_deadline()
                    assert deadline is not None
                    # one microsecond past the lease (durable stores keep microseconds)
                    assert deadline <= math.nextafter(t.lease_expires + 1e-6, math.inf)

    @invariant()
    def statistics_agree(self) -> None:
        if self.sched is None:
            return
        st_ = self.s.statistics()
        counts = Counter(t.state for t in self.store.tasks())
        assert st_.states == {s.value: n for s, n in counts.items()}
        assert st_.submitted == len(self.ids)
        assert st_.in_wheel == counts[P]
        assert st_.succeeded == counts[TaskState.SUCCEEDED]
        assert st_.failed == counts[TaskState.FAILED]
        assert st_.cancelled == counts[TaskState.CANCELLED]
        assert st_.timed_out >= counts[TaskState.TIMED_OUT]
        assert st_.started == sum(t.attempts for t in self.store.tasks())

    def teardown(self) -> None:
        if self.sched is None:
            return
        try:
            self._drain()
        finally:
            self.s.shutdown()

    def _drain(self) -> None:
        """Run everything to the end (workers finish what they hold) and check the outcomes."""
        for w, snap in sorted(self.pulled.items()):
            self._claim(w, snap)
        self.pulled.clear()
        for w in WORKERS:
            for claimed in self.held[w].values():
                complete(self.s.runtime, claimed, w, result="ok")
            self.held[w].clear()
        for _ in range(20):
            self.clock.advance(days=3)
            for t in self.store.ready(limit=10_000, queues=["ext"]):
                now = self.clock.time()
                got = self.store.claim(
                    t.id, expected_version=t.version, owner="w1", lease_expires=now + LEASE, now=now
                )
                if got is not None:
                    self.s.runtime.started(got)
                    complete(self.s.runtime, got, "w1", result="ok")
            self.checker.check()
            if all(self.store.get(i).state in TERMINAL_STATES for i in self.ids):
                break
        states = {i: self.store.get(i).state for i in self.ids}
        assert all(s in TERMINAL_STATES for s in states.values()), states
        assert not self.early, self.early
        for tid in self.ids:
            t = self.store.get(tid)
            if self.queue_of[tid] not in INLINE:
                continue
            # inline tasks run only in the dispatcher: their outcome follows from the script
            assert self.calls[tid] == t.attempts, (tid, self.calls[tid], t)
            if tid in self.cancelled:
                assert t.state is TaskState.CANCELLED
            elif self.fail_times[tid] < t.retry.max_attempts:
                assert t.state is TaskState.SUCCEEDED, t
                assert t.attempts == self.fail_times[tid] + 1
                assert t.result == "ok"
            else:
                assert t.state is TaskState.FAILED, t
                assert t.attempts == t.retry.max_attempts
                assert isinstance(t.result, _Boom)
        self.checker.check()


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = SETTINGS


def test_machines_see_every_kind_of_move() -> None:
    """The recording store sees each snapshot: a scripted run covers the whole state table."""
    clock = FakeClock()
    store = RecordingStore()
    checker = HistoryChecker(store.history)
    with Scheduler(
        clock=clock, store=store, dispatcher=InlineDispatcher(queues=("inline",)), lease=LEASE
    ) as sched:
        calls = Counter[str]()

        def flaky(key: str) -> None:
            calls[key] += 1
            if calls[key] == 1:
                raise _Boom(key)

        sched.schedule(flaky, "a", delay=1, queue="inline", retry=Retry(max_attempts=2, delay=1))
        sched.schedule(flaky, "b", delay=1, queue="inline")
        c = sched.schedule(_noop, delay=5, queue="inline")
        lost = sched.schedule(_noop, delay=0, queue="ext")
        clock.advance(2)
        c.cancel()
        t = next(iter(store.ready(limit=1, queues=["ext"])), None)
        assert t is not None
        assert store.claim(
            t.id,
            expected_version=t.version,
            owner="w1",
            lease_expires=clock.time() + LEASE,
            now=clock.time(),
        )
        clock.advance(LEASE + 1)  # w1 vanished: re-queued by the reaper
        assert lost.state is R
        checker.check()
    assert checker.moves[RUN, P] == 2  # one retry, one lease recovery
    assert checker.moves[RUN, TaskState.SUCCEEDED] == 1
    assert checker.moves[RUN, TaskState.FAILED] == 1
    assert checker.moves[P, TaskState.CANCELLED] == 1
