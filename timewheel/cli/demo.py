"""``timewheel demo``: a self-contained run on the in-memory store."""

from __future__ import annotations

import argparse
import random
import threading
import time
from typing import TextIO

from timewheel.cli.common import RUNTIME

__all__ = ["run"]


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the demo *args* describe, reporting on *out*; 0 when every task ended as expected."""
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
