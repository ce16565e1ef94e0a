"""Upstream's disruption suite (``pkg/controllers/disruption/suite_test.go``), ported.

Upstream's suite holds the tests of the disruption controller's shared parts: simulating a
node's removal, the disruption taint, the budget mapping, the eviction cost, which nodes are
candidates, and the decision metrics. Here they run against karpweb's disruption service
(``provisioning/services/disruption.py``) over the simulated cluster (``disruption_env.py``):

* ``ExpectSingletonReconciled(disruptionController)`` is ``env.step()``: one round of the real
  service. Upstream's suite validates commands with a no-op validator, so a command starts in
  the round that plans it; karpweb re-checks a command 15 s after planning it (upstream's
  validation TTL), so where a test needs a command started, two steps are one reconcile.
* ``disruption.NewCandidate`` (is this node a candidate, and if not, why) is the picture the
  service plans from (``services.disruption._picture``, the same reader ``simulate
  --disruption`` uses) and the round's note on each node left alone (``env.plan()``); a
  candidate that nothing blocks is shown to be one by the round choosing it (an empty node is
  deleted, a dear one replaced by a cheaper one, a drifted one replaced). Upstream's error
  texts are Go's; the port checks that karpweb's reason names the same cause (the pod, the
  PodDisruptionBudget, the annotation) and that the same ``DisruptionBlocked`` event is
  recorded (``env.cluster.events``).
* Upstream's two disruption classes: graceful (emptiness, consolidation) and eventual (drift).
  An eventual candidate is a drifted node here (its NodeClaim stamped with a stale NodePool
  hash, upstream's ``Drifted`` condition set by hand).
* ``cluster.MarkForDeletion`` and the orchestration queue's ``StartCommand`` are an active
  ``Disruption`` row naming the node (the row is karpweb's queue entry); a NodeClaim with a
  deletionTimestamp is a NodeClaim row in state ``deleting``; a Node with one has
  ``metadata.deletionTimestamp`` in its manifest.
* ``BuildDisruptionBudgetMapping`` is the round's budget arithmetic (``planner._Budget``)
  over the service's picture, for each budgeted reason.
* The fake provider's ``mostExpensiveInstance`` is ``m5.8xlarge`` on-demand in us-east-1a (any
  pod that fits it fits a cheaper type); ``leastExpensiveInstance`` is ``t4g.micro``, the
  cheapest on-demand type that holds three of the suite's pods (the two cheaper types have
  too little memory for any).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from disruption_env import DISRUPTED_TAINT_KEY, DO_NOT_DISRUPT, ZONE_1, DisruptionEnv, name, node_pool
from django.utils import timezone

from provisioning.cluster.simulated import node_manifest
from provisioning.disruption import planner
from provisioning.disruption.candidates import eviction_cost
from provisioning.disruption.drift import HASH_VERSION
from provisioning.disruption.model import DRIFTED, EMPTY, UNDERUTILIZED, Candidate
from provisioning.disruption.simulation import simulate
from provisioning.models import ClusterNode, ClusterPod, Disruption, NodeClaim
from provisioning.scheduling.podspec import pod_from_manifest
from provisioning.scheduling.solver import solve
from provisioning.services import disruption as service
from provisioning.services.catalog import load_catalog
from provisioning.services.provision import cluster_documents
from provisioning.services.simulate import build_snapshot, default_solver

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {
    "Metrics / should stop multi-node consolidation after context deadline is reached": (
        "karpweb's multi-node consolidation has no time limit (upstream's MultiNodeConsolidationTimeoutDuration "
        "and its karpenter_voluntary_disruption_consolidation_timeouts_total): the planner's binary search over "
        "at most 100 candidates always runs to the end, so there is no deadline to reach"
    ),
}

MOST_EXPENSIVE = "m5.8xlarge"  # upstream's mostExpensiveInstance: on-demand, us-east-1a
LEAST_EXPENSIVE = "t4g.micro"  # upstream's leastExpensiveInstance, for the suite's pods
REASONS = (EMPTY, UNDERUTILIZED, DRIFTED)  # upstream's allKnownDisruptionReasons
STALE_HASHES = {"version": HASH_VERSION, "nodepool": "0" * 16, "nodeclass": "0" * 16}
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODEPOOL = "karpenter.sh/nodepool"


class TerminatingCloud:
    """The cloud as far as the drain needs it: terminating an instance (recorded)."""

    def __init__(self) -> None:
        self.terminated: list[str] = []

    def terminate(self, instance_id: str) -> None:
        self.terminated.append(instance_id)


@pytest.fixture
def env(disruption_env: DisruptionEnv, monkeypatch) -> DisruptionEnv:
    """The environment, with a cloud that terminates the instances of drained nodes."""
    cloud = TerminatingCloud()
    monkeypatch.setattr("provisioning.services.cloud.get_cloud", lambda: cloud)
    disruption_env.cloud = cloud
    return disruption_env


# ------------------------------------------------------------------ helpers (candidates for disruption_env.py)


def picture(env: DisruptionEnv):
    """What the service plans from now: its candidates and the nodes it left out, with why."""
    return service._picture(env.now)


def candidate_named(env: DisruptionEnv, node: str) -> Candidate | None:
    return next((c for c in picture(env).candidates if c.name == node), None)


def chosen(result) -> set[str]:
    return {n for command in result.commands for n in command.candidates}


def commands_for(result, node: str) -> list:
    return [command for command in result.commands if node in command.candidates]


def blocked_events(env: DisruptionEnv, kind: str | None = None) -> list:
    return [e for e in env.cluster.events if e.reason == "DisruptionBlocked" and kind in (None, e.involved.kind)]


def expect_blocked(env: DisruptionEnv, node: str, *words: str) -> str:
    """The round leaves ``node`` alone, says why in words naming ``words``, and records a
    DisruptionBlocked event on the node saying so. Returns the note."""
    result = env.plan()
    assert node not in chosen(result), [c.explanation for c in result.commands]
    note = result.not_candidates[node]
    for word in words:
        assert word in note, note
    on_node = [e for e in blocked_events(env, "Node") if e.involved.name == node]
    assert any(all(word in e.message for word in words) for e in on_node), [e.message for e in env.cluster.events]
    return note


def drifted_spec(**extra: Any) -> dict[str, Any]:
    """A NodeClaim launched from an older NodePool template: drifted (upstream sets the
    NodeClaim's Drifted condition by hand)."""
    return {"driftHashes": dict(STALE_HASHES), **extra}


def mark_for_deletion(env: DisruptionEnv, *nodes: str, state: str = Disruption.State.DRAINING) -> Disruption:
    """``cluster.MarkForDeletion``: the nodes are part of a command in progress (tainted, as
    karpweb taints a command's nodes when it starts)."""
    if state != Disruption.State.PLANNED:
        for node in nodes:
            env.cluster.taint(node, {"key": DISRUPTED_TAINT_KEY, "effect": "NoSchedule"})
    claims = list(ClusterNode.objects.filter(name__in=nodes).values_list("nodeclaim", flat=True))
    return Disruption.objects.create(
        reason=UNDERUTILIZED, nodes=list(nodes), nodeclaims=claims, state=state, planned_at=env.now
    )


def set_node_deleting(env: DisruptionEnv, node: str, *, claim_too: bool = True) -> None:
    """``client.Delete`` of the Node (held by its finalizer) and of its NodeClaim."""
    row = ClusterNode.objects.get(name=node)
    row.manifest.setdefault("metadata", {})["deletionTimestamp"] = env.now.isoformat().replace("+00:00", "Z")
    row.save(update_fields=["manifest"])
    if claim_too:
        NodeClaim.objects.filter(name=row.nodeclaim).update(state=NodeClaim.State.DELETING)


def make_not_ready(*nodes: str) -> None:
    """``ExpectMakeNodesNotReady``."""
    for row in ClusterNode.objects.filter(name__in=nodes):
        row.manifest.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "False"}]
        row.ready = False
        row.save(update_fields=["manifest", "ready"])


