"""A pod's constraints and how they are relaxed, one at a time, in upstream's order.

Preferences (preferred node and pod affinities, ScheduleAnyway spreads, PreferNoSchedule
taints) count as hard until the pod cannot be placed; then ``variants`` gives the pod as
first tried and after each relaxation step (Part I §1.12 of the reference).
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioning.scheduling.pods import Pod
from provisioning.scheduling.requirements import Requirements
from provisioning.scheduling.topology import AFFINITY, ANTI, Constraint, affinity_constraint, spread_constraint


@dataclass(frozen=True)
class Variant:
    """A pod's constraints at one step of relaxation."""

    requirements: Requirements
    constraints: tuple[Constraint, ...]
    tolerate_prefer_no_schedule: bool = False
    relaxed: tuple[str, ...] = ()

    def __hash__(self) -> int:
        # The solver's caches hash variants per placement: once is enough (fields never change).
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash(self._values())
            object.__setattr__(self, "_hash", found)
        return found

    def __reduce__(self):
        # string hashes differ between processes: rebuild, never carry the cached hash over
        return (Variant, self._values())

    def _values(self) -> tuple:
        return (self.requirements, self.constraints, self.tolerate_prefer_no_schedule, self.relaxed)


def variants(pod: Pod, prefer_no_schedule_exists: bool) -> list[Variant]:
    """The pod as first tried, then each relaxation in upstream's order (§1.12)."""
    base = Requirements.from_labels(dict(pod.node_selector))
    terms = [Requirements.from_node_selector_term(t) for t in pod.required_node_affinity] or [Requirements()]
    preferred_nodes = sorted(pod.preferred_node_affinity, key=lambda p: -p.weight)
    preferred_aff = sorted(pod.pod_affinity.preferred, key=lambda p: -p.weight)
    preferred_anti = sorted(pod.pod_anti_affinity.preferred, key=lambda p: -p.weight)
    hard = [spread_constraint(pod, c) for c in pod.topology_spread if c.hard]
    hard += [affinity_constraint(AFFINITY, t) for t in pod.pod_affinity.required]
    hard += [affinity_constraint(ANTI, t) for t in pod.pod_anti_affinity.required]
    soft_spread = [spread_constraint(pod, c) for c in pod.topology_spread if not c.hard]
    state = {
        "terms": terms,
        "aff": preferred_aff,
        "anti": preferred_anti,
        "nodes": preferred_nodes,
        "spread": soft_spread,
        "tolerate": False,
    }
    relaxed: list[str] = []

    def build() -> Variant:
        requirements = base.merge(state["terms"][0])
        if state["nodes"]:
            requirements = requirements.merge(Requirements.from_node_selector_term(state["nodes"][0].term))
        constraints = list(hard) + list(state["spread"])
        if state["aff"]:
            constraints.append(affinity_constraint(AFFINITY, state["aff"][0].term))
        if state["anti"]:
            constraints.append(affinity_constraint(ANTI, state["anti"][0].term))
        return Variant(requirements, tuple(constraints), state["tolerate"], tuple(relaxed))

    out = [build()]
    while True:
        if len(state["terms"]) > 1:
            state["terms"] = state["terms"][1:]
            relaxed.append("a required node affinity term")
        elif state["aff"]:
            state["aff"] = state["aff"][1:]
            relaxed.append("a preferred pod affinity term")
        elif state["anti"]:
            state["anti"] = state["anti"][1:]
            relaxed.append("a preferred pod anti-affinity term")
        elif state["nodes"]:
            state["nodes"] = state["nodes"][1:]
            relaxed.append("a preferred node affinity term")
        elif state["spread"]:
            state["spread"] = state["spread"][1:]
            relaxed.append("a ScheduleAnyway topology spread")
        elif prefer_no_schedule_exists and not state["tolerate"]:
            state["tolerate"] = True
            relaxed.append("PreferNoSchedule taints")
        else:
            return out
        out.append(build())
