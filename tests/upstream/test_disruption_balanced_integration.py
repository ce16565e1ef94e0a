"""Upstream's Balanced consolidation integration tests (``pkg/controllers/disruption/balanced_integration_test.go``), ported.

Upstream runs its disruption controller over NodePools with ``consolidationPolicy: Balanced``
and reads the commands it queued, their decision and savings, and the ConsolidationApproved
events the scoring recorded. Here the rounds are the real disruption service on the simulated
cluster (``disruption_env.py``):

* ``ExpectSingletonReconciled(disruptionController)`` then ``queue.GetCommands()`` is one round
  (``reconcile``) and the commands it planned (upstream's suite validates at once; a command
  here is re-checked 15 s later, in the rounds that carry it out);
* ``ExpectMakeNewNodeClaimsReady``, ``ExpectObjectReconciled(queue, ...)`` and
  ``ExpectNodeClaimsCascadeDeletion`` are ``carry_out``: the commands' later steps, 16 s apart,
  the replacements launching and initializing at once, until every command is done;
  ``ExpectNodeClaims`` counts the NodeClaims not terminated;
* a command's ``Decision()`` is delete without replacements, replace with them, and
  ``EstimatedSavings()`` its ``savings_per_hour``;
* the recorder is ``env.cluster.events``: a ConsolidationApproved event is recorded when the
  round plans a consolidation a Balanced NodePool scored (on the node and its NodeClaim when
  it goes alone, on the NodePool when several go), worded as upstream's;
* the Describe's NodePool is Balanced, a 100% budget, consolidateAfter 0s; the ReplicaSet's
  pods are ``env.pod``'s (owned by a ReplicaSet).

Instance types: ``mostExpensiveInstance`` is m5.8xlarge on demand in us-east-1a (32 vCPUs);
where a test needs a node with no cheaper way to hold its pods ("well-packed", and the node
that takes the deleted node's pod), it is c6g.8xlarge, the cheapest on-demand type with 32
vCPUs, in a NodePool restricted to on-demand capacity (upstream's fake types price spot as
on-demand; real spot is cheaper, which would make every node replaceable). The ratio sort's
expensive, moderate and cheap on-demand types are m5.8xlarge, m5.4xlarge and m5.xlarge.
"""

from __future__ import annotations

from typing import Any

import pytest
from disruption_env import ZONE_1, DisruptionEnv, node_pool

from provisioning.disruption.model import BALANCED, WHEN_EMPTY_OR_UNDERUTILIZED
from provisioning.models import ClusterNode, Disruption, NodeClaim
from provisioning.services import disruption as service

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/balanced_integration_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {}

MOST_EXPENSIVE = "m5.8xlarge"
PACKED = "c6g.8xlarge"  # the cheapest on-demand type of 32 vCPUs
ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABELS = {"app": "balanced-test"}


@pytest.fixture
def env(disruption_env: DisruptionEnv) -> DisruptionEnv:
    return disruption_env


def balanced_pool(pool_name: str = "default", **options: Any) -> dict[str, Any]:
    """The Describe's NodePool: Balanced, a 100% budget, consolidateAfter 0s."""
    options.setdefault("consolidation_policy", BALANCED)
    return node_pool(pool_name, **options)


def reconcile(env: DisruptionEnv) -> list[Disruption]:
    """``ExpectSingletonReconciled`` and ``queue.GetCommands()``: one round, its commands."""
    env.step()
    return env.disruptions()


def carry_out(env: DisruptionEnv, commands: list[Disruption], max_rounds: int = 10) -> list[Disruption]:
    """The commands' later steps (re-check, replacements launched and initialized, drain,
    termination), 16 s apart and planning nothing new, until each is done or cancelled."""
    for _ in range(max_rounds):
        for d in commands:
            d.refresh_from_db()
        if all(d.state not in service.ACTIVE for d in commands):
            break
        for d in commands:
            if d.state in service.ACTIVE:
                service.advance(d, env.now)
        env.launch_and_register()
        env.advance(16)
    return commands


def live_claims() -> list[NodeClaim]:
    return list(NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES))


