"""Instance types and their offerings, as the solver sees them.

Resources are integers in base units (see ``quantity``): cpu in millicores, memory and
ephemeral-storage in bytes, pods and extended resources (``nvidia.com/gpu``...) as counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Resources = Mapping[str, int]


@dataclass(frozen=True)
class Offering:
    """One way to buy an instance type: a zone and a capacity type, at a price."""

    zone: str
    capacity_type: str  # "on-demand" | "spot" | "reserved"
    price: float | None  # USD per hour; None = no known price, so never offered
    available: bool
    zone_id: str = ""
    unavailable_reason: str = ""  # "insufficient capacity until 12:03:10", "no subnet in zone", ...
    # The NodeOverlays that set ``price`` (see ``overlays.py``), and the price before them: the
    # list price, None for a type without public pricing that an overlay made launchable.
    overlays: tuple[str, ...] = ()
    list_price: float | None = None
    # A reserved offering: one per capacity reservation, with the instances it has left.
    reservation_id: str = ""
    reservation_type: str = ""  # "default" | "capacity-block"
    reservation_interruptible: bool = False
    reservation_capacity: int = 0

    @property
    def listed(self) -> float | None:
        """The list price: before any NodeOverlay (``price`` when none applies)."""
        return self.list_price if self.overlays else self.price

    @property
    def key(self) -> str:
        """The ICE cache key: ``capacity-type:instance-type:zone`` minus the type (a reserved
        offering's ends with ``:<reservation id>``)."""
        return f"{self.capacity_type}:{self.zone}" + (f":{self.reservation_id}" if self.reservation_id else "")


@dataclass(frozen=True)
class Overhead:
    kube_reserved: Resources = field(default_factory=dict)
    system_reserved: Resources = field(default_factory=dict)
    eviction_threshold: Resources = field(default_factory=dict)

    def total(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for part in (self.kube_reserved, self.system_reserved, self.eviction_threshold):
            for name, amount in part.items():
                out[name] = out.get(name, 0) + amount
        return out


@dataclass(frozen=True)
class InstanceType:
    """An EC2 instance type with Karpenter's labels, capacity and overhead.

    ``labels`` hold the single-valued labels (instance-type, arch, os, category, family,
    cpu, memory ...); zone and capacity type live on the offerings.
    """

    name: str
    labels: Mapping[str, str]
    capacity: Resources
    overhead: Overhead
    offerings: tuple[Offering, ...] = ()
    # The NodeOverlays whose extended resources ``capacity`` holds, and those resources (what a
    # device plugin, not the instance type, will report on its node).
    overlays: tuple[str, ...] = ()
    overlay_capacity: Resources = field(default_factory=dict)

    @property
    def allocatable(self) -> dict[str, int]:
        """capacity − kubeReserved − systemReserved − eviction threshold (never below 0)."""
        overhead = self.overhead.total()
        return {name: max(0, amount - overhead.get(name, 0)) for name, amount in self.capacity.items()}

    def available_offerings(self) -> tuple[Offering, ...]:
        return tuple(o for o in self.offerings if o.available and o.price is not None)

    def cheapest_price(self, capacity_types: frozenset[str] | None = None) -> float | None:
        prices = [
            o.price
            for o in self.available_offerings()
            if o.price is not None and (capacity_types is None or o.capacity_type in capacity_types)
        ]
        return min(prices) if prices else None
