"""Topology spread and pod (anti-)affinity: per-domain counts and which domains a pod may use.

Every spread constraint and affinity term of the pending pods becomes a ``Group`` keyed by
what it counts (topology key, selector, namespaces), so the replicas of a Deployment share
one group, as upstream. A group counts, per domain (a zone, a hostname, ...), the pods its
selector matches and, for anti-affinity, the pods that own the term (for the inverse rule:
a pod may not join a domain whose pods' required anti-affinity selects it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from provisioning.crd.labels import HOSTNAME
from provisioning.scheduling.pods import LabelSelector, Pod, PodAffinityTerm, TopologySpreadConstraint

SPREAD, AFFINITY, ANTI = "spread", "affinity", "anti-affinity"


@dataclass(frozen=True)
class Constraint:
    """One rule a pod carries into placement (hard, or a preference not yet relaxed)."""

    kind: str
    key: str
    selector: LabelSelector
    namespaces: frozenset[str] | None  # None: every namespace
    max_skew: int = 1
    min_domains: int | None = None
    # Which domains count for a spread's minimum (Kubernetes' defaults: affinity Honor,
    # taints Ignore); part of the group's identity, as upstream's node filter.
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"

    def __hash__(self) -> int:
        # Every topology lookup hashes its constraint: once is enough (the fields never change).
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash(_values(self))
            object.__setattr__(self, "_hash", found)
        return found

    def __reduce__(self):
        # string hashes differ between processes: rebuild, never carry the cached hash over
        return (type(self), _values(self))

    def selects(self, pod: Pod) -> bool:
        if self.namespaces is not None and pod.namespace not in self.namespaces:
            return False
        return self.selector.matches(pod.labels)

    def describe(self) -> str:
        what = {
            SPREAD: f"topology spread (maxSkew {self.max_skew})",
            AFFINITY: "pod affinity",
            ANTI: "pod anti-affinity",
        }[self.kind]
        return f"{what} on {self.key} for pods {self.selector or 'matching everything'}"


def _values(instance) -> tuple:
    """A dataclass's field values, in order."""
    return tuple(getattr(instance, f.name) for f in fields(instance))


def spread_constraint(pod: Pod, c: TopologySpreadConstraint) -> Constraint:
    return Constraint(
        SPREAD,
        c.topology_key,
        c.label_selector,
        frozenset({pod.namespace}),
        c.max_skew,
        c.min_domains,
        c.node_affinity_policy or "Honor",
        c.node_taints_policy or "Ignore",
    )


def affinity_constraint(kind: str, term: PodAffinityTerm) -> Constraint:
    return Constraint(kind, term.topology_key, term.label_selector, None if term.all_namespaces else term.namespaces)


@dataclass
class Group:
    constraint: Constraint
    matched: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    owners: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class Topology:
    """Counts per group and domain; answers where a pod may go."""

    def __init__(self, universe: Mapping[str, Iterable[str]]) -> None:
        self.universe = {key: frozenset(values) for key, values in universe.items()}
        self.groups: dict[Constraint, Group] = {}
        self._selects: dict[tuple[Constraint, str, int], bool] = {}
        self._anti_cache: dict[tuple[str, int, str], list[Group]] = {}
        self._selecting_cache: dict[tuple[str, int], list[tuple[Constraint, Group]]] = {}
        self.keys: set[str] = set()
        self.version = 0  # changes whenever a count or a group does: answers may differ after

    def group(self, constraint: Constraint) -> Group:
        found = self.groups.get(constraint)
        if found is None:
            found = self.groups[constraint] = Group(constraint)
            self.keys.add(constraint.key)
            self.version += 1
            self._selecting_cache.clear()
            self._anti_cache.clear()
        return found

    def _selecting(self, pod: Pod) -> list[tuple[Constraint, Group]]:
        """The groups whose selector picks ``pod`` (cached per label set: replicas share one)."""
        cache_key = (pod.namespace, id(pod.labels))
        found = self._selecting_cache.get(cache_key)
        if found is None:
            found = self._selecting_cache[cache_key] = [(c, g) for c, g in self.groups.items() if c.selects(pod)]
        return found

    def domains(self, key: str) -> frozenset[str]:
        return self.universe.get(key, frozenset())

    def selects(self, constraint: Constraint, pod: Pod) -> bool:
        cache_key = (constraint, pod.namespace, id(pod.labels))
        hit = self._selects.get(cache_key)
        if hit is None:
            hit = self._selects[cache_key] = constraint.selects(pod)
        return hit

    def record(self, pod: Pod, owned: Iterable[Constraint], domain_of: Mapping[str, str]) -> None:
        """Count ``pod`` where it landed (``domain_of``: topology key → value of its node)."""
        self.version += 1
        for constraint, group in self._selecting(pod):
            value = domain_of.get(constraint.key)
            if value is not None:
                group.matched[value] += 1
        for constraint in owned:
            if constraint.kind == ANTI:
                value = domain_of.get(constraint.key)
                if value is not None:
                    self.group(constraint).owners[value] += 1

    def valid_domains(
        self, pod: Pod, constraint: Constraint, candidates: frozenset[str], eligible: frozenset[str]
    ) -> frozenset[str]:
        """The domains among ``candidates`` where ``pod`` may go under ``constraint``.

        ``eligible`` are the domains the pod's own node requirements allow (for the spread
        minimum, as nodeAffinityPolicy Honor).
        """
        group = self.group(constraint)
        counts = group.matched
        own = 1 if self.selects(constraint, pod) else 0
        if constraint.kind == SPREAD:
            if constraint.key == HOSTNAME:
                low = 0  # a new node can always be made
            else:
                low = min((counts.get(d, 0) for d in eligible), default=0)
                if constraint.min_domains and len(eligible) < constraint.min_domains:
                    low = 0
            return frozenset(d for d in candidates if counts.get(d, 0) + own - low <= constraint.max_skew)
        if constraint.kind == AFFINITY:
            occupied = frozenset(d for d, n in counts.items() if n > 0)
            if not occupied and own:
                return candidates  # the first pod of a self-affine group may start anywhere
            return candidates & occupied
        return frozenset(d for d in candidates if counts.get(d, 0) == 0)

    def blocked_by_others(self, pod: Pod, key: str, candidates: frozenset[str]) -> frozenset[str]:
        """``candidates`` minus the domains where placed pods' required anti-affinity
        selects ``pod`` (the inverse rule)."""
        groups = self._anti_selecting(pod, key)
        if not groups:
            return candidates
        return frozenset(d for d in candidates if not any(g.owners.get(d) for g in groups))

    def _anti_selecting(self, pod: Pod, key: str) -> list[Group]:
        """The anti-affinity groups on ``key`` whose selector picks ``pod`` (cached per
        label set; refreshed when groups are added)."""
        cache_key = (pod.namespace, id(pod.labels), key)
        found = self._anti_cache.get(cache_key)
        if found is None:
            found = [g for c, g in self.groups.items() if c.kind == ANTI and c.key == key and self.selects(c, pod)]
            self._anti_cache[cache_key] = found
        return found
