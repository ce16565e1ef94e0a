"""Query the catalog by label requirements, for ``manage.py catalog`` and the REST API.

Requirements are written ``KEY=VALUE`` (``KEY=A,B`` for any of several), ``KEY!=VALUE``,
``KEY>N``, ``KEY<N``, all of which must hold. Zone and capacity type
(``topology.kubernetes.io/zone``, ``karpenter.sh/capacity-type``) filter the offerings.
"""

from __future__ import annotations

import re
from typing import Any

from provisioning.crd import labels as L
from provisioning.scheduling.instancetypes import InstanceType, Offering
from provisioning.scheduling.quantity import format_quantity
from provisioning.scheduling.requirements import Requirement, Requirements

ZONE_ID = "topology.k8s.aws/zone-id"
OFFERING_KEYS = frozenset({L.ZONE, L.CAPACITY_TYPE, ZONE_ID})

# ------------------------------------------------------------------ --require
# KEY=A,B / KEY!=A / KEY>N / KEY<N, read into the scheduling core's requirements algebra.

_REQUIRE = re.compile(r"^\s*([^=!<>\s]+)\s*(!=|=|>|<)\s*(.*?)\s*$")
_OPERATORS = {"=": "In", "!=": "NotIn", ">": "Gt", "<": "Lt"}


def parse_require(text: str) -> Requirement:
    match = _REQUIRE.match(text)
    if not match or not match.group(3):
        raise ValueError(f"{text!r}: expected KEY=VALUE, KEY!=VALUE, KEY>N or KEY<N")
    key, operator, raw = match.groups()
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if operator in (">", "<") and (len(values) != 1 or not re.fullmatch(r"[+-]?[0-9]+", values[0])):
        raise ValueError(f"{text!r}: {operator} takes one integer")
    return Requirement.of(key, _OPERATORS[operator], values)  # aliases are normalized here


def offering_labels(offering: Offering) -> dict[str, str]:
    labels = {L.ZONE: offering.zone, L.CAPACITY_TYPE: offering.capacity_type}
    if offering.zone_id:
        labels[ZONE_ID] = offering.zone_id
    return labels


def select(instance_types: list[InstanceType], requires: list[Requirement]) -> list[InstanceType]:
    """Types whose labels meet every requirement, with the offerings that meet those on
    zone and capacity type (a type left without offerings by them is dropped)."""
    on_type = Requirements(r for r in requires if r.key not in OFFERING_KEYS)
    on_offering = Requirements(r for r in requires if r.key in OFFERING_KEYS)
    out = []
    for it in instance_types:
        if not on_type.matches(it.labels):
            continue
        if on_offering:
            offerings = tuple(o for o in it.offerings if on_offering.matches(offering_labels(o)))
            if not offerings:
                continue
            it = InstanceType(it.name, it.labels, it.capacity, it.overhead, offerings)
        out.append(it)
    return out


# ------------------------------------------------------------------ output


def by_family_and_size(it: InstanceType) -> tuple[str, int, int, str]:
    """By family, then size: m5.large, m5.xlarge, m5.2xlarge ... rather than alphabetically."""
    family = it.labels.get("karpenter.k8s.aws/instance-family", it.name)
    return family, it.capacity.get("cpu", 0), it.capacity.get("memory", 0), it.name


def to_json(it: InstanceType) -> dict[str, Any]:
    return {
        "name": it.name,
        "labels": dict(sorted(it.labels.items())),
        "capacity": {name: format_quantity(name, amount) for name, amount in sorted(it.capacity.items())},
        "allocatable": {name: format_quantity(name, amount) for name, amount in sorted(it.allocatable.items())},
        "offerings": [
            {"zone": o.zone, "capacityType": o.capacity_type, "price": o.price, "available": o.available}
            for o in it.offerings
        ],
    }
