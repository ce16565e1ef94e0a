"""Provisioning over rows: the batch window in Redis, a provisioning run's Decision and
NodeClaims, the simulated kubelet and scheduler, and ``manage.py sim``."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
import yaml
from builders import deployment, on_demand_general
from django.core.management import call_command
from django.utils import timezone

from provisioning.cluster import simulated
from provisioning.models import ClusterNode, ClusterPod, Decision, NodeClaim
from provisioning.scheduling.solver import solve
from provisioning.services import connections, provision
from provisioning.services.catalog import bundled_catalog
from provisioning.services.policy import apply_manifest

pytestmark = pytest.mark.django_db

GENERAL = on_demand_general()


@pytest.fixture
def redis(clean_redis):
    return clean_redis


@pytest.fixture
def policies(seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(GENERAL, source="cli")


def submit(*documents) -> list[str]:
    pods, _ = simulated.workload_pods(list(documents))
    return simulated.apply_pods(pods)


# ------------------------------------------------------------------ the batch window


def test_the_window_closes_after_the_idle_time(redis, settings):
    settings.KARPWEB_BATCH_IDLE_SECONDS, settings.KARPWEB_BATCH_MAX_SECONDS = 1.0, 10.0
    assert provision.note_pending(now=100.0, redis=redis) is True  # opened: the caller schedules
    assert provision.note_pending(now=100.5, redis=redis) is False  # extended
    assert provision.window_wait(now=101.0, redis=redis) == pytest.approx(0.5)
    assert provision.window_wait(now=101.6, redis=redis) == 0.0  # closed, and reset
    assert provision.note_pending(now=102.0, redis=redis) is True


def test_the_window_closes_after_the_maximum_even_with_pods_arriving(redis, settings):
    settings.KARPWEB_BATCH_IDLE_SECONDS, settings.KARPWEB_BATCH_MAX_SECONDS = 1.0, 10.0
    provision.note_pending(now=0.0, redis=redis)
    for t in range(1, 10):
        provision.note_pending(now=t * 0.9, redis=redis)
        assert provision.window_wait(now=t * 0.9, redis=redis) > 0
    provision.note_pending(now=9.95, redis=redis)
    assert provision.window_wait(now=10.0, redis=redis) == 0.0


def test_one_provisioning_run_at_a_time(redis, policies):
    lock = redis.lock(provision.PROVISION_LOCK, timeout=30)
    assert lock.acquire(blocking=False)
    submit(deployment("web", 3))
    try:
        assert provision.provision(redis=redis) is None  # another run holds the lock
    finally:
        lock.release()
    decision = provision.provision(redis=redis)
    assert decision is not None and decision.claims.count() >= 1


def counting(solve_hook=None):
    """The solver, counting its calls; ``solve_hook`` runs after each solve (the cluster moving on)."""
    calls = []

    def run(snapshot):
        plan = solve(snapshot)
        calls.append(plan)
        if solve_hook is not None:
            solve_hook(len(calls))
        return plan

    return run, calls


def closing_in(redis, seconds: float) -> float:
    """Open a window that closes ``seconds`` from now (1 s idle); returns when it closes."""
    now = time.time()
    provision.note_pending(now=now + seconds - provision.idle_seconds(), redis=redis)
    return now + seconds


def test_a_run_prepared_before_the_window_closes_is_recorded_at_the_close(redis, policies):
    submit(deployment("web", 5))
    closes = closing_in(redis, 0.3)
    solver, calls = counting()
    again, decision = provision.provision_at_close(solver, redis=redis)
    assert again == 0.0 and decision is not None and len(calls) == 1
    assert decision.started_at.timestamp() >= closes  # prepared early, recorded only once closed
    assert {"snapshot", "solve", "verifier", "verify", "record"} == set(decision.timings)
    assert len(decision.pods) == 5 and not provision.window_open(redis)
    assert ClusterPod.objects.exclude(nominated="").count() == 5


def test_a_prepared_run_is_solved_again_when_the_cluster_changed_before_the_close(redis, policies):
    submit(deployment("web", 5))
    closing_in(redis, 0.3)
    solver, calls = counting(lambda n: n == 1 and submit(deployment("late", 2)))
    again, decision = provision.provision_at_close(solver, redis=redis)
    assert again == 0.0 and len(calls) == 2
    assert "verify" not in decision.timings and len(decision.pods) == 7


def test_no_collection_pauses_while_a_run_is_prepared_and_recorded(redis, policies):
    import gc

    submit(deployment("web", 3))
    closing_in(redis, 0.3)
    during = []
    solver, _ = counting(lambda n: during.append(gc.isenabled()))
    assert gc.isenabled()
    again, decision = provision.provision_at_close(solver, redis=redis)
    assert decision is not None and during == [False] and gc.isenabled()


def test_pods_that_push_the_close_back_leave_the_run_to_the_windows_next_check(redis, policies):
    submit(deployment("web", 5))
    closing_in(redis, 0.3)
    solver, calls = counting(lambda n: provision.note_pending(redis=redis))
    again, decision = provision.provision_at_close(solver, redis=redis)
    assert decision is None and len(calls) == 1
    assert 0 < again <= provision.idle_seconds() - provision.lookahead_seconds()
    assert provision.window_open(redis) and not Decision.objects.exists()


def test_the_windows_last_check_waits_for_a_run_in_progress_and_for_the_lookahead(redis, policies):
    submit(deployment("web", 5))
    closing_in(redis, 0.9)
    solver, calls = counting()
    again, decision = provision.provision_at_close(solver, redis=redis)
    assert decision is None and not calls and again > 0  # not yet within the lookahead
    lock = redis.lock(provision.PROVISION_LOCK, timeout=30)
    assert lock.acquire(blocking=False)
    try:
        assert provision.provision_at_close(solver, redis=redis) == (provision.LOCK_RETRY_SECONDS, None)
    finally:
        lock.release()
    assert provision.window_open(redis) and not calls


def test_the_lookahead_is_the_setting_up_to_three_quarters_of_the_idle_window(settings):
    settings.KARPWEB_BATCH_IDLE_SECONDS, settings.KARPWEB_BATCH_LOOKAHEAD_SECONDS = 1.0, 0.7
    assert provision.lookahead_seconds() == 0.7
    settings.KARPWEB_BATCH_IDLE_SECONDS = 0.5
    assert provision.lookahead_seconds() == 0.375
    settings.KARPWEB_BATCH_LOOKAHEAD_SECONDS = 0
    assert provision.lookahead_seconds() == 0.0


# ------------------------------------------------------------------ a provisioning run


def test_a_run_records_a_decision_its_claims_and_nominates_the_pods(redis, policies):
    submit(deployment("web", 20), deployment("cache", 4, cpu="250m", memory="6Gi"))
    decision = provision.provision_once()
    assert decision is not None
    assert len(decision.pods) == 24 and decision.unschedulable == []
    assert set(decision.timings) == {"snapshot", "solve", "verifier", "record"}
    claims = list(decision.claims.all())
    assert claims and sum(len(c.pods) for c in claims) == 24
    for claim in claims:
        assert claim.state == NodeClaim.State.PENDING and claim.launch_options and claim.why
        prices = [o["price"] for o in claim.launch_options]
        assert prices == sorted(prices) and len({o["instanceType"] for o in claim.launch_options}) <= 60
        assert claim.spec["nodeClassRef"]["name"] == "default" and claim.spec["driftHashes"]
        assert ClusterPod.objects.filter(nominated=claim.name).count() == len(claim.pods)
    # Nominated pods are not pending for the next run: nothing new is planned.
    assert provision.provision_once() is None


def test_a_claim_the_verifier_refuses_is_not_launched_and_its_pods_say_why(redis, policies, client):
    """The pipeline checks every plan: a solver that squeezed 20 pods onto the smallest option
    of one claim gets that claim withheld, the pods stay pending with the violation as their
    reason, the metric counts it and the decision page shows it."""
    from dataclasses import replace

    from django.contrib.auth.models import Group, User
    from prometheus_client import REGISTRY

    def squeezing(snapshot):
        plan = solve(snapshot)
        first, *rest = plan.claims
        pods = first.pods + tuple(p for c in rest for p in c.pods)
        return replace(plan, claims=(replace(first, pods=pods, options=first.options[:1]),))

    before = REGISTRY.get_sample_value("karpweb_plan_violations_total", {"kind": "resources"}) or 0
    submit(deployment("web", 20, cpu="1", memory="2Gi"))
    decision = provision.provision_once(squeezing)
    assert decision is not None and not decision.claims.exists()
    assert [v["kind"] for v in decision.violations] == ["resources"]
    pods = ClusterPod.objects.all()
    assert pods.count() == 20 and not pods.exclude(nominated="").exists()
    assert all(p.unschedulable_reason.startswith("the plan verifier refused its NodeClaim: resources") for p in pods)
    assert REGISTRY.get_sample_value("karpweb_plan_violations_total", {"kind": "resources"}) == before + 1
    user = User.objects.create_user("viewer", password="pw")
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    page = client.get(f"/decisions/{decision.pk}/").content.decode()
    assert "Refused by the plan verifier" in page and "its pods and DaemonSets ask" in page


def test_a_runs_claims_are_inserted_in_one_statement_of_rows_not_arrays(redis, policies):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    submit(deployment("web", 30, cpu="2", memory="4Gi"))
    with CaptureQueriesContext(connection) as queries:
        decision = provision.provision_once()
    inserts = [q["sql"] for q in queries if q["sql"].startswith('INSERT INTO "provisioning_nodeclaim"')]
    assert decision.claims.count() > 1 and len(inserts) == 1
    # On PostgreSQL Django would insert through UNNEST arrays, much slower for JSON columns.
    assert "UNNEST" not in inserts[0] and "VALUES" in inserts[0]


def test_unschedulable_pods_get_the_reason_on_the_decision_and_the_pod(redis, seed_ec2nodeclass, seed_nodepool):
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(seed_nodepool, source="cli")  # instance-family In [m, c, r]: no such family
    submit(deployment("web", 2))
    decision = provision.provision_once()
    assert decision.claims.count() == 0 and len(decision.unschedulable) == 2
    assert all("karpenter.k8s.aws/instance-family" in u["reason"] for u in decision.unschedulable)
    assert all("instance-family" in p.unschedulable_reason for p in ClusterPod.objects.all())


def test_in_flight_claims_are_filled_before_new_ones_are_planned(redis, policies):
    submit(deployment("web", 2, cpu="250m", memory="256Mi"))
    first = provision.provision_once()
    claim = first.claims.get()
    submit(deployment("api", 1, cpu="100m", memory="128Mi"))
    second = provision.provision_once()
    # The small pod fits the claim in flight (the solver sees it as a node): no new claim.
    assert second.claims.count() == 0
    assert claim.name in {c.name for c in NodeClaim.objects.all()}


# ------------------------------------------------------------------ the simulated cluster


def launched(claim: NodeClaim, instance_type: str, seconds_ago: float = 10) -> None:
    claim.move(
        NodeClaim.State.PENDING,
        NodeClaim.State.LAUNCHED,
        instance_id=f"i-{claim.pk:017x}",
        instance_type=instance_type,
        zone="us-east-1a",
        capacity_type="on-demand",
        launched_at=timezone.now() - timedelta(seconds=seconds_ago),
    )


def test_the_kubelet_registers_launched_claims_and_the_scheduler_binds_what_fits(redis, policies):
    submit(deployment("web", 6, cpu="1", memory="1Gi"))
    decision = provision.provision_once()
    catalog = bundled_catalog()
    for claim in decision.claims.all():
        launched(claim, claim.launch_options[0]["instanceType"])
    names = simulated.register_launched(2.0, catalog.instance_type)
    assert len(names) == decision.claims.count()
    node = ClusterNode.objects.get(name=names[0])
    labels = node.manifest["metadata"]["labels"]
    assert labels["karpenter.sh/nodepool"] == "general" and labels["node.kubernetes.io/instance-type"]
    assert node.manifest["status"]["allocatable"]["cpu"].endswith("m")
    assert all(c.state == NodeClaim.State.INITIALIZED for c in NodeClaim.objects.all())
    assert simulated.bind_pending(solve) == 6
    assert not ClusterPod.objects.filter(node_name="").exists()


def test_the_scheduler_never_overcommits_a_node(redis, policies):
    submit(deployment("web", 1, cpu="500m", memory="512Mi"))
    claim = provision.provision_once().claims.get()
    launched(claim, "c5.large")  # 2 vCPU: about 1.9 allocatable
    simulated.register_launched(0, bundled_catalog().instance_type)
    submit(deployment("big", 3, cpu="1", memory="512Mi"))
    simulated.bind_pending(solve)
    node = ClusterNode.objects.get()
    on_node = ClusterPod.objects.filter(node_name=node.name)
    assert on_node.count() == 2  # web (500m) + one big (1): a second big would not fit
    assert ClusterPod.objects.filter(node_name="").count() == 2


def test_the_kubelet_waits_for_its_delay(redis, policies):
    submit(deployment("web", 1))
    claim = provision.provision_once().claims.get()
    launched(claim, "c5.large", seconds_ago=0.5)
    assert simulated.register_launched(2.0, bundled_catalog().instance_type) == []


def test_claims_that_never_register_are_terminated_and_their_pods_pend_again(
    redis, policies, simulated_aws, monkeypatch, settings
):
    for key, value in simulated_aws.env().items():
        monkeypatch.setenv(key, value)
    from provisioning.services.cloud import get_cloud

    get_cloud.cache_clear()
    submit(deployment("web", 1))
    claim = provision.provision_once().claims.get()
    launched(claim, "c5.large", seconds_ago=3600)
    NodeClaim.objects.filter(pk=claim.pk).update(instance_id="")  # nothing to terminate in EC2
    assert provision.expire_unregistered(timeout_seconds=900) == [claim.name]
    claim.refresh_from_db()
    assert claim.state == NodeClaim.State.TERMINATED and claim.reason == "RegistrationTimeout"
    pod = ClusterPod.objects.get()
    assert pod.nominated == "" and pod.node_name == ""
    get_cloud.cache_clear()


# ------------------------------------------------------------------ manage.py sim


def test_sim_apply_status_and_delete(tmp_path, capsys, policies, settings):
    settings.REDIS_URL = ""  # no Redis here: the pipeline's sweep would find the pods
    connections.reset()
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump_all([deployment("web", 3), {"kind": "Service", "metadata": {"name": "x"}}]))
    call_command("sim", "apply", "-f", str(path))
    out = capsys.readouterr()
    assert "3 pods created" in out.out and "skipped Service" in out.err
    call_command("sim", "status", "--format", "json")
    status = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in status["pods"]] == ["default/web-0", "default/web-1", "default/web-2"]
    assert all(p["phase"] == "Pending" and p["node"] is None for p in status["pods"]) and status["nodes"] == []
    call_command("sim", "delete", "-f", str(path))
    assert "3 pods deleted" in capsys.readouterr().out
    assert not ClusterPod.objects.exists()
    connections.reset()


def test_sim_apply_applies_the_nodeoverlays_of_the_file_as_policies(tmp_path, policies):
    from provisioning.models import AuditEntry, NodeOverlay

    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump_all([SAVINGS_PLAN, deployment("cache", 1, cpu="250m", memory="4Gi")]))
    call_command("sim", "apply", "-f", str(path))
    assert NodeOverlay.objects.get().spec["priceAdjustment"] == "-27%"
    assert AuditEntry.objects.get(kind="NodeOverlay").actor == "sim apply"


def test_sim_apply_rejects_bad_input_naming_the_document(tmp_path, capsys, policies):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(deployment("web", -1)))
    with pytest.raises(SystemExit) as exit_info:
        call_command("sim", "apply", "-f", str(path))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Deployment web" in err and "spec.replicas" in err
    assert not ClusterPod.objects.exists() and not Decision.objects.exists()


def test_sim_apply_writes_nothing_when_a_document_is_invalid_and_names_every_bad_policy(tmp_path, capsys, policies):
    """As kubectl's validation refuses a bad file before it reaches the cluster: a good NodePool
    before a bad one is not applied, nor are the pods after them."""
    from builders import nodepool, requirement

    from provisioning.models import NodePool

    good = nodepool(requirement("karpenter.sh/capacity-type", "spot"), name="spot")
    bad = nodepool(requirement("karpenter.sh/capacity-type", "spot", operator="Maybe"), name="broken")
    worse = nodepool(name="worse", disruption={"consolidateAfter": "soon"})
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump_all([good, bad, worse, deployment("web", 2)]))
    with pytest.raises(SystemExit) as exit_info:
        call_command("sim", "apply", "-f", str(path))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "NodePool/broken" in err and "requirements[0].operator" in err
    assert "NodePool/worse" in err and "consolidateAfter" in err
    assert not NodePool.objects.filter(name="spot").exists() and not ClusterPod.objects.exists()


def test_a_window_lost_with_redis_is_opened_again_by_the_sweep(redis, policies, monkeypatch):
    from provisioning import tasks

    scheduled = []
    monkeypatch.setattr(tasks.batch_window, "apply_async", lambda **kw: scheduled.append(kw))
    submit(deployment("web", 2))
    tasks.pods_pending()
    assert provision.window_open(redis) and len(scheduled) == 1
    redis.flushdb()  # Redis restarted: the window and its flag are gone
    assert tasks.sweep_pending() is True
    assert provision.window_open(redis) and len(scheduled) == 2


def test_a_warm_process_builds_no_instance_types_during_a_run(redis, policies, monkeypatch):
    from provisioning.cloud.catalog import Catalog
    from provisioning.services import catalog

    catalog.load_catalog(fresh=True)._cache.clear()  # as a process that never planned
    built = []
    build = Catalog._build
    monkeypatch.setattr(Catalog, "_build", lambda self, *args: built.append(args) or build(self, *args))
    provision.warm_up()
    assert built, "warming builds the NodePool's instance types"
    built.clear()
    submit(deployment("web", 3))
    assert provision.provision_once() is not None and built == []


def test_nodeclaim_manifest_is_karpenters_shape(redis, policies):
    submit(deployment("web", 1))
    claim = provision.provision_once().claims.get()
    manifest = claim.to_manifest()
    assert manifest["apiVersion"] == "karpenter.sh/v1" and manifest["kind"] == "NodeClaim"
    assert manifest["metadata"]["labels"] == {"karpenter.sh/nodepool": "general"}
    assert {"requirements", "resources", "nodeClassRef"} <= set(manifest["spec"])
    assert "driftHashes" not in manifest["spec"]


def test_the_overview_shows_the_cluster_now_and_refreshes_as_a_partial(
    admin_client, policies, django_assert_max_num_queries
):
    submit(deployment("web", 4))
    provision.provision_once()
    page = admin_client.get("/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Cluster now" in html and "4</strong> pending pods" in html and "Last decisions" in html
    partial = admin_client.get("/", HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert partial.status_code == 200 and body.lstrip().startswith('<section class="card" id="cluster-now"')
    assert "<html" not in body


def test_the_overview_costs_the_same_queries_with_more_rows(admin_client, policies):
    submit(deployment("web", 2))
    provision.provision_once()
    admin_client.get("/", HTTP_HX_REQUEST="true")
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        admin_client.get("/", HTTP_HX_REQUEST="true")
    submit(deployment("api", 40))
    provision.provision_once()
    with CaptureQueriesContext(connection) as many:
        admin_client.get("/", HTTP_HX_REQUEST="true")
    assert len(many) == len(few)


def test_a_pod_bound_while_the_run_reads_the_cluster_is_not_planned_twice(redis, policies, monkeypatch):
    submit(deployment("web", 2))
    real = provision.cluster_documents

    def bind_one_meanwhile(catalog):
        ClusterPod.objects.filter(name="web-0").update(node_name="ip-elsewhere", phase="Running")
        return real(catalog)

    monkeypatch.setattr(provision, "cluster_documents", bind_one_meanwhile)
    decision = provision.provision_once()
    assert decision is not None and decision.pods == ["default/web-1"]


# ------------------------------------------------------------------ events


class RecordingCluster(simulated.SimulatedCluster):
    """The simulated cluster, keeping the events it is given."""

    def __init__(self) -> None:
        self.events: list = []

    def record_event(self, event) -> None:
        self.events.append(event)


def test_a_run_records_nominated_and_failed_scheduling_events(redis, policies, django_capture_on_commit_callbacks):
    submit(deployment("web", 2), deployment("huge", 1, cpu="1000"))
    cluster = RecordingCluster()
    with django_capture_on_commit_callbacks(execute=True):
        decision = provision.provision_once(cluster=cluster)
    (claim,) = decision.claims.all()
    by_pod = {(e.involved.namespace, e.involved.name): e for e in cluster.events}
    assert len(cluster.events) == len(by_pod) == 3
    for name in ("web-0", "web-1"):
        event = by_pod["default", name]
        assert (event.type, event.reason) == ("Normal", "Nominated")
        assert event.message == f"Pod should schedule on: nodeclaim/{claim.name}"
        assert event.involved.kind == "Pod"
    failed = by_pod["default", "huge-0"]
    assert (failed.type, failed.reason) == ("Warning", "FailedScheduling")
    reason = ClusterPod.objects.get(name="huge-0").unschedulable_reason
    assert reason and failed.message == f"Failed to schedule pod, {reason}"


# ------------------------------------------------------------------ NodeOverlays in a provisioning run


def nodeoverlay(name: str, spec: dict) -> dict:
    return {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": spec}


SAVINGS_PLAN = nodeoverlay(
    "savings-plan",
    {
        "weight": 10,
        "requirements": [
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["r7i"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ],
        "priceAdjustment": "-27%",
    },
)


def test_a_run_compares_overlaid_prices_and_records_which_overlay_set_each(redis, policies):
    submit(deployment("cache", 4, cpu="250m", memory="4Gi"))
    apply_manifest(SAVINGS_PLAN, source="cli")
    decision = provision.provision_once()
    claim = decision.claims.get(launch_options__0__instanceType="r7i.large")
    first = claim.launch_options[0]
    assert first["overlays"] == ["savings-plan"]
    assert first["listPrice"] == 0.1323 and first["price"] == pytest.approx(0.1323 * 0.73)
    # Every option it compared says what priced it: the discounted ones name the overlay.
    r7i = [o for o in claim.launch_options if o["instanceType"].split(".")[0] == "r7i"]
    others = [o for o in claim.launch_options if o["instanceType"].split(".")[0] != "r7i"]
    assert r7i and others
    assert all(o["overlays"] == ["savings-plan"] and o["listPrice"] > o["price"] for o in r7i)
    assert all("overlays" not in o and "listPrice" not in o for o in others)
    assert any("overlays" not in a and a["price"] > first["price"] for a in claim.alternatives)
    assert "(list $0.1323, NodeOverlay savings-plan)" in claim.why
    assert claim.spec["annotations"]["karpenter.sh/price-overlay-applied"] == "true"
    assert float(decision.total_price_per_hour) == pytest.approx(
        sum(c.launch_options[0]["price"] for c in decision.claims.all())
    )


def test_a_changed_overlay_makes_a_prepared_run_solve_again(redis, policies):
    key = provision.verify_key()
    apply_manifest(SAVINGS_PLAN, source="cli")
    assert provision.verify_key() != key


def test_extended_resources_of_an_overlay_reach_the_node_the_simulated_kubelet_registers(redis, policies):
    fuse = nodeoverlay(
        "fuse",
        {
            "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5"]}],
            "capacity": {"smarter-devices/fuse": 2},
        },
    )
    apply_manifest(fuse, source="cli")
    app = deployment("app", 1)
    app["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"smarter-devices/fuse": "1"}
    submit(app)
    claim = provision.provision_once().claims.get()
    chosen = claim.launch_options[0]["instanceType"]
    assert chosen.startswith("c5.") and claim.spec["overlayCapacity"][chosen] == {"smarter-devices/fuse": "2"}
    assert "overlayCapacity" not in claim.to_manifest()["spec"]
    # While in flight, the next run sees the claim with the resource (its pod stays nominated to it).
    assert provision.provision_once() is None
    launched(claim, chosen)
    (name,) = simulated.register_launched(0, bundled_catalog().instance_type)
    node = ClusterNode.objects.get(name=name)
    assert node.manifest["status"]["capacity"]["smarter-devices/fuse"] == "2"
    assert simulated.bind_pending(solve) == 1


def test_overlay_status_says_which_applies_after_every_policy_change(redis, policies):
    from provisioning.models import NodeOverlay
    from provisioning.services.policy import delete_resource

    def ready(name):
        condition = NodeOverlay.objects.get(name=name).condition("Ready")
        return condition["status"], condition["reason"]

    apply_manifest(SAVINGS_PLAN, source="cli")
    team = {"key": "example.com/team", "operator": "In", "values": ["data"]}
    requirements = [*SAVINGS_PLAN["spec"]["requirements"], team]
    for_data = nodeoverlay("edp", {**SAVINGS_PLAN["spec"], "requirements": requirements, "priceAdjustment": "-5%"})
    apply_manifest(for_data, source="cli")
    # No NodePool is labelled for the data team: it reaches nothing, so it meets nothing.
    assert ready("savings-plan") == ("True", "Ready") and ready("edp") == ("True", "Ready")
    labelled = json.loads(json.dumps(GENERAL))
    labelled["spec"]["template"]["metadata"] = {"labels": {"example.com/team": "data"}}
    apply_manifest(labelled, source="cli")
    # Now both reach general's r7i at weight 10: the name later in the alphabet (savings-plan) wins.
    assert ready("savings-plan") == ("True", "Ready") and ready("edp") == ("False", "Conflict")
    message = NodeOverlay.objects.get(name="edp").condition("ValidationSucceeded")["message"]
    assert message.startswith("not applied: it conflicts with NodeOverlay savings-plan of the same weight (10)")
    assert "(NodePool general)" in message
    delete_resource("NodeOverlay", "savings-plan", source="cli")
    assert ready("edp") == ("True", "Ready")


def test_the_demo_of_make_run_shows_an_overlay_changing_a_decision(redis, settings):
    from django.contrib.auth.models import User
    from django.test import Client

    from provisioning.models import NodeOverlay
    from provisioning.services import demo

    settings.KARPWEB_CLUSTER = "simulated"
    call_command("seed_demo")
    assert NodeOverlay.objects.get().ready["status"] == "True"
    demo.step(0.0)  # cache: 4 replicas of 250m and 4Gi, on demand
    decision = provision.provision_once()
    cache = [c for c in decision.claims.all() if any(p.split("/")[1].startswith("cache-") for p in c.pods)]
    overlaid = [c for c in cache if c.launch_options[0].get("overlays") == ["compute-savings-plan"]]
    assert overlaid, [(c.launch_options[0], c.pods) for c in cache]
    first = overlaid[0].launch_options[0]
    assert first["instanceType"].startswith("r7i.") and first["price"] < first["listPrice"]
    # At list price another type is cheaper: the overlay changed the decision, and the page says so.
    cheaper_at_list = [a for a in overlaid[0].alternatives if a["price"] < first["listPrice"] and "overlays" not in a]
    assert cheaper_at_list
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "", "pw"))
    page = client.get(f"/decisions/{decision.pk}/").content.decode()
    assert '<a href="/policies/NodeOverlay/compute-savings-plan/">compute-savings-plan</a>' in page
