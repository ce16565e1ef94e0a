"""Upstream's Balanced scoring tests (``pkg/controllers/disruption/balanced_scoring_test.go``), ported.

Upstream's file tests the parts of ``consolidationPolicy: Balanced`` inside its disruption
package: the pool totals (``computeNodePoolTotals``), the per-pool verdict on a command
(``EvaluateBalancedMove``), the score table, the savings of a replacement in an on-demand-only
NodePool, which candidates consolidation accepts (``ShouldDisrupt``), the order it tries them
(``sortCandidates``) and the events of an approved multi-node move. In karpweb:

* the totals and the verdict are ``disruption.balanced.balanced_refusal(move, savings,
  pool_nodes, policies)``: the totals are summed inside it over ``pool_nodes`` (every candidate
  of each NodePool, as upstream sums over all of them), so they are read from the fractions its
  refusal states and from the score (``score_of`` in ``test_disruption_balanced.py``: the
  threshold where approval turns, bisected);
* ``Candidate.SavingsRatio`` and ``sortCandidates`` are ``candidates.disruption_cost`` and
  ``candidates.consolidation_order`` (most price per unit of disruption first);
* the on-demand-only savings and ``ShouldDisrupt`` run through the real disruption round
  (``disruption_env``): the planner prices the replacement and scores the move itself;
* ``EmitMultiNodeEvents`` is handed per-pool results by the test; karpweb records
  ConsolidationApproved from the scores its round computed for the move it planned (on each
  Balanced NodePool of a multi-node move), so those tests set up the round's move instead and
  read the events it recorded (``env.cluster.events``).

Upstream's hand-built candidates (``makeCandidate``: an m7i.xlarge at $4.84 with its pods)
are ``model.Candidate`` rows of the same price and pods; a candidate with no instance type
(price 0) is one whose price is 0.
"""

from __future__ import annotations

import pytest
from disruption_env import DisruptionEnv, node_pool
from test_disruption_balanced import fill, grouped, node, policies, score_of

from provisioning.disruption.candidates import consolidation_order, disruption_cost
from provisioning.disruption.model import BALANCED, UNDERUTILIZED, WHEN_EMPTY_OR_UNDERUTILIZED

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/balanced_scoring_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {
    "Balanced Scoring / EvaluateBalancedMove / should reject when command has zero candidates": (
        "an empty Command: karpweb's planner never scores an empty move (single-node consolidation scores one "
        "node, multi-node a prefix of at least two), and balanced_refusal takes the move's candidates, so there "
        "is no command without candidates to refuse"
    ),
    "Balanced Scoring / sumCandidatePrices / should return 0 for nil instanceType": (
        "sumCandidatePrices sums Go's Candidate.Price, resolved from the instance type's offering; a karpweb "
        "candidate carries its NodeClaim's price_per_hour (0 when unknown) and balanced_refusal sums those "
        "itself, so there is no instance type to resolve nor a sum helper (a zero-priced candidate's part in "
        "the totals is ported: 'should accumulate disruption from zero-priced candidates')"
    ),
    "Balanced Scoring / sumCandidatePrices / should return the offering price for a valid instanceType": (
        "as 'should return 0 for nil instanceType': the price is the NodeClaim's, not resolved from an offering"
    ),
    "Balanced Scoring / ScoreMove (SavingsRatio) / should compute correct scores / zero disruption cost": (
        "a move disruption of 0, which no karpweb move has: a node's disruption is 1 plus its pods' eviction "
        "costs (candidates.disruption_cost), so balanced_refusal has no zero-disruption input"
    ),
}

XLARGE = 4.84  # makeInstanceType("m7i.xlarge", 4.84)
ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}


@pytest.fixture
def env(disruption_env: DisruptionEnv) -> DisruptionEnv:
    return disruption_env


# ------------------------------------------------------------------ computeNodePoolTotals


def test_should_produce_totals_from_all_candidates_not_just_a_filtered_subset(monkeypatch):
    """Balanced Scoring / computeNodePoolTotals / should produce totals from ALL candidates, not just a filtered subset

    Five candidates at $4.84 with one pod each: the totals are $24.20 and disruption 10, so
    deleting one saves 20% of the pool's cost for 20% of its disruption (score 1.0)."""
    pool = [node("pool-a", XLARGE, 1) for _ in range(5)]
    result = score_of([pool[0]], XLARGE, grouped(*pool), policies(**{"pool-a": BALANCED}), monkeypatch)
    assert (result.saved_percent, result.disrupted_percent) == ("20%", "20%")
    assert result.score == pytest.approx(1.0)


