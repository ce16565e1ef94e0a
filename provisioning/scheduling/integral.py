"""Integer packing of pod classes into nodes: the step that makes plans cheaper than upstream's.

Upstream fills each new NodeClaim as far as the largest instance type allows and right-sizes
at the end; on mixed shapes that buys big general-purpose nodes where a few memory-optimized
and a few compute-optimized ones would do. Here the pods without topology or affinity
constraints are packed as a cutting-stock problem, solved by column generation on HiGHS:

* a *pattern* is one node: an instance type and how many pods of each class it holds (they
  fit its usable resources). Variables ``z_p``: how many nodes of pattern ``p``;

      minimize    sum_p price(p) * z_p
      subject to  sum_p pods_c(p) * z_p >= n_c                for every class c
                  NodePool limits on the nodes' capacity and number;

* the LP relaxation starts from one-class patterns and grows: the LP's duals price each
  class, and for every type a greedy fill by value per resource share proposes the pattern
  that would lower the cost most; columns are added while any has a negative reduced cost;
* the integer program over the generated patterns gives the nodes (HiGHS branch and bound
  under a time limit; rounding the LP up is the fallback).

Each pattern is a real node, so every pod placed fits. Pure: no Django, boto3, kubernetes or
redis.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import highspy
import numpy as np

from provisioning.scheduling.lowerbound import highs, undominated

# Rounds of column generation at most; patterns proposed per type and round.
MAX_ROUNDS = 40
# One-class patterns per class to start from.
START_TYPES = 2
# Types per round whose best pattern is found exactly, and the seconds each may take.
EXACT_TYPES = 4
KNAPSACK_SECONDS = 0.05
# Share of the time budget column generation may use; the integer program gets the rest.
GENERATION_SHARE = 0.6
# Blends of cpu and memory share that order the classes of a greedy fill.
BLENDS = (0.0, 0.25, 0.5, 0.75, 1.0)
# Stop the integer program within this fraction of its own optimum.
MIP_GAP = 0.005
# Even splits: types whose n equal nodes hold every pod, the cheapest this many, trying n from
# the fewest the resources allow to this many more.
EVEN_TYPES, EVEN_TRIES = 3, 3
_EPS = 1e-9


@dataclass
class Packing:
    """``nodes``: per node, its type (an index into the caller's arrays) and the pods of each
    class on it (class index → count). ``leftover``: per class, the pods not packed."""

    nodes: list[tuple[int, dict[int, int]]] = field(default_factory=list)
    leftover: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    status: str = "empty"
    lp_cost: float = 0.0  # the relaxation over the generated patterns (a bound for these types)


def pack(
    demand: np.ndarray,
    counts: np.ndarray,
    usable: np.ndarray,
    price: np.ndarray,
    compat: np.ndarray,
    *,
    capacity: np.ndarray | None = None,
    limits: dict[int, int] | None = None,
    node_limit: int | None = None,
    time_limit: float = 1.0,
) -> Packing:
    """Pack ``counts[c]`` pods of each class (requests ``demand[c]``, one row per class, one
    column per resource) into nodes of the types with ``usable`` resources and ``price``;
    ``compat[c, t]`` says whether class c may go on type t. ``limits`` bounds the summed
    ``capacity`` of the new nodes per resource column; ``node_limit`` their number."""
    start = time.perf_counter()
    counts = np.asarray(counts, dtype=np.int64)
    packing = Packing(leftover=counts.copy())
    copies = _copies(demand, usable)
    compat = compat & (copies > 0) & np.isfinite(price)[None, :]
    classes = np.flatnonzero(compat.any(axis=1) & (counts > 0))
    if not len(classes):
        packing.status = "no type holds these pods" if counts.any() else "empty"
        return packing
    types = np.flatnonzero(compat[classes].any(axis=0))
    if not limits:  # without limits a dominated type is never needed (see lowerbound)
        types = types[undominated(price[types], usable[types], compat[np.ix_(classes, types)])]
    problem = _Problem(
        demand[classes],
        counts[classes],
        usable[types],
        price[types],
        compat[np.ix_(classes, types)],
        capacity[types] if capacity is not None and limits else None,
        limits or {},
        node_limit,
    )
    deadline = start + time_limit
    problem.generate(start + time_limit * GENERATION_SHARE)
    packing.lp_cost = problem.lp_cost
    chosen = problem.integral(deadline)
    if chosen is None:
        packing.status = "no integral packing found"
        return packing
    left = counts[classes].copy()
    for p, nodes in chosen:
        t, pattern = problem.patterns[p]
        for _ in range(nodes):
            take = np.minimum(pattern, left)
            if not take.any():
                break
            left -= take
            packing.nodes.append((int(types[t]), {int(classes[c]): int(take[c]) for c in np.flatnonzero(take)}))
    packing.leftover[classes] = left
    packing.status = "optimal" if not left.any() else "partial"
    return packing


class _Problem:
    """The master problem over the patterns generated so far."""

    def __init__(self, demand, counts, usable, price, compat, capacity, limits, node_limit) -> None:
        self.demand, self.counts, self.usable, self.price = demand, counts, usable, price
        self.compat, self.capacity, self.limits, self.node_limit = compat, capacity, limits, node_limit
        self.copies = np.where(compat, np.minimum(_copies(demand, usable), counts[:, None]), 0)
        # Share of a node of each type one pod takes, per resource (classes × types × resources).
        with np.errstate(divide="ignore", invalid="ignore"):
            self.share = np.where(usable[None, :, :] > 0, demand[:, None, :] / usable[None, :, :], np.inf)
        self.share = np.where(demand[:, None, :] > 0, self.share, 0.0)
        self.patterns: list[tuple[int, np.ndarray]] = []
        self._seen: set[bytes] = set()
        self.lp_cost = 0.0
        self.h = highs()
        inf = highspy.kHighsInf
        n = len(counts)
        self.h.addRows(
            n, counts.astype(float), np.full(n, inf), 0, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0)
        )
        self._limit_rows = []
        for column, left in limits.items():
            if capacity is not None:
                self._limit_rows.append(capacity[:, column].astype(float))
                self.h.addRow(-inf, float(left), 0, np.zeros(0, np.int32), np.zeros(0))
        if node_limit is not None:
            self._limit_rows.append(np.ones(len(price)))
            self.h.addRow(-inf, float(node_limit), 0, np.zeros(0, np.int32), np.zeros(0))
        # A slack column per class: pods left unpacked, at a price no node reaches, so the
        # program stays feasible under NodePool limits and the caller places the rest.
        self._unpacked_price = float(price.max() * 1000 + 1)
        for c in range(n):
            self.h.addCol(self._unpacked_price, 0.0, float(counts[c]), 1, np.array([c], np.int32), np.ones(1))
        self._slack = n
        self.even: tuple[int, int] | None = None  # (pattern, nodes) of the cheapest even split
        self._even_splits()
        # Start from one-class patterns on the types cheapest per pod of each class (enough for
        # a feasible start; pricing reaches every other type).
        with np.errstate(divide="ignore"):
            per_pod = np.where(self.copies > 0, price[None, :] / np.maximum(self.copies, 1), np.inf)
        for c in range(n):
            for t in np.argsort(per_pod[c], kind="stable")[:START_TYPES]:
                if self.copies[c, t]:
                    pattern = np.zeros(n, dtype=np.int64)
                    pattern[c] = self.copies[c, t]
                    self._add(int(t), pattern)

    def _even_splits(self) -> None:
        """Column generation prices patterns at the LP's values, and the LP splits pods freely;
        on a few dozen pods the patterns it leaves may only cover them with a node too many
        (e.g. two half-empty nodes per class where one node holding a share of each would
        do). So the patterns of even splits start the problem too: on a type that takes every
        class, ``n`` nodes each holding ``ceil(count / n)`` of every class, for the fewest
        ``n`` that fit; the cheapest few, the cheapest of them also a start for the integer
        program (``integral``)."""
        counts = self.counts
        takes_all = self.compat[counts > 0].all(axis=0)
        if not takes_all.any():
            return
        types = np.flatnonzero(takes_all)
        usable = self.usable[types].astype(float)
        total = counts.astype(float) @ self.demand.astype(float)  # resources of every pod
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.where(total[None, :] > 0, total[None, :] / usable, 0.0).max(axis=1)
        fewest = np.maximum(np.ceil(need - 1e-9), 1).astype(np.int64)
        best: dict[int, int] = {}
        for extra in range(EVEN_TRIES):
            nodes = fewest + extra
            for i in np.flatnonzero(np.isfinite(need)):
                t = int(types[i])
                if t in best:
                    continue
                share = -(-counts // nodes[i])
                if (share @ self.demand <= self.usable[t]).all() and self._within_limits(t, int(nodes[i])):
                    best[t] = int(nodes[i])
        ranked = sorted(best, key=lambda t: (best[t] * self.price[t], t))[:EVEN_TYPES]
        for rank, t in enumerate(ranked):
            share = -(-counts // best[t])
            self._add(t, share)
            if rank == 0:
                index = next(i for i, (u, p) in enumerate(self.patterns) if u == t and np.array_equal(p, share))
                self.even = (index, best[t])

    def _within_limits(self, t: int, nodes: int) -> bool:
        """``nodes`` nodes of type ``t`` keep to the NodePool's limits."""
        if self.node_limit is not None and nodes > self.node_limit:
            return False
        if self.capacity is None:
            return True
        return all(nodes * int(self.capacity[t, column]) <= left for column, left in self.limits.items())

    def _add(self, t: int, pattern: np.ndarray) -> bool:
        key = t.to_bytes(4, "little") + pattern.tobytes()
        if key in self._seen or not pattern.any():
            return False
        self._seen.add(key)
        self.patterns.append((t, pattern))
        rows = np.flatnonzero(pattern)
        values = pattern[rows].astype(float)
        extra = [(len(self.counts) + i, row[t]) for i, row in enumerate(self._limit_rows) if row[t]]
        index = np.concatenate([rows, [r for r, _ in extra]]).astype(np.int32)
        values = np.concatenate([values, [v for _, v in extra]])
        self.h.addCol(float(self.price[t]), 0.0, highspy.kHighsInf, len(index), index, values)
        return True

    def generate(self, deadline: float) -> None:
        """Column generation: add the patterns with negative reduced cost until none is left."""
        for _ in range(MAX_ROUNDS):
            self.h.run()
            if self.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                return
            self.lp_cost = float(self.h.getInfo().objective_function_value)
            if time.perf_counter() > deadline:
                return
            duals = np.asarray(self.h.getSolution().row_dual)
            value = np.maximum(duals[: len(self.counts)], 0.0)
            penalty = np.zeros(len(self.price))
            for dual, row in zip(duals[len(self.counts) :], self._limit_rows, strict=True):
                penalty += -min(dual, 0.0) * row  # limit rows are <=: their duals are <= 0
            added = 0
            gains: dict[int, float] = {}
            for t, pattern in self._price_patterns(value):
                worth = float(pattern @ value) - penalty[t]
                gains[t] = max(gains.get(t, 0.0), worth / self.price[t] if self.price[t] > 0 else math.inf)
                if worth > self.price[t] * (1 + 1e-6) + _EPS and self._add(t, pattern):
                    added += 1
            # The greedy fills miss mixes; the types that look best get an exact knapsack.
            for t in sorted(gains, key=lambda t: -gains[t])[:EXACT_TYPES]:
                if time.perf_counter() > deadline:
                    break  # each knapsack may take its time limit: none starts after the deadline
                pattern = self._knapsack(t, value)
                if pattern is not None and float(pattern @ value) - penalty[t] > self.price[t] * (1 + 1e-6) + _EPS:
                    added += self._add(t, pattern)
            if not added:
                return

    def _knapsack(self, t: int, value: np.ndarray) -> np.ndarray | None:
        """The pattern of type ``t`` worth the most at the classes' ``value``s (a small MIP)."""
        classes = np.flatnonzero(self.compat[:, t] & (value > _EPS))
        k = len(classes)
        if not k:
            return None
        h = highs()
        h.setOptionValue("time_limit", KNAPSACK_SECONDS)
        h.setOptionValue("mip_rel_gap", 1e-4)
        columns = np.arange(k, dtype=np.int32)
        h.addVars(k, np.zeros(k), self.copies[classes, t].astype(float))
        h.changeColsCost(k, columns, -value[classes])
        h.changeColsIntegrality(k, columns, np.full(k, highspy.HighsVarType.kInteger))
        for r in range(self.usable.shape[1]):
            need = self.demand[classes, r].astype(float)
            if need.any():
                h.addRow(-highspy.kHighsInf, float(self.usable[t, r]), k, columns, need)
        h.run()
        if h.getInfo().primal_solution_status != 2:
            return None
        pattern = np.zeros(len(self.counts), dtype=np.int64)
        pattern[classes] = np.rint(np.asarray(h.getSolution().col_value)).astype(np.int64)
        return pattern

    def _price_patterns(self, value: np.ndarray, counts: np.ndarray | None = None):
        """Per type, greedy fills in several orders (value per dominant share, and per blends
        of cpu and memory share), vectorized over the types; of at most ``counts`` pods per
        class (default: all of them)."""
        counts = self.counts if counts is None else counts
        n_classes, n_types, n_res = self.share.shape
        useful = (value > _EPS)[:, None] & self.compat
        cpu, memory = self.share[:, :, 0], self.share[:, :, min(1, n_res - 1)]
        orders = [self.share.max(axis=2)] + [a * cpu + (1 - a) * memory for a in BLENDS]
        for size in orders:
            with np.errstate(divide="ignore", invalid="ignore"):
                density = np.where(useful & (size > 0), value[:, None] / size, np.where(useful, np.inf, -np.inf))
            ranking = np.argsort(-density, axis=0, kind="stable")  # classes × types
            room = self.usable.astype(np.int64).copy()
            patterns = np.zeros((n_types, n_classes), dtype=np.int64)
            every = np.arange(n_types)
            for k in range(n_classes):
                c = ranking[k]
                need = self.demand[c]  # types × resources
                with np.errstate(divide="ignore"):
                    fit = np.where(need > 0, room // np.where(need > 0, need, 1), np.iinfo(np.int64).max).min(axis=1)
                take = np.where(useful[c, every], np.minimum(fit, counts[c]), 0)
                take = np.maximum(take, 0)
                patterns[every, c] = take
                room -= take[:, None] * need
            for t in range(n_types):
                yield t, patterns[t]

    def integral(self, deadline: float) -> list[tuple[int, int]] | None:
        """(pattern, nodes) of the integer program, started from the LP rounded: its whole
        nodes, and the pods that leaves over covered by greedy fills (cutting stock's usual
        rounding, within a few nodes of the optimum where rounding every pattern up is not)."""
        if not self.patterns:
            return None
        self.h.run()
        lp_values = None
        duals = None
        if self.h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            lp_values = np.asarray(self.h.getSolution().col_value)
            duals = np.maximum(np.asarray(self.h.getSolution().row_dual)[: len(self.counts)], 0.0)
        rounded = None
        if lp_values is not None and not self._limit_rows:
            rounded = self._rounded(lp_values, duals)  # may add columns: before the count below
        n = self._slack + len(self.patterns)
        self.h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger))
        self.h.setOptionValue("mip_rel_gap", MIP_GAP)
        self.h.setOptionValue("time_limit", max(0.05, deadline - time.perf_counter()))
        if self.even is not None:
            index, nodes = self.even
            if rounded is None or nodes * self.price[self.patterns[index][0]] < self._cost(rounded) - _EPS:
                rounded = np.zeros(self._slack + len(self.patterns), dtype=np.int64)
                rounded[self._slack + index] = nodes
        if rounded is not None:
            # HiGHS's presolve drops dominated columns, and a start that uses one then counts
            # it at zero: the MIP took an infeasible start for its incumbent and stopped there.
            self.h.setOptionValue("presolve", "off")
            start = highspy.HighsSolution()  # feasible: the rounding has no limits, the even split keeps them
            start.col_value = list(rounded.astype(float))
            start.value_valid = True
            self.h.setSolution(start)
        self.h.run()
        if self.h.getInfo().primal_solution_status == 2:  # feasible
            values = np.rint(np.asarray(self.h.getSolution().col_value)).astype(np.int64)
        elif rounded is not None:
            values = rounded
        else:
            return None
        values = values[self._slack :]
        return [(int(p), int(values[p])) for p in np.flatnonzero(values > 0)]

    def _cost(self, values: np.ndarray) -> float:
        """The price of a whole-number solution (its unpacked pods at their slack price)."""
        prices = np.array([self.price[t] for t, _ in self.patterns[: len(values) - self._slack]])
        unpacked = self._unpacked_price * float(values[: self._slack].sum())
        return float(values[self._slack :] @ prices) + unpacked

    def _rounded(self, lp_values: np.ndarray, duals: np.ndarray) -> np.ndarray:
        """A whole-number solution: the LP's whole nodes, then, while pods are left, the node
        whose greedy fill of them is worth most per price (at the LP's values of the classes)."""
        whole = np.floor(lp_values[self._slack :] + 1e-7).astype(np.int64)
        left = self.counts.copy()
        for (_, pattern), nodes in zip(self.patterns, whole, strict=True):
            if nodes:
                left -= pattern * nodes
        left = np.maximum(left, 0)
        # A class the LP values at 0 (degenerate) is still worth its cheapest share of a node.
        with np.errstate(divide="ignore", invalid="ignore"):
            floor_value = np.where(self.compat, self.price[None, :] * self.share.max(axis=2), np.inf).min(axis=1)
        value = np.maximum(duals, np.where(np.isfinite(floor_value), floor_value, 0.0)) + _EPS
        extra: dict[int, int] = {}
        for _ in range(int(left.sum())):
            if not left.any():
                break
            best = None
            for t, pattern in self._price_patterns(value, left):
                take = np.minimum(pattern, left)
                worth = float(take @ value) / self.price[t] if self.price[t] > 0 else math.inf
                if take.any() and (best is None or worth > best[0]):
                    best = (worth, t, take)
            if best is None:
                break  # no type holds what is left: the slack columns take it
            _, t, take = best
            key = t.to_bytes(4, "little") + take.tobytes()
            if key not in self._seen:
                self._add(t, take)
            index = next(i for i, (u, p) in enumerate(self.patterns) if u == t and np.array_equal(p, take))
            extra[index] = extra.get(index, 0) + 1
            left -= take
        values = np.zeros(self._slack + len(self.patterns), dtype=np.int64)
        values[: self._slack] = left  # whatever no node holds stays unpacked
        values[self._slack : self._slack + len(whole)] = whole
        for index, nodes in extra.items():
            values[self._slack + index] += nodes
        return values


def _copies(demand: np.ndarray, usable: np.ndarray) -> np.ndarray:
    """How many pods of each class one empty node of each type holds (classes × types)."""
    copies = np.full((len(demand), len(usable)), np.iinfo(np.int64).max, dtype=np.int64)
    for j in range(demand.shape[1]):  # a resource at a time, dividing only where pods ask for it
        asks = np.flatnonzero(demand[:, j] > 0)
        if len(asks):
            copies[asks] = np.minimum(copies[asks], usable[None, :, j] // demand[asks, j, None])
    return np.maximum(copies, 0)
