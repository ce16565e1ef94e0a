"""The LP-relaxation lower bound: hand-checkable cases, validity against brute force, and speed
on the real catalog."""

from __future__ import annotations

import itertools
import random
import time

import numpy as np
import pytest

from provisioning.scheduling.instancetypes import InstanceType, Offering, Overhead
from provisioning.scheduling.lowerbound import EMPTY, INFEASIBLE, OPTIMAL, PodClass, lp_lower_bound, undominated

GI = 2**30


def itype(name, cpu, memory_gi, price, *, pods=110, extra=None, spot=None, available=True, labels=None):
    """A type with ``cpu`` cores and ``memory_gi`` GiB allocatable (no overhead)."""
    capacity = {"cpu": int(cpu * 1000), "memory": int(memory_gi * GI), "pods": pods, **(extra or {})}
    offerings = [Offering("zone-a", "on-demand", price, available)]
    if spot is not None:
        offerings.append(Offering("zone-a", "spot", spot, True))
    return InstanceType(
        name, {"node.kubernetes.io/instance-type": name, **(labels or {})}, capacity, Overhead(), tuple(offerings)
    )


def pods(count, cpu, memory_gi=0.0, **extra):
    return PodClass(count, {"cpu": int(cpu * 1000), "memory": int(memory_gi * GI), "pods": 1, **extra})


# -- hand-checkable -----------------------------------------------------------------------------


def test_nodes_already_paid_for_take_pods_at_no_cost_up_to_their_number():
    """Two nodes that stay whatever the plan (price 0, 2 cores free each, at most one of each
    kind) take 4 of the 7 one-core pods; the other 3 need 3 cores of new capacity at 0.05 a
    core. Without the bound on their number they would take every pod for nothing."""
    staying = itype("staying", 2, 4, 0.0)
    also = itype("also-staying", 2, 4, 0.0)
    new = itype("new", 4, 8, 0.20)
    bound = lp_lower_bound([pods(7, 1, 1)], [staying, also, new], available={"staying": 1, "also-staying": 1})
    assert bound.status == OPTIMAL
    assert bound.cost_per_hour == pytest.approx(3 * 0.05)
    assert bound.nodes["staying"] == pytest.approx(1) and bound.nodes["also-staying"] == pytest.approx(1)
    unbounded = lp_lower_bound([pods(7, 1, 1)], [staying, new])
    assert unbounded.cost_per_hour == pytest.approx(0)


def test_a_type_of_bounded_number_dominates_nothing():
    """The free node is cheaper and larger than ``new``; dropping ``new`` as dominated would
    leave the 6 pods beyond the free node's room nowhere to go."""
    free = itype("free", 4, 8, 0.0)
    new = itype("new", 2, 4, 0.10)
    bound = lp_lower_bound([pods(10, 1, 1)], [free, new], available={"free": 1})
    assert bound.status == OPTIMAL
    assert bound.cost_per_hour == pytest.approx(6 * 0.05)



def test_one_class_two_types_takes_the_cheaper_per_unit():
    small = itype("small", 2, 4, 0.10)  # 0.050 per core
    large = itype("large", 4, 8, 0.19)  # 0.0475 per core
    bound = lp_lower_bound([pods(3, 1, 1)], [small, large])
    assert bound.status == OPTIMAL
    assert bound.cost_per_hour == pytest.approx(3 * 0.0475)  # 3 cores at the large's rate
    assert bound.nodes == pytest.approx({"large": 0.75})
    assert bound.seconds >= 0


def test_the_binding_resource_sets_the_bound():
    cpu_box = itype("cpu-box", 8, 8, 0.40)
    mem_box = itype("mem-box", 2, 32, 0.40)
    # memory-heavy pods: 4 GiB each, 16 pods = 64 GiB = two mem-boxes (cpu 16*0.25 = 4 cores fits)
    bound = lp_lower_bound([pods(16, 0.25, 4)], [cpu_box, mem_box])
    assert bound.cost_per_hour == pytest.approx(0.80)
    assert bound.nodes == pytest.approx({"mem-box": 2.0})


