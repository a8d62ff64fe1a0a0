"""``timewheel worker``: trigger and run the tasks of a shared store."""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from timewheel.cli.common import (
    USAGE,
    CommandError,
    OpenedStore,
    fail,
    inspection,
    judge,
    open_url,
    ready_by_function,
)
from timewheel.worker import is_worker_factory

if TYPE_CHECKING:
    from timewheel.recurring import Registry
    from timewheel.scheduler import Event, Scheduler

__all__ = ["EPILOG", "run"]


EPILOG = """\
TARGET is one of:
  MODULE                 a module that defines (and registers) task functions
  MODULE:REGISTRY        a timewheel.Registry: its recurring schedules are included
  MODULE:SCHEDULER       a timewheel.Scheduler, run as is (with its own store; no --store)
  MODULE:FACTORY         a function marked @timewheel.worker_factory, called with no
                         arguments, returning a Registry or a Scheduler
Anything else (a task function, a class, a value) is refused: the worker never calls task
functions itself.

Which stored functions run: registered names, and import paths into the package of the target
module (myapp for myapp.jobs:registry) or into a module given with --allow. Any other stored
reference ends its task FAILED without being imported (see docs/security.md).

Stopping: Ctrl-C or SIGTERM stops claiming and waits up to --grace seconds for running tasks
(still running then: released to READY for another worker); a second Ctrl-C or SIGTERM exits at
once (exit status 128 + the signal), and unfinished tasks run again once their lease expires.
"""


def _load(target: str) -> object:
    """Import ``module`` or ``module:attr`` (dotted attributes allowed), cwd first on sys.path."""
    import importlib

    mod_name, _, attr = target.partition(":")
    if not mod_name or (":" in target and not attr):
        fail(f"target {target!r} is not MODULE or MODULE:ATTR (e.g. myapp.jobs:registry)", USAGE)
    sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (mod_name == e.name or mod_name.startswith(e.name + ".")):
            fail(
                f"cannot import {mod_name!r}: no module named {e.name!r}; run the worker from "
                "your project's directory or add it to PYTHONPATH",
                USAGE,
            )
        traceback.print_exc()
        fail(f"importing {mod_name!r} failed: {e} (traceback above)")
    except Exception as e:
        traceback.print_exc()
        fail(f"importing {mod_name!r} failed: {type(e).__name__}: {e} (traceback above)")
    finally:
        sys.path.pop(0)
    obj: object = mod
    for part in filter(None, attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            fail(f"module {mod_name!r} has no attribute {attr!r}; check the name", USAGE)
    return obj


def _package_of(target: str) -> str:
    """The package of the (imported) target module: ``myapp`` for ``myapp.jobs:registry``; a
    package's own name for a package; the module itself for a top-level module."""
    name = target.partition(":")[0]
    package = getattr(sys.modules.get(name), "__package__", None)
    return package if isinstance(package, str) and package else name


def _describe(obj: object) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__qualname__}"
    if callable(obj):
        return f"the function {getattr(obj, '__qualname__', repr(obj))}"
    return f"a {type(obj).__name__}"


def _resolve_target(spec: str) -> Scheduler | Registry | None:
    """The worker's target: a Scheduler, a Registry, or None for a plain module of tasks."""
    import types

    from timewheel.recurring import Registry
    from timewheel.scheduler import Scheduler

    obj = _load(spec)
    if isinstance(obj, types.ModuleType):
        return None
    if isinstance(obj, (Scheduler, Registry)):
        return obj
    if is_worker_factory(obj):
        try:
            made = obj()
        except Exception as e:
            traceback.print_exc()
            fail(f"the worker factory {spec} raised {type(e).__name__}: {e} (traceback above)")
        if isinstance(made, (Scheduler, Registry)):
            return made
        fail(
            f"the worker factory {spec} returned {_describe(made)}; it must return a Scheduler "
            "or a Registry",
            USAGE,
        )
    raise CommandError(
        f"{spec} is {_describe(obj)}, not a Registry, a Scheduler or a function marked "
        "@timewheel.worker_factory; a worker never calls task functions itself: name the "
        f"module ({spec.partition(':')[0]}) or a Registry",
        USAGE,
    )


@dataclass
class _Tracker:
    """Tasks running in this worker, from the scheduler's events (id -> function, start)."""

    running: dict[str, tuple[str, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, ev: Event) -> None:
        with self.lock:
            if ev.name == "started":
                self.running[ev.task.id] = (ev.task.func_name, time.monotonic())
            else:
                self.running.pop(ev.task.id, None)

    def snapshot(self) -> list[tuple[str, str, float]]:
        """The running tasks, with how long each has run."""
        with self.lock:
            return self._listed()

    def snapshot_if_free(self) -> list[tuple[str, str, float]] | None:
        """:meth:`snapshot`, or ``None`` when the lock is taken: a signal handler must not wait
        on a lock that its own thread may hold."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return self._listed()
        finally:
            self.lock.release()

    def _listed(self) -> list[tuple[str, str, float]]:
        now = time.monotonic()
        return [(tid, fn, now - t0) for tid, (fn, t0) in self.running.items()]


class _Signals:
    """SIGTERM and SIGINT as the worker's main thread sees them.

    A Python signal handler runs in the main thread between two bytecodes, possibly while that
    thread holds a lock, so the handler takes none: it only notes the signal (and, for the
    second, exits). The main thread waits in ``select`` on the read end of a socket pair that
    ``signal.set_wakeup_fd`` writes a byte to for every signal, so it wakes at once.
    (``threading.Event.set()`` in the handler would deadlock when the signal lands while the
    main thread is inside ``Event.wait()`` holding the event's lock.)
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)

    def wait(self, timeout: float) -> bool:
        """Wait up to *timeout* seconds for a signal; whether one has come."""
        deadline = time.monotonic() + timeout
        while not self.received:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([self._reader], [], [], left)
            try:
                while self._reader.recv(512):
                    pass
            except BlockingIOError:
                pass
        return True

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_fd)
        self._reader.close()
        self._writer.close()


