"""Reading Kubernetes pod manifests and pod templates into :class:`~provisioning.scheduling.pods.Pod`.

``pod_from_manifest`` reads a Pod (``kind: Pod``), ``pod_from_template`` a workload's pod
template; ``Pod.from_manifest`` and ``Pod.from_template`` call them. Both check every field
they read and raise :class:`PodError` naming it (``spec.affinity.nodeAffinity...``) and what
would be valid; no other exception escapes.

Built for tens of thousands of pods: quantities are cached and every constraint is interned,
so pods of one shape share their field values.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from provisioning.scheduling.frozen import frozen_map, intern
from provisioning.scheduling.labelselector import LabelSelector, LabelSelectorRequirement
from provisioning.scheduling.manifestfields import (
    PodError,
    key_path,
    read_int,
    read_list,
    read_object,
    read_str,
    read_str_list,
    read_str_map,
    read_time,
    type_name,
)
from provisioning.scheduling.pods import (
    DEFAULT_NAMESPACE,
    INCLUSION_POLICIES,
    NO_AFFINITY,
    NODE_SELECTOR_OPERATORS,
    POD_LEVEL_RESOURCES,
    WHEN_UNSATISFIABLE,
    HostPort,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Owner,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodToleration,
    PreferredSchedulingTerm,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from provisioning.scheduling.resources import container_requests, effective_requests, read_resources

__all__ = ["parse_pod", "pod_from_manifest", "pod_from_template", "topology_spread_constraints"]

_MAX_INT32 = 2**31 - 1


# --------------------------------------------------------------------------------------------
# Pods and pod templates


# Pods read lately, by a digest of their manifest. The provisioner and every disruption round
# read the whole cluster anew, and most of its pods have not changed since the last read;
# parsing them was the largest part of reading a cluster of thousands of pods. A Pod is
# immutable, so one parsed manifest serves every read of the same text.
_RECENT_PODS = 50_000
_pods: OrderedDict[bytes, Pod] = OrderedDict()


def pod_from_manifest(manifest: Any) -> Pod:
    """A Kubernetes Pod manifest (``kind: Pod``), bound or pending."""
    try:
        text = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not plain JSON (a YAML timestamp, say): read it as it is
        return _read_pod(manifest)
    key = hashlib.blake2b(text.encode(), digest_size=16).digest()
    pod = _pods.get(key)
    if pod is None:
        pod = _pods[key] = _read_pod(manifest)  # an invalid manifest raises, and is not kept
        if len(_pods) > _RECENT_PODS:
            _pods.popitem(last=False)
    else:
        _pods.move_to_end(key)
    return pod


def _read_pod(manifest: Any) -> Pod:
    if not isinstance(manifest, dict):
        raise PodError("", f"a Pod manifest must be an object with metadata and spec, not {type_name(manifest)}")
    kind = manifest.get("kind")
    if kind is not None and kind != "Pod":
        raise PodError("kind", f"must be Pod, not {kind!r}")
    metadata = read_object(manifest.get("metadata"), "metadata")
    name = read_str(metadata.get("name"), "metadata.name", required=True)
    owner = None
    is_daemonset = False
    for i, ref in enumerate(read_list(metadata.get("ownerReferences"), "metadata.ownerReferences")):
        ref = read_object(ref, f"metadata.ownerReferences[{i}]")
        if ref.get("controller") is True:
            owner = Owner(
                read_str(ref.get("kind"), f"metadata.ownerReferences[{i}].kind"),
                read_str(ref.get("name"), f"metadata.ownerReferences[{i}].name"),
            )
            is_daemonset = owner.kind == "DaemonSet"
        elif owner is None and ref.get("kind") == "Node" and ref.get("apiVersion") == "v1":
            # A static pod: upstream's IsOwnedByNode reads any Node reference, controller or not.
            owner = Owner("Node", read_str(ref.get("name"), f"metadata.ownerReferences[{i}].name"))
    uid = read_str(metadata.get("uid"), "metadata.uid") or None
    created = read_time(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
    pod = parse_pod(
        metadata,
        manifest.get("spec"),
        path="",
        namespace=read_str(metadata.get("namespace"), "metadata.namespace") or DEFAULT_NAMESPACE,
        name=name,
        uid=uid,
        owner=owner,
        is_daemonset=is_daemonset,
        creation_timestamp=created,
    )
    status = read_object(manifest.get("status"), "status")
    phase = read_str(status.get("phase"), "status.phase")
    ready = None
    for i, condition in enumerate(read_list(status.get("conditions"), "status.conditions")):
        condition = read_object(condition, f"status.conditions[{i}]")
        if condition.get("type") == "Ready":
            ready = read_str(condition.get("status"), f"status.conditions[{i}].status") == "True"
    deleting = metadata.get("deletionTimestamp") is not None
    annotations = read_str_map(metadata.get("annotations"), "metadata.annotations")
    started = read_time(status.get("startTime"), "status.startTime")
    if not (phase or deleting or annotations or ready is not None or started):
        return pod
    for slot, value in (
        ("phase", phase),
        ("deleting", deleting),
        ("annotations", frozen_map(annotations) if annotations else pod.annotations),
        ("ready", ready),
        ("started_at", started),
    ):
        object.__setattr__(pod, slot, value)
    return pod


def pod_from_template(
    template: Any,
    *,
    namespace: str,
    name: str,
    owner: Owner | None = None,
    path: str = "spec.template",
    extra_labels: Mapping[str, str] | None = None,
    is_daemonset: bool = False,
) -> Pod:
    """A workload's pod template (``{metadata, spec}``) as one pod named ``name``."""
    template = read_object(template, path)
    if not template:
        raise PodError(path, "is required (a pod template with metadata and spec)")
    metadata = read_object(template.get("metadata"), f"{path}.metadata")
    return parse_pod(
        metadata,
        template.get("spec"),
        path=path,
        namespace=namespace,
        name=name,
        owner=owner,
        extra_labels=extra_labels,
        is_daemonset=is_daemonset,
    )


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _host_ports(containers: Iterable[tuple[dict, str]], host_network: bool) -> tuple[HostPort, ...]:
    ports = set()
    for container, path in containers:
        for j, port in enumerate(read_list(container.get("ports"), f"{path}.ports")):
            where = f"{path}.ports[{j}]"
            port = read_object(port, where)
            host_port = port.get("hostPort")
            if host_port is None and host_network and port.get("containerPort") is not None:
                host_port = port["containerPort"]
                where_port = f"{where}.containerPort"
            else:
                where_port = f"{where}.hostPort"
            if host_port is None or host_port == 0:
                continue
            number = read_int(host_port, where_port, minimum=1, maximum=65535)
            protocol = read_str(port.get("protocol"), f"{where}.protocol") or "TCP"
            if protocol not in ("TCP", "UDP", "SCTP"):
                raise PodError(f"{where}.protocol", f"{protocol!r} is not one of TCP, UDP, SCTP")
            ports.add(HostPort(read_str(port.get("hostIP"), f"{where}.hostIP"), protocol, number))
    return intern(tuple(sorted(ports)))


