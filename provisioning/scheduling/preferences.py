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
    """A pod's constraints at one step of relaxation.

    ``requirements`` are what the pod asks of a node now (node selector, the current required
    term, the heaviest remaining preferred term); ``strict`` the same without the preference
    (the domains a topology rule counts for the pod, as upstream's strict requirements).
    ``constraints`` are the topology rules it owns: required ones and the preferences not yet
    relaxed (every preferred pod (anti-)affinity term and ScheduleAnyway spread, as upstream).
    """

    requirements: Requirements
    constraints: tuple[Constraint, ...]
    tolerate_prefer_no_schedule: bool = False
    relaxed: tuple[str, ...] = ()
    strict: Requirements | None = None

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
        return (self.requirements, self.constraints, self.tolerate_prefer_no_schedule, self.relaxed, self.strict)

    @property
    def strict_requirements(self) -> Requirements:
        return self.requirements if self.strict is None else self.strict


RESPECT, IGNORE = "Respect", "Ignore"


def variants(pod: Pod, prefer_no_schedule_exists: bool, preference_policy: str = RESPECT) -> list[Variant]:
    """The pod as first tried, then each relaxation in upstream's order (§1.12).

    ``preference_policy`` Ignore (upstream's ``--preference-policy=Ignore``) drops every
    preference at once: preferred node and pod (anti-)affinities and ScheduleAnyway spreads.
    """
    respect = preference_policy != IGNORE
    base = Requirements.from_labels(dict(pod.node_selector))
    raw_terms = [Requirements.from_node_selector_term(t) for t in pod.required_node_affinity]
    preferred_nodes = sorted(pod.preferred_node_affinity, key=lambda p: -p.weight) if respect else []
    preferred_aff = sorted(pod.pod_affinity.preferred, key=lambda p: -p.weight) if respect else []
    preferred_anti = sorted(pod.pod_anti_affinity.preferred, key=lambda p: -p.weight) if respect else []
    spreads = [c for c in pod.topology_spread if c.hard or respect]
    state = {
        "terms": raw_terms,
        "aff": preferred_aff,
        "anti": preferred_anti,
        "nodes": preferred_nodes,
        "spread": [c for c in spreads if not c.hard],
        "tolerate": False,
    }
    relaxed: list[str] = []
    hard_affinity = [affinity_constraint(AFFINITY, t) for t in pod.pod_affinity.required]
    hard_anti = [affinity_constraint(ANTI, t) for t in pod.pod_anti_affinity.required]

    def build() -> Variant:
        terms = state["terms"]
        strict = base.merge(terms[0]) if terms else base
        requirements = strict
        if state["nodes"]:
            requirements = requirements.merge(Requirements.from_node_selector_term(state["nodes"][0].term))
        filter_terms = tuple(base.merge(t) for t in terms) if terms else (base,)
        constraints = [spread_constraint(pod, c, filter_terms) for c in spreads if c.hard]
        constraints += [spread_constraint(pod, c, filter_terms) for c in state["spread"]]
        constraints += hard_affinity
        constraints += [affinity_constraint(AFFINITY, p.term) for p in state["aff"]]
        constraints += hard_anti
        constraints += [affinity_constraint(ANTI, p.term) for p in state["anti"]]
        return Variant(
            requirements,
            tuple(dict.fromkeys(constraints)),
            state["tolerate"],
            tuple(relaxed),
            None if strict is requirements else strict,
        )

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