def _listing(tasks: list[tuple[str, str, float]], limit: int = 10) -> str:
    shown = ", ".join(f"{tid} ({fn}, running {age:.1f} s)" for tid, fn, age in tasks[:limit])
    more = len(tasks) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def _report(sched: Scheduler, tracker: _Tracker, started: float, out: TextIO) -> None:
    from timewheel.task import TaskState

    st = sched.statistics()
    store = sched.store
    counts = store.count_by_state()
    ready = counts.get(TaskState.READY, 0)
    inspect = inspection(store)
    age = inspect.oldest_ready_age(sched.clock.time()) if inspect is not None else None
    oldest = f" (oldest {age:.1f} s past due)" if age else ""
    print(
        f"  [{time.monotonic() - started:.0f} s] this worker: {st.succeeded} succeeded, "
        f"{st.failed} failed, {st.retried} retried, {len(tracker.snapshot())} running; store: "
        f"{ready} ready{oldest}, {counts.get(TaskState.PENDING, 0)} pending, "
        f"{counts.get(TaskState.RUNNING, 0)} running",
        file=out,
        flush=True,
    )
    if not ready:
        return
    by_func, _ = ready_by_function(store, 10_000)
    for ref, dues in sorted(by_func.items()):
        verdict = judge(ref, sched.runtime.allowlist)
        if verdict.refused is not None:
            print(
                f"  {len(dues)} READY tasks call {ref}, which this worker's allowlist refuses; "
                f"they end FAILED when claimed ({verdict.refused})",
                file=out,
                flush=True,
            )
        elif verdict.import_problem is not None:
            print(
                f"  {len(dues)} READY tasks call {ref}, which this worker cannot import; they "
                f"wait for a worker that can ({verdict.import_problem})",
                file=out,
                flush=True,
            )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run a worker on the target and store *args* name until Ctrl-C or SIGTERM."""
    from timewheel.dispatch import ThreadPoolDispatcher
    from timewheel.recurring import Registry
    from timewheel.scheduler import Scheduler

    target = _resolve_target(args.target)
    # the package of the target module, and what --allow adds (docs/security.md)
    allowed = [_package_of(args.target), *(m for group in args.allow or () for m in group)]
    opened: OpenedStore | None = None
    if isinstance(target, Scheduler):
        if args.store:
            fail(
                f"{args.target} gives a Scheduler with its own store; drop --store, or point the "
                "target at a Registry or a module",
                USAGE,
            )
        sched = target
        sched.runtime.allow(allowed)
    else:
        if not args.store:
            fail("--store URL is required (e.g. --store sqlite:///tasks.db)", USAGE)
        opened = open_url(args.store, create=args.create)
        if not opened.store.durable:
            opened.close()
            fail(
                f"{args.store!r} is not shared between processes; a worker needs a durable "
                "store such as sqlite:///PATH",
                USAGE,
            )
        sched = Scheduler(
            store=opened.store,
            dispatcher=ThreadPoolDispatcher(workers=args.concurrency, queues=args.queues),
            allow=allowed,
        )
        if isinstance(target, Registry):
            sched.include(target)
    tracker = _Tracker()
    sched.add_listener(tracker)
    signals = _Signals()
    lease = sched.lease

    def on_signal(signum: int, frame: object) -> None:
        signals.received.append(signum)
        if len(signals.received) == 1:
            return  # the main thread wakes from signals.wait()
        unfinished = tracker.snapshot_if_free()
        rerun = f"keep their lease and run again once it expires (within {lease:g} s)"
        if unfinished is None:
            what = f"unfinished tasks {rerun}"
        elif unfinished:
            what = f"{len(unfinished)} unfinished task(s) ({_listing(unfinished)}) {rerun}"
        else:
            what = "no task was running"
        # os.write: the main thread may be inside print() when the signal arrives
        os.write(2, f"timewheel worker: forced exit; {what}\n".encode())
        os._exit(128 + signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    try:
        sched.start()
        print(
            f"timewheel worker: {sched.store!r}, {sched.dispatcher!r}; Ctrl-C or SIGTERM to stop "
            f"(waits up to {args.grace:g} s for running tasks), twice to stop at once",
            file=out,
            flush=True,
        )
        allowlist = sched.runtime.allowlist
        print(
            "timewheel worker: runs any function (its store is not shared)"
            if allowlist.unrestricted
            else "timewheel worker: runs registered names and the functions of "
            f"{', '.join(allowlist.modules) or 'no module'} (--allow MODULES adds more)",
            file=out,
            flush=True,
        )
        while not signals.wait(args.report or 3600.0):
            if args.report:
                _report(sched, tracker, started, out)
        running = tracker.snapshot()
        if running:
            print(
                f"timewheel worker: stopping; waiting up to {args.grace:g} s for "
                f"{len(running)} running task(s): {_listing(running)}; press Ctrl-C again to "
                "exit at once",
                file=out,
                flush=True,
            )
        else:
            print("timewheel worker: stopping; no task is running", file=out, flush=True)
        sched.shutdown(wait=True, timeout=args.grace)
        left = tracker.snapshot()
        if left:
            print(
                f"timewheel worker: stopped; the grace period ended with {len(left)} task(s) "
                f"still running ({_listing(left)}): released to READY, another worker runs "
                "them again",
                file=out,
                flush=True,
            )
        else:
            print("timewheel worker: stopped", file=out, flush=True)
    finally:
        sched.shutdown(wait=False)
        if opened is not None:
            opened.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
        signals.close()
    return 0