def claim_of(node: str) -> str:
    return ClusterNode.objects.get(name=node).nodeclaim


def approved_events(env: DisruptionEnv) -> list:
    return [e for e in env.cluster.events if e.reason == "ConsolidationApproved"]


def decision(command: Disruption) -> str:
    return "replace" if command.replacement_plan else "delete"


# ------------------------------------------------------------------ Single-Node


def test_should_approve_replacing_an_oversized_node(env):
    """Balanced Consolidation / Single-Node / should approve replacing an oversized node

    The most expensive node with one 500m pod: replaced by a cheaper one."""
    env.apply(balanced_pool())
    node = env.node(instance_type=MOST_EXPENSIVE, zone=ZONE_1)
    claim = claim_of(node)
    env.pod(node=node, cpu="500m", labels=LABELS)
    commands = reconcile(env)
    assert len(commands) == 1
    carry_out(env, commands)
    (remaining,) = live_claims()
    assert remaining.name != claim
    (allowed,) = [r for r in remaining.spec["requirements"] if r["key"] == INSTANCE_TYPE]
    assert allowed["operator"] == "In" and MOST_EXPENSIVE not in allowed["values"]
    assert len(approved_events(env)) >= 1
    assert any("k: 2" in e.message and ">= threshold 0.50" in e.message for e in approved_events(env)), [
        e.message for e in approved_events(env)
    ]


def test_should_reject_replacing_a_well_packed_node(env):
    """Balanced Consolidation / Single-Node / should reject replacing a well-packed node

    Eight 3.5-cpu pods on the cheapest type that holds them (c6g.8xlarge, on demand): there is
    no cheaper option."""
    env.apply(balanced_pool(requirements=[ON_DEMAND]))
    node = env.node(instance_type=PACKED, zone=ZONE_1)
    env.pods(8, node=node, cpu="3500m", labels=LABELS)
    assert reconcile(env) == []
    assert approved_events(env) == []


# ------------------------------------------------------------------ Multi-Node


def test_should_approve_consolidating_multiple_underutilized_nodes(env):
    """Balanced Consolidation / Multi-Node / should approve consolidating multiple underutilized nodes

    Three of the most expensive nodes with one 1-cpu pod each."""
    env.apply(balanced_pool())
    nodes = [env.node(instance_type=MOST_EXPENSIVE, zone=ZONE_1) for _ in range(3)]
    for node in nodes:
        env.pod(node=node, cpu="1", labels=LABELS)
    commands = reconcile(env)
    assert len(commands) == 1
    assert len(commands[0].nodes) >= 2
    carry_out(env, commands)
    assert len(live_claims()) < 3


# ------------------------------------------------------------------ Budgets


def test_should_block_disruption_when_budget_is_0(env):
    """Balanced Consolidation / Budgets / should block disruption when budget is 0%

    The oversized node of the first test, which scoring would approve."""
    env.apply(balanced_pool(budgets=[{"nodes": "0%"}]))
    node = env.node(instance_type=MOST_EXPENSIVE, zone=ZONE_1)
    env.pod(node=node, cpu="500m", labels=LABELS)
    assert reconcile(env) == []
    assert approved_events(env) == []


# ------------------------------------------------------------------ Priority Ordering


def test_should_consolidate_empty_nodes_before_non_empty_nodes_when_budget_is_limited(env):
    """Balanced Consolidation / Priority Ordering / should consolidate empty nodes before non-empty nodes when budget is limited"""
    env.apply(balanced_pool(budgets=[{"nodes": "1"}]))
    empty = env.node(instance_type=MOST_EXPENSIVE, zone=ZONE_1)
    underutilized = env.node(instance_type=MOST_EXPENSIVE, zone=ZONE_1)
    env.pod(node=underutilized, cpu="500m", labels=LABELS)
    commands = reconcile(env)
    assert len(commands) == 1, "expected exactly 1 disruption command due to budget of 1"
    assert empty in commands[0].nodes
    assert underutilized not in commands[0].nodes


# ------------------------------------------------------------------ Decision and Savings


