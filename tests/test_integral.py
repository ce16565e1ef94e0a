"""Integer packing (``integral.pack``) and what it buys the solver: plans on mixed shapes that
are cheaper than upstream's greedy packing and close to the LP lower bound."""

from __future__ import annotations

import numpy as np
import pytest

from provisioning.scheduling.integral import _copies, pack
from provisioning.scheduling.lowerbound import PodClass, lp_lower_bound
from provisioning.scheduling.snapshot import Snapshot
from provisioning.scheduling.solver import solve
from tests.test_solver import GI, itype, pods, pool

# cpu (m), memory (bytes), pods
COMPUTE = [8000, 16 * GI, 110]  # c: 2 GiB per vCPU
MEMORY = [8000, 64 * GI, 110]  # r: 8 GiB per vCPU
GENERAL = [16000, 64 * GI, 110]  # m: bigger, 4 GiB per vCPU
USABLE = np.array([COMPUTE, MEMORY, GENERAL], dtype=np.int64)
PRICE = np.array([0.34, 0.50, 0.77])


def _check(packing, demand, counts):
    """Every node holds what its type allows; pods placed plus leftover are the pods asked for."""
    placed = np.zeros(len(counts), dtype=np.int64)
    for t, contents in packing.nodes:
        used = sum(n * demand[c] for c, n in contents.items())
        assert (used <= USABLE[t]).all(), (t, contents)
        for c, n in contents.items():
            placed[c] += n
    assert (placed + packing.leftover == counts).all()
    return placed


def test_mixed_shapes_go_to_the_types_that_suit_them():
    # 20 cpu-heavy pods (2 vCPU, 1 GiB) and 20 memory-heavy pods (500m, 14 GiB).
    demand = np.array([[2000, GI, 1], [500, 14 * GI, 1]], dtype=np.int64)
    counts = np.array([20, 20])
    packing = pack(demand, counts, USABLE, PRICE, np.ones((2, 3), dtype=bool))
    placed = _check(packing, demand, counts)
    assert (placed == counts).all() and packing.status == "optimal"
    cost = sum(PRICE[t] for t, _ in packing.nodes)
    assert cost == pytest.approx(_optimum(demand, counts))
    # Mixing is what pays: one class per node type costs more.
    assert cost < 5 * 0.34 + 5 * 0.50
    bound = lp_lower_bound(
        [
            PodClass(20, {"cpu": 2000, "memory": GI, "pods": 1}),
            PodClass(20, {"cpu": 500, "memory": 14 * GI, "pods": 1}),
        ],
        [itype("c.x", 8, 16, 0.34), itype("r.x", 8, 64, 0.50), itype("m.x", 16, 64, 0.77)],
    )
    assert bound.cost_per_hour <= cost  # the relaxation is a lower bound; the DP is the optimum


def _optimum(demand, counts) -> float:
    """The cheapest packing of two classes, by dynamic programming over every node pattern."""
    patterns = []
    for t, room in enumerate(USABLE):
        for a in range(counts[0] + 1):
            for b in range(counts[1] + 1):
                if (a or b) and (a * demand[0] + b * demand[1] <= room).all():
                    patterns.append((a, b, PRICE[t]))
    best = np.full((counts[0] + 1, counts[1] + 1), np.inf)
    best[0, 0] = 0.0
    for i in range(counts[0] + 1):
        for j in range(counts[1] + 1):
            for a, b, price in patterns:
                previous = best[max(0, i - a), max(0, j - b)]
                best[i, j] = min(best[i, j], previous + price)
    return float(best[counts[0], counts[1]])


def test_incompatible_and_oversized_classes_are_left_over():
    demand = np.array([[1000, GI, 1], [64000, GI, 1], [1000, GI, 1]], dtype=np.int64)
    counts = np.array([3, 2, 4])
    compat = np.array([[True, True, True], [True, True, True], [False, False, False]])
    packing = pack(demand, counts, USABLE, PRICE, compat)
    _check(packing, demand, counts)
    assert list(packing.leftover) == [0, 2, 4]


def test_node_limit_and_capacity_limits_hold():
    demand = np.array([[4000, 4 * GI, 1]], dtype=np.int64)
    counts = np.array([10])  # 2 per compute or memory node, 4 per general node
    packing = pack(demand, counts, USABLE, PRICE, np.ones((1, 3), dtype=bool), node_limit=2)
    placed = _check(packing, demand, counts)
    assert len(packing.nodes) == 2 and placed[0] == 8 and packing.leftover[0] == 2
    capacity = USABLE.copy()
    packing = pack(demand, counts, USABLE, PRICE, np.ones((1, 3), dtype=bool), capacity=capacity, limits={0: 16000})
    _check(packing, demand, counts)
    assert sum(capacity[t, 0] for t, _ in packing.nodes) <= 16000
    assert packing.leftover[0] == 10 - sum(n for _, contents in packing.nodes for n in contents.values())


def test_copies_count_what_one_empty_node_holds():
    rng = np.random.default_rng(5)
    demand = rng.integers(0, 4, (6, 3))
    demand[0] = 0  # asks for nothing: any number fits
    usable = rng.integers(-2, 20, (5, 3))  # DaemonSets may leave a small type short
    copies = _copies(demand, usable)
    for c in range(len(demand)):
        for t in range(len(usable)):
            asked = [usable[t, r] // demand[c, r] for r in range(3) if demand[c, r]]
            assert copies[c, t] == max(0, min(asked, default=np.iinfo(np.int64).max))


def test_nothing_to_pack():
    packing = pack(np.zeros((0, 3), dtype=np.int64), np.zeros(0), USABLE, PRICE, np.zeros((0, 3), dtype=bool))
    assert packing.nodes == [] and packing.status == "empty"


def test_the_optimized_plan_is_cheaper_than_upstream_packing_on_mixed_shapes():
    workload = pods("cache", 30, cpu="250m", memory="12Gi") + pods("encoder", 30, cpu="3", memory="1Gi")
    types = (
        itype("c5.xlarge", 4, 8, 0.17),
        itype("c5.4xlarge", 16, 32, 0.68),
        itype("r5.xlarge", 4, 32, 0.252),
        itype("r5.4xlarge", 16, 128, 1.008),
        itype("m5.4xlarge", 16, 64, 0.768),
        itype("m5.16xlarge", 64, 256, 3.072),
    )
    snapshot = Snapshot(tuple(workload), (pool(types=types),))
    optimized = solve(snapshot)
    greedy = solve(Snapshot(tuple(workload), (pool(types=types),), optimize=False))
    assert not optimized.unschedulable and not greedy.unschedulable
    placed = sorted(p for claim in optimized.claims for p in claim.pods)
    assert placed == sorted(p.key for p in workload)
    assert optimized.total_price < greedy.total_price
    for claim in optimized.claims:  # every claim's chosen type holds what it was given
        assert claim.options[0].instance_type in {t.name for t in types}
    bound = lp_lower_bound(
        [
            PodClass(30, {"cpu": 250, "memory": 12 * GI, "pods": 1}),
            PodClass(30, {"cpu": 3000, "memory": GI, "pods": 1}),
        ],
        list(types),
    )
    assert optimized.total_price <= bound.cost_per_hour * 1.10
