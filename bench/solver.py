#!/usr/bin/env python3
"""Throughput, cost and memory of the solver on the benchmark scenarios (``bench/scenarios.py``).

    .venv/bin/python bench/solver.py                      # upstream mix at 5k and 20k, the cost scenarios
    .venv/bin/python bench/solver.py --quick              # smaller sizes, a smoke run
    .venv/bin/python bench/solver.py --scenario upstream-5000 --scenario mem-cpu-600
    .venv/bin/python bench/solver.py --no-lp              # skip the LP lower bound
    .venv/bin/python bench/solver.py --simulated-spot     # spot offerings priced by the simulated market

For each scenario, in a fresh process (so its peak memory is its own):

* the solver, ``provisioning.scheduling.solver.solve(snapshot)``, with cost optimization on
  (``Snapshot.optimize=True``): pods/s and seconds are of this run, from the snapshot to the plan;
* the same solver with the optimization step off (``optimize=False``): upstream's greedy packing,
  the baseline;
* on the cost scenarios, the configuration LP (``pattern_bound``): a tighter lower bound
  where small nodes hold few pods, so a pooled bound cannot be reached by any plan;
* the LP-relaxation lower bound (``provisioning.scheduling.lowerbound``) over pod classes of
  identical requests, compatible with the instance types the NodePool's requirements allow.
  Pods with required hostname anti-affinity to their own group count as at most one per node.
  The bound ignores the other spread and affinity rules, so on the upstream mix it is looser;

and prints one row: pods, pods/s and seconds (optimized), the hourly price of each plan and of
the bound, optimized/LP, optimized/greedy and greedy/LP, unschedulable pods of each plan, and the
process's peak resident memory after the optimized solve (``ru_maxrss``: interpreter, catalog and
pods included). A ratio over the bound is only shown when the plan placed every pod.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scenarios import find, instance_types, nodepool, scenarios, snapshot  # noqa: E402
from provisioning.scheduling.lowerbound import PodClass, lp_lower_bound  # noqa: E402
from provisioning.scheduling.pods import Pod  # noqa: E402
from provisioning.scheduling.requirements import INSTANCE_TYPE_LABELS, Requirements  # noqa: E402
from provisioning.scheduling.snapshot import NodePoolInput  # noqa: E402

HOSTNAME = "kubernetes.io/hostname"
CHILD_TIMEOUT = 1800  # seconds per scenario


# -- the LP bound's pod classes --------------------------------------------------------------------


def _self_anti_affinity(pod: Pod):
    """The pod's required hostname anti-affinity term that selects the pod itself, if any: pods
    carrying the same such term can never share a node."""
    for term in pod.pod_anti_affinity.required:
        if term.topology_key == HOSTNAME and term.selects(pod.namespace, pod.labels):
            return term
    return None


def pod_classes(pods: list[Pod], pool: NodePoolInput) -> tuple[list[PodClass], dict[str, int]]:
    """Pods grouped by identical requests (and node selection), with the compatibility the
    NodePool's requirements (instance-type keys only) and each pod's node selector and required
    node affinity give; plus the per-node resources for the anti-affinity groups."""
    base = pool.requirements.only(INSTANCE_TYPE_LABELS)
    counts: Counter = Counter()
    first: dict = {}
    groups: dict = {}
    for pod in pods:
        term = _self_anti_affinity(pod)
        group = groups.setdefault(term, f"anti-affinity/{len(groups)}") if term is not None else None
        key = (pod.requests, pod.node_selector, pod.required_node_affinity, group)
        counts[key] += 1
        first.setdefault(key, pod)
    predicates: dict = {}
    classes = []
    for key, count in counts.items():
        requests, node_selector, affinity, group = key
        selection = (node_selector, affinity)
        if selection not in predicates:
            predicates[selection] = _predicate(base, node_selector, affinity)
        amounts = dict(requests)
        if group is not None:
            amounts[group] = 1
        classes.append(PodClass(count, amounts, predicates[selection]))
    per_node = {group: 1 for term, group in groups.items() if term is not None}
    return classes, per_node


def _predicate(base: Requirements, node_selector, affinity):
    requirements = base.merge(Requirements.from_labels(dict(node_selector)).only(INSTANCE_TYPE_LABELS))
    terms = [Requirements.from_node_selector_term(t).only(INSTANCE_TYPE_LABELS) for t in affinity]

    def compatible(it) -> bool:
        return requirements.matches(it.labels) and (not terms or any(t.matches(it.labels) for t in terms))

    return compatible


def _pool_price(pool: NodePoolInput):
    """A type's cheapest available offering in the zones and capacity types the pool allows."""
    zone = pool.requirements.get("topology.kubernetes.io/zone")
    capacity = pool.requirements.get("karpenter.sh/capacity-type")

    def price(it) -> float | None:
        prices = [
            o.price
            for o in it.offerings
            if o.available
            and o.price is not None
            and (zone is None or zone.has(o.zone))
            and (capacity is None or capacity.has(o.capacity_type))
        ]
        return min(prices) if prices else None

    return price


