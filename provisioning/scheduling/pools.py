"""A NodePool's instance types as arrays, so filtering them is a few vector operations.

For every NodePool the solver keeps one ``PoolModel``: the instance types that have an
available offering the pool allows, their usable resources (allocatable minus the
DaemonSet overhead that lands on the pool's nodes) and capacity as integer matrices, and
caches of "which types satisfy these requirements". A planned NodeClaim then carries a
boolean mask over these types that only ever shrinks, as upstream's instance-type set.
"""

from __future__ import annotations

import copy
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from provisioning.crd.labels import CAPACITY_TYPE, ZONE
from provisioning.scheduling.instancetypes import InstanceType, Offering
from provisioning.scheduling.plan import InstanceTypeOption
from provisioning.scheduling.requirements import INSTANCE_TYPE_LABELS, OFFERING_LABELS, Requirements
from provisioning.scheduling.snapshot import NodePoolInput
from provisioning.scheduling.taints import Taint, untolerated

INF = float("inf")
# Offering labels a reserved offering has and others have not (upstream's offering requirements).
RESERVATION_KEYS = (
    "karpenter.k8s.aws/capacity-reservation-id",
    "karpenter.k8s.aws/capacity-reservation-type",
    "karpenter.k8s.aws/capacity-reservation-interruptible",
)
OfferKey = tuple  # (zone, capacity type, reservation id, type, interruptible): each a Requirement or None


def offer_key(requirements: Requirements) -> OfferKey:
    """What of ``requirements`` selects offerings (not instance types)."""
    return (requirements.get(ZONE), requirements.get(CAPACITY_TYPE), *(requirements.get(k) for k in RESERVATION_KEYS))


def offer_allowed(o: Offering, key: OfferKey) -> bool:
    """Does the offering meet the offering requirements ``key``? A reservation's labels are
    absent on other offerings (so ``In`` never matches them, ``NotIn`` does)."""
    zone, ct, *reserved = key
    if (zone is not None and not zone.has(o.zone)) or (ct is not None and not ct.has(o.capacity_type)):
        return False
    if not any(r is not None for r in reserved):
        return True
    values = (
        (o.reservation_id, o.reservation_type or "default", "true" if o.reservation_interruptible else "false")
        if o.reservation_id
        else (None, None, None)
    )
    return all(r is None or r.label_check()(v) for r, v in zip(reserved, values, strict=True))


# Every node a NodePool launches gets these labels once it is up: DaemonSets may select them
# (upstream adds them to a NodeClaim template's requirements for DaemonSets only).
_REGISTERED = Requirements.from_labels({"karpenter.sh/registered": "true", "karpenter.sh/initialized": "true"})


@dataclass(frozen=True)
class Daemon:
    """A DaemonSet as overhead: its pod's requests, requirements and tolerations."""

    name: str
    requests: dict[str, int]
    requirements: tuple[Requirements, ...]  # OR of terms (nodeSelector merged into each)
    tolerations: tuple
    host_ports: tuple = ()


