"""What the dashboard and the REST API list: pending pods, nodes with their usage, decisions
with their claims. Each function is a fixed number of queries whatever the number of rows,
so a page of a large cluster renders as fast as one of a small cluster."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery, Sum

from provisioning.models import ClusterNode, ClusterPod, Decision, Disruption, Interruption, NodeClaim
from provisioning.scheduling.quantity import to_int

# ------------------------------------------------------------------ pods


def pending_pods(namespace: str = "", nodepool: str = "") -> QuerySet[ClusterPod]:
    """Pods without a node, each with the NodePool of the claim it is nominated to (or "")."""
    pods = ClusterPod.objects.filter(node_name="").annotate(
        nominated_pool=Subquery(NodeClaim.objects.filter(name=OuterRef("nominated")).values("nodepool_name")[:1])
    )
    if namespace:
        pods = pods.filter(namespace=namespace)
    if nodepool:
        pods = pods.filter(nominated__in=NodeClaim.objects.filter(nodepool_name=nodepool).values("name"))
    return pods.order_by("created_at", "namespace", "name")


def pending_namespaces() -> list[str]:
    return list(ClusterPod.objects.filter(node_name="").values_list("namespace", flat=True).distinct().order_by())


# ------------------------------------------------------------------ nodes


@dataclass
class NodeRow:
    claim: NodeClaim
    node: ClusterNode | None
    pods: int = 0
    cpu_requested: int = 0  # millicores
    memory_requested: int = 0  # bytes
    cpu_allocatable: int = 0
    memory_allocatable: int = 0

    @property
    def cpu_percent(self) -> float:
        return _percent(self.cpu_requested, self.cpu_allocatable)

    @property
    def memory_percent(self) -> float:
        return _percent(self.memory_requested, self.memory_allocatable)

    @property
    def cpu_label(self) -> str:
        return f"{self.cpu_requested / 1000:.2f} of {self.cpu_allocatable / 1000:.2f} cores"

    @property
    def memory_label(self) -> str:
        return f"{self.memory_requested / 2**30:.1f} of {self.memory_allocatable / 2**30:.1f} GiB"


def _percent(part: int, whole: int) -> float:
    return min(100.0, 100.0 * part / whole) if whole else 0.0


def nodeclaims(nodepool: str = "", capacity_type: str = "", state: str = "") -> QuerySet[NodeClaim]:
    """Claims not yet gone (or in ``state``), newest first, filtered as the nodes page and the
    API filter them."""
    live = (*NodeClaim.ACTIVE_STATES, NodeClaim.State.DELETING)
    claims = NodeClaim.objects.filter(state=state) if state else NodeClaim.objects.filter(state__in=live)
    if nodepool:
        claims = claims.filter(nodepool_name=nodepool)
    if capacity_type:
        claims = claims.filter(capacity_type=capacity_type)
    return claims.order_by("-created_at", "-id")


def node_rows(claims: Sequence[NodeClaim]) -> list[NodeRow]:
    """Each claim with its Node and what the pods on it request against what it offers."""
    node_names = [c.node_name for c in claims if c.node_name]
    nodes = {n.name: n for n in ClusterNode.objects.filter(name__in=node_names)}
    usage = usage_by_node(node_names)
    rows = []
    for claim in claims:
        node = nodes.get(claim.node_name)
        used = usage.get(claim.node_name, {})
        allocatable = _allocatable(node.manifest if node else None)
        rows.append(
            NodeRow(
                claim,
                node,
                pods=used.get("pods", 0),
                cpu_requested=used.get("cpu") or 0,
                memory_requested=used.get("memory") or 0,
                cpu_allocatable=allocatable.get("cpu", 0),
                memory_allocatable=allocatable.get("memory", 0),
            )
        )
    return rows


def usage_by_node(node_names: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per node: its pods and what they request, ``{"pods", "cpu" (millicores), "memory" (bytes)}``."""
    return {
        row["node_name"]: row
        for row in ClusterPod.objects.filter(node_name__in=node_names)
        .values("node_name")
        .annotate(pods=Count("id"), cpu=Sum("cpu_millis"), memory=Sum("memory_bytes"))
        .order_by()
    }


