"""NodeOverlays laid over each NodePool's instance types, as upstream's overlay store does.

Upstream: ``kubernetes-sigs/karpenter`` ``pkg/controllers/nodeoverlay/`` (the controller and its
``InstanceTypeStore``), ``pkg/cloudprovider/types.go`` (``AdjustedPrice``) and, for types
without public pricing, ``aws/karpenter-provider-aws`` ``pkg/providers/instancetype/offering/``
(``GetOverlayPrice``, v1.14).

* An overlay applies to an instance type of a NodePool when its requirements hold for the
  type's labels together with the NodePool's template labels and ``karpenter.sh/nodepool``
  (a requirement on a custom key the NodePool does not label fails, as upstream's
  ``Compatible``), and for at least one of the type's offerings; zone, zone id and capacity
  type requirements pick the offerings. So an overlay can be for one NodePool only.
* Overlays are taken by weight, highest first (no weight counts as 0), equal weights by name
  in reverse order (upstream's ``OrderByWeight``). The first to reach an offering sets its
  price: ``price`` replaces it, ``priceAdjustment`` changes it (``+0.5``, ``-27%``), never below
  0. ``capacity`` adds extended resources to the type; different overlays' resources merge,
  the first to name a resource gives its amount (which replaces the type's own, if it has one).
* Two overlays of equal weight that would set the price of one offering, or the same resource
  of one type, conflict: the one taken first (the name later in the alphabet) is applied, the
  other is not applied anywhere (no partial application) and is reported with the overlay it
  conflicts with, for its ``ValidationSucceeded`` condition.
* An overlay with exactly one requirement, ``node.kubernetes.io/instance-type In [...]``, and an
  absolute ``price`` prices those types' offerings that have no price (pre-GA types missing
  from the Pricing API) and so makes them launchable, in every NodePool (upstream v1.14).

Pure: no Django; overlays come in as :class:`Overlay` values (``Overlay.from_spec`` reads a
validated manifest's spec).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioning.crd.labels import INSTANCE_TYPE, NODEPOOL
from provisioning.scheduling.instancetypes import InstanceType, Offering
from provisioning.scheduling.quantity import to_int
from provisioning.scheduling.requirements import OFFERING_LABELS, Requirements

ZONE_ID = "topology.k8s.aws/zone-id"


@dataclass(frozen=True)
class Overlay:
    """A NodeOverlay as the catalog applies it."""

    name: str
    requirements: Requirements
    weight: int = 0
    price: str | None = None  # absolute, "0.42"
    price_adjustment: str | None = None  # "+0.05", "-27%"
    capacity: Mapping[str, int] = field(default_factory=dict)  # extended resource -> amount
    preview: bool = False  # exactly instance-type In [...] and an absolute price (v1.14)

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any]) -> Overlay:
        """From a NodeOverlay's spec, as THE validator accepted it."""
        raw = spec.get("requirements") or []
        requirements = Requirements.from_list(raw)
        price = spec.get("price")
        preview = (
            price is not None
            and len(raw) == 1
            and raw[0].get("key") == INSTANCE_TYPE
            and raw[0].get("operator") == "In"
        )
        weight = spec.get("weight")
        return cls(
            name=name,
            requirements=requirements,
            weight=int(weight) if isinstance(weight, int | float) and not isinstance(weight, bool) else 0,
            price=None if price is None else str(price),
            price_adjustment=None if spec.get("priceAdjustment") is None else str(spec["priceAdjustment"]),
            capacity={str(k): to_int(str(k), v) for k, v in (spec.get("capacity") or {}).items()},
            preview=preview,
        )

    @property
    def sets_price(self) -> bool:
        return self.price is not None or self.price_adjustment is not None

    @property
    def change(self) -> str:
        """The price change in a few words: ``= 0.42``, ``-27%``, ``+0.05``."""
        if self.price is not None:
            return f"= {self.price}"
        return self.price_adjustment or ""

    def adjusted(self, price: float) -> float:
        """Upstream's ``AdjustedPrice``: the overlay's price, or ``price`` changed by it, at least 0."""
        if self.price is not None:
            return float(self.price)
        change = self.price_adjustment or ""
        if not change:
            return price
        if change.endswith("%"):
            out = price * (1 + float(change[:-1]) / 100)
        else:
            out = price + float(change)
        return max(out, 0.0)


@dataclass(frozen=True)
class PoolTypes:
    """One NodePool's instance types before overlays, and the labels its nodes get from it
    (template labels and ``karpenter.sh/nodepool``)."""

    name: str
    labels: Mapping[str, str]
    instance_types: tuple[InstanceType, ...]


