"""Pods as the solver sees them: effective requests and every pod-side scheduling constraint.

:class:`Pod` and its constraint types are plain frozen dataclasses holding normalized
Kubernetes data (node selector terms as ``(key, operator, values)`` tuples, tolerations as their
fields); turning them into requirements and taint checks is the solver's business.

``Pod.from_manifest`` reads a Kubernetes Pod; reading manifests (pods and workloads' pod
templates, ``pod_from_template``) is in :mod:`provisioning.scheduling.podspec`. Identical label maps,
requests, terms, tolerations and selectors are interned, so pods of one shape share one object
for each of them and ``shape_key`` hashes in constant time once computed. Bad input raises
:class:`PodError` naming the field (``spec.containers[0].resources.requests.cpu``) and what
would be valid; no other exception escapes the parser.

The building blocks live in their own modules and are re-exported here: ``FrozenMap`` and
``intern`` (:mod:`~provisioning.scheduling.frozen`), ``PodError``
(:mod:`~provisioning.scheduling.manifestfields`), ``effective_requests``
(:mod:`~provisioning.scheduling.resources`) and ``LabelSelector``
(:mod:`~provisioning.scheduling.labelselector`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from provisioning.scheduling.frozen import EMPTY_MAP, FrozenMap, frozen_map, intern
from provisioning.scheduling.labelselector import EVERYTHING as EVERYTHING
from provisioning.scheduling.labelselector import LABEL_SELECTOR_OPERATORS as LABEL_SELECTOR_OPERATORS
from provisioning.scheduling.labelselector import NOTHING, LabelSelector, LabelSelectorRequirement
from provisioning.scheduling.manifestfields import PodError, read_int, read_object, read_str
from provisioning.scheduling.resources import effective_requests

__all__ = [
    "EMPTY_MAP",
    "NO_AFFINITY",
    "FrozenMap",
    "HostPort",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Owner",
    "Pod",
    "PodAffinity",
    "PodAffinityTerm",
    "PodError",
    "PodToleration",
    "PreferredSchedulingTerm",
    "ShapeKey",
    "TopologySpreadConstraint",
    "WeightedPodAffinityTerm",
    "effective_requests",
    "intern",
]

DEFAULT_NAMESPACE = "default"
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")
POD_LEVEL_RESOURCES = ("cpu", "memory")


# --------------------------------------------------------------------------------------------
# Node affinity


class NodeSelectorRequirement(NamedTuple):
    """``(key, operator, values)``; values sorted and de-duplicated."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...]

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One node selector term: all expressions must hold (AND). A term with no expressions
    and no fields matches no node, as in Kubernetes. ``match_fields`` (only ``metadata.name``)
    are kept so the solver can report them: Karpenter does not provision for such pods."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_expressions:
            out["matchExpressions"] = [r.to_manifest() for r in self.match_expressions]
        if self.match_fields:
            out["matchFields"] = [r.to_manifest() for r in self.match_fields]
        return out


@dataclass(frozen=True, slots=True)
class PreferredSchedulingTerm:
    weight: int  # 1..100
    term: NodeSelectorTerm


# --------------------------------------------------------------------------------------------
# Tolerations


