"""Celery tasks: thin wrappers over the services, with JSON arguments and results."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from provisioning.cloud.base import CloudError, Throttled

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


@shared_task(
    name="provisioning.tasks.launch_nodeclaim",
    autoretry_for=(Throttled,),
    retry_backoff=True,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=8,
    acks_late=True,
)
def launch_nodeclaim(claim_id: int) -> dict[str, Any]:
    """Launch one NodeClaim; throttling retries with backoff, the ClientToken (the claim's
    uid) keeps a redelivered message from starting a second instance."""
    from provisioning.services import cloud

    claim = cloud.launch_nodeclaim(claim_id)
    if claim is None:
        return {"claim": claim_id, "skipped": "not pending"}
    return {"claim": claim.name, "state": claim.state, "instance": claim.instance_id, "reason": claim.reason}


@shared_task(name="provisioning.tasks.resolve_nodeclasses")
def resolve_nodeclasses() -> dict[str, bool]:
    """Resolve every EC2NodeClass's selectors and report readiness on its status."""
    from provisioning.models import EC2NodeClass
    from provisioning.services import cloud

    return {nc.name: cloud.resolve_nodeclass(nc).ready for nc in EC2NodeClass.objects.all()}


@shared_task(name="provisioning.tasks.collect_garbage")
def collect_garbage() -> list[str]:
    """Terminate instances of this cluster that no NodeClaim owns (older than 30 s)."""
    from provisioning.services import cloud

    return cloud.collect_garbage()


@worker_ready.connect
def _warm_up(sender: Any = None, **kwargs: Any) -> None:
    # Beat's first 12-hourly refresh would come 12 h after start: refresh now instead, and
    # report EC2NodeClass readiness without waiting a minute.
    refresh_catalog.delay()
    resolve_nodeclasses.delay()
