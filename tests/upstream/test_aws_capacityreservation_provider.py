"""Upstream's capacity reservation provider suite (``pkg/providers/capacityreservation/suite_test.go``
of ``aws/karpenter-provider-aws``), ported.

Upstream's availability cache is the EC2NodeClass's ``status.capacityReservations``: listing
reservations (``List``) is resolving the EC2NodeClass against DescribeCapacityReservations of
the simulated AWS, which writes each reservation's ``availableInstanceCount``;
``MarkLaunched``/``MarkTerminated``/``SetAvailableInstanceCount``/``GetAvailableInstanceCount``
are ``services.reservations.mark_launched``/``mark_terminated`` and the count on the status.
The reserved offerings read that count.
"""

from __future__ import annotations

import pytest
from reservation_env import DISCOVERY, aws_fixture  # noqa: F401  (registers the fixture)

from provisioning.models import EC2NodeClass
from provisioning.services import cloud as cloud_service
from provisioning.services import reservations

SOURCE = "aws/karpenter-provider-aws pkg/providers/capacityreservation/suite_test.go"
COMMIT = "1d927085dd81a9df9301e613f371dac5b4d16bfe"

pytestmark = pytest.mark.django_db


def counts() -> dict[str, int]:
    status = EC2NodeClass.objects.get(name="default").status or {}
    return {e["id"]: e["availableInstanceCount"] for e in status.get("capacityReservations") or []}


def set_available(reservation_id: str, count: int) -> None:
    """Upstream's ``SetAvailableInstanceCount``."""
    entry = {"id": reservation_id, "instanceType": "m5.large", "availabilityZone": "us-east-1a"}
    EC2NodeClass.objects.filter(name="default").update(
        status={"capacityReservations": [{**entry, "availableInstanceCount": count}]}
    )


def test_should_sync_availability_cache_when_listing_reservations(aws):
    """Capacity Reservation Provider / Availability Cache / should sync availability cache when listing reservations"""
    made = {
        aws.create_capacity_reservation(
            instanceType="m5.large", availabilityZone="us-east-1a", count=count, tags=DISCOVERY, ownerId="012345678901"
        )["id"]: count
        for count in (10, 15)
    }
    cloud_service.resolve_nodeclass(EC2NodeClass.objects.get(name="default"))
    assert counts() == made


def test_should_decrement_availability_when_reservation_is_marked_as_launched(aws):
    """Capacity Reservation Provider / Availability Cache / should decrement availability when reservation is marked as launched"""
    set_available("cr-test", 5)
    reservations.mark_launched("cr-test-2")
    assert counts() == {"cr-test": 5}
    reservations.mark_launched("cr-test")
    assert counts() == {"cr-test": 4}


def test_should_increment_availability_when_reservation_is_marked_as_terminated(aws):
    """Capacity Reservation Provider / Availability Cache / should increment availability when reservation is marked as terminated"""
    set_available("cr-test", 5)
    reservations.mark_terminated("cr-test-2")
    assert counts() == {"cr-test": 5}
    reservations.mark_terminated("cr-test")
    assert counts() == {"cr-test": 6}