def pattern_bound(classes: list[PodClass], pool: NodePoolInput) -> tuple[float, float]:
    """The configuration LP (Gilmore-Gomory): column generation over node patterns with every
    type priced exactly, to convergence. Every node of a real plan is a pattern, so this is a
    lower bound too, and a tighter one than the pooled LP when nodes hold only a few pods
    (small types). Returns (bound, seconds)."""
    import numpy as np

    from provisioning.scheduling import integral

    start = time.perf_counter()
    price = _pool_price(pool)
    types = [it for it in pool.instance_types if price(it) is not None]
    demand, usable, compat, prices = packing_arrays(classes, types, price)
    saved = integral.EXACT_TYPES, integral.KNAPSACK_SECONDS, integral.MAX_ROUNDS
    counts = np.array([c.count for c in classes], dtype=np.int64)
    copies = integral._copies(demand, usable)
    compat &= copies > 0
    keep = np.flatnonzero(compat.any(axis=0))
    keep = keep[integral.undominated(prices[keep], usable[keep], compat[:, keep])]
    integral.EXACT_TYPES, integral.KNAPSACK_SECONDS, integral.MAX_ROUNDS = len(keep), 10.0, 100_000
    try:
        problem = integral._Problem(demand, counts, usable[keep], prices[keep], compat[:, keep], None, {}, None)
        problem.generate(time.perf_counter() + CHILD_TIMEOUT)
    finally:  # the solver measured next in this process runs with its own settings
        integral.EXACT_TYPES, integral.KNAPSACK_SECONDS, integral.MAX_ROUNDS = saved
    return problem.lp_cost, time.perf_counter() - start


def packing_arrays(classes: list[PodClass], types, price, per_node: dict[str, int] | None = None) -> tuple:
    """What ``integral``'s packing reads, for ``classes`` over ``types``: the classes' requests
    and the types' allocatable (``per_node`` in place of it for those resources) per resource
    any class requests, which class may go on which type, and each type's ``price`` (infinite
    where it has none)."""
    import numpy as np

    per_node = per_node or {}
    resources = sorted({r for c in classes for r, v in c.requests.items() if v > 0})
    demand = np.array([[c.requests.get(r, 0) for r in resources] for c in classes], dtype=np.int64)
    usable = np.array(
        [[per_node[r] if r in per_node else it.allocatable.get(r, 0) for r in resources] for it in types],
        dtype=np.int64,
    )
    compat = np.array([[c.compatible is None or bool(c.compatible(it)) for it in types] for c in classes], dtype=bool)
    prices = np.array([math.inf if price(it) is None else price(it) for it in types])
    return demand, usable, compat, prices