def set_pod_deleting(env: DisruptionEnv, key: str) -> None:
    """``ExpectDeletionTimestampSet`` on a pod (a finalizer keeps it)."""
    namespace, pod_name = key.split("/")
    row = ClusterPod.objects.get(namespace=namespace, name=pod_name)
    row.manifest.setdefault("metadata", {})["deletionTimestamp"] = env.now.isoformat().replace("+00:00", "Z")
    row.manifest["metadata"].setdefault("finalizers", ["test/finalizer"])
    row.save(update_fields=["manifest"])


def drop_node_labels(node: str, *keys: str) -> None:
    row = ClusterNode.objects.get(name=node)
    for key in keys:
        row.manifest["metadata"]["labels"].pop(key, None)
    row.save(update_fields=["manifest"])


def bare_node(env: DisruptionEnv, *, labels: Mapping[str, str] | None = None, managed: bool = True) -> str:
    """A Node and no NodeClaim (``managed``: with the NodePool label, as Karpenter's nodes have)."""
    node_name = name("node")
    it = env.catalog.instance_type(MOST_EXPENSIVE)
    manifest = node_manifest(
        node_name, it, zone=ZONE_1, capacity_type="on-demand", nodepool="default", labels=dict(labels or {})
    )
    if not managed:
        manifest["metadata"]["labels"].pop(NODEPOOL, None)
    ClusterNode.objects.create(
        name=node_name,
        manifest=manifest,
        nodepool="default" if managed else "",
        ready=True,
        last_pod_change_at=env.now - timedelta(hours=1),
    )
    return node_name


def allowed_disruptions(env: DisruptionEnv, reason: str) -> dict[str, int]:
    """``BuildDisruptionBudgetMapping``: per NodePool, how many more of its nodes the round may
    disrupt for ``reason`` (the planner's own budget arithmetic over the service's picture)."""
    seen = picture(env)
    round_ = planner._Round(
        seen.candidates, seen.policies, seen.snapshot, env.now.timestamp(), False, lambda snapshot: None
    )
    budget = planner._Budget(round_, reason)
    return {pool: budget.left(pool) for pool in seen.policies}


def round_without_launch(env: DisruptionEnv, seconds: float = 16.0) -> None:
    """One round of the service; the replacements it creates are launched (an instance
    exists) but do not register, so they stay in flight (upstream's replacements that have
    not become Ready)."""
    service.run(env.now)
    for claim in NodeClaim.objects.filter(state=NodeClaim.State.PENDING):
        option = claim.launch_options[0]
        claim.move(
            NodeClaim.State.PENDING,
            NodeClaim.State.LAUNCHED,
            instance_id=f"i-{name('launch').replace('-', '')}",
            instance_type=option["instanceType"],
            zone=option["zone"],
            capacity_type=option["capacityType"],
            price_per_hour=option["price"],
            launched_at=timezone.now(),
        )
    env.advance(seconds)


def active_claims() -> list[NodeClaim]:
    """``ExpectNodeClaims``: the NodeClaims that exist (karpweb keeps terminated rows)."""
    return list(NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES))


def tainted_nodes() -> list[str]:
    """``ExpectTaintedNodeCount``'s nodes."""
    return [
        n.name
        for n in ClusterNode.objects.all()
        if any(t.get("key") == DISRUPTED_TAINT_KEY for t in (n.manifest.get("spec") or {}).get("taints") or [])
    ]


def bare_pod(**metadata: Any) -> Any:
    """A bare ``corev1.Pod`` for ``EvictionCost``: ``spec`` keys in ``spec``, the rest metadata."""
    spec = {"containers": [{"name": "c", "image": "i"}], **metadata.pop("spec", {})}
    return pod_from_manifest(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", **metadata}, "spec": spec}
    )


