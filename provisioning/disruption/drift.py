"""Drift: has a node's NodePool or EC2NodeClass changed in a way the node no longer matches?

As upstream (``pkg/controllers/nodeclaim/disruption/drift.go`` and the AWS provider's
``pkg/cloudprovider/drift.go``), in this order:

1. Static drift: a hash of the NodePool's ``spec.template`` without its requirements, lists
   hashed as sets and empty values as absent, so reordering a list or writing a default out
   changes nothing. A claim stamped with another hash version is not compared: the hash
   changed, not the policy.
2. Requirements drift: the node's labels no longer meet the NodePool's requirements (so
   broadening a requirement drifts nothing, narrowing it drifts only the nodes outside it).
3. The node's instance type is no longer offered by the NodePool.
4. The provider's drift: the EC2NodeClass's static hash (its spec without its selector terms
   and the other fields upstream marks ``hash:"ignore"``, hashed as the NodePool's), then the
   node's AMI, security groups and subnet, no longer those the EC2NodeClass's selector terms
   resolve to.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

from provisioning.scheduling.requirements import Requirements

HASH_VERSION = "v2"
OFFERING_CHECK_AGE_SECONDS = 3600.0  # upstream checks InstanceTypeNotFound from a claim's first hour on

NODEPOOL_DRIFTED = "NodePoolDrifted"
REQUIREMENTS_DRIFTED = "RequirementsDrifted"
INSTANCE_TYPE_NOT_FOUND = "InstanceTypeNotFound"
NODECLASS_DRIFTED = "NodeClassDrift"  # the AWS provider's name for it
AMI_DRIFTED = "AMIDrift"
SUBNET_DRIFTED = "SubnetDrift"
SECURITY_GROUP_DRIFTED = "SecurityGroupDrift"
CAPACITY_RESERVATION_DRIFTED = "CapacityReservationDrift"

# spec.template.spec fields upstream's NodePool hash ignores (hash:"ignore").
_NODEPOOL_IGNORED = frozenset({"requirements", "resources"})
# EC2NodeClass spec fields its hash ignores: selector terms drift through what they resolve to.
_NODECLASS_IGNORED = frozenset(
    {
        "subnetSelectorTerms",
        "securityGroupSelectorTerms",
        "capacityReservationSelectorTerms",
        "amiSelectorTerms",
        "amiFamily",
        "ipPrefixCount",
        "kubelet",
    }
)


def _canonical(value: Any) -> Any:
    """Upstream's hashstructure options, as JSON: lists as sets (sorted by their canonical
    form), empty values and nulls dropped (``IgnoreZeroValue``, ``ZeroNil``)."""
    if isinstance(value, Mapping):
        out = {}
        for key in sorted(value):
            item = _canonical(value[key])
            if item not in (None, "", 0, False, [], {}):
                out[key] = item
        return out
    if isinstance(value, list | tuple):
        items = {json.dumps(_canonical(v), sort_keys=True) for v in value}
        return [json.loads(text) for text in sorted(items)]
    return value


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(_canonical(value), sort_keys=True).encode()).hexdigest()[:16]


def nodepool_hash(template: Mapping[str, Any] | None) -> str:
    """The static-drift hash of a NodePool's ``spec.template``."""
    template = dict(template or {})
    spec = {k: v for k, v in (template.get("spec") or {}).items() if k not in _NODEPOOL_IGNORED}
    return _digest({**template, "spec": spec})


def nodeclass_hash(spec: Mapping[str, Any] | None) -> str:
    """The static-drift hash of an EC2NodeClass's spec."""
    return _digest({k: v for k, v in (spec or {}).items() if k not in _NODECLASS_IGNORED})


def hashes(template: Mapping[str, Any] | None, nodeclass_spec: Mapping[str, Any] | None) -> dict[str, str]:
    """What a new NodeClaim records, to be compared later."""
    return {"version": HASH_VERSION, "nodepool": nodepool_hash(template), "nodeclass": nodeclass_hash(nodeclass_spec)}


def nodepool_static_drift(recorded: Mapping[str, str], template: Mapping[str, Any] | None) -> str | None:
    if recorded.get("version") != HASH_VERSION:
        return None
    if recorded.get("nodepool") and recorded["nodepool"] != nodepool_hash(template):
        return NODEPOOL_DRIFTED
    return None


def nodeclass_static_drift(recorded: Mapping[str, str], nodeclass_spec: Mapping[str, Any] | None) -> str | None:
    if recorded.get("version") != HASH_VERSION or nodeclass_spec is None:
        return None
    if recorded.get("nodeclass") and recorded["nodeclass"] != nodeclass_hash(nodeclass_spec):
        return NODECLASS_DRIFTED
    return None


def requirements_drift(labels: Mapping[str, str], requirements: Any) -> str | None:
    """The node's labels, as requirements, must be compatible with the NodePool's: a key the
    NodePool requires that the node lacks is drift, well-known or not (only requirements a
    missing label meets, NotIn and DoesNotExist, hold without it), as upstream's Compatible."""
    pool = Requirements.from_list(requirements or [])
    node = Requirements.from_labels(labels)
    found = node.compatible(pool, frozenset(), mine_name="the node", theirs_name="the NodePool")
    return REQUIREMENTS_DRIFTED if found else None


