"""The cloud workflows over rows: EC2NodeClass readiness on its status, NodeClaim launch
with the ICE cache in Redis, garbage collection. boto3 speaks HTTP to the simulated AWS."""

from __future__ import annotations

import functools
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from simaws import CallCounter, WorkerDied

from provisioning import tasks
from provisioning.cloud import ice
from provisioning.cloud.base import Throttled
from provisioning.cloud.launch import launch_batch_with_backoff
from provisioning.disruption.drift import resolved_drift
from provisioning.models import EC2NodeClass, NodeClaim
from provisioning.services import cloud as cloud_service
from provisioning.services import connections, launchbatch, provision
from provisioning.services.policy import apply_manifest

CLUSTER = "karpweb-services-test"
pytestmark = pytest.mark.django_db


@pytest.fixture
def env(on_simulated_aws, settings, seed_ec2nodeclass, seed_nodepool):
    simulated_aws = on_simulated_aws
    settings.KARPWEB_CLUSTER_NAME = CLUSTER
    settings.KARPWEB_LAUNCH_API = "fleet"
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


def claim(
    name: str,
    options: list[tuple[str, str, str, float]],
    nodeclass: str = "default",
    team: str = "ml",
    pods: int = 0,
    save: bool = True,
) -> NodeClaim:
    made = NodeClaim(
        name=name,
        nodepool_name="general",
        nodeclass_name=nodeclass,
        spec={"taints": [{"key": "team", "value": team, "effect": "NoSchedule"}]},
        launch_options=[{"instanceType": t, "zone": z, "capacityType": c, "price": p} for t, z, c, p in options],
        pods=[f"default/{name}-{i}" for i in range(pods)],
    )
    if save:
        made.save()
    return made


def planned(*claims: NodeClaim) -> list[list[NodeClaim]]:
    """``launchbatch.plan_launches`` of new claims, then saved, as ``create_claims`` does."""
    launches = launchbatch.plan_launches(claims)
    NodeClaim.objects.bulk_create(claims)
    return launches


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
        "CapacityReservationsReady": "True",
        "Ready": "True",
    }
    assert {s["zone"] for s in status["subnets"]} >= {"us-east-1a", "us-east-1b"}
    assert {a["requirements"][0]["values"][0] for a in status["amis"]} == {"amd64", "arm64"}


def test_resolving_again_keeps_the_status_and_its_transition_times_when_nothing_changed(env):
    nodeclass = EC2NodeClass.objects.get(name="default")
    cloud_service.resolve_nodeclass(nodeclass)
    first = EC2NodeClass.objects.get(name="default")
    for condition in first.status["conditions"]:
        condition["lastTransitionTime"] = "2026-01-01T00:00:00Z"  # as if resolved long ago
    EC2NodeClass.objects.filter(pk=first.pk).update(status=first.status)
    cloud_service.resolve_nodeclass(EC2NodeClass.objects.get(name="default"))
    again = EC2NodeClass.objects.get(name="default").status
    assert again == first.status
    assert {c["lastTransitionTime"] for c in again["conditions"]} == {"2026-01-01T00:00:00Z"}


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
    # What drift compares against the EC2NodeClass's status later: what EC2 launched it with.
    launched = c.spec["launched"]
    assert launched["imageId"] == instances[0]["ImageId"] and launched["subnetId"] == instances[0]["SubnetId"]
    # Its security groups are the launch template's, those the EC2NodeClass resolves to: the
    # node has not drifted.
    status = EC2NodeClass.objects.get(name=c.nodeclass_name).status
    assert launched["securityGroupIds"] == sorted(g["id"] for g in status["securityGroups"])
    assert resolved_drift(launched, status) is None


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


# ------------------------------------------------------------------ batches: one fleet for identical claims

SPOT_THEN_ON_DEMAND = [
    ("m5.large", "us-east-1a", "spot", 0.03),
    ("m5.large", "us-east-1b", "spot", 0.031),
    ("m5.large", "us-east-1a", "on-demand", 0.096),
]