def _allocatable(manifest: Any) -> dict[str, int]:
    allocatable = ((manifest or {}).get("status") or {}).get("allocatable") or {}
    out = {}
    for resource in ("cpu", "memory"):
        try:
            out[resource] = to_int(resource, allocatable[resource])
        except (KeyError, ValueError, ArithmeticError):
            continue
    return out


def pods_on(node_name: str) -> QuerySet[ClusterPod]:
    return ClusterPod.objects.filter(node_name=node_name).order_by("namespace", "name")


# ------------------------------------------------------------------ decisions


def decisions() -> QuerySet[Decision]:
    # The pod lists can be long; a list page needs only their lengths, which claim_counts
    # and the JSON lengths give without loading the claims.
    return Decision.objects.order_by("-started_at", "-id")


def claim_counts(decision_ids: Iterable[int]) -> dict[int, int]:
    return dict(
        NodeClaim.objects.filter(decision_id__in=list(decision_ids))
        .values("decision_id")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("decision_id", "n")
    )


@dataclass
class ClaimExplanation:
    claim: NodeClaim
    chosen: dict[str, Any]
    alternatives: list[dict[str, Any]]
    unavailable: list[tuple[str, str]] = field(default_factory=list)  # (offering, reason)
    # NodeOverlay → how many of the offerings handed to the launch it priced
    overlaid: list[tuple[str, int]] = field(default_factory=list)


def explain(decision: Decision) -> list[ClaimExplanation]:
    """Per claim of one decision: the offering it launched (or would launch first), the next
    cheapest alternatives, and the unavailable offerings of the types it could have used."""
    out = []
    for claim in decision.claims.order_by("id"):
        options = claim.launch_options or []
        chosen = (
            {
                **next(
                    (
                        o
                        for o in options
                        if (o.get("instanceType"), o.get("zone"), o.get("capacityType"))
                        == (claim.instance_type, claim.zone, claim.capacity_type)
                    ),
                    {},
                ),
                "instanceType": claim.instance_type,
                "capacityType": claim.capacity_type,
                "zone": claim.zone,
                "price": float(claim.price_per_hour) if claim.price_per_hour is not None else None,
            }
            if claim.instance_type
            else (options[0] if options else {})
        )
        overlaid = Counter(name for o in options if "listPrice" in o for name in o.get("overlays") or ())
        chosen = _with_list_price(chosen)
        alternatives = [_with_list_price(a) for a in (claim.alternatives or [])[:5]]
        types = {o.get("instanceType") for o in options} | {o.get("instanceType") for o in claim.alternatives or []}
        unavailable = sorted(
            (offering, reason)
            for offering, reason in (decision.unavailable or {}).items()
            if offering.split(":")[1:2] and offering.split(":")[1] in types
        )
        out.append(ClaimExplanation(claim, chosen, alternatives, unavailable, sorted(overlaid.items())))
    return out


def _with_list_price(option: dict[str, Any]) -> dict[str, Any]:
    """An option row with ``listed``: its price before NodeOverlays (None: none published)."""
    if not option:
        return option
    return {**option, "listed": option["listPrice"] if "listPrice" in option else option.get("price")}


def disruptions() -> QuerySet[Disruption]:
    return Disruption.objects.order_by("-planned_at", "-id")


def interruptions() -> QuerySet[Interruption]:
    """What AWS said about the instances and what node repair found, newest first."""
    return Interruption.objects.select_related("disruption").order_by("-received_at", "-id")


def with_recovery(rows) -> list[tuple[Interruption, float | None]]:
    """Each row with how long its node's pods took to run again (None while they wait)."""
    from provisioning.services.interruption import pods_bound, pods_running_again

    rows = list(rows)
    bound = pods_bound(rows)
    return [(row, pods_running_again(row, bound)) for row in rows]


def disruptions_of(nodeclaim: str) -> QuerySet[Disruption]:
    # The quoted name matches one element of the JSON list, on SQLite and PostgreSQL alike.
    return disruptions().filter(nodeclaims__icontains=f'"{nodeclaim}"')
