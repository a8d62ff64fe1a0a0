"""How the asyncio scheduler reaches its store without blocking the event loop.

Every store step of the core (a trigger pass, a claim, an outcome, a lookup) is a plain function
call on a synchronous :class:`~timewheel.stores.base.Store`. A :class:`StoreRunner` decides where
that call runs:

- :class:`DirectRunner` calls it on the loop's thread: for the memory store, whose calls take
  microseconds and never wait on I/O.
- :class:`ThreadRunner` calls it in a small pool of its own threads (one by default) and awaits the
  result, so the loop keeps running while SQLite writes. One thread also serialises the process's
  writes, which is what SQLite wants.

This is the seam a PostgreSQL store plugs into: a store built on psycopg's synchronous connections
runs behind a ``ThreadRunner(threads=N)`` (one connection per thread), and a store built on
psycopg's ``AsyncConnection`` provides its own runner, whose :meth:`StoreRunner.run` awaits the
database instead of a thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, Protocol, TypeVar, runtime_checkable

__all__ = ["DirectRunner", "StoreRunner", "ThreadRunner"]

T = TypeVar("T")
P = ParamSpec("P")


@runtime_checkable
class StoreRunner(Protocol):
    """**Protocol:** where the asyncio scheduler's store steps run (see the module docstring)."""

    @property
    def blocking(self) -> bool:
        """True when a store call would block the loop, so :meth:`run` takes it elsewhere; the
        scheduler then never calls the store from the loop's thread on its hot paths."""
        ...

    @property
    def busy(self) -> bool:
        """True while a call is in flight."""
        ...

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` (which calls the store) and return its result."""
        ...

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` now and wait for it in the calling thread: for the few
        setup steps made from plain functions (decorators), never on a hot path."""
        ...

    async def idle(self) -> None:
        """Return once no call is in flight."""
        ...

    def close(self) -> None:
        """Finish the calls in flight and release the threads. Idempotent."""
        ...


class DirectRunner:
    """Runs store calls on the calling (loop) thread: for stores that never block."""

    blocking = False
    busy = False

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return fn(*args, **kwargs)

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return fn(*args, **kwargs)

    async def idle(self) -> None:
        """Nothing is ever in flight."""

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return "DirectRunner()"


class ThreadRunner:
    """Runs store calls in *threads* threads of its own (default one), awaiting each result.

    Args:
        threads: how many calls may run at once. SQLite: 1 (its writes are serial anyway).
    """

    blocking = True

    def __init__(self, threads: int = 1) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1 (got {threads!r})")
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="timewheel-store")
        self._in_flight: set[asyncio.Future[Any]] = set()

    @property
    def busy(self) -> bool:
        return bool(self._in_flight)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = functools.partial(fn, *args, **kwargs) if kwargs else functools.partial(fn, *args)
        fut = asyncio.get_running_loop().run_in_executor(self._pool, call)
        self._in_flight.add(fut)
        fut.add_done_callback(self._in_flight.discard)
        return await fut

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        done: Future[T] = self._pool.submit(fn, *args, **kwargs)
        return done.result()

    async def idle(self) -> None:
        while self._in_flight:
            await asyncio.wait(set(self._in_flight))

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __repr__(self) -> str:
        return f"ThreadRunner(threads={self.threads})"
