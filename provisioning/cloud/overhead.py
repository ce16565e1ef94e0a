"""What a node keeps for itself: kube-reserved, system-reserved and eviction thresholds.

``allocatable = capacity − kubeReserved − systemReserved − evictionThreshold`` (Karpenter
reference Part II §3.4). The arithmetic uses floats in the same order as the Go code
(``types.go``) so that truncation and rounding land on the same integers.

This module knows nothing about AMI families: the caller decides which pod count the
kube-reserved memory is computed from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from provisioning.scheduling.instancetypes import Overhead
from provisioning.scheduling.quantity import to_int

MiB = 2**20
GiB = 2**30

# (start, end, share) in millicores: 6% of the first core, 1% of the second, 0.5% of the
# third and fourth, 0.25% of the rest. From Bottlerocket, which EKS AMIs and Karpenter copy.
KUBE_RESERVED_CPU_BANDS = (
    (0, 1000, 0.06),
    (1000, 2000, 0.01),
    (2000, 4000, 0.005),
    (4000, 1 << 31, 0.0025),
)
KUBE_RESERVED_EPHEMERAL_STORAGE = 1 * GiB
EVICTION_MEMORY_AVAILABLE = 100 * MiB
EVICTION_NODEFS_PERCENT = 10

# kubelet eviction signals that reduce allocatable, and the resource each one guards.
EVICTION_SIGNALS = {"memory.available": "memory", "nodefs.available": "ephemeral-storage"}


def kube_reserved_cpu(millicores: int) -> int:
    """kube-reserved cpu in millicores; each band is truncated to an integer on its own,
    as upstream does, so 96 vCPUs give 310m, not 310.0-something rounded."""
    total = 0
    for start, end, share in KUBE_RESERVED_CPU_BANDS:
        if millicores >= start:
            total += int(float(min(millicores, end) - start) * share)
    return total


def kube_reserved_memory(pods: int) -> int:
    """11 MiB per pod plus 255 MiB, the EKS AMI formula (bytes)."""
    return (11 * pods + 255) * MiB


def eviction_signal(resource: str, capacity: int, value: str) -> int:
    """A hard-eviction threshold in base units: a percentage of the computed capacity,
    rounded up, or a plain quantity. ``100%`` disables the signal, so it reserves 0."""
    text = str(value).strip()
    if text.endswith("%"):
        percent = float(text.strip("%"))
        if percent == 100:
            percent = 0.0
        return math.ceil(float(capacity) / 100 * percent)
    return to_int(resource, text)


def eviction_threshold(memory: int, ephemeral_storage: int, eviction_hard: Mapping[str, Any] | None) -> dict[str, int]:
    """Defaults (100Mi memory, 10% of ephemeral storage) with ``evictionHard`` overrides.

    Only ``evictionHard`` counts: ``evictionSoft`` is a warning threshold and upstream
    leaves allocatable alone for it.
    """
    threshold = {
        "memory": EVICTION_MEMORY_AVAILABLE,
        "ephemeral-storage": math.ceil(float(ephemeral_storage) / 100 * EVICTION_NODEFS_PERCENT),
    }
    capacity = {"memory": memory, "ephemeral-storage": ephemeral_storage}
    for signal, resource in EVICTION_SIGNALS.items():
        if eviction_hard and signal in eviction_hard:
            threshold[resource] = eviction_signal(resource, capacity[resource], eviction_hard[signal])
    return threshold


def _quantities(values: Mapping[str, Any] | None) -> dict[str, int]:
    return {name: to_int(name, value) for name, value in (values or {}).items()}


def compute_overhead(
    *, cpu: int, memory: int, ephemeral_storage: int, memory_pods: int, kubelet: Mapping[str, Any]
) -> Overhead:
    """The three reservations for one instance type.

    ``cpu``, ``memory`` and ``ephemeral_storage`` are the computed capacities (millicores,
    bytes); ``memory_pods`` is the pod count kube-reserved memory is sized for.
    ``kubelet.kubeReserved`` replaces the computed value key by key; ``systemReserved`` is
    taken as written (nothing by default).
    """
    kube_reserved = {
        "cpu": kube_reserved_cpu(cpu),
        "memory": kube_reserved_memory(memory_pods),
        "ephemeral-storage": KUBE_RESERVED_EPHEMERAL_STORAGE,
    }
    kube_reserved.update(_quantities(kubelet.get("kubeReserved")))
    return Overhead(
        kube_reserved=kube_reserved,
        system_reserved=_quantities(kubelet.get("systemReserved")),
        eviction_threshold=eviction_threshold(memory, ephemeral_storage, kubelet.get("evictionHard")),
    )
