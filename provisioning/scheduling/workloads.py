"""Kubernetes documents as scheduling input: pods, DaemonSet overhead and existing nodes.

``expand`` turns one document into what the solver consumes:

* ``Pod`` → one :class:`Pod`;
* ``Deployment``, ``ReplicaSet``, ``StatefulSet`` (``spec.replicas``, default 1) and ``Job``
  (``spec.parallelism``, default 1; ``completions`` ignored; none while suspended) → one pod
  per replica, named ``<name>-<i>`` for i = 0..replicas-1 in the workload's namespace
  (default ``default``), carrying the template's labels (a Deployment's pods also get the
  ``pod-template-hash`` label a ReplicaSet would give them, so ``matchLabelKeys`` on it works);
* ``DaemonSet`` → one :class:`DaemonSetOverhead`, whose pod says what every node it lands on
  loses and whose node selector, affinity and tolerations say which nodes those are;
* ``Node`` → one :class:`ExistingNode`.

``expand_all`` reads a whole multi-document stream: NodePool and EC2NodeClass documents are
handed back untouched as ``policies`` for the caller to validate, other kinds are skipped with
a note, pods bound to a listed node (``spec.nodeName``) are attached to it.

The template of a workload is parsed once and its replicas share every field but the name,
so a 20,000-replica Deployment costs one parse and 20,000 small copies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from provisioning.scheduling.frozen import EMPTY_MAP, frozen_map, intern
from provisioning.scheduling.manifestfields import (
    PodError,
    read_int,
    read_list,
    read_object,
    read_str,
    read_str_map,
    read_time,
    type_name,
)
from provisioning.scheduling.pdbspec import PDB_KIND, read_budget
from provisioning.scheduling.pods import (
    DEFAULT_NAMESPACE,
    TAINT_EFFECTS,
    LabelSelector,
    NodeSelectorTerm,
    Owner,
    Pod,
    PodToleration,
)
from provisioning.scheduling.podspec import pod_from_manifest, pod_from_template
from provisioning.scheduling.resources import read_resources
from provisioning.scheduling.taints import Taint

__all__ = [
    "MAX_REPLICAS",
    "POLICY_KINDS",
    "WORKLOAD_KINDS",
    "DaemonSetOverhead",
    "ExistingNode",
    "Skipped",
    "Workloads",
    "describe",
    "expand",
    "expand_all",
]

REPLICATED_KINDS = ("Deployment", "ReplicaSet", "StatefulSet")
WORKLOAD_KINDS = ("Pod", *REPLICATED_KINDS, "Job", "DaemonSet")
NODE_KIND = "Node"
POLICY_KINDS = ("NodePool", "EC2NodeClass", "NodeOverlay")
MAX_REPLICAS = 100_000

_SKIP_NOTES = {
    "CronJob": "creates pods only on its schedule; feed the Job it would create instead",
    "HorizontalPodAutoscaler": "autoscaling is not simulated; workloads keep their spec.replicas",
    "PersistentVolumeClaim": "volume topology is not simulated",
    "PersistentVolume": "volume topology is not simulated",
    "StorageClass": "volume topology is not simulated",
    "PriorityClass": "pods use spec.priority; priorityClassName is not resolved",
    "NodeClaim": "NodeClaims are not read; describe running capacity as Node documents",
}


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True, slots=True)
class ExistingNode:
    """A node already in the cluster. ``allocatable`` (from ``status.allocatable``, else
    ``status.capacity``; empty when neither is given) and ``capacity`` are integer units;
    ``pods`` are the pods bound to it (``spec.nodeName``) by ``expand_all``."""

    name: str
    labels: Mapping[str, str] = EMPTY_MAP
    taints: tuple[Taint, ...] = ()  # the scheduling core's Taint, as NodePools'
    allocatable: Mapping[str, int] = EMPTY_MAP
    capacity: Mapping[str, int] = EMPTY_MAP
    unschedulable: bool = False
    pods: tuple[Pod, ...] = ()
    # Karpenter's node that has not finished initializing (no karpenter.sh/initialized yet):
    # its startup and ephemeral taints are expected to go, and it is tried after the others.
    initialized: bool = True
    deleting: bool = False  # metadata.deletionTimestamp is set
    annotations: Mapping[str, str] = EMPTY_MAP
    creation_timestamp: str | None = None  # RFC 3339 as written
    ready: bool = True  # the Ready condition, when status.conditions gives one

    @property
    def managed(self) -> bool:
        """Launched by a NodePool (it carries karpenter.sh/nodepool)."""
        return "karpenter.sh/nodepool" in self.labels

    @property
    def hostname(self) -> str:
        """The hostname topology domain: the label, else the node name (as upstream counts it)."""
        return self.labels.get("kubernetes.io/hostname", self.name)

    def requested(self) -> dict[str, int]:
        """The summed requests of the pods bound to the node (finished ones hold nothing)."""
        total: dict[str, int] = {}
        for pod in self.pods:
            if pod.terminal:
                continue  # a finished pod holds nothing
            for resource, amount in pod.requests.items():
                total[resource] = total.get(resource, 0) + amount
        return total

    def remaining(self) -> dict[str, int]:
        """Allocatable minus the bound pods' requests (may go negative when overcommitted)."""
        used = self.requested()
        out = dict(self.allocatable)
        for resource, amount in used.items():
            out[resource] = out.get(resource, 0) - amount
        return out

    @classmethod
    def from_manifest(cls, manifest: Any) -> ExistingNode:
        manifest = read_object(manifest, "")
        metadata = read_object(manifest.get("metadata"), "metadata")
        name = read_str(metadata.get("name"), "metadata.name", required=True)
        labels = read_str_map(metadata.get("labels"), "metadata.labels")
        spec = read_object(manifest.get("spec"), "spec")
        taints = []
        for i, item in enumerate(read_list(spec.get("taints"), "spec.taints")):
            where = f"spec.taints[{i}]"
            raw = read_object(item, where)
            key = read_str(raw.get("key"), f"{where}.key", required=True)
            effect = read_str(raw.get("effect"), f"{where}.effect", required=True)
            if effect not in TAINT_EFFECTS:
                raise PodError(f"{where}.effect", f"{effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
            taints.append(intern(Taint(key, read_str(raw.get("value"), f"{where}.value"), effect)))
        unschedulable = spec.get("unschedulable", False)
        if unschedulable is None:
            unschedulable = False
        if not isinstance(unschedulable, bool):
            raise PodError("spec.unschedulable", f"must be true or false, not {type_name(unschedulable)}")
        status = read_object(manifest.get("status"), "status")
        capacity = read_resources(status.get("capacity"), "status.capacity")
        if status.get("allocatable") is not None:
            allocatable = read_resources(status.get("allocatable"), "status.allocatable")
        else:
            allocatable = capacity
        managed = "karpenter.sh/nodepool" in labels
        annotations = read_str_map(metadata.get("annotations"), "metadata.annotations")
        created = read_time(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), "True")
        return cls(
            name=name,
            labels=labels,
            taints=intern(tuple(taints)),
            allocatable=frozen_map(allocatable),
            capacity=frozen_map(capacity),
            unschedulable=unschedulable,
            initialized=not managed or labels.get("karpenter.sh/initialized") == "true",
            deleting=metadata.get("deletionTimestamp") is not None,
            annotations=annotations,
            creation_timestamp=created,
            ready=ready == "True",
        )


