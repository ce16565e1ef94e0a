"""Capacity reservations against the simulated AWS (boto3 over HTTP, no patching): an
EC2NodeClass's ``status.capacityReservations`` resolved from DescribeCapacityReservations, a
reserved NodeClaim launched into its reservation with RunInstances and labelled with it, and a
full reservation falling back like insufficient capacity."""

from __future__ import annotations

import json

import boto3
import pytest

from provisioning.cloud import ice
from provisioning.models import EC2NodeClass, NodeClaim
from provisioning.services import cloud as cloud_service
from provisioning.services import connections, launchbatch
from provisioning.services.policy import apply_manifest

CLUSTER = "karpweb-reservations-test"
pytestmark = pytest.mark.django_db


@pytest.fixture
def env(on_simulated_aws, settings, seed_ec2nodeclass, seed_nodepool):
    simulated_aws = on_simulated_aws
    settings.KARPWEB_CLUSTER_NAME = CLUSTER
    settings.KARPWEB_LAUNCH_API = "fleet"
    cloud_service._resolved.clear()
    redis = connections.get_redis()
    for key in redis.scan_iter("karpweb:ice:*"):
        redis.delete(key)
    simulated_aws.delete_capacity_reservations()
    seed_ec2nodeclass["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"team": "ml"}}]
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(seed_nodepool, source="cli")
    yield simulated_aws
    simulated_aws.delete_capacity_reservations()
    connections.reset()
    cloud_service.get_cloud.cache_clear()
    cloud_service._resolved.clear()


def reserved_claim(name: str, reservation_id: str, zone: str = "us-east-1a") -> NodeClaim:
    return NodeClaim.objects.create(
        name=name,
        nodepool_name="general",
        nodeclass_name="default",
        spec={},
        launch_options=[
            {
                "instanceType": "g5.xlarge",
                "zone": zone,
                "capacityType": "reserved",
                "price": 1.006 / 10_000_000,
                "capacityReservationId": reservation_id,
                "capacityReservationType": "default",
                "capacityReservationInterruptible": False,
            },
            {"instanceType": "g5.xlarge", "zone": zone, "capacityType": "spot", "price": 0.45},
            {"instanceType": "g5.xlarge", "zone": zone, "capacityType": "on-demand", "price": 1.006},
        ],
    )


def test_status_lists_the_reservations_the_selector_terms_select(env):
    mine = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=2, tags={"team": "ml"}
    )
    env.create_capacity_reservation(instanceType="g5.xlarge", availabilityZone="us-east-1a", count=2)  # not tagged
    block = env.create_capacity_reservation(
        instanceType="p5.48xlarge",
        availabilityZone="us-east-1b",
        count=1,
        tags={"team": "ml"},
        reservationType="capacity-block",
        interruptible=False,
        endTime="2099-01-01T00:00:00Z",
    )
    cloud_service.resolve_nodeclass(EC2NodeClass.objects.get(name="default"))
    status = EC2NodeClass.objects.get(name="default").status
    by_id = {r["id"]: r for r in status["capacityReservations"]}
    assert set(by_id) == {mine["id"], block["id"]}
    assert by_id[mine["id"]] == {
        "id": mine["id"],
        "availabilityZone": "us-east-1a",
        "instanceType": "g5.xlarge",
        "ownerID": mine["ownerId"],
        "instanceMatchCriteria": "targeted",
        "reservationType": "default",
        "interruptible": False,
        "state": "active",
        "availableInstanceCount": 2,
    }
    assert by_id[block["id"]]["reservationType"] == "capacity-block"
    assert by_id[block["id"]]["endTime"] == "2099-01-01T00:00:00Z"


