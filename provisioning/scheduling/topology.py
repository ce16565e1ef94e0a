"""Topology spread and pod (anti-)affinity, as upstream's ``Topology`` counts them.

Every spread constraint and pod (anti-)affinity term of a pending pod becomes a ``Group`` keyed
by what it counts (kind, topology key, selector, namespaces, maxSkew, minDomains and, for
spreads, the node filter), so the replicas of a Deployment share one group. A group counts,
per domain (a zone, a hostname, an architecture ...), the pods its selector picks. Every
required anti-affinity term of any pod, bound or pending, is also an *inverse* group counting
where the pods that own the term are: a pod the term selects may not join those domains.

How a pod is placed (upstream ``AddRequirements``): for the groups the pod owns and the inverse
groups that select it, each group answers which domains of its key the pod may use given what
the pod requires on the key and what the node (an existing node's labels, a NodeClaim's
requirements) allows; the answers tighten the node's requirements or, when one is empty, the
pod cannot go there. A spread pins its key to one domain, so a NodeClaim is counted where it
will launch. Once placed, the pod is recorded (``Record``): in every group that selects it (a
spread or affinity only where its node's domain is known; an anti-affinity in every domain the
node may still land in, so a NodeClaim whose zone is open blocks all of them) and, for its own
required anti-affinity terms, in their inverse groups.

Where karpweb departs from upstream, on purpose:

* The domains a spread counts its minimum over are those the pod could actually use: values of
  the key offered by the NodePools and instance types that meet the pod's node selector and
  required affinity (nodeAffinityPolicy Honor) and whose taints it tolerates (nodeTaintsPolicy
  Honor), plus those of existing nodes that pass the same filter. Upstream counts every domain
  any instance type of any NodePool offers, so a zone none of the pod's types is offered in
  keeps the minimum at 0 and leaves pods pending (kubernetes-sigs/karpenter#3272).
* Where upstream picks one of several equally good domains at random (Go map order), the
  choice here is the first by count and name that the node can still launch in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields

from provisioning.crd.labels import HOSTNAME, ZONE
from provisioning.scheduling.labelselector import LabelSelector
from provisioning.scheduling.pods import Pod, PodAffinityTerm, TopologySpreadConstraint
from provisioning.scheduling.requirements import IN, Requirement, Requirements
from provisioning.scheduling.taints import Taint, untolerated

SPREAD, AFFINITY, ANTI = "spread", "affinity", "anti-affinity"
HONOR, IGNORE = "Honor", "Ignore"


def _values(instance) -> tuple:
    return tuple(getattr(instance, f.name) for f in fields(instance))


class _Hashed:
    """Frozen dataclasses hashed once: every topology lookup hashes its key."""

    def __hash__(self) -> int:
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash(_values(self))
            object.__setattr__(self, "_hash", found)
        return found

    def __reduce__(self):
        # string hashes differ between processes: rebuild, never carry the cached hash over
        return (type(self), _values(self))


@dataclass(frozen=True, eq=True)
class NodeFilter(_Hashed):
    """Which nodes a spread counts (upstream ``TopologyNodeFilter``): with nodeAffinityPolicy
    Honor, nodes that meet one of the pod's required terms (its node selector merged into each
    required node affinity term); with nodeTaintsPolicy Honor, nodes whose taints it tolerates."""

    terms: tuple[Requirements, ...]
    affinity_policy: str = HONOR
    taints_policy: str = IGNORE
    tolerations: tuple = ()  # the pod's, kept only under taints Honor (so other groups share)

    __hash__ = _Hashed.__hash__

    def matches_requirements(self, requirements: Requirements) -> bool:
        if self.affinity_policy == IGNORE or not self.terms:
            return True
        return any(requirements.compatible(term) is None for term in self.terms)

    def matches_taints(self, taints: Iterable[Taint]) -> bool:
        return self.taints_policy == IGNORE or untolerated(self.tolerations, taints) is None

    def matches(self, taints: Iterable[Taint], requirements: Requirements) -> bool:
        return self.matches_taints(taints) and self.matches_requirements(requirements)


@dataclass(frozen=True, eq=True)
class Constraint(_Hashed):
    """One rule a pod carries into placement; equal rules share one ``Group``."""

    kind: str
    key: str
    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None = None  # also every namespace it selects
    max_skew: int = 1
    min_domains: int | None = None
    node_filter: NodeFilter | None = None  # spreads only

    __hash__ = _Hashed.__hash__

    def describe(self) -> str:
        what = {
            SPREAD: f"topology spread (maxSkew {self.max_skew})",
            AFFINITY: "pod affinity",
            ANTI: "pod anti-affinity",
        }[self.kind]
        return f"{what} on {self.key} for pods {self.selector or 'matching everything'}"


def spread_constraint(pod: Pod, c: TopologySpreadConstraint, terms: tuple[Requirements, ...]) -> Constraint:
    """``terms``: the pod's node selector merged into each of its (remaining) required terms."""
    taints_policy = c.node_taints_policy or IGNORE
    node_filter = NodeFilter(
        terms=terms,
        affinity_policy=c.node_affinity_policy or HONOR,
        taints_policy=taints_policy,
        tolerations=tuple(pod.tolerations) if taints_policy == HONOR else (),
    )
    return Constraint(
        SPREAD,
        c.topology_key,
        c.label_selector,
        frozenset({pod.namespace}),
        None,
        c.max_skew,
        c.min_domains,
        node_filter,
    )


