"""/metrics after a simulated provisioning run: Karpenter's metric names with its labels and the
values the rows say; the token; the one replica that reports the cluster's state; the
in-process histograms and counters."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from builders import deployment, mark_launched, on_demand_general
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from provisioning.cloud.base import CloudError, InsufficientCapacity, Throttled
from provisioning.cluster import simulated
from provisioning.models import ClusterNode, ClusterPod, Disruption, NodeClaim
from provisioning.observability import metrics, views
from provisioning.scheduling.solver import solve
from provisioning.services import provision
from provisioning.services.catalog import bundled_catalog, load_catalog
from provisioning.services.policy import apply_manifest

pytestmark = pytest.mark.django_db

GENERAL = on_demand_general()
GENERAL["spec"]["limits"] = {"cpu": "100", "memory": "400Gi"}


@pytest.fixture
def redis(clean_redis):
    return clean_redis


@pytest.fixture
def policies(seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(GENERAL, source="cli")


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    """Every sample of GET /metrics as {(name, sorted labels): value}."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def series(samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels) in samples if n == name]


def run_and_bind() -> list[NodeClaim]:
    """One provisioning run over 6 pods that fit and 2 that fit nothing; the claims launched
    and registered by the simulated kubelet, and the pods that fit bound by its scheduler."""
    pods, _ = simulated.workload_pods(
        [
            deployment("web", 6, cpu="1", memory="1Gi"),
            deployment("huge", 2, cpu="1", memory="1Gi", nodeSelector={"karpenter.k8s.aws/instance-family": "none"}),
        ]
    )
    simulated.apply_pods(pods)
    decision = provision.provision_once()
    claims = list(decision.claims.all())
    mark_launched(claims, timezone.now() - timedelta(seconds=10))
    simulated.register_launched(0, bundled_catalog().instance_type)
    assert simulated.bind_pending(solve) == 6
    return [NodeClaim.objects.get(pk=c.pk) for c in claims]


# ------------------------------------------------------------------ the cluster's state


def test_after_a_provisioning_run_metrics_say_what_the_rows_say(client, redis, policies):
    before = scrape(client)
    runs = before.get(("karpenter_scheduler_scheduling_duration_seconds_count", (("controller", "provisioner"),)), 0)
    claims = run_and_bind()
    samples = scrape(client)

    # Pods: one series each, with the node's labels once bound; two pending, unschedulable.
    pods = series(samples, "karpenter_pods_state")
    assert len(pods) == 8
    pending = [p for p in pods if p["phase"] == "Pending"]
    assert sorted(p["name"] for p in pending) == ["huge-0", "huge-1"]
    assert all(p["node"] == "" and p["nodepool"] == "" for p in pending)
    web0 = next(p for p in pods if p["name"] == "web-0")
    node = ClusterNode.objects.get(name=ClusterPod.objects.get(name="web-0").node_name)
    claim = next(c for c in claims if c.node_name == node.name)
    it = bundled_catalog().instance_type(claim.instance_type)
    arch = it.labels["kubernetes.io/arch"]
    assert web0 == {
        "name": "web-0",
        "namespace": "default",
        "owner": "Deployment/web",
        "node": node.name,
        "nodepool": "general",
        "instance_type": claim.instance_type,
        "capacity_type": "on-demand",
        "zone": claim.zone,
        "arch": arch,
        "phase": "Running",
    }
    assert value(samples, "karpenter_scheduler_unschedulable_pods_count", controller="provisioner") == 2
    assert value(samples, "karpenter_scheduler_queue_depth", controller="provisioner") == 2

    # NodeClaims created by the run, by NodePool and reason; nodes registered.
    assert value(
        samples,
        "karpenter_nodeclaims_created_total",
        nodepool="general",
        reason="provisioned",
        min_values_relaxed="false",
    ) == len(claims)
    assert sum(v for (n, _), v in samples.items() if n == "karpenter_nodes_created_total") == len(claims)
    assert value(samples, "karpenter_cluster_state_node_count") == len(claims)
    assert value(samples, "karpweb_nodeclaims", nodepool="general", state="initialized") == len(claims)
    assert value(samples, "karpweb_decisions_total") == 1

    # What the pods on a node request, and what it can hold, in cores and bytes.
    on_node = ClusterPod.objects.filter(node_name=node.name)
    node_labels = {
        "node_name": node.name,
        "nodepool": "general",
        "instance_type": claim.instance_type,
        "capacity_type": "on-demand",
        "zone": claim.zone,
        "arch": arch,
    }
    assert value(samples, "karpenter_nodes_total_pod_requests", resource_type="cpu", **node_labels) == on_node.count()
    assert value(samples, "karpenter_nodes_total_pod_requests", resource_type="memory", **node_labels) == (
        on_node.count() * 2**30
    )
    assert value(samples, "karpenter_nodes_allocatable", resource_type="cpu", **node_labels) == (
        it.allocatable["cpu"] / 1000
    )

    # The NodePool: its limits, and what its claims add up to.
    assert value(samples, "karpenter_nodepools_limit", nodepool="general", resource_type="cpu") == 100
    assert value(samples, "karpenter_nodepools_limit", nodepool="general", resource_type="memory") == 400 * 2**30
    assert value(samples, "karpenter_nodepools_usage", nodepool="general", resource_type="nodes") == len(claims)
    types = load_catalog().instance_types()
    capacity = {t.name: t.capacity for t in types}
    assert value(samples, "karpenter_nodepools_usage", nodepool="general", resource_type="cpu") == (
        sum(capacity[c.instance_type]["cpu"] for c in claims) / 1000
    )

    # Prices: every offering of the catalog, and what the running claims cost.
    m5 = next(t for t in types if t.name == "m5.large")
    offering = next(o for o in m5.offerings if o.capacity_type == "on-demand")
    assert value(
        samples,
        "karpenter_cloudprovider_instance_type_offering_price_estimate",
        instance_type="m5.large",
        capacity_type="on-demand",
        zone=offering.zone,
    ) == pytest.approx(offering.price)
    assert value(samples, "karpweb_spend_dollars_per_hour", nodepool="general", capacity_type="on-demand") == (
        pytest.approx(sum(float(c.price_per_hour) for c in claims))
    )

    # The run itself, counted in this process.
    assert value(samples, "karpenter_scheduler_scheduling_duration_seconds_count", controller="provisioner") == (
        runs + 1
    )


