"""A module whose import has a side effect: it creates the file named by TIMEWHEEL_TEST_MARKER.

No test imports it, and no scheduler in the test suite allows it (it sits outside ``tests.apps``):
the allowlist tests store references to it and check that the file never appears.
"""

from __future__ import annotations

import os
from pathlib import Path

_marker = os.environ.get("TIMEWHEEL_TEST_MARKER")
if _marker:
    Path(_marker).write_text("imported\n", encoding="utf-8")


class Boom(Exception):
    """An exception type a stored ``Retry`` may name."""


def run() -> str:
    """What a stored reference to this module would call."""
    return "ran"
