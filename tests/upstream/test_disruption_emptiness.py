"""Upstream's emptiness suite (``pkg/controllers/disruption/emptiness_test.go``), ported.

Upstream reconciles its disruption controller (``ExpectSingletonReconciled``) and then the
orchestration queue (``ExpectObjectReconciled(queue, ...)``), and counts the NodeClaims and
Nodes left. Here both are rounds of the real disruption service on the simulated cluster
(``disruption_env.py``):

* upstream's suite swaps the validator for a no-op one, so a command starts in the round that
  plans it; here a command is re-checked 15 s after planning (upstream's validation TTL) and
  starts then. ``carry_out`` is "reconcile, then process the queue": the round that plans,
  then rounds until that command is done (re-check, taint, drain, terminate);
* upstream's ``ExpectNodeClaims`` counts the NodeClaims that still exist: here the claims not
  terminated (``live_claims``), and the Node rows left;
* the ``Consolidatable`` status condition: karpweb keeps no condition; a node is
  consolidatable once its NodePool's ``consolidateAfter`` has passed since its pods last
  changed (since it initialized when none did), computed each round. A node "without the
  condition" is one initialized more recently than that; "condition False" one whose pods
  changed more recently than that;
* the ``karpenter_nodepools_allowed_disruptions`` / ``EligibleNodes`` gauges: karpweb exports
  no such metrics; the budget a round allows is ``budgets.limit`` over the round's own
  picture of the cluster (``allowed_disruptions``), and "eligible for emptiness" is the nodes
  of the round's ``Empty`` command;
* instance types: upstream's ``leastExpensiveSpotInstance`` is t3.nano spot in us-east-1a,
  ``leastExpensiveInstance`` t4g.nano on-demand (the catalog's cheapest of each); the large
  cheap type of "considers pending pods" is hpc7g.16xlarge (the cheapest with 64 vCPUs);
* the fake NodeClaims' allocatable (32 cpu, 100 pods) is the real type's: the pods on the
  nano types are small enough for them (10m cpu, 4Mi), so no node holds more than it has.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from disruption_env import DO_NOT_DISRUPT, ZONE_1, ZONE_3, DisruptionEnv, node_pool

from provisioning.disruption import budgets
from provisioning.disruption.model import EMPTY
from provisioning.models import ClusterNode, ClusterPod, Disruption, NodeClaim
from provisioning.services import disruption

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/emptiness_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

_BUFFER = (
    "karpweb has no capacity buffers: the provisioner plans no virtual buffer pods and the cluster state keeps "
    "no buffer pod count per node (upstream's cluster.UpdateBufferPodCounts), so no node can host buffer pods"
)
NOT_PORTED: dict[str, str] = {
    "Emptiness / Buffer pod protection / should not disrupt a node that hosts virtual buffer pods": _BUFFER,
    "Emptiness / Buffer pod protection / should disrupt a node once buffer pods are cleared": _BUFFER,
    "Emptiness / Buffer pod protection / should only protect the specific node with buffer pods, not others": _BUFFER,
    "Emptiness / Buffer pod protection / should not consider a node with real pods AND buffer pods as empty": _BUFFER,
    "Emptiness / Buffer pod protection / should protect multiple nodes that each host buffer pods": _BUFFER,
    "Emptiness / Buffer pod protection / should not protect a node with zero buffer pod count": _BUFFER,
}

CHEAPEST_SPOT = "t3.nano"  # leastExpensiveSpotInstance: the cheapest spot offering (us-east-1a here)
CHEAPEST = "t4g.nano"  # leastExpensiveInstance: the cheapest on-demand type
LARGE_CHEAP = "hpc7g.16xlarge"  # the cheapest type with 64 vCPUs (on demand in us-east-1c)
# A pod the nano types hold (t4g.nano allocates 15 MiB and 4 pods), as upstream's fit its NodeClaims.
SMALL = {"cpu": "10m", "memory": "4Mi"}


# ------------------------------------------------------------------ helpers


class RecordingCloud:
    """The cloud the drain terminates instances in: it notes them (the env's instances are
    rows only, there is no EC2 behind them)."""

    def __init__(self) -> None:
        self.terminated: list[str] = []

    def terminate(self, instance_id: str) -> None:
        self.terminated.append(instance_id)


@pytest.fixture(autouse=True)
def cloud(monkeypatch) -> RecordingCloud:
    recording = RecordingCloud()
    monkeypatch.setattr("provisioning.services.cloud.get_cloud", lambda: recording)
    return recording


def empty_pool(name: str = "default", **options) -> dict:
    """The suite's NodePool: WhenEmpty, consolidateAfter 0s, a 100% budget."""
    options.setdefault("consolidation_policy", "WhenEmpty")
    return node_pool(name, **options)


