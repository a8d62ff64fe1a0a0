"""Task functions for the multi-process worker tests (importable by worker processes)."""

from __future__ import annotations

import os

import timewheel as tw

jobs = tw.Registry()


def record(tag: str, path: str) -> str:
    """Append ``tag pid`` to *path* (one line per run; O_APPEND writes of a line are atomic)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{tag} {os.getpid()}\n")
    return tag


def fail(message: str) -> None:
    raise RuntimeError(message)


@jobs.every(0.5, id="heartbeat-file")
def beat() -> None:
    """A recurring function declared in a registry (the worker includes it)."""
    path = os.environ.get("TIMEWHEEL_TEST_BEATS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
