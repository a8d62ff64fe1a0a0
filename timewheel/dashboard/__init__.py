"""A web dashboard for a timewheel store: an ASGI application to mount or serve.

``create_app(store)`` builds a Starlette application (the ``dashboard`` extra: starlette,
jinja2, uvicorn). Importing this package imports no web framework; :func:`create_app` does.
The writes it offers live in :mod:`timewheel.dashboard.actions` and need no framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from timewheel.stores.base import Store

__all__ = ["create_app"]


def create_app(
    store: Store,
    *,
    token: str | None = None,
    read_only: bool = False,
    show_arguments: bool = False,
    **options: Any,
) -> Starlette:
    """The dashboard of *store* as a Starlette (ASGI) application.

    Args:
        store: the store to show; the application does not close it.
        token: the secret a write must carry (form field ``token`` or header
            ``X-Timewheel-Token``). ``None`` generates one, readable as ``app.state.token``.
        read_only: refuse every write and offer no action buttons.
        show_arguments: show task arguments and results (hidden by default: they may hold
            personal data or secrets).
        options: ``clock``: a ``Clock`` to read the time from; ``registry``: the
            ``prometheus_client`` registry ``/metrics`` serves (default: one holding the store's
            gauges, see :mod:`timewheel.metrics`).
    """
    from timewheel.dashboard.app import build

    return build(store, token=token, read_only=read_only, show_arguments=show_arguments, **options)
