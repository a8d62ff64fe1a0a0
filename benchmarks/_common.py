"""Helpers shared by the benchmark scripts (run as ``python benchmarks/bench_*.py``)."""

from __future__ import annotations

import threading
import time
from typing import Any


class Done:
    """Counts completions from any thread; ``wait()`` until *n* of them. ``last`` is the wall
    time of the *n*-th completion."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.last = 0.0
        self._lock = threading.Lock()
        self._ev = threading.Event()

    def hit(self, *_: Any) -> None:
        with self._lock:
            self.count += 1
            if self.count >= self.n:
                self.last = time.time()
                self._ev.set()

    def wait(self, bound: float = 600.0) -> None:
        if not self._ev.wait(bound):
            raise RuntimeError(f"only {self.count} of {self.n} completions after {bound} s")
