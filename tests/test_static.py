"""Static NodePools (spec.replicas) end to end: the Celery task's reconcile creates claims of
the cheapest allowed type, which launch on the simulated AWS (boto3 over HTTP to the moto
server, no patching) and register through the simulated kubelet; status.nodes reports them;
scaling down (REST's scale subresource, as ``kubectl scale``) drains through the
PodDisruptionBudgets and terminates the instances; a drifted node is replaced one for one; the
demo's static pool comes up; the scale endpoint, the webhook, the Replicas control, the beat
entry and the pure core's counts."""

from __future__ import annotations

import copy

import boto3
import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from provisioning import crd
from provisioning.cluster import simulated
from provisioning.disruption.static import StaticMember, drift_replacements, scale_down
from provisioning.models import AuditEntry, ClusterNode, ClusterPDB, ClusterPod, Disruption, NodeClaim, NodePool
from provisioning.scheduling.static import PoolCount, room, to_create, to_remove
from provisioning.services import cloud as cloud_service
from provisioning.services import connections, dispatch, launchbatch, static
from provisioning.services import disruption as disruption_service
from provisioning.services.catalog import load_catalog
from provisioning.services.policy import apply_manifest

pytestmark = pytest.mark.django_db

CLUSTER = "karpweb-static-test"
SCALE = "/api/v1/nodepools/{}/scale/"


def system_pool(replicas: int = 2, **spec) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "system"},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "m6i"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            },
            **spec,
        },
    }


class Synchronous:
    """The dispatcher of a test: launches run at once, in this process."""

    def launch_claim(self, claim_id: int) -> None:
        cloud_service.launch_nodeclaim(claim_id)

    def launch_batch(self, token: str) -> None:
        launchbatch.launch_batch(token)

    def pods_pending(self) -> None:
        pass

    def export_policy(self, kind: str, name: str) -> None:
        pass


@pytest.fixture
def aws(on_simulated_aws, settings, seed_ec2nodeclass):
    simulated_aws = on_simulated_aws
    settings.KARPWEB_CLUSTER_NAME = CLUSTER
    settings.KARPWEB_CLUSTER = "simulated"
    redis = connections.get_redis()
    for key in redis.scan_iter("karpweb:*"):
        redis.delete(key)
    simulated_aws.set_insufficient_capacity([])
    before = dispatch._installed
    dispatch.install(Synchronous())
    apply_manifest(copy.deepcopy(seed_ec2nodeclass), source="cli")
    yield simulated_aws
    dispatch.install(before)
    connections.reset()
    cloud_service.get_cloud.cache_clear()


def reconcile(capture) -> list[static.Outcome]:
    """The Celery task's reconcile; the claims it commits launch (on commit, as in production)."""
    with capture(execute=True):
        return static.reconcile()


def register() -> list[str]:
    """The simulated kubelet's tick: launched claims get their Ready nodes."""
    return simulated.register_launched(0, load_catalog().instance_type)


def instance_states(sim, ids: list[str]) -> dict[str, str]:
    ec2 = boto3.client("ec2", **sim.client_kwargs())
    found = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    return {i["InstanceId"]: i["State"]["Name"] for r in found for i in r["Instances"]}


