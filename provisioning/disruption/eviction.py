"""Which pods may be evicted, and which to plan new capacity for, as upstream decides it
(``pkg/utils/pod/scheduling.go``, ``pkg/utils/pdb/pdb.go``).

* ``reschedulable``: active (or a terminating StatefulSet pod, whose replacement keeps its
  name), and neither a DaemonSet's nor a node's own (mirror) pod.
* ``evictable``: active, does not tolerate ``karpenter.sh/disrupted:NoSchedule``, not a mirror
  pod, and no active ``karpenter.sh/do-not-disrupt`` (``"true"``, or a duration such as
  ``"5m"`` measured from the pod's start).
* ``Limits``: the PodDisruptionBudgets. A pod matched by more than one cannot be evicted at
  all (the eviction API refuses it); a budget with ``maxUnavailable: 0`` (or ``0%``) or
  ``minAvailable: 100%`` blocks it fully; one with no disruption allowed now blocks it for now.
  ``unhealthyPodEvictionPolicy: AlwaysAllow`` lets a pod that is not Ready go regardless.

Pure: the clock is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from provisioning.crd.ec2nodeclass import go_duration_nanos
from provisioning.scheduling.labelselector import NOTHING, LabelSelector
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.taints import Taint, untolerated

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT = Taint("karpenter.sh/disrupted", "", "NoSchedule")


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def active(pod: Pod) -> bool:
    return not pod.terminal and not pod.deleting


def owned_by(pod: Pod, kind: str) -> bool:
    return pod.owner is not None and pod.owner.kind == kind


def reschedulable(pod: Pod) -> bool:
    """Should new capacity be planned for this pod when its node goes away?"""
    return (
        (active(pod) or (owned_by(pod, "StatefulSet") and pod.deleting))
        and not pod.is_daemonset
        and not owned_by(pod, "Node")
    )


def do_not_disrupt_active(pod: Pod, now: datetime) -> bool:
    """``karpenter.sh/do-not-disrupt``: ``"true"`` always; a duration while the pod is younger
    than it (from its start; a pod not started yet is protected). Anything else is ignored."""
    value = pod.annotations.get(DO_NOT_DISRUPT)
    if value is None:
        return False
    if value == "true":
        return True
    nanos = go_duration_nanos(value)
    if nanos is None or nanos <= 0:
        return False
    started = _time(pod.started_at)
    if started is None:
        return True
    return (now - started).total_seconds() < nanos / 1e9


def tolerates_disrupted(pod: Pod) -> bool:
    return untolerated(pod.tolerations, (DISRUPTED_TAINT,)) is None


def evictable(pod: Pod, now: datetime) -> bool:
    """Would Karpenter call the eviction API for this pod? (Others are left where they are.)"""
    return (
        active(pod)
        and not tolerates_disrupted(pod)
        and not owned_by(pod, "Node")
        and not (do_not_disrupt_active(pod, now))
    )


@dataclass(frozen=True)
class Budget:
    """One PodDisruptionBudget."""

    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int
    fully_blocking: bool
    always_evict_unhealthy: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, pod: Pod) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


def budget_from_manifest(manifest: Mapping[str, Any], pods: Sequence[Pod] = ()) -> Budget:
    """A PodDisruptionBudget document. ``status.disruptionsAllowed`` when the disruption
    controller wrote one; otherwise computed from the spec over ``pods`` (Ready pods are
    healthy), as the controller would: minAvailable or maxUnavailable, a percent of the
    selected pods rounded up."""
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    namespace = meta.get("namespace") or "default"
    raw = spec.get("selector")
    # A PodDisruptionBudget without a selector selects no pod (policy/v1).
    selector = LabelSelector.from_manifest(raw, "spec.selector") if raw is not None else NOTHING
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    fully = max_unavailable in (0, "0%") or min_available == "100%"
    status = manifest.get("status") or {}
    if "disruptionsAllowed" in status:
        allowed = int(status.get("disruptionsAllowed") or 0)
    else:
        selected = [p for p in pods if p.namespace == namespace and selector.matches(p.labels) and active(p)]
        allowed = disruptions_allowed(spec, len(selected), sum(1 for p in selected if p.ready is not False))
    return Budget(
        namespace,
        str(meta.get("name") or ""),
        selector,
        allowed,
        fully,
        spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow",
    )


def disruptions_allowed(spec: Mapping[str, Any], expected: int, healthy: int) -> int:
    """What a budget's ``spec`` allows over ``expected`` selected pods of which ``healthy`` are
    Ready, as the disruption controller computes it: minAvailable or maxUnavailable (a percent
    of the expected pods, rounded up); a budget with neither keeps every pod."""
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    if max_unavailable is not None:
        allowed = _scaled(max_unavailable, expected) - (expected - healthy)
    elif min_available is not None:
        allowed = healthy - _scaled(min_available, expected)
    else:
        allowed = healthy - expected
    return max(0, allowed)


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            return math.ceil(float(value[:-1]) * total / 100)
        except ValueError:
            return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class Limits:
    """The PodDisruptionBudgets of a cluster, asked about pods."""

    def __init__(self, budgets: Iterable[Budget] = ()) -> None:
        self.budgets = tuple(budgets)

    def matching(self, pod: Pod) -> list[Budget]:
        return [b for b in self.budgets if b.selects(pod)]

    def blockers(self, pod: Pod, now: datetime, *, fully: bool = False) -> list[Budget]:
        """The budgets that keep ``pod`` from being evicted (now; ``fully``: for good). A pod
        Karpenter would not evict anyway is not blocked by any."""
        if not evictable(pod, now):
            return []
        matching = self.matching(pod)
        if len(matching) > 1:
            return matching  # the eviction API refuses a pod with two budgets
        for budget in matching:
            if budget.always_evict_unhealthy and pod.ready is False:
                return []
            if budget.fully_blocking if fully else budget.disruptions_allowed == 0:
                return [budget]
        return []

    def currently_reschedulable(self, pod: Pod, now: datetime) -> bool:
        """Should capacity be planned for ``pod`` now that its node is going away? Not for pods
        a budget blocks for good, or that ask not to be disrupted: they stay."""
        return (
            reschedulable(pod)
            and not (active(pod) and do_not_disrupt_active(pod, now))
            and not (self.blockers(pod, now, fully=True))
        )
