"""The LP-relaxation lower bound on the hourly cost of placing pods.

Pods are grouped into classes of identical requests (``PodClass``); the relaxation packs
them fractionally into instance types:

* ``x_t >= 0``: how many nodes of type ``t`` (fractional), each at the cheapest available
  offering price ``p_t`` of the type;
* ``y_ct >= 0``: how many pods of class ``c`` go on type ``t``;

    minimize    sum_t p_t * x_t
    subject to  sum_t y_ct = n_c                                for every class c
                sum_c y_ct * req_cr <= alloc_tr * x_t           for every type t and resource r
                y_ct = 0  where c is incompatible with t, or one pod of c does not fit one node of t

Resources are every resource some class requests (cpu, memory, pods, ephemeral-storage,
extended resources); a type without a resource has none of it. ``per_node`` adds resources
every node has in the same amount whatever its type, which lets a caller express "at most
one pod of this group per node" (required hostname anti-affinity of a group to itself) as a
resource the group's pods request 1 of and every node has 1 of.

Why it is a lower bound on every integral plan that places all the pods: take such a plan,
let ``N_t`` be its number of nodes of type ``t`` and ``Y_ct`` the number of pods of class
``c`` it puts on them. Each pod is on exactly one node, so ``sum_t Y_ct = n_c``; each node's
pods fit its allocatable, so summing over the ``N_t`` nodes of a type gives
``sum_c Y_ct * req_cr <= alloc_tr * N_t``; a pod only sits on a node it is compatible with and
fits on alone. So ``(N, Y)`` is feasible for the relaxation, and the plan pays at least
``sum_t p_t * N_t`` (no offering of a type is cheaper than its cheapest), which is at least
the relaxation's optimum. Every further constraint a real plan obeys (topology spread,
affinity, DaemonSet overhead, limits, the 60-type cap) only shrinks the set of plans, so the
bound stays valid under all of them. It prices new capacity only: pods that nodes already
running could take are the caller's to leave out.

``available`` bounds how many nodes of a type there may be (``x_t <= available_t``): nodes
that are already paid for and stay whatever the plan does are types of their own, priced 0, with
their free room as allocatable and at most one of each. The bound then covers the plans that
keep those nodes, and the caller adds what they cost.

Dropping dominated types does not change the optimum: when type ``u`` costs no more than
``t``, has at least ``t``'s allocatable on every requested resource and accepts every class
``t`` accepts, moving ``t``'s nodes and pods to ``u`` keeps a solution feasible and no dearer.
That needs as many ``u`` as ``t`` had: a type of bounded availability dominates nothing (it
may itself be dropped for an unbounded one that dominates it).

Solved with HiGHS (``highspy``). Pure: no Django, boto3, kubernetes or redis.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import highspy
import numpy as np

from provisioning.scheduling.instancetypes import InstanceType

OPTIMAL = "optimal"
INFEASIBLE = "infeasible"  # some class fits no instance type; the bound covers the other classes
EMPTY = "empty"  # no pods: the bound is 0
TIME_LIMIT = "time-limit"  # HiGHS stopped early; cost_per_hour is 0 (no valid bound known)
ERROR = "error"  # HiGHS failed; cost_per_hour is 0

# Types per block when comparing every pair of types for dominance (bounds the memory used).
_DOMINANCE_BLOCK = 256


@dataclass(frozen=True)
class PodClass:
    """``count`` pods with identical ``requests`` (base units: millicores, bytes, counts).

    ``compatible`` says whether the class may run on an instance type at all (requirements,
    zones, taints: the caller's business); None means every type.
    """

    count: int
    requests: Mapping[str, int]
    compatible: Callable[[InstanceType], bool] | None = None


@dataclass(frozen=True)
class LowerBound:
    """The relaxation's optimum.

    ``cost_per_hour`` is a lower bound on the hourly price of any plan that places every pod
    of the classes not listed in ``unplaceable``. ``unplaceable`` holds the indices of the
    classes whose pods fit no compatible instance type (status ``infeasible``). ``nodes`` is
    the fractional node count per instance type of the optimum; ``types`` how many types
    the LP saw after the dominated ones were dropped.
    """

    cost_per_hour: float
    seconds: float
    status: str
    unplaceable: tuple[int, ...] = ()
    nodes: Mapping[str, float] = field(default_factory=dict)
    # Per pod class (its index in the input), the types its pods go to in the optimum.
    assignment: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    types: int = 0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status in (OPTIMAL, EMPTY)


def lp_lower_bound(
    pod_classes: Sequence[PodClass],
    instance_types: Sequence[InstanceType],
    *,
    capacity_types: frozenset[str] | None = None,
    price: Callable[[InstanceType], float | None] | None = None,
    per_node: Mapping[str, int] | None = None,
    available: Mapping[str, float] | None = None,
    time_limit: float = 60.0,
) -> LowerBound:
    """The LP-relaxation lower bound of packing ``pod_classes`` into ``instance_types``.

    A type's price is ``price(type)`` when given, else its cheapest available offering among
    ``capacity_types`` (all when None); types without a price are left out. Never raises for
    an unplaceable class: the status says ``infeasible`` and ``unplaceable`` names it.
    ``available``: at most this many nodes of the types named (unbounded otherwise).
    """
    start = time.perf_counter()

    def done(cost: float, status: str, **extra) -> LowerBound:
        return LowerBound(cost, time.perf_counter() - start, status, **extra)

    classes = [(i, c) for i, c in enumerate(pod_classes) if c.count > 0]
    if not classes:
        return done(0.0, EMPTY)

    # Resources: every one a class requests (nonzero), in a stable order.
    per_node = dict(per_node or {})
    resources = sorted({r for _, c in classes for r, amount in c.requests.items() if amount > 0})
    n_res = len(resources)
    demand = np.array([[c.requests.get(r, 0) for r in resources] for _, c in classes], dtype=float).reshape(
        len(classes), n_res
    )
    counts = np.array([c.count for _, c in classes], dtype=float)

    # Priced types and their allocatable.
    priced: list[InstanceType] = []
    prices: list[float] = []
    for it in instance_types:
        p = price(it) if price is not None else it.cheapest_price(capacity_types)
        if p is not None and math.isfinite(p) and p >= 0:
            priced.append(it)
            prices.append(p)
    alloc = np.zeros((len(priced), n_res))
    for t, it in enumerate(priced):
        allocatable = it.allocatable
        for j, r in enumerate(resources):
            alloc[t, j] = per_node[r] if r in per_node else allocatable.get(r, 0)
    cost = np.array(prices, dtype=float)

    # Which class may go on which type: compatible, and one pod fits one empty node.
    compat = np.zeros((len(classes), len(priced)), dtype=bool)
    verdicts: dict[int, np.ndarray] = {}  # predicates shared by classes are asked once per type
    for k, (_, c) in enumerate(classes):
        if c.compatible is None:
            allowed = np.ones(len(priced), dtype=bool)
        else:
            allowed = verdicts.get(id(c.compatible))
            if allowed is None:
                allowed = np.fromiter((bool(c.compatible(it)) for it in priced), dtype=bool, count=len(priced))
                verdicts[id(c.compatible)] = allowed
        fits = (demand[k][None, :] <= alloc).all(axis=1)
        compat[k] = allowed & fits

    placeable = compat.any(axis=1)
    unplaceable = tuple(classes[k][0] for k in np.flatnonzero(~placeable))
    status = INFEASIBLE if unplaceable else OPTIMAL
    message = ""
    if unplaceable:
        message = f"{len(unplaceable)} pod class(es) fit no compatible instance type: {list(unplaceable)}"
    keep_classes = np.flatnonzero(placeable)
    if not len(keep_classes):
        return done(0.0, status, unplaceable=unplaceable, message=message)
    demand, counts, compat = demand[keep_classes], counts[keep_classes], compat[keep_classes]

    # Drop types no class can use, then dominated ones.
    used = compat.any(axis=0)
    available = dict(available or {})
    limited = np.fromiter((it.name in available for it in priced), dtype=bool, count=len(priced))
    keep_types = np.flatnonzero(used & ~limited)
    keep_types = keep_types[undominated(cost[keep_types], alloc[keep_types], compat[:, keep_types])]
    keep_types = np.sort(np.concatenate([keep_types, np.flatnonzero(used & limited)]))
    alloc, cost, compat = alloc[keep_types], cost[keep_types], compat[:, keep_types]
    names = [priced[t].name for t in keep_types]
    upper = np.array([available.get(name, math.inf) for name in names], dtype=float)

    solved = _solve(demand, counts, alloc, cost, compat, time_limit, upper)
    if isinstance(solved, str):
        return done(0.0, solved, unplaceable=unplaceable, types=len(names), message=message or solved)
    objective, x, y, pair_c, pair_t = solved
    nodes = {names[t]: float(x[t]) for t in np.flatnonzero(x > 1e-9)}
    assignment: dict[int, dict[str, float]] = {}
    for p in np.flatnonzero(y > 1e-9):
        original = classes[keep_classes[pair_c[p]]][0]
        assignment.setdefault(original, {})[names[pair_t[p]]] = float(y[p])
    return done(
        max(objective, 0.0),
        status,
        unplaceable=unplaceable,
        nodes=nodes,
        assignment=assignment,
        types=len(names),
        message=message,
    )


def undominated(cost: np.ndarray, alloc: np.ndarray, compat: np.ndarray) -> np.ndarray:
    """Indices of the types no other type dominates.

    ``u`` dominates ``t`` when it costs no more, has at least as much of every resource and
    accepts every class ``t`` accepts; of identical types the first one is kept.
    """
    n = len(cost)
    if n <= 1:
        return np.arange(n)
    # Types accept one of a few distinct sets of classes: compare the sets once, then look
    # the pairs up (rather than comparing every pair's classes).
    accepted, kind = np.unique(compat.T, axis=0, return_inverse=True)
    kind = kind.reshape(-1)
    superset = (accepted[:, None, :] >= accepted[None, :, :]).all(axis=2)
    # In this order every type comes after the types that dominate it: cheaper first, then
    # more of each resource, then accepting more classes, then the first of equals. Dominance
    # is transitive, so a dominated type is dominated by an undominated one before it: each
    # block of types is compared with the undominated types so far and with itself.
    keys = [np.arange(n), -accepted.sum(axis=1)[kind]]
    keys += [-alloc[:, j] for j in reversed(range(alloc.shape[1]))]
    order = np.lexsort([*keys, cost])
    kept = np.zeros(0, dtype=np.int64)
    for lo in range(0, n, _DOMINANCE_BLOCK):
        block = order[lo : lo + _DOMINANCE_BLOCK]
        rivals = np.concatenate([kept, block])  # rows: candidates u; columns: the block's types t
        beats = cost[rivals, None] <= cost[None, block]
        strictly = cost[rivals, None] < cost[None, block]
        for j in range(alloc.shape[1]):  # a resource at a time: no pairs × resources array
            beats &= alloc[rivals, None, j] >= alloc[None, block, j]
            strictly |= alloc[rivals, None, j] > alloc[None, block, j]
        beats &= superset[kind[rivals, None], kind[None, block]]
        # u strictly better somewhere, or identical and earlier (so one of equals survives)
        strictly |= kind[rivals, None] != kind[None, block]
        beats &= strictly | (rivals[:, None] < block[None, :])
        beats &= rivals[:, None] != block[None, :]
        kept = np.concatenate([kept, block[~beats.any(axis=0)]])
    return np.sort(kept)


def highs():
    """A silent HiGHS instance.

    ``highspy.Highs()`` calls into HiGHS (to set up callbacks) before any option can be set,
    which prints the version banner on stdout; the bare binding does not, and has every
    method used here. Fall back to the wrapper should a release drop it.
    """
    bare = getattr(getattr(highspy, "_core", None), "_Highs", None)
    h = bare() if bare is not None else highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def packing_lp(
    demand: np.ndarray,
    counts: np.ndarray,
    alloc: np.ndarray,
    cost: np.ndarray,
    compat: np.ndarray,
    upper: np.ndarray | None = None,
) -> tuple[highspy.HighsLp, np.ndarray, np.ndarray]:
    """The relaxation as a HiGHS model, built column-wise, and the (class, type) of each y.

    Columns: x_0..x_{T-1}, then one y per compatible (class, type) pair. Rows: one demand row
    per class (= n_c), then one capacity row per (type, resource) scaled by 1/alloc so every
    x coefficient is -1 and every y coefficient is req/alloc (<= 1, since the pod fits).
    """
    n_classes, n_res = demand.shape
    n_types = len(cost)
    pair_c, pair_t = np.nonzero(compat)
    n_pairs = len(pair_c)
    n_cols = n_types + n_pairs
    n_rows = n_classes + n_types * n_res

    # x_t: -1 in rows (t, r) for every resource r the type has (a row whose alloc is 0 has
    # no y in it, since nothing requesting r fits, and needs no entry).
    has = alloc > 0
    x_t, x_r = np.nonzero(has)
    x_rows = n_classes + x_t * n_res + x_r
    x_vals = -np.ones(len(x_t))
    # y_ct: 1 in the demand row of c, req_cr/alloc_tr in rows (t, r) where req_cr > 0.
    ratio = np.zeros((n_pairs, n_res))
    req = demand[pair_c]
    mask = req > 0
    ratio[mask] = req[mask] / alloc[pair_t][mask]
    y_p, y_r = np.nonzero(mask)
    y_rows = n_classes + pair_t[y_p] * n_res + y_r
    y_vals = ratio[y_p, y_r]

    cols = np.concatenate([x_t, n_types + np.arange(n_pairs), n_types + y_p])
    rows = np.concatenate([x_rows, pair_c, y_rows])
    vals = np.concatenate([x_vals, np.ones(n_pairs), y_vals])
    order = np.lexsort((rows, cols))
    cols, rows, vals = cols[order], rows[order], vals[order]
    starts = np.searchsorted(cols, np.arange(n_cols + 1)).astype(np.int32)

    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    lp.col_cost_ = np.concatenate([cost, np.zeros(n_pairs)])
    lp.col_lower_ = np.zeros(n_cols)
    col_upper = np.full(n_cols, inf)
    if upper is not None:  # at most so many nodes of a type (inf: unbounded)
        col_upper[:n_types] = np.where(np.isfinite(upper), upper, inf)
    lp.col_upper_ = col_upper  # (assigned whole: the binding hands out copies)
    lp.row_lower_ = np.concatenate([counts, np.full(n_types * n_res, -inf)])
    lp.row_upper_ = np.concatenate([counts, np.zeros(n_types * n_res)])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = n_cols
    lp.a_matrix_.num_row_ = n_rows
    lp.a_matrix_.start_ = starts
    lp.a_matrix_.index_ = rows.astype(np.int32)
    lp.a_matrix_.value_ = vals
    return lp, pair_c, pair_t


def _solve(
    demand: np.ndarray,
    counts: np.ndarray,
    alloc: np.ndarray,
    cost: np.ndarray,
    compat: np.ndarray,
    time_limit: float,
    upper: np.ndarray | None = None,
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | str:
    """Solve the relaxation: the optimum, x, y and the (class, type) of each y; or a status
    on failure."""
    lp, pair_c, pair_t = packing_lp(demand, counts, alloc, cost, compat, upper)
    n_types = len(cost)
    h = highs()
    h.setOptionValue("time_limit", float(time_limit))
    if h.passModel(lp) != highspy.HighsStatus.kOk:
        return ERROR
    h.run()
    model_status = h.getModelStatus()
    if model_status == highspy.HighsModelStatus.kOptimal:
        solution = h.getSolution()
        values = np.asarray(solution.col_value)
        return float(h.getInfo().objective_function_value), values[:n_types], values[n_types:], pair_c, pair_t
    if model_status == highspy.HighsModelStatus.kTimeLimit:
        return TIME_LIMIT
    if model_status == highspy.HighsModelStatus.kInfeasible:
        return INFEASIBLE
    return ERROR