@pytest.fixture
def queued(monkeypatch) -> dict[str, list]:
    """Launch tasks go to lists the test drains, instead of to a Celery worker."""
    sent: dict[str, list] = {"claims": [], "batches": []}
    monkeypatch.setattr(tasks.launch_nodeclaim, "delay", sent["claims"].append)
    monkeypatch.setattr(tasks.launch_nodeclaims, "delay", sent["batches"].append)
    return sent


@pytest.fixture
def calls(env):
    """The EC2 calls of the cloud the services use, counted."""
    counter = CallCounter(cloud_service.get_cloud().ec2)
    yield counter
    counter.close()


def batch_of(count: int, options: list[tuple[str, str, str, float]]) -> list[NodeClaim]:
    """``count`` claims of identical launch input, made a batch as a provisioning run makes it."""
    run = uuid.uuid4().hex[:4]
    (batch,) = planned(*(claim(f"general-{run}{i}", options, save=False) for i in range(count)))
    return batch


def instances_tagged(sim, key: str, value: str) -> list[dict]:
    found = ec2(sim).describe_instances(Filters=[{"Name": f"tag:{key}", "Values": [value]}])["Reservations"]
    return [i for r in found for i in r["Instances"]]


def assert_each_claim_has_its_own_tagged_instance(sim, claims) -> None:
    rows = NodeClaim.objects.filter(pk__in=[c.pk for c in claims])
    assert {r.state for r in rows} == {"launched"}
    assert len({r.instance_id for r in rows}) == len(claims)
    for row in rows:
        assert [i["InstanceId"] for i in instances_tagged(sim, "karpenter.sh/nodeclaim", row.name)] == [row.instance_id]
        assert row.launch_started_at is not None and row.launched_at >= row.launch_started_at


def test_claims_of_identical_launch_input_form_one_batch_the_others_launch_alone(env, settings, queued):
    same = [claim(f"general-same{i}", SPOT_THEN_ON_DEMAND, pods=2, save=False) for i in range(5)]
    fewer_options = claim("general-fewer", SPOT_THEN_ON_DEMAND[:1], pods=1, save=False)
    other_taint = claim("general-taint", SPOT_THEN_ON_DEMAND, team="web", pods=30, save=False)
    launches = planned(same[0], fewer_options, *same[1:], other_taint)

    # The launches that unblock the most pods first: one claim of 30 pods, the batch's 10 pods.
    assert [[c.name for c in launch] for launch in launches] == [
        ["general-taint"],
        [c.name for c in same],
        ["general-fewer"],
    ]
    token = launchbatch.batch_token(str(c.uid) for c in same)
    assert token.startswith("fleet-") and len(token) <= 64
    assert launchbatch.batch_token(reversed([str(c.uid) for c in same])) == token
    assert dict(NodeClaim.objects.values_list("name", "launch_batch")) == {
        **{c.name: token for c in same},
        "general-fewer": "",
        "general-taint": "",
    }
    launchbatch.dispatch(launches)
    assert queued == {"batches": [token], "claims": [other_taint.pk, fewer_options.pk]}

    settings.KARPWEB_LAUNCH_API = "run-instances"  # one instance type in one subnet per call
    assert [len(launch) for launch in launchbatch.plan_launches(same)] == [1] * 5


def test_a_batch_launches_every_claim_with_one_fleet(env, calls, queued):
    claims = batch_of(5, SPOT_THEN_ON_DEMAND)
    taken = launchbatch.launch_batch(claims[0].launch_batch)

    assert sorted(c.name for c in taken) == sorted(c.name for c in claims)
    assert calls.calls["CreateFleet"] == 1
    assert_each_claim_has_its_own_tagged_instance(env, claims)
    rows = NodeClaim.objects.filter(pk__in=[c.pk for c in claims])
    assert {(r.capacity_type, r.instance_type, float(r.price_per_hour), r.launch_attempts) for r in rows} == {
        ("spot", "m5.large", 0.03, 1)
    }
    assert all(r.spec["launched"]["imageId"].startswith("ami-") and r.spec["launched"]["subnetId"] for r in rows)
    assert queued == {"claims": [], "batches": []}
    # The task again (a redelivered message): nothing is pending, nothing is launched.
    assert launchbatch.launch_batch(claims[0].launch_batch) == []
    assert calls.calls["CreateFleet"] == 1