def spot_node(env: DisruptionEnv, **options) -> str:
    """The BeforeEach's NodeClaim and Node: the cheapest spot offering, Consolidatable."""
    options.setdefault("instance_type", CHEAPEST_SPOT)
    options.setdefault("capacity_type", "spot")
    options.setdefault("zone", ZONE_1)
    return env.node(**options)


def live_claims() -> list[NodeClaim]:
    """``ExpectNodeClaims``: the NodeClaims that still exist (not terminated or failed)."""
    return list(NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES))


def node_count() -> int:
    return ClusterNode.objects.count()


def carry_out(env: DisruptionEnv, max_rounds: int = 10) -> list[Disruption]:
    """``ExpectSingletonReconciled`` then ``ExpectObjectReconciled(queue, ...)``: one round plans;
    then rounds until every command it planned is done or cancelled. Returns those commands."""
    env.step()
    return finish(env, env.disruptions(), max_rounds)


def finish(env: DisruptionEnv, commands: list[Disruption], max_rounds: int = 10) -> list[Disruption]:
    """``ExpectObjectReconciled(queue, ...)``: carry ``commands`` on (re-check, taint,
    replacements, drain, termination) until they are done or cancelled, 16 s apart, planning
    nothing new (the queue does not run the disruption controller)."""
    for _ in range(max_rounds):
        for d in commands:
            d.refresh_from_db()
        if all(d.state not in disruption.ACTIVE for d in commands):
            break
        for d in commands:
            if d.state in disruption.ACTIVE:
                disruption.advance(d, env.now)
        env.launch_and_register()
        env.advance(16)
    return commands


def allowed_disruptions(env: DisruptionEnv, pool: str, reason: str) -> int:
    """``karpenter_nodepools_allowed_disruptions{nodepool, reason}``: what the pool's active
    budgets allow for the reason over its initialized nodes now, as the round computes it."""
    picture = disruption._picture(env.now)
    count = sum(1 for c in picture.candidates if c.nodepool == pool and c.initialized)
    limit, _ = budgets.limit(picture.policies[pool], reason, count, env.now.timestamp())
    return count if limit is None else limit


def drifted_in_picture(env: DisruptionEnv, node: str) -> bool:
    """Whether the round's picture of the cluster sees the node as drifted."""
    candidate = next(c for c in disruption._picture(env.now).candidates if c.name == node)
    return candidate.drift_reason is not None


def make_drifted(node: str) -> None:
    """Upstream's ``StatusConditions().SetTrue(Drifted)``: the node's NodeClaim records a
    NodePool hash that is no longer its NodePool's (static drift, NodePoolDrifted)."""
    claim = NodeClaim.objects.get(node_name=node)
    claim.spec = {**claim.spec, "driftHashes": {**claim.spec["driftHashes"], "nodepool": "stale"}}
    claim.save(update_fields=["spec"])


def set_terminating(pod_key: str, env: DisruptionEnv) -> None:
    """``ExpectEvicted`` that leaves the pod: it has a deletionTimestamp and is still there."""
    namespace, name = pod_key.split("/")
    row = ClusterPod.objects.get(namespace=namespace, name=name)
    metadata = {**row.manifest["metadata"], "deletionTimestamp": env.now.isoformat().replace("+00:00", "Z")}
    row.manifest = {**row.manifest, "metadata": metadata}
    row.save(update_fields=["manifest"])