def metric_value(family_name: str, labels: Mapping[str, str]) -> float:
    """``ExpectMetricCounterValue``: the sum of the samples of ``family_name`` whose labels include
    ``labels``, from karpweb's exported metrics (the cluster collector and the process registry)."""
    from prometheus_client import REGISTRY

    from provisioning.observability.cluster import ClusterState

    total, found = 0.0, False
    for family in [*ClusterState().collect(), *REGISTRY.collect()]:
        if family.name != family_name:
            continue
        for sample in family.samples:
            if sample.name.endswith(("_created", "_bucket", "_sum", "_count")):
                continue
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                total, found = total + sample.value, True
    assert found, f"no {family_name} sample with labels {dict(labels)}"
    return total


def expect_decision_metrics(labels: Mapping[str, str], nodepool: str = "default") -> None:
    assert metric_value("karpenter_voluntary_disruption_decisions", labels) == 1
    by_pool = {"nodepool": nodepool, **labels}
    assert metric_value("karpenter_voluntary_disruption_decisions_by_nodepool", by_pool) == 1


# ------------------------------------------------------------------ Simulate Scheduling


def test_should_allow_pods_on_deleting_nodes_to_reschedule_to_uninitialized_nodes(env):
    """Simulate Scheduling / should allow pods on deleting nodes to reschedule to uninitialized nodes

    Ten nodes where a 2-cpu pod fits one to a node (m5.xlarge, 3.92 cpu allocatable; upstream's
    have 3), the pod on the first, every other node marked for deletion; simulating the first
    node's removal (``simulation.simulate`` with the leaving nodes, as ``SimulateScheduling``)
    places the pod on a new NodeClaim."""
    env.apply(node_pool())
    nodes = [env.node(instance_type="m5.xlarge") for _ in range(10)]
    pod = env.pod(node=nodes[0], cpu="2", memory="100Mi")
    mark_for_deletion(env, *nodes[1:])
    seen = picture(env)
    by_name = {c.name: c for c in seen.candidates}
    leaving = [c for c in seen.candidates if c.disrupting]
    assert {c.name for c in leaving} == set(nodes[1:])
    result = simulate([by_name[nodes[0]]], seen.snapshot, solve, leaving=leaving)
    assert result.failure is None
    assert pod not in result.plan.unschedulable
    assert any(pod in claim.pods for claim in result.plan.claims)


def test_should_allow_multiple_replace_operations_to_happen_successively(env):
    """Simulate Scheduling / should allow multiple replace operations to happen successively

    Ten drifted dear nodes, each labelled test-partition=i and holding a pod selecting it, so
    each needs its own replacement; budget 3 nodes, consolidateAfter Never. Each reconcile (here
    a round: the re-check of the command planned 15 s before, and the next plan) replaces one
    more while the earlier replacements are still in flight, until three are: the fourth finds
    the budget used up."""
    partition = {"key": "test-partition", "operator": "Exists"}
    env.apply(node_pool(requirements=[partition], consolidate_after="Never", budgets=[{"nodes": "3"}]))
    nodes = [
        env.node(instance_type=MOST_EXPENSIVE, labels={"test-partition": str(i)}, claim_spec=drifted_spec())
        for i in range(10)
    ]
    for i, node in enumerate(nodes):
        env.pod(node=node, cpu="100m", memory="100Mi", spec={"nodeSelector": {"test-partition": str(i)}})
    round_without_launch(env)  # the first planned
    for expected in (11, 12, 13):
        # Each round re-checks the command planned 15 s earlier (replacing) and plans the next:
        # upstream's reconcile, which plans and re-checks in one go.
        round_without_launch(env)
        assert len(active_claims()) == expected
    assert len(tainted_nodes()) == 3
    round_without_launch(env)
    round_without_launch(env)
    assert len(active_claims()) == 13  # the budget allows three at a time


def test_can_replace_node_with_a_local_pv_ignoring_hostname_affinity(env):
    """Simulate Scheduling / can replace node with a local PV (ignoring hostname affinity)

    A StatefulSet's pod with a PersistentVolumeClaim (upstream's local PV, pinned to the node's
    hostname) on a dear node: consolidation replaces the node; karpweb does not simulate
    volume topology (the PV's node affinity is ignored, as upstream ignores a local PV's
    hostname affinity), so the pod moves to the replacement."""
    env.apply(node_pool())
    node = env.node(instance_type=MOST_EXPENSIVE)
    claim = ClusterNode.objects.get(name=node).nodeclaim
    pod = env.pod(
        node=node,
        owner="StatefulSet",
        labels={"app": "test"},
        spec={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "local-claim"}}]},
    )
    env.settle()
    nodes, claims = env.node_names(), active_claims()
    assert len(claims) == 1 and len(nodes) == 1
    assert claims[0].name != claim and node not in nodes
    assert env.node_of(pod) in nodes


def test_should_ensure_that_we_do_not_duplicate_capacity_for_disrupted_nodes_with_provisioning(env):
    """Simulate Scheduling / should ensure that we do not duplicate capacity for disrupted nodes with provisioning

    A drifted node's replacement is created but not launched yet (upstream hangs its Create);
    the provisioner's view of the cluster then plans no new NodeClaim for the node's pod
    (``prov.Schedule``: a snapshot of ``cluster_documents`` solved by THE solver), at every
    point of the command: planned, and replacing."""

    def provisioner_plans() -> list:
        snapshot, _ = build_snapshot(cluster_documents(load_catalog())[0])
        return list(default_solver()(snapshot).claims)

    env.apply(node_pool())
    node = env.node(instance_type=MOST_EXPENSIVE, claim_spec=drifted_spec())
    env.pod(node=node, labels={"app": "test"})
    service.run(env.now)  # planned
    assert env.disruptions(Disruption.State.PLANNED)
    assert provisioner_plans() == []
    env.advance(16)
    service.run(env.now)  # re-checked: replacing, its replacement not launched
    (command,) = env.disruptions()
    assert command.state == Disruption.State.REPLACING and env.tainted(node)
    assert [c.state for c in env.replacements()] == [NodeClaim.State.PENDING]
    assert provisioner_plans() == []


