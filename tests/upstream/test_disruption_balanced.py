"""Upstream's Balanced consolidation score tests (``pkg/controllers/disruption/balanced_test.go``), ported.

Upstream tests ``ScoreMove(savings, disruptionCost, NodePoolTotals, k)``, the score of a
consolidation move under ``consolidationPolicy: Balanced`` (v1.14): (savings / the pool's
total cost) / (the move's disruption / the pool's total disruption), approved at 1/k or more,
k = 2. karpweb's score is ``disruption.balanced.balanced_refusal(move, savings, pool_nodes,
policies)``: the move and the pool are disruption candidates, and the pool's totals are the
sums over them, so each test here builds the pool upstream's totals describe (upstream's RFC
pool: ten nodes, eight at $4.84 and two at $9.68 a day, 80 pods; a node's disruption is 1
plus 1 per pod, upstream's ``RescheduleDisruptionCost``) and the move its savings and
disruption name.

``balanced_refusal`` returns why a move is refused, or None. The score itself is read from
the real function: approval at a threshold t is ``score >= t``, and the module's k
(``BALANCED_K``, upstream's ``v1.BalancedK`` passed as ``k``) sets t = 1/k, so bisecting t
finds the score (``score_of``). The savings and disruption fractions are those the refusal
states (as whole percents). Upstream's tuning tests pass k; here k is set the same way.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import pytest

from provisioning.disruption import balanced
from provisioning.disruption.balanced import balanced_refusal
from provisioning.disruption.model import (
    BALANCED,
    WHEN_EMPTY,
    WHEN_EMPTY_OR_UNDERUTILIZED,
    Candidate,
    PoolPolicy,
)
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.podspec import pod_from_manifest

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/balanced_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

ZERO_DISRUPTION = (
    "calls ScoreMove with a move disruption of 0, which no karpweb move has: a node's disruption is 1 plus its "
    "pods' eviction costs (candidates.disruption_cost, upstream's RescheduleDisruptionCost with its "
    "PerNodeBaseDisruptionCost), so every move disrupts at least 1 per node and balanced_refusal has no zero-"
    "disruption input"
)
NOT_PORTED: dict[str, str] = {
    "ScoreMove / edge cases with zero values / should approve with +Inf score when move disruption is zero and "
    "savings positive": ZERO_DISRUPTION,
    "ScoreMove / edge cases with zero values / should reject when both savings and disruption are zero": ZERO_DISRUPTION,
    "ScoreMove / edge cases with zero values / should approve when move disruption is zero (division by zero guard)": (
        ZERO_DISRUPTION
    ),
}

# Upstream's prices are per day; they are taken as they are (as prices per hour: the score is a
# ratio, so the unit cancels, and the same figures give the same floating-point sums).
XLARGE, XLARGE2, LARGE = 4.84, 9.68, 2.42  # m7i.xlarge, m7i.2xlarge, m7i.large
_names = itertools.count()


# ------------------------------------------------------------------ building pools (shared with the scoring module)


def pod(priority: int = 0) -> Pod:
    """A pod of the default eviction cost 1 (``makePod``)."""
    n = next(_names)
    spec = {"containers": [{"name": "c", "image": "i"}], **({"priority": priority} if priority else {})}
    return pod_from_manifest(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{n}", "namespace": "default"}, "spec": spec}
    )


def node(pool: str, price: float, pods: int = 0, *, node_name: str | None = None) -> Candidate:
    """A candidate of ``pool`` at ``price``/h with ``pods`` pods (``makeCandidate``)."""
    n = next(_names)
    return Candidate(
        name=node_name or f"node-{n}",
        nodeclaim=f"claim-{n}",
        nodepool=pool,
        instance_type="m7i.xlarge",
        capacity_type="on-demand",
        zone="us-east-1a",
        price_per_hour=price,
        created_at=0.0,
        initialized=True,
        pods=tuple(pod() for _ in range(pods)),
        last_pod_change_at=0.0,
    )


def fill(pool: str, prices: Sequence[float], pods: int) -> list[Candidate]:
    """Nodes at ``prices`` carrying ``pods`` pods between them (spread as evenly as they go)."""
    share, extra = divmod(pods, len(prices)) if prices else (0, 0)
    return [node(pool, price, share + (i < extra)) for i, price in enumerate(prices)]


def policies(**by_pool: str) -> dict[str, PoolPolicy]:
    return {name: PoolPolicy(name=name, consolidation_policy=policy) for name, policy in by_pool.items()}


def grouped(*nodes: Candidate) -> dict[str, list[Candidate]]:
    out: dict[str, list[Candidate]] = {}
    for c in nodes:
        out.setdefault(c.nodepool, []).append(c)
    return out


class Scored(NamedTuple):
    approved: bool
    score: float
    refusal: str | None  # balanced_refusal's sentence at the real k (None: approved)
    saved_percent: str  # "12%": the savings fraction as the refusal states it
    disrupted_percent: str




def score_of(
    move: Sequence[Candidate],
    savings: float,
    pool_nodes: Mapping[str, Sequence[Candidate]],
    pool_policies: Mapping[str, PoolPolicy],
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> Scored:
    """``ScoreMove`` through karpweb's ``balanced.scores`` and ``balanced_refusal``: whether it
    approves at the module's k, the lowest score of the Balanced pools it touches (+inf when none
    scores it) and that pool's fractions as whole percents."""
    refusal = balanced_refusal(move, savings, pool_nodes, pool_policies)
    verdicts = balanced.scores(move, savings, pool_nodes, pool_policies)
    if not verdicts:
        return Scored(refusal is None, math.inf, refusal, "", "")
    worst = min(verdicts.values(), key=lambda v: v.score)
    return Scored(refusal is None, worst.score, refusal, f"{worst.saved:.0%}", f"{worst.disrupted:.0%}")