@dataclass(frozen=True, slots=True)
class PodToleration:
    """A pod toleration, normalized: operator defaults to Equal, value and effect to ``""``
    (an empty effect tolerates every effect; an empty key with Exists tolerates every taint)."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" | NoSchedule | PreferNoSchedule | NoExecute
    toleration_seconds: int | None = None

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out

    @classmethod
    def from_manifest(cls, value: Any, path: str = "toleration") -> PodToleration:
        raw = read_object(value, path)
        key = read_str(raw.get("key"), f"{path}.key")
        operator = read_str(raw.get("operator"), f"{path}.operator") or "Equal"
        if operator not in TOLERATION_OPERATORS:
            raise PodError(f"{path}.operator", f"{operator!r} is not one of Equal, Exists")
        toleration_value = read_str(raw.get("value"), f"{path}.value")
        effect = read_str(raw.get("effect"), f"{path}.effect")
        if effect and effect not in TAINT_EFFECTS:
            raise PodError(f"{path}.effect", f"{effect!r} is not one of {', '.join(TAINT_EFFECTS)} (or empty for all)")
        if operator == "Exists" and toleration_value:
            raise PodError(f"{path}.value", "must be empty when operator is Exists")
        if not key and operator != "Exists":
            raise PodError(f"{path}.operator", "must be Exists when key is empty (a toleration of every taint)")
        seconds = raw.get("tolerationSeconds")
        if seconds is not None:
            seconds = read_int(seconds, f"{path}.tolerationSeconds")
            if effect != "NoExecute":
                raise PodError(f"{path}.tolerationSeconds", "only applies with effect NoExecute")
        return intern(cls(key, operator, toleration_value, effect, seconds))


# --------------------------------------------------------------------------------------------
# Topology spread and pod (anti-)affinity


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    """One ``topologySpreadConstraints`` entry. ``label_selector`` already includes the
    matchLabelKeys resolved from the pod's labels; policies hold their defaults (Honor/Ignore)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    label_selector: LabelSelector = NOTHING
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"
    match_label_keys: tuple[str, ...] = ()

    @property
    def hard(self) -> bool:
        """DoNotSchedule; ScheduleAnyway spreads are preferences, relaxed when needed."""
        return self.when_unsatisfiable == "DoNotSchedule"


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A pod (anti-)affinity term. ``namespaces`` is already resolved: the listed namespaces,
    or the pod's own when neither ``namespaces`` nor ``namespaceSelector`` is given;
    ``namespace_selector`` is None when absent (``{}`` selects every namespace)."""

    topology_key: str
    label_selector: LabelSelector = NOTHING
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()

    @property
    def all_namespaces(self) -> bool:
        return self.namespace_selector is not None and self.namespace_selector.is_empty

    def selects_namespace(self, namespace: str, namespace_labels: Mapping[str, str] | None = None) -> bool:
        """Whether pods in ``namespace`` are in scope. Without the namespace's labels, only its
        well-known ``kubernetes.io/metadata.name`` label is assumed."""
        if namespace in self.namespaces:
            return True
        if self.namespace_selector is None:
            return False
        if namespace_labels is None:
            namespace_labels = {"kubernetes.io/metadata.name": namespace}
        return self.namespace_selector.matches(namespace_labels)

    def selects(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None = None
    ) -> bool:
        """Whether a pod with these labels in this namespace is one the term is about."""
        return self.label_selector.matches(labels) and self.selects_namespace(namespace, namespace_labels)


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int  # 1..100
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """Required (all must hold) and preferred (weighted) terms of podAffinity or podAntiAffinity."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.required or self.preferred)


NO_AFFINITY = PodAffinity()


class HostPort(NamedTuple):
    host_ip: str  # "" = every address
    protocol: str  # TCP | UDP | SCTP
    port: int


class Owner(NamedTuple):
    kind: str
    name: str


# --------------------------------------------------------------------------------------------
# The pod


class ShapeKey:
    """A pod's scheduling shape: hashed once, compared by identity first."""

    __slots__ = ("_hash", "parts")

    def __init__(self, parts: tuple) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ShapeKey):
            return NotImplemented
        return self._hash == other._hash and self.parts == other.parts

    def __reduce__(self):
        # string hashes differ between processes: rebuild, never carry the cached hash over
        return (ShapeKey, (self.parts,))

    def __repr__(self) -> str:
        return f"ShapeKey({self._hash:#x})"


