"""The example project's settings for its tests: a FakeClock and tasks run inline."""

from __future__ import annotations

from tests.frameworks.django_site.settings import *  # noqa: F403

TIMEWHEEL_SCHEDULER = "tests.frameworks.django_site.testing.scheduler"
