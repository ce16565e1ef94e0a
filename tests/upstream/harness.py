"""Upstream's scheduling test environment, over karpweb's solver and the real catalog.

Karpenter's scheduling suites (``pkg/controllers/provisioning/...``) run against envtest, a
fake cloud provider and ``pkg/test``'s builders. Their ports here run against what a karpweb
user runs: Kubernetes documents read by ``manage.py simulate``'s reader
(``services.simulate.build_snapshot``: THE validator, the bundled us-east-1 catalog, the
simulated spot market), THE solver, and nodes made from the plan the way the simulated
kubelet makes them (``cluster.simulated.node_manifest``).

The pieces map one to one (see README.md in this folder for the fake-to-real mapping):

=====================================  ==============================================
upstream                               here
=====================================  ==============================================
``test.NodePool(...)``                 ``node_pool(...)``
``test.UnschedulablePod(PodOptions)``  ``unschedulable_pod(**options)``
``test.UnschedulablePods(opts, n)``    ``unschedulable_pods(n, **options)``
``test.Pod(...)``                      ``pod(...)``
``test.DaemonSet(...)``                ``daemon_set(...)``
``test.Node(...)``                     ``node(...)``
``ExpectApplied(objs...)``             ``env.apply(objs...)``
``ExpectProvisioned(pods...)``         ``env.provision(pods...)``
``ExpectProvisionedNoBinding``         ``env.provision(pods..., bind=False)``
``ExpectScheduled(pod)``               ``env.scheduled(pod)`` (a ``NodeView``)
``ExpectNotScheduled(pod)``            ``env.not_scheduled(pod)``
``ExpectManualBinding(pod, node)``     ``env.bind(pod, node)``
``ExpectSkew(ns, constraint)``         ``env.skew(constraint, namespace=...)``
``ExpectNodes`` / ``ExpectNodeClaims`` ``env.nodes()`` / ``env.claims()``
``ExpectDeleted(objs...)``             ``env.delete(objs...)``
=====================================  ==============================================

Every plan the environment turns into nodes is first checked by ``scheduling.verify``, the
product's independent verifier (when it exists), so a test that passes also passes it.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioning.crd.labels import ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODEPOOL, OS, ZONE
from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.labelselector import LabelSelector
from provisioning.scheduling.plan import ClaimPlan, Plan
from provisioning.scheduling.quantity import to_int
from provisioning.scheduling.snapshot import Snapshot

Manifest = dict[str, Any]

# ------------------------------------------------------------------ the fake provider, mapped

# Upstream's fake zones are three; an EC2NodeClass with subnets in three real zones is what
# a user with a three-zone VPC has. us-east-1d, e and f exist in the catalog and are used by
# tests that ask for six zones.
ZONE_1, ZONE_2, ZONE_3 = "us-east-1a", "us-east-1b", "us-east-1c"
TEST_ZONES = (ZONE_1, ZONE_2, ZONE_3)
ALL_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f")

INSTANCE_CPU = "karpenter.k8s.aws/instance-cpu"
INSTANCE_MEMORY = "karpenter.k8s.aws/instance-memory"
INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"
INSTANCE_SIZE = "karpenter.k8s.aws/instance-size"
INSTANCE_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
INSTANCE_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
NEURON = "aws.amazon.com/neuron"

__all__ = [
    "ALL_ZONES",
    "ARCH",
    "CAPACITY_TYPE",
    "HOSTNAME",
    "INSTANCE_TYPE",
    "NODEPOOL",
    "OS",
    "TEST_ZONES",
    "ZONE",
    "ZONE_1",
    "ZONE_2",
    "ZONE_3",
    "Env",
    "NodeView",
    "Result",
    "daemon_set",
    "ec2_node_class",
    "namespace",
    "node",
    "node_pool",
    "pod",
    "requirement",
    "spread",
    "affinity_term",
    "skew_values",
    "key_of",
    "random_name",
    "unschedulable_pod",
    "unschedulable_pods",
]

_names = itertools.count(1)


def random_name(prefix: str = "test") -> str:
    """Unique names as upstream's ``test.RandomName()`` gives them (deterministic here)."""
    return f"{prefix}-{next(_names):05d}"


