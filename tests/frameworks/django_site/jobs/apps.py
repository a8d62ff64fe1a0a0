"""Where the scheduler starts: ``AppConfig.ready``, once per serving process."""

from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):  # type: ignore[misc]  # Django ships no type information
    """Starts the process's scheduler when Django is ready."""

    name = "tests.frameworks.django_site.jobs"

    def ready(self) -> None:
        # the tasks module declares the recurring jobs in the registry start() includes
        from tests.frameworks.django_site.jobs import scheduling, tasks  # noqa: F401

        scheduling.start()
