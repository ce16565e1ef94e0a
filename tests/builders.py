"""Builders with defaults for the documents tests submit."""

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
