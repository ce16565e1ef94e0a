"""The demo workload of the simulated cluster: a few Deployments whose replicas follow
slow waves, so a newcomer's ``make run`` shows launches, consolidation and spend moving;
and a PodDisruptionBudget on ``web`` (one pod unavailable at a time), so a drain of its
nodes waits for each evicted pod to run again."""

from __future__ import annotations

import math
import time

from provisioning.cluster import simulated

# name, cpu, memory, base replicas, swing, period (s), phase
DEPLOYMENTS = (
    ("web", "500m", "1Gi", 12, 10, 180, 0.0),
    ("api", "1", "2Gi", 8, 6, 240, 1.5),
    ("cache", "250m", "4Gi", 4, 3, 300, 3.0),
    ("batch", "2", "2Gi", 3, 3, 120, 4.5),
)
NAMESPACE = "demo"
BUDGET = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "web", "namespace": NAMESPACE},
    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
}


def replicas_at(now: float) -> dict[str, int]:
    return {
        name: max(0, round(base + swing * math.sin(2 * math.pi * now / period + phase)))
        for name, _, _, base, swing, period, phase in DEPLOYMENTS
    }


def step(now: float | None = None) -> dict[str, int]:
    """Scale every demo Deployment to where its wave is now; returns the replica counts."""
    wanted = replicas_at(time.time() if now is None else now)
    for name, cpu, memory, *_ in DEPLOYMENTS:
        template = {
            "metadata": {"labels": {"app": name}},
            "spec": {
                "containers": [
                    {"name": name, "image": f"demo/{name}", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
                ]
            },
        }
        simulated.scale(NAMESPACE, "Deployment", name, template, wanted[name])
    return wanted


def seed_budget() -> list[tuple[str, str]]:
    """Store the demo PodDisruptionBudget (as ``sim apply`` would)."""
    return simulated.apply_budgets(simulated.budget_documents([BUDGET]))