# ------------------------------------------------------------------ builders


def requirement(key: str, operator: str, *values: Any, min_values: int | None = None) -> Manifest:
    """A node selector requirement (``NodeSelectorRequirementWithMinValues`` when ``min_values``)."""
    out: Manifest = {"key": key, "operator": operator}
    if values:
        out["values"] = [str(v) for v in values]
    if min_values is not None:
        out["minValues"] = min_values
    return out


def ec2_node_class(name: str = "default", **spec: Any) -> Manifest:
    """An EC2NodeClass (AL2023 unless ``amiSelectorTerms`` says otherwise)."""
    body: Manifest = {
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}],
    }
    body.update(spec)
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": body}


def node_pool(
    name: str | None = None,
    *,
    requirements: Sequence[Manifest] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Manifest] | None = None,
    startup_taints: Sequence[Manifest] | None = None,
    limits: Mapping[str, Any] | None = None,
    weight: int | None = None,
    nodeclass: str = "default",
    disruption: Mapping[str, Any] | None = None,
    expire_after: str | None = None,
    deletion_timestamp: str | None = None,
    replicas: int | None = None,
) -> Manifest:
    """``test.NodePool``: a random name, cpu limit 2000 (upstream's default), no requirements."""
    template_spec: Manifest = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
        "requirements": [dict(r) for r in requirements or ()],
    }
    if taints:
        template_spec["taints"] = [dict(t) for t in taints]
    if startup_taints:
        template_spec["startupTaints"] = [dict(t) for t in startup_taints]
    if expire_after is not None:
        template_spec["expireAfter"] = expire_after
    template: Manifest = {"spec": template_spec}
    if labels or annotations:
        template["metadata"] = {}
        if labels:
            template["metadata"]["labels"] = dict(labels)
        if annotations:
            template["metadata"]["annotations"] = dict(annotations)
    spec: Manifest = {"template": template, "limits": dict(limits) if limits is not None else {"cpu": "2000"}}
    if weight is not None:
        spec["weight"] = weight
    if disruption is not None:
        spec["disruption"] = dict(disruption)
    if replicas is not None:
        spec["replicas"] = replicas
    metadata: Manifest = {"name": name or random_name("nodepool")}
    if deletion_timestamp:
        metadata["deletionTimestamp"] = deletion_timestamp
        metadata["finalizers"] = ["karpenter.sh/termination"]
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": metadata, "spec": spec}


def spread(
    key: str = ZONE,
    *,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, Any] | None = None,
    max_skew: int = 1,
    when_unsatisfiable: str = "DoNotSchedule",
    min_domains: int | None = None,
    node_affinity_policy: str | None = None,
    node_taints_policy: str | None = None,
    match_label_keys: Sequence[str] | None = None,
) -> Manifest:
    """A ``TopologySpreadConstraint``; ``labels`` is a matchLabels selector, ``selector`` a whole one
    (neither: no labelSelector, which selects nothing)."""
    out: Manifest = {"topologyKey": key, "maxSkew": max_skew, "whenUnsatisfiable": when_unsatisfiable}
    if selector is not None:
        out["labelSelector"] = dict(selector)
    elif labels is not None:
        out["labelSelector"] = {"matchLabels": dict(labels)}
    if min_domains is not None:
        out["minDomains"] = min_domains
    if node_affinity_policy is not None:
        out["nodeAffinityPolicy"] = node_affinity_policy
    if node_taints_policy is not None:
        out["nodeTaintsPolicy"] = node_taints_policy
    if match_label_keys is not None:
        out["matchLabelKeys"] = list(match_label_keys)
    return out