_PODS_ONLY = FrozenMap({"pods": 1})


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the solver sees it.

    ``requests`` are the effective requests in integer units (cpu millicores, memory and
    storage bytes, counts otherwise) and always include ``pods: 1``. ``required_node_affinity``
    is an OR of terms; ``node_selector`` and every term are ANDed with it by the solver.
    """

    namespace: str
    name: str
    requests: Mapping[str, int] = _PODS_ONLY
    labels: Mapping[str, str] = EMPTY_MAP
    uid: str | None = None
    node_selector: Mapping[str, str] = EMPTY_MAP
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()
    preferred_node_affinity: tuple[PreferredSchedulingTerm, ...] = ()
    tolerations: tuple[PodToleration, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    pod_affinity: PodAffinity = NO_AFFINITY
    pod_anti_affinity: PodAffinity = NO_AFFINITY
    host_ports: tuple[HostPort, ...] = ()
    priority: int = 0
    owner: Owner | None = None
    is_daemonset: bool = False
    node_name: str | None = None
    scheduling_gated: bool = False
    creation_timestamp: str | None = None  # RFC 3339 as written, e.g. 2025-01-02T03:04:05Z
    phase: str = ""  # status.phase: Pending, Running, Succeeded, Failed ("" when not given)
    deleting: bool = False  # metadata.deletionTimestamp is set: the pod is terminating
    annotations: Mapping[str, str] = EMPTY_MAP
    ready: bool | None = None  # the Ready condition (None when not given)
    started_at: str | None = None  # status.startTime, RFC 3339 as written
    _shape: ShapeKey | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Direct construction (tests, the solver) may pass plain dicts and lists.
        if not isinstance(self.requests, FrozenMap) or "pods" not in self.requests:
            requests = dict(self.requests)
            requests.setdefault("pods", 1)
            object.__setattr__(self, "requests", frozen_map(requests))
        for name in ("labels", "node_selector", "annotations"):
            value = getattr(self, name)
            if not isinstance(value, FrozenMap):
                object.__setattr__(self, name, frozen_map(dict(value)))
        for name in (
            "required_node_affinity",
            "preferred_node_affinity",
            "tolerations",
            "topology_spread",
            "host_ports",
        ):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.owner is not None and not isinstance(self.owner, Owner):
            object.__setattr__(self, "owner", Owner(*self.owner))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        """Waiting for a node Karpenter should provide (upstream ``IsProvisionable``): not bound,
        not gated, not finished or terminating, and not a DaemonSet's or a node's own pod
        (those come with their node)."""
        return (
            self.node_name is None
            and not self.scheduling_gated
            and not self.terminal
            and not self.deleting
            and not self.is_daemonset
            and not (self.owner is not None and self.owner.kind == "Node")
        )

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed: it holds no resources and counts in no topology."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def counts_for_topology(self) -> bool:
        """Upstream ``IgnoredForTopology``, negated: a bound pod that is neither finished nor
        terminating."""
        return not self.terminal and not self.deleting

    @property
    def shape_key(self) -> ShapeKey:
        """Everything scheduling-relevant except identity (name, uid, owner, creation time):
        replicas of one template have equal (and, when expanded together, identical) keys."""
        shape = self._shape
        if shape is None:
            shape = ShapeKey(
                (
                    self.namespace,
                    self.labels,
                    self.requests,
                    self.node_selector,
                    self.required_node_affinity,
                    self.preferred_node_affinity,
                    self.tolerations,
                    self.topology_spread,
                    self.pod_affinity,
                    self.pod_anti_affinity,
                    self.host_ports,
                    self.priority,
                    self.is_daemonset,
                    self.node_name,
                    self.scheduling_gated,
                )
            )
            object.__setattr__(self, "_shape", shape)
        return shape

    def renamed(self, name: str, uid: str | None = None) -> Pod:
        """A copy under another name sharing every other field (and the computed shape key)."""
        self.shape_key  # noqa: B018  (computed once, shared by the copies)
        new = object.__new__(Pod)
        for slot in _POD_SLOTS:
            object.__setattr__(new, slot, getattr(self, slot))
        object.__setattr__(new, "name", name)
        object.__setattr__(new, "uid", uid)
        return new

    @classmethod
    def from_manifest(cls, manifest: Any) -> Pod:
        """A Kubernetes Pod manifest (``kind: Pod``), bound or pending."""
        from provisioning.scheduling.podspec import pod_from_manifest

        return pod_from_manifest(manifest)


_POD_SLOTS = Pod.__slots__
