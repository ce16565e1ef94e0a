"""A real cluster mirrored into rows (``services.mirror``): pods the scheduler could not place
become pending and open the batch window; Nodes register their NodeClaims."""

from __future__ import annotations

import pytest

from provisioning.cluster.base import Event
from provisioning.models import ClusterNode, ClusterPod, NodeClaim
from provisioning.services import mirror, provision

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis(clean_redis):
    return clean_redis


def pod(name: str, *, node: str = "", unschedulable: bool = True, owner: str = "ReplicaSet") -> dict:
    status = {"phase": "Pending"}
    if unschedulable and not node:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    if node:
        status = {"phase": "Running"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "ownerReferences": [{"kind": owner, "name": "web"}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]} if node else {"containers": []},
        "status": status,
    }


def node(name: str, instance_id: str, *, ready: bool = True, taints=()) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "general"}},
        "spec": {"providerID": f"aws:///us-east-1a/{instance_id}", "taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_an_unschedulable_pod_is_pending_and_opens_the_window(redis):
    assert mirror.handle(Event("ADDED", "Pod", pod("web-1")))
    row = ClusterPod.objects.get()
    assert row.key == "shop/web-1" and row.node_name == "" and row.owner == "ReplicaSet/web"
    assert provision.window_open(redis)
    assert list(provision.pending_pods()) == [row]


def test_pods_not_yet_judged_by_the_scheduler_and_daemonset_pods_are_not_ours(redis):
    assert not mirror.handle(Event("ADDED", "Pod", pod("fresh", unschedulable=False)))
    assert not mirror.handle(Event("ADDED", "Pod", pod("agent", owner="DaemonSet")))
    assert not ClusterPod.objects.exists() and not provision.window_open(redis)


def test_binding_and_deletion_follow_the_cluster(redis):
    mirror.handle(Event("ADDED", "Pod", pod("web-1")))
    mirror.handle(Event("MODIFIED", "Pod", pod("web-1", node="ip-1")))
    row = ClusterPod.objects.get()
    assert row.node_name == "ip-1" and row.phase == ClusterPod.Phase.RUNNING and row.bound_at is not None
    mirror.handle(Event("DELETED", "Pod", pod("web-1", node="ip-1")))
    assert not ClusterPod.objects.exists()


def test_a_node_registers_its_claim_and_initializes_once_ready_without_startup_taints(redis):
    claim = NodeClaim.objects.create(
        name="general-abc",
        nodepool_name="general",
        nodeclass_name="default",
        spec={"startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}]},
        state=NodeClaim.State.LAUNCHED,
        instance_id="i-0123456789abcdef0",
    )
    startup = [{"key": "example.com/agent", "effect": "NoSchedule"}]
    mirror.handle(Event("ADDED", "Node", node("ip-10-0-0-1", claim.instance_id, taints=startup)))
    claim.refresh_from_db()
    assert claim.state == NodeClaim.State.REGISTERED and claim.node_name == "ip-10-0-0-1"
    assert ClusterNode.objects.get().nodeclaim == "general-abc"
    mirror.handle(Event("MODIFIED", "Node", node("ip-10-0-0-1", claim.instance_id)))
    claim.refresh_from_db()
    assert claim.state == NodeClaim.State.INITIALIZED and claim.initialized_at is not None


def test_a_deleted_node_sends_its_pods_back_to_pending(redis):
    mirror.handle(Event("ADDED", "Node", node("ip-1", "i-1")))
    mirror.handle(Event("ADDED", "Pod", pod("web-1", node="ip-1")))
    mirror.handle(Event("DELETED", "Node", node("ip-1", "i-1")))
    assert not ClusterNode.objects.exists()
    assert ClusterPod.objects.get().node_name == ""