def test_a_batch_whose_worker_died_mid_launch_is_relaunched_without_a_second_set(env, calls, queued):
    claims = batch_of(4, SPOT_THEN_ON_DEMAND)
    token = claims[0].launch_batch
    calls.fail_after["CreateTags"] = 1  # the fleet launched, one instance was tagged, then the kill
    with pytest.raises(WorkerDied):
        launchbatch.launch_batch(token)
    del calls.fail_after["CreateTags"]
    assert set(NodeClaim.objects.filter(launch_batch=token).values_list("state", flat=True)) == {"launching"}
    assert launchbatch.launch_batch(token) == []  # a redelivered message: the claims are taken

    assert sorted(provision.relaunch_stuck(stuck_seconds=0)) == sorted(c.pk for c in claims)
    assert queued == {"claims": [], "batches": [token]}  # the batch again, not its claims one by one
    launchbatch.launch_batch(token)

    assert calls.calls["CreateFleet"] == 1
    assert_each_claim_has_its_own_tagged_instance(env, claims)
    assert len(instances_tagged(env, "karpweb/launch-batch", token)) == 4


def test_what_the_fleet_cannot_fill_launches_one_by_one_and_falls_back_to_on_demand(env, calls, queued):
    env.set_insufficient_capacity(["spot:m5.large:*=2"])  # two spot instances left, in any zone
    claims = batch_of(5, SPOT_THEN_ON_DEMAND)
    launchbatch.launch_batch(claims[0].launch_batch)

    assert calls.calls["CreateFleet"] == 1
    rows = {r.name: r for r in NodeClaim.objects.filter(pk__in=[c.pk for c in claims])}
    assert (
        sorted((r.state, r.capacity_type) for r in rows.values()) == [("launched", "spot")] * 2 + [("pending", "")] * 3
    )
    left = [r for r in rows.values() if r.state == "pending"]
    assert all(r.launch_batch == "" for r in left)  # out of the batch: the per-claim launch has them
    assert sorted(queued["claims"]) == sorted(r.pk for r in left)
    # The fleet's errors are in the ICE cache before the claims launch one by one.
    assert {"spot:m5.large:us-east-1a", "spot:m5.large:us-east-1b"} <= ice.unavailable_keys(connections.get_redis())

    for pk in queued["claims"]:
        cloud_service.launch_nodeclaim(pk)
    assert calls.calls["CreateFleet"] == 4  # the batch's, then one per claim left: on-demand at once
    assert_each_claim_has_its_own_tagged_instance(env, claims)
    capacity = sorted(NodeClaim.objects.filter(pk__in=[c.pk for c in claims]).values_list("capacity_type", flat=True))
    assert capacity == ["on-demand"] * 3 + ["spot"] * 2


def test_a_throttled_batch_puts_its_claims_back_for_the_task_to_retry(env, monkeypatch):
    class ThrottledCloud:
        def __init__(self, real):
            self.real, self.attempts = real, 0

        def resolve_nodeclass(self, name, spec):
            return self.real.resolve_nodeclass(name, spec)

        def launch_batch(self, request, nodeclaims):
            self.attempts += 1
            raise Throttled("RequestLimitExceeded")

    monkeypatch.setattr(
        launchbatch, "launch_batch_with_backoff", functools.partial(launch_batch_with_backoff, sleep=lambda s: None)
    )
    claims = batch_of(3, SPOT_THEN_ON_DEMAND)
    cloud = ThrottledCloud(cloud_service.get_cloud())
    with pytest.raises(Throttled):
        launchbatch.launch_batch(claims[0].launch_batch, cloud=cloud)
    assert cloud.attempts == 5
    rows = NodeClaim.objects.filter(pk__in=[c.pk for c in claims])
    assert {(r.state, r.launch_batch, r.launch_attempts) for r in rows} == {("pending", claims[0].launch_batch, 1)}