def affinity_term(
    key: str,
    *,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, Any] | None = None,
    namespaces: Sequence[str] | None = None,
    namespace_selector: Mapping[str, Any] | None = None,
    weight: int | None = None,
) -> Manifest:
    """A ``PodAffinityTerm`` (a ``WeightedPodAffinityTerm`` when ``weight`` is given)."""
    term: Manifest = {"topologyKey": key}
    if selector is not None:
        term["labelSelector"] = dict(selector)
    elif labels is not None:
        term["labelSelector"] = {"matchLabels": dict(labels)}
    if namespaces is not None:
        term["namespaces"] = list(namespaces)
    if namespace_selector is not None:
        term["namespaceSelector"] = dict(namespace_selector)
    if weight is not None:
        return {"weight": weight, "podAffinityTerm": term}
    return term


def pod(
    name: str | None = None,
    *,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    requests: Mapping[str, Any] | None = None,
    limits: Mapping[str, Any] | None = None,
    pod_requests: Mapping[str, Any] | None = None,
    overhead: Mapping[str, Any] | None = None,
    init_containers: Sequence[Manifest] | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_requirements: Sequence[Manifest] | None = None,
    node_requirement_terms: Sequence[Sequence[Manifest]] | None = None,
    node_preferences: Sequence[Manifest] | None = None,
    pod_requirements: Sequence[Manifest] | None = None,
    pod_preferences: Sequence[Manifest] | None = None,
    pod_anti_requirements: Sequence[Manifest] | None = None,
    pod_anti_preferences: Sequence[Manifest] | None = None,
    topology_spread_constraints: Sequence[Manifest] | None = None,
    tolerations: Sequence[Manifest] | None = None,
    host_ports: Sequence[int] | None = None,
    node_name: str | None = None,
    priority: int | None = None,
    owner: tuple[str, str] | None = None,
    scheduling_gates: Sequence[str] | None = None,
    phase: str | None = None,
    spec: Mapping[str, Any] | None = None,
) -> Manifest:
    """``test.Pod``: one container with ``requests`` (none by default, as upstream), and every
    PodOptions field upstream's tests use. ``node_requirements`` is one required node selector
    term, as upstream's ``NodeRequirements``; ``node_requirement_terms`` gives several (ORed).
    ``node_preferences`` become one preferred term of weight 1 holding them all, as upstream's
    ``buildNodeAffinity``; ``spec={"affinity": ...}`` gives any other shape."""
    container: Manifest = {"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2"}
    resources: Manifest = {}
    if requests:
        resources["requests"] = {k: str(v) for k, v in requests.items()}
    if limits:
        resources["limits"] = {k: str(v) for k, v in limits.items()}
    if resources:
        container["resources"] = resources
    if host_ports:
        container["ports"] = [{"containerPort": 80, "hostPort": p, "protocol": "TCP"} for p in host_ports]
    body: Manifest = {"containers": [container]}
    if pod_requests:
        body["resources"] = {"requests": {k: str(v) for k, v in pod_requests.items()}}
    if overhead:
        body["overhead"] = {k: str(v) for k, v in overhead.items()}
    if init_containers:
        body["initContainers"] = [{"name": f"init-{i}", "image": "pause", **c} for i, c in enumerate(init_containers)]
    if node_selector:
        body["nodeSelector"] = dict(node_selector)
    affinity: Manifest = {}
    terms = [list(t) for t in node_requirement_terms or ()]
    if node_requirements:
        terms.insert(0, list(node_requirements))
    node_affinity: Manifest = {}
    if terms:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": [dict(r) for r in t]} for t in terms]
        }
    if node_preferences:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "preference": {"matchExpressions": [dict(r) for r in node_preferences]}}
        ]
    if node_affinity:
        affinity["nodeAffinity"] = node_affinity
    for field_name, required, preferred in (
        ("podAffinity", pod_requirements, pod_preferences),
        ("podAntiAffinity", pod_anti_requirements, pod_anti_preferences),
    ):
        part: Manifest = {}
        if required:
            part["requiredDuringSchedulingIgnoredDuringExecution"] = [dict(t) for t in required]
        if preferred:
            part["preferredDuringSchedulingIgnoredDuringExecution"] = [dict(t) for t in preferred]
        if part:
            affinity[field_name] = part
    if affinity:
        body["affinity"] = affinity
    if topology_spread_constraints:
        body["topologySpreadConstraints"] = [dict(c) for c in topology_spread_constraints]
    if tolerations:
        body["tolerations"] = [dict(t) for t in tolerations]
    if node_name:
        body["nodeName"] = node_name
    if priority is not None:
        body["priority"] = priority
    if scheduling_gates:
        body["schedulingGates"] = [{"name": g} for g in scheduling_gates]
    if spec:
        body.update(copy.deepcopy(dict(spec)))
    metadata: Manifest = {"name": name or random_name("pod"), "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": owner[1], "controller": True}
        ]
    manifest: Manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}
    if phase:
        manifest["status"] = {"phase": phase}
    return manifest


