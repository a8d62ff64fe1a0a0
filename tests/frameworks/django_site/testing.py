"""The scheduler the example project's tests use: a FakeClock, tasks run in the advancing thread."""

from __future__ import annotations

from timewheel import InlineDispatcher, Scheduler
from timewheel.testing import FakeClock

CLOCK = FakeClock()


def scheduler() -> Scheduler:
    """Named by ``TIMEWHEEL_SCHEDULER`` in the test settings."""
    return Scheduler(clock=CLOCK, dispatcher=InlineDispatcher())
