"""From the cluster's nodes to disruption candidates: which pods each would move, and what
forbids disrupting it, as upstream's ``StateNode.ValidateNodeDisruptable`` and
``ValidatePodsDisruptable`` decide it.

A node is blocked by ``karpenter.sh/do-not-disrupt`` on itself, on its NodeClaim or in its
NodePool's ``spec.template.metadata.annotations`` ("true", or a duration counted from the
node's creation); by a pod's do-not-disrupt (any active pod: DaemonSet and mirror pods may
block too, as upstream); or by a PodDisruptionBudget that allows no eviction of one of its
pods now, or by two budgets selecting one pod (the eviction API refuses those).

The service builds the same candidates from its rows as ``simulate --disruption`` does from
documents, so what the what-if says is what the controller does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from provisioning.crd.ec2nodeclass import go_duration_nanos
from provisioning.disruption.eviction import DO_NOT_DISRUPT, Limits, active, do_not_disrupt_active
from provisioning.disruption.model import Candidate
from provisioning.scheduling.frozen import EMPTY_MAP
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.workloads import ExistingNode

POOL = "pool"  # a claim that records no expireAfter of its own follows its NodePool's


@dataclass(frozen=True)
class Claim:
    """What Karpenter's NodeClaim says of its node (the Node alone does not say it)."""

    name: str
    nodepool: str
    instance_type: str
    capacity_type: str
    zone: str
    price_per_hour: float
    created_at: float
    initialized: bool = True
    annotations: Mapping[str, str] = EMPTY_MAP
    expire_after_seconds: float | None | str = POOL
    termination_grace_period_seconds: float | None | str = POOL
    drift_reason: str | None = None
    drifted_at: float | None = None
    disrupting: bool = False  # being replaced, drained or deleted already
    nominated: bool = False  # pending pods are nominated to it: the provisioner counts on its room
    # When single-node consolidations of it were cancelled on their re-check lately (epoch seconds).
    recheck_cancelled: tuple[float, ...] = ()


def annotation_blocks(value: str | None, since: float | None, now: float) -> bool:
    """``karpenter.sh/do-not-disrupt``: "true" always; a duration while ``since`` is younger."""
    if value is None:
        return False
    if value == "true":
        return True
    nanos = go_duration_nanos(value)
    if nanos is None or nanos <= 0:
        return False
    return since is None or now - since < nanos / 1e9


def node_block(
    node: ExistingNode, claim: Claim, pool_annotations: Mapping[str, str], now: float
) -> str | None:
    """Why the node itself may not be disrupted voluntarily, or None."""
    if claim.nominated:
        return "the node is nominated for a pending pod: the provisioner counts on its room"
    for where, values in (
        ("the node", node.annotations),
        (f"NodeClaim {claim.name}", claim.annotations),
        (f"NodePool {claim.nodepool}'s template", pool_annotations),
    ):
        value = values.get(DO_NOT_DISRUPT)
        if annotation_blocks(value, claim.created_at, now):
            kind = "" if value == "true" else f" ({value}, not yet elapsed)"
            return f"{where} has the {DO_NOT_DISRUPT} annotation{kind}"
    return None


def pod_block(pods: Sequence[Pod], limits: Limits, now: float) -> str | None:
    """Why the node's pods keep it (a do-not-disrupt pod, a PodDisruptionBudget), or None."""
    moment = datetime.fromtimestamp(now, UTC)
    for pod in pods:
        if active(pod) and do_not_disrupt_active(pod, moment):
            return f"pod {pod.key} has the {DO_NOT_DISRUPT} annotation"
    for pod in pods:
        budgets = limits.blockers(pod, moment)
        if len(budgets) > 1:
            names = ", ".join(b.key for b in budgets)
            return f"pod {pod.key} is selected by {len(budgets)} PodDisruptionBudgets ({names}): eviction refuses it"
        if budgets:
            return f"PodDisruptionBudget {budgets[0].key} allows no disruption of pod {pod.key} now"
    return None


def candidate(
    node: ExistingNode,
    claim: Claim,
    *,
    pool_annotations: Mapping[str, str] = EMPTY_MAP,
    limits: Limits,
    now: float,
    last_pod_change_at: float | None = None,
) -> Candidate:
    """The node as a disruption candidate: the pods it would move and what blocks it. A pod a
    budget blocks for good, or that asks not to be disrupted, is not moved: no capacity is
    planned for it (upstream's IsCurrentlyReschedulable); the drain waits for it instead."""
    moment = datetime.fromtimestamp(now, UTC)
    moving = tuple(pod for pod in node.pods if limits.currently_reschedulable(pod, moment))
    node_blocked = node_block(node, claim, pool_annotations, now)
    pods_blocked = pod_block(node.pods, limits, now)
    return Candidate(
        name=node.name,
        nodeclaim=claim.name,
        nodepool=claim.nodepool,
        instance_type=claim.instance_type,
        capacity_type=claim.capacity_type,
        zone=claim.zone,
        price_per_hour=claim.price_per_hour,
        created_at=claim.created_at,
        initialized=claim.initialized,
        pods=moving,
        last_pod_change_at=last_pod_change_at if last_pod_change_at is not None else claim.created_at,
        drift_reason=claim.drift_reason,
        drifted_at=claim.drifted_at,
        blocked_by=node_blocked or pods_blocked,
        blocked_by_pods_only=node_blocked is None and pods_blocked is not None,
        disrupting=claim.disrupting or node.deleting,
        ready=node.ready,
        expire_after_seconds=claim.expire_after_seconds,
        termination_grace_period_seconds=claim.termination_grace_period_seconds,
        unconsolidatable=unconsolidatable(node, claim),
        recheck_cancelled=claim.recheck_cancelled,
    )


REQUIRED_LABELS = ("node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "karpenter.sh/capacity-type")


def unconsolidatable(node: ExistingNode, claim: Claim) -> str | None:
    """What keeps the node out of consolidation (upstream's computeConsolidation): a label its
    price and replacements are read from is missing."""
    missing = [key for key in REQUIRED_LABELS if not node.labels.get(key)]
    if missing:
        return f"the node has no {', '.join(missing)} label, so what it costs and what could replace it is unknown"
    return None


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 timestamp as epoch seconds (None when absent or unreadable)."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