def parse_pod(
    metadata: dict,
    spec_value: Any,
    *,
    path: str,
    namespace: str,
    name: str,
    uid: str | None = None,
    owner: Owner | None = None,
    extra_labels: Mapping[str, str] | None = None,
    is_daemonset: bool = False,
    creation_timestamp: str | None = None,
) -> Pod:
    """The shared reader behind ``Pod.from_manifest`` and ``Pod.from_template``; ``path`` is
    where the pod's ``metadata``/``spec`` sit in the document (``""`` or ``spec.template``)."""
    meta_path = _join(path, "metadata")
    spec_path = _join(path, "spec")
    if spec_value is None:
        raise PodError(spec_path, "is required (a pod spec with containers)")
    spec = read_object(spec_value, spec_path)
    labels = read_str_map(metadata.get("labels"), f"{meta_path}.labels")
    if extra_labels:
        labels = frozen_map({**extra_labels, **labels})

    # Resources
    containers_path = f"{spec_path}.containers"
    containers = read_list(spec.get("containers"), containers_path)
    if not containers:
        raise PodError(containers_path, "must list at least one container")
    app = []
    running: list[tuple[dict, str]] = []
    for i, container in enumerate(containers):
        where = f"{containers_path}[{i}]"
        container = read_object(container, where)
        app.append(container_requests(container, where))
        running.append((container, where))
    init = []
    init_path = f"{spec_path}.initContainers"
    for i, container in enumerate(read_list(spec.get("initContainers"), init_path)):
        where = f"{init_path}[{i}]"
        container = read_object(container, where)
        is_sidecar = read_str(container.get("restartPolicy"), f"{where}.restartPolicy") == "Always"
        init.append((container_requests(container, where), is_sidecar))
        if is_sidecar:
            running.append((container, where))
    overhead = read_resources(spec.get("overhead"), f"{spec_path}.overhead")
    pod_level = None
    if spec.get("resources") is not None:
        pod_level = container_requests(spec, spec_path)
        for resource in pod_level:
            if resource not in POD_LEVEL_RESOURCES and not resource.startswith("hugepages-"):
                raise PodError(
                    key_path(f"{spec_path}.resources.requests", resource),
                    "pod-level resources support only cpu, memory and hugepages-*",
                )
    requests = frozen_map(effective_requests(app, init, overhead, pod_level))

    # Node selection
    node_selector = read_str_map(spec.get("nodeSelector"), f"{spec_path}.nodeSelector")
    affinity_path = f"{spec_path}.affinity"
    affinity = read_object(spec.get("affinity"), affinity_path)
    node_affinity = read_object(affinity.get("nodeAffinity"), f"{affinity_path}.nodeAffinity")
    required: tuple[NodeSelectorTerm, ...] = ()
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required_raw is not None:
        where = f"{affinity_path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        terms = read_list(read_object(required_raw, where).get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
        if not terms:
            raise PodError(f"{where}.nodeSelectorTerms", "must hold at least one term")
        required = intern(tuple(_node_selector_term(t, f"{where}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)))
    preferred = []
    where = f"{affinity_path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(read_list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), where)):
        entry = read_object(item, f"{where}[{i}]")
        weight = _weight(entry.get("weight"), f"{where}[{i}].weight")
        if entry.get("preference") is None:
            raise PodError(f"{where}[{i}].preference", "is required (a node selector term)")
        term = _node_selector_term(entry["preference"], f"{where}[{i}].preference")
        preferred.append(intern(PreferredSchedulingTerm(weight, term)))

    tolerations_path = f"{spec_path}.tolerations"
    tolerations = intern(
        tuple(
            PodToleration.from_manifest(t, f"{tolerations_path}[{i}]")
            for i, t in enumerate(read_list(spec.get("tolerations"), tolerations_path))
        )
    )
    if is_daemonset:
        tolerations = _with_daemonset_tolerations(tolerations, spec.get("hostNetwork") is True)

    spread = intern(
        _topology_spread(spec.get("topologySpreadConstraints"), f"{spec_path}.topologySpreadConstraints", labels)
    )
    pod_affinity = _pod_affinity(affinity.get("podAffinity"), f"{affinity_path}.podAffinity", namespace, labels)
    pod_anti_affinity = _pod_affinity(
        affinity.get("podAntiAffinity"), f"{affinity_path}.podAntiAffinity", namespace, labels
    )

    host_network = spec.get("hostNetwork")
    if host_network is not None and not isinstance(host_network, bool):
        raise PodError(f"{spec_path}.hostNetwork", f"must be true or false, not {type_name(host_network)}")
    host_ports = _host_ports(running, bool(host_network))

    priority = spec.get("priority")
    priority = (
        0 if priority is None else read_int(priority, f"{spec_path}.priority", minimum=-(2**31), maximum=_MAX_INT32)
    )
    node_name = read_str(spec.get("nodeName"), f"{spec_path}.nodeName") or None
    gates = read_list(spec.get("schedulingGates"), f"{spec_path}.schedulingGates")

    return Pod(
        namespace=namespace,
        name=name,
        requests=requests,
        labels=labels,
        uid=uid,
        node_selector=node_selector,
        required_node_affinity=required,
        preferred_node_affinity=intern(tuple(preferred)),
        tolerations=tolerations,
        topology_spread=spread,
        pod_affinity=pod_affinity,
        pod_anti_affinity=pod_anti_affinity,
        host_ports=host_ports,
        priority=priority,
        owner=owner,
        is_daemonset=is_daemonset,
        node_name=node_name,
        scheduling_gated=bool(gates),
        creation_timestamp=creation_timestamp,
    )


# The tolerations the DaemonSet controller adds to every daemon pod
# (``AddOrUpdateDaemonPodTolerations``); network-unavailable only for hostNetwork pods.
_DAEMONSET_TOLERATIONS = (
    PodToleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    PodToleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    PodToleration("node.kubernetes.io/disk-pressure", "Exists", "", "NoSchedule"),
    PodToleration("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule"),
    PodToleration("node.kubernetes.io/pid-pressure", "Exists", "", "NoSchedule"),
    PodToleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),
)
_HOST_NETWORK_TOLERATION = PodToleration("node.kubernetes.io/network-unavailable", "Exists", "", "NoSchedule")


def _with_daemonset_tolerations(
    tolerations: tuple[PodToleration, ...], host_network: bool
) -> tuple[PodToleration, ...]:
    extra = _DAEMONSET_TOLERATIONS + ((_HOST_NETWORK_TOLERATION,) if host_network else ())
    present = {(t.key, t.effect) for t in tolerations if t.operator == "Exists"}
    added = tuple(intern(t) for t in extra if (t.key, t.effect) not in present)
    return intern(tolerations + added)


# --------------------------------------------------------------------------------------------
# Node affinity


def _node_requirements(value: Any, path: str, *, fields: bool) -> tuple[NodeSelectorRequirement, ...]:
    out = []
    for i, item in enumerate(read_list(value, path)):
        where = f"{path}[{i}]"
        expr = read_object(item, where)
        key = read_str(expr.get("key"), f"{where}.key", required=True)
        operator = read_str(expr.get("operator"), f"{where}.operator", required=True)
        allowed = ("In", "NotIn") if fields else NODE_SELECTOR_OPERATORS
        if operator not in allowed:
            raise PodError(f"{where}.operator", f"{operator!r} is not one of {', '.join(allowed)}")
        values = tuple(sorted(set(read_str_list(expr.get("values"), f"{where}.values"))))
        if fields:
            if key != "metadata.name":
                raise PodError(f"{where}.key", f"{key!r} is not a supported field; matchFields supports metadata.name")
            if len(values) != 1:
                raise PodError(f"{where}.values", "must hold exactly one node name")
        elif operator in ("In", "NotIn") and not values:
            raise PodError(f"{where}.values", f"must name at least one value for {operator}")
        elif operator in ("Exists", "DoesNotExist") and values:
            raise PodError(f"{where}.values", f"must be empty for {operator}")
        elif operator in ("Gt", "Lt") and (len(values) != 1 or not re.fullmatch(r"-?[0-9]+", values[0])):
            raise PodError(f"{where}.values", f"must hold exactly one integer for {operator}, e.g. ['4']")
        out.append(NodeSelectorRequirement(key, operator, values))
    return tuple(out)


def _node_selector_term(value: Any, path: str) -> NodeSelectorTerm:
    raw = read_object(value, path)
    expressions = _node_requirements(raw.get("matchExpressions"), f"{path}.matchExpressions", fields=False)
    fields = _node_requirements(raw.get("matchFields"), f"{path}.matchFields", fields=True)
    return intern(NodeSelectorTerm(expressions, fields))


# --------------------------------------------------------------------------------------------
# Topology spread and pod (anti-)affinity


def _resolve_label_keys(
    selector: LabelSelector,
    labels: Mapping[str, str],
    match_keys: tuple[str, ...],
    mismatch_keys: tuple[str, ...],
    path: str,
) -> LabelSelector:
    """matchLabelKeys / mismatchLabelKeys folded into the selector from the pod's own labels,
    as the API server does (keys the pod does not carry are ignored)."""
    if not match_keys and not mismatch_keys:
        return selector
    if selector.null:
        raise PodError(path, "matchLabelKeys and mismatchLabelKeys need a labelSelector")
    taken = selector.keys
    for name, keys in (("matchLabelKeys", match_keys), ("mismatchLabelKeys", mismatch_keys)):
        for i, key in enumerate(keys):
            if key in taken:
                raise PodError(f"{path}.{name}[{i}]", f"{key!r} is already in labelSelector; a key may be in only one")
    extra = [LabelSelectorRequirement(k, "In", frozenset((labels[k],))) for k in match_keys if k in labels]
    extra += [LabelSelectorRequirement(k, "NotIn", frozenset((labels[k],))) for k in mismatch_keys if k in labels]
    return selector.with_expressions(extra)


def _weight(value: Any, path: str) -> int:
    if value is None:
        raise PodError(path, "is required (an integer from 1 to 100)")
    return read_int(value, path, minimum=1, maximum=100)


def _pod_affinity_term(raw_value: Any, path: str, namespace: str, labels: Mapping[str, str]) -> PodAffinityTerm:
    raw = read_object(raw_value, path)
    topology_key = read_str(raw.get("topologyKey"), f"{path}.topologyKey", required=True)
    selector = LabelSelector.from_manifest(raw.get("labelSelector"), f"{path}.labelSelector")
    match_keys = read_str_list(raw.get("matchLabelKeys"), f"{path}.matchLabelKeys")
    mismatch_keys = read_str_list(raw.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys")
    selector = _resolve_label_keys(selector, labels, match_keys, mismatch_keys, path)
    namespaces = frozenset(read_str_list(raw.get("namespaces"), f"{path}.namespaces"))
    ns_selector = raw.get("namespaceSelector")
    namespace_selector = None
    if ns_selector is not None:
        namespace_selector = LabelSelector.from_manifest(ns_selector, f"{path}.namespaceSelector")
    if not namespaces and namespace_selector is None:
        namespaces = frozenset((namespace,))
    return intern(
        PodAffinityTerm(topology_key, selector, intern(namespaces), namespace_selector, match_keys, mismatch_keys)
    )


def _pod_affinity(value: Any, path: str, namespace: str, labels: Mapping[str, str]) -> PodAffinity:
    raw = read_object(value, path)
    if not raw:
        return NO_AFFINITY
    where = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    required_raw = read_list(raw.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    required = tuple(
        _pod_affinity_term(item, f"{where}[{i}]", namespace, labels) for i, item in enumerate(required_raw)
    )
    where = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, item in enumerate(read_list(raw.get("preferredDuringSchedulingIgnoredDuringExecution"), where)):
        entry = read_object(item, f"{where}[{i}]")
        weight = _weight(entry.get("weight"), f"{where}[{i}].weight")
        if entry.get("podAffinityTerm") is None:
            raise PodError(f"{where}[{i}].podAffinityTerm", "is required")
        term = _pod_affinity_term(entry["podAffinityTerm"], f"{where}[{i}].podAffinityTerm", namespace, labels)
        preferred.append(WeightedPodAffinityTerm(weight, term))
    if not required and not preferred:
        return NO_AFFINITY
    return intern(PodAffinity(required, tuple(preferred)))


def topology_spread_constraints(
    value: Any, path: str, labels: Mapping[str, str]
) -> tuple[TopologySpreadConstraint, ...]:
    """``topologySpreadConstraints`` read as a pod with ``labels`` would carry them."""
    return _topology_spread(value, path, labels)


def _topology_spread(value: Any, path: str, labels: Mapping[str, str]) -> tuple[TopologySpreadConstraint, ...]:
    out = []
    seen: dict[tuple[str, str], int] = {}
    for i, item in enumerate(read_list(value, path)):
        where = f"{path}[{i}]"
        raw = read_object(item, where)
        if raw.get("maxSkew") is None:
            raise PodError(f"{where}.maxSkew", "is required (an integer of 1 or more)")
        max_skew = read_int(raw["maxSkew"], f"{where}.maxSkew", minimum=1, maximum=_MAX_INT32)
        topology_key = read_str(raw.get("topologyKey"), f"{where}.topologyKey", required=True)
        when = read_str(raw.get("whenUnsatisfiable"), f"{where}.whenUnsatisfiable", required=True)
        if when not in WHEN_UNSATISFIABLE:
            raise PodError(f"{where}.whenUnsatisfiable", f"{when!r} is not one of DoNotSchedule, ScheduleAnyway")
        if (topology_key, when) in seen:
            raise PodError(
                f"{where}.topologyKey",
                f"duplicates {path}[{seen[topology_key, when]}]: one constraint per topologyKey and whenUnsatisfiable",
            )
        seen[topology_key, when] = i
        min_domains = raw.get("minDomains")
        if min_domains is not None:
            min_domains = read_int(min_domains, f"{where}.minDomains", minimum=1, maximum=_MAX_INT32)
            if when != "DoNotSchedule":
                raise PodError(f"{where}.minDomains", "only applies with whenUnsatisfiable DoNotSchedule")
        policies = []
        for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            policy = read_str(raw.get(name), f"{where}.{name}") or default
            if policy not in INCLUSION_POLICIES:
                raise PodError(f"{where}.{name}", f"{policy!r} is not one of Honor, Ignore")
            policies.append(policy)
        selector = LabelSelector.from_manifest(raw.get("labelSelector"), f"{where}.labelSelector")
        match_keys = read_str_list(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys")
        selector = _resolve_label_keys(selector, labels, match_keys, (), where)
        out.append(
            intern(
                TopologySpreadConstraint(
                    max_skew, topology_key, when, selector, min_domains, policies[0], policies[1], match_keys
                )
            )
        )
    return tuple(out)