# ------------------------------------------------------------------ Disruption Taints


def test_should_remove_taints_from_nodeclaims_that_were_left_tainted_from_a_previous_disruption_action(env):
    """Disruption Taints / should remove taints from NodeClaims that were left tainted from a previous disruption action

    A node carrying karpenter.sh/disrupted:NoSchedule though no command is in progress
    (consolidateAfter Never, so nothing is planned): one round removes the taint. (Upstream's
    DisruptionReason condition on the NodeClaim has no karpweb counterpart: a claim is being
    disrupted exactly when an active Disruption row names its node.)"""
    env.apply(node_pool(consolidate_after="Never"))
    node = env.node(taints=[{"key": DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}])
    env.pod(node=node, cpu="100m", memory="100Mi")
    assert env.tainted(node)
    env.step()
    assert not env.tainted(node)
    assert not env.disruptions()


def test_should_add_and_remove_taints_from_nodeclaims_that_fail_to_disrupt(env):
    """Disruption Taints / should add and remove taints from NodeClaims that fail to disrupt

    A node consolidation replaces: once the command starts its node is tainted and a
    replacement NodeClaim exists; the replacement then fails (upstream deletes it, as an ICE
    error would; karpweb's failed launch leaves the claim Failed) and the next round gives the
    node back, untainted. (The DisruptionReason condition: see the test above.)"""
    env.apply(node_pool())
    node = env.node(instance_type="m5.xlarge")
    env.pod(node=node, cpu="100m", memory="100Mi")
    service.run(env.now)  # planned
    env.advance(16)
    service.run(env.now)  # re-checked: replacing
    (command,) = env.disruptions()
    assert command.state == Disruption.State.REPLACING
    assert env.tainted(node)
    (replacement,) = env.replacements()
    replacement.move(NodeClaim.State.PENDING, NodeClaim.State.FAILED, reason="InsufficientCapacity")
    env.advance(1)
    service.run(env.now)
    command.refresh_from_db()
    assert command.state == Disruption.State.CANCELLED
    assert not env.tainted(node)
    assert node in env.node_names()


# ------------------------------------------------------------------ BuildDisruptionBudgetMapping


@pytest.fixture
def ten_nodes(env: DisruptionEnv) -> list[str]:
    """The BeforeEach: ten initialized dear nodes of the NodePool."""
    env.apply(node_pool(budgets=[{"nodes": "100%"}]))
    return [env.node(instance_type=MOST_EXPENSIVE) for _ in range(10)]


def test_should_not_consider_nodes_that_are_not_managed_as_part_of_disruption_count(env, ten_nodes):
    """BuildDisruptionBudgetMapping / should not consider nodes that are not managed as part of disruption count"""
    bare_node(env, managed=False)
    for reason in REASONS:
        assert allowed_disruptions(env, reason)["default"] == 10


def test_should_not_consider_nodes_that_are_not_initialized_as_part_of_disruption_count(env, ten_nodes):
    """BuildDisruptionBudgetMapping / should not consider nodes that are not initialized as part of disruption count"""
    env.node(instance_type=MOST_EXPENSIVE, initialized=False)
    for reason in REASONS:
        assert allowed_disruptions(env, reason)["default"] == 10