class PoolModel:
    def __init__(self, pool: NodePoolInput, resources: Sequence[str], daemons: Sequence[Daemon]) -> None:
        self.pool = pool
        self.name = pool.name
        self.resources = tuple(resources)
        self.requirements = pool.requirements
        self.taints: tuple[Taint, ...] = tuple(pool.taints)
        pool_key = offer_key(self.requirements)
        types: list[InstanceType] = []
        offerings: list[tuple[Offering, ...]] = []
        for it in pool.instance_types:
            usable = tuple(
                o for o in it.offerings if o.available and o.price is not None and offer_allowed(o, pool_key)
            )
            if usable:
                types.append(it)
                offerings.append(
                    tuple(sorted(usable, key=lambda o: (o.price, o.capacity_type, o.zone, o.reservation_id)))
                )
        self.types = types
        self.offerings = offerings
        self.names = np.array([t.name for t in types], dtype=object)
        self.label_keys = frozenset(k for t in types for k in t.labels) - OFFERING_LABELS
        # The keys an instance type speaks for: those its labels carry, and every well-known
        # instance-type label (a type without instance-gpu-count has no GPU, so a pod asking
        # for one is not met by it, even when no type of the pool has the label).
        self.type_label_keys = self.label_keys | INSTANCE_TYPE_LABELS
        self.capacity = self._matrix([t.capacity for t in types])
        allocatable = self._matrix([t.allocatable for t in types])
        self.daemons = [d for d in daemons if self._daemon_lands(d)]
        self._daemon_types: list[tuple[Daemon, np.ndarray]] = []  # each DaemonSet and the types it runs on
        self.overhead = self._overhead(types)
        self._port_conflicts: dict[tuple, np.ndarray] = {}
        self.usable = allocatable - self.overhead
        self.cheapest = np.array([o[0].price for o in offerings], dtype=float) if types else np.zeros(0)
        self.exotic = np.fromiter((is_exotic(t) for t in types), dtype=bool, count=len(types))
        self.metal = np.fromiter(
            ("metal" in t.labels.get("karpenter.k8s.aws/instance-size", "") for t in types),
            dtype=bool,
            count=len(types),
        )
        self.everything = np.ones(len(types), dtype=bool)
        self.everything.flags.writeable = False  # shared: callers combine it, never change it
        self._type_masks: dict[Requirements, np.ndarray] = {}
        self._offer_masks: dict[OfferKey, np.ndarray] = {}
        self._price_vectors: dict[OfferKey, tuple[np.ndarray, np.ndarray]] = {}
        self._index = {t.name: i for i, t in enumerate(types)}
        self._type_label_cache: dict[str, np.ndarray] = {}
        self.all_zones = frozenset(o.zone for offs in offerings for o in offs)

    def __len__(self) -> int:
        return len(self.types)

    # ---------------------------------------------------------------- set-up

    def _matrix(self, resources: list) -> np.ndarray:
        out = np.zeros((len(resources), len(self.resources)), dtype=np.int64)
        for i, amounts in enumerate(resources):
            for j, name in enumerate(self.resources):
                out[i, j] = amounts.get(name, 0)
        return out

    def _daemon_lands(self, daemon: Daemon) -> bool:
        """Does this DaemonSet run on the pool's nodes? (taints, PreferNoSchedule tolerated)."""
        if untolerated(daemon.tolerations, self.taints, ignore_prefer_no_schedule=True) is not None:
            return False
        return any(self.requirements.merge(_REGISTERED).compatible(term) is None for term in daemon.requirements)

    def _overhead(self, types: list[InstanceType]) -> np.ndarray:
        """Per instance type, the summed requests of the DaemonSets that can run on it."""
        out = np.zeros((len(types), len(self.resources)), dtype=np.int64)
        for daemon in self.daemons:
            vector = np.array([daemon.requests.get(r, 0) for r in self.resources], dtype=np.int64)
            runs = np.zeros(len(types), dtype=bool)
            for i, it in enumerate(types):
                if any(term.only(self.type_label_keys).matches(it.labels) for term in daemon.requirements):
                    out[i] += vector
                    runs[i] = True
            self._daemon_types.append((daemon, runs))
        return out

    def port_conflicts(self, ports) -> np.ndarray:
        """Types on which a DaemonSet takes one of ``ports`` (a pod wanting them cannot go there)."""
        key = tuple(ports)
        found = self._port_conflicts.get(key)
        if found is None:
            from provisioning.scheduling.bins import ports_conflict

            found = np.zeros(len(self.types), dtype=bool)
            for daemon, runs in self._daemon_types:
                if daemon.host_ports and ports_conflict(key, daemon.host_ports):
                    found |= runs
            self._port_conflicts[key] = found
        return found

    # ---------------------------------------------------------------- filtering

    def type_mask(self, requirements: Requirements) -> np.ndarray:
        """Types whose labels satisfy ``requirements`` and that have an allowed offering."""
        mask = self._type_masks.get(requirements)
        if mask is None:
            labels_part = requirements.only(self.type_label_keys)
            mask = np.fromiter((labels_part.matches(t.labels) for t in self.types), dtype=bool, count=len(self.types))
            mask &= self.offer_mask(requirements)
            self._type_masks[requirements] = mask
        return mask

    def offer_mask(self, requirements: Requirements) -> np.ndarray:
        key = offer_key(requirements)
        mask = self._offer_masks.get(key)
        if mask is None:
            mask = np.fromiter(
                (any(offer_allowed(o, key) for o in offs) for offs in self.offerings),
                dtype=bool,
                count=len(self.types),
            )
            self._offer_masks[key] = mask
        return mask

    def fits(self, mask: np.ndarray, requests: np.ndarray) -> np.ndarray:
        """``mask`` narrowed to the types whose usable resources hold ``requests``."""
        return mask & (self.usable >= requests).all(axis=1)

    def copies(self, rows: np.ndarray, used: np.ndarray, pod: np.ndarray) -> np.ndarray:
        """How many more pods of ``pod`` each type of ``rows`` (indices) holds on top of ``used``."""
        free = self.usable[rows] - used
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(pod > 0, free // np.where(pod > 0, pod, 1), np.iinfo(np.int64).max)
        return np.maximum(per.min(axis=1), 0) if len(per) else np.zeros(0, dtype=np.int64)

    def max_copies(self, mask: np.ndarray, used: np.ndarray, pod: np.ndarray) -> np.ndarray:
        """As ``copies``, for every type; 0 outside ``mask``."""
        counts = np.zeros(len(self.types), dtype=np.int64)
        counts[mask] = self.copies(np.flatnonzero(mask), used, pod)
        return counts

    def label_values(self, key: str) -> np.ndarray:
        values = self._type_label_cache.get(key)
        if values is None:
            values = np.array([t.labels.get(key) for t in self.types], dtype=object)
            self._type_label_cache[key] = values
        return values

    def offered_values(self, key: str, requirements: Requirements, mask: np.ndarray) -> set[str]:
        """The values of ``key`` the types of ``mask`` offer under ``requirements``: from their
        allowed offerings for zone and capacity type, from their labels otherwise."""
        requirement = requirements.get(key)
        if key in (ZONE, CAPACITY_TYPE):
            allowed = offer_key(requirements)
            values = {
                o.zone if key == ZONE else o.capacity_type
                for i in np.flatnonzero(mask)
                for o in self.offerings[i]
                if offer_allowed(o, allowed)
            }
        else:
            values = {v for v in self.label_values(key)[mask] if v is not None}
        return {v for v in values if requirement is None or requirement.has(v)}

    def relax_min_values(self, requirements: Requirements, mask: np.ndarray) -> Requirements:
        """``requirements`` with each minValues lowered to the distinct values the types of
        ``mask`` offer (BestEffort); the same object when nothing needs lowering."""
        from dataclasses import replace

        changed = []
        for key, requirement in requirements.items():
            if requirement.min_values:
                offered = self.offered_values(key, requirements, mask)
                if len(offered) < requirement.min_values:
                    changed.append(replace(requirement, min_values=len(offered) or None))
        if not changed:
            return requirements
        keys = {c.key for c in changed}
        return Requirements([r for k, r in requirements.items() if k not in keys] + changed)

    def min_values_ok(self, requirements: Requirements, mask: np.ndarray) -> bool:
        for key, requirement in requirements.items():
            if requirement.min_values and len(self.offered_values(key, requirements, mask)) < requirement.min_values:
                return False
        return True

    # ---------------------------------------------------------------- choosing

    def options(
        self, mask: np.ndarray, requirements: Requirements, limit: int | None = None
    ) -> list[InstanceTypeOption]:
        """Each masked type at its cheapest offering the requirements allow, cheapest first
        (ties by name); the first ``limit`` of them when given."""
        prices, choice = self._priced(requirements)
        masked = np.where(mask, prices, INF)
        count = int((masked < INF).sum())
        take = count if limit is None else min(limit, count)
        if 0 < take < count:
            # Only the cheapest ``take`` (and every type tied with the last) need sorting.
            cutoff = masked[np.argpartition(masked, take - 1)[take - 1]]
            candidates = np.flatnonzero(masked <= cutoff)
        else:
            candidates = np.flatnonzero(masked < INF)
        order = candidates[np.lexsort((self.names[candidates], masked[candidates]))]
        return self.options_in_order(order[:take], requirements)

    def by_price(self, idx: np.ndarray, requirements: Requirements) -> np.ndarray:
        """The types ``idx`` in the order of ``options`` (cheapest allowed offering first, ties
        by name), without those no allowed offering prices."""
        prices = self.prices(requirements)[idx]
        priced = prices < INF
        return idx[priced][np.lexsort((self.names[idx[priced]], prices[priced]))]

    def options_in_order(self, order: np.ndarray, requirements: Requirements) -> list[InstanceTypeOption]:
        """Every offering of the types ``order`` the requirements allow (each type in each of
        its zones and capacity types: what a launch may fall back to), cheapest first; equal
        prices in the order of ``order``, then by zone."""
        allowed = offer_key(requirements)
        rows = []
        for rank, i in enumerate(order):
            it = self.types[i]
            for o in self.offerings[i]:
                if offer_allowed(o, allowed):
                    rows.append((float(o.price), rank, o.zone, o.capacity_type, it.name, o.reservation_id, o, it))
        rows.sort(key=lambda row: row[:6])
        return [option(it, o) for *_, o, it in rows]

    def prices(self, requirements: Requirements) -> np.ndarray:
        """Per type, the price of its cheapest offering the requirements allow (inf: none)."""
        return self._priced(requirements)[0]

    def _priced(self, requirements: Requirements) -> tuple[np.ndarray, np.ndarray]:
        """Per type: the cheapest allowed offering's price and its index in ``offerings``."""
        key = offer_key(requirements)
        found = self._price_vectors.get(key)
        if found is None:
            prices = np.full(len(self.types), INF)
            choice = np.zeros(len(self.types), dtype=np.int64)
            for i, offs in enumerate(self.offerings):
                for j, o in enumerate(offs):  # sorted by price: the first allowed is the cheapest
                    if offer_allowed(o, key):
                        prices[i], choice[i] = o.price, j
                        break
            found = self._price_vectors[key] = (prices, choice)
        return found

    def index_of(self, name: str) -> int:
        return self._index[name]


_EXOTIC_FAMILY = re.compile(r"^(p\d|g\d|gr\d|inf\d|trn\d|dl\d|f\d|vt\d|u-|u\d)")


# The models of the NodePools solved lately. A disruption round simulates the same cluster
# hundreds of times, each a solve over the same NodePool inputs; building a model (every type's
# offerings sorted, allocatable and DaemonSet overhead computed) took most of a simulation.
# A model is a pure function of its inputs and its caches only memoize, so it is shared.
_RECENT_MODELS = 16
_models: OrderedDict[tuple, tuple[object, object, PoolModel]] = OrderedDict()


def pool_model(
    pool: NodePoolInput, resources: Sequence[str], daemonsets: object, daemons: Sequence[Daemon]
) -> PoolModel:
    """The ``PoolModel`` of ``pool`` with ``resources`` and the DaemonSets ``daemons`` (read from
    ``daemonsets``, the snapshot's own tuple), built once while the same objects are solved.

    A simulation hands the solver a copy of the NodePool input whose limits count the removed
    nodes as gone; the model does not depend on limits, so such a copy shares it (under its own
    ``pool``, which the solver reads the limits from)."""
    key = (pool.name, id(pool.instance_types), tuple(resources), id(daemonsets))
    found = _models.get(key)
    # Identity, not equality, for the large inputs: the key's ids are only trusted while the
    # objects they name live, which the entry's own references guarantee.
    if found is not None and found[0] is pool.instance_types and found[1] is daemonsets:
        model = found[2]
        if model.pool is pool:
            _models.move_to_end(key)
            return model
        if model.requirements == pool.requirements and model.taints == tuple(pool.taints):
            _models.move_to_end(key)
            shared = copy.copy(model)
            shared.pool = pool
            return shared
    model = PoolModel(pool, resources, daemons)
    _models[key] = (pool.instance_types, daemonsets, model)
    while len(_models) > _RECENT_MODELS:
        _models.popitem(last=False)
    return model


def is_exotic(it: InstanceType) -> bool:
    """Upstream's exotic filter: metal sizes and accelerator types are only launched when
    nothing else will do. High-memory ``u`` types are kept out the same way: a general
    pod on a 12 TiB node is never what anyone wants."""
    labels = it.labels
    return (
        "metal" in labels.get("karpenter.k8s.aws/instance-size", "")
        or "karpenter.k8s.aws/instance-gpu-count" in labels
        or "karpenter.k8s.aws/instance-accelerator-count" in labels
        or bool(_EXOTIC_FAMILY.match(labels.get("karpenter.k8s.aws/instance-family", it.name)))
    )


def option(it: InstanceType, offering: Offering) -> InstanceTypeOption:
    """A claim's option for one offering, with the NodeOverlays that priced it and its list
    price, and those that added to its type's capacity."""
    price = float(offering.price)  # type: ignore[arg-type]  (only priced offerings are options)
    reservation = {}
    if offering.reservation_id:
        reservation = {
            "reservation_id": offering.reservation_id,
            "reservation_type": offering.reservation_type,
            "reservation_interruptible": offering.reservation_interruptible,
        }
    if not offering.overlays and not it.overlays:
        return InstanceTypeOption(it.name, offering.capacity_type, offering.zone, price, **reservation)
    return InstanceTypeOption(
        it.name,
        offering.capacity_type,
        offering.zone,
        price,
        price_overlays=offering.overlays,
        list_price=offering.list_price if offering.overlays else None,
        capacity_overlays=it.overlays,
        **reservation,
    )
