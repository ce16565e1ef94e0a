"""Pods in words for the pages: their requests and the constraints that decide where they
can go, read by the solver's own parser so the page shows what the solver sees."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provisioning.scheduling.manifestfields import PodError
from provisioning.scheduling.pods import NodeSelectorRequirement, Pod
from provisioning.scheduling.podspec import pod_from_manifest
from provisioning.scheduling.quantity import format_quantity


@dataclass
class PodDescription:
    requests: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    error: str = ""


def describe_pod(manifest: Any) -> PodDescription:
    try:
        pod = pod_from_manifest(manifest)
    except PodError as exc:
        return PodDescription(error=str(exc))
    return PodDescription(requests=_requests(pod), constraints=_constraints(pod))


def _requests(pod: Pod) -> list[str]:
    return [
        f"{resource} {format_quantity(resource, amount)}"
        for resource, amount in sorted(pod.requests.items())
        if resource != "pods"
    ]


def _requirement(r: NodeSelectorRequirement) -> str:
    if r.operator in ("Exists", "DoesNotExist"):
        return f"{r.key} {r.operator}"
    return f"{r.key} {r.operator} {','.join(r.values)}"


def _constraints(pod: Pod) -> list[str]:
    out = [f"nodeSelector {key}={value}" for key, value in sorted(pod.node_selector.items())]
    terms = [" and ".join(_requirement(r) for r in t.match_expressions) for t in pod.required_node_affinity]
    if terms:
        out.append("requires " + " or ".join(f"({t})" if len(terms) > 1 else t for t in terms))
    out += [
        f"prefers {' and '.join(_requirement(r) for r in p.term.match_expressions)} (weight {p.weight})"
        for p in pod.preferred_node_affinity
    ]
    for s in pod.topology_spread:
        hard = "must" if s.when_unsatisfiable == "DoNotSchedule" else "should"
        out.append(f"{hard} spread over {s.topology_key} (maxSkew {s.max_skew})")
    for term in pod.pod_affinity.required:
        out.append(f"must run with {term.label_selector} per {term.topology_key}")
    for term in pod.pod_anti_affinity.required:
        out.append(f"must not run with {term.label_selector} per {term.topology_key}")
    if pod.pod_affinity.preferred or pod.pod_anti_affinity.preferred:
        out.append("has preferred pod (anti-)affinity")
    for t in pod.tolerations:
        target = f"{t.key}={t.value}" if t.operator == "Equal" else (t.key or "every taint")
        out.append(f"tolerates {target}{':' + t.effect if t.effect else ''}")
    return out