def test_should_not_consider_nodes_that_have_the_terminating_status_condition_as_part_of_disruption_count(
    env, ten_nodes
):
    """BuildDisruptionBudgetMapping / should not consider nodes that have the terminating status condition as part of disruption count

    Upstream's InstanceTerminating condition: the NodeClaim row in state ``deleting``."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    NodeClaim.objects.filter(node_name=node).update(state=NodeClaim.State.DELETING)
    for reason in REASONS:
        assert allowed_disruptions(env, reason)["default"] == 10


def test_should_not_return_a_negative_disruption_value(env, ten_nodes):
    """BuildDisruptionBudgetMapping / should not return a negative disruption value

    Budget 10%, every node and NodeClaim being deleted."""
    env.apply(node_pool(budgets=[{"nodes": "10%"}]))
    for node in ten_nodes:
        set_node_deleting(env, node)
    for reason in REASONS:
        assert allowed_disruptions(env, reason)["default"] == 0


def test_should_consider_nodes_with_a_deletion_timestamp_set_and_markedfordeletion_to_the_disruption_count(
    env, ten_nodes
):
    """BuildDisruptionBudgetMapping / should consider nodes with a deletion timestamp set and MarkedForDeletion to the disruption count

    One node and its NodeClaim deleted, another marked for deletion (a command in progress)."""
    set_node_deleting(env, ten_nodes[0])
    mark_for_deletion(env, ten_nodes[1])
    for reason in REASONS:
        assert allowed_disruptions(env, reason)["default"] == 8


def test_should_consider_not_ready_nodes_to_the_disruption_count(env, ten_nodes):
    """BuildDisruptionBudgetMapping / should consider not ready nodes to the disruption count"""
    make_not_ready(ten_nodes[0], ten_nodes[1])
    for reason in REASONS:
        assert allowed_disruptions(env, reason)["default"] == 8


# ------------------------------------------------------------------ Pod Eviction Cost

STANDARD_POD_COST = 1.0
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
NO_DELETION_COST = (
    "karpweb's eviction cost ignores the controller.kubernetes.io/pod-deletion-cost annotation "
    "(candidates.eviction_cost is 1 + priority / 2^25 only); upstream adds deletion-cost / 2^27, so "
)


def test_should_have_a_standard_disruptioncost_for_a_pod_with_no_priority_or_disruptioncost_specified():
    """Pod Eviction Cost / should have a standard disruptionCost for a pod with no priority or disruptionCost specified"""
    assert eviction_cost(bare_pod()) == STANDARD_POD_COST


def test_should_have_a_higher_disruptioncost_for_a_pod_with_a_positive_deletion_disruptioncost():
    """Pod Eviction Cost / should have a higher disruptionCost for a pod with a positive deletion disruptionCost"""
    assert eviction_cost(bare_pod(annotations={DELETION_COST: "100"})) > STANDARD_POD_COST


def test_should_have_a_lower_disruptioncost_for_a_pod_with_a_positive_deletion_disruptioncost():
    """Pod Eviction Cost / should have a lower disruptionCost for a pod with a positive deletion disruptionCost

    (Upstream's title says positive; its pod's deletion cost is -100.)"""
    assert eviction_cost(bare_pod(annotations={DELETION_COST: "-100"})) < STANDARD_POD_COST


def test_should_have_higher_costs_for_higher_deletion_costs():
    """Pod Eviction Cost / should have higher costs for higher deletion costs"""
    costs = [eviction_cost(bare_pod(annotations={DELETION_COST: value})) for value in ("101", "100", "99")]
    assert costs[0] > costs[1] > costs[2]


def test_should_have_a_higher_disruptioncost_for_a_pod_with_a_higher_priority():
    """Pod Eviction Cost / should have a higher disruptionCost for a pod with a higher priority"""
    assert eviction_cost(bare_pod(spec={"priority": 1})) > STANDARD_POD_COST


def test_should_have_a_lower_disruptioncost_for_a_pod_with_a_lower_priority():
    """Pod Eviction Cost / should have a lower disruptionCost for a pod with a lower priority"""
    assert eviction_cost(bare_pod(spec={"priority": -1})) < STANDARD_POD_COST


# ------------------------------------------------------------------ Candidate Filtering

PDB_LABELS = {"test": "value"}
GRACE_300S = {"terminationGracePeriod": "300s"}
CLAIM_TGP = (
    "the planner reads terminationGracePeriod from the NodePool only (PoolPolicy.termination_grace_period_seconds "
    "in planner._drift_blocked), not from the NodeClaim's spec.terminationGracePeriod, which upstream's "
    "NewCandidate reads for the eventual (drift) class; with it set on the NodeClaim alone the drifted node stays "
    "blocked by its "
)


TERMINAL_AS_RUNNING = (
    "the simulated cluster's pod_manifest (provisioning/cluster/simulated.py) writes status.phase Running for every "
    "bound ClusterPod, dropping its Succeeded/Failed phase, so the picture the disruption service plans from "
    "(provision.cluster_documents) sees finished pods as running: "
)


@pytest.fixture
def pool(env: DisruptionEnv) -> None:
    """The BeforeEach: ``test.NodePool()``."""
    env.apply(node_pool())


def test_should_not_consider_candidates_that_have_do_not_disrupt_pods_scheduled_and_no_terminationgraceperiod(
    env, pool
):
    """Candidate Filtering / should not consider candidates that have do-not-disrupt pods scheduled and no terminationGracePeriod"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"})
    expect_blocked(env, node, pod, DO_NOT_DISRUPT)


def test_should_not_consider_candidates_that_have_do_not_disrupt_mirror_pods_scheduled(env, pool):
    """Candidate Filtering / should not consider candidates that have do-not-disrupt mirror pods scheduled"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, owner="Node", annotations={DO_NOT_DISRUPT: "true"})
    expect_blocked(env, node, pod, DO_NOT_DISRUPT)


def test_should_not_consider_candidates_that_have_do_not_disrupt_daemonset_pods_scheduled(env, pool):
    """Candidate Filtering / should not consider candidates that have do-not-disrupt daemonset pods scheduled"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, owner="DaemonSet", annotations={DO_NOT_DISRUPT: "true"})
    expect_blocked(env, node, pod, DO_NOT_DISRUPT)


def test_should_consider_candidates_that_have_do_not_disrupt_pods_scheduled_with_a_terminationgraceperiod_set_for_eventual_disruption(
    env, pool
):
    """Candidate Filtering / should consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set for eventual disruption

    The node's NodeClaim has terminationGracePeriod 300s (the NodePool none, as upstream); it
    has drifted: drift replaces it."""
    node = env.node(instance_type=MOST_EXPENSIVE, claim_spec=drifted_spec(**GRACE_300S))
    env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"})
    assert [c.reason for c in commands_for(env.plan(), node)] == [DRIFTED]


def test_should_consider_candidates_that_have_pdb_blocked_pods_scheduled_with_a_terminationgraceperiod_set_for_eventual_disruption(
    env, pool
):
    """Candidate Filtering / should consider candidates that have PDB-blocked pods scheduled with a terminationGracePeriod set for eventual disruption"""
    node = env.node(instance_type=MOST_EXPENSIVE, claim_spec=drifted_spec(**GRACE_300S))
    env.pod(node=node, labels=PDB_LABELS)
    env.pdb(labels=PDB_LABELS, max_unavailable=0)
    assert [c.reason for c in commands_for(env.plan(), node)] == [DRIFTED]


def test_should_not_consider_candidates_that_have_do_not_disrupt_pods_scheduled_with_a_terminationgraceperiod_set_for_graceful_disruption(
    env, pool
):
    """Candidate Filtering / should not consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set for graceful disruption"""
    node = env.node(instance_type=MOST_EXPENSIVE, claim_spec=GRACE_300S)
    pod = env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"})
    expect_blocked(env, node, pod, DO_NOT_DISRUPT)


def test_should_not_consider_candidates_that_have_pdb_blocked_pods_scheduled_with_a_terminationgraceperiod_set_for_graceful_disruption(
    env, pool
):
    """Candidate Filtering / should not consider candidates that have PDB-blocked pods scheduled with a terminationGracePeriod set for graceful disruption"""
    node = env.node(instance_type=MOST_EXPENSIVE, claim_spec=GRACE_300S)
    pod = env.pod(node=node, labels=PDB_LABELS)
    budget = env.pdb(labels=PDB_LABELS, max_unavailable=0)
    expect_blocked(env, node, budget, pod)


