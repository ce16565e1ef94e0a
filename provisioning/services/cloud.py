"""Workflows on the cloud: resolve EC2NodeClasses, launch NodeClaims, collect garbage.

The cloud (``cloud/aws.py``) only speaks plain dataclasses; this module turns rows into
requests, results back into rows, and keeps the ICE cache in Redis.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from provisioning.cloud import ice, reservations
from provisioning.cloud.aws import AWSCloud, AWSConfig
from provisioning.cloud.base import (
    CloudError,
    CloudProvider,
    Instance,
    InsufficientCapacity,
    LaunchOption,
    LaunchRequest,
    NodeClassNotReady,
    ResolvedNodeClass,
    Throttled,
)
from provisioning.cloud.launch import garbage_collect, launch_with_fallback
from provisioning.crd.ec2nodeclass import effective_ami_family
from provisioning.models import EC2NodeClass, NodeClaim, NodePool
from provisioning.observability.metrics import cloud_call
from provisioning.services.connections import get_redis

log = logging.getLogger(__name__)


@functools.cache
def get_cloud() -> CloudProvider:
    return AWSCloud(AWSConfig.from_settings(settings))


# ------------------------------------------------------------------ EC2NodeClass status


def resolve_nodeclass(nodeclass: EC2NodeClass, cloud: CloudProvider | None = None) -> ResolvedNodeClass:
    """Resolve the selectors against the cloud and report readiness on the status."""
    cloud = cloud or get_cloud()
    try:
        resolved = cloud.resolve_nodeclass(nodeclass.name, nodeclass.spec)
    except CloudError as exc:
        resolved = ResolvedNodeClass(
            name=nodeclass.name, ami_family=effective_ami_family(nodeclass.spec) or "", problems=(str(exc),)
        )
    status = nodeclass_status(nodeclass, resolved)
    # Written only when it changed: a resolution that finds the same is no event, and the
    # status is part of what a prepared provisioning run checks before it is recorded.
    EC2NodeClass.objects.filter(pk=nodeclass.pk).exclude(status=status).update(status=status)
    return resolved


def nodeclass_status(nodeclass: EC2NodeClass, resolved: ResolvedNodeClass) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    before = {c.get("type"): c for c in (nodeclass.status or {}).get("conditions") or [] if isinstance(c, dict)}

    def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        status = "True" if ok else "False"
        # As Kubernetes conditions do: the time the status last changed, not of this check.
        since = before.get(kind, {}).get("lastTransitionTime") if before.get(kind, {}).get("status") == status else None
        return {
            "type": kind,
            "status": status,
            "reason": kind if ok else reason,
            "message": "" if ok else message,
            "lastTransitionTime": since or now,
            "observedGeneration": nodeclass.generation,
        }

    problems = "; ".join(resolved.problems)
    return {
        "subnets": [{"id": s.id, "zone": s.zone, "zoneID": s.zone_id} for s in resolved.subnets],
        "securityGroups": [{"id": g.id, "name": g.name} for g in resolved.security_groups],
        "amis": [
            {
                "id": i.id,
                "name": i.name,
                **({"deprecated": True} if i.deprecated else {}),
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": [i.arch]}],
            }
            for i in resolved.images
        ],
        "instanceProfile": resolved.instance_profile,
        **(
            {"capacityReservations": [reservations.to_status(r) for r in resolved.capacity_reservations]}
            if (nodeclass.spec or {}).get("capacityReservationSelectorTerms")
            else {}
        ),
        "conditions": [
            condition("SubnetsReady", bool(resolved.subnets), "SubnetsNotFound", "no subnet matches"),
            condition(
                "SecurityGroupsReady",
                bool(resolved.security_groups),
                "SecurityGroupsNotFound",
                "no security group matches",
            ),
            condition("AMIsReady", bool(resolved.images), "AMINotFound", "no AMI matches"),
            condition(
                "InstanceProfileReady",
                bool(resolved.instance_profile),
                "InstanceProfileNotFound",
                "no instance profile",
            ),
            # Reservations are optional: the condition says they were looked up (a failed
            # DescribeCapacityReservations fails the whole resolution).
            condition("CapacityReservationsReady", True, "", ""),
            condition("Ready", resolved.ready, "NotReady", problems),
        ],
    }


# ------------------------------------------------------------------ launch


def launch_nodeclaim(claim_id: int, cloud: CloudProvider | None = None) -> NodeClaim | None:
    """Launch one pending NodeClaim; returns it, or None when another worker has it.

    Throttling propagates (the task retries it with backoff); every other failure is
    written on the claim as a reason for people.
    """
    claim = NodeClaim.objects.filter(pk=claim_id).first()
    if claim is None or not claim.move(
        NodeClaim.State.PENDING, NodeClaim.State.LAUNCHING, launch_started_at=timezone.now()
    ):
        return None
    NodeClaim.objects.filter(pk=claim.pk).update(launch_attempts=F("launch_attempts") + 1)
    first_attempt = claim.launch_attempts == 0
    cloud = cloud or get_cloud()
    try:
        request = dataclasses.replace(launch_request(claim, cloud), first_attempt=first_attempt)
        mark_unavailable, is_unavailable = ice_cache(get_redis())
        with cloud_call("nodeclaim.lifecycle", "Create"):
            instance = launch_with_fallback(
                cloud, request, mark_unavailable=mark_unavailable, is_unavailable=is_unavailable
            )
    except Throttled:
        claim.move(NodeClaim.State.LAUNCHING, NodeClaim.State.PENDING)
        raise
    except (InsufficientCapacity, NodeClassNotReady, CloudError) as exc:
        claim.move(NodeClaim.State.LAUNCHING, NodeClaim.State.FAILED, reason=exc.reason, message=str(exc))
        log.warning("nodeclaim %s failed to launch: %s: %s", claim.name, exc.reason, exc)
        return claim
    record_launched(claim, instance)
    return claim


def record_launched(claim: NodeClaim, instance: Instance) -> None:
    """The claim being launched has its instance (unless a relaunch has taken it over)."""
    price, list_price = _price_of(
        claim, instance.instance_type, instance.zone, instance.capacity_type, instance.capacity_reservation_id
    )
    if instance.capacity_reservation_id:
        price, list_price = _reserved_price(claim, instance)
    if claim.move(
        NodeClaim.State.LAUNCHING,
        NodeClaim.State.LAUNCHED,
        instance_id=instance.id,
        instance_type=instance.instance_type,
        zone=instance.zone,
        capacity_type=instance.capacity_type,
        price_per_hour=price,
        list_price_per_hour=list_price,
        launched_at=timezone.now(),
        reason="",
        message="",
    ):
        spec = dict(claim.spec)
        if instance.launched_with:
            spec["launched"] = instance.launched_with
        if instance.capacity_reservation_id:
            from provisioning.services import reservations as reservation_counts

            reservation_counts.mark_launched(instance.capacity_reservation_id)
            # Its node carries the reservation (upstream's capacity-reservation-* labels).
            option = _option_of(claim, instance.capacity_reservation_id)
            spec["labels"] = {
                **(spec.get("labels") or {}),
                **reservations.labels(
                    instance.capacity_reservation_id,
                    option.get("capacityReservationType", "default"),
                    bool(option.get("capacityReservationInterruptible")),
                ),
            }
        if spec != claim.spec:
            NodeClaim.objects.filter(pk=claim.pk).update(spec=spec)
            claim.spec = spec
        log.info(
            "nodeclaim %s launched %s %s in %s as %s",
            claim.name,
            instance.id,
            instance.instance_type,
            instance.zone,
            instance.capacity_type,
        )


def launch_input(claim: NodeClaim) -> str:
    """What of a claim its launch request is made of (see :func:`launch_request`), as a key:
    claims with equal keys launch identically, but for their names."""
    return json.dumps(
        [
            claim.nodepool_name,
            claim.nodeclass_name,
            claim.launch_options,
            claim.spec.get("taints") or [],
            claim.spec.get("startupTaints") or [],
        ],
        sort_keys=True,
    )


def ice_cache(redis: Any) -> tuple[Callable[[LaunchOption], None], Callable[[LaunchOption], bool]]:
    """``mark_unavailable`` and ``is_unavailable`` on the ICE cache in Redis."""

    def mark_unavailable(option: LaunchOption) -> None:
        reason = "ReservationCapacityExceeded" if option.reservation_id else "InsufficientInstanceCapacity"
        ice.mark_unavailable(
            redis,
            option.capacity_type,
            option.instance_type,
            option.zone,
            reason,
            reservation_id=option.reservation_id,
        )

    def is_unavailable(option: LaunchOption) -> bool:
        return ice.is_unavailable(
            redis, option.capacity_type, option.instance_type, option.zone, reservation_id=option.reservation_id
        )

    return mark_unavailable, is_unavailable


def launch_request(claim: NodeClaim, cloud: CloudProvider) -> LaunchRequest:
    nodeclass = EC2NodeClass.objects.filter(name=claim.nodeclass_name).first()
    if nodeclass is None:
        raise NodeClassNotReady(f"EC2NodeClass {claim.nodeclass_name!r} does not exist")
    resolved = _resolved_recently(nodeclass, cloud)
    if not resolved.ready:
        raise NodeClassNotReady(f"EC2NodeClass {nodeclass.name!r} is not ready: {'; '.join(resolved.problems)}")
    options = tuple(
        LaunchOption(
            o["instanceType"],
            o["zone"],
            o["capacityType"],
            float(o["price"]),
            reservation_id=o.get("capacityReservationId", ""),
            reservation_type=o.get("capacityReservationType", ""),
        )
        for o in claim.launch_options
    )
    if not options:
        raise CloudError("the NodeClaim has no instance type options", reason="NoCompatibleInstanceTypes")
    capacity_types = {o.capacity_type for o in options}
    labels = _labels(NodePool.objects.filter(name=claim.nodepool_name).first(), claim.nodepool_name)
    return LaunchRequest(
        nodeclaim_name=claim.name,
        nodeclaim_uid=str(claim.uid),
        nodepool=claim.nodepool_name,
        nodeclass_spec=nodeclass.spec,
        nodeclass=resolved,
        options=options,
        # Upstream's rule: a reservation first, then spot whenever the claim allows it and a
        # spot offering is left, then on-demand.
        capacity_type=next((ct for ct in ("reserved", "spot") if ct in capacity_types), "on-demand"),
        labels=labels,
        taints=tuple(claim.spec.get("taints") or ()),
        # Upstream's price-overlay-applied annotation: EC2 must follow our prices, not its own.
        price_overlaid=any("listPrice" in o for o in claim.launch_options),
    )


def _labels(pool: NodePool | None, name: str) -> dict[str, str]:
    """The labels a launch of NodePool ``name`` gives its node: its template's and its name."""
    labels = {**((pool.spec.get("template") or {}).get("metadata") or {}).get("labels", {})} if pool else {}
    labels["karpenter.sh/nodepool"] = name
    return labels


