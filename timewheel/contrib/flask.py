"""A Flask extension: one :class:`~timewheel.Scheduler` per application, in the application
factory pattern (``init_app``). See ``docs/web.md``.

::

    from flask import Flask
    from timewheel.contrib.flask import Timewheel

    tw = Timewheel()

    @tw.cron("0 3 * * *")          # registered on every application's scheduler
    def nightly_cleanup() -> None: ...

    def create_app() -> Flask:
        app = Flask(__name__)
        app.config["TIMEWHEEL_STORE"] = "sqlite:////var/lib/myapp/tasks.db"
        tw.init_app(app)
        return app

    # in a view: tw.scheduler is the current application's
    tw.schedule(send_welcome_mail, user_id, delay=60)

Configuration (``app.config``):

``TIMEWHEEL_STORE``
    a store URL (``"sqlite:///tasks.db"``, ``"memory://"``) or a :class:`~timewheel.Store`
    (default: a new memory store). With several server worker processes, use a durable store.
``TIMEWHEEL_TIMEZONE``
    the default zone of cron schedules (default ``"UTC"``).
``TIMEWHEEL_ALLOW``
    the modules whose functions the scheduler runs from import paths read from a durable store
    (``["myapp"]``; see ``docs/security.md``).
``TIMEWHEEL_SCHEDULER``
    a function returning the :class:`~timewheel.Scheduler` to use (tests pass one with a
    ``FakeClock``); the keys above are then ignored.
``TIMEWHEEL_START``
    ``True`` to start the scheduler in ``init_app``, ``False`` to leave it unstarted (it still
    stores what is scheduled; ``timewheel worker`` runs it), ``None`` (the default) to start it
    except in the process werkzeug's reloader watches from (see :func:`in_reloader_watcher`).

This module never imports Flask at import time, and Flask is not a dependency of timewheel.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from timewheel.errors import SchedulerStateError
from timewheel.jobs import Job
from timewheel.recurring import Registry, interval_of
from timewheel.scheduler import Scheduler
from timewheel.stores import Store, open_store

if TYPE_CHECKING:
    from flask import Flask

__all__ = ["EXTENSION", "Timewheel", "in_reloader_watcher"]

F = TypeVar("F", bound=Callable[..., Any])

EXTENSION = "timewheel"
"""The key of the scheduler in ``app.extensions``."""


def in_reloader_watcher() -> bool:
    """True in the process from which werkzeug's reloader watches the code (``flask run --debug``
    or ``--reload``): it loads the application, then serves nothing; the server runs in a child
    process it restarts on every change. A scheduler started there would run tasks with stale
    code, beside the serving child's."""
    if os.environ.get("WERKZEUG_RUN_MAIN") == "true":
        return False  # the serving child
    if os.environ.get("FLASK_RUN_FROM_CLI") != "true":
        return False  # not the flask command (a WSGI server, a script, a test)
    args = sys.argv[1:]
    if "run" not in args or "--no-reload" in args:
        return False
    if "--reload" in args:
        return True
    debug = os.environ.get("FLASK_DEBUG", "")
    return "--debug" in args or (bool(debug) and debug.lower() not in ("0", "false", "no"))


def _shutdown(ref: weakref.ref[Scheduler]) -> None:
    """At interpreter exit: stop the scheduler if it still exists (an application built by a
    test and dropped does not stay alive for this)."""
    sched = ref()
    if sched is not None:
        sched.shutdown()