def test_fractional_answer_is_below_the_integral_optimum():
    # 1.5-core pods on 2-core nodes: one pod per node, so 3 pods need 3 nodes ($0.30);
    # the relaxation packs 4.5 cores into 2.25 nodes.
    node = itype("node", 2, 8, 0.10)
    bound = lp_lower_bound([pods(3, 1.5, 1)], [node])
    assert bound.cost_per_hour == pytest.approx(0.225)
    assert bound.cost_per_hour < 0.30


def test_mixed_shapes_share_nodes_in_the_relaxation():
    # cpu-heavy (2 cores, 1 GiB) and memory-heavy (0.5 core, 7 GiB) pods complement each other on
    # an 8-core 32 GiB node: 3 + 4 of them fill 8 cores and 31 GiB.
    node = itype("node", 8, 32, 0.40)
    bound = lp_lower_bound([pods(3, 2, 1), pods(4, 0.5, 7)], [node])
    assert bound.cost_per_hour == pytest.approx(0.40 * max(8 / 8, 31 / 32))


def test_incompatibility_is_respected():
    cheap = itype("cheap", 4, 16, 0.10, labels={"kubernetes.io/arch": "arm64"})
    dear = itype("dear", 4, 16, 0.20, labels={"kubernetes.io/arch": "amd64"})
    amd64_only = PodClass(4, {"cpu": 1000, "pods": 1}, lambda it: it.labels.get("kubernetes.io/arch") == "amd64")
    anywhere = PodClass(4, {"cpu": 1000, "pods": 1})
    assert lp_lower_bound([amd64_only], [cheap, dear]).cost_per_hour == pytest.approx(0.20)
    assert lp_lower_bound([anywhere], [cheap, dear]).cost_per_hour == pytest.approx(0.10)
    both = lp_lower_bound([amd64_only, anywhere], [cheap, dear])
    assert both.cost_per_hour == pytest.approx(0.30)
    assert both.nodes == pytest.approx({"cheap": 1.0, "dear": 1.0})


def test_a_pod_that_fits_no_single_node_is_not_split_across_nodes():
    # 3 cores do not fit a 2-core node even though two such nodes have 4 cores between them.
    small = itype("small", 2, 8, 0.10)
    large = itype("large", 4, 8, 0.50)
    bound = lp_lower_bound([pods(1, 3)], [small, large])
    assert bound.cost_per_hour == pytest.approx(0.50 * 3 / 4)


def test_a_class_that_fits_nowhere_is_reported_not_raised():
    node = itype("node", 4, 16, 0.20)
    bound = lp_lower_bound([pods(2, 1, 1), pods(5, 8, 1)], [node])
    assert bound.status == INFEASIBLE
    assert bound.unplaceable == (1,)
    assert "fit no compatible instance type" in bound.message
    assert not bound.ok
    # the bound still covers the classes that fit: 2 cores of 4
    assert bound.cost_per_hour == pytest.approx(0.10)


def test_an_incompatible_everywhere_class_is_unplaceable():
    node = itype("node", 4, 16, 0.20)
    nowhere = PodClass(1, {"cpu": 100, "pods": 1}, lambda it: False)
    bound = lp_lower_bound([nowhere], [node])
    assert bound.status == INFEASIBLE
    assert bound.unplaceable == (0,)
    assert bound.cost_per_hour == 0.0


def test_no_types_at_all_is_infeasible():
    bound = lp_lower_bound([pods(1, 1)], [])
    assert bound.status == INFEASIBLE and bound.unplaceable == (0,)


def test_no_pods_is_empty():
    node = itype("node", 4, 16, 0.20)
    assert lp_lower_bound([], [node]).status == EMPTY
    bound = lp_lower_bound([pods(0, 1)], [node])
    assert bound.status == EMPTY and bound.cost_per_hour == 0.0 and bound.ok