def test_terminated_claims_count_and_nothing_created_is_uncounted(client, redis, policies):
    claims = run_and_bind()
    gone = claims[0]
    gone.move(NodeClaim.ACTIVE_STATES, NodeClaim.State.TERMINATED, deleted_at=timezone.now())
    samples = scrape(client)
    assert (
        value(
            samples,
            "karpenter_nodeclaims_terminated_total",
            nodepool="general",
            capacity_type="on-demand",
            zone=gone.zone,
        )
        == 1
    )
    assert value(samples, "karpenter_nodes_terminated_total", nodepool="general", zone=gone.zone) == 1
    # The claim's row is kept: the created counter does not go down.
    assert value(
        samples,
        "karpenter_nodeclaims_created_total",
        nodepool="general",
        reason="provisioned",
        min_values_relaxed="false",
    ) == len(claims)
    assert value(samples, "karpenter_nodepools_usage", nodepool="general", resource_type="nodes") == len(claims) - 1


def test_a_claim_still_launching_counts_as_its_cheapest_option(client, redis, policies):
    simulated.apply_pods(simulated.workload_pods([deployment("web", 4)])[0])
    claims = list(provision.provision_once().claims.all())
    assert claims and all(c.state == NodeClaim.State.PENDING and not c.instance_type for c in claims)
    capacity = {t.name: t.capacity for t in load_catalog().instance_types()}
    samples = scrape(client)
    assert value(samples, "karpenter_nodepools_usage", nodepool="general", resource_type="memory") == sum(
        capacity[c.launch_options[0]["instanceType"]]["memory"] for c in claims
    )
    assert value(samples, "karpweb_nodeclaims", nodepool="general", state="pending") == len(claims)
    assert value(samples, "karpenter_scheduler_queue_depth", controller="provisioner") == 0  # all nominated


def test_disruptions_count_once_carried_out(client, redis, policies):
    def disruption(state, reason="Underutilized", nodes=("a",), plan=()):
        return Disruption.objects.create(state=state, reason=reason, nodes=list(nodes), replacement_plan=list(plan))

    disruption(Disruption.State.PLANNED)  # not re-checked yet
    disruption(Disruption.State.CANCELLED)  # failed its re-check
    disruption(Disruption.State.DONE, reason="Empty", nodes=("a", "b"))
    disruption(Disruption.State.DRAINING, nodes=("a", "b"))
    disruption(Disruption.State.DONE, reason="Drifted")
    replaced = disruption(Disruption.State.CANCELLED, plan=[{"instanceType": "m5.large"}])
    NodeClaim.objects.create(name="replacement", nodepool_name="general", disruption=replaced)  # started, then failed
    samples = scrape(client)
    name = "karpenter_voluntary_disruption_decisions_total"
    assert {tuple(sorted(s.items())): value(samples, name, **s) for s in series(samples, name)} == {
        (("consolidation_type", "empty"), ("decision", "delete"), ("reason", "empty")): 1,
        (("consolidation_type", "multi"), ("decision", "delete"), ("reason", "underutilized")): 1,
        (("consolidation_type", ""), ("decision", "delete"), ("reason", "drifted")): 1,
        (("consolidation_type", "single"), ("decision", "replace"), ("reason", "underutilized")): 1,
    }
    assert (
        value(
            samples,
            "karpenter_nodeclaims_created_total",
            nodepool="general",
            reason="underutilized",
            min_values_relaxed="false",
        )
        == 1
    )


