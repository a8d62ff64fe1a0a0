"""The public surface is curated: pinned here so additions are deliberate."""

from __future__ import annotations

import timewheel

EXPECTED = {
    "AsyncJob",
    "AsyncScheduler",
    "current_task",
    "DelayQueue",
    "DelayQueueStatistics",
    "DelayToken",
    "QueueShutDownError",
    "Clock",
    "CronRule",
    "IntervalRule",
    "Misfire",
    "Overlap",
    "HerdReport",
    "Registry",
    "Schedule",
    "Step",
    "chain",
    "cron",
    "every",
    "step",
    "Dispatcher",
    "Engine",
    "DuplicateKeyError",
    "Event",
    "InlineDispatcher",
    "InvalidScheduleError",
    "InvalidTypeError",
    "InvalidTransitionError",
    "Job",
    "JobCancelledError",
    "JobTimeoutError",
    "MemoryStore",
    "NullDispatcher",
    "Retry",
    "Scheduler",
    "SchedulerStateError",
    "SchedulerStatistics",
    "SchemaVersionError",
    "SerializationError",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreConfigError",
    "SystemClock",
    "Task",
    "TaskFailedError",
    "TaskFunction",
    "TaskNotFoundError",
    "TaskState",
    "ThreadPoolDispatcher",
    "TimewheelError",
    "TimingWheel",
    "VersionConflictError",
    "__version__",
    "default_scheduler",
    "schedule",
    "schedule_many",
    "worker_factory",
}


def test_all_is_the_curated_surface() -> None:
    assert set(timewheel.__all__) == EXPECTED
    assert len(timewheel.__all__) == len(set(timewheel.__all__))
    for name in timewheel.__all__:
        assert hasattr(timewheel, name), name


def test_every_error_derives_from_the_root_and_a_builtin() -> None:
    errors = [getattr(timewheel, n) for n in EXPECTED if n.endswith("Error")]
    for e in errors:
        assert issubclass(e, timewheel.TimewheelError), e
        if e in (
            timewheel.TimewheelError,
            timewheel.StoreCorruptError,
            timewheel.SchemaVersionError,
        ):
            continue  # the root, and refinements of StoreError (an OSError)
        others = [b for b in e.__bases__ if b is not timewheel.TimewheelError]
        assert others, e
        assert all(issubclass(b, Exception) for b in others), e


def test_testing_module_is_reachable() -> None:
    assert timewheel.testing.FakeClock is not None
