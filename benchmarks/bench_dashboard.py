"""Server time of the dashboard's pages on a SQLite store of 1,000,000 PENDING tasks.

Run: ``python benchmarks/bench_dashboard.py [--tasks N] [--ended N] [--path FILE]``

The store is built once and kept at ``--path`` for later runs: *tasks* PENDING tasks 0.1 s apart
from a fixed instant (so every window the overview counts is full), one in ten in the queue
``mail`` and the others in the default queue, and *ended* tasks that ran to an end within the
hour before it (one in ten failed, each started 0 to 99 s late and ran for 1 s; the overview
reads them all for its throughput and start lateness). Each page is requested once to warm up,
then three times through Starlette's TestClient, and the best time is reported; then the same
for the store's queries behind the overview's counts and lateness.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from starlette.testclient import TestClient

from timewheel.dashboard import create_app
from timewheel.stores import SQLiteStore
from timewheel.task import Task, TaskState
from timewheel.testing import FakeClock

NOW = 1_800_000_000.0
PAGES = (
    "/",
    "/load",
    "/failures",
    "/schedules",
    "/task/t500000",
    "/search?q=bench:noop",
    "/metrics",
)


def fill(path: str, n: int, ended: int) -> float:
    """Insert *n* PENDING tasks in batches and run *ended* others to an end; the seconds."""
    store = SQLiteStore(path, durability="fast")
    started = time.perf_counter()
    batch = 50_000
    for first in range(0, n, batch):
        store.insert_many(
            [
                Task(
                    id=f"t{i}",
                    func="bench:noop",
                    due=NOW + i * 0.1,
                    queue="mail" if i % 10 == 0 else "default",
                    created=NOW,
                )
                for i in range(first, min(n, first + batch))
            ]
        )
    step = 3600.0 / max(ended, 1)
    for first in range(0, ended, 1_000):
        ids = [f"e{i}" for i in range(first, min(ended, first + 1_000))]
        end = [NOW - 3600 + step * (i + 1) for i in range(first, first + len(ids))]
        store.insert_many(
            [
                Task(id=i, func="bench:noop", due=e - 1 - k % 100, created=e - 200)
                for k, (i, e) in enumerate(zip(ids, end, strict=True))
            ]
        )
        store.promote(ids, NOW)
        for k, (i, e) in enumerate(zip(ids, end, strict=True)):
            claimed = store.claim(i, expected_version=1, owner="w", lease_expires=e, now=e - 1)
            assert claimed is not None
            state = TaskState.FAILED if (first + k) % 10 == 0 else TaskState.SUCCEEDED
            store.finish(i, owner="w", state=state, now=e, error="bench")
    store.close()
    return time.perf_counter() - started


def main() -> None:
    """Build the store if needed and print each page's best server time."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--ended", type=int, default=100_000)
    parser.add_argument("--path", default="dashboard-bench.db")
    args = parser.parse_args()
    if not os.path.exists(args.path):
        took = fill(args.path, args.tasks, args.ended)
        print(f"filled {args.tasks} pending and {args.ended} ended tasks in {took:.1f} s")
    store = SQLiteStore(args.path)
    app = create_app(store, token="bench", clock=FakeClock(NOW))
    with TestClient(app) as client:
        for page in PAGES:
            assert client.get(page).status_code == 200, page
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                client.get(page)
                best = min(best, time.perf_counter() - started)
            print(f"{page:22} {best * 1000:6.0f} ms")
    queries: dict[str, Callable[[], object]] = {
        "count_by_queue()": store.count_by_queue,
        "count_by_state()": store.count_by_state,
        "ended_since(10,000)": lambda: store.ended_since(NOW - 3600, limit=10_000),
    }
    for name, query in queries.items():
        query()
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            query()
            best = min(best, time.perf_counter() - started)
        print(f"{name:22} {best * 1000:6.0f} ms")
    store.close()


if __name__ == "__main__":
    main()
