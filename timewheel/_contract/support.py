"""What the contract checks share: the start instant, the function reference, task builders and
the small steps (promote, claim, finish, run in threads) the checks compose."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from timewheel.stores.base import Changed, Store
from timewheel.task import ScheduleRecord, Task, TaskState

__all__ = [
    "FUNC",
    "T0",
    "S",
    "expect",
    "finish_as",
    "ids_of",
    "in_threads",
    "make_ready",
    "make_running",
    "new_task",
    "noop",
    "schedule_record",
]

S = TaskState
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
"""The instant the checks start at (epoch seconds)."""
FUNC = "timewheel._contract:noop"
"""The function reference every task of the suite carries."""


def noop(*args: Any, **kwargs: Any) -> None:
    """The importable function the checks' tasks refer to. Does nothing."""


def new_task(task_id: str, due: float = T0, **kw: Any) -> Task:
    """A task of the suite: ``FUNC``, created ten seconds before ``T0``, due at *due*."""
    kw.setdefault("func", FUNC)
    kw.setdefault("created", T0 - 10)
    return Task(id=task_id, due=due, **kw)


def schedule_record(sid: str = "s", **kw: Any) -> ScheduleRecord:
    """A schedule of the suite: ``FUNC`` every minute, created at ``T0``."""
    kw.setdefault("func", FUNC)
    kw.setdefault("rule", {"kind": "every", "seconds": 60})
    kw.setdefault("options", {"queue": "default", "priority": 0})
    kw.setdefault("created", T0)
    kw.setdefault("updated", T0)
    return ScheduleRecord(id=sid, **kw)


def expect(exc: type[BaseException], fn: Callable[[], object], what: str) -> BaseException:
    """Call *fn* and return the exception of type *exc* it raises; fail if it raises none."""
    try:
        out = fn()
    except exc as e:
        return e
    raise AssertionError(f"{what}: expected {exc.__name__}, but it returned {out!r}")


def make_ready(store: Store, *ids: str, now: float = T0) -> list[Task]:
    """Promote the given (inserted, due) tasks to READY, those still PENDING (a durable store
    stores a task due by its ``created`` instant READY); assert they all moved. The READY
    snapshots, in the order of *ids*."""
    pending = [i for i in ids if store.get(i).state is S.PENDING]
    moved = {t.id: t for t in store.promote(pending, now)}
    assert sorted(moved) == sorted(pending), f"promote({pending}) moved {list(moved)}"
    out = [moved.get(i) or store.get(i) for i in ids]
    assert all(t.state is S.READY for t in out), f"not READY: {[t.id for t in out]}"
    return out


def make_running(store: Store, task_id: str, owner: str = "w1", lease: float = T0 + 30) -> Task:
    """Promote (if PENDING) and claim *task_id* for *owner*; assert the claim won."""
    t = store.get(task_id)
    if t.state is S.PENDING:
        make_ready(store, task_id, now=max(T0, t.due))
        t = store.get(task_id)
    c = store.claim(task_id, expected_version=t.version, owner=owner, lease_expires=lease, now=T0)
    assert c is not None, f"claim of READY task {task_id!r} at its version returned None"
    return c


def finish_as(store: Store, task_id: str, state: TaskState) -> Changed:
    """Run *task_id* (as owner ``w1``) and finish it in *state* at ``T0 + 5``."""
    make_running(store, task_id)
    ch = store.finish(task_id, owner="w1", state=state, now=T0 + 5)
    assert ch is not None
    return ch


def ids_of(tasks: Iterable[Task]) -> list[str]:
    """The ids of *tasks*, in order."""
    return [t.id for t in tasks]


def in_threads(work: Callable[[int], None], what: str, *, interleave: bool = False) -> None:
    """Run ``work(k)`` in four threads started together; re-raise (as an assertion) the first
    exception any of them raised. ``interleave`` makes the interpreter switch threads as often
    as it can while they run, so that races show up."""
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(k: int) -> None:
        try:
            start.wait()
            work(k)
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    interval = sys.getswitchinterval()
    if interleave:
        sys.setswitchinterval(1e-6)
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, f"{what} raised in a thread: {errors[0]!r}"
