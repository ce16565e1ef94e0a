"""Questions about one candidate: has it expired, may it be consolidated yet, what would
moving its pods cost, and in which order consolidation tries candidates."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

from provisioning.disruption.model import Candidate, PoolPolicy
from provisioning.disruption.text import duration, plural
from provisioning.scheduling.pods import Pod

# Upstream's eviction cost: 1 + pod-deletion-cost / 2^27 + priority / 2^25, clamped so one pod
# never outweighs ten ordinary ones.
PRIORITY_SCALE = 2.0**25
DELETION_COST_SCALE = 2.0**27
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
EVICTION_COST_BOUND = 10.0


def eviction_cost(pod: Pod) -> float:
    cost = 1.0 + pod.priority / PRIORITY_SCALE
    # A value that is not an integer is ignored, as the ReplicaSet controller ignores it.
    with contextlib.suppress(ValueError):
        cost += int(pod.annotations.get(DELETION_COST, "0")) / DELETION_COST_SCALE
    return max(-EVICTION_COST_BOUND, min(EVICTION_COST_BOUND, cost))


def disruption_cost(candidate: Candidate) -> float:
    """What moving the node's pods costs: 1 for the node, plus each pod's positive eviction cost
    (upstream's ``RescheduleDisruptionCost``)."""
    return 1.0 + sum(max(0.0, eviction_cost(pod)) for pod in candidate.pods)


def consolidation_order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Most savings per unit of disruption first (price / disruption cost, as upstream since
    v1.14), then fewer pods, then the name, so the order never depends on the input's."""
    return sorted(candidates, key=lambda c: (-c.price_per_hour / disruption_cost(c), len(c.pods), c.name))


def interleave_pools(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Round-robin over NodePools (each in its given order), so one large pool cannot starve
    the others of single-node consolidation's attention."""
    queues: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        queues.setdefault(candidate.nodepool, []).append(candidate)
    out: list[Candidate] = []
    lists = list(queues.values())
    for round_index in range(max((len(q) for q in lists), default=0)):
        out.extend(q[round_index] for q in lists if round_index < len(q))
    return out


def expire_after(candidate: Candidate, policy: PoolPolicy | None) -> float | None:
    """The claim's own expireAfter when it recorded one, else its NodePool's (None: never,
    or neither says: a claim that recorded none and whose NodePool is gone)."""
    own = candidate.expire_after_seconds
    if isinstance(own, str):
        return policy.expire_after_seconds if policy is not None else None
    return own


def grace_period(candidate: Candidate, policy: PoolPolicy | None) -> float | None:
    """The claim's own terminationGracePeriod when it recorded one, else its NodePool's."""
    own = candidate.termination_grace_period_seconds
    if isinstance(own, str):
        return policy.termination_grace_period_seconds if policy is not None else None
    return own


def expired(candidate: Candidate, policy: PoolPolicy | None, now: float) -> bool:
    """Past the claim's expireAfter since it was created. The claim's own expireAfter is
    enough: as upstream's expiration controller, this needs no NodePool."""
    after = expire_after(candidate, policy)
    return after is not None and now >= candidate.created_at + after


def consolidation_wait(candidate: Candidate, policy: PoolPolicy, now: float) -> float | None:
    """Seconds until ``consolidateAfter`` has passed since the last pod change (0 when it has),
    or None when the pool never consolidates (``consolidateAfter: Never``)."""
    if policy.consolidate_after_seconds is None:
        return None
    return max(0.0, candidate.last_pod_change_at + policy.consolidate_after_seconds - now)


def not_consolidatable(candidate: Candidate, policy: PoolPolicy, now: float) -> str | None:
    """Why emptiness and consolidation must leave the node alone this round, or None.

    Checked in the order a person would fix things: what the node is, then what blocks it,
    then what time will settle.
    """
    if not candidate.initialized:
        return "not initialized yet: only initialized nodes are disrupted"
    if policy.static:
        return f"NodePool {policy.name} is static (spec.replicas): its nodes are never consolidated"
    if candidate.blocked_by:
        return f"disruption blocked: {candidate.blocked_by}"
    wait = consolidation_wait(candidate, policy, now)
    if wait is None:
        return f"NodePool {policy.name} has consolidateAfter: Never, so it is never consolidated or emptied"
    if wait > 0:
        after = duration(policy.consolidate_after_seconds or 0)
        since = duration(now - candidate.last_pod_change_at)
        return (
            f"consolidateAfter {after} not reached: its pods last changed {since} ago; "
            f"it can be consolidated in {duration(wait)}"
        )
    return None


# A single-node consolidation its re-check cancelled is not planned again for a minute,
# doubling with each cancel of the same node within the window (at most ten minutes).
RECHECK_BACKOFF_SECONDS = 60.0
MAX_RECHECK_BACKOFF_SECONDS = 600.0
RECHECK_BACKOFF_WINDOW_SECONDS = 3600.0


def recheck_backoff(candidate: Candidate, now: float) -> float:
    """Seconds until single-node consolidation may choose the node again after its re-check
    cancelled a single-node consolidation of it (0 when it may now).

    Upstream plans the first candidate that consolidates every round, so a node whose plan the
    cluster keeps overtaking (pods of nodes still draining bind where the plan moved its pods,
    a topology spread shifts) is planned and cancelled again and again while every candidate
    behind it waits. Backing off lets the others be looked at and the drains settle."""
    return backoff_left(candidate.recheck_cancelled, now)


def backoff_left(cancelled: Iterable[float], now: float) -> float:
    """:func:`recheck_backoff` of a node whose single-node consolidations were cancelled on
    their re-check at ``cancelled`` (epoch seconds)."""
    recent = [t for t in cancelled if now - t < RECHECK_BACKOFF_WINDOW_SECONDS]
    if not recent:
        return 0.0
    wait = min(RECHECK_BACKOFF_SECONDS * 2 ** (len(recent) - 1), MAX_RECHECK_BACKOFF_SECONDS)
    return max(0.0, max(recent) + wait - now)


def describe_pods(candidate: Candidate) -> str:
    return plural(len(candidate.pods), "pod")
