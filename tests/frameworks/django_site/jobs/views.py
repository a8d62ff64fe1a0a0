"""Views that schedule work and report on it."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from tests.frameworks.django_site.jobs import scheduling, tasks


def welcome(request: HttpRequest, user: str) -> JsonResponse:
    """Schedule a welcome task a minute from now."""
    job = scheduling.scheduler().schedule(tasks.welcome, user, request.GET["log"], delay=60)
    return JsonResponse({"id": job.id}, status=202)


def status(request: HttpRequest, task_id: str) -> JsonResponse:
    """The state of a task."""
    return JsonResponse({"state": scheduling.scheduler().get(task_id).state.value})