def test_should_accumulate_disruption_from_zero_priced_candidates(monkeypatch):
    """Balanced Scoring / computeNodePoolTotals / should accumulate disruption from zero-priced candidates

    Two candidates at $4.84 and one without a price, one pod each: the totals are $9.68 (the
    zero-priced one adds no cost) and disruption 6 (it adds its disruption): deleting a priced
    one saves 50% for 33% (score 1.5)."""
    good, unpriced, other = node("pool-b", XLARGE, 1), node("pool-b", 0.0, 1), node("pool-b", XLARGE, 1)
    pools = grouped(good, unpriced, other)
    result = score_of([good], XLARGE, pools, policies(**{"pool-b": BALANCED}), monkeypatch)
    assert (result.saved_percent, result.disrupted_percent) == ("50%", "33%")
    assert result.score == pytest.approx(1.5)


# ------------------------------------------------------------------ EvaluateBalancedMove


def test_should_skip_non_balanced_pools_and_approve_unconditionally(monkeypatch):
    """Balanced Scoring / EvaluateBalancedMove / should skip non-Balanced pools and approve unconditionally

    A WhenEmptyOrUnderutilized pool of five: a move of two of its nodes is approved even saving
    nothing, which the same pool under Balanced refuses: the pool is not scored."""
    pool = [node("pool-nobalanced", XLARGE, 1) for _ in range(5)]
    move = pool[:2]
    plain = policies(**{"pool-nobalanced": WHEN_EMPTY_OR_UNDERUTILIZED})
    result = score_of(move, 0.0, grouped(*pool), plain, monkeypatch)
    assert result.approved and result.refusal is None
    assert result.score == float("inf")  # no threshold refuses it: not scored
    scored = score_of(move, 0.0, grouped(*pool), policies(**{"pool-nobalanced": BALANCED}), monkeypatch)
    assert not scored.approved


def test_should_reject_when_candidate_nodepool_is_missing_from_totals_map(monkeypatch):
    """Balanced Scoring / EvaluateBalancedMove / should reject when candidate NodePool is missing from totals map"""
    move = node("pool-missing", XLARGE, 1)
    result = score_of([move], XLARGE, {}, policies(**{"pool-missing": BALANCED}), monkeypatch)
    assert result.score == 0.0
    assert not result.approved


def test_should_approve_a_delete_command_for_a_single_balanced_nodepool(monkeypatch):
    """Balanced Scoring / EvaluateBalancedMove / should approve a delete command for a single Balanced NodePool

    Ten candidates at $4.84 with a pod each; deleting one: 10% of the cost for 10% of the
    disruption, score 1.0 against the threshold 0.5."""
    pool = [node("pool-single", XLARGE, 1) for _ in range(10)]
    result = score_of([pool[0]], XLARGE, grouped(*pool), policies(**{"pool-single": BALANCED}), monkeypatch)
    assert result.approved, result
    assert result.score == pytest.approx(1.0, abs=0.05)


def test_should_attribute_savings_proportionally_in_cross_nodepool_scenarios(monkeypatch):
    """Balanced Scoring / EvaluateBalancedMove / should attribute savings proportionally in cross-NodePool scenarios

    Five nodes in a Balanced pool and five in a WhenEmptyOrUnderutilized one, $4.84 and a pod
    each; one of each deleted (savings $9.68): the Balanced pool is credited its share, $4.84,
    a fifth of its cost for a fifth of its disruption (score 1.0)."""
    balanced_nodes = [node("pool-balanced", XLARGE, 1) for _ in range(5)]
    other_nodes = [node("pool-empty", XLARGE, 1) for _ in range(5)]
    both = policies(**{"pool-balanced": BALANCED, "pool-empty": WHEN_EMPTY_OR_UNDERUTILIZED})
    move = [balanced_nodes[0], other_nodes[0]]
    result = score_of(move, 2 * XLARGE, grouped(*balanced_nodes, *other_nodes), both, monkeypatch)
    assert result.approved, result
    assert result.score == pytest.approx(1.0, abs=0.05)