# -- one scenario (in its own process) ------------------------------------------------------------


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def _load_solver():
    try:
        from provisioning.scheduling.solver import solve
    except ImportError as exc:  # the module, or a name in it, is not there (yet)
        return None, f"{type(exc).__name__}: {exc}"
    return solve, ""


def with_daemonsets(types, daemons) -> tuple:
    """The types as the bound sees them: DaemonSets that run on every node take their share of
    each type first (as they do in a plan)."""
    if not daemons:
        return types
    from dataclasses import replace

    from provisioning.scheduling.instancetypes import Overhead

    extra: dict[str, int] = {"pods": 0}
    for daemon in daemons:
        extra["pods"] += 1
        for name, amount in daemon.requests.items():
            if name != "pods":
                extra[name] = extra.get(name, 0) + amount
    out = []
    for it in types:
        reserved = dict(it.overhead.system_reserved)
        for name, amount in extra.items():
            reserved[name] = reserved.get(name, 0) + amount
        out.append(replace(it, overhead=Overhead(it.overhead.kube_reserved, reserved, it.overhead.eviction_threshold)))
    return tuple(out)


def run_one(name: str, lp: bool, simulated_spot: bool) -> dict:
    from provisioning.scheduling.verify import verify

    scenario = find(name)
    types = instance_types(simulated_spot)
    start = time.perf_counter()
    pods = scenario.pods()
    daemons = scenario.daemonsets()
    result: dict = {
        "scenario": scenario.name,
        "kind": scenario.kind,
        "pods": len(pods),
        "types": len(types),
        "build_seconds": time.perf_counter() - start,
    }
    pool = nodepool(with_daemonsets(types, daemons))
    if lp:
        classes, per_node = pod_classes(pods, pool)
        bound = lp_lower_bound(classes, pool.instance_types, price=_pool_price(pool), per_node=per_node)
        result.update(
            lp_cost=bound.cost_per_hour,
            lp_status=bound.status,
            lp_seconds=bound.seconds,
            lp_classes=len(classes),
            lp_types=bound.types,
            lp_message=bound.message,
        )
        if scenario.kind == "cost" and not per_node:
            result["pattern_cost"], result["pattern_seconds"] = pattern_bound(classes, pool)
    solve, missing = _load_solver()
    if solve is None:
        result["solver_missing"] = missing
        result["peak_mib"] = _rss_mib()
        return result
    for label, optimize in (("opt", True), ("greedy", False)):
        snap = snapshot(pods, types, optimize=optimize, daemonsets=daemons)
        start = time.perf_counter()
        try:
            plan = solve(snap)
        except Exception as exc:  # report it in the row, go on with the others
            result[f"{label}_error"] = f"{type(exc).__name__}: {exc}"
            continue
        seconds = time.perf_counter() - start
        # Every plan the pipeline records is checked by THE verifier first: so here too.
        checked = time.perf_counter()
        violations = verify(snap, plan)
        result[f"{label}_verify_seconds"] = time.perf_counter() - checked
        result[f"{label}_violations"] = len(violations)
        if violations:
            result[f"{label}_violation_kinds"] = dict(Counter(v.kind for v in violations))
        placed = sum(len(claim.pods) for claim in plan.claims) + sum(len(p) for p in plan.existing.values())
        result.update(
            {
                f"{label}_seconds": seconds,
                f"{label}_cost": plan.total_price,
                f"{label}_claims": len(plan.claims),
                f"{label}_placed": placed,
                f"{label}_unschedulable": len(plan.unschedulable),
                f"{label}_unreached": len(plan.unreached),
            }
        )
        if label == "opt":
            result["peak_mib"] = _rss_mib()
            reasons = Counter(plan.unschedulable.values())
            if reasons:
                result["opt_reasons"] = [f"{n}x {reason}" for reason, n in reasons.most_common(3)]
    result.setdefault("peak_mib", _rss_mib())
    return result


