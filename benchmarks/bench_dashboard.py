"""Server time of the dashboard's pages on a SQLite store of 1,000,000 PENDING tasks.

Run: ``python benchmarks/bench_dashboard.py [--tasks N] [--path FILE]``

The store is built once (tasks 0.1 s apart from a fixed instant, so every window the overview
counts is full) and kept at ``--path`` for later runs; each page is requested once to warm up,
then three times through Starlette's TestClient, and the best time is reported.
"""

from __future__ import annotations

import argparse
import os
import time

from starlette.testclient import TestClient

from timewheel.dashboard import create_app
from timewheel.stores import SQLiteStore
from timewheel.task import Task
from timewheel.testing import FakeClock

NOW = 1_800_000_000.0
PAGES = ("/", "/load", "/failures", "/schedules", "/metrics")


def fill(path: str, n: int) -> float:
    """Insert *n* PENDING tasks in batches; the seconds it took."""
    store = SQLiteStore(path)
    started = time.perf_counter()
    batch = 50_000
    for first in range(0, n, batch):
        store.insert_many(
            [
                Task(id=f"t{i}", func="bench:noop", due=NOW + i * 0.1, created=NOW)
                for i in range(first, min(n, first + batch))
            ]
        )
    store.close()
    return time.perf_counter() - started


def main() -> None:
    """Build the store if needed and print each page's best server time."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--path", default="dashboard-bench.db")
    args = parser.parse_args()
    if not os.path.exists(args.path):
        print(f"filled {args.tasks} tasks in {fill(args.path, args.tasks):.1f} s")
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
            print(f"{page:12} {best * 1000:6.0f} ms")
    store.close()


if __name__ == "__main__":
    main()