@dataclass(frozen=True, slots=True)
class DaemonSetOverhead:
    """One DaemonSet: its pod template as a pod (``is_daemonset=True``, with the tolerations the
    DaemonSet controller adds), reserved on every node whose labels and taints it matches."""

    namespace: str
    name: str
    pod: Pod

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def requests(self) -> Mapping[str, int]:
        return self.pod.requests

    @property
    def node_selector(self) -> Mapping[str, str]:
        return self.pod.node_selector

    @property
    def required_node_affinity(self) -> tuple[NodeSelectorTerm, ...]:
        return self.pod.required_node_affinity

    @property
    def tolerations(self) -> tuple[PodToleration, ...]:
        return self.pod.tolerations


class Skipped(NamedTuple):
    kind: str
    name: str
    note: str


@dataclass(frozen=True)
class Workloads:
    """Everything read from a document stream. ``pods`` holds every pod in document order,
    bound and gated ones included; ``pending`` the ones the solver places."""

    pods: tuple[Pod, ...] = ()
    daemonsets: tuple[DaemonSetOverhead, ...] = ()
    nodes: tuple[ExistingNode, ...] = ()
    policies: tuple[dict, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    namespaces: tuple[tuple[str, Mapping[str, str]], ...] = ()  # Namespace documents: name, labels
    budgets: tuple[dict, ...] = ()  # PodDisruptionBudget documents, as given
    services: tuple[tuple[str, Mapping[str, str]], ...] = ()  # Services: namespace, spec.selector
    # Controllers' selectors, (kind, namespace, name) → LabelSelector manifest; a Deployment's
    # is its ReplicaSet's (with the revision's pod-template-hash).
    controllers: Mapping[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)

    @property
    def pending(self) -> tuple[Pod, ...]:
        return tuple(pod for pod in self.pods if pod.pending)


# --------------------------------------------------------------------------------------------
# Expansion


def describe(document: Any) -> str:
    """``Deployment web`` (``Deployment shop/web`` outside the default namespace)."""
    if not isinstance(document, dict):
        return "document"
    kind = document.get("kind") if isinstance(document.get("kind"), str) else "document"
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    name = metadata.get("name") if isinstance(metadata.get("name"), str) else ""
    namespace = metadata.get("namespace") if isinstance(metadata.get("namespace"), str) else ""
    if not name:
        return kind
    if namespace and namespace != DEFAULT_NAMESPACE and kind != NODE_KIND:
        return f"{kind} {namespace}/{name}"
    return f"{kind} {name}"


def expand(document: Any) -> list[Pod] | list[DaemonSetOverhead] | list[ExistingNode]:
    """One document as pods, a DaemonSet's overhead or an existing node.

    Raises :class:`PodError` naming the document and the field on bad input, and for kinds
    that are none of Pod, Deployment, ReplicaSet, StatefulSet, Job, DaemonSet and Node.
    """
    try:
        return _expand(document)
    except PodError as exc:
        raise exc.in_document(describe(document)) from None


def _expand(document: Any) -> list:
    if not isinstance(document, dict):
        raise PodError("", f"a document must be an object with kind, metadata and spec, not {type_name(document)}")
    kind = read_str(document.get("kind"), "kind", required=True)
    if kind == "Pod":
        return [pod_from_manifest(document)]
    if kind == NODE_KIND:
        return [ExistingNode.from_manifest(document)]
    if kind not in WORKLOAD_KINDS:
        raise PodError("kind", f"{kind!r} is not one of {', '.join((*WORKLOAD_KINDS, NODE_KIND))}")
    metadata = read_object(document.get("metadata"), "metadata")
    name = read_str(metadata.get("name"), "metadata.name", required=True)
    namespace = read_str(metadata.get("namespace"), "metadata.namespace") or DEFAULT_NAMESPACE
    spec = read_object(document.get("spec"), "spec")
    if not spec:
        raise PodError("spec", "is required (with a pod template in spec.template)")
    owner = Owner(kind, name)
    template = spec.get("template")

    if kind == "DaemonSet":
        _check_selector(spec, template)
        pod = pod_from_template(template, namespace=namespace, name=name, owner=owner, is_daemonset=True)
        return [DaemonSetOverhead(namespace, name, pod)]

    if kind == "Job":
        count = _count(spec, "parallelism")
        suspend = spec.get("suspend")
        if suspend is not None and not isinstance(suspend, bool):
            raise PodError("spec.suspend", f"must be true or false, not {type_name(suspend)}")
        if suspend:
            count = 0
    else:
        count = _count(spec, "replicas")
        _check_selector(spec, template)
    extra_labels = None
    if kind == "Deployment":
        extra_labels = {"pod-template-hash": _template_hash(template)}
    first = pod_from_template(template, namespace=namespace, name=f"{name}-0", owner=owner, extra_labels=extra_labels)
    if count == 0:
        return []
    return [first] + [first.renamed(f"{name}-{i}") for i in range(1, count)]


def _count(spec: dict, field: str) -> int:
    value = spec.get(field)
    if value is None:
        return 1
    return read_int(value, f"spec.{field}", minimum=0, maximum=MAX_REPLICAS)


def _check_selector(spec: dict, template: Any) -> None:
    """A workload's selector must select its own template's labels, as the API server insists."""
    if spec.get("selector") is None or not isinstance(template, dict):
        return
    selector = LabelSelector.from_manifest(spec["selector"], "spec.selector")
    metadata = read_object(template.get("metadata"), "spec.template.metadata")
    labels = read_str_map(metadata.get("labels"), "spec.template.metadata.labels")
    if not selector.matches(labels):
        raise PodError(
            "spec.selector",
            f"{selector} does not select the template's labels ({', '.join(f'{k}={v}' for k, v in labels.items())}"
            "); spec.template.metadata.labels must match it",
        )


_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _template_hash(template: Any) -> str:
    """A stable stand-in for the ReplicaSet's ``pod-template-hash`` (FNV-1a of the template)."""
    text = json.dumps(template, sort_keys=True, default=str, separators=(",", ":"))
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[int(d) % len(_SAFE_ALPHABET)] for d in str(h))


