"""EC2 capacity reservations (ODCRs and Capacity Blocks) for the simulated AWS; moto has none.

``CapacityReservations`` is the store the capacity middleware (``capacity``) consults:

* ``POST /_karpweb/capacity-reservations`` creates one from JSON ``{"instanceType",
  "availabilityZone", "count"}`` and optionally ``"id"``, ``"ownerId"``, ``"tags"`` (an
  object), ``"instanceMatchCriteria"`` (``targeted`` or ``open``), ``"reservationType"``
  (``default`` or ``capacity-block``), ``"interruptible"``, ``"endTime"`` (ISO 8601) and
  ``"state"``; it answers the reservation as ``GET`` lists them. ``DELETE`` removes every
  reservation (or those of ``{"ids": [...]}``); ``POST .../release`` with
  ``{"instanceIds": [...]}`` takes instances out of their reservation, as EC2 does when a
  reservation ends or is modified, and they run on as on-demand.
* ``DescribeCapacityReservations`` is answered with EC2's XML, with the ids and the filters
  Karpenter sends (``owner-id``, ``instance-match-criteria``, ``state``, ``instance-type``,
  ``availability-zone``, ``tag:<key>``, ``tag-key``).
* A launch that targets a reservation (``CapacityReservationSpecification.
  CapacityReservationTarget.CapacityReservationId``, in RunInstances or in the launch
  template of a RunInstances or an instant CreateFleet) takes one of its available
  instances; a full reservation is refused with ``ReservationCapacityExceeded``, as EC2
  refuses it. Terminating the instance gives its place back, and DescribeInstances shows
  ``capacityReservationId`` on each instance in a reservation.
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any
from xml.sax.saxutils import escape

from provisioning.cloud.simulated.seed import account_id

RESERVATIONS_PATH = "/_karpweb/capacity-reservations"
RELEASE_PATH = RESERVATIONS_PATH + "/release"
TARGET_PARAM = "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"
FULL_CODE = "ReservationCapacityExceeded"
_ID = re.compile(r"^cr-[0-9a-z]+$")
_FIELDS = {
    "id",
    "instanceType",
    "availabilityZone",
    "count",
    "ownerId",
    "tags",
    "instanceMatchCriteria",
    "reservationType",
    "interruptible",
    "endTime",
    "state",
}


@dataclass
class Reservation:
    id: str
    instanceType: str
    availabilityZone: str
    count: int
    ownerId: str
    tags: dict[str, str] = field(default_factory=dict)
    instanceMatchCriteria: str = "targeted"
    reservationType: str = "default"
    interruptible: bool | None = False  # None: EC2 leaves the field out (standard ODCRs, blocks)
    endTime: str | None = None
    state: str = "active"
    instances: list[str] = field(default_factory=list)

    @property
    def available(self) -> int:
        return max(0, self.count - len(self.instances))

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["availableInstanceCount"] = self.available
        return out


class CapacityReservations:
    """The reservations of the simulated account, shared by the request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Reservation] = {}

    # -------------------------------------------------------------- control

    def create(self, payload: Any) -> Reservation:
        """A reservation from the control endpoint's JSON; ValueError names what is wrong."""
        if not isinstance(payload, dict):
            raise ValueError('expected {"instanceType": ..., "availabilityZone": ..., "count": N}')
        unknown = sorted(set(payload) - _FIELDS)
        if unknown:
            raise ValueError(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(_FIELDS))})")
        for name in ("instanceType", "availabilityZone"):
            if not isinstance(payload.get(name), str) or not payload[name]:
                raise ValueError(f"{name}: required, a string")
        count = payload.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError("count: required, a whole number of instances, at least 1")
        rid = payload.get("id") or f"cr-{uuid.uuid4().hex[:17]}"
        if not isinstance(rid, str) or not _ID.match(rid):
            raise ValueError(f"id: {rid!r} does not match ^cr-[0-9a-z]+$")
        tags = payload.get("tags") or {}
        if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
            raise ValueError("tags: an object of string values")
        criteria = payload.get("instanceMatchCriteria", "targeted")
        if criteria not in ("targeted", "open"):
            raise ValueError("instanceMatchCriteria: targeted or open")
        kind = payload.get("reservationType", "default")
        if kind not in ("default", "capacity-block"):
            raise ValueError("reservationType: default or capacity-block")
        state = payload.get("state", "active")
        if state not in ("active", "expired", "cancelled", "pending", "failed", "scheduled", "payment-pending"):
            raise ValueError(f"state: {state!r} is not an EC2 capacity reservation state")
        end = payload.get("endTime")
        if end is not None:
            try:
                datetime.fromisoformat(str(end).replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"endTime: {end!r} is not an ISO 8601 time") from None
        interruptible = payload.get("interruptible", False)
        if interruptible is not None and not isinstance(interruptible, bool):
            raise ValueError("interruptible: true, false, or null (EC2 leaves the field out)")
        if kind == "capacity-block" and end is None:
            raise ValueError("endTime: required for a capacity-block reservation")
        reservation = Reservation(
            id=rid,
            instanceType=payload["instanceType"],
            availabilityZone=payload["availabilityZone"],
            count=count,
            ownerId=str(payload.get("ownerId") or account_id()),
            tags={str(k): v for k, v in tags.items()},
            instanceMatchCriteria=criteria,
            reservationType=kind,
            interruptible=interruptible,
            endTime=end,
            state=state,
        )
        with self._lock:
            if rid in self._by_id:
                raise ValueError(f"id: {rid} exists already")
            self._by_id[rid] = reservation
        return reservation

    def delete(self, ids: list[str] | None = None) -> int:
        with self._lock:
            gone = list(self._by_id) if ids is None else [i for i in ids if i in self._by_id]
            for rid in gone:
                del self._by_id[rid]
        return len(gone)

    def listing(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.as_json() for r in sorted(self._by_id.values(), key=lambda r: r.id)]

    # -------------------------------------------------------------- launches

    def check(self, rid: str, instance_type: str, zone: str | None) -> tuple[str, str] | None:
        """Why a launch into ``rid`` is refused (EC2's error code and message), or None."""
        with self._lock:
            reservation = self._by_id.get(rid)
            if reservation is None:
                return "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{rid}' does not exist"
            if reservation.state != "active":
                return "InvalidCapacityReservationId.Malformed", f"The capacity reservation {rid} is not active"
            if instance_type and instance_type != reservation.instanceType:
                return (
                    "InvalidParameterCombination",
                    f"The instance type {instance_type} does not match the capacity reservation {rid} "
                    f"({reservation.instanceType})",
                )
            if zone and zone != reservation.availabilityZone:
                return (
                    "InvalidParameterCombination",
                    f"The Availability Zone {zone} does not match the capacity reservation {rid} "
                    f"({reservation.availabilityZone})",
                )
            if reservation.available < 1:
                return FULL_CODE, f"Insufficient capacity in the capacity reservation {rid}."
        return None

    def available(self, rid: str) -> int:
        with self._lock:
            reservation = self._by_id.get(rid)
            return reservation.available if reservation is not None and reservation.state == "active" else 0

    def zone_of(self, rid: str) -> str | None:
        with self._lock:
            reservation = self._by_id.get(rid)
            return reservation.availabilityZone if reservation else None

    def add_instances(self, rid: str, instance_ids: list[str]) -> None:
        with self._lock:
            reservation = self._by_id.get(rid)
            if reservation is not None:
                reservation.instances.extend(i for i in instance_ids if i not in reservation.instances)

    def release(self, instance_ids: list[str]) -> int:
        """Take instances out of their reservations (terminated, or moved out); how many were in one."""
        wanted = set(instance_ids)
        released = 0
        with self._lock:
            for reservation in self._by_id.values():
                kept = [i for i in reservation.instances if i not in wanted]
                released += len(reservation.instances) - len(kept)
                reservation.instances = kept
        return released

    def reservation_of(self) -> dict[str, str]:
        """Instance id → the reservation it runs in."""
        with self._lock:
            return {i: r.id for r in self._by_id.values() for i in r.instances}

    # -------------------------------------------------------------- DescribeCapacityReservations

    def describe(self, params: list[tuple[str, str]]) -> bytes:
        ids = [v for k, v in params if re.match(r"^CapacityReservationId\.\d+$", k)]
        filters: dict[str, dict[str, Any]] = {}
        for key, value in params:
            match = re.match(r"^Filter\.(\d+)\.(Name|Value\.\d+)$", key)
            if match:
                entry = filters.setdefault(match.group(1), {"name": "", "values": []})
                if match.group(2) == "Name":
                    entry["name"] = value
                else:
                    entry["values"].append(value)
        with self._lock:
            found = [r for r in sorted(self._by_id.values(), key=lambda r: r.id) if not ids or r.id in ids]
            found = [r for r in found if all(_matches(r, f["name"], f["values"]) for f in filters.values())]
            items = "".join(_item(r) for r in found)
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>{uuid.uuid4()}</requestId><capacityReservationSet>{items}</capacityReservationSet>"
            "</DescribeCapacityReservationsResponse>"
        ).encode()


