"""An example Flask application: timewheel's extension in the application factory pattern.

``docs/web.md`` shows the same shape; ``tests/frameworks/test_flask.py`` drives it with Flask's
test client.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue

from tests.apps import fork_app
from timewheel.contrib.flask import Timewheel

tw = Timewheel()

refreshes: list[str] = []


@tw.every(minutes=5, id="refresh-prices")
def refresh_prices() -> None:
    """A recurring job every application registers (once per store, however many register)."""
    refreshes.append("refreshed")


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """The application factory."""
    app = Flask(__name__)
    app.config.update(config or {})
    tw.init_app(app)

    @app.post("/welcome/<user>")
    def welcome(user: str) -> ResponseReturnValue:
        job = tw.schedule(fork_app.record, f"welcome-{user}", app.config["RUN_LOG"], delay=60)
        return jsonify(id=job.id), 202

    @app.get("/jobs/<task_id>")
    def status(task_id: str) -> ResponseReturnValue:
        return jsonify(state=tw.get(task_id).state.value)

    return app