def _documents(documents: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """The documents with where they sit (``document 3``, ``document 3, item 2``); a ``kind: List``
    (or ``DeploymentList``...) is unrolled into its items."""
    for index, document in enumerate(documents, 1):
        kind = document.get("kind") if isinstance(document, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(document.get("items"), list):
            item_kind = kind[: -len("List")]
            for position, item in enumerate(document["items"], 1):
                if isinstance(item, dict) and "kind" not in item and item_kind:
                    item = {"kind": item_kind, **item}
                yield f"document {index}, item {position}", item
        else:
            yield f"document {index}", document


def expand_all(documents: Iterable[Any], *, max_pods: int | None = None) -> Workloads:
    """Every document of a stream (``yaml.safe_load_all``'s output). Empty documents are
    ignored; bad input raises :class:`PodError` naming the document and the field, as does
    a stream of more than ``max_pods`` pods (checked after each document, so a stream from
    a stranger never expands far past it)."""
    pods: list[Pod] = []
    daemonsets: list[DaemonSetOverhead] = []
    nodes: list[ExistingNode] = []
    policies: list[dict] = []
    skipped: list[Skipped] = []
    namespaces: list[tuple[str, Mapping[str, str]]] = []
    budgets: list[dict] = []
    services: list[tuple[str, Mapping[str, str]]] = []
    controllers: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    pod_sources: dict[str, tuple[str, str]] = {}
    daemonset_sources: dict[str, tuple[str, str]] = {}
    node_sources: dict[str, tuple[str, str]] = {}

    for where, document in _documents(documents):
        if document is None:
            continue
        name = describe(document)
        if not isinstance(document, dict) or not isinstance(document.get("kind"), str) or not document["kind"]:
            if not isinstance(document, dict):
                raise PodError("", f"must be an object with kind, metadata and spec, not {type_name(document)}", where)
            raise PodError("kind", "is required (Deployment, Pod, NodePool, ...)", where)
        kind = document["kind"]
        if kind in POLICY_KINDS:
            policies.append(document)
            continue
        if kind == "Namespace":
            metadata = read_object(document.get("metadata"), "metadata")
            ns = read_str(metadata.get("name"), "metadata.name", required=True)
            labels = {"kubernetes.io/metadata.name": ns, **read_str_map(metadata.get("labels"), "metadata.labels")}
            namespaces.append((ns, frozen_map(labels)))
            continue
        if kind == PDB_KIND:
            read_budget(document)  # checked as the API server would; kept as given, status and all
            budgets.append(document)
            continue
        _note_belonging(document, services, controllers)
        if kind not in WORKLOAD_KINDS and kind != NODE_KIND:
            metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
            skipped_name = metadata.get("name") if isinstance(metadata.get("name"), str) else ""
            skipped.append(Skipped(kind, skipped_name, _SKIP_NOTES.get(kind, "not a workload; skipped")))
            continue
        if name == kind:  # no usable name: say where the document is
            name = f"{kind} ({where})"
        try:
            items = _expand(document)
        except PodError as exc:
            raise exc.in_document(name) from None
        if kind == NODE_KIND:
            for node in items:
                _claim(node_sources, node.name, name, where, "node")
            nodes.extend(items)
        elif kind == "DaemonSet":
            for daemonset in items:
                _claim(daemonset_sources, daemonset.key, name, where, "DaemonSet")
            daemonsets.extend(items)
        else:
            for pod in items:
                _claim(pod_sources, pod.key, name, where, "pod")
            pods.extend(items)
            if max_pods is not None and len(pods) > max_pods:
                raise PodError("", f"takes the input past {max_pods:,} pods, the most planned at once here", name)

    if nodes and any(pod.node_name for pod in pods):
        bound: dict[str, list[Pod]] = {}
        for pod in pods:
            if pod.node_name:
                bound.setdefault(pod.node_name, []).append(pod)
        nodes = [replace(node, pods=tuple(bound[node.name])) if node.name in bound else node for node in nodes]
    return Workloads(
        tuple(pods),
        tuple(daemonsets),
        tuple(nodes),
        tuple(policies),
        tuple(skipped),
        tuple(namespaces),
        tuple(budgets),
        tuple(services),
        controllers,
    )


def _note_belonging(document: dict, services: list, controllers: dict) -> None:
    """What pods may belong to, for default topology spreads: a Service's selector, a
    controller's. Malformed ones are left to the readers that check them."""
    kind = document.get("kind")
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    spec = document.get("spec") if isinstance(document.get("spec"), dict) else {}
    namespace = metadata.get("namespace") if isinstance(metadata.get("namespace"), str) else ""
    namespace = namespace or DEFAULT_NAMESPACE
    name = metadata.get("name")
    if not isinstance(name, str):
        return
    selector = spec.get("selector")
    if kind == "Service" and isinstance(selector, dict):
        services.append((namespace, {str(k): str(v) for k, v in selector.items()}))
    elif kind == "ReplicationController" and isinstance(selector, dict):
        controllers[(kind, namespace, name)] = {"matchLabels": {str(k): str(v) for k, v in selector.items()}}
    elif kind in ("ReplicaSet", "StatefulSet") and isinstance(selector, dict):
        controllers[(kind, namespace, name)] = selector
    elif kind == "Deployment" and isinstance(selector, dict):
        labels = dict(selector.get("matchLabels") or {})
        labels["pod-template-hash"] = _template_hash(spec.get("template"))
        controllers[(kind, namespace, name)] = {**selector, "matchLabels": labels}


def _claim(sources: dict[str, tuple[str, str]], key: str, document: str, where: str, what: str) -> None:
    """Record that ``document`` (at ``where``) defines ``key``; a second definition is an error."""
    other, other_where = sources.setdefault(key, (document, where))
    if other_where != where:
        raise PodError(
            "metadata.name", f"{what} {key} is also defined by {other} ({other_where}); names must be unique", document
        )
