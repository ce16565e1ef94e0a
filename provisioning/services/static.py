"""Static NodePools (``spec.replicas``): keep each at its replicas (upstream's static
provisioning and deprovisioning controllers), every ~10 s from Celery beat.

Scale-up creates claims of the NodePool's template (``scheduling.static``), launched as every
claim is. Scale-down (``disruption.static``) deletes claims not launched yet at once and drains
the others as every disruption drains (``disruption.force``: PodDisruptionBudgets and
do-not-disrupt hold it until the terminationGracePeriod), without a replacement and without a
disruption budget. ``status.nodes`` reports the NodePool's live NodeClaims (the scale
subresource's status replicas). A lock keeps one reconcile at a time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from provisioning.cluster.simulated import pod_manifest
from provisioning.disruption.candidates import eviction_cost
from provisioning.disruption.eviction import do_not_disrupt_active, reschedulable
from provisioning.disruption.static import StaticMember, scale_down
from provisioning.models import ClusterNode, ClusterPod, Disruption, NodeClaim, NodePool
from provisioning.scheduling.pods import PodError
from provisioning.scheduling.podspec import pod_from_manifest
from provisioning.scheduling.quantity import QuantityError, to_int
from provisioning.scheduling.static import PoolCount, node_limit, template_claim, to_create, to_remove, unlaunchable

log = logging.getLogger(__name__)

LOCK = "karpweb:static:lock"
SCALE_DOWN = "static_scale_down"  # the reason of a scale-down's drain (the Disruption's and the NodeClaim's)
DRAINING = (Disruption.State.DRAINING,)
WAITING = (Disruption.State.PLANNED, Disruption.State.REPLACING)


@dataclass
class Outcome:
    """What one reconcile did to one static NodePool."""

    nodepool: str
    replicas: int
    count: PoolCount
    created: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodepool": self.nodepool,
            "replicas": self.replicas,
            "running": self.count.running,
            "created": self.created,
            "removed": self.removed,
            "note": self.note,
        }


def static_pools() -> list[NodePool]:
    return [p for p in NodePool.objects.order_by("name") if p.spec.get("replicas") is not None]


def count(nodepool: str) -> PoolCount:
    """The NodePool's live claims: deleting (or draining), pending disruption (a command
    waiting for replacements names them) or running."""
    claims = list(
        NodeClaim.objects.filter(
            nodepool_name=nodepool, state__in=(*NodeClaim.ACTIVE_STATES, NodeClaim.State.DELETING)
        ).values_list("name", "state")
    )
    draining, waiting = set(), set()
    for state, names in (
        Disruption.objects.filter(state__in=(*DRAINING, *WAITING)).values_list("state", "nodeclaims").iterator()
    ):
        (draining if state in DRAINING else waiting).update(names or ())
    deleting = sum(1 for name, state in claims if state == NodeClaim.State.DELETING or name in draining)
    pending = sum(
        1 for name, state in claims if state != NodeClaim.State.DELETING and name not in draining and name in waiting
    )
    return PoolCount(running=len(claims) - deleting - pending, deleting=deleting, pending_disruption=pending)


def ready(pool: NodePool) -> bool:
    """Upstream returns early unless the NodePool's root condition is True; a status that says
    nothing (karpweb's own NodePools) counts as Ready."""
    condition = next((c for c in (pool.status or {}).get("conditions") or () if c.get("type") == "Ready"), None)
    return condition is None or condition.get("status") == "True"


def reconcile(now=None) -> list[Outcome]:
    """Bring every static NodePool to its replicas; then write each one's status.nodes."""
    now = now or timezone.now()
    outcomes = []
    pools = static_pools()
    inputs = None
    for pool in pools:
        replicas = int(pool.spec["replicas"])
        current = count(pool.name)
        outcome = Outcome(pool.name, replicas, current)
        outcomes.append(outcome)
        if not ready(pool):
            outcome.note = f"NodePool {pool.name} is not Ready"
            continue
        wanted = to_create(replicas, current, node_limit(_limits(pool)))
        if wanted:
            inputs = inputs if inputs is not None else _static_inputs()
            _scale_up(pool, wanted, inputs, outcome)
        elif current.running + current.pending_disruption < replicas:
            outcome.note = f"limits.nodes {node_limit(_limits(pool))} reached"
        extra = to_remove(replicas, current)
        if extra:
            _scale_down(pool, extra, now, outcome)
    for pool in pools:
        write_status(pool)
    return outcomes


def _limits(pool: NodePool) -> dict[str, int]:
    """``limits.nodes`` as a number (the validator allows no other limit on a static NodePool)."""
    nodes = (pool.spec.get("limits") or {}).get("nodes")
    if nodes is None:
        return {}
    try:
        return {"nodes": to_int("nodes", nodes)}
    except QuantityError:  # the validator lets nothing through that fails here
        return {}


def _static_inputs() -> dict[str, Any]:
    """The static NodePools as the solver's inputs (instance types of their EC2NodeClass,
    NodeOverlays laid over, the ICE cache applied), by name."""
    from provisioning.services.catalog import load_catalog, unavailable_now
    from provisioning.services.provision import policy_documents
    from provisioning.services.simulate import build_snapshot

    snapshot, _ = build_snapshot(
        policy_documents(),
        catalog=load_catalog(),
        unavailable=unavailable_now().__contains__,
        require_nodeclasses=True,
    )
    return {s.pool.name: s.pool for s in snapshot.static_nodepools}


def _scale_up(pool: NodePool, wanted: int, inputs: dict[str, Any], outcome: Outcome) -> None:
    from provisioning.services.provision import create_claims

    found = inputs.get(pool.name)
    claim = template_claim(found) if found is not None else None
    if claim is None:
        outcome.note = unlaunchable(found) if found is not None else f"NodePool {pool.name} cannot launch now"
        log.warning("static NodePool %s: %s", pool.name, outcome.note)
        return
    with transaction.atomic():
        # Counted again under a lock on the NodePool's row, so two reconciles never both create.
        NodePool.objects.select_for_update().filter(pk=pool.pk).first()
        again = to_create(outcome.replicas, count(pool.name), node_limit(_limits(pool)))
        claims = create_claims([claim] * min(wanted, again)) if again else []
    outcome.created = [c.name for c in claims]
    if claims:
        log.info(
            "static NodePool %s: %d NodeClaims to reach %d replicas",
            pool.name,
            len(claims),
            outcome.replicas,
            extra={"event": "static", "nodepool": pool.name, "nodeclaims": outcome.created},
        )


def members(nodepool: str, now) -> list[StaticMember]:
    """The NodePool's running claims as scale-down weighs them (those deleting, draining or
    pending disruption left out)."""
    busy = {
        n
        for names in Disruption.objects.filter(state__in=(*DRAINING, *WAITING)).values_list("nodeclaims", flat=True)
        for n in names or ()
    }
    claims = [
        c
        for c in NodeClaim.objects.filter(nodepool_name=nodepool, state__in=NodeClaim.ACTIVE_STATES).defer(
            "launch_options", "alternatives", "pods", "why"
        )
        if c.name not in busy
    ]
    pods: dict[str, list] = {}
    nodes = [c.node_name for c in claims if c.node_name]
    for row in ClusterPod.objects.filter(node_name__in=nodes):
        try:
            pod = pod_from_manifest(pod_manifest(row))
        except PodError:
            continue
        pods.setdefault(row.node_name, []).append(pod)
    out = []
    for claim in claims:
        on = pods.get(claim.node_name, []) if claim.node_name else []
        out.append(
            StaticMember(
                name=claim.name,
                launched=bool(claim.instance_id),
                pods=tuple(eviction_cost(p) for p in on if reschedulable(p)),
                do_not_disrupt=any(do_not_disrupt_active(p, now) for p in on),
                created_at=claim.created_at.timestamp(),
            )
        )
    return out


def _scale_down(pool: NodePool, extra: int, now, outcome: Outcome) -> None:
    from provisioning.services import disruption
    from provisioning.services.cloud import get_cloud
    from provisioning.services.provision import terminate_claim

    chosen = scale_down(members(pool.name, now), extra)
    why = f"NodePool {pool.name} scaled down to {outcome.replicas} replicas"
    for member in chosen:
        claim = NodeClaim.objects.get(name=member.name)
        node = ClusterNode.objects.filter(name=claim.node_name).first() if claim.node_name else None
        if node is None:
            # Nothing runs there: its instance (if any) is terminated and the claim deleted.
            if claim.move(NodeClaim.ACTIVE_STATES, NodeClaim.State.DELETING, reason=SCALE_DOWN):
                terminate_claim(claim, get_cloud())
                outcome.removed.append(claim.name)
            continue
        disruption.force(node.name, SCALE_DOWN, now, explanation=why)
        outcome.removed.append(claim.name)
    if outcome.removed:
        log.info(
            "static NodePool %s: removing %d NodeClaims to reach %d replicas",
            pool.name,
            len(outcome.removed),
            outcome.replicas,
            extra={"event": "static", "nodepool": pool.name, "nodeclaims": outcome.removed},
        )


def write_status(pool: NodePool) -> None:
    """``status.nodes``: the NodePool's live NodeClaims (what ``kubectl scale`` reports as its
    current replicas). Written only when it changed."""
    nodes = NodeClaim.objects.filter(nodepool_name=pool.name, state__in=NodeClaim.ACTIVE_STATES).count()
    fresh = NodePool.objects.filter(pk=pool.pk).values_list("status", flat=True).first()
    if fresh is None or (fresh or {}).get("nodes") == nodes:
        return
    NodePool.objects.filter(pk=pool.pk).update(status={**(fresh or {}), "nodes": nodes})