def run_child(name: str, lp: bool, simulated_spot: bool) -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", name]
    if not lp:
        argv.append("--no-lp")
    if simulated_spot:
        argv.append("--simulated-spot")
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"scenario": name, "error": f"timed out after {CHILD_TIMEOUT} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"scenario": name, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


# -- the table --------------------------------------------------------------------------------------


def _money(value) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _ratio(numerator, denominator, ok: bool = True) -> str:
    if numerator is None or denominator is None or not ok or denominator <= 0:
        return "-"
    return f"{numerator / denominator:.3f}"


COLUMNS = (
    ("scenario", "<"),
    ("pods", ">"),
    ("pods/s", ">"),
    ("seconds", ">"),
    ("verify s", ">"),
    ("verified pods/s", ">"),
    ("greedy pods/s", ">"),
    ("$/h opt", ">"),
    ("$/h greedy", ">"),
    ("$/h LP", ">"),
    ("opt/LP", ">"),
    ("$/h patterns", ">"),
    ("opt/patterns", ">"),
    ("opt/greedy", ">"),
    ("greedy/LP", ">"),
    ("unsched opt/greedy", ">"),
    ("greedy s", ">"),
    ("LP s", ">"),
    ("peak MiB", ">"),
)


def row(r: dict) -> list[str]:
    if "error" in r:
        return [r["scenario"], "-", "error: " + r["error"]]
    opt_seconds = r.get("opt_seconds")
    opt_cost, greedy_cost, lp_cost = r.get("opt_cost"), r.get("greedy_cost"), r.get("lp_cost")
    lp_ok = r.get("lp_status") == "optimal"
    opt_all = r.get("opt_unschedulable") == 0
    greedy_all = r.get("greedy_unschedulable") == 0
    unsched = "-"
    if "opt_unschedulable" in r or "greedy_unschedulable" in r:
        unsched = f"{r.get('opt_unschedulable', '-')}/{r.get('greedy_unschedulable', '-')}"
    verify_seconds = r.get("opt_verify_seconds")
    greedy_seconds = r.get("greedy_seconds")
    violations = r.get("opt_violations")
    return [
        r["scenario"],
        f"{r['pods']:,}",
        f"{r['pods'] / opt_seconds:,.0f}" if opt_seconds else "-",
        f"{opt_seconds:.2f}" if opt_seconds else "-",
        f"{verify_seconds:.2f}" if verify_seconds is not None else "-",
        (
            f"{r['pods'] / (opt_seconds + verify_seconds):,.0f}"
            + ("" if not violations else f" ({violations} violations)")
        )
        if opt_seconds and verify_seconds is not None
        else "-",
        f"{r['pods'] / greedy_seconds:,.0f}" if greedy_seconds else "-",
        _money(opt_cost),
        _money(greedy_cost),
        _money(lp_cost),
        _ratio(opt_cost, lp_cost, lp_ok and opt_all),
        _money(r.get("pattern_cost")),
        _ratio(opt_cost, r.get("pattern_cost"), opt_all),
        _ratio(opt_cost, greedy_cost, opt_all and greedy_all),
        _ratio(greedy_cost, lp_cost, lp_ok and greedy_all),
        unsched,
        f"{r['greedy_seconds']:.2f}" if r.get("greedy_seconds") else "-",
        f"{r['lp_seconds']:.2f}" if r.get("lp_seconds") is not None else "-",
        f"{r['peak_mib']:.0f}" if r.get("peak_mib") else "-",
    ]


