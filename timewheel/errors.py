"""Exceptions raised by timewheel.

Every exception derives from :class:`TimewheelError` and also from the builtin that fits, so
callers may catch either::

    TimewheelError
    ├── InvalidScheduleError      (ValueError)     bad delay/at/cron/every, due time, option
    │   └── InvalidTypeError      (TypeError)      an option of the wrong type
    ├── StoreConfigError          (ValueError)     a malformed store URL or store option
    ├── DuplicateKeyError         (ValueError)     key/id already present
    ├── TaskNotFoundError         (LookupError)    no task/key with that id
    ├── InvalidTransitionError    (ValueError)     a state change the transition table forbids
    ├── VersionConflictError      (RuntimeError)   a compare-and-swap lost: someone else won
    ├── SchedulerStateError       (RuntimeError)   call not allowed in the scheduler's state
    │   └── InheritedAcrossForkError                a scheduler or queue copied into a fork() child
    ├── SerializationError        (TypeError)      function/arguments a durable store can't keep
    ├── JobCancelledError         (CancelledError) result() of a cancelled job
    ├── JobTimeoutError           (TimeoutError)   result(timeout=) ran out
    ├── TaskFailedError           (RuntimeError)   a failed task whose exception can't be rebuilt
    └── StoreError                (OSError)        the storage backend failed
        ├── StoreCorruptError                      the file is not a usable database
        └── SchemaVersionError                     the schema is newer than this code

Messages name the offending value, the state it met, and the way out.
"""

from __future__ import annotations

import concurrent.futures

__all__ = [
    "DuplicateKeyError",
    "InheritedAcrossForkError",
    "InvalidScheduleError",
    "InvalidTransitionError",
    "InvalidTypeError",
    "JobCancelledError",
    "JobTimeoutError",
    "SchedulerStateError",
    "SchemaVersionError",
    "SerializationError",
    "StoreConfigError",
    "StoreCorruptError",
    "StoreError",
    "TaskFailedError",
    "TaskNotFoundError",
    "TimewheelError",
    "VersionConflictError",
]


class TimewheelError(Exception):
    """Root of every exception timewheel raises on purpose."""


class InvalidScheduleError(TimewheelError, ValueError):
    """A schedule, due time or scheduling option is malformed or contradictory."""


class InvalidTypeError(InvalidScheduleError, TypeError):
    """A scheduling option has the wrong type (a string where seconds are expected, a bool ...).

    Both an :class:`InvalidScheduleError` and a ``TypeError``, so either ``except`` catches it.
    """


class StoreConfigError(TimewheelError, ValueError):
    """A store's configuration or URL is malformed (an unknown scheme, a bad option value)."""


class DuplicateKeyError(TimewheelError, ValueError):
    """A key (wheel) or task id (store) is already present."""


class TaskNotFoundError(TimewheelError, LookupError):
    """No task with the given id exists."""


class InvalidTransitionError(TimewheelError, ValueError):
    """The task state machine does not allow the requested change."""


class VersionConflictError(TimewheelError, RuntimeError):
    """A compare-and-swap on a task's version lost: another actor changed the task first."""


class SchedulerStateError(TimewheelError, RuntimeError):
    """The call is not allowed in the scheduler's current state (e.g. after shutdown)."""


class InheritedAcrossForkError(SchedulerStateError):
    """The object was copied into this process by ``fork()`` and cannot be used here.

    Raised by a :class:`~timewheel.Scheduler` with a memory store that was started before the
    fork (its threads are not in this process, and its tasks are the parent's), and by a
    memory-backed :class:`~timewheel.DelayQueue` that held items at the fork. The message names
    the parent process and the ways out; the parent's object keeps working.
    """


class SerializationError(TimewheelError, TypeError):
    """A function or its arguments cannot be kept by a durable store."""


class JobCancelledError(TimewheelError, concurrent.futures.CancelledError):
    """The job was cancelled before it produced a result."""


class JobTimeoutError(TimewheelError, TimeoutError):
    """Waiting for a job's result ran out of time; the job itself is unaffected."""


class TaskFailedError(TimewheelError, RuntimeError):
    """A task failed and its original exception is not available (e.g. read from a store)."""


class StoreError(TimewheelError, OSError):
    """The storage backend failed."""


class StoreCorruptError(StoreError):
    """The store's file or database is not a usable timewheel database."""


class SchemaVersionError(StoreError):
    """The stored schema is newer than this version of timewheel understands."""
