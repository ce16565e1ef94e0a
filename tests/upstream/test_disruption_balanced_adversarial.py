"""Upstream's adversarial Balanced scoring tests (``pkg/controllers/disruption/balanced_adversarial_test.go``), ported.

Upstream feeds its Balanced scoring inputs it should survive: a NaN offering price, a move
across two pools, a candidate without an instance type, a node whose own offering is out of
capacity, a pool of one node. In karpweb (as in ``test_disruption_balanced.py``):

* ``computeNodePoolTotals`` and ``ScoreMove``/``EvaluateBalancedMove`` are
  ``disruption.balanced.scores(move, savings, pool_nodes, policies)``: the pool totals are
  summed inside it over ``pool_nodes``, and each Balanced pool's verdict is a ``PoolScore``
  (score, savings fraction, disruption fraction); the totals are read back from the fractions
  (the savings fraction is the pool's share of the savings over the pool's total cost);
* upstream's ``makeCandidate`` (a node of an instance type, its price resolved from the type's
  offering, with its pods) is a ``model.Candidate`` of that price and pods (``node``); a
  candidate without an instance type has no price, which karpweb's candidate reads as 0 (its
  NodeClaim's price_per_hour, 0 when unknown);
* a command without replacements saves its candidates' prices (``EstimatedSavings``);
* "source pricing" is the price a candidate carries, which the service takes from its
  NodeClaim (what it was launched at), read here through the service's own picture.

Upstream's per-pool k (``makeBalancedNodePool``'s argument) is ignored upstream too (k is 2
for every pool); karpweb's k is the module's ``BALANCED_K``.
"""

from __future__ import annotations

import math

import pytest
from disruption_env import ZONE_1, ZONE_2, DisruptionEnv, node_pool
from test_disruption_balanced import grouped, node, policies

from provisioning.cloud import ice
from provisioning.disruption import balanced
from provisioning.disruption.candidates import DELETION_COST
from provisioning.disruption.model import BALANCED, Candidate
from provisioning.scheduling.podspec import pod_from_manifest
from provisioning.services import disruption as service
from provisioning.services.connections import get_redis

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/balanced_adversarial_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {}

XLARGE = 4.84  # makeInstanceType("m7i.xlarge", 4.84)


def with_pods(candidate: Candidate, *deletion_costs: str) -> Candidate:
    """The candidate carrying pods with these ``controller.kubernetes.io/pod-deletion-cost``
    annotations (``makePod(name, deletionCost)``; "" for none)."""
    from dataclasses import replace

    pods = tuple(
        pod_from_manifest(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{candidate.name}-pod-{i}",
                    "namespace": "default",
                    "annotations": {DELETION_COST: cost} if cost else {},
                },
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
        )
        for i, cost in enumerate(deletion_costs)
    )
    return replace(candidate, pods=pods)


def test_should_not_allow_nan_price_to_poison_nodepool_totals():
    """Adversarial / should not allow NaN price to poison NodePool totals

    Three candidates with a pod each, one of an instance type whose only offering costs NaN:
    the pool's total cost stays a number (the NaN one counts 0: $9.68), and so does the score
    of a move saving $4.84 for a disruption of 2 (upstream's ScoreMove(4.84, 2.0, totals)):
    50% of the cost for 2/6 of the disruption, 1.5."""
    good1, poisoned, good2 = node("pool-nan", XLARGE, 1), node("pool-nan", math.nan, 1), node("pool-nan", XLARGE, 1)
    verdict = balanced.scores([good1], XLARGE, grouped(good1, poisoned, good2), policies(**{"pool-nan": BALANCED}))[
        "pool-nan"
    ]
    assert not math.isnan(verdict.saved), "NaN propagated into the pool's total cost"
    assert XLARGE / verdict.saved == pytest.approx(9.68)
    assert not math.isnan(verdict.score), "the score is NaN: the move would be refused forever"
    assert verdict.score == pytest.approx((XLARGE / 9.68) / (2.0 / 6.0))
    assert (
        balanced.balanced_refusal([good1], XLARGE, grouped(good1, poisoned, good2), policies(**{"pool-nan": BALANCED}))
        is None
    )