def finish_terminating(node: str) -> None:
    """The kubelet finishes the terminating pods on the node: they are gone."""
    for row in ClusterPod.objects.filter(node_name=node):
        if (row.manifest.get("metadata") or {}).get("deletionTimestamp"):
            row.delete()


def empty_command(env: DisruptionEnv) -> tuple[str, ...]:
    """The nodes of the round's Empty command (upstream's eligible nodes for emptiness)."""
    return next((c.candidates for c in env.plan().commands if c.reason == EMPTY), ())


# ------------------------------------------------------------------ Metrics


def test_should_correctly_report_eligible_nodes(disruption_env: DisruptionEnv):
    """Emptiness / Metrics / should correctly report eligible nodes

    EligibleNodes{reason=empty}: the nodes of the round's Empty command."""
    env = disruption_env
    env.apply(empty_pool())
    node = spot_node(env)
    pod = env.pod(node=node, **SMALL)
    assert empty_command(env) == ()
    ClusterPod.objects.filter(namespace="default", name=pod.split("/")[1]).delete()
    ClusterNode.objects.filter(name=node).update(last_pod_change_at=env.now)
    assert empty_command(env) == (node,)


# ------------------------------------------------------------------ Budgets


def _cheap_nodes(env: DisruptionEnv, count: int, nodepool: str = "default") -> list[str]:
    return [env.node(nodepool=nodepool, instance_type=CHEAPEST, zone=ZONE_1) for _ in range(count)]


def _budget_case(env: DisruptionEnv, nodes: str, allowed: int, left: int, commands: int) -> None:
    env.apply(empty_pool(budgets=[{"nodes": nodes}]))
    _cheap_nodes(env, 10)
    assert allowed_disruptions(env, "default", EMPTY) == allowed
    env.step()
    planned = env.disruptions()
    assert len(planned) == commands
    finish(env, planned)
    assert len(live_claims()) == left


def test_should_allow_all_empty_nodes_to_be_disrupted(disruption_env: DisruptionEnv):
    """Emptiness / Budgets / should allow all empty nodes to be disrupted"""
    _budget_case(disruption_env, "100%", allowed=10, left=0, commands=1)


def test_should_allow_no_empty_nodes_to_be_disrupted(disruption_env: DisruptionEnv):
    """Emptiness / Budgets / should allow no empty nodes to be disrupted"""
    _budget_case(disruption_env, "0%", allowed=0, left=10, commands=0)


def test_should_only_allow_3_empty_nodes_to_be_disrupted(disruption_env: DisruptionEnv):
    """Emptiness / Budgets / should only allow 3 empty nodes to be disrupted"""
    _budget_case(disruption_env, "30%", allowed=3, left=7, commands=1)


def _many_pools_case(env: DisruptionEnv, nodes: str, allowed: int, left: int) -> None:
    env.apply(empty_pool())
    pools = [f"pool-{i}" for i in range(10)]
    for pool in pools:
        env.apply(empty_pool(pool, consolidate_after="30s", budgets=[{"nodes": nodes}]))
        _cheap_nodes(env, 3, nodepool=pool)
    for pool in pools:
        assert allowed_disruptions(env, pool, EMPTY) == allowed
    env.step()
    planned = env.disruptions()
    assert len(planned) == 1
    finish(env, planned)
    assert len(live_claims()) == left


def test_should_allow_2_nodes_from_each_nodepool_to_be_deleted(disruption_env: DisruptionEnv):
    """Emptiness / Budgets / should allow 2 nodes from each nodePool to be deleted

    50% of 3 nodes is 1.5, rounded up to 2, in each of 10 NodePools."""
    _many_pools_case(disruption_env, "50%", allowed=2, left=10)


def test_should_allow_all_nodes_from_each_nodepool_to_be_deleted(disruption_env: DisruptionEnv):
    """Emptiness / Budgets / should allow all nodes from each nodePool to be deleted"""
    _many_pools_case(disruption_env, "100%", allowed=3, left=0)


# ------------------------------------------------------------------ Emptiness


def test_can_delete_empty_nodes(disruption_env: DisruptionEnv):
    """Emptiness / Emptiness / can delete empty nodes"""
    env = disruption_env
    env.apply(empty_pool())
    node = spot_node(env)
    carry_out(env)
    assert live_claims() == []
    assert node_count() == 0
    assert node not in env.node_names()


