"""asyncio: :class:`AsyncScheduler` and the pieces it joins to the core. See ``docs/async.md``."""

from __future__ import annotations

from timewheel.aio.dispatch import AsyncDispatcher
from timewheel.aio.jobs import AsyncJob
from timewheel.aio.runner import DirectRunner, StoreRunner, ThreadRunner
from timewheel.aio.scheduler import AsyncScheduler

__all__ = [
    "AsyncDispatcher",
    "AsyncJob",
    "AsyncScheduler",
    "DirectRunner",
    "StoreRunner",
    "ThreadRunner",
]
