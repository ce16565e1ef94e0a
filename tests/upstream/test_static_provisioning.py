"""Upstream's static provisioning tests (``pkg/controllers/static/provisioning/suite_test.go``),
on the real service (``services.static.reconcile``) over the simulated cluster's rows
(``disruption_env.py``).

Upstream's ``test.StaticNodePool`` is ``node_pool`` with ``spec.replicas``; its
``NodeClaimAndNode`` is ``env.node(nodepool=...)`` (a launched, registered and initialized
claim with its Node). Upstream's ``ExpectStateNodePoolCount(pool, running, deleting,
pendingDisruption)`` is ``services.static.count``: karpweb reads the database, the truth,
every time, so there is no informer cache to wait for or to reserve limits in; one reconcile
runs at a time (the Celery task's Redis lock, and a lock on the NodePool's row around the
count and the create).
"""

from __future__ import annotations

from typing import Any

import pytest
from disruption_env import DisruptionEnv, node_pool

from provisioning.models import NodeClaim
from provisioning.scheduling.static import PoolCount
from provisioning.services import static

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/static/provisioning/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

_PREDICATE = (
    "karpweb has no watch predicates: Celery beat reconciles every static NodePool every 10 s, whatever "
    "changed; upstream's HasNodePoolReplicaOrStatusChanged decides which NodePool events start a reconcile"
)
NOT_PORTED: dict[str, str] = {
    "Static Provisioning Controller / Reconcile / should return early if nodepool is not managed by cloud provider": (
        "karpweb has one cloud provider, and THE validator admits only a karpenter.k8s.aws EC2NodeClass as "
        "nodeClassRef, so no NodePool is unmanaged"
    ),
    "Static Provisioning Controller / Reconcile / should return early if nodepool is being deleted": (
        "a NodePool deleted here is gone at once (no finalizer keeps it in a deleting state), so there is no "
        "NodePool being deleted to reconcile"
    ),
    **{
        f"Static Provisioning Controller / Helper Functions / should detect replica or status changes / {entry}": (
            _PREDICATE
        )
        for entry in (
            "replica changed",
            "replica same, false → true",
            "replica same, true → false",
            "replica same, both true",
            "replica same, both false",
        )
    },
}

POOL = "static"


@pytest.fixture
def env(disruption_env: DisruptionEnv) -> DisruptionEnv:
    return disruption_env


def static_pool(replicas: int | None, **options: Any) -> dict[str, Any]:
    """``test.StaticNodePool()`` with ``spec.replicas`` (None: a dynamic NodePool)."""
    pool = node_pool(POOL, **options)
    if replicas is not None:
        pool["spec"]["replicas"] = replicas
    return pool


def reconcile(env: DisruptionEnv) -> list[static.Outcome]:
    return static.reconcile(env.now)


def claims() -> list[NodeClaim]:
    return list(NodeClaim.objects.filter(nodepool_name=POOL, state__in=NodeClaim.ACTIVE_STATES))


def expect_pool_count(running: int, deleting: int = 0, pending_disruption: int = 0) -> None:
    assert static.count(POOL) == PoolCount(running, deleting, pending_disruption)


def test_should_handle_createnodeclaims_errors_gracefully(env, monkeypatch):
    """Static Provisioning Controller / Reconcile / should handle CreateNodeClaims errors gracefully

    A failing create raises out of the reconcile (the Celery task fails and beat runs it again)
    and leaves no claim behind."""
    from provisioning.services import provision

    env.apply(static_pool(1))

    def failing(*args, **kwargs):
        raise RuntimeError("creating nodeclaims: the API refused")

    monkeypatch.setattr(provision, "create_claims", failing)
    with pytest.raises(RuntimeError, match="creating nodeclaims"):
        reconcile(env)
    assert NodeClaim.objects.count() == 0