def test_can_delete_empty_and_drifted_nodes(disruption_env: DisruptionEnv):
    """Emptiness / Emptiness / can delete empty and drifted nodes

    Upstream's suite runs drift before emptiness (its production order is emptiness first, as
    karpweb's), and checks EligibleNodes{reason=drifted} is 1: here the round's picture sees
    the node as drifted, and the node goes without a replacement."""
    env = disruption_env
    env.apply(empty_pool())
    node = spot_node(env)
    make_drifted(node)
    assert drifted_in_picture(env, node)
    commands = carry_out(env)
    assert [c.state for c in commands] == [Disruption.State.DONE]
    assert all(c.replacement_plan == [] for c in commands)
    assert live_claims() == []
    assert node_count() == 0


def test_should_ignore_nodes_without_the_consolidatable_status_condition(disruption_env: DisruptionEnv):
    """Emptiness / Emptiness / should ignore nodes without the consolidatable status condition

    Not yet consolidatable: initialized 5 minutes ago, under a consolidateAfter of 1h."""
    env = disruption_env
    env.apply(empty_pool(consolidate_after="1h"))
    node = spot_node(env, age=timedelta(minutes=5))
    env.step()
    env.step()
    assert len(live_claims()) == 1
    assert node_count() == 1
    assert env.disruptions() == []
    assert "consolidateAfter 1h not reached" in env.note(node)


def test_should_ignore_nodes_with_the_karpenter_sh_do_not_disrupt_annotation(disruption_env: DisruptionEnv):
    """Emptiness / Emptiness / should ignore nodes with the karpenter.sh/do-not-disrupt annotation"""
    env = disruption_env
    env.apply(empty_pool())
    node = spot_node(env, annotations={DO_NOT_DISRUPT: "true"})
    env.step()
    env.step()
    assert len(live_claims()) == 1
    assert node_count() == 1
    assert env.disruptions() == []
    assert DO_NOT_DISRUPT in env.note(node)


def test_should_delete_nodes_with_the_karpenter_sh_do_not_disrupt_annotation_set_to_false(
    disruption_env: DisruptionEnv,
):
    """Emptiness / Emptiness / should delete nodes with the karpenter.sh/do-not-disrupt annotation set to false"""
    env = disruption_env
    env.apply(empty_pool())
    node = spot_node(env, annotations={DO_NOT_DISRUPT: "false"})
    carry_out(env)
    assert live_claims() == []
    assert node not in env.node_names()


def test_should_ignore_nodes_that_have_pods(disruption_env: DisruptionEnv):
    """Emptiness / Emptiness / should ignore nodes that have pods"""
    env = disruption_env
    env.apply(empty_pool())
    node = spot_node(env)
    env.pod(node=node, **SMALL)
    env.step()
    env.step()
    assert len(live_claims()) == 1
    assert node_count() == 1
    assert env.disruptions() == []


def test_should_ignore_nodes_with_the_consolidatable_status_condition_set_to_false(disruption_env: DisruptionEnv):
    """Emptiness / Emptiness / should ignore nodes with the consolidatable status condition set to false

    Consolidatable False: a node of an hour whose last pod left 5 minutes ago, under a
    consolidateAfter of 1h."""
    env = disruption_env
    env.apply(empty_pool(consolidate_after="1h"))
    node = spot_node(env)
    ClusterNode.objects.filter(name=node).update(last_pod_change_at=env.now - timedelta(minutes=5))
    env.step()
    env.step()
    assert len(live_claims()) == 1
    assert env.disruptions() == []
    assert "consolidateAfter 1h not reached" in env.note(node)


# ------------------------------------------------------------------ the rest


def test_can_delete_multiple_empty_nodes(disruption_env: DisruptionEnv):
    """Emptiness / can delete multiple empty nodes"""
    env = disruption_env
    env.apply(empty_pool())
    first, second = spot_node(env), spot_node(env)
    env.step()
    commands = env.disruptions()
    assert len(commands) == 1
    assert set(commands[0].nodes) == {first, second}
    carry_out(env)
    assert live_claims() == []
    assert node_count() == 0


