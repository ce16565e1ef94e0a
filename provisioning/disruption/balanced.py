"""``consolidationPolicy: Balanced`` (upstream v1.14): a move must be worth its disruption.

For each Balanced NodePool a move touches: (the pool's share of the savings / the pool's total
cost) ÷ (the move's disruption in the pool / the pool's total disruption) must reach 1/k with
k = 2. Savings are split between pools by each pool's share of the removed nodes' prices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from provisioning.disruption.candidates import disruption_cost
from provisioning.disruption.model import BALANCED, Candidate, PoolPolicy, PoolScore

BALANCED_K = 2.0
SCORE_EPSILON = 1e-9


def scores(
    move: Sequence[Candidate],
    savings: float,
    pool_nodes: Mapping[str, Sequence[Candidate]],
    policies: Mapping[str, PoolPolicy],
) -> dict[str, PoolScore]:
    """Upstream's ``ScoreMove`` for each Balanced NodePool the move touches."""
    source = sum(price(c) for c in move)
    out = {}
    for name in sorted({c.nodepool for c in move}):
        policy = policies.get(name)
        if policy is None or policy.consolidation_policy != BALANCED:
            continue
        mine = [c for c in move if c.nodepool == name]
        nodes = pool_nodes.get(name)
        pool_cost = sum(price(c) for c in nodes or ())
        pool_disruption = sum(disruption_cost(c) for c in nodes or ())
        if not nodes or pool_cost <= 0 or pool_disruption <= 0 or source <= 0:
            out[name] = PoolScore(0.0, 0.0, 0.0)  # nothing to weigh the move against
            continue
        saved = max(0.0, savings) * sum(price(c) for c in mine) / source / pool_cost
        disrupted = sum(disruption_cost(c) for c in mine) / pool_disruption
        out[name] = PoolScore(saved / disrupted, saved, disrupted)
    return out


def price(candidate: Candidate) -> float:
    """The candidate's price as the totals count it: one that is not a number (a catalog's NaN)
    counts 0, as upstream resolves a NaN offering price, so it cannot poison a pool's total."""
    return candidate.price_per_hour if math.isfinite(candidate.price_per_hour) else 0.0


def balanced_refusal(
    move: Sequence[Candidate],
    savings: float,
    pool_nodes: Mapping[str, Sequence[Candidate]],
    policies: Mapping[str, PoolPolicy],
) -> str | None:
    """Why a Balanced pool refuses the move, or None when every Balanced pool accepts it."""
    return refusal(scores(move, savings, pool_nodes, policies))


def refusal(verdicts: Mapping[str, PoolScore]) -> str | None:
    """Why a pool of ``verdicts`` (``scores``) refuses the move, or None when all approve."""
    for name, verdict in verdicts.items():
        # A tolerance for the sums' float noise: a move scoring exactly 1/k passes, as upstream's.
        if verdict.score >= 1 / BALANCED_K - SCORE_EPSILON:
            continue
        if verdict.disrupted == 0:
            return f"NodePool {name} is Balanced, and its nodes cost nothing to weigh this move against (score 0)"
        return (
            f"NodePool {name} is Balanced: this move saves {verdict.saved:.0%} of the pool's cost for "
            f"{verdict.disrupted:.0%} of its disruption (score {verdict.score:.2f}; it needs at least "
            f"{1 / BALANCED_K:.2f})"
        )
    return None
