"""Builders with defaults for the documents tests submit, and the NodeClaim rows they read."""

from __future__ import annotations


def deployment(name: str, replicas: int, cpu: str = "500m", memory: str = "1Gi", **spec) -> dict:
    """An apps/v1 Deployment whose one container requests ``cpu`` and ``memory``; ``spec``
    adds fields to the pod template's spec (affinity, tolerations, ...)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
                    ],
                    **spec,
                },
            },
        },
    }


def requirement(key: str, *values: str, operator: str = "In") -> dict:
    return {"key": key, "operator": operator, "values": list(values)}


def nodepool(
    *requirements: dict, name: str = "general", nodeclass: str = "default", disruption: dict | None = None
) -> dict:
    """A karpenter.sh/v1 NodePool with ``requirements`` on the EC2NodeClass ``nodeclass``;
    ``disruption`` as spec.disruption when given."""
    spec: dict = {
        "template": {
            "spec": {
                "requirements": list(requirements),
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
            }
        }
    }
    if disruption is not None:
        spec["disruption"] = disruption
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


# Consolidate as soon as it pays: what the pipeline and disruption tests want to see.
CONSOLIDATE_AT_ONCE = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}


def nodeclaim(
    name: str,
    price: float | None,
    *,
    launched_at=None,
    deleted_at=None,
    created_at=None,
    nodepool: str = "general",
    capacity_type: str = "on-demand",
    instance_type: str = "m5.large",
    instance_id: str | None = None,
):
    """A NodeClaim row as the pipeline leaves it: launched (with an instance) when
    ``launched_at`` is given, terminated when ``deleted_at`` is; ``created_at`` is set after
    the insert, as auto_now_add would ignore it."""
    from provisioning.models import NodeClaim

    if instance_id is None:
        instance_id = f"i-{name}" if launched_at else ""
    if deleted_at:
        state = NodeClaim.State.TERMINATED
    else:
        state = NodeClaim.State.INITIALIZED if instance_id else NodeClaim.State.PENDING
    claim = NodeClaim.objects.create(
        name=name,
        nodepool_name=nodepool,
        nodeclass_name="default",
        state=state,
        instance_id=instance_id,
        instance_type=instance_type,
        capacity_type=capacity_type,
        price_per_hour=price,
        launched_at=launched_at,
        deleted_at=deleted_at,
    )
    if created_at or launched_at:
        NodeClaim.objects.filter(pk=claim.pk).update(created_at=created_at or launched_at)
    return claim


def on_demand_general() -> dict:
    """The NodePool most tests launch with: on-demand c, m and r types (the seed's NodePool
    names instance families that do not exist, so it launches nothing)."""
    return nodepool(
        requirement("karpenter.sh/capacity-type", "on-demand"),
        requirement("karpenter.k8s.aws/instance-category", "c", "m", "r"),
    )


def mark_launched(claims, launched_at) -> None:
    """Move pending NodeClaims to launched on their first option, as a worker would after
    the cloud answered, so the simulated kubelet registers them without a cloud."""
    from provisioning.models import NodeClaim

    for claim in claims:
        option = claim.launch_options[0]
        claim.move(
            NodeClaim.State.PENDING,
            NodeClaim.State.LAUNCHED,
            instance_id=f"i-{claim.pk:012x}00000",  # unique in the 12 digits a node is named by
            instance_type=option["instanceType"],
            zone=option["zone"],
            capacity_type=option["capacityType"],
            price_per_hour=option["price"],
            launched_at=launched_at,
        )