def editor() -> APIClient:
    user = User.objects.create_user("scaler")
    user.groups.add(Group.objects.get(name="editor"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


# ------------------------------------------------------------------ on the simulated AWS


def test_a_static_pool_launches_its_replicas_of_the_cheapest_allowed_type_on_the_simulated_aws(
    aws, django_capture_on_commit_callbacks
):
    apply_manifest(system_pool(2), source="cli")
    [outcome] = reconcile(django_capture_on_commit_callbacks)
    assert len(outcome.created) == 2
    claims = list(NodeClaim.objects.filter(nodepool_name="system"))
    assert {c.state for c in claims} == {NodeClaim.State.LAUNCHED}
    # The cheapest offering the requirements allow, and the instances exist in EC2.
    catalog = load_catalog()
    allowed = [
        o.price
        for name in catalog.names
        if name.split(".")[0] in ("m5", "m6i")
        for o in catalog.instance_type(name).offerings
        if o.zone == "us-east-1a" and o.capacity_type == "on-demand" and o.price is not None
    ]
    assert all(float(c.launch_options[0]["price"]) == min(allowed) for c in claims)
    assert {c.instance_type for c in claims} == {claims[0].launch_options[0]["instanceType"]}
    assert set(instance_states(aws, [c.instance_id for c in claims]).values()) == {"running"}
    assert len(register()) == 2
    static.reconcile()
    assert NodePool.objects.get(name="system").status["nodes"] == 2
    assert ClusterNode.objects.filter(nodepool="system").count() == 2
    # Nothing more: another reconcile creates nothing.
    [again] = static.reconcile()
    assert again.created == [] and again.removed == []


def test_scaling_down_through_the_scale_subresource_drains_through_the_pdb_and_terminates(
    aws, django_capture_on_commit_callbacks
):
    apply_manifest(system_pool(3), source="cli")
    reconcile(django_capture_on_commit_callbacks)
    register()
    nodes = sorted(ClusterNode.objects.filter(nodepool="system").values_list("name", flat=True))
    assert len(nodes) == 3
    # Two pods of one app on the first node, a PDB that lets none go; the others are empty.
    for i in range(2):
        ClusterPod.objects.create(
            namespace="default",
            name=f"web-{i}",
            node_name=nodes[0],
            phase=ClusterPod.Phase.RUNNING,
            owner="Deployment/web",
            manifest={
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"web-{i}",
                    "namespace": "default",
                    "labels": {"app": "web"},
                    "ownerReferences": [{"kind": "ReplicaSet", "name": "web-x", "controller": True}],
                },
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
            },
        )
    ClusterPDB.objects.create(
        namespace="default",
        name="web",
        manifest={
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 0},
        },
    )

    client = editor()
    read = client.get(SCALE.format("system"))
    assert read.status_code == 200
    scale = read.json()
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 3} and scale["status"] == {"replicas": 3}
    scale["spec"]["replicas"] = 1
    written = client.put(SCALE.format("system"), scale, format="json")
    assert written.status_code == 200, written.content
    assert written.json()["spec"]["replicas"] == 1
    assert NodePool.objects.get(name="system").spec["replicas"] == 1

    [outcome] = static.reconcile()
    busy_claim = NodeClaim.objects.get(node_name=nodes[0]).name
    assert len(outcome.removed) == 2 and busy_claim not in outcome.removed  # the empty ones first
    for _ in range(3):
        disruption_service.run(disruption_service.timezone.now() + disruption_service.MIN_DRAIN * 2)
    gone = NodeClaim.objects.filter(name__in=outcome.removed)
    assert {c.state for c in gone} == {NodeClaim.State.TERMINATED}
    assert set(instance_states(aws, [c.instance_id for c in gone]).values()) <= {"shutting-down", "terminated"}
    static.reconcile()
    assert NodePool.objects.get(name="system").status["nodes"] == 1

    # Down to 0: the busy node is drained, but the PDB holds its pods (no terminationGracePeriod).
    client.patch(SCALE.format("system"), {"spec": {"replicas": 0}}, format="json", HTTP_IF_MATCH="*")
    [outcome] = static.reconcile()
    assert outcome.removed == [busy_claim]
    disruption_service.run(disruption_service.timezone.now() + disruption_service.MIN_DRAIN * 2)
    [draining] = Disruption.objects.filter(state=Disruption.State.DRAINING)
    assert draining.nodes == [nodes[0]] and "PodDisruptionBudget" in draining.message
    assert NodeClaim.objects.get(name=busy_claim).state == NodeClaim.State.INITIALIZED


