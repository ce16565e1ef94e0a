"""The lifecycle of nodes in capacity reservations (upstream's
``pkg/controllers/capacityreservation/{capacitytype,expiration}``), run every minute:

* ``demote_left_reservations``: an instance EC2 no longer counts in its reservation (the
  reservation ended or was modified) runs on as on-demand, so its NodeClaim and Node are
  relabelled from ``reserved`` to ``on-demand`` and lose the capacity-reservation labels. A
  Node whose NodeClaim was demoted before is relabelled too.
* ``drain_expiring_capacity_blocks``: a node in a Capacity Block is drained 10 minutes before
  EC2's reclaim window, 40 minutes before the block ends (forcefully, as expiration is).

Interruptible reservations are drained on their interruption warning by the interruption
consumer (``interruption``), which also counts the reservation full.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from provisioning import cluster
from provisioning.cloud import reservations
from provisioning.cloud.base import CloudProvider
from provisioning.models import ClusterNode, EC2NodeClass, NodeClaim

log = logging.getLogger(__name__)

CAPACITY_TYPE = "karpenter.sh/capacity-type"
CAPACITY_BLOCK_EXPIRED = "capacity_block_expiring"


# ------------------------------------------------------------------ for the dashboard


def nodeclass_reservations(nodeclass: EC2NodeClass) -> list[dict]:
    """The reservations an EC2NodeClass's status lists, each with what it costs (its committed
    price, when the annotation gives one) and the NodeClaims running in it now."""
    committed, _ = reservations.committed_prices(nodeclass.annotations)
    entries = reservations.from_status(nodeclass.status)
    running: dict[str, list[str]] = {}
    if entries:
        for claim in NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES, capacity_type="reserved"):
            rid = claim.capacity_reservation_id
            if rid:
                running.setdefault(rid, []).append(claim.name)
    return [
        {
            "reservation": r,
            "committed_price": committed.get(r.id),
            "nodeclaims": sorted(running.get(r.id, [])),
        }
        for r in entries
    ]


# ------------------------------------------------------------------ the counts between two describes


def mark_launched(reservation_id: str) -> int:
    """An instance launched into the reservation: one fewer left, on every EC2NodeClass that
    lists it, until DescribeCapacityReservations is read again (upstream's ``MarkLaunched``),
    so the next provisioning run does not plan on a place just taken."""
    return _update_count(reservation_id, lambda n: max(0, n - 1))


def mark_terminated(reservation_id: str) -> int:
    """An instance of the reservation terminated: one more left (``MarkTerminated``)."""
    return _update_count(reservation_id, lambda n: n + 1)


def mark_full(reservation_id: str) -> int:
    """The reservation is being reclaimed (an interruptible reservation's warning): none left."""
    return _update_count(reservation_id, lambda n: 0)


def _update_count(reservation_id: str, change: Callable[[int], int]) -> int:
    """Apply ``change`` to the reservation's ``availableInstanceCount`` on the EC2NodeClasses
    whose status lists it (nothing for a reservation none lists); the rows changed."""
    changed = 0
    for nodeclass in EC2NodeClass.objects.all():  # a few rows
        status = dict(nodeclass.status or {})
        entries = status.get("capacityReservations") or []
        updated = [
            {**e, "availableInstanceCount": change(int(e.get("availableInstanceCount") or 0))}
            if isinstance(e, dict) and e.get("id") == reservation_id
            else e
            for e in entries
        ]
        if updated != entries:
            status["capacityReservations"] = updated
            changed += EC2NodeClass.objects.filter(pk=nodeclass.pk).update(status=status)
    return changed


def without_claims_launching(documents: list[dict]) -> list[dict]:
    """The policy documents with each EC2NodeClass's reservation counts less the NodeClaims
    planned into them that have not launched yet (pending or launching: a launch counts itself
    in with ``mark_launched``), so a provisioning run does not plan on a place another run took."""
    taken: dict[str, int] = {}
    launching = (NodeClaim.State.PENDING, NodeClaim.State.LAUNCHING)
    for options in NodeClaim.objects.filter(state__in=launching).values_list("launch_options", flat=True):
        rid = (options or [{}])[0].get("capacityReservationId")
        if rid:
            taken[rid] = taken.get(rid, 0) + 1
    if not taken:
        return documents
    out = []
    for document in documents:
        entries = (
            ((document.get("status") or {}).get("capacityReservations") or [])
            if document.get("kind") == "EC2NodeClass"
            else []
        )
        if any(isinstance(e, dict) and e.get("id") in taken for e in entries):
            counted = [
                {**e, "availableInstanceCount": max(0, int(e.get("availableInstanceCount") or 0) - taken[e["id"]])}
                if isinstance(e, dict) and e.get("id") in taken
                else e
                for e in entries
            ]
            document = {**document, "status": {**document["status"], "capacityReservations": counted}}
        out.append(document)
    return out


# ------------------------------------------------------------------ lifecycle


def demote_left_reservations(cloud: CloudProvider | None = None) -> list[str]:
    """NodeClaims (and their Nodes) relabelled on-demand because their instance left its
    reservation; returns their names."""
    from provisioning.services.cloud import get_cloud

    claims = list(
        NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES, capacity_type="reserved").exclude(instance_id="")
    )
    demoted: list[str] = []
    if claims:
        cloud = cloud or get_cloud()
        found = {i.id: i for i in cloud.list_instances([c.instance_id for c in claims])}
        for claim in claims:
            instance = found.get(claim.instance_id)
            if instance is None or instance.capacity_reservation_id:
                continue  # gone (garbage collection's), or still in its reservation
            labels = {
                k: v for k, v in (claim.spec.get("labels") or {}).items() if k not in reservations.RESERVATION_LABELS
            }
            launched = {k: v for k, v in (claim.spec.get("launched") or {}).items() if k != "capacityReservationId"}
            spec = {**claim.spec, "labels": labels, **({"launched": launched} if "launched" in claim.spec else {})}
            if NodeClaim.objects.filter(pk=claim.pk, capacity_type="reserved").update(
                capacity_type="on-demand", spec=spec
            ):
                demoted.append(claim.name)
                log.info(
                    "nodeclaim %s: instance %s left its capacity reservation; now on-demand",
                    claim.name,
                    claim.instance_id,
                )
    _demote_nodes()
    return demoted


def _demote_nodes() -> None:
    """Nodes still labelled reserved whose NodeClaim is not (demoted earlier, or just now)."""
    on_demand = dict(
        NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES)
        .exclude(capacity_type="reserved")
        .exclude(node_name="")
        .values_list("node_name", "name")
    )
    target = cluster.get_cluster()
    for node in ClusterNode.objects.filter(name__in=list(on_demand)):
        labels = (node.manifest.get("metadata") or {}).get("labels") or {}
        if labels.get(CAPACITY_TYPE) != "reserved":
            continue
        target.label(node.name, CAPACITY_TYPE, "on-demand")
        for key in reservations.RESERVATION_LABELS:
            if key in labels:
                target.unlabel(node.name, key)


