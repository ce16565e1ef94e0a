"""Capacity reservations (ODCRs, Capacity Blocks, interruptible ODCRs), as upstream's
``pkg/providers/capacityreservation`` and the reserved-capacity offering resolver have them.
Pure: the EC2 calls are in ``aws.py``, the rows in ``services``.

* ``queries``: an EC2NodeClass's ``capacityReservationSelectorTerms`` as
  DescribeCapacityReservations inputs (a term by id is its own query; tags, owner and
  instance match criteria another), always for active reservations only.
* ``from_ec2`` / ``to_status`` / ``from_status``: a reservation as EC2 describes it, as
  ``status.capacityReservations`` keeps it, and back.
* ``reserved_offerings``: one offering per reservation of a type in a zone the EC2NodeClass
  has a subnet in, priced at the on-demand price / 10^7 (so the solver fills reservations
  first, and consolidation still orders them), available while it has instances left and
  is not expiring.
* ``expiring``: a capacity block is drained 10 minutes before EC2's reclaim window (which
  starts 30 minutes before its end, 60 for UltraServers): 40 minutes before its end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from provisioning.cloud.base import CapacityReservation
from provisioning.scheduling.instancetypes import Offering

RESERVED = "reserved"
RESERVED_PRICE_DIVISOR = 10_000_000.0  # upstream: "treat the reservation as free", order kept
EXPIRATION_WINDOW = timedelta(minutes=40)
RESERVATION_ID_LABEL = "karpenter.k8s.aws/capacity-reservation-id"
RESERVATION_TYPE_LABEL = "karpenter.k8s.aws/capacity-reservation-type"
RESERVATION_INTERRUPTIBLE_LABEL = "karpenter.k8s.aws/capacity-reservation-interruptible"
RESERVATION_LABELS = (RESERVATION_ID_LABEL, RESERVATION_TYPE_LABEL, RESERVATION_INTERRUPTIBLE_LABEL)
PRICES_ANNOTATION = "karpweb.io/capacity-reservation-prices"
_RESERVATION_ID = re.compile(r"cr-[0-9a-z]+")


def committed_prices(annotations: Mapping[str, Any] | None) -> tuple[dict[str, float], str]:
    """The EC2NodeClass's ``karpweb.io/capacity-reservation-prices`` annotation, JSON
    ``{"cr-...": USD per hour}``: what each reservation costs per instance-hour as committed
    (spend counts it instead of the on-demand price). The prices, and what is wrong with the
    annotation ("" when nothing)."""
    raw = (annotations or {}).get(PRICES_ANNOTATION)
    if raw is None:
        return {}, ""
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except ValueError as exc:
        return {}, f"not JSON ({exc.msg})"
    if not isinstance(data, dict):
        return {}, 'expected a JSON object {"cr-...": USD per hour}'
    prices: dict[str, float] = {}
    for key, value in data.items():
        if not _RESERVATION_ID.fullmatch(str(key)):
            return {}, f"{json.dumps(key)} is not a capacity reservation id (^cr-[0-9a-z]+$)"
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != value:
            return {}, f"{key}: {json.dumps(value)} is not a price (a number of USD per hour, at least 0)"
        prices[key] = float(value)
    return prices, ""


def queries(terms: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """DescribeCapacityReservations arguments, one per query (``QueriesFromSelectorTerms``)."""
    out: list[dict[str, Any]] = []
    active = {"Name": "state", "Values": ["active"]}
    for term in terms or ():
        if term.get("id"):
            out.append({"CapacityReservationIds": [term["id"]], "Filters": [active]})
        if term.get("tags") or term.get("instanceMatchCriteria"):
            filters = [active]
            if term.get("ownerID"):
                filters.append({"Name": "owner-id", "Values": [str(term["ownerID"])]})
            for key, value in sorted((term.get("tags") or {}).items()):
                if value == "*":
                    filters.append({"Name": "tag-key", "Values": [key]})
                else:
                    filters.append({"Name": f"tag:{key}", "Values": [value]})
            if term.get("instanceMatchCriteria"):
                filters.append({"Name": "instance-match-criteria", "Values": [term["instanceMatchCriteria"]]})
            out.append({"Filters": filters})
    return out


def from_ec2(raw: Mapping[str, Any], now: datetime) -> CapacityReservation:
    """A reservation from DescribeCapacityReservations; a capacity block within its expiration
    window is ``expiring``."""
    end = raw.get("EndDate")
    if isinstance(end, datetime) and end.tzinfo is None:
        end = end.replace(tzinfo=UTC)
    kind = str(raw.get("ReservationType") or "default")
    state = "active"
    if kind == "capacity-block" and isinstance(end, datetime) and end - now <= EXPIRATION_WINDOW:
        state = "expiring"
    return CapacityReservation(
        id=raw["CapacityReservationId"],
        instance_type=raw.get("InstanceType", ""),
        zone=raw.get("AvailabilityZone", ""),
        owner_id=str(raw.get("OwnerId", "")),
        available=int(raw.get("AvailableInstanceCount") or 0),
        instance_match_criteria=str(raw.get("InstanceMatchCriteria") or "targeted"),
        reservation_type=kind,
        interruptible=bool(raw.get("Interruptible", False)),
        end_time=end.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(end, datetime) else None,
        state=state,
    )


def to_status(r: CapacityReservation) -> dict[str, Any]:
    """``status.capacityReservations[]`` (upstream's fields, with the instances left)."""
    out: dict[str, Any] = {
        "id": r.id,
        "availabilityZone": r.zone,
        "instanceType": r.instance_type,
        "ownerID": r.owner_id,
        "instanceMatchCriteria": r.instance_match_criteria,
        "reservationType": r.reservation_type,
        "interruptible": r.interruptible,
        "state": r.state,
        "availableInstanceCount": r.available,
    }
    if r.end_time:
        out["endTime"] = r.end_time
    return out


def from_status(status: Mapping[str, Any] | None) -> tuple[CapacityReservation, ...]:
    """The reservations an EC2NodeClass's status lists (what ``manage.py simulate`` and
    provisioning read); entries without an id, type or zone are skipped."""
    out = []
    for entry in (status or {}).get("capacityReservations") or ():
        if not isinstance(entry, Mapping) or not all(entry.get(k) for k in ("id", "instanceType", "availabilityZone")):
            continue
        count = entry.get("availableInstanceCount")
        out.append(
            CapacityReservation(
                id=str(entry["id"]),
                instance_type=str(entry["instanceType"]),
                zone=str(entry["availabilityZone"]),
                owner_id=str(entry.get("ownerID", "")),
                # A document without the count (upstream's status has none) is taken as one left.
                available=int(count) if isinstance(count, int) and not isinstance(count, bool) else 1,
                instance_match_criteria=str(entry.get("instanceMatchCriteria") or "targeted"),
                reservation_type=str(entry.get("reservationType") or "default"),
                interruptible=bool(entry.get("interruptible", False)),
                end_time=entry.get("endTime"),
                state=str(entry.get("state") or "active"),
            )
        )
    return tuple(out)


def reserved_offerings(
    reservations: Iterable[CapacityReservation],
    instance_type: str,
    zones: Iterable[str],
    on_demand_price: float | None,
    zone_ids: Mapping[str, str] | None = None,
) -> tuple[Offering, ...]:
    """The reserved offerings of ``instance_type`` (``ReservedCapacityResolver``): one per
    reservation of the type, available in the type's ``zones`` while instances are left and
    it is not expiring. Without an on-demand price the offering is free."""
    offered = set(zones)
    out = []
    for r in reservations:
        if r.instance_type != instance_type:
            continue
        price = on_demand_price / RESERVED_PRICE_DIVISOR if on_demand_price else 0.0
        why = ""
        if r.zone not in offered:
            why = "no subnet in the reservation's zone"
        elif r.state == "expiring":
            why = f"capacity reservation {r.id} is expiring"
        elif r.available < 1:
            why = f"capacity reservation {r.id} is full"
        out.append(
            Offering(
                zone=r.zone,
                capacity_type=RESERVED,
                price=price,
                available=not why,
                zone_id=(zone_ids or {}).get(r.zone, ""),
                unavailable_reason=why,
                reservation_id=r.id,
                reservation_type=r.reservation_type,
                reservation_interruptible=r.interruptible,
                reservation_capacity=r.available,
            )
        )
    return tuple(out)


def labels(reservation_id: str, reservation_type: str, interruptible: bool) -> dict[str, str]:
    """The labels of a node launched into a reservation."""
    return {
        RESERVATION_ID_LABEL: reservation_id,
        RESERVATION_TYPE_LABEL: reservation_type or "default",
        RESERVATION_INTERRUPTIBLE_LABEL: "true" if interruptible else "false",
    }


def expiring(end_time: str | None, reservation_type: str, now: datetime) -> bool:
    """A capacity block whose end is within the expiration window: its nodes are drained."""
    if reservation_type != "capacity-block" or not end_time:
        return False
    try:
        end = datetime.fromisoformat(end_time.replace("Z", "+00:00"))
    except ValueError:
        return False
    if end.tzinfo is None:
        end = end.replace(tzinfo=UTC)
    return end - now <= EXPIRATION_WINDOW