def unschedulable_pod(name: str | None = None, **options: Any) -> Manifest:
    """``test.UnschedulablePod``: a pending pod (no nodeName), marked PodScheduled=False."""
    manifest = pod(name, **options)
    manifest.setdefault("status", {})["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]
    return manifest


def unschedulable_pods(count: int, **options: Any) -> list[Manifest]:
    """``test.UnschedulablePods(options, count)``: ``count`` identical pending pods."""
    return [unschedulable_pod(**options) for _ in range(count)]


def daemon_set(name: str | None = None, *, namespace: str = "default", **pod_options: Any) -> Manifest:
    """``test.DaemonSet``: its pod template from ``pod``'s options (labels default to app=<name>)."""
    name = name or random_name("daemonset")
    pod_options.setdefault("labels", {"app": name})
    template = pod(name, namespace=namespace, **pod_options)
    labels = template["metadata"].get("labels", {})
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": template["spec"]},
        },
    }


def node(
    name: str | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Manifest] | None = None,
    allocatable: Mapping[str, Any] | None = None,
    capacity: Mapping[str, Any] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> Manifest:
    """``test.Node``: capacity defaults to allocatable, Ready."""
    allocatable = {k: str(v) for k, v in (allocatable or {}).items()}
    capacity = {k: str(v) for k, v in capacity.items()} if capacity is not None else dict(allocatable)
    name = name or random_name("node")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME: name, **dict(labels or {})}},
        "spec": {"taints": [dict(t) for t in taints or ()], "unschedulable": unschedulable},
        "status": {
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **dict(labels or {})}},
    }


# ------------------------------------------------------------------ the environment


@dataclass
class NodeView:
    """A node as a test reads it: what ``ExpectScheduled`` returns upstream."""

    name: str
    labels: dict[str, str]
    taints: list[Manifest]
    allocatable: dict[str, str]
    claim: ClaimPlan | None = None  # the NodeClaim it was launched for (None: applied by the test)
    manifest: Manifest = field(default_factory=dict, repr=False)

    @property
    def instance_type(self) -> str:
        return self.labels.get(INSTANCE_TYPE, "")

    @property
    def zone(self) -> str:
        return self.labels.get(ZONE, "")

    @property
    def capacity_type(self) -> str:
        return self.labels.get(CAPACITY_TYPE, "")


@dataclass
class Result:
    """One provisioning round: the snapshot, the plan, and where each pod went."""

    snapshot: Snapshot
    plan: Plan
    bindings: dict[str, str]  # pod key → node name (bound or nominated)
    created: list[NodeView]
    violations: list = field(default_factory=list)

    @property
    def claims(self) -> tuple[ClaimPlan, ...]:
        return self.plan.claims

    @property
    def unschedulable(self) -> Mapping[str, str]:
        return self.plan.unschedulable


def key_of(manifest: Manifest) -> str:
    meta = manifest["metadata"]
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"


