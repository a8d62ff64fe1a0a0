"""gunicorn settings of the example site: each worker starts its own scheduler after the fork.

``post_fork`` runs in the new worker, so the scheduler's threads are the worker's own, with or
without ``--preload`` (a scheduler started at import under ``--preload`` would be the master's).
"""

from __future__ import annotations

from typing import Any

workers = 2
worker_class = "sync"
graceful_timeout = 30


def post_fork(server: Any, worker: Any) -> None:
    """In each new worker: start its scheduler."""
    from tests.frameworks import gunicorn_site

    gunicorn_site.start()


def worker_exit(server: Any, worker: Any) -> None:
    """In each exiting worker: stop its scheduler (running tasks finish first)."""
    from tests.frameworks import gunicorn_site

    gunicorn_site.stop()
