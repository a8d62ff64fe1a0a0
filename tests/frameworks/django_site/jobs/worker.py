"""The project's ``timewheel worker`` target, for durable stores::

    DJANGO_SETTINGS_MODULE=tests.frameworks.django_site.settings \\
        timewheel worker tests.frameworks.django_site.jobs.worker:make --store sqlite:///tasks.db

Task functions may use Django (settings, the ORM): the factory sets Django up first.
"""

from __future__ import annotations

import timewheel as tw


@tw.worker_factory
def make() -> tw.Registry:
    """Set Django up, then give the worker the project's recurring jobs."""
    import django

    from tests.frameworks.django_site.jobs import scheduling

    scheduling.autostart = False  # ready() must not start a second scheduler in the worker
    django.setup()
    from tests.frameworks.django_site.jobs import tasks  # noqa: F401  (declares the jobs)

    return scheduling.registry
