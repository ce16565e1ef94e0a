"""Upstream's node health suite (``pkg/controllers/node/health/suite_test.go`` of
``kubernetes-sigs/karpenter``), ported.

Upstream reconciles its health controller on one Node (``ExpectObjectReconciled``) and looks at
the NodeClaim. karpweb's node repair is :func:`provisioning.services.repair.repair`, one pass
over every node (every 30 s in the worker), on the disruption suites' environment
(``disruption_env.py``: the simulated cluster's rows, a clock the test moves). So:

* upstream's fake cloud provider's repair policy (``BadNode`` ``False`` for 30 minutes) is the
  setting ``KARPWEB_REPAIR_POLICIES`` (``BadNode=False:30m``), as a provider's policies are;
  a node's condition is set on its Node (:func:`condition`), ``lastTransitionTime`` included;
* the NodeClaim deleted (a DeletionTimestamp, kept by the termination finalizer) is the node
  disrupted at once: a ``Disruption`` of reason ``unhealthy`` in ``draining`` (or ``done``);
  a NodeClaim left alone is a node no disruption takes;
* upstream's ``karpenter.sh/nodeclaim-termination-timestamp`` annotation is the disruption's
  ``terminate_by``: from then nothing waits for a PodDisruptionBudget or do-not-disrupt;
* ``RequeueAfter``: karpweb requeues nothing, it looks at every node each pass; the moment it
  acts on a node is :func:`provisioning.services.repair.due` (the toleration of the condition
  that ends first), and a blocked NodePool's node is looked at again 5 minutes later (a Redis
  key that expires then);
* metrics are read as Prometheus scrapes them; karpweb's ``karpenter_nodeclaims_disrupted_total``
  has no ``consolidation_policy`` or ``termination_mode`` label, the port matches the labels it has.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from disruption_env import DO_NOT_DISRUPT, DisruptionEnv, node_pool
from interruption_env import metric

from provisioning.disruption.model import EXPIRED
from provisioning.models import ClusterNode, Disruption, NodeClaim
from provisioning.services import disruption, repair

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/node/health/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {
    "Node Health / Forceful termination / should ignore unhealthy nodes if more then 20% of the nodes are unhealthy "
    "in a cluster": (
        "the cluster-wide share applies to NodeClaims of no NodePool (standalone NodeClaims); karpweb launches "
        "NodeClaims only for a NodePool (NodeClaim.nodepool_name is required) and node repair looks only at the "
        "nodes of a NodePool, so there is nothing for it to apply to; the NodePool's share is ported "
        "(test_should_ignore_unhealthy_nodes_if_more_then_20_of_the_nodes_are_unhealthy_in_a_nodepool)"
    ),
}

BAD_NODE = "BadNode=False:30m"  # the fake cloud provider's RepairPolicies()


@pytest.fixture
def env(disruption_env: DisruptionEnv, settings) -> DisruptionEnv:
    """Upstream's BeforeEach: NodePool ``default``, the fake provider's repair policy, and
    nothing left of an earlier test's blocked NodePool (Redis)."""
    from provisioning.services.connections import get_redis

    settings.KARPWEB_REPAIR_POLICIES = BAD_NODE
    settings.KARPWEB_REPAIR_MAX_UNHEALTHY = "20%"
    redis = get_redis()
    for key in redis.scan_iter(repair.BLOCKED_KEY + "*"):
        redis.delete(key)
    disruption_env.apply(node_pool())
    return disruption_env


# ------------------------------------------------------------------ helpers


def condition(node: str, type_: str, status: str, since) -> None:
    """A condition on the Node's status, as the kubelet or a node problem detector sets it."""
    row = ClusterNode.objects.get(name=node)
    status_block = row.manifest.setdefault("status", {})
    conditions = [c for c in status_block.get("conditions") or [] if c.get("type") != type_]
    conditions.append({"type": type_, "status": status, "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")})
    status_block["conditions"] = conditions
    row.save(update_fields=["manifest"])


def bad_node(env: DisruptionEnv, node: str, status: str = "False") -> None:
    condition(node, "BadNode", status, env.now)


def disruption_of(node: str) -> Disruption | None:
    rows = [d for d in Disruption.objects.order_by("pk") if node in d.nodes]
    return rows[-1] if rows else None


def expect_deleting(node: str) -> Disruption:
    """``nodeClaim.DeletionTimestamp`` set: the node is disrupted at once, forcefully."""
    found = disruption_of(node)
    assert found is not None, f"{node} was not repaired"
    assert found.reason == repair.UNHEALTHY
    assert found.state in (Disruption.State.DRAINING, Disruption.State.DONE)
    return found


