"""URLs of the example Django project."""

from __future__ import annotations

from django.urls import path

from tests.frameworks.django_site.jobs import views

urlpatterns = [
    path("welcome/<str:user>", views.welcome),
    path("jobs/<str:task_id>", views.status),
]
