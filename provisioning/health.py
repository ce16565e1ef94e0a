"""Liveness and readiness: /healthz says the process answers, /readyz that its
database and Redis do too."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "redis": _redis()}
    ready = all(v in ("ok", "not configured") for v in checks.values())
    return JsonResponse({"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503)


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"error: {exc.__class__.__name__}"


def _redis() -> str:
    if not settings.REDIS_URL:
        return "not configured"
    import redis

    from karpweb.redisconf import client

    try:
        client(settings.REDIS_URL, settings.REDIS_SENTINEL_MASTER, timeout=1).ping()
        return "ok"
    except redis.RedisError as exc:
        return f"error: {exc.__class__.__name__}"
