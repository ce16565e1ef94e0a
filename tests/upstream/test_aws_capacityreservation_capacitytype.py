"""Upstream's capacity reservation capacity type controller suite
(``pkg/controllers/capacityreservation/capacitytype/suite_test.go`` of
``aws/karpenter-provider-aws``), ported.

The instance is launched into a reservation of the simulated AWS, which shows it in
DescribeInstances with its ``CapacityReservationId``; upstream clearing that field in its fake
is ``POST /_karpweb/capacity-reservations/release``. ``ExpectSingletonReconciled`` is one
``services.reservations.demote_left_reservations()``; the NodeClaim and its Node are rows of
the simulated cluster.
"""

from __future__ import annotations

import pytest
from reservation_env import aws_fixture, launch_into  # noqa: F401  (registers the fixture)

from provisioning.cloud import reservations as labels_of
from provisioning.cluster.simulated import node_manifest
from provisioning.models import ClusterNode, NodeClaim
from provisioning.services import reservations
from provisioning.services.catalog import load_catalog

SOURCE = "aws/karpenter-provider-aws pkg/controllers/capacityreservation/capacitytype/suite_test.go"
COMMIT = "1d927085dd81a9df9301e613f371dac5b4d16bfe"

pytestmark = pytest.mark.django_db
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ID, TYPE = labels_of.RESERVATION_ID_LABEL, labels_of.RESERVATION_TYPE_LABEL


def claim_and_node(instance_id: str, reservation_id: str, *, claim_capacity_type: str = "reserved"):
    """Upstream's NodeClaim labelled reserved (id, type) and its linked Node."""
    labels = labels_of.labels(reservation_id, "default", False) if claim_capacity_type == "reserved" else {}
    claim = NodeClaim.objects.create(
        name="default-cr",
        nodepool_name="general",
        nodeclass_name="default",
        state=NodeClaim.State.INITIALIZED,
        instance_id=instance_id,
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type=claim_capacity_type,
        node_name="ip-cr.ec2.internal",
        spec={"labels": labels},
    )
    it = load_catalog().instance_type("m5.large")
    manifest = node_manifest(
        claim.node_name,
        it,
        zone="us-east-1a",
        capacity_type="reserved",
        nodepool="general",
        labels=labels_of.labels(reservation_id, "default", False),
        provider_id=f"aws:///us-east-1a/{instance_id}",
    )
    ClusterNode.objects.create(name=claim.node_name, manifest=manifest, nodeclaim=claim.name, instance_id=instance_id)
    return claim


def node_labels() -> dict[str, str]:
    return ClusterNode.objects.get(name="ip-cr.ec2.internal").manifest["metadata"]["labels"]


def test_should_demote_nodeclaims_and_nodes_from_reserved_to_on_demand(aws):
    """Capacity Reservation Capacity Type Controller / should demote nodeclaims and nodes from reserved to on-demand"""
    rid = aws.create_capacity_reservation(instanceType="m5.large", availabilityZone="us-east-1a", count=1)["id"]
    iid = launch_into(aws, rid)
    claim = claim_and_node(iid, rid)
    assert reservations.demote_left_reservations() == []
    # Still in its reservation: nothing changes.
    claim.refresh_from_db()
    assert claim.capacity_type == "reserved"
    assert claim.node_labels()[ID] == rid and claim.node_labels()[TYPE] == "default"
    assert node_labels()[CAPACITY_TYPE] == "reserved" and node_labels()[ID] == rid

    aws.release_from_reservations([iid])
    assert reservations.demote_left_reservations() == [claim.name]
    claim.refresh_from_db()
    assert claim.capacity_type == "on-demand"
    assert ID not in claim.node_labels() and TYPE not in claim.node_labels()
    assert node_labels()[CAPACITY_TYPE] == "on-demand"
    assert ID not in node_labels() and TYPE not in node_labels()


def test_should_demote_nodes_from_reserved_to_on_demand_even_if_their_nodeclaim_was_demoted_previously(aws):
    """Capacity Reservation Capacity Type Controller / should demote nodes from reserved to on-demand even if their nodeclaim was demoted previously"""
    rid = aws.create_capacity_reservation(instanceType="m5.large", availabilityZone="us-east-1a", count=1)["id"]
    iid = launch_into(aws, rid)
    aws.release_from_reservations([iid])
    claim = claim_and_node(iid, rid, claim_capacity_type="on-demand")
    assert reservations.demote_left_reservations() == []  # the NodeClaim was demoted before
    claim.refresh_from_db()
    assert claim.capacity_type == "on-demand" and ID not in claim.node_labels()
    assert node_labels()[CAPACITY_TYPE] == "on-demand"
    assert ID not in node_labels() and TYPE not in node_labels()
