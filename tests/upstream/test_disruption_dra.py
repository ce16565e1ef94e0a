"""Upstream's consolidation tests with Dynamic Resource Allocation
(``pkg/controllers/disruption/consolidation_dra_test.go``): not ported.

Upstream drives ``SimulateScheduling`` over a consolidation candidate whose pods hold devices
through ResourceClaims (allocated from ResourceSlices a node or the cluster publishes, selected
by a DeviceClass), and checks that the candidate's own published devices are no scheduling
target, that the devices its pods hold are freed and their claims allocated again (on a
replacement's template devices, or on a shared device's remaining capacity), and that a
device a live pod elsewhere holds stays taken.

karpweb does not model Dynamic Resource Allocation: it reads no ResourceClaims, ResourceSlices
or DeviceClasses, its instance types carry no template devices, and the solver ignores a pod's
``resourceClaims`` (``test_scheduling_existing_nodes.py`` lists the scheduling suite's DRA tests
likewise). So there is no device to free, exclude or allocate again in its consolidation
simulation; the two negative tests in particular would find karpweb consolidating, as it
schedules the pod without its claim.
"""

from __future__ import annotations

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/consolidation_dra_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

_NO_DRA = (
    "Dynamic Resource Allocation is not modelled: karpweb reads no ResourceClaims, ResourceSlices or "
    "DeviceClasses and its solver ignores a pod's resourceClaims, so consolidation has no devices to"
)
NOT_PORTED: dict[str, str] = {
    "Consolidation/DRA / re-allocates a candidate pod's device onto a replacement (B, positive)": (
        f"{_NO_DRA} free from the candidate and allocate again on a replacement's template GPU"
    ),
    "Consolidation/DRA / does not target a candidate node's published device (A, positive)": (
        f"{_NO_DRA} exclude: a node publishes no ResourceSlice for the simulation to leave out"
    ),
    "Consolidation/DRA / does not consolidate when the candidate's claim cannot be satisfied elsewhere (B, negative)": (
        f"{_NO_DRA} find unsatisfiable: karpweb would schedule the pod without its claim and consolidate"
    ),
    "Consolidation/DRA / does not free a device held by a live pod on a non-candidate node (A, negative)": (
        f"{_NO_DRA} keep taken: karpweb would schedule the pod without its claim and consolidate"
    ),
    "Consolidation/DRA / re-allocates devices from multiple candidate nodes onto one replacement (B, multi-candidate)": (
        f"{_NO_DRA} free from several candidates and allocate on one replacement's template GPUs"
    ),
    "Consolidation/DRA / reclaims only the candidate's share of a shared device, leaving the live pod's share (B, partial)": (
        f"{_NO_DRA} share: consumable device capacity (DRAConsumableCapacity) is not modelled either"
    ),
}
