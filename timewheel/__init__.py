"""timewheel: an embeddable, in-process task scheduler built on a hierarchical timing wheel."""

from __future__ import annotations

from timewheel import testing as testing  # tw.testing.FakeClock without another import
from timewheel.aio import AsyncJob, AsyncScheduler
from timewheel.clock import Clock, SystemClock
from timewheel.context import current_task
from timewheel.default import chain, cron, default_scheduler, every, schedule, schedule_many
from timewheel.delayqueue import (
    DelayQueue,
    DelayQueueStatistics,
    DelayToken,
    QueueShutDownError,
)
from timewheel.dispatch import (
    Dispatcher,
    Engine,
    InlineDispatcher,
    NullDispatcher,
    ThreadPoolDispatcher,
)
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    InvalidTransitionError,
    InvalidTypeError,
    JobCancelledError,
    JobTimeoutError,
    SchedulerStateError,
    SchemaVersionError,
    SerializationError,
    StoreConfigError,
    StoreCorruptError,
    StoreError,
    TaskFailedError,
    TaskNotFoundError,
    TimewheelError,
    VersionConflictError,
)
from timewheel.events import Event
from timewheel.herds import HerdReport
from timewheel.jobs import Job, Step, TaskFunction, step
from timewheel.recurring import Registry, Schedule
from timewheel.rules import CronRule, IntervalRule, Misfire, Overlap
from timewheel.runtime import SchedulerStatistics
from timewheel.scheduler import Scheduler
from timewheel.stores import MemoryStore, Store
from timewheel.task import Retry, Task, TaskState
from timewheel.version import __version__
from timewheel.wheel import TimingWheel
from timewheel.worker import worker_factory

__all__ = [
    "AsyncJob",
    "AsyncScheduler",
    "Clock",
    "CronRule",
    "DelayQueue",
    "DelayQueueStatistics",
    "DelayToken",
    "Dispatcher",
    "DuplicateKeyError",
    "Engine",
    "Event",
    "HerdReport",
    "InlineDispatcher",
    "IntervalRule",
    "InvalidScheduleError",
    "InvalidTransitionError",
    "InvalidTypeError",
    "Job",
    "JobCancelledError",
    "JobTimeoutError",
    "MemoryStore",
    "Misfire",
    "NullDispatcher",
    "Overlap",
    "QueueShutDownError",
    "Registry",
    "Retry",
    "Schedule",
    "Scheduler",
    "SchedulerStateError",
    "SchedulerStatistics",
    "SchemaVersionError",
    "SerializationError",
    "Step",
    "Store",
    "StoreConfigError",
    "StoreCorruptError",
    "StoreError",
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
    "chain",
    "cron",
    "current_task",
    "default_scheduler",
    "every",
    "schedule",
    "schedule_many",
    "step",
    "worker_factory",
]
