"""The demo workload of the simulated cluster: a few Deployments whose replicas follow
slow waves, so a newcomer's ``make run`` shows launches, consolidation and spend moving (the
on-demand ``cache`` priced through the demo's NodeOverlay, a Savings Plan; the GPU ``train``
filling the demo's capacity reservation first), in four namespaces and labelled with the team
that owns them (one is not, as in any real cluster), so the spend page has allocation by
namespace and by team to show;
a PodDisruptionBudget on ``web`` (one pod unavailable at a time), so a drain of its nodes
waits for each evicted pod to run again; and now and then a spot interruption of one of its
spot nodes, sent through the simulated AWS as EC2 would send it, so the warning, the early
replacement and the drain show on the overview and the Interruptions page."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
import urllib.request

from provisioning.cluster import simulated

log = logging.getLogger(__name__)

# name, cpu, memory, base replicas, swing, period (s), phase, namespace, team label ("": none)
DEPLOYMENTS = (
    ("web", "500m", "1Gi", 12, 10, 180, 0.0, "demo", "storefront"),
    ("api", "1", "2Gi", 8, 6, 240, 1.5, "demo", "payments"),
    ("cache", "250m", "4Gi", 4, 3, 300, 3.0, "platform", "platform"),
    ("batch", "2", "2Gi", 3, 3, 120, 4.5, "analytics", ""),
    ("train", "2", "8Gi", 3, 1, 400, 0.0, "ml", "research"),
)
# train's pods each want a GPU: NodePool gpu launches them, into the demo's reservation first.
EXTENDED = {"train": {"nvidia.com/gpu": "1"}}
TOLERATIONS = {"train": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
# The demo's capacity reservation in the simulated AWS, which EC2NodeClass gpu selects by tag.
RESERVATION = {
    "id": "cr-0demogpu00000001",
    "instanceType": "g5.xlarge",
    "availabilityZone": "us-east-1a",
    "count": 2,
    "tags": {"karpweb.io/demo": "gpu"},
}
# A cache is not to be interrupted: its pods run on demand, where the demo's NodeOverlay (a
# Compute Savings Plan) makes r7i cheaper than the r6g it would get at list price.
NODE_SELECTORS = {"cache": {"karpenter.sh/capacity-type": "on-demand"}}
NAMESPACE = "demo"  # web's, and its PodDisruptionBudget's
BUDGET = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "web", "namespace": NAMESPACE},
    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
}


def replicas_at(now: float) -> dict[str, int]:
    return {
        name: max(0, round(base + swing * math.sin(2 * math.pi * now / period + phase)))
        for name, _, _, base, swing, period, phase, _, _ in DEPLOYMENTS
    }


def step(now: float | None = None) -> dict[str, int]:
    """Scale every demo Deployment to where its wave is now; returns the replica counts."""
    wanted = replicas_at(time.time() if now is None else now)
    for name, cpu, memory, _, _, _, _, namespace, team in DEPLOYMENTS:
        labels = {"app": name, "team": team} if team else {"app": name}
        template = {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": name,
                        "image": f"demo/{name}",
                        "resources": {
                            "requests": {"cpu": cpu, "memory": memory, **EXTENDED.get(name, {})},
                            **({"limits": EXTENDED[name]} if name in EXTENDED else {}),
                        },
                    }
                ],
                **({"nodeSelector": NODE_SELECTORS[name]} if name in NODE_SELECTORS else {}),
                **({"tolerations": TOLERATIONS[name]} if name in TOLERATIONS else {}),
            },
        }
        simulated.scale(namespace, "Deployment", name, template, wanted[name])
        if namespace != NAMESPACE:  # all of the demo ran in one namespace once: its pods there go
            simulated.scale(NAMESPACE, "Deployment", name, template, 0)
    return wanted


def seed_reservation(endpoint: str | None = None) -> str:
    """Create the demo's capacity reservation in the simulated AWS (each start: it keeps none),
    unless it is there; returns what was done, for the console."""
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL", "")
    if not endpoint:
        return "no simulated AWS endpoint: no demo capacity reservation"
    base = f"{endpoint.rstrip('/')}/_karpweb/capacity-reservations"
    try:
        with urllib.request.urlopen(base, timeout=10) as answer:
            existing = {r["id"] for r in json.load(answer)["capacityReservations"]}
        if RESERVATION["id"] in existing:
            return f"demo capacity reservation {RESERVATION['id']} exists"
        request = urllib.request.Request(
            base, data=json.dumps(RESERVATION).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
    except (OSError, ValueError, KeyError) as exc:
        log.warning("demo capacity reservation not created: %s", exc)
        return f"demo capacity reservation not created ({exc})"
    return (
        f"Created the demo capacity reservation {RESERVATION['id']} in the simulated AWS "
        f"({RESERVATION['count']} x {RESERVATION['instanceType']} in {RESERVATION['availabilityZone']})"
    )


def resolve_reservations() -> list[str]:
    """Resolve the EC2NodeClasses that select capacity reservations; their names (none when
    the simulated AWS cannot be reached: the beat resolves them a minute later)."""
    from provisioning.models import EC2NodeClass
    from provisioning.services.cloud import resolve_nodeclass

    if not os.environ.get("AWS_ENDPOINT_URL"):
        return []  # no simulated AWS to ask
    resolved = []
    for nodeclass in EC2NodeClass.objects.order_by("name"):
        if not (nodeclass.spec or {}).get("capacityReservationSelectorTerms"):
            continue
        try:
            resolve_nodeclass(nodeclass)
        except Exception as exc:  # noqa: BLE001  (the demo starts all the same)
            log.warning("demo: EC2NodeClass %s not resolved: %s", nodeclass.name, exc)
            continue
        resolved.append(nodeclass.name)
    return resolved


def seed_budget() -> list[tuple[str, str]]:
    """Store the demo PodDisruptionBudget (as ``sim apply`` would)."""
    return simulated.apply_budgets(simulated.budget_documents([BUDGET]))


INTERRUPT_EVERY = 600.0  # seconds between two spot interruptions of the demo, about
INTERRUPTED_KEY = "karpweb:demo:interrupted-at"


def interrupt_now_and_then(redis, now: float | None = None, endpoint: str | None = None) -> str | None:
    """About every ``INTERRUPT_EVERY`` seconds, a spot interruption warning for one spot node
    (the simulated AWS's ``POST /_karpweb/interrupt``); the instance it chose, or None."""
    from provisioning.models import ClusterNode, NodeClaim

    now = time.time() if now is None else now
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL", "")
    if not endpoint:
        return None
    if not redis.set(INTERRUPTED_KEY, repr(now), nx=True, ex=int(INTERRUPT_EVERY)):
        return None  # one lately (the key expires when the next is due)
    running = set(ClusterNode.objects.filter(ready=True).values_list("instance_id", flat=True))
    spot = sorted(
        i
        for i in NodeClaim.objects.filter(capacity_type="spot", state=NodeClaim.State.INITIALIZED).values_list(
            "instance_id", flat=True
        )
        if i in running
    )
    if not spot:
        redis.delete(INTERRUPTED_KEY)  # none to interrupt yet: try again next step
        return None
    chosen = random.choice(spot)
    body = json.dumps({"instanceIds": [chosen], "kind": "spot-interruption"}).encode()
    request = urllib.request.Request(
        f"{endpoint.rstrip('/')}/_karpweb/interrupt", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 (the simulated AWS's URL)
            answer.read()
    except OSError as exc:
        log.warning("demo: the spot interruption of %s was not sent: %s", chosen, exc)
        return None
    log.info("demo: the simulated AWS interrupts spot instance %s (a 2-minute warning)", chosen)
    return chosen
