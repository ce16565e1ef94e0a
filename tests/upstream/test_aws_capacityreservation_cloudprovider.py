"""The capacity reservation Its of upstream's cloud provider suite
(``pkg/cloudprovider/suite_test.go`` of ``aws/karpenter-provider-aws``, Context "Capacity
Reservations"), ported; the suite's other Its are in ``test_aws_cloudprovider.py``.

Upstream's BeforeEach gives the EC2NodeClass one m5.large reservation in test-zone-1a per
(type, interruptible) but interruptible capacity blocks, 10 instances each, and lets the
NodePool launch only ``reserved``. Here that EC2NodeClass is a document with those
``status.capacityReservations`` (us-east-1a), planned by THE solver through ``manage.py
simulate``'s path and checked by THE verifier; the NodeClaim's labels are its chosen
offering's, as the node registers with them.
"""

from __future__ import annotations

from provisioning.disruption import drift
from provisioning.scheduling.verify import verify
from provisioning.services.catalog import bundled_catalog
from provisioning.services.simulate import plan_documents

SOURCE = "aws/karpenter-provider-aws pkg/cloudprovider/suite_test.go"
COMMIT = "1d927085dd81a9df9301e613f371dac5b4d16bfe"

TYPE = "karpenter.k8s.aws/capacity-reservation-type"
INTERRUPTIBLE = "karpenter.k8s.aws/capacity-reservation-interruptible"
RESERVATIONS = [
    {
        "id": f"cr-m5large1a{kind.replace('-', '')}{str(interruptible).lower()}",
        "instanceType": "m5.large",
        "availabilityZone": "us-east-1a",
        "ownerID": "012345678901",
        "instanceMatchCriteria": "targeted",
        "availableInstanceCount": 10,
        "state": "active",
        "reservationType": kind,
        "interruptible": interruptible,
        **({"endTime": "2099-01-01T00:00:00Z"} if kind == "capacity-block" else {}),
    }
    for kind in ("default", "capacity-block")
    for interruptible in (True, False)
    if not (interruptible and kind == "capacity-block")
]


def documents(node_selector: dict[str, str]) -> list[dict]:
    return [
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
                "role": "KarpenterNodeRole-my-cluster",
                "capacityReservationSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            },
            "status": {"capacityReservations": RESERVATIONS},
        },
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]}
                        ],
                    }
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pod", "namespace": "default"},
            "spec": {"nodeSelector": node_selector, "containers": [{"name": "c"}]},
        },
    ]


def expect_reservation_labels(kind: str, interruptible: bool) -> None:
    selector = {TYPE: kind, INTERRUPTIBLE: str(interruptible).lower()}
    snapshot, plan, _ = plan_documents(documents(selector), catalog=bundled_catalog("us-east-1"))
    assert not plan.unschedulable
    [claim] = plan.claims
    chosen = claim.chosen
    expected = next(r for r in RESERVATIONS if r["reservationType"] == kind and r["interruptible"] == interruptible)
    assert chosen.capacity_type == "reserved"
    assert chosen.reservation_id == expected["id"]
    assert (chosen.reservation_type, chosen.reservation_interruptible) == (kind, interruptible)
    # Every option of the claim is an offering of that reservation: the node gets its labels.
    assert {o.reservation_id for o in claim.options} == {expected["id"]}
    assert verify(snapshot, plan) == []


def test_should_include_capacity_reservation_labels_when_default_non_interruptible():
    """CloudProvider / Capacity Reservations / should include capacity reservation labels / when the capacity reservation type is default non-interruptible"""
    expect_reservation_labels("default", False)


def test_should_include_capacity_reservation_labels_when_default_interruptible():
    """CloudProvider / Capacity Reservations / should include capacity reservation labels / when the capacity reservation type is default interruptible"""
    expect_reservation_labels("default", True)


def test_should_include_capacity_reservation_labels_when_capacity_block():
    """CloudProvider / Capacity Reservations / should include capacity reservation labels / when the capacity reservation type is capacity-block"""
    expect_reservation_labels("capacity-block", False)


# ------------------------------------------------------------------ NodeClaim Drift
# Upstream's IsDrifted reads the instance's CapacityReservationId; karpweb keeps what the
# instance was launched with on the NodeClaim (``spec.launched``, from DescribeInstances), and
# the capacity-type controller drops the reservation from it when the instance leaves it.

FOO = {
    "id": "cr-foo",
    "availabilityZone": "us-east-1a",
    "instanceMatchCriteria": "targeted",
    "instanceType": "m5.large",
    "ownerID": "012345678901",
    "state": "active",
    "reservationType": "default",
}


def test_should_dynamically_drift_nodeclaims_for_capacity_reservations():
    """CloudProvider / NodeClaim Drift / should dynamically drift nodeclaims for capacity reservations"""
    status = {"capacityReservations": [FOO]}
    assert drift.provider_drift({}, None, {"capacityReservationId": "cr-foo"}, status) is None
    assert drift.provider_drift({}, None, {"capacityReservationId": "cr-bar"}, status) == "CapacityReservationDrift"


def test_should_not_drift_when_capacity_reservation_falls_back_to_on_demand():
    """CloudProvider / NodeClaim Drift / should not drift when capacity reservation falls back to on-demand"""
    assert drift.provider_drift({}, None, {"capacityReservationId": "cr-foo"}, {"capacityReservations": [FOO]}) is None
    # The reservation gone from the EC2NodeClass's status and from the instance.
    assert drift.provider_drift({}, None, {}, {"capacityReservations": []}) is None
    labels = {
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-1a",
        "karpenter.sh/capacity-type": "reserved",
    }
    # Nor does a reserved node drift because its reservation's offering is gone.
    assert (
        drift.drift_reason(
            labels=labels,
            recorded={},
            template=None,
            nodeclass_spec=None,
            nodeclass_status={"capacityReservations": []},
            launched={},
            offered=lambda *facts: False,
        )
        is None
    )