def drain_expiring_capacity_blocks(now: datetime | None = None) -> list[str]:
    """Force the disruption of every node in a Capacity Block within its expiration window;
    returns the NodeClaims disrupted."""
    from provisioning.services import disruption

    now = now or datetime.now(UTC)
    blocks: dict[str, str | None] = {}
    for status in EC2NodeClass.objects.values_list("status", flat=True):
        for r in reservations.from_status(status):
            if r.reservation_type == "capacity-block":
                blocks[r.id] = r.end_time
    drained = []
    for claim in NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES, capacity_type="reserved"):
        rid = claim.node_labels().get(reservations.RESERVATION_ID_LABEL, "")
        if rid not in blocks or not reservations.expiring(blocks[rid], "capacity-block", now):
            continue
        if claim.node_name:
            disruption.force(
                claim.node_name,
                CAPACITY_BLOCK_EXPIRED,
                now,
                forceful=True,
                explanation=f"capacity block {rid} ends at {blocks[rid]}: drained before EC2 reclaims it",
            )
        else:
            from provisioning.services.cloud import get_cloud
            from provisioning.services.provision import terminate_claim

            if claim.move(NodeClaim.ACTIVE_STATES, NodeClaim.State.DELETING, reason=CAPACITY_BLOCK_EXPIRED):
                terminate_claim(claim, get_cloud())
        drained.append(claim.name)
    return drained