def test_pod_series_are_capped_pending_first(client, redis, policies, settings):
    run_and_bind()
    settings.KARPWEB_METRICS_MAX_POD_SERIES = 3
    samples = scrape(client)
    pods = series(samples, "karpenter_pods_state")
    assert len(pods) == 3
    assert {p["name"] for p in pods if p["phase"] == "Pending"} == {"huge-0", "huge-1"}
    assert value(samples, "karpweb_metrics_pod_series_omitted") == 5


# ------------------------------------------------------------------ who may scrape, and which replica reports


def test_metrics_need_the_token_when_one_is_set(client, settings):
    settings.KARPWEB_METRICS_TOKEN = "s3cret-token"
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Token s3cret-token").status_code == 401
    answered = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert answered.status_code == 200 and answered["Content-Type"].startswith("text/plain")
    assert b"karpenter_pods_state" in answered.content


def test_production_keeps_metrics_closed_until_a_token_is_set(client, settings):
    settings.KARPWEB_PRODUCTION = True
    refused = client.get("/metrics")
    assert refused.status_code == 403 and b"set KARPWEB_METRICS_TOKEN" in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 403
    settings.KARPWEB_METRICS_TOKEN = "a-token-of-32-characters-or-more-0123"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {settings.KARPWEB_METRICS_TOKEN}").status_code == 200


def test_metrics_pass_the_host_check_like_every_url(client, settings):
    """Prometheus scrapes a pod by its IP: the manifests put it in ALLOWED_HOSTS (POD_IP)."""
    assert client.get("/metrics", HTTP_HOST="10.0.3.7:8000").status_code == 400  # Django's Host check
    assert client.get("/healthz", HTTP_HOST="10.0.3.7:8000").status_code == 400
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "10.0.3.7"]
    assert client.get("/metrics", HTTP_HOST="10.0.3.7:8000").status_code == 200
    assert client.post("/metrics").status_code == 405


def test_one_web_replica_reports_the_cluster_state(client, redis, policies, monkeypatch, settings):

    monkeypatch.setattr(views, "replica", lambda: "web-1:1")
    first = scrape(client)
    assert value(first, "karpweb_metrics_cluster_state_exporter") == 1 and series(first, "karpenter_pods_state") == []
    assert ("karpenter_cluster_state_node_count", ()) in first
    monkeypatch.setattr(views, "replica", lambda: "web-2:1")
    second = scrape(client)
    assert value(second, "karpweb_metrics_cluster_state_exporter") == 0
    assert ("karpenter_cluster_state_node_count", ()) not in second
    assert any(name == "python_info" for name, _ in second)  # its own metrics still come
    redis.delete(views.LEASE_KEY)  # web-1 is gone and its lease ran out
    assert value(scrape(client), "karpweb_metrics_cluster_state_exporter") == 1
    # The webhook's replicas never report it: their port serves no /metrics at all (their own
    # counts are on the metrics port of gunicorn's master, tests/test_webhook.py).
    settings.KARPWEB_ROLE = "webhook"
    settings.ROOT_URLCONF, settings.MIDDLEWARE = settings.URLCONFS["webhook"], settings.WEBHOOK_MIDDLEWARE
    assert client.get("/metrics").status_code == 404


# ------------------------------------------------------------------ the broker's queues


def queue_length(samples, queue: str = "celery") -> float:
    return value(samples, "karpweb_celery_queue_length", queue=queue)


def test_the_celery_queue_length_is_what_waits_in_the_broker(client, redis, monkeypatch):
    from karpweb.celery import app

    before = queue_length(scrape(client))  # whatever an earlier test left queued
    marker = f"test-{uuid.uuid4()}"
    redis.lpush("celery", *[marker] * 3)
    redis.lpush("celery\x06\x163", marker)  # kombu's list for priorities 3-5
    try:
        assert queue_length(scrape(client)) == before + 4
        redis.rpop("celery")  # a worker takes one
        assert queue_length(scrape(client)) == before + 3
        # A queue a route sends to has its series, 0 while nothing waits in it.
        monkeypatch.setitem(app.conf, "task_routes", {"provisioning.tasks.launch": {"queue": "launches"}})
        samples = scrape(client)
        assert queue_length(samples, "launches") == 0
        assert sorted(s["queue"] for s in series(samples, "karpweb_celery_queue_length")) == ["celery", "launches"]
    finally:
        redis.lrem("celery", 0, marker)
        redis.lrem("celery\x06\x163", 0, marker)


