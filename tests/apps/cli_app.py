"""Targets and task functions for the command-line tests (importable by worker processes)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import timewheel as tw

jobs = tw.Registry()
"""An empty registry: ``timewheel worker tests.apps.cli_app:jobs``."""

SIGNAL_DIR_ENV = "TIMEWHEEL_TEST_SIGNAL_DIR"


def hold(tag: str) -> str:
    """Write ``<tag>.started`` in ``$TIMEWHEEL_TEST_SIGNAL_DIR``, then wait (up to 120 s, a hang
    guard) until ``<tag>.release`` appears there; write ``<tag>.finished`` before returning."""
    where = Path(os.environ[SIGNAL_DIR_ENV])
    (where / f"{tag}.started").write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not (where / f"{tag}.release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    (where / f"{tag}.finished").write_text(str(os.getpid()))
    return tag


def plain(x: int) -> int:
    """A task function: naming it as a worker target must be refused, never called (a call
    leaves ``plain-was-called`` in ``$TIMEWHEEL_TEST_SIGNAL_DIR`` when that is set)."""
    where = os.environ.get(SIGNAL_DIR_ENV)
    if where:
        Path(where, "plain-was-called").write_text("called")
    return x


@tw.worker_factory
def make_registry() -> tw.Registry:
    """A marked factory returning a Registry."""
    return jobs


@tw.worker_factory
def make_nothing() -> object:
    """A marked factory returning neither a Registry nor a Scheduler."""
    return 42