def test_should_reject_when_any_balanced_pool_rejects(monkeypatch):
    """Balanced Scoring / EvaluateBalancedMove / AllPoolsMustApprove / should reject when any Balanced pool rejects

    Upstream's body computes without asserting; its comments give the scores, asserted here,
    and the title's rule is asserted on a pool that does refuse. Pool A: ten $4.84 nodes with a
    pod each; pool B: a $1 node with 20 pods and a $1 node with one. Deleting one of A's and B's
    heavy node (savings $5.84): A scores 1.0, B 0.5 / (21/23) = 0.548, both approve; with 40
    pods on B's heavy node B scores 0.5 / (41/43) = 0.524. When B's light node costs $3 (B
    credited $1 of its $4), B scores 0.25 / (41/43) = 0.26 and refuses: the move is refused."""

    def scores(b_nodes):
        pools = grouped(*a_nodes, *b_nodes)
        move = [a_nodes[0], b_nodes[0]]
        savings = a_nodes[0].price_per_hour + b_nodes[0].price_per_hour
        a_only = score_of(move, savings, pools, policies(**{"pool-a": BALANCED, "pool-b": "WhenEmpty"}), monkeypatch)
        b_only = score_of(move, savings, pools, policies(**{"pool-a": "WhenEmpty", "pool-b": BALANCED}), monkeypatch)
        both = score_of(move, savings, pools, policies(**{"pool-a": BALANCED, "pool-b": BALANCED}), monkeypatch)
        return a_only, b_only, both

    a_nodes = [node("pool-a", XLARGE, 1) for _ in range(10)]
    a, b, both = scores([node("pool-b", 1.0, 20), node("pool-b", 1.0, 1)])
    assert a.score == pytest.approx(1.0)
    assert b.score == pytest.approx(0.5 / (21 / 23))
    assert both.approved and a.approved and b.approved
    a, b, both = scores([node("pool-b", 1.0, 40), node("pool-b", 1.0, 1)])
    assert b.score == pytest.approx(0.5 / (41 / 43))
    assert both.approved
    a, b, both = scores([node("pool-b", 1.0, 40), node("pool-b", 3.0, 1)])
    assert a.approved and not b.approved
    assert b.score == pytest.approx(0.25 / (41 / 43))
    assert not both.approved and "NodePool pool-b is Balanced" in both.refusal


# ------------------------------------------------------------------ Candidate.SavingsRatio


def savings_ratio(candidate) -> float:
    """``Candidate.SavingsRatio``: price per unit of disruption, consolidation_order's key."""
    return candidate.price_per_hour / disruption_cost(candidate)


def test_should_compute_expected_ratios_for_different_configurations():
    """Balanced Scoring / Candidate.SavingsRatio / should compute expected ratios for different configurations"""
    assert savings_ratio(node("pool", XLARGE, 0)) == pytest.approx(4.84, abs=0.01)  # no pods: disruption 1
    assert savings_ratio(node("pool", XLARGE, 3)) == pytest.approx(1.21, abs=0.01)  # 3 pods: disruption 4
    assert savings_ratio(node("pool", 0.0, 3)) == 0.0  # no price


# ------------------------------------------------------------------ ScoreMove (SavingsRatio)


def hundred_pool(move_disruption: int) -> tuple:
    """Upstream's ``totals``: cost 100, disruption 100; the move's node of disruption
    ``move_disruption`` (1 for the node, the rest pods) among ten $10 nodes."""
    move = node("pool", 10.0, move_disruption - 1)
    pool = [move, *fill("pool", [10.0] * 9, 100 - move_disruption - 9)]
    assert sum(disruption_cost(c) for c in pool) == 100
    return move, grouped(*pool)


def score_entry(savings: float, disruption: int, want_score: float, want_approved: bool, monkeypatch) -> None:
    move, pools = hundred_pool(disruption)
    result = score_of([move], savings, pools, policies(pool=BALANCED), monkeypatch)
    assert result.score == pytest.approx(want_score, abs=0.01)
    assert result.approved == want_approved


def test_should_compute_correct_scores_high_savings_low_disruption(monkeypatch):
    """Balanced Scoring / ScoreMove (SavingsRatio) / should compute correct scores / high savings low disruption"""
    score_entry(20.0, 5, 4.0, True, monkeypatch)