def test_the_demo_static_pool_comes_up_on_the_simulated_aws(aws, django_capture_on_commit_callbacks):
    NodePool.objects.all().delete()
    from provisioning.models import EC2NodeClass

    EC2NodeClass.objects.all().delete()
    AuditEntry.objects.all().delete()
    call_command("seed_demo")
    pool = NodePool.objects.get(name="system")
    assert pool.spec["replicas"] == 2
    [outcome] = reconcile(django_capture_on_commit_callbacks)
    assert len(outcome.created) == 2
    assert len(register()) == 2
    static.reconcile()
    assert NodePool.objects.get(name="system").status["nodes"] == 2
    nodes = list(ClusterNode.objects.filter(nodepool="system"))
    assert len(nodes) == 2
    for node in nodes:
        labels = node.manifest["metadata"]["labels"]
        assert labels["karpenter.sh/capacity-type"] == "on-demand"
        assert labels["node.kubernetes.io/instance-type"].startswith("m") and labels[
            "node.kubernetes.io/instance-type"
        ].endswith(".large")
        assert {"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"} in node.manifest["spec"]["taints"]


# ------------------------------------------------------------------ the REST scale subresource


@pytest.fixture
def scaled(seed_ec2nodeclass):
    apply_manifest(copy.deepcopy(seed_ec2nodeclass), source="cli")
    apply_manifest(system_pool(2), source="cli")
    return editor()


def test_a_scale_write_names_the_version_it_read(scaled):
    body = {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 4}}
    assert scaled.put(SCALE.format("system"), body, format="json").status_code == 428
    stale = {**body, "metadata": {"resourceVersion": "99"}}
    conflict = scaled.put(SCALE.format("system"), stale, format="json")
    assert conflict.status_code == 409
    ok = scaled.put(SCALE.format("system"), body, format="json", HTTP_IF_MATCH='"1"')
    assert ok.status_code == 200 and ok["ETag"] == '"2"'
    assert ok.json()["metadata"]["resourceVersion"] == "2"
    patched = scaled.patch(
        SCALE.format("system"), {"spec": {"replicas": 5}, "metadata": {"resourceVersion": "2"}}, format="json"
    )
    assert patched.status_code == 200 and patched.json()["spec"]["replicas"] == 5


def test_a_scale_goes_through_the_validator(scaled, seed_nodepool):
    negative = scaled.put(SCALE.format("system"), {"spec": {"replicas": -1}}, format="json", HTTP_IF_MATCH="*")
    assert negative.status_code == 422 and "spec.replicas" in negative.content.decode()
    missing = scaled.put(SCALE.format("system"), {"spec": {}}, format="json", HTTP_IF_MATCH="*")
    assert missing.status_code == 400 and "spec.replicas" in missing.content.decode()
    # A dynamic NodePool reads as 0 replicas; giving it some is the static/dynamic switch.
    apply_manifest(copy.deepcopy(seed_nodepool), source="cli")
    name = seed_nodepool["metadata"]["name"]
    assert scaled.get(SCALE.format(name)).json()["spec"] == {"replicas": 0}
    switch = scaled.put(SCALE.format(name), {"spec": {"replicas": 1}}, format="json", HTTP_IF_MATCH="*")
    assert switch.status_code == 422 and "Cannot transition NodePool" in switch.content.decode()
    dry = scaled.put(
        SCALE.format("system") + "?dryRun=All", {"spec": {"replicas": 7}}, format="json", HTTP_IF_MATCH="*"
    )
    assert dry.status_code == 200 and dry.json()["spec"]["replicas"] == 7
    assert NodePool.objects.get(name="system").spec["replicas"] == 2
    assert scaled.get(SCALE.format("nope")).status_code == 404


def test_the_crd_has_upstreams_scale_subresource():
    from provisioning.crd.render import crd_manifest

    version = crd_manifest(crd.kinds.NODEPOOL)["spec"]["versions"][0]
    assert version["subresources"] == {
        "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"},
        "status": {},
    }


# ------------------------------------------------------------------ the pure core