def test_should_not_consider_candidates_that_have_do_not_disrupt_pods_scheduled_without_a_terminationgraceperiod_set_for_eventual_disruption(
    env, pool
):
    """Candidate Filtering / should not consider candidates that have do-not-disrupt pods scheduled without a terminationGracePeriod set for eventual disruption"""
    node = env.node(instance_type=MOST_EXPENSIVE, claim_spec=drifted_spec())
    pod = env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"})
    expect_blocked(env, node, pod, DO_NOT_DISRUPT)


def test_should_not_consider_candidates_that_have_pdb_blocked_pods_scheduled_without_a_terminationgraceperiod_set_for_eventual_disruption(
    env, pool
):
    """Candidate Filtering / should not consider candidates that have PDB-blocked pods scheduled without a terminationGracePeriod set for eventual disruption"""
    node = env.node(instance_type=MOST_EXPENSIVE, claim_spec=drifted_spec())
    pod = env.pod(node=node, labels=PDB_LABELS)
    budget = env.pdb(labels=PDB_LABELS, max_unavailable=0)
    expect_blocked(env, node, budget, pod)


def test_should_consider_candidates_that_have_do_not_disrupt_terminating_pods(env, pool):
    """Candidate Filtering / should consider candidates that have do-not-disrupt terminating pods

    The node holds nothing else: it is empty, and emptiness deletes it."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"})
    set_pod_deleting(env, pod)
    found = candidate_named(env, node)
    assert found is not None and found.blocked_by is None
    assert commands_for(env.plan(), node)


def test_should_consider_candidates_that_have_do_not_disrupt_terminal_pods(env, pool):
    """Candidate Filtering / should consider candidates that have do-not-disrupt terminal pods

    A Succeeded and a Failed pod with do-not-disrupt: the node is a candidate (and, holding
    nothing that runs, empty)."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"}, phase="Succeeded")
    env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"}, phase="Failed")
    found = candidate_named(env, node)
    assert found is not None and found.blocked_by is None
    assert commands_for(env.plan(), node)


def test_should_not_consider_candidates_that_have_do_not_disrupt_on_nodes(env, pool):
    """Candidate Filtering / should not consider candidates that have do-not-disrupt on nodes

    The annotation on the NodeClaim and its Node (``test.NodeClaimAndNode`` gives both)."""
    annotations = {DO_NOT_DISRUPT: "true"}
    node = env.node(instance_type=MOST_EXPENSIVE, annotations=annotations, claim_annotations=annotations)
    expect_blocked(env, node, DO_NOT_DISRUPT)


def test_should_not_consider_candidates_that_have_multiple_pdbs_on_the_same_pod(env, pool):
    """Candidate Filtering / should not consider candidates that have multiple PDBs on the same pod"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, labels=PDB_LABELS)
    first = env.pdb("pdb1", labels=PDB_LABELS, max_unavailable=0)
    second = env.pdb("pdb2", labels=PDB_LABELS, max_unavailable=0)
    expect_blocked(env, node, pod, first, second)
    events = blocked_events(env)
    assert len(events) == 2  # the same event on the Node and on the NodeClaim
    assert {e.involved.kind for e in events} == {"Node", "NodeClaim"}
    assert all(first in e.message and second in e.message for e in events)


def test_should_not_consider_candidates_that_have_fully_blocking_pdbs(env, pool):
    """Candidate Filtering / should not consider candidates that have fully blocking PDBs"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, labels=PDB_LABELS)
    budget = env.pdb(labels=PDB_LABELS, max_unavailable=0)
    expect_blocked(env, node, budget, pod)


def test_should_not_consider_candidates_that_have_fully_blocking_pdbs_on_daemonset_pods(env, pool):
    """Candidate Filtering / should not consider candidates that have fully blocking PDBs on daemonset pods"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, owner="DaemonSet", labels=PDB_LABELS)
    budget = env.pdb(labels=PDB_LABELS, max_unavailable=0)
    expect_blocked(env, node, budget, pod)


def test_should_consider_candidates_that_have_fully_blocking_pdbs_on_mirror_pods(env, pool):
    """Candidate Filtering / should consider candidates that have fully blocking PDBs on mirror pods

    A static pod is not evicted, so its PodDisruptionBudget does not block; the node runs
    nothing else and is deleted as empty."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    env.pod(node=node, owner="Node", labels=PDB_LABELS)
    env.pdb(labels=PDB_LABELS, max_unavailable=0)
    found = candidate_named(env, node)
    assert found is not None and found.blocked_by is None
    assert commands_for(env.plan(), node)


def test_should_not_consider_candidates_that_have_do_not_disrupt_pods_without_a_terminationgraceperiod_set_for_graceful_disruption(
    env, pool
):
    """Candidate Filtering / should not consider candidates that have do-not-disrupt pods without a terminationGracePeriod set for graceful disruption"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"})
    expect_blocked(env, node, pod, DO_NOT_DISRUPT)


def test_should_not_consider_candidates_that_have_fully_blocking_pdbs_without_a_terminationgraceperiod_set_for_graceful_disruption(
    env, pool
):
    """Candidate Filtering / should not consider candidates that have fully blocking PDBs without a terminationGracePeriod set for graceful disruption"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, labels=PDB_LABELS)
    budget = env.pdb(labels=PDB_LABELS, max_unavailable=0)
    expect_blocked(env, node, budget, pod)


