"""Upstream's disruption and termination suites' environment, on the real service.

The cluster is the simulated cluster's rows (NodePool and EC2NodeClass through THE validator,
NodeClaim + Node rows for nodes, ClusterPod for pods, ClusterPDB for PodDisruptionBudgets);
each step runs ``services.disruption`` (the real planner, budgets, re-check, taint, drain)
at a clock the test moves. Replacements launch and register at once (their chosen offering),
and the simulated scheduler binds pending pods, so a test sees what a cluster would.

Upstream's fake provider maps onto the real catalog as for the scheduling suites
(``README.md``): zones ``test-zone-1..3`` are ``us-east-1a..c``; "an instance type" is a real
one with the property the test needs (a cheaper or a dearer one), named where it is used.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from provisioning.cluster import simulated
from provisioning.cluster.simulated import SimulatedCluster, node_manifest
from provisioning.disruption.drift import hashes as drift_hashes
from provisioning.models import ClusterNode, ClusterPDB, ClusterPod, Disruption, EC2NodeClass, NodeClaim, NodePool
from provisioning.services import disruption
from provisioning.services.catalog import bundled_catalog
from provisioning.services.policy import apply_manifest
from provisioning.services.simulate import default_solver

ZONE_1, ZONE_2, ZONE_3 = "us-east-1a", "us-east-1b", "us-east-1c"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole-test",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
    },
}
_names = itertools.count(1)


def name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def node_pool(
    pool_name: str = "default",
    *,
    requirements: Sequence[Mapping[str, Any]] = (),
    consolidation_policy: str = "WhenEmptyOrUnderutilized",
    consolidate_after: str = "0s",
    budgets: Sequence[Mapping[str, Any]] | None = ({"nodes": "100%"},),
    expire_after: str | None = None,
    termination_grace_period: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] | None = None,
    limits: Mapping[str, Any] | None = None,
    weight: int | None = None,
) -> dict[str, Any]:
    """Upstream's ``test.NodePool()`` for the disruption suites: consolidate at once, a 100%
    budget (the suites set it so; the NodePool default is 10%), on EC2NodeClass ``default``."""
    template_spec: dict[str, Any] = {
        "requirements": [dict(r) for r in requirements],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    }
    if expire_after is not None:
        template_spec["expireAfter"] = expire_after
    if termination_grace_period is not None:
        template_spec["terminationGracePeriod"] = termination_grace_period
    if taints:
        template_spec["taints"] = [dict(t) for t in taints]
    template: dict[str, Any] = {"spec": template_spec}
    metadata = {k: dict(v) for k, v in (("labels", labels), ("annotations", annotations)) if v}
    if metadata:
        template["metadata"] = metadata
    disruption_spec: dict[str, Any] = {
        "consolidationPolicy": consolidation_policy,
        "consolidateAfter": consolidate_after,
    }
    if budgets is not None:
        disruption_spec["budgets"] = [dict(b) for b in budgets]
    spec: dict[str, Any] = {"template": template, "disruption": disruption_spec}
    if limits:
        spec["limits"] = dict(limits)
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": pool_name}, "spec": spec}


class RecordingCluster(SimulatedCluster):
    """The simulated cluster, noting what the drain asked of it and the events it recorded."""

    def __init__(self) -> None:
        self.evictions: list[str] = []  # "ns/name" of every eviction the API granted
        self.refused: list[str] = []  # ... and of those it refused (a PodDisruptionBudget)
        self.deleted_pods: list[str] = []
        self.events: list[Any] = []

    def evict(self, namespace: str, name: str):
        granted = super().evict(namespace, name)
        (self.evictions if granted else self.refused).append(f"{namespace}/{name}")
        return granted

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        self.deleted_pods.append(f"{namespace}/{name}")
        super().delete_pod(namespace, name, grace_seconds)

    def record_event(self, event: Any) -> None:
        self.events.append(event)


class StubCloud:
    """The cloud as the drain sees it: ``terminate`` is noted; every claim's instance exists."""

    def __init__(self) -> None:
        self.terminated: list[str] = []

    def terminate(self, instance_id: str) -> None:
        self.terminated.append(instance_id)

    def list_instances(self, instance_ids=None) -> list[Any]:
        from provisioning.cloud.base import Instance

        ids = NodeClaim.objects.exclude(instance_id="").exclude(state=NodeClaim.State.TERMINATED)
        return [Instance(i, "", "", "", "running") for i in ids.values_list("instance_id", flat=True)]


