"""Settings of the example Django project."""

from __future__ import annotations

import os

SECRET_KEY = "an example project's key, not a secret"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS = ["tests.frameworks.django_site.jobs"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "tests.frameworks.django_site.urls"
DATABASES: dict[str, dict[str, str]] = {}  # the example keeps its tasks in timewheel's store
USE_TZ = True
TIME_ZONE = "UTC"

#: where the scheduler keeps its tasks: with several server processes, a durable store
TIMEWHEEL_STORE = os.environ.get("TIMEWHEEL_STORE", "memory://")
#: False in web processes whose tasks run in ``timewheel worker`` processes instead
TIMEWHEEL_RUN_TASKS = os.environ.get("TIMEWHEEL_RUN_TASKS", "1") == "1"
#: the modules whose functions the scheduler runs from a durable store (docs/security.md)
TIMEWHEEL_ALLOW = ["jobs"]
#: a dotted path to a function returning the Scheduler (tests give one with a FakeClock)
TIMEWHEEL_SCHEDULER: str | None = None
