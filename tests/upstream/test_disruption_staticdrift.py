"""Upstream's static drift tests (``pkg/controllers/disruption/staticdrift_test.go``), on the
real rounds (``disruption_env.py``).

Upstream's ``StaticDrift`` method replaces the drifted nodes of a static NodePool
(``spec.replicas``) one for one, each by a NodeClaim made from the NodePool's template with no
scheduling simulation, within the pool's Drifted budget and its ``limits.nodes``, and not while
the pool runs more nodes than its replicas. karpweb's planner does the same in its drift step
(``planner._static_drift``, ``disruption.static.drift_replacements``): each drifted node gets a
command of its own, whose replacement is a claim of the template (``scheduling.static``), and
the command waits for it to initialize before the node drains, as every drift command.

A round here is upstream's ``ExpectSingletonReconciled(disruptionController)``: it plans the
commands; the next round, 15 s later, re-checks and starts them (upstream's suite validates at
once), and ``env.settle`` runs them to their end (upstream's ``ExpectMakeNewNodeClaimsReady``
and the queue's reconcile). Upstream's ``ExpectStateNodePoolCount(pool, running, deleting,
pendingDisruption)`` is the pool's live NodeClaims, those deleting, and the nodes an active
command names; its NodePoolAllowedDisruptions gauge is the commands a round plans.

Upstream's ``test.StaticNodePool`` is ``node_pool`` with ``spec.replicas`` and no limits but
``limits.nodes``; its NodePool defaults consolidateAfter to 0s, so its empty nodes would be
consolidatable were the pool not static. ``mostExpensiveInstance`` is m5.8xlarge on demand in
us-east-1a.
"""

from __future__ import annotations

from typing import Any

import pytest
from disruption_env import DO_NOT_DISRUPT, ZONE_1, DisruptionEnv, node_pool

from provisioning.models import Disruption, NodeClaim
from provisioning.services import disruption as service

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/staticdrift_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {}

MOST_EXPENSIVE = "m5.8xlarge"


@pytest.fixture
def env(disruption_env: DisruptionEnv) -> DisruptionEnv:
    return disruption_env


def static_pool(replicas: int, name: str = "static", **options: Any) -> dict[str, Any]:
    """``test.StaticNodePool``: ``spec.replicas``, a 100% budget, consolidateAfter 0s."""
    pool = node_pool(name, **options)
    pool["spec"]["replicas"] = replicas
    return pool


def static_node(env: DisruptionEnv, *, drifted: bool, nodepool: str = "static", **options: Any) -> str:
    """The BeforeEach's NodeClaim and Node, initialized; ``drifted``: its NodeClaim records a
    stale NodePool hash (upstream's Drifted condition True), else the pool's own (no condition,
    or the condition False: karpweb's drift is computed, not a condition to set)."""
    node = env.node(nodepool=nodepool, instance_type=MOST_EXPENSIVE, zone=ZONE_1, **options)
    if drifted:
        claim = NodeClaim.objects.get(node_name=node)
        claim.spec = {**claim.spec, "driftHashes": {**claim.spec["driftHashes"], "nodepool": "stale"}}
        claim.save(update_fields=["spec"])
    return node


def reconcile(env: DisruptionEnv) -> None:
    """``ExpectSingletonReconciled(disruptionController)``: the round that plans and the one
    15 s later that would start what it planned (upstream's suite validates at once)."""
    env.step()
    env.step()


def expect_no_commands(env: DisruptionEnv) -> None:
    """``queue.GetCommands()`` is empty: no round planned a command, and none plans one now."""
    assert env.disruptions() == []
    assert env.plan().commands == ()


def expect_pool_count(running: int, deleting: int, pending_disruption: int, nodepool: str = "static") -> None:
    """``ExpectStateNodePoolCount``."""
    claims = NodeClaim.objects.filter(nodepool_name=nodepool)
    assert claims.filter(state__in=NodeClaim.ACTIVE_STATES).count() == running
    assert claims.filter(state=NodeClaim.State.DELETING).count() == deleting
    names = set(claims.values_list("node_name", flat=True))
    disrupting = {n for d in Disruption.objects.filter(state__in=service.ACTIVE) for n in d.nodes if n in names}
    assert len(disrupting) == pending_disruption


def plan_round(env: DisruptionEnv) -> list[Disruption]:
    """One round: the commands it planned (upstream's ``queue.GetCommands()``)."""
    env.step()
    return env.disruptions(Disruption.State.PLANNED)


def pools_of(commands: list[Disruption]) -> dict[str, int]:
    out: dict[str, int] = {}
    for command in commands:
        pool = NodeClaim.objects.get(name=command.nodeclaims[0]).nodepool_name
        out[pool] = out.get(pool, 0) + 1
    return out


