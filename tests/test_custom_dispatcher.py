"""A third-party dispatcher built from public names only: the ``Engine`` join is enough."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

import timewheel as tw
from timewheel.dispatch import Engine, complete
from timewheel.task import Task
from timewheel.testing import FakeClock


class RecordingDispatcher:
    """Runs ready tasks in the thread that advances the clock, recording each step it takes."""

    queues: Sequence[str] | None = None

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.log: list[str] = []

    def start(self, engine: Engine) -> None:
        self.engine = engine

    def wakeup(self) -> None:
        self.log.append("wakeup")

    def run_ready(self) -> list[Task]:
        engine = self.engine
        assert engine is not None
        ran = []
        while (task := engine.ready_queue.pull_nowait(self.queues)) is not None:
            func = engine.resolve(task)
            claimed = engine.claim(task, "recorder")
            if claimed is None:
                continue
            engine.started(claimed)
            try:
                result = func(*claimed.args, **claimed.kwargs)
            except Exception as e:
                complete(engine, claimed, "recorder", exc=e)
            else:
                complete(engine, claimed, "recorder", result=result)
            self.log.append(f"ran {claimed.id}")
            ran.append(claimed)
        return ran

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> None:
        self.engine = None

    def beat(self) -> None:
        pass


def double(x: int) -> int:
    return 2 * x


def test_a_dispatcher_from_public_names_runs_tasks_with_retries_and_events() -> None:
    clock = FakeClock(datetime(2026, 5, 1, tzinfo=timezone.utc))
    dispatcher = RecordingDispatcher()
    assert isinstance(dispatcher, tw.Dispatcher)
    events: list[str] = []
    with tw.Scheduler(clock=clock, dispatcher=dispatcher) as sched:
        assert isinstance(dispatcher.engine, Engine)
        sched.add_listener(lambda e: events.append(f"{e.name} {e.task.id}"))
        job = sched.schedule(double, 21, delay=60, id="d")
        attempts = []

        def flaky() -> str:
            attempts.append(1)
            if len(attempts) < 2:
                raise ValueError("first try fails")
            return "ok"

        retried = sched.schedule(flaky, delay=30, id="f", retry=tw.Retry(max_attempts=2, delay=5))
        clock.advance(minutes=2)
        assert job.result(timeout=0) == 42
        assert retried.result(timeout=0) == "ok"
    assert "ran d" in dispatcher.log
    assert dispatcher.log.count("ran f") == 2
    assert events == [
        "submitted d",
        "submitted f",
        "started f",
        "retried f",
        "started f",
        "succeeded f",
        "started d",
        "succeeded d",
    ]


def test_the_engine_claims_a_batch_in_one_store_step() -> None:
    clock = FakeClock(datetime(2026, 5, 1, tzinfo=timezone.utc))
    dispatcher = RecordingDispatcher()
    with tw.Scheduler(clock=clock, dispatcher=dispatcher) as sched:
        for i in range(5):
            sched.schedule(double, i, delay=0, id=f"t{i}", priority=i % 2)
        sched.runtime.trigger.fire(clock.time())
        engine = dispatcher.engine
        assert engine is not None
        claimed = engine.claim_batch("batcher", 3, None)
        assert [t.id for t in claimed] == ["t1", "t3", "t0"], "priority first, then due"
        assert all(t.lease_owner == "batcher" for t in claimed)