def table(results: list[dict]) -> str:
    rows = [row(r) for r in results]
    widths = [len(name) for name, _ in COLUMNS]
    for cells in rows:
        if len(cells) == len(COLUMNS):
            widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]
    lines = ["  ".join(f"{name:{align}{w}}" for (name, align), w in zip(COLUMNS, widths, strict=True))]
    for cells in rows:
        if len(cells) != len(COLUMNS):
            lines.append("  ".join(cells))
            continue
        lines.append("  ".join(f"{c:{align}{w}}" for c, (_, align), w in zip(cells, COLUMNS, widths, strict=True)))
    return "\n".join(lines)


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def notes(results: list[dict]) -> list[str]:
    out = []
    for r in results:
        if r.get("solver_missing"):
            out.append(f"{r['scenario']}: solver missing ({r['solver_missing']}); LP bound and sizes only")
        for label in ("opt", "greedy"):
            if r.get(f"{label}_error"):
                out.append(f"{r['scenario']}: {label} solve failed: {r[f'{label}_error']}")
        if r.get("lp_status") not in (None, "optimal"):
            out.append(f"{r['scenario']}: LP {r['lp_status']} {r.get('lp_message', '')}".rstrip())
        for label in ("opt", "greedy"):
            if r.get(f"{label}_violations"):
                out.append(f"{r['scenario']}: THE verifier refused the {label} plan: {r[f'{label}_violation_kinds']}")
        for reason in r.get("opt_reasons", ()):
            out.append(f"{r['scenario']}: unschedulable (optimized): {reason[:200]}")
        if r.get("opt_unreached"):
            out.append(f"{r['scenario']}: {r['opt_unreached']} pods not reached before the deadline")
    cost = [r for r in results if r.get("kind") == "cost"]
    pairs = [
        (r["opt_cost"] / r["lp_cost"], r["greedy_cost"] / r["lp_cost"])
        for r in cost
        if r.get("lp_status") == "optimal"
        and r.get("opt_unschedulable") == 0
        and r.get("greedy_unschedulable") == 0
        and r.get("lp_cost")
    ]
    if pairs:
        opt_mean, greedy_mean = _geomean([p[0] for p in pairs]), _geomean([p[1] for p in pairs])
        out.append(
            f"cost scenarios, geometric mean over {len(pairs)}: "
            f"optimized/LP {opt_mean:.3f}, greedy/LP {greedy_mean:.3f}"
        )
    # The configuration LP is the tighter bound where small nodes hold few pods: the pooled LP
    # may lie below every fractional plan (patterns/LP > 1), and then below every real one.
    tight = [
        (r["scenario"], r["opt_cost"] / r["pattern_cost"], r["pattern_cost"] / r["lp_cost"])
        for r in cost
        if r.get("pattern_cost") and r.get("lp_cost") and r.get("opt_unschedulable") == 0
    ]
    if tight:
        out.append(
            "optimized / configuration LP (patterns/pooled LP): "
            + ", ".join(f"{name} {ratio:.3f} ({gap:.3f})" for name, ratio, gap in tight)
            + f"; geometric mean {_geomean([t[1] for t in tight]):.3f}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--no-lp", action="store_true", help="skip the LP lower bound")
    parser.add_argument("--simulated-spot", action="store_true", help="price spot offerings (simulated market)")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON too")
    parser.add_argument("--child", metavar="NAME", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(json.dumps(run_one(args.child, not args.no_lp, args.simulated_spot)))
        return 0

    names = args.scenario or [s.name for s in scenarios(args.quick)]
    for name in names:
        try:
            find(name)  # unknown names fail before anything runs
        except KeyError as exc:
            parser.error(exc.args[0])
    types = instance_types(args.simulated_spot)
    prices = "on-demand and simulated spot" if args.simulated_spot else "on-demand (the snapshot has no spot prices)"
    print(
        f"catalog: {len(types)} instance types of us-east-1, all families; prices: {prices}; "
        "NodePool: spot and on-demand, amd64 and arm64, linux",
        flush=True,
    )
    _, missing = _load_solver()
    if missing:
        print(f"solver missing: provisioning.scheduling.solver.solve ({missing}); printing the LP bound only")
    results = []
    for name in names:
        print(f"... {name}", file=sys.stderr, flush=True)
        results.append(run_child(name, not args.no_lp, args.simulated_spot))
    print(table(results))
    for line in notes(results):
        print(line)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