def test_extended_resources_count():
    cpu_node = itype("cpu", 8, 32, 0.40)
    gpu_node = itype("gpu", 8, 32, 1.00, extra={"nvidia.com/gpu": 1})
    bound = lp_lower_bound([pods(2, 1, 1, **{"nvidia.com/gpu": 1}), pods(8, 1, 1)], [cpu_node, gpu_node])
    # two GPU nodes are unavoidable; their 14 spare cores take the other 8 pods
    assert bound.cost_per_hour == pytest.approx(2.00)


def test_per_node_caps_one_pod_of_a_group_per_node():
    node = itype("node", 16, 64, 0.80)
    spread = PodClass(4, {"cpu": 100, "pods": 1, "anti-affinity/web": 1})
    bound = lp_lower_bound([spread], [node], per_node={"anti-affinity/web": 1})
    assert bound.cost_per_hour == pytest.approx(4 * 0.80)


def test_prices_use_only_available_offerings_of_the_allowed_capacity_types():
    a = itype("a", 4, 16, 0.20, spot=0.06)
    b = itype("b", 4, 16, 0.15)
    gone = itype("gone", 4, 16, 0.01, available=False)
    assert lp_lower_bound([pods(4, 1)], [a, b, gone]).cost_per_hour == pytest.approx(0.06)
    on_demand = lp_lower_bound([pods(4, 1)], [a, b, gone], capacity_types=frozenset({"on-demand"}))
    assert on_demand.cost_per_hour == pytest.approx(0.15)
    priced = lp_lower_bound([pods(4, 1)], [a, b], price=lambda it: 0.5 if it.name == "a" else None)
    assert priced.cost_per_hour == pytest.approx(0.5)


def test_dominated_types_are_dropped_without_changing_the_bound():
    best = itype("best", 4, 16, 0.10)
    dearer_twin = itype("dearer-twin", 4, 16, 0.12)
    dearer_smaller = itype("dearer-smaller", 2, 8, 0.11)
    twin = itype("twin", 4, 16, 0.10)  # identical: one of the two stays
    bound = lp_lower_bound([pods(4, 1, 1)], [best, dearer_twin, dearer_smaller, twin])
    assert bound.types == 1
    assert bound.cost_per_hour == pytest.approx(0.10)


def test_a_cheaper_bigger_type_does_not_dominate_one_it_cannot_replace():
    arm = itype("arm", 8, 32, 0.10, labels={"kubernetes.io/arch": "arm64"})
    amd = itype("amd", 4, 16, 0.20, labels={"kubernetes.io/arch": "amd64"})
    amd64 = PodClass(4, {"cpu": 1000, "pods": 1}, lambda it: it.labels.get("kubernetes.io/arch") == "amd64")
    bound = lp_lower_bound([amd64, pods(8, 1)], [arm, amd])
    assert bound.types == 2
    assert bound.cost_per_hour == pytest.approx(0.20 + 0.10)


def _dominated_by_definition(cost, alloc, compat):
    """Pair by pair, as the docstring of ``undominated`` says."""
    n = len(cost)
    out = set()
    for t in range(n):
        for u in range(n):
            if u == t or cost[u] > cost[t] or (alloc[u] < alloc[t]).any() or (compat[:, t] & ~compat[:, u]).any():
                continue
            identical = cost[u] == cost[t] and (alloc[u] == alloc[t]).all() and (compat[:, u] == compat[:, t]).all()
            if not identical or u < t:
                out.add(t)
    return out


@pytest.mark.parametrize("block", [256, 3])
def test_undominated_keeps_exactly_the_types_no_other_dominates(monkeypatch, block):
    monkeypatch.setattr("provisioning.scheduling.lowerbound._DOMINANCE_BLOCK", block)
    rng = np.random.default_rng(3)
    for _ in range(300):
        n, classes, resources = int(rng.integers(0, 25)), int(rng.integers(0, 4)), int(rng.integers(1, 4))
        cost = rng.integers(0, 4, n).astype(float)  # few values: ties and identical types are common
        alloc = rng.integers(0, 3, (n, resources))
        compat = rng.random((classes, n)) < 0.7
        kept = undominated(cost, alloc, compat)
        assert list(kept) == sorted(set(range(n)) - _dominated_by_definition(cost, alloc, compat))