class DisruptionEnv:
    """One test's cluster and clock. ``now`` starts at the real time and moves only when a
    test says so (``step``/``settle``/``advance``)."""

    def __init__(self, cluster: RecordingCluster) -> None:
        self.cluster = cluster
        self.cloud: Any = None
        self.catalog = bundled_catalog()
        self.now = timezone.now()
        apply_manifest(copy.deepcopy(NODECLASS), source="cli")

    # ------------------------------------------------------------------ building the cluster

    def apply(self, *manifests: Mapping[str, Any]) -> None:
        for manifest in manifests:
            apply_manifest(copy.deepcopy(dict(manifest)), source="cli")

    def price(self, instance_type: str, zone: str = ZONE_1, capacity_type: str = "on-demand") -> float:
        it = self.catalog.instance_type(instance_type)
        assert it is not None, f"{instance_type} is not in the catalog"
        offering = next(o for o in it.offerings if o.zone == zone and o.capacity_type == capacity_type)
        assert offering.price is not None
        return offering.price

    def node(
        self,
        node_name: str | None = None,
        *,
        nodepool: str = "default",
        instance_type: str = "m5.xlarge",
        zone: str = ZONE_1,
        capacity_type: str = "on-demand",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        claim_annotations: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        initialized: bool = True,
        ready: bool = True,
        age: timedelta = timedelta(hours=1),
        claim_spec: Mapping[str, Any] | None = None,
    ) -> str:
        """A node Karpenter launched (NodeClaim + Node rows), ``age`` old, its claim stamped
        with the drift hashes of its NodePool and EC2NodeClass as they are now."""
        node_name = node_name or name("node")
        it = self.catalog.instance_type(instance_type)
        assert it is not None, f"{instance_type} is not in the catalog"
        created = self.now - age
        pool = NodePool.objects.filter(name=nodepool).first()
        nodeclass = EC2NodeClass.objects.filter(name="default").first()
        template = ((pool.spec if pool else {}).get("template") or {}).get("spec") or {}
        spec = {
            "expireAfter": template.get("expireAfter", "720h"),
            "driftHashes": drift_hashes((pool.spec if pool else {}).get("template") or {}, nodeclass.spec),
            "annotations": dict(claim_annotations or {}),
            **({"terminationGracePeriod": template["terminationGracePeriod"]} if "terminationGracePeriod" in template else {}),
            **dict(claim_spec or {}),
        }
        state = NodeClaim.State.INITIALIZED if initialized else NodeClaim.State.REGISTERED
        claim = NodeClaim.objects.create(
            name=f"{node_name}-claim",
            nodepool_name=nodepool,
            nodeclass_name="default",
            state=state,
            instance_type=instance_type,
            zone=zone,
            capacity_type=capacity_type,
            price_per_hour=self.price(instance_type, zone, capacity_type),
            node_name=node_name,
            instance_id=f"i-{next(_names):012x}00000",
            launch_options=[
                {"instanceType": instance_type, "zone": zone, "capacityType": capacity_type, "price": 0.0}
            ],
            spec=spec,
        )
        NodeClaim.objects.filter(pk=claim.pk).update(
            created_at=created, launched_at=created, initialized_at=created if initialized else None
        )
        all_labels = {"karpenter.sh/registered": "true", **dict(labels or {})}
        if initialized:
            all_labels["karpenter.sh/initialized"] = "true"
        manifest = node_manifest(
            node_name,
            it,
            zone=zone,
            capacity_type=capacity_type,
            nodepool=nodepool,
            labels=all_labels,
            taints=list(taints),
        )
        manifest["metadata"]["creationTimestamp"] = created.isoformat().replace("+00:00", "Z")
        if annotations:
            manifest["metadata"]["annotations"] = dict(annotations)
        if not ready:
            manifest.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "False"}]
        ClusterNode.objects.create(
            name=node_name,
            manifest=manifest,
            nodeclaim=claim.name,
            nodepool=nodepool,
            instance_id=claim.instance_id,
            ready=ready,
            last_pod_change_at=created,
        )
        return node_name

    def pod(
        self,
        pod_name: str | None = None,
        *,
        node: str | None = None,
        namespace: str = "default",
        cpu: str = "100m",
        memory: str = "128Mi",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        owner: str | None = "ReplicaSet",
        priority_class: str | None = None,
        tolerations: Sequence[Mapping[str, Any]] = (),
        grace_seconds: int | None = None,
        phase: str | None = None,
        spec: Mapping[str, Any] | None = None,
    ) -> str:
        """A pod, bound to ``node`` (Running) or pending; owned by a ReplicaSet unless
        ``owner`` says otherwise (None: a bare pod; "Node": a static pod; "DaemonSet")."""
        pod_name = pod_name or name("pod")
        metadata: dict[str, Any] = {
            "name": pod_name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        }
        if owner:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1" if owner == "Node" else "apps/v1", "kind": owner, "name": f"{owner.lower()}-x",
                 "uid": f"uid-{owner.lower()}", "controller": True}
            ]
        pod_spec: dict[str, Any] = {
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            **dict(spec or {}),
        }
        if priority_class:
            pod_spec["priorityClassName"] = priority_class
        if tolerations:
            pod_spec["tolerations"] = [dict(t) for t in tolerations]
        if grace_seconds is not None:
            pod_spec["terminationGracePeriodSeconds"] = grace_seconds
        manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
        status = phase or ("Running" if node else "Pending")
        ClusterPod.objects.create(
            namespace=namespace,
            name=pod_name,
            manifest=manifest,
            node_name=node or "",
            phase=status,
            bound_at=self.now if node else None,
        )
        return f"{namespace}/{pod_name}"

    def pods(self, count: int, **options: Any) -> list[str]:
        return [self.pod(**options) for _ in range(count)]

    def pdb(
        self,
        pdb_name: str | None = None,
        *,
        labels: Mapping[str, str] | None,
        namespace: str = "default",
        min_available: int | str | None = None,
        max_unavailable: int | str | None = None,
        unhealthy_policy: str | None = None,
    ) -> str:
        """A policy/v1 PodDisruptionBudget selecting ``labels`` (None: no selector)."""
        pdb_name = pdb_name or name("pdb")
        spec: dict[str, Any] = {}
        if labels is not None:
            spec["selector"] = {"matchLabels": dict(labels)}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        if unhealthy_policy is not None:
            spec["unhealthyPodEvictionPolicy"] = unhealthy_policy
        manifest = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": pdb_name, "namespace": namespace},
            "spec": spec,
        }
        ClusterPDB.objects.create(namespace=namespace, name=pdb_name, manifest=manifest)
        return f"{namespace}/{pdb_name}"

    # ------------------------------------------------------------------ running it

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def plan(self):
        """``disruption.plan`` now: the round's commands and why each other node is left."""
        return disruption.plan(self.now)

    def step(self, seconds: float = 16.0) -> Disruption | None:
        """One disruption round now, then ``seconds`` later on the clock; replacements the
        round created launch and register at once, and pending pods are bound."""
        result = disruption.run(self.now)
        self.launch_and_register()
        self.advance(seconds)
        return result

    def launch_and_register(self) -> None:
        for claim in NodeClaim.objects.filter(state=NodeClaim.State.PENDING):
            option = claim.launch_options[0]
            claim.move(
                NodeClaim.State.PENDING,
                NodeClaim.State.LAUNCHED,
                instance_id=f"i-{next(_names):012x}00000",
                instance_type=option["instanceType"],
                zone=option["zone"],
                capacity_type=option["capacityType"],
                price_per_hour=option["price"],
                launched_at=timezone.now(),
            )
        simulated.register_launched(0, self.catalog.instance_type)
        simulated.bind_pending(default_solver())

    def settle(self, rounds: int = 20, seconds: float = 16.0) -> list[Disruption]:
        """Rounds until nothing is in progress and a round plans nothing; the commands run."""
        for _ in range(rounds):
            self.step(seconds)
            if not Disruption.objects.filter(state__in=disruption.ACTIVE).exists():
                break
        return list(Disruption.objects.order_by("planned_at", "pk"))

    # ------------------------------------------------------------------ looking at it

    def node_names(self) -> set[str]:
        return set(ClusterNode.objects.values_list("name", flat=True))

    def claims(self, *states: str) -> list[NodeClaim]:
        rows = NodeClaim.objects.all()
        return list(rows.filter(state__in=states) if states else rows)

    def replacements(self) -> list[NodeClaim]:
        return list(NodeClaim.objects.exclude(disruption=None))

    def disruptions(self, *states: str) -> list[Disruption]:
        rows = Disruption.objects.order_by("planned_at", "pk")
        return list(rows.filter(state__in=states) if states else rows)

    def tainted(self, node_name: str) -> bool:
        manifest = ClusterNode.objects.get(name=node_name).manifest
        return any(t.get("key") == DISRUPTED_TAINT_KEY for t in (manifest.get("spec") or {}).get("taints") or [])

    def node_of(self, pod_key: str) -> str:
        namespace, pod_name = pod_key.split("/")
        return ClusterPod.objects.get(namespace=namespace, name=pod_name).node_name

    def note(self, node_name: str) -> str:
        return ClusterNode.objects.get(name=node_name).disruption_note

    def at(self) -> datetime:
        return self.now


def keys(pods: Iterable[str]) -> set[str]:
    return set(pods)


@pytest.fixture
def disruption_env(db, redis_url, settings, monkeypatch):
    """Upstream's disruption suites' BeforeEach: an empty simulated cluster with the
    EC2NodeClass ``default``, the real disruption service over it (``disruption_env.py``)."""
    from provisioning import cluster as cluster_package
    from provisioning.services import connections
    from provisioning.services import disruption as service

    settings.REDIS_URL = redis_url
    connections.reset()
    recording = RecordingCluster()
    monkeypatch.setattr(service, "get_cluster", lambda: recording)
    monkeypatch.setattr(cluster_package, "get_cluster", lambda: recording)
    cloud = StubCloud()
    monkeypatch.setattr("provisioning.services.cloud.get_cloud", lambda: cloud)
    env = DisruptionEnv(recording)
    env.cloud = cloud
    yield env
    connections.reset()
