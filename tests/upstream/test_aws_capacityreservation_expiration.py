"""Upstream's capacity reservation expiration controller suite
(``pkg/controllers/capacityreservation/expiration/suite_test.go`` of
``aws/karpenter-provider-aws``), ported.

The reservations are the EC2NodeClass's ``status.capacityReservations`` as DescribeCapacityReservations
resolves them; ``ExpectSingletonReconciled`` is one
``services.reservations.drain_expiring_capacity_blocks(now)``. Upstream deletes the NodeClaim;
here a NodeClaim without a node is terminated at once (``ExpectNodeClaims`` are the claims
still active).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from provisioning.cloud import reservations as reservation_labels
from provisioning.models import EC2NodeClass, NodeClaim
from provisioning.services import reservations

SOURCE = "aws/karpenter-provider-aws pkg/controllers/capacityreservation/expiration/suite_test.go"
COMMIT = "1d927085dd81a9df9301e613f371dac5b4d16bfe"

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)


def reservation(rid: str, end: datetime, reservation_type: str = "default") -> dict:
    """Upstream's ``makeCapacityReservation`` as the EC2NodeClass status has it."""
    return {
        "id": rid,
        "instanceType": "m5.large",
        "availabilityZone": "us-east-1a",
        "ownerID": "012345678901",
        "instanceMatchCriteria": "targeted",
        "availableInstanceCount": 1,
        "state": "active",
        "reservationType": reservation_type,
        "endTime": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def nodeclaim(rid: str) -> None:
    NodeClaim.objects.create(
        name=rid,
        nodepool_name="default",
        nodeclass_name="default",
        state=NodeClaim.State.LAUNCHED,
        capacity_type="reserved",
        spec={"labels": {reservation_labels.RESERVATION_ID_LABEL: rid}},
    )


def active() -> list[str]:
    return sorted(NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES).values_list("name", flat=True))


def test_should_delete_nodeclaims_associated_with_expiring_capacity_block_reservations():
    """Capacity Reservation Expiration Controller / should delete nodeclaims associated with expiring capacity-block reservations"""
    crs = [
        reservation("cr-expiring", NOW + timedelta(minutes=39), "capacity-block"),
        reservation("cr-active", NOW + timedelta(minutes=60), "capacity-block"),
    ]
    EC2NodeClass.objects.create(name="default", spec={}, status={"capacityReservations": crs})
    for cr in crs:
        nodeclaim(cr["id"])
    reservations.drain_expiring_capacity_blocks(NOW)
    assert active() == ["cr-active"]


def test_should_not_delete_nodeclaims_associated_with_standard_capacity_reservations_within_the_capacity_block_expiration_window():
    """Capacity Reservation Expiration Controller / should not delete nodeclaims associated with standard capacity reservations within the capacity block expiration window"""
    EC2NodeClass.objects.create(
        name="default",
        spec={},
        status={"capacityReservations": [reservation("cr-default", NOW + timedelta(minutes=39))]},
    )
    nodeclaim("cr-default")
    reservations.drain_expiring_capacity_blocks(NOW)
    assert active() == ["cr-default"]
