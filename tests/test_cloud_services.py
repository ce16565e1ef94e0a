"""The cloud workflows over rows: EC2NodeClass readiness on its status, NodeClaim launch
with the ICE cache in Redis, garbage collection. boto3 speaks HTTP to the simulated AWS."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest

from provisioning.cloud import ice
from provisioning.models import EC2NodeClass, NodeClaim
from provisioning.services import cloud as cloud_service
from provisioning.services import connections
from provisioning.services.policy import apply_manifest

CLUSTER = "karpweb-services-test"
pytestmark = pytest.mark.django_db


@pytest.fixture
def env(simulated_aws, redis_url, settings, monkeypatch, seed_ec2nodeclass, seed_nodepool):
    for key, value in simulated_aws.env().items():
        monkeypatch.setenv(key, value)
    settings.REDIS_URL = redis_url
    settings.AWS_REGION = simulated_aws.region
    settings.KARPWEB_CLUSTER_NAME = CLUSTER
    settings.KARPWEB_LAUNCH_API = "fleet"
    connections.reset()
    cloud_service.get_cloud.cache_clear()
    redis = connections.get_redis()
    for key in redis.scan_iter("karpweb:ice:*"):
        redis.delete(key)
    simulated_aws.set_insufficient_capacity([])
    # The seed's subnets and security groups are discovered by the my-cluster tag.
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(seed_nodepool, source="cli")
    yield simulated_aws
    simulated_aws.set_insufficient_capacity([])
    connections.reset()
    cloud_service.get_cloud.cache_clear()


def claim(name: str, options: list[tuple[str, str, str, float]], nodeclass: str = "default") -> NodeClaim:
    return NodeClaim.objects.create(
        name=name,
        nodepool_name="general",
        nodeclass_name=nodeclass,
        spec={"taints": [{"key": "team", "value": "ml", "effect": "NoSchedule"}]},
        launch_options=[{"instanceType": t, "zone": z, "capacityType": c, "price": p} for t, z, c, p in options],
    )


def ec2(sim):
    return boto3.client("ec2", **sim.client_kwargs())


def test_resolving_the_seed_nodeclass_reports_ready_on_its_status(env):
    nodeclass = EC2NodeClass.objects.get(name="default")
    resolved = cloud_service.resolve_nodeclass(nodeclass)
    assert resolved.ready
    status = EC2NodeClass.objects.get(name="default").status
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready == {
        "SubnetsReady": "True",
        "SecurityGroupsReady": "True",
        "AMIsReady": "True",
        "InstanceProfileReady": "True",
        "Ready": "True",
    }
    assert {s["zone"] for s in status["subnets"]} >= {"us-east-1a", "us-east-1b"}
    assert {a["requirements"][0]["values"][0] for a in status["amis"]} == {"amd64", "arm64"}


def test_a_nodeclass_whose_selectors_match_nothing_is_not_ready_and_says_why(env, seed_ec2nodeclass):
    seed_ec2nodeclass["metadata"]["name"] = "nowhere"
    seed_ec2nodeclass["spec"]["subnetSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "nobody"}}]
    nodeclass = apply_manifest(seed_ec2nodeclass, source="cli").obj
    cloud_service.resolve_nodeclass(nodeclass)
    conditions = {c["type"]: c for c in EC2NodeClass.objects.get(name="nowhere").status["conditions"]}
    assert conditions["SubnetsReady"]["status"] == "False"
    assert conditions["Ready"]["status"] == "False"
    assert "subnet" in conditions["Ready"]["message"]


def test_a_pending_claim_launches_spot_once_and_records_the_instance(env):
    c = claim(
        "general-abcde", [("m5.large", "us-east-1a", "spot", 0.03), ("m5.large", "us-east-1a", "on-demand", 0.096)]
    )
    cloud_service.launch_nodeclaim(c.pk)
    c.refresh_from_db()
    assert (c.state, c.capacity_type, c.instance_type, c.zone) == ("launched", "spot", "m5.large", "us-east-1a")
    assert c.instance_id.startswith("i-") and c.price_per_hour is not None and float(c.price_per_hour) == 0.03
    assert c.provider_id == f"aws:///us-east-1a/{c.instance_id}"
    # A redelivered task finds the claim no longer pending: no second launch.
    assert cloud_service.launch_nodeclaim(c.pk) is None
    reservations = ec2(env).describe_instances(Filters=[{"Name": "tag:karpenter.sh/nodeclaim", "Values": [c.name]}])[
        "Reservations"
    ]
    instances = [i for r in reservations for i in r["Instances"]]
    assert [i["InstanceId"] for i in instances] == [c.instance_id]
    tags = {t["Key"]: t["Value"] for t in instances[0]["Tags"]}
    assert tags["karpenter.sh/nodepool"] == "general" and tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"


def test_spot_without_capacity_falls_back_to_on_demand_and_marks_the_ice_cache(env):
    env.set_insufficient_capacity(["spot:m5.large:*"])
    c = claim(
        "general-fghij",
        [
            ("m5.large", "us-east-1a", "spot", 0.03),
            ("m5.large", "us-east-1b", "spot", 0.031),
            ("m5.large", "us-east-1a", "on-demand", 0.096),
        ],
    )
    cloud_service.launch_nodeclaim(c.pk)
    c.refresh_from_db()
    assert (c.state, c.capacity_type) == ("launched", "on-demand")
    marked = ice.unavailable_keys(connections.get_redis())
    assert {"spot:m5.large:us-east-1a", "spot:m5.large:us-east-1b"} <= marked


def test_no_capacity_anywhere_fails_the_claim_with_a_reason(env):
    env.set_insufficient_capacity(["*:c5.large:*"])
    c = claim("general-klmno", [("c5.large", "us-east-1a", "on-demand", 0.085)])
    cloud_service.launch_nodeclaim(c.pk)
    c.refresh_from_db()
    assert c.state == "failed" and c.reason == "InsufficientCapacity"
    assert "c5.large" in c.message


def test_a_missing_nodeclass_fails_the_claim_clearly(env):
    c = claim("general-pqrst", [("m5.large", "us-east-1a", "on-demand", 0.096)], nodeclass="ghost")
    cloud_service.launch_nodeclaim(c.pk)
    c.refresh_from_db()
    assert (c.state, c.reason) == ("failed", "NodeClassNotReady")
    assert "'ghost' does not exist" in c.message


def test_garbage_collection_terminates_instances_no_claim_owns(env):
    owned = claim("general-uvwxy", [("m5.large", "us-east-1a", "on-demand", 0.096)])
    cloud_service.launch_nodeclaim(owned.pk)
    orphan = claim("general-zzzzz", [("m5.large", "us-east-1b", "on-demand", 0.096)])
    cloud_service.launch_nodeclaim(orphan.pk)
    orphan.refresh_from_db()
    NodeClaim.objects.filter(pk=orphan.pk).delete()  # its row is gone, the instance leaked
    assert cloud_service.collect_garbage(now=datetime.now(UTC)) == []  # too young
    terminated = cloud_service.collect_garbage(now=datetime.now(UTC) + timedelta(minutes=5))
    owned.refresh_from_db()
    # Instances of earlier tests, whose rows were rolled back, are orphans too.
    assert orphan.instance_id in terminated
    assert owned.instance_id not in terminated
    assert cloud_service.collect_garbage(now=datetime.now(UTC) + timedelta(minutes=5)) == []


def test_the_overview_shows_nodeclass_readiness(env, admin_client):
    assert "resolving…" in admin_client.get("/").content.decode()
    cloud_service.resolve_nodeclass(EC2NodeClass.objects.get(name="default"))
    page = admin_client.get("/").content.decode()
    assert '<span class="badge ok">Ready</span>' in page
