"""THE verifier: ``verify(snapshot, plan) -> list[Violation]``, an independent check of a plan.

It recomputes, from the plan's final state alone, every rule a placement must keep, sharing
nothing with the solver but the requirements algebra, label selectors and taint matching:

* every pod is placed once (on an existing node or one NodeClaim) or said unschedulable;
* each pod's node, for *every* instance type option the NodeClaim may launch as, meets the
  pod's node selector and required node affinity and the NodePool's requirements; its taints
  are tolerated; the option is one the NodePool offers (type, zone, capacity type) and agrees
  with the NodeClaim's own requirements;
* resources fit on every option: the pods' requests plus the DaemonSets that will run there
  (those whose tolerations and node selection the node meets), and on existing nodes the
  pods already bound plus the DaemonSets not running there yet;
* no two pods on a node take the same host port, DaemonSets included;
* every required topology spread (DoNotSchedule) keeps its skew within maxSkew over its
  eligible domains: the values of its key that nodes the pod could get would have (the
  NodePools and instance types that meet its node selector and required affinity and, with
  nodeTaintsPolicy Honor, whose taints it tolerates; existing nodes and planned NodeClaims
  likewise), counting only pods on nodes its node filter admits;
* every required pod affinity has a selected pod in the domain the pod lands in (or the pod
  selects itself and no selected pod sits where it could go); every required pod
  anti-affinity, of new pods and of pods already bound, has no selected pod in any domain
  the pod may land in;
* NodePool limits hold with each NodeClaim counted at its largest option, as upstream
  subtracts them; every requirement with minValues is met by the options;
* no capacity reservation is the chosen offering of more claims than it has instances left.

A NodeClaim whose options disagree on a key (several zones) may land in any of them: a
spread needs it decided, an anti-affinity keeps clear of all of them, an affinity needs a
selected pod in each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from provisioning.crd.labels import CAPACITY_TYPE, HOSTNAME, NODEPOOL, WELL_KNOWN_LABELS, ZONE
from provisioning.scheduling.bins import ports_conflict
from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.labelselector import LabelSelector
from provisioning.scheduling.plan import ClaimPlan, Plan
from provisioning.scheduling.pods import Pod, PodAffinityTerm, TopologySpreadConstraint
from provisioning.scheduling.pools import RESERVATION_KEYS
from provisioning.scheduling.requirements import Requirements
from provisioning.scheduling.snapshot import NodePoolInput, Snapshot
from provisioning.scheduling.taints import Taint, untolerated
from provisioning.scheduling.workloads import DaemonSetOverhead

PLACEMENT = "placement"
NODE_SELECTION = "node-selection"
TAINTS = "taints"
NODEPOOL_RULES = "nodepool"
RESOURCES = "resources"
HOST_PORTS = "host-ports"
SPREAD = "topology-spread"
AFFINITY = "pod-affinity"
ANTI_AFFINITY = "pod-anti-affinity"
LIMITS = "limits"
MIN_VALUES = "min-values"
RESERVATIONS = "capacity-reservation"
KINDS = (
    PLACEMENT,
    NODE_SELECTION,
    TAINTS,
    NODEPOOL_RULES,
    RESOURCES,
    HOST_PORTS,
    SPREAD,
    AFFINITY,
    ANTI_AFFINITY,
    LIMITS,
    MIN_VALUES,
)
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


@dataclass(frozen=True)
class Violation:
    """One broken rule: its kind, the NodeClaim (or node) and pod concerned, and what is wrong."""

    kind: str
    message: str
    node: str = ""  # a NodeClaim of the plan, or an existing node
    pod: str = ""
    nodepool: str = ""  # for a NodePool's limits

    def __str__(self) -> str:
        where = " ".join(part for part in (f"node {self.node}" if self.node else "", self.pod) if part)
        return f"{self.kind}: {where + ': ' if where else ''}{self.message}"


# ------------------------------------------------------------------ the plan's final state


@dataclass
class _Node:
    """A node of the final state: existing (one label set) or planned (one per option)."""

    name: str
    taints: tuple[Taint, ...]
    label_sets: list[dict[str, str]]
    allocatable: list[Mapping[str, int]]  # per label set
    capacity: list[Mapping[str, int]]
    claim: ClaimPlan | None = None
    pool: NodePoolInput | None = None
    bound: list[Pod] = field(default_factory=list)
    new: list[Pod] = field(default_factory=list)
    daemons_running: frozenset[str] = frozenset()
    shape: tuple | None = None  # a NodeClaim's (pool, options, fixed labels): what nodes alike share
    # key → its values; NodeClaims of one shape share this dict (the hostname is the node's own).
    _domains: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def pods(self) -> list[Pod]:
        return self.bound + self.new

    def domains(self, key: str) -> frozenset[str]:
        """The values of ``key`` this node may have (empty: it may lack the label)."""
        if key == HOSTNAME and self.claim is not None:
            return frozenset({self.name})
        found = self._domains.get(key)
        if found is None:
            values = {labels.get(key) for labels in self.label_sets}
            found = frozenset() if None in values else frozenset(values)  # type: ignore[arg-type]
            self._domains[key] = found
        return found


def _known(labels: Mapping[str, str], requirements: Requirements) -> dict[str, str]:
    """``labels`` plus, for custom keys a requirement allows absent or that no label gives, a
    value the requirement accepts (a node gets custom labels from its NodePool's requirements)."""
    if all(k in labels or k in WELL_KNOWN_LABELS or k == HOSTNAME for k in requirements):
        return labels  # type: ignore[return-value]
    out = dict(labels)
    for key, requirement in requirements.items():
        if key not in out and key not in WELL_KNOWN_LABELS and key != HOSTNAME:
            value = requirement.any_value()
            if value is not None:
                out[key] = value
    return out


# ------------------------------------------------------------------ the verifier


class _Verifier:
    def __init__(self, snapshot: Snapshot, plan: Plan) -> None:
        self.snapshot = snapshot
        self.plan = plan
        self.violations: list[Violation] = []
        self.pods = {p.key: p for p in snapshot.pods}
        self.pools = {p.name: p for p in snapshot.nodepools}
        self.types = {p.name: {t.name: t for t in p.instance_types} for p in snapshot.nodepools}
        self.namespace_labels = snapshot.namespaces
        self.nodes: list[_Node] = []
        self.node_of: dict[str, _Node] = {}  # pod key → node, bound and new
        self._selected: dict[tuple, bool] = {}
        self._domain_cache: dict[tuple, frozenset[str]] = {}
        self._option_labels: dict[tuple, tuple[dict[str, str] | None, str | None]] = {}
        self._fits_claim: dict[tuple, list[str]] = {}
        self._claim_shapes: dict[tuple, tuple] = {}
        self._floors: dict[tuple, dict[str, tuple[int, str]]] = {}
        self._largest: dict[tuple, dict[str, int]] = {}
        self._term_match: dict[tuple, bool] = {}
        self._allocatables: dict[int, Mapping[str, int]] = {}
        self._admits: dict[tuple, bool] = {}
        self._daemons: dict[tuple, tuple[DaemonSetOverhead, ...]] = {}
        self._overheads: dict[tuple, dict[str, int]] = {}
        self._overhead_dicts: dict[tuple, dict[str, int]] = {}
        self._shape_domains: dict[tuple, dict[str, frozenset[str]]] = {}
        self._all_match: dict[tuple, dict[str, str] | None] = {}

    def _claim_node(self, claim: ClaimPlan, pool: NodePoolInput) -> tuple[_Node, list[str]]:
        """The node a NodeClaim becomes, one label set per option; problems with the options.
        Claims opened alike share their options tuple: what depends only on it is worked out once."""
        fixed = tuple(
            sorted(
                (key, next(iter(r.values)))
                for key, r in claim.requirements.items()
                if not r.complement and len(r.values) == 1 and key != HOSTNAME
            )
        )
        shared_key = (pool.name, id(claim.options), fixed)
        shared = self._claim_shapes.get(shared_key)
        if shared is None:
            shared = self._claim_shapes[shared_key] = self._options_of(claim, pool, dict(fixed))
        label_sets, allocatable, capacity, keys, problems = shared
        problems = list(problems)
        requirements = claim.requirements.without(HOSTNAME)
        check_key = (requirements, shared_key)
        mismatches = self._fits_claim.get(check_key)
        if mismatches is None:
            mismatches = []
            for labels, (_, instance_type, zone, *_) in zip(label_sets, keys, strict=True):
                failed = requirements.labels_match(_known(labels, requirements))
                if failed is not None:
                    mismatches.append(f"option {instance_type} in {zone} breaks the NodeClaim's {failed.message}")
            self._fits_claim[check_key] = mismatches
        problems += mismatches
        if not claim.options:
            problems.append("has no instance type option")
        domains = self._shape_domains.setdefault(shared_key, {})
        node = _Node(claim.name, pool.taints, label_sets, allocatable, capacity, claim=claim, pool=pool)
        node._domains = domains
        node.shape = shared_key
        return node, problems

    def _options_of(self, claim: ClaimPlan, pool: NodePoolInput, fixed: dict[str, str]):
        types = self.types[pool.name]
        label_sets, allocatable, capacity, keys, problems = [], [], [], [], []
        for option in claim.options:
            cache_key = (
                pool.name,
                option.instance_type,
                option.zone,
                option.capacity_type,
                option.reservation_id,
                tuple(sorted(fixed.items())),
            )
            found = self._option_labels.get(cache_key)
            if found is None:
                found = self._option_labels[cache_key] = _labels_of(pool, types, option, fixed)
            labels, problem = found
            if labels is None:
                problems.append(problem or "")
                continue
            it = types[option.instance_type]
            label_sets.append(labels)
            allocatable.append(self._allocatable(it))
            capacity.append(it.capacity)
            keys.append(cache_key)
        return label_sets, allocatable, capacity, keys, tuple(problems)

    def _allocatable(self, it: InstanceType) -> Mapping[str, int]:
        found = self._allocatables.get(id(it))
        if found is None:
            found = self._allocatables[id(it)] = it.allocatable
        return found

    def term_matches(self, terms: tuple[Requirements, ...], labels: dict[str, str]) -> bool:
        """Does one of ``terms`` hold on a node with ``labels`` (asked once per label set)?"""
        key = (terms, id(labels))
        found = self._term_match.get(key)
        if found is None:
            found = self._term_match[key] = any(term.matches(_known(labels, term)) for term in terms)
        return found

    def first_mismatch(self, terms: tuple[Requirements, ...], node: _Node) -> dict[str, str] | None:
        """The first of the node's label sets none of ``terms`` holds on (None: they all
        hold); NodeClaims of one shape have the same label sets, so it is asked once a shape."""
        key = (terms, node.shape if node.shape is not None else id(node))
        if key in self._all_match:
            return self._all_match[key]
        found = next((labels for labels in node.label_sets if not self.term_matches(terms, labels)), None)
        if node.shape is not None:
            self._all_match[key] = found
        return found

    def add(self, kind: str, message: str, node: str = "", pod: str = "") -> None:
        self.violations.append(Violation(kind, message, node, pod))

    # -------------------------------------------------------------- building

    def build(self) -> None:
        seen: dict[str, str] = {}

        def place(key: str, where: str, node: _Node) -> bool:
            if key in seen:
                self.add(PLACEMENT, f"is placed twice (also on {seen[key]})", where, key)
                return False
            pod = self.pods.get(key)
            if pod is None:
                self.add(PLACEMENT, "is not a pending pod of the snapshot", where, key)
                return False
            seen[key] = where
            node.new.append(pod)
            self.node_of[key] = node
            return True

        for existing in self.snapshot.nodes:
            taints = tuple(existing.taints) + ((UNSCHEDULABLE_TAINT,) if existing.unschedulable else ())
            labels = {HOSTNAME: existing.name, **dict(existing.labels)}
            node = _Node(
                existing.name,
                taints,
                [labels],
                [existing.allocatable],
                [existing.capacity or existing.allocatable],
                bound=list(existing.pods),
                daemons_running=frozenset(
                    p.owner.name for p in existing.pods if p.is_daemonset and p.owner is not None
                ),
            )
            for pod in existing.pods:
                self.node_of.setdefault(pod.key, node)
            self.nodes.append(node)
        by_name = {n.name: n for n in self.nodes}
        for name, keys in self.plan.existing.items():
            node = by_name.get(name)
            if node is None:
                self.add(PLACEMENT, "pods are placed on a node the snapshot does not have", name)
                continue
            for key in keys:
                place(key, name, node)
        for claim in self.plan.claims:
            pool = self.pools.get(claim.nodepool)
            if pool is None:
                self.add(PLACEMENT, f"NodePool {claim.nodepool} is not in the snapshot", claim.name)
                continue
            node, problems = self._claim_node(claim, pool)
            for problem in problems:
                self.add(NODEPOOL_RULES, problem, claim.name)
            if not node.label_sets:
                continue
            self.nodes.append(node)
            for key in claim.pods:
                place(key, claim.name, node)
        for pod in self.snapshot.pods:
            if pod.key not in seen and pod.key not in self.plan.unschedulable:
                self.add(PLACEMENT, "is neither placed nor said to be unschedulable", pod=pod.key)
        for key in self.plan.unschedulable:
            if key in seen:
                self.add(PLACEMENT, f"is said to be unschedulable but is placed on {seen[key]}", pod=key)

    # -------------------------------------------------------------- per node

    def check_nodes(self) -> None:
        daemons = list(self.snapshot.daemonsets)
        for node in self.nodes:
            if node.claim is not None:
                self._check_nodepool(node)
            checked: set[tuple[int, int]] = set()
            for pod in node.new:
                shape = (id(_node_terms(pod)), id(pod.tolerations))
                if shape not in checked:  # replicas ask the same of the node: once is enough
                    checked.add(shape)
                    self._check_pod_on(node, pod)
            self._check_resources(node, daemons)
            self._check_ports(node, daemons)

    def _check_nodepool(self, node: _Node) -> None:
        pool = node.pool
        assert pool is not None
        labels = self.first_mismatch((pool.requirements,), node)
        if labels is not None:
            mismatch = pool.requirements.labels_match(_known(labels, pool.requirements))
            if mismatch is not None:
                self.add(NODEPOOL_RULES, f"breaks NodePool {pool.name}'s {mismatch.message}", node.name)

    def _check_pod_on(self, node: _Node, pod: Pod) -> None:
        taint = untolerated(pod.tolerations, node.taints, ignore_prefer_no_schedule=True)
        if taint is not None:
            self.add(TAINTS, f"does not tolerate taint {taint}", node.name, pod.key)
        labels = self.first_mismatch(_node_terms(pod), node)
        if labels is not None:
            instance_type = labels.get("node.kubernetes.io/instance-type", "")
            self.add(
                NODE_SELECTION,
                f"its node selector and required node affinity are not met by {instance_type or 'the node'}"
                f" in {labels.get(ZONE, '?')}",
                node.name,
                pod.key,
            )

    def _daemons_on(self, node: _Node, labels: Mapping[str, str], daemons: Sequence[DaemonSetOverhead]):
        """The DaemonSets that run on a node with these taints and labels (label sets are
        shared by the options of many claims, so each is asked once)."""
        key = (id(node.taints), id(labels))  # both outlive the verifier's run
        found = self._daemons.get(key)
        if found is None:
            found = self._daemons[key] = tuple(
                d
                for d in daemons
                if untolerated(d.pod.tolerations, node.taints, ignore_prefer_no_schedule=True) is None
                and any(term.matches(labels) for term in _node_terms(d.pod))
            )
        return found

    def _overhead_on(self, node: _Node, labels: Mapping[str, str], daemons: Sequence[DaemonSetOverhead]):
        key = (id(node.taints), id(labels))
        found = self._overheads.get(key)
        if found is None:
            total: dict[str, int] = defaultdict(int)
            for daemon in self._daemons_on(node, labels, daemons):
                for resource, amount in daemon.requests.items():
                    total[resource] += amount
            # Equal overheads share one dict, so options of one type in several zones are one check.
            frozen = tuple(sorted(total.items()))
            found = self._overheads[key] = self._overhead_dicts.setdefault(frozen, dict(total))
        return found

    def _check_resources(self, node: _Node, daemons: list[DaemonSetOverhead]) -> None:
        if node.claim is None and not node.new:
            return  # nothing new on it: what was already bound is not the plan's doing
        asked: dict[str, int] = defaultdict(int)
        for pod in node.pods:
            if pod.terminal:
                continue
            for resource, amount in pod.requests.items():
                asked[resource] += amount
        bound_daemons: dict[str, int] = defaultdict(int)
        for pod in node.bound:
            if pod.is_daemonset:
                for resource, amount in pod.requests.items():
                    bound_daemons[resource] += amount
        floor = self._floor(node, daemons, bound_daemons)
        for resource, amount in asked.items():
            room, what = floor.get(resource, (0, node.name))
            if amount > room:
                self.add(
                    RESOURCES,
                    f"{resource}: its pods and DaemonSets ask more than {what} has: {amount} for the pods, "
                    f"{room} left beside the DaemonSets",
                    node.name,
                )
                return

    def _floor(self, node: _Node, daemons, bound_daemons) -> dict[str, tuple[int, str]]:
        """Per resource, the least room any option leaves for pods beside the DaemonSets still to
        come there, and the instance type that leaves it."""
        key = (node.shape, id(node.taints)) if node.shape is not None and not bound_daemons else None
        found = self._floors.get(key) if key is not None else None
        if found is not None:
            return found
        floor: dict[str, tuple[int, str]] = {}
        seen: set[tuple[int, int]] = set()
        names: set[str] = set()
        for labels, allocatable in zip(node.label_sets, node.allocatable, strict=True):
            overhead = self._overhead_on(node, labels, daemons)
            if (id(allocatable), id(overhead)) in seen:
                continue  # the same type in another zone, with the same DaemonSets
            seen.add((id(allocatable), id(overhead)))
            what = labels.get("node.kubernetes.io/instance-type", node.name)
            names |= set(allocatable) | set(overhead)
            for resource in set(allocatable) | set(overhead):
                # Daemon pods already bound are among the node's pods: only those to come are added.
                room = allocatable.get(resource, 0) - max(0, overhead.get(resource, 0) - bound_daemons.get(resource, 0))
                if resource not in floor or room < floor[resource][0]:
                    floor[resource] = (room, what)
        if key is not None:
            self._floors[key] = floor
        return floor

    def _check_ports(self, node: _Node, daemons: list[DaemonSetOverhead]) -> None:
        """A new pod's host ports against every other pod's and, on each option, the DaemonSets
        that will run there (two DaemonSets that collide are the cluster's, not the plan's)."""
        wanting = [p for p in node.new if p.host_ports]
        if not wanting:
            return
        others = [(p.key, p.host_ports) for p in node.pods if p.host_ports and not p.terminal]
        seen_daemons: set[tuple] = set()
        for labels in node.label_sets:
            on_it = tuple(
                d
                for d in self._daemons_on(node, labels, daemons)
                if d.pod.host_ports and d.name not in node.daemons_running
            )
            if on_it in seen_daemons:
                continue
            seen_daemons.add(on_it)
            taken = others + [(f"DaemonSet {d.key}", d.pod.host_ports) for d in on_it]
            for pod in wanting:
                for who, ports in taken:
                    if who != pod.key and ports_conflict(pod.host_ports, ports):
                        self.add(HOST_PORTS, f"it and {who} take the same host port", node.name, pod.key)
                        return

    # -------------------------------------------------------------- limits and minValues

    def check_reservations(self) -> None:
        """No capacity reservation is the chosen offering of more claims than it has instances
        left; the claims past its count are named."""
        left: dict[str, int] = {}
        for pool in self.snapshot.nodepools:
            for it in pool.instance_types:
                for o in it.offerings:
                    if o.reservation_id:
                        left[o.reservation_id] = o.reservation_capacity
        for claim in self.plan.claims:
            rid = claim.chosen.reservation_id
            if not rid:
                continue
            if left.get(rid, 0) < 1:
                self.add(RESERVATIONS, f"capacity reservation {rid} has no instance left for it", claim.name)
            left[rid] = left.get(rid, 0) - 1

    def check_claims(self) -> None:
        used: dict[str, dict[str, int]] = {name: dict(p.in_use) for name, p in self.pools.items()}
        for node in self.nodes:
            if node.claim is None or node.pool is None:
                continue
            totals = used[node.pool.name]
            largest = self._largest.get(node.shape) if node.shape is not None else None
            if largest is None:
                largest = {}
                for capacity in node.capacity:
                    for resource, amount in capacity.items():
                        largest[resource] = max(largest.get(resource, 0), amount)
                if node.shape is not None:
                    self._largest[node.shape] = largest
            for resource, amount in largest.items():
                totals[resource] = totals.get(resource, 0) + amount
            totals["nodes"] = totals.get("nodes", 0) + 1
            for key, requirement in node.claim.requirements.items():
                if requirement.min_values:
                    values = {labels.get(key) for labels in node.label_sets} - {None}
                    values = {v for v in values if requirement.has(v)}
                    if len(values) < requirement.min_values:
                        self.add(
                            MIN_VALUES,
                            f"{key} needs {requirement.min_values} distinct values (minValues) among its options, "
                            f"they offer {len(values)}",
                            node.name,
                        )
        for name, pool in self.pools.items():
            for resource, limit in pool.limits.items():
                total = used[name].get(resource, 0)
                if total > limit and total > pool.in_use.get(resource, 0):
                    self.violations.append(
                        Violation(
                            LIMITS,
                            f"NodePool {name}: {resource} would reach {total} with every NodeClaim at its largest "
                            f"option, over its limit {limit}",
                            nodepool=name,
                        )
                    )

    # -------------------------------------------------------------- topology

    def selects(self, namespaces, namespace_selector, selector: LabelSelector, pod: Pod) -> bool:
        # Selectors and label sets live as long as the snapshot: their ids are the cheap key.
        key = (namespaces, id(namespace_selector), id(selector), pod.namespace, id(pod.labels))
        found = self._selected.get(key)
        if found is None:
            in_namespace = pod.namespace in namespaces
            if not in_namespace and namespace_selector is not None:
                labels = self.namespace_labels.get(pod.namespace) or {"kubernetes.io/metadata.name": pod.namespace}
                in_namespace = namespace_selector.matches(labels)
            found = self._selected[key] = in_namespace and selector.matches(pod.labels)
        return found

    def check_topology(self) -> None:
        every = [(pod, node) for node in self.nodes for pod in node.pods if pod.counts_for_topology]
        spreads: dict[tuple, list[tuple[Pod, _Node]]] = defaultdict(list)
        affinities: dict[PodAffinityTerm, list[tuple[Pod, _Node]]] = defaultdict(list)
        antis: dict[PodAffinityTerm, list[tuple[Pod, _Node, bool]]] = defaultdict(list)
        for node in self.nodes:
            for pod in node.new:
                for c in pod.topology_spread:
                    if c.hard:
                        spreads[(c, pod.namespace, _node_terms(pod), _filter_tolerations(c, pod))].append((pod, node))
                for term in pod.pod_affinity.required:
                    affinities[term].append((pod, node))
                for term in pod.pod_anti_affinity.required:
                    antis[term].append((pod, node, True))
            for pod in node.bound:
                if not pod.counts_for_topology:
                    continue
                for term in pod.pod_anti_affinity.required:
                    antis[term].append((pod, node, False))
        for (constraint, namespace, terms, tolerations), owners in spreads.items():
            self._check_spread(constraint, namespace, terms, tolerations, owners, every)
        for term, owners in affinities.items():
            self._check_affinity(term, owners, every)
        for term, owners in antis.items():
            if any(new for _, _, new in owners) or self._any_new_selected(term, owners[0][0]):
                self._check_anti(term, owners, every)

    def _any_new_selected(self, term: PodAffinityTerm, owner: Pod) -> bool:
        return any(
            self.selects(term.namespaces, term.namespace_selector, term.label_selector, pod)
            for node in self.nodes
            for pod in node.new
        )

    def _check_spread(
        self,
        c: TopologySpreadConstraint,
        namespace: str,
        terms: tuple[Requirements, ...],
        tolerations: tuple,
        owners: list[tuple[Pod, _Node]],
        every: list[tuple[Pod, _Node]],
    ) -> None:
        key = c.topology_key
        honor_affinity = (c.node_affinity_policy or "Honor") == "Honor"
        honor_taints = (c.node_taints_policy or "Ignore") == "Honor"

        open_terms = not honor_affinity or all(not t for t in terms)

        def admits(node: _Node) -> bool:
            where = node.shape if node.shape is not None else node.name  # a shape: one pool, its taints
            cache_key = (where, terms if not open_terms else None, tolerations if honor_taints else None)
            found = self._admits.get(cache_key)
            if found is None:
                found = not (honor_taints and untolerated(tolerations, node.taints) is not None) and (
                    open_terms or self.first_mismatch(terms, node) is None
                )
                self._admits[cache_key] = found
            return found

        for pod, node in owners:
            if len(node.domains(key)) != 1:
                self.add(
                    SPREAD,
                    f"its topology spread on {key} cannot be counted: the node may land in "
                    f"{', '.join(sorted(node.domains(key))) or 'no domain of the key'}",
                    node.name,
                    pod.key,
                )
                return
        eligible: set[str] = set()
        if key != HOSTNAME:
            eligible = set(self._eligible(key, terms if honor_affinity else (), tolerations if honor_taints else None))
            for node in self.nodes:
                domains = node.domains(key)
                if len(domains) == 1 and admits(node):
                    eligible |= domains
            pod_domains = _strict(owners[0][0]).get(key)
            if pod_domains is not None:
                eligible = {d for d in eligible if pod_domains.has(d)}
        namespaces = frozenset({namespace})

        def counted(pod: Pod, node: _Node) -> bool:
            return self.selects(namespaces, None, c.label_selector, pod) and admits(node)

        counts: dict[str, int] = defaultdict(int)
        for node in self.nodes:
            domains = node.domains(key)
            for pod in node.bound:
                if len(domains) == 1 and pod.counts_for_topology and counted(pod, node):
                    counts[next(iter(domains))] += 1
        owner_keys = {pod.key for pod, _ in owners}
        # Replay the placements in the plan's order (kube-scheduler checks a spread when it binds
        # the pod); without an order, the pods that carry the rule come last, the strictest.
        sequence = list(self.plan.order) or [
            p.key for node in self.nodes for p in node.new if p.key not in owner_keys
        ] + [p.key for p, _ in owners]
        uncounted = ""
        for key_ in sequence:
            node = self.node_of.get(key_)
            pod = self.pods.get(key_)
            if node is None or pod is None:
                continue
            selected = counted(pod, node)
            domains = node.domains(key)
            if key_ in owner_keys:
                domain = next(iter(domains))
                if uncounted:
                    self.add(
                        SPREAD,
                        f"{uncounted}, which its topology spread on {key} counts, is on a node whose {key} "
                        "is undecided",
                        node.name,
                        pod.key,
                    )
                    return
                low = 0
                if key != HOSTNAME:
                    present = eligible | {domain}
                    low = min(counts.get(d, 0) for d in present)
                    if c.min_domains is not None and len(present) < c.min_domains:
                        low = 0
                have = counts.get(domain, 0)
                if have + (1 if selected else 0) - low > c.max_skew:
                    self.add(
                        SPREAD,
                        f"placed in {key}={domain} with {have} selected pods there against {low} in the emptiest "
                        f"eligible domain, over maxSkew {c.max_skew}",
                        node.name,
                        pod.key,
                    )
                    return
            if selected:
                if len(domains) == 1:
                    counts[next(iter(domains))] += 1
                elif not uncounted:
                    uncounted = key_

    def _eligible(self, key: str, terms: tuple[Requirements, ...], tolerations: tuple | None) -> frozenset[str]:
        """Values of ``key`` on nodes the NodePools could launch that meet one of ``terms`` (any
        node when empty) and whose taints ``tolerations`` tolerate (when given)."""
        cache_key = (key, terms, tolerations)
        found = self._domain_cache.get(cache_key)
        if found is not None:
            return found
        values: set[str] = set()
        for pool in self.snapshot.nodepools:
            if tolerations is not None and untolerated(tolerations, pool.taints) is not None:
                continue
            for it in pool.instance_types:
                for offering in it.offerings:
                    if not offering.available or offering.price is None:
                        continue
                    labels = {**pool.labels, **it.labels, ZONE: offering.zone, CAPACITY_TYPE: offering.capacity_type}
                    labels[NODEPOOL] = pool.name
                    if not pool.requirements.matches(_known(labels, pool.requirements)):
                        continue
                    if terms and not any(t.matches(_known(labels, t)) for t in terms):
                        continue
                    value = labels.get(key)
                    if value is not None:
                        values.add(value)
        found = self._domain_cache[cache_key] = frozenset(values)
        return found

    def _selected_pods(self, term: PodAffinityTerm, every: list[tuple[Pod, _Node]]) -> list[tuple[Pod, _Node]]:
        return [
            (pod, node)
            for pod, node in every
            if self.selects(term.namespaces, term.namespace_selector, term.label_selector, pod)
        ]

    def _check_affinity(self, term: PodAffinityTerm, owners, every) -> None:
        key = term.topology_key
        selected = self._selected_pods(term, every)
        where: dict[str, set[str]] = defaultdict(set)  # domain → selected pods there (certainly)
        for pod, node in selected:
            domains = node.domains(key)
            if len(domains) == 1:
                where[next(iter(domains))].add(pod.key)
        for pod, node in owners:
            domains = node.domains(key)
            if not domains:
                self.add(AFFINITY, f"its node has no {key} label", node.name, pod.key)
                continue
            lonely = [d for d in domains if not (where.get(d, set()) - {pod.key})]
            if not lonely:
                continue
            selects_itself = self.selects(term.namespaces, term.namespace_selector, term.label_selector, pod)
            allowed = _strict(pod).get(key)
            reachable = [
                other
                for other, other_node in selected
                if other.key != pod.key and any(allowed is None or allowed.has(d) for d in other_node.domains(key))
            ]
            if selects_itself and not reachable:
                continue  # the first of its group: it may start one
            self.add(
                AFFINITY,
                f"no pod its required affinity selects is in {key}={', '.join(sorted(lonely))}",
                node.name,
                pod.key,
            )

    def _check_anti(self, term: PodAffinityTerm, owners, every) -> None:
        key = term.topology_key
        at: dict[str, list[tuple[Pod, _Node]]] = defaultdict(list)  # domain → selected pods that may be there
        for pod, node in self._selected_pods(term, every):
            for domain in node.domains(key):
                at[domain].append((pod, node))
        new_keys = {p.key for node in self.nodes for p in node.new}
        for pod, node, _ in owners:
            for domain in node.domains(key):
                for other, other_node in at.get(domain, ()):
                    if other.key == pod.key or (pod.key not in new_keys and other.key not in new_keys):
                        continue
                    self.add(
                        ANTI_AFFINITY,
                        f"{other.key} (on {other_node.name}), which its required anti-affinity selects, may share "
                        f"{key}={domain}",
                        node.name,
                        pod.key,
                    )
                    return


def _labels_of(pool: NodePoolInput, types: Mapping[str, InstanceType], option, fixed: dict[str, str]):
    """An option's node labels, or why the option is not one the NodePool offers."""
    it = types.get(option.instance_type)
    if it is None:
        return None, f"option {option.instance_type} is not an instance type of NodePool {pool.name}"
    offering = next(
        (
            o
            for o in it.offerings
            if o.zone == option.zone
            and o.capacity_type == option.capacity_type
            and o.reservation_id == getattr(option, "reservation_id", "")
        ),
        None,
    )
    if offering is None or not offering.available:
        return (
            None,
            f"option {option.instance_type} {option.capacity_type} in {option.zone} is not an available offering",
        )
    labels = {**pool.labels, **fixed, **it.labels}
    labels.update({ZONE: option.zone, CAPACITY_TYPE: option.capacity_type, NODEPOOL: pool.name})
    if offering.reservation_id:
        labels.update(
            {
                RESERVATION_KEYS[0]: offering.reservation_id,
                RESERVATION_KEYS[1]: offering.reservation_type or "default",
                RESERVATION_KEYS[2]: "true" if offering.reservation_interruptible else "false",
            }
        )
    return labels, None


def _node_terms(pod: Pod) -> tuple[Requirements, ...]:
    """The pod's node selector merged into each required node affinity term (ORed)."""
    key = (pod.node_selector, pod.required_node_affinity)
    found = _TERMS.get(key)
    if found is None:
        base = Requirements.from_labels(dict(pod.node_selector))
        if not pod.required_node_affinity:
            found = (base,)
        else:
            found = tuple(base.merge(Requirements.from_node_selector_term(t)) for t in pod.required_node_affinity)
        if len(_TERMS) > 10_000:
            _TERMS.clear()
        _TERMS[key] = found
    return found


_TERMS: dict[tuple, tuple[Requirements, ...]] = {}


def _strict(pod: Pod) -> Requirements:
    """What the pod requires of a node's labels when it has one required term (the domains it
    supports on a key); several ORed terms leave every key open here."""
    terms = _node_terms(pod)
    return terms[0] if len(terms) == 1 else Requirements.from_labels(dict(pod.node_selector))


def _filter_tolerations(c: TopologySpreadConstraint, pod: Pod) -> tuple:
    return tuple(pod.tolerations) if (c.node_taints_policy or "Ignore") == "Honor" else ()


def verify(snapshot: Snapshot, plan: Plan) -> list[Violation]:
    """Every rule the plan breaks (see the module docstring); empty when it keeps them all."""
    verifier = _Verifier(snapshot, plan)
    verifier.build()
    verifier.check_nodes()
    verifier.check_claims()
    verifier.check_reservations()
    verifier.check_topology()
    return verifier.violations


def withhold(plan: Plan, violations: Iterable[Violation]) -> Plan:
    """``plan`` without what the violations concern: the NodeClaims they name (all of a
    NodePool's new ones for its limits) and pods placed on existing nodes against a rule. Their
    pods become unschedulable with the violation as the reason, and stay pending."""
    violations = list(violations)
    if not violations:
        return plan
    claims = {claim.name: claim for claim in plan.claims}
    reason_of: dict[str, str] = {}  # claim or pod → why it is withheld
    for v in violations:
        if v.node in claims:
            reason_of.setdefault(v.node, str(v))
        elif v.kind == LIMITS and v.nodepool:
            for claim in plan.claims:
                if claim.nodepool == v.nodepool:
                    reason_of.setdefault(claim.name, str(v))
        elif v.pod:
            reason_of.setdefault(v.pod, str(v))
    unschedulable = dict(plan.unschedulable)
    kept = []
    for claim in plan.claims:
        reason = reason_of.get(claim.name)
        if reason is None:
            kept.append(claim)
            continue
        for pod in claim.pods:
            unschedulable[pod] = f"the plan verifier refused its NodeClaim: {reason}"
    existing = {}
    for node, pods in plan.existing.items():
        left = []
        for pod in pods:
            if pod in reason_of:
                unschedulable[pod] = f"the plan verifier refused placing it on node {node}: {reason_of[pod]}"
            else:
                left.append(pod)
        if left:
            existing[node] = tuple(left)
    placed = {p for claim in kept for p in claim.pods} | {p for pods in existing.values() for p in pods}
    return replace(
        plan,
        claims=tuple(kept),
        existing=existing,
        unschedulable=unschedulable,
        order=tuple(key for key in plan.order if key in placed),
    )