def test_considers_pending_pods_when_consolidating(disruption_env: DisruptionEnv):
    """Emptiness / considers pending pods when consolidating

    A 1-cpu pod on the cheapest 64-vCPU node, and a pending 62-cpu pod that needs that node."""
    env = disruption_env
    env.apply(empty_pool())
    node = env.node(instance_type=LARGE_CHEAP, zone=ZONE_3)
    env.pod(node=node, cpu="1")
    env.pod(cpu="62")
    env.step()
    env.step()
    assert len(live_claims()) == 1
    assert node_count() == 1
    assert node in env.node_names()


def test_will_consider_a_node_with_a_daemonset_pod_as_empty(disruption_env: DisruptionEnv):
    """Emptiness / will consider a node with a DaemonSet pod as empty"""
    env = disruption_env
    env.apply(empty_pool())
    node = env.node(instance_type=CHEAPEST, zone=ZONE_1)
    env.pod(node=node, owner="DaemonSet", **SMALL)
    carry_out(env)
    assert live_claims() == []
    assert node_count() == 0
    assert node not in env.node_names()


def test_will_consider_a_node_with_terminating_deployment_pods_as_empty(disruption_env: DisruptionEnv):
    """Emptiness / will consider a node with terminating Deployment pods as empty

    Upstream's cascade deletion stands in for the pods finishing their termination; here the
    pods finish once the node is draining."""
    env = disruption_env
    env.apply(empty_pool())
    node = env.node(instance_type=CHEAPEST, zone=ZONE_1)
    for pod in env.pods(3, node=node, **SMALL):
        set_terminating(pod, env)
    env.step()
    assert [d.nodes for d in env.disruptions()] == [[node]]
    env.step()
    assert env.tainted(node)
    finish_terminating(node)
    carry_out(env)
    assert live_claims() == []
    assert node_count() == 0


def test_will_not_consider_a_node_with_a_terminating_statefulset_pod_as_empty(disruption_env: DisruptionEnv):
    """Emptiness / will not consider a node with a terminating StatefulSet pod as empty"""
    env = disruption_env
    env.apply(empty_pool())
    node = env.node(instance_type=CHEAPEST, zone=ZONE_1)
    set_terminating(env.pod(node=node, owner="StatefulSet", **SMALL), env)
    env.step()
    assert env.disruptions() == []
    assert len(live_claims()) == 1
    assert node_count() == 1
    assert node in env.node_names()


def test_should_wait_for_the_node_ttl_for_empty_nodes_before_consolidating(disruption_env: DisruptionEnv):
    """Emptiness / should wait for the node TTL for empty nodes before consolidating

    The real validator: the command waits out the 15 s re-check before the node goes (upstream
    steps its clock 31 s past the wait)."""
    env = disruption_env
    env.apply(empty_pool())
    node = spot_node(env)
    env.step(seconds=10)
    planned = env.disruptions()
    assert [d.state for d in planned] == [Disruption.State.PLANNED]
    env.step(seconds=21)
    planned[0].refresh_from_db()
    assert planned[0].state == Disruption.State.PLANNED
    assert node in env.node_names()
    assert len(live_claims()) == 1
    finish(env, planned)
    assert [d.state for d in planned] == [Disruption.State.DONE]
    assert live_claims() == []
    assert node not in env.node_names()


def test_should_not_consolidate_static_nodepool_nodes(disruption_env: DisruptionEnv):
    """Emptiness / Static NodePool / should not consolidate static NodePool nodes

    Upstream asks emptiness, single- and multi-node consolidation for their candidates; here
    no command of a round names either empty node of a static NodePool (spec.replicas 2)."""
    env = disruption_env
    static = node_pool("static")
    static["spec"]["replicas"] = 2
    env.apply(static)
    nodes = {env.node(nodepool="static", instance_type=CHEAPEST, zone=ZONE_1) for _ in range(2)}
    chosen = {name for command in env.plan().commands for name in command.candidates}
    assert not chosen & nodes
    env.step()
    env.step()
    assert nodes <= env.node_names()
    assert len(live_claims()) == 2