def test_should_return_early_if_nodepool_root_condition_is_not_true(env):
    """Static Provisioning Controller / Reconcile / should return early if nodepool root condition is not true"""
    pool = static_pool(1)
    pool["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason": "ValidationFailed"}]}
    env.apply(pool)
    [outcome] = reconcile(env)
    assert outcome.created == [] and "not Ready" in outcome.note
    assert NodeClaim.objects.count() == 0


def test_should_return_early_if_nodepool_replicas_is_nil(env):
    """Static Provisioning Controller / Reconcile / should return early if nodepool replicas is nil"""
    env.apply(static_pool(None))
    assert reconcile(env) == []
    assert NodeClaim.objects.count() == 0


def test_should_return_early_if_current_node_count_exceeds_desired_replicas(env):
    """Static Provisioning Controller / Reconcile / should return early if current node count exceeds desired replicas

    Two initialized nodes, replicas 1: nothing is created (scale-down, the deprovisioning
    suite's, removes one)."""
    env.apply(static_pool(1))
    env.node(nodepool=POOL)
    env.node(nodepool=POOL)
    expect_pool_count(2)
    [outcome] = reconcile(env)
    assert outcome.created == []
    assert NodeClaim.objects.count() == 2


def test_should_create_nodeclaims_when_current_node_count_is_less_than_desired_replicas(env):
    """Static Provisioning Controller / Reconcile / should create nodeclaims when current node count is less than desired replicas"""
    env.apply(static_pool(2))
    [outcome] = reconcile(env)
    assert len(outcome.created) == 2
    assert len(claims()) == 2
    expect_pool_count(2)
    for claim in claims():
        assert claim.spec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        assert claim.spec["labels"]["karpenter.sh/nodepool"] == POOL
        assert claim.nodepool_name == POOL and claim.pods == []


def test_should_create_additional_nodeclaims_to_reach_desired_replicas(env):
    """Static Provisioning Controller / Reconcile / should create additional nodeclaims to reach desired replicas"""
    env.apply(static_pool(3))
    env.node(nodepool=POOL)
    expect_pool_count(1)
    [outcome] = reconcile(env)
    assert len(outcome.created) == 2
    expect_pool_count(3)
    assert NodeClaim.objects.count() == 3


def test_should_not_create_additional_nodeclaims(env):
    """Static Provisioning Controller / Reconcile / should not create additional nodeclaims

    Three claims: one launched without a node, one whose node is registered but not
    initialized, one initialized; ten reconciles create nothing."""
    env.apply(static_pool(3))
    env.node(nodepool=POOL)
    env.node(nodepool=POOL, initialized=False)
    launched = NodeClaim.objects.create(
        name="static-launched",
        nodepool_name=POOL,
        nodeclass_name="default",
        state=NodeClaim.State.LAUNCHED,
        instance_id="i-0000000000launched",
        launch_options=[{"instanceType": "m5.xlarge", "zone": "us-east-1a", "capacityType": "on-demand", "price": 0.2}],
    )
    assert launched.node_name == ""
    for _ in range(10):
        reconcile(env)
    assert NodeClaim.objects.count() == 3
    expect_pool_count(3)


def test_should_not_create_additional_nodeclaims_when_node_limits_are_reached(env):
    """Static Provisioning Controller / Reconcile / should not create additional nodeclaims when node limits are reached"""
    env.apply(static_pool(3, limits={"nodes": "1"}))
    env.node(nodepool=POOL)
    [outcome] = reconcile(env)
    assert outcome.created == [] and outcome.note == "limits.nodes 1 reached"
    assert NodeClaim.objects.count() == 1
    expect_pool_count(1)


def test_should_reserve_nodepool_nodecount_during_provisioning_and_release_after(env):
    """Static Provisioning Controller / Reconcile / should reserve nodepool nodecount during provisioning and release after

    Replicas 3 within limits.nodes 10 makes 3; raised to 15, the pool stops at the limit, 10,
    once its claims have launched too."""
    env.apply(static_pool(3, limits={"nodes": "10"}))
    reconcile(env)
    expect_pool_count(3)
    env.apply(static_pool(15, limits={"nodes": "10"}))
    env.launch_and_register()
    reconcile(env)
    assert len(claims()) == 10
    reconcile(env)
    assert len(claims()) == 10
    expect_pool_count(10)


