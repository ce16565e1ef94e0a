"""What the solver returns: NodeClaims to launch, pods placed on existing nodes, pods
that cannot be placed (each with the reason), and what it costs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from provisioning.scheduling.requirements import Requirements


@dataclass(frozen=True)
class InstanceTypeOption:
    """One offering a claim may launch as; options are in price order, the chosen first."""

    instance_type: str
    capacity_type: str
    zone: str
    price: float  # effective: after the NodeOverlays that apply to this offering
    # The NodeOverlays that set this offering's price and its list price before them (None: no
    # public price), and those that added extended resources to its type's capacity.
    price_overlays: tuple[str, ...] = ()
    list_price: float | None = None
    capacity_overlays: tuple[str, ...] = ()
    # A reserved offering's reservation (its type and whether it is interruptible): the
    # launch targets it and the node is labelled with it.
    reservation_id: str = ""
    reservation_type: str = ""
    reservation_interruptible: bool = False

    @property
    def listed(self) -> float | None:
        """The list price: ``price`` when no NodeOverlay set it."""
        return self.list_price if self.price_overlays else self.price

    @property
    def overlays(self) -> tuple[str, ...]:
        """Every NodeOverlay that changed this option: those of its price first."""
        return self.price_overlays + tuple(n for n in self.capacity_overlays if n not in self.price_overlays)


@dataclass(frozen=True)
class ClaimPlan:
    name: str
    nodepool: str
    requirements: Requirements
    options: tuple[InstanceTypeOption, ...]
    pods: tuple[str, ...]  # "namespace/name"
    requests: Mapping[str, int]  # the pods' requests plus DaemonSet overhead
    why: str = ""  # why the first option won, for people
    alternatives: tuple[InstanceTypeOption, ...] = ()  # the next cheapest, for the decision page
    opened_by: str = ""  # the pod that no existing node or planned claim could take
    labels: Mapping[str, str] = field(default_factory=dict)  # the NodeClaim's labels (NodePool and custom keys)
    annotations: Mapping[str, str] = field(default_factory=dict)  # the NodeClaim's annotations
    # Per instance type of the options, the extended resources NodeOverlays add to it.
    overlay_capacity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def chosen(self) -> InstanceTypeOption:
        return self.options[0]

    @property
    def price(self) -> float:
        return self.options[0].price


@dataclass(frozen=True)
class Plan:
    claims: tuple[ClaimPlan, ...]
    existing: Mapping[str, tuple[str, ...]]  # node name → pods placed on it
    unschedulable: Mapping[str, str]  # pod → the reason, naming the constraint
    solve_seconds: float = 0.0
    unreached: tuple[str, ...] = ()  # pods the deadline stopped before (also in unschedulable)
    stats: Mapping[str, float] = field(default_factory=dict)
    # The pods placed, in the order they were: each topology spread held when its pod was placed
    # in this order, as kube-scheduler checks it when it binds (empty: any order).
    order: tuple[str, ...] = ()

    @property
    def total_price(self) -> float:
        return sum(claim.price for claim in self.claims)
