"""Process-wide clients for Redis and the cloud, built from settings once."""

from __future__ import annotations

import functools

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from karpweb.redisconf import client


@functools.cache
def get_redis() -> redis.Redis:
    if not settings.REDIS_URL:
        raise ImproperlyConfigured("REDIS_URL is not set (make run starts an embedded Redis and sets it)")
    return client(settings.REDIS_URL, settings.REDIS_SENTINEL_MASTER, timeout=5)


def reset() -> None:
    """Forget cached clients (tests that change settings)."""
    get_redis.cache_clear()