def test_should_consider_candidates_that_have_fully_blocking_pdbs_on_terminal_pods(env, pool):
    """Candidate Filtering / should consider candidates that have fully blocking PDBs on terminal pods"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    env.pod(node=node, labels=PDB_LABELS, phase="Succeeded")
    env.pod(node=node, labels=PDB_LABELS, phase="Failed")
    env.pdb(labels=PDB_LABELS, max_unavailable=0)
    found = candidate_named(env, node)
    assert found is not None and found.blocked_by is None
    assert commands_for(env.plan(), node)


def test_should_consider_candidates_that_have_fully_blocking_pdbs_on_terminating_pods(env, pool):
    """Candidate Filtering / should consider candidates that have fully blocking PDBs on terminating pods"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    pod = env.pod(node=node, labels=PDB_LABELS)
    env.pdb(labels=PDB_LABELS, max_unavailable=0)
    set_pod_deleting(env, pod)
    found = candidate_named(env, node)
    assert found is not None and found.blocked_by is None
    assert commands_for(env.plan(), node)


def test_should_not_consider_candidates_that_has_just_a_node_representation(env, pool):
    """Candidate Filtering / should not consider candidates that has just a Node representation

    A Node with the NodePool label and no NodeClaim ("node isn't managed by karpenter")."""
    node = bare_node(env)
    seen = picture(env)
    assert node not in {c.name for c in seen.candidates}
    assert "NodeClaim" in seen.left_out[node]
    assert node not in chosen(env.plan())


def test_should_not_consider_candidate_that_has_just_a_nodeclaim_representation(env, pool):
    """Candidate Filtering / should not consider candidate that has just a NodeClaim representation

    A NodeClaim launched whose Node never registered ("nodeclaim does not have an associated
    node"): not a candidate, and the reason says it has no Node."""
    claim = NodeClaim.objects.create(
        name=name("claim"),
        nodepool_name="default",
        nodeclass_name="default",
        state=NodeClaim.State.LAUNCHED,
        instance_type=MOST_EXPENSIVE,
        zone=ZONE_1,
        capacity_type="on-demand",
        price_per_hour=env.price(MOST_EXPENSIVE),
        instance_id="i-0000000000000abcd",
        launch_options=[{"instanceType": MOST_EXPENSIVE, "zone": ZONE_1, "capacityType": "on-demand", "price": 1.0}],
        launched_at=env.now,
    )
    seen = picture(env)
    assert claim.name not in {c.name for c in seen.candidates}
    assert claim.name not in {c.nodeclaim for c in seen.candidates}
    assert claim.name not in chosen(env.plan())
    why = seen.left_out.get(claim.name, "")
    assert re.search(r"\b(no|without an?|no associated) node\b|not registered", why, re.I), why


def test_should_not_consider_candidates_that_are_nominated(env, pool):
    """Candidate Filtering / should not consider candidates that are nominated

    A dear empty node just registered, with a pending pod nominated to its NodeClaim (the
    provisioner planned the pod there; the scheduler has not bound it yet)."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    claim = ClusterNode.objects.get(name=node).nodeclaim
    NodeClaim.objects.filter(name=claim).update(registered_at=timezone.now())
    pod = env.pod()
    namespace, pod_name = pod.split("/")
    ClusterPod.objects.filter(namespace=namespace, name=pod_name).update(nominated=claim)
    expect_blocked(env, node, "nominated")


def test_should_not_consider_candidates_that_are_deleting(env, pool):
    """Candidate Filtering / should not consider candidates that are deleting

    Its NodeClaim is being deleted (state ``deleting``); the node is empty, so emptiness would
    take it were it a candidate. The reason says it is being deleted."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    NodeClaim.objects.filter(node_name=node).update(state=NodeClaim.State.DELETING)
    seen = picture(env)
    assert node not in {c.name for c in seen.candidates if not c.disrupting}
    result = env.plan()
    assert node not in chosen(result)
    why = seen.left_out.get(node) or result.not_candidates.get(node, "")
    assert re.search(r"delet", why, re.I), why


def test_should_not_consider_candidates_that_are_markedfordeletion(env, pool):
    """Candidate Filtering / should not consider candidates that are MarkedForDeletion

    Its node is draining for a command in progress."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    mark_for_deletion(env, node)
    found = candidate_named(env, node)
    assert found is not None and found.disrupting
    result = env.plan()
    assert node not in chosen(result)
    assert "already being disrupted" in result.not_candidates[node]


def test_should_not_consider_candidates_that_aren_t_yet_initialized(env, pool):
    """Candidate Filtering / should not consider candidates that aren't yet initialized"""
    node = env.node(instance_type=MOST_EXPENSIVE, initialized=False)
    result = env.plan()
    assert node not in chosen(result)
    assert "not initialized" in result.not_candidates[node]


def test_should_not_consider_candidates_that_are_not_owned_by_a_nodepool_no_karpenter_sh_nodepool_label(env, pool):
    """Candidate Filtering / should not consider candidates that are not owned by a NodePool (no karpenter.sh/nodepool label)"""
    node = env.node(instance_type=MOST_EXPENSIVE)
    drop_node_labels(node, NODEPOOL)
    seen = picture(env)
    assert node not in {c.name for c in seen.candidates}
    assert NODEPOOL in seen.left_out[node]
    assert node not in chosen(env.plan())
    assert any(e.involved.name == node and NODEPOOL in e.message for e in env.cluster.events)


def test_should_not_consider_candidates_that_are_have_a_non_existent_nodepool(env, pool):
    """Candidate Filtering / should not consider candidates that are have a non-existent NodePool"""
    node = env.node(instance_type=MOST_EXPENSIVE, nodepool="ghost")
    result = env.plan()
    assert node not in chosen(result)
    assert "ghost" in result.not_candidates[node]
    assert any(e.involved.name == node and "ghost" in e.message for e in env.cluster.events)


def _missing_label(env: DisruptionEnv, label: str) -> None:
    node = env.node(instance_type=MOST_EXPENSIVE)
    drop_node_labels(node, label)
    found = candidate_named(env, node)
    assert found is not None and found.blocked_by is None
    assert commands_for(env.plan(), node)  # empty: deleted