def test_counts_as_upstreams_nodepool_state():
    assert to_create(3, PoolCount(running=1), None) == 2
    assert to_create(3, PoolCount(running=1), 2) == 1
    assert to_create(3, PoolCount(running=2, pending_disruption=1), None) == 0  # a replacement is on its way
    assert to_create(3, PoolCount(running=1, deleting=2), 3) == 0  # the deleting ones hold the limit
    assert to_remove(1, PoolCount(running=3, deleting=2)) == 2
    assert to_remove(3, PoolCount(running=2, pending_disruption=2)) == 0
    assert room(PoolCount(running=5), 7, 5) == 2 and room(PoolCount(running=8), 7, 5) == 0


def test_scale_down_takes_unlaunched_then_empty_then_the_cheapest_to_disrupt():
    members = [
        StaticMember("busy", pods=(1.0, 1.0)),
        StaticMember("guarded", pods=(1.0,), do_not_disrupt=True),
        StaticMember("light", pods=(1.0,)),
        StaticMember("empty"),
        StaticMember("pending", launched=False),
    ]
    assert [m.name for m in scale_down(members, 5)] == ["pending", "empty", "light", "busy", "guarded"]
    assert scale_down(members, 0) == []


def test_static_drift_waits_for_scale_down_and_keeps_to_the_limit():
    assert drift_replacements(2, PoolCount(running=3), None, 5, 3)[0] == 0
    assert drift_replacements(3, PoolCount(running=3), 4, 5, 3) == (1, "")
    assert drift_replacements(3, PoolCount(running=3), 3, 5, 3)[1] == "limits.nodes 3 leaves no room for a replacement"
    assert drift_replacements(3, PoolCount(running=3), None, 0, 3)[0] == 0


# ------------------------------------------------------------------ the webhook


def scale_review(replicas) -> dict:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "5a0d6e4e-0000-4000-8000-000000000001",
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "karpenter.sh", "version": "v1", "resource": "nodepools"},
            "subResource": "scale",
            "name": "system",
            "operation": "UPDATE",
            "object": {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": replicas}},
            "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 2}},
        },
    }


def test_a_scale_review_is_answered_should_the_webhook_be_sent_one(client, webhook_role):
    allowed = client.post("/webhook/validate", scale_review(3), content_type="application/json").json()
    assert allowed["response"]["allowed"] is True
    for bad in (-1, "3", None):
        denied = client.post("/webhook/validate", scale_review(bad), content_type="application/json").json()
        assert denied["response"]["allowed"] is False
        assert "spec.replicas" in denied["response"]["status"]["message"]
        assert denied["response"]["status"]["code"] == 422


# ------------------------------------------------------------------ the Replicas control


def signed_in(role: str):
    from django.test import Client

    user, _ = User.objects.get_or_create(username=f"{role}-ui")
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


def test_the_nodepool_page_has_a_replicas_control_for_editors_only(scaled):
    page = "/policies/NodePool/system/"
    viewer = signed_in("viewer").get(page).content.decode()
    assert 'id="replicas"' in viewer and "<strong>2</strong> wanted" in viewer
    assert "/policies/NodePool/system/replicas/" not in viewer
    editor_page = signed_in("editor").get(page).content.decode()
    assert 'hx-post="/policies/NodePool/system/replicas/"' in editor_page
    assert signed_in("viewer").post(page + "replicas/", {"replicas": 3, "expected_version": 1}).status_code == 403