def expect_left_alone(node: str) -> None:
    """``nodeClaim.DeletionTimestamp`` nil."""
    assert disruption_of(node) is None
    assert NodeClaim.objects.get(node_name=node).state in NodeClaim.ACTIVE_STATES


def reconcile(env: DisruptionEnv):
    """``ExpectObjectReconciled(healthController, node)``: one pass of node repair now."""
    return repair.repair(now=env.now)


# ------------------------------------------------------------------ Reconciliation


def test_should_delete_nodes_that_are_unhealthy_by_the_cloud_provider(env):
    """Node Health / Reconciliation / should delete nodes that are unhealthy by the cloud provider"""
    node = env.node()
    bad_node(env, node)
    env.advance(60 * 60)
    (row,) = reconcile(env)
    assert (row.node, row.detail["condition"]) == (node, "BadNode")
    expect_deleting(node)


def test_should_not_delete_node_when_unhealthy_type_does_not_match_cloud_provider_passed_in_value(env):
    """Node Health / Reconciliation / should not delete node when unhealthy type does not match cloud provider passed in value"""
    node = env.node()
    condition(node, "FakeHealthyNode", "False", env.now)
    env.advance(60 * 60)
    assert reconcile(env) == []
    expect_left_alone(node)


def test_should_not_delete_node_when_health_status_does_not_match_cloud_provider_passed_in_value(env):
    """Node Health / Reconciliation / should not delete node when health status does not match cloud provider passed in value"""
    node = env.node()
    bad_node(env, node, "True")
    env.advance(60 * 60)
    assert reconcile(env) == []
    expect_left_alone(node)


def test_should_not_delete_node_when_health_duration_is_not_reached(env):
    """Node Health / Reconciliation / should not delete node when health duration is not reached"""
    node = env.node()
    bad_node(env, node)
    env.advance(20 * 60)
    assert reconcile(env) == []
    expect_left_alone(node)


def test_should_set_annotation_termination_grace_period_when_force_termination_is_started(env):
    """Node Health / Reconciliation / should set annotation termination grace period when force termination is started"""
    node = env.node()
    bad_node(env, node)
    env.advance(60 * 60)
    reconcile(env)
    assert expect_deleting(node).terminate_by == env.now


def test_should_not_respect_termination_grace_period_if_set_on_the_nodepool(env):
    """Node Health / Reconciliation / should not respect termination grace period if set on the nodepool

    Upstream's annotation two hours ahead is a node already draining under its NodePool's
    ``terminationGracePeriod: 2h`` (here an expiry's drain, begun 60 minutes ago), its pod held
    by a PodDisruptionBudget. Repair makes that drain forceful now (the drain keeps its
    command, as upstream keeps the NodeClaim's deletion): the pod is deleted."""
    env.apply(node_pool(termination_grace_period="2h"))
    node = env.node()
    (pod,) = env.pods(1, node=node, labels={"app": "web"})
    env.pdb(labels={"app": "web"}, max_unavailable=0)
    bad_node(env, node)
    draining = Disruption.objects.create(
        reason=EXPIRED,
        nodes=[node],
        nodeclaims=[f"{node}-claim"],
        state=Disruption.State.DRAINING,
        planned_at=env.now,
        drain_started_at=env.now,
    )
    disruption.advance(draining, env.now)
    assert draining.terminate_by is None and env.cluster.refused == [pod]
    env.advance(60 * 60)
    (row,) = reconcile(env)
    assert row.disruption_id == draining.pk  # the drain under way, made forceful
    draining.refresh_from_db()
    assert draining.state == Disruption.State.DRAINING and draining.terminate_by == env.now
    disruption.advance(draining, env.now)
    assert env.cluster.deleted_pods == [pod]


def test_should_not_update_termination_grace_period_if_set_before_the_current_time(env):
    """Node Health / Reconciliation / should not update termination grace period if set before the current time

    The node has been terminating forcefully since 3 minutes ago (a failed status check of
    its instance): repair leaves that moment as it is."""
    node = env.node()
    bad_node(env, node)
    env.advance(60 * 60)
    earlier = env.now - timedelta(minutes=3)
    forced = disruption.force(node, "system_status", earlier, forceful=True)
    reconcile(env)
    forced.refresh_from_db()
    assert forced.terminate_by == earlier
    assert [d.pk for d in Disruption.objects.all()] == [forced.pk]