def warm_launches(cloud: CloudProvider | None = None) -> None:
    """Do now what a process's first launch of each NodePool would otherwise do before its
    CreateFleet, while pods wait: resolve the EC2NodeClass (reused 30 s), learn the launch
    facts of the catalog's instance types (from the catalog: no call) and make sure the
    launch templates exist for each capacity type and AMI the NodePool can launch (known
    60 s). A provider without ``prepare_launch`` has nothing to prepare."""
    from provisioning.services.catalog import load_catalog

    cloud = cloud or get_cloud()
    prepare = getattr(cloud, "prepare_launch", None)
    if prepare is None:
        return
    infos = list(load_catalog().infos.values())
    nodeclasses = {nc.name: nc for nc in EC2NodeClass.objects.all()}
    for pool in NodePool.objects.all():
        template = (pool.spec or {}).get("template") or {}
        spec = template.get("spec") or {}
        nodeclass = nodeclasses.get((spec.get("nodeClassRef") or {}).get("name", ""))
        if nodeclass is None:
            continue
        resolved = _resolved_recently(nodeclass, cloud)
        if not resolved.ready:
            continue
        requirements = spec.get("requirements") or []
        arches = _allowed(requirements, "kubernetes.io/arch", {i.arch for i in resolved.images})
        resolved = dataclasses.replace(resolved, images=tuple(i for i in resolved.images if i.arch in arches))
        for capacity_type in sorted(_allowed(requirements, "karpenter.sh/capacity-type", {"on-demand", "spot"})):
            request = LaunchRequest(
                nodeclaim_name="",
                nodeclaim_uid="",
                nodepool=pool.name,
                nodeclass_spec=nodeclass.spec,
                nodeclass=resolved,
                options=(),
                capacity_type=capacity_type,
                labels=_labels(pool, pool.name),
                taints=tuple(spec.get("taints") or ()),
            )
            prepare(request, infos)
            infos = []  # learnt once


