"""The Kubernetes Events karpweb records, named and worded as Karpenter's, so ``kubectl describe``
tells the same story: on pods (Nominated, FailedScheduling), on nodes and NodeClaims chosen
for disruption (DisruptionLaunching, DisruptionWaitingReadiness, DisruptionTerminating), on
nodes that may not be disrupted now (DisruptionBlocked), on what a Balanced NodePool approved
consolidating (ConsolidationApproved), and the drain's, as upstream's terminator words them
(Evicted and Disrupted on pods, FailedDraining on nodes)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from provisioning.cluster import get_cluster
from provisioning.cluster.base import Cluster, ObjectEvent, ObjectReference
from provisioning.disruption.balanced import BALANCED_K
from provisioning.disruption.model import PoolScore
from provisioning.models import ClusterNode, ClusterPod, NodeClaim

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"


def record(events: Iterable[ObjectEvent], cluster: Cluster | None = None) -> None:
    """Hand the events to ``cluster`` (default: the configured one); recording is cheap (see
    ``Cluster.record_event``), and an event is never worth failing the caller for."""
    try:
        cluster = cluster or get_cluster()
        for event in events:
            cluster.record_event(event)
    except Exception:
        log.exception("recording events failed")


def pod_ref(pod: ClusterPod) -> ObjectReference:
    # The uid the API server gave the pod (in its mirrored manifest), not the row's own.
    uid = (pod.manifest.get("metadata") or {}).get("uid", "")
    return ObjectReference("Pod", pod.name, namespace=pod.namespace, uid=uid)


def node_ref(node: ClusterNode) -> ObjectReference:
    return ObjectReference("Node", node.name, uid=(node.manifest.get("metadata") or {}).get("uid", ""))


def claim_ref(name: str) -> ObjectReference:
    return ObjectReference("NodeClaim", name, api_version="karpenter.sh/v1")


def nominated(pod: ClusterPod, claim: str) -> ObjectEvent:
    return ObjectEvent(pod_ref(pod), NORMAL, "Nominated", f"Pod should schedule on: nodeclaim/{claim}")


def failed_scheduling(pod: ClusterPod, reason: str) -> ObjectEvent:
    return ObjectEvent(pod_ref(pod), WARNING, "FailedScheduling", f"Failed to schedule pod, {reason}")


def launching(claim: NodeClaim, reason: str) -> ObjectEvent:
    """On a replacement, as it is created."""
    return ObjectEvent(claim_ref(claim.name), NORMAL, "DisruptionLaunching", f"Launching NodeClaim: {reason}")


def waiting_readiness(claim: NodeClaim) -> ObjectEvent:
    """On a replacement not initialized yet: the old nodes wait for it."""
    return ObjectEvent(
        claim_ref(claim.name), NORMAL, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption"
    )


def terminating(node: ClusterNode, reason: str) -> list[ObjectEvent]:
    """On a node being drained for disruption, and on its NodeClaim."""
    events = [ObjectEvent(node_ref(node), NORMAL, "DisruptionTerminating", f"Disrupting Node: {reason}")]
    if node.nodeclaim:
        message = f"Disrupting NodeClaim: {reason}"
        events.append(ObjectEvent(claim_ref(node.nodeclaim), NORMAL, "DisruptionTerminating", message))
    return events


def consolidation_score(score: PoolScore) -> str:
    """An approved Balanced score, as upstream words it."""
    return (
        f"score {score.score:.2f} >= threshold {1 / BALANCED_K:.2f} (k: {BALANCED_K:g}, "
        f"savings {score.saved * 100:.1f}%, disruption {score.disrupted * 100:.1f}%)"
    )


def consolidation_approved(node: ClusterNode, score: PoolScore) -> list[ObjectEvent]:
    """On a node its Balanced NodePool approved consolidating alone, and on its NodeClaim."""
    return _on_claim_and_node(node.nodeclaim, node, NORMAL, "ConsolidationApproved", consolidation_score(score))


def consolidation_approved_pool(nodepool: str, score: PoolScore) -> ObjectEvent:
    """On a Balanced NodePool that approved consolidating several nodes at once."""
    ref = ObjectReference("NodePool", nodepool, api_version="karpenter.sh/v1")
    return ObjectEvent(ref, NORMAL, "ConsolidationApproved", consolidation_score(score))


def blocked(node: ClusterNode, why: str) -> list[ObjectEvent]:
    """On a node that may not be disrupted now, and on its NodeClaim."""
    message = why[:1].upper() + why[1:]
    events = [ObjectEvent(node_ref(node), NORMAL, "DisruptionBlocked", message)]
    if node.nodeclaim:
        events.append(ObjectEvent(claim_ref(node.nodeclaim), NORMAL, "DisruptionBlocked", message))
    return events


def evicted(pod: ClusterPod, reason: str) -> ObjectEvent:
    """On a pod the drain evicted."""
    return ObjectEvent(pod_ref(pod), NORMAL, "Evicted", f"Evicted pod: {reason}")


def disrupted(pod: ClusterPod, granted: int, own: int, deadline: str) -> ObjectEvent:
    """On a pod deleted at its node's terminationGracePeriod, past its PDB and do-not-disrupt."""
    return ObjectEvent(
        pod_ref(pod),
        NORMAL,
        "Disrupted",
        f"Deleting the pod to accommodate the terminationTime {deadline} of the node. The pod was granted "
        f"{granted} seconds of grace-period of its {own} terminationGracePeriodSeconds. This bypasses the PDB of "
        "the pod and the do-not-disrupt annotation.",
    )


