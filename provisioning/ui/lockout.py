"""The answer to a sign-in that the login throttle (django-axes) refuses: 429 and a page
saying for how long, and who can lift it sooner."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def locked_out(request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None) -> HttpResponse:
    minutes = max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    context = {"minutes": minutes, "limit": settings.AXES_FAILURE_LIMIT}
    return render(request, "registration/locked_out.html", context, status=429)
