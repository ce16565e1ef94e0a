"""Cluster-level default topology spread constraints, as kube-scheduler applies them.

A KubeSchedulerConfiguration may give the PodTopologySpread plugin ``defaultConstraints``:
spreads for every pod that declares none of its own. kube-scheduler fills in each one's
selector from what the pod belongs to: the selectors of the Services that select it, and its
controller's (ReplicationController, ReplicaSet, StatefulSet); a pod that belongs to none
gets no default. Upstream's provisioner does the same before it plans
(``defaultconstraints.go``), so the nodes it launches are the ones kube-scheduler will use.

Pods expanded from a Deployment document belong to its ReplicaSet: its selector plus the
``pod-template-hash`` of the revision, so each revision spreads on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from provisioning.scheduling.frozen import intern
from provisioning.scheduling.manifestfields import PodError
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.podspec import topology_spread_constraints

SUPPORTED_OWNERS = ("ReplicationController", "ReplicaSet", "StatefulSet", "Deployment")


@dataclass(frozen=True)
class Belonging:
    """What pods can belong to: Services (namespace, selector) and controllers by
    (kind, namespace, name) → their selector as a LabelSelector manifest."""

    services: tuple[tuple[str, Mapping[str, str]], ...] = ()
    controllers: Mapping[tuple[str, str, str], Mapping[str, Any]] = None  # type: ignore[assignment]


def read_constraints(constraints: Sequence[Mapping[str, Any]], where: str = "defaultConstraints") -> list[dict]:
    """Check default constraints as kube-scheduler does: each a TopologySpreadConstraint
    without a labelSelector (it is deduced per pod)."""
    out = []
    for i, raw in enumerate(constraints):
        if not isinstance(raw, Mapping):
            raise PodError(f"{where}[{i}]", "must be a TopologySpreadConstraint object")
        if "labelSelector" in raw:
            raise PodError(f"{where}[{i}].labelSelector", "must be empty: it is deduced from each pod's owner")
        constraint = dict(raw)
        if constraint.get("whenUnsatisfiable") == "ScheduleAnyway":
            # Pods may not carry minDomains on a preference; a configured default may, and it
            # means nothing there (the spread is relaxed when it cannot be met).
            constraint.pop("minDomains", None)
        out.append(constraint)
    topology_spread_constraints(
        [{**c, "labelSelector": {}} for c in out], where, {}
    )  # raises PodError naming the field on bad input
    return out


def apply_defaults(pods: Iterable[Pod], constraints: Sequence[Mapping[str, Any]], belonging: Belonging) -> list[Pod]:
    """``pods``, each that declares no spread of its own given the defaults, with the selector
    its Services and controller give (unchanged when they give none)."""
    if not constraints:
        return list(pods)
    controllers = belonging.controllers or {}
    cache: dict[tuple, tuple | None] = {}
    out = []
    for pod in pods:
        if pod.topology_spread:
            out.append(pod)
            continue
        owner = pod.owner
        key = (pod.namespace, owner, pod.labels)
        spreads = cache.get(key, ())
        if spreads == ():
            selector = _selector(pod, belonging.services, controllers)
            spreads = cache[key] = (
                None
                if selector is None
                else intern(
                    topology_spread_constraints(
                        [{**c, "labelSelector": selector} for c in constraints], "defaultConstraints", pod.labels
                    )
                )
            )
        out.append(pod if spreads is None else replace(pod, topology_spread=spreads))
    return out


def _selector(pod: Pod, services, controllers) -> dict[str, Any] | None:
    match_labels: dict[str, str] = {}
    for namespace, selector in services:
        if namespace == pod.namespace and selector and all(pod.labels.get(k) == v for k, v in selector.items()):
            match_labels.update(selector)
    expressions: list[dict[str, Any]] = []
    owner = pod.owner
    if owner is not None and owner.kind in SUPPORTED_OWNERS:
        selector = controllers.get((owner.kind, pod.namespace, owner.name))
        if selector:
            if owner.kind == "ReplicationController":
                match_labels.update(selector.get("matchLabels") or {})
            else:
                for k, v in (selector.get("matchLabels") or {}).items():
                    expressions.append({"key": k, "operator": "In", "values": [v]})
                expressions += [dict(e) for e in selector.get("matchExpressions") or ()]
    if not match_labels and not expressions:
        return None
    out: dict[str, Any] = {}
    if match_labels:
        out["matchLabels"] = match_labels
    if expressions:
        out["matchExpressions"] = expressions
    return out


_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_CONSTRAINT_FIELDS = {
    "maxSkew",
    "topologyKey",
    "whenUnsatisfiable",
    "minDomains",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "labelSelector",
    "matchLabelKeys",
}


def parse_scheduler_config(config: Any) -> list[dict[str, Any]]:
    """Upstream's ``SCHEDULER_CONFIG`` document (``{podTopologySpread: {defaultConstraints: [...]}}``),
    checked as kube-scheduler's ValidatePodTopologySpreadArgs checks it: the default
    constraints, or ValueError naming the field and what would be valid."""
    if config in (None, ""):
        return []
    if not isinstance(config, Mapping):
        raise ValueError("scheduler config: must be an object with podTopologySpread")
    unknown = set(config) - {"podTopologySpread"}
    if unknown:
        raise ValueError(f"scheduler config: unknown field {sorted(unknown)[0]!r} (only podTopologySpread is read)")
    spread = config.get("podTopologySpread") or {}
    if not isinstance(spread, Mapping) or set(spread) - {"defaultConstraints"}:
        raise ValueError("scheduler config: podTopologySpread takes only defaultConstraints")
    constraints = spread.get("defaultConstraints") or []
    if not isinstance(constraints, list):
        raise ValueError("scheduler config: podTopologySpread.defaultConstraints must be a list")
    seen: dict[tuple[str, str], int] = {}
    for i, c in enumerate(constraints):
        where = f"scheduler config: podTopologySpread.defaultConstraints[{i}]"
        if not isinstance(c, Mapping):
            raise ValueError(f"{where}: must be a TopologySpreadConstraint object")
        unknown = set(c) - _CONSTRAINT_FIELDS
        if unknown:
            raise ValueError(f"{where}: unknown field {sorted(unknown)[0]!r}")
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew <= 0:
            raise ValueError(f"{where}.maxSkew must be greater than 0")
        key = c.get("topologyKey")
        if not key:
            raise ValueError(f"{where}.topologyKey must be set")
        if not isinstance(key, str) or not _QUALIFIED.match(key):
            raise ValueError(f"{where}.topologyKey {key!r} is not a valid label name")
        when = c.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ValueError(f"{where}.whenUnsatisfiable {when!r} must be one of 'DoNotSchedule' or 'ScheduleAnyway'")
        if c.get("labelSelector") is not None:
            raise ValueError(f"{where}.labelSelector must not be set, as selectors are deduced for each pod")
        if c.get("matchLabelKeys"):
            raise ValueError(f"{where}.matchLabelKeys must not be set, as it has no effect on default constraints")
        if (key, when) in seen:
            raise ValueError(f"{where} is a duplicate of [{seen[key, when]}], {{{key}, {when}}}")
        seen[key, when] = i
    return read_constraints(constraints)