def test_should_compute_correct_scores_equal_fractions(monkeypatch):
    """Balanced Scoring / ScoreMove (SavingsRatio) / should compute correct scores / equal fractions"""
    score_entry(10.0, 10, 1.0, True, monkeypatch)


def test_should_compute_correct_scores_low_savings_high_disruption(monkeypatch):
    """Balanced Scoring / ScoreMove (SavingsRatio) / should compute correct scores / low savings high disruption"""
    score_entry(5.0, 50, 0.10, False, monkeypatch)


def test_should_compute_correct_scores_zero_savings(monkeypatch):
    """Balanced Scoring / ScoreMove (SavingsRatio) / should compute correct scores / zero savings"""
    score_entry(0.0, 10, 0.0, False, monkeypatch)


def test_should_compute_correct_scores_negative_savings(monkeypatch):
    """Balanced Scoring / ScoreMove (SavingsRatio) / should compute correct scores / negative savings"""
    score_entry(-5.0, 10, 0.0, False, monkeypatch)


def test_should_reject_a_move_when_estimatedsavings_excludes_spot_offerings_for_an_on_demand_only_nodepool(env):
    """Balanced Scoring / ScoreMove (SavingsRatio) / should REJECT a move when EstimatedSavings excludes spot offerings for an on-demand-only NodePool

    Through the round: a Balanced NodePool allowing on-demand only, one m5.xlarge ($0.192/h)
    with three pods (3.3 cpu, 6 GiB). The types that hold them and cost less are only a little
    cheaper on demand, far cheaper as spot: priced at on-demand, the move saves too little and
    the pool refuses it; the same node in a pool that may launch spot is replaced, so the
    refusal is the spot prices left out (upstream's numbers flip the gate the same way)."""
    env.apply(node_pool(requirements=[ON_DEMAND], consolidation_policy=BALANCED))
    source = env.node(instance_type="m5.xlarge")
    env.pods(3, node=source, cpu="1100m", memory="2Gi")
    result = env.plan()
    assert not result.commands
    assert "is Balanced" in result.not_candidates[source]
    env.apply(node_pool(consolidation_policy=BALANCED))  # spot allowed
    result = env.plan()
    (command,) = result.commands
    assert command.candidates == (source,) and command.reason == UNDERUTILIZED
    assert {o.capacity_type for o in command.replacements[0].options} == {"spot"}


# ------------------------------------------------------------------ ShouldDisrupt


def should_disrupt(env: DisruptionEnv, policy: str) -> None:
    """A non-empty node past consolidateAfter in a NodePool of ``policy`` is a consolidation
    candidate: the round replaces it (one pod on an m5.4xlarge: a cheaper node holds it)."""
    env.apply(node_pool(consolidation_policy=policy))
    node_name = env.node(instance_type="m5.4xlarge")
    env.pod(node=node_name)
    (command,) = env.plan().commands
    assert command.candidates == (node_name,) and command.reason == UNDERUTILIZED


def test_should_accept_balanced_candidates(env):
    """Balanced Scoring / ShouldDisrupt / should accept Balanced candidates"""
    should_disrupt(env, BALANCED)


def test_should_accept_whenemptyorunderutilized_candidates(env):
    """Balanced Scoring / ShouldDisrupt / should accept WhenEmptyOrUnderutilized candidates"""
    should_disrupt(env, WHEN_EMPTY_OR_UNDERUTILIZED)


# ------------------------------------------------------------------ sortCandidates


def test_should_sort_balanced_candidates_by_savings_ratio_highest_first():
    """Balanced Scoring / sortCandidates / should sort Balanced candidates by savings ratio (highest first)

    A ($10, 1 pod: 5.0), B ($1, 8 pods: 0.11), C ($5, 3 pods: 1.25). (Upstream also sets each
    candidate's DisruptionCost to a misleading value, to show it is not the key; karpweb's
    candidates have no such field.)"""
    a = node("balanced", 10.0, 1, node_name="node-a")
    b = node("balanced", 1.0, 8, node_name="node-b")
    c = node("balanced", 5.0, 3, node_name="node-c")
    assert consolidation_order([b, c, a]) == [a, c, b]