class Timewheel:
    """The Flask extension: ``Timewheel(app)`` or ``tw = Timewheel(); tw.init_app(app)``.

    Args:
        app: initialise this application at once (the factory pattern calls :meth:`init_app`).
        registry: where :meth:`cron` and :meth:`every` declare recurring functions (default: a
            new :class:`~timewheel.Registry`); included in every application's scheduler.

    Recurring functions declared after an application was initialised are scheduled on its
    scheduler too. On a durable store, registering a schedule that already exists keeps its
    series, so every server worker (and a reloaded application) may register the same ones.
    """

    def __init__(self, app: Flask | None = None, *, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else Registry()
        self._schedulers: weakref.WeakSet[Scheduler] = weakref.WeakSet()
        self._lock = threading.Lock()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> Scheduler:
        """Build the application's scheduler from ``app.config``, include the registry, start it
        (per ``TIMEWHEEL_START``), stop it at interpreter exit, and keep it in
        ``app.extensions["timewheel"]``. Returns the scheduler."""
        config = app.config
        factory = config.get("TIMEWHEEL_SCHEDULER")
        if factory is not None:
            sched = factory()
            if not isinstance(sched, Scheduler):
                raise TypeError(
                    f"TIMEWHEEL_SCHEDULER must return a timewheel.Scheduler (got {sched!r})"
                )
        else:
            store = config.get("TIMEWHEEL_STORE")
            if isinstance(store, str):
                store = open_store(store)
            elif store is not None and not isinstance(store, Store):
                raise TypeError(
                    f"TIMEWHEEL_STORE must be a store URL or a timewheel Store (got {store!r})"
                )
            sched = Scheduler(
                store=store,
                timezone=config.get("TIMEWHEEL_TIMEZONE", "UTC"),
                allow=config.get("TIMEWHEEL_ALLOW"),
            )
        start = config.get("TIMEWHEEL_START")
        if start is None:
            start = not in_reloader_watcher()
        with self._lock:
            app.extensions[EXTENSION] = sched
            self._schedulers.add(sched)
            sched.include(self.registry)
        if start:
            sched.start()
            atexit.register(_shutdown, weakref.ref(sched))
        return sched

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler of the current application (``flask.current_app``).

        Raises:
            RuntimeError: outside an application context, or the application was not
                initialised with this extension.
        """
        from flask import current_app

        sched = current_app.extensions.get(EXTENSION)
        if not isinstance(sched, Scheduler):
            raise RuntimeError(
                f"the application {current_app.name!r} has no timewheel scheduler; call "
                "Timewheel.init_app(app) in the application factory"
            )
        return sched

    def schedule(self, func: Callable[..., Any] | str, /, *args: Any, **options: Any) -> Any:
        """:meth:`Scheduler.schedule` on the current application's scheduler (a
        :class:`~timewheel.Job`, or a :class:`~timewheel.Schedule` for ``cron=``/``every=``)."""
        return self.scheduler.schedule(func, *args, **options)

    def get(self, task_id: str) -> Job:
        """:meth:`Scheduler.get` on the current application's scheduler."""
        return self.scheduler.get(task_id)

    def cron(self, expr: str, /, **options: Any) -> Callable[[F], F]:
        """Decorator: run the function on *expr* in every application (see :meth:`Registry.cron`)."""
        declare = self.registry.cron(expr, **options)

        def wrap(func: F) -> F:
            declare(func)
            self._schedule_everywhere(func, {"cron": expr, **options})
            return func

        return wrap

    def every(
        self,
        interval: float | timedelta | None = None,
        /,
        *,
        seconds: float = 0,
        minutes: float = 0,
        hours: float = 0,
        days: float = 0,
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorator: run the function every *interval* (or ``minutes=5`` etc.) in every
        application (see :meth:`Registry.every`)."""
        period = interval_of(interval, seconds, minutes, hours, days)
        declare = self.registry.every(period, **options)

        def wrap(func: F) -> F:
            declare(func)
            self._schedule_everywhere(func, {"every": period, **options})
            return func

        return wrap

    def _schedule_everywhere(self, func: Callable[..., Any], options: dict[str, Any]) -> None:
        """Schedule a function declared late on the schedulers already built."""
        with self._lock:
            schedulers = list(self._schedulers)
        for sched in schedulers:
            try:
                sched.schedule(func, **options)
            except SchedulerStateError:
                pass  # that application's scheduler was shut down (or belongs to a parent)

    def __repr__(self) -> str:
        return f"<Timewheel registry={len(self.registry)} schedules>"