def _allowed(requirements: list[dict[str, Any]], key: str, known: set[str]) -> set[str]:
    """The values of ``known`` a NodePool's requirements on ``key`` allow (upstream's default
    capacity type, when none is required, is on-demand)."""
    allowed = set(known)
    found = False
    for requirement in requirements:
        if requirement.get("key") != key:
            continue
        found = True
        values = set(requirement.get("values") or [])
        if requirement.get("operator") == "In":
            allowed &= values
        elif requirement.get("operator") == "NotIn":
            allowed -= values
    if not found and key == "karpenter.sh/capacity-type":
        return {"on-demand"}
    return allowed


# Launches reuse a recent resolution of their EC2NodeClass (selectors rarely change; the
# beat re-resolves every minute), so a burst of claims is not a burst of Describe calls.
RESOLVED_TTL_SECONDS = 30.0
_resolved: dict[tuple[str, str], tuple[float, ResolvedNodeClass]] = {}


def _resolved_recently(nodeclass: EC2NodeClass, cloud: CloudProvider) -> ResolvedNodeClass:
    key = (nodeclass.name, json.dumps(nodeclass.spec, sort_keys=True))
    hit = _resolved.get(key)
    now = time.monotonic()
    if hit is not None and hit[0] > now and hit[1].ready:
        return hit[1]
    resolved = resolve_nodeclass(nodeclass, cloud)
    _resolved[key] = (now + RESOLVED_TTL_SECONDS, resolved)
    return resolved