def test_should_return_the_requeue_interval_for_the_condition_closest_to_its_terminationduration(env, settings):
    """Node Health / Reconciliation / should return the requeue interval for the condition closest to its terminationDuration

    Repair acts on the node once the condition whose toleration ends first (30 of 60 minutes)
    has lasted it: 3 minutes after the pass at 27 minutes, not before."""
    settings.KARPWEB_REPAIR_POLICIES = "BadNode=False:60m,ValidUnhealthyCondition=False:30m"
    node = env.node()
    start = env.now
    condition(node, "ValidUnhealthyCondition", "False", start)
    condition(node, "BadNode", "False", start)
    env.advance(27 * 60)
    policy, at = repair.due(ClusterNode.objects.get(name=node), repair.policies())
    assert policy.condition == "ValidUnhealthyCondition"
    assert at - env.now.timestamp() == pytest.approx(3 * 60, abs=1)
    assert reconcile(env) == []
    env.advance(3 * 60)
    (row,) = reconcile(env)
    assert row.detail["condition"] == "ValidUnhealthyCondition"
    expect_deleting(node)


def test_should_return_the_requeue_interval_for_the_time_between_now_and_when_the_nodeclaim_termination_time(env):
    """Node Health / Reconciliation / should return the requeue interval for the time between now and when the nodeClaim termination time

    At 27 minutes of a 30-minute toleration repair acts 3 minutes later, not before."""
    node = env.node()
    bad_node(env, node)
    env.advance(27 * 60)
    _, at = repair.due(ClusterNode.objects.get(name=node), repair.policies())
    assert at - env.now.timestamp() == pytest.approx(3 * 60, abs=1)
    assert reconcile(env) == []
    expect_left_alone(node)
    env.advance(3 * 60)
    assert [r.node for r in reconcile(env)] == [node]


# ------------------------------------------------------------------ Forceful termination


def test_should_ignore_node_disruption_budgets(env):
    """Node Health / Forceful termination / should ignore node disruption budgets"""
    env.apply(node_pool(budgets=[{"nodes": "0"}]))
    node = env.node()
    bad_node(env, node)
    env.advance(60 * 60)
    reconcile(env)
    expect_deleting(node)


def test_should_ignore_do_not_disrupt_on_a_node(env):
    """Node Health / Forceful termination / should ignore do-not-disrupt on a node"""
    node = env.node(annotations={DO_NOT_DISRUPT: "true"})
    bad_node(env, node)
    env.advance(60 * 60)
    reconcile(env)
    expect_deleting(node)


def test_should_ignore_unhealthy_nodes_if_more_then_20_of_the_nodes_are_unhealthy_in_a_nodepool(env):
    """Node Health / Forceful termination / should ignore unhealthy nodes if more then 20% of the nodes are unhealthy in a nodepool

    Upstream's ``RequeueAfter`` of 5 minutes is the node's blocked mark, which expires then."""
    from provisioning.services.connections import get_redis

    nodes = [env.node() for _ in range(10)]
    for node in nodes[:3]:
        bad_node(env, node)
    env.advance(60 * 60)
    assert reconcile(env) == []
    for node in nodes[:2]:
        expect_left_alone(node)
        assert get_redis().ttl(repair.BLOCKED_KEY + node) == pytest.approx(5 * 60, abs=2)
    assert "NodeRepairBlocked" in {e.reason for e in env.cluster.events}


def test_should_consider_round_up_when_there_is_a_low_number_of_nodes_for_a_nodepool(env):
    """Node Health / Forceful termination / should consider round up when there is a low number of nodes for a nodepool"""
    nodes = [env.node() for _ in range(3)]
    bad_node(env, nodes[0])
    env.advance(60 * 60)
    reconcile(env)
    expect_deleting(nodes[0])
    for node in nodes[1:]:
        expect_left_alone(node)


# ------------------------------------------------------------------ Metrics


def test_should_fire_a_karpenter_nodeclaims_disrupted_total_metric_when_unhealthy(env):
    """Node Health / Metrics / should fire a karpenter_nodeclaims_disrupted_total metric when unhealthy"""
    node = env.node()
    bad_node(env, node)
    env.advance(60 * 60)
    reconcile(env)
    expect_deleting(node)
    assert metric("karpenter_nodeclaims_disrupted_total", reason="unhealthy", nodepool="default") == 1
    assert metric("karpenter_nodeclaims_unhealthy_disrupted_total", condition="bad_node", nodepool="default") == 1