def test_should_handle_zero_replicas(env):
    """Static Provisioning Controller / Reconcile / should handle zero replicas"""
    env.apply(static_pool(0))
    [outcome] = reconcile(env)
    assert outcome.created == []
    assert NodeClaim.objects.count() == 0
    expect_pool_count(0)


def test_should_respect_nodepool_template_specifications(env):
    """Static Provisioning Controller / Reconcile / should respect nodepool template specifications

    Upstream's requirements in karpweb's catalog (us-east-1; its c4/r4 families with 32 vCPU
    and minValues have no counterpart here): category c or r, 32 vCPU, nitro, generation
    > 2, two zones, either arch, every capacity type. Each claim carries them, the template's
    label and annotation, and launches the cheapest type they allow first."""
    requirements = [
        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "r"]},
        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["32"]},
        {"key": "karpenter.k8s.aws/instance-hypervisor", "operator": "In", "values": ["nitro"]},
        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "reserved", "spot"]},
    ]
    env.apply(
        static_pool(
            4,
            requirements=requirements,
            labels={"custom-label": "custom-value"},
            annotations={"custom-annotation": "custom-value"},
        )
    )
    reconcile(env)
    made = claims()
    assert len(made) == 4
    expect_pool_count(4)
    claim = made[0]
    assert claim.spec["labels"]["custom-label"] == "custom-value"
    assert claim.spec["annotations"]["custom-annotation"] == "custom-value"
    keys = {r["key"] for r in claim.spec["requirements"]}
    assert {r["key"] for r in requirements} <= keys
    options = claim.launch_options
    assert [o["price"] for o in options] == sorted(o["price"] for o in options)
    for option in options:
        it = env.catalog.instance_type(option["instanceType"])
        assert it.labels["karpenter.k8s.aws/instance-category"] in ("c", "r")
        assert it.labels["karpenter.k8s.aws/instance-cpu"] == "32"
        assert option["zone"] in ("us-east-1a", "us-east-1b")


def test_should_handle_large_replica_counts(env):
    """Static Provisioning Controller / Reconcile / should handle large replica counts"""
    env.apply(static_pool(1000))
    reconcile(env)
    assert NodeClaim.objects.filter(nodepool_name=POOL).count() == 1000
    expect_pool_count(1000)


def test_handles_concurrent_reconciliation_without_exceeding_nodepool_limits(env):
    """Static Provisioning Controller / Reconcile / handles concurrent reconciliation without exceeding NodePool limits

    Upstream runs 50 reconciles at once and sees no more claims than limits.nodes (10). Here one
    reconcile runs at a time (the task's lock; the NodePool's row locked around the count and
    the create), so 50 reconciles make exactly the 5 replicas, never more."""
    env.apply(static_pool(5, limits={"nodes": "10"}))
    for _ in range(50):
        reconcile(env)
        assert len(claims()) <= 10
    expect_pool_count(5)


def test_should_wait_for_cluster_to_be_synced_and_not_over_provision(env):
    """Static Provisioning Controller / Reconcile / should wait for cluster to be synced and not over provision

    Upstream's cluster state may lag the API server after a restart; karpweb counts the
    database's rows every time, so there is nothing to wait for: 50 reconciles, with the claims
    launching and registering in between, never go past limits.nodes and settle at replicas."""
    env.apply(static_pool(5, limits={"nodes": "10"}))
    for i in range(50):
        reconcile(env)
        if i % 4 == 0:
            env.launch_and_register()
        assert NodeClaim.objects.filter(nodepool_name=POOL).count() <= 10
    expect_pool_count(5)
