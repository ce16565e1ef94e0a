"""LP-guided packing: which instance types the LP relaxation gives each pod class."""

from __future__ import annotations

from collections.abc import Callable

from provisioning.crd.labels import CAPACITY_TYPE, ZONE
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.preferences import variants
from provisioning.scheduling.requirements import Requirements
from provisioning.scheduling.snapshot import Snapshot
from provisioning.scheduling.taints import untolerated


def lp_support(snapshot: Snapshot, time_limit: float = 10.0) -> dict[str, dict[tuple, frozenset[str]]]:
    """Per NodePool and pod class, the instance types the LP relaxation packs it into.

    Pods are grouped by requests and requirements into classes, each class given to the
    first NodePool (by weight) it is compatible with. The LP's fractional optimum mixes
    the types whose shapes suit the pods best; opening each class's claims on its types
    is the rounding step."""
    from provisioning.scheduling.lowerbound import PodClass, lp_lower_bound

    if time_limit <= 0:
        return {}
    pools = sorted(snapshot.nodepools, key=lambda p: (-p.weight, p.name))
    shapes: dict[object, tuple[Pod, int]] = {}
    for pod in snapshot.pods:
        first, count = shapes.get(pod.shape_key, (pod, 0))
        shapes[pod.shape_key] = (first, count + 1)
    classes: dict[str, dict[tuple, list]] = {p.name: {} for p in pools}
    for pod, count in shapes.values():
        requirements = variants(pod, False)[0].requirements
        for pool in pools:
            if pool.requirements.compatible(requirements) is None and not untolerated(pod.tolerations, pool.taints):
                entry = classes[pool.name].setdefault(class_key(pod, requirements), [pod.requests, requirements, 0])
                entry[2] += count
                break
    support: dict[str, dict[tuple, frozenset[str]]] = {}
    for pool in pools:
        if not classes[pool.name] or not pool.instance_types:
            continue
        keys = list(classes[pool.name])
        merged = [
            PodClass(count, requests, matcher(pool.requirements.merge(reqs)))
            for requests, reqs, count in classes[pool.name].values()
        ]
        bound = lp_lower_bound(merged, pool.instance_types, time_limit=time_limit)
        assigned = {keys[i]: frozenset(types) for i, types in bound.assignment.items() if types}
        if assigned:
            support[pool.name] = assigned
    return support


def class_key(pod: Pod, requirements: Requirements) -> tuple:
    return tuple(sorted(pod.requests.items())), requirements


def matcher(requirements: Requirements) -> Callable:
    part = requirements.without(ZONE, CAPACITY_TYPE, "karpenter.sh/nodepool")
    keys = frozenset(k for k in part if k.startswith(("karpenter.k8s.aws/", "node.kubernetes.io/", "kubernetes.io/")))
    only = part.only(keys)
    return lambda it: only.matches(it.labels)
