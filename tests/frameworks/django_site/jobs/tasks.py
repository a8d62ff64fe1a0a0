"""The example project's task functions (module level, so durable stores can import them)."""

from __future__ import annotations

import os

from django.conf import settings

from tests.frameworks.django_site.jobs.scheduling import registry

cleanups: list[str] = []


def welcome(user: str, log: str) -> str:
    """Append a line to *log*; reads a setting, so it needs Django set up where it runs."""
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"welcome-{user} {os.getpid()} {settings.TIME_ZONE}\n")
    return user


@registry.cron("0 3 * * *", id="nightly-cleanup")
def nightly_cleanup() -> None:
    """A recurring job of the project."""
    cleanups.append("cleaned")
