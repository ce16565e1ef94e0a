"""What would happen to the pods if some nodes went away: one run of THE solver.

As upstream's ``SimulateScheduling``: the removed nodes and the nodes already leaving are taken
out of the cluster, their pods become pending, and the solver places them on the nodes that
stay or on new NodeClaims. The removed nodes' capacity no longer counts against NodePool limits.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from provisioning.disruption.model import Candidate
from provisioning.disruption.text import plural
from provisioning.scheduling.plan import Plan
from provisioning.scheduling.snapshot import NodePoolInput, Snapshot
from provisioning.scheduling.workloads import ExistingNode

Solve = Callable[[Snapshot], Plan]
_SHOWN_FAILURES = 2


@dataclass(frozen=True)
class Simulation:
    plan: Plan
    failure: str | None  # why the moving pods cannot all be placed; None when they can


def simulate(
    removed: Sequence[Candidate],
    cluster: Snapshot,
    solve: Solve,
    *,
    leaving: Sequence[Candidate] = (),
    uninitialized: Collection[str] = (),
    optimize: bool | None = None,
    closed: Collection[str] = (),
    strict_min_values: bool = False,
) -> Simulation:
    """Remove ``removed`` (and ``leaving``: nodes already being deleted, whose pods need a home
    too) and place their pods together with the cluster's pending pods, as upstream does, so
    a move cannot take the room pending pods were about to use. Only the moving pods must
    all be placed; new NodeClaims the pending pods need count as the move's. Pods of
    ``removed`` may not land on ``uninitialized`` nodes, nor any on ``closed`` ones (they keep
    their pods and take no more). ``optimize`` overrides the cluster snapshot's packing choice
    when given; ``strict_min_values`` plans as MIN_VALUES_POLICY Strict (consolidation never
    relaxes minValues, as upstream)."""
    gone = {c.name for c in removed} | {c.name for c in leaving}
    pending = {pod.key for pod in cluster.pods}  # pods of nodes already leaving may be among them
    moving = [
        replace(pod, node_name=None) for c in (*removed, *leaving) for pod in c.pods if pod.key not in pending
    ]
    staying = tuple(
        replace(node, unschedulable=True) if node.name in closed else node
        for node in cluster.nodes
        if node.name not in gone
    )
    released = _released_capacity((*removed, *leaving), {n.name: n for n in cluster.nodes})
    snapshot = replace(
        cluster,
        pods=(*cluster.pods, *moving),
        nodes=staying,
        nodepools=tuple(_release(pool, released.get(pool.name)) for pool in cluster.nodepools),
        optimize=cluster.optimize if optimize is None else optimize,
        min_values_policy="Strict" if strict_min_values else cluster.min_values_policy,
    )
    plan = solve(snapshot)
    must_move = {p.key for c in (*removed, *leaving) for p in c.pods}
    return Simulation(plan, _failure(plan, must_move, {p.key for c in removed for p in c.pods}, uninitialized))


def _failure(plan: Plan, must_move: set[str], moved: set[str], uninitialized: Collection[str]) -> str | None:
    stranded = [(pod, why) for pod, why in plan.unschedulable.items() if pod in must_move]
    if stranded:
        shown = [f"{pod}: {why}" for pod, why in stranded[:_SHOWN_FAILURES]]
        more = len(stranded) - len(shown)
        tail = f" (and {plural(more, 'more pod')})" if more else ""
        return f"{plural(len(stranded), 'pod')} could not be placed elsewhere: {'; '.join(shown)}{tail}"
    for node, pods in plan.existing.items():
        if node in uninitialized and moved.intersection(pods):
            # Upstream counts this as a failure: the node may never become ready.
            return f"its pods would move onto node {node}, which is not initialized yet"
    return None


def _released_capacity(nodes: Sequence[Candidate], by_name: Mapping[str, ExistingNode]) -> dict[str, dict[str, int]]:
    """Per NodePool, the capacity (and node count) the removed nodes give back to its limits."""
    released: dict[str, dict[str, int]] = {}
    for candidate in nodes:
        freed = released.setdefault(candidate.nodepool, {})
        existing = by_name.get(candidate.name)
        for resource, amount in (existing.capacity if existing else {}).items():
            freed[resource] = freed.get(resource, 0) + amount
        freed["nodes"] = freed.get("nodes", 0) + 1
    return released


def _release(pool: NodePoolInput, freed: Mapping[str, int] | None) -> NodePoolInput:
    if not freed or not pool.in_use:
        return pool
    in_use = {key: max(0, used - freed.get(key, 0)) for key, used in pool.in_use.items()}
    return replace(pool, in_use=in_use)