def test_in_kubernetes_each_claim_of_a_batch_is_published_before_the_fleet(env, settings, monkeypatch, calls):
    published: list[tuple[str, str, int]] = []

    class RecordingCluster:
        def create_nodeclaim(self, manifest):
            name = manifest["metadata"]["name"]
            published.append((name, NodeClaim.objects.get(name=name).state, calls.calls.get("CreateFleet", 0)))

    settings.KARPWEB_CLUSTER = "kubernetes"
    monkeypatch.setattr("provisioning.cluster.get_cluster", RecordingCluster)
    claims = batch_of(3, SPOT_THEN_ON_DEMAND)
    result = tasks.launch_nodeclaims(claims[0].launch_batch)

    assert sorted(published) == sorted((c.name, "pending", 0) for c in claims)
    assert {c["state"] for c in result["claims"].values()} == {"launched"} and len(result["claims"]) == 3
    assert calls.calls["CreateFleet"] == 1


def test_a_process_kept_warm_calls_createfleet_first(env, queued, monkeypatch, django_capture_on_commit_callbacks):
    from builders import deployment, on_demand_general

    from provisioning.cluster import simulated

    apply_manifest(on_demand_general(), source="cli")
    pods, _ = simulated.workload_pods([deployment("web", 12, cpu="1", memory="1Gi")])
    simulated.apply_pods(pods)
    monkeypatch.setattr(cloud_service, "_resolved", {})  # a process that never launched
    with django_capture_on_commit_callbacks(execute=True):
        provision.provision_once()
    cloud = cloud_service.get_cloud()
    sent: list[str] = []
    record = functools.partial(lambda sent, model, **kwargs: sent.append(model.name), sent)
    cloud.ec2.meta.events.register("before-call.ec2.*", record)
    try:
        cloud_service.warm_launches()
        assert {"DescribeSubnets", "DescribeLaunchTemplates"} <= set(sent)
        sent.clear()
        for token in queued["batches"]:
            launchbatch.launch_batch(token)
        for pk in queued["claims"]:
            cloud_service.launch_nodeclaim(pk)
    finally:
        cloud.ec2.meta.events.unregister("before-call.ec2.*", record)
    assert sent and sent[0] == "CreateFleet", sent  # nothing to resolve, describe or create first
    assert NodeClaim.objects.exclude(instance_id="").count() == NodeClaim.objects.count() > 0
    # The simulated EC2 noted each launch call as it arrived, under the fleet's ClientToken.
    noted = {c["clientToken"]: c for c in env.launch_calls() if c["action"] == "CreateFleet"}
    for row in NodeClaim.objects.all():
        assert noted[row.launch_batch or str(row.uid)]["at"] > 0


# ------------------------------------------------------------------ NodeOverlay prices at launch


def test_a_claim_priced_by_an_overlay_launches_by_priority_and_records_list_and_effective_prices(env):
    c = claim("general-ovrly", [])
    c.launch_options = [
        # m7i at 27% off is cheaper than m5 at list: EC2 must follow our order, not its own prices.
        {"instanceType": "m7i.large", "zone": "us-east-1a", "capacityType": "on-demand", "price": 0.073584,
         "listPrice": 0.1008, "overlays": ["savings-plan"]},
        {"instanceType": "m5.large", "zone": "us-east-1a", "capacityType": "on-demand", "price": 0.096},
    ]  # fmt: skip
    c.save()
    cloud_service.launch_nodeclaim(c.pk)
    c.refresh_from_db()
    assert (c.state, c.instance_type) == ("launched", "m7i.large")
    assert (float(c.price_per_hour), float(c.list_price_per_hour)) == (0.073584, 0.1008)
    fleet = next(
        f
        for f in ec2(env).describe_fleets()["Fleets"]
        if {t["Key"]: t["Value"] for t in f.get("Tags", [])}.get("karpenter.sh/nodeclaim") == c.name
    )
    assert fleet["OnDemandOptions"] == {"AllocationStrategy": "prioritized"}


def test_a_claim_without_overlays_records_its_price_as_list_price_and_launches_by_lowest_price(env):
    c = claim("general-plain", [("m5.large", "us-east-1a", "on-demand", 0.096)])
    cloud_service.launch_nodeclaim(c.pk)
    c.refresh_from_db()
    assert (float(c.price_per_hour), float(c.list_price_per_hour)) == (0.096, 0.096)
    fleet = next(
        f
        for f in ec2(env).describe_fleets()["Fleets"]
        if {t["Key"]: t["Value"] for t in f.get("Tags", [])}.get("karpenter.sh/nodeclaim") == c.name
    )
    assert fleet["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