def test_a_reserved_claim_launches_into_its_reservation_and_is_labelled(env):
    made = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=1, tags={"team": "ml"}
    )
    cloud_service.resolve_nodeclass(EC2NodeClass.objects.get(name="default"))
    c = reserved_claim("general-resv1", made["id"])
    cloud_service.launch_nodeclaim(c.pk)
    # Counted taken on the status before EC2 is described again (upstream's MarkLaunched).
    [entry] = EC2NodeClass.objects.get(name="default").status["capacityReservations"]
    assert entry["availableInstanceCount"] == 0
    c.refresh_from_db()
    assert (c.state, c.capacity_type, c.instance_type, c.zone) == ("launched", "reserved", "g5.xlarge", "us-east-1a")
    assert c.node_labels()["karpenter.k8s.aws/capacity-reservation-id"] == made["id"]
    assert c.node_labels()["karpenter.k8s.aws/capacity-reservation-type"] == "default"
    assert c.node_labels()["karpenter.k8s.aws/capacity-reservation-interruptible"] == "false"
    ec2 = boto3.client("ec2", **env.client_kwargs())
    instance = ec2.describe_instances(InstanceIds=[c.instance_id])["Reservations"][0]["Instances"][0]
    assert instance["CapacityReservationId"] == made["id"]
    [after] = ec2.describe_capacity_reservations(CapacityReservationIds=[made["id"]])["CapacityReservations"]
    assert after["AvailableInstanceCount"] == 0


def test_a_full_reservation_is_marked_unavailable_and_the_claim_falls_back_to_spot(env):
    made = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=1, tags={"team": "ml"}
    )
    first = reserved_claim("general-resv2", made["id"])
    cloud_service.launch_nodeclaim(first.pk)
    second = reserved_claim("general-resv3", made["id"])
    cloud_service.launch_nodeclaim(second.pk)
    second.refresh_from_db()
    assert (second.state, second.capacity_type) == ("launched", "spot")
    assert "karpenter.k8s.aws/capacity-reservation-id" not in second.node_labels()
    marked = ice.unavailable_keys(connections.get_redis())
    assert f"reserved:g5.xlarge:us-east-1a:{made['id']}" in marked


def test_reserved_claims_never_share_a_fleet(env):
    claims = [
        NodeClaim(
            name=f"general-b{i}",
            nodepool_name="general",
            nodeclass_name="default",
            launch_options=[
                {
                    "instanceType": "g5.xlarge",
                    "zone": "us-east-1a",
                    "capacityType": "reserved",
                    "price": 1e-7,
                    "capacityReservationId": "cr-0abc",
                }
            ],
        )
        for i in range(2)
    ]
    assert [len(launch) for launch in launchbatch.plan_launches(claims)] == [1, 1]


def test_a_reserved_instance_costs_its_committed_price_or_else_on_demand(env, seed_ec2nodeclass):
    from provisioning.services.catalog import on_demand_prices

    listed = on_demand_prices()["g5.xlarge"]
    priced = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=1, tags={"team": "ml"}
    )
    unpriced = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=1, tags={"team": "ml"}
    )
    seed_ec2nodeclass["metadata"]["annotations"] = {
        "karpweb.io/capacity-reservation-prices": json.dumps({priced["id"]: 0.62})
    }
    apply_manifest(seed_ec2nodeclass, source="cli")
    assert EC2NodeClass.objects.get(name="default").annotations
    first, second = reserved_claim("general-cost1", priced["id"]), reserved_claim("general-cost2", unpriced["id"])
    for c in (first, second):
        cloud_service.launch_nodeclaim(c.pk)
        c.refresh_from_db()
    assert (float(first.price_per_hour), float(first.list_price_per_hour)) == (0.62, listed)
    assert (float(second.price_per_hour), float(second.list_price_per_hour)) == (listed, listed)