def test_should_sort_non_balanced_candidates_by_savings_ratio_descending():
    """Balanced Scoring / sortCandidates / should sort non-Balanced candidates by savings ratio descending

    Three at $4.84: A of disruption 10, B without pods (1), C of disruption 5. (Upstream sets
    the disruption costs by hand; here A has 9 pods and C 4.)"""
    a = node("default", XLARGE, 9, node_name="node-a")
    b = node("default", XLARGE, 0, node_name="node-b")
    c = node("default", XLARGE, 4, node_name="node-c")
    assert consolidation_order([a, b, c]) == [b, c, a]


def test_should_sort_all_candidates_by_savings_ratio_when_any_uses_balanced():
    """Balanced Scoring / sortCandidates / should sort all candidates by savings ratio when any uses Balanced

    A Balanced pool's $10 node and a WhenEmptyOrUnderutilized pool's $1 node, one pod each."""
    in_balanced = node("balanced", 10.0, 1, node_name="node-balanced")
    in_default = node("default", 1.0, 1, node_name="node-default")
    assert consolidation_order([in_default, in_balanced])[0] is in_balanced


# ------------------------------------------------------------------ EmitBalancedMultiNodeEvents


def approved_events(env: DisruptionEnv) -> list:
    return [e for e in env.cluster.events if e.reason == "ConsolidationApproved"]


def test_should_emit_approved_event_for_approved_pool_results(env):
    """Balanced Scoring / EmitBalancedMultiNodeEvents / should emit approved event for approved pool results

    Two m5.8xlarge of a Balanced pool with a pod each, consolidated together onto one cheaper
    node (upstream's approved result for the pool): one ConsolidationApproved event, on the
    NodePool."""
    env.apply(node_pool("pool-emit-a", consolidation_policy=BALANCED))
    nodes = [env.node(nodepool="pool-emit-a", instance_type="m5.8xlarge") for _ in range(2)]
    for n in nodes:
        env.pod(node=n)
    (command,) = env.plan().commands
    assert set(command.candidates) == set(nodes)
    (event,) = approved_events(env)
    assert (event.involved.kind, event.involved.name) == ("NodePool", "pool-emit-a")


def test_should_not_emit_events_for_rejected_pool_results(env):
    """Balanced Scoring / EmitBalancedMultiNodeEvents / should not emit events for rejected pool results

    A Balanced pool whose two m5.xlarge carry ten pods each, beside an m5.8xlarge that may not
    be disrupted (it counts in the pool's totals): moving both saves about 15% of the pool's
    cost for over 90% of its disruption, and neither alone fares better. The pool refuses the
    moves, and no ConsolidationApproved event is recorded."""
    env.apply(node_pool("pool-emit-b", consolidation_policy=BALANCED))
    small = [env.node(nodepool="pool-emit-b", instance_type="m5.xlarge") for _ in range(2)]
    for n in small:
        env.pods(10, node=n)
    env.node(nodepool="pool-emit-b", instance_type="m5.8xlarge", annotations={"karpenter.sh/do-not-disrupt": "true"})
    result = env.plan()
    assert result.commands == ()
    assert all("NodePool pool-emit-b is Balanced" in result.not_candidates[n] for n in small), result.not_candidates
    assert approved_events(env) == []


def test_should_skip_pools_missing_from_perpoolresults(env):
    """Balanced Scoring / EmitBalancedMultiNodeEvents / should skip pools missing from perPoolResults

    Upstream's move spans two pools and only one has a result. In karpweb every Balanced pool a
    move touches is scored, so the pool without a result is one that is not Balanced: a move of
    an m5.8xlarge of each pool (a pod each) onto one cheaper node records one event, for the
    Balanced pool."""
    env.apply(
        node_pool("pool-a-emit", consolidation_policy=BALANCED),
        node_pool("pool-b-emit", consolidation_policy=WHEN_EMPTY_OR_UNDERUTILIZED),
    )
    nodes = [env.node(nodepool=pool, instance_type="m5.8xlarge") for pool in ("pool-a-emit", "pool-b-emit")]
    for n in nodes:
        env.pod(node=n)
    (command,) = env.plan().commands
    assert set(command.candidates) == set(nodes)
    (event,) = approved_events(env)
    assert (event.involved.kind, event.involved.name) == ("NodePool", "pool-a-emit")
