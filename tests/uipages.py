"""Rows for the dashboard's tests and benchmark: pods, claims with nodes, decisions and
disruptions, written directly so a page can be checked against known figures."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from provisioning.models import ClusterNode, ClusterPod, Decision, Disruption, NodeClaim


def pod_manifest(
    name: str,
    namespace: str = "default",
    cpu: str = "500m",
    memory: str = "1Gi",
    labels: dict[str, str] | None = None,
    **spec: Any,
):
    """A pod labelled ``app`` after its name (``web-1``: ``web``) and with ``labels``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.rsplit("-", 1)[0], **(labels or {})}},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec},
    }


def add_pod(name: str, namespace: str = "default", node: str = "", reason: str = "", nominated: str = "", **kw):
    manifest = pod_manifest(name, namespace, **kw)
    return ClusterPod.objects.create(
        namespace=namespace,
        name=name,
        manifest=manifest,
        node_name=node,
        phase=ClusterPod.Phase.RUNNING if node else ClusterPod.Phase.PENDING,
        unschedulable_reason=reason,
        nominated=nominated,
        **ClusterPod.request_columns(manifest),
    )


def add_node(
    name: str,
    *,
    nodepool: str = "general",
    instance_type: str = "m5.xlarge",
    capacity_type: str = "spot",
    price: str = "0.0800",
    cpu: str = "3920m",
    memory: str = "14Gi",
    decision: Decision | None = None,
    note: str = "",
    launched_at=None,
    list_price: str | None = None,
) -> NodeClaim:
    claim = NodeClaim.objects.create(
        name=f"{name}-claim",
        nodepool_name=nodepool,
        nodeclass_name="default",
        state=NodeClaim.State.INITIALIZED,
        instance_id=f"i-{abs(hash(name)) % 10**12:012x}",
        instance_type=instance_type,
        zone="us-east-1a",
        capacity_type=capacity_type,
        price_per_hour=Decimal(price),
        list_price_per_hour=None if list_price is None else Decimal(list_price),
        node_name=name,
        decision=decision,
        launched_at=launched_at,
    )
    ClusterNode.objects.create(
        name=name,
        nodeclaim=claim.name,
        nodepool=nodepool,
        ready=True,
        disruption_note=note,
        manifest={"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "58"}}},
    )
    return claim


def add_decision(pods: list[str], unschedulable: list[dict] | None = None, unavailable: dict | None = None) -> Decision:
    return Decision.objects.create(
        pods=pods,
        unschedulable=unschedulable or [],
        timings={"snapshot": 0.01, "solve": 0.05, "record": 0.01},
        catalog_version="us-east-1 2026-07-20",
        total_price_per_hour=Decimal("0.0800"),
        unavailable=unavailable or {},
    )


def add_disruption(nodeclaims: list[str], reason: str = "Underutilized") -> Disruption:
    return Disruption.objects.create(
        reason=reason,
        nodes=[n.removesuffix("-claim") for n in nodeclaims],
        nodeclaims=nodeclaims,
        replacement_plan=[{"instanceType": "m5.large", "capacityType": "spot", "price": 0.04, "pods": 3}],
        savings_per_hour=Decimal("0.0400"),
        explanation="replace node with a cheaper m5.large",
    )
