"""The Starlette application behind :func:`timewheel.dashboard.create_app`.

Pages are rendered on the server from Jinja2 templates; the one chart library (uPlot, MIT) is
served from this package's ``static`` directory. Every page reads through bounded store queries
(counts, the inspection protocol, ``limit=``), never a scan of every task.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote
from zoneinfo import ZoneInfo

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from timewheel.clock import Clock, SystemClock
from timewheel.dashboard import actions
from timewheel.errors import InvalidTransitionError, TaskNotFoundError, TimewheelError
from timewheel.jobs import task_traceback
from timewheel.report import activity_report, herd_behind, load_report
from timewheel.rules import rule_from_spec
from timewheel.stores.base import Store, SupportsInspection
from timewheel.task import Task, TaskState

__all__ = ["TOKEN_HEADER", "build"]

TOKEN_HEADER = "X-Timewheel-Token"
"""The request header that may carry the write token instead of the ``token`` form field."""

_HERE = Path(__file__).parent
_LOG = logging.getLogger("timewheel.dashboard")
_FAILURES = 50  # failures listed on the failures page
_SEARCH_LIMIT = 100  # tasks listed by a search by function
_WINDOW_LIMIT = 10_000  # PENDING tasks counted at most in a window of the overview
_NEXT_FIRES = 3  # upcoming fire times shown per schedule
_DOWNSTREAM = 100  # downstream tasks listed on a task's page
_HERD_READ = 100_000  # PENDING tasks read at most to name the schedules behind a herd

Handler = Callable[[Request], Awaitable[Response]]


class _Refused(Exception):
    """A write refused before it reached the store (status 403)."""


def _iso(t: float | None, zone: ZoneInfo | None = None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, zone or timezone.utc).isoformat(timespec="seconds")


class _Dashboard:
    def __init__(
        self,
        store: Store,
        *,
        token: str,
        read_only: bool,
        show_arguments: bool,
        clock: Clock,
        registry: Any,
    ) -> None:
        self.store = store
        self.registry = registry
        self.token = token
        self.read_only = read_only
        self.show_arguments = show_arguments
        self.clock = clock
        self.env = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(default=True),
        )
        self.env.filters["iso"] = _iso

    # -- plumbing -----------------------------------------------------------------------------
    def render(self, request: Request, name: str, status: int = 200, **values: Any) -> Response:
        template = self.env.get_template(name)
        html = template.render(
            base=request.scope.get("root_path", ""),
            read_only=self.read_only,
            show_arguments=self.show_arguments,
            token=self.token,
            **values,
        )
        return HTMLResponse(html, status_code=status)

    def guarded(self, handler: Handler) -> Handler:
        """Turn store trouble into an error page: no traceback ever reaches the client."""

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except TaskNotFoundError as e:
                return self.render(request, "error.html", 404, title="Not found", message=str(e))
            except _Refused as e:
                return self.render(request, "error.html", 403, title="Refused", message=str(e))
            except InvalidTransitionError as e:
                return self.render(request, "error.html", 409, title="Conflict", message=str(e))
            except (TimewheelError, sqlite3.Error, OSError) as e:
                _LOG.warning("dashboard: the store failed: %s", e, exc_info=True)
                return self.render(
                    request,
                    "error.html",
                    503,
                    title="Store unavailable",
                    message=f"The store could not be read: {type(e).__name__}: {e}",
                )
            except Exception:
                _LOG.exception("dashboard: unexpected error")
                return self.render(
                    request,
                    "error.html",
                    500,
                    title="Internal error",
                    message="The dashboard failed; the server log has the details.",
                )

        return run

    async def checked_form(self, request: Request) -> dict[str, str]:
        """The form of a write request, after the read-only, origin and token checks."""
        if self.read_only:
            raise _Refused("this dashboard is read-only")
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.url.netloc}"
        if origin is not None and origin != own:
            raise _Refused(f"cross-site request refused (origin {origin!r})")
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise _Refused("cross-site request refused")
        body = (await request.body()).decode("utf-8", "replace")
        form = {k: v[0] for k, v in parse_qs(body).items()}
        given = request.headers.get(TOKEN_HEADER) or form.get("token", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise _Refused("a write needs the dashboard's token")
        return form

    def back(self, request: Request, path: str) -> Response:
        return RedirectResponse(request.scope.get("root_path", "") + path, status_code=303)

    # -- pages ---------------------------------------------------------------------------------
    def inspection(self) -> SupportsInspection | None:
        return self.store if isinstance(self.store, SupportsInspection) else None

    async def overview(self, request: Request) -> Response:
        now = self.clock.time()
        inspect = self.inspection()
        by_queue = inspect.count_by_queue() if inspect is not None else None
        counts: dict[TaskState, int] = {}
        if by_queue is None:
            counts = self.store.count_by_state()
        else:  # one count of the store gives both tables
            for by_state in by_queue.values():
                for s, n in by_state.items():
                    counts[s] = counts.get(s, 0) + n
        queue_states = [s for s in TaskState if by_queue and any(s in c for c in by_queue.values())]
        queues = [
            (q, [c.get(s, 0) for s in queue_states], sum(c.values()))
            for q, c in sorted((by_queue or {}).items())
        ]
        activity = activity_report(inspect, now) if inspect is not None else None
        soon = self.store.due_before(now + 60, limit=_WINDOW_LIMIT)
        hour = self.store.due_before(now + 3600, limit=_WINDOW_LIMIT)
        return self.render(
            request,
            "overview.html",
            now=now,
            counts=[(s.value, counts.get(s, 0)) for s in TaskState],
            total=sum(counts.values()),
            queues=queues,
            queue_states=[s.value for s in queue_states],
            queues_known=by_queue is not None,
            oldest_ready=inspect.oldest_ready_age(now) if inspect is not None else None,
            activity=activity,
            pending_minute=len(soon),
            pending_hour=len(hour),
            pending_capped=_WINDOW_LIMIT,
        )

    async def load(self, request: Request) -> Response:
        inspect = self.inspection()
        now = self.clock.time()
        minute = hour = None
        if inspect is not None:
            overdue = len(self.store.due_before(now, limit=_WINDOW_LIMIT))
            minute = load_report(inspect, now, horizon=3600.0, bucket=60.0)
            hour = load_report(inspect, now, horizon=86400.0, bucket=3600.0)
            for report in (minute, hour):
                if report["herd"] is not None:
                    behind = herd_behind(self.store, report, overdue=overdue, read_limit=_HERD_READ)
                    report["herd"].update(behind)
        return self.render(request, "load.html", now=now, minute=minute, day=hour)

    async def failures(self, request: Request) -> Response:
        inspect = self.inspection()
        tasks = inspect.recent_failures(_FAILURES) if inspect is not None else None
        rows = [(t, task_traceback(t)) for t in tasks] if tasks is not None else None
        retrying = inspect.retrying(_FAILURES) if inspect is not None else None
        return self.render(
            request,
            "failures.html",
            rows=rows,
            retrying=retrying,
            retrying_capped=retrying is not None and len(retrying) >= _FAILURES,
            retryable=actions.RETRYABLE,
        )

    async def schedules(self, request: Request) -> Response:
        now = self.clock.time()
        inspect = self.inspection()
        rows = []
        for rec in self.store.list_schedules():
            zone_name = str(rec.rule.get("tz") or rec.rule.get("timezone") or "UTC")
            try:
                zone = ZoneInfo(zone_name)
            except (KeyError, ValueError):
                zone = ZoneInfo("UTC")
            fires: list[tuple[str, str]] = []
            describe = str(dict(rec.rule))
            try:
                rule = rule_from_spec(rec.rule)
                describe = rule.describe()
                t: float | None = now
                for _ in range(_NEXT_FIRES):
                    t = rule.next_after(t) if t is not None else None
                    if t is None:
                        break
                    fires.append((_iso(t, zone), _iso(t)))
            except Exception:  # a rule this version cannot read: shown as stored
                pass
            last = inspect.last_ended(rec.id) if inspect is not None else None
            rows.append(
                {
                    "id": rec.id,
                    "rule": describe,
                    "zone": zone_name,
                    "paused": rec.paused,
                    "fires": fires,
                    "last": last,
                    "last_known": inspect is not None,
                }
            )
        return self.render(request, "schedules.html", schedules=rows)

    async def task(self, request: Request) -> Response:
        task = self.store.get(request.path_params["task_id"])
        upstream = [self.store.find(u) for u in task.after]
        inspect = self.inspection()
        downstream = inspect.dependents(task.id, limit=_DOWNSTREAM) if inspect else None
        return self.render(
            request,
            "task.html",
            task=task,
            upstream=list(zip(task.after, upstream, strict=True)),
            downstream=downstream,
            downstream_capped=downstream is not None and len(downstream) >= _DOWNSTREAM,
            traceback=task_traceback(task),
            now=self.clock.time(),
            retryable=task.state in actions.RETRYABLE,
            cancellable=task.state in (TaskState.PENDING, TaskState.READY),
        )

    async def search(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        found: list[Task] | None = []
        if query:
            exact = self.store.find(query)
            if exact is not None:
                return self.back(request, f"/task/{quote(exact.id, safe='')}")
            inspect = self.inspection()
            # one more than shown tells whether there are more
            found = inspect.by_function(query, limit=_SEARCH_LIMIT + 1) if inspect else None
        return self.render(
            request,
            "search.html",
            query=query,
            tasks=None if found is None else found[:_SEARCH_LIMIT],
            limit=_SEARCH_LIMIT,
            more=found is not None and len(found) > _SEARCH_LIMIT,
        )

    async def metrics(self, request: Request) -> Response:
        try:
            from prometheus_client import CollectorRegistry, exposition
        except ImportError:
            return self.render(
                request,
                "error.html",
                404,
                title="Not found",
                message="Metrics need the metrics extra: pip install 'pytimewheel[metrics]'.",
            )
        if self.registry is None:
            from timewheel.metrics import Metrics

            self.registry = CollectorRegistry()
            Metrics(self.store, self.registry, clock=self.clock)
        return Response(
            exposition.generate_latest(self.registry), media_type=exposition.CONTENT_TYPE_LATEST
        )

    # -- writes --------------------------------------------------------------------------------
    async def cancel(self, request: Request) -> Response:
        await self.checked_form(request)
        task_id = request.path_params["task_id"]
        actions.cancel_task(self.store, task_id, self.clock.time())
        return self.back(request, f"/task/{quote(task_id, safe='')}")

    async def retry(self, request: Request) -> Response:
        await self.checked_form(request)
        copy = actions.retry_now(self.store, request.path_params["task_id"], self.clock.time())
        return self.back(request, f"/task/{quote(copy.id, safe='')}")

    async def pause(self, request: Request) -> Response:
        await self.checked_form(request)
        actions.set_paused(self.store, request.path_params["schedule_id"], True, self.clock)
        return self.back(request, "/schedules")

    async def resume(self, request: Request) -> Response:
        await self.checked_form(request)
        actions.set_paused(self.store, request.path_params["schedule_id"], False, self.clock)
        return self.back(request, "/schedules")

    async def run_now(self, request: Request) -> Response:
        await self.checked_form(request)
        task = actions.run_schedule_now(self.store, request.path_params["schedule_id"], self.clock)
        return self.back(request, f"/task/{quote(task.id, safe='')}")


def build(
    store: Store,
    *,
    token: str | None,
    read_only: bool,
    show_arguments: bool,
    clock: Clock | None = None,
    registry: Any = None,
) -> Starlette:
    """The application; see :func:`timewheel.dashboard.create_app`."""
    dash = _Dashboard(
        store,
        token=token or secrets.token_urlsafe(24),
        read_only=read_only,
        show_arguments=show_arguments,
        clock=clock or SystemClock(),
        registry=registry,
    )
    g = dash.guarded
    routes = [
        Route("/", g(dash.overview)),
        Route("/load", g(dash.load)),
        Route("/failures", g(dash.failures)),
        Route("/schedules", g(dash.schedules)),
        Route("/search", g(dash.search)),
        Route("/task/{task_id:path}/cancel", g(dash.cancel), methods=["POST"]),
        Route("/task/{task_id:path}/retry", g(dash.retry), methods=["POST"]),
        Route("/task/{task_id:path}", g(dash.task)),
        Route("/schedule/{schedule_id:path}/pause", g(dash.pause), methods=["POST"]),
        Route("/schedule/{schedule_id:path}/resume", g(dash.resume), methods=["POST"]),
        Route("/schedule/{schedule_id:path}/run", g(dash.run_now), methods=["POST"]),
        Route("/metrics", g(dash.metrics)),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return dash.render(request, "error.html", 404, title="Not found", message="No such page.")

    app = Starlette(routes=routes, exception_handlers={404: not_found})
    app.state.token = dash.token
    app.state.read_only = read_only
    return app