def expect_replaced_one_for_one(env: DisruptionEnv, commands: list[Disruption], nodepool: str = "static") -> None:
    """Each command names one drifted node and plans one claim of the pool's template."""
    for command in commands:
        assert command.reason == "Drifted" and len(command.nodes) == 1
        [replacement] = command.replacement_plan
        assert replacement["pods"] == 0


def drifted_left(nodepool: str = "static") -> int:
    return sum(
        1
        for c in NodeClaim.objects.filter(nodepool_name=nodepool, state__in=NodeClaim.ACTIVE_STATES)
        if c.spec.get("driftHashes", {}).get("nodepool") == "stale"
    )


# ------------------------------------------------------------------ Edge Cases


def test_should_handle_zero_replicas(env):
    """StaticDrift / Edge Cases / should handle zero replicas

    A drifted node in a pool of replicas 0: the pool runs more nodes than it wants, so
    nothing is replaced."""
    env.apply(static_pool(0))
    static_node(env, drifted=True)
    reconcile(env)
    expect_no_commands(env)


def test_should_ignore_nodes_without_the_drifted_status_condition(env):
    """StaticDrift / Edge Cases / should ignore nodes without the drifted status condition"""
    env.apply(static_pool(1))
    static_node(env, drifted=False)
    reconcile(env)
    expect_pool_count(1, 0, 0)
    expect_no_commands(env)


def test_should_ignore_nodes_with_the_drifted_status_condition_set_to_false(env):
    """StaticDrift / Edge Cases / should ignore nodes with the drifted status condition set to false"""
    env.apply(static_pool(1))
    static_node(env, drifted=False)
    reconcile(env)
    expect_pool_count(1, 0, 0)
    expect_no_commands(env)


def test_should_ignore_nodes_with_the_karpenter_sh_do_not_disrupt_annotation(env):
    """StaticDrift / Edge Cases / should ignore nodes with the karpenter.sh/do-not-disrupt annotation"""
    env.apply(static_pool(1))
    static_node(env, drifted=False, annotations={DO_NOT_DISRUPT: "true"})
    reconcile(env)
    expect_pool_count(1, 0, 0)
    expect_no_commands(env)


def test_should_handle_missing_node_limits_gracefully(env):
    """StaticDrift / Edge Cases / should handle missing node limits gracefully

    Five drifted nodes, replicas 5, no limits: all five are replaced."""
    env.apply(static_pool(5))
    for _ in range(5):
        static_node(env, drifted=True)
    commands = plan_round(env)
    assert len(commands) == 5
    expect_replaced_one_for_one(env, commands)
    expect_pool_count(5, 0, 5)


# ------------------------------------------------------------------ Budgets


def drifted_pool(env: DisruptionEnv, replicas: int, count: int, name: str = "static", **options: Any) -> None:
    env.apply(static_pool(replicas, name, **options))
    for _ in range(count):
        static_node(env, drifted=True, nodepool=name)


def test_should_respect_disruption_budgets_nodes_count_for_static_drift(env):
    """StaticDrift / Budgets / should respect disruption budgets (Nodes Count) for static drift

    Five drifted nodes, a Drifted budget of 2: two commands, and once they are done the pool
    has its five nodes, three of them still drifted (the next rounds take them)."""
    drifted_pool(env, 5, 5, budgets=[{"nodes": "2", "reasons": ["Drifted"]}])
    commands = plan_round(env)
    assert len(commands) == 2
    expect_replaced_one_for_one(env, commands)
    expect_pool_count(5, 0, 2)
    env.settle()
    assert [d.state for d in env.disruptions()] == [Disruption.State.DONE] * 2
    expect_pool_count(5, 0, 0)
    assert drifted_left() == 3


def test_should_respect_disruption_budgets_nodes_percentage_for_static_drift(env):
    """StaticDrift / Budgets / should respect disruption budgets (Nodes Percentage) for static drift"""
    drifted_pool(env, 5, 5, budgets=[{"nodes": "20%", "reasons": ["Drifted"]}])
    commands = plan_round(env)
    assert len(commands) == 1
    expect_pool_count(5, 0, 1)
    env.settle()
    expect_pool_count(5, 0, 0)
    assert drifted_left() == 4


