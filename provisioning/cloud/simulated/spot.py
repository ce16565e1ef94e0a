"""The simulated spot market: the price source of the simulation (moto has no prices)."""

from __future__ import annotations

import hashlib
import math
import re


def _unit(text: str) -> float:
    """A stable number in [0, 1) for ``text`` (the same on every machine and run)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 2**32


_FAMILY = re.compile(r"^([a-z]+)(\d+)")


def base_discount(family: str) -> float:
    """The family's base spot discount, 55%–75%, picked by a stable hash of its name."""
    return 0.55 + 0.20 * _unit(f"family:{family}")


def family_discount(family: str) -> float:
    """The base discount plus the terms for older generations and burstable families."""
    discount = base_discount(family)
    match = _FAMILY.match(family)
    if match:
        generation = int(match.group(2))
        if generation <= 3:
            discount += 0.08
        elif generation == 4:
            discount += 0.05
        elif generation == 5:
            discount += 0.02
        if match.group(1) == "t":
            discount += 0.05
    return discount


def zone_variation(instance_type: str, zone: str) -> float:
    """A stable ±3 points per zone and instance type."""
    return (_unit(f"zone:{zone}/{instance_type}") - 0.5) * 0.06


def spot_discount(instance_type: str, zone: str) -> float:
    """The fraction of the on-demand price a spot instance saves; see :class:`SimulatedPrices`."""
    discount = family_discount(instance_type.split(".", 1)[0]) + zone_variation(instance_type, zone)
    return min(max(discount, 0.10), 0.88)


def simulated_spot_price(instance_type: str, zone: str, on_demand: float) -> float:
    """The spot price of ``instance_type`` in ``zone`` given its on-demand price."""
    raw = on_demand * (1.0 - spot_discount(instance_type, zone))
    ceiling = on_demand * 0.9
    price = round(raw, 4)
    if price <= 0 or price > ceiling:  # four decimals are too coarse for sub-cent prices
        price = math.floor(raw * 1e6) / 1e6
    return price


class SimulatedPrices:
    """A deterministic spot market over the catalog snapshot's on-demand list prices.

    ``on_demand_prices()`` is the table given (instance type → USD/hour). ``spot_prices()``
    prices every type with a positive on-demand price in every given zone:

    ``spot = on_demand × (1 − discount)``, where ``discount`` is

    * a base discount per instance family between 55% and 75%, picked by a stable hash
      (SHA-256) of the family name (``m5``, ``c6i``...), so all sizes of a family get
      about the same discount (:func:`base_discount`);
    * deeper for older generations (+8 points for generation ≤ 3, +5 for 4, +2 for 5) and
      for burstable ``t`` families (+5 points) (:func:`family_discount`);
    * varied per zone by ±3 points with a stable hash of zone and instance type, so the
      cheapest zone differs between types (:func:`zone_variation`);
    * clamped to 10%–88% (:func:`spot_discount`).

    For example m5.large at $0.096 on demand costs $0.0273 spot in us-east-1a.

    Prices are rounded to 4 decimals (6 for the few sub-cent prices where 4 decimals would
    break a bound); a spot price is always positive and never above 90% of on-demand.
    No randomness: the same inputs give the same prices in every process and run.
    """

    def __init__(self, snapshot_on_demand: dict[str, float], zones: list[str]) -> None:
        self._on_demand = dict(snapshot_on_demand)
        self._zones = list(zones)

    def on_demand_prices(self) -> dict[str, float]:
        return dict(self._on_demand)

    def spot_prices(self) -> dict[tuple[str, str], float]:
        return {
            (instance_type, zone): simulated_spot_price(instance_type, zone, price)
            for instance_type, price in sorted(self._on_demand.items())
            if price and price > 0
            for zone in self._zones
        }
