"""What the disruption planners read and return: pool policies, budgets, candidates, commands.

Plain frozen dataclasses; times are epoch seconds and durations seconds, so the caller owns the
clock. ``PoolPolicy.from_spec`` reads a karpenter.sh/v1 NodePool spec (defaults as upstream).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from provisioning.crd.ec2nodeclass import go_duration_nanos
from provisioning.crd.nodepool import LEGACY_POLICIES
from provisioning.scheduling.plan import ClaimPlan
from provisioning.scheduling.pods import Pod

# Disruption reasons. The first three are the ones budgets may name; expiration is never budgeted.
EMPTY, DRIFTED, UNDERUTILIZED, EXPIRED = "Empty", "Drifted", "Underutilized", "Expired"
BUDGETED_REASONS = (EMPTY, DRIFTED, UNDERUTILIZED)

WHEN_EMPTY = "WhenEmpty"
WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
BALANCED = "Balanced"  # v1.14: underutilized moves must also pass a savings/disruption score
POLICIES = (WHEN_EMPTY, WHEN_EMPTY_OR_UNDERUTILIZED, BALANCED)

NEVER = "Never"
DEFAULT_EXPIRE_AFTER = 720 * 3600.0


def parse_duration(text: Any, path: str, *, never: bool = True) -> float | None:
    """A Go duration ("30s", "5m", "1h30m") in seconds; ``None`` for "Never" when ``never``.

    Raises ``ValueError`` naming ``path`` and what would be valid.
    """
    if never and text == NEVER:
        return None
    nanos = go_duration_nanos(text) if isinstance(text, str) else None
    if nanos is None or nanos < 0:
        valid = "a duration like 30s, 5m or 1h30m" + (" or Never" if never else "")
        raise ValueError(f"{path}: {text!r} is not {valid}")
    return nanos / 1e9


@dataclass(frozen=True)
class Budget:
    """One entry of ``spec.disruption.budgets``.

    ``nodes`` is a count ("5") or a percent of the pool's nodes ("10%", rounded up);
    ``schedule`` a 5-field cron or an @daily-style macro, in UTC, active for
    ``duration_seconds`` after each firing (both or neither); ``reasons`` the disruption
    reasons it limits (None: all of them). A budget that cannot be read allows nothing.
    """

    nodes: str = "10%"
    schedule: str | None = None
    duration_seconds: float | None = None
    reasons: tuple[str, ...] | None = None

    def applies_to(self, reason: str) -> bool:
        return self.reasons is None or reason in self.reasons


@dataclass(frozen=True)
class PoolPolicy:
    """A NodePool's disruption settings. ``None`` durations mean ``Never``.

    The legacy v1beta1 policy ``WhenUnderutilized`` is read as ``WhenEmptyOrUnderutilized``.
    """

    name: str
    consolidation_policy: str = WHEN_EMPTY_OR_UNDERUTILIZED
    consolidate_after_seconds: float | None = 0.0
    expire_after_seconds: float | None = DEFAULT_EXPIRE_AFTER
    termination_grace_period_seconds: float | None = None
    budgets: tuple[Budget, ...] = (Budget(),)
    static: bool = False  # spec.replicas: a static NodePool's nodes are never consolidated

    def __post_init__(self) -> None:
        policy = LEGACY_POLICIES.get(self.consolidation_policy, self.consolidation_policy)
        object.__setattr__(self, "consolidation_policy", policy)

    @property
    def consolidates_underutilized(self) -> bool:
        """Whether multi- and single-node consolidation may act (not only emptiness)."""
        return self.consolidation_policy != WHEN_EMPTY

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any]) -> PoolPolicy:
        """Read a karpenter.sh/v1 NodePool ``spec`` (the admission validator has checked it).

        Defaults as upstream: consolidationPolicy WhenEmptyOrUnderutilized, consolidateAfter
        0s, one budget of 10%, expireAfter 720h (also read from the v1beta1 place,
        ``spec.disruption.expireAfter``), no terminationGracePeriod. A malformed duration
        raises ``ValueError`` with its field path.
        """
        disruption = spec.get("disruption") or {}
        template_spec = (spec.get("template") or {}).get("spec") or {}
        after = disruption.get("consolidateAfter", "0s")
        expire = template_spec.get("expireAfter", disruption.get("expireAfter", "720h"))
        grace = template_spec.get("terminationGracePeriod")
        raw_budgets = disruption.get("budgets")
        budgets = (
            (Budget(),)
            if raw_budgets is None
            else tuple(_budget(b, f"spec.disruption.budgets[{i}]") for i, b in enumerate(raw_budgets))
        )
        return cls(
            name=name,
            consolidation_policy=disruption.get("consolidationPolicy") or WHEN_EMPTY_OR_UNDERUTILIZED,
            consolidate_after_seconds=parse_duration(after, "spec.disruption.consolidateAfter"),
            expire_after_seconds=parse_duration(expire, "spec.template.spec.expireAfter"),
            termination_grace_period_seconds=(
                None
                if grace is None
                else parse_duration(grace, "spec.template.spec.terminationGracePeriod", never=False)
            ),
            budgets=budgets,
            static=spec.get("replicas") is not None,
        )


def _budget(raw: Mapping[str, Any], path: str) -> Budget:
    duration = raw.get("duration")
    reasons = raw.get("reasons")
    return Budget(
        nodes=str(raw.get("nodes", "10%")),
        schedule=raw.get("schedule"),
        duration_seconds=None if duration is None else parse_duration(duration, f"{path}.duration", never=False),
        reasons=None if reasons is None else tuple(reasons),
    )


@dataclass(frozen=True)
class Candidate:
    """A Karpenter-managed node, as the caller saw it this round.

    ``pods`` are the reschedulable pods on it (DaemonSet and mirror pods left out);
    ``last_pod_change_at`` is when a pod last arrived or left (the Initialized time when none
    did), which ``consolidateAfter`` counts from. ``blocked_by`` says what forbids voluntary
    disruption (a pod's or the node's ``karpenter.sh/do-not-disrupt``, a PDB that allows no
    eviction); ``blocked_by_pods_only`` is True when only pods block it, which a
    terminationGracePeriod overrides for drift. ``disrupting`` is True while the node is
    already being replaced, drained or deleted: it counts against budgets and is not a candidate.
    """

    name: str
    nodeclaim: str
    nodepool: str
    instance_type: str
    capacity_type: str
    zone: str
    price_per_hour: float
    created_at: float
    initialized: bool
    pods: tuple[Pod, ...]
    last_pod_change_at: float
    drift_reason: str | None = None
    blocked_by: str | None = None
    disrupting: bool = False
    blocked_by_pods_only: bool = False
    ready: bool = True  # a NotReady node uses up its pool's budget, as a disrupting one does
    # The NodeClaim's own expireAfter (seconds, None for Never), fixed when it was created, so
    # shortening the NodePool's does not expire old nodes at once; "pool" when it has none.
    expire_after_seconds: float | None | str = "pool"
    # Likewise its terminationGracePeriod (None: none; "pool": its NodePool's).
    termination_grace_period_seconds: float | None | str = "pool"
    # What keeps it out of consolidation (not emptiness or drift): a node without its instance
    # type, zone or capacity type label, whose price and replacements cannot be read.
    unconsolidatable: str | None = None
    drifted_at: float | None = None  # when it was first seen drifted: the earliest drift goes first
    # When single-node consolidations of it were cancelled on their re-check lately (epoch
    # seconds): single-node consolidation backs off from it after each (``recheck_backoff``).
    recheck_cancelled: tuple[float, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.pods


class PoolScore(NamedTuple):
    """A Balanced pool's verdict on a move: the share of the pool's cost it saves, the share
    of the pool's disruption it causes, and their ratio (0 when there is nothing to weigh)."""

    score: float
    saved: float
    disrupted: float