def test_a_broker_that_cannot_be_read_leaves_the_queue_out_and_metrics_answer(
    client, redis, policies, settings, monkeypatch
):
    from provisioning.services import connections

    monkeypatch.setattr(views, "replica", lambda: "web-1:1")
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there: refused at once
    connections.reset()
    samples = scrape(client)
    # Left out, not 0: an autoscaler would read 0 as "no work" and take workers away.
    assert series(samples, "karpweb_celery_queue_length") == []
    # No lease to be had either: this replica reports the cluster's state rather than none doing so.
    assert value(samples, "karpweb_metrics_cluster_state_exporter") == 1
    assert ("karpenter_cluster_state_node_count", ()) in samples


def test_only_the_replica_reporting_the_cluster_state_reports_the_queue(client, redis, monkeypatch):
    monkeypatch.setattr(views, "replica", lambda: "web-1:1")
    assert series(scrape(client), "karpweb_celery_queue_length") == [{"queue": "celery"}]
    monkeypatch.setattr(views, "replica", lambda: "web-2:1")
    assert series(scrape(client), "karpweb_celery_queue_length") == []


# ------------------------------------------------------------------ counted where it happens


def sample(name: str, **labels) -> float:
    """A sample of this process's own metrics (0 before its first observation)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_batch_window_is_measured_when_it_closes(redis, settings):
    settings.KARPWEB_BATCH_IDLE_SECONDS, settings.KARPWEB_BATCH_MAX_SECONDS = 1.0, 10.0
    count, total = sample("karpweb_batch_window_seconds_count"), sample("karpweb_batch_window_seconds_sum")
    provision.note_pending(now=100.0, redis=redis)
    provision.note_pending(now=100.5, redis=redis)
    assert provision.window_wait(now=101.0, redis=redis) > 0
    assert sample("karpweb_batch_window_seconds_count") == count  # still open
    assert provision.window_wait(now=101.75, redis=redis) == 0
    assert sample("karpweb_batch_window_seconds_count") == count + 1
    assert sample("karpweb_batch_window_seconds_sum") == pytest.approx(total + 1.75)


def test_a_provisioning_run_records_its_size_and_duration(redis, policies):
    runs, pods = sample("karpweb_provisioning_pods_count"), sample("karpweb_provisioning_pods_sum")
    durations = sample("karpweb_provisioning_duration_seconds_count")
    simulated.apply_pods(simulated.workload_pods([deployment("web", 5)])[0])
    provision.provision_once()
    assert sample("karpweb_provisioning_pods_count") == runs + 1
    assert sample("karpweb_provisioning_pods_sum") == pods + 5
    assert sample("karpweb_provisioning_duration_seconds_count") == durations + 1


def test_admission_reviews_are_timed_by_kind_operation_and_result(webhook_role, client, seed_nodepool):
    def review(manifest):
        kind = {"group": "karpenter.sh", "version": "v1", "kind": "NodePool"}
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": kind, "operation": "CREATE", "object": manifest},
        }

    name = "karpweb_webhook_request_duration_seconds_count"
    results = {
        "allowed": {"kind": "NodePool", "operation": "CREATE", "result": "allowed"},
        "denied": {"kind": "NodePool", "operation": "CREATE", "result": "denied"},
        "error": {"kind": "", "operation": "", "result": "error"},
    }
    before = {result: sample(name, **labels) for result, labels in results.items()}
    invalid = {**seed_nodepool, "spec": {**seed_nodepool["spec"], "weight": 500}}
    for body in (review(seed_nodepool), review(invalid), "not an AdmissionReview"):
        client.post("/webhook/validate", body, content_type="application/json")
    assert {result: sample(name, **labels) for result, labels in results.items()} == {
        result: n + 1 for result, n in before.items()
    }


@pytest.mark.parametrize(
    ("error", "label"),
    [
        (InsufficientCapacity("no m5.large"), "InsufficientCapacityError"),
        (Throttled("slow down"), "RequestLimitExceeded"),
        (CloudError("no such AMI", reason="AMINotFound"), "AMINotFound"),
    ],
)
def test_failed_cloud_calls_are_counted_by_error(error, label):
    call = {"controller": "nodeclaim.lifecycle", "method": "Create", "provider": "aws"}
    errors = sample("karpenter_cloudprovider_errors_total", **call, error=label)
    calls = sample("karpenter_cloudprovider_duration_seconds_count", **call)
    with pytest.raises(CloudError), metrics.cloud_call("nodeclaim.lifecycle", "Create"):
        raise error
    assert sample("karpenter_cloudprovider_errors_total", **call, error=label) == errors + 1
    assert sample("karpenter_cloudprovider_duration_seconds_count", **call) == calls + 1