def resolved_drift(launched: Mapping[str, Any], status: Mapping[str, Any] | None) -> str | None:
    """The node's image, subnet and security groups against the EC2NodeClass's status.

    ``launched`` is what the instance was launched with (``imageId``, ``subnetId``,
    ``securityGroupIds``); a field it lacks is not compared."""
    if not status:
        return None
    image = launched.get("imageId")
    amis = {a.get("id") for a in status.get("amis") or []}
    if image and amis and image not in amis:
        return AMI_DRIFTED
    # Security groups before the subnet, as upstream reports them.
    groups = launched.get("securityGroupIds")
    resolved = {g.get("id") for g in status.get("securityGroups") or []}
    if groups and resolved and set(groups) != resolved:
        return SECURITY_GROUP_DRIFTED
    subnet = launched.get("subnetId")
    subnets = {s.get("id") for s in status.get("subnets") or []}
    if subnet and subnets and subnet not in subnets:
        return SUBNET_DRIFTED
    # An instance still in a reservation the EC2NodeClass no longer selects (one that fell back
    # to on-demand, or left its reservation, has none: upstream's isCapacityReservationDrifted).
    reservation = launched.get("capacityReservationId")
    reservations = {r.get("id") for r in status.get("capacityReservations") or [] if isinstance(r, Mapping)}
    if reservation and reservation not in reservations:
        return CAPACITY_RESERVATION_DRIFTED
    return None


def provider_drift(
    recorded: Mapping[str, str],
    nodeclass_spec: Mapping[str, Any] | None,
    launched: Mapping[str, Any],
    status: Mapping[str, Any] | None,
) -> str | None:
    """The AWS provider's drift (upstream's ``IsDrifted``): the EC2NodeClass's static hash, then
    what the instance was launched with against what the EC2NodeClass resolves now."""
    return nodeclass_static_drift(recorded, nodeclass_spec) or resolved_drift(launched, status)


def drift_reason(
    *,
    labels: Mapping[str, str],
    recorded: Mapping[str, str],
    template: Mapping[str, Any] | None,
    nodeclass_spec: Mapping[str, Any] | None,
    nodeclass_status: Mapping[str, Any] | None = None,
    launched: Mapping[str, Any] | None = None,
    offered_types: Collection[str] | None = None,
    offered: Callable[[str, str, str], bool] | None = None,
    age_seconds: float | None = None,
) -> str | None:
    """The first drift reason that holds, or None. ``labels`` are the node's with its instance
    type's (as a NodeClaim carries them); ``offered(type, zone, capacity type)`` says whether the
    NodePool still offers that (available now or not: capacity comes and goes, drift is not
    about it). As upstream, what is offered is asked only of a node over an hour old
    (``age_seconds``; None: always), a cloud provider's list being slower to settle than a
    user's NodePool."""
    reason = nodepool_static_drift(recorded, template)
    if reason:
        return reason
    reason = requirements_drift(labels, ((template or {}).get("spec") or {}).get("requirements"))
    if reason:
        return reason
    instance_type = labels.get("node.kubernetes.io/instance-type")
    if age_seconds is not None and age_seconds <= OFFERING_CHECK_AGE_SECONDS:
        return provider_drift(recorded, nodeclass_spec, launched or {}, nodeclass_status)
    if offered_types is not None and (not instance_type or instance_type not in offered_types):
        return INSTANCE_TYPE_NOT_FOUND
    zone, capacity_type = labels.get("topology.kubernetes.io/zone"), labels.get("karpenter.sh/capacity-type")
    facts = (instance_type, zone, capacity_type)
    # A reserved node drifts by its reservation (``resolved_drift``), not by the offerings: a
    # reservation that ends falls back to on-demand rather than drifting (upstream's note).
    if offered is not None and all(facts) and capacity_type != "reserved" and not offered(*facts):  # type: ignore[arg-type]
        return INSTANCE_TYPE_NOT_FOUND
    return provider_drift(recorded, nodeclass_spec, launched or {}, nodeclass_status)


def offerings_of(types: Mapping[str, Any]) -> Callable[[str, str, str], bool]:
    """``offered`` for :func:`drift_reason` from a NodePool's instance types by name."""

    def offered(name: str, zone: str, capacity_type: str) -> bool:
        it = types.get(name)
        return it is not None and any(o.zone == zone and o.capacity_type == capacity_type for o in it.offerings)

    return offered


EXPLANATIONS = {
    NODEPOOL_DRIFTED: "NodePool {pool}'s template changed since the node was launched",
    REQUIREMENTS_DRIFTED: "its labels no longer meet NodePool {pool}'s requirements",
    INSTANCE_TYPE_NOT_FOUND: "NodePool {pool} no longer offers its instance type",
    NODECLASS_DRIFTED: "EC2NodeClass {nodeclass} changed since the node was launched",
    AMI_DRIFTED: "its AMI is no longer one EC2NodeClass {nodeclass} selects",
    SUBNET_DRIFTED: "its subnet is no longer one EC2NodeClass {nodeclass} selects",
    SECURITY_GROUP_DRIFTED: "its security groups are no longer those EC2NodeClass {nodeclass} selects",
    CAPACITY_RESERVATION_DRIFTED: "its capacity reservation is no longer one EC2NodeClass {nodeclass} selects",
}


def explain(reason: str, pool: str, nodeclass: str) -> str:
    return f"{reason}: " + EXPLANATIONS.get(reason, reason).format(pool=pool, nodeclass=nodeclass)