@dataclass(frozen=True)
class Command:
    """One disruption: delete ``candidates`` (node names) once ``replacements`` are ready.

    ``savings_per_hour`` is what the cluster saves for sure: the candidates' prices minus the
    replacements' worst-case launch price (negative when a drift replacement costs more).
    ``forceful`` commands (expiration) delete at once, without waiting for a replacement.
    ``scores``: for a consolidation, each Balanced NodePool it touches and the score with
    which that pool approved it (``balanced.scores``), sorted by pool. ``method``: the planner's
    method that found it (``planner.METHODS``; empty for expiration), which its re-check asks again.
    """

    reason: str
    candidates: tuple[str, ...]
    replacements: tuple[ClaimPlan, ...]
    savings_per_hour: float
    explanation: str
    forceful: bool = False
    scores: tuple[tuple[str, PoolScore], ...] = ()
    method: str = ""

    def __post_init__(self) -> None:
        # Summed float prices carry noise (0.08800000000000002); a millionth of a dollar is plenty.
        object.__setattr__(self, "savings_per_hour", round(self.savings_per_hour, 6))

    @property
    def decision(self) -> str:
        return "replace" if self.replacements else "delete"


@dataclass(frozen=True)
class Progress:
    """How far consolidation got over the rounds since the last command, kept by the caller from
    one round to the next (a round has time for only so many simulations).

    Single-node consolidation goes on from candidate ``single_node``; once the candidates it
    looked at since the last command (``looked``) add up to all of them, it has nothing new to
    say until the cluster changes (upstream skips consolidation then too), and the rounds go to
    repacking, from window ``repacking`` on, until the windows it looked at (``repacked``) add up
    to all of its windows; then single-node consolidation's turn comes again."""

    single_node: int = 0
    looked: int = 0
    repacking: int = 0
    repacked: int = 0


@dataclass(frozen=True)
class DisruptionPlan:
    """The round's commands, and for every other candidate why it was left alone."""

    commands: tuple[Command, ...] = ()
    not_candidates: Mapping[str, str] = field(default_factory=dict)
    # Where consolidation goes on next round (give it back to ``plan``).
    progress: Progress = Progress()
    # Candidates single-node consolidation looked at this round, and those it did not reach
    # before its time ran out.
    reached: int = 0
    unreached: int = 0
    # Every consolidation method looked at every candidate since the last command and found
    # nothing (upstream's "consolidated" state): nothing changes until the cluster does.
    consolidated: bool = False
