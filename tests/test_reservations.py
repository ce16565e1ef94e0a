"""Capacity reservations in the one catalog, solver and verifier: reserved offerings from an
EC2NodeClass's ``status.capacityReservations``, priced as upstream prices them, filled first
(reserved > spot > on-demand), and given up when full or expiring."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from provisioning.cloud import reservations
from provisioning.cloud.base import CapacityReservation
from provisioning.services.catalog import bundled_catalog
from provisioning.services.simulate import plan_documents, plan_to_json

NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "gpu"},
    "spec": {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
        "role": "KarpenterNodeRole-my-cluster",
        "capacityReservationSelectorTerms": [{"tags": {"team": "ml"}}],
    },
}


def nodeclass(*entries):
    return {**NODECLASS, "status": {"capacityReservations": list(entries)}}


def reservation(rid="cr-0a1", count=2, zone="us-east-1a", **extra):
    return {
        "id": rid,
        "instanceType": "g5.xlarge",
        "availabilityZone": zone,
        "ownerID": "123456789012",
        "instanceMatchCriteria": "targeted",
        "reservationType": "default",
        "interruptible": False,
        "state": "active",
        "availableInstanceCount": count,
        **extra,
    }


def nodepool(capacity_types=("reserved", "spot", "on-demand")):
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(capacity_types)},
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g5", "g6"]},
                    ],
                }
            }
        },
    }


def gpu_pods(count):
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"train-{i}", "namespace": "ml"},
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "3", "nvidia.com/gpu": "1"}}},
                ]
            },
        }
        for i in range(count)
    ]


@pytest.fixture(scope="module")
def catalog():
    return bundled_catalog("us-east-1")


def test_a_reserved_offering_per_reservation_priced_as_upstream(catalog):
    shapes = catalog.shapes(NODECLASS["spec"])
    r = CapacityReservation("cr-0a1", "g5.xlarge", "us-east-1a", available=2)
    [g5] = [it for it in catalog.with_reservations(shapes, [r]) if it.name == "g5.xlarge"]
    [reserved] = [o for o in g5.offerings if o.capacity_type == "reserved"]
    assert reserved.reservation_id == "cr-0a1"
    assert reserved.zone == "us-east-1a"
    assert reserved.available and reserved.reservation_capacity == 2
    assert reserved.price == pytest.approx(catalog.on_demand["g5.xlarge"] / 10_000_000)


def test_a_full_or_expiring_reservation_offers_nothing_available(catalog):
    shapes = catalog.shapes(NODECLASS["spec"])
    full = CapacityReservation("cr-full", "g5.xlarge", "us-east-1a", available=0)
    ending = CapacityReservation(
        "cr-end", "g5.xlarge", "us-east-1b", available=1, reservation_type="capacity-block", state="expiring"
    )
    [g5] = [it for it in catalog.with_reservations(shapes, [full, ending]) if it.name == "g5.xlarge"]
    reasons = {o.reservation_id: o.unavailable_reason for o in g5.offerings if o.capacity_type == "reserved"}
    assert reasons == {
        "cr-full": "capacity reservation cr-full is full",
        "cr-end": "capacity reservation cr-end is expiring",
    }


def test_simulate_fills_the_reservation_first_then_falls_back_to_spot(catalog):
    documents = [nodeclass(reservation(count=2)), nodepool(), *gpu_pods(3)]
    snapshot, plan, _ = plan_documents(documents, catalog=catalog)
    out = plan_to_json(plan, snapshot)
    assert out["violations"] == []
    reserved = [c for c in out["nodeClaims"] if c["capacityType"] == "reserved"]
    # One pod per g5.xlarge (4 vCPU): two claims can take the reservation's two instances.
    assert {c["capacityReservationId"] for c in reserved} == {"cr-0a1"}
    assert all(c["instanceType"] == "g5.xlarge" and c["zone"] == "us-east-1a" for c in reserved)
    assert reserved
    assert {c["capacityType"] for c in out["nodeClaims"]} <= {"reserved", "spot"}


def test_a_nodepool_that_does_not_allow_reserved_never_takes_the_reservation(catalog):
    documents = [nodeclass(reservation(count=2)), nodepool(("spot", "on-demand")), *gpu_pods(1)]
    snapshot, plan, _ = plan_documents(documents, catalog=catalog)
    [claim] = plan_to_json(plan, snapshot)["nodeClaims"]
    assert claim["capacityType"] == "spot"


def test_a_document_without_status_simulates_without_reservations(catalog):
    documents = [NODECLASS, nodepool(), *gpu_pods(1)]
    snapshot, plan, _ = plan_documents(documents, catalog=catalog)
    [claim] = plan_to_json(plan, snapshot)["nodeClaims"]
    assert claim["capacityType"] == "spot"


def test_selector_terms_become_upstream_queries():
    queries = reservations.queries(
        [
            {"id": "cr-0123"},
            {"tags": {"team": "ml", "any": "*"}, "ownerID": "123456789012", "instanceMatchCriteria": "open"},
        ]
    )
    active = {"Name": "state", "Values": ["active"]}
    assert queries == [
        {"CapacityReservationIds": ["cr-0123"], "Filters": [active]},
        {
            "Filters": [
                active,
                {"Name": "owner-id", "Values": ["123456789012"]},
                {"Name": "tag-key", "Values": ["any"]},
                {"Name": "tag:team", "Values": ["ml"]},
                {"Name": "instance-match-criteria", "Values": ["open"]},
            ]
        },
    ]


def test_a_capacity_block_is_expiring_40_minutes_before_its_end():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    raw = {
        "CapacityReservationId": "cr-cb",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "AvailableInstanceCount": 1,
        "ReservationType": "capacity-block",
        "EndDate": now + timedelta(minutes=39),
    }
    assert reservations.from_ec2(raw, now).state == "expiring"
    assert reservations.from_ec2({**raw, "EndDate": now + timedelta(minutes=60)}, now).state == "active"
    assert reservations.from_ec2({**raw, "ReservationType": "default"}, now).state == "active"


def test_the_solver_never_plans_a_reservation_past_its_count(catalog):
    documents = [nodeclass(reservation(count=2)), nodepool(), *gpu_pods(3)]
    snapshot, plan, _ = plan_documents(documents, catalog=catalog)
    chosen = [c.chosen for c in plan.claims]
    assert [o.reservation_id for o in chosen].count("cr-0a1") == 2
    assert sorted(o.capacity_type for o in chosen) == ["reserved", "reserved", "spot"]


def test_with_only_reserved_allowed_the_pods_past_the_count_stay_pending(catalog):
    documents = [nodeclass(reservation(count=2)), nodepool(("reserved",)), *gpu_pods(3)]
    snapshot, plan, _ = plan_documents(documents, catalog=catalog)
    assert len(plan.claims) == 2
    [(pod, reason)] = plan.unschedulable.items()
    assert reason == "NodePool gpu: capacity reservation cr-0a1 has no instance left"


def test_the_verifier_refuses_a_reservation_planned_past_its_count(catalog):
    from dataclasses import replace

    from provisioning.scheduling.verify import RESERVATIONS, verify

    documents = [nodeclass(reservation(count=1)), nodepool(), *gpu_pods(2)]
    snapshot, plan, _ = plan_documents(documents, catalog=catalog)
    reserved = next(c for c in plan.claims if c.chosen.reservation_id)
    other = next(c for c in plan.claims if c is not reserved)
    forced = replace(plan, claims=(reserved, replace(other, options=reserved.options)))
    [violation] = verify(snapshot, forced)
    assert violation.kind == RESERVATIONS
    assert violation.node == other.name


def test_manage_py_simulate_reads_reservations_from_the_documents(tmp_path):
    import io
    import json

    import yaml
    from django.core.management import call_command

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([nodeclass(reservation(count=1)), nodepool(), *gpu_pods(2)]))
    out = io.StringIO()
    call_command("simulate", "-f", str(path), "--format", "json", stdout=out)
    claims = json.loads(out.getvalue())["nodeClaims"]
    assert sorted(c["capacityType"] for c in claims) == ["reserved", "spot"]
    [reserved] = [c for c in claims if c["capacityType"] == "reserved"]
    assert reserved["capacityReservationId"] == "cr-0a1"


def test_the_catalog_of_a_resolved_nodeclass_has_its_reserved_offerings_and_their_ice_marks(catalog):
    from provisioning.cloud.base import ResolvedNodeClass, Subnet

    resolved = ResolvedNodeClass(
        name="gpu",
        ami_family="AL2023",
        subnets=(Subnet("subnet-a", "us-east-1a"),),
        capacity_reservations=(CapacityReservation("cr-0a1", "g5.xlarge", "us-east-1a", available=2),),
    )
    marked = {"reserved:g5.xlarge:us-east-1a:cr-0a1"}
    [g5] = [
        it for it in catalog.instance_types(NODECLASS["spec"], resolved, marked.__contains__) if it.name == "g5.xlarge"
    ]
    [reserved] = [o for o in g5.offerings if o.capacity_type == "reserved"]
    assert not reserved.available and reserved.unavailable_reason.startswith("insufficient capacity")
    assert [o.capacity_type for o in g5.offerings if o.available] == ["on-demand", "spot"]


def test_consolidation_prices_a_reserved_node_as_its_reserved_offering():
    from decimal import Decimal

    from provisioning.models import NodeClaim
    from provisioning.services.disruption import _price_now

    row = NodeClaim(
        instance_type="g5.xlarge",
        zone="us-east-1a",
        capacity_type="reserved",
        price_per_hour=Decimal("0.65"),  # the committed price spend counts
        list_price_per_hour=Decimal("1.006"),
    )
    assert _price_now(row, {}) == pytest.approx(1.006 / 10_000_000)


def test_the_decision_says_which_reservation_it_fills(catalog):
    snapshot, plan, _ = plan_documents([nodeclass(reservation(count=1)), nodepool(), *gpu_pods(1)], catalog=catalog)
    [claim] = plan.claims
    assert claim.why.startswith("g5.xlarge (reserved, us-east-1a, capacity reservation cr-0a1) at $0.0000/h")
