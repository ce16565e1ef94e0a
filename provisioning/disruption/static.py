"""Static NodePools' scale-down and drift (upstream's static deprovisioning controller and
its StaticDrift method).

Scale-down is forceful: it takes no disruption budget, but every node it removes is drained as
every disruption drains, through PodDisruptionBudgets and do-not-disrupt until the
terminationGracePeriod. It removes first the claims not launched yet (no instance: nothing to
drain), then empty nodes (DaemonSet pods only, none with an active do-not-disrupt), then the
others by disruption cost, those with a do-not-disrupt pod last.

Drift replaces a static NodePool's drifted nodes one for one, each by a claim of the template
(no simulation), as many as the pool's Drifted budget and ``limits.nodes`` allow, and none while
the pool runs more nodes than its replicas (scale-down goes first). A static NodePool's nodes
are never consolidated (``candidates.not_consolidatable``).

Pure: no Django, boto3, kubernetes or redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provisioning.scheduling.static import PoolCount, room


@dataclass(frozen=True)
class StaticMember:
    """One live NodeClaim of a static NodePool, as scale-down weighs it.

    ``launched``: it has an instance (upstream: a providerID). ``pods``: the eviction costs of
    its reschedulable pods (DaemonSet and mirror pods left out). ``do_not_disrupt``: a pod's
    ``karpenter.sh/do-not-disrupt`` is active. ``lifetime_remaining``: the share of its
    expireAfter left (1.0 when it never expires), which scales its cost as upstream's."""

    name: str
    launched: bool = True
    pods: tuple[float, ...] = ()
    do_not_disrupt: bool = False
    lifetime_remaining: float = 1.0
    created_at: float = 0.0

    @property
    def empty(self) -> bool:
        return not self.pods and not self.do_not_disrupt

    @property
    def cost(self) -> float:
        """Upstream's ``ReschedulingCost × LifetimeRemaining``."""
        return (1.0 + sum(max(0.0, c) for c in self.pods)) * self.lifetime_remaining


def scale_down(members: Sequence[StaticMember], count: int) -> list[StaticMember]:
    """The ``count`` claims to remove, in the order chosen: not launched first (oldest first),
    then empty nodes, then the cheapest to disrupt, do-not-disrupt last."""
    if count <= 0:
        return []
    unlaunched = sorted((m for m in members if not m.launched), key=lambda m: (m.created_at, m.name))
    launched = [m for m in members if m.launched]
    empty = sorted((m for m in launched if m.empty), key=lambda m: (m.created_at, m.name))
    others = sorted(
        (m for m in launched if not m.empty), key=lambda m: (m.do_not_disrupt, m.cost, m.created_at, m.name)
    )
    return [*unlaunched, *empty, *others][:count]


def drift_replacements(
    replicas: int, count: PoolCount, limit: int | None, budget_left: int, drifted: int
) -> tuple[int, str]:
    """How many drifted nodes of a static NodePool drift replaces this round, and when none,
    why (upstream's StaticDrift.ComputeCommands)."""
    if drifted <= 0:
        return 0, ""
    if budget_left <= 0:
        return 0, "its Drifted budget allows no more disruptions now"
    if count.running + count.pending_disruption > replicas:
        return 0, f"the NodePool runs more nodes than its {replicas} replicas: scale-down goes first"
    granted = room(count, limit, min(budget_left, drifted))
    if granted <= 0:
        return 0, f"limits.nodes {limit} leaves no room for a replacement"
    return granted, ""
