"""KubernetesCluster against a real HTTP server: kmock, a Kubernetes API mock.

kmock runs in the test's event loop; the official client is synchronous, so every call
runs in a worker thread (``asyncio.to_thread``) while the loop serves it. Reactions are
declared per request (``kmock['get /api/v1/nodes'] << {...}``); without one, kmock's
emulator answers from the objects it holds (``kmock.objects``), with 404 for unknown ones
and 409 for a second create of one name, like an API server.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
import yaml
from kmock import Response as kmock_response
from kubernetes import client

from provisioning.cluster.base import (
    DISRUPTED_TAINT,
    ClusterError,
    Conflict,
    Event,
    Eviction,
    ObjectEvent,
    ObjectReference,
    is_pending,
)
from provisioning.cluster.kubernetes import EventOutbox, KubernetesCluster
from provisioning.cluster.leaderelection import LeaderElection

pytestmark = pytest.mark.asyncio

NODES = "/api/v1/nodes"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"


@pytest.fixture
def cluster(kmock):
    api = client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))
    yield KubernetesCluster(api, watch_timeout=2, request_timeout=5, retry_delay=0.01, events=EventOutbox())
    api.close()


def pod(name: str, *, phase: str = "Pending", node: str = "", unschedulable: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    spec: dict[str, Any] = {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]}
    if node:
        spec["nodeName"] = node
    spec["nodeSelector"] = {"kubernetes.io/arch": "arm64"}
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec, "status": status}


def node(name: str, version: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}, "spec": spec}


def listing(kind: str, version: str, *items: dict[str, Any], more: str = "") -> dict[str, Any]:
    meta = {"resourceVersion": version} | ({"continue": more} if more else {})
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "items": list(items)}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def gone(version: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {version} (42)",
        "reason": "Expired",
        "code": 410,
    }


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def nodepool(version: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "general", "uid": "2f1d0c8e-0000-4000-8000-000000000001", "generation": 3}
    if version:
        meta["resourceVersion"] = version
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": meta,
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass"}}}},
        "status": {"conditions": []},
    }


def requests(kmock, criteria: str) -> list:
    return list(kmock[criteria])


async def watched(cluster: KubernetesCluster, kinds: list[str], expected: int) -> list[tuple[str, str, str]]:
    """Watch until ``expected`` events arrived (or 10 s passed); (type, kind, name) of each."""
    seen: list[Event] = []
    deadline = time.monotonic() + 10
    await asyncio.to_thread(
        cluster.watch, seen.append, kinds, lambda: len(seen) >= expected or time.monotonic() > deadline
    )
    return [(e.type, e.kind, e.object["metadata"]["name"]) for e in seen]


def quiet_watches(kmock, path: str) -> None:
    """Any further watch of ``path`` gets a short empty stream, as an idle API server would."""
    kmock["get " + path, kmock.params(watch=True)] << (b"", lambda: asyncio.sleep(0.1))


# -- reads


async def test_pods_come_as_manifests_and_finished_pods_are_left_out(kmock, cluster):
    kmock["get /api/v1/pods"] << listing(
        "PodList",
        "100",
        pod("web-1", unschedulable=True),
        pod("web-2", node="ip-10-0-1-1", phase="Running"),
        pod("job-1", node="ip-10-0-1-1", phase="Succeeded"),
        pod("job-2", phase="Failed"),
    )
    pods = await asyncio.to_thread(cluster.pods)
    assert [p["metadata"]["name"] for p in pods] == ["web-1", "web-2"]
    # As the API server sends them (camelCase, no model classes), with apiVersion and kind.
    assert pods[0]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    assert (pods[0]["apiVersion"], pods[0]["kind"]) == ("v1", "Pod")
    assert [p["metadata"]["name"] for p in pods if is_pending(p)] == ["web-1"]


async def test_lists_follow_continue_tokens(kmock, cluster):
    kmock["get /api/v1/nodes", kmock.params({"continue": "page-2"})] << listing("NodeList", "7", node("b", "6"))
    kmock["get /api/v1/nodes"] << listing("NodeList", "7", node("a", "5"), more="page-2")
    nodes = await asyncio.to_thread(cluster.nodes)
    assert [n["metadata"]["name"] for n in nodes] == ["a", "b"]
    assert [r.params.get("continue") for r in requests(kmock, "get " + NODES)] == [None, "page-2"]
    assert {r.params["limit"] for r in requests(kmock, "get " + NODES)} == {"500"}


async def test_daemonsets_and_pod_disruption_budgets(kmock, cluster):
    pdb = {"metadata": {"name": "web", "namespace": "default"}, "status": {"disruptionsAllowed": 1}}
    kmock["get /apis/policy/v1/poddisruptionbudgets"] << listing("PodDisruptionBudgetList", "3", pdb)
    kmock["get /apis/apps/v1/daemonsets"] << listing("DaemonSetList", "3", {"metadata": {"name": "fluentbit"}})
    pdbs = await asyncio.to_thread(cluster.pdbs)
    assert pdbs[0]["status"]["disruptionsAllowed"] == 1
    assert (pdbs[0]["apiVersion"], pdbs[0]["kind"]) == ("policy/v1", "PodDisruptionBudget")
    daemonsets = await asyncio.to_thread(cluster.daemonsets)
    assert daemonsets[0]["metadata"]["name"] == "fluentbit"


# -- NodeClaims


async def test_create_nodeclaim_posts_the_manifest_and_an_existing_claim_is_fine(kmock, cluster):
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "general-x7k2p", "labels": {"karpenter.sh/nodepool": "general"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
    }
    await asyncio.to_thread(cluster.create_nodeclaim, claim)
    await asyncio.to_thread(cluster.create_nodeclaim, claim)  # a retried task: the emulator answers 409
    posts = requests(kmock, "post /apis/karpenter.sh/v1/nodeclaims")
    assert len(posts) == 2
    assert posts[0].data == claim


async def test_deletes_of_objects_already_gone_are_fine(kmock, cluster):
    await asyncio.to_thread(cluster.delete_nodeclaim, "general-gone")
    await asyncio.to_thread(cluster.delete_node, "ip-10-0-9-9")
    assert len(requests(kmock, "delete /apis/karpenter.sh/v1/nodeclaims/general-gone")) == 1
    assert len(requests(kmock, "delete /api/v1/nodes/ip-10-0-9-9")) == 1


async def test_delete_node_deletes_it(kmock, cluster):
    kmock.objects[kmock.resource("v1/nodes"), None, "ip-10-0-1-1"] = node("ip-10-0-1-1", "5")
    await asyncio.to_thread(cluster.delete_node, "ip-10-0-1-1")
    assert kmock.objects[kmock.resource("v1/nodes"), None, "ip-10-0-1-1"].deleted


# -- nodes


async def test_cordon_patches_spec_unschedulable(kmock, cluster):
    kmock.objects[kmock.resource("v1/nodes"), None, "ip-10-0-1-1"] = node("ip-10-0-1-1", "5")
    await asyncio.to_thread(cluster.cordon, "ip-10-0-1-1")
    (patch,) = requests(kmock, "patch /api/v1/nodes/ip-10-0-1-1")
    assert patch.data == {"spec": {"unschedulable": True}}
    assert patch.headers["Content-Type"] == "application/strategic-merge-patch+json"


async def test_taint_sends_the_full_list_with_a_version_precondition(kmock, cluster):
    existing = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    kmock.objects[kmock.resource("v1/nodes"), None, "ip-10-0-1-1"] = node("ip-10-0-1-1", "5", taints=[existing])
    await asyncio.to_thread(cluster.taint, "ip-10-0-1-1", DISRUPTED_TAINT)
    (patch,) = requests(kmock, "patch /api/v1/nodes/ip-10-0-1-1")
    assert patch.data == {"metadata": {"resourceVersion": "5"}, "spec": {"taints": [existing, DISRUPTED_TAINT]}}


async def test_taint_is_not_sent_twice(kmock, cluster):
    present = {**DISRUPTED_TAINT, "timeAdded": "2026-01-01T00:00:00Z"}
    kmock.objects[kmock.resource("v1/nodes"), None, "ip-10-0-1-1"] = node("ip-10-0-1-1", "5", taints=[present])
    await asyncio.to_thread(cluster.taint, "ip-10-0-1-1", DISRUPTED_TAINT)
    assert not requests(kmock, "patch /api/v1/nodes/ip-10-0-1-1")


async def test_taint_reads_again_after_a_conflict(kmock, cluster):
    path = "/api/v1/nodes/ip-10-0-1-1"
    kubelet_taint = {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}
    kmock.objects[kmock.resource("v1/nodes"), None, "ip-10-0-1-1"] = node("ip-10-0-1-1", "5")
    reads = iter([node("ip-10-0-1-1", "5"), node("ip-10-0-1-1", "6", taints=[kubelet_taint])])
    kmock["get " + path] << (lambda: next(reads))
    kmock["patch " + path][:1] << 409 << status(409, "Conflict", "the object has been modified")
    kmock["patch " + path] << node("ip-10-0-1-1", "7")
    await asyncio.to_thread(cluster.taint, "ip-10-0-1-1", DISRUPTED_TAINT)
    first, second = (r.data for r in requests(kmock, "patch " + path))
    assert first == {"metadata": {"resourceVersion": "5"}, "spec": {"taints": [DISRUPTED_TAINT]}}
    # The kubelet's taint, added meanwhile, is kept.
    assert second == {"metadata": {"resourceVersion": "6"}, "spec": {"taints": [kubelet_taint, DISRUPTED_TAINT]}}


EVICTION = "/api/v1/namespaces/default/pods/web-1/eviction"


@pytest.mark.parametrize(
    "code, answer, evicted",
    [
        (201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, Eviction.EVICTED),
        (
            429,
            status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."),
            Eviction.REFUSED,
        ),
        (404, status(404, "NotFound", 'pods "web-1" not found'), Eviction.GONE),
    ],
    ids=["evicted", "a-pdb-refuses", "already-gone"],
)
async def test_evict_posts_an_eviction(kmock, cluster, code, answer, evicted):
    kmock["post " + EVICTION] << code << answer
    assert await asyncio.to_thread(cluster.evict, "default", "web-1") is evicted
    (post,) = requests(kmock, "post " + EVICTION)
    assert post.data == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web-1", "namespace": "default"},
    }


async def test_evict_reports_server_errors_as_retryable(kmock, cluster):
    kmock["post " + EVICTION] << 500 << status(500, "InternalError", "etcdserver: request timed out")
    with pytest.raises(ClusterError) as excinfo:
        await asyncio.to_thread(cluster.evict, "default", "web-1")
    assert str(excinfo.value) == "evict Pod default/web-1 failed: etcdserver: request timed out (HTTP 500)"
    assert excinfo.value.retryable


async def test_evict_reads_the_500_for_a_pod_of_two_budgets_as_a_refusal(kmock, cluster):
    message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    kmock["post " + EVICTION] << 500 << status(500, "InternalError", message)
    answer = await asyncio.to_thread(cluster.evict, "default", "web-1")
    assert answer is Eviction.REFUSED_MANY_BUDGETS and not answer


async def test_errors_name_the_verb_the_object_and_the_api_message(kmock, cluster):
    kmock.objects[kmock.resource("v1/nodes"), None, "ip-10-0-1-1"] = node("ip-10-0-1-1", "5")
    (
        kmock["patch /api/v1/nodes/ip-10-0-1-1"]
        << 403
        << status(403, "Forbidden", 'nodes "ip-10-0-1-1" is forbidden: User "karpweb" cannot patch resource "nodes"')
    )
    with pytest.raises(ClusterError) as excinfo:
        await asyncio.to_thread(cluster.cordon, "ip-10-0-1-1")
    assert str(excinfo.value).startswith('cordon Node ip-10-0-1-1 failed: nodes "ip-10-0-1-1" is forbidden')
    assert str(excinfo.value).endswith("(HTTP 403)")
    assert not excinfo.value.retryable


async def test_an_unreachable_api_server_is_a_retryable_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.retries = 0
    cluster = KubernetesCluster(client.ApiClient(configuration), request_timeout=2)
    with pytest.raises(ClusterError, match="list nodes failed: the API server did not answer") as excinfo:
        await asyncio.to_thread(cluster.nodes)
    assert excinfo.value.retryable


# -- watching


async def test_watch_lists_then_delivers_changes(kmock, cluster):
    kmock["get " + NODES, kmock.params(watch=True, resourceVersion="10")] << (
        event("MODIFIED", node("a", "11", unschedulable=True)),
        event("ADDED", node("b", "12")),
        event("DELETED", node("a", "13")),
    )
    kmock["get " + NODES] << listing("NodeList", "10", node("a", "9"))
    assert await watched(cluster, ["Node"], 4) == [
        ("ADDED", "Node", "a"),
        ("MODIFIED", "Node", "a"),
        ("ADDED", "Node", "b"),
        ("DELETED", "Node", "a"),
    ]
    watch = requests(kmock, "get " + NODES)[1]
    assert watch.params["allowWatchBookmarks"] == "True" and watch.params["timeoutSeconds"] == "2"


@pytest.mark.parametrize("expiry", ["error-event", "http-410"])
async def test_watch_lists_again_when_its_version_is_gone(kmock, cluster, expiry):
    watch_from_10 = kmock["get " + NODES, kmock.params(watch=True, resourceVersion="10")]
    if expiry == "error-event":
        watch_from_10 << (event("MODIFIED", node("a", "11")), event("ERROR", gone("10")))
    else:
        watch_from_10 << 410 << gone("10")
    kmock["get " + NODES, kmock.params(watch=True, resourceVersion="20")] << (event("DELETED", node("b", "21")),)
    lists = iter([listing("NodeList", "10", node("a", "9")), listing("NodeList", "20", node("b", "15"))])
    kmock["get " + NODES] << (lambda: next(lists))
    seen = await watched(cluster, ["Node"], 5 if expiry == "error-event" else 4)
    assert seen == [
        ("ADDED", "Node", "a"),
        *([("MODIFIED", "Node", "a")] if expiry == "error-event" else []),
        # "a" went away while the watch was down: the relist says so.
        ("DELETED", "Node", "a"),
        ("ADDED", "Node", "b"),
        ("DELETED", "Node", "b"),
    ]
    versions = [r.params.get("resourceVersion") for r in requests(kmock, "get " + NODES)]
    assert versions == [None, "10", None, "20"]


async def test_bookmarks_only_advance_the_version(kmock, cluster):
    bookmark = {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": "15"}}
    kmock["get " + NODES, kmock.params(watch=True, resourceVersion="10")] << (event("BOOKMARK", bookmark),)
    kmock["get " + NODES, kmock.params(watch=True, resourceVersion="15")] << (event("MODIFIED", node("a", "16")),)
    kmock["get " + NODES] << listing("NodeList", "10", node("a", "9"))
    assert await watched(cluster, ["Node"], 2) == [("ADDED", "Node", "a"), ("MODIFIED", "Node", "a")]
    assert [r.params.get("resourceVersion") for r in requests(kmock, "get " + NODES)] == [None, "10", "15"]


async def test_watch_follows_several_kinds_at_once(kmock, cluster):
    kmock["get " + NODES, kmock.params(watch=True, resourceVersion="10")] << (event("ADDED", node("b", "11")),)
    kmock["get " + NODEPOOLS, kmock.params(watch=True, resourceVersion="30")] << (
        event("MODIFIED", {**nodepool("31"), "spec": {"weight": 5}}),
    )
    quiet_watches(kmock, NODES)
    quiet_watches(kmock, NODEPOOLS)
    kmock["get " + NODES] << listing("NodeList", "10", node("a", "9"))
    kmock["get " + NODEPOOLS] << listing("NodePoolList", "30", nodepool("29"))
    seen = await watched(cluster, ["Node", "NodePool"], 4)
    assert sorted(seen) == [
        ("ADDED", "Node", "a"),
        ("ADDED", "Node", "b"),
        ("ADDED", "NodePool", "general"),
        ("MODIFIED", "NodePool", "general"),
    ]


async def test_watch_raises_what_retrying_cannot_mend(kmock, cluster):
    quiet_watches(kmock, NODEPOOLS)
    kmock["get " + NODEPOOLS] << listing("NodePoolList", "30")  # this kind is fine; the other one stops both
    kmock["get " + NODES] << 403 << status(403, "Forbidden", 'nodes is forbidden: User "karpweb" cannot list "nodes"')
    with pytest.raises(ClusterError, match=r"list nodes failed: nodes is forbidden.*\(HTTP 403\)"):
        await watched(cluster, ["Node", "NodePool"], 1)


async def test_watch_retries_server_errors(kmock, cluster):
    kmock["get " + NODES, kmock.params(watch=True, resourceVersion="10")] << (event("ADDED", node("b", "11")),)
    kmock["get " + NODES][:1] << 503 << status(503, "ServiceUnavailable", "the server is shutting down")
    kmock["get " + NODES] << listing("NodeList", "10", node("a", "9"))
    assert await watched(cluster, ["Node"], 2) == [("ADDED", "Node", "a"), ("ADDED", "Node", "b")]


# -- NodePools and EC2NodeClasses


async def test_list_custom_returns_items_and_the_version(kmock, cluster):
    listed = nodepool("29")
    del listed["apiVersion"], listed["kind"]
    kmock["get " + NODEPOOLS] << listing("NodePoolList", "30", listed)
    items, version = await asyncio.to_thread(cluster.list_custom, "NodePool")
    assert version == "30"
    assert items == [nodepool("29")]


async def test_apply_custom_creates_without_server_fields(kmock, cluster):
    stored = await asyncio.to_thread(cluster.apply_custom, nodepool())
    (post,) = requests(kmock, "post " + NODEPOOLS)
    assert post.data == {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": nodepool()["spec"],
    }
    assert stored["metadata"]["name"] == "general"


async def test_apply_custom_replaces_with_the_version_it_was_based_on(kmock, cluster):
    kmock["put " + NODEPOOLS + "/general"] << nodepool("31")
    stored = await asyncio.to_thread(cluster.apply_custom, nodepool("30"))
    (put,) = requests(kmock, "put " + NODEPOOLS + "/general")
    assert put.data["metadata"] == {"name": "general", "resourceVersion": "30"}
    assert "status" not in put.data
    assert stored["metadata"]["resourceVersion"] == "31"


async def test_apply_custom_conflict_carries_the_current_object(kmock, cluster):
    theirs = {**nodepool("35"), "spec": {"weight": 9}}
    kmock["put " + NODEPOOLS + "/general"] << 409 << status(409, "Conflict", "the object has been modified")
    kmock["get " + NODEPOOLS + "/general"] << theirs
    with pytest.raises(Conflict) as excinfo:
        await asyncio.to_thread(cluster.apply_custom, nodepool("30"))
    assert excinfo.value.current == theirs
    assert str(excinfo.value) == (
        "NodePool general changed in the cluster after resourceVersion 30: the object has been modified"
    )
    assert not excinfo.value.retryable


async def test_apply_custom_does_not_overwrite_an_object_created_meanwhile(kmock, cluster):
    kmock.objects[kmock.resource("karpenter.sh/v1/nodepools"), None, "general"] = nodepool("12")
    with pytest.raises(Conflict, match="NodePool general already exists in the cluster") as excinfo:
        await asyncio.to_thread(cluster.apply_custom, nodepool())
    assert excinfo.value.current["metadata"]["resourceVersion"] == "12"


async def test_apply_custom_to_an_object_deleted_meanwhile_is_a_conflict(kmock, cluster):
    kmock["put " + NODEPOOLS + "/general"] << 404 << status(404, "NotFound", 'nodepools "general" not found')
    with pytest.raises(Conflict, match="NodePool general was deleted from the cluster") as excinfo:
        await asyncio.to_thread(cluster.apply_custom, nodepool("30"))
    assert excinfo.value.current is None


async def test_delete_custom_sends_the_version_as_a_precondition(kmock, cluster):
    path = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default"
    kmock.objects[kmock.resource("karpenter.k8s.aws/v1/ec2nodeclasses"), None, "default"] = {"spec": {}}
    kmock["delete " + path] << 409 << status(409, "Conflict", "Precondition failed: ResourceVersion in precondition")
    kmock["get " + path] << {"metadata": {"name": "default", "resourceVersion": "8"}}
    with pytest.raises(Conflict) as excinfo:
        await asyncio.to_thread(cluster.delete_custom, "EC2NodeClass", "default", "7")
    assert requests(kmock, "delete " + path)[0].data["preconditions"] == {"resourceVersion": "7"}
    assert excinfo.value.current["kind"] == "EC2NodeClass"


async def test_unknown_kinds_are_refused(cluster):
    with pytest.raises(ClusterError, match="kind 'Deployment' is not one of NodePool, EC2NodeClass"):
        cluster.list_custom("Deployment")


# -- configuration


async def test_from_environment_reads_a_kubeconfig(kmock, tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": str(kmock.url).rstrip("/")}}],
                "users": [{"name": "test", "user": {"token": "s3cret"}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                "current-context": "test",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    kmock["get " + NODES] << listing("NodeList", "1", node("a", "1"))
    cluster = KubernetesCluster.from_environment()
    assert [n["metadata"]["name"] for n in await asyncio.to_thread(cluster.nodes)] == ["a"]
    assert requests(kmock, "get " + NODES)[0].headers["Authorization"] == "Bearer s3cret"


async def test_from_environment_explains_a_missing_configuration(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterError, match=f"cannot configure the Kubernetes client from kubeconfig {tmp_path}/none"):
        KubernetesCluster.from_environment(str(tmp_path / "none"))


async def test_in_a_pod_the_service_account_is_used(monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    # No service account is mounted on a test machine, which is what the error says.
    with pytest.raises(ClusterError, match="from the in-cluster service account") as excinfo:
        KubernetesCluster.from_environment()
    assert not excinfo.value.retryable


# -- events


def pending_pod_event(message: str = "Pod should schedule on: nodeclaim/general-x7k2p") -> ObjectEvent:
    ref = ObjectReference("Pod", "web-1", namespace="shop", uid="1f0c6a1e-0000-4000-8000-000000000001")
    return ObjectEvent(ref, "Normal", "Nominated", message)


async def test_an_event_is_created_about_its_object(kmock, cluster):
    cluster.record_event(pending_pod_event())
    cluster.record_event(ObjectEvent(ObjectReference("Node", "ip-10-0-1-1"), "Normal", "DisruptionBlocked", "why"))
    assert await asyncio.to_thread(cluster.events.flush, 5)
    (pod_event,) = requests(kmock, "post /api/v1/namespaces/shop/events")
    assert pod_event.data["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web-1",
        "namespace": "shop",
        "uid": "1f0c6a1e-0000-4000-8000-000000000001",
    }
    assert (pod_event.data["type"], pod_event.data["reason"], pod_event.data["message"]) == (
        "Normal",
        "Nominated",
        "Pod should schedule on: nodeclaim/general-x7k2p",
    )
    assert pod_event.data["metadata"]["name"].startswith("web-1.")
    assert pod_event.data["source"] == {"component": "karpweb"} and pod_event.data["count"] == 1
    # A cluster-scoped object's events go to the default namespace, as client-go puts them.
    (node_event,) = requests(kmock, "post /api/v1/namespaces/default/events")
    assert node_event.data["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "ip-10-0-1-1"}


async def test_identical_events_are_sent_once_per_dedupe_period(kmock, cluster):
    now = [1000.0]
    cluster.events = EventOutbox(dedupe_seconds=120, clock=lambda: now[0])
    for _ in range(3):
        cluster.record_event(pending_pod_event())
    cluster.record_event(pending_pod_event("Pod should schedule on: nodeclaim/general-other"))  # not identical
    now[0] += 121
    cluster.record_event(pending_pod_event())
    assert await asyncio.to_thread(cluster.events.flush, 5)
    messages = [r.data["message"] for r in requests(kmock, "post /api/v1/namespaces/shop/events")]
    assert messages == [
        "Pod should schedule on: nodeclaim/general-x7k2p",
        "Pod should schedule on: nodeclaim/general-other",
        "Pod should schedule on: nodeclaim/general-x7k2p",
    ]


async def test_a_failing_event_is_logged_and_never_raised(kmock, cluster, caplog):
    kmock["post /api/v1/namespaces/shop/events"] << 403 << status(403, "Forbidden", "events is forbidden")
    cluster.record_event(pending_pod_event())  # returns at once, whatever the server answers
    assert await asyncio.to_thread(cluster.events.flush, 5)
    assert "event not recorded: create Event Nominated for Pod web-1 failed: events is forbidden" in caplog.text


# -- leader election

LEASES = "/apis/coordination.k8s.io/v1/namespaces/karpweb/leases"
LEASE_PATH = LEASES + "/karpweb-cluster-watch"


@pytest.fixture
def lease_server(kmock) -> dict[str, Any]:
    """The Lease as an API server keeps it: a new resourceVersion on every write, and 409 for a
    create of an existing one or an update from a stale version. Returns the stored state."""
    stored: dict[str, Any] = {}

    def read() -> Any:
        if not stored:
            return kmock_response(status=404, payload=status(404, "NotFound", "not found"))
        return kmock_response(status=200, payload=dict(stored))

    def write(request) -> Any:
        based_on = request.data["metadata"].get("resourceVersion")
        current = stored.get("metadata", {}).get("resourceVersion")
        if based_on != current:  # a create (no version) of an existing Lease, or a stale update
            return kmock_response(status=409, payload=status(409, "Conflict", "the object has been modified"))
        version = str(int(current or 0) + 1)
        stored.clear()
        stored.update(request.data, metadata={**request.data["metadata"], "resourceVersion": version})
        return kmock_response(status=200, payload=dict(stored))

    kmock["get " + LEASE_PATH] << read
    kmock["post " + LEASES] << write
    kmock["put " + LEASE_PATH] << write
    return stored


def candidate(cluster: KubernetesCluster, identity: str, now: list[float]) -> LeaderElection:
    return LeaderElection(cluster, "karpweb", identity, duration=15, clock=lambda: now[0])


async def test_of_two_candidates_only_one_leads_until_its_lease_expires(kmock, cluster, lease_server):
    now = [0.0]
    a, b = candidate(cluster, "watch-a", now), candidate(cluster, "watch-b", now)
    assert await asyncio.to_thread(a.try_acquire_or_renew)
    assert not await asyncio.to_thread(b.try_acquire_or_renew)
    (created,) = requests(kmock, "post " + LEASES)
    assert created.data["metadata"] == {"name": "karpweb-cluster-watch", "namespace": "karpweb"}
    assert created.data["spec"]["holderIdentity"] == "watch-a"
    assert created.data["spec"]["leaseDurationSeconds"] == 15
    now[0] = 10.0
    assert await asyncio.to_thread(a.try_acquire_or_renew)  # renewed: b's clock starts again
    now[0] = 20.0
    assert not await asyncio.to_thread(b.try_acquire_or_renew)
    # a stops renewing; 15 s after b last saw the lease change, b takes over.
    now[0] = 34.0
    assert not await asyncio.to_thread(b.try_acquire_or_renew)
    now[0] = 36.0
    assert await asyncio.to_thread(b.try_acquire_or_renew)
    assert lease_server["spec"]["holderIdentity"] == "watch-b" and lease_server["spec"]["leaseTransitions"] == 1
    # Every update carried the version it was based on: a's renewal (1), then b's take-over (2).
    assert [r.data["metadata"]["resourceVersion"] for r in requests(kmock, "put " + LEASE_PATH)] == ["1", "2"]
    assert not await asyncio.to_thread(a.try_acquire_or_renew)


async def test_of_two_candidates_reading_the_same_version_only_one_wins(kmock, cluster, lease_server):
    now = [0.0]
    a, b = candidate(cluster, "watch-a", now), candidate(cluster, "watch-b", now)
    assert await asyncio.to_thread(a.try_acquire_or_renew)
    await asyncio.to_thread(a.release)  # a free Lease: both may try for it
    free = await asyncio.to_thread(cluster.read_lease, "karpweb", "karpweb-cluster-watch")
    assert free["spec"]["holderIdentity"] is None
    await asyncio.to_thread(cluster.write_lease, {**free, "spec": {**free["spec"], "holderIdentity": "watch-c"}})
    with pytest.raises(Conflict):  # b's update from the version it read comes second
        await asyncio.to_thread(cluster.write_lease, {**free, "spec": {**free["spec"], "holderIdentity": "watch-b"}})
    assert lease_server["spec"]["holderIdentity"] == "watch-c"
    assert not await asyncio.to_thread(b.try_acquire_or_renew)


async def test_release_lets_the_next_candidate_lead_at_once(kmock, cluster, lease_server):
    now = [0.0]
    a, b = candidate(cluster, "watch-a", now), candidate(cluster, "watch-b", now)
    assert await asyncio.to_thread(a.try_acquire_or_renew)
    assert not await asyncio.to_thread(b.try_acquire_or_renew)
    await asyncio.to_thread(a.release)
    assert await asyncio.to_thread(b.try_acquire_or_renew)