def test_should_respect_budgets_for_multiple_static_nodepools(env):
    """StaticDrift / Budgets / should respect budgets for multiple static nodepools

    Three static NodePools of two drifted nodes each, with Drifted budgets of 1, 2 and 100%:
    1, 2 and 2 commands."""
    drifted_pool(env, 4, 2, "static-nodepool-1", budgets=[{"nodes": "1", "reasons": ["Drifted"]}])
    drifted_pool(env, 3, 2, "static-nodepool-2", budgets=[{"nodes": "2", "reasons": ["Drifted"]}])
    drifted_pool(env, 2, 2, "static-nodepool-3", budgets=[{"nodes": "100%", "reasons": ["Drifted"]}])
    commands = plan_round(env)
    assert pools_of(commands) == {"static-nodepool-1": 1, "static-nodepool-2": 2, "static-nodepool-3": 2}
    env.settle()
    for name in ("static-nodepool-1", "static-nodepool-2", "static-nodepool-3"):
        expect_pool_count(2, 0, 0, name)
    assert NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES).count() == 6


# ------------------------------------------------------------------ Limits and Scaling


def test_should_not_drift_nodes_when_we_cannot_acquire_limits(env):
    """StaticDrift / Limits and Scaling / should not drift nodes when we cannot acquire limits

    Five drifted nodes, replicas 5, limits.nodes 5: no room for a replacement."""
    drifted_pool(env, 5, 5, limits={"nodes": "5"})
    assert plan_round(env) == []
    expect_pool_count(5, 0, 0)
    assert "limits.nodes 5" in env.note(next(iter(env.node_names())))


def test_should_drift_nodes_when_we_can_acquire_limits(env):
    """StaticDrift / Limits and Scaling / should drift nodes when we can acquire limits

    Two drifted nodes, replicas 5, limits.nodes 5: both are replaced."""
    drifted_pool(env, 5, 2, limits={"nodes": "5"})
    commands = plan_round(env)
    assert len(commands) == 2
    env.settle()
    expect_pool_count(2, 0, 0)
    assert drifted_left() == 0


def test_should_drift_partially_when_we_can_acquire_some_limits(env):
    """StaticDrift / Limits and Scaling / should drift partially when we can acquire some limits

    Five drifted nodes, replicas 5, limits.nodes 7: room for two replacements."""
    drifted_pool(env, 5, 5, limits={"nodes": "7"})
    commands = plan_round(env)
    assert len(commands) == 2
    env.settle()
    expect_pool_count(5, 0, 0)
    assert drifted_left() == 3


def test_should_keep_drifting_partially_when_we_can_acquire_some_limits_for_each_reconcile(env):
    """StaticDrift / Limits and Scaling / should keep drifting partially when we can acquire some limits for each reconcile

    Five drifted nodes, replicas 5, limits.nodes 6: one replacement at a time, never more than
    six claims, until all five are replaced."""
    drifted_pool(env, 5, 5, limits={"nodes": "6"})
    for i in range(5):
        commands = plan_round(env)
        assert len(commands) == 1
        for _ in range(20):
            env.step()
            assert NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES).count() <= 6
            if not Disruption.objects.filter(state__in=service.ACTIVE).exists():
                break
        expect_pool_count(5, 0, 0)
        assert drifted_left() == 4 - i
        assert Disruption.objects.filter(state=Disruption.State.DONE).count() == i + 1


def test_should_wait_until_nodes_are_deprovisioned_when_we_are_overscaled(env):
    """StaticDrift / Limits and Scaling / should wait until nodes are deprovisioned when we are overscaled

    Replicas 1, two drifted nodes, a pod on the first: no drift while the pool runs two nodes;
    once scale-down (``services.static``) has removed the empty one, the other is replaced."""
    from provisioning.services import static

    env.apply(static_pool(1))
    busy = static_node(env, drifted=True)
    static_node(env, drifted=True)
    env.pod(node=busy)
    assert plan_round(env) == []
    expect_pool_count(2, 0, 0)
    [outcome] = static.reconcile(env.now)
    assert len(outcome.removed) == 1
    env.settle()
    assert env.node_names() == {busy}
    commands = plan_round(env)
    assert [c.nodes for c in commands] == [[busy]]
    env.settle()
    expect_pool_count(1, 0, 0)
    assert drifted_left() == 0


# ------------------------------------------------------------------ Multiple NodePools


def test_should_handle_drift_for_multiple_static_nodepools_independently(env):
    """StaticDrift / Multiple NodePools / should handle drift for multiple static NodePools independently

    Three static NodePools of two drifted nodes each: replicas 3; replicas 2 with limits.nodes
    2 (no room); replicas 2. Four commands: two in the first and two in the third."""
    drifted_pool(env, 3, 2, "static-1")
    drifted_pool(env, 2, 2, "static-2", limits={"nodes": "2"})
    drifted_pool(env, 2, 2, "static-3")
    commands = plan_round(env)
    assert pools_of(commands) == {"static-1": 2, "static-3": 2}
    env.settle()
    assert drifted_left("static-1") == 0 and drifted_left("static-3") == 0
    assert drifted_left("static-2") == 2