def test_should_choose_delete_when_pods_fit_on_existing_nodes(env):
    """Balanced Consolidation / Decision and Savings / should choose delete when pods fit on existing nodes

    Two c6g.8xlarge (31.85 cpu allocatable): A with one 1-cpu pod, B with thirty. A's pod fits
    on B, and no single cheaper node holds all 31 pods, so A is deleted."""
    env.apply(balanced_pool(requirements=[ON_DEMAND]))
    node_a = env.node(instance_type=PACKED, zone=ZONE_1)
    node_b = env.node(instance_type=PACKED, zone=ZONE_1)
    env.pod(node=node_a, cpu="1", labels=LABELS)
    env.pods(30, node=node_b, cpu="1", labels=LABELS)
    commands = reconcile(env)
    assert commands
    deletes = [c for c in commands if decision(c) == "delete"]
    assert deletes, "expected at least one delete command"
    assert float(deletes[0].savings_per_hour) == pytest.approx(env.price(PACKED), abs=0.01)


def test_should_choose_replace_when_pods_need_a_new_cheaper_node(env):
    """Balanced Consolidation / Decision and Savings / should choose replace when pods need a new cheaper node"""
    env.apply(balanced_pool())
    node_a = env.node(instance_type=MOST_EXPENSIVE, zone=ZONE_1)
    env.pod(node=node_a, cpu="2", labels=LABELS)
    (command,) = reconcile(env)
    assert decision(command) == "replace"
    assert float(command.savings_per_hour) > 0
    assert float(command.savings_per_hour) < env.price(MOST_EXPENSIVE)


# ------------------------------------------------------------------ Ratio Sort in Multi-Node


def test_should_select_highest_ratio_candidates_first_when_nodes_have_heterogeneous_prices_and_pod_counts(env):
    """Balanced Consolidation / Ratio Sort in Multi-Node / should select highest-ratio candidates first when nodes have heterogeneous prices and pod counts

    A: m5.8xlarge ($1.536/h) with ten 100m pods (ratio 1.536/11); B: m5.4xlarge ($0.768/h) with
    one (0.768/2, the highest); C: m5.xlarge ($0.192/h) with eight (0.192/9, the lowest)."""
    env.apply(balanced_pool())
    node_a = env.node(instance_type="m5.8xlarge", zone=ZONE_1)
    node_b = env.node(instance_type="m5.4xlarge", zone=ZONE_1)
    node_c = env.node(instance_type="m5.xlarge", zone=ZONE_1)
    env.pods(10, node=node_a, cpu="100m", labels=LABELS)
    env.pod(node=node_b, cpu="100m", labels=LABELS)
    env.pods(8, node=node_c, cpu="100m", labels=LABELS)
    commands = reconcile(env)
    assert commands, "expected at least one consolidation command"
    candidates = commands[0].nodes
    assert node_b in candidates, "expected Node B (highest ratio) to be in the command"
    if node_c in candidates:
        assert candidates.index(node_b) < candidates.index(node_c)


# ------------------------------------------------------------------ Mixed-Policy NodePools


def test_should_apply_scoring_to_balanced_pools_while_non_balanced_pools_consolidate_normally(env):
    """Balanced Consolidation / Mixed-Policy NodePools / should apply scoring to Balanced pools while non-Balanced pools consolidate normally"""
    env.apply(balanced_pool("balanced"), node_pool("default", consolidation_policy=WHEN_EMPTY_OR_UNDERUTILIZED))
    balanced_node = env.node(nodepool="balanced", instance_type=MOST_EXPENSIVE, zone=ZONE_1)
    default_node = env.node(nodepool="default", instance_type=MOST_EXPENSIVE, zone=ZONE_1)
    balanced_claim, default_claim = claim_of(balanced_node), claim_of(default_node)
    env.pod(node=balanced_node, cpu="500m", labels=LABELS)
    env.pod(node=default_node, cpu="500m", labels=LABELS)
    commands = reconcile(env)
    assert commands, "expected at least one consolidation command"
    carry_out(env, commands)
    remaining = {c.name for c in live_claims()}
    assert balanced_claim not in remaining
    assert default_claim not in remaining
    assert [e for e in approved_events(env) if "k: 2" in e.message], "expected the Balanced pool's scored event"
