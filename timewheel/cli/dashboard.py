"""``timewheel dashboard``: serve the web dashboard of a store (the dashboard extra)."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from timewheel.cli.common import fail, open_url

__all__ = ["run"]


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Serve the dashboard of the store *args.store* names until interrupted."""
    try:
        import uvicorn

        from timewheel.dashboard import create_app
    except ImportError as e:
        fail(f"the dashboard needs its extra: pip install 'pytimewheel[dashboard]' ({e})")
    opened = open_url(args.store, read_only_ok=args.read_only)
    try:
        app = create_app(
            opened.store,
            token=os.environ.get("TIMEWHEEL_DASHBOARD_TOKEN") or None,
            read_only=args.read_only,
            show_arguments=args.show_arguments,
        )
        print(f"dashboard of {opened.url} on http://{args.host}:{args.port}/", file=out)
        if not args.read_only and not os.environ.get("TIMEWHEEL_DASHBOARD_TOKEN"):
            print(f"write token: {app.state.token}", file=out)
        out.flush()
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        opened.close()
    return 0
