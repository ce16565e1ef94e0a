"""Static NodePools (``spec.replicas``, upstream's StaticCapacity): how many NodeClaims to
create, and what each one is.

A static NodePool keeps ``replicas`` nodes whatever the pods want. Its claims are made from
the NodePool's template alone, with no scheduling simulation: every instance type its
requirements allow, cheapest first, so the launch takes the cheapest and falls back to the next
(upstream's CreateFleet with the template's types). There is no zone spreading: pin zones, or
use one NodePool per zone, as upstream says.

The counts are upstream's NodePoolState: ``running`` claims (live, not being deleted, not in a
command that waits for its replacement), ``deleting`` ones (draining or terminating) and
``pending_disruption`` ones (a drift command's nodes while their replacements come up).
``limits.nodes`` bounds running + deleting + pending disruption + what is created.

Pure: no Django, boto3, kubernetes or redis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from provisioning.scheduling.plan import ClaimPlan
from provisioning.scheduling.pools import PoolModel
from provisioning.scheduling.snapshot import NodePoolInput, StaticPool

MAX_INSTANCE_TYPES = 60  # the options a claim carries, as the solver's (upstream's MaxInstanceTypes default)


@dataclass(frozen=True)
class PoolCount:
    """A static NodePool's NodeClaims as upstream's ``GetNodeCount`` reports them."""

    running: int = 0
    deleting: int = 0
    pending_disruption: int = 0

    @property
    def total(self) -> int:
        return self.running + self.deleting + self.pending_disruption


def node_limit(limits: Mapping[str, int]) -> int | None:
    """``limits.nodes`` (None: unbounded); the only limit a static NodePool may have."""
    value = limits.get("nodes")
    return None if value is None else int(value)


def room(count: PoolCount, limit: int | None, wanted: int) -> int:
    """Upstream's ``ReserveNodeCount``: as many of ``wanted`` as ``limits.nodes`` leaves room
    for beside the running, deleting and pending-disruption claims (0 when over it)."""
    if wanted <= 0:
        return 0
    if limit is None:
        return wanted
    return max(0, min(wanted, limit - count.total))


def to_create(replicas: int, count: PoolCount, limit: int | None) -> int:
    """Claims to create now. Nothing while running plus pending disruption already reaches
    ``replicas`` (a drift command's replacement is on its way: counting both keeps the pool
    from growing past ``replicas`` meanwhile); else ``replicas - running``, within the limit."""
    if count.running + count.pending_disruption >= replicas:
        return 0
    return room(count, limit, replicas - count.running)


def to_remove(replicas: int, count: PoolCount) -> int:
    """Claims to scale down now: the running ones past ``replicas`` (those pending disruption
    are not counted, so a drift replacement coming up is never taken for an extra node)."""
    return max(0, count.running - replicas)


def template_claim(pool: NodePoolInput, max_instance_types: int = MAX_INSTANCE_TYPES) -> ClaimPlan | None:
    """A NodeClaim of the NodePool's template (None: its requirements allow no offering):
    every allowed instance type at its cheapest allowed offering, cheapest first, so the launch
    takes the cheapest type and falls back in price order."""
    model = PoolModel(pool, (), ())
    mask = model.type_mask(pool.requirements)
    options = model.options(mask, pool.requirements, limit=max_instance_types)
    if not options:
        return None
    cheapest = options[0]
    return ClaimPlan(
        name="",
        nodepool=pool.name,
        requirements=pool.requirements,
        options=tuple(options),
        pods=(),
        requests={},
        why=(
            f"static NodePool {pool.name} (spec.replicas): {cheapest.instance_type} {cheapest.capacity_type} in "
            f"{cheapest.zone} is the cheapest offering its requirements allow"
        ),
        labels=dict(pool.labels),
        annotations=dict(pool.annotations),
    )


def unlaunchable(pool: NodePoolInput) -> str:
    """Why ``template_claim`` found nothing, for people."""
    if not pool.instance_types:
        return f"NodePool {pool.name}: its EC2NodeClass offers no instance type"
    return f"NodePool {pool.name}: no instance type with an available offering meets its requirements"


@dataclass(frozen=True)
class StaticPlan:
    """What the static controllers would do to one static NodePool now (``simulate``)."""

    nodepool: str
    replicas: int
    running: int
    node_limit: int | None
    launch: tuple[ClaimPlan, ...]
    remove: int
    note: str = ""

    @property
    def price(self) -> float:
        return sum(claim.price for claim in self.launch)


def plan_static(pools: Sequence[StaticPool]) -> list[StaticPlan]:
    """Each static NodePool of a snapshot: its nodes (those the snapshot lists with its
    ``karpenter.sh/nodepool`` label, in-flight claims included), the claims scale-up would
    launch and how many nodes scale-down would remove."""
    plans = []
    for static in pools:
        pool = static.pool
        count = PoolCount(running=int(pool.in_use.get("nodes", 0)))
        limit = node_limit(pool.limits)
        wanted = to_create(static.replicas, count, limit)
        claim = template_claim(pool) if wanted else None
        note = ""
        if wanted and claim is None:
            note = unlaunchable(pool)
        elif not wanted and count.running < static.replicas:
            note = f"limits.nodes {limit} reached"
        launch = (
            tuple(replace(claim, name=f"{pool.name}-static-{i + 1}") for i in range(wanted))
            if claim is not None
            else ()
        )
        plans.append(
            StaticPlan(
                pool.name, static.replicas, count.running, limit, launch, to_remove(static.replicas, count), note
            )
        )
    return plans
