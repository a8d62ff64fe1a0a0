"""Dependencies between tasks: after=, when=, chain()."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

import timewheel as tw
from timewheel.testing import FakeClock

UTC = timezone.utc


@pytest.fixture
def env() -> Iterator[tuple[FakeClock, tw.Scheduler]]:
    clock = FakeClock(start=datetime(2026, 5, 1, tzinfo=UTC))
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        yield clock, sched


def boom() -> None:
    raise RuntimeError("upstream broke")


def test_dependent_runs_after_all_upstreams_and_reads_their_results(
    env: tuple[FakeClock, tw.Scheduler],
) -> None:
    clock, sched = env
    a = sched.schedule(lambda: 2, delay=10)
    b = sched.schedule(lambda: 3, delay=20)
    product: list[int] = []
    c = sched.schedule(lambda: product.append(a.result(0) * b.result(0)), after=[a, b])
    assert c.task.unmet == 2
    clock.advance(seconds=15)
    assert c.state is tw.TaskState.PENDING
    assert c.task.unmet == 1
    clock.advance(seconds=5)
    assert product == [6]
    assert c.done()


@pytest.mark.parametrize(
    ("when", "upstream_ok", "expected"),
    [
        ("all_success", [True, True], tw.TaskState.SUCCEEDED),
        ("all_success", [True, False], tw.TaskState.UPSTREAM_FAILED),
        ("all_done", [False, False], tw.TaskState.SUCCEEDED),
        ("any_failed", [True, False], tw.TaskState.SUCCEEDED),
        ("any_failed", [True, True], tw.TaskState.CANCELLED),
    ],
)
def test_when_conditions(
    env: tuple[FakeClock, tw.Scheduler], when: str, upstream_ok: list[bool], expected: tw.TaskState
) -> None:
    clock, sched = env
    ups = [
        sched.schedule((lambda: None) if ok else boom, delay=i + 1)
        for i, ok in enumerate(upstream_ok)
    ]
    ran: list[str] = []
    child = sched.schedule(ran.append, "child", after=ups, when=when)
    clock.advance(seconds=10)
    assert child.state is expected
    assert ran == (["child"] if expected is tw.TaskState.SUCCEEDED else [])


def test_failure_propagates_transitively_and_nothing_downstream_runs(
    env: tuple[FakeClock, tw.Scheduler],
) -> None:
    clock, sched = env
    events: list[tuple[str, str]] = []
    sched.add_listener(lambda e: events.append((e.name, e.task.id)), "upstream_failed")
    root = sched.schedule(boom, delay=1, id="root")
    mid = sched.schedule(print, after=[root], id="mid")
    leaf = sched.schedule(print, after=[mid], id="leaf")
    other = sched.schedule(lambda: "fine", delay=1, id="other")
    side = sched.schedule(lambda: "ran", after=[other], id="side")
    clock.advance(seconds=5)
    assert root.state is tw.TaskState.FAILED
    assert mid.state is tw.TaskState.UPSTREAM_FAILED
    assert leaf.state is tw.TaskState.UPSTREAM_FAILED
    assert side.result(0) == "ran"
    assert sorted(events) == [("upstream_failed", "leaf"), ("upstream_failed", "mid")]
    with pytest.raises(tw.TaskFailedError, match="upstream_failed"):
        leaf.result(0)


def test_cancelling_an_upstream_fails_its_dependents(env: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = env
    up = sched.schedule(print, delay=10)
    down = sched.schedule(print, after=[up])
    assert up.cancel()
    assert down.state is tw.TaskState.UPSTREAM_FAILED
    clock.advance(seconds=20)
    assert down.state is tw.TaskState.UPSTREAM_FAILED


def test_upstream_already_finished_counts_at_once(env: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = env
    up = sched.schedule(lambda: 1, delay=1)
    bad = sched.schedule(boom, delay=1)
    clock.advance(seconds=1)
    ok = sched.schedule(lambda: "ok", after=[up])
    failed = sched.schedule(print, after=[bad])
    clock.advance(0)
    assert ok.result(0) == "ok"
    assert failed.state is tw.TaskState.UPSTREAM_FAILED


def test_retries_keep_dependents_waiting(env: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = env
    calls: list[float] = []

    def flaky() -> str:
        calls.append(clock.time())
        if len(calls) < 2:
            raise ConnectionError("once")
        return "up"

    up = sched.schedule(flaky, delay=1, retry=tw.Retry(max_attempts=2, backoff="fixed", delay=5))
    down = sched.schedule(lambda: up.result(0) + "!", after=[up])
    clock.advance(seconds=3)
    assert down.state is tw.TaskState.PENDING
    clock.advance(seconds=5)
    assert down.result(0) == "up!"


def test_chain(env: tuple[FakeClock, tw.Scheduler]) -> None:
    clock, sched = env
    out: list[str] = []
    jobs = sched.chain(
        tw.step(out.append, "fetch", delay=5),
        tw.step(out.append, "parse"),
        lambda: out.append("store"),
    )
    assert [j.state for j in jobs] == [tw.TaskState.PENDING] * 3
    clock.advance(seconds=5)
    assert out == ["fetch", "parse", "store"]
    with pytest.raises(tw.InvalidScheduleError, match="at least one"):
        sched.chain()


def test_random_dag_on_a_thread_pool_runs_in_topological_order() -> None:
    """1,000 nodes, random edges to earlier nodes: no task starts before all of its upstream
    tasks succeeded, so the start order is a topological order."""
    rng = random.Random(7)
    n = 1_000
    parents = {i: rng.sample(range(i), k=min(i, rng.randint(0, 3))) for i in range(n)}
    lock = threading.Lock()
    seq = iter(range(10 * n))
    started: dict[int, int] = {}
    finished: dict[int, int] = {}

    def node(i: int) -> None:
        with lock:
            started[i] = next(seq)
        with lock:
            finished[i] = next(seq)

    with tw.Scheduler(dispatcher=tw.ThreadPoolDispatcher(workers=8)) as sched:
        jobs: dict[int, tw.Job] = {}
        order = list(range(n))
        for i in order:
            ups = [jobs[p] for p in parents[i]]
            jobs[i] = (
                sched.schedule(node, i, after=ups) if ups else sched.schedule(node, i, delay=0)
            )
        for job in jobs.values():
            job.result(timeout=60)
    assert len(started) == n
    for i, ps in parents.items():
        for p in ps:
            assert finished[p] < started[i], (p, i)
