"""The ``timewheel`` command line.

* ``timewheel demo``: a ~10 s self-contained run on the in-memory store (``--quick``: ~2 s).
* ``timewheel worker MODULE[:ATTR] --store URL``: trigger and run tasks from a shared store.
* ``timewheel inspect --store URL``: counts, overdue work, missed slots, failures and the load
  expected over the next hour (``--json`` for scripts).

Errors a user can fix print one line, ``timewheel: <problem>; <fix>``, on stderr: status 2 for a
wrong command line (bad option values, an unknown store URL, a target that cannot be a worker),
1 for a problem met while running (a missing, read-only or damaged store). :func:`main` returns
the status of a successful run and raises ``SystemExit`` with the status otherwise, like
``argparse``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn, TextIO
from urllib.parse import unquote, urlsplit

from timewheel.stores.base import SupportsInspection
from timewheel.version import __version__
from timewheel.worker import is_worker_factory

if TYPE_CHECKING:
    from timewheel.recurring import Registry
    from timewheel.refs import Allowlist
    from timewheel.scheduler import Event, Scheduler
    from timewheel.stores.base import Store

__all__ = ["CommandError", "main", "version"]


USAGE = 2
"""Exit status of a wrong command line (argparse's convention)."""
RUNTIME = 1
"""Exit status of a problem met while running."""

_MAX_BUCKETS = 10_000  # --horizon / --bucket: a histogram longer than this is a mistake
_SCAN_LIMIT = 50_000  # tasks read to group READY work by function
_OVERDUE_SLACK = 5.0  # a PENDING task this late means nothing triggers the store
_HERD_EXAMINED = 10_000  # a herd's instances read to name the schedules behind it


class CommandError(SystemExit):
    """A problem the user can fix; ``str()`` is the message and ``code`` the exit status.

    :func:`main` prints the message on stderr before raising, so a console script that lets it
    propagate exits with the status and no traceback.
    """

    def __init__(self, message: str, status: int = RUNTIME) -> None:
        super().__init__(message)
        self.code = status


def _fail(message: str, status: int = RUNTIME) -> NoReturn:
    raise CommandError(message, status)


def _inspection(store: Store) -> SupportsInspection | None:
    return store if isinstance(store, SupportsInspection) else None


# -- argument types ------------------------------------------------------------------------------
def _number(text: str, kind: Callable[[str], float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (got {text})")
    return value


def _count(text: str) -> int:
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more (got {text})")
    return value


def _positive_seconds(text: str) -> float:
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 (got {text})")
    return value


def _seconds(text: str) -> float:
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more (got {text})")
    return value


def _queues(text: str) -> list[str]:
    names = [q.strip() for q in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty queue name; write e.g. mail,billing"
        )
    return names


def _modules(text: str) -> list[str]:
    from timewheel.errors import TimewheelError
    from timewheel.refs import Allowlist

    names = [m.strip() for m in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty module name; write e.g. myapp.jobs,myapp.billing"
        )
    try:
        Allowlist(names)
    except TimewheelError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return names


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``timewheel worker: <problem>; see ... --help``."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}; see '{self.prog} --help'", file=sys.stderr)
        raise CommandError(message, USAGE)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the layout of descriptions and epilogs, and shows each option's default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and default not in (None, argparse.SUPPRESS)
            and action.option_strings
            and action.nargs != 0  # a flag: its help says what it does
        ):
            text += " (default: %(default)s)"
        return text


# -- version -------------------------------------------------------------------------------------
DISTRIBUTION = "pytimewheel"
"""The name timewheel is published under on PyPI (``pip install pytimewheel``)."""


def version() -> str:
    """The installed distribution's version, or the package's own when run from a source tree."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(DISTRIBUTION)
    except PackageNotFoundError:
        return f"{__version__} (not installed; from the source tree)"


# -- demo ----------------------------------------------------------------------------------------
def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from timewheel.dispatch import ThreadPoolDispatcher
    from timewheel.scheduler import Scheduler
    from timewheel.task import Retry, TaskState

    if args.quick:
        args.tasks, args.seconds, args.burst = 300, 1.0, 1_000
    count: int = args.tasks
    span: float = args.seconds
    rng = random.Random(args.seed)
    attempts = {"flaky": 0}
    lock = threading.Lock()

    def work(n: int) -> int:
        return n * n

    def flaky() -> str:
        with lock:
            attempts["flaky"] += 1
            n = attempts["flaky"]
        if n < 3:
            raise ConnectionError(f"payment gateway unavailable (attempt {n})")
        return f"charged on attempt {n}"

    def stuck() -> None:
        time.sleep(span + 1.0)  # overruns its timeout; abandoned, its worker replaced

    print(
        f"timewheel demo: {count} one-shot tasks due over the next {span:g} s, "
        "a flaky task retried until it succeeds, and one that times out",
        file=out,
    )
    report_every = 0.5 if span < 3 else 1.0
    with Scheduler(dispatcher=ThreadPoolDispatcher(workers=args.workers)) as sched:
        t0 = time.monotonic()
        for i in range(count):
            sched.schedule(work, i, delay=0.5 + rng.uniform(0.0, span))  # due after scheduling
        flaky_job = sched.schedule(
            flaky, delay=0.5, retry=Retry(max_attempts=5, backoff="exponential", delay=0.5)
        )
        stuck_job = sched.schedule(stuck, delay=1.0, timeout=1.0)
        print(f"  scheduled {count + 2} tasks in {time.monotonic() - t0:.3f} s", file=out)
        total = count + 2
        while True:
            time.sleep(report_every)
            st = sched.statistics()
            done = sum(
                st.states.get(s.value, 0)
                for s in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.TIMED_OUT)
            )
            shown = "  ".join(f"{k}={v}" for k, v in sorted(st.states.items()))
            print(f"  t={time.monotonic() - t0:5.1f}s  {shown}", file=out, flush=True)
            if done >= total or time.monotonic() - t0 > span + 10:
                break
        print(f"  flaky task: {flaky_job.result(timeout=10)!r}", file=out)
        print(f"  stuck task: {stuck_job.state.value} ({stuck_job.task.error})", file=out)
        # a burst due at one instant: how fast the pool drains what the wheel hands it
        timed = sched.statistics()  # lateness of the tasks spread over time, before the burst
        burst = args.burst
        before = timed.succeeded
        b0 = time.monotonic()
        for i in range(burst):
            sched.schedule(work, i, delay=0)
        while sched.statistics().succeeded < before + burst and time.monotonic() - b0 < 60:
            time.sleep(0.01)
        drained = max(time.monotonic() - b0, 1e-9)
        st = sched.statistics()
        print(
            f"  burst: {burst} tasks due at once, scheduled and drained in {drained:.2f} s "
            f"({burst / drained:,.0f} tasks/s)",
            file=out,
        )

        def ms(v: float | None) -> str:
            return "n/a" if v is None else f"{v * 1000:.2f} ms"

        print(
            f"done: {st.succeeded} succeeded, {st.failed} failed, {st.retried} retried, "
            f"{st.timed_out} timed out in {st.uptime:.1f} s; burst throughput "
            f"{burst / drained:,.0f} tasks/s; lateness of the spread tasks p50 "
            f"{ms(timed.lateness_p50)}, p99 {ms(timed.lateness_p99)}, max {ms(timed.lateness_max)}",
            file=out,
        )
        ok = st.succeeded == count + 1 + burst and stuck_job.state is TaskState.TIMED_OUT
        sched.shutdown(wait=False)
    return 0 if ok else RUNTIME


# -- opening stores ------------------------------------------------------------------------------
def _sqlite_path(url: str) -> str | None:
    """The file an ``sqlite://`` URL names, or None for other URLs (``open_store`` judges them)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc:
        return None
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    return os.path.abspath(path) if path else None


def _check_exists(url: str, path: str, *, create_hint: bool) -> None:
    """Refuse a store file that is not there: a mistyped path must not become a new store."""
    if os.path.exists(path):
        return
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        _fail(
            f"no store at {path!r} ({url}): the directory {parent!r} does not exist; check the "
            "path (sqlite:///relative.db is relative to the working directory, "
            "sqlite:////absolute/path.db has four slashes)"
        )
    hint = ", or pass --create to start an empty store there" if create_hint else ""
    _fail(
        f"no store at {path!r} ({url}); check the path (sqlite:///relative.db is relative to "
        f"the working directory {os.getcwd()!r}){hint}"
    )


@dataclass
class _Opened:
    store: Store
    url: str
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        self.store.close()
        for fn in self.cleanup:
            fn()


def _open(url: str, *, create: bool = False, read_only_ok: bool = False) -> _Opened:
    """Open the store *url* names, refusing a missing file unless *create*; with *read_only_ok*
    (``inspect``), read-only, so a store the user may only read can be inspected."""
    from timewheel.errors import StoreConfigError, TimewheelError
    from timewheel.stores import open_store

    path = _sqlite_path(url)
    options: dict[str, bool] = {}
    if path is not None:
        if not create:
            _check_exists(url, path, create_hint=not read_only_ok)
        options = {"create": create, "read_only": read_only_ok}
    elif urlsplit(url).scheme == "postgresql":
        # a mistyped schema must not become a new store either: `migrate` or --create makes one
        options = {"create": create, "read_only": read_only_ok}
    try:
        store = open_store(url, **options)
    except StoreConfigError as e:
        _fail(f"{e}", USAGE)
    except TimewheelError as e:
        _fail(f"{e}")
    return _Opened(store, url)


# -- migrate -------------------------------------------------------------------------------------
def _migrate(args: argparse.Namespace, out: TextIO) -> int:
    """Create the store *args.store* names, or bring its schema to this version."""
    opened = _open(args.store, create=True)
    opened.close()
    print(f"store {opened.store!r} is at the current schema", file=out)
    return 0


# -- worker --------------------------------------------------------------------------------------
def _load(target: str) -> object:
    """Import ``module`` or ``module:attr`` (dotted attributes allowed), cwd first on sys.path."""
    import importlib

    mod_name, _, attr = target.partition(":")
    if not mod_name or (":" in target and not attr):
        _fail(f"target {target!r} is not MODULE or MODULE:ATTR (e.g. myapp.jobs:registry)", USAGE)
    sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (mod_name == e.name or mod_name.startswith(e.name + ".")):
            _fail(
                f"cannot import {mod_name!r}: no module named {e.name!r}; run the worker from "
                "your project's directory or add it to PYTHONPATH",
                USAGE,
            )
        traceback.print_exc()
        _fail(f"importing {mod_name!r} failed: {e} (traceback above)")
    except Exception as e:
        traceback.print_exc()
        _fail(f"importing {mod_name!r} failed: {type(e).__name__}: {e} (traceback above)")
    finally:
        sys.path.pop(0)
    obj: object = mod
    for part in filter(None, attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            _fail(f"module {mod_name!r} has no attribute {attr!r}; check the name", USAGE)
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
            _fail(f"the worker factory {spec} raised {type(e).__name__}: {e} (traceback above)")
        if isinstance(made, (Scheduler, Registry)):
            return made
        _fail(
            f"the worker factory {spec} returned {_describe(made)}; it must return a Scheduler "
            "or a Registry",
            USAGE,
        )
    _fail(
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
        now = time.monotonic()
        with self.lock:
            return [(tid, fn, now - t0) for tid, (fn, t0) in self.running.items()]


def _listing(tasks: list[tuple[str, str, float]], limit: int = 10) -> str:
    shown = ", ".join(f"{tid} ({fn}, running {age:.1f} s)" for tid, fn, age in tasks[:limit])
    more = len(tasks) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def _ready_by_function(
    store: Store, limit: int = _SCAN_LIMIT
) -> tuple[dict[str, list[float]], bool]:
    """Due times of READY tasks grouped by function (earliest first), and whether *limit* hit."""
    from timewheel.task import TaskState

    tasks = store.tasks(state=TaskState.READY, limit=limit)
    out: dict[str, list[float]] = {}
    for t in tasks:
        out.setdefault(t.func_name, []).append(t.due)
    return out, len(tasks) >= limit


@dataclass(frozen=True)
class _Verdict:
    """What a worker does with a stored function reference."""

    refused: str | None = None  # why no worker (with the allowlist given) runs it
    import_problem: str | None = None  # allowed, but it does not resolve in this process
    checked: bool = True  # False: its module is outside the allowlist given, so not imported


def _judge(ref: str, allowlist: Allowlist | None, *, imports: bool = True) -> _Verdict:
    """Judge *ref* as a worker with *allowlist* would (``None``: no allowlist known, so only the
    rules every allowlist applies), importing only modules the allowlist allows."""
    from timewheel import refs

    problem = refs.reference_problem(ref)
    if problem is None and allowlist is not None:
        problem = allowlist.problem(ref)
    if problem is not None:
        return _Verdict(refused=problem)
    if not imports:
        return _Verdict(checked=False)
    sys.path.insert(0, os.getcwd())
    try:
        if allowlist is not None:
            allowlist.resolve(ref)
        else:
            refs.resolve_ref(ref)  # never imports a module no allowlist of this process allows
    except refs.ReferenceNotAllowedError as e:
        if allowlist is None:
            return _Verdict(checked=False)
        return _Verdict(refused=str(e))  # the object found is not defined in an allowed module
    except refs.UnresolvableRefError as e:
        return _Verdict(import_problem=str(e))
    except Exception as e:  # importing the module ran its code, which raised
        return _Verdict(import_problem=f"importing it raised {type(e).__name__}: {e}")
    finally:
        sys.path.pop(0)
    return _Verdict()


def _report(sched: Scheduler, tracker: _Tracker, started: float, out: TextIO) -> None:
    from timewheel.task import TaskState

    st = sched.statistics()
    store = sched.store
    counts = store.count_by_state()
    ready = counts.get(TaskState.READY, 0)
    inspect = _inspection(store)
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
    by_func, _ = _ready_by_function(store, 10_000)
    for ref, dues in sorted(by_func.items()):
        verdict = _judge(ref, sched.runtime.allowlist)
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


def _worker(args: argparse.Namespace, out: TextIO) -> int:
    from timewheel.dispatch import ThreadPoolDispatcher
    from timewheel.recurring import Registry
    from timewheel.scheduler import Scheduler

    target = _resolve_target(args.target)
    # the package of the target module, and what --allow adds (docs/security.md)
    allowed = [_package_of(args.target), *(m for group in args.allow or () for m in group)]
    opened: _Opened | None = None
    if isinstance(target, Scheduler):
        if args.store:
            _fail(
                f"{args.target} gives a Scheduler with its own store; drop --store, or point the "
                "target at a Registry or a module",
                USAGE,
            )
        sched = target
        sched.runtime.allow(allowed)
    else:
        if not args.store:
            _fail("--store URL is required (e.g. --store sqlite:///tasks.db)", USAGE)
        opened = _open(args.store, create=args.create)
        if not opened.store.durable:
            opened.close()
            _fail(
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
    stop = threading.Event()
    signals: list[int] = []
    lease = sched.lease

    def on_signal(signum: int, frame: object) -> None:
        signals.append(signum)
        if len(signals) == 1:
            stop.set()
            return
        unfinished = tracker.snapshot()
        what = (
            f"{len(unfinished)} unfinished task(s) ({_listing(unfinished)}) keep their lease and "
            f"run again once it expires (within {lease:g} s)"
            if unfinished
            else "no task was running"
        )
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
        while not stop.wait(args.report or 3600.0):
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
    return 0


# -- inspect -------------------------------------------------------------------------------------
def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _missed_slots(store: Store, now: float) -> list[dict[str, Any]]:
    """Recurring schedules whose pending instance is overdue: slots no scheduler triggered."""
    from timewheel.rules import rule_from_spec
    from timewheel.task import TaskState

    out: list[dict[str, Any]] = []
    for rec in store.list_schedules():
        if rec.paused:
            continue
        pending = store.tasks(state=TaskState.PENDING, schedule_id=rec.id, limit=1)
        if not pending or pending[0].due > now - _OVERDUE_SLACK:
            continue
        due = pending[0].due
        try:
            rule = rule_from_spec(rec.rule)
        except Exception:  # a rule this version cannot read: report the instance alone
            out.append({"schedule": rec.id, "rule": dict(rec.rule), "due": due, "missed": 1})
            continue
        missed, t, capped = 1, due, False
        while (t_next := rule.next_after(t)) is not None and t_next <= now:
            missed, t = missed + 1, t_next
            if missed >= 10_000:
                capped = True
                break
        out.append(
            {
                "schedule": rec.id,
                "rule": rule.describe(),
                "due": due,
                "missed": missed,
                "missed_is_lower_bound": capped,
            }
        )
    return out


def _herd_behind(
    store: Store,
    buckets: list[tuple[float, int]],
    start: float,
    width: float,
    overdue: list[tuple[str, float, str | None]],
) -> dict[str, Any]:
    """The schedules behind a herd bucket and whether a scheduler pre-warmed it."""
    from timewheel.recurring import stored_herd

    before = len(overdue) + sum(n for s, n in buckets if s < start) + 1_000
    seen = stored_herd(store, start, start + width, before=before, limit=_HERD_EXAMINED)
    who = seen.schedules
    return {
        "rules": [[text, n] for text, n in who.rules],
        "schedules": list(who.schedules),
        "instances": who.total,
        "instances_examined": who.examined,
        "one_shot": seen.one_shot,
        "prewarm_checked": seen.checked,
        "prewarmed": seen.prewarmed,
    }


def _refused(store: Store, allowlist: Allowlist | None) -> list[dict[str, Any]]:
    """Stored references of waiting tasks and schedules that no worker runs (with *allowlist*:
    no worker with that allowlist), judged on their text: nothing is imported."""
    from timewheel import refs
    from timewheel.task import TaskState

    waiting = (TaskState.PENDING, TaskState.READY)
    tasks: dict[str, int] = {}
    for t in store.tasks(state=waiting, limit=_SCAN_LIMIT):
        tasks[t.func_name] = tasks.get(t.func_name, 0) + 1
    schedules: dict[str, int] = {}
    for rec in store.list_schedules():
        ref = rec.func if isinstance(rec.func, str) else refs.func_ref(rec.func)
        schedules[ref] = schedules.get(ref, 0) + 1
    out = []
    for ref in sorted(tasks.keys() | schedules.keys()):
        problem = refs.reference_problem(ref)
        if problem is None and allowlist is not None:
            problem = allowlist.problem(ref)
        if problem is not None:
            out.append(
                {
                    "function": ref,
                    "tasks": tasks.get(ref, 0),
                    "schedules": schedules.get(ref, 0),
                    "reason": problem,
                }
            )
    return out


def _collect(opened: _Opened, args: argparse.Namespace, now: float) -> dict[str, Any]:
    """Everything ``inspect`` shows, as plain data (also the ``--json`` document)."""
    from timewheel.refs import Allowlist, permit_imports
    from timewheel.report import load_report
    from timewheel.task import TaskState

    allowlist = Allowlist(m for group in args.allow for m in group) if args.allow else None
    if allowlist is not None:  # as in a worker: stored Retry types of these modules resolve
        permit_imports(allowlist.modules)
    store = opened.store
    inspect = _inspection(store)
    counts = store.count_by_state()
    data: dict[str, Any] = {
        "store": repr(store),
        "now": now,
        "counts": {s.value: n for s, n in sorted(counts.items(), key=lambda kv: kv[0].value)},
    }
    overdue = store.due_before(now - _OVERDUE_SLACK, limit=_SCAN_LIMIT)
    data["overdue_pending"] = {
        "count": len(overdue),
        "count_is_lower_bound": len(overdue) >= _SCAN_LIMIT,
        "oldest_seconds": now - overdue[0][1] if overdue else None,
    }
    by_func, capped = _ready_by_function(store)
    functions = []
    for ref, dues in sorted(by_func.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        verdict = _judge(ref, allowlist, imports=args.imports)
        functions.append(
            {
                "function": ref,
                "count": len(dues),
                "oldest_seconds": max(0.0, now - dues[0]),
                "refused": verdict.refused,
                "import_problem": verdict.import_problem,
                "import_checked": verdict.checked and verdict.refused is None,
            }
        )
    data["ready"] = {
        "count": counts.get(TaskState.READY, 0),
        "oldest_seconds": inspect.oldest_ready_age(now) if inspect is not None else None,
        "by_function": functions,
        "examined_all": not capped,
    }
    data["refused"] = _refused(store, allowlist)
    data["allow"] = None if allowlist is None else list(allowlist.modules)
    data["unresolvable"] = dict(inspect.unresolvable()) if inspect is not None else {}
    data["missed_slots"] = _missed_slots(store, now)
    if inspect is not None:
        load = load_report(inspect, now, horizon=args.horizon, bucket=args.bucket)
        herd = load["herd"]
        if herd is not None:
            buckets = [(start, n) for start, n in load["buckets"]]
            herd.update(_herd_behind(store, buckets, herd["start"], args.bucket, overdue))
        data["load"] = load
        data["failures"] = [
            {
                "id": t.id,
                "state": t.state.value,
                "function": t.func_name,
                "attempts": t.attempts,
                "updated": t.updated,
                "error": t.error,
            }
            for t in inspect.recent_failures(args.failures)
        ]
    else:
        data["load"] = None
        data["failures"] = None
    return data


def _print_report(data: dict[str, Any], out: TextIO) -> None:
    print(f"store: {data['store']} (opened read-only: inspect changes nothing)", file=out)
    print("tasks by state:", file=out)
    if not data["counts"]:
        print("  (none)", file=out)
    for state, n in data["counts"].items():
        print(f"  {state:<16} {n}", file=out)

    overdue = data["overdue_pending"]
    if overdue["count"]:
        more = "at least " if overdue["count_is_lower_bound"] else ""
        print(
            f"overdue: {more}{overdue['count']} PENDING tasks past due, the oldest by "
            f"{overdue['oldest_seconds']:.1f} s; no scheduler is triggering this store: start "
            "a worker (timewheel worker) or a scheduler on it",
            file=out,
        )
    ready = data["ready"]
    age = ready["oldest_seconds"]
    print(
        f"oldest READY task: {'none' if age is None else f'{age:.1f} s past due'}"
        + (f" ({ready['count']} READY waiting for a worker)" if ready["count"] else ""),
        file=out,
    )
    unchecked = False
    for f in ready["by_function"][:20]:
        if f["refused"]:
            flag = f": no worker runs it ({f['refused']})"
        elif f["import_problem"]:
            flag = f": cannot be imported here ({f['import_problem']})"
        else:
            flag = ""
            unchecked = unchecked or not f["import_checked"]
        print(
            f"  {f['count']:>8} READY {f['function']}, oldest {f['oldest_seconds']:.1f} s{flag}",
            file=out,
        )
    if unchecked:
        print(
            "  (import paths outside --allow were not imported to check them: pass --allow "
            "with the modules your workers allow)",
            file=out,
        )
    for r in data["refused"]:
        print(
            f"refused function {r['function']!r}: {r['tasks']} waiting task(s), "
            f"{r['schedules']} schedule(s); no worker runs it (a worker that claims one ends it "
            f"FAILED without importing it): {r['reason']}",
            file=out,
        )
    for ref, n in data["unresolvable"].items():
        print(f"unresolvable function {ref!r}: {n} READY tasks wait for it", file=out)
    for m in data["missed_slots"]:
        more = "+" if m.get("missed_is_lower_bound") else ""
        print(
            f"missed: schedule {m['schedule']!r} ({m['rule']}): {m['missed']}{more} slot(s) "
            f"since {_iso(m['due'])} not triggered; start a worker or a scheduler on this store "
            "(its misfire policy decides what runs)",
            file=out,
        )

    load = data["load"]
    if load is None:
        print("(this store offers no load histogram or failure list)", file=out)
        return
    print(
        f"expected load, next {load['horizon'] / 60:.0f} min in {load['bucket']:.0f} s "
        f"buckets: {load['total']} tasks, peak {load['peak']}",
        file=out,
    )
    peak = load["peak"]
    for start, n in load["buckets"]:
        if n:
            bar = "#" * max(1, round(40 * n / peak))
            stamp = datetime.fromtimestamp(start, timezone.utc).strftime("%H:%M:%S")
            print(f"  {stamp}Z {n:>8} {bar}", file=out)
    herd = load["herd"]
    if herd is not None:
        print(
            f"herd warning: {herd['count']} tasks due in the {load['bucket']:g} s from "
            f"{_iso(herd['start'])} ({herd['times_average']:.0f}x the average); spread them "
            "(jitter=, or a random delay) or have enough workers ready",
            file=out,
        )
        _print_herd(herd, out)
    failures = data["failures"]
    print(f"latest failures ({len(failures)}):", file=out)
    for t in failures:
        print(f"  {_iso(t['updated'])} {t['id']} {t['state']}: {t['error']}", file=out)


def _print_herd(herd: dict[str, Any], out: TextIO) -> None:
    sampled = herd["instances_examined"] < herd["instances"]
    about = "about " if sampled else ""
    for text, n in herd["rules"][:5]:
        print(f"  {about}{n} instances of {text}", file=out)
    if len(herd["rules"]) > 5:
        print(f"  ... and {len(herd['rules']) - 5} more rules", file=out)
    if herd["one_shot"]:
        print(f"  {herd['one_shot']} one-shot tasks", file=out)
    if herd["schedules"]:
        more = herd["instances"] - len(herd["schedules"])
        names = ", ".join(herd["schedules"]) + (f" and {more} more" if more > 0 else "")
        print(f"  schedules: {names}", file=out)
    checked = herd["prewarm_checked"]
    if checked:
        done = herd["prewarmed"]
        state = (
            "a running scheduler pre-warmed them (next instances already stored)"
            if done == checked
            else "not pre-warmed yet (a scheduler does it in the minutes before)"
            if done == 0
            else "pre-warming under way"
        )
        print(
            f"  pre-warming: {done} of {checked} schedules checked have their next instance "
            f"stored ahead: {state}",
            file=out,
        )


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    from timewheel.errors import TimewheelError

    if args.horizon / args.bucket > _MAX_BUCKETS:
        _fail(
            f"--horizon {args.horizon:g} / --bucket {args.bucket:g} makes "
            f"{math.ceil(args.horizon / args.bucket)} buckets, more than {_MAX_BUCKETS}; "
            "use wider buckets",
            USAGE,
        )
    opened = _open(args.store, read_only_ok=True)
    try:
        data = _collect(opened, args, time.time())
    except TimewheelError as e:
        _fail(f"{e}")
    finally:
        opened.close()
    if args.json:
        json.dump(data, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        _print_report(data, out)
    return 0


# -- dashboard -----------------------------------------------------------------------------------
def _dashboard(args: argparse.Namespace, out: TextIO) -> int:
    try:
        import uvicorn

        from timewheel.dashboard import create_app
    except ImportError as e:
        _fail(f"the dashboard needs its extra: pip install 'pytimewheel[dashboard]' ({e})")
    opened = _open(args.store, read_only_ok=args.read_only)
    try:
        app = create_app(
            opened.store,
            token=os.environ.get("TIMEWHEEL_DASHBOARD_TOKEN") or None,
            read_only=args.read_only,
            show_arguments=args.show_arguments,
        )
        print(f"dashboard of {opened.url} on http://{args.host}:{args.port}/", file=out)
        if not args.read_only and not os.environ.get("TIMEWHEEL_DASHBOARD_TOKEN"):
            print(f"write token: {app.state.token}", file=out)
        out.flush()
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        opened.close()
    return 0


# -- the parser ----------------------------------------------------------------------------------
_WORKER_EPILOG = """\
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

_INSPECT_EPILOG = """\
Shows tasks by state; PENDING tasks past due (nothing triggers the store); READY tasks waiting
for a worker, by function, with those this process cannot import (only modules inside --allow
are imported); stored functions no worker runs (refused by every allowlist, or by --allow);
recurring slots no scheduler triggered; the load per bucket over the horizon, with a warning for a thundering herd; the
latest failures with their errors. A store this user can only read is inspected from a
snapshot. Nothing is created: a missing store is an error.
"""


def _parser() -> _Parser:
    parser = _Parser(
        prog="timewheel",
        description="timewheel: an embeddable task scheduler. Run a subcommand with --help "
        "for its options; without a subcommand this help is printed (exit status 2).",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"timewheel {version()}")
    sub = parser.add_subparsers(
        dest="command", metavar="{demo,worker,inspect,migrate}", parser_class=_Parser
    )

    demo = sub.add_parser(
        "demo", help="a ~10 s self-contained run on the in-memory store", formatter_class=_Formatter
    )
    demo.add_argument("--tasks", type=_count, default=3000, help="one-shot tasks spread in time")
    demo.add_argument(
        "--seconds", type=_positive_seconds, default=8.0, help="spread of their due times"
    )
    demo.add_argument("--workers", type=_positive_int, default=8, help="worker threads")
    demo.add_argument("--seed", type=int, default=1, help="random seed")
    demo.add_argument("--burst", type=_count, default=10_000, help="tasks due at once at the end")
    demo.add_argument(
        "--quick",
        action="store_true",
        help="a ~2 s run (300 tasks over 1 s, a burst of 1,000); overrides --tasks, --seconds "
        "and --burst",
    )

    worker = sub.add_parser(
        "worker",
        help="trigger and run tasks from a shared store",
        description="Trigger and run the tasks of a shared store (several workers may share one).",
        epilog=_WORKER_EPILOG,
        formatter_class=_Formatter,
    )
    worker.add_argument(
        "target", metavar="TARGET", help="MODULE or MODULE:ATTR to import (see below)"
    )
    worker.add_argument(
        "--store",
        metavar="URL",
        help="store URL, e.g. sqlite:///tasks.db; required unless TARGET gives a Scheduler",
    )
    worker.add_argument(
        "--create",
        action="store_true",
        help="create the store if it does not exist (without it, a missing store is an error)",
    )
    worker.add_argument(
        "--queues",
        type=_queues,
        metavar="NAMES",
        help="comma-separated queue names to serve (default: all)",
    )
    worker.add_argument(
        "--allow",
        type=_modules,
        action="append",
        metavar="MODULES",
        help="comma-separated modules or packages whose functions run from stored import paths, "
        "besides registered names and the target module's package (repeatable)",
    )
    worker.add_argument(
        "--concurrency", type=_positive_int, default=8, metavar="N", help="worker threads"
    )
    worker.add_argument(
        "--grace",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="seconds to wait for running tasks after Ctrl-C or SIGTERM",
    )
    worker.add_argument(
        "--report",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="print progress every SECONDS (0: never)",
    )

    inspect = sub.add_parser(
        "inspect",
        help="counts, overdue work, failures and upcoming load of a store",
        description="What an operator needs to know about a store, read without changing it.",
        epilog=_INSPECT_EPILOG,
        formatter_class=_Formatter,
    )
    required = inspect.add_argument_group("required arguments")
    required.add_argument(
        "--store", metavar="URL", required=True, help="store URL, e.g. sqlite:///tasks.db"
    )
    inspect.add_argument(
        "--horizon",
        type=_positive_seconds,
        default=3600.0,
        metavar="SECONDS",
        help="look-ahead for the load histogram",
    )
    inspect.add_argument(
        "--bucket",
        type=_positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="width of a histogram bucket",
    )
    inspect.add_argument(
        "--failures", type=_count, default=10, metavar="N", help="latest failures to show"
    )
    inspect.add_argument(
        "--allow",
        type=_modules,
        action="append",
        metavar="MODULES",
        help="judge stored functions as a worker allowing these modules would (comma-separated, "
        "repeatable; give what your workers allow); only these modules are imported",
    )
    inspect.add_argument(
        "--no-imports",
        dest="imports",
        action="store_false",
        help="do not import the modules of waiting tasks' functions (inside --allow) to check "
        "that they resolve",
    )
    inspect.add_argument("--json", action="store_true", help="print one JSON document")

    migrate = sub.add_parser(
        "migrate",
        help="create a store, or upgrade its schema to this version",
        description="Create the store URL names, or migrate its schema to this timewheel's "
        "version (a schema newer than this timewheel is refused and left untouched).",
        formatter_class=_Formatter,
    )
    migrate_required = migrate.add_argument_group("required arguments")
    migrate_required.add_argument(
        "--store",
        metavar="URL",
        required=True,
        help="store URL, e.g. postgresql://user@host/db?schema=app1",
    )
    dashboard = sub.add_parser(
        "dashboard",
        help="serve a web dashboard of a store (the dashboard extra)",
        description="Serve the web dashboard of a store. Writes need the token printed at start "
        "(or set TIMEWHEEL_DASHBOARD_TOKEN).",
        formatter_class=_Formatter,
    )
    required = dashboard.add_argument_group("required arguments")
    required.add_argument(
        "--store", metavar="URL", required=True, help="store URL, e.g. sqlite:///tasks.db"
    )
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on")
    dashboard.add_argument("--port", type=_positive_int, default=8000, metavar="N", help="port")
    dashboard.add_argument(
        "--read-only", action="store_true", help="open the store read-only and offer no actions"
    )
    dashboard.add_argument(
        "--show-arguments", action="store_true", help="show task arguments and results"
    )
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``timewheel`` console script.

    Returns the exit status of a run that completed; a wrong command line or a problem met while
    running prints one line on stderr and raises :class:`CommandError` (a ``SystemExit``) with
    status 2 or 1. Without a subcommand it prints the help and returns 2.
    """
    out = out or sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
        "demo": _demo,
        "worker": _worker,
        "inspect": _inspect,
        "migrate": _migrate,
        "dashboard": _dashboard,
    }
    if args.command is None:
        parser.print_help(out)
        return USAGE
    from timewheel.errors import TimewheelError

    try:
        return commands[args.command](args, out)
    except CommandError as e:
        print(f"timewheel: {e}", file=sys.stderr)
        raise
    except TimewheelError as e:  # met while running: the store's messages name the fix
        print(f"timewheel: {e}", file=sys.stderr)
        raise CommandError(str(e), RUNTIME) from None
    except BrokenPipeError:
        # the reader went away (`timewheel inspect ... | head -1`): stop quietly, as other
        # command-line tools do; stdout goes to /dev/null so the interpreter's final flush
        # cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass  # not a real file descriptor (a StringIO in tests)
        finally:
            os.close(devnull)
        return RUNTIME
    except KeyboardInterrupt:
        print("timewheel: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
