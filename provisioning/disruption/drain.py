"""What the drain of one node does next, as upstream's terminator decides it
(``pkg/controllers/node/termination/terminator/terminator.go``, ``pkg/utils/pod/scheduling.go``).

* The pods waited for: not finished, and drainable (not tolerating
  ``karpenter.sh/disrupted:NoSchedule``, not a static pod the kubelet owns, not stuck
  terminating a minute past its ``deletionTimestamp``).
* Past the deadline (the node's terminationGracePeriod since its drain began, less the pod's
  own ``terminationGracePeriodSeconds`` so it still gets that long): deleted, whatever blocks it,
  with the time left to the deadline as its grace period (at least 1 s); so is a terminating pod
  whose ``deletionTimestamp`` lies beyond the deadline.
* The others are evicted through the Eviction API in groups, one group at a time:
  non-critical before critical (``system-cluster-critical``, ``system-node-critical``), and
  in each, other pods before DaemonSet pods. A pod with an active ``karpenter.sh/do-not-disrupt``
  is not evicted: the drain waits for it (until the deadline, when there is one).

Pure: the caller gives the clock and carries the step out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from provisioning.disruption.eviction import (
    DO_NOT_DISRUPT,
    do_not_disrupt_active,
    owned_by,
    tolerates_disrupted,
)
from provisioning.disruption.text import plural
from provisioning.scheduling.manifestfields import PodError
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.podspec import pod_from_manifest

CRITICAL_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
DEFAULT_POD_GRACE_SECONDS = 30.0
STUCK_TERMINATING_SECONDS = 60.0  # upstream's IsStuckTerminating
_SHOWN = 3


@dataclass(frozen=True)
class DrainPod:
    pod: Pod
    critical: bool
    grace_seconds: float
    deletion_at: float | None = None  # metadata.deletionTimestamp, epoch seconds

    @property
    def key(self) -> str:
        return self.pod.key

    @property
    def namespace(self) -> str:
        return self.pod.namespace

    @property
    def name(self) -> str:
        return self.pod.name


@dataclass(frozen=True)
class Step:
    """``evict`` now through the Eviction API, ``delete`` now (the deadline passed), and what
    else the node still waits for. Nothing at all: the node is drained."""

    evict: tuple[DrainPod, ...] = ()
    delete: tuple[DrainPod, ...] = ()
    held: tuple[DrainPod, ...] = ()  # do-not-disrupt pods, waited for
    later: tuple[DrainPod, ...] = ()  # pods of the groups after this one
    terminating: tuple[DrainPod, ...] = ()  # evicted already, still shutting down
    deadline: float | None = None

    @property
    def drained(self) -> bool:
        return not (self.evict or self.delete or self.held or self.later or self.terminating)

    def describe(self, refused: Sequence[str] = ()) -> str | None:
        """Why the node is not drained yet, or None when it is. ``refused``: the pods whose
        eviction the API refused (a PodDisruptionBudget)."""
        if self.drained:
            return None
        parts = []
        evicted = len(self.evict) - len(refused)
        if evicted:
            parts.append(f"{plural(evicted, 'pod')} evicted")
        if self.delete:
            parts.append(f"{plural(len(self.delete), 'pod')} deleted: the terminationGracePeriod has passed")
        if refused:
            parts.append(f"eviction of {_names(refused)} refused by a PodDisruptionBudget")
        if self.held:
            until = "until the terminationGracePeriod passes" if self.deadline is not None else "until it goes"
            parts.append(f"waiting for {_names([p.key for p in self.held])} ({DO_NOT_DISRUPT}) {until}")
        if self.terminating:
            parts.append(f"{plural(len(self.terminating), 'pod')} shutting down")
        if self.later:
            parts.append(f"{plural(len(self.later), 'critical or DaemonSet pod')} after these")
        return "; ".join(parts)


def _names(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:_SHOWN])
    return shown + (f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else "")


def drain_pod(manifest: dict[str, Any]) -> DrainPod | None:
    """The pod as the drain sees it; None for a manifest it cannot read (left alone)."""
    try:
        pod = pod_from_manifest(manifest)
    except PodError:
        return None
    spec = manifest.get("spec") or {}
    grace = spec.get("terminationGracePeriodSeconds")
    deletion = (manifest.get("metadata") or {}).get("deletionTimestamp")
    return DrainPod(
        pod,
        spec.get("priorityClassName") in CRITICAL_CLASSES,
        float(grace) if isinstance(grace, int | float) and grace >= 0 else DEFAULT_POD_GRACE_SECONDS,
        _epoch(deletion) if isinstance(deletion, str) else None,
    )


def _epoch(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def waited_for(pod: DrainPod, now: float) -> bool:
    """Upstream's ``IsWaitingEviction``: not finished, and drainable."""
    stuck = pod.deletion_at is not None and now - pod.deletion_at > STUCK_TERMINATING_SECONDS
    return not pod.pod.terminal and not tolerates_disrupted(pod.pod) and not owned_by(pod.pod, "Node") and not stuck


def deletion_grace(now: float, deadline: float) -> int:
    """The grace period a pod deleted at the deadline gets: what is left of the node's, at least 1 s."""
    return max(1, math.ceil(deadline - now))


def _past_deadline(pod: DrainPod, now: float, deadline: float | None) -> bool:
    if deadline is None:
        return False
    if pod.deletion_at is not None:
        return pod.deletion_at > deadline  # terminating, but past the node's deadline: delete again
    return now >= deadline - pod.grace_seconds


def next_step(manifests: Sequence[dict[str, Any]], now: float, deadline: float | None) -> Step:
    """The next step of a node's drain, for the pods bound to it now. ``deadline``: when the
    terminationGracePeriod runs out (epoch seconds), None without one."""
    pods = [p for p in (drain_pod(m) for m in manifests) if p is not None and waited_for(p, now)]
    force = tuple(p for p in pods if _past_deadline(p, now, deadline))
    graceful = [p for p in pods if p not in force]
    groups = (
        [p for p in graceful if not p.critical and not p.pod.is_daemonset],
        [p for p in graceful if not p.critical and p.pod.is_daemonset],
        [p for p in graceful if p.critical and not p.pod.is_daemonset],
        [p for p in graceful if p.critical and p.pod.is_daemonset],
    )
    first = next((group for group in groups if group), [])
    moment = datetime.fromtimestamp(now, UTC)
    held = tuple(p for p in first if do_not_disrupt_active(p.pod, moment))
    evict = tuple(p for p in first if p not in held and not p.pod.deleting)
    terminating = tuple(p for p in first if p not in held and p.pod.deleting)
    later = tuple(p for p in graceful if p not in first)
    return Step(evict=evict, delete=force, held=held, later=later, terminating=terminating, deadline=deadline)