@dataclass
class Applied:
    """Each NodePool's instance types with the overlays applied; the overlays left out for a
    conflict (name → why, naming the other overlay and where); and where each applied overlay
    changed something (name → NodePool → instance types)."""

    instance_types: dict[str, tuple[InstanceType, ...]]
    conflicts: dict[str, str] = field(default_factory=dict)
    reach: dict[str, dict[str, int]] = field(default_factory=dict)


def order(overlays: Sequence[Overlay]) -> list[Overlay]:
    """Upstream's ``OrderByWeight``: the highest weight first; equal weights by name, the name
    later in the alphabet first."""
    return sorted(sorted(overlays, key=lambda o: o.name, reverse=True), key=lambda o: -o.weight)


def offering_labels(offering: Offering) -> dict[str, str]:
    labels = {"topology.kubernetes.io/zone": offering.zone, "karpenter.sh/capacity-type": offering.capacity_type}
    if offering.zone_id:
        labels[ZONE_ID] = offering.zone_id
    return labels


@dataclass
class _PriceMark:
    overlay: Overlay  # the one that sets the price
    lowest_weight: int
    lowest_name: str


@dataclass
class _CapacityMark:
    resources: dict[str, int]
    names: list[str]
    lowest_weight: int
    lowest_name: str
    lowest_resources: Mapping[str, int]


def apply(pools: Sequence[PoolTypes], overlays: Sequence[Overlay]) -> Applied:
    """Lay ``overlays`` over every NodePool's instance types (see the module docstring). The
    insufficient-capacity marks come after (``Catalog.mark_unavailable``), so an offering a
    preview price makes launchable stays out of launches while it is marked, as any other."""
    if not overlays:
        return Applied({p.name: p.instance_types for p in pools})
    ordered = order(overlays)
    type_reqs = {o.name: o.requirements.without(*OFFERING_LABELS) for o in ordered}
    offer_reqs = {o.name: o.requirements.only(OFFERING_LABELS) for o in ordered}
    labels_of: dict[tuple[str, str], dict[str, str]] = {}

    def matched(pool: PoolTypes, it: InstanceType, overlay: Overlay) -> list[int]:
        """Indexes of the type's offerings the overlay reaches in this NodePool."""
        key = (pool.name, it.name)
        labels = labels_of.get(key)
        if labels is None:
            labels = labels_of[key] = {**pool.labels, NODEPOOL: pool.name, **it.labels}
        if not type_reqs[overlay.name].matches(labels):
            return []
        wanted = offer_reqs[overlay.name]
        if not wanted:
            return list(range(len(it.offerings)))
        return [i for i, o in enumerate(it.offerings) if wanted.matches(offering_labels(o))]

    prices: dict[tuple[str, str, int], _PriceMark] = {}
    capacities: dict[tuple[str, str], _CapacityMark] = {}
    conflicts: dict[str, str] = {}
    reach: dict[str, dict[str, int]] = {}
    for overlay in ordered:
        if not overlay.sets_price and not overlay.capacity:
            continue
        reached = [
            (pool, it, found) for pool in pools for it in pool.instance_types if (found := matched(pool, it, overlay))
        ]
        conflict = _conflict(overlay, reached, prices, capacities)
        if conflict:
            conflicts[overlay.name] = conflict
            continue
        # Checked for every NodePool before anything is stored: no partial application.
        for pool, it, found in reached:
            if overlay.sets_price:
                for i in found:
                    mark = prices.get((pool.name, it.name, i))
                    if mark is None:
                        prices[pool.name, it.name, i] = _PriceMark(overlay, overlay.weight, overlay.name)
                    else:
                        mark.lowest_weight, mark.lowest_name = overlay.weight, overlay.name
            if overlay.capacity:
                mark = capacities.get((pool.name, it.name))
                if mark is None:
                    capacities[pool.name, it.name] = _CapacityMark(
                        dict(overlay.capacity), [overlay.name], overlay.weight, overlay.name, overlay.capacity
                    )
                else:
                    added = {r: a for r, a in overlay.capacity.items() if r not in mark.resources}
                    if added:
                        mark.resources.update(added)
                        mark.names.append(overlay.name)
                    mark.lowest_weight, mark.lowest_name = overlay.weight, overlay.name
                    mark.lowest_resources = overlay.capacity
            per_pool = reach.setdefault(overlay.name, {})
            per_pool[pool.name] = per_pool.get(pool.name, 0) + 1

    preview = _preview_prices(ordered, conflicts)
    touched = {(pool, name) for pool, name, _ in prices} | set(capacities)
    out: dict[str, tuple[InstanceType, ...]] = {}
    for pool in pools:
        types = []
        for it in pool.instance_types:
            if (pool.name, it.name) not in touched and it.name not in preview:
                types.append(it)  # most types: nothing to do, the very same object
                continue
            offerings = tuple(
                _priced(o, prices.get((pool.name, it.name, i)), preview.get(it.name))
                for i, o in enumerate(it.offerings)
            )
            capacity = capacities.get((pool.name, it.name))
            if capacity is None and all(a is b for a, b in zip(offerings, it.offerings, strict=True)):
                types.append(it)
                continue
            changed = dataclasses.replace(it, offerings=offerings)
            if capacity is not None:
                # Upstream's ApplyCapacityOverlay (lo.Assign): the overlays' extended resources are
                # added to the type's, and replace an amount the type reports for one of them.
                merged = {**it.capacity, **capacity.resources}
                changed = dataclasses.replace(
                    changed, capacity=merged, overlays=tuple(capacity.names), overlay_capacity=dict(capacity.resources)
                )
            types.append(changed)
        out[pool.name] = tuple(types)
    for name, pool_counts in list(reach.items()):
        if name in conflicts:
            del reach[name]
        else:
            reach[name] = dict(sorted(pool_counts.items()))
    return Applied(out, conflicts, reach)


