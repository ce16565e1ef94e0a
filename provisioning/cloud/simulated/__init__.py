"""The simulated AWS of the embedded default: a moto server seeded like an EKS account
prepared for Karpenter, an insufficient-capacity knob, a simulated spot market, and the
interruption events and instance health EC2 delivers.

``python -m provisioning.cloud.simulated --port P`` serves moto on 127.0.0.1:P (``server``).
Before it listens, the same process seeds moto's in-memory backends like an EKS account set
up for Karpenter (``seed``), with the interruption queue (``--interruption-queue NAME``,
default the cluster name, ``""`` none) and its five EventBridge rules. In front of moto sit:

* the insufficient-capacity knob with its control endpoint
  ``GET``/``POST /_karpweb/insufficient-capacity``, ``ClientToken`` idempotency and
  ``GET /_karpweb/launch-calls`` (``capacity``);
* ``GET``/``POST``/``DELETE /_karpweb/capacity-reservations``: capacity reservations, answered
  by DescribeCapacityReservations and filled by launches that target them (``reservations``);
* ``POST /_karpweb/interrupt`` (``{"instanceIds": [...], "kind": "spot-interruption" |
  "rebalance" | "scheduled-change" | "stopping" | "terminating"}``), which puts EC2's (or
  AWS Health's) event for each instance through EventBridge into the queue, stops or
  terminates the instance where the kind says so, and ends a spot instance after its notice
  (``KARPWEB_SIM_SPOT_NOTICE_SECONDS``, 120); DescribeInstanceStatus, answered with EC2's XML
  from a health layer that ``GET``/``POST /_karpweb/impair`` reads and sets (failed
  instance or system checks, scheduled events) (``interruptions``).

:class:`SimulatedPrices` is the price source of the simulation, since moto has no prices
(``spot``).

moto is imported only inside the functions that seed and serve, so importing this package
(for the price model, say) is cheap.
"""

from provisioning.cloud.simulated.capacity import CapacityMiddleware, ExhaustedOfferings, parse_offering_keys
from provisioning.cloud.simulated.interruptions import InstanceHealth, InterruptionMiddleware
from provisioning.cloud.simulated.seed import (
    SeededAccount,
    SeededQueue,
    SeedImage,
    seed_account,
    seed_images,
    seed_interruption_queue,
)
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
    "InstanceHealth",
    "InterruptionMiddleware",
    "SeedImage",
    "SeededAccount",
    "SeededQueue",
    "SimulatedPrices",
    "base_discount",
    "family_discount",
    "parse_offering_keys",
    "seed_account",
    "seed_images",
    "seed_interruption_queue",
    "simulated_spot_price",
    "spot_discount",
    "zone_variation",
]
