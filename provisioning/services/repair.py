"""Node repair, as upstream's node health controller (``kubernetes-sigs/karpenter``
``pkg/controllers/node/health``) with the AWS provider's repair policies.

A node of a NodePool whose condition has had a policy's status for the policy's toleration
(``Ready`` False or Unknown 30 min, ``AcceleratedHardwareReady`` False 10 min, ``StorageReady``,
``NetworkingReady``, ``KernelReady``, ``ContainerRuntimeReady`` False 30 min) is terminated
forcefully: no PodDisruptionBudget, do-not-disrupt or disruption budget holds it. Only while the
NodePool's nodes matching a policy are at most ``KARPWEB_REPAIR_MAX_UNHEALTHY`` (20%, rounded
up, as a PDB's percentage) of its nodes: beyond that a broken pool is left alone (the cause is
elsewhere), with a ``NodeRepairBlocked`` event and a new look in 5 minutes.

The policies and the share are settings (``KARPWEB_REPAIR_POLICIES``,
``KARPWEB_REPAIR_MAX_UNHEALTHY``), which upstream does not offer yet (k-sigs#2321).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from provisioning import cluster
from provisioning.disruption.model import parse_duration
from provisioning.disruption.nodes import parse_time
from provisioning.models import ClusterNode, Disruption, Interruption, NodeClaim
from provisioning.services import events

log = logging.getLogger(__name__)

NODEPOOL = "karpenter.sh/nodepool"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
BLOCKED_KEY = "karpweb:repair:blocked:"
RETRY_BLOCKED_SECONDS = 300
UNHEALTHY = "unhealthy"  # the disruption's reason, as upstream's metric label
_PERCENT = re.compile(r"(100|[0-9]{1,2})%")


@dataclass(frozen=True)
class Policy:
    condition: str
    status: str
    toleration_seconds: float


def policies(text: str | None = None) -> tuple[Policy, ...]:
    """``Type=Status:duration`` entries, comma-separated; raises ValueError naming a bad one."""
    text = settings.KARPWEB_REPAIR_POLICIES if text is None else text
    out = []
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        match = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)=(True|False|Unknown):(\S+)", raw)
        if not match:
            raise ValueError(f"KARPWEB_REPAIR_POLICIES: {raw!r}: expected ConditionType=True|False|Unknown:duration")
        seconds = parse_duration(match.group(3), f"KARPWEB_REPAIR_POLICIES {raw}", never=False)
        out.append(Policy(match.group(1), match.group(2), float(seconds or 0)))
    return tuple(out)


def max_unhealthy(total: int, text: str | None = None) -> int:
    """How many of ``total`` nodes may be unhealthy for repair to act: a count, or a percent
    rounded up."""
    text = (settings.KARPWEB_REPAIR_MAX_UNHEALTHY if text is None else text).strip()
    if text.isdigit():
        return int(text)
    if _PERCENT.fullmatch(text):
        return math.ceil(int(text[:-1]) * total / 100)
    raise ValueError(f"KARPWEB_REPAIR_MAX_UNHEALTHY: {text!r}: expected a count or a percent (20%)")


def _conditions(node: ClusterNode) -> dict[str, dict]:
    return {
        c.get("type"): c
        for c in ((node.manifest.get("status") or {}).get("conditions") or [])
        if isinstance(c, dict) and c.get("type")
    }


def matching(node: ClusterNode, rules: tuple[Policy, ...]) -> list[tuple[Policy, dict]]:
    found = _conditions(node)
    return [(p, found[p.condition]) for p in rules if (found.get(p.condition) or {}).get("status") == p.status]


def due(node: ClusterNode, rules: tuple[Policy, ...]) -> tuple[Policy, float] | None:
    """The policy whose toleration ends first on this node, and when (Unix seconds)."""
    best = None
    for policy, condition in matching(node, rules):
        since = parse_time(condition.get("lastTransitionTime"))
        if since is None:
            continue
        at = since + policy.toleration_seconds
        if best is None or at < best[1]:
            best = (policy, at)
    return best


def repair(now: datetime | None = None, redis=None) -> list[Interruption]:
    """One pass over the nodes (every 30 s): repair those due, within the NodePool's share."""
    from provisioning.services import disruption
    from provisioning.services.connections import get_redis

    now = now or datetime.now(UTC)
    rules = policies()
    redis = redis or get_redis()
    nodes = [n for n in ClusterNode.objects.all() if (n.manifest.get("metadata") or {}).get("labels", {}).get(NODEPOOL)]
    if not nodes:
        return []
    going = {
        n for d in Disruption.objects.filter(state__in=disruption.ACTIVE, terminate_by__isnull=False) for n in d.nodes
    }
    by_pool: dict[str, list[ClusterNode]] = {}
    for node in nodes:
        by_pool.setdefault(_labels(node)[NODEPOOL], []).append(node)
    rows = []
    for node in nodes:
        if node.name in going or not node.nodeclaim:
            continue
        found = due(node, rules)
        if found is None or found[1] > now.timestamp():
            continue
        policy, _ = found
        pool = _labels(node)[NODEPOOL]
        members = by_pool[pool]
        sick = sum(1 for n in members if matching(n, rules))
        limit = max_unhealthy(len(members))
        if sick > limit:
            if redis.set(BLOCKED_KEY + node.name, "1", nx=True, ex=RETRY_BLOCKED_SECONDS):
                events.record(events.repair_blocked(node, settings.KARPWEB_REPAIR_MAX_UNHEALTHY), cluster.get_cluster())
                log.warning(
                    "node repair: %s of NodePool %s is unhealthy (%s=%s) but %d of its %d nodes are; "
                    "more than %s: left alone, looked at again in 5 minutes",
                    node.name, pool, policy.condition, policy.status, sick, len(members),
                    settings.KARPWEB_REPAIR_MAX_UNHEALTHY,
                )  # fmt: skip
            continue
        if redis.exists(BLOCKED_KEY + node.name):
            continue  # blocked a moment ago: 5 minutes before it is looked at again
        rows.append(_repair(node, policy, pool, now))
    return rows


def _repair(node: ClusterNode, policy: Policy, pool: str, now: datetime) -> Interruption:
    from provisioning.services import disruption
    from provisioning.services.interruption import node_pods

    claim = NodeClaim.objects.filter(name=node.nodeclaim).first()
    pods = sorted(node_pods(node.name))
    why = f"{policy.condition}={policy.status} for more than {_seconds(policy.toleration_seconds)}"
    forced = disruption.force(node.name, UNHEALTHY, now, forceful=True, explanation=f"node repair: {why}")
    row = Interruption.objects.create(
        source=Interruption.Source.NODE_REPAIR,
        kind=UNHEALTHY,
        summary=why,
        received_at=now,
        instance_id=node.instance_id,
        node=node.name,
        nodeclaim=node.nodeclaim,
        nodepool=pool,
        capacity_type=(claim.capacity_type if claim else "") or _labels(node).get(CAPACITY_TYPE, ""),
        action=f"terminated at once (forceful); {len(pods)} pods planned elsewhere now",
        disruption=forced,
        pods=pods,
        detail={"condition": policy.condition, "status": policy.status, "toleration": policy.toleration_seconds},
    )
    log.info("node repair: %s: %s", node.name, why, extra={"event": "repair", "node": node.name})
    return row


def _labels(node: ClusterNode) -> dict[str, str]:
    return (node.manifest.get("metadata") or {}).get("labels") or {}


def _seconds(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
