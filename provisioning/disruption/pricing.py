"""Is a replacement cheaper? Upstream's price rules for consolidating M nodes into one.

* A replacement instance type survives only if its WORST-CASE launch price (the dearest
  compatible, available offering of the capacity type it would launch as: reserved, else spot,
  else on-demand) is strictly below the summed prices of the nodes it replaces.
* A replacement that could be spot or on-demand is pinned to spot, so a spot shortage cannot
  fall back to a dearer on-demand node.
* Spot to spot (every candidate spot, the replacement may be spot) needs the feature flag;
  a single-node move also needs at least 15 cheaper types and launches as the 15 cheapest,
  so price-capacity-optimized allocation cannot walk down the price ladder one step a time.
* Multi-node: if a removed node's type is among the options, only options cheaper than that
  node survive (else deleting the others and keeping it moves fewer pods).

Repacking (karpweb's, several nodes into several) prices each new node at its cheapest types'
worst launch price (``price_each``): the sum is what the move saves for sure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from provisioning.crd.labels import CAPACITY_TYPE, INSTANCE_TYPE, ZONE
from provisioning.disruption.model import Candidate
from provisioning.disruption.text import money
from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.plan import ClaimPlan, InstanceTypeOption
from provisioning.scheduling.pools import option as option_of
from provisioning.scheduling.requirements import IN, Requirement
from provisioning.scheduling.snapshot import NodePoolInput

SPOT, ON_DEMAND, RESERVED = "spot", "on-demand", "reserved"
LAUNCH_PRECEDENCE = (RESERVED, SPOT, ON_DEMAND)
MIN_SPOT_TO_SPOT_TYPES = 15  # upstream's MinInstanceTypesForSpotToSpotConsolidation
PRICE_EPSILON = 1e-9  # "strictly cheaper" beyond floating-point noise in summed prices
_SHOWN_ALTERNATIVES = 5


@dataclass(frozen=True)
class PricedReplacement:
    claim: ClaimPlan  # pinned to one capacity type and to the instance types that are cheaper
    worst_price: float  # the most it can cost per hour, whichever option launches

    @property
    def capacity_type(self) -> str:
        return self.claim.options[0].capacity_type


@dataclass(frozen=True)
class _Priced:
    option: InstanceTypeOption  # the type's cheapest offering in the launch capacity type
    worst: float


def price_replacement(
    claim: ClaimPlan,
    candidates: Sequence[Candidate],
    pools: Mapping[str, NodePoolInput],
    *,
    spot_to_spot: bool,
    multi_node: bool,
) -> PricedReplacement | str:
    """The replacement narrowed to what is worth launching, or why nothing is (for people)."""
    types, offerings, launchable = _launchable(claim, pools)
    source_price = sum(c.price_per_hour for c in candidates)
    all_spot = all(c.capacity_type == SPOT for c in candidates)

    spot_to_spot_move = all_spot and SPOT in launchable
    if spot_to_spot_move and not spot_to_spot:
        return "spot-to-spot consolidation is disabled: every node here is spot and so would be the replacement"
    capacity_type = SPOT if spot_to_spot_move else next((ct for ct in LAUNCH_PRECEDENCE if ct in launchable), None)
    if capacity_type is None:
        return "no available offering can launch the replacement its pods need"

    names = list(dict.fromkeys(o.instance_type for o in claim.options))  # options hold each type per offering
    priced = [p for p in (_price(offerings[name], capacity_type) for name in names) if p]
    cheaper = [p for p in priced if p.worst < source_price - PRICE_EPSILON]
    if not cheaper:
        best = min(priced, key=lambda p: (p.worst, p.option.instance_type))
        return (
            f"no cheaper replacement: the cheapest node that holds the pods, {best.option.instance_type} "
            f"{capacity_type}, may cost up to {money(best.worst)}/h, not less than the {money(source_price)}/h "
            "being replaced"
        )
    if multi_node:
        cheaper = _below_removed_same_type(cheaper, candidates)
        if not cheaper:
            return (
                "the only cheaper replacements are of a type being removed, and no cheaper than that node: "
                "deleting the others and keeping it would move fewer pods"
            )
    cheaper.sort(key=lambda p: (p.option.price, p.option.instance_type))

    keep = len(cheaper)
    if spot_to_spot_move and not multi_node:
        if len(cheaper) < MIN_SPOT_TO_SPOT_TYPES:
            return (
                f"spot-to-spot consolidation of one node needs at least {MIN_SPOT_TO_SPOT_TYPES} cheaper instance "
                f"types (so spot allocation cannot walk down the price ladder); only {len(cheaper)} are cheaper"
            )
        keep = MIN_SPOT_TO_SPOT_TYPES
    if any(r.min_values for r in claim.requirements.values()):
        # A type the catalog does not list has no labels to offer (and keeps the list aligned).
        labels = [types[p.option.instance_type].labels if p.option.instance_type in types else {} for p in cheaper]
        needed = claim.requirements.min_values_prefix(labels)
        if needed is None:
            problem = claim.requirements.min_values_satisfied(labels)
            return f"no cheaper replacement keeps minValues: {problem}"
        keep = max(keep, needed)
    kept = cheaper[:keep]
    return PricedReplacement(_pinned(claim, kept, capacity_type, candidates, offerings), max(p.worst for p in kept))


def price_each(
    claims: Sequence[ClaimPlan],
    candidates: Sequence[Candidate],
    pools: Mapping[str, NodePoolInput],
    *,
    spot_to_spot: bool,
) -> list[PricedReplacement] | str:
    """Each of the new nodes replacing ``candidates`` together, pinned to the capacity type it
    would launch as and to its cheapest instance types (those whose worst-case launch price is
    the least, ties kept, so the launch may still choose among them and fall back across their
    zones; more when minValues asks for more): keeping every type cheaper than the whole move,
    as for one replacement, would let each of them cost nearly as much as all the nodes they
    replace. Or why one of them cannot be launched so."""
    all_spot = all(c.capacity_type == SPOT for c in candidates)
    out = []
    for claim in claims:
        types, offerings, launchable = _launchable(claim, pools)
        capacity_type = next((ct for ct in LAUNCH_PRECEDENCE if ct in launchable), None)
        if capacity_type is None:
            return "no available offering can launch a replacement its pods need"
        if capacity_type == SPOT and all_spot and not spot_to_spot:
            return "spot-to-spot consolidation is disabled: every node here is spot and so would be a replacement"
        names = list(dict.fromkeys(o.instance_type for o in claim.options))
        priced = sorted(
            (p for p in (_price(offerings[name], capacity_type) for name in names) if p),
            key=lambda p: (p.worst, p.option.price, p.option.instance_type),
        )
        keep = sum(1 for p in priced if p.worst <= priced[0].worst + PRICE_EPSILON)
        if any(r.min_values for r in claim.requirements.values()):
            labels = [types[p.option.instance_type].labels if p.option.instance_type in types else {} for p in priced]
            needed = claim.requirements.min_values_prefix(labels)
            if needed is None:
                return f"no replacement keeps minValues: {claim.requirements.min_values_satisfied(labels)}"
            keep = max(keep, needed)
        kept = priced[:keep]
        out.append(PricedReplacement(_pinned(claim, kept, capacity_type, candidates, offerings), kept[-1].worst))
    return out


def worst_launch_price(claim: ClaimPlan, pools: Mapping[str, NodePoolInput]) -> float:
    """The most ``claim`` can cost per hour as planned: its dearest compatible offering in the
    capacity type it would launch as (reserved, else spot, else on-demand)."""
    _, by_type, launchable = _launchable(claim, pools)
    capacity_type = next((ct for ct in LAUNCH_PRECEDENCE if ct in launchable), None)
    if capacity_type is None:
        return claim.price
    return max(o.price for offerings in by_type.values() for o in offerings if o.capacity_type == capacity_type)


def _launchable(claim: ClaimPlan, pools: Mapping[str, NodePoolInput]):
    """The claim's NodePool's types by name, each option's type's offerings the claim allows
    (by type), and the capacity types among them."""
    pool = pools.get(claim.nodepool)
    types = {t.name: t for t in pool.instance_types} if pool else {}
    offerings: dict[str, list[InstanceTypeOption]] = {}
    for option in claim.options:
        known = types.get(option.instance_type)
        if known is None:  # not in the catalog: each option is an offering of its own
            offerings.setdefault(option.instance_type, []).append(option)
        elif option.instance_type not in offerings:
            offerings[option.instance_type] = _offerings(option, known, claim)
    launchable = {o.capacity_type for offs in offerings.values() for o in offs}
    return types, offerings, launchable


def _offerings(option: InstanceTypeOption, instance_type: InstanceType | None, claim: ClaimPlan):
    """The available offerings of the option's type that the claim's zone and capacity-type
    requirements allow (just the option itself when the catalog does not list the type)."""
    if instance_type is None:
        return [option]
    zone, capacity_type = claim.requirements.get(ZONE), claim.requirements.get(CAPACITY_TYPE)
    return [
        option_of(instance_type, o)
        for o in instance_type.available_offerings()
        if (zone is None or zone.has(o.zone)) and (capacity_type is None or capacity_type.has(o.capacity_type))
    ]


def _price(offerings: Sequence[InstanceTypeOption], capacity_type: str) -> _Priced | None:
    mine = [o for o in offerings if o.capacity_type == capacity_type]
    if not mine:
        return None
    cheapest = min(mine, key=lambda o: (o.price, o.zone))
    return _Priced(cheapest, max(o.price for o in mine))


def _below_removed_same_type(priced: list[_Priced], candidates: Sequence[Candidate]) -> list[_Priced]:
    """Upstream's ``filterOutSameType``: replacing several nodes with one of a removed node's
    own type must beat the cheapest removed node of that type."""
    cheapest_removed: dict[str, float] = {}
    for c in candidates:
        cheapest_removed[c.instance_type] = min(c.price_per_hour, cheapest_removed.get(c.instance_type, math.inf))
    ceilings = [cheapest_removed[p.option.instance_type] for p in priced if p.option.instance_type in cheapest_removed]
    if not ceilings:
        return priced
    ceiling = min(ceilings)
    return [p for p in priced if p.worst < ceiling - PRICE_EPSILON]


def _pinned(
    claim: ClaimPlan,
    kept: Sequence[_Priced],
    capacity_type: str,
    candidates: Sequence[Candidate],
    offerings: Mapping[str, Sequence[InstanceTypeOption]],
) -> ClaimPlan:
    cheapest = tuple(p.option for p in kept)
    rank = {o.instance_type: i for i, o in enumerate(cheapest)}
    # Every offering of the kept types in the pinned capacity type, cheapest first: the launch may
    # fall back across their zones.
    options = tuple(
        sorted(
            (
                o
                for p in kept
                for o in offerings.get(p.option.instance_type, (p.option,))
                if o.capacity_type == capacity_type
            ),
            key=lambda o: (o.price, rank[o.instance_type], o.zone),
        )
    )
    requirements = claim.requirements.add(
        Requirement.of(CAPACITY_TYPE, IN, [capacity_type]),
        Requirement.of(INSTANCE_TYPE, IN, [o.instance_type for o in cheapest]),
    )
    chosen = options[0]
    why = (
        f"replaces {', '.join(c.name for c in candidates)}: {chosen.instance_type} {capacity_type} at "
        f"{money(chosen.price)}/h is the cheapest of {len(cheapest)} instance types that hold the moving pods "
        f"and cost at most {money(max(p.worst for p in kept))}/h"
    )
    return replace(
        claim,
        requirements=requirements,
        options=options,
        why=why,
        alternatives=cheapest[1 : 1 + _SHOWN_ALTERNATIVES],
    )
