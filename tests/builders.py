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