def test_the_replicas_control_scales_through_the_validator_with_htmx(scaled):
    client = signed_in("editor")
    url = "/policies/NodePool/system/replicas/"
    answer = client.post(url, {"replicas": 4, "expected_version": 1}, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    card = answer.content.decode()
    assert card.lstrip().startswith('<section class="card" id="replicas">')
    assert "scaled to 4 replicas" in card and "<strong>4</strong> wanted" in card
    pool = NodePool.objects.get(name="system")
    assert pool.spec["replicas"] == 4 and pool.resource_version == 2
    entry = AuditEntry.objects.latest("at")
    assert entry.actor == "editor-ui" and entry.source == "ui" and entry.name == "system"
    stale = client.post(url, {"replicas": 5, "expected_version": 1}, HTTP_HX_REQUEST="true").content.decode()
    assert 'role="alert"' in stale and "has been modified" in stale
    bad = client.post(url, {"replicas": -1, "expected_version": 2}, HTTP_HX_REQUEST="true").content.decode()
    assert 'role="alert"' in bad and "replicas" in bad
    assert NodePool.objects.get(name="system").spec["replicas"] == 4
    # Without htmx: back to the page, with the message.
    plain = client.post(url, {"replicas": 1, "expected_version": 2})
    assert plain.status_code == 302 and plain["Location"] == "/policies/NodePool/system/"
    assert NodePool.objects.get(name="system").spec["replicas"] == 1


def test_a_dynamic_nodepool_has_no_replicas_control(scaled, seed_nodepool):
    apply_manifest(copy.deepcopy(seed_nodepool), source="cli")
    name = seed_nodepool["metadata"]["name"]
    client = signed_in("editor")
    assert 'id="replicas"' not in client.get(f"/policies/NodePool/{name}/").content.decode()
    assert (
        client.post(f"/policies/NodePool/{name}/replicas/", {"replicas": 1, "expected_version": 1}).status_code == 404
    )


# ------------------------------------------------------------------ the beat


def test_celery_beat_reconciles_static_pools_every_10_seconds_one_at_a_time(settings, redis_url, scaled):
    from provisioning import tasks

    assert settings.CELERY_BEAT_SCHEDULE["static-capacity"] == {
        "task": "provisioning.tasks.static_capacity",
        "schedule": 10.0,
    }
    settings.REDIS_URL = redis_url
    connections.reset()
    held = connections.get_redis().lock(static.LOCK, timeout=30)
    assert held.acquire(blocking=False)
    try:
        assert tasks.static_capacity() == {"skipped": "another static reconcile is running"}
    finally:
        held.release()
    connections.reset()


def test_the_policies_list_marks_a_static_nodepool_with_its_replicas(scaled):
    page = signed_in("viewer").get("/policies/").content.decode()
    assert "static: 2 replicas" in page


def test_a_drifted_static_node_is_replaced_one_for_one_on_the_simulated_aws(aws, django_capture_on_commit_callbacks):
    """A template change drifts the static NodePool's node: the disruption round launches its
    replacement in EC2 first, then drains and terminates the old instance; the pool keeps one node."""
    from datetime import timedelta

    from django.utils import timezone

    apply_manifest(system_pool(1), source="cli")
    reconcile(django_capture_on_commit_callbacks)
    register()
    [old] = NodeClaim.objects.filter(nodepool_name="system", state=NodeClaim.State.INITIALIZED)
    changed = system_pool(1)
    changed["spec"]["template"]["metadata"] = {"labels": {"team": "platform"}}
    apply_manifest(changed, source="cli")

    now = timezone.now()
    for _ in range(8):
        with django_capture_on_commit_callbacks(execute=True):
            disruption_service.run(now)
        register()
        static.reconcile(now)
        now += timedelta(seconds=16)
        if Disruption.objects.filter(state=Disruption.State.DONE).exists():
            break
    [done] = Disruption.objects.all()
    assert done.reason == "Drifted" and done.state == Disruption.State.DONE
    [new] = NodeClaim.objects.filter(nodepool_name="system", state__in=NodeClaim.ACTIVE_STATES)
    assert new.disruption_id == done.pk and new.spec["labels"]["team"] == "platform"
    assert instance_states(aws, [new.instance_id]) == {new.instance_id: "running"}
    old.refresh_from_db()
    assert old.state == NodeClaim.State.TERMINATED
    assert instance_states(aws, [old.instance_id])[old.instance_id] in ("shutting-down", "terminated")
    assert NodePool.objects.get(name="system").status["nodes"] == 1
