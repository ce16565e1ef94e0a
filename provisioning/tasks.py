"""Celery tasks: thin wrappers over the services, with JSON arguments and results."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from provisioning.cloud.base import CloudError

log = logging.getLogger(__name__)


@shared_task(
    name="provisioning.tasks.refresh_catalog",
    autoretry_for=(CloudError,),
    retry_backoff=60,
    retry_backoff_max=30 * 60,
    retry_jitter=True,
    max_retries=5,
)
def refresh_catalog(region: str | None = None) -> dict[str, Any]:
    """Rebuild the catalog (instance types, zones, prices) from the cloud and share it with
    every process; runs every 12 h (CELERY_BEAT_SCHEDULE). EC2 failures are retried with
    backoff and the last catalog stays in use meanwhile."""
    from provisioning.services import catalog

    built = catalog.refresh_catalog(region)
    return {
        "region": built.region,
        "instanceTypes": len(built),
        "prices": built.price_source,
        "pricesAsOf": built.prices_as_of,
        "spotPrices": built.spot_source,
        "fallbackReason": built.fallback_reason,
        "builtAt": built.built_at,
    }