def test_the_rest_api_and_the_nodes_page_show_the_reservation_of_a_nodeclaim(env, client, django_user_model):
    made = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=1, tags={"team": "ml"}
    )
    c = reserved_claim("general-rest1", made["id"])
    cloud_service.launch_nodeclaim(c.pk)
    client.force_login(django_user_model.objects.create_superuser("admin-r", password="x"))
    answer = client.get("/api/v1/nodeclaims/?capacity_type=reserved").json()["results"]
    assert [(r["name"], r["capacityType"], r["capacityReservationId"]) for r in answer] == [
        ("general-rest1", "reserved", made["id"])
    ]
    page = client.get("/nodes/?capacity_type=reserved").content.decode()
    assert "general-rest1" in page and f"in {made['id']}" in page
    detail = client.get("/nodes/general-rest1/").content.decode()
    assert f"capacity reservation <strong>{made['id']}</strong>" in detail


def test_a_claim_planned_into_a_reservation_takes_its_place_before_it_launches(env):
    from provisioning.services import provision

    made = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=2, tags={"team": "ml"}
    )
    cloud_service.resolve_nodeclass(EC2NodeClass.objects.get(name="default"))
    reserved_claim("general-wait1", made["id"])  # pending: planned, not launched
    from provisioning.services.catalog import load_catalog

    documents, _ = provision.cluster_documents(load_catalog())
    [nodeclass] = [d for d in documents if d["kind"] == "EC2NodeClass"]
    [entry] = nodeclass["status"]["capacityReservations"]
    assert entry["availableInstanceCount"] == 1
    # The row itself keeps what EC2 said.
    [stored] = EC2NodeClass.objects.get(name="default").status["capacityReservations"]
    assert stored["availableInstanceCount"] == 2


def test_the_nodeclass_page_lists_its_reservations_with_their_nodeclaims(env, client, django_user_model):
    made = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=2, tags={"team": "ml"}
    )
    cloud_service.resolve_nodeclass(EC2NodeClass.objects.get(name="default"))
    c = reserved_claim("general-page1", made["id"])
    cloud_service.launch_nodeclaim(c.pk)
    client.force_login(django_user_model.objects.create_superuser("admin-p", password="x"))
    page = client.get("/policies/EC2NodeClass/default/").content.decode()
    assert 'id="capacity-reservations"' in page
    assert f"<code>{made['id']}</code>" in page
    assert '<a href="/nodes/general-page1/">general-page1</a>' in page
    assert "<td>1</td>" in page  # one instance left


@pytest.mark.parametrize("api", ["fleet", "run-instances"])
def test_the_launch_targets_the_reservation_with_either_launch_api(env, settings, api):
    settings.KARPWEB_LAUNCH_API = api
    cloud_service.get_cloud.cache_clear()
    made = env.create_capacity_reservation(
        instanceType="g5.xlarge", availabilityZone="us-east-1a", count=1, tags={"team": "ml"}
    )
    c = reserved_claim(f"general-api-{api}", made["id"])
    before = len(env.launch_calls())
    cloud_service.launch_nodeclaim(c.pk)
    c.refresh_from_db()
    assert (c.state, c.capacity_type, c.capacity_reservation_id) == ("launched", "reserved", made["id"])
    [call] = env.launch_calls()[before:]
    assert call["action"] == ("CreateFleet" if api == "fleet" else "RunInstances")
    ec2 = boto3.client("ec2", **env.client_kwargs())
    instance = ec2.describe_instances(InstanceIds=[c.instance_id])["Reservations"][0]["Instances"][0]
    assert instance["CapacityReservationId"] == made["id"]


def test_a_capacity_block_launches_by_fleet_into_its_block(env):
    from datetime import UTC, datetime, timedelta

    end = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    block = env.create_capacity_reservation(
        instanceType="g5.xlarge",
        availabilityZone="us-east-1a",
        count=1,
        tags={"team": "ml"},
        reservationType="capacity-block",
        endTime=end,
    )
    c = reserved_claim("general-block1", block["id"])
    c.launch_options[0]["capacityReservationType"] = "capacity-block"
    c.save()
    cloud_service.launch_nodeclaim(c.pk)
    c.refresh_from_db()
    assert (c.state, c.capacity_type) == ("launched", "reserved")
    assert c.node_labels()["karpenter.k8s.aws/capacity-reservation-type"] == "capacity-block"