def failed_draining(node: ClusterNode, why: str) -> ObjectEvent:
    """On a node whose drain a refused eviction holds up."""
    return ObjectEvent(node_ref(node), WARNING, "FailedDraining", f"Failed to drain node, {why}")


# The interruption controller's, as upstream words them (pkg/controllers/interruption/events):
# on the NodeClaim and on its Node when it has one.
INTERRUPTION_EVENTS = {
    "spot_interrupted": (WARNING, "SpotInterrupted", "Spot interruption warning was triggered"),
    "rebalance_recommendation": (NORMAL, "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered"),
    "instance_stopped": (WARNING, "InstanceStopping", "Instance is stopping"),
    "instance_terminated": (WARNING, "InstanceTerminating", "Instance is terminating"),
    "capacity_reservation_interrupted": (
        WARNING,
        "CapacityReservationInstanceInterrupted",
        "Capacity Reservation interruption warning was triggered",
    ),
    **{
        kind: (WARNING, "InstanceUnhealthy", "An unhealthy warning was triggered for the instance")
        for kind in ("scheduled_change", "instance_status", "system_status", "event_status")
    },
}


def _on_claim_and_node(claim: str, node: ClusterNode | None, kind: str, reason: str, message: str) -> list[ObjectEvent]:
    events = [ObjectEvent(claim_ref(claim), kind, reason, message)] if claim else []
    if node is not None:
        events.append(ObjectEvent(node_ref(node), kind, reason, message))
    return events


def interruption(kind: str, claim: str, node: ClusterNode | None) -> list[ObjectEvent]:
    """What an interruption message says, on the NodeClaim and its Node."""
    if kind not in INTERRUPTION_EVENTS:
        return []
    return _on_claim_and_node(claim, node, *INTERRUPTION_EVENTS[kind])


def terminating_on_interruption(claim: str, node: ClusterNode | None) -> list[ObjectEvent]:
    return _on_claim_and_node(
        claim, node, WARNING, "TerminatingOnInterruption", "Interruption triggered termination for the Node"
    )


def repair_blocked(node: ClusterNode, limit: str) -> list[ObjectEvent]:
    """On a node node repair leaves alone, and its NodeClaim: too many of its NodePool are
    unhealthy (upstream's wording)."""
    message = f"more than {limit} nodes are unhealthy in the nodepool"
    events = [ObjectEvent(node_ref(node), WARNING, "NodeRepairBlocked", message)]
    if node.nodeclaim:
        events.append(ObjectEvent(claim_ref(node.nodeclaim), WARNING, "NodeRepairBlocked", message))
    return events
