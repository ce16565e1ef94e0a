"""THE solver: ``solve(snapshot) -> Plan``.

Upstream's algorithm, made fast and then cheaper:

* Pods are queued CPU-descending, then memory (first-fit decreasing), and placed on
  existing nodes first, then on NodeClaims already planned, then on a new NodeClaim of the
  first NodePool (by weight) that can take them. A planned NodeClaim keeps the set of
  instance types that can still hold its pods (a boolean mask over the pool's types that
  only shrinks); the cheapest is chosen at the end.
* Identical pods (replicas: same ``shape_key``) without topology or affinity are placed in
  batches: "how many more fit" is one vector operation over the instance types.
* ``optimize``: upstream packs each new NodeClaim as full as the largest instance type
  allows and right-sizes at the end, which buys big general-purpose nodes for mixed
  shapes. Optimized, replicas without topology constraints are first packed by an integer
  program over node patterns (``integral.pack``, column generation on HiGHS) after
  existing nodes took what they can. Replicas whose only rule is their own zone spread
  are shared out over the zones first, one at a time as the spread allows, and each zone's
  share is packed the same way. The other pods then follow the queue, joining a claim only
  while that costs no more than a node sized for them. Should that leave pods
  unplaced, upstream's packing runs as well and the plan with fewer unschedulable pods
  (then the lower price) wins.
* Preferences (preferred affinities, ScheduleAnyway spreads, PreferNoSchedule taints)
  count as hard until a pod cannot be placed; then they are relaxed one at a time in
  upstream's order.
* Every pod that cannot be placed gets a reason naming the constraint that excluded
  everything; a deadline stops the work, and the pods it did not reach say so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

import numpy as np

from provisioning.crd.labels import CAPACITY_TYPE, HOSTNAME, WELL_KNOWN_LABELS, ZONE
from provisioning.scheduling.bins import Bin, port_conflict
from provisioning.scheduling.claimtable import ClaimTable
from provisioning.scheduling.integral import pack
from provisioning.scheduling.plan import ClaimPlan, InstanceTypeOption, Plan
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.pools import Daemon, PoolModel, offer_allowed, offer_key, pool_model
from provisioning.scheduling.preferences import Variant, variants
from provisioning.scheduling.quantity import format_quantity
from provisioning.scheduling.requirements import IN, Requirement, Requirements
from provisioning.scheduling.snapshot import Snapshot
from provisioning.scheduling.taints import TOLERATE_PREFER_NO_SCHEDULE, Taint, untolerated
from provisioning.scheduling.topology import (
    ANTI,
    SPREAD,
    Blocked,
    Constraint,
    Topology,
)
from provisioning.scheduling.workloads import ExistingNode

BASE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
LARGEST, PACKED = "largest", "packed"
# Seconds the integer packing of one NodePool may take: per pod it packs, within bounds
# (small batches still get a fair search; huge ones keep the throughput).
PACK_SECONDS_PER_POD, PACK_SECONDS_MIN, PACK_SECONDS_MAX = 0.0003, 0.1, 2.0
# A claim may grow while its price rises by at most this much more than the pod alone costs.
WORTH_IT_SLACK = 1.05
# Whether a claim has any type left for more pods is first asked of every this-many-th type.
SAMPLE_STRIDE = 32
# Replicas spread over zones are shared out and packed when each zone gets at least this many.
ZONE_SHARE_MIN = 2
# Claims with at most this many pods are tried for removal once the packing is done.
ABSORB_MAX_PODS = 16
# Claims that would have to grow to a bigger type are tried only this many at a time.
UPSIZE_CANDIDATES = 4
# ... among this many of the most recent claims.
UPSIZE_WINDOW = 256


# ------------------------------------------------------------------ the solver


class _Run:
    """One packing of the snapshot with one sizing strategy."""

    def __init__(
        self,
        snapshot: Snapshot,
        strategy: str,
        deadline: float,
        clock: Callable[[], float],
        avoid: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.strategy = strategy
        self.deadline = deadline
        self.clock = clock
        # Pod key → NodePools it may not open a claim in, each with why: an earlier run's claim
        # of it there was left out for minValues (upstream tries the next NodePool then).
        self.avoid: Mapping[str, Mapping[str, str]] = avoid or {}
        self.left_out: dict[str, tuple[str, str]] = {}  # pod key → (NodePool, why) of claims ``plan`` left out
        extended = sorted({r for p in snapshot.pods for r in p.requests} - set(BASE_RESOURCES))
        self.resources = BASE_RESOURCES + tuple(extended)
        daemons = [_daemon(d) for d in snapshot.daemonsets]
        self.pools = sorted(
            (pool_model(p, self.resources, snapshot.daemonsets, daemons) for p in snapshot.nodepools),
            key=lambda m: (-m.pool.weight, m.name),
        )
        self.prefer_no_schedule = any(t.effect == "PreferNoSchedule" for m in self.pools for t in m.taints)
        self.best_effort = snapshot.min_values_policy == "BestEffort"
        self.daemons = daemons
        # Initialized nodes first, then those still starting, each by name (upstream's order:
        # consolidation should fill nodes that are up before ones that may still fail).
        self.nodes = sorted(snapshot.nodes, key=lambda n: (not n.initialized, n.name))
        self.bins: list[Bin] = [self._existing(n) for n in self.nodes]
        self._node_by_name = {n.name: n for n in self.nodes}
        self.claims: list[Bin] = []
        self.counter = 0
        self._domain_cache: dict[tuple, frozenset[str]] = {}
        self.topology = Topology(self._domains, snapshot.namespaces)
        self._variants: dict[object, list[Variant]] = {}
        for b in self.bins:
            self.topology.register(HOSTNAME, b.domain(HOSTNAME) or b.name)
        # Every group exists before anything is counted; pods already bound count in them,
        # and their required anti-affinity keeps the pods it selects out of their domains.
        for pod in snapshot.pods:
            for variant in self._variants_of(pod):
                for constraint in variant.constraints:
                    self.topology.group(constraint)
            self.topology.owns_inverse(pod)
        for b, node in zip(self.bins, self.nodes, strict=True):
            labels = {**b.labels, HOSTNAME: b.domain(HOSTNAME) or b.name}
            as_requirements = None  # the node's labels as requirements, read once for all its pods
            for pod in node.pods:
                if pod.counts_for_topology:
                    as_requirements = as_requirements or Requirements.from_labels(labels)
                    self.topology.count_bound(pod, b.taints, labels, as_requirements)
        self.remaining = {m.name: self._limits(m) for m in self.pools}
        self._committed = {m.name: np.zeros(len(self.resources), dtype=np.int64) for m in self.pools}
        self.placed: dict[str, Bin] = {}
        self.order: list[str] = []  # pods in the order they were placed (spreads hold in it)
        self._ahead: set[str] = set()  # pods counted in their zone before the packing placed them
        self.unschedulable: dict[str, str] = {}
        self.unreached: list[str] = []
        self._vector: dict[object, np.ndarray] = {}
        self._dead: dict[tuple, np.ndarray] = {}  # (shape, variant) → claims that refused it for good
        smallest = [min((p.requests.get(r, 0) for p in snapshot.pods), default=0) for r in self.resources]
        self._table = ClaimTable(len(self.resources), np.array(smallest, dtype=np.int64))
        self._claim_index: dict[int, int] = {}
        self._alone_cost: dict[tuple, float] = {}
        self._feasible_cache: dict[tuple, bool] = {}
        self._price_orders: dict[tuple, np.ndarray] = {}
        self._new_types: dict[tuple, tuple[np.ndarray, tuple] | None] = {}
        self._options: dict[tuple, tuple[list[InstanceTypeOption], Requirement]] = {}

    # ---------------------------------------------------------------- set-up

    def _existing(self, node: ExistingNode) -> Bin:
        free = np.array([node.allocatable.get(r, 0) for r in self.resources], dtype=np.int64)
        used = np.array([node.requested().get(r, 0) for r in self.resources], dtype=np.int64)
        taints = tuple(node.taints)
        if node.unschedulable:
            taints += (Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),)
        labels = dict(node.labels)
        ports = {port for pod in node.pods if not pod.terminal for port in pod.host_ports}
        # DaemonSet pods the node should run and does not yet (a node just launched): their
        # requests and host ports are spoken for, as upstream reserves them.
        missing, daemon_ports = self._missing_daemons(node, taints, labels)
        used = used + missing
        ports |= daemon_ports
        return Bin(
            node.name,
            Requirements.from_labels(labels),
            used,
            taints,
            free=free,
            labels=labels,
            pods=list(node.pods),
            ports=ports,
        )

    def _missing_daemons(self, node: ExistingNode, taints, labels) -> tuple[np.ndarray, set]:
        """The requests (beyond what its DaemonSet pods already ask) and host ports of the
        DaemonSets that would run on ``node`` but have no pod there yet."""
        total = np.zeros(len(self.resources), dtype=np.int64)
        ports: set = set()
        running = {pod.owner.name for pod in node.pods if pod.is_daemonset and pod.owner is not None}
        for daemon in self.daemons:
            if untolerated(daemon.tolerations, taints, ignore_prefer_no_schedule=True) is not None:
                continue
            if not any(term.matches(labels) for term in daemon.requirements):
                continue
            total += np.array([daemon.requests.get(r, 0) for r in self.resources], dtype=np.int64)
            if daemon.name.split("/", 1)[-1] not in running:
                ports.update(daemon.host_ports)
        already = np.array(
            [sum(p.requests.get(r, 0) for p in node.pods if p.is_daemonset) for r in self.resources], dtype=np.int64
        )
        return np.maximum(total - already, 0), ports

    def _domains(self, constraint: Constraint) -> frozenset[str]:
        """The domains a group counts: values of its key that a node the pod could get would
        have. For a spread, only NodePools and instance types that pass its node filter (the
        pod's node selector and required affinity under nodeAffinityPolicy Honor, its
        tolerations under nodeTaintsPolicy Honor), and existing nodes that pass it too."""
        found = self._domain_cache.get(constraint)
        if found is not None:
            return found
        key = constraint.key
        node_filter = constraint.node_filter
        domains: set[str] = set()
        for model in self.pools:
            terms: tuple[Requirements, ...] = (Requirements(),)
            if node_filter is not None:
                if not node_filter.matches_taints(model.taints):
                    continue
                if node_filter.affinity_policy != "Ignore" and node_filter.terms:
                    terms = node_filter.terms
            for term in terms:
                domains |= self._pool_domains(model, key, term)
        for b in self.bins:
            value = b.domain(key)
            if value is None:
                continue
            if node_filter is not None and not node_filter.matches(b.taints, b.requirements):
                continue
            domains.add(value)
        found = self._domain_cache[constraint] = frozenset(domains)
        return found

    def _pool_domains(self, model: PoolModel, key: str, term: Requirements) -> frozenset[str]:
        """Values of ``key`` on the nodes ``model`` can launch that meet ``term``."""
        cache_key = (model.name, key, term)
        found = self._domain_cache.get(cache_key)
        if found is not None:
            return found
        values: set[str] = set()
        if key != HOSTNAME and model.requirements.compatible(term) is None:
            requirements = model.requirements.merge(term)
            mask = model.type_mask(requirements)
            requirement = requirements.get(key)
            if key in (ZONE, CAPACITY_TYPE):
                allowed = offer_key(requirements)
                for i in np.flatnonzero(mask):
                    for o in model.offerings[i]:
                        if offer_allowed(o, allowed):
                            values.add(o.zone if key == ZONE else o.capacity_type)
            elif key in model.type_label_keys:
                for value in set(model.label_values(key)[mask]):
                    if value is not None and (requirement is None or requirement.has(value)):
                        values.add(value)
            elif requirement is not None and not requirement.complement and mask.any():
                values |= requirement.values  # a NodePool label or requirement the types do not speak for
        found = self._domain_cache[cache_key] = frozenset(values)
        return found

    def _limits(self, model: PoolModel) -> dict[str, int]:
        return {k: v - model.pool.in_use.get(k, 0) for k, v in model.pool.limits.items()}

    def _vec(self, pod: Pod) -> np.ndarray:
        vector = self._vector.get(pod.shape_key)
        if vector is None:
            vector = np.array([pod.requests.get(r, 0) for r in self.resources], dtype=np.int64)
            self._vector[pod.shape_key] = vector
        return vector

    def _variants_of(self, pod: Pod) -> list[Variant]:
        found = self._variants.get(pod.shape_key)
        if found is None:
            found = self._variants[pod.shape_key] = variants(
                pod, self.prefer_no_schedule, self.snapshot.preference_policy
            )
        return found

    def _topological(self, pod: Pod, variant: Variant) -> bool:
        """Does topology decide where the pod may go (its own rules, or others' anti-affinity)?"""
        return self.topology.constrained(pod, variant.constraints)

    # ---------------------------------------------------------------- the queue

    def run(self) -> None:
        groups: dict[object, list[Pod]] = {}
        for pod in self.snapshot.pods:
            groups.setdefault((pod.shape_key, tuple(self.avoid.get(pod.key, ()))), []).append(pod)
        order = sorted(groups.values(), key=_queue_order)
        if self.strategy == PACKED:
            order = self._pack_plain(order)
        retry: list[Pod] = []
        for group in order:
            if self.clock() > self.deadline:
                self.unreached += [p.key for p in group]
                continue
            if self._plain(group[0]) and len(self._variants_of(group[0])) == 1:
                retry += self._place_batch(group)
            else:
                for pod in group:
                    if self.clock() > self.deadline:
                        self.unreached.append(pod.key)
                    elif not self._place_one(pod):
                        retry.append(pod)
        # Upstream re-queues failures while there is progress: affinity to pods placed later.
        while retry and self.clock() <= self.deadline:
            still = [pod for pod in retry if not self._place_one(pod)]
            if len(still) == len(retry):
                break
            retry = still
        for pod in retry:
            if pod.key not in self.placed:
                self.unschedulable[pod.key] = self.explain(pod)
        if self.strategy == PACKED:
            self._absorb()
        for key in self.unreached:
            self.unschedulable[key] = (
                f"not reached before the {self.snapshot.deadline_seconds:g} s deadline; it stays pending "
                "for the next run"
            )

    # ---------------------------------------------------------------- claims that need not exist

    def _absorb(self) -> None:
        """Remove claims whose pods all fit, as they are, in the room other claims have left on
        their cheapest type: that costs nothing more. The integer packing plans pods of different
        node requirements apart, so a pod that asks less than a claim already guarantees would
        otherwise keep a node of its own (upstream, trying in-flight claims fewest pods first,
        puts it there). Only pods no topology rule or host port concerns move."""
        n = len(self.claims)
        if n < 2:
            return
        order = sorted(range(n), key=lambda i: (len(self.claims[i].pods), -self.claims[i].price))
        for i in order:
            a = self.claims[i]
            if not a.pods or len(a.pods) > ABSORB_MAX_PODS or self.clock() > self.deadline:
                continue
            if not all(self._movable(pod) for pod in a.pods):
                continue
            moved: list[tuple[Pod, Bin, np.ndarray]] = []
            for pod in list(a.pods):
                target = self._room_for(pod, a)
                if target is None:
                    break
                vector = self._vec(pod)
                target.used = target.used + vector
                target.pods.append(pod)
                target.stale = True
                self._update_room(target, self._claim_index[id(target)])
                moved.append((pod, target, vector))
            if len(moved) < len(a.pods):
                for pod, target, vector in moved:  # not all of them: put back what moved
                    target.used = target.used - vector
                    target.pods.remove(pod)
                    self._update_room(target, self._claim_index[id(target)])
                continue
            for pod, target, _ in moved:
                self.placed[pod.key] = target
            a.pods = []
            a.used = a.used * 0
            self._update_room(a, i)
            model = a.pool
            assert model is not None
            if a.committed is not None:
                self._committed[model.name] -= a.committed
                a.committed = None
            if "nodes" in self.remaining[model.name]:
                self.remaining[model.name]["nodes"] += 1

    def _movable(self, pod: Pod) -> bool:
        return self._plain(pod) and len(self._variants_of(pod)) == 1

    def _room_for(self, pod: Pod, source: Bin) -> Bin | None:
        """The fullest other claim whose cheapest type holds ``pod`` on top of its pods and whose
        requirements and taints already suit it."""
        vector = self._vec(pod)
        variant = self._variants_of(pod)[0]
        tolerations = self._tolerations(pod, variant)
        best: tuple | None = None
        for j in np.flatnonzero(self._table.takes_now(vector, len(self.claims))):
            b = self.claims[int(j)]
            if b is source or not b.pods or b.pool is None or b.requirements.has_min_values:
                continue  # (more pods could leave too few types for its minValues)
            if b.requirements.merge(variant.requirements) is not b.requirements:
                continue  # it would narrow the claim: not free
            if untolerated(tolerations, b.pool.taints) is not None:
                continue
            room = float(
                ((b.pool.usable[b.cheapest] - b.used - vector) / np.maximum(b.pool.usable[b.cheapest], 1)).min()
            )
            if best is None or room < best[0]:
                best = (room, b)
        return None if best is None else best[1]

    # ---------------------------------------------------------------- one pod

    def _place_one(self, pod: Pod) -> bool:
        vector = self._vec(pod)
        for number, variant in enumerate(self._variants_of(pod)):
            for b in self.bins:
                if self._fits_existing(pod, variant, b, vector, 1):
                    self._commit(pod, b, variant, vector)
                    return True
            key = (pod.shape_key, number)
            zones = self._valid_zones(pod, variant)
            for index in self._live_claims(key, vector, zones):
                b = self.claims[index]
                tightened, permanent = self._claim_accepts(pod, variant, b, vector, 1)
                if tightened is not None:
                    self._grow(b, tightened, pod, variant, vector, 1)
                    return True
                if permanent:
                    self._refused(key, index)
            for model in self.pools:
                opened = self._open(pod, variant, model, vector, 1)
                if opened is not None:
                    return True
        return False

    def _plain(self, pod: Pod) -> bool:
        """No topology rule, host port or others' anti-affinity bears on the pod: replicas of it
        may be placed in batches."""
        return _plain(pod) and not self.topology.constrained(pod, ())

    def _valid_zones(self, pod: Pod, variant: Variant) -> frozenset[str] | None:
        """The zones the pod's zone rules allow right now (None: no such rule)."""
        if not variant.constraints:
            return None
        return self.topology.zone_choices(pod, variant.constraints, variant.strict_requirements)

    def _fits_existing(self, pod: Pod, variant: Variant, b: Bin, vector: np.ndarray, count: int) -> bool:
        if untolerated(self._tolerations(pod, variant), b.taints) is not None:
            return False
        if not variant.requirements.matches(b.labels):
            return False
        if ((b.used + vector * count) > b.free).any() or port_conflict(pod, b):
            return False
        if not self._topological(pod, variant):
            return True
        tightened = self.topology.tighten(
            pod, variant.constraints, variant.strict_requirements, b.requirements, hostname=b.domain(HOSTNAME)
        )
        return not isinstance(tightened, Blocked)

    def _tolerations(self, pod: Pod, variant: Variant) -> tuple:
        if variant.tolerate_prefer_no_schedule:
            return tuple(pod.tolerations) + (TOLERATE_PREFER_NO_SCHEDULE,)
        return tuple(pod.tolerations)

    def _feasible(self, model: PoolModel, requirements: Requirements, idx: np.ndarray | None, used: np.ndarray):
        """For choosing a domain: can a node of ``model`` under ``requirements`` (of the types
        ``idx``, holding ``used``) still launch with ``key`` pinned to ``domain``?"""

        def feasible(key: str, domain: str) -> bool:
            pinned = requirements.add(Requirement.of(key, IN, (domain,)))
            cache_key = (model.name, pinned, None if idx is None else idx.tobytes(), used.tobytes())
            found = self._feasible_cache.get(cache_key)
            if found is None:
                mask = model.type_mask(pinned)
                if idx is not None:
                    mask = mask[idx]
                    usable = model.usable[idx]
                else:
                    usable = model.usable
                found = self._feasible_cache[cache_key] = bool((mask & (usable >= used).all(axis=1)).any())
            return found

        return feasible

    # ---------------------------------------------------------------- planned claims

    def _claim_accepts(
        self, pod: Pod, variant: Variant, b: Bin, vector: np.ndarray, count: int
    ) -> tuple[Requirements | None, bool]:
        """The claim's tightened requirements if ``count`` pods join it (else None), and
        whether a refusal is for good: claims only fill up and tighten, so a refusal for
        resources, requirements, taints, cost or anti-affinity stands for this shape; one
        for a zone spread or an affinity may change as other pods land."""
        model = b.pool
        assert model is not None and b.idx is not None and b.cap is not None
        if ((b.used + vector * count) > b.cap).any():
            return None, True
        if untolerated(self._tolerations(pod, variant), model.taints) is not None or port_conflict(pod, b):
            return None, True
        if pod.host_ports and model.port_conflicts(pod.host_ports)[b.idx].any():
            return None, True  # a DaemonSet may take the port on one of the claim's types
        if b.requirements.compatible(variant.requirements) is not None:
            return None, True
        merged = b.requirements.merge(variant.requirements)
        used = b.used + vector * count
        requirements = merged
        if self._topological(pod, variant):
            tightened = self.topology.tighten(
                pod,
                variant.constraints,
                variant.strict_requirements,
                merged,
                feasible=self._feasible(model, merged, b.idx, used),
                hostname=b.name,
            )
            if isinstance(tightened, Blocked):
                return None, _for_good(tightened)
            requirements = tightened
        if self._fits_as_is(b, requirements, used):
            return requirements, False  # same requirements, same cheapest type: nothing to narrow
        if self.strategy != LARGEST and not requirements.has_min_values:
            if self._affordable(pod, variant, b, requirements, used, count):
                return requirements, False
            # Not worth it stands, as does "no type holds them" unless topology narrowed a key.
            return None, requirements == merged or self._some_type_holds(b, requirements, used)
        idx = self._narrow(b, requirements, used)
        if not len(idx) or (requirements.has_min_values and not model.min_values_ok(requirements, _mask(model, idx))):
            return None, requirements == merged
        if self.strategy != LARGEST and not self._worth_it(pod, variant, b, idx, requirements, count):
            return None, True
        return requirements, False

    def _affordable(
        self, pod: Pod, variant: Variant, b: Bin, requirements: Requirements, used: np.ndarray, count: int
    ) -> bool:
        """``_worth_it`` over the claim's types that hold ``used`` under ``requirements``,
        looking only at those already cheap enough at the claim's current prices: pinning a
        domain never makes a type cheaper, so the others cannot pass (most claims keep
        hundreds of types, few of them within the allowance)."""
        model = b.pool
        assert model is not None and b.idx is not None
        allowance = self._alone(pod, variant, model) * count * WORTH_IT_SLACK
        cheap = b.idx[model.prices(b.requirements)[b.idx] - b.price <= allowance]
        idx = self._narrow(b, requirements, used, cheap)
        return bool(len(idx)) and self._worth_it(pod, variant, b, idx, requirements, count)

    def _some_type_holds(self, b: Bin, requirements: Requirements, used: np.ndarray) -> bool:
        """Whether ``_narrow`` would keep any type. A claim keeps hundreds of types and most
        hold a few more pods, so a sample spread over them usually answers first."""
        assert b.idx is not None
        return bool(len(self._narrow(b, requirements, used, b.idx[::SAMPLE_STRIDE]))) or bool(
            len(self._narrow(b, requirements, used))
        )

    def _narrow(
        self, b: Bin, requirements: Requirements, used: np.ndarray, idx: np.ndarray | None = None
    ) -> np.ndarray:
        """The claim's remaining types (or those of them in ``idx``) that meet
        ``requirements``, hold ``used`` and fit the pool's limits (work on the claim's few
        candidates, not the whole catalog)."""
        model = b.pool
        assert model is not None and b.idx is not None
        if idx is None:
            idx = b.idx
        keep = model.type_mask(requirements)[idx] & (model.usable[idx] >= used).all(axis=1)
        limits = self._limit_mask(model, b)
        if limits is not model.everything:
            keep &= limits[idx]
        return idx[keep]

    def _live_claims(self, key: tuple, vector: np.ndarray, zones: frozenset[str] | None = None) -> Iterator[int]:
        """Indices of the claims with room for ``vector`` that have not refused this
        (shape, variant) for good and are not pinned to a zone outside ``zones`` (the zones
        the pod's spread or affinity allows now; None: any): a few vector operations over
        every claim.

        Cost-aware packing looks first at the claims whose current cheapest type still
        holds the pod (no upsizing, so no price change), then at a few that would grow.
        Lazily: the first few usually take the pod, so the rest is seldom looked at. A
        caller that changes claims while it iterates takes the whole list first."""
        n = len(self.claims)
        table = self._table
        barred = table.outside(zones, n) if zones is not None else None
        if self.strategy == LARGEST:
            fits = self._unrefused(key, table.largest_holds(vector, 0, n), 0)
            yield from map(int, np.flatnonzero(fits if barred is None else fits & ~barred))
            return
        now = self._unrefused(key, table.takes_now(vector, n), 0)
        yield from map(int, np.flatnonzero(now if barred is None else now & ~barred))
        # Growing is tried on the most recent claims only (the ones still filling up). The
        # claims refused above all had room as they are, so none of them is among these.
        tail = max(0, n - UPSIZE_WINDOW)
        recent = table.largest_holds(vector, tail, n) & ~table.cheapest_holds(vector, tail, n)
        later = tail + np.flatnonzero(self._unrefused(key, recent, tail))[-UPSIZE_CANDIDATES:]
        if barred is not None:
            later = later[~barred[later]]  # zones narrow the few picked, not the picking
        yield from map(int, later)

    def _unrefused(self, key: tuple, claims: np.ndarray, start: int) -> np.ndarray:
        """``claims`` (a mask over the claims from ``start``) without those that refused
        ``key`` for good."""
        dead = self._dead.get(key)
        if dead is not None:
            stop = min(start + len(claims), len(dead))
            if stop > start:
                claims[: stop - start] &= ~dead[start:stop]
        return claims

    def _refused(self, key: tuple, index: int) -> None:
        dead = self._dead.get(key)
        if dead is None or len(dead) <= index:
            grown = np.zeros(max(len(self.claims), 64) * 2, dtype=bool)
            if dead is not None:
                grown[: len(dead)] = dead
            dead = self._dead[key] = grown
        dead[index] = True

    def _update_room(self, b: Bin, index: int) -> None:
        assert b.cap is not None and b.pool is not None
        cheapest = (b.pool.usable[b.cheapest] - b.used) if b.cheapest is not None else None
        self._table.set(index, b.cap - b.used, cheapest, b.domain(ZONE))

    def _worth_it(self, pod: Pod, variant: Variant, b: Bin, idx, requirements: Requirements, count: int) -> bool:
        """Cost-aware packing: a claim takes more pods only while that raises its price by no
        more than the pods would cost on a node sized for them (so claims never grow into
        inefficient giants)."""
        model = b.pool
        assert model is not None
        added = float(model.prices(requirements)[idx].min()) - b.price
        return added <= self._alone(pod, variant, model) * count * WORTH_IT_SLACK

    def _alone(self, pod: Pod, variant: Variant, model: PoolModel) -> float:
        """The lowest price per pod of this shape on nodes of this pool holding only such pods
        (shared by the shapes that ask for the same resources and node requirements)."""
        vector = self._vec(pod)
        key = (vector.tobytes(), model.name, variant.requirements)
        cost = self._alone_cost.get(key)
        if cost is None:
            requirements = model.requirements.merge(variant.requirements)
            mask = _prefer_ordinary(model, model.type_mask(requirements), vector, self.resources, requirements)
            counts = model.max_copies(mask, vector * 0, vector)
            with np.errstate(divide="ignore"):
                per = np.where(counts > 0, model.cheapest / np.maximum(counts, 1), np.inf)
            cost = self._alone_cost[key] = float(per.min()) if len(per) else float("inf")
        return cost

    def _fits_as_is(self, b: Bin, requirements: Requirements, used: np.ndarray) -> bool:
        """The claim keeps its requirements and its cheapest type still holds ``used``: its
        price and limits do not change, and narrowing its types can wait (``_exact``)."""
        return (
            requirements is b.requirements
            and b.cheapest is not None
            and b.pool is not None
            and not requirements.has_min_values
            and bool((b.pool.usable[b.cheapest] >= used).all())
        )

    def _exact(self, b: Bin) -> None:
        """Drop the types that no longer hold what the claim holds (deferred by ``_grow``)."""
        if b.stale and b.pool is not None and b.idx is not None:
            b.stale = False
            self._set_idx(b, b.idx[(b.pool.usable[b.idx] >= b.used).all(axis=1)])

    def _grow(self, b: Bin, requirements: Requirements, pod: Pod, variant: Variant, vector, count: int) -> None:
        model = b.pool
        assert model is not None
        if self._fits_as_is(b, requirements, b.used + vector * count):
            b.used = b.used + vector * count
            b.stale = True
            index = self._claim_index.get(id(b))
            if index is not None:
                self._update_room(b, index)
            if b.committed is None:  # a claim just opened: its capacity counts against limits
                self._commit_capacity(model, b)
            self._commit(pod, b, variant, vector, add_usage=False)
            return
        b.requirements = requirements
        b.used = b.used + vector * count
        self._set_idx(b, self._narrow(b, requirements, b.used))
        self._commit_capacity(model, b)
        self._commit(pod, b, variant, vector, add_usage=False)

    def _set_idx(self, b: Bin, idx: np.ndarray, extent: tuple | None = None) -> None:
        """Every change of a claim's types or usage goes through here (its room follows);
        ``extent`` is ``_extent`` of ``idx`` when already known."""
        model = b.pool
        assert model is not None
        b.idx = idx
        b.cap, b.cheapest, b.price = extent or _extent(model, b.requirements, idx)
        index = self._claim_index.get(id(b))
        if index is not None:
            self._update_room(b, index)

    def _new_claim_types(
        self,
        model: PoolModel,
        requirements: Requirements,
        vector: np.ndarray,
        count: int,
        exclude: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple] | None:
        """The types a new claim for ``count`` pods of ``vector`` starts with and their
        ``_extent`` (None: no type will do), less those of ``exclude``. Unless limits apply,
        that depends on nothing a placement changes, so claims opened alike share one answer."""
        limits = self._limit_mask(model, None)
        if exclude is not None and not exclude.any():
            exclude = None
        key = (model.name, requirements, vector.tobytes(), count, None if exclude is None else exclude.tobytes())
        if limits is not model.everything:
            key = None
        if key is not None and key in self._new_types:
            return self._new_types[key]
        allowed = limits if exclude is None else limits & ~exclude
        mask = _prefer_ordinary(
            model,
            model.fits(model.type_mask(requirements), vector * count) & allowed,
            vector,
            self.resources,
            requirements,
        )
        found = None
        if mask.any() and model.min_values_ok(requirements, mask):
            idx = np.flatnonzero(mask)
            extent = _extent(model, requirements, idx)
            idx.flags.writeable = extent[0].flags.writeable = False  # shared by the claims opened alike
            found = idx, extent
        if key is not None:
            self._new_types[key] = found
        return found

    def _open(self, pod: Pod, variant: Variant, model: PoolModel, vector: np.ndarray, count: int) -> Bin | None:
        if model.name in self.avoid.get(pod.key, ()):
            return None
        if not len(model) or untolerated(self._tolerations(pod, variant), model.taints) is not None:
            return None
        if model.requirements.compatible(variant.requirements) is not None:
            return None
        if "nodes" in self.remaining[model.name] and self.remaining[model.name]["nodes"] <= 0:
            return None
        name = f"{model.name}-{self.counter + 1}"
        requirements = model.requirements.merge(variant.requirements)
        if self._topological(pod, variant):
            tightened = self.topology.tighten(
                pod,
                variant.constraints,
                variant.strict_requirements,
                requirements,
                feasible=self._feasible(model, requirements, None, vector * count),
                hostname=name,
            )
            if isinstance(tightened, Blocked):
                return None
            requirements = tightened
        relaxed = False
        if self.best_effort and requirements.has_min_values:
            # BestEffort: a new claim lowers each minValues to what the types that fit offer.
            lowered = model.relax_min_values(requirements, model.fits(model.type_mask(requirements), vector * count))
            relaxed = lowered is not requirements
            requirements = lowered
        # DaemonSets that take one of the pod's host ports rule out the types they run on.
        exclude = model.port_conflicts(pod.host_ports) if pod.host_ports else None
        types = self._new_claim_types(model, requirements, vector, count, exclude)
        if types is None:
            return None
        self.counter += 1
        b = Bin(
            name,
            requirements,
            np.zeros(len(self.resources), dtype=np.int64),
            model.taints,
            pool=model,
            origin=pod.key,
            min_values_relaxed=relaxed,
        )
        self._set_idx(b, *types)
        self._claim_index[id(b)] = len(self.claims)
        self.claims.append(b)
        if "nodes" in self.remaining[model.name]:
            self.remaining[model.name]["nodes"] -= 1
        self._grow(b, requirements, pod, variant, vector, count)  # which records its room
        return b

    # ---------------------------------------------------------------- limits

    def _limit_mask(self, model: PoolModel, b: Bin | None) -> np.ndarray:
        """Types whose capacity fits in what the pool's limits leave, counting every other
        planned claim of the pool at the capacity of its cheapest type."""
        limits = self.remaining[model.name]
        if not any(name in self.resources for name in limits):
            return model.everything
        others = self._committed[model.name] - (b.committed if b is not None and b.committed is not None else 0)
        mask = model.everything.copy()
        for name, left in limits.items():
            if name in self.resources:
                j = self.resources.index(name)
                mask &= model.capacity[:, j] <= left - others[j]
        return mask

    def _commit_capacity(self, model: PoolModel, b: Bin) -> None:
        if not self.remaining[model.name]:
            return
        new = model.capacity[b.cheapest] if b.cheapest is not None else None
        total = self._committed[model.name]
        if b.committed is not None:
            total -= b.committed
        if new is not None:
            total += new
        b.committed = new

    # ---------------------------------------------------------------- batches of identical pods

    def _place_batch(self, group: list[Pod]) -> list[Pod]:
        """Place replicas without topology constraints a node at a time; returns leftovers."""
        pod, vector = group[0], self._vec(group[0])
        variant = self._variants_of(pod)[0]
        queue = self._fill_existing(group, variant, vector)
        key = (pod.shape_key, 0)
        for index in list(self._live_claims(key, vector)):  # claims grow below
            if not queue:
                break
            b = self.claims[index]
            requirements, permanent = self._claim_accepts(pod, variant, b, vector, 1)
            if requirements is None:
                if permanent:
                    self._refused(key, index)
                continue
            model = b.pool
            assert model is not None
            narrowed = self._narrow(b, requirements, b.used)
            copies = model.copies(narrowed, b.used, vector)
            room = int(copies.max()) if len(copies) else 0
            if requirements.has_min_values:
                room = _min_values_room(model, requirements, narrowed, copies, room)
            take = max(1, min(room, len(queue)))
            for p in queue[:take]:
                self._grow(b, requirements, p, variant, vector, 1) if p is queue[0] else self._commit(
                    p, b, variant, vector, add_usage=False
                )
            if take > 1:
                b.used = b.used + vector * (take - 1)
                self._set_idx(b, b.idx[(model.usable[b.idx] >= b.used).all(axis=1)])
                self._commit_capacity(model, b)
            queue = queue[take:]
        while queue and self.clock() <= self.deadline:
            opened = None
            for model in self.pools:
                size = self._new_claim_size(pod, variant, model, vector, len(queue))
                if size:
                    opened = self._open(queue[0], variant, model, vector, size)
                    if opened is not None:
                        for p in queue[1:size]:
                            self._commit(p, opened, variant, vector, add_usage=False)
                        queue = queue[size:]
                        break
            if opened is None:
                break
        if queue and self.clock() > self.deadline:
            self.unreached += [p.key for p in queue]
            return []
        return queue

    def _fill_existing(self, group: list[Pod], variant: Variant, vector: np.ndarray) -> list[Pod]:
        """Replicas onto existing nodes, a node at a time; returns the pods left."""
        queue = list(group)
        for b in self.bins:
            while queue and self._fits_existing(queue[0], variant, b, vector, 1):
                free = b.free - b.used
                room = int(np.min(np.where(vector > 0, free // np.where(vector > 0, vector, 1), len(queue))))
                for p in queue[: max(1, room)]:
                    self._commit(p, b, variant, vector)
                queue = queue[max(1, room) :]
        return queue

    # ---------------------------------------------------------------- integer packing

    def _pack_plain(self, groups: list[list[Pod]]) -> list[list[Pod]]:
        """Pack the replicas without topology constraints by the integer program
        (``integral.pack``), per NodePool and node requirements, after existing nodes took
        what they can; returns the groups (or parts) still to place, in queue order."""
        rest: list[list[Pod]] = []
        jobs: dict[tuple, list[tuple[list[Pod], Variant, np.ndarray, Requirements]]] = {}
        for group in groups:
            pod = group[0]
            if self._spread_over_zones(group[0]) and self._worth_sharing(group):
                rest += self._zone_shares(group, jobs)
                continue
            if not (self._plain(pod) and len(self._variants_of(pod)) == 1):
                rest.append(group)
                continue
            variant, vector = self._variants_of(pod)[0], self._vec(pod)
            queue = self._fill_existing(group, variant, vector)
            if not queue:
                continue
            model = next((m for m in self.pools if self._may_open(pod, variant, m)), None)
            requirements = model.requirements.merge(variant.requirements) if model is not None else None
            if model is None or requirements is None or requirements.has_min_values:
                rest.append(queue)
                continue
            # Classes that differ only in what they ask of the instance type (architecture, family,
            # size...) are packed together, each on the types it allows: a node may mix them.
            shared = requirements.without(*(k for k in requirements if k in model.type_label_keys))
            jobs.setdefault((model.name, shared), []).append((queue, variant, vector, requirements))
        # A NodePool's jobs (one per zone's share of spread pods, one for the rest) share the
        # time one job of all their pods would get, each in proportion to its pods.
        pods_of = {key: sum(len(c[0]) for c in classes) for key, classes in jobs.items()}
        pool_pods: dict[str, int] = {}
        for (name, _), count in pods_of.items():
            pool_pods[name] = pool_pods.get(name, 0) + count
        for (name, requirements), classes in jobs.items():
            model = next(m for m in self.pools if m.name == name)
            total = pool_pods[name]
            seconds = max(PACK_SECONDS_MIN, min(PACK_SECONDS_MAX, PACK_SECONDS_PER_POD * total))
            left = self._pack_job(model, requirements, classes, seconds * pods_of[(name, requirements)] / total)
            for queue in left:
                # A pod whose zone was counted ahead cannot go back to the queue (it would be
                # counted twice): left unplaced, it makes ``solve`` run upstream's packing too.
                for pod in queue:
                    if pod.key in self._ahead:
                        if self.clock() > self.deadline:
                            self.unreached.append(pod.key)
                        else:
                            self.unschedulable[pod.key] = (
                                f"NodePool {name}: the packing of its zone's share of the spread left it out"
                            )
                queue = [pod for pod in queue if pod.key not in self._ahead]
                if queue:
                    rest.append(queue)
        return sorted(rest, key=_queue_order)

    def _spread_over_zones(self, pod: Pod) -> bool:
        """Its only topology rules are its own zone spreads (DoNotSchedule): no affinity, host
        port or preference, no one's anti-affinity or other spread selects it. Its replicas
        can then be shared out over the zones first and each zone's share packed like plain
        replicas (``_zone_shares``)."""
        if not pod.topology_spread or pod.host_ports:
            return False
        if pod.pod_affinity.required or pod.pod_affinity.preferred:
            return False
        if pod.pod_anti_affinity.required or pod.pod_anti_affinity.preferred:
            return False
        found = self._variants_of(pod)
        if len(found) != 1 or not found[0].constraints:
            return False
        own = set(found[0].constraints)
        if any(c.kind != SPREAD or c.key != ZONE for c in own) or self.topology.inverse_selecting(pod):
            return False
        return all(g.constraint in own for g in self.topology.spreads_selecting(pod))

    def _worth_sharing(self, group: list[Pod]) -> bool:
        """Enough replicas for at least ``ZONE_SHARE_MIN`` in each zone: fewer fill no node
        alone, and do better joining the claims other pods open in their zone."""
        constraints = self._variants_of(group[0])[0].constraints
        zones = max(len(self.topology.group(c).counts) for c in constraints)
        return len(group) >= ZONE_SHARE_MIN * zones

    def _zone_shares(self, group: list[Pod], jobs: dict) -> list[list[Pod]]:
        """Replicas spread over zones, one at a time in queue order: onto an existing node
        where one holds it and its spread allows, else counted in the zone its spread picks
        now (the least loaded it may use, as a new claim of the first NodePool that can take
        it would be pinned to) and added to that zone's share, which the integer program packs
        together with the NodePool's other shares in that zone (and any replicas pinned to it);
        replicas free to go anywhere are packed apart. Cost-aware joining would otherwise grow
        each zone's claims a pod at a time and stop at small nodes (a bigger type's price
        step costs more than one pod). Returns the pods left for the queue.

        Each pod is counted when its zone is chosen, in placement order, so the spread holds
        for every pod in ``order`` as it does when they are placed one by one."""
        pod = group[0]
        variant, vector = self._variants_of(pod)[0], self._vec(pod)
        model = next((m for m in self.pools if self._may_open(pod, variant, m)), None)
        if model is None:
            return [group]
        requirements = model.requirements.merge(variant.requirements)
        if requirements.has_min_values:
            return [group]
        feasible = self._feasible(model, requirements, None, vector)
        shares: dict[Requirements, list[Pod]] = {}
        left: list[Pod] = []
        for p in group:
            if self.clock() > self.deadline:
                left.append(p)
                continue
            existing = next((b for b in self.bins if self._fits_existing(p, variant, b, vector, 1)), None)
            if existing is not None:
                self._commit(p, existing, variant, vector)
                continue
            zoned = self.topology.tighten(
                p, variant.constraints, variant.strict_requirements, requirements, feasible=feasible
            )
            if isinstance(zoned, Blocked) or zoned.get(ZONE) is None:
                left.append(p)  # the queue explains it
                continue
            self.topology.record_ahead(p, model.taints, zoned)
            self.order.append(p.key)
            self._ahead.add(p.key)
            shares.setdefault(zoned, []).append(p)
        for zoned, pods in shares.items():
            shared = zoned.without(*(k for k in zoned if k in model.type_label_keys))
            jobs.setdefault((model.name, shared), []).append((pods, variant, vector, zoned))
        return [left] if left else []

    def _may_open(self, pod: Pod, variant: Variant, model: PoolModel) -> bool:
        return (
            bool(len(model))
            and model.name not in self.avoid.get(pod.key, ())
            and untolerated(self._tolerations(pod, variant), model.taints) is None
            and model.requirements.compatible(variant.requirements) is None
        )

    def _pack_job(
        self,
        model: PoolModel,
        requirements: Requirements,
        classes: list[tuple[list[Pod], Variant, np.ndarray, Requirements]],
        seconds: float,
    ) -> list[list[Pod]]:
        allowed = self._limit_mask(model, None)
        # GPU and other accelerator types are kept for the pods that ask for them, but the pods
        # that do not may fill what those nodes have left (as upstream's in-flight claims take them).
        extended = [
            j for j, r in enumerate(self.resources) if r not in BASE_RESOURCES and any(c[2][j] for c in classes)
        ]
        sharing = model.exotic & ~model.metal
        sharing = sharing & (model.usable[:, extended] > 0).any(axis=1) if extended else np.zeros_like(sharing)
        compat = []
        for _, _, vector, class_requirements in classes:
            mask = model.type_mask(class_requirements) & allowed
            if not any(vector[j] for j in extended):
                ordinary = mask & (~model.exotic | sharing)
                mask = ordinary if (ordinary & ~model.exotic).any() else mask
            compat.append(mask)
        compat = np.array(compat)
        limits = self.remaining[model.name]
        columns = {self.resources.index(k): v for k, v in limits.items() if k in self.resources}
        packing = pack(
            np.array([c[2] for c in classes]),
            np.array([len(c[0]) for c in classes]),
            model.usable,
            model.prices(requirements),
            compat,
            capacity=model.capacity,
            limits={j: left - int(self._committed[model.name][j]) for j, left in columns.items()} or None,
            node_limit=limits.get("nodes"),
            time_limit=min(seconds, max(0.0, self.deadline - self.clock())),
        )
        queues = [iter(c[0]) for c in classes]  # replicas in queue order
        refused: list[list[Pod]] = [[] for _ in classes]
        for _, contents in packing.nodes:
            if self.clock() > self.deadline:
                break  # the rest go back to the queue, which reports them unreached
            pods = [(c, next(queues[c])) for c, n in contents.items() for _ in range(n)]
            if not self._open_packed(model, requirements, pods, classes):
                for c, pod in pods:
                    refused[c].append(pod)
        return [refused[c] + list(queue) for c, queue in enumerate(queues)]

    def _open_packed(self, model: PoolModel, requirements: Requirements, pods, classes) -> bool:
        """A new claim holding ``pods`` (class index, pod) as the integer program packed them:
        what every class on it asks of its node."""
        for c in dict.fromkeys(c for c, _ in pods):
            requirements = requirements.merge(classes[c][3])
        used = np.sum([classes[c][2] for c, _ in pods], axis=0)
        types = self._new_claim_types(model, requirements, used, 1)  # nodes of one pattern share them
        if types is None or ("nodes" in self.remaining[model.name] and self.remaining[model.name]["nodes"] <= 0):
            return False
        self.counter += 1
        b = Bin(
            f"{model.name}-{self.counter}",
            requirements,
            used,
            model.taints,
            pool=model,
            origin=pods[0][1].key,
        )
        self._set_idx(b, *types)
        self._claim_index[id(b)] = len(self.claims)
        self.claims.append(b)
        self._update_room(b, len(self.claims) - 1)
        if "nodes" in self.remaining[model.name]:
            self.remaining[model.name]["nodes"] -= 1
        self._commit_capacity(model, b)
        for c, pod in pods:
            self._commit(pod, b, classes[c][1], classes[c][2], add_usage=False)
        return True

    def _new_claim_size(self, pod: Pod, variant: Variant, model: PoolModel, vector: np.ndarray, left: int) -> int:
        """How many of the ``left`` pods a new claim of this pool should take."""
        if not len(model) or model.requirements.compatible(variant.requirements) is not None:
            return 0
        requirements = model.requirements.merge(variant.requirements)
        mask = _prefer_ordinary(
            model, model.type_mask(requirements) & self._limit_mask(model, None), vector, self.resources, requirements
        )
        counts = np.minimum(model.max_copies(mask, np.zeros_like(vector), vector), left)
        if not counts.any():
            return 0
        if requirements.has_min_values:
            # No more pods than leave enough types to meet its minValues.
            rows = np.flatnonzero(counts)
            most = _min_values_room(model, requirements, rows, counts[rows], int(counts.max()))
            counts = np.minimum(counts, most)
        if self.strategy == LARGEST:
            return int(counts.max())
        with np.errstate(divide="ignore"):
            per_pod = np.where(counts > 0, model.cheapest / np.maximum(counts, 1), np.inf)
        best = float(per_pod.min())
        # Among types within 0.1 % of the best price per pod, take the most pods per node.
        return int(counts[per_pod <= best * 1.001].max())

    # ---------------------------------------------------------------- recording

    def _commit(self, pod: Pod, b: Bin, variant: Variant, vector: np.ndarray, add_usage: bool = True) -> None:
        if add_usage and b.existing:
            b.used = b.used + vector
        b.pods.append(pod)
        b.ports.update(pod.host_ports)
        self.placed[pod.key] = b
        if pod.key in self._ahead:
            # Ordered and counted in its zone when that was chosen (``_zone_shares``).
            self.topology.settle(pod, b.taints, b.requirements, b.domain(HOSTNAME))
            return
        self.order.append(pod.key)
        self._record(pod, b, variant)

    def _record(self, pod: Pod, b: Bin, variant: Variant) -> None:
        if not self.topology.groups and not self.topology.inverse:
            return
        self.topology.record(pod, b.taints, b.requirements, hostname=b.domain(HOSTNAME))

    # ---------------------------------------------------------------- explanations

    def explain(self, pod: Pod) -> str:
        """Why no NodePool could take the pod, naming the constraint, per NodePool."""
        variant = self._variants_of(pod)[-1]
        vector = self._vec(pod)
        if not self.pools:
            return "no NodePool is ready to launch nodes"
        reasons = [f"NodePool {m.name}: {self._why_not(pod, variant, m, vector)}" for m in self.pools]
        return "; ".join(reasons)

    def _why_not(self, pod: Pod, variant: Variant, model: PoolModel, vector: np.ndarray) -> str:
        avoided = self.avoid.get(pod.key, {}).get(model.name)
        if avoided is not None:
            return avoided
        taint = untolerated(self._tolerations(pod, variant), model.taints)
        if taint is not None:
            return f"the pod does not tolerate taint {taint}"
        problem = model.requirements.compatible(variant.requirements)
        if problem is not None:
            return problem.message
        if not len(model):
            return "its EC2NodeClass offers no available instance type the NodePool allows"
        requirements = model.requirements.merge(variant.requirements)
        candidates = [t.labels for t in model.pool.instance_types]
        mismatch = requirements.only(model.type_label_keys).match_any(candidates)
        if mismatch is not None:
            return mismatch.message
        mask = model.type_mask(requirements)
        if not mask.any():
            return f"no available offering matches {_offering_terms(requirements)}"
        fits = model.fits(mask, vector)
        if not fits.any():
            return self._short_of(model, mask, vector)
        if not (fits & self._limit_mask(model, None)).any():
            return f"its limits ({_limits(model)}) leave no room for another node that fits"
        if "nodes" in self.remaining[model.name] and self.remaining[model.name]["nodes"] <= 0:
            return f"its node limit ({model.pool.limits['nodes']}) is reached"
        if not self.best_effort and not model.min_values_ok(requirements, fits):
            unmet = requirements.min_values_satisfied([t.labels for t, ok in zip(model.types, fits, strict=True) if ok])
            detail = f": {unmet.message}" if unmet is not None else ""
            return f"the instance types that fit do not meet the minValues of its requirements{detail}"
        if self._topological(pod, variant):
            blocked = self.topology.tighten(
                pod,
                variant.constraints,
                variant.strict_requirements,
                requirements,
                feasible=self._feasible(model, requirements, None, vector),
                hostname=f"{model.name}-new",
            )
            if isinstance(blocked, Blocked):
                return f"no domain satisfies {blocked.describe()}"
        return "it could not be placed with the other pending pods"

    def _short_of(self, model: PoolModel, mask: np.ndarray, vector: np.ndarray) -> str:
        usable = model.usable[mask]
        for j, name in enumerate(self.resources):
            if vector[j] and usable[:, j].max() < vector[j]:
                best = int(usable[:, j].max())
                return (
                    f"no instance type has enough {name}: the pod needs {format_quantity(name, int(vector[j]))}, "
                    f"the largest allowed offers {format_quantity(name, best)} after kubelet and DaemonSet overhead"
                )
        return "no instance type has enough of every resource the pod requests at once"

    # ---------------------------------------------------------------- the plan

    def _cheapest_options(self, b: Bin, limit: int) -> tuple[list[InstanceTypeOption], Requirement]:
        """The claim's ``limit`` cheapest types that hold its pods, as options and as the
        instance-type requirement. Claims opened alike share their (possibly stale) types:
        those are priced and sorted once, and each claim keeps the first that hold it."""
        model = b.pool
        assert model is not None and b.idx is not None
        offers = offer_key(b.requirements)
        key = (model.name, b.idx.tobytes(), offers)
        order = self._price_orders.get(key)
        if order is None:
            order = self._price_orders[key] = model.by_price(b.idx, b.requirements)
        kept = _first_holding(model.usable, order, b.used, limit)
        key = (model.name, kept.tobytes(), offers)
        found = self._options.get(key)
        if found is None:
            # One tuple shared by the claims opened alike (readers of the plan may key on it).
            options = tuple(model.options_in_order(kept, b.requirements))
            types = Requirement.of("node.kubernetes.io/instance-type", IN, [o.instance_type for o in options])
            found = self._options[key] = (options, types)
        return found

    def score(self) -> tuple[int, float]:
        """Fewer unschedulable pods first, then the lower price (what ``solve`` compares)."""
        return len(self.unschedulable), round(sum(b.price for b in self.claims if b.pods), 6)

    def plan(self, solve_seconds: float) -> Plan:
        claims = []
        unschedulable = dict(self.unschedulable)
        for b in self.claims:
            if not b.pods:
                continue
            finished = self._finish(b)
            if isinstance(finished, str):  # its cheapest options do not meet minValues (Strict)
                for pod in b.pods:
                    self.left_out[pod.key] = (b.pool.name, finished)  # type: ignore[union-attr]
                    unschedulable[pod.key] = f"NodePool {b.pool.name}: {finished}"  # type: ignore[union-attr]
                continue
            claims.append(finished)
        claims = self._within_limits(claims, unschedulable)
        claims = self._within_reservations(claims, unschedulable)
        existing = {b.name: tuple(p.key for p in b.pods[self._bound(b) :]) for b in self.bins}
        placed = {key for claim in claims for key in claim.pods} | {k for keys in existing.values() for k in keys}
        return Plan(
            claims=tuple(claims),
            existing={k: v for k, v in existing.items() if v},
            unschedulable=unschedulable,
            solve_seconds=solve_seconds,
            unreached=tuple(self.unreached),
            stats={"pods": len(self.snapshot.pods), "strategy": self.strategy},
            order=tuple(key for key in self.order if key in placed),
        )

    def _within_reservations(self, claims: list[ClaimPlan], unschedulable: dict[str, str]) -> list[ClaimPlan]:
        """No capacity reservation is planned past the instances it has left (upstream's
        ReservationManager): claims take their reserved option in order while the reservation
        has room; after, its offerings are dropped from their options, so they launch as the
        next cheapest (spot, on-demand), or, with nothing else allowed, their pods stay pending
        saying why."""
        left: dict[str, int] = {}
        for pool in self.snapshot.nodepools:
            for it in pool.instance_types:
                for o in it.offerings:
                    if o.reservation_id:
                        left[o.reservation_id] = o.reservation_capacity
        if not left:
            return claims
        out = []
        for claim in claims:
            full = {o.reservation_id for o in claim.options if o.reservation_id and left.get(o.reservation_id, 0) < 1}
            if full:
                options = tuple(o for o in claim.options if o.reservation_id not in full)
                if not options:
                    why = f"capacity reservation {', '.join(sorted(full))} has no instance left"
                    for pod in claim.pods:
                        unschedulable[pod] = f"NodePool {claim.nodepool}: {why}"
                    continue
                claim = replace(
                    claim,
                    options=options,
                    why=_why_chosen(options[0], options, len(claim.pods), claim.requests),
                    alternatives=_alternatives(options),
                )
            if claim.chosen.reservation_id:
                left[claim.chosen.reservation_id] -= 1
            out.append(claim)
        return out

    def _within_limits(self, claims: list[ClaimPlan], unschedulable: dict[str, str]) -> list[ClaimPlan]:
        """Options that would take a NodePool past its limits, were every claim to launch as its
        largest option (upstream subtracts each claim's largest option from what is left), are
        dropped. Planning counted each claim at its cheapest option, and all of those fit, so
        every claim keeps that one: each in turn may take what is left less the cheapest of the
        claims after it. A claim whose remaining options no longer meet a minValues is left out
        (Strict: its pods stay pending, saying why) or has it lowered (BestEffort)."""
        out: list[ClaimPlan | None] = list(claims)
        for model in self.pools:
            limited = [r for r in model.pool.limits if r in self.resources]
            mine = [i for i, c in enumerate(out) if c is not None and c.nodepool == model.name]
            if not limited or not mine:
                continue
            columns = [self.resources.index(r) for r in limited]
            capacity = {t.name: model.capacity[i][columns] for i, t in enumerate(model.types)}
            left = np.array([model.pool.limits[r] - model.pool.in_use.get(r, 0) for r in limited], dtype=np.int64)
            cheapest = [capacity[out[i].chosen.instance_type] for i in mine]  # type: ignore[union-attr]
            after = np.sum(cheapest, axis=0) if cheapest else np.zeros(len(limited), dtype=np.int64)
            for n, i in enumerate(mine):
                after = after - cheapest[n]
                room = left - after
                claim = out[i]
                assert claim is not None
                kept = tuple(o for o in claim.options if (capacity[o.instance_type] <= room).all())
                if len(kept) < len(claim.options) and kept:
                    requirements = claim.requirements.add(
                        Requirement.of(
                            "node.kubernetes.io/instance-type", IN, list(dict.fromkeys(o.instance_type for o in kept))
                        )
                    )
                    annotations = claim.annotations
                    if requirements.has_min_values:
                        labels = [
                            {
                                **model.types[model.index_of(o.instance_type)].labels,
                                ZONE: o.zone,
                                CAPACITY_TYPE: o.capacity_type,
                            }
                            for o in kept
                        ]
                        if requirements.min_values_prefix(labels) is None:
                            if not self.best_effort:
                                unmet = requirements.min_values_satisfied(labels)
                                why = (
                                    f"the instance types that stay within its limits ({_limits(model)}) do not "
                                    f"meet minValues: {unmet.message if unmet else ''}"
                                )
                                for pod in claim.pods:
                                    self.left_out[pod] = (model.name, why)
                                    unschedulable[pod] = f"NodePool {model.name}: {why}"
                                out[i] = None
                                continue
                            requirements = _lowered(requirements, labels)
                            annotations = {**annotations, MIN_VALUES_RELAXED: "true"}
                    out[i] = claim = replace(
                        claim,
                        options=kept,
                        requirements=requirements,
                        annotations=annotations,
                        alternatives=_alternatives(kept),
                        why=_why_chosen(kept[0], kept, len(claim.pods), claim.requests),
                    )
                left = left - np.max([capacity[o.instance_type] for o in claim.options], axis=0)
        return [c for c in out if c is not None]

    def _bound(self, b: Bin) -> int:
        node = self._node_by_name.get(b.name)
        return len(node.pods) if node is not None else 0

    def _finish(self, b: Bin) -> ClaimPlan | str:
        """The claim as launched: its cheapest ``max_instance_types`` options (upstream's
        truncation), labels and annotations. Under the Strict minValues policy, options that
        no longer meet a minValues leave the claim out, and the reason is returned."""
        model = b.pool
        assert model is not None and b.idx is not None
        limit = self.snapshot.max_instance_types
        requirements = b.requirements
        relaxed = b.min_values_relaxed
        if requirements.has_min_values:
            self._exact(b)
            options = model.options(b.mask, requirements, limit)
            labels = [
                {**model.types[model.index_of(o.instance_type)].labels, ZONE: o.zone, CAPACITY_TYPE: o.capacity_type}
                for o in options
            ]  # one per offering: zones and capacity types count as the types' labels do
            if requirements.min_values_prefix(labels) is None:
                if not self.best_effort:
                    unmet = requirements.min_values_satisfied(labels)
                    detail = unmet.message if unmet is not None else "minValues"
                    return (
                        f"its {len(options)} cheapest instance types (at most {limit} are launched with) do not "
                        f"meet minValues: {detail}"
                    )
                requirements = _lowered(requirements, labels)
                relaxed = True
            types = Requirement.of("node.kubernetes.io/instance-type", IN, [o.instance_type for o in options])
        else:
            options, types = self._cheapest_options(b, limit)
        chosen = options[0]
        index = model.index_of(chosen.instance_type)
        requests = {r: int(v) for r, v in zip(self.resources, b.used + model.overhead[index], strict=True) if v}
        pods = tuple(p.key for p in b.pods)
        requirements = requirements.add(types)
        overlay_capacity = {
            name: dict(it.overlay_capacity)
            for name in dict.fromkeys(o.instance_type for o in options)
            if (it := model.types[model.index_of(name)]).overlay_capacity
        }
        annotations = {**model.pool.annotations, MIN_VALUES_RELAXED: "true" if relaxed else "false"}
        # Upstream's NodeClaim annotations: the launch follows the overlaid prices (CreateFleet by
        # priority), and the capacity simulated includes resources only the overlays know of.
        if any(o.price_overlays for o in options):
            annotations[PRICE_OVERLAY_APPLIED] = "true"
        if overlay_capacity:
            annotations[CAPACITY_OVERLAY_APPLIED] = "true"
        return ClaimPlan(
            name=b.name,
            nodepool=model.name,
            requirements=requirements,
            options=options if isinstance(options, tuple) else tuple(options),
            pods=pods,
            requests=requests,
            why=_why_chosen(chosen, options, len(pods), requests),
            alternatives=_alternatives(options),
            opened_by=b.origin,
            labels=_claim_labels(model, requirements),
            annotations=annotations,
            overlay_capacity=overlay_capacity,
        )


# ------------------------------------------------------------------ entry point


def solve(snapshot: Snapshot, clock: Callable[[], float] = time.perf_counter) -> Plan:
    """Plan NodeClaims for the snapshot's pending pods (see the module docstring)."""
    start = clock()
    deadline = start + snapshot.deadline_seconds
    # Optimized: plain replicas by integer packing, the rest cost-aware; if that leaves pods
    # unplaced that upstream's packing might place (limits, topology), upstream's runs too.
    strategies = (PACKED, LARGEST) if snapshot.optimize else (LARGEST,)
    best: _Run | None = None
    for strategy in strategies:
        run = _Run(snapshot, strategy, deadline, clock)
        run.run()
        if best is None or run.score() < best.score():
            best = run
        if clock() > deadline or len(best.unschedulable) == len(best.unreached):
            break
    assert best is not None
    # Only the winner is turned into a plan (options, explanations): the rest is thrown away.
    plan = best.plan(clock() - start)
    avoid: dict[str, dict[str, str]] = {}
    while best.left_out and clock() <= deadline:
        # Claims left out for minValues (Strict: their launchable or within-limits options
        # miss one) were counted in the topology their pods' neighbours were placed by. Their
        # pods are planned again away from that NodePool, as upstream's scheduler moves on to
        # the next NodeClaim template. Each round bars more, so this ends.
        for key, (pool, why) in best.left_out.items():
            avoid[key] = {**avoid.get(key, {}), pool: why}
        best = _Run(snapshot, best.strategy, deadline, clock, avoid)
        best.run()
        plan = best.plan(clock() - start)
    return plan


# ------------------------------------------------------------------ helpers


def _queue_order(group: Sequence[Pod]) -> tuple:
    pod = group[0]
    return (-pod.requests.get("cpu", 0), -pod.requests.get("memory", 0), pod.creation_timestamp or "", pod.key)


MIN_VALUES_RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"
PRICE_OVERLAY_APPLIED = "karpenter.sh/price-overlay-applied"
CAPACITY_OVERLAY_APPLIED = "karpenter.sh/capacity-overlay-applied"


def _min_values_room(
    model: PoolModel, requirements: Requirements, rows: np.ndarray, copies: np.ndarray, most: int
) -> int:
    """The most pods (up to ``most``) a claim may take while the types ``rows`` that hold them
    (``copies``: how many each holds) still meet every minValues; at least 1."""
    for take in sorted({int(c) for c in copies if 0 < c <= most}, reverse=True):
        mask = np.zeros(len(model), dtype=bool)
        mask[rows[copies >= take]] = True
        if model.min_values_ok(requirements, mask):
            return take
    return 1


def _lowered(requirements: Requirements, labels: Sequence[Mapping[str, str]]) -> Requirements:
    """``requirements`` with each minValues lowered to the distinct values ``labels`` offer."""
    changed = []
    for key, requirement in requirements.items():
        if requirement.min_values:
            offered = len({v for lab in labels if (v := lab.get(key)) is not None and requirement.has(v)})
            if offered < requirement.min_values:
                changed.append(replace(requirement, min_values=offered or None))
    if not changed:
        return requirements
    return Requirements([r for k, r in requirements.items() if k not in {c.key for c in changed}] + changed)


def _claim_labels(model: PoolModel, requirements: Requirements) -> dict[str, str]:
    """The labels a NodeClaim is created with (upstream's NodeClaimTemplate): its NodePool's
    template labels and a value each requirement on a custom key allows. Well-known keys get
    theirs from the instance the cloud launches."""
    labels = dict(model.pool.labels)
    for key, requirement in requirements.items():
        if key in labels or key in WELL_KNOWN_LABELS or key == HOSTNAME or key in _SIMULATION_KEYS:
            continue
        value = requirement.any_value()
        if value is not None:
            labels[key] = value
    return labels


_SIMULATION_KEYS = frozenset({"karpenter.sh/registered", "karpenter.sh/initialized"})


def _for_good(blocked: Blocked) -> bool:
    """Hostname anti-affinity and spreads only get stricter on a node as pods land: a refusal
    for them stands. Other topology refusals may change as other pods are placed."""
    return blocked.constraint.key == HOSTNAME and (
        blocked.inverse or blocked.selected or blocked.constraint.kind in (ANTI, SPREAD)
    )


def _plain(pod: Pod) -> bool:
    return not (
        pod.topology_spread
        or pod.pod_affinity.required
        or pod.pod_affinity.preferred
        or pod.pod_anti_affinity.required
        or pod.pod_anti_affinity.preferred
        or pod.host_ports
    )


def _mask(model: PoolModel, idx: np.ndarray) -> np.ndarray:
    mask = np.zeros(len(model), dtype=bool)
    mask[idx] = True
    return mask


def _extent(model: PoolModel, requirements: Requirements, idx: np.ndarray) -> tuple:
    """Of the types ``idx``: the most each resource can hold, the cheapest type under
    ``requirements`` (first of equals) and its price."""
    if not len(idx):
        return np.zeros(len(model.resources), dtype=np.int64), None, float("inf")
    prices = model.prices(requirements)[idx]
    best = int(prices.argmin())
    return model.usable[idx].max(axis=0), int(idx[best]), float(prices[best])


def _first_holding(usable: np.ndarray, order: np.ndarray, used: np.ndarray, limit: int) -> np.ndarray:
    """The first ``limit`` types of ``order`` whose usable resources hold ``used``; the
    cheapest few usually do, so they are looked at first."""
    head = order[: 2 * limit]
    kept = head[(usable[head] >= used).all(axis=1)]
    if len(kept) >= limit or len(head) == len(order):
        return kept[:limit]
    return order[(usable[order] >= used).all(axis=1)][:limit]


def _prefer_ordinary(
    model: PoolModel, mask: np.ndarray, vector: np.ndarray, resources: Sequence[str], requirements: Requirements
) -> np.ndarray:
    """Drop exotic types (metal, accelerators) unless the pod asks for an extended resource,
    a minValues counts them, or nothing else fits, as upstream's exotic filter."""
    if requirements.has_min_values or any(vector[j] for j, r in enumerate(resources) if r not in BASE_RESOURCES):
        return mask
    ordinary = mask & ~model.exotic
    return ordinary if ordinary.any() else mask


def _daemon(overhead) -> Daemon:
    pod = overhead.pod
    base = Requirements.from_labels(dict(pod.node_selector))
    terms = [base.merge(Requirements.from_node_selector_term(t)) for t in pod.required_node_affinity] or [base]
    requests = {k: v for k, v in pod.requests.items() if k != "pods"}
    requests["pods"] = 1
    return Daemon(overhead.key, requests, tuple(terms), tuple(pod.tolerations), tuple(pod.host_ports))


def _offering_terms(requirements: Requirements) -> str:
    parts = [str(requirements[k]) for k in (ZONE, CAPACITY_TYPE) if k in requirements]
    return " and ".join(parts) or "the NodePool's requirements"


def _limits(model: PoolModel) -> str:
    return ", ".join(f"{k} {format_quantity(k, v)}" for k, v in model.pool.limits.items())


def _alternatives(options: Sequence[InstanceTypeOption], count: int = 5) -> tuple[InstanceTypeOption, ...]:
    """The next cheapest instance types after the chosen one, each at its cheapest offering."""
    seen = {options[0].instance_type}
    out = []
    for option in options[1:]:
        if option.instance_type not in seen:
            seen.add(option.instance_type)
            out.append(option)
            if len(out) == count:
                break
    return tuple(out)


def _why_chosen(chosen: InstanceTypeOption, options: Sequence[InstanceTypeOption], pods: int, requests) -> str:
    asks = ", ".join(f"{format_quantity(k, v)} {k}" for k, v in requests.items() if k in ("cpu", "memory"))
    types = len({o.instance_type for o in options})
    where = f"{chosen.capacity_type}, {chosen.zone}"
    if chosen.reservation_id:  # priced as upstream prices a reservation: free, for ordering only
        where += f", capacity reservation {chosen.reservation_id}"
    text = (
        f"{chosen.instance_type} ({where}) at ${chosen.price:.4f}/h{_overlaid(chosen)} "
        f"is the cheapest of {types} instance types that hold its {pods} pod{'s' if pods != 1 else ''} "
        f"({asks}, DaemonSets included)"
    )
    runner = _alternatives(options, 1)
    if runner:
        text += f"; next: {runner[0].instance_type} {runner[0].capacity_type} ${runner[0].price:.4f}/h"
        text += _overlaid(runner[0])
    return text


def _overlaid(option: InstanceTypeOption) -> str:
    """`` (list $0.0960, NodeOverlay savings-plan)`` for a price NodeOverlays changed."""
    if not option.overlays or option.listed == option.price:
        return ""
    listed = "no list price" if option.listed is None else f"list ${option.listed:.4f}"
    return f" ({listed}, NodeOverlay {', '.join(option.overlays)})"
