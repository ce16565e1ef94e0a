"""Upstream's static deprovisioning tests (``pkg/controllers/static/deprovisioning/suite_test.go``),
on the real service (``services.static.reconcile``) over the simulated cluster's rows
(``disruption_env.py``).

Upstream deletes the chosen NodeClaims and its termination controller drains them; here a
claim not launched yet is terminated at once, and a node is drained as every disruption drains
(``disruption.force``: through PodDisruptionBudgets, do-not-disrupt until the
terminationGracePeriod) and terminated once empty, a disruption round later (``env.step``).
Upstream's "remaining NodeClaims" are the pool's claims not terminated; its
``ExpectStateNodePoolCount`` is ``services.static.count`` (a draining claim is deleting).
"""

from __future__ import annotations

from typing import Any

import pytest
from disruption_env import DO_NOT_DISRUPT, DisruptionEnv, node_pool

from provisioning.models import Disruption, NodeClaim
from provisioning.scheduling.static import PoolCount
from provisioning.services import static

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/static/deprovisioning/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {
    "Static Deprovisioning Controller / Reconcile / should return early if nodepool is not managed by cloud provider": (
        "karpweb has one cloud provider, and THE validator admits only a karpenter.k8s.aws EC2NodeClass as "
        "nodeClassRef, so no NodePool is unmanaged"
    ),
    "Static Deprovisioning Controller / Reconcile / should return early if nodepool is being deleted": (
        "a NodePool deleted here is gone at once (no finalizer keeps it in a deleting state), so there is no "
        "NodePool being deleted to reconcile"
    ),
    "Static Deprovisioning Controller / Reconcile / Helper Functions / hasNodePoolReplicaOrStatusChanged / "
    "should detect replica changes": (
        "karpweb has no watch predicates: Celery beat reconciles every static NodePool every 10 s"
    ),
    "Static Deprovisioning Controller / Reconcile / Helper Functions / hasNodePoolReplicaOrStatusChanged / "
    "should return false for identical replicas": (
        "karpweb has no watch predicates: Celery beat reconciles every static NodePool every 10 s"
    ),
}

POOL = "static"


@pytest.fixture
def env(disruption_env: DisruptionEnv) -> DisruptionEnv:
    return disruption_env


def static_pool(replicas: int | None, **options: Any) -> dict[str, Any]:
    pool = node_pool(POOL, **options)
    if replicas is not None:
        pool["spec"]["replicas"] = replicas
    return pool


def reconcile(env: DisruptionEnv) -> list[static.Outcome]:
    return static.reconcile(env.now)


def remaining() -> set[str]:
    """The pool's NodeClaims not terminated (upstream lists the ones not deleted yet)."""
    return set(
        NodeClaim.objects.filter(nodepool_name=POOL)
        .exclude(state=NodeClaim.State.TERMINATED)
        .values_list("name", flat=True)
    )


def finish(env: DisruptionEnv) -> None:
    """The drains run to their end: disruption rounds until none is in progress."""
    env.settle()


def expect_pool_count(running: int, deleting: int = 0, pending_disruption: int = 0) -> None:
    assert static.count(POOL) == PoolCount(running, deleting, pending_disruption)


def nodes(env: DisruptionEnv, count: int) -> list[str]:
    return [env.node(nodepool=POOL) for _ in range(count)]


def claim_of(node: str) -> str:
    return NodeClaim.objects.get(node_name=node).name


def test_should_return_early_if_nodepool_replicas_is_nil(env):
    """Static Deprovisioning Controller / Reconcile / should return early if nodepool replicas is nil"""
    env.apply(static_pool(None))
    nodes(env, 2)
    assert reconcile(env) == []
    assert len(remaining()) == 2
    assert Disruption.objects.count() == 0


def test_should_return_early_if_current_node_count_is_less_than_or_equal_to_desired_replicas(env):
    """Static Deprovisioning Controller / Reconcile / should return early if current node count is less than or equal to desired replicas"""
    env.apply(static_pool(3))
    nodes(env, 3)
    [outcome] = reconcile(env)
    assert outcome.removed == [] and outcome.created == []
    assert len(remaining()) == 3


def test_should_only_consider_running_nodeclaims_and_not_deleting_nodeclaims(env):
    """Static Deprovisioning Controller / Reconcile / should only consider running nodeclaims and not deleting nodeclaims

    Three running claims and two deleting ones, replicas 3: nothing more is removed."""
    env.apply(static_pool(3))
    nodes(env, 3)
    for node in nodes(env, 2):
        NodeClaim.objects.filter(node_name=node).update(state=NodeClaim.State.DELETING)
    expect_pool_count(3, 2)
    [outcome] = reconcile(env)
    assert outcome.removed == []
    expect_pool_count(3, 2)


def test_should_terminate_excess_nodeclaims_when_current_count_exceeds_desired_replicas(env):
    """Static Deprovisioning Controller / Reconcile / should terminate excess nodeclaims when current count exceeds desired replicas"""
    env.apply(static_pool(2))
    nodes(env, 5)
    [outcome] = reconcile(env)
    assert len(outcome.removed) == 3
    expect_pool_count(2, 3)
    finish(env)
    assert len(remaining()) == 2
    expect_pool_count(2)


def test_should_handle_zero_replicas_by_terminating_all_nodeclaims(env):
    """Static Deprovisioning Controller / Reconcile / should handle zero replicas by terminating all nodeclaims"""
    env.apply(static_pool(0))
    nodes(env, 3)
    reconcile(env)
    expect_pool_count(0, 3)
    finish(env)
    assert remaining() == set()


def test_should_handle_no_active_nodeclaims_gracefully(env):
    """Static Deprovisioning Controller / Reconcile / should handle no active nodeclaims gracefully"""
    env.apply(static_pool(0))
    [outcome] = reconcile(env)
    assert outcome.removed == [] and outcome.created == []
    expect_pool_count(0)


