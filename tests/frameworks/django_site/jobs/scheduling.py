"""One scheduler per serving process, started from ``JobsConfig.ready``.

``start()`` is safe to call again (Django may call ``ready()`` more than once) and does nothing in
the process from which ``runserver``'s autoreloader watches the code: that process serves nothing,
and a scheduler there would run tasks with stale code beside the serving child's.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from django.conf import settings
from django.utils.module_loading import import_string

import timewheel as tw
from timewheel.stores import open_store

registry = tw.Registry()
"""The project's recurring jobs; every process registers them (once per store)."""

autostart = True
"""False in a ``timewheel worker`` process (see ``worker.py``): the worker runs the store's tasks."""

_lock = threading.Lock()
_scheduler: tw.Scheduler | None = None


def in_autoreloader_watcher() -> bool:
    """True in the outer process of ``manage.py runserver`` with its autoreloader: the server
    runs in a child (``RUN_MAIN=true``) that the outer process restarts on every change."""
    args = sys.argv[1:]
    return (
        bool(args)
        and args[0] == "runserver"
        and "--noreload" not in args
        and os.environ.get("RUN_MAIN") != "true"
    )


def build() -> tw.Scheduler:
    """The scheduler the settings describe."""
    if settings.TIMEWHEEL_SCHEDULER:
        made = import_string(settings.TIMEWHEEL_SCHEDULER)()
        assert isinstance(made, tw.Scheduler)
        return made
    dispatcher = None if settings.TIMEWHEEL_RUN_TASKS else tw.NullDispatcher()
    return tw.Scheduler(
        store=open_store(settings.TIMEWHEEL_STORE),
        dispatcher=dispatcher,
        timezone=settings.TIME_ZONE,
        allow=settings.TIMEWHEEL_ALLOW,
    )


def start() -> tw.Scheduler | None:
    """Start this process's scheduler (once) and register the recurring jobs; None in the
    autoreloader's watcher process."""
    global _scheduler
    if not autostart or in_autoreloader_watcher():
        return None
    with _lock:
        if _scheduler is None:
            sched = build()
            sched.include(registry)
            sched.start()
            atexit.register(sched.shutdown)
            _scheduler = sched
        return _scheduler


def scheduler() -> tw.Scheduler:
    """This process's scheduler (started on first use where ``ready()`` did not start it, as in
    a management command run in the autoreloader's environment)."""
    sched = _scheduler if _scheduler is not None else start()
    if sched is None:
        raise tw.SchedulerStateError(
            "no scheduler in the autoreloader's watcher process; it serves no request"
        )
    return sched