def _matches(reservation: Reservation, name: str, values: list[str]) -> bool:
    if name.startswith("tag:"):
        return reservation.tags.get(name[4:]) in values or ("*" in values and name[4:] in reservation.tags)
    if name == "tag-key":
        return any(v in reservation.tags for v in values)
    attribute = {
        "owner-id": reservation.ownerId,
        "instance-match-criteria": reservation.instanceMatchCriteria,
        "state": reservation.state,
        "instance-type": reservation.instanceType,
        "availability-zone": reservation.availabilityZone,
        "capacity-reservation-id": reservation.id,
    }.get(name)
    return attribute is not None and attribute in values


def _item(r: Reservation) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    tags = "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>" for k, v in sorted(r.tags.items()))
    end = f"<endDate>{escape(_iso(r.endTime))}</endDate><endDateType>limited</endDateType>" if r.endTime else ""
    return (
        f"<item><capacityReservationId>{r.id}</capacityReservationId><ownerId>{escape(r.ownerId)}</ownerId>"
        f"<capacityReservationArn>arn:aws:ec2:us-east-1:{escape(r.ownerId)}:capacity-reservation/{r.id}"
        f"</capacityReservationArn><instanceType>{escape(r.instanceType)}</instanceType>"
        f"<instancePlatform>Linux/UNIX</instancePlatform><availabilityZone>{escape(r.availabilityZone)}"
        f"</availabilityZone><tenancy>default</tenancy><totalInstanceCount>{r.count}</totalInstanceCount>"
        f"<availableInstanceCount>{r.available}</availableInstanceCount><state>{escape(r.state)}</state>"
        f"<startDate>{now}</startDate>{end if r.endTime else '<endDateType>unlimited</endDateType>'}"
        f"<instanceMatchCriteria>{r.instanceMatchCriteria}</instanceMatchCriteria><createDate>{now}</createDate>"
        f"<tagSet>{tags}</tagSet><reservationType>{r.reservationType}</reservationType>"
        + (
            ""
            if r.interruptible is None
            else f"<interruptible>{'true' if r.interruptible else 'false'}</interruptible>"
        )
        + "</item>"
    )


def _iso(value: str) -> str:
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def with_reservation_ids(body: bytes, reservation_of: dict[str, str]) -> bytes:
    """moto's DescribeInstances answer with ``capacityReservationId`` on the instances in a
    reservation."""
    if not reservation_of:
        return body
    text = body.decode("utf-8")

    def add(match: re.Match[str]) -> str:
        rid = reservation_of.get(match.group(1))
        if rid is None:
            return match.group(0)
        return f"{match.group(0)}<capacityReservationId>{rid}</capacityReservationId>"

    return re.sub(r"<instanceId>(i-[0-9a-f]+)</instanceId>", add, text).encode()


def launched_instance_ids(body: bytes) -> list[str]:
    """The instance ids a RunInstances or CreateFleet answer launched."""
    return re.findall(r"<(?:instanceId|item)>(i-[0-9a-f]+)</(?:instanceId|item)>", body.decode("utf-8"))
