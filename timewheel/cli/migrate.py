"""``timewheel migrate``: create a store, or bring its schema to this version."""

from __future__ import annotations

import argparse
from typing import TextIO

from timewheel.cli.common import open_url

__all__ = ["run"]


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Create the store *args.store* names, or bring its schema to this version."""
    opened = open_url(args.store, create=True)
    opened.close()
    print(f"store {opened.store!r} is at the current schema", file=out)
    return 0