# -- validity: never above the integral optimum ----------------------------------------------------


def _partitions(items):
    """Every set partition of ``items`` (a list)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in _partitions(rest):
        for i in range(len(partition)):
            yield partition[:i] + [[first, *partition[i]]] + partition[i + 1 :]
        yield [[first], *partition]


def _integral_optimum(pod_requests, types):
    """The cheapest plan by brute force: every grouping of the pods into nodes, each node the
    cheapest type its pods fit on."""
    prices = [t.cheapest_price() for t in types]
    best = float("inf")
    for partition in _partitions(list(range(len(pod_requests)))):
        total = 0.0
        for group in partition:
            need = {r: sum(pod_requests[p].get(r, 0) for p in group) for r in ("cpu", "memory", "pods")}
            fitting = [
                price
                for t, price in zip(types, prices, strict=True)
                if all(need[r] <= t.allocatable.get(r, 0) for r in need)
            ]
            if not fitting:
                total = float("inf")
                break
            total += min(fitting)
        best = min(best, total)
    return best


def test_the_bound_never_exceeds_the_brute_force_optimum():
    rng = random.Random(7)
    for _ in range(25):
        types = [
            itype(f"t{i}", rng.choice([1, 2, 4, 8]), rng.choice([2, 4, 8, 16, 32]), round(rng.uniform(0.02, 0.5), 3))
            for i in range(3)
        ]
        shapes = [(rng.choice([0.25, 0.5, 1, 1.5]), rng.choice([0.5, 1, 2, 4])) for _ in range(2)]
        counts = [rng.randint(1, 3) for _ in shapes]
        classes = [pods(n, cpu, mem) for n, (cpu, mem) in zip(counts, shapes, strict=True)]
        requests = [c.requests for c in classes for _ in range(c.count)]
        optimum = _integral_optimum(requests, types)
        bound = lp_lower_bound(classes, types)
        if optimum == float("inf"):
            assert bound.status == INFEASIBLE
            continue
        assert bound.status == OPTIMAL
        assert bound.cost_per_hour <= optimum + 1e-9
        # and it is not trivial: at least the cheapest per-unit price of the binding resource
        assert bound.cost_per_hour > 0


# -- the real catalog --------------------------------------------------------------------------------


def test_real_catalog_is_fast_and_below_a_single_type_packing():
    from provisioning.cloud.catalog import Catalog, snapshot_path

    types = Catalog.from_snapshot(snapshot_path("us-east-1")).instance_types(None)
    assert len(types) > 1000
    rng = random.Random(42)
    cpus = [100, 250, 500, 1000, 1500]
    mems = [100, 256, 512, 1024, 2048, 4096]
    shapes = rng.sample(list(itertools.product(cpus, mems)), 10)
    classes = [PodClass(500, {"cpu": c, "memory": m * 2**20, "pods": 1}) for c, m in shapes]
    start = time.perf_counter()
    bound = lp_lower_bound(classes, types)
    elapsed = time.perf_counter() - start
    assert bound.status == OPTIMAL
    assert bound.types < len(types)  # dominated types dropped
    assert elapsed < 5.0, elapsed
    # A feasible point of the relaxation: m5.xlarge only, as many (fractional) nodes as the
    # scarcest resource needs; the optimum is no dearer.
    m5 = next(t for t in types if t.name == "m5.xlarge")
    alloc = m5.allocatable
    cpu = sum(c.count * c.requests["cpu"] for c in classes)
    mem = sum(c.count * c.requests["memory"] for c in classes)
    fraction = max(cpu / alloc["cpu"], mem / alloc["memory"], 5000 / alloc["pods"])
    assert bound.cost_per_hour <= fraction * m5.cheapest_price()
