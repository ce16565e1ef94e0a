"""The ``Cluster`` protocol: what the pipeline needs from Kubernetes.

Objects cross it as Kubernetes manifests (plain dicts shaped as the API returns them:
``metadata``, ``spec``, ``status``), so the solver's parsers (``scheduling.workloads``) read
pods, nodes and DaemonSets from either cluster the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

Manifest = dict[str, Any]

DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


class ClusterError(Exception):
    """The cluster refused or failed a call; ``retryable`` when trying again may work."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class Conflict(ClusterError):
    """A write carried a stale resourceVersion (HTTP 409)."""

    def __init__(self, message: str, current: Manifest | None = None) -> None:
        super().__init__(message, retryable=False)
        self.current = current


@dataclass(frozen=True)
class Event:
    """One change seen by a watch: ``type`` ADDED, MODIFIED or DELETED, and the object."""

    type: str
    kind: str  # Pod, Node, NodePool, EC2NodeClass
    object: Manifest = field(default_factory=dict)


@dataclass(frozen=True)
class ObjectReference:
    """The object an ObjectEvent is about; ``uid`` lets ``kubectl describe`` find the event."""

    kind: str
    name: str
    namespace: str = ""  # "" for cluster-scoped kinds (Node, NodeClaim)
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def of(cls, manifest: Manifest) -> ObjectReference:
        meta = manifest.get("metadata") or {}
        return cls(
            kind=manifest.get("kind", ""),
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            uid=meta.get("uid", ""),
            api_version=manifest.get("apiVersion", "v1"),
        )


@dataclass(frozen=True)
class ObjectEvent:
    """A Kubernetes Event about an object, as ``kubectl describe`` lists them: ``type`` Normal
    or Warning, a CamelCase ``reason`` and a sentence."""

    involved: ObjectReference
    type: str
    reason: str
    message: str


def is_pending(pod: Manifest) -> bool:
    """Pending as the provisioner sees it: not bound, PodScheduled False with reason
    Unschedulable, not terminating, and not a DaemonSet's pod (the DaemonSet controller
    places those)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or meta.get("deletionTimestamp"):
        return False
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or ()):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or ()
    )


class Eviction(enum.Enum):
    """The Eviction API's answer. True for a pod that is gone (evicted, or not found: nothing is
    left to evict), False for one a PodDisruptionBudget keeps for now (its 429), or that more
    than one budget selects (its 500: the eviction subresource supports one)."""

    EVICTED = "evicted"
    GONE = "gone"
    REFUSED = "refused"
    REFUSED_MANY_BUDGETS = "refused: more than one PodDisruptionBudget"

    def __bool__(self) -> bool:
        return self not in (Eviction.REFUSED, Eviction.REFUSED_MANY_BUDGETS)


class Cluster(Protocol):
    """The pipeline's view of a cluster. Reads return manifests; writes raise ClusterError."""

    # -- reads
    def pods(self) -> list[Manifest]:
        """Every pod (pending and bound), terminal ones excluded."""

    def nodes(self) -> list[Manifest]: ...

    def daemonsets(self) -> list[Manifest]: ...

    def pdbs(self) -> list[Manifest]:
        """PodDisruptionBudgets (policy/v1), with status.disruptionsAllowed."""

    # -- NodeClaims (karpenter.sh/v1), so kubectl shows what the provisioner decided
    def create_nodeclaim(self, manifest: Manifest) -> None:
        """Create (idempotent: an existing claim of that name is left as it is)."""

    def delete_nodeclaim(self, name: str) -> None: ...

    # -- nodes
    def cordon(self, node: str) -> None: ...

    def taint(self, node: str, taint: Manifest) -> None:
        """Add ``taint`` unless the node has it already."""

    def untaint(self, node: str, taint: Manifest) -> None:
        """Remove the taint with ``taint``'s key and effect, if the node has it."""

    def evict(self, namespace: str, name: str) -> Eviction:
        """Evict through the Eviction API: REFUSED (false) when a PodDisruptionBudget refuses
        (429, or 500 when two select the pod), GONE when there is no such pod."""

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete the pod, whatever guards its eviction (a drain past its grace period), with
        ``grace_seconds`` instead of its own terminationGracePeriodSeconds when given."""

    def label(self, node: str, key: str, value: str) -> None:
        """Set a label on the node."""

    def unlabel(self, node: str, key: str) -> None:
        """Remove a label from the node (nothing when it has none)."""

    def delete_node(self, node: str) -> None: ...

    # -- events
    def record_event(self, event: ObjectEvent) -> None:
        """Record ``event`` for people to read. Cheap and best effort: it never raises and
        never waits for the API server, and may drop a repeat of a recent identical event."""

    # -- watching
    def watch(self, handle: Callable[[Event], None], kinds: Iterable[str], stop: Callable[[], bool]) -> None:
        """List then watch ``kinds`` (from a resourceVersion, relisting on 410 Gone), calling
        ``handle`` for every object listed (as ADDED) and every change, until ``stop()``."""
