"""What a process made by ``fork()`` does with the schedulers and delay queues it inherited.

``fork()`` copies a process's memory but only the thread that called it. A scheduler started
before the fork (gunicorn ``--preload``, uWSGI without ``lazy-apps``, multiprocessing's ``fork``
start method) arrives in the child without its trigger and worker threads, with a copy of its
store, and with locks that another thread of the parent may have held at that instant and that
nobody will ever release in the child.

Objects that care register a callback with :func:`after_fork_in_child`; it runs in the child right
after the fork, before ``os.fork()`` returns there, while the child has a single thread. Each
object decides there what it can keep (see ``docs/web.md``): a scheduler on a durable store
restarts its own trigger and workers on first use, one on the memory store refuses to be used,
and the default scheduler is started anew.
"""

from __future__ import annotations

import itertools
import logging
import os
import weakref
from collections.abc import Callable
from types import MethodType

__all__ = ["after_fork_in_child"]

log = logging.getLogger("timewheel.forking")

_callbacks: dict[int, Callable[[], object] | weakref.WeakMethod[Callable[[], object]]] = {}
_keys = itertools.count()


def after_fork_in_child(callback: Callable[[], object]) -> None:
    """Call ``callback()`` in every child process made by ``os.fork()``, right after the fork.

    A bound method is held weakly: once its object is collected, the callback is dropped. Other
    callables are held for the life of the process. Callbacks run in registration order, in the
    child's only thread; one that raises is logged and the others still run. They must not wait
    for a lock another thread could have held at the fork (such a lock stays held in the child).
    """
    key = next(_keys)
    if isinstance(callback, MethodType):
        _callbacks[key] = weakref.WeakMethod(callback, lambda _ref: _callbacks.pop(key, None))
    else:
        _callbacks[key] = callback


def _run_callbacks() -> None:
    for key in sorted(_callbacks):
        entry = _callbacks.get(key)
        if entry is None:
            continue
        callback = entry() if isinstance(entry, weakref.WeakMethod) else entry
        if callback is None:
            continue
        try:
            callback()
        except Exception:
            log.exception("after-fork callback %r failed in process %d", callback, os.getpid())


if hasattr(os, "register_at_fork"):  # POSIX only; a platform without fork() needs nothing
    os.register_at_fork(after_in_child=_run_callbacks)
