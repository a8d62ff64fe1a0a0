"""Task functions an allowlist lets run, and the names through which references try to leave
this module (for the allowlist tests)."""

from __future__ import annotations

import os
import subprocess
from os import system

import timewheel as tw

__all__ = ["Jobs", "add", "os", "registry", "subprocess", "system"]

registry = tw.Registry()


def add(a: int, b: int) -> int:
    """A plain allowed task."""
    return a + b


def _hidden() -> str:
    """Private: never reachable by an import path, whatever the allowlist."""
    return "hidden"


class Jobs:
    """A class whose methods are allowed, and which also holds a foreign function."""

    shell = staticmethod(system)

    @staticmethod
    def double(x: int) -> int:
        return 2 * x

    @classmethod
    def name(cls) -> str:
        return cls.__qualname__
