"""Upstream's single-node consolidation suite (``pkg/controllers/disruption/singlenodeconsolidation_test.go``),
ported.

Upstream builds ``disruption.Candidate`` values and calls ``SingleNodeConsolidation.SortCandidates``
(the consolidation sort by savings ratio, price / ``RescheduleDisruptionCost``, then the candidates
interwoven by NodePool). Here the cluster is built in ``disruption_env`` (three NodePools of three
nodes, a pod on each) and the order is the one the real round (``services.disruption.plan`` and
the pure planner) tries the candidates in: the solver is wrapped so that every simulation it runs
is recorded and fails (no pod can move), so multi-node consolidation finds nothing and
single-node consolidation tries every candidate, one removed node per simulation, in its order.

Upstream's ``RescheduleDisruptionCost`` (set by hand in one test) is karpweb's disruption cost, 1
plus each pod's eviction cost (1 for a pod of priority 0): a node with 1, 4 or 19 pods costs 2, 5
or 20. Nodes are ``t4g.micro`` on demand (upstream's leastExpensiveInstance), ``m5.large`` where 19
pods must fit; pods are bare (upstream's ``test.Pod()``), 100m / 128Mi.
"""

from __future__ import annotations

import dataclasses

import pytest
from disruption_env import DisruptionEnv, node_pool

from provisioning.models import ClusterPod, NodeClaim

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/singlenodeconsolidation_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

_TIMEOUT = (
    "karpweb's single-node consolidation has no timeout (upstream's SingleNodeConsolidationTimeoutDuration, 3 "
    "minutes): a round tries every candidate, so no NodePool is left unseen, remembered "
    "(PreviouslyUnseenNodePools) or put first in the next round"
)
NOT_PORTED: dict[str, str] = {
    "SingleNodeConsolidation / Candidate Shuffling / should prioritize nodepools that timed out in previous runs": _TIMEOUT,
    "SingleNodeConsolidation / Candidate Shuffling / should reset timed out nodepools when all nodepools are evaluated": _TIMEOUT,
    "SingleNodeConsolidation / Candidate Shuffling / should mark nodepools as timed out when timeout occurs": _TIMEOUT,
}

POOLS = ("nodepool-1", "nodepool-2", "nodepool-3")
ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}


@pytest.fixture
def env(disruption_env: DisruptionEnv) -> DisruptionEnv:
    """The suite's BeforeEach: three NodePools, WhenEmptyOrUnderutilized, consolidateAfter 0s
    (their budgets the default 10%)."""
    for name in POOLS:
        disruption_env.apply(node_pool(name, requirements=[ON_DEMAND], budgets=None))
    return disruption_env


def single_node_order(env: DisruptionEnv, monkeypatch) -> list[str]:
    """The nodes single-node consolidation tries, in order, in one planning round."""
    from provisioning.scheduling import solver

    real = solver.solve
    seen: list[frozenset[str]] = []

    def failing(snapshot):
        seen.append(frozenset(n.name for n in snapshot.nodes))
        plan = real(snapshot)
        return dataclasses.replace(plan, unschedulable={p.key: "recorded by the test" for p in snapshot.pods})

    monkeypatch.setattr(solver, "solve", failing)
    result = env.plan()
    assert result.commands == ()
    everything = set(env.node_names())
    removed = [everything - nodes for nodes in seen]
    return [next(iter(r)) for r in removed if len(r) == 1]


def candidates(env: DisruptionEnv, pods: int = 1, instance_type: str = "t4g.micro", per_pool: int = 3) -> list[str]:
    """Upstream's ``createCandidates``: ``per_pool`` nodes in each NodePool, each with ``pods`` pods."""
    nodes = []
    for name in POOLS:
        for _ in range(per_pool):
            node = env.node(instance_type=instance_type, nodepool=name)
            env.pods(pods, node=node, owner=None)
            nodes.append(node)
    return nodes


def disruption_cost(node: str) -> float:
    """Upstream's RescheduleDisruptionCost of the node: 1, plus 1 for each pod (priority 0)."""
    return 1.0 + ClusterPod.objects.filter(node_name=node).count()


def savings_ratio(node: str) -> float:
    claim = NodeClaim.objects.get(node_name=node)
    return float(claim.price_per_hour) / disruption_cost(node)


def test_should_sort_candidates_by_savings_ratio_descending(env, monkeypatch):
    """SingleNodeConsolidation / Candidate Shuffling / should sort candidates by savings ratio descending"""
    nodes = candidates(env)
    order = single_node_order(env, monkeypatch)
    assert sorted(order) == sorted(nodes)
    ratios = [savings_ratio(n) for n in order]
    assert all(a >= b for a, b in zip(ratios, ratios[1:], strict=False))


def test_should_sort_candidates_by_savings_ratio_with_different_disruption_costs(env, monkeypatch):
    """SingleNodeConsolidation / Candidate Shuffling / should sort candidates by savings ratio with different disruption costs

    Upstream's three candidates per NodePool with RescheduleDisruptionCost 1, 5 and 20, created
    in reverse order: here m5.large nodes with 19, 4 and 1 pods (disruption cost 20, 5, 2), created
    in that order."""
    costly = candidates(env, pods=19, instance_type="m5.large", per_pool=1)
    medium = candidates(env, pods=4, instance_type="m5.large", per_pool=1)
    cheap = candidates(env, pods=1, instance_type="m5.large", per_pool=1)
    order = single_node_order(env, monkeypatch)
    assert len(order) == 9
    assert set(order[:3]) == set(cheap)
    assert set(order[3:6]) == set(medium)
    assert set(order[6:]) == set(costly)
    assert [disruption_cost(n) for n in order] == [2.0] * 3 + [5.0] * 3 + [20.0] * 3
