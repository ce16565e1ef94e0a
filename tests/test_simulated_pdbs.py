"""PodDisruptionBudgets in the simulated cluster: stored by ``sim apply``, validated naming the
document and field, their status computed as the disruption controller writes it, and
evictions refused as the Eviction API refuses them."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from builders import deployment
from django.contrib.auth.models import Group, User
from django.core.management import call_command

from provisioning.cluster import simulated
from provisioning.cluster.base import Eviction
from provisioning.cluster.simulated import SimulatedCluster
from provisioning.models import ClusterNode, ClusterPDB, ClusterPod
from provisioning.scheduling.workloads import expand_all
from provisioning.services import connections, demo, provision
from provisioning.services.catalog import bundled_catalog

pytestmark = pytest.mark.django_db


def pdb(name: str = "web", namespace: str | None = None, **spec) -> dict:
    spec.setdefault("selector", {"matchLabels": {"app": "web"}})
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": metadata, "spec": spec}


def store(*documents: dict) -> None:
    simulated.apply_budgets(simulated.budget_documents(documents))


def node(name: str, ready: bool = True) -> ClusterNode:
    it = bundled_catalog().instance_type("m5.xlarge")
    manifest = simulated.node_manifest(name, it, zone="us-east-1a", capacity_type="on-demand", nodepool="general")
    return ClusterNode.objects.create(name=name, manifest=manifest, ready=ready)


def pod(name: str, node_name: str = "", labels=None, namespace: str = "default") -> ClusterPod:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"} if labels is None else labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    phase = ClusterPod.Phase.RUNNING if node_name else ClusterPod.Phase.PENDING
    return ClusterPod.objects.create(
        namespace=namespace, name=name, manifest=manifest, node_name=node_name, phase=phase
    )


def status_of(name: str = "web", namespace: str = "default") -> dict:
    (found,) = [
        b
        for b in SimulatedCluster().pdbs()
        if b["metadata"]["name"] == name and b["metadata"]["namespace"] == namespace
    ]
    return found["status"]


def counts(status: dict) -> tuple[int, int, int, int]:
    return (status["expectedPods"], status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"])


def running(name: str) -> bool:
    row = ClusterPod.objects.get(namespace="default", name=name)
    return row.phase == ClusterPod.Phase.RUNNING and row.node_name != ""


@pytest.fixture
def no_redis(settings):
    settings.REDIS_URL = ""  # no Redis here: the pipeline's sweep would find the pods
    connections.reset()
    yield
    connections.reset()


# ------------------------------------------------------------------ sim apply / delete / status


def test_sim_apply_stores_the_budget_status_lists_it_and_delete_removes_it(tmp_path, capsys, no_redis):
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump_all([deployment("web", 3), pdb(maxUnavailable=1)]))
    call_command("sim", "apply", "-f", str(path))
    out = capsys.readouterr().out
    assert "poddisruptionbudget default/web created" in out and "3 pods created" in out
    row = ClusterPDB.objects.get()
    assert (row.namespace, row.name) == ("default", "web")
    assert row.manifest["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    assert row.manifest["metadata"] == {"name": "web", "namespace": "default"}

    call_command("sim", "apply", "-f", str(path))
    assert "poddisruptionbudget default/web unchanged" in capsys.readouterr().out
    path.write_text(yaml.safe_dump_all([deployment("web", 3), pdb(maxUnavailable=2)]))
    call_command("sim", "apply", "-f", str(path))
    assert "poddisruptionbudget default/web configured" in capsys.readouterr().out
    assert ClusterPDB.objects.get().manifest["spec"]["maxUnavailable"] == 2

    call_command("sim", "status", "--format", "json")
    status = json.loads(capsys.readouterr().out)
    # Three pods, all pending: none healthy, 3 - 2 desired, nothing allowed.
    assert status["pdbs"] == [
        {
            "name": "default/web",
            "maxUnavailable": 2,
            "expectedPods": 3,
            "currentHealthy": 0,
            "desiredHealthy": 1,
            "disruptionsAllowed": 0,
        }
    ]
    call_command("sim", "status")
    assert "default/web  0 allowed  (0 healthy of 3, 1 desired)" in capsys.readouterr().out

    call_command("sim", "delete", "-f", str(path))
    out = capsys.readouterr().out
    assert "poddisruptionbudget default/web deleted" in out and "3 pods deleted" in out
    assert not ClusterPDB.objects.exists() and not ClusterPod.objects.exists()


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (pdb(selector={"matchLabels": ["app"]}, maxUnavailable=1), "spec.selector.matchLabels"),
        (
            pdb(selector={"matchExpressions": [{"key": "app", "operator": "Is"}]}, maxUnavailable=1),
            "spec.selector.matchExpressions[0].operator",
        ),
        (pdb(minAvailable=1, maxUnavailable=1), "spec: minAvailable and maxUnavailable cannot be both set"),
        (pdb(minAvailable=-1), "spec.minAvailable: must be ≥ 0"),
        (pdb(maxUnavailable="150%"), "spec.maxUnavailable: must be an integer or a percent"),
        (pdb(maxUnavailable="one"), "spec.maxUnavailable: must be an integer or a percent"),
        (pdb(minAvailable=True), "spec.minAvailable: must be an integer ≥ 0 or a percent"),
        (pdb(minAvailable=1.5), "spec.minAvailable: must be an integer ≥ 0 or a percent"),
        (
            pdb(maxUnavailable=1, unhealthyPodEvictionPolicy="Sometimes"),
            "spec.unhealthyPodEvictionPolicy: must be IfHealthyBudget or AlwaysAllow",
        ),
        ({**pdb(maxUnavailable=1), "apiVersion": "policy/v1beta1"}, "apiVersion: must be policy/v1"),
        ({**pdb(maxUnavailable=1), "spec": "all"}, "spec: must be an object"),
    ],
)
def test_an_invalid_budget_exits_2_naming_the_document_and_the_field(tmp_path, capsys, no_redis, document, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all([deployment("web", 2), document]))
    with pytest.raises(SystemExit) as exit_info:
        call_command("sim", "apply", "-f", str(path))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid input: PodDisruptionBudget default/web: " in err
    assert expected in err
    assert not ClusterPDB.objects.exists() and not ClusterPod.objects.exists()


def test_a_budget_without_a_name_is_invalid(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**pdb(maxUnavailable=1), "metadata": {"namespace": "shop"}}))
    with pytest.raises(SystemExit) as exit_info:
        call_command("sim", "apply", "-f", str(path))
    assert exit_info.value.code == 2
    assert "PodDisruptionBudget: metadata.name: is required" in capsys.readouterr().err


# ------------------------------------------------------------------ status


@pytest.fixture
def four_web_pods():
    """default: web-0..2 running on a Ready node, web-3 pending, api-0 running; shop: one web pod."""
    node("n1")
    for i in range(3):
        pod(f"web-{i}", "n1")
    pod("web-3")
    pod("api-0", "n1", labels={"app": "api"})
    pod("web-0", "n1", namespace="shop")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # (expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed)
        ({"minAvailable": 2}, (4, 3, 2, 1)),
        ({"minAvailable": 3}, (4, 3, 3, 0)),
        ({"minAvailable": 0}, (4, 3, 0, 3)),
        ({"maxUnavailable": 1}, (4, 3, 3, 0)),
        ({"maxUnavailable": 2}, (4, 3, 2, 1)),
        ({"maxUnavailable": 10}, (4, 3, 0, 3)),  # never more than the healthy pods
        ({"maxUnavailable": 0}, (4, 3, 4, 0)),
        ({"minAvailable": "50%"}, (4, 3, 2, 1)),
        ({"minAvailable": "60%"}, (4, 3, 3, 0)),  # 2.4 rounded up
        ({"maxUnavailable": "30%"}, (4, 3, 2, 1)),  # 1.2 rounded up: 4 - 2
        ({"maxUnavailable": "100%"}, (4, 3, 0, 3)),
        # Neither (valid to the API server): the controller expects no pod and allows nothing.
        ({}, (0, 3, 0, 0)),
        # An empty selector selects every pod of its namespace (policy/v1): api-0 too.
        ({"maxUnavailable": 2, "selector": {}}, (5, 4, 3, 1)),
        ({"maxUnavailable": 1, "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}, (5, 4, 4, 0)),
    ],
)
def test_the_status_is_the_disruption_controllers_arithmetic(four_web_pods, spec, expected):
    store(pdb(**spec))
    assert counts(status_of()) == expected


def test_a_null_selector_selects_no_pod_and_allows_nothing(four_web_pods):
    document = pdb(maxUnavailable=1)
    del document["spec"]["selector"]
    store(document)
    status = status_of()
    assert counts(status) == (0, 0, 0, 0)
    assert status["conditions"] == [{"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods"}]


def test_a_budget_counts_only_its_own_namespace(four_web_pods):
    store(pdb(namespace="shop", maxUnavailable=1))
    status = status_of(namespace="shop")
    assert counts(status) == (1, 1, 0, 1)
    assert status["conditions"] == [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods"}]


def test_a_pod_on_a_node_that_is_not_ready_is_not_healthy():
    node("n1")
    node("n2", ready=False)
    pod("web-0", "n1")
    pod("web-1", "n2")
    store(pdb(maxUnavailable=1))
    assert counts(status_of()) == (2, 1, 1, 0)


def test_pdbs_returns_the_manifest_as_the_api_shows_it(four_web_pods):
    store(pdb(minAvailable=2))
    (manifest,) = SimulatedCluster().pdbs()
    assert manifest["apiVersion"] == "policy/v1" and manifest["kind"] == "PodDisruptionBudget"
    assert manifest["metadata"]["namespace"] == "default" and manifest["metadata"]["name"] == "web"
    assert manifest["metadata"]["uid"] == str(ClusterPDB.objects.get().uid)
    assert manifest["spec"] == {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    assert "status" not in ClusterPDB.objects.get().manifest  # computed on each read, never stored


def test_no_budget_no_list():
    assert SimulatedCluster().pdbs() == []


# ------------------------------------------------------------------ eviction


@pytest.fixture
def three_running():
    node("n1")
    for i in range(3):
        pod(f"web-{i}", "n1")


def test_an_eviction_the_budget_does_not_allow_is_refused_and_changes_nothing(three_running, caplog):
    store(pdb(minAvailable=3))
    with caplog.at_level(logging.INFO, logger="provisioning.cluster.simulated"):
        assert SimulatedCluster().evict("default", "web-1") is Eviction.REFUSED
    assert running("web-1") and ClusterPod.objects.get(name="web-1").node_name == "n1"
    assert "eviction of pod default/web-1 refused" in caplog.text and "default/web" in caplog.text


def test_an_eviction_the_budget_allows_sends_the_pod_back_to_pending(three_running):
    store(pdb(minAvailable=2))
    assert SimulatedCluster().evict("default", "web-1") is Eviction.EVICTED
    row = ClusterPod.objects.get(name="web-1")
    assert (row.phase, row.node_name, row.bound_at) == (ClusterPod.Phase.PENDING, "", None)
    assert counts(status_of()) == (3, 2, 2, 0)


def test_two_evictions_against_max_unavailable_1_let_only_the_first_go_until_it_runs_again(three_running):
    store(pdb(maxUnavailable=1))
    cluster = SimulatedCluster()
    assert cluster.evict("default", "web-0") is Eviction.EVICTED
    assert cluster.evict("default", "web-1") is Eviction.REFUSED
    assert not running("web-0") and running("web-1")
    ClusterPod.objects.filter(name="web-0").update(node_name="n1", phase=ClusterPod.Phase.RUNNING)
    assert cluster.evict("default", "web-1") is Eviction.EVICTED
    assert running("web-0") and not running("web-1")


def test_a_pod_two_budgets_select_is_refused_even_when_both_allow(three_running, caplog):
    store(pdb("web", maxUnavailable=2), pdb("everything", maxUnavailable=2, selector={}))
    assert status_of("web")["disruptionsAllowed"] == 2 and status_of("everything")["disruptionsAllowed"] == 2
    with caplog.at_level(logging.WARNING, logger="provisioning.cluster.simulated"):
        assert SimulatedCluster().evict("default", "web-0") is Eviction.REFUSED_MANY_BUDGETS
    assert running("web-0")
    assert "more than one PodDisruptionBudget selects it (default/everything, default/web)" in caplog.text


def test_a_budget_of_another_app_or_namespace_does_not_hold_the_pod(three_running):
    store(pdb("api", minAvailable="100%", selector={"matchLabels": {"app": "api"}}))
    store(pdb("web", namespace="shop", minAvailable="100%"))
    assert SimulatedCluster().evict("default", "web-0") is Eviction.EVICTED


@pytest.mark.parametrize(
    ("policy", "evicted"),
    [(None, False), ("IfHealthyBudget", False), ("AlwaysAllow", True)],
)
def test_always_allow_lets_a_pod_that_is_not_ready_go(policy, evicted):
    node("n1")
    node("sick", ready=False)
    pod("web-0", "n1")
    pod("web-1", "n1")
    pod("web-2", "sick")
    spec = {"minAvailable": 3, **({"unhealthyPodEvictionPolicy": policy} if policy else {})}
    store(pdb(**spec))
    assert counts(status_of()) == (3, 2, 3, 0)
    assert bool(SimulatedCluster().evict("default", "web-2")) is evicted
    assert running("web-2") is not evicted
    assert SimulatedCluster().evict("default", "web-0") is Eviction.REFUSED  # a Ready pod is still held


def test_if_healthy_budget_lets_a_pod_that_is_not_ready_go_while_the_budget_holds():
    node("n1")
    node("sick", ready=False)
    pod("web-0", "n1")
    pod("web-1", "n1")
    pod("web-2", "sick")
    store(pdb(minAvailable=2))  # 2 healthy of 2 desired: nothing allowed, yet the unready pod may go
    assert counts(status_of()) == (3, 2, 2, 0)
    assert SimulatedCluster().evict("default", "web-0") is Eviction.REFUSED
    assert SimulatedCluster().evict("default", "web-2") is Eviction.EVICTED
    assert not running("web-2")


def test_a_pending_pod_is_evicted_without_asking_its_budget():
    pod("web-0")
    store(pdb(maxUnavailable=0))
    ClusterPod.objects.filter(name="web-0").update(nominated="claim-x")
    assert SimulatedCluster().evict("default", "web-0") is Eviction.EVICTED
    assert ClusterPod.objects.get(name="web-0").nominated == ""


# ------------------------------------------------------------------ the provisioner, the demo, the UI


def test_cluster_documents_include_the_budgets_with_their_status(three_running):
    store(pdb(maxUnavailable=1))
    documents, _ = provision.cluster_documents(bundled_catalog())
    budgets = [d for d in documents if d.get("kind") == "PodDisruptionBudget"]
    assert len(budgets) == 1
    assert budgets[0]["metadata"]["name"] == "web" and budgets[0]["status"]["disruptionsAllowed"] == 1
    assert [b["metadata"]["name"] for b in expand_all(documents).budgets] == ["web"]


def test_the_demo_seeds_a_budget_on_web(settings):
    settings.KARPWEB_CLUSTER = "simulated"
    call_command("seed_demo")
    row = ClusterPDB.objects.get()
    assert (row.namespace, row.name) == ("demo", "web")
    assert row.manifest["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    demo.step(0.0)
    status = status_of("web", "demo")
    assert status["expectedPods"] == demo.replicas_at(0.0)["web"] and status["disruptionsAllowed"] == 0


def test_the_disruptions_page_lists_the_budgets(client, three_running):
    user = User.objects.create_user("vera", password="pw")
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    assert "PodDisruptionBudgets" not in client.get("/disruptions/").content.decode()
    store(pdb(maxUnavailable=1))
    text = client.get("/disruptions/").content.decode()
    assert "PodDisruptionBudgets" in text and "default/web" in text and "3 of 3" in text


@pytest.mark.parametrize(
    "selector",
    [
        {"matchLabels": {"app": "web", "tier": "front"}},
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]},
        {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]},
        {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]},
        {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "DoesNotExist"}]},
        {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]},
        {},
    ],
)
def test_a_budget_counts_the_pods_its_selector_selects(selector):
    """The status is counted by the database; the pods it counts are those the selector, read
    as Kubernetes reads it (``LabelSelector.matches``), selects: every operator, keys with dots
    and slashes, pods without the label, other namespaces left out."""
    from provisioning.scheduling.labelselector import LabelSelector

    node("n1")
    node("n2", ready=False)
    labels = [
        {"app": "web", "tier": "front"},
        {"app": "web", "tier": "back", "app.kubernetes.io/name": "web"},
        {"app": "web"},
        {"app": "api", "tier": "front", "app.kubernetes.io/name": "api"},
        {"tier": "x"},
    ]
    for i, chosen in enumerate(labels):
        pod(f"p{i}", node_name="n1", labels=chosen)
        pod(f"q{i}", node_name="n2", labels=chosen)  # on a NotReady node: expected, not healthy
        pod(f"r{i}", labels=chosen)  # pending: expected, not healthy
        pod(f"s{i}", node_name="n1", labels=chosen, namespace="other")
    store(pdb(selector=selector, maxUnavailable=1))
    reading = LabelSelector.from_manifest(selector, "spec.selector")
    expected = sum(3 for chosen in labels if reading.matches(chosen))
    healthy = sum(1 for chosen in labels if reading.matches(chosen))
    status = status_of()
    assert (status["expectedPods"], status["currentHealthy"]) == (expected, healthy)