def test_should_populate_perpool_entries_for_all_pools_even_on_early_return():
    """Adversarial / should populate perPool entries for all pools even on early return

    Pool A: a $1 node with 20 heavy pods (deletion cost 1000) and a $1 node with a light one;
    pool B: ten $1 nodes with a pod each. The move deletes A's heavy node and one of B's
    (savings $2, half credited to each pool). Both pools have their verdict, each computed
    from its own totals, whichever would refuse first (upstream's entries with k 2 where it
    feared a zero value; karpweb's k is not per entry)."""
    heavy = with_pods(node("pool-a", 1.0, node_name="a-0"), *["1000"] * 20)
    light = with_pods(node("pool-a", 1.0, node_name="a-1"), "")
    pool_b = [with_pods(node("pool-b", 1.0, node_name=f"b-{i}"), "") for i in range(10)]
    move = [heavy, pool_b[0]]
    both = policies(**{"pool-a": BALANCED, "pool-b": BALANCED})
    verdicts = balanced.scores(move, 2.0, grouped(heavy, light, *pool_b), both)
    assert set(verdicts) == {"pool-a", "pool-b"}
    heavy_cost = 1.0 + 20 * (1.0 + 1000 / 2.0**27)
    assert verdicts["pool-a"].saved == pytest.approx(0.5)
    assert verdicts["pool-a"].disrupted == pytest.approx(heavy_cost / (heavy_cost + 2.0))
    assert verdicts["pool-b"].saved == pytest.approx(0.1)
    assert verdicts["pool-b"].disrupted == pytest.approx(0.1)
    assert verdicts["pool-b"].score == pytest.approx(1.0)


def test_should_sum_candidate_costs_correctly_with_nil_instancetype():
    """Adversarial / should sum candidate costs correctly with nil instanceType

    Two $4.84 candidates and one without an instance type (price 0), a pod each: the pool's
    total cost is $9.68 (read back from the savings fraction of a move saving $4.84)."""
    good1, untyped, good2 = node("pool-mixed", XLARGE, 1), node("pool-mixed", 0.0, 1), node("pool-mixed", XLARGE, 1)
    verdict = balanced.scores([good1], XLARGE, grouped(good1, untyped, good2), policies(**{"pool-mixed": BALANCED}))[
        "pool-mixed"
    ]
    assert XLARGE / verdict.saved == pytest.approx(9.68, abs=0.01)


@pytest.fixture
def out_of_capacity():
    """Mark offerings out of capacity in the ICE cache; cleared after the test."""
    marked: list[tuple[str, str, str]] = []

    def mark(capacity_type: str, instance_type: str, zone: str) -> None:
        ice.mark_unavailable(get_redis(), capacity_type, instance_type, zone, "InsufficientInstanceCapacity")
        marked.append((capacity_type, instance_type, zone))

    yield mark
    for capacity_type, instance_type, zone in marked:
        ice.clear(get_redis(), capacity_type, instance_type, zone)


def test_should_use_source_pricing_that_ignores_availability(disruption_env: DisruptionEnv, out_of_capacity):
    """Adversarial / should use source pricing that ignores availability

    A spot m5.xlarge in us-east-1a, whose offering there is out of capacity (the ICE cache)
    while the same type's spot offering in us-east-1b is available at another price (upstream:
    $1.00 unavailable, $5.00 available): the candidate costs what its node costs, the us-east-1a
    price, and that is what a Balanced pool's totals sum."""
    env = disruption_env
    env.apply(node_pool(consolidation_policy=BALANCED))
    own, other = env.price("m5.xlarge", ZONE_1, "spot"), env.price("m5.xlarge", ZONE_2, "spot")
    assert own != other
    source = env.node(instance_type="m5.xlarge", zone=ZONE_1, capacity_type="spot")
    env.pod(node=source)
    out_of_capacity("spot", "m5.xlarge", ZONE_1)
    seen = service._picture(env.now)
    offered = {t.name: t for pool in seen.snapshot.nodepools for t in pool.instance_types}["m5.xlarge"]
    assert not any(o.zone == ZONE_1 and o.capacity_type == "spot" and o.available for o in offered.offerings)
    (candidate,) = [c for c in seen.candidates if c.name == source]
    assert candidate.price_per_hour == pytest.approx(own)
    verdict = balanced.scores([candidate], own, {"default": [candidate]}, seen.policies)["default"]
    assert verdict.saved == pytest.approx(1.0)  # the pool's total is the node's own price


def test_should_approve_single_node_pool_delete_with_expected_scoring():
    """Adversarial / should approve single-node pool DELETE with expected scoring

    The pool's only node ($4.84, one pod) deleted: it saves 100% of the pool's cost for 100%
    of its disruption (2 of 2), score 1.0 against the threshold 0.5: approved."""
    only = node("pool-single", XLARGE, 1, node_name="only-node")
    pools, single = grouped(only), policies(**{"pool-single": BALANCED})
    verdict = balanced.scores([only], XLARGE, pools, single)["pool-single"]
    assert balanced.balanced_refusal([only], XLARGE, pools, single) is None, verdict
    assert verdict.saved >= 1.0
    assert verdict.disrupted == pytest.approx(1.0)
    assert verdict.score == pytest.approx(1.0)