def _conflict(
    overlay: Overlay,
    reached: list[tuple[PoolTypes, InstanceType, list[int]]],
    prices: Mapping[tuple[str, str, int], _PriceMark],
    capacities: Mapping[tuple[str, str], _CapacityMark],
) -> str:
    """Why ``overlay`` may not be applied (an overlay of equal weight already reached the same
    offering's price, or the same resource of a type), or ""."""
    for pool, it, found in reached:
        if overlay.sets_price:
            for i in found:
                mark = prices.get((pool.name, it.name, i))
                if mark is not None and mark.lowest_weight == overlay.weight:
                    o = it.offerings[i]
                    return (
                        f"conflicts with NodeOverlay {mark.lowest_name} of the same weight ({overlay.weight}) on the "
                        f"price of {it.name} {o.capacity_type} in {o.zone} (NodePool {pool.name}); "
                        "give one of them another weight, or requirements that do not overlap"
                    )
        if overlay.capacity:
            mark = capacities.get((pool.name, it.name))
            if mark is not None and mark.lowest_weight == overlay.weight:
                both = sorted(set(overlay.capacity) & set(mark.lowest_resources))
                if both:
                    return (
                        f"conflicts with NodeOverlay {mark.lowest_name} of the same weight ({overlay.weight}) on "
                        f"the capacity {both[0]} of {it.name} (NodePool {pool.name}); "
                        "give one of them another weight, or requirements that do not overlap"
                    )
    return ""


def _preview_prices(ordered: Sequence[Overlay], conflicts: Mapping[str, str]) -> dict[str, Overlay]:
    """Instance type → the preview overlay that prices it where it has no price (the first by
    weight: upstream's cache keeps one price per type)."""
    out: dict[str, Overlay] = {}
    for overlay in ordered:
        if not overlay.preview or overlay.name in conflicts:
            continue
        requirement = overlay.requirements.get(INSTANCE_TYPE)
        for name in sorted(requirement.values) if requirement is not None else ():
            out.setdefault(name, overlay)
    return out


def _priced(offering: Offering, mark: _PriceMark | None, preview: Overlay | None) -> Offering:
    """The offering with its overlays' price (the same object when none applies)."""
    names: list[str] = []
    price = offering.price
    available, reason = offering.available, offering.unavailable_reason
    if price is None and preview is not None:
        # Upstream prices a type without public pricing from the overlay and offers it.
        price = float(preview.price)  # type: ignore[arg-type]
        names.append(preview.name)
        available, reason = True, ""
    if mark is not None and price is not None:
        price = mark.overlay.adjusted(price)
        if mark.overlay.name not in names:
            names.append(mark.overlay.name)
    elif mark is not None and mark.overlay.price is not None:
        # An absolute price on an offering without one: priced, not launchable (only the
        # preview shape makes it so, as upstream).
        price = float(mark.overlay.price)
        names.append(mark.overlay.name)
    if not names:
        return offering
    return Offering(
        offering.zone,
        offering.capacity_type,
        price,
        available,
        offering.zone_id,
        reason,
        tuple(names),
        offering.price,
    )