def total_requests(raw: Mapping[str, str] | None, count: int = 1) -> dict[str, int]:
    """``count`` pods' worth of the requests ``raw`` (quantities), with their pod slots."""
    return {"pods": count, **{name: to_int(name, value) * count for name, value in (raw or {}).items()}}


def holds(it: InstanceType, requests: Mapping[str, int]) -> bool:
    """The type's allocatable holds ``requests`` (upstream's ``resources.Fits``)."""
    return all(it.allocatable.get(name, 0) >= amount for name, amount in requests.items())


class Env:
    """The cluster a test builds: policies, namespaces, DaemonSets, nodes and pods, as
    documents; ``provision`` runs one scheduling round over them as karpweb would."""

    def __init__(
        self,
        *,
        zones: Sequence[str] = TEST_ZONES,
        catalog: Any = None,
        nodeclass: Manifest | None = None,
        max_instance_types: int = 60,
    ) -> None:
        from provisioning.services.catalog import bundled_catalog

        self.catalog = catalog if catalog is not None else bundled_catalog("us-east-1")
        self.zones = tuple(zones)
        self.max_instance_types = max_instance_types
        self.unavailable: set[str] = set()  # "capacity-type:instance-type:zone", as the ICE cache
        self.objects: dict[tuple[str, str], Manifest] = {}
        self.node_claims: dict[str, ClaimPlan] = {}  # node name → the claim it was launched for
        self.rounds: list[Result] = []
        # Solver options upstream sets per test (e.g. ``min_values_policy="BestEffort"``,
        # ``preference_policy="Ignore"``): fields of the Snapshot, set on every round's.
        self.snapshot_options: dict[str, Any] = {}
        # Options of the document reader (``build_snapshot``), e.g. ``default_constraints``:
        # the scheduler configuration's PodTopologySpread defaults.
        self.reader_options: dict[str, Any] = {}
        self.apply(nodeclass or ec2_node_class())

    # -- objects -----------------------------------------------------------------------

    def apply(self, *objects: Manifest | Iterable[Manifest]) -> None:
        """Create or replace each object (a list of them counts as its items)."""
        for obj in objects:
            if isinstance(obj, list | tuple):
                self.apply(*obj)
                continue
            self.objects[(obj["kind"], key_of(obj))] = obj

    def delete(self, *objects: Manifest) -> None:
        for obj in objects:
            self.objects.pop((obj["kind"], key_of(obj)), None)
            if obj["kind"] == "Node":
                self.node_claims.pop(obj["metadata"]["name"], None)

    def of_kind(self, kind: str) -> list[Manifest]:
        return [o for (k, _), o in self.objects.items() if k == kind]

    def get(self, kind: str, name: str, namespace: str | None = None) -> Manifest | None:
        key = f"{namespace}/{name}" if namespace else f"default/{name}"
        if kind in ("Node", "NodePool", "EC2NodeClass", "Namespace"):
            key = f"default/{name}"
        return self.objects.get((kind, key))

    def mark_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> None:
        """An offering out of capacity (the ICE cache's key), as a failed launch leaves it."""
        self.unavailable.add(f"{capacity_type}:{instance_type}:{zone}")

    # -- provisioning ------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        from provisioning.services.simulate import build_snapshot

        documents = [copy.deepcopy(o) for o in self.objects.values()]
        snapshot, _ = build_snapshot(
            documents,
            catalog=self.catalog,
            zones=self.zones,
            unavailable=(lambda key: key in self.unavailable) if self.unavailable else None,
            **self.reader_options,
        )
        from dataclasses import replace

        from provisioning.cluster.base import is_pending

        # The cluster watch records as pending only pods kube-scheduler marked Unschedulable
        # (upstream's IsProvisionable); a bare unbound Pod document is not one of them.
        waiting = {
            key_of(o)
            for o in self.objects.values()
            if o["kind"] == "Pod" and not (o.get("spec") or {}).get("nodeName") and not is_pending(o)
        }
        pods = tuple(p for p in snapshot.pods if p.key not in waiting)
        return replace(snapshot, pods=pods, max_instance_types=self.max_instance_types, **self.snapshot_options)

    def provision(self, *pods: Manifest | Iterable[Manifest], bind: bool = True) -> Result:
        """``ExpectProvisioned``: apply ``pods``, solve every pending pod of the cluster, launch
        a node per planned NodeClaim, and bind the pods given here to where the plan put them
        (``bind=False``: ``ExpectProvisionedNoBinding``)."""
        from provisioning.scheduling.solver import solve

        given: list[Manifest] = []
        for p in pods:
            given.extend(p if isinstance(p, list | tuple) else [p])
        self.apply(*given)
        snapshot = self.snapshot()
        plan = solve(snapshot)
        violations = _verify(snapshot, plan)
        assert not violations, "the plan breaks rules the verifier checks:\n" + "\n".join(map(str, violations))
        created = [self._launch(claim, snapshot) for claim in plan.claims]
        bindings: dict[str, str] = {}
        for view, claim in zip(created, plan.claims, strict=True):
            for key in claim.pods:
                bindings[key] = view.name
        for node_name, keys in plan.existing.items():
            for key in keys:
                bindings[key] = node_name
        if bind:
            for manifest in given:
                target = bindings.get(key_of(manifest))
                if target is not None:
                    manifest.setdefault("spec", {})["nodeName"] = target
        result = Result(snapshot, plan, bindings, created, violations)
        self.rounds.append(result)
        return result

    def _launch(self, claim: ClaimPlan, snapshot: Snapshot) -> NodeView:
        """The node a NodeClaim becomes: the chosen (cheapest) offering, as the cloud launches it."""
        from provisioning.cluster.simulated import node_manifest

        chosen = claim.chosen
        pool = next(p for p in snapshot.nodepools if p.name == claim.nodepool)
        it = next(t for t in pool.instance_types if t.name == chosen.instance_type)
        nodepool = self.get("NodePool", claim.nodepool) or {}
        template = (nodepool.get("spec") or {}).get("template") or {}
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        for key, req in claim.requirements.items():
            if key == HOSTNAME or req.complement or len(req.values) != 1:
                continue
            labels[key] = next(iter(req.values))
        labels.update(claim.labels)
        tspec = template.get("spec") or {}
        taints = list(tspec.get("taints") or ()) + list(tspec.get("startupTaints") or ())
        name = random_name("node")
        manifest = node_manifest(
            name,
            it,
            zone=chosen.zone,
            capacity_type=chosen.capacity_type,
            nodepool=claim.nodepool,
            labels=labels,
            taints=taints,
            provider_id=f"aws:///{chosen.zone}/i-{name}",
        )
        manifest["metadata"]["labels"]["karpenter.k8s.aws/ec2nodeclass"] = tspec.get("nodeClassRef", {}).get(
            "name", "default"
        )
        self.apply(manifest)
        self.node_claims[name] = claim
        return self._view(manifest)

    def _view(self, manifest: Manifest) -> NodeView:
        name = manifest["metadata"]["name"]
        return NodeView(
            name=name,
            labels=dict(manifest["metadata"].get("labels") or {}),
            taints=list((manifest.get("spec") or {}).get("taints") or ()),
            allocatable=dict((manifest.get("status") or {}).get("allocatable") or {}),
            claim=self.node_claims.get(name),
            manifest=manifest,
        )

    # -- expectations ------------------------------------------------------------------

    def bind(self, pod_manifest: Manifest, node_manifest_or_view: Manifest | NodeView) -> None:
        """``ExpectManualBinding``."""
        name = (
            node_manifest_or_view.name
            if isinstance(node_manifest_or_view, NodeView)
            else node_manifest_or_view["metadata"]["name"]
        )
        pod_manifest.setdefault("spec", {})["nodeName"] = name
        self.apply(pod_manifest)

    def scheduled(self, pod_manifest: Manifest) -> NodeView:
        """``ExpectScheduled``: the node the pod is bound to (fails when it is not bound)."""
        current = self.objects.get(("Pod", key_of(pod_manifest)), pod_manifest)
        node_name = (current.get("spec") or {}).get("nodeName")
        assert node_name, f"pod {key_of(pod_manifest)} is not scheduled: {self._why(pod_manifest)}"
        found = self.objects.get(("Node", f"default/{node_name}"))
        assert found is not None, f"pod {key_of(pod_manifest)} is bound to {node_name}, which does not exist"
        return self._view(found)

    def not_scheduled(self, pod_manifest: Manifest) -> None:
        """``ExpectNotScheduled``."""
        current = self.objects.get(("Pod", key_of(pod_manifest)), pod_manifest)
        node_name = (current.get("spec") or {}).get("nodeName")
        assert not node_name, f"pod {key_of(pod_manifest)} was scheduled to {node_name}"

    def is_scheduled(self, pod_manifest: Manifest) -> bool:
        current = self.objects.get(("Pod", key_of(pod_manifest)), pod_manifest)
        return bool((current.get("spec") or {}).get("nodeName"))

    def _why(self, pod_manifest: Manifest) -> str:
        for result in reversed(self.rounds):
            reason = result.plan.unschedulable.get(key_of(pod_manifest))
            if reason is not None:
                return reason
        return "not in any round's plan"

    def nodes(self) -> list[NodeView]:
        """``ExpectNodes``: every node, applied by the test or launched for a claim."""
        return [self._view(m) for m in self.of_kind("Node")]

    def claims(self) -> list[ClaimPlan]:
        """``ExpectNodeClaims``: the NodeClaims launched so far (one per launched node)."""
        return [self.node_claims[v.name] for v in self.nodes() if v.name in self.node_claims]

    def skew(self, constraint: Manifest, namespace: str = "default") -> Counter:
        """``ExpectSkew``: bound pods the constraint's selector picks in ``namespace``, counted
        per domain of its key (hostname counts by node name). Compare with ``sorted(...values())``
        as upstream's ``ConsistOf``."""
        raw = constraint.get("labelSelector")
        # Upstream lists the pods with the selector, and a nil one lists every pod.
        selector = LabelSelector.from_manifest(raw if raw is not None else {}, "labelSelector")
        nodes = {m["metadata"]["name"]: m for m in self.of_kind("Node")}
        counts: Counter = Counter()
        key = constraint["topologyKey"]
        for p in self.of_kind("Pod"):
            meta = p["metadata"]
            if (meta.get("namespace") or "default") != namespace:
                continue
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
                continue
            if not selector.matches(meta.get("labels") or {}):
                continue
            node_name = (p.get("spec") or {}).get("nodeName")
            if not node_name or node_name not in nodes:
                continue
            if key == HOSTNAME:
                counts[node_name] += 1
            else:
                value = (nodes[node_name]["metadata"].get("labels") or {}).get(key)
                if value is not None:
                    counts[value] += 1
        return counts


def _verify(snapshot: Snapshot, plan: Plan) -> list:
    """The product's independent verifier, when present: a plan a test accepts must pass it."""
    try:
        from provisioning.scheduling.verify import verify
    except ImportError:
        return []
    return list(verify(snapshot, plan))


def skew_values(counts: Counter) -> list[int]:
    """``ConsistOf(...)`` as a sorted list."""
    return sorted(counts.values())


def mark_spot_unavailable(env: Env, zone: str = ZONE_3) -> None:
    """Every spot offering of ``zone`` out of capacity (the ICE cache): upstream's fake types offer
    only on-demand in test-zone-3."""
    for instance_type, spot_zone in env.catalog.spot:
        if spot_zone == zone:
            env.mark_unavailable("spot", instance_type, zone)