def affinity_constraint(kind: str, term: PodAffinityTerm) -> Constraint:
    return Constraint(kind, term.topology_key, term.label_selector, term.namespaces, term.namespace_selector)


class Group:
    """Per-domain counts of one constraint. ``counts`` holds every registered domain (the
    universe of the key, count 0 when empty) and any domain a pod was recorded in."""

    __slots__ = ("constraint", "counts", "occupied", "version")

    def __init__(self, constraint: Constraint) -> None:
        self.constraint = constraint
        self.counts: dict[str, int] = {}
        self.occupied = 0  # domains with a count above zero
        self.version = 0  # changes whenever a count does: answers may differ after

    def register(self, domain: str) -> None:
        if domain not in self.counts:
            self.counts[domain] = 0

    def add(self, domain: str) -> None:
        count = self.counts.get(domain, 0)
        if count == 0:
            self.occupied += 1
        self.counts[domain] = count + 1
        self.version += 1

    @property
    def all_empty(self) -> bool:
        return self.occupied == 0


@dataclass(frozen=True)
class Blocked:
    """Why a pod cannot go on a node: the constraint whose domains ran out."""

    constraint: Constraint
    inverse: bool = False  # another pod's required anti-affinity, not the pod's own rule
    selected: bool = False  # another pod's spread, which counts this pod

    def describe(self) -> str:
        if self.inverse:
            return f"the required pod anti-affinity of other pods on {self.constraint.key} (they select this pod)"
        if self.selected:
            return f"the {self.constraint.describe()} of other pods, which counts this pod"
        return self.constraint.describe()


# Who supplies the domains a group registers: ``universe(constraint)`` gives them.
Universe = Callable[[Constraint], Iterable[str]]
# What a node may still be on a key: ``feasible(key, domain)`` (None: every domain).
Feasible = Callable[[str, str], bool] | None