def _reserved_price(claim: NodeClaim, instance: Instance) -> tuple[Decimal | None, Decimal | None]:
    """What an instance in a reservation costs: the committed price the EC2NodeClass's
    ``karpweb.io/capacity-reservation-prices`` gives for its reservation, else the on-demand
    price (EC2 bills an ODCR at on-demand rates, used or not); its list price is on-demand.
    (The solver's price, on-demand / 10^7, only orders offerings.)"""
    from provisioning.services.catalog import on_demand_prices

    listed = on_demand_prices().get(instance.instance_type)
    nodeclass = EC2NodeClass.objects.filter(name=claim.nodeclass_name).first()
    committed, _ = reservations.committed_prices(nodeclass.annotations if nodeclass else None)
    paid = committed.get(instance.capacity_reservation_id, listed)
    return _decimal(paid), _decimal(listed)


def _decimal(value: float | None) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _option_of(claim: NodeClaim, reservation_id: str) -> dict[str, Any]:
    return next((o for o in claim.launch_options if o.get("capacityReservationId") == reservation_id), {})


def _price_of(
    claim: NodeClaim, instance_type: str, zone: str, capacity_type: str, reservation_id: str = ""
) -> tuple[Decimal | None, Decimal | None]:
    """The offering's effective price (after NodeOverlays) and its list price (None where none
    is published), as the claim's options recorded them."""
    for option in claim.launch_options:
        if (option["instanceType"], option["zone"], option["capacityType"]) == (
            instance_type,
            zone,
            capacity_type,
        ) and option.get("capacityReservationId", "") == reservation_id:
            listed = option.get("listPrice", option["price"])
            return Decimal(str(option["price"])), None if listed is None else Decimal(str(listed))
    return None, None


# ------------------------------------------------------------------ garbage collection


def collect_garbage(cloud: CloudProvider | None = None, now: datetime | None = None) -> list[str]:
    """Terminate instances of this cluster that no live NodeClaim owns (older than 30 s)."""
    known = set(
        NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES)
        .exclude(instance_id="")
        .values_list("instance_id", flat=True)
    )
    terminated = garbage_collect(cloud or get_cloud(), known, now or datetime.now(UTC))
    for instance_id in terminated:
        log.info("garbage-collected instance %s: no NodeClaim owns it", instance_id)
    return terminated