def test_should_consider_candidates_that_do_not_have_the_karpenter_sh_capacity_type_label(env, pool):
    """Candidate Filtering / should consider candidates that do not have the karpenter.sh/capacity-type label"""
    _missing_label(env, CAPACITY_TYPE)


def test_should_consider_candidates_that_do_not_have_the_topology_kubernetes_io_zone_label(env, pool):
    """Candidate Filtering / should consider candidates that do not have the topology.kubernetes.io/zone label"""
    _missing_label(env, ZONE)


def test_should_consider_candidates_that_do_not_have_the_node_kubernetes_io_instance_type_label(env, pool):
    """Candidate Filtering / should consider candidates that do not have the node.kubernetes.io/instance-type label"""
    _missing_label(env, INSTANCE_TYPE)


def test_should_consider_candidates_that_have_an_instance_type_that_cannot_be_resolved(env, pool):
    """Candidate Filtering / should consider candidates that have an instance type that cannot be resolved

    Upstream removes the node's type from the NodePool's instance types; here the NodePool
    stops offering it (a requirement leaving it out)."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    env.apply(node_pool(requirements=[{"key": INSTANCE_TYPE, "operator": "NotIn", "values": [MOST_EXPENSIVE]}]))
    found = candidate_named(env, node)
    assert found is not None and found.blocked_by is None
    assert commands_for(env.plan(), node)


def test_should_not_consider_candidates_that_are_actively_being_processed_in_the_queue(env, pool):
    """Candidate Filtering / should not consider candidates that are actively being processed in the queue

    A drift command naming the node has just been started (karpweb's queue entry: a planned
    Disruption row)."""
    node = env.node(instance_type=MOST_EXPENSIVE)
    command = mark_for_deletion(env, node, state=Disruption.State.PLANNED)
    Disruption.objects.filter(pk=command.pk).update(reason=DRIFTED)
    found = candidate_named(env, node)
    assert found is not None and found.disrupting
    result = env.plan()
    assert node not in chosen(result)
    assert "already being disrupted" in result.not_candidates[node]


# ------------------------------------------------------------------ Metrics



def started(env: DisruptionEnv) -> None:
    """One upstream reconcile: the round that plans, and the one 15 s later that starts it."""
    env.step()
    env.step()


ON_DEMAND = {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
SMALL_POD = {"cpu": "50m", "memory": "64Mi"}  # upstream's test.Pods() request nothing; four fit a t4g.micro


def test_should_fire_metrics_for_single_node_empty_disruption(env):
    """Metrics / should fire metrics for single node empty disruption"""
    env.apply(node_pool(requirements=[ON_DEMAND]))
    env.node(instance_type=LEAST_EXPENSIVE)
    started(env)
    expect_decision_metrics({"decision": "delete", "reason": "empty", "consolidation_type": "empty"})


def test_should_fire_metrics_for_single_node_delete_disruption(env):
    """Metrics / should fire metrics for single node delete disruption

    Two nodes with two pods each, the first drifted: its pods fit on the second, so drift
    deletes it without a replacement. (Upstream also clears the second's Consolidatable
    condition; drift is tried before consolidation here as there, so it changes nothing.)"""
    env.apply(node_pool(requirements=[ON_DEMAND]))
    first = env.node(instance_type=LEAST_EXPENSIVE, claim_spec=drifted_spec())
    second = env.node(instance_type=LEAST_EXPENSIVE)
    env.pods(2, node=first, **SMALL_POD)
    env.pods(2, node=second, **SMALL_POD)
    started(env)
    expect_decision_metrics({"decision": "delete", "reason": "drifted"})


def test_should_fire_metrics_for_single_node_replace_disruption(env):
    """Metrics / should fire metrics for single node replace disruption

    A drifted node with four pods: drift replaces it (there is no other node to take them)."""
    env.apply(node_pool(requirements=[ON_DEMAND]))
    node = env.node(instance_type=LEAST_EXPENSIVE, claim_spec=drifted_spec())
    env.pods(4, node=node, **SMALL_POD)
    started(env)
    expect_decision_metrics({"decision": "replace", "reason": "drifted"})


def test_should_fire_metrics_for_multi_node_empty_disruption(env):
    """Metrics / should fire metrics for multi-node empty disruption"""
    env.apply(node_pool(requirements=[ON_DEMAND]))
    for _ in range(3):
        env.node(instance_type=LEAST_EXPENSIVE)
    started(env)
    expect_decision_metrics({"decision": "delete", "reason": "empty", "consolidation_type": "empty"})


def test_should_fire_metrics_for_multi_node_delete_disruption(env):
    """Metrics / should fire metrics for multi-node delete disruption

    Three of the cheapest nodes with a pod each (a fourth pod pending, as upstream leaves it):
    two are deleted, their pods fit on the third, and no cheaper type holds them all."""
    env.apply(node_pool(requirements=[ON_DEMAND]))
    nodes = [env.node(instance_type=LEAST_EXPENSIVE) for _ in range(3)]
    for node in nodes:
        env.pod(node=node, labels={"app": "test"}, **SMALL_POD)
    env.pod(labels={"app": "test"}, **SMALL_POD)
    started(env)
    expect_decision_metrics({"decision": "delete", "reason": "underutilized", "consolidation_type": "multi"})


def test_should_fire_metrics_for_multi_node_replace_disruption(env):
    """Metrics / should fire metrics for multi-node replace disruption

    Three dear nodes with four pods between them: one cheaper node replaces all three."""
    env.apply(node_pool(requirements=[ON_DEMAND]))
    nodes = [env.node(instance_type=MOST_EXPENSIVE) for _ in range(3)]
    env.pod(node=nodes[0], labels={"app": "test"}, **SMALL_POD)
    env.pod(node=nodes[1], labels={"app": "test"}, **SMALL_POD)
    env.pods(2, node=nodes[2], labels={"app": "test"}, **SMALL_POD)
    started(env)
    expect_decision_metrics({"decision": "replace", "reason": "underutilized", "consolidation_type": "multi"})
