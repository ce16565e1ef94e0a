"""The simulated AWS of the embedded default: a moto server seeded like an EKS account
prepared for Karpenter, an insufficient-capacity knob, and a simulated spot market.

``python -m provisioning.cloud.simulated --port P`` serves moto on 127.0.0.1:P (``server``).
Before it listens, the same process seeds moto's in-memory backends like an EKS account set
up for Karpenter (``seed``). In front of moto sits the insufficient-capacity knob with its
control endpoint, and ``ClientToken`` idempotency (``capacity``). :class:`SimulatedPrices`
is the price source of the simulation, since moto has no prices (``spot``).

moto is imported only inside the functions that seed and serve, so importing this package
(for the price model, say) is cheap.
"""

from provisioning.cloud.simulated.capacity import CapacityMiddleware, ExhaustedOfferings, parse_offering_keys
from provisioning.cloud.simulated.seed import SeededAccount, SeedImage, seed_account, seed_images
from provisioning.cloud.simulated.spot import (
    SimulatedPrices,
    base_discount,
    family_discount,
    simulated_spot_price,
    spot_discount,
    zone_variation,
)

__all__ = [
    "CapacityMiddleware",
    "ExhaustedOfferings",
    "SeedImage",
    "SeededAccount",
    "SimulatedPrices",
    "base_discount",
    "family_discount",
    "parse_offering_keys",
    "seed_account",
    "seed_images",
    "simulated_spot_price",
    "spot_discount",
    "zone_variation",
]
