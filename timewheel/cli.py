"""The ``timewheel`` command line.

* ``timewheel demo``: a ~10 s self-contained run on the in-memory store.
* ``timewheel worker MODULE[:ATTR] --store URL``: trigger and run tasks from a shared store.
* ``timewheel inspect --store URL``: counts, lag, the load expected over the next hour, failures.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TextIO


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from timewheel import Retry, Scheduler, TaskState, ThreadPoolDispatcher

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
        f"timewheel demo: {count} one-shot tasks due over the next {span:.0f} s, "
        "a flaky task retried until it succeeds, and one that times out",
        file=out,
    )
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
            time.sleep(1.0)
            st = sched.statistics()
            done = sum(
                st.states.get(s.value, 0)
                for s in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.TIMED_OUT)
            )
            shown = "  ".join(f"{k}={v}" for k, v in sorted(st.states.items()))
            print(f"  t={time.monotonic() - t0:5.1f}s  {shown}", file=out)
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
        drained = time.monotonic() - b0
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
    return 0 if ok else 1


def _load(target: str) -> object:
    """Import ``module`` or ``module:attr`` (dotted attributes allowed)."""
    import importlib

    mod_name, _, attr = target.partition(":")
    sys.path.insert(0, ".")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise SystemExit(f"timewheel: cannot import {mod_name!r}: {e}") from None
    finally:
        sys.path.pop(0)
    obj: object = mod
    for part in filter(None, attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SystemExit(f"timewheel: {mod_name!r} has no attribute {attr!r}") from None
    return obj


def _worker(args: argparse.Namespace, out: TextIO) -> int:
    import signal

    from timewheel import Registry, Scheduler, ThreadPoolDispatcher
    from timewheel.stores import open_store

    target = _load(args.target)
    if callable(target) and not isinstance(target, (Registry, Scheduler)):
        target = target()
    queues = args.queues.split(",") if args.queues else None
    if isinstance(target, Scheduler):
        if args.store:
            raise SystemExit(
                "timewheel: the target is a Scheduler with its own store; drop --store, or point "
                "the target at a Registry or a module"
            )
        sched = target
    else:
        if not args.store:
            raise SystemExit("timewheel: --store URL is required (e.g. sqlite:///tasks.db)")
        store = open_store(args.store)
        if not store.durable:
            raise SystemExit(
                f"timewheel: {args.store!r} is not shared between processes; use sqlite:///PATH"
            )
        sched = Scheduler(
            store=store,
            dispatcher=ThreadPoolDispatcher(workers=args.concurrency, queues=queues),
        )
        if isinstance(target, Registry):
            sched.include(target)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with sched:
        print(
            f"timewheel worker: {sched.store!r}, {sched.dispatcher!r}; Ctrl-C or SIGTERM to stop",
            file=out,
            flush=True,
        )
        while not stop.wait(args.report or 3600):
            st = sched.statistics()
            print(
                f"  {st.succeeded} succeeded, {st.failed} failed, {st.retried} retried, "
                f"ready {st.ready_depth}",
                file=out,
                flush=True,
            )
        print("timewheel worker: stopping (in-flight tasks finish or are released)", file=out)
    return 0


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    from timewheel.stores import open_store

    store = open_store(args.store)
    now = time.time()
    try:
        counts = store.count_by_state()
        print(f"store: {store!r}", file=out)
        print("tasks by state:", file=out)
        if not counts:
            print("  (none)", file=out)
        for state, n in sorted(counts.items(), key=lambda kv: kv[0].value):
            print(f"  {state.value:<16} {n}", file=out)
        age = getattr(store, "oldest_ready_age", None)
        if age is not None:
            a = age(now)
            print(f"oldest READY task: {'none' if a is None else f'{a:.1f} s past due'}", file=out)
        hist = getattr(store, "due_histogram", None)
        if hist is not None:
            buckets = hist(now, horizon=args.horizon, bucket=args.bucket)
            total = sum(n for _, n in buckets)
            peak = max((n for _, n in buckets), default=0)
            print(
                f"expected load, next {args.horizon / 60:.0f} min in {args.bucket:.0f} s "
                f"buckets: {total} tasks, peak {peak}",
                file=out,
            )
            for start, n in buckets:
                if n:
                    bar = "#" * max(1, round(40 * n / peak)) if peak else ""
                    stamp = datetime.fromtimestamp(start, timezone.utc).strftime("%H:%M:%S")
                    print(f"  {stamp}Z {n:>8} {bar}", file=out)
        unres = getattr(store, "unresolvable", None)
        if unres is not None:
            for ref, n in unres().items():
                print(f"unresolvable function {ref!r}: {n} READY tasks wait for it", file=out)
        fails = getattr(store, "recent_failures", None)
        if fails is not None:
            latest = fails(args.failures)
            print(f"latest failures ({len(latest)}):", file=out)
            for t in latest:
                stamp = datetime.fromtimestamp(t.updated, timezone.utc).isoformat()
                print(f"  {stamp} {t.id} {t.state.value}: {t.error}", file=out)
    finally:
        store.close()
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``timewheel`` console script."""
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="timewheel", description="timewheel command line")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="a ~10 s self-contained run on the in-memory store")
    demo.add_argument("--tasks", type=int, default=3000, help="one-shot tasks (default 3000)")
    demo.add_argument("--seconds", type=float, default=8.0, help="spread of due times (default 8)")
    demo.add_argument("--workers", type=int, default=8, help="worker threads (default 8)")
    demo.add_argument("--seed", type=int, default=1, help="random seed")
    demo.add_argument("--burst", type=int, default=10_000, help="tasks due at once at the end")
    worker = sub.add_parser("worker", help="trigger and run tasks from a shared store")
    worker.add_argument(
        "target",
        help="MODULE or MODULE:ATTR to import: a Registry (its schedules are included), a "
        "Scheduler (run as is), or a module that defines and registers task functions",
    )
    worker.add_argument("--store", help="store URL, e.g. sqlite:///tasks.db")
    worker.add_argument("--queues", help="comma-separated queue names to serve (default: all)")
    worker.add_argument("--concurrency", type=int, default=8, help="worker threads (default 8)")
    worker.add_argument("--report", type=float, default=0, help="print progress every N s")
    inspect = sub.add_parser("inspect", help="counts, lag, upcoming load and failures of a store")
    inspect.add_argument("--store", required=True, help="store URL, e.g. sqlite:///tasks.db")
    inspect.add_argument("--horizon", type=float, default=3600, help="look-ahead seconds")
    inspect.add_argument("--bucket", type=float, default=60, help="bucket seconds")
    inspect.add_argument("--failures", type=int, default=10, help="latest failures to show")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args, out)
    if args.command == "worker":
        return _worker(args, out)
    if args.command == "inspect":
        return _inspect(args, out)
    parser.print_help(out)
    return 2


if __name__ == "__main__":
    sys.exit(main())