def test_should_return_error_when_nodeclaim_deletion_fails(env, monkeypatch):
    """Static Deprovisioning Controller / Reconcile / Failing Scenarios / should return error when nodeclaim deletion fails

    The drain cannot start: the reconcile raises (the Celery task fails, beat runs it again)."""
    from provisioning.services import disruption

    env.apply(static_pool(1))
    nodes(env, 2)

    def failing(*args, **kwargs):
        raise RuntimeError("failed to deprovision nodeclaims")

    monkeypatch.setattr(disruption, "force", failing)
    with pytest.raises(RuntimeError, match="failed to deprovision"):
        reconcile(env)
    assert len(remaining()) == 2


def test_should_prioritize_nodeclaims_that_have_unresolved_providerid(env):
    """Static Deprovisioning Controller / Reconcile / Deprovision Candidate Selection / should prioritize nodeclaims that have unresolved providerID

    Two nodes and a claim not launched yet (no instance), replicas 2: the claim goes, at once."""
    env.apply(static_pool(2))
    kept = {claim_of(n) for n in nodes(env, 2)}
    NodeClaim.objects.create(name="static-unresolved", nodepool_name=POOL, nodeclass_name="default")
    [outcome] = reconcile(env)
    assert outcome.removed == ["static-unresolved"]
    assert remaining() == kept
    assert Disruption.objects.count() == 0


def test_should_prioritize_empty_nodes_with_only_daemonset_pods_for_termination(env):
    """Static Deprovisioning Controller / Reconcile / Deprovision Candidate Selection / should prioritize empty nodes (with only daemonset pods) for termination"""
    env.apply(static_pool(2))
    busy_1, busy_2, daemons_only = nodes(env, 3)
    env.pod(node=busy_1)
    env.pod(node=busy_2)
    env.pod(node=daemons_only, owner="DaemonSet", namespace="kube-system")
    [outcome] = reconcile(env)
    assert outcome.removed == [claim_of(daemons_only)]
    finish(env)
    assert remaining() == {claim_of(busy_1), claim_of(busy_2)}


def test_should_terminate_non_empty_nodes_when_empty_nodes_are_insufficient(env):
    """Static Deprovisioning Controller / Reconcile / Deprovision Candidate Selection / should terminate non-empty nodes when empty nodes are insufficient

    Four nodes, two with a pod, replicas 1: both empty ones and one busy one go."""
    env.apply(static_pool(1))
    first, second, third, fourth = nodes(env, 4)
    env.pod(node=first)
    env.pod(node=third)
    [outcome] = reconcile(env)
    assert len(outcome.removed) == 3
    assert set(outcome.removed[:2]) == {claim_of(second), claim_of(fourth)}
    expect_pool_count(1, 3)
    finish(env)
    assert len(remaining()) == 1


@pytest.fixture
def ordered(env: DisruptionEnv) -> dict[str, list[str]]:
    """The disruption cost ordering's BeforeEach: replicas 8, two nodes each of "low" (one
    kube-system pod), "high" (a kube-system and an app pod), "dnd" (an app pod with
    do-not-disrupt) and "ds" (a DaemonSet pod)."""
    env.apply(static_pool(8))
    kinds: dict[str, list[str]] = {"low": [], "high": [], "dnd": [], "ds": []}
    for i in range(2):
        for kind in kinds:
            node = env.node(nodepool=POOL)
            if kind == "low":
                env.pod(f"system-pod-low-{i}", node=node, namespace="kube-system")
            elif kind == "high":
                env.pod(f"system-pod-high-{i}", node=node, namespace="kube-system")
                env.pod(f"app-pod-high-{i}", node=node)
            elif kind == "dnd":
                env.pod(f"app-pod-dnd-{i}", node=node, annotations={DO_NOT_DISRUPT: "true"})
            else:
                env.pod(f"dmn-pod-{i}", node=node, owner="DaemonSet", namespace="kube-system")
            kinds[kind].append(claim_of(node))
    return kinds


def scale_to(env: DisruptionEnv, replicas: int) -> set[str]:
    env.apply(static_pool(replicas))
    [outcome] = reconcile(env)
    return set(outcome.removed)


def test_to_6_drops_ds_only_first(env, ordered):
    """Static Deprovisioning Controller / Reconcile / Deprovision Candidate Selection / disruption cost ordering / scales down in disruption cost order / to 6 (drops DS-only first)"""
    assert scale_to(env, 6) == set(ordered["ds"])


def test_to_4_drops_low_next(env, ordered):
    """Static Deprovisioning Controller / Reconcile / Deprovision Candidate Selection / disruption cost ordering / scales down in disruption cost order / to 4 (drops low next)"""
    assert scale_to(env, 4) == {*ordered["ds"], *ordered["low"]}


def test_to_2_drops_high_next(env, ordered):
    """Static Deprovisioning Controller / Reconcile / Deprovision Candidate Selection / disruption cost ordering / scales down in disruption cost order / to 2 (drops high next)"""
    assert scale_to(env, 2) == {*ordered["ds"], *ordered["low"], *ordered["high"]}


def test_to_0_drops_do_not_disrupt_last(env, ordered):
    """Static Deprovisioning Controller / Reconcile / Deprovision Candidate Selection / disruption cost ordering / scales down in disruption cost order / to 0 (drops do-not-disrupt last)

    Every node goes; the do-not-disrupt pods hold their nodes' drains (no
    terminationGracePeriod here), so those two are still draining after the others are gone."""
    assert scale_to(env, 0) == {c for claims in ordered.values() for c in claims}
    finish(env)
    assert remaining() == set(ordered["dnd"])
