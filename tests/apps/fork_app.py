"""Task functions for the fork and web-server tests (importable by every process)."""

from __future__ import annotations

import os
import time


def double(x: int) -> int:
    """Twice *x*."""
    return 2 * x


def pid() -> int:
    """The id of the process that runs the task."""
    return os.getpid()


def record(tag: str, path: str) -> str:
    """Append ``tag pid`` to *path*, one line per run (an O_APPEND write of a line is atomic)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{tag} {os.getpid()}\n")
    return tag


def wait_for(path: str, guard: float = 60.0) -> str:
    """Block until *path* exists (at most *guard* seconds, a hang guard); return *path*."""
    end = time.monotonic() + guard
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"{path} did not appear within {guard} s")
        time.sleep(0.01)
    return path