# ------------------------------------------------------------------ the RFC pool


def rfc_pool(move_price: float, move_pods: int, *, pool: str = "pool") -> tuple[Candidate, list[Candidate]]:
    """Upstream's ``defaultTotals``: eight m7i.xlarge and two m7i.2xlarge (total $58.08/day) with 80
    pods (total disruption 90). The move's node is one of them, at ``move_price`` with ``move_pods``."""
    prices = [XLARGE] * 8 + [XLARGE2] * 2
    prices.remove(move_price)
    move = node(pool, move_price, move_pods)
    return move, [move, *fill(pool, prices, 80 - move_pods)]


def balanced_pool(*nodes: Candidate, pool: str = "pool") -> dict[str, list[Candidate]]:
    return {pool: list(nodes)}


BALANCED_POLICY = policies(pool=BALANCED)
DEFAULT_COST, DEFAULT_DISRUPTION = 58.08, 90.0


def expected_score(savings: float, disruption: float, total_cost: float, total_disruption: float) -> float:
    return (savings / total_cost) / (disruption / total_disruption)


# ------------------------------------------------------------------ ScoreMove


def test_should_approve_an_oversized_node_consolidation(monkeypatch):
    """ScoreMove / when the move has clear savings / should approve an oversized node consolidation

    An m7i.2xlarge with 3 pods replaced by an m7i.large: savings $7.26/day, disruption 4."""
    move, pool = rfc_pool(XLARGE2, 3)
    savings = XLARGE2 - LARGE
    result = score_of([move], savings, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    assert result.approved, result
    assert result.score == pytest.approx(expected_score(savings, 4.0, DEFAULT_COST, DEFAULT_DISRUPTION), abs=0.02)
    assert result.saved_percent == f"{savings / DEFAULT_COST:.0%}"
    assert result.disrupted_percent == f"{4.0 / DEFAULT_DISRUPTION:.0%}"


def test_should_approve_a_spare_capacity_delete(monkeypatch):
    """ScoreMove / when the move has clear savings / should approve a spare capacity delete

    An m7i.xlarge with 4 pods deleted: savings its whole price, disruption 5."""
    move, pool = rfc_pool(XLARGE, 4)
    result = score_of([move], XLARGE, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    assert result.approved, result
    assert result.score == pytest.approx(expected_score(XLARGE, 5.0, DEFAULT_COST, DEFAULT_DISRUPTION), abs=0.02)


def test_should_reject_a_marginal_move(monkeypatch):
    """ScoreMove / when the move is marginal or harmful / should reject a marginal move

    An m7i.xlarge with 8 pods replaced by an m7i.large: savings $2.42/day, disruption 9."""
    move, pool = rfc_pool(XLARGE, 8)
    savings = XLARGE - LARGE
    result = score_of([move], savings, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    assert not result.approved
    assert result.score == pytest.approx(expected_score(savings, 9.0, DEFAULT_COST, DEFAULT_DISRUPTION), abs=0.01)


def test_should_reject_a_well_packed_node_with_zero_savings(monkeypatch):
    """ScoreMove / when the move is marginal or harmful / should reject a well-packed node with zero savings

    Savings 0, disruption 11 (10 pods)."""
    move, pool = rfc_pool(XLARGE, 10)
    result = score_of([move], 0.0, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    assert not result.approved
    assert result.score == pytest.approx(0.0, abs=1e-9)
    assert result.refusal is not None and "score 0.00" in result.refusal


def test_should_approve_a_replace_in_a_uniform_pool(monkeypatch):
    """ScoreMove / when the pool is uniform / should approve a replace in a uniform pool

    Ten m7i.xlarge ($48.40/day), 80 pods (disruption 90); one with 8 pods replaced by an
    m7i.large: savings $2.42/day, disruption 9: a score of exactly 1/k."""
    move = node("pool", XLARGE, 8)
    pool = [move, *fill("pool", [XLARGE] * 9, 72)]
    savings = XLARGE - LARGE
    result = score_of([move], savings, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    assert result.approved, result
    assert result.score == pytest.approx(expected_score(savings, 9.0, 48.40, 90.0), abs=0.01)


def test_should_approve_low_disruption_nodes_and_reject_high_disruption_nodes(monkeypatch):
    """ScoreMove / when disruption costs vary across nodes / should approve low-disruption nodes and reject high-disruption nodes

    The RFC pool with 107 pods (disruption 117): node A (4 pods, disruption 5) and node B (31
    pods, disruption 32), each an m7i.xlarge deleted."""
    a, b = node("pool", XLARGE, 4), node("pool", XLARGE, 31)
    pool = [a, b, *fill("pool", [XLARGE] * 6 + [XLARGE2] * 2, 107 - 35)]
    result_a = score_of([a], XLARGE, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    assert result_a.approved, result_a
    assert result_a.score == pytest.approx(expected_score(XLARGE, 5.0, DEFAULT_COST, 117.0), abs=0.02)
    result_b = score_of([b], XLARGE, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    assert not result_b.approved
    assert result_b.score == pytest.approx(expected_score(XLARGE, 32.0, DEFAULT_COST, 117.0), abs=0.01)


def test_should_produce_the_same_score_regardless_of_pool_size(monkeypatch):
    """ScoreMove / scale invariance / should produce the same score regardless of pool size

    The same move in the RFC pool and in one ten times its size (100 nodes, 800 pods)."""
    move, pool = rfc_pool(XLARGE2, 3)
    savings = XLARGE2 - LARGE
    result10 = score_of([move], savings, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    big_move = node("pool", XLARGE2, 3)
    big_pool = [big_move, *fill("pool", [XLARGE] * 80 + [XLARGE2] * 19, 800 - 3)]
    result100 = score_of([big_move], savings, balanced_pool(*big_pool), BALANCED_POLICY, monkeypatch)
    assert result10.score == pytest.approx(result100.score, abs=0.01)
    assert result10.score == pytest.approx(expected_score(savings, 4.0, DEFAULT_COST, DEFAULT_DISRUPTION), abs=0.02)


def test_should_reject_when_nodepool_cost_is_zero(monkeypatch):
    """ScoreMove / edge cases with zero values / should reject when nodepool cost is zero

    A pool whose nodes have no price (disruption 90), a move of disruption 5 saving $4.84/day."""
    move = node("pool", 0.0, 4)
    pool = [move, *fill("pool", [0.0] * 9, 76)]
    result = score_of([move], XLARGE, balanced_pool(*pool), BALANCED_POLICY, monkeypatch)
    assert not result.approved


def test_should_reject_at_k_2_for_a_marginal_move(monkeypatch):
    """ScoreMove / consolidation threshold tuning / should reject at k=2 for a marginal move

    Savings $2.42/day, disruption 9 in the RFC pool (score about 0.42)."""
    monkeypatch.setattr(balanced, "BALANCED_K", 2.0)
    move, pool = rfc_pool(XLARGE, 8)
    assert balanced_refusal([move], LARGE, balanced_pool(*pool), BALANCED_POLICY) is not None


def test_should_approve_at_k_3_for_the_same_move(monkeypatch):
    """ScoreMove / consolidation threshold tuning / should approve at k=3 for the same move"""
    monkeypatch.setattr(balanced, "BALANCED_K", 3.0)
    move, pool = rfc_pool(XLARGE, 8)
    assert balanced_refusal([move], LARGE, balanced_pool(*pool), BALANCED_POLICY) is None


def test_should_reject_at_k_1_for_the_same_move(monkeypatch):
    """ScoreMove / consolidation threshold tuning / should reject at k=1 for the same move"""
    monkeypatch.setattr(balanced, "BALANCED_K", 1.0)
    move, pool = rfc_pool(XLARGE, 8)
    assert balanced_refusal([move], LARGE, balanced_pool(*pool), BALANCED_POLICY) is not None


def test_should_produce_identical_scores_for_proportionally_equivalent_moves(monkeypatch):
    """ScoreMove / cross-NodePool scoring / should produce identical scores for proportionally equivalent moves

    An on-demand pool (ten m7i.xlarge, $48.40/day) and a spot pool (ten at $1.45/day), each with
    80 pods; deleting a node with 3 pods saves a tenth of either pool's cost."""
    od_move, spot_move = node("od", XLARGE, 3), node("spot", 1.45, 3)
    od_pool = [od_move, *fill("od", [XLARGE] * 9, 77)]
    spot_pool = [spot_move, *fill("spot", [1.45] * 9, 77)]
    both = policies(od=BALANCED, spot=BALANCED)
    od = score_of([od_move], XLARGE, {"od": od_pool, "spot": spot_pool}, both, monkeypatch)
    spot = score_of([spot_move], 1.45, {"od": od_pool, "spot": spot_pool}, both, monkeypatch)
    assert od.score == pytest.approx(spot.score, abs=0.01)
    assert od.approved and spot.approved


# ------------------------------------------------------------------ ConsolidationPolicy.IsBalanced


def is_balanced(policy: str) -> bool:
    """``ConsolidationPolicy.IsBalanced``: the NodePool's policy as the planner reads it, compared
    as ``balanced_refusal`` compares it."""
    read = PoolPolicy.from_spec("pool", {"disruption": {"consolidationPolicy": policy}})
    return read.consolidation_policy == BALANCED


def test_should_be_true_for_balanced_policy():
    """ConsolidationPolicy.IsBalanced / should be true for Balanced policy"""
    assert is_balanced("Balanced")


def test_should_be_false_for_whenemptyorunderutilized_policy():
    """ConsolidationPolicy.IsBalanced / should be false for WhenEmptyOrUnderutilized policy"""
    assert not is_balanced(WHEN_EMPTY_OR_UNDERUTILIZED)


def test_should_be_false_for_whenempty_policy():
    """ConsolidationPolicy.IsBalanced / should be false for WhenEmpty policy"""
    assert not is_balanced(WHEN_EMPTY)
