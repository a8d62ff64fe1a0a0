"""Next-fire cost: timewheel CronRule (kept iterator) vs croniter rebuilt per call vs cronsim.

Run: ``python benchmarks/bench_rules.py [--calls N]``. Prints microseconds per next-fire call,
each measured as a chain (every call asks for the fire after the previous one), which is what
the scheduler does for a recurring schedule.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from croniter import croniter
from cronsim import CronSim

from timewheel.rules import CronRule, IntervalRule

START = datetime(2026, 3, 1, tzinfo=timezone.utc).timestamp()
CASES = [
    ("* * * * *", "UTC"),
    ("*/5 * * * *", "UTC"),
    ("0 0 * * *", "UTC"),
    ("0 0 * * *", "America/New_York"),
    ("30 2 * * *", "America/New_York"),
    ("*/15 9-17 * * 1-5", "Europe/London"),
    ("0 9 * * 1#2", "Europe/Berlin"),
    ("* * * * * */10", "UTC"),
]


def per_call(fn: Callable[[], object], calls: int) -> float:
    began = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - began) / calls * 1e6


def bench_ours(expr: str, tz: str, calls: int) -> float:
    rule = CronRule(expr, tz)
    state = [START]

    def step() -> None:
        nxt = rule.next_after(state[0])
        assert nxt is not None
        state[0] = nxt

    step()  # build the iterator outside the timing
    return per_call(step, calls)


def bench_ours_reseek(expr: str, tz: str, calls: int) -> float:
    rule = CronRule(expr, tz)
    ts = [START + i * 7777.7 for i in range(calls)]
    it = iter(ts[::-1])  # descending: every call re-seeks

    def step() -> None:
        rule.next_after(next(it))

    return per_call(step, calls)


def bench_croniter_rebuilt(expr: str, tz: str, calls: int) -> float:
    zone = ZoneInfo(tz)
    state = [datetime.fromtimestamp(START, zone)]

    def step() -> None:
        state[0] = croniter(expr, state[0]).get_next(datetime)

    return per_call(step, calls)


def bench_croniter_kept(expr: str, tz: str, calls: int) -> float:
    it = croniter(expr, datetime.fromtimestamp(START, ZoneInfo(tz)))
    return per_call(it.get_next, calls)


def bench_cronsim(expr: str, tz: str, calls: int) -> float:
    fields = expr.split()
    if len(fields) == 6:
        expr = " ".join([fields[5], *fields[:5]])  # cronsim: seconds first
    it = CronSim(expr, datetime.fromtimestamp(START, ZoneInfo(tz)))
    return per_call(lambda: next(it), calls)


def bench_interval(calls: int) -> float:
    rule = IntervalRule(300, start=START)
    state = [START]

    def step() -> None:
        nxt = rule.next_after(state[0])
        assert nxt is not None
        state[0] = nxt

    return per_call(step, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    n = args.calls
    header = (
        f"{'expression':<22} {'zone':<17} {'ours kept':>10} {'ours reseek':>12} "
        f"{'croniter kept':>14} {'croniter rebuilt':>17} {'cronsim':>9}   (us per next-fire)"
    )
    print(header)
    print("-" * len(header))
    for expr, tz in CASES:
        row = [
            bench_ours(expr, tz, n),
            bench_ours_reseek(expr, tz, min(n, 1000)),
            bench_croniter_kept(expr, tz, n),
            bench_croniter_rebuilt(expr, tz, n),
            bench_cronsim(expr, tz, n),
        ]
        print(
            f"{expr:<22} {tz:<17} {row[0]:>10.1f} {row[1]:>12.1f} {row[2]:>14.1f} "
            f"{row[3]:>17.1f} {row[4]:>9.1f}"
        )
    print(f"\nIntervalRule(300).next_after: {bench_interval(n * 10):.2f} us per call")
    print("croniter kept = croniter's own DST handling (fires fixed-time jobs twice on fall-back).")


if __name__ == "__main__":
    main()
