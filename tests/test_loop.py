"""The real-time trigger loop on its own: it steps, sleeps towards the step's deadline, re-plans
when woken, and stops. Synchronisation is by events; timeouts are only hang guards."""

from __future__ import annotations

import threading

from timewheel.clock import SystemClock
from timewheel.loop import TriggerLoop

GUARD = 30.0  # seconds: a hang guard, never a timing assertion


class Steps:
    def __init__(self, deadline_after: float | None) -> None:
        self.deadline_after = deadline_after
        self.calls = 0
        self.called = threading.Event()
        self.clock = SystemClock()

    def __call__(self, now: float) -> float | None:
        self.calls += 1
        self.called.set()
        return None if self.deadline_after is None else now + self.deadline_after


def test_the_loop_steps_at_start_and_again_when_woken_for_an_earlier_deadline() -> None:
    steps = Steps(deadline_after=3600.0)  # the step asks for an hour's sleep
    loop = TriggerLoop(steps, steps.clock, max_sleep=3600.0)
    loop.start()
    try:
        assert steps.called.wait(GUARD)
        first = steps.calls
        steps.called.clear()
        loop.wake(steps.clock.time() + 7200.0)  # later than planned: no re-plan needed
        loop.wake(steps.clock.time())  # earlier: step again now
        assert steps.called.wait(GUARD)
        assert steps.calls > first
    finally:
        loop.stop(timeout=GUARD)


def test_a_failing_step_does_not_stop_the_loop() -> None:
    calls: list[float] = []
    again = threading.Event()

    def step(now: float) -> float | None:
        calls.append(now)
        if len(calls) == 1:
            raise RuntimeError("a store hiccup")
        again.set()
        return now + 3600.0

    loop = TriggerLoop(step, SystemClock(), max_sleep=3600.0)
    loop.start()
    try:
        assert again.wait(GUARD), "the loop stepped again after the failure"
    finally:
        loop.stop(timeout=GUARD)


def test_stop_ends_the_thread() -> None:
    steps = Steps(deadline_after=None)
    loop = TriggerLoop(steps, steps.clock, max_sleep=3600.0)
    loop.start()
    assert steps.called.wait(GUARD)
    loop.stop(timeout=GUARD)
    names = [t.name for t in threading.enumerate()]
    assert "timewheel-trigger" not in names