class Topology:
    """The counts of every group, and the answers to where a pod may go."""

    def __init__(self, universe: Universe, namespace_labels: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self._universe = universe
        self._namespace_labels = dict(namespace_labels or {})
        self.groups: dict[Constraint, Group] = {}
        self.inverse: dict[Constraint, Group] = {}
        self.keys: set[str] = set()
        self.version = 0  # changes whenever any count or group does
        self._selects: dict[tuple[Constraint, str, int], bool] = {}
        self._selecting: dict[tuple[str, int], list[Group]] = {}
        self._inverse_selecting: dict[tuple[str, int], list[Group]] = {}
        self._spreads_selecting: dict[tuple[str, int], list[Group]] = {}
        self._ns_selected: dict[tuple[LabelSelector, str], bool] = {}
        self._hostnames: set[str] = set()
        # Placements so far, replayed into a group created late: (pod, taints, requirements).
        self._placed: list[tuple[Pod, tuple[Taint, ...], Requirements, str | None]] = []
        self._ahead: dict[str, tuple[int, Requirements]] = {}  # pod key → (its _placed index, requirements)

    # ---------------------------------------------------------------- groups

    def group(self, constraint: Constraint) -> Group:
        found = self.groups.get(constraint)
        if found is None:
            found = self.groups[constraint] = self._new(constraint)
            for pod, taints, requirements, hostname in self._placed:
                if self.selects(constraint, pod):
                    self._count(found, taints, requirements, hostname)
            self._changed()
        return found

    def inverse_group(self, constraint: Constraint) -> Group:
        found = self.inverse.get(constraint)
        if found is None:
            found = self.inverse[constraint] = self._new(constraint)
            self._changed()
        return found

    def _new(self, constraint: Constraint) -> Group:
        group = Group(constraint)
        for domain in self._universe(constraint):
            group.register(domain)
        if constraint.key == HOSTNAME:
            for name in self._hostnames:
                group.register(name)
        self.keys.add(constraint.key)
        return group

    def _changed(self) -> None:
        self.version += 1
        self._selecting.clear()
        self._inverse_selecting.clear()
        self._spreads_selecting.clear()

    def register(self, key: str, domain: str) -> None:
        """A domain now exists (a node, a NodeClaim's hostname): every group of the key knows it."""
        if key == HOSTNAME:
            self._hostnames.add(domain)
        for table in (self.groups, self.inverse):
            for constraint, group in table.items():
                if constraint.key == key:
                    group.register(domain)

    # ---------------------------------------------------------------- selection

    def selects(self, constraint: Constraint, pod: Pod) -> bool:
        cache_key = (constraint, pod.namespace, id(pod.labels))
        hit = self._selects.get(cache_key)
        if hit is None:
            hit = self._selects[cache_key] = self._in_namespace(constraint, pod.namespace) and (
                constraint.selector.matches(pod.labels)
            )
        return hit

    def _in_namespace(self, constraint: Constraint, namespace: str) -> bool:
        if namespace in constraint.namespaces:
            return True
        selector = constraint.namespace_selector
        if selector is None:
            return False
        found = self._ns_selected.get((selector, namespace))
        if found is None:
            labels = self._namespace_labels.get(namespace) or {"kubernetes.io/metadata.name": namespace}
            found = self._ns_selected[(selector, namespace)] = selector.matches(labels)
        return found

    def selecting(self, pod: Pod) -> list[Group]:
        """The groups whose selector picks ``pod`` (cached per label set: replicas share one)."""
        cache_key = (pod.namespace, id(pod.labels))
        found = self._selecting.get(cache_key)
        if found is None:
            found = self._selecting[cache_key] = [g for c, g in self.groups.items() if self.selects(c, pod)]
        return found

    def inverse_selecting(self, pod: Pod) -> list[Group]:
        """The inverse groups (others' required anti-affinity) that select ``pod``."""
        cache_key = (pod.namespace, id(pod.labels))
        found = self._inverse_selecting.get(cache_key)
        if found is None:
            found = self._inverse_selecting[cache_key] = [g for c, g in self.inverse.items() if self.selects(c, pod)]
        return found

    def spreads_selecting(self, pod: Pod) -> list[Group]:
        """The spread groups on keys other than the hostname whose selector picks ``pod`` (a
        node's hostname is always known, so those count it wherever it goes)."""
        cache_key = (pod.namespace, id(pod.labels))
        found = self._spreads_selecting.get(cache_key)
        if found is None:
            found = self._spreads_selecting[cache_key] = [
                g for g in self.selecting(pod) if g.constraint.kind == SPREAD and g.constraint.key != HOSTNAME
            ]
        return found

    def constrained(self, pod: Pod, constraints: tuple[Constraint, ...]) -> bool:
        """Does placing ``pod`` depend on topology (its own rules, others' anti-affinity, or
        others' spreads that count it)?"""
        return bool(constraints) or bool(self.inverse_selecting(pod)) or bool(self.spreads_selecting(pod))

    # ---------------------------------------------------------------- counting

    def count_bound(
        self,
        pod: Pod,
        taints: tuple[Taint, ...],
        labels: Mapping[str, str],
        requirements: Requirements | None = None,
    ) -> None:
        """A pod already running on a node with ``labels`` (hostname included) and ``taints``;
        ``requirements``: those labels as requirements, when the caller has them already."""
        if requirements is None:
            requirements = Requirements.from_labels(labels)
        self._placed.append((pod, taints, requirements, None))
        for group in self.selecting(pod):
            self._count(group, taints, requirements, None)
        for term in pod.pod_anti_affinity.required:
            domain = labels.get(term.topology_key)
            if domain is not None:
                self.inverse_group(affinity_constraint(ANTI, term)).add(domain)
        self.version += 1

    def owns_inverse(self, pod: Pod) -> None:
        """A pending pod's required anti-affinity terms, tracked before anything is placed."""
        for term in pod.pod_anti_affinity.required:
            self.inverse_group(affinity_constraint(ANTI, term))

    def record(
        self, pod: Pod, taints: tuple[Taint, ...], requirements: Requirements, hostname: str | None = None
    ) -> None:
        """``pod`` placed on a node with ``requirements`` and ``hostname`` (upstream ``Record``):
        counted in every group that selects it, and its required anti-affinity terms where it
        may be."""
        self._placed.append((pod, taints, requirements, hostname))
        for group in self.selecting(pod):
            self._count(group, taints, requirements, hostname)
        for term in pod.pod_anti_affinity.required:
            group = self.inverse_group(affinity_constraint(ANTI, term))
            for domain in self._domains_of(group, _on(requirements, term.topology_key, hostname)):
                group.add(domain)
        self.version += 1

    def record_ahead(self, pod: Pod, taints: tuple[Taint, ...], requirements: Requirements) -> None:
        """``pod`` counted where ``requirements`` already pin it (its zone) before its node is
        known, in every group on such a key; ``settle`` counts it in the rest (its hostname's)
        once the node is known. Its own required anti-affinity is not supported here."""
        self._ahead[pod.key] = (len(self._placed), requirements)
        self._placed.append((pod, taints, requirements, None))
        for group in self.selecting(pod):
            if _decided(group, requirements):
                self._count(group, taints, requirements, None)
        self.version += 1

    def settle(self, pod: Pod, taints: tuple[Taint, ...], requirements: Requirements, hostname: str | None) -> None:
        """A pod ``record_ahead`` counted is on its node now: counted in the groups its
        earlier requirements left open."""
        index, ahead = self._ahead.pop(pod.key)
        self._placed[index] = (pod, taints, requirements, hostname)
        for group in self.selecting(pod):
            if not _decided(group, ahead):
                self._count(group, taints, requirements, hostname)
        self.version += 1

    def _count(self, group: Group, taints: tuple[Taint, ...], requirements: Requirements, hostname: str | None) -> None:
        constraint = group.constraint
        if constraint.node_filter is not None and not constraint.node_filter.matches(taints, requirements):
            return
        requirement = _on(requirements, constraint.key, hostname)
        if constraint.kind == ANTI:
            # Every domain the node may still land in: it cannot be in two, but we do not know which.
            for domain in self._domains_of(group, requirement):
                group.add(domain)
        elif requirement is not None and not requirement.complement and len(requirement.values) == 1:
            group.add(next(iter(requirement.values)))

    @staticmethod
    def _domains_of(group: Group, requirement: Requirement | None) -> list[str]:
        if requirement is None:
            return []
        if not requirement.complement:
            return list(requirement.values)
        return [d for d in group.counts if requirement.has(d)]

    # ---------------------------------------------------------------- placement

    def tighten(
        self,
        pod: Pod,
        constraints: tuple[Constraint, ...],
        strict: Requirements,
        node: Requirements,
        feasible: Feasible = None,
        hostname: str | None = None,
    ) -> Requirements | Blocked:
        """``node`` narrowed to the domains ``pod`` may use there, or what blocks it.

        ``constraints`` are the rules the pod owns; the inverse groups that select it apply too.
        ``strict`` are the pod's required node requirements (its domains on each key);
        ``feasible`` says which domains the node can still launch in, for choosing among equals;
        ``hostname`` is the node's (a NodeClaim's name): its hostname rules are answered for it
        and add nothing to the requirements.
        """
        out = node
        host = _pin(HOSTNAME, hostname) if hostname is not None else None
        for constraint in constraints:
            group = self.groups.get(constraint) or self.group(constraint)
            key = constraint.key
            on_host = host is not None and key == HOSTNAME
            chosen = self._next(group, pod, strict.get(key), host if on_host else out.get(key), feasible)
            if chosen is None:
                return Blocked(constraint)
            if not on_host:
                out = out.add(chosen)
        for group in self.inverse_selecting(pod):
            key = group.constraint.key
            on_host = host is not None and key == HOSTNAME
            chosen = self._anti(group, strict.get(key), host if on_host else out.get(key))
            if chosen is None:
                return Blocked(group.constraint, inverse=True)
            if not on_host:
                out = out.add(chosen)
        for group in self.spreads_selecting(pod):
            if group.constraint in constraints:
                continue
            key = group.constraint.key
            chosen = self._counted(group, strict.get(key), out.get(key), feasible)
            if chosen is None:
                return Blocked(group.constraint, selected=True)
            out = out.add(chosen)
        return out

    def _counted(self, group: Group, pod_domains, node_domains, feasible) -> Requirement | None:
        """A pod another pod's spread selects (but which does not carry the rule itself) must
        land where it is counted, so the pods that carry the rule and come after it see it:
        its node's domain is pinned, to the least loaded one. Upstream leaves such a pod
        uncounted on a NodeClaim whose zone is open, and the spread can break once the nodes
        exist. Spreads are checked when a pod is placed, not after (IgnoredDuringExecution):
        the pod does not have to keep the skew of pods placed before it."""
        if _single(node_domains) is not None:
            return node_domains
        key = group.constraint.key
        best: tuple[int, str] | None = None
        for domain, count in group.counts.items():
            if node_domains is not None and not node_domains.has(domain):
                continue
            if pod_domains is not None and not pod_domains.has(domain):
                continue
            if feasible is not None and not feasible(key, domain):
                continue
            if best is None or (count, domain) < best:
                best = (count, domain)
        return _pin(key, best[1]) if best is not None else None

    def _next(
        self, group: Group, pod: Pod, pod_domains: Requirement | None, node_domains: Requirement | None, feasible
    ) -> Requirement | None:
        kind = group.constraint.kind
        if kind == SPREAD:
            return self._spread(group, pod, pod_domains, node_domains, feasible)
        if kind == AFFINITY:
            return self._affinity(group, pod, pod_domains, node_domains, feasible)
        return self._anti(group, pod_domains, node_domains)

    def _spread(self, group, pod, pod_domains, node_domains, feasible) -> Requirement | None:
        """Upstream ``nextDomainTopologySpread``: the least-loaded domain within maxSkew."""
        constraint = group.constraint
        counts = group.counts
        own = 1 if self.selects(constraint, pod) else 0
        key = constraint.key
        single = _single(node_domains)
        if key == HOSTNAME and single is not None:
            # A new node can always be made: the global minimum for hostnames is 0.
            if counts.get(single, 0) + own <= constraint.max_skew:
                return _pin(key, single)
            return None
        low = self._minimum(group, pod_domains)
        best: tuple[int, str] | None = None
        candidates = node_domains.values if node_domains is not None and not node_domains.complement else counts
        for domain in candidates:
            count = counts.get(domain)
            if count is None:
                continue  # not a domain of this group's universe
            if node_domains is not None and not node_domains.has(domain):
                continue
            if count + own - low > constraint.max_skew:
                continue
            if feasible is not None and not feasible(key, domain):
                continue
            if best is None or (count, domain) < best:
                best = (count, domain)
        return _pin(key, best[1]) if best is not None else None

    @staticmethod
    def _minimum(group: Group, pod_domains: Requirement | None) -> int:
        """The global minimum over the domains the pod supports (0 for hostnames, and while
        fewer than minDomains exist)."""
        constraint = group.constraint
        if constraint.key == HOSTNAME:
            return 0
        low = None
        supported = 0
        for domain, count in group.counts.items():
            if pod_domains is None or pod_domains.has(domain):
                supported += 1
                if low is None or count < low:
                    low = count
        if low is None or (constraint.min_domains is not None and supported < constraint.min_domains):
            return 0
        return low

    def _affinity(self, group, pod, pod_domains, node_domains, feasible) -> Requirement | None:
        """Upstream ``nextDomainAffinity``: domains holding a selected pod; a pod that selects
        itself may start a group where none (or none it may use) is yet."""
        constraint = group.constraint
        counts = group.counts
        key = constraint.key
        single = _single(node_domains)
        own = self.selects(constraint, pod)
        if key == HOSTNAME and single is not None:
            if pod_domains is not None and not pod_domains.has(single):
                return None
            if counts.get(single, 0) > 0:
                return _pin(key, single)
            if own and (group.all_empty or not _any_occupied(counts, pod_domains)):
                return _pin(key, single)
            return None
        options = [
            d
            for d, n in counts.items()
            if n > 0 and (pod_domains is None or pod_domains.has(d)) and (node_domains is None or node_domains.has(d))
        ]
        if options:
            return Requirement.of(key, IN, options)
        if own and (group.all_empty or not _any_occupied(counts, pod_domains)):
            # Bootstrap: the first domain both the pod and the node allow, that the node can use.
            for domain in sorted(counts):
                if pod_domains is not None and not pod_domains.has(domain):
                    continue
                if node_domains is not None and not node_domains.has(domain):
                    continue
                if feasible is not None and not feasible(key, domain):
                    continue
                return _pin(key, domain)
        return None

    @staticmethod
    def _anti(group: Group, pod_domains, node_domains) -> Requirement | None:
        """Upstream ``nextDomainAntiAffinity``: the domains with none of the selected pods."""
        counts = group.counts
        key = group.constraint.key
        single = _single(node_domains)
        if key == HOSTNAME and single is not None:
            return _pin(key, single) if counts.get(single, 0) == 0 else None
        if node_domains is not None and not node_domains.complement:
            candidates: Iterable[str] = node_domains.values
        else:
            candidates = counts
        options = [
            d
            for d in candidates
            if d in counts
            and counts[d] == 0
            and (node_domains is None or node_domains.has(d))
            and (pod_domains is None or pod_domains.has(d))
        ]
        return Requirement.of(key, IN, options) if options else None

    def zone_choices(self, pod: Pod, constraints: tuple[Constraint, ...], strict: Requirements) -> frozenset | None:
        """The zones the pod's own zone rules allow on a node whose zone is still open (None:
        it has none), as upstream ``GetTopologyZoneConstraints``: claims pinned elsewhere are
        not worth asking."""
        zones: frozenset | None = None
        pod_domains = strict.get(ZONE)
        for constraint in constraints:
            if constraint.key != ZONE:
                continue
            group = self.groups.get(constraint) or self.group(constraint)
            valid = self._valid(group, pod, pod_domains)
            zones = valid if zones is None else zones & valid
        return zones

    def _valid(self, group: Group, pod: Pod, pod_domains: Requirement | None) -> frozenset[str]:
        constraint = group.constraint
        counts = group.counts
        if constraint.kind == SPREAD:
            low = self._minimum(group, pod_domains)
            own = 1 if self.selects(constraint, pod) else 0
            return frozenset(d for d, n in counts.items() if n + own - low <= constraint.max_skew)
        if constraint.kind == AFFINITY:
            occupied = frozenset(d for d, n in counts.items() if n > 0 and (pod_domains is None or pod_domains.has(d)))
            if occupied:
                return occupied
            if self.selects(constraint, pod):
                return frozenset(d for d in counts if pod_domains is None or pod_domains.has(d))
            return frozenset()
        return frozenset(d for d, n in counts.items() if n == 0)


def _on(requirements: Requirements, key: str, hostname: str | None) -> Requirement | None:
    """What a node allows on ``key``; its hostname when it has one."""
    if key == HOSTNAME and hostname is not None:
        return _pin(HOSTNAME, hostname)
    return requirements.get(key)


def _decided(group: Group, requirements: Requirements) -> bool:
    """Whether ``requirements`` (no hostname) already say where ``group`` counts a pod."""
    requirement = _on(requirements, group.constraint.key, None)
    if group.constraint.kind == ANTI:
        return requirement is not None
    return _single(requirement) is not None


def _single(requirement: Requirement | None) -> str | None:
    if requirement is None or requirement.complement or len(requirement.values) != 1:
        return None
    return next(iter(requirement.values))


def _any_occupied(counts: Mapping[str, int], pod_domains: Requirement | None) -> bool:
    return any(n > 0 and (pod_domains is None or pod_domains.has(d)) for d, n in counts.items())


_PINS: dict[tuple[str, str], Requirement] = {}


def _pin(key: str, domain: str) -> Requirement:
    found = _PINS.get((key, domain))
    if found is None:
        if len(_PINS) > 100_000:
            _PINS.clear()
        found = _PINS[(key, domain)] = Requirement.of(key, IN, (domain,))
    return found
